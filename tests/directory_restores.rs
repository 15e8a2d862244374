//! Restores and clones of directory volumes, against `linode-nfs-csi dev`
//! (whose emulated NFS gives snapshots and clones their export's content):
//! the restored tree equals the source at snapshot time (bytes, modes,
//! owners, times, symlinks, hard links), nothing of a neighbour's appears,
//! nothing temporary is left, and what cannot be restored is refused
//! before anything is made. With `DEV_QUIRKS=snapshot-directory` a restore
//! copies from the parent's `.snapshot`; with `slow-clones` the driver is
//! killed or stopped mid-restore and the next process finishes it.

mod common;
mod e2e_support;

use common::requests::*;
use common::rpc::*;
use common::wait_for;
use e2e_support::restores::*;
use e2e_support::*;
use grpcio::RpcStatusCode as Code;
use linode_nfs_csi::proto::csi;
use std::collections::BTreeMap;

#[test]
fn a_restore_holds_the_directory_at_snapshot_time_and_nothing_else() {
    let (state, dev) = start_dev("restore-dir", &[]);
    let src = dev.create(&subdir_req("pvc-src", GIB));
    let neighbour = dev.create(&subdir_req("pvc-neighbour", GIB));
    let src_dir = dir_of(&state, &src);
    fill_source(&src_dir);
    std::fs::write(dir_of(&state, &neighbour).join("canary"), "not yours").unwrap();
    let at_snapshot = tree(&src_dir);

    let snap = snapshot_until_ready(&dev, "snap-src", &src.volume_id);
    // Written after the snapshot: never in a restore of it.
    std::fs::write(src_dir.join("hello.txt"), "changed").unwrap();
    std::fs::write(src_dir.join("later"), "later").unwrap();

    let mut req = subdir_req("pvc-restored", GIB);
    req = from_snapshot(req, &snap.snapshot_id);
    let restored = dev.create(&req);
    assert_eq!(
        restored.content_source.snapshot().snapshot_id,
        snap.snapshot_id
    );
    let restored_dir = dir_of(&state, &restored);
    assert_eq!(tree(&restored_dir), at_snapshot);
    assert!(!restored_dir.join("canary").exists());
    // A repeat answers the same volume and copies nothing again.
    let again = dev.create(&req);
    assert_eq!(again.volume_id, restored.volume_id);

    // Nothing temporary is left: no clone (deleted as the fill ended, and
    // gone once the backend has finished deleting it), no mount of one.
    let live: Vec<(String, String)> = state
        .filesystems()
        .into_iter()
        .filter(|f| f.1.starts_with("csi-restore-"))
        .map(|f| (f.1, f.2))
        .collect();
    assert!(
        live.iter().all(|(_, phase)| phase == "Deleting"),
        "{live:?}"
    );
    let restores = state.path().join("shares/.restores");
    assert!(
        common::names_in(&restores).is_empty(),
        "{:?}",
        common::names_in(&restores)
    );
    assert!(dev.nothing_mounted_under(&restores));
}

#[test]
fn a_clone_is_a_copy_of_one_instant_and_leaves_no_snapshot() {
    let (state, dev) = start_dev("restore-clone", &[]);
    let src = dev.create(&subdir_req("pvc-src", GIB));
    let src_dir = dir_of(&state, &src);
    fill_source(&src_dir);
    let before = tree(&src_dir);

    let req = from_volume(subdir_req("pvc-clone", GIB), &src.volume_id);
    let clone = dev.create(&req);
    assert_eq!(clone.content_source.volume().volume_id, src.volume_id);
    assert_eq!(tree(&dir_of(&state, &clone)), before);
    let live: Vec<_> = state
        .snapshots()
        .into_iter()
        .filter(|s| s.3 != "Deleting")
        .collect();
    assert!(
        live.is_empty(),
        "the snapshot a clone is copied through goes: {live:?}"
    );
    assert!(common::names_in(&state.shared_base().join(".snapshots/.clones")).is_empty());
    // Deleting the clone leaves the source as it was.
    delete_volume(&dev, &clone.volume_id);
    assert_eq!(tree(&src_dir), before);
}

#[test]
fn across_kinds_a_filesystem_snapshot_fills_a_directory_and_never_the_reverse() {
    let (state, dev) = start_dev("restore-kinds", &[]);
    let whole = create_volume(&dev, "pvc-whole", GIB);
    let id = filesystem_of(&whole.volume_id);
    let label = state
        .filesystems()
        .into_iter()
        .find(|f| f.0 == id)
        .unwrap()
        .1;
    let export = state.export_dir(&label, id);
    std::fs::write(export.join("root-file"), "from a whole filesystem").unwrap();
    let snap = snapshot_until_ready(&dev, "snap-whole", &whole.volume_id);
    let into_dir = dev.create(&from_snapshot(
        subdir_req("pvc-from-whole", GIB),
        &snap.snapshot_id,
    ));
    assert_eq!(
        std::fs::read_to_string(dir_of(&state, &into_dir).join("root-file")).unwrap(),
        "from a whole filesystem"
    );

    let dir_vol = dev.create(&subdir_req("pvc-dir", GIB));
    let dir_snap = snapshot_until_ready(&dev, "snap-dir", &dir_vol.volume_id);
    let filesystems = state.filesystems().len();
    for req in [
        from_snapshot(create_req("pvc-fs-from-dir", GIB), &dir_snap.snapshot_id),
        from_volume(create_req("pvc-fs-clone-of-dir", GIB), &dir_vol.volume_id),
    ] {
        let e = dev.controller.create_volume(&req).unwrap_err();
        assert_eq!(code_of(&e), Code::INVALID_ARGUMENT, "{e:?}");
        assert!(
            message_of(&e).contains("every tenant"),
            "{}",
            message_of(&e)
        );
    }
    assert_eq!(state.filesystems().len(), filesystems, "nothing was made");
}

#[test]
fn a_restore_too_small_for_its_snapshot_is_refused_before_anything_is_made() {
    let (state, dev) = start_dev("restore-small", &[]);
    let src = dev.create(&subdir_req("pvc-src", 2 * GIB));
    let snap = snapshot_until_ready(&dev, "snap-src", &src.volume_id);
    assert_eq!(snap.size_bytes, 2 * GIB);
    let e = dev
        .controller
        .create_volume(&from_snapshot(
            subdir_req("pvc-small", GIB),
            &snap.snapshot_id,
        ))
        .unwrap_err();
    assert_eq!(code_of(&e), Code::OUT_OF_RANGE, "{e:?}");
    let message = message_of(&e);
    assert!(
        message.contains(&(2 * GIB).to_string()) && message.contains(&GIB.to_string()),
        "{message}"
    );
    assert!(!state.shared_base().join("pvc-small").exists());
    assert!(!state.shared_base().join(".owners/pvc-small").exists());
    assert!(
        state.quotas().iter().all(|q| !q.1.contains("pvc-small")),
        "{:?}",
        state.quotas()
    );
    // A forged snapshot id is NotFound, and makes nothing either.
    let forged = format!("{}/{}/999999/snap-src", 1, state.shared_parent().0);
    assert_code(
        dev.controller
            .create_volume(&from_snapshot(subdir_req("pvc-forged", GIB), &forged)),
        Code::NOT_FOUND,
        "a forged directory snapshot",
    );
    assert!(!state.shared_base().join("pvc-forged").exists());
}

#[test]
fn a_group_member_restores_its_own_directory_only() {
    let (state, dev) = start_dev("restore-group", &[]);
    let a = dev.create(&subdir_req("pvc-a", GIB));
    let b = dev.create(&subdir_req("pvc-b", GIB));
    let c = dev.create(&subdir_req("pvc-c", GIB));
    std::fs::write(dir_of(&state, &a).join("a-file"), "a").unwrap();
    fill_source(&dir_of(&state, &b));
    std::fs::write(dir_of(&state, &c).join("canary"), "c").unwrap();
    let b_then = tree(&dir_of(&state, &b));

    let mut req = csi::CreateVolumeGroupSnapshotRequest::new();
    req.name = "group-ab".into();
    req.source_volume_ids = vec![a.volume_id.clone(), b.volume_id.clone()];
    let groups = dev.driver.groups();
    let group = retry(&SIDECAR, || {
        groups.create_volume_group_snapshot_opt(&req, call())
    })
    .unwrap()
    .group_snapshot
    .unwrap();
    let member = group
        .snapshots
        .iter()
        .find(|s| s.source_volume_id == b.volume_id)
        .unwrap();
    std::fs::write(dir_of(&state, &b).join("after"), "after the group").unwrap();
    let restored = dev.create(&from_snapshot(
        subdir_req("pvc-b-again", GIB),
        &member.snapshot_id,
    ));
    assert_eq!(tree(&dir_of(&state, &restored)), b_then);
    let mut delete = csi::DeleteVolumeGroupSnapshotRequest::new();
    delete.group_snapshot_id = group.group_snapshot_id.clone();
    retry(&SIDECAR, || {
        groups.delete_volume_group_snapshot_opt(&delete, call())
    })
    .unwrap();
    let live: Vec<_> = state
        .snapshots()
        .into_iter()
        .filter(|s| s.3 != "Deleting")
        .collect();
    assert!(live.is_empty(), "{live:?}");
}

/// How many entries the last completed copy of `logs` found in place from
/// an earlier attempt.
fn reused_in(logs: &str) -> u64 {
    let done = logs
        .lines()
        .rfind(|l| l.contains("copy done"))
        .unwrap_or_else(|| panic!("no copy done:\n{logs}"));
    done.split(", ")
        .find_map(|part| part.strip_suffix(" reused from an earlier attempt"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no reused count in {done}"))
}

#[test]
fn a_parent_showing_its_snapshots_restores_from_them_without_a_clone() {
    let (state, dev) = start_dev("restore-shown", &[("DEV_QUIRKS", "snapshot-directory")]);
    let src = dev.create(&subdir_req("pvc-src", GIB));
    let src_dir = dir_of(&state, &src);
    fill_source(&src_dir);
    let at_snapshot = tree(&src_dir);
    let snap = snapshot_until_ready(&dev, "snap-src", &src.volume_id);
    std::fs::write(src_dir.join("hello.txt"), "changed").unwrap();
    let (_, label) = linode_snapshot(&state, &snap.snapshot_id);
    let shown = state.shared_base().parent().unwrap().join(".snapshot");
    assert!(
        shown.join(&label).is_dir(),
        "{:?}",
        common::names_in(&shown)
    );

    let made = state.linode()["next_filesystem_id"].clone();
    let restored = dev.create(&from_snapshot(
        subdir_req("pvc-restored", GIB),
        &snap.snapshot_id,
    ));
    assert_eq!(tree(&dir_of(&state, &restored)), at_snapshot);
    let logs = dev.driver.logs();
    let from = format!("/.snapshot/{label}/csi-volumes/");
    assert!(
        logs.lines()
            .any(|l| l.contains("filling volume") && l.contains(&from)),
        "no fill from {from}:\n{logs}"
    );
    // No clone of the snapshot was ever posted, let alone left.
    assert!(!logs.contains("into temporary filesystem"), "{logs}");
    assert_eq!(state.linode()["next_filesystem_id"], made);
    assert!(state
        .filesystems()
        .iter()
        .all(|f| !f.1.starts_with("csi-restore-")));

    retry(&SIDECAR, || {
        dev.controller
            .delete_snapshot_opt(&delete_snapshot_req(&snap.snapshot_id), call())
    })
    .expect("DeleteSnapshot");
    wait_for(
        "the deleted snapshot to leave .snapshot",
        std::time::Duration::from_secs(30),
        || !shown.join(&label).exists(),
    );
}

/// A restore in dev mode (`slow-clones`, one copy thread, and `extra`
/// settings for its first process), parked until the first process logs
/// `until`.
struct UnderWay {
    state: StateDir,
    first: Dev,
    at_snapshot: BTreeMap<String, String>,
    /// The Linode snapshot behind the source's snapshot...
    snapshot: u64,
    /// ...and the source's snapshot.
    snapshot_id: String,
    req: csi::CreateVolumeRequest,
    parked: Option<std::thread::JoinHandle<grpcio::Result<csi::CreateVolumeResponse>>>,
}

const SLOW: [(&str, &str); 2] = [("DEV_QUIRKS", "slow-clones"), ("COPY_THREADS", "1")];

/// `SLOW`, with the upkeep every `interval` (`0s`: none).
fn slow_with_upkeep(interval: &'static str) -> Vec<(&'static str, &'static str)> {
    SLOW.iter()
        .copied()
        .chain([("MAINTENANCE_INTERVAL", interval)])
        .collect()
}

fn restore_under_way(tag: &str, extra: &[(&str, &str)], many: bool, until: &str) -> UnderWay {
    let env: Vec<(&str, &str)> = SLOW.iter().chain(extra).copied().collect();
    let (state, first) = start_dev(tag, &env);
    let src = first.create(&subdir_req("pvc-src", GIB));
    let src_dir = dir_of(&state, &src);
    fill_source(&src_dir);
    if many {
        fill_many(&src_dir);
    }
    let at_snapshot = tree(&src_dir);
    let snap = snapshot_until_ready(&first, "snap-src", &src.volume_id);
    let (snapshot, _) = linode_snapshot(&state, &snap.snapshot_id);
    let req = from_snapshot(subdir_req("pvc-restored", GIB), &snap.snapshot_id);
    let controller = first.another_controller();
    let sent = req.clone();
    let parked = std::thread::spawn(move || controller.create_volume_opt(&sent, call()));
    wait_for(until, std::time::Duration::from_secs(60), || {
        first.driver.logs().contains(until)
    });
    UnderWay {
        state,
        first,
        at_snapshot,
        snapshot,
        snapshot_id: snap.snapshot_id.clone(),
        req,
        parked: Some(parked),
    }
}

impl UnderWay {
    /// What the first process answered the parked call.
    fn answer(&mut self) -> grpcio::Result<csi::CreateVolumeResponse> {
        self.parked.take().unwrap().join().unwrap()
    }

    /// kill -9 of the first process: the parked call gets no answer.
    fn kill(&mut self) {
        self.first.driver.kill();
        assert!(self.answer().is_err(), "a killed driver answered");
    }

    /// The files of the new volume that an interrupted copy finished.
    fn copied(&self) -> usize {
        tree(&self.state.shared_base().join("pvc-restored"))
            .into_iter()
            .filter(|(path, what)| {
                !what.starts_with("dir") && self.at_snapshot.get(path) == Some(what)
            })
            .count()
    }

    /// The next process on the same state finishes the restore: the tree
    /// as at the snapshot, and no temporary clone, mount of one, or
    /// snapshot but the source's left (an orphan clone of a restore the
    /// killed process had finished is its upkeep's to delete). Returns
    /// that process.
    fn finished_by_the_next_process(&self) -> Dev {
        let second = Dev::start(&self.state, &slow_with_upkeep("1s"));
        let restored = second.create(&self.req);
        assert_eq!(tree(&dir_of(&self.state, &restored)), self.at_snapshot);
        wait_for(
            "no temporary clone to be left",
            std::time::Duration::from_secs(30),
            || temporaries(&self.state).is_empty(),
        );
        assert_eq!(
            live_snapshots(&self.state),
            [self.snapshot],
            "a stray snapshot"
        );
        let restores = self.state.path().join("shares/.restores");
        assert!(second.nothing_mounted_under(&restores));
        second
    }
}

#[test]
fn a_restore_killed_mid_clone_resumes_in_the_next_process_and_leaves_nothing() {
    // Logged once the POST is answered, so its export holds the data.
    let mut u = restore_under_way(
        "restore-kill-clone",
        &[],
        false,
        "into temporary filesystem",
    );
    let posted = temporaries(&u.state);
    assert!(
        matches!(posted.as_slice(), [(_, _, phase)] if phase == "Creating"),
        "{posted:?}"
    );
    u.kill();
    let second = u.finished_by_the_next_process();
    let logs = second.driver.logs();
    assert!(
        !logs.contains("into temporary filesystem"),
        "the orphan clone was not adopted:\n{logs}"
    );
}

#[test]
fn sigterm_mid_copy_answers_unavailable_and_the_next_process_reuses_the_copied() {
    let mut u = restore_under_way("restore-term-copy", &[], true, "copy started");
    // Without its marker, dev mode's clean exit keeps the state dir for
    // the next process.
    std::fs::remove_file(u.state.path().join(".linode-nfs-csi-dev")).unwrap();
    u.first.driver.signal(libc::SIGTERM);
    let answer = u.answer();
    let status = u.first.driver.wait_exit(std::time::Duration::from_secs(30));
    let logs = u.first.driver.logs();
    assert_eq!(status.code(), Some(0), "{logs}");
    let stopped = logs.contains("copy stopped");
    match &answer {
        Err(e) => assert_eq!(code_of(e), Code::UNAVAILABLE, "{e:?}"),
        Ok(_) => assert!(!stopped, "a stopped copy answered OK"),
    }
    let copied = u.copied();
    let second = u.finished_by_the_next_process();
    if stopped && copied > 0 {
        let reused = reused_in(&second.driver.logs());
        assert!(reused > 0, "{copied} were copied, none reused");
    }
}

#[test]
fn a_restore_killed_mid_copy_is_finished_by_the_next_process() {
    let mut u = restore_under_way("restore-kill-copy", &[], true, "copy started");
    u.kill();
    let copied = u.copied();
    let second = u.finished_by_the_next_process();
    if copied > 0 {
        let reused = reused_in(&second.driver.logs());
        assert!(reused > 0, "{copied} were copied, none reused");
    }
}

#[test]
fn a_restore_killed_before_its_temporary_filesystem_is_deleted_deletes_it_later() {
    // The temporary filesystem's DELETE is held until the kill; the job
    // marked the volume filled before it let go of the clone.
    let held = [
        ("DEV_FAULTS", "slow:1@DELETE:nfs/spaces/*/filesystems/*"),
        ("LINODE_REQUEST_TIMEOUT", "60s"),
    ];
    let mut u = restore_under_way("restore-kill-delete", &held, true, "injected slow");
    u.kill();
    let second = u.finished_by_the_next_process();
    let logs = second.driver.logs();
    assert!(
        !logs.contains("copy started"),
        "a filled volume was copied again:\n{logs}"
    );
}

#[test]
fn a_restore_three_times_slower_than_its_caller_finishes_for_a_retry_with_one_clone() {
    let (state, dev, at_snapshot, snap) =
        bulky_snapshot("restore-slow-caller", &[("DEV_QUIRKS", "slow-clones")]);
    let req = from_snapshot(subdir_req("pvc-restored", GIB), &snap.snapshot_id);
    // Each try gives up after 2 s; the next comes 1 s later.
    let started = std::time::Instant::now();
    let (restored, failed) = created_retrying(&dev.controller, &req, within(2));
    let tries = failed.len() + 1;
    let took = started.elapsed().as_millis() as u64;
    assert!(
        tries >= 3,
        "the restore was not slower than its caller ({tries} tries)"
    );
    assert_eq!(tree(&dir_of(&state, &restored)), at_snapshot);
    let logs = dev.driver.logs();
    assert_eq!(
        logs.matches("into temporary filesystem").count(),
        1,
        "one temporary filesystem is POSTed:\n{logs}"
    );
    let id = &restored.volume_id;
    let job = logged_at(&logs, &format!("{id}: filled"))
        - logged_at(&logs, &format!("{id}: fill job started"));
    assert!(
        took <= job + 2000,
        "the calls took {took} ms, the clone and the copy {job} ms"
    );
    no_temporary_left(&state);
}

#[test]
fn a_snapshot_deleted_while_a_restore_clones_it_stays_until_the_restore_is_done() {
    let (state, dev, at_snapshot, snap) =
        bulky_snapshot("restore-snapshot-deleted", &[("DEV_QUIRKS", "slow-clones")]);
    let (parent_snapshot, _) = linode_snapshot(&state, &snap.snapshot_id);
    // The caller gives up while the temporary clone is being made...
    let req = given_up_mid_clone(&dev, &snap);
    // ...and the snapshot is deleted meanwhile: answered at once, while the
    // parent snapshot the restore clones stays.
    dev.controller
        .delete_snapshot_opt(&delete_snapshot_req(&snap.snapshot_id), call())
        .unwrap();
    assert!(
        live_snapshots(&state).contains(&parent_snapshot),
        "the parent snapshot went while a restore still cloned it"
    );
    let restored = retry(&SIDECAR, || dev.controller.create_volume_opt(&req, call()))
        .unwrap()
        .volume
        .unwrap();
    assert_eq!(tree(&dir_of(&state, &restored)), at_snapshot);
    wait_for(
        "the parent snapshot and the temporary clone to go once the restore is done",
        std::time::Duration::from_secs(30),
        || live_snapshots(&state).is_empty() && temporaries(&state).is_empty(),
    );
}

#[test]
fn a_restore_whose_caller_left_mid_copy_is_filled_all_the_same() {
    let (state, dev) = start_dev("restore-left-mid-copy", &SLOW);
    let src = dev.create(&subdir_req("pvc-src", GIB));
    let src_dir = dir_of(&state, &src);
    fill_source(&src_dir);
    fill_many(&src_dir);
    let at_snapshot = tree(&src_dir);
    let snap = snapshot_until_ready(&dev, "snap-src", &src.volume_id);
    let req = from_snapshot(subdir_req("pvc-restored", GIB), &snap.snapshot_id);
    let mut left = dev
        .controller
        .create_volume_async_opt(&req, call())
        .unwrap();
    wait_for(
        "the copy to start",
        std::time::Duration::from_secs(60),
        || dev.driver.logs().contains("copy started"),
    );
    left.cancel();
    drop(left);
    // The copy goes on without its caller, and its job marks the volume
    // filled: a snapshot deleted now takes nothing with it.
    wait_for(
        "the fill to end",
        std::time::Duration::from_secs(60),
        || dev.driver.logs().contains(": filled"),
    );
    dev.controller
        .delete_snapshot_opt(&delete_snapshot_req(&snap.snapshot_id), call())
        .unwrap();
    let restored = dev.create(&req);
    assert_eq!(tree(&dir_of(&state, &restored)), at_snapshot);
    wait_for(
        "no snapshot or temporary clone to be left",
        std::time::Duration::from_secs(30),
        || live_snapshots(&state).is_empty() && temporaries(&state).is_empty(),
    );
}

#[test]
fn a_restore_whose_snapshot_went_while_no_process_ran_leaves_nothing() {
    let mut u = restore_under_way("restore-gone-after-kill", &[], true, "copy started");
    u.kill();
    // The next process, whose upkeep resumes nothing, sees the snapshot
    // deleted; the retry then answers the final error and takes the
    // half-filled volume with it.
    let second = Dev::start(&u.state, &slow_with_upkeep("0s"));
    second
        .controller
        .delete_snapshot_opt(&delete_snapshot_req(&u.snapshot_id), call())
        .unwrap();
    assert_code(
        second.controller.create_volume_opt(&u.req, call()),
        Code::NOT_FOUND,
        "a restore of a deleted snapshot",
    );
    nothing_left_of(&u.state, "pvc-restored");
    wait_for(
        "the parent snapshot the killed restore held to go",
        std::time::Duration::from_secs(30),
        || live_snapshots(&u.state).is_empty(),
    );
}

#[test]
fn the_next_process_s_upkeep_finishes_a_killed_restore_without_a_call() {
    let mut u = restore_under_way("restore-resumed", &[], true, "copy started");
    u.kill();
    let second = Dev::start(&u.state, &slow_with_upkeep("1s"));
    wait_for(
        "the upkeep to finish the fill",
        std::time::Duration::from_secs(60),
        || second.driver.logs().contains(": filled"),
    );
    let started = second.driver.logs().matches("copy started").count();
    let restored = second.create(&u.req);
    assert_eq!(tree(&dir_of(&u.state, &restored)), u.at_snapshot);
    assert_eq!(
        second.driver.logs().matches("copy started").count(),
        started,
        "the call copied again what the upkeep had filled"
    );
    wait_for(
        "no temporary clone to be left",
        std::time::Duration::from_secs(30),
        || temporaries(&u.state).is_empty(),
    );
}

#[test]
fn a_volume_deleted_while_its_fill_waits_for_the_clone_goes_and_its_clone_after_it() {
    let (state, dev, _, snap) = bulky_snapshot(
        "restore-deleted-mid-clone",
        &[("DEV_QUIRKS", "slow-clones")],
    );
    given_up_mid_clone(&dev, &snap);
    // The provisioner deletes the volume (its PVC went) while the job
    // waits for the clone: no copy runs, so the delete goes through.
    let id = format!("1/{}/pvc-restored", state.shared_parent().0);
    dev.controller
        .delete_volume_opt(&delete_req(&id), call())
        .unwrap();
    nothing_left_of(&state, "pvc-restored");
    // The job then finds its volume gone, writes nothing, and lets its
    // clone go.
    wait_for(
        "the temporary clone to go",
        std::time::Duration::from_secs(30),
        || temporaries(&state).is_empty(),
    );
    nothing_left_of(&state, "pvc-restored");
}

#[test]
fn a_hold_a_killed_job_left_on_a_filled_restore_goes_with_the_retry_of_its_call() {
    let (state, dev) = start_dev("restore-stale-hold", &[]);
    let src = dev.create(&subdir_req("pvc-src", GIB));
    fill_source(&dir_of(&state, &src));
    let snap = snapshot_until_ready(&dev, "snap-src", &src.volume_id);
    let (_, batch) = linode_snapshot(&state, &snap.snapshot_id);
    let req = from_snapshot(subdir_req("pvc-restored", GIB), &snap.snapshot_id);
    let restored = dev.create(&req);
    // What a job killed after marking its volume filled and before letting
    // go of the parent snapshot leaves: its reference in the batch.
    let link = state
        .shared_base()
        .join(".snapshots/.batches")
        .join(&batch)
        .join(format!("f-1-{}-pvc-restored", state.shared_parent().0));
    std::fs::write(&link, "").unwrap();
    dev.controller
        .delete_snapshot_opt(&delete_snapshot_req(&snap.snapshot_id), call())
        .unwrap();
    assert!(
        !live_snapshots(&state).is_empty(),
        "the reference keeps the parent snapshot"
    );
    // The provisioner retries the call the killed process never answered.
    assert_eq!(dev.create(&req).volume_id, restored.volume_id);
    assert!(!link.exists());
    wait_for(
        "the parent snapshot to go",
        std::time::Duration::from_secs(30),
        || live_snapshots(&state).is_empty(),
    );
}
