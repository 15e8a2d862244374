//! The shared parents of `subdirectory` volumes, mounted on the controller:
//! each once, at `SHARE_MOUNT_DIR/<space>-<fs>`, through the `Mounter`
//! (an NFS mount in production, a bind of the emulated export in dev mode),
//! and kept mounted. Every use checks the mount table again, so one that
//! went away (or went stale) is mounted again rather than written through.
//! That check is a `statvfs` bounded by `NFS_MOUNT_TIMEOUT` (through
//! `crate::bounded`): a parent whose server does not answer in time is
//! Unavailable, to be retried, and is never mounted again on top of the
//! hung mount; while that `statvfs` has not returned, later checks of the
//! parent answer Unavailable at once rather than pile up threads.
//! What happens inside a share is `files`'; nothing here reads or
//! writes a volume's files.

use super::classes::ClassParents;
use crate::handles::VolumeId;
use crate::linode::{Filesystem, MtlsMode};
use crate::mount::probe::{Probed, Probes};
use crate::mount::{Mounter, NfsMount, StatvfsError};
use crate::mutex::lock;
use crate::Error;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const MTLS_OPTION: &str = "xprtsec=mtls";
/// Where restores' temporary filesystems are mounted, under the share dir.
const TEMPORARY: &str = ".restores";
/// `NFS_MOUNT_TIMEOUT`'s default.
const DEFAULT_STATVFS_TIMEOUT: Duration = Duration::from_secs(120);

pub struct Shares {
    mounter: Arc<dyn Mounter>,
    dir: PathBuf,
    /// One per parent, held while it is checked or mounted, so two RPCs
    /// never mount it twice, and a parent whose server hangs holds up no
    /// other.
    mounting: Mutex<BTreeMap<VolumeId, Arc<Mutex<()>>>>,
    /// Each parent's `statvfs`, bounded by `NFS_MOUNT_TIMEOUT`.
    probes: Probes,
    /// The parents the StorageClasses name (see `classes`); none without.
    classes: Option<ClassParents>,
}

impl Shares {
    /// Shares of `dir`, each check bounded by the default `NFS_MOUNT_TIMEOUT`.
    pub fn new(mounter: Arc<dyn Mounter>, dir: PathBuf) -> Shares {
        Shares {
            mounter,
            dir,
            mounting: Mutex::default(),
            probes: Probes::new(DEFAULT_STATVFS_TIMEOUT),
            classes: None,
        }
    }

    /// The same, knowing the parents `classes` name too.
    pub fn naming(self, classes: ClassParents) -> Shares {
        Shares {
            classes: Some(classes),
            ..self
        }
    }

    pub fn classes(&self) -> Option<&ClassParents> {
        self.classes.as_ref()
    }

    /// The same, each check bounded by `limit` instead.
    pub fn bounded_by(self, limit: Duration) -> Shares {
        Shares {
            probes: self.probes.bounded_by(limit),
            ..self
        }
    }

    /// Where `parent` is (or would be) mounted.
    pub fn mount_point(&self, parent: VolumeId) -> PathBuf {
        self.dir
            .join(format!("{}-{}", parent.space, parent.filesystem))
    }

    /// The parents this controller has mounted at some point (their mount
    /// points survive a restart of the process, not a new pod), for
    /// ListVolumes beside those the StorageClasses name.
    pub fn known(&self) -> BTreeSet<VolumeId> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return BTreeSet::new();
        };
        entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let (s, f) = name.split_once('-')?;
                VolumeId::parse(&format!("{s}/{f}")).ok()
            })
            .collect()
    }

    /// The root of `fs` as mounted here, mounting it first when it is not
    /// (or no longer answers). `mtls` is its Space's mode.
    pub fn root(&self, fs: &Filesystem, mtls: Option<&MtlsMode>) -> Result<PathBuf, Error> {
        let parent = VolumeId {
            space: fs.space_id,
            filesystem: fs.id,
        };
        self.mounted(fs, mtls, self.mount_point(parent), &[])
    }

    /// Where the temporary filesystem `vol` of a restore is (or would be)
    /// mounted: apart from the parents, so never taken for one.
    fn temporary_mount_point(&self, vol: VolumeId) -> PathBuf {
        self.dir
            .join(TEMPORARY)
            .join(format!("{}-{}", vol.space, vol.filesystem))
    }

    /// The root of the temporary filesystem `fs` of a restore, mounted
    /// read-only like a parent (see `root`).
    pub fn temporary_root(
        &self,
        fs: &Filesystem,
        mtls: Option<&MtlsMode>,
    ) -> Result<PathBuf, Error> {
        let vol = VolumeId {
            space: fs.space_id,
            filesystem: fs.id,
        };
        self.mounted(fs, mtls, self.temporary_mount_point(vol), &["ro"])
    }

    /// Unmounts the temporary filesystem `vol` when it is mounted here, and
    /// removes its mount point.
    pub fn release_temporary(&self, vol: VolumeId) -> Result<(), Error> {
        self.release_at(vol, self.temporary_mount_point(vol))
    }

    /// Unmounts parent `vol` (a pool filesystem being deleted) when it is
    /// mounted here, and removes its mount point.
    pub fn release(&self, vol: VolumeId) -> Result<(), Error> {
        self.release_at(vol, self.mount_point(vol))
    }

    fn release_at(&self, vol: VolumeId, target: PathBuf) -> Result<(), Error> {
        let this = lock(&self.mounting).entry(vol).or_default().clone();
        let _one = lock(&this);
        if self.mounter.is_mount_point(&target)? {
            self.mounter.unmount(&target)?;
        }
        match std::fs::remove_dir(&target) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::Internal(format!(
                "SHARE_MOUNT_DIR: remove {}: {e}",
                target.display()
            ))),
        }
    }

    /// `fs` mounted at `target` with `extra` options, mounted first when
    /// it is not (or no longer answers there).
    fn mounted(
        &self,
        fs: &Filesystem,
        mtls: Option<&MtlsMode>,
        target: PathBuf,
        extra: &[&str],
    ) -> Result<PathBuf, Error> {
        let parent = VolumeId {
            space: fs.space_id,
            filesystem: fs.id,
        };
        let this = lock(&self.mounting).entry(parent).or_default().clone();
        let _one = lock(&this);
        if self.mounter.is_mount_point(&target)? {
            match self.probe(parent, &target)? {
                Ok(()) => return Ok(target),
                Err(StatvfsError::Stale(why) | StatvfsError::Io(why)) => {
                    log::warn!(
                        "shared NFS filesystem {parent} at {}: {why}; mounting it again",
                        target.display()
                    );
                    self.mounter.unmount(&target)?;
                }
                Err(StatvfsError::Missing(why) | StatvfsError::Other(why)) => {
                    return Err(Error::Internal(format!(
                        "shared NFS filesystem {parent} at {}: {why}",
                        target.display()
                    )))
                }
            }
        }
        let source = source_of(fs)?;
        std::fs::create_dir_all(&target).map_err(|e| {
            Error::Internal(format!("SHARE_MOUNT_DIR: create {}: {e}", target.display()))
        })?;
        let mut last = None;
        for mut options in attempts(mtls) {
            options.extend(extra.iter().map(|o| o.to_string()));
            let mount = NfsMount {
                source: &source,
                target: &target,
                options: &options,
            };
            match self.mounter.mount_nfs4(&mount) {
                Ok(()) => {
                    log::info!(
                        "mounted shared NFS filesystem {parent} ({source}) at {}",
                        target.display()
                    );
                    return Ok(target);
                }
                Err(e) => last = Some(e.error),
            }
        }
        Err(last
            .unwrap_or_else(|| Error::Internal("no mount attempt".into()))
            .context(format!(
                "mount shared NFS filesystem {parent} ({source}) at {}",
                target.display()
            )))
    }
}

impl Shares {
    /// `statvfs` of the mount point of `parent`, bounded; Unavailable when
    /// it does not return in time or an earlier one still has not.
    fn probe(&self, parent: VolumeId, target: &Path) -> Result<Result<(), StatvfsError>, Error> {
        let hung = |why: String| {
            Error::Unavailable(format!(
                "shared NFS filesystem {parent} at {}: {why}: its NFS server is not answering",
                target.display()
            ))
        };
        match self.probes.probe(&self.mounter, target)? {
            Probed::Answered(result) => Ok(result.map(|_| ())),
            Probed::Hung { earlier: true } => {
                Err(hung("an earlier statvfs has not returned".into()))
            }
            Probed::Hung { earlier: false } => Err(hung(format!(
                "statvfs did not return within {:?}",
                self.probes.timeout()
            ))),
        }
    }
}

/// `host:/export`: the mount target's name, else its first address.
fn source_of(fs: &Filesystem) -> Result<String, Error> {
    fs.mount_target_fqdn
        .clone()
        .filter(|s| !s.is_empty())
        .or_else(|| fs.mount_target_ips.first().cloned())
        .ok_or_else(|| {
            Error::FailedPrecondition(format!(
                "shared NFS filesystem {}/{} has no mount target",
                fs.space_id, fs.id
            ))
        })
}

/// The export part of a filesystem's mount target (`/export`), which a
/// backend may put in front of quota paths.
pub fn export_of(fs: &Filesystem) -> Option<String> {
    let source = source_of(fs).ok()?;
    let (_, export) = source.rsplit_once(":/")?;
    Some(format!("/{export}"))
}

/// The option lists to try, as the node does for the Space's mTLS mode.
fn attempts(mtls: Option<&MtlsMode>) -> Vec<Vec<String>> {
    match mtls.map(MtlsMode::as_str) {
        Some("required") => vec![vec![MTLS_OPTION.to_string()]],
        Some("optional") => vec![vec![MTLS_OPTION.to_string()], vec![]],
        _ => vec![vec![]],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mount::{FsStats, MountTable, NfsMountError};
    use std::sync::mpsc;

    /// A parent that is mounted and whose `statvfs` blocks until released.
    struct HungServer {
        release: Mutex<mpsc::Receiver<()>>,
        mounts: Mutex<usize>,
    }

    impl Mounter for HungServer {
        fn mount_nfs4(&self, _: &NfsMount) -> Result<(), NfsMountError> {
            *lock(&self.mounts) += 1;
            Ok(())
        }
        fn bind(&self, _: &Path, _: &Path, _: &[String]) -> crate::Result<()> {
            Err(Error::Internal("no binds here".into()))
        }
        fn remount_readonly(&self, _: &Path) -> crate::Result<()> {
            Err(Error::Internal("no remounts here".into()))
        }
        fn unmount(&self, _: &Path) -> crate::Result<()> {
            Err(Error::Internal(
                "a hung parent must not be unmounted".into(),
            ))
        }
        fn detach(&self, _: &Path) -> crate::Result<()> {
            Err(Error::Internal("a hung parent must not be detached".into()))
        }
        fn mount_table(&self) -> crate::Result<MountTable> {
            Err(Error::Internal("no mount table here".into()))
        }
        fn is_mount_point(&self, _: &Path) -> crate::Result<bool> {
            Ok(true)
        }
        fn statvfs(&self, _: &Path) -> Result<FsStats, StatvfsError> {
            let _ = lock(&self.release).recv();
            Err(StatvfsError::Io("released".into()))
        }
    }

    #[test]
    fn a_hung_parent_is_unavailable_in_time_and_not_mounted_over() {
        let (release, hold) = mpsc::channel();
        let server = Arc::new(HungServer {
            release: Mutex::new(hold),
            mounts: Mutex::new(0),
        });
        let shares = Shares::new(
            server.clone(),
            std::env::temp_dir().join(format!("lnc-shares-hung-{}", std::process::id())),
        )
        .bounded_by(Duration::from_millis(100));
        let parent = fs(Some("s.nfs.example:/team-9"), &[]);
        let started = std::time::Instant::now();
        let first = shares.root(&parent, None);
        assert!(
            matches!(&first, Err(Error::Unavailable(m)) if m.contains("within")),
            "{first:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(10));
        // The first statvfs still hangs: the next check does not start another.
        let second = shares.root(&parent, None);
        assert!(
            matches!(&second, Err(Error::Unavailable(m)) if m.contains("earlier")),
            "{second:?}"
        );
        assert_eq!(
            *lock(&server.mounts),
            0,
            "nothing mounted over the hung mount"
        );
        release.send(()).unwrap();
    }

    fn fs(fqdn: Option<&str>, ips: &[&str]) -> Filesystem {
        serde_json::from_value(serde_json::json!({
            "id": 9, "space_id": 7, "label": "team", "region": "us-ord", "status": "active",
            "mount_target_fqdn": fqdn, "mount_target_ips": ips,
        }))
        .unwrap()
    }

    #[test]
    fn the_source_and_export_come_from_the_mount_target() {
        let named = fs(Some("s.nfs.example:/team-9"), &["[2001:db8::9]:/team-9"]);
        assert_eq!(source_of(&named).unwrap(), "s.nfs.example:/team-9");
        assert_eq!(export_of(&named).as_deref(), Some("/team-9"));
        let bare = fs(None, &["[2001:db8::9]:/team-9"]);
        assert_eq!(source_of(&bare).unwrap(), "[2001:db8::9]:/team-9");
        assert_eq!(export_of(&bare).as_deref(), Some("/team-9"));
        assert!(matches!(
            source_of(&fs(None, &[])),
            Err(Error::FailedPrecondition(_))
        ));
    }

    #[test]
    fn mtls_attempts_follow_the_space() {
        assert_eq!(attempts(None), vec![Vec::<String>::new()]);
        assert_eq!(
            attempts(Some(&MtlsMode::from("optional"))),
            vec![vec![MTLS_OPTION.to_string()], vec![]]
        );
        assert_eq!(
            attempts(Some(&MtlsMode::from("required"))),
            vec![vec![MTLS_OPTION.to_string()]]
        );
    }
}
