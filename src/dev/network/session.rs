//! One worker of a FUSE session: it reads a request from `/dev/fuse`, holds
//! it while the server is hung, has the export serve it, waits as the
//! network would and writes the reply; it ends when the device reports the
//! mount gone. It owns the INIT handshake and the choice of which opcodes
//! are served; what each one does is the export's business.

use super::abi::{self, InHeader, Request};
use super::backing::{self, Result};
use super::link::Link;
use super::reply::Reply;
use super::tree::Export;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;

/// Writes go up to 1 MiB a request, like an NFS client's `wsize`.
pub(super) const MAX_WRITE: u32 = 1 << 20;
const MAX_PAGES: u16 = (MAX_WRITE / 4096) as u16;
/// The largest request: a full write and its headers, with room to spare.
const REQUEST_BUFFER: usize = MAX_WRITE as usize + 64 * 1024;

/// What this server asks of the kernel; the reply keeps only the flags the
/// kernel offered.
const WANTED: u32 = abi::ASYNC_READ
    | abi::ATOMIC_O_TRUNC
    | abi::BIG_WRITES
    | abi::AUTO_INVAL_DATA
    | abi::DO_READDIRPLUS
    | abi::READDIRPLUS_AUTO
    | abi::PARALLEL_DIROPS
    | abi::MAX_PAGES
    | abi::CACHE_SYMLINKS;

pub(super) struct Worker {
    pub(super) device: Arc<OwnedFd>,
    pub(super) export: Arc<Export>,
    pub(super) link: Arc<Link>,
    pub(super) slots: usize,
}

impl Worker {
    pub(super) fn run(self) {
        // Sleeps this thread takes are the emulated network: keep them
        // close to what was asked rather than rounded up by timer slack.
        // SAFETY: PR_SET_TIMERSLACK takes one integer and no pointers.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
        let mut buf = vec![0u8; REQUEST_BUFFER];
        let mut out = Reply::new();
        loop {
            let n = match self.read(&mut buf) {
                Ok(n) => n,
                // Interrupted, or the request was withdrawn before it was read.
                Err(libc::EINTR | libc::EAGAIN | libc::ENOENT) => continue,
                // Unmounted, or the connection was aborted.
                Err(libc::ENODEV | libc::ECONNABORTED) => break,
                Err(e) => {
                    log::warn!("nfs emulation: reading /dev/fuse failed: errno {e}");
                    break;
                }
            };
            let Some(header) = abi::read::<InHeader>(&buf[..n]) else {
                log::warn!("nfs emulation: a {n}-byte request is shorter than its header");
                continue;
            };
            let end = (header.len as usize).clamp(size_of::<InHeader>(), n);
            let req = Request {
                header,
                body: &buf[size_of::<InHeader>()..end],
            };
            if !self.link.hold_while_hung(self.device.as_fd()) {
                break;
            }
            out.clear();
            self.link.count(header.opcode);
            let Some(answer) = self.serve(&req, &mut out) else {
                continue;
            };
            let errno = answer.err().unwrap_or(0);
            let op = abi::op_name(header.opcode);
            log::debug!("nfs emulation: {op} node {} errno {errno}", header.nodeid);
            if matches!(errno, libc::EMFILE | libc::ENFILE | libc::ENOMEM) {
                log::warn!("nfs emulation: out of resources serving {op}: errno {errno}");
            }
            let payload = match header.opcode {
                abi::READ => out.len(),
                abi::WRITE => req.body.len().saturating_sub(size_of::<abi::ReadIn>()),
                _ => 0,
            };
            // An interrupt is the client's own business, never a round trip
            // to an NFS server.
            if header.opcode != abi::INTERRUPT {
                self.link.deliver(payload as u64);
            }
            self.write(out.seal(header.unique, answer.err()));
        }
    }

    /// The answer to one request, `None` for those the kernel expects none
    /// for (FORGET, BATCH_FORGET).
    fn serve(&self, req: &Request, out: &mut Reply) -> Option<Result<()>> {
        let export = &self.export;
        let answer = match req.header.opcode {
            abi::FORGET => {
                export.forget(req);
                return None;
            }
            abi::BATCH_FORGET => {
                export.batch_forget(req);
                return None;
            }
            abi::INIT => self.init(req, out),
            abi::DESTROY => Ok(()),
            // ENOSYS makes the kernel stop sending interrupts at all: this
            // server never abandons a request it took.
            abi::INTERRUPT => Err(libc::ENOSYS),
            abi::RELEASE | abi::RELEASEDIR => export.release(req),
            opcode => export.check_root().and_then(|()| match opcode {
                abi::LOOKUP => export.lookup(req, out),
                abi::GETATTR => export.getattr(req, out),
                abi::SETATTR => export.setattr(req, out),
                abi::READLINK => export.readlink(req, out),
                abi::SYMLINK => export.symlink(req, out),
                abi::MKNOD => export.mknod(req, out),
                abi::MKDIR => export.mkdir(req, out),
                abi::UNLINK => export.unlink(req, 0),
                abi::RMDIR => export.unlink(req, libc::AT_REMOVEDIR),
                abi::RENAME => export.rename(req, false),
                abi::RENAME2 => export.rename(req, true),
                abi::LINK => export.link(req, out),
                abi::OPEN => export.open(req, out, false),
                abi::OPENDIR => export.open(req, out, true),
                abi::CREATE => export.create(req, out),
                abi::READ => export.read(req, out),
                abi::WRITE => export.write(req, out),
                abi::READDIR => export.readdir(req, out, false),
                abi::READDIRPLUS => export.readdir(req, out, true),
                abi::FLUSH => Ok(()),
                abi::FSYNC | abi::FSYNCDIR => export.fsync(req),
                abi::LSEEK => export.lseek(req, out),
                abi::FALLOCATE => export.fallocate(req),
                abi::STATFS => export.statfs(out),
                abi::ACCESS => export.access(req),
                // Extended attributes among them: an NFSv4.1 server has
                // none, and ENOSYS makes the kernel answer EOPNOTSUPP itself
                // from then on, which `cp -a` takes in its stride.
                _ => Err(libc::ENOSYS),
            }),
        };
        Some(answer)
    }

    fn init(&self, req: &Request, out: &mut Reply) -> Result<()> {
        let offer = abi::read_prefix::<abi::InitIn>(req.body);
        if offer.major != abi::MAJOR {
            log::warn!(
                "nfs emulation: kernel FUSE protocol {}.{}",
                offer.major,
                offer.minor
            );
            return Err(libc::EPROTO);
        }
        let slots = u16::try_from(self.slots).unwrap_or(u16::MAX);
        out.push(&abi::InitOut {
            major: abi::MAJOR,
            minor: offer.minor.min(abi::MINOR),
            max_readahead: offer.max_readahead,
            flags: offer.flags & WANTED,
            // Background requests (readahead, releases) may use every slot.
            max_background: slots,
            congestion_threshold: slots - slots / 4,
            max_write: MAX_WRITE,
            time_gran: 1,
            max_pages: MAX_PAGES,
            ..abi::InitOut::default()
        });
        Ok(())
    }

    fn read(&self, buf: &mut [u8]) -> Result<usize> {
        // SAFETY: the buffer is valid for `buf.len()` bytes.
        let n = unsafe { libc::read(self.device.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(backing::last_errno())
        } else {
            Ok(n as usize)
        }
    }

    fn write(&self, reply: &[u8]) {
        // SAFETY: the reply is valid for `reply.len()` bytes.
        let n = unsafe { libc::write(self.device.as_raw_fd(), reply.as_ptr().cast(), reply.len()) };
        if n < 0 {
            // ENOENT: the request was interrupted or its connection aborted.
            let e = backing::last_errno();
            if e != libc::ENOENT {
                log::warn!("nfs emulation: replying on /dev/fuse failed: errno {e}");
            }
        }
    }
}
