//! The PersistentVolumeClaims autogrow reads and grows, and the events it
//! leaves on them: one list of every claim, a merge patch of one claim's
//! requested storage (guarded by the resourceVersion it was read at, so a
//! claim changed since is never grown blindly) and an event on a claim.
//! Only the fields the driver reads are parsed. What to grow is the
//! controller's.

use super::client::{percent_encode, KubeClient, Sent};
use super::lease::micro_time;
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::SystemTime;

/// The part of a PersistentVolumeClaim autogrow reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistentVolumeClaim {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub annotations: BTreeMap<String, String>,
    /// `spec.volumeName`: the PV it is bound to.
    pub volume_name: Option<String>,
    pub storage_class: Option<String>,
    /// `spec.resources.requests.storage`, in bytes.
    pub requested: Option<i64>,
    /// `status.capacity.storage`, in bytes: what the volume has now.
    pub capacity: Option<i64>,
    /// `status.allocatedResourceStatuses.storage`: the resizer's progress
    /// (`ControllerResizeInProgress`, `ControllerResizeInfeasible`, …).
    pub resize_status: Option<String>,
}

/// Whether a Warning or a Normal event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

#[derive(Deserialize)]
struct ClaimObject {
    metadata: ClaimMeta,
    #[serde(default)]
    spec: ClaimSpec,
    #[serde(default)]
    status: ClaimStatus,
}

#[derive(Deserialize)]
struct ClaimMeta {
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    uid: String,
    #[serde(rename = "resourceVersion", default)]
    resource_version: String,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize, Default)]
struct ClaimSpec {
    #[serde(rename = "volumeName")]
    volume_name: Option<String>,
    #[serde(rename = "storageClassName")]
    storage_class: Option<String>,
    #[serde(default)]
    resources: Resources,
}

#[derive(Deserialize, Default)]
struct Resources {
    #[serde(default)]
    requests: BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
struct ClaimStatus {
    #[serde(default)]
    capacity: BTreeMap<String, String>,
    #[serde(rename = "allocatedResourceStatuses", default)]
    allocated: BTreeMap<String, String>,
}

impl From<ClaimObject> for PersistentVolumeClaim {
    fn from(o: ClaimObject) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            namespace: o.metadata.namespace,
            name: o.metadata.name,
            uid: o.metadata.uid,
            resource_version: o.metadata.resource_version,
            annotations: o.metadata.annotations.unwrap_or_default(),
            volume_name: o.spec.volume_name.filter(|v| !v.is_empty()),
            storage_class: o.spec.storage_class,
            requested: o
                .spec
                .resources
                .requests
                .get("storage")
                .and_then(|q| quantity_bytes(q)),
            capacity: o
                .status
                .capacity
                .get("storage")
                .and_then(|q| quantity_bytes(q)),
            resize_status: o.status.allocated.get("storage").cloned(),
        }
    }
}

/// Bytes of a Kubernetes quantity (`10Gi`, `500M`, `1.5Gi`, `1e9`, plain
/// bytes), rounded up as Kubernetes rounds a storage request; `None` for
/// anything else.
pub fn quantity_bytes(raw: &str) -> Option<i64> {
    const SUFFIXES: [(&str, f64); 12] = [
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("Pi", 1125899906842624.0),
        ("Ei", 1152921504606846976.0),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    let raw = raw.trim();
    let (number, factor) = SUFFIXES
        .iter()
        .find_map(|(s, f)| raw.strip_suffix(s).map(|n| (n, *f)))
        .unwrap_or((raw, 1.0));
    let valid = !number.is_empty()
        && number
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'.' || b == b'e' || b == b'E' || b == b'+');
    let value = number.parse::<f64>().ok().filter(|_| valid)? * factor;
    (value.is_finite() && value >= 0.0 && value < i64::MAX as f64).then(|| value.ceil() as i64)
}

impl KubeClient {
    /// Every claim of the cluster, in one list.
    pub fn list_claims(&self) -> crate::Result<Vec<PersistentVolumeClaim>> {
        let items: Vec<ClaimObject> = self.list_all(
            "list_persistent_volume_claims",
            "/api/v1/persistentvolumeclaims",
            "PersistentVolumeClaimList",
        )?;
        Ok(items.into_iter().map(PersistentVolumeClaim::from).collect())
    }

    /// Claim `namespace/name`.
    pub fn get_claim(&self, namespace: &str, name: &str) -> crate::Result<PersistentVolumeClaim> {
        let body = self.get(
            "get_persistent_volume_claim",
            &claim_path(namespace, name),
            &format!("get persistentvolumeclaim {namespace}/{name}"),
        )?;
        let object: ClaimObject =
            serde_json::from_str(&body).map_err(|e| bad_claim(namespace, name, e))?;
        Ok(object.into())
    }

    /// Asks for `bytes` of storage for `claim`, as read: FailedPrecondition
    /// (409) when it changed since.
    pub fn request_claim_storage(
        &self,
        claim: &PersistentVolumeClaim,
        bytes: i64,
    ) -> crate::Result<PersistentVolumeClaim> {
        let (namespace, name) = (&claim.namespace, &claim.name);
        let patch = json!({
            "metadata": {"resourceVersion": claim.resource_version},
            "spec": {"resources": {"requests": {"storage": bytes.to_string()}}}
        })
        .to_string();
        let body = self.send(
            Sent {
                request: "patch_persistent_volume_claim",
                method: "PATCH",
                path: &claim_path(namespace, name),
                body: Some(&patch),
                content_type: Some("application/merge-patch+json"),
                timeout: None,
            },
            &format!("patch persistentvolumeclaim {namespace}/{name}"),
        )?;
        let object: ClaimObject =
            serde_json::from_str(&body).map_err(|e| bad_claim(namespace, name, e))?;
        Ok(object.into())
    }

    /// An event of `kind` on `claim`, from the driver.
    pub fn claim_event(
        &self,
        claim: &PersistentVolumeClaim,
        kind: EventType,
        reason: &str,
        message: &str,
    ) -> crate::Result<()> {
        let now = SystemTime::now();
        let stamp = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let time = micro_time(now);
        let seconds = &time[..19];
        let event = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": format!("{}.{stamp:x}", claim.name), "namespace": claim.namespace},
            "involvedObject": {
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "namespace": claim.namespace, "name": claim.name, "uid": claim.uid,
                "resourceVersion": claim.resource_version
            },
            "reason": reason, "message": message,
            "type": match kind { EventType::Normal => "Normal", EventType::Warning => "Warning" },
            "source": {"component": crate::build_info::DRIVER_NAME},
            "firstTimestamp": format!("{seconds}Z"), "lastTimestamp": format!("{seconds}Z"),
            "count": 1
        })
        .to_string();
        self.send(
            Sent {
                request: "create_event",
                method: "POST",
                path: &format!(
                    "/api/v1/namespaces/{}/events",
                    percent_encode(&claim.namespace)
                ),
                body: Some(&event),
                content_type: None,
                timeout: None,
            },
            &format!(
                "create event on persistentvolumeclaim {}/{}",
                claim.namespace, claim.name
            ),
        )
        .map(|_| ())
    }
}

fn claim_path(namespace: &str, name: &str) -> String {
    format!(
        "/api/v1/namespaces/{}/persistentvolumeclaims/{}",
        percent_encode(namespace),
        percent_encode(name)
    )
}

fn bad_claim(namespace: &str, name: &str, e: serde_json::Error) -> crate::Error {
    crate::Error::Internal(format!(
        "Kubernetes: bad PersistentVolumeClaim {namespace}/{name}: {e}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_in_every_form_kubernetes_writes() {
        for (raw, bytes) in [
            ("1Gi", Some(1 << 30)),
            ("1073741824", Some(1 << 30)),
            ("500M", Some(500_000_000)),
            ("1.5Gi", Some(3 << 29)),
            ("1e3", Some(1000)),
            ("2Ti", Some(2 << 40)),
            ("0", Some(0)),
            ("", None),
            ("Gi", None),
            ("-1Gi", None),
            ("1 Gi", None),
            ("lots", None),
        ] {
            assert_eq!(quantity_bytes(raw), bytes, "{raw:?}");
        }
    }

    #[test]
    fn a_claim_parses_with_and_without_status() {
        let claim: ClaimObject = serde_json::from_str(
            r#"{"metadata": {"name": "data", "namespace": "a", "uid": "u1", "resourceVersion": "9",
                 "annotations": {"linodenfs.csi.linode.com/autogrow": "off"}},
                "spec": {"volumeName": "pvc-1", "storageClassName": "shared",
                         "resources": {"requests": {"storage": "1Gi"}}},
                "status": {"capacity": {"storage": "1Gi"},
                           "allocatedResourceStatuses": {"storage": "ControllerResizeInfeasible"}}}"#,
        )
        .unwrap();
        let claim = PersistentVolumeClaim::from(claim);
        assert_eq!(
            (
                claim.requested,
                claim.capacity,
                claim.volume_name.as_deref()
            ),
            (Some(1 << 30), Some(1 << 30), Some("pvc-1"))
        );
        assert_eq!(
            claim.resize_status.as_deref(),
            Some("ControllerResizeInfeasible")
        );
        let pending: ClaimObject =
            serde_json::from_str(r#"{"metadata": {"name": "p"}, "spec": {"volumeName": ""}}"#)
                .unwrap();
        let pending = PersistentVolumeClaim::from(pending);
        assert_eq!((pending.volume_name, pending.capacity), (None, None));
    }
}
