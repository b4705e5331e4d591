//! Prometheus's text exposition format (version 0.0.4), written by hand: a family's `# HELP`
//! and `# TYPE` lines, then its samples, label values escaped. Names follow Prometheus's
//! advice (`berth_` prefix, base units in the name, `_total` on counters); docs/metrics.md
//! lists every one.

use std::fmt::Write;

/// The content type a scraper expects for this format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// The exposition being written. Each family is announced once, before its samples.
#[derive(Default)]
pub struct Exposition {
    out: String,
    current: String,
}

impl Exposition {
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Starts a family: its help text and type. A counter's name must end in `_total`.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        debug_assert!(kind != Kind::Counter || name.ends_with("_total"), "{name}");
        let ty = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {ty}");
        self.current = name.to_string();
    }

    /// One sample of the current family; `None` writes nothing (a value the kernel did not
    /// give is left out, not written as 0).
    pub fn sample(&mut self, labels: &[(&str, &str)], value: Option<f64>) {
        let Some(v) = value else { return };
        self.out.push_str(&self.current);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape(val));
            }
            self.out.push('}');
        }
        self.out.push(' ');
        self.out.push_str(&number(v));
        self.out.push('\n');
    }

    pub fn finish(self) -> String {
        self.out
    }
}

/// A label value: backslash, double quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A sample value: integers without a fraction, `NaN`, `+Inf`, `-Inf` as the format spells them.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_samples_labels_and_values_as_the_format_spells_them() {
        let mut e = Exposition::new();
        e.family(
            "berth_x_total",
            Kind::Counter,
            "a counter\\with a backslash",
        );
        e.sample(&[("container", "web")], Some(3.0));
        e.sample(&[("container", "a\"b\\c\nd")], Some(0.25));
        e.sample(&[("container", "gone")], None);
        e.family("berth_y_bytes", Kind::Gauge, "a gauge");
        e.sample(&[], Some(f64::NAN));
        e.sample(&[("a", "1"), ("b", "2")], Some(f64::INFINITY));
        e.sample(&[], Some(-1.5e20));
        assert_eq!(
            e.finish(),
            "# HELP berth_x_total a counter\\\\with a backslash\n# TYPE berth_x_total counter\n\
             berth_x_total{container=\"web\"} 3\n\
             berth_x_total{container=\"a\\\"b\\\\c\\nd\"} 0.25\n\
             # HELP berth_y_bytes a gauge\n# TYPE berth_y_bytes gauge\n\
             berth_y_bytes NaN\nberth_y_bytes{a=\"1\",b=\"2\"} +Inf\nberth_y_bytes -150000000000000000000\n"
        );
    }
}
