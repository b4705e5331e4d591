//! What a suite hands back, and the Markdown rendering of a whole run.

use std::fmt::Write;

use serde_json::Value;

use crate::stats::Summary;

pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "| {} |", self.header.join(" | "));
        let _ = writeln!(
            s,
            "|{}",
            self.header.iter().map(|_| "---|").collect::<String>()
        );
        for r in &self.rows {
            let _ = writeln!(s, "| {} |", r.join(" | "));
        }
        s
    }
}

pub struct Section {
    pub title: String,
    pub table: Table,
    pub notes: Vec<String>,
}

/// One suite's results: tables for people, every raw sample for machines.
pub struct SuiteOutput {
    pub name: &'static str,
    pub sections: Vec<Section>,
    pub raw: Value,
}

pub fn ms(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// `12.3 ± 0.4`
pub fn mean_ci(s: &Summary) -> String {
    if s.ci95.is_finite() {
        format!("{} ± {}", ms(s.mean), ms(s.ci95))
    } else {
        ms(s.mean)
    }
}

pub fn kib(k: u64) -> String {
    if k >= 1024 {
        format!("{k} KiB ({:.2} MiB)", k as f64 / 1024.0)
    } else {
        format!("{k} KiB")
    }
}

pub fn bytes(b: u64) -> String {
    format!("{b} B ({:.2} MiB)", b as f64 / (1024.0 * 1024.0))
}

/// `ok` or `OVER` against a budget (lower is better).
pub fn verdict(value: f64, budget: f64) -> &'static str {
    if value <= budget {
        "ok"
    } else {
        "OVER"
    }
}

/// How one suite of a run ended.
pub struct SuiteResult {
    pub name: &'static str,
    /// Its tables and raw samples (None when it failed or did not run).
    pub output: Option<SuiteOutput>,
    /// Why it has no output: its error, or that the run was interrupted before it.
    pub error: Option<String>,
    /// The run was interrupted while this suite ran: its numbers are what completed.
    pub interrupted: bool,
    /// Its charts: (as the report links it, the file).
    pub svgs: Vec<(String, std::path::PathBuf)>,
}

/// The report: the environment, `notes` (interruption, leftovers cleaned), every suite.
pub fn render(
    env_rows: &[(String, String)],
    suites: &[SuiteResult],
    notes: &[String],
    interrupted: bool,
    footer: &str,
) -> String {
    let mut s = format!(
        "# berth-bench report{}\n\n",
        if interrupted { " (interrupted)" } else { "" }
    );
    for n in notes {
        let _ = writeln!(s, "- {n}");
    }
    if !notes.is_empty() {
        s.push('\n');
    }
    let mut t = Table::new(&["environment", "value"]);
    for (k, v) in env_rows {
        t.row(vec![k.clone(), v.replace('|', "\\|")]);
    }
    s.push_str(&t.markdown());
    for r in suites {
        let mark = if r.interrupted { " (interrupted)" } else { "" };
        let _ = writeln!(s, "\n## {}{mark}\n", r.name);
        if let Some(e) = &r.error {
            let _ = writeln!(s, "**{e}**\n");
        }
        for (link, file) in &r.svgs {
            let stem = file.file_stem().and_then(|f| f.to_str()).unwrap_or(r.name);
            let _ = writeln!(s, "![{stem} chart]({link})\n");
        }
        for sec in r.output.iter().flat_map(|o| &o.sections) {
            let _ = writeln!(s, "### {}\n", sec.title);
            s.push_str(&sec.table.markdown());
            if !sec.notes.is_empty() {
                s.push('\n');
                for n in &sec.notes {
                    let _ = writeln!(s, "- {n}");
                }
            }
            s.push('\n');
        }
    }
    s.push_str(footer);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_shape() {
        let mut t = Table::new(&["a", "b"]);
        t.row(vec!["1".into(), "2".into()]);
        assert_eq!(t.markdown(), "| a | b |\n|---|---|\n| 1 | 2 |\n");
    }

    #[test]
    fn number_formats() {
        assert_eq!(ms(123.456), "123");
        assert_eq!(ms(12.345), "12.3");
        assert_eq!(ms(1.2345), "1.23");
        assert_eq!(kib(512), "512 KiB");
        assert_eq!(kib(2048), "2048 KiB (2.00 MiB)");
        assert_eq!(verdict(1.0, 1.0), "ok");
        assert_eq!(verdict(1.1, 1.0), "OVER");
    }
}
