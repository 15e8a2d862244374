//! The CSI Controller service: one registration table of thin handlers
//! (see [`crate::rpc::registrar`]), each parsing its request into typed
//! values, handing it to the seam of the volume kinds (`kind`: whole
//! filesystems and directories of shared ones) and replying. The handlers
//! are `volumes` (Create/Delete), `inspect` (Validate, ControllerGetVolume),
//! `listing` (ListVolumes, GetCapacity), `publish`, `snapshots`, `modify`
//! and `expand`, and the GroupController service's `groups`; what they
//! share is `state`'s `Controller`. RPCs that may
//! wait for Linode return flows that park on the shared poller instead of
//! holding a worker. Nothing here talks to Linode directly.

mod acl;
mod janitor;
mod kind;
mod request;
mod rpcs;
mod state;
mod table;

pub use kind::directory::stop_copies;
pub use request::claim_ref::ClaimRef;
pub use request::params::{
    keys, KindParams, Mutable, OnDelete, Params, ParentRef, PoolParams, QuotaMode, SpaceRef,
    SubdirParams,
};
pub use state::cluster::Cluster;
pub use state::controller::{Controller, ControllerDeps};
pub use table::services;
// The request parsers the handlers run first, for `crate::fuzzing`.
pub(crate) use request::create::parse_create;
pub(crate) use request::volume_capability::{capability_problem, check_capabilities};
pub(crate) use rpcs::publish::linode_id;
