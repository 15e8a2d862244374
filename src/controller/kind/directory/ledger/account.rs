//! The active controller's account of each shared parent (a named one or a
//! pool filesystem): its quotas (the driver's, other clusters' and an
//! admin's), so what they promise, and what its root quota says is used.
//! One quota list seeds it; the answers to the controller's own POSTs,
//! PUTs and DELETEs (and the poller's, once they settle) keep it current,
//! so a burst of creates lists a parent once rather than once a create.
//! It is read again (`Reason`) once it is older than its bound, once a
//! write to the parent was refused or its outcome is unknown, once this
//! process gains the Lease, and before every write to a parent that
//! carries another cluster's volumes. A list merged in never undoes what
//! the controller wrote after that list was sent. It lives in memory only;
//! the `.kept` ledgers on the parents are the record of deleted volumes'
//! data, read beside it. Nothing here lists or mounts: `parent` reads.

use crate::handles::{DirName, VolumeId};
use crate::linode::Quota;
use crate::mutex::lock;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Why a parent's quotas were listed again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    /// None was held yet.
    Seed,
    /// The account was older than its bound.
    Periodic,
    /// A caller asked for a fresh list: the upkeep sampling usage,
    /// ControllerGetVolume reporting a volume's condition, a prune
    /// confirming a pool filesystem is empty.
    Fresh,
    /// The backend refused a write to the parent.
    Refused,
    /// A write's outcome is unknown.
    InDoubt,
    /// This process gained the Lease: another may have written meanwhile.
    Lease,
    /// A write is about to go to a parent another cluster writes to.
    Shared,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Seed => "seed",
            Reason::Periodic => "periodic",
            Reason::Fresh => "fresh",
            Reason::Refused => "refused",
            Reason::InDoubt => "in_doubt",
            Reason::Lease => "lease",
            Reason::Shared => "shared",
        }
    }
}

/// What a caller is about to do with the quotas it asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Read them, or decide from them alone.
    Read,
    /// Promise room on the parent (a create, a growth).
    Write,
    /// Report usage or a volume's condition, or confirm a parent is empty
    /// before it is deleted: always a fresh list.
    Fresh,
}

/// One parent's account.
#[derive(Debug)]
struct Account {
    /// Every quota by id, with when the controller's own write last set it.
    quotas: BTreeMap<u64, (Quota, Option<Instant>)>,
    /// Quotas the controller deleted, and when: a list sent before then may
    /// still show them.
    removed: HashMap<u64, Instant>,
    /// When the last list merged in was sent.
    read_at: Instant,
    /// A list is due before the account is used again, why, and since
    /// when (a list sent before then does not settle it).
    due: Option<(Reason, Instant)>,
    /// Which volume directories with a quota are another cluster's (`true`)
    /// or not, as their markers said.
    foreign: BTreeMap<DirName, bool>,
}

impl Account {
    fn shared(&self) -> bool {
        self.foreign.values().any(|f| *f)
    }

    fn view(&self) -> Vec<Quota> {
        self.quotas.values().map(|(q, _)| q.clone()).collect()
    }
}

/// Every parent's account.
pub struct Accounts {
    parents: Mutex<HashMap<VolumeId, Account>>,
    max_age: Duration,
}

/// What a list merged in left the account holding.
pub struct Merged {
    /// The moment `quotas` were current.
    pub at: Instant,
    pub quotas: Vec<Quota>,
    /// The volume directories whose markers were not looked at yet.
    pub unchecked: Vec<DirName>,
}

/// A parent's figures for the metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figures {
    pub parent: VolumeId,
    /// What its quotas promise, the root quota aside.
    pub promised: i64,
    /// What its root quota last said is used; `None` before the backend
    /// counted.
    pub used: Option<i64>,
}

impl Accounts {
    /// Accounts listed again once older than `max_age`.
    pub fn new(max_age: Duration) -> Accounts {
        Accounts {
            parents: Mutex::default(),
            max_age,
        }
    }

    /// The quotas of `parent` as the account holds them, and the moment
    /// they were current, or why they must be listed first.
    pub fn held(
        &self,
        parent: VolumeId,
        purpose: Purpose,
    ) -> Result<(Instant, Vec<Quota>), Reason> {
        let parents = lock(&self.parents);
        let Some(account) = parents.get(&parent) else {
            return Err(Reason::Seed);
        };
        if let Some((reason, _)) = account.due {
            return Err(reason);
        }
        match purpose {
            Purpose::Fresh => Err(Reason::Fresh),
            _ if account.read_at.elapsed() >= self.max_age => Err(Reason::Periodic),
            Purpose::Write if account.shared() => Err(Reason::Shared),
            _ => Ok((Instant::now(), account.view())),
        }
    }

    /// Merges a list of `parent`'s quotas sent at `read_at`: what the
    /// controller wrote or deleted after it was sent stays as written.
    /// `names` tells the volume directory a quota caps.
    pub fn merge(
        &self,
        parent: VolumeId,
        read_at: Instant,
        listed: Vec<Quota>,
        names: impl Fn(&Quota) -> Option<DirName>,
    ) -> Merged {
        let mut parents = lock(&self.parents);
        let account = parents.entry(parent).or_insert_with(|| Account {
            quotas: BTreeMap::new(),
            removed: HashMap::new(),
            read_at,
            due: None,
            foreign: BTreeMap::new(),
        });
        if read_at < account.read_at {
            // A newer list is merged already.
            return Merged {
                at: Instant::now(),
                quotas: account.view(),
                unchecked: Vec::new(),
            };
        }
        let mut quotas: BTreeMap<u64, (Quota, Option<Instant>)> = listed
            .into_iter()
            .filter(|q| account.removed.get(&q.id).is_none_or(|at| *at <= read_at))
            .map(|q| (q.id, (q, None)))
            .collect();
        for (id, (q, written)) in &account.quotas {
            if written.is_some_and(|at| at > read_at) {
                quotas.insert(*id, (q.clone(), *written));
            }
        }
        account.quotas = quotas;
        account.removed.retain(|_, at| *at > read_at);
        account.read_at = read_at;
        if account.due.is_some_and(|(_, since)| since <= read_at) {
            account.due = None;
        }
        let named: BTreeSet<DirName> = account
            .quotas
            .values()
            .filter_map(|(q, _)| names(q))
            .collect();
        account.foreign.retain(|name, _| named.contains(name));
        let unchecked = named
            .into_iter()
            .filter(|n| !account.foreign.contains_key(n))
            .collect();
        Merged {
            at: Instant::now(),
            quotas: account.view(),
            unchecked,
        }
    }

    /// Records whether volume directory `name` of `parent` is another
    /// cluster's, as its marker says.
    pub fn checked(&self, parent: VolumeId, name: DirName, foreign: bool) {
        if let Some(account) = lock(&self.parents).get_mut(&parent) {
            account.foreign.insert(name, foreign);
        }
    }

    /// The controller's own write to volume directory `name` of `parent`
    /// answered `quota`.
    pub fn written(&self, parent: VolumeId, name: &DirName, quota: &Quota) {
        let mut parents = lock(&self.parents);
        if let Some(account) = parents.get_mut(&parent) {
            account.removed.remove(&quota.id);
            account.foreign.entry(name.clone()).or_insert(false);
            account
                .quotas
                .insert(quota.id, (quota.clone(), Some(Instant::now())));
        }
    }

    /// The controller deleted quota `id` of `parent`.
    pub fn deleted(&self, parent: VolumeId, id: u64) {
        let mut parents = lock(&self.parents);
        if let Some(account) = parents.get_mut(&parent) {
            account.quotas.remove(&id);
            account.removed.insert(id, Instant::now());
        }
    }

    /// A list of `parent` is due before its account is used again.
    pub fn due(&self, parent: VolumeId, reason: Reason) {
        if let Some(account) = lock(&self.parents).get_mut(&parent) {
            account.due.get_or_insert((reason, Instant::now()));
        }
    }

    /// Every account is listed again before it is used (the Lease changed
    /// hands: another process may have written meanwhile).
    pub fn all_due(&self, reason: Reason) {
        let now = Instant::now();
        for account in lock(&self.parents).values_mut() {
            account.due.get_or_insert((reason, now));
        }
    }

    /// `parent` is gone: its account with it.
    pub fn forget(&self, parent: VolumeId) {
        lock(&self.parents).remove(&parent);
    }

    /// Each parent's figures, by parent.
    pub fn figures(&self) -> Vec<Figures> {
        let parents = lock(&self.parents);
        let mut all: Vec<Figures> = parents
            .iter()
            .map(|(parent, account)| {
                let quotas = account.view();
                Figures {
                    parent: *parent,
                    promised: super::quotas::promised(&quotas),
                    used: quotas
                        .iter()
                        .find(|q| q.is_root)
                        .and_then(|q| q.used_capacity_bytes),
                }
            })
            .collect();
        all.sort_by_key(|f| f.parent);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::kind::directory::ledger::quotas::tests::quota;

    const P: VolumeId = VolumeId {
        space: 7,
        filesystem: 9,
    };

    fn q(id: u64, path: &str, max: i64) -> Quota {
        Quota {
            id,
            ..quota(path, max, path == "/")
        }
    }

    fn name(q: &Quota) -> Option<DirName> {
        DirName::parse(q.path.strip_prefix("/csi-volumes/")?).ok()
    }

    fn dir(n: &str) -> DirName {
        DirName::parse(n).unwrap()
    }

    fn ids(quotas: &[Quota]) -> Vec<(u64, i64)> {
        quotas
            .iter()
            .map(|q| (q.id, q.max_capacity_bytes.unwrap_or(0)))
            .collect()
    }

    #[test]
    fn every_reason_is_one_the_metric_shows_from_the_start() {
        let all = [
            Reason::Seed,
            Reason::Periodic,
            Reason::Fresh,
            Reason::Refused,
            Reason::InDoubt,
            Reason::Lease,
            Reason::Shared,
        ];
        let names: Vec<&str> = all.iter().map(|r| r.name()).collect();
        assert_eq!(names, crate::metrics::ACCOUNT_REASONS);
    }

    #[test]
    fn one_list_seeds_it_and_own_writes_keep_it_current() {
        let a = Accounts::new(Duration::from_secs(60));
        assert_eq!(a.held(P, Purpose::Read), Err(Reason::Seed));
        let merged = a.merge(
            P,
            Instant::now(),
            vec![q(1, "/", 100), q(2, "/csi-volumes/pvc-a", 10)],
            name,
        );
        assert_eq!(ids(&merged.quotas), [(1, 100), (2, 10)]);
        assert_eq!(merged.unchecked, [dir("pvc-a")]);
        a.written(P, &dir("pvc-b"), &q(3, "/csi-volumes/pvc-b", 20));
        a.written(P, &dir("pvc-a"), &q(2, "/csi-volumes/pvc-a", 30));
        a.deleted(P, 1);
        assert_eq!(
            ids(&a.held(P, Purpose::Write).unwrap().1),
            [(2, 30), (3, 20)]
        );
        // What it wrote itself needs no look at a marker.
        let merged = a.merge(
            P,
            Instant::now(),
            vec![q(3, "/csi-volumes/pvc-b", 20)],
            name,
        );
        assert!(merged.unchecked.is_empty());
        assert_eq!(a.held(P, Purpose::Fresh), Err(Reason::Fresh));
        assert_eq!(
            a.figures(),
            [Figures {
                parent: P,
                promised: 20,
                used: None
            }]
        );
    }

    /// A list sent before a write answered may not show it; one sent
    /// before a delete answered may still show the quota.
    #[test]
    fn a_list_never_undoes_a_later_write() {
        let a = Accounts::new(Duration::from_secs(60));
        a.merge(
            P,
            Instant::now(),
            vec![q(2, "/csi-volumes/pvc-a", 10)],
            name,
        );
        let sent = Instant::now();
        a.written(P, &dir("pvc-b"), &q(3, "/csi-volumes/pvc-b", 20));
        a.deleted(P, 2);
        let merged = a.merge(P, sent, vec![q(2, "/csi-volumes/pvc-a", 10)], name);
        assert_eq!(ids(&merged.quotas), [(3, 20)]);
        // A list sent after both shows what the backend holds: an admin's
        // quota 4 appears, and quota 3, gone behind the driver's back, goes.
        let merged = a.merge(P, Instant::now(), vec![q(4, "/data", 5)], name);
        assert_eq!(ids(&merged.quotas), [(4, 5)]);
    }

    #[test]
    fn it_is_listed_again_when_due_old_or_shared() {
        let a = Accounts::new(Duration::from_secs(60));
        a.merge(
            P,
            Instant::now(),
            vec![q(2, "/csi-volumes/pvc-a", 10)],
            name,
        );
        a.due(P, Reason::Refused);
        a.due(P, Reason::InDoubt);
        assert_eq!(a.held(P, Purpose::Read), Err(Reason::Refused));
        a.merge(
            P,
            Instant::now(),
            vec![q(2, "/csi-volumes/pvc-a", 10)],
            name,
        );
        a.checked(P, dir("pvc-a"), true);
        assert!(a.held(P, Purpose::Read).is_ok());
        assert_eq!(a.held(P, Purpose::Write), Err(Reason::Shared));
        a.all_due(Reason::Lease);
        assert_eq!(a.held(P, Purpose::Read), Err(Reason::Lease));
        assert!(a
            .merge(P, Instant::now(), vec![], name)
            .unchecked
            .is_empty());
        assert!(a.held(P, Purpose::Write).is_ok(), "its volume is gone");
        a.forget(P);
        assert_eq!(a.held(P, Purpose::Read), Err(Reason::Seed));
        let aged = Accounts::new(Duration::ZERO);
        aged.merge(P, Instant::now(), vec![], name);
        assert_eq!(aged.held(P, Purpose::Read), Err(Reason::Periodic));
    }
}
