//! Is a container running, and with which init: asked of its shim, or of LXC when the shim is gone.

use std::io::Read;
use std::time::{Duration, Instant};

use berth_core::api::container;
use berth_core::api::exit;
use berth_core::supervise::Exit;
use berth_sys::lxc::Container;
use serde_json::Value;

use crate::daemon::context::Daemon;

/// The init pid of a running container. The daemon asks the container's shim (which holds
/// the liblxc handle), so it never loads liblxc itself; only a container whose shim is gone
/// (killed) makes it ask LXC.
pub(crate) fn running_init(d: &Daemon, name: &str) -> Option<i32> {
    if let Some(pid) = shim_info(d, name)[container::INIT_PID].as_i64() {
        return Some(pid as i32);
    }
    if !lxc_monitor_alive(d, name) {
        return None;
    }
    Container::new(name, &d.cfg.paths.lxcpath)
        .ok()
        .filter(|c| c.is_running())
        .and_then(|c| c.init_pid())
}

pub(crate) fn is_running(d: &Daemon, name: &str) -> bool {
    // Without a config LXC knows nothing of the container: not ours, or never started.
    if !d.cfg.paths.lxc_dir(name).join("config").exists() {
        return false;
    }
    d.cfg.paths.shim_socket(name).exists() && shim_info(d, name)[container::INIT_PID].is_i64()
        || lxc_monitor_alive(d, name)
}

/// Whether an LXC monitor of this container listens on its command socket (LXC's abstract
/// socket `@<lxcpath>/<name>/command`): the container exists, with or without a shim.
pub(crate) fn lxc_monitor_alive(d: &Daemon, name: &str) -> bool {
    use std::os::linux::net::SocketAddrExt;
    let path = d.cfg.paths.lxc_dir(name).join("command");
    std::os::unix::net::SocketAddr::from_abstract_name(path.as_os_str().as_encoded_bytes())
        .and_then(|a| std::os::unix::net::UnixStream::connect_addr(&a))
        .is_ok()
}

/// Waits until no LXC monitor of the container listens any more; false at the limit.
pub(crate) fn wait_monitor_gone(d: &Daemon, name: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut delay = Duration::from_millis(1);
    while lxc_monitor_alive(d, name) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(50));
    }
    true
}

pub(crate) fn exit_info(d: &Daemon, name: &str) -> Value {
    std::fs::read(d.cfg.paths.exit_file(name))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null)
}

/// The shim's `info` answer: the container's fields `init_pid`, `started_at` and
/// `log_bytes` as `berth status` shows them, and the monitor's pid.
pub(crate) fn shim_info(d: &Daemon, name: &str) -> Value {
    crate::shim::request(&d.cfg.paths.shim_socket(name), "info")
        .ok()
        .and_then(|mut s| {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut t = String::new();
            s.read_to_string(&mut t).ok()?;
            serde_json::from_str(&t).ok()
        })
        .unwrap_or(Value::Null)
}

/// How its last run ended, from its exit record; neither a code nor a signal when there is
/// none (a shim killed before it could write one), which counts as a failure.
pub(crate) fn exit_of(d: &Daemon, name: &str) -> Exit {
    let v = exit_info(d, name);
    let int = |k: &str| v[k].as_i64().map(|n| n as i32);
    Exit {
        code: int(exit::CODE),
        signal: int(exit::SIGNAL),
    }
}
