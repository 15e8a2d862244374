//! The CSI Identity service: who we are, what we serve, whether we are up.
//! Every answer is computed in memory, so these RPCs run inline and stay
//! answerable however busy the worker pool is.

use crate::capabilities;
use crate::config::Role;
use crate::proto::{csi, csi_grpc};
use crate::rpc::Rpc;
use grpcio::{RpcContext, UnarySink};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub const DRIVER_NAME: &str = "linodenfs.csi.linode.com";

/// The git revision the binary was built from; empty when unknown.
pub fn revision() -> &'static str {
    env!("GIT_REVISION")
}

/// Crate version plus the git revision it was built from, when known.
pub fn version() -> String {
    let rev = revision();
    if rev.is_empty() {
        env!("CARGO_PKG_VERSION").to_string()
    } else {
        format!("{}+{rev}", env!("CARGO_PKG_VERSION"))
    }
}

#[derive(Clone)]
struct IdentityService {
    rpc: Rpc,
    role: Role,
    ready: Arc<AtomicBool>,
}

/// The Identity service; `ready` is what Probe reports.
pub fn service(rpc: Rpc, role: Role, ready: Arc<AtomicBool>) -> grpcio::Service {
    csi_grpc::create_identity(IdentityService { rpc, role, ready })
}

impl csi_grpc::Identity for IdentityService {
    fn get_plugin_info(
        &mut self,
        ctx: RpcContext,
        req: csi::GetPluginInfoRequest,
        sink: UnarySink<csi::GetPluginInfoResponse>,
    ) {
        self.rpc.inline(&ctx, "GetPluginInfo", req, sink, |_| {
            let mut resp = csi::GetPluginInfoResponse::new();
            resp.name = DRIVER_NAME.to_string();
            resp.vendor_version = version();
            Ok(resp)
        });
    }

    fn get_plugin_capabilities(
        &mut self,
        ctx: RpcContext,
        req: csi::GetPluginCapabilitiesRequest,
        sink: UnarySink<csi::GetPluginCapabilitiesResponse>,
    ) {
        let role = self.role;
        self.rpc
            .inline(&ctx, "GetPluginCapabilities", req, sink, move |_| {
                let mut resp = csi::GetPluginCapabilitiesResponse::new();
                resp.capabilities = capabilities::plugin(role);
                Ok(resp)
            });
    }

    fn probe(
        &mut self,
        ctx: RpcContext,
        req: csi::ProbeRequest,
        sink: UnarySink<csi::ProbeResponse>,
    ) {
        let ready = self.ready.load(Ordering::SeqCst);
        self.rpc.inline(&ctx, "Probe", req, sink, move |_| {
            let mut resp = csi::ProbeResponse::new();
            resp.ready = Some(protobuf::well_known_types::wrappers::BoolValue {
                value: ready,
                ..Default::default()
            })
            .into();
            Ok(resp)
        });
    }
}
