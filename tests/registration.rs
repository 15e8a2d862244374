//! Registration with kubelet's plugin watcher, through the real binary and a
//! fake kubelet: it watches a temp registry directory with inotify (as
//! kubelet's fsnotify watcher does) and speaks `pluginregistration` with the
//! generated client, in kubelet's order: GetInfo, NodeGetInfo on the
//! announced endpoint, NotifyRegistrationStatus. Also systemd readiness
//! (`NOTIFY_SOCKET`, a datagram socket owned by the test).

mod common;

use common::rpc::call;
use common::{wait_for, Driver, DriverBuilder, TempDir};
use grpcio::{ChannelBuilder, Environment};
use linode_nfs_csi::fake::FakeMetadata;
use linode_nfs_csi::proto::pluginregistration as reg;
use linode_nfs_csi::proto::pluginregistration_grpc::RegistrationClient;
use linode_nfs_csi::proto::{csi, csi_grpc};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram, UnixListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DRIVER: &str = "linodenfs.csi.linode.com";
const LINODE_ID: u64 = 4242;
/// Bounds every wait so a broken driver fails the test instead of hanging it.
const LIMIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Created,
    Deleted,
}

/// inotify on some directories: one queue, so events of all of them arrive
/// in the order they happened.
struct Watch {
    fd: OwnedFd,
    dirs: Vec<(i32, PathBuf)>,
    buf: Vec<u8>,
}

impl Watch {
    fn new(dirs: &[&Path]) -> Watch {
        // SAFETY: plain syscalls; the fd is owned from here on.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(
            fd >= 0,
            "inotify_init1: {}",
            std::io::Error::last_os_error()
        );
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut watched = Vec::new();
        for dir in dirs {
            let c = CString::new(dir.as_os_str().as_bytes()).unwrap();
            let mask = libc::IN_CREATE | libc::IN_DELETE | libc::IN_MOVED_TO | libc::IN_MOVED_FROM;
            // SAFETY: valid fd and NUL-terminated path.
            let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), mask) };
            assert!(
                wd >= 0,
                "inotify_add_watch {}: {}",
                dir.display(),
                std::io::Error::last_os_error()
            );
            watched.push((wd, dir.to_path_buf()));
        }
        Watch {
            fd,
            dirs: watched,
            buf: Vec::new(),
        }
    }

    /// The next change within `limit`, if any.
    fn next(&mut self, limit: Duration) -> Option<(PathBuf, Change)> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(event) = self.parse_one() {
                return Some(event);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(&mut pfd, 1, left.as_millis() as i32) };
            if ready == 0 {
                return None;
            }
            let mut chunk = [0u8; 4096];
            // SAFETY: reads into a buffer of the given size.
            let n =
                unsafe { libc::read(self.fd.as_raw_fd(), chunk.as_mut_ptr().cast(), chunk.len()) };
            if n > 0 {
                self.buf.extend_from_slice(&chunk[..n as usize]);
            }
        }
    }

    fn parse_one(&mut self) -> Option<(PathBuf, Change)> {
        const HEADER: usize = std::mem::size_of::<libc::inotify_event>();
        while self.buf.len() >= HEADER {
            let word = |at: usize| u32::from_ne_bytes(self.buf[at..at + 4].try_into().unwrap());
            let (wd, mask, len) = (word(0) as i32, word(4), word(12) as usize);
            let name: Vec<u8> = self.buf[HEADER..HEADER + len]
                .iter()
                .copied()
                .take_while(|b| *b != 0)
                .collect();
            self.buf.drain(..HEADER + len);
            let change = if mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
                Change::Created
            } else if mask & (libc::IN_DELETE | libc::IN_MOVED_FROM) != 0 {
                Change::Deleted
            } else {
                continue;
            };
            let dir = &self.dirs.iter().find(|(w, _)| *w == wd)?.1;
            return Some((dir.join(std::ffi::OsStr::from_bytes(&name)), change));
        }
        None
    }

    /// Waits until `change` happens to `path`; returns the changes before it.
    fn wait(&mut self, path: &Path, change: Change) -> Vec<(PathBuf, Change)> {
        let deadline = Instant::now() + LIMIT;
        let mut before = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left) {
                Some((p, c)) if p == path && c == change => return before,
                Some(other) => before.push(other),
                None => panic!(
                    "no {change:?} event for {} within {LIMIT:?}",
                    path.display()
                ),
            }
        }
    }

    /// Every change already queued.
    fn queued(&mut self) -> Vec<(PathBuf, Change)> {
        std::iter::from_fn(|| self.next(Duration::ZERO)).collect()
    }
}

/// What kubelet's plugin manager does with a registry directory.
struct FakeKubelet {
    registry: TempDir,
    watch: Watch,
    env: Arc<Environment>,
}

impl FakeKubelet {
    fn new() -> FakeKubelet {
        let registry = TempDir::new("registry");
        FakeKubelet::watching(registry, &[])
    }

    /// Watches `registry` and `also` (e.g. the CSI socket's directory).
    fn watching(registry: TempDir, also: &[&Path]) -> FakeKubelet {
        let mut dirs = vec![registry.path()];
        dirs.extend_from_slice(also);
        FakeKubelet {
            watch: Watch::new(&dirs),
            registry,
            env: Arc::new(Environment::new(1)),
        }
    }

    fn dir(&self) -> String {
        self.registry.path().display().to_string()
    }

    fn socket(&self) -> PathBuf {
        self.registry.join(format!("{DRIVER}-reg.sock"))
    }

    /// Waits for the registration socket; returns the changes before it.
    fn wait_for_socket(&mut self) -> Vec<(PathBuf, Change)> {
        let socket = self.socket();
        self.watch.wait(&socket, Change::Created)
    }

    fn client(&self) -> RegistrationClient {
        let channel = ChannelBuilder::new(self.env.clone())
            .connect(&format!("unix:{}", self.socket().display()));
        RegistrationClient::new(channel)
    }

    fn get_info(&self) -> reg::PluginInfo {
        self.client()
            .get_info_opt(&reg::InfoRequest::new(), call())
            .expect("GetInfo")
    }

    /// NodeGetInfo on the endpoint exactly as announced, failing fast: kubelet
    /// calls it right after GetInfo, so it must already serve.
    fn node_get_info(&self, endpoint: &str) -> csi::NodeGetInfoResponse {
        let channel = ChannelBuilder::new(self.env.clone()).connect(&format!("unix:{endpoint}"));
        csi_grpc::NodeClient::new(channel)
            .node_get_info_opt(&csi::NodeGetInfoRequest::new(), call())
            .expect("NodeGetInfo on the announced endpoint")
    }

    fn notify(&self, registered: bool, error: &str) {
        let mut status = reg::RegistrationStatus::new();
        status.plugin_registered = registered;
        status.error = error.to_string();
        self.client()
            .notify_registration_status_opt(&status, call())
            .expect("NotifyRegistrationStatus");
    }

    /// kubelet's whole sequence for a new socket; returns the node id.
    fn register(&mut self) -> String {
        self.wait_for_socket();
        self.handshake()
    }

    /// The sequence on a socket already seen appearing.
    fn handshake(&self) -> String {
        let info = self.get_info();
        let node = self.node_get_info(&info.endpoint);
        self.notify(true, "");
        node.node_id
    }
}

/// A node driver whose NodeGetInfo answers [`LINODE_ID`], registering in
/// `kubelet`'s directory.
fn node(kubelet: &FakeKubelet, metadata: &FakeMetadata) -> DriverBuilder {
    Driver::role("node")
        .env("METADATA_URL", metadata.url())
        .env("KUBELET_REGISTRATION_DIR", kubelet.dir())
}

fn metadata() -> FakeMetadata {
    FakeMetadata::start(LINODE_ID, "us-east").unwrap()
}

fn wait_for_log(driver: &Driver, what: &str, line: impl Fn(&str) -> bool) {
    wait_for(what, LIMIT, || driver.logs().lines().any(&line));
}

#[test]
fn a_fake_kubelet_registers_the_node_plugin() {
    let metadata = metadata();
    let b = Driver::role("node").env("METADATA_URL", metadata.url());
    let mut kubelet = FakeKubelet::watching(TempDir::new("registry"), &[b.dir()]);
    let driver = b.env("KUBELET_REGISTRATION_DIR", kubelet.dir()).spawn();

    let before = kubelet.wait_for_socket();
    assert!(
        before.contains(&(driver.socket.clone(), Change::Created)),
        "the registration socket appeared before the CSI socket: {before:?}"
    );
    let info = kubelet.get_info();
    assert_eq!(info.type_, "CSIPlugin");
    assert_eq!(info.name, DRIVER);
    assert_eq!(info.endpoint, driver.socket.display().to_string());
    assert_eq!(info.supported_versions, ["1.0.0"]);
    // No waiting for readiness: kubelet calls NodeGetInfo right away.
    assert_eq!(
        kubelet.node_get_info(&info.endpoint).node_id,
        LINODE_ID.to_string()
    );
    kubelet.notify(true, "");
    wait_for_log(&driver, "the registration logged at info", |l| {
        l.contains("INFO") && l.contains("kubelet registered linodenfs.csi.linode.com")
    });
}

#[test]
fn the_announced_endpoint_can_be_overridden() {
    let metadata = metadata();
    let mut kubelet = FakeKubelet::new();
    // kubelet's view of the CSI socket: another path to the same socket.
    let host_view = TempDir::new("host-view");
    let announced = host_view.join("csi.sock");
    let b =
        node(&kubelet, &metadata).env("KUBELET_PLUGIN_ENDPOINT", announced.display().to_string());
    std::os::unix::fs::symlink(b.dir().join("csi.sock"), &announced).unwrap();
    let _driver = b.spawn();

    kubelet.wait_for_socket();
    let info = kubelet.get_info();
    assert_eq!(info.endpoint, announced.display().to_string());
    assert_eq!(
        kubelet.node_get_info(&info.endpoint).node_id,
        LINODE_ID.to_string()
    );
}

#[test]
fn a_refused_registration_re_creates_the_socket() {
    let metadata = metadata();
    let mut kubelet = FakeKubelet::new();
    let driver = node(&kubelet, &metadata).spawn();

    kubelet.wait_for_socket();
    kubelet.get_info();
    kubelet.notify(false, "kubelet says no: version 9.9.9 unsupported");
    wait_for_log(
        &driver,
        "the refusal logged at error with kubelet's message",
        |l| l.contains("ERROR") && l.contains("kubelet says no: version 9.9.9 unsupported"),
    );
    let socket = kubelet.socket();
    kubelet.watch.wait(&socket, Change::Deleted);
    kubelet.watch.wait(&socket, Change::Created);
    // The new socket serves the whole sequence again.
    assert_eq!(kubelet.handshake(), LINODE_ID.to_string());
}

#[test]
fn sigterm_removes_the_registration_socket_before_the_csi_socket() {
    let metadata = metadata();
    let b = Driver::role("node").env("METADATA_URL", metadata.url());
    let mut kubelet = FakeKubelet::watching(TempDir::new("registry"), &[b.dir()]);
    let mut driver = b.env("KUBELET_REGISTRATION_DIR", kubelet.dir()).spawn();
    assert_eq!(kubelet.register(), LINODE_ID.to_string());
    kubelet.watch.queued();

    driver.signal(libc::SIGTERM);
    let status = driver.wait_exit(LIMIT);
    assert!(status.success(), "{status}\n{}", driver.logs());
    let socket = kubelet.socket();
    assert!(
        !socket.exists(),
        "the registration socket outlived the driver"
    );
    let deleted: Vec<PathBuf> = kubelet
        .watch
        .queued()
        .into_iter()
        .filter(|(_, c)| *c == Change::Deleted)
        .map(|(p, _)| p)
        .collect();
    assert_eq!(
        deleted,
        [socket, driver.socket.clone()],
        "registration socket first, then the CSI socket"
    );
}

#[test]
fn a_stale_registration_socket_is_replaced() {
    let registry = TempDir::new("registry");
    let socket = registry.join(format!("{DRIVER}-reg.sock"));
    // A socket nobody listens on, as a killed driver leaves it.
    drop(UnixListener::bind(&socket).unwrap());
    let mut kubelet = FakeKubelet::watching(registry, &[]);
    let metadata = metadata();
    let driver = node(&kubelet, &metadata).spawn();

    kubelet.watch.wait(&socket, Change::Deleted);
    assert_eq!(kubelet.register(), LINODE_ID.to_string());
    assert!(
        driver
            .logs()
            .contains(&format!("removing stale socket {}", socket.display())),
        "{}",
        driver.logs()
    );
}

#[test]
fn a_file_in_place_of_the_registration_socket_is_refused() {
    let kubelet = FakeKubelet::new();
    std::fs::write(kubelet.socket(), "not a socket").unwrap();
    let metadata = metadata();
    let mut driver = node(&kubelet, &metadata).spawn();

    let status = driver.wait_exit(LIMIT);
    assert_eq!(status.code(), Some(1), "{}", driver.logs());
    let logs = driver.logs();
    assert!(
        logs.contains(&format!(
            "KUBELET_REGISTRATION_DIR: {} exists and is not a socket",
            kubelet.socket().display()
        )),
        "{logs}"
    );
    assert_eq!(
        std::fs::read_to_string(kubelet.socket()).unwrap(),
        "not a socket"
    );
    assert!(!driver.socket.exists(), "nothing served before the refusal");
}

/// The next datagram systemd would read.
fn receive(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 512];
    let n = socket
        .recv(&mut buf)
        .expect("a notification before the timeout");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Reads notifications until one holds `line`.
fn receive_until(socket: &UnixDatagram, line: &str) -> String {
    loop {
        let message = receive(socket);
        if message.lines().any(|l| l == line) {
            return message;
        }
    }
}

#[test]
fn notify_socket_hears_ready_once_everything_serves_and_stopping_on_sigterm() {
    let metadata = metadata();
    let kubelet = FakeKubelet::new();
    let notify_dir = TempDir::new("notify");
    let notify_path = notify_dir.join("notify.sock");
    let systemd = UnixDatagram::bind(&notify_path).unwrap();
    systemd.set_read_timeout(Some(LIMIT)).unwrap();
    let mut driver = node(&kubelet, &metadata)
        .env("NOTIFY_SOCKET", notify_path.display().to_string())
        .spawn();

    let ready = receive(&systemd);
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    // Both sockets serve by the time systemd is told.
    assert!(kubelet.socket().exists());
    assert_eq!(kubelet.get_info().name, DRIVER);
    let probe = driver
        .identity()
        .probe_opt(&csi::ProbeRequest::new(), call())
        .unwrap();
    assert!(probe.ready.unwrap().value);

    driver.signal(libc::SIGTERM);
    receive_until(&systemd, "STOPPING=1");
    assert!(driver.wait_exit(LIMIT).success());
}

#[test]
fn an_abstract_notify_socket_is_supported() {
    let name = format!("lnc-test-notify-{}", std::process::id());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let systemd = UnixDatagram::bind_addr(&addr).unwrap();
    systemd.set_read_timeout(Some(LIMIT)).unwrap();
    let mut driver = Driver::role("node")
        .env("NOTIFY_SOCKET", format!("@{name}"))
        .spawn();

    receive_until(&systemd, "READY=1");
    driver.signal(libc::SIGTERM);
    receive_until(&systemd, "STOPPING=1");
    assert!(driver.wait_exit(LIMIT).success());
}

#[test]
fn dev_mode_registers_with_a_kubelet_on_the_same_machine() {
    let mut kubelet = FakeKubelet::new();
    let state = TempDir::new("dev-registration");
    let mut driver = Driver::builder()
        .arg("dev")
        .prefix(&["unshare", "--mount", "--propagation", "private"])
        .env("DEV_STATE_DIR", state.join("state").display().to_string())
        .env("KUBELET_REGISTRATION_DIR", kubelet.dir())
        .spawn();

    kubelet.wait_for_socket();
    let info = kubelet.get_info();
    assert_eq!(info.endpoint, driver.socket.display().to_string());
    // dev mode's seeded node.
    assert_eq!(kubelet.node_get_info(&info.endpoint).node_id, "424242");
    kubelet.notify(true, "");
    wait_for("the banner names the registration socket", LIMIT, || {
        driver.stdout().contains(&format!(
            "registration socket {}",
            kubelet.socket().display()
        ))
    });

    driver.signal(libc::SIGTERM);
    assert!(driver.wait_exit(LIMIT).success(), "{}", driver.logs());
    assert!(!kubelet.socket().exists());
}
