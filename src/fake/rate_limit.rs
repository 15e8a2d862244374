//! The fake Linode API's rate limits, off unless a test turns them on: per
//! request class (GETs of a collection, the paginated class, and the rest),
//! a budget per fixed window, reported in `X-RateLimit-Limit`,
//! `X-RateLimit-Remaining` and `X-RateLimit-Reset` on every answer, and a
//! 429 with `Retry-After` once spent, as the real API does.

use std::time::Duration;

/// Budgets per window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Paginated GETs (collections) per window.
    pub list: u64,
    /// Every other request per window.
    pub other: u64,
    pub window: Duration,
}

pub(crate) struct Limiter {
    limit: RateLimit,
    window_start_ms: u64,
    used: [u64; 2],
}

/// What the limiter decided for one request.
pub(crate) struct Verdict {
    pub headers: Vec<(String, String)>,
    /// `Some(seconds)` for a refusal: answer 429 with this `Retry-After`.
    pub retry_after: Option<u64>,
}

impl Limiter {
    pub(crate) fn new(limit: RateLimit, now_ms: u64) -> Limiter {
        Limiter {
            limit,
            window_start_ms: now_ms,
            used: [0, 0],
        }
    }

    /// Counts one request of the paginated class (`list`) or the other.
    pub(crate) fn admit(&mut self, list: bool, now_ms: u64) -> Verdict {
        let window_ms = self.limit.window.as_millis().max(1) as u64;
        if now_ms >= self.window_start_ms + window_ms {
            let windows = (now_ms - self.window_start_ms) / window_ms;
            self.window_start_ms += windows * window_ms;
            self.used = [0, 0];
        }
        let (i, limit) = if list {
            (0, self.limit.list)
        } else {
            (1, self.limit.other)
        };
        let reset_ms = self.window_start_ms + window_ms;
        let refused = self.used[i] >= limit;
        if !refused {
            self.used[i] += 1;
        }
        let headers = vec![
            ("X-RateLimit-Limit".to_string(), limit.to_string()),
            (
                "X-RateLimit-Remaining".to_string(),
                (limit - self.used[i].min(limit)).to_string(),
            ),
            (
                "X-RateLimit-Reset".to_string(),
                reset_ms.div_ceil(1000).to_string(),
            ),
        ];
        Verdict {
            headers,
            retry_after: refused.then(|| (reset_ms - now_ms).div_ceil(1000).max(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spent_class_is_refused_until_the_window_turns() {
        let limit = RateLimit {
            list: 2,
            other: 5,
            window: Duration::from_secs(10),
        };
        let mut l = Limiter::new(limit, 1_000_000);
        assert!(l.admit(true, 1_000_000).retry_after.is_none());
        let second = l.admit(true, 1_001_000);
        assert!(second.retry_after.is_none());
        assert!(second
            .headers
            .contains(&("X-RateLimit-Remaining".into(), "0".into())));
        assert_eq!(l.admit(true, 1_002_000).retry_after, Some(8));
        assert!(
            l.admit(false, 1_002_000).retry_after.is_none(),
            "classes are apart"
        );
        assert!(
            l.admit(true, 1_010_000).retry_after.is_none(),
            "a new window"
        );
    }
}
