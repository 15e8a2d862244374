//! The driver's files inside a mounted shared filesystem: the volume
//! directories `/csi-volumes/<name>`, their ownership markers
//! `/csi-volumes/.owners/<name>` (written before the directory, checked
//! before anything is removed) and the archive `/csi-volumes/.archive`.
//! File operations only: no mounts, no Linode calls. Nothing here follows a
//! symlink a tenant may have planted: a volume's tree is removed with
//! `remove_dir_all` (which never follows one), read-only directories in it
//! are made writable through a descriptor opened with `O_NOFOLLOW`, and the
//! driver's own paths must be real directories and files.

use super::params::OnDelete;
use crate::handles::{DirName, SUBDIRECTORY_BASE};
use crate::Error;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
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
        text
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

fn base(root: &Path) -> PathBuf {
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
fn is_dir(path: &Path) -> Result<bool, Error> {
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
fn ensure_dir(path: &Path, mode: u32) -> Result<(), Error> {
    if is_dir(path)? {
        return Ok(());
    }
    match DirBuilder::new().mode(mode).create(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => is_dir(path).map(|_| ()),
        Err(e) => Err(io("create", path, e)),
    }
}

/// Opens a directory without following a symlink at its last component.
fn open_dir(path: &Path) -> Result<File, std::io::Error> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_DIRECTORY)
        .open(path)
}

/// The marker of `name`, if there is one.
pub fn read_marker(root: &Path, name: &DirName) -> Result<Option<Marker>, Error> {
    let path = marker_path(root, name);
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("read ownership marker", &path, e)),
    };
    let mut text = String::new();
    use std::io::Read;
    file.take(MAX_MARKER_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| io("read ownership marker", &path, e))?;
    Marker::parse(&text).map(Some).ok_or_else(|| {
        Error::FailedPrecondition(format!(
            "{} is not an ownership marker the driver wrote",
            path.display()
        ))
    })
}

/// Replaces the marker whole (a new file renamed over it), so it is never
/// seen half written.
fn write_marker(root: &Path, name: &DirName, marker: &Marker) -> Result<(), Error> {
    let path = marker_path(root, name);
    let tmp = base(root).join(OWNERS).join(format!(".{name}.new"));
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(|e| io("write ownership marker", &tmp, e))?;
    file.write_all(marker.render().as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| io("write ownership marker", &tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io("write ownership marker", &path, e))
}

/// Makes the volume directory of `name` with its marker (written first),
/// or finds what an earlier attempt for the same volume made. A directory
/// or marker of another volume, or a directory the driver did not make,
/// is never taken over.
pub fn create(
    root: &Path,
    name: &DirName,
    marker: &Marker,
    owner: Ownership,
) -> Result<PathBuf, Error> {
    ensure_dir(&base(root), 0o711)?;
    ensure_dir(&base(root).join(OWNERS), 0o700)?;
    let dir = volume_dir(root, name);
    match read_marker(root, name)? {
        Some(found) if found.retained => {
            return Err(Error::AlreadyExists(format!(
            "{} is kept from deleted volume {} (on-delete: retain); remove it to reuse the name",
            dir.display(),
            found.volume_id
        )))
        }
        Some(found) if found.volume_id != marker.volume_id => {
            return Err(Error::AlreadyExists(format!(
                "{} belongs to volume {}",
                dir.display(),
                found.volume_id
            )))
        }
        Some(_) => {}
        None => {
            if is_dir(&dir)? {
                return Err(Error::FailedPrecondition(format!(
                    "{} exists without the driver's ownership marker; the driver does not take it over",
                    dir.display()
                )));
            }
            write_marker(root, name, marker)?;
        }
    }
    ensure_dir(&dir, 0o700)?;
    let handle = open_dir(&dir).map_err(|e| io("open", &dir, e))?;
    std::os::unix::fs::fchown(&handle, Some(owner.uid), Some(owner.gid))
        .map_err(|e| io("chown", &dir, e))?;
    handle
        .set_permissions(std::fs::Permissions::from_mode(owner.mode))
        .map_err(|e| io("chmod", &dir, e))?;
    Ok(dir)
}

/// Deletes, archives or keeps the directory of `name` as its marker says,
/// once the marker names `volume_id`; a directory without the driver's
/// marker (or with another volume's) is FailedPrecondition and untouched.
/// The marker stays until `forget`, after the quota is gone.
pub fn remove(root: &Path, name: &DirName, volume_id: &str) -> Result<Removed, Error> {
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
    if !is_dir(&dir)? {
        return Ok(Removed::Deleted);
    }
    match marker.on_delete {
        OnDelete::Retain => Ok(Removed::Retained),
        OnDelete::Delete => {
            make_writable(&dir)?;
            std::fs::remove_dir_all(&dir).map_err(|e| io("delete", &dir, e))?;
            Ok(Removed::Deleted)
        }
        OnDelete::Archive => {
            let archive = base(root).join(ARCHIVE);
            ensure_dir(&archive, 0o700)?;
            let secs = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let to = archive.join(format!("{name}-{secs}"));
            std::fs::rename(&dir, &to).map_err(|e| io("archive", &dir, e))?;
            Ok(Removed::Archived(to))
        }
    }
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
    let dir = volume_dir(root, name);
    if is_dir(&dir)? {
        make_writable(&dir)?;
        std::fs::remove_dir_all(&dir).map_err(|e| io("delete", &dir, e))?;
    }
    let path = marker_path(root, name);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(io("remove ownership marker", &path, e)),
        _ => Ok(()),
    }
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

/// Gives the owner write and search permission on every directory of the
/// tree at `dir`, so a tree with read-only directories can be removed on a
/// server that does not let root override them. Each directory is opened
/// with `O_NOFOLLOW` and changed through its descriptor, and its entries
/// are read through that descriptor: a symlink is never followed.
fn make_writable(dir: &Path) -> Result<(), Error> {
    let handle = match open_dir(dir) {
        Ok(handle) => handle,
        // A symlink (ELOOP) or something other than a directory: nothing
        // to open up, and `remove_dir_all` removes the entry itself.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => return Ok(()),
        Err(e) => return Err(io("open", dir, e)),
    };
    let mode = handle
        .metadata()
        .map_err(|e| io("inspect", dir, e))?
        .permissions()
        .mode();
    if mode & 0o700 != 0o700 {
        handle
            .set_permissions(std::fs::Permissions::from_mode((mode | 0o700) & 0o7777))
            .map_err(|e| io("chmod", dir, e))?;
    }
    use std::os::fd::AsRawFd;
    let through = PathBuf::from(format!("/proc/self/fd/{}", handle.as_raw_fd()));
    let entries = std::fs::read_dir(&through).map_err(|e| io("list", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io("list", dir, e))?;
        let kind = entry.file_type().map_err(|e| io("inspect", dir, e))?;
        if kind.is_dir() {
            make_writable(&through.join(entry.file_name()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Root(PathBuf);

    impl Root {
        fn new(tag: &str) -> Root {
            let path = std::env::temp_dir().join(format!("lnc-dirs-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            Root(path)
        }
    }

    impl Drop for Root {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn marker(id: &str, on_delete: OnDelete) -> Marker {
        Marker {
            volume_id: id.to_string(),
            csi_name: "pvc-x".to_string(),
            on_delete,
            retained: false,
        }
    }

    const OWNER: Ownership = Ownership {
        mode: 0o2770,
        uid: 0,
        gid: 0,
    };

    fn name(n: &str) -> DirName {
        DirName::parse(n).unwrap()
    }

    #[test]
    fn markers_round_trip() {
        let mut m = marker("7/9/pvc-x", OnDelete::Archive);
        assert_eq!(Marker::parse(&m.render()), Some(m.clone()));
        m.retained = true;
        assert_eq!(Marker::parse(&m.render()), Some(m));
        assert_eq!(Marker::parse("hello"), None);
    }

    #[test]
    fn create_writes_the_marker_and_is_idempotent_for_its_volume_only() {
        let root = Root::new("create");
        let n = name("pvc-a");
        let dir = create(&root.0, &n, &marker("7/9/pvc-a", OnDelete::Delete), OWNER).unwrap();
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777,
            0o2770
        );
        assert_eq!(
            read_marker(&root.0, &n).unwrap(),
            Some(marker("7/9/pvc-a", OnDelete::Delete))
        );
        std::fs::write(dir.join("data"), "x").unwrap();
        create(&root.0, &n, &marker("7/9/pvc-a", OnDelete::Delete), OWNER).unwrap();
        assert!(dir.join("data").exists(), "a retry keeps what is there");
        assert!(matches!(
            create(&root.0, &n, &marker("7/10/pvc-a", OnDelete::Delete), OWNER),
            Err(Error::AlreadyExists(_))
        ));
        let foreign = name("foreign");
        std::fs::create_dir(volume_dir(&root.0, &foreign)).unwrap();
        assert!(matches!(
            create(
                &root.0,
                &foreign,
                &marker("7/9/foreign", OnDelete::Delete),
                OWNER
            ),
            Err(Error::FailedPrecondition(_))
        ));
        assert_eq!(read_marker(&root.0, &foreign).unwrap(), None);
    }

    #[test]
    fn delete_needs_the_marker_and_never_follows_symlinks() {
        let root = Root::new("delete");
        let (a, b) = (name("pvc-a"), name("pvc-b"));
        let dir_a = create(&root.0, &a, &marker("7/9/pvc-a", OnDelete::Delete), OWNER).unwrap();
        let dir_b = create(&root.0, &b, &marker("7/9/pvc-b", OnDelete::Delete), OWNER).unwrap();
        std::fs::write(dir_b.join("keep"), "b").unwrap();
        symlink(&dir_b, dir_a.join("to-b")).unwrap();
        let ro = dir_a.join("ro");
        std::fs::create_dir_all(ro.join("inner")).unwrap();
        std::fs::write(ro.join("inner/f"), "x").unwrap();
        std::fs::set_permissions(ro.join("inner"), std::fs::Permissions::from_mode(0o500)).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o500)).unwrap();

        assert!(matches!(
            remove(&root.0, &a, "7/9/other"),
            Err(Error::FailedPrecondition(_))
        ));
        assert_eq!(remove(&root.0, &a, "7/9/pvc-a").unwrap(), Removed::Deleted);
        assert!(!dir_a.exists());
        assert_eq!(std::fs::read_to_string(dir_b.join("keep")).unwrap(), "b");
        assert_eq!(
            std::fs::metadata(&dir_b).unwrap().permissions().mode() & 0o7777,
            0o2770,
            "the sibling's mode is untouched"
        );
        forget(&root.0, &a).unwrap();
        assert_eq!(read_marker(&root.0, &a).unwrap(), None);
        assert_eq!(remove(&root.0, &a, "7/9/pvc-a").unwrap(), Removed::Gone);

        let unmarked = name("unmarked");
        std::fs::create_dir(volume_dir(&root.0, &unmarked)).unwrap();
        assert!(matches!(
            remove(&root.0, &unmarked, "7/9/unmarked"),
            Err(Error::FailedPrecondition(_))
        ));
        assert!(volume_dir(&root.0, &unmarked).is_dir());
    }

    #[test]
    fn archive_and_retain() {
        let root = Root::new("archive");
        let (a, r) = (name("arch"), name("kept"));
        let dir_a = create(&root.0, &a, &marker("7/9/arch", OnDelete::Archive), OWNER).unwrap();
        std::fs::write(dir_a.join("f"), "x").unwrap();
        let Removed::Archived(to) = remove(&root.0, &a, "7/9/arch").unwrap() else {
            panic!("not archived")
        };
        assert!(to.starts_with(base(&root.0).join(ARCHIVE)));
        assert_eq!(std::fs::read_to_string(to.join("f")).unwrap(), "x");
        forget(&root.0, &a).unwrap();
        assert_eq!(remove(&root.0, &a, "7/9/arch").unwrap(), Removed::Gone);

        let dir_r = create(&root.0, &r, &marker("7/9/kept", OnDelete::Retain), OWNER).unwrap();
        assert_eq!(remove(&root.0, &r, "7/9/kept").unwrap(), Removed::Retained);
        forget(&root.0, &r).unwrap();
        assert!(dir_r.is_dir());
        assert_eq!(remove(&root.0, &r, "7/9/kept").unwrap(), Removed::Retained);
        assert!(marked(&root.0).unwrap().is_empty());
        assert!(matches!(
            create(&root.0, &r, &marker("7/9/kept", OnDelete::Retain), OWNER),
            Err(Error::AlreadyExists(_))
        ));
    }
}
