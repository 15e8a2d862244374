//! What a caller can get wrong on the controller: oversized names and maps
//! are InvalidArgument before any backend call, and neither the Linode
//! token nor any CSI secret reaches a log line (at trace level) or an error,
//! over a whole lifecycle with every RPC that takes secrets.

mod common;

use common::controller::*;
use common::requests::*;
use common::rpc::*;
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::fake::FaultRule;
use linode_nfs_csi::proto::csi;
use std::collections::HashMap;

fn huge_map(entries: usize) -> HashMap<String, String> {
    (0..entries)
        .map(|i| (format!("key-{i}"), "value".to_string()))
        .collect()
}

#[test]
fn oversized_inputs_are_invalid_argument_before_any_backend_call() {
    let env = Setup::new().start();
    let long = "x".repeat(10_000);
    let mut named = volume_req(&long, &by_id());
    assert_eq!(err_code(env.create(&named)), Code::INVALID_ARGUMENT);
    named.name = "fine".into();
    named.parameters.extend(huge_map(3000));
    assert_eq!(err_code(env.create(&named)), Code::INVALID_ARGUMENT);
    let mut secret = volume_req("fine", &by_id());
    secret.secrets = huge_map(1000);
    assert_eq!(err_code(env.create(&secret)), Code::INVALID_ARGUMENT);
    let mut snap = snapshot_req(&long, "7/101");
    assert_eq!(
        err_code(env.client.create_snapshot(&snap)),
        Code::INVALID_ARGUMENT
    );
    snap.name = "fine".into();
    snap.parameters = huge_map(3000);
    assert_eq!(
        err_code(env.client.create_snapshot(&snap)),
        Code::INVALID_ARGUMENT
    );
    let mut validate = csi::ValidateVolumeCapabilitiesRequest::new();
    validate.volume_id = "7/101".into();
    validate.volume_capabilities = vec![mount_cap(Mode::MULTI_NODE_MULTI_WRITER)];
    validate.volume_context = huge_map(5000);
    assert_eq!(
        err_code(env.client.validate_volume_capabilities(&validate)),
        Code::INVALID_ARGUMENT
    );
    let mut capacity = csi::GetCapacityRequest::new();
    capacity.parameters = huge_map(3000);
    assert_eq!(
        err_code(env.client.get_capacity(&capacity)),
        Code::INVALID_ARGUMENT
    );
    assert!(
        env.linode.requests().is_empty(),
        "{:?}",
        env.requests_since(0)
    );
    // The message names the field and never echoes the input whole.
    let err = env.create(&volume_req(&long, &by_id())).unwrap_err();
    let message = message_of(&err);
    assert!(message.contains("volume name"), "{message}");
    assert!(message.len() < 300, "{} bytes", message.len());
    // And the driver is none the worse for it.
    env.create_ok("after-the-big-ones");
}

/// A misspelt key of the driver's prefix is refused before anything is
/// made, naming the key meant; keys of other prefixes pass.
#[test]
fn a_class_key_typo_is_invalid_argument_naming_the_key_meant() {
    let env = Setup::new().start();
    let mut typo = volume_req("pvc-typo", &by_id());
    typo.parameters
        .insert("linodenfs.csi.linode.com/on-delet".into(), "retain".into());
    let err = env.create(&typo).unwrap_err();
    assert_eq!(code_of(&err), Code::INVALID_ARGUMENT);
    assert!(
        message_of(&err).contains("did you mean linodenfs.csi.linode.com/on-delete?"),
        "{err:?}"
    );
    let mut capacity = csi::GetCapacityRequest::new();
    capacity.parameters = typo.parameters.clone();
    assert_eq!(
        err_code(env.client.get_capacity(&capacity)),
        Code::INVALID_ARGUMENT
    );
    let mut snap = snapshot_req("snap-typo", "7/101");
    snap.parameters
        .insert("linodenfs.csi.linode.com/tags".into(), "a".into());
    let err = env.client.create_snapshot(&snap).unwrap_err();
    assert_eq!(code_of(&err), Code::INVALID_ARGUMENT);
    assert!(message_of(&err).contains("VolumeSnapshotClass"), "{err:?}");
    let mut group = csi::CreateVolumeGroupSnapshotRequest::new();
    group.name = "group-typo".into();
    group.source_volume_ids = vec!["7/101".into()];
    group.parameters = snap.parameters.clone();
    let err = env
        .driver
        .groups()
        .create_volume_group_snapshot(&group)
        .unwrap_err();
    assert_eq!(code_of(&err), Code::INVALID_ARGUMENT);
    assert!(
        message_of(&err).contains("VolumeGroupSnapshotClass"),
        "{err:?}"
    );
    assert!(
        env.linode.requests().is_empty(),
        "{:?}",
        env.requests_since(0)
    );
    let mut others = volume_req("pvc-others", &by_id());
    others
        .parameters
        .insert("csi.storage.k8s.io/pvc/name".into(), "data".into());
    env.create(&others).unwrap();
}

#[test]
fn no_token_or_secret_reaches_a_trace_log_or_an_error() {
    let env = Setup::new()
        .node_mode()
        .env("RUST_LOG", "trace")
        .seed(|s| with_nodes(s, [1001]))
        .start();
    const SECRET: &str = "hunter2-secret-value";
    let secrets = || HashMap::from([("password".to_string(), SECRET.to_string())]);
    let mut errors = Vec::new();

    let mut create = volume_req("secretive", &by_id());
    create.secrets = secrets();
    let v = env.create_with(&create);
    let mut publish = csi::ControllerPublishVolumeRequest::new();
    publish.volume_id = v.volume_id.clone();
    publish.node_id = "1001".into();
    publish.volume_capability = Some(mount_cap(Mode::MULTI_NODE_MULTI_WRITER)).into();
    publish.secrets = secrets();
    env.client.controller_publish_volume(&publish).unwrap();
    let mut snap = snapshot_req("secret-snap", &v.volume_id);
    snap.secrets = secrets();
    let s = env.client.create_snapshot(&snap).unwrap().snapshot.unwrap();
    let mut restore = from_snapshot(volume_req("secret-restore", &by_id()), &s.snapshot_id);
    restore.secrets = secrets();
    env.create(&restore).unwrap();
    let mut modify = csi::ControllerModifyVolumeRequest::new();
    modify.volume_id = v.volume_id.clone();
    modify
        .mutable_parameters
        .insert(P_SQUASH.into(), "none".into());
    modify.secrets = secrets();
    env.client.controller_modify_volume(&modify).unwrap();
    // Failures are logged and answered too, the Linode's answer included.
    env.linode
        .inject(FaultRule::status("GET", FS_LIST, 401).times(1));
    errors.push(env.create(&volume_req("denied", &by_id())).unwrap_err());
    modify
        .mutable_parameters
        .insert("bogus".into(), "value".into());
    errors.push(env.client.controller_modify_volume(&modify).unwrap_err());
    let mut unpublish = csi::ControllerUnpublishVolumeRequest::new();
    unpublish.volume_id = v.volume_id.clone();
    unpublish.node_id = "1001".into();
    unpublish.secrets = secrets();
    env.client.controller_unpublish_volume(&unpublish).unwrap();
    let mut delete_snap = csi::DeleteSnapshotRequest::new();
    delete_snap.snapshot_id = s.snapshot_id.clone();
    delete_snap.secrets = secrets();
    env.client.delete_snapshot(&delete_snap).unwrap();
    let mut delete = csi::DeleteVolumeRequest::new();
    delete.volume_id = v.volume_id.clone();
    delete.secrets = secrets();
    env.client.delete_volume(&delete).unwrap();

    let log = env.driver.logs();
    assert!(
        log.contains("TRACE") || log.contains("DEBUG"),
        "not a verbose log"
    );
    assert!(log.contains("***"), "secrets are shown redacted");
    let texts = std::iter::once(("log", log.clone()))
        .chain(errors.iter().map(|e| ("error", message_of(e))));
    for (what, text) in texts {
        assert!(!text.contains(SECRET), "a secret value in the {what}");
        assert!(
            !text.contains(&env.linode.token()),
            "the Linode token in the {what}"
        );
        assert!(
            !text.contains(KUBE_TOKEN),
            "the Kubernetes token in the {what}"
        );
    }
}
