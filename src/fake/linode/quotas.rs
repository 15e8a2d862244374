//! The mutating quota endpoints (`…/filesystems/{id}/quotas[/{id}]`): what
//! a POST, PUT and DELETE validate and how they change the quota table,
//! under the backend variants of `QuotaBehaviour`. It must not route
//! requests or render records (`routes`, `render`).
//!
//! Choices where the contract is silent: one quota per path, a duplicate
//! answers 409 (field `path`), like a duplicate snapshot label; the
//! filesystem's root quota (shown on every filesystem, see
//! `State::root_quota`) is read-only: a PUT or DELETE of it answers 400,
//! a POST for `/` is refused, and it does not count against `limit`; a quota
//! can be made on an active filesystem only; under `needs_directory`, a
//! path that is no directory of the export is refused like a bad path.

use super::state::{export_path, now_ms, Phase, QuotaRec, State};
use super::wire::api_error::{ApiError, ApiResult};
use serde_json::{json, Map, Value};

/// A positive integer limit, or the reason it is not one.
fn limit(b: &Map<String, Value>, field: &str) -> Result<Option<i64>, ApiError> {
    match b.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_i64() {
            Some(n) if n > 0 => Ok(Some(n)),
            _ => Err(ApiError::bad(field, "Must be a positive integer")),
        },
    }
}

/// The path inside the filesystem that `raw` names: absolute, no `.` or
/// `..` segment, no NUL, not the root; with the export name in front when
/// the backend writes paths that way.
fn quota_path(raw: Option<&Value>, export: Option<&str>) -> Result<String, ApiError> {
    let raw = raw
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad("path", "Path is required"))?;
    let inside = match export {
        Some(export) => raw
            .strip_prefix(export)
            .filter(|rest| rest.starts_with('/'))
            .ok_or_else(|| ApiError::bad("path", "Path must begin with the export"))?,
        None => raw,
    };
    let clean = inside.starts_with('/')
        && !inside.contains('\0')
        && inside
            .split('/')
            .skip(1)
            .all(|s| !s.is_empty() && s != "." && s != "..");
    if !clean {
        return Err(ApiError::bad(
            "path",
            "Must be an absolute path without empty, '.' or '..' segments",
        ));
    }
    Ok(inside.to_string())
}

pub(super) fn create_quota(
    state: &mut State,
    space_id: u64,
    fs_id: u64,
    b: &Map<String, Value>,
) -> ApiResult {
    let fs = state.quota_filesystem(space_id, fs_id)?;
    if fs.phase != Phase::Active {
        return Err(ApiError::new(400, None, "Filesystem is not active"));
    }
    let behaviour = &state.quota_behaviour;
    let export = export_path(&fs.label, fs.id);
    let path = quota_path(
        b.get("path"),
        behaviour.path_with_export.then_some(export.as_str()),
    )?;
    let max_capacity_bytes = limit(b, "max_capacity_bytes")?
        .ok_or_else(|| ApiError::bad("max_capacity_bytes", "Must be a positive integer"))?;
    let max_file_count = limit(b, "max_file_count")?;
    if behaviour.refused {
        return Err(ApiError::bad(
            "path",
            "Quotas are not available for this filesystem",
        ));
    }
    if behaviour.needs_directory && !state.content.is_directory(&export, &path) {
        return Err(ApiError::bad("path", "Directory does not exist"));
    }
    let mine = state.quotas.values().filter(|q| q.filesystem_id == fs_id);
    if mine.clone().any(|q| q.path == path) {
        return Err(ApiError::new(
            409,
            Some("path"),
            "A quota for this path already exists",
        ));
    }
    if behaviour.limit.is_some_and(|max| mine.count() >= max) {
        return Err(ApiError::new(
            400,
            None,
            "The maximum number of quotas for this filesystem has been reached",
        ));
    }
    let id = state.next_quota_id;
    state.next_quota_id += 1;
    let now = now_ms();
    let quota = QuotaRec {
        id,
        space_id,
        filesystem_id: fs_id,
        path,
        max_capacity_bytes,
        max_file_count,
        phase: Phase::Creating,
        transition_at: now + state.activation_delay_ms,
        created: (now / 1000) as i64,
        updated: None,
        usage: None,
        is_root: false,
    };
    let shown = state.quota_json(&quota);
    state.quotas.insert(id, quota);
    Ok(shown)
}

/// 400 for the root quota, which only the backend changes.
fn read_only_root(q: &QuotaRec) -> Result<(), ApiError> {
    if q.is_root {
        return Err(ApiError::new(
            400,
            None,
            "The root quota of a filesystem cannot be changed or deleted",
        ));
    }
    Ok(())
}

/// Changes the limits given; the quota shows `updating` until the
/// activation delay has passed, as after a POST.
pub(super) fn update_quota(
    state: &mut State,
    space_id: u64,
    fs_id: u64,
    id: u64,
    b: &Map<String, Value>,
) -> ApiResult {
    read_only_root(&state.quota(space_id, fs_id, id)?)?;
    let max_capacity_bytes = limit(b, "max_capacity_bytes")?;
    let max_file_count = limit(b, "max_file_count")?;
    let now = now_ms();
    let delay = state.activation_delay_ms;
    let quota = state.quotas.get_mut(&id).ok_or_else(ApiError::not_found)?;
    if let Some(max) = max_capacity_bytes {
        quota.max_capacity_bytes = max;
    }
    if max_file_count.is_some() {
        quota.max_file_count = max_file_count;
    }
    quota.phase = Phase::Creating;
    quota.transition_at = now + delay;
    quota.updated = Some((now / 1000) as i64);
    let quota = quota.clone();
    Ok(state.quota_json(&quota))
}

/// Gone at once: a quota has no `deleting` status.
pub(super) fn delete_quota(state: &mut State, space_id: u64, fs_id: u64, id: u64) -> ApiResult {
    read_only_root(&state.quota(space_id, fs_id, id)?)?;
    state.quotas.remove(&id);
    Ok(json!({}))
}
