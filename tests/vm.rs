//! cgroup v2 and AppArmor for real: berth on a pure cgroup v2 kernel with AppArmor, in a QEMU
//! VM (software emulation). Five boots: the cgroup v2 checks, the same with memory and pids
//! controllers disabled, the AppArmor checks (scripts/vm/apparmor/), a clock that jumps
//! (scripts/vm/clock/: the guest's clock, which the test sets, from 1970 to 2026, 2030 and
//! back to 2025) and the slab module (scripts/vm/slab/).
//!
//! scripts/vm/build.sh builds (or finds in its cache) Debian 12's kernel and a Debian 12 root
//! file system with LXC whose init mounts cgroup2 only; scripts/vm/cgroup-v2/payload.sh signs
//! a test repository with this berth; scripts/vm/run.sh boots the VM with berth and the
//! repository on a second disk and runs scripts/vm/cgroup-v2/guest.sh there. Each guest check
//! prints `VMTEST PASS|FAIL NAME DETAIL` on the serial console; this test parses them.
//!
//! When QEMU, debootstrap or the image cannot be had (no network to the Debian mirror), the
//! test fails, naming the reason, unless BERTH_VM_SKIP=1: then it prints "SKIPPED: …". A
//! guest that boots but fails a check always fails the test.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Every check the guest script makes; each must pass.
const CHECKS: &[&str] = &[
    "pure-v2",
    "check",
    "daemon",
    "group-cpu.max",
    "group-pids.max",
    "group-memory.max",
    "root-subtree-control",
    "install",
    "start-hog",
    "parent-subtree-control",
    "hog-cpu.max",
    "hog-cpu.weight",
    "hog-memory.max",
    "hog-memory.low",
    "hog-pids.max",
    "budget-memory.max",
    "budget-pids.max",
    "hog-lxc-config",
    "budget-leaves",
    "budget-no-process",
    "cpu-quota-20",
    "limit-applied",
    "limit-cpu.max",
    "limit-memory.max",
    "limit-memory.low",
    "limit-pids.max",
    "cpu-quota-50",
    "limit-no-restart",
    "stats",
    "stop-hog-cgroup",
    "oom-in-cgroup",
    "oom-nothing-outside",
    "oom-container-lives",
    "fork-bomb",
    "bomb-cpuset.cpus",
    "bomb-cpuset.cpus.effective",
    "host-responsive",
    "helper-in-budget",
    "governor-lowered",
    "governor-matches-file",
    "governor-holds",
    "governor-restored",
    "guard-kill",
    "guard-before-oom",
    "guard-nothing-outside",
    "core-in-archive",
    "remove",
    "no-cgroups-left",
];

/// The second boot, with `cgroup_disable=memory,pids` on the kernel command line.
const DEGRADED_CHECKS: &[&str] = &[
    "pure-v2",
    "check",
    "daemon",
    "missing-noted",
    "group-cpu.max",
    "group-no-memory",
    "start-hog",
    "hog-lxc-config",
    "start-noted",
    "hog-cpu.max",
    "cpu-quota-20",
    "limit-applied",
    "limit-cpu.max",
    "stats",
    "remove",
    "no-cgroups-left",
];

/// The clock boot (scripts/vm/clock/, docs/time.md): a device without a real-time clock
/// boots in 1970; NTP sets it to 2026, a later clock to 2030, the operator back to 2025.
const CLOCK_CHECKS: &[&str] = &[
    "clock-1970",
    "daemon",
    "update-1970",
    "start-1970",
    "forward-answers",
    "forward-uptime",
    "boot-not-confirmed-by-the-jump",
    "forward-health",
    "forward-one-catch-up",
    "forward-next-minute",
    "index-age-unknown",
    "boot-confirmed",
    "update-2026",
    "report-2026",
    "index-expired-refused",
    "expired-nothing-lost",
    "back-answers",
    "back-uptime",
    "back-schedule-follows",
    "back-index-age",
    "back-report-kept-newest",
    "update-2025",
    "remove",
];

/// The AppArmor boot (scripts/vm/apparmor/): berth's generated profile loaded, enforced on an
/// unprivileged (`probe`) and a privileged trusted (`trusted`) container, probed from inside,
/// denials in the kernel log, unloaded at `berth remove`.
const APPARMOR_CHECKS: &[&str] = &[
    "apparmor-on",
    "check",
    "daemon",
    "install",
    "probe-start",
    "probe-lxc-config",
    "probe-loaded",
    "probe-confined",
    "probe-uid-map",
    "probe-data-write",
    "probe-tmp-write",
    "probe-proc-read",
    "probe-sys-read",
    "trusted-start",
    "trusted-lxc-config",
    "trusted-loaded",
    "trusted-confined",
    "trusted-uid-map",
    "trusted-data-write",
    "trusted-tmp-write",
    "trusted-proc-read",
    "trusted-sys-read",
    "probe-sysrq-write",
    "probe-proc-sys-write",
    "probe-sys-write",
    "probe-mount",
    "probe-kcore-read",
    "probe-attr-write",
    "probe-firmware-read",
    "trusted-sysrq-write",
    "trusted-proc-sys-write",
    "trusted-sys-write",
    "trusted-mount",
    "trusted-kcore-read",
    "trusted-attr-write",
    "trusted-firmware-read",
    "firmware-host",
    "probe-denied-logged-attr",
    "trusted-denied-logged-attr",
    "trusted-denied-logged-kcore",
    "probe-stop",
    "probe-unloaded",
    "trusted-stop",
    "trusted-unloaded",
];

/// The slab reserve module (issue 20, kmod/berth-slab), built on the host against the VM
/// kernel's headers: loaded, configured, its bad requests refused, cleared, unloaded.
const SLAB_CHECKS: &[&str] = &[
    "slab-insmod",
    "slab-set",
    "slab-skbuff-rise",
    "slab-kmalloc-rise",
    "slab-held",
    "slab-refuse-unknown",
    "slab-refuse-cap",
    "slab-refuse-page",
    "slab-refuse-syntax",
    "slab-refuse-number",
    "slab-refuse-twice",
    "slab-refuse-module-cache",
    "slab-state-read-only",
    "slab-clear",
    "slab-released",
    "slab-rmmod",
    "slab-insmod-caches",
    "slab-insmod-refused",
    "slab-insmod-cap-refused",
    "slab-berth-loads",
    "slab-berth-stats",
    "slab-berth-check",
    "kmem-v2-own-limit",
    "kmem-v2-released",
    "slab-berth-rmmod",
    "slab-flood-tracing",
    "slab-flood-setup",
    "slab-flood-compare",
    "slab-flood-container-setup",
    "slab-flood-container-compare",
    "slab-flood-unloaded",
    "slab-no-kernel-warning",
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The VM cannot be had here: fail loudly, or skip loudly with BERTH_VM_SKIP=1.
fn unavailable(reason: &str) {
    if std::env::var("BERTH_VM_SKIP").as_deref() == Ok("1") {
        berth_sys::skip::record("host vm", &format!("cgroup v2 VM test: {reason}"));
        return;
    }
    panic!("cgroup v2 VM test cannot run: {reason}\n(set BERTH_VM_SKIP=1 to skip it loudly)");
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[test]
fn cgroup_v2_for_real_in_a_vm() {
    let uid = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
    if uid.ok() != Some(0) {
        return unavailable("needs root (debootstrap, chroot, mkfs)");
    }
    for (tool, pkg) in [
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("debootstrap", "debootstrap"),
        ("mkfs.ext4", "e2fsprogs"),
        ("xz", "xz-utils"),
        ("zstd", "zstd"),
        ("mksquashfs", "squashfs-tools"),
        ("busybox", "busybox-static"),
        ("gcc", "gcc"),
        ("make", "make"),
    ] {
        if which(tool).is_none() {
            return unavailable(&format!("missing {tool}: apt-get install {pkg}"));
        }
    }
    let root = repo_root();
    let scripts = root.join("scripts/vm");

    let t = Instant::now();
    let out = Command::new("bash")
        .arg(scripts.join("build.sh"))
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/vm/build.sh");
    let build_time = t.elapsed();
    if !out.status.success() {
        return unavailable(&format!(
            "scripts/vm/build.sh failed ({}):\n{}",
            out.status,
            tail(&stderr(&out), 30)
        ));
    }
    let image = stdout(&out).lines().last().unwrap_or("").to_string();
    let manifest = std::fs::read_to_string(Path::new(&image).join("manifest.txt"))
        .unwrap_or_else(|e| panic!("{image}/manifest.txt: {e}"));
    let cached = stderr(&out).contains("cached:");

    println!(
        "image: {image} ({})",
        if cached { "cached" } else { "built" }
    );
    println!("{}", manifest.trim_end());

    let tmp = TempDir::new("vm");
    let payload = build_payload(&scripts, "cgroup-v2", &tmp.path("payload"));

    boot(&scripts, &payload, &image, "", CHECKS, 600);
    boot(
        &scripts,
        &payload,
        &image,
        "cgroup_disable=memory,pids",
        DEGRADED_CHECKS,
        600,
    );

    let payload = build_payload(&scripts, "apparmor", &tmp.path("apparmor"));
    boot(&scripts, &payload, &image, "", APPARMOR_CHECKS, 600);

    let payload = build_payload(&scripts, "clock", &tmp.path("clock"));
    boot(&scripts, &payload, &image, "", CLOCK_CHECKS, 400);

    // The module for the image's own kernel (build.sh's manifest names it).
    // "kernel linux-image-6.1.0-56-amd64 (6.1.0-56-amd64)"
    let kver = manifest
        .lines()
        .find_map(|l| l.strip_prefix("kernel "))
        .and_then(|k| k.split_once('(')?.1.strip_suffix(')'))
        .map(str::to_string);
    let payload = tmp.path("slab");
    let mut cmd = Command::new("bash");
    cmd.arg(scripts.join("slab/payload.sh"))
        .arg(&payload)
        .env("BERTH_BIN", BERTH);
    if let Some(k) = &kver {
        cmd.arg(k);
    }
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    assert!(
        out.status.success(),
        "slab/payload.sh (the module built against the VM kernel's headers): {}{}",
        stdout(&out),
        stderr(&out)
    );
    // The long boot: about 7 minutes under TCG, more as the host is loaded.
    boot(&scripts, &payload, &image, "", SLAB_CHECKS, 900);
    println!("image build (scripts/vm/build.sh): {build_time:.1?}");
}

/// Runs `scripts/vm/WHICH/payload.sh OUT` with this berth, which must succeed; returns OUT.
fn build_payload(scripts: &Path, which: &str, out: &Path) -> PathBuf {
    let run = Command::new("bash")
        .arg(scripts.join(which).join("payload.sh"))
        .arg(out)
        .env("BERTH_BIN", BERTH)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{which}/payload.sh: {}{}",
        stdout(&run),
        stderr(&run)
    );
    out.to_path_buf()
}

/// Boots the VM with `append` on the kernel command line, runs the payload, and asserts that
/// exactly `checks` reported, all passed. `timeout`: seconds from boot to power-off
/// (`BERTH_VM_TIMEOUT` raises it).
fn boot(scripts: &Path, payload: &Path, image: &str, append: &str, checks: &[&str], timeout: u32) {
    let run = || {
        let t = Instant::now();
        let out = Command::new("bash")
            .arg(scripts.join("run.sh"))
            .arg(payload)
            .env("BERTH_BIN", BERTH)
            .env("BERTH_VM_IMAGE", image)
            .env("BERTH_VM_APPEND", append)
            .env(
                "BERTH_VM_TIMEOUT",
                std::env::var("BERTH_VM_TIMEOUT")
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .map_or(timeout, |t: u32| t.max(timeout))
                    .to_string(),
            )
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (t.elapsed(), stdout(&out), out)
    };
    let (mut run_time, mut console, mut out) = run();
    // Under TCG the emulator runs on this shared machine's CPUs: when the host starves it,
    // the guest's kernel reports every vCPU stuck and the run times out with no check failed.
    // That is the host, not berth: said so, and booted once more.
    let starved = |c: &str| {
        !c.contains("VMTEST EXIT")
            && !c.contains("VMTEST FAIL")
            && (c.contains("soft lockup") || c.contains("rcu_preempt kthread starved"))
    };
    if starved(&console) {
        println!(
            "the emulator was starved by the host (guest soft lockups, no check failed): booting once more\n{}",
            tail(&console, 8)
        );
        (run_time, console, out) = run();
    }

    // VMTEST PASS|FAIL NAME DETAIL
    let mut results: Vec<(bool, String, String)> = Vec::new();
    for l in console.lines() {
        // Kernel messages or terminal escapes may precede the marker on the console line.
        let Some(i) = l.find("VMTEST ") else {
            continue;
        };
        let rest = &l[i + "VMTEST ".len()..];
        let (verdict, rest) = rest.split_once(' ').unwrap_or((rest, ""));
        if verdict != "PASS" && verdict != "FAIL" {
            continue;
        }
        let (name, detail) = rest.split_once(' ').unwrap_or((rest, ""));
        results.push((verdict == "PASS", name.to_string(), detail.to_string()));
    }
    let line_of = |key: &str| {
        console
            .lines()
            .find_map(|l| l.find(key).map(|i| l[i..].to_string()))
            .unwrap_or_else(|| format!("(no {key} line)"))
    };

    println!(
        "\nVM boot, kernel arguments: {}",
        if append.is_empty() {
            "(defaults)"
        } else {
            append
        }
    );
    println!("\n| check | result | detail |\n|---|---|---|");
    for (pass, name, detail) in &results {
        let d: String = detail.chars().take(200).collect();
        println!(
            "| {name} | {} | {} |",
            if *pass { "PASS" } else { "FAIL" },
            d.replace('|', "/")
        );
    }
    println!();
    println!("{}", line_of("VMTEST BOOTED"));
    println!("{}", line_of("VMTEST EXIT"));
    println!("{}", line_of("VMHOST"));
    println!("VM run (scripts/vm/run.sh, boot to power-off): {run_time:.1?}");

    let failed: Vec<&(bool, String, String)> = results.iter().filter(|r| !r.0).collect();
    assert!(
        console.contains("VMTEST BOOTED"),
        "the VM did not boot ({}):\n{}\n{}",
        out.status,
        tail(&console, 60),
        tail(&stderr(&out), 20)
    );
    // The failed checks come last, after the console's tail: a log kept only in part (its
    // head and its tail) still names them.
    assert!(
        failed.is_empty(),
        "console:\n{}\n{} check(s) failed in the VM:\n{}",
        tail(&console, 80),
        failed.len(),
        failed
            .iter()
            .map(|r| format!("FAIL {} {}", r.1, r.2))
            .collect::<Vec<_>>()
            .join("\n")
    );
    for c in checks {
        assert!(
            results.iter().any(|r| r.0 && r.1 == *c),
            "check {c} did not report in the VM:\n{}",
            tail(&console, 80)
        );
    }
    assert_eq!(
        results.len(),
        checks.len(),
        "unexpected checks: {:?}",
        results.iter().map(|r| &r.1).collect::<Vec<_>>()
    );
    assert!(
        out.status.success(),
        "run.sh: {}\n{}",
        out.status,
        tail(&console, 30)
    );
}
