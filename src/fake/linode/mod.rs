//! Fake Linode API (the contract's "Fake server checklist", §9): NFS spaces,
//! access policies, filesystems, snapshots, clone, per-path quotas, and instance
//! configs/interfaces, served under `/v4beta/` and `/v4/`. Bearer token check,
//! error envelopes, pagination, `X-Filter`, label/region validation and
//! time-driven status machines; fault injection, a request log, inspection
//! helpers, an event hook and optional JSON persistence for `dev` mode.
//! It must model the real service, never shape answers to what a test wants.
//!
//! This file is the public handle, [`FakeLinode`]: start it, turn its knobs,
//! program faults, inspect what it saw. The parts: `seed` (the scenario),
//! `state` (records and status machines) with the `knobs` that shape them,
//! `server` (one request's pipeline), `routes` (the endpoint table),
//! `handlers` and `quotas` (the mutating endpoints), `wire` (the JSON of
//! each record, a backend variant's rewrite of it, `X-Filter` and
//! pagination, the error envelope), `content` (what the fake may ask of
//! the files in its exports), `faults` (rules, profiles, hangs) and `persist` (the state file).

mod content;
mod faults;
mod handlers;
mod knobs;
mod persist;
mod quotas;
mod routes;
mod seed;
mod server;
mod state;
mod wire;

pub use self::content::{DirUsage, ExportContent};
pub use self::faults::{FaultProfile, FaultRule, Hang, Injected};
pub use self::knobs::{
    CloneRate, FakeEvent, Lifecycle, PolicyPut, QuotaBehaviour, SnapshotTimes, TagFilter,
};
pub use self::seed::{FilesystemSeed, InstanceSeed, Seed, SpaceSeed, VpcAttachment};
pub use self::server::RequestRecord;

use self::faults::{FaultAction, Gate, Gates};
use self::server::{lock, Shared};
use self::state::{export_path, now_ms, now_secs, Phase, QuotaUsage, SpaceRec, State};
use super::rate_limit::{Limiter, RateLimit};
use super::HttpServer;
use crate::linode::types::{Filesystem, FilesystemAccessPolicy, Quota, Snapshot};
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The fake Linode API server. Dropping it stops the server and releases
/// every hung request.
pub struct FakeLinode {
    shared: Arc<Shared>,
    http: HttpServer,
}

impl FakeLinode {
    /// A fresh in-memory fake.
    pub fn start(seed: Seed) -> crate::Result<FakeLinode> {
        FakeLinode::launch(&seed, State::from_seed(&seed), None)
    }

    /// A fake whose state lives in `state_file`: loaded when the file exists
    /// (the file wins over the seed, except for the token), otherwise built
    /// from the seed; saved after every change.
    pub fn start_persistent(seed: Seed, state_file: &Path) -> crate::Result<FakeLinode> {
        let state = persist::load(&seed, state_file)?;
        let fake = FakeLinode::launch(&seed, state, Some(state_file.to_path_buf()))?;
        fake.shared.persist(&fake.state());
        Ok(fake)
    }

    fn launch(seed: &Seed, state: State, state_file: Option<PathBuf>) -> crate::Result<FakeLinode> {
        let shared = Arc::new(Shared {
            token: Mutex::new(seed.token.clone()),
            state: Mutex::new(state),
            state_file,
            rules: Mutex::new(Vec::new()),
            profile: Mutex::new(None),
            rng: Mutex::new(now_ms() | 1),
            log: Mutex::new(VecDeque::new()),
            seq: AtomicU64::new(0),
            observer: Mutex::new(None),
            delivering: Mutex::new(()),
            gates: Arc::new(Gates::default()),
            next_gate: AtomicU64::new(0),
            counts: Mutex::default(),
            limiter: Mutex::new(None),
            throttled: AtomicU64::new(0),
            throttled_counts: Mutex::default(),
            injected: Mutex::default(),
            html_errors: AtomicBool::new(false),
        });
        let handler = Arc::clone(&shared);
        let http = crate::fake::serve("fake-linode", Arc::new(move |r| handler.handle(r)))?;
        Ok(FakeLinode { shared, http })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.shared.state)
    }

    /// Applies `f` to the state after advancing the clocks, saves, notifies.
    fn mutate<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut events = Vec::new();
        let (out, turn) = {
            let mut state = self.state();
            state.advance(now_ms(), &mut events);
            let out = f(&mut state);
            (out, self.shared.commit(&state, true, &mut events))
        };
        self.shared.notify(&events);
        drop(turn);
        out
    }

    /// Base URL WITHOUT the API version (`LINODE_URL`); `/v4beta/` and `/v4/` are served.
    pub fn url(&self) -> String {
        self.http.url()
    }

    /// The bearer token the fake accepts.
    pub fn token(&self) -> String {
        lock(&self.shared.token).clone()
    }

    /// From now on only `new` is accepted (the old token is revoked, as
    /// when an admin rotates it).
    pub fn rotate_token(&self, new: &str) {
        *lock(&self.shared.token) = new.to_string();
    }

    /// Called (outside the fake's locks, before the triggering answer is
    /// sent) for every [`FakeEvent`].
    pub fn set_observer(&self, observer: Arc<dyn Fn(&FakeEvent) + Send + Sync>) {
        *lock(&self.shared.observer) = Some(observer);
    }

    /// Who answers for the files inside the exports (dev mode, which
    /// emulates them): quota usage is then sampled from it on every read,
    /// and `QuotaBehaviour::needs_directory` asks it.
    pub fn set_export_content(&self, content: Arc<dyn ExportContent>) {
        self.mutate(|s| s.content = content::ContentHook(Some(content)));
    }

    // --- knobs -------------------------------------------------------------

    pub fn set_activation_delay(&self, delay: Duration) {
        self.mutate(|s| s.activation_delay_ms = delay.as_millis() as u64);
    }

    pub fn set_deletion_delay(&self, delay: Duration) {
        self.mutate(|s| s.deletion_delay_ms = delay.as_millis() as u64);
    }

    /// Force every list page to `size` items whatever the client asks (to
    /// test multi-page aggregation); `None` restores the API's rules.
    pub fn set_page_size(&self, size: Option<usize>) {
        self.mutate(|s| s.page_size = size);
    }

    pub fn set_policy_put(&self, mode: PolicyPut) {
        self.mutate(|s| s.policy_put = mode);
    }

    /// Status for a duplicate snapshot label (default 409).
    pub fn set_snapshot_duplicate_status(&self, status: u16) {
        self.mutate(|s| s.snapshot_duplicate_status = status);
    }

    /// Status for deleting a locked snapshot (default 409).
    pub fn set_locked_delete_status(&self, status: u16) {
        self.mutate(|s| s.locked_delete_status = status);
    }

    /// Whether filesystem lists can be filtered by `id` (the default); the
    /// contract does not say, so the client must cope without.
    pub fn set_filesystem_id_filter(&self, allowed: bool) {
        self.mutate(|s| s.no_filesystem_id_filter = !allowed);
    }

    /// Leave the documented `source_snapshot_id` out of filesystems, as
    /// Linode's own client says the API does today.
    pub fn set_omit_source_snapshot_id(&self, omit: bool) {
        self.mutate(|s| s.omit_source_snapshot_id = omit);
    }

    /// Refuse (409) to delete a snapshot while a clone made from it exists
    /// and is not being deleted.
    pub fn set_snapshots_held_by_clones(&self, held: bool) {
        self.mutate(|s| s.snapshots_held_by_clones = held);
    }

    /// What filesystem lists do with `tags` in an `X-Filter` (refuse it
    /// with 400, or drop it and filter by the other keys).
    pub fn set_tag_filter(&self, mode: TagFilter) {
        self.mutate(|s| s.tag_filter = mode);
    }

    /// Whether the filesystem access-policy endpoints exist (the default);
    /// without them GET and PUT answer 404 for filesystems that exist.
    pub fn set_filesystem_policy_endpoints(&self, available: bool) {
        self.mutate(|s| s.no_filesystem_policy = !available);
    }

    /// The earlier fork's filesystem shape: a create without
    /// `max_capacity_bytes` (one sent is an unknown field, ignored; the
    /// backend gives every filesystem the same capacity) and answers that
    /// show the capacity only as `stats.max_capacity_bytes`.
    pub fn set_capacity_in_stats(&self, on: bool) {
        self.mutate(|s| s.dialect.capacity_in_stats = on);
    }

    /// Answers written as a Go backend can: empty lists, `false` and zero
    /// sizes as `null`, access-policy labels `null`, some optional fields
    /// left out (the list is in `dialect.rs`); a `null` in a request body
    /// counts as not sent.
    pub fn set_null_fields(&self, on: bool) {
        self.mutate(|s| s.dialect.null_fields = on);
    }

    /// Part of the fault profile's injected 429s and 503s answer `408`
    /// (JSON envelope) or nginx's `400` page (`text/html`) instead, chosen
    /// by the same roll, so a fault seed replays them exactly.
    pub fn set_html_errors(&self, on: bool) {
        self.shared.html_errors.store(on, Ordering::SeqCst);
    }

    /// Serve `/interfaces` in the paginated envelope instead of `{"interfaces": [...]}`.
    pub fn set_interfaces_paginated(&self, paginated: bool) {
        self.mutate(|s| s.interfaces_paginated = paginated);
    }

    /// Filesystems (created or cloned) with this label follow `lifecycle`.
    pub fn set_filesystem_lifecycle(&self, label: &str, lifecycle: Lifecycle) {
        self.mutate(|s| s.filesystem_lifecycles.insert(label.to_string(), lifecycle));
    }

    pub fn set_snapshot_lifecycle(&self, label: &str, lifecycle: Lifecycle) {
        self.mutate(|s| s.snapshot_lifecycles.insert(label.to_string(), lifecycle));
    }

    /// Access-policy PUTs on filesystem `fs_id` follow `lifecycle`.
    pub fn set_policy_lifecycle(&self, fs_id: u64, lifecycle: Lifecycle) {
        self.mutate(|s| s.policy_lifecycles.insert(fs_id, lifecycle));
    }

    /// Lock or unlock a snapshot (a locked one cannot be deleted).
    pub fn set_snapshot_locked(&self, snapshot_id: u64, locked: bool) -> bool {
        self.mutate(|s| {
            s.snapshots
                .get_mut(&snapshot_id)
                .map(|snap| snap.locked = locked)
                .is_some()
        })
    }

    /// Which timestamps a snapshot shows from now on.
    pub fn set_snapshot_times(&self, snapshot_id: u64, times: SnapshotTimes) -> bool {
        self.mutate(|s| {
            s.snapshots
                .get_mut(&snapshot_id)
                .map(|snap| snap.times = times)
                .is_some()
        })
    }

    /// How the quota API behaves (the backend variants of issue 18).
    pub fn set_quota_behaviour(&self, behaviour: QuotaBehaviour) {
        self.mutate(|s| s.quota_behaviour = behaviour);
    }

    /// Clones take time in proportion to their data (`None`, the default:
    /// only the activation delay). A clone made from now on stays
    /// `creating` for the activation delay plus its snapshot's bytes at
    /// `bytes_per_second`, at most `cap` more. A snapshot's bytes are
    /// what the installed [`ExportContent`] counted at its export's root
    /// when it was taken, else the `size_bytes` it shows.
    pub fn set_clone_rate(&self, rate: Option<CloneRate>) {
        self.mutate(|s| s.clone_rate = rate);
    }

    /// The next `n` clones of snapshots turn `error` instead of `active`.
    pub fn set_failing_clones(&self, n: usize) {
        self.mutate(|s| s.failing_clones = n);
    }

    /// What the backend sampled of a quota's usage now (`collected_at` is
    /// this moment); `false` when there is no such quota. An installed
    /// [`ExportContent`] samples instead.
    /// Puts `bytes` of data no quota covers on filesystem `fs_id` (what its
    /// root quota counts besides its quotas' usage, when no one answers
    /// for the content); false for no such filesystem.
    pub fn set_unquoted_usage(&self, fs_id: u64, bytes: i64) -> bool {
        self.mutate(|s| {
            s.filesystems
                .get_mut(&fs_id)
                .map(|fs| fs.unquoted_bytes = bytes)
                .is_some()
        })
    }

    pub fn set_quota_usage(&self, quota_id: u64, bytes: i64, files: i64) -> bool {
        let collected_at = now_secs();
        self.mutate(|s| {
            s.quotas
                .get_mut(&quota_id)
                .map(|q| {
                    q.usage = Some(QuotaUsage {
                        bytes,
                        files,
                        collected_at,
                    })
                })
                .is_some()
        })
    }

    pub fn add_space(&self, space: SpaceSeed) {
        let created = now_secs();
        self.mutate(|s| {
            s.spaces
                .insert(space.id, SpaceRec::from_seed(&space, created))
        });
    }

    /// A filesystem someone else made, already active; its id, or `None`
    /// when its space does not exist.
    pub fn add_filesystem(&self, filesystem: FilesystemSeed) -> Option<u64> {
        let created = now_secs();
        self.mutate(|s| s.insert_existing(&filesystem, created))
    }

    pub fn add_instance(&self, instance: InstanceSeed) {
        self.mutate(|s| s.instances.insert(instance.id, instance));
    }

    // --- faults ------------------------------------------------------------

    pub fn inject(&self, rule: FaultRule) {
        lock(&self.shared.rules).push(rule);
    }

    /// Matching requests block until the returned [`Hang`] is released.
    pub fn hang(&self, method: &str, pattern: &str) -> Hang {
        let id = self.shared.next_gate.fetch_add(1, Ordering::SeqCst);
        self.shared.gates.lock().insert(id, Gate::default());
        self.inject(FaultRule::new(method, pattern, FaultAction::Hang(id)));
        Hang {
            id,
            gates: Arc::clone(&self.shared.gates),
        }
    }

    /// Remove every programmed rule (held requests stay held until released).
    pub fn clear_faults(&self) {
        lock(&self.shared.rules).clear();
    }

    /// Random failures on every request (`None` turns them off).
    pub fn set_fault_profile(&self, profile: Option<FaultProfile>) {
        *lock(&self.shared.profile) = profile;
    }

    /// Seeds which requests the profile's faults hit, to replay a run.
    pub fn set_fault_seed(&self, seed: u64) {
        *lock(&self.shared.rng) = seed | 1;
    }

    /// Random faults of the profile injected so far, by kind.
    pub fn injected(&self) -> BTreeMap<Injected, u64> {
        lock(&self.shared.injected).clone()
    }

    // --- inspection ----------------------------------------------------------

    /// The request log, oldest first (the newest 10 000 entries).
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.log)
            .iter()
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// Requests seen for `method` (`*` = any) and a path pattern (see [`FaultRule`]).
    pub fn calls(&self, method: &str, pattern: &str) -> usize {
        let probe = FaultRule::new(method, pattern, FaultAction::Latency(Duration::ZERO));
        lock(&self.shared.log)
            .iter()
            .filter(|(_, r)| probe.matches(&r.method, &r.path))
            .count()
    }

    /// Forgets the request log and the counters.
    pub fn clear_requests(&self) {
        lock(&self.shared.log).clear();
        lock(&self.shared.counts).clear();
        lock(&self.shared.throttled_counts).clear();
    }

    /// Requests executed, by `METHOD endpoint-template` (ids replaced by
    /// `{id}`), every one counted, however long the fake has run; those the
    /// rate limits refused are `throttled_counts`.
    pub fn request_counts(&self) -> BTreeMap<String, u64> {
        lock(&self.shared.counts).clone()
    }

    /// Turns rate limiting on (`Some`) or off; a new limit starts a window.
    pub fn set_rate_limit(&self, limit: Option<RateLimit>) {
        *lock(&self.shared.limiter) = limit.map(|l| Limiter::new(l, now_ms()));
    }

    /// Requests refused with 429 by the rate limits.
    pub fn throttled(&self) -> u64 {
        self.shared.throttled.load(Ordering::SeqCst)
    }

    /// Requests refused with 429 by the rate limits, per `METHOD
    /// endpoint-template` (`request_counts` has those executed).
    pub fn throttled_counts(&self) -> BTreeMap<String, u64> {
        lock(&self.shared.throttled_counts).clone()
    }

    fn decode<T: serde::de::DeserializeOwned>(value: Value) -> T {
        serde_json::from_value(value).expect("the fake renders the wire types it serves")
    }

    /// Every filesystem as `GET` would show it now.
    pub fn filesystems(&self) -> Vec<Filesystem> {
        self.mutate(|s| {
            s.filesystems
                .values()
                .map(|f| FakeLinode::decode(s.fs_json(f)))
                .collect()
        })
    }

    /// The export path (`/<label>-<hex id>`) of every active filesystem,
    /// whatever its answers show of its mount targets.
    pub fn active_exports(&self) -> Vec<String> {
        self.active_clones()
            .into_iter()
            .map(|(export, _)| export)
            .collect()
    }

    /// `(export, snapshot it was cloned from)` of every active filesystem.
    pub fn active_clones(&self) -> Vec<(String, Option<u64>)> {
        self.mutate(|s| {
            s.filesystems
                .values()
                .filter(|f| f.phase == Phase::Active)
                .map(|f| (export_path(&f.label, f.id), f.source_snapshot_id))
                .collect()
        })
    }

    /// `(export, snapshot id, label)` of every snapshot not being deleted:
    /// what a backend showing snapshots in their export shows.
    pub fn snapshot_exports(&self) -> Vec<(String, u64, String)> {
        self.mutate(|s| {
            s.snapshots
                .values()
                .filter(|x| x.phase != Phase::Deleting)
                .filter_map(|x| {
                    let fs = s.filesystems.get(&x.filesystem_id)?;
                    Some((export_path(&fs.label, fs.id), x.id, x.label.clone()))
                })
                .collect()
        })
    }

    pub fn snapshots(&self) -> Vec<Snapshot> {
        self.mutate(|s| {
            s.snapshots
                .values()
                .map(|x| FakeLinode::decode(s.snap_json(x)))
                .collect()
        })
    }

    /// Every quota of every filesystem, as a GET shows it now: each
    /// filesystem's root quota among them.
    pub fn quotas(&self) -> Vec<Quota> {
        self.mutate(|s| {
            s.filesystems
                .values()
                .flat_map(|fs| s.quotas_of(fs))
                .map(|q| FakeLinode::decode(s.quota_json(&q)))
                .collect()
        })
    }

    pub fn filesystem_policy(&self, fs_id: u64) -> Option<FilesystemAccessPolicy> {
        self.mutate(|s| {
            s.filesystems
                .get(&fs_id)
                .map(|f| FakeLinode::decode(s.fs_policy_json(f)))
        })
    }
}

impl Drop for FakeLinode {
    fn drop(&mut self) {
        // Held requests must finish or the HTTP server cannot wind down.
        self.shared.gates.release_all();
    }
}
