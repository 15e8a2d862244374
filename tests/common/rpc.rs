//! How every harness calls the driver over gRPC and reads its answers: the
//! bounded call, the status of a failed call, and the one retry of a call
//! that answers a transient code, paced by the driver's own backoff.

use grpcio::{CallOption, RpcStatusCode as Code};
use linode_nfs_csi::backoff::Backoff;
use std::time::{Duration, Instant};

/// Bounds every RPC so a hung driver fails the test instead of stalling it.
pub fn call() -> CallOption {
    CallOption::default().timeout(Duration::from_secs(60))
}

/// The gRPC status code of a failed call.
pub fn code_of(err: &grpcio::Error) -> Code {
    match err {
        grpcio::Error::RpcFailure(status) => status.code(),
        other => panic!("not an RPC status: {other:?}"),
    }
}

/// The status message of a failed call.
pub fn message_of(err: &grpcio::Error) -> String {
    match err {
        grpcio::Error::RpcFailure(status) => status.message().to_string(),
        other => panic!("not an RPC status: {other:?}"),
    }
}

/// The code of a call that must fail.
#[track_caller]
pub fn err_code<T: std::fmt::Debug>(r: grpcio::Result<T>) -> Code {
    code_of(&r.expect_err("expected an error"))
}

/// Asserts that a call failed with `want`.
#[track_caller]
pub fn assert_code<T: std::fmt::Debug>(r: grpcio::Result<T>, want: Code, what: &str) {
    match r {
        Ok(v) => panic!("{what}: expected {want:?}, got OK {v:?}"),
        Err(e) => assert_eq!(code_of(&e), want, "{what}: {e:?}"),
    }
}

/// How a caller retries: the codes it takes for "try again", its pauses,
/// and how long it keeps at it before the last answer is the answer.
#[derive(Clone, Copy)]
pub struct Retry<'a> {
    pub codes: &'a [Code],
    pub pauses: Backoff,
    pub limit: Duration,
}

/// Every answer a correct driver may give while its backend fails,
/// throttles and loses replies: a caller retries them.
pub const UNDER_FAULTS: [Code; 6] = [
    Code::ABORTED,
    Code::UNAVAILABLE,
    Code::DEADLINE_EXCEEDED,
    Code::CANCELLED,
    Code::INTERNAL,
    Code::RESOURCE_EXHAUSTED,
];

/// What the sidecars and kubelet do with transient answers.
pub const SIDECAR: Retry<'static> = Retry {
    codes: &[Code::UNAVAILABLE, Code::ABORTED, Code::DEADLINE_EXCEEDED],
    pauses: Backoff::doubling(Duration::from_millis(20), Duration::from_millis(500)),
    limit: Duration::from_secs(90),
};

/// How a sidecar retries a call answered Unavailable while a backend
/// request in doubt may still land.
pub const WHILE_UNAVAILABLE: Retry<'static> = Retry {
    codes: &[Code::UNAVAILABLE],
    limit: Duration::from_secs(30),
    ..SIDECAR
};

/// How a sidecar retries a call refused (Aborted) while an earlier call of
/// the same volume holds its lock.
pub const WHILE_LOCKED: Retry<'static> = Retry {
    codes: &[Code::ABORTED],
    limit: Duration::from_secs(60),
    ..SIDECAR
};

/// A caller that takes the first answer, where a transient one would be a
/// fault of the driver.
pub const NO_RETRY: Retry<'static> = Retry {
    codes: &[],
    ..SIDECAR
};

/// Calls `f` again while it fails with one of `how.codes` and the next
/// pause still ends before `how.limit`; returns the first other answer, or
/// the last transient one.
pub fn retry<T>(how: &Retry, mut f: impl FnMut() -> grpcio::Result<T>) -> grpcio::Result<T> {
    let deadline = Instant::now() + how.limit;
    let mut attempt = 0;
    loop {
        match f() {
            Err(grpcio::Error::RpcFailure(s)) if how.codes.contains(&s.code()) => {
                attempt += 1;
                let pause = how.pauses.nth(attempt);
                if Instant::now() + pause >= deadline {
                    return Err(grpcio::Error::RpcFailure(s));
                }
                std::thread::sleep(pause);
            }
            other => return other,
        }
    }
}
