//! What the cpu, mem and fs suites share (DESIGN.md decision 10): the same workload on the
//! host and inside a berth container, interleaved host, guest, host, guest (ABAB) after a
//! warm-up round, the 1-minute load average recorded with every run, and the comparison in
//! the published shape (test, avg host, avg guest, diff, diff %) with the median, spread and
//! 95 % confidence interval of the per-round ratio guest / host.
//!
//! The guest is a berth package with `base = "host"` (the host's /lib and /usr/lib, read-only)
//! holding copies of the host's tool binaries in /bin and a static busybox; its entrypoint
//! sleeps, and each workload runs in it through `lxc-attach` (the container's namespaces,
//! root file system and cgroups). Both sides run the same script with the same busybox sh;
//! the clock starts when the script says it is about to exec the tool, so `lxc-attach`'s own
//! set-up is not counted. Host runs are moved into a sibling cgroup of the container's with
//! the same cpu and blkio/io weights, so both sides compete on equal terms.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::report::{Section, Table};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::stats::{summarize, t975};
use crate::util::{bail, run, which, Context, Result};

/// A host tool the suites copy into their package.
#[derive(Clone, Copy)]
pub struct Tool {
    pub bin: &'static str,
    pub debian: &'static str,
}

impl Tool {
    pub fn host_path(&self) -> Option<PathBuf> {
        which(self.bin)
    }
    pub fn skipped(&self) -> String {
        format!(
            "skipped: {} is not installed (install the Debian package {})",
            self.bin, self.debian
        )
    }
}

/// Environment both sides get (and nothing else): Open MPI (hpcc) as root, and as a
/// singleton that does not spawn `orted` (not in the package, and pointless for one process).
const OMPI_ROOT: [(&str, &str); 3] = [
    ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
    ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
    ("OMPI_MCA_ess_singleton_isolated", "1"),
];

/// A package whose entrypoint sleeps, with the host's binaries of `tools` in /bin.
pub fn tool_pkg(name: &str, tools: &[Tool]) -> Result<PkgSpec> {
    let mut files = Vec::new();
    for t in tools {
        if let Some(p) = t.host_path() {
            let data = std::fs::read(&p).context(format!("read {}", p.display()))?;
            files.push((format!("bin/{}", t.bin), data, 0o755));
        }
    }
    Ok(PkgSpec {
        name: name.into(),
        argv: ["/bin/busybox", "sleep", "100000000"]
            .into_iter()
            .map(String::from)
            .collect(),
        files,
        busybox: true,
        host_base: true,
    })
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Side {
    Host,
    Guest,
}

/// One run of a script on one side.
pub struct RunOut {
    pub text: String,
    /// From the script's "about to exec" marker to the exit.
    pub secs: f64,
    /// 1-minute load average right after the run.
    pub load: f64,
}

pub fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

const MARK: &[u8] = b"@berth-bench-go\n";

/// The host and the running berth container of one suite.
pub struct HostGuest {
    name: String,
    lxcpath: PathBuf,
    busybox: PathBuf,
    /// cgroup.procs files host runs join (equal-weight siblings of the container's cgroups).
    host_procs: Vec<PathBuf>,
    host_cgroups: Vec<PathBuf>,
    /// What the fairness set-up did, for the report.
    pub fairness: Vec<String>,
    /// The working directory of host runs, on the same file system as the guest's /data (or
    /// that very directory, see [`HostGuest::share_data`]).
    pub host_data: PathBuf,
    /// Host runs work in the guest's data directory, on the same files.
    shared: bool,
    /// The guest's /data as seen from the host.
    pub guest_data: PathBuf,
    /// LD_LIBRARY_PATH of guest runs (see [`alternatives_dirs`]).
    ld_path: String,
}

/// Directories of libraries the tools reach through symlinks outside the lent directories
/// (Debian's alternatives: libblas.so.3 → /etc/alternatives/… → …/blas/libblas.so.3). /etc is
/// not lent to the container, so the guest gets these directories on LD_LIBRARY_PATH.
pub fn alternatives_dirs(tools: &[Tool]) -> Vec<String> {
    let mut dirs: Vec<String> = Vec::new();
    for t in tools {
        let Some(p) = t.host_path() else { continue };
        let Ok(text) = run(Command::new("ldd").arg(&p)) else {
            continue;
        };
        for l in text.lines() {
            let Some(lib) = l
                .split("=> ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
            else {
                continue;
            };
            let lib = Path::new(lib);
            let Ok(real) = std::fs::canonicalize(lib) else {
                continue;
            };
            let (Some(d), Some(rd)) = (lib.parent(), real.parent()) else {
                continue;
            };
            let rd = rd.display().to_string();
            if d != Path::new(&rd) && !dirs.contains(&rd) {
                dirs.push(rd);
            }
        }
    }
    dirs
}

fn copy_weights(from: &Path, to: &Path, said: &mut Vec<String>) {
    for f in [
        "cpu.shares",
        "cpu.weight",
        "blkio.weight",
        "io.weight",
        "io.bfq.weight",
    ] {
        if let Ok(v) = std::fs::read_to_string(from.join(f)) {
            let v = v.trim();
            // io.weight reads "default 100"; it is written back as it reads.
            if std::fs::write(to.join(f), v).is_ok() {
                said.push(format!("{f} = {v}"));
            }
        }
    }
}

impl HostGuest {
    /// Starts the package's container and sets up the host side's cgroup.
    pub fn start(sb: &Sandbox, name: &str, tools: &[Tool]) -> Result<HostGuest> {
        let busybox = which("busybox").ok_or("busybox is missing: install busybox-static")?;
        sb.ok(&["start", name])?;
        let lxcpath = sb.cfg.paths.lxcpath.clone();
        let pid: i32 = run(Command::new("lxc-info")
            .arg("-P")
            .arg(&lxcpath)
            .args(["-n", name, "-p", "-H"]))?
        .trim()
        .parse()
        .map_err(|_| format!("lxc-info gave no init pid for {name}"))?;
        let host_data = sb.dir.join("host-data").join(name);
        std::fs::create_dir_all(&host_data).context("create the host data directory")?;
        let mut hg = HostGuest {
            name: name.into(),
            lxcpath,
            busybox,
            host_procs: Vec::new(),
            host_cgroups: Vec::new(),
            fairness: Vec::new(),
            host_data,
            shared: false,
            guest_data: sb.cfg.paths.data(name),
            ld_path: alternatives_dirs(tools).join(":"),
        };
        hg.fair_cgroups(pid);
        Ok(hg)
    }

    /// Host runs work in the guest's data directory, so both sides read and write the same
    /// files at the same place on the disk. Where a file sits on a (virtual) disk can change
    /// its speed more than the container does: on the development VM a file laid out later
    /// took 4 KiB random writes 4–43 % slower (median 25 %), whoever wrote it. What a host run creates is
    /// handed to the directory's owner (the container's root, in a user namespace) so that the
    /// guest can write it in turn. Not for runs of both sides at once.
    pub fn share_data(&mut self) {
        let _ = std::fs::remove_dir_all(&self.host_data);
        self.host_data = self.guest_data.clone();
        self.shared = true;
    }

    /// Writes back and drops from the page cache the files of the data directories, and
    /// nothing else: the machine's other caches (another run's images, a demo's) stay
    /// (GNU dd's `nocache`, which is `posix_fadvise(POSIX_FADV_DONTNEED)` on the file).
    pub fn drop_caches(&self) -> Result<()> {
        for dir in [&self.guest_data, &self.host_data] {
            let Ok(rd) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in rd.flatten() {
                if !e.path().symlink_metadata().is_ok_and(|m| m.is_file()) {
                    continue;
                }
                let f = e.path();
                let of = format!("of={}", f.display());
                let iff = format!("if={}", f.display());
                for args in [
                    vec![
                        of.as_str(),
                        "oflag=nocache",
                        "conv=notrunc,fdatasync",
                        "count=0",
                    ],
                    vec![iff.as_str(), "iflag=nocache", "count=0"],
                ] {
                    let st = Command::new("dd")
                        .args(&args)
                        .arg("status=none")
                        .status()
                        .context("dd (coreutils)")?;
                    if !st.success() {
                        bail!("dd {args:?}: {st}");
                    }
                }
            }
        }
        Ok(())
    }

    /// After a host run in a shared directory: its files to the directory's owner.
    fn hand_back(&self) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        let dir = std::fs::metadata(&self.guest_data).context("stat the data directory")?;
        let rd = std::fs::read_dir(&self.guest_data).context("list the data directory")?;
        for e in rd.flatten() {
            let Ok(m) = e.path().symlink_metadata() else {
                continue;
            };
            if m.uid() != dir.uid() || m.gid() != dir.gid() {
                std::os::unix::fs::lchown(e.path(), Some(dir.uid()), Some(dir.gid()))
                    .context(format!("hand {} to the container", e.path().display()))?;
            }
        }
        Ok(())
    }

    /// A sibling of the container's cgroup in every hierarchy that weighs cpu or I/O, with
    /// the container's weights.
    fn fair_cgroups(&mut self, init: i32) {
        let text = std::fs::read_to_string(format!("/proc/{init}/cgroup")).unwrap_or_default();
        let root = Path::new("/sys/fs/cgroup");
        for line in text.lines() {
            let mut it = line.splitn(3, ':');
            let (_, ctrl, path) = (it.next(), it.next().unwrap_or(""), it.next().unwrap_or(""));
            let rel = path.trim_start_matches('/');
            let dir = if ctrl.is_empty() {
                if root.join("unified").is_dir() {
                    root.join("unified").join(rel)
                } else {
                    root.join(rel)
                }
            } else if ctrl.split(',').any(|c| c == "cpu" || c == "blkio") {
                root.join(ctrl).join(rel)
            } else {
                continue;
            };
            let (Some(parent), true) = (dir.parent(), dir.is_dir()) else {
                continue;
            };
            let sib = parent.join(format!("{}.host-peer", self.name));
            if std::fs::create_dir_all(&sib).is_err() {
                continue;
            }
            let mut said = Vec::new();
            copy_weights(&dir, &sib, &mut said);
            self.fairness.push(format!(
                "{} (as {}{})",
                sib.display(),
                dir.file_name().unwrap_or_default().to_string_lossy(),
                if said.is_empty() {
                    String::new()
                } else {
                    format!(": {}", said.join(", "))
                }
            ));
            self.host_procs.push(sib.join("cgroup.procs"));
            self.host_cgroups.push(sib);
        }
    }

    /// The command that runs `script` (busybox sh, with `$1`… = `args`) on `side`, in its
    /// data directory, stderr merged into stdout.
    pub fn command(&self, side: Side, script: &str, args: &[String]) -> Command {
        let join = match side {
            Side::Host => self
                .host_procs
                .iter()
                .map(|p| format!("echo $$ > '{}' || exit 111; ", p.display()))
                .collect::<String>(),
            Side::Guest => String::new(),
        };
        let full = format!(
            "exec 2>&1; cd \"$D\" || exit 112; {join}echo {}; {script}",
            String::from_utf8_lossy(MARK).trim()
        );
        let mut c = match side {
            Side::Host => {
                let mut c = Command::new(&self.busybox);
                // The PATH the tools were found on (and copied into the guest from).
                let path = std::env::var_os("PATH")
                    .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".into());
                c.env_clear()
                    .env("PATH", path)
                    .env("D", &self.host_data)
                    .env("HOME", &self.host_data);
                for (k, v) in OMPI_ROOT {
                    c.env(k, v);
                }
                c
            }
            Side::Guest => {
                let mut c = Command::new("lxc-attach");
                c.env_clear()
                    .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
                    .arg("-P")
                    .arg(&self.lxcpath)
                    .args(["-n", &self.name, "--clear-env"])
                    .args(["--set-var", "PATH=/bin", "--set-var", "D=/data"])
                    .args(["--set-var", "HOME=/data"]);
                for (k, v) in OMPI_ROOT {
                    c.args(["--set-var", &format!("{k}={v}")]);
                }
                if !self.ld_path.is_empty() {
                    c.args(["--set-var", &format!("LD_LIBRARY_PATH={}", self.ld_path)]);
                }
                c.args(["--", "/bin/busybox"]);
                c
            }
        };
        c.args(["sh", "-c", &full, "sh"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        c
    }

    /// Runs `script` on `side`; fails unless it exits 0.
    pub fn run(&self, side: Side, script: &str, args: &[String]) -> Result<RunOut> {
        crate::util::check_interrupted()?;
        let mut child = self
            .command(side, script, args)
            .spawn()
            .context(format!("run {script:?} on the {side:?} side"))?;
        let mut out = child.stdout.take().ok_or("no stdout pipe")?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let mut t0 = None;
        loop {
            let n = out.read(&mut chunk).unwrap_or(0);
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if t0.is_none() {
                if let Some(i) = buf.windows(MARK.len()).position(|w| w == MARK) {
                    t0 = Some(Instant::now());
                    buf.drain(..i + MARK.len());
                }
            }
        }
        let st = child.wait().context("wait for the workload")?;
        let t1 = Instant::now();
        if self.shared && side == Side::Host {
            self.hand_back()?;
        }
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let text = String::from_utf8_lossy(&buf).to_string();
        let Some(t0) = t0 else {
            bail!(
                "the {side:?} side never started {script:?} ({st}): {}{}",
                err.trim(),
                text.trim()
            );
        };
        if !st.success() {
            bail!(
                "{script:?} failed on the {side:?} side ({st}): {}",
                text.trim()
                    .lines()
                    .rev()
                    .take(6)
                    .collect::<Vec<_>>()
                    .join(" / ")
            );
        }
        Ok(RunOut {
            text,
            secs: (t1 - t0).as_secs_f64(),
            load: loadavg(),
        })
    }

    /// Runs the same script on both sides at once (the LXCBENCH "host and container at once").
    pub fn run_both(&self, script: &str, args: &[String]) -> Result<(RunOut, RunOut)> {
        if self.shared {
            bail!("host and guest at once need their own directories (share_data is set)");
        }
        std::thread::scope(|s| {
            let h = s.spawn(|| self.run(Side::Host, script, args));
            let g = self.run(Side::Guest, script, args);
            let h = h.join().map_err(|_| "host run panicked")?;
            Ok((h?, g?))
        })
    }

    /// Runs `measure`, then stops the container whatever happened; its result and what the
    /// fairness set-up did.
    pub fn measure_then_stop<T>(
        self,
        sb: &Sandbox,
        measure: impl FnOnce(&HostGuest) -> Result<T>,
    ) -> Result<(T, Vec<String>)> {
        let r = measure(&self);
        let fairness = self.fairness.clone();
        let stopped = self.stop(sb);
        let v = r?;
        stopped?;
        Ok((v, fairness))
    }

    fn stop(self, sb: &Sandbox) -> Result<()> {
        let r = sb.ok(&["stop", &self.name]).map(|_| ());
        let deadline = Instant::now() + Duration::from_secs(3);
        for cg in &self.host_cgroups {
            while std::fs::remove_dir(cg).is_err() && cg.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if !self.shared {
            let _ = std::fs::remove_dir_all(&self.host_data);
        }
        r
    }
}

/// One compared quantity: every sample of both sides.
pub struct Metric {
    pub test: String,
    pub unit: String,
    pub higher_better: bool,
    pub host: Vec<f64>,
    pub guest: Vec<f64>,
    pub load_host: Vec<f64>,
    pub load_guest: Vec<f64>,
    /// The published figure of the same shape, e.g. "A: −0.03 %".
    pub published: String,
    pub skipped: Option<String>,
    /// Why the test stopped before its last round: the tool failed, or "interrupted".
    pub error: Option<String>,
}

impl Metric {
    pub fn new(test: impl Into<String>, unit: &str, higher_better: bool) -> Metric {
        Metric {
            test: test.into(),
            unit: unit.into(),
            higher_better,
            host: Vec::new(),
            guest: Vec::new(),
            load_host: Vec::new(),
            load_guest: Vec::new(),
            published: String::new(),
            skipped: None,
            error: None,
        }
    }
    pub fn published(mut self, p: &str) -> Metric {
        self.published = p.into();
        self
    }
    pub fn skip(mut self, why: String) -> Metric {
        self.skipped = Some(why);
        self
    }
    /// Skipped, saying what to install, when `tool` is not installed.
    pub fn needs(self, tool: Tool) -> Metric {
        if tool.host_path().is_some() {
            self
        } else {
            self.skip(tool.skipped())
        }
    }
    pub fn push(&mut self, side: Side, v: f64, load: f64) {
        match side {
            Side::Host => {
                self.host.push(v);
                self.load_host.push(load);
            }
            Side::Guest => {
                self.guest.push(v);
                self.load_guest.push(load);
            }
        }
    }
    /// guest / host per round (ABAB pairs).
    pub fn ratios(&self) -> Vec<f64> {
        self.host
            .iter()
            .zip(&self.guest)
            .map(|(h, g)| g / h)
            .filter(|r| r.is_finite())
            .collect()
    }
    pub fn json(&self) -> Value {
        json!({
            "test": self.test, "unit": self.unit, "higher_is_better": self.higher_better,
            "host": self.host, "guest": self.guest,
            "load1_host": self.load_host, "load1_guest": self.load_guest,
            "ratio_guest_host": self.ratios(), "skipped": self.skipped, "error": self.error,
        })
    }
}

/// Number formatting for values of any magnitude.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x.abs() >= 1e7 {
        format!("{x:.3e}")
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else if x.abs() >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// Mean ratio with its 95 % CI (Student's t over the per-round ratios).
pub fn ratio_ci(r: &[f64]) -> Option<(f64, f64)> {
    let s = summarize(r)?;
    Some((s.mean, s.ci95))
}

/// "within noise" when the 95 % CI of the ratio contains 1, else how much worse or better
/// the guest is.
pub fn verdict(r: &[f64], higher_better: bool) -> String {
    let Some((m, ci)) = ratio_ci(r) else {
        return "–".into();
    };
    if !ci.is_finite() {
        return "one round: no CI".into();
    }
    if (m - ci..=m + ci).contains(&1.0) {
        return "within noise".into();
    }
    let pct = (m - 1.0) * 100.0;
    let worse = (pct < 0.0) == higher_better;
    format!(
        "guest {:.1} % {}",
        pct.abs(),
        if worse { "worse" } else { "better" }
    )
}

pub const COLUMNS: &[&str] = &[
    "test",
    "avg host",
    "avg guest",
    "diff",
    "diff %",
    "guest/host median (p10–p90)",
    "ratio mean ± 95 % CI",
    "load 1 min (host / guest)",
    "verdict",
    "published",
];

pub fn table(metrics: &[Metric]) -> Table {
    let mut t = Table::new(COLUMNS);
    for m in metrics {
        let label = format!("{} ({})", m.test, m.unit);
        if let Some(why) = &m.skipped {
            let mut row = vec![label];
            row.extend((0..7).map(|_| "–".to_string()));
            row.push(why.clone());
            row.push(m.published.clone());
            t.row(row);
            continue;
        }
        let (Some(h), Some(g)) = (summarize(&m.host), summarize(&m.guest)) else {
            let mut row = vec![label];
            row.extend((0..7).map(|_| "–".to_string()));
            row.push(match &m.error {
                Some(e) if e == "interrupted" => "not measured (interrupted)".into(),
                Some(e) => format!("error: {e}"),
                None => "no samples".into(),
            });
            row.push(m.published.clone());
            t.row(row);
            continue;
        };
        let r = m.ratios();
        let rs = summarize(&r);
        let load = |v: &[f64]| {
            summarize(v)
                .map(|s| format!("{:.2}", s.mean))
                .unwrap_or_default()
        };
        t.row(vec![
            label,
            num(h.mean),
            num(g.mean),
            num(g.mean - h.mean),
            format!("{:+.2}", (g.mean - h.mean) / h.mean * 100.0),
            rs.map(|s| format!("{:.3} ({:.3}–{:.3})", s.median, s.p10, s.p90))
                .unwrap_or_default(),
            match ratio_ci(&r) {
                Some((mean, ci)) if ci.is_finite() => format!("{mean:.3} ± {ci:.3}"),
                Some((mean, _)) => format!("{mean:.3}"),
                None => "–".into(),
            },
            format!("{} / {}", load(&m.load_host), load(&m.load_guest)),
            match &m.error {
                None => verdict(&r, m.higher_better),
                Some(e) => format!(
                    "{} ({} rounds; then {e})",
                    verdict(&r, m.higher_better),
                    r.len()
                ),
            },
            m.published.clone(),
        ]);
    }
    t
}

/// What stopped a test, for its rows: "interrupted" or its error.
fn stopped_by(e: crate::util::Error) -> String {
    if crate::util::interrupted() {
        "interrupted".into()
    } else {
        e.0
    }
}

/// How often each host-vs-guest test runs: `--runs N`, else 3 rounds quick and 10 in full,
/// after one warm-up round.
#[derive(Clone, Copy)]
pub struct Rounds {
    pub rounds: usize,
    pub warmup: usize,
}

impl Rounds {
    pub fn of(ctx: &super::Ctx) -> Rounds {
        Rounds {
            rounds: ctx.runs_given.unwrap_or(if ctx.quick { 3 } else { 10 }),
            warmup: 1,
        }
    }
}

/// The per-round ABAB loop: `one(side)` runs the workload once on a side and pushes into
/// `metrics`; `warmup` unrecorded rounds first. A failure (a tool that fails, output that
/// does not parse) or an interruption does not end the suite: it becomes the error of these
/// rows, which keep the rounds that completed, and the suite goes on with its next test
/// (which, after an interruption, stops at once the same way).
pub fn abab(
    metrics: &mut [Metric],
    rounds: usize,
    warmup: usize,
    mut one: impl FnMut(Side, &mut [Metric], bool) -> Result<()>,
) -> Result<()> {
    let r = (|| {
        for i in 0..warmup + rounds {
            let record = i >= warmup;
            for side in [Side::Host, Side::Guest] {
                crate::util::check_interrupted()?;
                one(side, metrics, record)?;
            }
        }
        Ok(())
    })();
    if let Err(e) = r {
        let why = stopped_by(e);
        crate::util::progress!("{}: {why}", metrics.first().map_or("", |m| &m.test));
        for m in metrics {
            m.error = Some(why.clone());
        }
    }
    Ok(())
}

/// The LXCBENCH matrix for one workload: host alone, guest alone, both at once, relative to
/// host alone.
pub struct Matrix {
    pub test: String,
    pub unit: String,
    pub higher_better: bool,
    pub host_alone: Vec<f64>,
    pub guest_alone: Vec<f64>,
    pub host_with: Vec<f64>,
    pub guest_with: Vec<f64>,
    pub published: String,
    /// Why the rounds stopped early (see [`abab`]).
    pub error: Option<String>,
}

impl Matrix {
    pub fn new(test: impl Into<String>, unit: &str, higher_better: bool) -> Matrix {
        Matrix {
            test: test.into(),
            unit: unit.into(),
            higher_better,
            host_alone: Vec::new(),
            guest_alone: Vec::new(),
            host_with: Vec::new(),
            guest_with: Vec::new(),
            published: String::new(),
            error: None,
        }
    }
    pub fn json(&self) -> Value {
        json!({
            "test": self.test, "unit": self.unit, "higher_is_better": self.higher_better,
            "host_alone": self.host_alone, "guest_alone": self.guest_alone,
            "host_with_guest": self.host_with, "guest_with_host": self.guest_with, "error": self.error,
        })
    }
}

/// Runs `script` host alone, guest alone and on both at once, `rounds` times after one
/// warm-up; `value` turns a run into the measured number. A failure or an interruption
/// becomes the rows' error, as in [`abab`].
pub fn matrix_rows(
    hg: &HostGuest,
    rows: &mut [Matrix],
    rounds: usize,
    script: &str,
    args: &[String],
    value: impl Fn(&RunOut) -> Result<Vec<f64>>,
) -> Result<()> {
    let mut r = Ok(());
    for i in 0..rounds + 1 {
        let record = i > 0;
        let one = (|| -> Result<_> {
            let h = value(&hg.run(Side::Host, script, args)?)?;
            let g = value(&hg.run(Side::Guest, script, args)?)?;
            let (bh, bg) = hg.run_both(script, args)?;
            Ok((h, g, value(&bh)?, value(&bg)?))
        })();
        let (h, g, bh, bg) = match one {
            Ok(x) => x,
            Err(e) => {
                r = Err(e);
                break;
            }
        };
        if record {
            for (k, m) in rows.iter_mut().enumerate() {
                let at = |v: &Vec<f64>| v.get(k).copied().unwrap_or(f64::NAN);
                m.host_alone.push(at(&h));
                m.guest_alone.push(at(&g));
                m.host_with.push(at(&bh));
                m.guest_with.push(at(&bg));
            }
        }
    }
    if let Err(e) = r {
        let why = stopped_by(e);
        for m in rows.iter_mut() {
            m.error = Some(why.clone());
        }
    }
    Ok(())
}

pub fn matrix_section(title: &str, rows: &[Matrix], mut notes: Vec<String>) -> Section {
    if let Some(e) = rows.iter().find_map(|m| m.error.as_ref()) {
        let n = rows.first().map_or(0, |m| m.host_alone.len());
        notes.push(format!("stopped after {n} rounds: {e}"));
    }
    let mut t = Table::new(&[
        "test",
        "host alone (guest idle)",
        "guest alone (host idle)",
        "host with guest",
        "guest with host",
        "host alone, absolute",
        "published (C, LXCBENCH)",
    ]);
    for m in rows {
        let mean = |v: &[f64]| summarize(v).map(|s| s.mean).unwrap_or(f64::NAN);
        let base = mean(&m.host_alone);
        // Relative performance: for times, host / x (so that lower than 1 means slower).
        let rel = |v: &[f64]| {
            let x = mean(v);
            let r = if m.higher_better { x / base } else { base / x };
            format!("{r:.2}")
        };
        t.row(vec![
            m.test.clone(),
            rel(&m.host_alone),
            rel(&m.guest_alone),
            rel(&m.host_with),
            rel(&m.guest_with),
            format!("{} {}", num(base), m.unit),
            m.published.clone(),
        ]);
    }
    Section {
        title: title.into(),
        table: t,
        notes,
    }
}

/// The Student's t the CI uses, for notes.
pub fn t_for(n: usize) -> f64 {
    t975(n.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        assert_eq!(verdict(&[1.0, 1.01, 0.99, 1.0], true), "within noise");
        assert_eq!(verdict(&[0.9, 0.9, 0.91, 0.89], true), "guest 10.0 % worse");
        assert_eq!(
            verdict(&[0.9, 0.9, 0.91, 0.89], false),
            "guest 10.0 % better"
        );
        assert_eq!(verdict(&[1.0], true), "one round: no CI");
    }

    #[test]
    fn table_has_the_published_shape() {
        let mut m = Metric::new("x", "s", false);
        for (h, g) in [(1.0, 1.1), (1.0, 1.1), (1.0, 1.1)] {
            m.push(Side::Host, h, 0.5);
            m.push(Side::Guest, g, 0.5);
        }
        let t = table(&[m, Metric::new("y", "s", false).skip("skipped: z".into())]);
        assert_eq!(
            &t.header[..5],
            &["test", "avg host", "avg guest", "diff", "diff %"]
        );
        assert_eq!(t.rows[0][4], "+10.00");
        assert_eq!(t.rows[0][8], "guest 10.0 % worse");
        assert_eq!(t.rows[1][8], "skipped: z");
    }

    #[test]
    fn numbers() {
        assert_eq!(num(1234.5), "1234");
        assert_eq!(num(0.12345), "0.123");
        assert_eq!(num(5e7), "5.000e7");
    }
}
