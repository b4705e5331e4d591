//! fs: file system throughput on the host and in a berth container's /data (DESIGN.md
//! decision 10). Both sides work on the same files: the guest in its /data (the daemon's
//! bind of the package's data directory), the host in that directory as the host sees it
//! ([`HostGuest::share_data`]).
//!
//! - the seed method (published A): busybox dd of 4096 × N blocks, write without and with
//!   `conv=fsync`, read after dropping the caches; the host writes back and drops the page
//!   cache of the data directories' files before every phase (`dd iflag=nocache`: their
//!   cache only, never the machine's);
//! - fio sequential and random read and write, 4 KiB blocks, direct I/O (`psync`).

use serde_json::{json, Value};

use super::cpu::{method_note, tool_versions};
use super::hostguest::{self, abab, HostGuest, Metric, Rounds, Tool};
use super::{Ctx, Suite};
use crate::report::{Section, SuiteOutput};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::util::{progress, Result};

pub const PKG: &str = "bench-fs";
pub const FIO: Tool = Tool {
    bin: "fio",
    debian: "fio",
};

const FIO_MODES: &[(&str, &str, &str)] = &[
    ("read", "sequential read", "D: native ≈ containers (runc)"),
    ("write", "sequential write", ""),
    ("randread", "random read", "D: containers ≈ native"),
    ("randwrite", "random write", ""),
];

#[derive(Default)]
pub struct Fs;

/// fio's JSON: the first job's bandwidth in bytes/s for `rw` (read or write).
pub fn fio_bw(text: &str, write: bool) -> Option<f64> {
    let start = text.find('{')?;
    let v: Value = serde_json::from_str(&text[start..]).ok()?;
    v["jobs"][0][if write { "write" } else { "read" }]["bw_bytes"].as_f64()
}

impl Suite for Fs {
    fn name(&self) -> &'static str {
        "fs"
    }

    fn prepare(&mut self, _sb: &Sandbox) -> Result<Vec<PkgSpec>> {
        Ok(vec![hostguest::tool_pkg(PKG, &[FIO])?])
    }

    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput> {
        let p = Sizes {
            r: Rounds::of(ctx),
            blocks: if ctx.quick { 2500 } else { 10000 },
            fio_mib: if ctx.quick { 32 } else { 256 },
            fio_secs: if ctx.quick { 1 } else { 2 },
        };
        let sb = &*ctx.sb;
        let mut hg = HostGuest::start(sb, PKG, &[FIO])?;
        hg.share_data();
        let ((dd, fio), fairness) = hg.measure_then_stop(sb, |hg| {
            let dd = dd_phases(hg, &p)?;
            let fio = fio_modes(hg, &p)?;
            Ok((dd, fio))
        })?;
        Ok(report(&p, &dd, &fio, &fairness, &fs_type(&sb.dir)))
    }

    fn environment(&self) -> Vec<(String, String)> {
        tool_versions(&[FIO])
    }
}

/// How much work each test does.
struct Sizes {
    r: Rounds,
    /// busybox dd's 4096-byte blocks.
    blocks: usize,
    fio_mib: usize,
    fio_secs: usize,
}

/// busybox dd: write, write with fsync, read, the caches dropped before each.
fn dd_phases(hg: &HostGuest, p: &Sizes) -> Result<Vec<Metric>> {
    let blocks = p.blocks;
    let mb = (blocks * 4096) as f64 / 1e6;
    let mut dd = vec![
        Metric::new(format!("dd write, no sync, 4096 × {blocks}"), "MB/s", true)
            .published("A: 18.50 → 18.63 (+0.70 %)"),
        Metric::new(
            format!("dd write, conv=fsync, 4096 × {blocks}"),
            "MB/s",
            true,
        )
        .published("A: 0.897 → 0.919 (+2.45 %)"),
        Metric::new(
            format!("dd read, caches dropped, 4096 × {blocks}"),
            "MB/s",
            true,
        )
        .published("A: 7.241 → 7.207 (−0.47 %)"),
    ];
    progress!("fs: busybox dd");
    let b = blocks.to_string();
    abab(&mut dd, p.r.rounds, p.r.warmup, |side, m, rec| {
        let phases = [
            "rm -f dd.img; busybox dd if=/dev/zero of=dd.img bs=4096 count=$1 2>/dev/null",
            "rm -f dd.img; busybox dd if=/dev/zero of=dd.img bs=4096 count=$1 conv=fsync 2>/dev/null",
            "busybox dd if=dd.img of=/dev/null bs=4096 2>/dev/null",
        ];
        for (k, script) in phases.iter().enumerate() {
            hg.drop_caches()?;
            let o = hg.run(side, script, std::slice::from_ref(&b))?;
            if rec {
                m[k].push(side, mb / o.secs, o.load);
            }
        }
        let _ = std::fs::remove_file(hg.guest_data.join("dd.img"));
        Ok(())
    })?;
    Ok(dd)
}

/// fio in each of [`FIO_MODES`], 4 KiB direct I/O.
fn fio_modes(hg: &HostGuest, p: &Sizes) -> Result<Vec<Metric>> {
    let mut fio: Vec<Metric> = FIO_MODES
        .iter()
        .map(|(_, label, published)| {
            let test = format!("fio {label}, 4k direct, {} MiB file", p.fio_mib);
            Metric::new(test, "MB/s", true)
                .published(published)
                .needs(FIO)
        })
        .collect();
    if FIO.host_path().is_none() {
        return Ok(fio);
    }
    for (k, (mode, label, _)) in FIO_MODES.iter().enumerate() {
        progress!("fs: fio {label}");
        let args: Vec<String> = [
            "--name=bench".to_string(),
            "--filename=fio.dat".into(),
            format!("--size={}M", p.fio_mib),
            "--bs=4k".into(),
            "--direct=1".into(),
            "--ioengine=psync".into(),
            format!("--rw={mode}"),
            format!("--runtime={}", p.fio_secs),
            "--time_based".into(),
            "--output-format=json".into(),
        ]
        .to_vec();
        let write = mode.contains("write");
        abab(
            &mut fio[k..k + 1],
            p.r.rounds,
            p.r.warmup,
            |side, m, rec| {
                hg.drop_caches()?;
                let o = hg.run(side, "fio \"$@\"", &args)?;
                let v = fio_bw(&o.text, write).ok_or_else(|| {
                    let tail: Vec<&str> = o.text.trim().lines().rev().take(3).collect();
                    format!("fio: no bandwidth in its output: {}", tail.join(" / "))
                })?;
                if rec {
                    m[0].push(side, v / 1e6, o.load);
                }
                Ok(())
            },
        )?;
    }
    Ok(fio)
}

fn report(
    p: &Sizes,
    dd: &[Metric],
    fio: &[Metric],
    fairness: &[String],
    fstype: &str,
) -> SuiteOutput {
    let Sizes {
        r: Rounds { rounds, warmup },
        blocks,
        fio_mib,
        fio_secs,
    } = *p;
    let sections = vec![
        Section {
            title: "busybox dd (the seed method)".into(),
            table: hostguest::table(dd),
            notes: vec![
                format!("`busybox dd bs=4096 count={blocks}` from /dev/zero to a new file, then the same with `conv=fsync`, then the file to /dev/null; the data directories' files written back and dropped from the page cache by the host before every phase (`dd conv=fdatasync oflag=nocache`, `dd iflag=nocache`: their cache only); MB/s = bytes / time from the script's start to dd's exit"),
                format!("both sides work on the same files on {fstype}: the guest in /data (berth's bind of its data directory), the host in that directory (where a file sits on a virtual disk can change its speed more than a container does)"),
                "published A: 600 MHz MIPS router, overlayfs on squashfs + ubifs, 100 runs (host → guest); absolute MB/s not comparable".into(),
            ],
        },
        Section {
            title: "fio, 4 KiB direct I/O".into(),
            table: hostguest::table(fio),
            notes: vec![
                format!("`fio --bs=4k --direct=1 --ioengine=psync --size={fio_mib}M --runtime={fio_secs} --time_based --rw=MODE`, one job, caches dropped before each run; the file is laid out in the warm-up round"),
                "published D: Jetson Nano / Raspberry Pi 4, native vs runc vs microVMs: the container–native gap is insignificant".into(),
            ],
        },
        method_note(rounds, warmup, fairness),
    ];
    let all: Vec<&Metric> = dd.iter().chain(fio).collect();
    SuiteOutput {
        name: "fs",
        sections,
        raw: json!({
            "rounds": rounds, "warmup": warmup, "dd_blocks": blocks, "fio_mib": fio_mib,
            "fio_seconds": fio_secs, "file_system": fstype, "fairness": fairness,
            "metrics": all.iter().map(|m| m.json()).collect::<Vec<Value>>(),
        }),
    }
}

/// The file system type and source of the mount holding `dir`.
fn fs_type(dir: &std::path::Path) -> String {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut best: Option<(usize, String)> = None;
    for l in text.lines() {
        let Some((pre, post)) = l.split_once(" - ") else {
            continue;
        };
        let mp = pre.split(' ').nth(4).unwrap_or("");
        if dir.starts_with(mp) && best.as_ref().is_none_or(|(n, _)| mp.len() >= *n) {
            let mut f = post.split(' ');
            let ty = f.next().unwrap_or("");
            let src = f.next().unwrap_or("");
            best = Some((mp.len(), format!("{ty} ({src} at {mp})")));
        }
    }
    best.map(|b| b.1).unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fio_json() {
        let t =
            "note: x\n{\"jobs\": [{\"read\": {\"bw_bytes\": 1000}, \"write\": {\"bw_bytes\": 0}}]}";
        assert_eq!(fio_bw(t, false), Some(1000.0));
        assert_eq!(fio_bw(t, true), Some(0.0));
        assert_eq!(fio_bw("garbage", true), None);
    }
}
