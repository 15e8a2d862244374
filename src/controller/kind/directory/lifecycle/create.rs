//! CreateVolume of a `subdirectory` class: a directory of a shared
//! filesystem (the parent: the one the class names, or the one its pool
//! places the volume on) with its ownership marker and, unless the class says
//! otherwise, a backend quota that caps it. Retries and restarts are
//! idempotent: the directory name is deterministic, the marker says whose
//! it is, the quota is found by path. The parent is mounted through
//! `shares`, its files changed through `files`, its quotas found through
//! `quotas`, its room claimed through `room`; waits park on the poller.

use crate::config::VolumeExpansion;
use crate::controller::kind::directory::ledger::account::{Purpose, Reason};
use crate::controller::kind::directory::ledger::quotas;
use crate::controller::kind::directory::ledger::room::{Claim, Listed};
use crate::controller::kind::directory::parent::files;
use crate::controller::kind::directory::parent::files::{Marker, Ownership};
use crate::controller::kind::directory::parent::kept;
use crate::controller::kind::directory::volume::lookup::{parent_of, quota_list};
use crate::controller::kind::directory::volume::quota_changes;
use crate::controller::kind::directory::{pool, restore};
use crate::controller::request::answer::{content_source, directory_volume};
use crate::controller::request::create::{CreateRequest, DirSource};
use crate::controller::request::params::keys::AUTOGROW_THRESHOLD;
use crate::controller::request::params::{KindParams, ParentRef, QuotaMode, SubdirParams};
use crate::controller::state::controller::Controller;
use crate::controller::state::lock_keys::{Doubt, Lock};
use crate::flow::{done, Step, Then};
use crate::handles::{DirName, SubdirId};
use crate::linode::{Filesystem, MtlsMode, Quota, WriteError};
use crate::locks::OpGuard;
use crate::proto::csi;
use crate::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// The quotas of `parent` a create sees, and when they were listed: `Err`
/// with the reason when the backend has no quota API.
type QuotasSeen = pool::Seen;

fn quotas_of(c: &Controller, parent: &Filesystem) -> Result<QuotasSeen, Error> {
    let (read_at, listed) = quota_list(c, parent, Purpose::Write);
    match listed {
        Ok(quotas) => Ok((read_at, Ok(quotas))),
        Err(Error::Unimplemented(why)) => Ok((read_at, Err(why))),
        Err(e) => Err(e),
    }
}

/// Everything a create needs once the parent is known.
struct Making {
    c: Arc<Controller>,
    id: SubdirId,
    parent: Filesystem,
    mtls: Option<MtlsMode>,
    root: PathBuf,
    sub: SubdirParams,
    capacity: i64,
    max_files: Option<i64>,
}

impl Making {
    fn answer(&self, capped: bool) -> csi::CreateVolumeResponse {
        let mut resp = csi::CreateVolumeResponse::new();
        resp.volume = Some(directory_volume(
            &self.parent,
            self.mtls.as_ref(),
            &self.id,
            self.capacity,
            capped,
        ))
        .into();
        resp
    }

    /// No quota to be had: `required` undoes the directory and fails,
    /// `best-effort` hands the volume out saying it is uncapped.
    fn without_quota(self, why: String) -> Step<csi::CreateVolumeResponse> {
        match self.sub.quota {
            QuotaMode::Required => {
                files::roll_back(&self.root, &self.id.name, &self.id.to_string())?;
                Err(Error::FailedPrecondition(format!(
                    "quota: required, but no quota could be made for {}: {why}",
                    self.id
                )))
            }
            QuotaMode::BestEffort | QuotaMode::Off => {
                log::warn!("volume {} has no quota: {why}", self.id);
                done(self.answer(false))
            }
        }
    }

    /// Waits for `quota` to be active; one that ends in `error` is removed
    /// with the directory.
    fn wait(self, quota: Quota) -> Step<csi::CreateVolumeResponse> {
        let (c, quota_id) = (self.c.clone(), quota.id);
        c.poller
            .quota(self.id.space, quota, done)
            .then_result(move |waited| match waited {
                Ok(active) => {
                    self.c
                        .accounts
                        .written(self.id.parent(), &self.id.name, &active);
                    done(self.answer(true))
                }
                Err(Error::FailedPrecondition(why)) => {
                    quota_changes::remove(&self.c, &self.id, quota_id)
                        .map_err(|e| e.context("remove the failed quota"))?;
                    files::roll_back(&self.root, &self.id.name, &self.id.to_string())?;
                    Err(Error::FailedPrecondition(format!(
                        "the quota of volume {} failed and was removed with its directory: {why}",
                        self.id
                    )))
                }
                Err(e) => Err(e),
            })
    }
}

/// CreateVolume of a `subdirectory` class: on the parent the class names,
/// or where its pool places it.
pub fn create(c: &Arc<Controller>, want: Arc<CreateRequest>) -> Step<csi::CreateVolumeResponse> {
    let KindParams::Directory(sub) = want.params.kind.clone() else {
        return Err(Error::Internal("not a subdirectory class".into()));
    };
    if let Some(autogrow) = &sub.autogrow {
        // Autogrow grows through ControllerExpandVolume, which is served
        // only then.
        if c.expansion != VolumeExpansion::Subdirectory {
            return Err(Error::InvalidArgument(format!(
                "StorageClass parameter {AUTOGROW_THRESHOLD} needs the controller to grow directory volumes (VOLUME_EXPANSION=subdirectory), and it runs without"
            )));
        }
        autogrow.check_size(want.capacity)?;
    }
    let region = c.cluster.region()?;
    let space = c.spaces.resolve(&want.params.space)?;
    match &sub.parent {
        ParentRef::Pool(pool) => {
            let c2 = c.clone();
            let space = space.id;
            pool::place(c, space, pool, &region, &want.name, want.capacity).then(move |placed| {
                let pool::Placed {
                    parent,
                    claim,
                    guard,
                } = placed;
                make(&c2, want, sub, parent, claim, Some(guard))
            })
        }
        named => {
            let parent = parent_of(c, space.id, named, &region)?;
            make(c, want, sub, parent, None, None)
        }
    }
}

/// The rest of a create once its parent is known. A pool's placement
/// hands over the room it claimed and the quotas it claimed against
/// (`placed`), and its lock (`placing`), kept until the answer.
fn make(
    c: &Arc<Controller>,
    want: Arc<CreateRequest>,
    sub: SubdirParams,
    parent: Filesystem,
    placed: Option<(Claim, QuotasSeen)>,
    placing: Option<OpGuard>,
) -> Step<csi::CreateVolumeResponse> {
    let (placed_claim, placed_seen) = placed.unzip();
    let mtls = c.spaces.mtls_mode(parent.space_id)?;
    let id = SubdirId {
        space: parent.space_id,
        filesystem: parent.id,
        name: DirName::for_name(&want.name),
    };
    let guard = c.lock(Lock::Directory(id.clone()))?;
    let root = c.shares.root(&parent, mtls.as_ref())?;
    let marker = Marker {
        volume_id: id.to_string(),
        csi_name: want.name.clone(),
        on_delete: sub.on_delete,
        retained: false,
        source: want.dir_source.as_ref().map(|(_, raw)| raw.clone()),
        filling: want.dir_source.is_some(),
        archive_to: None,
        cluster: Some(c.marks.cluster().to_string()),
        claim: want.claim.clone(),
        autogrow: sub.autogrow,
    };
    // Another name's, another setting's or a foreign directory: refused
    // before anything is claimed or made.
    let repeat = files::prior(&root, &id.name, &marker)?;
    // A fill ended lately because its claim is gone is not begun again
    // for that claim.
    if let Some(why) = want.dir_source.as_ref().and_then(|_| {
        (!repeat)
            .then(|| c.fill_watch.abandoned(&want.name, want.claim.as_ref()))
            .flatten()
    }) {
        return Err(Error::FailedPrecondition(why));
    }
    // So is a source that cannot fill it (unless an earlier attempt did).
    let filled = repeat && files::read_marker(&root, &id.name)?.is_some_and(|m| !m.filling);
    let plan = match &want.dir_source {
        Some((source, raw)) if !filled => Some(restore::plan_of(
            c,
            &id,
            &root,
            (source, raw),
            want.capacity,
        )?),
        _ => None,
    };
    let kept = kept::total(&root)?;
    let (read_at, quotas) = match sub.quota {
        QuotaMode::Off => (
            Instant::now(),
            Err("the class asks for none (quota: off)".to_string()),
        ),
        // What the placement claimed against is as fresh as a list of our own.
        QuotaMode::Required | QuotaMode::BestEffort => match placed_seen {
            Some(seen) => seen,
            None => quotas_of(c, &parent)?,
        },
    };
    if let (QuotaMode::Required, Err(why)) = (sub.quota, &quotas) {
        return Err(Error::FailedPrecondition(format!(
            "quota: required, but the backend cannot cap volume {id}: {why}"
        )));
    }
    let existing = quotas
        .as_ref()
        .ok()
        .and_then(|all| quotas::of_volume(all, &parent, &id.name).cloned());
    let claim = match (&existing, &quotas) {
        // Only the driver's own attempt, whose marker comes first, can
        // have made a quota at the volume's path.
        (Some(q), _) if !repeat => {
            return Err(Error::FailedPrecondition(format!(
                "NFS quota {} on path {} of shared NFS filesystem {} was not made by the driver; it is left alone",
                q.id,
                q.path,
                id.parent()
            )))
        }
        (Some(q), _) if q.max_capacity_bytes != Some(want.capacity) => {
            return Err(Error::AlreadyExists(format!(
                "volume {id} already exists with incompatible capacity {}",
                q.max_capacity_bytes.unwrap_or(0)
            )))
        }
        (None, Ok(_)) if placed_claim.is_some() => placed_claim,
        (None, Ok(all)) => {
            let listed = Listed {
                quotas: all,
                read_at,
                kept,
            };
            Some(
                c.room
                    .claim(&listed, &parent, &id.name, want.capacity)
                    .map_err(|no| no.for_create())?,
            )
        }
        _ => None,
    };
    let owner = Ownership {
        mode: sub.mode,
        uid: sub.uid,
        gid: sub.gid,
    };
    files::create(&root, &id.name, &marker, owner)?;
    let (filling, fill_root, c2) = (id.clone(), root.clone(), c.clone());
    let making = Making {
        c: c.clone(),
        id,
        parent,
        mtls,
        root,
        max_files: want.max_files.or(sub.max_files),
        sub,
        capacity: want.capacity,
    };
    let made = match (quotas, existing) {
        (Err(why), _) => making.without_quota(why),
        (Ok(_), Some(quota)) => {
            c.in_doubt.clear(&Doubt::Quota(making.id.clone()));
            making.wait(quota)
        }
        (Ok(_), None) => post_quota(making),
    };
    made.then(move |resp| {
        if let (None, Some((source, _))) = (&plan, &want.dir_source) {
            restore::let_go(&c2, source, &filling)?;
        }
        // The volume is made and capped: what is left is a fill, a job of
        // its own that a repeat joins, so the call lets go of the volume.
        drop((guard, claim, placing));
        let filled = match plan {
            Some(plan) => restore::fill(&c2, filling, fill_root, plan),
            None => done(()),
        };
        filled.then(move |()| done(with_source(resp, &want)))
    })
}

/// The answer, naming what the volume was made from.
fn with_source(
    mut resp: csi::CreateVolumeResponse,
    want: &CreateRequest,
) -> csi::CreateVolumeResponse {
    let Some((source, raw)) = &want.dir_source else {
        return resp;
    };
    let content = content_source(matches!(source, DirSource::Snapshot(_)), raw);
    if let Some(volume) = resp.volume.as_mut() {
        volume.content_source = Some(content).into();
    }
    resp
}

/// POSTs the volume's quota and waits for it. A POST whose outcome is
/// unknown is looked up by path before anything else happens, as a
/// filesystem create is by label.
fn post_quota(m: Making) -> Step<csi::CreateVolumeResponse> {
    let key = Doubt::Quota(m.id.clone());
    m.c.in_doubt
        .check(&key, &format!("create the quota of volume {}", m.id))?;
    let posted = quotas::post(
        m.c.cloud.as_ref(),
        &m.parent,
        &m.id,
        m.capacity,
        m.max_files,
    );
    let parent = m.id.parent();
    match posted {
        Ok(quota) => {
            m.c.accounts.written(parent, &m.id.name, &quota);
            m.wait(quota)
        }
        Err(WriteError {
            error:
                e @ (Error::InvalidArgument(_) | Error::PermissionDenied(_) | Error::Unimplemented(_)),
            ..
        }) => {
            m.c.accounts.due(parent, Reason::Refused);
            m.without_quota(e.to_string())
        }
        Err(WriteError {
            error: e @ (Error::Unavailable(_) | Error::Internal(_) | Error::DeadlineExceeded(_)),
            maybe_applied,
        }) => {
            // The list sent now is the first the account takes after the
            // POST, so it shows the quota if the POST made one.
            m.c.accounts.due(parent, Reason::InDoubt);
            let found = quota_list(&m.c, &m.parent, Purpose::Read)
                .1
                .ok()
                .and_then(|all| quotas::of_volume(&all, &m.parent, &m.id.name).cloned());
            match found {
                Some(quota) => {
                    log::warn!(
                        "quota create of volume {} reported {e}; adopting quota {}",
                        m.id,
                        quota.id
                    );
                    m.wait(quota)
                }
                None => {
                    if maybe_applied {
                        m.c.in_doubt.record(&key);
                    }
                    Err(e)
                }
            }
        }
        Err(WriteError { error, .. }) => {
            m.c.accounts.due(parent, Reason::Refused);
            Err(error)
        }
    }
}
