//! Quota lists of shared parents, shared by the calls that need one at the
//! same time (the seeds and re-reads of the parents' accounts, `account`).
//! A quota list is one of Linode's scarce paginated requests, and a burst
//! of creates on one parent would otherwise send one each. A call waits
//! for the next list of its parent that starts after it arrived, never
//! one already under way (so what it reads is as fresh as a list of its
//! own), and every call waiting then shares that one list: a burst costs
//! two lists, not one per call. The list is sent by the first of them, on
//! its own worker; the others wait for its answer on theirs, for about the
//! length of one or two lists. Nothing here decides what a list means.

use crate::handles::VolumeId;
use crate::linode::Quota;
use crate::mutex::lock;
use crate::Error;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// What one list answered, and when it was sent.
pub type QuotaList = (Instant, Result<Vec<Quota>, Error>);

/// The lists of every parent.
#[derive(Default)]
pub struct QuotaLists {
    parents: Mutex<HashMap<VolumeId, Parent>>,
}

/// A parent whose list is under way, and the round that waits for the next.
#[derive(Default)]
struct Parent {
    next: Option<Arc<Round>>,
}

/// One list and the calls that share it.
#[derive(Default)]
struct Round {
    state: Mutex<RoundState>,
    changed: Condvar,
}

#[derive(Default)]
struct RoundState {
    /// The list may be sent now (the one before it has answered).
    open: bool,
    /// A call has taken it upon itself to send it.
    led: bool,
    answer: Option<QuotaList>,
}

impl QuotaLists {
    /// The quotas of `parent` as `fetch` lists them, from a list sent after
    /// this call arrived and shared with every call waiting for it.
    pub fn list(
        &self,
        parent: VolumeId,
        fetch: impl FnOnce() -> Result<Vec<Quota>, Error>,
    ) -> QuotaList {
        let round = {
            let mut parents = lock(&self.parents);
            match parents.get_mut(&parent) {
                // A list is under way: wait for the next.
                Some(p) => p.next.get_or_insert_with(Arc::default).clone(),
                None => {
                    parents.insert(parent, Parent::default());
                    let round = Arc::new(Round::default());
                    lock(&round.state).open = true;
                    round
                }
            }
        };
        {
            let mut state = lock(&round.state);
            loop {
                if let Some(answer) = &state.answer {
                    return answer.clone();
                }
                if state.open && !state.led {
                    state.led = true;
                    break;
                }
                state = round.changed.wait(state).unwrap_or_else(|e| e.into_inner());
            }
        }
        let lead = Lead {
            lists: self,
            parent,
            round,
        };
        let answer = (Instant::now(), fetch());
        lead.answer(answer.clone());
        answer
    }
}

/// The call that sends a round's list: it answers the round (an Internal
/// error should the list panic), then opens the next round, if any call
/// waits for one, or forgets the parent.
struct Lead<'a> {
    lists: &'a QuotaLists,
    parent: VolumeId,
    round: Arc<Round>,
}

impl Lead<'_> {
    fn answer(&self, answer: QuotaList) {
        let mut state = lock(&self.round.state);
        state.answer.get_or_insert(answer);
        self.round.changed.notify_all();
    }
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        self.answer((
            Instant::now(),
            Err(Error::Internal(format!(
                "the quota list of {} failed",
                self.parent
            ))),
        ));
        let mut parents = lock(&self.lists.parents);
        let next = parents.get_mut(&self.parent).and_then(|p| p.next.take());
        match next {
            Some(next) => {
                lock(&next.state).open = true;
                next.changed.notify_all();
            }
            None => {
                parents.remove(&self.parent);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    const PARENT: VolumeId = VolumeId {
        space: 1,
        filesystem: 2,
    };

    fn wait_until(cond: impl Fn() -> bool) {
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn calls_waiting_together_share_one_list_never_an_earlier_one() {
        let lists = Arc::new(QuotaLists::default());
        let sent = Arc::new(AtomicUsize::new(0));
        // The first list is held until every other call has arrived.
        let (arrived, release) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
        let first = {
            let (lists, sent) = (lists.clone(), sent.clone());
            let (arrived, release) = (arrived.clone(), release.clone());
            std::thread::spawn(move || {
                lists.list(PARENT, || {
                    sent.fetch_add(1, Ordering::SeqCst);
                    arrived.wait();
                    release.wait();
                    Ok(Vec::new())
                })
            })
        };
        arrived.wait();
        let waiting: Vec<_> = (0..20)
            .map(|_| {
                let (lists, sent) = (lists.clone(), sent.clone());
                std::thread::spawn(move || {
                    lists.list(PARENT, || {
                        let n = sent.fetch_add(1, Ordering::SeqCst);
                        Err(Error::Unavailable(format!("list {n}")))
                    })
                })
            })
            .collect();
        // Every later call is queued for the next round before the first
        // list answers.
        wait_until(|| {
            lock(&lists.parents)[&PARENT]
                .next
                .as_ref()
                .is_some_and(|r| Arc::strong_count(r) == 21)
        });
        release.wait();
        assert!(first.join().unwrap().1.unwrap().is_empty());
        for w in waiting {
            // The one list after the first, shared: none saw the first.
            assert_eq!(
                w.join().unwrap().1.unwrap_err(),
                Error::Unavailable("list 1".into())
            );
        }
        assert_eq!(sent.load(Ordering::SeqCst), 2);
        assert!(lock(&lists.parents).is_empty(), "nothing left behind");
    }

    #[test]
    fn a_list_that_panics_answers_its_round_and_opens_the_next() {
        let lists = QuotaLists::default();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            lists.list(PARENT, || panic!("the client panicked"))
        }));
        assert!(panicked.is_err());
        assert!(lock(&lists.parents).is_empty());
        assert!(lists.list(PARENT, || Ok(Vec::new())).1.is_ok());
    }
}
