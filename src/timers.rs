//! One thread that runs short callbacks when they fall due: the bound on
//! a call's wait for a job it joined, a job's pause before it tries again.
//! A callback must not block: it fires a flow's slot or hands a value
//! over, and the flow's driver runs the rest elsewhere. Nothing here knows
//! a call, a job or Linode.

use crate::flow::{park, Slot, Step};
use crate::mutex::{lock, wait_timeout};
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// The timer thread's queue; cheap to clone.
#[derive(Clone)]
pub struct Timers {
    shared: Arc<Shared>,
}

struct Shared {
    due: Mutex<Queue>,
    changed: Condvar,
}

#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Due>,
    next_seq: u64,
}

struct Due {
    at: Instant,
    seq: u64,
    run: Box<dyn FnOnce() + Send>,
}

// Earliest first in the max-heap; `seq` keeps equal instants in order.
impl Ord for Due {
    fn cmp(&self, other: &Due) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Due) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Due {
    fn eq(&self, other: &Due) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Due {}

impl Default for Timers {
    fn default() -> Timers {
        Timers::new()
    }
}

impl Timers {
    /// Starts the thread; it ends once the last clone is dropped.
    pub fn new() -> Timers {
        let shared = Arc::new(Shared {
            due: Mutex::default(),
            changed: Condvar::new(),
        });
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("timers".into())
            .spawn(move || run(weak))
            .expect("spawn the timer thread");
        Timers { shared }
    }

    /// Runs `run` on the timer thread at `at` (at once when it is past).
    pub fn at(&self, at: Instant, run: impl FnOnce() + Send + 'static) {
        let mut queue = lock(&self.shared.due);
        let seq = queue.next_seq;
        queue.next_seq += 1;
        queue.heap.push(Due {
            at,
            seq,
            run: Box::new(run),
        });
        drop(queue);
        self.shared.changed.notify_one();
    }

    /// Parks for `pause`, then continues with `then`: no thread is held.
    pub fn after<T: Send + 'static>(
        &self,
        pause: Duration,
        then: impl FnOnce() -> Step<T> + Send + 'static,
    ) -> Step<T> {
        let timers = self.clone();
        park(
            move |slot: Arc<Slot<()>>| {
                timers.at(Instant::now() + pause, move || {
                    slot.fire(());
                })
            },
            move |()| then(),
        )
    }
}

/// Runs what falls due, sleeping until the next; holds the queue only
/// weakly between rounds.
fn run(weak: Weak<Shared>) {
    loop {
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let mut queue = lock(&shared.due);
        let now = Instant::now();
        let mut ready = Vec::new();
        while queue.heap.peek().is_some_and(|d| d.at <= now) {
            ready.extend(queue.heap.pop());
        }
        if ready.is_empty() {
            // Idle, it still wakes now and then to notice it was dropped.
            let wait = queue
                .heap
                .peek()
                .map_or(Duration::from_secs(1), |d| {
                    d.at.saturating_duration_since(now)
                })
                .min(Duration::from_secs(1));
            drop(wait_timeout(&shared.changed, queue, wait));
            continue;
        }
        drop(queue);
        drop(shared);
        for due in ready {
            (due.run)();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn callbacks_run_in_due_order_whatever_order_they_were_set_in() {
        let timers = Timers::new();
        let (tx, rx) = mpsc::channel();
        let start = Instant::now();
        for (n, ms) in [(3, 60), (1, 20), (2, 40)] {
            let tx = tx.clone();
            timers.at(start + Duration::from_millis(ms), move || {
                tx.send(n).unwrap()
            });
        }
        let got: Vec<i32> = (0..3)
            .map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap())
            .collect();
        assert_eq!(got, [1, 2, 3]);
        assert!(start.elapsed() >= Duration::from_millis(60));
    }

    #[test]
    fn a_past_instant_runs_at_once() {
        let timers = Timers::new();
        let (tx, rx) = mpsc::channel();
        timers.at(Instant::now() - Duration::from_secs(1), move || {
            tx.send(()).unwrap()
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
    }
}
