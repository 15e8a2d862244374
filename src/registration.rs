//! Registration with kubelet's plugin watcher, in place of the
//! node-driver-registrar sidecar (node and dev roles, when
//! `KUBELET_REGISTRATION_DIR` is set). A second gRPC server serves
//! `pluginregistration.Registration` on `<dir>/<driver name>-reg.sock`.
//! kubelet dials each socket that appears in its registry directory, asks
//! GetInfo, calls NodeGetInfo on the CSI endpoint announced there, then
//! reports with NotifyRegistrationStatus; it deregisters the plugin when the
//! socket goes. This module owns that socket's life: it appears only once
//! the CSI endpoint and the Registration service both serve (bound under a
//! dot name kubelet ignores, then renamed into place), is re-created after a
//! refusal (kubelet tries again on socket events), and is removed first on
//! shutdown. It holds no CSI logic.

use crate::backoff::Backoff;
use crate::build_info::DRIVER_NAME;
use crate::config::RegistrationConfig;
use crate::proto::pluginregistration as reg;
use crate::rpc::registrar::{rpc_name, Registrar};
use crate::rpc::Rpc;
use crate::socket_file;
use crate::systemd_notify::Notifier;
use grpcio::{Environment, Server, ServerBuilder, ServerCredentials};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What kubelet's plugin manager routes to its CSI handler.
const PLUGIN_TYPE: &str = "CSIPlugin";
/// The CSI spec versions served, as kubelet expects them.
const SUPPORTED_VERSIONS: &[&str] = &["1.0.0"];
/// The wait before the first re-creation after a refusal; it doubles up to
/// [`LAST_RETRY`] and starts over once kubelet accepts.
const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(60);
const RETRY: Backoff = Backoff::doubling(FIRST_RETRY, LAST_RETRY);
/// `sun_path` holds 108 bytes with the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;
const SETTING: &str = "KUBELET_REGISTRATION_DIR";

/// The registration socket kubelet watches for in `dir`.
pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join(format!("{DRIVER_NAME}-reg.sock"))
}

/// Where the socket is bound before it is renamed to [`socket_path`]:
/// kubelet's plugin watcher skips names starting with a dot, so it never
/// dials a socket that does not accept yet.
fn staging_path(dir: &Path) -> PathBuf {
    dir.join(format!(".{DRIVER_NAME}-reg.sock.new"))
}

/// The registration socket's paths, checked and cleared, not yet served.
pub struct Prepared {
    paths: Paths,
    endpoint: String,
}

struct Paths {
    socket: PathBuf,
    staging: PathBuf,
}

impl Paths {
    /// Removes stale sockets at both paths; refuses anything else there.
    fn clear(&self) -> Result<(), String> {
        socket_file::prepare(&self.staging, SETTING)?;
        socket_file::prepare(&self.socket, SETTING)
    }
}

/// Checks where the registration socket goes before anything serves, so a
/// bad `KUBELET_REGISTRATION_DIR` fails startup before the CSI socket exists.
pub fn prepare(config: &RegistrationConfig) -> Result<Prepared, String> {
    let paths = Paths {
        socket: socket_path(&config.dir),
        staging: staging_path(&config.dir),
    };
    if paths.staging.as_os_str().len() > MAX_SOCKET_PATH {
        return Err(format!(
            "{SETTING}: {} is longer than a unix socket path may be ({MAX_SOCKET_PATH} bytes)",
            paths.staging.display()
        ));
    }
    paths.clear()?;
    Ok(Prepared {
        paths,
        endpoint: config.endpoint.display().to_string(),
    })
}

impl Prepared {
    /// Serves the Registration service on `env`, the CSI server's own
    /// completion queues; call once the CSI endpoint serves, because kubelet
    /// calls NodeGetInfo there before it answers.
    pub fn start(
        self,
        env: Arc<Environment>,
        rpc: &Rpc,
        notifier: Notifier,
    ) -> Result<Registration, String> {
        let (events, inbox) = mpsc::channel();
        let keeper = Keeper {
            env,
            paths: self.paths,
            endpoint: self.endpoint,
            rpc: rpc.clone(),
            notifier,
            events: events.clone(),
        };
        let server = keeper.serve(0)?;
        log::info!(
            "registration socket {} serving; announcing CSI endpoint {} to kubelet",
            keeper.paths.socket.display(),
            keeper.endpoint
        );
        let thread = std::thread::Builder::new()
            .name("registration".into())
            .spawn(move || keeper.run(server, inbox))
            .map_err(|e| format!("{SETTING}: start the registration thread: {e}"))?;
        Ok(Registration {
            events,
            thread: Some(thread),
        })
    }
}

/// The served registration; stopping (or dropping) it removes the socket,
/// so kubelet deregisters the plugin.
pub struct Registration {
    events: Sender<Event>,
    thread: Option<JoinHandle<()>>,
}

impl Registration {
    /// Removes the socket, then stops serving; returns once both are done.
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = self.events.send(Event::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the keeper thread is told. Verdicts carry the generation of the
/// socket they arrived on, so a late one for a socket already replaced is
/// ignored.
enum Event {
    Registered(u64),
    Refused(u64),
    Stop,
}

/// Owns the registration server and re-creates it when kubelet refuses.
struct Keeper {
    env: Arc<Environment>,
    paths: Paths,
    endpoint: String,
    rpc: Rpc,
    notifier: Notifier,
    events: Sender<Event>,
}

impl Keeper {
    /// Serves on the staging path, then renames the socket into place.
    fn serve(&self, generation: u64) -> Result<Server, String> {
        self.paths.clear()?;
        let service = registration_service(
            self.rpc.clone(),
            RegistrationService {
                endpoint: self.endpoint.clone(),
                generation,
                events: self.events.clone(),
                notifier: self.notifier.clone(),
            },
        );
        let mut server = ServerBuilder::new(self.env.clone())
            .register_service(service)
            .build()
            .map_err(|e| format!("{SETTING}: build the registration server: {e}"))?;
        let address = format!("unix:{}", self.paths.staging.display());
        server
            .add_listening_port(address.clone(), ServerCredentials::insecure())
            .map_err(|e| format!("{SETTING}: cannot listen on {address}: {e}"))?;
        server.start();
        if let Err(e) = std::fs::rename(&self.paths.staging, &self.paths.socket) {
            self.shut_down(server);
            return Err(format!(
                "{SETTING}: rename {} to {}: {e}",
                self.paths.staging.display(),
                self.paths.socket.display()
            ));
        }
        Ok(server)
    }

    fn run(self, server: Server, inbox: Receiver<Event>) {
        let mut server = Some(server);
        let mut generation = 0;
        let mut backoff = RETRY.first;
        loop {
            match inbox.recv() {
                Ok(Event::Registered(g)) if g == generation => backoff = RETRY.first,
                Ok(Event::Refused(g)) if g == generation => {
                    if let Some(server) = server.take() {
                        self.withdraw(server);
                    }
                    // kubelet tries again when a socket appears: give it a
                    // new one, after a pause so a lasting fault is not a storm.
                    loop {
                        log::info!(
                            "re-creating registration socket {} in {backoff:?}",
                            self.paths.socket.display()
                        );
                        if stopped_during(&inbox, backoff) {
                            return;
                        }
                        backoff = RETRY.after(backoff);
                        generation += 1;
                        match self.serve(generation) {
                            Ok(fresh) => {
                                log::info!(
                                    "registration socket {} re-created",
                                    self.paths.socket.display()
                                );
                                server = Some(fresh);
                                break;
                            }
                            Err(e) => log::error!("{e}"),
                        }
                    }
                }
                Ok(Event::Registered(_) | Event::Refused(_)) => {}
                Ok(Event::Stop) | Err(_) => {
                    if let Some(server) = server.take() {
                        self.withdraw(server);
                    }
                    return;
                }
            }
        }
    }

    /// The socket goes first, so kubelet sees it vanish at once; then the
    /// server stops.
    fn withdraw(&self, server: Server) {
        socket_file::remove(&self.paths.socket);
        self.shut_down(server);
        log::info!(
            "registration socket {} removed",
            self.paths.socket.display()
        );
    }

    /// Stops after answering the call in flight (a refusal's own
    /// NotifyRegistrationStatus). The server is dropped before a new one can
    /// bind the staging path: gRPC unlinks the path it bound when destroyed.
    fn shut_down(&self, mut server: Server) {
        if let Err(e) = futures_executor::block_on(server.shutdown()) {
            log::warn!("registration server shutdown: {e}");
        }
        drop(server);
    }
}

/// Waits `pause`; true if told to stop meanwhile. Verdicts arriving now
/// belong to the withdrawn socket.
fn stopped_during(inbox: &Receiver<Event>, pause: Duration) -> bool {
    let deadline = Instant::now() + pause;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match inbox.recv_timeout(left) {
            Ok(Event::Stop) | Err(RecvTimeoutError::Disconnected) => return true,
            Err(RecvTimeoutError::Timeout) => return false,
            Ok(_) => {}
        }
    }
}

/// What one registration socket answers from.
struct RegistrationService {
    endpoint: String,
    generation: u64,
    events: Sender<Event>,
    notifier: Notifier,
}

/// The [`Name`](crate::rpc::registrar::Name) of a Registration RPC.
macro_rules! name {
    ($rpc:literal) => {
        rpc_name!("pluginregistration.Registration", $rpc)
    };
}

fn registration_service(rpc: Rpc, service: RegistrationService) -> grpcio::Service {
    Registrar::new(rpc, Arc::new(service))
        .inline(name!("GetInfo"), |service, _: reg::InfoRequest| {
            let mut info = reg::PluginInfo::new();
            info.type_ = PLUGIN_TYPE.to_string();
            info.name = DRIVER_NAME.to_string();
            info.endpoint = service.endpoint.clone();
            info.supported_versions = SUPPORTED_VERSIONS.iter().map(|v| v.to_string()).collect();
            Ok(info)
        })
        .inline(
            name!("NotifyRegistrationStatus"),
            |service, status: reg::RegistrationStatus| {
                let event = if status.plugin_registered {
                    log::info!("kubelet registered {DRIVER_NAME} at {}", service.endpoint);
                    service.notifier.status("serving; registered with kubelet");
                    Event::Registered(service.generation)
                } else {
                    log::error!(
                        "kubelet refused to register {DRIVER_NAME}: {}",
                        status.error
                    );
                    service.notifier.status(&format!(
                        "serving; kubelet refused registration: {}",
                        status.error
                    ));
                    Event::Refused(service.generation)
                };
                // The keeper is gone only once the driver stops.
                let _ = service.events.send(event);
                Ok(reg::RegistrationStatusResponse::new())
            },
        )
        .build()
}
