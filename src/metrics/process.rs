//! The process's own figures, read from `/proc/self` at scrape time under
//! the names Prometheus' client libraries use (`process_*`), so existing
//! dashboards and alerts apply. Linux only; a figure that cannot be read is
//! left out of the scrape rather than reported as zero.

use super::registry::Emit;
use std::sync::OnceLock;

fn page_size() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as f64 }
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

/// The fields of `/proc/self/stat` after the command name, which is in
/// parentheses and may itself hold spaces and parentheses: index 0 is
/// field 3 (state) of proc(5).
fn stat_fields() -> Option<Vec<String>> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// proc(5) field `n` (1-based) of `/proc/self/stat`, as a number.
fn stat_field(fields: &[String], n: usize) -> Option<f64> {
    fields.get(n.checked_sub(3)?)?.parse().ok()
}

pub(super) fn resident_memory(emit: &mut Emit<'_>) {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok());
    if let Some(pages) = pages {
        emit(&[], pages * page_size());
    }
}

pub(super) fn open_fds(emit: &mut Emit<'_>) {
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        emit(&[], dir.count() as f64);
    }
}

pub(super) fn max_fds(emit: &mut Emit<'_>) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out pointer to an rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        emit(&[], limit.rlim_cur as f64);
    }
}

pub(super) fn cpu_seconds(emit: &mut Emit<'_>) {
    if let Some(fields) = stat_fields() {
        // utime (14) and stime (15), in clock ticks.
        if let (Some(user), Some(system)) = (stat_field(&fields, 14), stat_field(&fields, 15)) {
            emit(&[], (user + system) / clock_ticks());
        }
    }
}

/// Boot time plus the process's start (field 22, clock ticks since boot):
/// the same figure however often it is asked, so it is read once.
pub(super) fn start_time(emit: &mut Emit<'_>) {
    static START: OnceLock<Option<f64>> = OnceLock::new();
    let start = START.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse::<f64>()
            .ok()?;
        let ticks = stat_field(&stat_fields()?, 22)?;
        Some(boot + ticks / clock_ticks())
    });
    if let Some(start) = start {
        emit(&[], *start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(f: fn(&mut Emit<'_>)) -> f64 {
        let mut got = None;
        f(&mut |_, v| got = Some(v));
        got.expect("a figure")
    }

    #[test]
    fn figures_are_plausible() {
        let rss = value(resident_memory);
        assert!(rss > 1024.0 * 1024.0, "{rss}");
        // stdin, stdout, stderr and the directory being read, at least.
        assert!(value(open_fds) >= 4.0);
        assert!(value(max_fds) >= value(open_fds));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = value(start_time);
        assert!(
            start <= now + 1.0 && start > now - 24.0 * 3600.0,
            "{start} vs {now}"
        );
        assert!(value(cpu_seconds) >= 0.0);
    }
}
