//! `net`: TCP and UDP throughput (iperf3, and nuttcp where installed) and request-response
//! latency (a perl echo, and sockperf ping-pong where installed) between a "test machine" and
//! a server on the host, in a shared-mode container, in an isolated container
//! (through its published port) and in a macvlan container, in the same run; and the time
//! each network mode adds to a container's start.
//!
//! Everything happens in two network namespaces of the suite's own — the "device" (where a
//! second berth daemon runs, with its own state below the sandbox, so berth's bridge and
//! nftables tables live there) and the "test machine", linked by a veth pair — and both go
//! away at the end: the machine's own network is never touched.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use berth_testkit::Pkg;
use serde_json::{json, Value};

use super::{Ctx, Suite};
use crate::report::{mean_ci, ms, Section, SuiteOutput, Table};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::stats::summarize;
use crate::util::{bail, progress, which, Context, Result};

pub struct Net;

/// The request-response echo server (TCP and UDP on one port), for perl-base alone.
const ECHO: &str = r#"use IO::Socket::INET; use Socket qw(IPPROTO_TCP TCP_NODELAY);
my $p = shift;
if (!fork()) { my $u = IO::Socket::INET->new(LocalPort => $p, Proto => "udp") or die "udp: $!"; my $b;
  while (1) { my $peer = $u->recv($b, 64); $u->send($b, 0, $peer) if defined $peer; } }
my $l = IO::Socket::INET->new(LocalPort => $p, Listen => 8, Proto => "tcp", ReuseAddr => 1) or die "tcp: $!";
while (my $c = $l->accept) { if (!fork()) { setsockopt($c, IPPROTO_TCP, TCP_NODELAY, 1); my $b;
  while (sysread($c, $b, 64)) { syswrite($c, $b) } exit } }
"#;

/// The client: N one-byte round trips on one socket (the caller times two values of N).
const RR: &str = r#"use IO::Socket::INET; use Socket qw(IPPROTO_TCP TCP_NODELAY);
my ($addr, $proto, $n) = @ARGV; $SIG{ALRM} = sub { die "timeout\n" }; alarm 60;
my $s = IO::Socket::INET->new(PeerAddr => $addr, Proto => $proto) or die "$addr: $!";
setsockopt($s, IPPROTO_TCP, TCP_NODELAY, 1) if $proto eq "tcp"; my $b;
for (1 .. $n) { syswrite($s, "x"); sysread($s, $b, 64) or die "eof\n"; }
"#;

struct Target {
    label: &'static str,
    /// Short name for charts.
    mode: &'static str,
    addr: &'static str,
    iperf_port: u16,
    rr_port: u16,
    /// nuttcp's control port; the client asks for the next one as data port.
    nuttcp_port: u16,
    /// sockperf's servers, UDP and TCP on the same port number.
    sockperf_port: u16,
}

const TARGETS: &[Target] = &[
    Target {
        label: "host (device namespace)",
        mode: "host",
        addr: "192.0.2.1",
        iperf_port: 5201,
        rr_port: 7101,
        nuttcp_port: 5300,
        sockperf_port: 5400,
    },
    Target {
        label: "shared container",
        mode: "shared",
        addr: "192.0.2.1",
        iperf_port: 5202,
        rr_port: 7102,
        nuttcp_port: 5302,
        sockperf_port: 5402,
    },
    Target {
        label: "isolated container (published port)",
        mode: "isolated",
        addr: "192.0.2.1",
        iperf_port: 5203,
        rr_port: 7103,
        nuttcp_port: 5304,
        sockperf_port: 5403,
    },
    Target {
        label: "macvlan container",
        mode: "macvlan",
        // the second address of the suite's macvlan_pool: st-mv, started first (start-time
        // phase), keeps the first
        addr: "192.0.2.51",
        iperf_port: 5201,
        rr_port: 7001,
        nuttcp_port: 5300,
        sockperf_port: 5400,
    },
];

/// The packages of the start-time phase (an idle payload each) and their network modes.
const START_MODES: &[(&str, &str)] = &[
    ("st-none", "none"),
    ("st-shared", "shared"),
    ("st-iso", "isolated"),
    ("st-mv", "macvlan"),
];

/// The suite's berth: `[network]` on the device's side of the veth pair.
const NET_CONFIG: &str = "[network]\ntable = \"berth_bench\"\npublish_on = \"tm0\"\nmacvlan_parent = \"tm0\"\nmacvlan_pool = \"192.0.2.50-192.0.2.51/24\"\n";

/// The suite's own berth (a sandbox nested in the run's, its daemon in the device namespace),
/// the test machine's namespace and the host-side servers. On drop the containers and
/// servers are stopped; the sandbox's sweep then removes the rest, namespaces included.
struct World {
    sb: Sandbox,
    dev: String,
    tm: String,
    procs: Vec<Child>,
}

pub(crate) fn sh(cmd: &str) -> Result<String> {
    let o = Command::new("sh")
        .args(["-c", cmd])
        .stdin(Stdio::null())
        .output()
        .context(cmd)?;
    if !o.status.success() {
        bail!("{cmd}: {}", String::from_utf8_lossy(&o.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

impl World {
    /// The sandbox, the namespaces and their link, the packages; the daemon started in the
    /// device namespace with every package installed.
    fn create(main: &Sandbox) -> Result<World> {
        let extra = format!("{NET_CONFIG}{}", crate::sandbox::UNCAPPED_POLICY);
        let sb = main.nested("net", "5s", &extra)?;
        let mut w = World {
            dev: sb.scope().netns("dev"),
            tm: sb.scope().netns("tm"),
            sb,
            procs: Vec::new(),
        };
        w.link()?;
        w.pack_packages()?;
        w.sb.daemon_netns = Some(w.dev.clone());
        w.sb.start_daemon()?;
        w.sb.ok(&["update"])?;
        let mut install = vec!["install", "srv-shared", "srv-iso", "srv-mv"];
        install.extend(START_MODES.iter().map(|(n, _)| *n));
        w.sb.ok(&install)?;
        Ok(w)
    }

    /// The device and test-machine namespaces, linked by a veth pair (tm0 on the device's
    /// side, 192.0.2.1; eth0 on the test machine's, 192.0.2.2).
    fn link(&self) -> Result<()> {
        sh(&format!(
            "ip netns add {d} && ip netns add {t} && ip -n {d} link set lo up && ip -n {t} link set lo up && \
             ip -n {d} link add tm0 type veth peer name eth0 netns {t} && \
             ip -n {d} addr add 192.0.2.1/24 dev tm0 && ip -n {d} link set tm0 up && \
             ip -n {t} addr add 192.0.2.2/24 dev eth0 && ip -n {t} link set eth0 up",
            d = self.dev,
            t = self.tm
        ))?;
        Ok(())
    }

    /// Servers in three modes, and idle payloads for the start-time comparison; the shared
    /// ones trusted (only trusted packages may use the host's network).
    fn pack_packages(&mut self) -> Result<()> {
        // nuttcp (when packed) on its control port; the client names the data port (a
        // server takes no -p), so a published data port keeps its number
        let server = |port: u16, rr: u16, nut: u16, sp: u16| {
            format!("[ -x /usr/bin/nuttcp ] && /usr/bin/nuttcp -S --nofork -P {nut} &\n\
                     [ -x /usr/bin/sockperf ] && /usr/bin/sockperf server -i 0.0.0.0 -p {sp} >/dev/null &\n\
                     [ -x /usr/bin/sockperf ] && /usr/bin/sockperf server --tcp -i 0.0.0.0 -p {sp} >/dev/null &\n\
                     /usr/bin/perl /echo.pl {rr} &\nexec /usr/bin/iperf3 -s -p {port}\n")
        };
        let servers = [
            ("srv-shared", server(5202, 7102, 5302, 5402), "mode = \"shared\""),
            ("srv-iso", server(5201, 7001, 5300, 5400), "mode = \"isolated\"\npublish = [\"5203:5201/tcp\", \"5203:5201/udp\", \"7103:7001/tcp\", \"7103:7001/udp\", \"5304:5300/tcp\", \"5305:5305/tcp\", \"5403:5400/tcp\", \"5403:5400/udp\"]"),
            // addressed by the device from its macvlan_pool (192.0.2.51, see TARGETS)
            ("srv-mv", server(5201, 7001, 5300, 5400), "mode = \"macvlan\""),
        ];
        for (name, script, network) in &servers {
            self.sb.pack_pkg(&package(name, script, network, true)?)?;
        }
        for (name, mode) in START_MODES {
            let network = format!("mode = \"{mode}\"");
            let idle = "exec /bin/busybox sleep 100000\n";
            self.sb.pack_pkg(&package(name, idle, &network, false)?)?;
        }
        self.sb.trust("srv-shared");
        self.sb.trust("st-shared");
        self.sb.build_repo()
    }

    fn in_dev(&mut self, argv: &[&str]) -> Result<()> {
        let c = Command::new("ip")
            .args(["netns", "exec", &self.dev])
            .args(argv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("spawn a server in the device namespace")?;
        self.procs.push(c);
        Ok(())
    }

    fn tm(&self, cmd: &str) -> Result<String> {
        sh(&format!("ip netns exec {} {cmd}", self.tm))
    }
}

impl Drop for World {
    /// The daemon first, so that its supervisor restarts nothing; then the containers, from
    /// the device namespace where LXC's command sockets are (the sweep's lxc-stop, from the
    /// host's, does not reach them); then the servers.
    fn drop(&mut self) {
        self.sb.stop_daemon();
        crate::sandbox::stop_in_netns(&self.sb, &self.dev);
        for c in self.procs.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A package of the suite: `script` run by busybox sh with the host's libraries, `network`
/// its [network] table; with the servers' tools and the echo server when `with_tools`.
pub(crate) fn package(name: &str, script: &str, network: &str, with_tools: bool) -> Result<Pkg> {
    let mut files = vec![("run.sh".to_string(), script.as_bytes().to_vec(), 0o644)];
    if with_tools {
        // nuttcp and sockperf where installed: their rows say "skipped" otherwise
        for (t, needed) in [
            ("iperf3", true),
            ("perl", true),
            ("nuttcp", false),
            ("sockperf", false),
        ] {
            let Some(p) = which(t) else {
                if needed {
                    bail!("{t} is missing");
                }
                continue;
            };
            let data = std::fs::read(&p).context(format!("read {}", p.display()))?;
            files.push((format!("usr/bin/{t}"), data, 0o755));
        }
        files.push(("echo.pl".into(), ECHO.as_bytes().to_vec(), 0o644));
    }
    let spec = PkgSpec {
        name: name.into(),
        argv: ["/bin/busybox", "sh", "/run.sh"].map(String::from).to_vec(),
        files,
        busybox: true,
        host_base: true,
    };
    Ok(spec.to_pkg().table(&format!("[network]\n{network}")))
}

/// iperf3 from the test machine; (TCP Mbit/s) or (UDP received Mbit/s, loss %, jitter ms).
fn iperf(w: &World, t: &Target, udp: bool, secs: u32) -> Result<(f64, f64, f64)> {
    let args = if udp { "-u -b 100M" } else { "" };
    let text = w.tm(&format!(
        "iperf3 -c {} -p {} -t {secs} -J {args}",
        t.addr, t.iperf_port
    ));
    let text = match text {
        Ok(t) => t,
        Err(e) => bail!("iperf3 to {}: {e}", t.label),
    };
    let v: Value = serde_json::from_str(&text).context("iperf3 JSON")?;
    if udp {
        let s = &v["end"]["sum"];
        Ok((
            s["bits_per_second"].as_f64().unwrap_or(f64::NAN) / 1e6
                * (1.0 - s["lost_percent"].as_f64().unwrap_or(0.0) / 100.0),
            s["lost_percent"].as_f64().unwrap_or(f64::NAN),
            s["jitter_ms"].as_f64().unwrap_or(f64::NAN),
        ))
    } else {
        let b = v["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .unwrap_or(f64::NAN);
        Ok((b / 1e6, 0.0, 0.0))
    }
}

/// nuttcp TCP from the test machine, Mbit/s (its `-fparse` line: `rate_Mbps=…`).
fn nuttcp_tcp(w: &World, t: &Target, secs: u32) -> Result<f64> {
    let text = w
        .tm(&format!(
            "nuttcp -P {} -p {} -T {secs} -fparse {}",
            t.nuttcp_port,
            t.nuttcp_port + 1,
            t.addr
        ))
        .map_err(|e| format!("nuttcp to {}: {e}", t.label))?;
    text.split_whitespace()
        .find_map(|f| f.strip_prefix("rate_Mbps="))
        .and_then(|r| r.parse().ok())
        .ok_or_else(|| format!("nuttcp to {}: no rate in {text:?}", t.label).into())
}

/// sockperf ping-pong from the test machine for `secs`, 100-byte messages (the published
/// netperf RR used 100 and 200 bytes): (mean, p99) round-trip time in µs.
fn sockperf_rr(w: &World, t: &Target, tcp: bool, secs: u32) -> Result<(f64, f64)> {
    let proto = if tcp { "TCP" } else { "UDP" };
    let text = w
        .tm(&format!(
            "sockperf ping-pong -i {} -p {} {} -m 100 -t {secs} --full-rtt 2>&1",
            t.addr,
            t.sockperf_port,
            if tcp { "--tcp" } else { "" }
        ))
        .map_err(|e| format!("sockperf {proto} to {}: {e}", t.label))?;
    sockperf_parse(&text)
        .ok_or_else(|| format!("sockperf {proto} to {}: no result in {text:?}", t.label).into())
}

/// From sockperf's summary: `avg-rtt=47.180 (std-dev=…)` and `---> percentile 99.000 = 59.1`.
pub(crate) fn sockperf_parse(text: &str) -> Option<(f64, f64)> {
    let num = |s: &str| -> Option<f64> {
        let s: String = s
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        s.parse().ok()
    };
    let avg = text
        .split("avg-rtt=")
        .nth(1)
        .or_else(|| text.split("avg-lat=").nth(1))
        .and_then(num)?;
    let p99 = text.lines().find_map(|l| {
        let (_, rest) = l.split_once("percentile 99.000")?;
        num(rest.trim_start().strip_prefix('=')?)
    })?;
    Some((avg, p99))
}

/// Microseconds per round trip: two runs with different counts, so process start-up and
/// connection set-up cancel out.
fn rr(w: &World, t: &Target, proto: &str, n: u32) -> Result<f64> {
    let run = |k: u32| -> Result<f64> {
        let t0 = Instant::now();
        w.tm(&format!(
            "perl -e '{RR}' {}:{} {proto} {k}",
            t.addr, t.rr_port
        ))
        .map_err(|e| format!("{proto} request-response to {}: {e}", t.label))?;
        Ok(t0.elapsed().as_secs_f64() * 1e6)
    };
    let small = run(10)?;
    let big = run(n + 10)?;
    Ok((big - small) / n as f64)
}

/// The tools the suite cannot do without, and their Debian packages.
const NEEDED: &[(&str, &str)] = &[
    ("iperf3", "iperf3"),
    ("nft", "nftables"),
    ("ip", "iproute2"),
    ("nsenter", "util-linux"),
    ("perl", "perl-base"),
];

/// Eleven series per target: TCP, nuttcp TCP, UDP, UDP loss, UDP jitter, TCP RR, UDP RR,
/// sockperf TCP mean and p99, UDP mean and p99 (the table's columns after the first).
type Samples = [Vec<f64>; 11];

/// How much the suite measures, and with which optional tools.
struct Plan {
    /// Measured rounds of the start-time phase.
    start_runs: usize,
    /// Seconds per iperf3, nuttcp and sockperf run.
    secs: u32,
    /// Rounds over the targets.
    rounds: usize,
    /// Round trips per request-response measurement.
    n_rr: u32,
    nuttcp: bool,
    sockperf: bool,
}

impl Plan {
    fn new(ctx: &Ctx) -> Plan {
        Plan {
            start_runs: if ctx.quick {
                3
            } else {
                ctx.runs_given.unwrap_or(10)
            },
            secs: if ctx.quick { 2 } else { 5 },
            rounds: if ctx.quick {
                1
            } else {
                ctx.runs_given.unwrap_or(5)
            },
            n_rr: if ctx.quick { 5000 } else { 20000 },
            nuttcp: which("nuttcp").is_some(),
            sockperf: which("sockperf").is_some(),
        }
    }
}

/// The start-time table's rows and the raw samples.
struct StartTimes {
    rows: Vec<Vec<String>>,
    raw: Vec<Value>,
}

impl Suite for Net {
    fn name(&self) -> &'static str {
        "net"
    }

    /// The suite builds its packages for its own daemon in `run`; the shared sandbox gets a
    /// marker package only (it installs whatever the suites return, and wants one at least).
    fn prepare(&mut self, _sb: &Sandbox) -> Result<Vec<PkgSpec>> {
        Ok(vec![PkgSpec {
            name: "net-marker".into(),
            argv: vec!["/bin/busybox".into(), "true".into()],
            files: Vec::new(),
            busybox: true,
            host_base: false,
        }])
    }

    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput> {
        if let Some(skipped) = missing_tool() {
            return Ok(skipped);
        }
        let mut w = World::create(ctx.sb)?;
        let plan = Plan::new(ctx);
        let start = start_times(&w, plan.start_runs)?;
        start_servers(&mut w, &plan)?;
        wait_for_servers(&w)?;
        let series = measure(&w, &plan)?;
        Ok(report(&plan, &series, start))
    }
}

/// The report of a suite that cannot run for want of a tool.
fn missing_tool() -> Option<SuiteOutput> {
    let (t, pkg) = NEEDED.iter().find(|(t, _)| which(t).is_none())?;
    let msg = format!("SKIPPED: {t} is missing (install the Debian package {pkg})");
    progress!("{msg}");
    Some(SuiteOutput {
        name: "net",
        sections: vec![Section {
            title: "network".into(),
            table: Table::new(&["skipped"]),
            notes: vec![msg.clone()],
        }],
        raw: json!({"skipped": msg}),
    })
}

/// `berth start` per network mode, interleaved (none, shared, isolated, macvlan, none, …) so
/// drifting load on the machine hits every mode alike; the first round is the warm-up (the
/// first start of each allocates and loads rules).
fn start_times(w: &World, runs: usize) -> Result<StartTimes> {
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); START_MODES.len()];
    for i in 0..runs + 1 {
        for (k, (n, _)) in START_MODES.iter().enumerate() {
            crate::util::check_interrupted()?;
            let t0 = Instant::now();
            w.sb.ok(&["start", n])?;
            let el = t0.elapsed().as_secs_f64() * 1000.0;
            w.sb.ok(&["stop", n])?;
            if i > 0 {
                samples[k].push(el);
            }
        }
    }
    let mut start = StartTimes {
        rows: Vec::new(),
        raw: Vec::new(),
    };
    let base = summarize(&samples[0]).map_or(f64::NAN, |s| s.median);
    for (k, (_, label)) in START_MODES.iter().enumerate() {
        let s = summarize(&samples[k]).ok_or("no start samples")?;
        progress!("net: start with mode {label}: {} ms", ms(s.mean));
        start.rows.push(vec![
            label.to_string(),
            mean_ci(&s),
            ms(s.median),
            format!("{:+.1}", s.median - base),
        ]);
        start
            .raw
            .push(json!({"mode": label, "samples_ms": samples[k]}));
    }
    Ok(start)
}

/// The servers of the host (in the device namespace), then the three containers.
fn start_servers(w: &mut World, plan: &Plan) -> Result<()> {
    let echo = w.sb.dir.join("echo.pl");
    std::fs::write(&echo, ECHO).context("echo.pl")?;
    let echo_s = echo.display().to_string();
    w.in_dev(&["iperf3", "-s", "-p", "5201"])?;
    w.in_dev(&["perl", &echo_s, "7101"])?;
    if plan.nuttcp {
        w.in_dev(&["nuttcp", "-S", "--nofork", "-P", "5300"])?;
    }
    if plan.sockperf {
        w.in_dev(&["sockperf", "server", "-i", "0.0.0.0", "-p", "5400"])?;
        w.in_dev(&["sockperf", "server", "--tcp", "-i", "0.0.0.0", "-p", "5400"])?;
    }
    for n in ["srv-shared", "srv-iso", "srv-mv"] {
        w.sb.ok(&["start", n])?;
    }
    Ok(())
}

/// Waits until every target's echo server answers, 15 s at most each.
fn wait_for_servers(w: &World) -> Result<()> {
    for t in TARGETS {
        let deadline = Instant::now() + Duration::from_secs(15);
        while rr(w, t, "tcp", 1).is_err() {
            if Instant::now() > deadline {
                bail!("{} does not answer on {}:{}", t.label, t.addr, t.rr_port);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(())
}

/// Every target's samples; rounds interleave the targets so drifting load hits them alike.
fn measure(w: &World, plan: &Plan) -> Result<Vec<Samples>> {
    let mut series: Vec<Samples> = TARGETS.iter().map(|_| Default::default()).collect();
    for r in 0..plan.rounds {
        progress!("net: round {}/{}", r + 1, plan.rounds);
        for (t, v) in TARGETS.iter().zip(series.iter_mut()) {
            crate::util::check_interrupted()?;
            measure_target(w, t, plan, r == 0, v)?;
        }
    }
    Ok(series)
}

/// One round's runs against one target, each pushed into its series.
fn measure_target(w: &World, t: &Target, plan: &Plan, first: bool, v: &mut Samples) -> Result<()> {
    let secs = plan.secs;
    v[0].push(iperf(w, t, false, secs)?.0);
    if plan.nuttcp {
        v[1].push(nuttcp_tcp(w, t, secs)?);
    }
    let (u, l, j) = iperf(w, t, true, secs)?;
    v[2].push(u);
    v[3].push(l);
    v[4].push(j);
    v[5].push(rr(w, t, "tcp", plan.n_rr)?);
    v[6].push(rr(w, t, "udp", plan.n_rr)?);
    if plan.sockperf {
        // its servers started beside the echo server that answered before; give them a
        // moment more in the first round only
        if first {
            let deadline = Instant::now() + Duration::from_secs(5);
            while sockperf_rr(w, t, true, 1).is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        let (m, p) = sockperf_rr(w, t, true, secs)?;
        v[7].push(m);
        v[8].push(p);
        let (m, p) = sockperf_rr(w, t, false, secs)?;
        v[9].push(m);
        v[10].push(p);
    }
    Ok(())
}

/// One row per target: mean ± CI of every series, or why a tool's columns are empty.
fn throughput_table(series: &[Samples]) -> Table {
    let mut table = Table::new(&[
        "server",
        "TCP Mbit/s",
        "nuttcp TCP Mbit/s",
        "UDP 100M: received Mbit/s",
        "UDP loss %",
        "UDP jitter ms",
        "TCP RR µs",
        "UDP RR µs",
        "sockperf TCP RTT µs",
        "sockperf TCP p99 µs",
        "sockperf UDP RTT µs",
        "sockperf UDP p99 µs",
    ]);
    for (t, v) in TARGETS.iter().zip(series) {
        let m = |(k, v): (usize, &Vec<f64>)| {
            summarize(v).map(|s| mean_ci(&s)).unwrap_or_else(|| {
                if k == 1 {
                    "skipped: install nuttcp"
                } else {
                    "skipped: install sockperf"
                }
                .into()
            })
        };
        let mut row = vec![t.label.to_string()];
        row.extend(v.iter().enumerate().map(m));
        table.row(row);
    }
    table
}

/// Every sample, per target.
fn throughput_json(series: &[Samples]) -> Vec<Value> {
    TARGETS
        .iter()
        .zip(series)
        .map(|(t, v)| {
            json!({"target": t.label, "tcp_mbps": v[0], "nuttcp_tcp_mbps": v[1], "udp_mbps": v[2],
            "udp_loss_percent": v[3], "udp_jitter_ms": v[4], "tcp_rr_us": v[5], "udp_rr_us": v[6],
            "sockperf_tcp_rtt_us": v[7], "sockperf_tcp_p99_us": v[8],
            "sockperf_udp_rtt_us": v[9], "sockperf_udp_p99_us": v[10]})
        })
        .collect()
}

/// The charts: throughput and latency bars per mode.
fn charts(plan: &Plan, series: &[Samples]) -> Value {
    let (mut thr, mut lat) = (Vec::new(), Vec::new());
    for (t, v) in TARGETS.iter().zip(series) {
        let mut bars = vec![("iperf3 TCP".to_string(), v[0].clone())];
        if plan.nuttcp {
            bars.push(("nuttcp TCP".into(), v[1].clone()));
        }
        bars.push(("iperf3 UDP 100M received".into(), v[2].clone()));
        thr.push((t.mode.to_string(), bars));
        let mut bars = vec![
            ("perl TCP".to_string(), v[5].clone()),
            ("perl UDP".into(), v[6].clone()),
        ];
        if plan.sockperf {
            bars.push(("sockperf TCP".into(), v[7].clone()));
            bars.push(("sockperf UDP".into(), v[9].clone()));
        }
        lat.push((t.mode.to_string(), bars));
    }
    json!([
        crate::chart::series_json("Throughput by network mode", "Mbit/s", &thr),
        crate::chart::series_json("Request-response latency by network mode", "µs", &lat),
    ])
}

/// How the throughput and latency table was measured.
fn throughput_notes(plan: &Plan) -> Vec<String> {
    let Plan {
        secs, rounds, n_rr, ..
    } = plan;
    vec![
        if plan.nuttcp {
            format!("nuttcp -T {secs}: TCP, one stream, beside iperf3 as the published evaluations used both")
        } else {
            "nuttcp: skipped (install the Debian package nuttcp)".into()
        },
        format!("iperf3 -t {secs} from a \"test machine\" network namespace over a veth pair to the device namespace (where the berth daemon runs); UDP at -b 100M, received rate = rate × (1 − loss); {rounds} round(s), the servers interleaved in each"),
        format!("RR: one-byte request and answer on one socket, perl client and server; µs per round trip from two runs ({n_rr} + 10 and 10 round trips, so process start-up and connection set-up cancel out)"),
        if plan.sockperf {
            format!("sockperf ping-pong -m 100 -t {secs} --full-rtt: 100-byte messages back and forth (the published evaluation: netperf TCP_RR/UDP_RR, 100-byte request, 200-byte answer; netperf is not in Debian), mean and 99th percentile round-trip time")
        } else {
            "sockperf: skipped (install the Debian package sockperf)".into()
        },
        "isolated: through the published port (DNAT, bridge, veth, anti-spoofing rules); macvlan: directly to the container's LAN address; shared: the host's namespace".into(),
    ]
}

fn report(plan: &Plan, series: &[Samples], start: StartTimes) -> SuiteOutput {
    let mut st = Table::new(&[
        "mode",
        "start ms (mean ± 95% CI)",
        "median",
        "median vs none (ms)",
    ]);
    for r in start.rows {
        st.row(r);
    }
    SuiteOutput {
        name: "net",
        sections: vec![
            Section {
                title: "Network: test machine → server, by network mode".into(),
                table: throughput_table(series),
                notes: throughput_notes(plan),
            },
            Section {
                title: "Container start time by network mode".into(),
                table: st,
                notes: vec![format!("`berth start` wall time, idle busybox payload, {} rounds after one warm-up round (which allocates the address and loads the rules), the modes interleaved", plan.start_runs)],
            },
        ],
        raw: json!({"seconds": plan.secs, "rounds": plan.rounds, "rr_round_trips": plan.n_rr,
            "throughput": throughput_json(series), "start": start.raw,
            "series": charts(plan, series)}),
    }
}

#[cfg(test)]
mod tests {
    use super::{package, sockperf_parse};

    #[test]
    fn packages_carry_their_network_table() {
        let p = package("st-iso", "exec true\n", "mode = \"isolated\"", false).unwrap();
        let m = p.manifest();
        assert!(m.contains("base = \"host\"\n"), "{m}");
        assert!(
            m.contains("argv = [\"/bin/busybox\", \"sh\", \"/run.sh\"]\n"),
            "{m}"
        );
        assert!(m.ends_with("[network]\nmode = \"isolated\"\n\n"), "{m}");
        assert_eq!(p.mode_of("run.sh"), Some(0o644));
        assert!(p.with_busybox && p.applets.is_empty());
    }

    #[test]
    fn sockperf_summary_is_read() {
        // sockperf 3.7 (Debian 12), ping-pong --full-rtt, colours included
        let out = "sockperf: [Valid Duration] RunTime=0.550 sec; SentMessages=6713; ReceivedMessages=6713\n\
                   sockperf: \x1b[2;35m====> avg-rtt=81.926 (std-dev=59.028)\x1b[0m\n\
                   sockperf: ---> percentile 99.900 =  238.143\n\
                   sockperf: ---> percentile 99.000 =  125.556\n\
                   sockperf: ---> percentile 50.000 =   78.977\n";
        assert_eq!(sockperf_parse(out), Some((81.926, 125.556)));
        // without --full-rtt it says avg-lat (half the round trip): still read
        assert_eq!(
            sockperf_parse(&out.replace("avg-rtt", "avg-lat")),
            Some((81.926, 125.556))
        );
        assert_eq!(sockperf_parse("sockperf: ERROR: connect failed"), None);
        assert_eq!(
            sockperf_parse("avg-rtt=1.5 (std-dev=0.1)\n"),
            None,
            "no p99"
        );
    }
}
