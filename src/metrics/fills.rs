//! The recording functions of the families about fills of directory
//! volumes (restores and clones): their copies, their jobs by phase, how
//! long their temporary clones took, and the fills ended for want of a
//! claim. The families themselves are declared with all the others.

use super::{
    single, CLONE_ACTIVE, DEV_NFS_OPERATIONS, FILLS, FILLS_ABANDONED, RESTORE_COPIED_BYTES,
    RESTORE_COPIED_FILES, RESTORE_COPIES, RESTORE_PROGRESS_BYTES, RESTORE_PROGRESS_ENTRIES,
    RESTORE_PROGRESS_FILES, RESTORE_RUNNING,
};
use std::sync::Arc;
use std::time::Duration;

/// How a restore's copy ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyOutcome {
    Ok,
    Failed,
    Stopped,
}

const COPY_OUTCOMES: [&str; 3] = ["ok", "failed", "stopped"];

/// Why a fill was ended for want of its claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FillAbandoned {
    ClaimDeleted,
    ClaimReplaced,
}

const ABANDONED: [&str; 2] = ["claim_deleted", "claim_replaced"];

/// The phases a fill job shows, every one shown (at zero when none is in it).
const PHASES: [&str; 3] = ["starting", "cloning", "copying"];

/// The series of the controller's rare fill events, at zero from the start.
pub(super) fn touch() {
    for outcome in COPY_OUTCOMES {
        RESTORE_COPIES.touch(&[outcome]);
    }
    RESTORE_COPIED_FILES.touch(&[]);
    RESTORE_COPIED_BYTES.touch(&[]);
    for reason in ABANDONED {
        FILLS_ABANDONED.touch(&[reason]);
    }
    CLONE_ACTIVE.touch(&[]);
}

/// A restore's copy ended, having written `files` files and `bytes` bytes.
pub fn restore_copy_ended(outcome: CopyOutcome, files: u64, bytes: u64) {
    RESTORE_COPIES.inc(&[COPY_OUTCOMES[outcome as usize]]);
    RESTORE_COPIED_FILES.add(&[], files);
    RESTORE_COPIED_BYTES.add(&[], bytes);
}

/// What the copies running now have done, all together.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunningCopies {
    pub copies: usize,
    pub files: u64,
    pub bytes: u64,
    pub entries: u64,
}

/// The copies running now, and what they did so far: `read` answers at
/// each scrape, `None` once the controller is gone.
pub fn watch_restore_copies(read: impl Fn() -> Option<RunningCopies> + Send + Sync + 'static) {
    let read = Arc::new(read);
    let (r1, r2, r3, r4) = (read.clone(), read.clone(), read.clone(), read);
    RESTORE_RUNNING.register(single(move || r1().map(|r| r.copies)));
    RESTORE_PROGRESS_FILES.register(single(move || r2().map(|r| r.files as usize)));
    RESTORE_PROGRESS_BYTES.register(single(move || r3().map(|r| r.bytes as usize)));
    RESTORE_PROGRESS_ENTRIES.register(single(move || r4().map(|r| r.entries as usize)));
}

/// The fill jobs running now, by phase name: `read` answers each job's
/// phase at each scrape, `None` once the controller is gone.
pub fn watch_fills(read: impl Fn() -> Option<Vec<&'static str>> + Send + Sync + 'static) {
    FILLS.register(Box::new(move |emit| {
        let Some(phases) = read() else {
            return false;
        };
        for phase in PHASES {
            let n = phases.iter().filter(|p| **p == phase).count();
            emit(&[phase], n as f64);
        }
        true
    }));
}

/// The operations dev mode's emulated NFS servers served (the copies of
/// restores read and write through them): `read` answers them by name at
/// each scrape.
pub fn watch_dev_nfs(read: impl Fn() -> Vec<(&'static str, u64)> + Send + Sync + 'static) {
    DEV_NFS_OPERATIONS.register(Box::new(move |emit| {
        for (op, n) in read() {
            emit(&[op], n as f64);
        }
        true
    }));
}

/// A temporary clone became active `took` after this process asked for it.
pub fn restore_clone_active(took: Duration) {
    CLONE_ACTIVE.observe(&[], took.as_secs_f64());
}

/// A fill was ended for want of its claim.
pub fn fill_abandoned(reason: FillAbandoned) {
    FILLS_ABANDONED.inc(&[ABANDONED[reason as usize]]);
}
