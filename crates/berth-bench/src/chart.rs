//! Hand-written SVG charts of a run (no crate): one file per suite, a stack of panels, each a
//! horizontal bar chart (groups of bars, one colour per series) with error whiskers.
//!
//! Charts are drawn from the run's JSON, so a committed JSON can be charted again
//! (`berth-bench svg RUN.json DIR`). What is charted, per suite's raw object:
//! - `metrics` (host vs guest, cpu/mem/fs): one panel per tool and unit, bars host and guest;
//! - `matrix` (LXCBENCH): host alone, guest alone, host with guest, guest with host;
//! - `series` (generic, e.g. throughput per network mode): see [`series_json`];
//! - activation's and footprint's own layouts.
//!
//! Bars are the mean of the samples, whiskers its 95 % confidence interval (Student's t);
//! a single sample has no whisker.

use std::fmt::Write;

use serde_json::{json, Value};

use crate::stats::summarize;

pub struct Bar {
    pub series: String,
    pub value: f64,
    /// Whisker ends (NaN: none).
    pub lo: f64,
    pub hi: f64,
}

impl Bar {
    /// Mean ± 95 % CI of `samples`; None without a finite sample.
    pub fn of(series: &str, samples: &[f64]) -> Option<Bar> {
        let s = summarize(samples)?;
        Some(Bar {
            series: series.into(),
            value: s.mean,
            lo: s.mean - s.ci95,
            hi: s.mean + s.ci95,
        })
    }
}

pub struct Group {
    pub label: String,
    pub bars: Vec<Bar>,
}

pub struct Panel {
    pub title: String,
    pub unit: String,
    pub groups: Vec<Group>,
}

/// The generic "series by mode" shape a suite puts under `series` in its raw JSON: one panel
/// titled `title` in `unit`, one group per mode (e.g. "host", "isolated (veth + bridge)"),
/// in each one bar per series (e.g. "iperf3 TCP") from its raw samples.
/// One mode's bars: (series, samples).
pub type ModeBars = (String, Vec<(String, Vec<f64>)>);

pub fn series_json(title: &str, unit: &str, groups: &[ModeBars]) -> Value {
    json!({
        "title": title, "unit": unit,
        "groups": groups.iter().map(|(label, bars)| json!({
            "label": label,
            "bars": bars.iter().map(|(s, v)| json!({"series": s, "samples": v})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

fn samples(v: &Value) -> Vec<f64> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

fn group(label: &str, bars: &[(&str, &Value)]) -> Option<Group> {
    let bars: Vec<Bar> = bars
        .iter()
        .filter_map(|(s, v)| Bar::of(s, &samples(v)))
        .collect();
    (!bars.is_empty()).then(|| Group {
        label: label.into(),
        bars,
    })
}

/// Adds `g` to the panel titled `title` (made when missing).
fn add(panels: &mut Vec<Panel>, title: String, unit: &str, g: Option<Group>) {
    let Some(g) = g else { return };
    match panels.iter_mut().find(|p| p.title == title) {
        Some(p) => p.groups.push(g),
        None => panels.push(Panel {
            title,
            unit: unit.into(),
            groups: vec![g],
        }),
    }
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// The panels of one suite's raw JSON (empty when it holds no numbers).
pub fn panels(suite: &str, raw: &Value) -> Vec<Panel> {
    let mut p = Vec::new();
    for m in raw["metrics"].as_array().into_iter().flatten() {
        let test = s(&m["test"]);
        let tool = test.split([' ', ',']).next().unwrap_or("");
        let better = match m["higher_is_better"].as_bool() {
            Some(true) => ", higher is better",
            Some(false) => ", lower is better",
            None => "",
        };
        let unit = format!("{}{better}", s(&m["unit"]));
        let g = group(test, &[("host", &m["host"]), ("guest", &m["guest"])]);
        add(&mut p, format!("{tool}: host vs guest"), &unit, g);
    }
    for m in raw["matrix"].as_array().into_iter().flatten() {
        let g = group(
            s(&m["test"]),
            &[
                ("host alone", &m["host_alone"]),
                ("guest alone", &m["guest_alone"]),
                ("host with guest", &m["host_with_guest"]),
                ("guest with host", &m["guest_with_host"]),
            ],
        );
        add(
            &mut p,
            "host and container at once".into(),
            s(&m["unit"]),
            g,
        );
    }
    for c in raw["series"].as_array().into_iter().flatten() {
        for g in c["groups"].as_array().into_iter().flatten() {
            let bars: Vec<(&str, &Value)> = g["bars"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|b| (s(&b["series"]), &b["samples"]))
                .collect();
            add(
                &mut p,
                s(&c["title"]).into(),
                s(&c["unit"]),
                group(s(&g["label"]), &bars),
            );
        }
    }
    match suite {
        "activation" => {
            let sm = &raw["samples_ms"];
            for (title, peers) in [
                (
                    "start request → payload's first instruction",
                    [
                        ("berth", "berth_first_instruction"),
                        ("lxc-execute", "lxc_execute_first_instruction"),
                        ("runc", "runc_first_instruction"),
                    ],
                ),
                (
                    "stop",
                    [
                        ("berth stop", "berth_stop"),
                        ("lxc-stop", "lxc_stop"),
                        ("runc kill + delete", "runc_kill_delete"),
                    ],
                ),
                (
                    "whole process (payload exits at once)",
                    [
                        ("lxc-execute", "lxc_execute_whole"),
                        ("runc run", "runc_whole"),
                        ("", ""),
                    ],
                ),
            ] {
                for (label, key) in peers.into_iter().filter(|(l, _)| !l.is_empty()) {
                    add(
                        &mut p,
                        title.into(),
                        "ms",
                        group(label, &[("time", &sm[key])]),
                    );
                }
            }
        }
        "footprint" => {
            let d = &raw["daemon"];
            for (label, k) in [
                ("daemon idle", "idle"),
                ("daemon, 10 containers", "running"),
                ("daemon after stopping them", "after_stop"),
            ] {
                let one = |f: &str| json!([d[k][f]]);
                let (r, pv, ps) = (one("rss_kib"), one("private_kib"), one("pss_kib"));
                let g = group(label, &[("RSS", &r), ("private", &pv), ("PSS", &ps)]);
                add(&mut p, "memory".into(), "KiB", g);
            }
            let cs = raw["containers"].as_array().cloned().unwrap_or_default();
            for (label, k) in [
                ("per container: berth-shim", "shim"),
                ("per container: LXC monitor", "monitor"),
                ("per container: the package's own", "package"),
            ] {
                let col =
                    |f: &str| Value::from(cs.iter().map(|c| c[k][f].clone()).collect::<Vec<_>>());
                let (r, pv, ps) = (col("rss_kib"), col("private_kib"), col("pss_kib"));
                let g = group(label, &[("RSS", &r), ("private", &pv), ("PSS", &ps)]);
                add(&mut p, "memory".into(), "KiB", g);
            }
        }
        _ => {}
    }
    p
}

/// Escapes text for XML content and attribute values.
pub fn esc(t: &str) -> String {
    let mut o = String::with_capacity(t.len());
    for c in t.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

/// A round axis end and step (1, 2 or 5 × 10ⁿ) for values up to `max`, at most 7 ticks.
pub fn axis(max: f64) -> (f64, f64) {
    if !(max.is_finite() && max > 0.0) {
        return (1.0, 0.2);
    }
    let raw = max / 6.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    ((max / step).ceil() * step, step)
}

/// The horizontal value axis under a chart's bars: the frame from `top` down to `y`, a tick
/// and label every `step` up to `end`, and the unit centred below.
fn draw_axis(
    b: &mut String,
    top: f64,
    y: f64,
    (end, step): (f64, f64),
    x: &dyn Fn(f64) -> f64,
    unit: &str,
) {
    let _ = writeln!(
        b,
        r##"<path d="M{X0} {top}V{y}H{X1}" stroke="#444" fill="none"/>"##
    );
    let mut v = 0.0;
    while v <= end + step / 2.0 {
        let tx = x(v);
        let _ = writeln!(
            b,
            r##"<path d="M{tx:.1} {y}v4" stroke="#444"/><text x="{tx:.1}" y="{}" font-size="11" text-anchor="middle">{}</text>"##,
            y + 15.0,
            esc(&tick(v, step))
        );
        v += step;
    }
    let _ = writeln!(
        b,
        r#"<text x="{}" y="{}" font-size="12" text-anchor="middle">{}</text>"#,
        (X0 + X1) / 2.0,
        y + 31.0,
        esc(unit)
    );
}

/// An axis label with the decimals its step needs.
fn tick(v: f64, step: f64) -> String {
    let d = if step >= 1.0 {
        0
    } else {
        (-step.log10()).ceil() as usize
    };
    format!("{v:.d$}")
}

fn short(t: &str, n: usize) -> String {
    if t.chars().count() <= n {
        t.into()
    } else {
        format!("{}…", t.chars().take(n - 1).collect::<String>())
    }
}

const COLOURS: &[&str] = &[
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1",
];
const W: f64 = 960.0;
const X0: f64 = 370.0;
const X1: f64 = 890.0;
const BAR: f64 = 13.0;

/// One SVG with the panels stacked; `title` on top.
pub fn svg(title: &str, panels: &[Panel]) -> String {
    let mut b = String::new();
    let mut y = 34.0;
    for p in panels {
        let mut series: Vec<&str> = Vec::new();
        for g in &p.groups {
            for bar in &g.bars {
                if !series.contains(&bar.series.as_str()) {
                    series.push(&bar.series);
                }
            }
        }
        let colour =
            |s: &str| COLOURS[series.iter().position(|x| *x == s).unwrap_or(0) % COLOURS.len()];
        let max = p
            .groups
            .iter()
            .flat_map(|g| &g.bars)
            .map(|b| {
                if b.hi.is_finite() {
                    b.hi.max(b.value)
                } else {
                    b.value
                }
            })
            .fold(0.0, f64::max);
        let (end, step) = axis(max);
        let x = |v: f64| X0 + (v.max(0.0) / end) * (X1 - X0);
        y += 26.0;
        let _ = writeln!(
            b,
            r#"<text x="10" y="{y}" font-size="15" font-weight="bold">{}</text>"#,
            esc(&p.title)
        );
        // Legend, on its own line.
        y += 20.0;
        let mut lx = X0;
        for s in &series {
            let _ = writeln!(
                b,
                r#"<rect x="{lx}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{}" font-size="12">{}</text>"#,
                y - 11.0,
                colour(s),
                lx + 16.0,
                y,
                esc(s)
            );
            lx += 30.0 + 7.0 * s.chars().count() as f64;
        }
        y += 12.0;
        let top = y;
        for g in &p.groups {
            let h = g.bars.len() as f64 * (BAR + 2.0);
            let _ = writeln!(
                b,
                r#"<text x="{}" y="{}" font-size="12" text-anchor="end"><title>{}</title>{}</text>"#,
                X0 - 8.0,
                y + h / 2.0 + 4.0,
                esc(&g.label),
                esc(&short(&g.label, 52))
            );
            for bar in &g.bars {
                let w = x(bar.value) - X0;
                let _ = writeln!(
                    b,
                    r#"<rect class="bar" x="{X0}" y="{y:.1}" width="{w:.3}" height="{BAR}" fill="{}" data-value="{}"><title>{}: {}</title></rect>"#,
                    colour(&bar.series),
                    bar.value,
                    esc(&bar.series),
                    crate::suites::hostguest::num(bar.value)
                );
                let cy = y + BAR / 2.0;
                let mut tx = x(bar.value);
                if bar.lo.is_finite() && bar.hi.is_finite() && bar.hi > bar.lo {
                    let (a, c) = (x(bar.lo), x(bar.hi));
                    let _ = writeln!(
                        b,
                        r##"<path class="whisker" d="M{a:.1} {cy:.1}H{c:.1}M{a:.1} {:.1}V{:.1}M{c:.1} {:.1}V{:.1}" stroke="#222" fill="none"/>"##,
                        cy - 4.0,
                        cy + 4.0,
                        cy - 4.0,
                        cy + 4.0
                    );
                    tx = tx.max(c);
                }
                let _ = writeln!(
                    b,
                    r#"<text x="{:.1}" y="{:.1}" font-size="11">{}</text>"#,
                    tx + 4.0,
                    cy + 4.0,
                    esc(&crate::suites::hostguest::num(bar.value))
                );
                y += BAR + 2.0;
            }
            y += 8.0;
        }
        draw_axis(&mut b, top, y, (end, step), &x, &p.unit);
        y += 40.0;
    }
    let h = y + 10.0;
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{h}\" viewBox=\"0 0 {W} {h}\" font-family=\"sans-serif\">\n<rect width=\"{W}\" height=\"{h}\" fill=\"white\"/>\n<text x=\"10\" y=\"22\" font-size=\"17\" font-weight=\"bold\">{}</text>\n<text x=\"{X1}\" y=\"22\" font-size=\"11\" text-anchor=\"end\">bars: mean; whiskers: 95 % confidence interval of the mean</text>\n{b}</svg>\n",
        esc(title)
    )
}

/// One horizontal bar of a stacked chart: its label and its segments (name, value).
pub type StackRow = (String, Vec<(String, f64)>);

/// A stacked bar chart: one bar per row, one colour per segment name (the legend lists them
/// in the order they first appear), each segment's value written on it when it is wide
/// enough, the row's total after it.
pub fn stacked(title: &str, unit: &str, note: &str, rows: &[StackRow]) -> String {
    const PALETTE: &[&str] = &[
        "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1", "#edc948", "#ff9da7",
        "#9c755f", "#bab0ac", "#1b9e77", "#7570b3", "#d95f02", "#66a61e",
    ];
    let mut names: Vec<&str> = Vec::new();
    for (_, segs) in rows {
        for (n, _) in segs {
            if !names.contains(&n.as_str()) {
                names.push(n);
            }
        }
    }
    let colour = |n: &str| PALETTE[names.iter().position(|x| *x == n).unwrap_or(0) % PALETTE.len()];
    let total = |segs: &[(String, f64)]| segs.iter().map(|(_, v)| v.max(0.0)).sum::<f64>();
    let max = rows.iter().map(|(_, s)| total(s)).fold(0.0, f64::max);
    let (end, step) = axis(max);
    let x = |v: f64| X0 + (v.max(0.0) / end) * (X1 - X0);
    let mut b = String::new();
    let mut y = 48.0;
    let _ = writeln!(
        b,
        r#"<text x="10" y="{y}" font-size="12">{}</text>"#,
        esc(note)
    );
    // Legend: four to a line.
    y += 22.0;
    for (i, n) in names.iter().enumerate() {
        let lx = 10.0 + (i % 4) as f64 * 235.0;
        if i > 0 && i % 4 == 0 {
            y += 18.0;
        }
        let _ = writeln!(
            b,
            r#"<rect x="{lx}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{y}" font-size="12">{}</text>"#,
            y - 11.0,
            colour(n),
            lx + 16.0,
            esc(&short(n, 30))
        );
    }
    y += 18.0;
    let top = y;
    const ROW: f64 = 26.0;
    for (label, segs) in rows {
        let _ = writeln!(
            b,
            r#"<text x="{}" y="{:.1}" font-size="12" text-anchor="end">{}</text>"#,
            X0 - 8.0,
            y + ROW / 2.0 + 4.0,
            esc(&short(label, 52))
        );
        let mut acc = 0.0;
        for (n, v) in segs {
            let v = v.max(0.0);
            let (a, c) = (x(acc), x(acc + v));
            let _ = writeln!(
                b,
                r#"<rect class="bar" x="{a:.2}" y="{y:.1}" width="{:.3}" height="{ROW}" fill="{}" data-value="{v}"><title>{}: {}</title></rect>"#,
                c - a,
                colour(n),
                esc(n),
                crate::suites::hostguest::num(v)
            );
            if c - a > 26.0 {
                let _ = writeln!(
                    b,
                    r#"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="middle" fill="white">{}</text>"#,
                    (a + c) / 2.0,
                    y + ROW / 2.0 + 3.5,
                    esc(&crate::suites::hostguest::num(v))
                );
            }
            acc += v;
        }
        let _ = writeln!(
            b,
            r#"<text x="{:.1}" y="{:.1}" font-size="11">{}</text>"#,
            x(acc) + 4.0,
            y + ROW / 2.0 + 4.0,
            esc(&crate::suites::hostguest::num(acc))
        );
        y += ROW + 8.0;
    }
    draw_axis(&mut b, top, y, (end, step), &x, unit);
    let h = y + 50.0;
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{h}\" viewBox=\"0 0 {W} {h}\" font-family=\"sans-serif\">\n<rect width=\"{W}\" height=\"{h}\" fill=\"white\"/>\n<text x=\"10\" y=\"22\" font-size=\"17\" font-weight=\"bold\">{}</text>\n{b}</svg>\n",
        esc(title)
    )
}

/// The charts of a suite beyond its panels: (file stem, SVG). activation with `--trace`:
/// where the start's time goes, phase by phase (`activation-phases.svg`).
pub fn extra(suite: &str, raw: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if suite == "activation" {
        let t = &raw["trace"];
        let rows: Vec<StackRow> = t["peers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                let segs: Vec<(String, f64)> = p["phases"]
                    .as_array()?
                    .iter()
                    .filter_map(|ph| {
                        let m = summarize(&samples(&ph["samples_ms"]))?.mean;
                        Some((s(&ph["phase"]).to_string(), m))
                    })
                    .collect();
                (!segs.is_empty()).then(|| (s(&p["peer"]).to_string(), segs))
            })
            .collect();
        if !rows.is_empty() {
            let note = format!(
                "mean of {} traced starts per peer, start request to the payload's first instruction{}",
                t["runs"],
                if t["split"] == true { "; liblxc's phases from perf" } else { "" }
            );
            out.push((
                "activation-phases".to_string(),
                stacked("berth-bench: where a start's time goes", "ms", &note, &rows),
            ));
        }
    }
    out
}

/// A small well-formedness check of XML as [`svg`] writes it: one root, tags nested and
/// closed, attributes quoted, `&` only in the five entities (no DTD, CDATA or comments).
pub fn well_formed(x: &str) -> std::result::Result<(), String> {
    let ent = |t: &str| -> std::result::Result<(), String> {
        let mut rest = t;
        while let Some(i) = rest.find('&') {
            rest = &rest[i + 1..];
            let ok = ["amp;", "lt;", "gt;", "quot;", "apos;"]
                .iter()
                .any(|e| rest.starts_with(e));
            if !ok {
                return Err(format!("bare & before {:?}", short(rest, 12)));
            }
        }
        if t.contains('<') {
            return Err("raw < in a value".into());
        }
        Ok(())
    };
    let mut rest = x.trim_start();
    if let Some(r) = rest.strip_prefix("<?xml") {
        rest = &r[r.find("?>").ok_or("unterminated XML declaration")? + 2..];
    }
    let mut stack: Vec<&str> = Vec::new();
    let mut roots = 0;
    loop {
        let Some(i) = rest.find('<') else {
            ent(rest)?;
            if rest.trim().is_empty() || !stack.is_empty() {
                break;
            }
            return Err("text after the root element".into());
        };
        let text = &rest[..i];
        ent(text)?;
        if stack.is_empty() && !text.trim().is_empty() {
            return Err("text outside the root element".into());
        }
        let after = &rest[i + 1..];
        let end = after.find('>').ok_or("unterminated tag")?;
        let tag = &after[..end];
        rest = &after[end + 1..];
        if tag.contains('<') {
            return Err(format!("< inside tag {tag:?}"));
        }
        if let Some(name) = tag.strip_prefix('/') {
            match stack.pop() {
                Some(open) if open == name.trim() => continue,
                o => return Err(format!("</{name}> closes {o:?}")),
            }
        }
        let selfclose = tag.ends_with('/');
        let body = tag.trim_end_matches('/');
        let name_end = body.find(char::is_whitespace).unwrap_or(body.len());
        let name = &body[..name_end];
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_alphanumeric() || "-_:.".contains(c))
        {
            return Err(format!("bad tag name in <{tag}>"));
        }
        // Attributes: name="value" separated by white space.
        let mut a = body[name_end..].trim_start();
        while !a.is_empty() {
            let eq = a
                .find('=')
                .ok_or(format!("attribute without value in <{tag}>"))?;
            let an = a[..eq].trim();
            if an.is_empty() || an.contains(char::is_whitespace) {
                return Err(format!("bad attribute name in <{tag}>"));
            }
            let v = a[eq + 1..].trim_start();
            let q = v.chars().next().filter(|c| *c == '"' || *c == '\'');
            let q = q.ok_or(format!("unquoted attribute {an} in <{name}>"))?;
            let close = v[1..]
                .find(q)
                .ok_or(format!("unterminated attribute {an}"))?;
            ent(&v[1..1 + close])?;
            a = v[close + 2..].trim_start();
        }
        if stack.is_empty() {
            roots += 1;
        }
        if !selfclose {
            stack.push(name);
        }
    }
    match (stack.last(), roots) {
        (Some(open), _) => Err(format!("<{open}> is never closed")),
        (None, 1) => Ok(()),
        (None, n) => Err(format!("{n} root elements")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bars(svg: &str) -> Vec<(f64, f64)> {
        svg.lines()
            .filter(|l| l.contains(r#"class="bar""#))
            .map(|l| {
                let attr = |n: &str| -> f64 {
                    let i = l.find(&format!(" {n}=\"")).unwrap() + n.len() + 3;
                    l[i..i + l[i..].find('"').unwrap()].parse().unwrap()
                };
                (attr("width"), attr("data-value"))
            })
            .collect()
    }

    #[test]
    fn checker_catches_bad_xml() {
        assert!(well_formed("<a><b x=\"1\"/>t &amp; u</a>").is_ok());
        assert!(well_formed("<?xml version=\"1.0\"?>\n<a/>\n").is_ok());
        assert!(well_formed("<a><b></a>").is_err());
        assert!(well_formed("<a>x & y</a>").is_err());
        assert!(well_formed("<a x=1/>").is_err());
        assert!(well_formed("<a/><b/>").is_err());
        assert!(well_formed("<a>").is_err());
        assert!(well_formed("<a x=\"<\"/>").is_err());
    }

    #[test]
    fn bars_are_proportional_and_text_escaped() {
        let p = Panel {
            title: "fio <4k> & \"direct\"".into(),
            unit: "MB/s".into(),
            groups: vec![
                Group {
                    label: "a < b".into(),
                    bars: vec![
                        Bar::of("host", &[10.0, 12.0, 11.0]).unwrap(),
                        Bar::of("guest", &[20.0, 22.0]).unwrap(),
                    ],
                },
                Group {
                    label: "one".into(),
                    bars: vec![Bar::of("host", &[5.0]).unwrap()],
                },
            ],
        };
        let out = svg("suite 'x'", &[p]);
        well_formed(&out).unwrap();
        assert!(out.contains("fio &lt;4k&gt; &amp; &quot;direct&quot;"));
        assert!(out.contains("suite &apos;x&apos;"));
        assert!(out.contains(">a &lt; b</text>"));
        assert!(out.contains(">MB/s</text>"));
        let b = bars(&out);
        assert_eq!(b.len(), 3);
        let k = b[0].0 / b[0].1;
        for (w, v) in &b {
            assert!((w / v - k).abs() < 1e-3, "{w} / {v} against {k}");
        }
        // Two whiskers: the single sample has none.
        assert_eq!(out.matches(r#"class="whisker""#).count(), 2);
        // The longest whisker fits on the axis.
        assert!(b.iter().all(|(w, _)| *w <= X1 - X0));
    }

    #[test]
    fn stacked_segments_sum_to_the_row() {
        let raw = json!({"trace": {"runs": 3, "split": true, "peers": [
            {"peer": "berth", "phases": [
                {"phase": "request", "samples_ms": [1.0, 1.0, 1.0]},
                {"phase": "cgroup set-up", "samples_ms": [8.0, 10.0, 12.0]},
            ]},
            {"peer": "lxc-execute", "phases": [
                {"phase": "process start", "samples_ms": [3.0, 3.0, 3.0]},
                {"phase": "cgroup set-up", "samples_ms": [9.0, 9.0, 9.0]},
                {"phase": "<none> & \"x\"", "samples_ms": []},
            ]},
        ]}});
        let charts = extra("activation", &raw);
        assert_eq!(charts.len(), 1);
        let (stem, out) = &charts[0];
        assert_eq!(stem, "activation-phases");
        well_formed(out).unwrap();
        let b = bars(out);
        assert_eq!(b.len(), 4, "a phase without samples has no segment");
        // widths proportional to the means; berth's row: 1 + 10, lxc-execute's: 3 + 9
        let k = b[0].0 / b[0].1;
        for (w, v) in &b {
            assert!((w / v - k).abs() < 1e-3, "{w} / {v} against {k}");
        }
        assert_eq!(b[1].1, 10.0);
        assert!(
            out.contains(">11.0</text>") && out.contains(">12.0</text>"),
            "{out}"
        );
        // one colour per phase, shared by both rows
        let fill = |n: usize| {
            let l = out
                .lines()
                .filter(|l| l.contains(r#"class="bar""#))
                .nth(n)
                .unwrap();
            l[l.find("fill=").unwrap()..][..14].to_string()
        };
        assert_eq!(fill(1), fill(3));
        assert_ne!(fill(0), fill(1));
        assert!(extra("activation", &json!({})).is_empty());
        assert!(extra("cpu", &raw).is_empty());
    }

    #[test]
    fn axes_are_round() {
        assert_eq!(axis(9.3), (10.0, 2.0));
        assert_eq!(axis(0.93), (1.0, 0.2));
        assert_eq!(axis(101_000.0), (120_000.0, 20_000.0));
        assert_eq!(axis(0.0), (1.0, 0.2));
        assert_eq!(tick(0.4, 0.2), "0.4");
        assert_eq!(tick(20_000.0, 20_000.0), "20000");
        assert_eq!(tick(0.05, 0.05), "0.05");
    }

    #[test]
    fn panels_from_suite_json() {
        let raw = json!({
            "metrics": [
                {"test": "sysbench cpu, 1 instance", "unit": "s", "host": [1.0, 1.1], "guest": [1.0, 1.2]},
                {"test": "sysbench cpu, 2 instances", "unit": "s", "host": [2.0], "guest": [2.1]},
                {"test": "Linpack (hpcc)", "unit": "MFLOPS", "host": [], "guest": [], "skipped": "skipped: x"},
            ],
            "matrix": [{"test": "t", "unit": "s", "host_alone": [1.0], "guest_alone": [1.0],
                        "host_with_guest": [2.0], "guest_with_host": [2.0]}],
            "series": [series_json("TCP throughput", "Mbit/s", &[
                ("host".into(), vec![("iperf3".into(), vec![900.0, 950.0])]),
                ("macvlan".into(), vec![("iperf3".into(), vec![890.0])]),
            ])],
        });
        let p = panels("cpu", &raw);
        let titles: Vec<&str> = p.iter().map(|p| p.title.as_str()).collect();
        assert_eq!(
            titles,
            [
                "sysbench: host vs guest",
                "host and container at once",
                "TCP throughput"
            ]
        );
        assert_eq!(p[0].groups.len(), 2);
        assert_eq!(p[1].groups[0].bars.len(), 4);
        assert_eq!(p[2].groups[1].label, "macvlan");
        assert!(panels("fs", &json!({"metrics": []})).is_empty());
    }
}
