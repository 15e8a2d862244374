//! The operations on open files and directories: OPEN, CREATE, READ, WRITE,
//! FLUSH, FSYNC, LSEEK, FALLOCATE, RELEASE, and OPENDIR, READDIR,
//! READDIRPLUS, FSYNCDIR, RELEASEDIR. Each handle is a real descriptor of
//! the backing file, held from open to release and no longer. Nothing here
//! waits or counts: the network is the worker's business.

use super::abi::{self, Dirent, EntryOut, Request};
use super::backing::{self, Result, Target};
use super::reply::Reply;
use super::tree::{own_new, Export};
use std::ffi::CStr;
use std::sync::Arc;

/// Open flags the kernel passes that must not reach the backing open:
/// creation is CREATE's business, and direct I/O would demand aligned
/// buffers of this server (the client side still does its own direct I/O).
const NOT_PASSED: i32 = libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | libc::O_DIRECT;

/// `struct linux_dirent64`: ino, off, reclen, type, then the name.
const RAW_NAME_AT: usize = 19;

impl Export {
    pub(super) fn open(&self, req: &Request, out: &mut Reply, dir: bool) -> Result<()> {
        let arg = req.arg::<abi::OpenIn>()?;
        let flags = if dir {
            libc::O_RDONLY | libc::O_DIRECTORY
        } else {
            arg.flags as i32 & !NOT_PASSED
        };
        let id = req.header.nodeid;
        let Target::At(parent, name) = self.locate(id)?.0 else {
            // Open again a file whose every name is gone: NFS cannot either.
            return Err(libc::ESTALE);
        };
        let fd = backing::open_at(&parent, &name, flags | libc::O_NOFOLLOW, 0)?;
        let fh = self.nodes.open(id, Arc::new(fd));
        out.push(&abi::OpenOut {
            fh,
            ..abi::OpenOut::default()
        });
        Ok(())
    }

    pub(super) fn create(&self, req: &Request, out: &mut Reply) -> Result<()> {
        let (arg, rest) = req.arg_and_rest::<abi::CreateIn>()?;
        let (name, _) = abi::name(rest)?;
        let parent = req.header.nodeid;
        let dir = self.nodes.dir(parent)?;
        let parent_st = backing::stat_fd(&dir)?;
        let flags = (arg.flags as i32 & !NOT_PASSED) | libc::O_NOFOLLOW;
        let mode = arg.mode & 0o7777;
        // Exclusive first, to know whether this call made the file: one the
        // kernel did not know of keeps its owner and mode.
        let excl = libc::O_CREAT | libc::O_EXCL;
        let (fd, made) = match backing::open_at(&dir, name, flags | excl, mode) {
            Ok(fd) => (Arc::new(fd), true),
            Err(libc::EEXIST) if arg.flags as i32 & libc::O_EXCL == 0 => {
                (Arc::new(backing::open_at(&dir, name, flags, 0)?), false)
            }
            Err(e) => return Err(e),
        };
        if made {
            own_new(
                &Target::Open(fd.clone()),
                &req.header,
                &parent_st,
                Some(mode),
            )?;
        }
        let entry = self.enter(parent, &dir, name)?;
        let fh = self.nodes.open(entry.nodeid, fd);
        out.push(&entry);
        out.push(&abi::OpenOut {
            fh,
            ..abi::OpenOut::default()
        });
        Ok(())
    }

    pub(super) fn read(&self, req: &Request, out: &mut Reply) -> Result<()> {
        let arg = req.arg::<abi::ReadIn>()?;
        let fd = self.nodes.handle(arg.fh)?;
        out.fill(arg.size as usize, |buf| {
            backing::pread(&fd, buf, arg.offset)
        })?;
        Ok(())
    }

    pub(super) fn write(&self, req: &Request, out: &mut Reply) -> Result<()> {
        let (arg, data) = req.arg_and_rest::<abi::ReadIn>()?;
        let data = data.get(..arg.size as usize).ok_or(libc::EINVAL)?;
        let fd = self.nodes.handle(arg.fh)?;
        let written = backing::pwrite(&fd, data, arg.offset)?;
        out.push(&abi::WriteOut {
            size: written as u32,
            padding: 0,
        });
        Ok(())
    }

    /// FSYNC and FSYNCDIR.
    pub(super) fn fsync(&self, req: &Request) -> Result<()> {
        let arg = req.arg::<abi::FsyncIn>()?;
        let fd = self.nodes.handle(arg.fh)?;
        backing::sync(&fd, arg.fsync_flags & abi::FSYNC_FDATASYNC != 0)
    }

    /// RELEASE and RELEASEDIR: the descriptor closes once no request in
    /// flight still uses it.
    pub(super) fn release(&self, req: &Request) -> Result<()> {
        let arg = req.arg::<abi::ReleaseIn>()?;
        self.nodes.release(arg.fh);
        Ok(())
    }

    /// Only SEEK_DATA and SEEK_HOLE reach the server; the kernel does the
    /// others itself.
    pub(super) fn lseek(&self, req: &Request, out: &mut Reply) -> Result<()> {
        let arg = req.arg::<abi::LseekIn>()?;
        let fd = self.nodes.handle(arg.fh)?;
        let offset = backing::seek(&fd, arg.offset, arg.whence as i32)?;
        out.push(&abi::LseekOut { offset });
        Ok(())
    }

    pub(super) fn fallocate(&self, req: &Request) -> Result<()> {
        let arg = req.arg::<abi::FallocateIn>()?;
        let fd = self.nodes.handle(arg.fh)?;
        backing::allocate(&fd, arg.mode as i32, arg.offset, arg.length)
    }

    /// READDIR, or READDIRPLUS (`plus`), which also looks every entry up
    /// (but "." and "..") as an NFS READDIRPLUS returns attributes.
    ///
    /// The offset of an entry is the backing directory's own cookie for the
    /// position after it, so a reply cut short resumes where it stopped.
    pub(super) fn readdir(&self, req: &Request, out: &mut Reply, plus: bool) -> Result<()> {
        let arg = req.arg::<abi::ReadIn>()?;
        let fd = self.nodes.handle(arg.fh)?;
        let size = arg.size as usize;
        backing::seek(&fd, arg.offset, libc::SEEK_SET)?;
        let mut raw = vec![0u8; size.max(4096)];
        let got = backing::getdents(&fd, &mut raw)?;
        let mut at = 0;
        while at + RAW_NAME_AT < got {
            let record = &raw[at..got];
            let field =
                |i: usize| u64::from_ne_bytes(record[i..i + 8].try_into().unwrap_or_default());
            let reclen = usize::from(u16::from_ne_bytes([record[16], record[17]]));
            let Some(Ok(name)) = (record.get(RAW_NAME_AT..reclen)).map(CStr::from_bytes_until_nul)
            else {
                return Err(libc::EIO);
            };
            let namelen = name.to_bytes().len();
            let padded = (size_of::<Dirent>() + namelen).next_multiple_of(8);
            let needed = padded + if plus { size_of::<EntryOut>() } else { 0 };
            if out.len() + needed > size {
                break;
            }
            if plus {
                let dots = matches!(name.to_bytes(), b"." | b"..");
                // An entry gone since the listing, or not statable, goes out
                // without attributes (node id 0), which the kernel skips.
                let entry = (!dots)
                    .then(|| self.enter(req.header.nodeid, &fd, name).ok())
                    .flatten();
                out.push(&entry.unwrap_or_default());
            }
            out.push(&Dirent {
                ino: field(0),
                off: field(8),
                namelen: namelen as u32,
                kind: u32::from(record[18]),
            });
            out.push_bytes(name.to_bytes());
            out.push_bytes(&[0; 8][..padded - size_of::<Dirent>() - namelen]);
            at += reclen;
        }
        Ok(())
    }
}
