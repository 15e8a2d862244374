//! Renders every kustomization under `kustomize/` with `kubectl kustomize` and
//! checks the wiring facts that a schema validator cannot see: socket paths
//! agree between the plugin and its sidecars, the registrar's two paths are
//! not swapped, mounts propagate, the probe really reaches the livenessprobe
//! sidecar, the token reaches the controller only, and the node cannot read
//! Secrets; every sidecar image is a release listed with its provenance in
//! `kustomize/sidecar-images.md`, the controller RBAC covers what the upstream
//! sidecars' own RBAC grants (group snapshots included: csi-snapshotter
//! runs with them on), and the leader-electing sidecars serve
//! `/healthz/leader-election` to their liveness probes; the plugin's metrics
//! port is declared, bound where it can be scraped only when asked, and
//! what the example ServiceMonitor selects. The sidecars deployed follow
//! what the real controller advertises (ControllerGetCapabilities of the
//! binary, against the fakes), and the ports and the attacher's re-sync
//! interval agree with the docs. The subdirectory component is the one
//! place the controller is privileged, and only its plugin container, for
//! mounts that stay in its own namespace; the plugin can read what
//! node-mode unpublish decides from. Schema validation is
//! `kustomize/check.sh`.
//!
//! kubectl is required: without it these tests fail rather than skip, so a CI
//! machine that lost it cannot pass silently.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::Value;

mod common;

use common::controller::Setup;
use csi::controller_service_capability::rpc::Type as Rpc;
use linode_nfs_csi::proto::csi;

const DRIVER: &str = "linodenfs.csi.linode.com";
const CONTROLLER: &str = "csi-linode-nfs-controller";
const NODE: &str = "csi-linode-nfs-node";
const PLUGIN: &str = "linode-nfs-csi";
const NAMESPACE: &str = "kube-system";
const SIDECAR_REGISTRY: &str = "registry.k8s.io/sig-storage/";
const KUBELET_DIR: &str = "/var/lib/kubelet";
/// The component (and overlay) for nodes that run the plugin from the node
/// image: no node DaemonSet, so it is checked apart from [`variants`].
const NODE_IMAGE: &str = "node-image";
/// The controller sidecars that leader-elect, by image repository.
const LEADER_ELECTING: &[&str] = &[
    "csi-provisioner",
    "csi-resizer",
    "csi-attacher",
    "csi-snapshotter",
];

fn leader_elects(c: &Value) -> bool {
    LEADER_ELECTING.iter().any(|repo| is_sidecar(c, repo))
}

/// Every variable the binary reads, from its own `--help` table: anything
/// else in a plugin container's env is a typo the driver would ignore.
fn known_env() -> &'static BTreeSet<String> {
    static KNOWN: OnceLock<BTreeSet<String>> = OnceLock::new();
    KNOWN.get_or_init(|| {
        let output = Command::new(env!("CARGO_BIN_EXE_linode-nfs-csi"))
            .arg("--help")
            .output()
            .expect("run linode-nfs-csi --help");
        assert!(output.status.success(), "linode-nfs-csi --help failed");
        let vars: BTreeSet<String> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .filter(|word| {
                word.len() > 3
                    && word
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            })
            .map(str::to_string)
            .collect();
        assert!(
            vars.contains("DRIVER_ROLE") && vars.contains("CSI_ENDPOINT"),
            "unexpected --help output: {vars:?}"
        );
        vars
    })
}

const CONTROLLER_ONLY_ENV: &[&str] = &[
    "LINODE_TOKEN",
    "LINODE_TOKEN_FILE",
    "DEFAULT_CAPACITY",
    "LINODE_URL",
    "LINODE_API_VERSION",
    "LINODE_CA",
    "LINODE_REQUEST_TIMEOUT",
    "LINODE_WAIT_TIMEOUT",
    "NFS_ACCESS_POLICY_MODE",
    "VOLUME_EXPANSION",
    "SHARE_MOUNT_DIR",
];

/// Where the subdirectory component mounts the shared parents.
const SHARE_MOUNT_DIR: &str = "/var/lib/linode-nfs-csi/shares";

/// The controller plugin mounts shared parents (the subdirectory
/// component): it says where.
fn mounts_shares(controller: &Value) -> bool {
    env(container(controller, PLUGIN).unwrap(), "SHARE_MOUNT_DIR").is_some()
}

fn kustomize_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("kustomize")
}

fn kubectl() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".to_string())
}

/// `kubectl kustomize DIR`, parsed into one JSON value per object.
fn render(dir: &Path) -> Vec<Value> {
    let output = match Command::new(kubectl()).arg("kustomize").arg(dir).output() {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "kubectl not found on PATH (or $KUBECTL): tests/kustomize.rs renders the \
             manifests with `kubectl kustomize`; install kubectl (.ci/run does) and rerun"
        ),
        Err(e) => panic!("running kubectl kustomize {}: {e}", dir.display()),
    };
    assert!(
        output.status.success(),
        "kubectl kustomize {} failed:\n{}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("rendered YAML is UTF-8");
    let objects: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).expect("rendered YAML parses"))
        .filter(|v| !v.is_null())
        .collect();
    assert!(!objects.is_empty(), "{} rendered nothing", dir.display());
    objects
}

/// A kustomization outside the tree combining base with `components`; paths
/// must be relative, kustomize refuses absolute ones. Each call gets its own
/// directory: tests run in parallel and may render the same combination.
fn render_with_components(components: &[&str]) -> Vec<Value> {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "linode-nfs-csi-kustomize-{}-{}-{}",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed),
        components.join("+")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let root = relative_path(
        &dir.canonicalize().unwrap(),
        &kustomize_dir().canonicalize().unwrap(),
    );
    let list: Vec<String> = components
        .iter()
        .map(|c| format!("{root}/components/{c}"))
        .collect();
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "resources: [{root}/base]\ncomponents: [{}]\n",
            list.join(", ")
        ),
    )
    .unwrap();
    let objects = render(&dir);
    std::fs::remove_dir_all(&dir).ok();
    objects
}

fn relative_path(from: &Path, to: &Path) -> String {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".to_string(); from.len() - common];
    parts.extend(
        to[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

/// Every install variant that runs the node DaemonSet: the base, each
/// overlay directory but node-image, and the two components combined.
/// Rendered once per test binary.
fn variants() -> &'static [(String, Vec<Value>)] {
    static VARIANTS: OnceLock<Vec<(String, Vec<Value>)>> = OnceLock::new();
    VARIANTS.get_or_init(render_variants)
}

fn render_variants() -> Vec<(String, Vec<Value>)> {
    let mut out = vec![("base".to_string(), render(&kustomize_dir().join("base")))];
    for name in overlay_names().into_iter().filter(|n| n != NODE_IMAGE) {
        let objects = render(&kustomize_dir().join("overlays").join(&name));
        out.push((format!("overlays/{name}"), objects));
    }
    out.push((
        "node-access+snapshots".to_string(),
        render_with_components(&["node-access", "snapshots"]),
    ));
    out.push((
        "node-access+subdirectory".to_string(),
        render_with_components(&["node-access", "subdirectory"]),
    ));
    out
}

fn overlay_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(kustomize_dir().join("overlays"))
        .expect("kustomize/overlays exists")
        .map(|e| e.unwrap())
        .filter(|e| e.path().join("kustomization.yaml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

fn get<'a>(objects: &'a [Value], kind: &str, name: &str, variant: &str) -> &'a Value {
    find(objects, kind, name).unwrap_or_else(|| panic!("{variant}: no {kind} {name}"))
}

fn pod_spec(workload: &Value) -> &Value {
    &workload["spec"]["template"]["spec"]
}

fn containers(workload: &Value) -> &Vec<Value> {
    pod_spec(workload)["containers"]
        .as_array()
        .expect("containers is a list")
}

fn container<'a>(workload: &'a Value, name: &str) -> Option<&'a Value> {
    containers(workload).iter().find(|c| c["name"] == name)
}

fn args(c: &Value) -> Vec<String> {
    c["args"]
        .as_array()
        .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// Value of `--flag=value` in a container's args.
fn flag(c: &Value, name: &str) -> Option<String> {
    let prefix = format!("--{name}=");
    args(c)
        .iter()
        .find_map(|a| a.strip_prefix(&prefix).map(str::to_string))
}

fn env<'a>(c: &'a Value, name: &str) -> Option<&'a Value> {
    c["env"]
        .as_array()
        .and_then(|e| e.iter().find(|v| v["name"] == name))
}

fn env_value(c: &Value, name: &str) -> Option<String> {
    env(c, name)
        .and_then(|v| v["value"].as_str())
        .map(str::to_string)
}

fn image_repo(c: &Value) -> &str {
    c["image"].as_str().unwrap().split(':').next().unwrap()
}

fn is_sidecar(c: &Value, repo: &str) -> bool {
    image_repo(c) == format!("{SIDECAR_REGISTRY}{repo}")
}

fn socket_path(plugin: &Value) -> String {
    let endpoint = env_value(plugin, "CSI_ENDPOINT").expect("plugin sets CSI_ENDPOINT");
    endpoint
        .strip_prefix("unix://")
        .unwrap_or_else(|| panic!("CSI_ENDPOINT {endpoint} is not a unix socket"))
        .to_string()
}

/// The volume a container mounts at the deepest mountPath containing `path`,
/// and that path relative to the mount.
fn volume_for(c: &Value, path: &str) -> Option<(String, String)> {
    c["volumeMounts"]
        .as_array()?
        .iter()
        .filter_map(|m| {
            let mount = m["mountPath"].as_str()?.trim_end_matches('/');
            let rest = path.strip_prefix(mount)?;
            (rest.is_empty() || rest.starts_with('/')).then(|| {
                (
                    mount.len(),
                    m["name"].as_str().unwrap().to_string(),
                    rest.to_string(),
                )
            })
        })
        .max_by_key(|(len, _, _)| *len)
        .map(|(_, name, rest)| (name, rest))
}

fn pod_volume<'a>(workload: &'a Value, name: &str) -> &'a Value {
    pod_spec(workload)["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == name))
        .unwrap_or_else(|| panic!("no pod volume {name}"))
}

fn port_number(c: &Value, port: &Value) -> u64 {
    if let Some(n) = port.as_u64() {
        return n;
    }
    let name = port.as_str().expect("probe port is a number or a name");
    c["ports"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == name))
        .and_then(|p| p["containerPort"].as_u64())
        .unwrap_or_else(|| {
            panic!(
                "container {} probes named port {name} it does not declare",
                c["name"]
            )
        })
}

fn attach_required(objects: &[Value], variant: &str) -> bool {
    get(objects, "CSIDriver", DRIVER, variant)["spec"]["attachRequired"]
        .as_bool()
        .unwrap_or_else(|| panic!("{variant}: attachRequired must be set explicitly"))
}

/// Rules of every role bound to `sa`, with the binding's kind.
fn rules_for(objects: &[Value], sa: &str) -> Vec<Value> {
    let mut rules = Vec::new();
    for binding in objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRoleBinding" || o["kind"] == "RoleBinding")
    {
        let bound = binding["subjects"].as_array().is_some_and(|s| {
            s.iter().any(|s| {
                s["kind"] == "ServiceAccount" && s["name"] == sa && s["namespace"] == NAMESPACE
            })
        });
        if !bound {
            continue;
        }
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap();
        let role_name = binding["roleRef"]["name"].as_str().unwrap();
        let role = find(objects, role_kind, role_name).unwrap_or_else(|| {
            panic!(
                "binding {} refers to missing {role_kind} {role_name}",
                binding["metadata"]["name"]
            )
        });
        rules.extend(role["rules"].as_array().unwrap().iter().cloned());
    }
    rules
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap()).collect())
        .unwrap_or_default()
}

/// (apiGroup/resource → verbs) granted by `rules`.
fn grants(rules: &[Value]) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for rule in rules {
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                out.entry(format!("{group}/{resource}"))
                    .or_default()
                    .extend(strings(&rule["verbs"]).into_iter().map(str::to_string));
            }
        }
    }
    out
}

#[test]
fn every_expected_overlay_exists() {
    let names = overlay_names();
    for expected in ["dev", "metrics", "node-access", "snapshots", "subdirectory"] {
        assert!(
            names.iter().any(|n| n == expected),
            "overlays/{expected} missing: {names:?}"
        );
    }
}

#[test]
fn csidriver_matches_the_access_policy_mode() {
    for (variant, objects) in variants() {
        let (variant, objects) = (variant.as_str(), objects.as_slice());
        let driver = get(objects, "CSIDriver", DRIVER, variant);
        let spec = &driver["spec"];
        assert_eq!(spec["podInfoOnMount"], false, "{variant}");
        assert_eq!(spec["fsGroupPolicy"], "File", "{variant}");
        assert_eq!(
            spec["volumeLifecycleModes"],
            serde_json::json!(["Persistent"]),
            "{variant}"
        );

        let controller = get(objects, "Deployment", CONTROLLER, variant);
        let plugin = container(controller, PLUGIN).unwrap();
        let mode = env_value(plugin, "NFS_ACCESS_POLICY_MODE").unwrap_or_else(|| "space".into());
        let attacher = containers(controller)
            .iter()
            .any(|c| is_sidecar(c, "csi-attacher"));
        let attach = attach_required(objects, variant);
        // Node mode publishes per node: the CSIDriver must ask for attachment
        // and something must perform it; space mode needs neither.
        assert_eq!(
            attach,
            mode == "node",
            "{variant}: attachRequired vs mode {mode}"
        );
        assert_eq!(
            attacher, attach,
            "{variant}: csi-attacher present iff attachRequired"
        );
    }
    let expected = [
        ("base", false),
        ("overlays/dev", false),
        ("overlays/node-access", true),
        ("overlays/snapshots", false),
        ("node-access+snapshots", true),
    ];
    let variants = variants();
    for (variant, attach) in expected {
        let objects = &variants.iter().find(|(v, _)| v == variant).unwrap().1;
        assert_eq!(attach_required(objects, variant), attach, "{variant}");
    }
}

#[test]
fn controller_sidecars_share_the_plugin_socket() {
    for (variant, objects) in variants() {
        let (variant, objects) = (variant.as_str(), objects.as_slice());
        let controller = get(objects, "Deployment", CONTROLLER, variant);
        let plugin = container(controller, PLUGIN).unwrap();
        assert_eq!(
            env_value(plugin, "DRIVER_ROLE").as_deref(),
            Some("controller"),
            "{variant}"
        );
        let socket = socket_path(plugin);
        assert_eq!(
            socket, "/var/lib/csi/sockets/pluginproxy/csi.sock",
            "{variant}"
        );
        let (volume, rest) = volume_for(plugin, &socket).expect("plugin mounts its socket dir");
        assert!(
            pod_volume(controller, &volume).get("emptyDir").is_some(),
            "{variant}: the controller socket stays pod-local on an emptyDir"
        );
        for c in containers(controller)
            .iter()
            .filter(|c| c["name"] != PLUGIN)
        {
            let address = flag(c, "csi-address")
                .unwrap_or_else(|| panic!("{variant}: {} has no --csi-address", c["name"]));
            assert_eq!(
                address, socket,
                "{variant}: {} dials another socket",
                c["name"]
            );
            assert_eq!(
                volume_for(c, &address),
                Some((volume.clone(), rest.clone())),
                "{variant}: {} does not see the plugin's socket volume",
                c["name"]
            );
        }
    }
}

#[test]
fn node_registrar_paths_point_at_the_plugin_socket_and_are_not_swapped() {
    for (variant, objects) in variants() {
        let (variant, objects) = (variant.as_str(), objects.as_slice());
        let node = get(objects, "DaemonSet", NODE, variant);
        let plugin = container(node, PLUGIN).unwrap();
        assert_eq!(
            env_value(plugin, "DRIVER_ROLE").as_deref(),
            Some("node"),
            "{variant}"
        );
        let socket = socket_path(plugin);
        assert_eq!(socket, "/csi/csi.sock", "{variant}");
        let (volume, rest) = volume_for(plugin, &socket).expect("plugin mounts its socket dir");
        let host_dir = pod_volume(node, &volume)["hostPath"]["path"]
            .as_str()
            .expect("node socket dir is a hostPath")
            .trim_end_matches('/')
            .to_string();
        assert_eq!(
            host_dir,
            format!("{KUBELET_DIR}/plugins/{DRIVER}"),
            "{variant}"
        );

        let registrar = containers(node)
            .iter()
            .find(|c| is_sidecar(c, "csi-node-driver-registrar"))
            .expect("node-driver-registrar present");
        let address = flag(registrar, "csi-address").expect("registrar --csi-address");
        let registration = flag(registrar, "kubelet-registration-path")
            .expect("registrar --kubelet-registration-path");
        // In-pod path for the registrar, host path for the kubelet: the same
        // socket seen from both sides.
        assert_eq!(address, socket, "{variant}: registrar --csi-address");
        assert_eq!(
            registration,
            format!("{host_dir}{rest}"),
            "{variant}: registration path"
        );
        assert_eq!(
            volume_for(registrar, &address),
            Some((volume.clone(), rest.clone())),
            "{variant}"
        );

        let (reg_volume, _) =
            volume_for(registrar, "/registration/x").expect("registration dir mounted");
        assert_eq!(
            pod_volume(node, &reg_volume)["hostPath"]["path"]
                .as_str()
                .map(|p| p.trim_end_matches('/')),
            Some(format!("{KUBELET_DIR}/plugins_registry").as_str()),
            "{variant}"
        );

        let probe = containers(node)
            .iter()
            .find(|c| is_sidecar(c, "livenessprobe"))
            .expect("node livenessprobe present");
        assert_eq!(
            flag(probe, "csi-address"),
            Some(socket.clone()),
            "{variant}"
        );
        assert_eq!(
            volume_for(probe, &socket),
            Some((volume, rest)),
            "{variant}"
        );
    }
}

#[test]
fn node_plugin_is_privileged_with_bidirectional_kubelet_mount() {
    for (variant, objects) in variants() {
        let (variant, objects) = (variant.as_str(), objects.as_slice());
        let node = get(objects, "DaemonSet", NODE, variant);
        let spec = pod_spec(node);
        assert_eq!(spec["hostNetwork"], true, "{variant}");
        let plugin = container(node, PLUGIN).unwrap();
        assert_eq!(plugin["securityContext"]["privileged"], true, "{variant}");
        let mount = plugin["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["mountPath"].as_str().map(|p| p.trim_end_matches('/')) == Some(KUBELET_DIR))
            .unwrap_or_else(|| panic!("{variant}: node plugin does not mount {KUBELET_DIR}"));
        assert_eq!(mount["mountPropagation"], "Bidirectional", "{variant}");
        let volume = pod_volume(node, mount["name"].as_str().unwrap());
        assert_eq!(
            volume["hostPath"]["path"]
                .as_str()
                .map(|p| p.trim_end_matches('/')),
            Some(KUBELET_DIR),
            "{variant}: kubelet dir must be the same path inside and outside"
        );
        // Only the privileged plugin may propagate mounts back to the host.
        for c in containers(node).iter().filter(|c| c["name"] != PLUGIN) {
            for m in c["volumeMounts"].as_array().into_iter().flatten() {
                assert!(
                    m.get("mountPropagation").is_none(),
                    "{variant}: {} propagates",
                    c["name"]
                );
            }
        }
    }
}

#[test]
fn plugin_liveness_probes_reach_the_livenessprobe_sidecar() {
    for (variant, objects) in variants() {
        let (variant, objects) = (variant.as_str(), objects.as_slice());
        for (kind, name) in [("Deployment", CONTROLLER), ("DaemonSet", NODE)] {
            let workload = get(objects, kind, name, variant);
            let plugin = container(workload, PLUGIN).unwrap();
            let probe = &plugin["livenessProbe"]["httpGet"];
            assert_eq!(
                probe["path"], "/healthz",
                "{variant} {name}: plugin livenessProbe path"
            );
            let port = port_number(plugin, &probe["port"]);
            let sidecar = containers(workload)
                .iter()
                .find(|c| is_sidecar(c, "livenessprobe"))
                .unwrap_or_else(|| panic!("{variant} {name}: no livenessprobe sidecar"));
            let endpoint = flag(sidecar, "http-endpoint").expect("livenessprobe --http-endpoint");
            let (host, listen_port) = endpoint.rsplit_once(':').unwrap();
            assert_eq!(
                listen_port.parse::<u64>().unwrap(),
                port,
                "{variant} {name}: probe port"
            );
            // A sidecar bound to loopback is only reachable when the kubelet
            // dials loopback, i.e. host network plus an explicit probe host.
            if !host.is_empty() && host != "0.0.0.0" {
                assert_eq!(
                    probe["host"].as_str(),
                    Some(host),
                    "{variant} {name}: probe host"
                );
                assert_eq!(pod_spec(workload)["hostNetwork"], true, "{variant} {name}");
            }
        }
    }
}

#[test]
fn linode_token_reaches_the_controller_plugin_only() {
    for (variant, objects) in variants() {
        let (variant, objects) = (variant.as_str(), objects.as_slice());
        let controller = get(objects, "Deployment", CONTROLLER, variant);
        let plugin = container(controller, PLUGIN).unwrap();
        // The token is the Secret's file, read again when kubelet rewrites
        // it: no variable holds it.
        assert!(
            env(plugin, "LINODE_TOKEN").is_none(),
            "{variant}: the token must come from the file, not LINODE_TOKEN"
        );
        let file = env(plugin, "LINODE_TOKEN_FILE")
            .unwrap_or_else(|| panic!("{variant}: controller plugin lacks LINODE_TOKEN_FILE"));
        let file = file["value"].as_str().unwrap();
        let mount = plugin["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "linode-api-token")
            .unwrap_or_else(|| panic!("{variant}: the token Secret is not mounted"));
        assert_eq!(mount["readOnly"], true, "{variant}");
        let dir = mount["mountPath"].as_str().unwrap();
        assert_eq!(file, format!("{dir}/token"), "{variant}");
        let volume = pod_spec(controller)["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "linode-api-token")
            .unwrap_or_else(|| panic!("{variant}: no token volume"));
        assert_eq!(
            volume["secret"]["secretName"], "linode-api-token",
            "{variant}"
        );
        assert_eq!(
            volume["secret"]["items"],
            serde_json::json!([{"key": "token", "path": "token"}]),
            "{variant}"
        );

        for workload in objects
            .iter()
            .filter(|o| o["kind"] == "Deployment" || o["kind"] == "DaemonSet")
        {
            let wname = workload["metadata"]["name"].as_str().unwrap();
            for c in containers(workload) {
                let is_controller_plugin = wname == CONTROLLER && c["name"] == PLUGIN;
                for e in c["env"].as_array().into_iter().flatten() {
                    assert!(
                        e["valueFrom"].get("secretKeyRef").is_none(),
                        "{variant}: {wname}/{} reads a Secret into a variable",
                        c["name"]
                    );
                }
                for from in c["envFrom"].as_array().into_iter().flatten() {
                    assert!(
                        from.get("secretRef").is_none(),
                        "{variant}: {wname}/{} envFrom Secret",
                        c["name"]
                    );
                }
                let mounts_token = c["volumeMounts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|m| m["name"] == "linode-api-token");
                assert_eq!(
                    mounts_token, is_controller_plugin,
                    "{variant}: {wname}/{} and the token Secret",
                    c["name"]
                );
            }
            for v in pod_spec(workload)["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v.get("secret").is_some())
            {
                assert!(
                    wname == CONTROLLER && v["name"] == "linode-api-token",
                    "{variant}: {wname} mounts Secret volume {}",
                    v["name"]
                );
            }
        }
    }
}

#[test]
fn plugin_env_is_known_and_role_appropriate() {
    for (variant, objects) in variants() {
        let (variant, objects) = (variant.as_str(), objects.as_slice());
        for (kind, name) in [("Deployment", CONTROLLER), ("DaemonSet", NODE)] {
            let plugin = container(get(objects, kind, name, variant), PLUGIN).unwrap();
            for e in plugin["env"].as_array().unwrap() {
                let var = e["name"].as_str().unwrap();
                // A downward-API value only there to be expanded into a
                // variable the driver reads.
                if is_expanded_helper(plugin, e) {
                    continue;
                }
                assert!(
                    known_env().contains(var),
                    "{variant} {name}: unknown variable {var}"
                );
                if name == NODE {
                    assert!(
                        !CONTROLLER_ONLY_ENV.contains(&var),
                        "{variant}: node gets {var}"
                    );
                }
            }
        }
        let node = container(get(objects, "DaemonSet", NODE, variant), PLUGIN).unwrap();
        assert_eq!(
            env(node, "NODE_NAME").unwrap()["valueFrom"]["fieldRef"]["fieldPath"],
            "spec.nodeName",
            "{variant}"
        );
    }
}

/// `e` comes from the downward API and a later variable of `c` expands
/// it as `$(NAME)`, which Kubernetes only does for variables defined
/// earlier in the list.
fn is_expanded_helper(c: &Value, e: &Value) -> bool {
    let name = e["name"].as_str().unwrap();
    let vars = c["env"].as_array().unwrap();
    let at = vars.iter().position(|v| v["name"] == name).unwrap();
    e["valueFrom"].get("fieldRef").is_some()
        && vars[at + 1..].iter().any(|v| {
            v["value"]
                .as_str()
                .is_some_and(|s| s.contains(&format!("$({name})")))
        })
}

/// `(host, port)` of the plugin's METRICS_ADDRESS.
fn metrics_address(plugin: &Value) -> (String, u64) {
    let raw = env_value(plugin, "METRICS_ADDRESS").expect("the plugin sets METRICS_ADDRESS");
    let (host, port) = raw.rsplit_once(':').expect("host:port");
    (host.to_string(), port.parse().expect("a port number"))
}

#[test]
fn the_plugin_metrics_port_is_declared_and_annotated_where_scraped() {
    assert!(
        variants().iter().any(|(v, _)| v == "overlays/metrics"),
        "the metrics overlay is a checked variant"
    );
    for (variant, objects) in variants() {
        let annotated = variant.contains("metrics");
        for (kind, name) in [("Deployment", CONTROLLER), ("DaemonSet", NODE)] {
            let workload = get(objects, kind, name, variant);
            let plugin = container(workload, PLUGIN).unwrap();
            let (host, port) = metrics_address(plugin);
            assert_eq!(port, 29662, "{variant} {name}");
            assert_eq!(
                port_number(plugin, &Value::from("metrics")),
                port,
                "{variant} {name}: a declared metrics port"
            );
            // No two containers of the pod listen on one port.
            let mut ports = BTreeSet::new();
            for c in containers(workload) {
                for p in c["ports"].as_array().into_iter().flatten() {
                    let n = p["containerPort"].as_u64().unwrap();
                    assert!(ports.insert(n), "{variant} {name}: port {n} twice");
                }
            }
            let host_network = pod_spec(workload)["hostNetwork"] == true;
            match (host_network, annotated) {
                // The pod IP: Prometheus reaches it, nothing else binds it.
                (false, _) => assert_eq!(host, "", "{variant} {name}"),
                // The host network: loopback unless scraping is asked for.
                (true, false) => assert_eq!(host, "127.0.0.1", "{variant} {name}"),
                (true, true) => {
                    assert_eq!(host, "$(HOST_IP)", "{variant} {name}");
                    let host_ip = env(plugin, "HOST_IP").expect("HOST_IP");
                    assert_eq!(
                        host_ip["valueFrom"]["fieldRef"]["fieldPath"], "status.hostIP",
                        "{variant}"
                    );
                    assert!(is_expanded_helper(plugin, host_ip), "{variant}");
                }
            }
            let notes = &workload["spec"]["template"]["metadata"]["annotations"];
            if annotated {
                assert_eq!(notes["prometheus.io/scrape"], "true", "{variant} {name}");
                assert_eq!(
                    notes["prometheus.io/port"],
                    port.to_string(),
                    "{variant} {name}"
                );
                assert_eq!(notes["prometheus.io/path"], "/metrics", "{variant} {name}");
            } else {
                assert!(
                    notes.get("prometheus.io/scrape").is_none(),
                    "{variant} {name}: scraping is opt-in"
                );
            }
        }
    }
    // With the node image there is no DaemonSet to patch, and the
    // controller is annotated all the same.
    let objects = render_with_components(&[NODE_IMAGE, "metrics"]);
    assert!(find(&objects, "DaemonSet", NODE).is_none());
    let controller = get(&objects, "Deployment", CONTROLLER, "node-image+metrics");
    assert_eq!(
        controller["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"],
        "true"
    );
}

#[test]
fn the_example_service_monitor_scrapes_the_plugin_metrics_ports() {
    let objects = render(&kustomize_dir().join("examples/metrics"));
    let installed = render(&kustomize_dir().join("overlays/metrics"));
    let monitor = objects
        .iter()
        .find(|o| o["kind"] == "ServiceMonitor")
        .expect("a ServiceMonitor");
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(monitor["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"],
        serde_json::json!([NAMESPACE])
    );
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap();
    let endpoints = monitor["spec"]["endpoints"].as_array().unwrap();
    let services: Vec<&Value> = objects.iter().filter(|o| o["kind"] == "Service").collect();
    let mut scraped = BTreeSet::new();
    for service in &services {
        assert_eq!(service["metadata"]["namespace"], NAMESPACE);
        let labels = service["metadata"]["labels"].as_object().unwrap();
        assert!(
            selector.iter().all(|(k, v)| labels.get(k) == Some(v)),
            "the ServiceMonitor selects {}",
            service["metadata"]["name"]
        );
        let port = &service["spec"]["ports"][0];
        assert!(endpoints.iter().any(|e| e["port"] == port["name"]));
        assert!(endpoints.iter().all(|e| e["path"] == "/metrics"));
        // The Service's pods and their named port are the plugin's.
        let pods = service["spec"]["selector"].as_object().unwrap();
        for (kind, name) in [("Deployment", CONTROLLER), ("DaemonSet", NODE)] {
            let workload = get(&installed, kind, name, "metrics");
            let labels = workload["spec"]["template"]["metadata"]["labels"]
                .as_object()
                .unwrap();
            if pods.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                let plugin = container(workload, PLUGIN).unwrap();
                assert_eq!(
                    port_number(plugin, &port["targetPort"]),
                    metrics_address(plugin).1,
                    "{name}"
                );
                scraped.insert(name);
            }
        }
    }
    assert_eq!(
        scraped,
        BTreeSet::from([CONTROLLER, NODE]),
        "both the controller and the node pods are scraped"
    );
}

#[test]
fn node_rbac_is_read_only_and_excludes_secrets() {
    for (variant, objects) in variants() {
        let (variant, objects) = (variant.as_str(), objects.as_slice());
        let node = grants(&rules_for(objects, NODE));
        let expected: BTreeMap<String, BTreeSet<String>> =
            [("/nodes".to_string(), ["get".to_string()].into())].into();
        assert_eq!(node, expected, "{variant}: node RBAC is exactly get nodes");

        let controller = grants(&rules_for(objects, CONTROLLER));
        for (resource, verbs) in &controller {
            assert!(
                !resource.contains('*') && !verbs.contains("*"),
                "{variant}: wildcard {resource}"
            );
            assert_ne!(
                resource, "/secrets",
                "{variant}: controller needs no Secret access"
            );
        }
        // Region discovery lists nodes; nothing writes them.
        let nodes = &controller["/nodes"];
        assert!(
            nodes.contains("list"),
            "{variant}: controller cannot list nodes"
        );
        assert!(
            nodes
                .iter()
                .all(|v| ["get", "list", "watch"].contains(&v.as_str())),
            "{variant}: {nodes:?}"
        );
        assert!(
            controller["coordination.k8s.io/leases"].contains("update"),
            "{variant}: leader election"
        );
        if attach_required(objects, variant) {
            assert!(
                controller["storage.k8s.io/volumeattachments/status"].contains("patch"),
                "{variant}"
            );
        } else {
            assert!(
                !controller.contains_key("storage.k8s.io/volumeattachments/status"),
                "{variant}"
            );
        }
        let snapshotter = containers(get(objects, "Deployment", CONTROLLER, variant))
            .iter()
            .any(|c| is_sidecar(c, "csi-snapshotter"));
        assert_eq!(
            controller.contains_key("snapshot.storage.k8s.io/volumesnapshotcontents/status"),
            snapshotter,
            "{variant}: snapshot RBAC iff the snapshotter runs"
        );
    }
}

#[test]
fn sidecar_arguments_and_images() {
    for (variant, objects) in variants() {
        let (variant, objects) = (variant.as_str(), objects.as_slice());
        let controller = get(objects, "Deployment", CONTROLLER, variant);
        let provisioner = containers(controller)
            .iter()
            .find(|c| is_sidecar(c, "csi-provisioner"))
            .expect("csi-provisioner present");
        let a = args(provisioner);
        for required in [
            "--leader-election",
            "--timeout=5m",
            "--volume-name-prefix=pvc",
            "--volume-name-uuid-length=16",
            "--extra-create-metadata",
        ] {
            assert!(
                a.iter().any(|x| x == required),
                "{variant}: provisioner lacks {required}"
            );
        }
        for c in containers(controller) {
            if leader_elects(c) {
                assert!(
                    args(c).iter().any(|x| x == "--leader-election"),
                    "{variant}: {}",
                    c["name"]
                );
            }
        }

        let mut plugin_images = BTreeSet::new();
        for workload in [controller, get(objects, "DaemonSet", NODE, variant)] {
            for c in containers(workload) {
                let image = c["image"].as_str().unwrap();
                let (_, tag) = image.rsplit_once(':').expect("every image has a tag");
                if c["name"] == PLUGIN {
                    plugin_images.insert(image.to_string());
                } else {
                    assert!(image.starts_with(SIDECAR_REGISTRY), "{variant}: {image}");
                    let version = tag
                        .strip_prefix('v')
                        .unwrap_or_else(|| panic!("{variant}: {image} not pinned"));
                    assert_eq!(
                        version.split('.').count(),
                        3,
                        "{variant}: {image} not a full version"
                    );
                }
                let requests = &c["resources"]["requests"];
                assert!(
                    requests.get("cpu").is_some() && requests.get("memory").is_some(),
                    "{variant}: {} has no resource requests",
                    c["name"]
                );
            }
        }
        assert_eq!(
            plugin_images.len(),
            1,
            "{variant}: one image serves both roles: {plugin_images:?}"
        );
        let image = plugin_images.into_iter().next().unwrap();
        let expected = if variant == "overlays/dev" {
            "localhost/linode-nfs-csi:dev".to_string()
        } else {
            format!(
                "docker.io/linode/linode-nfs-csi:v{}",
                env!("CARGO_PKG_VERSION")
            )
        };
        assert_eq!(image, expected, "{variant}");
    }
}

/// One controller process writes: one replica, replaced by Recreate (with
/// `rollingUpdate: null`, so applying over a Deployment an earlier version
/// made with RollingUpdate is accepted), and ready only while it holds the
/// Lease (`/readyz` on the metrics port).
#[test]
fn the_controller_is_one_replica_replaced_by_recreate_and_ready_when_it_holds_the_lease() {
    for (variant, objects) in variants() {
        let (variant, objects) = (variant.as_str(), objects.as_slice());
        let controller = get(objects, "Deployment", CONTROLLER, variant);
        assert_eq!(controller["spec"]["replicas"], 1, "{variant}");
        let strategy = &controller["spec"]["strategy"];
        assert_eq!(strategy["type"], "Recreate", "{variant}");
        assert!(
            strategy
                .as_object()
                .is_some_and(|s| s.get("rollingUpdate") == Some(&Value::Null)),
            "{variant}: {strategy}"
        );
        let plugin = containers(controller)
            .iter()
            .find(|c| c["name"] == PLUGIN)
            .unwrap();
        let probe = &plugin["readinessProbe"]["httpGet"];
        assert_eq!(probe["path"], "/readyz", "{variant}");
        let port = probe["port"].as_str().unwrap();
        let declared = plugin["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == port)
            .unwrap_or_else(|| panic!("{variant}: no port {port}"));
        assert_eq!(declared["containerPort"], 29662, "{variant}");
    }
}

#[test]
fn node_plugin_runs_everywhere_and_controller_is_unprivileged() {
    for (variant, objects) in variants() {
        let (variant, objects) = (variant.as_str(), objects.as_slice());
        let node = pod_spec(get(objects, "DaemonSet", NODE, variant));
        let tolerates_all = node["tolerations"].as_array().is_some_and(|t| {
            t.iter()
                .any(|t| t["operator"] == "Exists" && t.get("key").is_none())
        });
        assert!(
            tolerates_all,
            "{variant}: tainted nodes would get no node plugin"
        );

        let controller = get(objects, "Deployment", CONTROLLER, variant);
        assert_eq!(
            pod_spec(controller)["securityContext"]["runAsNonRoot"],
            true,
            "{variant}"
        );
        for c in containers(controller) {
            // The one exception, checked in
            // the_subdirectory_component_privileges_the_controller_plugin_alone.
            if c["name"] == PLUGIN && mounts_shares(controller) {
                continue;
            }
            assert_ne!(
                c["securityContext"]["privileged"], true,
                "{variant}: {}",
                c["name"]
            );
            assert_eq!(
                c["securityContext"]["allowPrivilegeEscalation"], false,
                "{variant}: {}",
                c["name"]
            );
        }
        assert_eq!(
            pod_spec(controller)["serviceAccountName"],
            CONTROLLER,
            "{variant}: controller service account"
        );
        assert_eq!(
            node["serviceAccountName"], NODE,
            "{variant}: node service account"
        );
    }
}

/// The subdirectory component privileges the controller plugin, and only
/// it: root with SYS_ADMIN for the parents' NFS mounts (mount.nfs comes with
/// the image), on an emptyDir at SHARE_MOUNT_DIR, with no host path and no
/// mount propagation, so every mount stays in the container's namespace;
/// the resizer's resize controller needs no pods; the node side is the
/// base's.
#[test]
fn the_subdirectory_component_privileges_the_controller_plugin_alone() {
    let base = render(&kustomize_dir().join("base"));
    let mut checked = 0;
    for (variant, objects) in variants() {
        let (variant, objects) = (variant.as_str(), objects.as_slice());
        let controller = get(objects, "Deployment", CONTROLLER, variant);
        if !mounts_shares(controller) {
            continue;
        }
        checked += 1;
        let plugin = container(controller, PLUGIN).unwrap();
        assert_eq!(
            env_value(plugin, "SHARE_MOUNT_DIR").as_deref(),
            Some(SHARE_MOUNT_DIR),
            "{variant}"
        );
        assert_eq!(
            env_value(plugin, "VOLUME_EXPANSION").as_deref(),
            Some("subdirectory"),
            "{variant}"
        );
        let security = &plugin["securityContext"];
        assert_eq!(security["privileged"], true, "{variant}");
        assert_eq!(security["runAsUser"], 0, "{variant}");
        assert_eq!(security["runAsNonRoot"], false, "{variant}");
        assert!(
            strings(&security["capabilities"]["add"]).contains(&"SYS_ADMIN"),
            "{variant}: {security}"
        );
        let (volume, _) = volume_for(plugin, SHARE_MOUNT_DIR)
            .unwrap_or_else(|| panic!("{variant}: nothing mounted at {SHARE_MOUNT_DIR}"));
        assert!(
            pod_volume(controller, &volume)["emptyDir"].is_object(),
            "{variant}: {volume} is not an emptyDir"
        );
        for c in containers(controller) {
            for m in c["volumeMounts"].as_array().into_iter().flatten() {
                assert!(
                    matches!(m["mountPropagation"].as_str(), None | Some("None")),
                    "{variant}: {} propagates {}",
                    c["name"],
                    m["mountPath"]
                );
            }
            if c["name"] != PLUGIN {
                assert_ne!(c["securityContext"]["privileged"], true, "{variant}");
                assert_eq!(
                    c["securityContext"]["allowPrivilegeEscalation"], false,
                    "{variant}: {}",
                    c["name"]
                );
            }
        }
        for v in pod_spec(controller)["volumes"].as_array().unwrap() {
            assert!(v.get("hostPath").is_none(), "{variant}: {v}");
        }
        let resizer = containers(controller)
            .iter()
            .find(|c| is_sidecar(c, "csi-resizer"))
            .unwrap_or_else(|| panic!("{variant}: expansion needs csi-resizer"));
        assert_eq!(
            flag(resizer, "handle-volume-inuse-error").as_deref(),
            Some("false"),
            "{variant}: the resize controller would watch pods, which the role does not grant"
        );
        assert_eq!(
            get(objects, "DaemonSet", NODE, variant)["spec"],
            get(&base, "DaemonSet", NODE, "base")["spec"],
            "{variant}: the node DaemonSet is the base's"
        );
    }
    assert!(checked >= 2, "the overlay and node-access+subdirectory");
    let containerfile =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Containerfile"))
            .unwrap();
    assert!(
        containerfile
            .lines()
            .any(|l| l.starts_with("RUN apk add") && l.contains(" nfs-utils")),
        "the image carries mount.nfs"
    );
}

/// What node-mode unpublish of a shared filesystem's directory reads, the
/// plugin can read in every variant (a refusal would fail every detach).
#[test]
fn the_controller_can_read_what_node_mode_unpublish_decides_from() {
    for (variant, objects) in variants() {
        let controller = grants(&rules_for(objects, CONTROLLER));
        for resource in [
            "storage.k8s.io/volumeattachments",
            "/persistentvolumes",
            "storage.k8s.io/csinodes",
            "/nodes",
        ] {
            let have = controller.get(resource).cloned().unwrap_or_default();
            assert!(
                have.contains("get") && have.contains("list"),
                "{variant}: controller lacks get/list on {resource}: {have:?}"
            );
        }
    }
}

#[test]
fn namespaced_objects_land_in_kube_system() {
    const CLUSTER_SCOPED: &[&str] = &[
        "CSIDriver",
        "ClusterRole",
        "ClusterRoleBinding",
        "VolumeSnapshotClass",
        "VolumeGroupSnapshotClass",
    ];
    for (variant, objects) in variants() {
        let (variant, objects) = (variant.as_str(), objects.as_slice());
        for o in objects {
            let kind = o["kind"].as_str().unwrap();
            let ns = o["metadata"]["namespace"].as_str();
            if CLUSTER_SCOPED.contains(&kind) {
                assert_eq!(ns, None, "{variant}: {kind} is cluster-scoped");
            } else {
                assert_eq!(
                    ns,
                    Some(NAMESPACE),
                    "{variant}: {kind} {}",
                    o["metadata"]["name"]
                );
            }
        }
    }
}

#[test]
fn snapshot_overlay_adds_snapshotter_and_class() {
    let objects = render(&kustomize_dir().join("overlays/snapshots"));
    let class = get(&objects, "VolumeSnapshotClass", "linode-nfs", "snapshots");
    assert_eq!(class["apiVersion"], "snapshot.storage.k8s.io/v1");
    assert_eq!(class["driver"], DRIVER);
    assert!(["Delete", "Retain"].contains(&class["deletionPolicy"].as_str().unwrap()));
    let controller = get(&objects, "Deployment", CONTROLLER, "snapshots");
    assert!(containers(controller)
        .iter()
        .any(|c| is_sidecar(c, "csi-snapshotter")));
    let base = render(&kustomize_dir().join("base"));
    assert!(!base.iter().any(|o| o["kind"] == "VolumeSnapshotClass"));
}

/// The csi-snapshotter feature gate that turns VolumeGroupSnapshots on
/// (external-snapshotter v8.6.0, pkg/features: beta, off by default).
const GROUP_SNAPSHOT_GATE: &str = "CSIVolumeGroupSnapshot";
/// The group snapshot API csi-snapshotter and snapshot-controller v8.6.0
/// read; the older v1beta1 and v1beta2 are only served for migration.
const GROUP_SNAPSHOT_API: &str = "groupsnapshot.storage.k8s.io/v1";

/// `--feature-gates=A=true,B=false` of a container as gate → value.
fn feature_gates(c: &Value) -> BTreeMap<String, String> {
    let all: Vec<String> = args(c)
        .iter()
        .filter(|a| a.starts_with("--feature-gates"))
        .cloned()
        .collect();
    assert!(
        all.len() <= 1,
        "{}: --feature-gates twice: {all:?}",
        c["name"]
    );
    let Some(value) = flag(c, "feature-gates") else {
        assert!(
            all.is_empty(),
            "{}: {all:?} is not --feature-gates=…",
            c["name"]
        );
        return BTreeMap::new();
    };
    value
        .split(',')
        .map(|pair| {
            let (gate, on) = pair
                .split_once('=')
                .unwrap_or_else(|| panic!("{}: feature gate {pair} has no value", c["name"]));
            assert!(on == "true" || on == "false", "{}: {pair}", c["name"]);
            (gate.to_string(), on.to_string())
        })
        .collect()
}

#[test]
fn group_snapshots_are_on_in_the_snapshotter_and_its_class() {
    let mut with_snapshotter = 0;
    for (variant, objects) in variants() {
        let (variant, objects) = (variant.as_str(), objects.as_slice());
        let controller = get(objects, "Deployment", CONTROLLER, variant);
        let Some(snapshotter) = containers(controller)
            .iter()
            .find(|c| is_sidecar(c, "csi-snapshotter"))
        else {
            assert!(
                !objects
                    .iter()
                    .any(|o| o["kind"] == "VolumeGroupSnapshotClass"),
                "{variant}: a VolumeGroupSnapshotClass without csi-snapshotter"
            );
            continue;
        };
        with_snapshotter += 1;
        // The gate only exists in the release it was checked against.
        assert_eq!(
            snapshotter["image"],
            format!("{SIDECAR_REGISTRY}csi-snapshotter:v8.6.0"),
            "{variant}: recheck the group snapshot gate and API version upstream \
             before bumping csi-snapshotter"
        );
        assert_eq!(
            feature_gates(snapshotter)
                .get(GROUP_SNAPSHOT_GATE)
                .map(String::as_str),
            Some("true"),
            "{variant}: csi-snapshotter lacks --feature-gates={GROUP_SNAPSHOT_GATE}=true"
        );

        let granted = grants(&rules_for(objects, CONTROLLER));
        for (resource, want) in [
            (
                "volumegroupsnapshotcontents",
                &["get", "list", "watch", "update", "patch"][..],
            ),
            ("volumegroupsnapshotcontents/status", &["update", "patch"]),
            ("volumegroupsnapshotclasses", &["get", "list", "watch"]),
        ] {
            let have = granted
                .get(&format!("groupsnapshot.storage.k8s.io/{resource}"))
                .cloned()
                .unwrap_or_default();
            let missing: Vec<_> = verbs(want).difference(&have).cloned().collect();
            assert!(
                missing.is_empty(),
                "{variant}: csi-snapshotter lacks {missing:?} on {resource}"
            );
        }

        let classes: Vec<&Value> = objects
            .iter()
            .filter(|o| o["kind"] == "VolumeGroupSnapshotClass")
            .collect();
        assert_eq!(classes.len(), 1, "{variant}: one VolumeGroupSnapshotClass");
        let class = classes[0];
        assert_eq!(class["apiVersion"], GROUP_SNAPSHOT_API, "{variant}");
        assert_eq!(
            class["driver"], DRIVER,
            "{variant}: the class names our driver"
        );
        assert_eq!(class["deletionPolicy"], "Delete", "{variant}");
        let keys: BTreeSet<&str> = class
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            BTreeSet::from(["apiVersion", "kind", "metadata", "driver", "deletionPolicy"]),
            "{variant}: VolumeGroupSnapshotClass fields (no schema validates them)"
        );
    }
    assert!(with_snapshotter > 0, "no variant runs csi-snapshotter");
}

#[test]
fn the_snapshot_prerequisites_turn_group_snapshots_on_in_the_controller() {
    // Rendering needs the remote upstream directories: check the patch as
    // written. The CRD directory at the tag holds the group snapshot CRDs
    // too (snapshot_prerequisites_pin_the_snapshotter_release pins it).
    let prerequisites = snapshot_prerequisites();
    let patches = prerequisites["patches"]
        .as_array()
        .expect("prerequisites/snapshots patches the snapshot-controller");
    let gate = format!("--feature-gates={GROUP_SNAPSHOT_GATE}=true");
    let patch = patches
        .iter()
        .find(|p| {
            p["target"]["kind"] == "Deployment" && p["target"]["name"] == "snapshot-controller"
        })
        .expect("a patch of the snapshot-controller Deployment");
    let ops: Vec<Value> =
        serde_yaml_ng::from_str(patch["patch"].as_str().expect("an inline JSON6902 patch"))
            .expect("the patch parses");
    assert_eq!(
        ops,
        vec![serde_json::json!({
            "op": "add",
            "path": "/spec/template/spec/containers/0/args/-",
            "value": gate,
        })],
        "prerequisites/snapshots: the snapshot-controller patch"
    );
}

#[test]
fn examples_are_consistent_with_the_driver() {
    let objects = render(&kustomize_dir().join("examples"));
    let classes: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "StorageClass")
        .collect();
    assert!(
        classes.len() >= 2,
        "space-id and space-label StorageClasses"
    );
    let mut by_id = false;
    let mut by_label = false;
    let mut subdirectory = false;
    let mut pool = false;
    let mut autogrow = false;
    for class in &classes {
        assert_eq!(class["provisioner"], DRIVER);
        let params = class["parameters"].as_object().unwrap();
        let has = |short: &str| params.contains_key(&format!("{DRIVER}/{short}"));
        let shared = params.get(&format!("{DRIVER}/volume-type")) == Some(&"subdirectory".into());
        // Keys of one volume type only: the driver refuses the other's.
        let allowed: &[&str] = if shared {
            &[
                "space-id",
                "space-label",
                "volume-type",
                "shared-filesystem-id",
                "shared-filesystem-label",
                "shared-filesystem-pool",
                "pool-filesystem-size",
                "pool-max-filesystems",
                "pool-spares",
                "quota",
                "on-delete",
                "directory-mode",
                "directory-uid",
                "directory-gid",
                "max-files",
                "autogrow-threshold",
                "autogrow-step",
                "autogrow-max",
            ]
        } else {
            &[
                "space-id",
                "space-label",
                "volume-type",
                "tags",
                "filesystem-root-squash",
            ]
        };
        for (key, value) in params {
            let short = key.strip_prefix(&format!("{DRIVER}/")).unwrap_or_else(|| {
                panic!("parameter {key} lacks the driver prefix (ignored by the driver)")
            });
            assert!(allowed.contains(&short), "unknown parameter {key}");
            let value = value.as_str().unwrap();
            match short {
                "space-id" | "shared-filesystem-id" => {
                    assert!(value.parse::<u64>().unwrap() > 0)
                }
                "pool-max-filesystems" => {
                    assert!((1..=100).contains(&value.parse::<u32>().unwrap()))
                }
                "pool-spares" => assert!(value.parse::<u32>().unwrap() <= 99),
                "shared-filesystem-pool" => assert!(value
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')),
                "filesystem-root-squash" => {
                    assert!(["none", "root_squash", "all_squash"].contains(&value))
                }
                "volume-type" => assert!(["filesystem", "subdirectory"].contains(&value)),
                "quota" => assert!(["required", "best-effort", "off"].contains(&value)),
                "on-delete" => assert!(["delete", "retain", "archive"].contains(&value)),
                "directory-mode" => assert!(u32::from_str_radix(value, 8).unwrap() <= 0o7777),
                "autogrow-threshold" => {
                    assert!((50..=99).contains(&value.parse::<u8>().unwrap()))
                }
                _ => {}
            }
        }
        let id = has("space-id");
        let label = has("space-label");
        assert!(id != label, "exactly one of space-id / space-label");
        if shared {
            let parents = [
                "shared-filesystem-id",
                "shared-filesystem-label",
                "shared-filesystem-pool",
            ];
            assert_eq!(
                parents.iter().filter(|k| has(k)).count(),
                1,
                "exactly one of shared-filesystem-id / -label / -pool"
            );
            if !has("shared-filesystem-pool") {
                assert!(
                    !has("pool-filesystem-size")
                        && !has("pool-max-filesystems")
                        && !has("pool-spares")
                );
            }
            if has("autogrow-step") || has("autogrow-max") {
                assert!(
                    has("autogrow-threshold"),
                    "autogrow keys without a threshold"
                );
            }
            subdirectory = true;
            pool |= has("shared-filesystem-pool");
            autogrow |= has("autogrow-threshold");
        } else {
            by_id |= id;
            by_label |= label;
            assert!(has("tags"));
            assert!(has("filesystem-root-squash"));
        }
        // Only a quota can grow: a whole filesystem's capacity is fixed.
        assert_eq!(
            class["allowVolumeExpansion"].as_bool().unwrap_or(false),
            shared,
            "StorageClass {}: allowVolumeExpansion",
            class["metadata"]["name"]
        );
    }
    assert!(by_id && by_label, "both StorageClass variants present");
    assert!(subdirectory, "a subdirectory StorageClass");
    assert!(pool, "a StorageClass of a pool");
    assert!(autogrow, "a StorageClass with autogrow");

    let class_names: BTreeSet<&str> = classes
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap())
        .collect();
    let pvcs: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "PersistentVolumeClaim")
        .collect();
    for pvc in &pvcs {
        assert!(class_names.contains(pvc["spec"]["storageClassName"].as_str().unwrap()));
        assert_eq!(
            pvc["spec"]["accessModes"],
            serde_json::json!(["ReadWriteMany"])
        );
    }

    // VolumeAttributesClasses set only what ControllerModifyVolume accepts;
    // any other key would leave the PVC's modification infeasible.
    let attribute_classes: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "VolumeAttributesClass")
        .collect();
    assert!(!attribute_classes.is_empty(), "a VolumeAttributesClass");
    for class in &attribute_classes {
        assert_eq!(class["apiVersion"], "storage.k8s.io/v1");
        assert_eq!(class["driverName"], DRIVER);
        let params = class["parameters"].as_object().unwrap();
        assert!(!params.is_empty(), "a class that changes nothing");
        for (key, value) in params {
            let short = key.strip_prefix(&format!("{DRIVER}/")).unwrap_or("");
            assert!(
                ["tags", "filesystem-root-squash"].contains(&short),
                "{key} is not a mutable parameter"
            );
            if short == "filesystem-root-squash" {
                assert!(["none", "root_squash", "all_squash"].contains(&value.as_str().unwrap()));
            }
        }
    }
    let attribute_class_names: BTreeSet<&str> = attribute_classes
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap())
        .collect();
    let with_attributes: Vec<&&Value> = pvcs
        .iter()
        .filter(|p| p["spec"]["volumeAttributesClassName"].is_string())
        .collect();
    assert!(
        !with_attributes.is_empty(),
        "a PVC that names a VolumeAttributesClass"
    );
    for pvc in with_attributes {
        let name = pvc["spec"]["volumeAttributesClassName"].as_str().unwrap();
        assert!(attribute_class_names.contains(name), "no class {name}");
    }
    let snapshot = objects
        .iter()
        .find(|o| o["kind"] == "VolumeSnapshot")
        .expect("a VolumeSnapshot");
    let source = snapshot["spec"]["source"]["persistentVolumeClaimName"]
        .as_str()
        .unwrap();
    assert!(
        pvcs.iter().any(|p| p["metadata"]["name"] == source),
        "snapshot source exists"
    );
    let snapshots = render(&kustomize_dir().join("overlays/snapshots"));
    assert!(
        find(
            &snapshots,
            "VolumeSnapshotClass",
            snapshot["spec"]["volumeSnapshotClassName"]
                .as_str()
                .unwrap()
        )
        .is_some(),
        "the example's VolumeSnapshotClass comes with the snapshots overlay"
    );
    // The group snapshot: a label selector (no schema validates these
    // fields) matching PVCs of this kustomization, all of them directory
    // volumes of one shared filesystem, as the driver requires.
    let group = objects
        .iter()
        .find(|o| o["kind"] == "VolumeGroupSnapshot")
        .expect("a VolumeGroupSnapshot");
    assert_eq!(group["apiVersion"], GROUP_SNAPSHOT_API);
    let spec = group["spec"].as_object().unwrap();
    assert_eq!(
        spec.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        BTreeSet::from(["source", "volumeGroupSnapshotClassName"])
    );
    let group_source = group["spec"]["source"].as_object().unwrap();
    assert_eq!(
        group_source.keys().map(String::as_str).collect::<Vec<_>>(),
        ["selector"]
    );
    let selector = group["spec"]["source"]["selector"].as_object().unwrap();
    assert_eq!(
        selector.keys().map(String::as_str).collect::<Vec<_>>(),
        ["matchLabels"],
        "matchLabels only (this test matches them)"
    );
    let wanted = selector["matchLabels"].as_object().unwrap();
    assert!(!wanted.is_empty(), "an empty selector selects every PVC");
    let members: Vec<&&Value> = pvcs
        .iter()
        .filter(|p| {
            wanted
                .iter()
                .all(|(k, v)| p["metadata"]["labels"].get(k) == Some(v))
        })
        .collect();
    assert!(
        !members.is_empty(),
        "the VolumeGroupSnapshot selects no PVC"
    );
    let filesystems: BTreeSet<String> = members
        .iter()
        .map(|p| {
            let class = classes
                .iter()
                .find(|c| c["metadata"]["name"] == p["spec"]["storageClassName"])
                .unwrap();
            let params = &class["parameters"];
            assert_eq!(
                params[format!("{DRIVER}/volume-type")],
                "subdirectory",
                "group member {} is not a directory volume",
                p["metadata"]["name"]
            );
            [
                "space-id",
                "space-label",
                "shared-filesystem-id",
                "shared-filesystem-label",
            ]
            .iter()
            .map(|k| format!("{k}={}", params[format!("{DRIVER}/{k}")]))
            .collect::<Vec<_>>()
            .join(",")
        })
        .collect();
    assert_eq!(
        filesystems.len(),
        1,
        "group members on more than one filesystem: {filesystems:?}"
    );
    assert!(
        find(
            &snapshots,
            "VolumeGroupSnapshotClass",
            group["spec"]["volumeGroupSnapshotClassName"]
                .as_str()
                .unwrap()
        )
        .is_some(),
        "the example's VolumeGroupSnapshotClass comes with the snapshots overlay"
    );

    let restore = pvcs
        .iter()
        .find(|p| p["spec"]["dataSource"]["kind"] == "VolumeSnapshot")
        .expect("a restore PVC");
    assert_eq!(
        restore["spec"]["dataSource"]["apiGroup"],
        "snapshot.storage.k8s.io"
    );
    assert_eq!(
        restore["spec"]["dataSource"]["name"],
        snapshot["metadata"]["name"]
    );
    // A clone names a PVC of the core group in its own namespace, and asks
    // for at least the source's size (a clone cannot be smaller).
    let clone = pvcs
        .iter()
        .find(|p| p["spec"]["dataSource"]["kind"] == "PersistentVolumeClaim")
        .expect("a clone PVC");
    assert!(clone["spec"]["dataSource"].get("apiGroup").is_none());
    let source = pvcs
        .iter()
        .find(|p| p["metadata"]["name"] == clone["spec"]["dataSource"]["name"])
        .expect("the clone's source PVC exists");
    let bytes = |p: &Value| {
        let size = p["spec"]["resources"]["requests"]["storage"]
            .as_str()
            .unwrap();
        linode_nfs_csi::config::parse_quantity(size).unwrap()
    };
    assert!(
        bytes(clone) >= bytes(source),
        "a clone smaller than its source"
    );

    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("an example Deployment");
    assert!(deployment["spec"]["replicas"].as_u64().unwrap() > 1);
    let spread = pod_spec(deployment)["topologySpreadConstraints"]
        .as_array()
        .expect("spread over nodes");
    assert!(spread
        .iter()
        .any(|s| s["topologyKey"] == "kubernetes.io/hostname"));
    let claims: Vec<&str> = pod_spec(deployment)["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
        .collect();
    assert!(claims
        .iter()
        .any(|c| pvcs.iter().any(|p| p["metadata"]["name"] == *c)));
}

/// The driver's own image (also rewritten by the dev overlay); every other
/// image must be a listed upstream release.
fn is_plugin_image(image: &str) -> bool {
    image
        .rsplit_once(':')
        .map_or(image, |(repo, _)| repo)
        .ends_with("/linode-nfs-csi")
}

/// Rows of kustomize/sidecar-images.md: image reference → release commit.
fn listed_images() -> BTreeMap<String, String> {
    let path = kustomize_dir().join("sidecar-images.md");
    let text = std::fs::read_to_string(&path).expect("kustomize/sidecar-images.md exists");
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 3, "sidecar-images.md: malformed row {line}");
        let image = cells[0].trim_matches('`');
        let commit = cells[1].trim_matches('`');
        let (_, tag) = image
            .rsplit_once(':')
            .unwrap_or_else(|| panic!("sidecar-images.md: {image} has no tag"));
        assert!(
            commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit()),
            "sidecar-images.md: {image} needs the full release commit, not {commit:?}"
        );
        assert!(
            cells[2].contains("https://github.com/kubernetes-csi/") && cells[2].contains(tag),
            "sidecar-images.md: {image} needs an upstream link naming {tag}"
        );
        assert!(
            out.insert(image.to_string(), commit.to_string()).is_none(),
            "sidecar-images.md: {image} listed twice"
        );
    }
    assert!(!out.is_empty(), "sidecar-images.md lists no image");
    out
}

fn pod_images(workload: &Value) -> Vec<String> {
    ["initContainers", "containers"]
        .iter()
        .flat_map(|key| pod_spec(workload)[*key].as_array().into_iter().flatten())
        .map(|c| c["image"].as_str().unwrap().to_string())
        .collect()
}

/// kustomize/prerequisites/snapshots/kustomization.yaml, parsed but not
/// rendered: its resources are remote and the tests run offline.
fn snapshot_prerequisites() -> Value {
    let path = kustomize_dir().join("prerequisites/snapshots/kustomization.yaml");
    let text = std::fs::read_to_string(&path).expect("prerequisites/snapshots exists");
    serde_yaml_ng::from_str(&text).expect("prerequisites kustomization parses")
}

#[test]
fn every_pinned_image_is_a_listed_release() {
    let listed = listed_images();
    // Each component over the base as well, so a component that no overlay
    // uses still has its images checked.
    let mut renders: Vec<(String, Vec<Value>)> = variants().to_vec();
    let mut components: Vec<String> = std::fs::read_dir(kustomize_dir().join("components"))
        .expect("kustomize/components exists")
        .map(|e| e.unwrap())
        .filter(|e| e.path().join("kustomization.yaml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    components.sort();
    for c in &components {
        renders.push((format!("base+{c}"), render_with_components(&[c.as_str()])));
    }

    let mut used = BTreeSet::new();
    for (variant, objects) in &renders {
        for workload in objects
            .iter()
            .filter(|o| o["spec"]["template"]["spec"].is_object())
        {
            for image in pod_images(workload)
                .into_iter()
                .filter(|i| !is_plugin_image(i))
            {
                assert!(
                    listed.contains_key(&image),
                    "{variant}: {image} is not in kustomize/sidecar-images.md; confirm the \
                     tag upstream and add a row with where it was confirmed"
                );
                used.insert(image);
            }
        }
    }
    let prerequisites = snapshot_prerequisites();
    for entry in prerequisites["images"]
        .as_array()
        .expect("images: pins the tag")
    {
        let image = format!(
            "{}:{}",
            entry["name"].as_str().unwrap(),
            entry["newTag"].as_str().expect("newTag")
        );
        assert!(
            listed.contains_key(&image),
            "prerequisites/snapshots: {image} is not in kustomize/sidecar-images.md"
        );
        used.insert(image);
    }
    for image in listed.keys() {
        assert!(
            used.contains(image),
            "sidecar-images.md lists {image}, which no manifest uses any more"
        );
    }
}

#[test]
fn snapshot_prerequisites_pin_the_snapshotter_release() {
    let objects = render(&kustomize_dir().join("overlays/snapshots"));
    let controller = get(&objects, "Deployment", CONTROLLER, "snapshots");
    let snapshotter = containers(controller)
        .iter()
        .find(|c| is_sidecar(c, "csi-snapshotter"))
        .expect("csi-snapshotter present");
    let (_, tag) = snapshotter["image"]
        .as_str()
        .unwrap()
        .rsplit_once(':')
        .unwrap();
    let reference = format!("?ref={tag}");

    let prerequisites = snapshot_prerequisites();
    let resources = strings(&prerequisites["resources"]);
    for dir in ["client/config/crd", "deploy/kubernetes/snapshot-controller"] {
        let url =
            format!("https://github.com/kubernetes-csi/external-snapshotter//{dir}{reference}");
        assert!(
            resources.contains(&url.as_str()),
            "prerequisites/snapshots lacks {url}: {resources:?}"
        );
    }
    assert_eq!(resources.len(), 2, "{resources:?}");
    let pinned = prerequisites["images"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == format!("{SIDECAR_REGISTRY}snapshot-controller"))
        .expect("prerequisites/snapshots pins the snapshot-controller image");
    assert_eq!(
        pinned["newTag"], tag,
        "snapshot-controller vs csi-snapshotter"
    );

    // The page that tells users what to install must name the same release.
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/snapshots.md"))
            .unwrap();
    assert!(docs.contains("kustomize/prerequisites/snapshots"));
    let mut mentions = 0;
    for marker in [
        "?ref=",
        "sig-storage/snapshot-controller:",
        "sig-storage/csi-snapshotter:",
    ] {
        for (at, _) in docs.match_indices(marker) {
            let version: String = docs[at + marker.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '.')
                .collect();
            assert_eq!(version, tag, "docs/snapshots.md: {marker}{version}");
            mentions += 1;
        }
    }
    assert!(mentions >= 3, "docs/snapshots.md names the release {tag}");
}

/// `--http-endpoint` of a container as (host, port).
fn http_endpoint(c: &Value) -> Option<(String, u64)> {
    let endpoint = flag(c, "http-endpoint")?;
    let (host, port) = endpoint
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("{}: --http-endpoint={endpoint} has no port", c["name"]));
    Some((host.to_string(), port.parse().unwrap()))
}

/// Host ports the node pod's sidecars hold (29660, 29661) and the one kept
/// for the plugin's metrics endpoint (29662): controller sidecars keep off
/// them so a port never changes meaning between the two pods.
const DRIVER_PORTS: &[u64] = &[29660, 29661, 29662];

#[test]
fn leader_electing_sidecars_serve_metrics_and_leader_election_health() {
    for (variant, objects) in variants() {
        let (variant, objects) = (variant.as_str(), objects.as_slice());
        for workload in objects
            .iter()
            .filter(|o| o["kind"] == "Deployment" || o["kind"] == "DaemonSet")
        {
            let wname = workload["metadata"]["name"].as_str().unwrap();
            let host_network = pod_spec(workload)["hostNetwork"] == true;
            // One pod, one network namespace: every listener and declared
            // port must be distinct, or a container fails to bind. The one
            // sharing allowed: the plugin declares the livenessprobe
            // sidecar's port, because a named probe port resolves against
            // the probed container.
            let probe_ports: BTreeSet<u64> = containers(workload)
                .iter()
                .filter(|c| is_sidecar(c, "livenessprobe"))
                .filter_map(http_endpoint)
                .map(|(_, port)| port)
                .collect();
            let mut ports = BTreeMap::new();
            for c in containers(workload) {
                let name = c["name"].as_str().unwrap();
                let mut own: BTreeSet<u64> = c["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| p["containerPort"].as_u64().unwrap())
                    .chain(http_endpoint(c).map(|(_, port)| port))
                    .collect();
                if name == PLUGIN {
                    own.retain(|p| !probe_ports.contains(p));
                    if let Some(address) = env_value(c, "METRICS_ADDRESS") {
                        let (_, port) = address.rsplit_once(':').expect("METRICS_ADDRESS port");
                        own.insert(port.parse().unwrap());
                    }
                }
                for port in own {
                    if let Some(other) = ports.insert(port, name) {
                        panic!("{variant} {wname}: port {port} used by {other} and {name}");
                    }
                }
            }

            for c in containers(workload).iter().filter(|c| leader_elects(c)) {
                let name = c["name"].as_str().unwrap();
                let (host, port) = http_endpoint(c)
                    .unwrap_or_else(|| panic!("{variant}: {name} has no --http-endpoint"));
                assert!(
                    flag(c, "metrics-address").is_none(),
                    "{variant}: {name}: --metrics-address excludes --http-endpoint"
                );
                assert!(
                    !DRIVER_PORTS.contains(&port),
                    "{variant}: {name} listens on the driver's port {port}"
                );
                let probe = &c["livenessProbe"]["httpGet"];
                assert_eq!(
                    probe["path"], "/healthz/leader-election",
                    "{variant}: {name} livenessProbe"
                );
                assert_eq!(
                    port_number(c, &probe["port"]),
                    port,
                    "{variant}: {name} probes another port"
                );
                // The kubelet probes the pod IP (or the given host): a
                // loopback listener in a pod network is unreachable to it.
                if host.is_empty() || host == "0.0.0.0" {
                    assert!(probe.get("host").is_none(), "{variant}: {name}");
                } else {
                    assert!(host_network, "{variant}: {name} on {host} in a pod network");
                    assert_eq!(
                        probe["host"].as_str(),
                        Some(host.as_str()),
                        "{variant}: {name}"
                    );
                }
                assert!(
                    args(c).iter().any(|a| a == "--leader-election"),
                    "{variant}: {name}: /healthz/leader-election exists only with leader election"
                );
            }
        }
    }
}

fn verbs(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|v| v.to_string()).collect()
}

#[test]
fn controller_rbac_grants_what_the_upstream_sidecars_need() {
    // From each sidecar's deploy/kubernetes/rbac.yaml at the pinned release
    // (external-snapshotter: deploy/kubernetes/csi-snapshotter/
    // rbac-csi-snapshotter.yaml), less what the driver never uses: Secrets,
    // CSIStorageCapacity, ReferenceGrants, and the pods only csi-resizer's
    // resize controller reads (it does not run without EXPAND_VOLUME).
    const PROVISIONER: &[(&str, &[&str])] = &[
        (
            "/persistentvolumes",
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        (
            "/persistentvolumeclaims",
            &["get", "list", "watch", "update"],
        ),
        ("storage.k8s.io/storageclasses", &["get", "list", "watch"]),
        ("/events", &["list", "watch", "create", "update", "patch"]),
        ("storage.k8s.io/csinodes", &["get", "list", "watch"]),
        ("/nodes", &["get", "list", "watch"]),
        (
            "storage.k8s.io/volumeattachments",
            &["get", "list", "watch"],
        ),
    ];
    const PROVISIONER_SNAPSHOTS: &[(&str, &[&str])] = &[
        (
            "snapshot.storage.k8s.io/volumesnapshots",
            &["get", "list", "watch", "update"],
        ),
        (
            "snapshot.storage.k8s.io/volumesnapshotcontents",
            &["get", "list"],
        ),
    ];
    const RESIZER: &[(&str, &[&str])] = &[
        ("/persistentvolumes", &["get", "list", "watch", "patch"]),
        ("/persistentvolumeclaims", &["get", "list", "watch"]),
        ("/persistentvolumeclaims/status", &["patch"]),
        ("/events", &["list", "watch", "create", "update", "patch"]),
        (
            "storage.k8s.io/volumeattributesclasses",
            &["get", "list", "watch"],
        ),
    ];
    const ATTACHER: &[(&str, &[&str])] = &[
        ("/persistentvolumes", &["get", "list", "watch", "patch"]),
        ("storage.k8s.io/csinodes", &["get", "list", "watch"]),
        (
            "storage.k8s.io/volumeattachments",
            &["get", "list", "watch", "patch"],
        ),
        ("storage.k8s.io/volumeattachments/status", &["patch"]),
    ];
    const SNAPSHOTTER: &[(&str, &[&str])] = &[
        ("/events", &["list", "watch", "create", "update", "patch"]),
        (
            "snapshot.storage.k8s.io/volumesnapshotclasses",
            &["get", "list", "watch"],
        ),
        (
            "snapshot.storage.k8s.io/volumesnapshotcontents",
            &["get", "list", "watch", "update", "patch"],
        ),
        (
            "snapshot.storage.k8s.io/volumesnapshotcontents/status",
            &["update", "patch"],
        ),
        // The sidecar runs with its group snapshot gate on
        // (group_snapshots_are_on_in_the_snapshotter_and_its_class).
        (
            "groupsnapshot.storage.k8s.io/volumegroupsnapshotclasses",
            &["get", "list", "watch"],
        ),
        (
            "groupsnapshot.storage.k8s.io/volumegroupsnapshotcontents",
            &["get", "list", "watch", "update", "patch"],
        ),
        (
            "groupsnapshot.storage.k8s.io/volumegroupsnapshotcontents/status",
            &["update", "patch"],
        ),
    ];
    // Exactly what upstream's csi-snapshotter role grants in the group: the
    // snapshot-controller creates and deletes group contents and binds the
    // VolumeGroupSnapshots, the sidecar only updates contents it is handed.
    const SNAPSHOTTER_GROUP: &[(&str, &[&str])] = &[
        (
            "groupsnapshot.storage.k8s.io/volumegroupsnapshotclasses",
            &["get", "list", "watch"],
        ),
        (
            "groupsnapshot.storage.k8s.io/volumegroupsnapshotcontents",
            &["get", "list", "watch", "update", "patch"],
        ),
        (
            "groupsnapshot.storage.k8s.io/volumegroupsnapshotcontents/status",
            &["update", "patch"],
        ),
    ];
    // Every upstream sidecar's leader-election Role has exactly these.
    const LEASES: &[&str] = &["get", "watch", "list", "delete", "update", "create"];

    for (variant, objects) in variants() {
        let (variant, objects) = (variant.as_str(), objects.as_slice());
        let granted = grants(&rules_for(objects, CONTROLLER));
        let controller = get(objects, "Deployment", CONTROLLER, variant);
        let runs = |repo: &str| containers(controller).iter().any(|c| is_sidecar(c, repo));
        let snapshots = runs("csi-snapshotter");
        let mut needed: Vec<(&str, &[&str])> = PROVISIONER.to_vec();
        if snapshots {
            needed.extend(PROVISIONER_SNAPSHOTS);
            needed.extend(SNAPSHOTTER);
        }
        if runs("csi-attacher") {
            needed.extend(ATTACHER);
        }
        if runs("csi-resizer") {
            needed.extend(RESIZER);
        }
        // Autogrow patches claims, and can only where the controller grows
        // directory volumes; nowhere else may it change a claim's spec.
        let grows = env_value(container(controller, PLUGIN).unwrap(), "VOLUME_EXPANSION")
            .as_deref()
            == Some("subdirectory");
        let patches_claims = granted
            .get("/persistentvolumeclaims")
            .is_some_and(|v| v.contains("patch"));
        assert_eq!(
            patches_claims, grows,
            "{variant}: patch on persistentvolumeclaims iff VOLUME_EXPANSION=subdirectory (autogrow)"
        );
        // PVC status is the resizer's to write; nothing needs pods.
        assert_eq!(
            granted.contains_key("/persistentvolumeclaims/status"),
            runs("csi-resizer"),
            "{variant}: PVC status RBAC iff csi-resizer runs"
        );
        assert!(
            !granted.contains_key("/pods"),
            "{variant}: pods are only read by the resize controller, which does not run"
        );
        for (resource, want) in needed {
            let have = granted.get(resource).cloned().unwrap_or_default();
            let missing: Vec<_> = verbs(want).difference(&have).cloned().collect();
            assert!(
                missing.is_empty(),
                "{variant}: controller lacks {missing:?} on {resource}"
            );
        }
        assert_eq!(
            granted["coordination.k8s.io/leases"],
            verbs(LEASES),
            "{variant}: lease verbs differ from the upstream sidecars' Roles"
        );
        // The cluster identity's default: get on kube-system, nothing more.
        let namespaces: Vec<Value> = rules_for(objects, CONTROLLER)
            .into_iter()
            .filter(|r| strings(&r["resources"]).contains(&"namespaces"))
            .collect();
        assert_eq!(namespaces.len(), 1, "{variant}: one namespaces rule");
        assert_eq!(strings(&namespaces[0]["verbs"]), ["get"], "{variant}");
        assert_eq!(
            strings(&namespaces[0]["resourceNames"]),
            ["kube-system"],
            "{variant}: the identity reads kube-system only"
        );
        let group: BTreeMap<&str, BTreeSet<String>> = granted
            .iter()
            .filter(|(r, _)| r.starts_with("groupsnapshot.storage.k8s.io/"))
            .map(|(r, v)| (r.as_str(), v.clone()))
            .collect();
        if snapshots {
            let upstream: BTreeMap<&str, BTreeSet<String>> = SNAPSHOTTER_GROUP
                .iter()
                .map(|(r, v)| (*r, verbs(v)))
                .collect();
            assert_eq!(
                group, upstream,
                "{variant}: group snapshot RBAC differs from upstream csi-snapshotter's \
                 (no create or delete, nothing on VolumeGroupSnapshots)"
            );
        }
        if !snapshots {
            let stray: Vec<_> = granted
                .keys()
                .filter(|r| {
                    r.starts_with("snapshot.storage.k8s.io/")
                        || r.starts_with("groupsnapshot.storage.k8s.io/")
                })
                .collect();
            assert!(
                stray.is_empty(),
                "{variant}: snapshot RBAC without snapshots: {stray:?}"
            );
        }
    }
}

/// `(kind, name)` of each object, sorted, with the object itself.
fn by_id(objects: &[Value]) -> BTreeMap<(String, String), &Value> {
    objects
        .iter()
        .map(|o| {
            let kind = o["kind"].as_str().unwrap().to_string();
            let name = o["metadata"]["name"].as_str().unwrap().to_string();
            ((kind, name), o)
        })
        .collect()
}

#[test]
fn node_image_removes_the_node_workload_and_its_rbac_and_nothing_else() {
    let node_objects: BTreeSet<(String, String)> = [
        "DaemonSet",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
    ]
    .iter()
    .map(|kind| (kind.to_string(), NODE.to_string()))
    .collect();
    let with_daemonset =
        |variant: &str| -> &[Value] { &variants().iter().find(|(v, _)| v == variant).unwrap().1 };
    let overlay = render(&kustomize_dir().join("overlays").join(NODE_IMAGE));
    let all = render_with_components(&["node-access", "snapshots", NODE_IMAGE]);
    for (variant, objects, reference) in [
        ("overlays/node-image", &overlay, with_daemonset("base")),
        (
            "all components",
            &all,
            with_daemonset("node-access+snapshots"),
        ),
    ] {
        let mut expected = by_id(reference);
        for id in &node_objects {
            assert!(
                expected.remove(id).is_some(),
                "{variant}: the reference has no {id:?}"
            );
        }
        // Everything else, the controller and the CSIDriver included, is
        // exactly what the same install with the DaemonSet renders.
        assert_eq!(by_id(objects), expected, "{variant}");
        assert!(
            rules_for(objects, NODE).is_empty(),
            "{variant}: something still binds the node service account"
        );
    }
}

#[test]
fn the_daemonset_plugin_leaves_registration_to_its_registrar() {
    // Registering from the plugin too would announce the driver twice.
    for (variant, objects) in variants() {
        let node = container(get(objects, "DaemonSet", NODE, variant), PLUGIN).unwrap();
        for var in ["KUBELET_REGISTRATION_DIR", "KUBELET_PLUGIN_ENDPOINT"] {
            assert!(
                env(node, var).is_none(),
                "{variant}: node plugin sets {var}"
            );
        }
    }
}

/// ControllerGetCapabilities of the real controller in access-policy `mode`
/// with `VOLUME_EXPANSION=expansion`.
fn advertised(mode: &str, expansion: &str) -> BTreeSet<i32> {
    let env = Setup::new()
        .env("NFS_ACCESS_POLICY_MODE", mode)
        .env("VOLUME_EXPANSION", expansion)
        .start();
    env.client
        .controller_get_capabilities(&csi::ControllerGetCapabilitiesRequest::new())
        .expect("ControllerGetCapabilities")
        .capabilities
        .iter()
        .map(|c| c.rpc().type_.value())
        .collect()
}

#[test]
fn controller_sidecars_follow_the_advertised_capabilities() {
    let mut modes: BTreeMap<(&str, &str), BTreeSet<i32>> = BTreeMap::new();
    for mode in ["space", "node"] {
        for expansion in ["off", "subdirectory"] {
            modes.insert((mode, expansion), advertised(mode, expansion));
        }
    }
    let has =
        |mode: &str, expansion: &str, rpc: Rpc| modes[&(mode, expansion)].contains(&(rpc as i32));
    for mode in ["space", "node"] {
        // What the rest of this test relies on: csi-resizer has work in
        // every mode, and without VOLUME_EXPANSION never a resize to do.
        assert!(
            has(mode, "off", Rpc::MODIFY_VOLUME),
            "{mode}: MODIFY_VOLUME"
        );
        assert!(
            !has(mode, "off", Rpc::EXPAND_VOLUME),
            "{mode}: EXPAND_VOLUME"
        );
        assert!(
            has(mode, "subdirectory", Rpc::EXPAND_VOLUME),
            "{mode}: EXPAND_VOLUME with VOLUME_EXPANSION=subdirectory"
        );
    }

    let mut renders: Vec<(String, Vec<Value>)> = variants().to_vec();
    renders.push((
        "overlays/node-image".to_string(),
        render(&kustomize_dir().join("overlays").join(NODE_IMAGE)),
    ));
    for (variant, objects) in &renders {
        let controller = get(objects, "Deployment", CONTROLLER, variant);
        let mode = env_value(
            container(controller, PLUGIN).unwrap(),
            "NFS_ACCESS_POLICY_MODE",
        )
        .unwrap_or_else(|| "space".into());
        let expansion = env_value(container(controller, PLUGIN).unwrap(), "VOLUME_EXPANSION")
            .unwrap_or_else(|| "off".into());
        let has = |rpc: Rpc| has(&mode, &expansion, rpc);
        let runs = |repo: &str| containers(controller).iter().any(|c| is_sidecar(c, repo));
        // Without the resizer a VolumeAttributesClass change on a bound PVC
        // stays pending for ever; with it and neither capability, the
        // resizer exits ("does not support resize nor modify").
        assert_eq!(
            runs("csi-resizer"),
            has(Rpc::MODIFY_VOLUME) || has(Rpc::EXPAND_VOLUME),
            "{variant}: csi-resizer vs MODIFY_VOLUME/EXPAND_VOLUME in {mode} mode"
        );
        assert_eq!(
            runs("csi-attacher"),
            has(Rpc::PUBLISH_UNPUBLISH_VOLUME),
            "{variant}: csi-attacher vs PUBLISH_UNPUBLISH_VOLUME in {mode} mode"
        );
        if runs("csi-snapshotter") {
            assert!(
                has(Rpc::CREATE_DELETE_SNAPSHOT),
                "{variant}: csi-snapshotter without CREATE_DELETE_SNAPSHOT"
            );
        }
        // Expansion is offered exactly where the directories are mounted:
        // a quota grows, and nothing else can.
        assert_eq!(
            expansion == "subdirectory",
            mounts_shares(controller),
            "{variant}: VOLUME_EXPANSION={expansion}"
        );
    }

    // The API server refuses a larger request only while
    // allowVolumeExpansion is unset or false; with it true the request is
    // accepted, and only a driver with EXPAND_VOLUME carries it out. No
    // install variant ships a class; the examples' expanding one is a
    // subdirectory class (examples_are_consistent_with_the_driver), for the
    // subdirectory component.
    for (variant, objects) in &renders {
        assert!(
            !objects.iter().any(|o| o["kind"] == "StorageClass"),
            "{variant}: a StorageClass in an install variant"
        );
    }
}

#[test]
fn the_resizer_only_modifies_and_sends_the_class_parameters_alone() {
    for (variant, objects) in variants() {
        let (variant, objects) = (variant.as_str(), objects.as_slice());
        let controller = get(objects, "Deployment", CONTROLLER, variant);
        let sidecar = |repo: &str| {
            containers(controller)
                .iter()
                .find(|c| is_sidecar(c, repo))
                .unwrap_or_else(|| panic!("{variant}: no {repo}"))
        };
        let resizer = sidecar("csi-resizer");
        // A squash change waits for the policy like a create waits for the
        // filesystem: the same bound as the provisioner's.
        assert_eq!(
            flag(resizer, "timeout"),
            flag(sidecar("csi-provisioner"), "timeout"),
            "{variant}: resizer --timeout"
        );
        // --extra-modify-metadata adds csi.storage.k8s.io/pv/name and pvc/*
        // to the mutable parameters, and the driver refuses unknown mutable
        // keys (InvalidArgument): every modification would fail.
        assert!(
            !args(resizer)
                .iter()
                .any(|a| a == "--extra-modify-metadata" || a == "--extra-modify-metadata=true"),
            "{variant}: csi-resizer --extra-modify-metadata"
        );
        // VolumeAttributesClass is GA and on by default in the pinned
        // resizer; switching it off leaves only a resize controller, which
        // has nothing to do here.
        if let Some(gates) = flag(resizer, "feature-gates") {
            assert!(
                !gates.contains("VolumeAttributesClass=false"),
                "{variant}: csi-resizer --feature-gates={gates}"
            );
        }
        if let Some(gates) = flag(sidecar("csi-provisioner"), "feature-gates") {
            assert!(
                !gates.contains("VolumeAttributesClass=false"),
                "{variant}: csi-provisioner --feature-gates={gates}"
            );
        }
    }
}

/// Rows of the ports table in docs/installation.md: (pod, container,
/// address), the container without its parenthesised note.
fn documented_ports() -> BTreeSet<(String, String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/installation.md");
    let text = std::fs::read_to_string(path).expect("docs/installation.md");
    let table = text
        .split("\n## Ports\n")
        .nth(1)
        .expect("docs/installation.md has a Ports section");
    table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            let first_word = |cell: &str| cell.split_whitespace().next().unwrap_or("").to_string();
            (
                first_word(cells[0]),
                first_word(cells[1]),
                cells[2].trim_matches('`').to_string(),
            )
        })
        .collect()
}

#[test]
fn every_listener_is_in_the_documented_ports_table() {
    let documented = documented_ports();
    assert!(!documented.is_empty(), "no rows in the ports table");
    for (variant, objects) in variants() {
        for (kind, name, pod) in [
            ("Deployment", CONTROLLER, "controller"),
            ("DaemonSet", NODE, "node"),
        ] {
            let workload = get(objects, kind, name, variant);
            for c in containers(workload) {
                let Some(endpoint) = flag(c, "http-endpoint") else {
                    continue;
                };
                let row = (
                    pod.to_string(),
                    c["name"].as_str().unwrap().to_string(),
                    endpoint.clone(),
                );
                assert!(
                    documented.contains(&row),
                    "{variant}: {name}/{} listens on {endpoint}, which docs/installation.md#ports \
                     does not list: {documented:?}",
                    c["name"]
                );
            }
        }
    }
}

#[test]
fn the_attacher_re_sync_interval_is_the_documented_one() {
    let docs = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/access-policy-modes.md"),
    )
    .unwrap();
    let mut seen = 0;
    for (variant, objects) in variants() {
        let controller = get(objects, "Deployment", CONTROLLER, variant);
        let Some(attacher) = containers(controller)
            .iter()
            .find(|c| is_sidecar(c, "csi-attacher"))
        else {
            continue;
        };
        seen += 1;
        let interval = flag(attacher, "reconcile-sync").unwrap_or_else(|| {
            panic!("{variant}: csi-attacher keeps upstream's 1m --reconcile-sync")
        });
        // Every pass lists every volume's access policy: more often than
        // every few minutes spends the token's budget on re-reads.
        let minutes: u64 = interval
            .strip_suffix('m')
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("{variant}: --reconcile-sync={interval} is not in minutes"));
        assert!(minutes >= 5, "{variant}: --reconcile-sync={interval}");
        let documented = format!("--reconcile-sync={interval}");
        assert!(
            docs.contains(&documented),
            "{variant}: docs/access-policy-modes.md does not name {documented}"
        );
    }
    assert!(seen > 0, "no variant runs csi-attacher");
}

#[test]
fn client_go_sidecars_carry_the_documented_api_server_budget() {
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/installation.md"))
            .unwrap();
    let (qps, burst) = ("50", "100");
    let documented = format!("--kube-api-qps={qps} --kube-api-burst={burst}");
    assert!(
        docs.contains(&documented),
        "docs/installation.md does not name {documented}"
    );
    let mut seen = BTreeSet::new();
    for (variant, objects) in variants() {
        let controller = get(objects, "Deployment", CONTROLLER, variant);
        for c in containers(controller) {
            let Some(repo) = LEADER_ELECTING.iter().find(|r| is_sidecar(c, r)) else {
                continue;
            };
            seen.insert(*repo);
            // Upstream's client-go default (5/s, burst 10) paces bulk
            // provisioning far below what the plugin answers.
            assert_eq!(
                flag(c, "kube-api-qps").as_deref(),
                Some(qps),
                "{variant}: {repo} --kube-api-qps"
            );
            assert_eq!(
                flag(c, "kube-api-burst").as_deref(),
                Some(burst),
                "{variant}: {repo} --kube-api-burst"
            );
            assert!(
                docs.contains(&format!("| {repo}")),
                "docs/installation.md#sidecar-flags has no row for {repo}"
            );
        }
    }
    assert_eq!(
        seen.len(),
        LEADER_ELECTING.len(),
        "some variant runs each client-go sidecar: {seen:?}"
    );
}
