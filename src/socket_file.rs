//! Where a unix socket the driver serves may be created: its directory made,
//! a socket left by an earlier run removed (gRPC cannot bind over it), and
//! anything that is not a socket refused. It never removes a regular file or
//! a directory: removing a user's file because of a typo in a path setting
//! would be worse than failing.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// Makes `path` free for a new socket; errors start with `setting`, the
/// variable the path came from.
pub fn prepare(path: &Path, setting: &str) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("{setting}: create directory {}: {e}", parent.display()))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            log::info!("removing stale socket {}", path.display());
            std::fs::remove_file(path)
                .map_err(|e| format!("{setting}: remove stale socket {}: {e}", path.display()))
        }
        Ok(_) => Err(format!(
            "{setting}: {} exists and is not a socket",
            path.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("{setting}: {}: {e}", path.display())),
    }
}

/// Removes the socket at `path` if it is still there.
pub fn remove(path: &Path) {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            log::warn!("remove socket {}: {e}", path.display())
        }
        _ => {}
    }
}
