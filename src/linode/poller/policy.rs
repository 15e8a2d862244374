//! The bounds of every wait: how long it may last and how often its object
//! is read meanwhile. Plain values, so every part of the poller can take
//! them; nothing here reads the API or the poller's state.

use crate::backoff::Backoff;
use std::time::Duration;

/// Bounds of every wait. `timeout` is `LINODE_WAIT_TIMEOUT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    pub timeout: Duration,
    pub initial_delay: Duration,
    pub max_delay: Duration,
}

impl WaitPolicy {
    /// `timeout` with the production backoff: 250 ms growing ×1.5 to 4 s.
    /// ×1.5 rather than ×2: overshooting a readiness by a whole doubled
    /// interval is the dominant cost of a fresh CreateVolume.
    pub fn new(timeout: Duration) -> WaitPolicy {
        WaitPolicy {
            timeout,
            initial_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(4),
        }
    }

    /// ×1.5 per poll from `initial_delay` up to `max_delay`.
    pub(super) fn backoff(&self) -> Backoff {
        Backoff::growing(self.initial_delay, self.max_delay, 3, 2)
    }
}

impl Default for WaitPolicy {
    /// The behaviour.md default of 5 minutes.
    fn default() -> WaitPolicy {
        WaitPolicy::new(Duration::from_secs(300))
    }
}
