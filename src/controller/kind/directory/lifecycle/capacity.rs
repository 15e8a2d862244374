//! GetCapacity of a directory class: what its parent (or its pool) can
//! still promise a new volume.

use crate::controller::kind::directory::pool;
use crate::controller::kind::directory::volume::lookup::{parent_of, room_left};
use crate::controller::request::params::{KindParams, Params, ParentRef};
use crate::controller::state::controller::Controller;
use crate::Error;

/// What the parent a directory class names can still promise: its
/// capacity less the maxima of its quotas (its root quota aside) and what
/// deleted volumes keep on it, as the room check of a create counts them;
/// for a pool, that of all its filesystems and those it may still make.
pub fn capacity(c: &Controller, params: &Params) -> Result<i64, Error> {
    let KindParams::Directory(sub) = &params.kind else {
        return Err(Error::Internal("not a subdirectory class".into()));
    };
    let region = c.cluster.region()?;
    let space = c.spaces.resolve(&params.space)?;
    if let ParentRef::Pool(pool) = &sub.parent {
        return pool::capacity(c, space.id, pool, &region);
    }
    let fs = parent_of(c, space.id, &sub.parent, &region)?;
    let mtls = c.spaces.mtls_mode(space.id)?;
    room_left(c, &fs, mtls.as_ref(), 0)
}
