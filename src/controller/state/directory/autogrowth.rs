//! What autogrow remembers of each directory volume between rounds, in
//! memory: a new leader starts afresh. Deciding is
//! `kind::directory::autogrow`'s.

use crate::handles::SubdirId;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// What autogrow remembers of each volume between rounds (in memory: a new
/// leader starts afresh, and may tell an event once more).
#[derive(Default)]
pub struct Autogrowth(pub(crate) Mutex<HashMap<SubdirId, Tracked>>);

#[derive(Debug, Default)]
pub(crate) struct Tracked {
    /// Seen in an earlier round of this process.
    pub(crate) seen: bool,
    /// The growth asked last, until the claim and the quota have caught up
    /// with it and a newer sample has come.
    pub(crate) asked: Option<Asked>,
    /// The claim's request and the parent's room when the resizer was last
    /// seen to find its resize infeasible.
    pub(crate) infeasible: Option<(Option<i64>, Option<i64>)>,
    /// Per kind of event, what it was last told about.
    pub(crate) told: BTreeMap<&'static str, String>,
}

#[derive(Debug)]
pub(crate) struct Asked {
    pub(crate) target: i64,
    pub(crate) sample: (Option<String>, Option<i64>),
}
