//! Volume lifecycle on the backend: create (or adopt what an earlier attempt
//! made), restore from a snapshot by cloning, delete, and the read-only
//! RPCs. Idempotency rests on the deterministic label plus the per-label
//! lock; nothing here is HTTP-aware beyond `dyn Cloud`. The `Cloud` errors
//! already name the call and the object, so they are passed on as they are.

use super::params::{Params, SpaceRef};
use super::Controller;
use crate::flow::{done, Step, Then};
use crate::handles::{self, label_for, SnapshotId, VolumeId};
use crate::linode::{CloneFilesystem, Filesystem, MtlsMode, NewFilesystem, Status};
use crate::proto::csi;
use crate::Error;
use csi::volume_capability::access_mode::Mode;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// The clone API sizes filesystems in whole GiB.
const GIB: u64 = 1 << 30;

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

/// What CreateVolume asked for, parsed.
struct CreateRequest {
    label: String,
    required: i64,
    limit: i64,
    /// What a new filesystem is asked to hold.
    capacity: i64,
    params: Params,
    source: Option<(SnapshotId, String)>,
}

fn parse_create(
    req: &csi::CreateVolumeRequest,
    default_capacity: i64,
) -> Result<CreateRequest, Error> {
    if req.name.is_empty() {
        return Err(Error::InvalidArgument("volume name is required".into()));
    }
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
    let source = match req.volume_content_source.as_ref() {
        None => None,
        Some(src) if src.has_snapshot() => {
            let id = &src.snapshot().snapshot_id;
            if id.is_empty() {
                return Err(Error::InvalidArgument("snapshot id is required".into()));
            }
            // A handle we cannot parse cannot name a snapshot we made.
            let parsed = SnapshotId::parse(id)
                .map_err(|_| Error::NotFound(format!("snapshot id \"{id}\" was not found")))?;
            Some((parsed, id.clone()))
        }
        Some(_) => {
            return Err(Error::InvalidArgument(
                "unsupported volume content source".into(),
            ))
        }
    };
    let params = Params::parse(&req.parameters)?;
    Ok(CreateRequest {
        label: label_for(&req.name),
        required,
        limit,
        capacity: capacity_to_request(default_capacity, required, limit),
        params,
        source,
    })
}

/// CreateVolume. InvalidArgument for bad input, AlreadyExists for a name held by an incompatible
/// filesystem, OutOfRange for a restore its snapshot cannot size; repeats return the same volume.
/// Waits for activation and for the squash policy park on the poller; the
/// create lock goes with the flow until it is answered.
pub fn create_volume(
    c: &Arc<Controller>,
    req: csi::CreateVolumeRequest,
) -> Step<csi::CreateVolumeResponse> {
    let want = Arc::new(parse_create(&req, c.default_capacity_bytes)?);
    // The label is what the backend knows: two names that map to one label
    // (they differ in case, say) are one filesystem and must not both POST.
    let guard = c.locks.try_lock(&format!("create/{}", want.label))?;
    let region = c.cluster.region()?;
    let space = c.spaces.resolve(&want.params.space)?;
    let mtls = c.spaces.mtls_mode(space.id)?;

    let existing = c
        .spaces
        .checked(space.id, find_by_label(c, space.id, &want.label, &region))?;
    let adopting = existing.is_some();
    let made = match existing {
        Some(existing) => adopt(c, &want, region, existing),
        None => provision(c, &want, space.id, region),
    };
    let (c, squash_want) = (c.clone(), want.clone());
    made.then(move |fs| {
        let Some(squash) = squash_want.params.squash.clone() else {
            return done(fs);
        };
        let vol = VolumeId {
            space: fs.space_id,
            filesystem: fs.id,
        };
        c.acl
            .set_squash(&c, vol, squash, adopting)
            .then(move |()| done(fs))
    })
    .then(move |fs| {
        drop(guard);
        done(created(&want, &fs, mtls.as_ref()))
    })
}

/// The CreateVolume answer for `fs`.
fn created(
    want: &CreateRequest,
    fs: &Filesystem,
    mtls: Option<&MtlsMode>,
) -> csi::CreateVolumeResponse {
    let mut volume = volume_of(fs, mtls);
    if volume.capacity_bytes == 0 {
        volume.capacity_bytes = want.capacity;
    }
    if let Some((_, raw)) = &want.source {
        let mut snap = csi::volume_content_source::SnapshotSource::new();
        snap.snapshot_id = raw.clone();
        let mut source = csi::VolumeContentSource::new();
        source.set_snapshot(snap);
        volume.content_source = Some(source).into();
    }
    let mut resp = csi::CreateVolumeResponse::new();
    resp.volume = Some(volume).into();
    resp
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

/// The one live filesystem carrying `label` in `region`; one on its way out
/// (`deleting`) is not a match: it will never serve this volume.
fn find_by_label(
    c: &Controller,
    space_id: u64,
    label: &str,
    region: &str,
) -> Result<Option<Filesystem>, Error> {
    let mut found: Vec<Filesystem> = c
        .cloud
        .find_filesystems(space_id, label, region)?
        .into_iter()
        .filter(|fs| fs.status != Status::Deleting)
        .collect();
    match found.len() {
        0 => Ok(None),
        1 => Ok(Some(found.remove(0))),
        _ => Err(Error::FailedPrecondition(format!(
            "multiple NFS filesystems match label \"{label}\" in space {space_id}"
        ))),
    }
}

/// A filesystem with our label already exists: an earlier attempt made it
/// (its reply was lost, or it was still creating), or the name is reused
/// with different parameters, which is AlreadyExists.
fn adopt(
    c: &Controller,
    want: &Arc<CreateRequest>,
    region: String,
    fs: Filesystem,
) -> Step<Filesystem> {
    check_source(want, &fs)?;
    let want = want.clone();
    c.poller.filesystem(fs, move |fs| {
        if fs.region != region {
            return Err(Error::AlreadyExists(format!(
                "NFS filesystem \"{}\" already exists in incompatible region \"{}\"",
                want.label, fs.region
            )));
        }
        if let Some(capacity) = fs.max_capacity_bytes {
            if !fits(&want, capacity) {
                return Err(Error::AlreadyExists(format!(
                    "NFS filesystem \"{}\" already exists with incompatible capacity {capacity}",
                    want.label
                )));
            }
        }
        let have: BTreeSet<&String> = fs.tags.iter().collect();
        let asked: BTreeSet<&String> = want.params.tags.iter().collect();
        if have != asked {
            return Err(Error::AlreadyExists(format!(
                "NFS filesystem \"{}\" already exists with incompatible tags",
                want.label
            )));
        }
        require_mount_target(&fs)?;
        done(fs)
    })
}

fn check_source(want: &CreateRequest, fs: &Filesystem) -> Result<(), Error> {
    match (&want.source, fs.source_snapshot_id) {
        (None, None) => Ok(()),
        (Some((snap, _)), Some(from)) if from == snap.snapshot => Ok(()),
        (Some((snap, _)), Some(from)) => Err(Error::AlreadyExists(format!(
            "NFS filesystem {} (\"{}\") was cloned from snapshot {from}, requested snapshot {}",
            fs.id, want.label, snap.snapshot
        ))),
        (Some((snap, _)), None) => Err(Error::AlreadyExists(format!(
            "NFS filesystem {} (\"{}\") does not identify a source snapshot; requested snapshot {}",
            fs.id, want.label, snap.snapshot
        ))),
        (None, Some(from)) => Err(Error::AlreadyExists(format!(
            "NFS filesystem {} (\"{}\") was cloned from snapshot {from}; the request has no content source",
            fs.id, want.label
        ))),
    }
}

/// Creates (or clones) the filesystem and waits for it. A POST is never
/// repeated blindly: when its outcome is unknown (5xx, timeout) the label is
/// looked up once, so a create that happened is adopted instead of leaked.
fn provision(
    c: &Arc<Controller>,
    want: &Arc<CreateRequest>,
    space_id: u64,
    region: String,
) -> Step<Filesystem> {
    let Some((snap, _)) = want.source.clone() else {
        let posted = c.cloud.create_filesystem(
            space_id,
            &NewFilesystem {
                label: want.label.clone(),
                region: region.clone(),
                max_capacity_bytes: want.capacity,
                tags: want.params.tags.clone(),
            },
        );
        return wait_made(c, want, space_id, &region, posted);
    };
    // A restore from a snapshot that is still being taken waits for it
    // rather than failing the clone.
    let source = c
        .cloud
        .get_snapshot(snap.space, snap.filesystem, snap.snapshot)
        .map_err(|e| e.context(format!("source snapshot {snap}")))?;
    let (c, want) = (c.clone(), want.clone());
    c.clone().poller.snapshot(source, move |_| {
        let size_gib = restore_size_gib(&c, &want, &snap)?;
        let posted = c.cloud.clone_snapshot(
            snap.space,
            snap.filesystem,
            snap.snapshot,
            &CloneFilesystem {
                label: want.label.clone(),
                region: region.clone(),
                space_id: Some(space_id),
                size_gib,
                tags: want.params.tags.clone(),
            },
        );
        wait_made(&c, &want, space_id, &region, posted)
    })
}

/// What a create or clone POST made, once active with a mount target.
fn wait_made(
    c: &Controller,
    want: &CreateRequest,
    space_id: u64,
    region: &str,
    posted: Result<Filesystem, Error>,
) -> Step<Filesystem> {
    let fs = match posted {
        Ok(fs) => fs,
        Err(e @ (Error::Unavailable(_) | Error::Internal(_) | Error::DeadlineExceeded(_))) => {
            match find_by_label(c, space_id, &want.label, region) {
                Ok(Some(fs)) => {
                    log::warn!(
                        "create of \"{}\" reported {e}; adopting filesystem {}",
                        want.label,
                        fs.id
                    );
                    fs
                }
                _ => return Err(e),
            }
        }
        Err(e) => return c.spaces.checked(space_id, Err(e)),
    };
    c.poller.filesystem(fs, |fs| {
        require_mount_target(&fs)?;
        done(fs)
    })
}

/// Whether a filesystem of `capacity` bytes meets the requested range.
fn fits(want: &CreateRequest, capacity: i64) -> bool {
    let too_small = want.required > 0 && capacity < want.required;
    let too_big = want.limit > 0 && capacity > want.limit;
    !(too_small || too_big)
}

/// The size to ask of a clone. Unasked, a clone is as large as the
/// snapshot's source filesystem; a range that size meets sends nothing. A
/// range above it grows the clone to the smallest whole GiB (the API's
/// unit) at or above `required`. A range below it, or one no whole GiB
/// meets, is refused before anything is made: answering with another size
/// breaks the CSI contract, and every retry would then see AlreadyExists.
fn restore_size_gib(
    c: &Controller,
    want: &CreateRequest,
    snap: &SnapshotId,
) -> Result<Option<u64>, Error> {
    let source = c
        .cloud
        .get_filesystem(snap.space, snap.filesystem)
        .map_err(|e| e.context(format!("source of snapshot {snap}")))?;
    let Some(capacity) = source.max_capacity_bytes else {
        return Ok(None);
    };
    if fits(want, capacity) {
        return Ok(None);
    }
    let out_of_range = |what: String| {
        Err(Error::OutOfRange(format!(
            "snapshot {snap} restores to {capacity} bytes; {what}"
        )))
    };
    if want.required <= capacity {
        return out_of_range(format!(
            "a restore cannot be smaller than its source, and the limit is {} bytes",
            want.limit
        ));
    }
    let gib = (want.required as u64).div_ceil(GIB);
    let grown = gib.saturating_mul(GIB);
    if want.limit > 0 && grown > want.limit as u64 {
        return out_of_range(format!(
            "growing it to {gib} GiB ({grown} bytes) for the required {} bytes exceeds the limit {} bytes",
            want.required, want.limit
        ));
    }
    Ok(Some(gib))
}

fn require_mount_target(fs: &Filesystem) -> Result<(), Error> {
    let has_fqdn = fs
        .mount_target_fqdn
        .as_deref()
        .is_some_and(|s| !s.is_empty());
    if has_fqdn || !fs.mount_target_ips.is_empty() {
        Ok(())
    } else {
        Err(Error::FailedPrecondition(format!(
            "NFS filesystem {} does not have a mount target",
            fs.id
        )))
    }
}

/// The CSI volume for a backend filesystem, with the context the node reads.
pub fn volume_of(fs: &Filesystem, mtls: Option<&MtlsMode>) -> csi::Volume {
    let mut ctx = HashMap::new();
    ctx.insert(handles::CTX_SPACE_ID.to_string(), fs.space_id.to_string());
    ctx.insert(handles::CTX_FILESYSTEM_ID.to_string(), fs.id.to_string());
    ctx.insert(
        handles::CTX_MOUNT_TARGET.to_string(),
        fs.mount_target_fqdn.clone().unwrap_or_default(),
    );
    ctx.insert(
        handles::CTX_MOUNT_TARGET_IPS.to_string(),
        fs.mount_target_ips.join(","),
    );
    ctx.insert(handles::CTX_REGION.to_string(), fs.region.clone());
    if let Some(mode) = mtls.filter(|m| !m.as_str().is_empty()) {
        ctx.insert(
            handles::CTX_MTLS_MODE.to_string(),
            mode.as_str().to_string(),
        );
    }
    let mut v = csi::Volume::new();
    v.volume_id = VolumeId {
        space: fs.space_id,
        filesystem: fs.id,
    }
    .to_string();
    v.capacity_bytes = fs.max_capacity_bytes.unwrap_or(0);
    v.volume_context = ctx;
    v
}

/// Abnormal only in a status the filesystem does not come back from by
/// itself; `creating`, `updating` and statuses new to us pass.
fn condition_of(fs: &Filesystem) -> csi::VolumeCondition {
    let mut condition = csi::VolumeCondition::new();
    condition.abnormal = matches!(fs.status, Status::Error | Status::Failed | Status::Deleting);
    condition.message = format!("NFS filesystem {} is {}", fs.id, fs.status);
    condition
}

/// DeleteVolume. Unknown, malformed or already-deleted volumes are OK (CSI
/// requires it); a filesystem the backend refuses to delete is FailedPrecondition.
pub fn delete_volume(
    c: &Arc<Controller>,
    req: csi::DeleteVolumeRequest,
) -> Result<csi::DeleteVolumeResponse, Error> {
    if req.volume_id.is_empty() {
        return Err(Error::InvalidArgument("volume ID is not set".into()));
    }
    let Ok(id) = VolumeId::parse(&req.volume_id) else {
        log::info!(
            "DeleteVolume: {:?} is not one of our handles; nothing to delete",
            req.volume_id
        );
        return Ok(csi::DeleteVolumeResponse::new());
    };
    match c.cloud.delete_filesystem(id.space, id.filesystem) {
        Ok(()) | Err(Error::NotFound(_)) => Ok(csi::DeleteVolumeResponse::new()),
        Err(e) => Err(e),
    }
}

/// ValidateVolumeCapabilities. NotFound for volumes that do not exist
/// (malformed handles included). Only what holds for this volume is
/// confirmed; anything else (an unsupported capability, parameters or a
/// context that do not describe it, mutable parameters) is a message, not
/// an error.
pub fn validate_capabilities(
    c: &Arc<Controller>,
    req: csi::ValidateVolumeCapabilitiesRequest,
) -> Result<csi::ValidateVolumeCapabilitiesResponse, Error> {
    if req.volume_id.is_empty() {
        return Err(Error::InvalidArgument("volume ID is not set".into()));
    }
    if req.volume_capabilities.is_empty() {
        return Err(Error::InvalidArgument(
            "volume capabilities are required".into(),
        ));
    }
    let id =
        VolumeId::parse(&req.volume_id).map_err(|_| Error::NotFound("volume not found".into()))?;
    let fs = c.cloud.get_filesystem(id.space, id.filesystem)?;
    let mut resp = csi::ValidateVolumeCapabilitiesResponse::new();
    if let Some(problem) = unconfirmable(c, &req, &fs)? {
        resp.message = problem;
        return Ok(resp);
    }
    let mut confirmed = csi::validate_volume_capabilities_response::Confirmed::new();
    confirmed.volume_context = req.volume_context;
    confirmed.volume_capabilities = req.volume_capabilities;
    confirmed.parameters = req.parameters;
    resp.confirmed = Some(confirmed).into();
    Ok(resp)
}

/// Why `req` cannot be confirmed for `fs`, or `None` when it can.
fn unconfirmable(
    c: &Controller,
    req: &csi::ValidateVolumeCapabilitiesRequest,
    fs: &Filesystem,
) -> Result<Option<String>, Error> {
    if let Some(problem) = req.volume_capabilities.iter().find_map(capability_problem) {
        return Ok(Some(problem));
    }
    if !req.mutable_parameters.is_empty() {
        return Ok(Some(
            "mutable parameters are not supported: this driver cannot modify volumes".into(),
        ));
    }
    if let Some(problem) = parameters_problem(c, &req.parameters, fs)? {
        return Ok(Some(problem));
    }
    context_problem(c, &req.volume_context, fs)
}

/// Parameters hold for `fs` when CreateVolume, given them, would have
/// adopted it: they parse, name its space and carry its tags and, if they
/// ask for one, its squash policy. None at all is nothing to check.
fn parameters_problem(
    c: &Controller,
    raw: &HashMap<String, String>,
    fs: &Filesystem,
) -> Result<Option<String>, Error> {
    if raw.is_empty() {
        return Ok(None);
    }
    let params = match Params::parse(raw) {
        Ok(params) => params,
        Err(e) => return Ok(Some(e.to_string())),
    };
    let space = match &params.space {
        SpaceRef::Id(id) => *id,
        SpaceRef::Label(_) => match c.spaces.resolve(&params.space) {
            Ok(space) => space.id,
            Err(Error::NotFound(m) | Error::FailedPrecondition(m)) => return Ok(Some(m)),
            Err(e) => return Err(e),
        },
    };
    if space != fs.space_id {
        return Ok(Some(format!(
            "the parameters name NFS space {space}, but the volume is in NFS space {}",
            fs.space_id
        )));
    }
    let have: BTreeSet<&String> = fs.tags.iter().collect();
    let asked: BTreeSet<&String> = params.tags.iter().collect();
    if have != asked {
        return Ok(Some(format!(
            "the parameters' tags {:?} are not NFS filesystem {}'s tags {:?}",
            params.tags, fs.id, fs.tags
        )));
    }
    if let Some(squash) = &params.squash {
        let policy = c.cloud.get_filesystem_access_policy(fs.space_id, fs.id)?;
        if policy.squash_policy.as_ref() != Some(squash) {
            let have = policy.squash_policy.map_or_else(
                || "no squash policy".to_string(),
                |p| format!("squash policy {p}"),
            );
            return Ok(Some(format!(
                "the parameters ask for squash policy {squash}, but NFS filesystem {} has {have}",
                fs.id
            )));
        }
    }
    Ok(None)
}

/// A context holds for `fs` when every key of it that the driver derives
/// for `fs` has the derived value; other keys are the caller's own.
fn context_problem(
    c: &Controller,
    ctx: &HashMap<String, String>,
    fs: &Filesystem,
) -> Result<Option<String>, Error> {
    // The space policy is read only when there is a mode to compare.
    let mtls = if ctx.contains_key(handles::CTX_MTLS_MODE) {
        c.spaces.mtls_mode(fs.space_id)?
    } else {
        None
    };
    let derived = volume_of(fs, mtls.as_ref()).volume_context;
    let sorted: BTreeMap<&String, &String> = ctx.iter().collect();
    Ok(sorted
        .into_iter()
        .find_map(|(key, value)| match derived.get(key) {
            Some(want) if want != value => Some(format!(
                "volume context {key} is {value:?}, but the volume has {want:?}"
            )),
            _ => None,
        }))
}

/// ControllerGetVolume: the volume, the nodes it is published to (node
/// mode) and its condition.
pub fn get_volume(
    c: &Arc<Controller>,
    req: csi::ControllerGetVolumeRequest,
) -> Result<csi::ControllerGetVolumeResponse, Error> {
    if req.volume_id.is_empty() {
        return Err(Error::InvalidArgument("volume ID is not set".into()));
    }
    let id =
        VolumeId::parse(&req.volume_id).map_err(|_| Error::NotFound("volume not found".into()))?;
    let fs = c.cloud.get_filesystem(id.space, id.filesystem)?;
    let mut status = csi::controller_get_volume_response::VolumeStatus::new();
    if c.mode == crate::config::AccessPolicyMode::Node {
        match c
            .cloud
            .get_filesystem_access_policy(id.space, id.filesystem)
        {
            Ok(policy) if policy.enabled => {
                status.published_node_ids =
                    policy.linode_ids().iter().map(u64::to_string).collect();
            }
            Ok(_) | Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    status.volume_condition = Some(condition_of(&fs)).into();
    let mut resp = csi::ControllerGetVolumeResponse::new();
    let mtls = c.spaces.mtls_mode(id.space)?;
    resp.volume = Some(volume_of(&fs, mtls.as_ref())).into();
    resp.status = Some(status).into();
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_statuses_that_do_not_pass_are_abnormal() {
        let fs = |status: &str| -> Filesystem {
            serde_json::from_value(serde_json::json!({
                "id": 101, "space_id": 7, "label": "v", "region": "us-ord", "status": status
            }))
            .unwrap()
        };
        for (status, abnormal) in [
            ("active", false),
            ("creating", false),
            ("updating", false),
            ("pending", false),
            ("resizing", false),
            ("error", true),
            ("failed", true),
            ("deleting", true),
        ] {
            let c = condition_of(&fs(status));
            assert_eq!(c.abnormal, abnormal, "{status}");
            assert_eq!(c.message, format!("NFS filesystem 101 is {status}"));
        }
    }
}
