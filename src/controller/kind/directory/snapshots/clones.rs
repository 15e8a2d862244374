//! The snapshots clones of directory volumes are copied through: a part of
//! a parent snapshot like any directory snapshot (so a clone shares the
//! batches, and is a copy of one instant), recorded on the source's
//! parent apart from the VolumeSnapshots (`Shelf::Clones`, named after the
//! clone's directory), and forgotten once the clone is filled or deleted.

use crate::controller::kind::directory::parent::records;

use super::{already_gone, forget, mounted, take_part};
use crate::controller::kind::directory::parent::records::Shelf;
use crate::controller::kind::restorable::Restorable;
use crate::controller::state::controller::Controller;
use crate::flow::{done, Step, Then};
use crate::handles::SubdirId;
use crate::Error;
use std::sync::Arc;

/// The snapshot of `source` that clone `clone` is copied from, taken now
/// (in the parent's next batch) or by an earlier attempt, once active.
pub fn for_clone(c: &Arc<Controller>, source: &SubdirId, clone: &SubdirId) -> Step<Restorable> {
    let entry = &clone.name;
    let csi_name = clone.to_string();
    let (record, parent) = take_part(c, source, Shelf::Clones, entry, &csi_name, |found| {
        if found.csi_name != csi_name || found.source.as_ref() != Some(&source.name) {
            return Err(Error::AlreadyExists(format!(
                "the snapshot record {} on {} belongs to clone {} of {:?}",
                entry,
                source.parent(),
                found.csi_name,
                found.source
            )));
        }
        Ok(())
    })?;
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
        Some(r) if r.csi_name == clone.to_string() && r.is_of(c.marks.cluster()) => {
            forget(c, vol, &root, Shelf::Clones, &clone.name, &r.batch)
        }
        Some(_) => Ok(()),
        None => already_gone(c, vol, &root),
    }
}
