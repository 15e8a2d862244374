//! The cluster's region, discovered lazily from one workload node and cached
//! for the process lifetime. The controller may start before any worker
//! node exists, so nothing here runs at startup, and a failed discovery
//! leaves the cache empty for the next request to retry. No lock is held
//! across the Kubernetes request, so no caller queues behind another's
//! slow (or down) API server.

use crate::kube::KubeClient;
use crate::mutex::lock;
use crate::Error;
use std::sync::Mutex;

const REGION_LABEL: &str = "topology.kubernetes.io/region";
const BETA_REGION_LABEL: &str = "failure-domain.beta.kubernetes.io/region";
/// Control-plane nodes may sit outside the workload VPC/region.
const WORKLOAD_NODES: &str =
    "!node-role.kubernetes.io/control-plane,!node-role.kubernetes.io/master";

pub struct Cluster {
    kube: KubeClient,
    region: Mutex<Option<String>>,
}

impl Cluster {
    pub fn new(kube: KubeClient) -> Cluster {
        Cluster {
            kube,
            region: Mutex::new(None),
        }
    }

    /// The region new filesystems go to. The cache is never locked across
    /// the lookup: concurrent first requests each list nodes (with their
    /// own timeout) rather than queue behind one slow list.
    pub fn region(&self) -> Result<String, Error> {
        if let Some(region) = lock(&self.region).clone() {
            return Ok(region);
        }
        let region = self.discover()?;
        *lock(&self.region) = Some(region.clone());
        Ok(region)
    }

    fn discover(&self) -> Result<String, Error> {
        // A Kubernetes API that is down or overloaded is worth retrying; a
        // refusal (RBAC, a bad kubeconfig) needs the admin.
        let nodes = self
            .kube
            .list_nodes(WORKLOAD_NODES, 1)
            .map_err(|e| match e {
                Error::Unavailable(_) | Error::DeadlineExceeded(_) => {
                    e.context("resolve cluster region: list nodes")
                }
                other => Error::FailedPrecondition(format!(
                    "resolve cluster region: list nodes: {}",
                    other.message()
                )),
            })?;
        let node = nodes.first().ok_or_else(|| {
            Error::FailedPrecondition(
                "resolve cluster region: cluster has no workload nodes".into(),
            )
        })?;
        let region = [REGION_LABEL, BETA_REGION_LABEL]
            .iter()
            .find_map(|l| node.labels.get(*l).filter(|v| !v.is_empty()))
            .ok_or_else(|| {
                Error::FailedPrecondition(format!(
                    "resolve cluster region: node {:?} has no {REGION_LABEL} label",
                    node.name
                ))
            })?;
        log::info!("cluster region {region:?} (from node {:?})", node.name);
        Ok(region.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{HttpRequest, HttpResponse, HttpServer};
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_slow_node_list_does_not_hold_back_other_callers() {
        // The first list hangs until released; later ones answer at once.
        let (release, hold) = mpsc::channel::<()>();
        let (arrived_tx, arrived) = mpsc::channel::<()>();
        let hold = Mutex::new(Some((hold, arrived_tx)));
        let handler = move |_: HttpRequest| {
            let first = lock(&hold).take();
            if let Some((hold, arrived)) = first {
                let _ = arrived.send(());
                let _ = hold.recv_timeout(Duration::from_secs(30));
            }
            HttpResponse::json(
                200,
                &serde_json::json!({"items": [{"metadata": {"name": "w",
                    "labels": {"topology.kubernetes.io/region": "us-ord"}}}], "metadata": {}}),
            )
        };
        let server = HttpServer::start("slow-kube", Arc::new(handler)).unwrap();
        let dir = std::env::temp_dir().join(format!("lnc-cluster-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!("apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: t\n  cluster:\n    server: {}\ncontexts:\n- name: t\n  context:\n    cluster: t\n    user: t\nusers:\n- name: t\n  user:\n    token: x\n", server.url()),
        )
        .unwrap();
        let cluster = Arc::new(Cluster::new(
            KubeClient::from_kubeconfig(&kubeconfig).unwrap(),
        ));
        let slow = {
            let cluster = cluster.clone();
            std::thread::spawn(move || cluster.region())
        };
        arrived
            .recv_timeout(Duration::from_secs(10))
            .expect("the first caller is inside its list");
        let (done_tx, done_rx) = mpsc::channel();
        let quick = cluster.clone();
        std::thread::spawn(move || done_tx.send(quick.region()).unwrap());
        let answer = done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a second caller does not wait for the first one's list");
        assert_eq!(answer.unwrap(), "us-ord");
        release.send(()).unwrap();
        assert_eq!(slow.join().unwrap().unwrap(), "us-ord");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
