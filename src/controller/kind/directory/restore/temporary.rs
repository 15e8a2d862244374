//! The temporary filesystems restores copy from: a clone of one Linode
//! snapshot (a shared parent's, or a whole-filesystem volume's), made
//! once while any fill job of this process needs it, mounted read-only on
//! the controller only (`Shares::temporary_root`), and deleted when the
//! last job holding it is done (a delete that fails is tried again in the
//! background for a few minutes). A job holds its clone from the moment
//! it asks for one until it ends (`hold`), whatever it waits for
//! meanwhile: a clone of a large parent can take hours, and one still
//! `creating` when a wait ends (`LINODE_WAIT_TIMEOUT`) is waited for
//! again, never POSTed again (`active`). One the API reports in `error`,
//! or that is gone, is deleted and replaced, at most `REPLACEMENTS` times
//! per snapshot while jobs hold it; then the fill fails finally. A job
//! that ends without finishing or failing (the process stopping, the
//! lease lost) leaves its clone for the next process to adopt (`leave`).
//! Each is labelled `csi-restore-<fs>-<snapshot>` and tagged
//! `tags::RESTORE_SOURCE`: never a volume, a parent, or a user's. One that
//! no job of this process holds (a crash, a lost reply, a new leader) is
//! an orphan: a job of the same snapshot adopts it, `creating` or
//! `active`, and the upkeep deletes it once it has resumed the fills it
//! finds (`sweep`). In node mode a new one is given the source
//! filesystem's ACL, which admits the controller where the source's
//! mounts do.

use crate::backoff::Backoff;
use crate::config::AccessPolicyMode;
use crate::controller::acl;
use crate::controller::request::answer::require_mount_target;
use crate::controller::state::controller::Controller;
use crate::controller::state::fills::holders::Hold;
use crate::controller::state::fills::stops::Stop;
use crate::controller::state::lock_keys::Doubt;
use crate::controller::state::tags;
use crate::flow::{done, Step, Then};
use crate::handles::{SnapshotId, VolumeId};
use crate::linode::{CloneFilesystem, Filesystem, Snapshot, Status};
use crate::mutex::lock;
use crate::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

fn label_of(snapshot: &SnapshotId) -> String {
    format!("{PREFIX}{}-{}", snapshot.filesystem, snapshot.snapshot)
}

const PREFIX: &str = "csi-restore-";

/// The snapshot a temporary filesystem of `space` is a clone of, by its label.
fn snapshot_of(space: u64, label: &str) -> Option<SnapshotId> {
    let (fs, snap) = label.strip_prefix(PREFIX)?.split_once('-')?;
    Some(SnapshotId {
        space,
        filesystem: fs.parse().ok()?,
        snapshot: snap.parse().ok()?,
    })
}

fn vol_of(fs: &Filesystem) -> VolumeId {
    VolumeId {
        space: fs.space_id,
        filesystem: fs.id,
    }
}

/// A job's hold on the clone of `snapshot`, taken before the clone is
/// looked for or made, so no sweep deletes it under the job.
pub fn hold(c: &Arc<Controller>, snapshot: SnapshotId) -> Hold {
    *lock(&c.temporaries.users).entry(snapshot).or_insert(0) += 1;
    let c = c.clone();
    Hold::new(
        snapshot,
        Box::new(move |may_go| let_go(&c, snapshot, may_go)),
    )
}

/// Lets go of one hold on the clone of `snapshot`; the last deletes the
/// clone when it `may_go`.
fn let_go(c: &Arc<Controller>, snapshot: SnapshotId, may_go: bool) {
    let last = {
        let mut users = lock(&c.temporaries.users);
        let n = users.entry(snapshot).or_insert(1);
        *n -= 1;
        if *n == 0 {
            users.remove(&snapshot);
            lock(&c.temporaries.failed).remove(&snapshot);
            true
        } else {
            false
        }
    };
    if last && may_go {
        if let Err(e) = remove_unheld(c, snapshot) {
            log::warn!(
                "deleting the temporary filesystem of snapshot {snapshot}: {e}; trying again"
            );
            remove_later(c.clone(), snapshot);
        }
    }
}

/// How a failed delete of a temporary filesystem is tried again: it holds
/// a copy of every tenant's data, so it must not wait for the next restore
/// of its Space. About five minutes in all.
const REMOVE_AGAIN: Backoff = Backoff::doubling(Duration::from_secs(1), Duration::from_secs(30));
const REMOVE_ATTEMPTS: u32 = 12;

/// Deletes the clones of `snapshot` unless a restore holds them again (its
/// hold deletes them when it lets go). A restore that takes a hold meanwhile
/// waits for this to finish and makes a clone anew.
fn remove_unheld(c: &Controller, snapshot: SnapshotId) -> Result<(), Error> {
    unless_held(c, snapshot, || remove(c, snapshot))
}

/// Runs `delete` (of clones of `snapshot`) unless a restore holds the
/// snapshot, under the lock `acquire` takes to find or make its clone: a
/// job that takes a hold meanwhile either is seen here, or finds the clone
/// gone and makes one anew, never copying from one being deleted.
fn unless_held(
    c: &Controller,
    snapshot: SnapshotId,
    delete: impl FnOnce() -> Result<(), Error>,
) -> Result<(), Error> {
    let one = lock(&c.temporaries.making)
        .entry(snapshot)
        .or_default()
        .clone();
    let _one = lock(&one);
    if lock(&c.temporaries.users).contains_key(&snapshot) {
        return Ok(());
    }
    delete()
}

/// Tries `remove_unheld` again in the background, backing off.
fn remove_later(c: Arc<Controller>, snapshot: SnapshotId) {
    let retry = move || {
        for attempt in 1..=REMOVE_ATTEMPTS {
            std::thread::sleep(REMOVE_AGAIN.nth(attempt));
            match remove_unheld(&c, snapshot) {
                Ok(()) => {
                    log::info!("the temporary filesystem of snapshot {snapshot} is deleted");
                    return;
                }
                Err(e) if attempt == REMOVE_ATTEMPTS => log::warn!(
                    "the temporary filesystem of snapshot {snapshot} is left for a later restore in its Space to delete: {e}"
                ),
                Err(_) => {}
            }
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("temporary delete".into())
        .spawn(retry)
    {
        log::warn!("the temporary filesystem of snapshot {snapshot} is left for a later restore in its Space to delete: {e}");
    }
}

/// Unmounts and deletes every clone of `snapshot` (several only after a
/// create whose outcome was unknown landed late).
fn remove(c: &Controller, snapshot: SnapshotId) -> Result<(), Error> {
    let label = label_of(&snapshot);
    for fs in c
        .cloud
        .find_filesystems_by_tag(snapshot.space, tags::RESTORE_SOURCE)?
        .into_iter()
        .filter(|fs| {
            fs.label == label && c.marks.is_restore_source(fs) && fs.status != Status::Deleting
        })
    {
        delete(c, &fs)?;
    }
    Ok(())
}

fn delete(c: &Controller, fs: &Filesystem) -> Result<(), Error> {
    c.shares.release_temporary(vol_of(fs))?;
    match c.cloud.delete_filesystem(fs.space_id, fs.id) {
        Ok(()) | Err(Error::NotFound(_)) => {
            log::info!(
                "deleted temporary filesystem {}/{} (\"{}\")",
                fs.space_id,
                fs.id,
                fs.label
            );
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Deletes this cluster's temporary filesystems of `space` that no
/// restore of this process holds.
pub fn sweep(c: &Controller, space: u64) -> Result<(), Error> {
    let held: Vec<SnapshotId> = lock(&c.temporaries.users).keys().copied().collect();
    for fs in c
        .cloud
        .find_filesystems_by_tag(space, tags::RESTORE_SOURCE)?
    {
        // Another cluster's, or one made before clusters had identities,
        // is never this cluster's to delete.
        let Some(snapshot) = snapshot_of(space, &fs.label)
            .filter(|s| !held.contains(s))
            .filter(|_| fs.status != Status::Deleting && c.marks.is_restore_source(&fs))
        else {
            continue;
        };
        // A job may have taken a hold since `held` was read, and found
        // this clone: the hold is checked again.
        unless_held(c, snapshot, || {
            log::info!(
                "temporary filesystem {space}/{} (\"{}\") is held by no restore",
                fs.id,
                fs.label
            );
            delete(c, &fs)
        })?;
    }
    Ok(())
}

/// How many times the clone of one snapshot is replaced after it failed
/// (`error`) or vanished while jobs held it; past that, their fills fail
/// finally. A backend that fails the same clone four times in a row will
/// not make a fifth.
pub const REPLACEMENTS: usize = 3;

/// The snapshot a job restores from, as its temporary clone is keyed.
pub fn key_of(snap: &Snapshot) -> SnapshotId {
    SnapshotId {
        space: snap.space_id,
        filesystem: snap.filesystem_id,
        snapshot: snap.id,
    }
}

/// The clone of `snap` in its Space, found (whatever its status but
/// `deleting`) or POSTed now; a job must hold it first (`hold`).
pub fn find_or_make(c: &Arc<Controller>, snap: &Snapshot) -> Result<Filesystem, Error> {
    let key = key_of(snap);
    let source = c.cloud.get_filesystem(key.space, key.filesystem)?;
    let one = lock(&c.temporaries.making).entry(key).or_default().clone();
    let _one = lock(&one);
    clone_of(c, key, &source)
}

/// Continues with the clone `fs` of `snap` once it is active and, in
/// node mode, admits the controller: waited for as long as it takes, one
/// `LINODE_WAIT_TIMEOUT` after another, with no new POST; a clone in
/// `error`, or gone, is deleted and replaced (at most `REPLACEMENTS` times
/// for the snapshot). `stop` ends the wait early. `made` is told of each
/// replacement.
pub fn active(
    c: &Arc<Controller>,
    snap: &Snapshot,
    fs: Filesystem,
    stop: &Arc<Stop>,
    made: Arc<dyn Fn(&Filesystem) + Send + Sync>,
) -> Step<Filesystem> {
    let admitted = match c.mode {
        AccessPolicyMode::Node => {
            let source = c.cloud.get_filesystem(snap.space_id, snap.filesystem_id)?;
            admit_like(c, &source, &fs)
        }
        AccessPolicyMode::Space => done(()),
    };
    let (c, snap, stop) = (c.clone(), snap.clone(), stop.clone());
    admitted.then(move |()| waited(&c, snap, fs, stop, made))
}

/// One wait of `fs` for `active`, and what follows its end.
fn waited(
    c: &Arc<Controller>,
    snap: Snapshot,
    fs: Filesystem,
    stop: Arc<Stop>,
    made: Arc<dyn Fn(&Filesystem) + Send + Sync>,
) -> Step<Filesystem> {
    let c2 = c.clone();
    let seen = fs.clone();
    let wait = c.poller.filesystem(fs, done);
    stop.interruptible(&c.rpc, "temporary filesystem wait", wait)
        .then_result(move |r| match r {
            Ok(fs) => done(fs),
            Err(Error::DeadlineExceeded(_)) if stop.why().is_none() => {
                log::info!(
                    "temporary filesystem {}/{} is still being made; waiting for it again",
                    seen.space_id,
                    seen.id
                );
                waited(&c2, snap, seen, stop, made)
            }
            Err(failed @ (Error::FailedPrecondition(_) | Error::NotFound(_)))
                if stop.why().is_none() =>
            {
                let fs = replace(&c2, &snap, &seen, &failed)?;
                made(&fs);
                active(&c2, &snap, fs, &stop, made)
            }
            Err(e) => Err(e),
        })
}

/// Deletes the clone `failed` of `snap` (which failed with `why`) and
/// makes a new one, unless the snapshot's clones failed `REPLACEMENTS`
/// times already: then FailedPrecondition, final for the fill.
fn replace(
    c: &Arc<Controller>,
    snap: &Snapshot,
    failed: &Filesystem,
    why: &Error,
) -> Result<Filesystem, Error> {
    let key = key_of(snap);
    let times = {
        let mut all = lock(&c.temporaries.failed);
        let seen = all.entry(key).or_default();
        seen.insert(failed.id);
        seen.len()
    };
    log::warn!(
        "temporary filesystem {}/{} of snapshot {key} failed ({}); it is deleted{}",
        failed.space_id,
        failed.id,
        why.message(),
        if times > REPLACEMENTS {
            ""
        } else {
            " and made again"
        }
    );
    match delete(c, failed) {
        Ok(()) | Err(Error::NotFound(_)) => {}
        Err(e) => return Err(e),
    }
    if times > REPLACEMENTS {
        return Err(Error::FailedPrecondition(format!(
            "the temporary clone of snapshot {key} failed {times} times (the last: {}); the restore gives up",
            why.message()
        )));
    }
    find_or_make(c, snap)
}

/// Mounts the active clone `fs` here, read-only: its root.
pub fn mounted(c: &Controller, fs: &Filesystem) -> Result<PathBuf, Error> {
    require_mount_target(fs)?;
    let mtls = c.spaces.mtls_mode(fs.space_id)?;
    c.shares.temporary_root(fs, mtls.as_ref())
}

/// The live clone of `key`, found or POSTed now.
fn clone_of(c: &Controller, key: SnapshotId, source: &Filesystem) -> Result<Filesystem, Error> {
    let label = label_of(&key);
    let find = || -> Result<Option<Filesystem>, Error> {
        Ok(c.cloud
            .find_filesystems(key.space, &label, &source.region)?
            .into_iter()
            .find(|fs| c.marks.is_restore_source(fs) && fs.status != Status::Deleting))
    };
    if let Some(fs) = find()? {
        return Ok(fs);
    }
    let doubt = Doubt::Filesystem {
        space: key.space,
        label: label.clone(),
    };
    c.in_doubt
        .check(&doubt, &format!("create temporary filesystem \"{label}\""))?;
    let posted = c.cloud.clone_snapshot(
        key.space,
        key.filesystem,
        key.snapshot,
        &CloneFilesystem {
            label: label.clone(),
            region: source.region.clone(),
            space_id: Some(key.space),
            size_gib: None,
            tags: c.marks.with_cluster(&[tags::RESTORE_SOURCE]),
        },
    );
    match posted {
        Ok(fs) => {
            log::info!(
                "cloning NFS snapshot {key} into temporary filesystem {}/{} to restore from",
                fs.space_id,
                fs.id
            );
            Ok(fs)
        }
        Err(failed) => c.in_doubt.found_or(&doubt, failed, find),
    }
}

/// Node mode: the temporary filesystem admits the nodes the source
/// filesystem's ACL does (the controller among them, since it reaches the
/// source's data the same way).
fn admit_like(c: &Arc<Controller>, source: &Filesystem, fs: &Filesystem) -> Step<()> {
    let ids = match c
        .cloud
        .get_filesystem_access_policy(source.space_id, source.id)?
    {
        Some(policy) => policy.linode_ids(),
        None => return done(()),
    };
    acl::admit_all(c, vol_of(fs), ids)
}
