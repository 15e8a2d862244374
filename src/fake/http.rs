//! How every fake serves HTTP: on 127.0.0.1 at an OS-chosen port, under
//! limits fit for tests. The policy the neutral [`crate::http_server`]
//! leaves to its users; the metrics endpoint sets its own.

use crate::http_server::{Handler, HttpServer, Limits};
use std::net::TcpListener;
use std::time::Duration;

/// The fakes speak small JSON documents to well-behaved clients, and tests
/// hold any number of requests at once on purpose.
pub const LIMITS: Limits = Limits {
    read_deadline: Duration::from_secs(60),
    write_timeout: None,
    max_head_bytes: 64 * 1024,
    max_body_bytes: 8 * 1024 * 1024,
    max_connections: None,
};

/// Serves `handler` on 127.0.0.1, an OS-chosen port, under [`LIMITS`].
pub fn serve(name: &str, handler: Handler) -> crate::Result<HttpServer> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| crate::Error::Internal(format!("{name}: cannot listen: {e}")))?;
    HttpServer::serve(name, listener, LIMITS, handler)
}
