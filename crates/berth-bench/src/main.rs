//! `berth-bench`: measures what berth costs against the bare host and the bare tools
//! (DESIGN.md decision 10). It builds a sandboxed berth of its own (config, key, signed
//! repository, daemon, cgroup parent `berth-bench-<pid>`) in a temp dir, runs the suites
//! asked for and removes everything again, also after an error or Ctrl-C.

mod chart;
mod compare;
mod env;
mod paper;
mod payload;
mod procfs;
mod report;
mod sandbox;
mod selfcheck;
mod stats;
mod suites;
mod trace;
mod util;
mod vm;

use std::io::{IsTerminal, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::time::Instant;

use serde_json::{json, Value};

use crate::report::{SuiteOutput, SuiteResult};
use crate::sandbox::Sandbox;
use crate::suites::{Ctx, Suite};
use crate::util::{bail, progress, which, Result};

const USAGE: &str = "\
usage: berth-bench [--quick] [--runs N] [--events N] [--trace] [--json FILE] [--markdown FILE] [--svg DIR] [--berth PATH] SUITE...
       berth-bench paper [--quick] [--runs N] [--from RUN.json]... [--json FILE] [--markdown FILE] [--svg DIR]
       berth-bench compare A.json B.json [--markdown FILE]
       berth-bench svg RUN.json DIR
       berth-bench clean

suites:
  activation   start request → payload's first instruction, and stop time: berth vs
               lxc-execute vs runc on the same root file system
  footprint    stripped binary size, daemon memory idle and with 10 containers, per-container cost
  cpu          host vs container: sysbench cpu 1/2/4/8 in parallel, stress-ng CPU methods,
               Linpack (hpcc), host and container at once
  mem          host vs container: STREAM (hpcc), mbw, host and container at once
  fs           host vs container: busybox dd (write, write+fsync, read), fio 4k direct I/O
  security     what seccomp and user namespaces cost: a getpid loop on the host, in
               lxc-execute without and with berth's seccomp profile, in unprivileged and
               privileged berth containers; start time of each
  net          iperf3 and nuttcp TCP, iperf3 UDP, request-response latency (perl echo,
               sockperf ping-pong): host vs shared vs isolated vs macvlan container, in
               network namespaces of its own; start time per mode
  supervise    payload killed → restarted; frozen payload → declared unhealthy by its
               health probe; the size of the crash archives these leave
  api          the container API: latency (p50, p99) and requests/s from inside one
               container, and from 20 at once
  cost         what a container makes the host do outside its budget (issue 32): a payload
               restarting itself at every start, and one whose job floods its output, 60 s
               each (12 s with --quick): CPU outside and inside berth's group, and a third
               container's API latency beside each
  bind         hot-binding a 1 MiB and a 50 MiB package into a running container and out
               again, by the mount API and by mount propagation
  governor     main-service response time under a CPU hog with and without the governor;
               the daemon's own CPU use
  microvm      the published containers-vs-microVMs matrix: fio reads and writes at 256 B to
               64 KiB, TCP stream and request-response at 64 B to 4 KiB, on the host, in a
               berth container, in runc and in a QEMU microVM (KVM where it works, else
               TCG, labelled emulated)
  cgroups      cgroup v1 vs v2 in the same VM kernel booted each way: sockperf ping-pong into
               a CPU-capped berth container at a fixed rate and as fast as possible (p50,
               p99, p99.9, max, context switches, migrations, instructions), and berth
               start
  soak         rounds of mixed operations (install, upgrades kept and rolled back, remove,
               crashes, health failures, binds, schedules, logs, metrics, container API,
               fleet polls) against one daemon; what the daemon and the host hold after
               each round as a slope per 1000 operations; a resource that grows is an
               error (default 300 rounds, --quick 16; --runs N)
  wear         what berth writes to its state partition (ext4 on a loop device, from the
               block layer, beside the daemon's own count): an install, starts and stops,
               an hour idle with a health probe, a schedule and fleet polls (--quick:
               70 s); idle over 32 KiB an hour is an error
  all          every suite

options:
  --quick          5 measured runs instead of 30, shorter settling (for CI); cpu, mem, fs:
                   3 rounds instead of 10 and small sizes
  --runs N         measured runs per peer / rounds per test (overrides the defaults)
  --events N       sysbench events per instance (default 2000, --quick 500; the seed: 10000)
  --json FILE      every raw sample and the environment, as JSON
  --markdown FILE  the report (default: stdout)
  --trace          activation: also trace starts phase by phase (berth's own steps from
                   `berth start --trace`, liblxc's from `perf record`, package linux-perf),
                   berth beside lxc-execute; chart DIR/activation-phases.svg
  --svg DIR        one chart per suite, DIR/SUITE.svg (the report links them)
  --berth PATH     the berth binary (default: next to berth-bench, else on PATH)

paper writes one report whose sections mirror the published evaluations (LXC on MIPS and
ARM routers, LXCBENCH, containers vs microVMs, cgroup v1 vs v2, start time): the published
figures beside this run's counterparts, as ratios with their 95 % CI and a verdict, and a
chart (DIR/paper.svg). It runs footprint, activation, cpu, mem, fs, net, microvm and cgroups
(their own report goes to FILE's name with -suites), or reads the JSON of earlier runs
(--from, repeatable: later runs' suites replace earlier ones').

compare sets two runs' JSON side by side (environment differences, then per test both
ratios, the change and whether it is beyond both runs' noise); svg charts a run's JSON
again; clean removes what killed runs left behind (also done at every start).

A run interrupted by SIGINT/SIGTERM writes what completed, marked interrupted (exit 130);
a failed test or suite is reported and the others go on (exit 1); the output is checked
(every suite has numbers or says why not) before exit 0.

Needs root, lxc, squashfs-tools and busybox-static; runc and gcc are used when present;
cpu, mem, fs use sysbench, stress-ng, hpcc, mbw, fio (a missing one is reported as skipped).";

#[derive(Clone)]
struct Opts {
    quick: bool,
    runs: Option<usize>,
    events: Option<usize>,
    json: Option<PathBuf>,
    markdown: Option<PathBuf>,
    svg: Option<PathBuf>,
    berth: Option<PathBuf>,
    trace: bool,
    /// paper: runs' JSON to read instead of running the suites.
    from: Vec<PathBuf>,
    suites: Vec<String>,
}

fn parse_args() -> std::result::Result<Opts, lexopt::Error> {
    use lexopt::prelude::*;
    let mut o = Opts {
        quick: false,
        runs: None,
        events: None,
        json: None,
        markdown: None,
        svg: None,
        berth: None,
        trace: false,
        from: Vec::new(),
        suites: Vec::new(),
    };
    let mut p = lexopt::Parser::from_env();
    while let Some(arg) = p.next()? {
        match arg {
            Long("quick") => o.quick = true,
            Long("runs") => o.runs = Some(p.value()?.parse()?),
            Long("events") => o.events = Some(p.value()?.parse()?),
            Long("json") => o.json = Some(p.value()?.into()),
            Long("markdown") => o.markdown = Some(p.value()?.into()),
            Long("svg") => o.svg = Some(p.value()?.into()),
            Long("berth") => o.berth = Some(p.value()?.into()),
            Long("trace") => o.trace = true,
            Long("from") => o.from.push(p.value()?.into()),
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

/// `compare A.json B.json`
fn compare_cmd(o: &Opts) -> Result<i32> {
    let [a, b] = &o.suites[1..] else {
        bail!("compare needs two files: berth-bench compare A.json B.json [--markdown FILE]");
    };
    let (ja, jb) = (
        compare::load(std::path::Path::new(a))?,
        compare::load(std::path::Path::new(b))?,
    );
    write_out(&o.markdown, &compare::render(&ja, &jb, a, b))?;
    Ok(0)
}

/// The suites `paper` runs: those with a published counterpart.
const PAPER_SUITES: &[&str] = &[
    "footprint",
    "activation",
    "cpu",
    "mem",
    "fs",
    "net",
    "microvm",
    "cgroups",
];

/// `paper`: the published evaluations beside this run's (or earlier runs') counterparts.
fn paper_cmd(o: Opts) -> Result<i32> {
    if o.suites.len() > 1 {
        bail!(
            "paper takes no suite names (it runs {}); --from reads earlier runs",
            PAPER_SUITES.join(", ")
        );
    }
    let mut code = 0;
    let doc = if o.from.is_empty() {
        // Run the suites with their own report beside the paper's.
        let mut inner = o.clone();
        inner.suites = PAPER_SUITES.iter().map(|s| s.to_string()).collect();
        // Where nothing was named: a directory of our own (0700, made here, so not one a
        // symbolic link points elsewhere), removed afterwards.
        let tmp = std::env::temp_dir().join(format!(
            "berth-bench-paper-{}-{}",
            std::process::id(),
            util::now_ns()
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&tmp)
            .map_err(|e| format!("create {}: {e}", tmp.display()))?;
        inner.json = Some(o.json.clone().unwrap_or_else(|| tmp.join("run.json")));
        inner.markdown = Some(match &o.markdown {
            Some(m) => m.with_file_name(format!(
                "{}-suites.md",
                m.file_stem().and_then(|s| s.to_str()).unwrap_or("paper")
            )),
            None => tmp.join("suites.md"),
        });
        let ran = run(inner.clone());
        let d = ran.and_then(|c| {
            code = c;
            compare::load(inner.json.as_deref().unwrap_or(&tmp))
        });
        let _ = std::fs::remove_dir_all(&tmp);
        if code == 130 {
            return Ok(code);
        }
        d?
    } else {
        let docs = o
            .from
            .iter()
            .map(|f| compare::load(f))
            .collect::<Result<Vec<_>>>()?;
        let d = paper::merge(docs);
        if let Some(j) = &o.json {
            write_out(
                &Some(j.clone()),
                &serde_json::to_string_pretty(&d).unwrap_or_default(),
            )?;
        }
        d
    };
    let svg = match &o.svg {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
            // It must exist for its link to be made relative to the report.
            let p = dir.join("paper.svg");
            write_out(&Some(p.clone()), "")?;
            Some(p)
        }
        None => None,
    };
    let (md, panels) = paper::render(&doc, svg.as_ref().map(|p| link(&o.markdown, p)).as_deref());
    if let Some(p) = &svg {
        let text = chart::svg(
            "berth-bench: this run's ratios beside the published ones",
            &panels,
        );
        chart::well_formed(&text).map_err(|e| format!("paper.svg is not well-formed: {e}"))?;
        write_out(&Some(p.clone()), &text)?;
    }
    write_out(&o.markdown, &md)?;
    Ok(code)
}

/// `svg RUN.json DIR`
fn svg_cmd(o: &Opts) -> Result<i32> {
    let [file, dir] = &o.suites[1..] else {
        bail!("svg needs a run's JSON and a directory: berth-bench svg RUN.json DIR");
    };
    let doc = compare::load(std::path::Path::new(file))?;
    let names: Vec<String> = doc["suites"]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    for n in names {
        for p in write_svg(std::path::Path::new(dir), &n, &doc["suites"][n.as_str()])? {
            println!("{}", p.display());
        }
    }
    Ok(0)
}

/// Writes DIR/SUITE.svg when the suite has numbers to chart, and its other charts
/// (`chart::extra`); the files written.
fn write_svg(dir: &std::path::Path, name: &str, raw: &Value) -> Result<Vec<PathBuf>> {
    let mut files: Vec<(String, String)> = Vec::new();
    let panels = chart::panels(name, raw);
    if !panels.is_empty() {
        files.push((
            name.to_string(),
            chart::svg(&format!("berth-bench: {name}"), &panels),
        ));
    }
    files.extend(chart::extra(name, raw));
    let mut written = Vec::new();
    for (stem, svg) in files {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let path = dir.join(format!("{stem}.svg"));
        write_out(&Some(path.clone()), &svg)?;
        written.push(path);
    }
    Ok(written)
}

/// How the Markdown file at `md` refers to `file`: relative to its directory (with `..` where
/// the file is not below it), so that a report and its charts can move together.
fn link(md: &Option<PathBuf>, file: &std::path::Path) -> String {
    let base = md
        .as_ref()
        .and_then(|m| std::fs::canonicalize(m.parent()?.join(".")).ok());
    let abs = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    match base {
        Some(b) => relative(&b, &abs).display().to_string(),
        None => abs.display().to_string(),
    }
}

/// `to` as seen from the directory `from` (both absolute).
fn relative(from: &std::path::Path, to: &std::path::Path) -> PathBuf {
    let (a, b): (Vec<_>, Vec<_>) = (from.components().collect(), to.components().collect());
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..a.len() {
        out.push("..");
    }
    for c in &b[common..] {
        out.push(c);
    }
    out
}

/// Builds the sandbox, packs and installs every suite's packages, starts the daemon.
fn setup(suites: &mut [Box<dyn Suite>], berth: PathBuf) -> Result<Sandbox> {
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
    // Suites with a sandbox of their own (net, supervise, bind) need nothing here.
    if !names.is_empty() {
        let mut install = vec!["install"];
        install.extend(&names);
        sb.ok(&install)?;
    }
    Ok(sb)
}

fn run(o: Opts) -> Result<i32> {
    match o.suites.first().map(String::as_str) {
        Some("compare") => return compare_cmd(&o),
        Some("svg") => return svg_cmd(&o),
        Some("paper") => return paper_cmd(o),
        Some("clean") => return clean_cmd(),
        _ => {}
    }
    let started = Instant::now();
    let mut suites = select_suites(&o.suites)?;
    check_tools(&suites)?;
    let berth = find_berth(o.berth.clone())?;
    let runs = o.runs.unwrap_or(if o.quick { 5 } else { 30 });
    if runs == 0 {
        bail!("--runs must be at least 1");
    }
    if o.events == Some(0) {
        bail!("--events must be at least 1");
    }
    let warmup = if o.quick { 1 } else { 3 };

    util::catch_interrupts()?;
    let cleaned = sandbox::sweep_leftovers();
    let env = env::collect(&berth);
    let mut results = run_suites(&mut suites, berth, &o, runs, warmup)?;
    let facts = Facts {
        interrupted: util::interrupted(),
        elapsed: started.elapsed().as_secs_f64(),
        runs,
        warmup,
        cleaned,
        args: std::env::args().skip(1).collect(),
    };
    let mut env_rows = env.rows.clone();
    for s in &suites {
        env_rows.extend(s.environment());
    }
    let suites_json = suites_json(&results);
    if let Some(dir) = &o.svg {
        for r in results.iter_mut() {
            for p in write_svg(dir, r.name, &suites_json[r.name])? {
                r.svgs.push((link(&o.markdown, &p), p));
            }
        }
    }
    let markdown = markdown_report(&env_rows, &results, &facts);
    write_out(&o.markdown, &markdown)?;
    let json_text = json_report(&o, &env, &env_rows, suites_json, &facts);
    if let Some(path) = &o.json {
        write_out(&Some(path.clone()), &json_text)?;
    }
    if facts.interrupted {
        eprintln!("berth-bench: interrupted; partial results written");
        return Ok(130);
    }
    Ok(self_check(&results, &json_text, &markdown, facts.elapsed))
}

/// `clean`
fn clean_cmd() -> Result<i32> {
    if !util::is_root() {
        bail!("berth-bench clean needs root (mounts, cgroups, namespaces)");
    }
    if sandbox::sweep_leftovers().is_empty() {
        println!("nothing to clean");
    }
    Ok(0)
}

/// The suites named (`all` for every one), in `all`'s order, each once.
fn select_suites(given: &[String]) -> Result<Vec<Box<dyn Suite>>> {
    let mut names: Vec<String> = Vec::new();
    for s in given {
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
    let mut ordered: Vec<&str> = suites::ALL
        .iter()
        .copied()
        .filter(|n| names.iter().any(|x| x == n))
        .collect();
    ordered.dedup();
    Ok(ordered.iter().filter_map(|n| suites::by_name(n)).collect())
}

fn suite_result(
    name: &'static str,
    output: Option<SuiteOutput>,
    error: Option<String>,
    interrupted: bool,
) -> SuiteResult {
    SuiteResult {
        name,
        output,
        error,
        interrupted,
        svgs: Vec::new(),
    }
}

/// Sets up the sandbox and runs every suite in it; a suite that fails is reported and the
/// others go on. Once interrupted, the suites not begun say so.
fn run_suites(
    suites: &mut [Box<dyn Suite>],
    berth: PathBuf,
    o: &Opts,
    runs: usize,
    warmup: usize,
) -> Result<Vec<SuiteResult>> {
    let mut sb = match setup(suites, berth) {
        Ok(sb) => sb,
        Err(e) if util::interrupted() => {
            let why = format!("not run: the run was interrupted while it was set up ({e})");
            return Ok(suites
                .iter()
                .map(|s| suite_result(s.name(), None, Some(why.clone()), false))
                .collect());
        }
        Err(e) => return Err(e),
    };
    let mut results = Vec::new();
    for s in suites.iter_mut() {
        let name = s.name();
        if util::interrupted() {
            let why = "not run: the run was interrupted before this suite".into();
            results.push(suite_result(name, None, Some(why), false));
            continue;
        }
        progress!("suite {name}");
        let mut ctx = Ctx {
            sb: &mut sb,
            runs,
            runs_given: o.runs,
            events: o.events,
            warmup,
            quick: o.quick,
            trace: o.trace,
        };
        let t0 = Instant::now();
        let r = s.run(&mut ctx);
        // Always said (one line a suite): where a run's time went.
        eprintln!(
            "berth-bench: suite {name}: {:.0} s",
            t0.elapsed().as_secs_f64()
        );
        let intr = util::interrupted();
        results.push(match r {
            Ok(out) => suite_result(out.name, Some(out), None, intr),
            Err(e) if intr => suite_result(
                name,
                None,
                Some(format!("interrupted before the suite completed ({e})")),
                true,
            ),
            Err(e) => {
                eprintln!("berth-bench: suite {name} failed: {e}");
                suite_result(name, None, Some(format!("the suite failed: {e}")), false)
            }
        });
    }
    sb.stop_daemon();
    Ok(results)
}

/// What the reports say about the run as a whole.
struct Facts {
    interrupted: bool,
    elapsed: f64,
    runs: usize,
    warmup: usize,
    /// What the sweep at the start removed.
    cleaned: Vec<String>,
    /// The command line, without the program.
    args: Vec<String>,
}

/// Each suite's raw JSON, or its error.
fn suites_json(results: &[SuiteResult]) -> serde_json::Map<String, Value> {
    let mut suites_json = serde_json::Map::new();
    for r in results {
        let v = match (&r.output, &r.error) {
            (Some(out), _) => out.raw.clone(),
            (None, e) => json!({ "error": e }),
        };
        suites_json.insert(r.name.to_string(), v);
    }
    suites_json
}

fn markdown_report(env_rows: &[(String, String)], results: &[SuiteResult], f: &Facts) -> String {
    let elapsed = f.elapsed;
    let mut notes = Vec::new();
    if f.interrupted {
        notes.push(format!("**Interrupted** by a signal after {elapsed:.0} s: the tables hold what completed before it; suites and tests marked \"interrupted\" or \"not run\" are incomplete."));
    }
    notes.extend(
        f.cleaned
            .iter()
            .map(|c| format!("Before this run, berth-bench {c}.")),
    );
    let footer = format!(
        "_`berth-bench {}`: {} runs, {} warm-up, {elapsed:.0} s in all{}._\n",
        f.args.join(" "),
        f.runs,
        f.warmup,
        if f.interrupted { ", interrupted" } else { "" }
    );
    report::render(env_rows, results, &notes, f.interrupted, &footer)
}

/// The run's JSON: the options, the environment (the suites' rows added) and every suite's.
fn json_report(
    o: &Opts,
    env: &env::Environment,
    env_rows: &[(String, String)],
    suites_json: serde_json::Map<String, Value>,
    f: &Facts,
) -> String {
    let mut envj = env.json.clone();
    for (k, v) in env_rows.iter().skip(env.rows.len()) {
        envj[k.replace(' ', "_")] = Value::String(v.clone());
    }
    let doc = json!({
        "tool": "berth-bench", "format": compare::FORMAT, "version": env!("CARGO_PKG_VERSION"),
        "args": f.args, "quick": o.quick, "runs": f.runs, "events": o.events, "warmup": f.warmup,
        "duration_s": f.elapsed, "interrupted": f.interrupted, "cleaned_leftovers": f.cleaned,
        "environment": envj, "suites": suites_json,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

/// Checks what the run wrote (see [`selfcheck`]); the exit code.
fn self_check(results: &[SuiteResult], json_text: &str, markdown: &str, elapsed: f64) -> i32 {
    let svgs: Vec<PathBuf> = results
        .iter()
        .flat_map(|r| r.svgs.iter().map(|(_, p)| p.clone()))
        .collect();
    let (summary, problems) = selfcheck::check(json_text, markdown, &svgs);
    progress!("done in {elapsed:.0} s");
    if problems.is_empty() {
        eprintln!("berth-bench: self-check: {summary}");
        0
    } else {
        for p in &problems {
            eprintln!("berth-bench: self-check: {p}");
        }
        1
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(suites::api::CLIENT) {
        std::process::exit(suites::api::client(&args[2..]));
    }
    if args.get(1).map(String::as_str) == Some(suites::soak::DDI_SERVER) {
        std::process::exit(suites::soak::ddi_server(&args[2..]));
    }
    if args.get(1).map(String::as_str) == Some(suites::cost::PROBE) {
        std::process::exit(suites::cost::probe(&args[2..]));
    }
    util::set_progress(
        std::io::stderr().is_terminal() || std::env::var_os("BERTH_BENCH_PROGRESS").is_some(),
    );
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("berth-bench: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    match run(opts) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("berth-bench: error: {e}");
            std::process::exit(if util::interrupted() { 130 } else { 1 });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::relative;
    use std::path::Path;

    #[test]
    fn links_are_relative_to_the_report_even_outside_its_directory() {
        let r = |a: &str, b: &str| relative(Path::new(a), Path::new(b)).display().to_string();
        assert_eq!(r("/w/docs/results", "/w/docs/results/x.svg"), "x.svg");
        assert_eq!(
            r("/w/docs/results", "/w/docs/charts/run/a.svg"),
            "../charts/run/a.svg"
        );
        assert_eq!(r("/w/a/b", "/x/y.svg"), "../../../x/y.svg");
    }
}
