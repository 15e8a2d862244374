//! The tags the driver puts on what it makes, beside the user's own. They
//! mark its filesystems (so ListVolumes lists only volumes, never other
//! filesystems of a shared Space), record what a clone was made from (the
//! API's `source_snapshot_id` may be missing), and tie a clone to the
//! snapshot it was copied through while the backend keeps that snapshot.
//! Everything that compares a volume's tags with a request's compares the
//! user's tags only. Tags use letters, digits, `-` and `.` and stay well
//! under the API's 50 characters. Every filesystem and snapshot the
//! driver makes also carries its cluster's tag (`Marks`), and what the
//! driver acts on is decided by `Marks`, never by the driver's tags alone.

use crate::cluster_id::ClusterId;
use crate::handles::{SnapshotId, VolumeId};
use crate::linode::{Filesystem, Snapshot};
use std::collections::BTreeSet;

/// On every filesystem this driver creates.
pub const MANAGED: &str = "csi.linodenfs.csi.linode.com";
/// On the snapshot a volume clone is copied through: not a VolumeSnapshot,
/// so never listed or returned as one.
pub const CLONE_SNAPSHOT: &str = "csi-clone-snapshot";
/// On a snapshot of a shared parent that directory snapshots are parts
/// of: never a whole-filesystem snapshot, never listed, returned, restored
/// or deleted as one (restoring it would hand over every tenant's data).
pub const DIRECTORY_SNAPSHOTS: &str = "csi-directory-snapshots";
/// On a temporary filesystem a restore copies a directory out of: never a
/// volume, never a parent, deleted once no restore needs it.
pub const RESTORE_SOURCE: &str = "csi-restore-source";
/// On every filesystem of a pool the driver runs: a shared parent it made
/// (never a volume), and the only kind of filesystem it ever prunes.
pub const POOL: &str = "csi-pool";
/// With the pool's name: which pool.
const POOL_NAME: &str = "csi-pool.";
/// With the Unix time a pool filesystem was first seen empty: the grace
/// period before it is pruned runs from there, across restarts.
const EMPTY_SINCE: &str = "csi-pool-empty.";

/// With the cluster identity: which installation made the object.
const CLUSTER: &str = "csi-cluster.";

/// Who made an object, by its tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Maker {
    /// This cluster: its tag is on it.
    Us,
    /// A driver that predates cluster identities: no cluster's tag. Still
    /// usable through its handle by the cluster that made it, and listed,
    /// but never swept, pruned, adopted or placed into.
    Unknown,
    /// Another cluster: never touched, and not found through a handle.
    Other,
}

/// The marks of this cluster's objects: every filesystem and snapshot the
/// driver makes carries its cluster's tag beside the driver's own, and
/// every predicate that decides whether to act on one asks here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marks {
    cluster: ClusterId,
    tag: String,
}

impl Marks {
    pub fn new(cluster: &ClusterId) -> Marks {
        Marks {
            cluster: cluster.clone(),
            tag: format!("{CLUSTER}{cluster}"),
        }
    }

    /// The identity this cluster's objects carry.
    pub fn cluster(&self) -> &ClusterId {
        &self.cluster
    }

    /// The tag every new filesystem and snapshot of this cluster carries.
    pub fn cluster_tag(&self) -> String {
        self.tag.clone()
    }

    /// `driver`'s tags with this cluster's.
    pub fn with_cluster(&self, driver: &[&str]) -> Vec<String> {
        driver
            .iter()
            .map(|t| t.to_string())
            .chain([self.cluster_tag()])
            .collect()
    }

    pub fn maker(&self, tags: &[String]) -> Maker {
        match tags.iter().find(|t| t.starts_with(CLUSTER)) {
            Some(t) if *t == self.tag => Maker::Us,
            Some(_) => Maker::Other,
            None => Maker::Unknown,
        }
    }

    /// Whether `tags` say this cluster made the object: only such an
    /// object is ever swept, pruned or placed into.
    pub fn made(&self, tags: &[String]) -> bool {
        self.maker(tags) == Maker::Us
    }

    /// Whether `fs` is one of this cluster's whole-filesystem volumes (or
    /// one a driver made before clusters had identities). Only such a
    /// filesystem is ever deleted, snapshotted, cloned or changed as a
    /// volume; any other (a shared parent, an admin's own, another
    /// cluster's) only read.
    pub fn is_volume(&self, fs: &Filesystem) -> bool {
        fs.tags.iter().any(|t| t == MANAGED) && self.maker(&fs.tags) != Maker::Other
    }

    /// Unless `fs` is one of this cluster's volumes: NotFound for another
    /// cluster's (its handle means nothing here), else FailedPrecondition
    /// naming why. What destroys, copies or changes data (`what`:
    /// "deleted", "snapshotted"...) acts only on what the driver made.
    pub fn require_volume(&self, fs: &Filesystem, what: &str) -> Result<(), crate::Error> {
        if self.is_volume(fs) {
            return Ok(());
        }
        if self.maker(&fs.tags) == Maker::Other {
            return Err(crate::Error::NotFound(format!(
                "NFS filesystem {}/{} is another cluster's volume (its {CLUSTER} tag is not {}): not a volume of this cluster",
                fs.space_id, fs.id, self.tag
            )));
        }
        Err(crate::Error::FailedPrecondition(format!(
            "NFS filesystem {}/{} (\"{}\") is not a volume of this driver (it lacks the {MANAGED} tag: a shared filesystem of directory volumes, or one made outside the driver), so it is not {what} through CSI",
            fs.space_id, fs.id, fs.label
        )))
    }

    /// Whether the driver's mark is on `s` and no other cluster's (every
    /// snapshot it takes of a volume carries it; see `snapshots` for those
    /// taken before it did).
    pub fn is_marked_snapshot(&self, s: &Snapshot) -> bool {
        s.tags.iter().any(|t| t == MANAGED) && self.maker(&s.tags) != Maker::Other
    }

    /// Whether `s` is a snapshot of a shared parent this cluster (or a
    /// driver before identities) took for directory snapshots.
    pub fn is_directory_snapshots(&self, s: &Snapshot) -> bool {
        is_directory_snapshots(s) && self.maker(&s.tags) != Maker::Other
    }

    /// Whether `fs` is a filesystem of this cluster's pool `name`: the
    /// pool's tags and this cluster's, never the pool's tags alone.
    pub fn is_pool_member(&self, fs: &Filesystem, name: &str) -> bool {
        is_pool_member(fs, name) && self.made(&fs.tags)
    }

    /// Whether `fs` may hold volumes of this cluster's pool `name`: a
    /// member, or a filesystem of the pool made before clusters had
    /// identities (never placed into or pruned, but its volumes are listed).
    pub fn holds_pool_volumes(&self, fs: &Filesystem, name: &str) -> bool {
        is_pool_member(fs, name) && self.maker(&fs.tags) != Maker::Other
    }

    /// Whether `fs` is a temporary filesystem of this cluster's restores.
    pub fn is_restore_source(&self, fs: &Filesystem) -> bool {
        is_restore_source(fs) && self.made(&fs.tags)
    }
}

/// Whether `fs` is a whole-filesystem volume of any cluster's driver:
/// never a parent of directory volumes, whoever made it.
pub fn is_any_volume(fs: &Filesystem) -> bool {
    fs.tags.iter().any(|t| t == MANAGED)
}

/// What every tag recording a filesystem's source starts with.
macro_rules! source_prefix {
    () => {
        "csi-source-"
    };
}
const SOURCE_SNAPSHOT: &str = concat!(source_prefix!(), "snapshot.");
const SOURCE_VOLUME: &str = concat!(source_prefix!(), "volume.");
const KEPT_SNAPSHOT: &str = "csi-kept-snapshot.";

/// What a filesystem was made from, as its tag records it.
pub fn source_snapshot(id: &SnapshotId) -> String {
    format!(
        "{SOURCE_SNAPSHOT}{}.{}.{}",
        id.space, id.filesystem, id.snapshot
    )
}

pub fn source_volume(id: &VolumeId) -> String {
    format!("{SOURCE_VOLUME}{}.{}", id.space, id.filesystem)
}

/// On a clone whose copy snapshot the backend refused to delete while the
/// clone existed: deleting the clone's volume deletes that snapshot too.
pub fn kept_snapshot(id: &SnapshotId) -> String {
    format!(
        "{KEPT_SNAPSHOT}{}.{}.{}",
        id.space, id.filesystem, id.snapshot
    )
}

/// The copy snapshot a clone's tags say was kept, if any.
pub fn kept_snapshot_of(tags: &[String]) -> Option<SnapshotId> {
    tags.iter().find_map(|t| {
        let rest = t.strip_prefix(KEPT_SNAPSHOT)?;
        let mut parts = rest.split('.').map(|p| p.parse::<u64>().ok());
        match (parts.next()??, parts.next()??, parts.next()??, parts.next()) {
            (space, filesystem, snapshot, None) => Some(SnapshotId {
                space,
                filesystem,
                snapshot,
            }),
            _ => None,
        }
    })
}

/// Whether `tags` record what the filesystem was made from.
pub fn records_a_source(tags: &[String]) -> bool {
    tags.iter().any(|t| t.starts_with(source_prefix!()))
}

/// Whether `s` is a snapshot of a shared parent taken for directory snapshots.
pub fn is_directory_snapshots(s: &Snapshot) -> bool {
    s.tags.iter().any(|t| t == DIRECTORY_SNAPSHOTS)
}

/// Whether `fs` is a temporary filesystem of a restore.
pub fn is_restore_source(fs: &Filesystem) -> bool {
    fs.tags.iter().any(|t| t == RESTORE_SOURCE)
}

/// The tag naming pool `name`.
pub fn pool(name: &str) -> String {
    format!("{POOL_NAME}{name}")
}

/// Whether `fs` carries pool `name`'s tags (made by any cluster, or
/// tagged by hand: see `Marks::is_pool_member`).
fn is_pool_member(fs: &Filesystem, name: &str) -> bool {
    let named = pool(name);
    fs.tags.iter().any(|t| t == POOL) && fs.tags.contains(&named)
}

/// The pool `fs` belongs to, if the driver made it for one.
pub fn pool_name_of(fs: &Filesystem) -> Option<&str> {
    if !is_pool(fs) {
        return None;
    }
    fs.tags.iter().find_map(|t| t.strip_prefix(POOL_NAME))
}

/// Whether `fs` belongs to any pool the driver runs.
pub fn is_pool(fs: &Filesystem) -> bool {
    fs.tags.iter().any(|t| t == POOL)
}

/// The tag recording that a pool filesystem was first seen empty at `unix`.
pub fn empty_since(unix: u64) -> String {
    format!("{EMPTY_SINCE}{unix}")
}

/// When `fs`'s tags say it was first seen empty, if they do.
pub fn empty_since_of(fs: &Filesystem) -> Option<u64> {
    fs.tags
        .iter()
        .find_map(|t| t.strip_prefix(EMPTY_SINCE)?.parse().ok())
}

/// `fs`'s tags without the empty-since record.
pub fn without_empty_since(fs: &Filesystem) -> Vec<String> {
    fs.tags
        .iter()
        .filter(|t| !t.starts_with(EMPTY_SINCE))
        .cloned()
        .collect()
}

fn is_driver_tag(tag: &str) -> bool {
    tag == MANAGED
        || tag == CLONE_SNAPSHOT
        || tag == DIRECTORY_SNAPSHOTS
        || tag == RESTORE_SOURCE
        || tag == POOL
        || [
            SOURCE_SNAPSHOT,
            SOURCE_VOLUME,
            KEPT_SNAPSHOT,
            POOL_NAME,
            EMPTY_SINCE,
            CLUSTER,
        ]
        .iter()
        .any(|p| tag.starts_with(p))
}

/// The user's tags among `tags`, as a set.
pub fn user_tags(tags: &[String]) -> BTreeSet<&str> {
    tags.iter()
        .map(String::as_str)
        .filter(|t| !is_driver_tag(t))
        .collect()
}

/// The driver's tags among `tags`, in order.
pub fn driver_tags(tags: &[String]) -> Vec<String> {
    tags.iter().filter(|t| is_driver_tag(t)).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tagged(tags: &[&str]) -> Filesystem {
        serde_json::from_value(serde_json::json!({
            "id": 9, "space_id": 7, "label": "x", "region": "us-ord", "status": "active",
            "tags": tags,
        }))
        .unwrap()
    }

    /// What each cluster may act on, by the tags alone.
    #[test]
    fn marks_tell_this_cluster_s_objects_from_older_and_other_ones() {
        let us = Marks::new(&ClusterId::parse("us").unwrap());
        let (ours, older, theirs) = (
            tagged(&[MANAGED, "csi-cluster.us"]),
            tagged(&[MANAGED]),
            tagged(&[MANAGED, "csi-cluster.them"]),
        );
        assert!(us.is_volume(&ours) && us.is_volume(&older) && !us.is_volume(&theirs));
        assert!(us.made(&ours.tags) && !us.made(&older.tags));
        assert!(matches!(
            us.require_volume(&theirs, "deleted"),
            Err(crate::Error::NotFound(_))
        ));
        assert!(matches!(
            us.require_volume(&tagged(&[]), "deleted"),
            Err(crate::Error::FailedPrecondition(_))
        ));
        let pool = |cluster: Option<&str>| {
            let mut t = vec![POOL.to_string(), pool("p")];
            t.extend(cluster.map(|c| format!("{CLUSTER}{c}")));
            tagged(&t.iter().map(String::as_str).collect::<Vec<_>>())
        };
        assert!(us.is_pool_member(&pool(Some("us")), "p"));
        assert!(
            !us.is_pool_member(&pool(None), "p"),
            "placed into by no one"
        );
        assert!(
            us.holds_pool_volumes(&pool(None), "p"),
            "its volumes listed"
        );
        assert!(!us.holds_pool_volumes(&pool(Some("them")), "p"));
        assert!(!us.is_pool_member(&pool(Some("us")), "q"));
        assert_eq!(
            us.with_cluster(&[RESTORE_SOURCE]),
            [RESTORE_SOURCE, "csi-cluster.us"]
        );
        assert!(user_tags(&us.with_cluster(&[MANAGED])).is_empty());
    }

    #[test]
    fn driver_tags_stay_apart_from_the_users() {
        let snap = SnapshotId {
            space: 7,
            filesystem: 101,
            snapshot: 9001,
        };
        let vol = VolumeId {
            space: 7,
            filesystem: 101,
        };
        let tags = vec![
            "team-a".to_string(),
            MANAGED.to_string(),
            source_snapshot(&snap),
            source_volume(&vol),
            kept_snapshot(&snap),
        ];
        assert_eq!(user_tags(&tags), BTreeSet::from(["team-a"]));
        assert_eq!(driver_tags(&tags).len(), 4);
        assert_eq!(kept_snapshot_of(&tags), Some(snap));
        assert_eq!(kept_snapshot_of(&["csi-kept-snapshot.7.x.1".into()]), None);
        assert_eq!(
            kept_snapshot_of(&["csi-kept-snapshot.7.1.2.3".into()]),
            None
        );
        for t in &tags {
            assert!(t.len() < 50, "{t}");
        }
    }
}
