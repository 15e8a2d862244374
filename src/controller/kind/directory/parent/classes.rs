//! The shared parents the cluster's StorageClasses name: every class whose
//! provisioner is this driver and whose parameters say `volume-type:
//! subdirectory` names one (`shared-filesystem-id` or `-label`, in its
//! Space). They are the authoritative list of parents, which the mount
//! points under `SHARE_MOUNT_DIR` are not (a rescheduled controller starts
//! with none), so ListVolumes lists the union of the two.
//!
//! Each parent is resolved once per process and remembered, a miss too (a
//! label lookup is one of Linode's scarce paginated requests, so never one
//! per call): a parent made or recreated later is found again once a
//! create mounts it. A class naming its parent and Space by id costs no
//! Linode request at all. The classes themselves are read from the API
//! server on every complete listing; when it cannot be read, the listing
//! falls back to the parents mounted here, with a warning, rather than
//! fail (volumes of parents never mounted since the restart are then
//! missing from it). How a parent resolves (the Space, the label lookup)
//! is the caller's (`inspect`); nothing here calls Linode, mounts, writes
//! or decides codes.

use crate::build_info::DRIVER_NAME;
use crate::controller::request::params::{KindParams, Params, ParentRef, SpaceRef, SubdirParams};
use crate::handles::VolumeId;
use crate::kube::KubeClient;
use crate::mutex::lock;
use crate::Error;
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

/// Where the StorageClasses are read, and what each parent resolved to.
pub struct ClassParents {
    kube: KubeClient,
    resolved: Mutex<HashMap<(SpaceRef, ParentRef), Vec<VolumeId>>>,
}

impl ClassParents {
    pub fn new(kube: KubeClient) -> ClassParents {
        ClassParents {
            kube,
            resolved: Mutex::default(),
        }
    }
}

impl ClassParents {
    /// The parameters of this driver's `subdirectory` StorageClasses (those
    /// that parse); Err when the StorageClasses cannot be read.
    pub fn directory_classes(&self) -> Result<Vec<(SpaceRef, SubdirParams)>, Error> {
        Ok(self
            .kube
            .list_storage_classes()?
            .iter()
            .filter(|s| s.provisioner == DRIVER_NAME)
            .filter_map(|s| Params::parse(&s.parameters).ok())
            .filter_map(|p| match p.kind {
                KindParams::Directory(sub) => Some((p.space, sub)),
                KindParams::Filesystem(_) => None,
            })
            .collect())
    }

    /// The parents the StorageClasses of this driver name, as far as they
    /// resolve: each by `resolve` once, remembered (a miss too). Only a
    /// failing lookup fails it (to be retried); StorageClasses that cannot
    /// be read give none, with a warning.
    pub fn parents(
        &self,
        mut resolve: impl FnMut(&SpaceRef, &ParentRef) -> Result<Resolved, Error>,
    ) -> Result<BTreeSet<VolumeId>, Error> {
        let listed = match self.kube.list_storage_classes() {
            Ok(listed) => listed,
            Err(e) => {
                log::warn!(
                    "ListVolumes: the StorageClasses cannot be read ({e}); directory volumes are listed only from the shared filesystems mounted here"
                );
                return Ok(BTreeSet::new());
            }
        };
        let mut parents = BTreeSet::new();
        for class in listed.iter().filter(|s| s.provisioner == DRIVER_NAME) {
            let params = match Params::parse(&class.parameters) {
                Ok(p) => p,
                Err(e) => {
                    log::debug!("StorageClass {}: {e}", class.name);
                    continue;
                }
            };
            let KindParams::Directory(sub) = params.kind else {
                continue;
            };
            // A pool's filesystems come and go: looked up every time.
            let remembered = !matches!(sub.parent, ParentRef::Pool(_));
            let key = (params.space, sub.parent);
            let known = lock(&self.resolved).get(&key).cloned();
            let parent = match known {
                Some(parent) => parent,
                None => match resolve(&key.0, &key.1)? {
                    Resolved::Known(parent) => {
                        if parent.is_empty() {
                            log::info!(
                                "StorageClass {}: its shared NFS filesystem is not there (yet)",
                                class.name
                            );
                        }
                        if remembered {
                            lock(&self.resolved).insert(key, parent.clone());
                        }
                        parent
                    }
                    Resolved::NotNow(why) => {
                        log::warn!("StorageClass {}: its shared NFS filesystem cannot be looked up now: {why}", class.name);
                        Vec::new()
                    }
                },
            };
            parents.extend(parent);
        }
        Ok(parents)
    }
}

/// What a parent resolved to.
pub enum Resolved {
    /// The filesystems to list volumes of (none when there is none, or no
    /// single one, for a label; a pool's): remembered, but for a pool's.
    Known(Vec<VolumeId>),
    /// The cluster's region cannot be read now: asked again next time.
    NotNow(Error),
}
