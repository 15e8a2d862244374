//! What the watch of the fills' claims (`kind::directory::restore::watch`)
//! keeps between ticks: its settings, the events jobs queued for their
//! claims, what it saw of each job's claim, and the fills it ended lately.
//! State only: nothing here lists claims or ends a fill.

use crate::controller::request::claim_ref::ClaimRef;
use crate::handles::SubdirId;
use crate::kube::EventType;
use crate::metrics::FillAbandoned;
use crate::mutex::lock;
use std::collections::HashMap;
use std::sync::mpsc::Sender;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a queued event waits for its claim to be listed.
pub(crate) const OUTBOX_AGE: Duration = Duration::from_secs(600);
/// How long a CreateVolume of an abandoned fill's name is refused.
const REMEMBERED: Duration = Duration::from_secs(3600);

/// The watch of one controller: its settings and what it keeps between
/// ticks.
pub struct FillWatch {
    /// `FILL_PROGRESS_INTERVAL`.
    pub(crate) interval: Duration,
    /// `FILL_CLAIM_GRACE`.
    pub(crate) grace: Duration,
    pub(crate) kick: Mutex<Option<Sender<()>>>,
    pub(crate) state: Mutex<State>,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) outbox: Vec<Told>,
    pub(crate) tracks: HashMap<SubdirId, Track>,
    /// The fills ended for want of a claim, by CSI name.
    pub(crate) abandoned: HashMap<String, (ClaimRef, Instant, String)>,
    pub(crate) last_list: Option<Instant>,
}

/// What the watch saw of one job's claim.
#[derive(Default)]
pub(crate) struct Track {
    /// Since when (a list's start) it is missing, and why.
    pub(crate) missing: Option<(Instant, FillAbandoned)>,
    pub(crate) last_progress: Option<Instant>,
}

/// An event a job queued for its claim.
pub(crate) struct Told {
    pub(crate) claim: ClaimRef,
    pub(crate) kind: EventType,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
    pub(crate) queued: Instant,
}

impl FillWatch {
    pub fn new(interval: Duration, grace: Duration) -> FillWatch {
        FillWatch {
            interval,
            grace,
            kick: Mutex::new(None),
            state: Mutex::default(),
        }
    }

    /// Queues an event of `kind` for `claim`, posted at the next tick, which
    /// comes soon.
    pub fn tell(&self, claim: ClaimRef, kind: EventType, reason: &'static str, message: String) {
        lock(&self.state).outbox.push(Told {
            claim,
            kind,
            reason,
            message,
            queued: Instant::now(),
        });
        if let Some(kick) = lock(&self.kick).as_ref() {
            // A tick already asked for is enough; a thread gone is fine.
            let _ = kick.send(());
        }
    }

    /// Why a new volume named `csi_name` for `claim` is refused: its fill
    /// was ended lately because that claim is gone.
    pub fn abandoned(&self, csi_name: &str, claim: Option<&ClaimRef>) -> Option<String> {
        let mut state = lock(&self.state);
        state
            .abandoned
            .retain(|_, (_, at, _)| at.elapsed() < REMEMBERED);
        let (ended_for, _, why) = state.abandoned.get(csi_name)?;
        (Some(ended_for) == claim).then(|| why.clone())
    }
}
