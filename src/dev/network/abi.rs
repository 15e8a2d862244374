//! The FUSE kernel ABI this server speaks (protocol 7.38, `linux/fuse.h`):
//! opcodes, flags and the `#[repr(C)]` structs of requests and replies, and
//! the only code that turns bytes into those structs and back. It owns no
//! state and makes no system calls.

/// The protocol this server was written against; a newer kernel talks down
/// to it, as the INIT handshake lets it.
pub(super) const MAJOR: u32 = 7;
pub(super) const MINOR: u32 = 38;

pub(super) const ROOT_ID: u64 = 1;

pub(super) const LOOKUP: u32 = 1;
pub(super) const FORGET: u32 = 2;
pub(super) const GETATTR: u32 = 3;
pub(super) const SETATTR: u32 = 4;
pub(super) const READLINK: u32 = 5;
pub(super) const SYMLINK: u32 = 6;
pub(super) const MKNOD: u32 = 8;
pub(super) const MKDIR: u32 = 9;
pub(super) const UNLINK: u32 = 10;
pub(super) const RMDIR: u32 = 11;
pub(super) const RENAME: u32 = 12;
pub(super) const LINK: u32 = 13;
pub(super) const OPEN: u32 = 14;
pub(super) const READ: u32 = 15;
pub(super) const WRITE: u32 = 16;
pub(super) const STATFS: u32 = 17;
pub(super) const RELEASE: u32 = 18;
pub(super) const FSYNC: u32 = 20;
pub(super) const FLUSH: u32 = 25;
pub(super) const INIT: u32 = 26;
pub(super) const OPENDIR: u32 = 27;
pub(super) const READDIR: u32 = 28;
pub(super) const RELEASEDIR: u32 = 29;
pub(super) const FSYNCDIR: u32 = 30;
pub(super) const ACCESS: u32 = 34;
pub(super) const CREATE: u32 = 35;
pub(super) const INTERRUPT: u32 = 36;
pub(super) const DESTROY: u32 = 38;
pub(super) const BATCH_FORGET: u32 = 42;
pub(super) const FALLOCATE: u32 = 43;
pub(super) const READDIRPLUS: u32 = 44;
pub(super) const RENAME2: u32 = 45;
pub(super) const LSEEK: u32 = 46;

/// Every opcode's name by number, as the counts report them; "" for numbers
/// the protocol never used. Opcodes this server does not serve are named too,
/// so a count shows what a client tried.
pub(super) const OP_NAMES: [&str; 53] = [
    "",
    "lookup",
    "forget",
    "getattr",
    "setattr",
    "readlink",
    "symlink",
    "",
    "mknod",
    "mkdir",
    "unlink",
    "rmdir",
    "rename",
    "link",
    "open",
    "read",
    "write",
    "statfs",
    "release",
    "",
    "fsync",
    "setxattr",
    "getxattr",
    "listxattr",
    "removexattr",
    "flush",
    "init",
    "opendir",
    "readdir",
    "releasedir",
    "fsyncdir",
    "getlk",
    "setlk",
    "setlkw",
    "access",
    "create",
    "interrupt",
    "bmap",
    "destroy",
    "ioctl",
    "poll",
    "notify_reply",
    "batch_forget",
    "fallocate",
    "readdirplus",
    "rename2",
    "lseek",
    "copy_file_range",
    "setupmapping",
    "removemapping",
    "syncfs",
    "tmpfile",
    "statx",
];

/// An opcode's name, "unknown" for one the protocol does not name.
pub(super) fn op_name(opcode: u32) -> &'static str {
    match OP_NAMES.get(opcode as usize) {
        Some(name) if !name.is_empty() => name,
        _ => "unknown",
    }
}

pub(super) const ASYNC_READ: u32 = 1 << 0;
pub(super) const ATOMIC_O_TRUNC: u32 = 1 << 3;
pub(super) const BIG_WRITES: u32 = 1 << 5;
pub(super) const AUTO_INVAL_DATA: u32 = 1 << 12;
pub(super) const DO_READDIRPLUS: u32 = 1 << 13;
pub(super) const READDIRPLUS_AUTO: u32 = 1 << 14;
pub(super) const PARALLEL_DIROPS: u32 = 1 << 18;
pub(super) const MAX_PAGES: u32 = 1 << 22;
pub(super) const CACHE_SYMLINKS: u32 = 1 << 23;

pub(super) const FATTR_MODE: u32 = 1 << 0;
pub(super) const FATTR_UID: u32 = 1 << 1;
pub(super) const FATTR_GID: u32 = 1 << 2;
pub(super) const FATTR_SIZE: u32 = 1 << 3;
pub(super) const FATTR_ATIME: u32 = 1 << 4;
pub(super) const FATTR_MTIME: u32 = 1 << 5;
pub(super) const FATTR_FH: u32 = 1 << 6;
pub(super) const FATTR_ATIME_NOW: u32 = 1 << 7;
pub(super) const FATTR_MTIME_NOW: u32 = 1 << 8;

pub(super) const GETATTR_FH: u32 = 1 << 0;
pub(super) const FSYNC_FDATASYNC: u32 = 1 << 0;

/// Marks the structs that may be copied to and from the wire as bytes.
///
/// # Safety
/// Implementors are `#[repr(C)]`, have no padding bytes, and every bit
/// pattern is a valid value of them.
pub(super) unsafe trait Pod: Copy + Default {}

/// The struct at the start of `bytes`, or `None` when they are too short.
pub(super) fn read<T: Pod>(bytes: &[u8]) -> Option<T> {
    (bytes.len() >= size_of::<T>())
        // SAFETY: the length was checked, the read is unaligned-safe, and
        // `T: Pod` makes any bytes a valid `T`.
        .then(|| unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// Like `read`, but zero-fills a struct the sender sent shorter (INIT's,
/// which older kernels send in its first, smaller shape).
pub(super) fn read_prefix<T: Pod>(bytes: &[u8]) -> T {
    let mut value = T::default();
    let n = bytes.len().min(size_of::<T>());
    // SAFETY: at most `size_of::<T>()` bytes are copied into `value`, and
    // `T: Pod` makes any bytes a valid `T`.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), (&mut value as *mut T).cast::<u8>(), n)
    };
    value
}

pub(super) fn bytes_of<T: Pod>(value: &T) -> &[u8] {
    // SAFETY: `T: Pod` has no padding, so all its `size_of` bytes are
    // initialized, and they live as long as the borrow.
    unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), size_of::<T>()) }
}

macro_rules! wire_structs {
    ($($(#[$meta:meta])* pub(super) struct $name:ident { $(pub(super) $field:ident: $ty:ty,)* } = $size:expr;)*) => {$(
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Default)]
        // The wire fixes every field, including those this server never reads.
        #[allow(dead_code)]
        pub(super) struct $name { $(pub(super) $field: $ty,)* }
        // SAFETY: `#[repr(C)]` of integer fields laid out without holes (the
        // size assertion below catches padding), valid for any bits.
        unsafe impl Pod for $name {}
        const _: () = assert!(size_of::<$name>() == $size);
    )*};
}

wire_structs! {
    pub(super) struct InHeader {
        pub(super) len: u32,
        pub(super) opcode: u32,
        pub(super) unique: u64,
        pub(super) nodeid: u64,
        pub(super) uid: u32,
        pub(super) gid: u32,
        pub(super) pid: u32,
        pub(super) total_extlen: u16,
        pub(super) padding: u16,
    } = 40;
    pub(super) struct OutHeader {
        pub(super) len: u32,
        pub(super) error: i32,
        pub(super) unique: u64,
    } = 16;
    pub(super) struct Attr {
        pub(super) ino: u64,
        pub(super) size: u64,
        pub(super) blocks: u64,
        pub(super) atime: u64,
        pub(super) mtime: u64,
        pub(super) ctime: u64,
        pub(super) atimensec: u32,
        pub(super) mtimensec: u32,
        pub(super) ctimensec: u32,
        pub(super) mode: u32,
        pub(super) nlink: u32,
        pub(super) uid: u32,
        pub(super) gid: u32,
        pub(super) rdev: u32,
        pub(super) blksize: u32,
        pub(super) flags: u32,
    } = 88;
    pub(super) struct EntryOut {
        pub(super) nodeid: u64,
        pub(super) generation: u64,
        pub(super) entry_valid: u64,
        pub(super) attr_valid: u64,
        pub(super) entry_valid_nsec: u32,
        pub(super) attr_valid_nsec: u32,
        pub(super) attr: Attr,
    } = 128;
    pub(super) struct AttrOut {
        pub(super) attr_valid: u64,
        pub(super) attr_valid_nsec: u32,
        pub(super) dummy: u32,
        pub(super) attr: Attr,
    } = 104;
    pub(super) struct InitIn {
        pub(super) major: u32,
        pub(super) minor: u32,
        pub(super) max_readahead: u32,
        pub(super) flags: u32,
        pub(super) flags2: u32,
        pub(super) unused: [u32; 11],
    } = 64;
    pub(super) struct InitOut {
        pub(super) major: u32,
        pub(super) minor: u32,
        pub(super) max_readahead: u32,
        pub(super) flags: u32,
        pub(super) max_background: u16,
        pub(super) congestion_threshold: u16,
        pub(super) max_write: u32,
        pub(super) time_gran: u32,
        pub(super) max_pages: u16,
        pub(super) map_alignment: u16,
        pub(super) flags2: u32,
        pub(super) unused: [u32; 7],
    } = 64;
    pub(super) struct ForgetIn {
        pub(super) nlookup: u64,
    } = 8;
    pub(super) struct ForgetOne {
        pub(super) nodeid: u64,
        pub(super) nlookup: u64,
    } = 16;
    pub(super) struct BatchForgetIn {
        pub(super) count: u32,
        pub(super) dummy: u32,
    } = 8;
    pub(super) struct GetattrIn {
        pub(super) getattr_flags: u32,
        pub(super) dummy: u32,
        pub(super) fh: u64,
    } = 16;
    pub(super) struct SetattrIn {
        pub(super) valid: u32,
        pub(super) padding: u32,
        pub(super) fh: u64,
        pub(super) size: u64,
        pub(super) lock_owner: u64,
        pub(super) atime: u64,
        pub(super) mtime: u64,
        pub(super) ctime: u64,
        pub(super) atimensec: u32,
        pub(super) mtimensec: u32,
        pub(super) ctimensec: u32,
        pub(super) mode: u32,
        pub(super) unused4: u32,
        pub(super) uid: u32,
        pub(super) gid: u32,
        pub(super) unused5: u32,
    } = 88;
    pub(super) struct MknodIn {
        pub(super) mode: u32,
        pub(super) rdev: u32,
        pub(super) umask: u32,
        pub(super) padding: u32,
    } = 16;
    pub(super) struct MkdirIn {
        pub(super) mode: u32,
        pub(super) umask: u32,
    } = 8;
    pub(super) struct RenameIn {
        pub(super) newdir: u64,
    } = 8;
    pub(super) struct Rename2In {
        pub(super) newdir: u64,
        pub(super) flags: u32,
        pub(super) padding: u32,
    } = 16;
    pub(super) struct LinkIn {
        pub(super) oldnodeid: u64,
    } = 8;
    pub(super) struct OpenIn {
        pub(super) flags: u32,
        pub(super) open_flags: u32,
    } = 8;
    pub(super) struct CreateIn {
        pub(super) flags: u32,
        pub(super) mode: u32,
        pub(super) umask: u32,
        pub(super) open_flags: u32,
    } = 16;
    pub(super) struct OpenOut {
        pub(super) fh: u64,
        pub(super) open_flags: u32,
        pub(super) padding: u32,
    } = 16;
    pub(super) struct ReleaseIn {
        pub(super) fh: u64,
        pub(super) flags: u32,
        pub(super) release_flags: u32,
        pub(super) lock_owner: u64,
    } = 24;
    /// READ, READDIR and READDIRPLUS send this, and WRITE its twin
    /// (`fuse_write_in`: the same fields, `write_flags` for `io_flags`).
    pub(super) struct ReadIn {
        pub(super) fh: u64,
        pub(super) offset: u64,
        pub(super) size: u32,
        pub(super) io_flags: u32,
        pub(super) lock_owner: u64,
        pub(super) flags: u32,
        pub(super) padding: u32,
    } = 40;
    pub(super) struct WriteOut {
        pub(super) size: u32,
        pub(super) padding: u32,
    } = 8;
    pub(super) struct Kstatfs {
        pub(super) blocks: u64,
        pub(super) bfree: u64,
        pub(super) bavail: u64,
        pub(super) files: u64,
        pub(super) ffree: u64,
        pub(super) bsize: u32,
        pub(super) namelen: u32,
        pub(super) frsize: u32,
        pub(super) padding: u32,
        pub(super) spare: [u32; 6],
    } = 80;
    /// FSYNC and FSYNCDIR both send this.
    pub(super) struct FsyncIn {
        pub(super) fh: u64,
        pub(super) fsync_flags: u32,
        pub(super) padding: u32,
    } = 16;
    pub(super) struct AccessIn {
        pub(super) mask: u32,
        pub(super) padding: u32,
    } = 8;
    pub(super) struct FallocateIn {
        pub(super) fh: u64,
        pub(super) offset: u64,
        pub(super) length: u64,
        pub(super) mode: u32,
        pub(super) padding: u32,
    } = 32;
    pub(super) struct LseekIn {
        pub(super) fh: u64,
        pub(super) offset: u64,
        pub(super) whence: u32,
        pub(super) padding: u32,
    } = 24;
    pub(super) struct LseekOut {
        pub(super) offset: u64,
    } = 8;
    /// A directory entry's fixed part; its name follows, padded to 8 bytes.
    pub(super) struct Dirent {
        pub(super) ino: u64,
        pub(super) off: u64,
        pub(super) namelen: u32,
        pub(super) kind: u32,
    } = 24;
}

/// One request as read from the device: its header and the bytes after it.
pub(super) struct Request<'a> {
    pub(super) header: InHeader,
    pub(super) body: &'a [u8],
}

impl<'a> Request<'a> {
    /// The request's fixed argument struct.
    pub(super) fn arg<T: Pod>(&self) -> Result<T, i32> {
        read(self.body).ok_or(libc::EINVAL)
    }

    /// The fixed argument struct and the bytes that follow it (names, data).
    pub(super) fn arg_and_rest<T: Pod>(&self) -> Result<(T, &'a [u8]), i32> {
        Ok((self.arg()?, &self.body[size_of::<T>()..]))
    }
}

/// The NUL-terminated name at the start of `bytes`, and what follows it.
pub(super) fn name(bytes: &[u8]) -> Result<(&std::ffi::CStr, &[u8]), i32> {
    let name = std::ffi::CStr::from_bytes_until_nul(bytes).map_err(|_| libc::EINVAL)?;
    Ok((name, &bytes[name.to_bytes().len() + 1..]))
}
