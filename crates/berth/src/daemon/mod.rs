//! `berth daemon`: the admin socket, request routing, and start-up reconciliation.
//!
//! Threads: the accept loop (main thread), one short-lived thread per admin connection, and
//! one watcher per running container blocked on its shim's `wait` (no polling when idle), and
//! the memory guard (`guard.rs`: blocked on a PSI trigger, or polling meminfo without PSI),
//! and the CPU governor (`governor.rs`: one probe per interval, only when a probe is configured).
//! Mutating operations take `Daemon::op` so they apply one at a time, in order; reads
//! (status, list, logs) do not wait for a long install.

mod api;
mod governor;
mod guard;
pub mod net;
pub mod ops;
mod security;

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
    let state = ops::load_state(&cfg)?;
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
    ops::reconcile(&d);
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
            .spawn(move || ops::autostart(&d));
    }
    let term = berth_sys::process::termination_pipe()?;
    // Start-up code (configuration and state parsing, reconciliation) will not run again.
    berth_sys::process::trim_heap();
    berth_sys::process::release_own_code(true);
    listener.set_nonblocking(true)?;
    use std::os::fd::AsRawFd;
    loop {
        let rev = berth_sys::process::poll(
            &[
                (listener.as_raw_fd(), berth_sys::process::POLLIN),
                (term.as_raw_fd(), berth_sys::process::POLLIN),
            ],
            -1,
        )?;
        if rev[1] != 0 {
            // Containers keep running: a daemon restart must not touch them.
            log::info!("berth daemon stopping; containers keep running");
            let _ = std::fs::remove_file(&sock);
            drop(lock);
            return Ok(());
        }
        while let Ok((stream, _)) = listener.accept() {
            let d = Arc::clone(&d);
            let spawned = std::thread::Builder::new()
                .name("admin".into())
                .stack_size(256 * 1024)
                .spawn(move || serve_connection(&d, stream));
            if let Err(e) = spawned {
                log::error!("cannot start a thread for an admin request: {e}");
            }
        }
    }
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

fn serve_connection(d: &Arc<Daemon>, mut stream: UnixStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    match berth_sys::fsutil::peer_uid(&stream) {
        Ok((_, 0)) => {}
        _ => {
            let e = ApiError::new(403, "forbidden", "the admin socket is for root only");
            let _ = stream.write_all(&http::response(
                403,
                "application/json",
                e.to_json().to_string().as_bytes(),
            ));
            return;
        }
    }
    let req = match read_request(&mut stream) {
        Ok(r) => r,
        Err(e) => {
            let e = ApiError::bad_request(e.to_string());
            let _ = stream.write_all(&http::response(
                400,
                "application/json",
                e.to_json().to_string().as_bytes(),
            ));
            return;
        }
    };
    let _ = stream.set_read_timeout(None);
    api::route(d, req, stream);
    // Requests are rare; give back what this one allocated (install buffers, JSON) and the
    // mappings of the code it ran.
    berth_sys::process::trim_heap();
    berth_sys::process::release_own_code(false);
}

fn read_request(stream: &mut UnixStream) -> Result<http::Request> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    let end = loop {
        if let Some(end) = http::head_end(&buf) {
            break end;
        }
        if buf.len() > http::MAX_HEAD {
            bail!("{}", http::HttpError::HeadTooLarge);
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            bail!("connection closed before the request was complete");
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let (mut req, len) = http::parse_head(&buf[..end])?;
    let mut body = buf[end..].to_vec();
    while body.len() < len {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            bail!("connection closed before the body was complete");
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(len);
    req.body = body;
    Ok(req)
}
