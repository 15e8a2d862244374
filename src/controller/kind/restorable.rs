//! What a restore from a snapshot copies, whichever kind took the
//! snapshot: plain values, so both kinds and the directory kind's fills
//! can name it without naming each other's logic.

use crate::handles::DirName;
use crate::linode::Snapshot;

/// What a restore from a snapshot copies: the Linode snapshot whose clone
/// holds it, the directory in that clone (none: its root), and the most
/// data it can hold (0: unknown).
#[derive(Debug, Clone)]
pub struct Restorable {
    pub snapshot: Snapshot,
    pub dir: Option<DirName>,
    pub size_bytes: i64,
}
