//! Programmed misbehaviour: [`FaultRule`]s matched by method and path
//! pattern, random [`FaultProfile`] failures and [`Hang`] gates that hold
//! requests. It must not touch the state; the request pipeline applies what
//! it decides.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

#[derive(Debug, Clone)]
pub(super) enum FaultAction {
    Status {
        status: u16,
        reason: String,
        headers: Vec<(String, String)>,
        html: bool,
    },
    Latency(Duration),
    Hang(u64),
    FailAfter {
        status: u16,
    },
}

/// A programmed misbehaviour for requests matching method + path pattern.
///
/// Patterns are matched against the path after the version, segment by
/// segment: `*` is one segment, a final `**` any rest, e.g.
/// `nfs/spaces/*/filesystems`. Method `*` matches any method.
#[derive(Debug, Clone)]
pub struct FaultRule {
    method: String,
    pattern: String,
    pub(super) action: FaultAction,
    /// `None`: every matching request.
    pub(super) remaining: Option<u32>,
}

impl FaultRule {
    pub(super) fn new(method: &str, pattern: &str, action: FaultAction) -> FaultRule {
        FaultRule {
            method: method.to_ascii_uppercase(),
            pattern: pattern.trim_matches('/').to_string(),
            action,
            remaining: None,
        }
    }

    /// Answer `status` with a Linode error envelope.
    pub fn status(method: &str, pattern: &str, status: u16) -> FaultRule {
        let reason = match status {
            429 => "Too many requests",
            500 => "Internal Server Error",
            502 => "Bad Gateway",
            503 => "Service Unavailable",
            504 => "Gateway Timeout",
            _ => "Injected failure",
        };
        let headers = if status == 429 {
            vec![("X-Ratelimit-Limit".to_string(), "800".to_string())]
        } else {
            Vec::new()
        };
        FaultRule::new(
            method,
            pattern,
            FaultAction::Status {
                status,
                reason: reason.to_string(),
                headers,
                html: false,
            },
        )
    }

    /// 429 with `Retry-After: <secs>` and `X-Ratelimit-Limit`.
    pub fn rate_limited(method: &str, pattern: &str, retry_after_secs: u64) -> FaultRule {
        FaultRule::status(method, pattern, 429).header("Retry-After", &retry_after_secs.to_string())
    }

    /// 503 with `X-Maintenance-Mode: true` (not worth retrying).
    pub fn maintenance(method: &str, pattern: &str) -> FaultRule {
        FaultRule::status(method, pattern, 503).header("X-Maintenance-Mode", "true")
    }

    /// 400 `Linode busy.` (transient by the contract).
    pub fn busy(method: &str, pattern: &str) -> FaultRule {
        FaultRule::status(method, pattern, 400).reason("Linode busy.")
    }

    /// 408 with the JSON envelope (linodego retries it).
    pub fn request_timeout(method: &str, pattern: &str) -> FaultRule {
        FaultRule::status(method, pattern, 408).reason("Request Timeout")
    }

    /// 400 as nginx in front of the API sends it: `Server: nginx`,
    /// `Content-Type: text/html` (linodego retries it; it is not the
    /// API's own validation 400).
    pub fn proxy_bad_request(method: &str, pattern: &str) -> FaultRule {
        FaultRule::status(method, pattern, 400)
            .reason("Bad Request")
            .html()
    }

    /// Delay matching requests, then serve them normally.
    pub fn latency(method: &str, pattern: &str, delay: Duration) -> FaultRule {
        FaultRule::new(method, pattern, FaultAction::Latency(delay))
    }

    /// Perform the request's side effect, then answer `status` anyway (the
    /// create happened but the client saw a failure).
    pub fn fail_after(method: &str, pattern: &str, status: u16) -> FaultRule {
        FaultRule::new(method, pattern, FaultAction::FailAfter { status })
    }

    /// Only the next `n` matching requests.
    pub fn times(mut self, n: u32) -> FaultRule {
        self.remaining = Some(n);
        self
    }

    /// Replace the error reason of a status rule.
    pub fn reason(mut self, text: &str) -> FaultRule {
        if let FaultAction::Status { reason, .. } = &mut self.action {
            *reason = text.to_string();
        }
        self
    }

    /// Answer a status rule with a proxy's (nginx) HTML page instead of the
    /// JSON envelope (a proxy's 502; with status 200, an undecodable success).
    pub fn html(mut self) -> FaultRule {
        if let FaultAction::Status { html, .. } = &mut self.action {
            *html = true;
        }
        self
    }

    /// Add a response header to a status rule.
    pub fn header(mut self, name: &str, value: &str) -> FaultRule {
        if let FaultAction::Status { headers, .. } = &mut self.action {
            headers.push((name.to_string(), value.to_string()));
        }
        self
    }

    pub(super) fn matches(&self, method: &str, path: &str) -> bool {
        (self.method == "*" || self.method == method) && path_matches(&self.pattern, path)
    }
}

fn path_matches(pattern: &str, path: &str) -> bool {
    let mut want = pattern.split('/');
    let mut got = path.trim_matches('/').split('/');
    loop {
        match (want.next(), got.next()) {
            (Some("**"), _) => return true,
            (Some(w), Some(g)) if w == "*" || w == g => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Random transient failures for `dev` mode: each request independently gets
/// one of the listed statuses with its probability (429 carries `Retry-After: 1`).
/// An entry may be scoped to a method and path pattern; a request outside
/// its scope is never hit by it.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultProfile {
    entries: Vec<(Injected, f64, Scope)>,
    /// How long `slow` and `drop` hold a request: past the client's timeout.
    hold: Duration,
}

/// What a random fault does to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Injected {
    /// Answered with this error status; nothing happens.
    Status(u16),
    /// Applied, then answered 500: the caller cannot tell it happened.
    Lost,
    /// Held past the client's timeout, then applied: a slow backend whose
    /// change lands after the caller gave up.
    Slow,
    /// Applied, then its reply held past the client's timeout: the answer
    /// never reaches the caller.
    Drop,
    /// Answered `400` with a proxy's (nginx) `text/html` page; nothing happens.
    ProxyBadRequest,
    /// The connection closed without an answer; nothing happens.
    Reset,
}

/// Which requests a profile entry may hit: a method (`*` any) and a path
/// pattern as [`FaultRule`]'s.
#[derive(Debug, Clone, PartialEq)]
struct Scope {
    method: String,
    pattern: String,
}

impl Scope {
    const ANY: &'static str = "*";

    fn any() -> Scope {
        Scope {
            method: Scope::ANY.to_string(),
            pattern: "**".to_string(),
        }
    }

    /// `METHOD` or `METHOD:PATTERN`, e.g. `GET:nfs/spaces/*/filesystems/*`.
    fn parse(spec: &str) -> Option<Scope> {
        let (method, pattern) = spec.split_once(':').unwrap_or((spec, "**"));
        let method = method.trim().to_ascii_uppercase();
        let known = ["GET", "POST", "PUT", "DELETE", Scope::ANY];
        let pattern = pattern.trim().trim_matches('/');
        (known.contains(&method.as_str()) && !pattern.is_empty()).then(|| Scope {
            method,
            pattern: pattern.to_string(),
        })
    }

    fn matches(&self, method: &str, path: &str) -> bool {
        (self.method == Scope::ANY || self.method == method) && path_matches(&self.pattern, path)
    }
}

impl std::fmt::Display for Injected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Injected::Status(code) => write!(f, "{code}"),
            Injected::Lost => f.write_str("lost"),
            Injected::Slow => f.write_str("slow"),
            Injected::Drop => f.write_str("drop"),
            Injected::ProxyBadRequest => f.write_str("html-400"),
            Injected::Reset => f.write_str("reset"),
        }
    }
}

impl FaultProfile {
    /// `"429:0.1,503:0.05,lost:0.02,slow:0.01,drop:0.01"`: an HTTP error
    /// status or `lost`/`slow`/`drop`/`html-400`/`reset`, each with a
    /// probability in [0, 1], adding up to at most 1, and optionally scoped:
    /// `500:0.3@GET` hits GETs only, `500:0.3@GET:nfs/spaces/*/filesystems/*`
    /// GETs of that path pattern only. `hold` is how long `slow` and `drop`
    /// keep a request: longer than the client's request timeout.
    pub fn parse(spec: &str, hold: Duration) -> crate::Result<FaultProfile> {
        let bad = |m: String| crate::Error::InvalidArgument(format!("fault profile {spec:?}: {m}"));
        let mut entries = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (kind, rest) = part
                .split_once(':')
                .ok_or_else(|| bad(format!("{part:?} is not KIND:PROBABILITY[@SCOPE]")))?;
            let (p, scope) = match rest.split_once('@') {
                Some((p, scope)) => (
                    p,
                    Scope::parse(scope).ok_or_else(|| {
                        bad(format!(
                            "{scope:?} is not METHOD or METHOD:PATTERN (GET, POST, PUT, DELETE or *)"
                        ))
                    })?,
                ),
                None => (rest, Scope::any()),
            };
            let kind = match kind.trim() {
                "lost" => Injected::Lost,
                "reset" => Injected::Reset,
                "slow" => Injected::Slow,
                "drop" => Injected::Drop,
                "html-400" => Injected::ProxyBadRequest,
                code => code
                    .parse()
                    .ok()
                    .filter(|c| (400..=599).contains(c))
                    .map(Injected::Status)
                    .ok_or_else(|| {
                        bad(format!(
                            "{code:?} is not an HTTP error status, lost, slow, drop, html-400 or reset"
                        ))
                    })?,
            };
            let p: f64 = p
                .trim()
                .parse()
                .ok()
                .filter(|p: &f64| (0.0..=1.0).contains(p))
                .ok_or_else(|| bad(format!("{p:?} is not a probability")))?;
            entries.push((kind, p, scope));
        }
        if entries.iter().map(|(_, p, _)| p).sum::<f64>() > 1.0 + 1e-9 {
            return Err(bad("probabilities add up to more than 1".to_string()));
        }
        Ok(FaultProfile { entries, hold })
    }

    /// The fault `roll` (in [0, 1)) picks for a `method` request of
    /// `path`, with where in that fault's probability band it fell (in
    /// [0, 1)). The bands do not move with the request: a roll in the band
    /// of an entry scoped elsewhere is no fault.
    pub(super) fn pick_within(
        &self,
        roll: f64,
        method: &str,
        path: &str,
    ) -> Option<(Injected, f64)> {
        let mut acc = 0.0;
        for (kind, p, scope) in &self.entries {
            if roll < acc + p {
                return scope
                    .matches(method, path)
                    .then(|| (*kind, (roll - acc) / p));
            }
            acc += p;
        }
        None
    }

    pub(super) fn hold(&self) -> Duration {
        self.hold
    }
}

/// A "hang until released" fault. Matching requests block until
/// [`Hang::release`] (or until the fake is dropped), then are served normally.
pub struct Hang {
    pub(super) id: u64,
    pub(super) gates: Arc<Gates>,
}

impl Hang {
    /// Let every held and future matching request through.
    pub fn release(&self) {
        self.gates.release(self.id);
    }

    /// Requests that reached this gate so far (held or released).
    pub fn hits(&self) -> usize {
        self.gates.lock().get(&self.id).map_or(0, |g| g.hits)
    }

    /// Blocks until `n` requests reached the gate; false after `limit`.
    pub fn wait_for_hits(&self, n: usize, limit: Duration) -> bool {
        let guard = self.gates.lock();
        let (guard, _) = self
            .gates
            .changed
            .wait_timeout_while(guard, limit, |g| g.get(&self.id).map_or(0, |g| g.hits) < n)
            .unwrap_or_else(|p| p.into_inner());
        guard.get(&self.id).map_or(0, |g| g.hits) >= n
    }
}

#[derive(Default)]
pub(super) struct Gate {
    released: bool,
    hits: usize,
}

#[derive(Default)]
pub(super) struct Gates {
    gates: Mutex<BTreeMap<u64, Gate>>,
    changed: Condvar,
}

impl Gates {
    pub(super) fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Gate>> {
        self.gates.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn release(&self, id: u64) {
        if let Some(g) = self.lock().get_mut(&id) {
            g.released = true;
        }
        self.changed.notify_all();
    }

    pub(super) fn release_all(&self) {
        for g in self.lock().values_mut() {
            g.released = true;
        }
        self.changed.notify_all();
    }

    pub(super) fn pass(&self, id: u64) {
        let mut gates = self.lock();
        gates.entry(id).or_default().hits += 1;
        self.changed.notify_all();
        let _held = self
            .changed
            .wait_while(gates, |g| !g.get(&id).is_some_and(|g| g.released))
            .unwrap_or_else(|p| p.into_inner());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_patterns() {
        assert!(path_matches(
            "nfs/spaces/*/filesystems",
            "nfs/spaces/7/filesystems"
        ));
        assert!(!path_matches(
            "nfs/spaces/*/filesystems",
            "nfs/spaces/7/filesystems/1"
        ));
        assert!(path_matches("nfs/**", "nfs/spaces/7/filesystems/1"));
        assert!(path_matches("**", "linode/instances/1"));
        assert!(!path_matches("nfs/spaces", "nfs/spaces/7"));
    }

    #[test]
    fn fault_profile_parsing() {
        let hold = Duration::from_secs(2);
        let p =
            FaultProfile::parse("429:0.1, 503:0.05, lost:0.1, slow:0.1, drop:0.1", hold).unwrap();
        let pick = |p: &FaultProfile, roll| p.pick_within(roll, "GET", "x").map(|(kind, _)| kind);
        assert_eq!(pick(&p, 0.05), Some(Injected::Status(429)));
        assert_eq!(pick(&p, 0.12), Some(Injected::Status(503)));
        assert_eq!(pick(&p, 0.2), Some(Injected::Lost));
        assert_eq!(pick(&p, 0.3), Some(Injected::Slow));
        assert_eq!(pick(&p, 0.4), Some(Injected::Drop));
        assert_eq!(pick(&p, 0.5), None);
        assert_eq!(p.hold(), hold);
        let within = |roll| {
            p.pick_within(roll, "GET", "x")
                .map(|(k, w)| (k, (w * 100.0).round()))
        };
        assert_eq!(within(0.025), Some((Injected::Status(429), 25.0)));
        assert_eq!(within(0.14), Some((Injected::Status(503), 80.0)));
        assert_eq!(
            pick(&FaultProfile::parse("html-400:0.5", hold).unwrap(), 0.1),
            Some(Injected::ProxyBadRequest)
        );
        for bad in [
            "429",
            "abc:0.1",
            "200:0.1",
            "503:1.5",
            "429:0.7,503:0.7",
            "gone:0.1",
            "500:0.1@",
            "500:0.1@FETCH",
            "500:0.1@GET:",
        ] {
            assert!(FaultProfile::parse(bad, hold).is_err(), "{bad}");
        }
        assert_eq!(pick(&FaultProfile::parse("", hold).unwrap(), 0.0), None);
    }

    #[test]
    fn a_scoped_fault_hits_only_its_method_and_paths() {
        let hold = Duration::from_secs(2);
        let p = FaultProfile::parse(
            "500:0.25@GET:nfs/spaces/*/filesystems/*, reset:0.25@get, 429:0.25",
            hold,
        )
        .unwrap();
        let fs = "nfs/spaces/7/filesystems/12";
        let pick = |roll, method, path| p.pick_within(roll, method, path).map(|(k, _)| k);
        assert_eq!(pick(0.1, "GET", fs), Some(Injected::Status(500)));
        assert_eq!(pick(0.1, "GET", "nfs/spaces/7"), None, "another path");
        assert_eq!(pick(0.1, "PUT", fs), None, "another method");
        assert_eq!(pick(0.3, "GET", "nfs/spaces/7"), Some(Injected::Reset));
        assert_eq!(pick(0.3, "POST", fs), None);
        assert_eq!(pick(0.6, "POST", fs), Some(Injected::Status(429)));
        assert_eq!(pick(0.8, "GET", fs), None);
        let any = FaultProfile::parse("reset:1@*:nfs/**", hold).unwrap();
        assert_eq!(
            any.pick_within(0.5, "DELETE", fs).map(|(k, _)| k),
            Some(Injected::Reset)
        );
        assert_eq!(any.pick_within(0.5, "GET", "linode/instances/1"), None);
    }
}
