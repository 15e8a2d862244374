//! Whether a pool filesystem holds nothing at all: no call under way has
//! claimed room on it, its tree is at most a few empty directories (any
//! file is a marker, a snapshot record, a ledger or a tenant's data), and
//! it has no quota but its root one. Anything unexpected counts as in use:
//! what is pruned is deleted with everything on it.

use crate::controller::kind::directory::ledger::account::Purpose;
use crate::controller::kind::directory::volume::lookup::quota_list;
use crate::controller::state::controller::Controller;
use crate::linode::Filesystem;
use crate::Error;
use std::path::Path;

/// Deeper than the driver's own empty directories (`csi-volumes/.owners`).
const DEPTH: u32 = 3;
/// More entries than the driver's own empty directories.
const ENTRIES: u32 = 16;

/// Whether `fs` is empty; `purpose` says how fresh its quotas must be
/// (`Fresh` before it is deleted).
pub(super) fn is_empty(c: &Controller, fs: &Filesystem, purpose: Purpose) -> Result<bool, Error> {
    if c.room.claimed(fs.space_id, fs.id) {
        return Ok(false);
    }
    let mtls = c.spaces.mtls_mode(fs.space_id)?;
    let root = c.shares.root(fs, mtls.as_ref())?;
    let mut budget = ENTRIES;
    if !only_empty_directories(&root, DEPTH, &mut budget)? {
        return Ok(false);
    }
    match quota_list(c, fs, purpose).1 {
        Ok(all) => Ok(all.iter().all(|q| q.is_root)),
        Err(Error::Unimplemented(_)) => Ok(true),
        Err(e) => Err(e),
    }
}

/// Whether everything under `dir` is a directory, at most `depth` deep and
/// `budget` entries in all. Never follows a link.
fn only_empty_directories(dir: &Path, depth: u32, budget: &mut u32) -> Result<bool, Error> {
    let read = |e: std::io::Error| Error::Internal(format!("read {}: {e}", dir.display()));
    for entry in std::fs::read_dir(dir).map_err(read)? {
        let entry = entry.map_err(read)?;
        if *budget == 0 || depth == 0 || !entry.file_type().map_err(read)?.is_dir() {
            return Ok(false);
        }
        *budget -= 1;
        if !only_empty_directories(&entry.path(), depth - 1, budget)? {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_few_empty_directories_are_empty() {
        let dir = crate::test_support::Scratch::new("pool-emptiness");
        let root = dir.path();
        let check = || only_empty_directories(root, DEPTH, &mut ENTRIES.clone()).unwrap();
        assert!(check());
        std::fs::create_dir_all(root.join("csi-volumes/.owners")).unwrap();
        assert!(check());
        std::fs::write(root.join("csi-volumes/.owners/pvc-a"), "x").unwrap();
        assert!(!check());
        std::fs::remove_file(root.join("csi-volumes/.owners/pvc-a")).unwrap();
        std::fs::create_dir_all(root.join("a/b/c/d")).unwrap();
        assert!(!check(), "deeper than the driver's own");
        std::fs::remove_dir_all(root.join("a")).unwrap();
        std::os::unix::fs::symlink("/", root.join("link")).unwrap();
        assert!(!check(), "a link is not an empty directory");
    }
}
