//! DeleteVolume of a directory volume: the directory removed, archived or
//! kept as its marker says (`files`), what it keeps recorded (`kept`), its
//! quota deleted, the marker last. Only a directory with the driver's
//! marker is a volume; nothing else on the parent is touched. A volume
//! still being filled has its copy stopped first, and a clone the
//! snapshot it was copied through.

use crate::controller::kind::directory::ledger::account::Purpose;
use crate::controller::kind::directory::ledger::quotas;
use crate::controller::kind::directory::parent::files;
use crate::controller::kind::directory::parent::files::Removed;
use crate::controller::kind::directory::restore;
use crate::controller::kind::directory::restore::sweep_temporaries;
use crate::controller::kind::directory::volume::lookup::quota_list;
use crate::controller::kind::directory::volume::quota_changes;
use crate::controller::request::params::OnDelete;
use crate::controller::state::controller::Controller;
use crate::controller::state::lock_keys::{Doubt, Lock};
use crate::controller::state::tags::is_any_volume;
use crate::handles::SubdirId;
use crate::linode::Quota;
use crate::Error;
use std::sync::Arc;

/// DeleteVolume of `{s}/{f}/{name}`. A parent that is gone took the
/// directory with it (OK), and so is one that is a whole-filesystem volume
/// (it holds no directory volumes: nothing of it is touched); one that
/// cannot be reached or mounted fails the call, to be retried. The
/// directory goes first (as its marker says), its quota next, so a delete
/// stopped halfway leaves the cap in place, and the marker last. Without
/// the marker there is no volume: a quota at its path is someone else's.
pub fn delete(c: &Arc<Controller>, id: SubdirId) -> Result<(), Error> {
    let _guard = c.lock(Lock::Directory(id.clone()))?;
    if c.fills.cancel(&c.copies, &id) {
        return Err(Error::Unavailable(format!(
            "the copy filling volume {id} is being stopped; retry the delete"
        )));
    }
    let parent = match c.cloud.get_filesystem(id.space, id.filesystem) {
        Ok(fs) if is_any_volume(&fs) => {
            log::info!(
                "DeleteVolume {id}: NFS filesystem {} is a volume, not a shared filesystem; there is no such directory volume",
                id.parent()
            );
            return Ok(());
        }
        Ok(fs) => fs,
        Err(Error::NotFound(_)) => {
            log::info!(
                "DeleteVolume {id}: its shared filesystem is gone, and the directory with it"
            );
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let mtls = c.spaces.mtls_mode(id.space)?;
    let root = c.shares.root(&parent, mtls.as_ref())?;
    // A fill that never finished (or whose job died before letting go)
    // leaves what it held of its source: it goes with the volume.
    let marker = files::read_marker(&root, &id.name)?.filter(|m| m.volume_id == id.to_string());
    if marker.as_ref().is_some_and(|m| !m.is_of(c.marks.cluster())) {
        log::info!("DeleteVolume {id}: another cluster's volume; left untouched");
        return Ok(());
    }
    let filling = marker.as_ref().is_some_and(|m| m.filling);
    // A directory that stays records what its quota last counted as used,
    // so that count must be fresh; a deleted one needs only its quota.
    let purpose = match marker.as_ref().map(|m| m.on_delete) {
        Some(OnDelete::Delete) | None => Purpose::Read,
        Some(_) => Purpose::Fresh,
    };
    let source = marker
        .and_then(|m| m.source)
        .and_then(|s| restore::source_of(&s).ok());
    if let Some(source) = &source {
        restore::let_go(c, source, &id)?;
    }
    // Its copy may have died with an earlier controller, leaving the
    // temporary filesystem it copied from.
    if filling {
        sweep_temporaries(c, id.space)?;
    }
    let quotas = match quota_list(c, &parent, purpose).1 {
        Ok(all) => all,
        Err(Error::Unimplemented(_) | Error::NotFound(_)) => Vec::new(),
        Err(e) => return Err(e),
    };
    let own: Vec<&Quota> = quotas
        .iter()
        .filter(|q| quotas::is_for(q, &parent, &id.name))
        .collect();
    // What an archived or retained directory keeps: what its quota saw.
    let kept_bytes = own
        .first()
        .and_then(|q| q.used_capacity_bytes.or(q.max_capacity_bytes))
        .unwrap_or(0);
    let removed = files::remove(
        &root,
        &id.name,
        &id.to_string(),
        (c.marks.cluster(), kept_bytes),
    )?;
    // No longer a volume: its usage series go now, not at the next round.
    c.observed.forget(&id);
    match removed {
        Removed::Gone => {
            c.in_doubt.clear(&Doubt::Quota(id.clone()));
            return Ok(());
        }
        Removed::Archived(to) => log::info!("DeleteVolume {id}: archived to {}", to.display()),
        Removed::Retained => {
            log::info!("DeleteVolume {id}: directory retained (on-delete: retain)")
        }
        Removed::Deleted => {}
    }
    for q in own {
        quota_changes::remove(c, &id, q.id)?;
    }
    c.in_doubt.clear(&Doubt::Quota(id.clone()));
    files::forget(&root, &id.name)
}
