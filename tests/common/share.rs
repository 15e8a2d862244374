//! A stand-in for `mount -t nfs4` (the `NFS_MOUNT_HELPER` the controller
//! runs to mount a shared parent): it binds `<dir>/exports/<export>` where
//! the driver asks, and refuses an export that is not there, as a server
//! does. Every call is appended to `<dir>/helper.log`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const HELPER: &str = r#"#!/bin/sh
set -u
here=$(dirname "$0")
echo "$*" >> "$here/helper.log"
shift 2
if [ "$1" = "-o" ]; then shift 2; fi
export_dir="$here/exports/${1##*:/}"
if [ ! -d "$export_dir" ]; then echo "mount.nfs4: access denied by server while mounting $1" >&2; exit 32; fi
mount --bind "$export_dir" "$2" || exit 32
"#;

/// Writes the helper into `dir` and returns its path.
pub fn install_bind_helper(dir: &Path) -> PathBuf {
    install(dir, HELPER.to_string())
}

/// The helper of a server that exports every filesystem the fake makes:
/// an export not there yet is made empty first (pools make their own).
pub fn install_creating_bind_helper(dir: &Path) -> PathBuf {
    let creating = HELPER.replace(
        "if [ ! -d \"$export_dir\" ]",
        "mkdir -p \"$export_dir\"\nif [ ! -d \"$export_dir\" ]",
    );
    assert_ne!(creating, HELPER);
    install(dir, creating)
}

fn install(dir: &Path, text: String) -> PathBuf {
    let helper = dir.join("mount-nfs");
    std::fs::write(&helper, text).unwrap();
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    helper
}

/// The directory behind `host:/export` for the helper in `dir`, created.
pub fn export_dir(dir: &Path, mount_target: &str) -> PathBuf {
    let export = dir
        .join("exports")
        .join(mount_target.rsplit_once(":/").unwrap().1);
    std::fs::create_dir_all(&export).unwrap();
    export
}
