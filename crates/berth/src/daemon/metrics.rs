//! `GET /metrics`: the daemon, its containers, the governor, the store and data, in
//! Prometheus's text format (docs/metrics.md). Served on the admin socket (root only) and, when
//! the policy sets `[metrics] listen`, on that TCP address (read-only: this is the only path it
//! answers). Everything is read when scraped, from the same sources `berth status`, `stats`,
//! `net` and `governor` use; nothing is sampled in the background.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use berth_core::api::{governor as gov, net as netf};
use berth_core::metrics::{Exposition, Kind};
use serde_json::Value;

use crate::daemon::context::Daemon;
use crate::daemon::{cgroups, disk, governor, net, state, status};

/// The states a container can be in (`berth status`), each a series of the state set.
const STATES: [&str; 7] = [
    "running",
    "starting",
    "unhealthy",
    "stopping",
    "backoff",
    "failed",
    "stopped",
];

pub(crate) fn text(d: &Daemon) -> String {
    let mut e = Exposition::new();
    daemon_part(d, &mut e);
    let st = state::state(d);
    let containers = status::containers(d, &st, None, true).unwrap_or_default();

    e.family(
        "berth_packages_installed",
        Kind::Gauge,
        "Packages installed on the device.",
    );
    e.sample(&[], Some(st.packages.len() as f64));
    e.family(
        "berth_container_state",
        Kind::Gauge,
        "1 for the state the container is in (berth status), 0 for the others.",
    );
    for c in &containers {
        for state in STATES {
            e.sample(
                &[("container", c.name.as_str()), ("state", state)],
                Some(f64::from(u8::from(c.state == state))),
            );
        }
    }
    e.family(
        "berth_container_restarts_total",
        Kind::Counter,
        "Restarts made by the supervisor since the operator last started the container.",
    );
    for c in &containers {
        e.sample(
            &[("container", c.name.as_str())],
            Some(f64::from(c.restarts)),
        );
    }
    e.family(
        "berth_container_guard_kills_total",
        Kind::Counter,
        "Kills by berth's memory guard since the device booted.",
    );
    for c in &containers {
        let k = &c.guard_kill;
        // A kill recorded before kills were counted is one.
        let count = match k.is_null() {
            true => Some(0.0),
            false => k[berth_core::api::guard_kill::COUNT].as_f64().or(Some(1.0)),
        };
        e.sample(&[("container", c.name.as_str())], count);
    }
    // Running: what the status answer found (its init pid), without asking each shim again.
    let running: Vec<&str> = containers
        .iter()
        .filter(|c| c.running())
        .map(|c| c.name.as_str())
        .collect();
    cgroup_part(d, &running, &mut e);
    network_part(d, &st, &mut e);
    governor_part(d, &mut e);
    storage_part(d, &mut e);
    e.finish()
}

fn daemon_part(d: &Daemon, e: &mut Exposition) {
    e.family(
        "berth_info",
        Kind::Gauge,
        "Always 1: the berth version and cgroup version as labels.",
    );
    let cg = match d.resources.cgroups.as_ref() {
        Ok(c) => cgroups::core_version(c).name(),
        Err(_) => "none",
    };
    e.sample(
        &[("version", env!("CARGO_PKG_VERSION")), ("cgroup", cg)],
        Some(1.0),
    );
    e.family(
        "berth_safe_mode",
        Kind::Gauge,
        "1 while the daemon is in safe mode (no image mounted, no container started).",
    );
    e.sample(&[], Some(f64::from(u8::from(d.safe_mode().is_some()))));
    e.family(
        "berth_daemon_resident_memory_bytes",
        Kind::Gauge,
        "The daemon's resident set size.",
    );
    e.sample(&[], own_rss(d.proc()));
    e.family(
        "berth_daemon_uptime_seconds",
        Kind::Gauge,
        "Seconds since this daemon started.",
    );
    e.sample(&[], Some(d.started.elapsed().as_secs_f64().floor()));
}

/// VmRSS of /proc/self/status, in bytes.
fn own_rss(proc_root: &Path) -> Option<f64> {
    let s = std::fs::read_to_string(proc_root.join("self/status")).ok()?;
    let kb: f64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024.0)
}

/// Per running container and for berth's whole group: CPU, throttling, memory, pids, OOM.
fn cgroup_part(d: &Daemon, names: &[&str], e: &mut Exposition) {
    let Ok(c) = d.resources.cgroups.as_ref() else {
        return;
    };
    let running: Vec<(&str, berth_sys::cgroupfs::Stats)> = names
        .iter()
        .map(|n| (*n, cgroups::container_stats(c, d, n)))
        .collect();
    let group = c.stats(&d.cfg.cgroup_parent);
    let us = |v: Option<u64>| v.map(|x| x as f64 / 1e6);
    let n = |v: Option<u64>| v.map(|x| x as f64);
    type Field = fn(&berth_sys::cgroupfs::Stats) -> Option<u64>;
    let families: [(&str, &str, Kind, Field, bool); 9] = [
        (
            "cpu_seconds_total",
            "CPU time used.",
            Kind::Counter,
            |s| s.cpu_usage_usec,
            true,
        ),
        (
            "cpu_throttled_seconds_total",
            "Time the CPU cap held the cgroup back.",
            Kind::Counter,
            |s| s.throttled_usec,
            true,
        ),
        (
            "cpu_periods_total",
            "CFS enforcement periods with runnable tasks.",
            Kind::Counter,
            |s| s.nr_periods,
            false,
        ),
        (
            "cpu_throttled_periods_total",
            "CFS periods in which the cap throttled the cgroup.",
            Kind::Counter,
            |s| s.nr_throttled,
            false,
        ),
        (
            "memory_bytes",
            "Memory charged to the cgroup now.",
            Kind::Gauge,
            |s| s.memory_current,
            false,
        ),
        (
            "memory_limit_bytes",
            "The cgroup's memory limit (absent when unlimited).",
            Kind::Gauge,
            |s| s.memory_max,
            false,
        ),
        (
            "oom_kills_total",
            "Processes the kernel's OOM killer ended in the cgroup.",
            Kind::Counter,
            |s| s.oom_kills,
            false,
        ),
        (
            "pids",
            "Tasks in the cgroup.",
            Kind::Gauge,
            |s| s.pids_current,
            false,
        ),
        (
            "pids_limit",
            "The cgroup's task limit (absent when unlimited).",
            Kind::Gauge,
            |s| s.pids_max,
            false,
        ),
    ];
    for (suffix, help, kind, field, micro) in families {
        let conv = |v| if micro { us(v) } else { n(v) };
        e.family(&format!("berth_container_{suffix}"), kind, help);
        for (name, s) in &running {
            e.sample(&[("container", *name)], conv(field(s)));
        }
        e.family(
            &format!("berth_group_{suffix}"),
            kind,
            &format!("{help} Of berth's cgroup, every container together."),
        );
        e.sample(&[], conv(field(&group)));
    }
}

/// Isolated containers: bytes through their veth (from the container's side) and the packets
/// berth's nftables rules dropped as spoofed or denied.
fn network_part(d: &Daemon, st: &berth_core::state::State, e: &mut Exposition) {
    let v = net::status(d, st).unwrap_or(Value::Null);
    let list: Vec<&Value> = v[netf::CONTAINERS]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let with_veth: Vec<(&str, &str)> = list
        .iter()
        .filter_map(|c| Some((c[netf::NAME].as_str()?, c[netf::VETH].as_str()?)))
        .collect();
    // The host's end of each pair, from /proc/net/dev (the daemon's network namespace, which
    // /sys may not show when the daemon was moved into one): what it receives, the container
    // sent.
    let dev = std::fs::read_to_string(d.proc().join("net/dev")).unwrap_or_default();
    let counters = |veth: &str| -> Option<(f64, f64)> {
        let line = dev
            .lines()
            .find_map(|l| l.trim_start().strip_prefix(veth)?.strip_prefix(':'))?;
        let f: Vec<f64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        Some((*f.first()?, *f.get(8)?))
    };
    for (metric, transmit, help) in [
        (
            "berth_container_network_receive_bytes_total",
            true,
            "Bytes the container received through its veth (isolated mode).",
        ),
        (
            "berth_container_network_transmit_bytes_total",
            false,
            "Bytes the container sent through its veth (isolated mode).",
        ),
    ] {
        e.family(metric, Kind::Counter, help);
        for &(n, veth) in &with_veth {
            let val = counters(veth).map(|(rx, tx)| if transmit { tx } else { rx });
            e.sample(&[("container", n)], val);
        }
    }
    for (metric, field, help) in [
        (
            "berth_container_spoofed_packets_dropped_total",
            netf::DROPPED_SPOOFED,
            "Packets from the container with another address or MAC, dropped (anti-spoofing).",
        ),
        (
            "berth_container_denied_packets_dropped_total",
            netf::DROPPED_DENIED,
            "Packets from the container to where its manifest does not allow, dropped.",
        ),
    ] {
        e.family(metric, Kind::Counter, help);
        for c in &list {
            if let (Some(n), Some(x)) = (c[netf::NAME].as_str(), c[field].as_f64()) {
                e.sample(&[("container", n)], Some(x));
            }
        }
    }
}

fn governor_part(d: &Daemon, e: &mut Exposition) {
    let g = governor::status(d);
    let pct = |k: &str| g[k].as_f64().map(|p| p / 100.0);
    e.family(
        "berth_governor_cap_ratio",
        Kind::Gauge,
        "The containers' CPU cap in force, as a fraction of all CPUs.",
    );
    e.sample(
        &[("mode", g[gov::MODE].as_str().unwrap_or(""))],
        pct(gov::CAP),
    );
    e.family(
        "berth_governor_target_ratio",
        Kind::Gauge,
        "The cap the governor is moving to, as a fraction of all CPUs.",
    );
    e.sample(&[], pct(gov::TARGET));
    e.family(
        "berth_governor_normal_responses_per_second",
        Kind::Gauge,
        "R_n: the probe's normal response rate (configured or learned).",
    );
    e.sample(&[], g[gov::R_N].as_f64());
    e.family(
        "berth_governor_current_responses_per_second",
        Kind::Gauge,
        "R_c: the probe's current response rate.",
    );
    e.sample(&[], g[gov::R_C].as_f64());
    e.family(
        "berth_governor_probes_total",
        Kind::Counter,
        "Probes the governor has made.",
    );
    e.sample(&[], g[gov::PROBES].as_f64());
}

/// Store and data usage, walked at most once a minute (a scrape every few seconds must not
/// walk every container's /data each time).
/// Store and data usage (walked at most once a minute, `disk::usage`).
fn storage_part(d: &Daemon, e: &mut Exposition) {
    let u = disk::usage(d);
    e.family(
        "berth_store_bytes",
        Kind::Gauge,
        "Disk space used by the package images in the store.",
    );
    e.sample(&[], Some(u.store as f64));
    e.family(
        "berth_container_data_bytes",
        Kind::Gauge,
        "Disk space used by the container's /data (its image, with containers.data_size).",
    );
    for (n, b) in &u.data {
        e.sample(&[("container", n.as_str())], Some(*b as f64));
    }
}

/// The TCP listener of `[metrics] listen`: one thread, one request at a time (a scraper asks
/// every few seconds); anything but `GET /metrics` gets 404, a slow client 5 s at most.
pub(crate) fn spawn_listener(d: &Arc<Daemon>) {
    let Some(addr) = d.cfg.metrics.listen.clone() else {
        return;
    };
    let listener = match TcpListener::bind(&addr) {
        Ok(l) => l,
        Err(e) => {
            log::error!("[metrics] listen = {addr:?}: cannot listen: {e}; no TCP metrics");
            return;
        }
    };
    log::info!("metrics on http://{addr}/metrics");
    let d = Arc::clone(d);
    let spawned = std::thread::Builder::new()
        .name("metrics".into())
        .stack_size(128 * 1024)
        .spawn(move || {
            for s in listener.incoming().flatten() {
                serve_tcp(&d, s);
            }
        });
    if let Err(e) = spawned {
        log::error!("cannot start the metrics thread: {e}");
    }
}

fn serve_tcp(d: &Daemon, mut s: TcpStream) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let mut words = line.split(|b| *b == b' ');
    let (method, path) = (words.next(), words.next());
    let (status, body) = match (method, path) {
        (Some(b"GET"), Some(b"/metrics")) => (200, text(d)),
        _ => (404, "only GET /metrics is served here\n".to_string()),
    };
    let ctype = if status == 200 {
        berth_core::metrics::CONTENT_TYPE
    } else {
        "text/plain"
    };
    let _ = s.write_all(&berth_core::http::response(status, ctype, body.as_bytes()));
}
