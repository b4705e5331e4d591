//! `berth start`: roots, /data, limits, network and security into an LXC configuration, then the shim.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_core::api::start as field;
use berth_core::plan::{self, ContainerPlan, HOST_BASE_DIRS};
use berth_core::state::{Installed, State};
use berth_core::supervise::Event;
use berth_sys::fsutil::write_volatile;
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::device::boot;
use crate::daemon::device::cgroups;
use crate::daemon::device::state;
use crate::daemon::prepare::limits;
use crate::daemon::prepare::net;
use crate::daemon::prepare::security;
use crate::daemon::runtime::bind;
use crate::daemon::runtime::data;
use crate::daemon::runtime::mounts;
use crate::daemon::runtime::probe;
use crate::daemon::runtime::sockets;
use crate::daemon::runtime::watch;

/// When each step of a start began, in CLOCK_REALTIME nanoseconds: the clock a payload
/// reads, so that `berth-bench activation --trace` lines the steps up with the payload's
/// first instruction. Kept only for a start that asks (`berth start --trace`).
pub(crate) struct Stamps(Vec<(String, u64)>);

impl Stamps {
    pub(crate) fn now() -> u64 {
        berth_sys::process::realtime_ns()
    }

    /// Begins with the step `received` (the request read whole), at `at`.
    pub(crate) fn from(at: u64) -> Stamps {
        Stamps(vec![("received".into(), at)])
    }

    fn mark(t: &mut Option<Stamps>, step: &str) {
        if let Some(s) = t {
            s.0.push((step.to_string(), Stamps::now()));
        }
    }

    /// Adds the `step=NS` words of the shim's report (the shim's and the monitor's steps),
    /// each in its place in time (the list stays in the order the steps began).
    fn add_words(t: &mut Option<Stamps>, words: &str) {
        if let Some(s) = t {
            for (k, v) in words.split_whitespace().filter_map(|w| w.split_once('=')) {
                if let Ok(ns) = v.parse::<u64>() {
                    let at = s.0.partition_point(|(_, t)| *t <= ns);
                    s.0.insert(at, (k.to_string(), ns));
                }
            }
        }
    }

    /// `[[step, ns], …]` (built by hand: serde's tuple and sort code cost the device build
    /// kilobytes).
    fn json(self) -> Value {
        Value::Array(
            self.0
                .into_iter()
                .map(|(s, ns)| Value::Array(vec![Value::String(s), Value::from(ns)]))
                .collect(),
        )
    }
}

/// A start, under the operation lock (`control.rs` is its one caller). `resumed`: a start
/// that is not the operator's (a scheduled job's, of a stopped container): the supervisor
/// keeps the container's record (restarts counted, a self-restart streak).
pub(crate) fn start_traced(
    d: &Arc<Daemon>,
    name: &str,
    trace: &mut Option<Stamps>,
    resumed: bool,
) -> Result<Value> {
    Stamps::mark(trace, "locked");
    let t_begin = Instant::now();
    // Every start comes here (the operator's, the supervisor's): none in safe mode.
    boot::refuse_in_safe_mode(d, &format!("start {name}"))?;
    let p = state::installed(d, name)?;
    refuse_if_running(d, name)?;
    security::check_start(d, &p)?;
    // A start that goes ahead: its grace period runs while it is prepared (warm_moves).
    let warm = cgroups::warm_moves(d);
    let st = state::state(d);
    // From the first mount on, a start that fails gives back what it mounted.
    let mut mounted = Mounted(d, true);
    Stamps::mark(trace, "checked");
    let root = prepare_root(d, &st, &p)?;
    prepare_data(d, &p)?;
    Stamps::mark(trace, "mounted");
    let (config, limits) = render_config(d, &st, &p, &root)?;
    write_config(d, name, &config, &root.layers)?;
    let cgroup = cgroups::prepare_budget(d, name, limits.as_ref())?;
    sockets::open(d, &p)?;
    Stamps::mark(trace, "configured");
    log::debug!("{name}: prepared in {:?}", t_begin.elapsed());
    let (pid, elapsed) = spawn_shim(d, &p, cgroup, trace)?;
    drop(warm);
    mounted.1 = false;
    set_autostart(d, name, true)?;
    boot::note_running(d, name);
    d.notify(
        name,
        match resumed {
            true => Event::Resumed(pid),
            false => Event::Started(pid),
        },
    );
    watch::watch(d, name, pid, true);
    log::info!(
        "started {name} (init pid {pid}) in {} ms",
        elapsed.as_millis()
    );
    let mut v = json!({
        field::NAME: name,
        field::INIT_PID: pid,
        field::START_MS: elapsed.as_secs_f64() * 1000.0,
    });
    if let Some(t) = trace.take() {
        v[field::TRACE] = t.json();
    }
    Ok(v)
}

/// Runs `argv` once in `name`'s container, prepared as for a start (root, /data, limits,
/// network, security), outside the supervisor (no events, no watcher, no autostart mark),
/// and waits for its end, at most `limit` (then its init is killed, and with it everything
/// in the container). Returns how it ended. For `berth upgrade`'s migration command. Under
/// the op lock.
pub(crate) fn run_once(
    d: &Arc<Daemon>,
    name: &str,
    argv: Vec<String>,
    limit: Duration,
) -> Result<berth_core::supervise::Exit> {
    boot::refuse_in_safe_mode(d, &format!("run {name}"))?;
    let mut p = state::installed(d, name)?;
    refuse_if_running(d, name)?;
    security::check_start(d, &p)?;
    let st = state::state(d);
    let _mounted = Mounted(d, true);
    let root = prepare_root(d, &st, &p)?;
    prepare_data(d, &p)?;
    let (config, limits) = render_config(d, &st, &p, &root)?;
    write_config(d, name, &config, &root.layers)?;
    let cgroup = cgroups::prepare_budget(d, name, limits.as_ref())?;
    sockets::open(d, &p)?;
    let _ = std::fs::remove_file(d.cfg.paths.exit_file(name));
    p.manifest.entrypoint.argv = argv;
    let since = berth_sys::process::now_s();
    let (init, _) = spawn_shim(d, &p, cgroup, &mut None)?;
    let ended = wait_run(d, name, limit, since);
    if !ended {
        log::warn!(
            "{name}: the run of {:?} did not end within {} s; killing it",
            p.manifest.entrypoint.argv,
            limit.as_secs()
        );
        let _ = d.host.signals.kill(init, libc::SIGKILL);
        let _ = probe::wait_monitor_gone(d, name, Duration::from_secs(10));
    }
    // The shim writes the exit record as it goes.
    let deadline = Instant::now() + Duration::from_secs(2);
    while d.cfg.paths.shim_socket(name).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let exit = probe::exit_of(d, name);
    cgroups::remove_stale_cgroups(d, name);
    Ok(if ended {
        exit
    } else {
        berth_core::supervise::Exit {
            code: None,
            signal: Some(libc::SIGKILL),
        }
    })
}

/// Waits, at most `limit`, for the end of a run made by [`run_once`]: whether it ended. The
/// shim writes the run's exit record before it answers its waiters and goes, so a run that
/// ended before the wait was asked for (a migration of a few milliseconds, its shim gone, or
/// going: its socket still taking connections nobody answers) is found by its record, never
/// taken for one that hangs. Only a record of this run counts (it started at `since`, in
/// seconds since the epoch, or later): a late one of the run before (its shim answering an
/// upgrade's stop after the stop stopped waiting) is not this run's end. A shim that is gone
/// without a record (it crashed) ends the wait 2 s later, not at the limit.
fn wait_run(d: &Daemon, name: &str, limit: Duration, since: u64) -> bool {
    use berth_core::api::exit::STARTED_AT;
    let deadline = Instant::now() + limit;
    let (socket, exit_file) = (d.cfg.paths.shim_socket(name), d.cfg.paths.exit_file(name));
    let ended = || {
        std::fs::read(&exit_file)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|v| {
                // (a clock set back since the start cannot date the record: it is this
                // run's, the file having been removed before the run began)
                v[STARTED_AT]
                    .as_u64()
                    .is_none_or(|t| t >= since || berth_sys::process::now_s() < since)
            })
    };
    let mut gone_since: Option<Instant> = None;
    loop {
        if ended() {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        match crate::shim::request(&socket, "wait") {
            Ok(mut s) => {
                gone_since = None;
                let _ = s.set_read_timeout(Some(left.min(Duration::from_millis(500))));
                let mut line = String::new();
                let _ = s.read_to_string(&mut line);
                if !line.is_empty() {
                    return true;
                }
            }
            Err(_) => {
                let gone = *gone_since.get_or_insert_with(Instant::now);
                if !socket.exists() && gone.elapsed() > Duration::from_secs(2) {
                    return ended();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The one clean-up of a start cut short: while armed, dropping it releases every mount
/// that no running container uses (this start's image, merged root and /data bind).
struct Mounted<'a>(&'a Daemon, bool);

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        if self.1 {
            mounts::release_mounts(self.0);
        }
    }
}

fn refuse_if_running(d: &Daemon, name: &str) -> Result<()> {
    if !probe::is_running(d, name) {
        return Ok(());
    }
    // A monitor whose shim was killed outlives its container by a moment (LXC's teardown):
    // that container is stopping, not running.
    let init = probe::running_init(d, name);
    if init.is_none() && probe::wait_monitor_gone(d, name, Duration::from_secs(10)) {
        return Ok(());
    }
    Err(Error::new(
        Kind::AlreadyRunning,
        match init {
            Some(pid) => format!("{name} is already running (init pid {pid})"),
            None => format!("{name} is still stopping (its LXC monitor has not exited)"),
        },
    ))
}

/// The container's root: its image, or a read-only overlay merging its layers.
struct Root {
    rootfs: PathBuf,
    /// The images (sha256s) it is made of, top first.
    layers: Vec<String>,
}

fn prepare_root(d: &Daemon, st: &State, p: &Installed) -> Result<Root> {
    let name = p.name.as_str();
    let layers = mounts::layers(st, p)?;
    let mut lowers = Vec::new();
    for sha in &layers {
        lowers.push(mounts::ensure_image_mounted(d, sha)?);
    }
    if lowers.len() == 1 {
        let rootfs = lowers.remove(0);
        return Ok(Root { rootfs, layers });
    }
    let rootfs = d.cfg.paths.rootfs(name);
    let _ = d.host.mounts.umount(&rootfs, true);
    std::fs::create_dir_all(&rootfs).map_err(Error::internal)?;
    let refs: Vec<&Path> = lowers.iter().map(PathBuf::as_path).collect();
    d.host
        .mounts
        .mount_overlay_ro(&refs, &rootfs)
        .map_err(|e| Error::new(Kind::MountFailed, format!("{name}: merged root: {e}")))?;
    Ok(Root { rootfs, layers })
}

/// /data: made on the first start (the payload's user owns it), shifted into the
/// container's id range, and bound where LXC binds it from; with `containers.data_size`, an
/// image mounted there instead (`data`).
fn prepare_data(d: &Daemon, p: &Installed) -> Result<()> {
    let name = p.name.as_str();
    let data = d.cfg.paths.data(name);
    let image = d.cfg.paths.data_image(name);
    let image_len = std::fs::metadata(&image).ok().map(|m| m.len());
    let cap = d.cfg.data_size;
    let how = data::plan(name, &image, cap, image_len, data.is_dir())
        .map_err(|m| Error::new(Kind::Refused, m))?;
    // With a cap the plan is never `Dir`.
    if let Some(cap) = cap {
        return data::mount_image(d, p, cap, how);
    }
    if !data.exists() {
        std::fs::create_dir_all(&data).map_err(|e| {
            crate::daemon::device::state::write_failed(d, &data, e, "it did not start")
        })?;
        std::fs::set_permissions(&data, std::os::unix::fs::PermissionsExt::from_mode(0o750))
            .map_err(Error::internal)?;
        let e = &p.manifest.entrypoint;
        std::os::unix::fs::chown(&data, Some(e.user), Some(e.group)).map_err(Error::internal)?;
    }
    security::own_data(d, p, &data)?;
    let data_mnt = d.cfg.paths.data_mount(name);
    if !mounts::is_mounted(d, &data_mnt) {
        std::fs::create_dir_all(&data_mnt).map_err(Error::internal)?;
        d.host
            .mounts
            .bind(&data, &data_mnt, false)
            .map_err(|e| Error::new(Kind::MountFailed, format!("{name}: /data: {e}")))?;
    }
    Ok(())
}

/// The LXC configuration: the container plan (root, host base, limits), then the
/// security lines, the network keys and the bindings (with the bind anchor made); and the
/// container's limits, for its budget.
fn render_config(
    d: &Daemon,
    st: &State,
    p: &Installed,
    root: &Root,
) -> Result<(String, Option<berth_core::cgroup::Limits>)> {
    // Bind what the host has and the image has a mount point for (the root is read-only:
    // LXC cannot create one). A host without /lib64 simply has nothing to bind there.
    let host_base_dirs: Vec<PathBuf> = HOST_BASE_DIRS
        .iter()
        .map(PathBuf::from)
        .filter(|h| {
            h.is_dir()
                && std::fs::symlink_metadata(plan::host_base_target(&root.rootfs, h))
                    .is_ok_and(|m| m.is_dir())
        })
        .collect();
    let limits = limits::start_limits(d, p)?;
    let cg_version = limits.as_ref().map(|(v, _)| *v);
    let net_keys = net::prepare(d, p, st, &root.rootfs)?;
    let mut text = plan::lxc_config(&ContainerPlan {
        manifest: &p.manifest,
        trusted: p.trusted,
        config: &d.cfg,
        rootfs: root.rootfs.clone(),
        host_base_dirs,
        limits: limits.clone(),
    })
    .map_err(|e| Error::new(Kind::Refused, e.to_string()))?;
    text.push_str(&security::lxc_lines(d, p, cg_version)?);
    text.push_str(&net_keys);
    text.push_str(&bind::prepare(d, st, p, &root.rootfs)?);
    Ok((text, limits.map(|(_, l)| l)))
}

/// Writes `<lxcpath>/NAME/config` and the layers the run is made of; a killed monitor's
/// cgroups go first (LXC refuses to start over them).
fn write_config(d: &Daemon, name: &str, config: &str, layers: &[String]) -> Result<()> {
    let dir = d.cfg.paths.lxc_dir(name);
    std::fs::create_dir_all(&dir).map_err(Error::internal)?;
    berth_sys::fsutil::remove_atomic_leftovers(&dir);
    // Its configuration, seccomp profile and LXC's log are root's alone.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .map_err(Error::internal)?;
    write_volatile(&dir.join("config"), config.as_bytes(), 0o640).map_err(Error::internal)?;
    // The images this run is made of: an upgrade of a dependency while it runs changes the
    // state, not the layers under its root; mounts and gc keep these until it stops.
    write_volatile(&dir.join("layers"), layers.join("\n").as_bytes(), 0o600)
        .map_err(Error::internal)?;
    cgroups::remove_stale_cgroups(d, name);
    Ok(())
}

/// Starts the shim, which enters the container's budget (`cgroup`: its leaf for berth's
/// processes) first, and waits for its one line: `ok PID` (the init pid; traced, then the
/// shim's steps as `step=NS` words) or `error: …`. Returns the init pid and how long the
/// start took.
fn spawn_shim(
    d: &Daemon,
    p: &Installed,
    cgroup: Option<String>,
    trace: &mut Option<Stamps>,
) -> Result<(i32, Duration)> {
    let name = p.name.as_str();
    let paths = &d.cfg.paths;
    let args = crate::shim::ShimArgs {
        name: name.to_string(),
        lxcpath: paths.lxcpath.clone(),
        socket: paths.shim_socket(name),
        ring_bytes: d.cfg.log_ring_bytes,
        saved_log: paths.saved_log(name),
        exit_file: paths.exit_file(name),
        start_timeout: Duration::from_secs(d.cfg.start_timeout_s as u64),
        argv: p.manifest.entrypoint.argv.clone(),
    };
    // The shim's own complaints (not the payload's output) go next to LXC's log.
    let shim_log = File::options()
        .create(true)
        .append(true)
        .open(paths.lxc_dir(name).join("shim.log"))
        .map_err(Error::internal)?;
    let trace_file = paths.lxc_dir(name).join(crate::shim::TRACE_FILE);
    let _ = std::fs::remove_file(&trace_file);
    let t0 = Instant::now();
    let path = security::shim_path();
    let env = [
        ("PATH", Some(path.as_str())),
        (crate::shim::TRACE_ENV, trace.is_some().then_some("1")),
        (crate::shim::CGROUP_ENV, cgroup.as_deref()),
    ];
    Stamps::mark(trace, "spawn");
    let mut child = d
        .host
        .processes
        .spawn(
            &d.exe,
            &args.to_args(),
            &env,
            Stdio::piped(),
            shim_log.into(),
        )
        .map_err(|e| Error::internal(format!("spawn shim for {name}: {e}")))?;
    // The shim has its own start timeout; this one guards against a shim wedged in liblxc,
    // which would otherwise hold the operation lock for ever.
    let limit = args.start_timeout + Duration::from_secs(5);
    let out = match child.stdout.take() {
        Some(s) => first_line(s, limit).unwrap_or_else(|| {
            format!(
                "error: {name}: the shim did not report within {} s",
                limit.as_secs()
            )
        }),
        None => String::new(),
    };
    let _ = child.wait();
    let elapsed = t0.elapsed();
    Stamps::mark(trace, "reported");
    let Some(ok) = out.strip_prefix("ok ") else {
        let msg = out.strip_prefix("error: ").unwrap_or(&out).to_string();
        return Err(Error::new(
            Kind::StartFailed,
            if msg.is_empty() {
                format!("{name}: the shim died before reporting")
            } else {
                msg
            },
        ));
    };
    let (pid, words) = ok.split_once(' ').unwrap_or((ok, ""));
    Stamps::add_words(trace, words);
    if trace.is_some() {
        // The monitor's steps: it cannot write to the daemon's pipe (it closes every fd).
        Stamps::add_words(
            trace,
            &std::fs::read_to_string(&trace_file).unwrap_or_default(),
        );
        let _ = std::fs::remove_file(&trace_file);
    }
    Ok((pid.trim().parse().unwrap_or(0), elapsed))
}

/// The first line the shim writes (without its newline), or None if none came within
/// `limit`. Reading to EOF would wait for the shim's exit.
fn first_line(mut s: std::process::ChildStdout, limit: Duration) -> Option<String> {
    use std::os::fd::AsRawFd;
    let deadline = Instant::now() + limit;
    let mut out = String::new();
    let mut b = [0u8; 1];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ready = berth_sys::process::poll(
            &[(s.as_raw_fd(), berth_sys::process::POLLIN)],
            left.as_millis().min(i32::MAX as u128) as i32,
        );
        if !matches!(ready, Ok(ref r) if r[0] != 0) {
            if left.is_zero() {
                return None;
            }
            continue;
        }
        if s.read(&mut b).unwrap_or(0) != 1 || b[0] == b'\n' {
            return Some(out);
        }
        out.push(b[0] as char);
    }
}

/// Records the operator's last start or stop of a container (an empty marker file): what
/// the daemon starts again after a reboot. Not fsynced: it is a preference, and it must not
/// cost a flash flush on every start and stop; a power cut in the next few seconds at worst
/// forgets the last change.
pub(crate) fn set_autostart(d: &Daemon, name: &str, on: bool) -> Result<()> {
    let marker = d.cfg.paths.autostart(name);
    if on {
        if let Some(dir) = marker.parent() {
            std::fs::create_dir_all(dir).map_err(Error::internal)?;
        }
        File::create(&marker)
            .map(drop)
            .map_err(|e| Error::internal(format!("{}: {e}", marker.display())))
    } else {
        match std::fs::remove_file(&marker) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::internal(format!("{}: {e}", marker.display())))
            }
            _ => Ok(()),
        }
    }
}

/// After an operator's start (`berth start`, `berth restart`): up to `[containers]
/// start_settle` for a payload that fails at once (a missing interpreter, a configuration it
/// refuses): an end other than exit 0 in that time is the start's error, with how it ended and the last lines it wrote,
/// so that the package's author reads "perl: not found" rather than a bare exit status. Not
/// under the op lock: the daemon goes on meanwhile; the supervisor's own starts never wait.
pub(crate) fn settled(d: &Daemon, name: &str, started: Value) -> Result<Value> {
    let window = Duration::from_millis(d.cfg.start_settle_ms);
    let exit = d.cfg.paths.exit_file(name);
    let t0 = Instant::now();
    while t0.elapsed() < window {
        // The shim writes its saved log, then the exit record, when the container ends. A
        // payload that did its work and exited 0 started well (a one-shot package).
        if exit.exists() {
            if probe::exit_of(d, name).failed() {
                return Err(ended_at_once(d, name, t0.elapsed()));
            }
            return Ok(started);
        }
        std::thread::sleep(Duration::from_millis(5).min(window.saturating_sub(t0.elapsed())));
    }
    Ok(started)
}

/// The lines of a payload's end shown at most, and the longest shown whole.
const LAST_LINES: usize = 5;
const LINE_MAX: usize = 200;

fn ended_at_once(d: &Daemon, name: &str, after: Duration) -> Error {
    let e = probe::exit_of(d, name);
    let how = match (e.code, e.signal) {
        (_, Some(s)) => format!("killed by signal {s}"),
        (Some(c), None) => format!("exited with {c}"),
        (None, None) => "ended".into(),
    };
    let log = std::fs::read(d.cfg.paths.saved_log(name)).unwrap_or_default();
    let text = String::from_utf8_lossy(&log);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    // A container's output is hostile input for the operator's terminal: escaped.
    let shown: Vec<String> = lines[lines.len().saturating_sub(LAST_LINES)..]
        .iter()
        .map(|l| {
            let mut s: String = l
                .chars()
                .flat_map(|c| match c.is_control() && c != '\t' {
                    true => c.escape_default().collect::<Vec<_>>(),
                    false => vec![c],
                })
                .take(LINE_MAX)
                .collect();
            if l.chars().count() > LINE_MAX {
                s.push('…');
            }
            format!("  {s}")
        })
        .collect();
    let output = match shown.is_empty() {
        true => "; it wrote nothing".to_string(),
        false => format!("; its last output:\n{}", shown.join("\n")),
    };
    Error::new(
        Kind::StartFailed,
        format!(
            "{name} started, then {how} {} ms later{output}\n(berth logs {name}; [containers] start_settle)",
            after.as_millis()
        ),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::daemon::base::testing::{fake_daemon, fakes, install, MANIFEST};
    use crate::daemon::runtime::control::{self, Intent, Who};
    use std::os::unix::fs::PermissionsExt;

    /// A kernel with user namespaces, as the daemon's /proc says.
    fn user_namespaces(d: &Daemon) {
        let proc = d.proc().to_path_buf();
        std::fs::create_dir_all(proc.join("self/ns")).unwrap();
        std::fs::write(proc.join("self/ns/user"), "").unwrap();
        std::fs::create_dir_all(proc.join("sys/user")).unwrap();
        std::fs::write(proc.join("sys/user/max_user_namespaces"), "1000\n").unwrap();
    }

    /// A daemon whose shim is a script printing `line` (what liblxc's start made of it).
    fn with_shim(
        tag: &str,
        line: &str,
    ) -> (
        berth_testkit::TempDir,
        Arc<Daemon>,
        &'static berth_testkit::fake_host::FakeMounts,
    ) {
        let (dir, d, m) = fake_daemon(tag, "[containers]\nstart_settle = \"0s\"\n");
        user_namespaces(&d);
        let shim = dir.path("shim");
        std::fs::write(&shim, format!("#!/bin/sh\necho '{line}'\n")).unwrap();
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
        fakes(&d).processes.answer("__shim", &shim);
        (dir, Arc::new(d), m)
    }

    /// `manifest` (its `[entrypoint]` last) run as the test's own user and group: the start
    /// gives /data to the payload's user, which needs no privilege then.
    fn as_me(manifest: &str) -> String {
        use std::os::unix::fs::MetadataExt;
        let me = std::fs::metadata("/proc/self").unwrap();
        format!("{manifest}user = {}\ngroup = {}\n", me.uid(), me.gid())
    }

    /// `manifest` installed as the repository's trusted package: it runs privileged, no id
    /// map, so nothing is shifted into a range only root may give files to.
    fn install_trusted(d: &Daemon, manifest: &str) -> Installed {
        let mut p = install(d, &as_me(manifest));
        p.trusted = true;
        let mut st = d.state.lock().unwrap();
        st.packages.insert(p.name.to_string(), p.clone());
        p
    }

    /// Two layers (the package merged over a dependency), so that the start merges them with
    /// an overlay.
    fn two_layers(d: &Daemon) {
        let base =
            "[package]\nname = \"base\"\nversion = \"1\"\n[entrypoint]\nargv = [\"/bin/sh\"]\n";
        let mut b = install(d, base);
        b.sha256 = "0b".repeat(32);
        let merged = MANIFEST.replace(
            "version = \"1.0\"\n",
            "version = \"1.0\"\nrootfs = \"merged\"\ndepends = [\"base\"]\n",
        );
        let mut p = install_trusted(d, &merged);
        p.depends = vec![berth_core::name::Name::parse("base").unwrap()];
        let mut st = d.state.lock().unwrap();
        st.packages.insert("base".into(), b);
        st.packages.insert("web".into(), p);
    }

    /// A daemon, `web` installed, whose shim is a stand-in that reports the start, writes
    /// `record` as the run's exit record ($7) and is gone.
    pub(crate) fn with_ended_shim(
        tag: &str,
        record: &str,
    ) -> (berth_testkit::TempDir, Arc<Daemon>) {
        let (dir, d, _m) = fake_daemon(tag, "[containers]\nstart_settle = \"0s\"\n");
        user_namespaces(&d);
        let shim = dir.path("shim");
        std::fs::write(
            &shim,
            format!("#!/bin/sh\necho \"ok $$\"\nprintf '{record}' > \"$7\"\n"),
        )
        .unwrap();
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
        fakes(&d).processes.answer("__shim", &shim);
        // As the daemon makes it at its start.
        std::fs::create_dir_all(d.cfg.paths.run.join("logs")).unwrap();
        let d = Arc::new(d);
        install_trusted(&d, MANIFEST);
        (dir, d)
    }

    /// A run for an upgrade's migration that ends before the daemon asks to wait for it (its
    /// shim already gone) is found by its exit record: its code, not a kill after the limit.
    #[test]
    fn a_run_that_ends_before_its_wait_is_found_by_its_exit_record() {
        let record = r#"{"code": 3, "signal": null}"#;
        let (_dir, d) = with_ended_shim("run-once-fast", record);
        let t0 = Instant::now();
        let exit = run_once(&d, "web", vec!["/migrate".into()], Duration::from_secs(6)).unwrap();
        assert_eq!((exit.code, exit.signal), (Some(3), None));
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "waited {:?}",
            t0.elapsed()
        );
    }

    /// A late exit record of the run before (its started_at before this run's) is not this
    /// run's end; a shim gone without a record (crashed) ends the wait after 2 s, not at the
    /// limit, and the run counts as killed.
    #[test]
    fn a_stale_record_is_not_the_runs_end_and_a_crashed_shim_ends_the_wait_early() {
        let record = r#"{"code": 0, "started_at": 1000}"#;
        let (_dir, d) = with_ended_shim("run-once-stale", record);
        let t0 = Instant::now();
        let exit = run_once(&d, "web", vec!["/migrate".into()], Duration::from_secs(20)).unwrap();
        assert_eq!((exit.code, exit.signal), (None, Some(libc::SIGKILL)));
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_secs(15),
            "{took:?}"
        );
    }

    /// liblxc says no (the shim reports an error): the start fails with its words, and what
    /// the start mounted for it (merged root, /data) is given back; the container is not
    /// marked to start at boot.
    #[test]
    fn a_start_liblxc_refuses_gives_back_what_it_mounted() {
        let (_dir, d, m) = with_shim(
            "start-refused",
            "error: web: liblxc could not start the container",
        );
        two_layers(&d);
        let e = control::act(&d, "web", Intent::Start, Who::Operator, None).unwrap_err();
        assert_eq!(e.kind, Kind::StartFailed);
        assert_eq!(e.message, "web: liblxc could not start the container");
        let calls = m.calls();
        assert!(
            calls.iter().any(|c| c.starts_with("mount_overlay_ro")),
            "{calls:?}"
        );
        // Only the two images stay mounted (their pages stay cached for the next start).
        let mut left = m.mounted();
        left.sort();
        let mut images = vec![
            d.cfg.paths.image_mount(&"0b".repeat(32)),
            d.cfg.paths.image_mount(&"ab".repeat(32)),
        ];
        images.sort();
        assert_eq!(left, images, "{calls:?}");
        taken_off(&calls, &images);
        assert!(!d.cfg.paths.autostart("web").exists());
    }

    /// Every mount the calls made, the images excepted, was unmounted after it was made.
    fn taken_off(calls: &[String], images: &[PathBuf]) {
        let images: Vec<String> = images.iter().map(|p| p.display().to_string()).collect();
        let mut made = 0;
        for (i, c) in calls.iter().enumerate() {
            let w: Vec<&str> = c.split(' ').collect();
            let target = match w[0] {
                "mount_overlay_ro" | "mount_squashfs" | "mount_ext4" => w[w.len() - 1],
                "bind" => w[2],
                "bind_shared" => w[1],
                _ => continue,
            };
            if images.iter().any(|m| m == target) {
                continue;
            }
            made += 1;
            let off = format!("umount {target} ");
            assert!(
                calls[i..].iter().any(|c| c.starts_with(&off)),
                "{target} left mounted: {calls:?}"
            );
        }
        assert!(made >= 2, "/data and the bind anchor at least: {calls:?}");
    }

    /// The shim cannot be started (the kernel refuses the fork): the start fails saying so,
    /// everything it mounted but the image is taken off again, and nothing is marked.
    #[test]
    fn a_shim_that_cannot_be_spawned_fails_the_start_and_gives_back_its_mounts() {
        let (_dir, d, m) = with_shim("start-spawn", "ok 1");
        two_layers(&d);
        fakes(&d).processes.fail_next("__shim", libc::EAGAIN);
        let e = control::act(&d, "web", Intent::Start, Who::Operator, None).unwrap_err();
        assert_eq!(e.kind, Kind::Internal);
        assert!(
            e.message.starts_with("spawn shim for web: "),
            "{}",
            e.message
        );
        let mut images = vec![
            d.cfg.paths.image_mount(&"0b".repeat(32)),
            d.cfg.paths.image_mount(&"ab".repeat(32)),
        ];
        images.sort();
        let mut left = m.mounted();
        left.sort();
        assert_eq!(left, images);
        taken_off(&m.calls(), &images);
        assert!(!d.cfg.paths.autostart("web").exists());
        assert_eq!(fakes(&d).processes.calls().len(), 1);
    }

    /// The container's cgroup cannot be set up (the kernel refuses a write to its budget):
    /// the start fails naming it, before any shim, and gives back what it mounted.
    #[test]
    fn a_refused_cgroup_write_stops_the_start_before_the_shim() {
        let (dir, mut d, m) = fake_daemon("start-cgroup", "[containers]\nstart_settle = \"0s\"\n");
        crate::daemon::runtime::probe::tests::cgroup_fixture(&mut d, "web");
        d.resources.host.mem_total = 1 << 30;
        let shim = dir.path("shim");
        std::fs::write(&shim, "#!/bin/sh\necho 'ok 1'\n").unwrap();
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
        fakes(&d).processes.answer("__shim", &shim);
        // A file the kernel will not let be written: here a directory in its place.
        let budget = d.cgroup_root().join(&d.cfg.cgroup_parent).join("web");
        std::fs::create_dir_all(budget.join("memory.max")).unwrap();
        let d = Arc::new(d);
        install_trusted(
            &d,
            &MANIFEST.replace(
                "[entrypoint]",
                "[resources]\nmemory = \"32M\"\n[entrypoint]",
            ),
        );
        let e = control::act(&d, "web", Intent::Start, Who::Operator, None).unwrap_err();
        assert_eq!(e.kind, Kind::LimitFailed, "{}", e.message);
        assert!(
            e.message.starts_with("web: cannot set up its cgroup "),
            "{}",
            e.message
        );
        assert!(fakes(&d).processes.calls().is_empty(), "no shim");
        let images = [d.cfg.paths.image_mount(&"ab".repeat(32))];
        assert_eq!(m.mounted(), images);
        taken_off(&m.calls(), &images);
    }

    /// A start liblxc accepts: the shim is run with the container's arguments and the
    /// shim's PATH, its init pid is the start's answer and the supervisor's `Started`; the
    /// container's mounts stay, its LXC configuration is written and it is marked to start
    /// at boot.
    #[test]
    fn a_start_runs_the_shim_and_keeps_what_it_mounted() {
        let (_dir, d, m) = with_shim("start-ok", "ok 4242");
        two_layers(&d);
        let v = control::act(&d, "web", Intent::Start, Who::Operator, None).unwrap();
        assert_eq!(v[field::INIT_PID], 4242);
        assert_eq!(v[field::NAME], "web");
        let spawned = fakes(&d).processes.calls();
        assert_eq!(spawned.len(), 1);
        assert!(spawned[0].starts_with("__shim web "), "{spawned:?}");
        assert!(spawned[0].contains(" PATH="), "{spawned:?}");
        let ev = d.next_event(Some(Instant::now() + Duration::from_secs(10)));
        assert_eq!(ev, Some(("web".to_string(), Event::Started(4242))));
        let config = std::fs::read_to_string(d.cfg.paths.lxc_dir("web").join("config")).unwrap();
        assert!(config.contains(&d.cfg.paths.rootfs("web").display().to_string()));
        let mounted = m.mounted();
        for kept in [d.cfg.paths.rootfs("web"), d.cfg.paths.data_mount("web")] {
            assert!(mounted.contains(&kept), "{kept:?}: {mounted:?}");
        }
        assert!(d.cfg.paths.autostart("web").exists());
    }

    /// The merged root cannot be mounted: the start fails naming it, before any shim, and
    /// nothing but the images stays mounted.
    #[test]
    fn a_refused_merged_root_stops_the_start_before_the_shim() {
        let (dir, d, m) = with_shim("start-overlay", "ok 1");
        two_layers(&d);
        m.fail_next("mount_overlay_ro", libc::ENODEV);
        let e = control::act(&d, "web", Intent::Start, Who::Operator, None).unwrap_err();
        assert_eq!(e.kind, Kind::MountFailed);
        assert!(e.message.starts_with("web: merged root: "), "{}", e.message);
        assert!(
            !d.cfg.paths.lxc_dir("web").join("config").exists(),
            "configured anyway"
        );
        assert_eq!(m.mounted().len(), 2, "{:?}", m.mounted());
        drop(dir);
    }
}
