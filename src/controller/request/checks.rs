//! Small checks the controller makes of what it is given or finds: a
//! field CSI requires is there, a handle parses, a page size and a page's
//! token are sound, a lookup by
//! label found exactly one object. The caller names the errors; nothing
//! here knows a volume.

use crate::handles::{GroupSnapshotId, SnapshotHandle, VolumeHandle};
use crate::Error;

/// InvalidArgument saying `missing` when `value` is empty.
pub fn required(value: &str, missing: &str) -> Result<(), Error> {
    if value.is_empty() {
        return Err(Error::InvalidArgument(missing.to_string()));
    }
    Ok(())
}

/// The volume an RPC names: InvalidArgument when `raw` is empty, NotFound
/// when it is no handle the driver could have issued.
pub fn volume(raw: &str) -> Result<VolumeHandle, Error> {
    required(raw, "volume ID is not set")?;
    VolumeHandle::parse(raw).map_err(|_| Error::NotFound(format!("volume {raw:?} not found")))
}

/// The snapshot an RPC names, likewise.
pub fn snapshot(raw: &str) -> Result<SnapshotHandle, Error> {
    required(raw, "snapshot id is required")?;
    SnapshotHandle::parse(raw).map_err(|_| Error::NotFound(format!("snapshot {raw:?} not found")))
}

/// The group snapshot an RPC names, likewise.
pub fn group_snapshot(raw: &str) -> Result<GroupSnapshotId, Error> {
    required(raw, "group snapshot id is required")?;
    GroupSnapshotId::parse(raw)
        .map_err(|_| Error::NotFound(format!("group snapshot {raw:?} not found")))
}

/// A volume a snapshot is asked of: NotFound when `raw` is no handle the
/// driver could have issued (such a handle cannot name a volume it made).
pub fn source_volume(raw: &str) -> Result<VolumeHandle, Error> {
    VolumeHandle::parse(raw)
        .map_err(|_| Error::NotFound(format!("source volume {raw:?} not found")))
}

/// What a Delete RPC names: InvalidArgument saying `missing` when `raw` is
/// empty; `None` (nothing of ours to delete, which CSI answers OK) when
/// `parse` finds no handle the driver could have issued.
pub fn to_delete<T>(
    raw: &str,
    missing: &str,
    parse: impl FnOnce(&str) -> Result<T, Error>,
) -> Result<Option<T>, Error> {
    required(raw, missing)?;
    Ok(parse(raw).ok())
}

/// Where a page of a listing starts: `None` for no `starting_token`; one
/// `parse` rejects (no token the driver issued) is Aborted.
pub fn starting_token<T>(
    token: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<Option<T>, Error> {
    if token.is_empty() {
        return Ok(None);
    }
    parse(token)
        .map(Some)
        .ok_or_else(|| Error::Aborted(format!("invalid starting token \"{token}\"")))
}

/// How many entries a page holds: `None` (all of them) for 0; a negative
/// `max_entries` is InvalidArgument.
pub fn page_size(max_entries: i32) -> Result<Option<usize>, Error> {
    match max_entries {
        n if n < 0 => Err(Error::InvalidArgument(format!(
            "max entries must not be negative: {n}"
        ))),
        0 => Ok(None),
        n => Ok(Some(n as usize)),
    }
}

/// Where a page that starts at `from` of `len` entries ends.
pub fn page_end(len: usize, from: usize, size: Option<usize>) -> usize {
    size.map_or(len, |n| len.min(from + n))
}

/// The one object of `found`; none is `none()`, several `several()`.
pub fn exactly_one<T>(
    mut found: Vec<T>,
    none: impl FnOnce() -> Error,
    several: impl FnOnce() -> Error,
) -> Result<T, Error> {
    match found.len() {
        0 => Err(none()),
        1 => Ok(found.remove(0)),
        _ => Err(several()),
    }
}
