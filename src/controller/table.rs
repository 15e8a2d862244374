//! The registration table of the Controller and GroupController services:
//! every RPC by name, the handler that serves it (`rpcs`) and how
//! (inline, on the worker pool, or parked while it waits), with the
//! Lease's say over which may write; and the watchers that show the
//! controller's state in the metrics. It is where a request enters the
//! controller; nothing here parses or decides.

use super::janitor;
use super::kind;
use super::kind::directory::ledger::account::Reason;
use super::rpcs::{expand, groups, inspect, listing, modify, publish, snapshots, volumes};
use super::state::controller::{Controller, ControllerDeps};
use crate::capabilities;
use crate::config::{AccessPolicyMode, VolumeExpansion};
use crate::lease::Gained;
use crate::proto::csi;
use crate::rpc::registrar::{rpc_name, Registrar};
use crate::rpc::Rpc;
use std::sync::Arc;

/// The [`Name`](crate::rpc::registrar::Name) of a Controller RPC.
macro_rules! name {
    ($rpc:literal) => {
        rpc_name!("csi.v1.Controller", $rpc)
    };
}

/// The [`Name`](crate::rpc::registrar::Name) of a GroupController RPC.
macro_rules! group_name {
    ($rpc:literal) => {
        rpc_name!("csi.v1.GroupController", $rpc)
    };
}

/// The Controller and GroupController gRPC services, on one state.
pub fn services(deps: ControllerDeps, rpc: Rpc) -> Vec<grpcio::Service> {
    let every = deps.maintenance_interval;
    let policy = kind::directory::TendPolicy {
        grace: deps.pool_empty_grace,
    };
    let c = Arc::new(Controller::new(deps, rpc.clone()));
    watch_usage(&c);
    watch_parents(&c);
    let kick = janitor::start(&c, every, policy);
    kind::directory::start_watch(&c);
    let weak = Arc::downgrade(&c);
    c.lease.on_gain(move |how| {
        if let Some(c) = weak.upgrade() {
            // Another process may have written while this one stood by.
            c.accounts.all_due(Reason::Lease);
            if how == Gained::TakenOver {
                c.in_doubt.everything();
            }
        }
        // Resumes what the previous holder left (its fill jobs).
        kick.now();
    });
    let groups = Registrar::new(rpc.clone(), c.clone())
        .parking(
            group_name!("CreateVolumeGroupSnapshot"),
            writing(groups::create),
        )
        .pooled(group_name!("GetVolumeGroupSnapshot"), groups::get)
        .pooled(
            group_name!("DeleteVolumeGroupSnapshot"),
            writing(groups::delete),
        )
        .inline(
            group_name!("GroupControllerGetCapabilities"),
            |_, _: csi::GroupControllerGetCapabilitiesRequest| {
                let mut resp = csi::GroupControllerGetCapabilitiesResponse::new();
                resp.capabilities = capabilities::group_controller();
                Ok(resp)
            },
        )
        .build();
    vec![service(c, rpc), groups]
}

/// Shows the accounts of shared parents `c` keeps, at each scrape, while
/// `c` lives and holds the Lease.
fn watch_parents(c: &Arc<Controller>) {
    let weak = Arc::downgrade(c);
    crate::metrics::watch_parents(move || {
        let c = weak.upgrade()?;
        if !c.lease.is_held() {
            return Some(Vec::new());
        }
        Some(
            c.accounts
                .figures()
                .into_iter()
                .map(|f| crate::metrics::ParentFigures {
                    parent: f.parent.to_string(),
                    promised: f.promised,
                    used: f.used,
                })
                .collect(),
        )
    });
}

/// Shows the directory volumes' usage as `c` last sampled it, at each
/// scrape, while `c` lives and holds the Lease.
fn watch_usage(c: &Arc<Controller>) {
    let weak = Arc::downgrade(c);
    crate::metrics::watch_directory_volumes(move || {
        let c = weak.upgrade()?;
        // A standby's figures stop at its last round as leader: stale.
        if !c.lease.is_held() {
            return Some(Vec::new());
        }
        Some(
            c.observed
                .all()
                .into_iter()
                .map(|f| crate::metrics::DirectoryUsage {
                    volume: f.volume.to_string(),
                    claim: f.claim,
                    used: f.used,
                    capacity: f.capacity,
                })
                .collect(),
        )
    });
}

/// `f`, served only by the holder of the Lease: a standby answers
/// Unavailable, naming the holder. The RPCs that only read (Validate,
/// ControllerGetVolume, ListVolumes, GetCapacity, ListSnapshots,
/// GetSnapshot, GetVolumeGroupSnapshot, the capabilities) are served by
/// any process.
fn writing<Req, T>(
    f: fn(&Arc<Controller>, Req) -> crate::Result<T>,
) -> impl Fn(&Arc<Controller>, Req) -> crate::Result<T> + Send + Sync + 'static
where
    Req: 'static,
    T: 'static,
{
    move |c, req| {
        c.lease.require()?;
        f(c, req)
    }
}

/// The Controller gRPC service.
fn service(c: Arc<Controller>, rpc: Rpc) -> grpcio::Service {
    let expansion = c.expansion;
    let node_mode = c.mode == AccessPolicyMode::Node;
    let r = Registrar::new(rpc, c);
    let r = r
        .parking(name!("CreateVolume"), writing(volumes::create_volume))
        .pooled(name!("DeleteVolume"), writing(volumes::delete_volume))
        .pooled(
            name!("ValidateVolumeCapabilities"),
            inspect::validate_capabilities,
        )
        .pooled(name!("ControllerGetVolume"), inspect::get_volume)
        .parking(name!("CreateSnapshot"), writing(snapshots::create))
        .pooled(name!("DeleteSnapshot"), writing(snapshots::delete))
        .pooled(name!("ListSnapshots"), snapshots::list)
        .pooled(name!("GetSnapshot"), snapshots::get)
        .pooled(name!("ListVolumes"), listing::list_volumes)
        .pooled(name!("GetCapacity"), listing::get_capacity)
        .parking(name!("ControllerModifyVolume"), writing(modify::modify));
    // The API cannot change an existing filesystem's capacity; only a
    // subdirectory volume's quota grows, and only when the admin asks.
    let r = match expansion {
        VolumeExpansion::Subdirectory => r.parking(name!("ControllerExpandVolume"), writing(expand::expand)),
        VolumeExpansion::Off => r.unimplemented::<
            csi::ControllerExpandVolumeRequest,
            csi::ControllerExpandVolumeResponse,
        >(name!("ControllerExpandVolume")),
    };
    let r = if node_mode {
        r.parking(name!("ControllerPublishVolume"), writing(publish::publish))
            .parking(
                name!("ControllerUnpublishVolume"),
                writing(publish::unpublish),
            )
    } else {
        r.unimplemented::<csi::ControllerPublishVolumeRequest, csi::ControllerPublishVolumeResponse>(
            name!("ControllerPublishVolume"),
        )
        .unimplemented::<csi::ControllerUnpublishVolumeRequest, csi::ControllerUnpublishVolumeResponse>(
            name!("ControllerUnpublishVolume"),
        )
    };
    r.inline(
        name!("ControllerGetCapabilities"),
        |c, _: csi::ControllerGetCapabilitiesRequest| {
            let mut resp = csi::ControllerGetCapabilitiesResponse::new();
            resp.capabilities = capabilities::controller(c.mode, c.expansion);
            Ok(resp)
        },
    )
    .build()
}
