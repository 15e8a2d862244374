//! Bounded `statvfs` of mount points. On a hard NFS mount whose server is
//! gone `statvfs` never returns, so each runs on a thread of its own with a
//! bound, and a path whose last one is still running is not asked again:
//! a dead server costs one thread per path, never a caller's time past the
//! bound nor a pile of threads. What an answer means is the caller's.

use super::{FsStats, Mounter, StatvfsError};
use crate::bounded;
use crate::mutex::lock;
use crate::Error;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a bounded `statvfs` found.
pub enum Probed {
    Answered(Result<FsStats, StatvfsError>),
    /// No answer within the bound (`earlier`: an earlier one of the path
    /// still has none, so none was started).
    Hung {
        earlier: bool,
    },
}

/// The probes of one user, and the paths whose `statvfs` is running, each
/// marked once it outlived its bound.
pub struct Probes {
    timeout: Duration,
    running: Arc<Mutex<HashMap<PathBuf, bool>>>,
}

impl Probes {
    pub fn new(timeout: Duration) -> Probes {
        Probes {
            timeout,
            running: Arc::default(),
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The same probes with another bound.
    pub fn bounded_by(self, timeout: Duration) -> Probes {
        Probes { timeout, ..self }
    }

    /// How many `statvfs` calls are still running past their bound.
    pub fn stuck(&self) -> usize {
        lock(&self.running).values().filter(|stuck| **stuck).count()
    }

    /// Whether no `statvfs` is running.
    pub fn idle(&self) -> bool {
        lock(&self.running).is_empty()
    }

    /// `statvfs` of `path` through `mounter`, within the bound.
    pub fn probe(&self, mounter: &Arc<dyn Mounter>, path: &Path) -> Result<Probed, Error> {
        {
            let mut running = lock(&self.running);
            if running.contains_key(path) {
                return Ok(Probed::Hung { earlier: true });
            }
            running.insert(path.to_path_buf(), false);
        }
        let (mounter, running, owned) = (mounter.clone(), self.running.clone(), path.to_path_buf());
        let answered = bounded::within("statvfs", self.timeout, move || {
            let result = mounter.statvfs(&owned);
            lock(&running).remove(&owned);
            result
        })
        .map_err(|e| {
            // Nothing will ever clear the mark: clear it here, or the path
            // could never be asked about again.
            lock(&self.running).remove(path);
            Error::Internal(format!("spawn a statvfs thread: {e}"))
        })?;
        match answered {
            Some(result) => Ok(Probed::Answered(result)),
            None => {
                // Still running (unless it ended just now, which removed it).
                if let Some(stuck) = lock(&self.running).get_mut(path) {
                    *stuck = true;
                }
                Ok(Probed::Hung { earlier: false })
            }
        }
    }
}
