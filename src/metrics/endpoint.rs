//! The metrics endpoint (`METRICS_ADDRESS`): `GET /metrics` answers the
//! exposition, `GET /healthz` answers `ok`, `GET /readyz` answers `ok` for
//! the controller holding the Lease (and the node) and 503 naming the
//! holder for a standby, anything else 404, and what is not HTTP 400. It runs on the crate's HTTP server with tight bounds, on
//! threads of its own: a scraper that stalls, trickles or floods holds at
//! most one of a few connection threads for a few seconds, never an RPC
//! worker or the gRPC server.

use crate::config::ListenAddress;
use crate::http_server::{HttpRequest, HttpResponse, HttpServer, Limits};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// A scrape is one small request; anyone slower is not a scraper.
const LIMITS: Limits = Limits {
    read_deadline: Duration::from_secs(10),
    write_timeout: Some(Duration::from_secs(10)),
    max_head_bytes: 8 * 1024,
    max_body_bytes: 1024,
    max_connections: Some(8),
};

/// The exposition format's media type, version 0.0.4.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A serving endpoint; dropping it stops it.
pub struct MetricsServer {
    http: HttpServer,
}

impl MetricsServer {
    /// `http://addr/metrics` with the port actually bound.
    pub fn url(&self) -> String {
        format!("{}/metrics", self.http.url())
    }
}

static SERVING: OnceLock<String> = OnceLock::new();

/// What `/readyz` asks: not ready (and why) for a standby controller; set
/// by the controller's election, ready while none is.
static READINESS: OnceLock<fn() -> Result<(), String>> = OnceLock::new();

/// Makes `/readyz` answer what `readiness` says.
pub fn report_readiness(readiness: fn() -> Result<(), String>) {
    let _ = READINESS.set(readiness);
}

/// The URL of the endpoint this process serves, once it does (for the dev
/// banner).
pub fn serving_url() -> Option<&'static str> {
    SERVING.get().map(String::as_str)
}

/// Binds `address` and serves until the returned server is dropped.
pub fn start(address: &ListenAddress) -> Result<MetricsServer, String> {
    let listener =
        bind(address).map_err(|e| format!("METRICS_ADDRESS: cannot listen on {address}: {e}"))?;
    let http = HttpServer::serve("metrics", listener, LIMITS, Arc::new(handle))
        .map_err(|e| format!("METRICS_ADDRESS: {}", e.message()))?;
    let server = MetricsServer { http };
    let _ = SERVING.set(server.url());
    log::info!("serving metrics on {}", server.url());
    Ok(server)
}

/// `:port` is one dual-stack socket on every address, or every IPv4
/// address where IPv6 is off.
fn bind(address: &ListenAddress) -> std::io::Result<TcpListener> {
    match address.ip {
        Some(ip) => TcpListener::bind(SocketAddr::new(ip, address.port)),
        None => TcpListener::bind(SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), address.port))
            .or_else(|_| {
                TcpListener::bind(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), address.port))
            }),
    }
}

fn handle(req: HttpRequest) -> HttpResponse {
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/metrics") => HttpResponse::raw(200, CONTENT_TYPE, super::render().into_bytes()),
        ("GET", "/healthz") => HttpResponse::raw(200, "text/plain; charset=utf-8", b"ok".to_vec()),
        ("GET", "/readyz") => match READINESS.get().map_or(Ok(()), |ready| ready()) {
            Ok(()) => HttpResponse::raw(200, "text/plain; charset=utf-8", b"ok".to_vec()),
            Err(standby) => HttpResponse::raw(
                503,
                "text/plain; charset=utf-8",
                format!("{standby}\n").into_bytes(),
            ),
        },
        _ => HttpResponse::raw(
            404,
            "text/plain; charset=utf-8",
            b"not found: GET /metrics, /healthz or /readyz\n".to_vec(),
        ),
    }
}
