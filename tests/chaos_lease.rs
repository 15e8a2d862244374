//! The fault campaign's directory wave with two controller processes on
//! one fake backend (issue 34): the fake fails, throttles, loses replies
//! and stalls at random while callers, half of them connected to each
//! process, create directory volumes, snapshot them, restore them (half
//! the restores with a deadline far shorter than the restore) and delete
//! everything, retrying as the provisioner does; the holder of the Lease
//! and the standby are each killed with SIGKILL part-way and replaced. A
//! standby's Unavailable is one more answer to retry. At the end every
//! restore holds its source at snapshot time, the volume directories are
//! exactly what ListVolumes lists, and nothing is left behind.

mod common;

use common::controller::*;
use common::requests::*;
use common::rpc::*;
use common::subdir::{mounting, P_SHARED_LABEL, P_TYPE};
use common::{chaos_seed, share, volume_names, wait_for_or, Driver, TempDir};
use grpcio::{CallOption, RpcStatusCode as Code};
use linode_nfs_csi::backoff::Backoff;
use linode_nfs_csi::dev::emulate_exports;
use linode_nfs_csi::dev::exports::Exports;
use linode_nfs_csi::fake::{FaultProfile, FilesystemSeed};
use linode_nfs_csi::proto::csi;
use linode_nfs_csi::proto::csi_grpc::ControllerClient;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const FAULTS: &str = "429:0.04,503:0.03,500:0.01,lost:0.03,slow:0.01,drop:0.01";
const PARENT: &str = "team-share";
const COUNT: usize = 8;
/// One call may take this long through retries before it is a violation.
const PATIENCE: Duration = Duration::from_secs(120);

/// The two processes: the `Env`'s own at first, then whatever replaced
/// it, and one of its `another`s. Callers dial whichever runs now.
struct Pair {
    env: Env,
    /// What replaced the `Env`'s own process, once it was killed.
    first: Option<Driver>,
    second: Driver,
    clients: Arc<Mutex<[ControllerClient; 2]>>,
    replaced: usize,
    violations: Vec<String>,
}

impl Pair {
    /// kill -9 of process `slot`, and a new one in its place.
    /// Each new process has an identity of its own, as a new pod has.
    fn replace(&mut self, slot: usize) {
        self.replaced += 1;
        let next = self
            .env
            .another(&format!("controller-{}", self.replaced), &LEASE);
        lock(&self.clients)[slot] = next.controller();
        let old = match slot {
            0 => self.first.replace(next),
            _ => Some(std::mem::replace(&mut self.second, next)),
        };
        match old {
            Some(mut old) => old.kill(),
            None => self.env.driver.kill(),
        };
    }

    /// `count` calls at once, each retried while it answers a transient
    /// code, every attempt through the other process (as the sidecars'
    /// own leaders move between pods), with the processes `kills` names
    /// killed and replaced once a share of the calls has settled.
    fn wave(
        &mut self,
        rpc: &'static str,
        count: usize,
        kills: &[usize],
        send: impl Fn(&ControllerClient, usize) -> grpcio::Result<()> + Send + Sync + 'static,
    ) {
        let send = Arc::new(send);
        let settled = Arc::new(AtomicUsize::new(0));
        let callers: Vec<_> = (0..count)
            .map(|i| {
                let (send, settled, clients) =
                    (send.clone(), settled.clone(), self.clients.clone());
                std::thread::spawn(move || -> Result<(), String> {
                    // An Unknown (a connection cut by a kill) is one more.
                    let codes: Vec<Code> =
                        UNDER_FAULTS.into_iter().chain([Code::UNKNOWN]).collect();
                    let how = Retry {
                        codes: &codes,
                        pauses: Backoff::doubling(
                            Duration::from_millis(50),
                            Duration::from_secs(1),
                        ),
                        limit: PATIENCE,
                    };
                    let mut attempt = i;
                    let answer = retry(&how, || {
                        attempt += 1;
                        let client = lock(&clients)[attempt % 2].clone();
                        send(&client, i)
                    });
                    settled.fetch_add(1, Ordering::SeqCst);
                    answer.map_err(|e| format!("{rpc} #{i}: {e:?}"))
                })
            })
            .collect();
        for (k, &slot) in kills.iter().enumerate() {
            let at = count * (k + 1) / (kills.len() + 1);
            common::wait_for("a share of the calls to settle", PATIENCE, || {
                settled.load(Ordering::SeqCst) >= at
            });
            self.replace(slot);
        }
        for caller in callers {
            if let Err(v) = caller.join().unwrap() {
                self.violations.push(v);
            }
        }
    }

    /// The volumes of the shared parent ListVolumes lists, by name.
    fn listed(&self, parent: u64) -> BTreeSet<String> {
        let prefix = format!("{SPACE}/{parent}/");
        let codes = [Code::UNAVAILABLE, Code::INTERNAL, Code::UNKNOWN];
        let how = Retry {
            codes: &codes,
            ..SIDECAR
        };
        let client = lock(&self.clients)[1].clone();
        let mut names = BTreeSet::new();
        let mut token = String::new();
        loop {
            let mut req = csi::ListVolumesRequest::new();
            req.starting_token = token.clone();
            let page = retry(&how, || client.list_volumes(&req)).expect("ListVolumes");
            names.extend(page.entries.iter().filter_map(|e| {
                let id = &e.volume.as_ref()?.volume_id;
                id.strip_prefix(&prefix).map(str::to_string)
            }));
            if page.next_token.is_empty() {
                return names;
            }
            token = page.next_token;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap()
}

/// Fast lease periods that still fence (1.5 s + 1 s < 3 s), an upkeep
/// every second.
const LEASE: [(&str, &str); 5] = [
    ("LINODE_REQUEST_TIMEOUT", "1s"),
    ("LEASE_DURATION", "3s"),
    ("LEASE_RENEW_DEADLINE", "1500ms"),
    ("LEASE_RETRY_PERIOD", "300ms"),
    ("MAINTENANCE_INTERVAL", "1s"),
];

fn subdir(name: &str) -> csi::CreateVolumeRequest {
    let mut req = volume_req(name, &by_id());
    req.capacity_range.mut_or_insert_default().required_bytes = 64 << 20;
    req.parameters.insert(P_TYPE.into(), "subdirectory".into());
    req.parameters.insert(P_SHARED_LABEL.into(), PARENT.into());
    req
}

/// Every other restore gives up long before its fill is done.
fn impatient(i: usize) -> CallOption {
    match i % 4 {
        0 | 1 => CallOption::default().timeout(Duration::from_millis(200)),
        _ => CallOption::default().timeout(Duration::from_secs(60)),
    }
}

#[test]
fn two_controllers_through_faults_and_kills_of_either_keep_every_volume_and_leave_nothing() {
    let seed = chaos_seed();
    println!("CHAOS two controllers: seed {seed} (replay with CHAOS_SEED={seed})");
    let helper_dir = TempDir::new("chaos-lease-helper");
    let shares = TempDir::new("chaos-lease-shares");
    let helper = share::install_bind_helper(helper_dir.path());
    let mut setup = mounting(
        Setup::new().seed(|s| s.with_filesystem(FilesystemSeed::new(SPACE, PARENT, REGION))),
        &helper,
        shares.path(),
    );
    for (k, v) in LEASE {
        setup = setup.env(k, v);
    }
    let env = setup.start();
    emulate_exports(
        &env.linode,
        Arc::new(Exports::new(helper_dir.path()).unwrap()),
    );
    let second = env.another("second-0", &LEASE);
    let profile = FaultProfile::parse(FAULTS, Duration::from_secs(2)).unwrap();
    env.linode.set_fault_profile(Some(profile));
    env.linode.set_fault_seed(seed);
    let parent = env.filesystem(PARENT);
    let base: PathBuf = share::export_dir(
        helper_dir.path(),
        parent.mount_target_fqdn.as_deref().unwrap(),
    )
    .join("csi-volumes");
    let clients = Arc::new(Mutex::new([env.driver.controller(), second.controller()]));
    let mut pair = Pair {
        env,
        first: None,
        second,
        clients,
        replaced: 0,
        violations: Vec::new(),
    };
    let name = |i: usize| format!("pvc-two-{i}");
    let restored = |i: usize| format!("pvc-two-{i}-restore");

    pair.wave("CreateVolume", COUNT, &[0], move |c, i| {
        c.create_volume(&subdir(&name(i))).map(drop)
    });
    for i in 0..COUNT {
        std::fs::write(base.join(name(i)).join("data"), name(i)).unwrap();
    }
    let ids: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(vec![String::new(); COUNT]));
    {
        let (ids, prefix) = (ids.clone(), format!("{SPACE}/{}", parent.id));
        pair.wave("CreateSnapshot", COUNT, &[1], move |c, i| {
            let req = snapshot_req(&format!("snap-two-{i}"), &format!("{prefix}/{}", name(i)));
            let snapshot = c.create_snapshot(&req)?.snapshot.unwrap();
            if !snapshot.ready_to_use {
                return Err(grpcio::Error::RpcFailure(grpcio::RpcStatus::with_message(
                    Code::UNAVAILABLE,
                    "not ready yet".into(),
                )));
            }
            lock(&ids)[i] = snapshot.snapshot_id;
            Ok(())
        });
    }
    // Written after the snapshots: never in a restore.
    for i in 0..COUNT {
        std::fs::write(base.join(name(i)).join("later"), "later").unwrap();
    }
    let snapshot_ids = lock(&ids).clone();
    {
        let ids = snapshot_ids.clone();
        pair.wave("CreateVolume (restore)", COUNT, &[0, 1], move |c, i| {
            let req = from_snapshot(subdir(&restored(i)), &ids[i]);
            c.create_volume_opt(&req, impatient(i)).map(drop)
        });
    }
    for i in 0..COUNT {
        let got: Vec<(String, String)> = volume_names(&base.join(restored(i)))
            .into_iter()
            .map(|f| {
                let text =
                    std::fs::read_to_string(base.join(restored(i)).join(&f)).unwrap_or_default();
                (f, text)
            })
            .collect();
        if got != [("data".to_string(), name(i))] {
            pair.violations.push(format!("restore {i} holds {got:?}"));
        }
    }
    let dirs: BTreeSet<String> = volume_names(&base).into_iter().collect();
    let listed = pair.listed(parent.id);
    if dirs != listed {
        pair.violations.push(format!(
            "directories not listed or listed without one: {:?}",
            dirs.symmetric_difference(&listed).collect::<Vec<_>>()
        ));
    }
    {
        let ids = snapshot_ids.clone();
        pair.wave("DeleteSnapshot", COUNT, &[1], move |c, i| {
            c.delete_snapshot(&delete_snapshot_req(&ids[i])).map(drop)
        });
    }
    let prefix = format!("{SPACE}/{}", parent.id);
    pair.wave("DeleteVolume", 2 * COUNT, &[0], move |c, i| {
        let volume = match i % 2 {
            0 => name(i / 2),
            _ => restored(i / 2),
        };
        c.delete_volume(&delete_req(&format!("{prefix}/{volume}")))
            .map(drop)
    });
    pair.env.linode.set_fault_profile(None);
    let left = || {
        let filesystems: Vec<String> = pair
            .env
            .live_filesystems()
            .into_iter()
            .map(|f| f.label)
            .filter(|l| l != PARENT)
            .collect();
        let snapshots = pair.env.linode.snapshots().len();
        let quotas = pair
            .env
            .linode
            .quotas()
            .iter()
            .filter(|q| !q.is_root)
            .count();
        (filesystems, snapshots, quotas, volume_names(&base))
    };
    wait_for_or(
        "nothing to be left",
        PATIENCE,
        || left() == (Vec::new(), 0, 0, Vec::new()),
        || format!("left: {:?}", left()),
    );
    println!(
        "CHAOS two controllers: {} processes replaced; faults injected: {:?}; violations: {}",
        pair.replaced,
        pair.env.linode.injected(),
        pair.violations.len()
    );
    assert!(pair.violations.is_empty(), "{:#?}", pair.violations);
}
