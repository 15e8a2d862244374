//! The room on shared parents that creates and expansions still under way
//! have claimed. A quota's POST or update is seen in the parent's account
//! only once it is answered, so calls that read it at the same time would
//! each find room for themselves and together promise more than the parent
//! holds. A claim is checked against the list and every other claim at
//! once, and lasts until its call ends, when the backend shows the quota
//! (or its call removed it). A claim given up still counts for a list read
//! before it was given up (that list may not show its quota), so a call
//! finishing between another's list and claim is counted by one of them.
//! It knows nothing of the backend itself: the caller hands it the quotas
//! it read, and the moment they were current.

use super::quotas::{self, NoRoom};
use crate::handles::DirName;
use crate::linode::{Filesystem, Quota};
use crate::mutex::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a claim given up is remembered: far longer than a quota list
/// can take between its start and the claim that follows it.
const REMEMBERED: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy)]
struct Held {
    bytes: i64,
    /// When its call ended; `None` while it runs.
    released: Option<Instant>,
}

type Claims = HashMap<(u64, u64), HashMap<DirName, Held>>;

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

/// What a claim is checked against: the parent's quotas, listed from
/// `read_at` on, and what deleted volumes keep on it.
pub struct Listed<'a> {
    pub quotas: &'a [Quota],
    pub read_at: Instant,
    pub kept: i64,
}

impl Room {
    /// Claims `asked` bytes of `fs` for volume `name`: `NoRoom` when they
    /// do not fit beside what the list promises and what the other calls
    /// under way (or ended since the list was begun) have claimed.
    pub fn claim(
        &self,
        listed: &Listed,
        fs: &Filesystem,
        name: &DirName,
        asked: i64,
    ) -> Result<Claim, NoRoom> {
        let parent = (fs.space_id, fs.id);
        let mut all = lock(&self.0);
        let now = Instant::now();
        if let Some(claims) = all.get_mut(&parent) {
            claims.retain(|_, h| {
                h.released
                    .is_none_or(|t| now.duration_since(t) < REMEMBERED)
            });
        }
        // A claim whose quota the list already shows is counted there, at
        // the size listed: only what it adds to that is counted here.
        let under_way: i64 = all
            .get(&parent)
            .into_iter()
            .flatten()
            .filter(|(other, held)| {
                *other != name && held.released.is_none_or(|t| t > listed.read_at)
            })
            .map(|(other, held)| {
                let shown = quotas::of_volume(listed.quotas, fs, other)
                    .and_then(|q| q.max_capacity_bytes)
                    .unwrap_or(0);
                held.bytes.saturating_sub(shown).max(0)
            })
            .sum();
        quotas::check_room(listed.quotas, fs, name, asked, listed.kept, under_way)?;
        all.entry(parent).or_default().insert(
            name.clone(),
            Held {
                bytes: asked,
                released: None,
            },
        );
        Ok(Claim {
            room: self.clone(),
            parent,
            name: name.clone(),
        })
    }
}

impl Room {
    /// Whether a call under way holds a claim on parent `(space, fs)`.
    pub fn claimed(&self, space: u64, fs: u64) -> bool {
        self.under_way(space, fs) > 0
    }

    /// How many calls under way hold a claim on parent `(space, fs)`.
    pub fn under_way(&self, space: u64, fs: u64) -> usize {
        lock(&self.0).get(&(space, fs)).map_or(0, |claims| {
            claims.values().filter(|h| h.released.is_none()).count()
        })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut all = lock(&self.room.0);
        if let Some(held) = all
            .get_mut(&self.parent)
            .and_then(|claims| claims.get_mut(&self.name))
        {
            held.released = Some(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::kind::directory::ledger::quotas::tests::fs;

    fn quota(name: &str, max: i64) -> Quota {
        quotas::tests::quota(&format!("/csi-volumes/{name}"), max, false)
    }

    fn name(n: &str) -> DirName {
        DirName::parse(n).unwrap()
    }

    fn listed(quotas: &[Quota], read_at: Instant) -> Listed<'_> {
        Listed {
            quotas,
            read_at,
            kept: 0,
        }
    }

    /// A claim of `bytes` for `volume` against an empty list read now.
    fn fresh(room: &Room, volume: &str, bytes: i64) -> Result<Claim, NoRoom> {
        room.claim(&listed(&[], Instant::now()), &fs(), &name(volume), bytes)
    }

    #[test]
    fn claims_count_until_dropped_and_listed_ones_only_by_what_they_add() {
        let room = Room::default();
        let a = fresh(&room, "pvc-a", 60).unwrap();
        assert!(fresh(&room, "pvc-b", 41).is_err());
        let b = fresh(&room, "pvc-b", 40).unwrap();
        drop(b);
        // pvc-a's quota is listed now, at 60: it is not counted twice.
        let shown = [quota("pvc-a", 60)];
        let b = room
            .claim(&listed(&shown, Instant::now()), &fs(), &name("pvc-b"), 40)
            .unwrap();
        drop((a, b));
        // An expansion of a listed quota counts only what it adds.
        let shown = [quota("pvc-a", 30)];
        let now = Instant::now();
        let grow = room
            .claim(&listed(&shown, now), &fs(), &name("pvc-a"), 50)
            .unwrap();
        assert!(room
            .claim(&listed(&shown, now), &fs(), &name("pvc-b"), 51)
            .is_err());
        let b = room
            .claim(&listed(&shown, now), &fs(), &name("pvc-b"), 50)
            .unwrap();
        drop((grow, b));
        let kept = Listed {
            quotas: &shown,
            read_at: Instant::now(),
            kept: 21,
        };
        assert!(
            room.claim(&kept, &fs(), &name("pvc-c"), 50).is_err(),
            "kept data counts"
        );
    }

    #[test]
    fn a_claim_ended_after_a_list_began_still_counts_for_that_list() {
        let room = Room::default();
        let a = fresh(&room, "pvc-a", 60).unwrap();
        // pvc-b's list is read before pvc-a's call ends and shows no quota
        // of pvc-a...
        let read_at = Instant::now();
        drop(a);
        assert!(
            room.claim(&listed(&[], read_at), &fs(), &name("pvc-b"), 50)
                .is_err(),
            "pvc-a is counted though its call has ended"
        );
        // ...while a list begun after it ended shows its quota.
        let shown = [quota("pvc-a", 60)];
        assert!(room
            .claim(&listed(&shown, Instant::now()), &fs(), &name("pvc-b"), 40)
            .is_ok());
    }
}
