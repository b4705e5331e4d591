//! The machine a run happened on, recorded with every report.

use std::process::Command;

use serde_json::{json, Value};

use crate::procfs::field;
use crate::util::{output, utc_now, which};

pub struct Environment {
    pub rows: Vec<(String, String)>,
    pub json: Value,
}

fn first_line(cmd: &mut Command) -> Option<String> {
    let o = output(cmd).ok()?;
    let text = if o.stdout.is_empty() {
        o.stderr
    } else {
        o.stdout
    };
    String::from_utf8_lossy(&text)
        .lines()
        .next()
        .map(|l| l.trim().to_string())
}

fn cpu_model() -> String {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    // x86 says "model name", MIPS "cpu model", older ARM kernels "Hardware" / "Processor".
    for key in ["model name", "cpu model", "Hardware", "Processor"] {
        if let Some(v) = text
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_once(':'))
        {
            return v.1.trim().to_string();
        }
    }
    "unknown".into()
}

/// `v1`, `v2` or `hybrid (v1 + unified)`, from the file systems mounted under /sys/fs/cgroup.
pub fn cgroup_layout() -> String {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut v1 = 0;
    let mut v2_root = false;
    let mut v2_unified = false;
    for l in text.lines() {
        let Some((pre, post)) = l.split_once(" - ") else {
            continue;
        };
        let mp = pre.split(' ').nth(4).unwrap_or("");
        let fstype = post.split(' ').next().unwrap_or("");
        match fstype {
            "cgroup" => v1 += 1,
            "cgroup2" if mp == "/sys/fs/cgroup" => v2_root = true,
            "cgroup2" => v2_unified = true,
            _ => {}
        }
    }
    match (v1, v2_root, v2_unified) {
        (0, true, _) => "v2 (unified at /sys/fs/cgroup)".into(),
        (n, _, true) if n > 0 => {
            format!("hybrid ({n} v1 hierarchies + cgroup2 at /sys/fs/cgroup/unified)")
        }
        (n, _, _) if n > 0 => format!("v1 ({n} hierarchies)"),
        _ => "none mounted".into(),
    }
}

pub fn collect(berth: &std::path::Path) -> Environment {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_mib = field(&meminfo, "MemTotal").unwrap_or(0) / 1024;
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let liblxc = berth_sys::lxc::version();
    let lxc_tools = first_line(Command::new("lxc-execute").arg("--version"));
    let runc = which("runc").and_then(|r| first_line(Command::new(r).arg("--version")));
    let berth_version = first_line(Command::new(berth).arg("version"));
    let distro = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("PRETTY_NAME=")
                    .map(|v| v.trim_matches('"').to_string())
            })
        });
    let date = utc_now();
    let cpu = cpu_model();
    let cgroups = cgroup_layout();
    let arch = std::env::consts::ARCH;
    let rows = vec![
        ("date (UTC)".into(), date.clone()),
        ("kernel".into(), format!("{kernel} ({arch})")),
        ("distribution".into(), distro.clone().unwrap_or_default()),
        ("CPU".into(), format!("{cpu}, {cores} cores online")),
        ("memory".into(), format!("{mem_mib} MiB")),
        ("cgroups".into(), cgroups.clone()),
        ("liblxc".into(), liblxc.clone()),
        (
            "runc".into(),
            runc.clone().unwrap_or_else(|| "not installed".into()),
        ),
        ("berth".into(), berth_version.clone().unwrap_or_default()),
    ];
    let json = json!({
        "date": date, "kernel": kernel, "arch": arch, "distribution": distro,
        "cpu_model": cpu, "cores": cores, "mem_total_mib": mem_mib,
        "cgroup_layout": cgroups, "liblxc": liblxc, "lxc_tools": lxc_tools,
        "runc": runc, "berth": berth_version, "berth_path": berth.display().to_string(),
    });
    Environment { rows, json }
}

#[cfg(test)]
mod tests {
    #[test]
    fn layout_is_named() {
        assert!(!super::cgroup_layout().is_empty());
    }
}
