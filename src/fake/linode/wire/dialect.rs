//! How a backend variant writes its answers: the canonical JSON of `render`,
//! rewritten on its way out for the API shapes the contract documents besides
//! the current one (linode-api.md §8: capacity in `stats`) and for a Go
//! backend's nulls. It only rewrites success bodies the routes produced,
//! never decides them; the fake's inspection helpers read the canonical JSON.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Which rewrites apply (none by default: the current contract).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::fake::linode) struct Dialect {
    /// The earlier fork's filesystem: no top-level `max_capacity_bytes` or
    /// `max_file_count`; `stats` is `{used_capacity_bytes,
    /// max_capacity_bytes, collected_at}`.
    #[serde(default)]
    pub(in crate::fake::linode) capacity_in_stats: bool,
    /// Go-style zero values, see [`go_nulls`] and [`omitted`].
    #[serde(default)]
    pub(in crate::fake::linode) null_fields: bool,
}

/// The object a success body is (or lists), by endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Object {
    Space,
    SpacePolicy,
    Filesystem,
    FilesystemPolicy,
    Snapshot,
    Instance,
    Config,
    Interface,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    One(Object),
    Page(Object),
    /// `{"interfaces": [...]}` or a page of them.
    Interfaces,
    /// `{}` of a DELETE, or nothing this module knows.
    Other,
}

fn body(method: &str, path: &str) -> Body {
    use Object::*;
    let seg: Vec<&str> = path.split('/').collect();
    match (method, seg.as_slice()) {
        ("DELETE", _) => Body::Other,
        ("GET", ["nfs", "spaces"]) => Body::Page(Space),
        (_, ["nfs", "spaces", _]) => Body::One(Space),
        (_, ["nfs", "spaces", _, "access-policy"]) => Body::One(SpacePolicy),
        ("GET", ["nfs", "spaces", _, "filesystems"]) => Body::Page(Filesystem),
        (_, ["nfs", "spaces", _, "filesystems"]) => Body::One(Filesystem),
        (_, ["nfs", "spaces", _, "filesystems", _]) => Body::One(Filesystem),
        (_, ["nfs", "spaces", _, "filesystems", _, "access-policy"]) => Body::One(FilesystemPolicy),
        ("GET", ["nfs", "spaces", _, "filesystems", _, "snapshots"]) => Body::Page(Snapshot),
        (_, ["nfs", "spaces", _, "filesystems", _, "snapshots"]) => Body::One(Snapshot),
        (_, ["nfs", "spaces", _, "filesystems", _, "snapshots", _]) => Body::One(Snapshot),
        (_, ["nfs", "spaces", _, "filesystems", _, "snapshots", _, "clone"]) => {
            Body::One(Filesystem)
        }
        (_, ["linode", "instances", _]) => Body::One(Instance),
        (_, ["linode", "instances", _, "configs"]) => Body::Page(Config),
        (_, ["linode", "instances", _, "interfaces"]) => Body::Interfaces,
        _ => Body::Other,
    }
}

/// Fields a Go backend's structs leave out (`omitempty` on pointers and
/// optional values): nothing the driver needs to act on. Essential fields
/// (ids, labels of spaces, filesystems and snapshots, `region`, `status`,
/// `mount_target_fqdn`, `squash_policy`, `mtls_mode`, `purpose`, `vpc_id`,
/// a snapshot's `created`) are always written.
fn omitted(object: Object) -> &'static [&'static str] {
    match object {
        Object::Space => &["description"],
        Object::SpacePolicy | Object::FilesystemPolicy => &["created", "updated"],
        Object::Filesystem => &["ldap_config_id", "max_file_count", "updated"],
        Object::Snapshot => &["policy_id", "expiration", "aggregated_size_bytes"],
        Object::Instance => &["lke_cluster_id"],
        Object::Config => &["kernel", "root_device"],
        Object::Interface => &["version", "mac_address"],
    }
}

/// Fields inside an object that get the same treatment (config-profile
/// interfaces inside a config).
const OMITTED_IN_CONFIG_INTERFACES: [&str; 2] = ["ipam_address", "ip_ranges"];

impl Dialect {
    /// The body of a 200 answer to `method path`, as this dialect writes it.
    pub(in crate::fake::linode) fn write(
        &self,
        method: &str,
        path: &str,
        mut value: Value,
    ) -> Value {
        if *self == Dialect::default() {
            return value;
        }
        match body(method, path) {
            Body::One(object) => self.object(object, &mut value),
            Body::Page(object) => {
                for item in items(&mut value, "data") {
                    self.object(object, item);
                }
            }
            Body::Interfaces => {
                let key = if value.get("interfaces").is_some() {
                    "interfaces"
                } else {
                    "data"
                };
                for item in items(&mut value, key) {
                    self.object(Object::Interface, item);
                }
            }
            Body::Other => {}
        }
        if self.null_fields {
            go_nulls(&mut value, None);
        }
        value
    }

    fn object(&self, object: Object, value: &mut Value) {
        let Value::Object(map) = value else {
            return;
        };
        if self.capacity_in_stats && object == Object::Filesystem {
            capacity_into_stats(map);
        }
        if !self.null_fields {
            return;
        }
        for key in omitted(object) {
            map.remove(*key);
        }
        match object {
            // The backend does not fill in a policy's label.
            Object::SpacePolicy | Object::FilesystemPolicy => {
                map.insert("label".to_string(), Value::Null);
            }
            Object::Config => {
                if let Some(Value::Array(list)) = map.get_mut("interfaces") {
                    for interface in list.iter_mut().filter_map(Value::as_object_mut) {
                        for key in OMITTED_IN_CONFIG_INTERFACES {
                            interface.remove(key);
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

fn items<'a>(value: &'a mut Value, key: &str) -> impl Iterator<Item = &'a mut Value> {
    value
        .get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

fn capacity_into_stats(map: &mut Map<String, Value>) {
    let capacity = map.remove("max_capacity_bytes").unwrap_or(Value::Null);
    map.remove("max_file_count");
    let stats = map
        .entry("stats")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(stats) = stats {
        stats.remove("used_file_count");
        stats.insert("max_capacity_bytes".to_string(), capacity);
    }
}

/// A Go backend's zero values: an empty list is `null` (a nil slice), a
/// `false` is `null` (a `*bool` never set), and a zero size or count (a key
/// ending in `_bytes` or `_count`) is `null` (a `*int64` never set).
fn go_nulls(value: &mut Value, key: Option<&str>) {
    let zero_size = key.is_some_and(|k| k.ends_with("_bytes") || k.ends_with("_count"));
    match value {
        Value::Array(list) if list.is_empty() => *value = Value::Null,
        Value::Array(list) => list.iter_mut().for_each(|v| go_nulls(v, None)),
        Value::Bool(false) => *value = Value::Null,
        Value::Number(n) if zero_size && n.as_f64() == Some(0.0) => *value = Value::Null,
        Value::Object(map) => map.iter_mut().for_each(|(k, v)| go_nulls(v, Some(k))),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_default_dialect_changes_nothing() {
        let fs = json!({"id": 1, "max_capacity_bytes": 5, "tags": [], "stats": {}});
        assert_eq!(
            Dialect::default().write("GET", "nfs/spaces/1/filesystems/1", fs.clone()),
            fs
        );
    }

    #[test]
    fn capacity_moves_into_stats_of_every_filesystem_answer() {
        let d = Dialect {
            capacity_in_stats: true,
            null_fields: false,
        };
        let fs = json!({"id": 1, "max_capacity_bytes": 5, "max_file_count": 9,
            "stats": {"used_capacity_bytes": 0, "used_file_count": 1, "collected_at": null}});
        let want = json!({"id": 1,
            "stats": {"used_capacity_bytes": 0, "max_capacity_bytes": 5, "collected_at": null}});
        for (method, path) in [
            ("GET", "nfs/spaces/1/filesystems/1"),
            ("POST", "nfs/spaces/1/filesystems"),
            ("PUT", "nfs/spaces/1/filesystems/1"),
            ("POST", "nfs/spaces/1/filesystems/1/snapshots/2/clone"),
        ] {
            assert_eq!(d.write(method, path, fs.clone()), want, "{method} {path}");
        }
        let page = json!({"data": [fs.clone()], "page": 1, "pages": 1, "results": 1});
        assert_eq!(
            d.write("GET", "nfs/spaces/1/filesystems", page)["data"][0],
            want
        );
        let space = json!({"id": 1, "max_capacity_bytes": 5});
        assert_eq!(d.write("GET", "nfs/spaces/1", space.clone()), space);
    }

    #[test]
    fn go_zero_values_become_null() {
        let d = Dialect {
            capacity_in_stats: false,
            null_fields: true,
        };
        let policy = json!({"filesystem_id": 3, "label": "pvc-a", "enabled": false,
            "linode_acl": [], "squash_policy": "none", "protocols": ["nfsv4"],
            "status": "active", "created": "2026-01-01T00:00:00", "updated": null});
        assert_eq!(
            d.write("GET", "nfs/spaces/1/filesystems/3/access-policy", policy),
            json!({"filesystem_id": 3, "label": null, "enabled": null, "linode_acl": null,
                "squash_policy": "none", "protocols": ["nfsv4"], "status": "active"})
        );
        let snap = json!({"id": 4, "label": "s", "locked": false, "size_bytes": 0,
            "policy_id": null, "expiration": null, "aggregated_size_bytes": 0, "tags": []});
        assert_eq!(
            d.write("GET", "nfs/spaces/1/filesystems/3/snapshots/4", snap),
            json!({"id": 4, "label": "s", "locked": null, "size_bytes": null, "tags": null})
        );
        let empty = json!({"data": [], "page": 1, "pages": 1, "results": 0});
        assert_eq!(
            d.write("GET", "nfs/spaces/1/filesystems", empty),
            json!({"data": null, "page": 1, "pages": 1, "results": 0}),
            "envelope integers stay, only the empty list is null"
        );
        assert_eq!(
            d.write("DELETE", "nfs/spaces/1/filesystems/3", json!({})),
            json!({})
        );
    }
}
