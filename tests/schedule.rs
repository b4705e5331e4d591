//! Schedules with real containers (docs/schedules.md): a job added through the admin API
//! fires at its minute (a test clock: a cron minute lasts one second) and runs inside the
//! container, as the entrypoint's user, its output in the container's log; a stopped
//! container is started by its job; jobs survive a daemon restart and go with `berth remove`;
//! the manifest's `[[schedule]]` is installed and read-only; a daemon down across a due time
//! catches up once; `@reboot` runs once per boot id; bad input and a flood of adds get clear
//! 4xx answers, lose nothing, and leave other containers alone.

// An end-to-end scenario reads top to bottom: the 150-line limit of crates/ (clippy.toml)
// does not hold here.
#![allow(clippy::too_many_lines)]

mod common;

use common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// "A cron minute lasts one second" (test hooks only).
const FAST: &[(&str, &str)] = &[("BERTH_TEST_HOOKS", "1"), ("BERTH_TEST_CRON_SECOND", "1")];

const APPLETS: &[&str] = &["sh", "cat", "echo", "sleep", "ls", "id", "date", "wc"];

/// A package that runs until stopped, with `date` and `id` for its jobs.
fn sleeper(name: &str) -> Pkg {
    let mut p = Pkg::script(name, "1.0", "echo up\nexec sleep 600\n");
    p.applets = APPLETS;
    p
}

/// The lines of a file in the container's /data (empty if there is none yet).
fn data_lines(sb: &Sandbox, name: &str, file: &str) -> Vec<String> {
    std::fs::read_to_string(sb.state_dir().join("data").join(name).join(file))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

fn schedules(sb: &Sandbox, name: &str) -> Vec<Value> {
    sb.json(&["schedule", "list", name])["schedules"]
        .as_array()
        .unwrap()
        .clone()
}

/// Waits until `f` holds for the container's schedules.
fn wait_schedules(
    sb: &Sandbox,
    name: &str,
    secs: u64,
    what: &str,
    f: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let s = schedules(sb, name);
        if f(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: not {what} within {secs} s: {s:?}\n{}",
            sb.daemon_log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One request on the admin socket: (status, body).
fn request(sb: &Sandbox, method: &str, path: &str, body: &str) -> (u16, Value) {
    let mut s = UnixStream::connect(sb.run_dir().join("admin.sock")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn a_job_fires_at_its_minute_inside_the_container_survives_a_restart_and_goes_with_remove() {
    let mut sb = Sandbox::new("schedrun");
    sb.pack(&sleeper("clock").entrypoint_key("user = 1000\ngroup = 1000"));
    sb.pack(&sleeper("idle"));
    sb.pack(&sleeper("gone"));
    sb.build_repo();
    sb.start_daemon_env(FAST);
    sb.ok(&["update"]);
    sb.ok(&["install", "clock", "idle", "gone"]);
    sb.ok(&["start", "clock"]);
    sb.wait_log("clock", "up");
    assert!(schedules(&sb, "clock").is_empty());

    // Every third (test) minute: the job's own clock and user, into /data and the log.
    let job = "date +%s >> /data/runs; id -u >> /data/uids; echo job-said-hello";
    let added = sb.json(&[
        "schedule",
        "add",
        "clock",
        "--cron",
        "*/3 * * * *",
        "--",
        "/bin/busybox",
        "sh",
        "-c",
        job,
    ]);
    assert_eq!(
        (added["id"].as_str(), added["origin"].as_str()),
        (Some("a1"), Some("api")),
        "{added}"
    );
    assert_eq!(added["next_run"].as_i64().unwrap() % 180, 0, "{added}");
    let s = wait_schedules(&sb, "clock", 20, "run twice", |s| {
        data_lines(&sb, "clock", "runs").len() >= 2 && s[0]["last_run"]["code"] == 0
    });
    let last = &s[0]["last_run"];
    // The scheduler fired at a minute the expression names (scheduler time = real × 60).
    assert_eq!(last["time"].as_i64().unwrap() % 180, 0, "{last}");
    assert_eq!(last["catch_up"], false, "{last}");
    assert_eq!(last["started"], false, "{last}");
    assert!(last["duration_ms"].as_u64().unwrap() < 3000, "{last}");
    assert!(
        last["output"].as_str().unwrap().contains("job-said-hello"),
        "{last}"
    );
    let runs: Vec<i64> = data_lines(&sb, "clock", "runs")
        .iter()
        .map(|l| l.parse().unwrap())
        .collect();
    for w in runs.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            (2..=4).contains(&gap) || gap % 3 == 0,
            "runs 3 s apart: {runs:?}"
        );
    }
    assert!(
        data_lines(&sb, "clock", "uids").iter().all(|u| u == "1000"),
        "the entrypoint's user"
    );
    sb.wait_log("clock", "job-said-hello");
    let file = sb.state_dir().join("schedules/clock.json");
    assert!(file.exists());

    // A stopped container is started by its job (and the job runs in it).
    sb.ok(&[
        "schedule",
        "add",
        "idle",
        "--cron",
        "* * * * *",
        "--",
        "/bin/busybox",
        "sh",
        "-c",
        "echo x >> /data/ran",
    ]);
    let s = wait_schedules(&sb, "idle", 20, "started by its job", |s| {
        s[0]["last_run"]["started"] == true && s[0]["last_run"]["code"] == 0
    });
    assert!(!data_lines(&sb, "idle", "ran").is_empty(), "{s:?}");
    assert_eq!(sb.status_of("idle")["state"], "running");
    assert!(sb
        .daemon_log_text()
        .contains("idle: started by schedule a1"));
    sb.ok(&["schedule", "remove", "idle", "a1"]);
    assert!(schedules(&sb, "idle").is_empty());
    sb.ok(&["stop", "idle"]);

    // Across a daemon restart: still listed with the same id, and it still fires.
    let before = data_lines(&sb, "clock", "runs").len();
    sb.stop_daemon();
    sb.start_daemon_env(FAST);
    let s = schedules(&sb, "clock");
    assert_eq!((s.len(), s[0]["id"].as_str()), (1, Some("a1")), "{s:?}");
    wait_until(
        "the job fires after the restart",
        Duration::from_secs(15),
        || data_lines(&sb, "clock", "runs").len() >= before + 2,
    );
    let ids = sb.ok(&["schedule", "list", "clock"]);
    assert!(
        ids.contains("a1") && ids.contains("*/3 * * * *") && ids.contains("exit 0"),
        "{ids}"
    );

    // Removed with the package: the file goes, and the container is unknown.
    sb.ok(&[
        "schedule",
        "add",
        "gone",
        "--cron",
        "0 0 1 1 *",
        "--",
        "/bin/true",
    ]);
    let gone = sb.state_dir().join("schedules/gone.json");
    assert!(gone.exists());
    sb.ok(&["remove", "gone"]);
    assert!(!gone.exists());
    let (code, err) = sb.fail(&["schedule", "list", "gone"]);
    assert_eq!(code, 1);
    assert!(err.contains("not installed"), "{err}");
    let (status, v) = request(
        &sb,
        "POST",
        "/v1/containers/gone/schedules",
        r#"{"cron":"@daily","cmd":["/x"]}"#,
    );
    assert_eq!(
        (status, v["code"].as_str()),
        (404, Some("not_installed")),
        "{v}"
    );
    assert!(!gone.exists(), "a refused add writes nothing");

    // Stopping the clock for good: its job goes first, or it would start it again.
    sb.ok(&["schedule", "remove", "clock", "a1"]);
    sb.ok(&["stop", "clock"]);
}

#[test]
fn manifest_jobs_are_read_only_and_bad_input_gets_clear_refusals_without_harm() {
    let mut sb = Sandbox::new("schedbad");
    sb.pack(&sleeper("web").table(
        "[[schedule]]\ncron = \"*/2 * * * *\"\ncmd = [\"/bin/busybox\", \"sh\", \"-c\", \"echo m >> /data/m\"]\n",
    ));
    sb.pack(&sleeper("other"));
    sb.build_repo();
    sb.start_daemon_env(FAST);
    sb.ok(&["update"]);
    sb.ok(&["install", "web", "other"]);
    sb.ok(&["start", "web"]);
    sb.ok(&["start", "other"]);
    let other_pid = sb.status_of("other")["init_pid"].clone();

    // The manifest's job is installed at install, and fires.
    let s = schedules(&sb, "web");
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(
        (s[0]["origin"].as_str(), s[0]["cron"].as_str()),
        (Some("manifest"), Some("*/2 * * * *"))
    );
    let mid = s[0]["id"].as_str().unwrap().to_string();
    assert!(mid.starts_with('m'), "{mid}");
    wait_until("the manifest's job fires", Duration::from_secs(15), || {
        !data_lines(&sb, "web", "m").is_empty()
    });
    // Read-only.
    let out = sb.berth(&["--json", "schedule", "remove", "web", &mid]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["code"].as_str(), v["status"].as_u64()),
        (Some("read_only"), Some(403)),
        "{v}"
    );
    let (status, v) = request(&sb, "DELETE", "/v1/containers/web/schedules/a99", "");
    assert_eq!(
        (status, v["code"].as_str()),
        (404, Some("no_such_schedule")),
        "{v}"
    );

    // Bad expressions: 400, the field named.
    for (cron, needle) in [
        ("61 * * * *", "minute: 61 is out of range 0-59"),
        ("* 24 * * *", "hour: 24 is out of range 0-23"),
        ("* * * * *  *", "expected 5 fields"),
        ("0 0 30 2 *", "day-of-month: 30 never comes in month 2"),
        ("* * * * fri-mon", "day-of-week: range 5-1 goes backwards"),
        ("@every", "unknown nickname"),
    ] {
        let out = sb.berth(&[
            "--json",
            "schedule",
            "add",
            "web",
            "--cron",
            cron,
            "--",
            "/bin/true",
        ]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            (v["code"].as_str(), v["status"].as_u64()),
            (Some("bad_request"), Some(400)),
            "{cron}: {v}"
        );
        assert!(v["error"].as_str().unwrap().contains(needle), "{cron}: {v}");
    }
    for (body, needle) in [
        (
            r#"{"cron":"@daily","cmd":["bin/x"]}"#,
            "must be an absolute path",
        ),
        (r#"{"cron":"@daily","cmd":[]}"#, "must not be empty"),
        (
            r#"{"cron":"@daily","cmd":["/x"],"user":0}"#,
            "unknown field",
        ),
        ("not json", "bad JSON"),
    ] {
        let (status, v) = request(&sb, "POST", "/v1/containers/web/schedules", body);
        assert_eq!(status, 400, "{body}: {v}");
        assert!(v["error"].as_str().unwrap().contains(needle), "{body}: {v}");
    }
    assert_eq!(
        schedules(&sb, "web").len(),
        1,
        "nothing added by bad requests"
    );

    // A flood: 10,000 adds from four clients. 63 fit beside the manifest's; the rest get 409
    // too_many_schedules; the other container's status answers at once all the while.
    let flood_done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let sock = sb.run_dir().join("admin.sock");
        clients.push(std::thread::spawn(move || {
            let mut codes = std::collections::BTreeMap::<u16, usize>::new();
            for _ in 0..2500 {
                let body = r#"{"cron":"0 0 1 1 *","cmd":["/bin/busybox","true"]}"#;
                let mut s = UnixStream::connect(&sock).unwrap();
                write!(
                    s,
                    "POST /v1/containers/web/schedules HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
                let mut text = String::new();
                s.read_to_string(&mut text).unwrap();
                let status = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
                if status == 409 {
                    assert!(text.contains("too_many_schedules"), "{text}");
                }
                *codes.entry(status).or_default() += 1;
            }
            codes
        }));
    }
    let watcher = {
        let done = flood_done.clone();
        let (berth, cfg) = (BERTH.to_string(), sb.config.clone());
        std::thread::spawn(move || {
            let mut worst = Duration::ZERO;
            let mut n = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let t = Instant::now();
                let out = std::process::Command::new(&berth)
                    .args([
                        "--config",
                        cfg.to_str().unwrap(),
                        "--json",
                        "status",
                        "other",
                    ])
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{}", stderr(&out));
                worst = worst.max(t.elapsed());
                n += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            (worst, n)
        })
    };
    let mut codes = std::collections::BTreeMap::<u16, usize>::new();
    for c in clients {
        for (k, v) in c.join().unwrap() {
            *codes.entry(k).or_default() += v;
        }
    }
    flood_done.store(true, std::sync::atomic::Ordering::SeqCst);
    let (worst, n) = watcher.join().unwrap();
    println!("10,000 adds: {codes:?}; status of another container {n} times, worst {worst:?}");
    // 503 busy is allowed (a client may find every worker taken), never anything else.
    assert_eq!(codes.get(&200), Some(&63), "{codes:?}");
    assert_eq!(codes.values().sum::<usize>(), 10_000);
    assert!(
        codes.keys().all(|k| [200, 409, 503].contains(k)),
        "{codes:?}"
    );
    assert!(worst < Duration::from_secs(2), "status took {worst:?}");
    let s = schedules(&sb, "web");
    assert_eq!(s.len(), 64);
    assert_eq!(
        s[0]["id"],
        mid.as_str(),
        "the manifest's job is still first"
    );
    let ids: Vec<&str> = s[1..].iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert_eq!(ids, (1..=63).map(|i| format!("a{i}")).collect::<Vec<_>>());
    let file: Value =
        serde_json::from_slice(&std::fs::read(sb.state_dir().join("schedules/web.json")).unwrap())
            .unwrap();
    assert_eq!(file["schedules"].as_array().unwrap().len(), 64);
    let o = sb.status_of("other");
    assert_eq!(
        (o["state"].as_str(), &o["init_pid"]),
        (Some("running"), &other_pid),
        "{o}"
    );
    // The manifest's job still fires.
    let m = data_lines(&sb, "web", "m").len();
    wait_until(
        "the manifest's job fires on",
        Duration::from_secs(15),
        || data_lines(&sb, "web", "m").len() > m,
    );
}

#[test]
fn a_daemon_down_across_due_times_catches_up_exactly_once() {
    let mut sb = Sandbox::new("schedcatch");
    sb.pack(&sleeper("nightly"));
    sb.build_repo();
    // Real-speed time, moved so that the tests can step over days.
    sb.start_daemon_env(&[("BERTH_TEST_HOOKS", "1")]);
    sb.ok(&["update"]);
    sb.ok(&["install", "nightly"]);
    sb.ok(&["start", "nightly"]);
    let added = sb.json(&[
        "schedule",
        "add",
        "nightly",
        "--cron",
        "0 0 * * *",
        "--",
        "/bin/busybox",
        "sh",
        "-c",
        "date +%s >> /data/runs",
    ]);
    let due = added["next_run"].as_i64().unwrap();
    assert_eq!(due % 86_400, 0, "{added}");
    sb.stop_daemon();

    // The device comes back three days and an hour after that midnight: three due times
    // passed, one catch-up run.
    let real = berth_sys::process::now_s() as i64;
    let offset = due + 3 * 86_400 + 3600 - real;
    let env = [
        ("BERTH_TEST_HOOKS", "1"),
        ("BERTH_TEST_CLOCK_OFFSET", &offset.to_string()),
    ];
    sb.start_daemon_env(&env);
    let s = wait_schedules(&sb, "nightly", 15, "caught up", |s| {
        !s[0]["last_run"].is_null()
    });
    let last = &s[0]["last_run"];
    assert_eq!(
        (last["catch_up"].as_bool(), last["code"].as_i64()),
        (Some(true), Some(0)),
        "{last}"
    );
    // Then its normal times again: the next midnight after now.
    assert_eq!(s[0]["next_run"].as_i64(), Some(due + 4 * 86_400), "{s:?}");
    quiet_for(Duration::from_secs(3), "a second catch-up run");
    assert_eq!(
        data_lines(&sb, "nightly", "runs").len(),
        1,
        "exactly one catch-up run"
    );

    // A restart with nothing missed: no run.
    sb.stop_daemon();
    sb.start_daemon_env(&env);
    quiet_for(
        Duration::from_secs(2),
        "a run after a restart that missed nothing",
    );
    assert_eq!(data_lines(&sb, "nightly", "runs").len(), 1);
    let s = schedules(&sb, "nightly");
    assert_eq!(
        s[0]["last_run"]["catch_up"], true,
        "the record was kept: {s:?}"
    );
    sb.ok(&["schedule", "remove", "nightly", "a1"]);
    sb.ok(&["stop", "nightly"]);
}

#[test]
fn reboot_jobs_run_once_per_boot_and_safe_mode_skips_with_the_reason() {
    let mut sb = Sandbox::new("schedboot");
    sb.pack(&sleeper("booter").table(
        "[[schedule]]\ncron = \"@reboot\"\ncmd = [\"/bin/busybox\", \"sh\", \"-c\", \"echo boot >> /data/boots\"]\n",
    ));
    sb.build_repo();
    let boot = |id: &'static str| [("BERTH_TEST_HOOKS", "1"), ("BERTH_TEST_BOOT_ID", id)];
    sb.start_daemon_env(&boot("b1"));
    sb.ok(&["update"]);
    sb.ok(&["install", "booter"]);
    sb.ok(&["start", "booter"]);
    // Installed during boot b1: first run at the next boot.
    let s = schedules(&sb, "booter");
    assert_eq!(
        (s[0]["next_run"].is_null(), s[0]["boot_id"].as_str()),
        (true, Some("b1")),
        "{s:?}"
    );
    sb.stop_daemon();
    sb.start_daemon_env(&boot("b1"));
    quiet_for(
        Duration::from_millis(1500),
        "an @reboot run in the same boot",
    );
    assert!(
        data_lines(&sb, "booter", "boots").is_empty(),
        "not at a daemon restart"
    );
    // Another boot: once.
    sb.stop_daemon();
    sb.start_daemon_env(&boot("b2"));
    wait_until("the @reboot job ran", Duration::from_secs(15), || {
        data_lines(&sb, "booter", "boots").len() == 1
    });
    sb.stop_daemon();
    sb.start_daemon_env(&boot("b2"));
    quiet_for(
        Duration::from_millis(1500),
        "a second @reboot run in the new boot",
    );
    assert_eq!(data_lines(&sb, "booter", "boots").len(), 1, "once per boot");
    assert_eq!(schedules(&sb, "booter")[0]["boot_id"], "b2");

    // Safe mode: the next boot's run is skipped, with the reason; nothing starts.
    sb.ok(&["safe-mode", "enter"]);
    sb.stop_daemon();
    sb.start_daemon_env(&boot("b3"));
    let s = wait_schedules(&sb, "booter", 15, "skipped", |s| {
        s[0]["last_run"]["skipped"].is_string()
    });
    let why = s[0]["last_run"]["skipped"].as_str().unwrap();
    assert!(why.contains("safe mode"), "{why}");
    assert_eq!(sb.status_of("booter")["state"], "stopped");
    assert_eq!(data_lines(&sb, "booter", "boots").len(), 1);
    sb.ok(&["safe-mode", "clear"]);
}
