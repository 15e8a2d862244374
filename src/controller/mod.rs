//! The CSI Controller service: thin handlers that hand each request to the
//! worker pool and a plain function in `provision`, `publish` or
//! `snapshots`. Nothing here talks to Linode directly.

mod cluster;
mod params;
mod provision;
mod publish;
mod snapshots;

pub use cluster::Cluster;
pub use params::{Params, SpaceRef};

use crate::capabilities;
use crate::config::AccessPolicyMode;
use crate::kube::KubeClient;
use crate::linode::{Cloud, WaitPolicy};
use crate::locks::OpLocks;
use crate::proto::{csi, csi_grpc};
use crate::rpc::Rpc;
use crate::Error;
use grpcio::{RpcContext, UnarySink};
use std::sync::Arc;

/// What the controller is built from.
pub struct ControllerDeps {
    pub cloud: Arc<dyn Cloud>,
    pub kube: KubeClient,
    pub mode: AccessPolicyMode,
    pub wait: WaitPolicy,
    pub default_capacity_bytes: i64,
}

/// Shared state of every controller RPC.
pub struct Controller {
    cloud: Arc<dyn Cloud>,
    cluster: Cluster,
    locks: OpLocks,
    mode: AccessPolicyMode,
    wait: WaitPolicy,
    default_capacity_bytes: i64,
    acl: publish::AclQueue,
}

#[derive(Clone)]
struct ControllerService {
    rpc: Rpc,
    inner: Arc<Controller>,
}

/// The Controller gRPC service.
pub fn service(deps: ControllerDeps, rpc: Rpc) -> grpcio::Service {
    let inner = Arc::new(Controller {
        cloud: deps.cloud,
        cluster: Cluster::new(deps.kube),
        locks: OpLocks::new(),
        mode: deps.mode,
        wait: deps.wait,
        default_capacity_bytes: deps.default_capacity_bytes,
        acl: publish::AclQueue::default(),
    });
    csi_grpc::create_controller(ControllerService { rpc, inner })
}

fn unimplemented<T>(method: &str) -> Result<T, Error> {
    Err(Error::Unimplemented(format!(
        "{method}: operation not implemented"
    )))
}

/// One handler per RPC: move the request to the pool, call the domain function.
macro_rules! on_pool {
    ($self:ident, $ctx:ident, $name:literal, $req:ident, $sink:ident, $f:path) => {{
        let c = $self.inner.clone();
        $self
            .rpc
            .spawn(&$ctx, $name, $req, $sink, move |req| $f(&c, req));
    }};
}

impl csi_grpc::Controller for ControllerService {
    fn create_volume(
        &mut self,
        ctx: RpcContext,
        req: csi::CreateVolumeRequest,
        sink: UnarySink<csi::CreateVolumeResponse>,
    ) {
        on_pool!(
            self,
            ctx,
            "CreateVolume",
            req,
            sink,
            provision::create_volume
        )
    }

    fn delete_volume(
        &mut self,
        ctx: RpcContext,
        req: csi::DeleteVolumeRequest,
        sink: UnarySink<csi::DeleteVolumeResponse>,
    ) {
        on_pool!(
            self,
            ctx,
            "DeleteVolume",
            req,
            sink,
            provision::delete_volume
        )
    }

    fn controller_publish_volume(
        &mut self,
        ctx: RpcContext,
        req: csi::ControllerPublishVolumeRequest,
        sink: UnarySink<csi::ControllerPublishVolumeResponse>,
    ) {
        if self.inner.mode == AccessPolicyMode::Space {
            return self
                .rpc
                .inline(&ctx, "ControllerPublishVolume", req, sink, |_| {
                    unimplemented("ControllerPublishVolume")
                });
        }
        on_pool!(
            self,
            ctx,
            "ControllerPublishVolume",
            req,
            sink,
            publish::publish
        )
    }

    fn controller_unpublish_volume(
        &mut self,
        ctx: RpcContext,
        req: csi::ControllerUnpublishVolumeRequest,
        sink: UnarySink<csi::ControllerUnpublishVolumeResponse>,
    ) {
        if self.inner.mode == AccessPolicyMode::Space {
            return self
                .rpc
                .inline(&ctx, "ControllerUnpublishVolume", req, sink, |_| {
                    unimplemented("ControllerUnpublishVolume")
                });
        }
        on_pool!(
            self,
            ctx,
            "ControllerUnpublishVolume",
            req,
            sink,
            publish::unpublish
        )
    }

    fn validate_volume_capabilities(
        &mut self,
        ctx: RpcContext,
        req: csi::ValidateVolumeCapabilitiesRequest,
        sink: UnarySink<csi::ValidateVolumeCapabilitiesResponse>,
    ) {
        on_pool!(
            self,
            ctx,
            "ValidateVolumeCapabilities",
            req,
            sink,
            provision::validate_capabilities
        )
    }

    fn list_volumes(
        &mut self,
        ctx: RpcContext,
        req: csi::ListVolumesRequest,
        sink: UnarySink<csi::ListVolumesResponse>,
    ) {
        self.rpc.inline(&ctx, "ListVolumes", req, sink, |_| {
            unimplemented("ListVolumes")
        })
    }

    fn get_capacity(
        &mut self,
        ctx: RpcContext,
        req: csi::GetCapacityRequest,
        sink: UnarySink<csi::GetCapacityResponse>,
    ) {
        self.rpc.inline(&ctx, "GetCapacity", req, sink, |_| {
            unimplemented("GetCapacity")
        })
    }

    fn controller_get_capabilities(
        &mut self,
        ctx: RpcContext,
        req: csi::ControllerGetCapabilitiesRequest,
        sink: UnarySink<csi::ControllerGetCapabilitiesResponse>,
    ) {
        let mode = self.inner.mode;
        self.rpc
            .inline(&ctx, "ControllerGetCapabilities", req, sink, move |_| {
                let mut resp = csi::ControllerGetCapabilitiesResponse::new();
                resp.capabilities = capabilities::controller(mode);
                Ok(resp)
            })
    }

    fn create_snapshot(
        &mut self,
        ctx: RpcContext,
        req: csi::CreateSnapshotRequest,
        sink: UnarySink<csi::CreateSnapshotResponse>,
    ) {
        on_pool!(self, ctx, "CreateSnapshot", req, sink, snapshots::create)
    }

    fn delete_snapshot(
        &mut self,
        ctx: RpcContext,
        req: csi::DeleteSnapshotRequest,
        sink: UnarySink<csi::DeleteSnapshotResponse>,
    ) {
        on_pool!(self, ctx, "DeleteSnapshot", req, sink, snapshots::delete)
    }

    fn list_snapshots(
        &mut self,
        ctx: RpcContext,
        req: csi::ListSnapshotsRequest,
        sink: UnarySink<csi::ListSnapshotsResponse>,
    ) {
        on_pool!(self, ctx, "ListSnapshots", req, sink, snapshots::list)
    }

    fn get_snapshot(
        &mut self,
        ctx: RpcContext,
        req: csi::GetSnapshotRequest,
        sink: UnarySink<csi::GetSnapshotResponse>,
    ) {
        self.rpc.inline(&ctx, "GetSnapshot", req, sink, |_| {
            unimplemented("GetSnapshot")
        })
    }

    fn controller_expand_volume(
        &mut self,
        ctx: RpcContext,
        req: csi::ControllerExpandVolumeRequest,
        sink: UnarySink<csi::ControllerExpandVolumeResponse>,
    ) {
        self.rpc
            .inline(&ctx, "ControllerExpandVolume", req, sink, |_| {
                unimplemented("ControllerExpandVolume")
            })
    }

    fn controller_get_volume(
        &mut self,
        ctx: RpcContext,
        req: csi::ControllerGetVolumeRequest,
        sink: UnarySink<csi::ControllerGetVolumeResponse>,
    ) {
        on_pool!(
            self,
            ctx,
            "ControllerGetVolume",
            req,
            sink,
            provision::get_volume
        )
    }

    fn controller_modify_volume(
        &mut self,
        ctx: RpcContext,
        req: csi::ControllerModifyVolumeRequest,
        sink: UnarySink<csi::ControllerModifyVolumeResponse>,
    ) {
        self.rpc
            .inline(&ctx, "ControllerModifyVolume", req, sink, |_| {
                unimplemented("ControllerModifyVolume")
            })
    }
}
