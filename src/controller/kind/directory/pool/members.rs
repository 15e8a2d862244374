//! A pool's filesystems: those in its Space carrying the pool's tags, found
//! with one paginated list by tag and remembered for `SPACE_CACHE_TTL`
//! (every create of a burst needs them), and the label a new one takes.
//! Reads only; a new member is made by `grow`, an old one pruned by `tend`.

use crate::cluster_id::ClusterId;
use crate::controller::state::controller::Controller;
use crate::controller::state::directory::pools::PoolKey;
use crate::controller::state::tags;
use crate::handles::VolumeId;
use crate::linode::{Filesystem, Status};
use crate::mutex::lock;
use crate::Error;
use std::time::Instant;

const PREFIX: &str = "csi-pool-";

/// The label of cluster `cluster`'s pool `pool`'s `n`th filesystem: the
/// cluster is in it, so two clusters' pools of one name never share labels.
fn label(cluster: &ClusterId, pool: &str, n: u32) -> String {
    format!("{PREFIX}{cluster}-{pool}-{n}")
}

/// Which of the pool's filesystems `label` names, if it names one.
fn ordinal(cluster: &ClusterId, pool: &str, label: &str) -> Option<u32> {
    label
        .strip_prefix(PREFIX)?
        .strip_prefix(cluster.as_str())?
        .strip_prefix('-')?
        .strip_prefix(pool)?
        .strip_prefix('-')?
        .parse()
        .ok()
}

/// The label of the next filesystem of `pool`, beside `members` and past
/// the `n`th (a label something else already took).
pub(super) fn next_label(
    cluster: &ClusterId,
    pool: &str,
    members: &[Filesystem],
    past: u32,
) -> (String, u32) {
    let last = members
        .iter()
        .filter_map(|fs| ordinal(cluster, pool, &fs.label))
        .max()
        .unwrap_or(0)
        .max(past);
    (label(cluster, pool, last + 1), last + 1)
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
            c.marks.is_pool_member(fs, pool)
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
            ..crate::controller::kind::directory::ledger::quotas::tests::fs()
        };
        let k = ClusterId::parse("k1").unwrap();
        assert_eq!(next_label(&k, "a", &[], 0).0, "csi-pool-k1-a-1");
        let members = [
            fs("csi-pool-k1-a-1"),
            fs("csi-pool-k1-a-7"),
            fs("csi-pool-k1-ab-9"),
            fs("csi-pool-k2-a-12"),
            fs("csi-pool-a-11"),
            fs("x"),
        ];
        assert_eq!(
            next_label(&k, "a", &members, 0),
            ("csi-pool-k1-a-8".into(), 8)
        );
        assert_eq!(next_label(&k, "a", &members, 8).0, "csi-pool-k1-a-9");
        assert_eq!(ordinal(&k, "a", "csi-pool-k1-a-b-2"), None);
        let longest = ClusterId::parse("abcdefghijklmnop").unwrap();
        assert!(label(&longest, "abcdefghijklmnopqrstuvwx", u32::MAX).len() <= 63);
    }
}
