//! How every RPC is run and answered: a bounded worker pool for anything that
//! may block (cloud calls, waits, mounts), inline answers for cheap RPCs, and
//! the single reply helper that logs method, duration and code, and logs
//! bodies at debug with every `csi_secret` field redacted.
//!
//! grpcio runs handlers on completion-queue threads, and every call of one
//! connection lands on the same queue; kubelet and each sidecar use one
//! connection, so blocking there would serialise all their calls. Handlers
//! therefore never block: they hand the request to [`Rpc::spawn`].

use crate::proto::csi::exts;
use crate::Error;
use grpcio::{RpcContext, UnarySink};
use protobuf::reflect::{ReflectValueBox, RuntimeFieldType};
use protobuf::{MessageDyn, MessageFull};
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Jobs waiting beyond this many per worker are refused with Unavailable, so
/// a stuck backend cannot grow memory without bound; sidecars retry.
const QUEUE_PER_WORKER: usize = 64;

/// Handle shared by all services of one server.
#[derive(Clone)]
pub struct Rpc {
    pool: Arc<Pool>,
}

struct Pool {
    state: Mutex<PoolState>,
    work_ready: Condvar,
    idle: Condvar,
    capacity: usize,
}

#[derive(Default)]
struct PoolState {
    queue: VecDeque<Job>,
    /// Requests accepted and not yet answered, inline ones included.
    in_flight: usize,
}

impl Rpc {
    /// Starts `workers` threads that run RPC jobs.
    pub fn new(workers: usize) -> Rpc {
        let workers = workers.max(1);
        let pool = Arc::new(Pool {
            state: Mutex::new(PoolState::default()),
            work_ready: Condvar::new(),
            idle: Condvar::new(),
            capacity: workers * QUEUE_PER_WORKER,
        });
        for i in 0..workers {
            let pool = pool.clone();
            thread::Builder::new()
                .name(format!("rpc-worker-{i}"))
                .spawn(move || pool.run())
                .expect("spawn RPC worker thread");
        }
        Rpc { pool }
    }

    /// Runs `work` on the worker pool and answers through the reply helper.
    pub fn spawn<Req, Resp, F>(
        &self,
        ctx: &RpcContext,
        method: &'static str,
        req: Req,
        sink: UnarySink<Resp>,
        work: F,
    ) where
        Req: MessageFull,
        Resp: MessageFull,
        F: FnOnce(Req) -> crate::Result<Resp> + Send + 'static,
    {
        let started = Instant::now();
        log_request(method, &req);
        if !self.pool.admit() {
            let busy = Error::Unavailable(format!("{method}: the driver is busy, retry later"));
            reply(method, started, sink, Err(busy), Delivery::OnQueue(ctx));
            return;
        }
        let pool = self.pool.clone();
        self.pool.push(Box::new(move || {
            let result = run_guarded(method, move || work(req));
            reply(method, started, sink, result, Delivery::Blocking);
            pool.finish();
        }));
    }

    /// Answers on the calling completion-queue thread: only for RPCs that
    /// never block (Probe, GetPluginInfo, capabilities). The send completes
    /// on the call's own queue, which must not be waited on from here.
    pub fn inline<Req, Resp, F>(
        &self,
        ctx: &RpcContext,
        method: &'static str,
        req: Req,
        sink: UnarySink<Resp>,
        work: F,
    ) where
        Req: MessageFull,
        Resp: MessageFull,
        F: FnOnce(Req) -> crate::Result<Resp>,
    {
        let started = Instant::now();
        log_request(method, &req);
        self.pool.begin();
        let result = run_guarded(method, move || work(req));
        reply(method, started, sink, result, Delivery::OnQueue(ctx));
        self.pool.finish();
    }

    /// Waits until no request is in flight, at most `grace`; returns how
    /// many were still running when it gave up.
    pub fn drain(&self, grace: Duration) -> usize {
        self.pool.wait_idle(grace)
    }
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a request in unless the queue is full.
    fn admit(&self) -> bool {
        let mut state = self.lock();
        if state.queue.len() >= self.capacity {
            return false;
        }
        state.in_flight += 1;
        true
    }

    fn push(&self, job: Job) {
        self.lock().queue.push_back(job);
        self.work_ready.notify_one();
    }

    fn begin(&self) {
        self.lock().in_flight += 1;
    }

    fn finish(&self) {
        let mut state = self.lock();
        state.in_flight -= 1;
        if state.in_flight == 0 {
            self.idle.notify_all();
        }
    }

    fn run(&self) {
        loop {
            let job = {
                let mut state = self.lock();
                loop {
                    if let Some(job) = state.queue.pop_front() {
                        break job;
                    }
                    state = self
                        .work_ready
                        .wait(state)
                        .unwrap_or_else(|p| p.into_inner());
                }
            };
            job();
        }
    }

    fn wait_idle(&self, grace: Duration) -> usize {
        let deadline = Instant::now() + grace;
        let mut state = self.lock();
        while state.in_flight > 0 {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            state = self
                .idle
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        state.in_flight
    }
}

/// A panic in one RPC must not take the worker (or the process) down; the
/// caller gets Internal and the next request is served.
fn run_guarded<Resp>(
    method: &str,
    work: impl FnOnce() -> crate::Result<Resp>,
) -> crate::Result<Resp> {
    catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|_| {
        log::error!("{method}: handler panicked");
        Err(Error::Internal(format!("{method}: internal error")))
    })
}

enum Delivery<'a> {
    /// Wait for the reply to be sent (worker threads).
    Blocking,
    /// Let the call's completion queue finish sending (completion-queue
    /// threads must not wait on their own queue).
    OnQueue(&'a RpcContext<'a>),
}

/// Probe and stats are polled constantly; logging them at info would drown
/// everything else.
fn level_for(method: &str) -> log::Level {
    match method {
        "Probe" | "NodeGetVolumeStats" => log::Level::Debug,
        _ => log::Level::Info,
    }
}

fn log_request(method: &str, req: &dyn MessageDyn) {
    if log::log_enabled!(log::Level::Debug) {
        log::debug!("{method} request: {}", redacted(req));
    }
}

fn reply<Resp: MessageFull>(
    method: &'static str,
    started: Instant,
    sink: UnarySink<Resp>,
    result: crate::Result<Resp>,
    mode: Delivery<'_>,
) {
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    match result {
        Ok(resp) => {
            log::log!(level_for(method), "{method} OK in {ms:.1}ms");
            if log::log_enabled!(log::Level::Debug) {
                log::debug!("{method} response: {}", redacted(&resp));
            }
            deliver(method, sink.success(resp), mode)
        }
        Err(err) => {
            let level = match err {
                Error::Internal(_) | Error::DeadlineExceeded(_) => log::Level::Warn,
                _ => level_for(method),
            };
            log::log!(
                level,
                "{method} {:?} in {ms:.1}ms: {}",
                err.code(),
                err.message()
            );
            deliver(method, sink.fail(err.into()), mode)
        }
    }
}

fn deliver(method: &'static str, sending: grpcio::UnarySinkResult, mode: Delivery<'_>) {
    match mode {
        Delivery::Blocking => {
            if let Err(e) = futures_executor::block_on(sending) {
                log::debug!("{method}: reply not delivered: {e}");
            }
        }
        Delivery::OnQueue(ctx) => ctx.spawn(async move {
            if let Err(e) = sending.await {
                log::debug!("{method}: reply not delivered: {e}");
            }
        }),
    }
}

/// The message in text form with every field marked `csi_secret` in the CSI
/// proto replaced: map values and strings become `***`.
pub fn redacted(msg: &dyn MessageDyn) -> String {
    let mut copy = msg.clone_box();
    redact(&mut *copy);
    protobuf::text_format::print_to_string(&*copy)
}

fn redact(msg: &mut dyn MessageDyn) {
    let descriptor = msg.descriptor_dyn();
    for field in descriptor.fields() {
        let secret = field
            .proto()
            .options
            .as_ref()
            .and_then(|o| exts::csi_secret.get(o))
            .unwrap_or(false);
        match field.runtime_field_type() {
            RuntimeFieldType::Map(..) if secret => {
                let keys: Vec<ReflectValueBox> = field
                    .get_map(&*msg)
                    .into_iter()
                    .map(|(k, _)| k.to_box())
                    .collect();
                let mut map = field.mut_map(msg);
                for k in keys {
                    map.insert(k, ReflectValueBox::String("***".to_string()));
                }
            }
            RuntimeFieldType::Singular(_) if secret && field.has_field(&*msg) => {
                field.set_singular_field(msg, ReflectValueBox::String("***".to_string()));
            }
            RuntimeFieldType::Singular(protobuf::reflect::RuntimeType::Message(_))
                if field.has_field(&*msg) =>
            {
                redact(field.mut_message(msg));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::csi;

    #[test]
    fn secrets_are_redacted_and_the_rest_kept() {
        let mut req = csi::NodeStageVolumeRequest::new();
        req.volume_id = "1/2".into();
        req.secrets.insert("password".into(), "hunter2".into());
        req.volume_context
            .insert("mount-target".into(), "fs.example:/x".into());
        let text = redacted(&req);
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("password"), "{text}");
        assert!(text.contains("***"), "{text}");
        assert!(text.contains("fs.example:/x"), "{text}");
        // The original is untouched.
        assert_eq!(req.secrets["password"], "hunter2");
    }

    #[test]
    fn drain_waits_for_in_flight_work() {
        let rpc = Rpc::new(2);
        assert_eq!(rpc.drain(Duration::from_millis(1)), 0);
        rpc.pool.begin();
        assert_eq!(rpc.drain(Duration::from_millis(20)), 1);
        rpc.pool.finish();
        assert_eq!(rpc.drain(Duration::from_secs(1)), 0);
    }
}
