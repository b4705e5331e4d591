//! Low memory while berth works, end to end as root with real LXC: the device at its memory
//! guard's threshold must not leave an upgrade's trial stuck or a container unwatched.
//!
//! - An upgrade whose new version takes the device below the threshold during its trial: the
//!   guard kills it, the trial fails, the old version runs again and no trial is left (a
//!   second upgrade is not refused as "still being confirmed"), all within the upgrade's
//!   deadline.
//! - A health probe whose thread cannot be made (`BERTH_FAULT=thread.health`, as when memory
//!   is short) is no verdict on the package (berth's failure, not its): the container runs on,
//!   and probes stay due instead of stopping for good.
//!
//! A delta rebuild at the threshold is tests/delta.rs's step 7; tools and admin clients that
//! never end are the unit tests of berth-sys's host.rs and the daemon's api module.

mod common;

use common::*;
use serde_json::Value;
use std::time::Instant;

fn state_entry(sb: &Sandbox, name: &str) -> Value {
    let s: Value =
        serde_json::from_slice(&std::fs::read(sb.state_dir().join("state.json")).unwrap()).unwrap();
    s["packages"][name].clone()
}

const RESTART: &str = "[restart]\npolicy = \"never\"\n";
/// The trial must outlast the hog's climb (384 MiB at 80 MiB/s): settle 8 s.
const UPGRADE: &str = "[upgrade]\ndeadline = \"20s\"\nsettle = \"8s\"\n";

#[test]
fn an_upgrade_the_guard_cuts_short_is_rolled_back_and_leaves_no_trial() {
    let mut sb = Sandbox::new("lowmem-upg");
    sb.write_config(UPGRADE);
    let tmp = TempDir::new("lowmem-hog");
    let hog = hog_binary(&tmp.0, 48, 8, 100);
    sb.offer_only(&Pkg::script("app", "1", "echo up 1\nexec sleep 600\n").table(RESTART));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "app"]);
    sb.ok(&["start", "app"]);
    sb.wait_log("app", "up 1");

    sb.offer_only(
        &Pkg::new("app", "2", &["/bin/hog"])
            .file("bin/hog", &hog)
            .table(RESTART),
    );
    sb.ok(&["update"]);
    // Version 2 takes memory until the guard, 96 MiB below what is available just before the
    // upgrade, kills it (app runs on across the daemon's restart; the hog's 384 MiB leave
    // room for what the host frees meanwhile).
    sb.kill_daemon(15);
    let threshold = mem_available() - (96 << 20);
    sb.write_config(&format!(
        "{UPGRADE}[guard]\nthreshold = \"{}K\"\ninterval = \"200ms\"\n",
        threshold >> 10
    ));
    sb.start_daemon();
    let t0 = Instant::now();
    let out = sb.berth(&["--json", "upgrade"]);
    let took = t0.elapsed();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a rollback is a failure: {out:?}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let back = &v["rolled_back"][0];
    assert_eq!(back["from"], "1", "{v}");
    assert_eq!(back["to"], "2", "{v}");
    assert!(
        back["reason"].as_str().unwrap_or("").contains("2 stopped"),
        "{v}\n{}",
        sb.daemon_log_text()
    );
    println!(
        "low memory: guard threshold {} MiB; the upgrade's trial killed and rolled back in {:.1} s",
        threshold >> 20,
        took.as_secs_f64()
    );

    // The guard's kill is on record; the old version runs again; no trial is left.
    let log = sb.daemon_log_text();
    assert!(log.contains("memory guard: killed app pid"), "{log}");
    sb.wait_status("app", 10, "app 1 running again", |c| {
        c["state"] == "running" && c["version"] == "1"
    });
    let e = state_entry(&sb, "app");
    assert!(e["trial"].is_null(), "{e}");
    assert!(e["previous"].is_null(), "{e}");
    sb.wait_log("app", "up 1");

    // Nothing waits on a trial: a second upgrade is taken (and fails the same way).
    let again = sb.berth(&["--json", "upgrade"]);
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(!err.contains("still being confirmed"), "{err}");
    let v: Value = serde_json::from_slice(&again.stdout).unwrap_or(Value::Null);
    assert_eq!(v["rolled_back"][0]["to"], "2", "{again:?}");
    sb.wait_status("app", 10, "app 1 running again", |c| {
        c["state"] == "running" && c["version"] == "1"
    });
    assert!(state_entry(&sb, "app")["trial"].is_null());

    sb.ok(&["stop", "-t", "1", "app"]);
    sb.ok(&["remove", "app"]);
}

#[test]
fn a_health_probe_without_a_thread_is_no_verdict_and_the_next_stays_due() {
    let mut sb = Sandbox::new("lowmem-hc");
    sb.add(&Pkg::script("app", "1", "echo up\nexec sleep 600\n").table(
        "[restart]\npolicy = \"on-failure\"\ndelay = \"100ms\"\n\
             [health]\ncmd = [\"/bin/busybox\", \"true\"]\ninterval = \"200ms\"\nretries = 2\n",
    ));
    sb.start_daemon_env(&[("BERTH_FAULT", "thread.health")]);
    sb.ok(&["update"]);
    sb.ok(&["install", "app"]);
    sb.ok(&["start", "app"]);
    let at = |c: &Value| c["health"]["checked_at"].as_u64();
    let first = sb.wait_status("app", 20, "a probe tried", |c| {
        c["health"]["last"]
            .as_str()
            .is_some_and(|l| l.starts_with("the probe could not start: "))
    });
    // Tried again and again (every 200 ms): the machine did not wait for ever for the first.
    let later = sb.wait_status("app", 20, "a later probe tried", |c| at(c) > at(&first));
    // No verdict on the package: not unhealthy, never restarted for it.
    assert_eq!(later["state"], "running", "{later}");
    assert_eq!(later["restarts"], 0, "{later}");
    assert_eq!(later["health"]["failures"], 0, "{later}");
    assert_ne!(later["health"]["status"], "unhealthy", "{later}");
    let log = sb.daemon_log_text();
    let said = log.matches("app: the probe could not start: ").count();
    assert_eq!(said, 1, "said once a minute, not every probe:\n{log}");
    sb.ok(&["stop", "-t", "1", "app"]);
    sb.ok(&["remove", "app"]);
}
