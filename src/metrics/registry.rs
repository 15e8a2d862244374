//! Metric families written by hand and their rendering in the Prometheus
//! text exposition format, version 0.0.4: counters, gauges and histograms
//! with fixed buckets, each with a fixed list of label names. Families are
//! `static`s (every constructor is `const`), so recording needs no handle
//! passed around. A series is created by its first observation (or by
//! [`Counter::touch`] / [`Histogram::touch`]) and lives as long as the
//! process: label values must come from small fixed sets, never ids, names
//! or tokens, or memory and scrapes grow without bound. Gauges that are
//! snapshots of state are [`Sampled`] at scrape time from sources
//! registered at startup, or [`Computed`] by a function.

use crate::mutex::lock;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

/// One family as the scrape sees it.
pub trait Family: Sync {
    fn render(&self, out: &mut String);
}

/// The label values of one series, in the order of the family's names.
type Key = Vec<String>;

/// The series key for `values`, or `None` (and a debug assertion) when the
/// caller passed the wrong number of values: a bug, which must not turn a
/// scrape into an invalid exposition.
fn key(family: &str, names: &[&str], values: &[&str]) -> Option<Key> {
    if names.len() != values.len() {
        debug_assert!(
            false,
            "{family}: {} label values for {names:?}",
            values.len()
        );
        return None;
    }
    Some(values.iter().map(|v| v.to_string()).collect())
}

pub struct Counter {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    series: Mutex<BTreeMap<Key, u64>>,
}

impl Counter {
    /// `name` should end in `_total`.
    pub const fn new(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Counter {
        Counter {
            name,
            help,
            labels,
            series: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn inc(&self, values: &[&str]) {
        if let Some(k) = key(self.name, self.labels, values) {
            *lock(&self.series).entry(k).or_default() += 1;
        }
    }

    /// Shows the series at 0 before its first event, so `increase()` over
    /// a window sees that first event.
    pub fn touch(&self, values: &[&str]) {
        if let Some(k) = key(self.name, self.labels, values) {
            lock(&self.series).entry(k).or_default();
        }
    }
}

impl Family for Counter {
    fn render(&self, out: &mut String) {
        header(out, self.name, self.help, "counter");
        for (values, n) in lock(&self.series).iter() {
            sample(out, self.name, self.labels, values, None, *n as f64);
        }
    }
}

/// A gauge set or moved by the code that knows its value.
pub struct Gauge {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    series: Mutex<BTreeMap<Key, f64>>,
}

impl Gauge {
    pub const fn new(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Gauge {
        Gauge {
            name,
            help,
            labels,
            series: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn set(&self, values: &[&str], value: f64) {
        if let Some(k) = key(self.name, self.labels, values) {
            lock(&self.series).insert(k, value);
        }
    }
}

impl Family for Gauge {
    fn render(&self, out: &mut String) {
        header(out, self.name, self.help, "gauge");
        for (values, v) in lock(&self.series).iter() {
            sample(out, self.name, self.labels, values, None, *v);
        }
    }
}

#[derive(Clone)]
struct Buckets {
    /// Observations per bucket, NOT cumulative; past the last bound they
    /// are only in `count`.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

pub struct Histogram {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    /// Upper bounds, ascending; `+Inf` is implied.
    bounds: &'static [f64],
    series: Mutex<BTreeMap<Key, Buckets>>,
}

impl Histogram {
    pub const fn new(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
        bounds: &'static [f64],
    ) -> Histogram {
        Histogram {
            name,
            help,
            labels,
            bounds,
            series: Mutex::new(BTreeMap::new()),
        }
    }

    fn empty(&self) -> Buckets {
        Buckets {
            counts: vec![0; self.bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&self, values: &[&str], v: f64) {
        let Some(k) = key(self.name, self.labels, values) else {
            return;
        };
        let mut series = lock(&self.series);
        let b = series.entry(k).or_insert_with(|| self.empty());
        if let Some(i) = self.bounds.iter().position(|bound| v <= *bound) {
            b.counts[i] += 1;
        }
        b.sum += v;
        b.count += 1;
    }

    /// Shows the series with no observations (see [`Counter::touch`]).
    pub fn touch(&self, values: &[&str]) {
        if let Some(k) = key(self.name, self.labels, values) {
            lock(&self.series).entry(k).or_insert_with(|| self.empty());
        }
    }
}

impl Family for Histogram {
    fn render(&self, out: &mut String) {
        header(out, self.name, self.help, "histogram");
        // Copied out, so a scrape holds the lock only as long as a clone.
        let series: Vec<(Key, Buckets)> = lock(&self.series)
            .iter()
            .map(|(k, b)| (k.clone(), b.clone()))
            .collect();
        let bucket = format!("{}_bucket", self.name);
        for (values, b) in &series {
            let mut cumulative = 0;
            for (bound, n) in self.bounds.iter().zip(&b.counts) {
                cumulative += n;
                let le = number(*bound);
                sample(
                    out,
                    &bucket,
                    self.labels,
                    values,
                    Some(&le),
                    cumulative as f64,
                );
            }
            sample(
                out,
                &bucket,
                self.labels,
                values,
                Some("+Inf"),
                b.count as f64,
            );
            let sum = format!("{}_sum", self.name);
            sample(out, &sum, self.labels, values, None, b.sum);
            let count = format!("{}_count", self.name);
            sample(out, &count, self.labels, values, None, b.count as f64);
        }
    }
}

/// Hands each series of a snapshot to the scrape: label values, value.
pub type Emit<'a> = dyn FnMut(&[&str], f64) + 'a;

/// One source of a [`Sampled`] gauge: emits its series, and answers
/// `false` once what it watched is gone, which unregisters it.
pub type Source = Box<dyn FnMut(&mut Emit<'_>) -> bool + Send>;

/// A gauge whose value is a snapshot taken at scrape time from the sources
/// registered at startup; the series of several sources add up.
pub struct Sampled {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    sources: Mutex<Vec<Source>>,
}

impl Sampled {
    pub const fn new(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Sampled {
        Sampled {
            name,
            help,
            labels,
            sources: Mutex::new(Vec::new()),
        }
    }

    pub fn register(&self, source: Source) {
        lock(&self.sources).push(source);
    }
}

impl Family for Sampled {
    fn render(&self, out: &mut String) {
        header(out, self.name, self.help, "gauge");
        let mut series: BTreeMap<Key, f64> = BTreeMap::new();
        lock(&self.sources).retain_mut(|source| {
            source(&mut |values: &[&str], v: f64| {
                if let Some(k) = key(self.name, self.labels, values) {
                    *series.entry(k).or_default() += v;
                }
            })
        });
        for (values, v) in &series {
            sample(out, self.name, self.labels, values, None, *v);
        }
    }
}

/// A counter or gauge computed by a function at scrape time (process
/// figures, build information).
pub struct Computed {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    labels: &'static [&'static str],
    compute: fn(&mut Emit<'_>),
}

impl Computed {
    pub const fn gauge(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
        compute: fn(&mut Emit<'_>),
    ) -> Computed {
        Computed {
            name,
            help,
            kind: "gauge",
            labels,
            compute,
        }
    }

    pub const fn counter(
        name: &'static str,
        help: &'static str,
        compute: fn(&mut Emit<'_>),
    ) -> Computed {
        Computed {
            name,
            help,
            kind: "counter",
            labels: &[],
            compute,
        }
    }
}

impl Family for Computed {
    fn render(&self, out: &mut String) {
        header(out, self.name, self.help, self.kind);
        let mut series: BTreeMap<Key, f64> = BTreeMap::new();
        (self.compute)(&mut |values: &[&str], v: f64| {
            if let Some(k) = key(self.name, self.labels, values) {
                series.insert(k, v);
            }
        });
        for (values, v) in &series {
            sample(out, self.name, self.labels, values, None, *v);
        }
    }
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(
    out: &mut String,
    name: &str,
    names: &[&str],
    values: &[String],
    le: Option<&str>,
    value: f64,
) {
    out.push_str(name);
    let labels = names
        .iter()
        .zip(values)
        .map(|(n, v)| (*n, v.as_str()))
        .chain(le.map(|le| ("le", le)));
    let mut first = true;
    for (n, v) in labels {
        out.push(if first { '{' } else { ',' });
        first = false;
        let _ = write!(out, "{n}=\"{}\"", escape_label(v));
    }
    if !first {
        out.push('}');
    }
    let _ = writeln!(out, " {}", number(value));
}

/// Go's float syntax, which the format uses: `+Inf`, `-Inf`, `NaN`, and
/// Rust's shortest round-tripping decimal otherwise.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        v.to_string()
    }
}

/// Label values escape backslash, double quote and line feed.
fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// HELP text escapes backslash and line feed only.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(f: &dyn Family) -> String {
        let mut out = String::new();
        f.render(&mut out);
        out
    }

    #[test]
    fn a_counter_renders_help_type_and_escaped_labels() {
        let c = Counter::new("t_total", "a \\ help\nline", &["a", "b"]);
        c.inc(&["x\"y", "back\\slash\nnl"]);
        c.inc(&["x\"y", "back\\slash\nnl"]);
        c.touch(&["z", "z"]);
        assert_eq!(
            rendered(&c),
            "# HELP t_total a \\\\ help\\nline\n# TYPE t_total counter\n\
             t_total{a=\"x\\\"y\",b=\"back\\\\slash\\nnl\"} 2\n\
             t_total{a=\"z\",b=\"z\"} 0\n"
        );
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_at_inf() {
        let h = Histogram::new("t_seconds", "h", &["m"], &[0.1, 1.0]);
        for v in [0.05, 0.1, 0.5, 7.0] {
            h.observe(&["x"], v);
        }
        h.touch(&["y"]);
        assert_eq!(
            rendered(&h),
            "# HELP t_seconds h\n# TYPE t_seconds histogram\n\
             t_seconds_bucket{m=\"x\",le=\"0.1\"} 2\n\
             t_seconds_bucket{m=\"x\",le=\"1\"} 3\n\
             t_seconds_bucket{m=\"x\",le=\"+Inf\"} 4\n\
             t_seconds_sum{m=\"x\"} 7.65\n\
             t_seconds_count{m=\"x\"} 4\n\
             t_seconds_bucket{m=\"y\",le=\"0.1\"} 0\n\
             t_seconds_bucket{m=\"y\",le=\"1\"} 0\n\
             t_seconds_bucket{m=\"y\",le=\"+Inf\"} 0\n\
             t_seconds_sum{m=\"y\"} 0\n\
             t_seconds_count{m=\"y\"} 0\n"
        );
    }

    #[test]
    fn sampled_sources_add_up_and_leave_once_gone() {
        let s = Sampled::new("t_pending", "p", &["kind"]);
        let alive = std::sync::Arc::new(());
        let watched = std::sync::Arc::downgrade(&alive);
        s.register(Box::new(move |emit| {
            if watched.upgrade().is_none() {
                return false;
            }
            emit(&["a"], 2.0);
            true
        }));
        s.register(Box::new(|emit| {
            emit(&["a"], 1.0);
            emit(&["b"], 0.0);
            true
        }));
        let both = rendered(&s);
        assert!(both.contains("t_pending{kind=\"a\"} 3\n"), "{both}");
        assert!(both.contains("t_pending{kind=\"b\"} 0\n"), "{both}");
        drop(alive);
        let one = rendered(&s);
        assert!(one.contains("t_pending{kind=\"a\"} 1\n"), "{one}");
        assert_eq!(lock(&s.sources).len(), 1);
    }

    #[test]
    fn gauges_without_labels_and_special_values() {
        let g = Gauge::new("t_g", "g", &[]);
        g.set(&[], f64::INFINITY);
        assert!(rendered(&g).ends_with("\nt_g +Inf\n"));
        g.set(&[], 1.5e-7);
        assert!(rendered(&g).ends_with("\nt_g 0.00000015\n"));
        let c = Computed::gauge("t_c", "c", &["v"], |emit| emit(&["1"], f64::NAN));
        assert!(rendered(&c).ends_with("\nt_c{v=\"1\"} NaN\n"));
    }
}
