//! What the copy keeps of an entry's status, and the resume check built
//! on it: whether an entry an earlier attempt made can stand for its
//! source. Pure values: nothing here touches a filesystem.

use crate::fs_tree::dir::Identity;

/// What is copied of an entry's status.
#[derive(Clone, Copy)]
pub(super) struct Attrs {
    mode: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    size: i64,
    atime: libc::timespec,
    mtime: libc::timespec,
}

impl Attrs {
    pub(super) fn of(st: &libc::stat) -> Attrs {
        Attrs {
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size,
            atime: libc::timespec {
                tv_sec: st.st_atime,
                tv_nsec: st.st_atime_nsec,
            },
            mtime: libc::timespec {
                tv_sec: st.st_mtime,
                tv_nsec: st.st_mtime_nsec,
            },
        }
    }

    pub(super) fn times(&self) -> [libc::timespec; 2] {
        [self.atime, self.mtime]
    }

    pub(super) fn kind(&self) -> u32 {
        self.mode & libc::S_IFMT
    }

    pub(super) fn permissions(&self) -> u32 {
        self.mode & 0o7777
    }

    /// Whether an entry with these attributes can stand for one with
    /// `other`'s (the access time is not compared: reading changes it).
    pub(super) fn same(&self, other: &Attrs) -> bool {
        self.mode == other.mode
            && self.uid == other.uid
            && self.gid == other.gid
            && self.size == other.size
            && self.mtime.tv_sec == other.mtime.tv_sec
            && self.mtime.tv_nsec == other.mtime.tv_nsec
    }
}

pub(super) fn identity(st: &libc::stat) -> Identity {
    Identity {
        dev: st.st_dev,
        ino: st.st_ino,
    }
}
