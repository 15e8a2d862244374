//! One test's world for `subdirectory` volumes: the real binary in the
//! controller role, in a mount namespace of its own, against the fake
//! Linode API over loopback, with a shared parent filesystem seeded in
//! Space 7 whose export is a directory of the test that the
//! `NFS_MOUNT_HELPER` stand-in bind-mounts where the controller asks; and
//! the readings of its state (the fake's quota table, the export's tree).

use super::controller::*;
use super::requests::{expand_req, modify_req};
use super::{share, volume_names, TempDir};
use linode_nfs_csi::fake::FilesystemSeed;
use linode_nfs_csi::linode::Quota;
use linode_nfs_csi::proto::csi;
use std::path::{Path, PathBuf};

pub const GIB: i64 = 1 << 30;
pub const PARENT: &str = "team-share";
/// What the fake gives a seeded filesystem.
pub const PARENT_CAPACITY: i64 = 100 * GIB;

pub const P_TYPE: &str = "linodenfs.csi.linode.com/volume-type";
pub const P_SHARED_ID: &str = "linodenfs.csi.linode.com/shared-filesystem-id";
pub const P_SHARED_LABEL: &str = "linodenfs.csi.linode.com/shared-filesystem-label";
pub const P_QUOTA: &str = "linodenfs.csi.linode.com/quota";
pub const P_ON_DELETE: &str = "linodenfs.csi.linode.com/on-delete";
pub const P_MODE: &str = "linodenfs.csi.linode.com/directory-mode";
pub const P_MAX_FILES: &str = "linodenfs.csi.linode.com/max-files";

/// One test's world: the controller, its fakes, the parent's export on
/// disk and the directory its shares are mounted under.
pub struct World {
    pub env: Env,
    pub parent: u64,
    pub export: PathBuf,
    pub helper_dir: TempDir,
    pub shares: TempDir,
}

pub fn world_with(setup: impl FnOnce(Setup) -> Setup) -> World {
    let helper_dir = TempDir::new("subdir-helper");
    let shares = TempDir::new("subdir-shares");
    let helper = share::install_bind_helper(helper_dir.path());
    let base = mounting(
        Setup::new().seed(|s| s.with_filesystem(FilesystemSeed::new(SPACE, PARENT, REGION))),
        &helper,
        shares.path(),
    );
    let env = setup(base).start();
    let fs = env.filesystem(PARENT);
    let target = fs.mount_target_fqdn.clone().expect("a mount target");
    let export = share::export_dir(helper_dir.path(), &target);
    World {
        env,
        parent: fs.id,
        export,
        helper_dir,
        shares,
    }
}

/// `setup` with the controller mounting shared filesystems through
/// `helper` under `shares`, in a mount namespace of its own, and growing
/// directory volumes.
pub fn mounting(setup: Setup, helper: &Path, shares: &Path) -> Setup {
    setup
        .env("NFS_MOUNT_HELPER", &helper.display().to_string())
        .env("SHARE_MOUNT_DIR", &shares.display().to_string())
        .env("VOLUME_EXPANSION", "subdirectory")
        .prefix(&["unshare", "--mount", "--propagation", "private"])
}

pub fn world() -> World {
    world_with(|s| s)
}

impl World {
    pub fn class(&self, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
        let mut p = by_id();
        p.push((P_TYPE, "subdirectory".into()));
        p.push((P_SHARED_ID, self.parent.to_string()));
        p.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
        p
    }

    pub fn create(
        &self,
        name: &str,
        size: i64,
        extra: &[(&'static str, &str)],
    ) -> grpcio::Result<csi::Volume> {
        let req = with_capacity(volume_req(name, &self.class(extra)), size, 0);
        self.env.create(&req).map(|r| r.volume.unwrap())
    }

    pub fn create_ok(&self, name: &str, size: i64, extra: &[(&'static str, &str)]) -> csi::Volume {
        self.create(name, size, extra)
            .unwrap_or_else(|e| panic!("CreateVolume {name}: {e:?}\n{}", self.env.driver.logs()))
    }

    pub fn id(&self, name: &str) -> String {
        format!("{SPACE}/{}/{name}", self.parent)
    }

    pub fn dir(&self, name: &str) -> PathBuf {
        self.export.join("csi-volumes").join(name)
    }

    pub fn marker(&self, name: &str) -> PathBuf {
        self.export.join("csi-volumes/.owners").join(name)
    }

    /// The quotas of volumes (every filesystem's root quota aside).
    pub fn quotas(&self) -> Vec<Quota> {
        let mut all = self.env.linode.quotas();
        all.retain(|q| !q.is_root);
        all
    }

    pub fn quota_paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self.quotas().into_iter().map(|q| q.path).collect();
        paths.sort();
        paths
    }

    /// The volume directories (markers and archive aside).
    pub fn dirs(&self) -> Vec<String> {
        volume_names(&self.export.join("csi-volumes"))
    }

    pub fn markers(&self) -> Vec<String> {
        volume_names(&self.export.join("csi-volumes/.owners"))
    }

    pub fn quota_calls(&self, method: &str) -> usize {
        self.env
            .linode
            .calls(method, "nfs/spaces/*/filesystems/*/quotas")
            + self
                .env
                .linode
                .calls(method, "nfs/spaces/*/filesystems/*/quotas/*")
    }

    pub fn mounts(&self) -> usize {
        std::fs::read_to_string(self.helper_dir.join("helper.log"))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    pub fn expand(
        &self,
        id: &str,
        size: i64,
    ) -> grpcio::Result<csi::ControllerExpandVolumeResponse> {
        self.env
            .client
            .controller_expand_volume(&expand_req(id, size))
    }

    pub fn modify(
        &self,
        id: &str,
        pairs: &[(&str, &str)],
    ) -> grpcio::Result<csi::ControllerModifyVolumeResponse> {
        self.env
            .client
            .controller_modify_volume(&modify_req(id, pairs))
    }
}
