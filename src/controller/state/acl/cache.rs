//! What the controller last knew of each filesystem's ACL (node mode), so
//! ListVolumes and ControllerGetVolume report published nodes without an
//! access-policy GET per volume per call. The controller is the only writer
//! of these ACLs: every policy it reads and every PUT it makes lands here.
//! An entry older than `ACL_CACHE_MAX_AGE` is read again, but only as fast
//! as the refresh budget allows (at most `REFRESH_PER_SECOND` on average,
//! `REFRESH_BURST` at once), so a re-sync of thousands of volumes never
//! spends the token's budget that publishes need; one not refreshed yet is
//! reported from its last read. A filesystem never read is always read:
//! nothing is reported that was not seen. This module only keeps state and
//! decides what to read; the reads are `controller::acl::policy`'s and the writes the
//! queue's (`controller::acl`), and it lives in this process only.

use crate::handles::VolumeId;
use crate::linode::FilesystemAccessPolicy;
use crate::mutex::lock;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Refreshes of entries past their age, on average per second: 60 a
/// minute, 15% of the 400 a minute a token gets for single-object requests
/// at the least, leaving the rest to publishes, creates and the poller.
const REFRESH_PER_SECOND: f64 = 1.0;
/// Refreshes one listing may make at once when the budget has been idle:
/// two minutes' worth, so a re-sync every ten minutes refreshes at most 120
/// entries (the oldest first).
const REFRESH_BURST: f64 = 120.0;

/// One filesystem's ACL as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acl {
    Policy {
        linode_ids: Vec<u64>,
        enabled: bool,
    },
    /// The backend has no per-filesystem policy: published nodes unknown.
    NoPolicy,
}

impl Acl {
    pub fn of(policy: &FilesystemAccessPolicy) -> Acl {
        Acl::Policy {
            linode_ids: policy.linode_ids(),
            enabled: policy.enabled,
        }
    }

    /// The CSI node ids the filesystem is published to: the Linodes of an
    /// enabled policy (a disabled one admits nobody).
    pub fn published(&self) -> Vec<String> {
        match self {
            Acl::Policy {
                linode_ids,
                enabled: true,
            } => linode_ids.iter().map(u64::to_string).collect(),
            _ => Vec::new(),
        }
    }
}

/// What a listing does for one filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Report this; no request.
    Report(Acl),
    /// Read the policy (record it with `ticket`); if that fails, `last` is
    /// what may be reported instead.
    Read { ticket: Ticket, last: Option<Acl> },
}

/// Taken before a policy GET: the read is kept only if no write to the
/// filesystem started since (its answer may predate the write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket(Option<u64>);

/// How a PUT ended.
pub enum Written {
    /// The API answered with the policy now in force.
    Applied(Acl),
    /// Refused: the policy is what it was.
    NotApplied,
    /// It may be applied later: nothing is known until it is read again.
    InDoubt,
}

#[derive(Default)]
struct Entry {
    known: Option<(Acl, Instant)>,
    /// Writes started so far: a read that started before the latest one
    /// is not kept.
    writes: u64,
    writing: bool,
}

struct Budget {
    tokens: f64,
    at: Instant,
}

impl Budget {
    fn refill(&mut self, now: Instant) {
        let earned = now.duration_since(self.at).as_secs_f64() * REFRESH_PER_SECOND;
        self.tokens = (self.tokens + earned).min(REFRESH_BURST);
        self.at = now;
    }
}

struct State {
    entries: HashMap<VolumeId, Entry>,
    budget: Budget,
}

pub struct AclCache {
    /// Zero: every read asks the backend (no cache for reads).
    max_age: Duration,
    state: Mutex<State>,
}

impl AclCache {
    pub fn new(max_age: Duration) -> AclCache {
        AclCache {
            max_age,
            state: Mutex::new(State {
                entries: HashMap::new(),
                budget: Budget {
                    tokens: REFRESH_BURST,
                    at: Instant::now(),
                },
            }),
        }
    }

    /// What to do for each of `vols`: fresh entries are reported; missing
    /// ones are read (they use up refresh budget but are never skipped);
    /// entries past their age are read, the oldest first, as far as the
    /// budget goes, and the rest reported as last read.
    pub fn plan(&self, vols: &[VolumeId]) -> Vec<Plan> {
        let mut state = lock(&self.state);
        let state = &mut *state;
        let now = Instant::now();
        let mut plans = Vec::with_capacity(vols.len());
        let mut stale: Vec<(Instant, usize)> = Vec::new();
        let mut missing = 0usize;
        for (i, vol) in vols.iter().enumerate() {
            let ticket = Self::ticket_of(&state.entries, *vol);
            match state.entries.get(vol).and_then(|e| e.known.clone()) {
                None => {
                    missing += 1;
                    plans.push(Plan::Read { ticket, last: None });
                }
                Some((acl, _)) if self.max_age.is_zero() => plans.push(Plan::Read {
                    ticket,
                    last: Some(acl),
                }),
                Some((acl, at)) => {
                    if now.duration_since(at) >= self.max_age {
                        stale.push((at, i));
                    }
                    plans.push(Plan::Report(acl));
                }
            }
        }
        if self.max_age.is_zero() {
            return plans;
        }
        let budget = &mut state.budget;
        budget.refill(now);
        budget.tokens = (budget.tokens - missing as f64).max(0.0);
        stale.sort();
        let refresh = (budget.tokens.floor() as usize).min(stale.len());
        budget.tokens -= refresh as f64;
        for &(_, i) in &stale[..refresh] {
            if let Plan::Report(acl) = &plans[i] {
                plans[i] = Plan::Read {
                    ticket: Self::ticket_of(&state.entries, vols[i]),
                    last: Some(acl.clone()),
                };
            }
        }
        plans
    }

    fn ticket_of(entries: &HashMap<VolumeId, Entry>, vol: VolumeId) -> Ticket {
        Ticket(
            entries
                .get(&vol)
                .map_or(Some(0), |e| (!e.writing).then_some(e.writes)),
        )
    }

    /// For a read outside a listing (a publish's own GET).
    pub fn ticket(&self, vol: VolumeId) -> Ticket {
        Self::ticket_of(&lock(&self.state).entries, vol)
    }

    /// A read made with `ticket`: `Some` what it found, `None` when the
    /// filesystem is gone. Dropped if a write started since the ticket.
    pub fn read(&self, vol: VolumeId, ticket: Ticket, found: Option<Acl>) {
        let mut state = lock(&self.state);
        let current = Self::ticket_of(&state.entries, vol);
        if ticket.0.is_none() || current != ticket {
            return;
        }
        match found {
            Some(acl) => {
                state.entries.entry(vol).or_default().known = Some((acl, Instant::now()));
            }
            None => {
                state.entries.remove(&vol);
            }
        }
    }

    /// A PUT to `vol` is about to be sent: reads already under way are no
    /// longer kept. The guard says how it ended (in doubt if dropped).
    pub fn write(&self, vol: VolumeId) -> WriteGuard<'_> {
        let mut state = lock(&self.state);
        let entry = state.entries.entry(vol).or_default();
        entry.writes += 1;
        entry.writing = true;
        WriteGuard {
            cache: self,
            vol,
            done: false,
        }
    }

    fn written(&self, vol: VolumeId, how: Written) {
        let mut state = lock(&self.state);
        let entry = state.entries.entry(vol).or_default();
        entry.writing = false;
        // Reads that overlapped the write are stale either way.
        entry.writes += 1;
        match how {
            Written::Applied(acl) => entry.known = Some((acl, Instant::now())),
            Written::NotApplied => {}
            Written::InDoubt => entry.known = None,
        }
    }

    /// Forgets every filesystem not in `listed` (a complete listing), so
    /// entries of deleted volumes do not pile up.
    pub fn retain(&self, listed: &HashSet<VolumeId>) {
        lock(&self.state)
            .entries
            .retain(|vol, e| e.writing || listed.contains(vol));
    }
}

/// Ends a write (see `AclCache::write`).
pub struct WriteGuard<'a> {
    cache: &'a AclCache,
    vol: VolumeId,
    done: bool,
}

impl WriteGuard<'_> {
    pub fn finish(mut self, how: Written) {
        self.done = true;
        self.cache.written(self.vol, how);
    }
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.cache.written(self.vol, Written::InDoubt);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vol(n: u64) -> VolumeId {
        VolumeId {
            space: 7,
            filesystem: n,
        }
    }

    fn nodes(ids: &[u64]) -> Acl {
        Acl::Policy {
            linode_ids: ids.to_vec(),
            enabled: true,
        }
    }

    fn reads(plans: &[Plan]) -> usize {
        plans
            .iter()
            .filter(|p| matches!(p, Plan::Read { .. }))
            .count()
    }

    /// Backdates every entry by `by`, as if that much time had passed.
    fn age(cache: &AclCache, by: Duration) {
        for e in lock(&cache.state).entries.values_mut() {
            if let Some((_, at)) = &mut e.known {
                *at -= by;
            }
        }
    }

    #[test]
    fn what_is_known_is_reported_and_what_is_not_is_read() {
        let cache = AclCache::new(Duration::from_secs(300));
        let plans = cache.plan(&[vol(1), vol(2)]);
        assert_eq!(reads(&plans), 2, "nothing known yet: {plans:?}");
        let Plan::Read { ticket, .. } = plans[0] else {
            unreachable!()
        };
        cache.read(vol(1), ticket, Some(nodes(&[1001])));
        assert_eq!(
            cache.plan(&[vol(1), vol(2)]),
            [
                Plan::Report(nodes(&[1001])),
                Plan::Read {
                    ticket: Ticket(Some(0)),
                    last: None
                }
            ]
        );
        assert_eq!(nodes(&[1001]).published(), ["1001"]);
        let disabled = Acl::Policy {
            linode_ids: vec![1001],
            enabled: false,
        };
        assert!(disabled.published().is_empty());
        assert!(Acl::NoPolicy.published().is_empty());

        // Gone: forgotten.
        cache.read(vol(1), cache.ticket(vol(1)), None);
        assert_eq!(reads(&cache.plan(&[vol(1)])), 1);
    }

    #[test]
    fn a_read_that_overlaps_a_write_is_not_kept() {
        let cache = AclCache::new(Duration::from_secs(300));
        let before = cache.ticket(vol(1));
        let writing = cache.write(vol(1));
        let during = cache.ticket(vol(1));
        writing.finish(Written::Applied(nodes(&[1001, 1002])));
        cache.read(vol(1), before, Some(nodes(&[])));
        cache.read(vol(1), during, Some(nodes(&[])));
        assert_eq!(
            cache.plan(&[vol(1)]),
            [Plan::Report(nodes(&[1001, 1002]))],
            "the write's answer stands"
        );
        cache.read(vol(1), cache.ticket(vol(1)), Some(nodes(&[1002])));
        assert_eq!(cache.plan(&[vol(1)]), [Plan::Report(nodes(&[1002]))]);

        // A write that may land later, or one dropped unfinished: unknown.
        cache.write(vol(1)).finish(Written::InDoubt);
        assert_eq!(reads(&cache.plan(&[vol(1)])), 1);
        cache.read(vol(1), cache.ticket(vol(1)), Some(nodes(&[1002])));
        drop(cache.write(vol(1)));
        assert_eq!(reads(&cache.plan(&[vol(1)])), 1);
        cache.read(vol(1), cache.ticket(vol(1)), Some(nodes(&[1002])));
        cache.write(vol(1)).finish(Written::NotApplied);
        assert_eq!(cache.plan(&[vol(1)]), [Plan::Report(nodes(&[1002]))]);
    }

    #[test]
    fn old_entries_are_refreshed_oldest_first_within_the_budget() {
        let cache = AclCache::new(Duration::from_secs(300));
        let all: Vec<VolumeId> = (1..=200).map(vol).collect();
        for v in &all {
            cache.read(*v, cache.ticket(*v), Some(nodes(&[v.filesystem])));
        }
        age(&cache, Duration::from_secs(600));
        // The last ten are the oldest.
        {
            let mut state = lock(&cache.state);
            for n in 191..=200 {
                let (_, at) = state
                    .entries
                    .get_mut(&vol(n))
                    .unwrap()
                    .known
                    .as_mut()
                    .unwrap();
                *at -= Duration::from_secs(60);
            }
        }
        let plans = cache.plan(&all);
        let refreshed: Vec<usize> = plans
            .iter()
            .enumerate()
            .filter(|(_, p)| matches!(p, Plan::Read { .. }))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(refreshed.len(), REFRESH_BURST as usize);
        assert!(
            (190..200).all(|i| refreshed.contains(&i)),
            "the oldest go first"
        );
        assert!(
            plans.iter().all(|p| match p {
                Plan::Read { last, .. } => last.is_some(),
                Plan::Report(_) => true,
            }),
            "a refresh that fails has the last read to report"
        );
        // The budget is spent: the rest are reported as last read (but
        // for what a second or two of refill allows on a slow machine).
        assert!(reads(&cache.plan(&all)) <= 2);
    }

    #[test]
    fn unknown_filesystems_are_read_even_without_budget() {
        let cache = AclCache::new(Duration::from_secs(300));
        let all: Vec<VolumeId> = (1..=300).map(vol).collect();
        assert_eq!(reads(&cache.plan(&all)), 300);
        assert_eq!(reads(&cache.plan(&all)), 300, "never invented");
    }

    #[test]
    fn a_zero_age_reads_every_time() {
        let cache = AclCache::new(Duration::ZERO);
        for _ in 0..3 {
            let plans = cache.plan(&[vol(1)]);
            assert_eq!(reads(&plans), 1);
            cache.read(vol(1), cache.ticket(vol(1)), Some(nodes(&[1001])));
        }
        assert!(matches!(
            &cache.plan(&[vol(1)])[0],
            Plan::Read { last: Some(_), .. }
        ));
    }

    #[test]
    fn entries_not_listed_are_forgotten_unless_being_written() {
        let cache = AclCache::new(Duration::from_secs(300));
        for n in 1..=3 {
            cache.read(vol(n), cache.ticket(vol(n)), Some(nodes(&[])));
        }
        let writing = cache.write(vol(3));
        cache.retain(&HashSet::from([vol(1)]));
        writing.finish(Written::Applied(nodes(&[1001])));
        let kept: HashSet<VolumeId> = lock(&cache.state).entries.keys().copied().collect();
        assert_eq!(kept, HashSet::from([vol(1), vol(3)]));
    }
}
