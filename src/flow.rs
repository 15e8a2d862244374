//! Work that can wait without a thread. A step of an RPC either has its value
//! or is parked on an event (a Linode object turning active, another caller's
//! batch finishing) with the rest of the work captured as a continuation.
//! Event sources keep parked continuations in [`Slot`]s and fire them from
//! any thread; whoever drives the flow (the RPC worker pool) decides where
//! the continuation runs. Nothing here owns a thread, blocks, or knows about
//! gRPC or Linode.

use crate::mutex::lock;
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

/// What a step of work returns: a failure, its value, or a parked flow.
pub type Step<T> = crate::Result<Flow<T>>;

/// The rest of a parked flow, ready to run on a worker.
pub type Thunk<T> = Box<dyn FnOnce() -> Step<T> + Send>;

/// Hands a woken flow's rest back to its driver. Called at most once, from
/// the thread that fired the event; it must not run the thunk there.
pub type Resume<T> = Box<dyn FnOnce(Thunk<T>) + Send>;

pub enum Flow<T> {
    Ready(T),
    Parked(Parked<T>),
}

/// A flow waiting for an event. The driver parks it exactly once.
pub struct Parked<T> {
    park: Box<dyn FnOnce(Resume<T>) -> Arc<dyn Pending> + Send>,
}

impl<T> Parked<T> {
    /// Registers the continuation with its event source; `resume` gets the
    /// rest once the event fires. The returned handle lets the driver drop
    /// the continuation (and every lock guard it holds) if the caller leaves
    /// first.
    pub fn park(self, resume: Resume<T>) -> Arc<dyn Pending> {
        (self.park)(resume)
    }
}

/// The driver's hold on a parked continuation.
pub trait Pending: Send + Sync {
    /// Drops the continuation if its event has not fired yet; true if it did.
    fn cancel(&self) -> bool;
    /// Whether the continuation is still waiting for its event.
    fn is_pending(&self) -> bool;
}

/// The value of a step that needs no waiting.
pub fn done<T>(value: T) -> Step<T> {
    Ok(Flow::Ready(value))
}

/// Where an event source keeps one parked continuation until its event. A
/// slot fires at most once; a cancelled slot ignores its event, and its
/// source may forget it (see [`Slot::is_waiting`]).
pub struct Slot<V> {
    continuation: Mutex<Option<Continuation<V>>>,
}

type Continuation<V> = Box<dyn FnOnce(V) + Send>;

impl<V> Slot<V> {
    fn take(&self) -> Option<Continuation<V>> {
        lock(&self.continuation).take()
    }

    /// Delivers the event; false when nobody waits for it any more.
    pub fn fire(&self, value: V) -> bool {
        match self.take() {
            Some(k) => {
                k(value);
                true
            }
            None => false,
        }
    }

    /// False once fired or cancelled: the source can drop its watch.
    pub fn is_waiting(&self) -> bool {
        lock(&self.continuation).is_some()
    }
}

impl<V: Send> Pending for Slot<V> {
    fn cancel(&self) -> bool {
        self.take().is_some()
    }

    fn is_pending(&self) -> bool {
        self.is_waiting()
    }
}

/// Parks until an event source fires the slot `register` is given, then
/// continues with `then` and the event's value. `register` runs on the
/// parking thread and must not block; it may fire the slot at once.
pub fn park<V, T>(
    register: impl FnOnce(Arc<Slot<V>>) + Send + 'static,
    then: impl FnOnce(V) -> Step<T> + Send + 'static,
) -> Step<T>
where
    V: Send + 'static,
    T: Send + 'static,
{
    Ok(Flow::Parked(Parked {
        park: Box::new(move |resume: Resume<T>| {
            let slot = Arc::new(Slot {
                continuation: Mutex::new(Some(Box::new(move |value: V| {
                    resume(Box::new(move || then(value)))
                }))),
            });
            register(slot.clone());
            slot
        }),
    }))
}

/// Sequencing of steps, waiting or not: `then` runs once the value is
/// there (a failure skips it), `then_result` once the outcome is, whichever
/// it is, and is handed the `Result`.
pub trait Then<T> {
    fn then<U: Send + 'static>(self, f: impl FnOnce(T) -> Step<U> + Send + 'static) -> Step<U>;
    fn then_result<U: Send + 'static>(
        self,
        f: impl FnOnce(crate::Result<T>) -> Step<U> + Send + 'static,
    ) -> Step<U>;
}

impl<T: Send + 'static> Then<T> for Step<T> {
    fn then<U: Send + 'static>(self, f: impl FnOnce(T) -> Step<U> + Send + 'static) -> Step<U> {
        match self? {
            Flow::Ready(value) => f(value),
            Flow::Parked(parked) => Ok(Flow::Parked(Parked {
                park: Box::new(move |resume: Resume<U>| {
                    parked.park(Box::new(move |rest: Thunk<T>| {
                        resume(Box::new(move || rest().then(f)))
                    }))
                }),
            })),
        }
    }

    fn then_result<U: Send + 'static>(
        self,
        f: impl FnOnce(crate::Result<T>) -> Step<U> + Send + 'static,
    ) -> Step<U> {
        match self {
            Err(e) => f(Err(e)),
            Ok(Flow::Ready(value)) => f(Ok(value)),
            Ok(Flow::Parked(parked)) => Ok(Flow::Parked(Parked {
                park: Box::new(move |resume: Resume<U>| {
                    parked.park(Box::new(move |rest: Thunk<T>| {
                        resume(Box::new(move || rest().then_result(f)))
                    }))
                }),
            })),
        }
    }
}

/// What a caught panic said, for the log line.
pub fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// The Internal answer for work `what` that panicked, logged with the
/// panic's message.
pub fn panicked(what: &str, panic: &(dyn Any + Send)) -> crate::Error {
    log::error!("{what} panicked: {}", panic_message(panic));
    crate::Error::Internal(format!("{what}: internal error"))
}

/// Runs `work`, and each continuation it parks, with panics caught: a
/// panic anywhere in the flow ends it with Internal (logged with the panic
/// message) instead of unwinding through whoever drives it, so the owner of
/// the flow can answer its callers and clear its state.
pub fn guarded<T: Send + 'static>(what: &'static str, work: impl FnOnce() -> Step<T>) -> Step<T> {
    match catch_unwind(AssertUnwindSafe(work)) {
        Err(panic) => Err(panicked(what, &*panic)),
        Ok(Ok(Flow::Parked(parked))) => Ok(Flow::Parked(Parked {
            park: Box::new(move |resume: Resume<T>| {
                parked.park(Box::new(move |rest: Thunk<T>| {
                    resume(Box::new(move || guarded(what, rest)))
                }))
            }),
        })),
        Ok(other) => other,
    }
}

/// A value handed from one flow to another exactly once, in either order:
/// the receiver may park on it before or after the sender sends.
pub struct Handoff<V> {
    state: Mutex<HandoffState<V>>,
}

enum HandoffState<V> {
    Empty,
    Sent(V),
    Waiting(Arc<Slot<V>>),
    Done,
}

impl<V: Send + 'static> Handoff<V> {
    pub fn new() -> Arc<Handoff<V>> {
        Arc::new(Handoff {
            state: Mutex::new(HandoffState::Empty),
        })
    }

    /// Delivers `value`; false when the receiver parked and then left, so
    /// nobody will see it.
    pub fn send(&self, value: V) -> bool {
        let mut state = lock(&self.state);
        match std::mem::replace(&mut *state, HandoffState::Done) {
            HandoffState::Empty => {
                *state = HandoffState::Sent(value);
                true
            }
            HandoffState::Waiting(slot) => {
                drop(state);
                slot.fire(value)
            }
            HandoffState::Sent(_) | HandoffState::Done => false,
        }
    }

    /// Parks the receiving flow until the value is sent.
    pub fn receive<T: Send + 'static>(
        self: Arc<Self>,
        then: impl FnOnce(V) -> Step<T> + Send + 'static,
    ) -> Step<T> {
        park(
            move |slot: Arc<Slot<V>>| {
                let mut state = lock(&self.state);
                match std::mem::replace(&mut *state, HandoffState::Done) {
                    HandoffState::Sent(value) => {
                        drop(state);
                        slot.fire(value);
                    }
                    HandoffState::Empty => *state = HandoffState::Waiting(slot),
                    HandoffState::Waiting(_) | HandoffState::Done => {}
                }
            },
            then,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// What parking a step left: the channel its rest arrives on, the
    /// driver's hold on it, or its outcome when it did not park.
    type Run<T> = (
        mpsc::Receiver<Thunk<T>>,
        Option<Arc<dyn Pending>>,
        Option<crate::Result<T>>,
    );

    /// Where a test keeps the slot an event source would keep.
    type Kept<V> = Arc<Mutex<Option<Arc<Slot<V>>>>>;

    fn run<T: Send + 'static>(step: Step<T>) -> Run<T> {
        let (tx, rx) = mpsc::channel::<Thunk<T>>();
        match step {
            Err(e) => (rx, None, Some(Err(e))),
            Ok(Flow::Ready(v)) => (rx, None, Some(Ok(v))),
            Ok(Flow::Parked(p)) => {
                let pending = p.park(Box::new(move |thunk| tx.send(thunk).unwrap()));
                (rx, Some(pending), None)
            }
        }
    }

    #[test]
    fn ready_steps_chain_without_parking() {
        let step = done(2).then(|n| done(n * 10)).then(|n| done(n + 1));
        let (_, pending, result) = run(step);
        assert!(pending.is_none());
        assert_eq!(result, Some(Ok(21)));
    }

    #[test]
    fn a_parked_step_resumes_with_the_event_and_the_chain_after_it() {
        let keep: Kept<i32> = Arc::default();
        let kept = keep.clone();
        let step = park(
            move |slot| *kept.lock().unwrap() = Some(slot),
            |n: i32| done(n + 1),
        )
        .then(|n| done(n * 2));
        let (woken, pending, result) = run(step);
        assert!(result.is_none());
        let pending = pending.unwrap();
        assert!(pending.is_pending());
        assert!(woken.try_recv().is_err(), "nothing runs before the event");
        let slot = keep.lock().unwrap().take().unwrap();
        assert!(slot.fire(4));
        assert!(!pending.is_pending());
        let rest = woken.try_recv().expect("the event hands back the rest");
        match rest() {
            Ok(Flow::Ready(v)) => assert_eq!(v, 10),
            _ => panic!("the rest is ready"),
        }
        assert!(!slot.fire(5), "a slot fires once");
    }

    #[test]
    fn cancelling_drops_the_continuation_and_what_it_holds() {
        let held = Arc::new(());
        let guard = held.clone();
        let keep: Kept<()> = Arc::default();
        let kept = keep.clone();
        let step = park(
            move |slot| *kept.lock().unwrap() = Some(slot),
            move |()| {
                drop(guard);
                done(())
            },
        );
        let (woken, pending, _) = run(step);
        assert_eq!(Arc::strong_count(&held), 2);
        assert!(pending.as_ref().unwrap().cancel());
        assert_eq!(
            Arc::strong_count(&held),
            1,
            "the guard went with the continuation"
        );
        let slot = keep.lock().unwrap().take().unwrap();
        assert!(!slot.is_waiting());
        assert!(!slot.fire(()));
        assert!(woken.try_recv().is_err());
    }

    #[test]
    fn then_result_sees_failures_of_parked_steps_too() {
        let keep: Kept<crate::Result<i32>> = Arc::default();
        let kept = keep.clone();
        let step = park(
            move |slot| *kept.lock().unwrap() = Some(slot),
            |r: crate::Result<i32>| r.map(Flow::Ready),
        )
        .then(|n| done(n + 1))
        .then_result(|r| done(r.is_err()));
        let (woken, _, _) = run(step);
        let slot = keep.lock().unwrap().take().unwrap();
        slot.fire(Err(crate::Error::Unavailable("down".into())));
        assert!(matches!(woken.try_recv().unwrap()(), Ok(Flow::Ready(true))));
    }

    #[test]
    fn a_guarded_flow_turns_panics_into_internal_even_after_parking() {
        let now: Step<i32> = guarded("now", || panic!("at once"));
        assert!(matches!(now, Err(crate::Error::Internal(_))));
        let keep: Kept<i32> = Arc::default();
        let kept = keep.clone();
        let step = guarded("later", move || {
            park(
                move |slot| *kept.lock().unwrap() = Some(slot),
                |n: i32| -> Step<i32> {
                    if n > 0 {
                        panic!("in the continuation: {n}");
                    }
                    done(n)
                },
            )
        });
        let (woken, _, _) = run(step);
        keep.lock().unwrap().take().unwrap().fire(3);
        let rest = woken.try_recv().unwrap();
        assert!(matches!(rest(), Err(crate::Error::Internal(m)) if m.contains("later")));
        let e = panicked("x", &String::from("boom"));
        assert_eq!(e, crate::Error::Internal("x: internal error".into()));
        assert_eq!(panic_message(&"text"), "text");
    }

    #[test]
    fn errors_skip_the_rest() {
        let step: Step<i32> = Err(crate::Error::NotFound("x".into()));
        let step = step.then(|_| -> Step<i32> { panic!("must not run") });
        assert!(matches!(step, Err(crate::Error::NotFound(_))));
    }

    #[test]
    fn a_handoff_delivers_in_either_order() {
        let early = Handoff::new();
        assert!(early.send(7));
        let (woken, _, _) = run(early.clone().receive(|v: i32| done(v)));
        assert!(matches!(woken.try_recv().unwrap()(), Ok(Flow::Ready(7))));

        let late = Handoff::new();
        let (woken, pending, _) = run(late.clone().receive(|v: i32| done(v)));
        assert!(pending.unwrap().is_pending());
        assert!(late.send(8));
        assert!(matches!(woken.try_recv().unwrap()(), Ok(Flow::Ready(8))));

        let left = Handoff::new();
        let (_, pending, _) = run(left.clone().receive(|v: i32| done(v)));
        assert!(pending.unwrap().cancel());
        assert!(!left.send(9), "a receiver that left sees nothing");
    }
}
