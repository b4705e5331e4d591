//! End to end, as root, with real LXC: the life of a package on the device.

mod common;

use common::*;
use std::io::Read;
use std::time::Duration;

fn web_pkg(port: u16) -> Pkg {
    let listen = format!("127.0.0.1:{port}");
    Pkg::new(
        "web",
        "1.0.0",
        &[
            "/bin/busybox",
            "httpd",
            "-f",
            "-v",
            "-p",
            &listen,
            "-h",
            "/www",
        ],
    )
    .file("www/index.html", b"<h1>hello from berth</h1>\n")
    .table("[network]\nmode = \"shared\"")
}

#[test]
fn install_start_serve_stop_remove() {
    let mut sb = Sandbox::new("life");
    let port = free_port();
    sb.trust("web");
    sb.add(&web_pkg(port));
    sb.start_daemon();

    let v = sb.json(&["update"]);
    assert_eq!(v["packages"], 1);
    let list = sb.json(&["list", "--available"]);
    assert_eq!(list["available"][0]["name"], "web");

    sb.ok(&["install", "web"]);
    assert_eq!(sb.status_of("web")["state"], "stopped");
    let v = sb.json(&["start", "web"]);
    assert!(v["init_pid"].as_i64().unwrap() > 1);

    let page = http_get_retry(port, "/");
    assert!(page.contains("hello from berth"), "{page}");
    let st = sb.status_of("web");
    assert_eq!(st["state"], "running");
    assert_eq!(st["network"], "shared");

    // Visible to the standard LXC tools.
    let out = std::process::Command::new("lxc-ls")
        .args(["-P", sb.lxcpath().to_str().unwrap(), "--running"])
        .output()
        .unwrap();
    assert!(stdout(&out).contains("web"), "lxc-ls: {}", stdout(&out));

    // The payload's output reaches the log ring; --json gives one object per line.
    sb.wait_log("web", "response:200");
    let out = sb.ok(&["--json", "logs", "web"]);
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(first["name"], "web");
    assert!(first["line"].is_string(), "{first}");

    // Refusals with reasons.
    let (code, err) = sb.fail(&["start", "web"]);
    assert_eq!(code, 1);
    assert!(err.contains("already running"), "{err}");
    let (_, err) = sb.fail(&["remove", "web"]);
    assert!(
        err.contains("is running") && err.contains("berth stop web"),
        "{err}"
    );

    let v = sb.json(&["stop", "web"]);
    assert_eq!(v["graceful"], true);
    let st = sb.status_of("web");
    assert_eq!(st["state"], "stopped");
    assert!(!st["last_exit"].is_null(), "{st}");
    assert!(common::http_get(port, "/").is_err(), "server still answers");
    // The saved ring survives the container.
    let logs = sb.ok(&["logs", "web"]);
    assert!(logs.contains("response:200"), "{logs}");
    // Nothing of the container stays mounted once it stopped; the image stays mounted (its
    // pages cached for the next start) while the package is installed.
    assert!(
        sb.stray_mounts().is_empty(),
        "left mounted: {:?}",
        sb.stray_mounts()
    );
    assert_eq!(sb.mounts().len(), 1, "{:?}", sb.mounts());

    // restart = start when stopped; the data dir persists across restarts.
    sb.ok(&["restart", "web"]);
    http_get_retry(port, "/");
    sb.ok(&["stop", "web"]);

    sb.ok(&["remove", "web"]);
    assert!(
        sb.mounts().is_empty(),
        "left mounted after remove: {:?}",
        sb.mounts()
    );
    assert!(sb.json(&["list", "--installed"])["installed"]
        .as_array()
        .unwrap()
        .is_empty());
    let gc = sb.json(&["gc"]);
    assert_eq!(gc["removed"].as_array().unwrap().len(), 1, "{gc}");
    assert!(gc["freed_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn refusals_name_the_thing_and_what_to_do() {
    let mut sb = Sandbox::new("refuse");
    sb.add(&Pkg::script("job", "1", "echo hi; sleep 60"));
    // No daemon yet: the CLI says so and how to start it, exit status 3.
    let (code, err) = sb.fail(&["status"]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("not running") && err.contains("berth daemon"),
        "{err}"
    );

    sb.start_daemon();
    let (_, err) = sb.fail(&["install", "job"]);
    assert!(err.contains("berth update"), "install before update: {err}");
    sb.ok(&["update"]);
    let (_, err) = sb.fail(&["install", "nosuch"]);
    assert!(err.contains("unknown package \"nosuch\""), "{err}");
    let (_, err) = sb.fail(&["start", "job"]);
    assert!(err.contains("not installed"), "{err}");
    let (_, err) = sb.fail(&["install", "Bad_Name"]);
    assert!(err.contains("Bad_Name"), "{err}");
    sb.ok(&["install", "job"]);
    let (_, err) = sb.fail(&["stop", "job"]);
    assert!(err.contains("not running"), "{err}");
    let (code, err) = sb.fail(&["frobnicate"]);
    assert_eq!(code, 2, "{err}");
    // --json errors are machine-readable too.
    let out = sb.berth(&["--json", "start", "nosuch"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["code"], "not_installed");
}

/// `berth ping`, a command the command table alone declares (its words and its request are
/// read by the table): exit status 3 without a daemon, `{"ok": true}` with one, a usage
/// error for words it does not take.
#[test]
fn ping_says_whether_the_daemon_answers() {
    let mut sb = Sandbox::new("ping");
    let (code, err) = sb.fail(&["ping"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("not running"), "{err}");
    sb.start_daemon();
    assert_eq!(sb.json(&["ping"]), serde_json::json!({"ok": true}));
    assert!(stdout(&sb.berth(&["ping"])).contains("\"ok\": true"));
    let (code, err) = sb.fail(&["ping", "web"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("ping takes no arguments"), "{err}");
}

#[test]
fn daemon_restart_takes_over_running_containers() {
    let mut sb = Sandbox::new("takeover");
    sb.add(&Pkg::script(
        "ticker",
        "1",
        "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done",
    ));
    sb.add(&Pkg::script("quiet", "1", "echo up; exec sleep 600"));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "ticker"]);
    let pid = sb.json(&["start", "ticker"])["init_pid"].as_i64().unwrap();
    sb.wait_log("ticker", "tick 2");

    // A daemon killed outright: the container keeps running, unharmed (it ticks on: the
    // next daemon finds ticks written while there was none).
    sb.kill_daemon(9);
    sb.start_daemon();
    sb.wait_log("ticker", "tick 5");
    let st = sb.status_of("ticker");
    assert_eq!(st["state"], "running");
    assert_eq!(st["init_pid"].as_i64().unwrap(), pid, "same container");
    // Its log ring lived on in the shim, and it is still being written.
    let before = sb.ok(&["logs", "ticker"]);
    assert!(before.contains("tick 0"), "{before}");
    sb.wait_log("ticker", "tick 8");

    // A clean daemon stop (SIGTERM) also leaves containers alone.
    sb.kill_daemon(15);
    sb.start_daemon();
    assert_eq!(sb.status_of("ticker")["init_pid"].as_i64().unwrap(), pid);

    // Even with its shim gone (killed), the daemon still knows a container through LXC and
    // can stop it. (A quiet payload: with its shim gone, a write to stdout would be EPIPE.)
    sb.ok(&["install", "quiet"]);
    let qpid = sb.json(&["start", "quiet"])["init_pid"].as_i64().unwrap();
    sb.wait_log("quiet", "up");
    // The oldest match is the shim; its children (LXC's container side) must live on.
    let shim = std::process::Command::new("pgrep")
        .args([
            "-o",
            "-f",
            &format!("__shim quiet {}", sb.lxcpath().display()),
        ])
        .output()
        .unwrap();
    let shim_pid = stdout(&shim).trim().to_string();
    assert!(!shim_pid.is_empty(), "no shim process found");
    let killed = std::process::Command::new("kill")
        .args(["-9", &shim_pid])
        .status()
        .unwrap();
    assert!(killed.success(), "kill -9 {shim_pid} failed");
    wait_until("the shim gone", Duration::from_secs(5), || {
        !std::path::Path::new(&format!("/proc/{shim_pid}")).exists()
    });
    let st = sb.status_of("quiet");
    assert_eq!(st["state"], "running", "{st}");
    assert_eq!(st["init_pid"].as_i64().unwrap(), qpid);
    let v = sb.json(&["stop", "quiet"]);
    assert_eq!(v["graceful"], true, "{v}");
    assert_eq!(sb.status_of("quiet")["state"], "stopped");

    // The daemon can stop it, and then releases its mounts.
    sb.ok(&["stop", "ticker"]);
    assert!(
        sb.stray_mounts().is_empty(),
        "left mounted: {:?}",
        sb.stray_mounts()
    );
}

#[test]
fn a_traced_start_reports_every_step_in_order() {
    let mut sb = Sandbox::new("trace");
    sb.add(&Pkg::script("traced", "1", "sleep 30"));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "traced"]);
    let pid = sb.daemon_pid().expect("daemon pid");
    let cgroup = || std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let before = cgroup();
    let t0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let v = sb.json(&["start", "--trace", "traced"]);
    let t1 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let steps: Vec<(String, u64)> = v["trace"]
        .as_array()
        .unwrap_or_else(|| panic!("no trace: {v}"))
        .iter()
        .map(|s| (s[0].as_str().unwrap().to_string(), s[1].as_u64().unwrap()))
        .collect();
    let names: Vec<&str> = steps.iter().map(|(n, _)| n.as_str()).collect();
    for want in [
        "received",
        "locked",
        "checked",
        "mounted",
        "configured",
        "spawn",
        "shim",
        "lxc_loaded",
        "fork",
        "monitor_loaded",
        "lxc_start",
        "running",
        "reported",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    // In the order of a start, within the CLI's own wall time.
    let pos = |n: &str| names.iter().position(|x| *x == n).unwrap();
    for w in [
        "received",
        "locked",
        "checked",
        "mounted",
        "configured",
        "spawn",
        "shim",
        "fork",
        "monitor_loaded",
        "lxc_start",
        "running",
        "reported",
    ]
    .windows(2)
    {
        assert!(pos(w[0]) < pos(w[1]), "{} after {}: {names:?}", w[0], w[1]);
    }
    assert!(steps.windows(2).all(|w| w[0].1 <= w[1].1), "{steps:?}");
    assert!(
        steps[0].1 >= t0 && steps.last().unwrap().1 <= t1,
        "{steps:?} not in [{t0}, {t1}]"
    );
    // The CLI says them too; an untraced start says none.
    sb.ok(&["stop", "traced"]);
    let text = sb.ok(&["start", "--trace", "traced"]);
    assert!(text.contains("lxc_start") && text.contains(" ms"), "{text}");
    sb.ok(&["stop", "traced"]);
    assert!(sb.json(&["start", "traced"])["trace"].is_null());
    // The warm-up move of every start leaves the daemon where it was.
    assert_eq!(cgroup(), before);
    // The monitor's trace file is read and removed.
    assert!(!sb.lxcpath().join("traced/trace").exists());
}

#[test]
fn a_container_that_exits_is_noticed_and_cleaned_up() {
    let mut sb = Sandbox::new("exit");
    // Its restart policy would start it again (supervise.rs tests that): here only the end.
    sb.add(
        &Pkg::script("oneshot", "1", "echo done here; exit 3")
            .table("[restart]\npolicy = \"never\""),
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "oneshot"]);
    sb.ok(&["start", "oneshot"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let st = sb.status_of("oneshot");
        if st["state"] == "stopped" && !st["last_exit"].is_null() {
            assert_eq!(st["last_exit"]["code"], 3, "{st}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never stopped: {st}\n{}",
            sb.daemon_log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(sb.ok(&["logs", "oneshot"]).contains("done here"));
    // The watcher releases the mounts once the container is gone.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !sb.stray_mounts().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "left mounted: {:?}",
            sb.stray_mounts()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn upgrades_come_from_the_repository_and_wait_for_a_stop() {
    let mut sb = Sandbox::new("upgrade");
    sb.add(&Pkg::script(
        "app",
        "1.0",
        "echo version one; exec sleep 600",
    ));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "app"]);
    sb.ok(&["start", "app"]);
    sb.wait_log("app", "version one");
    let old_sha = sb.status_of("app")["image"].as_str().unwrap().to_string();

    // The repository moves on: app 1.1 replaces 1.0 (one version of each package).
    std::fs::remove_file(sb.repo.join("packages/app-1.0.sqfs")).unwrap();
    sb.add(&Pkg::script(
        "app",
        "1.1",
        "echo version two; exec sleep 600",
    ));
    let v = sb.json(&["update"]);
    assert_eq!(v["upgradable"][0]["name"], "app", "{v}");
    assert_eq!(v["upgradable"][0]["available"], "1.1", "{v}");
    let l = sb.json(&["list", "--upgradable"]);
    assert_eq!(l["upgradable"][0]["installed"], "1.0", "{l}");

    // Not under a running container.
    let (_, err) = sb.fail(&["install", "app"]);
    assert!(err.contains("stop it before installing 1.1"), "{err}");
    sb.ok(&["stop", "app"]);
    sb.ok(&["install", "app"]);
    assert_eq!(sb.status_of("app")["version"], "1.1");
    sb.ok(&["start", "app"]);
    sb.wait_log("app", "version two");
    sb.ok(&["stop", "app"]);
    // The old image is no longer used: unmounted, and gc deletes it.
    assert!(sb.stray_mounts().is_empty(), "{:?}", sb.stray_mounts());
    let gc = sb.json(&["gc"]);
    assert_eq!(gc["removed"][0], old_sha.as_str(), "{gc}");
    assert!(sb.json(&["list", "--upgradable"])["upgradable"]
        .as_array()
        .unwrap()
        .is_empty());
}

#[test]
fn check_reports_what_this_kernel_offers() {
    let sb = Sandbox::new("check");
    // No daemon needed.
    let v = sb.json(&["check"]);
    assert_eq!(v["ok"], true, "{v}");
    let features = v["features"].as_array().unwrap();
    for name in ["squashfs", "loop devices", "liblxc"] {
        let f = features
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("{name} not reported: {v}"));
        assert_eq!(f["status"], "present", "{f}");
        assert_eq!(f["required"], true, "{f}");
    }
    let text = sb.ok(&["check"]);
    assert!(
        text.contains("squashfs") && text.contains("(required)"),
        "{text}"
    );
}

/// A `logs -f` whose reader goes away must not leave a thread behind in the daemon, even when
/// the container never prints again.
#[test]
fn an_abandoned_follow_leaves_nothing_behind() {
    let mut sb = Sandbox::new("follow");
    sb.add(&Pkg::script("quiet", "1", "echo up; exec sleep 600"));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "quiet"]);
    sb.ok(&["start", "quiet"]);
    sb.wait_log("quiet", "up");
    let daemon = sb.json(&["status"])["daemon"]["pid"].as_i64().unwrap();
    let threads = || {
        std::fs::read_to_string(format!("/proc/{daemon}/status"))
            .unwrap()
            .lines()
            .find_map(|l| {
                l.strip_prefix("Threads:")
                    .map(|v| v.trim().parse::<u32>().unwrap())
            })
            .unwrap()
    };
    // The daemon at rest: the status request just made may still have its thread for a
    // moment; the least count seen over five samples in a row is the resting one.
    let baseline = {
        let (mut least, mut same) = (threads(), 0);
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while same < 5 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            let t = threads();
            if t < least {
                (least, same) = (t, 0);
            } else {
                same += 1;
            }
        }
        least
    };
    for _ in 0..3 {
        let mut f = sb
            .cmd(&["logs", "-f", "quiet"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Connected: the relay has passed on the ring ("up") and stays for more.
        let mut out = f.stdout.take().unwrap();
        let mut got = Vec::new();
        let mut b = [0u8; 64];
        while !String::from_utf8_lossy(&got).contains("up") {
            let n = out.read(&mut b).unwrap();
            assert!(
                n > 0,
                "the follower ended: {:?}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&b[..n]);
        }
        assert!(threads() > baseline, "no relay thread while following");
        f.kill().unwrap();
        f.wait().unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while threads() > baseline {
        assert!(
            std::time::Instant::now() < deadline,
            "daemon threads: {} (was {baseline}) after the followers left",
            threads()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    sb.ok(&["stop", "quiet"]);
}

/// After a reboot (no daemon, no container, /run emptied) the daemon's supervisor starts
/// again what the operator had started and not stopped; what the operator stopped stays
/// stopped; a container that ended while only the daemon was away (its exit record is
/// there) is left to its restart policy (`never` here: it stays stopped; supervise.rs tests
/// the others).
#[test]
fn after_a_reboot_the_supervisor_starts_what_the_operator_had_started() {
    let mut sb = Sandbox::new("reboot");
    for n in ["keep", "stopped"] {
        sb.add(&Pkg::script(n, "1", "echo up; exec sleep 600"));
    }
    sb.add(
        &Pkg::script("ended", "1", "echo up; exec sleep 600")
            .table("[restart]\npolicy = \"never\""),
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "keep", "stopped", "ended"]);
    let mut inits = Vec::new();
    for n in ["keep", "stopped", "ended"] {
        sb.ok(&["start", n]);
        sb.wait_log(n, "up");
        inits.push(sb.status_of(n)["init_pid"].as_i64().unwrap());
    }
    sb.ok(&["stop", "stopped"]);
    // The power goes: the daemon and the containers end without a word.
    sb.kill_daemon(libc::SIGKILL);
    for pid in [inits[0], inits[2]] {
        let _ = berth_sys::process::kill(pid as i32, libc::SIGKILL);
    }
    let logs = sb.run_dir().join("logs");
    wait_until("both exit records written", Duration::from_secs(10), || {
        logs.join("keep.exit").exists() && logs.join("ended.exit").exists()
    });
    // /run is a tmpfs: after the reboot "keep" has no exit record; "ended" keeps its own, as
    // when only the daemon had gone away.
    std::fs::remove_file(logs.join("keep.exit")).unwrap();
    sb.start_daemon();
    wait_until("keep started again", Duration::from_secs(15), || {
        sb.status_of("keep")["state"] == "running"
    });
    sb.wait_log("keep", "up");
    assert_ne!(sb.status_of("keep")["init_pid"].as_i64(), Some(inits[0]));
    // Given time to go wrong: the others stay as they were.
    quiet_for(Duration::from_secs(1), "a change to the other containers");
    assert_eq!(sb.status_of("stopped")["state"], "stopped");
    let ended = sb.status_of("ended");
    assert_eq!(ended["state"], "stopped", "{ended}");
    assert_eq!(ended["last_exit"]["signal"], 9, "{ended}");
    let log = sb.daemon_log_text();
    assert!(log.contains("started keep (supervisor)"), "{log}");
    assert!(log.contains("ended failed: signal 9"), "{log}");
    sb.ok(&["stop", "keep"]);
}
