//! How the driver reaches the quota endpoints of a filesystem and what
//! their absence means: a backend without the quota API (a 501, or a 404
//! while the filesystem exists) is `Unimplemented`, learnt once; a backend
//! that refuses to filter quotas by path is listed whole from then on.

use super::client::{LinodeCloud, FULL_PAGE_SIZE};
use super::error::Error;
use super::types::Quota;
use super::Cloud;
use std::sync::atomic::Ordering;

impl LinodeCloud {
    pub(super) fn quotas_path(space_id: u64, fs_id: u64) -> String {
        format!("nfs/spaces/{space_id}/filesystems/{fs_id}/quotas")
    }

    /// What a failed call on the quota collection of `space_id/fs_id`
    /// means: a 501, or a 404 while the filesystem exists, is a backend
    /// without the quota API (`Unimplemented`); a 404 for a filesystem that
    /// is not there stays NotFound.
    pub(super) fn quota_collection_error(
        &self,
        e: Error,
        space_id: u64,
        fs_id: u64,
    ) -> crate::Error {
        if !e.is_missing_endpoint() {
            return e.into();
        }
        if e.status() == Some(404) {
            if let Err(missing) = self.get_filesystem(space_id, fs_id) {
                return missing;
            }
        }
        self.no_quota_api(space_id, fs_id, &e)
    }

    pub(super) fn no_quota_api(&self, space_id: u64, fs_id: u64, e: &Error) -> crate::Error {
        if !self.learnt.no_quotas.swap(true, Ordering::Relaxed) {
            log::warn!(
                "the Linode backend has no quota API (filesystem {space_id}/{fs_id} exists, its quotas endpoint answers {e}); per-path quotas are unavailable"
            );
        }
        crate::Error::Unimplemented(format!(
            "the Linode backend has no per-path quota API ({e})"
        ))
    }

    /// A quota read of `path`: filtered, or the whole list once the API
    /// refused the filter; either way only exact matches are kept.
    pub(super) fn filtered_quotas(
        &self,
        space_id: u64,
        fs_id: u64,
        path: &str,
    ) -> Result<Vec<Quota>, Error> {
        let list = Self::quotas_path(space_id, fs_id);
        let keep = |q: &Quota| q.path == path;
        if !self.learnt.no_quota_path_filter.load(Ordering::Relaxed) {
            let filter = serde_json::json!({ "path": path });
            match self.list(&list, Some(FULL_PAGE_SIZE), Some(&filter)) {
                Err(e) if e.refuses_field("X-Filter") => {
                    log::warn!(
                        "the Linode API refuses to filter quotas by path ({e}); listing whole filesystems' quotas instead from now on"
                    );
                    self.learnt
                        .no_quota_path_filter
                        .store(true, Ordering::Relaxed);
                }
                other => {
                    return other.map(|all: Vec<Quota>| all.into_iter().filter(keep).collect())
                }
            }
        }
        let all: Vec<Quota> = self.list(&list, Some(FULL_PAGE_SIZE), None)?;
        Ok(all.into_iter().filter(keep).collect())
    }
}
