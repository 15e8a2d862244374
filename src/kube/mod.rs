//! Minimal Kubernetes REST client: read one Node, list Nodes by label
//! selector, read the storage objects node-mode unpublish decides from
//! (VolumeAttachments, PersistentVolumes, CSINodes) and the StorageClasses
//! that name shared filesystems (`classes`), list, patch and leave events
//! on the claims autogrow grows (`claims`), read and write the
//! controller's Lease (`lease`), and the `kube-system` Namespace's UID
//! (`namespaces`). Where the API server
//! is and how to authenticate comes from a kubeconfig file or the
//! in-cluster service account (`config`); the requests, their metrics and
//! the rotating bearer token are `client`'s.
//! Unsupported auth (exec plugins, auth-provider, basic) fails at
//! construction. It must never log or return a bearer token.

mod claims;
mod classes;
mod client;
mod config;
mod lease;
mod namespaces;
mod storage;

pub use claims::{quantity_bytes, EventType, PersistentVolumeClaim};
pub use classes::StorageClass;
pub use client::{KubeClient, Node, TOKEN_REFRESH};
pub(crate) use config::resolve_kubeconfig_with;
pub use config::SERVICE_ACCOUNT_DIR;
pub use lease::{micro_time, Lease};
pub use storage::{CsiSource, VolumeAttachment};
