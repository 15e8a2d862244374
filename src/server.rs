//! The gRPC server's life: endpoint binding (stale unix socket removal),
//! per-role service registration, readiness (Probe, systemd, kubelet
//! registration started only once the CSI endpoint serves), the metrics
//! endpoint, and the SIGTERM/SIGINT drain. It owns no RPC logic.

use crate::config::{Config, Endpoint, Role};
use crate::rpc::Rpc;
use crate::systemd_notify::Notifier;
use crate::{identity, metrics, registration, roles, socket_file};
use grpcio::{EnvBuilder, ServerBuilder, ServerCredentials};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Signals that ask the driver to stop.
pub struct StopSignals {
    set: libc::sigset_t,
}

impl StopSignals {
    /// Blocks SIGTERM and SIGINT in the calling thread and every thread it
    /// starts afterwards, so they can only be received by [`StopSignals::wait`].
    /// Call before any thread exists.
    pub fn block() -> StopSignals {
        // SAFETY: sigset_t is plain data initialised by sigemptyset; the
        // calls only read and write it and the thread's own mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            StopSignals { set }
        }
    }

    /// Blocks until SIGTERM or SIGINT arrives; returns its number.
    pub fn wait(&self) -> i32 {
        let mut sig: libc::c_int = 0;
        loop {
            // SAFETY: `set` was built by `block`; `sig` is a valid out pointer.
            let rc = unsafe { libc::sigwait(&self.set, &mut sig) };
            if rc == 0 {
                return sig;
            }
        }
    }
}

/// Serves until a stop signal, then drains and cleans up.
pub fn run(config: Config, signals: StopSignals) -> Result<(), String> {
    metrics::init(config.role);
    // Before the role, so the dev banner can show where it listens; it
    // serves until the drain is over.
    let metrics = config
        .metrics_address
        .as_ref()
        .map(metrics::endpoint::start)
        .transpose()?;
    let rpc = Rpc::new(config.worker_threads);
    let ready = Arc::new(AtomicBool::new(false));
    let notifier = Notifier::new(config.notify_socket.clone());
    let registration = config
        .registration
        .as_ref()
        .map(registration::prepare)
        .transpose()?;
    let mut role = roles::start(&config, &rpc)?;

    // Two completion queues are plenty: handlers never block on them. The
    // registration server shares them.
    let env = Arc::new(EnvBuilder::new().cq_count(2).name_prefix("grpc-cq").build());
    let mut builder = ServerBuilder::new(env.clone()).register_service(identity::service(
        rpc.clone(),
        config.role,
        config.volume_expansion,
        ready.clone(),
    ));
    for service in std::mem::take(&mut role.services) {
        builder = builder.register_service(service);
    }
    let mut server = builder
        .build()
        .map_err(|e| format!("build gRPC server: {e}"))?;

    let address = match &config.endpoint {
        Endpoint::Unix(path) => {
            socket_file::prepare(path, "CSI_ENDPOINT")?;
            format!("unix:{}", path.display())
        }
        Endpoint::Tcp(addr) => addr.clone(),
    };
    server
        .add_listening_port(address.clone(), ServerCredentials::insecure())
        .map_err(|e| format!("CSI_ENDPOINT: cannot listen on {address}: {e}"))?;
    // Bound but not yet serving: only the socket's owner and group may
    // connect (kubelet and the sidecars run as root, or as the plugin's own
    // user), whatever the umask made it.
    if let Endpoint::Unix(path) = &config.endpoint {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
            .map_err(|e| format!("CSI_ENDPOINT: chmod 0660 {}: {e}", path.display()))?;
    }
    server.start();
    ready.store(true, Ordering::SeqCst);
    log::info!(
        "{} {} serving {:?} role on {address} with {} workers",
        identity::DRIVER_NAME,
        identity::version(),
        config.role,
        config.worker_threads
    );
    let registration = match registration {
        Some(prepared) => Some(prepared.start(env, &rpc, notifier.clone())?),
        None => None,
    };
    notifier.ready(&format!("serving {address}"));
    if config.role == Role::Dev {
        role.announce();
    }

    let sig = signals.wait();
    notifier.stopping("draining in-flight RPCs");
    // kubelet deregisters the plugin as soon as this socket goes, before the
    // CSI socket it would otherwise keep dialling.
    if let Some(registration) = registration {
        registration.stop();
    }
    log::info!(
        "signal {sig} received: draining in-flight RPCs (up to {:?})",
        config.shutdown_grace
    );
    ready.store(false, Ordering::SeqCst);
    // Copies that fill restored volumes stop between files, so the calls
    // waiting for them are answered now and a later call resumes them.
    crate::controller::stop_copies();
    let shutdown = server.shutdown();
    let left = rpc.drain(config.shutdown_grace);
    if left > 0 {
        log::warn!(
            "{left} RPCs still running after {:?}; cancelling them",
            config.shutdown_grace
        );
        server.cancel_all_calls();
    }
    if let Err(e) = futures_executor::block_on(shutdown) {
        log::warn!("gRPC shutdown: {e}");
    }
    // Drained: nothing writes any more, so a successor may take over now.
    crate::lease::release();
    // gRPC core usually unlinks the socket itself on shutdown.
    if let Endpoint::Unix(path) = &config.endpoint {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                log::warn!("remove socket {}: {e}", path.display())
            }
            _ => {}
        }
    }
    drop(role.resources);
    drop(metrics);
    log::info!("stopped");
    Ok(())
}
