//! NodeStageVolume and NodeUnstageVolume: choosing the NFS source from the
//! volume context, assembling mount options (capability flags plus the
//! volume's mTLS mode), and the staging mount's life. Mounting itself goes
//! through `Mounter`; nothing here calls the kernel.

use super::{
    absolute_path, cleanup_mount_point, create_dir, mount_capability, mount_flags, required,
    NodePlugin,
};
use crate::proto::csi;
use crate::{Error, Result};
use std::collections::HashMap;
use std::net::Ipv6Addr;
use std::path::PathBuf;

/// Volume context keys written by CreateVolume.
const MOUNT_TARGET: &str = "mount-target";
const MOUNT_TARGET_IPS: &str = "mount-target-ips";
const MTLS_MODE: &str = "mtls-mode";

const MTLS_OPTION: &str = "xprtsec=mtls";

/// The Space's mTLS mode as recorded in the volume context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MtlsMode {
    Required,
    /// Try with mTLS, fall back to a plain mount when that attempt fails.
    Optional,
    Disabled,
}

impl MtlsMode {
    /// Absent or empty means disabled: the controller leaves the key out when
    /// the Space's mode is unknown.
    pub fn from_context(context: &HashMap<String, String>) -> Result<MtlsMode> {
        match context.get(MTLS_MODE).map(String::as_str) {
            None | Some("") | Some("disabled") => Ok(MtlsMode::Disabled),
            Some("required") => Ok(MtlsMode::Required),
            Some("optional") => Ok(MtlsMode::Optional),
            Some(_) => Err(Error::InvalidArgument(
                "invalid mtls-mode value, must be one of: required, optional, disabled".into(),
            )),
        }
    }

    /// The option lists to try, in order. An `xprtsec=` the StorageClass set
    /// explicitly is kept alone (two values would leave the outcome to
    /// mount.nfs): in `optional` or `disabled` mode it is the admin's
    /// deliberate choice; in `required` mode anything but `mtls` contradicts
    /// the Space and is refused rather than tried.
    pub fn attempts(self, flags: &[String]) -> Result<Vec<Vec<String>>> {
        let explicit = flags.iter().find(|f| f.starts_with("xprtsec="));
        if let Some(explicit) = explicit {
            if self == MtlsMode::Required && explicit != MTLS_OPTION {
                return Err(Error::InvalidArgument(format!(
                    "mount flag {explicit} conflicts with the volume's mtls-mode required ({MTLS_OPTION})"
                )));
            }
            return Ok(vec![flags.to_vec()]);
        }
        let with_mtls = || {
            let mut options = flags.to_vec();
            options.push(MTLS_OPTION.to_string());
            options
        };
        Ok(match self {
            MtlsMode::Required => vec![with_mtls()],
            MtlsMode::Optional => vec![with_mtls(), flags.to_vec()],
            MtlsMode::Disabled => vec![flags.to_vec()],
        })
    }
}

/// The NFS source: `mount-target` when non-empty, else the first usable
/// entry of `mount-target-ips`.
pub fn mount_source(context: &HashMap<String, String>) -> Result<String> {
    if let Some(fqdn) = context.get(MOUNT_TARGET).filter(|v| !v.trim().is_empty()) {
        return Ok(fqdn.trim().to_string());
    }
    let ips = context
        .get(MOUNT_TARGET_IPS)
        .map(String::as_str)
        .unwrap_or("");
    let entries: Vec<&str> = ips
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    if let Some(usable) = entries.iter().find(|e| is_usable_ip_source(e)) {
        return Ok(usable.to_string());
    }
    let mut message = "mount-target is required in volume context".to_string();
    if !entries.is_empty() {
        message.push_str(&format!(
            " (mount-target-ips has no usable IPv6 entry; IPv4 and IPv4-mapped IPv6 are not supported: {ips})"
        ));
    }
    Err(Error::InvalidArgument(message))
}

/// `[<ipv6>]:/<export>` with a real IPv6 address. IPv4 (`a.b.c.d:/x`) and
/// IPv4-mapped IPv6 (`[::ffff:a.b.c.d]`) are not usable from the node.
fn is_usable_ip_source(entry: &str) -> bool {
    let Some((address, export)) = entry
        .strip_prefix('[')
        .and_then(|rest| rest.split_once(']'))
    else {
        return false;
    };
    let Some(path) = export.strip_prefix(':') else {
        return false;
    };
    path.starts_with('/')
        && address
            .parse::<Ipv6Addr>()
            .is_ok_and(|ip| ip.to_ipv4_mapped().is_none())
}

/// A validated NodeStageVolume request.
#[derive(Debug)]
struct StageRequest {
    volume_id: String,
    staging: PathBuf,
    source: String,
    mtls: MtlsMode,
    /// The option lists to mount with, in order (see `MtlsMode::attempts`).
    attempts: Vec<Vec<String>>,
}

impl StageRequest {
    fn parse(req: &csi::NodeStageVolumeRequest) -> Result<StageRequest> {
        let volume_id = required(&req.volume_id, "volume ID is not set")?;
        let staging = absolute_path(&req.staging_target_path, "staging target path is not set")?;
        let mount = mount_capability(req.volume_capability.as_ref())?;
        let source = mount_source(&req.volume_context)?;
        let mtls = MtlsMode::from_context(&req.volume_context)?;
        let attempts = mtls.attempts(&mount_flags(mount))?;
        Ok(StageRequest {
            volume_id,
            staging,
            source,
            mtls,
            attempts,
        })
    }
}

impl NodePlugin {
    /// A mount helper killed at `NFS_MOUNT_TIMEOUT` fails the RPC with
    /// DeadlineExceeded rather than Internal: kubelet then treats the stage
    /// as possibly in progress (uncertain), keeps retrying, and still calls
    /// NodeUnstageVolume on teardown, while the mounter has already undone
    /// any mount the killed helper managed to make.
    pub(super) fn stage(
        &self,
        req: &csi::NodeStageVolumeRequest,
    ) -> Result<csi::NodeStageVolumeResponse> {
        let r = StageRequest::parse(req)?;
        let _guard = self.volumes.try_lock(&r.volume_id)?;
        let failed = |e: Error| {
            e.context(format!(
                "NodeStageVolume failed to stage volume {} at path {}",
                r.volume_id,
                r.staging.display()
            ))
        };
        // Already staged: kubelet retries after lost replies, and a second
        // NFS mount on top would stack. The existing mount is kept as it is;
        // a different source is worth a warning for whoever debugs it.
        let table = self.mounter.mount_table().map_err(failed)?;
        if let Some(existing) = table.find(&r.staging) {
            if existing.source != r.source {
                log::warn!(
                    "volume {}: {} is already mounted from {} ({}), not {}; keeping it",
                    r.volume_id,
                    r.staging.display(),
                    existing.source,
                    existing.fs_type,
                    r.source
                );
            }
            return Ok(csi::NodeStageVolumeResponse::new());
        }
        drop(table);
        create_dir(&r.staging)?;
        self.mount_with_fallback(&r).map_err(failed)?;
        log::info!(
            "staged volume {} from {} at {}",
            r.volume_id,
            r.source,
            r.staging.display()
        );
        Ok(csi::NodeStageVolumeResponse::new())
    }

    /// Runs the attempts of the mTLS mode in order; `optional` falls back to
    /// a plain mount after any failure, a timed-out TLS handshake included.
    /// The last attempt's error is the RPC's (its code decides how kubelet
    /// treats the stage), with the first one's kept in the message.
    fn mount_with_fallback(&self, r: &StageRequest) -> Result<()> {
        let mut first_error: Option<Error> = None;
        for options in &r.attempts {
            match self.mounter.mount_nfs4(&r.source, &r.staging, options) {
                Ok(()) => return Ok(()),
                Err(e) => match first_error {
                    None => {
                        if r.mtls == MtlsMode::Optional {
                            log::warn!(
                                "volume {}: optional mTLS mount failed, retrying without mTLS: {e}",
                                r.volume_id
                            );
                        }
                        first_error = Some(e);
                    }
                    Some(first) => {
                        return Err(e.context(format!("without mTLS (with mTLS: {first})")))
                    }
                },
            }
        }
        Err(first_error.unwrap_or_else(|| Error::Internal("no mount attempted".into())))
    }

    pub(super) fn unstage(
        &self,
        req: &csi::NodeUnstageVolumeRequest,
    ) -> Result<csi::NodeUnstageVolumeResponse> {
        let volume_id = required(&req.volume_id, "volume ID is not set")?;
        let staging = absolute_path(&req.staging_target_path, "staging target path is not set")?;
        let _guard = self.volumes.try_lock(&volume_id)?;
        cleanup_mount_point(self.mounter.as_ref(), &staging).map_err(|e| {
            e.context(format!(
                "NodeUnstageVolume failed to unmount at path {}",
                staging.display()
            ))
        })?;
        Ok(csi::NodeUnstageVolumeResponse::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn flags(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_fqdn_wins_over_ips() {
        let ctx = context(&[
            (MOUNT_TARGET, "fs-1.nfs.us-east.linode.com:/pvc-1"),
            (MOUNT_TARGET_IPS, "[2001:db8::1]:/pvc-1"),
        ]);
        assert_eq!(
            mount_source(&ctx).unwrap(),
            "fs-1.nfs.us-east.linode.com:/pvc-1"
        );
    }

    #[test]
    fn without_fqdn_the_first_usable_ipv6_entry_is_used() {
        let ctx = context(&[
            (MOUNT_TARGET, ""),
            (
                MOUNT_TARGET_IPS,
                "10.0.0.5:/pvc-1, [::ffff:10.0.0.5]:/pvc-1, [2001:db8::7]:/pvc-1,[2001:db8::8]:/pvc-1",
            ),
        ]);
        assert_eq!(mount_source(&ctx).unwrap(), "[2001:db8::7]:/pvc-1");
    }

    #[test]
    fn ipv4_only_or_nothing_is_invalid_argument() {
        for ctx in [
            context(&[(
                MOUNT_TARGET_IPS,
                "10.0.0.5:/pvc-1,[::ffff:192.0.2.1]:/pvc-1",
            )]),
            context(&[(MOUNT_TARGET, " "), (MOUNT_TARGET_IPS, "")]),
            context(&[]),
        ] {
            let err = mount_source(&ctx).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
            assert!(
                err.message()
                    .starts_with("mount-target is required in volume context"),
                "{err}"
            );
        }
    }

    #[test]
    fn malformed_ip_entries_are_not_usable() {
        for entry in [
            "2001:db8::1:/x",    // unbracketed
            "[2001:db8::1]/x",   // no colon
            "[2001:db8::1]:x",   // relative export
            "[not-an-ip]:/x",    // garbage
            "[fe80::1%eth0]:/x", // zone ids are node-specific
        ] {
            assert!(!is_usable_ip_source(entry), "{entry}");
        }
        assert!(is_usable_ip_source("[2001:db8::1]:/"));
    }

    #[test]
    fn mtls_modes_parse_and_unknown_values_are_rejected() {
        assert_eq!(
            MtlsMode::from_context(&context(&[])).unwrap(),
            MtlsMode::Disabled
        );
        assert_eq!(
            MtlsMode::from_context(&context(&[(MTLS_MODE, "")])).unwrap(),
            MtlsMode::Disabled
        );
        assert_eq!(
            MtlsMode::from_context(&context(&[(MTLS_MODE, "disabled")])).unwrap(),
            MtlsMode::Disabled
        );
        assert_eq!(
            MtlsMode::from_context(&context(&[(MTLS_MODE, "required")])).unwrap(),
            MtlsMode::Required
        );
        assert_eq!(
            MtlsMode::from_context(&context(&[(MTLS_MODE, "optional")])).unwrap(),
            MtlsMode::Optional
        );
        let err = MtlsMode::from_context(&context(&[(MTLS_MODE, "Required")])).unwrap_err();
        assert_eq!(
            err,
            Error::InvalidArgument(
                "invalid mtls-mode value, must be one of: required, optional, disabled".into()
            )
        );
    }

    #[test]
    fn attempts_follow_the_mode() {
        let base = flags(&["vers=4.2"]);
        assert_eq!(
            MtlsMode::Required.attempts(&base).unwrap(),
            vec![flags(&["vers=4.2", "xprtsec=mtls"])]
        );
        assert_eq!(
            MtlsMode::Optional.attempts(&base).unwrap(),
            vec![flags(&["vers=4.2", "xprtsec=mtls"]), flags(&["vers=4.2"])]
        );
        assert_eq!(
            MtlsMode::Disabled.attempts(&base).unwrap(),
            vec![base.clone()]
        );
        assert_eq!(
            MtlsMode::Disabled.attempts(&[]).unwrap(),
            vec![Vec::<String>::new()]
        );
    }

    #[test]
    fn an_explicit_xprtsec_flag_is_kept_alone_unless_it_contradicts_required() {
        let explicit = flags(&["xprtsec=tls"]);
        for mode in [MtlsMode::Optional, MtlsMode::Disabled] {
            assert_eq!(
                mode.attempts(&explicit).unwrap(),
                vec![explicit.clone()],
                "{mode:?}"
            );
        }
        let err = MtlsMode::Required.attempts(&explicit).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        let mtls = flags(&["xprtsec=mtls"]);
        assert_eq!(MtlsMode::Required.attempts(&mtls).unwrap(), vec![mtls]);
    }
}
