//! What the fake Kubernetes API's objects share in how they are answered,
//! as the API server answers: `Status` errors, label selectors, and pages
//! of a list (`limit`, `continue`). Used by the fake's Nodes, claims and
//! Leases alike; it knows no object.

use crate::fake::{HttpRequest, HttpResponse};
use serde_json::json;
use std::collections::BTreeMap;

/// A `Status` error body, as the API server answers.
pub(crate) fn status(code: u16, reason: &str, message: &str) -> HttpResponse {
    HttpResponse::json(
        code,
        &json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code
        }),
    )
}

pub(crate) enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
}

impl Requirement {
    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
        }
    }
}

/// The equality-based selector subset; set-based syntax is rejected.
pub(crate) fn parse_selector(s: &str) -> Result<Vec<Requirement>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let valid_key = |k: &str| {
            !k.is_empty()
                && k.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
        };
        let req = if let Some(k) = part.strip_prefix('!') {
            Requirement::NotExists(k.trim().to_string())
        } else if let Some((k, v)) = part.split_once("!=") {
            Requirement::NotEquals(k.trim().to_string(), v.trim().to_string())
        } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
            Requirement::Equals(k.trim().to_string(), v.trim().to_string())
        } else {
            Requirement::Exists(part.to_string())
        };
        let key = match &req {
            Requirement::Equals(k, _)
            | Requirement::NotEquals(k, _)
            | Requirement::Exists(k)
            | Requirement::NotExists(k) => k,
        };
        if !valid_key(key) {
            return Err(format!("unable to parse requirement: {part:?}"));
        }
        out.push(req);
    }
    Ok(out)
}

/// The part of `items` a list request's `limit` and `continue` ask for, and
/// the list metadata (with the next `continue` when more follow); or the
/// API server's refusal of a bad `limit` or token.
pub(crate) fn window<'a, T>(
    req: &HttpRequest,
    items: &'a [T],
) -> Result<(&'a [T], serde_json::Value), HttpResponse> {
    let limit: usize = match req.query_param("limit").filter(|l| !l.is_empty()) {
        Some(l) => l
            .parse()
            .map_err(|_| status(400, "BadRequest", "invalid limit"))?,
        None => 0,
    };
    let offset: usize = match req.query_param("continue").filter(|c| !c.is_empty()) {
        Some(c) => c
            .parse()
            .map_err(|_| status(410, "Expired", "invalid continue token"))?,
        None => 0,
    };
    let end = if limit == 0 {
        items.len()
    } else {
        offset.saturating_add(limit).min(items.len())
    };
    let mut metadata = json!({"resourceVersion": "1"});
    if end < items.len() {
        metadata["continue"] = json!(end.to_string());
    }
    Ok((
        items.get(offset.min(end)..end).unwrap_or_default(),
        metadata,
    ))
}

/// One page of `items` (in name order) as `limit` and `continue` ask.
pub(crate) fn paged(
    req: &HttpRequest,
    kind: &str,
    api_version: &str,
    items: Vec<serde_json::Value>,
) -> HttpResponse {
    match window(req, &items) {
        Ok((page, metadata)) => HttpResponse::json(
            200,
            &json!({"kind": kind, "apiVersion": api_version, "metadata": metadata, "items": page}),
        ),
        Err(refused) => refused,
    }
}
