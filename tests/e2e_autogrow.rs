//! End to end for autogrow, against `linode-nfs-csi dev`: the test makes
//! the StorageClass and the claim in dev mode's fake API server over HTTP
//! (its kubeconfig), creates the volume as csi-provisioner does (with the
//! `--extra-create-metadata` parameters), writes into the volume's
//! directory on the emulated export, and plays the resizer
//! (`common::resizer` over HTTP, ControllerExpandVolume over gRPC). The fake
//! backend counts usage at most every `DEV_QUOTA_SAMPLE`, as a real one
//! does; the claim, the quota and ControllerGetVolume must agree at the
//! grown size within two upkeep rounds plus two samples.

mod common;
mod e2e_support;

use common::requests::get_volume_req;
use common::resizer::{ApiServer, Resizer};
use common::wait_for;
use e2e_support::*;
use linode_nfs_csi::identity::DRIVER_NAME;
use serde_json::json;
use std::time::{Duration, Instant};

const ROUND: Duration = Duration::from_millis(500);
const SAMPLE: Duration = Duration::from_secs(1);
const MIB: u64 = 1 << 20;

#[test]
fn a_volume_written_past_its_threshold_grows_through_its_claim_in_dev_mode() {
    let (state, dev) = start_dev(
        "e2e-autogrow",
        &[
            ("VOLUME_EXPANSION", "subdirectory"),
            ("MAINTENANCE_INTERVAL", "500ms"),
            ("DEV_QUOTA_SAMPLE", "1s"),
        ],
    );
    let api = ApiServer::from_kubeconfig(&state.path().join("kubeconfig"));
    let mut params = subdirectory_params();
    for (k, v) in [
        ("autogrow-threshold", "80"),
        ("autogrow-step", "1Gi"),
        ("autogrow-max", "2Gi"),
    ] {
        params.insert(format!("linodenfs.csi.linode.com/{k}"), v.to_string());
    }
    let class = json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "autogrow"}, "provisioner": DRIVER_NAME,
        "parameters": params, "allowVolumeExpansion": true
    });
    let (code, answer) = api.send(
        "POST",
        "/apis/storage.k8s.io/v1/storageclasses",
        Some(&class),
    );
    assert_eq!(code, 201, "{answer}");

    // The provisioner: the volume, named after the PV, for claim team/data.
    let mut req = create_req("pvc-grow", GIB);
    req.parameters = params.into_iter().collect();
    for (k, v) in [
        ("csi.storage.k8s.io/pvc/name", "data"),
        ("csi.storage.k8s.io/pvc/namespace", "team"),
        ("csi.storage.k8s.io/pv/name", "pvc-grow"),
    ] {
        req.parameters.insert(k.into(), v.into());
    }
    let volume = dev.create(&req);
    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "team"},
        "spec": {"storageClassName": "autogrow", "volumeName": "pvc-grow",
                 "accessModes": ["ReadWriteMany"],
                 "resources": {"requests": {"storage": "1Gi"}}}
    });
    let claims = "/api/v1/namespaces/team/persistentvolumeclaims";
    let (code, answer) = api.send("POST", claims, Some(&claim));
    assert_eq!(code, 201, "{answer}");
    let bound = json!({"status": {"capacity": {"storage": "1Gi"}}});
    let (code, answer) = api.send("PATCH", &format!("{claims}/data/status"), Some(&bound));
    assert_eq!(code, 200, "{answer}");

    let (shared_id, _) = state.shared_parent();
    let quota_of = || {
        state
            .quotas()
            .into_iter()
            .find(|q| q.0 == shared_id && q.1 == "/csi-volumes/pvc-grow")
            .map(|q| q.2)
    };
    assert_eq!(quota_of(), Some(GIB));
    std::thread::scope(|scope| {
        let served = vec![("team".into(), "data".into(), volume.volume_id.clone())];
        let resizer = Resizer::start(scope, &api, dev.another_controller(), served);
        // 900 MiB written (a sparse file: the backend counts its length).
        let file = std::fs::File::create(state.shared_base().join("pvc-grow/data")).unwrap();
        file.set_len(900 * MIB).unwrap();
        let written = Instant::now();
        let capacity = || {
            use common::resizer::Claims;
            api.read("team", "data").and_then(|c| c.capacity)
        };
        wait_for("the claim at 2 GiB", Duration::from_secs(30), || {
            capacity() == Some(2 * GIB)
        });
        let took = written.elapsed();
        eprintln!("autogrow in dev mode: 900 MiB written to 2 GiB in force in {took:?}");
        assert!(
            took <= ROUND * 2 + SAMPLE * 2,
            "took {took:?}, more than two rounds plus two samples\n{}",
            dev.driver.logs()
        );
        assert_eq!(quota_of(), Some(2 * GIB));
        let described = dev
            .controller
            .controller_get_volume(&get_volume_req(&volume.volume_id))
            .unwrap();
        assert_eq!(described.volume.unwrap().capacity_bytes, 2 * GIB);
        assert_eq!(resizer.expansions(), 1);
    });
    let (_, claim) = api.send("GET", &format!("{claims}/data"), None);
    assert_eq!(
        claim["spec"]["resources"]["requests"]["storage"],
        "2147483648"
    );
}
