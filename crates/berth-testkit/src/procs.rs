//! What /proc says about processes: which there are, their arguments and environment. The
//! sweep finds a sandbox's processes by the sandbox directory they name.

use std::path::Path;

/// The pids listed in /proc.
pub fn pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn nul_list(path: &str) -> Vec<String> {
    std::fs::read(path)
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The arguments of a process; empty when it is gone (or a zombie).
pub fn cmdline(pid: i32) -> Vec<String> {
    nul_list(&format!("/proc/{pid}/cmdline"))
}

/// The environment of a process, `KEY=value` each.
pub fn environ(pid: i32) -> Vec<String> {
    nul_list(&format!("/proc/{pid}/environ"))
}

/// Whether any of the process's arguments is `dir` or lies below it.
pub fn mentions(args: &[String], dir: &Path) -> bool {
    let d = dir.to_string_lossy();
    let below = format!("{d}/");
    args.iter()
        .any(|a| a == d.as_ref() || a.contains(&below) || a.ends_with(&format!("={d}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_is_component_wise() {
        let d = Path::new("/tmp/berth-bench-12");
        let a = |s: &str| vec![s.to_string()];
        assert!(mentions(&a("/tmp/berth-bench-12/run/lxc"), d));
        assert!(mentions(
            &a("BERTH_CONFIG=/tmp/berth-bench-12/berth.toml"),
            d
        ));
        assert!(mentions(&a("/tmp/berth-bench-12"), d));
        assert!(!mentions(&a("/tmp/berth-bench-123/run"), d));
    }

    #[test]
    fn own_process() {
        let me = std::process::id() as i32;
        assert!(pids().contains(&me));
        assert!(!cmdline(me).is_empty());
    }
}
