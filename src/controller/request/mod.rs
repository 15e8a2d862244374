//! What a call asks, parsed: the create request and its sources
//! (`create`), the StorageClass and VolumeAttributesClass parameters
//! (`params`), the volume capabilities (`volume_capability`), the claim a
//! volume is made for (`claim_ref`), the argument checks every handler
//! shares (`checks`), and the CSI `Volume` answer both kinds give
//! (`answer`). Plain values and pure functions: nothing here reads the
//! backend or the controller's state.

pub(crate) mod answer;
pub(crate) mod checks;
pub(crate) mod claim_ref;
pub(crate) mod create;
pub(crate) mod params;
pub(crate) mod volume_capability;
