//! The shim: one small process per running container, started by the daemon as a re-exec of
//! `berth` (DESIGN.md decision 2: liblxc's start must not run inside the daemon).
//!
//! ```text
//! berth daemon ──spawn──▶ berth-shim (setsid; owns the log ring and shim/<name>.sock)
//!                            └─fork──▶ LXC monitor: liblxc start(), execute mode, foreground
//!                                          └─ init.lxc ─▶ payload (stdout+stderr = shim's pipe)
//! ```
//! The shim outlives the daemon: a restarted daemon finds the container through LXC and its
//! log ring and exit status through the shim's socket. When the container ends, the shim saves
//! the ring and the exit status under `/run/berth/logs/` (tmpfs) and exits.
//!
//! Socket protocol (root only, one line in, then data until close):
//! `logs` → the ring; `follow` → the ring, then new output until the container ends;
//! `wait` → blocks until the container ends, then `exit CODE` or `signal N`;
//! `info` → `{"monitor_pid":…,"init_pid":…,"started_at":…,"log_bytes":…}`.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use berth_sys::lxc::Container;
use berth_sys::process::{self, ExitStatus, Fork, POLLHUP, POLLIN, POLLRDHUP};

/// Set (to 1) by the daemon for a traced start (`berth start --trace`): the shim reports
/// when its steps began after its `ok PID`, as `step=NS` words, and the monitor writes its
/// own into [`TRACE_FILE`] in the container's LXC directory.
pub const TRACE_ENV: &str = "BERTH_START_TRACE";
pub const TRACE_FILE: &str = "trace";

/// Set by the daemon for the shim and the helpers it starts for a container: the cgroup
/// (relative, as `berth/web/berth`) of the container's leaf for berth's processes, which
/// they enter as their first act (docs/resources.md, "A container's cgroups").
pub const CGROUP_ENV: &str = "BERTH_CGROUP";

/// The controllers of a container's budget, which berth's processes for it enter.
pub const BUDGET_CONTROLLERS: [&str; 4] = ["cpu", "cpuacct", "memory", "pids"];

/// Enters the cgroup [`CGROUP_ENV`] names, if it is set: before it forks, so that the
/// process and all it starts are the container's (cost included).
pub fn enter_cgroups() -> std::result::Result<(), String> {
    let Ok(rel) = std::env::var(CGROUP_ENV) else {
        return Ok(());
    };
    berth_sys::cgroupfs::Cgroups::detect(std::path::Path::new("/proc"))
        .and_then(|c| c.enter(&rel, &BUDGET_CONTROLLERS))
        .map_err(|e| format!("cannot enter the container's cgroup {rel}: {e}"))
}

/// The steps of a traced start, as the shim and the monitor see them.
#[derive(Default)]
struct Trace {
    on: bool,
    words: String,
}

impl Trace {
    fn mark(&mut self, step: &str) {
        if self.on {
            self.words
                .push_str(&format!(" {step}={}", berth_sys::process::realtime_ns()));
        }
    }
}

pub struct ShimArgs {
    pub name: String,
    pub lxcpath: PathBuf,
    pub socket: PathBuf,
    pub ring_bytes: usize,
    pub saved_log: PathBuf,
    pub exit_file: PathBuf,
    pub start_timeout: Duration,
    pub argv: Vec<String>,
}

impl ShimArgs {
    /// The command line the daemon uses to start a shim (after `berth`).
    pub fn to_args(&self) -> Vec<String> {
        let mut v = vec![
            "__shim".to_string(),
            self.name.clone(),
            self.lxcpath.display().to_string(),
            self.socket.display().to_string(),
            self.ring_bytes.to_string(),
            self.saved_log.display().to_string(),
            self.exit_file.display().to_string(),
            self.start_timeout.as_millis().to_string(),
            "--".to_string(),
        ];
        v.extend(self.argv.iter().cloned());
        v
    }

    pub fn from_args(args: &[String]) -> Result<ShimArgs> {
        if args.len() < 9 || args[7] != "--" {
            bail!("usage: berth __shim NAME LXCPATH SOCKET RING SAVED_LOG EXIT_FILE TIMEOUT_MS -- ARGV…");
        }
        Ok(ShimArgs {
            name: args[0].clone(),
            lxcpath: args[1].clone().into(),
            socket: args[2].clone().into(),
            ring_bytes: args[3].parse().context("ring size")?,
            saved_log: args[4].clone().into(),
            exit_file: args[5].clone().into(),
            start_timeout: Duration::from_millis(args[6].parse().context("timeout")?),
            argv: args[8..].to_vec(),
        })
    }
}

/// A byte ring: keeps the newest `cap` bytes.
pub struct Ring {
    buf: VecDeque<u8>,
    cap: usize,
    total: u64,
}

impl Ring {
    pub fn new(cap: usize) -> Ring {
        Ring {
            buf: VecDeque::new(),
            cap,
            total: 0,
        }
    }
    pub fn push(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        let data = &data[data.len().saturating_sub(self.cap)..];
        let overflow = (self.buf.len() + data.len()).saturating_sub(self.cap);
        self.buf.drain(..overflow);
        self.buf.extend(data);
    }
    pub fn contents(&self) -> Vec<u8> {
        let (a, b) = self.buf.as_slices();
        [a, b].concat()
    }
    pub fn total(&self) -> u64 {
        self.total
    }
}

/// Entry point of `berth __shim …`. Stdout is the daemon's pipe: one line `ok INIT_PID` or
/// `error: …`, then it is closed.
pub fn run(args: ShimArgs) -> Result<()> {
    let mut trace = Trace {
        on: std::env::var_os(TRACE_ENV).is_some(),
        ..Trace::default()
    };
    trace.mark("shim");
    // Detach: the daemon reaps this first process at once; the shim proper is re-parented
    // (to init or a subreaper) and outlives the daemon.
    // The parent only exits.
    if let Fork::Parent(_) = process::fork()? {
        process::exit_now(0);
    }
    process::setsid().ok();
    process::set_process_name("berth-shim");
    let mut report = std::fs::File::from(std::io::stdout().as_fd_owned()?);
    // Into the container's budget before it forks the monitor: the shim, the monitor and
    // everything that one does are counted and capped with the container.
    if let Err(e) = enter_cgroups() {
        let _ = writeln!(report, "error: {}: {e}", args.name);
        std::process::exit(1);
    }
    // An OOM of the budget takes the payload, not the shim that keeps its log and its exit
    // status (the monitor, the payload's parent, goes back to 0 at once: its children must
    // not inherit this).
    let _ = std::fs::write("/proc/self/oom_score_adj", "-900");
    match start(&args, &mut trace) {
        Ok((monitor, listener, log_r, sigchld, init_pid)) => {
            let _ = writeln!(report, "ok {init_pid}{}", trace.words);
            drop(report);
            // Nothing more goes to the daemon's pipe: it must see EOF.
            let null = process::dev_null()?;
            process::dup2(null.as_raw_fd(), 1)?;
            let r = serve(&args, monitor, listener, log_r, sigchld, init_pid);
            if let Err(e) = &r {
                log::error!("{}: {e:#}", args.name);
            }
            r
        }
        Err(e) => {
            let _ = writeln!(report, "error: {e:#}");
            let _ = std::fs::remove_file(&args.socket);
            std::process::exit(1);
        }
    }
}

trait AsFdOwned {
    fn as_fd_owned(&self) -> std::io::Result<OwnedFd>;
}
impl AsFdOwned for std::io::Stdout {
    fn as_fd_owned(&self) -> std::io::Result<OwnedFd> {
        use std::os::fd::AsFd;
        self.as_fd().try_clone_to_owned()
    }
}

type Started = (libc::pid_t, UnixListener, OwnedFd, OwnedFd, i32);

fn start(args: &ShimArgs, trace: &mut Trace) -> Result<Started> {
    if let Some(dir) = args.socket.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let _ = std::fs::remove_file(&args.socket);
    let listener = UnixListener::bind(&args.socket)
        .with_context(|| format!("bind {}", args.socket.display()))?;
    std::fs::set_permissions(&args.socket, std::fs::Permissions::from_mode(0o600))?;
    let (log_r, log_w) = process::pipe()?;
    let sigchld = process::sigchld_pipe()?;
    // Load liblxc once, before the fork, so the monitor inherits it instead of loading (and
    // relocating) it again on the start path.
    berth_sys::lxc::available().map_err(|e| anyhow::Error::msg(e.message))?;
    trace.mark("lxc_loaded");
    // Stale results of an earlier run must not be mistaken for this one's.
    let _ = std::fs::remove_file(&args.exit_file);
    trace.mark("fork");

    // The child calls liblxc and exits.
    match process::fork()? {
        Fork::Child => {
            drop(listener);
            drop(log_r);
            process::default_signals();
            let code = monitor(args, log_w, trace.on);
            process::exit_now(code);
        }
        Fork::Parent(monitor_pid) => {
            drop(log_w);
            let t_fork = Instant::now();
            let c = Container::new(&args.name, &args.lxcpath)?;
            let deadline = Instant::now() + args.start_timeout;
            let mut delay = Duration::from_millis(1);
            loop {
                if c.is_running() {
                    if let Some(pid) = c.init_pid() {
                        trace.mark("running");
                        log::debug!(
                            "{}: running {:?} after the fork",
                            args.name,
                            t_fork.elapsed()
                        );
                        return Ok((monitor_pid, listener, log_r, sigchld, pid));
                    }
                }
                if let Some(st) = process::waitpid(monitor_pid, true)? {
                    // What the payload (or init.lxc, failing to exec it) printed says most.
                    let output = pending_output(&log_r);
                    let _ = berth_sys::fsutil::write_volatile(
                        &args.saved_log,
                        output.as_bytes(),
                        0o600,
                    );
                    let output = output.trim();
                    bail!(
                        "container {} did not start (monitor {}){}{}",
                        args.name,
                        describe(st),
                        if output.is_empty() {
                            String::new()
                        } else {
                            format!(
                                ": output: {}",
                                output
                                    .lines()
                                    .rev()
                                    .take(3)
                                    .collect::<Vec<_>>()
                                    .into_iter()
                                    .rev()
                                    .collect::<Vec<_>>()
                                    .join(" | ")
                            )
                        },
                        lxc_log_tail(args)
                    );
                }
                if Instant::now() > deadline {
                    let _ = c.stop();
                    let _ = process::kill(monitor_pid, libc::SIGKILL);
                    let _ = process::waitpid(monitor_pid, false);
                    bail!(
                        "container {} did not reach RUNNING within {} s",
                        args.name,
                        args.start_timeout.as_secs()
                    );
                }
                // LXC needs a few milliseconds: ask often at first (each ask is one refused
                // connect on LXC's command socket), then back off.
                std::thread::sleep(delay);
                if t_fork.elapsed() > Duration::from_millis(100) {
                    delay = (delay * 2).min(Duration::from_millis(10));
                }
            }
        }
    }
}

/// Whatever is waiting in the payload's pipe (at most 4 KiB), without blocking.
fn pending_output(log_r: &OwnedFd) -> String {
    let mut buf = vec![0u8; 4096];
    let mut n = 0;
    let _ = process::set_nonblocking(log_r.as_raw_fd());
    if let Ok(f) = log_r.try_clone() {
        let mut f = std::fs::File::from(f);
        while n < buf.len() {
            match f.read(&mut buf[n..]) {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
    }
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn describe(st: ExitStatus) -> String {
    match st {
        ExitStatus::Exited(c) => format!("exited with {c}"),
        ExitStatus::Signaled(s) => format!("killed by signal {s}"),
    }
}

fn lxc_log_tail(args: &ShimArgs) -> String {
    let path = args.lxcpath.join(&args.name).join("lxc.log");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("ERROR")).collect();
    if lines.is_empty() {
        return String::new();
    }
    let tail = lines[lines.len().saturating_sub(3)..]
        .iter()
        .map(|l| l.split(" - ").last().unwrap_or(l).trim())
        .collect::<Vec<_>>()
        .join("; ");
    format!(": {tail} (see {})", path.display())
}

/// The LXC monitor: runs the container in the foreground and returns its exit code.
fn monitor(args: &ShimArgs, log_w: OwnedFd, traced: bool) -> i32 {
    let null = match process::dev_null() {
        Ok(n) => n,
        Err(_) => return 125,
    };
    if process::dup2(null.as_raw_fd(), 0).is_err()
        || process::dup2(log_w.as_raw_fd(), 1).is_err()
        || process::dup2(log_w.as_raw_fd(), 2).is_err()
    {
        return 125;
    }
    drop(log_w);
    drop(null);
    // Everything else (the daemon's report pipe, the shim's socket and signal pipe) must not
    // stay open in the monitor for the container's lifetime.
    process::close_fds_except(&[]);
    process::set_process_name("berth-monitor");
    // The shim's protection from the OOM killer is not the payload's (it inherits this).
    let _ = std::fs::write("/proc/self/oom_score_adj", "0");
    let c = match Container::new(&args.name, &args.lxcpath) {
        Ok(c) => c,
        Err(_) => return 125,
    };
    let mut trace = Trace {
        on: traced,
        ..Trace::default()
    };
    trace.mark("monitor_loaded");
    // liblxc daemonizes by default; in the foreground this process is the monitor, the
    // payload inherits the log pipe, and the start returns with the container's end.
    // lxc_container_new already loaded <lxcpath>/<name>/config: loading it again would
    // append every list entry (mounts, environment, hooks) a second time.
    if c.want_daemonize(false).is_err() || c.want_close_all_fds(true).is_err() {
        return 125;
    }
    // As it tears down, LXC parks the monitor in a pivot cgroup: the container's budget's
    // (its lxc.pivot), not one at the hierarchy's root outside every budget. The key came
    // with LXC 5.0; LXC 4 refuses a configuration that names it, so it is set here, on a
    // liblxc that knows it.
    if let Some(budget) = std::env::var(CGROUP_ENV)
        .ok()
        .and_then(|leaf| Some(Path::new(&leaf).parent()?.to_string_lossy().into_owned()))
    {
        let major: u32 = berth_sys::lxc::version()
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        if major >= 5
            && c.set_config_item("lxc.cgroup.dir.monitor.pivot", &budget)
                .is_err()
        {
            return 125;
        }
    }
    // Every LXC monitor's command socket is an abstract socket in the network namespace it
    // runs in, the host's: a container sharing that namespace (network "shared") could
    // otherwise ask any monitor there to stop, freeze or re-limit its container. Scoped,
    // the container reaches only abstract sockets of its own domain (docs/security.md).
    // Kernels without the scope (before 6.12) run shared containers only if the policy says.
    if berth_sys::landlock::can_scope_abstract_sockets() && !crate::hooks::active("landlock.absent")
    {
        if let Err(e) = berth_sys::landlock::scope_abstract_sockets() {
            warnln!("berth: cannot scope abstract sockets with Landlock: {e}");
            return 125;
        }
    }
    let argv: Vec<&str> = args.argv.iter().map(String::as_str).collect();
    if trace.on {
        trace.mark("lxc_start");
        let _ = std::fs::write(args.lxcpath.join(&args.name).join(TRACE_FILE), &trace.words);
    }
    c.cap_log();
    let ok = c.start(true, &argv).is_ok();
    let status = c.error_num();
    if !ok && status == 0 {
        // liblxc failed before the container's init ran: there is no exit status to pass on.
        return 125;
    }
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else if status & 0xff == 0x7f {
        // liblxc's own encoding of an init killed by a signal (`si_status << 8 | 0x7f`, in
        // its SIGCHLD handler): read as a stop status it would have passed for a clean exit.
        128 + ((status >> 8) & 0x7f)
    } else if ok {
        0
    } else {
        125
    }
}

/// How the container ended: `(code, signal, core_dumped)`. The payload's own wait status,
/// where the kernel kept it behind its pidfd (Linux 6.15), says it all. Otherwise only the
/// monitor's status is known: LXC's init passes a payload killed by signal N on as exit code
/// 128 + N (and liblxc a killed init as the same), so such a code is read as that signal,
/// and whether it dumped core is not known (null; false would claim what nobody saw).
fn how_it_ended(
    monitor: ExitStatus,
    payload: Option<process::PidfdExit>,
) -> (Option<i32>, Option<i32>, Option<bool>) {
    match (payload, monitor) {
        (Some(p), _) => match p.status {
            ExitStatus::Exited(c) => (Some(c), None, Some(false)),
            ExitStatus::Signaled(s) => (None, Some(s), Some(p.core_dumped)),
        },
        (None, ExitStatus::Exited(c)) if c > 128 && c < 128 + 65 => (None, Some(c - 128), None),
        (None, ExitStatus::Exited(c)) => (Some(c), None, Some(false)),
        (None, ExitStatus::Signaled(s)) => (None, Some(s), None),
    }
}

/// A pidfd of the container's payload, init.lxc's one child (it appears a moment after
/// init): through it the shim learns how the payload ended, which init does not pass on
/// whole. None when it cannot be found within 200 ms (the payload already gone).
fn payload_pidfd(init: i32) -> Option<OwnedFd> {
    // Only kernels that keep a process's exit behind its pidfd (Linux 6.15) answer this for
    // the shim itself (still running: Ok(None)); elsewhere the payload's pidfd would tell
    // nothing, and looking for the payload (a scan of /proc without a children file) is
    // work wasted on every start.
    let own = process::pidfd_open(process::getpid()).ok()?;
    process::pidfd_exit(&own).ok()?;
    let deadline = Instant::now() + Duration::from_millis(200);
    let mut delay = Duration::from_millis(1);
    loop {
        if let Some(&pid) = process::children(std::path::Path::new("/proc"), init).first() {
            return process::pidfd_open(pid).ok();
        }
        if Instant::now() >= deadline || !process::alive(init) {
            return None;
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(20));
    }
}

struct Client {
    stream: UnixStream,
    mode: Mode,
}

#[derive(PartialEq)]
enum Mode {
    Follow,
    Wait,
}

fn serve(
    args: &ShimArgs,
    monitor_pid: libc::pid_t,
    listener: UnixListener,
    log_r: OwnedFd,
    sigchld: OwnedFd,
    init_pid: i32,
) -> Result<()> {
    listener.set_nonblocking(true)?;
    process::set_nonblocking(log_r.as_raw_fd())?;
    let mut log = std::fs::File::from(log_r);
    let mut ring = Ring::new(args.ring_bytes);
    let mut clients: Vec<Client> = Vec::new();
    let started_at = process::now_s();
    let mut log_open = true;
    let mut sigf = std::fs::File::from(sigchld);
    let mut buf = vec![0u8; 16 * 1024];
    let payload = payload_pidfd(init_pid);
    let status = loop {
        let mut fds = vec![(sigf.as_raw_fd(), POLLIN), (listener.as_raw_fd(), POLLIN)];
        let log_slot = fds.len();
        if log_open {
            fds.push((log.as_raw_fd(), POLLIN));
        }
        // Clients never send anything after their request: readable means gone.
        let first_client = fds.len();
        for c in &clients {
            fds.push((c.stream.as_raw_fd(), POLLIN | POLLRDHUP));
        }
        let rev = process::poll(&fds, -1)?;
        if log_open && rev[log_slot] & (POLLIN | POLLHUP) != 0 {
            log_open = drain(&mut log, &mut buf, &mut ring, &mut clients);
        }
        if rev.len() > first_client {
            let gone: Vec<bool> = rev[first_client..].iter().map(|r| *r != 0).collect();
            let mut i = 0;
            clients.retain(|_| {
                i += 1;
                !gone.get(i - 1).copied().unwrap_or(false)
            });
        }
        if rev[1] & POLLIN != 0 {
            loop {
                match listener.accept() {
                    Ok((stream, _)) => {
                        if let Some(c) = handle(stream, &ring, monitor_pid, init_pid, started_at) {
                            clients.push(c);
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        // Out of descriptors (EMFILE): back off instead of spinning on a
                        // listener that stays readable.
                        log::warn!("{}: accept: {e}", args.name);
                        std::thread::sleep(Duration::from_millis(100));
                        break;
                    }
                }
            }
        }
        if rev[0] & POLLIN != 0 {
            let mut b = [0u8; 64];
            let _ = sigf.read(&mut b);
            if let Some(st) = process::waitpid(monitor_pid, true)? {
                break st;
            }
        }
    };
    // The container is gone: everything it wrote is in the pipe or already read.
    while log_open {
        log_open = drain(&mut log, &mut buf, &mut ring, &mut clients);
        if log_open {
            // Writers may linger a moment after the monitor (pid namespace teardown).
            if process::poll(&[(log.as_raw_fd(), POLLIN)], 200)?[0] == 0 {
                break;
            }
        }
    }
    let payload_end = payload
        .as_ref()
        .and_then(|fd| process::pidfd_exit(fd).ok().flatten());
    let (code, signal, core_dumped) = how_it_ended(status, payload_end);
    let _ = berth_sys::fsutil::write_volatile(&args.saved_log, &ring.contents(), 0o600);
    use berth_core::api::exit::{CODE, CORE_DUMPED, LOG_BYTES, SIGNAL, STARTED_AT, STOPPED_AT};
    let exit = serde_json::json!({
        CODE: code, SIGNAL: signal,
        CORE_DUMPED: core_dumped,
        STARTED_AT: started_at, STOPPED_AT: process::now_s(),
        LOG_BYTES: ring.total(),
    });
    let _ = berth_sys::fsutil::write_volatile(&args.exit_file, exit.to_string().as_bytes(), 0o600);
    let line = match (code, signal) {
        (_, Some(s)) => format!("signal {s}\n"),
        (Some(c), None) => format!("exit {c}\n"),
        (None, None) => "exit 0\n".to_string(),
    };
    for mut c in clients {
        if c.mode == Mode::Wait {
            let _ = c.stream.write_all(line.as_bytes());
        }
    }
    let _ = std::fs::remove_file(&args.socket);
    Ok(())
}

/// Reads what is available from the payload's pipe; false at EOF.
fn drain(
    log: &mut std::fs::File,
    buf: &mut [u8],
    ring: &mut Ring,
    clients: &mut Vec<Client>,
) -> bool {
    loop {
        match log.read(buf) {
            Ok(0) => return false,
            Ok(n) => {
                ring.push(&buf[..n]);
                // A follower that cannot keep up is dropped: a slow reader must never block
                // the container's output (its pipe would fill and stall the payload).
                clients.retain_mut(|c| {
                    c.mode != Mode::Follow || c.stream.write_all(&buf[..n]).is_ok()
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
}

fn handle(
    mut stream: UnixStream,
    ring: &Ring,
    monitor_pid: libc::pid_t,
    init_pid: i32,
    started_at: u64,
) -> Option<Client> {
    stream.set_nonblocking(false).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    stream
        .set_write_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    let mut line = [0u8; 32];
    let mut n = 0;
    while n < line.len() {
        match stream.read(&mut line[n..]) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                if line[..n].contains(&b'\n') {
                    break;
                }
            }
            Err(_) => return None,
        }
    }
    let cmd = std::str::from_utf8(&line[..n]).ok()?.trim();
    match cmd {
        "logs" => {
            let _ = stream.write_all(&ring.contents());
            None
        }
        "follow" => {
            stream.write_all(&ring.contents()).ok()?;
            Some(Client {
                stream,
                mode: Mode::Follow,
            })
        }
        // `tail N`: the ring's last N lines, then as `follow`.
        t if t.starts_with("tail ") => {
            let n: usize = t[5..].parse().ok()?;
            let all = ring.contents();
            stream
                .write_all(berth_core::container_api::tail_lines(&all, n))
                .ok()?;
            Some(Client {
                stream,
                mode: Mode::Follow,
            })
        }
        "wait" => {
            stream.set_write_timeout(None).ok()?;
            Some(Client {
                stream,
                mode: Mode::Wait,
            })
        }
        "info" => {
            // The container's fields as `berth status` passes them on (the monitor's pid
            // is the shim's own).
            use berth_core::api::container::{INIT_PID, LOG_BYTES, STARTED_AT};
            let info = serde_json::json!({
                "monitor_pid": monitor_pid, INIT_PID: init_pid,
                STARTED_AT: started_at, LOG_BYTES: ring.total(),
            });
            let _ = stream.write_all(info.to_string().as_bytes());
            None
        }
        _ => {
            let _ = stream.write_all(b"error: unknown request\n");
            None
        }
    }
}

/// Client side (daemon): one request to a container's shim.
pub fn request(socket: &std::path::Path, what: &str) -> std::io::Result<UnixStream> {
    let mut s = UnixStream::connect(socket)?;
    s.write_all(format!("{what}\n").as_bytes())?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payloads_own_end_wins_over_inits_exit_code() {
        use process::PidfdExit;
        let payload = |status, core_dumped| {
            Some(PidfdExit {
                status,
                core_dumped,
            })
        };
        // init's 139: a segfault, or a wrapper's plain `exit 139`; the pidfd tells which
        let segv = payload(ExitStatus::Signaled(11), true);
        assert_eq!(
            how_it_ended(ExitStatus::Exited(139), segv),
            (None, Some(11), Some(true))
        );
        let wrapper = payload(ExitStatus::Exited(139), false);
        assert_eq!(
            how_it_ended(ExitStatus::Exited(139), wrapper),
            (Some(139), None, Some(false))
        );
        // without the pidfd: read as the signal, core not known
        assert_eq!(
            how_it_ended(ExitStatus::Exited(139), None),
            (None, Some(11), None)
        );
        assert_eq!(
            how_it_ended(ExitStatus::Exited(3), None),
            (Some(3), None, Some(false))
        );
        assert_eq!(
            how_it_ended(ExitStatus::Signaled(9), None),
            (None, Some(9), None)
        );
        // a killed init: the payload went with it
        let killed = payload(ExitStatus::Signaled(9), false);
        assert_eq!(
            how_it_ended(ExitStatus::Exited(137), killed),
            (None, Some(9), Some(false))
        );
    }

    #[test]
    fn ring_keeps_the_newest_bytes() {
        let mut r = Ring::new(8);
        r.push(b"hello ");
        r.push(b"world");
        assert_eq!(r.contents(), b"lo world");
        r.push(b"0123456789abc");
        assert_eq!(r.contents(), b"56789abc");
        assert_eq!(r.total(), 24);
    }

    #[test]
    fn args_round_trip() {
        let a = ShimArgs {
            name: "web".into(),
            lxcpath: "/run/berth/lxc".into(),
            socket: "/run/berth/shim/web.sock".into(),
            ring_bytes: 65536,
            saved_log: "/run/berth/logs/web.log".into(),
            exit_file: "/run/berth/logs/web.exit".into(),
            start_timeout: Duration::from_secs(30),
            argv: vec!["/bin/httpd".into(), "-f".into(), "--".into()],
        };
        let v = a.to_args();
        let b = ShimArgs::from_args(&v[1..]).unwrap();
        assert_eq!(b.argv, a.argv);
        assert_eq!(b.ring_bytes, 65536);
        assert_eq!(b.start_timeout, Duration::from_secs(30));
    }
}
