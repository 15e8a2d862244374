//! Filling a new directory volume: from a snapshot (a restore: a
//! directory snapshot's directory, or a whole-filesystem snapshot's root)
//! or from another directory volume (a clone: a point-in-time copy
//! through a snapshot of it taken for the purpose, `snapshots::for_clone`).
//! The directory, its marker (saying it is being filled, and from what)
//! and its quota are made first, as for any create; then the snapshot's
//! data is copied in: from the backend's own snapshot directory when the
//! parent shows one (`<root>/.snapshot/<label>/`), else from a temporary
//! clone of the snapshot mounted on the controller (`temporary`), by a
//! copy on a thread of its own (`copies`). The create answers OK only once
//! the copy is complete and the marker says so, so a retry, a restart or
//! a new leader never hands out a half-filled volume: they resume the copy.

mod copies;
mod temporary;

pub use copies::{stop_all, Copies};
pub use temporary::{sweep as sweep_temporaries, Temporaries};

use super::files;
use super::snapshots::{self, for_clone, forget_clone};
use crate::controller::kind::{self, Restorable};
use crate::controller::request::DirSource;
use crate::controller::Controller;
use crate::flow::{done, Step, Then};
use crate::fs_tree::{copy_tree, CopyOptions, CopyStats, Dir};
use crate::handles::{SubdirId, VolumeId, SUBDIRECTORY_BASE};
use crate::linode::Status;
use crate::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a fill copies from, checked before anything is made.
pub enum Plan {
    Snapshot(Box<Restorable>),
    Clone(SubdirId),
}

/// The plan for a volume of `capacity` bytes from `source`: NotFound for a
/// source that is not the driver's, Unavailable while a snapshot is not
/// ready, OutOfRange when the source can hold more than the volume.
pub fn plan(c: &Controller, source: &DirSource, capacity: i64) -> Result<Plan, Error> {
    let (plan, size, what) = match source {
        DirSource::Snapshot(id) => {
            let r = kind::restorable(c, id)?;
            if matches!(r.snapshot.status, Status::Error | Status::Failed) {
                return Err(Error::FailedPrecondition(format!(
                    "snapshot {id} is in status {}",
                    r.snapshot.status
                )));
            }
            let size = r.size_bytes;
            (Plan::Snapshot(Box::new(r)), size, format!("snapshot {id}"))
        }
        DirSource::Volume(id) => {
            let size = super::parent::find(c, id)
                .map_err(|e| match e {
                    Error::NotFound(_) => {
                        Error::NotFound(format!("source volume {id} was not found"))
                    }
                    e => e,
                })?
                .quota
                .and_then(|q| q.max_capacity_bytes)
                .unwrap_or(0);
            (Plan::Clone(id.clone()), size, format!("source volume {id}"))
        }
    };
    if size > capacity {
        return Err(Error::OutOfRange(format!(
            "{what} can hold {size} bytes, more than the {capacity} bytes asked for the new volume; ask for at least {size}"
        )));
    }
    Ok(plan)
}

/// Fills volume `id` (its directory on the parent mounted at `root`) as
/// planned, parked until done; joins the copy already filling it. A
/// clone's snapshot is forgotten once the clone is filled.
pub fn fill(c: &Arc<Controller>, id: SubdirId, root: PathBuf, plan: Plan) -> Step<()> {
    let copied = match c.copies.join(&id) {
        Some(joined) => joined,
        None => match &plan {
            Plan::Snapshot(r) => copy_from(c, id.clone(), &root, (**r).clone()),
            Plan::Clone(source) => {
                let (c2, to, at) = (c.clone(), id.clone(), root.clone());
                for_clone(c, source, &id).then(move |r| copy_from(&c2, to, &at, r))
            }
        },
    };
    let c = c.clone();
    copied.then(move |()| {
        files::mark_filled(&root, &id.name, &id.to_string())?;
        if let Plan::Clone(source) = &plan {
            forget_clone(&c, source, &id)?;
        }
        done(())
    })
}

/// Copies what `r` holds into the directory of `id`.
fn copy_from(c: &Arc<Controller>, id: SubdirId, root: &Path, r: Restorable) -> Step<()> {
    let to = files::volume_dir(root, &id.name);
    if let Some(from) = snapshot_directory(c, &r)? {
        log::info!("filling volume {id} from {}", from.display());
        return c.copies.run(id, move |o| copy(&from, &to, o));
    }
    let c2 = c.clone();
    c.poller.snapshot(r.snapshot.clone(), move |snapshot| {
        let c3 = c2.clone();
        temporary::acquire(&c2, &snapshot).then(move |lease| {
            let from = match &r.dir {
                Some(dir) => lease.root.join(SUBDIRECTORY_BASE).join(dir.as_str()),
                None => lease.root.clone(),
            };
            log::info!("filling volume {id} from {}", from.display());
            c3.copies.run(id, move |o| {
                let copied = copy(&from, &to, o);
                drop(lease);
                copied
            })
        })
    })
}

/// The directory a backend that shows snapshots inside the export keeps
/// `r`'s directory in (`<parent>/.snapshot/<label>/csi-volumes/<dir>`),
/// when the parent is mounted here and shows one.
fn snapshot_directory(c: &Controller, r: &Restorable) -> Result<Option<PathBuf>, Error> {
    let Some(dir) = &r.dir else {
        return Ok(None);
    };
    let parent = VolumeId {
        space: r.snapshot.space_id,
        filesystem: r.snapshot.filesystem_id,
    };
    let root = match snapshots::mounted(c, parent) {
        Ok(root) => root,
        Err(Error::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let shown = root.join(SNAPSHOT_DIRECTORY).join(&r.snapshot.label);
    if !files::is_dir(&root.join(SNAPSHOT_DIRECTORY))? || !files::is_dir(&shown)? {
        return Ok(None);
    }
    Ok(Some(shown.join(SUBDIRECTORY_BASE).join(dir.as_str())))
}

/// Where a backend that shows snapshots inside the export shows them.
const SNAPSHOT_DIRECTORY: &str = ".snapshot";

/// Copies the tree at `from` into the directory `to`.
fn copy(from: &Path, to: &Path, options: &CopyOptions) -> Result<CopyStats, Error> {
    let source = Dir::open(from).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::FailedPrecondition(format!(
                "{} is not in the snapshot: nothing to restore from",
                from.display()
            ))
        } else {
            Error::Internal(format!("open {}: {e}", from.display()))
        }
    })?;
    let target =
        Dir::open(to).map_err(|e| Error::Internal(format!("open {}: {e}", to.display())))?;
    copy_tree(&source, &target, options)
}
