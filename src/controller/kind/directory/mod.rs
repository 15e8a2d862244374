//! Directory volumes: each volume is a directory `/csi-volumes/<name>` of
//! a shared filesystem (the parent: one an admin made, which the driver
//! never deletes, or one of a pool the driver runs), carrying the
//! driver's ownership marker and capped by a quota. A directory volume is
//! its marker: without it nothing is listed, published, grown or removed.
//! Its rooms, from the ground up:
//! - `parent`: the parent and its files: the parents classes name, their
//!   mounts on the controller, each volume's directory and marker, what
//!   deleted volumes keep, the records of directory snapshots;
//! - `ledger`: each parent's quotas, the account the active controller
//!   keeps of them, the room calls under way claim, the usage sampled;
//! - `volume`: one volume found, described, published and its quota
//!   changed;
//! - `snapshots` (parts of snapshots of the parent) and `pool` (the
//!   filesystems of a pool the driver runs, and where a volume goes);
//! - `restore`: the jobs that fill a new volume from a snapshot or clone;
//! - `lifecycle` (create, delete, capacity), `autogrow` and `upkeep`, the
//!   background round.
//!
//! Their state lives in `controller::state`, below them all.

mod autogrow;
pub(crate) mod ledger;
mod lifecycle;
pub(crate) mod parent;
mod pool;
mod restore;
pub mod snapshots;
mod upkeep;
pub(crate) mod volume;

pub use autogrow::round as autogrow_round;
pub use lifecycle::capacity::capacity;
pub use lifecycle::create::create;
pub use lifecycle::delete::delete;
pub use pool::TendPolicy;
pub use restore::{start_watch, stop_all as stop_copies};
pub use upkeep::upkeep;
pub use volume::access::{publish_target, unpublish};
pub use volume::inspect::{describe, list, validate};
pub use volume::quota_changes::{expand, modify};
