//! A pool's filesystems: those in its Space carrying the pool's tags, found
//! with one paginated list by tag and remembered for `SPACE_CACHE_TTL`
//! (every create of a burst needs them), and the label a new one takes.
//! Reads only; a new member is made by `grow`, an old one pruned by `tend`.

use super::PoolKey;
use crate::controller::{tags, Controller};
use crate::handles::VolumeId;
use crate::linode::{Filesystem, Status};
use crate::mutex::lock;
use crate::Error;
use std::time::Instant;

const PREFIX: &str = "csi-pool-";

/// The label of pool `pool`'s `n`th filesystem.
fn label(pool: &str, n: u32) -> String {
    format!("{PREFIX}{pool}-{n}")
}

/// Which of pool `pool`'s filesystems `label` names, if it names one.
fn ordinal(pool: &str, label: &str) -> Option<u32> {
    label
        .strip_prefix(PREFIX)?
        .strip_prefix(pool)?
        .strip_prefix('-')?
        .parse()
        .ok()
}

/// The label of the next filesystem of `pool`, beside `members`.
pub(super) fn next_label(pool: &str, members: &[Filesystem]) -> String {
    let last = members
        .iter()
        .filter_map(|fs| ordinal(pool, &fs.label))
        .max()
        .unwrap_or(0);
    label(pool, last + 1)
}

pub(super) fn vol_of(fs: &Filesystem) -> VolumeId {
    VolumeId {
        space: fs.space_id,
        filesystem: fs.id,
    }
}

/// The live filesystems of pool `key` in `region`, by id: those the last
/// list found unless it is older than `SPACE_CACHE_TTL` or `fresh` asks for
/// a new one. Pruned ones are never among them.
pub(super) fn list(
    c: &Controller,
    key: &PoolKey,
    region: &str,
    fresh: bool,
) -> Result<Vec<Filesystem>, Error> {
    if !fresh {
        if let Some((members, at)) = lock(&c.pools.members).get(key) {
            if at.elapsed() < c.parent_cache.ttl() {
                return Ok(members.clone());
            }
        }
    }
    let (space, pool) = (key.0, key.1.as_str());
    let found = c.spaces.checked(
        space,
        c.cloud.find_filesystems_by_tag(space, &tags::pool(pool)),
    )?;
    let pruned = lock(&c.pools.pruned).clone();
    let mut live: Vec<Filesystem> = found
        .into_iter()
        .filter(|fs| {
            tags::is_pool_member(fs, pool)
                && fs.region == region
                && fs.status != Status::Deleting
                && !pruned.contains(&vol_of(fs))
        })
        .collect();
    live.sort_by_key(|fs| fs.id);
    lock(&c.pools.members).insert(key.clone(), (live.clone(), Instant::now()));
    Ok(live)
}

/// Remembers `fs` as pool `key`'s as it is now (made, or become active).
pub(super) fn remember(c: &Controller, key: &PoolKey, fs: &Filesystem) {
    let mut all = lock(&c.pools.members);
    let (members, _) = all
        .entry(key.clone())
        .or_insert_with(|| (Vec::new(), Instant::now()));
    members.retain(|m| m.id != fs.id);
    members.push(fs.clone());
    members.sort_by_key(|fs| fs.id);
}

/// Forgets `vol`, a filesystem of pool `key` being deleted.
pub(super) fn forget(c: &Controller, key: &PoolKey, vol: VolumeId) {
    if let Some((members, _)) = lock(&c.pools.members).get_mut(key) {
        members.retain(|m| vol_of(m) != vol);
    }
    lock(&c.pools.promised).remove(&vol);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_count_up_from_the_highest() {
        let fs = |label: &str| Filesystem {
            label: label.to_string(),
            ..crate::controller::kind::directory::quotas::tests::fs()
        };
        assert_eq!(next_label("a", &[]), "csi-pool-a-1");
        let members = [
            fs("csi-pool-a-1"),
            fs("csi-pool-a-7"),
            fs("csi-pool-ab-9"),
            fs("x"),
        ];
        assert_eq!(next_label("a", &members), "csi-pool-a-8");
        assert_eq!(ordinal("a", "csi-pool-a-b-2"), None);
        assert!(label("abcdefghijklmnopqrstuvwx", u32::MAX).len() <= 63);
    }
}
