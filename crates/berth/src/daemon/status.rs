//! `berth status`: one view over the daemon, the repository and every container (its state
//! from the runtime, its last exit, the memory guard's last kill from the records).

use berth_core::api::{container, daemon, status as field};
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
        let pid = match info[container::INIT_PID].as_i64() {
            Some(pid) => Some(pid as i32),
            None if probe::is_running(d, n) => probe::running_init(d, n),
            None => None,
        };
        let running = pid.is_some();
        let lxc_state = if running { "RUNNING" } else { "STOPPED" };
        containers.push(json!({
            container::NAME: n,
            container::VERSION: p.version.to_string(),
            container::STATE: lxc_state.to_lowercase(),
            container::INIT_PID: pid,
            container::STARTED_AT: info.get(container::STARTED_AT),
            container::LOG_BYTES: info.get(container::LOG_BYTES),
            container::NETWORK: p.manifest.summary().network_mode,
            container::AUTOSTART: d.cfg.paths.autostart(n).exists(),
            container::LAST_EXIT: if running { Value::Null } else { probe::exit_info(d, n) },
            container::GUARD_KILL: records::last_guard_kill(d, n),
            container::IMAGE: p.sha256,
        }));
    }
    let safe = d.safe_mode();
    Ok(json!({
        field::REPOSITORY: repo::repository_status(d),
        field::DAEMON: {
            daemon::PID: std::process::id(),
            daemon::VERSION: env!("CARGO_PKG_VERSION"),
            daemon::UPTIME_S: d.started.elapsed().as_secs(),
            daemon::LXCPATH: d.cfg.paths.lxcpath,
            daemon::SAFE_MODE: safe.is_some(),
            daemon::SAFE_MODE_REASON: safe,
        },
        field::CONTAINERS: containers,
    }))
}
