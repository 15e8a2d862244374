//! The fakes' HTTP/1.1 server: one listening socket on 127.0.0.1, one thread
//! per connection, one request per connection (`Connection: close`). It owns
//! only the wire format; it must not know any service's semantics.
//!
//! Written here rather than taken from a crate because the fakes need one
//! property above all: a slow or deliberately hung request never delays
//! another. A pooled server that queues connections behind busy workers
//! turns fault injection into accidental serialisation.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Header block and body limits: the fakes speak small JSON documents.
const MAX_HEAD_BYTES: usize = 64 * 1024;
const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;
/// A client that connects and never sends is dropped after this long.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// A decoded request as the fakes' handlers see it.
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

/// What a handler answers.
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// `Content-Type: application/json` exactly (no charset), as the real
    /// Linode API answers and linodego insists on.
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
    pub fn start(name: &str, handler: Handler) -> crate::Result<HttpServer> {
        let failed = |what: &str, e: std::io::Error| {
            crate::Error::Internal(format!("{name}: cannot {what}: {e}"))
        };
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| failed("listen", e))?;
        let addr = listener.local_addr().map_err(|e| failed("listen", e))?;
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&stopping);
        let label = name.to_string();
        let acceptor = std::thread::Builder::new()
            .name(format!("{name}-http"))
            .spawn(move || accept_loop(&listener, &stop, &label, &handler))
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
        // accept() has no timeout: wake it with a connection of our own.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, stopping: &AtomicBool, name: &str, handler: &Handler) {
    for stream in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let handler = Arc::clone(handler);
        let spawned = std::thread::Builder::new()
            .name(format!("{name}-conn"))
            .spawn(move || serve_connection(stream, &handler));
        if let Err(e) = spawned {
            log::error!("{name}: cannot spawn a connection thread: {e}");
        }
    }
}

fn serve_connection(stream: TcpStream, handler: &Handler) {
    let _ = stream.set_read_timeout(Some(READ_TIMEOUT));
    let _ = stream.set_nodelay(true);
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut writer = write_half;
    let reply = match read_request(&mut reader, &mut writer) {
        Ok(Some(request)) => handler(request),
        // The peer connected and left (our own wake-up connection does).
        Ok(None) => return,
        Err(message) => HttpResponse::raw(400, "text/plain", message.into_bytes()),
    };
    // The client may have given up (timeouts are part of the tests).
    let _ = write_response(&mut writer, &reply);
    let _ = writer.flush();
    let _ = writer.shutdown(Shutdown::Write);
}

/// One request off the wire; `None` when the peer closed before sending.
fn read_request(
    reader: &mut impl BufRead,
    writer: &mut impl Write,
) -> Result<Option<HttpRequest>, String> {
    let mut head_bytes = 0;
    let mut next_line = |reader: &mut dyn BufRead| -> Result<Option<String>, String> {
        let mut line = Vec::new();
        let n = reader
            .take((MAX_HEAD_BYTES - head_bytes) as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("reading the request: {e}"))?;
        head_bytes += n;
        if n == 0 {
            return Ok(None);
        }
        if head_bytes > MAX_HEAD_BYTES || !line.ends_with(b"\n") {
            return Err("request head too large or truncated".into());
        }
        let text = String::from_utf8(line).map_err(|_| "request head is not UTF-8")?;
        Ok(Some(text.trim_end_matches(['\r', '\n']).to_string()))
    };

    let Some(request_line) = next_line(reader)? else {
        return Ok(None);
    };
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("malformed request line {request_line:?}"));
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Err(format!("malformed request line {request_line:?}"));
    }

    let mut headers = Vec::new();
    loop {
        let line = next_line(reader)?.ok_or("connection closed inside the headers")?;
        if line.is_empty() {
            break;
        }
        let (k, v) = line
            .split_once(':')
            .ok_or_else(|| format!("malformed header {line:?}"))?;
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
            .map_err(|e| format!("writing 100 Continue: {e}"))?;
    }
    let body = if request
        .header("Transfer-Encoding")
        .is_some_and(|t| t.to_ascii_lowercase().contains("chunked"))
    {
        read_chunked(reader)?
    } else {
        let length = match request.header("Content-Length") {
            None => 0,
            Some(v) => v
                .parse::<usize>()
                .map_err(|_| format!("bad Content-Length {v:?}"))?,
        };
        if length > MAX_BODY_BYTES {
            return Err("request body too large".into());
        }
        let mut body = vec![0; length];
        reader
            .read_exact(&mut body)
            .map_err(|e| format!("reading the body: {e}"))?;
        body
    };
    // A body that is not UTF-8 simply arrives empty: the fakes speak JSON.
    request.body = String::from_utf8(body).unwrap_or_default();
    Ok(Some(request))
}

fn read_chunked(reader: &mut impl BufRead) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let mut size_line = String::new();
        reader
            .read_line(&mut size_line)
            .map_err(|e| format!("reading a chunk size: {e}"))?;
        let hex = size_line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(hex, 16)
            .map_err(|_| format!("bad chunk size {:?}", size_line.trim()))?;
        if body.len() + size > MAX_BODY_BYTES {
            return Err("request body too large".into());
        }
        if size == 0 {
            // Trailers, if any, end with an empty line.
            loop {
                let mut trailer = String::new();
                let n = reader
                    .read_line(&mut trailer)
                    .map_err(|e| format!("reading trailers: {e}"))?;
                if n == 0 || trailer.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader
            .read_exact(&mut body[start..])
            .map_err(|e| format!("reading a chunk: {e}"))?;
        let mut crlf = [0; 2];
        reader
            .read_exact(&mut crlf)
            .map_err(|e| format!("reading a chunk end: {e}"))?;
    }
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
        409 => "Conflict",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
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

    fn parse(raw: &str) -> Result<Option<HttpRequest>, String> {
        let mut sink = Vec::new();
        read_request(&mut raw.as_bytes(), &mut sink)
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
        assert!(parse("GET\r\n\r\n").is_err());
        assert!(parse("GET / HTTP/1.1\r\nno-colon\r\n\r\n").is_err());
        assert!(parse("GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n").is_err());
        assert!(parse("GET / HTTP/1.1\r\nHost: h\r\n").is_err());
        let huge = format!(
            "GET / HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_HEAD_BYTES)
        );
        assert!(parse(&huge).is_err());
    }

    #[test]
    fn a_hung_request_does_not_delay_another_and_drop_refuses_at_once() {
        let (entered, arrivals) = std::sync::mpsc::channel::<()>();
        let (hold, held) = std::sync::mpsc::channel::<()>();
        let entered = std::sync::Mutex::new(entered);
        let held = std::sync::Mutex::new(held);
        let server = HttpServer::start(
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
        let get = move |path: &str| {
            let mut s = TcpStream::connect(addr).unwrap();
            write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
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
}
