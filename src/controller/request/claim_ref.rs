//! The PersistentVolumeClaim a volume is made for, as csi-provisioner's
//! `--extra-create-metadata` parameters name it (`csi.storage.k8s.io/pvc/name`,
//! `…/pvc/namespace`, `…/pv/name`): recorded in a directory volume's marker
//! so the controller can find the claim to grow. Parsing and the marker's
//! form only; it must not call Kubernetes.

use std::collections::HashMap;

pub const PVC_NAME: &str = "csi.storage.k8s.io/pvc/name";
pub const PVC_NAMESPACE: &str = "csi.storage.k8s.io/pvc/namespace";
pub const PV_NAME: &str = "csi.storage.k8s.io/pv/name";

/// A claim and the PersistentVolume it is to be bound to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
    pub pv: String,
}

impl ClaimRef {
    /// The claim the provisioner names, when it names all three (a
    /// provisioner without `--extra-create-metadata` names none) and each
    /// is an object name Kubernetes could have made.
    pub fn from_parameters(raw: &HashMap<String, String>) -> Option<ClaimRef> {
        let name = |key: &str| raw.get(key).filter(|v| is_object_name(v)).cloned();
        Some(ClaimRef {
            namespace: name(PVC_NAMESPACE)?,
            name: name(PVC_NAME)?,
            pv: name(PV_NAME)?,
        })
    }

    /// `namespace/name`, as the marker and the logs show it.
    pub fn claim(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The claim as `claim` wrote it, and the PV's name.
    pub fn parse(claim: &str, pv: &str) -> Option<ClaimRef> {
        let (namespace, name) = claim.split_once('/')?;
        [namespace, name, pv]
            .iter()
            .all(|n| is_object_name(n))
            .then(|| ClaimRef {
                namespace: namespace.to_string(),
                name: name.to_string(),
                pv: pv.to_string(),
            })
    }
}

/// Whether PersistentVolume name `pv` names the claim whose UID is `uid`,
/// as csi-provisioner names the volume of a claim (`<prefix>-<uid>`, the
/// UID perhaps cut to `--volume-name-uuid-length`): `None` when `pv` ends
/// in nothing shaped like a UID, so it tells no claim apart.
pub fn pv_names_uid(pv: &str, uid: &str) -> Option<bool> {
    const SHAPE: &[u8] = b"xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
    let shaped = |tail: &str| {
        (8..=SHAPE.len()).contains(&tail.len())
            && tail.bytes().zip(SHAPE).all(|(b, s)| match s {
                b'-' => b == b'-',
                _ => b.is_ascii_hexdigit(),
            })
    };
    let tail = (1..pv.len())
        .filter(|&i| pv.as_bytes()[i - 1] == b'-')
        .map(|i| &pv[i..])
        .find(|tail| shaped(tail))?;
    Some(
        uid.to_ascii_lowercase()
            .starts_with(&tail.to_ascii_lowercase()),
    )
}

/// A DNS subdomain name (what namespaces, claims and PVs are named by):
/// never a path or a line of the marker.
fn is_object_name(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 253
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pv_name_tells_its_claim_by_uid_whole_or_cut() {
        let uid = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
        assert_eq!(pv_names_uid(&format!("pvc-{uid}"), uid), Some(true));
        assert_eq!(pv_names_uid("pvc-1b4e28ba-2fa1-11", uid), Some(true));
        assert_eq!(pv_names_uid("team-data-1b4e28ba-2f", uid), Some(true));
        let other = "9c7e0d2a-0000-4000-8000-00000000002a";
        assert_eq!(pv_names_uid(&format!("pvc-{other}"), uid), Some(false));
        assert_eq!(pv_names_uid("my-volume", uid), None);
        assert_eq!(pv_names_uid("pvc-grow", uid), None);
    }

    #[test]
    fn all_three_names_or_none() {
        let mut raw: HashMap<String, String> = [
            (PVC_NAME, "data"),
            (PVC_NAMESPACE, "team-a"),
            (PV_NAME, "pvc-0123"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let claim = ClaimRef::from_parameters(&raw).unwrap();
        assert_eq!(claim.claim(), "team-a/data");
        assert_eq!(ClaimRef::parse("team-a/data", "pvc-0123"), Some(claim));
        raw.insert(PVC_NAME.into(), "a\nstate: retained".into());
        assert_eq!(ClaimRef::from_parameters(&raw), None);
        raw.remove(PVC_NAME);
        assert_eq!(ClaimRef::from_parameters(&raw), None);
        assert_eq!(ClaimRef::parse("no-slash", "pv"), None);
        assert_eq!(ClaimRef::parse("a/b/c", "pv"), None);
    }
}
