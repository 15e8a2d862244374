//! linode-nfs-csi: a CSI driver for Linode managed NFS.
//!
//! Request path: kubelet or a sidecar calls over the CSI socket → a grpcio
//! completion-queue thread runs a thin handler ([`identity`], `controller`,
//! `node`) → the request moves to the bounded worker pool ([`rpc`]) → a
//! plain domain function over `dyn Cloud` / `dyn Mounter` returns
//! `Result<T, Error>` → the one reply helper logs (secrets redacted) and
//! answers, with the gRPC code chosen in [`error`].

pub mod backoff;
pub mod bounded;
pub mod build_info;
pub mod capabilities;
pub mod client;
pub mod cluster_id;
pub mod config;
pub mod controller;
pub mod dev;
pub mod error;
pub mod fake;
pub mod flow;
pub mod fs_tree;
#[doc(hidden)]
pub mod fuzzing;
pub mod handles;
pub mod http_answer;
pub mod http_server;
pub mod identity;
pub mod kube;
pub mod lease;
pub mod limits;
pub mod linode;
pub mod locks;
pub mod metadata;
pub mod metrics;
pub mod mount;
pub mod mutex;
pub mod node;
pub mod proto;
pub mod registration;
pub mod roles;
pub mod rpc;
pub mod secret;
pub mod server;
pub mod socket_file;
pub mod systemd_notify;
#[cfg(test)]
pub(crate) mod test_support;
pub mod timers;
pub mod wiring;

pub use error::{Error, Result};
