//! The `coordination.k8s.io/v1` Lease requests of the controller's
//! election: read one, create one, replace one guarded by its
//! `resourceVersion` (a 409 means another process wrote it first). Each
//! is bounded by the timeout its caller gives, below its renew deadline.
//! What the election decides is `crate::lease`'s; this file only speaks
//! the API.

use super::client::{percent_encode, KubeClient, Sent};
use crate::cluster_id::ANNOTATION;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A Lease as the election reads and writes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Lease {
    /// Empty: nobody holds it (released).
    pub holder: String,
    pub duration_secs: u64,
    /// `acquireTime` and `renewTime`, as written (MicroTime).
    pub acquired: Option<String>,
    pub renewed: Option<String>,
    pub transitions: u64,
    /// What a replace must name; empty for one not created yet.
    pub resource_version: String,
    /// The cluster identity the lease records (`cluster_id::ANNOTATION`).
    pub cluster: Option<String>,
}

#[derive(Deserialize, Serialize, Default)]
struct LeaseObject {
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    spec: Spec,
}

#[derive(Deserialize, Serialize, Default)]
struct Metadata {
    #[serde(rename = "resourceVersion", default)]
    resource_version: String,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize, Serialize, Default)]
struct Spec {
    #[serde(rename = "holderIdentity", default)]
    holder: Option<String>,
    #[serde(rename = "leaseDurationSeconds", default)]
    duration: Option<u64>,
    #[serde(rename = "acquireTime", default)]
    acquired: Option<String>,
    #[serde(rename = "renewTime", default)]
    renewed: Option<String>,
    #[serde(rename = "leaseTransitions", default)]
    transitions: Option<u64>,
}

/// `now` as a Kubernetes MicroTime (`2026-12-05T16:19:42.123456Z`).
pub fn micro_time(now: SystemTime) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = i64::try_from(since.as_secs()).unwrap_or(0);
    format!(
        "{}.{:06}Z",
        crate::linode::unix_to_naive(secs),
        since.subsec_micros()
    )
}

fn path(namespace: &str, name: Option<&str>) -> String {
    let base = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
        percent_encode(namespace)
    );
    match name {
        Some(name) => format!("{base}/{}", percent_encode(name)),
        None => base,
    }
}

fn body(namespace: &str, name: &str, lease: &Lease) -> String {
    let mut metadata = json!({"name": name, "namespace": namespace});
    if !lease.resource_version.is_empty() {
        metadata["resourceVersion"] = json!(lease.resource_version);
    }
    if let Some(cluster) = &lease.cluster {
        metadata["annotations"] = json!({ ANNOTATION: cluster });
    }
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": lease.holder,
            "leaseDurationSeconds": lease.duration_secs,
            "acquireTime": lease.acquired,
            "renewTime": lease.renewed,
            "leaseTransitions": lease.transitions,
        },
    })
    .to_string()
}

fn parse(text: &str, what: &str) -> crate::Result<Lease> {
    let object: LeaseObject = serde_json::from_str(text)
        .map_err(|e| crate::Error::Internal(format!("Kubernetes: {what}: bad Lease: {e}")))?;
    Ok(Lease {
        holder: object.spec.holder.unwrap_or_default(),
        duration_secs: object.spec.duration.unwrap_or(0),
        acquired: object.spec.acquired,
        renewed: object.spec.renewed,
        transitions: object.spec.transitions.unwrap_or(0),
        cluster: object.metadata.annotations.get(ANNOTATION).cloned(),
        resource_version: object.metadata.resource_version,
    })
}

impl KubeClient {
    /// Lease `namespace/name`; `None` when there is none yet.
    pub fn get_lease(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> crate::Result<Option<Lease>> {
        let what = format!("get lease {namespace}/{name}");
        let sent = Sent {
            request: "get_lease",
            method: "GET",
            path: &path(namespace, Some(name)),
            body: None,
            content_type: None,
            timeout: Some(timeout),
        };
        match self.send(sent, &what) {
            Ok(text) => parse(&text, &what).map(Some),
            Err(crate::Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates lease `namespace/name` as `lease` says; FailedPrecondition
    /// (409) when another process created it first.
    pub fn create_lease(
        &self,
        namespace: &str,
        name: &str,
        lease: &Lease,
        timeout: Duration,
    ) -> crate::Result<Lease> {
        self.write_lease("create_lease", "POST", namespace, name, lease, timeout)
    }

    /// Replaces lease `namespace/name` with `lease`, whose
    /// `resource_version` is the one it was read at; FailedPrecondition
    /// (409) when it changed since.
    pub fn update_lease(
        &self,
        namespace: &str,
        name: &str,
        lease: &Lease,
        timeout: Duration,
    ) -> crate::Result<Lease> {
        self.write_lease("update_lease", "PUT", namespace, name, lease, timeout)
    }

    fn write_lease(
        &self,
        request: &'static str,
        method: &'static str,
        namespace: &str,
        name: &str,
        lease: &Lease,
        timeout: Duration,
    ) -> crate::Result<Lease> {
        let (verb, at) = match method {
            "POST" => ("create", path(namespace, None)),
            _ => ("update", path(namespace, Some(name))),
        };
        let what = format!("{verb} lease {namespace}/{name}");
        let text = self.send(
            Sent {
                request,
                method,
                path: &at,
                body: Some(&body(namespace, name, lease)),
                content_type: None,
                timeout: Some(timeout),
            },
            &what,
        )?;
        parse(&text, &what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_time_is_rfc3339_with_microseconds_in_utc() {
        let t = UNIX_EPOCH + Duration::from_micros(1_764_951_582_123_456);
        assert_eq!(micro_time(t), "2025-12-05T16:19:42.123456Z");
    }

    #[test]
    fn a_lease_round_trips_through_its_json() {
        let lease = Lease {
            holder: "a".into(),
            duration_secs: 30,
            acquired: Some("x".into()),
            renewed: Some("y".into()),
            transitions: 2,
            resource_version: "7".into(),
            cluster: Some("prod".into()),
        };
        assert_eq!(parse(&body("ns", "l", &lease), "t").unwrap(), lease);
    }
}
