//! The CSI Identity service: who we are, what we serve, whether we are up.
//! Every answer is computed in memory, so these RPCs run inline and stay
//! answerable however busy the worker pool is.

use crate::capabilities;
use crate::config::{Role, VolumeExpansion};
use crate::proto::csi;
use crate::rpc::registrar::{rpc_name, Registrar};
use crate::rpc::Rpc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub use crate::build_info::{revision, version, DRIVER_NAME};

/// The [`Name`](crate::rpc::registrar::Name) of an Identity RPC.
macro_rules! name {
    ($rpc:literal) => {
        rpc_name!("csi.v1.Identity", $rpc)
    };
}

/// What Identity answers from.
struct IdentityState {
    role: Role,
    expansion: VolumeExpansion,
    /// What Probe reports.
    ready: Arc<AtomicBool>,
}

/// The Identity service; `ready` is what Probe reports.
pub fn service(
    rpc: Rpc,
    role: Role,
    expansion: VolumeExpansion,
    ready: Arc<AtomicBool>,
) -> grpcio::Service {
    let state = IdentityState {
        role,
        expansion,
        ready,
    };
    Registrar::new(rpc, Arc::new(state))
        .inline(name!("GetPluginInfo"), |_, _: csi::GetPluginInfoRequest| {
            let mut resp = csi::GetPluginInfoResponse::new();
            resp.name = DRIVER_NAME.to_string();
            resp.vendor_version = version();
            Ok(resp)
        })
        .inline(
            name!("GetPluginCapabilities"),
            |s, _: csi::GetPluginCapabilitiesRequest| {
                let mut resp = csi::GetPluginCapabilitiesResponse::new();
                resp.capabilities = capabilities::plugin(s.role, s.expansion);
                Ok(resp)
            },
        )
        .inline(name!("Probe"), |s, _: csi::ProbeRequest| {
            let mut resp = csi::ProbeResponse::new();
            resp.ready = Some(protobuf::well_known_types::wrappers::BoolValue {
                value: s.ready.load(Ordering::SeqCst),
                ..Default::default()
            })
            .into();
            Ok(resp)
        })
        .build()
}
