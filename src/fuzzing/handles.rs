//! Volume and snapshot handles, and the label a CSI name maps to.

use super::{caller_mistake, text};
use crate::handles::{
    label_for, DirName, DirSnapshotId, GroupSnapshotId, SnapshotHandle, SnapshotId, SubdirId,
    VolumeHandle, VolumeId, MAX_LABEL_BYTES, SUBDIRECTORY_BASE,
};

/// Any text as a volume and as a snapshot handle; and the handles of ids
/// taken from the bytes, which must parse back to those ids.
pub fn handles(data: &[u8]) {
    if let Some(raw) = text(data) {
        volume_handle(raw);
        snapshot_handle(raw);
        any_volume_handle(raw);
        any_snapshot_handle(raw);
    }
    let mut ids = data
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")));
    if let (Some(space), Some(filesystem), Some(snapshot)) = (ids.next(), ids.next(), ids.next()) {
        if space > 0 && filesystem > 0 && snapshot > 0 {
            let vol = VolumeId { space, filesystem };
            assert_eq!(VolumeId::parse(&vol.to_string()), Ok(vol));
            let snap = SnapshotId {
                space,
                filesystem,
                snapshot,
            };
            assert_eq!(SnapshotId::parse(&snap.to_string()), Ok(snap));
        }
    }
}

/// A volume handle parses to positive ids whose handle is exactly `raw`
/// (one volume, one handle), or is InvalidArgument.
pub(super) fn volume_handle(raw: &str) -> Option<VolumeId> {
    match VolumeId::parse(raw) {
        Ok(id) => {
            assert!(id.space > 0 && id.filesystem > 0, "{raw:?} → {id:?}");
            assert_eq!(id.to_string(), raw, "a volume has exactly one handle");
            Some(id)
        }
        Err(e) => {
            caller_mistake("VolumeId::parse", &e, false);
            None
        }
    }
}

/// Either kind of volume handle: one handle per volume; a directory's name
/// can only ever name one directory directly under the volumes' base (no
/// separator, no `.` or `..`, nothing but the allowed bytes, at most a
/// label long), and a handle is never both a volume and a snapshot.
pub(super) fn any_volume_handle(raw: &str) -> Option<VolumeHandle> {
    match VolumeHandle::parse(raw) {
        Ok(handle) => {
            assert_eq!(handle.to_string(), raw, "a volume has exactly one handle");
            assert!(SnapshotId::parse(raw).is_err(), "{raw:?} is both");
            if let VolumeHandle::Subdirectory(id) = &handle {
                directory_name(&id.name);
                assert_eq!(SubdirId::parse(raw).as_ref(), Ok(id));
                assert!(VolumeId::parse(raw).is_err(), "{raw:?}");
            }
            Some(handle)
        }
        Err(e) => {
            caller_mistake("VolumeHandle::parse", &e, false);
            None
        }
    }
}

/// A directory name the driver would join to the volumes' base.
fn directory_name(name: &DirName) {
    let s = name.as_str();
    assert!(!s.is_empty() && s.len() <= MAX_LABEL_BYTES, "{s:?}");
    assert!(s.starts_with(|c: char| c.is_ascii_lowercase()), "{s:?}");
    assert!(
        s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b)),
        "{s:?}"
    );
    let path = name.path_in_share();
    let parts: Vec<&str> = path.split('/').collect();
    assert_eq!(parts, ["", SUBDIRECTORY_BASE, s], "{path:?}");
}

/// Either kind of snapshot handle: one handle per snapshot, never a
/// volume's too; a directory snapshot's entry is a directory name, and
/// its parent and parent snapshot are the ids in front of it. A group's
/// id reads as a directory snapshot's, and nothing else does.
pub(super) fn any_snapshot_handle(raw: &str) -> Option<SnapshotHandle> {
    let group = GroupSnapshotId::parse(raw);
    match SnapshotHandle::parse(raw) {
        Ok(handle) => {
            assert_eq!(handle.to_string(), raw, "a snapshot has exactly one handle");
            assert!(VolumeHandle::parse(raw).is_err(), "{raw:?} is both");
            match &handle {
                SnapshotHandle::Directory(id) => {
                    directory_name(&id.entry);
                    assert_eq!(DirSnapshotId::parse(raw).as_ref(), Ok(id));
                    assert_eq!(group.as_ref().map(|g| &g.0), Ok(id));
                    let front = format!("{}/", id.parent_snapshot());
                    assert!(raw.starts_with(&front), "{raw:?}");
                    assert_eq!(handle.filesystem(), id.parent());
                }
                SnapshotHandle::Filesystem(id) => {
                    assert_eq!(SnapshotId::parse(raw).as_ref(), Ok(id));
                    assert!(group.is_err(), "{raw:?}");
                }
            }
            Some(handle)
        }
        Err(e) => {
            caller_mistake("SnapshotHandle::parse", &e, false);
            assert!(group.is_err(), "{raw:?}");
            None
        }
    }
}

/// As `volume_handle`; the volume part of a snapshot handle is its volume's.
pub(super) fn snapshot_handle(raw: &str) -> Option<SnapshotId> {
    match SnapshotId::parse(raw) {
        Ok(id) => {
            assert!(id.space > 0 && id.filesystem > 0 && id.snapshot > 0);
            assert_eq!(id.to_string(), raw, "a snapshot has exactly one handle");
            let volume = id.volume().to_string();
            assert!(raw.starts_with(&format!("{volume}/")), "{raw:?}");
            assert!(VolumeId::parse(raw).is_err(), "{raw:?} is both");
            Some(id)
        }
        Err(e) => {
            caller_mistake("SnapshotId::parse", &e, false);
            None
        }
    }
}

/// Any text as a CSI name.
pub fn labels(data: &[u8]) {
    if let Some(name) = text(data) {
        label(name);
        let dir = DirName::for_name(name);
        directory_name(&dir);
        assert_eq!(DirName::parse(dir.as_str()).as_ref(), Ok(&dir));
        assert_eq!(dir, DirName::for_name(name), "deterministic");
    }
}

/// The label of `name`: at most 63 bytes, valid UTF-8 (a cut inside a
/// character would have panicked), no trailing `-`, the same every time,
/// and nothing but the lowercased name cut and trimmed.
pub(super) fn label(name: &str) -> String {
    let label = label_for(name);
    assert!(label.len() <= MAX_LABEL_BYTES, "{label:?}");
    assert!(std::str::from_utf8(label.as_bytes()).is_ok());
    assert!(!label.ends_with('-'), "{label:?}");
    assert_eq!(label, label_for(name), "deterministic");
    let lower = name.to_lowercase();
    assert!(lower.starts_with(&label), "{label:?} of {lower:?}");
    // The cut keeps every whole character of the first 63 bytes: at most
    // three bytes of a four-byte character are lost before the trim.
    let cut = if lower.len() <= MAX_LABEL_BYTES {
        lower.len()
    } else {
        (MAX_LABEL_BYTES - 3..=MAX_LABEL_BYTES)
            .rev()
            .find(|end| lower.is_char_boundary(*end))
            .expect("a character is at most four bytes")
    };
    assert_eq!(label, lower[..cut].trim_end_matches('-'), "{lower:?}");
    label
}
