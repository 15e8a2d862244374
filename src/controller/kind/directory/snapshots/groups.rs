//! Volume group snapshots of directory volumes of one shared parent: the
//! whole group is one request of one batch, so its members are parts of
//! one parent snapshot, taken at one instant (crash-consistent across
//! them). The group is a record of its own (`Shelf::Groups`, naming its
//! members); each member is a directory snapshot like any other (listed,
//! restorable), recorded under an entry derived from the group's name and
//! its directory, carrying the group's id. A member goes with its group
//! only: DeleteSnapshot of one is FailedPrecondition (`snapshots::delete`).
//! A create answers only once the parent snapshot is `active` (`create`
//! says why), taking the group as a job that repeated calls join
//! (`group_jobs`).

use super::batches;
use super::{
    already_gone, capacity, creation_time, described, forget, mounted, recorded, resumed,
    source_missing,
};
use crate::controller::kind::directory::parent::records;
use crate::controller::kind::directory::parent::records::{Record, Shelf};
use crate::controller::state::controller::Controller;
use crate::controller::state::directory::batches::Member;
use crate::controller::state::directory::group_jobs::{Taking, Wanted};
use crate::controller::state::lock_keys::Lock;
use crate::flow::{done, guarded, Step, Then};
use crate::handles::{DirName, DirSnapshotId, GroupSnapshotId, SubdirId, VolumeId};
use crate::linode::Snapshot;
use crate::proto::csi;
use crate::Error;
use std::collections::BTreeSet;
use std::sync::Arc;

/// The entry of the member of group `group` (its CSI name) taken of
/// directory `dir`: a hash of both, so that no two members of any groups
/// share one, whatever the names' lengths.
fn member_entry(group: &str, dir: &DirName) -> DirName {
    let hash = format!("{group}/{dir}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    DirName::parse(&format!("grp-{hash:016x}")).expect("a valid directory name")
}

fn member_name(group: &str, dir: &DirName) -> String {
    format!("{group}/{dir}")
}

/// The group as CSI shows it: its members, described.
fn group_of(
    root: &std::path::Path,
    id: &GroupSnapshotId,
    group: &Record,
    parent: &Snapshot,
) -> Result<csi::VolumeGroupSnapshot, Error> {
    let mut out = csi::VolumeGroupSnapshot::new();
    out.group_snapshot_id = id.to_string();
    for entry in &group.members {
        let Some(member) = records::read(root, Shelf::Snapshots, entry)? else {
            return Err(Error::Internal(format!(
                "group snapshot {id} lost the record of its member {entry}"
            )));
        };
        let handle = DirSnapshotId {
            entry: entry.clone(),
            ..id.0.clone()
        };
        out.snapshots.push(described(&handle, &member, parent));
    }
    out.creation_time = creation_time(parent);
    out.ready_to_use = out.snapshots.iter().all(|s| s.ready_to_use);
    Ok(out)
}

/// CreateVolumeGroupSnapshot of directory volumes `sources` of parent
/// `vol` (distinct, checked by the caller): one parent snapshot for all,
/// or what an earlier call of the same name made, answered once that
/// parent snapshot is `active`, so every member is ready. csi-snapshotter
/// fills a group's members in only from its first OK answer and never
/// reads their readiness again, so an answer with members not yet ready
/// would leave their VolumeSnapshots unready for good. Taking it is a job
/// (`group_jobs`) that a repeated call joins; this call parks on it,
/// holding no worker. AlreadyExists when the name belongs to a group of
/// other volumes; NotFound when a source is no volume.
pub fn create(
    c: &Arc<Controller>,
    vol: VolumeId,
    sources: Vec<SubdirId>,
    name: &str,
) -> Step<csi::VolumeGroupSnapshot> {
    let gentry = DirName::for_name(name);
    let dirs: BTreeSet<DirName> = sources.iter().map(|s| s.name.clone()).collect();
    let wanted = Wanted {
        name: name.to_string(),
        parent: vol,
        members: dirs.iter().map(|d| member_entry(name, d)).collect(),
    };
    let answer = match c.group_jobs.join_or_start(&gentry, wanted.clone())? {
        Taking::Joined(answer) => return answer,
        Taking::Started(answer) => answer,
    };
    let (taking, finishing, entry) = (c.clone(), c.clone(), gentry.clone());
    // A panic ends only this job: its callers are answered (Internal) and
    // the next call for the group starts afresh.
    let job = guarded("group snapshot", move || {
        take(&taking, &sources, dirs, wanted, gentry)
    })
    .then_result(move |made| {
        finishing.group_jobs.finish(&entry, made);
        done(())
    });
    c.rpc.detach("group snapshot", job);
    answer
}

/// The job of `create`: the group `wanted` of directories `dirs`, under
/// its lock until the answer (a delete of the group meanwhile is
/// Aborted), from its parent snapshot once that is `active`.
fn take(
    c: &Arc<Controller>,
    sources: &[SubdirId],
    dirs: BTreeSet<DirName>,
    wanted: Wanted,
    gentry: DirName,
) -> Step<csi::VolumeGroupSnapshot> {
    let Wanted {
        name,
        parent: vol,
        members: entries,
    } = wanted;
    let name = name.as_str();
    let guard = c.lock(Lock::Group(gentry.clone()))?;
    let arrival = batches::arrive(c, vol);
    let root = mounted(c, vol).map_err(source_missing(&sources[0]))?;
    let found = records::read(&root, Shelf::Groups, &gentry)?;
    if let Some(found) = &found {
        if found.csi_name != name || !found.is_of(c.marks.cluster()) {
            return Err(Error::AlreadyExists(format!(
                "group snapshot name {name:?} maps to the same record as the existing group snapshot {:?}",
                found.csi_name
            )));
        }
        if found.members != entries {
            return Err(Error::AlreadyExists(format!(
                "group snapshot {name:?} already exists with other source volumes"
            )));
        }
    }
    let (group, earlier) = resumed(c, vol, &root, Shelf::Groups, &gentry, found, |found| {
        // Taken again: the members' references to a batch that never
        // landed go too.
        if let Some(found) = &found {
            for entry in &entries {
                records::release(&root, &found.batch, Shelf::Snapshots, entry)?;
            }
            records::close_batch(&root, &found.batch)?;
        }
        Ok(Record::of_group(name.to_string(), entries.clone()))
    })?;
    let parent = match earlier {
        Some(step) => step,
        None => {
            let mut members = vec![Member {
                shelf: Shelf::Groups,
                entry: gentry.clone(),
                record: group.clone(),
            }];
            for (dir, entry) in dirs.iter().zip(&entries) {
                let source = SubdirId {
                    space: vol.space,
                    filesystem: vol.filesystem,
                    name: dir.clone(),
                };
                let member_csi = member_name(name, dir);
                if let Some(other) = records::read(&root, Shelf::Snapshots, entry)? {
                    if other.csi_name != member_csi || !other.is_of(c.marks.cluster()) {
                        return Err(Error::AlreadyExists(format!(
                            "the record {entry} of a member of group snapshot {name:?} belongs to snapshot {:?}",
                            other.csi_name
                        )));
                    }
                }
                let size_bytes = capacity(c, &source)?;
                members.push(Member {
                    shelf: Shelf::Snapshots,
                    entry: entry.clone(),
                    record: Record::of_directory(
                        member_csi,
                        dir.clone(),
                        size_bytes,
                        Some(gentry.clone()),
                    ),
                });
            }
            arrival.request(root.clone(), members)
        }
    };
    let c = c.clone();
    parent.then(move |s| {
        c.poller.snapshot(s, move |s| {
            drop(guard);
            let id = GroupSnapshotId(DirSnapshotId {
                space: vol.space,
                filesystem: vol.filesystem,
                snapshot: s.id,
                entry: gentry,
            });
            let group = records::read(&root, Shelf::Groups, &id.0.entry)?.unwrap_or(group);
            done(group_of(&root, &id, &group, &s)?)
        })
    })
}

/// GetVolumeGroupSnapshot: NotFound unless the group's record names the
/// parent snapshot its id does.
pub fn get(c: &Controller, id: &GroupSnapshotId) -> Result<csi::VolumeGroupSnapshot, Error> {
    let (root, group, parent) = recorded(c, &id.0, Shelf::Groups)
        .map_err(|_| Error::NotFound(format!("group snapshot {id} not found")))?;
    group_of(&root, id, &group, &parent)
}

/// DeleteVolumeGroupSnapshot: the members, then the group, then the parent
/// snapshot when nothing else needs it. OK when nothing of the group is
/// left; InvalidArgument when `snapshot_ids` (if given) are not its members.
pub fn delete(c: &Controller, id: &GroupSnapshotId, snapshot_ids: &[String]) -> Result<(), Error> {
    let vol = id.0.parent();
    let _guard = c.lock(Lock::Group(id.0.entry.clone()))?;
    let root = match mounted(c, vol) {
        Ok(root) => root,
        Err(Error::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    let Some(group) =
        records::read(&root, Shelf::Groups, &id.0.entry)?.filter(|g| g.is_of(c.marks.cluster()))
    else {
        return already_gone(c, vol, &root);
    };
    if group.snapshot != Some(id.0.snapshot) {
        return already_gone(c, vol, &root);
    }
    if !snapshot_ids.is_empty() {
        let theirs: BTreeSet<&str> = snapshot_ids.iter().map(String::as_str).collect();
        let ours: Vec<String> = group
            .members
            .iter()
            .map(|entry| {
                DirSnapshotId {
                    entry: entry.clone(),
                    ..id.0.clone()
                }
                .to_string()
            })
            .collect();
        if theirs != ours.iter().map(String::as_str).collect() {
            return Err(Error::InvalidArgument(format!(
                "snapshot ids {snapshot_ids:?} are not the members of group snapshot {id}: {ours:?}"
            )));
        }
    }
    for entry in &group.members {
        if let Some(member) = records::read(&root, Shelf::Snapshots, entry)? {
            if member.group.as_ref() == Some(&id.0.entry) {
                records::release(&root, &member.batch, Shelf::Snapshots, entry)?;
                records::remove(&root, Shelf::Snapshots, entry)?;
            }
        }
    }
    forget(c, vol, &root, Shelf::Groups, &id.0.entry, &group.batch)
}
