//! cost: what a container can make the host do outside its budget (issue 32), in its own
//! sandbox and daemon under the default policy (the group capped at 50 % of all CPUs).
//!
//! Three phases of `W` seconds each (60 s; 12 s with `--quick`), a third container
//! (`cost-watch`) asking `GET /v1/self` every 100 ms throughout:
//! - idle: nothing else runs;
//! - self-restart: `cost-selfish` asks `POST /v1/self/restart` as its first act at every
//!   start (and again every 50 ms while it is refused);
//! - job flood: `cost-flood` has a job that writes its output as fast as it can (run every
//!   second: the scheduler's test clock, one cron minute a second, so that the flood starts
//!   at once; each run floods until its time limit).
//!
//! CPU is read from cgroups, so other work on a shared machine does not blur it: berth's
//! group (`<parent>`: the containers, and since issue 32 their shims, monitors and helpers),
//! the daemon (moved at its start into a cgroup of its own, `<parent>.daemon`, where
//! everything it spawns and does not move stays: before issue 32 the shims and helpers) and
//! the LXC monitors a berth before issue 32 put in `<parent>.monitor`. "Outside" is the last
//! two. The host's total (/proc/stat) is shown for context.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use berth_sys::cgroupfs::Cgroups;
use berth_testkit::Pkg;
use serde_json::{json, Value};

use super::{Ctx, Suite};
use crate::report::{ms, Section, SuiteOutput, Table};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::util::{progress, which, Result};

/// The hidden subcommand of berth-bench that is the third container's client.
pub const PROBE: &str = "__cost-probe";

const SELFISH: &str = "cost-selfish";
const FLOOD: &str = "cost-flood";
const WATCH: &str = "cost-watch";
/// The watching client's period.
const EVERY: Duration = Duration::from_millis(100);

pub struct Cost;

/// Its first act at every start: ask for its own restart; refused (paced), ask again soon.
const SELFISH_SH: &str = "echo up\nwhile :; do\n    code=$(curl -s -o /dev/null -w '%{http_code}' --unix-socket /run/berth/api.sock -X POST http://berth/v1/self/restart)\n    [ \"$code\" = 202 ] && exec sleep 100000\n    sleep 0.05\ndone\n";

/// The flooding job: lines of 64 bytes as fast as the shell writes them.
const FLOOD_JOB: &str =
    "while :; do echo 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde; done";

fn packages(curl: &Path) -> Result<Vec<Pkg>> {
    let curl = std::fs::read(curl).map_err(|e| format!("read {}: {e}", curl.display()))?;
    let mut selfish = Pkg::script(SELFISH, "1", SELFISH_SH)
        .package_key("base = \"host\"")
        .file("bin/curl", &curl)
        .table("[permissions]\napi = [\"restart\"]\n[network]\nmode = \"none\"\n");
    selfish.applets = &["sh", "sleep", "echo", "["];
    let mut flood = Pkg::script(FLOOD, "1", "echo up\nexec sleep 100000\n")
        .table("[network]\nmode = \"none\"\n");
    flood.applets = &["sh", "sleep", "echo"];
    let mut watch = Pkg::script(WATCH, "1", "echo up\nexec sleep 100000\n")
        .table("[permissions]\napi = [\"status\"]\n[network]\nmode = \"none\"\n");
    watch.applets = &["sh", "sleep", "echo"];
    let mut all = vec![selfish, flood, watch];
    for p in all.iter_mut() {
        p.description = "berth-bench payload".into();
    }
    Ok(all)
}

/// `berth-bench __cost-probe SOCKET SECONDS`: `GET /v1/self` every 100 ms for SECONDS, each
/// on a new connection; prints `{"us": [...], "failed": [codes…], "cpu_ticks": N}`.
pub fn probe(args: &[String]) -> i32 {
    let [sock, secs] = args else {
        eprintln!("usage: berth-bench {PROBE} SOCKET SECONDS");
        return 2;
    };
    let secs: f64 = secs.parse().unwrap_or(0.0);
    let req = "GET /v1/self HTTP/1.1\r\nHost: berth\r\nContent-Length: 0\r\n\r\n";
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let (mut times, mut failed) = (Vec::new(), Vec::new());
    let mut buf = Vec::with_capacity(4096);
    let mut next = Instant::now();
    while next < end {
        let t0 = Instant::now();
        let answer = UnixStream::connect(sock).and_then(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.write_all(req.as_bytes())?;
            buf.clear();
            s.read_to_end(&mut buf)?;
            Ok(())
        });
        let us = t0.elapsed().as_micros() as u64;
        match answer {
            Ok(()) if buf.starts_with(b"HTTP/1.1 2") => times.push(us),
            Ok(()) => failed.push(String::from_utf8_lossy(&buf[..buf.len().min(12)]).into_owned()),
            Err(e) => failed.push(e.to_string()),
        }
        next += EVERY;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    println!(
        "{}",
        json!({"us": times, "failed": failed, "cpu_ticks": own_ticks("self")})
    );
    0
}

/// utime + stime of a process, in clock ticks (field 14 and 15 of /proc/PID/stat).
fn own_ticks(pid: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(i) = stat.rfind(')') else { return 0 };
    let f: Vec<&str> = stat[i + 1..].split_whitespace().collect();
    let n = |k: usize| f.get(k).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    n(11) + n(12)
}

/// The host's busy time, in clock ticks: /proc/stat's cpu line less idle and iowait.
fn host_busy_ticks() -> u64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = text
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is within user)
    [0, 1, 2, 5, 6, 7].iter().filter_map(|i| f.get(*i)).sum()
}

/// Linux's USER_HZ, the unit of /proc/stat and /proc/PID/stat on every architecture berth
/// runs on.
const TICKS_PER_S: f64 = 100.0;

/// One reading of every counter.
#[derive(Clone, Copy)]
struct Reading {
    at: Instant,
    host: u64,
    group_us: u64,
    daemon_us: u64,
    monitors_us: u64,
}

struct Meters {
    cg: Cgroups,
    group: String,
    daemon: String,
    monitors: String,
}

impl Meters {
    fn usage(&self, rel: &str) -> u64 {
        if !self.cg.exists(rel) {
            return 0;
        }
        self.cg.stats(rel).cpu_usage_usec.unwrap_or(0)
    }

    fn read(&self) -> Reading {
        Reading {
            at: Instant::now(),
            host: host_busy_ticks(),
            group_us: self.usage(&self.group),
            daemon_us: self.usage(&self.daemon),
            monitors_us: self.usage(&self.monitors),
        }
    }
}

/// What one phase measured.
struct Phase {
    name: &'static str,
    secs: f64,
    /// Cores (CPU seconds per second).
    host: f64,
    group: f64,
    daemon: f64,
    monitors: f64,
    prober: f64,
    latency_ms: Vec<f64>,
    failed: Vec<String>,
    events: String,
}

impl Phase {
    fn outside(&self) -> f64 {
        self.daemon + self.monitors
    }

    fn json(&self) -> Value {
        json!({
            "seconds": self.secs,
            "host_cores": self.host,
            "group_cores": self.group,
            "outside_cores": self.outside(),
            "daemon_cores": self.daemon,
            "old_monitors_cores": self.monitors,
            "prober_cores": self.prober,
            "latency_ms": self.latency_ms,
            "p50_ms": pct(&self.latency_ms, 0.5),
            "p99_ms": pct(&self.latency_ms, 0.99),
            "failed": self.failed,
            "events": self.events,
        })
    }
}

fn pct(xs: &[f64], p: f64) -> f64 {
    let mut s: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

/// Runs the watching client for `secs` beside whatever the phase does, and measures.
fn measure(
    sb: &Sandbox,
    m: &Meters,
    name: &'static str,
    secs: f64,
    events: impl FnOnce() -> String,
) -> Result<Phase> {
    progress!("cost: {name}, {secs:.0} s");
    let sock = sb.cfg.paths.api_dir(WATCH).join("api.sock");
    let client = super::api::spawn_in(
        sb,
        WATCH,
        PROBE,
        &[&sock.display().to_string(), &secs.to_string()],
    )?;
    let r0 = m.read();
    let out = client
        .wait_with_output()
        .map_err(|e| format!("the watching client: {e}"))?;
    let r1 = m.read();
    if !out.status.success() {
        return Err(format!(
            "the watching client: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    let v: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("the watching client's answer: {e}"))?;
    let dt = (r1.at - r0.at).as_secs_f64();
    let cores = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e6 / dt;
    Ok(Phase {
        name,
        secs: dt,
        host: r1.host.saturating_sub(r0.host) as f64 / TICKS_PER_S / dt,
        group: cores(r0.group_us, r1.group_us),
        daemon: cores(r0.daemon_us, r1.daemon_us),
        monitors: cores(r0.monitors_us, r1.monitors_us),
        prober: v["cpu_ticks"].as_f64().unwrap_or(0.0) / TICKS_PER_S / dt,
        latency_ms: v["us"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_f64)
            .map(|us| us / 1000.0)
            .collect(),
        failed: v["failed"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str().map(String::from))
            .collect(),
        events: events(),
    })
}

/// Moves the daemon (all its threads) into a cgroup of its own in the hierarchies that count
/// CPU: what it does, and what it spawns without moving, is counted there.
fn isolate_daemon(cg: &Cgroups, rel: &str, pid: i32) -> Result<()> {
    cg.ensure(rel, &["cpu", "cpuacct"])
        .map_err(|e| format!("the daemon's cgroup {rel}: {e}"))?;
    let mut procs = Vec::new();
    for c in ["cpu", "cpuacct"] {
        if let Some(d) = cg.dir(c, rel) {
            let p = d.join("cgroup.procs");
            if !procs.contains(&p) {
                procs.push(p);
            }
        }
    }
    for p in procs {
        std::fs::write(&p, pid.to_string())
            .map_err(|e| format!("move the daemon into {}: {e}", p.display()))?;
    }
    Ok(())
}

fn status(sb: &Sandbox, name: &str) -> Value {
    sb.json(&["status", name])
        .map(|v| v["containers"][0].clone())
        .unwrap_or(Value::Null)
}

impl Suite for Cost {
    fn name(&self) -> &'static str {
        "cost"
    }

    fn prepare(&mut self, _sb: &Sandbox) -> Result<Vec<PkgSpec>> {
        Ok(Vec::new())
    }

    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput> {
        let Some(curl) = which("curl") else {
            return Ok(skipped(
                "curl is missing (the self-restarting payload's client): apt-get install curl",
            ));
        };
        let Some(hooks) = crate::util::hooks_berth(&ctx.sb.berth) else {
            return Ok(skipped(
                "neither this berth nor a berth-test-hooks beside it has the test hooks, and the job flood runs the scheduler's test clock (a cron minute a second): build one with `cargo build --release -p berth --features test-hooks` and copy it beside berth as berth-test-hooks, as scripts/test.sh does",
            ));
        };
        let secs: f64 = if ctx.quick { 12.0 } else { 60.0 };
        // The default policy (the group capped at 50 % of all CPUs); the scheduler's test
        // clock so that the flooding job runs at once.
        let mut sb = ctx.sb.nested("cost", "2s", "")?;
        sb.berth = hooks;
        for p in packages(&curl)? {
            sb.pack_pkg(&p)?;
        }
        sb.build_repo()?;
        sb.restart_daemon_env(&[("BERTH_TEST_HOOKS", "1"), ("BERTH_TEST_CRON_SECOND", "1")])?;
        let cg = Cgroups::detect(Path::new("/proc")).map_err(|e| format!("cgroups: {e}"))?;
        let meters = Meters {
            group: sb.cgroup_parent.clone(),
            daemon: format!("{}.daemon", sb.cgroup_parent),
            monitors: format!("{}.monitor", sb.cgroup_parent),
            cg,
        };
        let pid = sb.daemon_pid().ok_or("the daemon did not start")?;
        isolate_daemon(&meters.cg, &meters.daemon, pid)?;
        sb.ok(&["update"])?;
        sb.ok(&["install", SELFISH, FLOOD, WATCH])?;
        sb.ok(&["start", WATCH])?;
        let mut phases = Vec::new();

        phases.push(measure(&sb, &meters, "idle", secs, String::new)?);

        sb.ok(&["start", SELFISH])?;
        // Restarts made, as the daemon logs each (counted or not by `restarts`), and the
        // inits seen.
        let asked = |sb: &Sandbox| {
            sb.daemon_log_text()
                .matches(&format!("{SELFISH}: asked through its API to restart"))
                .count()
        };
        let (a0, r0) = (
            asked(&sb),
            status(&sb, SELFISH)["restarts"].as_u64().unwrap_or(0),
        );
        let sb_ref = &sb;
        phases.push(measure(sb_ref, &meters, "self-restart", secs, || {
            let c = status(sb_ref, SELFISH);
            format!(
                "{} restarts made; `restarts` counted {}",
                asked(sb_ref).saturating_sub(a0),
                c["restarts"].as_u64().unwrap_or(0).saturating_sub(r0),
            )
        })?);
        let restarts_log = asked(&sb).saturating_sub(a0);
        let _ = sb.ok(&["stop", "-t", "1", SELFISH]);

        sb.ok(&["start", FLOOD])?;
        let job = sb.json(&[
            "schedule",
            "add",
            FLOOD,
            "--cron",
            "* * * * *",
            "--",
            "/bin/busybox",
            "sh",
            "-c",
            FLOOD_JOB,
        ])?;
        let id = job["id"].as_str().unwrap_or("a1").to_string();
        let b0 = status(&sb, FLOOD)["log_bytes"].as_u64().unwrap_or(0);
        let budget = format!("{}/{FLOOD}", sb.cgroup_parent);
        let thr0 = meters.cg.stats(&budget).nr_throttled.unwrap_or(0);
        let (sb_ref, m_ref) = (&sb, &meters);
        phases.push(measure(sb_ref, m_ref, "job flood", secs, || {
            let b = status(sb_ref, FLOOD)["log_bytes"].as_u64().unwrap_or(0);
            let thr = m_ref.cg.stats(&budget).nr_throttled.unwrap_or(0);
            format!(
                "{:.1} MB/s of output relayed into its log; its budget throttled {} times",
                b.saturating_sub(b0) as f64 / 1e6 / secs,
                thr.saturating_sub(thr0)
            )
        })?);
        let _ = sb.ok(&["schedule", "remove", FLOOD, &id]);
        let _ = sb.ok(&["stop", "-t", "1", FLOOD]);
        let _ = sb.ok(&["stop", "-t", "1", WATCH]);
        Ok(output(&phases, restarts_log))
    }
}

fn skipped(why: &str) -> SuiteOutput {
    SuiteOutput {
        name: "cost",
        sections: vec![Section {
            title: "what a container makes the host do outside its budget".into(),
            table: Table::new(&["skipped"]),
            notes: vec![why.into()],
        }],
        raw: json!({ "skipped": why }),
    }
}

fn cores(x: f64) -> String {
    format!("{x:.3}")
}

fn output(phases: &[Phase], restarts_log: usize) -> SuiteOutput {
    let mut cpu = Table::new(&[
        "phase",
        "s",
        "outside berth's group (cores)",
        "of it the daemon",
        "inside berth's group (cores)",
        "host, all (cores)",
        "what happened",
    ]);
    let mut lat = Table::new(&["phase", "n", "p50 ms", "p99 ms", "max ms", "failed"]);
    let mut raw = serde_json::Map::new();
    for p in phases {
        cpu.row(vec![
            p.name.into(),
            format!("{:.0}", p.secs),
            cores(p.outside()),
            cores(p.daemon),
            cores(p.group),
            cores(p.host),
            p.events.clone(),
        ]);
        lat.row(vec![
            p.name.into(),
            p.latency_ms.len().to_string(),
            ms(pct(&p.latency_ms, 0.5)),
            ms(pct(&p.latency_ms, 0.99)),
            ms(pct(&p.latency_ms, 1.0)),
            if p.failed.is_empty() {
                "0".into()
            } else {
                format!("{}: {}", p.failed.len(), p.failed[0])
            },
        ]);
        raw.insert(p.name.into(), p.json());
    }
    raw.insert("restarts_made".into(), json!(restarts_log));
    SuiteOutput {
        name: "cost",
        sections: vec![
            Section {
                title: "what a container makes the host do outside its budget (issue 32)".into(),
                table: cpu,
                notes: vec![
                    "cores = CPU seconds per second, from cgroup counters: berth's group (the containers, and their shims, LXC monitors and helpers), the daemon in a cgroup of its own (with whatever it spawns that does not move), and <parent>.monitor where a berth before issue 32 put the LXC monitors; outside = daemon + those monitors".into(),
                    "self-restart: a payload that asks POST /v1/self/restart as its first act at every start (and every 50 ms while refused); job flood: a job writing 64-byte lines as fast as it can, run every second (the scheduler's test clock), until its time limit each time".into(),
                    "the host's total includes whatever else the machine runs (a shared machine: other builds)".into(),
                ],
            },
            Section {
                title: "a third container's API latency (GET /v1/self every 100 ms)".into(),
                table: lat,
                notes: vec!["each request on a new connection to its own socket, timed from connect to the end of the answer, by a client in its memory cgroup".into()],
            },
        ],
        raw: Value::Object(raw),
    }
}
