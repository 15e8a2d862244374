//! How every RPC is run and answered: a bounded worker pool for anything that
//! makes HTTP calls or syscalls, inline answers for cheap RPCs, parked flows
//! for work that waits (they hold no worker, see [`crate::flow`]), and the
//! single reply helper in `reply`. The metrics' in-flight and parked
//! gauges read this pool and registry at scrape time.
//!
//! grpcio runs handlers on completion-queue threads, and every call of one
//! connection lands on the same queue; kubelet and each sidecar use one
//! connection, so blocking there would serialise all their calls. Handlers
//! therefore never block: they hand the request to [`Rpc::unary`] or
//! [`Rpc::streamed`].

mod parked;
pub mod registrar;
mod reply;

pub use reply::redacted;

use crate::flow::{Flow, Step};
use crate::mutex::{lock, wait, wait_timeout};
use crate::Error;
use futures_core::Stream;
use grpcio::{ClientStreamingSink, Deadline, RequestStream, RpcContext, UnarySink};
use parked::{Liveness, Registry, Waiting};
use protobuf::MessageDyn;
use reply::{log_request, Responder, Sending, Sink};
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A request or an answer of any RPC. Everything past the registrar's thin
/// per-RPC adapters handles messages as this one type, so the machinery is
/// built once, not once per RPC.
pub(crate) type Msg = Box<dyn MessageDyn>;

/// New requests waiting beyond this many per worker are refused with
/// Unavailable, so a stuck backend cannot grow memory without bound;
/// sidecars retry.
const QUEUE_PER_WORKER: usize = 64;
/// The queue bound never falls below the concurrency the sidecars use
/// (external-provisioner alone runs 100 workers by default), since a parked
/// wait no longer holds a worker and small pools are now the norm.
const MIN_QUEUE: usize = 256;

/// Where the work of a unary RPC runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unary {
    /// On the worker pool.
    Pooled,
    /// On the calling completion-queue thread: only for RPCs that never
    /// block (Probe, GetPluginInfo, capabilities). The send completes on
    /// the call's own queue, which must not be waited on from there.
    Inline,
}

/// Handle shared by all services of one server.
#[derive(Clone)]
pub struct Rpc {
    pool: Arc<Pool>,
    parked: Arc<Registry>,
}

struct Pool {
    state: Mutex<PoolState>,
    work_ready: Condvar,
    idle: Condvar,
    capacity: usize,
}

#[derive(Default)]
struct PoolState {
    /// New calls, in arrival order...
    queue: VecDeque<Job>,
    /// ...and the rest of work already under way (a parked flow resumed,
    /// an abandoned call's answer), which goes first: a burst of new calls
    /// never holds back the calls (and detached flows) it waits behind...
    resumed: VecDeque<Job>,
    /// ...and of those, detached flows (a batch applied for several calls,
    /// a pool filesystem made ready) go first of all: calls wait on them,
    /// and a burst of resumed calls must not hold back what they all need
    /// next.
    detached: VecDeque<Job>,
    /// Requests accepted and not yet answered: queued, running, parked or
    /// answered inline.
    in_flight: usize,
}

impl PoolState {
    /// The job a free worker runs next: work under way first, detached
    /// flows before calls.
    fn next(&mut self) -> Option<Job> {
        self.detached
            .pop_front()
            .or_else(|| self.resumed.pop_front())
            .or_else(|| self.queue.pop_front())
    }
}

impl Rpc {
    /// Starts `workers` threads that run RPC jobs.
    pub fn new(workers: usize) -> Rpc {
        let workers = workers.max(1);
        let pool = Arc::new(Pool {
            state: Mutex::new(PoolState::default()),
            work_ready: Condvar::new(),
            idle: Condvar::new(),
            capacity: (workers * QUEUE_PER_WORKER).max(MIN_QUEUE),
        });
        for i in 0..workers {
            let pool = pool.clone();
            thread::Builder::new()
                .name(format!("rpc-worker-{i}"))
                .spawn(move || pool.run())
                .expect("spawn RPC worker thread");
        }
        let parked = Registry::start();
        let (watched_pool, watched_parked) = (Arc::downgrade(&pool), Arc::downgrade(&parked));
        crate::metrics::watch_rpcs_in_flight(move || {
            watched_pool.upgrade().map(|p| lock(&p.state).in_flight)
        });
        crate::metrics::watch_rpcs_parked(move || watched_parked.upgrade().map(|r| r.count()));
        Rpc { pool, parked }
    }

    /// Runs `work` where `how` says and answers through the reply helper.
    pub fn unary<F>(
        &self,
        ctx: &RpcContext,
        how: Unary,
        method: &'static str,
        req: Msg,
        sink: UnarySink<Msg>,
        work: F,
    ) where
        F: FnOnce(Msg) -> crate::Result<Msg> + Send + 'static,
    {
        let reply = Responder::new(method, Instant::now(), Sink::Unary(sink));
        match how {
            Unary::Pooled => {
                let caller = Caller::unary(ctx.deadline());
                let work = move |req| work(req).map(Flow::Ready);
                if let Some(busy) = self.start(reply, caller, req, work) {
                    ctx.spawn(busy);
                }
            }
            Unary::Inline => {
                log_request(method, &*req);
                self.pool.begin();
                let result = run_guarded(method, move || work(req));
                ctx.spawn(reply.send(result));
                self.pool.finish();
            }
        }
    }

    /// For RPCs whose work may park: grpcio registered them as
    /// client-streaming (the wire format of a unary call is the same), which
    /// is the only way its server API lets a handler see a caller cancel.
    /// Reads the one request message on the completion queue, then runs
    /// `work` on the pool as a pooled [`Rpc::unary`] does; while parked, the
    /// call is answered early if its caller cancels or its deadline passes.
    pub fn streamed<F>(
        &self,
        ctx: &RpcContext,
        method: &'static str,
        stream: RequestStream<Msg>,
        sink: ClientStreamingSink<Msg>,
        work: F,
    ) where
        F: FnOnce(Msg) -> Step<Msg> + Send + 'static,
    {
        let reply = Responder::new(method, Instant::now(), Sink::Streamed(sink));
        let deadline = ctx.deadline();
        let rpc = self.clone();
        ctx.spawn(async move {
            let mut stream = stream;
            let first = next_message(&mut stream).await;
            // A unary caller half-closes with its message; waiting for that
            // also means dropping the stream later cannot cancel the call.
            let rest = match first {
                Some(Ok(_)) => next_message(&mut stream).await,
                _ => None,
            };
            let req = match (first, rest) {
                (Some(Ok(req)), None) => req,
                (Some(Err(e)), _) | (Some(Ok(_)), Some(Err(e))) => {
                    // The caller is gone; nobody is there to answer.
                    log::debug!("{}: request not received: {e}", reply.method());
                    return;
                }
                (None, _) => {
                    let err = Error::InvalidArgument("no request message was sent".into());
                    return reply.send(Err(err)).await;
                }
                (Some(Ok(_)), Some(Ok(_))) => {
                    let err =
                        Error::InvalidArgument("exactly one request message is expected".into());
                    return reply.send(Err(err)).await;
                }
            };
            let caller = Caller::streamed(deadline, stream);
            if let Some(busy) = rpc.start(reply, caller, req, work) {
                busy.await;
            }
        });
    }

    /// Admits a call and queues its work; the busy answer to send when the
    /// queue is full (on the completion queue: never wait for it here).
    fn start<F>(&self, reply: Responder, caller: Caller, req: Msg, work: F) -> Option<Sending>
    where
        F: FnOnce(Msg) -> Step<Msg> + Send + 'static,
    {
        let method = reply.method();
        log_request(method, &*req);
        if !self.pool.admit() {
            let busy = Error::Unavailable(format!("{method}: the driver is busy, retry later"));
            return Some(reply.send(Err(busy)));
        }
        let call = Arc::new(Call {
            reply: Mutex::new(Some(reply)),
            caller,
            pool: self.pool.clone(),
        });
        let rpc = self.clone();
        self.pool.push(Box::new(move || {
            let step = run_guarded(method, move || work(req));
            rpc.drive(call, method, step);
        }));
        None
    }

    /// Runs a flow that answers nobody (a batch applied on behalf of several
    /// calls); its failure is only logged. It is not counted as in flight.
    pub fn detach(&self, what: &'static str, step: Step<()>) {
        self.drive(Arc::new(NoCaller(what)), what, step);
    }

    /// Takes a step's outcome to its caller, or parks it: the continuation
    /// then runs on a worker when its event fires.
    fn drive<T: Send + 'static>(
        &self,
        to: Arc<dyn Answer<T>>,
        method: &'static str,
        step: Step<T>,
    ) {
        match step {
            Ok(Flow::Ready(value)) => to.answer(Ok(value)),
            Err(e) => to.answer(Err(e)),
            Ok(Flow::Parked(parked)) => {
                let rpc = self.clone();
                let resumed = to.clone();
                // A flow with no caller to wait is a detached one.
                let waiting = to.waiting();
                let detached = waiting.is_none();
                let pending = parked.park(Box::new(move |rest| {
                    let again = rpc.clone();
                    let job: Job = Box::new(move || {
                        let step = run_guarded(method, rest);
                        again.drive(resumed, method, step);
                    });
                    if detached {
                        rpc.pool.push_detached(job);
                    } else {
                        rpc.pool.push_resumed(job);
                    }
                }));
                if let Some(waiting) = waiting {
                    self.parked.add(waiting, pending);
                }
            }
        }
    }

    /// Calls whose work is parked right now.
    pub fn parked(&self) -> usize {
        self.parked.count()
    }

    /// Waits until no request is in flight, at most `grace`; returns how
    /// many were still running when it gave up. Parked calls get the grace
    /// period like running ones; shortly before it ends, those still parked
    /// are answered Unavailable so their sidecars retry (after a restart,
    /// the retry adopts what they had made).
    pub fn drain(&self, grace: Duration) -> usize {
        let margin = (grace / 5).min(Duration::from_secs(2));
        if self.pool.wait_idle(grace - margin) == 0 {
            return 0;
        }
        let answered = self
            .parked
            .abandon_all(|| Error::Unavailable("the driver is shutting down; retry".into()));
        if answered > 0 {
            log::info!("answered {answered} waiting RPCs with Unavailable before stopping");
        }
        self.pool.wait_idle(margin)
    }
}

/// Where a flow's outcome goes.
trait Answer<T>: Send + Sync {
    fn answer(&self, result: crate::Result<T>);
    /// How the parked-call registry sees it; `None` for flows with no caller.
    fn waiting(self: Arc<Self>) -> Option<Arc<dyn Waiting>>;
}

/// One accepted call until it is answered.
struct Call {
    reply: Mutex<Option<Responder>>,
    caller: Caller,
    pool: Arc<Pool>,
}

impl Answer<Msg> for Call {
    fn answer(&self, result: crate::Result<Msg>) {
        let reply = lock(&self.reply).take();
        if let Some(reply) = reply {
            futures_executor::block_on(reply.send(result));
            self.pool.finish();
        }
    }

    fn waiting(self: Arc<Self>) -> Option<Arc<dyn Waiting>> {
        Some(self)
    }
}

impl Waiting for Call {
    fn liveness(&self) -> Liveness {
        self.caller.liveness()
    }

    fn abandon(&self, err: Error) {
        let reply = lock(&self.reply).take();
        if let Some(reply) = reply {
            let pool = self.pool.clone();
            self.pool.push_resumed(Box::new(move || {
                futures_executor::block_on(reply.send(Err(err)));
                pool.finish();
            }));
        }
    }
}

/// Where a detached flow's outcome goes: to nobody, a failure only logged.
struct NoCaller(&'static str);

impl Answer<()> for NoCaller {
    fn answer(&self, result: crate::Result<()>) {
        if let Err(e) = result {
            log::warn!("{}: {e}", self.0);
        }
    }

    fn waiting(self: Arc<Self>) -> Option<Arc<dyn Waiting>> {
        None
    }
}

/// Whether a call's caller still waits for the answer.
struct Caller {
    deadline: Deadline,
    /// The request stream of a streamed call: polling it tells whether
    /// gRPC has seen the caller cancel.
    stream: Option<Mutex<Box<dyn FnMut() -> bool + Send>>>,
}

impl Caller {
    fn unary(deadline: Deadline) -> Caller {
        Caller {
            deadline,
            stream: None,
        }
    }

    fn streamed(deadline: Deadline, mut stream: RequestStream<Msg>) -> Caller {
        let alive = move || {
            let mut cx = Context::from_waker(Waker::noop());
            !matches!(
                Pin::new(&mut stream).poll_next(&mut cx),
                Poll::Ready(Some(Err(_)))
            )
        };
        Caller {
            deadline,
            stream: Some(Mutex::new(Box::new(alive))),
        }
    }

    fn liveness(&self) -> Liveness {
        if self.deadline.exceeded() {
            return Liveness::Gone(Error::DeadlineExceeded(
                "the caller's deadline passed while the operation was waiting; a retry continues it"
                    .into(),
            ));
        }
        let alive = self.stream.as_ref().is_none_or(|s| (lock(s))());
        if alive {
            Liveness::Alive
        } else {
            Liveness::Gone(Error::Canceled(
                "the caller cancelled while the operation was waiting; a retry continues it".into(),
            ))
        }
    }
}

/// The next message of a request stream, awaited on the completion queue.
async fn next_message(stream: &mut RequestStream<Msg>) -> Option<grpcio::Result<Msg>> {
    std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx)).await
}

impl Pool {
    /// Counts a new request in unless the queue is full.
    fn admit(&self) -> bool {
        let mut state = lock(&self.state);
        if state.queue.len() >= self.capacity {
            return false;
        }
        state.in_flight += 1;
        true
    }

    /// Queues a new call's `job`; it never refuses. Admission is
    /// [`Pool::admit`]'s, once per call.
    fn push(&self, job: Job) {
        lock(&self.state).queue.push_back(job);
        self.work_ready.notify_one();
    }

    /// Queues the rest of an accepted call (a resumed flow, an abandoned
    /// call's answer), ahead of new calls; it always runs.
    fn push_resumed(&self, job: Job) {
        lock(&self.state).resumed.push_back(job);
        self.work_ready.notify_one();
    }

    /// Queues the rest of a detached flow, ahead of every call.
    fn push_detached(&self, job: Job) {
        lock(&self.state).detached.push_back(job);
        self.work_ready.notify_one();
    }

    fn begin(&self) {
        lock(&self.state).in_flight += 1;
    }

    fn finish(&self) {
        let mut state = lock(&self.state);
        state.in_flight -= 1;
        if state.in_flight == 0 {
            self.idle.notify_all();
        }
    }

    fn run(&self) {
        loop {
            let job = {
                let mut state = lock(&self.state);
                loop {
                    if let Some(job) = state.next() {
                        break job;
                    }
                    state = wait(&self.work_ready, state);
                }
            };
            job();
        }
    }

    fn wait_idle(&self, grace: Duration) -> usize {
        let deadline = Instant::now() + grace;
        let mut state = lock(&self.state);
        while state.in_flight > 0 {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            state = wait_timeout(&self.idle, state, deadline - now).0;
        }
        state.in_flight
    }
}

/// A panic in one RPC must not take the worker (or the process) down; the
/// caller gets Internal and the next request is served.
fn run_guarded<T>(method: &str, work: impl FnOnce() -> crate::Result<T>) -> crate::Result<T> {
    catch_unwind(AssertUnwindSafe(work))
        .unwrap_or_else(|panic| Err(crate::flow::panicked(method, &*panic)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resumed_work_runs_before_new_calls_and_detached_flows_first() {
        let pool = Pool {
            state: Mutex::default(),
            work_ready: Condvar::new(),
            idle: Condvar::new(),
            capacity: 10,
        };
        let order = Arc::new(Mutex::new(Vec::new()));
        let pushed = [
            (1, "new"),
            (2, "resumed"),
            (3, "detached"),
            (4, "new"),
            (5, "resumed"),
            (6, "detached"),
        ];
        for (n, queue) in pushed {
            let order = order.clone();
            let job: Job = Box::new(move || lock(&order).push(n));
            match queue {
                "resumed" => pool.push_resumed(job),
                "detached" => pool.push_detached(job),
                _ => pool.push(job),
            }
        }
        while let Some(job) = lock(&pool.state).next() {
            job();
        }
        assert_eq!(*lock(&order), [3, 6, 2, 5, 1, 4]);
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
