//! `LinodeCloud`: the `Cloud` trait as the Linode API's endpoints — which
//! path, filter, page size and body each intent is, and what an answer of
//! each means (a missing endpoint, a refused filter). Everything about one
//! request (URL, auth, retries, pacing, pages, error classification) is the
//! transport's; nothing here speaks HTTP itself.

use super::answer::Method;
use super::error::{Error, WriteError};
use super::pacer::{RateLimitState, RequestClass};
use super::transport::{LinodeSettings, Transport};
use super::types::{
    CloneFilesystem, Filesystem, FilesystemAccessPolicy, FilesystemAccessPolicyUpdate, Instance,
    InstanceConfig, InstanceInterface, NewFilesystem, NewQuota, Page, Quota, QuotaUpdate, Snapshot,
    Space, SpaceAccessPolicy,
};
use super::Cloud;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub(crate) use super::transport::pem_certificates;

/// The page size of lists the driver reads whole (the API maximum): fewer
/// of the scarce paginated requests.
pub(super) const FULL_PAGE_SIZE: u32 = 500;
/// At most this many terms (ids, labels) go into one `X-Filter` (about 6 KB
/// of header at most); more, and the whole list is cheaper than several
/// filtered ones.
const MAX_FILTER_TERMS: usize = 100;

/// What this backend turned out not to offer, learnt once and shared by
/// every view of the client.
#[derive(Debug, Default)]
pub(super) struct Learnt {
    /// The API refused an `+or` filter of filesystem ids and labels.
    no_match_filter: AtomicBool,
    /// The API refused to filter filesystems by tag.
    no_tag_filter: AtomicBool,
    /// The backend was seen without a per-filesystem access-policy
    /// endpoint (warned about once; every read still asks, since a
    /// policy may appear later than its filesystem; new squash policies
    /// are refused up front).
    no_filesystem_policy: AtomicBool,
    /// The API refused to filter quotas by path.
    pub(super) no_quota_path_filter: AtomicBool,
    /// The backend was seen without the quota API (warned about once).
    pub(super) no_quotas: AtomicBool,
}

/// The real Linode API behind the `Cloud` trait.
#[derive(Debug, Clone)]
pub struct LinodeCloud {
    transport: Transport,
    pub(super) learnt: Arc<Learnt>,
}

impl LinodeCloud {
    pub fn new(settings: LinodeSettings) -> crate::Result<LinodeCloud> {
        Ok(LinodeCloud {
            transport: Transport::new(settings)?,
            learnt: Arc::default(),
        })
    }

    /// The token's budget of `class` as the API last reported it.
    pub fn rate_limit(&self, class: RequestClass) -> RateLimitState {
        self.transport.rate_limit(class)
    }

    fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        self.transport.get(path)
    }

    pub(super) fn list<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        page_size: Option<u32>,
        filter: Option<&serde_json::Value>,
    ) -> Result<Vec<T>, Error> {
        self.transport.list(path, page_size, filter)
    }

    /// A filtered list of filesystems, or, once the API has refused this
    /// filter (`refused` remembers it), the whole list; `keep` picks the
    /// wanted ones from either, so what the API did with the filter never
    /// matters.
    fn filtered_filesystems(
        &self,
        space_id: u64,
        filter: &serde_json::Value,
        refused: &AtomicBool,
        keep: impl Fn(&Filesystem) -> bool,
    ) -> Result<Vec<Filesystem>, Error> {
        let path = format!("nfs/spaces/{space_id}/filesystems");
        if !refused.load(Ordering::Relaxed) {
            match self.list(&path, Some(FULL_PAGE_SIZE), Some(filter)) {
                Err(e) if e.refuses_field("X-Filter") => {
                    log::warn!(
                        "the Linode API refuses the filesystem filter {filter} ({e}); listing whole spaces instead from now on"
                    );
                    refused.store(true, Ordering::Relaxed);
                }
                other => {
                    return other
                        .map(|all: Vec<Filesystem>| all.into_iter().filter(&keep).collect())
                }
            }
        }
        let all: Vec<Filesystem> = self.list(&path, Some(FULL_PAGE_SIZE), None)?;
        Ok(all.into_iter().filter(keep).collect())
    }
}

/// `crate::Error` for a failed call, with the intent in front.
fn ctx<T>(r: Result<T, Error>, what: impl FnOnce() -> String) -> crate::Result<T> {
    r.map_err(|e| crate::Error::from(e).context(what()))
}

/// The same for a write, keeping whether it may still be carried out.
fn write_ctx<T>(r: Result<T, Error>, what: impl FnOnce() -> String) -> Result<T, WriteError> {
    r.map_err(|e| WriteError::new(e, what()))
}

#[derive(Serialize)]
struct CreateFilesystemBody<'a> {
    label: &'a str,
    region: &'a str,
    max_capacity_bytes: i64,
    protocol_versions: [&'a str; 1],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    tags: &'a [String],
}

#[derive(Serialize)]
struct CreateSnapshotBody<'a> {
    label: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    tags: &'a [String],
}

#[derive(Serialize)]
struct UpdateFilesystemBody<'a> {
    tags: &'a [String],
}

/// The interfaces endpoint is documented with two envelopes; accept both.
#[derive(Deserialize)]
#[serde(untagged)]
enum InterfacesReply {
    Plain { interfaces: Vec<InstanceInterface> },
    Paged(Page<InstanceInterface>),
}

impl Cloud for LinodeCloud {
    fn single_attempt(&self) -> Arc<dyn Cloud> {
        Arc::new(LinodeCloud {
            transport: self.transport.single_attempt(),
            learnt: self.learnt.clone(),
        })
    }

    fn finishing(&self) -> Arc<dyn Cloud> {
        Arc::new(LinodeCloud {
            transport: self.transport.finishing(),
            learnt: self.learnt.clone(),
        })
    }

    fn rate_limit(&self, class: RequestClass) -> RateLimitState {
        self.transport.rate_limit(class)
    }

    fn list_spaces(&self) -> crate::Result<Vec<Space>> {
        ctx(self.list("nfs/spaces", None, None), || {
            "list NFS spaces".to_string()
        })
    }

    fn get_space(&self, space_id: u64) -> crate::Result<Space> {
        ctx(self.get(&format!("nfs/spaces/{space_id}")), || {
            format!("get NFS space {space_id}")
        })
    }

    fn find_spaces_by_label(&self, label: &str) -> crate::Result<Vec<Space>> {
        let filter = serde_json::json!({ "label": label });
        ctx(self.list("nfs/spaces", None, Some(&filter)), || {
            format!("find NFS spaces labelled {label:?}")
        })
    }

    fn get_space_access_policy(&self, space_id: u64) -> crate::Result<Option<SpaceAccessPolicy>> {
        let policy = match self.get(&format!("nfs/spaces/{space_id}/access-policy")) {
            Ok(policy) => Ok(Some(policy)),
            // Backends without the endpoint answer 404 or 501 (linode-api.md
            // §3.4); only here does 501 mean "absent" rather than a failure.
            Err(e) if e.is_missing_endpoint() => Ok(None),
            Err(e) => Err(e),
        };
        ctx(policy, || {
            format!("get access policy of NFS space {space_id}")
        })
    }

    fn list_filesystems(&self, space_id: u64) -> crate::Result<Vec<Filesystem>> {
        ctx(
            self.list(&format!("nfs/spaces/{space_id}/filesystems"), None, None),
            || format!("list filesystems of NFS space {space_id}"),
        )
    }

    fn find_filesystems(
        &self,
        space_id: u64,
        label: &str,
        region: &str,
    ) -> crate::Result<Vec<Filesystem>> {
        let filter = serde_json::json!({ "label": label, "region": region });
        ctx(
            self.list(
                &format!("nfs/spaces/{space_id}/filesystems"),
                None,
                Some(&filter),
            ),
            || format!("find filesystem {label:?} in {region} in NFS space {space_id}"),
        )
    }

    fn create_filesystem(
        &self,
        space_id: u64,
        fs: &NewFilesystem,
    ) -> Result<Filesystem, WriteError> {
        let body = CreateFilesystemBody {
            label: &fs.label,
            region: &fs.region,
            max_capacity_bytes: fs.max_capacity_bytes,
            protocol_versions: ["nfsv4"],
            tags: &fs.tags,
        };
        write_ctx(
            self.transport.send(
                Method::Post,
                &format!("nfs/spaces/{space_id}/filesystems"),
                &body,
            ),
            || format!("create filesystem {:?} in NFS space {space_id}", fs.label),
        )
    }

    fn find_filesystems_by_ids(
        &self,
        space_id: u64,
        ids: &[u64],
    ) -> crate::Result<Vec<Filesystem>> {
        self.find_filesystems_matching(space_id, ids, &[])
    }

    fn find_filesystems_matching(
        &self,
        space_id: u64,
        ids: &[u64],
        labels: &[&str],
    ) -> crate::Result<Vec<Filesystem>> {
        let what = || {
            format!(
                "list filesystems {ids:?} and those labelled {labels:?} of NFS space {space_id}"
            )
        };
        let any: Vec<serde_json::Value> = ids
            .iter()
            .map(|id| serde_json::json!({ "id": id }))
            .chain(labels.iter().map(|l| serde_json::json!({ "label": l })))
            .collect();
        let refused = if any.len() <= MAX_FILTER_TERMS {
            &self.learnt.no_match_filter
        } else {
            &AtomicBool::new(true)
        };
        let filter = serde_json::json!({ "+or": any });
        ctx(
            self.filtered_filesystems(space_id, &filter, refused, |fs| {
                ids.contains(&fs.id) || labels.contains(&fs.label.as_str())
            }),
            what,
        )
    }

    fn find_filesystems_by_tag(&self, space_id: u64, tag: &str) -> crate::Result<Vec<Filesystem>> {
        let filter = serde_json::json!({ "tags": tag });
        // A backend may ignore the filter as well as refuse it: only what
        // carries the tag is returned either way.
        ctx(
            self.filtered_filesystems(space_id, &filter, &self.learnt.no_tag_filter, |fs| {
                fs.tags.iter().any(|t| t == tag)
            }),
            || format!("list filesystems tagged {tag:?} in NFS space {space_id}"),
        )
    }

    fn update_filesystem_tags(
        &self,
        space_id: u64,
        fs_id: u64,
        tags: &[String],
    ) -> crate::Result<Filesystem> {
        ctx(
            self.transport.send(
                Method::Put,
                &format!("nfs/spaces/{space_id}/filesystems/{fs_id}"),
                &UpdateFilesystemBody { tags },
            ),
            || format!("update tags of filesystem {space_id}/{fs_id}"),
        )
    }

    fn get_filesystem(&self, space_id: u64, fs_id: u64) -> crate::Result<Filesystem> {
        ctx(
            self.get(&format!("nfs/spaces/{space_id}/filesystems/{fs_id}")),
            || format!("get filesystem {space_id}/{fs_id}"),
        )
    }

    fn delete_filesystem(&self, space_id: u64, fs_id: u64) -> crate::Result<()> {
        ctx(
            self.transport
                .delete(&format!("nfs/spaces/{space_id}/filesystems/{fs_id}")),
            || format!("delete filesystem {space_id}/{fs_id}"),
        )
    }

    fn get_filesystem_access_policy(
        &self,
        space_id: u64,
        fs_id: u64,
    ) -> crate::Result<Option<FilesystemAccessPolicy>> {
        let what = || format!("get access policy of filesystem {space_id}/{fs_id}");
        let missing = |c: &LinodeCloud| -> crate::Result<Option<FilesystemAccessPolicy>> {
            // The filesystem says whether it is the endpoint or the
            // filesystem that is missing.
            c.get_filesystem(space_id, fs_id)
                .map_err(|e| e.context(what()))?;
            if !c.learnt.no_filesystem_policy.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "the Linode backend has no per-filesystem access policy (filesystem {space_id}/{fs_id} exists, its access-policy endpoint does not); node mode and squash policies are unavailable"
                );
            }
            Ok(None)
        };
        match self.get(&format!(
            "nfs/spaces/{space_id}/filesystems/{fs_id}/access-policy"
        )) {
            Ok(policy) => Ok(Some(policy)),
            // Backends without the endpoint answer 404 or 501 (linode-api.md
            // §3.4), like the Space's.
            Err(e) if e.is_missing_endpoint() => missing(self),
            Err(e) => ctx(Err(e), what),
        }
    }

    fn lacks_filesystem_policies(&self) -> bool {
        self.learnt.no_filesystem_policy.load(Ordering::Relaxed)
    }

    fn put_filesystem_access_policy(
        &self,
        space_id: u64,
        fs_id: u64,
        policy: &FilesystemAccessPolicyUpdate,
    ) -> Result<FilesystemAccessPolicy, WriteError> {
        write_ctx(
            self.transport.send(
                Method::Put,
                &format!("nfs/spaces/{space_id}/filesystems/{fs_id}/access-policy"),
                policy,
            ),
            || format!("update access policy of filesystem {space_id}/{fs_id}"),
        )
    }

    fn list_snapshots(&self, space_id: u64, fs_id: u64) -> crate::Result<Vec<Snapshot>> {
        ctx(
            self.list(
                &format!("nfs/spaces/{space_id}/filesystems/{fs_id}/snapshots"),
                Some(FULL_PAGE_SIZE),
                None,
            ),
            || format!("list snapshots of filesystem {space_id}/{fs_id}"),
        )
    }

    fn create_snapshot(
        &self,
        space_id: u64,
        fs_id: u64,
        label: &str,
        tags: &[String],
    ) -> Result<Snapshot, WriteError> {
        write_ctx(
            self.transport.send(
                Method::Post,
                &format!("nfs/spaces/{space_id}/filesystems/{fs_id}/snapshots"),
                &CreateSnapshotBody { label, tags },
            ),
            || format!("create snapshot {label:?} of filesystem {space_id}/{fs_id}"),
        )
    }

    fn get_snapshot(&self, space_id: u64, fs_id: u64, snap_id: u64) -> crate::Result<Snapshot> {
        ctx(
            self.get(&format!(
                "nfs/spaces/{space_id}/filesystems/{fs_id}/snapshots/{snap_id}"
            )),
            || format!("get snapshot {space_id}/{fs_id}/{snap_id}"),
        )
    }

    fn delete_snapshot(&self, space_id: u64, fs_id: u64, snap_id: u64) -> crate::Result<()> {
        ctx(
            self.transport.delete(&format!(
                "nfs/spaces/{space_id}/filesystems/{fs_id}/snapshots/{snap_id}"
            )),
            || format!("delete snapshot {space_id}/{fs_id}/{snap_id}"),
        )
    }

    fn clone_snapshot(
        &self,
        space_id: u64,
        fs_id: u64,
        snap_id: u64,
        clone: &CloneFilesystem,
    ) -> Result<Filesystem, WriteError> {
        write_ctx(
            self.transport.send(
                Method::Post,
                &format!("nfs/spaces/{space_id}/filesystems/{fs_id}/snapshots/{snap_id}/clone"),
                clone,
            ),
            || {
                format!(
                    "clone snapshot {space_id}/{fs_id}/{snap_id} into {:?}",
                    clone.label
                )
            },
        )
    }

    fn get_instance(&self, linode_id: u64) -> crate::Result<Instance> {
        ctx(self.get(&format!("linode/instances/{linode_id}")), || {
            format!("get Linode instance {linode_id}")
        })
    }

    fn list_instance_configs(&self, linode_id: u64) -> crate::Result<Vec<InstanceConfig>> {
        ctx(
            self.list(&format!("linode/instances/{linode_id}/configs"), None, None),
            || format!("list configs of Linode instance {linode_id}"),
        )
    }

    fn list_instance_interfaces(&self, linode_id: u64) -> crate::Result<Vec<InstanceInterface>> {
        let path = format!("linode/instances/{linode_id}/interfaces");
        let all = self
            .transport
            .page::<InterfacesReply>(&path, 1, None, None)
            .and_then(|reply| match reply {
                InterfacesReply::Plain { interfaces } => Ok(interfaces),
                InterfacesReply::Paged(first) => {
                    self.transport.rest_of_pages(&path, first, None, None)
                }
            });
        ctx(all, || {
            format!("list interfaces of Linode instance {linode_id}")
        })
    }
    fn list_quotas(&self, space_id: u64, fs_id: u64) -> crate::Result<Vec<Quota>> {
        self.list(
            &Self::quotas_path(space_id, fs_id),
            Some(FULL_PAGE_SIZE),
            None,
        )
        .map_err(|e| {
            self.quota_collection_error(e, space_id, fs_id)
                .context(format!("list quotas of filesystem {space_id}/{fs_id}"))
        })
    }

    fn find_quotas_by_path(
        &self,
        space_id: u64,
        fs_id: u64,
        path: &str,
    ) -> crate::Result<Vec<Quota>> {
        self.filtered_quotas(space_id, fs_id, path).map_err(|e| {
            self.quota_collection_error(e, space_id, fs_id)
                .context(format!(
                    "find quota {path:?} of filesystem {space_id}/{fs_id}"
                ))
        })
    }

    fn create_quota(
        &self,
        space_id: u64,
        fs_id: u64,
        quota: &NewQuota,
    ) -> Result<Quota, WriteError> {
        let what = || {
            format!(
                "create quota {:?} of filesystem {space_id}/{fs_id}",
                quota.path
            )
        };
        match self
            .transport
            .send(Method::Post, &Self::quotas_path(space_id, fs_id), quota)
        {
            // Neither a missing endpoint nor a missing filesystem made it.
            Err(e) if e.is_missing_endpoint() => Err(WriteError {
                error: self
                    .quota_collection_error(e, space_id, fs_id)
                    .context(what()),
                maybe_applied: false,
            }),
            other => write_ctx(other, what),
        }
    }

    fn get_quota(&self, space_id: u64, fs_id: u64, quota_id: u64) -> crate::Result<Quota> {
        let what = || format!("get quota {space_id}/{fs_id}/{quota_id}");
        let path = format!("{}/{quota_id}", Self::quotas_path(space_id, fs_id));
        match self.get(&path) {
            Err(e) if e.status() == Some(501) => {
                Err(self.no_quota_api(space_id, fs_id, &e).context(what()))
            }
            other => ctx(other, what),
        }
    }

    fn update_quota(
        &self,
        space_id: u64,
        fs_id: u64,
        quota_id: u64,
        update: &QuotaUpdate,
    ) -> Result<Quota, WriteError> {
        let what = || format!("update quota {space_id}/{fs_id}/{quota_id}");
        let path = format!("{}/{quota_id}", Self::quotas_path(space_id, fs_id));
        match self.transport.send(Method::Put, &path, update) {
            Err(e) if e.status() == Some(501) => Err(WriteError {
                error: self.no_quota_api(space_id, fs_id, &e).context(what()),
                maybe_applied: false,
            }),
            other => write_ctx(other, what),
        }
    }

    fn delete_quota(&self, space_id: u64, fs_id: u64, quota_id: u64) -> crate::Result<()> {
        let what = || format!("delete quota {space_id}/{fs_id}/{quota_id}");
        let path = format!("{}/{quota_id}", Self::quotas_path(space_id, fs_id));
        match self.transport.delete(&path) {
            Err(e) if e.status() == Some(501) => {
                Err(self.no_quota_api(space_id, fs_id, &e).context(what()))
            }
            other => ctx(other, what),
        }
    }
}
