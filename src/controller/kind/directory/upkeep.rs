//! What the `janitor` does for directory volumes each round: in every
//! Space a directory class names, a pool was used in or a mounted parent
//! lives in, it deletes the temporary filesystems no restore holds (a
//! kill -9, a lost reply or a new leader left them) and tends the pools
//! (`pool::tend`); on every parent mounted here it deletes the parent
//! snapshots no directory snapshot needs (one the backend kept while a
//! temporary clone of it existed), and it resumes the fills no job runs
//! (their markers say they are being filled); last, `autogrow` samples
//! the volumes' usage and grows the claims that are due. Each failure is
//! logged and left for the next round; nothing here answers a call.

use super::parent::files;
use super::pool::{self, TendPolicy};
use super::restore::{self, sweep_temporaries};
use super::snapshots::sweep;
use super::volume::inspect;
use super::volume::lookup::existing_parent;
use crate::controller::request::params::{ParentRef, PoolParams};
use crate::controller::state::controller::Controller;
use crate::controller::state::lock_keys::Lock;
use crate::handles::{SubdirId, VolumeId};
use crate::Error;
use std::collections::BTreeSet;
use std::sync::Arc;

/// One round of upkeep.
pub fn upkeep(c: &Arc<Controller>, policy: TendPolicy) {
    let classes = match c.shares.classes().map(|cl| cl.directory_classes()) {
        Some(Ok(classes)) => Some(classes),
        Some(Err(e)) => {
            log::warn!("upkeep: the StorageClasses cannot be read ({e}); no pool filesystem is pruned or made this round");
            None
        }
        None => None,
    };
    let mut spaces = c.pools.spaces();
    let mut pools: Vec<(u64, PoolParams)> = Vec::new();
    for (space, sub) in classes.iter().flatten() {
        let Ok(space) = c.spaces.resolve(space) else {
            continue;
        };
        spaces.insert(space.id);
        if let ParentRef::Pool(pool) = &sub.parent {
            pools.push((space.id, pool.clone()));
        }
    }
    // First, so that the temporary filesystems of the fills it resumes
    // are held before the sweep below.
    resume_fills(c);
    let parents = c.shares.known();
    spaces.extend(parents.iter().map(|p| p.space));
    for space in spaces {
        if let Err(e) = sweep_temporaries(c, space) {
            log::warn!("upkeep: temporary filesystems of space {space}: {e}");
        }
        let named: Vec<PoolParams> = pools
            .iter()
            .filter(|(s, _)| *s == space)
            .map(|(_, p)| p.clone())
            .collect();
        let known = classes.as_ref().map(|_| named.as_slice());
        if let Err(e) = pool::tend(c, space, known, policy) {
            log::warn!("upkeep: pools of space {space}: {e}");
        }
    }
    sweep_parent_snapshots(c, &parents);
    super::autogrow_round(c);
}

/// Starts a job for every volume whose marker says it is being filled and
/// that no job fills: what a killed or stopped process, or a job that
/// ended without finishing, left. The markers on the parents the
/// StorageClasses and pools name (and those mounted here) are the record
/// of them; the mounts themselves do not survive a restart.
fn resume_fills(c: &Arc<Controller>) {
    let parents = match inspect::parents(c) {
        Ok(parents) => parents,
        Err(e) => {
            log::warn!("upkeep: the shared filesystems to resume fills on cannot be listed: {e}");
            return;
        }
    };
    for vol in parents {
        let resumed = existing_parent(c, vol).and_then(|fs| {
            let mtls = c.spaces.mtls_mode(vol.space)?;
            let root = c.shares.root(&fs, mtls.as_ref())?;
            for (name, marker) in files::marked(&root)? {
                let id = SubdirId {
                    space: vol.space,
                    filesystem: vol.filesystem,
                    name,
                };
                let ours = marker.is_of(c.marks.cluster());
                let Some(source) = marker.source.filter(|_| marker.filling) else {
                    continue;
                };
                // A call that holds the volume resumes it itself.
                let Ok(_held) = c.lock(Lock::Directory(id.clone())) else {
                    continue;
                };
                // Another cluster's fill is its own to finish.
                if marker.volume_id == id.to_string() && ours {
                    if let Err(e) = restore::resume(c, id.clone(), root.clone(), &source) {
                        log::warn!("upkeep: the fill of volume {id}: {e}");
                    }
                }
            }
            Ok(())
        });
        match resumed {
            Ok(()) | Err(Error::NotFound(_)) => {}
            Err(e) => log::warn!("upkeep: fills on {vol}: {e}"),
        }
    }
}

/// Deletes the parent snapshots of `parents` that no directory snapshot needs.
fn sweep_parent_snapshots(c: &Controller, parents: &BTreeSet<VolumeId>) {
    for &vol in parents {
        let swept = existing_parent(c, vol).and_then(|fs| {
            let mtls = c.spaces.mtls_mode(vol.space)?;
            let root = c.shares.root(&fs, mtls.as_ref())?;
            sweep::orphans(c, vol, &root)
        });
        match swept {
            Ok(()) | Err(Error::NotFound(_)) => {}
            Err(e) => log::warn!("upkeep: parent snapshots of {vol}: {e}"),
        }
    }
}
