//! Foundation behaviour through the real binary: startup validation, the
//! Identity service per role, socket handling and the SIGTERM drain.

mod common;

use common::{wait_for, Driver};
use linode_nfs_csi::proto::csi;
use std::process::Command;
use std::time::Duration;

#[test]
fn identity_answers_per_role() {
    let controller = Driver::role("controller").start();
    let node = Driver::role("node").start();

    for d in [&controller, &node] {
        let info = d
            .identity()
            .get_plugin_info(&csi::GetPluginInfoRequest::new())
            .unwrap();
        assert_eq!(info.name, "linodenfs.csi.linode.com");
        assert!(
            info.vendor_version.starts_with(env!("CARGO_PKG_VERSION")),
            "{}",
            info.vendor_version
        );
        let probe = d.identity().probe(&csi::ProbeRequest::new()).unwrap();
        assert!(probe.ready.unwrap().value);
    }

    let caps = controller
        .identity()
        .get_plugin_capabilities(&csi::GetPluginCapabilitiesRequest::new())
        .unwrap();
    let services: Vec<_> = caps
        .capabilities
        .iter()
        .map(|c| c.service().type_.enum_value_or_default())
        .collect();
    // Group snapshots are served by the controller beside its own service.
    assert_eq!(
        services,
        vec![
            csi::plugin_capability::service::Type::CONTROLLER_SERVICE,
            csi::plugin_capability::service::Type::GROUP_CONTROLLER_SERVICE
        ]
    );

    let caps = node
        .identity()
        .get_plugin_capabilities(&csi::GetPluginCapabilitiesRequest::new())
        .unwrap();
    assert!(caps.capabilities.is_empty());
}

fn run_to_exit(envs: &[(&str, &str)]) -> (i32, String) {
    let out = Command::new(common::binary())
        .env_clear()
        .envs(envs.iter().copied())
        .env("CSI_ENDPOINT", "unix:///tmp/lnc-never-bound/csi.sock")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn startup_errors_name_the_problem() {
    let (code, err) = run_to_exit(&[("DRIVER_ROLE", "bogus")]);
    assert_eq!(code, 2);
    assert!(err.contains("invalid driver role \"bogus\""), "{err}");

    let (code, err) = run_to_exit(&[("DRIVER_ROLE", "controller")]);
    assert_ne!(code, 0);
    assert!(err.contains("LINODE_TOKEN"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    let (code, err) = run_to_exit(&[("DRIVER_ROLE", "node")]);
    assert_ne!(code, 0);
    assert!(err.contains("NODE_NAME"), "{err}");

    let (code, err) = run_to_exit(&[
        ("DRIVER_ROLE", "node"),
        ("NODE_NAME", "n"),
        ("WORKER_THREADS", "lots"),
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("WORKER_THREADS"), "{err}");

    // A node works without Kubernetes, but not with a KUBECONFIG that the
    // admin set and that does not work.
    let (code, err) = run_to_exit(&[
        ("DRIVER_ROLE", "node"),
        ("NODE_NAME", "n"),
        ("KUBECONFIG", "/nonexistent/kubeconfig"),
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("KUBECONFIG: "), "{err}");
}

#[test]
fn help_and_version_exit_zero() {
    let out = Command::new(common::binary())
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("CSI_ENDPOINT"));
    let out = Command::new(common::binary())
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn stale_socket_is_replaced_and_sigterm_cleans_up() {
    let dir = common::TempDir::new("stale");
    let path = dir.join("run/csi.sock");
    let endpoint = format!("unix://{}", path.display());
    let mut killed = Driver::role("node")
        .env("CSI_ENDPOINT", endpoint.clone())
        .spawn();
    killed.socket = path.clone();
    killed.wait_ready();
    // SIGKILL leaves the socket file behind, as a crashed driver would.
    drop(killed);
    assert!(path.exists());

    let mut d = Driver::role("node").env("CSI_ENDPOINT", endpoint).spawn();
    d.socket = path.clone();
    d.wait_ready();
    assert!(d.logs().contains("removing stale socket"), "{}", d.logs());
    d.signal(libc::SIGTERM);
    let status = d.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{}", d.logs());
    assert!(!path.exists(), "socket left behind");
}

#[test]
fn a_regular_file_at_the_socket_path_is_not_deleted() {
    let dir = common::TempDir::new("notsock");
    let path = dir.join("csi.sock");
    std::fs::write(&path, "precious").unwrap();
    let mut d = Driver::role("node")
        .env("CSI_ENDPOINT", format!("unix://{}", path.display()))
        .spawn();
    let status = d.wait_exit(Duration::from_secs(30));
    assert!(!status.success());
    assert!(d.logs().contains("is not a socket"), "{}", d.logs());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
}

#[test]
fn tcp_endpoint_serves() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut d = Driver::role("node")
        .env("CSI_ENDPOINT", format!("tcp://127.0.0.1:{port}"))
        .spawn();
    let env = std::sync::Arc::new(grpcio::Environment::new(1));
    let ch = grpcio::ChannelBuilder::new(env).connect(&format!("127.0.0.1:{port}"));
    let client = linode_nfs_csi::proto::csi_grpc::IdentityClient::new(ch);
    wait_for("tcp probe", Duration::from_secs(30), || {
        assert!(d.try_exit().is_none(), "{}", d.logs());
        client
            .probe_opt(
                &csi::ProbeRequest::new(),
                grpcio::CallOption::default().timeout(Duration::from_secs(1)),
            )
            .is_ok()
    });
}
