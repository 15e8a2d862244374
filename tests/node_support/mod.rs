//! Node-test fixture: the driver in the node role inside its own mount
//! namespace (`unshare --mount --propagation private`, plus `--user
//! --map-root-user` when not root, so nothing touches the host's mount table
//! and every mount vanishes with the process), with
//! `NFS_MOUNT_HELPER` pointing at a shell stand-in for `mount -t nfs4`.
//!
//! The stand-in "mounts" `<source>` by bind-mounting `exports/<source with
//! every character outside [A-Za-z0-9.-] replaced by _>` on the target, after
//! putting a small private tmpfs on that export (inside the driver's
//! namespace) so its statvfs figures hold still while the host disk churns.
//! It appends its arguments to `helper.log`, and obeys control files in its
//! directory: `fail-mtls` (fail when `xprtsec=mtls` is among the options),
//! `hang` (never finish; the pid of its `sleep` goes to `hang.pid`),
//! `hang-mtls` (never finish when `xprtsec=mtls` is among the options),
//! `unbindable` (make the staged mount unbindable, so a later bind fails),
//! `no-dns` (fail a source whose host is a name, not a bracketed address,
//! the way mount.nfs4 does when the name does not resolve).
//!
//! The test sees the namespace through `/proc/<pid>/mountinfo` and reaches
//! files inside it through `/proc/<pid>/root/<path>`.
#![allow(dead_code)]

use crate::common::requests::{
    mount_capability, node_publish_req, node_stage_req, node_stats_req, node_unpublish_req,
    node_unstage_req, pairs, Mode,
};
use crate::common::rpc::call;
use crate::common::{mounts_of, Driver, TempDir};
use linode_nfs_csi::proto::csi;
use std::path::{Path, PathBuf};

const HELPER: &str = r#"#!/bin/sh
set -u
here=$(dirname "$0")
echo "$*" >> "$here/helper.log"
if [ "$#" -lt 4 ] || [ "$1" != "-t" ] || [ "$2" != "nfs4" ]; then
    echo "unexpected arguments: $*" >&2; exit 2
fi
shift 2
opts=""
if [ "$1" = "-o" ]; then opts=$2; shift 2; fi
source=$1
target=$2
case "$source" in
    \[*) ;;
    *) if [ -e "$here/no-dns" ]; then
           echo "mount.nfs4: Failed to resolve server ${source%%:*}: Name or service not known" >&2; exit 32
       fi ;;
esac
if [ -e "$here/hang" ]; then
    sleep 1000 &
    echo $! > "$here/hang.pid"
    wait
fi
case ",$opts," in
    *,xprtsec=mtls,*)
        if [ -e "$here/hang-mtls" ]; then sleep 1000 & wait; fi
        if [ -e "$here/fail-mtls" ]; then echo "mount.nfs4: TLS handshake with $source failed" >&2; exit 32; fi ;;
esac
name=$(printf '%s' "$source" | tr -c 'A-Za-z0-9.-' '_')
export="$here/exports/$name"
if [ ! -d "$export" ]; then echo "mount.nfs4: access denied by server while mounting $source" >&2; exit 32; fi
if ! grep -q " $export " /proc/self/mountinfo; then
    mount -t tmpfs -o size=16m,nr_inodes=4096 "export-$name" "$export" || exit 32
fi
mount --bind "$export" "$target" || exit 32
if [ -e "$here/unbindable" ]; then mount --make-unbindable "$target" || exit 32; fi
"#;

/// The volume every node test stages, publishes and reads.
pub const VOLUME: &str = "1/2";

pub struct NfsNode {
    // Declared first so the driver (and its namespace) is gone before the
    // directory is removed.
    pub driver: Driver,
    pub dir: TempDir,
}

impl NfsNode {
    pub fn start() -> NfsNode {
        NfsNode::start_with("2m")
    }

    /// A node whose mount helper is killed after `timeout`.
    pub fn start_with(timeout: &str) -> NfsNode {
        NfsNode::start_configured(timeout, &[])
    }

    /// A node with extra environment variables (set last, so they win).
    pub fn start_configured(timeout: &str, env: &[(&str, &str)]) -> NfsNode {
        let dir = TempDir::new("node");
        std::fs::create_dir_all(dir.join("exports")).unwrap();
        std::fs::create_dir_all(dir.join("kubelet")).unwrap();
        let helper = dir.join("mount-helper");
        std::fs::write(&helper, HELPER).unwrap();
        std::fs::set_permissions(&helper, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        // SAFETY: geteuid(2) has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let prefix: &[&str] = if root {
            &["unshare", "--mount", "--propagation", "private"]
        } else {
            // Without root, a user namespace grants the mount namespace.
            &[
                "unshare",
                "--user",
                "--map-root-user",
                "--mount",
                "--propagation",
                "private",
            ]
        };
        let mut driver = Driver::role("node")
            .prefix(prefix)
            .env("NFS_MOUNT_HELPER", helper.to_string_lossy())
            .env("NFS_MOUNT_TIMEOUT", timeout);
        for (k, v) in env {
            driver = driver.env(k, *v);
        }
        let driver = driver.start();
        NfsNode { driver, dir }
    }

    /// Creates the export that `source` mounts.
    pub fn export(&self, source: &str) -> PathBuf {
        let path = self.dir.join("exports").join(sanitise(source));
        std::fs::create_dir_all(&path).unwrap();
        path
    }

    /// A kubelet-style path under the fixture directory (not created).
    pub fn kubelet_path(&self, rel: &str) -> PathBuf {
        self.dir.join("kubelet").join(rel)
    }

    pub fn control(&self, name: &str, on: bool) {
        let path = self.dir.join(name);
        if on {
            std::fs::write(path, "").unwrap();
        } else {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Each helper run's arguments, in order.
    pub fn helper_runs(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("helper.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// `(mount point, per-mount options)` of every mount in the driver's
    /// namespace.
    pub fn mounts(&self) -> Vec<(PathBuf, Vec<String>)> {
        mounts_of(self.driver.pid())
    }

    /// How many mounts sit at `path` in the driver's namespace.
    pub fn mount_count(&self, path: &Path) -> usize {
        self.mounts().iter().filter(|(p, _)| p == path).count()
    }

    /// The per-mount options of the topmost mount at `path`.
    pub fn mount_options(&self, path: &Path) -> Option<Vec<String>> {
        self.mounts()
            .into_iter()
            .rev()
            .find(|(p, _)| p == path)
            .map(|(_, o)| o)
    }

    /// Mounts of the driver's namespace at or below the kubelet directory.
    pub fn kubelet_mounts(&self) -> Vec<PathBuf> {
        let root = self.dir.join("kubelet");
        self.mounts()
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| p.starts_with(&root))
            .collect()
    }

    /// `path` as seen from inside the driver's mount namespace.
    pub fn inside(&self, path: &Path) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.driver.pid()))
            .join(path.strip_prefix("/").unwrap())
    }

    pub fn stage(
        &self,
        volume_id: &str,
        staging: &Path,
        context: &[(&str, &str)],
    ) -> grpcio::Result<()> {
        self.stage_with(volume_id, staging, context, &[])
    }

    pub fn stage_with(
        &self,
        volume_id: &str,
        staging: &Path,
        context: &[(&str, &str)],
        flags: &[&str],
    ) -> grpcio::Result<()> {
        let capability = mount_capability(Mode::MULTI_NODE_MULTI_WRITER, flags);
        let mut req = node_stage_req(volume_id, staging, capability);
        req.volume_context = pairs(context);
        self.driver
            .node()
            .node_stage_volume_opt(&req, call())
            .map(|_| ())
    }

    pub fn unstage(&self, volume_id: &str, staging: &Path) -> grpcio::Result<()> {
        self.driver
            .node()
            .node_unstage_volume_opt(&node_unstage_req(volume_id, staging), call())
            .map(|_| ())
    }

    pub fn publish(
        &self,
        staging: &Path,
        target: &Path,
        readonly: bool,
        mode: Mode,
        flags: &[&str],
    ) -> grpcio::Result<()> {
        let capability = mount_capability(mode, flags);
        let mut req = node_publish_req(VOLUME, staging, target, capability);
        req.readonly = readonly;
        self.driver
            .node()
            .node_publish_volume_opt(&req, call())
            .map(|_| ())
    }

    pub fn unpublish(&self, target: &Path) -> grpcio::Result<()> {
        self.driver
            .node()
            .node_unpublish_volume_opt(&node_unpublish_req(VOLUME, target), call())
            .map(|_| ())
    }

    pub fn stats(&self, path: &Path) -> grpcio::Result<csi::NodeGetVolumeStatsResponse> {
        self.driver
            .node()
            .node_get_volume_stats_opt(&node_stats_req(VOLUME, path), call())
    }
}

/// The export directory name the helper derives from a mount source.
pub fn sanitise(source: &str) -> String {
    source
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
