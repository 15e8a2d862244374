//! Keeps the client inside the token's rate limits. Linode limits each token
//! per request class (paginated GETs far below the rest) and reports the
//! budget in `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
//! `X-RateLimit-Reset`, answering 429 with `Retry-After` past it. The pacer
//! reads those headers from every answer and holds the next request of the
//! class back: until `Retry-After` has passed after a 429 (for every thread,
//! so one throttle slows every caller, the poller included), and, once the
//! remaining budget runs low, spaced so that it lasts until the window
//! resets instead of running out. Within that spread, waiting work (the
//! poller's reads of objects already asked for) goes before new work: its
//! turn is not queued behind the spaced turns of new requests, so a create
//! already POSTed finishes before the POST of a new one is let through. It
//! only sleeps the calling thread; it never sends anything itself.

use crate::mutex::lock;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The assumed window when an answer names no reset time: Linode's limits
/// are per minute.
const WINDOW: Duration = Duration::from_secs(60);
/// A 429 without `Retry-After` holds the class back this long.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(3);

/// Linode's request classes, limited separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestClass {
    /// GETs of a collection (paginated): the scarce class.
    List,
    Other,
}

impl RequestClass {
    /// The class as the metrics name it.
    pub fn label(self) -> &'static str {
        match self {
            RequestClass::List => "list",
            RequestClass::Other => "other",
        }
    }
}

/// Whose turn a request is when the budget runs low.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Finishes something already under way (a poll of a POSTed object):
    /// taken at once while any budget is left. The poller bounds how many
    /// of these it sends, so they cannot crowd new work out.
    Waiting,
    /// Starts something: spaced over the rest of the window.
    New,
}

/// The budget of one class as last seen, for operators.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateLimitState {
    pub limit: Option<u64>,
    pub remaining: Option<u64>,
    /// 429 answers seen so far.
    pub throttled: u64,
}

/// What one answer said about the budget. Any header value is taken: one
/// that is not a number of seconds or requests is as if absent.
#[derive(Debug, Clone, Copy, Default)]
pub struct Observed {
    pub status: u16,
    pub limit: Option<u64>,
    pub remaining: Option<u64>,
    /// `X-RateLimit-Reset`: seconds since the epoch.
    pub reset_epoch: Option<u64>,
    /// `Retry-After`: seconds.
    pub retry_after: Option<u64>,
}

impl Observed {
    /// The budget headers of an answer with `status`; `header` reads one.
    pub fn from_headers(status: u16, header: impl Fn(&str) -> Option<String>) -> Observed {
        let number = |name: &str| header(name).and_then(|v| v.trim().parse::<u64>().ok());
        Observed {
            status,
            limit: number("X-RateLimit-Limit"),
            remaining: number("X-RateLimit-Remaining"),
            reset_epoch: number("X-RateLimit-Reset"),
            retry_after: number("Retry-After"),
        }
    }
}

#[derive(Debug, Default)]
struct Budget {
    seen: RateLimitState,
    reset: Option<Instant>,
    blocked_until: Option<Instant>,
    next_slot: Option<Instant>,
}

#[derive(Debug)]
pub struct Pacer {
    budgets: Mutex<[Budget; 2]>,
    retry_after_cap: Duration,
}

fn index(class: RequestClass) -> usize {
    match class {
        RequestClass::List => 0,
        RequestClass::Other => 1,
    }
}

impl Pacer {
    /// `retry_after_cap` bounds how long a server's `Retry-After` is honoured.
    pub fn new(retry_after_cap: Duration) -> Pacer {
        Pacer {
            budgets: Mutex::new([Budget::default(), Budget::default()]),
            retry_after_cap,
        }
    }

    /// When a request of `class` asked for at `now` may be sent; the turn
    /// is taken (counted as sent).
    pub(crate) fn reserve(&self, class: RequestClass, work: Work, now: Instant) -> Instant {
        lock(&self.budgets)[index(class)].turn(work, now)
    }

    /// Blocks until a request of `class` may be sent, and counts it as sent.
    pub fn wait_turn(&self, class: RequestClass, work: Work) {
        let now = Instant::now();
        let at = self.reserve(class, work, now);
        if at > now {
            let wait = at - now;
            log::debug!("Linode rate limit: holding a {class:?} request for {wait:?}");
            std::thread::sleep(wait);
        }
    }

    /// Takes in what an answer to a request of `class` said.
    pub fn observe(&self, class: RequestClass, seen: &Observed) {
        let now = Instant::now();
        let mut budgets = lock(&self.budgets);
        let budget = &mut budgets[index(class)];
        if seen.limit.is_some() {
            budget.seen.limit = seen.limit;
        }
        if seen.remaining.is_some() {
            budget.seen.remaining = seen.remaining;
        }
        if let Some(epoch) = seen.reset_epoch {
            let now_epoch = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            // Linode's windows are a minute long; a reset further off than
            // any hold the pacer honours is a broken header, not a plan.
            let until = Duration::from_secs(epoch.saturating_sub(now_epoch))
                .min(self.retry_after_cap.max(WINDOW));
            budget.reset = now.checked_add(until);
        }
        if seen.status == 429 {
            budget.seen.throttled += 1;
            let hold = seen
                .retry_after
                .map_or(DEFAULT_RETRY_AFTER, Duration::from_secs)
                .min(self.retry_after_cap);
            let until = now.checked_add(hold).unwrap_or(now);
            budget.blocked_until = Some(budget.blocked_until.map_or(until, |b| b.max(until)));
        }
    }

    /// The budget of `class` as last seen.
    pub fn state(&self, class: RequestClass) -> RateLimitState {
        lock(&self.budgets)[index(class)].seen
    }
}

impl Budget {
    /// When the next request may go, reserving that turn.
    fn turn(&mut self, work: Work, now: Instant) -> Instant {
        let mut at = self.blocked_until.filter(|b| *b > now).unwrap_or(now);
        let (Some(limit), Some(mut remaining)) = (self.seen.limit, self.seen.remaining) else {
            return at;
        };
        if remaining == 0 {
            if let Some(reset) = self.reset.filter(|r| *r > at) {
                // Spent: nothing goes before the window turns, and then the
                // whole budget is back.
                at = reset;
                self.reset = None;
                remaining = limit;
            }
        }
        // The last tenth of the budget is spread over the rest of the
        // window, so the class slows down before it is refused. Waiting
        // work takes what is left at once; the spacing of the rest adapts,
        // since it divides by what remains.
        if remaining <= (limit / 10).max(1) && work == Work::New {
            // Any count the server sends divides: at least 1, at most u32.
            let count = |n: u64| u32::try_from(n.max(1)).unwrap_or(u32::MAX);
            let spacing = match self.reset.filter(|r| *r > at) {
                Some(reset) => (reset - at) / count(remaining.saturating_add(1)),
                None => WINDOW / count(limit),
            };
            at = at.max(self.next_slot.unwrap_or(at));
            self.next_slot = at.checked_add(spacing);
        }
        self.seen.remaining = Some(remaining.saturating_sub(1));
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(limit: u64, remaining: u64) -> Budget {
        Budget {
            seen: RateLimitState {
                limit: Some(limit),
                remaining: Some(remaining),
                throttled: 0,
            },
            ..Budget::default()
        }
    }

    #[test]
    fn a_full_budget_sends_at_once() {
        let now = Instant::now();
        let mut b = budget(200, 150);
        for _ in 0..10 {
            assert_eq!(b.turn(Work::New, now), now);
        }
        assert_eq!(b.seen.remaining, Some(140));
    }

    #[test]
    fn the_last_tenth_is_spread_over_the_window() {
        let now = Instant::now();
        let mut b = budget(200, 20);
        let first = b.turn(Work::New, now);
        let second = b.turn(Work::New, now);
        let third = b.turn(Work::New, now);
        assert_eq!(first, now);
        // No reset time known: the sustained rate of 200 a minute.
        assert_eq!(second - first, Duration::from_millis(300));
        assert_eq!(third - second, Duration::from_millis(300));
    }

    #[test]
    fn a_known_reset_spreads_what_is_left_until_then() {
        let now = Instant::now();
        let mut b = budget(100, 3);
        b.reset = Some(now + Duration::from_secs(8));
        let first = b.turn(Work::New, now);
        let second = b.turn(Work::New, now);
        assert_eq!(first, now);
        assert_eq!(second - first, Duration::from_secs(2));
        let mut spent = budget(100, 0);
        spent.reset = Some(now + Duration::from_secs(5));
        assert_eq!(
            spent.turn(Work::New, now),
            now + Duration::from_secs(5),
            "nothing left: wait for the reset"
        );
        assert_eq!(spent.seen.remaining, Some(99), "a new window");
    }

    #[test]
    fn waiting_work_goes_before_new_work_once_the_budget_runs_low() {
        let now = Instant::now();
        let mut b = budget(40, 4);
        b.reset = Some(now + Duration::from_secs(2));
        let new = b.turn(Work::New, now);
        let next_new = b.turn(Work::New, now);
        assert!(next_new > now, "new work is spread: {:?}", next_new - now);
        // A poll of a create already posted does not queue behind it.
        assert_eq!(b.turn(Work::Waiting, now), now);
        assert_eq!(new, now);
        assert_eq!(b.seen.remaining, Some(1), "every turn counts");
        let last_new = b.turn(Work::New, now);
        assert!(last_new > next_new, "new work keeps its spacing");
        // Spent: waiting work too waits for the window to turn.
        let mut spent = budget(40, 0);
        spent.reset = Some(now + Duration::from_secs(1));
        assert_eq!(spent.turn(Work::Waiting, now), now + Duration::from_secs(1));
    }

    #[test]
    fn a_429_holds_every_request_of_the_class_back() {
        let pacer = Pacer::new(Duration::from_secs(30));
        pacer.observe(
            RequestClass::List,
            &Observed {
                status: 429,
                retry_after: Some(7),
                ..Observed::default()
            },
        );
        let now = Instant::now();
        let at = pacer.reserve(RequestClass::List, Work::New, now);
        assert!(at >= now + Duration::from_secs(6), "{:?}", at - now);
        assert_eq!(pacer.reserve(RequestClass::Other, Work::New, now), now);
        assert_eq!(pacer.state(RequestClass::List).throttled, 1);
    }

    #[test]
    fn retry_after_is_capped() {
        let pacer = Pacer::new(Duration::from_secs(2));
        pacer.observe(
            RequestClass::Other,
            &Observed {
                status: 429,
                retry_after: Some(3600),
                ..Observed::default()
            },
        );
        let now = Instant::now();
        let at = pacer.reserve(RequestClass::Other, Work::New, now);
        assert!(at <= now + Duration::from_secs(2));
    }

    #[test]
    fn headers_update_what_is_reported() {
        let pacer = Pacer::new(Duration::from_secs(30));
        pacer.observe(
            RequestClass::List,
            &Observed {
                status: 200,
                limit: Some(200),
                remaining: Some(42),
                ..Observed::default()
            },
        );
        assert_eq!(
            pacer.state(RequestClass::List),
            RateLimitState {
                limit: Some(200),
                remaining: Some(42),
                throttled: 0
            }
        );
    }

    #[test]
    fn any_header_value_is_taken_without_a_panic() {
        let values = [
            "0",
            "1",
            "4294967295",
            "4294967296",
            "18446744073709551615",
            "-1",
            "garbage",
            "",
            " 7 ",
        ];
        for limit in values {
            for remaining in values {
                for reset in values {
                    let pacer = Pacer::new(Duration::from_secs(30));
                    let seen = Observed::from_headers(429, |name| {
                        Some(
                            match name {
                                "X-RateLimit-Limit" => limit,
                                "X-RateLimit-Remaining" => remaining,
                                "X-RateLimit-Reset" => reset,
                                _ => "18446744073709551615",
                            }
                            .to_string(),
                        )
                    });
                    pacer.observe(RequestClass::List, &seen);
                    let now = Instant::now();
                    for _ in 0..3 {
                        let at = pacer.reserve(RequestClass::List, Work::New, now);
                        assert!(
                            at <= now + Duration::from_secs(600),
                            "{limit} {remaining} {reset}"
                        );
                    }
                }
            }
        }
    }
}
