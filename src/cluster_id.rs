//! The cluster identity (`CLUSTER_ID`): which installation of the driver
//! made an object, so that two clusters sharing one Storage Space never
//! act on each other's volumes, pools, temporaries or records. It owns the
//! identity's form (short enough that every tag and label built from it
//! stays within the API's limits), its default (derived from the cluster
//! itself: the `kube-system` Namespace's UID). Values only: the check that
//! it never changes between runs is the Lease's (`lease::identity`).

/// Lowercase letters, digits and inner `-`, at most this long: the
/// cluster tag `csi-cluster.<id>` and a pool label
/// `csi-pool-<id>-<name>-<n>` then stay within the limits the driver
/// assumes (tags under 50 characters, labels under 64).
pub const MAX_LEN: usize = 16;

/// The annotation of the controller's Lease recording the identity.
pub const ANNOTATION: &str = "linodenfs.csi.linode.com/cluster-id";

/// The Namespace whose UID names the cluster when `CLUSTER_ID` is unset:
/// it exists in every cluster and lives as long as the cluster.
pub const NAMESPACE: &str = "kube-system";

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterId(String);

impl ClusterId {
    /// `CLUSTER_ID` as given, refused unless it has the identity's form.
    pub fn parse(value: &str) -> Result<ClusterId, String> {
        let chars_ok = value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        let ends_ok = !value.starts_with('-') && !value.ends_with('-');
        if value.is_empty() || value.len() > MAX_LEN || !chars_ok || !ends_ok {
            return Err(format!(
                "CLUSTER_ID {value:?} must be 1-{MAX_LEN} lowercase letters, digits and inner hyphens: it is written into the tags and labels of everything the driver makes"
            ));
        }
        Ok(ClusterId(value.to_string()))
    }

    /// The identity derived from a Namespace UID: its first hex digits.
    pub fn from_uid(uid: &str) -> Option<ClusterId> {
        let hex: String = uid
            .chars()
            .filter(char::is_ascii_hexdigit)
            .map(|c| c.to_ascii_lowercase())
            .take(12)
            .collect();
        (hex.len() == 12).then_some(ClusterId(hex))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ClusterId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_stay_short_lowercase_and_hyphenated_inside() {
        for ok in ["prod", "staging-2", "a", "0123456789abcdef"] {
            assert_eq!(ClusterId::parse(ok).unwrap().as_str(), ok);
        }
        for bad in [
            "",
            "Prod",
            "-a",
            "a-",
            "a_b",
            "a.b",
            "0123456789abcdefg",
            "ü",
        ] {
            assert!(ClusterId::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_uid_gives_its_first_twelve_hex_digits() {
        let id = ClusterId::from_uid("3F2A9C1E-77b0-4e1d-9a53-0c2b8e4f6a10").unwrap();
        assert_eq!(id.as_str(), "3f2a9c1e77b0");
        assert!(ClusterId::parse(id.as_str()).is_ok());
        assert_eq!(ClusterId::from_uid("not-a-uid"), None);
    }
}
