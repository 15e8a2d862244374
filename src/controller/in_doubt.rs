//! Writes whose outcome is unknown. A request that timed out or failed with
//! a 5xx may still be applied by the backend after the driver gave up on it.
//! - A create: the API has no idempotency key, so a retry that finds nothing
//!   by label and POSTs again could make a second object beside the late
//!   first one. For a while after such a POST, a retry that finds nothing
//!   answers Unavailable instead of POSTing; once the object shows up it is
//!   adopted, and once the window has passed a POST is safe again.
//!   Duplicates a restart lets through are swept by label (see `provision`).
//! - An access-policy PUT: a full replace with no version, so a late one
//!   would undo whatever was written after it (a node unpublished in the
//!   meantime would be allowed again). Policy changes wait out its window
//!   (see `publish`).
//!
//! The window is three request timeouts: the longest a request the client
//! gave up on can plausibly still be in the backend's hands. It lives in
//! this process only.

use crate::Error;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct InDoubt {
    window: Duration,
    until: Mutex<HashMap<String, Instant>>,
}

impl InDoubt {
    pub fn new(request_timeout: Duration) -> InDoubt {
        InDoubt {
            window: request_timeout * 3,
            until: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A write to `key` failed in a way that may hide its success.
    pub fn record(&self, key: &str) {
        self.lock()
            .insert(key.to_string(), Instant::now() + self.window);
    }

    /// The object of `key` was found: nothing is in doubt any more.
    pub fn clear(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Unavailable while an earlier write to `key` (`what` it did, e.g.
    /// "create NFS filesystem \"x\"") may still be applied.
    pub fn check(&self, key: &str, what: &str) -> Result<(), Error> {
        let mut until = self.lock();
        match until.get(key) {
            Some(t) if *t > Instant::now() => Err(Error::Unavailable(format!(
                "an earlier request to {what} timed out or failed and may still be applied by the backend; retry shortly"
            ))),
            Some(_) => {
                until.remove(key);
                Ok(())
            }
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_doubtful_create_holds_retries_back_until_found_or_expired() {
        let doubt = InDoubt::new(Duration::from_millis(5));
        assert!(doubt.check("fs 7/a", "a").is_ok());
        doubt.record("fs 7/a");
        assert!(matches!(
            doubt.check("fs 7/a", "a"),
            Err(Error::Unavailable(_))
        ));
        assert!(doubt.check("fs 7/b", "b").is_ok(), "other keys are free");
        doubt.clear("fs 7/a");
        assert!(doubt.check("fs 7/a", "a").is_ok());
        doubt.record("fs 7/a");
        std::thread::sleep(Duration::from_millis(20));
        assert!(doubt.check("fs 7/a", "a").is_ok(), "the window passed");
    }
}
