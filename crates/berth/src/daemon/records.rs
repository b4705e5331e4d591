//! What berth keeps about a container's past for `berth status`: the memory guard's last
//! kill, in memory and in `<run>/logs/NAME.guard` (tmpfs), so a restarted daemon still
//! shows it; and the supervisor's record of each container (its retry count and whether it
//! failed, on flash). Removed with the package.

use berth_core::api::guard_kill as field;
use berth_core::supervise::{GuardKill, Record};
use berth_sys::fsutil::write_atomic;
use serde_json::{json, Value};

use crate::daemon::context::Daemon;

pub(crate) fn record_guard_kill(d: &Daemon, name: &str, k: &GuardKill) {
    // The count lives with the last kill, on tmpfs: since boot, across daemon restarts.
    let count = last_guard_kill(d, name)[field::COUNT].as_u64().unwrap_or(0) + 1;
    let v = json!({
        field::COUNT: count,
        field::AT: berth_sys::process::now_s(),
        field::PID: k.pid,
        field::INIT: k.init,
        field::RSS: k.rss,
        field::PRIORITY: k.priority,
        field::AVAILABLE: k.available,
        field::THRESHOLD: d.cfg.guard.threshold,
    });
    let path = d.cfg.paths.guard_file(name);
    if let Err(e) = berth_sys::fsutil::write_atomic(&path, v.to_string().as_bytes(), 0o600) {
        log::warn!("memory guard: {}: {e}", path.display());
    }
    d.guard_kills.lock().unwrap().insert(name.to_string(), v);
}

/// The last guard kill of a container: this daemon's, or one a previous daemon recorded.
pub(crate) fn last_guard_kill(d: &Daemon, name: &str) -> Value {
    if let Some(v) = d.guard_kills.lock().unwrap().get(name) {
        return v.clone();
    }
    std::fs::read(d.cfg.paths.guard_file(name))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null)
}

pub(crate) fn forget(d: &Daemon, name: &str) {
    let _ = std::fs::remove_file(d.cfg.paths.guard_file(name));
    d.guard_kills.lock().unwrap().remove(name);
}

/// The supervisor's record of a container (`<state>/supervise/NAME.json`); a clean one
/// when there is none or it is damaged.
pub(crate) fn load_supervised(d: &Daemon, name: &str) -> Record {
    let path = d.cfg.paths.supervise_file(name);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            log::warn!("{}: {e}; starting from a clean record", path.display());
            Record::default()
        }),
        Err(_) => Record::default(),
    }
}

/// Writes the supervisor's record atomically; a failed write is logged (the record in
/// memory stays right, only a daemon restart would forget it).
pub(crate) fn save_supervised(d: &Daemon, name: &str, r: &Record) {
    let path = d.cfg.paths.supervise_file(name);
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let written = serde_json::to_vec(r)
        .map_err(std::io::Error::other)
        .and_then(|b| write_atomic(&path, &b, 0o600));
    if let Err(e) = written {
        log::warn!("cannot write {}: {e}", path.display());
    }
}
