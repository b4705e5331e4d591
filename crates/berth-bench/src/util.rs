//! Small helpers shared by the suites: the error type, running tools, clocks, progress and
//! the Ctrl-C flag.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The first `tool` on PATH: the kit's, which the end-to-end tests use too.
pub use berth_testkit::which;

/// What went wrong, said for the person running the benchmark.
pub struct Error(pub String);

pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl From<String> for Error {
    fn from(s: String) -> Error {
        Error(s)
    }
}
impl From<&str> for Error {
    fn from(s: &str) -> Error {
        Error(s.to_string())
    }
}

macro_rules! bail {
    ($($t:tt)*) => { return Err($crate::util::Error(format!($($t)*))) };
}
pub(crate) use bail;

/// Adds what was being done to an error.
pub trait Context<T> {
    fn context(self, what: impl fmt::Display) -> Result<T>;
}
impl<T, E: fmt::Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl fmt::Display) -> Result<T> {
        self.map_err(|e| Error(format!("{what}: {e}")))
    }
}

/// CLOCK_REALTIME in nanoseconds: the clock the payload reads inside the container, so both
/// ends of an activation measurement use the same one.
pub fn now_ns() -> i128 {
    berth_sys::process::realtime_ns() as i128
}

pub fn ms_between(t0_ns: i128, t1_ns: i128) -> f64 {
    (t1_ns - t0_ns) as f64 / 1e6
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().to_string();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs a command to completion and returns its output, whatever the exit status.
pub fn output(cmd: &mut Command) -> Result<Output> {
    cmd.stdin(Stdio::null());
    cmd.output()
        .map_err(|e| Error(format!("cannot run {}: {e}", describe(cmd))))
}

/// Runs a command and returns its stdout; a failure carries its stderr.
pub fn run(cmd: &mut Command) -> Result<String> {
    let out = output(cmd)?;
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}{}",
            describe(cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

/// `runc run -d --bundle BUNDLE ID` (`runc` is runc with its global options), its stderr
/// in `BUNDLE/run-d.stderr`; returns [`now_ns`] just before runc is spawned and just after
/// it returned. Not `output()`: the detached container keeps runc's stdio open for its
/// lifetime.
pub fn runc_run_detached(
    mut runc: Command,
    bundle: &std::path::Path,
    id: &str,
) -> Result<(i128, i128)> {
    let err_file = bundle.join("run-d.stderr");
    let err = File::create(&err_file).context("create runc's stderr file")?;
    runc.args(["run", "-d", "--bundle"])
        .arg(bundle)
        .arg(id)
        .stdout(Stdio::null())
        .stderr(err);
    let t0 = now_ns();
    let st = runc.status().context("run runc")?;
    let t_ret = now_ns();
    if !st.success() {
        let msg = std::fs::read_to_string(&err_file).unwrap_or_default();
        bail!("runc run -d failed ({st}): {}", msg.trim());
    }
    Ok((t0, t_ret))
}

/// Runs a command for its side effect only; failures are ignored (cleanup).
pub fn run_quiet(cmd: &mut Command) {
    let _ = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

static PROGRESS: AtomicBool = AtomicBool::new(false);

pub fn set_progress(on: bool) {
    PROGRESS.store(on, Ordering::Relaxed);
}

pub fn progress_enabled() -> bool {
    PROGRESS.load(Ordering::Relaxed)
}

macro_rules! progress {
    ($($t:tt)*) => {
        if $crate::util::progress_enabled() {
            eprintln!("berth-bench: {}", format!($($t)*));
        }
    };
}
pub(crate) use progress;

static TERM: OnceLock<File> = OnceLock::new();
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Catches SIGINT and SIGTERM so a run that is interrupted still cleans up. Children are
/// started in their own process groups, so Ctrl-C reaches only berth-bench.
pub fn catch_interrupts() -> Result<()> {
    let fd = berth_sys::process::termination_pipe().context("install signal handlers")?;
    berth_sys::process::set_nonblocking(fd.as_raw_fd()).context("signal pipe")?;
    let _ = TERM.set(File::from(fd));
    Ok(())
}

pub fn interrupted() -> bool {
    if INTERRUPTED.load(Ordering::Relaxed) {
        return true;
    }
    if let Some(mut f) = TERM.get() {
        let mut b = [0u8; 8];
        if matches!(f.read(&mut b), Ok(n) if n > 0) {
            INTERRUPTED.store(true, Ordering::Relaxed);
            return true;
        }
    }
    false
}

pub fn check_interrupted() -> Result<()> {
    if interrupted() {
        bail!("interrupted; cleaning up");
    }
    Ok(())
}

/// Sleeps, waking early (with an error) when interrupted.
pub fn sleep(d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    loop {
        check_interrupted()?;
        let now = Instant::now();
        if now >= end {
            return Ok(());
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
}

/// Polls `f` every `every` until it gives a value or `timeout` passes.
pub fn poll<T>(
    timeout: Duration,
    every: Duration,
    what: &str,
    mut f: impl FnMut() -> Option<T>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        check_interrupted()?;
        if Instant::now() > deadline {
            bail!("timed out after {} s waiting for {what}", timeout.as_secs());
        }
        std::thread::sleep(every);
    }
}

/// The last `n` lines of `s`, joined by `sep`.
pub fn last_lines(s: &str, n: usize, sep: &str) -> String {
    let l: Vec<&str> = s.lines().collect();
    l[l.len().saturating_sub(n)..].join(sep)
}

/// Whether we run as root (real LXC, loop mounts and cgroups need it).
pub fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The current time as RFC 3339 UTC, e.g. `2025-01-31T12:00:00Z`.
pub fn utc_now() -> String {
    let s = (now_ns() / 1_000_000_000) as i64;
    let (y, mo, d) = civil(s.div_euclid(86_400));
    let t = s.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// A berth with the test hooks, for the suites that force a fallback or speed the
/// scheduler's clock (bind, cost): `berth` itself if it has them, else `berth-test-hooks`
/// beside it (scripts/test.sh builds one there); the other suites measure `berth` as it ships.
pub fn hooks_berth(berth: &std::path::Path) -> Option<std::path::PathBuf> {
    if berth_testkit::has_test_hooks(berth) {
        return Some(berth.to_path_buf());
    }
    let beside = berth.with_file_name("berth-test-hooks");
    (beside.is_file() && berth_testkit::has_test_hooks(&beside)).then_some(beside)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(19_723), (2024, 1, 1));
        assert_eq!(civil(19_782), (2024, 2, 29));
        assert_eq!(civil(-1), (1969, 12, 31));
    }
}
