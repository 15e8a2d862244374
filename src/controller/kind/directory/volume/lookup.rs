//! The shared parent of directory volumes and what stands on it: the
//! parent a class names (checked to be a shared filesystem, never one of
//! the driver's whole-filesystem volumes), the parent of an existing
//! volume, and an existing volume itself, which is its ownership marker
//! (a quota at its path alone is not a volume: an admin may have made it).
//! Reads only; the parent is mounted through `shares` and remembered for
//! a short time in `parent_cache`, and its quotas are read through its
//! account (`quota_list`), which lists them when it is due.

use crate::controller::kind::directory::ledger::account::Purpose;
use crate::controller::kind::directory::ledger::quota_lists::QuotaList;
use crate::controller::kind::directory::ledger::quotas;
use crate::controller::kind::directory::parent::{files, kept};
use crate::controller::request::answer::{id_of, require_mount_target};
use crate::controller::request::checks::exactly_one;
use crate::controller::request::params::ParentRef;
use crate::controller::state::controller::Controller;
use crate::controller::state::tags::{is_any_volume, is_restore_source};
use crate::handles::{DirName, SubdirId, VolumeId};
use crate::linode::{Filesystem, MtlsMode, Quota, Status};
use crate::Error;
use std::path::PathBuf;
use std::time::Instant;

/// How a class names its parent, when it names one.
#[derive(Clone, Copy)]
enum Named<'a> {
    Id(u64),
    Label(&'a str),
}

/// The shared parent a class names, checked: active, not a volume of this
/// driver, in the cluster's region, with a mount target. A pool's volumes
/// are placed (`pool::place`), never given one parent.
pub fn parent_of(
    c: &Controller,
    space_id: u64,
    parent: &ParentRef,
    region: &str,
) -> Result<Filesystem, Error> {
    let named = match parent {
        ParentRef::Id(id) => Named::Id(*id),
        ParentRef::Label(label) => Named::Label(label),
        ParentRef::Pool(pool) => {
            return Err(Error::Internal(format!(
                "pool \"{}\" has no single shared filesystem: its volumes are placed",
                pool.name
            )))
        }
    };
    let cached = match named {
        Named::Id(id) => c.parent_cache.get(VolumeId {
            space: space_id,
            filesystem: id,
        }),
        Named::Label(label) => c.parent_cache.labelled(space_id, label, region),
    };
    if let Some(fs) = cached {
        return checked(space_id, fs, region);
    }
    let fs = match named {
        Named::Id(id) => match c.cloud.get_filesystem(space_id, id) {
            Ok(fs) => fs,
            Err(Error::NotFound(_)) => {
                return Err(Error::NotFound(format!(
                    "shared NFS filesystem {space_id}/{id} was not found"
                )))
            }
            Err(e) => return c.spaces.checked(space_id, Err(e)),
        },
        Named::Label(label) => {
            let found: Vec<Filesystem> = c
                .spaces
                .checked(space_id, c.cloud.find_filesystems(space_id, label, region))?
                .into_iter()
                .filter(|fs| fs.status != Status::Deleting)
                .collect();
            exactly_one(
                found,
                || {
                    Error::NotFound(format!(
                        "shared NFS filesystem \"{label}\" was not found in space {space_id}, region {region}"
                    ))
                },
                || {
                    Error::FailedPrecondition(format!(
                        "multiple NFS filesystems match label \"{label}\" in space {space_id}"
                    ))
                },
            )?
        }
    };
    let fs = checked(space_id, fs, region)?;
    let lookup = match named {
        Named::Id(_) => None,
        Named::Label(label) => Some((label, region)),
    };
    c.parent_cache.remember(&fs, lookup);
    Ok(fs)
}

/// `fs` if it can be the parent of directory volumes here.
fn checked(space_id: u64, fs: Filesystem, region: &str) -> Result<Filesystem, Error> {
    if is_any_volume(&fs) || is_restore_source(&fs) {
        return Err(Error::FailedPrecondition(format!(
            "NFS filesystem {space_id}/{} is a volume of this driver (or a restore's temporary filesystem), not a shared filesystem",
            fs.id
        )));
    }
    if fs.status != Status::Active {
        return Err(Error::FailedPrecondition(format!(
            "shared NFS filesystem {space_id}/{} is {}, not active",
            fs.id, fs.status
        )));
    }
    if fs.region != region {
        return Err(Error::FailedPrecondition(format!(
            "shared NFS filesystem {space_id}/{} is in region \"{}\", the cluster in \"{region}\"",
            fs.id, fs.region
        )));
    }
    require_mount_target(&fs)?;
    Ok(fs)
}

/// The parent of an existing directory volume, NotFound when it is gone or
/// is no shared filesystem (a whole-filesystem volume of the driver).
pub fn existing_parent(c: &Controller, parent: VolumeId) -> Result<Filesystem, Error> {
    let can_be = |fs: &Filesystem| {
        fs.status != Status::Deleting && !is_any_volume(fs) && !is_restore_source(fs)
    };
    if let Some(fs) = c.parent_cache.get(parent).filter(can_be) {
        return Ok(fs);
    }
    match c.cloud.get_filesystem(parent.space, parent.filesystem) {
        Ok(fs) if can_be(&fs) => {
            c.parent_cache.remember(&fs, None);
            Ok(fs)
        }
        Ok(_) | Err(Error::NotFound(_)) => Err(Error::NotFound(format!(
            "shared NFS filesystem {parent} was not found"
        ))),
        Err(e) => Err(e),
    }
}

/// What is known of an existing directory volume.
pub struct Found {
    pub parent: Filesystem,
    pub mtls: Option<MtlsMode>,
    /// Where the parent is mounted here.
    pub root: PathBuf,
    /// Its quota, if it has one...
    pub quota: Option<Quota>,
    /// ...among every quota of the parent (none without the quota API)...
    pub quotas: Vec<Quota>,
    /// ...listed from this moment on.
    pub read_at: Instant,
}

/// The current state of directory volume `id`: NotFound unless the
/// driver's marker says it exists (a quota at its path alone is not a
/// volume: an admin may have made it), and is not still being filled.
pub fn find(c: &Controller, id: &SubdirId) -> Result<Found, Error> {
    find_for(c, id, Purpose::Read)
}

/// `find`, with the quotas as fresh as `purpose` needs.
pub fn find_for(c: &Controller, id: &SubdirId, purpose: Purpose) -> Result<Found, Error> {
    let parent = existing_parent(c, id.parent())?;
    let mtls = c.spaces.mtls_mode(id.space)?;
    let root = c.shares.root(&parent, mtls.as_ref())?;
    match files::read_marker(&root, &id.name)? {
        Some(m)
            if m.volume_id == id.to_string()
                && m.is_of(c.marks.cluster())
                && !m.retained
                && !m.filling => {}
        _ => return Err(Error::NotFound(format!("volume {id} not found"))),
    }
    let (read_at, listed) = quota_list(c, &parent, purpose);
    let quotas = match listed {
        Ok(all) => all,
        Err(Error::Unimplemented(_)) => Vec::new(),
        Err(e) => return Err(e),
    };
    let quota = quotas::of_volume(&quotas, &parent, &id.name).cloned();
    Ok(Found {
        parent,
        mtls,
        root,
        quota,
        quotas,
        read_at,
    })
}

/// What parent `fs`, mounted here, can still promise: its capacity
/// (`unknown` when the backend shows none) less the maxima of its quotas
/// (its root quota aside) and what deleted volumes keep on it.
pub fn room_left(
    c: &Controller,
    fs: &Filesystem,
    mtls: Option<&MtlsMode>,
    unknown: i64,
) -> Result<i64, Error> {
    let kept = kept::total(&c.shares.root(fs, mtls)?)?;
    let (promised, used) = match quota_list(c, fs, Purpose::Read).1 {
        Ok(all) => (quotas::promised(&all), quotas::root_used(&all)),
        Err(Error::Unimplemented(_)) => (0, 0),
        Err(e) => return Err(e),
    };
    let taken = promised.saturating_add(kept).max(used);
    Ok((fs.capacity_bytes().unwrap_or(unknown) - taken).max(0))
}

/// The quotas of parent `fs` as its account holds them (`account`), and
/// the moment they were current: listed first (one list shared with the
/// calls waiting with this one, `quota_lists`) when the account is due
/// for `purpose`, and always on a standby, whose account its own writes do
/// not keep. A 404 forgets the remembered parent and its account.
pub fn quota_list(c: &Controller, fs: &Filesystem, purpose: Purpose) -> QuotaList {
    let vol = id_of(fs);
    let purpose = if c.lease.is_held() {
        purpose
    } else {
        Purpose::Fresh
    };
    let reason = match c.accounts.held(vol, purpose) {
        Ok(held) => return (held.0, Ok(held.1)),
        Err(reason) => reason,
    };
    let (read_at, listed) = c
        .quota_lists
        .list(vol, || c.cloud.list_quotas(vol.space, vol.filesystem));
    match listed {
        Ok(all) => {
            crate::metrics::account_read(reason.name());
            let merged = c
                .accounts
                .merge(vol, read_at, all, |q| quotas::volume_name(q, fs));
            check_markers(c, fs, merged.unchecked);
            (merged.at, Ok(merged.quotas))
        }
        Err(e) => {
            if e.is_not_found() {
                c.parent_cache.forget(vol);
                c.accounts.forget(vol);
            }
            (read_at, Err(e))
        }
    }
}

/// Tells the account of `fs` which of the volume directories `names`
/// are another cluster's, by their markers; one that cannot be read is
/// taken to be, so writes beside it read the account again first.
fn check_markers(c: &Controller, fs: &Filesystem, names: Vec<DirName>) {
    if names.is_empty() {
        return;
    }
    let vol = id_of(fs);
    let root = c
        .spaces
        .mtls_mode(fs.space_id)
        .and_then(|mtls| c.shares.root(fs, mtls.as_ref()));
    for name in names {
        let foreign = match root.as_ref().map(|root| files::read_marker(root, &name)) {
            Ok(Ok(Some(m))) => !m.is_of(c.marks.cluster()),
            Ok(Ok(None)) => false,
            Ok(Err(_)) | Err(_) => true,
        };
        c.accounts.checked(vol, name, foreign);
    }
}
