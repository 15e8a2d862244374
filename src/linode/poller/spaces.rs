//! A Space's refresh: its watched filesystems and CreateVolume's label
//! lookups answered together, by one request where the API allows, and
//! paced to one list a second per Space while the API reports a list
//! budget. Filesystem watches are taken and refreshed here rather than by
//! the generic `take_due` because the lookups share their requests. This
//! file must not learn of any other kind, nor run the loop that calls it.

use super::policy::WaitPolicy;
use super::refresh::{
    absent_is_none, attempt, fail, settle, transient, Job, Target, LIST_INTERVAL,
    MAX_POLLS_IN_FLIGHT,
};
use super::waits::{answer, end, fire_all, Fired, Key, Lookup, Shared, State, Watch};
use crate::flow;
use crate::linode::pacer::RequestClass;
use crate::linode::types::Filesystem;
use crate::linode::Cloud;
use crate::mutex::lock;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A lookup whose refreshes failed transiently this many times is answered
/// with the failure (the caller retries): the attempts the client's default
/// `RetryPolicy` gives a read.
const LOOKUP_ATTEMPTS: u32 = 5;
/// Lookups as the metrics name them.
pub(super) const LOOKUP_KIND: &str = "label_lookup";

/// The lookups a Space's refresh answers: `(seq, label, region)`.
type Asked = Vec<(u64, String, String)>;

impl Target for Filesystem {
    const KIND: &'static str = "filesystem";

    fn group((space, _, _): Key) -> Key {
        (space, 0, 0)
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
pub(super) fn take_spaces(
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
    let kind = if asked.is_empty() {
        Filesystem::KIND
    } else {
        LOOKUP_KIND
    };
    let sent = Instant::now();
    let fetched = attempt(shared, kind, || {
        refresh_space(shared.cloud.as_ref(), group.0, &keys, &wanted)
    });
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
                let learned = settle(
                    &mut state.filesystems,
                    &keys,
                    &found,
                    sent,
                    &shared.policy,
                    &mut fired,
                );
                for pending_for in learned {
                    state.learned.settled(Filesystem::KIND, pending_for);
                }
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
                end(&mut state.lookups, &mut fired, |l| {
                    was_asked(&asked, l).then(|| e.clone())
                });
            }
        }
    }
    shared.changed.notify_all();
    fire_all(fired);
}

/// Whether the refresh sent for `asked` answers `l` (a lookup asked later
/// waits for the next one).
fn was_asked(asked: &Asked, l: &Lookup) -> bool {
    asked.iter().any(|(seq, _, _)| *seq == l.seq)
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
        if !was_asked(asked, l) {
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

/// When the first filesystem watch or lookup times out (when they are due
/// is the Spaces' business, see `take_spaces`).
pub(super) fn next_expiry(state: &State, timeout: Duration) -> Option<Instant> {
    let watches = state.filesystems.iter().map(|w| w.since);
    let lookups = state.lookups.iter().map(|l| l.since);
    watches.chain(lookups).min().map(|since| since + timeout)
}
