//! What makes the FUSE mount behave like a server across a network: the
//! round-trip latency and the shared bandwidth every reply waits for, the
//! switch that hangs the server, and the counts of operations served (per
//! server and for the whole process). It knows nothing about what an
//! operation does or about the backing directory.

use super::abi::{op_name, OP_NAMES};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long a held request sleeps between looks at whether its connection
/// is gone, so a hung server's threads still end with the mount.
const HOLD_POLL: Duration = Duration::from_millis(100);

static TOTALS: Counts = Counts::new();
static HUNG_ALL: AtomicBool = AtomicBool::new(false);
/// Both switches wake the held requests through this one pair; the mutex
/// guards nothing but the wait itself.
static HOLD: Mutex<()> = Mutex::new(());
static RELEASED: Condvar = Condvar::new();

/// Operations served, by opcode.
pub(super) struct Counts([AtomicU64; OP_NAMES.len()]);

impl Counts {
    pub(super) const fn new() -> Self {
        Counts([const { AtomicU64::new(0) }; OP_NAMES.len()])
    }

    fn add(&self, opcode: u32) {
        self.0[slot(opcode)].fetch_add(1, Ordering::Relaxed);
    }

    /// The opcodes counted at least once, by name, sorted by name.
    pub(super) fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let mut out: Vec<(&'static str, u64)> = Vec::new();
        for (i, count) in self.0.iter().enumerate() {
            let n = count.load(Ordering::Relaxed);
            if n > 0 {
                out.push((op_name(i as u32), n));
            }
        }
        out.sort_unstable_by_key(|&(name, _)| name);
        out
    }
}

/// Requests with an opcode the protocol does not name share slot 0, whose
/// name is "unknown".
fn slot(opcode: u32) -> usize {
    let i = opcode as usize;
    if i < OP_NAMES.len() && !OP_NAMES[i].is_empty() {
        i
    } else {
        0
    }
}

pub(super) fn totals() -> Vec<(&'static str, u64)> {
    TOTALS.snapshot()
}

pub(super) fn set_hung_all(on: bool) {
    HUNG_ALL.store(on, Ordering::SeqCst);
    wake_held();
}

fn wake_held() {
    // Taking the lock orders the store before any waiter's next check, so
    // no waiter misses the change between checking and sleeping.
    drop(lock(&HOLD));
    RELEASED.notify_all();
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One server's side of the network: its latency and bandwidth, its hang
/// switch and its counts.
pub(super) struct Link {
    latency: Duration,
    bandwidth: u64,
    /// When the link is next free: transfers queue on it one after another.
    free_at: Mutex<Instant>,
    hung: AtomicBool,
    pub(super) counts: Counts,
}

impl Link {
    pub(super) fn new(latency: Duration, bandwidth: u64) -> Self {
        Link {
            latency,
            bandwidth,
            free_at: Mutex::new(Instant::now()),
            hung: AtomicBool::new(false),
            counts: Counts::new(),
        }
    }

    pub(super) fn set_hung(&self, on: bool) {
        self.hung.store(on, Ordering::SeqCst);
        wake_held();
    }

    fn is_hung(&self) -> bool {
        self.hung.load(Ordering::SeqCst) || HUNG_ALL.load(Ordering::SeqCst)
    }

    /// Holds a request taken while the server is hung until it is released.
    /// False when the connection ended meanwhile (the mount is gone), so the
    /// worker can stop instead of holding forever.
    pub(super) fn hold_while_hung(&self, device: BorrowedFd<'_>) -> bool {
        if !self.is_hung() {
            return true;
        }
        let mut guard = lock(&HOLD);
        while self.is_hung() {
            guard = RELEASED
                .wait_timeout(guard, HOLD_POLL)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            if disconnected(device) {
                return false;
            }
        }
        true
    }

    /// Counts a request as served, here and in the process's totals.
    pub(super) fn count(&self, opcode: u32) {
        self.counts.add(opcode);
        TOTALS.add(opcode);
    }

    /// Waits as the reply to a request would travel back: behind the
    /// transfers already on the link when `payload` bytes ride it, then one
    /// round trip.
    pub(super) fn deliver(&self, payload: u64) {
        let mut until = Instant::now();
        if payload > 0 && self.bandwidth > 0 {
            let nanos = u128::from(payload) * 1_000_000_000 / u128::from(self.bandwidth);
            let span = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
            let mut free_at = lock(&self.free_at);
            let start = (*free_at).max(until);
            *free_at = start.checked_add(span).unwrap_or(start);
            until = *free_at;
        }
        until += self.latency;
        let now = Instant::now();
        if until > now {
            std::thread::sleep(until - now);
        }
    }
}

/// True once the kernel has ended the connection (unmount, abort): the
/// device then polls as an error.
fn disconnected(device: BorrowedFd<'_>) -> bool {
    let mut poll = libc::pollfd {
        fd: device.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, and a zero timeout never blocks.
    let n = unsafe { libc::poll(&mut poll, 1, 0) };
    n > 0 && poll.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_named_sorted_and_skip_zeroes() {
        let counts = Counts::new();
        counts.add(3);
        counts.add(1);
        counts.add(3);
        counts.add(7);
        counts.add(999);
        assert_eq!(
            counts.snapshot(),
            vec![("getattr", 2), ("lookup", 1), ("unknown", 2)]
        );
    }

    #[test]
    fn transfers_queue_behind_each_other_on_the_link() {
        // 1 MB at 10 MB/s is 100 ms; two at once end 200 ms after start.
        let link = std::sync::Arc::new(Link::new(Duration::ZERO, 10_000_000));
        let start = Instant::now();
        let other = {
            let link = link.clone();
            std::thread::spawn(move || link.deliver(1_000_000))
        };
        link.deliver(1_000_000);
        other.join().unwrap();
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(200), "{took:?}");
    }

    #[test]
    fn latency_is_added_to_every_reply() {
        let link = Link::new(Duration::from_millis(20), 0);
        let start = Instant::now();
        link.deliver(0);
        assert!(start.elapsed() >= Duration::from_millis(20));
    }
}
