//! The objects that live under one filesystem, its snapshots and its
//! quotas: watched per filesystem and read alike (a plain GET of a lone
//! one, else one list of the filesystem's), so one `Target` serves both
//! and each kind names only its own requests. Nothing here touches the
//! Space's filesystem list or schedules a poll.

use super::refresh::{absent_is_none, Target};
use super::waits::{Key, State, Watch};
use crate::linode::types::{HasStatus, Quota, Snapshot};
use crate::linode::Cloud;
use std::collections::{BTreeMap, BTreeSet};

/// A kind of object listed under its filesystem.
pub(super) trait Child: HasStatus + Clone + Send + 'static {
    /// The kind as the metrics name it.
    const KIND: &'static str;
    fn watches(state: &mut State) -> &mut Vec<Watch<Self>>;
    /// The one at `(space, fs, id)`.
    fn get(cloud: &dyn Cloud, key: Key) -> crate::Result<Self>;
    /// All of filesystem `(space, fs, _)`'s.
    fn list(cloud: &dyn Cloud, group: Key) -> crate::Result<Vec<Self>>;
    fn id(&self) -> u64;
}

impl<C: Child> Target for C {
    const KIND: &'static str = <C as Child>::KIND;

    fn group((space, fs, _): Key) -> Key {
        (space, fs, 0)
    }

    fn watches(state: &mut State) -> &mut Vec<Watch<Self>> {
        <C as Child>::watches(state)
    }

    /// More than one is read by listing them all.
    fn lists(keys: &[Key]) -> bool {
        keys.len() > 1
    }

    /// The watched ones that exist: a plain GET of a lone one, else one
    /// list of them all. A filesystem that is gone has none.
    fn fetch(cloud: &dyn Cloud, group: Key, keys: &[Key]) -> crate::Result<BTreeMap<Key, Self>> {
        let mut found = BTreeMap::new();
        if let [key] = keys {
            if let Some(one) = absent_is_none(C::get(cloud, *key))? {
                found.insert(*key, one);
            }
            return Ok(found);
        }
        let wanted: BTreeSet<&Key> = keys.iter().collect();
        for child in absent_is_none(C::list(cloud, group))?.unwrap_or_default() {
            let key = (group.0, group.1, child.id());
            if wanted.contains(&key) {
                found.insert(key, child);
            }
        }
        Ok(found)
    }
}

/// Implements `Child` for `$ty`, a kind polled under the name `$kind`
/// through `State::$watches` and the `Cloud` calls `$get` and `$list`.
macro_rules! child {
    ($ty:ty, $kind:literal, $watches:ident, $get:ident, $list:ident) => {
        impl Child for $ty {
            const KIND: &'static str = $kind;

            fn watches(state: &mut State) -> &mut Vec<Watch<Self>> {
                &mut state.$watches
            }

            fn get(cloud: &dyn Cloud, (space, fs, id): Key) -> crate::Result<Self> {
                cloud.$get(space, fs, id)
            }

            fn list(cloud: &dyn Cloud, (space, fs, _): Key) -> crate::Result<Vec<Self>> {
                cloud.$list(space, fs)
            }

            fn id(&self) -> u64 {
                self.id
            }
        }
    };
}

child!(
    Snapshot,
    "snapshot",
    snapshots,
    get_snapshot,
    list_snapshots
);
child!(Quota, "quota", quotas, get_quota, list_quotas);
