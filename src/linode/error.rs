//! The Linode client's own failure type, as linodego users know its text,
//! and a failed write with whether it may still be carried out. What a
//! status means (retryable, its `crate::Error`, whether a refusal) is the
//! transport's (`transport.rs`). Nothing here may format a request header:
//! messages are built only from the status, the server's reasons and the
//! transport error, never the token.

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
    /// Not sent: this process may not write now (`WriteFence`).
    Fenced(String),
}

impl Error {
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Status { status, .. } => Some(*status),
            _ => None,
        }
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
            Error::Fenced(m) => write!(f, "Linode write not sent: {m}"),
        }
    }
}

impl std::error::Error for Error {}

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
