//! The room on shared parents that creates and expansions still under way
//! have claimed. A quota's POST or update is seen in the parent's quota list
//! only once it is sent, so calls that read the list at the same time would
//! each find room for themselves and together promise more than the parent
//! holds. A claim is checked against the list and every other claim at
//! once, and lasts until its call ends, when the backend shows the quota
//! (or its call removed it). It knows nothing of the backend itself: the
//! caller hands it the quotas it read.

use super::quotas;
use crate::handles::DirName;
use crate::linode::{Filesystem, Quota};
use crate::mutex::lock;
use crate::Error;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

type Claims = HashMap<(u64, u64), HashMap<DirName, i64>>;

/// Claims by parent `(space, filesystem)` and volume directory.
#[derive(Debug, Default, Clone)]
pub struct Room(Arc<Mutex<Claims>>);

/// A claim, given up when dropped.
#[derive(Debug)]
pub struct Claim {
    room: Room,
    parent: (u64, u64),
    name: DirName,
}

impl Room {
    /// Claims `asked` bytes of `fs` for volume `name`: ResourceExhausted
    /// when they do not fit beside what `quotas` (the parent's list, just
    /// read) promise and what the other calls under way have claimed.
    pub fn claim(
        &self,
        quotas: &[Quota],
        fs: &Filesystem,
        name: &DirName,
        asked: i64,
    ) -> Result<Claim, Error> {
        let parent = (fs.space_id, fs.id);
        let mut all = lock(&self.0);
        // A claim whose quota the list already shows is counted there, at
        // the size listed: only what it adds to that is counted here.
        let under_way: i64 = all
            .get(&parent)
            .into_iter()
            .flatten()
            .filter(|(other, _)| *other != name)
            .map(|(other, bytes)| {
                let listed = quotas::of_volume(quotas, fs, other)
                    .and_then(|q| q.max_capacity_bytes)
                    .unwrap_or(0);
                bytes.saturating_sub(listed).max(0)
            })
            .sum();
        quotas::check_room(quotas, fs, name, asked, under_way)?;
        all.entry(parent).or_default().insert(name.clone(), asked);
        Ok(Claim {
            room: self.clone(),
            parent,
            name: name.clone(),
        })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut all = lock(&self.room.0);
        if let Some(claims) = all.get_mut(&self.parent) {
            claims.remove(&self.name);
            if claims.is_empty() {
                all.remove(&self.parent);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::quotas::tests::fs;

    fn quota(name: &str, max: i64) -> Quota {
        quotas::tests::quota(&format!("/csi-volumes/{name}"), max, false)
    }

    fn name(n: &str) -> DirName {
        DirName::parse(n).unwrap()
    }

    #[test]
    fn claims_count_until_dropped_and_listed_ones_only_by_what_they_add() {
        let room = Room::default();
        let a = room.claim(&[], &fs(), &name("pvc-a"), 60).unwrap();
        let refused = room.claim(&[], &fs(), &name("pvc-b"), 41).unwrap_err();
        assert!(
            matches!(refused, Error::ResourceExhausted(_)),
            "{refused:?}"
        );
        let b = room.claim(&[], &fs(), &name("pvc-b"), 40).unwrap();
        drop(b);
        // pvc-a's quota is listed now, at 60: it is not counted twice.
        let listed = [quota("pvc-a", 60)];
        let b = room.claim(&listed, &fs(), &name("pvc-b"), 40).unwrap();
        drop((a, b));
        // An expansion of a listed quota counts only what it adds.
        let listed = [quota("pvc-a", 30)];
        let grow = room.claim(&listed, &fs(), &name("pvc-a"), 50).unwrap();
        assert!(room.claim(&listed, &fs(), &name("pvc-b"), 51).is_err());
        let b = room.claim(&listed, &fs(), &name("pvc-b"), 50).unwrap();
        drop((grow, b));
        assert!(
            lock(&room.0).is_empty(),
            "nothing is kept once all are dropped"
        );
    }
}
