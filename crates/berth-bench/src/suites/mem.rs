//! mem: memory bandwidth on the host and in a berth container (DESIGN.md decision 10).
//!
//! - STREAM Copy, Scale, Add, Triad from hpcc (single process), set beside published B;
//! - mbw (memcpy, dumb loop, memcpy in blocks);
//! - the LXCBENCH matrix for STREAM (published C): host alone, guest alone, both at once.

use serde_json::{json, Value};

use super::cpu::{hpcc_setup, hpcc_summary, method_note, tool_versions, HPCC, HPCC_SCRIPT};
use super::hostguest::{self, abab, HostGuest, Matrix, Metric, Rounds, Tool};
use super::{Ctx, Suite};
use crate::report::{Section, SuiteOutput};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::util::{progress, Result};

pub const PKG: &str = "bench-mem";
pub const MBW: Tool = Tool {
    bin: "mbw",
    debian: "mbw",
};

/// STREAM kernels: hpcc key, published B (range of % change over the four boards), published
/// C (host with guest, guest with host; both alone are 1.00).
const STREAM: &[(&str, &str, &str)] = &[
    ("Copy", "B: −0.2 … −4.5 %", "1.00, 1.00, 0.99, 0.95"),
    ("Scale", "B: −0.1 … −2.2 %", "1.00, 1.00, 0.99, 0.84"),
    ("Add", "B: −0.1 … −0.8 %", "1.00, 1.00, 0.99, 0.83"),
    ("Triad", "B: −0.1 … −1.0 %", "1.00, 1.00, 0.99, 0.77"),
];

const MBW_TESTS: &[(&str, &str)] = &[
    ("MEMCPY", "memcpy"),
    ("DUMB", "dumb (b[i]=a[i])"),
    ("MCBLOCK", "memcpy in blocks"),
];

#[derive(Default)]
pub struct Mem;

/// mbw's `AVG` lines: method → MiB/s.
pub fn mbw_avgs(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| l.starts_with("AVG"))
        .filter_map(|l| {
            let method = l.split("Method:").nth(1)?.split_whitespace().next()?;
            let v = l
                .split("Copy:")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some((method.to_string(), v))
        })
        .collect()
}

fn stream_values(text: &str) -> Result<Vec<f64>> {
    let s = hpcc_summary(text);
    STREAM
        .iter()
        .map(|(k, _, _)| {
            s.get(&format!("SingleSTREAM_{k}"))
                .map(|gb| gb * 1000.0)
                .ok_or_else(|| format!("hpcc: no SingleSTREAM_{k} in its summary").into())
        })
        .collect()
}

impl Suite for Mem {
    fn name(&self) -> &'static str {
        "mem"
    }

    fn prepare(&mut self, _sb: &Sandbox) -> Result<Vec<PkgSpec>> {
        Ok(vec![hostguest::tool_pkg(PKG, &[HPCC, MBW])?])
    }

    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput> {
        let p = Sizes {
            r: Rounds::of(ctx),
            // hpcc sizes STREAM's vectors from HPL's matrix (N² doubles / 3 each).
            hpl_n: if ctx.quick { 1000 } else { 2000 },
            mbw_mib: if ctx.quick { 64 } else { 256 },
            mbw_n: if ctx.quick { 2 } else { 5 },
        };
        let sb = &*ctx.sb;
        let hg = HostGuest::start(sb, PKG, &[HPCC, MBW])?;
        let ((stream, matrix, mbw), fairness) = hg.measure_then_stop(sb, |hg| {
            let (stream, matrix) = stream(hg, &p)?;
            Ok((stream, matrix, mbw(hg, &p)?))
        })?;
        Ok(report(&p, &stream, &mbw, &matrix, &fairness))
    }

    fn environment(&self) -> Vec<(String, String)> {
        tool_versions(&[MBW])
    }
}

/// How much work each test does.
struct Sizes {
    r: Rounds,
    hpl_n: usize,
    mbw_mib: usize,
    /// mbw's runs per method.
    mbw_n: usize,
}

/// STREAM (hpcc), and its host-and-guest-at-once matrix (none without hpcc).
fn stream(hg: &HostGuest, p: &Sizes) -> Result<(Vec<Metric>, Vec<Matrix>)> {
    let mut stream: Vec<Metric> = STREAM
        .iter()
        .map(|(k, b, _)| {
            Metric::new(format!("STREAM {k}"), "MB/s", true)
                .published(b)
                .needs(HPCC)
        })
        .collect();
    if HPCC.host_path().is_none() {
        return Ok((stream, Vec::new()));
    }
    let mut matrix: Vec<Matrix> = STREAM
        .iter()
        .map(|(k, _, c)| {
            let mut m = Matrix::new(format!("STREAM {k}"), "MB/s", true);
            m.published = (*c).into();
            m
        })
        .collect();
    progress!("mem: STREAM (hpcc)");
    hpcc_setup(hg, p.hpl_n)?;
    abab(&mut stream, p.r.rounds, p.r.warmup, |side, m, rec| {
        let o = hg.run(side, HPCC_SCRIPT, &[])?;
        let v = stream_values(&o.text)?;
        if rec {
            for (x, v) in m.iter_mut().zip(v) {
                x.push(side, v, o.load);
            }
        }
        Ok(())
    })?;
    progress!("mem: STREAM, host and guest at once");
    hostguest::matrix_rows(hg, &mut matrix, p.r.rounds, HPCC_SCRIPT, &[], |o| {
        stream_values(&o.text)
    })?;
    Ok((stream, matrix))
}

/// mbw's methods, MiB/s.
fn mbw(hg: &HostGuest, p: &Sizes) -> Result<Vec<Metric>> {
    let mut mbw: Vec<Metric> = MBW_TESTS
        .iter()
        .map(|(_, label)| {
            Metric::new(format!("mbw {label}, {} MiB", p.mbw_mib), "MiB/s", true).needs(MBW)
        })
        .collect();
    if MBW.host_path().is_none() {
        return Ok(mbw);
    }
    progress!("mem: mbw");
    let (n, mib) = (p.mbw_n.to_string(), p.mbw_mib.to_string());
    let args: Vec<String> = ["-q", "-n", &n, "-t0", "-t1", "-t2", &mib]
        .map(String::from)
        .to_vec();
    abab(&mut mbw, p.r.rounds, p.r.warmup, |side, m, rec| {
        let o = hg.run(side, "mbw \"$@\"", &args)?;
        let avgs = mbw_avgs(&o.text);
        for (k, (method, _)) in MBW_TESTS.iter().enumerate() {
            let v = avgs
                .iter()
                .find(|(x, _)| x == method)
                .map(|(_, v)| *v)
                .ok_or_else(|| format!("mbw: no AVG line for {method}: {}", o.text.trim()))?;
            if rec {
                m[k].push(side, v, o.load);
            }
        }
        Ok(())
    })?;
    Ok(mbw)
}

fn report(
    p: &Sizes,
    stream: &[Metric],
    mbw: &[Metric],
    matrix: &[Matrix],
    fairness: &[String],
) -> SuiteOutput {
    let Sizes {
        r: Rounds { rounds, warmup },
        hpl_n,
        mbw_mib,
        mbw_n,
    } = *p;
    let vector = hpl_n * hpl_n / 3;
    let mut sections = vec![
        Section {
            title: "STREAM (hpcc)".into(),
            table: hostguest::table(stream),
            notes: vec![
                format!("hpcc's SingleSTREAM (one process), HPL N = {hpl_n}, so STREAM vectors of about {vector} doubles ({:.0} MiB each); GB/s × 1000", vector as f64 * 8.0 / 1048576.0),
                "published B: % change in the container on four MIPS/ARM boards (all slower, −0.1 to −4.5 %); its absolute MB/s come from 580 MHz–1.2 GHz boards and are not comparable".into(),
            ],
        },
        Section {
            title: "mbw".into(),
            table: hostguest::table(mbw),
            notes: vec![format!("`mbw -q -n {mbw_n} -t0 -t1 -t2 {mbw_mib}`: the AVG line of each method")],
        },
    ];
    if !matrix.is_empty() {
        sections.push(hostguest::matrix_section(
            "host and container at once (LXCBENCH matrix, STREAM)",
            matrix,
            vec![
                format!("relative to host alone; both at once: one hpcc on each side, started together; {rounds} rounds after one warm-up"),
                "published C: GENIVI LXCBENCH on a 2-core Cortex-A9 (host alone, guest alone, host with guest, guest with host)".into(),
            ],
        ));
    }
    sections.push(method_note(rounds, warmup, fairness));
    let all: Vec<&Metric> = stream.iter().chain(mbw).collect();
    SuiteOutput {
        name: "mem",
        sections,
        raw: json!({
            "rounds": rounds, "warmup": warmup, "hpl_n": hpl_n, "mbw_mib": mbw_mib,
            "mbw_n": mbw_n, "fairness": fairness,
            "metrics": all.iter().map(|m| m.json()).collect::<Vec<Value>>(),
            "matrix": matrix.iter().map(|m| m.json()).collect::<Vec<Value>>(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mbw() {
        let t = "0\tMethod: MEMCPY\tElapsed: 0.00327\tMiB: 32.00000\tCopy: 9782.941 MiB/s\nAVG\tMethod: MEMCPY\tElapsed: 0.00315\tMiB: 32.00000\tCopy: 10153.895 MiB/s\nAVG\tMethod: MCBLOCK\tElapsed: 0.00150\tMiB: 32.00000\tCopy: 21312.021 MiB/s\n";
        let v = mbw_avgs(t);
        assert_eq!(
            v,
            vec![("MEMCPY".into(), 10153.895), ("MCBLOCK".into(), 21312.021)]
        );
    }
}
