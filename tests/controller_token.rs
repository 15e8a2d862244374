//! The Linode token rotated under a running controller: the real binary
//! reads it from a file (`LINODE_TOKEN_FILE`, as the manifests mount the
//! Secret), and the fake Linode API accepts only the new token from the
//! moment of the rotation, in the middle of a burst of creates.

mod common;

use common::controller::*;
use common::rpc::*;
use common::{wait_for, TempDir};
use linode_nfs_csi::fake::Seed;
use std::path::Path;
use std::time::Duration;

/// Replaces the file the way kubelet updates a Secret volume: a new file
/// renamed over the old.
fn rotate_file(path: &Path, token: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, format!("{token}\n")).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn a_token_rotated_mid_burst_costs_no_create_and_no_restart() {
    let dir = TempDir::new("controller-token");
    let file = dir.join("token");
    let env = Setup::new()
        // Long enough that the creates still wait for their filesystems
        // when the rotation comes, however slow the machine.
        .seed(|s| Seed {
            activation_delay_ms: 3000,
            ..s
        })
        .token_file(&file)
        .start();
    let pid = env.driver.pid();
    env.create_ok("warm-caches");
    let answers = std::thread::scope(|s| {
        let calls: Vec<_> = (0..50)
            .map(|i| {
                let client = env.driver.controller();
                let req = volume_req(&format!("pvc-{i:02}"), &by_id());
                s.spawn(move || client.create_volume_opt(&req, call()))
            })
            .collect();
        wait_for("half the creates posted", Duration::from_secs(30), || {
            env.linode.calls("POST", FS_LIST) >= 25
        });
        rotate_file(&file, "rotated-token");
        env.linode.rotate_token("rotated-token");
        calls
            .into_iter()
            .map(|c| c.join().unwrap())
            .collect::<Vec<_>>()
    });
    for (i, answer) in answers.iter().enumerate() {
        if let Err(e) = answer {
            panic!("pvc-{i:02}: {e:?}\n{}", env.driver.logs());
        }
    }
    let refused = env
        .linode
        .requests()
        .iter()
        .filter(|r| !r.authorized)
        .count();
    assert!(refused > 0, "the rotation came while calls were in flight");
    assert!(refused <= 50, "{refused} requests refused for 50 calls");
    assert_eq!(env.driver.pid(), pid);
    assert_eq!(env.live_filesystems().len(), 51);
    // The new token is in use: nothing more is refused.
    env.create_ok("after");
    let after = env
        .linode
        .requests()
        .iter()
        .filter(|r| !r.authorized)
        .count();
    assert_eq!(after, refused);
}
