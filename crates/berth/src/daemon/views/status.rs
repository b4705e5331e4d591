//! `berth status`: one view over the daemon, the repository and every container (its state
//! from the runtime, its last exit, the memory guard's last kill from the records).

use berth_core::api::{container, daemon, health as health_field, status as field};
use berth_core::state::State;
use berth_core::supervise::HealthState;
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::Result;
use crate::daemon::device::records;
use crate::daemon::device::state;
use crate::daemon::runtime::{self, probe};
use crate::daemon::store::repo;

/// One container as the daemon sees it: the typed model of which `berth status`'s JSON, the
/// Prometheus metrics, the TR-181 view and a container's `GET /v1/self` are renderings.
pub(crate) struct ContainerStatus {
    pub name: String,
    pub version: String,
    /// The supervisor's state (`running`, `starting`, `unhealthy`, `stopping`, `backoff`,
    /// `failed`, `stopped`), or what runs when it has not handled an event yet.
    pub state: &'static str,
    pub restarts: u32,
    pub retries: u32,
    pub ready: bool,
    pub restart_in_ms: Option<u64>,
    pub reason: Option<String>,
    pub health: Option<Health>,
    pub init_pid: Option<i32>,
    pub started_at: Option<u64>,
    /// How long it has run, by the boot-relative clocks (a wall clock set since does not
    /// change it).
    pub uptime_s: Option<u64>,
    /// Bytes in the log ring (only when the shim was asked: `live`).
    pub log_bytes: Option<u64>,
    pub network: berth_core::manifest::NetMode,
    pub autostart: bool,
    /// How its last run ended (its exit record; null while it runs).
    pub last_exit: Value,
    /// The memory guard's last kill (null: none).
    pub guard_kill: Value,
    pub image: String,
    pub bindings: Value,
}

/// A container's health, while its package has a check.
pub(crate) struct Health {
    pub status: &'static str,
    pub failures: u32,
    pub last: Option<String>,
    pub checked_at: Option<u64>,
}

impl ContainerStatus {
    /// Whether its init runs (as the status found it).
    #[cfg_attr(not(any(feature = "metrics", feature = "tr181")), allow(dead_code))]
    pub fn running(&self) -> bool {
        self.init_pid.is_some()
    }

    /// The JSON of `berth status` (docs/openapi.yaml, `Container`).
    pub fn to_json(&self) -> Value {
        let health = self.health.as_ref().map(|h| {
            json!({
                health_field::STATUS: h.status,
                health_field::FAILURES: h.failures,
                health_field::LAST: h.last,
                health_field::CHECKED_AT: h.checked_at,
            })
        });
        // A table, not json!: one insert loop instead of a serializer call per field (the
        // device build's bytes).
        let mut c = serde_json::Map::new();
        for (k, v) in [
            (container::NAME, Value::from(self.name.as_str())),
            (container::VERSION, Value::from(self.version.as_str())),
            (container::STATE, Value::from(self.state)),
            (container::RESTARTS, Value::from(self.restarts)),
            (container::RETRIES, Value::from(self.retries)),
            (container::READY, Value::from(self.ready)),
            (container::RESTART_IN_MS, Value::from(self.restart_in_ms)),
            (container::REASON, Value::from(self.reason.clone())),
            (container::HEALTH, health.unwrap_or(Value::Null)),
            (container::INIT_PID, Value::from(self.init_pid)),
            (container::STARTED_AT, Value::from(self.started_at)),
            (container::UPTIME_S, Value::from(self.uptime_s)),
            (container::LOG_BYTES, Value::from(self.log_bytes)),
            (container::NETWORK, json!(self.network)),
            (container::AUTOSTART, Value::from(self.autostart)),
            (container::LAST_EXIT, self.last_exit.clone()),
            (container::GUARD_KILL, self.guard_kill.clone()),
            (container::IMAGE, Value::from(self.image.as_str())),
            (container::BINDINGS, self.bindings.clone()),
        ] {
            c.insert(k.into(), v);
        }
        Value::Object(c)
    }
}

pub(crate) fn status(d: &Daemon, name: Option<&str>) -> Result<Value> {
    let containers = containers(d, &state::state(d), name, true)?;
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
            daemon::SPACE_WARNING: space_warning(d),
        },
        field::CONTAINERS: containers.iter().map(ContainerStatus::to_json).collect::<Vec<_>>(),
    });
    #[cfg(feature = "fleet")]
    {
        v[field::FLEET] = crate::daemon::fleet::status(d);
    }
    Ok(v)
}

/// A warning while the state partition has less free than `[upgrade] reserve`, berth's own
/// room: what is left, what it means, and who fills it.
fn space_warning(d: &Daemon) -> Option<String> {
    use crate::daemon::device::disk::mib;
    let state = &d.cfg.paths.state;
    let free = berth_sys::fsutil::free_bytes(state).ok()?;
    let reserve = d.cfg.upgrade.reserve;
    (free < reserve).then(|| {
        format!(
            "{} has {} free, less than [upgrade] reserve keeps for berth's own state: installs and upgrades that need room are refused; {}",
            state.display(),
            mib(free),
            crate::daemon::device::disk::holders_recent(&d.cfg.paths)
        )
    })
}

/// The containers of the installed set `st` (or only `name`, which must be installed). `live`: each container's shim is asked
/// (`berth status`); else the run as the supervisor follows it, without `log_bytes` (a
/// container's own `GET /v1/self`, which must not wait on its shim: the shim is in the
/// container's budget, and waits out the group's throttling when the group's CPU is spent).
pub(crate) fn containers(
    d: &Daemon,
    st: &State,
    name: Option<&str>,
    live: bool,
) -> Result<Vec<ContainerStatus>> {
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
        let (init, started_at, log_bytes) = match &sup {
            Some(s) if !live => (s.run, s.started_at, None),
            _ => {
                let info = probe::shim_info(d, n);
                (
                    info[container::INIT_PID].as_i64().map(|p| p as i32),
                    info[container::STARTED_AT].as_u64(),
                    info[container::LOG_BYTES].as_u64(),
                )
            }
        };
        let pid = match init {
            Some(pid) => Some(pid),
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
            .map(|s| Health {
                status: match s.health {
                    HealthState::Healthy => "healthy",
                    HealthState::Unhealthy => "unhealthy",
                    _ => "starting",
                },
                failures: s.failures,
                last: s.last_check.as_ref().map(|(l, _)| l.clone()),
                checked_at: s.last_check.as_ref().map(|(_, t)| *t),
            });
        let record = sup.as_ref().map(|s| s.record).unwrap_or_default();
        let restart_in_ms = sup.as_ref().and_then(|s| s.next_start).map(|t| {
            t.saturating_duration_since(std::time::Instant::now())
                .as_millis() as u64
        });
        containers.push(ContainerStatus {
            name: n.to_string(),
            version: p.version.to_string(),
            state,
            restarts: record.restarts,
            retries: record.retries,
            ready: sup.as_ref().is_some_and(|s| s.ready) && running,
            restart_in_ms,
            reason: sup.as_ref().and_then(|s| s.reason.clone()),
            health,
            init_pid: pid,
            started_at,
            uptime_s: pid.and_then(|p| berth_sys::process::uptime_of(d.proc(), p)),
            log_bytes,
            network: p.manifest.summary().network_mode,
            autostart: d.cfg.paths.autostart(n).exists(),
            last_exit: if running {
                Value::Null
            } else {
                probe::exit_info(d, n)
            },
            guard_kill: records::last_guard_kill(d, n),
            image: p.sha256.to_string(),
            bindings: runtime::bind::listing(d, st, p, running),
        });
    }
    Ok(containers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ContainerStatus {
        ContainerStatus {
            name: "web".into(),
            version: "1.2".into(),
            state: "running",
            restarts: 3,
            retries: 1,
            ready: true,
            restart_in_ms: None,
            reason: Some("exited with 1".into()),
            health: Some(Health {
                status: "healthy",
                failures: 0,
                last: Some("ok".into()),
                checked_at: Some(1_790_000_000),
            }),
            init_pid: Some(4242),
            started_at: Some(1_789_999_000),
            uptime_s: Some(1000),
            log_bytes: None,
            network: berth_core::manifest::NetMode::Isolated,
            autostart: false,
            last_exit: Value::Null,
            guard_kill: Value::Null,
            image: "ab12".into(),
            bindings: json!([]),
        }
    }

    /// The typed model renders exactly the fields docs/openapi.yaml requires of a container in
    /// `GET /v1/status`: no more, no fewer, whatever a later field's name.
    #[test]
    fn a_containers_json_has_the_documented_fields() {
        let spec = include_str!("../../../../../docs/openapi.yaml");
        let at = spec
            .find("description: One entry per installed package")
            .unwrap();
        let line = spec[at..]
            .lines()
            .find_map(|l| l.trim().strip_prefix("required: ["))
            .unwrap();
        let mut documented: Vec<&str> = line.trim_end_matches(']').split(", ").collect();
        documented.sort_unstable();
        let v = sample().to_json();
        let rendered: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(rendered, documented);
    }

    /// Each field renders as the API has always sent it (absent values as null).
    #[test]
    fn a_containers_json_keeps_its_shapes() {
        let c = sample();
        assert!(c.running());
        let v = c.to_json();
        assert_eq!(v[container::STATE], "running");
        assert_eq!(v[container::RESTARTS], 3);
        assert_eq!(v[container::INIT_PID], 4242);
        assert_eq!(v[container::NETWORK], "isolated");
        assert_eq!(v[container::RESTART_IN_MS], Value::Null);
        assert_eq!(v[container::LOG_BYTES], Value::Null);
        assert_eq!(v[container::REASON], "exited with 1");
        assert_eq!(
            v[container::HEALTH],
            json!({"status": "healthy", "failures": 0, "last": "ok", "checked_at": 1_790_000_000u64})
        );
        let stopped = ContainerStatus {
            init_pid: None,
            health: None,
            ..sample()
        };
        assert!(!stopped.running());
        assert_eq!(stopped.to_json()[container::HEALTH], Value::Null);
    }
}
