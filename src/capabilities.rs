//! What the driver advertises, derived from role and configuration in one
//! place. Nothing is advertised that is not implemented.

use crate::config::{AccessPolicyMode, Role, VolumeExpansion};
use crate::proto::csi;
use csi::controller_service_capability::rpc::Type as ControllerRpc;
use csi::node_service_capability::rpc::Type as NodeRpc;
use csi::plugin_capability::service::Type as PluginService;
use csi::plugin_capability::volume_expansion::Type as Expansion;

/// GetPluginCapabilities: the controller and group controller services
/// where this process serves them, and with `VOLUME_EXPANSION=subdirectory` ONLINE expansion (a quota
/// update applies while the volume is mounted; the node has nothing to do).
pub fn plugin(role: Role, expansion: VolumeExpansion) -> Vec<csi::PluginCapability> {
    match role {
        Role::Controller | Role::Dev => {
            let mut service = csi::plugin_capability::Service::new();
            service.type_ = PluginService::CONTROLLER_SERVICE.into();
            let mut cap = csi::PluginCapability::new();
            cap.set_service(service);
            let mut caps = vec![cap];
            let mut groups = csi::plugin_capability::Service::new();
            groups.type_ = PluginService::GROUP_CONTROLLER_SERVICE.into();
            let mut cap = csi::PluginCapability::new();
            cap.set_service(groups);
            caps.push(cap);
            if expansion == VolumeExpansion::Subdirectory {
                let mut online = csi::plugin_capability::VolumeExpansion::new();
                online.type_ = Expansion::ONLINE.into();
                let mut cap = csi::PluginCapability::new();
                cap.set_volume_expansion(online);
                caps.push(cap);
            }
            caps
        }
        Role::Node => Vec::new(),
    }
}

/// GroupControllerGetCapabilities: group snapshots of directory volumes
/// of one shared filesystem (parts of one Linode snapshot of it).
pub fn group_controller() -> Vec<csi::GroupControllerServiceCapability> {
    use csi::group_controller_service_capability::rpc::Type;
    let mut cap = csi::GroupControllerServiceCapability::new();
    cap.mut_rpc().type_ = Type::CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT.into();
    vec![cap]
}

/// ControllerGetCapabilities. VOLUME_CONDITION: ControllerGetVolume and
/// ListVolumes report an abnormal condition while the filesystem is not
/// active. Publish/unpublish, and with them the published nodes of
/// ListVolumes, exist only in node mode, where "attach" means adding the
/// node to the filesystem's ACL. EXPAND_VOLUME only with
/// `VOLUME_EXPANSION=subdirectory`: the API cannot change an existing
/// filesystem's capacity, only a `subdirectory` volume's quota.
pub fn controller(
    mode: AccessPolicyMode,
    expansion: VolumeExpansion,
) -> Vec<csi::ControllerServiceCapability> {
    let mut rpcs = vec![
        ControllerRpc::CREATE_DELETE_VOLUME,
        ControllerRpc::GET_VOLUME,
        ControllerRpc::LIST_VOLUMES,
        ControllerRpc::GET_CAPACITY,
        ControllerRpc::CREATE_DELETE_SNAPSHOT,
        ControllerRpc::LIST_SNAPSHOTS,
        ControllerRpc::GET_SNAPSHOT,
        ControllerRpc::CLONE_VOLUME,
        ControllerRpc::MODIFY_VOLUME,
        ControllerRpc::VOLUME_CONDITION,
        // The provisioner maps ReadWriteOncePod to SINGLE_NODE_SINGLE_WRITER
        // only when the controller says it knows the two single-node modes.
        ControllerRpc::SINGLE_NODE_MULTI_WRITER,
    ];
    if mode == AccessPolicyMode::Node {
        rpcs.push(ControllerRpc::PUBLISH_UNPUBLISH_VOLUME);
        rpcs.push(ControllerRpc::LIST_VOLUMES_PUBLISHED_NODES);
    }
    if expansion == VolumeExpansion::Subdirectory {
        rpcs.push(ControllerRpc::EXPAND_VOLUME);
    }
    rpcs.into_iter()
        .map(|t| {
            let mut cap = csi::ControllerServiceCapability::new();
            cap.mut_rpc().type_ = t.into();
            cap
        })
        .collect()
}

/// NodeGetCapabilities. VOLUME_CONDITION: NodeGetVolumeStats reports a
/// stale, failing or hung mount as an abnormal condition.
pub fn node() -> Vec<csi::NodeServiceCapability> {
    [
        NodeRpc::STAGE_UNSTAGE_VOLUME,
        NodeRpc::GET_VOLUME_STATS,
        NodeRpc::VOLUME_CONDITION,
        // SINGLE_NODE_SINGLE_WRITER volumes are refused a second target.
        NodeRpc::SINGLE_NODE_MULTI_WRITER,
    ]
    .into_iter()
    .map(|t| {
        let mut cap = csi::NodeServiceCapability::new();
        cap.mut_rpc().type_ = t.into();
        cap
    })
    .collect()
}
