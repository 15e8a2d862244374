//! The Linode client's own failure type and the ONE place where a Linode
//! failure becomes a `crate::Error` (the HTTP → gRPC table of behaviour.md).
//! Nothing here may format a request header: messages are built only from the
//! status, the server's reasons and the transport error, never the token.

use std::fmt;

/// Why one Linode API call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The API answered with a non-2xx status; `reasons` are the `errors[]`
    /// items as `(field, reason)`, or the status text when the body was not
    /// the envelope. `transient`: the transport judged a status that is
    /// usually permanent to be a passing refusal (a proxy's HTML 400).
    Status {
        status: u16,
        transient: bool,
        reasons: Vec<(Option<String>, String)>,
    },
    /// No HTTP answer: DNS, connect, TLS, reset.
    Transport(String),
    /// A 2xx answer whose body is not what the contract says.
    Decode(String),
    /// The request (or connect) timeout elapsed.
    Timeout(String),
}

impl Error {
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether the request may still have been carried out. A 429 (rate
    /// limited), a 503 (not ready, maintenance), a 408 or a proxy's refusal
    /// turned the request away before anything was done, and the 4xx the
    /// contract names are the API refusing it; a timeout, another 5xx, an
    /// unexpected status, a broken connection or an unreadable success
    /// leave the outcome unknown.
    pub fn maybe_applied(&self) -> bool {
        match self {
            Error::Status {
                transient: true, ..
            } => false,
            Error::Status { status, .. } => {
                !matches!(status, 400 | 401 | 403 | 404 | 408 | 409 | 422 | 429 | 503)
            }
            Error::Transport(_) | Error::Decode(_) | Error::Timeout(_) => true,
        }
    }

    /// The status that names a 400 refusing one field, e.g. `X-Filter`.
    pub fn refuses_field(&self, name: &str) -> bool {
        matches!(self, Error::Status { status: 400, transient: false, reasons }
            if reasons.iter().any(|(f, _)| f.as_deref() == Some(name)))
    }
}

impl fmt::Display for Error {
    /// `[404] Not found`; several reasons joined by `; `, a field shown as
    /// `[field] reason` (the format linodego users already know).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Status {
                status, reasons, ..
            } => {
                write!(f, "[{status}] ")?;
                if reasons.is_empty() {
                    return write!(f, "HTTP status {status}");
                }
                for (i, (field, reason)) in reasons.iter().enumerate() {
                    if i > 0 {
                        write!(f, "; ")?;
                    }
                    match field {
                        Some(field) => write!(f, "[{field}] {reason}")?,
                        None => write!(f, "{reason}")?,
                    }
                }
                Ok(())
            }
            Error::Transport(m) => write!(f, "Linode API unreachable: {m}"),
            Error::Decode(m) => write!(f, "unexpected Linode API response: {m}"),
            Error::Timeout(m) => write!(f, "Linode API request timed out: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// A timeout maps to `Unavailable` (not `Internal` like other transport
/// failures): the backend was reached or is merely slow, and the CSI sidecar
/// should simply retry later. Connect/TLS/DNS failures stay `Internal` as
/// behaviour.md demands, because they usually mean misconfiguration.
impl From<Error> for crate::Error {
    fn from(e: Error) -> crate::Error {
        let message = e.to_string();
        match e {
            Error::Status {
                transient: true, ..
            } => crate::Error::Unavailable(message),
            Error::Status { status, .. } => match status {
                404 => crate::Error::NotFound(message),
                400 | 422 => crate::Error::InvalidArgument(message),
                401 | 403 => crate::Error::PermissionDenied(message),
                409 => crate::Error::FailedPrecondition(message),
                408 | 429 | 502 | 503 | 504 => crate::Error::Unavailable(message),
                _ => crate::Error::Internal(message),
            },
            Error::Timeout(_) => crate::Error::Unavailable(message),
            Error::Transport(_) | Error::Decode(_) => crate::Error::Internal(message),
        }
    }
}

/// A failed write, and whether the backend may still carry it out (see
/// `Error::maybe_applied`): a caller that must not repeat a write blindly
/// (a POST, a full-replace PUT) reads it instead of guessing from the
/// outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteError {
    pub error: crate::Error,
    pub maybe_applied: bool,
}

impl WriteError {
    /// The failure of a write described as `what` (the intent, in front of
    /// the message).
    pub fn new(e: Error, what: impl std::fmt::Display) -> WriteError {
        WriteError {
            maybe_applied: e.maybe_applied(),
            error: crate::Error::from(e).context(what),
        }
    }
}

impl From<WriteError> for crate::Error {
    fn from(e: WriteError) -> crate::Error {
        e.error
    }
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> Error {
        Error::Status {
            status: code,
            transient: false,
            reasons: vec![(None, "x".into())],
        }
    }

    #[test]
    fn http_status_table_matches_behaviour_contract() {
        use crate::Error as E;
        type Outcome = fn(String) -> E;
        let table: [(u16, Outcome); 14] = [
            (404, E::NotFound),
            (400, E::InvalidArgument),
            (422, E::InvalidArgument),
            (401, E::PermissionDenied),
            (403, E::PermissionDenied),
            (409, E::FailedPrecondition),
            (429, E::Unavailable),
            (502, E::Unavailable),
            (503, E::Unavailable),
            (504, E::Unavailable),
            (408, E::Unavailable),
            (500, E::Internal),
            (501, E::Internal),
            (418, E::Internal),
        ];
        for (code, want) in table {
            let got = crate::Error::from(status(code));
            assert_eq!(got, want(format!("[{code}] x")), "status {code}");
        }
    }

    #[test]
    fn only_refusals_are_known_not_to_have_happened() {
        let from = |e: Error| WriteError::new(e, "create filesystem \"x\"").maybe_applied;
        for code in [429, 503, 408] {
            assert!(!from(status(code)), "{code}");
        }
        for code in [500, 502, 504, 418] {
            assert!(from(status(code)), "{code}");
        }
        assert!(from(Error::Timeout("10s".into())));
        assert!(from(Error::Transport("reset".into())));
        assert!(!from(status(400)));
        assert!(!from(status(404)));
        let proxy = Error::Status {
            status: 400,
            transient: true,
            reasons: vec![],
        };
        assert!(!from(proxy.clone()));
        assert!(matches!(
            crate::Error::from(proxy),
            crate::Error::Unavailable(_)
        ));
    }

    #[test]
    fn non_status_failures() {
        assert!(matches!(
            crate::Error::from(Error::Transport("refused".into())),
            crate::Error::Internal(_)
        ));
        assert!(matches!(
            crate::Error::from(Error::Decode("bad json".into())),
            crate::Error::Internal(_)
        ));
        assert!(matches!(
            crate::Error::from(Error::Timeout("10s".into())),
            crate::Error::Unavailable(_)
        ));
    }

    #[test]
    fn display_follows_linodego_format() {
        let e = Error::Status {
            status: 400,
            transient: false,
            reasons: vec![
                (
                    Some("label".into()),
                    "Length must be 1-63 characters".into(),
                ),
                (None, "Linode busy.".into()),
            ],
        };
        assert_eq!(
            e.to_string(),
            "[400] [label] Length must be 1-63 characters; Linode busy."
        );
        let empty = Error::Status {
            status: 502,
            transient: false,
            reasons: vec![],
        };
        assert_eq!(empty.to_string(), "[502] HTTP status 502");
    }
}
