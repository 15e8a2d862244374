//! The events autogrow leaves on a claim about what it cannot do: each
//! kind told once until what it is about changes (a new target size, room
//! left, class, annotation value), so a claim's events are not a stream.

use crate::controller::state::controller::Controller;
use crate::controller::state::directory::autogrowth::Tracked;
use crate::kube::{EventType, PersistentVolumeClaim};

/// The kinds of event told once until what they are about changes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Told {
    Annotation,
    Infeasible,
    AtMax,
    NotExpandable,
    NoRoom,
}

impl Told {
    fn reason(self) -> &'static str {
        match self {
            Told::Annotation => "AutogrowBadAnnotation",
            Told::Infeasible => "AutogrowStopped",
            Told::AtMax => "AutogrowAtMax",
            Told::NotExpandable => "AutogrowNotExpandable",
            Told::NoRoom => "AutogrowNoRoom",
        }
    }
}

/// Sends the event of `kind` about `detail`, unless it was sent about
/// that already; whether it was sent now.
pub(super) fn tell(
    c: &Controller,
    claim: &PersistentVolumeClaim,
    t: &mut Tracked,
    kind: Told,
    detail: &str,
    event: EventType,
    message: &str,
) -> bool {
    if t.told.get(kind.reason()).is_some_and(|d| d == detail) {
        return false;
    }
    match c.cluster.claim_event(claim, event, kind.reason(), message) {
        Ok(()) => {
            t.told.insert(kind.reason(), detail.to_string());
            true
        }
        Err(e) => {
            log::warn!(
                "autogrow: event {} on claim {}/{}: {e}",
                kind.reason(),
                claim.namespace,
                claim.name
            );
            false
        }
    }
}
