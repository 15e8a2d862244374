//! The pool keys of a `subdirectory` class: `shared-filesystem-pool` names a
//! pool of shared filesystems the driver makes, places volumes on and
//! prunes itself, sized by `pool-filesystem-size`, bounded by
//! `pool-max-filesystems`, with `pool-spares` empty ones kept ready.
//! Parsing only: what a pool does is `kind::directory::pool`.

use super::keys::{POOL, POOL_FILESYSTEM_SIZE, POOL_MAX_FILESYSTEMS, POOL_SPARES};
use crate::config::parse_quantity;
use crate::Error;

/// A new pool filesystem's size unless the class says: room for a hundred
/// 1 GiB volumes, and no more than one filesystem's worth paid for while
/// it fills.
pub const DEFAULT_FILESYSTEM_BYTES: i64 = 100 << 30;
/// How many filesystems a pool may grow to unless the class says: a bound
/// on what a runaway of creates can cost.
pub const DEFAULT_MAX_FILESYSTEMS: u32 = 10;
/// Spares cost money while empty, so none unless the class asks.
pub const DEFAULT_SPARES: u32 = 0;
/// Far beyond any sensible pool; keeps a typo from allowing thousands.
const MOST_FILESYSTEMS: u32 = 100;
/// The smallest pool filesystem worth making.
const SMALLEST_FILESYSTEM: i64 = 1 << 30;
/// Keeps `csi-pool-<name>-<n>` within a label's 63 bytes and the pool's
/// tag well within a tag's 50 characters.
const LONGEST_NAME: usize = 24;

/// A pool of shared filesystems, as a class describes it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolParams {
    pub name: String,
    pub filesystem_bytes: i64,
    pub max_filesystems: u32,
    pub spares: u32,
}

/// The pool keys: `name` is the class's `shared-filesystem-pool` (checked
/// here); the others default as above.
pub fn parse<'a>(get: &impl Fn(&str) -> Option<&'a str>, name: &str) -> Result<PoolParams, Error> {
    let good_name = !name.is_empty()
        && name.len() <= LONGEST_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if !good_name {
        return Err(Error::InvalidArgument(format!(
            "StorageClass parameter {POOL} \"{name}\" must be 1-{LONGEST_NAME} lowercase letters, digits and inner hyphens"
        )));
    }
    let filesystem_bytes = match get(POOL_FILESYSTEM_SIZE) {
        None => DEFAULT_FILESYSTEM_BYTES,
        Some(raw) => parse_quantity(raw)
            .ok()
            .filter(|n| *n >= SMALLEST_FILESYSTEM)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "StorageClass parameter {POOL_FILESYSTEM_SIZE} \"{raw}\" must be a size of at least 1Gi, such as 500Gi"
                ))
            })?,
    };
    let count = |key: &str, default: u32, least: u32| -> Result<u32, Error> {
        let Some(raw) = get(key) else {
            return Ok(default);
        };
        raw.parse::<u32>()
            .ok()
            .filter(|n| (least..=MOST_FILESYSTEMS).contains(n))
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "StorageClass parameter {key} \"{raw}\" must be an integer from {least} to {MOST_FILESYSTEMS}"
                ))
            })
    };
    let max_filesystems = count(POOL_MAX_FILESYSTEMS, DEFAULT_MAX_FILESYSTEMS, 1)?;
    let spares = count(POOL_SPARES, DEFAULT_SPARES, 0)?;
    if spares >= max_filesystems {
        return Err(Error::InvalidArgument(format!(
            "StorageClass parameter {POOL_SPARES} ({spares}) must be below {POOL_MAX_FILESYSTEMS} ({max_filesystems}): spares are empty filesystems of the pool"
        )));
    }
    Ok(PoolParams {
        name: name.to_string(),
        filesystem_bytes,
        max_filesystems,
        spares,
    })
}
