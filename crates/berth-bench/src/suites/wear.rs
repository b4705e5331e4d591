//! wear: what berth writes to its flash (issue 35). The sandbox's state directory is a file
//! system of its own (ext4 on a loop device, as a device's data partition), so the bytes
//! that reach it are read from the block layer (`/sys/block/loopN/stat`, after a `syncfs`),
//! beside the daemon's own count (`berth stats`' `writes`: /proc/self/io and its fsyncs).
//!
//! Measured: an install (beyond the image's own bytes), a start and a stop, and an idle
//! window with one container running, its health command every 10 s, a schedule every
//! minute and a fleet server that sets a one-second polling time, given per hour against
//! the budget ([`IDLE_BUDGET`]; over it, the suite reports an error). The full form idles
//! an hour (so the hourly write of the schedule's run records is in it); `--quick`, 70 s.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use berth_testkit::Pkg;
use serde_json::{json, Value};

use super::{Ctx, Suite};
use crate::report::{verdict, Section, SuiteOutput, Table};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::util::{progress, run, Result};

const APP: &str = "wear-app";
/// Started and stopped (no schedule: one would start it between the stop and the start).
const PLAIN: &str = "wear-plain";
/// What an idle device may write to its state partition in an hour, file system included
/// (issue 35: "a few KB per hour"): one small file rewritten atomically, on ext4 with its
/// journal, is about 20 KB.
pub const IDLE_BUDGET: u64 = 32 * 1024;

/// The boot counter confirms the start after 5 s (default 2 minutes), so that the idle
/// window begins after it.
const CONFIG: &str = "[boot]\nconfirm_after = \"5s\"\n";

pub struct Wear;

fn packages() -> [Pkg; 2] {
    let pkg = |name: &str, tables: &str| {
        let mut p = Pkg::script(name, "1", "echo up\nexec sleep 100000\n").table(tables);
        p.description = "berth-bench payload".into();
        p
    };
    [
        pkg(
            APP,
            "[health]\ncmd = [\"/bin/busybox\", \"true\"]\ninterval = \"10s\"\n\
             [[schedule]]\ncron = \"* * * * *\"\ncmd = [\"/bin/busybox\", \"true\"]\n",
        ),
        pkg(PLAIN, ""),
    ]
}

/// The loop device under the state directory, its image and mount.
struct Partition {
    dev: String,
    mount: PathBuf,
}

impl Partition {
    /// A 96 MiB ext4 image in `dir`, mounted at `mount` (the sandbox's sweep unmounts it and
    /// frees its loop device with everything else below its directory).
    fn create(dir: &Path, mount: &Path) -> Result<Partition> {
        let image = dir.join("state.ext4");
        run(Command::new("truncate").args(["-s", "96M"]).arg(&image))?;
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image))?;
        std::fs::create_dir_all(mount).map_err(|e| format!("{}: {e}", mount.display()))?;
        let dev = run(Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&image))?
        .trim()
        .to_string();
        run(Command::new("mount").arg(&dev).arg(mount))?;
        let dev = dev.trim_start_matches("/dev/").to_string();
        Ok(Partition {
            dev,
            mount: mount.to_path_buf(),
        })
    }

    /// Bytes written to the device so far, after its file system's dirty data went out.
    fn written(&self) -> Result<u64> {
        let f = std::fs::File::open(&self.mount).map_err(|e| format!("{e}"))?;
        // SAFETY: syncfs on an open descriptor of the mounted file system.
        unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) };
        let stat = std::fs::read_to_string(format!("/sys/block/{}/stat", self.dev))
            .map_err(|e| format!("/sys/block/{}/stat: {e}", self.dev))?;
        let sectors: u64 = stat
            .split_whitespace()
            .nth(6)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("/sys/block/{}/stat: {stat}", self.dev))?;
        Ok(sectors * 512)
    }
}

/// The daemon's own writes, from `berth stats`: (bytes or null, fsyncs).
fn own(sb: &Sandbox) -> Result<(Option<u64>, u64)> {
    let w = &sb.json(&["stats"])?["writes"];
    Ok((w["bytes"].as_u64(), w["fsyncs"].as_u64().unwrap_or(0)))
}

/// One measured step: block bytes, the daemon's bytes and fsyncs.
#[derive(Clone, Copy, Default)]
struct Step {
    block: u64,
    daemon: Option<u64>,
    fsyncs: u64,
}

fn measure(sb: &Sandbox, part: &Partition, f: impl FnOnce() -> Result<()>) -> Result<Step> {
    let (b0, (d0, s0)) = (part.written()?, own(sb)?);
    f()?;
    let (b1, (d1, s1)) = (part.written()?, own(sb)?);
    Ok(Step {
        block: b1 - b0,
        daemon: d0.zip(d1).map(|(a, b)| b - a),
        fsyncs: s1 - s0,
    })
}

impl Suite for Wear {
    fn name(&self) -> &'static str {
        "wear"
    }

    fn prepare(&mut self, _sb: &Sandbox) -> Result<Vec<PkgSpec>> {
        Ok(Vec::new())
    }

    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput> {
        // The full form sees the hourly write of the schedule's run records; the quick one
        // (CI) sees what is written more often than that.
        let window = Duration::from_secs(if ctx.quick { 70 } else { 3660 });
        let starts = ctx.runs_given.unwrap_or(if ctx.quick { 3 } else { 10 });
        let extra = format!("{}{CONFIG}", crate::sandbox::UNCAPPED_POLICY);
        let mut sb = ctx.sb.nested("wear", "2s", &extra)?;
        let part = Partition::create(&sb.dir, &sb.state_dir())?;
        // The fleet server on the host's loopback, at a free port.
        let ddi = super::soak::FleetServer::start(sb.dir.join("ddi.log"), None)?;
        sb.write_config(&format!("{extra}{}", ddi.config("wear", "5s")))?;
        for p in packages() {
            sb.pack_pkg(&p)?;
        }
        sb.build_repo()?;
        sb.start_daemon()?;
        sb.ok(&["update"])?;
        let image = std::fs::metadata(sb.package_file(APP))
            .map_err(|e| format!("{APP}'s image: {e}"))?
            .len();
        progress!("wear: install");
        let install = measure(&sb, &part, || sb.ok(&["install", APP]).map(drop))?;
        sb.ok(&["install", PLAIN])?;
        // Running from here on (its manifest's schedule would start it anyway).
        sb.ok(&["start", APP])?;
        // Past its start's writes and the boot counter's confirmation (5 s after the start).
        std::thread::sleep(Duration::from_secs(10));
        let (mut start, mut stop) = (Vec::new(), Vec::new());
        for i in 0..starts {
            progress!("wear: start and stop {}/{starts}", i + 1);
            start.push(measure(&sb, &part, || sb.ok(&["start", PLAIN]).map(drop))?);
            stop.push(measure(&sb, &part, || {
                sb.ok(&["stop", "-t", "1", PLAIN]).map(drop)
            })?);
        }
        progress!("wear: idle for {} s", window.as_secs());
        let polls0 = ddi.polls();
        let t0 = Instant::now();
        let idle = measure(&sb, &part, || {
            crate::util::sleep(window)?;
            Ok(())
        })?;
        let secs = t0.elapsed().as_secs_f64();
        let polls = ddi.polls() - polls0;
        let runs = sb.json(&["schedule", "list", APP])?;
        let _ = sb.ok(&["stop", "-t", "1", APP]);
        sb.stop_daemon();
        drop(ddi);
        if polls == 0 {
            return Err("the daemon never polled the fleet server".into());
        }
        Ok(output(
            image, install, &start, &stop, idle, secs, polls, &runs,
        ))
    }
}

fn mean(steps: &[Step], f: impl Fn(&Step) -> Option<u64>) -> Option<f64> {
    let v: Vec<u64> = steps.iter().filter_map(f).collect();
    (!v.is_empty() && v.len() == steps.len()).then(|| v.iter().sum::<u64>() as f64 / v.len() as f64)
}

fn cell(x: Option<f64>) -> String {
    x.map_or("–".into(), |x| format!("{x:.0}"))
}

#[allow(clippy::too_many_arguments)]
fn output(
    image: u64,
    install: Step,
    start: &[Step],
    stop: &[Step],
    idle: Step,
    secs: f64,
    polls: u64,
    schedules: &Value,
) -> SuiteOutput {
    let per_hour = |x: u64| x as f64 * 3600.0 / secs;
    let mut t = Table::new(&["what", "block bytes", "daemon's bytes", "fsyncs", "note"]);
    t.row(vec![
        "install (beyond the image)".into(),
        (install.block.saturating_sub(image)).to_string(),
        cell(install.daemon.map(|d| d.saturating_sub(image) as f64)),
        install.fsyncs.to_string(),
        format!("the image: {image} B"),
    ]);
    for (what, steps) in [("start", start), ("stop", stop)] {
        t.row(vec![
            format!("{what} (mean of {})", steps.len()),
            cell(mean(steps, |s| Some(s.block))),
            cell(mean(steps, |s| s.daemon)),
            cell(mean(steps, |s| Some(s.fsyncs))),
            String::new(),
        ]);
    }
    let idle_hour = per_hour(idle.block);
    t.row(vec![
        "idle, per hour".into(),
        format!("{idle_hour:.0}"),
        cell(idle.daemon.map(per_hour)),
        format!("{:.1}", per_hour(idle.fsyncs)),
        format!(
            "budget {IDLE_BUDGET} B/hour: {}; measured over {secs:.0} s: health every 10 s, a schedule every minute, {polls} fleet polls",
            verdict(idle_hour, IDLE_BUDGET as f64)
        ),
    ]);
    let mut errors = Vec::new();
    if idle_hour > IDLE_BUDGET as f64 {
        errors.push(json!(format!(
            "idle writes {idle_hour:.0} B/hour, over the budget of {IDLE_BUDGET}"
        )));
    }
    let step = |s: &Step| json!({"block": s.block, "daemon": s.daemon, "fsyncs": s.fsyncs});
    SuiteOutput {
        name: "wear",
        sections: vec![Section {
            title: "wear: what berth writes to its flash (ext4 on a loop device as the state partition)".into(),
            table: t,
            notes: vec![
                "block bytes: the partition's written sectors (/sys/block/loopN/stat) across the step, after a syncfs; they include the file system's journal and metadata".into(),
                "daemon's bytes: /proc/self/io write_bytes of the daemon (`berth stats`); the shims and probe helpers are not in it".into(),
            ],
        }],
        raw: json!({
            "image_bytes": image,
            "install": step(&install),
            "start": start.iter().map(step).collect::<Vec<_>>(),
            "start_block_bytes": start.iter().map(|s| s.block).collect::<Vec<_>>(),
            "stop_block_bytes": stop.iter().map(|s| s.block).collect::<Vec<_>>(),
            "stop": stop.iter().map(step).collect::<Vec<_>>(),
            "idle": step(&idle),
            "idle_seconds": secs,
            "idle_block_bytes_per_hour": idle_hour,
            "idle_budget_bytes_per_hour": IDLE_BUDGET,
            "fleet_polls": polls,
            "schedules": schedules,
            "errors": errors,
        }),
    }
}
