//! One directory volume as the controller finds, reads and changes it: its
//! parent and marker found (`lookup`), its publish to a node (`access`), its description for
//! ControllerGetVolume, ListVolumes and ValidateVolumeCapabilities
//! (`inspect`), its usage sampled (`samples`) and its quota changed by
//! ControllerExpandVolume and ControllerModifyVolume (`quota_changes`).

pub(crate) mod access;
pub(crate) mod inspect;
pub(crate) mod lookup;
pub(crate) mod quota_changes;
pub(crate) mod samples;
