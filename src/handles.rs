//! CSI handles and backend labels: the composite volume and snapshot ids
//! (a whole filesystem `{s}/{f}`, a directory of a shared filesystem
//! `{s}/{f}/{name}`), the deterministic label and directory name a CSI name
//! maps to, and the volume-context keys the controller writes and the node
//! reads. Pure functions only: nothing here touches a path on disk.

mod snapshot;

pub use snapshot::{DirSnapshotId, GroupSnapshotId, SnapshotHandle};

use crate::Error;
use std::fmt;

/// Longest label the NFS API accepts, in bytes.
pub const MAX_LABEL_BYTES: usize = 63;

pub const CTX_SPACE_ID: &str = "space-id";
pub const CTX_FILESYSTEM_ID: &str = "filesystem-id";
pub const CTX_MOUNT_TARGET: &str = "mount-target";
pub const CTX_MOUNT_TARGET_IPS: &str = "mount-target-ips";
pub const CTX_MTLS_MODE: &str = "mtls-mode";
pub const CTX_REGION: &str = "region";
/// `subdirectory` for a directory of a shared filesystem; absent for a whole
/// filesystem. The node never takes a path from the context: the directory
/// comes from the volume id alone.
pub const CTX_VOLUME_TYPE: &str = "volume-type";
/// `absent` when a `best-effort` class got no quota; absent when capped.
pub const CTX_QUOTA: &str = "quota";

/// The one base directory of a shared filesystem the driver makes volume
/// directories in, one level deep. A quota's path is this plus the name.
pub const SUBDIRECTORY_BASE: &str = "csi-volumes";

/// `"{space_id}/{filesystem_id}"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeId {
    pub space: u64,
    pub filesystem: u64,
}

/// `"{space_id}/{filesystem_id}/{snapshot_id}"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SnapshotId {
    pub space: u64,
    pub filesystem: u64,
    pub snapshot: u64,
}

/// `"{space_id}/{filesystem_id}/{name}"`: a directory of a shared filesystem.
/// The name starts with a letter, so a volume id of this kind is never a
/// snapshot id, whose third part is a number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubdirId {
    pub space: u64,
    pub filesystem: u64,
    pub name: DirName,
}

/// A volume directory's name: `[a-z][a-z0-9._-]{0,62}`, so it can never be
/// `.`, `..`, empty, hold a `/` or NUL, or be longer than a label.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DirName(String);

/// Either kind of volume handle.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VolumeHandle {
    Filesystem(VolumeId),
    Subdirectory(SubdirId),
}

/// The kind of a volume: what its handle is, what a StorageClass's
/// `volume-type` asks for, what a volume context's `volume-type` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A whole NFS filesystem.
    Filesystem,
    /// A directory of a shared filesystem.
    Directory,
}

impl Kind {
    /// As `volume-type` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Filesystem => "filesystem",
            Kind::Directory => "subdirectory",
        }
    }

    /// `volume-type` as written: empty means a whole filesystem.
    pub fn parse(raw: &str) -> Option<Kind> {
        match raw {
            "" | "filesystem" => Some(Kind::Filesystem),
            "subdirectory" => Some(Kind::Directory),
            _ => None,
        }
    }
}

impl DirName {
    pub fn parse(raw: &str) -> Result<DirName, Error> {
        let bytes = raw.as_bytes();
        let ok = matches!(bytes.first(), Some(b'a'..=b'z'))
            && bytes.len() <= MAX_LABEL_BYTES
            && bytes
                .iter()
                .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-'));
        if ok {
            Ok(DirName(raw.to_string()))
        } else {
            Err(Error::InvalidArgument(format!(
                "volume directory name {raw:?} must be 1-{MAX_LABEL_BYTES} characters of a-z, 0-9, '.', '_' or '-', starting with a letter"
            )))
        }
    }

    /// The directory a CSI name maps to: its label, with every character
    /// a directory name may not hold replaced by `-`, and `v-` in front when
    /// it does not start with a letter (then cut to the label length again).
    /// Deterministic, so a retried create finds what the first one made.
    pub fn for_name(csi_name: &str) -> DirName {
        let label: String = label_for(csi_name)
            .chars()
            .map(|c| match c {
                'a'..='z' | '0'..='9' | '.' | '_' | '-' => c,
                _ => '-',
            })
            .collect();
        let mut name = if label.starts_with(|c: char| c.is_ascii_lowercase()) {
            label
        } else {
            format!("v-{label}")
        };
        name.truncate(MAX_LABEL_BYTES);
        DirName(name)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `/csi-volumes/<name>`, the directory's path from the shared
    /// filesystem's root (and its quota's path).
    pub fn path_in_share(&self) -> String {
        format!("/{SUBDIRECTORY_BASE}/{}", self.0)
    }
}

impl fmt::Display for DirName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl SubdirId {
    pub fn parse(raw: &str) -> Result<SubdirId, Error> {
        let bad = || {
            Error::InvalidArgument(format!(
                "volume id {raw:?} must have format {{space_id}}/{{filesystem_id}}/{{name}} with positive integers and a directory name"
            ))
        };
        let mut parts = raw.splitn(3, '/');
        let (Some(s), Some(f), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let Some(&[space, filesystem]) = parse_ids(&format!("{s}/{f}"), 2).as_deref() else {
            return Err(bad());
        };
        let name = DirName::parse(name).map_err(|_| bad())?;
        Ok(SubdirId {
            space,
            filesystem,
            name,
        })
    }

    /// The shared filesystem the directory lives in.
    pub fn parent(&self) -> VolumeId {
        VolumeId {
            space: self.space,
            filesystem: self.filesystem,
        }
    }
}

impl fmt::Display for SubdirId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.space, self.filesystem, self.name)
    }
}

impl VolumeHandle {
    /// Two parts: a whole filesystem; three whose last starts with a letter:
    /// a directory. Anything else is InvalidArgument (a snapshot id included).
    pub fn parse(raw: &str) -> Result<VolumeHandle, Error> {
        if raw.split('/').count() == 3 {
            SubdirId::parse(raw).map(VolumeHandle::Subdirectory)
        } else {
            VolumeId::parse(raw).map(VolumeHandle::Filesystem)
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            VolumeHandle::Filesystem(_) => Kind::Filesystem,
            VolumeHandle::Subdirectory(_) => Kind::Directory,
        }
    }

    /// The whole filesystem it is, if it is one.
    pub fn as_filesystem(&self) -> Option<VolumeId> {
        match self {
            VolumeHandle::Filesystem(id) => Some(*id),
            VolumeHandle::Subdirectory(_) => None,
        }
    }

    /// The filesystem the volume lives on: itself, or the shared parent.
    pub fn filesystem(&self) -> VolumeId {
        match self {
            VolumeHandle::Filesystem(id) => *id,
            VolumeHandle::Subdirectory(id) => id.parent(),
        }
    }
}

impl From<VolumeId> for VolumeHandle {
    fn from(id: VolumeId) -> VolumeHandle {
        VolumeHandle::Filesystem(id)
    }
}

impl From<SubdirId> for VolumeHandle {
    fn from(id: SubdirId) -> VolumeHandle {
        VolumeHandle::Subdirectory(id)
    }
}

impl fmt::Display for VolumeHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VolumeHandle::Filesystem(id) => id.fmt(f),
            VolumeHandle::Subdirectory(id) => id.fmt(f),
        }
    }
}

impl VolumeId {
    pub fn parse(raw: &str) -> Result<VolumeId, Error> {
        match parse_ids(raw, 2).as_deref() {
            Some(&[space, filesystem]) => Ok(VolumeId { space, filesystem }),
            _ => Err(Error::InvalidArgument(format!(
                "volume id {raw:?} must have format {{space_id}}/{{filesystem_id}} with positive integers"
            ))),
        }
    }
}

impl SnapshotId {
    pub fn parse(raw: &str) -> Result<SnapshotId, Error> {
        match parse_ids(raw, 3).as_deref() {
            Some(&[space, filesystem, snapshot]) => Ok(SnapshotId {
                space,
                filesystem,
                snapshot,
            }),
            _ => Err(Error::InvalidArgument(format!(
                "snapshot id {raw:?} must have format {{space_id}}/{{filesystem_id}}/{{snapshot_id}} with positive integers"
            ))),
        }
    }

    pub fn volume(&self) -> VolumeId {
        VolumeId {
            space: self.space,
            filesystem: self.filesystem,
        }
    }
}

impl fmt::Display for VolumeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.space, self.filesystem)
    }
}

impl fmt::Display for SnapshotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.space, self.filesystem, self.snapshot)
    }
}

/// Exactly `count` `/`-separated canonical decimal integers above zero.
/// Canonical means no sign, no leading zeros and no whitespace, so one
/// object has exactly one handle.
fn parse_ids(raw: &str, count: usize) -> Option<Vec<u64>> {
    let ids: Vec<u64> = raw
        .split('/')
        .map(|part| {
            let canonical = !part.is_empty()
                && part.bytes().all(|b| b.is_ascii_digit())
                && !part.starts_with('0');
            if canonical {
                part.parse::<u64>().ok()
            } else {
                None
            }
        })
        .collect::<Option<Vec<u64>>>()?;
    (ids.len() == count).then_some(ids)
}

/// The backend label for a CSI name: lowercased, cut to at most 63 bytes on
/// a character boundary, trailing `-` run removed. Deterministic, so a
/// retried create finds what the first attempt made.
pub fn label_for(name: &str) -> String {
    let lower = name.to_lowercase();
    let mut end = lower.len().min(MAX_LABEL_BYTES);
    while !lower.is_char_boundary(end) {
        end -= 1;
    }
    lower[..end].trim_end_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_ids() {
        assert_eq!(
            VolumeId::parse("42/1337").unwrap(),
            VolumeId {
                space: 42,
                filesystem: 1337
            }
        );
        assert_eq!(VolumeId::parse("42/1337").unwrap().to_string(), "42/1337");
        for bad in [
            "",
            "42",
            "42/",
            "/1",
            "42/1337/9",
            "a/b",
            "0/1",
            "1/0",
            "-1/2",
            "01/2",
            " 1/2",
            "1/2 ",
            "1//2",
            "+1/2",
        ] {
            assert!(
                matches!(VolumeId::parse(bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn snapshot_ids() {
        let id = SnapshotId::parse("42/1337/9").unwrap();
        assert_eq!(id.to_string(), "42/1337/9");
        assert_eq!(
            id.volume(),
            VolumeId {
                space: 42,
                filesystem: 1337
            }
        );
        for bad in ["42/1337", "42/1337/9/1", "42/1337/x", "", "1/1/0"] {
            assert!(SnapshotId::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn subdirectory_ids() {
        let id = SubdirId::parse("42/7/pvc-1234").unwrap();
        assert_eq!(id.to_string(), "42/7/pvc-1234");
        assert_eq!(id.name.path_in_share(), "/csi-volumes/pvc-1234");
        assert_eq!(
            VolumeHandle::parse("42/7/pvc-1234").unwrap(),
            VolumeHandle::Subdirectory(id)
        );
        assert!(matches!(
            VolumeHandle::parse("42/7").unwrap(),
            VolumeHandle::Filesystem(_)
        ));
        for bad in [
            "42/7/9", "42/7/..", "42/7/.", "42/7/", "42/7/a/b", "42/7/a\0", "42/7/A", "42/7/-a",
            "0/7/a", "42/07/a", "42/7/a b",
        ] {
            assert!(
                matches!(VolumeHandle::parse(bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
        let long = format!("1/2/{}", "a".repeat(64));
        assert!(VolumeHandle::parse(&long).is_err());
        assert!(VolumeHandle::parse(&format!("1/2/{}", "a".repeat(63))).is_ok());
    }

    #[test]
    fn directory_names() {
        assert_eq!(DirName::for_name("PVC-ABC").as_str(), "pvc-abc");
        assert_eq!(DirName::for_name("9lives").as_str(), "v-9lives");
        assert_eq!(DirName::for_name("a/../b").as_str(), "a-..-b");
        assert_eq!(DirName::for_name("..").as_str(), "v-..");
        assert_eq!(DirName::for_name("é").as_str(), "v--");
        let long = DirName::for_name(&"1".repeat(100));
        assert_eq!(long.as_str().len(), MAX_LABEL_BYTES);
        for name in ["x", "9", "-", "..", "a/b", "Ünïcode", &"z".repeat(200)] {
            let dir = DirName::for_name(name);
            assert_eq!(DirName::parse(dir.as_str()), Ok(dir.clone()), "{name:?}");
        }
    }

    #[test]
    fn labels() {
        assert_eq!(label_for("PVC-ABC"), "pvc-abc");
        assert_eq!(label_for("sanity_test.42"), "sanity_test.42");
        let long = "a".repeat(62) + "-" + &"b".repeat(10);
        assert_eq!(label_for(&long), "a".repeat(62));
        assert_eq!(label_for(&("x".repeat(60) + "----yyy")), "x".repeat(60));
        assert_eq!(label_for(&"c".repeat(128)).len(), 63);
        // A two-byte character straddling byte 63 is dropped whole.
        let s = "a".repeat(62) + "é" + "z";
        assert_eq!(label_for(&s), "a".repeat(62));
        assert_eq!(label_for("É"), "é");
    }
}
