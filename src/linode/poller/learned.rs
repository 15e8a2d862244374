//! How long recent waits of each kind were seen still pending, so a new
//! wait skips the early polls its kind's last waits all spent finding
//! their object unsettled, while the API reports a rate limit: there every
//! poll saved is a request saved. Without one, early polls cost nothing,
//! and each refreshes every wait of its group (a Space's filesystems), so
//! a burst's objects are seen active sooner between their own polls. The middle of the recent waits decides (the lower
//! one of an even count), so a few waits that began long after their
//! object did (a caller that found it being made) do not undo the
//! learning, and a kind that settles sooner is followed within a few
//! waits; the skip never reaches past the policy's longest pause, so no
//! wait is seen late by more than that, nor past a quarter of the wait's
//! timeout, so a short wait still polls before it gives up.
//! Plain values kept under the poller's lock; nothing here polls.

use super::policy::WaitPolicy;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// How many waits of a kind are remembered.
const REMEMBERED: usize = 8;

#[derive(Default)]
pub(super) struct Learned {
    /// Per kind, for each recent wait that ended active: how long after it
    /// began a poll last found it pending. A wait active at its first poll
    /// counts as pending at the plain schedule's poll before that one: it
    /// moves the first poll back by one step at most.
    pending_for: BTreeMap<&'static str, VecDeque<Duration>>,
}

impl Learned {
    /// A wait of `kind` ended active, last seen pending `pending_for` after
    /// it began.
    pub(super) fn settled(&mut self, kind: &'static str, pending_for: Duration) {
        let recent = self.pending_for.entry(kind).or_default();
        if recent.len() == REMEMBERED {
            recent.pop_front();
        }
        recent.push_back(pending_for);
    }

    /// A new wait of `kind`'s first poll: its pause then (the backoff goes
    /// on from there), how long after it begins, and the poll of the plain
    /// schedule before it (zero if none). It is the latest poll of the
    /// plain schedule that the middle recent wait was still pending at, and
    /// no later than the policy's longest pause or a quarter of its timeout;
    /// the plain schedule's first unless `paced` (the API reports a limit).
    pub(super) fn first_poll(
        &self,
        kind: &'static str,
        policy: &WaitPolicy,
        paced: bool,
    ) -> (Duration, Duration, Duration) {
        let skip_to = self
            .pending_for
            .get(kind)
            .filter(|_| paced)
            .and_then(|recent| {
                let mut sorted: Vec<Duration> = recent.iter().copied().collect();
                sorted.sort();
                sorted.get((sorted.len() - 1) / 2).copied()
            })
            .unwrap_or_default()
            .min(policy.max_delay)
            .min(policy.timeout / 4);
        let backoff = policy.backoff();
        let (mut pause, mut at, mut before) =
            (policy.initial_delay, policy.initial_delay, Duration::ZERO);
        loop {
            let next = backoff.after(pause);
            if at + next > skip_to || next == pause {
                return (pause, at, before);
            }
            before = at;
            pause = next;
            at += next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    fn policy() -> WaitPolicy {
        WaitPolicy::new(Duration::from_secs(300))
    }

    #[test]
    fn a_kind_never_seen_polls_on_the_plain_schedule() {
        let learned = Learned::default();
        assert_eq!(
            learned.first_poll("filesystem", &policy(), true),
            (ms(250), ms(250), Duration::ZERO)
        );
    }

    #[test]
    fn the_polls_every_recent_wait_found_pending_are_skipped() {
        let mut learned = Learned::default();
        // Plain schedule: 250, 625, 1187.5, 2031.25 ms, ...; seen pending
        // at 1187.5 ms, active at 2031.25 ms.
        learned.settled("access_policy", us(1_187_500));
        assert_eq!(
            learned.first_poll("access_policy", &policy(), true),
            (us(562_500), us(1_187_500), ms(625))
        );
        // Without a rate limit, the plain schedule.
        assert_eq!(
            learned.first_poll("access_policy", &policy(), false),
            (ms(250), ms(250), Duration::ZERO)
        );
        // Another kind is unaffected.
        assert_eq!(learned.first_poll("quota", &policy(), true).1, ms(250));
    }

    #[test]
    fn the_middle_of_the_recent_waits_decides() {
        let mut learned = Learned::default();
        for _ in 0..5 {
            learned.settled("filesystem", ms(1200));
        }
        assert_eq!(
            learned.first_poll("filesystem", &policy(), true).1,
            us(1_187_500)
        );
        // Waits that began late on their object are outvoted...
        learned.settled("filesystem", ms(300));
        learned.settled("filesystem", Duration::ZERO);
        assert_eq!(
            learned.first_poll("filesystem", &policy(), true).1,
            us(1_187_500)
        );
        // ...until they are as many as the others: the lower middle wins.
        for _ in 0..2 {
            learned.settled("filesystem", ms(300));
        }
        assert_eq!(learned.first_poll("filesystem", &policy(), true).1, ms(250));
    }

    #[test]
    fn slow_waits_skip_no_further_than_the_longest_pause() {
        let mut learned = Learned::default();
        for _ in 0..REMEMBERED {
            learned.settled("snapshot", Duration::from_secs(600));
        }
        let (pause, at, before) = learned.first_poll("snapshot", &policy(), true);
        assert!(at <= policy().max_delay, "{at:?}");
        assert_eq!(at, us(3_296_875));
        assert_eq!(before, us(2_031_250));
        assert!(pause < policy().max_delay);
    }

    #[test]
    fn only_the_most_recent_waits_count() {
        let mut learned = Learned::default();
        for _ in 0..REMEMBERED {
            learned.settled("quota", Duration::ZERO);
        }
        for _ in 0..REMEMBERED {
            learned.settled("quota", ms(700));
        }
        assert_eq!(learned.first_poll("quota", &policy(), true).1, ms(625));
    }

    #[test]
    fn a_short_timeout_bounds_the_skip() {
        let mut learned = Learned::default();
        learned.settled("access_policy", Duration::from_secs(2));
        let short = WaitPolicy::new(Duration::from_secs(1));
        assert_eq!(learned.first_poll("access_policy", &short, true).1, ms(250));
    }

    #[test]
    fn a_schedule_without_growth_skips_nothing() {
        let mut learned = Learned::default();
        learned.settled("quota", Duration::from_secs(2));
        let flat = WaitPolicy {
            timeout: Duration::from_secs(1),
            initial_delay: Duration::ZERO,
            max_delay: Duration::ZERO,
        };
        assert_eq!(
            learned.first_poll("quota", &flat, true),
            (Duration::ZERO, Duration::ZERO, Duration::ZERO)
        );
    }
}
