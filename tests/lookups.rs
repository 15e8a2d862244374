//! CreateVolume's label lookups on the shared poller, over the real
//! `LinodeCloud` against the fake Linode API, counted by the fake: parked
//! lookups of one Space share its refresh (one list however many there
//! are, together with the status polls of filesystems already POSTed), a
//! refused `+or` filter falls back to the whole Space, and under a list
//! budget a Space's lists stay at one a second while a posted create's
//! watch rides on every one of them.

mod common;

use common::linode::{
    assert_filter_refused_once, create_filesystem as create, fake_and_cloud as setup, fast_waits,
};
use common::wait_for;
use linode_nfs_csi::fake::{FakeLinode, Hang, RateLimit, RequestRecord};
use linode_nfs_csi::flow::{done, Flow, Step, Thunk};
use linode_nfs_csi::linode::{Cloud, Filesystem, LinodeCloud, Poller, Status, WaitPolicy};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

const FS_LIST: &str = "nfs/spaces/*/filesystems";
const PATIENCE: Duration = Duration::from_secs(30);

fn policy() -> WaitPolicy {
    fast_waits(PATIENCE)
}

/// What a lookup answered: the ids it found.
type Found = linode_nfs_csi::Result<Vec<u64>>;

fn lookup(poller: &Poller, label: &str) -> Step<Vec<u64>> {
    poller.filesystems_labelled(7, label, "us-ord", |found| {
        done(found?.into_iter().map(|fs| fs.id).collect())
    })
}

/// Parks `step`; its outcome arrives on the returned channel.
fn park<T: Send + 'static>(step: Step<T>) -> mpsc::Receiver<linode_nfs_csi::Result<T>> {
    let (tx, rx) = mpsc::channel();
    match step {
        Ok(Flow::Parked(p)) => {
            // The hold must outlive the wait; the test ends before it matters.
            std::mem::forget(p.park(Box::new(move |rest: Thunk<T>| {
                let outcome = match rest() {
                    Ok(Flow::Ready(v)) => Ok(v),
                    Ok(Flow::Parked(_)) => panic!("parked twice"),
                    Err(e) => Err(e),
                };
                let _ = tx.send(outcome);
            })));
        }
        Ok(Flow::Ready(v)) => tx.send(Ok(v)).unwrap(),
        Err(e) => tx.send(Err(e)).unwrap(),
    }
    rx
}

/// A first lookup whose list the fake holds, with the waits of `posted`
/// filesystems parked behind it, so that later lookups of the Space park
/// too and share the next list.
struct Held {
    poller: Poller,
    gate: Hang,
    first: mpsc::Receiver<Found>,
    waits: Vec<mpsc::Receiver<linode_nfs_csi::Result<Filesystem>>>,
    /// The fake's request count once the first list was held.
    before: usize,
}

impl Held {
    fn lookup(
        fake: &FakeLinode,
        cloud: &Arc<LinodeCloud>,
        label: &str,
        posted: &[Filesystem],
    ) -> Held {
        let poller = Poller::new(cloud.clone(), policy());
        let gate = fake.hang("GET", FS_LIST);
        let first = park(lookup(&poller, label));
        assert!(gate.wait_for_hits(1, PATIENCE));
        let before = fake.requests().len();
        let waits = posted
            .iter()
            .map(|fs| park(poller.filesystem(fs.clone(), done)))
            .collect();
        Held {
            poller,
            gate,
            first,
            waits,
            before,
        }
    }

    /// Releases the held list once `lookups` lookups are parked.
    fn release(&self, lookups: usize) {
        wait_for(&format!("{lookups} parked lookups"), PATIENCE, || {
            self.poller.pending().lookups == lookups
        });
        self.gate.release();
    }
}

fn lists_since(fake: &FakeLinode, before: usize) -> Vec<RequestRecord> {
    fake.requests()
        .into_iter()
        .skip(before)
        .filter(|r| r.method == "GET" && r.path == "nfs/spaces/7/filesystems")
        .collect()
}

fn filter_terms(r: &RequestRecord, key: &str) -> Vec<serde_json::Value> {
    let Some(raw) = r.x_filter.as_deref() else {
        return Vec::new();
    };
    let filter: serde_json::Value = serde_json::from_str(raw).unwrap();
    filter["+or"]
        .as_array()
        .map(|terms| terms.iter().filter_map(|t| t.get(key).cloned()).collect())
        .unwrap_or_default()
}

#[test]
fn fifty_parked_lookups_share_one_list_and_each_gets_its_own_answer() {
    let (fake, cloud) = setup(Duration::ZERO);
    let existing: Vec<Filesystem> = (0..25)
        .map(|i| create(&cloud, &format!("pvc-{i}")))
        .collect();
    let poller = Poller::new(cloud.clone(), policy());
    let before = fake.requests().len();
    // The first lookup of an idle Space goes at once; while its list is
    // held, 49 more park.
    let gate = fake.hang("GET", FS_LIST);
    let first = park(lookup(&poller, "pvc-0"));
    assert!(gate.wait_for_hits(1, PATIENCE));
    let rest: Vec<_> = (1..50)
        .map(|i| park(lookup(&poller, &format!("pvc-{i}"))))
        .collect();
    wait_for("50 parked lookups", PATIENCE, || {
        poller.pending().lookups == 50
    });
    gate.release();

    let found: Vec<Found> = std::iter::once(first)
        .chain(rest)
        .map(|rx| rx.recv_timeout(PATIENCE).expect("answered"))
        .collect();
    for (i, found) in found.into_iter().enumerate() {
        let want: Vec<u64> = existing.get(i).map(|fs| fs.id).into_iter().collect();
        assert_eq!(found.unwrap(), want, "pvc-{i}");
    }
    let lists = lists_since(&fake, before);
    assert_eq!(lists.len(), 2, "50 lookups, two lists: {lists:?}");
    // A lone lookup is today's filtered GET; the rest share one `+or`.
    let lone: serde_json::Value =
        serde_json::from_str(lists[0].x_filter.as_deref().unwrap()).unwrap();
    assert_eq!(
        lone,
        serde_json::json!({"label": "pvc-0", "region": "us-ord"})
    );
    assert_eq!(filter_terms(&lists[1], "label").len(), 49, "{:?}", lists[1]);
    assert!(lists[1].query.contains("page_size=500"), "{:?}", lists[1]);
    assert_eq!(poller.pending().lookups, 0);
}

#[test]
fn a_lookup_and_the_waits_of_its_space_share_one_request() {
    let (fake, cloud) = setup(Duration::from_millis(400));
    let posted: Vec<Filesystem> = (0..2)
        .map(|i| create(&cloud, &format!("made-{i}")))
        .collect();
    let held = Held::lookup(&fake, &cloud, "made-0", &posted);
    let second = park(lookup(&held.poller, "pvc-new"));
    held.release(2);
    let (first, waits, before) = (held.first, held.waits, held.before);
    assert_eq!(
        first.recv_timeout(PATIENCE).unwrap().unwrap(),
        vec![posted[0].id]
    );
    assert_eq!(
        second.recv_timeout(PATIENCE).unwrap().unwrap(),
        Vec::<u64>::new()
    );
    for (fs, wait) in posted.iter().zip(waits) {
        let active = wait.recv_timeout(PATIENCE).unwrap().unwrap();
        assert_eq!((active.id, active.status), (fs.id, Status::Active));
    }
    let lists = lists_since(&fake, before);
    let shared = lists
        .iter()
        .find(|r| !filter_terms(r, "label").is_empty())
        .expect("the second lookup's list");
    let mut ids: Vec<u64> = filter_terms(shared, "id")
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, posted.iter().map(|f| f.id).collect::<Vec<_>>());
    assert_eq!(
        filter_terms(shared, "label"),
        vec![serde_json::json!("pvc-new")]
    );
}

#[test]
fn a_refused_or_filter_falls_back_to_the_whole_space() {
    let (fake, cloud) = setup(Duration::from_millis(300));
    fake.set_filesystem_id_filter(false);
    let posted: Vec<Filesystem> = (0..2).map(|i| create(&cloud, &format!("nf-{i}"))).collect();
    let labelled = create(&cloud, "pvc-b");
    let held = Held::lookup(&fake, &cloud, "pvc-a", &posted);
    let b = park(lookup(&held.poller, "pvc-b"));
    let c = park(lookup(&held.poller, "pvc-c"));
    held.release(3);
    let (first, waits, before) = (held.first, held.waits, held.before);
    assert_eq!(
        first.recv_timeout(PATIENCE).unwrap().unwrap(),
        Vec::<u64>::new()
    );
    assert_eq!(
        b.recv_timeout(PATIENCE).unwrap().unwrap(),
        vec![labelled.id]
    );
    assert_eq!(
        c.recv_timeout(PATIENCE).unwrap().unwrap(),
        Vec::<u64>::new()
    );
    for wait in waits {
        assert_eq!(
            wait.recv_timeout(PATIENCE).unwrap().unwrap().status,
            Status::Active
        );
    }
    let lists = lists_since(&fake, before);
    assert!(!filter_terms(&lists[0], "id").is_empty());
    assert_filter_refused_once(&lists, "once refused, the whole Space is listed");
}

#[test]
fn under_a_list_budget_a_posted_create_rides_on_every_list_and_lists_stay_at_one_a_second() {
    let (fake, cloud) = setup(Duration::from_millis(1500));
    fake.set_rate_limit(Some(RateLimit {
        list: 100,
        other: 100,
        window: Duration::from_secs(10),
    }));
    // The pacer learns the budget from any answer.
    cloud.list_spaces().unwrap();
    let a = create(&cloud, "posted-a");
    let b = create(&cloud, "posted-b");
    let poller = Poller::new(cloud.clone(), policy());
    let before = fake.requests().len();
    let started = Instant::now();
    let waits = [
        park(poller.filesystem(a.clone(), done)),
        park(poller.filesystem(b.clone(), done)),
    ];
    // New lookups keep arriving while the posted ones wait.
    let mut lookups = Vec::new();
    for i in 0..30 {
        lookups.push(park(lookup(&poller, &format!("pvc-{i}"))));
        std::thread::sleep(Duration::from_millis(40));
    }
    for wait in waits {
        assert_eq!(
            wait.recv_timeout(PATIENCE).unwrap().unwrap().status,
            Status::Active
        );
    }
    let waited = started.elapsed();
    for found in lookups {
        assert_eq!(
            found.recv_timeout(PATIENCE).unwrap().unwrap(),
            Vec::<u64>::new()
        );
    }
    let lists = lists_since(&fake, before);
    let ids = |r: &RequestRecord| filter_terms(r, "id").len();
    // Every list while the posted ones waited refreshed them too, however
    // many new lookups it carried: no list of lookups alone came first.
    let while_waiting = lists.iter().take_while(|r| ids(r) == 2).count();
    assert!(while_waiting > 0, "{lists:?}");
    assert!(
        lists[while_waiting..].iter().all(|r| ids(r) == 0),
        "{lists:?}"
    );
    let bound = waited.as_secs_f64().ceil() as usize + 1;
    assert!(
        while_waiting <= bound,
        "{while_waiting} lists in {waited:?}: {lists:?}"
    );
    assert!(
        lists.len() < 30,
        "30 lookups and two waits took {} lists",
        lists.len()
    );
}
