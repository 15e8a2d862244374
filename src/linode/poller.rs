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
//! watch backs off on its own (fast first polls, growing to a cap); a
//! refresh answers every watch of its group. Each due group is refreshed on a short-lived thread of its own
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

use super::pacer::RequestClass;
use super::types::{Filesystem, FilesystemAccessPolicy, Quota, Readiness, Snapshot, Status};
use super::Cloud;
use crate::backoff::Backoff;
use crate::flow::{self, Slot, Step};
use crate::mutex::{lock, wait_timeout};
use crate::Error;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Bounds of every wait. `timeout` is `LINODE_WAIT_TIMEOUT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    pub timeout: Duration,
    pub initial_delay: Duration,
    pub max_delay: Duration,
}

impl WaitPolicy {
    /// `timeout` with the production backoff: 250 ms growing ×1.5 to 4 s.
    /// ×1.5 rather than ×2: overshooting a readiness by a whole doubled
    /// interval is the dominant cost of a fresh CreateVolume.
    pub fn new(timeout: Duration) -> WaitPolicy {
        WaitPolicy {
            timeout,
            initial_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(4),
        }
    }

    /// ×1.5 per poll from `initial_delay` up to `max_delay`.
    fn backoff(&self) -> Backoff {
        Backoff::growing(self.initial_delay, self.max_delay, 3, 2)
    }
}

impl Default for WaitPolicy {
    /// The behaviour.md default of 5 minutes.
    fn default() -> WaitPolicy {
        WaitPolicy::new(Duration::from_secs(300))
    }
}

/// The shared poller; cheap to clone.
#[derive(Clone)]
pub struct Poller {
    shared: Arc<Shared>,
}

struct Shared {
    /// Tries each request once.
    cloud: Arc<dyn Cloud>,
    policy: WaitPolicy,
    state: Mutex<State>,
    changed: Condvar,
    polls: AtomicU64,
    failed_polls: AtomicU64,
}

/// What the poller's requests did so far: each refresh of a group is one
/// poll (one request, or a few for a group whose list lags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollCounts {
    pub polls: u64,
    /// Polls that failed transiently; their waits went on.
    pub failed: u64,
}

#[derive(Default)]
struct State {
    filesystems: Vec<Watch<Filesystem>>,
    snapshots: Vec<Watch<Snapshot>>,
    quotas: Vec<Watch<Quota>>,
    policies: Vec<Watch<FilesystemAccessPolicy>>,
    /// Groups whose refresh is under way.
    polling: BTreeSet<Polling>,
    lookups: Vec<Lookup>,
    /// When each Space's last list refresh was sent.
    listed: BTreeMap<u64, Instant>,
    /// Numbers the lookups, so a refresh answers only those it was sent for.
    next_lookup: u64,
}

/// While the API reports a list budget, a Space's refresh that costs a
/// list goes at most this often: 60 a minute per Space at most, under the
/// 200 a minute Linode gives a token, however many creates and waits there
/// are (they share it), and none of the bursts a fresh window would allow.
const LIST_INTERVAL: Duration = Duration::from_secs(1);
/// A lookup whose refreshes failed transiently this many times is answered
/// with the failure (the caller retries): the attempts the client's default
/// `RetryPolicy` gives a read.
const LOOKUP_ATTEMPTS: u32 = 5;
/// Lookups as the metrics name them.
const LOOKUP_KIND: &str = "label_lookup";

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

/// A CreateVolume's idempotency check: the filesystems of a Space that
/// carry a label in a region. It is answered by the first refresh of its
/// Space sent after it was asked.
struct Lookup {
    seq: u64,
    space: u64,
    label: String,
    region: String,
    since: Instant,
    delay: Duration,
    due: Instant,
    failures: u32,
    slot: Arc<Slot<crate::Result<Vec<Filesystem>>>>,
}

/// The lookups a Space's refresh answers: `(seq, label, region)`.
type Asked = Vec<(u64, String, String)>;

/// `(space, filesystem, snapshot)`; unused parts are 0.
type Key = (u64, u64, u64);

struct Watch<T> {
    key: Key,
    what: String,
    since: Instant,
    delay: Duration,
    due: Instant,
    slot: Arc<Slot<crate::Result<T>>>,
}

/// What the poller can watch: how its watches are grouped, and how one
/// group is refreshed in as few requests as the API allows.
trait Target: Clone + Send + 'static {
    /// The kind as the metrics name it.
    const KIND: &'static str;
    /// Keys sharing a group are refreshed together.
    fn group(key: Key) -> Key;
    fn status(&self) -> &Status;
    fn watches(state: &mut State) -> &mut Vec<Watch<Self>>;
    /// The objects of `keys` (all in `group`) that exist.
    fn fetch(cloud: &dyn Cloud, group: Key, keys: &[Key]) -> crate::Result<BTreeMap<Key, Self>>;
}

impl Target for Filesystem {
    const KIND: &'static str = "filesystem";

    fn group((space, _, _): Key) -> Key {
        (space, 0, 0)
    }

    fn status(&self) -> &Status {
        &self.status
    }

    fn watches(state: &mut State) -> &mut Vec<Watch<Self>> {
        &mut state.filesystems
    }

    fn fetch(cloud: &dyn Cloud, group: Key, keys: &[Key]) -> crate::Result<BTreeMap<Key, Self>> {
        refresh_space(cloud, group.0, keys, &[]).map(|(found, _)| found)
    }
}

/// One refresh of a Space: the watched filesystems `keys` and everything
/// labelled as one of `lookups` (`(label, region)`), in one request where
/// the API allows: a plain GET for a lone id, the filtered GET of today for
/// a lone lookup, else one list filtered to the ids and labels together.
fn refresh_space(
    cloud: &dyn Cloud,
    space: u64,
    keys: &[Key],
    lookups: &[(String, String)],
) -> crate::Result<(BTreeMap<Key, Filesystem>, Vec<Filesystem>)> {
    let ids: Vec<u64> = keys.iter().map(|k| k.1).collect();
    let mut found = BTreeMap::new();
    let listed = match (&ids[..], lookups) {
        ([], []) => Vec::new(),
        // A lone object costs a plain GET, not one of the scarce
        // paginated requests.
        ([id], []) => {
            if let Some(fs) = absent_is_none(cloud.get_filesystem(space, *id))? {
                found.insert((space, *id, 0), fs);
            }
            return Ok((found, Vec::new()));
        }
        ([], [(label, region)]) => cloud.find_filesystems(space, label, region)?,
        _ => {
            let labels: Vec<&str> = lookups.iter().map(|(l, _)| l.as_str()).collect();
            cloud.find_filesystems_matching(space, &ids, &labels)?
        }
    };
    for fs in listed.iter().filter(|fs| ids.contains(&fs.id)) {
        found.insert((space, fs.id, 0), fs.clone());
    }
    // A list may lag behind a create: only a GET says an object is gone.
    let unlisted: Vec<Key> = keys
        .iter()
        .filter(|k| !found.contains_key(k))
        .copied()
        .collect();
    for key in unlisted {
        if let Some(fs) = absent_is_none(cloud.get_filesystem(space, key.1))? {
            found.insert(key, fs);
        }
    }
    Ok((found, listed))
}

impl Target for Snapshot {
    const KIND: &'static str = "snapshot";

    fn group((space, fs, _): Key) -> Key {
        (space, fs, 0)
    }

    fn status(&self) -> &Status {
        &self.status
    }

    fn watches(state: &mut State) -> &mut Vec<Watch<Self>> {
        &mut state.snapshots
    }

    fn fetch(
        cloud: &dyn Cloud,
        (space, fs, _): Key,
        keys: &[Key],
    ) -> crate::Result<BTreeMap<Key, Self>> {
        children_of(
            keys,
            |id| cloud.get_snapshot(space, fs, id),
            || cloud.list_snapshots(space, fs),
            |s| ((space, fs, s.id), s),
        )
    }
}

impl Target for Quota {
    const KIND: &'static str = "quota";

    fn group((space, fs, _): Key) -> Key {
        (space, fs, 0)
    }

    fn status(&self) -> &Status {
        &self.status
    }

    fn watches(state: &mut State) -> &mut Vec<Watch<Self>> {
        &mut state.quotas
    }

    fn fetch(
        cloud: &dyn Cloud,
        (space, fs, _): Key,
        keys: &[Key],
    ) -> crate::Result<BTreeMap<Key, Self>> {
        children_of(
            keys,
            |id| cloud.get_quota(space, fs, id),
            || cloud.list_quotas(space, fs),
            |q| ((space, fs, q.id), q),
        )
    }
}

impl Target for FilesystemAccessPolicy {
    const KIND: &'static str = "access_policy";

    fn group(key: Key) -> Key {
        key
    }

    fn status(&self) -> &Status {
        &self.status
    }

    fn watches(state: &mut State) -> &mut Vec<Watch<Self>> {
        &mut state.policies
    }

    fn fetch(
        cloud: &dyn Cloud,
        (space, fs, _): Key,
        _: &[Key],
    ) -> crate::Result<BTreeMap<Key, Self>> {
        let mut found = BTreeMap::new();
        let policy = absent_is_none(cloud.get_filesystem_access_policy(space, fs))?;
        if let Some(p) = policy.flatten() {
            found.insert((space, fs, 0), p);
        }
        Ok(found)
    }
}

/// The watched objects `keys` under one filesystem (its snapshots, its
/// quotas) that exist: a plain GET of a lone one, else one list of them
/// all. A filesystem that is gone has none.
fn children_of<T>(
    keys: &[Key],
    get: impl FnOnce(u64) -> crate::Result<T>,
    list: impl FnOnce() -> crate::Result<Vec<T>>,
    key_of: impl Fn(T) -> (Key, T),
) -> crate::Result<BTreeMap<Key, T>> {
    let mut found = BTreeMap::new();
    if let [key] = keys {
        if let Some(one) = absent_is_none(get(key.2))? {
            found.insert(*key, one);
        }
        return Ok(found);
    }
    let wanted: BTreeSet<&Key> = keys.iter().collect();
    for child in absent_is_none(list())?.unwrap_or_default() {
        let (key, child) = key_of(child);
        if wanted.contains(&key) {
            found.insert(key, child);
        }
    }
    Ok(found)
}

/// A read of one object (or of a list under it): `None` when it is gone.
fn absent_is_none<T>(read: crate::Result<T>) -> crate::Result<Option<T>> {
    match read {
        Ok(v) => Ok(Some(v)),
        Err(Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Failures a later poll can get past: throttling, the backend's own
/// errors, timeouts and the network. Anything else (the token refused, a
/// request the API calls invalid) will not change by waiting.
fn transient(e: &Error) -> bool {
    matches!(
        e,
        Error::Unavailable(_) | Error::Internal(_) | Error::DeadlineExceeded(_)
    )
}

/// Watches answered under the lock, fired once it is released.
type Fired = Vec<Box<dyn FnOnce() + Send>>;

fn fire_all(fired: Fired) {
    for fire in fired {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(fire)) {
            flow::panicked("answering a wait", &*panic);
        }
    }
}

fn answer<V: Send + 'static>(
    fired: &mut Fired,
    slot: &Arc<Slot<crate::Result<V>>>,
    outcome: crate::Result<V>,
) {
    let slot = slot.clone();
    fired.push(Box::new(move || {
        slot.fire(outcome);
    }));
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
            .spawn(move || run(polled))
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
                        let delay = shared.policy.initial_delay;
                        V::watches(&mut lock(&shared.state)).push(Watch {
                            key,
                            what,
                            since: now,
                            delay,
                            due: now + delay,
                            slot,
                        });
                        shared.changed.notify_one();
                    },
                    move |seen: crate::Result<V>| then(seen?),
                )
            }
        }
    }
}

fn terminal(what: &str, status: &str) -> Error {
    Error::FailedPrecondition(format!(
        "{what} is in status {status:?} and will not become active"
    ))
}

/// At most this many groups are being refreshed at once, each on its own
/// short-lived thread, so a group whose requests hang holds back no other.
const MAX_POLLS_IN_FLIGHT: usize = 8;

/// A group being refreshed: its kind and group key.
type Polling = (&'static str, Key);

/// One group's refresh, ready to run off the lock.
type Job = Box<dyn FnOnce() + Send>;

impl State {
    /// Forgets watches whose waiter left or was answered.
    fn prune(&mut self) {
        self.filesystems.retain(|w| w.slot.is_waiting());
        self.snapshots.retain(|w| w.slot.is_waiting());
        self.quotas.retain(|w| w.slot.is_waiting());
        self.policies.retain(|w| w.slot.is_waiting());
        self.lookups.retain(|l| l.slot.is_waiting());
    }

    fn is_empty(&self) -> bool {
        self.filesystems.is_empty()
            && self.snapshots.is_empty()
            && self.quotas.is_empty()
            && self.policies.is_empty()
            && self.lookups.is_empty()
    }
}

/// A Space group's watched keys and lookups, and when it is next due.
type SpaceWork = BTreeMap<Key, (Vec<Key>, Asked, Instant)>;

/// Every Space group not being refreshed, with its watches' keys and
/// lookups and when it may go: its first due watch or lookup, but a
/// refresh costing a list no sooner than `LIST_INTERVAL` after the Space's
/// last one while the list class is `paced`.
fn space_work(state: &mut State, now: Instant, paced: bool) -> SpaceWork {
    let mut work: SpaceWork = BTreeMap::new();
    let idle = |group: &Key| !state.polling.contains(&(Filesystem::KIND, *group));
    for w in &state.filesystems {
        let group = Filesystem::group(w.key);
        if !idle(&group) {
            continue;
        }
        let entry = work.entry(group).or_insert((Vec::new(), Vec::new(), w.due));
        if !entry.0.contains(&w.key) {
            entry.0.push(w.key);
        }
        entry.2 = entry.2.min(w.due);
    }
    for l in &state.lookups {
        let group = (l.space, 0, 0);
        if !idle(&group) {
            continue;
        }
        let entry = work.entry(group).or_insert((Vec::new(), Vec::new(), l.due));
        entry.1.push((l.seq, l.label.clone(), l.region.clone()));
        entry.2 = entry.2.min(l.due);
    }
    state
        .listed
        .retain(|_, at| now.duration_since(*at) < LIST_INTERVAL);
    for (group, (keys, asked, at)) in work.iter_mut() {
        let lists = !asked.is_empty() || keys.len() > 1;
        if let Some(last) = state.listed.get(&group.0).filter(|_| paced && lists) {
            *at = (*at).max(*last + LIST_INTERVAL);
        }
    }
    work
}

/// Takes the due Space groups (as many as there is room for), marking each
/// as being refreshed, as jobs for their own threads; returns when the
/// next one held back is due.
fn take_spaces(
    shared: &Arc<Shared>,
    state: &mut State,
    now: Instant,
    jobs: &mut Vec<Job>,
) -> Option<Instant> {
    let paced = shared.cloud.rate_limit(RequestClass::List).limit.is_some();
    let mut wake: Option<Instant> = None;
    for (group, (keys, asked, at)) in space_work(state, now, paced) {
        // With every refresh slot taken, the end of one wakes the poller.
        if state.polling.len() >= MAX_POLLS_IN_FLIGHT {
            break;
        }
        if at > now {
            wake = Some(wake.map_or(at, |w| w.min(at)));
            continue;
        }
        if !asked.is_empty() || keys.len() > 1 {
            state.listed.insert(group.0, now);
        }
        state.polling.insert((Filesystem::KIND, group));
        let shared = shared.clone();
        jobs.push(Box::new(move || poll_space(&shared, group, keys, asked)));
    }
    wake
}

/// Refreshes one Space's watches and lookups together (no lock held) and
/// answers what it says; a panic ends that Space's waits with Internal.
fn poll_space(shared: &Shared, group: Key, keys: Vec<Key>, asked: Asked) {
    let mut wanted: Vec<(String, String)> = Vec::new();
    for (_, label, region) in &asked {
        if !wanted.iter().any(|(l, r)| l == label && r == region) {
            wanted.push((label.clone(), region.clone()));
        }
    }
    let fetched = catch_unwind(AssertUnwindSafe(|| {
        refresh_space(shared.cloud.as_ref(), group.0, &keys, &wanted)
    }));
    shared.polls.fetch_add(1, Ordering::Relaxed);
    if let Ok(Err(e)) = &fetched {
        if transient(e) {
            shared.failed_polls.fetch_add(1, Ordering::Relaxed);
            let kind = if asked.is_empty() {
                Filesystem::KIND
            } else {
                LOOKUP_KIND
            };
            crate::metrics::poll_failed(kind);
            log::info!("polling Linode for {kind}: {e}; the waits go on");
        }
    }
    let mut fired = Fired::new();
    {
        let mut state = lock(&shared.state);
        state.polling.remove(&(Filesystem::KIND, group));
        match fetched {
            Ok(result) => {
                let (found, listed) = match result {
                    Ok((found, listed)) => (Ok(found), Ok(listed)),
                    Err(e) => (Err(e.clone()), Err(e)),
                };
                settle(
                    &mut state.filesystems,
                    &keys,
                    &found,
                    &shared.policy,
                    &mut fired,
                );
                settle_lookups(
                    &mut state.lookups,
                    &asked,
                    &listed,
                    &shared.policy,
                    &mut fired,
                );
            }
            Err(panic) => {
                let e = flow::panicked("a Linode poll", &*panic);
                fail(&mut state.filesystems, group, &e, &mut fired);
                state.lookups.retain(|l| {
                    let polled = asked.iter().any(|(seq, _, _)| *seq == l.seq);
                    if polled {
                        answer(&mut fired, &l.slot, Err(e.clone()));
                    }
                    !polled
                });
            }
        }
    }
    shared.changed.notify_all();
    fire_all(fired);
}

/// Answers each refreshed lookup with what its label and region matched;
/// a transient failure asks again later, up to `LOOKUP_ATTEMPTS`.
fn settle_lookups(
    lookups: &mut Vec<Lookup>,
    asked: &Asked,
    result: &crate::Result<Vec<Filesystem>>,
    policy: &WaitPolicy,
    fired: &mut Fired,
) {
    let now = Instant::now();
    let backoff = policy.backoff();
    lookups.retain_mut(|l| {
        if !asked.iter().any(|(seq, _, _)| *seq == l.seq) {
            return true;
        }
        let outcome = match result {
            Ok(listed) => Ok(listed
                .iter()
                .filter(|fs| fs.label == l.label && fs.region == l.region)
                .cloned()
                .collect()),
            Err(e) if transient(e) && l.failures + 1 < LOOKUP_ATTEMPTS => {
                l.failures += 1;
                l.delay = backoff.after(l.delay);
                l.due = now + l.delay;
                return true;
            }
            Err(e) => Err(e.clone()),
        };
        answer(fired, &l.slot, outcome);
        false
    });
}

fn expire_lookups(lookups: &mut Vec<Lookup>, now: Instant, timeout: Duration, fired: &mut Fired) {
    lookups.retain(|l| {
        if now.duration_since(l.since) < timeout {
            return true;
        }
        let late = Error::DeadlineExceeded(format!(
            "looking up NFS filesystem {:?} in space {} did not finish within {timeout:?}",
            l.label, l.space
        ));
        answer(fired, &l.slot, Err(late));
        false
    });
}

/// When the first filesystem watch or lookup times out (when they are due
/// is the Spaces' business, see `take_spaces`).
fn next_expiry(state: &State, timeout: Duration) -> Option<Instant> {
    let watches = state.filesystems.iter().map(|w| w.since);
    let lookups = state.lookups.iter().map(|l| l.since);
    watches.chain(lookups).min().map(|since| since + timeout)
}

fn expire<V: Target>(
    watches: &mut Vec<Watch<V>>,
    now: Instant,
    timeout: Duration,
    fired: &mut Fired,
) {
    watches.retain(|w| {
        if now.duration_since(w.since) < timeout {
            return true;
        }
        let late = Error::DeadlineExceeded(format!(
            "{} did not become active within {timeout:?}",
            w.what
        ));
        answer(fired, &w.slot, Err(late));
        false
    });
}

/// Ends the watches of `group` with `e` (its refresh panicked).
fn fail<V: Target>(watches: &mut Vec<Watch<V>>, group: Key, e: &Error, fired: &mut Fired) {
    watches.retain(|w| {
        if V::group(w.key) != group {
            return true;
        }
        answer(fired, &w.slot, Err(e.clone()));
        false
    });
}

/// Each group with a due watch that is not being refreshed already, with
/// all of the group's keys.
fn due<V: Target>(
    watches: &[Watch<V>],
    now: Instant,
    polling: &BTreeSet<Polling>,
) -> BTreeMap<Key, Vec<Key>> {
    let idle = |w: &&Watch<V>| !polling.contains(&(V::KIND, V::group(w.key)));
    let groups: BTreeSet<Key> = watches
        .iter()
        .filter(idle)
        .filter(|w| w.due <= now)
        .map(|w| V::group(w.key))
        .collect();
    let mut out: BTreeMap<Key, Vec<Key>> = BTreeMap::new();
    for w in watches.iter().filter(|w| groups.contains(&V::group(w.key))) {
        let keys = out.entry(V::group(w.key)).or_default();
        if !keys.contains(&w.key) {
            keys.push(w.key);
        }
    }
    out
}

/// When the next watch is due or expires. A group being refreshed is
/// rescheduled when its refresh ends, and with every refresh slot taken
/// none can start before one ends (which wakes the poller): then only
/// expiries count.
fn next_wake<V: Target>(
    watches: &[Watch<V>],
    timeout: Duration,
    polling: &BTreeSet<Polling>,
) -> Option<Instant> {
    let full = polling.len() >= MAX_POLLS_IN_FLIGHT;
    watches
        .iter()
        .map(|w| {
            let expiry = w.since + timeout;
            if full || polling.contains(&(V::KIND, V::group(w.key))) {
                expiry
            } else {
                w.due.min(expiry)
            }
        })
        .min()
}

/// Takes up to `room` due groups of kind `V`, marking each as being
/// refreshed, as jobs for their own threads.
fn take_due<V: Target>(shared: &Arc<Shared>, state: &mut State, now: Instant, jobs: &mut Vec<Job>) {
    let polling = std::mem::take(&mut state.polling);
    let groups = due(V::watches(state), now, &polling);
    state.polling = polling;
    for (group, keys) in groups {
        if state.polling.len() >= MAX_POLLS_IN_FLIGHT {
            return;
        }
        state.polling.insert((V::KIND, group));
        let shared = shared.clone();
        jobs.push(Box::new(move || poll::<V>(&shared, group, keys)));
    }
}

/// Hands each refreshed watch its object, or backs it off. Objects made
/// together become active together: once one of a group has, the rest of
/// the group go back to fast polls rather than overshoot by a long backoff.
fn settle<V: Target>(
    watches: &mut Vec<Watch<V>>,
    keys: &[Key],
    result: &crate::Result<BTreeMap<Key, V>>,
    policy: &WaitPolicy,
    fired: &mut Fired,
) {
    let now = Instant::now();
    let backoff = policy.backoff();
    let mut progress = false;
    watches.retain_mut(|w| {
        if !keys.contains(&w.key) {
            return true;
        }
        let outcome = match result {
            Ok(found) => match found.get(&w.key) {
                None => Some(Err(Error::NotFound(format!("{} no longer exists", w.what)))),
                Some(v) => match v.status().readiness() {
                    Readiness::Ready => Some(Ok(v.clone())),
                    Readiness::Failed(status) => Some(Err(terminal(&w.what, &status))),
                    Readiness::Pending => None,
                },
            },
            Err(e) if transient(e) => None,
            Err(e) => Some(Err(e.clone())),
        };
        match outcome {
            Some(outcome) => {
                if outcome.is_ok() {
                    progress = true;
                    crate::metrics::wait_ended_active(V::KIND, now.duration_since(w.since));
                }
                answer(fired, &w.slot, outcome);
                false
            }
            None => {
                w.delay = backoff.after(w.delay);
                w.due = now + w.delay;
                true
            }
        }
    });
    if progress {
        for w in watches.iter_mut().filter(|w| keys.contains(&w.key)) {
            w.delay = policy.initial_delay;
            w.due = now + w.delay;
        }
    }
}

/// Refreshes one group (no lock held) and answers what it says; a panic
/// in the refresh ends that group's waits with Internal.
fn poll<V: Target>(shared: &Shared, group: Key, keys: Vec<Key>) {
    let fetched = catch_unwind(AssertUnwindSafe(|| {
        V::fetch(shared.cloud.as_ref(), group, &keys)
    }));
    shared.polls.fetch_add(1, Ordering::Relaxed);
    if let Ok(Err(e)) = &fetched {
        if transient(e) {
            shared.failed_polls.fetch_add(1, Ordering::Relaxed);
            crate::metrics::poll_failed(V::KIND);
            log::info!("polling Linode for {}: {e}; the waits go on", V::KIND);
        }
    }
    let mut fired = Fired::new();
    {
        let mut state = lock(&shared.state);
        state.polling.remove(&(V::KIND, group));
        match &fetched {
            Ok(result) => settle(
                V::watches(&mut state),
                &keys,
                result,
                &shared.policy,
                &mut fired,
            ),
            Err(panic) => {
                let e = flow::panicked("a Linode poll", &**panic);
                fail(V::watches(&mut state), group, &e, &mut fired);
            }
        }
    }
    shared.changed.notify_all();
    fire_all(fired);
}

/// Blocks until some group is due and a refresh may start (firing expired
/// watches as it goes); `None` once the poller was dropped and has
/// nothing left to watch or refresh.
fn next_jobs(shared: &Arc<Shared>) -> Option<Vec<Job>> {
    let timeout = shared.policy.timeout;
    loop {
        let mut state = lock(&shared.state);
        state.prune();
        let now = Instant::now();
        let mut expired = Fired::new();
        expire(&mut state.filesystems, now, timeout, &mut expired);
        expire(&mut state.snapshots, now, timeout, &mut expired);
        expire(&mut state.quotas, now, timeout, &mut expired);
        expire(&mut state.policies, now, timeout, &mut expired);
        expire_lookups(&mut state.lookups, now, timeout, &mut expired);
        if !expired.is_empty() {
            drop(state);
            fire_all(expired);
            continue;
        }
        let mut jobs = Vec::new();
        let held = take_spaces(shared, &mut state, now, &mut jobs);
        take_due::<Snapshot>(shared, &mut state, now, &mut jobs);
        take_due::<Quota>(shared, &mut state, now, &mut jobs);
        take_due::<FilesystemAccessPolicy>(shared, &mut state, now, &mut jobs);
        if !jobs.is_empty() {
            return Some(jobs);
        }
        let next = [
            held,
            next_expiry(&state, timeout),
            next_wake(&state.snapshots, timeout, &state.polling),
            next_wake(&state.quotas, timeout, &state.polling),
            next_wake(&state.policies, timeout, &state.polling),
        ]
        .into_iter()
        .flatten()
        .min();
        // Idle, it still wakes now and then to notice it was dropped; a
        // refresh that ends wakes it too.
        let wait = next.map_or(Duration::from_secs(1), |at| {
            at.saturating_duration_since(now)
        });
        let (state, _) = wait_timeout(&shared.changed, state, wait);
        if state.is_empty() && state.polling.is_empty() && Arc::strong_count(shared) == 1 {
            return None;
        }
    }
}

fn run(weak: std::sync::Weak<Shared>) {
    loop {
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let Some(jobs) = next_jobs(&shared) else {
            return;
        };
        drop(shared);
        for job in jobs {
            let job = Arc::new(Mutex::new(Some(job)));
            let handed = job.clone();
            let spawned = std::thread::Builder::new()
                .name("linode-poll".into())
                .spawn(move || {
                    if let Some(job) = lock(&handed).take() {
                        job();
                    }
                });
            if spawned.is_err() {
                // Without a thread to spare, the refresh runs here.
                log::warn!("Linode poller: no thread for a poll; polling inline");
                if let Some(job) = lock(&job).take() {
                    job();
                }
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
    use std::sync::mpsc;

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
