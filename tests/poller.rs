//! The shared poller over the real `LinodeCloud` against the fake Linode API:
//! how many requests its waits cost (counted by the fake, never timed), and
//! how a wait ends: active, a terminal status, gone, the wait timeout, or
//! its waiter leaving. Transient failures of a poll keep the waits going.

mod common;

use common::linode::{
    answered, assert_filter_refused_once, create_filesystem, create_filesystem_in as create_in,
    fake_and_cloud as setup, fast_waits as policy,
};
use common::{block_on, wait_for};
use linode_nfs_csi::fake::{
    FakeLinode, FaultRule, Lifecycle, QuotaBehaviour, RateLimit, RequestRecord, Seed, SpaceSeed,
};
use linode_nfs_csi::flow::{done, Flow, Pending, Step, Thunk};
use linode_nfs_csi::linode::{
    Cloud, Filesystem, FilesystemAccessPolicyUpdate, LinodeCloud, LinodeSettings, NewQuota, Poller,
    SquashPolicy, Status, WaitPolicy,
};
use linode_nfs_csi::Error;
use std::sync::{mpsc, Arc};
use std::time::Duration;

const FS_ONE: &str = "nfs/spaces/*/filesystems/*";
const PATIENCE: Duration = Duration::from_secs(30);

fn create(cloud: &LinodeCloud, label: &str) -> Filesystem {
    let fs = create_filesystem(cloud, label);
    assert_eq!(fs.status, Status::Creating, "the fake activates later");
    fs
}

/// Parks every step at once, runs each rest as it wakes, returns the
/// outcomes in order, and the driver's holds (to cancel one).
struct Parked<T> {
    woken: mpsc::Receiver<(usize, Thunk<T>)>,
    send: mpsc::Sender<(usize, Thunk<T>)>,
    pending: Vec<Option<Arc<dyn Pending>>>,
    outcomes: Vec<Option<linode_nfs_csi::Result<T>>>,
}

impl<T: Send + 'static> Parked<T> {
    fn new(steps: Vec<Step<T>>) -> Parked<T> {
        let (send, woken) = mpsc::channel();
        let mut parked = Parked {
            woken,
            send,
            pending: Vec::new(),
            outcomes: Vec::new(),
        };
        for (i, step) in steps.into_iter().enumerate() {
            parked.pending.push(None);
            parked.outcomes.push(None);
            parked.take(i, step);
        }
        parked
    }

    fn take(&mut self, i: usize, step: Step<T>) {
        match step {
            Ok(Flow::Parked(p)) => {
                let send = self.send.clone();
                self.pending[i] = Some(p.park(Box::new(move |rest| {
                    let _ = send.send((i, rest));
                })));
            }
            Ok(Flow::Ready(v)) => self.outcomes[i] = Some(Ok(v)),
            Err(e) => self.outcomes[i] = Some(Err(e)),
        }
    }

    /// Runs woken rests until `n` outcomes are in.
    fn finish(mut self, n: usize) -> Vec<Option<linode_nfs_csi::Result<T>>> {
        while self.outcomes.iter().filter(|o| o.is_some()).count() < n {
            let (i, rest) = self.woken.recv_timeout(PATIENCE).expect("a wait ends");
            self.take(i, rest());
        }
        self.outcomes
    }
}

fn polls_since(fake: &FakeLinode, before: usize) -> Vec<RequestRecord> {
    fake.requests()
        .into_iter()
        .skip(before)
        .filter(|r| r.method == "GET")
        .collect()
}

fn filter_ids(r: &RequestRecord) -> Vec<u64> {
    let filter: serde_json::Value = serde_json::from_str(r.x_filter.as_deref().unwrap()).unwrap();
    filter["+or"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_u64().unwrap())
        .collect()
}

#[test]
fn pending_filesystems_of_a_space_share_one_list_request_per_tick() {
    let (fake, cloud) = setup(Duration::from_millis(600));
    let made: Vec<Filesystem> = (0..30)
        .map(|i| create(&cloud, &format!("fs-{i}")))
        .collect();
    let poller = Poller::new(cloud.clone(), policy(PATIENCE));
    let before = fake.requests().len();
    let steps = made
        .iter()
        .map(|fs| poller.filesystem(fs.clone(), done))
        .collect();
    let outcomes = Parked::new(steps).finish(30);
    for (fs, outcome) in made.iter().zip(outcomes) {
        let active = outcome.unwrap().unwrap();
        assert_eq!((active.id, active.status), (fs.id, Status::Active));
    }

    let polls = polls_since(&fake, before);
    assert!(
        polls.iter().all(|r| r.path.ends_with("/filesystems")),
        "no waiter polled its own filesystem: {:?}",
        polls.iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    let mut all: Vec<u64> = made.iter().map(|f| f.id).collect();
    all.sort();
    let mut first = filter_ids(&polls[0]);
    first.sort();
    assert_eq!(first, all, "one request refreshed every waiter");
    assert!(
        polls.len() < made.len(),
        "{} polls for {} waiters",
        polls.len(),
        made.len()
    );
    assert!(polls.iter().all(|r| r.query.contains("page_size=500")));
}

#[test]
fn a_lone_waiter_costs_a_plain_get() {
    let (fake, cloud) = setup(Duration::from_millis(200));
    let fs = create(&cloud, "alone");
    let before = fake.requests().len();
    let poller = Poller::new(cloud.clone(), policy(PATIENCE));
    let active = block_on(poller.filesystem(fs.clone(), done)).unwrap();
    assert_eq!(active.status, Status::Active);
    let polls = polls_since(&fake, before);
    assert!(!polls.is_empty());
    assert!(
        polls
            .iter()
            .all(|r| r.path == format!("nfs/spaces/7/filesystems/{}", fs.id)),
        "{polls:?}"
    );
}

#[test]
fn an_active_object_needs_no_wait() {
    let (fake, cloud) = setup(Duration::ZERO);
    let fs = create(&cloud, "quick");
    let active = cloud.get_filesystem(7, fs.id).unwrap();
    let before = fake.requests().len();
    let poller = Poller::new(cloud.clone(), policy(PATIENCE));
    let step = poller.filesystem(active, done);
    assert!(matches!(step, Ok(Flow::Ready(_))));
    assert_eq!(fake.requests().len(), before);
}

/// The error a lone wait of at most `timeout` for `fs` ends with; it names
/// the filesystem.
#[track_caller]
fn failed_wait(cloud: &Arc<LinodeCloud>, timeout: Duration, fs: &Filesystem) -> Error {
    let poller = Poller::new(cloud.clone(), policy(timeout));
    let err = block_on(poller.filesystem(fs.clone(), done)).unwrap_err();
    assert!(
        err.message().contains(&format!("NFS filesystem {}", fs.id)),
        "{err}"
    );
    err
}

#[test]
fn a_terminal_status_ends_the_wait_naming_the_object() {
    let (fake, cloud) = setup(Duration::from_millis(100));
    fake.set_filesystem_lifecycle("broken", Lifecycle::StickInError);
    let fs = create(&cloud, "broken");
    let err = failed_wait(&cloud, PATIENCE, &fs);
    assert!(matches!(err, Error::FailedPrecondition(_)), "{err:?}");
}

#[test]
fn the_wait_timeout_is_deadline_exceeded_naming_the_object() {
    let (fake, cloud) = setup(Duration::ZERO);
    fake.set_filesystem_lifecycle("never", Lifecycle::NeverActive);
    let fs = create(&cloud, "never");
    let err = failed_wait(&cloud, Duration::from_millis(400), &fs);
    assert!(matches!(err, Error::DeadlineExceeded(_)), "{err:?}");
}

#[test]
fn a_filesystem_that_disappears_ends_its_wait_with_not_found() {
    let (fake, cloud) = setup(Duration::ZERO);
    fake.set_deletion_delay(Duration::ZERO);
    fake.set_filesystem_lifecycle("doomed", Lifecycle::NeverActive);
    let fs = create(&cloud, "doomed");
    let other = {
        fake.set_filesystem_lifecycle("survivor", Lifecycle::NeverActive);
        create(&cloud, "survivor")
    };
    let poller = Poller::new(cloud.clone(), policy(PATIENCE));
    let parked = Parked::new(vec![
        poller.filesystem(fs.clone(), done),
        poller.filesystem(other.clone(), done),
    ]);
    cloud.delete_filesystem(7, fs.id).unwrap();
    let outcomes = parked.finish(1);
    let err = outcomes[0].as_ref().unwrap().as_ref().unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    assert!(err.message().contains(&format!("NFS filesystem {}", fs.id)));
    assert!(outcomes[1].is_none(), "the other wait goes on");
}

/// A lone wait for a new filesystem `label` whose polls meet `fault`; it
/// must end active. The fake and the poller, for their counts.
fn wait_through(activation: Duration, label: &str, fault: FaultRule) -> (FakeLinode, Poller) {
    let (fake, cloud) = setup(activation);
    let fs = create(&cloud, label);
    fake.inject(fault);
    let poller = Poller::new(cloud.clone(), policy(PATIENCE));
    let active = block_on(poller.filesystem(fs, done)).unwrap();
    assert_eq!(active.status, Status::Active);
    (fake, poller)
}

#[test]
fn throttled_polls_keep_the_waits_going() {
    // More 429s than the client retries one request.
    let (fake, _poller) = wait_through(
        Duration::from_millis(300),
        "throttled",
        FaultRule::rate_limited("GET", FS_ONE, 0).times(8),
    );
    assert_eq!(answered(&fake, 429), 8);
}

#[test]
fn a_waiter_that_leaves_is_no_longer_polled() {
    let (fake, cloud) = setup(Duration::ZERO);
    fake.set_filesystem_lifecycle("left", Lifecycle::NeverActive);
    let fs = create(&cloud, "left");
    let poller = Poller::new(cloud.clone(), policy(PATIENCE));
    let parked = Parked::new(vec![poller.filesystem(fs.clone(), done)]);
    wait_for("a first poll", PATIENCE, || {
        fake.calls("GET", &format!("nfs/spaces/7/filesystems/{}", fs.id)) > 0
    });
    assert_eq!(poller.pending().filesystems, 1);
    assert!(parked.pending[0].as_ref().unwrap().cancel());
    assert_eq!(poller.pending().filesystems, 0);
}

#[test]
fn lists_fall_back_to_whole_spaces_when_the_api_cannot_filter_by_id() {
    let (fake, cloud) = setup(Duration::from_millis(300));
    fake.set_filesystem_id_filter(false);
    let made: Vec<Filesystem> = (0..3).map(|i| create(&cloud, &format!("nf-{i}"))).collect();
    let before = fake.requests().len();
    let poller = Poller::new(cloud.clone(), policy(PATIENCE));
    let steps = made
        .iter()
        .map(|fs| poller.filesystem(fs.clone(), done))
        .collect();
    for outcome in Parked::new(steps).finish(3) {
        assert_eq!(outcome.unwrap().unwrap().status, Status::Active);
    }
    assert_filter_refused_once(
        &polls_since(&fake, before),
        "once refused, the id filter is not tried again",
    );
}

#[test]
fn snapshots_of_one_filesystem_share_a_list_and_policies_settle() {
    let (fake, cloud) = setup(Duration::ZERO);
    let fs = create(&cloud, "source");
    fake.set_activation_delay(Duration::from_millis(300));
    let a = cloud.create_snapshot(7, fs.id, "snap-a", &[]).unwrap();
    let b = cloud.create_snapshot(7, fs.id, "snap-b", &[]).unwrap();
    let before = fake.requests().len();
    let poller = Poller::new(cloud.clone(), policy(PATIENCE));
    let steps = vec![poller.snapshot(a, done), poller.snapshot(b, done)];
    for outcome in Parked::new(steps).finish(2) {
        assert_eq!(outcome.unwrap().unwrap().status, Status::Active);
    }
    let polls = polls_since(&fake, before);
    assert!(
        polls.iter().all(|r| r.path.ends_with("/snapshots")),
        "{:?}",
        polls.iter().map(|r| &r.path).collect::<Vec<_>>()
    );

    let put = cloud
        .put_filesystem_access_policy(
            7,
            fs.id,
            &FilesystemAccessPolicyUpdate {
                label: "source".into(),
                enabled: false,
                linode_ids: vec![],
                squash_policy: SquashPolicy::None,
                protocols: vec!["nfsv4".into()],
            },
        )
        .unwrap();
    assert_eq!(put.status, Status::Updating);
    let settled = block_on(poller.filesystem_policy(7, fs.id, put, done)).unwrap();
    assert_eq!(settled.status, Status::Active);
    assert_eq!(settled.squash_policy, Some(SquashPolicy::None));
}

#[test]
fn quotas_of_one_filesystem_share_a_list_and_an_error_ends_the_wait() {
    let (fake, cloud) = setup(Duration::ZERO);
    let fs = create(&cloud, "shared");
    fake.set_activation_delay(Duration::from_millis(300));
    let quota = |path: &str| NewQuota {
        path: path.into(),
        max_capacity_bytes: 1 << 20,
        max_file_count: None,
    };
    let a = cloud
        .create_quota(7, fs.id, &quota("/csi-volumes/a"))
        .unwrap();
    let b = cloud
        .create_quota(7, fs.id, &quota("/csi-volumes/b"))
        .unwrap();
    assert_eq!(a.status, Status::Updating, "the fake applies quotas later");
    let before = fake.requests().len();
    let poller = Poller::new(cloud.clone(), policy(PATIENCE));
    let steps = vec![poller.quota(7, a, done), poller.quota(7, b, done)];
    for outcome in Parked::new(steps).finish(2) {
        assert_eq!(outcome.unwrap().unwrap().status, Status::Active);
    }
    let polls = polls_since(&fake, before);
    assert!(
        !polls.is_empty() && polls.iter().all(|r| r.path.ends_with("/quotas")),
        "two pending quotas share the list: {:?}",
        polls.iter().map(|r| &r.path).collect::<Vec<_>>()
    );

    fake.set_quota_behaviour(QuotaBehaviour {
        lifecycle: Some(Lifecycle::StickInError),
        ..QuotaBehaviour::default()
    });
    let c = cloud
        .create_quota(7, fs.id, &quota("/csi-volumes/c"))
        .unwrap();
    let id = c.id;
    match block_on(poller.quota(7, c, done)) {
        Err(Error::FailedPrecondition(msg)) => {
            assert!(msg.contains(&format!("NFS quota {id}")), "{msg}")
        }
        other => panic!("a quota in error ends its wait: {other:?}"),
    }
}

fn setup_two_spaces(activation: Duration) -> (FakeLinode, Arc<LinodeCloud>) {
    let seed = Seed {
        activation_delay_ms: activation.as_millis() as u64,
        ..Seed::default()
    }
    .with_space(SpaceSeed::new(7, "shared"))
    .with_space(SpaceSeed::new(8, "other"));
    let fake = FakeLinode::start(seed).unwrap();
    let mut settings = LinodeSettings::new(fake.token());
    settings.base_url = fake.url();
    let cloud = Arc::new(LinodeCloud::new(settings).unwrap());
    (fake, cloud)
}

#[test]
fn failing_polls_keep_the_waits_going_one_attempt_each() {
    // Server errors (500 is Internal to a caller) on every poll for a
    // while: each poll is one request, counted, and the wait goes on.
    let (fake, poller) = wait_through(
        Duration::from_millis(200),
        "flaky",
        FaultRule::status("GET", FS_ONE, 500).times(6),
    );
    assert_eq!(answered(&fake, 500), 6);
    let counts = poller.counts();
    assert_eq!(counts.failed, 6, "{counts:?}");
    assert_eq!(
        counts.polls as usize,
        fake.calls("GET", FS_ONE),
        "one request per poll, never the client's retries: {counts:?}"
    );
}

#[test]
fn one_failing_group_does_not_stall_the_others() {
    let (fake, cloud) = setup_two_spaces(Duration::from_millis(100));
    let broken = create_in(&cloud, 7, "broken");
    let healthy = create_in(&cloud, 8, "healthy");
    fake.inject(FaultRule::status("GET", "nfs/spaces/7/filesystems/*", 503));
    let poller = Poller::new(cloud.clone(), policy(PATIENCE));
    let mut parked = Parked::new(vec![
        poller.filesystem(broken.clone(), done),
        poller.filesystem(healthy.clone(), done),
    ]);
    // The healthy space's wait ends while the other space's polls fail.
    while parked.outcomes[1].is_none() {
        let (i, rest) = parked.woken.recv_timeout(PATIENCE).expect("a wait ends");
        parked.take(i, rest());
    }
    assert_eq!(
        parked.outcomes[1]
            .as_ref()
            .unwrap()
            .as_ref()
            .unwrap()
            .status,
        Status::Active
    );
    // And the failing group keeps being polled, each failure counted.
    wait_for("the failing group to be polled again", PATIENCE, || {
        poller.counts().failed >= 3
    });
    assert!(
        parked.outcomes[0].is_none(),
        "the failing group still waits"
    );
    let failing = fake.calls("GET", "nfs/spaces/7/filesystems/*");
    assert!(failing >= 3, "the failing group was polled {failing} times");
    fake.clear_faults();
    let outcomes = parked.finish(2);
    assert_eq!(
        outcomes[0].as_ref().unwrap().as_ref().unwrap().status,
        Status::Active,
        "and ends once its polls succeed"
    );
}

#[test]
fn a_poll_that_times_out_keeps_the_wait_going() {
    let (fake, _) = setup(Duration::from_millis(100));
    let mut settings = LinodeSettings::new(fake.token());
    settings.base_url = fake.url();
    settings.request_timeout = Duration::from_millis(200);
    let cloud = Arc::new(LinodeCloud::new(settings).unwrap());
    let fs = create(&cloud, "slow");
    let hang = fake.hang("GET", FS_ONE);
    let poller = Poller::new(cloud.clone(), policy(PATIENCE));
    let parked = Parked::new(vec![poller.filesystem(fs, done)]);
    assert!(
        hang.wait_for_hits(2, PATIENCE),
        "polled again after a timeout"
    );
    assert!(parked.outcomes[0].is_none());
    hang.release();
    let outcome = parked.finish(1).remove(0).unwrap().unwrap();
    assert_eq!(outcome.status, Status::Active);
    assert!(poller.counts().failed >= 1);
}

/// A TCP relay in front of the fake that can be cut: while cut, every
/// connection (new or pooled) is closed at once, so requests fail in the
/// transport (no HTTP answer), as with a network outage.
struct Relay {
    url: String,
    cut: Arc<std::sync::atomic::AtomicBool>,
}

impl Relay {
    fn start(upstream: &str) -> Relay {
        use std::io::{Read, Write};
        use std::net::{TcpListener, TcpStream};
        use std::sync::atomic::Ordering;
        let upstream = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cutting = cut.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if cutting.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let cutting = cutting.clone();
                    from.set_read_timeout(Some(Duration::from_millis(20)))
                        .unwrap();
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 * 1024];
                        loop {
                            if cutting.load(Ordering::SeqCst) {
                                break;
                            }
                            match from.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) => {
                                    if to.write_all(&buf[..n]).is_err() {
                                        break;
                                    }
                                }
                                Err(e)
                                    if matches!(
                                        e.kind(),
                                        std::io::ErrorKind::WouldBlock
                                            | std::io::ErrorKind::TimedOut
                                    ) => {}
                                Err(_) => break,
                            }
                        }
                        let _ = from.shutdown(std::net::Shutdown::Both);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Relay { url, cut }
    }

    fn set_cut(&self, cut: bool) {
        self.cut.store(cut, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn waits_outlast_random_server_errors_and_a_network_outage() {
    let (fake, direct) = setup_two_spaces(Duration::from_millis(300));
    let relay = Relay::start(&fake.url());
    let mut settings = LinodeSettings::new(fake.token());
    settings.base_url = relay.url.clone();
    let cloud = Arc::new(LinodeCloud::new(settings).unwrap());
    let made: Vec<Filesystem> = (0..12)
        .map(|i| create_in(&direct, 7 + i % 2, &format!("chaos-{i}")))
        .collect();
    let snap = direct
        .create_snapshot(7, made[0].id, "chaos-snap", &[])
        .unwrap();
    fake.set_fault_profile(Some(
        linode_nfs_csi::fake::FaultProfile::parse("500:0.3,502:0.1,503:0.1", PATIENCE).unwrap(),
    ));
    let poller = Poller::new(cloud.clone(), policy(PATIENCE));
    let mut steps: Vec<Step<Status>> = made
        .iter()
        .map(|fs| poller.filesystem(fs.clone(), |fs| done(fs.status)))
        .collect();
    steps.push(poller.snapshot(snap, |s| done(s.status)));
    let mut parked = Parked::new(steps);
    // A network outage in the middle of it: every poll fails in transport.
    let failed_before = poller.counts().failed;
    relay.set_cut(true);
    let reached_before = fake.requests().len();
    wait_for("polls failing in transport", PATIENCE, || {
        poller.counts().failed >= failed_before + 9
    });
    assert!(
        fake.requests().len() <= reached_before + 3,
        "during the outage the polls do not reach the backend"
    );
    relay.set_cut(false);
    while parked.outcomes.iter().any(Option::is_none) {
        let (i, rest) = parked.woken.recv_timeout(PATIENCE).expect("a wait ends");
        parked.take(i, rest());
    }
    for (i, outcome) in parked.outcomes.iter().enumerate() {
        assert_eq!(
            outcome.as_ref().unwrap().as_ref().unwrap(),
            &Status::Active,
            "wait {i} ended because of a failed poll"
        );
    }
    let injected: u64 = fake.injected().values().sum();
    assert!(injected > 0, "the profile failed some polls");
}

#[test]
fn a_group_whose_polls_hang_holds_back_no_other_group() {
    let (fake, direct) = setup_two_spaces(Duration::from_millis(100));
    let hung = create_in(&direct, 7, "hung");
    let healthy = create_in(&direct, 8, "healthy");
    // A request timeout far past the test's patience: only a poller that
    // refreshes groups side by side ends the healthy wait in time.
    let mut settings = LinodeSettings::new(fake.token());
    settings.base_url = fake.url();
    settings.request_timeout = Duration::from_secs(300);
    let cloud = Arc::new(LinodeCloud::new(settings).unwrap());
    let hang = fake.hang("GET", "nfs/spaces/7/filesystems/*");
    let poller = Poller::new(cloud, policy(PATIENCE));
    let mut parked = Parked::new(vec![
        poller.filesystem(hung, done),
        poller.filesystem(healthy, done),
    ]);
    assert!(hang.wait_for_hits(1, PATIENCE), "the hung group is polled");
    let (i, rest) = parked.woken.recv_timeout(PATIENCE).expect("a wait ends");
    parked.take(i, rest());
    assert_eq!(i, 1, "the healthy group's wait ends while the other hangs");
    assert_eq!(hang.hits(), 1, "a hung poll is not sent again meanwhile");
    hang.release();
    let outcomes = parked.finish(2);
    assert_eq!(
        outcomes[0].as_ref().unwrap().as_ref().unwrap().status,
        Status::Active
    );
}

/// Under a rate limit, a wait skips the early polls the waits of its kind
/// before it spent finding their object still pending: a second filesystem
/// that takes as long as the first costs fewer polls. Without a limit, the
/// plain schedule.
#[test]
fn under_a_rate_limit_a_wait_skips_the_polls_earlier_waits_of_its_kind_found_pending() {
    let (fake, cloud) = setup(Duration::from_millis(2600));
    let poller = Poller::new(cloud.clone(), WaitPolicy::new(PATIENCE));
    let polls_of = |labels: [&str; 2]| -> Vec<usize> {
        labels
            .iter()
            .map(|label| {
                let fs = create(&cloud, label);
                let before = fake.requests().len();
                let active = block_on(poller.filesystem(fs.clone(), done)).unwrap();
                assert_eq!((active.id, active.status), (fs.id, Status::Active));
                polls_since(&fake, before).len()
            })
            .collect()
    };
    let plain = polls_of(["plain-1", "plain-2"]);
    fake.set_rate_limit(Some(RateLimit {
        list: 1000,
        other: 1000,
        window: Duration::from_secs(60),
    }));
    // The budget is known from the next answer on.
    cloud.get_space(7).unwrap();
    let learned = polls_of(["learned-1", "learned-2"]);
    let fewest_plain = *plain.iter().min().unwrap();
    assert!(
        learned.iter().all(|n| *n < fewest_plain),
        "polls of each wait: {plain:?} without a limit, {learned:?} under one"
    );
}
