//! Upgrades with rollback, with real containers: an upgrade that passes its health check is
//! kept, one that fails it is rolled back (its /data restored, a crash archive says why),
//! `berth rollback` by hand; and SIGKILL of the daemon at every step of an upgrade and of a
//! rollback (over 200 injections) always leaves the old or the new version, never a trial
//! nobody watches, /data intact, and the package running again.

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const CONFIG: &str = "[upgrade]\ndeadline = \"6s\"\nsettle = \"200ms\"\n";

/// Version `v` of app: it appends its version to /data/history and is healthy once it has
/// made /tmp/ok, which the `bad` one never does.
fn app(v: &str, bad: bool) -> Pkg {
    let ok = if bad { "" } else { "echo > /tmp/ok\n" };
    Pkg::script(
        "app",
        v,
        &format!("echo {v} >> /data/history\n{ok}echo up {v}\nexec sleep 600\n"),
    )
    .file("check.sh", b"test -e /tmp/ok\n")
    .table(
        "[restart]\npolicy = \"never\"\n[health]\ncmd = [\"/bin/busybox\", \"sh\", \"/check.sh\"]\ninterval = \"100ms\"\ntimeout = \"1s\"\nretries = 100\n",
    )
}

/// Version `v` of app whose `[upgrade] migrate` runs `script` (given the old version as $1).
fn app_migrating(v: &str, script: &str) -> Pkg {
    app(v, false)
        .file("migrate.sh", script.as_bytes())
        .table("[upgrade]\nmigrate = [\"/bin/busybox\", \"sh\", \"/migrate.sh\"]\n")
}

/// The repository offers only `v` of app from now on.
fn offer(sb: &Sandbox, v: &str, bad: bool) {
    offer_pkg(sb, &app(v, bad));
}

fn offer_pkg(sb: &Sandbox, p: &Pkg) {
    sb.offer_only(p);
    sb.ok(&["update"]);
}

fn state_entry(sb: &Sandbox) -> Value {
    let s: Value =
        serde_json::from_slice(&std::fs::read(sb.state_dir().join("state.json")).unwrap()).unwrap();
    s["packages"]["app"].clone()
}

fn wait_running(sb: &Sandbox, version: &str, secs: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let c = sb.status_of("app");
        if c["state"] == "running" && c["version"] == version && c["ready"] == true {
            return c;
        }
        assert!(
            Instant::now() < deadline,
            "app {version} not running and ready: {c}\n{}",
            sb.daemon_log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A sandbox whose daemon runs app 1.0, with a file of its own in /data.
fn running_app(scope: &str) -> Sandbox {
    let mut sb = Sandbox::new(scope);
    sb.write_config(CONFIG);
    sb.add(&app("1.0", false));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "app"]);
    sb.ok(&["start", "app"]);
    wait_running(&sb, "1.0", 10);
    std::fs::write(sb.state_dir().join("data/app/keep"), b"precious").unwrap();
    sb
}

fn history(sb: &Sandbox) -> String {
    std::fs::read_to_string(sb.state_dir().join("data/app/history")).unwrap_or_default()
}

#[test]
fn an_upgrade_that_passes_is_kept_and_one_that_fails_is_rolled_back() {
    let mut sb = running_app("upg");

    // nothing newer: nothing to do
    assert!(sb.ok(&["upgrade"]).contains("nothing to upgrade"));

    // 1.1 starts and passes its check: kept, /data kept, 1.0 kept as previous
    offer(&sb, "1.1", false);
    let v = sb.json(&["upgrade", "app"]);
    assert_eq!(v["upgraded"][0]["to"], "1.1", "{v}");
    assert_eq!(v["rolled_back"].as_array().unwrap().len(), 0, "{v}");
    wait_running(&sb, "1.1", 5);
    let e = state_entry(&sb);
    assert!(e["trial"].is_null(), "{e}");
    assert_eq!(e["previous"]["version"], "1.0", "{e}");
    assert_eq!(history(&sb), "1.0\n1.1\n");
    assert!(
        !sb.state_dir().join("data/.upgrade-app").exists(),
        "snapshot left behind"
    );

    // by hand: back to 1.0, and forward again
    let r = sb.json(&["rollback", "app"]);
    assert_eq!(
        (r["from"].as_str(), r["to"].as_str()),
        (Some("1.1"), Some("1.0")),
        "{r}"
    );
    wait_running(&sb, "1.0", 5);
    let (_, err) = sb.fail(&["rollback", "app"]);
    assert!(err.contains("no previous version"), "{err}");
    sb.json(&["upgrade"]);
    wait_running(&sb, "1.1", 5);

    // 1.2 never becomes healthy: rolled back to 1.1, /data as 1.1 left it, an archive
    offer(&sb, "1.2", true);
    let before = history(&sb);
    let out = sb.output(&["upgrade"]).unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a rollback is a failure: {out:?}"
    );
    assert!(
        stdout(&out).contains("rolled back app to 1.1"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("was not running and ready"),
        "{}",
        stdout(&out)
    );
    let c = wait_running(&sb, "1.1", 5);
    assert_eq!(c["version"], "1.1");
    // 1.2 wrote its line, the rollback put the snapshot back; 1.1 started again after it
    assert_eq!(
        history(&sb),
        format!("{before}1.1\n"),
        "the data 1.2 wrote was not rolled back"
    );
    assert_eq!(
        std::fs::read(sb.state_dir().join("data/app/keep")).unwrap(),
        b"precious"
    );
    let e = state_entry(&sb);
    assert!(e["trial"].is_null() && e["previous"].is_null(), "{e}");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let reports = sb.json(&["report", "list", "app"]);
        let found = reports["reports"].as_array().unwrap().iter().any(|r| {
            r["reason"] == "upgrade" && r["detail"].as_str().unwrap_or("").contains("1.2")
        });
        if found {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no upgrade crash archive: {reports}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // a failed upgrade never retries on its own
    quiet_for(Duration::from_millis(500), "a retry of the failed upgrade");
    assert_eq!(sb.status_of("app")["version"], "1.1");

    // 1.3 migrates /data before it starts (given the version it replaces): kept
    offer_pkg(
        &sb,
        &app_migrating("1.3", "echo migrated from $1 >> /data/history\n"),
    );
    let before = history(&sb);
    let v = sb.json(&["upgrade"]);
    assert_eq!(v["upgraded"][0]["to"], "1.3", "{v}");
    wait_running(&sb, "1.3", 5);
    assert_eq!(history(&sb), format!("{before}migrated from 1.1\n1.3\n"));
    // 1.4's migration fails half-way: rolled back before 1.4 ever ran, /data as it was
    offer_pkg(
        &sb,
        &app_migrating("1.4", "echo half >> /data/history\nexit 3\n"),
    );
    let before = history(&sb);
    let out = sb.output(&["upgrade"]).unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stdout(&out).contains("the migration command of 1.4 exited 3"),
        "{}",
        stdout(&out)
    );
    wait_running(&sb, "1.3", 5);
    assert_eq!(
        history(&sb),
        format!("{before}1.3\n"),
        "the half-done migration was not undone"
    );

    // the operator stops it during 1.5's trial: rolled back, and left stopped as asked
    offer(&sb, "1.5", true);
    let stopper = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let deadline = Instant::now() + Duration::from_secs(10);
            while sb.status_of("app")["version"] != "1.5" {
                assert!(Instant::now() < deadline, "1.5 never switched in");
                std::thread::sleep(Duration::from_millis(20));
            }
            sb.ok(&["stop", "app"]);
        });
        let out = sb.cmd(&["upgrade"]).output().unwrap();
        h.join().unwrap();
        out
    });
    assert_eq!(stopper.status.code(), Some(1), "{stopper:?}");
    let c = sb.status_of("app");
    assert_eq!(
        (c["version"].as_str(), c["state"].as_str()),
        (Some("1.3"), Some("stopped")),
        "{c}"
    );
    assert_eq!(c["autostart"], false, "{c}");
    quiet_for(Duration::from_millis(500), "a start of the stopped upgrade");
    assert_eq!(sb.status_of("app")["state"], "stopped");
    sb.ok(&["start", "app"]);

    // clean daemon restarts (an operator's, a shutdown's) are no failed starts: six of them
    // in a row do not end in safe mode (five killed ones would: safe_mode.rs)
    for _ in 0..6 {
        sb.stop_daemon();
        sb.start_daemon();
    }
    let st = sb.json(&["status"]);
    assert_eq!(st["daemon"]["safe_mode"], false, "{st}");
    wait_running(&sb, "1.3", 5);
}

/// The steps an upgrade goes through (all reached by a passing one), and those a failing
/// one adds.
const UPGRADE_POINTS: &[&str] = &[
    "upgrade.fetched",
    "upgrade.stopped",
    "upgrade.snapshotted",
    "upgrade.committed",
    "upgrade.migrated",
    "upgrade.started",
    "upgrade.confirmed",
];
const ROLLBACK_POINTS: &[&str] = &[
    "upgrade.committed",
    "upgrade.started",
    "rollback.stopped",
    "rollback.restored",
    "rollback.committed",
    "rollback.started",
];

/// One injection: SIGKILL at `point` during `berth upgrade`, then a daemon start. Returns
/// the version the package ended on.
fn inject(sb: &mut Sandbox, point: &str, old: &str, new: &str) -> String {
    sb.stop_daemon();
    sb.start_daemon_env(&[("BERTH_FAULT", point)]);
    let _ = sb.output(&["upgrade", "app"]).unwrap();
    assert!(
        sb.wait_daemon_exit(Duration::from_secs(20)),
        "{point}: the daemon did not die there\n{}",
        sb.daemon_log_text()
    );
    sb.start_daemon();
    // never a trial left, the old or the new version, and it runs again
    let e = state_entry(sb);
    assert!(
        e["trial"].is_null(),
        "{point}: a trial survived the restart: {e}"
    );
    let v = e["version"].as_str().unwrap().to_string();
    assert!(v == old || v == new, "{point}: version {v}");
    wait_running(sb, &v, 15);
    assert_eq!(
        std::fs::read(sb.state_dir().join("data/app/keep")).unwrap(),
        b"precious",
        "{point}: /data lost"
    );
    for leftover in [".upgrade-app", ".upgrade-app.tmp", ".failed-app"] {
        assert!(
            !sb.state_dir().join("data").join(leftover).exists(),
            "{point}: {leftover} left behind"
        );
    }
    // Each killed daemon is an unconfirmed start: the operator's word keeps the boot
    // counter from ending in safe mode (safe_mode.rs tests that).
    sb.ok(&["safe-mode", "clear"]);
    v
}

/// `rounds` of kills at every step in a sandbox of its own: the injections made, and how
/// many ended on which version after which step.
fn kill_rounds(scope: &str, rounds: usize) -> (usize, BTreeMap<String, usize>) {
    let mut sb = running_app(scope);
    let mut injections = 0;
    let mut ended = BTreeMap::<String, usize>::new();

    // A passing upgrade 1.0 → 1.1 (with a migration), cut at each step; back to 1.0 by hand
    // when it got there.
    offer_pkg(
        &sb,
        &app_migrating("1.1", "echo migrated from $1 >> /data/history\n"),
    );
    for _ in 0..rounds {
        for point in UPGRADE_POINTS {
            let v = inject(&mut sb, point, "1.0", "1.1");
            injections += 1;
            *ended.entry(format!("{point} → {v}")).or_default() += 1;
            if v == "1.1" {
                sb.ok(&["rollback", "app"]);
                wait_running(&sb, "1.0", 10);
            }
        }
    }
    // A failing upgrade 1.0 → 1.2, cut at each step of its trial and of its rollback.
    offer(&sb, "1.2", true);
    for _ in 0..rounds {
        for point in ROLLBACK_POINTS {
            let v = inject(&mut sb, point, "1.0", "1.2");
            injections += 1;
            *ended.entry(format!("{point} → {v}")).or_default() += 1;
            assert_eq!(v, "1.0", "{scope} {point}: a failing version survived");
        }
    }
    (injections, ended)
}

#[test]
fn sigkill_at_every_step_of_an_upgrade_and_a_rollback_leaves_the_old_or_the_new_set() {
    let rounds: usize = std::env::var("BERTH_UPGRADE_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(17);
    // The rounds shared by three daemons at once, each with its own sandbox: an injection
    // waits on its daemon far more than it computes.
    const DAEMONS: usize = 3;
    let (mut injections, mut ended) = (0, BTreeMap::<String, usize>::new());
    std::thread::scope(|s| {
        let each: Vec<_> = (0..DAEMONS)
            .map(|k| rounds / DAEMONS + usize::from(k < rounds % DAEMONS))
            .filter(|r| *r > 0)
            .enumerate()
            .map(|(k, r)| s.spawn(move || kill_rounds(&format!("upgkill{k}"), r)))
            .collect();
        for h in each {
            let (n, e) = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            injections += n;
            for (k, v) in e {
                *ended.entry(k).or_default() += v;
            }
        }
    });
    eprintln!("{injections} injections, inconsistent states: 0; ended: {ended:?}");
    assert!(injections >= 200 || rounds < 17, "{injections} injections");
    // every step was reached: a passing upgrade ends on 1.1 only when cut after its commit
    // of the confirmation
    assert_eq!(
        ended.get("upgrade.confirmed → 1.1"),
        Some(&rounds),
        "{ended:?}"
    );
    assert_eq!(
        ended.get("upgrade.fetched → 1.0"),
        Some(&rounds),
        "{ended:?}"
    );
}

/// A container's /data is a tree it controls: links out of it (absolute, relative, to a
/// file, below a directory) and a nesting past the walks' caps. The upgrade's snapshot and
/// rollback, `berth status`'s disk use and a purge never follow one: the canary they point
/// at is untouched, the links come back as links, and the purge removes all of it.
#[test]
fn a_containers_links_in_data_are_kept_as_links_and_never_followed() {
    let mut sb = Sandbox::new("datalinks");
    sb.write_config(CONFIG);
    let canary = sb.dir.join("canary");
    std::fs::create_dir_all(canary.join("sub")).unwrap();
    std::fs::write(canary.join("precious"), "precious").unwrap();
    std::fs::write(canary.join("sub/file"), "file").unwrap();
    let snapshot = |p: &std::path::Path| -> Vec<String> {
        let out = std::process::Command::new("find")
            .arg(p)
            .args(["-printf", "%p %m %U:%G %s %l\n"])
            .output()
            .unwrap();
        let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(String::from)
            .collect();
        v.sort();
        v
    };
    let before = snapshot(&canary);
    let c = canary.display();
    let links = format!(
        "cd /data && [ -e made ] || {{ ln -s {c} abs; ln -s ../../../../../../../../.. rel; \
         ln -s {c}/precious file; mkdir -p a/b; ln -s {c} a/b/c; echo x > a/b/f; \
         touch made; }}\n"
    );
    let app_v = |v: &str, bad: bool, deep: bool| {
        let deep = if deep {
            "cd /data && mkdir -p deep && cd deep && i=0; while [ $i -lt 600 ]; do mkdir -p d && cd d; i=$((i+1)); done; ln -s /etc/passwd pw\n"
        } else {
            ""
        };
        // a failing version spoils /data: the rollback must bring the links back
        let ok = if bad {
            "rm /data/abs /data/a/b/c; echo spoiled > /data/new\n"
        } else {
            "echo > /tmp/ok\n"
        };
        Pkg::script(
            "app",
            v,
            &format!("{links}{deep}{ok}echo up {v}\nexec sleep 600\n"),
        )
        .file("check.sh", b"test -e /tmp/ok\n")
        .table(
            "[restart]\npolicy = \"never\"\n[health]\ncmd = [\"/bin/busybox\", \"sh\", \"/check.sh\"]\ninterval = \"100ms\"\ntimeout = \"1s\"\nretries = 100\n",
        )
    };
    sb.add(&app_v("1.0", false, false));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "app"]);
    sb.ok(&["start", "app"]);
    wait_running(&sb, "1.0", 10);
    let data = sb.state_dir().join("data/app");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !data.join("made").exists() {
        assert!(Instant::now() < deadline, "the links were not made");
        std::thread::sleep(Duration::from_millis(20));
    }
    let links_before = snapshot(&data);

    // 1.1 fails its check: rolled back, /data from its snapshot, links as links
    offer_pkg(&sb, &app_v("1.1", true, false));
    let out = sb.output(&["upgrade"]).unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    wait_running(&sb, "1.0", 10);
    assert_eq!(
        snapshot(&data),
        links_before,
        "the snapshot did not bring /data back"
    );
    assert_eq!(std::fs::read_link(data.join("abs")).unwrap(), canary);
    assert_eq!(snapshot(&canary), before, "the canary changed");
    let st = sb.json(&["status", "app"]);
    assert!(st.to_string().contains("data"), "{st}");

    // 1.2 nests /data 600 levels deep (past the snapshot's caps: no snapshot, logged)
    offer_pkg(&sb, &app_v("1.2", false, true));
    sb.json(&["upgrade"]);
    wait_running(&sb, "1.2", 10);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::process::Command::new("find")
        .arg(data.join("deep"))
        .args(["-name", "pw"])
        .output()
        .map(|o| o.stdout.is_empty())
        .unwrap_or(true)
    {
        assert!(Instant::now() < deadline, "the deep tree was not made");
        std::thread::sleep(Duration::from_millis(50));
    }
    offer_pkg(&sb, &app_v("1.3", true, false));
    let out = sb.output(&["upgrade"]).unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        sb.daemon_log_text().contains("too large to snapshot"),
        "{}",
        sb.daemon_log_text()
    );
    wait_running(&sb, "1.2", 10);
    sb.ok(&["stop", "app"]);
    sb.ok(&["remove", "--purge", "app"]);
    assert!(!data.exists(), "purge left {}", data.display());
    assert_eq!(snapshot(&canary), before, "the canary changed");
    assert!(std::path::Path::new("/etc/passwd").exists());
}

/// A failed migration leaves /data exactly as it was, by the same rule whether the package
/// never started (no /data: none again), ran before and is stopped, or runs; and the same
/// when the daemon is killed at each step of that upgrade and its rollback.
#[test]
fn a_failed_migration_leaves_data_as_it_was_whether_the_package_ran_runs_or_never_started() {
    let mut sb = Sandbox::new("absent");
    sb.write_config(CONFIG);
    sb.add(&app("1.0", false));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "app"]);
    let data = sb.state_dir().join("data/app");
    let failing = app_migrating("2.0", "echo half > /data/partial\nexit 1\n");

    // Never started: no /data before, none after.
    assert!(!data.exists(), "a /data before any start");
    offer_pkg(&sb, &failing);
    let out = sb.output(&["upgrade", "app"]).unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stdout(&out).contains("the migration command of 2.0 exited 1"),
        "{}",
        stdout(&out)
    );
    assert_eq!(state_entry(&sb)["version"], "1.0");
    assert!(
        !data.exists(),
        "the failed migration's /data stayed: {:?}",
        std::fs::read_dir(&data).map(|r| r.count())
    );
    for leftover in [
        ".upgrade-app",
        ".upgrade-app.absent",
        ".upgrade-app.tmp",
        ".failed-app",
    ] {
        assert!(
            !sb.state_dir().join("data").join(leftover).exists(),
            "{leftover} left"
        );
    }

    // The same, with the daemon killed at each step: /data absent every time.
    for point in [
        "upgrade.stopped",
        "upgrade.snapshotted",
        "upgrade.committed",
        "upgrade.migrated",
        "rollback.stopped",
        "rollback.restored",
        "rollback.committed",
    ] {
        sb.stop_daemon();
        sb.start_daemon_env(&[("BERTH_FAULT", point)]);
        let _ = sb.output(&["upgrade", "app"]).unwrap();
        assert!(
            sb.wait_daemon_exit(Duration::from_secs(20)),
            "{point}: the daemon did not die there\n{}",
            sb.daemon_log_text()
        );
        sb.start_daemon();
        let e = state_entry(&sb);
        assert!(
            e["trial"].is_null() && e["version"] == "1.0",
            "{point}: {e}"
        );
        assert!(
            !data.exists(),
            "{point}: the failed migration's /data stayed"
        );
        assert!(
            !sb.state_dir().join("data/.upgrade-app.absent").exists(),
            "{point}: the mark stayed"
        );
        sb.ok(&["safe-mode", "clear"]);
    }

    // It ran, and is stopped: /data as it was, the migration's file gone.
    offer(&sb, "1.0", false);
    sb.ok(&["start", "app"]);
    wait_running(&sb, "1.0", 10);
    sb.ok(&["stop", "app"]);
    std::fs::write(data.join("keep"), b"precious").unwrap();
    let before = history(&sb);
    offer_pkg(&sb, &failing);
    let out = sb.output(&["upgrade", "app"]).unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(std::fs::read(data.join("keep")).unwrap(), b"precious");
    assert!(
        !data.join("partial").exists(),
        "the stopped package's /data kept the migration's file"
    );
    assert_eq!(history(&sb), before);

    // It runs: the same.
    offer(&sb, "1.0", false);
    sb.ok(&["start", "app"]);
    wait_running(&sb, "1.0", 10);
    let before = history(&sb);
    offer_pkg(&sb, &failing);
    let out = sb.output(&["upgrade", "app"]).unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    wait_running(&sb, "1.0", 10);
    assert_eq!(std::fs::read(data.join("keep")).unwrap(), b"precious");
    assert!(
        !data.join("partial").exists(),
        "the running package's /data kept the migration's file"
    );
    // as it was, and 1.0's start after the rollback
    assert_eq!(history(&sb), format!("{before}1.0\n"));
}
