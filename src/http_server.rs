//! The one small HTTP/1.1 server of the crate, used by the fakes and by the
//! metrics endpoint: one listening socket, one thread per connection, one
//! request per connection (`Connection: close`). It owns only the wire
//! format and the bounds each connection is held to ([`Limits`], chosen by
//! each user: [`crate::fake::http`], [`crate::metrics::endpoint`]); it must
//! not know any service's semantics.
//!
//! Written here rather than taken from a crate because both users need one
//! property above all: a slow, hung or malformed request never delays
//! another. A pooled server that queues connections behind busy workers
//! turns fault injection into accidental serialisation, and would let one
//! stalled scraper hold the metrics endpoint. Nothing here runs on an RPC
//! worker or a gRPC thread.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// After answering, how long and how much of the client's further input is
/// read and dropped before the socket is closed (see [`linger`]).
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 64 * 1024;

/// What one connection may cost the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The whole request (head and body) must arrive within this long of
    /// the accept, however slowly it trickles in; then it is answered 408.
    pub read_deadline: Duration,
    /// Bound on each write of the response; `None` waits for the peer.
    pub write_timeout: Option<Duration>,
    pub max_head_bytes: usize,
    pub max_body_bytes: usize,
    /// Connections served at once; one more is answered 503 at once and
    /// closed. `None`: no bound.
    pub max_connections: Option<usize>,
}

/// A decoded request as the handlers see it.
pub struct HttpRequest {
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

    /// The target as sent: path plus `?query` when there is one.
    pub fn target(&self) -> String {
        if self.query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, self.query)
        }
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

/// The status of [`HttpResponse::hang_up`]: no HTTP status is 0.
const HANG_UP: u16 = 0;

/// What a handler answers.
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// `Content-Type: application/json` exactly, no charset (strict clients
    /// compare the whole value).
    pub fn json(status: u16, value: &serde_json::Value) -> HttpResponse {
        HttpResponse::raw(status, "application/json", value.to_string().into_bytes())
    }

    pub fn raw(status: u16, content_type: &str, body: Vec<u8>) -> HttpResponse {
        HttpResponse {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body,
        }
    }

    /// No answer at all: the connection is closed once the request is
    /// read, as a reset or a dropped connection looks to the client.
    pub fn hang_up() -> HttpResponse {
        HttpResponse {
            status: HANG_UP,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn with_header(mut self, name: &str, value: &str) -> HttpResponse {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

pub type Handler = Arc<dyn Fn(HttpRequest) -> HttpResponse + Send + Sync>;

/// A listening server. Dropping it closes the listening socket before
/// `drop` returns, so a later connect is refused at once; requests already
/// being served finish on their own threads.
pub struct HttpServer {
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl HttpServer {
    /// Serves `listener` (already bound) under `limits`.
    pub fn serve(
        name: &str,
        listener: TcpListener,
        limits: Limits,
        handler: Handler,
    ) -> crate::Result<HttpServer> {
        let failed = |what: &str, e: std::io::Error| {
            crate::Error::Internal(format!("{name}: cannot {what}: {e}"))
        };
        let addr = listener.local_addr().map_err(|e| failed("listen", e))?;
        let stopping = Arc::new(AtomicBool::new(false));
        let server = Server {
            name: name.to_string(),
            limits,
            handler,
            active: Arc::new(AtomicUsize::new(0)),
        };
        let stop = Arc::clone(&stopping);
        let acceptor = std::thread::Builder::new()
            .name(format!("{name}-http"))
            .spawn(move || server.accept_loop(&listener, &stop))
            .map_err(|e| failed("spawn", e))?;
        Ok(HttpServer {
            addr,
            stopping,
            acceptor: Some(acceptor),
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
        self.stopping.store(true, Ordering::SeqCst);
        // accept() has no timeout: wake it with a connection of our own, to
        // loopback when the socket listens on every address.
        let mut wake = self.addr;
        match wake.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => wake.set_ip(Ipv4Addr::LOCALHOST.into()),
            IpAddr::V6(ip) if ip.is_unspecified() => wake.set_ip(Ipv6Addr::LOCALHOST.into()),
            _ => {}
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

/// What the acceptor thread owns.
struct Server {
    name: String,
    limits: Limits,
    handler: Handler,
    /// Connections being served now.
    active: Arc<AtomicUsize>,
}

/// Counts a connection out when its thread ends, however it ends.
struct Active(Arc<AtomicUsize>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Server {
    fn accept_loop(&self, listener: &TcpListener, stopping: &AtomicBool) {
        for stream in listener.incoming() {
            if stopping.load(Ordering::SeqCst) {
                return;
            }
            let stream = match stream {
                Ok(s) => s,
                Err(e) => {
                    // Out of descriptors, say: do not spin on it.
                    log::debug!("{}: accept: {e}", self.name);
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            let accepted = Instant::now();
            // Only this thread counts connections in, so the check and the
            // count cannot race.
            let before = self.active.fetch_add(1, Ordering::SeqCst);
            let active = Active(Arc::clone(&self.active));
            if self.limits.max_connections.is_some_and(|max| before >= max) {
                drop(active);
                refuse_busy(stream);
                continue;
            }
            let handler = Arc::clone(&self.handler);
            let limits = self.limits;
            let spawned = std::thread::Builder::new()
                .name(format!("{}-conn", self.name))
                .spawn(move || {
                    let _active = active;
                    serve_connection(stream, accepted, &limits, &handler);
                });
            if let Err(e) = spawned {
                log::error!("{}: cannot spawn a connection thread: {e}", self.name);
            }
        }
    }
}

/// A short 503 without reading the request; never blocks the acceptor (the
/// answer fits in a fresh socket's send buffer, and is dropped if not).
fn refuse_busy(mut stream: TcpStream) {
    let _ = stream.set_nonblocking(true);
    let _ = stream.write_all(
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 21\r\nConnection: close\r\n\r\ntoo many connections\n",
    );
    let _ = stream.shutdown(Shutdown::Write);
}

/// Reads from the socket, giving each read only what is left of the
/// request's deadline, so a client trickling a byte at a time is cut off
/// like one that sends nothing.
struct Deadlined {
    stream: TcpStream,
    deadline: Instant,
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

/// Why a request is refused before any handler sees it.
#[derive(Debug)]
struct Refusal {
    status: u16,
    message: String,
}

impl Refusal {
    fn bad(message: impl Into<String>) -> Refusal {
        Refusal {
            status: 400,
            message: message.into(),
        }
    }

    /// A read failed: the deadline passed (408), or something else (400).
    fn reading(what: &str, e: &io::Error) -> Refusal {
        let status = match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => 408,
            _ => 400,
        };
        Refusal {
            status,
            message: format!("{what}: {e}"),
        }
    }
}

fn serve_connection(stream: TcpStream, accepted: Instant, limits: &Limits, handler: &Handler) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(limits.write_timeout);
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(Deadlined {
        stream,
        deadline: accepted + limits.read_deadline,
    });
    let mut writer = write_half;
    let reply = match read_request(&mut reader, &mut writer, limits) {
        Ok(Some(request)) => handler(request),
        // The peer connected and left (our own wake-up connection does).
        Ok(None) => return,
        Err(refusal) => HttpResponse::raw(
            refusal.status,
            "text/plain",
            format!("{}\n", refusal.message).into_bytes(),
        ),
    };
    if reply.status == HANG_UP {
        return;
    }
    // The client may have given up (timeouts are part of the tests).
    let _ = write_response(&mut writer, &reply);
    let _ = writer.flush();
    let _ = writer.shutdown(Shutdown::Write);
    linger(reader.into_inner());
}

/// Closing a socket with unread input makes the kernel answer with a reset,
/// which can destroy the response before the client reads it (a refused
/// request's client is often still sending). Reads what the client still
/// sends, briefly and boundedly, so the close is orderly.
fn linger(mut input: Deadlined) {
    input.deadline = Instant::now() + LINGER;
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < LINGER_BYTES {
        match input.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => drained += n,
        }
    }
}

/// One request off the wire; `None` when the peer closed before sending.
fn read_request(
    reader: &mut impl BufRead,
    writer: &mut impl Write,
    limits: &Limits,
) -> Result<Option<HttpRequest>, Refusal> {
    let max_head = limits.max_head_bytes;
    let mut head_bytes = 0;
    let mut next_line = |reader: &mut dyn BufRead| -> Result<Option<String>, Refusal> {
        let mut line = Vec::new();
        let n = reader
            .take((max_head - head_bytes) as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| Refusal::reading("reading the request", &e))?;
        head_bytes += n;
        if n == 0 {
            return Ok(None);
        }
        if head_bytes > max_head {
            return Err(Refusal {
                status: 431,
                message: "request head too large".into(),
            });
        }
        if !line.ends_with(b"\n") {
            return Err(Refusal::bad("request head truncated"));
        }
        let text =
            String::from_utf8(line).map_err(|_| Refusal::bad("request head is not UTF-8"))?;
        Ok(Some(text.trim_end_matches(['\r', '\n']).to_string()))
    };

    let Some(request_line) = next_line(reader)? else {
        return Ok(None);
    };
    let malformed = || Refusal::bad(format!("malformed request line {request_line:?}"));
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed());
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Err(malformed());
    }

    let mut headers = Vec::new();
    loop {
        let line = next_line(reader)?
            .ok_or_else(|| Refusal::bad("connection closed inside the headers"))?;
        if line.is_empty() {
            break;
        }
        let (k, v) = line
            .split_once(':')
            .ok_or_else(|| Refusal::bad(format!("malformed header {line:?}")))?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (target.to_string(), String::new()),
    };
    let mut request = HttpRequest {
        method: method.to_string(),
        path,
        query,
        headers,
        body: String::new(),
    };

    if request
        .header("Expect")
        .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
    {
        writer
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .map_err(|e| Refusal::bad(format!("writing 100 Continue: {e}")))?;
    }
    let too_large = || Refusal {
        status: 413,
        message: "request body too large".into(),
    };
    let body = if request
        .header("Transfer-Encoding")
        .is_some_and(|t| t.to_ascii_lowercase().contains("chunked"))
    {
        read_chunked(reader, limits.max_body_bytes)?
    } else {
        let length = match request.header("Content-Length") {
            None => 0,
            Some(v) => v
                .parse::<usize>()
                .map_err(|_| Refusal::bad(format!("bad Content-Length {v:?}")))?,
        };
        if length > limits.max_body_bytes {
            return Err(too_large());
        }
        let mut body = vec![0; length];
        reader
            .read_exact(&mut body)
            .map_err(|e| Refusal::reading("reading the body", &e))?;
        body
    };
    // A body that is not UTF-8 simply arrives empty: the fakes speak JSON.
    request.body = String::from_utf8(body).unwrap_or_default();
    Ok(Some(request))
}

fn read_chunked(reader: &mut impl BufRead, max_body: usize) -> Result<Vec<u8>, Refusal> {
    let mut body = Vec::new();
    loop {
        let size_line = chunk_line(reader, "reading a chunk size")?;
        let hex = size_line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(hex, 16)
            .map_err(|_| Refusal::bad(format!("bad chunk size {:?}", size_line.trim())))?;
        if body.len().saturating_add(size) > max_body {
            return Err(Refusal {
                status: 413,
                message: "request body too large".into(),
            });
        }
        if size == 0 {
            // Trailers, if any, end with an empty line.
            loop {
                let trailer = chunk_line(reader, "reading trailers")?;
                if trailer.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader
            .read_exact(&mut body[start..])
            .map_err(|e| Refusal::reading("reading a chunk", &e))?;
        let mut crlf = [0; 2];
        reader
            .read_exact(&mut crlf)
            .map_err(|e| Refusal::reading("reading a chunk end", &e))?;
    }
}

/// A chunk size or trailer line, bounded like the head: a line without end
/// must not grow without bound.
fn chunk_line(reader: &mut impl BufRead, what: &str) -> Result<String, Refusal> {
    let mut raw = Vec::new();
    reader
        .take(4096)
        .read_until(b'\n', &mut raw)
        .map_err(|e| Refusal::reading(what, &e))?;
    Ok(String::from_utf8_lossy(&raw).into_owned())
}

fn write_response(writer: &mut impl Write, reply: &HttpResponse) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {} {}\r\n", reply.status, reason(reply.status));
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        reply.body.len()
    ));
    writer.write_all(head.as_bytes())?;
    writer.write_all(&reply.body)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// `%XX` and `+` decoding of one query component.
pub fn percent_decode(s: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::http::{serve, LIMITS};
    use std::net::ToSocketAddrs;

    fn parse(raw: &str) -> Result<Option<HttpRequest>, Refusal> {
        let mut sink = Vec::new();
        read_request(&mut raw.as_bytes(), &mut sink, &LIMITS)
    }

    fn status_of(raw: &str) -> u16 {
        parse(raw).err().map_or(0, |r| r.status)
    }

    /// Sends `raw` (nothing when empty) and reads the whole answer.
    fn exchange(addr: impl ToSocketAddrs, raw: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(raw.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    fn echo() -> Handler {
        Arc::new(|r: HttpRequest| HttpResponse::raw(200, "text/plain", r.path.into_bytes()))
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%3Db%2Cc"), "a=b,c");
        assert_eq!(percent_decode("%21x+y"), "!x y");
    }

    #[test]
    fn parses_a_request_with_a_length_body() {
        let r = parse("PUT /v4beta/x?page=2&f=a%20b HTTP/1.1\r\nHost: h\r\nX-Filter: {}\r\nContent-Length: 4\r\n\r\nbody")
            .unwrap()
            .unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("PUT", "/v4beta/x"));
        assert_eq!(r.query_param("f").as_deref(), Some("a b"));
        assert_eq!(r.header("x-filter"), Some("{}"));
        assert_eq!(r.body, "body");
        assert_eq!(r.target(), "/v4beta/x?page=2&f=a%20b");
    }

    #[test]
    fn parses_a_chunked_body() {
        let r = parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(r.body, "abcde");
    }

    #[test]
    fn rejects_malformed_heads_and_sees_closed_peers() {
        assert!(parse("").unwrap().is_none());
        assert_eq!(status_of("GET\r\n\r\n"), 400);
        assert_eq!(status_of("GET / HTTP/1.1\r\nno-colon\r\n\r\n"), 400);
        assert_eq!(
            status_of("GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
            400
        );
        assert_eq!(status_of("GET / HTTP/1.1\r\nHost: h\r\n"), 400);
        assert_eq!(status_of("GET /x SMTP/1.0\r\n\r\n"), 400);
        let huge = format!(
            "GET / HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(LIMITS.max_head_bytes)
        );
        assert_eq!(status_of(&huge), 431);
        let body = format!(
            "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            LIMITS.max_body_bytes + 1
        );
        assert_eq!(status_of(&body), 413);
    }

    #[test]
    fn a_hung_request_does_not_delay_another_and_drop_refuses_at_once() {
        let (entered, arrivals) = std::sync::mpsc::channel::<()>();
        let (hold, held) = std::sync::mpsc::channel::<()>();
        let entered = std::sync::Mutex::new(entered);
        let held = std::sync::Mutex::new(held);
        let server = serve(
            "t",
            Arc::new(move |r: HttpRequest| {
                if r.path == "/hang" {
                    entered.lock().unwrap().send(()).unwrap();
                    let _ = held.lock().unwrap().recv();
                }
                HttpResponse::raw(200, "text/plain", r.path.into_bytes())
            }),
        )
        .unwrap();
        let addr = server.addr();
        let get =
            move |path: &str| exchange(addr, &format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n"));
        let hung: Vec<_> = (0..8)
            .map(|_| std::thread::spawn(move || get("/hang")))
            .collect();
        for _ in 0..8 {
            arrivals.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        let quick = get("/quick");
        assert!(quick.starts_with("HTTP/1.1 200 OK\r\n"), "{quick}");
        assert!(quick.ends_with("\r\n\r\n/quick"), "{quick}");
        drop(hold);
        for h in hung {
            assert!(h.join().unwrap().ends_with("/hang"));
        }
        drop(server);
        assert!(TcpStream::connect(addr).is_err());
    }

    fn bounded(max_connections: usize, read_deadline: Duration) -> HttpServer {
        let limits = Limits {
            read_deadline,
            write_timeout: Some(Duration::from_secs(5)),
            max_head_bytes: 1024,
            max_body_bytes: 0,
            max_connections: Some(max_connections),
        };
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        HttpServer::serve("bounded", listener, limits, echo()).unwrap()
    }

    #[test]
    fn a_client_that_sends_nothing_or_trickles_is_cut_off_at_the_deadline() {
        let server = bounded(4, Duration::from_millis(200));
        let silent = exchange(server.addr(), "");
        assert!(silent.starts_with("HTTP/1.1 408 "), "{silent}");
        // A byte now and then never ends the head, and does not extend the
        // deadline: the answer comes while the client is still sending.
        let mut s = TcpStream::connect(server.addr()).unwrap();
        let mut trickle = s.try_clone().unwrap();
        let sending = std::thread::spawn(move || {
            let head = b"GET /slow HTTP/1.1\r\nX: ".iter();
            // Past the head limit, so only the deadline can end it early.
            for b in head.chain([b'y'; 2048].iter()) {
                if trickle.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
        drop(s);
        sending.join().unwrap();
        let body = exchange(
            server.addr(),
            "GET / HTTP/1.1\r\nContent-Length: 1\r\n\r\nx",
        );
        assert!(body.starts_with("HTTP/1.1 413 "), "{body}");
    }

    #[test]
    fn connections_beyond_the_bound_are_refused_until_one_ends() {
        let server = bounded(2, Duration::from_secs(60));
        let idle: Vec<TcpStream> = (0..2)
            .map(|_| TcpStream::connect(server.addr()).unwrap())
            .collect();
        // The acceptor counts in order: once a third is refused, both idle
        // ones are being served.
        let refused = exchange(server.addr(), "GET /x HTTP/1.1\r\n\r\n");
        assert!(refused.starts_with("HTTP/1.1 503 "), "{refused}");
        drop(idle);
        let mut answer = String::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !answer.starts_with("HTTP/1.1 200 ") {
            assert!(Instant::now() < deadline, "still refused: {answer}");
            std::thread::sleep(Duration::from_millis(5));
            answer = exchange(server.addr(), "GET /x HTTP/1.1\r\n\r\n");
        }
        assert!(answer.ends_with("/x"), "{answer}");
    }

    #[test]
    fn a_server_on_every_address_is_reached_and_stopped_through_loopback() {
        let listener = TcpListener::bind("0.0.0.0:0").unwrap();
        let server = HttpServer::serve("any", listener, LIMITS, echo()).unwrap();
        let port = server.addr().port();
        let answer = exchange(("127.0.0.1", port), "GET /any HTTP/1.1\r\n\r\n");
        assert!(answer.ends_with("/any"), "{answer}");
        drop(server);
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    }
}
