//! Which endpoint a request names: the route table from method and path to
//! a read of the state or a handler, and 405 vs 404 for the rest. It must
//! not validate fields or change the state itself; the handlers do.

use super::handlers::{
    clone_snapshot, create_filesystem, create_snapshot, delete_filesystem, delete_snapshot,
    put_policy, update_filesystem,
};
use super::quotas::{create_quota, delete_quota, update_quota};
use super::state::{FakeEvent, State, TagFilter};
use super::wire::api_error::{ApiError, ApiResult};
use super::wire::query::{apply_filter, drop_filter_keys, paginate};
use crate::fake::HttpRequest;
use serde_json::{json, Value};

/// The outcome of routing one request against the state.
pub(super) struct Routed {
    pub(super) result: ApiResult,
    pub(super) mutated: bool,
}

/// The ids a path names; a segment that is no id names nothing there.
fn ids(segments: &[&str]) -> Result<Vec<u64>, ApiError> {
    segments
        .iter()
        .map(|s| s.parse().ok())
        .collect::<Option<_>>()
        .ok_or_else(ApiError::not_found)
}

pub(super) fn route(
    state: &mut State,
    req: &HttpRequest,
    path: &str,
    events: &mut Vec<FakeEvent>,
) -> Routed {
    let seg: Vec<&str> = path.split('/').collect();
    let read = |result| Routed {
        result,
        mutated: false,
    };
    let write = |result: ApiResult| Routed {
        mutated: result.is_ok(),
        result,
    };
    let method = req.method.as_str();
    // A Go backend decodes `null` into an unset pointer: as if not sent.
    let null_is_unset = state.dialect.null_fields;
    let body = || -> Result<serde_json::Map<String, Value>, ApiError> {
        match serde_json::from_str::<Value>(&req.body) {
            Ok(Value::Object(mut m)) => {
                if null_is_unset {
                    m.retain(|_, v| !v.is_null());
                }
                Ok(m)
            }
            _ => Err(ApiError::new(
                400,
                None,
                "Request body must be a JSON object",
            )),
        }
    };
    // A path that names nothing answers 404 before its body is looked at.
    let with_body = |segments: &[&str]| ids(segments).and_then(|v| Ok((v, body()?)));
    let x_filter = req.header("X-Filter");
    let forced = state.page_size;
    match (method, seg.as_slice()) {
        ("GET", ["nfs", "spaces"]) => {
            let items = state.spaces.values().map(|s| state.space_json(s)).collect();
            read(
                apply_filter(items, x_filter, &["id", "label", "status", "tags"])
                    .and_then(|i| paginate(i, req, forced)),
            )
        }
        ("GET", ["nfs", "spaces", id]) => {
            read(ids(&[id]).and_then(|v| state.space(v[0]).map(|s| state.space_json(s))))
        }
        ("GET", ["nfs", "spaces", id, "access-policy"]) => read(
            ids(&[id])
                .and_then(|v| state.space(v[0]).cloned())
                .and_then(|s| {
                    if s.policy_missing {
                        Err(ApiError::not_found())
                    } else {
                        Ok(state.space_policy_json(&s))
                    }
                }),
        ),
        ("GET", ["nfs", "spaces", sid, "filesystems"]) => read(
            ids(&[sid])
                .and_then(|v| state.space(v[0]).map(|s| s.id))
                .and_then(|sid| {
                    let items = state
                        .filesystems
                        .values()
                        .filter(|f| f.space_id == sid)
                        .map(|f| state.fs_json(f))
                        .collect();
                    let keys: Vec<&str> = ["id", "label", "region", "status", "tags"]
                        .into_iter()
                        .filter(|k| *k != "id" || !state.no_filesystem_id_filter)
                        .filter(|k| *k != "tags" || state.tag_filter != TagFilter::Refused)
                        .collect();
                    let filter = match (state.tag_filter, x_filter) {
                        (TagFilter::Ignored, Some(f)) => Some(drop_filter_keys(f, &["tags"])),
                        (_, f) => f.map(str::to_string),
                    };
                    apply_filter(items, filter.as_deref(), &keys)
                })
                .and_then(|i| paginate(i, req, forced)),
        ),
        ("POST", ["nfs", "spaces", sid, "filesystems"]) => {
            write(with_body(&[sid]).and_then(|(v, b)| create_filesystem(state, v[0], &b)))
        }
        ("GET", ["nfs", "spaces", sid, "filesystems", fid]) => read(
            ids(&[sid, fid]).and_then(|v| state.filesystem(v[0], v[1]).map(|f| state.fs_json(f))),
        ),
        ("PUT", ["nfs", "spaces", sid, "filesystems", fid]) => write(
            with_body(&[sid, fid]).and_then(|(v, b)| update_filesystem(state, v[0], v[1], &b)),
        ),
        ("DELETE", ["nfs", "spaces", sid, "filesystems", fid]) => {
            write(ids(&[sid, fid]).and_then(|v| delete_filesystem(state, v[0], v[1], events)))
        }
        ("GET" | "PUT", ["nfs", "spaces", _, "filesystems", _, "access-policy"])
            if state.no_filesystem_policy =>
        {
            read(Err(ApiError::not_found()))
        }
        ("GET", ["nfs", "spaces", sid, "filesystems", fid, "access-policy"]) => {
            read(ids(&[sid, fid]).and_then(|v| {
                state
                    .filesystem(v[0], v[1])
                    .map(|f| state.fs_policy_json(f))
            }))
        }
        ("PUT", ["nfs", "spaces", sid, "filesystems", fid, "access-policy"]) => {
            write(with_body(&[sid, fid]).and_then(|(v, b)| put_policy(state, v[0], v[1], &b)))
        }
        ("GET", ["nfs", "spaces", sid, "filesystems", fid, "snapshots"]) => read(
            ids(&[sid, fid])
                .and_then(|v| state.filesystem(v[0], v[1]).map(|f| f.id))
                .and_then(|fid| {
                    let items = state
                        .snapshots
                        .values()
                        .filter(|s| s.filesystem_id == fid)
                        .map(|s| state.snap_json(s))
                        .collect();
                    apply_filter(items, x_filter, &["id", "label", "status"])
                })
                .and_then(|i| paginate(i, req, forced)),
        ),
        ("POST", ["nfs", "spaces", sid, "filesystems", fid, "snapshots"]) => write(
            with_body(&[sid, fid])
                .and_then(|(v, b)| create_snapshot(state, v[0], v[1], &b, events)),
        ),
        ("GET", ["nfs", "spaces", sid, "filesystems", fid, "snapshots", snap]) => read(
            ids(&[sid, fid, snap])
                .and_then(|v| state.snapshot(v[0], v[1], v[2]).map(|s| state.snap_json(s))),
        ),
        ("DELETE", ["nfs", "spaces", sid, "filesystems", fid, "snapshots", snap]) => write(
            ids(&[sid, fid, snap]).and_then(|v| delete_snapshot(state, v[0], v[1], v[2], events)),
        ),
        ("POST", ["nfs", "spaces", sid, "filesystems", fid, "snapshots", snap, "clone"]) => write(
            with_body(&[sid, fid, snap])
                .and_then(|(v, b)| clone_snapshot(state, v[0], v[1], v[2], &b, events)),
        ),
        ("GET", ["nfs", "spaces", sid, "filesystems", fid, "quotas"]) => read(
            ids(&[sid, fid])
                .and_then(|v| state.quota_filesystem(v[0], v[1]))
                .and_then(|fs| {
                    let items = state
                        .quotas_of(fs)
                        .iter()
                        .map(|q| state.quota_json(q))
                        .collect();
                    apply_filter(items, x_filter, &["id", "path", "status", "is_root"])
                })
                .and_then(|i| paginate(i, req, forced)),
        ),
        ("POST", ["nfs", "spaces", sid, "filesystems", fid, "quotas"]) => {
            write(with_body(&[sid, fid]).and_then(|(v, b)| create_quota(state, v[0], v[1], &b)))
        }
        ("GET", ["nfs", "spaces", sid, "filesystems", fid, "quotas", qid]) => read(
            ids(&[sid, fid, qid])
                .and_then(|v| state.quota(v[0], v[1], v[2]).map(|q| state.quota_json(&q))),
        ),
        ("PUT", ["nfs", "spaces", sid, "filesystems", fid, "quotas", qid]) => write(
            with_body(&[sid, fid, qid])
                .and_then(|(v, b)| update_quota(state, v[0], v[1], v[2], &b)),
        ),
        ("DELETE", ["nfs", "spaces", sid, "filesystems", fid, "quotas", qid]) => {
            write(ids(&[sid, fid, qid]).and_then(|v| delete_quota(state, v[0], v[1], v[2])))
        }
        ("GET", ["linode", "instances", id]) => {
            read(ids(&[id]).and_then(|v| state.instance(v[0]).map(|i| state.instance_json(i))))
        }
        ("GET", ["linode", "instances", id, "configs"]) => read(
            ids(&[id])
                .and_then(|v| state.instance(v[0]))
                .and_then(|i| paginate(state.configs_json(i), req, forced)),
        ),
        ("GET", ["linode", "instances", id, "interfaces"]) => {
            read(ids(&[id]).and_then(|v| state.instance(v[0])).and_then(|i| {
                let list = state.interfaces_json(i);
                if state.interfaces_paginated {
                    paginate(list, req, forced)
                } else {
                    Ok(json!({ "interfaces": list }))
                }
            }))
        }
        (_, ["nfs", ..]) | (_, ["linode", ..]) if known_path(&seg) => {
            read(Err(ApiError::new(405, None, "Method Not Allowed")))
        }
        _ => read(Err(ApiError::not_found())),
    }
}

/// Whether some method is served on this path shape (for 405 vs 404).
fn known_path(seg: &[&str]) -> bool {
    matches!(
        seg,
        ["nfs", "spaces"]
            | ["nfs", "spaces", _]
            | ["nfs", "spaces", _, "access-policy"]
            | ["nfs", "spaces", _, "filesystems", ..]
            | ["linode", "instances", _, ..]
    )
}
