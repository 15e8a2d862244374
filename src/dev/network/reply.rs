//! A reply on its way to the kernel: one reusable buffer per worker with
//! the out header in front, and the conversions of backing `stat` results
//! into the attributes and entries FUSE replies carry. It never writes to
//! the device itself.

use super::abi::{self, Attr, AttrOut, EntryOut, OutHeader, Pod};
use super::backing::{Errno, Result};
use std::time::Duration;

const HEADER: usize = size_of::<OutHeader>();

pub(super) struct Reply(Vec<u8>);

impl Reply {
    pub(super) fn new() -> Self {
        Reply(vec![0; HEADER])
    }

    pub(super) fn clear(&mut self) {
        self.0.truncate(HEADER);
    }

    pub(super) fn push<T: Pod>(&mut self, value: &T) {
        self.0.extend_from_slice(abi::bytes_of(value));
    }

    pub(super) fn push_bytes(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    /// Bytes in the reply after the header so far.
    pub(super) fn len(&self) -> usize {
        self.0.len() - HEADER
    }

    /// Lets `fill` write up to `max` bytes straight into the reply (a read,
    /// a link target) and keeps the number it reports.
    pub(super) fn fill(
        &mut self,
        max: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<usize>,
    ) -> Result<usize> {
        let start = self.0.len();
        self.0.resize(start + max, 0);
        let got = fill(&mut self.0[start..]);
        self.0.truncate(start + *got.as_ref().unwrap_or(&0));
        got
    }

    /// The whole reply to request `unique`: the body written so far, or only
    /// the header when it failed with `error`.
    pub(super) fn seal(&mut self, unique: u64, error: Option<Errno>) -> &[u8] {
        if error.is_some() {
            self.clear();
        }
        let header = OutHeader {
            len: self.0.len() as u32,
            error: error.map_or(0, |e| -e),
            unique,
        };
        self.0[..HEADER].copy_from_slice(abi::bytes_of(&header));
        &self.0
    }
}

/// How long the kernel may trust a name or attributes this server sent, as
/// an NFS client caches them.
#[derive(Clone, Copy)]
pub(super) struct Validity {
    secs: u64,
    nanos: u32,
}

impl Validity {
    pub(super) fn new(timeout: Duration) -> Self {
        Validity {
            secs: timeout.as_secs(),
            nanos: timeout.subsec_nanos(),
        }
    }

    pub(super) fn entry(self, nodeid: u64, st: &libc::stat) -> EntryOut {
        EntryOut {
            nodeid,
            generation: 0,
            entry_valid: self.secs,
            attr_valid: self.secs,
            entry_valid_nsec: self.nanos,
            attr_valid_nsec: self.nanos,
            attr: attr_of(st),
        }
    }

    /// A name that does not exist, cached as long as one that does.
    pub(super) fn negative(self) -> EntryOut {
        EntryOut {
            entry_valid: self.secs,
            entry_valid_nsec: self.nanos,
            ..EntryOut::default()
        }
    }

    pub(super) fn attr(self, st: &libc::stat) -> AttrOut {
        AttrOut {
            attr_valid: self.secs,
            attr_valid_nsec: self.nanos,
            dummy: 0,
            attr: attr_of(st),
        }
    }
}

/// The backing inode number goes out as the file's `ino`, so hard links
/// show as one file to `cp -a` and `find`, whatever the node ids are.
pub(super) fn attr_of(st: &libc::stat) -> Attr {
    Attr {
        ino: st.st_ino,
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: st.st_atime as u64,
        mtime: st.st_mtime as u64,
        ctime: st.st_ctime as u64,
        atimensec: st.st_atime_nsec as u32,
        mtimensec: st.st_mtime_nsec as u32,
        ctimensec: st.st_ctime_nsec as u32,
        mode: st.st_mode,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        // The kernel decodes this as a 32-bit `new_encode_dev`, which the
        // C library's encoding matches for majors below 4096.
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}
