//! ControllerModifyVolume: what a VolumeAttributesClass may change on an
//! existing volume, its tags and its squash policy. Tags are one PUT of the
//! filesystem (the driver's own tags kept); the squash policy goes through
//! the access-policy queue and waits for the policy to settle like every
//! other policy write.

use super::params::Mutable;
use super::{tags, Controller};
use crate::flow::{done, Step, Then};
use crate::handles::VolumeId;
use crate::limits;
use crate::proto::csi;
use crate::Error;
use std::collections::BTreeSet;
use std::sync::Arc;

/// ControllerModifyVolume. InvalidArgument for unknown or immutable keys,
/// NotFound for a volume that does not exist; a repeat changes nothing.
pub fn modify(
    c: &Arc<Controller>,
    req: csi::ControllerModifyVolumeRequest,
) -> Step<csi::ControllerModifyVolumeResponse> {
    if req.volume_id.is_empty() {
        return Err(Error::InvalidArgument("volume ID is not set".into()));
    }
    limits::map("mutable parameters", &req.mutable_parameters)?;
    limits::map("secrets", &req.secrets)?;
    let mutable = Mutable::parse(&req.mutable_parameters)?;
    if mutable.is_empty() {
        return Err(Error::InvalidArgument(
            "mutable parameters are required".into(),
        ));
    }
    let vol = VolumeId::parse(&req.volume_id)
        .map_err(|_| Error::NotFound(format!("volume {:?} not found", req.volume_id)))?;
    let guard = c.locks.try_lock(&format!("modify/{vol}"))?;
    let fs = c.cloud.get_filesystem(vol.space, vol.filesystem)?;
    if let Some(asked) = &mutable.tags {
        let want: BTreeSet<&str> = asked.iter().map(String::as_str).collect();
        if tags::user_tags(&fs.tags) != want {
            let mut all = asked.clone();
            all.extend(tags::driver_tags(&fs.tags));
            c.cloud
                .update_filesystem_tags(vol.space, vol.filesystem, &all)?;
        }
    }
    let settled = match mutable.squash {
        Some(squash) => c.acl.set_squash(c, vol, squash, false),
        None => done(()),
    };
    settled.then(move |()| {
        drop(guard);
        done(csi::ControllerModifyVolumeResponse::new())
    })
}
