//! The map of hard-linked inodes: which name of an inode is copied first,
//! where its copy went, and when that place is needed no more. It makes no
//! copies and touches no filesystem; the workers do, and report back.

use super::node::Node;
use crate::mutex::{lock, wait};
use std::collections::hash_map::{Entry, HashMap};
use std::ffi::CString;
use std::sync::{Arc, Condvar, Mutex};

/// The first name met of an inode with several, and how its copy went.
enum First {
    Copying,
    Done(Arc<Node>, CString),
    Failed,
}

struct Linked {
    first: First,
    /// Names of the inode not met yet.
    unseen: libc::nlink_t,
    /// Workers waiting for the first copy.
    waiting: usize,
}

/// The inodes with several names met so far, by source device and inode.
#[derive(Default)]
pub(super) struct Links {
    map: Mutex<HashMap<(u64, u64), Linked>>,
    settled: Condvar,
}

pub(super) enum Claim {
    /// This name is the first: copy it, then `settle`.
    First,
    /// Link to this copy.
    To(Arc<Node>, CString),
    /// The first copy failed.
    Failed,
}

impl Links {
    /// What to do with a name of `key`, which has `nlink` names; waits
    /// while another worker copies its first. That worker waits for
    /// nothing, so the wait ends.
    pub(super) fn claim(&self, key: (u64, u64), nlink: libc::nlink_t) -> Claim {
        let mut map = lock(&self.map);
        match map.entry(key) {
            Entry::Vacant(v) => {
                v.insert(Linked {
                    first: First::Copying,
                    unseen: nlink.saturating_sub(1),
                    waiting: 0,
                });
                return Claim::First;
            }
            Entry::Occupied(mut o) => {
                let linked = o.get_mut();
                linked.unseen = linked.unseen.saturating_sub(1);
                linked.waiting += 1;
            }
        }
        loop {
            // Present: an entry is removed only when nobody waits on it.
            let Some(linked) = map.get_mut(&key) else {
                return Claim::Failed;
            };
            let claim = match &linked.first {
                First::Copying => {
                    map = wait(&self.settled, map);
                    continue;
                }
                First::Done(node, name) => Claim::To(node.clone(), name.clone()),
                First::Failed => Claim::Failed,
            };
            linked.waiting -= 1;
            // Every name met and served: the copy's place is needed no more.
            if linked.unseen == 0 && linked.waiting == 0 && matches!(claim, Claim::To(..)) {
                map.remove(&key);
            }
            return claim;
        }
    }

    /// Records how the copy of `key`'s first name went: `Some` its place.
    pub(super) fn settle(&self, key: (u64, u64), first: Option<(Arc<Node>, CString)>) {
        if let Some(linked) = lock(&self.map).get_mut(&key) {
            linked.first = match first {
                Some((node, name)) => First::Done(node, name),
                None => First::Failed,
            };
        }
        self.settled.notify_all();
    }
}
