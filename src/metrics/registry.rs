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

/// What a family is known by: its name, help text and label names.
struct Meta {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
}

impl Meta {
    /// The series key for `values`, or `None` (and a debug assertion) when
    /// the caller passed the wrong number of values: a bug, which must not
    /// turn a scrape into an invalid exposition.
    fn key(&self, values: &[&str]) -> Option<Key> {
        if self.labels.len() != values.len() {
            debug_assert!(
                false,
                "{}: {} label values for {:?}",
                self.name,
                values.len(),
                self.labels
            );
            return None;
        }
        Some(values.iter().map(|v| v.to_string()).collect())
    }

    /// The header and one sample a series, for every family but histograms.
    fn render<'a>(
        &self,
        out: &mut String,
        kind: &str,
        series: impl IntoIterator<Item = (&'a Key, f64)>,
    ) {
        header(out, self.name, self.help, kind);
        for (values, v) in series {
            sample(out, self.name, self.labels, values, None, v);
        }
    }
}

/// A family whose series the code that records them keeps between scrapes:
/// a [`Counter`], a [`Gauge`], or a [`Histogram`]'s buckets.
pub struct Recorded<V> {
    meta: Meta,
    series: Mutex<BTreeMap<Key, V>>,
}

/// A count of events; its name should end in `_total`.
pub type Counter = Recorded<u64>;

/// A gauge set or moved by the code that knows its value.
pub type Gauge = Recorded<f64>;

impl<V> Recorded<V> {
    pub const fn new(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Recorded<V> {
        Recorded {
            meta: Meta { name, help, labels },
            series: Mutex::new(BTreeMap::new()),
        }
    }

    /// Applies `update` to the series of `values`, which `new` makes when
    /// it is not there yet.
    fn update(&self, values: &[&str], new: impl FnOnce() -> V, update: impl FnOnce(&mut V)) {
        if let Some(k) = self.meta.key(values) {
            update(lock(&self.series).entry(k).or_insert_with(new));
        }
    }

    fn render_as(&self, out: &mut String, kind: &str, value: impl Fn(&V) -> f64) {
        let series = lock(&self.series);
        self.meta
            .render(out, kind, series.iter().map(|(k, v)| (k, value(v))));
    }
}

impl Counter {
    pub fn inc(&self, values: &[&str]) {
        self.add(values, 1);
    }

    pub fn add(&self, values: &[&str], by: u64) {
        self.update(values, || 0, |n| *n += by);
    }

    /// Shows the series at 0 before its first event, so `increase()` over
    /// a window sees that first event.
    pub fn touch(&self, values: &[&str]) {
        self.update(values, || 0, |_| {});
    }
}

impl Family for Counter {
    fn render(&self, out: &mut String) {
        self.render_as(out, "counter", |n| *n as f64);
    }
}

impl Gauge {
    pub fn set(&self, values: &[&str], value: f64) {
        self.update(values, || value, |v| *v = value);
    }
}

impl Family for Gauge {
    fn render(&self, out: &mut String) {
        self.render_as(out, "gauge", |v| *v);
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
    recorded: Recorded<Buckets>,
    /// Upper bounds, ascending; `+Inf` is implied.
    bounds: &'static [f64],
}

impl Histogram {
    pub const fn new(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
        bounds: &'static [f64],
    ) -> Histogram {
        Histogram {
            recorded: Recorded::new(name, help, labels),
            bounds,
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
        self.recorded.update(
            values,
            || self.empty(),
            |b| {
                if let Some(i) = self.bounds.iter().position(|bound| v <= *bound) {
                    b.counts[i] += 1;
                }
                b.sum += v;
                b.count += 1;
            },
        );
    }

    /// Shows the series with no observations (see [`Counter::touch`]).
    pub fn touch(&self, values: &[&str]) {
        self.recorded.update(values, || self.empty(), |_| {});
    }
}

impl Family for Histogram {
    fn render(&self, out: &mut String) {
        let Meta { name, help, labels } = self.recorded.meta;
        header(out, name, help, "histogram");
        // Copied out, so a scrape holds the lock only as long as a clone.
        let series: Vec<(Key, Buckets)> = lock(&self.recorded.series)
            .iter()
            .map(|(k, b)| (k.clone(), b.clone()))
            .collect();
        let bucket = format!("{name}_bucket");
        for (values, b) in &series {
            let mut cumulative = 0;
            for (bound, n) in self.bounds.iter().zip(&b.counts) {
                cumulative += n;
                let le = number(*bound);
                sample(out, &bucket, labels, values, Some(&le), cumulative as f64);
            }
            sample(out, &bucket, labels, values, Some("+Inf"), b.count as f64);
            let sum = format!("{name}_sum");
            sample(out, &sum, labels, values, None, b.sum);
            let count = format!("{name}_count");
            sample(out, &count, labels, values, None, b.count as f64);
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
    meta: Meta,
    kind: &'static str,
    sources: Mutex<Vec<Source>>,
}

impl Sampled {
    pub const fn new(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Sampled {
        Sampled::of_kind("gauge", Meta { name, help, labels })
    }

    /// A family whose sources count up, as counters do.
    pub const fn counter(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Sampled {
        Sampled::of_kind("counter", Meta { name, help, labels })
    }

    const fn of_kind(kind: &'static str, meta: Meta) -> Sampled {
        Sampled {
            meta,
            kind,
            sources: Mutex::new(Vec::new()),
        }
    }

    pub fn register(&self, source: Source) {
        lock(&self.sources).push(source);
    }
}

impl Family for Sampled {
    fn render(&self, out: &mut String) {
        let mut series: BTreeMap<Key, f64> = BTreeMap::new();
        lock(&self.sources).retain_mut(|source| {
            source(&mut |values: &[&str], v: f64| {
                if let Some(k) = self.meta.key(values) {
                    *series.entry(k).or_default() += v;
                }
            })
        });
        self.meta
            .render(out, self.kind, series.iter().map(|(k, v)| (k, *v)));
    }
}

/// A counter or gauge computed by a function at scrape time (process
/// figures, build information).
pub struct Computed {
    meta: Meta,
    kind: &'static str,
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
            meta: Meta { name, help, labels },
            kind: "gauge",
            compute,
        }
    }

    pub const fn counter(
        name: &'static str,
        help: &'static str,
        compute: fn(&mut Emit<'_>),
    ) -> Computed {
        Computed {
            meta: Meta {
                name,
                help,
                labels: &[],
            },
            kind: "counter",
            compute,
        }
    }
}

impl Family for Computed {
    fn render(&self, out: &mut String) {
        let mut series: BTreeMap<Key, f64> = BTreeMap::new();
        (self.compute)(&mut |values: &[&str], v: f64| {
            if let Some(k) = self.meta.key(values) {
                series.insert(k, v);
            }
        });
        self.meta
            .render(out, self.kind, series.iter().map(|(k, v)| (k, *v)));
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
