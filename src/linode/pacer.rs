//! Keeps the client inside the token's rate limits. Linode limits each token
//! per request class (paginated GETs far below the rest) and reports the
//! budget in `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
//! `X-RateLimit-Reset`, answering 429 with `Retry-After` past it. The
//! pacer reads those headers from every answer and holds the next request
//! of the class back:
//! until `Retry-After` has passed after a 429 (for every thread, so one
//! throttle slows every caller, the poller included), and, once the
//! remaining budget runs low, spaced so that it lasts until the window
//! resets instead of running out. It counts what is left as the lowest
//! remaining the window's answers named less the turns whose answers are
//! still out, takes an answer of a window gone by as out of date, and gives
//! the whole budget back the moment its estimate of the reset passes
//! (estimated to the nanosecond, a window's length on when no answer has
//! named it yet), so that neither a late answer nor a burst of callers
//! overspends it. Within that spread, waiting work (the poller's reads of
//! objects already asked for) goes before new work: its turn is not queued
//! behind the spaced turns of new requests, so a create already POSTed
//! finishes before the POST of a new one is let through. It only sleeps the
//! calling thread, which asks again when it wakes; it never sends anything
//! itself.

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
    /// As the last answer said, for operators.
    seen: RateLimitState,
    /// The lowest `X-RateLimit-Remaining` of the current window: what was
    /// left when the server processed the latest request it has answered.
    low: Option<u64>,
    /// Turns handed out whose answer has not come back. Each may still be
    /// counted against the window, so what is left is `low - outstanding`
    /// at least, and exactly that once every answer is in.
    outstanding: u64,
    /// `X-RateLimit-Reset` of the current window.
    window: Option<u64>,
    /// When that window turns, estimated.
    reset: Option<Instant>,
    /// The estimated reset passed and the budget came back before any answer
    /// of the new window did: answers naming `window` are of the old one.
    presumed: bool,
    /// A window's length, learnt from two successive resets: the reset of a
    /// presumed window until one of its answers names it.
    length: Option<Duration>,
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

/// How soon a caller held for lack of news looks again: the answers that
/// name a new window's reset are usually a round trip away.
const RECHECK: Duration = Duration::from_millis(100);

impl Pacer {
    /// `retry_after_cap` bounds how long a server's `Retry-After` is honoured.
    pub fn new(retry_after_cap: Duration) -> Pacer {
        Pacer {
            budgets: Mutex::new([Budget::default(), Budget::default()]),
            retry_after_cap,
        }
    }

    /// Takes a turn of `class` at `now` (counted as sent), or says when to
    /// ask again. Nothing is reserved for later: whoever asks once the time
    /// comes decides on what the answers have said by then.
    pub(crate) fn reserve(
        &self,
        class: RequestClass,
        work: Work,
        now: Instant,
    ) -> Result<(), Instant> {
        lock(&self.budgets)[index(class)].turn(work, now)
    }

    /// Blocks until a request of `class` may be sent, and counts it as sent.
    pub fn wait_turn(&self, class: RequestClass, work: Work) {
        let mut held = false;
        loop {
            let now = Instant::now();
            let Err(at) = self.reserve(class, work, now) else {
                return;
            };
            if !held {
                log::debug!(
                    "Linode rate limit: holding a {class:?} request for {:?}",
                    at - now
                );
                held = true;
            }
            std::thread::sleep(at.saturating_duration_since(now));
        }
    }

    /// Takes in what the answer to a request of `class` said, or `None`
    /// when the request got none (a transport error).
    pub fn observe(&self, class: RequestClass, seen: Option<&Observed>) {
        let now_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let cap = self.retry_after_cap;
        lock(&self.budgets)[index(class)].take(seen, Instant::now(), now_epoch, cap);
    }

    /// The budget of `class` as last seen.
    pub fn state(&self, class: RequestClass) -> RateLimitState {
        lock(&self.budgets)[index(class)].seen
    }
}

/// Any count the server sends divides: at least 1, at most u32.
fn count(n: u64) -> u32 {
    u32::try_from(n.max(1)).unwrap_or(u32::MAX)
}

impl Budget {
    /// Takes in one answer (or its absence), received at `now`
    /// (`now_epoch` on the wall clock the reset header is written in).
    fn take(&mut self, seen: Option<&Observed>, now: Instant, now_epoch: Duration, cap: Duration) {
        self.outstanding = self.outstanding.saturating_sub(1);
        let Some(seen) = seen else {
            return;
        };
        if seen.limit.is_some() {
            self.seen.limit = seen.limit;
        }
        if seen.remaining.is_some() {
            self.seen.remaining = seen.remaining;
        }
        let throttled = seen.status == 429;
        // An answer sent before the window turned arrives after it: what it
        // says of the budget is out of date. A 429 never is.
        let stale = !throttled
            && matches!((seen.reset_epoch, self.window),
                (Some(e), Some(w)) if e < w || (e == w && self.presumed));
        if !stale {
            let newer = match (seen.reset_epoch, self.window) {
                (Some(e), Some(w)) => e > w,
                _ => true,
            };
            if let Some(reported) = seen.remaining {
                self.low = Some(match self.low {
                    Some(low) if !newer => low.min(reported),
                    _ => reported,
                });
            }
            if let Some(epoch) = seen.reset_epoch {
                if let Some(previous) = self.window.filter(|w| epoch > *w) {
                    let length = Duration::from_secs(epoch - previous);
                    if length <= WINDOW {
                        self.length = Some(length);
                    }
                }
                // To the nanosecond: the header is the reset rounded up to
                // a whole second, and dropping this side's fraction as well
                // would hold the class up to a second longer still. A reset
                // further off than any hold the pacer honours is a broken
                // header, not a plan.
                let until = Duration::from_secs(epoch)
                    .saturating_sub(now_epoch)
                    .min(cap.max(WINDOW));
                self.window = Some(epoch);
                self.reset = now.checked_add(until);
                self.presumed = false;
            }
        }
        if throttled {
            self.seen.throttled += 1;
            self.low = Some(0);
            let hold = seen
                .retry_after
                .map_or(DEFAULT_RETRY_AFTER, Duration::from_secs)
                .min(cap);
            let until = now.checked_add(hold).unwrap_or(now);
            self.blocked_until = Some(self.blocked_until.map_or(until, |b| b.max(until)));
        }
    }

    /// A turn at `now`, or when to ask again.
    fn turn(&mut self, work: Work, now: Instant) -> Result<(), Instant> {
        if let Some(blocked) = self.blocked_until.filter(|b| *b > now) {
            return Err(blocked);
        }
        let (Some(limit), Some(mut low)) = (self.seen.limit, self.low) else {
            self.outstanding += 1;
            return Ok(());
        };
        if let Some(reset) = self.reset.filter(|r| *r <= now) {
            // The window has turned: the whole budget is back, and the next
            // reset is a window away until an answer names it.
            self.reset = self.length.and_then(|l| reset.checked_add(l));
            self.presumed = true;
            self.next_slot = None;
            low = limit;
            self.low = Some(limit);
        }
        let remaining = low.saturating_sub(self.outstanding);
        if remaining == 0 {
            // With answers still out, some of what they hold may turn out
            // to be left: look again soon.
            let soon = now + RECHECK;
            match self.reset {
                Some(reset) if low == 0 => return Err(reset),
                Some(reset) => return Err(reset.min(soon)),
                None if low > 0 => return Err(soon),
                None => {}
            }
            // Spent, and the server names no reset: the sustained rate.
            if let Some(slot) = self.next_slot.filter(|s| *s > now) {
                return Err(slot);
            }
            self.next_slot = now.checked_add(WINDOW / count(limit));
            self.outstanding += 1;
            return Ok(());
        }
        // The last tenth of the budget is spread over the rest of the
        // window, so the class slows down before it is refused. Waiting
        // work takes what is left at once; the spacing of the rest adapts,
        // since it divides by what remains.
        if remaining <= (limit / 10).max(1) && work == Work::New {
            if let Some(slot) = self.next_slot.filter(|s| *s > now) {
                return Err(slot);
            }
            let spacing = match self.reset {
                Some(reset) => (reset - now) / count(remaining.saturating_add(1)),
                None => WINDOW / count(limit),
            };
            self.next_slot = now.checked_add(spacing);
        }
        self.outstanding += 1;
        Ok(())
    }

    /// What is left of the window by this side's count.
    #[cfg(test)]
    fn left(&self) -> Option<u64> {
        self.low.map(|low| low.saturating_sub(self.outstanding))
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
            low: Some(remaining),
            ..Budget::default()
        }
    }

    /// A budget whose window is known to end at `reset`.
    fn budget_until(limit: u64, remaining: u64, reset: Instant) -> Budget {
        Budget {
            reset: Some(reset),
            ..budget(limit, remaining)
        }
    }

    const S: Duration = Duration::from_secs(1);
    const CAP: Duration = Duration::from_secs(30);

    /// An answer naming `remaining` of `limit` and the reset `epoch`.
    fn answer(status: u16, limit: u64, remaining: u64, epoch: u64) -> Observed {
        Observed {
            status,
            limit: Some(limit),
            remaining: Some(remaining),
            reset_epoch: Some(epoch),
            retry_after: (status == 429).then_some(1),
        }
    }

    #[test]
    fn a_full_budget_sends_at_once() {
        let now = Instant::now();
        let mut b = budget(200, 150);
        for _ in 0..10 {
            assert_eq!(b.turn(Work::New, now), Ok(()));
        }
        assert_eq!(b.left(), Some(140));
    }

    #[test]
    fn the_last_tenth_is_spread_over_the_window() {
        let now = Instant::now();
        let mut b = budget(200, 20);
        assert_eq!(b.turn(Work::New, now), Ok(()));
        // No reset time known: the sustained rate of 200 a minute.
        let second = now + Duration::from_millis(300);
        assert_eq!(b.turn(Work::New, now), Err(second));
        assert_eq!(b.turn(Work::New, second), Ok(()));
        assert_eq!(
            b.turn(Work::New, second),
            Err(second + Duration::from_millis(300))
        );
        assert_eq!(b.left(), Some(18), "a refused turn is not counted");
    }

    #[test]
    fn a_known_reset_spreads_what_is_left_until_then() {
        let now = Instant::now();
        let mut b = budget_until(100, 3, now + 8 * S);
        assert_eq!(b.turn(Work::New, now), Ok(()));
        assert_eq!(b.turn(Work::New, now), Err(now + 2 * S));
        let mut spent = budget_until(100, 0, now + 5 * S);
        assert_eq!(
            spent.turn(Work::New, now),
            Err(now + 5 * S),
            "nothing left: wait for the reset"
        );
        assert_eq!(spent.turn(Work::New, now + 5 * S), Ok(()));
        assert_eq!(spent.left(), Some(99), "a new window");
    }

    #[test]
    fn waiting_work_goes_before_new_work_once_the_budget_runs_low() {
        let now = Instant::now();
        let mut b = budget_until(40, 4, now + 2 * S);
        assert_eq!(b.turn(Work::New, now), Ok(()));
        let next_new = b.turn(Work::New, now).unwrap_err();
        assert!(next_new > now, "new work is spread");
        // A poll of a create already posted does not queue behind it.
        assert_eq!(b.turn(Work::Waiting, now), Ok(()));
        assert_eq!(b.turn(Work::Waiting, now), Ok(()));
        assert_eq!(b.left(), Some(1), "every turn counts");
        assert_eq!(
            b.turn(Work::New, now),
            Err(next_new),
            "new work keeps its spacing"
        );
        // Spent: waiting work too waits for the window to turn.
        let mut spent = budget_until(40, 0, now + S);
        assert_eq!(spent.turn(Work::Waiting, now), Err(now + S));
    }

    /// The server counts what it has processed, this side what it has sent:
    /// answers still out are counted as spent until they come back.
    #[test]
    fn turns_whose_answers_are_out_count_as_spent() {
        let now = Instant::now();
        let epoch = Duration::from_secs(1_000);
        let mut b = Budget::default();
        for _ in 0..8 {
            assert_eq!(b.turn(Work::Waiting, now), Ok(()), "nothing known yet");
        }
        b.take(Some(&answer(200, 10, 9, 1_001)), now, epoch, CAP);
        assert_eq!(b.left(), Some(2), "seven still out");
        assert_eq!(b.turn(Work::Waiting, now), Ok(()));
        assert_eq!(b.turn(Work::Waiting, now), Ok(()));
        assert_eq!(b.turn(Work::Waiting, now), Err(now + RECHECK));
        // The rest come back, a transport error among them: exactly none left.
        for remaining in [4, 8, 7, 6, 5, 3, 1] {
            b.take(Some(&answer(200, 10, remaining, 1_001)), now, epoch, CAP);
        }
        b.take(None, now, epoch, CAP);
        b.take(Some(&answer(200, 10, 2, 1_001)), now, epoch, CAP);
        assert_eq!((b.outstanding, b.left()), (0, Some(1)));
        assert_eq!(b.turn(Work::Waiting, now), Ok(()));
        assert_eq!(b.turn(Work::Waiting, now), Err(now + RECHECK));
        b.take(Some(&answer(200, 10, 0, 1_001)), now, epoch, CAP);
        assert_eq!(b.turn(Work::Waiting, now), Err(now + S), "spent: the reset");
    }

    /// Answers of a window that has turned arrive after it: they neither
    /// spend the new window's budget nor bring back the old one's.
    #[test]
    fn answers_of_a_window_gone_by_change_nothing() {
        let now = Instant::now();
        let epoch = Duration::from_secs(1_000);
        let mut b = Budget::default();
        b.take(Some(&answer(200, 40, 39, 1_002)), now, epoch, CAP);
        assert_eq!(b.reset, Some(now + 2 * S), "the reset to the nanosecond");
        for _ in 0..39 {
            assert_eq!(b.turn(Work::Waiting, now), Ok(()));
        }
        assert_eq!(b.turn(Work::Waiting, now), Err(now + RECHECK));
        for _ in 0..39 {
            b.take(Some(&answer(200, 40, 20, 1_002)), now, epoch, CAP);
        }
        assert_eq!(b.left(), Some(20), "the lowest count of the window");
        // The window turns: the whole budget is back at once.
        let turned = now + 2 * S;
        assert_eq!(b.turn(Work::Waiting, turned), Ok(()));
        assert_eq!(b.left(), Some(39));
        // An answer of the old window, still arriving, is out of date.
        b.take(Some(&answer(200, 40, 0, 1_002)), turned, epoch + 2 * S, CAP);
        assert_eq!(b.left(), Some(40));
        // The new window's own answer is the truth.
        assert_eq!(b.turn(Work::Waiting, turned), Ok(()));
        b.take(
            Some(&answer(200, 40, 38, 1_004)),
            turned,
            epoch + 2 * S,
            CAP,
        );
        assert_eq!(b.left(), Some(38));
        assert_eq!(b.length, Some(2 * S), "learnt from two resets");
        assert_eq!(b.reset, Some(turned + 2 * S));
    }

    /// A window spent before any of its answers came back waits for the
    /// reset a window's length on; without one, it looks again shortly.
    #[test]
    fn a_window_spent_before_its_answers_come_waits_for_the_next_reset() {
        let now = Instant::now();
        let epoch = Duration::from_secs(1_000);
        let mut b = Budget::default();
        b.take(Some(&answer(200, 2, 0, 1_001)), now, epoch, CAP);
        let turned = now + S;
        assert_eq!(b.turn(Work::Waiting, turned), Ok(()));
        assert_eq!(b.turn(Work::Waiting, turned), Ok(()));
        // No length learnt yet, no reset known: soon again.
        assert_eq!(b.turn(Work::Waiting, turned), Err(turned + RECHECK));
        b.take(Some(&answer(200, 2, 1, 1_003)), turned, epoch + S, CAP);
        b.take(Some(&answer(200, 2, 0, 1_003)), turned, epoch + S, CAP);
        assert_eq!(b.turn(Work::Waiting, turned), Err(turned + 2 * S));
        // Now the length is known: a presumed window's reset is too.
        let next = turned + 2 * S;
        assert_eq!(b.turn(Work::Waiting, next), Ok(()));
        assert_eq!(b.turn(Work::Waiting, next), Ok(()));
        assert_eq!(b.turn(Work::Waiting, next), Err(next + RECHECK));
        b.take(Some(&answer(200, 2, 0, 1_005)), next, epoch + 3 * S, CAP);
        b.take(Some(&answer(200, 2, 1, 1_005)), next, epoch + 3 * S, CAP);
        assert_eq!(b.turn(Work::Waiting, next), Err(next + 2 * S));
    }

    #[test]
    fn a_429_spends_the_class_whatever_was_counted() {
        let now = Instant::now();
        let epoch = Duration::from_secs(1_000);
        let mut b = budget(40, 30);
        b.take(Some(&answer(429, 40, 0, 1_001)), now, epoch, CAP);
        assert_eq!(b.seen.throttled, 1);
        assert_eq!(b.turn(Work::Waiting, now), Err(now + S));
        assert_eq!(b.turn(Work::Waiting, now + S), Ok(()), "then a new window");
    }

    /// A pacer whose holds are capped at `cap`, after `class` was answered
    /// 429 with `Retry-After: seconds`; the time asked, and until when a
    /// new request of `class` is then held back.
    fn held_after_429(
        cap: Duration,
        class: RequestClass,
        seconds: u64,
    ) -> (Pacer, Instant, Instant) {
        let pacer = Pacer::new(cap);
        pacer.observe(
            class,
            Some(&Observed {
                status: 429,
                retry_after: Some(seconds),
                ..Observed::default()
            }),
        );
        let now = Instant::now();
        let until = pacer.reserve(class, Work::New, now).unwrap_err();
        (pacer, now, until)
    }

    #[test]
    fn a_429_holds_every_request_of_the_class_back() {
        let (pacer, now, at) = held_after_429(Duration::from_secs(30), RequestClass::List, 7);
        assert!(at >= now + Duration::from_secs(6), "{:?}", at - now);
        assert_eq!(pacer.reserve(RequestClass::Other, Work::New, now), Ok(()));
        assert_eq!(pacer.state(RequestClass::List).throttled, 1);
    }

    #[test]
    fn retry_after_is_capped() {
        let (_, now, at) = held_after_429(Duration::from_secs(2), RequestClass::Other, 3600);
        assert!(at <= now + Duration::from_secs(2));
    }

    #[test]
    fn headers_update_what_is_reported() {
        let pacer = Pacer::new(Duration::from_secs(30));
        pacer.observe(
            RequestClass::List,
            Some(&Observed {
                status: 200,
                limit: Some(200),
                remaining: Some(42),
                ..Observed::default()
            }),
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
                    pacer.observe(RequestClass::List, Some(&seen));
                    let now = Instant::now();
                    for _ in 0..3 {
                        let at = pacer
                            .reserve(RequestClass::List, Work::New, now)
                            .map_or_else(|at| at, |()| now);
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
