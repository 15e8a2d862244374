//! Shared setup of the controller integration tests: the fake Linode and
//! Kubernetes servers run in the test process, the real binary runs in the
//! controller role against them over loopback HTTP, and small builders make
//! the CSI requests.

use super::requests::{
    controller_publish_req, controller_unpublish_req, delete_req, delete_snapshot_req,
    get_volume_req, list_snapshots_req, rwx, snapshot_req,
};
use super::{write_kubeconfig, Driver};
use linode_nfs_csi::fake::{
    FakeKube, FakeLinode, FakeNode, HttpRequest, HttpResponse, HttpServer, InstanceSeed,
    RequestRecord, Seed, SpaceSeed,
};
use linode_nfs_csi::linode::{Filesystem, LinodeCloud, LinodeSettings, Status};
use linode_nfs_csi::proto::{csi, csi_grpc};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub const SPACE: u64 = 7;
pub const SPACE_LABEL: &str = "shared";
pub const REGION: &str = "us-ord";
pub const KUBE_TOKEN: &str = "kube-secret-token";

pub const P_SPACE_ID: &str = "linodenfs.csi.linode.com/space-id";
pub const P_SPACE_LABEL: &str = "linodenfs.csi.linode.com/space-label";
pub const P_TAGS: &str = "linodenfs.csi.linode.com/tags";
pub const P_SQUASH: &str = "linodenfs.csi.linode.com/filesystem-root-squash";

pub const FS_LIST: &str = "nfs/spaces/*/filesystems";
pub const FS_ONE: &str = "nfs/spaces/*/filesystems/*";
pub const FS_POLICY: &str = "nfs/spaces/*/filesystems/*/access-policy";

/// The ids ListVolumes of `client` answers in one unbounded call, in its
/// order.
pub fn listed_volume_ids(client: &csi_grpc::ControllerClient) -> Vec<String> {
    client
        .list_volumes(&csi::ListVolumesRequest::new())
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.volume.unwrap().volume_id)
        .collect()
}

/// The ids ListSnapshots of `client` answers in one unbounded call.
pub fn listed_snapshot_ids(client: &csi_grpc::ControllerClient) -> Vec<String> {
    client
        .list_snapshots(&csi::ListSnapshotsRequest::new())
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.snapshot.unwrap().snapshot_id)
        .collect()
}

/// A workload node in `region` (the label Kubernetes sets today).
pub fn worker(name: &str, region: &str) -> FakeNode {
    FakeNode::new(name).label("topology.kubernetes.io/region", region)
}

/// Node Linodes `ids` (`node-<id>` in the default region) added to `seed`,
/// for node-mode publishes.
pub fn with_nodes(seed: Seed, ids: impl IntoIterator<Item = u64>) -> Seed {
    ids.into_iter().fold(seed, |s, id| {
        s.with_instance(InstanceSeed {
            id,
            label: format!("node-{id}"),
            region: REGION.into(),
            interface_generation: None,
            ipv6: Some(format!("2001:db8:1::{id:x}/128")),
            vpcs: vec![],
        })
    })
}

/// How to start one test's world.
pub struct Setup {
    seed: Seed,
    nodes: Vec<FakeNode>,
    envs: Vec<(String, String)>,
    spy: bool,
    prefix: Vec<String>,
    token_file: Option<PathBuf>,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup::new()
    }
}

impl Setup {
    /// Space 7 "shared" and one worker node in us-ord.
    pub fn new() -> Setup {
        Setup {
            seed: Seed::default().with_space(SpaceSeed::new(SPACE, SPACE_LABEL)),
            nodes: vec![worker("worker-1", REGION)],
            envs: Vec::new(),
            spy: false,
            prefix: Vec::new(),
            token_file: None,
        }
    }

    /// Runs the driver as `prefix... binary`, e.g. in a mount namespace of
    /// its own for the shared parents it mounts.
    pub fn prefix(mut self, prefix: &[&str]) -> Setup {
        self.prefix = prefix.iter().map(|s| s.to_string()).collect();
        self
    }

    pub fn seed(mut self, f: impl FnOnce(Seed) -> Seed) -> Setup {
        self.seed = f(self.seed);
        self
    }

    /// Replaces the default node list.
    pub fn nodes(mut self, nodes: Vec<FakeNode>) -> Setup {
        self.nodes = nodes;
        self
    }

    pub fn env(mut self, k: &str, v: &str) -> Setup {
        self.envs.push((k.to_string(), v.to_string()));
        self
    }

    pub fn node_mode(self) -> Setup {
        self.env("NFS_ACCESS_POLICY_MODE", "node")
    }

    pub fn wait_timeout(self, t: &str) -> Setup {
        self.env("LINODE_WAIT_TIMEOUT", t)
    }

    /// Puts a recording proxy between the driver and the fake API server,
    /// because the fake only counts requests and the query matters here.
    pub fn spy_kube(mut self) -> Setup {
        self.spy = true;
        self
    }

    /// The token goes to the driver in `file` (`LINODE_TOKEN_FILE`), not
    /// in the environment.
    pub fn token_file(mut self, file: &Path) -> Setup {
        self.token_file = Some(file.to_path_buf());
        self
    }

    pub fn start(self) -> Env {
        let linode = FakeLinode::start(self.seed).expect("start fake Linode");
        let kube = FakeKube::start(KUBE_TOKEN).expect("start fake Kubernetes");
        for n in self.nodes {
            kube.add_node(n);
        }
        let spy = self.spy.then(|| KubeSpy::start(&kube.url()));
        let kube_url = spy.as_ref().map_or_else(|| kube.url(), |s| s.url.clone());
        let mut envs = vec![
            ("DRIVER_ROLE".to_string(), "controller".to_string()),
            ("LINODE_URL".to_string(), linode.url()),
            match &self.token_file {
                None => ("LINODE_TOKEN".to_string(), linode.token()),
                Some(file) => {
                    std::fs::write(file, linode.token()).unwrap();
                    ("LINODE_TOKEN_FILE".to_string(), file.display().to_string())
                }
            },
            ("NFS_ACCESS_POLICY_MODE".to_string(), "space".to_string()),
            // No background requests in tests that count them (a test that
            // wants the upkeep sets its own interval).
            ("MAINTENANCE_INTERVAL".to_string(), "0s".to_string()),
            // One identity across restarts: the next process holds the
            // lease at once (a second process of a test names its own).
            (
                "LEASE_HOLDER_IDENTITY".to_string(),
                "test-controller".to_string(),
            ),
        ];
        envs.extend(self.envs);
        let driver = launch(&envs, &kube_url, &self.prefix);
        let client = driver.controller();
        Env {
            client,
            driver,
            envs,
            prefix: self.prefix,
            kube_url,
            spy,
            kube,
            linode,
        }
    }
}

fn launch(envs: &[(String, String)], kube_url: &str, prefix: &[String]) -> Driver {
    let mut b = Driver::builder();
    if !prefix.is_empty() {
        b = b.prefix(&prefix.iter().map(String::as_str).collect::<Vec<_>>());
    }
    let kubeconfig = write_kubeconfig(b.dir(), kube_url, KUBE_TOKEN);
    b = b.env("KUBECONFIG", kubeconfig.display().to_string());
    for (k, v) in envs {
        b = b.env(k, v.as_str());
    }
    b.start()
}

/// One running controller and its fakes. Field order is drop order: the
/// driver goes first so no request is in flight when the fakes stop.
pub struct Env {
    pub client: csi_grpc::ControllerClient,
    pub driver: Driver,
    envs: Vec<(String, String)>,
    prefix: Vec<String>,
    kube_url: String,
    pub spy: Option<KubeSpy>,
    pub kube: FakeKube,
    pub linode: FakeLinode,
}

impl Env {
    /// A second controller process against the same fakes, named
    /// `identity` in the Lease, with `envs` on top of this one's.
    pub fn another(&self, identity: &str, envs: &[(&str, &str)]) -> Driver {
        let mut all = self.envs.clone();
        all.push(("LEASE_HOLDER_IDENTITY".into(), identity.into()));
        all.extend(envs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        launch(&all, &self.kube_url, &self.prefix)
    }

    /// Like `another`, without waiting for it to serve: for a process that
    /// must refuse to start.
    pub fn spawn_another(&self, identity: &str, envs: &[(&str, &str)]) -> Driver {
        let mut b = Driver::builder();
        let kubeconfig = write_kubeconfig(b.dir(), &self.kube_url, KUBE_TOKEN);
        b = b.env("KUBECONFIG", kubeconfig.display().to_string());
        for (k, v) in &self.envs {
            b = b.env(k, v.as_str());
        }
        b = b.env("LEASE_HOLDER_IDENTITY", identity);
        for (k, v) in envs {
            b = b.env(k, *v);
        }
        b.spawn()
    }

    /// A new controller process against the same fakes, as after a crash or
    /// a rollout; the old one must have exited.
    pub fn restart(&mut self) {
        assert!(
            self.driver.try_exit().is_some(),
            "the old driver still runs"
        );
        self.driver = launch(&self.envs, &self.kube_url, &self.prefix);
        self.client = self.driver.controller();
    }

    pub fn create(
        &self,
        req: &csi::CreateVolumeRequest,
    ) -> grpcio::Result<csi::CreateVolumeResponse> {
        self.client.create_volume(req)
    }

    /// The volume `req` creates; the test fails with the driver's log if
    /// the create does.
    pub fn create_with(&self, req: &csi::CreateVolumeRequest) -> csi::Volume {
        self.create(req)
            .unwrap_or_else(|e| panic!("CreateVolume {}: {e:?}\n{}", req.name, self.driver.logs()))
            .volume
            .unwrap()
    }

    /// Creates `name` in the default space and returns its volume.
    pub fn create_ok(&self, name: &str) -> csi::Volume {
        self.create_with(&volume_req(name, &by_id()))
    }

    pub fn delete(&self, volume_id: &str) -> grpcio::Result<csi::DeleteVolumeResponse> {
        self.client.delete_volume(&delete_req(volume_id))
    }

    pub fn get_volume(&self, volume_id: &str) -> grpcio::Result<csi::ControllerGetVolumeResponse> {
        self.client
            .controller_get_volume(&get_volume_req(volume_id))
    }

    pub fn publish(
        &self,
        volume_id: &str,
        node_id: &str,
    ) -> grpcio::Result<csi::ControllerPublishVolumeResponse> {
        self.client
            .controller_publish_volume(&controller_publish_req(volume_id, node_id))
    }

    pub fn unpublish(
        &self,
        volume_id: &str,
        node_id: &str,
    ) -> grpcio::Result<csi::ControllerUnpublishVolumeResponse> {
        self.client
            .controller_unpublish_volume(&controller_unpublish_req(volume_id, node_id))
    }

    /// The snapshot CreateSnapshot answers.
    pub fn snapshot(&self, name: &str, source_volume_id: &str) -> grpcio::Result<csi::Snapshot> {
        self.client
            .create_snapshot(&snapshot_req(name, source_volume_id))
            .map(|r| r.snapshot.unwrap())
    }

    /// DeleteSnapshot, which must answer OK.
    pub fn delete_snapshot_ok(&self, snapshot_id: &str) {
        self.client
            .delete_snapshot(&delete_snapshot_req(snapshot_id))
            .unwrap_or_else(|e| panic!("DeleteSnapshot {snapshot_id}: {e:?}"));
    }

    /// The snapshots one unbounded ListSnapshots answers, filtered by
    /// snapshot id and source volume (empty: any).
    pub fn listed_snapshots(&self, snapshot_id: &str, source: &str) -> Vec<csi::Snapshot> {
        self.client
            .list_snapshots(&list_snapshots_req(snapshot_id, source))
            .unwrap()
            .entries
            .into_iter()
            .map(|e| e.snapshot.unwrap())
            .collect()
    }

    /// The ids ListVolumes answers in one unbounded call, in its order.
    pub fn listed_volume_ids(&self) -> Vec<String> {
        listed_volume_ids(&self.client)
    }

    /// The squash policy the backend holds for filesystem `fs`.
    pub fn squash(&self, fs: u64) -> String {
        self.linode
            .filesystem_policy(fs)
            .unwrap()
            .squash_policy
            .unwrap()
            .as_str()
            .to_string()
    }

    /// The real client on the fake Linode API with its own connection, as a
    /// person or another tool acting behind the driver's back.
    pub fn someone_else(&self) -> LinodeCloud {
        let mut settings = LinodeSettings::new(self.linode.token());
        settings.base_url = self.linode.url();
        LinodeCloud::new(settings).unwrap()
    }

    /// Filesystems the backend holds that are not on their way out.
    pub fn live_filesystems(&self) -> Vec<Filesystem> {
        self.linode
            .filesystems()
            .into_iter()
            .filter(|f| f.status != Status::Deleting)
            .collect()
    }

    pub fn filesystem(&self, label: &str) -> Filesystem {
        let mut found: Vec<Filesystem> = self
            .live_filesystems()
            .into_iter()
            .filter(|f| f.label == label)
            .collect();
        assert_eq!(found.len(), 1, "filesystems labelled {label}: {found:?}");
        found.remove(0)
    }

    /// The last Linode request of `method`.
    pub fn last_request(&self, method: &str) -> RequestRecord {
        self.linode
            .requests()
            .into_iter()
            .rfind(|r| r.method == method)
            .unwrap_or_else(|| panic!("no {method} request"))
    }

    /// Linode requests seen since `before` (a `requests().len()` snapshot).
    pub fn requests_since(&self, before: usize) -> Vec<String> {
        self.linode.requests()[before..]
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    }
}

/// The StorageClass parameters naming the default space by id.
pub fn by_id() -> Vec<(&'static str, String)> {
    vec![(P_SPACE_ID, SPACE.to_string())]
}

pub fn params<'a>(pairs: impl IntoIterator<Item = (&'a str, String)>) -> HashMap<String, String> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

pub fn volume_req(name: &str, p: &[(&str, String)]) -> csi::CreateVolumeRequest {
    let mut req = csi::CreateVolumeRequest::new();
    req.name = name.to_string();
    req.volume_capabilities = vec![rwx()];
    req.parameters = params(p.iter().map(|(k, v)| (*k, v.clone())));
    req
}

pub fn with_capacity(
    mut req: csi::CreateVolumeRequest,
    required: i64,
    limit: i64,
) -> csi::CreateVolumeRequest {
    let mut range = csi::CapacityRange::new();
    range.required_bytes = required;
    range.limit_bytes = limit;
    req.capacity_range = Some(range).into();
    req
}

/// A key of a volume's context.
pub fn ctx<'a>(v: &'a csi::Volume, key: &str) -> Option<&'a str> {
    v.volume_context.get(key).map(String::as_str)
}

/// The published nodes of each listed volume, sorted.
pub fn published_by_volume(
    entries: &[csi::list_volumes_response::Entry],
) -> BTreeMap<String, Vec<String>> {
    entries
        .iter()
        .map(|e| {
            let mut nodes = e.status.published_node_ids.clone();
            nodes.sort();
            (e.volume.volume_id.clone(), nodes)
        })
        .collect()
}

/// `(space, filesystem)` of a volume id.
pub fn ids_of(volume_id: &str) -> (u64, u64) {
    let (s, f) = volume_id.split_once('/').expect("volume id");
    (s.parse().unwrap(), f.parse().unwrap())
}

/// A forwarding proxy in front of the fake Kubernetes API that records every
/// request line (path and query).
pub struct KubeSpy {
    pub url: String,
    _server: HttpServer,
    seen: Arc<Mutex<Vec<String>>>,
}

impl KubeSpy {
    fn start(upstream: &str) -> KubeSpy {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (log, upstream) = (seen.clone(), upstream.to_string());
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let forward = move |req: HttpRequest| {
            // The election's requests, and the read of the cluster's
            // identity at start, pass unseen: they are not what a test of
            // the driver's reads counts.
            let lease = req.path.starts_with("/apis/coordination.k8s.io/")
                || req.path.starts_with("/api/v1/namespaces/kube-system");
            if !lease {
                log.lock().unwrap().push(req.target());
            }
            let mut fwd = ureq::http::Request::builder()
                .method(req.method.as_str())
                .uri(format!("{upstream}{}", req.target()));
            if let Some(auth) = req.header("Authorization") {
                fwd = fwd.header("Authorization", auth);
            }
            let sent = match req.method.as_str() {
                "GET" => agent.run(fwd.body(()).unwrap()),
                _ => agent.run(fwd.body(req.body.clone()).unwrap()),
            };
            let (status, body) = match sent {
                Ok(mut resp) => (
                    resp.status().as_u16(),
                    resp.body_mut().read_to_string().unwrap_or_default(),
                ),
                Err(_) => (502, String::new()),
            };
            HttpResponse::raw(status, "application/json", body.into_bytes())
        };
        let server =
            linode_nfs_csi::fake::serve("kube-spy", Arc::new(forward)).expect("spy listen");
        KubeSpy {
            url: server.url(),
            _server: server,
            seen,
        }
    }

    /// Request lines (`/api/v1/nodes?...`) seen so far.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}
