//! The handlers of the Controller and GroupController RPCs, one room a
//! family: each parses its request into typed values (`request`), calls
//! the seam of the volume kinds (`kind::seam`) and hands the answer back
//! to the registration table (`table`). They name no kind and hold no
//! state of their own.

pub(super) mod expand;
pub(super) mod groups;
pub(super) mod inspect;
pub(super) mod listing;
pub(super) mod modify;
pub(super) mod publish;
pub(super) mod snapshots;
pub(super) mod volumes;
