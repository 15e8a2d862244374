//! How `client` prints what the driver answered: volumes, their
//! condition and published nodes, snapshots and group snapshots, as plain
//! text a person reads.

use crate::proto::csi;

pub(super) fn describe_volume(v: &csi::Volume) -> String {
    let mut ctx: Vec<_> = v.volume_context.iter().collect();
    ctx.sort();
    let mut out = format!(
        "volume_id: {}\ncapacity_bytes: {}\n",
        v.volume_id, v.capacity_bytes
    );
    for (k, val) in ctx {
        out.push_str(&format!("context {k}: {val}\n"));
    }
    if let Some(source) = v.content_source.as_ref() {
        if source.has_snapshot() {
            out.push_str(&format!(
                "content_source: snapshot {}\n",
                source.snapshot().snapshot_id
            ));
        } else if source.has_volume() {
            out.push_str(&format!(
                "content_source: volume {}\n",
                source.volume().volume_id
            ));
        }
    }
    out
}

pub(super) fn describe_condition(c: &csi::VolumeCondition) -> String {
    let health = if c.abnormal { "abnormal" } else { "normal" };
    format!("{health} ({})", c.message)
}

/// "none" rather than nothing, so the field never looks cut off.
pub(super) fn node_ids(ids: &[String]) -> String {
    if ids.is_empty() {
        "none".into()
    } else {
        ids.join(",")
    }
}

pub(super) fn describe_group(g: &csi::VolumeGroupSnapshot) -> String {
    let mut out = format!(
        "group_snapshot_id: {} ready_to_use: {}\n",
        g.group_snapshot_id, g.ready_to_use
    );
    for member in &g.snapshots {
        out.push_str("  ");
        out.push_str(&describe_snapshot(member));
    }
    out
}

pub(super) fn describe_snapshot(s: &csi::Snapshot) -> String {
    format!(
        "snapshot_id: {} source_volume_id: {} size_bytes: {} ready_to_use: {}\n",
        s.snapshot_id, s.source_volume_id, s.size_bytes, s.ready_to_use
    )
}
