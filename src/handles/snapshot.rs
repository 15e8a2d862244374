//! Snapshot handles of both kinds: a whole filesystem's Linode snapshot
//! `{s}/{f}/{snapshot}`, and a snapshot of one directory volume
//! `{s}/{parent}/{parent snapshot}/{entry}` (the Linode snapshot of the
//! shared parent that holds it, and the entry the driver recorded for it
//! on the parent), with the group snapshot id of the same shape. Pure
//! parsing: whether such a snapshot exists is the controller's to check.

use super::{parse_ids, DirName, SnapshotId, VolumeId};
use crate::Error;
use std::fmt;

/// `"{space}/{parent}/{parent_snapshot}/{entry}"`: one directory's share of
/// a snapshot of its shared parent. The entry starts with a letter, so
/// the id has exactly one reading.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DirSnapshotId {
    pub space: u64,
    pub filesystem: u64,
    pub snapshot: u64,
    pub entry: DirName,
}

/// A volume group snapshot: the parent snapshot its members share and the
/// group's own entry. Same shape as a member's id; the two entries live
/// apart, so neither is ever taken for the other.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupSnapshotId(pub DirSnapshotId);

/// Either kind of snapshot handle.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SnapshotHandle {
    Filesystem(SnapshotId),
    Directory(DirSnapshotId),
}

impl DirSnapshotId {
    pub fn parse(raw: &str) -> Result<DirSnapshotId, Error> {
        let bad = || {
            Error::InvalidArgument(format!(
                "snapshot id {raw:?} must have format {{space_id}}/{{filesystem_id}}/{{snapshot_id}}/{{name}} with positive integers and a name"
            ))
        };
        let (ids, entry) = raw.rsplit_once('/').ok_or_else(bad)?;
        let Some(&[space, filesystem, snapshot]) = parse_ids(ids, 3).as_deref() else {
            return Err(bad());
        };
        let entry = DirName::parse(entry).map_err(|_| bad())?;
        Ok(DirSnapshotId {
            space,
            filesystem,
            snapshot,
            entry,
        })
    }

    /// The shared filesystem whose snapshot this is a part of.
    pub fn parent(&self) -> VolumeId {
        VolumeId {
            space: self.space,
            filesystem: self.filesystem,
        }
    }

    /// The Linode snapshot of the parent.
    pub fn parent_snapshot(&self) -> SnapshotId {
        SnapshotId {
            space: self.space,
            filesystem: self.filesystem,
            snapshot: self.snapshot,
        }
    }
}

impl GroupSnapshotId {
    pub fn parse(raw: &str) -> Result<GroupSnapshotId, Error> {
        DirSnapshotId::parse(raw).map(GroupSnapshotId).map_err(|_| {
            Error::InvalidArgument(format!(
                "group snapshot id {raw:?} must have format {{space_id}}/{{filesystem_id}}/{{snapshot_id}}/{{name}} with positive integers and a name"
            ))
        })
    }
}

impl SnapshotHandle {
    /// Four parts: a directory's; anything else must be a filesystem's.
    pub fn parse(raw: &str) -> Result<SnapshotHandle, Error> {
        if raw.split('/').count() == 4 {
            DirSnapshotId::parse(raw).map(SnapshotHandle::Directory)
        } else {
            SnapshotId::parse(raw).map(SnapshotHandle::Filesystem)
        }
    }

    /// The filesystem the snapshot was taken of: the volume, or the parent.
    pub fn filesystem(&self) -> VolumeId {
        match self {
            SnapshotHandle::Filesystem(id) => id.volume(),
            SnapshotHandle::Directory(id) => id.parent(),
        }
    }
}

impl fmt::Display for DirSnapshotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}/{}",
            self.space, self.filesystem, self.snapshot, self.entry
        )
    }
}

impl fmt::Display for GroupSnapshotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for SnapshotHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotHandle::Filesystem(id) => id.fmt(f),
            SnapshotHandle::Directory(id) => id.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_snapshot_ids() {
        let id = DirSnapshotId::parse("42/7/900/snap-1").unwrap();
        assert_eq!(id.to_string(), "42/7/900/snap-1");
        assert_eq!(id.parent().to_string(), "42/7");
        assert_eq!(id.parent_snapshot().to_string(), "42/7/900");
        assert_eq!(
            SnapshotHandle::parse("42/7/900/snap-1").unwrap(),
            SnapshotHandle::Directory(id)
        );
        assert!(matches!(
            SnapshotHandle::parse("42/7/900").unwrap(),
            SnapshotHandle::Filesystem(_)
        ));
        for bad in [
            "42/7/900/",
            "42/7/900/9",
            "42/7/x/snap",
            "42/7/0/snap",
            "42/07/9/snap",
            "42/7/9/..",
            "42/7/9/a/b",
            "42/7/9/A",
            "42/7/snap",
            "42/7/9/snap ",
            "/7/9/snap",
        ] {
            assert!(
                matches!(SnapshotHandle::parse(bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
        assert!(GroupSnapshotId::parse("1/2/3/g").is_ok());
        assert!(GroupSnapshotId::parse("1/2/3").is_err());
    }
}
