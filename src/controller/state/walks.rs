//! The listings ListVolumes walks are served from. A token is keyset: the
//! handle of the first volume of the next page, so it stays valid however
//! volumes come and go. The listing a walk's first page made is kept for
//! `KEPT_FOR`, keyed by the tokens it hands out, and later pages are cut
//! from it instead of listing every Space again, so a walk of N volumes
//! costs about one full listing.
//!
//! The plain volume handle suffices as the key: of the kept listings that
//! handed out a token, the newest is used, and that is never older than the
//! walk's own first page (which handed it out too). Cutting a page at the
//! token from any listing made since the walk began neither skips nor
//! repeats a volume that existed throughout: each such volume is in both
//! listings, on the side of the token it sorts to. Once no kept listing
//! handed out the token (expired, evicted, another process, an earlier
//! version of the driver) the page is cut from a fresh listing the same
//! way. Only memory here; the listing itself is `kind::list`'s.

use crate::controller::request::answer::Described;
use crate::handles::VolumeHandle;
use crate::mutex::lock;
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a walk's listing serves its later pages: csi-attacher and
/// csi-sanity ask for the next page at once, and a volume created after
/// the walk began need not be in it.
pub const KEPT_FOR: Duration = Duration::from_secs(120);
/// At most this many listings are kept (the newest).
pub const MAX_WALKS: usize = 8;
/// And at most this many volumes across them (a few hundred bytes each):
/// two walks of 10,000 volumes side by side. A listing larger than that
/// alone is not kept, and each of its pages lists afresh.
pub const MAX_KEPT_VOLUMES: usize = 25_000;

/// A kept listing.
pub type Listing = Arc<Vec<Described>>;

struct Walk {
    id: u64,
    made: Instant,
    volumes: Listing,
    /// The tokens handed out for pages of this listing.
    issued: HashSet<VolumeHandle>,
}

#[derive(Default)]
struct Kept {
    next_id: u64,
    walks: VecDeque<Walk>,
}

impl Kept {
    fn expire(&mut self) {
        let now = Instant::now();
        self.walks.retain(|w| now.duration_since(w.made) < KEPT_FOR);
    }
}

/// Which kept listing a page came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkId(u64);

#[derive(Default)]
pub struct Walks {
    kept: Mutex<Kept>,
}

impl Walks {
    /// The newest kept listing that handed out `token`.
    pub fn find(&self, token: &VolumeHandle) -> Option<(WalkId, Listing)> {
        let mut kept = lock(&self.kept);
        kept.expire();
        kept.walks
            .iter()
            .rev()
            .find(|w| w.issued.contains(token))
            .map(|w| (WalkId(w.id), w.volumes.clone()))
    }

    /// `next` is handed out as the token of the page after one cut from
    /// `volumes`: by walk `from`, the kept listing the page came from, or
    /// else (`None`) by a new walk over a fresh listing.
    pub fn issue(&self, from: Option<WalkId>, volumes: &Listing, next: VolumeHandle) {
        let mut kept = lock(&self.kept);
        kept.expire();
        if let Some(from) = from {
            // Expired meanwhile: its next page lists afresh.
            if let Some(walk) = kept.walks.iter_mut().find(|w| w.id == from.0) {
                walk.issued.insert(next);
            }
            return;
        }
        if volumes.len() > MAX_KEPT_VOLUMES {
            // Not kept: an older listing that handed out the same token
            // must not serve this walk's next page.
            kept.walks.retain(|w| !w.issued.contains(&next));
            return;
        }
        kept.next_id += 1;
        let id = kept.next_id;
        kept.walks.push_back(Walk {
            id,
            made: Instant::now(),
            volumes: volumes.clone(),
            issued: HashSet::from([next]),
        });
        while kept.walks.len() > MAX_WALKS
            || kept.walks.iter().map(|w| w.volumes.len()).sum::<usize>() > MAX_KEPT_VOLUMES
        {
            kept.walks.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::handles::VolumeId;
    use crate::proto::csi;

    fn id(n: u64) -> VolumeId {
        VolumeId {
            space: 7,
            filesystem: n,
        }
    }

    fn fs(n: u64) -> Described {
        Described {
            handle: vol(n),
            acl: id(n),
            volume: csi::Volume::new(),
            condition: csi::VolumeCondition::new(),
        }
    }

    fn vol(n: u64) -> VolumeHandle {
        VolumeHandle::from(id(n))
    }

    fn listing(ids: impl IntoIterator<Item = u64>) -> Listing {
        Arc::new(ids.into_iter().map(fs).collect())
    }

    #[test]
    fn a_token_finds_the_newest_listing_that_handed_it_out() {
        let walks = Walks::default();
        assert!(walks.find(&vol(3)).is_none());
        let old = listing([1, 2, 3, 4]);
        walks.issue(None, &old, vol(3));
        let (id, found) = walks.find(&vol(3)).unwrap();
        assert!(Arc::ptr_eq(&found, &old));
        walks.issue(Some(id), &found, vol(4));
        assert_eq!(walks.find(&vol(4)).unwrap().0, id, "the same walk");

        let new = listing([1, 3, 4, 5]);
        walks.issue(None, &new, vol(3));
        assert!(Arc::ptr_eq(&walks.find(&vol(3)).unwrap().1, &new));
        assert!(Arc::ptr_eq(&walks.find(&vol(4)).unwrap().1, &old));
        assert!(walks.find(&vol(2)).is_none(), "never handed out");
    }

    #[test]
    fn walks_are_bounded_in_number_and_size() {
        let walks = Walks::default();
        for n in 0..MAX_WALKS as u64 + 2 {
            walks.issue(None, &listing([1]), vol(100 + n));
        }
        assert!(walks.find(&vol(100)).is_none() && walks.find(&vol(101)).is_none());
        assert!((102..100 + MAX_WALKS as u64 + 2).all(|n| walks.find(&vol(n)).is_some()));

        let big = listing(0..MAX_KEPT_VOLUMES as u64 / 2 + 1);
        walks.issue(None, &big, vol(1));
        walks.issue(None, &big, vol(2));
        assert!(
            walks.find(&vol(1)).is_none(),
            "the older is evicted for size"
        );
        assert!(walks.find(&vol(2)).is_some());
        walks.issue(None, &listing([1, 2, 3]), vol(3));
        walks.issue(None, &listing(0..MAX_KEPT_VOLUMES as u64 + 1), vol(3));
        assert!(
            walks.find(&vol(3)).is_none(),
            "too large to keep, and no older listing stands in"
        );
    }
}
