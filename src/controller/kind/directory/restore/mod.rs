//! Filling a new directory volume: from a snapshot (a restore: a
//! directory snapshot's directory, or a whole-filesystem snapshot's root)
//! or from another directory volume (a clone: a point-in-time copy
//! through a snapshot of it taken for the purpose, `snapshots::for_clone`).
//! The directory, its marker (saying it is being filled, and from what)
//! and its quota are made first, as for any create; then the fill runs as
//! a job of the controller (`jobs`), owned by no call: the snapshot's data
//! is copied in from the backend's own snapshot directory when the parent
//! shows one (`<root>/.snapshot/<label>/`), else from a temporary clone of
//! the snapshot mounted on the controller (`temporary`), by a copy on a
//! thread of its own (`copies`). A create answers OK only once the copy is
//! complete and the marker says so; a call that ends first only stops
//! waiting, a retry joins the job, and after a restart the upkeep resumes
//! it from the marker (`resume`), so no one is ever handed a half-filled
//! volume. A fill that fails finally takes its volume with it.

mod copies;
mod holders;
mod jobs;
mod temporary;

pub use copies::{stop_all, Copies};
pub use holders::Temporaries;
pub use jobs::Fills;
pub use temporary::sweep as sweep_temporaries;

use super::account::Purpose;
use super::files;
use super::parent::{existing_parent, quota_list};
use super::quotas;
use super::snapshots::{self, fills, for_clone, forget_clone};
use crate::controller::kind::{self, Restorable};
use crate::controller::lock_keys::Doubt;
use crate::controller::request::DirSource;
use crate::controller::Controller;
use crate::flow::{done, Step, Then};
use crate::fs_tree::{copy_tree, CopyOptions, CopyStats, Dir};
use crate::handles::{SnapshotHandle, SubdirId, VolumeId, SUBDIRECTORY_BASE};
use crate::linode::Status;
use crate::Error;
use jobs::Job;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use temporary::Loan;

/// What a fill copies from, checked before anything is made.
#[derive(Clone)]
pub enum Plan {
    Snapshot(Box<Restorable>),
    Clone(SubdirId),
    /// A job fills the volume already.
    Joined,
}

/// The plan for a volume of `capacity` bytes from `source`: NotFound for a
/// source that is not the driver's, Unavailable while a snapshot is not
/// ready, OutOfRange when the source can hold more than the volume.
pub fn plan(c: &Controller, source: &DirSource, capacity: i64) -> Result<Plan, Error> {
    let (plan, size, what) = planned(c, source)?;
    if size > capacity {
        return Err(Error::OutOfRange(format!(
            "{what} can hold {size} bytes, more than the {capacity} bytes asked for the new volume; ask for at least {size}"
        )));
    }
    Ok(plan)
}

/// The plan from `source`, what its source can hold and what it is.
fn planned(c: &Controller, source: &DirSource) -> Result<(Plan, i64, String), Error> {
    Ok(match source {
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
    })
}

/// Fills volume `id` (its directory on the parent mounted at `root`) as
/// planned: a job of its own, which this call waits for (parked, at most
/// `LINODE_WAIT_TIMEOUT`) and a later call joins. A clone's snapshot is
/// forgotten once the clone is filled.
pub fn fill(c: &Arc<Controller>, id: SubdirId, root: PathBuf, plan: Plan) -> Step<()> {
    match plan {
        Plan::Joined => jobs::join(c, &id).unwrap_or_else(|| {
            Err(Error::Unavailable(format!(
                "the fill of volume {id} ended just now; retry to see how"
            )))
        }),
        plan => jobs::run(c, Fill { id, root, plan }, true),
    }
}

/// The plan of volume `id` (on the parent mounted at `root`) from
/// `source` (written `raw`), as `plan`, unless a job fills it already:
/// then a call only joins it (the source may be gone by now, held by the
/// job). A source that can no longer fill a volume an earlier attempt
/// began takes that volume with it: the call answers the final error, and
/// nothing is left.
pub fn plan_of(
    c: &Controller,
    id: &SubdirId,
    root: &Path,
    (source, raw): (&DirSource, &str),
    capacity: i64,
) -> Result<Plan, Error> {
    if c.fills.is_running(id) {
        return Ok(Plan::Joined);
    }
    plan(c, source, capacity).inspect_err(|e| {
        if jobs::is_final(e) {
            if let Err(left) = abandon(c, id, root, raw) {
                log::warn!("volume {id}: what its fill began is left for the upkeep: {left}");
            }
        }
    })
}

/// Starts the fill of volume `id` (on the parent mounted at `root`) from
/// `source`, as its marker records it, unless a job fills it already: a
/// restart's, or a new leader's, resumption of what a call began. A
/// source that is gone ends it as any final failure does.
pub fn resume(c: &Arc<Controller>, id: SubdirId, root: PathBuf, source: &str) -> Result<(), Error> {
    if c.fills.is_running(&id) {
        return Ok(());
    }
    let planned = source_of(source).and_then(|s| planned(c, &s).map(|(plan, _, _)| plan));
    let plan = match planned {
        Ok(plan) => plan,
        Err(e) if jobs::is_final(&e) => {
            log::warn!("volume {id}: its fill cannot go on: {e}");
            return abandon(c, &id, &root, source);
        }
        Err(e) => return Err(e),
    };
    log::info!("volume {id}: resuming its fill from {source}");
    jobs::run(c, Fill { id, root, plan }, false).map(drop)
}

/// Ends the fill of volume `id` from `source` (as written) that can no
/// longer go on: what it made is removed, and what its job held let go.
fn abandon(c: &Controller, id: &SubdirId, root: &Path, source: &str) -> Result<(), Error> {
    discard(c, id, root, None)?;
    match source_of(source) {
        Ok(source) => let_go(c, &source, id),
        Err(_) => Ok(()),
    }
}

/// The source a marker records, as the request named it: a volume id
/// parses as a directory volume's (its last part is a directory name,
/// which starts with a letter), anything else as a snapshot's.
pub fn source_of(raw: &str) -> Result<DirSource, Error> {
    if let Ok(id) = SubdirId::parse(raw) {
        return Ok(DirSource::Volume(id));
    }
    SnapshotHandle::parse(raw)
        .map(DirSource::Snapshot)
        .map_err(|_| {
            Error::NotFound(format!(
                "source {raw:?} is no snapshot or volume of the driver"
            ))
        })
}

/// One volume's fill: the job `jobs` runs.
struct Fill {
    id: SubdirId,
    root: PathBuf,
    plan: Plan,
}

impl jobs::Work for Fill {
    fn volume(&self) -> &SubdirId {
        &self.id
    }

    fn attempt(&self, c: &Arc<Controller>, job: &Arc<Job>) -> Step<()> {
        let id = self.id.clone();
        match files::read_marker(&self.root, &id.name)? {
            Some(m)
                if m.volume_id == id.to_string()
                    && m.is_of(c.marks.cluster())
                    && !job.is_cancelled() =>
            {
                if !m.filling {
                    return done(());
                }
            }
            _ => {
                job.cancel();
                return Err(Error::Aborted(format!(
                    "volume {id} is being deleted: its fill stops"
                )));
            }
        }
        let (c2, job2, root) = (c.clone(), job.clone(), self.root.clone());
        let copied = match &self.plan {
            Plan::Joined => return Err(Error::Internal("a joined fill has no job".into())),
            Plan::Snapshot(r) => {
                if let (Some(_), Some(vol)) = (&r.dir, parent_of(r)) {
                    fills::hold(c, vol, &r.snapshot.label, &id)?;
                }
                copy_from(c, job, id.clone(), &root, (**r).clone())
            }
            Plan::Clone(source) => {
                let (to, at) = (id.clone(), root.clone());
                for_clone(c, source, &id).then(move |r| copy_from(&c2, &job2, to, &at, r))
            }
        };
        let (c, plan) = (c.clone(), self.plan.clone());
        copied.then(move |()| {
            files::mark_filled(&root, &id.name, &id.to_string())?;
            if let Plan::Clone(source) = &plan {
                forget_clone(&c, source, &id)?;
            }
            done(())
        })
    }

    fn end(&self, c: &Controller, failed: Option<&Error>) {
        if failed.is_some() {
            let source = match &self.plan {
                Plan::Clone(source) => Some(source.clone()),
                Plan::Snapshot(_) | Plan::Joined => None,
            };
            if let Err(e) = discard(c, &self.id, &self.root, source.as_ref()) {
                log::warn!(
                    "volume {}: what its failed fill made is left for the upkeep to remove: {e}",
                    self.id
                );
            }
        }
        if let Plan::Snapshot(r) = &self.plan {
            if let (Some(_), Some(vol)) = (&r.dir, parent_of(r)) {
                if let Err(e) = fills::release(c, vol, &self.id) {
                    log::warn!(
                        "volume {}: its hold on parent snapshot \"{}\" is left for a later sweep: {e}",
                        self.id,
                        r.snapshot.label
                    );
                }
            }
        }
    }
}

/// The parent a directory snapshot `r` is a part of.
fn parent_of(r: &Restorable) -> Option<VolumeId> {
    r.dir.as_ref().map(|_| VolumeId {
        space: r.snapshot.space_id,
        filesystem: r.snapshot.filesystem_id,
    })
}

/// Removes what a fill that failed finally made of volume `id` (on the
/// parent mounted at `root`): its quota, its directory with whatever was
/// copied, its marker last, and a clone's snapshot of `cloned`. Only a
/// volume whose marker says it is still being filled: a filled one is a
/// user's.
fn discard(
    c: &Controller,
    id: &SubdirId,
    root: &Path,
    cloned: Option<&SubdirId>,
) -> Result<(), Error> {
    match files::read_marker(root, &id.name)? {
        Some(m) if m.volume_id == id.to_string() && m.is_of(c.marks.cluster()) && m.filling => {}
        _ => return Ok(()),
    }
    let parent = existing_parent(c, id.parent())?;
    let quotas = match quota_list(c, &parent, Purpose::Read).1 {
        Ok(all) => all,
        Err(Error::Unimplemented(_) | Error::NotFound(_)) => Vec::new(),
        Err(e) => return Err(e),
    };
    for q in quotas
        .iter()
        .filter(|q| quotas::is_for(q, &parent, &id.name))
    {
        super::quota_changes::remove(c, id, q.id)?;
    }
    c.in_doubt.clear(&Doubt::Quota(id.clone()));
    files::roll_back(root, &id.name, &id.to_string())?;
    if let Some(source) = cloned {
        forget_clone(c, source, id)?;
    }
    log::info!(
        "volume {id}: its fill failed finally; its directory, data, quota and marker are removed"
    );
    Ok(())
}

/// Lets go of what the fill of volume `id` from `source` held or made on
/// the source's parent: a clone's snapshot, a restore's reference to the
/// parent snapshot it copied. Its job does so when it ends; a call that
/// finds the volume filled, and DeleteVolume, do so again, since a job
/// killed between marking the volume filled and letting go left them.
pub fn let_go(c: &Controller, source: &DirSource, id: &SubdirId) -> Result<(), Error> {
    match source {
        DirSource::Volume(from) => forget_clone(c, from, id),
        DirSource::Snapshot(SnapshotHandle::Directory(snap)) => {
            fills::release(c, snap.parent(), id)
        }
        DirSource::Snapshot(SnapshotHandle::Filesystem(_)) => Ok(()),
    }
}

/// Copies what `r` holds into the directory of `id`; a temporary
/// filesystem it copies from is `job`'s until the job ends.
fn copy_from(
    c: &Arc<Controller>,
    job: &Arc<Job>,
    id: SubdirId,
    root: &Path,
    r: Restorable,
) -> Step<()> {
    let to = files::volume_dir(root, &id.name);
    if let Some(from) = snapshot_directory(c, &r)? {
        log::info!("filling volume {id} from {}", from.display());
        return c.copies.run(id, move |o| copy(&from, &to, o));
    }
    let (c2, job) = (c.clone(), job.clone());
    c.poller.snapshot(r.snapshot.clone(), move |snapshot| {
        let c3 = c2.clone();
        temporary::acquire(&c2, &snapshot).then(move |loan| {
            let from = match &r.dir {
                Some(dir) => loan.root.join(SUBDIRECTORY_BASE).join(dir.as_str()),
                None => loan.root.clone(),
            };
            job.keep(loan);
            if job.is_cancelled() {
                return Err(Error::Aborted(format!(
                    "volume {id} is being deleted: its fill stops"
                )));
            }
            log::info!("filling volume {id} from {}", from.display());
            c3.copies.run(id, move |o| copy(&from, &to, o))
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
