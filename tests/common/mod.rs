//! Test harness shared by the integration tests: temp dirs, the real driver
//! binary on a temp unix socket (optionally behind a command prefix such as
//! `unshare`), generated gRPC clients connected to it, and waiting for a
//! condition. Every harness (`e2e_support` and `node_support` too) reaches
//! the gRPC helpers in [`rpc`] and the requests in [`requests`] from here.
#![allow(dead_code)]

pub mod controller;
pub mod linode;
pub mod requests;
pub mod resizer;
pub mod rpc;
pub mod share;
pub mod subdir;

use grpcio::{ChannelBuilder, Environment};
use linode_nfs_csi::backoff::Backoff;
use linode_nfs_csi::proto::{csi, csi_grpc};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The cluster identity's tag on what the driver makes, as the fake
/// Kubernetes API's `kube-system` UID derives it (no test sets `CLUSTER_ID`
/// unless it says so).
pub const CLUSTER_TAG: &str = "csi-cluster.f00dcafe0001";
/// That identity, as pool labels carry it.
pub const CLUSTER_ID: &str = "f00dcafe0001";

/// `(mount point, per-mount options)` of every mount in a process's
/// namespace. Parsed here, independently of the driver's own parser; the
/// fixtures' paths hold no characters that mountinfo escapes.
pub fn mounts_of(pid: u32) -> Vec<(PathBuf, Vec<String>)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    text.lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            (
                PathBuf::from(fields[4]),
                fields[5].split(',').map(str::to_string).collect(),
            )
        })
        .collect()
}

/// The sorted names in `dir`; none when it is missing.
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

/// The volume directories (or markers) a `csi-volumes` base holds: its
/// hidden entries (`.owners`, `.archive`) aside.
pub fn volume_names(dir: &Path) -> Vec<String> {
    names_in(dir)
        .into_iter()
        .filter(|n| !n.starts_with('.'))
        .collect()
}

/// A directory removed (recursively) on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!("lnc-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    /// Through the driver's own walk: a test may leave a tree too deep for
    /// std's `remove_dir_all` (which holds a descriptor per level).
    fn drop(&mut self) {
        use linode_nfs_csi::fs_tree::{c_name, remove_tree, Dir};
        if let (Some(parent), Some(name)) = (self.0.parent(), self.0.file_name()) {
            if let (Ok(parent), Ok(name)) = (Dir::open(parent), c_name(name)) {
                let _ = remove_tree(&parent, &name);
            }
        }
    }
}

/// Runs a flow to its end on this thread: parked parts resume here when
/// their event fires (the driver's worker pool does this in production).
pub fn block_on<T: Send + 'static>(
    step: linode_nfs_csi::flow::Step<T>,
) -> linode_nfs_csi::Result<T> {
    use linode_nfs_csi::flow::Flow;
    let (woken, rest) = std::sync::mpsc::channel();
    let mut step = step;
    loop {
        match step? {
            Flow::Ready(value) => return Ok(value),
            Flow::Parked(parked) => {
                let woken = woken.clone();
                let _pending = parked.park(Box::new(move |thunk| {
                    let _ = woken.send(thunk);
                }));
                let thunk: linode_nfs_csi::flow::Thunk<T> =
                    rest.recv().expect("a parked flow resumes");
                step = thunk();
            }
        }
    }
}

/// A fault campaign's seed: `CHAOS_SEED` to replay one, else new each run.
pub fn chaos_seed() -> u64 {
    std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

/// Polls `cond` until it holds, failing the test once `limit` passes. The
/// pauses grow on the driver's own schedule: quick at first for what is
/// about to happen, then a few times a second, so a condition that costs an
/// RPC or a backend call is not asked hundreds of times.
#[track_caller]
pub fn wait_for(what: &str, limit: Duration, cond: impl FnMut() -> bool) {
    wait_for_or(what, limit, cond, String::new);
}

/// `wait_for`, saying what `state` reads when it times out.
#[track_caller]
pub fn wait_for_or(
    what: &str,
    limit: Duration,
    mut cond: impl FnMut() -> bool,
    state: impl FnOnce() -> String,
) {
    const PAUSES: Backoff = Backoff::doubling(Duration::from_millis(5), Duration::from_millis(50));
    let deadline = Instant::now() + limit;
    let mut pause = PAUSES.first;
    while !cond() {
        if Instant::now() >= deadline {
            panic!("timed out after {limit:?} waiting for {what} {}", state());
        }
        std::thread::sleep(pause);
        pause = PAUSES.after(pause);
    }
}

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_linode-nfs-csi")
}

/// How to start the driver.
pub struct DriverBuilder {
    envs: Vec<(String, String)>,
    args: Vec<String>,
    prefix: Vec<String>,
    dir: TempDir,
}

/// A kubeconfig for `server` with bearer-token auth.
pub fn write_kubeconfig(dir: &Path, server: &str, token: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: test\n  cluster:\n    server: {server}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: test\nusers:\n- name: test\n  user:\n    token: {token}\n"
    );
    std::fs::write(&path, text).expect("write kubeconfig");
    path
}

impl DriverBuilder {
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn env(mut self, k: &str, v: impl Into<String>) -> Self {
        self.envs.push((k.to_string(), v.into()));
        self
    }

    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.to_string());
        self
    }

    /// Runs the driver as `prefix... binary` (e.g. unshare for a private mount namespace).
    pub fn prefix(mut self, prefix: &[&str]) -> Self {
        self.prefix = prefix.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Starts the process without waiting for it to serve.
    pub fn spawn(self) -> Driver {
        let dir = self.dir;
        let socket = dir.join("csi.sock");
        let log = dir.join("driver.log");
        let mut cmd = if self.prefix.is_empty() {
            Command::new(binary())
        } else {
            let mut c = Command::new(&self.prefix[0]);
            c.args(&self.prefix[1..]).arg(binary());
            c
        };
        cmd.args(&self.args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("CSI_ENDPOINT", format!("unix://{}", socket.display()))
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("driver.out")).unwrap())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn driver");
        Driver {
            child,
            socket,
            log,
            dir,
            env: Arc::new(Environment::new(1)),
        }
    }

    /// Starts the process and waits until Probe says ready.
    pub fn start(self) -> Driver {
        let mut d = self.spawn();
        d.wait_ready();
        d
    }
}

/// A running driver process; killed on drop.
pub struct Driver {
    child: Child,
    pub socket: PathBuf,
    pub log: PathBuf,
    pub dir: TempDir,
    env: Arc<Environment>,
}

impl Driver {
    pub fn builder() -> DriverBuilder {
        DriverBuilder {
            envs: Vec::new(),
            args: Vec::new(),
            prefix: Vec::new(),
            dir: TempDir::new("driver"),
        }
    }

    /// A driver in the given role with the variables that role requires.
    pub fn role(role: &str) -> DriverBuilder {
        let b = Driver::builder().env("DRIVER_ROLE", role);
        match role {
            "node" => b
                .env("NODE_NAME", "test-node")
                .env("METADATA_URL", "http://127.0.0.1:9"),
            "controller" => {
                let kubeconfig = write_kubeconfig(b.dir(), "http://127.0.0.1:9", "kube-token");
                // No API server answers here, so nothing to derive from.
                b.env("LINODE_TOKEN", "test-token")
                    .env("LINODE_URL", "http://127.0.0.1:9")
                    .env("KUBECONFIG", kubeconfig.display().to_string())
                    .env("CLUSTER_ID", "test")
            }
            _ => b,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.dir.join("driver.out")).unwrap_or_default()
    }

    /// The process's exit status, if it has exited.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("wait driver")
    }

    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let mut status = None;
        wait_for("the driver to exit", limit, || {
            status = self.try_exit();
            status.is_some()
        });
        status.unwrap()
    }

    /// SIGKILL, as a crash or an eviction, and its reaping.
    pub fn kill(&mut self) -> ExitStatus {
        self.signal(libc::SIGKILL);
        self.wait_exit(Duration::from_secs(10))
    }

    /// Signals the process unless it has already exited (its pid could
    /// belong to someone else by then).
    pub fn signal(&mut self, sig: i32) {
        if self.try_exit().is_some() {
            return;
        }
        // SAFETY: plain kill(2) on our own child's pid, not yet reaped.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    pub fn wait_ready(&mut self) {
        wait_for("the driver to be ready", Duration::from_secs(30), || {
            if let Some(status) = self.try_exit() {
                panic!(
                    "driver exited with {status} before serving\n{}",
                    self.logs()
                );
            }
            self.socket.exists()
                && self
                    .identity()
                    .probe_opt(
                        &csi::ProbeRequest::new(),
                        grpcio::CallOption::default().timeout(Duration::from_secs(2)),
                    )
                    .is_ok_and(|resp| resp.ready.as_ref().is_some_and(|b| b.value))
        });
    }

    /// A new connection to the driver's socket.
    pub fn channel(&self) -> grpcio::Channel {
        ChannelBuilder::new(self.env.clone()).connect(&format!("unix:{}", self.socket.display()))
    }

    pub fn groups(&self) -> csi_grpc::GroupControllerClient {
        csi_grpc::GroupControllerClient::new(self.channel())
    }

    pub fn identity(&self) -> csi_grpc::IdentityClient {
        csi_grpc::IdentityClient::new(self.channel())
    }

    pub fn controller(&self) -> csi_grpc::ControllerClient {
        csi_grpc::ControllerClient::new(self.channel())
    }

    pub fn node(&self) -> csi_grpc::NodeClient {
        csi_grpc::NodeClient::new(self.channel())
    }
}

impl Drop for Driver {
    /// A failing test shows the end of the driver's log: what it did last
    /// is most often why.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let logs = self.logs();
            let tail: Vec<&str> = logs.lines().rev().take(60).collect();
            eprintln!("--- driver log (last lines) ---");
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}
