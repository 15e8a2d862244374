//! Node requests and the volume context NodeStageVolume reads.

use super::{caller_mistake, pairs, text};
use crate::handles::{DirName, SubdirId};
use crate::node::{
    parse_stats, parse_unpublish, parse_unstage, MtlsMode, PublishRequest, StageContext,
    StageRequest,
};
use crate::proto::csi;
use protobuf::Message;
use std::path::{Component, Path};

/// A selector byte, then a NodeStage, NodeUnstage, NodePublish,
/// NodeUnpublish or NodeGetVolumeStats request: each passes its handler's
/// validation or is InvalidArgument (NotFound for a stats path that cannot
/// be a volume's); what passes names absolute paths without `..`, and a
/// stage of a directory of a shared filesystem mounts exactly the
/// context's sources with that directory, named by the id, appended, and
/// only when the context names the id's Space and filesystem.
pub fn node_requests(data: &[u8]) {
    let Some((&kind, bytes)) = data.split_first() else {
        return;
    };
    match kind % 5 {
        0 => {
            if let Some(req) = decode::<csi::NodeStageVolumeRequest>(bytes) {
                match StageRequest::parse(&req) {
                    Ok(staged) => staged_sources(&req, &staged),
                    Err(e) => caller_mistake("NodeStageVolume", &e, false),
                }
            }
        }
        1 => {
            if let Some(req) = decode::<csi::NodeUnstageVolumeRequest>(bytes) {
                match parse_unstage(&req) {
                    Ok((_, staging)) => request_path(&staging),
                    Err(e) => caller_mistake("NodeUnstageVolume", &e, false),
                }
            }
        }
        2 => {
            if let Some(req) = decode::<csi::NodePublishVolumeRequest>(bytes) {
                if let Err(e) = PublishRequest::parse(&req) {
                    caller_mistake("NodePublishVolume", &e, false);
                }
            }
        }
        3 => {
            if let Some(req) = decode::<csi::NodeUnpublishVolumeRequest>(bytes) {
                match parse_unpublish(&req) {
                    Ok(target) => request_path(&target),
                    Err(e) => caller_mistake("NodeUnpublishVolume", &e, false),
                }
            }
        }
        _ => {
            if let Some(req) = decode::<csi::NodeGetVolumeStatsRequest>(bytes) {
                match parse_stats(&req) {
                    Ok(path) => request_path(&path),
                    Err(e) => caller_mistake("NodeGetVolumeStats", &e, true),
                }
            }
        }
    }
}

/// The sources a stage that passed mounts: the context's own, or for a
/// `{space}/{filesystem}/{name}` id each of them with `/csi-volumes/<name>`
/// appended and nothing else (the name a checked directory name).
fn staged_sources(req: &csi::NodeStageVolumeRequest, staged: &StageRequest) {
    let context = StageContext::parse(&req.volume_context).expect("a stage that passed");
    let plain: Vec<&str> = context.sources.all().collect();
    let mounted: Vec<&str> = staged.sources().collect();
    assert_eq!(plain.len(), mounted.len());
    let directory = SubdirId::parse(&req.volume_id).ok();
    if let Some(id) = &directory {
        // The context's mount target is its filesystem's: it must be the
        // one the id names.
        assert_eq!(
            context.space_id,
            id.space.to_string(),
            "{:?}",
            req.volume_id
        );
        assert_eq!(context.filesystem_id, id.filesystem.to_string());
    }
    for (plain, mounted) in plain.iter().zip(&mounted) {
        source(mounted);
        match &directory {
            None => assert_eq!(plain, mounted),
            Some(id) => {
                let name = DirName::parse(id.name.as_str()).expect("a checked name");
                let suffix = name.path_in_share();
                assert_eq!(
                    *mounted,
                    format!("{}{suffix}", plain.trim_end_matches('/')),
                    "{:?}",
                    req.volume_id
                );
                assert!(!mounted.contains("/../") && !mounted.ends_with("/.."));
            }
        }
    }
}

pub(super) fn decode<M: Message>(bytes: &[u8]) -> Option<M> {
    M::parse_from_bytes(bytes).ok()
}

/// What a validated request may hand to a syscall.
fn request_path(path: &Path) {
    assert!(path.is_absolute(), "{path:?}");
    assert!(
        !path.components().any(|c| c == Component::ParentDir),
        "{path:?}"
    );
    assert!(path.as_os_str().len() < libc::PATH_MAX as usize);
}

/// `key=value` lines as a volume context and `+flag` lines as mount flags:
/// the context passes or is InvalidArgument; every source it yields is one
/// the mount helper reads as a source; the mount attempts follow the mode.
pub fn volume_context(data: &[u8]) {
    let Some(text) = text(data) else {
        return;
    };
    let (context, flags) = pairs(text);
    let parsed = match StageContext::parse(&context) {
        Ok(parsed) => parsed,
        Err(e) => return caller_mistake("volume context", &e, false),
    };
    source(&parsed.sources.primary);
    if let Some(fallback) = &parsed.sources.fallback {
        source(fallback);
        assert!(fallback.starts_with('['), "{fallback:?} is no IPv6 target");
    }
    attempts(parsed.mtls, &flags);
}

/// `host:/export` or `[ipv6]:/export`, whole: not blank, not padded, no NUL,
/// and never the shape of an option (a leading `-`).
fn source(s: &str) {
    assert!(!s.is_empty() && s.trim() == s, "{s:?}");
    assert!(!s.starts_with('-'), "{s:?} reads as a mount option");
    assert!(!s.contains('\0') && s.contains(":/"), "{s:?}");
}

/// One attempt (two for `optional`), each the flags plus `xprtsec=mtls`
/// where the mode asks for it; a StorageClass's own `xprtsec=` alone,
/// refused only when `required` contradicts it.
fn attempts(mode: MtlsMode, flags: &[String]) {
    let with_mtls = || {
        let mut f = flags.to_vec();
        f.push("xprtsec=mtls".to_string());
        f
    };
    let explicit = flags.iter().find(|f| f.starts_with("xprtsec="));
    match (mode.attempts(flags), explicit) {
        (Ok(list), Some(_)) => assert_eq!(list, vec![flags.to_vec()]),
        (Ok(list), None) => assert_eq!(
            list,
            match mode {
                MtlsMode::Required => vec![with_mtls()],
                MtlsMode::Optional => vec![with_mtls(), flags.to_vec()],
                MtlsMode::Disabled => vec![flags.to_vec()],
            }
        ),
        (Err(e), explicit) => {
            caller_mistake("mount attempts", &e, false);
            assert_eq!(mode, MtlsMode::Required);
            assert_ne!(explicit.map(String::as_str), Some("xprtsec=mtls"));
            assert!(explicit.is_some());
        }
    }
}
