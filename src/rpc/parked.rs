//! Calls whose work is parked (waiting for Linode, or for another call's
//! batch) hold no worker; this registry is what still watches them. Every
//! few hundred milliseconds it asks each parked call whether its caller is
//! still there and, for one that left (cancelled, or its deadline passed),
//! drops the continuation, which releases the locks it held, and answers it.
//! On shutdown it answers every parked call. It never runs a continuation.

use crate::flow::Pending;
use crate::mutex::{lock, wait};
use crate::Error;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How often parked callers are checked. A caller that left is noticed
/// within this, so a retry finds the lock free soon after its deadline.
const CHECK_EVERY: Duration = Duration::from_millis(200);

pub(crate) enum Liveness {
    Alive,
    Gone(Error),
}

/// A parked call, as the registry sees it.
pub(crate) trait Waiting: Send + Sync {
    fn liveness(&self) -> Liveness;
    /// Answers with `err`; the continuation is already dropped.
    fn abandon(&self, err: Error);
}

struct Entry {
    call: Arc<dyn Waiting>,
    pending: Arc<dyn Pending>,
}

pub(crate) struct Registry {
    entries: Mutex<Vec<Entry>>,
    added: Condvar,
}

impl Registry {
    pub(crate) fn start() -> Arc<Registry> {
        let registry = Arc::new(Registry {
            entries: Mutex::new(Vec::new()),
            added: Condvar::new(),
        });
        let watched = registry.clone();
        std::thread::Builder::new()
            .name("rpc-parked".into())
            .spawn(move || watched.run())
            .expect("spawn parked-call watcher thread");
        registry
    }

    pub(crate) fn add(&self, call: Arc<dyn Waiting>, pending: Arc<dyn Pending>) {
        lock(&self.entries).push(Entry { call, pending });
        self.added.notify_one();
    }

    /// Calls parked right now.
    pub(crate) fn count(&self) -> usize {
        let mut entries = lock(&self.entries);
        entries.retain(|e| e.pending.is_pending());
        entries.len()
    }

    /// Answers every parked call with `err()`; returns how many.
    pub(crate) fn abandon_all(&self, err: impl Fn() -> Error) -> usize {
        let entries = std::mem::take(&mut *lock(&self.entries));
        let mut answered = 0;
        for e in entries {
            if e.pending.cancel() {
                e.call.abandon(err());
                answered += 1;
            }
        }
        answered
    }

    fn run(&self) {
        loop {
            let mut gone = Vec::new();
            {
                let mut entries = lock(&self.entries);
                while entries.is_empty() {
                    entries = wait(&self.added, entries);
                }
                entries.retain(|e| {
                    if !e.pending.is_pending() {
                        return false;
                    }
                    // A check that panics must not end the thread that
                    // watches every parked call: that call is answered.
                    let liveness = catch_unwind(AssertUnwindSafe(|| e.call.liveness()))
                        .unwrap_or_else(|panic| {
                            Liveness::Gone(crate::flow::panicked("a parked call's check", &*panic))
                        });
                    match liveness {
                        Liveness::Alive => true,
                        Liveness::Gone(err) => {
                            gone.push((e.call.clone(), e.pending.clone(), err));
                            false
                        }
                    }
                });
            }
            for (call, pending, err) in gone {
                // The event may have fired meanwhile: then the call goes on.
                if pending.cancel() {
                    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| call.abandon(err))) {
                        crate::flow::panicked("answering a parked call", &*panic);
                    }
                }
            }
            std::thread::sleep(CHECK_EVERY);
        }
    }
}
