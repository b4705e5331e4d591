//! Prometheus metrics end to end (docs/metrics.md), as root with real LXC and cgroups:
//! `berth metrics` (the admin socket) and `[metrics] listen` (TCP, on loopback) serve the same
//! families; promtool accepts the text; the values follow what happens to the containers (a
//! busy one's CPU time grows and its memory and tasks show, a crashing one's restarts count,
//! a stopped one is `stopped` and has no cgroup samples). The network families are checked
//! with real veths and nftables in tests/network.rs.

mod common;

use common::*;
use std::io::{Read, Write};
use std::time::Duration;

/// The value of `metric{labels}` (labels as written, e.g. `{container="busy"}`, or "").
fn sample(text: &str, metric: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{metric}{labels} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
}

fn must(text: &str, metric: &str, labels: &str) -> f64 {
    sample(text, metric, labels).unwrap_or_else(|| panic!("no {metric}{labels} in:\n{text}"))
}

/// A raw HTTP/1.0 request to the TCP listener: (status line, body).
fn tcp_get(port: u16, request_line: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "{request_line}\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("a head");
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// promtool from PATH or $BERTH_PROMTOOL (scripts/test.sh unpacks Debian's prometheus
/// package for it); None, recorded as a skip naming the package, without.
fn promtool() -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("BERTH_PROMTOOL") {
        return Some(p.into());
    }
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("promtool"))
            .find(|p| p.exists())
    });
    if found.is_none() {
        berth_sys::skip::record(
            "package prometheus",
            "metrics: promtool is missing, the exposition is not linted (install prometheus or set BERTH_PROMTOOL)",
        );
    }
    found
}

#[test]
fn metrics_follow_the_containers_and_promtool_accepts_them() {
    let mut sb = Sandbox::new("metrics");
    let port = free_port();
    sb.write_config(&format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n"));
    sb.add(
        &Pkg::script("busy", "1", "while :; do :; done\n")
            .table("[resources]\ncpu_max = \"30%\"\nmemory = \"32M\"\npids = 64\n"),
    );
    sb.add(&Pkg::script("crashy", "1", "sleep 0.2\nexit 3\n").table(
        "[restart]\npolicy = \"on-failure\"\nmax_retries = 2\ndelay = \"100ms\"\nmultiplier = 1\nmax_delay = \"100ms\"\n",
    ));
    sb.add(&Pkg::script("idle", "1", "exec sleep 1000\n"));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "busy", "crashy", "idle"]);
    sb.ok(&["start", "busy"]);
    sb.ok(&["start", "crashy"]);

    // crashy ends three times (a start and two restarts), then fails.
    sb.wait_status("crashy", 20, "crashy failed", |c| c["state"] == "failed");
    let first = sb.ok(&["metrics"]);
    assert_eq!(must(&first, "berth_packages_installed", ""), 3.0);
    assert_eq!(must(&first, "berth_safe_mode", ""), 0.0);
    assert!(must(&first, "berth_daemon_resident_memory_bytes", "") > 100_000.0);
    let st = |c: &str, s: &str| {
        must(
            &first,
            "berth_container_state",
            &format!("{{container=\"{c}\",state=\"{s}\"}}"),
        )
    };
    assert_eq!(st("busy", "running"), 1.0);
    assert_eq!(st("busy", "stopped"), 0.0);
    assert_eq!(st("crashy", "failed"), 1.0);
    assert_eq!(st("idle", "stopped"), 1.0);
    assert_eq!(
        must(
            &first,
            "berth_container_restarts_total",
            "{container=\"crashy\"}"
        ),
        2.0
    );
    assert_eq!(
        must(
            &first,
            "berth_container_guard_kills_total",
            "{container=\"busy\"}"
        ),
        0.0
    );
    let busy = "{container=\"busy\"}";
    assert_eq!(
        must(&first, "berth_container_memory_limit_bytes", busy),
        32.0 * 1048576.0
    );
    assert_eq!(must(&first, "berth_container_pids_limit", busy), 64.0);
    assert!(must(&first, "berth_container_memory_bytes", busy) > 0.0);
    assert!(must(&first, "berth_container_pids", busy) >= 1.0);
    // Only running containers have cgroup samples.
    assert!(sample(
        &first,
        "berth_container_cpu_seconds_total",
        "{container=\"idle\"}"
    )
    .is_none());
    assert!(sample(&first, "berth_group_cpu_seconds_total", "").is_some());
    assert!(must(&first, "berth_store_bytes", "") > 0.0);
    assert!(first.contains("berth_info{version=\""), "{first}");

    // busy's CPU time grows, held near its 30 % cap: about 0.3 s per second.
    let cpu0 = must(&first, "berth_container_cpu_seconds_total", busy);
    measure_over(Duration::from_secs(2));
    let second = sb.ok(&["metrics"]);
    let cpu1 = must(&second, "berth_container_cpu_seconds_total", busy);
    assert!(
        cpu1 > cpu0 + 0.2,
        "busy's CPU time did not grow: {cpu0} -> {cpu1}"
    );
    assert!(
        must(&second, "berth_container_cpu_throttled_seconds_total", busy) > 0.0
            || must(&second, "berth_container_cpu_throttled_periods_total", busy) > 0.0,
        "busy is never throttled under its cap:\n{second}"
    );

    // The TCP listener serves the same families, and nothing else.
    let (status, body) = tcp_get(port, "GET /metrics HTTP/1.0");
    assert!(status.contains("200"), "{status}");
    for family in [
        "berth_container_state",
        "berth_container_cpu_seconds_total",
        "berth_governor_cap_ratio",
    ] {
        assert!(
            body.contains(&format!("# TYPE {family} ")),
            "{family} missing over TCP"
        );
    }
    let (status, _) = tcp_get(port, "GET /v1/status HTTP/1.0");
    assert!(
        status.contains("404"),
        "the TCP listener answers more than /metrics: {status}"
    );
    let (status, _) = tcp_get(port, "POST /v1/stop HTTP/1.0");
    assert!(status.contains("404"), "{status}");

    // Stopped: no cgroup samples, state stopped.
    sb.ok(&["stop", "busy"]);
    let third = sb.ok(&["metrics"]);
    assert!(
        sample(&third, "berth_container_cpu_seconds_total", busy).is_none(),
        "{third}"
    );
    assert_eq!(
        must(
            &third,
            "berth_container_state",
            "{container=\"busy\",state=\"stopped\"}"
        ),
        1.0
    );

    if let Some(promtool) = promtool() {
        let mut child = std::process::Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run promtool");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(second.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_bad_listen_address_is_refused_with_its_key() {
    let sb = Sandbox::new("metricsbad");
    sb.write_config("[metrics]\nlisten = \"localhost\"\n");
    let (code, err) = sb.fail(&["status"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("metrics.listen") && err.contains("localhost"),
        "{err}"
    );
}
