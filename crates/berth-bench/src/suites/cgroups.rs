//! `cgroups`: cgroup v1 against cgroup v2, in the shape of the published study (shared
//! reference, part E: LXC 4.0, DPDK L2 forwarding on a real-time kernel; the same latency up
//! to p99, v1 worse at p99.9 and in the worst case, v1 +2.4 % instructions and twice the CPU
//! migrations), with what this kind of device runs: a request/response workload — sockperf
//! ping-pong, 64-byte UDP messages, from the host across berth's bridge and the container's
//! veth into a berth container whose CPU is capped — at a fixed rate and as fast as
//! possible.
//!
//! Both sides run in the same VM kernel (`scripts/vm/`, Debian 12's), booted once with the v1
//! hierarchies and once with cgroup2 only, so that emulation, where the VM is emulated, costs
//! both the same. Per rate and side: p50, p99, p99.9 and the maximum round trip (sockperf's
//! own percentiles), context switches and CPU migrations (system-wide from `perf stat -a`'s
//! software counters, and the server's from /proc), instructions where the CPU has counters.
//! Then the time of `berth start` of an idle package on each side: LXC's monitor moves itself
//! into its cgroup on every start, and the kernel makes that move wait for an RCU grace
//! period (docs/benchmarks/README.md, "The start path").

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use super::net::package;
use super::{Ctx, Suite};
use crate::report::{mean_ci, Section, SuiteOutput, Table};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::stats::summarize;
use crate::util::{progress, which, Context, Result};
use crate::vm::{self, Accel, Boot, BootOpts};

pub struct Cgroups;

const PORT: u16 = 11111;
const MSG: u32 = 64;
const CPU_MAX: &str = "50%";

/// How much the suite measures.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// sockperf's `--mps`: a fixed rate, then as fast as possible.
    pub rates: Vec<String>,
    pub runs: usize,
    pub secs: u32,
    pub start_runs: usize,
}

impl Plan {
    pub fn new(quick: bool, runs_given: Option<usize>) -> Plan {
        Plan {
            rates: vec!["1000".into(), "max".into()],
            runs: runs_given.unwrap_or(if quick { 2 } else { 5 }),
            secs: if quick { 3 } else { 20 },
            start_runs: if quick { 3 } else { 10 },
        }
    }
}

/// The two sides, in the report's order.
pub const SIDES: [&str; 2] = ["v1", "v2"];

/// A third boot for the start times only: cgroup v2 mounted with `favordynmods` (Linux 6.0),
/// under which no cgroup move waits for a grace period.
pub const DYNMODS: &str = "v2-favordynmods";

/// What one ping-pong run gives (`VMBENCH rr` lines).
pub const FIELDS: &[(&str, &str, &str)] = &[
    ("p50_us", "p50", "µs"),
    ("p99_us", "p99", "µs"),
    ("p999_us", "p99.9", "µs"),
    ("max_us", "max", "µs"),
    ("avg_us", "mean", "µs"),
    ("context_switches", "context switches (system)", ""),
    ("cpu_migrations", "CPU migrations (system)", ""),
    (
        "server_voluntary_switches",
        "server: voluntary switches",
        "",
    ),
    (
        "server_involuntary_switches",
        "server: involuntary switches",
        "",
    ),
    ("server_migrations", "server: migrations", ""),
    ("instructions", "instructions (system)", ""),
    ("messages", "messages sent", ""),
];

/// Every run's values: (side, rate) → field → samples.
#[derive(Default, Debug)]
pub struct Results {
    pub rr: Vec<(String, String, Value)>,
    pub start: Vec<(String, Value)>,
    /// Boots that failed, and lines that did not parse.
    pub errors: Vec<String>,
}

impl Results {
    /// The samples of `field` at (side, rate); nulls (no such counter) left out.
    pub fn samples(&self, side: &str, rate: &str, field: &str) -> Vec<f64> {
        self.rr
            .iter()
            .filter(|(s, r, _)| s == side && r == rate)
            .filter_map(|(_, _, v)| v[field].as_f64())
            .collect()
    }

    fn start_samples(&self, side: &str, field: &str, scale: f64) -> Vec<f64> {
        self.start
            .iter()
            .filter(|(s, _)| s == side)
            .filter_map(|(_, v)| v[field].as_f64().map(|x| x * scale))
            .collect()
    }

    /// Takes the `VMBENCH` lines of one boot.
    pub fn take(&mut self, side: &str, lines: &[String]) {
        for l in lines {
            match vm::bench_line(l) {
                // A run that failed in the guest (the others went on).
                Some((k, what, run, v)) if v.get("error").is_some() => self.errors.push(format!(
                    "cgroup {side}: {k} {what} run {run}: {}",
                    v["error"].as_str().unwrap_or("failed")
                )),
                Some((k, rate, _, v)) if k == "rr" => self.rr.push((side.into(), rate, v)),
                Some((k, _, _, v)) if k == "start" => self.start.push((side.into(), v)),
                Some(_) => {}
                None => self.errors.push(format!(
                    "cgroup {side}: a result line that does not parse: {}",
                    l.chars().take(120).collect::<String>()
                )),
            }
        }
    }
}

impl Suite for Cgroups {
    fn name(&self) -> &'static str {
        "cgroups"
    }

    fn prepare(&mut self, _sb: &Sandbox) -> Result<Vec<PkgSpec>> {
        Ok(Vec::new())
    }

    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput> {
        let p = Plan::new(ctx.quick, ctx.runs_given);
        let missing = [
            ("sockperf", "sockperf"),
            ("iperf3", "iperf3"),
            ("perl", "perl-base"),
        ]
        .iter()
        .find(|(t, _)| which(t).is_none())
        .map(|(t, pkg)| format!("{t} is missing: install the Debian package {pkg}"))
        .or_else(vm::unavailable);
        if let Some(why) = missing {
            return Ok(SuiteOutput {
                name: "cgroups",
                sections: Vec::new(),
                raw: json!({ "skipped": why }),
            });
        }
        let scripts = vm::scripts()?;
        let image = vm::image(&scripts)?;
        let accel = vm::accel(&image);
        let payload = payload(ctx.sb, &scripts, &p)?;
        let mut res = Results::default();
        for side in SIDES.into_iter().chain([DYNMODS]) {
            crate::util::check_interrupted()?;
            progress!(
                "cgroups: booting the VM with cgroup {side} ({})",
                accel.name()
            );
            std::fs::write(payload.join("bench.conf"), conf(&p, side)).context("bench.conf")?;
            let slow: u32 = if accel == Accel::Kvm { 1 } else { 3 };
            let rates = if side == DYNMODS { 0 } else { p.rates.len() };
            let budget = 120
                + (rates * p.runs) as u32 * (p.secs + 3) * slow
                + p.start_runs as u32 * 5 * slow;
            // A boot that fails (a kernel without favordynmods, a guest that breaks off)
            // leaves the other sides' figures standing; the report says why.
            // What a boot that broke off said before is kept.
            let mut lines = Vec::new();
            let booted = boot_side(
                ctx.sb, &scripts, &image, &accel, &payload, side, budget, &mut lines,
            );
            res.take(side, &lines);
            if let Err(e) = booted {
                crate::util::check_interrupted()?;
                res.errors.push(format!("cgroup {side}: {e}"));
            }
        }
        Ok(report(&p, &accel, &res))
    }
}

/// One boot: its `VMBENCH` lines go to `lines` as they come.
#[allow(clippy::too_many_arguments)]
fn boot_side(
    sb: &Sandbox,
    scripts: &Path,
    image: &Path,
    accel: &Accel,
    payload: &Path,
    side: &str,
    budget: u32,
    lines: &mut Vec<String>,
) -> Result<()> {
    let mut boot = Boot::start(
        &format!("cgroups {side}"),
        scripts,
        image,
        accel,
        &sb.berth,
        payload,
        &BootOpts {
            cgroup: if side == "v1" { "v1" } else { "v2" },
            append: if side == DYNMODS {
                "berth.cgroup2_opts=favordynmods"
            } else {
                ""
            },
            timeout_s: budget * 3,
            ..BootOpts::default()
        },
    )?;
    boot.until("VMTEST PASS", Duration::from_secs(budget as u64 * 2), |l| {
        if l.starts_with("VMBENCH ") {
            lines.push(l.to_string());
        }
    })?;
    let rc = boot.finish(Duration::from_secs(60))?;
    if rc != 0 {
        return Err(format!("the boot exited with {rc}").into());
    }
    Ok(())
}

/// The guest's settings for one side.
fn conf(p: &Plan, side: &str) -> String {
    format!(
        "CGROUP={side}\nRATES=\"{}\"\nRUNS={}\nSECS={}\nSTART_RUNS={}\nPORT={PORT}\nMSG={MSG}\n",
        if side == DYNMODS {
            String::new()
        } else {
            p.rates.join(" ")
        },
        p.runs,
        p.secs,
        p.start_runs
    )
}

/// The VM's payload: the guest script, and a repository signed by a key of its own (made
/// with berth's vendor tools in a sandbox of its own) with `rr` (sockperf's UDP server, the
/// host's binary on the guest's libraries: both are Debian 12; network isolated; CPU capped)
/// and `idle` (a sleeping busybox, for the start times).
fn payload(main: &Sandbox, scripts: &Path, p: &Plan) -> Result<std::path::PathBuf> {
    let sb = main.nested("cgvm", "5s", "")?;
    let rr = package(
        "rr",
        &format!("exec /usr/bin/sockperf server -i 0.0.0.0 -p {PORT} >/dev/null\n"),
        "mode = \"isolated\"",
        true,
    )?
    .table(&format!("[resources]\ncpu_max = \"{CPU_MAX}\""));
    sb.pack_pkg(&rr)?;
    let idle = PkgSpec {
        name: "idle".into(),
        argv: ["/bin/busybox", "sleep", "100000"]
            .map(String::from)
            .to_vec(),
        files: Vec::new(),
        busybox: true,
        host_base: false,
    };
    sb.pack(&idle)?;
    sb.build_repo()?;
    let out = main.dir.join("cg-vm");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(out.join("keys")).context("create the cgroups payload")?;
    crate::util::run(
        std::process::Command::new("cp")
            .arg("-a")
            .arg(&sb.repo)
            .arg(out.join("repo")),
    )?;
    for k in std::fs::read_dir(sb.dir.join("keys")).context("the sandbox's keys")? {
        let k = k.context("a key")?.path();
        std::fs::copy(&k, out.join("keys").join(k.file_name().unwrap_or_default()))
            .context("copy a key")?;
    }
    std::fs::copy(scripts.join("cgroups/guest.sh"), out.join("run.sh"))
        .context("copy scripts/vm/cgroups/guest.sh")?;
    std::fs::write(out.join("bench.conf"), conf(p, "v2")).context("bench.conf")?;
    Ok(out)
}

/// The ratio of two independent samples' means and its 95 % CI (first-order: the relative
/// errors add in quadrature; NaN with a single sample on either side).
pub fn ratio_of_means(a: &[f64], b: &[f64]) -> Option<(f64, f64)> {
    let (a, b) = (summarize(a)?, summarize(b)?);
    if b.mean == 0.0 {
        return None;
    }
    let r = a.mean / b.mean;
    let rel = |s: &crate::stats::Summary| {
        if s.mean != 0.0 {
            s.ci95 / s.mean
        } else {
            f64::NAN
        }
    };
    Some((r, r * (rel(&a).powi(2) + rel(&b).powi(2)).sqrt()))
}

/// `1.07 ± 0.03 (v1 7 % higher)`, or within noise; over v2, per run (runs are independent:
/// the ratio of the means, its CI from both sides' spread).
pub fn v1_over_v2(v1: &[f64], v2: &[f64]) -> String {
    let Some((r, ci)) = ratio_of_means(v1, v2) else {
        return "–".into();
    };
    if !ci.is_finite() {
        return format!("{r:.3} (one run: no CI)");
    }
    let v = if (r - ci..=r + ci).contains(&1.0) {
        "within noise".to_string()
    } else if r > 1.0 {
        format!("v1 {:.0} % higher", (r - 1.0) * 100.0)
    } else {
        format!("v1 {:.0} % lower", (1.0 - r) * 100.0)
    };
    format!("{r:.3} ± {ci:.3} ({v})")
}

fn report(p: &Plan, accel: &Accel, res: &Results) -> SuiteOutput {
    let label = accel.label();
    let mut sections = Vec::new();
    for rate in &p.rates {
        let mut t = Table::new(&["quantity", "cgroup v1", "cgroup v2", "v1 / v2"]);
        for (field, name, unit) in FIELDS {
            let (a, b) = (
                res.samples("v1", rate, field),
                res.samples("v2", rate, field),
            );
            let cell = |v: &[f64]| match summarize(v) {
                Some(s) => mean_ci(&s),
                None if *field == "instructions" => "not counted (no PMU)".into(),
                None => "–".into(),
            };
            let name = if unit.is_empty() {
                name.to_string()
            } else {
                format!("{name} ({unit})")
            };
            t.row(vec![name, cell(&a), cell(&b), v1_over_v2(&a, &b)]);
        }
        let mut notes = vec![format!(
            "sockperf ping-pong, {MSG}-byte UDP messages, {} for {} s, {} runs per side (mean ± 95 % CI over runs); round trips (--full-rtt); the server in a berth container (network isolated: veth and bridge), cpu_max {CPU_MAX}; the client in the guest's root namespace",
            if rate == "max" { "as fast as possible (--mps=max)".to_string() } else { format!("at {rate} messages/s") },
            p.secs,
            p.runs
        )];
        if let Some(l) = &label {
            notes.push(format!("every figure is {l}: both sides are emulated the same way, the same kernel booted twice"));
        }
        sections.push(Section {
            title: format!(
                "cgroup v1 vs v2, {}",
                if rate == "max" {
                    "as fast as possible".to_string()
                } else {
                    format!("{rate} messages/s")
                }
            ),
            table: t,
            notes,
        });
    }
    let mut st = Table::new(&[
        "quantity",
        "cgroup v1",
        "cgroup v2",
        "v1 / v2",
        "v2, favordynmods",
        "favordynmods / v2",
    ]);
    for (field, name, scale) in [
        ("cli_us", "`berth start` (CLI wall time, ms)", 1e-3),
        ("start_ms", "shim spawned → RUNNING (ms)", 1.0),
    ] {
        let (a, b) = (
            res.start_samples("v1", field, scale),
            res.start_samples("v2", field, scale),
        );
        let c = res.start_samples(DYNMODS, field, scale);
        let cell = |v: &[f64]| {
            summarize(v)
                .map(|s| mean_ci(&s))
                .unwrap_or_else(|| "–".into())
        };
        let fav = v1_over_v2(&c, &b).replace("v1 ", "favordynmods ");
        st.row(vec![
            name.into(),
            cell(&a),
            cell(&b),
            v1_over_v2(&a, &b),
            cell(&c),
            fav,
        ]);
    }
    sections.push(Section {
        title: "berth start of an idle package, each side".into(),
        table: st,
        notes: vec![format!(
            "{} starts per side; on each, LXC's monitor moves itself into its cgroup (v1: one move per hierarchy), and the first move after a quiet spell waits for an RCU grace period; a third boot mounts cgroup2 with favordynmods (Linux 6.0), under which no move waits",
            p.start_runs
        )],
    });
    // The errors under the first table (there is always one: the start times').
    if let Some(first) = sections.first_mut() {
        first
            .notes
            .extend(res.errors.iter().map(|e| format!("error: {e}")));
    }
    let mut rr = Vec::new();
    for (side, rate, v) in &res.rr {
        rr.push(json!({"cgroup": side, "rate": rate, "values": v}));
    }
    let start: Vec<Value> = res
        .start
        .iter()
        .map(|(s, v)| json!({"cgroup": s, "values": v}))
        .collect();
    let series: Vec<Value> = p
        .rates
        .iter()
        .map(|rate| {
            let groups: Vec<crate::chart::ModeBars> = ["p50_us", "p99_us", "p999_us", "max_us"]
                .iter()
                .map(|f| {
                    (
                        FIELDS
                            .iter()
                            .find(|x| x.0 == *f)
                            .map_or(*f, |x| x.1)
                            .to_string(),
                        SIDES
                            .iter()
                            .map(|s| (format!("cgroup {s}"), res.samples(s, rate, f)))
                            .collect(),
                    )
                })
                .collect();
            crate::chart::series_json(&format!("round trip, {rate} msg/s"), "µs", &groups)
        })
        .collect();
    SuiteOutput {
        name: "cgroups",
        sections,
        raw: json!({
            "accel": accel.name(), "emulated": label.is_some(), "label": label,
            "accel_reason": match accel { Accel::Tcg(w) => json!(w), Accel::Kvm => Value::Null },
            "plan": {"rates": p.rates, "runs": p.runs, "secs": p.secs, "start_runs": p.start_runs,
                     "message_bytes": MSG, "cpu_max": CPU_MAX},
            "rr": rr, "start": start, "series": series, "errors": res.errors,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_samples() {
        let mut r = Results::default();
        r.take(
            "v1",
            &[
                r#"VMBENCH rr 1000 1 {"p50_us":50.5,"p999_us":90,"instructions":null}"#.into(),
                r#"VMBENCH rr 1000 2 {"p50_us":49.5,"p999_us":110,"instructions":null}"#.into(),
                r#"VMBENCH rr max 1 {"p50_us":40}"#.into(),
                r#"VMBENCH start idle 1 {"cli_us":12000,"start_ms":9.5}"#.into(),
                "VMTEST PASS x".into(),
            ],
        );
        r.take(
            "v2",
            &[r#"VMBENCH rr 1000 1 {"p50_us":50,"p999_us":80}"#.into()],
        );
        assert_eq!(r.samples("v1", "1000", "p50_us"), vec![50.5, 49.5]);
        assert_eq!(r.samples("v1", "max", "p50_us"), vec![40.0]);
        assert!(r.samples("v1", "1000", "instructions").is_empty());
        assert_eq!(r.start_samples("v1", "cli_us", 1e-3), vec![12.0]);
        let out = report(&Plan::new(true, None), &Accel::Tcg("test".into()), &r);
        assert_eq!(out.sections.len(), 3);
        let md = out.sections[0].table.markdown();
        assert!(md.contains("not counted (no PMU)"), "{md}");
        assert!(out.sections[0].notes[1].contains(vm::EMULATED));
        assert_eq!(out.raw["rr"].as_array().unwrap().len(), 4);
    }

    #[test]
    fn ratios_of_independent_means() {
        assert_eq!(
            v1_over_v2(&[100.0, 100.0], &[50.0, 50.0]),
            "2.000 ± 0.000 (v1 100 % higher)"
        );
        assert!(v1_over_v2(&[90.0, 110.0], &[95.0, 105.0]).ends_with("(within noise)"));
        assert_eq!(v1_over_v2(&[1.0], &[2.0]), "0.500 (one run: no CI)");
        assert_eq!(v1_over_v2(&[], &[2.0]), "–");
        assert!(conf(&Plan::new(true, None), "v1").contains("CGROUP=v1\nRATES=\"1000 max\""));
    }
}
