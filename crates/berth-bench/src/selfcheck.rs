//! A run checks its own output before it exits 0 (`--quick all` in CI relies on it): every
//! suite produced numbers or says why not (`"skipped"`: a missing tool, with the Debian
//! package), no test failed, the report renders every suite, the charts are well-formed.

use serde_json::Value;

use crate::chart;

/// Any finite number in an array below `v` (a suite's raw samples, whatever its layout).
fn has_samples(v: &Value) -> bool {
    match v {
        Value::Array(a) => a
            .iter()
            .any(|x| x.as_f64().is_some_and(f64::is_finite) || has_samples(x)),
        Value::Object(o) => o.values().any(has_samples),
        _ => false,
    }
}

/// (summary, problems): the run is good when there are no problems.
pub fn check(
    json_text: &str,
    markdown: &str,
    svgs: &[std::path::PathBuf],
) -> (String, Vec<String>) {
    let mut problems = Vec::new();
    let doc: Value = match serde_json::from_str(json_text) {
        Ok(v) => v,
        Err(e) => return (String::new(), vec![format!("the JSON does not parse: {e}")]),
    };
    let suites = doc["suites"].as_object().cloned().unwrap_or_default();
    if suites.is_empty() {
        problems.push("no suite in the JSON".into());
    }
    let (mut with_numbers, mut skipped_tests, mut bars) = (0, 0, 0);
    for (name, raw) in &suites {
        if !markdown.contains(&format!("\n## {name}")) {
            problems.push(format!("{name}: not in the report"));
        }
        if let Some(e) = raw["error"].as_str() {
            problems.push(format!("{name}: {e}"));
            continue;
        }
        let metrics = raw["metrics"].as_array().cloned().unwrap_or_default();
        for m in &metrics {
            if m["skipped"].is_string() {
                skipped_tests += 1;
            }
            if let Some(e) = m["error"].as_str() {
                problems.push(format!(
                    "{name}: {}: {e}",
                    m["test"].as_str().unwrap_or("?")
                ));
            }
        }
        // Failed runs a suite recorded and went on without (microvm, cgroups): the suite's
        // own list and its rows'.
        let rows = raw.as_object().into_iter().flat_map(|o| o.values());
        let lists = std::iter::once(&raw["errors"]).chain(
            rows.filter_map(Value::as_array)
                .flatten()
                .map(|r| &r["errors"]),
        );
        for e in lists.filter_map(Value::as_array).flatten() {
            problems.push(format!("{name}: {}", e.as_str().unwrap_or("an error")));
        }
        let n: usize = chart::panels(name, raw)
            .iter()
            .flat_map(|p| &p.groups)
            .map(|g| g.bars.len())
            .sum();
        bars += n;
        if n > 0 || has_samples(raw) {
            with_numbers += 1;
        } else if raw["skipped"].is_string()
            || (!metrics.is_empty() && metrics.iter().all(|m| m["skipped"].is_string()))
        {
            // Skipped with its reason: fine.
        } else {
            problems.push(format!("{name}: no numbers, and no reason why"));
        }
    }
    for p in svgs {
        match std::fs::read_to_string(p) {
            Ok(t) => {
                if let Err(e) = chart::well_formed(&t) {
                    problems.push(format!("{}: not well-formed: {e}", p.display()));
                }
            }
            Err(e) => problems.push(format!("{}: {e}", p.display())),
        }
    }
    let summary = format!(
        "ok: {} suites, {with_numbers} with numbers ({bars} charted values), {skipped_tests} tests skipped for a missing tool, report renders{}",
        suites.len(),
        if svgs.is_empty() {
            String::new()
        } else {
            format!(", {} charts well-formed", svgs.len())
        }
    );
    (summary, problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_what_is_missing() {
        let doc = json!({"suites": {
            "cpu": {"metrics": [{"test": "a", "host": [1.0], "guest": [1.1]},
                                {"test": "b", "skipped": "skipped: x (install the Debian package x)"}]},
            "mem": {"metrics": [{"test": "c", "skipped": "skipped: y"}]},
            "net": {"skipped": "iperf3 is not installed"},
            "fs": {"metrics": [{"test": "d", "host": [], "guest": [], "error": "fio failed"}]},
            "footprint": {"error": "the suite failed: boom"},
            "cgroups": {"errors": ["cgroup v1: the boot exited with 1"], "rr": [{"x": [1.0]}]},
            "microvm": {"fio": [{"host": [1.0], "errors": ["microvm: read-4k (round 0): no JSON"]},
                                {"host": [2.0], "errors": []}]},
            "activation": {"order": []},
        }});
        let md = "# r\n## cpu\n## mem\n## net\n## fs\n## footprint\n## cgroups\n## microvm\n";
        let (_, p) = check(&doc.to_string(), md, &[]);
        assert_eq!(
            p,
            [
                "activation: not in the report",
                "activation: no numbers, and no reason why",
                "cgroups: cgroup v1: the boot exited with 1",
                "footprint: the suite failed: boom",
                "fs: d: fio failed",
                "fs: no numbers, and no reason why",
                "microvm: microvm: read-4k (round 0): no JSON",
            ]
        );
        let good = json!({"suites": {"cpu": doc["suites"]["cpu"].clone(), "net": doc["suites"]["net"].clone()}});
        let (s, p) = check(&good.to_string(), md, &[]);
        assert!(p.is_empty(), "{p:?}");
        assert!(
            s.contains("2 suites, 1 with numbers (2 charted values), 1 tests skipped"),
            "{s}"
        );
        assert!(!check("{", md, &[]).1.is_empty());
    }
}
