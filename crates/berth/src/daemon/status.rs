//! `berth status`: one view over the daemon, the repository and every container (its state
//! from the runtime, its last exit, the memory guard's last kill from the records).

use berth_core::api::{container, daemon, health as health_field, status as field};
use berth_core::supervise::HealthState;
use serde_json::{json, Value};

use crate::daemon::context::Daemon;
use crate::daemon::error::Result;
use crate::daemon::records;
use crate::daemon::runtime::{self, probe};
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
        let sup = d.supervision.lock().unwrap().get(n).cloned();
        // The supervisor's word, unless what runs says otherwise (an event not handled yet).
        let state = match &sup {
            Some(s) if running == matches!(s.state, "running" | "unhealthy" | "stopping") => {
                s.state
            }
            _ if running => "running",
            _ => "stopped",
        };
        let health = sup
            .as_ref()
            .filter(|s| s.health != HealthState::None)
            .map(|s| {
                json!({
                    health_field::STATUS: match s.health {
                        HealthState::Healthy => "healthy",
                        HealthState::Unhealthy => "unhealthy",
                        _ => "starting",
                    },
                    health_field::FAILURES: s.failures,
                    health_field::LAST: s.last_check.as_ref().map(|(l, _)| l),
                    health_field::CHECKED_AT: s.last_check.as_ref().map(|(_, t)| t),
                })
            });
        let record = sup.as_ref().map(|s| s.record).unwrap_or_default();
        containers.push(json!({
            container::NAME: n,
            container::VERSION: p.version.to_string(),
            container::STATE: state,
            container::RESTARTS: record.restarts,
            container::RETRIES: record.retries,
            container::READY: sup.as_ref().is_some_and(|s| s.ready) && running,
            container::RESTART_IN_MS: sup.as_ref().and_then(|s| s.next_start).map(|t| {
                t.saturating_duration_since(std::time::Instant::now()).as_millis() as u64
            }),
            container::REASON: sup.as_ref().and_then(|s| s.reason.clone()),
            container::HEALTH: health,
            container::INIT_PID: pid,
            container::STARTED_AT: info.get(container::STARTED_AT),
            container::LOG_BYTES: info.get(container::LOG_BYTES),
            container::NETWORK: p.manifest.summary().network_mode,
            container::AUTOSTART: d.cfg.paths.autostart(n).exists(),
            container::LAST_EXIT: if running { Value::Null } else { probe::exit_info(d, n) },
            container::GUARD_KILL: records::last_guard_kill(d, n),
            container::IMAGE: p.sha256,
            container::BINDINGS: runtime::bind::listing(d, &st, p, running),
        }));
    }
    let safe = d.safe_mode();
    #[allow(unused_mut)]
    let mut v = json!({
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
    });
    #[cfg(feature = "fleet")]
    {
        v[field::FLEET] = crate::daemon::fleet::status(d);
    }
    Ok(v)
}
