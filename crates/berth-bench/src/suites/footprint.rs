//! Footprint: what berth costs in flash and RAM (DESIGN.md decision 1).
//!
//! - stripped size of `berth` (and of `berth-bench`);
//! - the daemon's memory idle and with [`DENSITY`] running containers: VmRSS (every resident
//!   page, shared library pages included) and private = Private_Clean + Private_Dirty of
//!   smaps_rollup (what the daemon alone holds), plus Pss;
//! - the per-container cost beyond the package's own processes: the shim (`berth-shim`) and
//!   the LXC monitor (`berth-monitor`, the shim's child); the container's init (the
//!   monitor's child) and its payload belong to the package and are shown apart.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{Ctx, Suite};
use crate::procfs::{self, Mem};
use crate::report::{bytes, kib, ms, verdict, Section, SuiteOutput, Table};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::stats::summarize;
use crate::util::{bail, progress, run, sleep, which, Result};

/// Containers running at once for the "with containers" measurements.
pub const DENSITY: usize = 10;

/// The device build's (SPECIFICATION.md, Size: DESIGN.md decision 1's 1.5 MiB as issues 15
/// and 16 raised it): 1.875 MiB.
const BUDGET_BINARY: u64 = 1_966_080;
const BUDGET_IDLE_PRIVATE_KIB: u64 = 1024;
const BUDGET_IDLE_RSS_KIB: u64 = 4096;
const BUDGET_PER_CONTAINER_KIB: u64 = 1024;

#[derive(Default)]
pub struct Footprint;

fn pkg_name(i: usize) -> String {
    format!("idle-{i}")
}

/// Size of the file as it is and after `strip -s` (None without binutils).
fn sizes(path: &Path, work: &Path) -> Result<(u64, Option<u64>)> {
    let size = std::fs::metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    let stripped = which("strip").and_then(|strip| {
        let out = work.join(format!("stripped-{}", path.file_name()?.to_string_lossy()));
        run(Command::new(strip).arg("-s").arg("-o").arg(&out).arg(path)).ok()?;
        let n = std::fs::metadata(&out).ok()?.len();
        let _ = std::fs::remove_file(&out);
        Some(n)
    });
    Ok((size, stripped))
}

/// One container's processes, found from its shim.
struct PerContainer {
    name: String,
    shim: Mem,
    monitor: Mem,
    package: Mem,
    package_procs: usize,
}

fn mem_json(m: &Mem) -> Value {
    serde_json::to_value(m).unwrap_or(Value::Null)
}

/// The shims of this sandbox (comm `berth-shim`, our lxcpath on their command line), each
/// with its monitor child and the package's processes below it.
fn containers(lxcpath: &Path) -> Result<Vec<PerContainer>> {
    let mut out = Vec::new();
    for pid in procfs::pids() {
        if procfs::comm(pid).as_deref() != Some("berth-shim") {
            continue;
        }
        let args = procfs::cmdline(pid);
        if !procfs::mentions(&args, lxcpath) {
            continue;
        }
        let name = args.get(2).cloned().unwrap_or_default();
        let monitors: Vec<i32> = procfs::children(pid)
            .into_iter()
            .filter(|&c| procfs::comm(c).as_deref() == Some("berth-monitor"))
            .collect();
        let [monitor] = monitors[..] else {
            bail!(
                "shim {pid} of {name} has {} monitor processes, expected one",
                monitors.len()
            );
        };
        let mut package = Mem::default();
        let mut package_procs = 0;
        for init in procfs::children(monitor) {
            for p in procfs::tree(init) {
                package = package + procfs::mem(p)?;
                package_procs += 1;
            }
        }
        out.push(PerContainer {
            name,
            shim: procfs::mem(pid)?,
            monitor: procfs::mem(monitor)?,
            package,
            package_procs,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn avg(v: &[PerContainer], f: impl Fn(&PerContainer) -> u64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    (v.iter().map(&f).sum::<u64>() as f64 / v.len() as f64).round() as u64
}

impl Suite for Footprint {
    fn name(&self) -> &'static str {
        "footprint"
    }

    fn prepare(&mut self, _sb: &Sandbox) -> Result<Vec<PkgSpec>> {
        Ok((0..DENSITY)
            .map(|i| PkgSpec {
                name: pkg_name(i),
                argv: ["/bin/busybox", "sleep", "1000000"]
                    .into_iter()
                    .map(String::from)
                    .collect(),
                files: Vec::new(),
                busybox: true,
                host_base: false,
            })
            .collect())
    }

    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput> {
        let sb = &mut *ctx.sb;
        let settle = Duration::from_millis(if ctx.quick { 500 } else { 1500 });
        // Idle is sampled after the memory guard's 5 s safety-net wake-up (when PSI is there),
        // so it includes whatever a wake-up faults back in, as on a device left alone.
        let idle_settle = Duration::from_millis(6000);
        let daemon = sb.daemon_pid().ok_or("the daemon is not running")?;

        progress!("footprint: binary sizes");
        let (berth_size, berth_stripped) = sizes(&sb.berth, &sb.dir)?;
        let me = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
        let (bench_size, bench_stripped) = sizes(&me, &sb.dir)?;
        let device = match device_build(&sb.berth) {
            Some(p) => {
                let (size, stripped) = sizes(&p, &sb.dir)?;
                Some((p, size, stripped))
            }
            None => None,
        };

        progress!("footprint: daemon idle");
        // A freshly built binary's pages are still dirty in the page cache and would show as
        // the daemon's private dirty memory: write them back first.
        let _ = std::process::Command::new("sync").status();
        sleep(idle_settle)?;
        let idle = procfs::mem(daemon)?;
        // Its repository is file://: libcurl (http:// and https:// only) must not be mapped.
        let maps = std::fs::read_to_string(format!("/proc/{daemon}/maps")).unwrap_or_default();
        if maps.contains("libcurl") {
            return Err("the idle daemon, whose repository is file://, maps libcurl: it must load it only for an http:// or https:// download".into());
        }

        progress!("footprint: starting {DENSITY} containers");
        let start_ms = timed_all(sb, "start")?;
        sleep(settle)?;
        let busy = procfs::mem(daemon)?;
        let per = running_containers(sb)?;

        progress!("footprint: stopping them");
        let stop_ms = timed_all(sb, "stop")?;
        sleep(idle_settle)?;
        let after = procfs::mem(daemon)?;
        Ok(report(&Measured {
            berth: (sb.berth.clone(), berth_size, berth_stripped),
            device,
            bench: (me, bench_size, bench_stripped),
            daemon,
            idle,
            busy,
            after,
            per,
            start_ms,
            stop_ms,
            settle,
            idle_settle,
        }))
    }
}

/// Everything the suite measured.
struct Measured {
    /// Path, size, stripped size of `berth` and of `berth-bench`.
    berth: (PathBuf, u64, Option<u64>),
    /// The same of the device build, where one was built beside it.
    device: Option<(PathBuf, u64, Option<u64>)>,
    bench: (PathBuf, u64, Option<u64>),
    daemon: i32,
    /// The daemon idle, with [`DENSITY`] containers running, after they stopped.
    idle: Mem,
    busy: Mem,
    after: Mem,
    per: Vec<PerContainer>,
    start_ms: Vec<f64>,
    stop_ms: Vec<f64>,
    /// How long memory settled with the containers running, and idle.
    settle: Duration,
    idle_settle: Duration,
}

/// `berth start` (or `stop`) of every idle package, one after another: ms each.
fn timed_all(sb: &Sandbox, verb: &str) -> Result<Vec<f64>> {
    let mut times = Vec::new();
    for i in 0..DENSITY {
        crate::util::check_interrupted()?;
        let t = Instant::now();
        sb.ok(&[verb, &pkg_name(i)])?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(times)
}

/// The per-container processes of the sandbox's [`DENSITY`] running containers.
fn running_containers(sb: &Sandbox) -> Result<Vec<PerContainer>> {
    let lxcpath = &sb.cfg.paths.lxcpath;
    let per = containers(lxcpath)?;
    if per.len() != DENSITY {
        bail!(
            "found {} berth-shim processes under {}, expected {DENSITY}",
            per.len(),
            lxcpath.display()
        );
    }
    Ok(per)
}

/// The device build beside a `berth` of target/release: scripts/test.sh builds it into
/// target/device (`--no-default-features`).
fn device_build(berth: &Path) -> Option<PathBuf> {
    let p = berth.parent()?.parent()?.join("device/release/berth");
    p.exists().then_some(p)
}

fn sizes_table(m: &Measured) -> Table {
    let (_, berth_size, berth_stripped) = m.berth;
    let (_, bench_size, bench_stripped) = m.bench;
    let mut sizes_t = Table::new(&["binary", "size", "budget", "verdict"]);
    match &m.device {
        Some((_, size, stripped)) => {
            let eff = stripped.unwrap_or(*size);
            sizes_t.row(vec![
                "`berth`, device build (no vendor tools), stripped".into(),
                bytes(eff),
                "≤ 1.875 MiB".into(),
                verdict(eff as f64, BUDGET_BINARY as f64).into(),
            ]);
        }
        None => sizes_t.row(vec![
            "`berth`, device build (no vendor tools)".into(),
            "not built here: cargo build --release -p berth --no-default-features --target-dir target/device".into(),
            "≤ 1.875 MiB".into(),
            String::new(),
        ]),
    }
    let berth_eff = berth_stripped.unwrap_or(berth_size);
    sizes_t.row(vec![
        "`berth` with the vendor tools, stripped".into(),
        bytes(berth_eff),
        "(vendors' builds)".into(),
        String::new(),
    ]);
    sizes_t.row(vec![
        "`berth` with the vendor tools, as built".into(),
        bytes(berth_size),
        String::new(),
        String::new(),
    ]);
    sizes_t.row(vec![
        "`berth-bench`, stripped".into(),
        bytes(bench_stripped.unwrap_or(bench_size)),
        "(not on the device)".into(),
        String::new(),
    ]);
    sizes_t
}

fn memory_table(m: &Measured) -> Table {
    let mut mem_t = Table::new(&[
        "daemon",
        "RSS",
        "private",
        "private dirty",
        "PSS",
        "threads",
        "budget",
        "verdict",
    ]);
    let row = |label: &str, m: &Mem, budget: &str, v: &str| {
        vec![
            label.to_string(),
            kib(m.rss_kib),
            kib(m.private_kib),
            kib(m.private_dirty_kib),
            kib(m.pss_kib),
            m.threads.to_string(),
            budget.to_string(),
            v.to_string(),
        ]
    };
    let idle = &m.idle;
    let idle_ok =
        if idle.private_kib <= BUDGET_IDLE_PRIVATE_KIB && idle.rss_kib <= BUDGET_IDLE_RSS_KIB {
            "ok"
        } else {
            "OVER"
        };
    mem_t.row(row(
        "idle (packages installed, nothing running)",
        idle,
        "private ≤ 1 MiB, RSS ≤ 4 MiB",
        idle_ok,
    ));
    mem_t.row(row(
        &format!("{DENSITY} containers running"),
        &m.busy,
        "",
        "",
    ));
    mem_t.row(row("after stopping them", &m.after, "", ""));
    mem_t
}

/// berth's cost per container (shim + monitor): (RSS, private, PSS) KiB, mean.
fn berth_cost(per: &[PerContainer]) -> (u64, u64, u64) {
    (
        avg(per, |c| c.shim.rss_kib + c.monitor.rss_kib),
        avg(per, |c| c.shim.private_kib + c.monitor.private_kib),
        avg(per, |c| c.shim.pss_kib + c.monitor.pss_kib),
    )
}

fn per_container_table(m: &Measured) -> Table {
    let per = &m.per;
    let (cost_rss, cost_private, cost_pss) = berth_cost(per);
    let mut per_t = Table::new(&[
        "per container (mean of 10)",
        "RSS",
        "private",
        "PSS",
        "budget",
        "verdict",
    ]);
    per_t.row(vec![
        "berth's cost: shim + LXC monitor".into(),
        kib(cost_rss),
        kib(cost_private),
        kib(cost_pss),
        "≤ 1 MiB (private and PSS)".into(),
        if cost_private <= BUDGET_PER_CONTAINER_KIB && cost_pss <= BUDGET_PER_CONTAINER_KIB {
            "ok".into()
        } else {
            "OVER".into()
        },
    ]);
    let part = |label: &str, f: &dyn Fn(&PerContainer) -> Mem| {
        vec![
            label.to_string(),
            kib(avg(per, |c| f(c).rss_kib)),
            kib(avg(per, |c| f(c).private_kib)),
            kib(avg(per, |c| f(c).pss_kib)),
            String::new(),
            String::new(),
        ]
    };
    per_t.row(part("  `berth-shim`", &|c| c.shim));
    per_t.row(part(
        "  `berth-monitor` (liblxc, forked from the shim)",
        &|c| c.monitor,
    ));
    per_t.row(part(
        "the package's own processes (init.lxc + busybox sleep), for scale",
        &|c| c.package,
    ));
    let (busy, idle) = (&m.busy, &m.idle);
    per_t.row(vec![
        format!("daemon growth with {DENSITY} running, per container"),
        kib(busy.rss_kib.saturating_sub(idle.rss_kib) / DENSITY as u64),
        kib(busy.private_kib.saturating_sub(idle.private_kib) / DENSITY as u64),
        kib(busy.pss_kib.saturating_sub(idle.pss_kib) / DENSITY as u64),
        String::new(),
        String::new(),
    ]);
    per_t
}

fn density_table(m: &Measured) -> Table {
    let mut dens_t = Table::new(&["density", "median ms", "p10", "p90", "total s"]);
    for (label, v) in [
        ("berth start (one after another)", &m.start_ms),
        ("berth stop", &m.stop_ms),
    ] {
        if let Some(s) = summarize(v) {
            dens_t.row(vec![
                format!("{label}, {DENSITY} containers"),
                ms(s.median),
                ms(s.p10),
                ms(s.p90),
                format!("{:.2}", v.iter().sum::<f64>() / 1000.0),
            ]);
        }
    }
    dens_t
}

fn raw_json(m: &Measured) -> Value {
    let (cost_rss, cost_private, cost_pss) = berth_cost(&m.per);
    let binary = |(path, size, stripped): &(PathBuf, u64, Option<u64>)| json!({"path": path.display().to_string(), "size": size, "stripped": stripped});
    json!({
        "berth": binary(&m.berth),
        "berth_device": m.device.as_ref().map(binary),
        "berth_bench": binary(&m.bench),
        "daemon": {"pid": m.daemon, "idle": mem_json(&m.idle), "running": mem_json(&m.busy), "after_stop": mem_json(&m.after)},
        "containers": m.per.iter().map(|c| json!({
            "name": c.name, "shim": mem_json(&c.shim), "monitor": mem_json(&c.monitor),
            "package": mem_json(&c.package), "package_processes": c.package_procs,
        })).collect::<Vec<_>>(),
        "per_container_mean_kib": {"rss": cost_rss, "private": cost_private, "pss": cost_pss},
        "start_ms": m.start_ms, "stop_ms": m.stop_ms,
        "budgets": {"berth_stripped_bytes": BUDGET_BINARY, "idle_private_kib": BUDGET_IDLE_PRIVATE_KIB,
                    "idle_rss_kib": BUDGET_IDLE_RSS_KIB, "per_container_kib": BUDGET_PER_CONTAINER_KIB},
    })
}

fn report(m: &Measured) -> SuiteOutput {
    SuiteOutput {
        name: "footprint",
        sections: vec![
            Section {
                title: "binary size".into(),
                table: sizes_table(m),
                notes: vec!["stripped with `strip -s` (the release profile already strips: both sizes agree then)".into()],
            },
            Section {
                title: "daemon memory".into(),
                table: memory_table(m),
                notes: vec![
                    "RSS = VmRSS of /proc/PID/status (counts shared library pages: libc, liblxc); private = Private_Clean + Private_Dirty of /proc/PID/smaps_rollup; PSS = shared pages divided among their users".into(),
                    "private dirty = heap, stacks and written data; the rest of private is clean file pages no other process maps (while no shim runs, that includes the berth binary's own text)".into(),
                    "the daemon's repository is file://: libcurl is not mapped (the suite fails if it is)".into(),
                    format!(
                        "idle and after stopping: measured {} s after the daemon last did something (past the memory guard's 5 s wake-up); with containers running: {} s",
                        m.idle_settle.as_secs_f64(),
                        m.settle.as_secs_f64()
                    ),
                ],
            },
            Section {
                title: "per-container cost".into(),
                table: per_container_table(m),
                notes: vec![
                    format!("{DENSITY} packages each running `busybox sleep`; per container: `berth-shim` plus its child `berth-monitor` (the LXC monitor); the container's init (child of the monitor) and the payload belong to the package"),
                    "shim and monitor share most pages (the monitor is a fork of the shim, both map the same berth binary and liblxc), so their RSS adds shared pages twice; private and PSS are the marginal cost".into(),
                ],
            },
            Section {
                title: "density".into(),
                table: density_table(m),
                notes: Vec::new(),
            },
        ],
        raw: raw_json(m),
    }
}
