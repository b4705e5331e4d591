//! `berth status`: one view over the daemon, the repository and every container (its state
//! from the runtime, its last exit, the memory guard's last kill from the records).

use serde_json::{json, Value};

use crate::daemon::context::Daemon;
use crate::daemon::error::Result;
use crate::daemon::records;
use crate::daemon::runtime::probe;
use crate::daemon::state;
use crate::daemon::store::repo;

pub(crate) fn status(d: &Daemon, name: Option<&str>) -> Result<Value> {
    let st = state::state(d);
    if let Some(n) = name {
        state::installed(d, n)?;
    }
    let mut containers = Vec::new();
    for p in st.packages.values() {
        if name.is_some_and(|n| n != p.name.as_str()) {
            continue;
        }
        let n = p.name.as_str();
        // One question to the shim gives the state, the pid and the ring's size.
        let info = probe::shim_info(d, n);
        let pid = match info["init_pid"].as_i64() {
            Some(pid) => Some(pid as i32),
            None if probe::is_running(d, n) => probe::running_init(d, n),
            None => None,
        };
        let running = pid.is_some();
        let lxc_state = if running { "RUNNING" } else { "STOPPED" };
        containers.push(json!({
            "name": n,
            "version": p.version.to_string(),
            "state": lxc_state.to_lowercase(),
            "init_pid": pid,
            "started_at": info.get("started_at"),
            "log_bytes": info.get("log_bytes"),
            "network": p.manifest.summary().network_mode,
            "autostart": d.cfg.paths.autostart(n).exists(),
            "last_exit": if running { Value::Null } else { probe::exit_info(d, n) },
            "guard_kill": records::last_guard_kill(d, n),
            "image": p.sha256,
        }));
    }
    Ok(json!({
        "repository": repo::repository_status(d),
        "daemon": {
            "pid": std::process::id(),
            "version": env!("CARGO_PKG_VERSION"),
            "uptime_s": d.started.elapsed().as_secs(),
            "lxcpath": d.cfg.paths.lxcpath,
        },
        "containers": containers,
    }))
}

