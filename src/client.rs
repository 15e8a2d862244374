//! `linode-nfs-csi client …`: a tiny CSI client for trying the driver by
//! hand (mostly against `dev` mode), calling the socket the way the sidecars
//! and kubelet would. It prints results as plain text and never touches the
//! backend or the mount table itself.

use crate::config::{parse_endpoint, parse_quantity, Endpoint};
use crate::proto::{csi, csi_grpc};
use csi::volume_capability::access_mode::Mode;
use grpcio::{ChannelBuilder, Environment};
use std::collections::HashMap;
use std::sync::Arc;

/// StorageClass parameters used when `--param` is not given: the Storage
/// Space `dev` mode seeds.
pub const DEV_SPACE_LABEL: &str = "dev-space";

const USAGE: &str = "\
Usage: linode-nfs-csi client [--endpoint unix:///path/csi.sock] COMMAND ARGS
Commands:
  info                                    plugin name, version, capabilities
  create-volume NAME [--size 1Gi] [--param k=v]... [--from-snapshot ID]
  delete-volume VOLUME_ID
  get-volume VOLUME_ID
  publish-controller VOLUME_ID NODE_ID    (node access-policy mode)
  unpublish-controller VOLUME_ID NODE_ID
  stage VOLUME_ID STAGING_PATH
  unstage VOLUME_ID STAGING_PATH
  publish VOLUME_ID STAGING_PATH TARGET_PATH [--readonly]
  unpublish VOLUME_ID TARGET_PATH
  stats VOLUME_ID PATH
  node-info
  snapshot NAME SOURCE_VOLUME_ID
  delete-snapshot SNAPSHOT_ID
  list-snapshots [--volume VOLUME_ID] [--snapshot SNAPSHOT_ID]
The endpoint defaults to $CSI_ENDPOINT, else unix://$PWD/dev/csi.sock.
";

/// Runs one client command; the result is what to print, or an error line.
pub fn run(args: &[String]) -> Result<String, String> {
    let mut args: Vec<String> = args.to_vec();
    let endpoint = match take_flag(&mut args, "--endpoint")? {
        Some(e) => e,
        None => std::env::var("CSI_ENDPOINT").unwrap_or_else(|_| {
            let cwd = std::env::current_dir().unwrap_or_default();
            format!("unix://{}", cwd.join("dev/csi.sock").display())
        }),
    };
    let target = match parse_endpoint(&endpoint)? {
        Endpoint::Unix(path) => format!("unix:{}", path.display()),
        Endpoint::Tcp(addr) => addr,
    };
    if args.is_empty() || args[0] == "--help" || args[0] == "help" {
        return Ok(USAGE.to_string());
    }
    let channel = ChannelBuilder::new(Arc::new(Environment::new(1))).connect(&target);
    let c = Clients {
        identity: csi_grpc::IdentityClient::new(channel.clone()),
        controller: csi_grpc::ControllerClient::new(channel.clone()),
        node: csi_grpc::NodeClient::new(channel),
    };
    let command = args.remove(0);
    c.dispatch(&command, args)
        .map_err(|e| format!("{command}: {e}"))
}

struct Clients {
    identity: csi_grpc::IdentityClient,
    controller: csi_grpc::ControllerClient,
    node: csi_grpc::NodeClient,
}

fn take_flag(args: &mut Vec<String>, flag: &str) -> Result<Option<String>, String> {
    let Some(i) = args
        .iter()
        .position(|a| a == flag || a.starts_with(&format!("{flag}=")))
    else {
        return Ok(None);
    };
    let arg = args.remove(i);
    if let Some((_, v)) = arg.split_once('=') {
        return Ok(Some(v.to_string()));
    }
    if i < args.len() {
        Ok(Some(args.remove(i)))
    } else {
        Err(format!("{flag} needs a value"))
    }
}

fn take_switch(args: &mut Vec<String>, flag: &str) -> bool {
    let found = args.iter().position(|a| a == flag);
    if let Some(i) = found {
        args.remove(i);
    }
    found.is_some()
}

fn positional<const N: usize>(args: Vec<String>, names: [&str; N]) -> Result<[String; N], String> {
    if args.len() != N {
        return Err(format!("expected arguments: {}", names.join(" ")));
    }
    Ok(args.try_into().expect("length checked"))
}

fn rpc<T>(r: grpcio::Result<T>) -> Result<T, String> {
    r.map_err(|e| match e {
        grpcio::Error::RpcFailure(s) => format!("{:?}: {}", s.code(), s.message()),
        other => other.to_string(),
    })
}

/// A mount capability with the most permissive mode, as an RWX PVC would use.
fn mount_capability(mode: Mode) -> csi::VolumeCapability {
    let mut access = csi::volume_capability::AccessMode::new();
    access.mode = mode.into();
    let mut cap = csi::VolumeCapability::new();
    cap.set_mount(csi::volume_capability::MountVolume::new());
    cap.access_mode = Some(access).into();
    cap
}

fn describe_volume(v: &csi::Volume) -> String {
    let mut ctx: Vec<_> = v.volume_context.iter().collect();
    ctx.sort();
    let mut out = format!(
        "volume_id: {}\ncapacity_bytes: {}\n",
        v.volume_id, v.capacity_bytes
    );
    for (k, val) in ctx {
        out.push_str(&format!("context {k}: {val}\n"));
    }
    out
}

fn describe_snapshot(s: &csi::Snapshot) -> String {
    format!(
        "snapshot_id: {} source_volume_id: {} size_bytes: {} ready_to_use: {}\n",
        s.snapshot_id, s.source_volume_id, s.size_bytes, s.ready_to_use
    )
}

impl Clients {
    fn dispatch(&self, command: &str, mut args: Vec<String>) -> Result<String, String> {
        match command {
            "info" => {
                let info = rpc(self.identity.get_plugin_info(&Default::default()))?;
                let caps = rpc(self.identity.get_plugin_capabilities(&Default::default()))?;
                let services: Vec<String> = caps
                    .capabilities
                    .iter()
                    .filter(|c| c.has_service())
                    .map(|c| format!("{:?}", c.service().type_.enum_value_or_default()))
                    .collect();
                Ok(format!(
                    "{} {}\nplugin services: {}\n",
                    info.name,
                    info.vendor_version,
                    services.join(", ")
                ))
            }
            "create-volume" => {
                let size = take_flag(&mut args, "--size")?;
                let from = take_flag(&mut args, "--from-snapshot")?;
                let mut params = HashMap::new();
                while let Some(p) = take_flag(&mut args, "--param")? {
                    let (k, v) = p.split_once('=').ok_or("--param wants key=value")?;
                    params.insert(k.to_string(), v.to_string());
                }
                if params.is_empty() {
                    params.insert(
                        "linodenfs.csi.linode.com/space-label".into(),
                        DEV_SPACE_LABEL.into(),
                    );
                }
                let [name] = positional(args, ["NAME"])?;
                let mut req = csi::CreateVolumeRequest::new();
                req.name = name;
                req.parameters = params;
                req.volume_capabilities = vec![mount_capability(Mode::MULTI_NODE_MULTI_WRITER)];
                if let Some(size) = size {
                    let mut range = csi::CapacityRange::new();
                    range.required_bytes = parse_quantity(&size)?;
                    req.capacity_range = Some(range).into();
                }
                if let Some(snap) = from {
                    let mut s = csi::volume_content_source::SnapshotSource::new();
                    s.snapshot_id = snap;
                    let mut src = csi::VolumeContentSource::new();
                    src.set_snapshot(s);
                    req.volume_content_source = Some(src).into();
                }
                let resp = rpc(self.controller.create_volume(&req))?;
                Ok(describe_volume(&resp.volume))
            }
            "delete-volume" => {
                let [id] = positional(args, ["VOLUME_ID"])?;
                let mut req = csi::DeleteVolumeRequest::new();
                req.volume_id = id;
                rpc(self.controller.delete_volume(&req))?;
                Ok("deleted\n".into())
            }
            "get-volume" => {
                let [id] = positional(args, ["VOLUME_ID"])?;
                let resp = rpc(self
                    .controller
                    .controller_get_volume(&self.get_volume_req(&id)))?;
                let condition = &resp.status.volume_condition;
                let health = if condition.abnormal {
                    "abnormal"
                } else {
                    "normal"
                };
                Ok(format!(
                    "{}published_node_ids: {}\ncondition: {health} ({})\n",
                    describe_volume(&resp.volume),
                    resp.status.published_node_ids.join(","),
                    condition.message
                ))
            }
            "publish-controller" | "unpublish-controller" => {
                let [id, node] = positional(args, ["VOLUME_ID", "NODE_ID"])?;
                if command == "publish-controller" {
                    let mut req = csi::ControllerPublishVolumeRequest::new();
                    req.volume_id = id;
                    req.node_id = node;
                    req.volume_capability =
                        Some(mount_capability(Mode::MULTI_NODE_MULTI_WRITER)).into();
                    rpc(self.controller.controller_publish_volume(&req))?;
                } else {
                    let mut req = csi::ControllerUnpublishVolumeRequest::new();
                    req.volume_id = id;
                    req.node_id = node;
                    rpc(self.controller.controller_unpublish_volume(&req))?;
                }
                Ok("done\n".into())
            }
            "stage" => {
                let [id, staging] = positional(args, ["VOLUME_ID", "STAGING_PATH"])?;
                let volume = rpc(self
                    .controller
                    .controller_get_volume(&self.get_volume_req(&id)))?;
                let mut req = csi::NodeStageVolumeRequest::new();
                req.volume_id = id;
                req.staging_target_path = staging;
                req.volume_capability =
                    Some(mount_capability(Mode::MULTI_NODE_MULTI_WRITER)).into();
                req.volume_context = volume.volume.volume_context.clone();
                rpc(self.node.node_stage_volume(&req))?;
                Ok("staged\n".into())
            }
            "unstage" => {
                let [id, staging] = positional(args, ["VOLUME_ID", "STAGING_PATH"])?;
                let mut req = csi::NodeUnstageVolumeRequest::new();
                req.volume_id = id;
                req.staging_target_path = staging;
                rpc(self.node.node_unstage_volume(&req))?;
                Ok("unstaged\n".into())
            }
            "publish" => {
                let readonly = take_switch(&mut args, "--readonly");
                let [id, staging, target] =
                    positional(args, ["VOLUME_ID", "STAGING_PATH", "TARGET_PATH"])?;
                let mut req = csi::NodePublishVolumeRequest::new();
                req.volume_id = id;
                req.staging_target_path = staging;
                req.target_path = target;
                req.readonly = readonly;
                req.volume_capability =
                    Some(mount_capability(Mode::MULTI_NODE_MULTI_WRITER)).into();
                rpc(self.node.node_publish_volume(&req))?;
                Ok("published\n".into())
            }
            "unpublish" => {
                let [id, target] = positional(args, ["VOLUME_ID", "TARGET_PATH"])?;
                let mut req = csi::NodeUnpublishVolumeRequest::new();
                req.volume_id = id;
                req.target_path = target;
                rpc(self.node.node_unpublish_volume(&req))?;
                Ok("unpublished\n".into())
            }
            "stats" => {
                let [id, path] = positional(args, ["VOLUME_ID", "PATH"])?;
                let mut req = csi::NodeGetVolumeStatsRequest::new();
                req.volume_id = id;
                req.volume_path = path;
                let resp = rpc(self.node.node_get_volume_stats(&req))?;
                Ok(resp
                    .usage
                    .iter()
                    .map(|u| {
                        format!(
                            "{:?}: total {} used {} available {}\n",
                            u.unit, u.total, u.used, u.available
                        )
                    })
                    .collect())
            }
            "node-info" => {
                let resp = rpc(self.node.node_get_info(&Default::default()))?;
                Ok(format!("node_id: {}\n", resp.node_id))
            }
            "snapshot" => {
                let [name, source] = positional(args, ["NAME", "SOURCE_VOLUME_ID"])?;
                let mut req = csi::CreateSnapshotRequest::new();
                req.name = name;
                req.source_volume_id = source;
                let resp = rpc(self.controller.create_snapshot(&req))?;
                Ok(describe_snapshot(&resp.snapshot))
            }
            "delete-snapshot" => {
                let [id] = positional(args, ["SNAPSHOT_ID"])?;
                let mut req = csi::DeleteSnapshotRequest::new();
                req.snapshot_id = id;
                rpc(self.controller.delete_snapshot(&req))?;
                Ok("deleted\n".into())
            }
            "list-snapshots" => {
                let mut req = csi::ListSnapshotsRequest::new();
                req.source_volume_id = take_flag(&mut args, "--volume")?.unwrap_or_default();
                req.snapshot_id = take_flag(&mut args, "--snapshot")?.unwrap_or_default();
                positional(args, [])?;
                let resp = rpc(self.controller.list_snapshots(&req))?;
                Ok(resp
                    .entries
                    .iter()
                    .map(|e| describe_snapshot(&e.snapshot))
                    .collect())
            }
            other => Err(format!("unknown command {other:?}\n{USAGE}")),
        }
    }

    fn get_volume_req(&self, id: &str) -> csi::ControllerGetVolumeRequest {
        let mut req = csi::ControllerGetVolumeRequest::new();
        req.volume_id = id.to_string();
        req
    }
}
