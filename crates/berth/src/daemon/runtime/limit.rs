//! `berth limit` (a running container's limits changed in place, kept for the next start)
//! and `berth stats` (the group's and the containers' cgroup counters).

use std::time::{Duration, Instant};

use berth_core::api::{limit as field, stats};
use berth_core::cgroup::{self as cg, Limits, Overrides};
use berth_sys::cgroupfs;
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::device::cgroups;
use crate::daemon::device::governor;
use crate::daemon::device::state;
use crate::daemon::prepare::limits;
use crate::daemon::runtime::probe;

/// `berth limit NAME [--cpu P%] [--memory SIZE] [--pids N]`: checked against the policy,
/// written into the running container's cgroup, and kept for the next start.
pub(crate) fn limit(d: &Daemon, name: &str, newer: &Overrides) -> Result<Value> {
    let _op = d.op.lock().unwrap();
    let p = state::installed(d, name)?;
    let old = limits::load_overrides(&d.cfg, name);
    let ov = old.merged(newer);
    let limits = limits::limits_of(d, &p, &ov)?;
    let running = probe::is_running(d, name);
    let mut applied = false;
    if running && *newer != Overrides::default() {
        let c = d
            .resources
            .cgroups
            .as_ref()
            .map_err(|e| Error::new(Kind::NoCgroups, format!("cannot change limits: {e}")))?;
        let version = cgroups::core_version(c);
        // Only what this request changes: the other files already hold their values.
        let changed = Limits {
            cpu_max_percent: newer
                .cpu_max_percent
                .and(limits.cpu_max_percent)
                .map(|p| governor::fit_container_cpu(d, name, p)),
            memory_max: newer.memory_max.and(limits.memory_max),
            memory_soft: newer.memory_max.and(limits.memory_soft),
            pids_max: newer.pids_max.and(limits.pids_max),
            ..Limits::default()
        };
        // The payload's own, then the budget (CPU, memory and pids with room for berth's
        // processes): lowered, the payload gives back first, so the budget's lower limit
        // finds it under; raised, the payload's higher limit waits on the budget's, which
        // follows. A container started before the budget had leaves has one cgroup.
        let budget = cgroups::container_cgroup(d, name);
        let payload = cgroups::payload_cgroup(d, name);
        let parts = if payload == budget {
            vec![(budget, changed)]
        } else {
            vec![
                (payload, changed.payload()),
                (budget, changed.budget(d.cfg.log_ring_bytes as u64)),
            ]
        };
        let n = parts.len();
        for (i, (rel, l)) in parts.into_iter().enumerate() {
            let files = cg::files(version, &l);
            let a = c
                .apply(
                    &rel,
                    files.iter().map(|(k, f, v)| (k.name(), *f, v.as_str())),
                )
                .map_err(|e| {
                    let what = match (i, n) {
                        (0, _) => "the limits were not changed",
                        _ => "the payload's were changed, its budget's were not: berth limit again, or restart it",
                    };
                    Error::new(Kind::LimitFailed, format!("{name}: {e} ({what})"))
                })?;
            if let Some(note) = a.missing_note() {
                log::warn!("{name}: {note}");
            }
        }
        applied = true;
    }
    if ov != old {
        limits::save_overrides(d, name, &ov)?;
        log::info!("{name}: limits set to {}", ov.to_json());
    }
    Ok(json!({
        field::NAME: name,
        field::RUNNING: running,
        field::APPLIED: applied,
        field::OVERRIDES: ov.to_json(),
        field::LIMITS: limits.to_json(),
    }))
}

/// One cgroup's counters as JSON; `cpu_percent` (of one CPU) from two usage samples.
pub(crate) fn stats_json(s0: &cgroupfs::Stats, s1: &cgroupfs::Stats, elapsed: Duration) -> Value {
    let cpu_percent = match (s0.cpu_usage_usec, s1.cpu_usage_usec) {
        (Some(a), Some(b)) if elapsed.as_micros() > 0 => {
            Some(b.saturating_sub(a) as f64 * 100.0 / elapsed.as_micros() as f64)
        }
        _ => None,
    };
    let cpu_max_percent = match (s1.cpu_quota_us, s1.cpu_period_us) {
        (Some(q), Some(p)) if p > 0 => Some(q * 100 / p),
        _ => None,
    };
    let mut m = serde_json::Map::new();
    m.insert(
        stats::CPU_PERCENT.into(),
        cpu_percent.map(|p| (p * 10.0).round() / 10.0).into(),
    );
    m.insert(stats::CPU_MAX_PERCENT.into(), cpu_max_percent.into());
    // A table, not json!: one insert loop instead of a serializer call per field.
    for (k, v) in [
        (stats::CPU_USAGE_USEC, s1.cpu_usage_usec),
        (stats::NR_PERIODS, s1.nr_periods),
        (stats::NR_THROTTLED, s1.nr_throttled),
        (stats::THROTTLED_USEC, s1.throttled_usec),
        (stats::MEMORY_CURRENT, s1.memory_current),
        (stats::MEMORY_PEAK, s1.memory_peak),
        (stats::MEMORY_MAX, s1.memory_max),
        (stats::OOM_KILLS, s1.oom_kills),
        (stats::PIDS_CURRENT, s1.pids_current),
        (stats::PIDS_MAX, s1.pids_max),
    ] {
        m.insert(k.into(), v.into());
    }
    Value::Object(m)
}

/// One container's usage now, without sampling (no CPU percentage: the counters are there):
/// for its own `GET /v1/self`, which must answer at once. None without cgroups.
pub(crate) fn snapshot(d: &Daemon, name: &str) -> Option<Value> {
    let c = d.resources.cgroups.as_ref().ok()?;
    let s = cgroups::container_stats(c, d, name);
    Some(stats_json(&s, &s, Duration::ZERO))
}

/// How long `berth stats` samples CPU usage.
pub(crate) const STATS_SAMPLE: Duration = Duration::from_millis(500);

pub(crate) fn stats(d: &Daemon, name: Option<&str>) -> Result<Value> {
    let c = d
        .resources
        .cgroups
        .as_ref()
        .map_err(|e| Error::new(Kind::NoCgroups, format!("no stats: {e}")))?;
    let st = state::state(d);
    if let Some(n) = name {
        state::installed(d, n)?;
    }
    let names: Vec<String> = st
        .packages
        .keys()
        .filter(|n| match name {
            Some(x) => x == n.as_str(),
            None => true,
        })
        .filter(|n| probe::is_running(d, n))
        .cloned()
        .collect();
    let group = d.cfg.cgroup_parent.clone();
    let read = || -> Vec<cgroupfs::Stats> {
        std::iter::once(c.stats(&group))
            .chain(names.iter().map(|n| cgroups::container_stats(c, d, n)))
            .collect()
    };
    let t0 = Instant::now();
    let first = read();
    std::thread::sleep(STATS_SAMPLE);
    let elapsed = t0.elapsed();
    let second = read();
    let mut containers = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let mut v = stats_json(&first[i + 1], &second[i + 1], elapsed);
        v[stats::NAME] = json!(n);
        containers.push(v);
    }
    let mut g = stats_json(&first[0], &second[0], elapsed);
    g[stats::CGROUP] = json!(group);
    #[allow(unused_mut)]
    let mut v = json!({
        stats::CGROUP_VERSION: cgroups::core_version(c).name(),
        stats::CPUS: d.resources.host.cpus,
        stats::SAMPLE_MS: elapsed.as_millis() as u64,
        stats::GROUP: g,
        stats::CONTAINERS: containers,
    });
    #[cfg(feature = "slab")]
    if let Some(s) = crate::daemon::device::slab::stats(d) {
        v[stats::SLAB] = s;
    }
    Ok(v)
}
