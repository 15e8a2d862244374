//! The autogrow keys of a `subdirectory` class: `autogrow-threshold` (the
//! percent used at which a volume grows) turns autogrow on,
//! `autogrow-step` says by how much (bytes, or a percent of the current
//! size) and `autogrow-max` how far. Parsing, and the arithmetic of the
//! next size, only: when a volume grows is `kind::directory::autogrow`'s.

use super::keys::{AUTOGROW_MAX, AUTOGROW_STEP, AUTOGROW_THRESHOLD};
use crate::config::parse_quantity;
use crate::Error;

/// Below half full a growth is premature; at 100 % it is too late.
const THRESHOLDS: std::ops::RangeInclusive<u8> = 50..=99;
/// A smaller step grows a volume by less than one file's worth.
pub const SMALLEST_STEP: i64 = 1 << 20;
/// Without `autogrow-step`: a tenth of the size, as Trident's default.
const DEFAULT_STEP: Step = Step::Percent(10);

/// How much one growth adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    Bytes(i64),
    /// Of the current size, never less than [`SMALLEST_STEP`].
    Percent(u32),
}

/// A class's autogrow policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Autogrow {
    pub threshold: u8,
    pub step: Step,
    /// `None`: only the parent's room bounds it.
    pub max: Option<i64>,
}

impl Autogrow {
    /// The size after one growth of a volume of `current` bytes, capped by
    /// `max`; never below `current`.
    pub fn next_size(&self, current: i64) -> i64 {
        let step = match self.step {
            Step::Bytes(n) => n,
            Step::Percent(p) => (current.saturating_mul(i64::from(p)) / 100).max(SMALLEST_STEP),
        };
        let grown = current.saturating_add(step);
        match self.max {
            Some(max) => grown.min(max).max(current),
            None => grown,
        }
    }

    /// Whether `used` of `size` bytes is at or past the threshold.
    pub fn due(&self, used: i64, size: i64) -> bool {
        size > 0 && (used as i128) * 100 >= (size as i128) * i128::from(self.threshold)
    }

    /// What the marker records (see `parse_recorded`).
    pub fn render(&self) -> String {
        let step = match self.step {
            Step::Bytes(n) => n.to_string(),
            Step::Percent(p) => format!("{p}%"),
        };
        let max = self
            .max
            .map_or_else(|| "none".to_string(), |m| m.to_string());
        format!("threshold={},step={step},max={max}", self.threshold)
    }

    /// A policy as `render` wrote it; `None` when it is not one.
    pub fn parse_recorded(text: &str) -> Option<Autogrow> {
        let mut fields = text.split(',').map(|f| f.split_once('='));
        let (Some(("threshold", t)), Some(("step", s)), Some(("max", m)), None) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next(),
        ) else {
            return None;
        };
        Some(Autogrow {
            threshold: t.parse().ok()?,
            step: match s.strip_suffix('%') {
                Some(p) => Step::Percent(p.parse().ok()?),
                None => Step::Bytes(s.parse().ok()?),
            },
            max: match m {
                "none" => None,
                m => Some(m.parse().ok()?),
            },
        })
    }

    /// InvalidArgument when `max` is below a new volume's `size`.
    pub fn check_size(&self, size: i64) -> Result<(), Error> {
        match self.max {
            Some(max) if max < size => Err(Error::InvalidArgument(format!(
                "StorageClass parameter {AUTOGROW_MAX} ({max} bytes) is below the volume's size ({size} bytes)"
            ))),
            _ => Ok(()),
        }
    }
}

/// The autogrow keys of a class: `None` without `autogrow-threshold`, and
/// then neither other key may be set.
pub fn parse<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> Result<Option<Autogrow>, Error> {
    let Some(raw) = get(AUTOGROW_THRESHOLD) else {
        if let Some(key) = [AUTOGROW_STEP, AUTOGROW_MAX]
            .into_iter()
            .find(|k| get(k).is_some())
        {
            return Err(Error::InvalidArgument(format!(
                "StorageClass parameter {key} applies only with {AUTOGROW_THRESHOLD}"
            )));
        }
        return Ok(None);
    };
    let threshold = raw
        .strip_suffix('%')
        .unwrap_or(raw)
        .parse::<u8>()
        .ok()
        .filter(|t| THRESHOLDS.contains(t))
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "StorageClass parameter {AUTOGROW_THRESHOLD} \"{raw}\" must be a percent used from {} to {}",
                THRESHOLDS.start(),
                THRESHOLDS.end()
            ))
        })?;
    let step = match get(AUTOGROW_STEP) {
        None => DEFAULT_STEP,
        Some(raw) => parse_step(raw)?,
    };
    let max = get(AUTOGROW_MAX)
        .map(|raw| {
            parse_quantity(raw).map_err(|_| {
                Error::InvalidArgument(format!(
                    "StorageClass parameter {AUTOGROW_MAX} \"{raw}\" must be a size such as 50Gi"
                ))
            })
        })
        .transpose()?;
    Ok(Some(Autogrow {
        threshold,
        step,
        max,
    }))
}

fn parse_step(raw: &str) -> Result<Step, Error> {
    let bad = || {
        Error::InvalidArgument(format!(
            "StorageClass parameter {AUTOGROW_STEP} \"{raw}\" must be a size of at least 1Mi (such as 1Gi) or a percent of the volume's size from 1% to 100%"
        ))
    };
    if let Some(p) = raw.strip_suffix('%') {
        return p
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|p| (1..=100).contains(p))
            .map(Step::Percent)
            .ok_or_else(bad);
    }
    parse_quantity(raw)
        .ok()
        .filter(|n| *n >= SMALLEST_STEP)
        .map(Step::Bytes)
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parsed(pairs: &[(&str, &str)]) -> Result<Option<Autogrow>, Error> {
        let raw: HashMap<&str, &str> = pairs.iter().copied().collect();
        parse(&|k: &str| raw.get(k).copied())
    }

    fn refused(pairs: &[(&str, &str)], naming: &str) {
        match parsed(pairs) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains(naming), "{m}"),
            other => panic!("{pairs:?}: {other:?}"),
        }
    }

    const GIB: i64 = 1 << 30;

    #[test]
    fn keys_parse_with_defaults() {
        assert_eq!(parsed(&[]), Ok(None));
        assert_eq!(
            parsed(&[(AUTOGROW_THRESHOLD, "80")]),
            Ok(Some(Autogrow {
                threshold: 80,
                step: Step::Percent(10),
                max: None
            }))
        );
        assert_eq!(
            parsed(&[
                (AUTOGROW_THRESHOLD, "80"),
                (AUTOGROW_STEP, "1Gi"),
                (AUTOGROW_MAX, "5Gi")
            ]),
            Ok(Some(Autogrow {
                threshold: 80,
                step: Step::Bytes(GIB),
                max: Some(5 * GIB)
            }))
        );
        assert_eq!(
            parsed(&[(AUTOGROW_THRESHOLD, "99"), (AUTOGROW_STEP, "25%")])
                .unwrap()
                .unwrap()
                .step,
            Step::Percent(25)
        );
    }

    #[test]
    fn bad_values_are_refused_naming_the_key() {
        for t in ["49", "100", "0", "-80", "eighty", "80.5"] {
            refused(&[(AUTOGROW_THRESHOLD, t)], AUTOGROW_THRESHOLD);
        }
        for s in ["0", "1Ki", "1048575", "0%", "101%", "x%", "-1Gi"] {
            refused(
                &[(AUTOGROW_THRESHOLD, "80"), (AUTOGROW_STEP, s)],
                AUTOGROW_STEP,
            );
        }
        refused(
            &[(AUTOGROW_THRESHOLD, "80"), (AUTOGROW_MAX, "0")],
            AUTOGROW_MAX,
        );
        refused(&[(AUTOGROW_STEP, "1Gi")], AUTOGROW_STEP);
        refused(&[(AUTOGROW_MAX, "1Gi")], AUTOGROW_MAX);
        assert_eq!(
            parsed(&[(AUTOGROW_THRESHOLD, "80"), (AUTOGROW_STEP, "1Mi")])
                .unwrap()
                .unwrap()
                .step,
            Step::Bytes(SMALLEST_STEP)
        );
    }

    #[test]
    fn the_next_size_steps_and_stops_at_max() {
        let a = Autogrow {
            threshold: 80,
            step: Step::Bytes(GIB),
            max: Some(3 * GIB),
        };
        assert_eq!(a.next_size(GIB), 2 * GIB);
        assert_eq!(a.next_size(5 * GIB / 2), 3 * GIB);
        assert_eq!(a.next_size(3 * GIB), 3 * GIB);
        // Never shrinks, even past max.
        assert_eq!(a.next_size(4 * GIB), 4 * GIB);
        let p = Autogrow {
            step: Step::Percent(10),
            max: None,
            ..a
        };
        assert_eq!(p.next_size(10 * GIB), 11 * GIB);
        assert_eq!(p.next_size(GIB / 1024), GIB / 1024 + SMALLEST_STEP);
        assert!(a.due(900 << 20, GIB));
        assert!(!a.due(800 << 20, GIB));
        assert!(!a.due(0, 0));
        assert_eq!(a.check_size(3 * GIB), Ok(()));
        assert!(a.check_size(4 * GIB).is_err());
    }

    #[test]
    fn the_recorded_form_round_trips() {
        for a in [
            Autogrow {
                threshold: 80,
                step: Step::Bytes(GIB),
                max: Some(5 * GIB),
            },
            Autogrow {
                threshold: 50,
                step: Step::Percent(20),
                max: None,
            },
        ] {
            assert_eq!(Autogrow::parse_recorded(&a.render()), Some(a));
        }
        assert_eq!(Autogrow::parse_recorded("threshold=80"), None);
        assert_eq!(
            Autogrow::parse_recorded("threshold=80,step=1,max=none,x=1"),
            None
        );
    }
}
