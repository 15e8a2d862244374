//! What the driver records of directory snapshots, on the shared parent
//! beside the volumes' markers, so the records survive a restart and a new
//! leader: `/csi-volumes/.snapshots/<entry>` per directory snapshot,
//! `.snapshots/.clones/<entry>` per snapshot a clone is copied through,
//! `.snapshots/.groups/<entry>` per group snapshot; and per parent
//! snapshot (a batch, known by its Linode label) a directory
//! `.snapshots/.batches/<label>` holding one empty file per record that
//! needs that parent snapshot. The batch directory is the parent
//! snapshot's reference count: it is made before the POST, so a parent
//! snapshot without one is an orphan, and the `rmdir` that empties it
//! decides, once and atomically, who deletes the parent snapshot.
//! Tenants mount only their own directory and never reach these files;
//! they are read without following links and up to a bound all the same.
//! File operations only: no Linode calls, no mounts.

use crate::cluster_id::ClusterId;
use crate::controller::kind::directory::parent::files::{base, ensure_dir, is_dir};
use crate::controller::kind::directory::parent::own_files;
use crate::handles::{DirName, SubdirId};
use crate::Error;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

const SNAPSHOTS: &str = ".snapshots";
const BATCHES: &str = ".batches";
/// A batch's label: this, then the moment and the process that made it.
pub const BATCH_PREFIX: &str = "csi-dirsnap-";
/// Before the cluster in a batch label (the numbers before it never hold
/// a letter, so the first one is it).
pub const CLUSTER_PART: &str = "-c-";
/// A record is a few short lines, a group's one more per member.
const MAX_RECORD_BYTES: u64 = 256 * 1024;

/// Where a record is kept, by what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shelf {
    /// A VolumeSnapshot of a directory volume (a group's member too).
    Snapshots,
    /// The snapshot a clone of a directory volume is copied through,
    /// named after the clone: never a VolumeSnapshot.
    Clones,
    /// A volume group snapshot.
    Groups,
}

impl Shelf {
    fn dir(self, root: &Path) -> PathBuf {
        let snapshots = base(root).join(SNAPSHOTS);
        match self {
            Shelf::Snapshots => snapshots,
            Shelf::Clones => snapshots.join(".clones"),
            Shelf::Groups => snapshots.join(".groups"),
        }
    }

    /// The name of its records' files in a batch directory.
    fn link(self, entry: &DirName) -> String {
        let prefix = match self {
            Shelf::Snapshots => "s",
            Shelf::Clones => "c",
            Shelf::Groups => "g",
        };
        format!("{prefix}-{entry}")
    }
}

/// One record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The CSI name it was created under.
    pub csi_name: String,
    /// The directory volume it was taken of (none for a group).
    pub source: Option<DirName>,
    /// The label of the parent snapshot it is a part of.
    pub batch: String,
    /// That parent snapshot's id, once its POST was answered: only a
    /// record with one was ever handed out.
    pub snapshot: Option<u64>,
    /// What a restore must be able to hold (see `snapshots`).
    pub size_bytes: i64,
    /// A group's member: the group's entry.
    pub group: Option<DirName>,
    /// A group: its members' entries.
    pub members: Vec<DirName>,
}

impl Record {
    /// A new record of a directory snapshot of `dir` (a member of `group`,
    /// if any): its batch and parent snapshot come once its batch runs.
    pub fn of_directory(
        csi_name: String,
        dir: DirName,
        size_bytes: i64,
        group: Option<DirName>,
    ) -> Record {
        Record {
            csi_name,
            source: Some(dir),
            batch: String::new(),
            snapshot: None,
            size_bytes,
            group,
            members: Vec::new(),
        }
    }

    /// Whether cluster `cluster` made it (or a driver before identities
    /// did), as its batch's label says: another cluster's record is none
    /// of this one's, whatever its name.
    pub fn is_of(&self, cluster: &ClusterId) -> bool {
        self.batch
            .split_once(CLUSTER_PART)
            .is_none_or(|(_, made)| made == cluster.as_str())
    }

    /// A new record of a group of `members`, likewise.
    pub fn of_group(csi_name: String, members: Vec<DirName>) -> Record {
        Record {
            csi_name,
            source: None,
            batch: String::new(),
            snapshot: None,
            size_bytes: 0,
            group: None,
            members,
        }
    }

    fn render(&self) -> String {
        let mut text = format!("csi-name: {}\nbatch: {}\n", self.csi_name, self.batch);
        if let Some(source) = &self.source {
            text.push_str(&format!("source: {source}\n"));
        }
        if let Some(id) = self.snapshot {
            text.push_str(&format!("snapshot: {id}\n"));
        }
        text.push_str(&format!("size-bytes: {}\n", self.size_bytes));
        if let Some(group) = &self.group {
            text.push_str(&format!("group: {group}\n"));
        }
        for member in &self.members {
            text.push_str(&format!("member: {member}\n"));
        }
        text
    }

    fn parse(text: &str) -> Option<Record> {
        let values = |key: &'static str| {
            text.lines()
                .filter_map(move |l| l.strip_prefix(key)?.strip_prefix(": "))
        };
        let field = |key: &'static str| values(key).next();
        let name = |key: &'static str| field(key).map(DirName::parse).transpose().ok();
        let batch = field("batch")?;
        if !is_batch_label(batch) {
            return None;
        }
        Some(Record {
            csi_name: field("csi-name")?.to_string(),
            source: name("source")?,
            batch: batch.to_string(),
            snapshot: field("snapshot").map(str::parse).transpose().ok()?,
            size_bytes: field("size-bytes")?.parse().ok()?,
            group: name("group")?,
            members: values("member")
                .map(DirName::parse)
                .collect::<Result<_, _>>()
                .ok()?,
        })
    }
}

/// Whether `label` is one the driver gives its batches: it becomes a
/// directory name, so nothing but `[a-z0-9-]` after the prefix.
pub fn is_batch_label(label: &str) -> bool {
    label.len() <= crate::handles::MAX_LABEL_BYTES
        && label.strip_prefix(BATCH_PREFIX).is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

fn io(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Internal(format!("{what} {}: {e}", path.display()))
}

fn batches_dir(root: &Path) -> PathBuf {
    base(root).join(SNAPSHOTS).join(BATCHES)
}

fn batch_dir(root: &Path, batch: &str) -> PathBuf {
    batches_dir(root).join(batch)
}

/// The shelves' directories, made when missing (only the driver's
/// controller, as root, reads or writes them).
fn ensure_shelves(root: &Path) -> Result<(), Error> {
    ensure_dir(&base(root), 0o711)?;
    for dir in [
        Shelf::Snapshots.dir(root),
        Shelf::Clones.dir(root),
        Shelf::Groups.dir(root),
        batches_dir(root),
    ] {
        ensure_dir(&dir, 0o700)?;
    }
    Ok(())
}

/// The record of `entry` on `shelf`, if there is one; one the driver could
/// not have written is FailedPrecondition.
pub fn read(root: &Path, shelf: Shelf, entry: &DirName) -> Result<Option<Record>, Error> {
    let path = shelf.dir(root).join(entry.as_str());
    own_files::read_parsed(
        &path,
        MAX_RECORD_BYTES,
        ("a", "snapshot record"),
        Record::parse,
    )
}

/// Writes the record of `entry` whole.
pub fn write(root: &Path, shelf: Shelf, entry: &DirName, record: &Record) -> Result<(), Error> {
    ensure_shelves(root)?;
    let dir = shelf.dir(root);
    own_files::write(
        &dir.join(entry.as_str()),
        &dir.join(format!(".{entry}.new")),
        &record.render(),
        "snapshot record",
    )
}

/// Removes the record of `entry`; one that is gone is fine.
pub fn remove(root: &Path, shelf: Shelf, entry: &DirName) -> Result<(), Error> {
    let path = shelf.dir(root).join(entry.as_str());
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io("remove", &path, e)),
    }
}

/// Every record on `shelf`, by entry, in entry order. A file that is no
/// record of the driver's is left out with a warning rather than failing
/// every listing.
pub fn all(root: &Path, shelf: Shelf) -> Result<Vec<(DirName, Record)>, Error> {
    let dir = shelf.dir(root);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("list", &dir, e)),
    };
    let mut found = Vec::new();
    for e in entries {
        let e = e.map_err(|e| io("list", &dir, e))?;
        let Some(entry) = e.file_name().to_str().and_then(|n| DirName::parse(n).ok()) else {
            continue;
        };
        match read(root, shelf, &entry) {
            Ok(Some(record)) => found.push((entry, record)),
            Ok(None) => {}
            Err(Error::FailedPrecondition(why)) => log::warn!("{why}; left out"),
            Err(e) => return Err(e),
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(found)
}

/// Makes batch `batch`'s directory: before its POST, so that a parent
/// snapshot that exists always has one until nothing needs it.
pub fn open_batch(root: &Path, batch: &str) -> Result<(), Error> {
    ensure_shelves(root)?;
    ensure_dir(&batch_dir(root, batch), 0o700)
}

/// Whether batch `batch` still has its directory.
pub fn batch_exists(root: &Path, batch: &str) -> Result<bool, Error> {
    is_dir(&batch_dir(root, batch))
}

/// Counts the record of `entry` on `shelf` in `batch`'s references.
pub fn hold(root: &Path, batch: &str, shelf: Shelf, entry: &DirName) -> Result<(), Error> {
    let path = batch_dir(root, batch).join(shelf.link(entry));
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map(drop)
        .map_err(|e| io("create", &path, e))
}

/// Drops that reference; one that is gone is fine.
pub fn release(root: &Path, batch: &str, shelf: Shelf, entry: &DirName) -> Result<(), Error> {
    let path = batch_dir(root, batch).join(shelf.link(entry));
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io("remove", &path, e)),
    }
}

/// The name of a fill's reference in a batch directory: the filled
/// volume's whole id, since it may live on another parent.
fn fill_link(fill: &SubdirId) -> String {
    format!("f-{}-{}-{}", fill.space, fill.filesystem, fill.name)
}

/// Counts the job filling volume `fill` in `batch`'s references, so a
/// DeleteSnapshot meanwhile removes the record, never the parent snapshot
/// the job copies. NotFound once the batch is closed: its parent snapshot
/// is, or is about to be, deleted.
pub fn hold_fill(root: &Path, batch: &str, fill: &SubdirId) -> Result<(), Error> {
    let path = batch_dir(root, batch).join(fill_link(fill));
    match std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(Error::NotFound(format!(
            "parent snapshot \"{batch}\" is being deleted: nothing to restore from"
        ))),
        Err(e) => Err(io("create", &path, e)),
    }
}

/// Drops the references the job filling `fill` holds in any batch, and
/// closes each batch nothing else holds: the batches closed, whose parent
/// snapshots are to be swept. Found by name, so a job whose record is gone
/// (deleted while the process was down) still lets go.
pub fn release_fill(root: &Path, fill: &SubdirId) -> Result<Vec<String>, Error> {
    let dir = batches_dir(root);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("list", &dir, e)),
    };
    let link = fill_link(fill);
    let mut closed = Vec::new();
    for e in entries {
        let e = e.map_err(|e| io("list", &dir, e))?;
        let Some(batch) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let path = e.path().join(&link);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(io("remove", &path, e)),
        }
        if close_batch(root, &batch)? {
            closed.push(batch);
        }
    }
    Ok(closed)
}

/// Removes `batch`'s directory if nothing holds it any more: true when it
/// is gone (this call removed it, or it was already), false while a
/// reference remains.
pub fn close_batch(root: &Path, batch: &str) -> Result<bool, Error> {
    let path = batch_dir(root, batch);
    match std::fs::remove_dir(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(true),
        Err(e) if e.kind() == ErrorKind::DirectoryNotEmpty => Ok(false),
        Err(e) => Err(io("remove", &path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::Scratch;

    fn name(n: &str) -> DirName {
        DirName::parse(n).unwrap()
    }

    fn record(batch: &str) -> Record {
        Record {
            csi_name: "snap-1".into(),
            source: Some(name("pvc-a")),
            batch: batch.into(),
            snapshot: Some(900),
            size_bytes: 1 << 30,
            group: None,
            members: Vec::new(),
        }
    }

    #[test]
    fn records_round_trip_and_foreign_files_are_refused() {
        let root = Scratch::new("records");
        let batch = "csi-dirsnap-1700000000000-42-1";
        let mut group = record(batch);
        group.source = None;
        group.members = vec![name("a"), name("b")];
        for (shelf, r) in [(Shelf::Snapshots, record(batch)), (Shelf::Groups, group)] {
            write(root.path(), shelf, &name("snap-1"), &r).unwrap();
            assert_eq!(read(root.path(), shelf, &name("snap-1")).unwrap(), Some(r));
        }
        assert_eq!(
            read(root.path(), Shelf::Clones, &name("snap-1")).unwrap(),
            None
        );
        let listed = all(root.path(), Shelf::Snapshots).unwrap();
        assert_eq!(listed.len(), 1, "only entries, never the shelves inside");
        std::fs::write(
            Shelf::Snapshots.dir(root.path()).join("planted"),
            "batch: ../../x\n",
        )
        .unwrap();
        assert!(matches!(
            read(root.path(), Shelf::Snapshots, &name("planted")),
            Err(Error::FailedPrecondition(_))
        ));
        assert_eq!(all(root.path(), Shelf::Snapshots).unwrap().len(), 1);
        remove(root.path(), Shelf::Snapshots, &name("snap-1")).unwrap();
        remove(root.path(), Shelf::Snapshots, &name("snap-1")).unwrap();
        assert_eq!(
            read(root.path(), Shelf::Snapshots, &name("snap-1")).unwrap(),
            None
        );
    }

    #[test]
    fn a_batch_closes_only_when_its_last_holder_lets_go() {
        let root = Scratch::new("batches");
        let batch = "csi-dirsnap-1-2-3";
        open_batch(root.path(), batch).unwrap();
        hold(root.path(), batch, Shelf::Snapshots, &name("a")).unwrap();
        hold(root.path(), batch, Shelf::Clones, &name("a")).unwrap();
        release(root.path(), batch, Shelf::Snapshots, &name("a")).unwrap();
        assert!(!close_batch(root.path(), batch).unwrap());
        assert!(batch_exists(root.path(), batch).unwrap());
        release(root.path(), batch, Shelf::Clones, &name("a")).unwrap();
        assert!(close_batch(root.path(), batch).unwrap());
        assert!(!batch_exists(root.path(), batch).unwrap());
        assert!(close_batch(root.path(), batch).unwrap(), "gone is closed");
    }

    #[test]
    fn batch_labels_are_plain_names() {
        assert!(is_batch_label("csi-dirsnap-1700000000000-42-1"));
        for bad in [
            "",
            "csi-dirsnap-",
            "csi-dirsnap-../x",
            "csi-dirsnap-A",
            "other-1",
        ] {
            assert!(!is_batch_label(bad), "{bad:?}");
        }
    }
}
