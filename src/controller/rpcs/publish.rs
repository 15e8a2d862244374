//! ControllerPublishVolume and ControllerUnpublishVolume (node mode): the
//! node's Linode is allowed on, or revoked from, the access policy of the
//! filesystem the volume kinds' seam names (`kind::publish_target`,
//! `kind::unpublish`: a filesystem's own, a directory's parent's), through
//! the access-policy queue (`acl`), which orders calls for one node by
//! arrival and serialises every change to one filesystem.

use crate::controller::acl;
use crate::controller::acl::policy::{no_filesystem_policy, read_policy};
use crate::controller::kind::publishing::Unpublish;
use crate::controller::kind::seam as kind;
use crate::controller::request::checks;
use crate::controller::request::checks::required;
use crate::controller::request::volume_capability::check_capabilities;
use crate::controller::state::controller::Controller;
use crate::flow::{done, Step, Then};
use crate::handles::VolumeHandle;
use crate::limits;
use crate::proto::csi;
use crate::Error;
use std::sync::Arc;

/// The node id of a publish request: the node's Linode id. One that cannot
/// be a Linode id names no node, which CSI reports as NotFound.
pub fn linode_id(node_id: &str) -> Result<u64, Error> {
    // Digits only: `parse` also takes a leading `+`, and `+242` is not the
    // id NodeGetInfo reported.
    Some(node_id)
        .filter(|raw| raw.bytes().all(|b| b.is_ascii_digit()) && !raw.starts_with('0'))
        .and_then(|raw| raw.parse::<u64>().ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| Error::NotFound(format!("node id \"{node_id}\" is not a Linode ID")))
}

/// ControllerPublishVolume (node mode): allow the node's Linode on the
/// filesystem (for a directory of a shared filesystem, on its parent, once
/// its directory and marker are found). NotFound for unknown volumes or
/// nodes; repeats are no-ops.
pub fn publish(
    c: &Arc<Controller>,
    req: csi::ControllerPublishVolumeRequest,
) -> Step<csi::ControllerPublishVolumeResponse> {
    required(&req.volume_id, "volume ID is not set")?;
    required(&req.node_id, "node id is required")?;
    let Some(cap) = req.volume_capability.as_ref() else {
        return Err(Error::InvalidArgument(
            "volume capability is required".into(),
        ));
    };
    check_capabilities(std::slice::from_ref(cap))?;
    limits::map("volume context", &req.volume_context)?;
    limits::map("secrets", &req.secrets)?;
    let handle = checks::volume(&req.volume_id)?;
    let node = linode_id(&req.node_id)?;
    let target = kind::publish_target(c, &handle)?;
    let vol = target.acl;
    let arrival = c.acl.arrive();
    let policy = read_policy(c, vol, c.acl_cache.ticket(vol))?
        .ok_or_else(|| no_filesystem_policy(format!("filesystem {vol}")))?;
    let admitted = policy.enabled && policy.linode_ids().contains(&node);
    if !admitted {
        // CSI wants NotFound for a node that does not exist; a token without
        // read access to instances must not block attaching, though: the
        // policy PUT rejects unknown ids anyway.
        match c.cloud.get_instance(node) {
            Err(e @ Error::NotFound(_)) => return Err(e),
            Err(e) => log::warn!("ControllerPublishVolume: cannot check Linode {node}: {e}"),
            Ok(_) => {}
        }
    }
    if admitted && target.admitted_is_done {
        return done(csi::ControllerPublishVolumeResponse::new());
    }
    acl::access(c, vol, node, true, arrival)
        .then(|()| done(csi::ControllerPublishVolumeResponse::new()))
}

/// ControllerUnpublishVolume (node mode): revoke the node's Linode. An
/// empty node id, an unknown volume or a node not in the ACL is OK. A
/// directory of a shared filesystem leaves the node in the parent's ACL
/// while another volume of the parent is attached there.
pub fn unpublish(
    c: &Arc<Controller>,
    req: csi::ControllerUnpublishVolumeRequest,
) -> Step<csi::ControllerUnpublishVolumeResponse> {
    required(&req.volume_id, "volume ID is not set")?;
    let answer = csi::ControllerUnpublishVolumeResponse::new;
    if req.node_id.is_empty() {
        return done(answer());
    }
    let (Ok(handle), Ok(node)) = (VolumeHandle::parse(&req.volume_id), linode_id(&req.node_id))
    else {
        return done(answer());
    };
    // Numbered before the attachments are read: a publish of a sibling
    // that arrives meanwhile overtakes this revoke (see `AclQueue::access`).
    let arrival = c.acl.arrive();
    match kind::unpublish(c, &handle, node)? {
        Unpublish::Keep(why) => {
            log::info!("ControllerUnpublishVolume of {handle} from node {node}: {why}");
            done(answer())
        }
        Unpublish::Revoke(vol) => {
            acl::access(c, vol, node, false, arrival).then(move |()| done(answer()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AccessPolicyMode;
    use crate::controller::ControllerDeps;
    use crate::fake::{FakeLinode, InstanceSeed, Seed, SpaceSeed};
    use crate::flow::{Flow, Thunk};
    use crate::handles::VolumeId;
    use crate::kube::KubeClient;
    use crate::linode::{Cloud, LinodeCloud, LinodeSettings, NewFilesystem, WaitPolicy};
    use crate::mutex::lock;
    use crate::rpc::Rpc;
    use std::sync::atomic::Ordering;
    use std::sync::mpsc;
    use std::sync::Mutex;
    use std::time::Duration;

    const NODE: u64 = 4242;

    /// Held by every test here that runs batches: an injected batch panic
    /// is process-wide, and would otherwise hit another test's batch.
    static BATCHES: Mutex<()> = Mutex::new(());

    /// A controller over the fake Linode, in this process, with `vol` made.
    /// A controller and an untagged filesystem (a parent of directories).
    fn controller() -> (FakeLinode, Arc<Controller>, VolumeId) {
        controller_tagged(Vec::new())
    }

    /// A controller and a filesystem tagged `tags`.
    fn controller_tagged(tags: Vec<String>) -> (FakeLinode, Arc<Controller>, VolumeId) {
        let seed = Seed::default()
            .with_space(SpaceSeed::new(7, "shared"))
            .with_instance(InstanceSeed {
                id: NODE,
                label: "node".into(),
                region: "us-ord".into(),
                interface_generation: None,
                ipv6: None,
                vpcs: vec![],
            });
        let fake = FakeLinode::start(seed).unwrap();
        let mut settings = LinodeSettings::new(fake.token());
        settings.base_url = fake.url();
        let cloud: Arc<dyn Cloud> = Arc::new(LinodeCloud::new(settings).unwrap());
        let fs = cloud
            .create_filesystem(
                7,
                &NewFilesystem {
                    label: "pvc-panic".into(),
                    region: "us-ord".into(),
                    max_capacity_bytes: 1 << 30,
                    tags,
                },
            )
            .unwrap();
        // One directory per call: tests run in parallel, each writing its own.
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "lnc-publish-{}-{}",
            std::process::id(),
            CALLS.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            "apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: t\n  cluster:\n    server: http://127.0.0.1:1\ncontexts:\n- name: t\n  context:\n    cluster: t\n    user: t\nusers:\n- name: t\n  user:\n    token: x\n",
        )
        .unwrap();
        let wait = WaitPolicy {
            timeout: Duration::from_secs(30),
            initial_delay: Duration::from_millis(20),
            max_delay: Duration::from_millis(100),
        };
        let deps = ControllerDeps {
            cloud,
            lease: crate::lease::Leadership::sole(),
            cluster_id: crate::cluster_id::ClusterId::parse("test").unwrap(),
            kube: KubeClient::from_kubeconfig(&kubeconfig).unwrap(),
            mode: AccessPolicyMode::Node,
            wait,
            default_capacity_bytes: 1 << 30,
            space_cache_ttl: Duration::ZERO,
            maintenance_interval: Duration::ZERO,
            pool_empty_grace: Duration::from_secs(600),
            fill: crate::config::FillSettings {
                timeout: Duration::from_secs(600),
                progress_interval: Duration::from_secs(60),
                claim_grace: Duration::from_secs(120),
            },
            request_timeout: Duration::from_secs(10),
            acl_cache_max_age: Duration::from_secs(300),
            expansion: crate::config::VolumeExpansion::Off,
            mounter: Arc::new(Mounted),
            share_mount_dir: dir.join("shares"),
            nfs_mount_timeout: Duration::from_secs(10),
            copy_threads: 2,
            metadata: None,
            node_name: None,
        };
        let c = Arc::new(Controller::new(deps, Rpc::new(2)));
        let vol = VolumeId {
            space: 7,
            filesystem: fs.id,
        };
        (fake, c, vol)
    }

    /// Every parent is mounted already: its files are the test's directory.
    struct Mounted;

    impl crate::mount::Mounter for Mounted {
        fn mount_nfs4(
            &self,
            _: &crate::mount::NfsMount,
        ) -> Result<(), crate::mount::NfsMountError> {
            Ok(())
        }
        fn bind(
            &self,
            _: &std::path::Path,
            _: &std::path::Path,
            _: &[String],
        ) -> crate::Result<()> {
            Err(Error::Internal("no binds here".into()))
        }
        fn remount_readonly(&self, _: &std::path::Path) -> crate::Result<()> {
            Err(Error::Internal("no remounts here".into()))
        }
        fn unmount(&self, _: &std::path::Path) -> crate::Result<()> {
            Err(Error::Internal("no unmounts here".into()))
        }
        fn detach(&self, _: &std::path::Path) -> crate::Result<()> {
            Err(Error::Internal("no detaches here".into()))
        }
        fn mount_table(&self) -> crate::Result<crate::mount::MountTable> {
            Err(Error::Internal("no mount table here".into()))
        }
        fn is_mount_point(&self, _: &std::path::Path) -> crate::Result<bool> {
            Ok(true)
        }
        fn statvfs(
            &self,
            _: &std::path::Path,
        ) -> Result<crate::mount::FsStats, crate::mount::StatvfsError> {
            Ok(crate::mount::FsStats {
                fragment_size: 4096,
                blocks: 1,
                blocks_free: 1,
                blocks_available: 1,
                files: 1,
                files_free: 1,
            })
        }
    }

    /// Makes directory volume `name` of `parent`, as CreateVolume would.
    fn make_directory(c: &Controller, parent: VolumeId, name: &str) {
        use crate::controller::kind::directory::parent::files::{create, Marker, Ownership};
        let root = c.shares.mount_point(parent);
        std::fs::create_dir_all(&root).unwrap();
        let marker = Marker {
            volume_id: format!("{parent}/{name}"),
            csi_name: name.into(),
            on_delete: crate::controller::OnDelete::Delete,
            retained: false,
            source: None,
            filling: false,
            archive_to: None,
            cluster: None,
            claim: None,
            autogrow: None,
        };
        let owner = Ownership {
            mode: 0o770,
            uid: 0,
            gid: 0,
        };
        create(
            &root,
            &crate::handles::DirName::parse(name).unwrap(),
            &marker,
            owner,
        )
        .unwrap();
    }

    fn block_on<T: Send + 'static>(step: Step<T>) -> crate::Result<T> {
        let (woken, rest) = mpsc::channel::<Thunk<T>>();
        let mut step = step;
        loop {
            match step? {
                Flow::Ready(value) => return Ok(value),
                Flow::Parked(parked) => {
                    let woken = woken.clone();
                    let _pending = parked.park(Box::new(move |thunk| {
                        let _ = woken.send(thunk);
                    }));
                    let thunk = rest
                        .recv_timeout(Duration::from_secs(30))
                        .expect("a parked call is answered");
                    step = thunk();
                }
            }
        }
    }

    fn publish_req(vol: VolumeId) -> csi::ControllerPublishVolumeRequest {
        let mut access = csi::volume_capability::AccessMode::new();
        access.mode = csi::volume_capability::access_mode::Mode::MULTI_NODE_MULTI_WRITER.into();
        let mut cap = csi::VolumeCapability::new();
        cap.set_mount(csi::volume_capability::MountVolume::new());
        cap.access_mode = Some(access).into();
        let mut req = csi::ControllerPublishVolumeRequest::new();
        req.volume_id = vol.to_string();
        req.node_id = NODE.to_string();
        req.volume_capability = Some(cap).into();
        req
    }

    #[test]
    fn a_node_id_is_a_linode_id_in_its_canonical_digits() {
        assert_eq!(linode_id("242").unwrap(), 242);
        for bad in [
            "+242",
            "0242",
            "0",
            "-1",
            " 242",
            "242 ",
            "",
            "x",
            "18446744073709551616",
        ] {
            assert!(matches!(linode_id(bad), Err(Error::NotFound(_))), "{bad:?}");
        }
    }

    #[test]
    fn a_panicking_batch_answers_internal_and_the_next_publish_works() {
        let _alone = lock(&BATCHES);
        let (fake, c, vol) =
            controller_tagged(vec![crate::controller::state::tags::MANAGED.into()]);
        acl::inject_batch_panics(1);
        let err = block_on(publish(&c, publish_req(vol))).unwrap_err();
        assert!(matches!(err, Error::Internal(_)), "{err:?}");
        assert!(
            !c.acl.busy(vol),
            "the panicked batch left no pending entry behind"
        );
        block_on(publish(&c, publish_req(vol))).unwrap();
        let policy = fake.filesystem_policy(vol.filesystem).unwrap();
        assert!(policy.enabled && policy.linode_ids().contains(&NODE));
    }

    /// An unpublish of one directory lists the attachments before it queues
    /// its revoke; a publish of a sibling to the same node in between must
    /// overtake it even though the node is already admitted (so it queues
    /// rather than answering from the policy), or the revoke would cut the
    /// sibling off.
    #[test]
    fn a_sibling_publish_overtakes_a_revoke_that_read_the_attachments_before_it() {
        let _alone = lock(&BATCHES);
        let (fake, c, parent) = controller();
        let dir = |name: &str| {
            let mut req = publish_req(parent);
            req.volume_id = format!("{parent}/{name}");
            req
        };
        let err = block_on(publish(&c, dir("vol-a"))).unwrap_err();
        assert!(matches!(err, Error::NotFound(_)), "{err:?}");
        assert!(
            !fake
                .filesystem_policy(parent.filesystem)
                .unwrap()
                .linode_ids()
                .contains(&NODE),
            "no ACL is touched for a directory that is not a volume"
        );
        make_directory(&c, parent, "vol-a");
        make_directory(&c, parent, "vol-b");
        block_on(publish(&c, dir("vol-a"))).unwrap();
        let revoking = c.acl.arrive();
        block_on(publish(&c, dir("vol-b"))).unwrap();
        let err = block_on(acl::access(&c, parent, NODE, false, revoking)).unwrap_err();
        assert!(matches!(err, Error::Aborted(_)), "{err:?}");
        let policy = fake.filesystem_policy(parent.filesystem).unwrap();
        assert!(
            policy.linode_ids().contains(&NODE),
            "the node stays admitted"
        );
    }
}
