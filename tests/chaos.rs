//! The fault campaign (issue 12): randomised RPC sequences that the sidecars
//! and kubelet really send (create, controller publish in node mode, stage,
//! publish, snapshot, restore, clone, and the way back), with duplicates,
//! concurrent retries, cancellations and short deadlines, against dev mode
//! whose fake Linode API fails, loses replies and stalls at random, while
//! the driver is killed (SIGKILL) and restarted at random points. After
//! each sequence, once retries settle: the backend holds exactly what the
//! caller believes exists, every ACL is exact, no mount is left, and every
//! answer was one a correct caller may see.
//!
//! A second profile aims every transient fault (500, 429, 408, resets,
//! hangs) at the GETs the shared poller sends: its status polls and
//! coalesced label lookups. A failed poll is the next tick's to retry, so
//! there creates, snapshots and node-mode publishes must never be answered
//! Internal.
//!
//! Waves of calls at once, retried as the provisioner retries them while
//! the driver is killed part-way, cover directory volumes: 200 creates and
//! deletes on one shared filesystem, and directory snapshots, restores
//! (killed mid-clone and mid-copy) and clones, each restore holding its
//! own directory at snapshot time and nothing temporary left behind.
//!
//! `cargo test --test chaos` runs a bounded campaign (CI);
//! `just chaos` runs thousands of sequences. `CHAOS_SEED` replays a run,
//! `CHAOS_SEQUENCES` sets its length.

mod common;
mod e2e_support;

use common::requests::*;
use common::rpc::*;
use common::{chaos_seed, volume_names, wait_for, wait_for_or};
use e2e_support::*;
use grpcio::{CallOption, RpcStatusCode as Code};
use linode_nfs_csi::backoff::Backoff;
use linode_nfs_csi::proto::csi;
use linode_nfs_csi::proto::csi_grpc::{ControllerClient, NodeClient};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const FAULTS: &str = "429:0.04,503:0.03,500:0.01,lost:0.03,slow:0.01,drop:0.01";
/// Transient faults on the poller's GETs only (`DEV_FAULTS` scopes): one
/// filesystem and one snapshot (the polls of a lone object) get every kind,
/// 500s and broken connections included. A Space's filesystem list (the
/// coalesced polls and lookups) and a filesystem's access policy are also
/// read by the RPCs themselves (CreateSnapshot lists the Space, a publish
/// reads the policy), where behaviour.md makes a 500 or a broken connection
/// Internal, so they get only the answers the client retries.
const POLL_FAULTS: &str = "500:0.15@GET:nfs/spaces/*/filesystems/*,\
    reset:0.08@GET:nfs/spaces/*/filesystems/*,\
    408:0.04@GET:nfs/spaces/*/filesystems/*,\
    slow:0.02@GET:nfs/spaces/*/filesystems/*,\
    500:0.15@GET:nfs/spaces/*/filesystems/*/snapshots/*,\
    reset:0.08@GET:nfs/spaces/*/filesystems/*/snapshots/*,\
    drop:0.02@GET:nfs/spaces/*/filesystems/*/snapshots/*,\
    429:0.08@GET:nfs/spaces/*/filesystems,\
    503:0.04@GET:nfs/spaces/*/filesystems,\
    429:0.10@GET:nfs/spaces/*/filesystems/*/access-policy,\
    408:0.04@GET:nfs/spaces/*/filesystems/*/access-policy,\
    503:0.04@GET:nfs/spaces/*/filesystems/*/access-policy";

/// What a campaign injects and what it may answer.
struct Profile {
    faults: &'static str,
    /// RPCs for which Internal is a violation, not a retryable answer.
    no_internal: &'static [&'static str],
    /// Restores and clones read their source with plain GETs of the
    /// faulted paths; a profile aimed at polls leaves them out.
    derived_volumes: bool,
    /// How long a new object takes to turn active: the longer, the more
    /// polls each wait sends.
    activation: &'static str,
}

const RANDOM: Profile = Profile {
    faults: FAULTS,
    no_internal: &[],
    derived_volumes: true,
    activation: "150ms",
};

const ON_POLLS: Profile = Profile {
    faults: POLL_FAULTS,
    no_internal: &["CreateVolume", "CreateSnapshot", "ControllerPublishVolume"],
    derived_volumes: false,
    activation: "500ms",
};
/// `slow` and `drop` hold a request this long plus a second.
const REQUEST_TIMEOUT: &str = "1s";
/// One step may take this long through retries before it is a violation.
const STEP_PATIENCE: Duration = Duration::from_secs(120);

/// xorshift64*: small, seedable, good enough to pick steps.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Answers a correct caller may get while the backend misbehaves: they
/// tell it to retry.
const TRANSIENT: [Code; 6] = UNDER_FAULTS;

impl Profile {
    /// Whether a correct driver may answer `rpc` with the failure `code`
    /// under these faults.
    fn may_answer(&self, rpc: &str, code: Code) -> bool {
        TRANSIENT.contains(&code) && !(code == Code::INTERNAL && self.no_internal.contains(&rpc))
    }

    /// The codes a caller retries `rpc` on: every failure it may get.
    fn retry_of(&self, rpc: &str) -> Vec<Code> {
        TRANSIENT
            .into_iter()
            .filter(|code| self.may_answer(rpc, *code))
            .collect()
    }
}

/// What a step calls through: a sidecar's or kubelet's connection.
#[derive(Clone)]
struct Clients {
    controller: ControllerClient,
    node: NodeClient,
}

#[derive(Default)]
struct Counts {
    sequences: u64,
    rpcs: u64,
    restarts: u64,
    kills_mid_call: u64,
    duplicates: u64,
    cancelled: u64,
    codes: BTreeMap<String, u64>,
    faults: BTreeMap<String, u64>,
    violations: Vec<String>,
}

impl Counts {
    fn record(&mut self, rpc: &str, code: Code) {
        self.rpcs += 1;
        *self.codes.entry(format!("{rpc} {code:?}")).or_default() += 1;
    }
}

struct Campaign {
    rng: Rng,
    seed: u64,
    profile: &'static Profile,
    state: StateDir,
    node_mode: bool,
    dev: Option<Dev>,
    counts: Counts,
    /// Restarts left in this campaign.
    restarts: u64,
    /// The step a violation happened in, for the report.
    sequence: u64,
}

impl Campaign {
    fn start(profile: &'static Profile, seed: u64, node_mode: bool, restarts: u64) -> Campaign {
        let state = StateDir::new(if node_mode {
            "chaos-node"
        } else {
            "chaos-space"
        });
        let mut c = Campaign {
            rng: Rng(seed | 1),
            seed,
            profile,
            state,
            node_mode,
            dev: None,
            counts: Counts::default(),
            restarts,
            sequence: 0,
        };
        c.launch();
        c
    }

    fn envs(&self) -> Vec<(&'static str, String)> {
        // Each process's faults follow from the seed and its incarnation.
        let fault_seed = self.seed.wrapping_add(self.counts.restarts).to_string();
        vec![
            ("DEV_FAULTS", self.profile.faults.into()),
            ("DEV_FAULT_SEED", fault_seed),
            ("DEV_ACTIVATION_DELAY", self.profile.activation.into()),
            ("LINODE_REQUEST_TIMEOUT", REQUEST_TIMEOUT.into()),
            ("LINODE_WAIT_TIMEOUT", "60s".into()),
            // What a crash left behind is swept while the campaign runs.
            ("MAINTENANCE_INTERVAL", "2s".into()),
            (
                "NFS_ACCESS_POLICY_MODE",
                if self.node_mode { "node" } else { "space" }.into(),
            ),
        ]
    }

    fn launch(&mut self) {
        // Faults are on from the start: dev mode itself makes no call.
        let envs = self.envs();
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.dev = Some(Dev::start(&self.state, &envs));
    }

    fn dev(&self) -> &Dev {
        self.dev.as_ref().unwrap()
    }

    /// A connection of its own, as a second sidecar or a retry has.
    fn clients(&self) -> Clients {
        let dev = self.dev();
        Clients {
            controller: dev.another_controller(),
            node: dev.another_node(),
        }
    }

    /// SIGKILL, then a new process on the same state, as after a crash.
    fn restart(&mut self) {
        let mut dev = self.dev.take().unwrap();
        dev.driver.kill();
        self.count_faults(&dev.driver.logs());
        drop(dev);
        self.counts.restarts += 1;
        self.launch();
    }

    fn count_faults(&mut self, logs: &str) {
        for (kind, n) in injected(logs) {
            *self.counts.faults.entry(kind).or_default() += n;
        }
    }

    /// Whether every fault kind of `kinds` has been injected so far, by this
    /// process or one before it.
    fn injected_all(&self, kinds: &[&str]) -> bool {
        let now = injected(&self.dev().driver.logs());
        kinds
            .iter()
            .all(|k| self.counts.faults.contains_key(*k) || now.contains_key(*k))
    }

    fn violation(&mut self, what: String) {
        eprintln!(
            "VIOLATION (seed {}, sequence {}): {what}",
            self.seed, self.sequence
        );
        self.counts
            .violations
            .push(format!("sequence {}: {what}", self.sequence));
    }

    /// One step as the sidecars or kubelet drive it: maybe a duplicate, a
    /// concurrent twin, a caller that gives up early, or a crash in the
    /// middle; then retried until it answers OK. Returns the answer, or
    /// `None` after a violation.
    fn step<T: Send + 'static>(
        &mut self,
        rpc: &'static str,
        send: impl Fn(&Clients, CallOption) -> grpcio::Result<T> + Send + Sync + Clone + 'static,
    ) -> Option<T> {
        self.step_killable(rpc, true, send)
    }

    /// [`Campaign::step`]; `killable` false where a restart in the middle
    /// would only test dev mode itself: its mounts die with its namespace,
    /// where a real node's survive a plugin restart.
    fn step_killable<T: Send + 'static>(
        &mut self,
        rpc: &'static str,
        killable: bool,
        send: impl Fn(&Clients, CallOption) -> grpcio::Result<T> + Send + Sync + Clone + 'static,
    ) -> Option<T> {
        if self.rng.chance(0.15) {
            // A caller that gives up: its outcome is whatever it is.
            self.counts.cancelled += 1;
            let deadline = Duration::from_millis(20 + self.rng.below(400));
            let _ = send(&self.clients(), CallOption::default().timeout(deadline));
        }
        if killable && self.restarts > 0 && self.rng.chance(0.05) {
            // Killed while the call is in flight.
            self.restarts -= 1;
            self.counts.kills_mid_call += 1;
            let pending = {
                let send = send.clone();
                let twin = self.clients();
                std::thread::spawn(move || {
                    let _ = send(
                        &twin,
                        CallOption::default().timeout(Duration::from_secs(30)),
                    );
                })
            };
            // A kill at a random point of the call, not a wait for a state.
            std::thread::sleep(Duration::from_millis(self.rng.below(300)));
            self.restart();
            pending.join().unwrap();
        }
        let twin = if self.rng.chance(0.1) {
            self.counts.duplicates += 1;
            let twin = self.clients();
            let send = send.clone();
            Some(std::thread::spawn(move || send(&twin, call())))
        } else {
            None
        };
        let answer = self.until_ok(rpc, &send);
        if let Some(twin) = twin {
            // A concurrent twin may be refused (Aborted) or retried later,
            // but never answered with something a correct caller cannot get.
            if let Err(e) = twin.join().unwrap() {
                let code = code_of(&e);
                self.counts.record(rpc, code);
                if !self.profile.may_answer(rpc, code) {
                    self.violation(format!("{rpc} (concurrent twin) answered {code:?}: {e:?}"));
                }
            } else {
                self.counts.record(rpc, Code::OK);
            }
        }
        if answer.is_some() && self.rng.chance(0.1) {
            // The sidecar lost the answer and asks again.
            self.counts.duplicates += 1;
            return self.until_ok(rpc, &send);
        }
        answer
    }

    /// `send` retried as a sidecar does, every answer counted.
    fn until_ok<T>(
        &mut self,
        rpc: &'static str,
        send: &impl Fn(&Clients, CallOption) -> grpcio::Result<T>,
    ) -> Option<T> {
        let clients = self.clients();
        let codes = self.profile.retry_of(rpc);
        let how = Retry {
            codes: &codes,
            limit: STEP_PATIENCE,
            ..SIDECAR
        };
        let counts = &mut self.counts;
        let answer = retry(&how, || {
            let answer = send(&clients, call());
            counts.record(rpc, answer.as_ref().err().map_or(Code::OK, code_of));
            answer
        });
        match answer {
            Ok(v) => Some(v),
            Err(e) if codes.contains(&code_of(&e)) => {
                self.violation(format!(
                    "{rpc} still failing after {STEP_PATIENCE:?}: {e:?}"
                ));
                None
            }
            Err(e) => {
                self.violation(format!("{rpc} answered {:?}: {e:?}", code_of(&e)));
                None
            }
        }
    }

    /// Live (not `deleting`) filesystems and snapshots, by label.
    fn backend(&self) -> (BTreeSet<String>, BTreeSet<String>) {
        let fs = self
            .state
            .filesystems()
            .into_iter()
            .filter(|(_, _, phase)| phase != "Deleting")
            .map(|(_, label, _)| label)
            .collect();
        let snaps = self
            .state
            .snapshots()
            .into_iter()
            .filter(|(_, _, _, phase)| phase != "Deleting")
            .map(|(_, _, label, _)| label)
            .collect();
        (fs, snaps)
    }

    fn check_backend(&mut self, filesystems: &[&str], snapshots: &[&str], when: &str) {
        let want_fs: BTreeSet<String> = filesystems.iter().map(|s| s.to_string()).collect();
        let want_snaps: BTreeSet<String> = snapshots.iter().map(|s| s.to_string()).collect();
        let (fs, snaps) = self.backend();
        if fs != want_fs {
            self.violation(format!(
                "{when}: filesystems {fs:?}, caller believes {want_fs:?}"
            ));
        }
        if snaps != want_snaps {
            self.violation(format!(
                "{when}: snapshots {snaps:?}, caller believes {want_snaps:?}"
            ));
        }
    }

    fn check_acl(&mut self, volume_id: &str, want: &[u64], when: &str) {
        let fs: u64 = volume_id.split('/').nth(1).unwrap().parse().unwrap();
        let (_, ids) = self.state.acl(fs);
        let got: BTreeSet<u64> = ids.into_iter().collect();
        let want: BTreeSet<u64> = want.iter().copied().collect();
        if got != want {
            self.violation(format!(
                "{when}: ACL of {volume_id} is {got:?}, want {want:?}"
            ));
        }
    }

    /// No filesystem's quotas promise more than it holds: nobody but the
    /// driver makes quotas here, so what it read is all there is.
    fn check_promises(&mut self, when: &str) {
        let mut promised: BTreeMap<u64, i64> = BTreeMap::new();
        for (fs, _, max, _) in self.state.quotas() {
            *promised.entry(fs).or_default() += max;
        }
        for (fs, bytes) in promised {
            let capacity = self.state.filesystem(fs)["max_capacity_bytes"]
                .as_i64()
                .unwrap();
            if bytes > capacity {
                self.violation(format!(
                    "{when}: the quotas of filesystem {fs} promise {bytes} bytes of its {capacity}"
                ));
            }
        }
    }

    fn check_no_mounts(&mut self, when: &str) {
        let left = self.dev().mounts_under_state();
        if !left.is_empty() {
            self.violation(format!("{when}: mounts left: {left:?}"));
        }
    }

    fn restart_maybe(&mut self) {
        if self.restarts > 0 && self.rng.chance(0.08) {
            self.restarts -= 1;
            self.restart();
        }
    }
}

/// A CreateVolume step (see [`Campaign::step`]).
fn create_step(
    c: &mut Campaign,
    rpc: &'static str,
    req: csi::CreateVolumeRequest,
) -> Option<csi::Volume> {
    c.step(rpc, move |d, o| {
        d.controller
            .create_volume_opt(&req, o)
            .map(|r| r.volume.unwrap())
    })
}

/// One volume's life and what can hang off it.
fn sequence(c: &mut Campaign, n: u64) {
    c.sequence = n;
    let name = format!("pvc-chaos-{n}");
    let Some(volume) = create_step(c, "CreateVolume", create_req(&name, GIB)) else {
        return;
    };
    c.check_backend(&[&name], &[], "after CreateVolume");
    c.restart_maybe();

    let node: u64 = NODE_ID.parse().unwrap();
    if c.node_mode {
        let req = attach_req(&volume, NODE_ID);
        c.step("ControllerPublishVolume", move |d, o| {
            d.controller.controller_publish_volume_opt(&req, o)
        });
        c.check_acl(&volume.volume_id, &[node], "after ControllerPublishVolume");
    }

    let staging = c.state.staging(&volume.volume_id);
    let targets: Vec<PathBuf> = (0..=c.rng.below(2))
        .map(|i| c.state.target(&format!("pod-{n}-{i}"), &volume.volume_id))
        .collect();
    mount_all(c, &volume, &staging, &targets);
    c.restart_maybe();

    // A snapshot and what is made from it.
    let mut made = vec![name.clone()];
    let mut snaps: Vec<(String, String)> = Vec::new();
    if c.rng.chance(0.6) {
        let snap_name = format!("snap-chaos-{n}");
        let req = snapshot_req(&snap_name, &volume.volume_id);
        // Called again, as the snapshotter does, until ready.
        let mut latest = None;
        wait_for("the snapshot to be ready", STEP_PATIENCE, || {
            latest = c.step("CreateSnapshot", {
                let req = req.clone();
                move |d, o| {
                    d.controller
                        .create_snapshot_opt(&req, o)
                        .map(|r| r.snapshot.unwrap())
                }
            });
            latest.as_ref().is_none_or(|s| s.ready_to_use)
        });
        let Some(snapshot) = latest else {
            return;
        };
        snaps.push((snap_name.clone(), snapshot.snapshot_id.clone()));
        if c.profile.derived_volumes && c.rng.chance(0.7) {
            let restored = format!("pvc-chaos-{n}-restore");
            let req = restore_req(&restored, &snapshot.snapshot_id);
            create_step(c, "CreateVolume (restore)", req);
            made.push(restored);
        }
        let made_refs: Vec<&str> = made.iter().map(String::as_str).collect();
        c.check_backend(&made_refs, &[&snap_name], "after snapshot and restore");
    }
    if c.profile.derived_volumes && c.rng.chance(0.3) {
        let cloned = format!("pvc-chaos-{n}-clone");
        let req = from_volume(create_req(&cloned, GIB), &volume.volume_id);
        create_step(c, "CreateVolume (clone)", req);
        made.push(cloned);
        let made_refs: Vec<&str> = made.iter().map(String::as_str).collect();
        let snap_refs: Vec<&str> = snaps.iter().map(|(s, _)| s.as_str()).collect();
        c.check_backend(&made_refs, &snap_refs, "after clone (its copy gone)");
    }
    c.restart_maybe();

    // The way back.
    unmount_all(c, &volume, &staging, &targets);
    if c.node_mode {
        let req = controller_unpublish_req(&volume.volume_id, NODE_ID);
        c.step("ControllerUnpublishVolume", move |d, o| {
            d.controller.controller_unpublish_volume_opt(&req, o)
        });
        c.check_acl(&volume.volume_id, &[], "after ControllerUnpublishVolume");
    }
    for (_, id) in &snaps {
        let req = delete_snapshot_req(id);
        c.step("DeleteSnapshot", move |d, o| {
            d.controller.delete_snapshot_opt(&req, o)
        });
    }
    let ids = volume_ids(c, &made);
    for id in ids {
        let req = delete_req(&id);
        c.step("DeleteVolume", move |d, o| {
            d.controller.delete_volume_opt(&req, o)
        });
    }
    c.check_backend(&[], &[], "after the sequence");
    c.check_promises("after the sequence");
    c.check_no_mounts("after the sequence");
    c.counts.sequences += 1;
}

/// The volume ids of `labels`, as the fake holds them.
fn volume_ids(c: &Campaign, labels: &[String]) -> Vec<String> {
    c.state
        .filesystems()
        .into_iter()
        .filter(|(_, label, phase)| labels.contains(label) && phase != "Deleting")
        .map(|(id, _, _)| format!("1/{id}"))
        .collect()
}

/// Stages and publishes; a restart while doing so (dev mode's mounts die
/// with it) means staging again, as kubelet would for a new mount.
fn mount_all(c: &mut Campaign, volume: &csi::Volume, staging: &Path, targets: &[PathBuf]) {
    loop {
        let incarnation = c.counts.restarts;
        let stage = stage_req(volume, &HashMap::new(), staging);
        c.step("NodeStageVolume", move |d, o| {
            d.node.node_stage_volume_opt(&stage, o)
        });
        for target in targets {
            let req = publish_req(volume, staging, target, false);
            c.step_killable("NodePublishVolume", false, move |d, o| {
                d.node.node_publish_volume_opt(&req, o)
            });
        }
        if c.counts.restarts == incarnation {
            return;
        }
    }
}

/// After a restart the mounts died with the old process's namespace; as
/// kubelet would, the caller mounts again before taking them down.
fn unmount_all(c: &mut Campaign, volume: &csi::Volume, staging: &Path, targets: &[PathBuf]) {
    if !c.dev().mounts_under_state().iter().any(|m| m == staging) {
        mount_all(c, volume, staging, targets);
    }
    for target in targets {
        let req = node_unpublish_req(&volume.volume_id, target);
        c.step("NodeUnpublishVolume", move |d, o| {
            d.node.node_unpublish_volume_opt(&req, o)
        });
    }
    let req = node_unstage_req(&volume.volume_id, staging);
    c.step("NodeUnstageVolume", move |d, o| {
        d.node.node_unstage_volume_opt(&req, o)
    });
}

/// The faults the fake logged it injected, by kind.
fn injected(logs: &str) -> BTreeMap<String, u64> {
    let mut kinds = BTreeMap::new();
    for line in logs.lines() {
        if let Some(rest) = line.split("fake Linode: injected ").nth(1) {
            let kind = rest.split(' ').next().unwrap_or("?").to_string();
            *kinds.entry(kind).or_default() += 1;
        }
    }
    kinds
}

fn campaign(profile: &'static Profile, node_mode: bool, sequences: u64, restarts: u64) -> Counts {
    campaign_until(profile, node_mode, sequences, restarts, &[])
}

/// At least `sequences`, and more (up to ten times as many) until every
/// fault kind of `must_inject` has been injected: a short campaign draws few
/// requests, and one kind may miss them all by chance.
fn campaign_until(
    profile: &'static Profile,
    node_mode: bool,
    sequences: u64,
    restarts: u64,
    must_inject: &[&str],
) -> Counts {
    let sequences = std::env::var("CHAOS_SEQUENCES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(sequences);
    let seed = chaos_seed();
    let mode = if node_mode { "node" } else { "space" };
    println!(
        "CHAOS {mode} mode: seed {seed} (replay with CHAOS_SEED={seed}), {sequences} sequences"
    );
    let mut c = Campaign::start(profile, seed, node_mode, restarts);
    let mut n = 0;
    while n < sequences || (n < sequences * 10 && !c.injected_all(must_inject)) {
        sequence(&mut c, n);
        n += 1;
    }
    let logs = c.dev().driver.logs();
    c.count_faults(&logs);
    let k = &c.counts;
    println!(
        "CHAOS {mode} mode: {} sequences, {} RPCs, {} restarts ({} mid-call), {} duplicated, {} abandoned early; faults injected: {:?}; violations: {}",
        k.sequences,
        k.rpcs,
        k.restarts,
        k.kills_mid_call,
        k.duplicates,
        k.cancelled,
        k.faults,
        k.violations.len()
    );
    println!("CHAOS {mode} mode: answers {:?}", k.codes);
    assert!(
        k.violations.is_empty(),
        "seed {seed}: {} violations:\n{}",
        k.violations.len(),
        k.violations.join("\n")
    );
    assert!(!k.faults.is_empty(), "the campaign injected no fault");
    c.counts
}

#[test]
fn bounded_campaign_in_space_mode() {
    campaign(&RANDOM, false, 12, 3);
}

#[test]
fn bounded_campaign_in_node_mode() {
    campaign(&RANDOM, true, 12, 3);
}

/// Polls that fail are retried by the next tick: however often the
/// poller's GETs fail, no create, snapshot or publish is answered
/// Internal, and the backend ends as the callers believe.
fn poll_fault_campaign(node_mode: bool, sequences: u64) {
    const KINDS: [&str; 2] = ["500", "reset"];
    let k = campaign_until(&ON_POLLS, node_mode, sequences, 0, &KINDS);
    for kind in KINDS {
        assert!(
            k.faults.get(kind).is_some_and(|n| *n > 0),
            "no {kind} was injected into the poller's GETs: {:?}",
            k.faults
        );
    }
}

#[test]
fn transient_poll_faults_are_never_internal_in_space_mode() {
    poll_fault_campaign(false, 12);
}

#[test]
fn transient_poll_faults_are_never_internal_in_node_mode() {
    poll_fault_campaign(true, 12);
}

// The full campaign, one test per mode so that the two run side by side.
#[test]
#[ignore = "the full campaign: just chaos"]
fn full_campaign_in_space_mode() {
    campaign(&RANDOM, false, 1000, 100);
}

#[test]
#[ignore = "the full campaign: just chaos"]
fn full_campaign_in_node_mode() {
    campaign(&RANDOM, true, 1000, 100);
}

#[test]
#[ignore = "the full campaign: just chaos"]
fn full_campaign_with_poll_faults_in_space_mode() {
    poll_fault_campaign(false, 1000);
}

#[test]
#[ignore = "the full campaign: just chaos"]
fn full_campaign_with_poll_faults_in_node_mode() {
    poll_fault_campaign(true, 1000);
}

/// `(path, max bytes)` of every stored quota, and the names of the volume
/// directories and of the ownership markers, in the shared export.
fn shared_state(c: &Campaign) -> (BTreeSet<(String, i64)>, BTreeSet<String>, BTreeSet<String>) {
    let quotas = c
        .state
        .quotas()
        .into_iter()
        .map(|(_, path, max, _)| (path, max))
        .collect();
    let base = c.state.shared_base();
    let names = |dir: PathBuf| volume_names(&dir).into_iter().collect();
    (quotas, names(base.clone()), names(base.join(".owners")))
}

/// `count` calls at once, each retried as the provisioner does until it
/// answers OK, while the driver is killed and restarted `restarts` times
/// part-way. Returns the violations (codes a correct caller never sees, or
/// a call that never settles).
fn wave(
    c: &mut Campaign,
    rpc: &'static str,
    count: usize,
    restarts: u64,
    send: impl Fn(&ControllerClient, usize) -> grpcio::Result<()> + Send + Sync + 'static,
) {
    // An Unknown (a connection cut by the kill) is one more answer to retry.
    let codes: Arc<Vec<Code>> = Arc::new(TRANSIENT.into_iter().chain([Code::UNKNOWN]).collect());
    let send = Arc::new(send);
    let settled = Arc::new(AtomicUsize::new(0));
    // Each process serves on a socket of its own: after a restart the
    // callers dial the new one, as the sidecars do once the pod is back.
    let current = Arc::new(Mutex::new(c.dev().another_controller()));
    let callers: Vec<_> = (0..count)
        .map(|i| {
            let current = current.clone();
            let (send, settled, codes) = (send.clone(), settled.clone(), codes.clone());
            std::thread::spawn(move || -> Result<(), String> {
                // The provisioner's own pace.
                let how = Retry {
                    codes: &codes,
                    pauses: Backoff::doubling(Duration::from_millis(50), Duration::from_secs(2)),
                    limit: STEP_PATIENCE * 2,
                };
                let answer = retry(&how, || {
                    let client = current.lock().unwrap().clone();
                    send(&client, i)
                });
                settled.fetch_add(1, Ordering::SeqCst);
                let Err(e) = answer else {
                    return Ok(());
                };
                let code = code_of(&e);
                if codes.contains(&code) {
                    Err(format!(
                        "{rpc} #{i} never settled; last answer {code:?}: {e:?}"
                    ))
                } else {
                    Err(format!("{rpc} #{i} answered {code:?}: {e:?}"))
                }
            })
        })
        .collect();
    for k in 1..=restarts {
        // Kill part-way: after a share of the calls was answered (or gave
        // up, a violation reported below).
        let at = count * k as usize / (restarts as usize + 1);
        wait_for("a share of the calls to settle", STEP_PATIENCE, || {
            settled.load(Ordering::SeqCst) >= at
        });
        c.restart();
        *current.lock().unwrap() = c.dev().another_controller();
    }
    for caller in callers {
        if let Err(v) = caller.join().unwrap() {
            c.violation(v);
        }
    }
    c.check_promises(&format!("after the wave of {rpc}"));
}

/// A space-mode campaign under random faults for waves (they restart the
/// driver themselves), its seed printed for a replay.
fn wave_campaign(wave: &str) -> Campaign {
    let seed = chaos_seed();
    println!("CHAOS {wave}: seed {seed} (replay with CHAOS_SEED={seed})");
    Campaign::start(&RANDOM, seed, false, 0)
}

/// A violation unless the shared filesystem holds no quota, volume
/// directory or marker.
fn shared_parent_empty(c: &mut Campaign) {
    let (quotas, dirs, markers) = shared_state(c);
    if !quotas.is_empty() || !dirs.is_empty() || !markers.is_empty() {
        c.violation(format!(
            "after the deletes: {} quotas, {} directories, {} markers left",
            quotas.len(),
            dirs.len(),
            markers.len()
        ));
    }
}

/// A violation unless the volume directories on the shared parent are
/// exactly the directory volumes ListVolumes lists there (restores under
/// way aside: their markers say they are still being filled).
fn directories_are_listed(c: &mut Campaign, after: &str) {
    let parent = format!("1/{}/", c.state.shared_parent().0);
    let codes: Vec<Code> = TRANSIENT.into_iter().chain([Code::UNKNOWN]).collect();
    let how = Retry {
        codes: &codes,
        pauses: Backoff::doubling(Duration::from_millis(50), Duration::from_secs(2)),
        limit: STEP_PATIENCE,
    };
    let client = c.dev().another_controller();
    let mut listed = BTreeSet::new();
    let mut token = String::new();
    loop {
        let mut req = csi::ListVolumesRequest::new();
        req.starting_token = token.clone();
        let page = match retry(&how, || client.list_volumes_opt(&req, call())) {
            Ok(page) => page,
            Err(e) => return c.violation(format!("ListVolumes {after}: {e:?}")),
        };
        listed.extend(page.entries.iter().filter_map(|e| {
            let id = &e.volume.as_ref()?.volume_id;
            id.strip_prefix(&parent).map(str::to_string)
        }));
        if page.next_token.is_empty() {
            break;
        }
        token = page.next_token;
    }
    let base = c.state.shared_base();
    let filling = |name: &String| {
        std::fs::read_to_string(base.join(".owners").join(name))
            .is_ok_and(|m| m.contains("filling: true"))
    };
    let dirs: BTreeSet<String> = volume_names(&base)
        .into_iter()
        .filter(|n| !filling(n))
        .collect();
    if dirs != listed {
        c.violation(format!(
            "{after}: directories not listed or listed without a directory: {:?}",
            dirs.symmetric_difference(&listed).collect::<Vec<_>>()
        ));
    }
}

/// The faults of the last process counted, the wave's figures printed, and
/// no violation.
fn report(c: &mut Campaign, wave: &str) {
    let logs = c.dev().driver.logs();
    c.count_faults(&logs);
    println!(
        "CHAOS {wave}: {} restarts; faults injected: {:?}; violations: {}",
        c.counts.restarts,
        c.counts.faults,
        c.counts.violations.len()
    );
    assert!(c.counts.violations.is_empty(), "{:#?}", c.counts.violations);
}

/// 200 directory volumes of one shared filesystem at once, with lost
/// replies, throttling and server errors from the fake, and the driver
/// killed twice while they are under way; then all deleted the same way.
/// Every quota is exact, no directory lacks its quota or marker (nor the
/// reverse), and none is left after the deletes.
#[test]
fn two_hundred_subdirectory_volumes_through_faults_and_restarts() {
    let mut c = wave_campaign("subdirectory wave");
    const COUNT: usize = 200;
    let size = |i: usize| ((i % 7) as i64 + 1) << 20;
    let name = |i: usize| format!("pvc-wave-{i:03}");
    let class = subdirectory_params();
    wave(&mut c, "CreateVolume", COUNT, 2, move |client, i| {
        let mut req = create_req(&name(i), size(i));
        req.parameters = class.clone();
        let got = client.create_volume_opt(&req, call())?;
        let volume = got.volume.unwrap();
        assert_eq!(volume.capacity_bytes, size(i), "{}", name(i));
        assert!(
            volume.volume_id.ends_with(&format!("/{}", name(i))),
            "{volume:?}"
        );
        Ok(())
    });
    // Once the retries have settled, the share holds exactly the 200.
    let want_quotas: BTreeSet<(String, i64)> = (0..COUNT)
        .map(|i| (format!("/csi-volumes/{}", name(i)), size(i)))
        .collect();
    let want_names: BTreeSet<String> = (0..COUNT).map(name).collect();
    let (quotas, dirs, markers) = shared_state(&c);
    if quotas != want_quotas {
        let extra: Vec<_> = quotas.difference(&want_quotas).collect();
        let missing: Vec<_> = want_quotas.difference(&quotas).collect();
        c.violation(format!("quotas: extra {extra:?}, missing {missing:?}"));
    }
    if dirs != want_names {
        c.violation(format!(
            "directories: {:?}",
            dirs.symmetric_difference(&want_names).collect::<Vec<_>>()
        ));
    }
    if markers != want_names {
        c.violation(format!(
            "markers: {:?}",
            markers
                .symmetric_difference(&want_names)
                .collect::<Vec<_>>()
        ));
    }
    let prefix = format!("1/{}", c.state.shared_parent().0);
    wave(&mut c, "DeleteVolume", COUNT, 1, move |client, i| {
        client
            .delete_volume_opt(&delete_req(&format!("{prefix}/{}", name(i))), call())
            .map(|_| ())
    });
    shared_parent_empty(&mut c);
    report(&mut c, "subdirectory wave");
}

/// 40 directory volumes of 300 MiB at once on the 10 GiB shared parent,
/// which holds 34 of them, under the same faults and two restarts (each
/// new process knows nothing of the last one's promises): exactly 34 are
/// made and 6 refused with ResourceExhausted, and at no point do the
/// quotas promise more than the parent holds (checked after each wave).
#[test]
fn a_wave_asking_more_than_the_parent_holds_is_never_over_promised() {
    let mut c = wave_campaign("over-subscribed wave");
    const COUNT: usize = 40;
    const SIZE: i64 = 300 << 20;
    let fits = (c.state.filesystem(c.state.shared_parent().0)["max_capacity_bytes"]
        .as_i64()
        .unwrap()
        / SIZE) as usize;
    let name = |i: usize| format!("pvc-over-{i:02}");
    let class = subdirectory_params();
    let refused = Arc::new(AtomicUsize::new(0));
    let counted = refused.clone();
    wave(&mut c, "CreateVolume", COUNT, 2, move |client, i| {
        let mut req = create_req(&name(i), SIZE);
        req.parameters = class.clone();
        match client.create_volume_opt(&req, call()) {
            Err(e) if code_of(&e) == Code::RESOURCE_EXHAUSTED => {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
            other => other.map(|_| ()),
        }
    });
    let made = c.state.quotas().len();
    if made != fits || refused.load(Ordering::SeqCst) < COUNT - fits {
        c.violation(format!(
            "{made} volumes made and {} creates refused; {fits} fit",
            refused.load(Ordering::SeqCst)
        ));
    }
    let prefix = format!("1/{}", c.state.shared_parent().0);
    wave(&mut c, "DeleteVolume", COUNT, 0, move |client, i| {
        client
            .delete_volume_opt(&delete_req(&format!("{prefix}/{}", name(i))), call())
            .map(|_| ())
    });
    shared_parent_empty(&mut c);
    report(&mut c, "over-subscribed wave");
}

/// The names of the directory snapshot records on the shared parent.
fn snapshot_records(c: &Campaign) -> BTreeSet<String> {
    volume_names(&c.state.shared_base().join(".snapshots"))
        .into_iter()
        .collect()
}

/// The files of a volume's directory and what each holds.
fn contents(dir: &Path) -> BTreeMap<String, String> {
    volume_names(dir)
        .into_iter()
        .map(|n| {
            let text = std::fs::read_to_string(dir.join(&n)).unwrap_or_default();
            (n, text)
        })
        .collect()
}

/// Every other restore or clone call gives up long before its fill is
/// done (a sidecar's short `--timeout`): its retries join the fill.
fn impatient(i: usize) -> CallOption {
    match i % 2 {
        0 => CallOption::default().timeout(Duration::from_millis(200)),
        _ => call(),
    }
}

/// Directory snapshots, restores and clones of one shared parent, each a
/// wave of retried calls with lost replies, throttling and server errors,
/// the driver killed part-way through the snapshots, the restores (so
/// mid-clone and mid-copy) and the clones, half of whose calls give up
/// long before their fill is done. After each wave the volume
/// directories are exactly what ListVolumes lists. Each restore holds its own
/// source's directory at snapshot time and nothing of a sibling's, each
/// clone its source as it was; no temporary filesystem, clone snapshot or
/// record is left behind, and after the deletes nothing at all.
#[test]
fn directory_snapshots_restores_and_clones_through_faults_and_restarts() {
    let mut c = wave_campaign("directory data wave");
    const COUNT: usize = 12;
    const CLONES: usize = COUNT / 2;
    let name = |i: usize| format!("pvc-data-{i:02}");
    let restored = |i: usize| format!("pvc-data-{i:02}-restore");
    let cloned = |i: usize| format!("pvc-data-{i:02}-clone");
    let subdir = |volume: String| {
        let mut req = create_req(&volume, 64 << 20);
        req.parameters = subdirectory_params();
        req
    };
    wave(&mut c, "CreateVolume", COUNT, 0, move |client, i| {
        client
            .create_volume_opt(&subdir(name(i)), call())
            .map(|_| ())
    });
    directories_are_listed(&mut c, "after the creates");
    let base = c.state.shared_base();
    for i in 0..COUNT {
        std::fs::write(base.join(name(i)).join("data"), name(i)).unwrap();
    }
    let prefix = format!("1/{}", c.state.shared_parent().0);
    let taken: Arc<Mutex<BTreeMap<usize, String>>> = Arc::default();
    {
        let (taken, prefix) = (taken.clone(), prefix.clone());
        wave(&mut c, "CreateSnapshot", COUNT, 1, move |client, i| {
            let req = snapshot_req(
                &format!("snap-data-{i:02}"),
                &format!("{prefix}/{}", name(i)),
            );
            let snapshot = client.create_snapshot_opt(&req, call())?.snapshot.unwrap();
            taken.lock().unwrap().insert(i, snapshot.snapshot_id);
            Ok(())
        });
    }
    // Written after the snapshots: in the clones, never in the restores.
    for i in 0..COUNT {
        std::fs::write(base.join(name(i)).join("later"), "later").unwrap();
    }
    let snapshot_ids = taken.lock().unwrap().clone();
    {
        let ids = snapshot_ids.clone();
        wave(
            &mut c,
            "CreateVolume (restore)",
            COUNT,
            2,
            move |client, i| {
                let req = from_snapshot(subdir(restored(i)), &ids[&i]);
                client.create_volume_opt(&req, impatient(i)).map(|_| ())
            },
        );
    }
    directories_are_listed(&mut c, "after the restores");
    {
        let prefix = prefix.clone();
        wave(
            &mut c,
            "CreateVolume (clone)",
            CLONES,
            1,
            move |client, i| {
                let req = from_volume(subdir(cloned(i)), &format!("{prefix}/{}", name(i)));
                client.create_volume_opt(&req, impatient(i)).map(|_| ())
            },
        );
    }
    directories_are_listed(&mut c, "after the clones");
    for i in 0..COUNT {
        let at_snapshot = BTreeMap::from([("data".to_string(), name(i))]);
        let got = contents(&base.join(restored(i)));
        if got != at_snapshot {
            c.violation(format!("restore {i} holds {got:?}"));
        }
    }
    for i in 0..CLONES {
        let now = BTreeMap::from([
            ("data".to_string(), name(i)),
            ("later".to_string(), "later".to_string()),
        ]);
        let got = contents(&base.join(cloned(i)));
        if got != now {
            c.violation(format!("clone {i} holds {got:?}"));
        }
    }
    // The parent snapshots the records name, and nothing else: no
    // temporary filesystem, no snapshot a clone was copied through.
    let parents: BTreeSet<u64> = snapshot_ids
        .values()
        .map(|id| id.split('/').nth(2).unwrap().parse().unwrap())
        .collect();
    let parents: BTreeSet<String> = c
        .state
        .snapshots()
        .into_iter()
        .filter(|(id, ..)| parents.contains(id))
        .map(|(_, _, label, _)| label)
        .collect();
    wait_for(
        "only the parent snapshots the records name",
        STEP_PATIENCE,
        || c.backend() == (BTreeSet::new(), parents.clone()),
    );
    if snapshot_records(&c).len() != COUNT {
        c.violation(format!("records: {:?}", snapshot_records(&c)));
    }

    wave(&mut c, "DeleteSnapshot", COUNT, 1, move |client, i| {
        client
            .delete_snapshot_opt(&delete_snapshot_req(&snapshot_ids[&i]), call())
            .map(|_| ())
    });
    let volumes: Vec<String> = (0..COUNT)
        .flat_map(|i| [name(i), restored(i)])
        .chain((0..CLONES).map(cloned))
        .collect();
    let count = volumes.len();
    wave(&mut c, "DeleteVolume", count, 1, move |client, i| {
        client
            .delete_volume_opt(&delete_req(&format!("{prefix}/{}", volumes[i])), call())
            .map(|_| ())
    });
    directories_are_listed(&mut c, "after the deletes");
    wait_for_or(
        "no snapshot or filesystem left",
        STEP_PATIENCE,
        || c.backend() == Default::default(),
        || format!("left: {:?}", c.backend()),
    );
    shared_parent_empty(&mut c);
    if !snapshot_records(&c).is_empty() {
        c.violation(format!("records left: {:?}", snapshot_records(&c)));
    }
    report(&mut c, "directory data wave");
}
