//! A filesystem's access policy as a watched kind: each policy is a group
//! of its own, read with one GET however many wait for it. Nothing here
//! schedules a poll.

use super::refresh::{absent_is_none, Target};
use super::waits::{Key, State, Watch};
use crate::linode::types::FilesystemAccessPolicy;
use crate::linode::Cloud;
use std::collections::BTreeMap;

impl Target for FilesystemAccessPolicy {
    const KIND: &'static str = "access_policy";

    fn group(key: Key) -> Key {
        key
    }

    fn watches(state: &mut State) -> &mut Vec<Watch<Self>> {
        &mut state.policies
    }

    fn fetch(
        cloud: &dyn Cloud,
        (space, fs, _): Key,
        _: &[Key],
    ) -> crate::Result<BTreeMap<Key, Self>> {
        let mut found = BTreeMap::new();
        let policy = absent_is_none(cloud.get_filesystem_access_policy(space, fs))?;
        if let Some(p) = policy.flatten() {
            found.insert((space, fs, 0), p);
        }
        Ok(found)
    }
}
