//! The snapshots clones of directory volumes are copied through: a part of
//! a parent snapshot like any directory snapshot (so a clone shares the
//! batches, and is a copy of one instant), recorded on the source's
//! parent apart from the VolumeSnapshots (`Shelf::Clones`, named after the
//! clone's directory), and forgotten once the clone is filled or deleted.

use super::batches::{self, Member};
use super::records::{self, Record, Shelf};
use super::{forget, mounted, resume};
use crate::controller::kind::Restorable;
use crate::controller::Controller;
use crate::flow::{done, Step, Then};
use crate::handles::SubdirId;
use crate::Error;
use std::sync::Arc;

/// The snapshot of `source` that clone `clone` is copied from, taken now
/// (in the parent's next batch) or by an earlier attempt, once active.
pub fn for_clone(c: &Arc<Controller>, source: &SubdirId, clone: &SubdirId) -> Step<Restorable> {
    let vol = source.parent();
    let entry = clone.name.clone();
    let arrival = batches::arrive(c, vol);
    let missing = || Error::NotFound(format!("source volume {source} not found"));
    let root = mounted(c, vol).map_err(|e| if e.is_not_found() { missing() } else { e })?;
    let found = records::read(&root, Shelf::Clones, &entry)?;
    if let Some(found) = &found {
        if found.csi_name != clone.to_string() || found.source.as_ref() != Some(&source.name) {
            return Err(Error::AlreadyExists(format!(
                "the snapshot record {} on {vol} belongs to clone {} of {:?}",
                entry, found.csi_name, found.source
            )));
        }
    }
    let earlier = match &found {
        Some(found) => resume(c, vol, &root, Shelf::Clones, &entry, found)?,
        None => None,
    };
    let record = match found {
        Some(found) if earlier.is_some() => found,
        _ => {
            let volume =
                super::find(c, source).map_err(|e| if e.is_not_found() { missing() } else { e })?;
            Record {
                csi_name: clone.to_string(),
                source: Some(source.name.clone()),
                batch: String::new(),
                snapshot: None,
                size_bytes: volume.quota.and_then(|q| q.max_capacity_bytes).unwrap_or(0),
                group: None,
                members: Vec::new(),
            }
        }
    };
    let parent = match earlier {
        Some(step) => step,
        None => arrival.request(
            root,
            vec![Member {
                shelf: Shelf::Clones,
                entry,
                record: record.clone(),
            }],
        ),
    };
    let c = c.clone();
    parent.then(move |s| {
        c.poller.snapshot(s, move |snapshot| {
            done(Restorable {
                snapshot,
                dir: record.source,
                size_bytes: record.size_bytes,
            })
        })
    })
}

/// Drops the snapshot clone `clone` of `source` was copied through, if it
/// is still recorded (and its parent snapshot, when it was the last part).
pub fn forget_clone(c: &Controller, source: &SubdirId, clone: &SubdirId) -> Result<(), Error> {
    let vol = source.parent();
    let root = match mounted(c, vol) {
        Ok(root) => root,
        Err(Error::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    match records::read(&root, Shelf::Clones, &clone.name)? {
        Some(r) if r.csi_name == clone.to_string() => {
            forget(c, vol, &root, Shelf::Clones, &clone.name, &r.batch)
        }
        _ => Ok(()),
    }
}
