//! supervise: what the supervisor of issue 15 takes to act, in its own sandbox and daemon.
//!
//! - restart latency: a payload is killed (SIGKILL, at a time the harness knows) under
//!   `[restart] policy = "always"` with no wait (`delay = "0ms"`); the time until the new
//!   run is up (its init in `berth status`) is detection + release + start. Beside it, the
//!   same run's `berth start` time, so the supervisor's own share shows;
//! - hung payload: a busybox httpd checked by `[health] http` (interval 1 s, timeout 500 ms,
//!   2 retries) is frozen with SIGSTOP: its socket still accepts, its answers stop. The time
//!   until the daemon declares it unhealthy (2 failed checks) is set beside the bound the
//!   manifest implies, interval × retries + timeout;
//! - the crash archives these events left: their sizes.

use std::time::{Duration, Instant};

use berth_testkit::Pkg;
use serde_json::{json, Value};

use super::{Ctx, Suite};
use crate::report::{bytes, ms, Section, SuiteOutput, Table};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::stats::summarize;
use crate::util::{poll, progress, Result};

const CRASH: &str = "sv-crash";
const HUNG: &str = "sv-hung";
const INTERVAL_MS: f64 = 1000.0;
const TIMEOUT_MS: f64 = 500.0;
const RETRIES: f64 = 2.0;

pub struct Supervise;

fn packages() -> Vec<Pkg> {
    let mut crash = Pkg::new(CRASH, "1", &["/bin/busybox", "sh", "/run.sh"])
        .file("run.sh", b"echo up\nexec /bin/busybox sleep 100000\n")
        .table("[restart]\npolicy = \"always\"\ndelay = \"0ms\"\nmax_retries = 1000\n");
    crash.description = "berth-bench payload".into();
    crash.applets = &[];
    let mut hung = Pkg::new(HUNG, "1", &["/bin/busybox", "sh", "/run.sh"])
        .file(
            "run.sh",
            b"echo up\n/bin/busybox mkdir -p /tmp/www\necho ok > /tmp/www/ok\nexec /bin/busybox httpd -f -p 127.0.0.1:8080 -h /tmp/www\n",
        )
        .table(
            "[network]\nmode = \"none\"\n[restart]\ndelay = \"0ms\"\nmax_retries = 1000\n\
             [health]\nhttp = \"8080/ok\"\ninterval = \"1s\"\ntimeout = \"500ms\"\nretries = 2\n",
        );
    hung.description = "berth-bench payload".into();
    hung.applets = &[];
    vec![crash, hung]
}

/// The payload (init's one child) of a running container, with the init.
pub fn payload(sb: &Sandbox, name: &str) -> Result<(i64, i32)> {
    let c = &sb.json(&["status", name])?["containers"][0];
    let init = c["init_pid"]
        .as_i64()
        .ok_or_else(|| format!("{name} is not running: {c}"))?;
    let kids = std::fs::read_to_string(format!("/proc/{init}/task/{init}/children"))
        .map_err(|e| format!("{name}: children of init {init}: {e}"))?;
    let pid = kids
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| format!("{name}: init {init} has no child"))?;
    Ok((init, pid))
}

/// Polls `berth status NAME` until `f` holds; returns the status and when it held.
fn until(
    sb: &Sandbox,
    name: &str,
    what: &str,
    f: impl Fn(&Value) -> bool,
) -> Result<(Value, Instant)> {
    poll(
        Duration::from_secs(30),
        Duration::from_millis(2),
        what,
        || {
            let c = sb.json(&["status", name]).ok()?["containers"][0].clone();
            f(&c).then(|| (c, Instant::now()))
        },
    )
}

impl Suite for Supervise {
    fn name(&self) -> &'static str {
        "supervise"
    }

    fn prepare(&mut self, _sb: &Sandbox) -> Result<Vec<PkgSpec>> {
        Ok(Vec::new())
    }

    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput> {
        let runs = ctx.runs_given.unwrap_or(if ctx.quick { 5 } else { 20 });
        let mut sb = ctx
            .sb
            .nested("supervise", "2s", crate::sandbox::UNCAPPED_POLICY)?;
        for p in packages() {
            sb.pack_pkg(&p)?;
        }
        sb.build_repo()?;
        sb.start_daemon()?;
        sb.ok(&["update"])?;
        sb.ok(&["install", CRASH, HUNG])?;
        let start = sb.json(&["start", CRASH])?;
        let start_ms = start["start_ms"].as_f64().unwrap_or(f64::NAN);

        let mut restart = Vec::new();
        for i in 0..runs {
            progress!("supervise: restart {}/{runs}", i + 1);
            let (init, pid) = payload(&sb, CRASH)?;
            let t0 = Instant::now();
            berth_sys::process::kill(pid, libc::SIGKILL).map_err(|e| format!("kill {pid}: {e}"))?;
            let (_, t1) = until(&sb, CRASH, "the restarted run", |c| {
                c["state"] == "running" && c["init_pid"].as_i64().is_some_and(|p| p != init)
            })?;
            restart.push((t1 - t0).as_secs_f64() * 1e3);
        }

        sb.ok(&["start", HUNG])?;
        let mut detect = Vec::new();
        let hung_runs = if ctx.quick { 2 } else { 5 };
        for i in 0..hung_runs {
            progress!("supervise: hung payload {}/{hung_runs}", i + 1);
            until(&sb, HUNG, "a healthy run", |c| {
                c["health"]["status"] == "healthy"
            })?;
            let (init, pid) = payload(&sb, HUNG)?;
            let t0 = Instant::now();
            berth_sys::process::kill(pid, libc::SIGSTOP).map_err(|e| format!("stop {pid}: {e}"))?;
            let (_, t1) = until(&sb, HUNG, "declared unhealthy", |c| {
                c["init_pid"].as_i64() != Some(init)
                    || c["health"]["failures"].as_f64() >= Some(RETRIES)
            })?;
            detect.push((t1 - t0).as_secs_f64() * 1e3);
            until(&sb, HUNG, "the hung run replaced", |c| {
                c["state"] == "running" && c["init_pid"].as_i64().is_some_and(|p| p != init)
            })?;
        }

        let reports = sb.json(&["report", "list"])?;
        let sizes: Vec<f64> = reports["reports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["size"].as_f64())
            .collect();
        let _ = sb.ok(&["stop", "-t", "1", CRASH]);
        let _ = sb.ok(&["stop", "-t", "1", HUNG]);
        Ok(output(start_ms, &restart, &detect, &sizes))
    }
}

fn output(start_ms: f64, restart: &[f64], detect: &[f64], sizes: &[f64]) -> SuiteOutput {
    let bound = INTERVAL_MS * RETRIES + TIMEOUT_MS;
    let mut t = Table::new(&["what", "n", "median ms", "p99 ms", "max ms", "note"]);
    let row = |t: &mut Table, what: &str, xs: &[f64], note: String| {
        let s = summarize(xs);
        let p99 = p99(xs);
        t.row(vec![
            what.into(),
            xs.len().to_string(),
            s.as_ref().map_or("–".into(), |s| ms(s.median)),
            ms(p99),
            s.as_ref().map_or("–".into(), |s| ms(s.max)),
            note,
        ]);
    };
    row(
        &mut t,
        "payload killed → restarted and running (delay 0)",
        restart,
        format!("`berth start` of the same package: {} ms", ms(start_ms)),
    );
    row(
        &mut t,
        "payload frozen → declared unhealthy (http probe)",
        detect,
        format!("bound: interval × retries + timeout = {} ms", ms(bound)),
    );
    let mut a = Table::new(&["crash archives", "n", "median", "max"]);
    let s = summarize(sizes);
    a.row(vec![
        "sizes (gzip tar)".into(),
        sizes.len().to_string(),
        s.as_ref().map_or("–".into(), |s| bytes(s.median as u64)),
        s.as_ref().map_or("–".into(), |s| bytes(s.max as u64)),
    ]);
    SuiteOutput {
        name: "supervise",
        sections: vec![
            Section {
                title: "supervision: restart latency and hung-payload detection".into(),
                table: t,
                notes: vec![
                    "times are from the harness's kill to the first `berth status` that shows the change (polled every 2 ms plus the CLI's own run time)".into(),
                    "the freeze comes just after a check passed (the harness waits for `healthy`): the slowest phase, so the detection times sit at the bound".into(),
                ],
            },
            Section {
                title: "crash archives written by these events".into(),
                table: a,
                notes: Vec::new(),
            },
        ],
        raw: json!({
            "restart_ms": restart,
            "start_ms": start_ms,
            "hung_detect_ms": detect,
            "hung_bound_ms": bound,
            "archive_bytes": sizes,
        }),
    }
}

/// The 99th percentile (nearest rank): the largest sample when there are fewer than 100.
fn p99(xs: &[f64]) -> f64 {
    let mut s: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((0.99 * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}
