//! StorageClass parameters of CreateVolume and VolumeAttributesClass
//! (mutable) parameters, parsed into typed values. Unknown StorageClass keys
//! (including the `csi.storage.k8s.io/*` ones the provisioner adds) are
//! ignored; unknown or immutable mutable keys are refused, since a
//! VolumeAttributesClass that asks for a change we cannot make must not
//! look applied. Bad values are InvalidArgument with the reference driver's
//! messages.

use crate::linode::SquashPolicy;
use crate::Error;
use std::collections::HashMap;

/// The driver's parameter keys, as a StorageClass or VolumeAttributesClass
/// spells them (the `client` subcommand writes them too).
pub mod keys {
    pub const SPACE_ID: &str = "linodenfs.csi.linode.com/space-id";
    pub const SPACE_LABEL: &str = "linodenfs.csi.linode.com/space-label";
    pub const TAGS: &str = "linodenfs.csi.linode.com/tags";
    pub const ROOT_SQUASH: &str = "linodenfs.csi.linode.com/filesystem-root-squash";
}
use keys::{ROOT_SQUASH, SPACE_ID, SPACE_LABEL, TAGS};

/// Which pre-created Storage Space the class names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpaceRef {
    Id(u64),
    Label(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    pub space: SpaceRef,
    /// In the order given, blanks dropped; compared as a set.
    pub tags: Vec<String>,
    /// Applied only when the class asks; otherwise the backend default stays.
    pub squash: Option<SquashPolicy>,
}

impl Params {
    pub fn parse(raw: &HashMap<String, String>) -> Result<Params, Error> {
        let get = |k: &str| raw.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let space = match (get(SPACE_ID), get(SPACE_LABEL)) {
            (Some(_), Some(_)) => {
                return Err(Error::InvalidArgument(format!(
                    "StorageClass parameters {SPACE_ID} and {SPACE_LABEL} are mutually exclusive"
                )))
            }
            (None, None) => {
                return Err(Error::InvalidArgument(format!(
                    "StorageClass must set either {SPACE_ID} or {SPACE_LABEL} for a pre-created NFS Storage Space"
                )))
            }
            (Some(id), None) => match id.parse::<u64>() {
                Ok(n) if n > 0 => SpaceRef::Id(n),
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "StorageClass parameter {SPACE_ID} \"{id}\" must be a positive integer"
                    )))
                }
            },
            (None, Some(label)) => SpaceRef::Label(label.to_string()),
        };
        Ok(Params {
            space,
            tags: get(TAGS).map(parse_tags).unwrap_or_default(),
            squash: get(ROOT_SQUASH).map(parse_squash).transpose()?,
        })
    }
}

/// What a VolumeAttributesClass may set, at creation or later.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mutable {
    /// The filesystem's own tags (the driver's markers are kept apart).
    pub tags: Option<Vec<String>>,
    pub squash: Option<SquashPolicy>,
}

impl Mutable {
    pub fn parse(raw: &HashMap<String, String>) -> Result<Mutable, Error> {
        let mut out = Mutable::default();
        let mut keys: Vec<&String> = raw.keys().collect();
        keys.sort();
        for key in keys {
            let value = raw[key].trim();
            match key.as_str() {
                TAGS => out.tags = Some(parse_tags(value)),
                ROOT_SQUASH => out.squash = Some(parse_squash(value)?),
                SPACE_ID | SPACE_LABEL => {
                    return Err(Error::InvalidArgument(format!(
                        "mutable parameter {key} cannot be changed: a volume stays in its NFS Storage Space"
                    )))
                }
                other => {
                    return Err(Error::InvalidArgument(format!(
                        "unknown mutable parameter \"{other}\"; only {TAGS} and {ROOT_SQUASH} can be modified"
                    )))
                }
            }
        }
        Ok(out)
    }

    pub fn is_empty(&self) -> bool {
        self.tags.is_none() && self.squash.is_none()
    }
}

/// A comma list, in the order given, blanks and repeats dropped.
fn parse_tags(raw: &str) -> Vec<String> {
    let mut tags: Vec<String> = Vec::new();
    for tag in raw.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        if !tags.iter().any(|t| t == tag) {
            tags.push(tag.to_string());
        }
    }
    tags
}

fn parse_squash(raw: &str) -> Result<SquashPolicy, Error> {
    match raw.trim() {
        v @ ("none" | "root_squash" | "all_squash") => Ok(SquashPolicy::from(v)),
        v => Err(Error::InvalidArgument(format!(
            "unsupported {ROOT_SQUASH} value \"{v}\""
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<Params, Error> {
        Params::parse(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn space_by_id_or_label() {
        assert_eq!(parse(&[(SPACE_ID, " 7 ")]).unwrap().space, SpaceRef::Id(7));
        assert_eq!(
            parse(&[(SPACE_LABEL, "Shared")]).unwrap().space,
            SpaceRef::Label("Shared".into())
        );
        for bad in [
            vec![],
            vec![(SPACE_ID, "7"), (SPACE_LABEL, "x")],
            vec![(SPACE_ID, "0")],
            vec![(SPACE_ID, "-3")],
            vec![(SPACE_ID, "seven")],
            vec![("space-id", "7")],
        ] {
            assert!(
                matches!(parse(&bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn tags_and_squash() {
        let p = parse(&[
            (SPACE_ID, "1"),
            (TAGS, " a, b,,a , "),
            (ROOT_SQUASH, "all_squash"),
            ("csi.storage.k8s.io/pvc/name", "x"),
        ])
        .unwrap();
        assert_eq!(p.tags, vec!["a", "b"]);
        assert_eq!(p.squash, Some(SquashPolicy::AllSquash));
        let p = parse(&[(SPACE_ID, "1"), (TAGS, "  ")]).unwrap();
        assert!(p.tags.is_empty());
        assert_eq!(p.squash, None);
        assert!(matches!(
            parse(&[(SPACE_ID, "1"), (ROOT_SQUASH, "squash")]),
            Err(Error::InvalidArgument(_))
        ));
    }

    fn mutable(pairs: &[(&str, &str)]) -> Result<Mutable, Error> {
        Mutable::parse(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn mutable_parameters_are_tags_and_squash_only() {
        assert!(mutable(&[]).unwrap().is_empty());
        let m = mutable(&[(TAGS, "x, y"), (ROOT_SQUASH, "none")]).unwrap();
        assert_eq!(m.tags, Some(vec!["x".to_string(), "y".to_string()]));
        assert_eq!(m.squash, Some(SquashPolicy::None));
        assert_eq!(mutable(&[(TAGS, "")]).unwrap().tags, Some(vec![]));
        for bad in [
            vec![(SPACE_ID, "7")],
            vec![(SPACE_LABEL, "other")],
            vec![("capacity", "10Gi")],
            vec![(ROOT_SQUASH, "sometimes")],
        ] {
            assert!(
                matches!(mutable(&bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
    }
}
