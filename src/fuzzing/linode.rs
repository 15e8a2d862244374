//! The Linode API's JSON, as every wire type the client decodes, and the
//! rate-limit headers of its answers, as the pacer takes them.

use super::text;
use crate::linode::pacer::{Observed, Pacer, Work};
use crate::linode::types::Page;
use crate::linode::RequestClass;
use crate::linode::{
    naive_to_unix, unix_to_naive, Filesystem, FilesystemAccessPolicy, Instance, InstanceConfig,
    InstanceInterface, InterfaceGeneration, InterfacePurpose, MtlsMode, Readiness, Snapshot,
    SnapshotSource, Space, SpaceAccessPolicy, SquashPolicy, Status,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::{Debug, Display};
use std::time::{Duration, Instant};

/// Any bytes as the body of every response type: decoding answers or fails,
/// whatever the values, nulls, missing fields or unknown enum strings. What
/// decodes is checked (open enums keep unknown values verbatim; timestamps
/// the driver reads convert both ways). The bytes as a timestamp and as a
/// number of seconds, too.
pub fn linode_wire(data: &[u8]) {
    decode::<Space>(data, |s| {
        status(&s.status);
        stamps(&[&s.created, &s.updated]);
    });
    decode::<Page<Space>>(data, |p| p.data.iter().for_each(|s| status(&s.status)));
    decode::<SpaceAccessPolicy>(data, |p| {
        status(&p.status);
        if let Some(m) = &p.mtls_mode {
            open_enum(m);
        }
        stamps(&[&p.created, &p.updated]);
    });
    decode::<Filesystem>(data, filesystem);
    decode::<Page<Filesystem>>(data, |p| p.data.iter().for_each(filesystem));
    decode::<FilesystemAccessPolicy>(data, |p| {
        status(&p.status);
        if let Some(s) = &p.squash_policy {
            open_enum(s);
        }
        assert_eq!(p.linode_ids().len(), p.linode_acl.len());
        stamps(&[&p.created, &p.updated]);
    });
    decode::<Snapshot>(data, snapshot);
    decode::<Page<Snapshot>>(data, |p| p.data.iter().for_each(snapshot));
    decode::<Instance>(data, instance);
    decode::<InstanceConfig>(data, config);
    decode::<Page<InstanceConfig>>(data, |p| p.data.iter().for_each(config));
    decode::<InstanceInterface>(data, |_| {});
    decode::<Page<InstanceInterface>>(data, |_| {});
    decode::<Status>(data, status);
    decode::<MtlsMode>(data, open_enum);
    decode::<SquashPolicy>(data, open_enum);
    decode::<SnapshotSource>(data, open_enum);
    decode::<InterfaceGeneration>(data, open_enum);
    decode::<InterfacePurpose>(data, open_enum);

    if let Some(ts) = text(data) {
        stamps(&[&Some(ts.to_string())]);
    }
    if let Some(bytes) = data.get(..8) {
        seconds(i64::from_le_bytes(bytes.try_into().expect("8 bytes")));
    }
}

fn decode<T: DeserializeOwned>(data: &[u8], check: impl FnOnce(&T)) {
    if let Ok(value) = serde_json::from_slice::<T>(data) {
        check(&value);
    }
}

fn filesystem(fs: &Filesystem) {
    status(&fs.status);
    stamps(&[&fs.created, &fs.updated]);
}

fn snapshot(s: &Snapshot) {
    status(&s.status);
    if let Some(source) = &s.source {
        open_enum(source);
    }
    stamps(&[&s.created, &s.updated, &s.expiration]);
}

fn instance(i: &Instance) {
    if let Some(generation) = &i.interface_generation {
        open_enum(generation);
    }
}

fn config(c: &InstanceConfig) {
    for purpose in c.interfaces.iter().filter_map(|i| i.purpose.as_ref()) {
        open_enum(purpose);
    }
}

/// A status is an open enum, and what waiting makes of it follows it.
fn status(s: &Status) {
    open_enum(s);
    match s.readiness() {
        Readiness::Ready => assert_eq!(*s, Status::Active),
        Readiness::Failed(seen) => assert_eq!(seen, s.as_str()),
        Readiness::Pending => assert!(!matches!(
            s,
            Status::Active | Status::Error | Status::Failed | Status::Deleting
        )),
    }
}

/// An open enum prints, serialises and reads back as itself, an unknown
/// value included.
fn open_enum<E>(e: &E)
where
    E: for<'a> From<&'a str> + Display + Serialize + DeserializeOwned + PartialEq + Debug,
{
    assert_eq!(&E::from(e.to_string().as_str()), e);
    let json = serde_json::to_string(e).expect("a string serialises");
    assert_eq!(&serde_json::from_str::<E>(&json).expect("reads back"), e);
}

/// A timestamp the driver reads converts back to itself.
fn stamps(stamps: &[&Option<String>]) {
    for ts in stamps.iter().filter_map(|t| t.as_deref()) {
        if let Some(secs) = naive_to_unix(ts) {
            assert_eq!(unix_to_naive(secs), ts, "{secs}");
        }
    }
}

/// Any instant of years 0 to 9999 prints as a timestamp that reads back.
fn seconds(secs: i64) {
    let ts = unix_to_naive(secs);
    if ts.len() == 19 && ts.as_bytes()[0].is_ascii_digit() {
        assert_eq!(naive_to_unix(&ts), Some(secs), "{ts}");
    }
}

/// Any rate-limit headers, of any answer status, taken by the pacer: it
/// never panics, and the turns it hands out stay within its longest hold
/// (a window, or a capped `Retry-After`) plus a window per turn. The first
/// two bytes are the status, the rest `Name=value` lines.
pub fn pacer_headers(data: &[u8]) {
    let Some((status, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let Some(text) = super::text(rest) else {
        return;
    };
    let (headers, _) = super::pairs(text);
    let status = u16::from_le_bytes(*status);
    let seen = Observed::from_headers(status, |name| headers.get(name).cloned());
    let pacer = Pacer::new(Duration::from_secs(30));
    let now = Instant::now();
    for class in [RequestClass::List, RequestClass::Other] {
        pacer.observe(class, Some(&seen));
        for turn in 1..=4u32 {
            let work = if turn % 2 == 0 {
                Work::Waiting
            } else {
                Work::New
            };
            let at = pacer
                .reserve(class, work, now)
                .map_or_else(|at| at, |()| now);
            assert!(
                at <= now + Duration::from_secs(60) * (turn + 1),
                "turn {turn} after {:?}",
                at - now
            );
        }
        let _ = pacer.state(class);
    }
}
