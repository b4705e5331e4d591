//! governor: what the adaptive CPU governor buys the device's main service (DESIGN.md
//! decision 4), and what the daemon's monitoring costs.
//!
//! The main service runs in this process: one thread pinned to CPU 0 serving HTTP/1.0 on
//! 127.0.0.1, each request ~5 ms of CPU on an idle CPU, kept busy by a load generator that
//! always has one request outstanding. A client sends a request every 20 ms and records its
//! response time (it queues behind the traffic, like any client of a busy service). The hog
//! container runs two busy loops pinned to CPU 0 (`busybox taskset` in its script); the
//! sandbox's parent cgroup gets 10× the default CPU weight, so that under the static cap
//! (T_u = 50 % of all CPUs = the whole of CPU 0) the containers could take ~90 % of CPU 0
//! from the service (tests/governor.rs explains why both are needed to make them compete on a
//! 2-CPU machine). Cases, each over the same window:
//!
//! 1. idle containers (the governor running, cap at T_u);
//! 2. the hog with the governor (`[governor]` http probe every 500 ms, R_n learned in 1.);
//! 3. the hog without a governor (the daemon restarted without `[governor]`: static cap).
//!
//! Daemon overhead: its CPU time (utime + stime of /proc/PID/stat) over a window with the
//! containers idle, with and without the governor.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{Ctx, Suite};
use crate::report::{ms, Section, SuiteOutput, Table};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::stats::{percentile, summarize};
use crate::util::{progress, sleep, Result};

pub const PKG: &str = "bench-hog";
const HOG: &str =
    "/bin/busybox taskset -p -c 0 $$ >/dev/null\nwhile :; do :; done &\nwhile :; do :; done\n";

#[derive(Default)]
pub struct Governor;

fn work(iters: u64) -> u64 {
    let mut x = 0x9e3779b97f4a7c15u64;
    for i in 0..iters {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = x.wrapping_add(i);
    }
    std::hint::black_box(x)
}

fn pin_to_cpu0() -> Result<()> {
    let me = std::fs::read_link("/proc/thread-self").map_err(|e| format!("thread-self: {e}"))?;
    let tid = me
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .to_string();
    crate::util::run(std::process::Command::new("taskset").args(["-p", "-c", "0", &tid]))?;
    Ok(())
}

/// The main service and its traffic; stopped on drop.
struct Service {
    port: u16,
    done: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Service {
    fn start(iters: u64) -> Result<Service> {
        let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
        let port = l.local_addr().map_err(|e| e.to_string())?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let pinned = Arc::new(Mutex::new(None));
        let (s, p) = (stop.clone(), pinned.clone());
        std::thread::spawn(move || {
            *p.lock().unwrap() = Some(pin_to_cpu0().map_err(|e| e.to_string()));
            for c in l.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut c) = c else { continue };
                let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                let mut head = Vec::new();
                let mut b = [0u8; 512];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut b) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                work(iters);
                let _ = c.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok");
            }
        });
        let done = Arc::new(AtomicUsize::new(0));
        let (d, s) = (done.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                if get(port).is_some() {
                    d.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        let t0 = Instant::now();
        while pinned.lock().unwrap().is_none() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Some(Err(e)) = pinned.lock().unwrap().take() {
            return Err(format!("pinning the main service to CPU 0: {e}").into());
        }
        Ok(Service { port, done, stop })
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// One request's response time, seconds.
fn get(port: u16) -> Option<f64> {
    let t = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(b"GET /m HTTP/1.0\r\n\r\n").ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    out.starts_with(b"HTTP/1.0 200")
        .then(|| t.elapsed().as_secs_f64())
}

/// One case: response times (ms) of a request every 20 ms, and the traffic's throughput.
struct Case {
    label: &'static str,
    latencies_ms: Vec<f64>,
    throughput: f64,
    cap: Option<f64>,
}

fn measure(svc: &Service, label: &'static str, window: Duration, cap: Option<f64>) -> Result<Case> {
    let (n0, t0) = (svc.done.load(Ordering::SeqCst), Instant::now());
    let mut lat = Vec::new();
    while t0.elapsed() < window {
        crate::util::check_interrupted()?;
        if let Some(l) = get(svc.port) {
            lat.push(l * 1000.0);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let throughput = (svc.done.load(Ordering::SeqCst) - n0) as f64 / t0.elapsed().as_secs_f64();
    if lat.len() < 10 {
        return Err(format!("governor: only {} answers in {label}", lat.len()).into());
    }
    Ok(Case {
        label,
        latencies_ms: lat,
        throughput,
        cap,
    })
}

/// utime + stime of a process, seconds.
fn cpu_seconds(pid: i32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0) // USER_HZ is 100 on Linux
}

/// The daemon's CPU use over `window`, percent of one CPU.
fn daemon_cpu(sb: &Sandbox, window: Duration) -> Result<f64> {
    let pid = sb.daemon_pid().ok_or("governor: no daemon")?;
    let (c0, t0) = (cpu_seconds(pid).ok_or("daemon stat")?, Instant::now());
    sleep(window)?;
    let c1 = cpu_seconds(pid).ok_or("daemon stat")?;
    Ok((c1 - c0) * 100.0 / t0.elapsed().as_secs_f64())
}

/// Rewrites the configuration with `governor` (a TOML section or "") and restarts the daemon;
/// containers keep running across the restart.
fn restart_with(sb: &mut Sandbox, base: &str, governor: &str) -> Result<()> {
    std::fs::write(&sb.config, format!("{base}{governor}"))
        .map_err(|e| format!("write {}: {e}", sb.config.display()))?;
    sb.stop_daemon();
    sb.start_daemon()
}

fn cap_percent(sb: &Sandbox) -> Option<f64> {
    sb.json(&["governor"]).ok()?["cap"].as_f64()
}

impl Suite for Governor {
    fn name(&self) -> &'static str {
        "governor"
    }

    fn prepare(&mut self, _sb: &Sandbox) -> Result<Vec<PkgSpec>> {
        Ok(vec![PkgSpec {
            name: PKG.into(),
            argv: vec!["/bin/busybox".into(), "sh".into(), "/run.sh".into()],
            files: vec![("run.sh".into(), HOG.as_bytes().to_vec(), 0o644)],
            busybox: true,
            host_base: false,
        }])
    }

    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput> {
        let w = Windows {
            case: Duration::from_secs(if ctx.quick { 5 } else { 15 }),
            overhead: Duration::from_secs(if ctx.quick { 10 } else { 30 }),
        };
        let sb = &mut *ctx.sb;
        let base = std::fs::read_to_string(&sb.config)
            .map_err(|e| format!("read {}: {e}", sb.config.display()))?;
        // The governor works between T_l and the device's T_u: the default 50 %, not the
        // sandbox's 100 % (which keeps the group budget out of host-vs-guest comparisons).
        let gov_base = base.replace(crate::sandbox::UNCAPPED_POLICY, "");
        let svc = Service::start(iters_per_request())?;
        let r = measure_cases(sb, &svc, &gov_base, &w);
        drop(svc);
        // Whatever happened, the next suites get the daemon they started with.
        if std::fs::read_to_string(&sb.config).ok().as_deref() != Some(base.as_str()) {
            let _ = sb.ok(&["stop", "-t", "2", PKG]);
            restart_with(sb, &base, "")?;
        }
        Ok(report(&r?, &w))
    }
}

/// How long each case is measured, and the daemon's CPU use.
struct Windows {
    case: Duration,
    overhead: Duration,
}

/// What the cases came to.
struct Outcome {
    cases: Vec<Case>,
    /// The daemon's CPU use without and with the governor, % of one CPU.
    cpu_off: f64,
    cpu_on: f64,
    /// `berth --json governor` after the hog case with the governor.
    state: Value,
}

/// The work loop's iterations for ~5 ms of CPU.
fn iters_per_request() -> u64 {
    let t = Instant::now();
    work(2_000_000);
    ((2_000_000.0 * 0.005 / t.elapsed().as_secs_f64()) as u64).max(10_000)
}

/// The sandbox's parent cgroup at 10× the default CPU weight (v1 shares, v2 weight).
fn raise_weight(sb: &Sandbox) -> Result<()> {
    let (file, value) = if std::path::Path::new("/sys/fs/cgroup/cpu/cgroup.procs").exists() {
        (
            format!("/sys/fs/cgroup/cpu/{}/cpu.shares", sb.cgroup_parent),
            "10240",
        )
    } else {
        (
            format!("/sys/fs/cgroup/{}/cpu.weight", sb.cgroup_parent),
            "1000",
        )
    };
    std::fs::write(&file, value).map_err(|e| format!("{file}: {e}").into())
}

/// Waits until the governor has learned R_n and works at T_u (120 s at most).
fn wait_active(sb: &Sandbox) -> Result<()> {
    let t0 = Instant::now();
    let mut v = sb.json(&["governor"])?;
    while !(v["mode"] == "active" && v["cap"].as_f64() == Some(50.0)) {
        if t0.elapsed() > Duration::from_secs(120) {
            return Err(format!("governor: not active at T_u after 120 s: {v}").into());
        }
        sleep(Duration::from_millis(500))?;
        v = sb.json(&["governor"])?;
    }
    Ok(())
}

/// The daemon's overhead without and with the governor, then the three cases; the daemon
/// is left without a governor (the caller restores its configuration).
fn measure_cases(sb: &mut Sandbox, svc: &Service, gov_base: &str, w: &Windows) -> Result<Outcome> {
    let section = format!(
        "[governor]\nprobe = \"http://127.0.0.1:{}/probe\"\ninterval = \"500ms\"\ntimeout = \"300ms\"\nlearn = \"5s\"\n",
        svc.port
    );
    progress!("governor: daemon overhead without a governor");
    let cpu_off = daemon_cpu(sb, w.overhead)?;
    restart_with(sb, gov_base, &section)?;
    raise_weight(sb)?;
    progress!("governor: learning R_n");
    wait_active(sb)?;
    progress!("governor: daemon overhead with the governor");
    let cpu_on = daemon_cpu(sb, w.overhead)?;
    let mut cases = Vec::new();
    progress!("governor: idle containers");
    cases.push(measure(svc, "idle containers", w.case, cap_percent(sb))?);
    sb.ok(&["start", PKG])?;
    let t0 = Instant::now();
    while cap_percent(sb).unwrap_or(50.0) > 40.0 && t0.elapsed() < Duration::from_secs(30) {
        sleep(Duration::from_millis(500))?;
    }
    sleep(Duration::from_secs(3))?;
    progress!("governor: CPU hog, governor");
    let mut c = measure(svc, "CPU hog, governor", w.case, cap_percent(sb))?;
    c.cap = cap_percent(sb).or(c.cap);
    cases.push(c);
    let state = sb.json(&["governor"])?;
    restart_with(sb, gov_base, "")?;
    raise_weight(sb)?;
    sleep(Duration::from_secs(2))?;
    progress!("governor: CPU hog, no governor");
    let label = "CPU hog, no governor (static cap)";
    cases.push(measure(svc, label, w.case, Some(50.0))?);
    sb.ok(&["stop", "-t", "2", PKG])?;
    Ok(Outcome {
        cases,
        cpu_off,
        cpu_on,
        state,
    })
}

/// Response times and throughput per case, relative to the idle case.
fn cases_table(cases: &[Case]) -> (Table, Vec<Value>) {
    let sorted = |c: &Case| {
        let mut v = c.latencies_ms.clone();
        v.sort_by(f64::total_cmp);
        v
    };
    let base_case = &cases[0];
    let b = sorted(base_case);
    let (b50, b99) = (percentile(&b, 0.5), percentile(&b, 0.99));
    let mut t = Table::new(&[
        "case",
        "p50 ms",
        "p99 ms",
        "p50 / idle",
        "p99 / idle",
        "throughput req/s",
        "/ idle",
        "cap % of all CPUs",
    ]);
    let mut raw_cases = Vec::new();
    for c in cases {
        let s = sorted(c);
        let (p50, p99) = (percentile(&s, 0.5), percentile(&s, 0.99));
        t.row(vec![
            c.label.into(),
            ms(p50),
            ms(p99),
            format!("{:.2}", p50 / b50),
            format!("{:.2}", p99 / b99),
            format!("{:.0}", c.throughput),
            format!("{:.2}", c.throughput / base_case.throughput),
            c.cap.map_or("–".into(), |x| format!("{x:.1}")),
        ]);
        raw_cases.push(json!({
            "case": c.label, "p50_ms": p50, "p99_ms": p99, "throughput": c.throughput,
            "cap": c.cap, "summary": summarize(&c.latencies_ms), "latencies_ms": c.latencies_ms,
        }));
    }
    (t, raw_cases)
}

fn report(r: &Outcome, w: &Windows) -> SuiteOutput {
    let (t, raw_cases) = cases_table(&r.cases);
    let (cpu_off, cpu_on) = (r.cpu_off, r.cpu_on);
    let mut o = Table::new(&["daemon", "CPU % of one CPU (idle containers)"]);
    o.row(vec!["no governor".into(), format!("{cpu_off:.3}")]);
    o.row(vec![
        "governor, http probe every 500 ms".into(),
        format!("{cpu_on:.3}"),
    ]);
    SuiteOutput {
        name: "governor",
        sections: vec![
            Section {
                title: "governor: main-service response time under a CPU hog".into(),
                table: t,
                notes: vec![
                    format!(
                        "Main service pinned to CPU 0, ~5 ms of CPU per request, one request always outstanding; a request every 20 ms measured over {} s per case. Hog: 2 busy loops on CPU 0, the containers' group at 10× CPU weight. Governor: http probe every 500 ms, T_l 5 %, T_u 50 %; R_n learned {:.1}/s.",
                        w.case.as_secs(),
                        r.state["r_n"].as_f64().unwrap_or(0.0)
                    ),
                ],
            },
            Section {
                title: "governor: the daemon's own monitoring".into(),
                table: o,
                notes: vec![format!(
                    "utime + stime of the daemon from /proc/PID/stat over {} s, containers idle.",
                    w.overhead.as_secs()
                )],
            },
        ],
        raw: json!({
            "cases": raw_cases,
            "daemon_cpu_percent": {"without": cpu_off, "with_governor": cpu_on},
            "governor": r.state,
        }),
    }
}
