//! Whether this controller process is the one that writes: the holder of
//! the cluster's `coordination.k8s.io/v1` Lease, which `elect` takes,
//! renews and releases. Only the holder serves the writing RPCs
//! (`require`), runs the upkeep and the fill jobs (`is_held`), and sends
//! Linode writes (`fence`, checked by the Linode client before every POST,
//! PUT and DELETE). A holder that cannot renew stops writing at its last
//! successful renewal plus the renew deadline, which the settings keep,
//! with a Linode request's timeout, within the lease: no other process
//! can take the lease before the last write the holder sent has landed.
//! The node role takes no lease. Nothing here talks to Linode.

mod elect;
pub mod identity;

pub use crate::config::LeaseSettings;
pub use elect::start;

use crate::linode::WriteFence;
use crate::mutex::lock;
use crate::Error;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// How this process came to hold the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gained {
    /// There was none, it was released, or it was this identity's.
    Free,
    /// Another process held it and stopped renewing (a crash, a
    /// partition): its last writes may still be unknown to it.
    TakenOver,
}

type OnGain = Box<dyn Fn(Gained) + Send + Sync>;

/// This process's part in the election.
pub struct Leadership {
    settings: LeaseSettings,
    state: Mutex<State>,
    on_gain: Mutex<Vec<OnGain>>,
    /// Past the first round, run before the controller serves: a gain
    /// then is news to the controller (one at start is its normal state).
    started: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct State {
    /// Writes are allowed until then (last renewal sent + renew deadline).
    writable_until: Option<Instant>,
    /// Who holds the lease, as last read.
    holder: Option<String>,
    /// Released at shutdown: never taken again.
    released: bool,
}

/// The election of the process (none in the node role): what readiness
/// and the release at shutdown look at.
static PROCESS: OnceLock<Arc<Leadership>> = OnceLock::new();

impl Leadership {
    pub fn new(settings: LeaseSettings) -> Arc<Leadership> {
        Arc::new(Leadership {
            settings,
            state: Mutex::default(),
            on_gain: Mutex::default(),
            started: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// A process that is the only writer by construction (a test of parts
    /// built without an election): always the holder.
    pub fn sole() -> Arc<Leadership> {
        let sole = Leadership::new(LeaseSettings::for_tests());
        lock(&sole.state).writable_until =
            Some(Instant::now() + std::time::Duration::from_secs(1 << 30));
        sole
    }

    pub fn settings(&self) -> &LeaseSettings {
        &self.settings
    }

    /// Whether this process may write now.
    pub fn is_held(&self) -> bool {
        lock(&self.state)
            .writable_until
            .is_some_and(|until| Instant::now() < until)
    }

    /// Ok for the holder; Unavailable naming the holder for a standby.
    pub fn require(&self) -> Result<(), Error> {
        if self.is_held() {
            return Ok(());
        }
        Err(Error::Unavailable(self.standby_message()))
    }

    fn standby_message(&self) -> String {
        let s = &self.settings;
        let holder = lock(&self.state).holder.clone();
        let held_by = match holder.filter(|h| !h.is_empty() && *h != s.identity) {
            Some(holder) => format!("is held by {holder}"),
            None => "is not held by this process now".to_string(),
        };
        format!(
            "this controller ({}) is a standby: lease {}/{} {held_by}; retry (the holder serves it, or this one once the lease expires)",
            s.identity, s.namespace, s.name
        )
    }

    /// Runs `f` each time this process gains the lease after its start
    /// (at start it holds it or not; a takeover is never that early,
    /// since a standby must first see the lease unchanged for its
    /// duration).
    pub fn on_gain(&self, f: impl Fn(Gained) + Send + Sync + 'static) {
        lock(&self.on_gain).push(Box::new(f));
    }

    /// What the Linode client checks before every write.
    pub fn fence(self: &Arc<Self>) -> WriteFence {
        let me = self.clone();
        WriteFence::new(move || me.require().map_err(|e| e.message().to_string()))
    }

    /// Makes this the process's election, for readiness and release.
    pub fn publish(self: &Arc<Self>) {
        if PROCESS.set(self.clone()).is_err() {
            log::warn!("a second controller election in one process is ignored by readiness");
        }
        crate::metrics::endpoint::report_readiness(readiness);
    }

    /// Renewed (or gained) with a request sent at `sent`.
    fn renewed(&self, sent: Instant, gained: Option<Gained>) {
        {
            let mut state = lock(&self.state);
            if state.released {
                return;
            }
            state.writable_until = Some(sent + self.settings.renew_deadline);
            state.holder = Some(self.settings.identity.clone());
        }
        if let Some(how) = gained {
            log::info!(
                "lease {}/{}: this controller ({}) holds it{}",
                self.settings.namespace,
                self.settings.name,
                self.settings.identity,
                match how {
                    Gained::Free => "",
                    Gained::TakenOver => ", taken over from a holder that stopped renewing",
                }
            );
            if self.started.load(std::sync::atomic::Ordering::SeqCst) {
                for f in lock(&self.on_gain).iter() {
                    f(how);
                }
            }
        }
    }

    /// Another process holds it (as last read).
    fn held_by(&self, holder: &str) {
        let mut state = lock(&self.state);
        if state.holder.as_deref() != Some(holder) {
            log::info!(
                "lease {}/{} is held by {holder}; this controller ({}) stands by",
                self.settings.namespace,
                self.settings.name,
                self.settings.identity
            );
        }
        state.holder = Some(holder.to_string());
        state.writable_until = None;
    }

    /// Whether the holder's renew deadline has just passed (told once).
    fn lapsed(&self) -> bool {
        let mut state = lock(&self.state);
        match state.writable_until {
            Some(until) if Instant::now() >= until => {
                state.writable_until = None;
                true
            }
            _ => false,
        }
    }

    /// Stops writing at once (the lease was lost, or is being released):
    /// whether it was writing.
    fn stop_writing(&self) -> bool {
        let mut state = lock(&self.state);
        state.writable_until.take().is_some()
    }
}

/// The readiness the HTTP endpoint reports: ready for the holder (and in
/// the node role), not ready for a standby, naming the holder.
pub fn readiness() -> Result<(), String> {
    match PROCESS.get() {
        None => Ok(()),
        Some(l) if l.is_held() => Ok(()),
        Some(l) => Err(l.standby_message()),
    }
}

/// At the end of a drain: stops writing and hands the lease back, so a
/// successor takes it at its next try instead of waiting for it to expire.
pub fn release() {
    if let Some(l) = PROCESS.get() {
        elect::release(l);
    }
}
