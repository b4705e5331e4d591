//! Activation: the time from the start request to the payload's first instruction, and the
//! stop time, for berth and for the bare tools on the same root file system (DESIGN.md
//! decision 10):
//!
//! - **berth**: `berth start NAME` through the daemon; stop: `berth stop NAME` (graceful);
//! - **lxc-execute** of the same squashfs image (mounted read-only by berth-bench) with an
//!   LXC configuration equivalent to the one berth generates; stop: `lxc-stop` (graceful);
//! - **runc** (`runc run -d`) of an OCI bundle from `runc spec` whose read-only root is the same
//!   tree; stop: `runc kill TERM` + `runc delete`.
//!
//! The payload writes CLOCK_REALTIME as its first instruction (see [`crate::payload`]);
//! berth-bench reads CLOCK_REALTIME just before it spawns the start command. For the bare
//! tools, whole-process time (start of `lxc-execute` / `runc run` to its exit, payload exiting
//! at once) is measured too. The peers are interleaved (ABCAB…) after a warm-up.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use super::{Ctx, Suite};
use crate::payload::{self, Kind, Payload};
use crate::procfs;
use crate::report::{mean_ci, ms, Section, SuiteOutput, Table};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::stats::{summarize, Summary};
use crate::trace;
use crate::util::{
    bail, ms_between, now_ns, poll, progress, run, run_quiet, which, Context, Result,
};

const PKG: &str = "bench-act";
const BARE: &str = "bare";
const RUNC_ID: &str = "bench";
const RUNC_ID_EXIT: &str = "bench-exit";
const TIMEOUT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(1);

#[derive(Default)]
pub struct Activation {
    payload: Option<Payload>,
}

/// Every measured series, ms.
#[derive(Default)]
struct Series {
    berth_first: Vec<f64>,
    berth_cli: Vec<f64>,
    berth_daemon_start: Vec<f64>,
    berth_stop: Vec<f64>,
    berth_daemon_stop: Vec<f64>,
    lxc_first: Vec<f64>,
    lxc_stop: Vec<f64>,
    lxc_whole_first: Vec<f64>,
    lxc_whole: Vec<f64>,
    runc_first: Vec<f64>,
    runc_cli: Vec<f64>,
    runc_stop: Vec<f64>,
    runc_whole_first: Vec<f64>,
    runc_whole: Vec<f64>,
}

impl Series {
    /// Keeps the first `n` samples of every series.
    fn truncate(&mut self, n: usize) {
        for v in [
            &mut self.berth_first,
            &mut self.berth_cli,
            &mut self.berth_daemon_start,
            &mut self.berth_stop,
            &mut self.berth_daemon_stop,
            &mut self.lxc_first,
            &mut self.lxc_stop,
            &mut self.lxc_whole_first,
            &mut self.lxc_whole,
            &mut self.runc_first,
            &mut self.runc_cli,
            &mut self.runc_stop,
            &mut self.runc_whole_first,
            &mut self.runc_whole,
        ] {
            v.truncate(n);
        }
    }
}

/// Everything a round needs to know about the peers.
struct Peers<'a> {
    sb: &'a Sandbox,
    kind: Kind,
    berth_stamp: PathBuf,
    lxcpath: PathBuf,
    lxc_data: PathBuf,
    lxc_wait: Vec<String>,
    lxc_exit: Vec<String>,
    runc: Option<Runc>,
}

struct Runc {
    bin: PathBuf,
    root: PathBuf,
    bundle_wait: PathBuf,
    bundle_exit: PathBuf,
    data: PathBuf,
}

impl Runc {
    fn cmd(&self) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--root")
            .arg(&self.root)
            .stdin(Stdio::null())
            .process_group(0);
        c
    }
}

fn remove(p: &Path) {
    let _ = std::fs::remove_file(p);
}

/// Waits for the payload's timestamp; fails early if `child` (the foreground tool) exits.
fn wait_stamp(kind: Kind, file: &Path, mut child: Option<&mut Child>, who: &str) -> Result<i128> {
    let r =
        poll(
            TIMEOUT,
            POLL,
            &format!("the {who} payload to start"),
            || {
                if let Some(s) = payload::read_stamp(kind, file) {
                    return Some(Ok(s));
                }
                if let Some(c) = child.as_deref_mut() {
                    if let Ok(Some(st)) = c.try_wait() {
                        // It may have written the stamp just before exiting.
                        return Some(payload::read_stamp(kind, file).ok_or_else(|| {
                            format!("{who} exited ({st}) before the payload started")
                        }));
                    }
                }
                None
            },
        )?;
    Ok(r?)
}

fn wait_child(mut c: Child, who: &str) -> Result<()> {
    let r = poll(TIMEOUT, POLL, &format!("{who} to exit"), || {
        c.try_wait().ok().flatten()
    });
    if r.is_err() {
        let _ = c.kill();
        let _ = c.wait();
    }
    r.map(|_| ())
}

impl Peers<'_> {
    fn berth(&self, s: &mut Series, record: bool) -> Result<()> {
        remove(&self.berth_stamp);
        let t0 = now_ns();
        let v = self.sb.json(&["start", PKG])?;
        let t_ret = now_ns();
        let stamp = wait_stamp(self.kind, &self.berth_stamp, None, "berth")?;
        let ts = now_ns();
        let stop = self.sb.json(&["stop", PKG])?;
        let te = now_ns();
        if stop["graceful"] != json!(true) {
            bail!("berth stop {PKG} was not graceful: {stop}");
        }
        if record {
            s.berth_first.push(ms_between(t0, stamp));
            s.berth_cli.push(ms_between(t0, t_ret));
            s.berth_daemon_start
                .push(v["start_ms"].as_f64().unwrap_or(f64::NAN));
            s.berth_stop.push(ms_between(ts, te));
            s.berth_daemon_stop
                .push(stop["stop_ms"].as_f64().unwrap_or(f64::NAN));
        }
        Ok(())
    }

    fn lxc_execute(&self, argv: &[String]) -> Command {
        let mut c = Command::new("lxc-execute");
        c.arg("-P")
            .arg(&self.lxcpath)
            .args(["-n", BARE, "--"])
            .args(argv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        c
    }

    fn lxc(&self, s: &mut Series, record: bool) -> Result<()> {
        let stamp_file = self.lxc_data.join("t0");
        remove(&stamp_file);
        let t0 = now_ns();
        let mut child = self
            .lxc_execute(&self.lxc_wait)
            .spawn()
            .context("run lxc-execute")?;
        let stamp = match wait_stamp(self.kind, &stamp_file, Some(&mut child), "lxc-execute") {
            Ok(s) => s,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        let ts = now_ns();
        let stopped = run(Command::new("lxc-stop")
            .arg("-P")
            .arg(&self.lxcpath)
            .args(["-n", BARE, "-t", "10"])
            .process_group(0));
        let te = now_ns();
        wait_child(child, "lxc-execute")?;
        stopped?;
        if record {
            s.lxc_first.push(ms_between(t0, stamp));
            s.lxc_stop.push(ms_between(ts, te));
        }
        Ok(())
    }

    fn lxc_whole(&self, s: &mut Series, record: bool) -> Result<()> {
        let stamp_file = self.lxc_data.join("t0");
        remove(&stamp_file);
        let t0 = now_ns();
        let st = self
            .lxc_execute(&self.lxc_exit)
            .status()
            .context("run lxc-execute")?;
        let t1 = now_ns();
        if !st.success() {
            bail!(
                "lxc-execute of the exiting payload failed ({st}); see {}",
                self.lxcpath.join(BARE).join("lxc.log").display()
            );
        }
        let stamp = wait_stamp(self.kind, &stamp_file, None, "lxc-execute")?;
        if record {
            s.lxc_whole_first.push(ms_between(t0, stamp));
            s.lxc_whole.push(ms_between(t0, t1));
        }
        Ok(())
    }

    fn runc(&self, s: &mut Series, record: bool) -> Result<()> {
        let Some(r) = &self.runc else { return Ok(()) };
        let stamp_file = r.data.join("t0");
        remove(&stamp_file);
        let (t0, t_ret) = crate::util::runc_run_detached(r.cmd(), &r.bundle_wait, RUNC_ID)?;
        let stamp = wait_stamp(self.kind, &stamp_file, None, "runc")?;
        let state: Value =
            serde_json::from_str(&run(r.cmd().args(["state", RUNC_ID]))?).context("runc state")?;
        let pid = state["pid"].as_i64().unwrap_or(0) as i32;
        let ts = now_ns();
        run(r.cmd().args(["kill", RUNC_ID, "TERM"]))?;
        if pid > 0 {
            poll(TIMEOUT, POLL, "the runc payload to exit", || {
                procfs::gone(pid).then_some(())
            })?;
        }
        run(r.cmd().args(["delete", RUNC_ID]))?;
        let te = now_ns();
        if record {
            s.runc_first.push(ms_between(t0, stamp));
            s.runc_cli.push(ms_between(t0, t_ret));
            s.runc_stop.push(ms_between(ts, te));
        }
        Ok(())
    }

    fn runc_whole(&self, s: &mut Series, record: bool) -> Result<()> {
        let Some(r) = &self.runc else { return Ok(()) };
        let stamp_file = r.data.join("t0");
        remove(&stamp_file);
        let t0 = now_ns();
        let st = r
            .cmd()
            .args(["run", "--bundle"])
            .arg(&r.bundle_exit)
            .arg(RUNC_ID_EXIT)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("run runc")?;
        let t1 = now_ns();
        if r.root.join(RUNC_ID_EXIT).exists() {
            run_quiet(r.cmd().args(["delete", "--force", RUNC_ID_EXIT]));
        }
        if !st.success() {
            bail!("runc run of the exiting payload failed ({st})");
        }
        let stamp = wait_stamp(self.kind, &stamp_file, None, "runc")?;
        if record {
            s.runc_whole_first.push(ms_between(t0, stamp));
            s.runc_whole.push(ms_between(t0, t1));
        }
        Ok(())
    }

    /// One round, peers interleaved. Each peer starts from a settled system: the kernel
    /// tears network and pid namespaces down asynchronously, and a start that overlaps the
    /// previous peer's teardown waits for it (measured here: up to 2x on the next start).
    fn round(&self, s: &mut Series, record: bool) -> Result<()> {
        crate::util::check_interrupted()?;
        let settle = || std::thread::sleep(SETTLE);
        settle();
        self.berth(s, record)?;
        settle();
        self.lxc(s, record)?;
        settle();
        self.runc(s, record)?;
        settle();
        self.lxc_whole(s, record)?;
        settle();
        self.runc_whole(s, record)?;
        Ok(())
    }
}

/// One traced start: when it was asked for, its payload's first instruction, and berth's
/// own steps (none for lxc-execute), CLOCK_REALTIME ns.
struct Traced {
    t0: u64,
    first: u64,
    stamps: Vec<(String, u64)>,
}

impl Peers<'_> {
    fn berth_traced(&self) -> Result<Traced> {
        remove(&self.berth_stamp);
        let t0 = now_ns() as u64;
        let v = self.sb.json(&["start", "--trace", PKG])?;
        let first = wait_stamp(self.kind, &self.berth_stamp, None, "berth")? as u64;
        self.sb.json(&["stop", PKG])?;
        let stamps = v["trace"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| Some((s[0].as_str()?.to_string(), s[1].as_u64()?)))
            .collect();
        Ok(Traced { t0, first, stamps })
    }

    fn lxc_traced(&self) -> Result<Traced> {
        let stamp_file = self.lxc_data.join("t0");
        remove(&stamp_file);
        let t0 = now_ns() as u64;
        let mut child = self
            .lxc_execute(&self.lxc_wait)
            .spawn()
            .context("run lxc-execute")?;
        let first = wait_stamp(self.kind, &stamp_file, Some(&mut child), "lxc-execute");
        let stopped = run(Command::new("lxc-stop")
            .arg("-P")
            .arg(&self.lxcpath)
            .args(["-n", BARE, "-t", "10"])
            .process_group(0));
        wait_child(child, "lxc-execute")?;
        stopped?;
        Ok(Traced {
            t0,
            first: first? as u64,
            stamps: Vec::new(),
        })
    }
}

/// `--trace`: more starts of berth and of lxc-execute, interleaved, each split into the
/// phases of [`trace::PHASES`] (with perf, liblxc's too). runc's start is not split: its
/// bar is its first instruction in the measured rounds. A run whose steps cannot be found
/// is left out and said why.
fn traced(peers: &Peers, ctx: &Ctx, payload: &str, s: &Series) -> Result<Value> {
    let n = ctx.runs.clamp(3, 10);
    let (perf, why_not) = match trace::unavailable() {
        Some(why) => (None, Some(why)),
        None => match trace::Perf::start(&peers.sb.dir.join("trace")) {
            Ok(p) => (Some(p), None),
            Err(e) => (None, Some(format!("perf did not start: {e}"))),
        },
    };
    progress!(
        "activation: {n} traced rounds{}",
        if why_not.is_none() { " under perf" } else { "" }
    );
    let mut runs = Vec::new();
    let mut failed = None;
    for _ in 0..n {
        if let Err(e) = crate::util::check_interrupted() {
            failed = Some(e);
            break;
        }
        std::thread::sleep(SETTLE);
        let b = peers.berth_traced();
        std::thread::sleep(SETTLE);
        let l = peers.lxc_traced();
        match (b, l) {
            (Ok(b), Ok(l)) => runs.push((b, l)),
            (Err(e), _) | (_, Err(e)) => {
                failed = Some(e);
                break;
            }
        }
    }
    let events = perf.map(|p| p.stop());
    if let Some(e) = failed {
        return Err(e);
    }
    let (events, why_not) = match events {
        Some(Ok(ev)) => (Some(ev), why_not),
        Some(Err(e)) => (None, Some(format!("perf failed: {e}"))),
        None => (None, why_not),
    };
    Ok(trace_json(&runs, events.as_ref(), why_not, payload, s, n))
}

/// The phases of every traced run, by peer (see [`traced`]).
fn trace_json(
    runs: &[(Traced, Traced)],
    events: Option<&(Vec<trace::Event>, i64)>,
    why_not: Option<String>,
    payload: &str,
    s: &Series,
    n: usize,
) -> Value {
    let mut errors = Vec::new();
    let mut berth: Vec<Vec<(String, f64)>> = Vec::new();
    let mut lxc: Vec<Vec<(String, f64)>> = Vec::new();
    let (mut warm, mut berth_move, mut lxc_move) = (Vec::new(), Vec::new(), Vec::new());
    for (i, (b, l)) in runs.iter().enumerate() {
        let steps = |t: &Traced, from: u64| {
            events.map(|(ev, off)| trace::lxc_steps(ev, *off, payload, from, t.first))
        };
        let lxc_start = b
            .stamps
            .iter()
            .find(|(s, _)| s == "lxc_start")
            .map_or(b.t0, |(_, ns)| *ns);
        let bs = steps(b, lxc_start);
        let b_steps = match &bs {
            Some(Ok(st)) => {
                berth_move.push(st.monitor_move as f64 / 1e6);
                Some(st)
            }
            Some(Err(e)) => {
                errors.push(format!("run {}, berth: {e}", i + 1));
                None
            }
            None => None,
        };
        if events.is_none() || b_steps.is_some() {
            match trace::berth_phases(b.t0, &b.stamps, b_steps, b.first) {
                Ok(p) => berth.push(p),
                Err(e) => errors.push(format!("run {}, berth: {e}", i + 1)),
            }
        }
        if let Some((ev, off)) = events {
            if let Some((_, d)) = trace::first_write(ev, *off, "warm-moves", b.t0, b.first) {
                warm.push(d as f64 / 1e6);
            }
        }
        match steps(l, l.t0) {
            Some(Ok(st)) => {
                lxc_move.push(st.monitor_move as f64 / 1e6);
                lxc.push(trace::lxc_execute_phases(l.t0, &st, l.first));
            }
            Some(Err(e)) => errors.push(format!("run {}, lxc-execute: {e}", i + 1)),
            None => lxc.push(vec![(
                "LXC start (not split)".to_string(),
                (l.first as f64 - l.t0 as f64) / 1e6,
            )]),
        }
    }
    let by_phase = |runs: &[Vec<(String, f64)>]| -> Vec<Value> {
        let mut names: Vec<String> = Vec::new();
        for r in runs {
            for (p, _) in r {
                if !names.contains(p) {
                    names.push(p.clone());
                }
            }
        }
        names
            .iter()
            .map(|p| {
                let v: Vec<f64> = runs
                    .iter()
                    .filter_map(|r| r.iter().find(|(q, _)| q == p).map(|(_, v)| *v))
                    .collect();
                json!({"phase": p, "samples_ms": v})
            })
            .collect()
    };
    let total = |runs: &[Vec<(String, f64)>]| -> Vec<f64> {
        runs.iter()
            .map(|r| r.iter().map(|(_, v)| v).sum())
            .collect()
    };
    let mut peers = vec![
        json!({"peer": "berth", "phases": by_phase(&berth), "total_ms": total(&berth),
               "grace_period_ms": warm, "monitor_move_ms": berth_move}),
        json!({"peer": "lxc-execute", "phases": by_phase(&lxc), "total_ms": total(&lxc),
               "monitor_move_ms": lxc_move}),
    ];
    if !s.runc_first.is_empty() {
        peers.push(json!({"peer": "runc (not split)", "phases": [
            {"phase": "runc run -d, from the measured rounds", "samples_ms": s.runc_first}
        ], "total_ms": s.runc_first}));
    }
    // Each berth start's own steps, relative to its request (ms), for a closer look.
    let steps: Vec<Value> = runs
        .iter()
        .map(|(b, _)| {
            json!(b
                .stamps
                .iter()
                .map(|(st, ns)| json!([st, (*ns as f64 - b.t0 as f64) / 1e6]))
                .chain([json!([
                    "first instruction",
                    (b.first as f64 - b.t0 as f64) / 1e6
                ])])
                .collect::<Vec<_>>())
        })
        .collect();
    json!({
        "runs": n, "split": events.is_some(), "not_split": why_not,
        "peers": peers, "errors": errors, "berth_steps_ms": steps,
        "phase_descriptions": trace::PHASES.iter().map(|(p, d)| json!([p, d])).collect::<Vec<_>>(),
    })
}

/// The report's section of the traced starts: each phase's mean ± 95 % CI, berth beside
/// lxc-execute.
fn trace_section(t: &Value) -> Section {
    let peer = |name: &str| {
        t["peers"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["peer"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    };
    let (b, l) = (peer("berth"), peer("lxc-execute"));
    let samples = |p: &Value, phase: &str| -> Vec<f64> {
        p["phases"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|x| x["phase"] == phase)
            .and_then(|x| serde_json::from_value(x["samples_ms"].clone()).ok())
            .unwrap_or_default()
    };
    let cell = |v: &[f64]| summarize(v).map(|x| mean_ci(&x)).unwrap_or_default();
    let mut tab = Table::new(&["phase", "what", "berth ms", "lxc-execute ms"]);
    let mut names: Vec<String> = Vec::new();
    for p in [&b, &l] {
        for x in p["phases"].as_array().into_iter().flatten() {
            let n = x["phase"].as_str().unwrap_or("").to_string();
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    // In the order of the start.
    names.sort_by_key(|n| {
        trace::PHASES
            .iter()
            .position(|(p, _)| p == n)
            .unwrap_or(usize::MAX)
    });
    for n in &names {
        let what = trace::PHASES
            .iter()
            .find(|(p, _)| p == n)
            .map_or("not split: liblxc's steps need perf", |(_, d)| *d);
        tab.row(vec![
            n.clone(),
            what.into(),
            cell(&samples(&b, n)),
            cell(&samples(&l, n)),
        ]);
    }
    let totals = |p: &Value| -> Vec<f64> {
        serde_json::from_value(p["total_ms"].clone()).unwrap_or_default()
    };
    tab.row(vec![
        "**total**".into(),
        "start request → payload's first instruction".into(),
        cell(&totals(&b)),
        cell(&totals(&l)),
    ]);
    let ms_of = |p: &Value, k: &str| -> Vec<f64> {
        serde_json::from_value(p[k].clone()).unwrap_or_default()
    };
    let mut notes = vec![format!(
        "{} traced starts of each, interleaved, after the measured rounds; mean ± 95 % CI; the phases of each start add up to its total",
        t["runs"]
    )];
    match t["not_split"].as_str() {
        Some(why) => notes.push(format!("liblxc's phases are not split: {why}")),
        None => notes.push("berth's own phases from `berth start --trace` (the daemon's, the shim's and the monitor's stamps), liblxc's from a system-wide `perf record` of fork/exec and a few system calls (in a mount namespace of its own, tracefs mounted there); the recording slows every start a little".into()),
    }
    let (gp, bm, lm) = (
        ms_of(&b, "grace_period_ms"),
        ms_of(&b, "monitor_move_ms"),
        ms_of(&l, "monitor_move_ms"),
    );
    if !gp.is_empty() {
        notes.push(format!(
            "the kernel's RCU grace period before a cgroup move: {} ms (berth's warm-up move, begun as the request arrives); the monitor's own move then waited {} ms in berth, {} ms in lxc-execute",
            cell(&gp),
            cell(&bm),
            cell(&lm)
        ));
    }
    for e in t["errors"].as_array().into_iter().flatten() {
        notes.push(format!("left out: {}", e.as_str().unwrap_or("")));
    }
    Section {
        title: "where a start's time goes (`--trace`)".into(),
        table: tab,
        notes,
    }
}

/// Pause before each measured start (see `round`).
const SETTLE: std::time::Duration = std::time::Duration::from_millis(150);

/// The LXC configuration of the bare peer: what berth generates for the same package
/// (crates/berth-core/src/plan.rs), with its own name, data directory, log and cgroups.
pub fn bare_lxc_config(rootfs: &Path, data: &Path, log: &Path, cgroup_parent: &str) -> String {
    let lines = [
        format!("lxc.uts.name = {BARE}"),
        format!("lxc.rootfs.path = dir:{}", rootfs.display()),
        "lxc.rootfs.options = ro".into(),
        "lxc.rootfs.managed = 0".into(),
        "lxc.net.0.type = empty".into(),
        "lxc.mount.auto = proc:mixed sys:ro".into(),
        "lxc.autodev = 1".into(),
        "lxc.tty.max = 0".into(),
        "lxc.pty.max = 0".into(),
        "lxc.console.path = none".into(),
        "lxc.mount.entry = tmpfs tmp tmpfs rw,nosuid,nodev,size=16777216,mode=1777 0 0".into(),
        "lxc.mount.entry = tmpfs run tmpfs rw,nosuid,nodev,size=4194304,mode=755 0 0".into(),
        format!(
            "lxc.mount.entry = {} data none bind,rw,nosuid,nodev 0 0",
            data.display()
        ),
        "lxc.init.uid = 0".into(),
        "lxc.init.gid = 0".into(),
        "lxc.init.cwd = /".into(),
        "lxc.no_new_privs = 1".into(),
        "lxc.environment = PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
            .into(),
        "lxc.environment = HOME=/data".into(),
        format!("lxc.cgroup.dir.container = {cgroup_parent}/{BARE}"),
        format!("lxc.cgroup.dir.monitor = {cgroup_parent}.monitor/{BARE}"),
        format!("lxc.log.file = {}", log.display()),
        "lxc.log.level = WARN".into(),
    ];
    let mut s =
        String::from("# berth-bench: the bare lxc-execute peer, equivalent to berth's config\n");
    for l in lines {
        s.push_str(&l);
        s.push('\n');
    }
    s
}

/// Turns the default `runc spec` into the peer's: our payload, no terminal, the shared
/// read-only root, /tmp and /run as capped tmpfs and /data bound, as berth does.
pub fn runc_config(
    mut spec: Value,
    argv: &[String],
    rootfs: &Path,
    data: &Path,
    cgroups_path: &str,
) -> Result<Value> {
    spec["process"]["terminal"] = json!(false);
    spec["process"]["args"] = json!(argv);
    spec["process"]["cwd"] = json!("/");
    spec["root"] = json!({"path": rootfs.display().to_string(), "readonly": true});
    spec["hostname"] = json!(BARE);
    let mounts = spec["mounts"]
        .as_array_mut()
        .ok_or("runc spec has no mounts list")?;
    mounts.push(
        json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
        "options": ["nosuid", "nodev", "size=16777216", "mode=1777"]}),
    );
    mounts.push(
        json!({"destination": "/run", "type": "tmpfs", "source": "tmpfs",
        "options": ["nosuid", "nodev", "size=4194304", "mode=755"]}),
    );
    mounts.push(
        json!({"destination": "/data", "type": "bind", "source": data.display().to_string(),
        "options": ["rbind", "rw", "nosuid", "nodev"]}),
    );
    spec["linux"]["cgroupsPath"] = json!(cgroups_path);
    Ok(spec)
}

fn summary_row(label: &str, s: &[f64], base: Option<&Summary>) -> Option<Vec<String>> {
    let x = summarize(s)?;
    Some(vec![
        label.to_string(),
        x.n.to_string(),
        ms(x.median),
        format!("{} – {}", ms(x.p10), ms(x.p90)),
        mean_ci(&x),
        base.map(|b| format!("{:.2}", x.median / b.median))
            .unwrap_or_default(),
    ])
}

fn table(rows: Vec<Option<Vec<String>>>, ratio_header: &str) -> Table {
    let mut h = vec!["peer", "n", "median ms", "p10 – p90 ms", "mean ± 95% CI ms"];
    if !ratio_header.is_empty() {
        h.push(ratio_header);
    }
    let mut t = Table::new(&h);
    for mut r in rows.into_iter().flatten() {
        r.truncate(h.len());
        t.row(r);
    }
    t
}

impl Suite for Activation {
    fn name(&self) -> &'static str {
        "activation"
    }

    fn prepare(&mut self, sb: &Sandbox) -> Result<Vec<PkgSpec>> {
        let p = payload::build(&sb.dir.join("payload"))?;
        let spec = PkgSpec {
            name: PKG.into(),
            argv: p.argv("/data/t0", "wait"),
            files: p.files.clone(),
            busybox: p.needs_busybox(),
            host_base: false,
        };
        self.payload = Some(p);
        Ok(vec![spec])
    }

    fn environment(&self) -> Vec<(String, String)> {
        let c = self.payload.as_ref().and_then(|p| p.compiler.clone());
        vec![(
            "activation payload".into(),
            match c {
                Some(c) => format!("static C, `gcc -static -O2` ({c})"),
                None => "busybox touch (no gcc: coarse timestamps; install the Debian packages gcc, libc6-dev)".into(),
            },
        )]
    }

    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput> {
        let payload = self.payload.as_ref().ok_or("activation: not prepared")?;
        let sb = &*ctx.sb;
        for (tool, pkg) in [("lxc-execute", "lxc"), ("lxc-stop", "lxc")] {
            if which(tool).is_none() {
                bail!("{tool} is missing: install the Debian package {pkg}");
            }
        }
        let rootfs = mount_rootfs(sb)?;
        let (lxcpath, lxc_data, lxc_cfg) = bare_lxc(sb, &rootfs)?;
        let runc = match which("runc") {
            None => None,
            Some(bin) => Some(Runc::create(sb, bin, payload, &rootfs)?),
        };
        let with_runc = runc.is_some();
        let peers = Peers {
            sb,
            kind: payload.kind,
            berth_stamp: sb.cfg.paths.data(PKG).join("t0"),
            lxcpath,
            lxc_data,
            lxc_wait: payload.argv("/data/t0", "wait"),
            lxc_exit: payload.argv("/data/t0", "exit"),
            runc,
        };
        let (series, done) = rounds(&peers, ctx)?;
        let traced = if ctx.trace {
            Some(traced(
                &peers,
                ctx,
                &payload.argv("/data/t0", "wait")[0],
                &series,
            )?)
        } else {
            None
        };
        let _ = berth_sys::mount::umount(&rootfs, false);
        let mut out = report(&Outcome {
            s: series,
            done,
            runs: ctx.runs,
            warmup: ctx.warmup,
            kind: payload.kind,
            with_runc,
            lxc_cfg,
        });
        if let Some(t) = traced {
            out.sections.push(trace_section(&t));
            out.raw["trace"] = t;
        }
        Ok(out)
    }
}

/// What the rounds came to, and how they were run.
struct Outcome {
    s: Series,
    /// Measured rounds completed (fewer than `runs` when interrupted).
    done: usize,
    runs: usize,
    warmup: usize,
    kind: Kind,
    with_runc: bool,
    /// The bare LXC container's configuration.
    lxc_cfg: String,
}

/// The same image berth mounts, mounted once more by us, read-only; its mount point.
fn mount_rootfs(sb: &Sandbox) -> Result<PathBuf> {
    let rootfs = sb.dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).context("create the rootfs mount point")?;
    run(Command::new("mount")
        .args(["-t", "squashfs", "-o", "ro,nosuid,nodev,loop"])
        .arg(sb.package_file(PKG))
        .arg(&rootfs))?;
    Ok(rootfs)
}

/// The bare LXC container on `rootfs`: (its lxcpath, its data directory, its configuration).
fn bare_lxc(sb: &Sandbox, rootfs: &Path) -> Result<(PathBuf, PathBuf, String)> {
    let lxcpath = sb.dir.join("bare-lxc");
    let lxc_data = sb.dir.join("bare-data");
    std::fs::create_dir_all(lxcpath.join(BARE)).context("create the bare lxcpath")?;
    std::fs::create_dir_all(&lxc_data).context("create the bare data dir")?;
    let lxc_cfg = bare_lxc_config(
        rootfs,
        &lxc_data,
        &lxcpath.join(BARE).join("lxc.log"),
        &sb.cgroup_parent,
    );
    std::fs::write(lxcpath.join(BARE).join("config"), &lxc_cfg)
        .context("write the bare LXC config")?;
    Ok((lxcpath, lxc_data, lxc_cfg))
}

impl Runc {
    /// The state root, the data directory and a bundle per payload mode (`wait`, `exit`)
    /// on `rootfs`.
    fn create(sb: &Sandbox, bin: PathBuf, payload: &Payload, rootfs: &Path) -> Result<Runc> {
        let root = sb.dir.join("runc-state");
        let data = sb.dir.join("runc-data");
        std::fs::create_dir_all(&root).context("create the runc root")?;
        std::fs::create_dir_all(&data).context("create the runc data dir")?;
        let bundle = |mode: &str| -> Result<PathBuf> {
            let b = sb.dir.join(format!("runc-{mode}"));
            std::fs::create_dir_all(&b).context("create a runc bundle")?;
            run(Command::new(&bin).args(["spec", "--bundle"]).arg(&b))?;
            let spec: Value = serde_json::from_slice(
                &std::fs::read(b.join("config.json")).context("read config.json")?,
            )
            .context("parse the runc spec")?;
            let spec = runc_config(
                spec,
                &payload.argv("/data/t0", mode),
                rootfs,
                &data,
                &format!("/{}.runc/{mode}", sb.cgroup_parent),
            )?;
            std::fs::write(
                b.join("config.json"),
                serde_json::to_vec_pretty(&spec).unwrap_or_default(),
            )
            .context("write config.json")?;
            Ok(b)
        };
        let bundle_wait = bundle("wait")?;
        let bundle_exit = bundle("exit")?;
        Ok(Runc {
            bin,
            root,
            bundle_wait,
            bundle_exit,
            data,
        })
    }
}

/// The warm-up rounds, then the measured ones; (the series, how many rounds completed). An
/// interruption keeps the rounds that completed (all peers) and drops the last one.
fn rounds(peers: &Peers, ctx: &Ctx) -> Result<(Series, usize)> {
    let mut s = Series::default();
    progress!("activation: {} warm-up rounds", ctx.warmup);
    for _ in 0..ctx.warmup {
        peers.round(&mut s, false)?;
    }
    let mut done = 0;
    for i in 0..ctx.runs {
        progress!("activation: round {}/{}", i + 1, ctx.runs);
        match peers.round(&mut s, true) {
            Ok(()) => done += 1,
            Err(_) if crate::util::interrupted() && done > 0 => {
                s.truncate(done);
                break;
            }
            Err(e) => return Err(e),
        }
    }
    Ok((s, done))
}

/// Start to the first instruction, stop, whole process, berth's parts.
fn tables(s: &Series, with_runc: bool) -> [Table; 4] {
    let base_first = summarize(&s.lxc_first);
    let base_stop = summarize(&s.lxc_stop);
    let base_whole = summarize(&s.lxc_whole);
    let skipped = |x: &str| -> Option<Vec<String>> {
        Some(vec![
            x.into(),
            "0".into(),
            "skipped: runc is not installed (Debian package runc)".into(),
            String::new(),
            String::new(),
            String::new(),
        ])
    };
    let runc_row = |label: &str, v: &[f64], b: Option<&Summary>| {
        if with_runc {
            summary_row(label, v, b)
        } else {
            skipped(label)
        }
    };
    let first_t = table(
        vec![
            summary_row(
                "berth (`berth start`, through the daemon)",
                &s.berth_first,
                base_first.as_ref(),
            ),
            summary_row("lxc-execute", &s.lxc_first, base_first.as_ref()),
            runc_row("runc (`runc run -d`)", &s.runc_first, base_first.as_ref()),
        ],
        "median / lxc-execute",
    );
    let stop_t = table(
        vec![
            summary_row(
                "berth (`berth stop`, graceful)",
                &s.berth_stop,
                base_stop.as_ref(),
            ),
            summary_row("lxc-stop (graceful)", &s.lxc_stop, base_stop.as_ref()),
            runc_row(
                "runc kill TERM + runc delete",
                &s.runc_stop,
                base_stop.as_ref(),
            ),
        ],
        "median / lxc-stop",
    );
    let whole_t = table(
        vec![
            summary_row(
                "lxc-execute: whole process",
                &s.lxc_whole,
                base_whole.as_ref(),
            ),
            runc_row(
                "runc run: whole process",
                &s.runc_whole,
                base_whole.as_ref(),
            ),
            summary_row("lxc-execute: first instruction", &s.lxc_whole_first, None),
            runc_row("runc run: first instruction", &s.runc_whole_first, None),
        ],
        "median / lxc-execute",
    );
    let parts_t = table(
        vec![
            summary_row("`berth start` returns (CLI wall time)", &s.berth_cli, None),
            summary_row(
                "daemon: shim spawned → RUNNING (`start_ms`)",
                &s.berth_daemon_start,
                None,
            ),
            summary_row("payload's first instruction", &s.berth_first, None),
            summary_row("`berth stop` returns (CLI wall time)", &s.berth_stop, None),
            summary_row(
                "daemon: shutdown → released (`stop_ms`)",
                &s.berth_daemon_stop,
                None,
            ),
            runc_row("`runc run -d` returns", &s.runc_cli, None),
        ],
        "",
    );
    [first_t, stop_t, whole_t, parts_t]
}

/// Every sample, their summaries and the ratios of medians.
fn raw_json(o: &Outcome) -> Value {
    let s = &o.s;
    let base_first = summarize(&s.lxc_first);
    let base_stop = summarize(&s.lxc_stop);
    let base_whole = summarize(&s.lxc_whole);
    let ratio = |a: &[f64], b: &Option<Summary>| -> Value {
        match (summarize(a), b) {
            (Some(a), Some(b)) => json!(a.median / b.median),
            _ => Value::Null,
        }
    };
    let sum = |v: &[f64]| serde_json::to_value(summarize(v)).unwrap_or(Value::Null);
    json!({
        "runs": o.runs, "rounds_completed": o.done, "warmup": o.warmup,
        "payload": match o.kind { Kind::Native => "static-c", Kind::Busybox => "busybox-touch" },
        "order": ["berth", "lxc-execute", "runc", "lxc-execute-whole", "runc-whole"],
        "samples_ms": {
            "berth_first_instruction": s.berth_first, "berth_start_cli": s.berth_cli,
            "berth_daemon_start_ms": s.berth_daemon_start, "berth_stop": s.berth_stop,
            "berth_daemon_stop_ms": s.berth_daemon_stop,
            "lxc_execute_first_instruction": s.lxc_first, "lxc_stop": s.lxc_stop,
            "lxc_execute_whole_first_instruction": s.lxc_whole_first, "lxc_execute_whole": s.lxc_whole,
            "runc_first_instruction": s.runc_first, "runc_run_detached_returns": s.runc_cli,
            "runc_kill_delete": s.runc_stop,
            "runc_whole_first_instruction": s.runc_whole_first, "runc_whole": s.runc_whole,
        },
        "summary_ms": {
            "berth_first_instruction": sum(&s.berth_first), "lxc_execute_first_instruction": sum(&s.lxc_first),
            "runc_first_instruction": sum(&s.runc_first), "berth_stop": sum(&s.berth_stop),
            "lxc_stop": sum(&s.lxc_stop), "runc_kill_delete": sum(&s.runc_stop),
            "lxc_execute_whole": sum(&s.lxc_whole), "runc_whole": sum(&s.runc_whole),
            "berth_start_cli": sum(&s.berth_cli),
        },
        "ratios_of_medians": {
            "berth_over_lxc_execute": ratio(&s.berth_first, &base_first),
            "runc_over_lxc_execute": ratio(&s.runc_first, &base_first),
            "berth_stop_over_lxc_stop": ratio(&s.berth_stop, &base_stop),
            "runc_stop_over_lxc_stop": ratio(&s.runc_stop, &base_stop),
            "runc_whole_over_lxc_execute_whole": ratio(&s.runc_whole, &base_whole),
        },
        "runc_skipped": if o.with_runc { Value::Null } else { json!("runc is not installed (Debian package runc)") },
        "bare_lxc_config": o.lxc_cfg,
    })
}

fn report(o: &Outcome) -> SuiteOutput {
    let [first_t, stop_t, whole_t, parts_t] = tables(&o.s, o.with_runc);
    let of = if o.done < o.runs {
        format!(" of {} (interrupted)", o.runs)
    } else {
        String::new()
    };
    let kind_note = match o.kind {
        Kind::Native => "payload: a static C program that reads CLOCK_REALTIME first thing in main and writes it to /data/t0; berth-bench reads CLOCK_REALTIME just before spawning the start command",
        Kind::Busybox => "payload: busybox touch (no gcc); the timestamp is the file's mtime, coarse (kernel timestamp granularity) and includes busybox sh start-up",
    };
    SuiteOutput {
        name: "activation",
        sections: vec![
            Section {
                title: "start request → payload's first instruction".into(),
                table: first_t,
                notes: vec![
                    kind_note.into(),
                    format!("{} measured rounds{of} after {} warm-up round(s); peers interleaved in each round: berth, lxc-execute, runc, lxc-execute (whole), runc (whole)", o.done, o.warmup),
                    "all three run the same squashfs image read-only, with /proc, /sys (ro), /dev, tmpfs /tmp and /run and a /data bind; berth additionally mounts the image (loop) and spawns its shim".into(),
                ],
            },
            Section {
                title: "stop".into(),
                table: stop_t,
                notes: vec!["the payload exits on SIGTERM/SIGPWR at once; each time runs until the tool returns with the container gone".into()],
            },
            Section {
                title: "whole process (payload exits at once)".into(),
                table: whole_t,
                notes: vec!["start of `lxc-execute` / `runc run` (foreground) to its exit, container removed; DESIGN.md measured lxc-execute ≈ 14 ms and runc ≈ 31 ms whole-process on this machine".into()],
            },
            Section {
                title: "berth's start and stop, broken down".into(),
                table: parts_t,
                notes: vec!["`start_ms` / `stop_ms` are the daemon's own timings from `berth --json start/stop`; the rest of the CLI wall time is the CLI process, the admin socket and the image mount".into()],
            },
        ],
        raw: raw_json(o),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_config_mirrors_berths_keys() {
        let c = bare_lxc_config(Path::new("/r"), Path::new("/d"), Path::new("/l"), "bb-1");
        assert!(c.contains("lxc.rootfs.path = dir:/r\n"));
        assert!(c.contains("lxc.mount.entry = /d data none bind,rw,nosuid,nodev 0 0\n"));
        assert!(c.contains("lxc.cgroup.dir.container = bb-1/bare\n"));
        assert!(c.contains("lxc.cgroup.dir.monitor = bb-1.monitor/bare\n"));
        assert!(c.contains("lxc.net.0.type = empty\n"));
    }

    #[test]
    fn runc_spec_is_adapted() {
        let spec = json!({"process": {"terminal": true, "args": ["sh"]}, "root": {"path": "rootfs"},
                          "mounts": [{"destination": "/proc"}], "linux": {}});
        let argv = vec!["/bin/x".to_string(), "/data/t0".into(), "wait".into()];
        let s = runc_config(
            spec,
            &argv,
            Path::new("/r"),
            Path::new("/d"),
            "/p.runc/wait",
        )
        .unwrap();
        assert_eq!(s["process"]["terminal"], false);
        assert_eq!(s["process"]["args"][2], "wait");
        assert_eq!(s["root"]["readonly"], true);
        assert_eq!(s["root"]["path"], "/r");
        assert_eq!(s["mounts"].as_array().unwrap().len(), 4);
        assert_eq!(s["linux"]["cgroupsPath"], "/p.runc/wait");
    }
}
