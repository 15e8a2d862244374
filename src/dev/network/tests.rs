//! Tests that mount: each outer test re-runs one inner test (marked
//! `#[ignore]`) in a private mount namespace with util-linux `unshare`, so
//! no mount reaches the host; the inner one returns at once elsewhere.
//! Scratch files live on a tmpfs mounted in that namespace.

use super::*;
use std::path::PathBuf;
use std::process::Command;
use std::sync::mpsc;
use std::time::Instant;

/// Set, to the scratch directory, on the copy of the test binary that runs
/// in its own mount namespace.
const IN_NAMESPACE: &str = "LINODE_NFS_CSI_NETWORK_TEST_NS";

fn in_namespace(inner: &str) {
    let base = std::env::temp_dir().join(format!("nfs-emu-{inner}-{}", std::process::id()));
    std::fs::create_dir_all(&base).unwrap();
    let module = module_path!().split_once("::").unwrap().1;
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &format!("{module}::{inner}"),
            "--ignored",
            "--nocapture",
        ])
        .env(IN_NAMESPACE, &base)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&base);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}

/// The scratch directory, on a fresh tmpfs, when running in the namespace.
fn scratch() -> Option<PathBuf> {
    let base = PathBuf::from(std::env::var_os(IN_NAMESPACE)?);
    mount_special("tmpfs", "tmpfs", &base, "mode=755");
    Some(base)
}

/// What dev mode's mounter does: `mount(2)` of type "fuse".
fn fuse_mount(target: &Path, data: &str) -> io::Result<()> {
    crate::mount::linux::mount_fuse(target, data, false)
}

/// `umount` of `target`, lazily with `lazy`, by util-linux.
fn unmount(target: &Path, lazy: bool) {
    let mut cmd = Command::new("umount");
    if lazy {
        cmd.arg("-l");
    }
    let out = cmd.arg(target).output().unwrap();
    assert!(
        out.status.success(),
        "umount {}: {}",
        target.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `mount -t <fstype> <source> <target>` by util-linux.
fn mount_special(fstype: &str, source: &str, target: &Path, options: &str) {
    let out = Command::new("mount")
        .args(["-t", fstype, "-o", options, source])
        .arg(target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mount {fstype} on {}: {}",
        target.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A server of `base/<name>` at `base/<name>.mnt`.
fn serve_at(base: &Path, name: &str, network: &Network) -> (Server, PathBuf, PathBuf) {
    let backing = base.join(name);
    let mnt = base.join(format!("{name}.mnt"));
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let server = serve(&backing, &mnt, network, fuse_mount).unwrap();
    (server, backing, mnt)
}

fn sh(script: &str) -> String {
    let out = Command::new("sh").args(["-ec", script]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script}\n{text}{err}");
    text
}

/// Type, mode, owner, link count, mtime, size and link target of every
/// file under `dir`, one line each, sorted.
fn manifest(dir: &Path) -> String {
    let dir = dir.display();
    sh(&format!(
        "cd {dir} && find . -printf '%p %y %m %U:%G %n %T@ %s %l\\n' | sort"
    ))
}

fn workers() -> usize {
    let tasks = std::fs::read_dir("/proc/self/task").unwrap();
    let named = |t: std::fs::DirEntry| std::fs::read_to_string(t.path().join("comm")).ok();
    (tasks.filter_map(|t| named(t.ok()?)))
        .filter(|comm| comm.trim() == "nfs-emu")
        .count()
}

fn count(server: &Server, op: &str) -> u64 {
    (server.counts().into_iter())
        .find(|&(name, _)| name == op)
        .map_or(0, |(_, n)| n)
}

/// A source tree with every kind of file `cp -a` preserves.
fn build_tree(src: &Path) {
    let src = src.display();
    sh(&format!(
        "mkdir -p {src}/sub/deeper {src}/empty
        printf 'hello' > {src}/small
        : > {src}/zero
        head -c 3000000 /dev/urandom > {src}/sub/big
        for i in $(seq 1 40); do echo file $i > {src}/sub/deeper/f$i; done
        ln {src}/small {src}/sub/small-link
        ln -s ../small {src}/sub/symlink
        ln -s nowhere {src}/dangling
        mkfifo {src}/fifo
        chown 1000:1000 {src}/small {src}/sub
        chown -h 1234:5678 {src}/sub/symlink
        chmod 0640 {src}/small; chmod 4755 {src}/sub/big; chmod 0700 {src}/empty
        chown 1000:1000 {src}/sub/big; chmod 4755 {src}/sub/big
        touch -h -d @1600000000.123456789 {src}/sub/symlink {src}/small {src}/fifo
        touch -d @1500000000.5 {src}/sub/deeper {src}/sub {src}/empty {src}"
    ));
}

#[test]
fn a_tree_copies_through_the_mount_both_ways() {
    in_namespace("copies_both_ways");
}

#[test]
#[ignore = "run by a_tree_copies_through_the_mount_both_ways"]
fn copies_both_ways() {
    let Some(base) = scratch() else { return };
    let (server, backing, mnt) = serve_at(&base, "export", &Network::default());
    let src = base.join("src");
    build_tree(&src);

    sh(&format!("cp -a {} {}/copy", src.display(), mnt.display()));
    let want = manifest(&src);
    assert_eq!(
        manifest(&backing.join("copy")),
        want,
        "written through the mount"
    );
    assert_eq!(manifest(&mnt.join("copy")), want, "seen through the mount");
    let back = base.join("back");
    sh(&format!("cp -a {}/copy {}", mnt.display(), back.display()));
    assert_eq!(manifest(&back), want, "read through the mount");
    for copy in [back, backing.join("copy")] {
        sh(&format!(
            "diff -r --no-dereference -x fifo {} {}",
            src.display(),
            copy.display()
        ));
    }
    let du = sh(&format!("du -s {}/copy | cut -f1", mnt.display()));
    assert!(du.trim().parse::<u64>().unwrap() > 2900, "{du}");
    let found = sh(&format!("find {}/copy -type f | wc -l", mnt.display()));
    assert_eq!(found.trim(), "44");

    sh(&format!("rm -rf {}/copy", mnt.display()));
    assert_eq!(std::fs::read_dir(&backing).unwrap().count(), 0);

    let served = [
        "create", "mkdir", "mknod", "symlink", "link", "setattr", "read", "write",
    ];
    let removed = ["readdirplus", "unlink", "rmdir", "forget"];
    for op in served.into_iter().chain(removed) {
        assert!(count(&server, op) > 0, "{op}: {:?}", server.counts());
    }
    let all = |counts: Vec<(&str, u64)>| counts.iter().map(|c| c.1).sum::<u64>();
    assert!(all(totals()) >= all(server.counts()));
    unmount(&mnt, false);
}

#[test]
fn names_and_attributes_change_as_asked() {
    in_namespace("names_and_attributes");
}

fn c(path: &Path) -> std::ffi::CString {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap()
}

fn rename2(from: &Path, to: &Path, flags: u32) -> io::Result<()> {
    let (from, to) = (c(from), c(to));
    let (cwd, a, b) = (libc::AT_FDCWD, from.as_ptr(), to.as_ptr());
    // SAFETY: NUL-terminated paths that outlive the call.
    match unsafe { libc::syscall(libc::SYS_renameat2, cwd, a, cwd, b, flags) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

#[test]
#[ignore = "run by names_and_attributes_change_as_asked"]
fn names_and_attributes() {
    let Some(base) = scratch() else { return };
    let (server, backing, mnt) = serve_at(&base, "export", &Network::default());
    let (m, b) = (|p: &str| mnt.join(p), |p: &str| backing.join(p));
    std::fs::write(m("a"), "aaa").unwrap();
    std::fs::write(m("b"), "bbb").unwrap();
    std::fs::rename(m("a"), m("c")).unwrap();
    assert_eq!(std::fs::read_to_string(b("c")).unwrap(), "aaa");
    let refused = rename2(&m("b"), &m("c"), 1).unwrap_err();
    assert_eq!(
        refused.raw_os_error(),
        Some(libc::EEXIST),
        "RENAME_NOREPLACE"
    );
    rename2(&m("b"), &m("c"), 2).unwrap();
    assert_eq!(
        std::fs::read_to_string(m("c")).unwrap(),
        "bbb",
        "RENAME_EXCHANGE"
    );
    assert_eq!(std::fs::read_to_string(m("b")).unwrap(), "aaa");
    std::fs::rename(m("b"), m("c")).unwrap();
    assert!(!m("b").exists());

    // A hard link outlives its first name, and an open file its last.
    std::fs::hard_link(m("c"), m("d")).unwrap();
    let meta = |p: &Path| std::os::unix::fs::MetadataExt::nlink(&p.symlink_metadata().unwrap());
    assert_eq!(meta(&m("d")), 2);
    std::fs::remove_file(m("c")).unwrap();
    assert_eq!(meta(&m("d")), 1);
    let mut open = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m("d"))
        .unwrap();
    std::fs::remove_file(m("d")).unwrap();
    io::Write::write_all(&mut open, b"still here").unwrap();
    assert_eq!(open.metadata().unwrap().len(), 10);
    drop(open);

    std::fs::create_dir_all(m("dir/sub")).unwrap();
    std::fs::write(m("dir/sub/f"), "0123456789").unwrap();
    std::fs::rename(m("dir/sub"), m("moved")).unwrap();
    assert_eq!(std::fs::read_to_string(m("moved/f")).unwrap(), "0123456789");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(m("moved/f"))
        .unwrap();
    f.set_len(4).unwrap();
    drop(f);
    assert_eq!(std::fs::read_to_string(b("moved/f")).unwrap(), "0123");
    sh(&format!("truncate -s 2 {}", m("moved/f").display()));
    assert_eq!(std::fs::metadata(b("moved/f")).unwrap().len(), 2);
    let rmdir = std::fs::remove_dir(m("moved")).unwrap_err();
    assert_eq!(rmdir.raw_os_error(), Some(libc::ENOTEMPTY));
    std::fs::remove_file(m("moved/f")).unwrap();
    std::fs::remove_dir(m("moved")).unwrap();
    std::fs::remove_dir(m("dir")).unwrap();

    // New files get the caller's owner, umask and set-group-ID directory.
    sh(&format!(
        "chmod 1777 {d}; mkdir -m 2777 {d}/shared; chgrp 2000 {d}/shared; chmod g+s {d}/shared
        setpriv --reuid 1000 --regid 1000 --clear-groups sh -c \
            'umask 0; echo x > {d}/shared/mine; mkdir {d}/shared/sub; ln -s x {d}/shared/l'
        setpriv --reuid 1000 --regid 1001 --clear-groups sh -c \
            'umask 027; mkdir {d}/open; mkfifo {d}/open/p'",
        d = mnt.display()
    ));
    let stat = |p: &str| sh(&format!("stat -c '%u:%g %a' {}", b(p).display()));
    assert_eq!(stat("shared/mine").trim(), "1000:2000 666");
    assert_eq!(stat("shared/sub").trim(), "1000:2000 2777");
    assert_eq!(stat("shared/l").trim(), "1000:2000 777");
    assert_eq!(stat("open").trim(), "1000:1001 750");
    assert_eq!(stat("open/p").trim(), "1000:1001 640");

    let fs_stat = |p: &Path| sh(&format!("stat -f -c '%b %S %l %c' {}", p.display()));
    assert_eq!(fs_stat(&mnt), fs_stat(&backing));
    for op in [
        "rename", "rename2", "unlink", "rmdir", "link", "statfs", "mknod",
    ] {
        assert!(count(&server, op) > 0, "{op}: {:?}", server.counts());
    }

    // The export removed under the mount: every answer is ESTALE.
    sh(&format!("rm -rf {}/*", mnt.display()));
    std::fs::remove_dir(&backing).unwrap();
    let gone = std::fs::read_dir(&mnt).unwrap_err();
    assert_eq!(gone.raw_os_error(), Some(libc::ESTALE), "{gone}");
    unmount(&mnt, true);
}

#[test]
fn latency_bandwidth_and_slots_shape_the_timing() {
    in_namespace("timing");
}

#[test]
#[ignore = "run by latency_bandwidth_and_slots_shape_the_timing"]
fn timing() {
    let Some(base) = scratch() else { return };
    let network = Network {
        latency: Duration::from_millis(20),
        bandwidth: 10_000_000,
        ..Network::default()
    };
    let (_server, backing, mnt) = serve_at(&base, "export", &network);
    for i in 0..65 {
        std::fs::write(backing.join(format!("f{i}")), "x").unwrap();
    }
    std::fs::write(backing.join("big"), vec![7u8; 2_000_000]).unwrap();
    std::fs::metadata(&mnt).unwrap();

    let stat = |i: usize| assert!(std::fs::metadata(mnt.join(format!("f{i}"))).is_ok());
    let start = Instant::now();
    stat(0);
    let one = start.elapsed();
    assert!(one >= Duration::from_millis(20), "one stat took {one:?}");
    let start = Instant::now();
    (1..33).for_each(stat);
    let serial = start.elapsed();
    let start = Instant::now();
    let batch: Vec<_> = (33..65)
        .map(|i| {
            let path = mnt.join(format!("f{i}"));
            std::thread::spawn(move || std::fs::metadata(path).unwrap())
        })
        .collect();
    batch
        .into_iter()
        .for_each(|t| assert!(t.join().unwrap().is_file()));
    let parallel = start.elapsed();
    println!("one stat {one:?}, 32 serial {serial:?}, 32 parallel {parallel:?}");
    assert!(serial >= Duration::from_millis(32 * 20), "{serial:?}");
    assert!(parallel < serial / 4, "{parallel:?} vs {serial:?}");

    // 2 MB at 10 MB/s: at least 200 ms on the link, whatever the requests.
    let start = Instant::now();
    assert_eq!(std::fs::read(mnt.join("big")).unwrap().len(), 2_000_000);
    let read = start.elapsed();
    println!("2 MB read at 10 MB/s: {read:?}");
    assert!(read >= Duration::from_millis(200), "{read:?}");
    unmount(&mnt, false);
}

#[test]
fn a_hung_server_answers_only_once_released() {
    in_namespace("hang");
}

/// Runs `op` in another thread; the receiver hears when it is done.
fn started(op: impl FnOnce() + Send + 'static) -> mpsc::Receiver<()> {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        op();
        let _ = done.send(());
    });
    finished
}

#[test]
#[ignore = "run by a_hung_server_answers_only_once_released"]
fn hang() {
    let Some(base) = scratch() else { return };
    let held = Duration::from_millis(300);
    let released = Duration::from_secs(10);

    // The whole process, before the mount: INIT is held too.
    set_hung(true);
    let (server, backing, mnt) = serve_at(&base, "export", &Network::default());
    std::fs::write(backing.join("f"), "x").unwrap();
    let path = mnt.join("f");
    let finished = started(move || assert!(std::fs::metadata(path).is_ok()));
    assert!(finished.recv_timeout(held).is_err(), "answered while hung");
    set_hung(false);
    finished
        .recv_timeout(released)
        .expect("not answered once released");

    // One server.
    server.set_hung(true);
    let path = mnt.join("g");
    let finished = started(move || drop(std::fs::metadata(path).unwrap_err()));
    assert!(finished.recv_timeout(held).is_err(), "answered while hung");
    server.set_hung(false);
    finished
        .recv_timeout(released)
        .expect("not answered once released");
    assert_eq!(count(&server, "init"), 1);
    unmount(&mnt, false);
}

#[test]
fn unmounting_ends_the_server_threads() {
    in_namespace("unmount_ends_threads");
}

/// Waits until `n` workers run (a thread names itself once started).
fn workers_become(n: usize) -> bool {
    let start = Instant::now();
    while workers() != n {
        if start.elapsed() > Duration::from_secs(10) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[test]
#[ignore = "run by unmounting_ends_the_server_threads"]
fn unmount_ends_threads() {
    let Some(base) = scratch() else { return };
    let fds = open_fds();
    let network = Network {
        slots: 4,
        ..Network::default()
    };
    let (_server, backing, mnt) = serve_at(&base, "plain", &network);
    std::fs::write(mnt.join("f"), "x").unwrap();
    assert!(workers_become(4), "{} workers", workers());
    unmount(&mnt, false);
    assert!(workers_become(0), "{} workers left", workers());
    assert_eq!(std::fs::read_to_string(backing.join("f")).unwrap(), "x");

    // A lazy unmount ends the server once the last open file closes.
    let (_server, _, mnt) = serve_at(&base, "lazy", &network);
    std::fs::write(mnt.join("f"), "y").unwrap();
    let open = std::fs::File::open(mnt.join("f")).unwrap();
    unmount(&mnt, true);
    std::thread::sleep(Duration::from_millis(200));
    assert!(workers_become(4), "the open file still needs its server");
    assert_eq!(io::read_to_string(open).unwrap(), "y");
    assert!(workers_become(0), "{} workers left", workers());

    // A hung server's held requests end with its connection.
    let (server, _, mnt) = serve_at(&base, "hung", &network);
    let dev = std::os::unix::fs::MetadataExt::dev(&std::fs::metadata(&mnt).unwrap());
    server.set_hung(true);
    let path = mnt.join("never");
    let finished = started(move || drop(std::fs::metadata(path)));
    std::thread::sleep(Duration::from_millis(100));
    abort_connection(dev);
    finished
        .recv_timeout(Duration::from_secs(10))
        .expect("held past the abort");
    unmount(&mnt, true);
    assert!(workers_become(0), "{} workers left", workers());
    assert_eq!(open_fds(), fds, "the servers left descriptors open");
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Aborts the FUSE connection of the mount on device `dev`, as `umount -f`
/// or an administrator does. Only this one: the control filesystem lists
/// every connection of the host.
fn abort_connection(dev: u64) {
    let connections = Path::new("/sys/fs/fuse/connections");
    if std::fs::read_dir(connections).unwrap().next().is_none() {
        mount_special("fusectl", "fusectl", connections, "defaults");
    }
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    assert_eq!(major, 0, "a FUSE mount has an anonymous device");
    std::fs::write(connections.join(minor.to_string()).join("abort"), "1").unwrap();
}
