//! ValidateVolumeCapabilities of a whole filesystem: what holds for it and
//! what does not (a capability it cannot serve, parameters CreateVolume
//! would not have adopted it with, a context key with another value).
//! Reads only.

use crate::controller::request::answer::volume_of;
use crate::controller::request::params::{KindParams, Mutable, Params, SpaceRef};
use crate::controller::request::volume_capability::capability_problem;
use crate::controller::state::controller::Controller;
use crate::controller::state::tags;
use crate::handles;
use crate::linode::Filesystem;
use crate::proto::csi;
use crate::Error;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Why `req` cannot be confirmed for `fs`, or `None` when it can.
pub(super) fn unconfirmable(
    c: &Controller,
    req: &csi::ValidateVolumeCapabilitiesRequest,
    fs: &Filesystem,
) -> Result<Option<String>, Error> {
    if let Some(problem) = req.volume_capabilities.iter().find_map(capability_problem) {
        return Ok(Some(problem));
    }
    if let Some(problem) = parameters_problem(c, &req.parameters, &req.mutable_parameters, fs)? {
        return Ok(Some(problem));
    }
    context_problem(c, &req.volume_context, fs)
}

/// Parameters hold for `fs` when CreateVolume, given them, would have
/// adopted it: they parse, name its space and carry its tags and, if they
/// ask for one, its squash policy; mutable parameters override the tags and
/// the squash policy as they do in CreateVolume. None at all is nothing to
/// check.
fn parameters_problem(
    c: &Controller,
    raw: &HashMap<String, String>,
    mutable_raw: &HashMap<String, String>,
    fs: &Filesystem,
) -> Result<Option<String>, Error> {
    let mutable = match Mutable::parse(mutable_raw).and_then(|m| m.check_filesystem().map(|()| m)) {
        Ok(mutable) => mutable,
        Err(e) => return Ok(Some(e.to_string())),
    };
    let (tags_asked, squash) = if raw.is_empty() {
        (mutable.tags, mutable.squash)
    } else {
        let params = match Params::parse(raw) {
            Ok(params) => params,
            Err(e) => return Ok(Some(e.to_string())),
        };
        let KindParams::Filesystem(class) = params.kind else {
            return Ok(Some(format!(
                "the parameters describe a subdirectory volume, but NFS filesystem {} is a whole-filesystem volume",
                fs.id
            )));
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
        (
            Some(mutable.tags.unwrap_or(class.tags)),
            mutable.squash.or(class.squash),
        )
    };
    if let Some(asked) = tags_asked {
        let want: BTreeSet<&str> = asked.iter().map(String::as_str).collect();
        let have = tags::user_tags(&fs.tags);
        if have != want {
            return Ok(Some(format!(
                "the parameters' tags {asked:?} are not NFS filesystem {}'s tags {have:?}",
                fs.id
            )));
        }
    }
    if let Some(squash) = &squash {
        let Some(policy) = c.cloud.get_filesystem_access_policy(fs.space_id, fs.id)? else {
            return Ok(Some(format!(
                "the parameters ask for squash policy {squash}, but the backend has no per-filesystem access policy for NFS filesystem {}",
                fs.id
            )));
        };
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
