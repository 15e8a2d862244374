//! The parsed CreateVolume request: its name and the label and capacity it
//! maps to, the class's typed parameters (which say the kind of volume),
//! what a VolumeAttributesClass overrides, and the content source. Parsed
//! once, before any backend call; what the kinds do with it is theirs.

use super::claim_ref::ClaimRef;
use super::params::{KindParams, Mutable, Params};
use super::volume_capability::check_capabilities;
use crate::handles::{label_for, SnapshotHandle, SnapshotId, SubdirId, VolumeHandle, VolumeId};
use crate::limits;
use crate::linode::SquashPolicy;
use crate::proto::csi;
use crate::Error;

/// What a new whole filesystem is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Snapshot(SnapshotId),
    /// PVC from PVC: copied through a snapshot of the volume (see `clone`).
    Volume(VolumeId),
}

/// What a new directory volume is filled from: a snapshot of either kind
/// (a directory's, or a whole filesystem's root), or a directory volume
/// (a point-in-time copy through a snapshot of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirSource {
    Snapshot(SnapshotHandle),
    Volume(SubdirId),
}

/// What CreateVolume asked for, parsed.
pub struct CreateRequest {
    /// The CSI name, as given.
    pub name: String,
    pub label: String,
    pub required: i64,
    pub limit: i64,
    /// What a new filesystem is asked to hold.
    pub capacity: i64,
    pub params: Params,
    /// The user's tags: the VolumeAttributesClass's, else the StorageClass's.
    pub tags: Vec<String>,
    /// Likewise for the squash policy.
    pub squash: Option<SquashPolicy>,
    /// A filesystem class's source, with the handle as the caller wrote
    /// it, to echo back...
    pub source: Option<(Source, String)>,
    /// ...and a subdirectory class's.
    pub dir_source: Option<(DirSource, String)>,
    /// A `subdirectory` volume's file-count limit from the
    /// VolumeAttributesClass (the StorageClass's is in `params`).
    pub max_files: Option<i64>,
    /// The claim the provisioner says the volume is for, if it says.
    pub claim: Option<ClaimRef>,
}

/// Why a directory is never copied into a whole filesystem: a filesystem
/// is made from a snapshot by cloning it whole, and the parent's snapshot
/// holds every tenant's data.
const NO_DIRECTORY_INTO_FILESYSTEM: &str = "a whole-filesystem volume is made from a snapshot by cloning the snapshot's whole filesystem, and a directory volume's snapshot is a snapshot of its shared filesystem, which holds every tenant's data; restore it (or clone the volume) into a subdirectory class";

/// A content source as parsed, before the class says what it may be.
enum Parsed {
    Snapshot(SnapshotHandle),
    Volume(VolumeHandle),
}

fn parse_source(src: &csi::VolumeContentSource) -> Result<(Parsed, String), Error> {
    if src.has_snapshot() {
        let id = &src.snapshot().snapshot_id;
        if id.is_empty() {
            return Err(Error::InvalidArgument("snapshot id is required".into()));
        }
        // A handle we cannot parse cannot name a snapshot we made.
        let parsed = SnapshotHandle::parse(id)
            .map_err(|_| Error::NotFound(format!("snapshot id \"{id}\" was not found")))?;
        return Ok((Parsed::Snapshot(parsed), id.clone()));
    }
    if src.has_volume() {
        let id = &src.volume().volume_id;
        if id.is_empty() {
            return Err(Error::InvalidArgument(
                "source volume id is required".into(),
            ));
        }
        // A handle we cannot parse cannot name a volume we made.
        let parsed = VolumeHandle::parse(id)
            .map_err(|_| Error::NotFound(format!("source volume \"{id}\" was not found")))?;
        return Ok((Parsed::Volume(parsed), id.clone()));
    }
    Err(Error::InvalidArgument(
        "unsupported volume content source".into(),
    ))
}

pub fn parse_create(
    req: &csi::CreateVolumeRequest,
    default_capacity: i64,
) -> Result<CreateRequest, Error> {
    if req.name.is_empty() {
        return Err(Error::InvalidArgument("volume name is required".into()));
    }
    limits::string("volume name", &req.name)?;
    limits::map("parameters", &req.parameters)?;
    limits::map("mutable parameters", &req.mutable_parameters)?;
    limits::map("secrets", &req.secrets)?;
    check_capabilities(&req.volume_capabilities)?;
    let (required, limit) = match req.capacity_range.as_ref() {
        Some(r) => (r.required_bytes, r.limit_bytes),
        None => (0, 0),
    };
    if required < 0 || limit < 0 {
        return Err(Error::InvalidArgument(
            "capacity_range bytes must not be negative".into(),
        ));
    }
    if limit > 0 && required > limit {
        return Err(Error::InvalidArgument(format!(
            "required_bytes {required} exceeds limit_bytes {limit}"
        )));
    }
    // A source that cannot exist is NotFound whatever the class is.
    let source = req
        .volume_content_source
        .as_ref()
        .map(parse_source)
        .transpose()?;
    let params = Params::parse(&req.parameters)?;
    let mutable = Mutable::parse(&req.mutable_parameters)?;
    let (tags, squash, source, dir_source) = match &params.kind {
        KindParams::Directory(_) => {
            mutable.check_subdirectory()?;
            let dir_source = match source {
                None => None,
                Some((Parsed::Snapshot(id), raw)) => Some((DirSource::Snapshot(id), raw)),
                Some((Parsed::Volume(VolumeHandle::Subdirectory(id)), raw)) => {
                    Some((DirSource::Volume(id), raw))
                }
                Some((Parsed::Volume(VolumeHandle::Filesystem(_)), raw)) => {
                    return Err(Error::InvalidArgument(format!(
                        "source volume {raw} is a whole-filesystem volume: it is cloned into a filesystem class, not into a directory"
                    )))
                }
            };
            (Vec::new(), None, None, dir_source)
        }
        KindParams::Filesystem(fs) => {
            mutable.check_filesystem()?;
            let source = match source {
                None => None,
                Some((Parsed::Snapshot(SnapshotHandle::Filesystem(id)), raw)) => {
                    Some((Source::Snapshot(id), raw))
                }
                Some((Parsed::Volume(VolumeHandle::Filesystem(id)), raw)) => {
                    Some((Source::Volume(id), raw))
                }
                Some((Parsed::Snapshot(SnapshotHandle::Directory(_)), raw)) => {
                    return Err(Error::InvalidArgument(format!(
                        "snapshot {raw} is a directory volume's: {NO_DIRECTORY_INTO_FILESYSTEM}"
                    )))
                }
                Some((Parsed::Volume(VolumeHandle::Subdirectory(_)), raw)) => {
                    return Err(Error::InvalidArgument(format!(
                        "source volume {raw} is a directory volume: {NO_DIRECTORY_INTO_FILESYSTEM}"
                    )))
                }
            };
            (
                mutable.tags.unwrap_or_else(|| fs.tags.clone()),
                mutable.squash.or_else(|| fs.squash.clone()),
                source,
                None,
            )
        }
    };
    Ok(CreateRequest {
        name: req.name.clone(),
        max_files: mutable.max_files,
        claim: ClaimRef::from_parameters(&req.parameters),
        label: label_for(&req.name),
        required,
        limit,
        capacity: capacity_to_request(default_capacity, required, limit),
        tags,
        squash,
        params,
        source,
        dir_source,
    })
}

/// `max_capacity_bytes` of a new filesystem: required, else limit, else the
/// configured default (behaviour.md).
fn capacity_to_request(default: i64, required: i64, limit: i64) -> i64 {
    if required > 0 {
        required
    } else if limit > 0 {
        limit
    } else {
        default
    }
}
