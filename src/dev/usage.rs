//! What a quota of the emulated exports counts: the bytes and files of a
//! directory tree, walked without following a symlink and without entering
//! another filesystem mounted inside it. It must not decide which tree
//! (`exports.rs` confines the path to its export).

use crate::fake::DirUsage;
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Every inode of the tree at `root` counts as a file, `root` included (as
/// the empty root of a filesystem shows one file); regular files add their
/// length. A symlink is one file of its own, never what it points at; a
/// hard link counts once. Entries that vanish during the walk are skipped,
/// and so is `skip` (a directory the backend keeps outside the count).
pub fn tree_usage(root: &Path, skip: Option<&Path>) -> std::io::Result<DirUsage> {
    let top = std::fs::symlink_metadata(root)?;
    let mut seen = HashSet::from([top.ino()]);
    let mut usage = DirUsage {
        bytes: 0,
        files: 1,
        collected_at: None,
    };
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let path = entry?.path();
            if skip == Some(path.as_path()) {
                continue;
            }
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if meta.dev() != top.dev() || !seen.insert(meta.ino()) {
                continue;
            }
            usage.files += 1;
            if meta.is_file() {
                usage.bytes += meta.len() as i64;
            } else if meta.is_dir() {
                pending.push(path);
            }
        }
    }
    Ok(usage)
}
