//! Taking a mutex whose holder may have panicked. Every lock in the driver
//! guards state that each critical section leaves consistent before it can
//! panic (maps, queues, counters), so a poisoned lock is taken as it is
//! rather than turning one panic into a panic of every later caller. The
//! only place that decides this; it knows nothing about what is locked.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// `m.lock()`, poison ignored.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `cv.wait(guard)`, poison ignored.
pub fn wait<'a, T>(cv: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(guard).unwrap_or_else(PoisonError::into_inner)
}

/// `cv.wait_timeout(guard, timeout)`, poison ignored; true when it timed out.
pub fn wait_timeout<'a, T>(
    cv: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> (MutexGuard<'a, T>, bool) {
    let (guard, result) = cv
        .wait_timeout(guard, timeout)
        .unwrap_or_else(PoisonError::into_inner);
    (guard, result.timed_out())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_poisoned_lock_is_still_taken() {
        let m = Arc::new(Mutex::new(1));
        let held = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = held.lock().unwrap();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        *lock(&m) += 1;
        assert_eq!(*lock(&m), 2);
    }

    #[test]
    fn a_wait_times_out() {
        let (m, cv) = (Mutex::new(()), Condvar::new());
        let (guard, timed_out) = wait_timeout(&cv, lock(&m), Duration::from_millis(1));
        drop(guard);
        assert!(timed_out);
    }
}
