//! CSI handles and backend labels: the composite volume and snapshot ids,
//! the deterministic label a CSI name maps to, and the volume-context keys
//! the controller writes and the node reads. Pure functions only.

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
