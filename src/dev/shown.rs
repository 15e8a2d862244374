//! `DEV_QUIRKS=snapshot-directory`: a backend that shows each filesystem's
//! snapshots inside its export, at `<export>/.snapshot/<label>/`, as
//! NetApp-style filers do. This file owns that directory's layout: making
//! and removing one snapshot's entry, and hiding them all when the quirk is
//! off. Which snapshots exist, and what they hold, is `exports.rs`'s.

use super::snapshot_copy::copy_tree;
use crate::{Error, Result};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// Where the backend shows an export's snapshots, below its root.
pub const SNAPSHOT_DIRECTORY: &str = ".snapshot";

/// `<export>/.snapshot/<label>`, for a label that is one path segment.
fn entry(export_dir: &Path, label: &str) -> Result<PathBuf> {
    if label.is_empty() || label == "." || label == ".." || label.contains(['/', '\0']) {
        return Err(Error::InvalidArgument(format!(
            "snapshot label {label:?} cannot name a directory"
        )));
    }
    Ok(export_dir.join(SNAPSHOT_DIRECTORY).join(label))
}

/// Shows the snapshot labelled `label`, whose content is the copy at
/// `copy`, in the export at `export_dir`.
pub fn show(export_dir: &Path, label: &str, copy: &Path) -> Result<()> {
    let to = entry(export_dir, label)?;
    remove_tree(&to)?;
    copy_tree(copy, &to)
}

/// Whether the snapshot labelled `label` is shown in the export.
pub fn is_shown(export_dir: &Path, label: &str) -> bool {
    entry(export_dir, label).is_ok_and(|e| e.is_dir())
}

/// Stops showing the snapshot labelled `label`; the `.snapshot` directory
/// goes with the last one, so an export without snapshots shows none.
pub fn hide(export_dir: &Path, label: &str) -> Result<()> {
    remove_tree(&entry(export_dir, label)?)?;
    match std::fs::remove_dir(export_dir.join(SNAPSHOT_DIRECTORY)) {
        Err(e) if !matches!(e.kind(), ErrorKind::NotFound | ErrorKind::DirectoryNotEmpty) => {
            Err(e.into())
        }
        _ => Ok(()),
    }
}

/// Removes the `.snapshot` directory of every export below `exports`: a
/// state dir left by a session with the quirk must not show them without.
pub fn hide_all(exports: &Path) -> Result<()> {
    for export in std::fs::read_dir(exports)? {
        remove_tree(&export?.path().join(SNAPSHOT_DIRECTORY))?;
    }
    Ok(())
}

fn remove_tree(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}
