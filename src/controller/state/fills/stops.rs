//! How a fill job's waits end early: the job's one current wait (for its
//! temporary clone to turn active, for a copy to end) is raced against a
//! stop, so a job whose volume is being deleted, or whose claim is gone,
//! ends now rather than when the backend or the copy next answers. What
//! the wait was for goes on by itself and is let go when it ends; nothing
//! here knows what a job waits for or why it stops.

use crate::flow::{done, Flow, Handoff, Step, Then};
use crate::mutex::lock;
use crate::rpc::Rpc;
use crate::Error;
use std::sync::{Arc, Mutex};

type Waker = Box<dyn FnOnce(Error) + Send>;

/// One job's stop: why it was stopped, and the wait it would wake.
#[derive(Default)]
pub struct Stop {
    why: Mutex<Option<Error>>,
    waker: Mutex<Option<Waker>>,
}

impl Stop {
    /// Stops the job for `why` (the first reason stays) and ends the wait
    /// it is in, if any, with that reason.
    pub fn stop(&self, why: Error) {
        {
            let mut first = lock(&self.why);
            if first.is_none() {
                *first = Some(why.clone());
            }
        }
        if let Some(wake) = lock(&self.waker).take() {
            wake(why);
        }
    }

    /// Why the job was stopped, once it was.
    pub fn why(&self) -> Option<Error> {
        lock(&self.why).clone()
    }

    /// `step`, driven on its own by `rpc`, unless the job is stopped first:
    /// then the reason, at once. A job waits on one step at a time.
    pub fn interruptible<T: Send + 'static>(
        &self,
        rpc: &Rpc,
        what: &'static str,
        step: Step<T>,
    ) -> Step<T> {
        let answer: Arc<Handoff<Result<T, Error>>> = Handoff::new();
        let woken = answer.clone();
        *lock(&self.waker) = Some(Box::new(move |why| {
            woken.send(Err(why));
        }));
        // Stopped before the waker was in place: nobody would wake it.
        if let Some(why) = self.why() {
            answer.send(Err(why));
        }
        let reached = answer.clone();
        rpc.detach(
            what,
            step.then_result(move |r| {
                reached.send(r);
                done(())
            }),
        );
        answer.receive(|r| r.map(Flow::Ready))
    }
}
