//! Entry points of the fuzz targets in `fuzz/` (cargo-fuzz): each takes
//! arbitrary bytes, feeds them to one of the driver's parsers the way the
//! driver does, and asserts what that parser promises; a panic is a finding.
//! Not part of the driver's interface (hidden from the docs).
//!
//! It lives in the crate, not in `fuzz/`, for two reasons: the request
//! parsers stay `pub(crate)` instead of public, and this code is built,
//! linted and run on stable by every `cargo test` (tests/fuzz_corpus.rs
//! replays the committed corpora through these same functions), so it cannot
//! drift from the parsers while nobody runs a nightly fuzzer.
//!
//! Inputs are plain text where the parser reads text: a line `+item` is one
//! list item (a mount flag), any other line one map entry `key=value` (the
//! first `=` splits; no `=` is an empty value). CSI requests are one
//! selector byte, then the message's protobuf encoding.

mod controller;
mod handles;
mod kubeconfig;
mod linode;
mod mountinfo;
mod node;
mod params;

pub use controller::controller_requests;
pub use handles::{handles, labels};
pub use kubeconfig::kubeconfig;
pub use linode::{linode_wire, pacer_headers};
pub use mountinfo::mountinfo;
pub use node::{node_requests, volume_context};
pub use params::{mutable_params, storage_class_params};

use crate::Error;
use std::collections::HashMap;

/// One fuzz target: arbitrary bytes in, a panic on a broken property.
pub type Target = fn(&[u8]);

/// Every target by the name its `fuzz/fuzz_targets/<name>.rs` and its
/// `fuzz/corpus/<name>/` carry.
pub const TARGETS: &[(&str, Target)] = &[
    ("handles", handles),
    ("labels", labels),
    ("storage_class_params", storage_class_params),
    ("mutable_params", mutable_params),
    ("mountinfo", mountinfo),
    ("linode_wire", linode_wire),
    ("pacer_headers", pacer_headers),
    ("kubeconfig", kubeconfig),
    ("volume_context", volume_context),
    ("node_requests", node_requests),
    ("controller_requests", controller_requests),
];

/// The input as text. Every string these parsers see arrives as a protobuf
/// `string` or a JSON/YAML document, which are UTF-8 before the driver
/// reads them, so other bytes are not worth a run.
fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// `+item` lines as a list, the others as `key=value` entries of a map (a
/// later line wins, as in a map literal).
fn pairs(text: &str) -> (HashMap<String, String>, Vec<String>) {
    let mut map = HashMap::new();
    let mut list = Vec::new();
    for line in text.split('\n') {
        if let Some(item) = line.strip_prefix('+') {
            list.push(item.to_string());
            continue;
        }
        let (k, v) = line.split_once('=').unwrap_or((line, ""));
        map.insert(k.to_string(), v.to_string());
    }
    (map, list)
}

/// The same entries in a map of its own: another hasher, so another
/// iteration order. A parser's answer must not depend on it.
fn reordered(map: &HashMap<String, String>) -> HashMap<String, String> {
    let mut entries: Vec<_> = map.iter().collect();
    entries.sort();
    entries.reverse();
    entries
        .into_iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Bad input is the caller's mistake: InvalidArgument, or NotFound where
/// `not_found` says the contract wants it; never Internal or anything else.
#[track_caller]
fn caller_mistake(what: &str, e: &Error, not_found: bool) {
    match e {
        Error::InvalidArgument(_) => {}
        Error::NotFound(_) if not_found => {}
        other => panic!("{what}: bad input must be InvalidArgument, got {other:?}"),
    }
}
