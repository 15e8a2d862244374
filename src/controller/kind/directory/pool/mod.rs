//! Pools of shared filesystems the driver runs for `subdirectory` classes
//! that name `shared-filesystem-pool`: it makes the pool's filesystems
//! itself (`grow`), tagged as the pool's and never as volumes, places each
//! new volume on the fullest one with room (`place`), and in the
//! background keeps the class's spares ready and deletes empty ones after
//! a grace period (`tend`). Whatever it decides is read back from Linode
//! (the pool's tags, an empty filesystem's `empty since` tag) and the
//! filesystems' own files, never from memory alone, so kill -9 and a new
//! leader lose nothing; memory only orders the search (`Pools`' hints) and
//! keeps one decision per pool at a time. The volumes themselves are made,
//! grown and deleted as any directory volume: a pool only chooses parents.

mod emptiness;
mod grow;
mod members;
mod place;
mod tend;

pub use place::{capacity, place, Placed, Seen};
pub use tend::{tend, TendPolicy};
