//! The readable starting point of a scenario: [`Seed`] and the spaces and
//! instances it lists, with their serde defaults. Plain data only: it must not
//! know how the fake stores, advances or serves what it describes.

use serde::{Deserialize, Serialize};

fn default_token() -> String {
    "fake-linode-token".to_string()
}

fn default_regions() -> Vec<String> {
    ["us-east", "us-ord", "us-sea", "fr-par", "jp-osa"]
        .iter()
        .map(|r| r.to_string())
        .collect()
}

fn default_squash() -> String {
    "root_squash".to_string()
}

fn default_mtls() -> String {
    "disabled".to_string()
}

fn default_space_capacity() -> i64 {
    5 * (1 << 40)
}

/// A space to start with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpaceSeed {
    pub id: u64,
    pub label: String,
    /// Space access policy `mtls_mode` (default `disabled`).
    #[serde(default = "default_mtls")]
    pub mtls_mode: String,
    /// The space access-policy endpoint answers 404 (backends without it).
    #[serde(default)]
    pub policy_missing: bool,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default = "default_space_capacity")]
    pub max_capacity_bytes: i64,
}

impl SpaceSeed {
    pub fn new(id: u64, label: &str) -> SpaceSeed {
        SpaceSeed {
            id,
            label: label.to_string(),
            mtls_mode: default_mtls(),
            policy_missing: false,
            tags: Vec::new(),
            max_capacity_bytes: default_space_capacity(),
        }
    }
}

/// One VPC interface of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VpcAttachment {
    pub vpc_id: u64,
    pub subnet_id: u64,
    #[serde(default)]
    pub address: Option<String>,
}

/// A Linode instance to start with. With `interface_generation` `"linode"`
/// its VPCs show under `/interfaces`, otherwise (`legacy_config` or absent)
/// under `/configs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceSeed {
    pub id: u64,
    pub label: String,
    pub region: String,
    #[serde(default)]
    pub interface_generation: Option<String>,
    #[serde(default)]
    pub ipv6: Option<String>,
    #[serde(default)]
    pub vpcs: Vec<VpcAttachment>,
}

fn default_filesystem_capacity() -> i64 {
    100 * (1 << 30)
}

/// A filesystem that exists before the scenario starts: made by someone
/// else sharing the Space (another cluster, a person, another driver), so
/// it never carries this driver's mark unless the seed says so. It is
/// `active` with its mount targets from the start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesystemSeed {
    pub space_id: u64,
    pub label: String,
    pub region: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default = "default_filesystem_capacity")]
    pub max_capacity_bytes: i64,
    /// Its id; the next free one when absent (or taken).
    #[serde(default)]
    pub id: Option<u64>,
}

impl FilesystemSeed {
    pub fn new(space_id: u64, label: &str, region: &str) -> FilesystemSeed {
        FilesystemSeed {
            space_id,
            label: label.to_string(),
            region: region.to_string(),
            tags: Vec::new(),
            max_capacity_bytes: default_filesystem_capacity(),
            id: None,
        }
    }

    pub fn tag(mut self, tag: &str) -> FilesystemSeed {
        self.tags.push(tag.to_string());
        self
    }

    /// The filesystems of other users that dev mode seeds into a shared
    /// Space so an ignored tag filter shows: `foreign-a` untagged,
    /// `foreign-b` with a team tag, `foreign-c` with another CSI driver's
    /// mark (a tag of the same kind as ours, but not ours).
    pub fn foreign(space_id: u64, region: &str) -> Vec<FilesystemSeed> {
        vec![
            FilesystemSeed::new(space_id, "foreign-a", region),
            FilesystemSeed::new(space_id, "foreign-b", region).tag("team-analytics"),
            FilesystemSeed::new(space_id, "foreign-c", region).tag("csi.example.com"),
        ]
    }
}

/// The readable starting point of a scenario (JSON, see [`Seed::from_json`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seed {
    #[serde(default = "default_token")]
    pub token: String,
    /// Regions where NFS may be created.
    #[serde(default = "default_regions")]
    pub regions: Vec<String>,
    #[serde(default)]
    pub spaces: Vec<SpaceSeed>,
    #[serde(default)]
    pub instances: Vec<InstanceSeed>,
    /// Filesystems already there (in spaces of this seed; others are skipped).
    #[serde(default)]
    pub filesystems: Vec<FilesystemSeed>,
    /// Time from create/clone/policy PUT to `active` (0 = active at the next read).
    #[serde(default)]
    pub activation_delay_ms: u64,
    /// Time an object stays `deleting` before it is gone (0 = gone at the next read).
    #[serde(default)]
    pub deletion_delay_ms: u64,
    /// New filesystem policies get this `squash_policy`.
    #[serde(default = "default_squash")]
    pub default_squash_policy: String,
    /// Reject a second filesystem with the same label in a space (400).
    #[serde(default)]
    pub unique_filesystem_labels: bool,
}

impl Default for Seed {
    fn default() -> Seed {
        Seed {
            token: default_token(),
            regions: default_regions(),
            spaces: Vec::new(),
            instances: Vec::new(),
            filesystems: Vec::new(),
            activation_delay_ms: 0,
            deletion_delay_ms: 0,
            default_squash_policy: default_squash(),
            unique_filesystem_labels: false,
        }
    }
}

impl Seed {
    pub fn from_json(json: &str) -> crate::Result<Seed> {
        serde_json::from_str(json)
            .map_err(|e| crate::Error::InvalidArgument(format!("fake Linode seed: {e}")))
    }

    pub fn with_space(mut self, space: SpaceSeed) -> Seed {
        self.spaces.push(space);
        self
    }

    pub fn with_instance(mut self, instance: InstanceSeed) -> Seed {
        self.instances.push(instance);
        self
    }

    pub fn with_filesystem(mut self, filesystem: FilesystemSeed) -> Seed {
        self.filesystems.push(filesystem);
        self
    }
}
