//! Supervision with real containers: restart policies with TR-181 backoff, `failed` after the
//! retry count and its persistence, `reset`, health probes (command, TCP, HTTP; failing,
//! hanging), and start order by `depends`.

mod common;

use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

/// Polls the container's status until `f` holds (`Sandbox::wait_status`).
fn wait_for(sb: &Sandbox, name: &str, secs: u64, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    sb.wait_status(name, secs, what, f)
}

/// The daemon log's lines about `name`'s restarts: "NAME: restart in N ms".
fn restart_delays(sb: &Sandbox, name: &str) -> Vec<u64> {
    let prefix = format!("{name}: restart in ");
    sb.daemon_log_text()
        .lines()
        .filter_map(|l| l.split_once(&prefix).map(|(_, r)| r))
        .filter_map(|r| r.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
fn a_crashing_package_is_restarted_with_growing_waits_then_failed_and_others_run_on() {
    let mut sb = Sandbox::new("supcrash");
    sb.pack(
        &Pkg::script("crasher", "1.0", "echo crashing\nsleep 0.3\nexit 1\n").table(
            "[restart]\npolicy = \"on-failure\"\nmax_retries = 3\ndelay = \"200ms\"\nmultiplier = 2\nmax_delay = \"1s\"\n",
        ),
    );
    sb.pack(&Pkg::script("steady", "1.0", "echo up\nexec sleep 600\n"));
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "crasher", "steady"]);
    sb.ok(&["start", "steady"]);
    let steady_pid = sb.status_of("steady")["init_pid"].clone();
    sb.ok(&["start", "crasher"]);

    // backoff between the runs, with the count going up
    let c = wait_for(&sb, "crasher", 20, "in backoff", |c| {
        c["state"] == "backoff"
    });
    assert!(c["restart_in_ms"].as_u64().unwrap() <= 400, "{c}");
    assert_eq!(c["last_exit"]["code"], 1, "{c}");
    assert_eq!(c["reason"], "exit 1", "{c}");
    let c = wait_for(&sb, "crasher", 30, "failed", |c| c["state"] == "failed");
    assert_eq!(
        (c["restarts"].as_u64(), c["retries"].as_u64()),
        (Some(3), Some(3)),
        "{c}"
    );
    assert!(
        c["reason"].as_str().unwrap().contains("after 3 restarts"),
        "{c}"
    );
    assert!(c["init_pid"].is_null(), "{c}");
    // TR-181 ranges with m = 200 ms, k = 2, capped at 1 s: [200,400], [400,800], [800,1000]
    let delays = restart_delays(&sb, "crasher");
    assert_eq!(delays.len(), 3, "{delays:?}");
    for (d, (lo, hi)) in delays.iter().zip([(190, 400), (390, 800), (790, 1000)]) {
        assert!((lo..=hi).contains(d), "{delays:?}");
    }
    // held: nothing restarts it
    quiet_for(
        Duration::from_millis(1500),
        "a restart of the failed container",
    );
    assert_eq!(sb.status_of("crasher")["state"], "failed");
    let text = sb.ok(&["status"]);
    assert!(
        text.contains("crasher: failed: failed again after 3 restarts"),
        "{text}"
    );
    assert!(text.contains("berth reset crasher"), "{text}");
    // the other container never noticed
    let s = sb.status_of("steady");
    assert_eq!(
        (s["state"].as_str(), &s["init_pid"]),
        (Some("running"), &steady_pid),
        "{s}"
    );
    assert_eq!(s["restarts"], 0);

    // failed survives a daemon restart (the record is on disk), and is not started again
    sb.stop_daemon();
    sb.start_daemon();
    quiet_for(
        Duration::from_millis(500),
        "a start of the failed container after a daemon restart",
    );
    let c = sb.status_of("crasher");
    assert_eq!(c["state"], "failed", "{c}");
    assert_eq!(c["retries"], 3, "{c}");

    // reset: out of failed, counts cleared, nothing started
    let r = sb.json(&["reset", "crasher"]);
    assert_eq!(r["state"], "stopped", "{r}");
    let c = sb.status_of("crasher");
    assert_eq!(
        (c["state"].as_str(), c["retries"].as_u64()),
        (Some("stopped"), Some(0)),
        "{c}"
    );
    assert!(c["init_pid"].is_null());
    // start: a clean slate and the same cycle again
    sb.ok(&["start", "crasher"]);
    wait_for(&sb, "crasher", 20, "in backoff again", |c| {
        c["state"] == "backoff" && c["retries"] == 1
    });
    // a stop during the backoff drops the held restart
    let out = sb.output(&["stop", "crasher"]).unwrap();
    assert!(
        !out.status.success() && stderr(&out).contains("not running"),
        "{out:?}"
    );
    let c = wait_for(&sb, "crasher", 5, "stopped", |c| c["state"] == "stopped");
    quiet_for(
        Duration::from_millis(1200),
        "a restart after the operator's stop",
    );
    let c2 = sb.status_of("crasher");
    assert_eq!(
        (c2["state"].as_str(), &c2["restarts"]),
        (Some("stopped"), &c["restarts"]),
        "{c2}"
    );
    // ... also across a daemon restart: the stop cleared its autostart mark (the next
    // daemon's start otherwise applied the restart policy to the end it found)
    assert_eq!(c2["autostart"], false, "{c2}");
    sb.stop_daemon();
    sb.start_daemon();
    quiet_for(
        Duration::from_millis(1500),
        "a start after a daemon restart",
    );
    let c3 = sb.status_of("crasher");
    assert_eq!(
        (c3["state"].as_str(), &c3["restarts"]),
        (Some("stopped"), &c["restarts"]),
        "{c3}"
    );
}

#[test]
fn policies_never_and_always() {
    let mut sb = Sandbox::new("suppol");
    sb.pack(
        &Pkg::script("once", "1.0", "echo once\nexit 2\n").table("[restart]\npolicy = \"never\"\n"),
    );
    sb.pack(
        &Pkg::script("again", "1.0", "echo again\nsleep 0.2\nexit 0\n")
            .table("[restart]\npolicy = \"always\"\ndelay = \"100ms\"\nmax_retries = 1000\n"),
    );
    sb.pack(&Pkg::script("clean", "1.0", "echo done\nexit 0\n"));
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "once", "again", "clean"]);
    for n in ["once", "again", "clean"] {
        sb.ok(&["start", n]);
    }
    // never: a failure stays stopped, with its exit
    let c = wait_for(&sb, "once", 10, "stopped", |c| {
        c["state"] == "stopped" && !c["last_exit"].is_null()
    });
    assert_eq!(
        (c["last_exit"]["code"].as_i64(), c["restarts"].as_u64()),
        (Some(2), Some(0))
    );
    // on-failure (the default): a clean exit is not restarted
    let c = wait_for(&sb, "clean", 10, "stopped", |c| {
        c["state"] == "stopped" && !c["last_exit"].is_null()
    });
    assert_eq!(c["restarts"], 0, "{c}");
    // always: a clean exit is restarted, again and again
    wait_for(&sb, "again", 20, "restarted 3 times", |c| {
        c["restarts"].as_u64() >= Some(3)
    });
    quiet_for(
        Duration::from_millis(500),
        "restarts of the containers that ended well",
    );
    assert_eq!(sb.status_of("once")["restarts"], 0);
    assert_eq!(sb.status_of("clean")["restarts"], 0);
    // the operator's stop ends it for good
    let _ = sb.output(&["stop", "again"]);
    let c = wait_for(&sb, "again", 10, "stopped", |c| c["state"] == "stopped");
    quiet_for(
        Duration::from_millis(600),
        "a restart after the operator's stop",
    );
    assert_eq!(sb.status_of("again")["restarts"], c["restarts"]);
}

/// A payload that serves until /data/sick exists: its health command then fails.
fn checked_pkg(name: &str, health: &str) -> Pkg {
    Pkg::script(name, "1.0", "echo up\nexec sleep 600\n")
        .file("check.sh", b"test ! -e /data/sick\n")
        .table(health)
}

#[test]
fn a_failing_health_check_restarts_the_container_within_interval_times_retries() {
    let mut sb = Sandbox::new("suphealth");
    sb.pack(&checked_pkg(
        "sick",
        "[restart]\ndelay = \"100ms\"\n[health]\ncmd = [\"/bin/busybox\", \"sh\", \"/check.sh\"]\ninterval = \"500ms\"\ntimeout = \"2s\"\nretries = 2\n",
    ));
    sb.pack(
        &Pkg::script("hung", "1.0", "echo up\nexec sleep 600\n")
            .file("check.sh", b"test ! -e /data/hang || sleep 30\n")
            .table("[restart]\ndelay = \"100ms\"\n[health]\ncmd = [\"/bin/busybox\", \"sh\", \"/check.sh\"]\ninterval = \"500ms\"\ntimeout = \"700ms\"\nretries = 1\n"),
    );
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "sick", "hung"]);
    sb.ok(&["start", "sick"]);
    sb.ok(&["start", "hung"]);
    let c = wait_for(&sb, "sick", 10, "healthy", |c| {
        c["health"]["status"] == "healthy"
    });
    assert_eq!(c["ready"], true, "{c}");
    assert!(
        c["health"]["last"]
            .as_str()
            .unwrap()
            .starts_with("ok: exit 0"),
        "{c}"
    );
    assert!(sb.ok(&["status"]).contains("running, healthy"));
    let first = c["init_pid"].as_i64().unwrap();

    // make it sick: two failed checks 500 ms apart, then it is ended and restarted
    let data = sb.state_dir().join("data/sick");
    std::fs::write(data.join("sick"), b"").unwrap();
    let t0 = Instant::now();
    let c = wait_for(&sb, "sick", 10, "restarted", |c| {
        c["init_pid"].as_i64().is_some_and(|p| p != first)
    });
    let took = t0.elapsed();
    // interval × retries + 1 s, plus the stop (SIGTERM ends sleep at once) and the start
    assert!(
        took < Duration::from_millis(500 * 2 + 1000 + 1500),
        "{took:?}"
    );
    assert_eq!(c["restarts"], 1, "{c}");
    assert!(
        c["reason"]
            .as_str()
            .unwrap()
            .contains("2 health checks in a row failed"),
        "{c}"
    );
    let log = sb.daemon_log_text();
    assert!(
        log.contains("sick: 2 health checks in a row failed"),
        "{log}"
    );

    // a probe that hangs past its timeout counts as a failure
    std::fs::write(sb.state_dir().join("data/hung/hang"), b"").unwrap();
    let first = sb.status_of("hung")["init_pid"].as_i64().unwrap();
    let c = wait_for(&sb, "hung", 10, "restarted after a hung probe", |c| {
        c["init_pid"].as_i64().is_some_and(|p| p != first)
    });
    assert!(c["restarts"].as_u64() >= Some(1), "{c}");
    let log = sb.daemon_log_text();
    assert!(
        log.contains("hung: 1 health checks in a row failed"),
        "{log}"
    );
    // the hung probe's process was killed: no `sleep 30` left in the container (this
    // sandbox's: a process of its cgroup parent; the machine's others are not its business)
    let left = || -> Vec<String> {
        let ps = std::process::Command::new("pgrep")
            .args(["-f", "sleep 30$"])
            .output()
            .unwrap();
        stdout(&ps)
            .lines()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                    .is_ok_and(|c| c.contains(&format!("/{}/", sb.cgroup_parent)))
            })
            .map(String::from)
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !left().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(left().is_empty(), "a hung probe survived: {:?}", left());
}

#[test]
fn tcp_and_http_probes_look_at_the_containers_own_loopback() {
    let mut sb = Sandbox::new("supnet");
    let serve = "echo up\nmkdir -p /tmp/www\necho fine > /tmp/www/healthz\nexec /bin/busybox httpd -f -p 127.0.0.1:8080 -h /tmp/www\n";
    let applets: &'static [&'static str] = &["sh", "cat", "echo", "sleep", "mkdir", "httpd"];
    let mut web = Pkg::script("web", "1.0", serve)
        .table("[network]\nmode = \"none\"\n[health]\nhttp = \"8080/healthz\"\ninterval = \"300ms\"\nretries = 2\n");
    web.applets = applets;
    let mut missing = Pkg::script("missing", "1.0", serve)
        .table("[network]\nmode = \"none\"\n[restart]\npolicy = \"never\"\n[health]\nhttp = \"8080/nothere\"\ninterval = \"300ms\"\nretries = 2\n");
    missing.applets = applets;
    let mut tcp = Pkg::script("tcp", "1.0", serve)
        .table("[network]\nmode = \"none\"\n[health]\ntcp = 8080\ninterval = \"300ms\"\n");
    tcp.applets = applets;
    sb.pack(&web);
    sb.pack(&missing);
    sb.pack(&tcp);
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "web", "missing", "tcp"]);
    for n in ["web", "missing", "tcp"] {
        sb.ok(&["start", n]);
    }
    let c = wait_for(&sb, "web", 10, "healthy", |c| {
        c["health"]["status"] == "healthy"
    });
    assert_eq!(c["health"]["last"], "ok: GET /healthz: 200", "{c}");
    let c = wait_for(&sb, "tcp", 10, "healthy", |c| {
        c["health"]["status"] == "healthy"
    });
    assert_eq!(
        c["health"]["last"], "ok: port 8080 accepts connections",
        "{c}"
    );
    // a 404 is a failure; under `never` the unhealthy run is ended and stays stopped
    let c = wait_for(&sb, "missing", 10, "ended as unhealthy", |c| {
        c["state"] == "stopped"
    });
    assert!(c["health"].is_object(), "{c}");
    assert!(
        c["reason"]
            .as_str()
            .unwrap()
            .contains("health checks in a row failed"),
        "{c}"
    );
    let log = sb.daemon_log_text();
    assert!(
        log.contains("missing: 2 health checks in a row failed"),
        "{log}"
    );
    // the host's loopback was never asked: nothing listens on 8080 there
    assert!(std::net::TcpStream::connect(("127.0.0.1", 8080)).is_err());
}

#[test]
fn depends_starts_after_its_dependency_is_ready() {
    let mut sb = Sandbox::new("supdeps");
    // the base becomes healthy only after 1.5 s
    sb.pack(
        &Pkg::script("base", "1.0", "echo up\nsleep 1.5\necho > /tmp/ready\nexec sleep 600\n")
            .file("check.sh", b"test -e /tmp/ready\n")
            .table("[health]\ncmd = [\"/bin/busybox\", \"sh\", \"/check.sh\"]\ninterval = \"200ms\"\nretries = 100\n"),
    );
    sb.pack(
        &Pkg::script("app", "1.0", "echo up\nexec sleep 600\n").package_key("depends = [\"base\"]"),
    );
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "base", "app"]);
    sb.ok(&["start", "base"]);
    sb.ok(&["start", "app"]);
    // the order matters after a reboot, when the supervisor starts both: the power goes (the
    // daemon and the containers end without a word, /run's exit records are gone)
    let inits: Vec<i64> = ["base", "app"]
        .iter()
        .map(|n| sb.status_of(n)["init_pid"].as_i64().unwrap())
        .collect();
    sb.kill_daemon(libc::SIGKILL);
    for pid in inits {
        let _ = berth_sys::process::kill(pid as i32, libc::SIGKILL);
    }
    let logs = sb.run_dir().join("logs");
    wait_until("exit records written", Duration::from_secs(10), || {
        logs.join("base.exit").exists() && logs.join("app.exit").exists()
    });
    for n in ["base", "app"] {
        std::fs::remove_file(logs.join(format!("{n}.exit"))).unwrap();
    }
    sb.start_daemon();
    let app = wait_for(&sb, "app", 20, "running", |c| c["state"] == "running");
    let base = sb.status_of("base");
    assert_eq!(
        base["health"]["status"], "healthy",
        "app started before base was ready: {base} {app}"
    );
    assert!(
        app["started_at"].as_u64() >= base["started_at"].as_u64().map(|t| t + 1),
        "app {app} base {base}"
    );
}
