//! The endpoints that change the state: create, delete, clone, snapshot and
//! access-policy PUT, each validating its body like the API and emitting the
//! [`FakeEvent`]s dev mode mirrors. They must not route or render lists.

use super::state::{
    export_path, now_ms, now_secs, FakeEvent, FsRec, Phase, PolicyPut, PolicyRec, SnapRec,
    SnapshotTimes, State,
};
use super::wire::api_error::{ApiError, ApiResult};
use serde_json::{json, Value};

const MAX_LABEL_BYTES: usize = 63;
/// Modelled, not documented: what a backend whose create takes no capacity
/// gives every filesystem (1 TiB, the size the contract's fixtures use).
const FORK_FILESYSTEM_CAPACITY: i64 = 1 << 40;

fn validate_label(value: Option<&Value>, errors: &mut Vec<(Option<String>, String)>) {
    let field = Some("label".to_string());
    match value.and_then(Value::as_str) {
        None => errors.push((field, "label is required".to_string())),
        Some(l) if l.is_empty() || l.len() > MAX_LABEL_BYTES => {
            errors.push((field, "Length must be 1-63 characters".to_string()))
        }
        Some(l)
            if !l
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b)) =>
        {
            errors.push((
                field,
                "Must only use lowercase ASCII letters, numbers, hyphens, underscores and periods"
                    .to_string(),
            ))
        }
        Some(_) => {}
    }
}

fn string_list(value: Option<&Value>) -> Option<Vec<String>> {
    match value {
        None | Some(Value::Null) => Some(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect(),
        Some(_) => None,
    }
}

fn validate_region(
    state: &State,
    value: Option<&Value>,
    errors: &mut Vec<(Option<String>, String)>,
) {
    match value.and_then(Value::as_str) {
        Some(r) if state.regions.iter().any(|x| x == r) => {}
        _ => errors.push((
            Some("region".to_string()),
            "region is not valid".to_string(),
        )),
    }
}

/// The longest tag the API takes.
const LONGEST_TAG: usize = 50;

fn validate_tags(value: Option<&Value>, errors: &mut Vec<(Option<String>, String)>) -> Vec<String> {
    let tags = string_list(value).unwrap_or_else(|| {
        errors.push((
            Some("tags".to_string()),
            "Must be a list of strings".to_string(),
        ));
        Vec::new()
    });
    if tags.iter().any(|t| t.chars().count() > LONGEST_TAG) {
        errors.push((
            Some("tags".to_string()),
            format!("Length must be at most {LONGEST_TAG} characters"),
        ));
    }
    tags
}

fn insert_filesystem(
    state: &mut State,
    space_id: u64,
    label: &str,
    region: &str,
    max_capacity_bytes: i64,
    tags: Vec<String>,
    source_snapshot_id: Option<u64>,
) -> u64 {
    let id = state.next_filesystem_id;
    state.next_filesystem_id += 1;
    let now = now_ms();
    let created = (now / 1000) as i64;
    let policy = PolicyRec::fresh(label, &state.default_squash_policy, created);
    // A clone turns active once its snapshot's data is copied.
    let copying = source_snapshot_id.map_or(0, |snap| state.clone_copy_ms(snap));
    state.filesystems.insert(
        id,
        FsRec {
            id,
            space_id,
            label: label.to_string(),
            region: region.to_string(),
            tags,
            max_capacity_bytes,
            source_snapshot_id,
            phase: Phase::Creating,
            transition_at: now + state.activation_delay_ms + copying,
            mount_targets: false,
            hide_fqdn: false,
            hide_ips: false,
            created,
            updated: created,
            policy,
            unquoted_bytes: 0,
        },
    );
    id
}

fn check_unique_label(state: &State, space_id: u64, label: &str) -> Result<(), ApiError> {
    if state.unique_filesystem_labels
        && state
            .filesystems
            .values()
            .any(|f| f.space_id == space_id && f.label == label)
    {
        return Err(ApiError::bad(
            "label",
            "Label must be unique among filesystems in the space",
        ));
    }
    Ok(())
}

pub(super) fn create_filesystem(
    state: &mut State,
    space_id: u64,
    b: &serde_json::Map<String, Value>,
) -> ApiResult {
    state.space(space_id)?;
    // The fork's create body has no capacity: a sent one is an unknown
    // field (ignored, §9.4), and the backend sizes the filesystem itself.
    let in_stats = state.dialect.capacity_in_stats;
    let capacity = match in_stats {
        true => Some(FORK_FILESYSTEM_CAPACITY),
        false => b.get("max_capacity_bytes").and_then(Value::as_i64),
    };
    let id = insert_from_body(state, space_id, b, capacity.unwrap_or(0), None, |errors| {
        if capacity.is_none_or(|c| c <= 0) {
            errors.push((
                Some("max_capacity_bytes".to_string()),
                "Must be a positive integer".to_string(),
            ));
        }
        if let Some(p) = b.get("protocol_versions") {
            if string_list(Some(p)) != Some(vec!["nfsv4".to_string()]) {
                errors.push((
                    Some("protocol_versions".to_string()),
                    "Must be [\"nfsv4\"]".to_string(),
                ));
            }
        }
    })?;
    Ok(state.fs_json(&state.filesystems[&id]))
}

/// The checks create and clone share (label, region, `extra`, tags, label
/// uniqueness), then the new filesystem; its id.
fn insert_from_body(
    state: &mut State,
    space_id: u64,
    b: &serde_json::Map<String, Value>,
    capacity: i64,
    source_snapshot: Option<u64>,
    extra: impl FnOnce(&mut Vec<(Option<String>, String)>),
) -> Result<u64, ApiError> {
    let mut errors = Vec::new();
    validate_label(b.get("label"), &mut errors);
    validate_region(state, b.get("region"), &mut errors);
    extra(&mut errors);
    let tags = validate_tags(b.get("tags"), &mut errors);
    ApiError::if_invalid(errors)?;
    let label = b["label"].as_str().unwrap_or_default();
    check_unique_label(state, space_id, label)?;
    let region = b["region"].as_str().unwrap_or_default();
    Ok(insert_filesystem(
        state,
        space_id,
        label,
        region,
        capacity,
        tags,
        source_snapshot,
    ))
}

pub(super) fn delete_filesystem(
    state: &mut State,
    space_id: u64,
    fs_id: u64,
    events: &mut Vec<FakeEvent>,
) -> ApiResult {
    state.filesystem(space_id, fs_id)?;
    let delay = state.deletion_delay_ms;
    let fs = state
        .filesystems
        .get_mut(&fs_id)
        .ok_or_else(ApiError::not_found)?;
    if fs.phase != Phase::Deleting {
        fs.phase = Phase::Deleting;
        fs.transition_at = now_ms() + delay;
        events.push(FakeEvent::FilesystemDeleted {
            space_id,
            filesystem_id: fs_id,
            export: export_path(&fs.label, fs_id),
        });
    }
    Ok(json!({}))
}

pub(super) fn put_policy(
    state: &mut State,
    space_id: u64,
    fs_id: u64,
    b: &serde_json::Map<String, Value>,
) -> ApiResult {
    state.filesystem(space_id, fs_id)?;
    let mut errors = Vec::new();
    if b.contains_key("label") {
        validate_label(b.get("label"), &mut errors);
    }
    let enabled = match b.get("enabled") {
        None => None,
        Some(Value::Bool(e)) => Some(*e),
        Some(_) => {
            errors.push((Some("enabled".to_string()), "Must be a boolean".to_string()));
            None
        }
    };
    let linode_ids = match b.get("linode_ids") {
        None => None,
        Some(v) => {
            let list: Option<Vec<u64>> = v
                .as_array()
                .and_then(|a| a.iter().map(Value::as_u64).collect());
            match list {
                None => {
                    errors.push((
                        Some("linode_ids".to_string()),
                        "Must be a list of IDs".to_string(),
                    ));
                    None
                }
                Some(list) => {
                    let mut seen = std::collections::BTreeSet::new();
                    for id in &list {
                        if !seen.insert(*id) {
                            errors.push((
                                Some("linode_ids".to_string()),
                                format!("Duplicate ID {id}"),
                            ));
                        } else if !state.instances.contains_key(id) {
                            errors.push((
                                Some("linode_ids".to_string()),
                                format!("Linode {id} not found"),
                            ));
                        }
                    }
                    Some(list)
                }
            }
        }
    };
    let squash = match b.get("squash_policy") {
        None => None,
        Some(v) => match v.as_str() {
            Some(s @ ("none" | "root_squash" | "all_squash")) => Some(s.to_string()),
            _ => {
                errors.push((
                    Some("squash_policy".to_string()),
                    "Must be one of none, root_squash, all_squash".to_string(),
                ));
                None
            }
        },
    };
    let protocols = match b.get("protocols") {
        None => None,
        Some(v) if string_list(Some(v)) == Some(vec!["nfsv4".to_string()]) => {
            Some(vec!["nfsv4".to_string()])
        }
        Some(_) => {
            errors.push((
                Some("protocols".to_string()),
                "Must be [\"nfsv4\"]".to_string(),
            ));
            None
        }
    };
    ApiError::if_invalid(errors)?;
    let merge = state.policy_put == PolicyPut::Merge;
    let default_squash = state.default_squash_policy.clone();
    let until = now_ms() + state.activation_delay_ms;
    let fs = state
        .filesystems
        .get_mut(&fs_id)
        .ok_or_else(ApiError::not_found)?;
    let old = fs.policy.clone();
    let fresh = PolicyRec::fresh(&fs.label, &default_squash, old.created);
    let base = if merge { &old } else { &fresh };
    fs.policy = PolicyRec {
        label: b
            .get("label")
            .and_then(Value::as_str)
            .map_or_else(|| base.label.clone(), str::to_string),
        enabled: enabled.unwrap_or(base.enabled),
        linode_ids: linode_ids.unwrap_or_else(|| base.linode_ids.clone()),
        squash_policy: squash.unwrap_or_else(|| base.squash_policy.clone()),
        protocols: protocols.unwrap_or_else(|| base.protocols.clone()),
        updating_until: Some(until),
        error: false,
        created: old.created,
        updated: Some(now_secs()),
    };
    let fs = &state.filesystems[&fs_id];
    Ok(state.fs_policy_json(fs))
}

pub(super) fn create_snapshot(
    state: &mut State,
    space_id: u64,
    fs_id: u64,
    b: &serde_json::Map<String, Value>,
    events: &mut Vec<FakeEvent>,
) -> ApiResult {
    let fs = state.filesystem(space_id, fs_id)?;
    if fs.phase == Phase::Deleting {
        return Err(ApiError::new(400, None, "Filesystem is being deleted"));
    }
    let source_export = export_path(&fs.label, fs.id);
    let mut errors = Vec::new();
    validate_label(b.get("label"), &mut errors);
    let tags = match b.get("tags") {
        None => Vec::new(),
        tags => validate_tags(tags, &mut errors),
    };
    ApiError::if_invalid(errors)?;
    let label = b["label"].as_str().unwrap_or_default().to_string();
    if state
        .snapshots
        .values()
        .any(|s| s.filesystem_id == fs_id && s.label == label)
    {
        return Err(ApiError::new(
            state.snapshot_duplicate_status,
            Some("label"),
            "A snapshot with this label already exists",
        ));
    }
    let id = state.next_snapshot_id;
    state.next_snapshot_id += 1;
    let now = now_ms();
    let data_bytes = state.content.usage(&source_export, "/").map(|u| u.bytes);
    state.snapshots.insert(
        id,
        SnapRec {
            id,
            filesystem_id: fs_id,
            space_id,
            label,
            phase: Phase::Creating,
            transition_at: now + state.activation_delay_ms,
            locked: b.get("locked").and_then(Value::as_bool).unwrap_or(false),
            created: (now / 1000) as i64,
            updated: Some((now / 1000) as i64),
            times: SnapshotTimes::Both,
            tags,
            data_bytes,
        },
    );
    events.push(FakeEvent::SnapshotCreated {
        space_id,
        filesystem_id: fs_id,
        snapshot_id: id,
        label: state.snapshots[&id].label.clone(),
        source_export,
    });
    Ok(state.snap_json(&state.snapshots[&id]))
}

pub(super) fn delete_snapshot(
    state: &mut State,
    space_id: u64,
    fs_id: u64,
    snap_id: u64,
    events: &mut Vec<FakeEvent>,
) -> ApiResult {
    let snap = state.snapshot(space_id, fs_id, snap_id)?;
    if snap.locked {
        return Err(ApiError::new(
            state.locked_delete_status,
            None,
            "Snapshot is locked and cannot be deleted",
        ));
    }
    let held = state.snapshots_held_by_clones
        && state
            .filesystems
            .values()
            .any(|f| f.source_snapshot_id == Some(snap_id) && f.phase != Phase::Deleting);
    if held {
        return Err(ApiError::new(
            409,
            None,
            "Snapshot has clones and cannot be deleted",
        ));
    }
    let delay = state.deletion_delay_ms;
    let fs = &state.filesystems[&fs_id];
    let source_export = export_path(&fs.label, fs.id);
    let snap = state
        .snapshots
        .get_mut(&snap_id)
        .ok_or_else(ApiError::not_found)?;
    if snap.phase != Phase::Deleting {
        snap.phase = Phase::Deleting;
        snap.transition_at = now_ms() + delay;
        snap.updated = Some(now_secs());
        events.push(FakeEvent::SnapshotDeleted {
            snapshot_id: snap_id,
            label: snap.label.clone(),
            source_export,
        });
    }
    Ok(json!({}))
}

/// `PUT …/filesystems/{id}`: only `tags` and `label` may change; the
/// capacity is not editable (linode-api.md §2.3).
pub(super) fn update_filesystem(
    state: &mut State,
    space_id: u64,
    fs_id: u64,
    b: &serde_json::Map<String, Value>,
) -> ApiResult {
    state.filesystem(space_id, fs_id)?;
    let mut errors = Vec::new();
    if b.contains_key("max_capacity_bytes") || b.contains_key("max_file_count") {
        errors.push((
            Some("max_capacity_bytes".to_string()),
            "This field is not editable".to_string(),
        ));
    }
    let tags = b.get("tags").map(|t| validate_tags(Some(t), &mut errors));
    if b.contains_key("label") {
        validate_label(b.get("label"), &mut errors);
    }
    ApiError::if_invalid(errors)?;
    let fs = state
        .filesystems
        .get_mut(&fs_id)
        .ok_or_else(ApiError::not_found)?;
    if let Some(tags) = tags {
        fs.tags = tags;
    }
    if let Some(label) = b.get("label").and_then(Value::as_str) {
        fs.label = label.to_string();
    }
    fs.updated = now_secs();
    Ok(state.fs_json(&state.filesystems[&fs_id]))
}

pub(super) fn clone_snapshot(
    state: &mut State,
    space_id: u64,
    fs_id: u64,
    snap_id: u64,
    b: &serde_json::Map<String, Value>,
    events: &mut Vec<FakeEvent>,
) -> ApiResult {
    let snap = state.snapshot(space_id, fs_id, snap_id)?;
    if snap.phase != Phase::Active {
        return Err(ApiError::new(400, None, "Snapshot is not active"));
    }
    let source = &state.filesystems[&fs_id];
    // Modelled, not documented: a clone may grow but never shrink below
    // the data it copies.
    let capacity = match b.get("size_gib") {
        None | Some(Value::Null) => source.max_capacity_bytes,
        Some(v) => match v.as_i64().filter(|g| (1..=1 << 20).contains(g)) {
            Some(g) if g << 30 >= source.max_capacity_bytes => g << 30,
            Some(_) => {
                return Err(ApiError::bad(
                    "size_gib",
                    "Must not be smaller than the source filesystem",
                ))
            }
            None => return Err(ApiError::bad("size_gib", "Must be a positive integer")),
        },
    };
    let target_space = match b.get("space_id") {
        None | Some(Value::Null) => space_id,
        Some(v) => v
            .as_u64()
            .ok_or_else(|| ApiError::bad("space_id", "Must be an integer"))?,
    };
    state.space(target_space)?;
    let id = insert_from_body(state, target_space, b, capacity, Some(snap_id), |_| {})?;
    events.push(FakeEvent::CloneCreated {
        snapshot_id: snap_id,
        space_id: target_space,
        filesystem_id: id,
        export: export_path(&state.filesystems[&id].label, id),
    });
    Ok(state.fs_json(&state.filesystems[&id]))
}

#[cfg(test)]
mod tests {
    use super::super::content::{ContentHook, DirUsage, ExportContent};
    use super::super::seed::{Seed, SpaceSeed};
    use super::super::state::CloneRate;
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    /// Every tree of every export holds this many bytes.
    struct Holding(i64);

    impl ExportContent for Holding {
        fn is_directory(&self, _: &str, _: &str) -> bool {
            true
        }

        fn usage(&self, _: &str, _: &str) -> Option<DirUsage> {
            Some(DirUsage {
                bytes: self.0,
                files: 1,
                collected_at: None,
            })
        }
    }

    fn body(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    /// The id in an answer the call must have given.
    fn id(answer: ApiResult) -> u64 {
        match answer {
            Ok(answer) => answer["id"].as_u64().unwrap(),
            Err(e) => panic!("answered {}", e.status),
        }
    }

    /// A state whose one filesystem (space 7) holds `bytes` (nothing
    /// answers for its content when `None`), with an active snapshot of
    /// it; the filesystem's id and the snapshot's. New objects then stay
    /// `creating` for 200 ms.
    fn snapshotted(bytes: Option<i64>) -> (State, u64, u64) {
        let mut state = State::from_seed(&Seed::default().with_space(SpaceSeed::new(7, "s")));
        state.content = ContentHook(bytes.map(|b| Arc::new(Holding(b)) as Arc<dyn ExportContent>));
        let fs = id(create_filesystem(
            &mut state,
            7,
            &body(json!({"label": "data", "region": "us-ord", "max_capacity_bytes": 1 << 30})),
        ));
        let snap = id(create_snapshot(
            &mut state,
            7,
            fs,
            &body(json!({"label": "s"})),
            &mut Vec::new(),
        ));
        state.advance(now_ms(), &mut Vec::new());
        state.activation_delay_ms = 200;
        (state, fs, snap)
    }

    /// How long after its POST a clone of the snapshot turns active (ms),
    /// as bounds: the POST itself takes a moment.
    fn clone_after(state: &mut State, fs: u64, snap: u64) -> (u64, u64) {
        let before = now_ms();
        let label = format!("copy-{}", state.next_filesystem_id);
        let clone = id(clone_snapshot(
            state,
            7,
            fs,
            snap,
            &body(json!({"label": label, "region": "us-ord"})),
            &mut Vec::new(),
        ));
        let after = now_ms();
        let at = state.filesystems[&clone].transition_at;
        (at - after, at - before)
    }

    fn within(bounds: (u64, u64), want: u64) -> bool {
        bounds.0 <= want && want <= bounds.1
    }

    #[test]
    fn clones_copy_their_snapshot_s_data_at_the_clone_rate_up_to_the_cap() {
        let (mut state, fs, snap) = snapshotted(Some(3 << 20));
        assert_eq!(state.snapshots[&snap].data_bytes, Some(3 << 20));
        let at_once = clone_after(&mut state, fs, snap);
        assert!(within(at_once, 200), "no clone rate: {at_once:?}");

        let rate = |bytes_per_second, cap| {
            Some(CloneRate {
                setup: Duration::ZERO,
                bytes_per_second,
                cap: Duration::from_millis(cap),
            })
        };
        state.clone_rate = rate(1 << 20, 10_000);
        let copied = clone_after(&mut state, fs, snap);
        assert!(within(copied, 200 + 3000), "3 MiB at 1 MiB/s: {copied:?}");
        state.clone_rate = rate(1 << 20, 1000);
        let capped = clone_after(&mut state, fs, snap);
        assert!(within(capped, 200 + 1000), "capped: {capped:?}");
        state.clone_rate = rate(0, 1500);
        let stalled = clone_after(&mut state, fs, snap);
        assert!(within(stalled, 200 + 1500), "rate 0: {stalled:?}");
        // The setup comes before the copy, outside its cap.
        state.clone_rate = rate(1 << 20, 1000).map(|r| CloneRate {
            setup: Duration::from_millis(500),
            ..r
        });
        let set_up = clone_after(&mut state, fs, snap);
        assert!(within(set_up, 200 + 500 + 1000), "setup: {set_up:?}");

        // Without content the snapshot holds what it shows as its size.
        let (mut state, fs, snap) = snapshotted(None);
        assert_eq!(state.snapshots[&snap].data_bytes, None);
        state.clone_rate = rate(1 << 20, 10_000);
        let shown = clone_after(&mut state, fs, snap);
        assert!(within(shown, 200 + 4000), "4 MiB at 1 MiB/s: {shown:?}");
    }

    #[test]
    fn labels_are_validated() {
        let check = |v: Value| {
            let mut e = Vec::new();
            validate_label(Some(&v), &mut e);
            e.len()
        };
        assert_eq!(check(json!("pvc-0a1b.c_d")), 0);
        assert_eq!(check(json!("a".repeat(63))), 0);
        assert_eq!(check(json!("a".repeat(64))), 1);
        assert_eq!(check(json!("")), 1);
        assert_eq!(check(json!("Upper")), 1);
        assert_eq!(check(json!(5)), 1);
    }
}
