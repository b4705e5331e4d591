//! fleet: berth as a hawkBit DDI device in a simulated fleet (docs/fleet.md). gooseBit (PyPI,
//! a DDI server) runs in a network namespace with a bridge, and N berth daemons (200; 10 with
//! `--quick`), each in a namespace of its own with its own state, poll it. Measured, with
//! nftables counters in the server's namespace (every packet between devices and server):
//!
//! - the time to roll a bundle out to every device: a first bundle that installs and starts a
//!   package, an upgrade as a whole bundle, and the same kind of upgrade as an index-only
//!   bundle whose image comes as a delta from the repository (docs/repository.md);
//! - bytes per device for each of the three (both directions, IP level);
//! - requests per device per idle poll, and so per hour at the default 5-minute poll;
//! - the daemon's RSS with the client polling, beside the same daemon without `[fleet]`;
//! - gooseBit's RSS and its CPU time per DDI request (how many polls one core answers);
//! - the same idle polls over https:// (uvicorn's TLS in front of gooseBit, client
//!   certificates asked for): bytes and CPU per poll and the daemon's memory, libcurl and
//!   its TLS library in it.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use berth_testkit::fleet::{self, Goosebit, SERVER_IP};
use berth_testkit::Pkg;
use serde_json::{json, Value};

use super::{Ctx, Suite};
use crate::report::{bytes, Section, SuiteOutput, Table};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::stats::percentile;
use crate::util::{last_lines, poll, progress, run, Result};

pub struct Fleet;

/// The poll time the server gives while measuring (gooseBit's `poll_time`).
const POLL_S: u64 = 5;
/// The default poll time of a device (`[fleet] poll`, and hawkBit's usual).
const DEFAULT_POLL_S: u64 = 300;

/// The devices' own poll time, until the server's (POLL_S) comes with the first answer: the
/// first poll waits up to a tenth of it (a fleet that starts together is spread over 6 s),
/// and a failed one is tried again after it (the default, 5 minutes, would outlast the wait
/// for registration after one failed first poll).
const FIRST_POLL: &str = "poll = \"60s\"\n";

/// Waits up to 300 s for every device in `ids` registered on the server; on time-out, says
/// which are not, with each one's state on the server and its daemon's view of its polls.
fn registered(server: &Goosebit, ids: &[String], devices: &[Sandbox], what: &str) -> Result<()> {
    let waited = poll(
        Duration::from_secs(300),
        Duration::from_millis(500),
        what,
        || server.registered(ids),
    );
    let Err(e) = waited else {
        return Ok(());
    };
    let states = server
        .devices()
        .map(|d| fleet::states(&d, ids))
        .unwrap_or_else(|e| vec![format!("(the server's device list: {e})"); ids.len()]);
    let mut why = format!("{e}:");
    for ((id, st), sb) in ids.iter().zip(&states).zip(devices) {
        if st.starts_with("Registered") {
            continue;
        }
        let view = sb
            .json(&["status"])
            .map(|v| v["fleet"].to_string())
            .unwrap_or_else(|e| format!("berth status: {e}"));
        why.push_str(&format!(
            "\n  {id}: on the server {st:?}; the daemon's fleet view {view}"
        ));
    }
    why.push_str(&format!(
        "\n  gooseBit's log ends:\n{}",
        last_lines(&server.log(), 20, "\n")
    ));
    Err(why.into())
}

/// Version `v` of the payload: busybox (the bulk of the image, the same in every version)
/// and a script; healthy once up. Checked every 30 s (the first check 1 s after the start
/// confirms an upgrade): 200 containers checked every 200 ms kept two cores busy with
/// liblxc attaches alone.
fn app(v: &str) -> Pkg {
    Pkg::script(
        "fleetapp",
        v,
        &format!("echo {v} >> /data/history\necho > /tmp/ok\nexec sleep 100000\n"),
    )
    .file("check.sh", b"test -e /tmp/ok\n")
    .table("[restart]\npolicy = \"never\"\n[health]\ncmd = [\"/bin/busybox\", \"sh\", \"/check.sh\"]\ninterval = \"30s\"\ntimeout = \"10s\"\nretries = 3\n")
}

/// Bytes and packets the server's namespace saw from and to the devices, and connections
/// opened to the DDI port and the repository's.
#[derive(Debug, Clone, Copy, Default)]
struct Count {
    bytes: u64,
    ddi_syn: u64,
    repo_syn: u64,
}

fn counters(ns: &str) -> Result<Count> {
    let out = run(Command::new("ip").args([
        "netns",
        "exec",
        ns,
        "nft",
        "-j",
        "list",
        "table",
        "inet",
        "fleetbench",
    ]))?;
    let v: Value = serde_json::from_str(&out).map_err(|e| format!("nft -j: {e}"))?;
    let mut c = Count::default();
    for item in v["nftables"].as_array().into_iter().flatten() {
        let Some(rule) = item.get("rule") else {
            continue;
        };
        let comment = rule["comment"].as_str().unwrap_or("");
        for e in rule["expr"].as_array().into_iter().flatten() {
            if let Some(k) = e.get("counter") {
                let (b, p) = (
                    k["bytes"].as_u64().unwrap_or(0),
                    k["packets"].as_u64().unwrap_or(0),
                );
                match comment {
                    "bytes" => c.bytes += b,
                    "ddi" => c.ddi_syn += p,
                    "repo" => c.repo_syn += p,
                    _ => {}
                }
            }
        }
    }
    Ok(c)
}

fn minus(a: Count, b: Count) -> Count {
    Count {
        bytes: a.bytes - b.bytes,
        ddi_syn: a.ddi_syn - b.ddi_syn,
        repo_syn: a.repo_syn - b.repo_syn,
    }
}

/// CPU seconds of a process itself (utime + stime) and of its waited-for children (cutime +
/// cstime): fields 14 to 17 of stat(5), counted after the name.
fn cpu_split(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |x| x.1);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let t = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    ((t(11) + t(12)) / 100.0, (t(13) + t(14)) / 100.0)
}

/// CPU seconds a process has used (utime + stime).
fn cpu_s(pid: u32) -> f64 {
    cpu_split(pid).0
}

fn cpu_of(devices: &[Sandbox]) -> Vec<(f64, f64)> {
    devices
        .iter()
        .map(|sb| daemon_pid(sb).map_or((0.0, 0.0), cpu_split))
        .collect()
}

/// Mean CPU milliseconds per poll, the daemons' own and their children's, between two
/// samples `window_s` apart; and the resolution (one clock tick over all the polls).
fn cpu_per_poll(before: &[(f64, f64)], after: &[(f64, f64)], window_s: f64) -> (f64, f64, f64) {
    let polls = window_s / POLL_S as f64 * before.len().max(1) as f64;
    let sum = |f: fn(&(f64, f64)) -> f64| {
        after.iter().map(f).sum::<f64>() - before.iter().map(f).sum::<f64>()
    };
    (
        sum(|c| c.0) * 1000.0 / polls,
        sum(|c| c.1) * 1000.0 / polls,
        10.0 / polls,
    )
}

/// CPU ms, or "< resolution" when no clock tick was counted.
fn cpu_ms(v: f64, resolution: f64) -> String {
    if v < resolution / 2.0 {
        format!("< {resolution:.2} ms")
    } else {
        format!("{v:.2} ms")
    }
}

fn rss_kib(pid: u32) -> u64 {
    crate::procfs::mem(pid as i32)
        .map(|m| m.rss_kib)
        .unwrap_or(0)
}

/// Private_Clean + Private_Dirty: what the process alone holds (no shared library pages).
fn private_kib(pid: u32) -> u64 {
    crate::procfs::mem(pid as i32)
        .map(|m| m.private_kib)
        .unwrap_or(0)
}

/// The python process of gooseBit (`ip netns exec` execs it: the same pid).
fn daemon_pid(sb: &Sandbox) -> Option<u32> {
    std::fs::read_to_string(sb.cfg.paths.daemon_pid())
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

struct Httpd(Child);

impl Drop for Httpd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Suite for Fleet {
    fn name(&self) -> &'static str {
        "fleet"
    }

    fn prepare(&mut self, _sb: &Sandbox) -> Result<Vec<PkgSpec>> {
        Ok(Vec::new())
    }

    fn environment(&self) -> Vec<(String, String)> {
        vec![("gooseBit".into(), fleet::GOOSEBIT_VERSION.into())]
    }

    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput> {
        let Some(venv) = fleet::goosebit_venv() else {
            let why = "gooseBit is not installed (PyPI goosebit; scripts/test.sh puts it in /var/cache/berth-package/goosebit-venv, BERTH_GOOSEBIT names another venv)";
            return Ok(SuiteOutput {
                name: "fleet",
                sections: Vec::new(),
                raw: json!({ "skipped": why }),
            });
        };
        for (tool, pkg) in [
            ("nft", "nftables"),
            ("curl", "curl"),
            ("busybox", "busybox-static"),
        ] {
            if berth_testkit::which(tool).is_none() {
                return Err(format!("{tool} is missing: install the Debian package {pkg}").into());
            }
        }
        let n: usize = std::env::var("BERTH_BENCH_FLEET_DEVICES")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n| (1..=1000).contains(n))
            .unwrap_or(if ctx.quick { 10 } else { 200 });
        let vendor = ctx
            .sb
            .nested("fleet-vendor", "2s", crate::sandbox::UNCAPPED_POLICY)?;
        let scope = vendor.scope().clone();
        let net = fleet::network(
            &scope.netns("fs"),
            (0..n).map(|i| scope.netns(&format!("fd{i}"))).collect(),
        )?;
        counting(&net.server)?;

        let (b1, b2, b3) = bundles(&vendor)?;
        let served = vendor.dir.join("served");
        run(Command::new("cp")
            .args(["-a"])
            .arg(&vendor.repo)
            .arg(&served))?;
        let _httpd = Httpd(
            Command::new("ip")
                .args(["netns", "exec", &net.server])
                .arg(berth_testkit::busybox().map_err(|e| e.to_string())?)
                .args(["httpd", "-f", "-p", &format!("{SERVER_IP}:8080"), "-h"])
                .arg(&served)
                .spawn()
                .map_err(|e| format!("busybox httpd: {e}"))?,
        );
        let server = Goosebit::start(
            &venv,
            &net.server,
            &vendor.dir.join("goosebit"),
            &format!("00:00:{POLL_S:02}"),
            &[],
        )?;

        // The devices.
        progress!("fleet: {n} devices");
        let t_start = Instant::now();
        let mut devices = start_devices(ctx, &net, &vendor, &server)?;
        let ids: Vec<String> = (0..n).map(|i| format!("fd{i}")).collect();
        registered(&server, &ids, &devices, "every device registered")?;
        let started_s = t_start.elapsed().as_secs_f64();
        server.feed(&ids, "all")?;

        let ic = idle_cost(ctx, &net, &server, &devices)?;

        // Three rounds.
        let mut rounds = Vec::new();
        for (v, file, what) in [
            (
                "1",
                &b1,
                "install: a bundle with the image (installs and starts)",
            ),
            ("2", &b2, "upgrade: the whole bundle (index and image)"),
            (
                "3",
                &b3,
                "upgrade: an index-only bundle, the image as a delta from the repository",
            ),
        ] {
            rounds.push(rollout(&server, &net, &devices, v, file, what)?);
        }
        let server_rss = rss_kib(server.pid());
        for sb in &mut devices {
            sb.stop_daemon();
        }
        drop(devices);
        drop(server);
        progress!("fleet: idle polls and an install over TLS, {n} devices");
        let tls = tls_idle(ctx, &venv, &vendor, &net, &b1, ic.window)?;
        drop(net);

        let t = rounds_table(&rounds);
        let idle_t = idle_table(&ic, server_rss);
        let notes = vec![
            format!("{n} berth daemons, each in a network namespace of its own on a bridge to gooseBit {} (one Python process, SQLite) in another; the server's polling time {POLL_S} s while measuring; {started_s:.0} s to start them all and see them registered", fleet::GOOSEBIT_VERSION),
            "bytes and requests: nftables counters in the server's namespace (every IP byte both ways between the devices and the server; TCP connections opened: a poll's requests share one while gooseBit keeps it open, so the DDI columns count connections)".into(),
            "to all devices: from the rollout's creation to the last device's `closed` + `success` in gooseBit's records (each device polls, downloads, installs or upgrades on trial until healthy, reports); p50/p95 of each device's own time".into(),
            "the index-only round: the devices fetch the bundle (the signed index) from gooseBit and the image as a zstd delta from their repository (busybox httpd in the server's namespace)".into(),
        ];
        Ok(SuiteOutput {
            name: "fleet",
            sections: vec![
                Section {
                    title: format!("fleet: rollouts to {n} devices through gooseBit"),
                    table: t,
                    notes,
                },
                Section {
                    title: "fleet: the idle cost".into(),
                    table: idle_t,
                    notes: Vec::new(),
                },
                tls.section(
                    ic.bytes_per_poll,
                    ic.http_cpu,
                    (
                        ic.rss_fleet.iter().sum::<f64>() / ic.rss_fleet.len().max(1) as f64,
                        ic.private_fleet.iter().sum::<f64>() / ic.private_fleet.len().max(1) as f64,
                    ),
                ),
                Section {
                    title: format!("fleet: a rollout to {n} devices over https://"),
                    table: rounds_table(std::slice::from_ref(&tls.round)),
                    notes: vec!["gooseBit behind uvicorn's TLS asking for client certificates, as above; every request of the devices through libcurl (a poll's requests share a connection and its TLS session)".into()],
                },
            ],
            raw: json!({
                "devices": n, "poll_s": POLL_S, "rounds": rounds,
                "idle": {"window_s": ic.window_s, "ddi_requests": ic.ddi_requests, "bytes": ic.bytes,
                         "requests_per_device_per_poll": ic.req_per_poll, "requests_per_device_per_hour_at_default_poll": ic.req_per_hour,
                         "bytes_per_device_per_poll": ic.bytes_per_poll},
                "daemon_rss_kib": {"fleet": ic.rss_fleet, "plain": ic.rss_plain},
                "daemon_private_kib": {"fleet": ic.private_fleet, "plain": ic.private_plain},
                "daemon_cpu_ms_per_poll": ic.http_cpu.0,
                "tls": tls.raw(),
                "server": {"rss_kib": server_rss, "cpu_ms_per_request": ic.cpu_per_req_ms},
                "rollout_s": rounds.iter().map(|r| r["rollout_s"].clone()).collect::<Vec<_>>(),
            }),
        })
    }
}

/// What the fleet costs while nothing is rolled out: measured over idle polls.
struct IdleCost {
    window: Duration,
    window_s: f64,
    ddi_requests: u64,
    bytes: u64,
    /// The daemons' own CPU per poll, their children's, and the resolution (ms).
    http_cpu: (f64, f64, f64),
    req_per_poll: f64,
    req_per_hour: f64,
    bytes_per_poll: f64,
    cpu_per_req_ms: f64,
    rss_fleet: Vec<f64>,
    private_fleet: Vec<f64>,
    rss_plain: u64,
    private_plain: u64,
}

/// The idle polls of every device: requests, bytes and CPU per poll, the daemons' memory
/// beside a daemon without `[fleet]`.
fn idle_cost(
    ctx: &mut Ctx,
    net: &fleet::FleetNet,
    server: &Goosebit,
    devices: &[Sandbox],
) -> Result<IdleCost> {
    let n = devices.len();
    // The same daemon without [fleet], up as long as the devices, for the RSS beside theirs.
    let mut plain = ctx
        .sb
        .nested("fleet-plain", "2s", crate::sandbox::UNCAPPED_POLICY)?;
    plain.start_daemon()?;
    // Idle: requests per device per poll.
    progress!("fleet: idle polls");
    std::thread::sleep(Duration::from_secs(POLL_S * 2));
    let (c0, cpu0, t0) = (counters(&net.server)?, cpu_s(server.pid()), Instant::now());
    let dev_cpu0 = cpu_of(devices);
    let idle_window = Duration::from_secs(if ctx.quick { POLL_S * 4 } else { POLL_S * 12 });
    std::thread::sleep(idle_window);
    let idle = minus(counters(&net.server)?, c0);
    let idle_cpu = cpu_s(server.pid()) - cpu0;
    let window_s = t0.elapsed().as_secs_f64();
    let http_cpu = cpu_per_poll(&dev_cpu0, &cpu_of(devices), window_s);
    let polls_expected = n as f64 * window_s / POLL_S as f64;
    let req_per_poll = idle.ddi_syn as f64 / polls_expected;
    let req_per_hour = req_per_poll * 3600.0 / DEFAULT_POLL_S as f64;
    let bytes_per_poll = idle.bytes as f64 / polls_expected;
    let cpu_per_req_ms = idle_cpu * 1000.0 / idle.ddi_syn.max(1) as f64;
    let rss_fleet: Vec<f64> = devices
        .iter()
        .filter_map(daemon_pid)
        .map(|p| rss_kib(p) as f64)
        .collect();
    let private_fleet: Vec<f64> = devices
        .iter()
        .filter_map(daemon_pid)
        .map(|p| private_kib(p) as f64)
        .collect();
    let rss_plain = daemon_pid(&plain).map_or(0, rss_kib);
    let private_plain = daemon_pid(&plain).map_or(0, private_kib);
    drop(plain);
    Ok(IdleCost {
        window: idle_window,
        window_s,
        ddi_requests: idle.ddi_syn,
        bytes: idle.bytes,
        http_cpu,
        req_per_poll,
        req_per_hour,
        bytes_per_poll,
        cpu_per_req_ms,
        rss_fleet,
        private_fleet,
        rss_plain,
        private_plain,
    })
}

/// The idle cost's table.
fn idle_table(ic: &IdleCost, server_rss: u64) -> Table {
    let mut idle_t = Table::new(&["idle", "value"]);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let rows = [
        (
            "DDI connections per device per poll",
            format!("{:.2}", ic.req_per_poll),
        ),
        (
            &*format!(
                "… per hour at the default {}-minute poll",
                DEFAULT_POLL_S / 60
            ),
            format!("{:.1}", ic.req_per_hour),
        ),
        (
            "bytes per device per poll (both ways, IP)",
            format!("{:.0}", ic.bytes_per_poll),
        ),
        (
            "daemon RSS with [fleet] polling (mean of the devices)",
            format!("{:.0} KiB", mean(&ic.rss_fleet)),
        ),
        (
            "the same daemon without [fleet]",
            format!("{} KiB", ic.rss_plain),
        ),
        (
            "… private memory with [fleet] / without",
            format!("{:.0} / {} KiB", mean(&ic.private_fleet), ic.private_plain),
        ),
        (
            "daemon CPU per poll (its own)",
            cpu_ms(ic.http_cpu.0, ic.http_cpu.2),
        ),
        ("gooseBit RSS", format!("{server_rss} KiB")),
        (
            "gooseBit CPU per DDI request",
            format!(
                "{:.2} ms (≈ {:.0} polls/s per core)",
                ic.cpu_per_req_ms,
                1000.0 / ic.cpu_per_req_ms.max(0.001)
            ),
        ),
    ];
    for (k, v) in rows {
        idle_t.row(vec![k.to_string(), v]);
    }
    idle_t
}

/// Counters in the server's namespace: every byte between the devices and the server, and
/// connections opened.
fn counting(server_ns: &str) -> Result<()> {
    let rules = "table inet fleetbench {\n chain i { type filter hook input priority 0; ip saddr 10.77.0.0/16 counter comment \"bytes\"; tcp dport 60053 tcp flags syn counter comment \"ddi\"; tcp dport 8080 tcp flags syn counter comment \"repo\"; }\n chain o { type filter hook output priority 0; ip daddr 10.77.0.0/16 counter comment \"bytes\"; }\n}\n";
    let mut nft = Command::new("ip")
        .args(["netns", "exec", server_ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|e| format!("nft: {e}"))?;
    std::io::Write::write_all(nft.stdin.as_mut().unwrap(), rules.as_bytes())
        .map_err(|e| e.to_string())?;
    drop(nft.stdin.take());
    if !nft.wait().map_err(|e| e.to_string())?.success() {
        return Err("nft -f: the counters' table was refused".into());
    }
    Ok(())
}

/// The vendor's three bundles: 1 (installs), 2 (whole), 3 (index only, a delta from 2 in the
/// repository the devices use, which is left in `repo-2`).
fn bundles(vendor: &Sandbox) -> Result<(PathBuf, PathBuf, PathBuf)> {
    progress!("fleet: bundles");
    let repo2 = vendor.dir.join("repo-2");
    let key = vendor.key.to_string_lossy().into_owned();
    let bundle = |v: &str, extra: &[&str]| -> Result<PathBuf> {
        for e in std::fs::read_dir(vendor.repo.join("packages"))
            .map_err(|e| e.to_string())?
            .flatten()
        {
            let _ = std::fs::remove_file(e.path());
        }
        vendor.pack_pkg(&app(v))?;
        let out = vendor.dir.join(format!("fleetapp-{v}.berth"));
        let repo = vendor.repo.to_string_lossy().into_owned();
        let mut args = vec!["repo", "build", &repo, "--key", &key];
        let old = repo2.to_string_lossy().into_owned();
        if v == "3" {
            args.extend(["--deltas-from", &old]);
        }
        vendor.ok(&args)?;
        let o = out.to_string_lossy().into_owned();
        let mut b = vec![
            "repo",
            "bundle",
            &repo,
            "-o",
            &o,
            "--version",
            v,
            "--install",
            "fleetapp",
        ];
        b.extend_from_slice(extra);
        vendor.ok(&b)?;
        Ok(out)
    };
    let b1 = bundle("1", &[])?;
    let b2 = bundle("2", &[])?;
    run(Command::new("cp")
        .args(["-a"])
        .arg(&vendor.repo)
        .arg(&repo2))?;
    let b3 = bundle("3", &["--index-only"])?;
    Ok((b1, b2, b3))
}

/// A berth daemon for each device namespace, polling the server.
fn start_devices(
    ctx: &mut Ctx,
    net: &fleet::FleetNet,
    vendor: &Sandbox,
    server: &Goosebit,
) -> Result<Vec<Sandbox>> {
    let mut devices = Vec::new();
    let extra = "[upgrade]\ndeadline = \"30s\"\nsettle = \"500ms\"\n";
    for (i, ns) in net.devices.iter().enumerate() {
        let mut sb = ctx
            .sb
            .nested(&format!("fd{i}"), "2s", crate::sandbox::UNCAPPED_POLICY)?;
        std::fs::copy(
            vendor.dir.join("keys/vendor.pub"),
            sb.dir.join("keys/vendor.pub"),
        )
        .map_err(|e| e.to_string())?;
        let token = sb.dir.join("fleet.token");
        std::fs::write(&token, format!("bench-token-{i}\n")).map_err(|e| e.to_string())?;
        sb.write_config(&format!(
            "{}{extra}[fleet]\nserver = \"{}\"\ncontroller_id = \"fd{i}\"\ntoken_file = \"{}\"\n{FIRST_POLL}",
            crate::sandbox::UNCAPPED_POLICY,
            server.url(""),
            token.display()
        ))?;
        sb.set_repository(&format!("http://{SERVER_IP}:8080"))?;
        sb.daemon_netns = Some(ns.clone());
        sb.start_daemon()?;
        devices.push(sb);
    }
    Ok(devices)
}

/// One rollout to every device: the bundle `file` of version `v` uploaded, rolled out, waited
/// for on the server and on each device; its times and counts.
fn rollout(
    server: &Goosebit,
    net: &fleet::FleetNet,
    devices: &[Sandbox],
    v: &str,
    file: &PathBuf,
    what: &str,
) -> Result<Value> {
    let n = devices.len();
    let ids: Vec<String> = (0..n).map(|i| format!("fd{i}")).collect();
    progress!("fleet: rollout of {v} to {n} devices");
    let sw = server.upload(file)?;
    let c0 = counters(&net.server)?;
    let t0 = Instant::now();
    server.rollout(&format!("fleetapp-{v}"), "all", sw)?;
    let want = format!("Finished {v}");
    let mut done_at: Vec<Option<f64>> = vec![None; n];
    poll(
        Duration::from_secs(900),
        Duration::from_millis(250),
        &format!("bundle {v} on every device"),
        || {
            let d = server.devices().ok()?;
            let st = fleet::states(&d, &ids);
            for (i, s) in st.iter().enumerate() {
                if done_at[i].is_none() && *s == want {
                    done_at[i] = Some(t0.elapsed().as_secs_f64());
                }
                if s.starts_with("Error") {
                    return Some(());
                }
            }
            done_at.iter().all(Option::is_some).then_some(())
        },
    )?;
    let failed: Vec<&String> = ids
        .iter()
        .zip(&done_at)
        .filter(|(_, t)| t.is_none())
        .map(|(id, _)| id)
        .collect();
    if !failed.is_empty() {
        return Err(format!(
            "bundle {v} failed on {failed:?}: {}",
            devices[0].daemon_log_text()
        )
        .into());
    }
    let total_s = t0.elapsed().as_secs_f64();
    // The counters after the last report: wait for the configData that follows.
    std::thread::sleep(Duration::from_secs(1));
    let c = minus(counters(&net.server)?, c0);
    let mut times: Vec<f64> = done_at.into_iter().flatten().collect();
    times.sort_by(f64::total_cmp);
    // Each device says what it runs.
    for sb in devices {
        let s = sb.json(&["status"])?;
        let ok = s["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["name"] == "fleetapp" && c["version"] == v && c["state"] == "running");
        if !ok {
            return Err(format!("{}: fleetapp {v} is not running: {s}", sb.dir.display()).into());
        }
    }
    Ok(json!({
        "version": v, "what": what, "bundle_bytes": std::fs::metadata(file).map(|m| m.len()).unwrap_or(0),
        "rollout_s": total_s, "device_done_s_p50": percentile(&times, 0.5), "device_done_s_p95": percentile(&times, 0.95),
        "bytes_per_device": c.bytes as f64 / n as f64,
        "ddi_requests_per_device": c.ddi_syn as f64 / n as f64,
        "repository_requests_per_device": c.repo_syn as f64 / n as f64,
    }))
}

/// The rollouts' table.
fn rounds_table(rounds: &[Value]) -> Table {
    let mut t = Table::new(&[
        "rollout",
        "bundle",
        "to all devices",
        "device done p50 / p95",
        "bytes per device",
        "DDI connections per device",
        "repository requests per device",
    ]);
    for r in rounds {
        t.row(vec![
            r["what"].as_str().unwrap_or("").to_string(),
            bytes(r["bundle_bytes"].as_u64().unwrap_or(0)),
            format!("{:.1} s", r["rollout_s"].as_f64().unwrap_or(0.0)),
            format!(
                "{:.1} / {:.1} s",
                r["device_done_s_p50"].as_f64().unwrap_or(0.0),
                r["device_done_s_p95"].as_f64().unwrap_or(0.0)
            ),
            bytes(r["bytes_per_device"].as_f64().unwrap_or(0.0) as u64),
            format!(
                "{:.1}",
                r["ddi_requests_per_device"].as_f64().unwrap_or(0.0)
            ),
            format!(
                "{:.1}",
                r["repository_requests_per_device"].as_f64().unwrap_or(0.0)
            ),
        ]);
    }
    t
}

/// The idle polls over https://.
struct TlsIdle {
    devices: usize,
    window_s: f64,
    requests_per_poll: f64,
    bytes_per_poll: f64,
    /// The daemons' CPU (TLS included: libcurl runs in the daemon) and any children's, ms
    /// per poll, and the resolution.
    cpu_ms: (f64, f64, f64),
    /// The daemons' VmRSS and private memory (KiB, median) after the window: libcurl and
    /// its TLS library's pages counted.
    rss_kib: f64,
    private_kib: f64,
    /// The install round of bundle 1 over https://.
    round: Value,
}

impl TlsIdle {
    fn raw(&self) -> Value {
        json!({
            "devices": self.devices, "window_s": self.window_s,
            "requests_per_device_per_poll": self.requests_per_poll,
            "bytes_per_device_per_poll": self.bytes_per_poll,
            "daemon_cpu_ms_per_poll": self.cpu_ms.0, "children_cpu_ms_per_poll": self.cpu_ms.1,
            "daemon_rss_kib": self.rss_kib, "daemon_private_kib": self.private_kib,
            "round": self.round,
        })
    }

    fn section(&self, http_bytes: f64, http_cpu: (f64, f64, f64), http_mem: (f64, f64)) -> Section {
        let mut t = Table::new(&["per idle poll", "http://", "https:// (client certificate)"]);
        t.row(vec![
            "bytes (both ways, IP)".into(),
            format!("{http_bytes:.0}"),
            format!("{:.0}", self.bytes_per_poll),
        ]);
        t.row(vec![
            "requests".into(),
            "1".into(),
            format!("{:.2}", self.requests_per_poll),
        ]);
        t.row(vec![
            "daemon CPU (TLS included)".into(),
            cpu_ms(http_cpu.0, http_cpu.2),
            cpu_ms(self.cpu_ms.0, self.cpu_ms.2),
        ]);
        t.row(vec![
            "children's CPU (berth runs none for a poll)".into(),
            cpu_ms(http_cpu.1, http_cpu.2),
            cpu_ms(self.cpu_ms.1, self.cpu_ms.2),
        ]);
        t.row(vec![
            "daemon VmRSS while polling (median)".into(),
            format!("{:.0} KiB", http_mem.0),
            format!("{:.0} KiB", self.rss_kib),
        ]);
        t.row(vec![
            "daemon private memory while polling (median)".into(),
            format!("{:.0} KiB", http_mem.1),
            format!("{:.0} KiB", self.private_kib),
        ]);
        Section {
            title: format!("fleet: idle polls over TLS ({} devices)", self.devices),
            table: t,
            notes: vec![format!(
                "gooseBit behind uvicorn's TLS asking for client certificates (a test CA made with openssl; P-256 keys), the devices with `ca_file`, `cert_file`, `key_file`; every request through libcurl in the daemon (a full handshake per poll: nothing is kept between polls); CPU from the daemons' /proc stat (utime+stime; cutime+cstime for children) over {:.0} s; memory from /proc/PID/status and smaps_rollup after the window, libcurl and its TLS library mapped",
                self.window_s
            )],
        }
    }
}

/// `k` devices polling an https:// gooseBit (client certificates asked for) for `window`.
fn tls_idle(
    ctx: &mut Ctx,
    venv: &std::path::Path,
    vendor: &Sandbox,
    net: &fleet::FleetNet,
    bundle: &PathBuf,
    window: Duration,
) -> Result<TlsIdle> {
    let k = net.devices.len();
    let pki = vendor.dir.join("pki");
    fleet::make_pki(&pki)?;
    let server = Goosebit::start_tls(
        venv,
        &net.server,
        &vendor.dir.join("goosebit-tls"),
        &format!("00:00:{POLL_S:02}"),
        &[],
        Some(fleet::ServerTls::mutual(&pki)),
    )?;
    let tls = format!(
        "ca_file = \"{0}/ca.pem\"\ncert_file = \"{0}/dev.pem\"\nkey_file = \"{0}/dev.key\"\n",
        pki.display()
    );
    let mut devices = Vec::new();
    for (i, ns) in net.devices.iter().take(k).enumerate() {
        let mut sb = ctx
            .sb
            .nested(&format!("ft{i}"), "2s", crate::sandbox::UNCAPPED_POLICY)?;
        std::fs::copy(
            vendor.dir.join("keys/vendor.pub"),
            sb.dir.join("keys/vendor.pub"),
        )
        .map_err(|e| e.to_string())?;
        let token = sb.dir.join("fleet.token");
        std::fs::write(&token, format!("bench-tls-token-{i}\n")).map_err(|e| e.to_string())?;
        // The same controller ids as over http:// (another gooseBit, another database).
        sb.write_config(&format!(
            "{}[upgrade]\ndeadline = \"30s\"\nsettle = \"500ms\"\n[fleet]\nserver = \"{}\"\ncontroller_id = \"fd{i}\"\ntoken_file = \"{}\"\n{FIRST_POLL}{tls}",
            crate::sandbox::UNCAPPED_POLICY,
            server.url(""),
            token.display()
        ))?;
        sb.daemon_netns = Some(ns.clone());
        sb.start_daemon()?;
        devices.push(sb);
    }
    let ids: Vec<String> = (0..k).map(|i| format!("fd{i}")).collect();
    registered(&server, &ids, &devices, "every TLS device registered")?;
    std::thread::sleep(Duration::from_secs(POLL_S * 2));
    let (c0, cpu0, t0) = (counters(&net.server)?, cpu_of(&devices), Instant::now());
    std::thread::sleep(window);
    let c = minus(counters(&net.server)?, c0);
    let cpu1 = cpu_of(&devices);
    let window_s = t0.elapsed().as_secs_f64();
    let polls = k as f64 * window_s / POLL_S as f64;
    let median = |f: fn(u32) -> u64| {
        let mut v: Vec<u64> = devices.iter().filter_map(daemon_pid).map(f).collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0) as f64
    };
    let (rss_kib, private_kib) = (median(rss_kib), median(private_kib));
    server.feed(&ids, "all")?;
    let round = rollout(
        &server,
        net,
        &devices,
        "1",
        bundle,
        "install over https:// (client certificates): a bundle with the image",
    )?;
    for sb in &mut devices {
        sb.stop_daemon();
    }
    Ok(TlsIdle {
        devices: k,
        window_s,
        requests_per_poll: c.ddi_syn as f64 / polls,
        bytes_per_poll: c.bytes as f64 / polls,
        cpu_ms: cpu_per_poll(&cpu0, &cpu1, window_s),
        rss_kib,
        private_kib,
        round,
    })
}
