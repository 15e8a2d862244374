use super::quirks::{parse_quirks, QUIRK_NAMES};
use super::*;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<Command, ConfigError> {
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    from_args_and_env(&args, |k| env.get(k).cloned())
}

fn config(args: &[&str], env: &[(&str, &str)]) -> Config {
    match parse(args, env) {
        Ok(Command::Serve(c)) => *c,
        other => panic!("expected a config, got {other:?}"),
    }
}

/// `parse` refuses `args` and `env` with a message naming `setting` first.
fn refused(args: &[&str], env: &[(&str, &str)], setting: &str) -> ConfigError {
    let err = parse(args, env).unwrap_err();
    assert!(err.message.starts_with(setting), "{}", err.message);
    err
}

#[test]
fn durations() {
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
    assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
    assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
    for bad in [
        "",
        "10",
        "s",
        "1.5s",
        "-1s",
        "10 s",
        "3d",
        "99999999999999999999h",
    ] {
        assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
    }
}

#[test]
fn endpoints() {
    assert_eq!(
        parse_endpoint("unix:///csi/csi.sock"),
        Ok(Endpoint::Unix("/csi/csi.sock".into()))
    );
    assert_eq!(
        parse_endpoint("tcp://127.0.0.1:10000"),
        Ok(Endpoint::Tcp("127.0.0.1:10000".into()))
    );
    assert_eq!(
        parse_endpoint("tcp://[::1]:10000"),
        Ok(Endpoint::Tcp("[::1]:10000".into()))
    );
    for bad in [
        "unix://relative",
        "unix:///",
        "/csi/csi.sock",
        "http://x:1",
        "tcp://host",
        "tcp://:80",
        "tcp://h:99999",
    ] {
        assert!(parse_endpoint(bad).is_err(), "{bad:?} should be rejected");
    }
}

#[test]
fn urls_need_a_scheme_and_a_host() {
    assert_eq!(
        parse_url("https://api.linode.com/"),
        Ok("https://api.linode.com".into())
    );
    assert_eq!(
        parse_url("http://169.254.169.254"),
        Ok("http://169.254.169.254".into())
    );
    for bad in [
        "169.254.169.254",
        "ftp://x",
        "https://",
        "http:///x",
        "https://a b",
    ] {
        assert!(parse_url(bad).is_err(), "{bad:?} should be rejected");
    }
    let node = [("DRIVER_ROLE", "node"), ("NODE_NAME", "n")];
    refused(
        &["--metadata-url", "169.254.169.254"],
        &node,
        "METADATA_URL: ",
    );
    refused(
        &[],
        &[
            ("DRIVER_ROLE", "controller"),
            ("LINODE_TOKEN", "t"),
            ("LINODE_URL", "api.linode.com"),
        ],
        "LINODE_URL: ",
    );
}

#[test]
fn zero_timeouts_are_refused_but_a_zero_grace_is_not() {
    let controller = [("DRIVER_ROLE", "controller"), ("LINODE_TOKEN", "t")];
    for var in [
        "LINODE_WAIT_TIMEOUT",
        "LINODE_REQUEST_TIMEOUT",
        "NFS_MOUNT_TIMEOUT",
    ] {
        let mut env = controller.to_vec();
        env.push((var, "0s"));
        let err = parse(&[], &env).unwrap_err();
        assert_eq!(err.message, format!("{var}: must be greater than zero"));
    }
    let mut env = controller.to_vec();
    env.push(("SHUTDOWN_GRACE", "0s"));
    assert_eq!(config(&[], &env).shutdown_grace, Duration::ZERO);
}

#[test]
fn the_token_has_no_flag_and_the_log_filter_has_one() {
    let err = refused(
        &["controller", "--linode-token", "secret-value"],
        &[],
        "LINODE_TOKEN: ",
    );
    assert!(!err.message.contains("secret-value"));
    let node = [
        ("DRIVER_ROLE", "node"),
        ("NODE_NAME", "n"),
        ("RUST_LOG", "warn"),
    ];
    assert_eq!(config(&[], &node).log_filter, "warn");
    assert_eq!(config(&["--rust-log=debug"], &node).log_filter, "debug");
}

#[test]
fn metrics_addresses() {
    let ok = |raw: &str| parse_listen_address(raw).unwrap().to_string();
    assert_eq!(ok("127.0.0.1:29662"), "127.0.0.1:29662");
    assert_eq!(ok(":29662"), ":29662");
    assert_eq!(ok("[::1]:29662"), "[::1]:29662");
    assert_eq!(ok("fd00::5:29662"), "[fd00::5]:29662");
    assert_eq!(ok("0.0.0.0:0"), "0.0.0.0:0");
    for bad in [
        "29662",
        "localhost:29662",
        "1.2.3.4",
        ":",
        ":99999",
        "1.2.3.4:x",
        "[::1]",
    ] {
        assert!(
            parse_listen_address(bad).is_err(),
            "{bad:?} should be rejected"
        );
    }
    let node = [("DRIVER_ROLE", "node"), ("NODE_NAME", "n")];
    assert_eq!(config(&[], &node).metrics_address, None);
    let on = config(&["--metrics-address", ":29662"], &node);
    assert_eq!(
        on.metrics_address,
        Some(ListenAddress {
            ip: None,
            port: 29662
        })
    );
    refused(
        &["--metrics-address=localhost:1"],
        &node,
        "METRICS_ADDRESS: ",
    );
}

#[test]
fn quantities() {
    assert_eq!(parse_quantity("10Gi"), Ok(10 << 30));
    assert_eq!(parse_quantity("1048576"), Ok(1 << 20));
    assert!(parse_quantity("0").is_err());
    assert!(parse_quantity("10G").is_err());
}

#[test]
fn roles() {
    assert_eq!(
        config(&[], &[("DRIVER_ROLE", "controller"), ("LINODE_TOKEN", "t")]).role,
        Role::Controller
    );
    assert_eq!(
        config(&[], &[("DRIVER_ROLE", "node"), ("NODE_NAME", "n1")]).role,
        Role::Node
    );
    let dev = config(&["dev"], &[("DEV_STATE_DIR", "/tmp/devstate")]);
    assert_eq!(dev.role, Role::Dev);
    assert_eq!(
        dev.endpoint,
        Endpoint::Unix("/tmp/devstate/csi.sock".into())
    );
    let err = parse(&[], &[("DRIVER_ROLE", "both")]).unwrap_err();
    assert_eq!(
        err,
        ConfigError {
            message: "invalid driver role \"both\"".into(),
            exit_code: 2
        }
    );
    assert_eq!(parse(&[], &[]).unwrap_err().exit_code, 2);
}

#[test]
fn role_requirements_name_the_variable() {
    refused(&[], &[("DRIVER_ROLE", "controller")], "LINODE_TOKEN");
    refused(&[], &[("DRIVER_ROLE", "node")], "NODE_NAME");
    refused(
        &[],
        &[
            ("DRIVER_ROLE", "node"),
            ("NODE_NAME", "n"),
            ("CSI_ENDPOINT", "csi.sock"),
        ],
        "CSI_ENDPOINT",
    );
    refused(
        &[],
        &[
            ("DRIVER_ROLE", "node"),
            ("NODE_NAME", "n"),
            ("NFS_MOUNT_TIMEOUT", "2"),
        ],
        "NFS_MOUNT_TIMEOUT",
    );
}

#[test]
fn the_node_never_holds_the_token() {
    let c = config(
        &[],
        &[
            ("DRIVER_ROLE", "node"),
            ("NODE_NAME", "n"),
            ("LINODE_TOKEN", "secret"),
        ],
    );
    assert!(c.linode.is_none());
}

#[test]
fn flags_override_env_and_debug_hides_the_token() {
    let c = config(
        &[
            "--csi-endpoint=tcp://127.0.0.1:9",
            "--linode-wait-timeout",
            "1m",
        ],
        &[
            ("DRIVER_ROLE", "controller"),
            ("LINODE_TOKEN", "s3cr3t"),
            ("CSI_ENDPOINT", "unix:///x/y"),
        ],
    );
    assert_eq!(c.endpoint, Endpoint::Tcp("127.0.0.1:9".into()));
    assert_eq!(c.wait_timeout, Duration::from_secs(60));
    assert!(!format!("{c:?}").contains("s3cr3t"));
    assert!(parse(&["--no-such-flag=1"], &[]).is_err());
}

#[test]
fn the_client_dials_its_flag_then_csi_endpoint_then_the_dev_socket() {
    let env = |k: &str| (k == "CSI_ENDPOINT").then(|| "unix:///from/env".to_string());
    assert_eq!(
        client_endpoint(Some("tcp://h:1".into()), env),
        Ok(Endpoint::Tcp("h:1".into()))
    );
    assert_eq!(
        client_endpoint(None, env),
        Ok(Endpoint::Unix("/from/env".into()))
    );
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(
        client_endpoint(None, |_| None),
        Ok(Endpoint::Unix(cwd.join("dev/csi.sock")))
    );
    assert!(client_endpoint(Some("csi.sock".into()), |_| None).is_err());
}

#[test]
fn the_in_cluster_api_server_comes_from_the_service_variables() {
    let controller = [("DRIVER_ROLE", "controller"), ("LINODE_TOKEN", "t")];
    assert_eq!(config(&[], &controller).kube_service, None);
    let with = |host: &str| {
        let mut env = controller.to_vec();
        env.extend([
            ("KUBERNETES_SERVICE_HOST", host),
            ("KUBERNETES_SERVICE_PORT", "443"),
        ]);
        config(&[], &env).kube_service
    };
    assert_eq!(with("10.0.0.1").as_deref(), Some("https://10.0.0.1:443"));
    assert_eq!(with("fd00::1").as_deref(), Some("https://[fd00::1]:443"));
}

#[test]
fn defaults() {
    let c = config(&[], &[("DRIVER_ROLE", "controller"), ("LINODE_TOKEN", "t")]);
    assert_eq!(c.endpoint, Endpoint::Unix("/csi/csi.sock".into()));
    let l = c.linode.unwrap();
    assert_eq!(
        (l.url.as_str(), l.api_version.as_str()),
        ("https://api.linode.com", "v4beta")
    );
    assert_eq!(l.request_timeout, Duration::from_secs(10));
    assert_eq!(c.wait_timeout, Duration::from_secs(300));
    assert_eq!(c.access_policy_mode, AccessPolicyMode::Space);
    assert_eq!(c.worker_threads, 8);
    assert_eq!(c.space_cache_ttl, Duration::from_secs(60));
    assert_eq!(c.maintenance_interval, Duration::from_secs(60));
    assert_eq!(c.pool_empty_grace, Duration::from_secs(600));
    assert_eq!(c.metadata_url, "http://169.254.169.254");
}

#[test]
fn kubelet_registration_announces_the_csi_socket_unless_overridden() {
    let node = [
        ("DRIVER_ROLE", "node"),
        ("NODE_NAME", "n"),
        ("CSI_ENDPOINT", "unix:///var/lib/kubelet/plugins/d/csi.sock"),
    ];
    assert_eq!(config(&[], &node).registration, None);
    let on = config(
        &["--kubelet-registration-dir=/var/lib/kubelet/plugins_registry/"],
        &node,
    );
    assert_eq!(
        on.registration,
        Some(RegistrationConfig {
            dir: "/var/lib/kubelet/plugins_registry".into(),
            endpoint: "/var/lib/kubelet/plugins/d/csi.sock".into(),
        })
    );
    for announced in [
        "/host/plugins/d/csi.sock",
        "unix:///host/plugins/d/csi.sock",
    ] {
        let mut env = node.to_vec();
        env.push(("KUBELET_REGISTRATION_DIR", "/registration"));
        env.push(("KUBELET_PLUGIN_ENDPOINT", announced));
        let r = config(&[], &env).registration.unwrap();
        assert_eq!(r.endpoint, PathBuf::from("/host/plugins/d/csi.sock"));
    }
    let dev = config(&["dev", "--kubelet-registration-dir", "/tmp/reg"], &[]);
    assert_eq!(dev.registration.unwrap().dir, PathBuf::from("/tmp/reg"));
}

#[test]
fn kubelet_registration_mistakes_name_the_variable() {
    let node = [("DRIVER_ROLE", "node"), ("NODE_NAME", "n")];
    let refused_with = |extra: &[(&'static str, &'static str)], says: &str| {
        let mut env = node.to_vec();
        env.extend_from_slice(extra);
        let m = parse(&[], &env).unwrap_err().message;
        assert!(m.starts_with(says), "{m}");
    };
    refused_with(
        &[("KUBELET_REGISTRATION_DIR", "plugins_registry")],
        "KUBELET_REGISTRATION_DIR: want an absolute",
    );
    refused_with(
        &[("KUBELET_PLUGIN_ENDPOINT", "/csi/csi.sock")],
        "KUBELET_PLUGIN_ENDPOINT: only used with",
    );
    for (extra, says) in [
        (
            ("KUBELET_PLUGIN_ENDPOINT", "csi.sock"),
            "KUBELET_PLUGIN_ENDPOINT: invalid endpoint",
        ),
        (
            ("CSI_ENDPOINT", "tcp://127.0.0.1:10000"),
            "KUBELET_REGISTRATION_DIR: kubelet dials unix sockets only",
        ),
    ] {
        refused_with(
            &[("KUBELET_REGISTRATION_DIR", "/registration"), extra],
            says,
        );
    }
    let mut env = node.to_vec();
    env.extend_from_slice(&[
        ("KUBELET_REGISTRATION_DIR", "/registration"),
        ("CSI_ENDPOINT", "tcp://127.0.0.1:10000"),
        ("KUBELET_PLUGIN_ENDPOINT", "/proxy/csi.sock"),
    ]);
    assert_eq!(
        config(&[], &env).registration.unwrap().endpoint,
        PathBuf::from("/proxy/csi.sock")
    );
    let err = parse(
        &[],
        &[
            ("DRIVER_ROLE", "controller"),
            ("LINODE_TOKEN", "t"),
            ("KUBELET_REGISTRATION_DIR", "/registration"),
        ],
    )
    .unwrap_err();
    assert!(
        err.message
            .starts_with("KUBELET_REGISTRATION_DIR: only the node and dev"),
        "{}",
        err.message
    );
}

#[test]
fn the_notify_socket_comes_from_the_environment_only() {
    let node = [
        ("DRIVER_ROLE", "node"),
        ("NODE_NAME", "n"),
        ("NOTIFY_SOCKET", "@sd-notify"),
    ];
    assert_eq!(
        config(&[], &node).notify_socket.as_deref(),
        Some("@sd-notify")
    );
    assert!(parse(&["--notify-socket=/run/x"], &node).is_err());
}

#[test]
fn help_and_version() {
    assert!(matches!(parse(&["--help"], &[]), Ok(Command::Help)));
    assert!(matches!(parse(&["--version"], &[]), Ok(Command::Version)));
    for s in documented() {
        assert!(help_text().contains(s.var));
    }
}

#[test]
fn dev_rate_limits() {
    let limits = |raw: &str| {
        config(&["dev"], &[("DEV_RATE_LIMITS", raw)])
            .dev
            .unwrap()
            .rate_limits
    };
    assert_eq!(limits(""), None);
    assert_eq!(
        limits("list:200,other:400,window:60s"),
        Some(DevRateLimits {
            list: 200,
            other: 400,
            window: Duration::from_secs(60)
        })
    );
    assert_eq!(
        limits(" other:40 , list:20 "),
        Some(DevRateLimits {
            list: 20,
            other: 40,
            window: Duration::from_secs(60)
        })
    );
    assert_eq!(
        limits("list:20,other:40,window:2s").unwrap().window,
        Duration::from_secs(2)
    );
    for bad in [
        "list:20",
        "other:40",
        "list:0,other:40",
        "list:x,other:40",
        "list:20,other:40,window:0s",
        "list:20,other:40,window:2",
        "list:20,other:40,burst:3",
        "list=20,other:40",
    ] {
        let err = parse(&["dev"], &[("DEV_RATE_LIMITS", bad)]).unwrap_err();
        assert!(
            err.message.starts_with("DEV_RATE_LIMITS: "),
            "{bad:?}: {}",
            err.message
        );
    }
}

#[test]
fn quirk_lists_combine_and_reject_contradictions() {
    assert_eq!(
        parse_quirks(" tag-filter-ignored,null-fields , capacity-in-stats,html-errors,"),
        Ok(vec![
            DevQuirk::TagFilterIgnored,
            DevQuirk::NullFields,
            DevQuirk::CapacityInStats,
            DevQuirk::HtmlErrors,
        ])
    );
    assert_eq!(parse_quirks(""), Ok(vec![]));
    for (name, quirk) in QUIRK_NAMES {
        assert_eq!(parse_quirks(name), Ok(vec![quirk]));
    }
    let unknown = parse_quirks("no-id-filter,nulls").unwrap_err();
    assert!(unknown.contains("\"nulls\"") && unknown.contains("foreign-filesystems"));
    assert!(parse_quirks("tag-filter-refused,tag-filter-ignored").is_err());
}

#[test]
fn the_restore_quirks_parse_and_combine_with_every_other() {
    assert_eq!(
        parse_quirks("slow-clones, snapshot-directory"),
        Ok(vec![DevQuirk::SlowClones, DevQuirk::SnapshotDirectory])
    );
    // Neither contradicts another quirk: a backend may be slow to clone,
    // show its snapshots, and differ in any other way too.
    for (name, _) in QUIRK_NAMES {
        for with in ["slow-clones", "snapshot-directory"] {
            let list = format!("{with},{name}");
            assert!(parse_quirks(&list).is_ok(), "{list}");
        }
    }
    // A misspelling is answered with the list, these two in it.
    let e = parse_quirks("slow-clone").unwrap_err();
    for name in ["slow-clones", "snapshot-directory"] {
        assert!(e.contains(name), "{e}");
    }
}

#[test]
fn volume_expansion_and_the_share_mount_dir() {
    let controller = [("DRIVER_ROLE", "controller"), ("LINODE_TOKEN", "t")];
    let c = config(&[], &controller);
    assert_eq!(c.volume_expansion, VolumeExpansion::Off);
    assert_eq!(
        c.share_mount_dir,
        PathBuf::from("/var/lib/linode-nfs-csi/shares")
    );
    let c = config(
        &["--volume-expansion", "subdirectory"],
        &[
            ("SHARE_MOUNT_DIR", "/srv/shares/"),
            controller[0],
            controller[1],
        ],
    );
    assert_eq!(c.volume_expansion, VolumeExpansion::Subdirectory);
    assert_eq!(c.share_mount_dir, PathBuf::from("/srv/shares"));
    let dev = config(&[], &[("DRIVER_ROLE", "dev"), ("DEV_STATE_DIR", "/tmp/st")]);
    assert_eq!(dev.share_mount_dir, PathBuf::from("/tmp/st/shares"));
    for (var, bad) in [("VOLUME_EXPANSION", "on"), ("SHARE_MOUNT_DIR", "rel/dir")] {
        refused(&[], &[controller[0], controller[1], (var, bad)], var);
    }
}

#[test]
fn the_token_may_come_from_a_file_read_at_start() {
    let dir = crate::test_support::Scratch::new("config-token-file");
    let file = dir.join("token");
    std::fs::write(&file, "  from-the-file \n").unwrap();
    let path = file.to_string_lossy().into_owned();
    let c = config(&["controller", "--linode-token-file", &path], &[]);
    let linode = c.linode.unwrap();
    assert_eq!(linode.token.expose(), "from-the-file");
    assert_eq!(linode.token_file.as_deref(), Some(file.as_path()));

    let both = [("LINODE_TOKEN", "t"), ("LINODE_TOKEN_FILE", path.as_str())];
    refused(&["controller"], &both, "LINODE_TOKEN_FILE: ");

    for (content, why) in [("", "holds no token"), (" \n\t", "holds no token")] {
        std::fs::write(&file, content).unwrap();
        let err = refused(
            &["controller"],
            &[("LINODE_TOKEN_FILE", path.as_str())],
            "LINODE_TOKEN_FILE: ",
        );
        assert!(
            err.message.contains(why) && !err.message.contains('\n'),
            "{}",
            err.message
        );
    }
    let missing = dir.join("missing").to_string_lossy().into_owned();
    let err = parse(&["controller"], &[("LINODE_TOKEN_FILE", missing.as_str())]).unwrap_err();
    assert!(err.message.contains("cannot read"), "{}", err.message);
    refused(&["controller"], &[], "LINODE_TOKEN: ");
}
