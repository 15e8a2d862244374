//! A call that may never return (a syscall stuck on an unreachable NFS
//! server), run on a helper thread and waited for at most a given time. The
//! one place the driver bounds such a call; it knows nothing about what the
//! call does, and never cancels it (a syscall stuck in the kernel cannot be).

use std::io;
use std::sync::mpsc;
use std::time::Duration;

/// Runs `work` on a thread of its own named `name` and waits at most `limit`
/// for it. `Ok(None)` when it has not returned by then: the thread is left
/// to finish, costing one thread. `Err` only when no thread could be started.
pub fn within<T: Send + 'static>(
    name: &str,
    limit: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> io::Result<Option<T>> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _ = tx.send(work());
        })?;
    Ok(rx.recv_timeout(limit).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_answers_what_returns_and_gives_up_on_what_does_not() {
        assert_eq!(
            within("test", Duration::from_secs(30), || 7).unwrap(),
            Some(7)
        );
        let (_never_sent, blocked) = mpsc::channel::<()>();
        let waited = within("test", Duration::from_millis(50), move || blocked.recv()).unwrap();
        assert!(waited.is_none());
    }
}
