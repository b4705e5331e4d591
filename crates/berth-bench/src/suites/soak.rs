//! soak: months unattended, compressed (issue 35). Rounds of mixed operations through the
//! admin API and the container API, in a sandbox and a network namespace of its own, while
//! the daemon and what it owns on the host are sampled after every round. Each sample is fit
//! against the operations done so far; a resource grows when its slope's 95 % interval lies
//! above zero **and** the median of the last third of the rounds is above that of the first
//! third by more than the resource's floor (one object for counts). Any growth is an error
//! of the suite, so the run's self-check fails.
//!
//! One round: `sk-tmp` (isolated network: a veth, the bridge, nft rules) installed, started,
//! stopped and removed with its /data; `sk-app` upgraded to a healthy version (kept) and to
//! one that never becomes healthy (rolled back); `sk-web`'s payload killed (restarted), made
//! unhealthy by its health probe (ended and restarted), restarted by hand, `sk-lib` bound
//! into it and out again, a schedule added, listed and removed, its log read and followed,
//! metrics, status, stats, TR-181 and the network view read, and 20 container-API requests
//! from inside it. In the background the whole time: a fleet server polled every second
//! (a DDI server of berth-bench's own, in the namespace) and a schedule that runs every
//! minute. The first fifth of the rounds (at least 3) warm up and are not fit.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use berth_testkit::Pkg;
use serde_json::{json, Value};

use super::{Ctx, Suite};
use crate::report::{Section, SuiteOutput, Table};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::stats::t975;
use crate::util::{poll, progress, Result};

/// The hidden subcommand of berth-bench that is the fleet server.
pub const DDI_SERVER: &str = "__ddi-server";

const APP: &str = "sk-app";
const WEB: &str = "sk-web";
const TMP: &str = "sk-tmp";
const LIB: &str = "sk-lib";

/// Container-API requests per round.
const API_REQUESTS: usize = 20;

pub struct Soak;

const CONFIG: &str = "[upgrade]\ndeadline = \"2s\"\nsettle = \"200ms\"\n\
[network]\nsubnet = \"10.87.0.0/24\"\n";

fn pkg(name: &str, version: &str, script: &str, tables: &str) -> Pkg {
    let mut p = Pkg::script(name, version, script).table(tables);
    p.description = "berth-bench payload".into();
    p
}

/// `sk-app` at version `v`: healthy once it made /tmp/ok, which the `bad` one never does.
fn app(v: &str, bad: bool) -> Pkg {
    let ok = if bad { "" } else { "echo > /tmp/ok\n" };
    pkg(
        APP,
        v,
        &format!("{ok}echo up {v}\nexec sleep 100000\n"),
        "[restart]\npolicy = \"never\"\n[health]\ncmd = [\"/bin/busybox\", \"test\", \"-e\", \"/tmp/ok\"]\ninterval = \"100ms\"\ntimeout = \"1s\"\nretries = 100\n",
    )
}

fn packages() -> Vec<Pkg> {
    vec![
        pkg(
            WEB,
            "1",
            "echo up\nexec sleep 100000\n",
            "[restart]\npolicy = \"always\"\ndelay = \"0ms\"\nmax_retries = 1000\nreset_period = \"2s\"\n\
             [health]\ncmd = [\"/bin/busybox\", \"sh\", \"-c\", \"! test -e /data/sick\"]\ninterval = \"200ms\"\ntimeout = \"1s\"\nretries = 2\n\
             [permissions]\napi = [\"status\", \"logs\", \"schedule\"]\n",
        ),
        pkg(
            TMP,
            "1",
            "echo hello > /data/hello\necho up\nexec sleep 100000\n",
            "[network]\nmode = \"isolated\"\n",
        ),
        pkg(LIB, "1", "exit 0\n", "").file("lib/data.txt", &[7u8; 4096]),
        app(&version(0), false),
    ]
}

/// The upgrades' versions: each round offers two newer ones.
fn version(n: usize) -> String {
    format!("1.0.{n}")
}

/// `berth-bench __ddi-server ADDR LOG`: a hawkBit DDI server that answers every request
/// with a one-second polling time and no action. It appends `listening PORT` to LOG once it
/// is bound, then one line per request.
pub fn ddi_server(args: &[String]) -> i32 {
    let [addr, log] = args else {
        eprintln!("usage: berth-bench {DDI_SERVER} ADDR LOG");
        return 2;
    };
    let opened = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(log);
    let (listener, mut out) = match (TcpListener::bind(addr), opened) {
        (Ok(l), Ok(f)) => (l, f),
        (Err(e), _) => {
            eprintln!("{addr}: {e}");
            return 1;
        }
        (_, Err(e)) => {
            eprintln!("{log}: {e}");
            return 1;
        }
    };
    let port = listener.local_addr().map_or(0, |a| a.port());
    let _ = writeln!(out, "listening {port}");
    let body = r#"{"config":{"polling":{"sleep":"00:00:01"}},"_links":{}}"#;
    let answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/hal+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    for conn in listener.incoming() {
        let Ok(mut s) = conn else { continue };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let mut head = Vec::new();
        let mut r = BufReader::new(&s);
        loop {
            let mut line = String::new();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) if line == "\r\n" => break,
                Ok(_) => head.push(line),
            }
        }
        let _ = s.write_all(answer.as_bytes());
        let first = head.first().map_or("", |l| l.trim_end());
        let _ = writeln!(out, "{first}");
    }
    0
}

/// The fleet server of [`ddi_server`] on a free port of the loopback (of `netns`, when
/// given); its log under the sandbox, so a killed run's sweep finds the process by it.
pub struct FleetServer {
    child: Option<Child>,
    log: PathBuf,
    pub port: u16,
}

impl FleetServer {
    pub fn start(log: PathBuf, netns: Option<&str>) -> Result<FleetServer> {
        let me = std::env::current_exe().map_err(|e| format!("berth-bench's own path: {e}"))?;
        let mut c = match netns {
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/run/netns/{ns}")).arg(me);
                c
            }
            None => Command::new(me),
        };
        let child = c
            .args([DDI_SERVER, "127.0.0.1:0"])
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("start the fleet server: {e}"))?;
        let mut server = FleetServer {
            child: Some(child),
            log,
            port: 0,
        };
        server.port = poll(
            Duration::from_secs(10),
            Duration::from_millis(20),
            "the fleet server listening",
            || {
                let text = std::fs::read_to_string(&server.log).ok()?;
                text.lines()
                    .next()?
                    .strip_prefix("listening ")?
                    .parse()
                    .ok()
            },
        )
        .map_err(|e| match server.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(Some(st))) => format!("the fleet server ended ({st}) before it listened"),
            _ => e.to_string(),
        })?;
        Ok(server)
    }

    /// Requests answered so far.
    pub fn polls(&self) -> u64 {
        std::fs::read_to_string(&self.log).map_or(0, |t| t.lines().count().saturating_sub(1) as u64)
    }

    /// `[fleet]` pointing at it, as device `id`, with `poll` until it sets its own.
    pub fn config(&self, id: &str, poll: &str) -> String {
        format!(
            "[fleet]\nserver = \"http://127.0.0.1:{}\"\ncontroller_id = \"{id}\"\npoll = \"{poll}\"\nmax_backoff = \"2s\"\n",
            self.port
        )
    }
}

impl Drop for FleetServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One resource sampled after every round.
struct Probe {
    name: &'static str,
    unit: &'static str,
    /// Growth of the medians (last third over first third) that is not noise.
    floor: f64,
}

const PROBES: &[Probe] = &[
    Probe {
        name: "daemon RSS",
        unit: "KiB",
        floor: 512.0,
    },
    Probe {
        // Private_Dirty: heap, stacks, the allocator's arenas, written data. Not
        // Private_Clean: library pages count there only while no other process maps the
        // library (libcurl's 7 MiB, loaded for the fleet polls, moved between private and
        // shared with what else ran on the machine).
        name: "daemon written memory",
        unit: "KiB",
        floor: 256.0,
    },
    Probe {
        name: "daemon threads",
        unit: "",
        floor: 1.5,
    },
    Probe {
        name: "daemon open fds",
        unit: "",
        floor: 1.5,
    },
    Probe {
        name: "berth's processes",
        unit: "",
        floor: 1.5,
    },
    Probe {
        name: "mounts",
        unit: "",
        floor: 1.5,
    },
    Probe {
        name: "loop devices",
        unit: "",
        floor: 1.5,
    },
    Probe {
        name: "cgroups",
        unit: "",
        floor: 1.5,
    },
    Probe {
        name: "nft rules",
        unit: "",
        floor: 1.5,
    },
    Probe {
        name: "network links",
        unit: "",
        floor: 1.5,
    },
    Probe {
        name: "files under the state directory",
        unit: "",
        floor: 1.5,
    },
    Probe {
        name: "bytes under the state directory",
        unit: "B",
        floor: 65536.0,
    },
    Probe {
        name: "the store's size",
        unit: "B",
        floor: 65536.0,
    },
    Probe {
        name: "bytes under the run directory (a tmpfs: RAM)",
        unit: "B",
        floor: 16384.0,
    },
];

/// The soak's berth: its sandbox with the daemon in a network namespace of its own, the
/// fleet server in it; everything stopped from inside the namespace when dropped.
struct World {
    sb: Sandbox,
    ns: String,
    ddi: Option<FleetServer>,
}

impl Drop for World {
    fn drop(&mut self) {
        self.sb.stop_daemon();
        crate::sandbox::stop_in_netns(&self.sb, &self.ns);
        self.ddi = None;
    }
}

fn sh(cmd: &str) -> Result<String> {
    crate::util::run(Command::new("sh").args(["-c", cmd]))
}

impl World {
    fn create(main: &Sandbox) -> Result<World> {
        let extra = format!("{}{CONFIG}", crate::sandbox::UNCAPPED_POLICY);
        let sb = main.nested("soak", "2s", &extra)?;
        let ns = sb.scope().netns("dev");
        let mut w = World { sb, ns, ddi: None };
        sh(&format!(
            "ip netns add {0} && ip -n {0} link set lo up",
            w.ns
        ))?;
        let ddi = FleetServer::start(w.sb.dir.join("ddi.log"), Some(&w.ns))?;
        w.sb.write_config(&format!("{extra}{}", ddi.config("soak", "1s")))?;
        w.ddi = Some(ddi);
        for p in packages() {
            w.sb.pack_pkg(&p)?;
        }
        w.sb.build_repo()?;
        w.sb.daemon_netns = Some(w.ns.clone());
        w.sb.start_daemon()?;
        w.sb.ok(&["update"])?;
        w.sb.ok(&["install", APP, WEB, TMP, LIB])?;
        w.sb.ok(&["start", APP])?;
        w.sb.ok(&["start", WEB])?;
        w.sb.ok(&[
            "schedule",
            "add",
            WEB,
            "--cron",
            "* * * * *",
            "--",
            "/bin/busybox",
            "true",
        ])?;
        Ok(w)
    }

    fn status(&self, name: &str) -> Result<Value> {
        Ok(self.sb.json(&["status", name])?["containers"][0].clone())
    }

    /// Polls `name`'s status until `f` holds (30 s at most).
    fn until(&self, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Result<Value> {
        poll(
            Duration::from_secs(30),
            Duration::from_millis(20),
            what,
            || {
                let c = self.status(name).ok()?;
                f(&c).then_some(c)
            },
        )
    }

    fn polls(&self) -> u64 {
        self.ddi.as_ref().map_or(0, FleetServer::polls)
    }
}

/// What one round did, by kind.
#[derive(Default)]
struct Ops(std::collections::BTreeMap<&'static str, u64>);

impl Ops {
    fn add(&mut self, kind: &'static str, n: u64) {
        *self.0.entry(kind).or_default() += n;
    }
    fn total(&self) -> u64 {
        self.0.values().sum()
    }
}

/// One round (see the module's doc); `n` numbers the versions it offers.
fn round(w: &mut World, n: usize, ops: &mut Ops) -> Result<()> {
    let sb = &w.sb;
    // a package's whole life, isolated network and /data included
    sb.ok(&["install", TMP])?;
    sb.ok(&["start", TMP])?;
    sb.ok(&["stop", "-t", "1", TMP])?;
    sb.ok(&["remove", "--purge", TMP])?;
    ops.add("install, start, stop, remove", 4);

    // a healthy upgrade, then one rolled back
    sb.pack_pkg(&app(&version(2 * n + 1), false))?;
    remove_older(sb, APP, &version(2 * n + 1))?;
    sb.build_repo()?;
    sb.ok(&["update"])?;
    let up = sb.json(&["upgrade", APP])?;
    if up["upgraded"][0]["to"] != version(2 * n + 1).as_str() {
        return Err(format!("the healthy upgrade was not kept: {up}").into());
    }
    sb.pack_pkg(&app(&version(2 * n + 2), true))?;
    remove_older(sb, APP, &version(2 * n + 2))?;
    sb.build_repo()?;
    sb.ok(&["update"])?;
    let out = sb.output(&["--json", "upgrade", APP])?;
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    if out.status.success() || v["rolled_back"].as_array().is_none_or(Vec::is_empty) {
        return Err(format!("the unhealthy upgrade was not rolled back: {v}").into());
    }
    w.until(APP, "sk-app running its healthy version again", |c| {
        c["state"] == "running" && c["version"] == version(2 * n + 1).as_str()
    })?;
    ops.add("updates and upgrades (one rolled back)", 4);

    // a crash, a health failure, a restart by hand
    let c = w.status(WEB)?;
    let init = c["init_pid"].as_i64().unwrap_or(0);
    let (_, pid) = super::supervise::payload(sb, WEB)?;
    berth_sys::process::kill(pid, libc::SIGKILL).map_err(|e| format!("kill {pid}: {e}"))?;
    let c = w.until(WEB, "sk-web restarted after its crash", |c| {
        c["state"] == "running" && c["init_pid"].as_i64().is_some_and(|p| p != init)
    })?;
    let init = c["init_pid"].as_i64().unwrap_or(0);
    let sick = sb.cfg.paths.data(WEB).join("sick");
    std::fs::write(&sick, b"").map_err(|e| format!("{}: {e}", sick.display()))?;
    w.until(WEB, "sk-web ended by its health probe", |c| {
        c["init_pid"].as_i64().is_some_and(|p| p != init)
    })?;
    std::fs::remove_file(&sick).map_err(|e| format!("{}: {e}", sick.display()))?;
    w.until(WEB, "sk-web healthy again", |c| {
        c["state"] == "running" && c["health"]["status"] == "healthy"
    })?;
    sb.ok(&["restart", WEB])?;
    ops.add("crash, health failure, restart", 3);

    // hot-binding, schedules, logs
    sb.ok(&["bind", LIB, "--into", WEB])?;
    sb.ok(&["unbind", LIB, "--from", WEB])?;
    ops.add("bind, unbind", 2);
    let s = sb.json(&[
        "schedule",
        "add",
        WEB,
        "--cron",
        "0 3 * * *",
        "--",
        "/bin/busybox",
        "true",
    ])?;
    let id = s["id"]
        .as_str()
        .map(String::from)
        .or_else(|| s["id"].as_u64().map(|i| i.to_string()))
        .ok_or_else(|| format!("schedule add: no id in {s}"))?;
    sb.ok(&["schedule", "list", WEB])?;
    sb.ok(&["schedule", "remove", WEB, &id])?;
    ops.add("schedule add, list, remove", 3);
    sb.ok(&["logs", WEB])?;
    let mut follow = sb
        .cmd(&["logs", "-f", WEB])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("berth logs -f: {e}"))?;
    std::thread::sleep(Duration::from_millis(200));
    let _ = follow.kill();
    let _ = follow.wait();
    ops.add("logs, logs -f", 2);

    // the views
    for args in [
        &["metrics"][..],
        &["metrics"],
        &["metrics"],
        &["status"],
        &["stats"],
        &["tr181"],
        &["net"],
    ] {
        sb.ok(args)?;
    }
    ops.add("metrics, status, stats, tr181, net", 7);

    // the container API, from inside sk-web
    w.until(WEB, "sk-web running", |c| c["state"] == "running")?;
    let sock = sb.cfg.paths.api_dir(WEB).join("api.sock");
    let client = super::api::spawn_in(
        sb,
        WEB,
        super::api::CLIENT,
        &[
            &sock.display().to_string(),
            "GET",
            "/v1/self",
            &API_REQUESTS.to_string(),
        ],
    )?;
    let out = client
        .wait_with_output()
        .map_err(|e| format!("the API client: {e}"))?;
    if !out.status.success() {
        return Err(format!("the API client: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    ops.add("container API requests", API_REQUESTS as u64);
    Ok(())
}

/// The repository offers only `keep` of `name` from now on.
fn remove_older(sb: &Sandbox, name: &str, keep: &str) -> Result<()> {
    let dir = sb.repo.join("packages");
    let keep = format!("{name}-{keep}.sqfs");
    for e in std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .flatten()
    {
        let f = e.file_name().to_string_lossy().into_owned();
        if f.starts_with(&format!("{name}-")) && f != keep {
            std::fs::remove_file(e.path()).map_err(|e| format!("{f}: {e}"))?;
        }
    }
    Ok(())
}

/// Directories below `dir` (itself included), not following links.
fn count_dirs(dir: &Path) -> u64 {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        n += 1;
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
        }
    }
    n
}

/// The cgroups of `parent` and of its siblings named `parent.*` (the monitors', the
/// daemon's), with everything below them, in every hierarchy: the v1 controllers' and the
/// unified one (`/sys/fs/cgroup/unified`, or `/sys/fs/cgroup` itself on a v2-only host).
fn count_cgroups(parent: &str) -> u64 {
    let root = Path::new("/sys/fs/cgroup");
    let hierarchies = std::iter::once(root.to_path_buf()).chain(
        std::fs::read_dir(root)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path()),
    );
    let dotted = format!("{parent}.");
    hierarchies
        .flat_map(|h| std::fs::read_dir(h).into_iter().flatten().flatten())
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n == parent || n.starts_with(&dotted)
        })
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| count_dirs(&e.path()))
        .sum()
}

/// Files (anything but directories) below `dir` and their bytes, on `dir`'s file system
/// only (images mounted below are not the state's), not following links.
fn files_and_bytes(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(root) = std::fs::symlink_metadata(dir) else {
        return (0, 0);
    };
    let (mut files, mut bytes) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.dev() != root.dev() {
                continue;
            }
            if m.is_dir() {
                stack.push(e.path());
            } else {
                files += 1;
                bytes += m.len();
            }
        }
    }
    (files, bytes)
}

/// Every probe's value now, in [`PROBES`]' order.
fn sample(w: &World) -> Result<Vec<f64>> {
    let sb = &w.sb;
    let pid = sb.daemon_pid().ok_or("the daemon is not running")?;
    let mem = crate::procfs::mem(pid)?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map_err(|e| format!("/proc/{pid}/fd: {e}"))?
        .count();
    let procs = crate::procfs::pids()
        .into_iter()
        .filter(|&p| crate::procfs::mentions(&crate::procfs::cmdline(p), &sb.dir))
        .count();
    let mounts = sb.mounts()?.len();
    let dir = sb.dir.display().to_string();
    let loops = std::fs::read_dir("/sys/block")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("loop/backing_file"))
                .is_ok_and(|f| f.starts_with(&dir))
        })
        .count();
    let cgroups = count_cgroups(&sb.cgroup_parent);
    let nft = sh(&format!("ip netns exec {} nft list ruleset", w.ns))?
        .lines()
        .filter(|l| {
            let l = l.trim();
            !l.is_empty()
                && !l.ends_with('{')
                && l != "}"
                && !l.starts_with("type ")
                && !l.starts_with("policy ")
        })
        .count();
    let links = sh(&format!("ip -n {} -o link show", w.ns))?.lines().count();
    let (files, bytes) = files_and_bytes(&sb.state_dir());
    let (_, store) = files_and_bytes(&sb.cfg.paths.store());
    let (_, run) = files_and_bytes(&sb.run_dir());
    Ok(vec![
        mem.rss_kib as f64,
        mem.private_dirty_kib as f64,
        mem.threads as f64,
        fds as f64,
        procs as f64,
        mounts as f64,
        loops as f64,
        cgroups as f64,
        nft as f64,
        links as f64,
        files as f64,
        bytes as f64,
        store as f64,
        run as f64,
    ])
}

/// A least-squares line through (x, y): slope and the half-width of its 95 % interval.
pub fn slope(x: &[f64], y: &[f64]) -> (f64, f64) {
    let n = x.len();
    if n < 3 {
        return (f64::NAN, f64::NAN);
    }
    let mx = x.iter().sum::<f64>() / n as f64;
    let my = y.iter().sum::<f64>() / n as f64;
    let sxx: f64 = x.iter().map(|a| (a - mx).powi(2)).sum();
    let sxy: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    if sxx == 0.0 {
        return (f64::NAN, f64::NAN);
    }
    let b = sxy / sxx;
    let a = my - b * mx;
    let sse: f64 = x
        .iter()
        .zip(y)
        .map(|(xi, yi)| (yi - a - b * xi).powi(2))
        .sum();
    let se = (sse / (n - 2) as f64 / sxx).sqrt();
    (b, t975(n - 2) * se)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    crate::stats::percentile(&s, 0.5)
}

/// A probe's verdict over the fitted rounds: (slope per 1000 operations, its ±, growth of
/// the medians from the first third to the last, grows). It grows when the slope's interval
/// is above zero, the last third's median exceeds the first's by more than `floor`, and the
/// middle third's lies strictly between them: a leak climbs through all three, while one
/// step (a thread made once, late) leaves two thirds level.
pub fn verdict(ops: &[f64], ys: &[f64], floor: f64) -> (f64, f64, f64, bool) {
    let (b, ci) = slope(ops, ys);
    let third = (ys.len() / 3).max(1);
    let first = median(&ys[..third]);
    let middle = median(&ys[third..ys.len() - third]);
    let last = median(&ys[ys.len() - third..]);
    let growth = last - first;
    let grows = b.is_finite() && b - ci > 0.0 && growth > floor && first < middle && middle < last;
    (b * 1000.0, ci * 1000.0, growth, grows)
}

impl Suite for Soak {
    fn name(&self) -> &'static str {
        "soak"
    }

    fn prepare(&mut self, _sb: &Sandbox) -> Result<Vec<PkgSpec>> {
        Ok(Vec::new())
    }

    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput> {
        let rounds = ctx
            .runs_given
            .unwrap_or(if ctx.quick { 16 } else { 300 })
            .max(6);
        let warmup = (rounds / 5).max(3);
        let mut w = World::create(ctx.sb)?;
        let t0 = Instant::now();
        let mut mix = Ops::default();
        let (mut xs, mut samples) = (Vec::new(), Vec::new());
        let polls0 = w.polls();
        for n in 0..rounds {
            progress!("soak: round {}/{rounds}", n + 1);
            crate::util::check_interrupted()?;
            round(&mut w, n, &mut mix)?;
            let polls = w.polls() - polls0;
            let total = mix.total() + polls;
            xs.push(total as f64);
            let s = sample(&w)?;
            if s.len() != PROBES.len() {
                return Err(format!("{} samples for {} probes", s.len(), PROBES.len()).into());
            }
            samples.push(s);
        }
        let secs = t0.elapsed().as_secs_f64();
        if w.polls() == polls0 {
            return Err("the daemon never polled the fleet server".into());
        }
        mix.add("fleet polls (background)", w.polls() - polls0);
        Ok(output(rounds, warmup, secs, &mix, &xs, &samples))
    }
}

fn output(
    rounds: usize,
    warmup: usize,
    secs: f64,
    mix: &Ops,
    xs: &[f64],
    samples: &[Vec<f64>],
) -> SuiteOutput {
    let mut t = Table::new(&[
        "resource",
        "first",
        "last",
        "slope per 1000 ops (95 % CI)",
        "medians' growth",
        "verdict",
    ]);
    let mut errors = Vec::new();
    let mut raw_probes = serde_json::Map::new();
    let fx = &xs[warmup..];
    for (i, p) in PROBES.iter().enumerate() {
        let ys: Vec<f64> = samples.iter().map(|s| s[i]).collect();
        let (b, ci, growth, grows) = verdict(fx, &ys[warmup..], p.floor);
        if grows {
            errors.push(json!(format!(
                "{} grows: {b:+.2} {} per 1000 operations (± {ci:.2}), {growth:+.0} from the first third of the rounds to the last",
                p.name, p.unit
            )));
        }
        t.row(vec![
            p.name.into(),
            format!("{} {}", ys[warmup], p.unit),
            format!("{} {}", ys[ys.len() - 1], p.unit),
            format!("{b:+.2} ± {ci:.2} {}", p.unit),
            format!("{growth:+.0}"),
            if grows { "GROWS" } else { "flat" }.into(),
        ]);
        raw_probes.insert(
            p.name.into(),
            json!({"unit": p.unit, "values": ys, "slope_per_1000": b, "ci95": ci,
                   "median_growth": growth, "floor": p.floor, "grows": grows}),
        );
    }
    let mut m = Table::new(&["operation", "count"]);
    for (k, v) in &mix.0 {
        m.row(vec![(*k).into(), v.to_string()]);
    }
    m.row(vec!["all".into(), mix.total().to_string()]);
    let total = mix.total();
    SuiteOutput {
        name: "soak",
        sections: vec![
            Section {
                title: format!(
                    "soak: {total} operations in {rounds} rounds, {:.0} s; what the daemon and the host hold after each round",
                    secs
                ),
                table: t,
                notes: vec![
                    format!("the first {warmup} rounds warm up and are not fit; \"first\" is the first fitted round"),
                    "a resource GROWS when its slope's 95 % interval is above zero and the median of the last third of the rounds exceeds the first third's by more than its floor (512 KiB of RSS, 256 KiB of written memory, 64 KiB of bytes on flash, 16 KiB in the run directory, two of anything counted) and the middle third's median lies between the two".into(),
                ],
            },
            Section {
                title: "soak: the operations".into(),
                table: m,
                notes: Vec::new(),
            },
        ],
        raw: json!({
            "rounds": rounds,
            "warmup": warmup,
            "seconds": secs,
            "operations": total,
            "ops_after_round": xs,
            "mix": mix.0,
            "probes": raw_probes,
            "errors": errors,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_and_its_interval() {
        let x: Vec<f64> = (0..10).map(|i| i as f64 * 100.0).collect();
        let y: Vec<f64> = x.iter().map(|v| 5.0 + 0.02 * v).collect();
        let (b, ci) = slope(&x, &y);
        assert!((b - 0.02).abs() < 1e-12 && ci.abs() < 1e-9, "{b} {ci}");
        // noise without a trend: the interval holds zero
        let noisy = [3.0, 5.0, 4.0, 3.0, 5.0, 4.0, 3.0, 5.0, 4.0, 3.0];
        let (b, ci) = slope(&x, &noisy);
        assert!(b - ci < 0.0 && b + ci > 0.0, "{b} ± {ci}");
    }

    #[test]
    fn growth_needs_a_slope_and_the_medians_beyond_the_floor() {
        let x: Vec<f64> = (0..12).map(|i| i as f64 * 50.0).collect();
        // one more fd every round: grows
        let leak: Vec<f64> = (0..12).map(|i| 20.0 + i as f64).collect();
        assert!(verdict(&x, &leak, 1.5).3);
        // constant: flat
        assert!(!verdict(&x, &[20.0; 12], 1.5).3);
        // one step early, then flat: the medians of the first and last thirds are equal
        let step: Vec<f64> = (0..12).map(|i| if i == 0 { 19.0 } else { 20.0 }).collect();
        assert!(!verdict(&x, &step, 1.5).3);
        // one step in the middle (a thread made once): a significant slope, the last third
        // above the first, but no climb through the middle
        for at in [4, 6, 8] {
            let step: Vec<f64> = (0..12).map(|i| if i < at { 7.0 } else { 8.0 }).collect();
            let (b, ci, growth, grows) = verdict(&x, &step, 1.5);
            assert!(b - ci > 0.0 && growth == 1.0 && !grows, "step at {at}");
            // and a step of two, early or late, leaves two thirds level
            let two: Vec<f64> = (0..12).map(|i| if i < at { 7.0 } else { 9.0 }).collect();
            assert_eq!(verdict(&x, &two, 1.5).3, at == 6, "two at {at}");
        }
        // a slow leak, one every third round: grows
        let slow: Vec<f64> = (0..12).map(|i| 30.0 + (i / 3) as f64).collect();
        assert!(verdict(&x, &slow, 1.5).3);
        // memory creeping by less than its floor over the run: not called growth
        let creep: Vec<f64> = (0..12).map(|i| 1000.0 + i as f64 * 4.0).collect();
        assert!(!verdict(&x, &creep, 256.0).3);
        let (per1000, _, growth, _) = verdict(&x, &creep, 256.0);
        assert!((per1000 - 80.0).abs() < 1e-6 && growth > 0.0);
    }
}
