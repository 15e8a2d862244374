//! The pools' upkeep, run by the `janitor`: a pool filesystem whose
//! creation failed is deleted; each pool's empty filesystems are counted; beyond the class's `pool-spares` (the oldest kept), each
//! is tagged with when it was first seen empty and deleted once it has
//! stayed empty for `POOL_EMPTY_GRACE`; a spare short is made, one at a
//! time. A pool no StorageClass names any more keeps no spares. When the
//! StorageClasses cannot be read, nothing is pruned or made. Only
//! filesystems carrying the pool mark are ever deleted, only when empty
//! (`emptiness`), and the decision is taken under the pool's gate, which
//! placements claim room under, then checked again.

use super::{emptiness, grow, members};
use crate::controller::kind::directory::ledger::account::Purpose;
use crate::controller::request::params::PoolParams;
use crate::controller::state::controller::Controller;
use crate::controller::state::directory::pools::PoolKey;
use crate::controller::state::tags;
use crate::linode::{Filesystem, Status};
use crate::metrics::{self, PoolGrowth};
use crate::mutex::lock;
use crate::Error;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How pools are tended.
#[derive(Debug, Clone, Copy)]
pub struct TendPolicy {
    /// `POOL_EMPTY_GRACE`.
    pub grace: Duration,
}

/// Tends every pool of `space`. `classes`: the pools the StorageClasses
/// describe in it, `None` when they cannot be read.
pub fn tend(
    c: &Arc<Controller>,
    space: u64,
    classes: Option<&[PoolParams]>,
    policy: TendPolicy,
) -> Result<(), Error> {
    let mut pools: BTreeMap<String, Vec<Filesystem>> = BTreeMap::new();
    // Only this cluster's: another's pool of the same name is its own, and
    // one made before clusters had identities is never pruned.
    for fs in c.cloud.find_filesystems_by_tag(space, tags::POOL)? {
        if !c.marks.made(&fs.tags) {
            continue;
        }
        if let Some(name) = tags::pool_name_of(&fs) {
            pools.entry(name.to_string()).or_default().push(fs);
        }
    }
    for pool in classes.into_iter().flatten() {
        pools.entry(pool.name.clone()).or_default();
    }
    for (name, found) in pools {
        let params = classes.map(|all| all.iter().find(|p| p.name == name));
        if let Err(e) = tend_pool(c, (space, name.clone()), found, params, policy) {
            log::warn!("pool \"{name}\" in space {space}: {e}");
        }
    }
    Ok(())
}

/// Tends one pool. `params`: `None` when the classes cannot be read,
/// `Some(None)` when none names the pool.
fn tend_pool(
    c: &Arc<Controller>,
    key: PoolKey,
    found: Vec<Filesystem>,
    params: Option<Option<&PoolParams>>,
    policy: TendPolicy,
) -> Result<(), Error> {
    let pruned = lock(&c.pools.pruned).clone();
    let live: Vec<Filesystem> = found
        .into_iter()
        .filter(|fs| fs.status != Status::Deleting && !pruned.contains(&members::vol_of(fs)))
        .collect();
    let (mut empty, mut in_use, mut creating) = (Vec::new(), 0, 0);
    for fs in &live {
        if fs.status == Status::Creating {
            creating += 1;
        } else if matches!(fs.status, Status::Error | Status::Failed) {
            discard_failed(c, &key, fs)?;
        } else if fs.status != Status::Active {
            in_use += 1;
        } else if emptiness::is_empty(c, fs, Purpose::Read)? {
            empty.push(fs);
        } else {
            in_use += 1;
            if tags::empty_since_of(fs).is_some() {
                c.cloud.update_filesystem_tags(
                    fs.space_id,
                    fs.id,
                    &tags::without_empty_since(fs),
                )?;
            }
        }
    }
    metrics::pool_filesystems(&key.1, in_use, empty.len(), creating);
    let Some(params) = params else {
        return Ok(());
    };
    empty.sort_by_key(|fs| fs.id);
    let spares = params.map_or(0, |p| p.spares as usize);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    for fs in empty.iter().skip(spares) {
        match tags::empty_since_of(fs) {
            None => {
                let mut marked = fs.tags.clone();
                marked.push(tags::empty_since(now));
                c.cloud
                    .update_filesystem_tags(fs.space_id, fs.id, &marked)?;
            }
            Some(since) if now.saturating_sub(since) >= policy.grace.as_secs() => {
                prune(c, &key, fs, since)?;
            }
            Some(_) => {}
        }
    }
    if let Some(pool) = params {
        let short = empty.len() < pool.spares as usize;
        if short && creating == 0 && live.len() < pool.max_filesystems as usize {
            let region = c.cluster.region()?;
            let gate = c.pools.gate(&key);
            let _decided = lock(&gate);
            let now = members::list(c, &key, &region, true)?;
            if !now.iter().any(|fs| fs.status == Status::Creating) {
                grow::grow(c, &key, pool, &region, &now, PoolGrowth::Spare)?;
            }
        }
    }
    Ok(())
}

/// Deletes `fs`, a pool filesystem whose creation failed: it never held
/// anything, and it counts against the pool's bound.
fn discard_failed(c: &Controller, key: &PoolKey, fs: &Filesystem) -> Result<(), Error> {
    let vol = members::vol_of(fs);
    {
        let gate = c.pools.gate(key);
        let _decided = lock(&gate);
        lock(&c.pools.pruned).insert(vol);
        members::forget(c, key, vol);
    }
    match c.cloud.delete_filesystem(vol.space, vol.filesystem) {
        Ok(()) | Err(Error::NotFound(_)) => {}
        Err(e) => {
            lock(&c.pools.pruned).remove(&vol);
            return Err(e.context(format!("delete failed pool filesystem {vol}")));
        }
    }
    metrics::pool_filesystem_pruned(&key.1);
    log::warn!(
        "pool \"{}\": deleted filesystem {vol} (\"{}\"), whose creation ended {}",
        key.1,
        fs.label,
        fs.status
    );
    Ok(())
}

/// Deletes `fs`, empty since `since`, if it still is: decided under the
/// pool's gate, so no placement claims room on it meanwhile.
fn prune(c: &Arc<Controller>, key: &PoolKey, fs: &Filesystem, since: u64) -> Result<(), Error> {
    let vol = members::vol_of(fs);
    {
        let gate = c.pools.gate(key);
        let _decided = lock(&gate);
        if !emptiness::is_empty(c, fs, Purpose::Fresh)? {
            return Ok(());
        }
        lock(&c.pools.pruned).insert(vol);
        members::forget(c, key, vol);
    }
    let deleted = c.shares.release(vol).and_then(|()| {
        match c.cloud.delete_filesystem(vol.space, vol.filesystem) {
            Ok(()) | Err(Error::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    });
    if let Err(e) = deleted {
        lock(&c.pools.pruned).remove(&vol);
        return Err(e.context(format!("delete empty pool filesystem {vol}")));
    }
    c.parent_cache.forget(vol);
    c.accounts.forget(vol);
    lock(&c.pools.ready).remove(&vol);
    lock(&c.pools.made).remove(&vol);
    metrics::pool_filesystem_pruned(&key.1);
    log::info!(
        "pool \"{}\": deleted filesystem {vol} (\"{}\"), empty since {} (Unix time)",
        key.1,
        fs.label,
        since
    );
    Ok(())
}
