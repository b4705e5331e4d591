//! For tests that cannot run on this machine: they say so by name, and the test runner lists
//! them. A skip is printed (`SKIPPED: …`) and, when `BERTH_SKIP_LOG` names a file, appended
//! to it as `KIND<TAB>REASON`, where KIND is `package NAME` (a Debian package is missing: a
//! machine that runs the whole suite should have installed it, and scripts/test.sh fails on
//! it) or `kernel FEATURE` / `host THING` (this machine cannot have it).

use std::io::Write;

/// Records that the calling test skips (all or part of itself) and why.
pub fn record(kind: &str, reason: &str) {
    println!("SKIPPED: {reason} ({kind})");
    if let Some(path) = std::env::var_os("BERTH_SKIP_LOG") {
        append(std::path::Path::new(&path), kind, reason);
    }
}

fn append(path: &std::path::Path, kind: &str, reason: &str) {
    let line = format!("{kind}\t{}\n", reason.replace(['\n', '\t'], " "));
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        // One write: lines of tests running in parallel do not interleave.
        let _ = f.write_all(line.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn skips_are_appended_one_line_each() {
        let d = crate::mount::tests::TempDir::new("skip");
        let log = d.path().join("skips");
        super::append(&log, "package gcc", "escape probes: gcc is missing");
        super::append(&log, "kernel x", "two\nlines\tand a tab");
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "package gcc\tescape probes: gcc is missing\nkernel x\ttwo lines and a tab\n"
        );
    }
}
