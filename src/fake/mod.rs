//! In-process fakes of the services the driver talks to — the Linode API, the
//! Kubernetes API and the Linode metadata service — as real HTTP/1.1 servers
//! on 127.0.0.1 (OS-chosen port), so the real clients run over TCP. Ordinary
//! crate code: tests and the `dev` mode both use it. Each server runs on its
//! own threads and shuts down on drop. This module holds only the shared HTTP
//! plumbing; it must not know any service's semantics.

pub mod kube;
pub mod linode;
pub mod metadata;

pub use self::kube::{FakeKube, FakeNode};
pub use self::linode::{
    FakeEvent, FakeLinode, FaultProfile, FaultRule, Hang, InstanceSeed, Lifecycle, PolicyPut,
    RequestRecord, Seed, SpaceSeed, VpcAttachment,
};
pub use self::metadata::FakeMetadata;

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A decoded request as the fakes' handlers see it.
pub(crate) struct HttpRequest {
    pub method: String,
    /// Path without the query, percent-decoding NOT applied.
    pub path: String,
    /// Raw query string (after `?`), empty when none.
    pub query: String,
    headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpRequest {
    /// Case-insensitive header lookup.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// First value of query parameter `name`, percent-decoded.
    pub fn query_param(&self, name: &str) -> Option<String> {
        self.query
            .split('&')
            .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| percent_decode(v))
    }
}

/// What a handler answers.
pub(crate) struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// `Content-Type: application/json` exactly (no charset), as the real
    /// Linode API answers and linodego insists on.
    pub fn json(status: u16, value: &serde_json::Value) -> HttpResponse {
        HttpResponse {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: value.to_string().into_bytes(),
        }
    }

    pub fn with_header(mut self, name: &str, value: &str) -> HttpResponse {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

type Handler = Arc<dyn Fn(HttpRequest) -> HttpResponse + Send + Sync>;

/// One listening socket plus its dispatch thread; every request is served on
/// a thread of its own so a deliberately hung request never blocks others.
pub(crate) struct HttpServer {
    server: Arc<tiny_http::Server>,
    dispatcher: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl HttpServer {
    pub fn start(name: &str, handler: Handler) -> crate::Result<HttpServer> {
        let server = tiny_http::Server::http("127.0.0.1:0")
            .map_err(|e| crate::Error::Internal(format!("{name}: cannot listen: {e}")))?;
        let addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| crate::Error::Internal(format!("{name}: not an IP listener")))?;
        let server = Arc::new(server);
        let accept = Arc::clone(&server);
        let thread_name = name.to_string();
        let dispatcher = std::thread::Builder::new()
            .name(format!("{name}-http"))
            .spawn(move || {
                // recv() fails only once unblock() was called: shut down.
                while let Ok(request) = accept.recv() {
                    let handler = Arc::clone(&handler);
                    let spawned = std::thread::Builder::new()
                        .name(format!("{thread_name}-req"))
                        .spawn(move || serve(request, &handler));
                    if let Err(e) = spawned {
                        log::error!("{thread_name}: cannot spawn a request thread: {e}");
                    }
                }
            })
            .map_err(|e| crate::Error::Internal(format!("{name}: cannot spawn: {e}")))?;
        Ok(HttpServer {
            server,
            dispatcher: Some(dispatcher),
            addr,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.dispatcher.take() {
            let _ = t.join();
        }
        // The last Arc goes here; tiny_http then closes the listening socket.
    }
}

fn serve(mut request: tiny_http::Request, handler: &Handler) {
    let mut body = String::new();
    // A body that is not UTF-8 simply arrives empty: the fakes speak JSON.
    let _ = std::io::Read::read_to_string(request.as_reader(), &mut body);
    let (path, query) = match request.url().split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (request.url().to_string(), String::new()),
    };
    let req = HttpRequest {
        method: request.method().as_str().to_string(),
        path,
        query,
        headers: request
            .headers()
            .iter()
            .map(|h| (h.field.as_str().to_string(), h.value.as_str().to_string()))
            .collect(),
        body,
    };
    let reply = handler(req);
    // One request per connection: tiny_http can park a new connection
    // behind a kept-alive one, which turns one slow request into a stall of
    // unrelated ones. Clients reconnect; the real API's keep-alive is not
    // what these fakes are for.
    let headers = reply
        .headers
        .iter()
        .chain(std::iter::once(&(
            "Connection".to_string(),
            "close".to_string(),
        )))
        .filter_map(|(k, v)| tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()).ok())
        .collect();
    let len = reply.body.len();
    let response = tiny_http::Response::new(
        tiny_http::StatusCode(reply.status),
        headers,
        std::io::Cursor::new(reply.body),
        Some(len),
        None,
    );
    // The client may have given up (timeouts are part of the tests).
    let _ = request.respond(response);
}

/// `%XX` and `+` decoding of one query component.
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Blocks until nothing accepts connections on `addr` any more (a dropped
/// tiny_http server closes its socket asynchronously), at most `limit`.
pub(crate) fn await_refused(addr: SocketAddr, limit: Duration) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(100)) {
            Ok(_) => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => return,
        }
    }
}

/// A URL on which nothing listens: connections are refused at once.
pub fn unreachable_url() -> String {
    // Bind, learn the port, release it. Another process could grab the port
    // in between; on loopback in a test that is vanishingly unlikely.
    match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(addr) => format!("http://{addr}"),
        Err(_) => "http://127.0.0.1:9".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%3Db%2Cc"), "a=b,c");
        assert_eq!(percent_decode("%21x+y"), "!x y");
        assert_eq!(percent_decode("bad%zz"), "bad%zz");
        assert_eq!(percent_decode("end%2"), "end%2");
    }
}
