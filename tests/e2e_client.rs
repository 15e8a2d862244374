//! `linode-nfs-csi client` as a user runs it against dev mode: every verb is
//! the real binary on the command line, talking to a real dev-mode driver.
//! The printed output is what is checked, and what a verb changed is read
//! back from the fake Linode state dev mode persists, never from the verb.

mod common;
mod e2e_support;

use e2e_support::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Command;

const MANAGED_TAG: &str = "csi.linodenfs.csi.linode.com";

/// `client ARGS` at `endpoint`: stdout on success, stderr on failure.
fn client_at(endpoint: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(common::binary())
        .arg("client")
        .args(["--endpoint", endpoint])
        .args(args)
        .output()
        .expect("run linode-nfs-csi client");
    let text = |b: Vec<u8>| String::from_utf8(b).expect("client output is UTF-8");
    if out.status.success() {
        Ok(text(out.stdout))
    } else {
        Err(text(out.stderr))
    }
}

fn client(dev: &Dev, args: &[&str]) -> Result<String, String> {
    client_at(&format!("unix://{}", dev.driver.socket.display()), args)
}

#[track_caller]
fn ok(dev: &Dev, args: &[&str]) -> String {
    client(dev, args).unwrap_or_else(|e| panic!("client {args:?} failed: {e}"))
}

/// The error line of a client call that must fail with `code`.
#[track_caller]
fn fails(dev: &Dev, args: &[&str], code: &str) -> String {
    match client(dev, args) {
        Ok(out) => panic!("client {args:?}: expected {code}, printed {out}"),
        Err(e) => {
            assert!(e.contains(code), "client {args:?}: expected {code}: {e}");
            e
        }
    }
}

/// The word after `key:` where it first appears.
#[track_caller]
fn field<'a>(out: &'a str, key: &str) -> &'a str {
    let key = format!("{key}:");
    let mut words = out.split_whitespace();
    words
        .find(|w| *w == key)
        .and_then(|_| words.next())
        .unwrap_or_else(|| panic!("no {key} in {out:?}"))
}

fn tags_of(fs: &Value) -> BTreeSet<String> {
    fs["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect()
}

fn squash_of(fs: &Value) -> &str {
    fs["policy"]["squash_policy"].as_str().unwrap()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn every_verb_in_help_is_a_command() {
    // No driver: verbs with required arguments stop at their usage error,
    // the others at the connection; none may be unknown.
    let endpoint = "unix:///nonexistent/lnc-e2e-client/csi.sock";
    let help = client_at(endpoint, &["--help"]).expect("client --help");
    let verbs: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for verb in [
        "list-volumes",
        "capacity",
        "clone",
        "modify",
        "get-snapshot",
        "create-volume",
        "expand",
    ] {
        assert!(verbs.contains(&verb), "--help lacks {verb}: {help}");
    }
    for verb in &verbs {
        let err = client_at(endpoint, &[verb]).expect_err(verb);
        assert!(!err.contains("unknown command"), "{verb}: {err}");
    }
    let err = client_at(endpoint, &["no-such-verb"]).expect_err("unknown verb");
    assert!(err.contains("unknown command"), "{err}");
    // Help of any verb prints its usage and calls nothing: the endpoint
    // does not exist, so a call would fail.
    for verb in &verbs {
        for flag in ["--help", "-h"] {
            let usage =
                client_at(endpoint, &[verb, flag]).unwrap_or_else(|e| panic!("{verb} {flag}: {e}"));
            assert!(
                usage.starts_with(&format!("Usage: linode-nfs-csi client {verb}")),
                "{verb} {flag}: {usage}"
            );
        }
    }
    let usage = client_at(endpoint, &["create-volume", "pvc-a", "--help"]).unwrap();
    assert!(usage.contains("--from-snapshot"), "{usage}");
}

/// The capabilities, create with mutable parameters, clone, modify, list
/// (one page at a time, with the published node), capacity three ways,
/// get-snapshot; then delete everything and leave nothing behind.
#[test]
fn clone_modify_list_capacity_and_get_snapshot_from_the_command_line() {
    let (state, dev) = start_dev("e2e-client", &[("NFS_ACCESS_POLICY_MODE", "node")]);

    let info = ok(&dev, &["info"]);
    for cap in [
        "LIST_VOLUMES_PUBLISHED_NODES",
        "GET_CAPACITY",
        "GET_SNAPSHOT",
        "CLONE_VOLUME",
        "MODIFY_VOLUME",
        "SINGLE_NODE_MULTI_WRITER",
    ] {
        assert!(info.contains(cap), "info lacks {cap}: {info}");
    }

    let created = ok(
        &dev,
        &[
            "create-volume",
            "pvc-src",
            "--size",
            "1Gi",
            "--tags",
            "team-a",
            "--squash",
            "all_squash",
        ],
    );
    let src = field(&created, "volume_id").to_string();
    let src_fs = filesystem_of(&src);
    let fs = state.filesystem(src_fs);
    assert_eq!(
        tags_of(&fs),
        set(&["team-a", MANAGED_TAG, common::CLUSTER_TAG]),
        "{fs}"
    );
    assert_eq!(squash_of(&fs), "all_squash", "{fs}");

    let cloned = ok(&dev, &["clone", "pvc-clone", &src, "--size", "2Gi"]);
    let clone = field(&cloned, "volume_id").to_string();
    assert_ne!(clone, src);
    assert_eq!(field(&cloned, "capacity_bytes"), (2 * GIB).to_string());
    assert!(
        cloned.contains(&format!("content_source: volume {src}\n")),
        "{cloned}"
    );
    let clone_fs = state.filesystem(filesystem_of(&clone));
    assert_eq!(clone_fs["max_capacity_bytes"], 2 * GIB);
    assert!(tags_of(&clone_fs).contains(MANAGED_TAG), "{clone_fs}");

    assert_eq!(
        ok(
            &dev,
            &["modify", &src, "--squash", "none", "--tags", "team-b,blue"]
        ),
        "modified\n"
    );
    let fs = state.filesystem(src_fs);
    assert_eq!(
        tags_of(&fs),
        set(&["team-b", "blue", MANAGED_TAG, common::CLUSTER_TAG]),
        "{fs}"
    );
    assert_eq!(squash_of(&fs), "none", "{fs}");
    fails(&dev, &["modify", &src], "INVALID_ARGUMENT");
    fails(&dev, &["modify", "1/999999", "--tags", "x"], "NOT_FOUND");

    ok(&dev, &["publish-controller", &src, NODE_ID]);
    let first = ok(&dev, &["list-volumes", "--max", "1"]);
    assert_eq!(
        first.lines().count(),
        2,
        "one volume and the token: {first}"
    );
    assert_eq!(field(&first, "volume_id"), src);
    assert_eq!(field(&first, "published_node_ids"), NODE_ID);
    assert_eq!(field(&first, "condition"), "normal");
    assert_eq!(field(&first, "next_token"), clone);
    let second = ok(&dev, &["list-volumes", "--token", &clone]);
    assert_eq!(second.lines().count(), 1, "the last page: {second}");
    assert_eq!(field(&second, "volume_id"), clone);
    assert_eq!(field(&second, "published_node_ids"), "none");
    assert_eq!(
        ok(&dev, &["list-volumes"]),
        format!("{}\n{second}", first.lines().next().unwrap())
    );
    fails(&dev, &["list-volumes", "--token", "not-a-token"], "ABORTED");

    let every = ok(&dev, &["capacity"]);
    let by_label = ok(&dev, &["capacity", "--space-label", SPACE_LABEL]);
    let by_id = ok(&dev, &["capacity", "--space-id", "1"]);
    assert_eq!(every, by_label, "the dev fake has one Space");
    assert_eq!(by_label, by_id);
    let available: i64 = field(&by_id, "available_capacity").parse().unwrap();
    let max = state.linode()["spaces"]["1"]["max_capacity_bytes"]
        .as_i64()
        .unwrap();
    assert!(available > 0 && available <= max, "{by_id} of {max}");
    fails(
        &dev,
        &["capacity", "--space-label", "no-such-space"],
        "NOT_FOUND",
    );

    let snap = ok(&dev, &["snapshot", "snap-a", &src]);
    let snap_id = field(&snap, "snapshot_id").to_string();
    let got = ok(&dev, &["get-snapshot", &snap_id]);
    assert_eq!(field(&got, "snapshot_id"), snap_id);
    assert_eq!(field(&got, "source_volume_id"), src);
    fails(
        &dev,
        &["get-snapshot", &format!("{src}/999999")],
        "NOT_FOUND",
    );

    ok(&dev, &["unpublish-controller", &src, NODE_ID]);
    ok(&dev, &["delete-snapshot", &snap_id]);
    ok(&dev, &["delete-volume", &clone]);
    ok(&dev, &["delete-volume", &src]);
    assert_eq!(ok(&dev, &["list-volumes"]), "");
    assert!(state.snapshots().is_empty(), "{:?}", state.snapshots());
}

/// `expand` is ControllerExpandVolume: without VOLUME_EXPANSION the plugin
/// does not offer it, and the client says so rather than pretending; its
/// size is required and parsed like `--size` everywhere.
#[test]
fn expand_without_volume_expansion_is_unimplemented() {
    let (state, dev) = start_dev("e2e-client-expand", &[]);
    assert!(!ok(&dev, &["info"]).contains("EXPAND_VOLUME"));
    let created = ok(&dev, &["create-volume", "pvc-fixed", "--size", "1Gi"]);
    let id = field(&created, "volume_id").to_string();
    fails(&dev, &["expand", &id, "--size", "2Gi"], "UNIMPLEMENTED");
    let err = client(&dev, &["expand", &id]).unwrap_err();
    assert!(err.contains("--size is required"), "{err}");
    let err = client(&dev, &["expand", &id, "--size", "lots"]).unwrap_err();
    assert!(
        !err.contains("UNIMPLEMENTED"),
        "refused before any call: {err}"
    );
    let fs = state.filesystem(filesystem_of(&id));
    assert_eq!(fs["max_capacity_bytes"], GIB, "{fs}");
    ok(&dev, &["delete-volume", &id]);
}

/// The README's shared-filesystem walk-through: a directory of the seeded
/// `dev-shared` filesystem, published and staged, written by one pod and
/// read by another, grown, and deleted.
#[test]
fn a_subdirectory_volume_from_the_command_line() {
    let (state, dev) = start_dev(
        "e2e-client-shared",
        &[
            ("NFS_ACCESS_POLICY_MODE", "node"),
            ("VOLUME_EXPANSION", "subdirectory"),
        ],
    );
    assert!(ok(&dev, &["info"]).contains("EXPAND_VOLUME"));
    let created = ok(
        &dev,
        &[
            "create-volume",
            "tenant-a",
            "--shared",
            "dev-shared",
            "--size",
            "1Gi",
        ],
    );
    let id = field(&created, "volume_id").to_string();
    let parts: Vec<&str> = id.split('/').collect();
    assert_eq!(parts.len(), 3, "{created}");
    assert_eq!(parts[2], "tenant-a");
    assert!(
        created.contains("context volume-type: subdirectory\n"),
        "{created}"
    );
    assert_eq!(field(&created, "capacity_bytes"), GIB.to_string());

    let staging = state.staging(&id);
    let (pod_a, pod_b) = (state.target("a", &id), state.target("b", &id));
    ok(&dev, &["publish-controller", &id, NODE_ID]);
    ok(&dev, &["stage", &id, &staging.to_string_lossy()]);
    for pod in [&pod_a, &pod_b] {
        ok(
            &dev,
            &[
                "publish",
                &id,
                &staging.to_string_lossy(),
                &pod.to_string_lossy(),
            ],
        );
    }
    dev.write(&pod_a.join("hello.txt"), "from a").unwrap();
    assert_eq!(dev.read(&pod_b.join("hello.txt")).unwrap(), "from a");

    let grown = ok(&dev, &["expand", &id, "--size", "2Gi"]);
    assert_eq!(field(&grown, "capacity_bytes"), (2 * GIB).to_string());
    assert_eq!(field(&grown, "node_expansion_required"), "false");
    let got = ok(&dev, &["get-volume", &id]);
    assert_eq!(field(&got, "capacity_bytes"), (2 * GIB).to_string());
    assert_eq!(field(&got, "published_node_ids"), NODE_ID);

    for pod in [&pod_a, &pod_b] {
        ok(&dev, &["unpublish", &id, &pod.to_string_lossy()]);
    }
    ok(&dev, &["unstage", &id, &staging.to_string_lossy()]);
    ok(&dev, &["unpublish-controller", &id, NODE_ID]);
    ok(&dev, &["delete-volume", &id]);
    assert!(!ok(&dev, &["list-volumes"]).contains(&id));
}

/// A volume of a pool the driver runs, and a group snapshot of two
/// directory volumes taken, read and deleted, as the README's table names
/// them.
#[test]
fn pool_volumes_and_group_snapshots_from_the_command_line() {
    let (state, dev) = start_dev("e2e-client-groups", &[]);
    let pooled = ok(
        &dev,
        &[
            "create-volume",
            "pvc-p",
            "--size",
            "64Mi",
            "--pool",
            "team",
            "--param",
            "linodenfs.csi.linode.com/pool-filesystem-size=1Gi",
        ],
    );
    let pool_fs: u64 = field(&pooled, "volume_id")
        .split('/')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        state
            .filesystems()
            .iter()
            .any(|(id, label, _)| *id == pool_fs
                && label.starts_with(&format!("csi-pool-{}-team-", common::CLUSTER_ID))),
        "{pooled}"
    );
    assert!(client(
        &dev,
        &[
            "create-volume",
            "x",
            "--pool",
            "team",
            "--shared",
            "dev-shared"
        ]
    )
    .unwrap_err()
    .contains("exclusive"));

    let made: Vec<String> = ["pvc-a", "pvc-b"]
        .iter()
        .map(|name| {
            let out = ok(
                &dev,
                &[
                    "create-volume",
                    name,
                    "--size",
                    "64Mi",
                    "--shared",
                    "dev-shared",
                ],
            );
            field(&out, "volume_id").to_string()
        })
        .collect();
    let group = ok(&dev, &["group-snapshot", "grp-1", &made[0], &made[1]]);
    assert!(group.starts_with("group_snapshot_id:"), "{group}");
    assert!(group.contains("ready_to_use: true"), "{group}");
    let gid = field(&group, "group_snapshot_id").to_string();
    let members: Vec<&str> = group
        .lines()
        .filter(|l| l.starts_with("  snapshot_id:"))
        .map(|l| field(l, "snapshot_id"))
        .collect();
    assert_eq!(members.len(), 2, "{group}");
    assert_eq!(ok(&dev, &["get-group-snapshot", &gid]), group);
    let mut delete = vec!["delete-group-snapshot", gid.as_str()];
    delete.extend(&members);
    assert_eq!(ok(&dev, &delete), "deleted\n");
    fails(&dev, &["get-group-snapshot", &gid], "NOT_FOUND");
}
