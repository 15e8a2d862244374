//! The controller's background upkeep: a thread that runs a round of the
//! directory volumes' `upkeep` every `MAINTENANCE_INTERVAL` (pools tended,
//! fills resumed, orphaned temporary filesystems and parent snapshots
//! deleted), so what a crash left behind goes without waiting for a call
//! in its Space. Only the holder of the Lease runs a round; one that has
//! just taken it runs one at once (`Kick`), resuming what the previous
//! holder left. It holds the controller weakly and ends when the
//! controller is gone.

use super::kind::directory::{upkeep, TendPolicy};
use crate::controller::state::controller::Controller;
use crate::mutex::lock;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// Asks the upkeep for a round now.
pub struct Kick(Option<Mutex<Sender<()>>>);

impl Kick {
    pub fn now(&self) {
        if let Some(sender) = &self.0 {
            // A round already asked for is enough; a thread gone is fine.
            let _ = lock(sender).send(());
        }
    }
}

/// Starts the upkeep of `c`, every `every` (zero: never).
pub fn start(c: &Arc<Controller>, every: Duration, policy: TendPolicy) -> Kick {
    if every.is_zero() {
        return Kick(None);
    }
    let (kick, kicked) = channel();
    let weak: Weak<Controller> = Arc::downgrade(c);
    let round = move || loop {
        match kicked.recv_timeout(every) {
            Ok(()) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        let Some(c) = weak.upgrade() else {
            return;
        };
        if c.lease.is_held() {
            upkeep(&c, policy);
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("upkeep".into())
        .spawn(round)
    {
        log::warn!("no background upkeep: {e}");
    }
    Kick(Some(Mutex::new(kick)))
}
