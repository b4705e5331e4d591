//! `microvm`: containers against a microVM on an edge device's I/O — the matrix of the
//! published study "MicroVMs vs containers on edge devices" (shared reference, part D: native,
//! runc, QEMU/KVM, Firecracker, Kata): fio sequential and random reads and writes at request
//! sizes 256 B … 64 KiB, TCP streaming and TCP request-response at 64 B … 4 KiB, here on the
//! host, in a berth container, in runc and in a QEMU microVM (`-M microvm`, virtio-blk and
//! virtio-net, the Debian kernel and image of the VM tests, `scripts/vm/`).
//!
//! - **fio**: the same job everywhere — buffered I/O (`psync`, the file's cache invalidated
//!   before each job, writes fsynced at its end), time-based, on a file of the platform's own
//!   disk: the host's in the sandbox directory, the berth container's `/data`, runc's bound
//!   data directory, the microVM's payload disk (a file on the host's disk behind
//!   virtio-blk). Buffered, because the study's smallest requests (256 B) cannot be direct.
//! - **network**: netperf is in Debian's non-free section, so its two tests are made with
//!   what Debian main has: TCP_STREAM with `iperf3 -l SIZE` (the write size), TCP_RR with
//!   `sockperf ping-pong --tcp -m SIZE` (transactions/s = 1 / the mean round trip). The
//!   clients run on a "test machine" (a network namespace) linked by a veth pair to the
//!   "device" (another), where the host's servers run, berth's daemon runs the container
//!   (network `isolated`, published ports: veth, bridge, NAT), runc's container has a network
//!   namespace of its own on a routed veth, and QEMU's tap device carries the microVM's
//!   virtio-net. Both namespaces are the suite's own and go at its end.
//!
//! The microVM uses KVM where `/dev/kvm` can boot the stock kernel, else TCG: then every
//! figure it gives is labelled "emulated (TCG): not a performance figure" in the report and
//! the JSON — the suite still runs end to end, so that it works on a device with KVM.
//! Ratios are per round (platform / host), mean ± 95 % CI, "within noise" when it holds 1.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use super::fs::fio_bw;
use super::hostguest::{ratio_ci, tool_pkg, HostGuest, Side, Tool};
use super::net::{package, sh, sockperf_parse};
use super::{Ctx, Suite};
use crate::report::{Section, SuiteOutput, Table};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::util::{bail, progress, which, Context, Result};
use crate::vm::{self, Accel, Boot, BootOpts};

pub struct MicroVm;

const PKG: &str = "mvm-io";
const SRV: &str = "mvm-srv";
const FIO: Tool = Tool {
    bin: "fio",
    debian: "fio",
};

/// The four platforms, in the report's order.
pub const PLATFORMS: [&str; 4] = ["host", "berth", "runc", "microvm"];

/// fio's modes, the study's four.
const MODES: [(&str, &str); 4] = [
    ("read", "sequential read"),
    ("write", "sequential write"),
    ("randread", "random read"),
    ("randwrite", "random write"),
];

/// The ports every platform's servers listen on (the berth container's are published on the
/// device as `+2`, next to the host's own).
const IPERF_PORT: u16 = 5201;
const SOCKPERF_PORT: u16 = 5400;
const CTL_PORT: u16 = 9999;
const GUEST_ADDR: &str = "10.77.2.2";
const RUNC_ADDR: &str = "10.77.1.2";
const DEVICE_ADDR: &str = "192.0.2.1";

/// How much the suite measures.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub fio_sizes: Vec<u32>,
    pub fio_secs: u32,
    pub fio_mib: u32,
    pub net_sizes: Vec<u32>,
    pub net_secs: u32,
    pub rounds: usize,
}

impl Plan {
    pub fn new(quick: bool, runs_given: Option<usize>) -> Plan {
        if quick {
            Plan {
                fio_sizes: vec![256, 4096, 65536],
                fio_secs: 1,
                fio_mib: 32,
                net_sizes: vec![64, 4096],
                net_secs: 1,
                rounds: runs_given.unwrap_or(2),
            }
        } else {
            Plan {
                fio_sizes: vec![256, 1024, 4096, 16384, 65536],
                fio_secs: 2,
                fio_mib: 128,
                net_sizes: vec![64, 256, 1024, 4096],
                net_secs: 3,
                rounds: runs_given.unwrap_or(3),
            }
        }
    }
}

/// One fio job's arguments, for every platform alike; `file` relative to its directory.
pub fn fio_args(mode: &str, bs: u32, p: &Plan, file: &str) -> Vec<String> {
    let mut a = vec![
        "--name=mvm".to_string(),
        format!("--filename={file}"),
        format!("--size={}M", p.fio_mib),
        format!("--rw={mode}"),
        format!("--bs={bs}"),
        "--ioengine=psync".into(),
        "--direct=0".into(),
        "--invalidate=1".into(),
        "--time_based".into(),
        format!("--runtime={}", p.fio_secs),
        "--randrepeat=1".into(),
        "--norandommap".into(),
    ];
    if mode.contains("write") {
        a.push("--end_fsync=1".into());
    }
    a
}

fn job_name(mode: &str, bs: u32) -> String {
    format!("{mode}-{bs}")
}

/// Every sample of one test at one size, per platform (in [`PLATFORMS`] order).
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub test: String,
    pub size: u32,
    pub unit: String,
    pub samples: [Vec<f64>; 4],
    pub errors: Vec<String>,
}

impl Row {
    fn new(test: &str, size: u32, unit: &str) -> Row {
        Row {
            test: test.into(),
            size,
            unit: unit.into(),
            ..Row::default()
        }
    }

    /// Platform `i` could not measure this round: a NaN keeps the later rounds paired.
    fn failed(&mut self, i: usize, e: crate::util::Error) {
        self.samples[i].push(f64::NAN);
        self.errors.push(format!("{}: {e}", PLATFORMS[i]));
    }

    /// Platform `i` over the host, round by round.
    pub fn ratios(&self, i: usize) -> Vec<f64> {
        self.samples[0]
            .iter()
            .zip(&self.samples[i])
            .map(|(h, x)| x / h)
            .filter(|r| r.is_finite())
            .collect()
    }

    fn json(&self) -> Value {
        let mut o = json!({"test": self.test, "size_bytes": self.size, "unit": self.unit,
                           "higher_is_better": true, "errors": self.errors});
        for (i, p) in PLATFORMS.iter().enumerate() {
            o[*p] = json!(self.samples[i]);
            if i > 0 {
                o[format!("ratio_{p}_host")] = json!(self.ratios(i));
            }
        }
        o
    }
}

/// `0.97 ± 0.05 (within noise)`, or the one round's ratio.
pub fn ratio_cell(r: &[f64]) -> String {
    match ratio_ci(r) {
        Some((m, ci)) if ci.is_finite() => {
            let v = if (m - ci..=m + ci).contains(&1.0) {
                "within noise".to_string()
            } else if m < 1.0 {
                format!("{:.0} % lower", (1.0 - m) * 100.0)
            } else {
                format!("{:.0} % higher", (m - 1.0) * 100.0)
            };
            format!("{m:.3} ± {ci:.3} ({v})")
        }
        Some((m, _)) => format!("{m:.3} (one round: no CI)"),
        None => "–".into(),
    }
}

fn size_label(b: u32) -> String {
    if b >= 1024 && b.is_multiple_of(1024) {
        format!("{} KiB", b / 1024)
    } else {
        format!("{b} B")
    }
}

/// The tools the suite needs on the host, and their Debian packages.
const NEEDED: &[(&str, &str)] = &[
    ("fio", "fio"),
    ("iperf3", "iperf3"),
    ("sockperf", "sockperf"),
    ("runc", "runc"),
    ("nc.openbsd", "netcat-openbsd"),
    ("ip", "iproute2"),
    ("nsenter", "util-linux"),
    ("perl", "perl-base"),
];

impl Suite for MicroVm {
    fn name(&self) -> &'static str {
        "microvm"
    }

    fn prepare(&mut self, _sb: &Sandbox) -> Result<Vec<PkgSpec>> {
        Ok(vec![tool_pkg(PKG, &[FIO])?])
    }

    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput> {
        let p = Plan::new(ctx.quick, ctx.runs_given);
        let missing = NEEDED
            .iter()
            .find(|(t, _)| which(t).is_none())
            .map(|(t, pkg)| format!("{t} is missing: install the Debian package {pkg}"))
            .or_else(vm::unavailable);
        if let Some(why) = missing {
            return Ok(skipped(&why));
        }
        let scripts = vm::scripts()?;
        let image = vm::image(&scripts)?;
        let accel = vm::accel(&image);
        let sb = &*ctx.sb;
        let mut fio: Vec<Row> = Vec::new();
        for (_, label) in MODES {
            for &bs in &p.fio_sizes {
                fio.push(Row::new(&format!("fio {label}"), bs, "MiB/s"));
            }
        }
        let mut net: Vec<Row> = Vec::new();
        for &size in &p.net_sizes {
            net.push(Row::new("TCP_STREAM (iperf3 -l)", size, "Mbit/s"));
        }
        for &size in &p.net_sizes {
            net.push(Row::new(
                "TCP_RR (sockperf ping-pong --tcp)",
                size,
                "transactions/s",
            ));
        }
        let mut world = World::create(sb)?;
        // The host, berth and runc first, each round interleaved; the microVM last (under
        // TCG it would load the host's CPUs while the others measure).
        let hg = HostGuest::start(sb, PKG, &[FIO])?;
        for round in 0..p.rounds {
            progress!("microvm: fio, round {}/{}", round + 1, p.rounds);
            for (m, (mode, _)) in MODES.iter().enumerate() {
                for (b, &bs) in p.fio_sizes.iter().enumerate() {
                    crate::util::check_interrupted()?;
                    let mut args = fio_args(mode, bs, &p, "mvm.dat");
                    args.push("--output-format=json".into());
                    let write = mode.contains("write");
                    let row = &mut fio[m * p.fio_sizes.len() + b];
                    for (i, side) in [(0, Side::Host), (1, Side::Guest)] {
                        let bw = hg.run(side, "fio \"$@\"", &args).and_then(|o| {
                            fio_bw(&o.text, write).ok_or_else(|| {
                                format!("fio: no bandwidth: {}", tail(&o.text)).into()
                            })
                        });
                        match bw {
                            Ok(v) => row.samples[i].push(v / 1048576.0),
                            Err(e) => row.failed(i, e),
                        }
                    }
                    let bw = world.runc.fio(&args).and_then(|t| {
                        fio_bw(&t, write)
                            .ok_or_else(|| format!("fio: no bandwidth: {}", tail(&t)).into())
                    });
                    match bw {
                        Ok(v) => row.samples[2].push(v / 1048576.0),
                        Err(e) => row.failed(2, e),
                    }
                }
            }
            progress!("microvm: network, round {}/{}", round + 1, p.rounds);
            for row in net.iter_mut() {
                for (i, t) in world.targets().iter().enumerate().take(3) {
                    crate::util::check_interrupted()?;
                    match world.client(row, t, p.net_secs) {
                        Ok(v) => row.samples[i].push(v),
                        Err(e) => row.failed(i, e),
                    }
                }
            }
        }
        drop(hg);
        let _ = sb.ok(&["stop", PKG]);
        // A microVM that fails (does not boot, breaks off) leaves the other platforms'
        // figures standing; its rows say why.
        let vm = vm_phase(
            &mut world, &scripts, &image, &accel, sb, &p, &mut fio, &mut net,
        );
        if let Err(e) = vm {
            crate::util::check_interrupted()?;
            for row in fio.iter_mut().chain(net.iter_mut()) {
                row.errors.push(format!("microvm: {e}"));
            }
        }
        Ok(report(&p, &accel, &fio, &net))
    }
}

fn tail(t: &str) -> String {
    crate::util::last_lines(t, 3, " / ")
}

fn skipped(why: &str) -> SuiteOutput {
    let mut t = Table::new(&["suite", "why"]);
    t.row(vec!["microvm".into(), format!("skipped: {why}")]);
    SuiteOutput {
        name: "microvm",
        sections: vec![Section {
            title: "containers vs a microVM".into(),
            table: t,
            notes: Vec::new(),
        }],
        raw: json!({ "skipped": why }),
    }
}

/// The microVM's part: boot it on the device's tap device, its fio jobs (streamed on the
/// console), then the test machine's clients against its servers, then power it off.
#[allow(clippy::too_many_arguments)]
fn vm_phase(
    w: &mut World,
    scripts: &Path,
    image: &Path,
    accel: &Accel,
    sb: &Sandbox,
    p: &Plan,
    fio: &mut [Row],
    net: &mut [Row],
) -> Result<()> {
    let payload = sb.dir.join("mvm-vm");
    let _ = std::fs::remove_dir_all(&payload);
    std::fs::create_dir_all(&payload).context("create the VM payload directory")?;
    std::fs::copy(scripts.join("microvm/guest.sh"), payload.join("run.sh"))
        .context("copy scripts/vm/microvm/guest.sh")?;
    let mut jobs = String::new();
    for round in 0..p.rounds {
        for (mode, _) in MODES {
            for &bs in &p.fio_sizes {
                jobs.push_str(&format!(
                    "{} {round} {}\n",
                    job_name(mode, bs),
                    fio_args(mode, bs, p, "fio.dat").join(" ")
                ));
            }
        }
    }
    std::fs::write(payload.join("fio-jobs"), jobs).context("write fio-jobs")?;
    std::fs::write(
        payload.join("bench.conf"),
        format!(
            "GUEST_ADDR={GUEST_ADDR}/30\nGUEST_GW=10.77.2.1\nIPERF_PORT={IPERF_PORT}\nSOCKPERF_PORT={SOCKPERF_PORT}\nCTL_PORT={CTL_PORT}\n"
        ),
    )
    .context("write bench.conf")?;
    progress!("microvm: booting the microVM ({})", accel.name());
    // Under TCG a fio job of a second takes several, and the boot a quarter of a minute.
    let slow = if *accel == Accel::Kvm { 1 } else { 8 };
    let budget = 60
        + (p.rounds as u32 * MODES.len() as u32 * p.fio_sizes.len() as u32)
            * (p.fio_secs + 2)
            * slow;
    let mut boot = Boot::start(
        "microvm",
        scripts,
        image,
        accel,
        &sb.berth,
        &payload,
        &BootOpts {
            netns: Some(&w.dev),
            tap: Some("vmtap"),
            cgroup: "v2",
            payload_mb: p.fio_mib * 2 + 64,
            timeout_s: budget * 3 + 600,
            ..BootOpts::default()
        },
    )?;
    let mut lines = Vec::new();
    let ready = boot.until(
        "VMTEST READY",
        Duration::from_secs(budget as u64 * 2),
        |l| {
            if l.starts_with("VMBENCH ") {
                lines.push(l.to_string());
            }
        },
    );
    // Each job's round has its place: a job without a result stays NaN, with its reason.
    // The results of a guest that broke off later are kept.
    for row in fio.iter_mut() {
        row.samples[3] = vec![f64::NAN; p.rounds];
    }
    for l in &lines {
        match vm::bench_line(l) {
            Some((kind, name, run, v)) if kind == "fio" => {
                let (Some(k), true) = (fio_index(p, &name), run < p.rounds) else {
                    fio[0].errors.push(format!(
                        "microvm: a result for a job not asked for: {name} (round {run})"
                    ));
                    continue;
                };
                if let Some(e) = v.get("error") {
                    let e = e.as_str().unwrap_or("failed");
                    fio[k]
                        .errors
                        .push(format!("microvm: {name} (round {run}): {e}"));
                    continue;
                }
                let write = name.starts_with("write") || name.starts_with("randwrite");
                match fio_bw(&v.to_string(), write) {
                    Some(b) => fio[k].samples[3][run] = b / 1048576.0,
                    None => fio[k]
                        .errors
                        .push(format!("microvm: no bandwidth for {name} (round {run})")),
                }
            }
            Some(_) => {}
            None => {
                let what = l.split(' ').take(3).collect::<Vec<_>>().join(" ");
                fio[0].errors.push(format!(
                    "microvm: a result line that does not parse: {what} …"
                ));
            }
        }
    }
    ready?;
    let t = w.targets()[3].clone();
    for _ in 0..p.rounds {
        progress!("microvm: network to the microVM");
        for row in net.iter_mut() {
            crate::util::check_interrupted()?;
            match w.client(row, &t, p.net_secs) {
                Ok(v) => row.samples[3].push(v),
                Err(e) => row.failed(3, e),
            }
        }
    }
    // Done: the guest powers off after this connection.
    let _ = w.tm(&format!(
        "sh -c 'echo done | nc.openbsd -N -w 5 {GUEST_ADDR} {CTL_PORT}'"
    ));
    boot.until("VMTEST PASS", Duration::from_secs(120), |_| {})?;
    let rc = boot.finish(Duration::from_secs(120))?;
    if rc != 0 {
        bail!("the microVM exited with {rc}");
    }
    Ok(())
}

/// The row of fio job `name` (`MODE-BS`).
fn fio_index(p: &Plan, name: &str) -> Option<usize> {
    let (mode, bs) = name.rsplit_once('-')?;
    let m = MODES.iter().position(|(m, _)| *m == mode)?;
    let b = p.fio_sizes.iter().position(|s| s.to_string() == bs)?;
    Some(m * p.fio_sizes.len() + b)
}

/// Where a platform's servers are reached from the test machine.
#[derive(Clone)]
struct Target {
    addr: String,
    iperf: u16,
    sockperf: u16,
}

/// The suite's network: its own berth (a sandbox nested in the run's, its daemon in the
/// device namespace), the test machine's namespace, runc's, the host's servers and the tap
/// device of the microVM. Dropped: containers and servers stopped, the sandbox's sweep
/// removes the rest, namespaces included.
struct World {
    sb: Sandbox,
    dev: String,
    tm: String,
    rc: String,
    procs: Vec<Child>,
    runc: RuncBox,
}

impl World {
    fn create(main: &Sandbox) -> Result<World> {
        let extra = format!(
            "[network]\ntable = \"berth_mvm\"\npublish_on = \"tm0\"\n{}",
            crate::sandbox::UNCAPPED_POLICY
        );
        let sb = main.nested("mvm", "5s", &extra)?;
        let (dev, tm, rc) = (
            sb.scope().netns("dev"),
            sb.scope().netns("tm"),
            sb.scope().netns("rc"),
        );
        sh(&format!(
            "ip netns add {dev} && ip netns add {tm} && ip netns add {rc} && \
             for n in {dev} {tm} {rc}; do ip -n $n link set lo up; done && \
             ip -n {dev} link add tm0 type veth peer name eth0 netns {tm} && \
             ip -n {dev} addr add {DEVICE_ADDR}/24 dev tm0 && ip -n {dev} link set tm0 up && \
             ip -n {tm} addr add 192.0.2.2/24 dev eth0 && ip -n {tm} link set eth0 up && \
             ip -n {tm} route add default via {DEVICE_ADDR} && \
             ip -n {dev} link add rc0 type veth peer name eth0 netns {rc} && \
             ip -n {dev} addr add 10.77.1.1/30 dev rc0 && ip -n {dev} link set rc0 up && \
             ip -n {rc} addr add {RUNC_ADDR}/30 dev eth0 && ip -n {rc} link set eth0 up && \
             ip -n {rc} route add default via 10.77.1.1 && \
             ip -n {dev} tuntap add dev vmtap mode tap && \
             ip -n {dev} addr add 10.77.2.1/30 dev vmtap && ip -n {dev} link set vmtap up && \
             ip netns exec {dev} sysctl -qw net.ipv4.ip_forward=1"
        ))?;
        let script = format!(
            "/usr/bin/sockperf server --tcp -i 0.0.0.0 -p {SOCKPERF_PORT} >/dev/null &\nexec /usr/bin/iperf3 -s -p {IPERF_PORT}\n"
        );
        let network = format!(
            "mode = \"isolated\"\npublish = [\"{}:{IPERF_PORT}/tcp\", \"{}:{SOCKPERF_PORT}/tcp\"]",
            IPERF_PORT + 2,
            SOCKPERF_PORT + 2
        );
        sb.pack_pkg(&package(SRV, &script, &network, true)?)?;
        sb.build_repo()?;
        let runc = RuncBox::create(main, &rc)?;
        let mut w = World {
            sb,
            dev,
            tm,
            rc,
            procs: Vec::new(),
            runc,
        };
        w.sb.daemon_netns = Some(w.dev.clone());
        w.sb.start_daemon()?;
        w.sb.ok(&["update"])?;
        w.sb.ok(&["install", SRV])?;
        w.sb.ok(&["start", SRV])?;
        for argv in [
            vec![
                "iperf3".to_string(),
                "-s".into(),
                "-p".into(),
                IPERF_PORT.to_string(),
            ],
            vec![
                "sockperf".into(),
                "server".into(),
                "--tcp".into(),
                "-i".into(),
                "0.0.0.0".into(),
                "-p".into(),
                SOCKPERF_PORT.to_string(),
            ],
        ] {
            let c = Command::new("ip")
                .args(["netns", "exec", &w.dev])
                .args(&argv)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .context("a server in the device namespace")?;
            w.procs.push(c);
        }
        // The servers come up within a second (checked by the first client's retries).
        std::thread::sleep(Duration::from_millis(500));
        Ok(w)
    }

    fn targets(&self) -> [Target; 4] {
        let t = |addr: &str, off: u16| Target {
            addr: addr.into(),
            iperf: IPERF_PORT + off,
            sockperf: SOCKPERF_PORT + off,
        };
        [
            t(DEVICE_ADDR, 0),
            t(DEVICE_ADDR, 2),
            t(RUNC_ADDR, 0),
            t(GUEST_ADDR, 0),
        ]
    }

    fn tm(&self, cmd: &str) -> Result<String> {
        sh(&format!("ip netns exec {} {cmd}", self.tm))
    }

    /// One client run from the test machine for `row`: Mbit/s or transactions/s. A server
    /// that is not up yet is tried again for a few seconds.
    fn client(&self, row: &Row, t: &Target, secs: u32) -> Result<f64> {
        let mut last = None;
        for _ in 0..10 {
            crate::util::check_interrupted()?;
            let r = if row.test.starts_with("TCP_STREAM") {
                self.tm(&format!(
                    "iperf3 -c {} -p {} -t {secs} -l {} -J",
                    t.addr, t.iperf, row.size
                ))
                .and_then(|text| {
                    let v: Value = serde_json::from_str(&text).context("iperf3 JSON")?;
                    v["end"]["sum_received"]["bits_per_second"]
                        .as_f64()
                        .map(|b| b / 1e6)
                        .ok_or_else(|| format!("iperf3: no result: {}", v["error"]).into())
                })
            } else {
                self.tm(&format!(
                    "sockperf ping-pong --tcp -i {} -p {} -m {} -t {secs} --full-rtt 2>&1",
                    t.addr,
                    t.sockperf,
                    row.size.max(14)
                ))
                .and_then(|text| {
                    sockperf_parse(&text)
                        .map(|(avg_us, _)| 1e6 / avg_us)
                        .ok_or_else(|| format!("sockperf: no result: {}", tail(&text)).into())
                })
            };
            match r {
                Ok(v) => return Ok(v),
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Err(last.unwrap_or_else(|| "no client run".into()))
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.sb.stop_daemon();
        let lxcpath = self.sb.lxcpath();
        let _ = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.dev))
            .arg("lxc-stop")
            .arg("-P")
            .arg(&lxcpath)
            .args(["-n", SRV, "-k"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        for c in self.procs.iter_mut() {
            let _ = berth_sys::process::kill(-(c.id() as i32), libc::SIGKILL);
            let _ = c.wait();
        }
        self.runc.delete();
        let _ = &self.rc;
    }
}

/// runc's container: a root of the host's binaries and libraries bound read-only, /data
/// bound from a directory on the disk, /tmp a tmpfs, its network namespace the suite's
/// `rc`; it runs the network servers, and fio through `runc exec`.
struct RuncBox {
    bin: PathBuf,
    root: PathBuf,
    bundle: PathBuf,
}

const RUNC_ID: &str = "mvm";

impl RuncBox {
    fn create(sb: &Sandbox, netns: &str) -> Result<RuncBox> {
        let bin = which("runc").ok_or("runc is missing: install the Debian package runc")?;
        let root = sb.dir.join("runc-state");
        let bundle = sb.dir.join("mvm-runc");
        let data = sb.dir.join("mvm-runc-data");
        let rootfs = bundle.join("rootfs");
        let binds: Vec<&str> = ["/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc"]
            .into_iter()
            .filter(|d| Path::new(d).exists())
            .collect();
        for d in binds
            .iter()
            .map(|d| &d[1..])
            .chain(["data", "tmp", "proc", "dev", "sys"])
        {
            std::fs::create_dir_all(rootfs.join(d)).context("make runc's root")?;
        }
        std::fs::create_dir_all(&data).context("make runc's data directory")?;
        std::fs::create_dir_all(&root).context("make runc's state directory")?;
        crate::util::run(Command::new(&bin).args(["spec", "--bundle"]).arg(&bundle))?;
        let spec: Value = serde_json::from_slice(
            &std::fs::read(bundle.join("config.json")).context("read config.json")?,
        )
        .context("parse runc's spec")?;
        let spec = runc_spec(spec, &rootfs, &data, &binds, netns, &sb.cgroup_parent)?;
        std::fs::write(
            bundle.join("config.json"),
            serde_json::to_vec_pretty(&spec).unwrap_or_default(),
        )
        .context("write config.json")?;
        let b = RuncBox { bin, root, bundle };
        crate::util::runc_run_detached(b.cmd(), &b.bundle, RUNC_ID)?;
        Ok(b)
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--root")
            .arg(&self.root)
            .stdin(Stdio::null())
            .process_group(0);
        c
    }

    fn fio(&self, args: &[String]) -> Result<String> {
        crate::util::run(
            self.cmd()
                .args(["exec", "--cwd", "/data", RUNC_ID, "fio"])
                .args(args),
        )
    }

    fn delete(&self) {
        crate::util::run_quiet(self.cmd().args(["delete", "--force", RUNC_ID]));
    }
}

/// `runc spec`'s default made into the suite's container (see [`RuncBox`]).
fn runc_spec(
    mut spec: Value,
    rootfs: &Path,
    data: &Path,
    binds: &[&str],
    netns: &str,
    cgroup_parent: &str,
) -> Result<Value> {
    spec["process"]["terminal"] = json!(false);
    spec["process"]["args"] = json!(["/bin/sh", "-c", format!(
        "iperf3 -s -D -p {IPERF_PORT} && sockperf server --tcp -i 0.0.0.0 -p {SOCKPERF_PORT} --daemonize >/dev/null && exec sleep infinity"
    )]);
    spec["process"]["cwd"] = json!("/data");
    spec["root"] = json!({"path": rootfs.display().to_string(), "readonly": true});
    spec["hostname"] = json!("mvm");
    let mounts = spec["mounts"]
        .as_array_mut()
        .ok_or("runc spec has no mounts list")?;
    for d in binds {
        mounts.push(json!({"destination": d, "type": "bind", "source": d,
                           "options": ["rbind", "ro", "nosuid", "nodev"]}));
    }
    mounts.push(
        json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                       "options": ["nosuid", "nodev", "size=67108864", "mode=1777"]}),
    );
    mounts.push(
        json!({"destination": "/data", "type": "bind", "source": data.display().to_string(),
                       "options": ["rbind", "rw", "nosuid", "nodev"]}),
    );
    let ns = spec["linux"]["namespaces"]
        .as_array_mut()
        .ok_or("runc spec has no namespaces list")?;
    ns.retain(|n| n["type"] != "network");
    ns.push(json!({"type": "network", "path": format!("/run/netns/{netns}")}));
    spec["linux"]["cgroupsPath"] = json!(format!("/{cgroup_parent}.runc/mvm"));
    Ok(spec)
}

fn report(p: &Plan, accel: &Accel, fio: &[Row], net: &[Row]) -> SuiteOutput {
    let emulated = accel.label();
    let vm_head = match &emulated {
        Some(l) => format!("microVM ({l})"),
        None => "microVM (KVM)".into(),
    };
    let table = |rows: &[Row]| {
        let mut t = Table::new(&[
            "test",
            "size",
            "host",
            "berth",
            "runc",
            &vm_head,
            "berth / host",
            "runc / host",
            "microVM / host",
        ]);
        for r in rows {
            let mean = |i: usize| {
                crate::stats::summarize(&r.samples[i])
                    .map(|s| crate::report::mean_ci(&s))
                    .unwrap_or_else(|| "–".into())
            };
            t.row(vec![
                format!("{} ({})", r.test, r.unit),
                size_label(r.size),
                mean(0),
                mean(1),
                mean(2),
                mean(3),
                ratio_cell(&r.ratios(1)),
                ratio_cell(&r.ratios(2)),
                ratio_cell(&r.ratios(3)),
            ]);
        }
        t
    };
    let errors: Vec<String> = fio
        .iter()
        .chain(net)
        .flat_map(|r| {
            r.errors
                .iter()
                .map(move |e| format!("{} {}: {e}", r.test, size_label(r.size)))
        })
        .collect();
    let mut notes = vec![
        format!(
            "{} rounds; each round runs every test on the host, in the berth container and in runc, one after another; the microVM's rounds come after (booted once); ratios per round over the host's, mean ± 95 % CI, \"within noise\" when the interval holds 1",
            p.rounds
        ),
        format!(
            "fio: buffered I/O (psync; the file's page cache invalidated before each job; writes fsynced at its end), {} s per job on a {} MiB file, the platform's own disk (the microVM's: a file on the host's disk behind virtio-blk); MiB/s",
            p.fio_secs, p.fio_mib
        ),
    ];
    match accel {
        Accel::Kvm => notes.push("microVM: QEMU -M microvm with KVM, 2 vCPUs, 1 GiB".into()),
        Accel::Tcg(why) => notes.push(format!(
            "microVM: QEMU -M microvm under TCG ({why}): every microVM figure is {}",
            vm::EMULATED
        )),
    }
    notes.extend(errors.iter().take(20).map(|e| format!("error: {e}")));
    let net_notes = vec![
        format!("netperf is in Debian's non-free section: TCP_STREAM is `iperf3 -l SIZE` (the write size), TCP_RR is `sockperf ping-pong --tcp -m SIZE` (1 / mean round trip; sockperf's smallest message is 14 B); {} s per run", p.net_secs),
        "from a test-machine namespace across a veth pair to the device namespace: the host's servers there, berth's container behind its published ports (veth, bridge, NAT), runc's container on a routed veth of its own, the microVM's virtio-net on a tap device".into(),
    ];
    let mut raw = json!({
        "accel": accel.name(),
        "emulated": emulated.is_some(),
        "label": emulated,
        "accel_reason": match accel { Accel::Tcg(w) => json!(w), Accel::Kvm => Value::Null },
        "platforms": PLATFORMS,
        "plan": {"fio_sizes": p.fio_sizes, "fio_secs": p.fio_secs, "fio_mib": p.fio_mib,
                 "net_sizes": p.net_sizes, "net_secs": p.net_secs, "rounds": p.rounds},
        "fio": fio.iter().map(Row::json).collect::<Vec<_>>(),
        "net": net.iter().map(Row::json).collect::<Vec<_>>(),
    });
    raw["series"] = json!(series(fio, net, &vm_head));
    SuiteOutput {
        name: "microvm",
        sections: vec![
            Section {
                title: "fio per request size (the study's sequential and random reads and writes)"
                    .into(),
                table: table(fio),
                notes,
            },
            Section {
                title: "TCP per message size (the study's netperf TCP_STREAM and TCP_RR)".into(),
                table: table(net),
                notes: net_notes,
            },
        ],
        raw,
    }
}

/// Charts: one panel per test, a group per size, a bar per platform.
fn series(fio: &[Row], net: &[Row], vm_head: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut tests: Vec<(&str, &str)> = Vec::new();
    for r in fio.iter().chain(net) {
        if !tests.iter().any(|(t, _)| *t == r.test) {
            tests.push((&r.test, &r.unit));
        }
    }
    for (test, unit) in tests {
        let groups: Vec<crate::chart::ModeBars> = fio
            .iter()
            .chain(net)
            .filter(|r| r.test == test)
            .map(|r| {
                (
                    size_label(r.size),
                    PLATFORMS
                        .iter()
                        .enumerate()
                        .map(|(i, p)| {
                            let name = if i == 3 {
                                vm_head.to_string()
                            } else {
                                p.to_string()
                            };
                            (name, r.samples[i].clone())
                        })
                        .collect(),
                )
            })
            .collect();
        out.push(crate::chart::series_json(test, unit, &groups));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fio_jobs_are_the_same_everywhere_and_named_back() {
        let p = Plan::new(true, None);
        let a = fio_args("randwrite", 256, &p, "x.dat");
        assert!(a.contains(&"--bs=256".to_string()) && a.contains(&"--end_fsync=1".to_string()));
        assert!(
            a.contains(&"--direct=0".to_string()) && a.contains(&"--filename=x.dat".to_string())
        );
        assert!(!fio_args("read", 4096, &p, "x").contains(&"--end_fsync=1".to_string()));
        // every job's name finds its row again
        for (m, (mode, _)) in MODES.iter().enumerate() {
            for (b, bs) in p.fio_sizes.iter().enumerate() {
                assert_eq!(
                    fio_index(&p, &job_name(mode, *bs)),
                    Some(m * p.fio_sizes.len() + b)
                );
            }
        }
        assert_eq!(fio_index(&p, "read-12345"), None);
        assert_eq!(fio_index(&p, "scan-4096"), None);
        let full = Plan::new(false, Some(7));
        assert_eq!((full.rounds, full.fio_sizes.len()), (7, 5));
    }

    #[test]
    fn ratios_and_verdicts() {
        let mut r = Row::new("fio x", 4096, "MiB/s");
        r.samples = [
            vec![100.0, 110.0],
            vec![100.0, 110.0],
            vec![50.0, 55.0],
            vec![],
        ];
        assert_eq!(r.ratios(1), vec![1.0, 1.0]);
        assert_eq!(ratio_cell(&r.ratios(2)), "0.500 ± 0.000 (50 % lower)");
        assert_eq!(ratio_cell(&[0.9, 1.1]), "1.000 ± 1.271 (within noise)");
        assert_eq!(ratio_cell(&[1.5]), "1.500 (one round: no CI)");
        assert_eq!(ratio_cell(&r.ratios(3)), "–");
        let j = r.json();
        assert_eq!(j["ratio_runc_host"], json!([0.5, 0.5]));
        assert_eq!(j["microvm"], json!([]));
        assert_eq!(size_label(65536), "64 KiB");
        assert_eq!(size_label(256), "256 B");
    }

    #[test]
    fn runc_gets_the_suites_namespace_and_binds() {
        let spec = json!({"process": {"terminal": true}, "root": {}, "mounts": [],
                          "linux": {"namespaces": [{"type": "pid"}, {"type": "network"}]}});
        let s = runc_spec(
            spec,
            Path::new("/r"),
            Path::new("/d"),
            &["/usr"],
            "ns1",
            "bb",
        )
        .unwrap();
        assert_eq!(s["linux"]["namespaces"][1]["path"], "/run/netns/ns1");
        assert_eq!(s["linux"]["namespaces"].as_array().unwrap().len(), 2);
        assert_eq!(s["mounts"][0]["source"], "/usr");
        assert_eq!(s["mounts"][2]["source"], "/d");
        assert_eq!(s["root"]["readonly"], true);
        assert_eq!(s["linux"]["cgroupsPath"], "/bb.runc/mvm");
    }
}
