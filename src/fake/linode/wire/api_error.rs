//! Linode's error envelope: a status with `(field, reason)` items. It must not
//! decide when an error happens, only how it is written.

use crate::fake::HttpResponse;
use serde_json::{json, Value};

/// A validation or lookup failure: status + `(field, reason)` items.
pub(in crate::fake::linode) struct ApiError {
    pub(in crate::fake::linode) status: u16,
    pub(in crate::fake::linode) errors: Vec<(Option<String>, String)>,
}

impl ApiError {
    pub(in crate::fake::linode) fn new(status: u16, field: Option<&str>, reason: &str) -> ApiError {
        ApiError {
            status,
            errors: vec![(field.map(str::to_string), reason.to_string())],
        }
    }

    pub(in crate::fake::linode) fn not_found() -> ApiError {
        ApiError::new(404, None, "Not found")
    }

    pub(in crate::fake::linode) fn bad(field: &str, reason: &str) -> ApiError {
        ApiError::new(400, Some(field), reason)
    }

    /// A 400 listing every `(field, reason)` a body's validation found, as
    /// the API names them all at once; `Ok` when it found none.
    pub(in crate::fake::linode) fn if_invalid(
        errors: Vec<(Option<String>, String)>,
    ) -> Result<(), ApiError> {
        if errors.is_empty() {
            return Ok(());
        }
        Err(ApiError {
            status: 400,
            errors,
        })
    }

    pub(in crate::fake::linode) fn response(&self) -> HttpResponse {
        error_response(self.status, &self.errors)
    }
}

fn error_response(status: u16, errors: &[(Option<String>, String)]) -> HttpResponse {
    let items: Vec<Value> = errors
        .iter()
        .map(|(field, reason)| match field {
            Some(f) => json!({"reason": reason, "field": f}),
            None => json!({"reason": reason}),
        })
        .collect();
    HttpResponse::json(status, &json!({ "errors": items }))
}

pub(in crate::fake::linode) type ApiResult = Result<Value, ApiError>;
