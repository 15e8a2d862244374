//! Process restarts. A controller killed (SIGKILL) while CreateVolume waits
//! for a slow backend leaves its filesystem behind in the backend; the next
//! process on the same state must hand the retried CreateVolume that same
//! filesystem, never a second one. And SIGTERM on a dev process with live
//! mounts exits 0 having unmounted everything and removed its state dir.

mod common;
mod e2e_support;

use e2e_support::*;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

#[test]
fn kill_mid_create_volume_then_retry_returns_the_same_volume() {
    let state = StateDir::new("e2e-kill");
    // The filesystem stays `creating` long enough to kill the driver while
    // CreateVolume waits for it.
    let mut first = Dev::start(&state, &[("DEV_ACTIVATION_DELAY", "5s")]);
    let req = create_req("pvc-killed", GIB);
    let controller = first.another_controller();
    let pending = {
        let req = req.clone();
        std::thread::spawn(move || controller.create_volume_opt(&req, call()))
    };
    eventually(
        "the fake to hold the new filesystem",
        Duration::from_secs(10),
        || state.filesystems().len() == 1,
    );
    let (fs_id, label, phase) = state.filesystems().remove(0);
    assert_eq!(
        (label.as_str(), phase.as_str()),
        ("pvc-killed", "Creating"),
        "killed too late to prove anything"
    );
    first.driver.signal(libc::SIGKILL);
    let status = first.driver.wait_exit(Duration::from_secs(10));
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    let lost = pending.join().unwrap();
    assert!(
        lost.is_err(),
        "CreateVolume answered although the process was killed: {lost:?}"
    );
    assert!(
        state.path().join("linode.json").exists(),
        "SIGKILL leaves the state dir (by design)"
    );
    drop(first);

    let second = Dev::start(&state, &[("DEV_ACTIVATION_DELAY", "5s")]);
    let volume = retry(|| second.controller.create_volume_opt(&req, call()))
        .unwrap()
        .volume
        .unwrap();
    assert_eq!(
        volume.volume_id,
        format!("1/{fs_id}"),
        "the retry did not adopt the filesystem"
    );
    assert_eq!(
        state.filesystems(),
        vec![(fs_id, "pvc-killed".to_string(), "Active".to_string())]
    );
    let again = retry(|| second.controller.create_volume_opt(&req, call()))
        .unwrap()
        .volume
        .unwrap();
    assert_eq!(again, volume);

    // The restarted process serves the adopted volume like any other.
    let staging = state.staging(&volume.volume_id);
    let pod = state.target("pod", &volume.volume_id);
    mount(&second, &volume, &staging, &[&pod]);
    second.write(&pod.join("after-restart"), "ok").unwrap();
    assert_eq!(second.read(&staging.join("after-restart")).unwrap(), "ok");
    unmount(&second, &volume.volume_id, &staging, &[&pod]);
    delete_volume(&second, &volume.volume_id);
    assert!(state.filesystems().is_empty());
}

/// What the provisioner sees when the controller is killed with a hundred
/// creates posted and still `creating`: every call fails, it retries them
/// all against the next process, and each retry adopts its filesystem.
#[test]
fn kill_with_a_hundred_creates_in_flight_then_every_retry_adopts_its_filesystem() {
    const N: usize = 100;
    let state = StateDir::new("e2e-kill-100");
    let envs = [("DEV_ACTIVATION_DELAY", "30s")];
    let mut first = Dev::start(&state, &envs);
    let reqs: Vec<_> = (0..N)
        .map(|i| create_req(&format!("pvc-inflight-{i:03}"), GIB))
        .collect();
    let controller = first.another_controller();
    let pending: Vec<_> = reqs
        .iter()
        .cloned()
        .map(|req| {
            let controller = controller.clone();
            std::thread::spawn(move || controller.create_volume_opt(&req, call()))
        })
        .collect();
    eventually("every create to be posted", Duration::from_secs(60), || {
        state.filesystems().len() == N
    });
    assert!(
        state
            .filesystems()
            .iter()
            .all(|(_, _, phase)| phase == "Creating"),
        "killed too late to prove anything"
    );
    first.driver.signal(libc::SIGKILL);
    first.driver.wait_exit(Duration::from_secs(10));
    for lost in pending {
        assert!(lost.join().unwrap().is_err(), "answered after SIGKILL");
    }
    drop(first);
    let posted: Vec<(u64, String)> = state
        .filesystems()
        .into_iter()
        .map(|(id, label, _)| (id, label))
        .collect();

    // The filesystems turn active while the provisioner retries.
    let second = Dev::start(&state, &[("DEV_ACTIVATION_DELAY", "1s")]);
    let retried: Vec<_> = reqs
        .iter()
        .cloned()
        .map(|req| {
            let controller = second.another_controller();
            std::thread::spawn(move || {
                retry(|| controller.create_volume_opt(&req, call()))
                    .map(|r| (req.name.clone(), r.volume.unwrap().volume_id))
            })
        })
        .collect();
    let mut adopted: Vec<(u64, String)> = retried
        .into_iter()
        .map(|t| {
            let (name, id) = t.join().unwrap().expect("the retried CreateVolume");
            let fs = id.strip_prefix("1/").unwrap().parse().unwrap();
            (fs, name)
        })
        .collect();
    adopted.sort();
    let mut expected = posted.clone();
    expected.sort();
    assert_eq!(
        adopted, expected,
        "each retry got the filesystem posted for it"
    );
    let now = state.filesystems();
    assert_eq!(now.len(), N, "no second filesystem for any volume");
    assert!(now.iter().all(|(_, _, phase)| phase == "Active"));

    let mut second = second;
    second.driver.signal(libc::SIGTERM);
    second.driver.wait_exit(Duration::from_secs(30));
    let logs = second.driver.logs();
    let cost = logs
        .lines()
        .find(|l| l.contains("dev: the fake Linode API served"))
        .unwrap_or_else(|| panic!("no API cost line:\n{logs}"));
    assert!(
        !cost.contains("POST nfs/spaces/{id}/filesystems"),
        "the restarted controller posted a create: {cost}"
    );
}

/// A process that joins the driver's mount namespace and keeps it alive
/// after the driver exits, so the test can look at what the driver left.
struct NamespaceHolder(Child);

impl NamespaceHolder {
    fn join(pid: u32) -> NamespaceHolder {
        let child = Command::new("nsenter")
            .args(["-t", &pid.to_string(), "-m", "--", "sleep", "600"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nsenter");
        NamespaceHolder(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for NamespaceHolder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sigterm_unmounts_everything_and_removes_the_state_dir() {
    let state = StateDir::new("e2e-term");
    let mut dev = Dev::start(&state, &[]);
    let volume = create_volume(&dev, "pvc-term", GIB);
    let staging = state.staging(&volume.volume_id);
    let (pod_a, pod_b) = (
        state.target("a", &volume.volume_id),
        state.target("b", &volume.volume_id),
    );
    mount(&dev, &volume, &staging, &[&pod_a, &pod_b]);
    assert_eq!(dev.mounts_under_state().len(), 3);

    let holder = NamespaceHolder::join(dev.pid());
    // The holder is in the namespace once its mount table is the driver's.
    eventually(
        "nsenter to join the namespace",
        Duration::from_secs(10),
        || mounts_under(holder.pid(), &state.path()).len() == 3,
    );

    dev.driver.signal(libc::SIGTERM);
    let status = dev.driver.wait_exit(Duration::from_secs(30));
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM must be a clean exit\n{}",
        dev.driver.logs()
    );
    assert_eq!(
        mounts_under(holder.pid(), &state.path()),
        Vec::<PathBuf>::new(),
        "the driver exited leaving mounts in its namespace"
    );
    assert!(
        !state.path().exists(),
        "the state dir outlived a clean exit"
    );
    // Its last words: what the session cost in Linode API calls.
    let logs = dev.driver.logs();
    let cost = logs
        .lines()
        .find(|l| l.contains("dev: the fake Linode API served"))
        .unwrap_or_else(|| panic!("no API cost line:\n{logs}"));
    assert!(
        cost.contains("POST nfs/spaces/{id}/filesystems 1"),
        "{cost}"
    );
    let inside = PathBuf::from(format!("/proc/{}/root", holder.pid()))
        .join(state.path().strip_prefix("/").unwrap());
    assert!(
        !inside.exists(),
        "the state dir is still there inside the namespace"
    );
}
