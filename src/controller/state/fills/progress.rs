//! What a fill job is doing, for the people waiting for it: its phase
//! (starting, waiting for its temporary clone, copying), what the copy has
//! done of what it will copy where that is known, and the words the calls
//! that stop waiting and the claim's events say it with. State and words
//! only: `kind::directory::restore` moves the phase and its `watch` posts
//! the events.

use crate::fs_tree::CopyStats;
use crate::mutex::lock;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where a job is.
#[derive(Debug, Clone)]
pub enum Phase {
    Starting,
    /// Waiting for the temporary clone `clone` to become active.
    Cloning {
        since: Instant,
        clone: String,
    },
    /// Copying into the volume; `total` is what the source holds, where
    /// the backend says.
    Copying {
        since: Instant,
        total: Total,
    },
}

impl Phase {
    /// The phase's name in the metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Cloning { .. } => "cloning",
            Phase::Copying { .. } => "copying",
        }
    }
}

/// What a copy will copy, where the backend says: approximate (usage as
/// the backend counts it, not the tree itself).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Total {
    pub bytes: Option<u64>,
    pub entries: Option<u64>,
}

/// One job's phase, and what its last copy did once it ended.
pub struct Report {
    phase: Mutex<Phase>,
    copied: Mutex<Option<CopyStats>>,
}

impl Default for Report {
    fn default() -> Report {
        Report {
            phase: Mutex::new(Phase::Starting),
            copied: Mutex::new(None),
        }
    }
}

impl Report {
    pub fn phase(&self) -> Phase {
        lock(&self.phase).clone()
    }

    /// Now waiting for `clone`: whether that is news (a first clone, or
    /// a replacement), not a wait begun again.
    pub fn cloning(&self, clone: String) -> bool {
        let mut phase = lock(&self.phase);
        if matches!(&*phase, Phase::Cloning { clone: now, .. } if *now == clone) {
            return false;
        }
        *phase = Phase::Cloning {
            since: Instant::now(),
            clone,
        };
        true
    }

    /// Now copying what `total` says the source holds.
    pub fn copying(&self, total: Total) {
        *lock(&self.phase) = Phase::Copying {
            since: Instant::now(),
            total,
        };
    }

    /// The copy ended having done `copied`.
    pub fn copied_all(&self, copied: CopyStats) {
        *lock(&self.copied) = Some(copied);
    }

    /// What the last copy did, once it ended.
    pub fn copied(&self) -> Option<CopyStats> {
        *lock(&self.copied)
    }

    /// Where the job is, for a call that stops waiting: "cloning … for
    /// 12 min", or "copying: 3.2 GiB of ~10.0 GiB (32%), 1234 entries".
    /// `copied` is what the copy running now has done.
    pub fn describe(&self, copied: Option<CopyStats>) -> String {
        match self.phase() {
            Phase::Starting => "starting".to_string(),
            Phase::Cloning { since, clone } => {
                format!("cloning ({clone}) for {}", duration(since.elapsed()))
            }
            Phase::Copying { since, total } => {
                let copied = copied.unwrap_or_default();
                format!(
                    "copying for {}: {}",
                    duration(since.elapsed()),
                    progress(&copied, total, since.elapsed())
                )
            }
        }
    }
}

/// Entries a copy has done: files and directories, made or found made.
pub fn entries(copied: &CopyStats) -> u64 {
    copied.files + copied.directories + copied.reused
}

/// "3.2 GiB of ~10.0 GiB (32%), 1234 of ~5000 entries, about 12 min left"
/// (the parts after the bytes only where a total is known).
pub fn progress(copied: &CopyStats, total: Total, elapsed: Duration) -> String {
    let done = entries(copied);
    let mut text = bytes(copied.bytes);
    let share = match total.bytes {
        Some(all) if all > 0 => {
            let share = (copied.bytes as f64 / all as f64).min(1.0);
            text.push_str(&format!(" of ~{} ({:.0}%)", bytes(all), share * 100.0));
            Some(share)
        }
        _ => None,
    };
    match total.entries {
        Some(all) => text.push_str(&format!(", {done} of ~{all} entries")),
        None => text.push_str(&format!(", {done} entries")),
    }
    let share = share.or_else(|| {
        total
            .entries
            .filter(|all| *all > 0)
            .map(|all| (done as f64 / all as f64).min(1.0))
    });
    if let Some(share) = share.filter(|s| *s > 0.0 && *s < 1.0) {
        let left = elapsed.as_secs_f64() * (1.0 - share) / share;
        text.push_str(&format!(
            ", about {} left",
            duration(Duration::from_secs_f64(left))
        ));
    }
    text
}

/// A byte count as people read it: "512 B", "3.2 MiB", "10.0 GiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A duration as people read it: "45 s", "12 min", "2 h 5 min".
pub fn duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", s / 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_read_as_people_write_them() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 << 20 | 1 << 19), "3.5 MiB");
        assert_eq!(bytes(10 << 30), "10.0 GiB");
        assert_eq!(duration(Duration::from_secs(45)), "45 s");
        assert_eq!(duration(Duration::from_secs(12 * 60 + 5)), "12 min");
        assert_eq!(duration(Duration::from_secs(7500)), "2 h 5 min");
    }

    #[test]
    fn progress_shows_a_share_and_time_left_only_against_a_total() {
        let copied = CopyStats {
            files: 90,
            directories: 10,
            bytes: 1 << 30,
            ..CopyStats::default()
        };
        let minute = Duration::from_secs(60);
        assert_eq!(
            progress(&copied, Total::default(), minute),
            "1.0 GiB, 100 entries"
        );
        let total = Total {
            bytes: Some(4 << 30),
            entries: Some(400),
        };
        assert_eq!(
            progress(&copied, total, minute),
            "1.0 GiB of ~4.0 GiB (25%), 100 of ~400 entries, about 3 min left"
        );
        let entries_only = Total {
            bytes: None,
            entries: Some(200),
        };
        assert_eq!(
            progress(&copied, entries_only, minute),
            "1.0 GiB, 100 of ~200 entries, about 1 min left"
        );
    }

    #[test]
    fn a_wait_begun_again_on_the_same_clone_is_no_news() {
        let report = Report::default();
        assert!(report.cloning("temporary filesystem 1/101".into()));
        assert!(!report.cloning("temporary filesystem 1/101".into()));
        assert!(report.cloning("temporary filesystem 1/102".into()));
        assert_eq!(report.phase().name(), "cloning");
        report.copying(Total::default());
        assert!(report
            .describe(None)
            .starts_with("copying for 0 s: 0 B, 0 entries"));
    }
}
