//! Growing pauses between attempts: the one backoff the driver uses for
//! Linode retries, the poller's watches and the re-created registration
//! socket. A pause grows by a ratio from a first value up to a cap. It only
//! computes durations; it never sleeps or keeps time.

use std::time::Duration;

/// A pause schedule: `first`, then each pause `num/den` times the one
/// before, never above `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub cap: Duration,
    num: u32,
    den: u32,
}

impl Backoff {
    /// Doubling from `first` up to `cap`.
    pub const fn doubling(first: Duration, cap: Duration) -> Backoff {
        Backoff {
            first,
            cap,
            num: 2,
            den: 1,
        }
    }

    /// Growing by `num/den` (more than 1) per step, from `first` up to `cap`.
    pub const fn growing(first: Duration, cap: Duration, num: u32, den: u32) -> Backoff {
        Backoff {
            first,
            cap,
            num,
            den,
        }
    }

    /// The pause after `pause`.
    pub fn after(&self, pause: Duration) -> Duration {
        (pause.saturating_mul(self.num) / self.den.max(1)).min(self.cap)
    }

    /// The pause before retry `n` (1-based): `first` for the first retry.
    pub fn nth(&self, n: u32) -> Duration {
        let mut pause = self.first.min(self.cap);
        for _ in 1..n {
            if pause >= self.cap {
                break;
            }
            pause = self.after(pause);
        }
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubling_grows_to_its_cap() {
        let b = Backoff::doubling(Duration::from_millis(250), Duration::from_secs(4));
        let got: Vec<_> = (1..=7).map(|n| b.nth(n).as_millis()).collect();
        assert_eq!(got, [250, 500, 1000, 2000, 4000, 4000, 4000]);
        assert_eq!(b.nth(u32::MAX), Duration::from_secs(4));
        assert_eq!(b.nth(0), Duration::from_millis(250));
    }

    #[test]
    fn a_ratio_grows_by_that_ratio() {
        let b = Backoff::growing(Duration::from_millis(250), Duration::from_secs(4), 3, 2);
        assert_eq!(
            b.after(Duration::from_millis(250)),
            Duration::from_millis(375)
        );
        assert_eq!(b.after(Duration::from_secs(3)), Duration::from_secs(4));
        assert_eq!(b.nth(3), Duration::from_micros(562_500));
    }

    #[test]
    fn huge_pauses_saturate_at_the_cap() {
        let b = Backoff::doubling(Duration::from_secs(1), Duration::MAX);
        assert_eq!(b.after(Duration::MAX), Duration::MAX);
    }
}
