//! `linode-nfs-csi client …`: a tiny CSI client for trying the driver by
//! hand (mostly against `dev` mode), calling the socket the way the sidecars
//! and kubelet would. It prints results as plain text and never touches the
//! backend or the mount table itself.

use crate::config::{client_endpoint, parse_quantity, Endpoint};
use crate::controller::keys::{
    POOL, ROOT_SQUASH, SHARED_FS_LABEL, SPACE_ID, SPACE_LABEL, TAGS, VOLUME_TYPE,
};
use crate::proto::{csi, csi_grpc};
use csi::volume_capability::access_mode::Mode;
use csi::volume_content_source::{SnapshotSource, VolumeSource};
use grpcio::{ChannelBuilder, Environment};
use std::collections::HashMap;
use std::sync::Arc;

/// StorageClass parameters used when `--param` is not given: the Storage
/// Space `dev` mode seeds.
pub const DEV_SPACE_LABEL: &str = "dev-space";

mod describe;

use describe::{describe_condition, describe_group, describe_snapshot, describe_volume, node_ids};

const USAGE: &str = "\
Usage: linode-nfs-csi client [--endpoint unix:///path/csi.sock] COMMAND ARGS
Commands:
  info                                    plugin name, version, every capability
  create-volume NAME [--size 1Gi] [--param k=v]... [--from-snapshot ID]
                [--squash none|root_squash|all_squash] [--tags a,b]
                [--shared FILESYSTEM_LABEL | --pool POOL_NAME]
  clone NEW_NAME SOURCE_VOLUME_ID [--size 2Gi] [--param k=v]...
                [--squash none|root_squash|all_squash] [--tags a,b]
  delete-volume VOLUME_ID
  get-volume VOLUME_ID
  list-volumes [--max N] [--token NEXT_TOKEN]
  capacity [--space-label LABEL | --space-id ID]   (no flag: every Space)
  modify VOLUME_ID [--squash none|root_squash|all_squash] [--tags a,b]
  expand VOLUME_ID --size 2Gi             (VOLUME_EXPANSION=subdirectory)
  publish-controller VOLUME_ID NODE_ID    (node access-policy mode)
  unpublish-controller VOLUME_ID NODE_ID
  stage VOLUME_ID STAGING_PATH
  unstage VOLUME_ID STAGING_PATH
  publish VOLUME_ID STAGING_PATH TARGET_PATH [--readonly]
  unpublish VOLUME_ID TARGET_PATH
  stats VOLUME_ID PATH
  node-info
  snapshot NAME SOURCE_VOLUME_ID
  get-snapshot SNAPSHOT_ID
  delete-snapshot SNAPSHOT_ID
  list-snapshots [--volume VOLUME_ID] [--snapshot SNAPSHOT_ID]
  group-snapshot NAME VOLUME_ID...        (directory volumes of one parent)
  get-group-snapshot GROUP_ID
  delete-group-snapshot GROUP_ID [SNAPSHOT_ID...]
--param sets StorageClass parameters (the Space defaults to space-label=dev-space);
--shared L makes a directory of the existing filesystem labelled L
(volume-type=subdirectory, shared-filesystem-label=L; dev mode seeds
dev-shared), --pool P one on a filesystem of the pool P the driver runs
(shared-filesystem-pool=P; --param sets its pool-* keys), in
space-label=dev-space unless --param names a Space;
--squash and --tags are the mutable parameters a VolumeAttributesClass sets.
The endpoint defaults to $CSI_ENDPOINT, else unix://$PWD/dev/csi.sock.
";

/// Runs one client command; the result is what to print, or an error line.
/// `env` looks up `CSI_ENDPOINT`.
pub fn run(args: &[String], env: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut args: Vec<String> = args.to_vec();
    let endpoint = take_flag(&mut args, "--endpoint")?;
    let target = match client_endpoint(endpoint, env)? {
        Endpoint::Unix(path) => format!("unix:{}", path.display()),
        Endpoint::Tcp(addr) => addr,
    };
    if args.is_empty() || args[0] == "--help" || args[0] == "help" {
        return Ok(USAGE.to_string());
    }
    // Asked of any command, help makes no call: `create-volume --help`
    // must never create a volume named `--help`.
    if args.iter().any(|a| a == "--help" || a == "-h") {
        return Ok(usage_of(&args[0]));
    }
    let channel = ChannelBuilder::new(Arc::new(Environment::new(1))).connect(&target);
    let c = Clients {
        identity: csi_grpc::IdentityClient::new(channel.clone()),
        controller: csi_grpc::ControllerClient::new(channel.clone()),
        groups: csi_grpc::GroupControllerClient::new(channel.clone()),
        node: csi_grpc::NodeClient::new(channel),
    };
    let command = args.remove(0);
    c.dispatch(&command, args)
        .map_err(|e| format!("{command}: {e}"))
}

/// The usage lines of `command` (its line and the continuation lines
/// under it), else the whole usage.
fn usage_of(command: &str) -> String {
    let is_command = |l: &&str| {
        l.starts_with("  ") && !l.starts_with("   ") && l.split_whitespace().next() == Some(command)
    };
    let mut lines = USAGE.lines().skip_while(|l| !is_command(l));
    let Some(first) = lines.next() else {
        return USAGE.to_string();
    };
    let mut out = format!("Usage: linode-nfs-csi client {}\n", first.trim_start());
    for more in lines.take_while(|l| l.starts_with("   ")) {
        out.push_str(&format!("    {}\n", more.trim_start()));
    }
    out
}

struct Clients {
    identity: csi_grpc::IdentityClient,
    controller: csi_grpc::ControllerClient,
    groups: csi_grpc::GroupControllerClient,
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

/// What to print for a call whose answer holds nothing to show.
fn done<T>(r: grpcio::Result<T>, what: &str) -> Result<String, String> {
    rpc(r)?;
    Ok(format!("{what}\n"))
}

fn rpc<T>(r: grpcio::Result<T>) -> Result<T, String> {
    r.map_err(|e| match e {
        grpcio::Error::RpcFailure(s) => format!("{:?}: {}", s.code(), s.message()),
        other => other.to_string(),
    })
}

/// `--squash` and `--tags` as the mutable parameters a VolumeAttributesClass
/// would carry.
fn take_mutable(args: &mut Vec<String>) -> Result<HashMap<String, String>, String> {
    let mut mutable = HashMap::new();
    if let Some(squash) = take_flag(args, "--squash")? {
        mutable.insert(ROOT_SQUASH.to_string(), squash);
    }
    if let Some(tags) = take_flag(args, "--tags")? {
        mutable.insert(TAGS.to_string(), tags);
    }
    Ok(mutable)
}

/// The CreateVolume request of `create-volume` and `clone`, less its name
/// and source: an RWX PVC of the dev StorageClass unless `--param` says
/// otherwise.
fn create_request(args: &mut Vec<String>) -> Result<csi::CreateVolumeRequest, String> {
    let size = take_flag(args, "--size")?;
    let shared = take_flag(args, "--shared")?;
    let pool = take_flag(args, "--pool")?;
    let mut params = HashMap::new();
    while let Some(p) = take_flag(args, "--param")? {
        let (k, v) = p.split_once('=').ok_or("--param wants key=value")?;
        params.insert(k.to_string(), v.to_string());
    }
    if !params.contains_key(SPACE_ID) && !params.contains_key(SPACE_LABEL) {
        params.insert(SPACE_LABEL.into(), DEV_SPACE_LABEL.into());
    }
    match (shared, pool) {
        (Some(_), Some(_)) => return Err("--shared and --pool are exclusive".into()),
        (Some(label), None) => {
            params.insert(VOLUME_TYPE.into(), "subdirectory".into());
            params.insert(SHARED_FS_LABEL.into(), label);
        }
        (None, Some(pool)) => {
            params.insert(VOLUME_TYPE.into(), "subdirectory".into());
            params.insert(POOL.into(), pool);
        }
        (None, None) => {}
    }
    let mut req = csi::CreateVolumeRequest::new();
    req.parameters = params;
    req.mutable_parameters = take_mutable(args)?;
    req.volume_capabilities = vec![rwx()];
    if let Some(size) = size {
        let mut range = csi::CapacityRange::new();
        range.required_bytes = parse_quantity(&size)?;
        req.capacity_range = Some(range).into();
    }
    Ok(req)
}

/// ControllerExpandVolume of `id` to `size`, as csi-resizer sends it for a
/// mounted RWX PVC.
fn expand_request(id: String, size: &str) -> Result<csi::ControllerExpandVolumeRequest, String> {
    let mut range = csi::CapacityRange::new();
    range.required_bytes = parse_quantity(size)?;
    let mut req = csi::ControllerExpandVolumeRequest::new();
    req.volume_id = id;
    req.capacity_range = Some(range).into();
    req.volume_capability = Some(rwx()).into();
    Ok(req)
}

/// A mount capability with the most permissive mode, as an RWX PVC would
/// use: every request of the client asks for it.
fn rwx() -> csi::VolumeCapability {
    let mut access = csi::volume_capability::AccessMode::new();
    access.mode = Mode::MULTI_NODE_MULTI_WRITER.into();
    let mut cap = csi::VolumeCapability::new();
    cap.set_mount(csi::volume_capability::MountVolume::new());
    cap.access_mode = Some(access).into();
    cap
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
                // A controller-only or node-only endpoint serves one of the two.
                let controller = match self
                    .controller
                    .controller_get_capabilities(&Default::default())
                {
                    Ok(resp) => resp
                        .capabilities
                        .iter()
                        .filter(|c| c.has_rpc())
                        .map(|c| format!("{:?}", c.rpc().type_.enum_value_or_default()))
                        .collect::<Vec<_>>()
                        .join(", "),
                    Err(_) => "not served here".into(),
                };
                let node = match self.node.node_get_capabilities(&Default::default()) {
                    Ok(resp) => resp
                        .capabilities
                        .iter()
                        .filter(|c| c.has_rpc())
                        .map(|c| format!("{:?}", c.rpc().type_.enum_value_or_default()))
                        .collect::<Vec<_>>()
                        .join(", "),
                    Err(_) => "not served here".into(),
                };
                Ok(format!(
                    "{} {}\nplugin services: {}\ncontroller: {controller}\nnode: {node}\n",
                    info.name,
                    info.vendor_version,
                    services.join(", ")
                ))
            }
            "create-volume" => {
                let from = take_flag(&mut args, "--from-snapshot")?;
                let req = create_request(&mut args)?;
                let [name] = positional(args, ["NAME"])?;
                let source = from.map(|snapshot_id| {
                    let mut source = csi::VolumeContentSource::new();
                    source.set_snapshot(SnapshotSource {
                        snapshot_id,
                        ..Default::default()
                    });
                    source
                });
                self.create_volume(req, name, source)
            }
            "clone" => {
                let req = create_request(&mut args)?;
                let [name, volume_id] = positional(args, ["NEW_NAME", "SOURCE_VOLUME_ID"])?;
                let mut source = csi::VolumeContentSource::new();
                source.set_volume(VolumeSource {
                    volume_id,
                    ..Default::default()
                });
                self.create_volume(req, name, Some(source))
            }
            "delete-volume" => {
                let [id] = positional(args, ["VOLUME_ID"])?;
                let mut req = csi::DeleteVolumeRequest::new();
                req.volume_id = id;
                done(self.controller.delete_volume(&req), "deleted")
            }
            "get-volume" => {
                let [id] = positional(args, ["VOLUME_ID"])?;
                let resp = rpc(self
                    .controller
                    .controller_get_volume(&self.get_volume_req(&id)))?;
                Ok(format!(
                    "{}published_node_ids: {}\ncondition: {}\n",
                    describe_volume(&resp.volume),
                    node_ids(&resp.status.published_node_ids),
                    describe_condition(&resp.status.volume_condition)
                ))
            }
            "list-volumes" => {
                let mut req = csi::ListVolumesRequest::new();
                if let Some(max) = take_flag(&mut args, "--max")? {
                    req.max_entries = max
                        .parse()
                        .map_err(|_| format!("--max wants a number, not {max:?}"))?;
                }
                req.starting_token = take_flag(&mut args, "--token")?.unwrap_or_default();
                positional(args, [])?;
                let resp = rpc(self.controller.list_volumes(&req))?;
                let mut out: String = resp
                    .entries
                    .iter()
                    .map(|e| {
                        format!(
                            "volume_id: {} capacity_bytes: {} published_node_ids: {} condition: {}\n",
                            e.volume.volume_id,
                            e.volume.capacity_bytes,
                            node_ids(&e.status.published_node_ids),
                            describe_condition(&e.status.volume_condition)
                        )
                    })
                    .collect();
                if !resp.next_token.is_empty() {
                    out.push_str(&format!("next_token: {}\n", resp.next_token));
                }
                Ok(out)
            }
            "capacity" => {
                let mut req = csi::GetCapacityRequest::new();
                if let Some(label) = take_flag(&mut args, "--space-label")? {
                    req.parameters.insert(SPACE_LABEL.into(), label);
                }
                if let Some(id) = take_flag(&mut args, "--space-id")? {
                    req.parameters.insert(SPACE_ID.into(), id);
                }
                positional(args, [])?;
                let resp = rpc(self.controller.get_capacity(&req))?;
                let mut out = format!("available_capacity: {}\n", resp.available_capacity);
                if let Some(max) = resp.maximum_volume_size.as_ref() {
                    out.push_str(&format!("maximum_volume_size: {}\n", max.value));
                }
                if let Some(min) = resp.minimum_volume_size.as_ref() {
                    out.push_str(&format!("minimum_volume_size: {}\n", min.value));
                }
                Ok(out)
            }
            "modify" => {
                let mutable = take_mutable(&mut args)?;
                let [id] = positional(args, ["VOLUME_ID"])?;
                let mut req = csi::ControllerModifyVolumeRequest::new();
                req.volume_id = id;
                req.mutable_parameters = mutable;
                done(self.controller.controller_modify_volume(&req), "modified")
            }
            "expand" => {
                let size = take_flag(&mut args, "--size")?.ok_or("--size is required")?;
                let [id] = positional(args, ["VOLUME_ID"])?;
                let resp = rpc(self
                    .controller
                    .controller_expand_volume(&expand_request(id, &size)?))?;
                Ok(format!(
                    "capacity_bytes: {}\nnode_expansion_required: {}\n",
                    resp.capacity_bytes, resp.node_expansion_required
                ))
            }
            "publish-controller" | "unpublish-controller" => {
                let [id, node] = positional(args, ["VOLUME_ID", "NODE_ID"])?;
                if command == "publish-controller" {
                    let mut req = csi::ControllerPublishVolumeRequest::new();
                    req.volume_id = id;
                    req.node_id = node;
                    req.volume_capability = Some(rwx()).into();
                    done(self.controller.controller_publish_volume(&req), "done")
                } else {
                    let mut req = csi::ControllerUnpublishVolumeRequest::new();
                    req.volume_id = id;
                    req.node_id = node;
                    done(self.controller.controller_unpublish_volume(&req), "done")
                }
            }
            "stage" => {
                let [id, staging] = positional(args, ["VOLUME_ID", "STAGING_PATH"])?;
                let volume = rpc(self
                    .controller
                    .controller_get_volume(&self.get_volume_req(&id)))?;
                let mut req = csi::NodeStageVolumeRequest::new();
                req.volume_id = id;
                req.staging_target_path = staging;
                req.volume_capability = Some(rwx()).into();
                req.volume_context = volume.volume.volume_context.clone();
                done(self.node.node_stage_volume(&req), "staged")
            }
            "unstage" => {
                let [id, staging] = positional(args, ["VOLUME_ID", "STAGING_PATH"])?;
                let mut req = csi::NodeUnstageVolumeRequest::new();
                req.volume_id = id;
                req.staging_target_path = staging;
                done(self.node.node_unstage_volume(&req), "unstaged")
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
                req.volume_capability = Some(rwx()).into();
                done(self.node.node_publish_volume(&req), "published")
            }
            "unpublish" => {
                let [id, target] = positional(args, ["VOLUME_ID", "TARGET_PATH"])?;
                let mut req = csi::NodeUnpublishVolumeRequest::new();
                req.volume_id = id;
                req.target_path = target;
                done(self.node.node_unpublish_volume(&req), "unpublished")
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
            "get-snapshot" => {
                let [id] = positional(args, ["SNAPSHOT_ID"])?;
                let mut req = csi::GetSnapshotRequest::new();
                req.snapshot_id = id;
                let resp = rpc(self.controller.get_snapshot(&req))?;
                Ok(describe_snapshot(&resp.snapshot))
            }
            "delete-snapshot" => {
                let [id] = positional(args, ["SNAPSHOT_ID"])?;
                let mut req = csi::DeleteSnapshotRequest::new();
                req.snapshot_id = id;
                done(self.controller.delete_snapshot(&req), "deleted")
            }
            "group-snapshot" => {
                if args.len() < 2 {
                    return Err("expected arguments: NAME VOLUME_ID...".into());
                }
                let mut req = csi::CreateVolumeGroupSnapshotRequest::new();
                req.name = args.remove(0);
                req.source_volume_ids = args;
                let resp = rpc(self.groups.create_volume_group_snapshot(&req))?;
                Ok(describe_group(&resp.group_snapshot))
            }
            "get-group-snapshot" => {
                let [id] = positional(args, ["GROUP_ID"])?;
                let mut req = csi::GetVolumeGroupSnapshotRequest::new();
                req.group_snapshot_id = id;
                let resp = rpc(self.groups.get_volume_group_snapshot(&req))?;
                Ok(describe_group(&resp.group_snapshot))
            }
            "delete-group-snapshot" => {
                if args.is_empty() {
                    return Err("expected arguments: GROUP_ID [SNAPSHOT_ID...]".into());
                }
                let mut req = csi::DeleteVolumeGroupSnapshotRequest::new();
                req.group_snapshot_id = args.remove(0);
                req.snapshot_ids = args;
                done(self.groups.delete_volume_group_snapshot(&req), "deleted")
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

    /// CreateVolume of `req` named `name`, with its content from `source`.
    fn create_volume(
        &self,
        mut req: csi::CreateVolumeRequest,
        name: String,
        source: Option<csi::VolumeContentSource>,
    ) -> Result<String, String> {
        req.name = name;
        req.volume_content_source = source.into();
        let resp = rpc(self.controller.create_volume(&req))?;
        Ok(describe_volume(&resp.volume))
    }

    fn get_volume_req(&self, id: &str) -> csi::ControllerGetVolumeRequest {
        let mut req = csi::ControllerGetVolumeRequest::new();
        req.volume_id = id.to_string();
        req
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn params(list: &[&str]) -> Vec<(String, String)> {
        let mut rest = args(list);
        let req = create_request(&mut rest).unwrap();
        assert!(rest.is_empty() || rest == ["NAME"], "{rest:?}");
        let mut out: Vec<_> = req.parameters.into_iter().collect();
        out.sort();
        out
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn shared_makes_a_directory_of_the_labelled_filesystem_in_the_dev_space() {
        assert_eq!(
            params(&["NAME", "--shared", "dev-shared", "--size", "1Gi"]),
            pairs(&[
                (SHARED_FS_LABEL, "dev-shared"),
                (SPACE_LABEL, DEV_SPACE_LABEL),
                (VOLUME_TYPE, "subdirectory"),
            ])
        );
        assert_eq!(
            params(&[
                "--shared=pool",
                "--param",
                "linodenfs.csi.linode.com/space-id=7",
                "--param",
                "linodenfs.csi.linode.com/quota=best-effort",
            ]),
            pairs(&[
                ("linodenfs.csi.linode.com/quota", "best-effort"),
                (SHARED_FS_LABEL, "pool"),
                (SPACE_ID, "7"),
                (VOLUME_TYPE, "subdirectory"),
            ])
        );
        // Without --shared, a --param that names no Space still gets the
        // dev Space; one that does keeps its own.
        assert_eq!(
            params(&["--param", "linodenfs.csi.linode.com/tags=a"]),
            pairs(&[
                (SPACE_LABEL, DEV_SPACE_LABEL),
                ("linodenfs.csi.linode.com/tags", "a"),
            ])
        );
        assert_eq!(
            params(&["--param", "linodenfs.csi.linode.com/space-label=prod"]),
            pairs(&[(SPACE_LABEL, "prod")])
        );
        let mut missing = args(&["--shared"]);
        assert!(create_request(&mut missing).is_err());
    }

    #[test]
    fn expand_asks_for_the_size_as_bytes() {
        let req = expand_request("7/11/pvc-a".into(), "2Gi").unwrap();
        assert_eq!(req.volume_id, "7/11/pvc-a");
        assert_eq!(req.capacity_range.required_bytes, 2 << 30);
        assert!(req.volume_capability.has_mount());
        assert!(expand_request("1/2".into(), "lots").is_err());
    }
}
