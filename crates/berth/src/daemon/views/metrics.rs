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

use crate::daemon::base::context::Daemon;
use crate::daemon::device::{cgroups, disk, governor, state};
use crate::daemon::prepare::net;
use crate::daemon::views::status;

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
    let io = berth_sys::fsutil::own_writes(d.proc());
    e.family(
        "berth_daemon_written_bytes_total",
        Kind::Counter,
        "Bytes the daemon itself wrote to storage since it started (/proc/self/io write_bytes; absent without task I/O accounting).",
    );
    e.sample(&[], io.map(|(b, _)| b as f64));
    e.family(
        "berth_daemon_fsyncs_total",
        Kind::Counter,
        "fsyncs the daemon asked for since it started.",
    );
    e.sample(&[], Some(berth_sys::fsutil::fsyncs() as f64));
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
    #[cfg(feature = "shape")]
    data_caps(&v, &list, e);
}

/// The data caps: each capped container's cap and what it moved over the WAN in its period,
/// and whether the line is metered.
#[cfg(feature = "shape")]
fn data_caps(v: &Value, list: &[&Value], e: &mut Exposition) {
    for (metric, key, help) in [
        (
            "berth_container_data_cap_bytes",
            "cap",
            "The container's data cap in force: bytes over the WAN a period.",
        ),
        (
            "berth_container_data_used_bytes",
            "used",
            "Bytes the container moved over the WAN (both ways) in its cap's period.",
        ),
    ] {
        e.family(metric, Kind::Gauge, help);
        for c in list {
            if let Some(n) = c[netf::NAME].as_str() {
                if let Some(x) = c[netf::DATA][key].as_f64() {
                    e.sample(&[("container", n)], Some(x));
                }
            }
        }
    }
    e.family(
        "berth_line_metered",
        Kind::Gauge,
        "1 while the line is metered (the policy's metered data caps apply).",
    );
    e.sample(&[], v["metered"].as_bool().map(|m| f64::from(u8::from(m))));
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
    let spawned = berth_sys::process::spawn_thread(
        "metrics".into(),
        128 * 1024,
        Box::new(move || {
            for s in listener.incoming().flatten() {
                serve_tcp(&d, s);
            }
        }),
    );
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use berth_core::supervise::Record;
    use serde_json::json;

    use super::*;
    use crate::daemon::base::testing::{fake_daemon, install, MANIFEST};
    use crate::daemon::runtime::probe::tests::{
        cgroup_fixture, info, lxc_config, supervised, FakeShim,
    };

    const DB: &str =
        "[package]\nname = \"db\"\nversion = \"2.1\"\n[entrypoint]\nargv = [\"/bin/db\"]\n";

    fn is_name(s: &str) -> bool {
        !s.is_empty()
            && !s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    }

    /// A series' labels, `{k="v",…}`, checked as the format spells them (values escaped).
    fn check_labels(series: &str, inner: &str) {
        let mut rest = inner;
        while !rest.is_empty() {
            let (k, after) = rest.split_once("=\"").unwrap_or_else(|| panic!("{series}"));
            assert!(is_name(k), "label name {k:?} in {series}");
            let mut end = None;
            let mut escaped = false;
            for (i, c) in after.char_indices() {
                match (escaped, c) {
                    (true, '\\' | '"' | 'n') => escaped = false,
                    (true, _) => panic!("bad escape in {series}"),
                    (false, '\\') => escaped = true,
                    (false, '"') => {
                        end = Some(i);
                        break;
                    }
                    (false, _) => {}
                }
            }
            let end = end.unwrap_or_else(|| panic!("unterminated value in {series}"));
            rest = &after[end + 1..];
            if !rest.is_empty() {
                rest = rest.strip_prefix(',').unwrap_or_else(|| panic!("{series}"));
            }
        }
    }

    /// The exposition read as a scraper reads it, every rule checked: each family's HELP
    /// then TYPE once, before its samples; counters named `_total`; each sample of the
    /// family announced last, its labels well formed, its value a number, no series twice.
    /// The families in order, and the samples by series.
    fn parse(text: &str) -> (Vec<String>, BTreeMap<String, f64>) {
        assert!(text.ends_with('\n'));
        let (mut families, mut samples) = (Vec::new(), BTreeMap::new());
        let mut current = String::new();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if let Some(help) = line.strip_prefix("# HELP ") {
                let name = help.split(' ').next().unwrap().to_string();
                assert!(is_name(&name), "{line}");
                assert!(!families.contains(&name), "{name} announced twice");
                let ty = lines.next().unwrap_or_default();
                let kind = ty.strip_prefix(&format!("# TYPE {name} "));
                match kind {
                    Some("counter") => assert!(name.ends_with("_total"), "{name}"),
                    Some("gauge") => {}
                    _ => panic!("{name}: TYPE line {ty:?}"),
                }
                families.push(name.clone());
                current = name;
                continue;
            }
            assert!(!line.starts_with('#'), "{line}");
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, Some(l.strip_suffix('}').unwrap())),
                None => (series, None),
            };
            assert_eq!(name, current, "a sample outside its family: {line}");
            if let Some(l) = labels {
                check_labels(series, l);
            }
            let v: f64 = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("value of {line}")),
            };
            assert!(
                samples.insert(series.to_string(), v).is_none(),
                "{series} twice"
            );
        }
        (families, samples)
    }

    /// Every family of docs/metrics.md without cgroups, in order, and a stopped container's
    /// series: its state set (stopped), its counters at 0.
    #[test]
    fn the_exposition_is_well_formed_with_every_family() {
        let (_dir, d, _m) = fake_daemon("metrics-families", "");
        install(&d, MANIFEST);
        install(&d, DB);
        let (families, s) = parse(&text(&d));
        assert_eq!(
            families,
            [
                "berth_info",
                "berth_safe_mode",
                "berth_daemon_resident_memory_bytes",
                "berth_daemon_uptime_seconds",
                "berth_daemon_written_bytes_total",
                "berth_daemon_fsyncs_total",
                "berth_packages_installed",
                "berth_container_state",
                "berth_container_restarts_total",
                "berth_container_guard_kills_total",
                "berth_container_network_receive_bytes_total",
                "berth_container_network_transmit_bytes_total",
                "berth_container_spoofed_packets_dropped_total",
                "berth_container_denied_packets_dropped_total",
                #[cfg(feature = "shape")]
                "berth_container_data_cap_bytes",
                #[cfg(feature = "shape")]
                "berth_container_data_used_bytes",
                #[cfg(feature = "shape")]
                "berth_line_metered",
                "berth_governor_cap_ratio",
                "berth_governor_target_ratio",
                "berth_governor_normal_responses_per_second",
                "berth_governor_current_responses_per_second",
                "berth_governor_probes_total",
                "berth_store_bytes",
                "berth_container_data_bytes",
            ]
        );
        let info = format!(
            "berth_info{{version=\"{}\",cgroup=\"none\"}}",
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(s[&info], 1.0);
        assert_eq!(s["berth_packages_installed"], 2.0);
        let states: Vec<(&String, &f64)> = s
            .iter()
            .filter(|(k, _)| k.starts_with("berth_container_state{container=\"db\""))
            .collect();
        assert_eq!(states.len(), STATES.len());
        for (k, v) in states {
            assert_eq!(
                *v,
                f64::from(u8::from(k.ends_with("state=\"stopped\"}"))),
                "{k}"
            );
        }
        assert_eq!(s["berth_container_restarts_total{container=\"web\"}"], 0.0);
        assert_eq!(
            s["berth_container_guard_kills_total{container=\"web\"}"],
            0.0
        );
        assert!(
            !s.contains_key("berth_daemon_resident_memory_bytes"),
            "no /proc/self/status"
        );
        assert!(
            !s.contains_key("berth_daemon_written_bytes_total"),
            "no /proc/self/io"
        );
    }

    /// The supervisor's state and restarts, the guard's kills (a record from before kills
    /// were counted is one), the daemon's RSS from its /proc, and the safe mode gauge.
    #[test]
    fn per_container_samples_and_the_safe_mode_gauge() {
        let (_dir, d, _m) = fake_daemon("metrics-samples", "");
        install(&d, MANIFEST);
        install(&d, DB);
        let record = Record {
            restarts: 6,
            ..Record::default()
        };
        let s = supervised("failed", Some("exit 1"), record);
        d.supervision.lock().unwrap().insert("web".into(), s);
        let mut kills = d.guard_kills.lock().unwrap();
        kills.insert("web".into(), json!({"at": 1, "init": false, "count": 3}));
        kills.insert("db".into(), json!({"at": 1, "init": false}));
        drop(kills);
        std::fs::create_dir_all(d.proc().join("self")).unwrap();
        std::fs::write(
            d.proc().join("self/status"),
            "Name:\tberth\nVmRSS:\t  2048 kB\n",
        )
        .unwrap();
        std::fs::write(
            d.proc().join("self/io"),
            "rchar: 1\nwchar: 900\nsyscr: 1\nsyscw: 12\nread_bytes: 0\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n",
        )
        .unwrap();
        let (_, s) = parse(&text(&d));
        assert_eq!(s["berth_daemon_written_bytes_total"], 8192.0);
        assert!(s.contains_key("berth_daemon_fsyncs_total"));
        assert_eq!(
            s["berth_container_state{container=\"web\",state=\"failed\"}"],
            1.0
        );
        assert_eq!(
            s["berth_container_state{container=\"web\",state=\"stopped\"}"],
            0.0
        );
        assert_eq!(s["berth_container_restarts_total{container=\"web\"}"], 6.0);
        assert_eq!(s["berth_container_restarts_total{container=\"db\"}"], 0.0);
        assert_eq!(
            s["berth_container_guard_kills_total{container=\"web\"}"],
            3.0
        );
        assert_eq!(
            s["berth_container_guard_kills_total{container=\"db\"}"],
            1.0
        );
        assert_eq!(s["berth_daemon_resident_memory_bytes"], 2048.0 * 1024.0);
        assert_eq!(s["berth_safe_mode"], 0.0);
        *d.boot.safe_mode.lock().unwrap() = Some("5 daemon starts".into());
        assert_eq!(parse(&text(&d)).1["berth_safe_mode"], 1.0);
    }

    /// A running container's cgroup counters (seconds from microseconds; an unlimited
    /// limit left out), and berth's group's.
    #[test]
    fn a_running_containers_cgroup_samples() {
        let (_dir, mut d, _m) = fake_daemon("metrics-cgroups", "");
        install(&d, MANIFEST);
        cgroup_fixture(&mut d, "web");
        lxc_config(&d, "web");
        let _shim = FakeShim::start(&d, "web", info(4242), b"");
        let (families, s) = parse(&text(&d));
        let info = format!(
            "berth_info{{version=\"{}\",cgroup=\"v2\"}}",
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(s[&info], 1.0);
        assert_eq!(
            s["berth_container_state{container=\"web\",state=\"running\"}"],
            1.0
        );
        for (series, want) in [
            ("berth_container_cpu_seconds_total{container=\"web\"}", 5.0),
            (
                "berth_container_cpu_throttled_seconds_total{container=\"web\"}",
                0.25,
            ),
            ("berth_container_cpu_periods_total{container=\"web\"}", 10.0),
            (
                "berth_container_cpu_throttled_periods_total{container=\"web\"}",
                2.0,
            ),
            (
                "berth_container_memory_bytes{container=\"web\"}",
                2_097_152.0,
            ),
            (
                "berth_container_memory_limit_bytes{container=\"web\"}",
                8_388_608.0,
            ),
            ("berth_container_pids{container=\"web\"}", 3.0),
            ("berth_group_memory_bytes", 16_777_216.0),
            ("berth_group_memory_limit_bytes", 67_108_864.0),
        ] {
            assert_eq!(s.get(series), Some(&want), "{series}");
        }
        assert!(families.iter().any(|f| f == "berth_container_pids_limit"));
        assert!(!s.contains_key("berth_container_pids_limit{container=\"web\"}"));
        assert!(!s.contains_key("berth_container_oom_kills_total{container=\"web\"}"));
    }

    /// The TCP listener answers `GET /metrics` with the exposition and its content type, and
    /// anything else with 404.
    #[test]
    fn the_tcp_listener_serves_get_metrics_only() {
        let (_dir, d, _m) = fake_daemon("metrics-tcp", "");
        install(&d, MANIFEST);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let ask = |request: &str| -> String {
            std::thread::scope(|scope| {
                scope.spawn(|| serve_tcp(&d, listener.accept().unwrap().0));
                let mut c = TcpStream::connect(addr).unwrap();
                c.write_all(request.as_bytes()).unwrap();
                let mut out = String::new();
                c.read_to_string(&mut out).unwrap();
                out
            })
        };
        let ok = ask("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        let (head, body) = ok.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        assert!(head.contains(berth_core::metrics::CONTENT_TYPE), "{head}");
        assert_eq!(parse(body).1["berth_packages_installed"], 1.0);
        for other in [
            "POST /metrics HTTP/1.1\r\n\r\n",
            "GET /metrics/x HTTP/1.1\r\n\r\n",
        ] {
            let no = ask(other);
            assert!(no.starts_with("HTTP/1.1 404 "), "{no}");
            assert!(no.ends_with("only GET /metrics is served here\n"), "{no}");
        }
    }
}
