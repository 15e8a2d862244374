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

use crate::cluster_id::ClusterId;
use crate::controller::kind::directory::parent::records;
use crate::controller::kind::directory::parent::records::{Record, BATCH_PREFIX, CLUSTER_PART};
use crate::controller::kind::snapshot_post::post_snapshot;
use crate::controller::state::controller::Controller;
use crate::controller::state::directory::batches::{Answer, Member, Queued};
use crate::controller::state::lock_keys::Doubt;
use crate::controller::state::tags;
use crate::flow::{done, guarded, Flow, Step, Then};
use crate::handles::VolumeId;
use crate::linode::Snapshot;
use crate::Error;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A label no other batch of any controller uses: the moment, this
/// process, a count, and the cluster (so its records say whose they are,
/// `Record::is_of`).
fn new_label(cluster: &ClusterId) -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!(
        "{BATCH_PREFIX}{millis}-{}-{}{CLUSTER_PART}{cluster}",
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
    let label = new_label(c.marks.cluster());
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
            &c.marks.with_cluster(&[tags::DIRECTORY_SNAPSHOTS]),
            || {
                Ok(c.cloud
                    .list_snapshots(parent.space, parent.filesystem)?
                    .into_iter()
                    .find(|s| s.label == label && c.marks.is_directory_snapshots(s)))
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
