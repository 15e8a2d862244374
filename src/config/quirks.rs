//! `DEV_QUIRKS`: the backend variants the dev fake can emulate, by name,
//! and which of them cannot be combined. It must not know how the fake
//! emulates them (dev mode turns each into the fake's knobs).

/// A documented or suspected variant of the Linode API the dev fake can
/// behave as, to try the driver against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DevQuirk {
    /// Clones do not show `source_snapshot_id`.
    NoSourceSnapshotId,
    /// A snapshot cannot be deleted while a clone of it exists.
    SnapshotsHeldByClones,
    /// Filesystem lists cannot be filtered by `id`.
    NoIdFilter,
    /// A filesystem list filtered by `tags` answers 400 (field `X-Filter`).
    TagFilterRefused,
    /// A filesystem list ignores `tags` in its filter.
    TagFilterIgnored,
    /// The filesystem access-policy endpoints answer 404.
    NoFilesystemPolicy,
    /// The earlier fork's filesystem: capacity only in `stats`, none on create.
    CapacityInStats,
    /// Go-style nulls and left-out optional fields in answers.
    NullFields,
    /// Part of the injected 429/503s are 408s or nginx `text/html` 400s.
    HtmlErrors,
    /// Filesystems the driver did not make in the dev Space (also seeded
    /// by the tag-filter quirks, which would show nothing without them).
    ForeignFilesystems,
    /// Every quota endpoint answers 404: a backend without the quota API.
    NoQuotas,
    /// Every quota POST answers 400 (field `path`).
    QuotaRefused,
    /// A quota POST for a path with no directory in the export answers 400.
    QuotaNeedsDirectory,
    /// Quota paths begin with the export (`/<export>/csi-volumes/x`); the
    /// plain form is refused with 400.
    QuotaPathWithExport,
    /// Quotas never leave `updating`.
    QuotaStuckUpdating,
    /// Quotas go from `updating` to `error`.
    QuotaError,
    /// At most this many quotas per filesystem; the next POST answers 400.
    QuotaLimit(usize),
    /// A clone stays `creating` while it copies its snapshot's data.
    SlowClones,
    /// The next this many clones of a snapshot turn `error` instead of
    /// `active`.
    FailingClones(usize),
    /// Each filesystem shows its snapshots at `<export>/.snapshot/<label>/`.
    SnapshotDirectory,
}

impl DevQuirk {
    fn is_quota(self) -> bool {
        matches!(
            self,
            DevQuirk::NoQuotas
                | DevQuirk::QuotaRefused
                | DevQuirk::QuotaNeedsDirectory
                | DevQuirk::QuotaPathWithExport
                | DevQuirk::QuotaStuckUpdating
                | DevQuirk::QuotaError
                | DevQuirk::QuotaLimit(_)
        )
    }

    fn name(self) -> String {
        match self {
            DevQuirk::QuotaLimit(n) => format!("{QUOTA_LIMIT}={n}"),
            DevQuirk::FailingClones(n) => format!("{FAILING_CLONES}={n}"),
            quirk => QUIRK_NAMES
                .iter()
                .find(|(_, q)| *q == quirk)
                .map_or_else(String::new, |(name, _)| name.to_string()),
        }
    }
}

/// The quirks that take a value: `quota-limit=N`, `failing-clones=N`.
const QUOTA_LIMIT: &str = "quota-limit";
const FAILING_CLONES: &str = "failing-clones";

/// A quirk that takes a positive number: its name, the quirk of a number,
/// and what the number counts.
type Valued = (&'static str, fn(usize) -> DevQuirk, &'static str);

const VALUED: [Valued; 2] = [
    (QUOTA_LIMIT, DevQuirk::QuotaLimit, "quotas per filesystem"),
    (FAILING_CLONES, DevQuirk::FailingClones, "clones to fail"),
];

/// Every quirk without a value by its `DEV_QUIRKS` name.
pub(super) const QUIRK_NAMES: [(&str, DevQuirk); 18] = [
    ("no-source-snapshot-id", DevQuirk::NoSourceSnapshotId),
    ("snapshots-held-by-clones", DevQuirk::SnapshotsHeldByClones),
    ("no-id-filter", DevQuirk::NoIdFilter),
    ("tag-filter-refused", DevQuirk::TagFilterRefused),
    ("tag-filter-ignored", DevQuirk::TagFilterIgnored),
    ("no-filesystem-policy", DevQuirk::NoFilesystemPolicy),
    ("capacity-in-stats", DevQuirk::CapacityInStats),
    ("null-fields", DevQuirk::NullFields),
    ("html-errors", DevQuirk::HtmlErrors),
    ("foreign-filesystems", DevQuirk::ForeignFilesystems),
    ("no-quotas", DevQuirk::NoQuotas),
    ("quota-refused", DevQuirk::QuotaRefused),
    ("quota-needs-directory", DevQuirk::QuotaNeedsDirectory),
    ("quota-path-with-export", DevQuirk::QuotaPathWithExport),
    ("quota-stuck-updating", DevQuirk::QuotaStuckUpdating),
    ("quota-error", DevQuirk::QuotaError),
    ("slow-clones", DevQuirk::SlowClones),
    ("snapshot-directory", DevQuirk::SnapshotDirectory),
];

fn parse_one(q: &str) -> Result<DevQuirk, String> {
    for (name, quirk, counts) in VALUED {
        if let Some(n) = q
            .strip_prefix(name)
            .filter(|n| n.is_empty() || n.starts_with('='))
        {
            return match n.strip_prefix('=').map(str::parse::<usize>) {
                Some(Ok(n)) if n > 0 => Ok(quirk(n)),
                _ => Err(format!(
                    "\"{q}\": {name} takes a positive number of {counts}, e.g. {name}=3"
                )),
            };
        }
    }
    QUIRK_NAMES
        .iter()
        .find(|(name, _)| *name == q)
        .map(|(_, quirk)| *quirk)
        .ok_or_else(|| {
            let names: Vec<&str> = QUIRK_NAMES.iter().map(|(n, _)| *n).collect();
            format!(
                "unknown quirk \"{q}\" (want {}, {QUOTA_LIMIT}=N, {FAILING_CLONES}=N)",
                names.join(", ")
            )
        })
}

/// A comma-separated `DEV_QUIRKS` list; pairs that contradict each other
/// are refused rather than one silently winning.
pub(super) fn parse_quirks(raw: &str) -> Result<Vec<DevQuirk>, String> {
    let quirks = raw
        .split(',')
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .map(parse_one)
        .collect::<Result<Vec<_>, _>>()?;
    let on = |q: DevQuirk| quirks.contains(&q);
    if on(DevQuirk::TagFilterRefused) && on(DevQuirk::TagFilterIgnored) {
        return Err("tag-filter-refused and tag-filter-ignored exclude each other".to_string());
    }
    if on(DevQuirk::NoQuotas) {
        if let Some(other) = quirks
            .iter()
            .find(|q| q.is_quota() && **q != DevQuirk::NoQuotas)
        {
            return Err(format!(
                "no-quotas (a backend without the quota API) and {} exclude each other",
                other.name()
            ));
        }
    }
    if on(DevQuirk::QuotaStuckUpdating) && on(DevQuirk::QuotaError) {
        return Err("quota-stuck-updating and quota-error exclude each other".to_string());
    }
    let limits: Vec<String> = quirks
        .iter()
        .filter(|q| matches!(q, DevQuirk::QuotaLimit(_)))
        .map(|q| q.name())
        .collect();
    if limits.len() > 1 {
        return Err(format!(
            "one {QUOTA_LIMIT} at most, not {}",
            limits.join(" and ")
        ));
    }
    Ok(quirks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_quirks_parse_and_the_limit_takes_a_number() {
        assert_eq!(
            parse_quirks("quota-path-with-export, quota-limit=3,quota-needs-directory"),
            Ok(vec![
                DevQuirk::QuotaPathWithExport,
                DevQuirk::QuotaLimit(3),
                DevQuirk::QuotaNeedsDirectory,
            ])
        );
        for bad in [
            "quota-limit",
            "quota-limit=",
            "quota-limit=0",
            "quota-limit=-1",
            "quota-limit=x",
        ] {
            let e = parse_quirks(bad).unwrap_err();
            assert!(e.contains("quota-limit=3"), "{bad}: {e}");
        }
        let unknown = parse_quirks("quota-limits=2").unwrap_err();
        assert!(
            unknown.contains("unknown quirk") && unknown.contains("quota-limit=N"),
            "{unknown}"
        );
    }

    #[test]
    fn contradicting_quota_quirks_are_refused_naming_both() {
        for (pair, names) in [
            ("no-quotas,quota-refused", ["no-quotas", "quota-refused"]),
            ("quota-limit=2,no-quotas", ["no-quotas", "quota-limit=2"]),
            ("no-quotas,quota-error", ["no-quotas", "quota-error"]),
            (
                "quota-error,quota-stuck-updating",
                ["quota-stuck-updating", "quota-error"],
            ),
            (
                "quota-limit=2,quota-limit=3",
                ["quota-limit=2", "quota-limit=3"],
            ),
        ] {
            let e = parse_quirks(pair).unwrap_err();
            assert!(names.iter().all(|n| e.contains(n)), "{pair}: {e}");
        }
        // Quota quirks combine with the others, and no-quotas alone is fine.
        assert_eq!(
            parse_quirks("no-quotas,null-fields"),
            Ok(vec![DevQuirk::NoQuotas, DevQuirk::NullFields])
        );
        assert!(parse_quirks("quota-refused,quota-limit=1,quota-stuck-updating").is_ok());
    }
}
