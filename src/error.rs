//! The driver's one error type, named by CSI outcome, and the only place a
//! gRPC status code is chosen for it. Domain code returns `Result<T, Error>`;
//! it must not build `RpcStatus` values itself.

use grpcio::{RpcStatus, RpcStatusCode};
use std::fmt;

/// Declares `Error` from one table of its variants and their gRPC codes,
/// and what reads or rewrites any variant alike.
macro_rules! outcomes {
    ($($variant:ident => $code:ident,)*) => {
        /// An RPC-level failure. Each variant is the gRPC code the caller will see.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Error {
            $($variant(String),)*
        }

        impl Error {
            pub fn message(&self) -> &str {
                match self {
                    $(Error::$variant(m))|* => m,
                }
            }

            fn map_message(self, f: impl FnOnce(String) -> String) -> Error {
                match self {
                    $(Error::$variant(m) => Error::$variant(f(m)),)*
                }
            }

            /// The gRPC status code this error is reported with.
            pub fn code(&self) -> RpcStatusCode {
                match self {
                    $(Error::$variant(_) => RpcStatusCode::$code,)*
                }
            }
        }
    };
}

outcomes! {
    InvalidArgument => INVALID_ARGUMENT,
    NotFound => NOT_FOUND,
    AlreadyExists => ALREADY_EXISTS,
    FailedPrecondition => FAILED_PRECONDITION,
    Aborted => ABORTED,
    OutOfRange => OUT_OF_RANGE,
    PermissionDenied => PERMISSION_DENIED,
    ResourceExhausted => RESOURCE_EXHAUSTED,
    Unavailable => UNAVAILABLE,
    DeadlineExceeded => DEADLINE_EXCEEDED,
    Canceled => CANCELLED,
    Unimplemented => UNIMPLEMENTED,
    Internal => INTERNAL,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The same outcome with `context: ` in front of the message, so the
    /// sidecar's event says which step failed.
    pub fn context(self, context: impl fmt::Display) -> Error {
        self.map_message(|m| format!("{context}: {m}"))
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message())
    }
}

impl std::error::Error for Error {}

impl From<Error> for RpcStatus {
    fn from(e: Error) -> RpcStatus {
        RpcStatus::with_message(e.code(), e.message().to_string())
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Internal(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_maps_to_its_grpc_code() {
        use RpcStatusCode as C;
        type Outcome = fn(String) -> Error;
        let table: [(Outcome, C); 13] = [
            (Error::InvalidArgument, C::INVALID_ARGUMENT),
            (Error::NotFound, C::NOT_FOUND),
            (Error::AlreadyExists, C::ALREADY_EXISTS),
            (Error::FailedPrecondition, C::FAILED_PRECONDITION),
            (Error::Aborted, C::ABORTED),
            (Error::OutOfRange, C::OUT_OF_RANGE),
            (Error::PermissionDenied, C::PERMISSION_DENIED),
            (Error::ResourceExhausted, C::RESOURCE_EXHAUSTED),
            (Error::Unavailable, C::UNAVAILABLE),
            (Error::DeadlineExceeded, C::DEADLINE_EXCEEDED),
            (Error::Canceled, C::CANCELLED),
            (Error::Unimplemented, C::UNIMPLEMENTED),
            (Error::Internal, C::INTERNAL),
        ];
        for (outcome, code) in table {
            let err = outcome("x".into());
            let status: RpcStatus = err.clone().into();
            assert_eq!(status.code(), code, "{err:?}");
            assert_eq!(status.message(), "x");
        }
    }

    #[test]
    fn context_keeps_the_outcome() {
        let e = Error::NotFound("Not found".into()).context("get NFS space");
        assert_eq!(e, Error::NotFound("get NFS space: Not found".into()));
    }
}
