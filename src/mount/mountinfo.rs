//! Pure parser of `/proc/<pid>/mountinfo` (proc(5)). It owns the line format
//! only: octal escapes, the variable run of optional fields before ` - `, and
//! byte-exact paths. It must not touch the filesystem; lookups that need the
//! real path live in `mount::MountTable`.

use crate::{Error, Result};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// One mount as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// `major:minor` of the filesystem. Bind mounts of one filesystem share
    /// it, which is why `st_dev` comparison cannot detect them.
    pub device: String,
    /// The directory of the filesystem that is mounted here (`/` unless bind).
    pub root: PathBuf,
    pub mount_point: PathBuf,
    /// Per-mount options (`ro`/`rw`, `nosuid`, …), not the superblock's.
    pub mount_options: Vec<String>,
    pub fs_type: String,
    pub source: String,
}

impl MountEntry {
    /// Read-only at the mount level, which is what a `MS_RDONLY` bind remount
    /// changes (the NFS superblock stays `rw`).
    pub fn is_read_only(&self) -> bool {
        self.mount_options.iter().any(|o| o == "ro")
    }
}

/// Parses a whole mountinfo file. Any malformed line fails the parse: a
/// skipped line could hide a mount and make a mounted path look free.
pub fn parse(text: &[u8]) -> Result<Vec<MountEntry>> {
    text.split(|b| *b == b'\n')
        .enumerate()
        .filter(|(_, line)| !line.is_empty())
        .map(|(n, line)| {
            parse_line(line).ok_or_else(|| {
                Error::Internal(format!(
                    "malformed mountinfo line {}: {:?}",
                    n + 1,
                    String::from_utf8_lossy(line)
                ))
            })
        })
        .collect()
}

fn parse_line(line: &[u8]) -> Option<MountEntry> {
    let mut fields = line.split(|b| *b == b' ');
    let _mount_id = fields.next()?;
    let _parent_id = fields.next()?;
    let device = text(fields.next()?)?;
    let root = unescape(fields.next()?);
    let mount_point = unescape(fields.next()?);
    let mount_options = text(fields.next()?)?
        .split(',')
        .map(str::to_string)
        .collect();
    // Zero or more optional fields (`shared:1`, `master:2`, …) end at "-".
    fields.by_ref().find(|f| *f == b"-")?;
    let fs_type = text(fields.next()?)?;
    let source =
        String::from_utf8_lossy(&unescape(fields.next()?).into_os_string().into_vec()).into_owned();
    Some(MountEntry {
        device,
        root,
        mount_point,
        mount_options,
        fs_type,
        source,
    })
}

fn text(field: &[u8]) -> Option<String> {
    if field.is_empty() {
        return None;
    }
    String::from_utf8(field.to_vec()).ok()
}

/// Undoes the kernel's `\ooo` escaping of space, tab, newline and backslash.
/// Anything that is not a backslash plus three octal digits is kept as is.
fn unescape(field: &[u8]) -> PathBuf {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'\\' && i + 3 < field.len() {
            let digits = &field[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(byte) = u8::try_from(value) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(field[i]);
        i += 1;
    }
    OsString::from_vec(out).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A real table from a node: root fs, proc, a kubelet staging NFS mount,
    /// a pod bind of it made read-only, a path with a space and a tab, and a
    /// bind of a subdirectory of the root filesystem.
    const FIXTURE: &[u8] = b"\
22 27 0:21 / /proc rw,relatime shared:5 - proc proc rw
27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
80 27 0:53 / /var/lib/kubelet/plugins/kubernetes.io/csi/linodenfs.csi.linode.com/abc/globalmount rw,relatime shared:40 master:3 - nfs4 prod-7b.nfs.us-east.linode.com:/pvc-abc rw,vers=4.2,rsize=1048576,xprtsec=mtls
81 27 0:53 / /var/lib/kubelet/pods/p1/volumes/kubernetes.io~csi/pvc-abc/mount ro,relatime shared:40 - nfs4 prod-7b.nfs.us-east.linode.com:/pvc-abc rw,vers=4.2
90 27 254:0 /srv/data\\040dir /mnt/with\\040space\\011tab rw,relatime - ext4 /dev/vda rw,discard
91 27 0:60 / /mnt/back\\134slash rw - tmpfs my\\040tmpfs rw,size=1024k
";

    fn table() -> Vec<MountEntry> {
        parse(FIXTURE).expect("fixture parses")
    }

    #[test]
    fn parses_every_field_of_an_nfs_mount() {
        let t = table();
        assert_eq!(t.len(), 6);
        let nfs = &t[2];
        assert_eq!(nfs.device, "0:53");
        assert_eq!(nfs.root, Path::new("/"));
        assert_eq!(
            nfs.mount_point,
            Path::new("/var/lib/kubelet/plugins/kubernetes.io/csi/linodenfs.csi.linode.com/abc/globalmount")
        );
        assert_eq!(nfs.mount_options, ["rw", "relatime"]);
        assert_eq!(nfs.fs_type, "nfs4");
        assert_eq!(nfs.source, "prod-7b.nfs.us-east.linode.com:/pvc-abc");
        assert!(!nfs.is_read_only());
    }

    #[test]
    fn optional_fields_of_any_count_are_skipped() {
        let t = table();
        // two optional fields, one, and none all land on the same columns
        assert_eq!(t[2].fs_type, "nfs4");
        assert_eq!(t[1].fs_type, "ext4");
        assert_eq!(t[4].fs_type, "ext4");
    }

    #[test]
    fn bind_of_the_same_filesystem_is_its_own_entry_with_the_shared_device() {
        let t = table();
        assert_eq!(t[2].device, t[3].device);
        assert_ne!(t[2].mount_point, t[3].mount_point);
        assert!(
            t[3].is_read_only(),
            "per-mount ro, although the superblock is rw"
        );
        // a bind of a subdirectory shows the directory as its root
        assert_eq!(t[4].device, t[1].device);
        assert_eq!(t[4].root, Path::new("/srv/data dir"));
    }

    #[test]
    fn octal_escapes_are_decoded_in_paths_and_sources() {
        let t = table();
        assert_eq!(t[4].mount_point, Path::new("/mnt/with space\ttab"));
        assert_eq!(t[5].mount_point, Path::new("/mnt/back\\slash"));
        assert_eq!(t[5].source, "my tmpfs");
    }

    #[test]
    fn a_backslash_without_three_octal_digits_is_literal() {
        assert_eq!(unescape(b"/a\\x"), Path::new("/a\\x"));
        assert_eq!(unescape(b"/a\\04"), Path::new("/a\\04"));
        assert_eq!(unescape(b"/a\\089"), Path::new("/a\\089"));
        assert_eq!(unescape(b"\\040"), Path::new(" "));
    }

    #[test]
    fn non_utf8_paths_survive_byte_for_byte() {
        let t = parse(b"1 0 0:1 / /mnt/\xff\\040x rw - tmpfs none rw\n").unwrap();
        assert_eq!(
            t[0].mount_point.as_os_str().as_encoded_bytes(),
            b"/mnt/\xff x"
        );
    }

    #[test]
    fn malformed_lines_fail_the_whole_parse() {
        for bad in [
            &b"1 0 0:1 / /mnt rw tmpfs none rw\n"[..], // no separator
            b"1 0 0:1 / /mnt\n",                       // truncated
            b"1 0 0:1 / /mnt rw -\n",                  // nothing after separator
        ] {
            let err = parse(bad).unwrap_err();
            assert!(matches!(err, Error::Internal(_)), "{err:?}");
        }
    }

    #[test]
    fn missing_super_options_are_tolerated_and_empty_input_is_empty() {
        let t = parse(b"1 0 0:1 / /mnt rw - tmpfs none\n").unwrap();
        assert_eq!(t[0].source, "none");
        assert!(parse(b"").unwrap().is_empty());
    }

    #[test]
    fn the_running_kernels_table_parses() {
        let text = std::fs::read("/proc/self/mountinfo").unwrap();
        let t = parse(&text).unwrap();
        assert!(t.iter().any(|e| e.mount_point == Path::new("/")));
    }
}
