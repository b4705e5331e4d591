//! `berth-bench compare A.json B.json`: two runs side by side (e.g. cgroup v1 against v2, two
//! kernels, two devices). The environment's differences first, then per suite and test A's
//! and B's guest/host ratio (or value), the change, and whether it is beyond both runs' noise
//! (their 95 % confidence intervals do not overlap). Suites and tests present in only one run
//! are listed as such.

use std::fmt::Write;
use std::path::Path;

use serde_json::Value;

use crate::chart;
use crate::report::Table;
use crate::stats::summarize;
use crate::suites::hostguest::num;
use crate::util::{bail, Result};

/// The JSON layout this berth-bench writes and reads (`"format"` at the top).
pub const FORMAT: u64 = 1;

/// Reads a run's JSON and checks that it is one berth-bench can read.
pub fn load(path: &Path) -> Result<Value> {
    let p = path.display();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!("{p}: no such file"),
        Err(e) => bail!("{p}: cannot read it: {e}"),
    };
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| format!("{p}: not a berth-bench result: not JSON ({e})"))?;
    if v["tool"] != "berth-bench" || !v["suites"].is_object() {
        bail!("{p}: not a berth-bench result (no \"tool\": \"berth-bench\" with \"suites\")");
    }
    match v["format"].as_u64() {
        Some(FORMAT) => Ok(v),
        Some(n) => bail!(
            "{p}: format version {n}, but this berth-bench reads format {FORMAT}: compare it with the berth-bench that wrote it"
        ),
        None => bail!(
            "{p}: no format version (written by a berth-bench older than format {FORMAT}); this berth-bench reads format {FORMAT}"
        ),
    }
}

/// Environment keys in the order they matter for a comparison; others follow sorted.
const ENV_ORDER: &[&str] = &[
    "kernel",
    "arch",
    "cpu_model",
    "cores",
    "mem_total_mib",
    "cgroup_layout",
    "distribution",
    "liblxc",
    "lxc_tools",
    "runc",
    "berth",
];

fn text(v: &Value) -> String {
    match v {
        Value::Null => "(not recorded)".into(),
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// Mean ± 95 % CI of samples.
fn mci(v: &[f64]) -> Option<(f64, f64)> {
    summarize(v).map(|s| (s.mean, s.ci95))
}

fn fmt_mci(x: Option<(f64, f64)>, ratio: bool) -> String {
    let n = |v: f64| if ratio { format!("{v:.3}") } else { num(v) };
    match x {
        None => "–".into(),
        Some((m, ci)) if ci.is_finite() => format!("{} ± {}", n(m), n(ci)),
        Some((m, _)) => n(m),
    }
}

/// "yes" when the two 95 % CIs do not overlap.
pub fn beyond_noise(a: (f64, f64), b: (f64, f64)) -> &'static str {
    if !(a.1.is_finite() && b.1.is_finite()) {
        "no CI (one sample)"
    } else if (a.0 - b.0).abs() > a.1 + b.1 {
        "yes"
    } else {
        "no, within noise"
    }
}

fn change_row(
    label: String,
    a: Option<(f64, f64)>,
    b: Option<(f64, f64)>,
    ratio: bool,
) -> Vec<String> {
    let (change, beyond) = match (a, b) {
        (Some(x), Some(y)) => (
            if ratio {
                format!("{:+.3}", y.0 - x.0)
            } else if x.0 == 0.0 {
                "–".into()
            } else {
                format!("{:+.2} %", (y.0 - x.0) / x.0 * 100.0)
            },
            beyond_noise(x, y).to_string(),
        ),
        (None, Some(_)) => ("–".into(), "only in B".into()),
        (Some(_), None) => ("–".into(), "only in A".into()),
        (None, None) => ("–".into(), "no numbers in either".into()),
    };
    vec![label, fmt_mci(a, ratio), fmt_mci(b, ratio), change, beyond]
}

fn metric_map(raw: &Value) -> Vec<(String, &Value)> {
    raw["metrics"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| (format!("{} ({})", text(&m["test"]), text(&m["unit"])), m))
        .collect()
}

fn find_metric<'a>(m: &[(String, &'a Value)], label: &str) -> Option<&'a Value> {
    m.iter().find(|x| x.0 == label).map(|x| x.1)
}

fn ratios(m: Option<&Value>) -> Option<(f64, f64)> {
    let m = m?;
    let r: Vec<f64> = m["ratio_guest_host"]
        .as_array()?
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    mci(&r)
}

/// Every charted number of a suite (not its host-vs-guest metrics) as label → samples' mean ± CI.
fn values(suite: &str, raw: &Value) -> Vec<(String, (f64, f64))> {
    let mut r = raw.clone();
    if let Some(o) = r.as_object_mut() {
        o.remove("metrics");
    }
    let mut out = Vec::new();
    for p in chart::panels(suite, &r) {
        for g in &p.groups {
            for b in &g.bars {
                let ci = if b.hi.is_finite() {
                    b.hi - b.value
                } else {
                    f64::NAN
                };
                out.push((
                    format!("{}: {}, {} ({})", p.title, g.label, b.series, p.unit),
                    (b.value, ci),
                ));
            }
        }
    }
    out
}

fn union<'a>(a: &'a [String], b: &'a [String]) -> Vec<&'a String> {
    let mut v: Vec<&String> = a.iter().collect();
    v.extend(b.iter().filter(|x| !a.contains(x)));
    v
}

/// The comparison as Markdown.
pub fn render(a: &Value, b: &Value, an: &str, bn: &str) -> String {
    let mut s = String::from("# berth-bench compare\n\n");
    for (k, v, n) in [("A", a, an), ("B", b, bn)] {
        let _ = writeln!(
            s,
            "- **{k}**: `{n}` — {} — `berth-bench {}`{}",
            text(&v["environment"]["date"]),
            v["args"]
                .as_array()
                .map(|a| a.iter().map(text).collect::<Vec<_>>().join(" "))
                .unwrap_or_default(),
            if v["interrupted"] == true {
                " **(interrupted)**"
            } else {
                ""
            }
        );
    }
    s.push_str("\n## environment\n\n");
    let (ea, eb) = (&a["environment"], &b["environment"]);
    let mut keys: Vec<String> = ENV_ORDER.iter().map(|k| k.to_string()).collect();
    let mut rest: Vec<String> = ea
        .as_object()
        .into_iter()
        .chain(eb.as_object())
        .flat_map(|o| o.keys().cloned())
        .filter(|k| !keys.contains(k) && k != "date" && k != "berth_path")
        .collect();
    rest.sort();
    rest.dedup();
    keys.extend(rest);
    let mut t = Table::new(&["differs", "A", "B"]);
    let mut same = Vec::new();
    for k in &keys {
        if ea[k.as_str()] == eb[k.as_str()] {
            if !ea[k.as_str()].is_null() {
                same.push(k.as_str());
            }
        } else {
            t.row(vec![
                k.clone(),
                text(&ea[k.as_str()]),
                text(&eb[k.as_str()]),
            ]);
        }
    }
    for k in ["quick", "runs", "warmup"] {
        if a[k] != b[k] {
            t.row(vec![format!("run: {k}"), text(&a[k]), text(&b[k])]);
        }
    }
    if t.rows.is_empty() {
        s.push_str("No difference in the recorded environment.\n");
    } else {
        s.push_str(&t.markdown());
    }
    if !same.is_empty() {
        let _ = writeln!(s, "\nThe same in both: {}.", same.join(", "));
    }

    let names = |v: &Value| -> Vec<String> {
        v["suites"]
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    let (na, nb) = (names(a), names(b));
    for suite in union(&na, &nb) {
        let (ra, rb) = (&a["suites"][suite.as_str()], &b["suites"][suite.as_str()]);
        let _ = writeln!(s, "\n## {suite}\n");
        if ra.is_null() || rb.is_null() {
            let _ = writeln!(s, "Only in {}.", if ra.is_null() { "B" } else { "A" });
            continue;
        }
        for (k, r) in [("A", ra), ("B", rb)] {
            if let Some(e) = r["error"].as_str() {
                let _ = writeln!(s, "- {k}: the suite failed: {e}");
            }
        }
        let (ma, mb) = (metric_map(ra), metric_map(rb));
        let la: Vec<String> = ma.iter().map(|x| x.0.clone()).collect();
        let lb: Vec<String> = mb.iter().map(|x| x.0.clone()).collect();
        if !la.is_empty() || !lb.is_empty() {
            let mut t = Table::new(&[
                "test",
                "A guest/host",
                "B guest/host",
                "change (B − A)",
                "beyond both runs' noise",
            ]);
            for l in union(&la, &lb) {
                let (xa, xb) = (find_metric(&ma, l), find_metric(&mb, l));
                let mut row = change_row(l.clone(), ratios(xa), ratios(xb), true);
                for (m, other) in [(xa, xb), (xb, xa)] {
                    if let Some(why) = m.and_then(|m| m["skipped"].as_str().or(m["error"].as_str()))
                    {
                        if other.is_some() {
                            row[4] = why.to_string();
                        }
                    }
                }
                if xa.is_none() || xb.is_none() {
                    row[4] = format!("only in {}", if xa.is_none() { "B" } else { "A" });
                }
                t.row(row);
            }
            s.push_str("ratio = guest / host, mean ± 95 % CI over the rounds\n\n");
            s.push_str(&t.markdown());
        }
        let (va, vb) = (values(suite, ra), values(suite, rb));
        let la: Vec<String> = va.iter().map(|x| x.0.clone()).collect();
        let lb: Vec<String> = vb.iter().map(|x| x.0.clone()).collect();
        if !la.is_empty() || !lb.is_empty() {
            let mut t = Table::new(&["value", "A", "B", "change", "beyond both runs' noise"]);
            for l in union(&la, &lb) {
                let find = |m: &[(String, (f64, f64))]| m.iter().find(|x| &x.0 == l).map(|x| x.1);
                t.row(change_row(l.clone(), find(&va), find(&vb), false));
            }
            s.push('\n');
            s.push_str("mean ± 95 % CI of the samples\n\n");
            s.push_str(&t.markdown());
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(kernel: &str, ratios: &[f64], extra: bool) -> Value {
        let mut suites = json!({
            "cpu": {"metrics": [
                {"test": "sysbench", "unit": "s", "host": [1.0], "guest": [1.0], "ratio_guest_host": ratios},
                {"test": "hpl", "unit": "MFLOPS", "host": [], "guest": [], "ratio_guest_host": [],
                 "skipped": "skipped: hpcc is not installed (install the Debian package hpcc)"},
            ]},
        });
        if extra {
            suites["cpu"]["metrics"]
                .as_array_mut()
                .unwrap()
                .push(json!({"test": "new", "unit": "s", "ratio_guest_host": [1.0, 1.0]}));
            suites["activation"] =
                json!({"samples_ms": {"berth_first_instruction": [20.0, 21.0, 22.0]}});
        }
        json!({"tool": "berth-bench", "format": 1, "args": ["--quick", "cpu"],
               "environment": {"kernel": kernel, "cores": 2, "date": "x"}, "suites": suites})
    }

    #[test]
    fn side_by_side() {
        let a = run("6.1", &[1.0, 1.01, 0.99], false);
        let b = run("6.18", &[1.2, 1.21, 1.19], true);
        let md = render(&a, &b, "a.json", "b.json");
        assert!(md.contains("| kernel | 6.1 | 6.18 |"), "{md}");
        assert!(md.contains("The same in both: cores."));
        // The environment comes first.
        assert!(md.find("## environment").unwrap() < md.find("## cpu").unwrap());
        assert!(
            md.contains("| sysbench (s) | 1.000 ± 0.025 | 1.200 ± 0.025 | +0.200 | yes |"),
            "{md}"
        );
        assert!(
            md.contains("| new (s) | – | 1.000 ± 0.000 | – | only in B |"),
            "{md}"
        );
        assert!(md.contains("install the Debian package hpcc"));
        assert!(md.contains("## activation\n\nOnly in B."));
        let same = render(&a, &a, "a", "a");
        assert!(same.contains("No difference in the recorded environment."));
        assert!(same.contains("| no, within noise |"));
    }

    #[test]
    fn noise() {
        assert_eq!(beyond_noise((1.0, 0.1), (1.3, 0.1)), "yes");
        assert_eq!(beyond_noise((1.0, 0.1), (1.15, 0.1)), "no, within noise");
        assert_eq!(
            beyond_noise((1.0, f64::NAN), (2.0, 0.1)),
            "no CI (one sample)"
        );
    }

    #[test]
    fn load_errors_are_clear() {
        let d = std::env::temp_dir().join(format!("bb-compare-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let err = |name: &str, body: Option<&str>| {
            let p = d.join(name);
            if let Some(b) = body {
                std::fs::write(&p, b).unwrap();
            }
            load(&p).unwrap_err().0
        };
        assert!(err("missing.json", None).ends_with("missing.json: no such file"));
        assert!(err("text.json", Some("hello")).contains("not JSON"));
        assert!(err("other.json", Some("{\"a\": 1}")).contains("not a berth-bench result"));
        let old = err("old.json", Some(r#"{"tool": "berth-bench", "suites": {}}"#));
        assert!(old.contains("no format version"), "{old}");
        let new = err(
            "new.json",
            Some(r#"{"tool": "berth-bench", "format": 9, "suites": {}}"#),
        );
        assert!(
            new.contains("format version 9, but this berth-bench reads format 1"),
            "{new}"
        );
        std::fs::write(d.join("ok.json"), run("6.1", &[1.0], false).to_string()).unwrap();
        assert!(load(&d.join("ok.json")).is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
