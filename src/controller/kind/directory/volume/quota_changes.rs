//! What changes a directory volume after it is made, both updates of its
//! quota waited for on the poller: ControllerExpandVolume (its maximum,
//! within the room its parent has, answered only once the quota is
//! `active` at the size asked, so the resizer is never told of a size not
//! in force) and ControllerModifyVolume (`max-files`, its file-count
//! limit). A volume without a quota has neither to change. Every write
//! here, and the removal of a volume's quota, tells the parent's account
//! what the backend answered.

use super::lookup::{find, find_for};
use crate::controller::kind::directory::ledger::account::{Purpose, Reason};
use crate::controller::kind::directory::ledger::room::Listed;
use crate::controller::kind::directory::parent::kept;
use crate::controller::request::params::Mutable;
use crate::controller::state::controller::Controller;
use crate::controller::state::lock_keys::Lock;
use crate::flow::{done, Step, Then};
use crate::handles::SubdirId;
use crate::linode::{Quota, QuotaUpdate, Status};
use crate::Error;
use std::sync::Arc;

/// Grows the quota of `id` to `want` bytes: the capacity in force once it
/// is. A size at or below the current one answers the current one, once
/// the quota is `active`; a quota in `error` is FailedPrecondition; a
/// growth the parent cannot hold is OutOfRange.
pub fn expand(c: &Arc<Controller>, id: SubdirId, want: i64) -> Step<i64> {
    let guard = c.lock(Lock::Directory(id.clone()))?;
    let found = find_for(c, &id, Purpose::Write)?;
    let Some(quota) = found.quota.clone() else {
        return Err(Error::FailedPrecondition(format!(
            "volume {id} has no quota (its class is quota: best-effort or off), so it has no size to grow"
        )));
    };
    let current = quota.max_capacity_bytes.unwrap_or(0);
    if want <= current {
        return in_force(c, &id, quota, want).then(move |size| {
            drop(guard);
            done(size)
        });
    }
    let listed = Listed {
        quotas: &found.quotas,
        read_at: found.read_at,
        kept: kept::total(&found.root)?,
    };
    let claim = c
        .room
        .claim(&listed, &found.parent, &id.name, want)
        .map_err(|no| no.for_growth(current))?;
    let update = QuotaUpdate {
        max_capacity_bytes: Some(want),
        max_file_count: None,
    };
    let updated = put(c, &id, quota.id, &update)?;
    let c2 = c.clone();
    c.poller.quota(id.space, updated, move |q| {
        c2.accounts.written(id.parent(), &id.name, &q);
        drop((guard, claim));
        done(q.max_capacity_bytes.unwrap_or(want))
    })
}

/// The size of a quota already at `want` or more: at once when it is
/// `active`, FailedPrecondition when it is in `error`, else (an update
/// under way, perhaps a lost call's) once the poller sees it settle.
fn in_force(c: &Controller, id: &SubdirId, quota: Quota, want: i64) -> Step<i64> {
    match quota.status {
        Status::Active => done(quota.max_capacity_bytes.unwrap_or(want)),
        Status::Error => Err(Error::FailedPrecondition(format!(
            "NFS quota {} ({}) of volume {id} is in status error; the backend did not apply its size",
            quota.id, quota.path
        ))),
        _ => {
            let id = id.clone();
            c.poller
                .quota(id.space, quota, move |q| match q.max_capacity_bytes.unwrap_or(0) {
                    max if max >= want => done(max),
                    max => Err(Error::Aborted(format!(
                        "the quota of volume {id} settled at {max} bytes, below the {want} asked; retry"
                    ))),
                })
        }
    }
}

/// `max-files` of a directory volume: its quota's file-count limit.
pub fn modify(c: &Arc<Controller>, id: SubdirId, mutable: Mutable) -> Step<()> {
    mutable.check_subdirectory()?;
    let guard = c.lock(Lock::Directory(id.clone()))?;
    let Some(quota) = find(c, &id)?.quota else {
        return Err(Error::FailedPrecondition(format!(
            "volume {id} has no quota (its class is quota: best-effort or off), so it has no file-count limit to change"
        )));
    };
    if mutable.max_files.is_none() || quota.max_file_count == mutable.max_files {
        return done(());
    }
    let update = QuotaUpdate {
        max_capacity_bytes: None,
        max_file_count: mutable.max_files,
    };
    let updated = put(c, &id, quota.id, &update)?;
    c.poller.quota(id.space, updated, move |_| {
        drop(guard);
        done(())
    })
}

/// PUTs `update` to quota `quota_id` of volume `id`, telling the parent's
/// account what the backend answered, or that it must be read again.
fn put(c: &Controller, id: &SubdirId, quota_id: u64, update: &QuotaUpdate) -> Result<Quota, Error> {
    match c
        .cloud
        .update_quota(id.space, id.filesystem, quota_id, update)
    {
        Ok(updated) => {
            c.accounts.written(id.parent(), &id.name, &updated);
            Ok(updated)
        }
        Err(e) => {
            let reason = if e.maybe_applied {
                Reason::InDoubt
            } else {
                Reason::Refused
            };
            c.accounts.due(id.parent(), reason);
            Err(e.error)
        }
    }
}

/// DELETEs quota `quota_id` of volume `id` (one already gone is removed),
/// telling the parent's account.
pub fn remove(c: &Controller, id: &SubdirId, quota_id: u64) -> Result<(), Error> {
    match c.cloud.delete_quota(id.space, id.filesystem, quota_id) {
        Ok(()) | Err(Error::NotFound(_)) => {
            c.accounts.deleted(id.parent(), quota_id);
            Ok(())
        }
        Err(e) => {
            c.accounts.due(id.parent(), Reason::Refused);
            Err(e)
        }
    }
}
