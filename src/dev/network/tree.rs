//! The exported tree as FUSE sees it: finding a node's backing file, and the
//! operations that add, remove and move names (LOOKUP, FORGET, MKNOD, MKDIR,
//! SYMLINK, LINK, UNLINK, RMDIR, RENAME). New files get the caller's owner,
//! as an NFS server with `no_root_squash` creates them. Nothing here waits
//! or counts: the network is the worker's business.

use super::abi::{self, ForgetOne, InHeader, Request};
use super::backing::{self, Result, Target};
use super::nodes::{Inode, Nodes};
use super::reply::{Reply, Validity};
use libc::{S_IFDIR, S_IFMT};
use std::ffi::CStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

const RENAME_EXCHANGE: u32 = 1 << 1;

/// The backing directory being served, and what the kernel knows of it.
pub(super) struct Export {
    pub(super) nodes: Nodes,
    pub(super) root: Arc<OwnedFd>,
    pub(super) valid: Validity,
}

pub(super) fn inode_of(st: &libc::stat) -> Inode {
    (st.st_dev, st.st_ino)
}

fn is_dir(st: &libc::stat) -> bool {
    st.st_mode & S_IFMT == S_IFDIR
}

impl Export {
    /// ESTALE once the export's directory itself is removed, as an NFS
    /// client answers for a removed export.
    pub(super) fn check_root(&self) -> Result<()> {
        if backing::stat_fd(&self.root)?.st_nlink == 0 {
            return Err(libc::ESTALE);
        }
        Ok(())
    }

    /// Node `id`'s backing file, by the first of its names that still leads
    /// to it, else by one of its open descriptors: ESTALE when neither is
    /// left, like a file handle whose file is gone.
    pub(super) fn locate(&self, id: u64) -> Result<(Target, libc::stat)> {
        let places = self.nodes.places(id)?;
        for (dir, name) in places.spots {
            let Ok(st) = backing::stat_at(&dir, &name) else {
                continue;
            };
            if inode_of(&st) == places.inode && !(is_dir(&st) && st.st_nlink == 0) {
                return Ok((Target::At(dir, name), st));
            }
        }
        if let Some(fd) = places.open {
            let st = backing::stat_fd(&fd)?;
            return Ok((Target::Open(fd), st));
        }
        Err(libc::ESTALE)
    }

    /// `name` in directory node `parent` (reached through `dir`) as an
    /// entry for the kernel, which then holds one more lookup of its node.
    pub(super) fn enter(
        &self,
        parent: u64,
        dir: &impl AsRawFd,
        name: &CStr,
    ) -> Result<abi::EntryOut> {
        let mut st = backing::stat_at(dir, name)?;
        let mut dir_fd = None;
        if is_dir(&st) {
            let fd = backing::open_dir_path(dir, name)?;
            st = backing::stat_fd(&fd)?;
            dir_fd = Some(fd);
        }
        let id = (self.nodes).enter(parent, name, inode_of(&st), st.st_mode & S_IFMT, dir_fd)?;
        Ok(self.valid.entry(id, &st))
    }

    pub(super) fn lookup(&self, req: &Request, out: &mut Reply) -> Result<()> {
        let (name, _) = abi::name(req.body)?;
        let parent = req.header.nodeid;
        let dir = self.nodes.dir(parent)?;
        match self.enter(parent, &dir, name) {
            Ok(entry) => out.push(&entry),
            Err(libc::ENOENT) => out.push(&self.valid.negative()),
            Err(e) => return Err(e),
        }
        Ok(())
    }

    pub(super) fn forget(&self, req: &Request) {
        if let Ok(arg) = req.arg::<abi::ForgetIn>() {
            self.nodes.forget(req.header.nodeid, arg.nlookup);
        }
    }

    pub(super) fn batch_forget(&self, req: &Request) {
        let Ok((arg, mut rest)) = req.arg_and_rest::<abi::BatchForgetIn>() else {
            return;
        };
        for _ in 0..arg.count {
            let Some(one) = abi::read::<ForgetOne>(rest) else {
                return;
            };
            self.nodes.forget(one.nodeid, one.nlookup);
            rest = &rest[size_of::<ForgetOne>()..];
        }
    }

    pub(super) fn mknod(&self, req: &Request, out: &mut Reply) -> Result<()> {
        let (arg, rest) = req.arg_and_rest::<abi::MknodIn>()?;
        let (name, _) = abi::name(rest)?;
        self.make(req, name, Some(arg.mode), out, |dir| {
            backing::mknod_at(dir, name, arg.mode, u64::from(arg.rdev))
        })
    }

    pub(super) fn mkdir(&self, req: &Request, out: &mut Reply) -> Result<()> {
        let (arg, rest) = req.arg_and_rest::<abi::MkdirIn>()?;
        let (name, _) = abi::name(rest)?;
        let mode = arg.mode & 0o7777;
        self.make(req, name, Some(mode), out, |dir| {
            backing::mkdir_at(dir, name, mode)
        })
    }

    pub(super) fn symlink(&self, req: &Request, out: &mut Reply) -> Result<()> {
        let (name, rest) = abi::name(req.body)?;
        let (target, _) = abi::name(rest)?;
        self.make(req, name, None, out, |dir| {
            backing::symlink_at(target, dir, name)
        })
    }

    /// Creates `name` in the request's directory with `create`, gives it the
    /// caller's owner and `mode` (when it has one: links do not), and
    /// replies with its entry.
    fn make(
        &self,
        req: &Request,
        name: &CStr,
        mode: Option<u32>,
        out: &mut Reply,
        create: impl FnOnce(&OwnedFd) -> Result<()>,
    ) -> Result<()> {
        let parent = req.header.nodeid;
        let dir = self.nodes.dir(parent)?;
        let parent_st = backing::stat_fd(&dir)?;
        create(&dir)?;
        let made = Target::At(dir.clone(), name.to_owned());
        own_new(&made, &req.header, &parent_st, mode)?;
        out.push(&self.enter(parent, &dir, name)?);
        Ok(())
    }

    pub(super) fn link(&self, req: &Request, out: &mut Reply) -> Result<()> {
        let (arg, rest) = req.arg_and_rest::<abi::LinkIn>()?;
        let (name, _) = abi::name(rest)?;
        let parent = req.header.nodeid;
        let dir = self.nodes.dir(parent)?;
        match self.locate(arg.oldnodeid)?.0 {
            Target::At(from_dir, from) => backing::link_at((&from_dir, &from), (&dir, name), 0)?,
            // Its last name is gone but it is open: link the descriptor.
            Target::Open(fd) => {
                backing::link_at((&fd, c""), (&dir, name), libc::AT_EMPTY_PATH)?;
            }
        }
        out.push(&self.enter(parent, &dir, name)?);
        Ok(())
    }

    pub(super) fn unlink(&self, req: &Request, flags: i32) -> Result<()> {
        let (name, _) = abi::name(req.body)?;
        let parent = req.header.nodeid;
        let dir = self.nodes.dir(parent)?;
        let gone = backing::stat_at(&dir, name)?;
        backing::unlink_at(&dir, name, flags)?;
        self.nodes.unname(parent, name, inode_of(&gone));
        Ok(())
    }

    /// RENAME, or RENAME2 (`with_flags`) with any flags the backing file
    /// system takes (NOREPLACE, EXCHANGE, WHITEOUT).
    pub(super) fn rename(&self, req: &Request, with_flags: bool) -> Result<()> {
        let (to_id, flags, rest) = if with_flags {
            let (arg, rest) = req.arg_and_rest::<abi::Rename2In>()?;
            (arg.newdir, arg.flags, rest)
        } else {
            let (arg, rest) = req.arg_and_rest::<abi::RenameIn>()?;
            (arg.newdir, 0, rest)
        };
        let (from_name, rest) = abi::name(rest)?;
        let (to_name, _) = abi::name(rest)?;
        let from_id = req.header.nodeid;
        let from_dir = self.nodes.dir(from_id)?;
        let to_dir = self.nodes.dir(to_id)?;
        let moved = inode_of(&backing::stat_at(&from_dir, from_name)?);
        let replaced = backing::stat_at(&to_dir, to_name)
            .ok()
            .map(|st| inode_of(&st));
        backing::rename_at((&from_dir, from_name), (&to_dir, to_name), flags)?;
        let (from, to) = ((from_id, from_name), (to_id, to_name));
        match replaced {
            // Two names of one file: the rename changed nothing.
            Some(other) if other == moved => {}
            Some(other) if flags & RENAME_EXCHANGE != 0 => {
                self.nodes.rename(from, to, moved);
                self.nodes.rename(to, from, other);
            }
            Some(other) => {
                self.nodes.unname(to.0, to.1, other);
                self.nodes.rename(from, to, moved);
            }
            None => self.nodes.rename(from, to, moved),
        }
        Ok(())
    }
}

/// Gives a file this server just created as root the owner the caller
/// would have given it: the caller's uid, and its gid unless the directory
/// is set-group-ID (then the directory's, which creation already gave it);
/// then the mode asked for, which this process's umask may have narrowed
/// (the kernel has applied the caller's umask already).
pub(super) fn own_new(
    made: &Target,
    header: &InHeader,
    parent: &libc::stat,
    mode: Option<u32>,
) -> Result<()> {
    let mut st = made.stat()?;
    let gid = if parent.st_mode & libc::S_ISGID != 0 {
        st.st_gid
    } else {
        header.gid
    };
    if (st.st_uid, st.st_gid) != (header.uid, gid) {
        made.chown(header.uid, gid)?;
        st = made.stat()?;
    }
    let Some(mode) = mode else {
        return Ok(());
    };
    // A directory inherits set-group-ID from its parent; leave that be.
    let asked = if is_dir(&st) { 0o1777 } else { 0o7777 };
    if st.st_mode & asked != mode & asked {
        made.chmod((st.st_mode & 0o7777 & !asked) | (mode & asked))?;
    }
    Ok(())
}
