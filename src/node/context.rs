//! The volume context a NodeStageVolume carries, read and validated: the
//! NFS sources (`mount-target`, `mount-target-ips`), the mTLS mode and the
//! volume type, and the sources of one directory inside the export. A
//! static PV's volume attributes are written by hand, so every attribute the
//! node reads is checked before anything is mounted and a bad one is
//! InvalidArgument naming it. Keys the node does not read are ignored, and
//! never echoed.

use super::input::shown;
use super::volume::volume_type;
use crate::handles::{
    DirName, Kind, CTX_FILESYSTEM_ID, CTX_MOUNT_TARGET, CTX_MOUNT_TARGET_IPS, CTX_MTLS_MODE,
    CTX_SPACE_ID, CTX_VOLUME_TYPE,
};
use crate::{Error, Result};
use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

const MTLS_OPTION: &str = "xprtsec=mtls";

/// mount.nfs's own limits on the two halves of `host:/path`
/// (`NFS_MAXHOSTNAME`, `NFS_MAXPATHNAME` in nfs-utils).
const MAX_HOST_BYTES: usize = 255;
const MAX_EXPORT_BYTES: usize = 1024;

/// Far more than the few addresses a filesystem has; keeps a hand-written
/// attribute from being scanned without end.
const MAX_IPS_BYTES: usize = 4096;

/// What NodeStageVolume reads from the volume context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageContext {
    pub sources: MountSources,
    pub mtls: MtlsMode,
    pub volume_type: Kind,
    /// `space-id` and `filesystem-id` as written ("" when absent), which a
    /// directory volume's id must agree with.
    pub space_id: String,
    pub filesystem_id: String,
}

impl StageContext {
    pub fn parse(context: &HashMap<String, String>) -> Result<StageContext> {
        let attribute = |key: &str| context.get(key).map(String::as_str).unwrap_or("");
        Ok(StageContext {
            sources: MountSources::parse(
                attribute(CTX_MOUNT_TARGET),
                attribute(CTX_MOUNT_TARGET_IPS),
            )?,
            mtls: MtlsMode::parse(attribute(CTX_MTLS_MODE))?,
            volume_type: volume_type(attribute(CTX_VOLUME_TYPE))?,
            space_id: attribute(CTX_SPACE_ID).to_string(),
            filesystem_id: attribute(CTX_FILESYSTEM_ID).to_string(),
        })
    }
}

/// Where the export can be mounted from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountSources {
    /// `mount-target` when set, else the first usable IPv6 entry.
    pub primary: String,
    /// The first usable IPv6 entry when the primary is the `mount-target`
    /// name: mounted only when that name does not resolve on the node.
    pub fallback: Option<String>,
}

impl MountSources {
    fn parse(mount_target: &str, ips: &str) -> Result<MountSources> {
        let name = mount_target.trim();
        if !name.is_empty() {
            check_mount_target(name)?;
        }
        let first_usable = usable_ip_source(ips)?;
        match (name.is_empty(), first_usable) {
            (false, fallback) => Ok(MountSources {
                primary: name.to_string(),
                fallback,
            }),
            (true, Some(ip)) => Ok(MountSources {
                primary: ip,
                fallback: None,
            }),
            (true, None) => {
                let mut message = "mount-target is required in volume context".to_string();
                if !ips.trim().is_empty() {
                    message.push_str(&format!(
                        " (mount-target-ips has no usable IPv6 entry; IPv4 and IPv4-mapped IPv6 are not supported: {})",
                        shown(ips)
                    ));
                }
                Err(Error::InvalidArgument(message))
            }
        }
    }

    /// Every source a staging mount of this volume may have come from.
    pub fn all(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.primary.as_str()).chain(self.fallback.as_deref())
    }

    /// The same sources for directory `dir` of the export
    /// (`host:/export/csi-volumes/<dir>`). `dir` is a checked name, so the
    /// result stays inside the export.
    pub fn within(&self, dir: &DirName) -> Result<MountSources> {
        let join = |source: &str| -> Result<String> {
            let joined = format!("{}{}", source.trim_end_matches('/'), dir.path_in_share());
            let export_bytes = joined.len() - source.find(":/").map_or(0, |i| i + 1);
            if export_bytes > MAX_EXPORT_BYTES {
                return Err(Error::InvalidArgument(format!(
                    "the export path of {} is longer than {MAX_EXPORT_BYTES} bytes",
                    shown(&joined)
                )));
            }
            Ok(joined)
        };
        Ok(MountSources {
            primary: join(&self.primary)?,
            fallback: self.fallback.as_deref().map(join).transpose()?,
        })
    }
}

/// `<host>:/<export>` with a host mount.nfs can look up or parse: a DNS
/// name or IPv4 address, or an IPv6 address in brackets.
fn check_mount_target(value: &str) -> Result<()> {
    let invalid = |why: &str| {
        Err(Error::InvalidArgument(format!(
            "volume attribute mount-target {} {why}",
            shown(value)
        )))
    };
    let (host, export) = match value.strip_prefix('[') {
        Some(rest) => match rest.split_once("]:") {
            Some((address, export)) if address.parse::<Ipv6Addr>().is_ok() => {
                return check_export(export).or_else(|why| invalid(&why))
            }
            _ => return invalid("must be <host>:/<export path>; [<IPv6 address>] is not one"),
        },
        None => match value.split_once(':') {
            Some((host, export)) => (host, export),
            None => return invalid("must be <host>:/<export path>"),
        },
    };
    if host.is_empty() {
        return invalid("must be <host>:/<export path>; the host is empty");
    }
    let host_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
    // No DNS label starts with `-`, and a source that does would reach the
    // mount helper as an option (`-ofoo:/x` is `-o foo:/x`), not a source.
    if host.len() > MAX_HOST_BYTES || !host.chars().all(host_char) || host.starts_with('-') {
        return invalid("must be <host>:/<export path>; the host is not a DNS name or address");
    }
    check_export(export).or_else(|why| invalid(&why))
}

fn check_export(export: &str) -> Result<(), String> {
    if !export.starts_with('/') {
        return Err("must be <host>:/<export path>; the export path is not absolute".into());
    }
    if export.len() > MAX_EXPORT_BYTES || export.contains('\0') {
        return Err(format!(
            "has an export path longer than {MAX_EXPORT_BYTES} bytes or with a NUL byte"
        ));
    }
    // Linode's exports never climb, and a directory volume's path is joined
    // onto this one: with a `..` in it the join could leave the export.
    if export.split('/').any(|c| c == "..") {
        return Err("has a `..` component in its export path".into());
    }
    Ok(())
}

/// The first usable entry of `mount-target-ips`, after checking that every
/// entry is `[<IPv6 address>]:/<export>` (the API's form) or
/// `<IPv4 address>:/<export>`. IPv4 and IPv4-mapped (`[::ffff:a.b.c.d]`)
/// entries are well formed but not usable from the node, so they are passed
/// over, as the contract says.
fn usable_ip_source(ips: &str) -> Result<Option<String>> {
    if ips.len() > MAX_IPS_BYTES {
        return Err(Error::InvalidArgument(format!(
            "volume attribute mount-target-ips is {} bytes; at most {MAX_IPS_BYTES} are accepted",
            ips.len()
        )));
    }
    let mut usable = None;
    for entry in ips.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let address = parse_ip_source(entry).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "volume attribute mount-target-ips entry {} must be [<IPv6 address>]:/<export path>",
                shown(entry)
            ))
        })?;
        if usable.is_none() && address.is_some_and(|a| a.to_ipv4_mapped().is_none()) {
            usable = Some(entry.to_string());
        }
    }
    Ok(usable)
}

/// `Some(address)` of `[<ipv6>]:/<export>`, `Some(None)` of
/// `<ipv4>:/<export>`, `None` for anything else. Zone ids (`%eth0`) do not
/// parse: they name an interface of some other host.
fn parse_ip_source(entry: &str) -> Option<Option<Ipv6Addr>> {
    if let Some(rest) = entry.strip_prefix('[') {
        let (address, export) = rest.split_once("]:")?;
        check_export(export).ok()?;
        return address.parse().ok().map(Some);
    }
    let (address, export) = entry.split_once(':')?;
    check_export(export).ok()?;
    address.parse::<Ipv4Addr>().ok().map(|_| None)
}

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
    fn parse(value: &str) -> Result<MtlsMode> {
        match value {
            "" | "disabled" => Ok(MtlsMode::Disabled),
            "required" => Ok(MtlsMode::Required),
            "optional" => Ok(MtlsMode::Optional),
            _ => Err(Error::InvalidArgument(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn context(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        crate::test_support::owned(pairs)
    }

    fn sources(pairs: &[(&str, &str)]) -> Result<MountSources> {
        StageContext::parse(&context(pairs)).map(|c| c.sources)
    }

    fn flags(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_fqdn_wins_and_the_first_usable_ipv6_entry_is_its_fallback() {
        let s = sources(&[
            (CTX_MOUNT_TARGET, "fs-1.nfs.us-east.linode.com:/pvc-1"),
            (
                CTX_MOUNT_TARGET_IPS,
                "[::ffff:10.0.0.5]:/pvc-1, [2001:db8::1]:/pvc-1,[2001:db8::2]:/pvc-1",
            ),
        ])
        .unwrap();
        assert_eq!(s.primary, "fs-1.nfs.us-east.linode.com:/pvc-1");
        assert_eq!(s.fallback.as_deref(), Some("[2001:db8::1]:/pvc-1"));
        assert_eq!(s.all().count(), 2);
    }

    #[test]
    fn without_fqdn_the_first_usable_ipv6_entry_is_used() {
        let s = sources(&[
            (CTX_MOUNT_TARGET, ""),
            (
                CTX_MOUNT_TARGET_IPS,
                "10.0.0.5:/pvc-1, [::ffff:10.0.0.5]:/pvc-1, [2001:db8::7]:/pvc-1,[2001:db8::8]:/pvc-1",
            ),
        ])
        .unwrap();
        assert_eq!(
            s,
            MountSources {
                primary: "[2001:db8::7]:/pvc-1".into(),
                fallback: None
            }
        );
    }

    #[test]
    fn no_usable_source_is_invalid_argument() {
        for pairs in [
            vec![(
                CTX_MOUNT_TARGET_IPS,
                "10.0.0.5:/pvc-1,[::ffff:192.0.2.1]:/pvc-1",
            )],
            vec![(CTX_MOUNT_TARGET, " "), (CTX_MOUNT_TARGET_IPS, "")],
            vec![],
        ] {
            let err = sources(&pairs).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
            assert!(
                err.message()
                    .starts_with("mount-target is required in volume context"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_malformed_mount_target_is_refused_naming_the_attribute() {
        for bad in [
            "fs-1.example.com",       // no export
            "fs-1.example.com:pvc-1", // relative export
            ":/pvc-1",                // no host
            "[not-an-ip]:/pvc-1",
            "[2001:db8::1]/pvc-1",
            "fs 1.example.com:/pvc-1",
            "fs-1.example.com:/pvc\0",
            "-ofs-1.example.com:/pvc-1", // an option to the mount helper
            "-:/pvc-1",
            "fs-1.example.com:/share/../other",
            "fs-1.example.com:/..",
        ] {
            let err = sources(&[(CTX_MOUNT_TARGET, bad)]).unwrap_err();
            assert!(
                matches!(&err, Error::InvalidArgument(m) if m.starts_with("volume attribute mount-target ")),
                "{bad:?}: {err:?}"
            );
        }
        let huge = format!("{}:/x", "h".repeat(100_000));
        let err = sources(&[(CTX_MOUNT_TARGET, &huge)]).unwrap_err();
        assert!(err.message().len() < 400, "{err}");
        for good in [
            "fs-1.nfs.us-east.linode.com:/pvc-1",
            "10.0.0.5:/e",
            "[2001:db8::1]:/",
            " fs:/e ",
        ] {
            assert!(sources(&[(CTX_MOUNT_TARGET, good)]).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn every_mount_target_ips_entry_must_be_a_bracketed_ipv6_source() {
        for bad in [
            "2001:db8::1:/x",        // unbracketed
            "10.0.0.5:x",            // relative export
            "fs.example:/x",         // a name
            "[2001:db8::1]/x",       // no colon
            "[2001:db8::1]:x",       // relative export
            "[not-an-ip]:/x",        // garbage
            "[fe80::1%eth0]:/x",     // zone ids are node-specific
            "[2001:db8::1]:/x/../y", // climbs out of the export
        ] {
            // Even beside a good mount-target: the attribute is wrong.
            let err = sources(&[
                (CTX_MOUNT_TARGET, "fs:/x"),
                (CTX_MOUNT_TARGET_IPS, &format!("[2001:db8::9]:/x,{bad}")),
            ])
            .unwrap_err();
            assert!(
                matches!(&err, Error::InvalidArgument(m) if m.starts_with("volume attribute mount-target-ips entry ")),
                "{bad:?}: {err:?}"
            );
        }
        let thousands = vec!["[2001:db8::1]:/x"; 5000].join(",");
        let err = sources(&[(CTX_MOUNT_TARGET_IPS, &thousands)]).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    }

    #[test]
    fn a_directory_is_appended_to_every_source_and_nothing_else() {
        let dir = DirName::parse("pvc-a").unwrap();
        let s = sources(&[
            (CTX_MOUNT_TARGET, "fs-1.example.com:/share"),
            (CTX_MOUNT_TARGET_IPS, "[2001:db8::1]:/share/"),
        ])
        .unwrap()
        .within(&dir)
        .unwrap();
        assert_eq!(s.primary, "fs-1.example.com:/share/csi-volumes/pvc-a");
        assert_eq!(
            s.fallback.as_deref(),
            Some("[2001:db8::1]:/share/csi-volumes/pvc-a")
        );
        let root = sources(&[(CTX_MOUNT_TARGET, "[2001:db8::1]:/")])
            .unwrap()
            .within(&dir)
            .unwrap();
        assert_eq!(root.primary, "[2001:db8::1]:/csi-volumes/pvc-a");
        let long = format!("fs:/{}", "e".repeat(MAX_EXPORT_BYTES - 5));
        let err = sources(&[(CTX_MOUNT_TARGET, &long)])
            .unwrap()
            .within(&dir)
            .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    }

    #[test]
    fn mtls_modes_parse_and_unknown_values_are_rejected() {
        let mode = |v: Option<&str>| {
            let pairs: Vec<(&str, &str)> = [(CTX_MOUNT_TARGET, "fs:/e")]
                .into_iter()
                .chain(v.map(|v| (CTX_MTLS_MODE, v)))
                .collect();
            StageContext::parse(&context(&pairs)).map(|c| c.mtls)
        };
        assert_eq!(mode(None).unwrap(), MtlsMode::Disabled);
        assert_eq!(mode(Some("")).unwrap(), MtlsMode::Disabled);
        assert_eq!(mode(Some("disabled")).unwrap(), MtlsMode::Disabled);
        assert_eq!(mode(Some("required")).unwrap(), MtlsMode::Required);
        assert_eq!(mode(Some("optional")).unwrap(), MtlsMode::Optional);
        assert_eq!(
            mode(Some("Required")).unwrap_err(),
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
