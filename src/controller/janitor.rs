//! The controller's background upkeep: a thread that runs a round of the
//! directory volumes' `upkeep` every `MAINTENANCE_INTERVAL` (pools tended,
//! orphaned temporary filesystems and parent snapshots deleted), so what a
//! crash left behind goes without waiting for a call in its Space. It
//! holds the controller weakly and ends when the controller is gone.

use super::kind::directory::{upkeep, TendPolicy};
use super::Controller;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Starts the upkeep of `c`, every `every` (zero: never).
pub fn start(c: &Arc<Controller>, every: Duration, policy: TendPolicy) {
    if every.is_zero() {
        return;
    }
    let weak: Weak<Controller> = Arc::downgrade(c);
    let round = move || loop {
        std::thread::sleep(every);
        let Some(c) = weak.upgrade() else {
            return;
        };
        upkeep(&c, policy);
    };
    if let Err(e) = std::thread::Builder::new()
        .name("upkeep".into())
        .spawn(round)
    {
        log::warn!("no background upkeep: {e}");
    }
}
