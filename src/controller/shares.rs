//! The shared parents of `subdirectory` volumes, mounted on the controller:
//! each once, at `SHARE_MOUNT_DIR/<space>-<fs>`, through the `Mounter`
//! (an NFS mount in production, a bind of the emulated export in dev mode),
//! and kept mounted. Every use checks the mount table again, so one that
//! went away (or went stale) is mounted again rather than written through.
//! What happens inside a share is `directories`'; nothing here reads or
//! writes a volume's files.

use crate::handles::VolumeId;
use crate::linode::{Filesystem, MtlsMode};
use crate::mount::{Mounter, StatvfsError};
use crate::mutex::lock;
use crate::Error;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

const MTLS_OPTION: &str = "xprtsec=mtls";

pub struct Shares {
    mounter: Arc<dyn Mounter>,
    dir: PathBuf,
    /// One per parent, held while it is checked or mounted, so two RPCs
    /// never mount it twice, and a parent whose server hangs holds up no
    /// other.
    mounting: Mutex<BTreeMap<VolumeId, Arc<Mutex<()>>>>,
}

impl Shares {
    pub fn new(mounter: Arc<dyn Mounter>, dir: PathBuf) -> Shares {
        Shares {
            mounter,
            dir,
            mounting: Mutex::default(),
        }
    }

    /// Where `parent` is (or would be) mounted.
    pub fn mount_point(&self, parent: VolumeId) -> PathBuf {
        self.dir
            .join(format!("{}-{}", parent.space, parent.filesystem))
    }

    /// The parents this controller has mounted at some point (their mount
    /// points survive restarts), for ListVolumes.
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
        let target = self.mount_point(parent);
        let this = lock(&self.mounting).entry(parent).or_default().clone();
        let _one = lock(&this);
        if self.mounter.is_mount_point(&target)? {
            match self.mounter.statvfs(&target) {
                Ok(_) => return Ok(target),
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
        for options in attempts(mtls) {
            match self.mounter.mount_nfs4(&source, &target, &options) {
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
