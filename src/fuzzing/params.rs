//! StorageClass parameters and VolumeAttributesClass (mutable) parameters.

use super::{caller_mistake, pairs, reordered, text};
use crate::controller::{KindParams, Mutable, Params, ParentRef, PoolParams, SpaceRef};
use crate::linode::SquashPolicy;
use std::collections::HashMap;
use std::fmt::Debug;

/// `key=value` lines as StorageClass parameters.
pub fn storage_class_params(data: &[u8]) {
    if let Some(text) = text(data) {
        params(&pairs(text).0);
    }
}

/// `key=value` lines as mutable parameters.
pub fn mutable_params(data: &[u8]) {
    if let Some(text) = text(data) {
        mutable(&pairs(text).0);
    }
}

/// A class names one space (a positive id, or a label that is not blank),
/// its tags and squash policy are well formed; or it is InvalidArgument.
/// The map's order does not matter.
pub(super) fn params(raw: &HashMap<String, String>) -> Option<Params> {
    parsed("Params::parse", raw, Params::parse, |p| {
        match &p.space {
            SpaceRef::Id(id) => assert!(*id > 0),
            SpaceRef::Label(label) => {
                assert!(!label.is_empty() && label.trim() == label, "{label:?}")
            }
        }
        match &p.kind {
            KindParams::Filesystem(fs) => {
                tags(&fs.tags);
                if let Some(squash) = &fs.squash {
                    squash_policy(squash);
                }
            }
            KindParams::Directory(sub) => {
                if let ParentRef::Pool(pool) = &sub.parent {
                    pool_params(pool);
                }
            }
        }
    })
}

/// A pool's name fits its labels and tags; its sizes and counts are sane.
fn pool_params(pool: &PoolParams) {
    assert!((1..=24).contains(&pool.name.len()), "{pool:?}");
    assert!(
        pool.name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
        "{pool:?}"
    );
    assert!(pool.filesystem_bytes >= 1 << 30, "{pool:?}");
    assert!((1..=100).contains(&pool.max_filesystems), "{pool:?}");
    assert!(pool.spares < pool.max_filesystems, "{pool:?}");
}

/// Only tags and the squash policy, well formed, and nothing asked for when
/// nothing was given; or InvalidArgument, the same whatever the map's order
/// (the first offending key in sorted order is the one named).
pub(super) fn mutable(raw: &HashMap<String, String>) -> Option<Mutable> {
    parsed("Mutable::parse", raw, Mutable::parse, |m| {
        assert_eq!(m.is_empty(), raw.is_empty(), "{raw:?} → {m:?}");
        if let Some(t) = &m.tags {
            tags(t);
        }
        if let Some(squash) = &m.squash {
            squash_policy(squash);
        }
    })
}

/// What `parse` makes of `raw`, the same whatever the map's order: checked
/// by `check` when it parses, else a caller's mistake.
fn parsed<T: PartialEq + Debug>(
    what: &str,
    raw: &HashMap<String, String>,
    parse: impl Fn(&HashMap<String, String>) -> crate::Result<T>,
    check: impl FnOnce(&T),
) -> Option<T> {
    let parsed = parse(raw);
    assert_eq!(parsed, parse(&reordered(raw)), "order-independent");
    match parsed {
        Ok(value) => {
            check(&value);
            Some(value)
        }
        Err(e) => {
            caller_mistake(what, &e, false);
            None
        }
    }
}

/// Tags as the backend gets them: none blank, none padded, no comma (it
/// separated them), no repeat.
pub(super) fn tags(tags: &[String]) {
    for (i, tag) in tags.iter().enumerate() {
        assert!(
            !tag.is_empty() && tag.trim() == tag && !tag.contains(','),
            "{tag:?}"
        );
        assert!(!tags[..i].contains(tag), "{tag:?} repeated");
    }
}

/// Only the three policies the API knows are ever sent.
fn squash_policy(squash: &SquashPolicy) {
    assert!(!matches!(squash, SquashPolicy::Unknown(_)), "{squash:?}");
}
