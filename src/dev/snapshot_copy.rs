//! The dev backend's copy of an export's tree, as a snapshot or a clone
//! holds it: what a filesystem snapshot keeps, kept (see `fs_tree`).

use crate::Result;
use std::path::Path;

/// A copy of `from` at `to` keeping what a filesystem snapshot keeps:
/// modes, owners, times, symlinks and hard links.
pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    let options = crate::fs_tree::CopyOptions {
        threads: 2,
        ..Default::default()
    };
    crate::fs_tree::copy_tree(
        &crate::fs_tree::Dir::open(from)?,
        &crate::fs_tree::Dir::open(to)?,
        &options,
    )?;
    Ok(())
}
