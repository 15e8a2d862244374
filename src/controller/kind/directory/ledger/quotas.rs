//! The quotas of `subdirectory` volumes as the driver finds and makes them:
//! a volume's quota is the one whose path is `/csi-volumes/<name>`, or
//! `/<export>/csi-volumes/<name>` on a backend that writes the export in
//! front (both forms match everywhere); the room a parent has left is its
//! capacity less the maxima of its quotas. A filesystem's root quota (the
//! real backend shows one on every filesystem: `is_root`, path `/`, the
//! whole capacity) is never a volume's: it is not matched, listed,
//! counted or deleted. A POST of
//! the plain form that is refused is sent once more in the export form.
//! Nothing here decides codes beyond what `Cloud` answered.

use crate::handles::{DirName, SubdirId, SUBDIRECTORY_BASE};
use crate::linode::{Cloud, Filesystem, NewQuota, Quota, WriteError};
use crate::Error;

use crate::controller::kind::directory::parent::shares::export_of;

/// The two paths the quota of `name` may carry on `fs`.
fn paths(fs: &Filesystem, name: &DirName) -> (String, Option<String>) {
    let plain = name.path_in_share();
    let with_export = export_of(fs).map(|export| format!("{export}{plain}"));
    (plain, with_export)
}

/// Whether `q` is the quota of volume directory `name` of `fs`.
pub fn is_for(q: &Quota, fs: &Filesystem, name: &DirName) -> bool {
    let (plain, with_export) = paths(fs, name);
    !q.is_root && (q.path == plain || with_export.is_some_and(|p| q.path == p))
}

/// The quota of `name` among `quotas`, the first if (unexpectedly) several.
pub fn of_volume<'a>(quotas: &'a [Quota], fs: &Filesystem, name: &DirName) -> Option<&'a Quota> {
    quotas.iter().find(|q| is_for(q, fs, name))
}

/// The volume directory a quota of `fs` caps, when it is one of ours
/// (one level under the base), in either path form.
pub fn volume_name(q: &Quota, fs: &Filesystem) -> Option<DirName> {
    if q.is_root {
        return None;
    }
    let base = format!("/{SUBDIRECTORY_BASE}/");
    let export = export_of(fs);
    let inside = match export.as_deref().and_then(|e| q.path.strip_prefix(e)) {
        Some(rest) if rest.starts_with(&base) => rest,
        _ => q.path.as_str(),
    };
    DirName::parse(inside.strip_prefix(&base)?).ok()
}

/// What the quotas of `fs` promise, the root quota and `except`'s own aside.
pub fn committed(quotas: &[Quota], fs: &Filesystem, except: &DirName) -> i64 {
    let others: Vec<Quota> = quotas
        .iter()
        .filter(|q| !is_for(q, fs, except))
        .cloned()
        .collect();
    promised(&others)
}

/// What `quotas` promise together, the root quota aside.
pub fn promised(quotas: &[Quota]) -> i64 {
    quotas
        .iter()
        .filter(|q| !q.is_root)
        .map(|q| q.max_capacity_bytes.unwrap_or(0))
        .sum()
}

/// What a parent has promised besides the volume being sized.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Promised {
    /// The maxima of its other quotas (the root quota and the volume's own
    /// aside), the admin's own quotas included.
    pub quotas: i64,
    /// What deleted volumes' archived and retained directories hold (see `kept`).
    pub kept: i64,
    /// What calls under way have claimed and the list does not show yet
    /// (see `room`).
    pub under_way: i64,
    /// What the parent holds besides the volume, as its root quota last
    /// sampled it: data no quota promises (an admin's, or a filesystem
    /// that only looks like a pool's) takes room all the same.
    pub used: i64,
}

impl Promised {
    /// Room taken: what is promised, or what is used where that is more.
    fn total(&self) -> i64 {
        self.quotas
            .saturating_add(self.kept)
            .max(self.used)
            .saturating_add(self.under_way)
    }
}

/// What the root quota among `quotas` last sampled the parent to hold; 0
/// where the backend has not sampled.
pub fn root_used(quotas: &[Quota]) -> i64 {
    quotas
        .iter()
        .find(|q| q.is_root)
        .and_then(|q| q.used_capacity_bytes)
        .unwrap_or(0)
}

/// What `fs` holds besides volume `name`, by the samples of its root
/// quota and the volume's own; 0 where the backend has not sampled.
fn used_besides(quotas: &[Quota], fs: &Filesystem, name: &DirName) -> i64 {
    let root = root_used(quotas);
    let own = quotas
        .iter()
        .find(|q| is_for(q, fs, name))
        .and_then(|q| q.used_capacity_bytes)
        .unwrap_or(0);
    root.saturating_sub(own).max(0)
}

/// A size that does not fit on its parent, with the figures that say why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoRoom {
    parent: String,
    capacity: i64,
    promised: Promised,
    asked: i64,
}

impl NoRoom {
    fn figures(&self) -> String {
        let Promised {
            quotas,
            kept,
            under_way,
            used,
        } = self.promised;
        let left = self.left();
        format!(
            "shared NFS filesystem {} holds {} bytes, of which other volumes' quotas promise {quotas}, data kept by deleted volumes {kept} and calls under way {under_way} (its data besides this volume's takes {used}), so {left} are left",
            self.parent, self.capacity
        )
    }

    /// No room at all on `fs`: it is going away.
    pub fn none(fs: &Filesystem) -> NoRoom {
        NoRoom {
            parent: format!("{}/{}", fs.space_id, fs.id),
            capacity: 0,
            promised: Promised::default(),
            asked: 0,
        }
    }

    /// The bytes that are left.
    pub fn left(&self) -> i64 {
        (self.capacity - self.promised.total()).max(0)
    }

    /// A new volume that does not fit: ResourceExhausted.
    pub fn for_create(&self) -> Error {
        Error::ResourceExhausted(format!(
            "{}; a volume of {} bytes does not fit",
            self.figures(),
            self.asked
        ))
    }

    /// A growth from `current` that does not fit: OutOfRange, which the
    /// resizer takes as infeasible, so the user may lower the request
    /// (ResourceExhausted would be retried for ever).
    pub fn for_growth(&self, current: i64) -> Error {
        Error::OutOfRange(format!(
            "{}; growing the volume from {current} to {} bytes needs {} more",
            self.figures(),
            self.asked,
            self.asked - current
        ))
    }
}

/// Whether a volume `name` of `asked` bytes fits beside what the other
/// quotas of `fs` promise, what deleted volumes keep and what calls under
/// way claim.
pub fn check_room(
    quotas: &[Quota],
    fs: &Filesystem,
    name: &DirName,
    asked: i64,
    kept: i64,
    under_way: i64,
) -> Result<(), NoRoom> {
    let Some(capacity) = fs.capacity_bytes() else {
        return Ok(());
    };
    let promised = Promised {
        quotas: committed(quotas, fs, name),
        kept,
        under_way,
        used: used_besides(quotas, fs, name),
    };
    if promised.total().saturating_add(asked) > capacity {
        return Err(NoRoom {
            parent: format!("{}/{}", fs.space_id, fs.id),
            capacity,
            promised,
            asked,
        });
    }
    Ok(())
}

/// POSTs the quota of `id`; a plain path refused as invalid is tried once
/// more in the export form (a 400 applied nothing).
pub fn post(
    cloud: &dyn Cloud,
    fs: &Filesystem,
    id: &SubdirId,
    max_capacity_bytes: i64,
    max_file_count: Option<i64>,
) -> Result<Quota, WriteError> {
    let (plain, with_export) = paths(fs, &id.name);
    let body = |path: String| NewQuota {
        path,
        max_capacity_bytes,
        max_file_count,
    };
    match cloud.create_quota(id.space, id.filesystem, &body(plain)) {
        Err(WriteError {
            error: Error::InvalidArgument(why),
            ..
        }) => match with_export {
            Some(path) => cloud
                .create_quota(id.space, id.filesystem, &body(path))
                .map_err(|e| WriteError {
                    error: e
                        .error
                        .context(format!("(the plain path was refused: {why})")),
                    ..e
                }),
            None => Err(WriteError {
                error: Error::InvalidArgument(why),
                maybe_applied: false,
            }),
        },
        other => other,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Filesystem 7/9 of 100 bytes, the unit tests' parent.
    pub(in crate::controller::kind::directory) fn fs() -> Filesystem {
        serde_json::from_value(serde_json::json!({
            "id": 9, "space_id": 7, "label": "team", "region": "us-ord", "status": "active",
            "max_capacity_bytes": 100,
            "mount_target_fqdn": "s.nfs.example:/team-9",
        }))
        .unwrap()
    }

    pub(in crate::controller::kind::directory) fn quota(path: &str, max: i64, root: bool) -> Quota {
        serde_json::from_value(serde_json::json!({
            "id": 1, "filesystem_id": 9, "path": path, "is_root": root,
            "max_capacity_bytes": max, "status": "active",
        }))
        .unwrap()
    }

    #[test]
    fn both_path_forms_match_and_name_the_volume() {
        let n = DirName::parse("pvc-a").unwrap();
        for path in ["/csi-volumes/pvc-a", "/team-9/csi-volumes/pvc-a"] {
            let q = quota(path, 1, false);
            assert!(is_for(&q, &fs(), &n), "{path}");
            assert_eq!(volume_name(&q, &fs()), Some(n.clone()), "{path}");
        }
        for path in [
            "/csi-volumes/pvc-a/x",
            "/other/csi-volumes/pvc-a",
            "/pvc-a",
            "/",
        ] {
            let q = quota(path, 1, false);
            assert!(!is_for(&q, &fs(), &n), "{path}");
        }
        assert_eq!(volume_name(&quota("/csi-volumes/A", 1, false), &fs()), None);
        assert_eq!(volume_name(&quota("/data", 1, false), &fs()), None);
        // Whatever path a backend gives its root quota, it is no volume's.
        let root = quota("/csi-volumes/pvc-a", 100, true);
        assert!(!is_for(&root, &fs(), &n));
        assert_eq!(volume_name(&root, &fs()), None);
    }

    #[test]
    fn room_excludes_the_root_quota_and_the_volume_itself() {
        let n = DirName::parse("pvc-a").unwrap();
        let quotas = vec![
            quota("/", 100, true),
            quota("/csi-volumes/pvc-b", 40, false),
            quota("/team-9/csi-volumes/pvc-a", 30, false),
        ];
        assert_eq!(committed(&quotas, &fs(), &n), 40);
        assert!(check_room(&quotas, &fs(), &n, 60, 0, 0).is_ok());
        assert!(matches!(
            check_room(&quotas, &fs(), &n, 61, 0, 0).map_err(|e| e.for_create()),
            Err(Error::ResourceExhausted(_))
        ));
        let no_room = check_room(&quotas, &fs(), &n, 50, 4, 7).unwrap_err();
        assert!(
            matches!(no_room.for_create(), Error::ResourceExhausted(m) if m.contains("kept by deleted volumes 4 and calls under way 7 (its data besides this volume's takes 0), so 49 are left")),
            "{no_room:?}"
        );
        assert!(
            matches!(no_room.for_growth(30), Error::OutOfRange(m) if m.contains("from 30 to 50 bytes needs 20 more")),
            "{no_room:?}"
        );
    }

    /// Data no quota promises takes room all the same: a parent whose root
    /// quota says 90 of 100 bytes are used has 10 left, whatever its
    /// quotas promise; the volume's own data is never counted against it.
    #[test]
    fn room_counts_what_the_root_quota_says_is_used() {
        let n = DirName::parse("pvc-a").unwrap();
        let used = |q: Quota, bytes: i64| Quota {
            used_capacity_bytes: Some(bytes),
            ..q
        };
        let squatted = vec![used(quota("/", 100, true), 90)];
        assert!(check_room(&squatted, &fs(), &n, 10, 0, 0).is_ok());
        let no_room = check_room(&squatted, &fs(), &n, 11, 0, 0).unwrap_err();
        assert_eq!(no_room.left(), 10);
        let own = vec![
            used(quota("/", 100, true), 90),
            used(quota("/csi-volumes/pvc-a", 60, false), 60),
        ];
        // Growing pvc-a to 70: 30 used besides it, 70 asked.
        assert!(check_room(&own, &fs(), &n, 70, 0, 0).is_ok());
        assert!(check_room(&own, &fs(), &n, 71, 0, 0).is_err());
        // Promises beyond the usage still count in full.
        let promised = vec![
            used(quota("/", 100, true), 5),
            quota("/csi-volumes/pvc-b", 80, false),
        ];
        assert!(check_room(&promised, &fs(), &n, 21, 0, 0).is_err());
    }
}
