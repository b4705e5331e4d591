//! cpu: the same CPU work on the host and in a berth container (DESIGN.md decision 10).
//!
//! - sysbench cpu (primes up to 10000, a fixed number of events, one thread) with 1, 2, 4 and
//!   8 instances in parallel: time until the last one completes (published A's nbench-in-
//!   parallel table and B's sysbench runs);
//! - stress-ng CPU methods (`--cpu 1 --metrics-brief`, bogo ops/s): the stand-in for
//!   nbench/BYTEmark, which Debian does not package;
//! - Linpack: hpcc's HPL, N = 1000 (as published B), one process, MFLOPS;
//! - the LXCBENCH matrix for one sysbench instance: host alone, guest alone, both at once.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::hostguest::{self, abab, HostGuest, Matrix, Metric, Rounds, Tool};
use super::{Ctx, Suite};
use crate::report::{Section, SuiteOutput};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::util::{progress, Context, Result};

pub const PKG: &str = "bench-cpu";
pub const SYSBENCH: Tool = Tool {
    bin: "sysbench",
    debian: "sysbench",
};
pub const STRESS_NG: Tool = Tool {
    bin: "stress-ng",
    debian: "stress-ng",
};
pub const HPCC: Tool = Tool {
    bin: "hpcc",
    debian: "hpcc",
};

/// stress-ng methods and the nbench test each stands in for, with published A's diff %
/// (as guest − host, index: higher is better).
const METHODS: &[(&str, &str, &str)] = &[
    ("bitops", "≈ nbench Bitfield", "A Bitfield: +0.28 %"),
    ("double", "≈ nbench FP Emulation", "A FP Emulation: +0.10 %"),
    ("fft", "≈ nbench Fourier", "A Fourier: +0.14 %"),
    ("matrixprod", "≈ nbench LU Decomp.", "A LU Decomp.: −0.46 %"),
];

/// Published A's nbench-in-parallel diff % (guest − host time) per process count.
const PARALLEL_A: &[(usize, &str)] = &[
    (1, "A (nbench): +0.66 %; B: ≤ 4 %"),
    (2, "A (nbench): −0.23 %; B: ≤ 4 %"),
    (4, "A (nbench): −0.08 %; B: ≤ 4 %"),
    (8, "A (nbench): +0.19 %; B: ≤ 4 %"),
];

pub const PARALLEL_SCRIPT: &str = "n=$1; shift; i=0; while [ $i -lt $n ]; do \"$@\" > out.$i 2>&1 & i=$((i+1)); done; wait; cat out.*; rm -f out.*";

#[derive(Default)]
pub struct Cpu;

/// sysbench in parallel, stress-ng, Linpack, the matrix.
type CpuResults = (Vec<Metric>, Vec<Metric>, Vec<Metric>, Vec<Matrix>);

/// hpcc's input: HPL with one N, a 1 × 1 process grid; the rest as Debian's example.
pub fn hpcc_input(n: usize) -> String {
    format!(
        "HPLinpack benchmark input file\nInnovative Computing Laboratory, University of Tennessee\nHPL.out      output file name (if any)\n8            device out (6=stdout,7=stderr,file)\n1            # of problems sizes (N)\n{n}         Ns\n1            # of NBs\n80           NBs\n0            PMAP process mapping (0=Row-,1=Column-major)\n1            # of process grids (P x Q)\n1            Ps\n1            Qs\n16.0         threshold\n1            # of panel fact\n2            PFACTs (0=left, 1=Crout, 2=Right)\n1            # of recursive stopping criterium\n4            NBMINs (>= 1)\n1            # of panels in recursion\n2            NDIVs\n1            # of recursive panel fact.\n1            RFACTs (0=left, 1=Crout, 2=Right)\n1            # of broadcast\n1            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)\n1            # of lookahead depth\n1            DEPTHs (>=0)\n2            SWAP (0=bin-exch,1=long,2=mix)\n64           swapping threshold\n0            L1 in (0=transposed,1=no-transposed) form\n0            U  in (0=transposed,1=no-transposed) form\n1            Equilibration (0=no,1=yes)\n8            memory alignment in double (> 0)\n##### This line (no. 32) is ignored (it serves as a separator). ######\n0                      \t\tNumber of additional problem sizes for PTRANS\n1200 10000 30000        \tvalues of N\n0                       \tnumber of additional blocking sizes for PTRANS\n40 9 8 13 13 20 16 32 64       \tvalues of NB\n"
    )
}

/// Writes hpcc's input into both sides' working directories.
pub fn hpcc_setup(hg: &HostGuest, n: usize) -> Result<()> {
    for d in [&hg.host_data, &hg.guest_data] {
        std::fs::write(d.join("hpccinf.txt"), hpcc_input(n)).context("write hpccinf.txt")?;
    }
    Ok(())
}

pub const HPCC_SCRIPT: &str = "rm -f hpccoutf.txt; hpcc > /dev/null || exit 1; cat hpccoutf.txt";

/// `key=value` lines of hpcc's summary section.
pub fn hpcc_summary(text: &str) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    let mut inside = false;
    for l in text.lines() {
        if l.starts_with("Begin of Summary section") {
            inside = true;
        } else if l.starts_with("End of Summary section") {
            inside = false;
        } else if inside {
            if let Some((k, v)) = l.split_once('=') {
                if let Ok(v) = v.trim().parse() {
                    m.insert(k.trim().to_string(), v);
                }
            }
        }
    }
    m
}

/// stress-ng's bogo ops/s (real time) of the cpu stressor from `--metrics-brief`.
pub fn stress_ng_rate(text: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let rest = l.split_once("] ")?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        (f.first() == Some(&"cpu") && f.len() >= 7)
            .then(|| f[5].parse().ok())
            .flatten()
    })
}

fn bad(tool: &str, text: &str) -> crate::util::Error {
    let tail: Vec<&str> = text.lines().rev().take(4).collect();
    format!("{tool}: unexpected output: {}", tail.join(" / ")).into()
}

fn present(t: Tool) -> bool {
    t.host_path().is_some()
}

impl Suite for Cpu {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn prepare(&mut self, _sb: &Sandbox) -> Result<Vec<PkgSpec>> {
        Ok(vec![hostguest::tool_pkg(
            PKG,
            &[SYSBENCH, STRESS_NG, HPCC],
        )?])
    }

    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput> {
        let p = Sizes {
            r: Rounds::of(ctx),
            events: ctx.events.unwrap_or(if ctx.quick { 500 } else { 2000 }),
            seconds: if ctx.quick { 1 } else { 2 },
            hpl_n: 1000,
        };
        let sb = &*ctx.sb;
        let hg = HostGuest::start(sb, PKG, &[SYSBENCH, STRESS_NG, HPCC])?;
        let (r, fairness) = hg.measure_then_stop(sb, |hg| -> Result<CpuResults> {
            let (par, matrix) = sysbench_parallel(hg, &p)?;
            let sng = stress_ng_methods(hg, &p)?;
            let hpl = linpack(hg, &p)?;
            Ok((par, sng, hpl, matrix))
        })?;
        Ok(report(&p, r, &fairness))
    }

    fn environment(&self) -> Vec<(String, String)> {
        tool_versions(&[SYSBENCH, STRESS_NG, HPCC])
    }
}

/// How much work each test does.
struct Sizes {
    r: Rounds,
    /// sysbench events per instance.
    events: usize,
    /// stress-ng's time per method.
    seconds: usize,
    /// Linpack's matrix size.
    hpl_n: usize,
}

/// sysbench, N instances in parallel, and the host-and-guest-at-once matrix of one (none
/// without sysbench).
fn sysbench_parallel(hg: &HostGuest, p: &Sizes) -> Result<(Vec<Metric>, Vec<Matrix>)> {
    let mut par: Vec<Metric> = PARALLEL_A
        .iter()
        .map(|(n, published)| {
            let s = if *n > 1 { "s" } else { "" };
            Metric::new(format!("sysbench cpu, {n} instance{s}"), "s", false)
                .published(published)
                .needs(SYSBENCH)
        })
        .collect();
    if !present(SYSBENCH) {
        return Ok((par, Vec::new()));
    }
    let mut matrix = vec![Matrix::new("sysbench cpu, 1 instance", "s", false)];
    let args = |n: usize| -> Vec<String> {
        let mut v = vec![n.to_string()];
        v.extend(
            [
                "sysbench",
                "cpu",
                "--cpu-max-prime=10000",
                &format!("--events={}", p.events),
                "--time=0",
                "--threads=1",
                "run",
            ]
            .map(String::from),
        );
        v
    };
    for (k, (n, _)) in PARALLEL_A.iter().enumerate() {
        progress!("cpu: sysbench, {n} in parallel");
        abab(
            &mut par[k..k + 1],
            p.r.rounds,
            p.r.warmup,
            |side, m, rec| {
                let o = hg.run(side, PARALLEL_SCRIPT, &args(*n))?;
                if o.text.matches("total time:").count() != *n {
                    return Err(bad("sysbench", &o.text));
                }
                if rec {
                    m[0].push(side, o.secs, o.load);
                }
                Ok(())
            },
        )?;
    }
    progress!("cpu: sysbench, host and guest at once");
    hostguest::matrix_rows(
        hg,
        &mut matrix,
        p.r.rounds,
        PARALLEL_SCRIPT,
        &args(1),
        |o| Ok(vec![o.secs]),
    )?;
    matrix[0].published = "(LXCBENCH has no sysbench row)".into();
    Ok((par, matrix))
}

/// stress-ng's CPU methods, bogo ops/s.
fn stress_ng_methods(hg: &HostGuest, p: &Sizes) -> Result<Vec<Metric>> {
    let mut sng: Vec<Metric> = METHODS
        .iter()
        .map(|(m, like, published)| {
            Metric::new(format!("stress-ng cpu {m} ({like})"), "bogo ops/s", true)
                .published(published)
                .needs(STRESS_NG)
        })
        .collect();
    if !present(STRESS_NG) {
        return Ok(sng);
    }
    for (k, (method, _, _)) in METHODS.iter().enumerate() {
        progress!("cpu: stress-ng {method}");
        let args: Vec<String> = [
            "--cpu",
            "1",
            "--cpu-method",
            method,
            "--timeout",
            &format!("{}s", p.seconds),
            "--metrics-brief",
        ]
        .map(String::from)
        .to_vec();
        abab(
            &mut sng[k..k + 1],
            p.r.rounds,
            p.r.warmup,
            |side, m, rec| {
                let o = hg.run(side, "stress-ng \"$@\"", &args)?;
                let v = stress_ng_rate(&o.text).ok_or_else(|| bad("stress-ng", &o.text))?;
                if rec {
                    m[0].push(side, v, o.load);
                }
                Ok(())
            },
        )?;
    }
    Ok(sng)
}

/// hpcc's HPL, MFLOPS.
fn linpack(hg: &HostGuest, p: &Sizes) -> Result<Vec<Metric>> {
    let test = format!("Linpack (hpcc HPL, N = {})", p.hpl_n);
    if !present(HPCC) {
        return Ok(vec![Metric::new(test, "MFLOPS", true).skip(HPCC.skipped())]);
    }
    let mut hpl =
        vec![Metric::new(test, "MFLOPS", true).published("B: no relevant overhead (N = 1000)")];
    progress!("cpu: Linpack");
    hpcc_setup(hg, p.hpl_n)?;
    abab(&mut hpl, p.r.rounds, p.r.warmup, |side, m, rec| {
        let o = hg.run(side, HPCC_SCRIPT, &[])?;
        let s = hpcc_summary(&o.text);
        let v = s.get("HPL_Tflops").ok_or_else(|| bad("hpcc", &o.text))? * 1e6;
        if rec {
            m[0].push(side, v, o.load);
        }
        Ok(())
    })?;
    Ok(hpl)
}

fn report(p: &Sizes, (par, sng, hpl, matrix): CpuResults, fairness: &[String]) -> SuiteOutput {
    let Sizes {
        r: Rounds { rounds, warmup },
        events,
        seconds,
        hpl_n,
    } = *p;
    let mut sections = vec![
        Section {
            title: "sysbench cpu, instances in parallel (time to complete)".into(),
            table: hostguest::table(&par),
            notes: vec![
                format!("`sysbench cpu --cpu-max-prime=10000 --events={events} --time=0 --threads=1 run`, N started at once by one busybox sh; time from the start of the script to the last instance's exit"),
                "published A: nbench, N processes on a single-core MIPS board, diff % converted to (guest − host) / host; B: sysbench on MIPS/ARM boards, overhead ≤ 4 % worst case".into(),
            ],
        },
        Section {
            title: "stress-ng CPU methods (stand-in for nbench/BYTEmark)".into(),
            table: hostguest::table(&sng),
            notes: vec![
                format!("`stress-ng --cpu 1 --cpu-method M --timeout {seconds}s --metrics-brief`: bogo ops per second of real time. nbench/BYTEmark is not in Debian; stress-ng's methods stand in for it (the pairing with nbench tests is by kind of work, not the same code), so compare only the diff %"),
            ],
        },
        Section {
            title: "Linpack".into(),
            table: hostguest::table(&hpl),
            notes: vec!["hpcc (HPC Challenge) run as one MPI singleton, P = Q = 1, NB = 80; HPL_Tflops × 10⁶".into()],
        },
    ];
    if !matrix.is_empty() {
        sections.push(hostguest::matrix_section(
            "host and container at once (LXCBENCH matrix)",
            &matrix,
            vec![format!("relative to host alone (1.00 = as fast; lower = slower); both at once: one instance on each side, started together; {rounds} rounds after one warm-up. This machine has 2 cores, so one instance each should not compete")],
        ));
    }
    sections.push(method_note(rounds, warmup, fairness));
    let all: Vec<&Metric> = par.iter().chain(&sng).chain(&hpl).collect();
    SuiteOutput {
        name: "cpu",
        sections,
        raw: json!({
            "rounds": rounds, "warmup": warmup, "sysbench_events": events,
            "stress_ng_seconds": seconds, "hpl_n": hpl_n, "fairness": fairness,
            "metrics": all.iter().map(|m| m.json()).collect::<Vec<Value>>(),
            "matrix": matrix.iter().map(|m| m.json()).collect::<Vec<Value>>(),
        }),
    }
}

/// The method section every host-vs-guest suite ends with.
pub fn method_note(rounds: usize, warmup: usize, fairness: &[String]) -> Section {
    let mut t = crate::report::Table::new(&["method", "value"]);
    t.row(vec![
        "order".into(),
        format!("{warmup} warm-up round, then {rounds} rounds of host, guest (ABAB), per test"),
    ]);
    t.row(vec![
        "guest".into(),
        "berth package, `base = \"host\"` (host /lib, /usr/lib read-only), the host's tool binaries copied into /bin; runs via `lxc-attach` into the running container (its namespaces, root, cgroups); the clock starts when the script is about to exec the tool".into(),
    ]);
    t.row(vec![
        "host fairness".into(),
        if fairness.is_empty() {
            "no cpu/blkio cgroup of the container found: host runs stay in berth-bench's cgroup"
                .into()
        } else {
            format!(
                "host runs join sibling cgroups of the container's with its weights: {}",
                fairness.join("; ")
            )
        },
    ]);
    t.row(vec![
        "statistics".into(),
        format!("ratio = guest / host per round; mean ± 95 % CI by Student's t (t = {:.2} for {rounds} rounds); \"within noise\" when that CI contains 1; load = mean 1-minute load average right after each run", hostguest::t_for(rounds)),
    ]);
    Section {
        title: "method".into(),
        table: t,
        notes: Vec::new(),
    }
}

pub fn tool_versions(tools: &[Tool]) -> Vec<(String, String)> {
    tools
        .iter()
        .map(|t| {
            let v = match t.host_path() {
                None => t.skipped(),
                Some(p) => debian_version(t.debian).unwrap_or_else(|| p.display().to_string()),
            };
            (t.bin.to_string(), v)
        })
        .collect()
}

fn debian_version(pkg: &str) -> Option<String> {
    let o = crate::util::output(std::process::Command::new("dpkg-query").args([
        "-W",
        "-f",
        "${Version}",
        pkg,
    ]))
    .ok()?;
    let v = String::from_utf8_lossy(&o.stdout).trim().to_string();
    (o.status.success() && !v.is_empty()).then(|| format!("{pkg} {v} (Debian)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stress_ng() {
        let t = "stress-ng: metrc: [3371] stressor       bogo ops real time  usr time  sys time   bogo ops/s     bogo ops/s\nstress-ng: metrc: [3371] cpu                2571      1.00      1.00      0.00      2569.94        2569.80\n";
        assert_eq!(stress_ng_rate(t), Some(2569.94));
        assert_eq!(stress_ng_rate("nothing"), None);
    }

    #[test]
    fn parses_hpcc_summary() {
        let t = "x=1\nBegin of Summary section.\nHPL_Tflops=0.0066\nStarSTREAM_Copy=51.6\nEnd of Summary section.\ny=2\n";
        let s = hpcc_summary(t);
        assert_eq!(s["HPL_Tflops"], 0.0066);
        assert_eq!(s["StarSTREAM_Copy"], 51.6);
        assert!(!s.contains_key("x"));
        assert!(hpcc_input(1000).contains("\n1000         Ns\n"));
    }
}
