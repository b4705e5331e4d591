//! Crash archives (docs/reports.md): on a failure the supervisor reports (a failed end or
//! start, a crash loop, a failed health check, a memory-guard kill) and on a daemon panic,
//! one archive in `<state>/reports/<container>/<id>.tar.gz` with what explains it: the
//! manifest, the LXC configuration, the log tail, the core file where the policy allows it,
//! the cgroup counters, the exit record, the kernel log tail and `summary.json` (also kept
//! beside it as `<id>.json`, so listing needs no decompression). Kept within
//! `[reports]` caps, oldest first out.
//!
//! Compression is the device's own `gzip` (busybox has one), piped: deflate in the binary
//! (miniz_oxide) cost the device build 25,656 bytes. Without a gzip the archive is a plain
//! `.tar`, logged once.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use berth_core::api::{exit as exit_field, guard_kill, report as field};
use berth_core::config::Paths;
use berth_core::report::{self as rp, Caps, CoreName, Reason, Stored, TarWriter};
use berth_core::supervise::{Exit, Report};
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::device::records;
use crate::daemon::runtime::{logs, probe};

/// The newest bytes of the container's log that go in.
const LOG_TAIL: usize = 64 * 1024;
/// The newest bytes of the kernel log that go in.
const KMSG_TAIL: usize = 16 * 1024;
/// The newest bytes of LXC's own log of the container.
const LXC_LOG_TAIL: usize = berth_sys::lxc::LOG_KEEP;
/// How long a collection waits for the core handler to finish writing a core (the kernel
/// ends the process only once the dump is read; the file may land a moment after).
const CORE_WAIT: Duration = Duration::from_secs(2);

/// One collection at a time: eviction must see every archive that was written.
static WRITING: Mutex<()> = Mutex::new(());

/// What the supervisor's `report` calls: gathers and writes the archive on a short-lived
/// thread, so the supervisor goes on at once (the work is bounded: a few small files, a
/// capped core, one gzip).
pub(crate) fn collect(d: &Arc<Daemon>, name: &str, r: &Report) {
    let (d, r) = (Arc::clone(d), r.clone());
    let who = name.to_string();
    let spawned = berth_sys::process::spawn_thread(
        "report".into(),
        256 * 1024,
        Box::new(move || {
            let _one = WRITING.lock().unwrap_or_else(|p| p.into_inner());
            match write_event(&d, &who, &r) {
                Ok(Some(id)) => log::info!("{who}: crash report {id}"),
                Ok(None) => {}
                Err(e) => {
                    let e = format!("{e:#}");
                    let full = if e.contains("(flash full)") {
                        format!("; {}", crate::daemon::device::disk::holders(&d.cfg.paths))
                    } else {
                        String::new()
                    };
                    log::warn!("{who}: no crash report: {e}{full}");
                }
            }
        }),
    );
    if let Err(e) = spawned {
        log::warn!("{name}: no crash report: cannot start a thread: {e}");
    }
}

/// A member of the archive: bytes gathered in memory, or a file read as it is written.
enum Src {
    Bytes(Vec<u8>),
    File(PathBuf, u64),
}

struct Member {
    path: String,
    src: Src,
}

impl Member {
    fn bytes(path: &str, b: impl Into<Vec<u8>>) -> Member {
        Member {
            path: path.into(),
            src: Src::Bytes(b.into()),
        }
    }
    fn size(&self) -> u64 {
        match &self.src {
            Src::Bytes(b) => b.len() as u64,
            Src::File(_, n) => *n,
        }
    }
}

/// Reason and words of a report, or None when no archive is due (a kill the guard's own
/// archive already covers).
fn what(d: &Daemon, name: &str, r: &Report) -> Option<(Reason, String)> {
    Some(match r {
        Report::Failed(None) => (Reason::Start, "the start failed".into()),
        Report::Failed(Some(e)) => {
            if e.signal == Some(libc::SIGKILL) && guard_killed_init_lately(d, name) {
                return None;
            }
            describe(e, &probe::exit_info(d, name))
        }
        Report::CrashLoop { retries } => (
            Reason::CrashLoop,
            format!("failed again after {retries} restarts: not restarted again"),
        ),
        Report::Unhealthy { failures } => {
            let last = d
                .supervision
                .lock()
                .unwrap()
                .get(name)
                .and_then(|s| s.last_check.as_ref().map(|(l, _)| l.clone()))
                .unwrap_or_default()
                // The probe's output is the container's: no control bytes for a terminal.
                .escape_debug()
                .to_string();
            (
                Reason::HealthFailed,
                format!(
                    "{failures} health checks in a row failed (last: {last}): the run is ended"
                ),
            )
        }
        Report::WatchdogExpired { period_ms } => (
            Reason::HealthFailed,
            format!(
                "no keep-alive on its API within {} ms ([health] watchdog): the run is ended",
                period_ms
            ),
        ),
        Report::OomKilled { kills } => (
            Reason::Oom,
            format!("the kernel's OOM killer killed {kills} process(es) in its memory cgroup"),
        ),
        Report::UpgradeFailed { from, why } => (
            Reason::Upgrade,
            format!("the upgrade from {from} was rolled back: {why}"),
        ),
        Report::GuardKilled(k) => (
            Reason::Guard,
            format!(
                "memory guard killed pid {}{} (rss {} B, {} B available)",
                k.pid,
                if k.init { ", the container's init" } else { "" },
                k.rss,
                k.available
            ),
        ),
    })
}

fn describe(e: &Exit, record: &Value) -> (Reason, String) {
    let core = match record[exit_field::CORE_DUMPED].as_bool() {
        Some(true) => " (core dumped)",
        _ => "",
    };
    match (e.code, e.signal) {
        (_, Some(s)) => (Reason::Signal, format!("signal {s}{core}")),
        (Some(c), None) => (Reason::Exit, format!("exit {c}")),
        (None, None) => (Reason::Exit, "end not recorded".into()),
    }
}

/// The guard kills a container's init with SIGKILL and writes its own archive: the end
/// that follows is the same event.
fn guard_killed_init_lately(d: &Daemon, name: &str) -> bool {
    let k = records::last_guard_kill(d, name);
    let at = k[guard_kill::AT].as_u64().unwrap_or(0);
    // (a kill dated ahead of the clock was before the clock was set back: not lately)
    k[guard_kill::INIT].as_bool() == Some(true)
        && berth_sys::process::now_s()
            .checked_sub(at)
            .is_some_and(|a| a < 30)
}

fn write_event(d: &Daemon, name: &str, r: &Report) -> anyhow::Result<Option<String>> {
    let Some((reason, detail)) = what(d, name, r) else {
        return Ok(None);
    };
    let paths = &d.cfg.paths;
    let caps = &d.cfg.reports;
    let now = berth_sys::process::now_s();
    let dir = paths.reports().join(name);
    prepare_dir(&dir)?;
    let id = rp::new_id(now, name, reason, &|id| archive_of(&dir, id).is_some());
    let mut notes: Vec<String> = Vec::new();
    let mut members = Vec::new();
    let pkg = crate::daemon::device::state::state(d)
        .packages
        .get(name)
        .cloned();
    match &pkg {
        Some(p) => members.push(Member::bytes(
            "manifest.json",
            serde_json::to_vec_pretty(&p.manifest).unwrap_or_default(),
        )),
        None => notes.push("the package is no longer installed: no manifest".into()),
    }
    let lxc = paths.lxc_dir(name);
    match std::fs::read(lxc.join("config")) {
        Ok(b) => members.push(Member::bytes("lxc.config", b)),
        Err(e) => notes.push(format!("lxc config {}: {e}", lxc.join("config").display())),
    }
    if let Ok(b) = std::fs::read(lxc.join("lxc.log")) {
        members.push(Member::bytes("lxc.log", rp::tail(&b, LXC_LOG_TAIL)));
    }
    members.push(Member::bytes(
        "log.txt",
        rp::tail(&log_of(d, name), LOG_TAIL),
    ));
    let exit = probe::exit_info(d, name);
    let exit_now = matches!(r, Report::Failed(Some(_)));
    if exit_now && !exit.is_null() {
        members.push(Member::bytes("exit.json", exit.to_string()));
    }
    let (cgroup, cg_note) = cgroup_state(d, name);
    members.push(Member::bytes("cgroup.txt", cgroup));
    notes.extend(cg_note);
    match std::fs::read(d.proc().join("meminfo")) {
        Ok(b) => members.push(Member::bytes("meminfo.txt", b)),
        Err(e) => notes.push(format!("meminfo: {e}")),
    }
    match kmsg_tail(&d.roots.dev.join("kmsg")) {
        Ok(b) => members.push(Member::bytes("kmsg.txt", b)),
        Err(e) => notes.push(format!("kernel log not readable: {e}")),
    }
    let signal = match r {
        Report::Failed(Some(e)) => e.signal,
        _ => None,
    };
    let core = cores(d, name, caps, signal, &mut members, &mut notes);
    let summary = summary(
        &id,
        name,
        pkg.as_ref().map(|p| p.version.to_string()),
        reason,
        now,
        detail,
        if exit_now { exit } else { Value::Null },
        kernel(d.proc()),
        core,
        notes,
    );
    write_archive(paths, caps, name, &id, summary, members)?;
    // The cores went into the archive (or were over the cap): the next event starts clean.
    if let Ok(entries) = std::fs::read_dir(paths.cores().join(name)) {
        for e in entries.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
    Ok(Some(id))
}

/// `reports/<dir>` exists, root's only, without temporary files of a writer that died.
fn prepare_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    if let Some(parent) = dir.parent() {
        std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o700))?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    berth_sys::fsutil::remove_atomic_leftovers(dir);
    Ok(())
}

/// The container's log: its live ring (running) or the ring saved when it stopped.
fn log_of(d: &Daemon, name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    match logs::logs(d, name, false) {
        Ok(logs::Logs::Live(s)) => {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.take(4 << 20).read_to_end(&mut out);
        }
        Ok(logs::Logs::Saved(b)) => out = b,
        Err(_) => out = std::fs::read(d.cfg.paths.saved_log(name)).unwrap_or_default(),
    }
    out
}

/// The cgroup files that say what a container used and hit, v1 or v2 (whichever exist);
/// its limits are in `lxc.config`.
const CGROUP_FILES: &[&str] = &[
    // v2
    "memory.current",
    "memory.max",
    "memory.peak",
    "memory.events",
    "memory.pressure",
    "memory.stat",
    "pids.current",
    "pids.max",
    "pids.events",
    "cpu.stat",
    "cpu.pressure",
    // v1
    "memory.usage_in_bytes",
    "memory.max_usage_in_bytes",
    "memory.limit_in_bytes",
    "memory.failcnt",
    "memory.oom_control",
    "cpuacct.usage",
];

/// The container's cgroup files and its group's, as `== path` sections. LXC removes a
/// container's cgroup as it ends: then only the group's counters remain (said in a note).
fn cgroup_state(d: &Daemon, name: &str) -> (Vec<u8>, Option<String>) {
    let root = d.cgroup_root();
    let mut hierarchies: Vec<PathBuf> = std::fs::read_dir(&root)
        .map(|h| {
            h.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    hierarchies.push(root);
    let parent = &d.cfg.cgroup_parent;
    let mut out = Vec::new();
    let mut container_seen = false;
    // Without the host's PSI (Linux < 4.20, CONFIG_PSI off, psi=0) a cgroup's *.pressure
    // files are absent, or (psi=0 on kernels before 5.x) present but answer EOPNOTSUPP:
    // either way, none of them.
    let psi = d.proc().join("pressure/memory").exists();
    let cgs = crate::daemon::device::cgroups::of(d, name);
    for rel in [cgs.budget, cgs.payload, parent.clone()] {
        for h in &hierarchies {
            let dir = h.join(&rel);
            if !dir.is_dir() {
                continue;
            }
            container_seen |= rel != *parent;
            for f in CGROUP_FILES {
                if !psi && f.ends_with(".pressure") {
                    continue;
                }
                if let Ok(text) = std::fs::read(dir.join(f)) {
                    let _ = writeln!(out, "== {}", dir.join(f).display());
                    out.extend_from_slice(&text);
                }
            }
        }
    }
    let note = (!container_seen).then(|| {
        format!("cgroup {parent}/{name} is gone (LXC removes it as the container ends): the group's counters only")
    });
    (out, note)
}

/// The newest `KMSG_TAIL` bytes of the kernel log, read without blocking from /dev/kmsg.
fn kmsg_tail(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let mut all: Vec<u8> = Vec::new();
    // One record per read; records are at most ~8 KiB.
    let mut rec = vec![0u8; 8192];
    loop {
        match f.read(&mut rec) {
            Ok(0) => break,
            Ok(n) => {
                all.extend_from_slice(&rec[..n]);
                if all.len() > 4 * KMSG_TAIL {
                    all.drain(..all.len() - KMSG_TAIL);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            // EPIPE: the record just read was overwritten; the next read goes on.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(rp::tail(&all, KMSG_TAIL).to_vec())
}

/// The core files the handler left for this container (the policy permitting), added as
/// members; their description for the summary.
fn cores(
    d: &Daemon,
    name: &str,
    caps: &Caps,
    signal: Option<i32>,
    members: &mut Vec<Member>,
    notes: &mut Vec<String>,
) -> Value {
    let dir = d.cfg.paths.cores().join(name);
    // The newest only: one event, one core (a crash loop's older ones are older events').
    // (A maximum, not a sort: each sort instantiation costs the device binary kilobytes.)
    let newest = || -> Option<(PathBuf, CoreName, u64)> {
        std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .filter_map(|e| {
                let c = CoreName::parse(&e.file_name().to_string_lossy())?;
                let size = e.metadata().ok()?.len();
                Some((e.path(), c, size))
            })
            .max_by_key(|(_, c, _)| (c.secs, c.pid))
    };
    if !caps.cores {
        if signal.is_some_and(rp::dumps_core) {
            notes.push("core files are not collected: [reports] cores = false".into());
        }
        return Value::Null;
    }
    let mut found = newest();
    if found.is_none() && signal.is_some_and(rp::dumps_core) {
        let deadline = std::time::Instant::now() + CORE_WAIT;
        while found.is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            found = newest();
        }
        if found.is_none() {
            notes.push("no core file: is kernel.core_pattern berth core-handler?".into());
        }
    }
    let Some((path, c, size)) = found else {
        return Value::Null;
    };
    let size = size.min(caps.max_core_size);
    let truncated = c.truncated || size == caps.max_core_size;
    if truncated {
        notes.push(format!(
            "the core was cut at reports.max_core_size ({} bytes)",
            caps.max_core_size
        ));
    }
    members.push(Member {
        path: "core".into(),
        src: Src::File(path, size),
    });
    json!({field::BYTES: size, field::TRUNCATED: truncated, "pid": c.pid, "signal": c.signal})
}

/// `summary.json` (one builder for container and panic reports: each `json!` object costs
/// the device binary its own code).
#[allow(clippy::too_many_arguments)]
fn summary(
    id: &str,
    name: &str,
    version: Option<String>,
    reason: Reason,
    at: u64,
    detail: String,
    exit: Value,
    kernel: String,
    core: Value,
    notes: Vec<String>,
) -> Value {
    json!({
        field::ID: id,
        field::NAME: name,
        field::VERSION: version,
        field::REASON: reason.as_str(),
        field::AT: at,
        field::DETAIL: detail,
        field::EXIT: exit,
        field::BERTH_VERSION: env!("CARGO_PKG_VERSION"),
        field::KERNEL: kernel,
        field::CORE: core,
        field::NOTES: notes,
    })
}

fn kernel(proc: &Path) -> String {
    std::fs::read_to_string(proc.join("sys/kernel/osrelease"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The gzip on PATH (or in the usual places), found once; None is logged once.
fn gzip() -> Option<&'static Path> {
    static GZIP: OnceLock<Option<PathBuf>> = OnceLock::new();
    GZIP.get_or_init(|| {
        let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".into());
        let found = path
            .split(':')
            .map(|d| Path::new(d).join("gzip"))
            .find(|p| {
                p.metadata()
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            });
        if found.is_none() {
            log::warn!("no gzip on PATH: crash reports are written as plain .tar");
        }
        found
    })
    .as_deref()
}

/// Writes `<dir>/<id>.tar.gz` (or `.tar`) atomically: a temporary file, fsynced, renamed,
/// the directory fsynced; then the summary beside it; then the caps are applied. A failure
/// (a full flash) loses this archive only: its temporary file goes.
fn write_archive(
    paths: &Paths,
    caps: &Caps,
    dir_name: &str,
    id: &str,
    mut summary: Value,
    members: Vec<Member>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let dir = paths.reports().join(dir_name);
    let gz = gzip();
    let ext = if gz.is_some() {
        rp::EXT_GZ
    } else {
        rp::EXT_TAR
    };
    let listed: Vec<Value> = std::iter::once(
        json!({field::PATH: format!("{id}/summary.json"), field::SIZE: Value::Null}),
    )
    .chain(
        members
            .iter()
            .map(|m| json!({field::PATH: format!("{id}/{}", m.path), field::SIZE: m.size()})),
    )
    .collect();
    summary[field::MEMBERS] = Value::Array(listed);
    summary[field::FORMAT] = json!(&ext[1..]);
    let final_path = dir.join(format!("{id}{ext}"));
    let tmp = dir.join(format!(".{id}{ext}.tmp.{}.0", std::process::id()));
    let side = dir.join(format!("{id}{}", rp::EXT_SUMMARY));
    let result = (|| -> anyhow::Result<()> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&tmp)?;
        let sync = file.try_clone()?;
        let mtime = summary[field::AT].as_u64().unwrap_or(0);
        let summary_bytes = serde_json::to_vec_pretty(&summary)?;
        let write_tar = |out: &mut dyn Write| -> std::io::Result<()> {
            let mut t = TarWriter::new(out, mtime);
            t.append(&format!("{id}/summary.json"), &summary_bytes)?;
            for m in &members {
                let name = format!("{id}/{}", m.path);
                match &m.src {
                    Src::Bytes(b) => t.append(&name, b)?,
                    Src::File(p, n) => {
                        let mut f = std::fs::File::open(p)?;
                        t.append_reader(&name, *n, &mut f)?
                    }
                }
            }
            t.finish().map(|_| ())
        };
        match gz {
            Some(gz) => {
                let mut child = Command::new(gz)
                    .arg("-c")
                    .stdin(Stdio::piped())
                    .stdout(Stdio::from(file))
                    .stderr(Stdio::piped())
                    .spawn()
                    .with_context(|| format!("run {}", gz.display()))?;
                let wrote = match child.stdin.take() {
                    Some(mut stdin) => write_tar(&mut stdin),
                    None => Err(std::io::Error::other("no pipe to gzip")),
                };
                let out = child.wait_with_output()?;
                if !out.status.success() {
                    anyhow::bail!(
                        "{} failed ({}): {}",
                        gz.display(),
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
                wrote?;
            }
            None => {
                let mut w = std::io::BufWriter::new(file);
                write_tar(&mut w)?;
                w.flush()?;
            }
        }
        berth_sys::fsutil::sync(&sync)?;
        // The summary before the archive appears, so a listing never sees one without the
        // other's words (a summary without its archive is not listed). Without it the
        // archive is still whole: only the words are missing.
        if let Err(e) =
            berth_sys::fsutil::write_atomic(&side, summary.to_string().as_bytes(), 0o600)
        {
            log::warn!("{}: {e}", side.display());
        }
        if let Err(e) = std::fs::rename(&tmp, &final_path) {
            let _ = std::fs::remove_file(&side);
            return Err(e.into());
        }
        let _ = berth_sys::fsutil::fsync_dir(&dir);
        Ok(())
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        // (ENOSPC itself, or gzip failing on a file system with nothing left)
        let full = e
            .downcast_ref::<std::io::Error>()
            .is_some_and(berth_sys::fsutil::is_enospc)
            || berth_sys::fsutil::free_bytes(&dir).is_ok_and(|f| f == 0);
        return Err(e.context(format!(
            "cannot write {}{}",
            final_path.display(),
            if full { " (flash full)" } else { "" }
        )));
    }
    enforce_caps(paths, caps, id);
    Ok(())
}

/// Deletes the oldest reports beyond the caps (never `keep`, the one just written).
fn enforce_caps(paths: &Paths, caps: &Caps, keep: &str) {
    let stored: Vec<Stored> = scan(paths)
        .into_iter()
        .map(|e| Stored {
            id: e.id,
            dir: e.dir,
            size: e.size,
        })
        .collect();
    for id in rp::evict(&stored, caps, keep, berth_sys::process::now_s()) {
        match remove_one(paths, &id) {
            Ok(()) => log::info!("crash report {id} removed (over the [reports] caps)"),
            Err(e) => log::warn!("crash report {id}: {e}"),
        }
    }
}

/// A stored report as `list` shows it.
struct Entry {
    id: String,
    dir: String,
    archive: PathBuf,
    size: u64,
}

/// The archive of `id` in `dir`, whichever format it was written in.
fn archive_of(dir: &Path, id: &str) -> Option<PathBuf> {
    [rp::EXT_GZ, rp::EXT_TAR]
        .iter()
        .map(|ext| dir.join(format!("{id}{ext}")))
        .find(|p| p.is_file())
}

/// Every stored report (an archive, with or without its summary), oldest first.
fn scan(paths: &Paths) -> Vec<Entry> {
    let mut out = Vec::new();
    let Ok(dirs) = std::fs::read_dir(paths.reports()) else {
        return out;
    };
    for d in dirs.flatten() {
        let dir = d.file_name().to_string_lossy().into_owned();
        let Ok(files) = std::fs::read_dir(d.path()) else {
            continue;
        };
        for f in files.flatten() {
            let fname = f.file_name().to_string_lossy().into_owned();
            let Some(id) = fname
                .strip_suffix(rp::EXT_GZ)
                .or_else(|| fname.strip_suffix(rp::EXT_TAR))
            else {
                continue;
            };
            if fname.starts_with('.') || rp::parse_id(id).is_err() {
                continue;
            }
            let side = d.path().join(format!("{id}{}", rp::EXT_SUMMARY));
            let size = f.metadata().map(|m| m.len()).unwrap_or(0)
                + side.metadata().map(|m| m.len()).unwrap_or(0);
            out.push(Entry {
                id: id.to_string(),
                dir: dir.clone(),
                archive: f.path(),
                size,
            });
        }
    }
    out.sort_unstable_by(|a, b| a.id.cmp(&b.id));
    out
}

fn summary_of(e: &Entry) -> Value {
    let side = e
        .archive
        .with_file_name(format!("{}{}", e.id, rp::EXT_SUMMARY));
    std::fs::read(side)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null)
}

fn entry_json(e: &Entry, s: &Value) -> Value {
    let format = if e.archive.to_string_lossy().ends_with(rp::EXT_GZ) {
        "tar.gz"
    } else {
        "tar"
    };
    let reason = rp::parse_id(&e.id).map(|i| i.reason.as_str()).unwrap_or("");
    json!({
        field::ID: e.id,
        field::NAME: e.dir,
        field::REASON: reason,
        field::AT: s[field::AT],
        field::SIZE: e.size,
        field::FORMAT: format,
        field::DETAIL: s[field::DETAIL],
    })
}

/// `GET /v1/reports[?name=]`.
pub(crate) fn list(d: &Daemon, name: Option<&str>) -> Result<Value> {
    let reports: Vec<Value> = scan(&d.cfg.paths)
        .iter()
        .filter(|e| name.is_none_or(|n| e.dir == n))
        .map(|e| entry_json(e, &summary_of(e)))
        .collect();
    Ok(json!({ field::REPORTS: reports }))
}

fn find(paths: &Paths, id: &str) -> Result<Entry> {
    let parsed = rp::parse_id(id)?;
    scan(paths)
        .into_iter()
        .find(|e| e.id == id && e.dir == parsed.container)
        .ok_or_else(|| {
            Error::new(
                Kind::NoSuchReport,
                format!("no report {id} (berth report list shows those kept)"),
            )
        })
}

/// `GET /v1/reports/show?id=`.
pub(crate) fn show(d: &Daemon, id: &str) -> Result<Value> {
    let e = find(&d.cfg.paths, id)?;
    let s = summary_of(&e);
    let mut v = entry_json(&e, &s);
    v[field::SUMMARY] = s;
    Ok(v)
}

/// `GET /v1/reports/export?id=`: the archive's path, its content type and size.
pub(crate) fn export(d: &Daemon, id: &str) -> Result<(std::fs::File, &'static str, u64)> {
    let e = find(&d.cfg.paths, id)?;
    let f = std::fs::File::open(&e.archive)
        .map_err(|err| Error::internal(format!("{}: {err}", e.archive.display())))?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let ct = if e.archive.to_string_lossy().ends_with(rp::EXT_GZ) {
        "application/gzip"
    } else {
        "application/x-tar"
    };
    Ok((f, ct, len))
}

fn remove_one(paths: &Paths, id: &str) -> std::io::Result<()> {
    let parsed = rp::parse_id(id).map_err(|e| std::io::Error::other(e.message))?;
    let dir = paths.reports().join(&parsed.container);
    // The summary first: an archive without one is still listed; the reverse would not be.
    let _ = std::fs::remove_file(dir.join(format!("{id}{}", rp::EXT_SUMMARY)));
    if let Some(a) = archive_of(&dir, id) {
        std::fs::remove_file(a)?;
    }
    let _ = berth_sys::fsutil::fsync_dir(&dir);
    // An empty directory of a package long removed goes too.
    let _ = std::fs::remove_dir(&dir);
    Ok(())
}

/// `POST /v1/reports/remove`: one report, or all (`id` None).
pub(crate) fn remove(d: &Daemon, id: Option<&str>) -> Result<Value> {
    let _one = WRITING.lock().unwrap_or_else(|p| p.into_inner());
    let ids: Vec<String> = match id {
        Some(id) => vec![find(&d.cfg.paths, id)?.id],
        None => scan(&d.cfg.paths).into_iter().map(|e| e.id).collect(),
    };
    for id in &ids {
        remove_one(&d.cfg.paths, id)
            .map_err(|e| Error::internal(format!("cannot remove report {id}: {e}")))?;
    }
    Ok(json!({ field::REMOVED: ids }))
}

/// A daemon panic writes a small archive (the message and where) before the process
/// aborts (release builds abort on panic): synchronously, from the panicking thread.
pub(crate) fn install_panic_hook(d: &Daemon) {
    let paths = d.cfg.paths.clone();
    let caps = d.cfg.reports;
    let proc = d.roots.proc.clone();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        let now = berth_sys::process::now_s();
        let dir_name = rp::DAEMON_DIR;
        let dir = paths.reports().join(dir_name);
        if prepare_dir(&dir).is_err() {
            return;
        }
        let id = rp::new_id(now, dir_name, Reason::Panic, &|id| {
            archive_of(&dir, id).is_some()
        });
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        let location = info
            .location()
            .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
            .unwrap_or_default();
        let thread = std::thread::current().name().unwrap_or("?").to_string();
        let text = format!("panic in thread {thread} at {location}: {message}\n");
        let summary = summary(
            &id,
            dir_name,
            None,
            Reason::Panic,
            now,
            format!("{message} ({location})"),
            Value::Null,
            kernel(&proc),
            Value::Null,
            vec!["the daemon logs to stderr or syslog: no log tail kept by berth".into()],
        );
        // Not under WRITING: the panic may be in a thread that holds it.
        let members = vec![Member::bytes("panic.txt", text)];
        if let Err(e) = write_archive(&paths, &caps, dir_name, &id, summary, members) {
            warnln!("berth: no crash report of the panic: {e:#}");
        }
    }));
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;

    use berth_core::supervise::Exit;

    use super::*;
    use crate::daemon::base::testing::{fake_daemon, install, MANIFEST};

    const WEB_EXIT: &str = "20260101T000000Z-web-exit";
    const DB_OOM: &str = "20260101T120000Z-db-oom";
    const WEB_SIGNAL: &str = "20260102T000000Z-web-signal";
    const PANIC: &str = "20260103T000000Z-_daemon-panic";

    /// A stored report as a writer leaves it: the archive (`ext`) in its container's
    /// directory, and its summary beside it when given. The archive's path.
    fn stored(
        d: &Daemon,
        dir: &str,
        id: &str,
        ext: &str,
        size: usize,
        s: Option<Value>,
    ) -> PathBuf {
        let dir = d.cfg.paths.reports().join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        let archive = dir.join(format!("{id}{ext}"));
        std::fs::write(&archive, vec![b'a'; size]).unwrap();
        if let Some(s) = s {
            std::fs::write(dir.join(format!("{id}.json")), s.to_string()).unwrap();
        }
        archive
    }

    /// Four reports of three directories, a writer's temporary file and a file whose name is
    /// no id.
    fn four_reports(d: &Daemon) {
        let s = json!({field::AT: 1_767_225_600u64, field::DETAIL: "exit 1"});
        stored(d, "web", WEB_EXIT, rp::EXT_GZ, 100, Some(s));
        stored(d, "web", WEB_SIGNAL, rp::EXT_TAR, 50, None);
        stored(d, "db", DB_OOM, rp::EXT_GZ, 10, Some(json!({field::AT: 1})));
        stored(d, rp::DAEMON_DIR, PANIC, rp::EXT_GZ, 10, None);
        let web = d.cfg.paths.reports().join("web");
        std::fs::write(web.join(format!(".{WEB_EXIT}.tar.gz.tmp.1.0")), "partial").unwrap();
        std::fs::write(web.join("notes.tar.gz"), "not a report").unwrap();
    }

    fn ids(v: &Value) -> Vec<String> {
        let list = v[field::REPORTS]
            .as_array()
            .or(v[field::REMOVED].as_array());
        list.unwrap()
            .iter()
            .map(|r| r.as_str().or(r[field::ID].as_str()).unwrap().to_string())
            .collect()
    }

    /// The members of a written archive (gzip's or plain), by name.
    fn members(archive: &Path) -> BTreeMap<String, Vec<u8>> {
        let mut bytes = std::fs::read(archive).unwrap();
        if archive.to_string_lossy().ends_with(rp::EXT_GZ) {
            let out = Command::new(gzip().unwrap())
                .arg("-dc")
                .arg(archive)
                .output()
                .unwrap();
            assert!(out.status.success());
            bytes = out.stdout;
        }
        let mut out = BTreeMap::new();
        let mut at = 0;
        while at + 512 <= bytes.len() && bytes[at] != 0 {
            let h = &bytes[at..at + 512];
            let name = String::from_utf8_lossy(&h[..100])
                .trim_end_matches('\0')
                .to_string();
            let size_field = String::from_utf8_lossy(&h[124..136]);
            let size = usize::from_str_radix(size_field.trim_matches(['\0', ' ']), 8).unwrap();
            out.insert(name, bytes[at + 512..at + 512 + size].to_vec());
            at += 512 + size.div_ceil(512) * 512;
        }
        out
    }

    /// Listing: every archive with its summary's words, oldest first whatever its directory,
    /// its size the archive's and the summary's; temporary files and other names are not
    /// reports; `name` keeps one container's.
    #[test]
    fn reports_are_listed_oldest_first_with_their_summaries() {
        let (_dir, d, _m) = fake_daemon("reports-list", "");
        assert_eq!(ids(&list(&d, None).unwrap()), Vec::<String>::new());
        four_reports(&d);
        let all = list(&d, None).unwrap();
        assert_eq!(ids(&all), [WEB_EXIT, DB_OOM, WEB_SIGNAL, PANIC]);
        let side = d.cfg.paths.reports().join(format!("web/{WEB_EXIT}.json"));
        let side_len = std::fs::metadata(side).unwrap().len();
        assert_eq!(
            all[field::REPORTS][0],
            json!({field::ID: WEB_EXIT, field::NAME: "web", field::REASON: "exit",
                   field::AT: 1_767_225_600u64, field::SIZE: 100 + side_len,
                   field::FORMAT: "tar.gz", field::DETAIL: "exit 1"})
        );
        // Without its summary: still listed, without the words.
        assert_eq!(
            all[field::REPORTS][2],
            json!({field::ID: WEB_SIGNAL, field::NAME: "web", field::REASON: "signal",
                   field::AT: null, field::SIZE: 50, field::FORMAT: "tar", field::DETAIL: null})
        );
        assert_eq!(ids(&list(&d, Some("web")).unwrap()), [WEB_EXIT, WEB_SIGNAL]);
        assert_eq!(
            ids(&list(&d, Some("nothing")).unwrap()),
            Vec::<String>::new()
        );
    }

    /// `show` and `export` find a report by its id in its container's directory only; what
    /// is no id is a bad request, an id not kept `no_such_report`, naming it.
    #[test]
    fn a_report_is_shown_and_exported_by_its_id_and_nothing_else() {
        let (_dir, d, _m) = fake_daemon("reports-show", "");
        four_reports(&d);
        let v = show(&d, WEB_EXIT).unwrap();
        assert_eq!(v[field::SUMMARY][field::DETAIL], "exit 1");
        assert_eq!(v[field::FORMAT], "tar.gz");
        assert_eq!(show(&d, WEB_SIGNAL).unwrap()[field::SUMMARY], Value::Null);

        let (mut f, ct, len) = export(&d, WEB_EXIT).unwrap();
        let mut body = Vec::new();
        f.read_to_end(&mut body).unwrap();
        assert_eq!((ct, len, body), ("application/gzip", 100, vec![b'a'; 100]));
        let (_, ct, len) = export(&d, WEB_SIGNAL).unwrap();
        assert_eq!((ct, len), ("application/x-tar", 50));

        for bad in ["../../etc/passwd", "web", "20260101T000000Z-web-nothing"] {
            let e = show(&d, bad).unwrap_err();
            assert_eq!(e.kind, Kind::BadRequest, "{bad}");
            assert!(e.message.contains("is not a report id"), "{}", e.message);
        }
        let unknown = "20990101T000000Z-web-exit";
        let e = export(&d, unknown).err().unwrap();
        assert_eq!(e.kind, Kind::NoSuchReport);
        assert_eq!(
            e.message,
            format!("no report {unknown} (berth report list shows those kept)")
        );
        // An archive of web's id in db's directory is not web's report.
        let astray = "20260105T000000Z-web-exit";
        stored(&d, "db", astray, rp::EXT_GZ, 1, None);
        assert_eq!(show(&d, astray).unwrap_err().kind, Kind::NoSuchReport);
    }

    /// Removing one report takes its archive and summary (and the directory it empties);
    /// an unknown id removes nothing; all removes every one, saying which.
    #[test]
    fn reports_are_removed_one_by_one_or_all() {
        let (_dir, d, _m) = fake_daemon("reports-remove", "");
        four_reports(&d);
        let web = d.cfg.paths.reports().join("web");
        assert_eq!(ids(&remove(&d, Some(WEB_EXIT)).unwrap()), [WEB_EXIT]);
        assert!(!web.join(format!("{WEB_EXIT}.tar.gz")).exists());
        assert!(!web.join(format!("{WEB_EXIT}.json")).exists());
        assert!(web.join(format!("{WEB_SIGNAL}.tar")).exists());

        let e = remove(&d, Some("20990101T000000Z-db-oom")).unwrap_err();
        assert_eq!(e.kind, Kind::NoSuchReport);
        assert_eq!(ids(&list(&d, None).unwrap()), [DB_OOM, WEB_SIGNAL, PANIC]);

        assert_eq!(ids(&remove(&d, None).unwrap()), [DB_OOM, WEB_SIGNAL, PANIC]);
        assert_eq!(ids(&list(&d, None).unwrap()), Vec::<String>::new());
        assert!(!d.cfg.paths.reports().join("db").exists(), "emptied: gone");
        assert!(web.exists(), "the files that are no reports stay");
    }

    /// The caps: per directory the oldest beyond the count go, then overall the oldest until
    /// the total fits; never the report just written.
    #[test]
    fn the_oldest_reports_beyond_the_caps_go_but_never_the_new_one() {
        let (_dir, d, _m) = fake_daemon("reports-caps", "");
        let ids_of = |n: u32| format!("2026010{n}T000000Z-web-exit");
        for n in 1..=4 {
            stored(&d, "web", &ids_of(n), rp::EXT_GZ, 1000, None);
        }
        stored(&d, "db", DB_OOM, rp::EXT_GZ, 1000, None);
        let caps = Caps {
            max_per_container: 3,
            max_total_size: 100 << 20,
            ..Caps::default()
        };
        enforce_caps(&d.cfg.paths, &caps, &ids_of(4));
        assert_eq!(
            ids(&list(&d, Some("web")).unwrap()),
            [ids_of(2), ids_of(3), ids_of(4)]
        );
        let caps = Caps {
            max_total_size: 2500,
            ..caps
        };
        // The oldest is db's (Jan 1st, noon, after web's Jan 1st, gone): the one kept is it.
        enforce_caps(&d.cfg.paths, &caps, DB_OOM);
        assert_eq!(
            ids(&list(&d, None).unwrap()),
            [DB_OOM.to_string(), ids_of(4)]
        );
    }

    /// The fixtures a collection reads: the LXC configuration and log, 70 KiB of saved log,
    /// meminfo, the kernel's release and berth's group's cgroup counters (the container's
    /// own cgroup gone, as LXC removes it).
    fn host_fixtures(d: &Daemon) {
        let lxc = d.cfg.paths.lxc_dir("web");
        std::fs::create_dir_all(&lxc).unwrap();
        std::fs::write(lxc.join("config"), "lxc.uts.name = web\n").unwrap();
        std::fs::write(lxc.join("lxc.log"), "lxc said\n").unwrap();
        let log = d.cfg.paths.saved_log("web");
        std::fs::create_dir_all(log.parent().unwrap()).unwrap();
        let text: Vec<u8> = (0..70 * 1024).map(|i| b'a' + (i % 26) as u8).collect();
        std::fs::write(log, text).unwrap();
        std::fs::write(d.proc().join("meminfo"), "MemTotal: 1024 kB\n").unwrap();
        std::fs::create_dir_all(d.proc().join("sys/kernel")).unwrap();
        std::fs::write(d.proc().join("sys/kernel/osrelease"), "6.1.0-fixture\n").unwrap();
        let group = d.cgroup_root().join(&d.cfg.cgroup_parent);
        std::fs::create_dir_all(&group).unwrap();
        std::fs::write(group.join("memory.current"), "4096\n").unwrap();
        // No PSI on this host (no <proc>/pressure): a pressure file is not read.
        std::fs::write(group.join("memory.pressure"), "some avg10=0.00\n").unwrap();
    }

    fn summary_of_id(d: &Daemon, id: &str) -> Value {
        show(d, id).unwrap()[field::SUMMARY].clone()
    }

    fn archive(d: &Daemon, id: &str) -> PathBuf {
        archive_of(&d.cfg.paths.reports().join("web"), id).unwrap()
    }

    /// A crash loop: one archive, root's only, with the manifest, the LXC configuration and
    /// log, the log's newest 64 KiB, the group's counters, meminfo; the summary says what
    /// happened and what could not be gathered.
    #[test]
    fn a_crash_loop_is_archived_with_what_explains_it() {
        let (_dir, d, _m) = fake_daemon("reports-write", "");
        install(&d, MANIFEST);
        host_fixtures(&d);
        let id = write_event(&d, "web", &Report::CrashLoop { retries: 5 })
            .unwrap()
            .unwrap();
        let parsed = rp::parse_id(&id).unwrap();
        assert_eq!(
            (parsed.container.as_str(), parsed.reason),
            ("web", Reason::CrashLoop)
        );
        let s = summary_of_id(&d, &id);
        assert_eq!(
            s[field::DETAIL],
            "failed again after 5 restarts: not restarted again"
        );
        assert_eq!(s[field::VERSION], "1.0");
        assert_eq!(s[field::REASON], "crashloop");
        assert_eq!(s[field::KERNEL], "6.1.0-fixture");
        assert_eq!(
            (&s[field::EXIT], &s[field::CORE]),
            (&Value::Null, &Value::Null)
        );
        let notes: Vec<&str> = s[field::NOTES]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert_eq!(notes[0], "cgroup berth/web is gone (LXC removes it as the container ends): the group's counters only");
        assert!(
            notes[1].starts_with("kernel log not readable: "),
            "{notes:?}"
        );

        let path = archive(&d, &id);
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        let m = members(&path);
        let names: Vec<&str> = m
            .keys()
            .map(|k| k.strip_prefix(&format!("{id}/")).unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "cgroup.txt",
                "log.txt",
                "lxc.config",
                "lxc.log",
                "manifest.json",
                "meminfo.txt",
                "summary.json"
            ]
        );
        let log = std::fs::read(d.cfg.paths.saved_log("web")).unwrap();
        assert_eq!(m[&format!("{id}/log.txt")], log[log.len() - LOG_TAIL..]);
        assert_eq!(m[&format!("{id}/lxc.config")], b"lxc.uts.name = web\n");
        let group = d.cgroup_root().join("berth/memory.current");
        assert_eq!(
            String::from_utf8_lossy(&m[&format!("{id}/cgroup.txt")]),
            format!("== {}\n4096\n", group.display())
        );
        let listed: Value = serde_json::from_slice(&m[&format!("{id}/summary.json")]).unwrap();
        assert_eq!(listed[field::MEMBERS].as_array().unwrap().len(), 7);
        assert_eq!(ids(&list(&d, Some("web")).unwrap()), [id]);
    }

    /// A crash with a core: the newest core goes in, cut at the cap (said twice: in the core's
    /// description and a note), with the exit record; the cores are cleared for the next event.
    #[test]
    fn a_crash_archives_its_newest_core_cut_at_the_cap() {
        let extra = "[reports]\ncores = true\nmax_core_size = \"64K\"\n";
        let (_dir, d, _m) = fake_daemon("reports-core", extra);
        install(&d, MANIFEST);
        let cores = d.cfg.paths.cores().join("web");
        std::fs::create_dir_all(&cores).unwrap();
        let core: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(cores.join("1790000000-77-11.core"), &core).unwrap();
        std::fs::write(cores.join("1789999999-70-11.core"), b"older").unwrap();
        let exit = d.cfg.paths.exit_file("web");
        std::fs::create_dir_all(exit.parent().unwrap()).unwrap();
        std::fs::write(
            &exit,
            r#"{"code": null, "signal": 11, "core_dumped": true}"#,
        )
        .unwrap();
        let e = Exit {
            code: None,
            signal: Some(11),
        };
        let id = write_event(&d, "web", &Report::Failed(Some(e)))
            .unwrap()
            .unwrap();
        assert_eq!(rp::parse_id(&id).unwrap().reason, Reason::Signal);
        let s = summary_of_id(&d, &id);
        assert_eq!(s[field::DETAIL], "signal 11 (core dumped)");
        assert_eq!(s[field::EXIT]["signal"], 11);
        assert_eq!(
            s[field::CORE],
            json!({field::BYTES: 65536, field::TRUNCATED: true, "pid": 77, "signal": 11})
        );
        assert!(s[field::NOTES].as_array().unwrap().contains(&json!(
            "the core was cut at reports.max_core_size (65536 bytes)"
        )));
        let m = members(&archive(&d, &id));
        assert_eq!(m[&format!("{id}/core")], core[..65536]);
        assert!(m.contains_key(&format!("{id}/exit.json")));
        assert_eq!(std::fs::read_dir(&cores).unwrap().count(), 0, "cores left");
    }

    /// The policy without cores: none goes in, the summary says why.
    #[test]
    fn without_cores_in_the_policy_the_summary_says_so() {
        let (_dir, d, _m) = fake_daemon("reports-nocore", "");
        let cores = d.cfg.paths.cores().join("web");
        std::fs::create_dir_all(&cores).unwrap();
        std::fs::write(cores.join("1790000000-77-6.core"), b"core").unwrap();
        let e = Exit {
            code: None,
            signal: Some(6),
        };
        let id = write_event(&d, "web", &Report::Failed(Some(e)))
            .unwrap()
            .unwrap();
        let s = summary_of_id(&d, &id);
        assert_eq!(s[field::CORE], Value::Null);
        assert_eq!(s[field::VERSION], Value::Null, "not installed");
        let notes = s[field::NOTES].as_array().unwrap();
        assert!(notes.contains(&json!(
            "core files are not collected: [reports] cores = false"
        )));
        assert!(notes.contains(&json!("the package is no longer installed: no manifest")));
        assert!(!members(&archive(&d, &id)).contains_key(&format!("{id}/core")));
    }

    /// The end that follows the memory guard's kill of init is the guard's event, archived
    /// already: no second archive. A kill of another process is no such end.
    #[test]
    fn the_end_after_the_guard_killed_init_is_not_archived_twice() {
        let (_dir, d, _m) = fake_daemon("reports-guard", "");
        let now = berth_sys::process::now_s();
        let kill = |init: bool| json!({guard_kill::AT: now, guard_kill::INIT: init, "pid": 7});
        d.guard_kills
            .lock()
            .unwrap()
            .insert("web".into(), kill(true));
        let killed = Report::Failed(Some(Exit {
            code: None,
            signal: Some(libc::SIGKILL),
        }));
        assert_eq!(write_event(&d, "web", &killed).unwrap(), None);
        assert!(!d.cfg.paths.reports().join("web").exists());
        d.guard_kills
            .lock()
            .unwrap()
            .insert("web".into(), kill(false));
        let id = write_event(&d, "web", &killed).unwrap().unwrap();
        assert_eq!(summary_of_id(&d, &id)[field::DETAIL], "signal 9");
    }

    /// Reports written one after another within a second get `.N` ids, and the per-container
    /// cap keeps the newest.
    #[test]
    fn reports_written_at_once_get_their_own_ids_within_the_cap() {
        let (_dir, d, _m) = fake_daemon("reports-many", "[reports]\nmax_per_container = 2\n");
        let written: Vec<String> = (0..3)
            .map(|_| {
                write_event(&d, "web", &Report::Failed(None))
                    .unwrap()
                    .unwrap()
            })
            .collect();
        assert_eq!(ids(&list(&d, None).unwrap()), written[1..]);
        let s = summary_of_id(&d, &written[2]);
        assert_eq!(s[field::DETAIL], "the start failed");
    }

    /// An archive that cannot be put in place is lost alone: the error names it, and neither
    /// its temporary file nor its summary stays.
    #[test]
    fn an_archive_that_cannot_be_put_in_place_leaves_nothing() {
        let (_dir, d, _m) = fake_daemon("reports-fail", "");
        let dir = d.cfg.paths.reports().join("web");
        // Where the archive goes, a directory that is not empty (the rename fails, root or not).
        for ext in [rp::EXT_GZ, rp::EXT_TAR] {
            std::fs::create_dir_all(dir.join(format!("{WEB_EXIT}{ext}/x"))).unwrap();
        }
        let s = json!({field::AT: 1});
        let members = vec![Member::bytes("log.txt", "x")];
        let e =
            write_archive(&d.cfg.paths, &d.cfg.reports, "web", WEB_EXIT, s, members).unwrap_err();
        let text = format!("{e:#}");
        assert!(
            text.starts_with(&format!("cannot write {}", dir.join(WEB_EXIT).display())),
            "{text}"
        );
        let left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.') || n.ends_with(".json"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
