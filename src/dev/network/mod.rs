//! An NFS server across a network, emulated: a FUSE file server, spoken
//! directly on `/dev/fuse`, that serves a local backing directory at a mount
//! point with a round-trip latency on every request, a bounded number of
//! requests in service at once (an NFSv4.1 session's slots), a bandwidth
//! shared by all reads and writes, counts of the operations served, and a
//! switch that makes it stop answering as a hung server does.
//!
//! This module is the public face: the network's parameters, `serve`, the
//! `Server` handle and the process-wide counts and hang switch. It must not
//! call `mount(2)` itself: the caller's closure does.

mod abi;
mod attrs;
mod backing;
mod files;
mod link;
mod nodes;
mod reply;
mod session;
mod tree;

#[cfg(test)]
mod tests;

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// What the emulated network between the client and the server is like.
#[derive(Clone, Debug)]
pub struct Network {
    /// One round trip, paid by every request before its reply (but FORGET
    /// and INTERRUPT, which an NFS client never sends over the wire).
    pub latency: Duration,
    /// Requests served at once (one thread each); more wait in the kernel's
    /// queue. 0 counts as 1.
    pub slots: usize,
    /// Bytes a second of READ and WRITE payload, shared by all requests of
    /// the server; 0 for no limit.
    pub bandwidth: u64,
    /// How long the client may trust names (also of names that do not
    /// exist) and attributes it was sent, as an NFS client caches them.
    pub attr_timeout: Duration,
}

impl Default for Network {
    fn default() -> Self {
        Network {
            latency: Duration::ZERO,
            slots: 32,
            bandwidth: 1 << 30,
            attr_timeout: Duration::from_secs(1),
        }
    }
}

/// A running server: a cheap handle to its counts and hang switch. Dropping
/// it changes nothing; the server ends when its mount is unmounted.
#[derive(Clone)]
pub struct Server {
    link: Arc<link::Link>,
}

impl Server {
    /// The operations this server served, by lowercase FUSE name ("lookup",
    /// "read", ...), sorted by name; those never served are left out.
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        self.link.counts.snapshot()
    }

    /// Stops (`true`) or resumes answering: requests taken meanwhile are
    /// held unanswered, then served normally.
    pub fn set_hung(&self, on: bool) {
        self.link.set_hung(on);
    }
}

/// The operations every server of this process served so far, by name.
pub fn totals() -> Vec<(&'static str, u64)> {
    link::totals()
}

/// Hangs (or resumes) every server of this process, present and future.
pub fn set_hung(on: bool) {
    link::set_hung_all(on);
}

/// Serves `backing` at `mountpoint` (which must exist) through a new FUSE
/// mount, which `mount(target, data)` makes with the option string `data`
/// (`fd=N,rootmode=...,allow_other,default_permissions`). Returns once the
/// mount exists; the INIT handshake may still be in flight. The server's
/// threads end when the mount is unmounted.
pub fn serve(
    backing: &Path,
    mountpoint: &Path,
    network: &Network,
    mount: impl FnOnce(&Path, &str) -> io::Result<()>,
) -> io::Result<Server> {
    let root: OwnedFd = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(backing)?
        .into();
    let root_st = backing::stat_fd(&root).map_err(io::Error::from_raw_os_error)?;
    let device: OwnedFd = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")?
        .into();
    // SAFETY: neither call takes arguments or fails.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let data = format!(
        "fd={},rootmode={:o},user_id={uid},group_id={gid},allow_other,default_permissions",
        device.as_raw_fd(),
        root_st.st_mode,
    );
    mount(mountpoint, &data)?;

    let root = Arc::new(root);
    let export = Arc::new(tree::Export {
        nodes: nodes::Nodes::new(root.clone(), tree::inode_of(&root_st)),
        root,
        valid: reply::Validity::new(network.attr_timeout),
    });
    let link = Arc::new(link::Link::new(network.latency, network.bandwidth));
    let device = Arc::new(device);
    let slots = network.slots.max(1);
    let mut started = 0;
    for _ in 0..slots {
        let worker = session::Worker {
            device: device.clone(),
            export: export.clone(),
            link: link.clone(),
            slots,
        };
        let spawned = std::thread::Builder::new()
            .name("nfs-emu".into())
            .stack_size(512 * 1024)
            .spawn(move || worker.run());
        match spawned {
            Ok(_) => started += 1,
            Err(e) => log::warn!("nfs emulation: starting a worker failed: {e}"),
        }
    }
    if started == 0 {
        // Dropping the last descriptor of the device aborts the
        // connection: the mount answers ENOTCONN instead of hanging.
        return Err(io::Error::other("no worker thread could start"));
    }
    log::debug!(
        "nfs emulation: serving {} at {}",
        backing.display(),
        mountpoint.display()
    );
    Ok(Server { link })
}
