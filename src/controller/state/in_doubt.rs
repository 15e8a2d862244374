//! Writes whose outcome is unknown. A request that timed out or failed with
//! a 5xx may still be applied by the backend after the driver gave up on it.
//! - A create: the API has no idempotency key, so a retry that finds nothing
//!   by label and POSTs again could make a second object beside the late
//!   first one. For a while after such a POST, a retry that finds nothing
//!   answers Unavailable instead of POSTing; once the object shows up it is
//!   adopted, and once the window has passed a POST is safe again.
//!   Duplicates a restart lets through are swept by label (see `kind::filesystem`).
//! - An access-policy PUT: a full replace with no version, so a late one
//!   would undo whatever was written after it (a node unpublished in the
//!   meantime would be allowed again). Policy changes wait out its window
//!   (see `publish`).
//!
//! The window is three request timeouts: the longest a request the client
//! gave up on can plausibly still be in the backend's hands. A process that
//! took the Lease over from one that stopped renewing holds every create
//! back for one window (`everything`): it cannot know what that one left
//! in doubt. It lives in this process only; every record and check forgets the windows that
//! have passed, so keys never checked again do not pile up.

use super::lock_keys::Doubt;
use crate::linode::WriteError;
use crate::mutex::lock;
use crate::Error;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct InDoubt {
    window: Duration,
    until: Mutex<HashMap<Doubt, Instant>>,
    /// Every write is in doubt until then: this process took the Lease
    /// over from one that stopped renewing, whose last writes it cannot
    /// know.
    all_until: Mutex<Option<Instant>>,
}

impl InDoubt {
    pub fn new(request_timeout: Duration) -> InDoubt {
        InDoubt {
            window: request_timeout * 3,
            until: Mutex::default(),
            all_until: Mutex::default(),
        }
    }

    /// The records, with those whose window has passed forgotten.
    fn current(&self) -> std::sync::MutexGuard<'_, HashMap<Doubt, Instant>> {
        let mut until = lock(&self.until);
        let now = Instant::now();
        until.retain(|_, t| *t > now);
        until
    }

    /// A write to `key` failed in a way that may hide its success.
    pub fn record(&self, key: &Doubt) {
        self.current()
            .insert(key.clone(), Instant::now() + self.window);
    }

    /// Whether a write to `key` may still be applied.
    pub fn is_recorded(&self, key: &Doubt) -> bool {
        self.current().contains_key(key) || self.all_in_doubt()
    }

    /// The previous holder of the Lease may have left any write in doubt:
    /// for one window, a retry that finds nothing answers Unavailable
    /// instead of writing again.
    pub fn everything(&self) {
        *lock(&self.all_until) = Some(Instant::now() + self.window);
    }

    fn all_in_doubt(&self) -> bool {
        lock(&self.all_until).is_some_and(|t| Instant::now() < t)
    }

    /// The object of `key` was found: nothing is in doubt any more.
    pub fn clear(&self, key: &Doubt) {
        lock(&self.until).remove(key);
    }

    /// What a create of `key` that failed (`failed`) made after all: the
    /// object `find` finds now (the POST landed and its reply was lost, or
    /// a duplicate was refused), else the error, with `key` recorded when
    /// the POST may still be applied.
    pub fn found_or<T>(
        &self,
        key: &Doubt,
        failed: WriteError,
        find: impl FnOnce() -> Result<Option<T>, Error>,
    ) -> Result<T, Error> {
        match find()? {
            Some(found) => Ok(found),
            None => {
                if failed.maybe_applied {
                    self.record(key);
                }
                Err(failed.error)
            }
        }
    }

    /// Unavailable while an earlier write to `key` (`what` it did, e.g.
    /// "create NFS filesystem \"x\"") may still be applied.
    pub fn check(&self, key: &Doubt, what: &str) -> Result<(), Error> {
        if self.current().contains_key(key) {
            return Err(Error::Unavailable(format!(
                "an earlier request to {what} timed out or failed and may still be applied by the backend; retry shortly"
            )));
        }
        if self.all_in_doubt() {
            return Err(Error::Unavailable(format!(
                "this controller took the lease over from one that stopped renewing, whose last request to {what} may still be applied by the backend; retry shortly"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handles::VolumeId;

    fn fs(label: &str) -> Doubt {
        Doubt::Filesystem {
            space: 7,
            label: label.into(),
        }
    }

    #[test]
    fn a_doubtful_create_holds_retries_back_until_found_or_expired() {
        let doubt = InDoubt::new(Duration::from_millis(5));
        assert!(doubt.check(&fs("a"), "a").is_ok());
        doubt.record(&fs("a"));
        assert!(matches!(
            doubt.check(&fs("a"), "a"),
            Err(Error::Unavailable(_))
        ));
        assert!(doubt.check(&fs("b"), "b").is_ok(), "other keys are free");
        doubt.clear(&fs("a"));
        assert!(doubt.check(&fs("a"), "a").is_ok());
        doubt.record(&fs("a"));
        std::thread::sleep(Duration::from_millis(20));
        assert!(doubt.check(&fs("a"), "a").is_ok(), "the window passed");
    }

    #[test]
    fn passed_windows_are_forgotten_whichever_key_is_touched() {
        let doubt = InDoubt::new(Duration::from_millis(5));
        for n in 0..10 {
            doubt.record(&fs(&n.to_string()));
        }
        assert_eq!(lock(&doubt.until).len(), 10);
        std::thread::sleep(Duration::from_millis(20));
        doubt.record(&Doubt::Policy(VolumeId {
            space: 8,
            filesystem: 1,
        }));
        assert_eq!(lock(&doubt.until).len(), 1, "only the fresh record is kept");
    }
}
