//! One thread that watches every Linode object the driver waits for, so a
//! wait holds no RPC worker and costs no request of its own. It refreshes
//! all pending filesystems of one Space with one request (a list filtered
//! to their ids; a plain GET when only one is pending), all pending
//! snapshots of one filesystem likewise (and its pending quotas, the same
//! way), and each pending access policy
//! once however many wait for it. CreateVolume's label lookups join their
//! Space's refresh: its one list filters on the pending ids and labels
//! together (`+or`), a lone lookup costs today's filtered GET, and the
//! first lookup of an idle Space goes at once. While the API reports a
//! list budget, a Space's list refresh goes at most once a second, so
//! lookups and polls together take a bounded share of the scarce list
//! class whatever their number, and a create already POSTed shares every
//! refresh with the new lookups instead of queueing behind them. Each
//! watch backs off on its own (fast first polls, growing to a cap), and
//! under a rate limit skips the first polls that recent waits of its kind
//! found pending; a refresh answers every watch of its group. Each due
//! group is refreshed on a short-lived thread of its own
//! (a few at once), so a group whose requests hang or fail holds back no
//! other; a poll is one attempt, never the client's retry loop (the next
//! poll is its retry). Transient failures (429, 5xx, timeouts, transport
//! errors) keep the watches waiting and are counted; the client's pacer
//! slows every request after a 429, these polls included. Its pending waits
//! and how long each took to become active are metrics. It knows nothing
//! about CSI, and never runs a waiter's work: firing a watch only hands
//! the rest to the waiter's driver, and no watch is fired while the
//! poller's state is locked. A panic in a refresh ends that group's waits
//! with Internal; polling goes on.
//!
//! This file is the public face: registering a wait and counting what is
//! pending. Each part below imports only from parts after it, so none
//! reaches back: `thread` (the loop), the kinds (`spaces` with its label
//! lookups, `children`, `policies`), `refresh` (what any kind's refresh
//! does), `waits` (the state under the lock), `learned` (how long recent
//! waits stayed pending, which decides a new wait's first poll), `policy`.

mod children;
mod learned;
mod policies;
mod policy;
mod refresh;
mod spaces;
mod thread;
mod waits;

pub use policy::WaitPolicy;

use super::pacer::RequestClass;
use super::types::{Filesystem, FilesystemAccessPolicy, Quota, Readiness, Snapshot};
use super::Cloud;
use crate::flow::{self, Step};
use crate::mutex::lock;
use refresh::{terminal, Target};
use spaces::LOOKUP_KIND;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;
use waits::{Key, Lookup, Shared, State, Watch};

/// The shared poller; cheap to clone.
#[derive(Clone)]
pub struct Poller {
    shared: Arc<Shared>,
}

/// What the poller's requests did so far: each refresh of a group is one
/// poll (one request, or a few for a group whose list lags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollCounts {
    pub polls: u64,
    /// Polls that failed transiently; their waits went on.
    pub failed: u64,
}

/// How many waits of each kind are pending.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PendingWaits {
    pub filesystems: usize,
    pub snapshots: usize,
    pub quotas: usize,
    pub policies: usize,
    /// Label lookups of CreateVolume.
    pub lookups: usize,
}

impl Poller {
    /// Starts the poller's thread; it ends once the last clone is dropped
    /// and the waits it still had are over.
    pub fn new(cloud: Arc<dyn Cloud>, policy: WaitPolicy) -> Poller {
        let shared = Arc::new(Shared {
            cloud: cloud.single_attempt(),
            policy,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            polls: AtomicU64::new(0),
            failed_polls: AtomicU64::new(0),
        });
        let polled = Arc::downgrade(&shared);
        // Weak, so the metrics never keep a dropped poller's thread alive.
        let watched = Arc::downgrade(&shared);
        crate::metrics::watch_pending_waits(move || {
            let waits = Poller {
                shared: watched.upgrade()?,
            }
            .pending();
            Some(vec![
                (Filesystem::KIND, waits.filesystems),
                (Snapshot::KIND, waits.snapshots),
                (Quota::KIND, waits.quotas),
                (FilesystemAccessPolicy::KIND, waits.policies),
                (LOOKUP_KIND, waits.lookups),
            ])
        });
        std::thread::Builder::new()
            .name("linode-poller".into())
            .spawn(move || thread::run(polled))
            .expect("spawn Linode poller thread");
        Poller { shared }
    }

    /// Continues with `then` once `fs` is active: at once when it already
    /// is, after waiting (parked, no thread held) when it is on its way.
    pub fn filesystem<T: Send + 'static>(
        &self,
        fs: Filesystem,
        then: impl FnOnce(Filesystem) -> Step<T> + Send + 'static,
    ) -> Step<T> {
        let key = (fs.space_id, fs.id, 0);
        let what = format!("NFS filesystem {}", fs.id);
        self.watch(key, what, fs, then)
    }

    /// Continues with `then` once `snap` is active.
    pub fn snapshot<T: Send + 'static>(
        &self,
        snap: Snapshot,
        then: impl FnOnce(Snapshot) -> Step<T> + Send + 'static,
    ) -> Step<T> {
        let key = (snap.space_id, snap.filesystem_id, snap.id);
        let what = format!(
            "NFS snapshot {}/{}/{}",
            snap.space_id, snap.filesystem_id, snap.id
        );
        self.watch(key, what, snap, then)
    }

    /// Continues with `then` once quota `quota` of filesystem `space/fs`
    /// is active (an update shows `updating` until it is applied).
    pub fn quota<T: Send + 'static>(
        &self,
        space: u64,
        quota: Quota,
        then: impl FnOnce(Quota) -> Step<T> + Send + 'static,
    ) -> Step<T> {
        let key = (space, quota.filesystem_id, quota.id);
        let what = format!(
            "NFS quota {} ({}) of filesystem {space}/{}",
            quota.id, quota.path, quota.filesystem_id
        );
        self.watch(key, what, quota, then)
    }

    /// Continues with `then` once the access policy of filesystem
    /// `space/fs` (whose latest state is `policy`) has settled.
    pub fn filesystem_policy<T: Send + 'static>(
        &self,
        space: u64,
        fs: u64,
        policy: FilesystemAccessPolicy,
        then: impl FnOnce(FilesystemAccessPolicy) -> Step<T> + Send + 'static,
    ) -> Step<T> {
        let what = format!("NFS filesystem {fs} access policy");
        self.watch((space, fs, 0), what, policy, then)
    }

    /// The polls made so far, and how many failed transiently.
    pub fn counts(&self) -> PollCounts {
        PollCounts {
            polls: self.shared.polls.load(Ordering::Relaxed),
            failed: self.shared.failed_polls.load(Ordering::Relaxed),
        }
    }

    /// Waits pending right now, by kind.
    pub fn pending(&self) -> PendingWaits {
        let mut state = lock(&self.shared.state);
        state.prune();
        PendingWaits {
            filesystems: state.filesystems.len(),
            snapshots: state.snapshots.len(),
            quotas: state.quotas.len(),
            policies: state.policies.len(),
            lookups: state.lookups.len(),
        }
    }

    /// Continues with `then` once a refresh of Space `space` sent after
    /// this call has listed the filesystems labelled `label` in `region`
    /// (whatever their status), or failed. Always parks: the refresh is
    /// shared with every other lookup and wait of the Space.
    pub fn filesystems_labelled<T: Send + 'static>(
        &self,
        space: u64,
        label: &str,
        region: &str,
        then: impl FnOnce(crate::Result<Vec<Filesystem>>) -> Step<T> + Send + 'static,
    ) -> Step<T> {
        let shared = self.shared.clone();
        let (label, region) = (label.to_string(), region.to_string());
        flow::park(
            move |slot| {
                let now = Instant::now();
                let mut state = lock(&shared.state);
                let seq = state.next_lookup;
                state.next_lookup += 1;
                state.lookups.push(Lookup {
                    seq,
                    space,
                    label,
                    region,
                    since: now,
                    delay: shared.policy.initial_delay,
                    due: now,
                    failures: 0,
                    slot,
                });
                drop(state);
                shared.changed.notify_one();
            },
            then,
        )
    }

    fn watch<V: Target, T: Send + 'static>(
        &self,
        key: Key,
        what: String,
        current: V,
        then: impl FnOnce(V) -> Step<T> + Send + 'static,
    ) -> Step<T> {
        match current.status().readiness() {
            Readiness::Ready => then(current),
            Readiness::Failed(status) => Err(terminal(&what, &status)),
            Readiness::Pending => {
                let shared = self.shared.clone();
                flow::park(
                    move |slot| {
                        let now = Instant::now();
                        let mut state = lock(&shared.state);
                        let paced = [RequestClass::List, RequestClass::Other]
                            .iter()
                            .any(|class| shared.cloud.rate_limit(*class).limit.is_some());
                        let (delay, after, before) =
                            state.learned.first_poll(V::KIND, &shared.policy, paced);
                        let watches = V::watches(&mut state);
                        // A wait that joins another on the same object
                        // began after the object did: it would teach
                        // that objects settle sooner than they do.
                        let learns = !watches.iter().any(|w| w.key == key);
                        watches.push(Watch {
                            key,
                            what,
                            since: now,
                            delay,
                            due: now + after,
                            pending_for: before,
                            learns,
                            slot,
                        });
                        drop(state);
                        shared.changed.notify_one();
                    },
                    move |seen: crate::Result<V>| then(seen?),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{done, Flow, Thunk};
    use crate::linode::{
        CloneFilesystem, FilesystemAccessPolicyUpdate, Instance, InstanceConfig, InstanceInterface,
        NewFilesystem, NewQuota, Quota, QuotaUpdate, Space, SpaceAccessPolicy, WriteError,
    };
    use crate::Error;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A backend whose every call panics, as a bug in decoding might.
    struct Panics;

    macro_rules! panicking {
        ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
            $(fn $name(&self, $($arg: $ty),*) -> $ret {
                $(let _ = $arg;)*
                panic!(concat!("injected: ", stringify!($name)))
            })*
        };
    }

    impl Cloud for Panics {
        fn single_attempt(&self) -> Arc<dyn Cloud> {
            Arc::new(Panics)
        }
        fn finishing(&self) -> Arc<dyn Cloud> {
            Arc::new(Panics)
        }
        panicking! {
            list_spaces() -> crate::Result<Vec<Space>>;
            get_space(a: u64) -> crate::Result<Space>;
            find_spaces_by_label(a: &str) -> crate::Result<Vec<Space>>;
            get_space_access_policy(a: u64) -> crate::Result<Option<SpaceAccessPolicy>>;
            list_filesystems(a: u64) -> crate::Result<Vec<Filesystem>>;
            find_filesystems(a: u64, b: &str, c: &str) -> crate::Result<Vec<Filesystem>>;
            create_filesystem(a: u64, b: &NewFilesystem) -> Result<Filesystem, WriteError>;
            find_filesystems_by_ids(a: u64, b: &[u64]) -> crate::Result<Vec<Filesystem>>;
            find_filesystems_matching(a: u64, b: &[u64], c: &[&str])
                -> crate::Result<Vec<Filesystem>>;
            find_filesystems_by_tag(a: u64, b: &str) -> crate::Result<Vec<Filesystem>>;
            get_filesystem(a: u64, b: u64) -> crate::Result<Filesystem>;
            update_filesystem_tags(a: u64, b: u64, c: &[String]) -> crate::Result<Filesystem>;
            delete_filesystem(a: u64, b: u64) -> crate::Result<()>;
            get_filesystem_access_policy(a: u64, b: u64)
                -> crate::Result<Option<FilesystemAccessPolicy>>;
            lacks_filesystem_policies() -> bool;
            put_filesystem_access_policy(a: u64, b: u64, c: &FilesystemAccessPolicyUpdate)
                -> Result<FilesystemAccessPolicy, WriteError>;
            list_snapshots(a: u64, b: u64) -> crate::Result<Vec<Snapshot>>;
            create_snapshot(a: u64, b: u64, c: &str, d: &[String]) -> Result<Snapshot, WriteError>;
            get_snapshot(a: u64, b: u64, c: u64) -> crate::Result<Snapshot>;
            delete_snapshot(a: u64, b: u64, c: u64) -> crate::Result<()>;
            clone_snapshot(a: u64, b: u64, c: u64, d: &CloneFilesystem)
                -> Result<Filesystem, WriteError>;
            get_instance(a: u64) -> crate::Result<Instance>;
            list_instance_configs(a: u64) -> crate::Result<Vec<InstanceConfig>>;
            list_instance_interfaces(a: u64) -> crate::Result<Vec<InstanceInterface>>;
            list_quotas(a: u64, b: u64) -> crate::Result<Vec<Quota>>;
            find_quotas_by_path(a: u64, b: u64, c: &str) -> crate::Result<Vec<Quota>>;
            create_quota(a: u64, b: u64, c: &NewQuota) -> Result<Quota, WriteError>;
            get_quota(a: u64, b: u64, c: u64) -> crate::Result<Quota>;
            update_quota(a: u64, b: u64, c: u64, d: &QuotaUpdate) -> Result<Quota, WriteError>;
            delete_quota(a: u64, b: u64, c: u64) -> crate::Result<()>;
        }
    }

    fn wait_on(poller: &Poller, id: u64) -> crate::Result<Filesystem> {
        let fs: Filesystem = serde_json::from_value(
            serde_json::json!({"id": id, "space_id": 7, "status": "creating"}),
        )
        .unwrap();
        let (tx, rx) = mpsc::channel::<Thunk<Filesystem>>();
        match poller.filesystem(fs, done) {
            Ok(Flow::Parked(p)) => {
                let _held = p.park(Box::new(move |rest| {
                    let _ = tx.send(rest);
                }));
                let rest = rx.recv_timeout(Duration::from_secs(10)).expect("answered");
                match rest() {
                    Ok(Flow::Ready(fs)) => Ok(fs),
                    Ok(Flow::Parked(_)) => panic!("parked again"),
                    Err(e) => Err(e),
                }
            }
            _ => panic!("a creating filesystem parks"),
        }
    }

    #[test]
    fn a_panicking_poll_answers_its_waits_internal_and_the_poller_goes_on() {
        let policy = WaitPolicy {
            timeout: Duration::from_secs(10),
            initial_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(20),
        };
        let poller = Poller::new(Arc::new(Panics), policy);
        for id in [1, 2] {
            let err = wait_on(&poller, id).unwrap_err();
            assert!(matches!(err, Error::Internal(_)), "{id}: {err:?}");
        }
        assert_eq!(poller.pending(), PendingWaits::default());
    }
}
