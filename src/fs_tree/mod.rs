//! Walks of directory trees a tenant writes, made safe against what a
//! tenant can do to them: every step is relative to an open directory
//! (`dir`), nothing is followed, and a walk keeps its place on the heap
//! rather than in the thread's stack or in open descriptors, so neither
//! depth nor width can exhaust either (`remove`, `copy`). Nothing here
//! knows of volumes, markers or mounts.

mod copy;
pub mod dir;
mod remove;

pub use copy::{copy_tree, CopyOptions, CopyStats, Progress};
pub use dir::{c_name, Dir, Identity, Kind};
pub use remove::remove_tree;
