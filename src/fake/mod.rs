//! In-process fakes of the services the driver talks to — the Linode API, the
//! Kubernetes API and the Linode metadata service — as real HTTP/1.1 servers
//! on 127.0.0.1 (OS-chosen port), so the real clients run over TCP. Ordinary
//! crate code: tests and the `dev` mode both use it. Each server runs on its
//! own threads and shuts down on drop. The HTTP wire format lives in
//! [`crate::http_server`], shared with the metrics endpoint; how the fakes
//! listen is [`http`]; this module only gathers the fakes' public face.

pub mod http;
pub mod kube;
pub mod linode;
pub mod metadata;
pub mod rate_limit;

pub use self::kube::claims::{FakeClaim, FakeClaimEvent};
pub use self::kube::{
    FakeKube, FakeNode, FakePersistentVolume, FakeStorageClass, FakeVolumeAttachment,
    DEV_CLUSTER_UID,
};
pub use self::linode::{
    CloneRate, DirUsage, ExportContent, FakeEvent, FakeLinode, FaultProfile, FaultRule,
    FilesystemSeed, Hang, Injected, InstanceSeed, Lifecycle, PolicyPut, QuotaBehaviour,
    RequestRecord, Seed, SnapshotTimes, SpaceSeed, TagFilter, VpcAttachment,
};
pub use self::metadata::FakeMetadata;
pub use self::rate_limit::RateLimit;

pub use self::http::serve;
pub(crate) use crate::http_server::percent_decode;
pub use crate::http_server::{Handler, HttpRequest, HttpResponse, HttpServer};

/// A URL on which nothing listens: connections are refused at once.
pub fn unreachable_url() -> String {
    // Bind, learn the port, release it. Another process could grab the port
    // in between; on loopback in a test that is vanishingly unlikely.
    match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(addr) => format!("http://{addr}"),
        Err(_) => "http://127.0.0.1:9".to_string(),
    }
}
