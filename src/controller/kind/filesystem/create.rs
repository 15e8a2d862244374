//! CreateVolume of a whole filesystem: create (or adopt what an earlier
//! attempt made), restore from a snapshot by cloning, clone a volume
//! through a copy snapshot (`clone`), then apply the squash policy.
//! Idempotency rests on the deterministic label plus the per-label lock;
//! nothing here is HTTP-aware beyond `dyn Cloud`. The `Cloud` errors
//! already name the call and the object, so they are passed on as they are.

use super::{clone, snapshots};
use crate::controller::acl::{self, policy::no_filesystem_policy};
use crate::controller::request::answer::{content_source, require_mount_target, volume_of};
use crate::controller::request::create::{CreateRequest, Source};
use crate::controller::state::controller::Controller;
use crate::controller::state::lock_keys::{Doubt, Lock};
use crate::controller::state::tags;
use crate::controller::state::tags::Maker;
use crate::flow::{done, Flow, Step, Then};
use crate::handles::{SnapshotId, VolumeId};
use crate::linode::{CloneFilesystem, Filesystem, MtlsMode, NewFilesystem, Status, WriteError};
use crate::proto::csi;
use crate::Error;
use std::collections::BTreeSet;
use std::sync::Arc;

/// The clone API sizes filesystems in whole GiB.
const GIB: u64 = 1 << 30;

/// Everything a new filesystem is tagged with: the user's tags, the
/// driver's mark, and what it was made from.
fn tags_to_create(c: &Controller, want: &CreateRequest) -> Vec<String> {
    let mut all = want.tags.clone();
    all.extend(c.marks.with_cluster(&[tags::MANAGED]));
    match want.source {
        Some((Source::Snapshot(snap), _)) => all.push(tags::source_snapshot(&snap)),
        Some((Source::Volume(vol), _)) => all.push(tags::source_volume(&vol)),
        None => {}
    }
    all
}

/// CreateVolume of a filesystem class. AlreadyExists for a name held by
/// an incompatible filesystem, NotFound for a source that does not exist,
/// OutOfRange for a restore or clone its source cannot size; repeats return
/// the same volume. The label lookup, the wait for activation and the one
/// for the squash policy park on the poller (the lookup shares its Space's
/// refresh with every other); the create lock goes with the flow until it
/// is answered.
pub fn create(c: &Arc<Controller>, want: Arc<CreateRequest>) -> Step<csi::CreateVolumeResponse> {
    // The label is what the backend knows: two names that map to one label
    // (they differ in case, say) are one filesystem and must not both POST.
    let guard = c.lock(Lock::Create {
        label: want.label.clone(),
    })?;
    let region = c.cluster.region()?;
    let space = c.spaces.resolve(&want.params.space)?;
    let mtls = c.spaces.mtls_mode(space.id)?;
    let (space_id, asked, c2, looked_in) = (space.id, want.clone(), c.clone(), region.clone());
    c.poller
        .filesystems_labelled(space.id, &want.label, &looked_in, move |found| {
            let existing = c2.spaces.checked(
                space_id,
                found.and_then(|f| pick(&c2, space_id, &asked.label, f)),
            )?;
            create_or_adopt(&c2, asked, space_id, region, existing)
        })
        .then(move |fs| {
            drop(guard);
            done(created(&want, &fs, mtls.as_ref()))
        })
}

/// The rest of CreateVolume once the label lookup said what exists.
fn create_or_adopt(
    c: &Arc<Controller>,
    want: Arc<CreateRequest>,
    space_id: u64,
    region: String,
    existing: Option<Filesystem>,
) -> Step<Filesystem> {
    let doubt = filesystem_key(space_id, &want.label);
    match &existing {
        Some(_) => c.in_doubt.clear(&doubt),
        None => c
            .in_doubt
            .check(&doubt, &format!("create NFS filesystem \"{}\"", want.label))?,
    }
    if existing.is_none() && want.squash.is_some() && c.cloud.lacks_filesystem_policies() {
        // The squash policy could not be set: make nothing to leave behind.
        return Err(no_filesystem_policy(format!(
            "new NFS filesystem \"{}\"",
            want.label
        )));
    }
    let adopting = existing.is_some();
    let made = match existing {
        Some(existing) => adopt(c, &want, region, existing),
        None => provision(c, &want, space_id, region),
    };
    let (c, after) = (c.clone(), want.clone());
    made.then(move |fs| match after.source {
        // Whoever made the clone, its copy snapshot must not outlive it.
        Some((Source::Volume(source), _)) => {
            clone::release_copy(&c, source, &after.label, fs).then(move |fs| done((c, after, fs)))
        }
        _ => done((c, after, fs)),
    })
    .then(move |(c, after, fs)| {
        let Some(squash) = after.squash.clone() else {
            return done(fs);
        };
        let vol = VolumeId {
            space: fs.space_id,
            filesystem: fs.id,
        };
        acl::set_squash(&c, vol, squash, adopting).then(move |()| done(fs))
    })
}

/// The CreateVolume answer for `fs`.
fn created(
    want: &CreateRequest,
    fs: &Filesystem,
    mtls: Option<&MtlsMode>,
) -> csi::CreateVolumeResponse {
    let mut volume = volume_of(fs, mtls);
    if sized_by_backend(fs) {
        if !fits(want, volume.capacity_bytes) {
            // Not what was asked, and not a size to promise either.
            volume.capacity_bytes = 0;
        }
    } else if volume.capacity_bytes == 0 {
        volume.capacity_bytes = want.capacity;
    }
    if let Some((source, raw)) = &want.source {
        volume.content_source =
            Some(content_source(matches!(source, Source::Snapshot(_)), raw)).into();
    }
    let mut resp = csi::CreateVolumeResponse::new();
    resp.volume = Some(volume).into();
    resp
}

/// What a create's outcome is tracked under (see `in_doubt`).
fn filesystem_key(space_id: u64, label: &str) -> Doubt {
    Doubt::Filesystem {
        space: space_id,
        label: label.to_string(),
    }
}

/// The one live filesystem carrying `label` in `region` (see `pick`), read
/// at once: after a create whose outcome is unknown.
fn find_by_label(
    c: &Controller,
    space_id: u64,
    label: &str,
    region: &str,
) -> Result<Option<Filesystem>, Error> {
    pick(
        c,
        space_id,
        label,
        c.cloud.find_filesystems(space_id, label, region)?,
    )
}

/// The one live filesystem among `found` (those carrying `label` in the
/// region); one on its way out (`deleting`) is not a match: it will never
/// serve this volume. Several of ours with one label are the late landing
/// of a create whose outcome was unknown across a restart: the first made
/// is the volume (it is the only one a caller can have been given), the
/// rest are deleted.
fn pick(
    c: &Controller,
    space_id: u64,
    label: &str,
    found: Vec<Filesystem>,
) -> Result<Option<Filesystem>, Error> {
    // Another cluster's filesystem of the same name is never this one's.
    let mut found: Vec<Filesystem> = found
        .into_iter()
        .filter(|fs| fs.status != Status::Deleting && c.marks.maker(&fs.tags) != Maker::Other)
        .collect();
    found.sort_by_key(|fs| fs.id);
    match found.len() {
        0 => Ok(None),
        1 => Ok(Some(found.remove(0))),
        _ if found.iter().all(|fs| c.marks.is_volume(fs)) => {
            let first = found.remove(0);
            for duplicate in found {
                delete_duplicate(c, &first, &duplicate);
            }
            Ok(Some(first))
        }
        _ => Err(Error::FailedPrecondition(format!(
            "multiple NFS filesystems match label \"{label}\" in space {space_id}"
        ))),
    }
}

/// Deletes a filesystem of ours made a second time for the volume `kept`
/// (by a create whose reply was lost); no caller ever had its id.
pub(super) fn delete_duplicate(c: &Controller, kept: &Filesystem, duplicate: &Filesystem) {
    log::warn!(
        "deleting NFS filesystem {}: a duplicate of {} (\"{}\") left by a create whose outcome was unknown",
        duplicate.id,
        kept.id,
        kept.label
    );
    match c.cloud.delete_filesystem(duplicate.space_id, duplicate.id) {
        Ok(()) | Err(Error::NotFound(_)) => {}
        Err(e) => log::warn!("deleting duplicate NFS filesystem {}: {e}", duplicate.id),
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
        if let (Some(capacity), false) = (fs.capacity_bytes(), sized_by_backend(&fs)) {
            if !fits(&want, capacity) {
                return Err(Error::AlreadyExists(format!(
                    "NFS filesystem \"{}\" already exists with incompatible capacity {capacity}",
                    want.label
                )));
            }
        }
        let asked: BTreeSet<&str> = want.tags.iter().map(String::as_str).collect();
        if tags::user_tags(&fs.tags) != asked {
            return Err(Error::AlreadyExists(format!(
                "NFS filesystem \"{}\" already exists with incompatible tags",
                want.label
            )));
        }
        require_mount_target(&fs)?;
        done(fs)
    })
}

/// The source an existing filesystem was made from must be the one asked
/// for. The API's `source_snapshot_id` is not always returned, so the
/// driver's own tag counts as well.
fn check_source(want: &CreateRequest, fs: &Filesystem) -> Result<(), Error> {
    let sourced = |tag: &str| fs.tags.iter().any(|t| t == tag);
    let made_from = match want.source {
        None => None,
        Some((Source::Snapshot(snap), _)) => {
            let from_it = fs.source_snapshot_id == Some(snap.snapshot)
                || sourced(&tags::source_snapshot(&snap));
            Some((from_it, format!("snapshot {snap}")))
        }
        Some((Source::Volume(vol), _)) => {
            Some((sourced(&tags::source_volume(&vol)), format!("volume {vol}")))
        }
    };
    let has_source = fs.source_snapshot_id.is_some() || tags::records_a_source(&fs.tags);
    match made_from {
        None if !has_source => Ok(()),
        None => Err(Error::AlreadyExists(format!(
            "NFS filesystem {} (\"{}\") was made from a snapshot or volume; the request has no content source",
            fs.id, want.label
        ))),
        Some((true, _)) => Ok(()),
        Some((false, what)) => Err(Error::AlreadyExists(format!(
            "NFS filesystem {} (\"{}\") was not made from the requested {what}",
            fs.id, want.label
        ))),
    }
}

/// Creates (or clones) the filesystem and waits for it.
fn provision(
    c: &Arc<Controller>,
    want: &Arc<CreateRequest>,
    space_id: u64,
    region: String,
) -> Step<Filesystem> {
    match want.source {
        None => {
            let posted = c.cloud.create_filesystem(
                space_id,
                &NewFilesystem {
                    label: want.label.clone(),
                    region: region.clone(),
                    max_capacity_bytes: want.capacity,
                    tags: tags_to_create(c, want),
                },
            );
            wait_made(c, want, space_id, &region, posted)
        }
        Some((Source::Snapshot(snap), _)) => {
            // A restore from a snapshot that is still being taken waits for
            // it rather than failing the clone. Only a snapshot the driver
            // took of one of its volumes is restored: one of a shared
            // parent would hand every tenant's data to this volume.
            let source = snapshots::owned(c, snap)
                .map_err(|e| e.context(format!("source snapshot {snap}")))?;
            let (c, want) = (c.clone(), want.clone());
            c.clone().poller.snapshot(source, move |_| {
                clone_into(&c, &want, snap, space_id, &region)
            })
        }
        Some((Source::Volume(vol), _)) => {
            let source = clone::source_volume(c, vol)?;
            // Sized before anything is made: a size the source cannot
            // give must not leave a copy behind.
            let size_gib = size_gib_for(want, source.capacity_bytes(), &format!("volume {vol}"))?;
            let (c2, want2) = (c.clone(), want.clone());
            let cleanup = (c.clone(), want.label.clone());
            clone::copy_of(c, &source, &want.label)
                .then(move |snap| {
                    let posted = post_clone(&c2, &want2, snap, space_id, &region, size_gib);
                    wait_made(&c2, &want2, space_id, &region, posted)
                })
                .then_result(move |made| match made {
                    // A clone that cannot be made does not keep its copy;
                    // a retry takes it again.
                    Err(e) if !transient(&e) => {
                        if let Err(again) = clone::forget_copy(&cleanup.0, vol, &cleanup.1) {
                            log::warn!("after a failed clone: {again}");
                        }
                        Err(e)
                    }
                    made => made.map(Flow::Ready),
                })
        }
    }
}

/// Failures a retry may get past; a copy is kept for it.
fn transient(e: &Error) -> bool {
    matches!(
        e,
        Error::Unavailable(_) | Error::DeadlineExceeded(_) | Error::Canceled(_) | Error::Aborted(_)
    )
}

/// Clones `snap` into the new filesystem, sized to the request.
fn clone_into(
    c: &Arc<Controller>,
    want: &CreateRequest,
    snap: SnapshotId,
    space_id: u64,
    region: &str,
) -> Step<Filesystem> {
    let source = c
        .cloud
        .get_filesystem(snap.space, snap.filesystem)
        .map_err(|e| e.context(format!("source of snapshot {snap}")))?;
    let size_gib = size_gib_for(want, source.capacity_bytes(), &format!("snapshot {snap}"))?;
    let posted = post_clone(c, want, snap, space_id, region, size_gib);
    wait_made(c, want, space_id, region, posted)
}

fn post_clone(
    c: &Controller,
    want: &CreateRequest,
    snap: SnapshotId,
    space_id: u64,
    region: &str,
    size_gib: Option<u64>,
) -> Result<Filesystem, WriteError> {
    c.cloud.clone_snapshot(
        snap.space,
        snap.filesystem,
        snap.snapshot,
        &CloneFilesystem {
            label: want.label.clone(),
            region: region.to_string(),
            space_id: Some(space_id),
            size_gib,
            tags: tags_to_create(c, want),
        },
    )
}

/// What a create or clone POST made, once active with a mount target. A
/// POST is never repeated blindly: when its outcome is unknown (5xx,
/// timeout) the label is looked up once, so a create that happened is
/// adopted instead of leaked.
fn wait_made(
    c: &Controller,
    want: &CreateRequest,
    space_id: u64,
    region: &str,
    posted: Result<Filesystem, WriteError>,
) -> Step<Filesystem> {
    let fs = match posted {
        Ok(fs) => fs,
        Err(WriteError {
            error: e @ (Error::Unavailable(_) | Error::Internal(_) | Error::DeadlineExceeded(_)),
            maybe_applied,
        }) => match find_by_label(c, space_id, &want.label, region) {
            Ok(Some(fs)) => {
                log::warn!(
                    "create of \"{}\" reported {e}; adopting filesystem {}",
                    want.label,
                    fs.id
                );
                fs
            }
            _ => {
                if maybe_applied {
                    c.in_doubt.record(&filesystem_key(space_id, &want.label));
                }
                return Err(e);
            }
        },
        Err(e) => return c.spaces.checked(space_id, Err(e.error)),
    };
    c.poller.filesystem(fs, |fs| {
        require_mount_target(&fs)?;
        done(fs)
    })
}

/// A backend whose create takes no capacity shows one only in `stats`: the
/// size is its own choice, the same whatever was asked. It is reported when
/// it meets the requested range, else as unknown (0, which CSI allows for
/// a share whose size is not the volume's), and it cannot tell two requests
/// apart, so an adopted filesystem is not refused for it.
fn sized_by_backend(fs: &Filesystem) -> bool {
    fs.max_capacity_bytes.is_none() && fs.capacity_bytes().is_some()
}

/// Whether a filesystem of `capacity` bytes meets the requested range.
fn fits(want: &CreateRequest, capacity: i64) -> bool {
    let too_small = want.required > 0 && capacity < want.required;
    let too_big = want.limit > 0 && capacity > want.limit;
    !(too_small || too_big)
}

/// The size to ask of a clone of `what`, whose source holds `capacity`.
/// Unasked, a clone is as large as its source; a range that size meets
/// sends nothing. A range above it grows the clone to the smallest whole
/// GiB (the API's unit) at or above `required`. A range below it, or one no
/// whole GiB meets, is refused before anything is made: answering with
/// another size breaks the CSI contract, and every retry would then see
/// AlreadyExists.
fn size_gib_for(
    want: &CreateRequest,
    capacity: Option<i64>,
    what: &str,
) -> Result<Option<u64>, Error> {
    let Some(capacity) = capacity else {
        return Ok(None);
    };
    if fits(want, capacity) {
        return Ok(None);
    }
    let out_of_range = |why: String| {
        Err(Error::OutOfRange(format!(
            "{what} restores to {capacity} bytes; {why}"
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
