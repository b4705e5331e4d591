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
    status_of(d, name, true)
}

/// `live`: each container's shim is asked (`berth status`); else the run as the
/// supervisor follows it, without `log_bytes` (a container's own `GET /v1/self`, which must
/// not wait on its shim: the shim is in the container's budget, and waits out the group's
/// throttling when the group's CPU is spent).
pub(crate) fn status_of(d: &Daemon, name: Option<&str>, live: bool) -> Result<Value> {
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
        let sup = d.supervision.lock().unwrap().get(n).cloned();
        let info = match &sup {
            Some(s) if !live => {
                json!({container::INIT_PID: s.run, container::STARTED_AT: s.started_at})
            }
            _ => probe::shim_info(d, n),
        };
        let pid = match info[container::INIT_PID].as_i64() {
            Some(pid) => Some(pid as i32),
            None if probe::is_running(d, n) => probe::running_init(d, n),
            None => None,
        };
        let running = pid.is_some();
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
        let restart_in_ms = sup.as_ref().and_then(|s| s.next_start).map(|t| {
            t.saturating_duration_since(std::time::Instant::now())
                .as_millis() as u64
        });
        // A table, not json!: one insert loop instead of a serializer call per field (the
        // device build's bytes).
        let mut c = serde_json::Map::new();
        for (k, v) in [
            (container::NAME, Value::from(n)),
            (container::VERSION, Value::from(p.version.to_string())),
            (container::STATE, Value::from(state)),
            (container::RESTARTS, Value::from(record.restarts)),
            (container::RETRIES, Value::from(record.retries)),
            (
                container::READY,
                Value::from(sup.as_ref().is_some_and(|s| s.ready) && running),
            ),
            (container::RESTART_IN_MS, Value::from(restart_in_ms)),
            (
                container::REASON,
                Value::from(sup.as_ref().and_then(|s| s.reason.clone())),
            ),
            (container::HEALTH, health.unwrap_or(Value::Null)),
            (container::INIT_PID, Value::from(pid)),
            (
                container::STARTED_AT,
                info.get(container::STARTED_AT)
                    .cloned()
                    .unwrap_or(Value::Null),
            ),
            (
                container::LOG_BYTES,
                info.get(container::LOG_BYTES)
                    .cloned()
                    .unwrap_or(Value::Null),
            ),
            (container::NETWORK, json!(p.manifest.summary().network_mode)),
            (
                container::AUTOSTART,
                Value::from(d.cfg.paths.autostart(n).exists()),
            ),
            (
                container::LAST_EXIT,
                if running {
                    Value::Null
                } else {
                    probe::exit_info(d, n)
                },
            ),
            (container::GUARD_KILL, records::last_guard_kill(d, n)),
            (container::IMAGE, Value::from(p.sha256.as_str())),
            (
                container::BINDINGS,
                runtime::bind::listing(d, &st, p, running),
            ),
        ] {
            c.insert(k.into(), v);
        }
        containers.push(Value::Object(c));
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
