//! The volume capabilities a request asks for, checked: which ones this
//! driver can serve. Shared by the RPCs that take or report capabilities
//! (CreateVolume, ValidateVolumeCapabilities, ControllerPublishVolume,
//! ListVolumes); it looks at no volume.

use crate::proto::csi;
use crate::Error;
use csi::volume_capability::access_mode::Mode;

/// Why a capability cannot be served, or `None` when it can: mount access
/// with any of the seven defined access modes (NFS serves them all).
pub fn capability_problem(cap: &csi::VolumeCapability) -> Option<String> {
    if cap.has_block() {
        return Some("only mount volume capabilities are supported".into());
    }
    if !cap.has_mount() {
        return Some("no mount volume capability set".into());
    }
    let Some(mode) = cap.access_mode.as_ref() else {
        return Some("volume access mode is required".into());
    };
    match mode.mode.enum_value() {
        Ok(Mode::UNKNOWN) => Some("volume access mode is required".into()),
        Ok(_) => None,
        Err(n) => Some(format!("unsupported volume access mode {n}")),
    }
}

/// Every capability, as CreateVolume and ControllerPublishVolume require.
pub fn check_capabilities(caps: &[csi::VolumeCapability]) -> Result<(), Error> {
    if caps.is_empty() {
        return Err(Error::InvalidArgument(
            "volume capabilities are required".into(),
        ));
    }
    caps.iter()
        .find_map(capability_problem)
        .map_or(Ok(()), |m| Err(Error::InvalidArgument(m)))
}
