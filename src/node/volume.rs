//! Which kind of volume a NodeStageVolume names, decided by the volume id
//! alone: a whole filesystem, or a directory of a shared one
//! (`{space}/{filesystem}/{name}`), whose name is re-validated here. The
//! volume context's `volume-type` may only agree with the id, never choose a
//! path: a static PV's attributes are written by hand. It knows nothing of
//! mounting or of the rest of the context.

use crate::handles::{DirName, SubdirId, VolumeId};
use crate::{Error, Result};

use super::input::shown;

/// What the volume context's `volume-type` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeType {
    /// Absent, empty or `filesystem`.
    Filesystem,
    Subdirectory,
}

impl VolumeType {
    pub fn parse(value: &str) -> Result<VolumeType> {
        match value {
            "" | "filesystem" => Ok(VolumeType::Filesystem),
            "subdirectory" => Ok(VolumeType::Subdirectory),
            _ => Err(Error::InvalidArgument(format!(
                "volume attribute volume-type {} must be filesystem or subdirectory",
                shown(value)
            ))),
        }
    }
}

/// The directory of the shared filesystem to mount, or `None` for a whole
/// filesystem (whose id the node does not parse: a hand-written PV's handle
/// works whatever it looks like). An id that begins like a directory handle
/// (`{space}/{filesystem}/…`) must be one, so `1/2/..` or `1/2/a/b` never
/// falls back to mounting the whole share; a context that says
/// `subdirectory` needs such an id, since the directory comes from the id.
pub fn directory(volume_id: &str, volume_type: VolumeType) -> Result<Option<DirName>> {
    let mut parts = volume_id.splitn(3, '/');
    let prefix = match (parts.next(), parts.next(), parts.next()) {
        (Some(s), Some(f), Some(_)) => Some(format!("{s}/{f}")),
        _ => None,
    };
    let looks_like_directory = prefix.is_some_and(|p| VolumeId::parse(&p).is_ok());
    if looks_like_directory {
        return SubdirId::parse(volume_id).map(|id| Some(id.name));
    }
    match volume_type {
        VolumeType::Filesystem => Ok(None),
        VolumeType::Subdirectory => Err(Error::InvalidArgument(format!(
            "volume {} has volume-type subdirectory but its id is not {{space_id}}/{{filesystem_id}}/{{name}}: the directory comes from the volume id",
            shown(volume_id)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_comes_from_the_id_and_is_revalidated() {
        for kind in [VolumeType::Filesystem, VolumeType::Subdirectory] {
            assert_eq!(
                directory("42/7/pvc-1", kind).unwrap().unwrap().as_str(),
                "pvc-1"
            );
        }
        for whole in ["1/2", "my-static-pv", "a/b/c", "ns/pv/../x"] {
            assert_eq!(directory(whole, VolumeType::Filesystem).unwrap(), None);
        }
        for bad in [
            "1/2/..", "1/2/.", "1/2/", "1/2/a/b", "1/2/../x", "1/2/A", "1/2/3", "1/2/a\0",
        ] {
            for kind in [VolumeType::Filesystem, VolumeType::Subdirectory] {
                let err = directory(bad, kind).unwrap_err();
                assert!(matches!(err, Error::InvalidArgument(_)), "{bad:?}: {err:?}");
            }
        }
        for not_a_directory in ["1/2", "my-static-pv", "a/b/c"] {
            let err = directory(not_a_directory, VolumeType::Subdirectory).unwrap_err();
            assert!(
                err.message()
                    .contains("the directory comes from the volume id"),
                "{err}"
            );
        }
    }

    #[test]
    fn volume_types() {
        assert_eq!(VolumeType::parse("").unwrap(), VolumeType::Filesystem);
        assert_eq!(
            VolumeType::parse("filesystem").unwrap(),
            VolumeType::Filesystem
        );
        assert_eq!(
            VolumeType::parse("subdirectory").unwrap(),
            VolumeType::Subdirectory
        );
        let err = VolumeType::parse("../etc").unwrap_err();
        assert!(
            err.message().starts_with("volume attribute volume-type"),
            "{err}"
        );
    }
}
