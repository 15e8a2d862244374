//! Storage Space lookups, cached for a short time (`SPACE_CACHE_TTL`): a
//! Space by id or label and its access policy's mTLS mode. Every
//! CreateVolume needs both, and a label lookup is one of Linode's scarce
//! paginated requests, so a burst of creates should pay for them once. An
//! entry is refreshed once it expires and dropped as soon as anything
//! under its Space answers 404. Failures are never cached. The cache is
//! never locked across a request, but concurrent misses of one entry share
//! one request: the first caller asks, the others wait for its answer (a
//! burst of creates, or one whose entry just expired, would otherwise send
//! a request per caller). Should that ask fail, each caller that waited
//! asks for itself, so a failure is never handed to a caller that did not
//! see it happen.

use crate::controller::request::checks::exactly_one;
use crate::controller::request::params::SpaceRef;
use crate::linode::{Cloud, MtlsMode, Space};
use crate::mutex::{lock, wait};
use crate::Error;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub struct Spaces {
    cloud: Arc<dyn Cloud>,
    ttl: Duration,
    cache: Mutex<Cache>,
    /// Signalled whenever an ask ends.
    answered: Condvar,
}

#[derive(Default)]
struct Cache {
    by_id: HashMap<u64, (Space, Instant)>,
    by_label: HashMap<String, (u64, Instant)>,
    mtls: HashMap<u64, (Option<MtlsMode>, Instant)>,
    /// The entries a caller is asking the API for right now.
    asking: HashSet<Asking>,
}

/// An entry being asked for.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Asking {
    Space(SpaceRef),
    Mtls(u64),
}

/// Ends an ask (however it ends), waking those who wait for it.
struct Asked<'a> {
    spaces: &'a Spaces,
    asking: Asking,
}

impl Drop for Asked<'_> {
    fn drop(&mut self) {
        lock(&self.spaces.cache).asking.remove(&self.asking);
        self.spaces.answered.notify_all();
    }
}

impl Spaces {
    /// `ttl` zero caches nothing.
    pub fn new(cloud: Arc<dyn Cloud>, ttl: Duration) -> Spaces {
        Spaces {
            cloud,
            ttl,
            cache: Mutex::default(),
            answered: Condvar::new(),
        }
    }

    /// What `cached` finds, else `ask`'s answer (which `ask` caches). A
    /// caller that finds the same entry being asked for waits for that
    /// ask, and asks for itself only if it left nothing cached.
    fn cached_or_ask<T>(
        &self,
        asking: Asking,
        cached: impl Fn(&Cache) -> Option<T>,
        ask: impl FnOnce() -> Result<T, Error>,
    ) -> Result<T, Error> {
        let mut cache = lock(&self.cache);
        let mut waited = false;
        loop {
            if let Some(found) = cached(&cache) {
                return Ok(found);
            }
            if self.ttl.is_zero() || !cache.asking.contains(&asking) {
                break;
            }
            waited = true;
            cache = wait(&self.answered, cache);
        }
        if waited {
            drop(cache);
            return ask();
        }
        cache.asking.insert(asking.clone());
        drop(cache);
        let _asked = Asked {
            spaces: self,
            asking,
        };
        ask()
    }

    fn fresh(&self, at: Instant) -> bool {
        at.elapsed() < self.ttl
    }

    /// The Space a StorageClass names: by id, or by a label exactly one
    /// Space carries (none is NotFound, several FailedPrecondition).
    pub fn resolve(&self, space: &SpaceRef) -> Result<Space, Error> {
        let cached = |cache: &Cache| {
            let id = match space {
                SpaceRef::Id(id) => Some(*id),
                SpaceRef::Label(label) => cache
                    .by_label
                    .get(label)
                    .filter(|(_, at)| self.fresh(*at))
                    .map(|(id, _)| *id),
            };
            id.and_then(|id| cache.by_id.get(&id))
                .filter(|(_, at)| self.fresh(*at))
                .map(|(s, _)| s.clone())
        };
        self.cached_or_ask(Asking::Space(space.clone()), cached, || {
            self.ask_space(space)
        })
    }

    fn ask_space(&self, space: &SpaceRef) -> Result<Space, Error> {
        let found = match space {
            SpaceRef::Id(id) => self.cloud.get_space(*id)?,
            SpaceRef::Label(label) => exactly_one(
                self.cloud.find_spaces_by_label(label)?,
                || Error::NotFound(format!("NFS space with label \"{label}\" was not found")),
                || {
                    Error::FailedPrecondition(format!(
                        "multiple NFS spaces match label \"{label}\""
                    ))
                },
            )?,
        };
        let now = Instant::now();
        let mut cache = lock(&self.cache);
        if let SpaceRef::Label(label) = space {
            cache.by_label.insert(label.clone(), (found.id, now));
        }
        cache.by_id.insert(found.id, (found.clone(), now));
        Ok(found)
    }

    /// The Space's mTLS mode, read only to tell the node how to mount; a
    /// backend that shows no policy for the Space leaves it unknown.
    pub fn mtls_mode(&self, space_id: u64) -> Result<Option<MtlsMode>, Error> {
        let cached = |cache: &Cache| {
            cache
                .mtls
                .get(&space_id)
                .filter(|(_, at)| self.fresh(*at))
                .map(|(m, _)| m.clone())
        };
        self.cached_or_ask(Asking::Mtls(space_id), cached, || {
            self.ask_mtls_mode(space_id)
        })
    }

    fn ask_mtls_mode(&self, space_id: u64) -> Result<Option<MtlsMode>, Error> {
        let mode = match self.cloud.get_space_access_policy(space_id) {
            Ok(policy) => policy.and_then(|p| p.mtls_mode),
            Err(e) => {
                if e.is_not_found() {
                    self.forget(space_id);
                }
                return Err(e);
            }
        };
        lock(&self.cache)
            .mtls
            .insert(space_id, (mode.clone(), Instant::now()));
        Ok(mode)
    }

    /// Drops everything known about a Space that answered 404.
    pub fn forget(&self, space_id: u64) {
        let mut cache = lock(&self.cache);
        cache.by_id.remove(&space_id);
        cache.mtls.remove(&space_id);
        cache.by_label.retain(|_, (id, _)| *id != space_id);
    }

    /// `result` of a call under `space_id`, forgetting the Space on a 404.
    pub fn checked<T>(&self, space_id: u64, result: Result<T, Error>) -> Result<T, Error> {
        if let Err(e) = &result {
            if e.is_not_found() {
                self.forget(space_id);
            }
        }
        result
    }
}
