//! Shared parents as last read, reused for a short time (`SPACE_CACHE_TTL`,
//! as Spaces are): every create, snapshot and expansion of a directory
//! volume needs its parent, and a burst on one parent should read it once,
//! not once per call (a label lookup is one of Linode's scarce paginated
//! requests). Only a parent that passed its checks is remembered, and the
//! checks run again on every use; an entry is dropped when anything under
//! the parent answers 404. Failures are never cached, and nothing here
//! calls Linode or decides what a parent may be.

use crate::handles::VolumeId;
use crate::linode::Filesystem;
use crate::mutex::lock;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct ParentCache {
    ttl: Duration,
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    by_id: HashMap<VolumeId, (Filesystem, Instant)>,
    /// `(space, label, region)` → the filesystem's id.
    by_label: HashMap<(u64, String, String), (u64, Instant)>,
}

impl ParentCache {
    /// `ttl` zero remembers nothing.
    pub fn new(ttl: Duration) -> ParentCache {
        ParentCache {
            ttl,
            cache: Mutex::default(),
        }
    }

    /// How long an entry is reused (`SPACE_CACHE_TTL`).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn fresh(&self, at: Instant) -> bool {
        at.elapsed() < self.ttl
    }

    /// Parent `vol`, if it was read recently.
    pub fn get(&self, vol: VolumeId) -> Option<Filesystem> {
        lock(&self.cache)
            .by_id
            .get(&vol)
            .filter(|(_, at)| self.fresh(*at))
            .map(|(fs, _)| fs.clone())
    }

    /// The parent labelled `label` in `region` of `space`, if it was
    /// looked up recently.
    pub fn labelled(&self, space: u64, label: &str, region: &str) -> Option<Filesystem> {
        let id = {
            let cache = lock(&self.cache);
            let key = (space, label.to_string(), region.to_string());
            cache
                .by_label
                .get(&key)
                .filter(|(_, at)| self.fresh(*at))
                .map(|(id, _)| *id)?
        };
        self.get(VolumeId {
            space,
            filesystem: id,
        })
    }

    /// Remembers `fs`, a parent that passed its checks just now, and the
    /// label lookup that found it, if one did.
    pub fn remember(&self, fs: &Filesystem, lookup: Option<(&str, &str)>) {
        if self.ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut cache = lock(&self.cache);
        let vol = VolumeId {
            space: fs.space_id,
            filesystem: fs.id,
        };
        cache.by_id.insert(vol, (fs.clone(), now));
        if let Some((label, region)) = lookup {
            let key = (fs.space_id, label.to_string(), region.to_string());
            cache.by_label.insert(key, (fs.id, now));
        }
    }

    /// Forgets parent `vol`: something under it answered 404.
    pub fn forget(&self, vol: VolumeId) {
        let mut cache = lock(&self.cache);
        cache.by_id.remove(&vol);
        cache
            .by_label
            .retain(|(space, _, _), (id, _)| (*space, *id) != (vol.space, vol.filesystem));
    }
}
