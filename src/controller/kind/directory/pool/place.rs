//! Where a new volume of a pool goes: the filesystem already holding its
//! marker (a repeat), else the fullest filesystem whose room (its quotas,
//! what deleted volumes keep, the claims of calls under way) fits it, so
//! volumes pack onto few filesystems and empty ones can be pruned or stay
//! spare. When none fits, one new filesystem is made while the pool is
//! below its bound, and every create waiting for room parks on that one
//! creation (holding no worker); at the bound the create is
//! ResourceExhausted, naming the pool, its filesystems and their room.

use super::{grow, members};
use crate::controller::kind::directory::ledger::account::Purpose;
use crate::controller::kind::directory::ledger::quotas;
use crate::controller::kind::directory::ledger::quotas::NoRoom;
use crate::controller::kind::directory::ledger::room::{Claim, Listed};
use crate::controller::kind::directory::parent::files;
use crate::controller::kind::directory::parent::kept;
use crate::controller::kind::directory::volume::lookup::{quota_list, room_left};
use crate::controller::request::params::PoolParams;
use crate::controller::state::controller::Controller;
use crate::controller::state::directory::pools::PoolKey;
use crate::controller::state::lock_keys::Lock;
use crate::flow::{done, Step, Then};
use crate::handles::DirName;
use crate::linode::{Filesystem, MtlsMode, Quota, Status};
use crate::locks::OpGuard;
use crate::metrics::{self, Placement, PoolGrowth};
use crate::mutex::lock;
use crate::Error;
use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

/// A new volume's parent, chosen.
pub struct Placed {
    pub parent: Filesystem,
    /// The room claimed on it and the quotas it was claimed against; `None`
    /// for a repeat, whose volume exists.
    pub claim: Option<(Claim, Seen)>,
    /// Keeps another call for the same name from placing it elsewhere
    /// until this create is answered.
    pub guard: OpGuard,
}

/// A volume looking for room.
struct Want {
    key: PoolKey,
    pool: PoolParams,
    region: String,
    /// Its CSI name, and its directory's.
    name: String,
    dir: DirName,
    capacity: i64,
}

/// The pool filesystem new volume `name` of `capacity` bytes goes to.
pub fn place(
    c: &Arc<Controller>,
    space: u64,
    pool: &PoolParams,
    region: &str,
    name: &str,
    capacity: i64,
) -> Step<Placed> {
    if capacity > pool.filesystem_bytes {
        return Err(Error::OutOfRange(format!(
            "a volume of {capacity} bytes is larger than the filesystems of pool \"{}\" ({} bytes, pool-filesystem-size)",
            pool.name, pool.filesystem_bytes
        )));
    }
    let dir = DirName::for_name(name);
    let guard = c.lock(Lock::Placement {
        space,
        pool: pool.name.clone(),
        name: dir.clone(),
    })?;
    lock(&c.pools.spaces).insert(space);
    let want = Want {
        key: (space, pool.name.clone()),
        pool: pool.clone(),
        region: region.to_string(),
        name: name.to_string(),
        dir,
        capacity,
    };
    attempt(c, Arc::new(want), guard, false)
}

/// One search for room; `waited` once it parked on a new filesystem.
fn attempt(c: &Arc<Controller>, want: Arc<Want>, guard: OpGuard, waited: bool) -> Step<Placed> {
    let members = members::list(c, &want.key, &want.region, false)?;
    let mtls = c.spaces.mtls_mode(want.key.0)?;
    let active: Vec<&Filesystem> = members
        .iter()
        .filter(|fs| fs.status == Status::Active)
        .collect();
    // Where another name (two can map to one directory) or someone's own
    // directory holds the name, it cannot go.
    let mut free = Vec::new();
    for fs in &active {
        let root = c.shares.root(fs, mtls.as_ref())?;
        match files::read_marker(&root, &want.dir)? {
            Some(m) if m.csi_name == want.name && m.is_of(c.marks.cluster()) => {
                return placed(c, &want, fs, None, guard, waited)
            }
            Some(_) => {}
            None if std::fs::symlink_metadata(files::volume_dir(&root, &want.dir)).is_ok() => {}
            None => free.push(*fs),
        }
    }
    let mut left = Vec::new();
    for fs in by_fullness(c, &free, want.capacity) {
        match claim(c, &want, fs, mtls.as_ref())? {
            Ok(claim) => return placed(c, &want, fs, Some(claim), guard, waited),
            Err(no) => left.push((fs.id, no.left())),
        }
    }
    no_room(c, want, &members, left, guard)
}

/// `active` in the order placement tries them: those the last lists say
/// have room for `asked` first, fullest first, then the rest.
fn by_fullness<'a>(c: &Controller, active: &[&'a Filesystem], asked: i64) -> Vec<&'a Filesystem> {
    let hints = lock(&c.pools.promised).clone();
    let mut order: Vec<(bool, i64, &Filesystem)> = active
        .iter()
        .map(|fs| {
            let promised = hints.get(&members::vol_of(fs)).copied().unwrap_or(0);
            let fits = fs
                .capacity_bytes()
                .is_none_or(|cap| promised.saturating_add(asked) <= cap);
            (fits, promised, *fs)
        })
        .collect();
    order.sort_by_key(|(fits, promised, fs)| (!fits, Reverse(*promised), fs.id));
    order.into_iter().map(|(_, _, fs)| fs).collect()
}

/// The quotas of a pool filesystem a placement saw, and when they were
/// listed: `Err` with the reason when the backend has no quota API. The
/// create goes on with them rather than list them again.
pub type Seen = (Instant, Result<Vec<Quota>, String>);

/// Claims the room `want` asks on `fs` from a fresh quota list, unless `fs`
/// is being pruned; the list goes with the claim.
fn claim(
    c: &Controller,
    want: &Want,
    fs: &Filesystem,
    mtls: Option<&MtlsMode>,
) -> Result<Result<(Claim, Seen), NoRoom>, Error> {
    let vol = members::vol_of(fs);
    let root = c.shares.root(fs, mtls)?;
    let kept = kept::total(&root)?;
    let (read_at, listed) = quota_list(c, fs, Purpose::Write);
    let seen = match listed {
        Ok(all) => Ok(all),
        Err(Error::Unimplemented(why)) => Err(why),
        Err(e) => return Err(e),
    };
    let all = seen.as_deref().unwrap_or_default();
    lock(&c.pools.promised).insert(vol, quotas::promised(all) + kept);
    let listed = Listed {
        quotas: all,
        read_at,
        kept,
    };
    // Under the pool's gate, so a prune deciding at the same time sees it.
    let gate = c.pools.gate(&want.key);
    let _gate = lock(&gate);
    if lock(&c.pools.pruned).contains(&vol) {
        return Ok(Err(NoRoom::none(fs)));
    }
    let claimed = c.room.claim(&listed, fs, &want.dir, want.capacity);
    if claimed.is_ok() {
        lock(&c.pools.promised).insert(vol, quotas::promised(all) + kept + want.capacity);
    }
    Ok(claimed.map(|claim| (claim, (read_at, seen.clone()))))
}

fn placed(
    c: &Arc<Controller>,
    want: &Want,
    fs: &Filesystem,
    claim: Option<(Claim, Seen)>,
    guard: OpGuard,
    waited: bool,
) -> Step<Placed> {
    let outcome = if waited {
        Placement::Waited
    } else {
        Placement::Placed
    };
    metrics::pool_placement(&want.pool.name, outcome);
    if claim.is_some() {
        grow_ahead(c, want);
    }
    let parent = fs.clone();
    grow::ready(c, fs).then(move |()| {
        done(Placed {
            parent,
            claim,
            guard,
        })
    })
}

/// Creates under way on a pool from which placements are a burst.
const BURST: usize = 8;

/// Makes the pool's next filesystem now when placements are using up the
/// room of those it has, so a burst never parks on an activation: the room
/// of its filesystems (as the last placements counted it; one being made
/// counts whole) is kept at `pool-spares` filesystems' worth (half of one
/// with none), and during a burst (`BURST` creates under way on the pool)
/// one filesystem's worth more, so that a new one has a whole filesystem's
/// placements to become active and ready. Nothing is made at the pool's
/// bound, or while another decision for the pool is under way (the next
/// placement looks again). The new one is made ready once active, by no
/// call, and placed on only then.
fn grow_ahead(c: &Arc<Controller>, want: &Want) {
    let gate = c.pools.gate(&want.key);
    let Ok(_decided) = gate.try_lock() else {
        return;
    };
    let members = match members::list(c, &want.key, &want.region, false) {
        Ok(members) => members,
        Err(e) => {
            log::warn!("pool \"{}\": {e}; it does not grow ahead", want.pool.name);
            return;
        }
    };
    if members.len() >= want.pool.max_filesystems as usize {
        return;
    }
    let size = want.pool.filesystem_bytes;
    let promised = lock(&c.pools.promised).clone();
    let room: i64 = members
        .iter()
        .map(|fs| match fs.status {
            Status::Active => {
                let taken = promised.get(&members::vol_of(fs)).copied().unwrap_or(0);
                (fs.capacity_bytes().unwrap_or(size) - taken).max(0)
            }
            Status::Creating => size,
            _ => 0,
        })
        .sum();
    let under_way: usize = members
        .iter()
        .map(|fs| c.room.under_way(fs.space_id, fs.id))
        .sum();
    let spares = match want.pool.spares {
        0 => size / 2,
        n => i64::from(n).saturating_mul(size),
    };
    let keep = if under_way >= BURST {
        spares.saturating_add(size)
    } else {
        spares
    };
    if room >= keep {
        return;
    }
    let made = match grow::grow(
        c,
        &want.key,
        &want.pool,
        &want.region,
        &members,
        PoolGrowth::Ahead,
    ) {
        Ok(fs) => fs,
        Err(e) => {
            log::warn!(
                "pool \"{}\": growing ahead of demand failed: {e}",
                want.pool.name
            );
            return;
        }
    };
    // Placements see it once it is ready, so none parks on its readiness
    // while the others still have room.
    let (c2, key) = (c.clone(), want.key.clone());
    let ready = c.poller.filesystem(made, move |fs| {
        let c3 = c2.clone();
        grow::ready(&c2, &fs).then(move |()| {
            members::remember(&c3, &key, &fs);
            done(())
        })
    });
    c.rpc.detach("pool growth ahead of demand", ready);
}

/// No filesystem of those listed had room (`left`: each one's room): try
/// one another call made meanwhile, park on the one being made, make one,
/// or answer ResourceExhausted at the bound.
fn no_room(
    c: &Arc<Controller>,
    want: Arc<Want>,
    seen: &[Filesystem],
    left: Vec<(u64, i64)>,
    guard: OpGuard,
) -> Step<Placed> {
    let gate = c.pools.gate(&want.key);
    let decided = lock(&gate);
    // One being made as this process last saw it is waited for without a
    // list: a burst that fills the pool lists it once, not once a call.
    let known = seen
        .iter()
        .find(|fs| fs.status == Status::Creating)
        .cloned();
    let now = match known {
        Some(_) => Vec::new(),
        None => members::list(c, &want.key, &want.region, true)?,
    };
    let seen: BTreeSet<u64> = seen
        .iter()
        .filter(|fs| fs.status == Status::Active)
        .map(|fs| fs.id)
        .collect();
    if now
        .iter()
        .any(|fs| fs.status == Status::Active && !seen.contains(&fs.id))
    {
        drop(decided);
        return attempt(c, want, guard, true);
    }
    let making =
        match known.or_else(|| now.iter().find(|fs| fs.status == Status::Creating).cloned()) {
            Some(fs) => fs,
            None if now.len() < want.pool.max_filesystems as usize => grow::grow(
                c,
                &want.key,
                &want.pool,
                &want.region,
                &now,
                PoolGrowth::Room,
            )?,
            None => {
                metrics::pool_placement(&want.pool.name, Placement::Exhausted);
                return Err(exhausted(&want, &now, &left));
            }
        };
    drop(decided);
    log::info!(
        "pool \"{}\": volume {} waits for new pool filesystem {}/{}",
        want.pool.name,
        want.name,
        making.space_id,
        making.id
    );
    let (c2, vol) = (c.clone(), members::vol_of(&making));
    c.poller
        .filesystem(making, done)
        .then_result(move |waited| match waited {
            Ok(fs) => {
                members::remember(&c2, &want.key, &fs);
                attempt(&c2, want, guard, true)
            }
            // Gone or failed: not the caller's doing. The upkeep deletes a
            // failed one, and a retry places the volume anew.
            Err(e @ (Error::NotFound(_) | Error::FailedPrecondition(_))) => {
                members::forget(&c2, &want.key, vol);
                Err(Error::Unavailable(format!(
                    "pool \"{}\": new filesystem {vol} did not become active ({e}); retry",
                    want.pool.name
                )))
            }
            Err(e) => Err(e),
        })
}

/// ResourceExhausted at the pool's bound, naming each filesystem's room.
fn exhausted(want: &Want, members: &[Filesystem], left: &[(u64, i64)]) -> Error {
    let each: Vec<String> = members
        .iter()
        .map(|fs| match left.iter().find(|(id, _)| *id == fs.id) {
            Some((_, bytes)) => format!("{}/{}: {bytes} bytes left", fs.space_id, fs.id),
            None => format!("{}/{}: {}", fs.space_id, fs.id, fs.status),
        })
        .collect();
    Error::ResourceExhausted(format!(
        "pool \"{}\" in space {} is full: it has {} of its {} filesystems (pool-max-filesystems) and a volume of {} bytes fits on none ({})",
        want.pool.name,
        want.key.0,
        members.len(),
        want.pool.max_filesystems,
        want.capacity,
        each.join(", ")
    ))
}

/// What new volumes of `pool` can still get: the room of its filesystems
/// and of those it may still make.
pub fn capacity(c: &Controller, space: u64, pool: &PoolParams, region: &str) -> Result<i64, Error> {
    let key = (space, pool.name.clone());
    let members = members::list(c, &key, region, false)?;
    let mtls = c.spaces.mtls_mode(space)?;
    let mut room = 0i64;
    for fs in members.iter().filter(|fs| fs.status == Status::Active) {
        room += room_left(c, fs, mtls.as_ref(), pool.filesystem_bytes)?;
    }
    let more = (pool.max_filesystems as usize).saturating_sub(members.len()) as i64;
    Ok(room.saturating_add(more.saturating_mul(pool.filesystem_bytes)))
}
