//! `berth daemon`: the admin socket, request routing, and start-up reconciliation.
//!
//! Threads: the accept loop (main thread), one short-lived thread per admin connection, and
//! one watcher per running container blocked on its shim's `wait` (no polling when idle), and
//! the memory guard (`guard.rs`: blocked on a PSI trigger, or polling meminfo without PSI),
//! and the CPU governor (`governor.rs`: one probe per interval, only when a probe is configured).
//! Mutating operations take `Daemon::op` so they apply one at a time, in order; reads
//! (status, list, logs) do not wait for a long install.

mod api;
mod cgroups;
mod governor;
mod guard;
mod limits;
pub mod net;
mod runtime;
mod security;
mod state;
mod store;
mod supervisor;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use berth_core::config::Config;
use berth_core::http;
use berth_core::state::State;

pub struct Daemon {
    pub cfg: Config,
    pub state: Mutex<State>,
    /// Serializes operations that change the store, the state or containers.
    pub op: Mutex<()>,
    pub started: Instant,
    /// Path of this executable, for re-execing shims.
    pub exe: std::path::PathBuf,
    /// The memory guard's last kill per container (also in `<run>/logs/NAME.guard`).
    pub guard_kills: Mutex<std::collections::BTreeMap<String, serde_json::Value>>,
}

/// An error for the API: HTTP status, a stable machine code, and a message for people.
#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
    pub fn bad_request(m: impl Into<String>) -> ApiError {
        ApiError::new(400, "bad_request", m)
    }
    pub fn internal(e: impl std::fmt::Display) -> ApiError {
        ApiError::new(500, "internal", format!("{e:#}"))
    }
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"error": self.message, "code": self.code})
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> ApiError {
        ApiError::internal(e)
    }
}

pub type ApiResult<T> = std::result::Result<T, ApiError>;

pub fn run(cfg: Config) -> Result<()> {
    // SAFETY-free check: geteuid has no preconditions but lives in libc; use the fs instead.
    if !is_root() {
        bail!("berth daemon must run as root (it mounts images and starts containers)");
    }
    berth_sys::process::ignore_sigpipe();
    berth_sys::process::single_malloc_arena();
    let paths = &cfg.paths;
    // Modes (docs/security.md, "Host side"): what containers write (data/, through their
    // binds) and what berth keeps (state, store, logs, sockets) is root's alone; only the
    // directories on the way to a container's root and /data binds are traversable by
    // others, as a user namespace's root is one of those others. Set at every start, so
    // a state directory made by an older berth is closed too.
    for (dir, mode) in [
        (paths.state.clone(), 0o700),
        (paths.store(), 0o700),
        (paths.store_tmp(), 0o700),
        (paths.state.join("data"), 0o700),
        (paths.run.clone(), 0o711),
        (paths.run.join("mnt"), 0o711),
        (paths.run.join("rootfs"), 0o711),
        (paths.run.join("data"), 0o711),
        (paths.run.join("shim"), 0o700),
        (paths.run.join("logs"), 0o700),
        (paths.lxcpath.clone(), 0o711),
    ] {
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("chmod {}", dir.display()))?;
    }
    // What is bound over the kernel files and directories a container must not read
    // (berth_core::plan::MASKED_PROC_FILES): empty, read-only, root's.
    std::fs::write(paths.mask_file(), b"")
        .and_then(|_| {
            std::fs::set_permissions(paths.mask_file(), std::fs::Permissions::from_mode(0o444))
        })
        .and_then(|_| std::fs::create_dir_all(paths.mask_dir()))
        .and_then(|_| {
            std::fs::set_permissions(paths.mask_dir(), std::fs::Permissions::from_mode(0o555))
        })
        .with_context(|| format!("create {}", paths.mask_file().display()))?;
    let lock = single_instance(&cfg)?;
    let state = state::load_state(&cfg)?;
    // Shims are re-execs of this very binary: /proc/self/exe still works after a package
    // manager replaced the file on disk (the running daemon and its shims stay consistent).
    let exe = std::path::PathBuf::from("/proc/self/exe");
    let d = Arc::new(Daemon {
        cfg,
        state: Mutex::new(state),
        op: Mutex::new(()),
        started: Instant::now(),
        exe,
        guard_kills: Mutex::new(Default::default()),
    });
    supervisor::reconcile(&d);
    net::restore(&d, &d.state.lock().unwrap().clone());
    let sock = d.cfg.paths.admin_socket();
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).with_context(|| format!("bind {}", sock.display()))?;
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600))?;
    log::info!(
        "berth daemon {} ready on {} (pid {})",
        env!("CARGO_PKG_VERSION"),
        sock.display(),
        std::process::id()
    );
    guard::spawn(&d);
    governor::spawn(&d);
    {
        let d = Arc::clone(&d);
        let _ = std::thread::Builder::new()
            .name("autostart".into())
            .stack_size(256 * 1024)
            .spawn(move || supervisor::autostart(&d));
    }
    let term = berth_sys::process::termination_pipe()?;
    // Start-up code (configuration and state parsing, reconciliation) will not run again.
    berth_sys::process::trim_heap();
    berth_sys::process::release_own_code(true);
    listener.set_nonblocking(true)?;
    let mut admin = Admission::default();
    use std::os::fd::AsRawFd;
    loop {
        // The listener, the termination pipe, then every connection still sending its request.
        let mut fds = vec![
            (listener.as_raw_fd(), berth_sys::process::POLLIN),
            (term.as_raw_fd(), berth_sys::process::POLLIN),
        ];
        fds.extend(
            admin
                .pending
                .iter()
                .map(|p| (p.stream.as_raw_fd(), berth_sys::process::POLLIN)),
        );
        // Without pending connections nothing is timed: no wake-ups while idle.
        let timeout = admin
            .next_deadline()
            .map(|t| t.saturating_duration_since(Instant::now()).as_millis() as i32 + 1)
            .unwrap_or(-1);
        let rev = berth_sys::process::poll(&fds, timeout)?;
        if rev[1] != 0 {
            // Containers keep running: a daemon restart must not touch them.
            log::info!("berth daemon stopping; containers keep running");
            let _ = std::fs::remove_file(&sock);
            drop(lock);
            return Ok(());
        }
        // Readable first (in poll's order), then new connections, then the deadlines.
        let readable: Vec<bool> = rev[2..].iter().map(|r| *r != 0).collect();
        admin.read_ready(&d, &readable);
        if rev[0] != 0 {
            while let Ok((stream, _)) = listener.accept() {
                admin.accept(stream);
            }
        }
        admin.expire(Instant::now());
    }
}

/// Admin connections still sending their request: at most this many at once; one more
/// closes the oldest, so that a client that sends its request at once is always read.
const MAX_PENDING: usize = 64;
/// The whole request must arrive within this time of the connection (not per read).
const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// Requests being served at once (streams such as `logs -f` and install progress count);
/// beyond that the answer is 503 `busy`.
const MAX_WORKERS: usize = 32;

struct Pending {
    stream: UnixStream,
    buf: Vec<u8>,
    deadline: Instant,
}

/// The admin socket's front door, run by the main thread: peer check at accept, requests
/// read without blocking under one deadline each, a thread only for a complete request.
#[derive(Default)]
struct Admission {
    pending: std::collections::VecDeque<Pending>,
    workers: Arc<std::sync::atomic::AtomicUsize>,
}

impl Admission {
    fn next_deadline(&self) -> Option<Instant> {
        self.pending.iter().map(|p| p.deadline).min()
    }

    fn accept(&mut self, mut stream: UnixStream) {
        match berth_sys::fsutil::peer_uid(&stream) {
            Ok((_, 0)) => {}
            _ => {
                let e = ApiError::new(403, "forbidden", "the admin socket is for root only");
                let _ = stream.set_nonblocking(true);
                let _ = stream.write_all(&http::response(
                    403,
                    "application/json",
                    e.to_json().to_string().as_bytes(),
                ));
                return;
            }
        }
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        if self.pending.len() >= MAX_PENDING {
            // The oldest has had the longest to send its request.
            self.pending.pop_front();
        }
        self.pending.push_back(Pending {
            stream,
            buf: Vec::with_capacity(512),
            deadline: Instant::now() + REQUEST_DEADLINE,
        });
    }

    /// Reads what arrived on the connections poll found readable; complete requests go to a
    /// worker, broken ones get their 400, closed ones go.
    fn read_ready(&mut self, d: &Arc<Daemon>, readable: &[bool]) {
        let mut keep = std::collections::VecDeque::with_capacity(self.pending.len());
        for (i, mut p) in std::mem::take(&mut self.pending).into_iter().enumerate() {
            if !readable.get(i).copied().unwrap_or(false) {
                keep.push_back(p);
                continue;
            }
            let mut chunk = [0u8; 2048];
            let outcome = loop {
                match p.stream.read(&mut chunk) {
                    Ok(0) => break Err(None),
                    Ok(n) => {
                        p.buf.extend_from_slice(&chunk[..n]);
                        match http::parse_complete(&p.buf) {
                            Ok(Some(req)) => break Ok(Some(req)),
                            Ok(None) => continue,
                            Err(e) => break Err(Some(e.to_string())),
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break Ok(None),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break Err(None),
                }
            };
            match outcome {
                Ok(None) => keep.push_back(p),
                Ok(Some(req)) => self.dispatch(d, p.stream, req),
                Err(Some(why)) => reply_now(p.stream, ApiError::bad_request(why)),
                Err(None) => {}
            }
        }
        self.pending = keep;
    }

    fn dispatch(&self, d: &Arc<Daemon>, stream: UnixStream, req: http::Request) {
        use std::sync::atomic::Ordering;
        if self.workers.fetch_add(1, Ordering::SeqCst) >= MAX_WORKERS {
            self.workers.fetch_sub(1, Ordering::SeqCst);
            return reply_now(
                stream,
                ApiError::new(
                    503,
                    "busy",
                    format!("the daemon is serving {MAX_WORKERS} requests already; try again"),
                ),
            );
        }
        let d = Arc::clone(d);
        let workers = Arc::clone(&self.workers);
        let spawned = std::thread::Builder::new()
            .name("admin".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                serve_request(&d, stream, req);
                workers.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            self.workers.fetch_sub(1, Ordering::SeqCst);
            log::error!("cannot start a thread for an admin request: {e}");
        }
    }

    /// Connections that did not send a whole request in time are closed.
    fn expire(&mut self, now: Instant) {
        self.pending.retain(|p| p.deadline > now);
    }
}

/// An answer from the main thread, which must not block: a short write to a socket whose
/// buffer is empty, or nothing.
fn reply_now(mut stream: UnixStream, e: ApiError) {
    let _ = stream.write_all(&http::response(
        e.status,
        "application/json",
        e.to_json().to_string().as_bytes(),
    ));
}

pub fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

/// One daemon per state directory: a lock file held for the daemon's lifetime.
fn single_instance(cfg: &Config) -> Result<std::fs::File> {
    let path = cfg.paths.daemon_pid();
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("open {}", path.display()))?;
    if !berth_sys::process::try_lock(&f)? {
        let mut other = String::new();
        let _ = f.read_to_string(&mut other);
        bail!(
            "another berth daemon is running (pid {}, lock {})",
            other.trim(),
            path.display()
        );
    }
    f.set_len(0)?;
    write!(f, "{}", std::process::id())?;
    Ok(f)
}

fn serve_request(d: &Arc<Daemon>, stream: UnixStream, req: http::Request) {
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    api::route(d, req, stream);
    // Requests are rare; give back what this one allocated (install buffers, JSON) and the
    // mappings of the code it ran.
    berth_sys::process::trim_heap();
    berth_sys::process::release_own_code(false);
}
