//! `berth limit` (a running container's limits changed in place, kept for the next start)
//! and `berth stats` (the group's and the containers' cgroup counters).

use std::time::{Duration, Instant};

#[cfg(feature = "shape")]
use berth_core::api::limits as limits_field;
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
#[cfg(feature = "shape")]
use crate::daemon::prepare::shape;
use crate::daemon::runtime::probe;

/// `berth limit NAME [--cpu P%] [--memory SIZE] [--pids N]`: checked against the policy,
/// written into the running container's cgroup, and kept for the next start.
pub(crate) fn limit(d: &Daemon, name: &str, newer: &Overrides) -> Result<Value> {
    let _op = d.op.lock().unwrap();
    let p = state::installed(d, name)?;
    let old = limits::load_overrides(&d.cfg, name);
    let ov = old.merged(newer);
    let limits = limits::limits_of(d, &p, &ov)?;
    #[cfg(feature = "shape")]
    let caps = ov.caps(&p.manifest.resources);
    #[cfg(feature = "shape")]
    shape::check(name, p.manifest.network.mode, caps)?;
    let running = probe::is_running(d, name);
    let mut applied = false;
    // The shapers first: when they fail, nothing else has changed.
    // In mode none there is nothing to shape.
    #[cfg(feature = "shape")]
    if running
        && newer.egress.or(newer.ingress).is_some()
        && p.manifest.network.mode == berth_core::manifest::NetMode::Isolated
    {
        let leases = crate::daemon::prepare::net::load_leases(d);
        let ip = berth_core::net::lease_of(&leases, name).ok_or_else(|| {
            Error::new(
                Kind::LimitFailed,
                format!("{name}: running without an address lease"),
            )
        })?;
        shape::apply(d, name, ip, caps, old.caps(&p.manifest.resources))?;
        applied = true;
    }
    // What goes into cgroup files (the rates are tc's).
    #[cfg(feature = "shape")]
    let cgroup =
        newer.cpu_max_percent.is_some() || newer.memory_max.is_some() || newer.pids_max.is_some();
    #[cfg(not(feature = "shape"))]
    let cgroup = *newer != Overrides::default();
    if running && cgroup {
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
    #[cfg(feature = "shape")]
    let in_force = {
        let mut l = limits.to_json();
        l[limits_field::EGRESS] = caps.egress.into();
        l[limits_field::INGRESS] = caps.ingress.into();
        l
    };
    #[cfg(not(feature = "shape"))]
    let in_force = limits.to_json();
    Ok(json!({
        field::NAME: name,
        field::RUNNING: running,
        field::APPLIED: applied,
        field::OVERRIDES: ov.to_json(),
        field::LIMITS: in_force,
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
    // The data caps' counts as the kernel has them now.
    #[cfg(feature = "shape")]
    crate::daemon::prepare::datacap::look(d, false);
    for (i, n) in names.iter().enumerate() {
        let mut v = stats_json(&first[i + 1], &second[i + 1], elapsed);
        v[stats::NAME] = json!(n);
        #[cfg(feature = "shape")]
        {
            v[berth_core::api::net::DATA] = crate::daemon::prepare::datacap::usage_of(d, n);
        }
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
        stats::WRITES: own_writes(d),
    });
    #[cfg(feature = "slab")]
    if let Some(s) = crate::daemon::device::slab::stats(d) {
        v[stats::SLAB] = s;
    }
    Ok(v)
}

/// `berth stats`' `writes`: the daemon's own writes since it started, and their rate.
pub(crate) fn own_writes(d: &Daemon) -> serde_json::Value {
    use berth_core::api::writes as w;
    let secs = d.started.elapsed().as_secs();
    let io = berth_sys::fsutil::own_writes(d.proc());
    // Not in the first minute: a start's writes over a few seconds are no rate.
    let per_hour = io
        .filter(|_| secs >= 60)
        .map(|(b, _)| b.saturating_mul(3600) / secs);
    serde_json::json!({
        w::BYTES: io.map(|(b, _)| b),
        w::SYSCALLS: io.map(|(_, c)| c),
        w::FSYNCS: berth_sys::fsutil::fsyncs(),
        w::SECONDS: secs,
        w::BYTES_PER_HOUR: per_hour,
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::daemon::base::testing::{fake_daemon, install, pretend_running, MANIFEST};
    use crate::daemon::runtime::probe::tests::cgroup_fixture;

    const POLICY: &str = "[policy]\nmemory_budget = \"256M\"\n";

    fn ov(memory: Option<u64>, pids: Option<u32>) -> Overrides {
        Overrides {
            cpu_max_percent: None,
            memory_max: memory,
            pids_max: pids,
            ..Overrides::default()
        }
    }

    /// `name`'s budget and payload cgroup directories in the fixture.
    fn dirs(d: &Daemon, name: &str) -> (PathBuf, PathBuf) {
        let budget = d.cgroup_root().join(&d.cfg.cgroup_parent).join(name);
        (budget.clone(), budget.join("payload"))
    }

    /// The limit files a change writes, empty (a cgroup file takes a write, untruncated).
    fn limit_files(d: &Daemon, name: &str) {
        let (budget, payload) = dirs(d, name);
        for dir in [&budget, &payload] {
            for f in ["memory.max", "memory.low", "pids.max"] {
                std::fs::write(dir.join(f), "").unwrap();
            }
        }
    }

    fn read(p: PathBuf) -> String {
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// A package that is not installed is refused by name, and nothing is kept for it.
    #[test]
    fn a_limit_of_a_package_not_installed_is_refused() {
        let (_dir, d, _) = fake_daemon("limit-missing", "");
        let e = limit(&d, "web", &ov(Some(16 << 20), None)).unwrap_err();
        assert_eq!(e.kind, Kind::NotInstalled);
        assert_eq!(e.message, "web is not installed (berth install web)");
        assert!(!d.cfg.paths.limits_file("web").exists());
    }

    /// A container that does not run gets its limits kept for the next start, nothing
    /// written to a cgroup (there are none here).
    #[test]
    fn a_stopped_containers_limits_are_kept_for_its_next_start() {
        let (_dir, d, _) = fake_daemon("limit-stopped", POLICY);
        install(&d, MANIFEST);
        let v = limit(&d, "web", &ov(Some(16 << 20), Some(40))).unwrap();
        assert_eq!(v[field::NAME], "web");
        assert_eq!(v[field::RUNNING], false);
        assert_eq!(v[field::APPLIED], false);
        assert_eq!(v[field::OVERRIDES]["memory_max"], 16u64 << 20);
        assert_eq!(v[field::LIMITS]["pids_max"], 40);
        assert_eq!(
            limits::load_overrides(&d.cfg, "web"),
            ov(Some(16 << 20), Some(40))
        );
        // A later change of one limit keeps the other.
        limit(&d, "web", &ov(None, Some(10))).unwrap();
        assert_eq!(
            limits::load_overrides(&d.cfg, "web"),
            ov(Some(16 << 20), Some(10))
        );
    }

    /// A limit beyond the policy is refused: nothing kept, nothing written.
    #[test]
    fn a_limit_beyond_the_policy_changes_nothing() {
        let (_dir, mut d, _) = fake_daemon("limit-beyond", POLICY);
        install(&d, MANIFEST);
        cgroup_fixture(&mut d, "web");
        limit_files(&d, "web");
        let _monitor = pretend_running(&d, "web");
        let e = limit(&d, "web", &ov(Some(512 << 20), None)).unwrap_err();
        assert_eq!(e.kind, Kind::BeyondPolicy);
        assert!(e.message.starts_with("web: memory "), "{}", e.message);
        assert!(!d.cfg.paths.limits_file("web").exists());
        assert_eq!(read(dirs(&d, "web").1.join("memory.max")), "");
    }

    /// A running container without usable cgroups: the change is refused saying why, and
    /// not kept either.
    #[test]
    fn a_running_container_without_cgroups_is_refused() {
        let (_dir, d, _) = fake_daemon("limit-nocg", POLICY);
        install(&d, MANIFEST);
        let _monitor = pretend_running(&d, "web");
        let e = limit(&d, "web", &ov(Some(16 << 20), None)).unwrap_err();
        assert_eq!(e.kind, Kind::NoCgroups);
        assert_eq!(e.message, "cannot change limits: fixture");
        assert!(!d.cfg.paths.limits_file("web").exists());
    }

    /// A running container's payload gets the limits as asked, its budget with room for
    /// berth's processes; only what the request changes is written; the change is kept.
    #[test]
    fn a_running_containers_payload_and_budget_are_written_and_the_change_kept() {
        let (_dir, mut d, _) = fake_daemon("limit-running", POLICY);
        install(&d, MANIFEST);
        cgroup_fixture(&mut d, "web");
        limit_files(&d, "web");
        let _monitor = pretend_running(&d, "web");
        let v = limit(&d, "web", &ov(Some(16 << 20), None)).unwrap();
        assert_eq!(
            (v[field::RUNNING].clone(), v[field::APPLIED].clone()),
            (true.into(), true.into())
        );
        let (budget, payload) = dirs(&d, "web");
        assert_eq!(read(payload.join("memory.max")), (16u64 << 20).to_string());
        let room = (16u64 << 20) + cg::BUDGET_MEMORY_OVERHEAD + d.cfg.log_ring_bytes as u64;
        assert_eq!(read(budget.join("memory.max")), room.to_string());
        assert_eq!(
            read(payload.join("pids.max")),
            "",
            "pids were not asked for"
        );
        assert_eq!(
            limits::load_overrides(&d.cfg, "web"),
            ov(Some(16 << 20), None)
        );

        limit_files(&d, "web");
        limit(&d, "web", &ov(None, Some(20))).unwrap();
        assert_eq!(read(payload.join("pids.max")), "20");
        assert_eq!(
            read(budget.join("pids.max")),
            (20 + cg::BUDGET_PIDS_OVERHEAD).to_string()
        );
        assert_eq!(
            read(payload.join("memory.max")),
            "",
            "memory was not asked again"
        );
        assert_eq!(
            limits::load_overrides(&d.cfg, "web"),
            ov(Some(16 << 20), Some(20))
        );
    }

    /// A cgroup write the kernel refuses (here a directory where the file is) fails the
    /// change naming the file and what was left; the change is not kept.
    #[test]
    fn a_refused_cgroup_write_fails_naming_the_file_and_keeps_nothing() {
        let (_dir, mut d, _) = fake_daemon("limit-refused", POLICY);
        install(&d, MANIFEST);
        cgroup_fixture(&mut d, "web");
        limit_files(&d, "web");
        let _monitor = pretend_running(&d, "web");
        let (budget, payload) = dirs(&d, "web");
        std::fs::remove_file(payload.join("memory.max")).unwrap();
        std::fs::create_dir(payload.join("memory.max")).unwrap();
        let e = limit(&d, "web", &ov(Some(16 << 20), None)).unwrap_err();
        assert_eq!(e.kind, Kind::LimitFailed);
        assert!(e.message.starts_with("web: "), "{}", e.message);
        assert!(e.message.contains("payload/memory.max"), "{}", e.message);
        assert!(
            e.message.ends_with("(the limits were not changed)"),
            "{}",
            e.message
        );
        assert_eq!(read(budget.join("memory.max")), "");
        assert!(!d.cfg.paths.limits_file("web").exists());

        // The payload's written, the budget's refused: said so.
        std::fs::remove_dir(payload.join("memory.max")).unwrap();
        std::fs::write(payload.join("memory.max"), "").unwrap();
        std::fs::remove_file(budget.join("memory.max")).unwrap();
        std::fs::create_dir(budget.join("memory.max")).unwrap();
        let e = limit(&d, "web", &ov(Some(16 << 20), None)).unwrap_err();
        assert_eq!(e.kind, Kind::LimitFailed);
        assert!(
            e.message
                .contains("the payload's were changed, its budget's were not"),
            "{}",
            e.message
        );
        assert_eq!(read(payload.join("memory.max")), (16u64 << 20).to_string());
        assert!(!d.cfg.paths.limits_file("web").exists());
    }

    fn sample(usage: Option<u64>) -> cgroupfs::Stats {
        cgroupfs::Stats {
            cpu_usage_usec: usage,
            cpu_quota_us: Some(20_000),
            cpu_period_us: Some(100_000),
            memory_current: Some(4096),
            pids_max: None,
            ..Default::default()
        }
    }

    /// CPU percent of one CPU from two samples; a cap from quota and period; counters as
    /// read, a missing one null; no percentage without two usages or without time.
    #[test]
    fn stats_json_computes_the_cpu_share_and_keeps_missing_counters_null() {
        let v = stats_json(
            &sample(Some(1_000_000)),
            &sample(Some(1_250_000)),
            Duration::from_millis(500),
        );
        assert_eq!(v[stats::CPU_PERCENT], 50.0);
        assert_eq!(v[stats::CPU_MAX_PERCENT], 20);
        assert_eq!(v[stats::CPU_USAGE_USEC], 1_250_000);
        assert_eq!(v[stats::MEMORY_CURRENT], 4096);
        assert_eq!(v[stats::PIDS_MAX], Value::Null);
        let v = stats_json(&sample(None), &sample(Some(9)), Duration::from_secs(1));
        assert_eq!(v[stats::CPU_PERCENT], Value::Null);
        let v = stats_json(&sample(Some(1)), &sample(Some(9)), Duration::ZERO);
        assert_eq!(v[stats::CPU_PERCENT], Value::Null);
        let mut no_period = sample(Some(1));
        no_period.cpu_period_us = Some(0);
        assert_eq!(
            stats_json(&no_period, &no_period, Duration::ZERO)[stats::CPU_MAX_PERCENT],
            Value::Null
        );
    }

    /// Without cgroups there are no stats (an error saying why) and no snapshot; a package
    /// not installed is refused by name.
    #[test]
    fn stats_without_cgroups_or_of_a_package_not_installed_are_refused() {
        let (_dir, mut d, _) = fake_daemon("stats-refused", "");
        let e = stats(&d, None).unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (Kind::NoCgroups, "no stats: fixture")
        );
        assert_eq!(snapshot(&d, "web"), None);
        cgroup_fixture(&mut d, "web");
        let e = stats(&d, Some("web")).unwrap_err();
        assert_eq!(e.kind, Kind::NotInstalled);
        assert_eq!(e.message, "web is not installed (berth install web)");
    }

    /// The group's counters and each running container's (its budget's CPU, its payload's
    /// memory and pids), read off the fixture; a container that does not run is not listed.
    #[test]
    fn stats_show_the_group_and_the_running_containers_counters() {
        let (_dir, mut d, _) = fake_daemon("stats-fixture", "");
        install(&d, MANIFEST);
        install(
            &d,
            "[package]\nname = \"db\"\nversion = \"1.0\"\n[entrypoint]\nargv = [\"/bin/db\"]\n",
        );
        cgroup_fixture(&mut d, "web");
        let _monitor = pretend_running(&d, "web");
        let v = stats(&d, None).unwrap();
        assert_eq!(v[stats::CGROUP_VERSION], "v2");
        assert_eq!(v[stats::CPUS], 1);
        assert!(v[stats::SAMPLE_MS].as_u64().unwrap() >= STATS_SAMPLE.as_millis() as u64);
        // The daemon's own writes: its fake /proc has no self/io (no task I/O accounting).
        let w = &v[stats::WRITES];
        assert!(w["bytes"].is_null() && w["bytes_per_hour"].is_null(), "{w}");
        assert!(w["fsyncs"].is_u64() && w["seconds"].is_u64(), "{w}");
        std::fs::create_dir_all(d.proc().join("self")).unwrap();
        std::fs::write(d.proc().join("self/io"), "syscw: 9\nwrite_bytes: 4096\n").unwrap();
        let w = own_writes(&d);
        // A daemon up less than a minute has no rate yet.
        assert!(w["bytes_per_hour"].is_null(), "{w}");
        assert_eq!(
            (&w["bytes"], &w["syscalls"]),
            (&json!(4096), &json!(9)),
            "{w}"
        );
        let g = &v[stats::GROUP];
        assert_eq!(g[stats::CGROUP], d.cfg.cgroup_parent.as_str());
        assert_eq!(g[stats::MEMORY_CURRENT], 16u64 << 20);
        assert_eq!(g[stats::MEMORY_MAX], 64u64 << 20);
        let list = v[stats::CONTAINERS].as_array().unwrap();
        assert_eq!(list.len(), 1, "{list:?}");
        let web = &list[0];
        assert_eq!(web[stats::NAME], "web");
        assert_eq!(web[stats::CPU_USAGE_USEC], 5_000_000);
        assert_eq!(web[stats::NR_THROTTLED], 2);
        assert_eq!(web[stats::MEMORY_CURRENT], 2u64 << 20);
        assert_eq!(web[stats::MEMORY_MAX], 8u64 << 20);
        assert_eq!(web[stats::PIDS_CURRENT], 3);
        assert_eq!(
            web[stats::CPU_PERCENT],
            0.0,
            "the fixture's usage does not move"
        );

        let one = stats(&d, Some("db")).unwrap();
        assert_eq!(
            one[stats::CONTAINERS],
            serde_json::json!([]),
            "db does not run"
        );
        let snap = snapshot(&d, "web").unwrap();
        assert_eq!(snap[stats::PIDS_CURRENT], 3);
        assert_eq!(snap[stats::CPU_PERCENT], Value::Null);
    }
}
