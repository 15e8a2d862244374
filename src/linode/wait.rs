//! Waiting for an asynchronous Linode object to become `active`: poll a GET
//! with growing backoff until ready, a terminal status, or the deadline.
//! It knows nothing about HTTP; the caller passes the poll.

use super::types::{HasStatus, Readiness};
use std::time::{Duration, Instant};

/// Bounds of one wait. `timeout` is `LINODE_WAIT_TIMEOUT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    pub timeout: Duration,
    pub initial_delay: Duration,
    pub max_delay: Duration,
}

impl WaitPolicy {
    /// `timeout` with the production backoff: 250 ms growing ×1.5 to 4 s.
    pub fn new(timeout: Duration) -> WaitPolicy {
        WaitPolicy {
            timeout,
            initial_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(4),
        }
    }
}

impl Default for WaitPolicy {
    /// The behaviour.md default of 5 minutes.
    fn default() -> WaitPolicy {
        WaitPolicy::new(Duration::from_secs(300))
    }
}

/// Polls until `readiness` says ready and returns that last value.
///
/// A poll error ends the wait with that error (the client already retried
/// transient HTTP failures). A terminal status ends it with
/// FailedPrecondition naming `what`; running out of time with
/// DeadlineExceeded naming `what`.
pub fn wait_until<T>(
    what: &str,
    policy: &WaitPolicy,
    mut poll: impl FnMut() -> crate::Result<T>,
    readiness: impl Fn(&T) -> Readiness,
) -> crate::Result<T> {
    let started = Instant::now();
    let mut delay = policy.initial_delay;
    loop {
        let value = poll()?;
        match readiness(&value) {
            Readiness::Ready => return Ok(value),
            Readiness::Failed(status) => {
                return Err(crate::Error::FailedPrecondition(format!(
                    "{what} is in status {status:?} and will not become active"
                )))
            }
            Readiness::Pending => {}
        }
        let elapsed = started.elapsed();
        if elapsed >= policy.timeout {
            return Err(crate::Error::DeadlineExceeded(format!(
                "{what} did not become active within {:?}",
                policy.timeout
            )));
        }
        std::thread::sleep(delay.min(policy.timeout - elapsed));
        // ×1.5 rather than ×2: overshooting a readiness by a whole doubled
        // interval is the dominant cost of a fresh CreateVolume.
        delay = (delay * 3 / 2).min(policy.max_delay);
    }
}

/// [`wait_until`] for any object with a lifecycle status.
pub fn wait_until_active<T: HasStatus>(
    what: &str,
    policy: &WaitPolicy,
    poll: impl FnMut() -> crate::Result<T>,
) -> crate::Result<T> {
    wait_until(what, policy, poll, |v| v.status().readiness())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linode::types::Status;

    fn fast(timeout_ms: u64) -> WaitPolicy {
        WaitPolicy {
            timeout: Duration::from_millis(timeout_ms),
            initial_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(4),
        }
    }

    #[test]
    fn returns_the_first_ready_value() {
        let mut polls = 0;
        let got = wait_until(
            "filesystem 7/301",
            &fast(5_000),
            || {
                polls += 1;
                Ok(polls)
            },
            |n| {
                if *n >= 3 {
                    Readiness::Ready
                } else {
                    Readiness::Pending
                }
            },
        );
        assert_eq!(got, Ok(3));
    }

    #[test]
    fn terminal_status_fails_early_naming_the_object() {
        let err = wait_until(
            "snapshot 7/301/9001",
            &fast(60_000),
            || Ok(Status::Error),
            Status::readiness,
        )
        .unwrap_err();
        assert!(
            matches!(err, crate::Error::FailedPrecondition(_)),
            "{err:?}"
        );
        assert!(err.message().contains("snapshot 7/301/9001"), "{err}");
    }

    #[test]
    fn deadline_is_reported_naming_the_object() {
        let started = Instant::now();
        let err = wait_until(
            "filesystem 7/302",
            &fast(30),
            || Ok(Status::Creating),
            Status::readiness,
        )
        .unwrap_err();
        assert!(matches!(err, crate::Error::DeadlineExceeded(_)), "{err:?}");
        assert!(err.message().contains("filesystem 7/302"));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn poll_errors_end_the_wait() {
        let err = wait_until(
            "policy",
            &fast(60_000),
            || Err::<Status, _>(crate::Error::NotFound("[404] Not found".into())),
            Status::readiness,
        )
        .unwrap_err();
        assert!(err.is_not_found());
    }

    #[test]
    fn backoff_grows_up_to_the_cap() {
        let policy = WaitPolicy {
            timeout: Duration::from_millis(200),
            initial_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(40),
        };
        let mut stamps = Vec::new();
        let _ = wait_until(
            "x",
            &policy,
            || {
                stamps.push(Instant::now());
                Ok(())
            },
            |_| Readiness::Pending,
        );
        let gaps: Vec<_> = stamps.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps[0] >= Duration::from_millis(10));
        assert!(gaps[1] >= Duration::from_millis(15));
        assert!(gaps[2] >= Duration::from_millis(22));
        assert!(gaps[4] >= Duration::from_millis(40));
        // 200 ms at 10+15+22+33+40+40... ms: about eight polls, never a tight loop.
        assert!(stamps.len() <= 10, "{} polls", stamps.len());
    }
}
