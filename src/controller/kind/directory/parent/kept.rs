//! What deleted volumes still hold on a shared parent: the directories
//! `on-delete: archive` moved into the archive and those `retain` left in
//! place keep their bytes while their quota is gone, so the room a parent
//! can still promise must count them. They are recorded in a ledger file
//! per cluster, `/csi-volumes/.kept-<cluster>` (`.kept` before clusters
//! had identities), a line `<bytes> <entry>` each (the entry's path under
//! `/csi-volumes`), written whole (a new file renamed over it), so it
//! survives restarts and a new leader and is never seen half written. Each
//! cluster rewrites only its own, so two clusters on one parent never lose
//! each other's entries; the room counts every cluster's. An entry whose directory is gone (the admin removed
//! the archive or the retained directory) no longer counts. The bytes are
//! what the volume's quota last showed used (`used_capacity_bytes`), else
//! its maximum: the backend's own measure, with no walk of the tree. File
//! operations only: no mounts, no Linode calls.

use super::own_files;
use crate::cluster_id::ClusterId;
use crate::handles::SUBDIRECTORY_BASE;
use crate::mutex::lock;
use crate::Error;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const LEDGER: &str = ".kept";
/// Between the ledger's name and its cluster's identity.
const OF_CLUSTER: &str = "-";
/// Far more than any parent's kept entries; a longer file is not ours.
const MAX_LEDGER_BYTES: u64 = 4 << 20;

/// Serialises the rewrites of every ledger of this process (the leader is
/// the only writer; deletes that keep data are rare).
static WRITING: Mutex<()> = Mutex::new(());

/// Cluster `cluster`'s ledger; `None`: the one before identities.
fn ledger(root: &Path, cluster: Option<&ClusterId>) -> PathBuf {
    let name = match cluster {
        Some(id) => format!("{LEDGER}{OF_CLUSTER}{id}"),
        None => LEDGER.to_string(),
    };
    root.join(SUBDIRECTORY_BASE).join(name)
}

/// Every cluster's ledger on the parent mounted at `root`.
fn ledgers(root: &Path) -> Result<Vec<PathBuf>, Error> {
    let base = root.join(SUBDIRECTORY_BASE);
    let entries = match std::fs::read_dir(&base) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::Internal(format!("list {}: {e}", base.display()))),
    };
    Ok(entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| {
            n == LEDGER
                || n.strip_prefix(LEDGER)
                    .and_then(|rest| rest.strip_prefix(OF_CLUSTER))
                    .is_some_and(|id| ClusterId::parse(id).is_ok())
        })
        .map(|n| base.join(n))
        .collect())
}

/// The entries of the ledger at `path` as written, whether or not their
/// directories still exist.
fn written(path: &Path) -> Result<Vec<(i64, String)>, Error> {
    let Some(text) = own_files::read(path, MAX_LEDGER_BYTES, "the kept-data ledger")? else {
        return Ok(Vec::new());
    };
    Ok(text
        .lines()
        .filter_map(|line| {
            let (bytes, entry) = line.split_once(' ')?;
            Some((bytes.parse::<i64>().ok()?.max(0), entry.to_string()))
        })
        .collect())
}

/// Whether `entry` still stands as a real directory under the base.
fn stands(root: &Path, entry: &str) -> bool {
    let safe = !entry.is_empty()
        && entry
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..");
    safe && std::fs::symlink_metadata(root.join(SUBDIRECTORY_BASE).join(entry))
        .is_ok_and(|m| m.is_dir())
}

/// The bytes kept on the parent mounted at `root`, by every cluster: the
/// entries whose directories still stand, each counted once.
pub fn total(root: &Path) -> Result<i64, Error> {
    let mut counted = std::collections::BTreeMap::new();
    for path in ledgers(root)? {
        for (bytes, entry) in written(&path)? {
            if stands(root, &entry) {
                counted.entry(entry).or_insert(bytes);
            }
        }
    }
    Ok(counted.into_values().fold(0i64, i64::saturating_add))
}

/// Records in `cluster`'s ledger that `entry` (a path under
/// `/csi-volumes`) keeps `bytes`, unless it is recorded already there or
/// in the ledger before identities (a retried delete keeps the first
/// figure, taken while the quota still existed). Entries of its own whose
/// directories are gone are dropped on the way.
pub fn keep(root: &Path, cluster: &ClusterId, entry: &str, bytes: i64) -> Result<(), Error> {
    let _one = lock(&WRITING);
    let own = ledger(root, Some(cluster));
    if written(&ledger(root, None))?
        .iter()
        .any(|(_, e)| e == entry)
    {
        return Ok(());
    }
    let mut entries: Vec<(i64, String)> = written(&own)?
        .into_iter()
        .filter(|(_, e)| e == entry || stands(root, e))
        .collect();
    if entries.iter().any(|(_, e)| e == entry) {
        return Ok(());
    }
    entries.push((bytes.max(0), entry.to_string()));
    let text: String = entries
        .iter()
        .map(|(bytes, entry)| format!("{bytes} {entry}\n"))
        .collect();
    let tmp = root
        .join(SUBDIRECTORY_BASE)
        .join(format!(".kept.{cluster}.new"));
    own_files::write(&own, &tmp, &text, "the kept-data ledger")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_entries_count_while_their_directories_stand() {
        let scratch = crate::test_support::Scratch::new("kept");
        let root = scratch.path();
        let base = root.join(SUBDIRECTORY_BASE);
        std::fs::create_dir_all(base.join(".archive/pvc-a-1")).unwrap();
        std::fs::create_dir_all(base.join("pvc-b")).unwrap();
        let us = ClusterId::parse("us").unwrap();
        assert_eq!(total(root).unwrap(), 0);
        keep(root, &us, ".archive/pvc-a-1", 100).unwrap();
        keep(root, &us, "pvc-b", 20).unwrap();
        keep(root, &us, "pvc-b", 999).unwrap();
        assert_eq!(total(root).unwrap(), 120, "a repeat keeps the first figure");
        std::fs::remove_dir(base.join("pvc-b")).unwrap();
        assert_eq!(
            total(root).unwrap(),
            100,
            "a removed directory no longer counts"
        );
        keep(root, &us, "../../etc", 5).unwrap();
        assert_eq!(
            total(root).unwrap(),
            100,
            "an entry out of the base never counts"
        );
        std::fs::write(ledger(root, Some(&us)), "garbage\n7 .archive/pvc-a-1\n").unwrap();
        assert_eq!(total(root).unwrap(), 7);
    }

    /// Two clusters on one parent: each rewrites its own ledger only, the
    /// room counts both, and what a driver before identities recorded
    /// still counts and is never recorded twice.
    #[test]
    fn each_cluster_keeps_its_own_ledger_and_the_room_counts_them_all() {
        let scratch = crate::test_support::Scratch::new("kept-clusters");
        let root = scratch.path();
        let base = root.join(SUBDIRECTORY_BASE);
        for dir in ["pvc-a", "pvc-b", "pvc-old"] {
            std::fs::create_dir_all(base.join(dir)).unwrap();
        }
        std::fs::write(ledger(root, None), "5 pvc-old\n").unwrap();
        let (a, b) = (
            ClusterId::parse("a").unwrap(),
            ClusterId::parse("b").unwrap(),
        );
        keep(root, &a, "pvc-a", 100).unwrap();
        keep(root, &b, "pvc-b", 20).unwrap();
        keep(root, &a, "pvc-old", 999).unwrap();
        assert_eq!(total(root).unwrap(), 125);
        assert_eq!(
            written(&ledger(root, Some(&a))).unwrap(),
            [(100, "pvc-a".into())]
        );
        assert_eq!(
            written(&ledger(root, Some(&b))).unwrap(),
            [(20, "pvc-b".into())]
        );
        std::fs::write(base.join(".kept-Not_Ours"), "1000 pvc-a\n").unwrap();
        assert_eq!(total(root).unwrap(), 125, "no ledger of the driver's");
    }
}
