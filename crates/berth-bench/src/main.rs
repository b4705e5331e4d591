//! `berth-bench`: measures what berth costs against the bare host and the bare tools
//! (DESIGN.md decision 10). It builds a sandboxed berth of its own (config, key, signed
//! repository, daemon, cgroup parent `berth-bench-<pid>`) in a temp dir, runs the suites
//! asked for and removes everything again, also after an error or Ctrl-C.

mod env;
mod payload;
mod procfs;
mod report;
mod sandbox;
mod stats;
mod suites;
mod util;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use serde_json::{json, Value};

use crate::sandbox::Sandbox;
use crate::suites::{Ctx, Suite};
use crate::util::{bail, progress, which, Result};

const USAGE: &str = "\
usage: berth-bench [--quick] [--runs N] [--json FILE] [--markdown FILE] [--berth PATH] SUITE...

suites:
  activation   start request → payload's first instruction, and stop time: berth vs
               lxc-execute vs runc on the same root file system
  footprint    stripped binary size, daemon memory idle and with 10 containers, per-container cost
  cpu          host vs container: sysbench cpu 1/2/4/8 in parallel, stress-ng CPU methods,
               Linpack (hpcc), host and container at once
  mem          host vs container: STREAM (hpcc), mbw, host and container at once
  fs           host vs container: busybox dd (write, write+fsync, read), fio 4k direct I/O
  governor     main-service response time under a CPU hog with and without the governor;
               the daemon's own CPU use
  all          every suite

options:
  --quick          5 measured runs instead of 30, shorter settling (for CI); cpu, mem, fs:
                   3 rounds instead of 10 and small sizes
  --runs N         measured runs per peer / rounds per test (overrides the defaults)
  --json FILE      every raw sample and the environment, as JSON
  --markdown FILE  the report (default: stdout)
  --berth PATH     the berth binary (default: next to berth-bench, else on PATH)

Needs root, lxc, squashfs-tools and busybox-static; runc and gcc are used when present;
cpu, mem, fs use sysbench, stress-ng, hpcc, mbw, fio (a missing one is reported as skipped).";

struct Opts {
    quick: bool,
    runs: Option<usize>,
    json: Option<PathBuf>,
    markdown: Option<PathBuf>,
    berth: Option<PathBuf>,
    suites: Vec<String>,
}

fn parse_args() -> std::result::Result<Opts, lexopt::Error> {
    use lexopt::prelude::*;
    let mut o = Opts {
        quick: false,
        runs: None,
        json: None,
        markdown: None,
        berth: None,
        suites: Vec::new(),
    };
    let mut p = lexopt::Parser::from_env();
    while let Some(arg) = p.next()? {
        match arg {
            Long("quick") => o.quick = true,
            Long("runs") => o.runs = Some(p.value()?.parse()?),
            Long("json") => o.json = Some(p.value()?.into()),
            Long("markdown") => o.markdown = Some(p.value()?.into()),
            Long("berth") => o.berth = Some(p.value()?.into()),
            Short('h') | Long("help") => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            Value(v) => o.suites.push(v.string()?),
            _ => return Err(arg.unexpected()),
        }
    }
    Ok(o)
}

/// `--berth`, else `berth` next to this executable (target/release, target/debug), else PATH.
fn find_berth(given: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(p) = given {
        if !p.is_file() {
            bail!("--berth {}: no such file", p.display());
        }
        return Ok(std::fs::canonicalize(&p).unwrap_or(p));
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(PathBuf::from))
    {
        let p = dir.join("berth");
        if p.is_file() {
            return Ok(p);
        }
    }
    which("berth").ok_or_else(|| {
        "no berth binary: build it (cargo build --release -p berth) or pass --berth PATH".into()
    })
}

fn check_tools(suites: &[Box<dyn Suite>]) -> Result<()> {
    if !util::is_root() {
        bail!("berth-bench needs root (real LXC, loop mounts, cgroups): run it with sudo");
    }
    let mut need = vec![
        ("mksquashfs", "squashfs-tools"),
        ("lxc-stop", "lxc"),
        ("mount", "mount"),
    ];
    if suites
        .iter()
        .any(|s| matches!(s.name(), "cpu" | "mem" | "fs"))
    {
        need.push(("lxc-attach", "lxc"));
        need.push(("lxc-info", "lxc"));
        need.push(("busybox", "busybox-static"));
    }
    if suites.iter().any(|s| s.name() == "footprint") {
        need.push(("busybox", "busybox-static"));
    }
    if suites.iter().any(|s| s.name() == "activation") {
        need.push(("lxc-execute", "lxc"));
    }
    for (tool, pkg) in need {
        if which(tool).is_none() {
            bail!("{tool} is missing: install the Debian package {pkg}");
        }
    }
    Ok(())
}

fn write_out(path: &Option<PathBuf>, text: &str) -> Result<()> {
    match path {
        Some(p) => {
            std::fs::write(p, text).map_err(|e| format!("write {}: {e}", p.display()).into())
        }
        None => {
            let _ = std::io::stdout().write_all(text.as_bytes());
            Ok(())
        }
    }
}

fn run(o: Opts) -> Result<()> {
    let started = Instant::now();
    let mut names: Vec<String> = Vec::new();
    for s in &o.suites {
        if s == "all" {
            names.extend(suites::ALL.iter().map(|s| s.to_string()));
        } else if suites::by_name(s).is_some() {
            names.push(s.clone());
        } else {
            bail!(
                "unknown suite {s:?}: choose from {}, all",
                suites::ALL.join(", ")
            );
        }
    }
    if names.is_empty() {
        bail!(
            "no suite given: choose from {}, all\n{USAGE}",
            suites::ALL.join(", ")
        );
    }
    // In `all`'s order, each once.
    let mut ordered: Vec<&str> = suites::ALL
        .iter()
        .copied()
        .filter(|n| names.iter().any(|x| x == n))
        .collect();
    ordered.dedup();
    let mut suites: Vec<Box<dyn Suite>> =
        ordered.iter().filter_map(|n| suites::by_name(n)).collect();
    check_tools(&suites)?;
    let berth = find_berth(o.berth.clone())?;
    let runs = o.runs.unwrap_or(if o.quick { 5 } else { 30 });
    if runs == 0 {
        bail!("--runs must be at least 1");
    }
    let warmup = if o.quick { 1 } else { 3 };

    util::catch_interrupts()?;
    sandbox::sweep_leftovers();
    let env = env::collect(&berth);
    let mut sb = Sandbox::create(berth)?;
    progress!("sandbox in {}", sb.dir.display());

    let mut pkgs = Vec::new();
    for s in suites.iter_mut() {
        pkgs.extend(s.prepare(&sb)?);
    }
    progress!("packing {} packages", pkgs.len());
    for p in &pkgs {
        util::check_interrupted()?;
        sb.pack(p)?;
    }
    sb.build_repo()?;
    progress!("starting the daemon");
    sb.start_daemon()?;
    sb.ok(&["update"])?;
    let names: Vec<&str> = pkgs.iter().map(|p| p.name.as_str()).collect();
    let mut install = vec!["install"];
    install.extend(&names);
    sb.ok(&install)?;

    let mut outputs = Vec::new();
    for s in suites.iter_mut() {
        util::check_interrupted()?;
        progress!("suite {}", s.name());
        let mut ctx = Ctx {
            sb: &mut sb,
            runs,
            runs_given: o.runs,
            warmup,
            quick: o.quick,
        };
        outputs.push(s.run(&mut ctx)?);
    }
    sb.stop_daemon();
    drop(sb);

    let elapsed = started.elapsed().as_secs_f64();
    let mut env_rows = env.rows.clone();
    for s in &suites {
        env_rows.extend(s.environment());
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let footer = format!(
        "_`berth-bench {}`: {runs} runs, {warmup} warm-up, {elapsed:.0} s in all._\n",
        args.join(" ")
    );
    write_out(&o.markdown, &report::render(&env_rows, &outputs, &footer))?;
    if let Some(path) = &o.json {
        let mut suites_json = serde_json::Map::new();
        for out in &outputs {
            suites_json.insert(out.name.to_string(), out.raw.clone());
        }
        let mut envj = env.json.clone();
        for (k, v) in env_rows.iter().skip(env.rows.len()) {
            envj[k.replace(' ', "_")] = Value::String(v.clone());
        }
        let doc = json!({
            "tool": "berth-bench", "version": env!("CARGO_PKG_VERSION"),
            "args": args, "quick": o.quick, "runs": runs, "warmup": warmup,
            "duration_s": elapsed, "environment": envj, "suites": suites_json,
        });
        write_out(
            &Some(path.clone()),
            &serde_json::to_string_pretty(&doc).unwrap_or_default(),
        )?;
    }
    progress!("done in {elapsed:.0} s");
    Ok(())
}

fn main() {
    util::set_progress(std::io::stderr().is_terminal());
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("berth-bench: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(opts) {
        eprintln!("berth-bench: error: {e}");
        std::process::exit(if util::interrupted() { 130 } else { 1 });
    }
}
