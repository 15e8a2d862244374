//! Process restarts. A controller killed (SIGKILL) while CreateVolume waits
//! for a slow backend leaves its filesystem behind in the backend; the next
//! process on the same state must hand the retried CreateVolume that same
//! filesystem, never a second one. A filesystem that turned active while no
//! process ran, or whose export directory a kill lost, is served by the
//! next one. And SIGTERM on a dev process with live mounts exits 0 having
//! unmounted everything and removed its state dir.

mod common;
mod e2e_support;

use common::rpc::*;
use common::wait_for;
use e2e_support::*;
use linode_nfs_csi::proto::csi;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

/// Dev mode with new filesystems `creating` for `activation`, and the
/// creates of `names` sent to it; once the fake holds all their
/// filesystems, each still `creating`, the process is killed. Returns
/// the creates (each answered with an error), the kill's exit status and
/// the filesystems as `(id, label)`.
fn kill_while_creating(
    state: &StateDir,
    activation: &str,
    names: &[String],
) -> (
    Vec<csi::CreateVolumeRequest>,
    std::process::ExitStatus,
    Vec<(u64, String)>,
) {
    let mut first = Dev::start(state, &[("DEV_ACTIVATION_DELAY", activation)]);
    let reqs: Vec<_> = names.iter().map(|name| create_req(name, GIB)).collect();
    let controller = first.another_controller();
    let pending: Vec<JoinHandle<_>> = reqs
        .iter()
        .cloned()
        .map(|req| {
            let controller = controller.clone();
            std::thread::spawn(move || controller.create_volume_opt(&req, call()))
        })
        .collect();
    wait_for(
        "the fake to hold every new filesystem",
        Duration::from_secs(60),
        || state.filesystems().len() == names.len(),
    );
    assert!(
        state
            .filesystems()
            .iter()
            .all(|(_, _, phase)| phase == "Creating"),
        "killed too late to prove anything"
    );
    let status = first.driver.kill();
    for lost in pending {
        let lost = lost.join().unwrap();
        assert!(
            lost.is_err(),
            "CreateVolume answered although the process was killed: {lost:?}"
        );
    }
    let posted = state
        .filesystems()
        .into_iter()
        .map(|(id, label, _)| (id, label))
        .collect();
    (reqs, status, posted)
}

#[test]
fn kill_mid_create_volume_then_retry_returns_the_same_volume() {
    let state = StateDir::new("e2e-kill");
    // The filesystem stays `creating` long enough to kill the driver while
    // CreateVolume waits for it.
    let (reqs, status, posted) = kill_while_creating(&state, "5s", &["pvc-killed".into()]);
    let req = &reqs[0];
    let fs_id = posted[0].0;
    assert_eq!(posted[0].1, "pvc-killed");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    assert!(
        state.path().join("linode.json").exists(),
        "SIGKILL leaves the state dir (by design)"
    );

    let second = Dev::start(&state, &[("DEV_ACTIVATION_DELAY", "5s")]);
    let volume = second.create(req);
    assert_eq!(
        volume.volume_id,
        format!("1/{fs_id}"),
        "the retry did not adopt the filesystem"
    );
    assert_eq!(
        state.filesystems(),
        vec![(fs_id, "pvc-killed".to_string(), "Active".to_string())]
    );
    assert_eq!(second.create(req), volume);

    // The restarted process serves the adopted volume like any other.
    let (staging, pod) = mount_in_pod(&second, &state, &volume, "pod");
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
    let names: Vec<String> = (0..N).map(|i| format!("pvc-inflight-{i:03}")).collect();
    let (reqs, _, posted) = kill_while_creating(&state, "30s", &names);

    // The filesystems turn active while the provisioner retries.
    let second = Dev::start(&state, &[("DEV_ACTIVATION_DELAY", "1s")]);
    let retried: Vec<_> = reqs
        .iter()
        .cloned()
        .map(|req| {
            let controller = second.another_controller();
            std::thread::spawn(move || {
                retry(&SIDECAR, || controller.create_volume_opt(&req, call()))
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
    let cost = second.api_cost();
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
    wait_for(
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
    let cost = dev.api_cost();
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

/// A filesystem that turns active while no process runs turns active in
/// the next one before anything else happens there: its export directory
/// must be made all the same (the chaos seed 1796166316090672776 staged such
/// a volume into "No such file or directory").
#[test]
fn a_filesystem_that_turned_active_while_killed_is_served_after_the_restart() {
    let state = StateDir::new("e2e-kill-activated");
    let (_, _, posted) = kill_while_creating(&state, "1s", &["pvc-activated".into()]);
    let fs_id = posted[0].0;
    // Past the moment the fake turns it active, as the file says.
    let due = state.filesystem(fs_id)["transition_at"].as_u64().unwrap();
    wait_for(
        "the activation time to pass",
        Duration::from_secs(10),
        || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64
                > due
        },
    );
    assert!(!state.export_dir("pvc-activated", fs_id).exists());

    let second = Dev::start(&state, &[("DEV_ACTIVATION_DELAY", "1s")]);
    assert!(state.export_dir("pvc-activated", fs_id).is_dir());
    let volume = create_volume(&second, "pvc-activated", GIB);
    assert_eq!(volume.volume_id, format!("1/{fs_id}"));
    let (staging, pod) = mount_in_pod(&second, &state, &volume, "pod");
    second.write(&pod.join("f"), "ok").unwrap();
    unmount(&second, &volume.volume_id, &staging, &[&pod]);
    delete_volume(&second, &volume.volume_id);
}

/// A process killed after the state file recorded a filesystem active but
/// before its directory was made (the directory is gone here): the next
/// process makes it, so the volume stages.
#[test]
fn a_restart_makes_the_export_directory_of_every_active_filesystem() {
    let state = StateDir::new("e2e-kill-export");
    let mut first = Dev::start(&state, &[]);
    let volume = create_volume(&first, "pvc-exported", GIB);
    let (fs_id, label, _) = state.filesystems().remove(0);
    let dir = state.export_dir(&label, fs_id);
    assert!(dir.is_dir());
    first.driver.kill();
    drop(first);
    std::fs::remove_dir(&dir).unwrap();

    let second = Dev::start(&state, &[]);
    assert!(dir.is_dir(), "{} not made again", dir.display());
    assert!(state.shared_base().parent().unwrap().is_dir());
    let staging = state.staging(&volume.volume_id);
    mount(&second, &volume, &staging, &[]);
    unmount(&second, &volume.volume_id, &staging, &[]);
    delete_volume(&second, &volume.volume_id);
}
