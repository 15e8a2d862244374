//! Every change to a filesystem's access policy: node-mode publish and
//! unpublish (the Linode ACL) and the squash policy. The API only offers a
//! full-replace PUT with no version check, so all changes to one filesystem
//! go through one queue: callers enqueue their change and park; a batch
//! applies everything pending with one GET, at most one PUT and one wait on
//! the poller, then hands each caller its result and takes the next batch.
//! Concurrent publishes from many nodes therefore never lose each other's
//! entries and share PUTs, and no caller holds a worker while it waits.
//!
//! A backend without per-filesystem access policies fails every change here
//! with FailedPrecondition naming what to use instead; a panic in a batch
//! answers that batch's callers Internal and the next batch runs.
//!
//! Every policy read and every PUT answer here lands in the ACL cache
//! (`acl_cache`), which listings report published nodes from.
//!
//! A directory of a shared filesystem (`{s}/{f}/{name}`) has no ACL of its
//! own: its publish and unpublish change the parent's, through the parent's
//! queue. Unpublishing it from a node revokes the node only when no other
//! volume of the parent is still attached there, as the cluster's
//! VolumeAttachments say (`cluster`); a publish of such a directory always
//! goes through the queue, even when the node is already admitted, so an
//! unpublish of a sibling that listed the attachments before this publish
//! began is refused as overtaken rather than applied after it.
//!
//! Two things could still undo a change the CO was told is done, and both
//! are guarded here: a publish the CO gave up on that is still making its
//! checks when the unpublish it sent next has been applied (calls for one
//! node are ordered by arrival, see `Arrivals`), and a PUT that timed out
//! but lands later (the policy is in doubt for a while, see `in_doubt`).

use super::acl_cache::{Acl, Written};
use super::inspect::read_policy;
use super::subdirs::find;
use super::volume_capability::check_capabilities;
use super::{tags, Controller};
use crate::flow::{done, guarded, Flow, Handoff, Step, Then};
use crate::handles::{SubdirId, VolumeHandle, VolumeId};
use crate::limits;
use crate::linode::{FilesystemAccessPolicy, FilesystemAccessPolicyUpdate, SquashPolicy};
use crate::mutex::lock;
use crate::proto::csi;
use crate::Error;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    Allow(u64),
    Revoke(u64),
    /// `adopting`: the filesystem may predate this request, so a squash
    /// someone already chose is a conflict rather than something to overwrite.
    Squash {
        policy: SquashPolicy,
        adopting: bool,
    },
}

/// A queued change and where its result goes.
type Queued = (Change, Arc<Handoff<Result<(), Error>>>);

/// Changes waiting for the next batch, per filesystem with a batch under
/// way; a filesystem is absent when nothing is being applied to it.
#[derive(Default)]
pub struct AclQueue {
    pending: Mutex<HashMap<VolumeId, Vec<Queued>>>,
    arrivals: Mutex<Arrivals>,
}

/// A test fault: this many access-policy batches of this process still to
/// panic. Zero unless a test calls `inject_batch_panics`.
static BATCH_PANICS: AtomicU32 = AtomicU32::new(0);

/// A test fault: the next `n` access-policy batches of this process panic
/// (to show a panic is answered and cleared up). Nothing else sets it.
pub fn inject_batch_panics(n: u32) {
    BATCH_PANICS.store(n, Ordering::SeqCst);
}

fn take_batch_panic() -> bool {
    BATCH_PANICS
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// The order in which publish and unpublish calls arrived, and the newest
/// one queued for each volume and node. A publish reads the policy and the
/// instance before it queues its change; if the CO gave up on it meanwhile
/// and sent the unpublish, that unpublish is queued first, and the stale
/// publish must not be applied after it: it is refused instead. Calls of
/// the same kind never refuse each other (a retry overtaking its original
/// wants the same thing).
#[derive(Default)]
struct Arrivals {
    next: u64,
    newest: HashMap<(VolumeId, u64), Arrived>,
}

struct Arrived {
    order: u64,
    allow: bool,
    at: Instant,
}

/// How long the newest call per volume and node is remembered: far longer
/// than a publish can spend on its reads (each bounded by the request
/// timeout and a few retries) before it queues.
const ARRIVALS_KEPT: Duration = Duration::from_secs(600);

/// Where a publish or unpublish call stands in the order of arrival.
#[derive(Debug, Clone, Copy)]
pub struct Arrival(u64);

/// FailedPrecondition for a change to `what` that needs a filesystem's own
/// access policy, on a backend that has none.
pub(crate) fn no_filesystem_policy(what: impl std::fmt::Display) -> Error {
    Error::FailedPrecondition(format!(
        "the Linode backend has no per-filesystem access policy ({what}); use NFS_ACCESS_POLICY_MODE=space, where the Space's access policy admits the nodes, and leave out the linodenfs.csi.linode.com/filesystem-root-squash parameter"
    ))
}

impl AclQueue {
    pub fn set_squash(
        &self,
        c: &Arc<Controller>,
        vol: VolumeId,
        policy: SquashPolicy,
        adopting: bool,
    ) -> Step<()> {
        self.apply(c, vol, Change::Squash { policy, adopting })
    }

    /// Numbers a publish or unpublish call as it arrives.
    pub fn arrive(&self) -> Arrival {
        let mut arrivals = lock(&self.arrivals);
        arrivals.next += 1;
        Arrival(arrivals.next)
    }

    /// Allows (`allow`) or revokes `node` on `vol` for a call that arrived
    /// at `arrival`, unless a call of the other kind that arrived later has
    /// been queued already (Aborted: the CO has moved on).
    fn access(
        &self,
        c: &Arc<Controller>,
        vol: VolumeId,
        node: u64,
        allow: bool,
        arrival: Arrival,
    ) -> Step<()> {
        let change = if allow {
            Change::Allow(node)
        } else {
            Change::Revoke(node)
        };
        let queued = {
            // Held until the change is queued, so queue order follows
            // arrival order for each node.
            let mut arrivals = lock(&self.arrivals);
            let now = Instant::now();
            arrivals
                .newest
                .retain(|_, a| now.duration_since(a.at) < ARRIVALS_KEPT);
            match arrivals.newest.get(&(vol, node)) {
                Some(newer) if newer.order > arrival.0 && newer.allow != allow => {
                    let (this, later) = if allow {
                        ("ControllerPublishVolume", "ControllerUnpublishVolume")
                    } else {
                        ("ControllerUnpublishVolume", "ControllerPublishVolume")
                    };
                    return Err(Error::Aborted(format!(
                        "{this} of volume {vol} for node {node} was overtaken by a later {later}; retry if it is still wanted"
                    )));
                }
                Some(newer) if newer.order > arrival.0 => {}
                _ => {
                    arrivals.newest.insert(
                        (vol, node),
                        Arrived {
                            order: arrival.0,
                            allow,
                            at: now,
                        },
                    );
                }
            }
            self.enqueue(vol, change)
        };
        self.start(c, vol, queued)
    }

    /// Queues `change` and parks until a batch has applied it.
    fn apply(&self, c: &Arc<Controller>, vol: VolumeId, change: Change) -> Step<()> {
        let queued = self.enqueue(vol, change);
        self.start(c, vol, queued)
    }

    /// Adds `change` to what `vol`'s next batch applies: where its result
    /// will arrive, and whether no batch is under way for `vol` yet.
    fn enqueue(&self, vol: VolumeId, change: Change) -> (Arc<Handoff<Result<(), Error>>>, bool) {
        let result = Handoff::new();
        let mut pending = lock(&self.pending);
        let first = !pending.contains_key(&vol);
        pending
            .entry(vol)
            .or_default()
            .push((change, result.clone()));
        (result, first)
    }

    /// Parks until the change queued is applied. The first change for an
    /// idle filesystem starts the batches, on this worker.
    fn start(
        &self,
        c: &Arc<Controller>,
        vol: VolumeId,
        (result, first): (Arc<Handoff<Result<(), Error>>>, bool),
    ) -> Step<()> {
        if first {
            c.rpc
                .detach("access policy batch", run_batches(c.clone(), vol));
        }
        result.receive(|r: Result<(), Error>| r.map(Flow::Ready))
    }
}

/// What an access-policy write is tracked under (see `in_doubt`).
pub(super) fn policy_key(vol: VolumeId) -> String {
    format!("policy {vol}")
}

/// Applies what is pending for `vol`, batch after batch, until nothing is.
fn run_batches(c: Arc<Controller>, vol: VolumeId) -> Step<()> {
    let batch = {
        let mut pending = lock(&c.acl.pending);
        let Some(queued) = pending.get_mut(&vol) else {
            return done(());
        };
        if queued.is_empty() {
            pending.remove(&vol);
            return done(());
        }
        std::mem::take(queued)
    };
    let changes: Vec<Change> = batch.iter().map(|(change, _)| change.clone()).collect();
    let applying = c.clone();
    // A panic here or in the batch's continuations ends only this batch:
    // its callers are answered (Internal) and the next batch still runs.
    guarded("access policy batch", move || {
        if take_batch_panic() {
            panic!("injected fault: access policy batch of {vol}");
        }
        apply_batch(&applying, vol, &changes)
    })
    .then_result(move |results| {
        let results = match results {
            Ok(results) => results,
            Err(e) => batch.iter().map(|_| Err(e.clone())).collect(),
        };
        for ((_, to), result) in batch.iter().zip(results) {
            // A caller that left (cancelled, deadline) is simply not told.
            to.send(result);
        }
        run_batches(c, vol)
    })
}

/// One GET, the merged policy, a PUT only when something changes, one
/// wait; a result per change, in order. Failures of the batch as a whole
/// become every affected change's result, never the flow's.
fn apply_batch(
    c: &Arc<Controller>,
    vol: VolumeId,
    batch: &[Change],
) -> Step<Vec<Result<(), Error>>> {
    let what = format!("update the access policy of filesystem {vol}");
    if let Err(e) = c.in_doubt.check(&policy_key(vol), &what) {
        return done(batch.iter().map(|_| Err(e.clone())).collect());
    }
    let current = match read_policy(c, vol, c.acl_cache.ticket(vol)) {
        Ok(Some(p)) => p,
        Ok(None) => {
            let e = no_filesystem_policy(format!("filesystem {vol}"));
            return done(batch.iter().map(|_| Err(e.clone())).collect());
        }
        Err(Error::NotFound(m)) => {
            // No filesystem: nothing to revoke, nothing to allow.
            return done(
                batch
                    .iter()
                    .map(|ch| match ch {
                        Change::Revoke(_) => Ok(()),
                        _ => Err(Error::NotFound(m.clone())),
                    })
                    .collect(),
            );
        }
        Err(e) => return done(batch.iter().map(|_| Err(e.clone())).collect()),
    };
    let mut results: Vec<Result<(), Error>> = Vec::with_capacity(batch.len());
    let mut ids: BTreeSet<u64> = current.linode_ids().into_iter().collect();
    let mut enabled = current.enabled;
    let mut squash = current.squash_policy.clone();
    for change in batch {
        results.push(match change {
            Change::Allow(id) => {
                ids.insert(*id);
                enabled = true;
                Ok(())
            }
            Change::Revoke(id) => {
                ids.remove(id);
                Ok(())
            }
            Change::Squash { policy, adopting } => {
                let chosen_before = current.updated.is_some();
                if *adopting && chosen_before && current.squash_policy.as_ref() != Some(policy) {
                    Err(Error::AlreadyExists(format!(
                        "NFS filesystem \"{}\" already exists with incompatible root squash policy",
                        current.label.clone().unwrap_or_default()
                    )))
                } else {
                    squash = Some(policy.clone());
                    Ok(())
                }
            }
        });
    }
    let before: BTreeSet<u64> = current.linode_ids().into_iter().collect();
    if ids == before && enabled == current.enabled && squash == current.squash_policy {
        // Nothing to write, but an earlier attempt's PUT may still be
        // settling: an allow or a squash asks for the policy in force, not
        // queued. Revoking a node that is not there asks for nothing, and
        // must not wait on (or fail with) a policy stuck in `updating` or
        // `error`, or the detach would never finish.
        if batch.iter().all(|ch| matches!(ch, Change::Revoke(_))) {
            return done(results);
        }
        let asking: Vec<bool> = batch
            .iter()
            .map(|ch| matches!(ch, Change::Allow(_) | Change::Squash { .. }))
            .collect();
        return settled(c, vol, current).then_result(move |settled| {
            done(
                results
                    .into_iter()
                    .zip(asking)
                    .map(|(r, asks)| match (&settled, asks) {
                        (Err(e), true) => r.and_then(|_| Err(e.clone())),
                        _ => r,
                    })
                    .collect(),
            )
        });
    }
    let update = FilesystemAccessPolicyUpdate {
        label: current.label.clone().unwrap_or_default(),
        enabled,
        linode_ids: ids.into_iter().collect(),
        squash_policy: squash.unwrap_or(SquashPolicy::RootSquash),
        protocols: if current.protocols.is_empty() {
            vec!["nfsv4".to_string()]
        } else {
            current.protocols.clone()
        },
    };
    let writing = c.acl_cache.write(vol);
    let written = c
        .cloud
        .put_filesystem_access_policy(vol.space, vol.filesystem, &update);
    let written: Step<()> = match written {
        Ok(policy) => {
            writing.finish(Written::Applied(Acl::of(&policy)));
            settled(c, vol, policy)
        }
        Err(e) => {
            if e.maybe_applied {
                c.in_doubt.record(&policy_key(vol));
                writing.finish(Written::InDoubt);
            } else {
                writing.finish(Written::NotApplied);
            }
            Err(e.error)
        }
    };
    written.then_result(move |written| {
        done(match written {
            Ok(()) => results,
            Err(e) => results
                .into_iter()
                .map(|r| r.and_then(|_| Err(e.clone())))
                .collect(),
        })
    })
}

/// Once the policy is `active` (parked on the poller until then).
fn settled(c: &Controller, vol: VolumeId, policy: FilesystemAccessPolicy) -> Step<()> {
    c.poller
        .filesystem_policy(vol.space, vol.filesystem, policy, |_| done(()))
}

/// The node id of a publish request: the node's Linode id. One that cannot
/// be a Linode id names no node, which CSI reports as NotFound.
pub(crate) fn linode_id(node_id: &str) -> Result<u64, Error> {
    node_id
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0 && !node_id.starts_with('0'))
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
    if req.volume_id.is_empty() {
        return Err(Error::InvalidArgument("volume ID is not set".into()));
    }
    if req.node_id.is_empty() {
        return Err(Error::InvalidArgument("node id is required".into()));
    }
    let Some(cap) = req.volume_capability.as_ref() else {
        return Err(Error::InvalidArgument(
            "volume capability is required".into(),
        ));
    };
    check_capabilities(std::slice::from_ref(cap))?;
    limits::map("volume context", &req.volume_context)?;
    limits::map("secrets", &req.secrets)?;
    let handle = VolumeHandle::parse(&req.volume_id)
        .map_err(|_| Error::NotFound(format!("volume {:?} not found", req.volume_id)))?;
    let vol = handle.filesystem();
    let node = linode_id(&req.node_id)?;
    if let VolumeHandle::Subdirectory(id) = &handle {
        // No ACL is touched for a directory that is not a volume.
        find(c, id)?;
    }
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
    if admitted && matches!(handle, VolumeHandle::Filesystem(_)) {
        return done(csi::ControllerPublishVolumeResponse::new());
    }
    c.acl
        .access(c, vol, node, true, arrival)
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
    if req.volume_id.is_empty() {
        return Err(Error::InvalidArgument("volume ID is not set".into()));
    }
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
    if let VolumeHandle::Subdirectory(id) = &handle {
        match c.cloud.get_filesystem(id.space, id.filesystem) {
            // A whole-filesystem volume holds no directory volumes: its
            // nodes are its own to keep.
            Ok(fs) if tags::is_volume(&fs) => return done(answer()),
            Ok(_) => {}
            Err(Error::NotFound(_)) => return done(answer()),
            Err(e) => return Err(e),
        }
        if let Some(kept) = kept_for_siblings(c, id, node)? {
            log::info!(
                "ControllerUnpublishVolume of {id} from node {node}: the node stays in the access policy of filesystem {}, which it still needs for {kept}",
                id.parent()
            );
            return done(answer());
        }
    }
    c.acl
        .access(c, handle.filesystem(), node, false, arrival)
        .then(move |()| done(answer()))
}

/// The sibling volumes that keep `node` in the parent's ACL, or `None`.
fn kept_for_siblings(c: &Controller, id: &SubdirId, node: u64) -> Result<Option<String>, Error> {
    let siblings = c.cluster.attached_siblings(id, node).map_err(|e| {
        e.context(format!(
            "ControllerUnpublishVolume of {id} from node {node}"
        ))
    })?;
    Ok((!siblings.is_empty()).then(|| siblings.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AccessPolicyMode;
    use crate::controller::cluster::Cluster;
    use crate::controller::in_doubt::InDoubt;
    use crate::controller::spaces::Spaces;
    use crate::fake::{FakeLinode, InstanceSeed, Seed, SpaceSeed};
    use crate::flow::Thunk;
    use crate::kube::KubeClient;
    use crate::linode::{Cloud, LinodeCloud, LinodeSettings, NewFilesystem, Poller, WaitPolicy};
    use crate::locks::OpLocks;
    use crate::rpc::Rpc;
    use std::sync::mpsc;

    const NODE: u64 = 4242;

    /// Held by every test here that runs batches: an injected batch panic
    /// is process-wide, and would otherwise hit another test's batch.
    static BATCHES: Mutex<()> = Mutex::new(());

    /// A controller over the fake Linode, in this process, with `vol` made.
    fn controller() -> (FakeLinode, Arc<Controller>, VolumeId) {
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
                    tags: vec![],
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
        let c = Arc::new(Controller {
            poller: Poller::new(cloud.clone(), wait),
            spaces: Spaces::new(cloud.clone(), Duration::ZERO),
            cloud,
            cluster: Cluster::new(KubeClient::from_kubeconfig(&kubeconfig).unwrap()),
            locks: OpLocks::new(),
            mode: AccessPolicyMode::Node,
            default_capacity_bytes: 1 << 30,
            acl: AclQueue::default(),
            in_doubt: InDoubt::new(Duration::from_secs(10)),
            rpc: Rpc::new(2),
            acl_cache: crate::controller::acl_cache::AclCache::new(Duration::from_secs(300)),
            walks: Default::default(),
            expansion: crate::config::VolumeExpansion::Off,
            shares: crate::controller::shares::Shares::new(Arc::new(Mounted), dir.join("shares")),
            room: Default::default(),
        });
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
            _: &str,
            _: &std::path::Path,
            _: &[String],
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
        use crate::controller::directories::{create, Marker, Ownership};
        let root = c.shares.mount_point(parent);
        std::fs::create_dir_all(&root).unwrap();
        let marker = Marker {
            volume_id: format!("{parent}/{name}"),
            csi_name: name.into(),
            on_delete: crate::controller::OnDelete::Delete,
            retained: false,
            archive_to: None,
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
    fn a_panicking_batch_answers_internal_and_the_next_publish_works() {
        let _alone = lock(&BATCHES);
        let (fake, c, vol) = controller();
        inject_batch_panics(1);
        let err = block_on(publish(&c, publish_req(vol))).unwrap_err();
        assert!(matches!(err, Error::Internal(_)), "{err:?}");
        assert!(
            !lock(&c.acl.pending).contains_key(&vol),
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
        let err = block_on(c.acl.access(&c, parent, NODE, false, revoking)).unwrap_err();
        assert!(matches!(err, Error::Aborted(_)), "{err:?}");
        let policy = fake.filesystem_policy(parent.filesystem).unwrap();
        assert!(
            policy.linode_ids().contains(&NODE),
            "the node stays admitted"
        );
    }
}
