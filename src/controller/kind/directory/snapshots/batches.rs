//! Batches of directory snapshots: every request for a snapshot of a
//! directory of one shared parent that arrives while no parent snapshot
//! is being POSTed for it waits for the next one, and all of them share
//! that one POST. A request never shares a POST made before it arrived
//! (each snapshot holds every write made before its request): the batch
//! a runner takes is closed before its POST, and what arrives meanwhile
//! forms the next. Each batch first records its members on the parent
//! (`records`: the batch directory, then one reference and one record per
//! member), then POSTs, then writes the parent snapshot's id into the
//! records, and answers every member alike. A request for a member of a
//! batch still under way here joins it. Runs on the worker pool, one
//! batch after another per parent, holding no caller's worker.

use super::records::{self, Record, Shelf, BATCH_PREFIX};
use crate::controller::kind::post_snapshot;
use crate::controller::lock_keys::Doubt;
use crate::controller::{tags, Controller};
use crate::flow::{done, guarded, Flow, Handoff, Step, Then};
use crate::handles::{DirName, VolumeId};
use crate::linode::Snapshot;
use crate::mutex::lock;
use crate::Error;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
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
struct Queued {
    members: Vec<Member>,
    answer: Answer,
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
    fn arrive(&self, parent: VolumeId) {
        lock(&self.parents).entry(parent).or_default().arriving += 1;
    }

    /// A request that arrived leaves without queuing: whether a runner
    /// must start now, and where the parent is mounted.
    fn withdraw(&self, parent: VolumeId) -> Option<Arc<PathBuf>> {
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
    fn enqueue(
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
    fn take(&self, parent: VolumeId, label: &str) -> Option<Vec<Queued>> {
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
    fn finish(&self, parent: VolumeId) -> Vec<Answer> {
        let mut parents = lock(&self.parents);
        parents
            .get_mut(&parent)
            .and_then(|p| p.under_way.take())
            .map(|batch| batch.joiners)
            .unwrap_or_default()
    }
}

/// A label no other batch of any controller uses: the moment, this
/// process and a count.
fn new_label() -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!(
        "{BATCH_PREFIX}{millis}-{}-{}",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A request for a part of the next parent snapshot of a parent, from
/// the moment it arrives (before its checks, so that the batch it joins
/// waits for it) until it is queued (`request`) or dropped.
pub struct Arrival {
    c: Arc<Controller>,
    parent: VolumeId,
    queued: bool,
}

/// Counts a request for a part of the next parent snapshot of `parent`
/// as arriving.
pub fn arrive(c: &Arc<Controller>, parent: VolumeId) -> Arrival {
    c.dir_snapshots.arrive(parent);
    Arrival {
        c: c.clone(),
        parent,
        queued: false,
    }
}

impl Arrival {
    /// Asks for `members` in the next parent snapshot (the parent is
    /// mounted at `root`), parked until that snapshot's POST is answered.
    pub fn request(mut self, root: PathBuf, members: Vec<Member>) -> Step<Snapshot> {
        self.queued = true;
        let (answer, start) = self.c.dir_snapshots.enqueue(self.parent, root, members);
        if let Some(root) = start {
            start_runner(&self.c, self.parent, root);
        }
        wait(answer)
    }
}

impl Drop for Arrival {
    fn drop(&mut self) {
        if self.queued {
            return;
        }
        if let Some(root) = self.c.dir_snapshots.withdraw(self.parent) {
            start_runner(&self.c, self.parent, root);
        }
    }
}

fn start_runner(c: &Arc<Controller>, parent: VolumeId, root: Arc<PathBuf>) {
    c.rpc
        .detach("directory snapshot batch", run(c.clone(), parent, root));
}

/// Parks until `answer` arrives.
pub fn wait(answer: Answer) -> Step<Snapshot> {
    answer.receive(|r: Result<Snapshot, Error>| r.map(Flow::Ready))
}

/// Takes and makes the batches of `parent`, one after another, until no
/// request waits.
fn run(c: Arc<Controller>, parent: VolumeId, root: Arc<PathBuf>) -> Step<()> {
    let label = new_label();
    let Some(batch) = c.dir_snapshots.take(parent, &label) else {
        return done(());
    };
    let batch = Arc::new(batch);
    let (taking, at, members) = (c.clone(), root.clone(), batch.clone());
    // A panic ends only this batch: its callers are answered (Internal)
    // and the next batch still runs.
    guarded("directory snapshot batch", move || {
        done(make(&taking, parent, &at, &label, &members))
    })
    .then_result(move |made| {
        let result = made.and_then(|r| r);
        let joiners = c.dir_snapshots.finish(parent);
        for answer in batch.iter().map(|q| &q.answer).chain(&joiners) {
            // A caller that left (cancelled, deadline) is simply not told.
            answer.send(result.clone());
        }
        run(c, parent, root)
    })
}

/// Records the batch's members, POSTs the parent snapshot and records its
/// id. A POST that surely failed takes its records back, so nothing is
/// left behind; one that may yet land leaves them for a retry to adopt.
fn make(
    c: &Controller,
    parent: VolumeId,
    root: &std::path::Path,
    label: &str,
    batch: &[Queued],
) -> Result<Snapshot, Error> {
    let members: Vec<&Member> = batch.iter().flat_map(|q| &q.members).collect();
    let mut recorded = Vec::with_capacity(members.len());
    let wrote = (|| -> Result<(), Error> {
        records::open_batch(root, label)?;
        for m in &members {
            records::hold(root, label, m.shelf, &m.entry)?;
            let record = Record {
                batch: label.to_string(),
                snapshot: None,
                ..m.record.clone()
            };
            records::write(root, m.shelf, &m.entry, &record)?;
            recorded.push((*m, record));
        }
        Ok(())
    })();
    let posted = wrote.and_then(|()| {
        post_snapshot(
            c,
            parent,
            label,
            &[tags::DIRECTORY_SNAPSHOTS.to_string()],
            || {
                Ok(c.cloud
                    .list_snapshots(parent.space, parent.filesystem)?
                    .into_iter()
                    .find(|s| s.label == label && tags::is_directory_snapshots(s)))
            },
        )
    });
    let snapshot = match posted {
        Ok(s) => s,
        Err(e) => {
            let doubt = Doubt::Snapshot {
                source: parent,
                label: label.to_string(),
            };
            if !c.in_doubt.is_recorded(&doubt) {
                take_back(root, label, &members);
            }
            return Err(e);
        }
    };
    for (m, record) in recorded {
        let record = Record {
            snapshot: Some(snapshot.id),
            ..record
        };
        records::write(root, m.shelf, &m.entry, &record)?;
    }
    log::info!(
        "NFS snapshot {}/{}/{} (\"{label}\") of shared filesystem {parent} holds {} directory snapshot record(s)",
        parent.space,
        parent.filesystem,
        snapshot.id,
        members.len()
    );
    Ok(snapshot)
}

/// Removes what a failed batch recorded (best effort: what stays is found
/// by the next request for the entry, and a batch without a parent
/// snapshot costs nothing).
fn take_back(root: &std::path::Path, label: &str, members: &[&Member]) {
    for m in members {
        let undone = records::remove(root, m.shelf, &m.entry)
            .and_then(|()| records::release(root, label, m.shelf, &m.entry));
        if let Err(e) = undone {
            log::warn!("directory snapshot batch {label}: {e}");
        }
    }
    if let Err(e) = records::close_batch(root, label) {
        log::warn!("directory snapshot batch {label}: {e}");
    }
}
