//! A new filesystem for a pool, and what makes any pool filesystem ready
//! for directory volumes. The POST carries the pool's tags (`tags::POOL`
//! and the pool's name) and the cluster's, never the volume mark, so no
//! whole-filesystem RPC ever acts on it and no listing reports it as a
//! volume; a POST whose outcome is unknown is looked up by its label
//! before another is sent, and a label something else holds is stepped past.
//! Ready means squash `none` (the controller chowns and removes tenants'
//! files as root) and, in node mode, an ACL admitting the controller's own
//! Linode, which mounts it.

use super::members;
use crate::config::AccessPolicyMode;
use crate::controller::acl;
use crate::controller::request::params::PoolParams;
use crate::controller::state::controller::Controller;
use crate::controller::state::directory::pools::PoolKey;
use crate::controller::state::lock_keys::Doubt;
use crate::controller::state::tags;
use crate::flow::{done, Step, Then};
use crate::linode::{Filesystem, NewFilesystem, SquashPolicy, Status};
use crate::metrics::{self, PoolGrowth};
use crate::mutex::lock;
use crate::Error;
use std::sync::Arc;

/// POSTs the next filesystem of `pool` (whose live filesystems are
/// `members`) in `region`: answered `creating`.
pub(super) fn grow(
    c: &Controller,
    key: &PoolKey,
    pool: &PoolParams,
    region: &str,
    members: &[Filesystem],
    why: PoolGrowth,
) -> Result<Filesystem, Error> {
    let space = key.0;
    let (mut past, mut skipped) = (0, 0);
    let (fs, label) = loop {
        let (label, n) = members::next_label(c.marks.cluster(), &pool.name, members, past);
        match post(c, space, &label, pool, region) {
            Ok(fs) => break (fs, label),
            // A filesystem that only looks like the pool's holds the label:
            // the pool grows past it, never stops at it.
            Err(e) if skipped < LOOK_ALIKES && squatted(c, space, &label, region, pool)? => {
                log::warn!(
                    "pool \"{}\": label \"{label}\" is taken by a filesystem that is not the pool's ({}); trying the next",
                    pool.name,
                    e.message()
                );
                (past, skipped) = (n, skipped + 1);
            }
            Err(e) => return Err(e),
        }
    };
    log::info!(
        "pool \"{}\": created filesystem {space}/{} (\"{label}\", {} bytes) for {}",
        pool.name,
        fs.id,
        pool.filesystem_bytes,
        match why {
            PoolGrowth::Room => "a volume no filesystem of the pool had room for",
            PoolGrowth::Ahead => "the placements using up the room of the others",
            PoolGrowth::Spare => "a spare",
        }
    );
    metrics::pool_filesystem_created(&pool.name, why);
    lock(&c.pools.made).insert(members::vol_of(&fs));
    members::remember(c, key, &fs);
    Ok(fs)
}

/// How many labels taken by look-alikes one growth steps past.
const LOOK_ALIKES: u32 = 3;

/// POSTs pool filesystem `label`, or finds the one an earlier POST whose
/// outcome was unknown made.
fn post(
    c: &Controller,
    space: u64,
    label: &str,
    pool: &PoolParams,
    region: &str,
) -> Result<Filesystem, Error> {
    let doubt = Doubt::Filesystem {
        space,
        label: label.to_string(),
    };
    c.in_doubt
        .check(&doubt, &format!("create pool filesystem \"{label}\""))?;
    let find = || -> Result<Option<Filesystem>, Error> {
        Ok(c.cloud
            .find_filesystems(space, label, region)?
            .into_iter()
            .find(|fs| c.marks.is_pool_member(fs, &pool.name) && fs.status != Status::Deleting))
    };
    let new = NewFilesystem {
        label: label.to_string(),
        region: region.to_string(),
        max_capacity_bytes: pool.filesystem_bytes,
        tags: c.marks.with_cluster(&[tags::POOL, &tags::pool(&pool.name)]),
    };
    match c.cloud.create_filesystem(space, &new) {
        Ok(fs) => Ok(fs),
        Err(failed) => c.in_doubt.found_or(&doubt, failed, find),
    }
}

/// Whether a live filesystem that is no member of the pool holds `label`.
fn squatted(
    c: &Controller,
    space: u64,
    label: &str,
    region: &str,
    pool: &PoolParams,
) -> Result<bool, Error> {
    Ok(c.cloud
        .find_filesystems(space, label, region)?
        .iter()
        .any(|fs| fs.status != Status::Deleting && !c.marks.is_pool_member(fs, &pool.name)))
}

/// Makes active pool filesystem `fs` ready for directory volumes, once per
/// process (a policy already right costs one read; a filesystem a killed
/// process made is finished by the next): squash and, in node mode, the
/// controller's own Linode admitted, in one batch. For a filesystem this
/// process made, the batch need not read the policy first.
pub(super) fn ready(c: &Arc<Controller>, fs: &Filesystem) -> Step<()> {
    let vol = members::vol_of(fs);
    if lock(&c.pools.ready).contains(&vol) {
        return done(());
    }
    // A backend without filesystem policies has no squash to set; node
    // mode still asks for the ACL, and is refused with the reason.
    let squash = (!c.cloud.lacks_filesystem_policies()).then_some(SquashPolicy::None);
    let admit = match c.mode {
        AccessPolicyMode::Node => vec![c.own_linode()?],
        AccessPolicyMode::Space => Vec::new(),
    };
    let made = lock(&c.pools.made)
        .remove(&vol)
        .then(|| acl::policy::of_new(fs));
    let prepared = acl::prepare(c, vol, squash, admit, made);
    let c = c.clone();
    prepared.then(move |()| {
        lock(&c.pools.ready).insert(vol);
        done(())
    })
}
