//! What deleted volumes still hold on a shared parent: the directories
//! `on-delete: archive` moved into the archive and those `retain` left in
//! place keep their bytes while their quota is gone, so the room a parent
//! can still promise must count them. They are recorded in one ledger file
//! of the driver's, `/csi-volumes/.kept`, a line `<bytes> <entry>` each
//! (the entry's path under `/csi-volumes`), written whole (a new file
//! renamed over it), so it survives restarts and a new leader and is never
//! seen half written. An entry whose directory is gone (the admin removed
//! the archive or the retained directory) no longer counts. The bytes are
//! what the volume's quota last showed used (`used_capacity_bytes`), else
//! its maximum: the backend's own measure, with no walk of the tree. File
//! operations only: no mounts, no Linode calls.

use super::own_files;
use crate::handles::SUBDIRECTORY_BASE;
use crate::mutex::lock;
use crate::Error;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const LEDGER: &str = ".kept";
/// Far more than any parent's kept entries; a longer file is not ours.
const MAX_LEDGER_BYTES: u64 = 4 << 20;

/// Serialises the rewrites of every ledger of this process (the leader is
/// the only writer; deletes that keep data are rare).
static WRITING: Mutex<()> = Mutex::new(());

fn ledger(root: &Path) -> PathBuf {
    root.join(SUBDIRECTORY_BASE).join(LEDGER)
}

/// The entries as written, whether or not their directories still exist.
fn written(root: &Path) -> Result<Vec<(i64, String)>, Error> {
    let Some(text) = own_files::read(&ledger(root), MAX_LEDGER_BYTES, "the kept-data ledger")?
    else {
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

/// The bytes kept on the parent mounted at `root`: the entries whose
/// directories still stand.
pub fn total(root: &Path) -> Result<i64, Error> {
    Ok(written(root)?
        .into_iter()
        .filter(|(_, entry)| stands(root, entry))
        .map(|(bytes, _)| bytes)
        .fold(0i64, i64::saturating_add))
}

/// Records that `entry` (a path under `/csi-volumes`) keeps `bytes`,
/// unless it is recorded already (a retried delete keeps the first
/// figure, taken while the quota still existed). Entries whose directories
/// are gone are dropped on the way.
pub fn keep(root: &Path, entry: &str, bytes: i64) -> Result<(), Error> {
    let _one = lock(&WRITING);
    let mut entries: Vec<(i64, String)> = written(root)?
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
    let tmp = root.join(SUBDIRECTORY_BASE).join(".kept.new");
    own_files::write(&ledger(root), &tmp, &text, "the kept-data ledger")
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
        assert_eq!(total(root).unwrap(), 0);
        keep(root, ".archive/pvc-a-1", 100).unwrap();
        keep(root, "pvc-b", 20).unwrap();
        keep(root, "pvc-b", 999).unwrap();
        assert_eq!(total(root).unwrap(), 120, "a repeat keeps the first figure");
        std::fs::remove_dir(base.join("pvc-b")).unwrap();
        assert_eq!(
            total(root).unwrap(),
            100,
            "a removed directory no longer counts"
        );
        keep(root, "../../etc", 5).unwrap();
        assert_eq!(
            total(root).unwrap(),
            100,
            "an entry out of the base never counts"
        );
        std::fs::write(ledger(root), "garbage\n7 .archive/pvc-a-1\n").unwrap();
        assert_eq!(total(root).unwrap(), 7);
    }
}
