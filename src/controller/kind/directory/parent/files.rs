//! The driver's files inside a mounted shared filesystem: the volume
//! directories `/csi-volumes/<name>`, their ownership markers
//! `/csi-volumes/.owners/<name>` (written before the directory, checked
//! before anything is removed) and the archive `/csi-volumes/.archive`.
//! File operations only: no mounts, no Linode calls. Nothing here follows a
//! symlink a tenant may have planted: a volume's tree is removed by
//! `fs_tree`'s walk (iterative, through descriptors, never following a
//! link, so no depth or width of tree exhausts the stack or the
//! descriptors), and the driver's own paths must be real directories and
//! files. A new directory gets its owner and mode before it takes its
//! name, so a repeated create never changes an existing one.

use super::{kept, own_files};
use crate::cluster_id::ClusterId;
use crate::controller::request::params::{Autogrow, OnDelete};
use crate::controller::ClaimRef;
use crate::fs_tree::{self, Dir};
use crate::handles::{DirName, SubdirId, VolumeId, SUBDIRECTORY_BASE};
use crate::Error;
use std::ffi::CString;
use std::fs::DirBuilder;
use std::io::ErrorKind;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

const OWNERS: &str = ".owners";
const ARCHIVE: &str = ".archive";
/// A marker is a few short lines; anything longer is not ours.
const MAX_MARKER_BYTES: u64 = 4096;

/// What the driver records of a volume it made, in its marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub volume_id: String,
    pub csi_name: String,
    /// The class's `on-delete`, needed at delete time when only the id is known.
    pub on_delete: OnDelete,
    /// Deleted with `on-delete: retain`: the directory stays, the volume is gone.
    pub retained: bool,
    /// What the volume is made from (a snapshot or volume handle, as the
    /// request wrote it), if anything.
    pub source: Option<String>,
    /// Being filled from `source`: not a volume until the copy is done.
    pub filling: bool,
    /// The archive entry a delete with `on-delete: archive` reserved, so a
    /// retry moves the directory to the same one.
    pub archive_to: Option<String>,
    /// The identity of the cluster that made it; `None` for one made
    /// before clusters had identities (its maker's still, through its id).
    pub cluster: Option<String>,
    /// The claim it was made for (none for a volume made before the driver
    /// recorded it, or without `--extra-create-metadata`: never grown).
    pub claim: Option<ClaimRef>,
    /// The class's autogrow policy, fixed at create time as the class is.
    pub autogrow: Option<Autogrow>,
}

impl Marker {
    fn render(&self) -> String {
        let mut text = format!(
            "volume-id: {}\ncsi-name: {}\non-delete: {}\n",
            self.volume_id,
            self.csi_name,
            self.on_delete.as_str()
        );
        if self.retained {
            text.push_str("state: retained\n");
        }
        if let Some(source) = &self.source {
            text.push_str(&format!("source: {source}\n"));
        }
        if self.filling {
            text.push_str("filling: true\n");
        }
        if let Some(entry) = &self.archive_to {
            text.push_str(&format!("archive-to: {entry}\n"));
        }
        if let Some(cluster) = &self.cluster {
            text.push_str(&format!("cluster: {cluster}\n"));
        }
        if let Some(claim) = &self.claim {
            text.push_str(&format!("claim: {}\npv: {}\n", claim.claim(), claim.pv));
        }
        if let Some(autogrow) = &self.autogrow {
            text.push_str(&format!("autogrow: {}\n", autogrow.render()));
        }
        text
    }

    /// Whether cluster `cluster` made the volume (or a driver before
    /// identities did): only then is it a volume there.
    pub fn is_of(&self, cluster: &ClusterId) -> bool {
        self.cluster
            .as_deref()
            .is_none_or(|made| made == cluster.as_str())
    }

    fn parse(text: &str) -> Option<Marker> {
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(": "))
        };
        Some(Marker {
            volume_id: field("volume-id")?.to_string(),
            csi_name: field("csi-name").unwrap_or("").to_string(),
            on_delete: OnDelete::parse(field("on-delete")?).ok()?,
            retained: field("state") == Some("retained"),
            source: field("source").map(str::to_string),
            filling: field("filling") == Some("true"),
            archive_to: field("archive-to").map(str::to_string),
            cluster: field("cluster").map(str::to_string),
            claim: field("claim")
                .zip(field("pv"))
                .and_then(|(claim, pv)| ClaimRef::parse(claim, pv)),
            autogrow: field("autogrow").and_then(Autogrow::parse_recorded),
        })
    }
}

/// How a volume directory is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ownership {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// What `remove` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removed {
    Deleted,
    Archived(PathBuf),
    Retained,
    /// Neither directory nor marker: an earlier attempt finished.
    Gone,
}

fn io(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Internal(format!("{what} {}: {e}", path.display()))
}

pub fn base(root: &Path) -> PathBuf {
    root.join(SUBDIRECTORY_BASE)
}

/// The volume directory of `name` under a share mounted at `root`.
pub fn volume_dir(root: &Path, name: &DirName) -> PathBuf {
    base(root).join(name.as_str())
}

fn marker_path(root: &Path, name: &DirName) -> PathBuf {
    base(root).join(OWNERS).join(name.as_str())
}

/// Whether `path` is a real directory (`false`: nothing there); a symlink
/// or a file where a directory belongs is FailedPrecondition.
pub fn is_dir(path: &Path) -> Result<bool, Error> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_dir() => Ok(true),
        Ok(_) => Err(Error::FailedPrecondition(format!(
            "{} is not a directory (a symlink or a file stands there); the driver leaves it alone",
            path.display()
        ))),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io("inspect", path, e)),
    }
}

/// A driver directory, made when missing.
pub fn ensure_dir(path: &Path, mode: u32) -> Result<(), Error> {
    if is_dir(path)? {
        return Ok(());
    }
    match DirBuilder::new().mode(mode).create(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => is_dir(path).map(|_| ()),
        Err(e) => Err(io("create", path, e)),
    }
}

/// The marker of `name`, if there is one.
pub fn read_marker(root: &Path, name: &DirName) -> Result<Option<Marker>, Error> {
    let path = marker_path(root, name);
    own_files::read_parsed(
        &path,
        MAX_MARKER_BYTES,
        ("an", "ownership marker"),
        Marker::parse,
    )
}

/// Replaces the marker whole, so it is never seen half written.
fn write_marker(root: &Path, name: &DirName, marker: &Marker) -> Result<(), Error> {
    let tmp = base(root).join(OWNERS).join(format!(".{name}.new"));
    own_files::write(
        &marker_path(root, name),
        &tmp,
        &marker.render(),
        "ownership marker",
    )
}

/// Whether a create of the volume `want` describes may go on, given the
/// marker `found` under its name: `Ok(true)` when an earlier attempt of
/// the same volume made it, `Ok(false)` when nothing of it exists yet.
/// Another volume's, another CSI name's (two names that map to one
/// directory), another `on-delete`'s, or a kept directory's is
/// AlreadyExists; a directory without the marker is never taken over.
fn check(found: Option<&Marker>, want: &Marker, dir: &Path) -> Result<bool, Error> {
    let Some(found) = found else {
        if is_dir(dir)? {
            return Err(Error::FailedPrecondition(format!(
                "{} exists without the driver's ownership marker; the driver does not take it over",
                dir.display()
            )));
        }
        return Ok(false);
    };
    let conflict = if found.retained {
        Some(format!(
            "is kept from deleted volume {} (on-delete: retain); remove it to reuse the name",
            found.volume_id
        ))
    } else if found.volume_id != want.volume_id {
        Some(format!("belongs to volume {}", found.volume_id))
    } else if found.cluster.is_some() && found.cluster != want.cluster {
        Some(format!(
            "belongs to a volume of another cluster ({})",
            found.cluster.as_deref().unwrap_or_default()
        ))
    } else if !found.csi_name.is_empty() && found.csi_name != want.csi_name {
        Some(format!(
            "belongs to the volume named {:?}, which maps to the same directory as {:?}",
            found.csi_name, want.csi_name
        ))
    } else if found.source != want.source {
        Some(format!(
            "was made from {}, not {}",
            found.source.as_deref().unwrap_or("nothing"),
            want.source.as_deref().unwrap_or("nothing")
        ))
    } else if found.on_delete != want.on_delete {
        Some(format!(
            "was made with on-delete: {}, not {}",
            found.on_delete.as_str(),
            want.on_delete.as_str()
        ))
    } else {
        None
    };
    match conflict {
        Some(why) => Err(Error::AlreadyExists(format!("{} {why}", dir.display()))),
        None => Ok(true),
    }
}

/// Whether volume `marker` may be created (or was, by an earlier attempt:
/// `Ok(true)`) under `name` of the share at `root`; see `check`. A marker
/// of a retained directory that is gone is stale and removed.
pub fn prior(root: &Path, name: &DirName, marker: &Marker) -> Result<bool, Error> {
    let dir = volume_dir(root, name);
    let found = read_marker(root, name)?;
    if found.as_ref().is_some_and(|m| m.retained) && !is_dir(&dir)? {
        remove_marker(root, name)?;
        return check(None, marker, &dir);
    }
    check(found.as_ref(), marker, &dir)
}

/// Makes the volume directory of `name` with its marker (written first),
/// or finds what an earlier attempt for the same volume made (see
/// `prior`). The directory is made under a hidden name, given its owner and
/// mode, then renamed into place: an existing one is never re-owned.
pub fn create(
    root: &Path,
    name: &DirName,
    marker: &Marker,
    owner: Ownership,
) -> Result<PathBuf, Error> {
    ensure_dir(&base(root), 0o711)?;
    ensure_dir(&base(root).join(OWNERS), 0o700)?;
    let dir = volume_dir(root, name);
    if !prior(root, name, marker)? {
        write_marker(root, name, marker)?;
    }
    if is_dir(&dir)? {
        return Ok(dir);
    }
    let base_dir = open(&base(root))?;
    let making = c_string(&format!(".new-{name}"));
    // Left by an attempt that died before the rename: no one has it yet.
    fs_tree::remove_tree(&base_dir, &making)?;
    base_dir
        .make_dir(&making, 0o700)
        .map_err(|e| io("create", &dir, e))?;
    let new = base_dir.child(&making).map_err(|e| io("open", &dir, e))?;
    new.set_owner(owner.uid, owner.gid)
        .map_err(|e| io("chown", &dir, e))?;
    new.set_mode(owner.mode).map_err(|e| io("chmod", &dir, e))?;
    base_dir
        .rename(&making, &base_dir, &c_string(name.as_str()))
        .map_err(|e| io("create", &dir, e))?;
    Ok(dir)
}

fn open(path: &Path) -> Result<Dir, Error> {
    Dir::open(path).map_err(|e| io("open", path, e))
}

/// A name of the driver's own making (no NUL in it).
fn c_string(name: &str) -> CString {
    CString::new(name).expect("driver names hold no NUL")
}

/// Records that the volume `volume_id` under `name` is filled: it is a
/// volume from now on.
pub fn mark_filled(root: &Path, name: &DirName, volume_id: &str) -> Result<(), Error> {
    match read_marker(root, name)? {
        Some(m) if m.volume_id == volume_id => {
            if m.filling {
                write_marker(
                    root,
                    name,
                    &Marker {
                        filling: false,
                        ..m
                    },
                )?;
            }
            Ok(())
        }
        _ => Err(Error::Aborted(format!(
            "the marker of volume {volume_id} changed while it was being filled"
        ))),
    }
}

/// Deletes, archives or keeps the directory of `name` as its marker says,
/// once the marker names `volume_id`; a directory without the driver's
/// marker (or with another volume's) is FailedPrecondition and untouched.
/// Data an archive or retain keeps is recorded as `kept_bytes` on the
/// parent (see `kept`). The marker stays until `forget`, after the quota
/// is gone.
pub fn remove(
    root: &Path,
    name: &DirName,
    volume_id: &str,
    (cluster, kept_bytes): (&ClusterId, i64),
) -> Result<Removed, Error> {
    let dir = volume_dir(root, name);
    let Some(marker) = read_marker(root, name)? else {
        if is_dir(&dir)? {
            return Err(Error::FailedPrecondition(format!(
                "{} has no ownership marker of the driver; it is left untouched",
                dir.display()
            )));
        }
        return Ok(Removed::Gone);
    };
    if marker.volume_id != volume_id {
        return Err(Error::FailedPrecondition(format!(
            "{} belongs to volume {}, not {volume_id}; it is left untouched",
            dir.display(),
            marker.volume_id
        )));
    }
    if marker.retained {
        return Ok(Removed::Retained);
    }
    match marker.on_delete {
        OnDelete::Retain => {
            if is_dir(&dir)? {
                kept::keep(root, cluster, name.as_str(), kept_bytes)?;
            }
            Ok(Removed::Retained)
        }
        OnDelete::Delete => {
            fs_tree::remove_tree(&open(&base(root))?, &c_string(name.as_str()))?;
            Ok(Removed::Deleted)
        }
        OnDelete::Archive => archive(root, name, marker, (cluster, kept_bytes)),
    }
}

/// Moves the directory of `name` into the archive, under an entry of its
/// own: `<name>-<unix seconds>`, or with `-2`, `-3`… when a delete of the
/// same name took that one. The entry is reserved (made empty, which only
/// one caller can) and written to the marker before the move, so a retry
/// moves to the same entry and two deletes never share one.
fn archive(
    root: &Path,
    name: &DirName,
    mut marker: Marker,
    (cluster, kept_bytes): (&ClusterId, i64),
) -> Result<Removed, Error> {
    let archive = base(root).join(ARCHIVE);
    ensure_dir(&archive, 0o700)?;
    let entry = match marker.archive_to.clone() {
        Some(entry) => entry,
        None if !is_dir(&volume_dir(root, name))? => return Ok(Removed::Deleted),
        None => {
            let entry = reserve(&archive, name)?;
            marker.archive_to = Some(entry.clone());
            write_marker(root, name, &marker)?;
            entry
        }
    };
    let to = archive.join(&entry);
    if is_dir(&volume_dir(root, name))? {
        kept::keep(root, cluster, &format!("{ARCHIVE}/{entry}"), kept_bytes)?;
        // Onto the reserved entry, which is empty: rename replaces it.
        std::fs::rename(volume_dir(root, name), &to).map_err(|e| io("archive", &to, e))?;
    }
    Ok(Removed::Archived(to))
}

/// Makes a new, empty archive entry for `name` and returns its name.
fn reserve(archive: &Path, name: &DirName) -> Result<String, Error> {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for n in 1u32.. {
        let entry = match n {
            1 => format!("{name}-{secs}"),
            n => format!("{name}-{secs}-{n}"),
        };
        match DirBuilder::new().mode(0o700).create(archive.join(&entry)) {
            Ok(()) => return Ok(entry),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io("reserve", &archive.join(&entry), e)),
        }
    }
    unreachable!("an archive entry is found before the counter runs out")
}

/// The last step of a delete: the marker goes (a retained directory keeps
/// a marker saying so, so a retried delete still finds it the driver's).
pub fn forget(root: &Path, name: &DirName) -> Result<(), Error> {
    let Some(mut marker) = read_marker(root, name)? else {
        return Ok(());
    };
    if marker.on_delete == OnDelete::Retain && is_dir(&volume_dir(root, name))? {
        marker.retained = true;
        return write_marker(root, name, &marker);
    }
    remove_marker(root, name)
}

fn remove_marker(root: &Path, name: &DirName) -> Result<(), Error> {
    let path = marker_path(root, name);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(io("remove ownership marker", &path, e)),
        _ => Ok(()),
    }
}

/// Undoes `create` (a quota that cannot be had): the directory, whatever
/// `on-delete` says, and then the marker. Only a directory with this
/// volume's marker is removed.
pub fn roll_back(root: &Path, name: &DirName, volume_id: &str) -> Result<(), Error> {
    match read_marker(root, name)? {
        Some(m) if m.volume_id == volume_id && !m.retained => {}
        _ => return Ok(()),
    }
    fs_tree::remove_tree(&open(&base(root))?, &c_string(name.as_str()))?;
    remove_marker(root, name)
}

/// Every live volume a marker under the share at `root` records.
pub fn marked(root: &Path) -> Result<Vec<(DirName, Marker)>, Error> {
    let owners = base(root).join(OWNERS);
    let entries = match std::fs::read_dir(&owners) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("list", &owners, e)),
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(name) = entry
            .file_name()
            .to_str()
            .and_then(|n| DirName::parse(n).ok())
        else {
            continue;
        };
        if let Ok(Some(marker)) = read_marker(root, &name) {
            if !marker.retained {
                found.push((name, marker));
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(found)
}

/// The volumes of cluster `cluster` (or of a driver before identities)
/// that the markers of parent `parent`, mounted at `root`, record as
/// filled: each with its id and marker. One still being filled is no
/// volume yet (its CreateVolume has not answered), and another cluster's
/// is its own.
pub fn volumes(
    root: &Path,
    parent: VolumeId,
    cluster: &ClusterId,
) -> Result<Vec<(SubdirId, Marker)>, Error> {
    Ok(marked(root)?
        .into_iter()
        .map(|(name, marker)| {
            let id = SubdirId {
                space: parent.space,
                filesystem: parent.filesystem,
                name,
            };
            (id, marker)
        })
        .filter(|(id, m)| m.volume_id == id.to_string() && m.is_of(cluster) && !m.filling)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::Scratch;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn us() -> ClusterId {
        ClusterId::parse("us").unwrap()
    }

    /// A share's root for one test.
    struct Root(Scratch);

    impl Root {
        fn new(tag: &str) -> Root {
            Root(Scratch::new(&format!("dirs-{tag}")))
        }
    }

    impl std::ops::Deref for Root {
        type Target = Scratch;
        fn deref(&self) -> &Scratch {
            &self.0
        }
    }

    fn marker(id: &str, on_delete: OnDelete) -> Marker {
        Marker {
            volume_id: id.to_string(),
            csi_name: "pvc-x".to_string(),
            on_delete,
            retained: false,
            source: None,
            filling: false,
            archive_to: None,
            cluster: Some("us".into()),
            claim: None,
            autogrow: None,
        }
    }

    const OWNER: Ownership = Ownership {
        mode: 0o2770,
        uid: 0,
        gid: 0,
    };

    /// Volume `n` of share `root`, made (its id `7/9/<n>`).
    fn made(root: &Root, n: &DirName, on_delete: OnDelete) -> PathBuf {
        create(
            root.path(),
            n,
            &marker(&format!("7/9/{n}"), on_delete),
            OWNER,
        )
        .unwrap()
    }

    fn name(n: &str) -> DirName {
        DirName::parse(n).unwrap()
    }

    #[test]
    fn markers_round_trip() {
        let mut m = marker("7/9/pvc-x", OnDelete::Archive);
        assert_eq!(Marker::parse(&m.render()), Some(m.clone()));
        m.retained = true;
        assert_eq!(Marker::parse(&m.render()), Some(m.clone()));
        m.claim = ClaimRef::parse("team-a/data", "pvc-0123");
        m.autogrow = Autogrow::parse_recorded("threshold=80,step=1073741824,max=none");
        assert!(m.claim.is_some() && m.autogrow.is_some());
        assert_eq!(Marker::parse(&m.render()), Some(m.clone()));
        assert_eq!(Marker::parse("hello"), None);
        assert!(m.is_of(&us()));
        assert!(!m.is_of(&ClusterId::parse("them").unwrap()));
        m.cluster = None;
        assert_eq!(Marker::parse(&m.render()), Some(m.clone()));
        assert!(m.is_of(&us()), "made before identities: its maker's still");
    }

    /// A volume of another cluster under the same name on a shared parent
    /// is never taken for this cluster's repeat.
    #[test]
    fn another_cluster_s_marker_is_never_a_repeat() {
        let root = Root::new("clusters");
        let n = name("pvc-a");
        made(&root, &n, OnDelete::Delete);
        let theirs = Marker {
            cluster: Some("them".into()),
            ..marker("7/9/pvc-a", OnDelete::Delete)
        };
        assert!(matches!(
            prior(root.path(), &n, &theirs),
            Err(Error::AlreadyExists(m)) if m.contains("another cluster")
        ));
    }

    #[test]
    fn create_writes_the_marker_and_is_idempotent_for_its_volume_only() {
        let root = Root::new("create");
        let n = name("pvc-a");
        let dir = made(&root, &n, OnDelete::Delete);
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777,
            0o2770
        );
        assert_eq!(
            read_marker(root.path(), &n).unwrap(),
            Some(marker("7/9/pvc-a", OnDelete::Delete))
        );
        std::fs::write(dir.join("data"), "x").unwrap();
        made(&root, &n, OnDelete::Delete);
        assert!(dir.join("data").exists(), "a retry keeps what is there");
        let elsewhere = marker("7/10/pvc-a", OnDelete::Delete);
        let taken = create(root.path(), &n, &elsewhere, OWNER);
        assert!(matches!(taken, Err(Error::AlreadyExists(_))), "{taken:?}");
        let foreign = name("foreign");
        std::fs::create_dir(volume_dir(root.path(), &foreign)).unwrap();
        let unmarked = create(
            root.path(),
            &foreign,
            &marker("7/9/foreign", OnDelete::Delete),
            OWNER,
        );
        assert!(
            matches!(unmarked, Err(Error::FailedPrecondition(_))),
            "{unmarked:?}"
        );
        assert_eq!(read_marker(root.path(), &foreign).unwrap(), None);
    }

    #[test]
    fn another_name_or_on_delete_is_already_exists_and_a_repeat_never_re_owns() {
        let root = Root::new("names");
        let n = name("pvc-alice");
        let mut alice = marker("7/9/pvc-alice", OnDelete::Delete);
        alice.csi_name = "pvc-alice".into();
        let dir = create(root.path(), &n, &alice, OWNER).unwrap();
        // The tenant makes the directory its own.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&dir, Some(1234), Some(5678)).unwrap();
        let mut bob = alice.clone();
        bob.csi_name = "pvc-Alice".into();
        let err = create(root.path(), &n, &bob, OWNER).unwrap_err();
        assert!(
            matches!(&err, Error::AlreadyExists(m) if m.contains("pvc-Alice")),
            "{err:?}"
        );
        let mut archiving = alice.clone();
        archiving.on_delete = OnDelete::Archive;
        assert!(matches!(
            create(root.path(), &n, &archiving, OWNER),
            Err(Error::AlreadyExists(m)) if m.contains("on-delete")
        ));
        create(root.path(), &n, &alice, OWNER).unwrap();
        let meta = std::fs::metadata(&dir).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            (meta.mode() & 0o7777, meta.uid(), meta.gid()),
            (0o700, 1234, 5678),
            "a repeat leaves the owner and mode as the tenant set them"
        );
        assert_eq!(read_marker(root.path(), &n).unwrap(), Some(alice));
    }

    #[test]
    fn archiving_one_name_twice_makes_two_entries() {
        let root = Root::new("archive-twice");
        let n = name("pvc-a");
        let m = marker("7/9/pvc-a", OnDelete::Archive);
        let mut entries = Vec::new();
        for round in 0..2 {
            let dir = create(root.path(), &n, &m, OWNER).unwrap();
            std::fs::write(dir.join("round"), round.to_string()).unwrap();
            let Removed::Archived(to) = remove(root.path(), &n, "7/9/pvc-a", (&us(), 10)).unwrap()
            else {
                panic!("not archived")
            };
            forget(root.path(), &n).unwrap();
            entries.push(to);
        }
        assert_ne!(entries[0], entries[1]);
        for (round, to) in entries.iter().enumerate() {
            assert_eq!(
                std::fs::read_to_string(to.join("round")).unwrap(),
                round.to_string()
            );
        }
        assert_eq!(
            kept::total(root.path()).unwrap(),
            20,
            "both archives are counted"
        );
    }

    #[test]
    fn delete_needs_the_marker_and_never_follows_symlinks() {
        let root = Root::new("delete");
        let (a, b) = (name("pvc-a"), name("pvc-b"));
        let dir_a = made(&root, &a, OnDelete::Delete);
        let dir_b = made(&root, &b, OnDelete::Delete);
        std::fs::write(dir_b.join("keep"), "b").unwrap();
        symlink(&dir_b, dir_a.join("to-b")).unwrap();
        let ro = dir_a.join("ro");
        std::fs::create_dir_all(ro.join("inner")).unwrap();
        std::fs::write(ro.join("inner/f"), "x").unwrap();
        std::fs::set_permissions(ro.join("inner"), std::fs::Permissions::from_mode(0o500)).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o500)).unwrap();

        assert!(matches!(
            remove(root.path(), &a, "7/9/other", (&us(), 0)),
            Err(Error::FailedPrecondition(_))
        ));
        assert_eq!(
            remove(root.path(), &a, "7/9/pvc-a", (&us(), 0)).unwrap(),
            Removed::Deleted
        );
        assert!(!dir_a.exists());
        assert_eq!(std::fs::read_to_string(dir_b.join("keep")).unwrap(), "b");
        assert_eq!(
            std::fs::metadata(&dir_b).unwrap().permissions().mode() & 0o7777,
            0o2770,
            "the sibling's mode is untouched"
        );
        forget(root.path(), &a).unwrap();
        assert_eq!(read_marker(root.path(), &a).unwrap(), None);
        assert_eq!(
            remove(root.path(), &a, "7/9/pvc-a", (&us(), 0)).unwrap(),
            Removed::Gone
        );

        let unmarked = name("unmarked");
        std::fs::create_dir(volume_dir(root.path(), &unmarked)).unwrap();
        assert!(matches!(
            remove(root.path(), &unmarked, "7/9/unmarked", (&us(), 0)),
            Err(Error::FailedPrecondition(_))
        ));
        assert!(volume_dir(root.path(), &unmarked).is_dir());
    }

    #[test]
    fn archive_and_retain() {
        let root = Root::new("archive");
        let (a, r) = (name("arch"), name("kept"));
        let dir_a = made(&root, &a, OnDelete::Archive);
        std::fs::write(dir_a.join("f"), "x").unwrap();
        let Removed::Archived(to) = remove(root.path(), &a, "7/9/arch", (&us(), 0)).unwrap() else {
            panic!("not archived")
        };
        assert!(to.starts_with(base(root.path()).join(ARCHIVE)));
        assert_eq!(std::fs::read_to_string(to.join("f")).unwrap(), "x");
        forget(root.path(), &a).unwrap();
        assert_eq!(
            remove(root.path(), &a, "7/9/arch", (&us(), 0)).unwrap(),
            Removed::Gone
        );

        let dir_r = made(&root, &r, OnDelete::Retain);
        assert_eq!(
            remove(root.path(), &r, "7/9/kept", (&us(), 0)).unwrap(),
            Removed::Retained
        );
        forget(root.path(), &r).unwrap();
        assert!(dir_r.is_dir());
        assert_eq!(
            remove(root.path(), &r, "7/9/kept", (&us(), 0)).unwrap(),
            Removed::Retained
        );
        assert!(marked(root.path()).unwrap().is_empty());
        assert!(matches!(
            create(
                root.path(),
                &r,
                &marker("7/9/kept", OnDelete::Retain),
                OWNER
            ),
            Err(Error::AlreadyExists(_))
        ));
    }
}
