//! The queue of directory snapshot requests per shared parent: who is
//! still arriving, who waits for the next batch, and the batch under way
//! that late requests for its members may join. State only: it neither
//! POSTs nor writes records (`kind::directory::snapshots::batches` runs the batches it hands out).

use crate::controller::kind::directory::parent::records::{Record, Shelf};
use crate::flow::Handoff;
use crate::handles::{DirName, VolumeId};
use crate::linode::Snapshot;
use crate::mutex::lock;
use crate::Error;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where a member's answer goes: the parent snapshot, as POSTed.
pub type Answer = Arc<Handoff<Result<Snapshot, Error>>>;

/// One record a batch makes: its shelf, entry and contents (the batch
/// and snapshot fields are the runner's to fill in).
#[derive(Debug, Clone)]
pub struct Member {
    pub shelf: Shelf,
    pub entry: DirName,
    pub record: Record,
}

/// A request: the records it needs in one parent snapshot (one for a
/// snapshot, the group's and its members' for a group), and its answer.
pub(crate) struct Queued {
    pub(crate) members: Vec<Member>,
    pub(crate) answer: Answer,
}

/// How long the first request of a batch waits, at most, for requests
/// still being checked before the batch is taken without them.
const MAX_GATHER: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Parent {
    /// Requests being checked: they arrived, and will be queued or
    /// withdrawn. The next batch waits for them (up to `MAX_GATHER`).
    arriving: usize,
    /// Requests for the next batch, and since when the first waits.
    waiting: Vec<Queued>,
    since: Option<Instant>,
    /// Whether a runner is at work on this parent.
    running: bool,
    /// Where the parent is mounted, for the runner.
    root: Option<Arc<PathBuf>>,
    under_way: Option<UnderWay>,
}

/// The batch under way: its label, its members, and who else waits for
/// it (requests that joined after it was taken).
struct UnderWay {
    label: String,
    members: Vec<(Shelf, DirName)>,
    joiners: Vec<Answer>,
}

impl Parent {
    /// Whether a runner should start now: none runs, something waits, and
    /// nothing is still arriving (or the first has waited long enough).
    fn should_start(&mut self) -> bool {
        let start = !self.running
            && !self.waiting.is_empty()
            && (self.arriving == 0 || self.since.is_some_and(|t| t.elapsed() >= MAX_GATHER));
        if start {
            self.running = true;
        }
        start
    }

    fn idle(&self) -> bool {
        !self.running && self.arriving == 0 && self.waiting.is_empty()
    }
}

/// The batches of every parent.
#[derive(Default)]
pub struct SnapshotBatches {
    parents: Mutex<HashMap<VolumeId, Parent>>,
}

impl SnapshotBatches {
    pub(crate) fn arrive(&self, parent: VolumeId) {
        lock(&self.parents).entry(parent).or_default().arriving += 1;
    }

    /// A request that arrived leaves without queuing: whether a runner
    /// must start now, and where the parent is mounted.
    pub(crate) fn withdraw(&self, parent: VolumeId) -> Option<Arc<PathBuf>> {
        let mut parents = lock(&self.parents);
        let p = parents.get_mut(&parent)?;
        p.arriving -= 1;
        if p.idle() {
            parents.remove(&parent);
            return None;
        }
        if p.should_start() {
            return p.root.clone();
        }
        None
    }

    /// Queues `members` of a request that arrived for the next batch of
    /// `parent`: where the answer comes, and whether this call must start
    /// a runner.
    pub(crate) fn enqueue(
        &self,
        parent: VolumeId,
        root: PathBuf,
        members: Vec<Member>,
    ) -> (Answer, Option<Arc<PathBuf>>) {
        let answer = Handoff::new();
        let mut parents = lock(&self.parents);
        let p = parents.entry(parent).or_default();
        p.arriving -= 1;
        p.waiting.push(Queued {
            members,
            answer: answer.clone(),
        });
        p.since.get_or_insert_with(Instant::now);
        let root = p.root.get_or_insert_with(|| Arc::new(root)).clone();
        let start = p.should_start().then_some(root);
        (answer, start)
    }

    /// Joins the batch under way on `parent` if it holds `(shelf, entry)`
    /// under `label`: where its answer will come.
    pub fn join(
        &self,
        parent: VolumeId,
        label: &str,
        shelf: Shelf,
        entry: &DirName,
    ) -> Option<Answer> {
        let mut parents = lock(&self.parents);
        let batch = parents.get_mut(&parent)?.under_way.as_mut()?;
        if batch.label != label || !batch.members.iter().any(|(s, e)| *s == shelf && e == entry) {
            return None;
        }
        let answer = Handoff::new();
        batch.joiners.push(answer.clone());
        Some(answer)
    }

    /// The next batch of `parent`, marked under way; `None` (the runner
    /// stops) when nothing waits, or when requests still arriving should
    /// join it (the last of them starts the next runner).
    pub(crate) fn take(&self, parent: VolumeId, label: &str) -> Option<Vec<Queued>> {
        let mut parents = lock(&self.parents);
        let p = parents.get_mut(&parent)?;
        p.running = false;
        if !p.should_start() {
            if p.idle() {
                parents.remove(&parent);
            }
            return None;
        }
        let batch = std::mem::take(&mut p.waiting);
        p.since = None;
        let members = batch
            .iter()
            .flat_map(|q| q.members.iter().map(|m| (m.shelf, m.entry.clone())))
            .collect();
        p.under_way = Some(UnderWay {
            label: label.to_string(),
            members,
            joiners: Vec::new(),
        });
        Some(batch)
    }

    /// Ends the batch under way: who joined it.
    pub(crate) fn finish(&self, parent: VolumeId) -> Vec<Answer> {
        let mut parents = lock(&self.parents);
        parents
            .get_mut(&parent)
            .and_then(|p| p.under_way.take())
            .map(|batch| batch.joiners)
            .unwrap_or_default()
    }
}
