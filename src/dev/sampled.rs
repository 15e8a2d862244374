//! The dev exports' quota usage as a backend samples it: each directory is
//! counted at most once every `DEV_QUOTA_SAMPLE`, and in between every
//! read shows that count and its time, as a real backend's periodic count
//! lags behind writes. Zero counts on every read. It keeps counts; it does
//! not count (`usage`).

use crate::fake::DirUsage;
use crate::mutex::lock;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Default)]
pub struct Sampler {
    every: Duration,
    /// `(export, path)` → when it was counted, and the count.
    counted: Mutex<HashMap<(String, String), (Instant, DirUsage)>>,
}

impl Sampler {
    pub fn every(every: Duration) -> Sampler {
        Sampler {
            every,
            counted: Mutex::default(),
        }
    }

    /// The usage of `path` in `export`: the last count if it is younger
    /// than the lag, else `count`'s, stamped with its time.
    pub fn usage(
        &self,
        export: &str,
        path: &str,
        count: impl FnOnce() -> Option<DirUsage>,
    ) -> Option<DirUsage> {
        if self.every.is_zero() {
            return count();
        }
        let key = (export.to_string(), path.to_string());
        if let Some((at, usage)) = lock(&self.counted).get(&key) {
            if at.elapsed() < self.every {
                return Some(*usage);
            }
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs() as i64;
        let usage = DirUsage {
            collected_at: Some(now),
            ..count()?
        };
        lock(&self.counted).insert(key, (Instant::now(), usage));
        Some(usage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counting(bytes: i64) -> impl FnOnce() -> Option<DirUsage> {
        move || {
            Some(DirUsage {
                bytes,
                files: 1,
                collected_at: None,
            })
        }
    }

    #[test]
    fn a_count_stands_for_the_lag_then_is_taken_again() {
        let lagging = Sampler::every(Duration::from_millis(200));
        let first = lagging.usage("/a", "/v", counting(1)).unwrap();
        assert!(first.collected_at.is_some());
        // Written since, but not counted yet: the same count, same time.
        assert_eq!(lagging.usage("/a", "/v", counting(2)), Some(first));
        assert_eq!(lagging.usage("/a", "/w", counting(3)).unwrap().bytes, 3);
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(lagging.usage("/a", "/v", counting(2)).unwrap().bytes, 2);

        let live = Sampler::every(Duration::ZERO);
        assert_eq!(live.usage("/a", "/v", counting(1)).unwrap().bytes, 1);
        let now = live.usage("/a", "/v", counting(2)).unwrap();
        assert_eq!((now.bytes, now.collected_at), (2, None));
    }
}
