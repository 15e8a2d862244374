//! The keys the controller's operation locks and in-doubt records are kept
//! under, typed, so each key is spelled in one place and two operations
//! that must exclude each other cannot spell it differently. Nothing here
//! holds a lock or a record: that is `locks` and `in_doubt`.

use crate::handles::{DirName, SubdirId, VolumeId};
use std::fmt;

/// What an operation lock is taken on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Lock {
    /// A new whole filesystem, by the label the backend knows (two CSI
    /// names that map to one label are one filesystem).
    Create { label: String },
    /// A change to a whole-filesystem volume's tags or squash policy.
    Modify(VolumeId),
    /// A snapshot of a whole-filesystem volume.
    Snapshot(VolumeId),
    /// Anything that changes a directory volume.
    Directory(SubdirId),
    /// A directory snapshot (or a clone's), by its entry on the parent.
    DirSnapshot(VolumeId, DirName),
    /// A group snapshot, by its entry (its parent is not known until its
    /// members are read).
    Group(DirName),
    /// A new volume of a pool, by its directory name, until it is placed
    /// and made: two calls for one name must not land on two filesystems.
    Placement {
        space: u64,
        pool: String,
        name: DirName,
    },
}

impl fmt::Display for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lock::Create { label } => write!(f, "create/{label}"),
            Lock::Modify(vol) => write!(f, "modify/{vol}"),
            Lock::Snapshot(vol) => write!(f, "snapshot/{vol}"),
            Lock::Directory(id) => write!(f, "subdirectory/{id}"),
            Lock::DirSnapshot(vol, entry) => write!(f, "dir-snapshot/{vol}/{entry}"),
            Lock::Group(entry) => write!(f, "group-snapshot/{entry}"),
            Lock::Placement { space, pool, name } => write!(f, "pool/{space}/{pool}/{name}"),
        }
    }
}

/// A write whose outcome may be unknown (see `in_doubt`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Doubt {
    /// The POST of a filesystem labelled `label` in `space`.
    Filesystem { space: u64, label: String },
    /// The POST of a snapshot labelled `label` of `source`.
    Snapshot { source: VolumeId, label: String },
    /// The POST of a directory volume's quota.
    Quota(SubdirId),
    /// The PUT of a filesystem's access policy.
    Policy(VolumeId),
}
