//! security: what seccomp and user namespaces cost (issue 5), in the same run.
//!
//! - a syscall-heavy workload: a static C loop of `syscall(SYS_getpid)`, ns per call, on
//!   the host, in `lxc-execute` containers on the host's root without and with berth's
//!   seccomp profile (the difference is the filter alone), and in berth containers:
//!   unprivileged (the default: user namespace + seccomp) and privileged (trusted);
//! - start time: `berth start` of the unprivileged and the privileged package (the start
//!   time the daemon reports), and the whole `lxc-execute` of a payload that exits at once,
//!   without and with the seccomp profile (what loading the filter adds).
//!
//! Peers are interleaved round by round, so machine load drifts hit all of them alike.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{Ctx, Suite};
use crate::report::{mean_ci, Section, SuiteOutput, Table};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::stats::summarize;
use crate::util::{bail, output, poll, progress, run, which, Context, Result};

const UNPRIV: &str = "bench-sec";
const PRIV: &str = "bench-sec-priv";
const BIN: &str = "bin/getpid-loop";

const SOURCE: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) syscall(SYS_getpid);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("ns_per_call %.2f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (double)n);
    return 0;
}
"#;

#[derive(Default)]
pub struct Security {
    bin: Option<PathBuf>,
}

fn ns_per_call(text: &str) -> Result<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix("ns_per_call ")?.trim().parse().ok())
        .ok_or_else(|| format!("no ns_per_call in {text:?}").into())
}

impl Security {
    fn spec(&self, name: &str, calls: u64) -> Result<PkgSpec> {
        let bin = self.bin.as_ref().ok_or("the getpid loop was not built")?;
        Ok(PkgSpec {
            name: name.into(),
            argv: vec![format!("/{BIN}"), calls.to_string()],
            files: vec![(
                BIN.into(),
                std::fs::read(bin).context("read getpid-loop")?,
                0o755,
            )],
            busybox: false,
            host_base: false,
        })
    }
}

/// Runs one berth container to completion: (start ms the daemon reports, ns per call).
fn berth_round(sb: &Sandbox, name: &str) -> Result<(f64, f64)> {
    let v = sb.json(&["start", name])?;
    let start_ms = v["start_ms"].as_f64().unwrap_or(f64::NAN);
    let text = poll(
        Duration::from_secs(60),
        Duration::from_millis(20),
        &format!("{name} to print its result"),
        || {
            let o = sb.cmd(&["logs", name]).output().ok()?;
            let s = String::from_utf8_lossy(&o.stdout).to_string();
            s.contains("ns_per_call").then_some(s)
        },
    )?;
    // It exits by itself; wait until the daemon has noticed, so the next start is clean.
    poll(
        Duration::from_secs(30),
        Duration::from_millis(20),
        &format!("{name} to stop"),
        || {
            let v = sb.json(&["status", name]).ok()?;
            (v["containers"][0]["state"] != "running").then_some(())
        },
    )?;
    let last = text.lines().rev().find(|l| l.contains("ns_per_call"));
    Ok((start_ms, ns_per_call(last.unwrap_or(""))?))
}

/// `lxc-execute` of the loop on the host's root file system: (whole ms, ns per call).
fn lxc_round(dir: &Path, bin: &Path, seccomp: bool, calls: u64) -> Result<(f64, f64)> {
    let name = if seccomp {
        "sec-filter"
    } else {
        "sec-nofilter"
    };
    let conf = dir.join(format!("{name}.conf"));
    let t0 = Instant::now();
    let out = output(
        Command::new("lxc-execute")
            .args(["-n", name, "-P"])
            .arg(dir)
            .arg("-f")
            .arg(&conf)
            .arg("--")
            .arg(bin)
            .arg(calls.to_string()),
    )?;
    let whole = t0.elapsed().as_secs_f64() * 1000.0;
    if !out.status.success() {
        bail!(
            "lxc-execute {name} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok((whole, ns_per_call(&String::from_utf8_lossy(&out.stdout))?))
}

impl Suite for Security {
    fn name(&self) -> &'static str {
        "security"
    }

    fn prepare(&mut self, sb: &Sandbox) -> Result<Vec<PkgSpec>> {
        let gcc = which("gcc").ok_or("security: gcc is needed (Debian packages gcc, libc6-dev)")?;
        let work = sb.dir.join("security");
        std::fs::create_dir_all(&work).context("create security work dir")?;
        let src = work.join("getpid.c");
        let bin = work.join("getpid-loop");
        std::fs::write(&src, SOURCE).context("write getpid.c")?;
        run(Command::new(gcc)
            .args(["-static", "-O2", "-s", "-o"])
            .arg(&bin)
            .arg(&src))?;
        self.bin = Some(bin);
        // The privileged peer is added in run(): it must be marked trusted in the index.
        Ok(vec![self.spec(UNPRIV, 1)?])
    }

    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput> {
        let rounds = ctx.runs_given.unwrap_or(if ctx.quick { 3 } else { 10 });
        let calls: u64 = if ctx.quick { 1_000_000 } else { 5_000_000 };
        let sb = &*ctx.sb;
        let bin = self.bin.clone().ok_or("the getpid loop was not built")?;
        // Both berth peers loop `calls` times (reinstalled with that argv), the privileged one
        // marked trusted.
        for name in [UNPRIV, PRIV] {
            sb.pack(&self.spec(name, calls)?)?;
        }
        std::fs::write(sb.repo.join("trusted.txt"), format!("{PRIV}\n")).context("trusted.txt")?;
        sb.ok(&[
            "repo",
            "build",
            &sb.repo.display().to_string(),
            "--key",
            &sb.dir.join("vendor.sec").display().to_string(),
        ])?;
        sb.ok(&["update"])?;
        sb.ok(&["install", UNPRIV, PRIV])?;
        for (name, privileged) in [(UNPRIV, false), (PRIV, true)] {
            let v = sb.json(&["inspect", name])?;
            if v["privileged"] != privileged {
                bail!("security: {name} should run privileged = {privileged}: {v}");
            }
        }
        let dir = sb.dir.join("security");
        let profile = dir.join("seccomp");
        std::fs::write(&profile, berth_core::security::seccomp_profile(&[]))
            .context("write the seccomp profile")?;
        for (name, seccomp) in [("sec-nofilter", false), ("sec-filter", true)] {
            let mut c = format!(
                "lxc.net.0.type = none\nlxc.console.path = none\nlxc.cgroup.dir.container = {p}/{name}\nlxc.cgroup.dir.monitor = {p}.monitor/{name}\n",
                p = sb.cgroup_parent
            );
            if seccomp {
                c.push_str(&format!("lxc.seccomp.profile = {}\n", profile.display()));
            }
            std::fs::write(dir.join(format!("{name}.conf")), c).context("write lxc config")?;
        }

        let peers = [
            "host",
            "lxc-execute, no seccomp",
            "lxc-execute, seccomp",
            "berth unprivileged (userns + seccomp)",
            "berth privileged (seccomp)",
        ];
        let mut ns: Vec<Vec<f64>> = vec![Vec::new(); peers.len()];
        let mut start: Vec<Vec<f64>> = vec![Vec::new(); 4];
        for r in 0..rounds + 1 {
            progress!("security: round {}/{}", r, rounds);
            let host = run(Command::new(&bin).arg(calls.to_string()))?;
            let a = lxc_round(&dir, &bin, false, calls)?;
            let b = lxc_round(&dir, &bin, true, calls)?;
            let a1 = lxc_round(&dir, &bin, false, 1)?;
            let b1 = lxc_round(&dir, &bin, true, 1)?;
            let u = berth_round(sb, UNPRIV)?;
            let p = berth_round(sb, PRIV)?;
            if r == 0 {
                continue; // warm-up
            }
            for (i, v) in [ns_per_call(&host)?, a.1, b.1, u.1, p.1]
                .into_iter()
                .enumerate()
            {
                ns[i].push(v);
            }
            for (i, v) in [a1.0, b1.0, u.0, p.0].into_iter().enumerate() {
                start[i].push(v);
            }
        }

        let host_mean = summarize(&ns[0]).map(|s| s.mean).unwrap_or(f64::NAN);
        let mut t1 = Table::new(&["where", "ns per getpid (mean ± 95 % CI)", "vs host"]);
        for (i, p) in peers.iter().enumerate() {
            let s = summarize(&ns[i]).ok_or("no samples")?;
            t1.row(vec![
                p.to_string(),
                mean_ci(&s),
                format!("{:+.1} %", (s.mean / host_mean - 1.0) * 100.0),
            ]);
        }
        let names = [
            "lxc-execute whole run, no seccomp",
            "lxc-execute whole run, seccomp",
            "berth start, unprivileged (userns + seccomp)",
            "berth start, privileged (seccomp)",
        ];
        let mut t2 = Table::new(&["start", "ms (mean ± 95 % CI)", "median"]);
        for (i, n) in names.iter().enumerate() {
            let s = summarize(&start[i]).ok_or("no samples")?;
            t2.row(vec![n.to_string(), mean_ci(&s), format!("{:.2}", s.median)]);
        }
        let raw: Value = json!({
            "calls": calls,
            "rounds": rounds,
            "ns_per_call": peers.iter().zip(&ns).map(|(p, v)| json!({"peer": p, "samples": v})).collect::<Vec<_>>(),
            "start_ms": names.iter().zip(&start).map(|(p, v)| json!({"peer": p, "samples": v})).collect::<Vec<_>>(),
        });
        Ok(SuiteOutput {
            name: "security",
            sections: vec![
                Section {
                    title: format!("syscall cost: {calls} getpid calls per run, {rounds} rounds"),
                    table: t1,
                    notes: vec![
                        "lxc-execute peers run on the host's root: the difference between them is the seccomp filter alone (berth's default profile, 54 rules).".into(),
                    ],
                },
                Section {
                    title: "start time".into(),
                    table: t2,
                    notes: vec![
                        "berth start: the time the daemon reports from the shim's spawn to RUNNING; lxc-execute: the whole process, payload exiting at once.".into(),
                    ],
                },
            ],
            raw,
        })
    }
}
