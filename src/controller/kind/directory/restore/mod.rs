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
//! volume. A fill that fails finally takes its volume with it. The job
//! tells the claim its marker records what it is doing (`progress`,
//! posted by `watch`), and ends when that claim is gone (`watch`).

mod jobs;
mod temporary;
mod watch;

pub use crate::controller::state::fills::copies::stop_all;
pub use temporary::sweep as sweep_temporaries;
pub use watch::start as start_watch;

use super::ledger::account::Purpose;
use super::ledger::quotas;
use super::parent::files;
use super::snapshots::{self, fills, for_clone, forget_clone};
use super::volume::lookup::{existing_parent, quota_list};
use crate::controller::kind::restorable::Restorable;
use crate::controller::request::create::DirSource;
use crate::controller::state::controller::Controller;
use crate::controller::state::fills::progress::{self, Total};
use crate::controller::state::fills::running::{Job, MadeFor};
use crate::controller::state::lock_keys::Doubt;
use crate::flow::{done, Step, Then};
use crate::fs_tree::{copy_tree, CopyOptions, CopyStats, Dir};
use crate::handles::{SnapshotHandle, SubdirId, VolumeId, SUBDIRECTORY_BASE};
use crate::kube::EventType;
use crate::linode::Status;
use crate::linode::{Filesystem, Snapshot};
use crate::metrics;
use crate::Error;
use jobs::Ending;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// What a fill copies from, checked before anything is made.
#[derive(Clone)]
pub enum Plan {
    Snapshot(Box<Restorable>),
    /// A clone of a volume, which holds about `Total` now.
    Clone(SubdirId, Total),
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
            let r = restorable(c, id)?;
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
            let quota = super::volume::lookup::find(c, id)
                .map_err(|e| match e {
                    Error::NotFound(_) => {
                        Error::NotFound(format!("source volume {id} was not found"))
                    }
                    e => e,
                })?
                .quota;
            let size = quota.as_ref().and_then(|q| q.max_capacity_bytes);
            let total = Total {
                bytes: quota
                    .as_ref()
                    .and_then(|q| q.used_capacity_bytes)
                    .map(|b| b.max(0) as u64),
                entries: quota
                    .as_ref()
                    .and_then(|q| q.used_file_count)
                    .map(|n| n.max(0) as u64),
            };
            (
                Plan::Clone(id.clone(), total),
                size.unwrap_or(0),
                format!("source volume {id}"),
            )
        }
    })
}

/// The snapshot `id` as a restore into a directory sees it: NotFound for
/// one the driver did not take (or whose record is gone).
fn restorable(c: &Controller, id: &SnapshotHandle) -> Result<Restorable, Error> {
    match id {
        SnapshotHandle::Filesystem(id) => {
            let snapshot = crate::controller::kind::filesystem::snapshots::owned(c, *id)?;
            Ok(Restorable {
                size_bytes: snapshot.size_bytes.unwrap_or(0),
                snapshot,
                dir: None,
            })
        }
        SnapshotHandle::Directory(id) => snapshots::restorable(c, id),
    }
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
        if let Some(why) = job.stopped() {
            return Err(why);
        }
        match files::read_marker(&self.root, &id.name)? {
            Some(m) if m.volume_id == id.to_string() && m.is_of(c.marks.cluster()) => {
                if !m.filling {
                    return done(());
                }
                *crate::mutex::lock(&job.made_for) = Some(MadeFor {
                    csi_name: m.csi_name.clone(),
                    claim: m.claim.clone(),
                });
            }
            _ => {
                job.cancel(&id);
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
                let total = Total {
                    bytes: r
                        .snapshot
                        .size_bytes
                        .filter(|_| r.dir.is_none())
                        .map(|b| b.max(0) as u64),
                    entries: None,
                };
                copy_from(c, job, id.clone(), &root, (**r).clone(), total)
            }
            Plan::Clone(source, total) => {
                let (to, at, total) = (id.clone(), root.clone(), *total);
                for_clone(c, source, &id).then(move |r| copy_from(&c2, &job2, to, &at, r, total))
            }
        };
        let (c, plan, job) = (c.clone(), self.plan.clone(), job.clone());
        copied.then(move |()| {
            if let Some(why) = job.stopped() {
                return Err(why);
            }
            files::mark_filled(&root, &id.name, &id.to_string())?;
            if let Plan::Clone(source, _) = &plan {
                forget_clone(&c, source, &id)?;
            }
            done(())
        })
    }

    fn end(&self, c: &Controller, job: &Job, ending: Ending<'_>) {
        if let Ending::Failed(why) = ending {
            let source = match &self.plan {
                Plan::Clone(source, _) => Some(source.clone()),
                Plan::Snapshot(_) | Plan::Joined => None,
            };
            if let Err(e) = discard(c, &self.id, &self.root, source.as_ref()) {
                log::warn!(
                    "volume {}: what its failed fill made is left for the upkeep to remove: {e}",
                    self.id
                );
            }
            tell(
                c,
                job,
                EventType::Warning,
                "FillFailed",
                format!(
                    "filling the volume failed finally: {}; what it made is removed, and provisioning again starts anew",
                    why.message()
                ),
            );
        }
        if let Ending::Filled = ending {
            let copied = job.report.copied();
            tell(
                c,
                job,
                EventType::Normal,
                "FillDone",
                format!(
                    "the volume is filled, in {}{}",
                    progress::duration(job.started.elapsed()),
                    copied
                        .map(|s| format!(
                            ": {} entries, {} copied",
                            progress::entries(&s),
                            progress::bytes(s.bytes)
                        ))
                        .unwrap_or_default()
                ),
            );
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

/// Tells the claim `job`'s volume is for (if its marker names one) what
/// the job is doing, through the watch.
fn tell(c: &Controller, job: &Job, kind: EventType, reason: &'static str, message: String) {
    if let Some(claim) = job.claim() {
        c.fill_watch.tell(claim, kind, reason, message);
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
        super::volume::quota_changes::remove(c, id, q.id)?;
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

/// Copies what `r` holds (about `total`) into the directory of `id`,
/// from the parent's own snapshot directory when it shows one, else from
/// a temporary clone of the snapshot, which `job` holds until it ends.
fn copy_from(
    c: &Arc<Controller>,
    job: &Arc<Job>,
    id: SubdirId,
    root: &Path,
    r: Restorable,
    total: Total,
) -> Step<()> {
    let to = files::volume_dir(root, &id.name);
    if let Some(from) = snapshot_directory(c, &r)? {
        return copy_into(c, job, id, from, to, total);
    }
    let (c2, job) = (c.clone(), job.clone());
    c.poller.snapshot(r.snapshot.clone(), move |snapshot| {
        let key = temporary::key_of(&snapshot);
        job.keep(key, || temporary::hold(&c2, key));
        let fs = temporary::find_or_make(&c2, &snapshot)?;
        cloning(&c2, &job, &snapshot, &fs);
        let (c3, told, of) = (c2.clone(), job.clone(), snapshot.clone());
        let made: Arc<dyn Fn(&Filesystem) + Send + Sync> =
            Arc::new(move |fs: &Filesystem| cloning(&c3, &told, &of, fs));
        let since = Instant::now();
        let c4 = c2.clone();
        temporary::active(&c2, &snapshot, fs, &job.stop.clone(), made).then(move |fs| {
            metrics::restore_clone_active(since.elapsed());
            let root = temporary::mounted(&c4, &fs)?;
            if let Some(why) = job.stopped() {
                return Err(why);
            }
            let from = match &r.dir {
                Some(dir) => root.join(SUBDIRECTORY_BASE).join(dir.as_str()),
                None => root,
            };
            copy_into(&c4, &job, id, from, to, total)
        })
    })
}

/// `job` now waits for the temporary clone `fs` of `snapshot`: its phase,
/// and an event when that is news.
fn cloning(c: &Controller, job: &Job, snapshot: &Snapshot, fs: &Filesystem) {
    let what = format!(
        "temporary filesystem {}/{} of snapshot {}/{}/{}",
        fs.space_id, fs.id, snapshot.space_id, snapshot.filesystem_id, snapshot.id
    );
    if job.report.cloning(what.clone()) {
        tell(
            c,
            job,
            EventType::Normal,
            "FillCloning",
            format!("cloning the snapshot into a {what} to copy the volume's data from; a clone of a large filesystem can take hours"),
        );
    }
}

/// Copies the tree at `from` (about `total`) into the directory `to` of
/// volume `id`, on a thread of its own.
fn copy_into(
    c: &Controller,
    job: &Arc<Job>,
    id: SubdirId,
    from: PathBuf,
    to: PathBuf,
    total: Total,
) -> Step<()> {
    log::info!("filling volume {id} from {}", from.display());
    job.report.copying(total);
    let size = match (total.bytes, total.entries) {
        (None, None) => "its size is counted as it goes".to_string(),
        (bytes, entries) => format!(
            "about {}{}",
            bytes.map(progress::bytes).unwrap_or_default(),
            entries
                .map(|n| format!(" in {n} entries"))
                .unwrap_or_default()
        ),
    };
    tell(
        c,
        job,
        EventType::Normal,
        "FillCopying",
        format!("copying the volume's data in: {size}"),
    );
    let reported = job.clone();
    c.copies.run(id, move |o| {
        let copied = copy(&from, &to, o)?;
        reported.report.copied_all(copied);
        Ok(copied)
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
