//! `dev` mode's stand-in for NFS: every filesystem the fake Linode API makes
//! active gets a directory under the state dir, a snapshot copies it, a
//! clone copies the snapshot back, deleting the filesystem removes it and
//! its snapshots (the backend keeps snapshots under their filesystem); and
//! it tells `mounter` which directory an "NFS mount" serves: the export's,
//! or a directory inside it (a subpath never leaves its export). With
//! `snapshot-directory` an export also shows its snapshots (`shown.rs`),
//! outside its usage and its snapshots' content. The fake API asks it
//! whether a quota's path exists and what it holds. It never mounts.

use super::sampled::Sampler;
use super::shown::{self, SNAPSHOT_DIRECTORY};
use super::snapshot_copy::copy_tree;
use super::usage::tree_usage;
use crate::fake::{DirUsage, ExportContent};
use crate::mutex::lock;
use crate::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The directories behind the emulated exports.
pub struct Exports {
    root: PathBuf,
    /// Each export shows its snapshots in `.snapshot` (`snapshot-directory`).
    shows_snapshots: bool,
    /// How a quota's usage lags behind the files (`DEV_QUOTA_SAMPLE`).
    sampler: Sampler,
    /// Held while a snapshot is copied or shown: a copy of an export must
    /// not see its `.snapshot` change under it.
    snapshotting: Mutex<()>,
}

impl Exports {
    pub fn new(root: &Path) -> Result<Exports> {
        for sub in ["exports", "snapshots"] {
            std::fs::create_dir_all(root.join(sub))?;
        }
        Ok(Exports {
            root: root.to_path_buf(),
            shows_snapshots: false,
            sampler: Sampler::default(),
            snapshotting: Mutex::new(()),
        })
    }

    /// These exports, their quota usage counted at most once every `every`.
    pub fn sampled_every(mut self, every: std::time::Duration) -> Exports {
        self.sampler = Sampler::every(every);
        self
    }

    /// These exports, showing their snapshots or not.
    pub fn showing_snapshots(mut self, on: bool) -> Exports {
        self.shows_snapshots = on;
        self
    }

    /// The directory serving an NFS source `host:/export[/sub/dir…]` (or
    /// `[ip]:/…`): the export's directory and, below it, the subpath. The
    /// host is dropped so the FQDN and IP forms of one filesystem agree.
    /// Only the spelling is checked here (no empty, `.` or `..` segment, no
    /// NUL); [`Exports::mount_dir`] checks what is on disk.
    pub fn dir_of(&self, source: &str) -> Result<PathBuf> {
        let (export, below) = split_source(source)?;
        let mut dir = self.export_dir(export)?;
        dir.extend(below);
        Ok(dir)
    }

    /// The directory an NFS mount of `source` binds: [`Exports::dir_of`],
    /// when every segment below the export is a real directory (not a
    /// symlink) and its real location is inside the export. The errors read
    /// as `mount.nfs4`'s would: the node never creates a missing directory.
    pub fn mount_dir(&self, source: &str) -> Result<PathBuf> {
        let (export, below) = split_source(source)?;
        let root = self.export_dir(export)?;
        confined(&root, &below).map_err(|refusal| {
            Error::Internal(format!(
                "mount.nfs4: mounting {source} failed, reason given by server: {refusal}"
            ))
        })
    }

    /// The directory at absolute `path` inside `export`, confined to it;
    /// `/` is the export's root.
    fn inside(&self, export: &str, path: &str) -> Option<PathBuf> {
        let below = match path.strip_prefix('/')? {
            "" => Vec::new(),
            below => segments(below)?,
        };
        confined(&self.export_dir(export).ok()?, &below).ok()
    }

    /// The directory of an export path such as `/pvc-1-12d`.
    fn export_dir(&self, export: &str) -> Result<PathBuf> {
        let name = export.strip_prefix('/').unwrap_or(export);
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(Error::InvalidArgument(format!(
                "not an NFS export path: {export:?}"
            )));
        }
        Ok(self.root.join("exports").join(name))
    }

    /// Snapshot copies live under their filesystem's export name, so
    /// removing the filesystem can take them along.
    fn snapshots_of(&self, export: &str) -> Result<PathBuf> {
        let dir = self.export_dir(export)?;
        let name = dir.file_name().expect("export_dir ends in a name");
        Ok(self.root.join("snapshots").join(name))
    }

    /// The copy of `snapshot`, whichever filesystem it was taken of.
    fn find_snapshot(&self, snapshot: u64) -> Option<PathBuf> {
        std::fs::read_dir(self.root.join("snapshots"))
            .ok()?
            .flatten()
            .map(|e| e.path().join(snapshot.to_string()))
            .find(|p| p.is_dir())
    }

    pub fn create(&self, export: &str) -> Result<()> {
        std::fs::create_dir_all(self.export_dir(export)?)?;
        Ok(())
    }

    /// Copies the export's content as it is now, and shows the copy as
    /// `label` when exports show their snapshots. What the export shows is
    /// no content of it: copied along (the copy engine takes no
    /// exclusions), then dropped from the copy. Copied beside its place and
    /// renamed into it, so a process killed mid-copy never leaves a
    /// snapshot holding part of its filesystem (the fake saves the snapshot
    /// only after this returns).
    pub fn snapshot(&self, export: &str, snapshot: u64, label: &str) -> Result<()> {
        let _one = lock(&self.snapshotting);
        let to = self.snapshots_of(export)?.join(snapshot.to_string());
        let taking = copying_dir(&to);
        let _ = std::fs::remove_dir_all(&taking);
        let from = self.export_dir(export)?;
        copy_tree(&from, &taking)?;
        if self.shows_snapshots {
            match std::fs::remove_dir_all(taking.join(SNAPSHOT_DIRECTORY)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        let _ = std::fs::remove_dir_all(&to);
        std::fs::rename(&taking, &to)?;
        if !self.shows_snapshots {
            return Ok(());
        }
        shown::show(&from, label, &to)
    }

    /// Makes what the exports show match `snapshots` (`(export, id,
    /// label)` of every live snapshot) when a session starts: the state
    /// dir may come from one with another `DEV_QUIRKS`. Shows what is
    /// missing; without the quirk, shows nothing.
    pub fn show_snapshots(&self, snapshots: &[(String, u64, String)]) -> Result<()> {
        let _one = lock(&self.snapshotting);
        if !self.shows_snapshots {
            return shown::hide_all(&self.root.join("exports"));
        }
        for (export, snapshot, label) in snapshots {
            let dir = self.export_dir(export)?;
            if !dir.is_dir() || shown::is_shown(&dir, label) {
                continue;
            }
            if let Some(copy) = self.find_snapshot(*snapshot) {
                shown::show(&dir, label, &copy)?;
            }
        }
        Ok(())
    }

    /// A new export holding what the snapshot held. Copied beside it and
    /// renamed into place, so a process killed mid-copy leaves no export
    /// holding part of the snapshot (the next start copies it again, see
    /// `restore_missing`).
    pub fn restore(&self, snapshot: u64, export: &str) -> Result<()> {
        let to = self.export_dir(export)?;
        let copying = copying_dir(&to);
        let _ = std::fs::remove_dir_all(&copying);
        match self.find_snapshot(snapshot) {
            Some(from) => copy_tree(&from, &copying)?,
            None => std::fs::create_dir_all(&copying)?,
        }
        let _ = std::fs::remove_dir_all(&to);
        std::fs::rename(&copying, &to).map_err(Error::from)
    }

    /// The export of an active filesystem, made when missing: cloned from
    /// `snapshot` again for a clone whose copy a kill interrupted, else
    /// empty. An existing one is kept as it is.
    pub fn restore_missing(&self, export: &str, snapshot: Option<u64>) -> Result<()> {
        match snapshot {
            Some(snapshot) if !self.export_dir(export)?.is_dir() => self.restore(snapshot, export),
            _ => self.create(export),
        }
    }

    /// Removes the export, a clone's copy a kill interrupted, and every
    /// snapshot copy taken of it.
    pub fn remove(&self, export: &str) -> Result<()> {
        let dir = self.export_dir(export)?;
        for dir in [copying_dir(&dir), dir, self.snapshots_of(export)?] {
            match std::fs::remove_dir_all(dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        Ok(())
    }

    /// Removes the copy of `snapshot`, and what `export` shows of it as
    /// `label`.
    pub fn remove_snapshot(&self, snapshot: u64, export: &str, label: &str) -> Result<()> {
        let _one = lock(&self.snapshotting);
        if let Some(dir) = self.find_snapshot(snapshot) {
            let _ = std::fs::remove_dir_all(&dir);
            // The filesystem's directory goes with its last snapshot.
            if let Some(parent) = dir.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
        if self.shows_snapshots {
            shown::hide(&self.export_dir(export)?, label)?;
        }
        Ok(())
    }
}

/// What the fake Linode API asks of the exports: whether a quota's path
/// is a directory, and what it holds. A path that is malformed, missing or
/// reached through a symlink is no directory and has no usage.
impl ExportContent for Exports {
    fn is_directory(&self, export: &str, path: &str) -> bool {
        self.inside(export, path).is_some()
    }

    /// What the export shows of its snapshots is never counted.
    fn usage(&self, export: &str, path: &str) -> Option<DirUsage> {
        let dir = self.inside(export, path)?;
        let shown = match self.shows_snapshots {
            true => Some(self.export_dir(export).ok()?.join(SNAPSHOT_DIRECTORY)),
            false => None,
        };
        self.sampler.usage(export, path, || {
            tree_usage(&dir, shown.as_deref())
                .map_err(|e| log::warn!("dev: usage of {}: {e}", dir.display()))
                .ok()
        })
    }
}

/// `host:/export/a/b` → (`export`, [`a`, `b`]), refusing a malformed
/// source or subpath (InvalidArgument, as a mount source that can never work).
/// Where a clone's copy of its snapshot, or a snapshot's copy of its
/// export, is made before it takes its place.
fn copying_dir(export_dir: &Path) -> PathBuf {
    let name = export_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    export_dir.with_file_name(format!(".copying-{name}"))
}

fn split_source(source: &str) -> Result<(&str, Vec<&str>)> {
    let bad =
        |why: &str| Error::InvalidArgument(format!("not an NFS export source: {source:?}{why}"));
    // The host is a name or a bracketed IPv6 address: neither holds ":/".
    let (_, path) = source.split_once(":/").ok_or_else(|| bad(""))?;
    let (export, below) = path.split_once('/').unwrap_or((path, ""));
    if export.is_empty() || export.contains('\0') {
        return Err(bad(""));
    }
    if path.len() == export.len() {
        return Ok((export, Vec::new()));
    }
    let below = segments(below).ok_or_else(|| bad(" (empty, '.' or '..' segment, or NUL)"))?;
    Ok((export, below))
}

/// The segments of a relative path, `None` when one is empty, `.`, `..`
/// or holds a NUL.
fn segments(path: &str) -> Option<Vec<&str>> {
    let all: Vec<&str> = path.split('/').collect();
    all.iter()
        .all(|s| !s.is_empty() && *s != "." && *s != ".." && !s.contains('\0'))
        .then_some(all)
}

/// Why a path inside an export cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Refusal {
    Missing,
    NotADirectory,
    /// A segment is a symlink, or the real location leaves the export.
    Leaves(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Missing => f.write_str("No such file or directory"),
            Refusal::NotADirectory => f.write_str("Not a directory"),
            Refusal::Leaves(why) => write!(f, "Permission denied ({why})"),
        }
    }
}

/// `root` joined with `below`, walked one segment at a time without
/// following a symlink, and checked once more by its real location, so
/// nothing outside the export (nor a sibling through a link) is reached.
fn confined(root: &Path, below: &[&str]) -> std::result::Result<PathBuf, Refusal> {
    let mut dir = root.to_path_buf();
    for segment in std::iter::once(None).chain(below.iter().map(Some)) {
        if let Some(segment) = segment {
            dir.push(segment);
        }
        let meta = match std::fs::symlink_metadata(&dir) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Refusal::Missing),
            Err(e) => return Err(Refusal::Leaves(e.to_string())),
        };
        if meta.file_type().is_symlink() {
            return Err(Refusal::Leaves(format!(
                "{} is a symbolic link; no export path goes through one",
                dir.display()
            )));
        }
        if !meta.is_dir() {
            return Err(Refusal::NotADirectory);
        }
    }
    let real = |p: &Path| std::fs::canonicalize(p).map_err(|e| Refusal::Leaves(e.to_string()));
    if !real(&dir)?.starts_with(real(root)?) {
        return Err(Refusal::Leaves(format!(
            "{} leaves the export",
            dir.display()
        )));
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::mounter::DevMounter;
    use crate::mount::{LinuxMounter, Mounter, NfsMount};
    use crate::test_support::Scratch;

    #[test]
    fn export_dirs_follow_the_export_path_not_the_host() {
        let e = Exports {
            root: PathBuf::from("/state"),
            shows_snapshots: false,
            sampler: Sampler::default(),
            snapshotting: Mutex::new(()),
        };
        assert_eq!(
            e.dir_of("space.nfs.us-dev.example:/pvc-1").unwrap(),
            PathBuf::from("/state/exports/pvc-1")
        );
        assert_eq!(
            e.dir_of("[2001:db8::1]:/pvc-1").unwrap(),
            PathBuf::from("/state/exports/pvc-1")
        );
        assert_eq!(
            e.dir_of("h:/pvc-1/csi-volumes/v-1").unwrap(),
            PathBuf::from("/state/exports/pvc-1/csi-volumes/v-1")
        );
        for bad in [
            "nohost",
            "h:/",
            "h:/..",
            "h:",
            "",
            "h:/a/",
            "h:/a//b",
            "h:/a/./b",
            "h:/a/../b",
            "h:/a/b/..",
            "h:/a/b\0c",
        ] {
            assert!(
                matches!(e.dir_of(bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
            assert!(e.mount_dir(bad).is_err(), "{bad:?}");
        }
    }

    fn exports(tag: &str) -> (Scratch, Exports) {
        let root = Scratch::new(&format!("exports-{tag}"));
        let e = Exports::new(root.path()).unwrap();
        e.create("/a").unwrap();
        (root, e)
    }

    #[test]
    fn subpaths_mount_only_real_directories_inside_their_export() {
        let (root, e) = exports("subpaths");
        let a = e.dir_of("h:/a").unwrap();
        std::fs::create_dir_all(a.join("csi-volumes/v1")).unwrap();
        std::fs::create_dir_all(root.join("outside")).unwrap();
        std::fs::write(a.join("csi-volumes/file"), "x").unwrap();
        std::os::unix::fs::symlink("v1", a.join("csi-volumes/to-sibling")).unwrap();
        std::os::unix::fs::symlink(root.join("outside"), a.join("csi-volumes/to-outside")).unwrap();
        std::os::unix::fs::symlink("../..", a.join("csi-volumes/v1/up")).unwrap();

        assert_eq!(
            e.mount_dir("h:/a/csi-volumes/v1").unwrap(),
            a.join("csi-volumes/v1")
        );
        assert_eq!(e.mount_dir("[2001:db8::1]:/a").unwrap(), a);
        for (source, reason) in [
            ("h:/a/csi-volumes/missing", "No such file or directory"),
            ("h:/missing", "No such file or directory"),
            ("h:/a/csi-volumes/file", "Not a directory"),
            ("h:/a/csi-volumes/to-sibling", "symbolic link"),
            ("h:/a/csi-volumes/to-outside", "symbolic link"),
            ("h:/a/csi-volumes/v1/up", "symbolic link"),
            ("h:/a/csi-volumes/v1/up/outside", "symbolic link"),
        ] {
            match e.mount_dir(source) {
                Err(Error::Internal(m)) => {
                    assert!(
                        m.contains("mount.nfs4") && m.contains(reason),
                        "{source}: {m}"
                    )
                }
                other => panic!("{source}: {other:?}"),
            }
        }
        // The export itself replaced by a link out of the state dir.
        std::fs::remove_dir_all(&a).unwrap();
        std::os::unix::fs::symlink(root.join("outside"), &a).unwrap();
        assert!(matches!(e.mount_dir("h:/a"), Err(Error::Internal(_))));
    }

    #[test]
    fn quota_paths_are_directories_counted_without_leaving_them() {
        let (_root, e) = exports("usage");
        let a = e.dir_of("h:/a").unwrap();
        let v1 = a.join("csi-volumes/v1");
        std::fs::create_dir_all(v1.join("sub")).unwrap();
        std::fs::create_dir_all(a.join("csi-volumes/v2")).unwrap();
        std::fs::write(v1.join("one"), vec![0u8; 1000]).unwrap();
        std::fs::write(v1.join("sub/two"), vec![0u8; 24]).unwrap();
        std::fs::hard_link(v1.join("one"), v1.join("sub/same")).unwrap();
        std::fs::write(a.join("csi-volumes/v2/big"), vec![0u8; 1 << 20]).unwrap();
        std::os::unix::fs::symlink("../v2", v1.join("sibling")).unwrap();
        std::os::unix::fs::symlink("v2", a.join("csi-volumes/link")).unwrap();

        // v1, sub, one (and its second name), two, the link itself.
        assert_eq!(
            e.usage("/a", "/csi-volumes/v1"),
            Some(DirUsage {
                bytes: 1024,
                files: 5,
                collected_at: None,
            })
        );
        assert_eq!(
            e.usage("/a", "/csi-volumes/v2"),
            Some(DirUsage {
                bytes: 1 << 20,
                files: 2,
                collected_at: None,
            })
        );
        assert!(e.is_directory("/a", "/csi-volumes/v1"));
        // The root quota's figures: the whole export.
        assert!(e.is_directory("/a", "/"));
        assert_eq!(
            e.usage("/a", "/"),
            Some(DirUsage {
                bytes: 1024 + (1 << 20),
                files: 10,
                collected_at: None,
            })
        );
        for (export, path) in [
            ("/a", "/csi-volumes/none"),
            ("/a", "/csi-volumes/link"),
            ("/a", "/csi-volumes/v1/sibling"),
            ("/a", "/csi-volumes/v1/one"),
            ("/a", "/csi-volumes/../csi-volumes/v1"),
            ("/a", "csi-volumes/v1"),
            ("/a", ""),
            ("/a", "//"),
            ("/..", "/a"),
            ("/none", "/csi-volumes/v1"),
        ] {
            assert!(!e.is_directory(export, path), "{export} {path}");
            assert_eq!(e.usage(export, path), None, "{export} {path}");
        }
    }

    #[test]
    fn snapshot_and_restore_copy_content_at_snapshot_time() {
        let (_root, e) = exports("restore");
        std::fs::write(e.dir_of("h:/a").unwrap().join("f"), "one").unwrap();
        e.snapshot("/a", 9, "s9").unwrap();
        std::fs::write(e.dir_of("h:/a").unwrap().join("f"), "two").unwrap();
        e.restore(9, "/b").unwrap();
        assert_eq!(
            std::fs::read_to_string(e.dir_of("h:/b").unwrap().join("f")).unwrap(),
            "one"
        );
        e.remove("/a").unwrap();
        e.remove("/a").unwrap();
        assert!(!e.dir_of("h:/a").unwrap().exists());
        assert!(
            e.find_snapshot(9).is_none(),
            "a snapshot outlived its filesystem"
        );
    }

    #[test]
    fn a_clone_copy_a_kill_interrupted_is_never_the_export_and_is_made_again() {
        let (_root, e) = exports("restore-killed");
        std::fs::write(e.dir_of("h:/a").unwrap().join("f"), "one").unwrap();
        e.snapshot("/a", 9, "s9").unwrap();
        // What a kill mid-copy leaves: part of the copy beside the export,
        // no export.
        let export = e.export_dir("/b").unwrap();
        std::fs::create_dir_all(copying_dir(&export)).unwrap();
        assert!(!export.exists());
        // At activation (or the next start) the clone is copied again.
        e.restore_missing("/b", Some(9)).unwrap();
        assert_eq!(std::fs::read_to_string(export.join("f")).unwrap(), "one");
        assert!(!copying_dir(&export).exists());
        // An export already there is kept as it is.
        std::fs::write(export.join("g"), "mine").unwrap();
        e.restore_missing("/b", Some(9)).unwrap();
        assert!(export.join("g").exists());
        e.remove("/b").unwrap();
        assert!(!export.exists());
    }

    #[test]
    fn deleting_a_snapshot_keeps_the_others() {
        let (root, e) = exports("snapshots");
        e.snapshot("/a", 1, "s1").unwrap();
        e.snapshot("/a", 2, "s2").unwrap();
        e.remove_snapshot(1, "/a", "s1").unwrap();
        e.remove_snapshot(1, "/a", "s1").unwrap();
        assert!(e.find_snapshot(1).is_none());
        assert!(e.find_snapshot(2).is_some());
        e.remove_snapshot(2, "/a", "s2").unwrap();
        assert_eq!(
            std::fs::read_dir(root.join("snapshots")).unwrap().count(),
            0
        );
    }

    #[test]
    fn a_shown_snapshot_is_the_export_at_snapshot_time_outside_its_usage_and_clones() {
        let (root, e) = exports("shown");
        let e = e.showing_snapshots(true);
        let a = e.dir_of("h:/a").unwrap();
        std::fs::create_dir_all(a.join("csi-volumes/v1")).unwrap();
        std::fs::write(a.join("csi-volumes/v1/f"), "one").unwrap();
        let before = e.usage("/a", "/").unwrap();
        e.snapshot("/a", 1, "s1").unwrap();
        std::fs::write(a.join("csi-volumes/v1/f"), "two").unwrap();
        e.snapshot("/a", 2, "s2").unwrap();

        let shown = a.join(".snapshot");
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(shown.join("s1/csi-volumes/v1/f")), "one");
        assert_eq!(read(shown.join("s2/csi-volumes/v1/f")), "two");
        // A snapshot never holds what the export showed when it was taken.
        assert!(!shown.join("s2/.snapshot").exists());
        assert!(!e.find_snapshot(2).unwrap().join(".snapshot").exists());
        // Nor does a usage count it, of the root or of any path.
        assert_eq!(e.usage("/a", "/"), Some(before));
        assert_eq!(e.usage("/a", "/csi-volumes/v1").map(|u| u.bytes), Some(3));
        // A clone holds the export's content, and shows nothing.
        e.restore(2, "/b").unwrap();
        let b = e.dir_of("h:/b").unwrap();
        assert_eq!(read(b.join("csi-volumes/v1/f")), "two");
        assert!(!b.join(".snapshot").exists());

        e.remove_snapshot(1, "/a", "s1").unwrap();
        assert!(!shown.join("s1").exists() && shown.join("s2").is_dir());
        e.remove_snapshot(2, "/a", "s2").unwrap();
        assert!(!shown.exists(), "the last snapshot takes .snapshot along");
        assert_eq!(
            std::fs::read_dir(root.join("snapshots")).unwrap().count(),
            0
        );
    }

    #[test]
    fn a_session_shows_the_live_snapshots_only_with_the_quirk() {
        let (root, e) = exports("reshown");
        let a = e.dir_of("h:/a").unwrap();
        std::fs::write(a.join("f"), "one").unwrap();
        // Taken without the quirk: nothing is shown.
        e.snapshot("/a", 1, "s1").unwrap();
        assert!(!a.join(".snapshot").exists());
        let live = [("/a".to_string(), 1, "s1".to_string())];

        let on = Exports::new(root.path()).unwrap().showing_snapshots(true);
        on.show_snapshots(&live).unwrap();
        assert_eq!(
            std::fs::read_to_string(a.join(".snapshot/s1/f")).unwrap(),
            "one"
        );
        let off = Exports::new(root.path()).unwrap();
        off.show_snapshots(&live).unwrap();
        assert!(!a.join(".snapshot").exists());
        assert!(off.find_snapshot(1).is_some(), "the snapshot itself stays");
    }

    /// Set on the copy of the test binary that runs in its own mount
    /// namespace, where mounting is harmless.
    const IN_NAMESPACE: &str = "LINODE_NFS_CSI_EXPORTS_TEST_NS";

    /// Re-runs the mounting test below in a private mount namespace
    /// (util-linux `unshare`), so its bind mounts never reach the host.
    #[test]
    fn a_subpath_mount_binds_its_directory_and_nothing_beside_it() {
        let out = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--"])
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "dev::exports::tests::mounts_in_a_private_namespace",
                "--ignored",
                "--nocapture",
            ])
            .env(IN_NAMESPACE, "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("1 passed"), "{text}");
    }

    #[test]
    #[ignore = "run by a_subpath_mount_binds_its_directory_and_nothing_beside_it"]
    fn mounts_in_a_private_namespace() {
        if std::env::var_os(IN_NAMESPACE).is_none() {
            return;
        }
        let (root, e) = exports("mounts");
        let shared = e.dir_of("h:/a").unwrap().join("csi-volumes");
        std::fs::create_dir_all(shared.join("v1")).unwrap();
        std::fs::create_dir_all(shared.join("v2")).unwrap();
        std::fs::write(shared.join("v2/secret"), "v2's").unwrap();
        std::os::unix::fs::symlink("../v2", shared.join("v1/sibling")).unwrap();
        std::os::unix::fs::symlink("v2", shared.join("to-v2")).unwrap();
        let mounter = DevMounter::new(
            LinuxMounter::new(
                PathBuf::from("/bin/false"),
                std::time::Duration::from_secs(5),
            ),
            std::sync::Arc::new(e),
        );
        let target = root.join("pod/mount");
        std::fs::create_dir_all(&target).unwrap();

        mounter
            .mount_nfs4(&NfsMount {
                source: "h:/a/csi-volumes/v1",
                target: &target,
                options: &[],
            })
            .unwrap();
        std::fs::write(target.join("written"), "by the pod").unwrap();
        assert_eq!(
            std::fs::read_to_string(shared.join("v1/written")).unwrap(),
            "by the pod"
        );
        // The link resolves beside the mount, never into the export.
        assert!(!target.join("sibling/secret").exists());
        mounter.unmount(&target).unwrap();

        for (source, want) in [
            ("h:/a/csi-volumes/to-v2", "symbolic link"),
            ("h:/a/csi-volumes/v1/sibling", "symbolic link"),
            ("h:/a/csi-volumes/gone", "No such file or directory"),
            ("h:/a/csi-volumes/v1/../v2", "not an NFS export source"),
        ] {
            let err = mounter
                .mount_nfs4(&NfsMount {
                    source,
                    target: &target,
                    options: &[],
                })
                .unwrap_err();
            assert!(err.error.message().contains(want), "{source}: {err:?}");
            assert!(
                !mounter.is_mount_point(&target).unwrap(),
                "{source} mounted"
            );
        }

        // Once dev mode stops, nothing mounts again (an upkeep round would
        // otherwise keep the state directory busy while it is removed).
        mounter.unmount_all();
        let err = mounter
            .mount_nfs4(&NfsMount {
                source: "h:/a/csi-volumes/v1",
                target: &target,
                options: &[],
            })
            .unwrap_err();
        assert!(err.error.message().contains("stopping"), "{err:?}");
        assert!(!mounter.is_mount_point(&target).unwrap());
    }
}
