//! One request's way through the fake: log and count it, check the token,
//! apply rate limits and faults, route it under the state lock, save, then
//! notify the observer. It must not know endpoints or wire shapes.

use super::faults::{FaultAction, FaultProfile, FaultRule, Gates, Injected};
use super::persist;
use super::routes::route;
use super::state::{now_ms, FakeEvent, State};
use super::wire::api_error::ApiError;
use crate::fake::rate_limit::Limiter;
use crate::fake::{HttpRequest, HttpResponse};
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The request log keeps the newest entries only, so a long `dev` run stays small.
const REQUEST_LOG_CAP: usize = 10_000;

type Observer = Arc<dyn Fn(&FakeEvent) + Send + Sync>;

/// One request as the fake saw it (the token itself is never kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: String,
    /// Path after the API version, e.g. `nfs/spaces/7/filesystems`.
    pub path: String,
    /// API version segment, e.g. `v4beta`.
    pub version: String,
    pub query: String,
    pub body: String,
    pub authorized: bool,
    pub user_agent: Option<String>,
    pub content_type: Option<String>,
    pub accept: Option<String>,
    pub x_filter: Option<String>,
    /// Status answered; `None` while the request is in flight.
    pub status: Option<u16>,
}

impl RequestRecord {
    /// Parsed JSON body (`Null` when empty or not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

pub(super) struct Shared {
    /// The one bearer token accepted now.
    pub(super) token: Mutex<String>,
    pub(super) state: Mutex<State>,
    pub(super) state_file: Option<PathBuf>,
    pub(super) rules: Mutex<Vec<FaultRule>>,
    pub(super) profile: Mutex<Option<FaultProfile>>,
    pub(super) rng: Mutex<u64>,
    pub(super) log: Mutex<VecDeque<(u64, RequestRecord)>>,
    pub(super) seq: AtomicU64,
    pub(super) observer: Mutex<Option<Observer>>,
    /// Taken before the state's lock is let go and held while the events
    /// of that change are delivered: the observer sees changes in the
    /// order they were made (a clone's copy is complete before a delete
    /// of its snapshot removes the data it copies).
    pub(super) delivering: Mutex<()>,
    pub(super) gates: Arc<Gates>,
    pub(super) next_gate: AtomicU64,
    /// Requests executed (not refused by the rate limits) per `METHOD
    /// endpoint-template`, never capped or dropped.
    pub(super) counts: Mutex<BTreeMap<String, u64>>,
    pub(super) limiter: Mutex<Option<Limiter>>,
    pub(super) throttled: AtomicU64,
    /// Requests the rate limits refused, likewise.
    pub(super) throttled_counts: Mutex<BTreeMap<String, u64>>,
    /// Random faults injected so far, by kind.
    pub(super) injected: Mutex<BTreeMap<Injected, u64>>,
    /// Part of the injected 429/503s become 408s and nginx 400 pages.
    pub(super) html_errors: AtomicBool,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `v4beta/nfs/spaces/7` → (`v4beta`, `nfs/spaces/7`).
fn split_version(path: &str) -> Option<(&str, &str)> {
    let rest = path.trim_start_matches('/');
    let (version, tail) = rest.split_once('/').unwrap_or((rest, ""));
    matches!(version, "v4" | "v4beta").then_some((version, tail.trim_end_matches('/')))
}

impl Shared {
    pub(super) fn handle(&self, req: HttpRequest) -> HttpResponse {
        let Some((version, path)) = split_version(&req.path) else {
            return ApiError::not_found().response();
        };
        let path = path.to_string();
        let authorized =
            req.header("Authorization") == Some(&format!("Bearer {}", lock(&self.token)));
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        {
            let mut log = lock(&self.log);
            if log.len() >= REQUEST_LOG_CAP {
                log.pop_front();
            }
            let header = |n: &str| req.header(n).map(str::to_string);
            log.push_back((
                seq,
                RequestRecord {
                    method: req.method.clone(),
                    path: path.clone(),
                    version: version.to_string(),
                    query: req.query.clone(),
                    body: req.body.clone(),
                    authorized,
                    user_agent: header("User-Agent"),
                    content_type: header("Content-Type"),
                    accept: header("Accept"),
                    x_filter: header("X-Filter"),
                    status: None,
                },
            ));
        }
        let response = self.limited(&req, &path, authorized);
        if let Some((_, rec)) = lock(&self.log).iter_mut().find(|(s, _)| *s == seq) {
            rec.status = Some(response.status);
        }
        response
    }

    /// [`Shared::respond`] under the rate limits, when they are on.
    /// Counted as executed, or as throttled when the limits refuse it.
    fn limited(&self, req: &HttpRequest, path: &str, authorized: bool) -> HttpResponse {
        let call = format!("{} {}", req.method, crate::linode::endpoint_template(path));
        let verdict = lock(&self.limiter)
            .as_mut()
            .map(|l| l.admit(is_collection(&req.method, path), now_ms()));
        let Some(verdict) = verdict else {
            *lock(&self.counts).entry(call).or_default() += 1;
            return self.respond(req, path, authorized);
        };
        let mut response = match verdict.retry_after {
            Some(secs) => {
                self.throttled.fetch_add(1, Ordering::SeqCst);
                *lock(&self.throttled_counts).entry(call).or_default() += 1;
                ApiError::new(429, None, "Too many requests")
                    .response()
                    .with_header("Retry-After", &secs.to_string())
            }
            None => {
                *lock(&self.counts).entry(call).or_default() += 1;
                self.respond(req, path, authorized)
            }
        };
        for (k, v) in verdict.headers {
            response = response.with_header(&k, &v);
        }
        response
    }

    fn respond(&self, req: &HttpRequest, path: &str, authorized: bool) -> HttpResponse {
        if !authorized {
            return ApiError::new(401, None, "Invalid Token").response();
        }
        let mut fail_after = None;
        for action in self.triggered_faults(&req.method, path) {
            match action {
                FaultAction::Latency(d) => std::thread::sleep(d),
                FaultAction::Hang(id) => self.gates.pass(id),
                FaultAction::FailAfter { status } => fail_after = Some(status),
                FaultAction::Status {
                    status,
                    reason,
                    headers,
                    html,
                } => {
                    let mut r = if html {
                        proxy_page(status, &reason)
                    } else {
                        ApiError::new(status, None, &reason).response()
                    };
                    for (k, v) in headers {
                        r = r.with_header(&k, &v);
                    }
                    return r;
                }
            }
        }
        let (injected, hold) = self.random_fault(&req.method, path).unzip();
        if let Some(kind) = injected {
            log::info!("fake Linode: injected {kind} into {} {path}", req.method);
            *lock(&self.injected).entry(kind).or_default() += 1;
        }
        match injected {
            Some(Injected::Status(408)) => {
                return ApiError::new(408, None, "Request Timeout").response()
            }
            Some(Injected::Status(code)) => {
                let r = ApiError::new(code, None, "Injected failure").response();
                return if code == 429 {
                    r.with_header("Retry-After", "1")
                } else {
                    r
                };
            }
            Some(Injected::ProxyBadRequest) => return proxy_page(400, "Bad Request"),
            Some(Injected::Reset) => return HttpResponse::hang_up(),
            Some(Injected::Slow) => std::thread::sleep(hold.unwrap_or_default()),
            _ => {}
        }
        let mut events = Vec::new();
        let (routed, turn) = {
            let mut state = lock(&self.state);
            let advanced = state.advance(now_ms(), &mut events);
            let mut routed = route(&mut state, req, path, &mut events);
            let turn = self.commit(&state, advanced || routed.mutated, &mut events);
            let dialect = state.dialect;
            routed.result = routed.result.map(|v| dialect.write(&req.method, path, v));
            (routed, turn)
        };
        self.notify(&events);
        drop(turn);
        if let Some(status) = fail_after {
            return ApiError::new(status, None, "Internal Server Error").response();
        }
        match injected {
            Some(Injected::Lost) => {
                return ApiError::new(500, None, "Internal Server Error").response()
            }
            // Nobody is waiting any more when this goes out.
            Some(Injected::Drop) => std::thread::sleep(hold.unwrap_or_default()),
            _ => {}
        }
        match routed.result {
            Ok(v) => HttpResponse::json(200, &v).with_header("Vary", "Authorization, X-Filter"),
            Err(e) => e.response(),
        }
    }

    /// Actions of the rules matching this request, consuming counted ones:
    /// all delays/hangs, then at most one answer-changing rule.
    fn triggered_faults(&self, method: &str, path: &str) -> Vec<FaultAction> {
        let mut rules = lock(&self.rules);
        let mut out = Vec::new();
        let mut answered = false;
        for rule in rules.iter_mut() {
            if rule.remaining == Some(0) || !rule.matches(method, path) {
                continue;
            }
            let answers = matches!(
                rule.action,
                FaultAction::Status { .. } | FaultAction::FailAfter { .. }
            );
            if answers && answered {
                continue;
            }
            answered |= answers;
            if let Some(n) = rule.remaining.as_mut() {
                *n -= 1;
            }
            out.push(rule.action.clone());
        }
        rules.retain(|r| r.remaining != Some(0));
        out
    }

    /// A fault of the random profile for this request, with how long
    /// `slow` and `drop` hold it.
    fn random_fault(&self, method: &str, path: &str) -> Option<(Injected, std::time::Duration)> {
        let profile = lock(&self.profile).clone()?;
        let mut x = lock(&self.rng);
        // xorshift64: plenty for "fail about this often".
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        let roll = (*x >> 11) as f64 / (1u64 << 53) as f64;
        let (kind, within) = profile.pick_within(roll, method, path)?;
        let kind = match kind {
            // Where in its band the roll fell picks the form, so the same
            // requests fail with or without the quirk, and a seed replays it.
            Injected::Status(429 | 503) if self.html_errors.load(Ordering::SeqCst) => {
                match within {
                    w if w < 1.0 / 3.0 => Injected::Status(408),
                    w if w < 2.0 / 3.0 => Injected::ProxyBadRequest,
                    _ => kind,
                }
            }
            kind => kind,
        };
        Some((kind, profile.hold()))
    }

    /// Saves `state` (when `changed`) and takes the turn to deliver
    /// `events`, in the order their changes were made. A snapshot's cut is
    /// delivered here, before the state that records it is saved, and with
    /// it the events before it: a process killed between the two must never
    /// restart with a snapshot whose content was not taken. What is left in
    /// `events` is delivered by the caller, holding the turn.
    pub(super) fn commit(
        &self,
        state: &State,
        changed: bool,
        events: &mut Vec<FakeEvent>,
    ) -> MutexGuard<'_, ()> {
        let turn = lock(&self.delivering);
        let cuts = events
            .iter()
            .rposition(|e| matches!(e, FakeEvent::SnapshotCreated { .. }))
            .map_or(0, |last| last + 1);
        self.notify(&events.drain(..cuts).collect::<Vec<_>>());
        if changed {
            self.persist(state);
        }
        turn
    }

    pub(super) fn persist(&self, state: &State) {
        if let Some(path) = &self.state_file {
            persist::save(path, state);
        }
    }

    pub(super) fn notify(&self, events: &[FakeEvent]) {
        if events.is_empty() {
            return;
        }
        let observer = lock(&self.observer).clone();
        if let Some(observer) = observer {
            for e in events {
                observer(e);
            }
        }
    }
}

/// The error page a proxy in front of the API (nginx) answers with:
/// `text/html`, not the JSON envelope.
pub(super) fn proxy_page(status: u16, reason: &str) -> HttpResponse {
    let body = format!(
        "<html><head><title>{status} {reason}</title></head>\n\
         <body><h1>{status} {reason}</h1><hr><p>nginx</p></body></html>\n"
    );
    HttpResponse::raw(status, "text/html", body.into_bytes()).with_header("Server", "nginx")
}

/// A GET of a collection: Linode's paginated (scarce) request class. A
/// filesystem's quota list is one too: it is paginated like every
/// collection, which is what Linode's documentation says the scarce class
/// is (its own limit for it is not published), and what the driver's pacer
/// and the benches count as a list.
fn is_collection(method: &str, path: &str) -> bool {
    method == "GET"
        && matches!(
            path.rsplit('/').next(),
            Some(
                "spaces"
                    | "filesystems"
                    | "snapshots"
                    | "quotas"
                    | "configs"
                    | "interfaces"
                    | "instances"
            )
        )
}
