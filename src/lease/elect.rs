//! The election loop: every `LEASE_RETRY_PERIOD` the holder renews the
//! lease and a standby reads it, taking it once it is free (released) or
//! has not changed for its duration as this process observed it (its own
//! clock, never the holder's: clocks may disagree). Every write names the
//! `resourceVersion` it read, so of two processes trying at once one
//! wins. The first round runs before the controller serves, so a lone
//! controller starts as the holder. At shutdown `release` hands the lease
//! back. Only the Lease API is spoken here.

use super::{Gained, Leadership};
use crate::kube::{micro_time, KubeClient, Lease};
use crate::mutex::lock;
use crate::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// One process's elector.
struct Elector {
    kube: KubeClient,
    /// The lease as last read, and when this process first saw that
    /// version of it.
    observed: Mutex<Option<(Lease, Instant)>>,
    stop: AtomicBool,
    /// A failing round was logged; the next success says so.
    failing: AtomicBool,
}

static ELECTOR: Mutex<Option<Arc<Elector>>> = Mutex::new(None);

/// Runs a first round now, then the loop on a thread of its own.
pub fn start(kube: KubeClient, l: &Arc<Leadership>) {
    let elector = Arc::new(Elector {
        kube,
        observed: Mutex::new(None),
        stop: AtomicBool::new(false),
        failing: AtomicBool::new(false),
    });
    *lock(&ELECTOR) = Some(elector.clone());
    elector.round(l);
    l.started.store(true, Ordering::SeqCst);
    let l = l.clone();
    let spawned = std::thread::Builder::new()
        .name("lease".into())
        .spawn(move || {
            while !elector.stop.load(Ordering::SeqCst) {
                std::thread::sleep(l.settings.retry_period);
                if elector.stop.load(Ordering::SeqCst) {
                    break;
                }
                elector.round(&l);
            }
        });
    if let Err(e) = spawned {
        log::error!("no lease thread ({e}): this controller writes only until its lease lapses");
    }
}

/// Stops writing and hands the lease back (holder empty, one second), so
/// a successor takes it at its next try.
pub(super) fn release(l: &Leadership) {
    let Some(elector) = lock(&ELECTOR).clone() else {
        return;
    };
    elector.stop.store(true, Ordering::SeqCst);
    lock(&l.state).released = true;
    if !l.stop_writing() {
        return;
    }
    let s = &l.settings;
    let Some((mut lease, _)) = lock(&elector.observed).clone() else {
        return;
    };
    if lease.holder != s.identity {
        return;
    }
    lease.holder = String::new();
    lease.duration_secs = 1;
    lease.renewed = Some(micro_time(SystemTime::now()));
    match elector
        .kube
        .update_lease(&s.namespace, &s.name, &lease, s.call_timeout())
    {
        Ok(_) => log::info!("lease {}/{}: released", s.namespace, s.name),
        Err(e) => log::warn!(
            "lease {}/{}: not released ({e}); a successor takes it once it expires",
            s.namespace,
            s.name
        ),
    }
}

impl Elector {
    /// Notes `lease` as read now: when this version was first seen.
    fn observe(&self, lease: Lease) -> Instant {
        let mut observed = lock(&self.observed);
        let since = match observed.as_ref() {
            Some((seen, at)) if seen.resource_version == lease.resource_version => *at,
            _ => Instant::now(),
        };
        *observed = Some((lease, since));
        since
    }

    /// One try: renew, take, or stand by.
    fn round(&self, l: &Leadership) {
        let s = &l.settings;
        let sent = Instant::now();
        let outcome = self.try_once(l, sent);
        match outcome {
            Ok(()) => {
                if self.failing.swap(false, Ordering::SeqCst) {
                    log::info!("lease {}/{}: reachable again", s.namespace, s.name);
                }
            }
            Err(Error::FailedPrecondition(_)) => {
                // Another process wrote it first: it holds the lease now.
                if l.stop_writing() {
                    log::warn!(
                        "lease {}/{}: another controller took it; this one stopped writing",
                        s.namespace,
                        s.name
                    );
                }
            }
            Err(e) => {
                if !self.failing.swap(true, Ordering::SeqCst) {
                    log::warn!(
                        "lease {}/{}: {e}; trying again every {:?} (a holder stops writing {:?} after its last renewal)",
                        s.namespace,
                        s.name,
                        s.retry_period,
                        s.renew_deadline
                    );
                }
            }
        }
        if l.lapsed() {
            log::warn!(
                "lease {}/{}: not renewed within LEASE_RENEW_DEADLINE; this controller stopped writing",
                s.namespace,
                s.name
            );
        }
    }

    fn try_once(&self, l: &Leadership, sent: Instant) -> Result<(), Error> {
        let s = &l.settings;
        let timeout = s.call_timeout();
        let now = micro_time(SystemTime::now());
        let Some(lease) = self.kube.get_lease(&s.namespace, &s.name, timeout)? else {
            let new = Lease {
                holder: s.identity.clone(),
                duration_secs: s.duration.as_secs(),
                acquired: Some(now.clone()),
                renewed: Some(now),
                transitions: 0,
                resource_version: String::new(),
                cluster: s.cluster.clone(),
            };
            let made = self
                .kube
                .create_lease(&s.namespace, &s.name, &new, timeout)?;
            self.observe(made);
            l.renewed(sent, Some(Gained::Free));
            return Ok(());
        };
        if let (Some(recorded), Some(ours)) = (&lease.cluster, &s.cluster) {
            if recorded != ours {
                return Err(Error::FailedPrecondition(format!(
                    "the lease records cluster identity {recorded:?}, not this controller's {ours:?}: it is never taken (see CLUSTER_ID)"
                )));
            }
        }
        let since = self.observe(lease.clone());
        let ours = lease.holder == s.identity;
        let free = lease.holder.is_empty();
        let expired = since.elapsed() >= Duration::from_secs(lease.duration_secs.max(1));
        if !ours && !free && !expired {
            l.held_by(&lease.holder);
            return Ok(());
        }
        let was_held = ours && l.is_held();
        let mut next = lease.clone();
        next.holder = s.identity.clone();
        next.duration_secs = s.duration.as_secs();
        next.renewed = Some(now.clone());
        next.cluster = s.cluster.clone();
        if !ours {
            next.acquired = Some(now);
            next.transitions += 1;
        }
        let updated = self
            .kube
            .update_lease(&s.namespace, &s.name, &next, timeout)?;
        self.observe(updated);
        let gained = match (was_held, ours || free) {
            (true, _) => None,
            (false, true) => Some(Gained::Free),
            (false, false) => Some(Gained::TakenOver),
        };
        l.renewed(sent, gained);
        Ok(())
    }
}
