//! The JSON the fake answers for each record, as `GET` shows it now. It must
//! only read the state, never change it.

use super::super::seed::InstanceSeed;
use super::super::state::{
    export_path, now_secs, FsRec, Phase, QuotaRec, QuotaUsage, SnapRec, SnapshotTimes, SpaceRec,
    State, SNAPSHOT_SIZE_BYTES,
};
use crate::linode::types::unix_to_naive;
use serde_json::{json, Value};

const DEFAULT_MAX_FILE_COUNT: i64 = 2_000_000;

fn ts(secs: i64) -> Value {
    json!(unix_to_naive(secs))
}

impl State {
    pub(in crate::fake::linode) fn space_json(&self, s: &SpaceRec) -> Value {
        json!({
            "id": s.id, "label": s.label, "description": null, "status": "active",
            "max_capacity_bytes": s.max_capacity_bytes,
            "used_capacity_bytes": self.space_used_bytes(s.id),
            "created": ts(s.created), "updated": ts(s.created), "tags": s.tags
        })
    }

    /// Modelled, not documented: a Space's used capacity is what its live
    /// filesystems were created to hold.
    fn space_used_bytes(&self, space_id: u64) -> i64 {
        self.filesystems
            .values()
            .filter(|f| f.space_id == space_id && f.phase != Phase::Deleting)
            .map(|f| f.max_capacity_bytes)
            .sum()
    }

    pub(in crate::fake::linode) fn space_policy_json(&self, s: &SpaceRec) -> Value {
        json!({
            "space_id": s.id, "label": s.label, "enabled": false, "vpc_acl": [],
            "mtls_ca_cert": null, "mtls_mode": s.mtls_mode, "status": "active",
            "created": ts(s.created), "updated": null
        })
    }

    pub(in crate::fake::linode) fn fs_json(&self, f: &FsRec) -> Value {
        let status = match f.phase {
            Phase::Creating => "creating",
            Phase::Active => "active",
            Phase::Error => "error",
            Phase::Deleting => "deleting",
        };
        let export = export_path(&f.label, f.id);
        let space_label = self
            .spaces
            .get(&f.space_id)
            .map_or("space", |s| s.label.as_str());
        let (fqdn, ips) = if f.mount_targets {
            let fqdn = format!("{space_label}.nfs.{}.example:{export}", f.region);
            let ip = format!("[2001:db8::{:x}]:{export}", f.id);
            (
                (!f.hide_fqdn).then_some(fqdn),
                if f.hide_ips { vec![] } else { vec![ip] },
            )
        } else {
            (None, vec![])
        };
        let stats = if f.mount_targets {
            json!({"used_capacity_bytes": 0, "used_file_count": 1, "collected_at": ts(f.updated)})
        } else {
            json!({"used_capacity_bytes": null, "used_file_count": null, "collected_at": null})
        };
        json!({
            "id": f.id, "space_id": f.space_id, "label": f.label, "region": f.region,
            "protocol_versions": ["nfsv4"], "status": status,
            "mount_target_ips": ips, "mount_target_fqdn": fqdn,
            "max_capacity_bytes": f.max_capacity_bytes, "max_file_count": DEFAULT_MAX_FILE_COUNT,
            "snapshot_usage_bytes": if f.mount_targets { json!(0) } else { Value::Null },
            "ldap_config_id": null,
            "source_snapshot_id": if self.omit_source_snapshot_id { None } else { f.source_snapshot_id },
            "created": ts(f.created), "updated": ts(f.updated), "tags": f.tags, "stats": stats
        })
    }

    pub(in crate::fake::linode) fn fs_policy_json(&self, f: &FsRec) -> Value {
        let p = &f.policy;
        let status = match (p.updating_until, p.error) {
            (Some(_), _) => "updating",
            (None, true) => "error",
            (None, false) => "active",
        };
        let acl: Vec<Value> = p
            .linode_ids
            .iter()
            .map(|id| {
                let inst = self.instances.get(id);
                json!({
                    "id": id,
                    "label": inst.map(|i| i.label.clone()),
                    "url": format!("/v4/linode/instances/{id}"),
                    "ipv6": inst.and_then(|i| i.ipv6.as_ref())
                        .map(|v| v.split('/').next().unwrap_or(v).to_string())
                })
            })
            .collect();
        json!({
            "filesystem_id": f.id, "label": p.label, "enabled": p.enabled, "linode_acl": acl,
            "squash_policy": p.squash_policy, "protocols": p.protocols, "status": status,
            "created": ts(p.created), "updated": p.updated.map(ts)
        })
    }

    pub(in crate::fake::linode) fn snap_json(&self, s: &SnapRec) -> Value {
        let (status, size) = match s.phase {
            Phase::Creating => ("creating", 0),
            Phase::Active => ("active", SNAPSHOT_SIZE_BYTES),
            Phase::Error => ("error", 0),
            Phase::Deleting => ("deleting", SNAPSHOT_SIZE_BYTES),
        };
        let (created, updated) = match s.times {
            SnapshotTimes::Both => (ts(s.created), s.updated.map(ts).into()),
            SnapshotTimes::NoCreated => (Value::Null, s.updated.map(ts).into()),
            SnapshotTimes::Neither => (Value::Null, Value::Null),
        };
        json!({
            "id": s.id, "filesystem_id": s.filesystem_id, "space_id": s.space_id,
            "label": s.label, "status": status, "created": created, "updated": updated,
            "expiration": null,
            "locked": s.locked, "source": "manual", "policy_id": null,
            "size_bytes": size, "aggregated_size_bytes": size, "tags": s.tags
        })
    }

    /// A quota's path as this backend writes it (with the export name in
    /// front under `quota-path-with-export`).
    pub(in crate::fake::linode) fn quota_wire_path(&self, q: &QuotaRec) -> String {
        match self.filesystems.get(&q.filesystem_id) {
            Some(fs) if self.quota_behaviour.path_with_export => {
                let export = export_path(&fs.label, fs.id);
                match q.path.as_str() {
                    "/" => export,
                    inside => format!("{export}{inside}"),
                }
            }
            _ => q.path.clone(),
        }
    }

    /// What a read shows of a quota's usage: sampled now from the export's
    /// content when someone answers for it (null while its directory does
    /// not exist), else what was last set.
    fn quota_usage(&self, q: &QuotaRec) -> Option<QuotaUsage> {
        if q.is_root {
            return Some(self.root_usage(q));
        }
        if !self.content.installed() {
            return q.usage;
        }
        let fs = self.filesystems.get(&q.filesystem_id)?;
        let sampled = self
            .content
            .usage(&export_path(&fs.label, fs.id), &q.path)?;
        Some(QuotaUsage {
            bytes: sampled.bytes,
            files: sampled.files,
            collected_at: sampled.collected_at.unwrap_or_else(now_secs),
        })
    }

    /// A root quota's usage is always shown (the whole filesystem's): the
    /// export's content at `/` when someone answers for it, else what its
    /// other quotas show together (nothing, on a fresh filesystem).
    fn root_usage(&self, root: &QuotaRec) -> QuotaUsage {
        let whole = self
            .filesystems
            .get(&root.filesystem_id)
            .filter(|_| self.content.installed())
            .and_then(|fs| self.content.usage(&export_path(&fs.label, fs.id), "/"));
        let unquoted = self
            .filesystems
            .get(&root.filesystem_id)
            .map_or(0, |fs| fs.unquoted_bytes);
        let (bytes, files) = match whole {
            Some(u) => (u.bytes, u.files),
            None => self
                .quotas
                .values()
                .filter(|q| q.filesystem_id == root.filesystem_id)
                .filter_map(|q| self.quota_usage(q))
                .fold((unquoted, 0), |(b, f), u| (b + u.bytes, f + u.files)),
        };
        QuotaUsage {
            bytes,
            files,
            collected_at: now_secs(),
        }
    }

    pub(in crate::fake::linode) fn quota_json(&self, q: &QuotaRec) -> Value {
        let status = match q.phase {
            Phase::Active => "active",
            Phase::Error => "error",
            Phase::Creating | Phase::Deleting => "updating",
        };
        let usage = self.quota_usage(q);
        let exceeded = usage.is_some_and(|u| {
            u.bytes > q.max_capacity_bytes || q.max_file_count.is_some_and(|max| u.files > max)
        });
        json!({
            "id": q.id, "filesystem_id": q.filesystem_id, "path": self.quota_wire_path(q),
            "is_root": q.is_root, "max_capacity_bytes": q.max_capacity_bytes,
            "used_capacity_bytes": usage.map(|u| u.bytes),
            "quota_exceeded": exceeded, "max_file_count": q.max_file_count,
            "used_file_count": usage.map(|u| u.files), "status": status,
            "created": ts(q.created), "updated": q.updated.map(ts),
            "collected_at": usage.map(|u| ts(u.collected_at)),
            "user_group_config": null
        })
    }

    pub(in crate::fake::linode) fn instance_json(&self, i: &InstanceSeed) -> Value {
        let mut v = json!({
            "id": i.id, "label": i.label, "region": i.region, "status": "running",
            "type": "g6-standard-4", "ipv4": ["192.0.2.1"], "ipv6": i.ipv6,
            "tags": [], "lke_cluster_id": null
        });
        if let Some(g) = &i.interface_generation {
            v["interface_generation"] = json!(g);
        }
        v
    }

    fn uses_linode_interfaces(i: &InstanceSeed) -> bool {
        i.interface_generation.as_deref() == Some("linode")
    }

    pub(in crate::fake::linode) fn configs_json(&self, i: &InstanceSeed) -> Vec<Value> {
        let mut interfaces = vec![json!({
            "id": 1, "purpose": "public", "primary": false, "active": true,
            "vpc_id": null, "subnet_id": null, "label": null, "ipam_address": null,
            "ipv4": null, "ipv6": null, "ip_ranges": null
        })];
        if !State::uses_linode_interfaces(i) {
            for (n, v) in i.vpcs.iter().enumerate() {
                interfaces.push(json!({
                    "id": n + 2, "purpose": "vpc", "primary": n == 0, "active": true,
                    "vpc_id": v.vpc_id, "subnet_id": v.subnet_id, "label": null,
                    "ipam_address": null,
                    "ipv4": {"vpc": v.address.clone().unwrap_or_else(|| "10.0.0.2".into()),
                             "nat_1_1": null},
                    "ipv6": null, "ip_ranges": []
                }));
            }
        }
        vec![json!({
            "id": 70_000 + i.id % 10_000, "label": "boot-config", "kernel": "linode/grub2",
            "root_device": "/dev/sda", "interfaces": interfaces
        })]
    }

    pub(in crate::fake::linode) fn interfaces_json(&self, i: &InstanceSeed) -> Vec<Value> {
        if !State::uses_linode_interfaces(i) {
            return Vec::new();
        }
        i.vpcs
            .iter()
            .enumerate()
            .map(|(n, v)| {
                json!({
                    "id": 880 + n as u64, "version": 1, "mac_address": "22:00:AB:CD:EF:10",
                    "default_route": {"ipv4": n == 0, "ipv6": n == 0},
                    "public": null, "vlan": null,
                    "vpc": {"vpc_id": v.vpc_id, "subnet_id": v.subnet_id,
                            "ipv4": {"addresses": [{"address": v.address.clone()
                                .unwrap_or_else(|| "10.0.0.2".into()), "primary": true,
                                "nat_1_1_address": null}], "ranges": []}}
                })
            })
            .collect()
    }
}
