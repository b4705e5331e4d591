//! End to end, as root, with real LXC: the boot counter and safe mode. Five daemon starts
//! killed before they confirm put the sixth in safe mode (no container, no image mounted,
//! starts refused, the reason names the package); `safe-mode clear` brings the container
//! back, `safe-mode enter` takes it away again, and safe mode outlives a daemon restart.

mod common;

use common::*;
use std::time::Duration;

/// The unconfirmed starts in `state/boot.json`.
fn unconfirmed(sb: &Sandbox) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(sb.state_dir().join("boot.json")).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    v["unconfirmed"].as_array().cloned().unwrap_or_default()
}

fn daemon_status(sb: &Sandbox) -> serde_json::Value {
    sb.json(&["status"])["daemon"].clone()
}

fn wait_state(sb: &Sandbox, name: &str, state: &str) {
    wait_until(&format!("{name} {state}"), Duration::from_secs(20), || {
        sb.status_of(name)["state"] == state
    });
}

/// Nothing of berth's is mounted: no image, no /data bind, no merged root.
fn assert_nothing_mounted(sb: &Sandbox) {
    let m = sb.mounts();
    assert!(m.is_empty(), "mounted in safe mode: {m:?}");
}

#[test]
fn five_unconfirmed_starts_bring_safe_mode_until_cleared() {
    let mut sb = Sandbox::new("safe");
    sb.add(&Pkg::script("web", "1", "echo up; exec sleep 1000"));
    // The first daemon stays up long enough to confirm.
    sb.write_config("[boot]\nconfirm_after = \"2s\"\n");
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "web"]);
    sb.ok(&["start", "web"]);
    wait_until("the first start confirms", Duration::from_secs(10), || {
        unconfirmed(&sb).is_empty()
    });
    sb.stop_daemon();

    // Five starts killed well before confirm_after; web keeps running across them.
    sb.write_config("[boot]\nconfirm_after = \"30s\"\n");
    for i in 1..=5 {
        // Returns once the daemon answers (`berth status`).
        sb.start_daemon();
        let starts = unconfirmed(&sb);
        assert_eq!(starts.len(), i, "{starts:?}");
        assert_eq!(starts[i - 1]["containers"], serde_json::json!(["web"]));
        assert_eq!(daemon_status(&sb)["safe_mode"], false);
        sb.kill_daemon(libc::SIGKILL);
    }

    // The sixth: safe mode, web stopped, nothing mounted.
    sb.start_daemon();
    let d = daemon_status(&sb);
    assert_eq!(d["safe_mode"], true, "{d}");
    let reason = d["safe_mode_reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("5 daemon starts in a row") && reason.contains("web"),
        "{reason}"
    );
    let human = sb.ok(&["status"]);
    assert!(human.contains("safe mode: 5 daemon starts"), "{human}");
    assert_eq!(sb.status_of("web")["state"], "stopped");
    assert_nothing_mounted(&sb);
    assert!(
        sb.status_of("web")["autostart"] == true,
        "safe mode is not the operator's stop"
    );
    assert!(sb.state_dir().join("safe-mode.json").exists());

    // What would start a container or mount an image is refused.
    let (code, err) = sb.fail(&["start", "web"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("safe mode") && err.contains("berth safe-mode clear"),
        "{err}"
    );
    let out = sb.berth(&["--json", "start", "web"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        (v["code"].as_str(), v["status"].as_u64()),
        (Some("safe_mode"), Some(409))
    );
    let (_, err) = sb.fail(&["restart", "web"]);
    assert!(err.contains("safe mode"), "{err}");
    let (_, err) = sb.fail(&["install", "web"]);
    assert!(err.contains("safe mode"), "{err}");
    assert_nothing_mounted(&sb);

    // Clear: at once, without a restart, web runs again.
    let v = sb.json(&["safe-mode", "clear"]);
    assert_eq!(v["safe_mode"], false, "{v}");
    assert_eq!(v["containers"], serde_json::json!(["web"]));
    wait_state(&sb, "web", "running");
    assert_eq!(daemon_status(&sb)["safe_mode"], false);
    assert!(!sb.mounts().is_empty());
    assert!(!sb.state_dir().join("safe-mode.json").exists());
    assert!(unconfirmed(&sb).is_empty());

    // Enter: stopped, unmounted, kept across a restart.
    let v = sb.json(&["safe-mode", "enter"]);
    assert_eq!(v["safe_mode"], true, "{v}");
    assert_eq!(v["containers"], serde_json::json!(["web"]));
    assert_eq!(sb.status_of("web")["state"], "stopped");
    assert_nothing_mounted(&sb);
    sb.stop_daemon();
    sb.start_daemon();
    let d = daemon_status(&sb);
    assert_eq!(d["safe_mode"], true, "{d}");
    assert!(
        d["safe_mode_reason"]
            .as_str()
            .unwrap_or_default()
            .contains("entered by the operator"),
        "{d}"
    );
    assert_eq!(sb.status_of("web")["state"], "stopped");
    assert_nothing_mounted(&sb);
    sb.ok(&["safe-mode", "clear"]);
    wait_state(&sb, "web", "running");
    sb.ok(&["stop", "web"]);
}

#[test]
fn a_start_that_stays_up_clears_the_counter_and_a_damaged_one_starts_afresh() {
    let mut sb = Sandbox::new("confirm");
    sb.write_config("[boot]\nconfirm_after = \"2s\"\n");
    std::fs::create_dir_all(sb.state_dir()).unwrap();
    let starts: Vec<String> = (1..=3)
        .map(|i| format!(r#"{{"at":{i},"containers":["web"]}}"#))
        .collect();
    std::fs::write(
        sb.state_dir().join("boot.json"),
        format!(r#"{{"format":1,"unconfirmed":[{}]}}"#, starts.join(",")),
    )
    .unwrap();
    sb.start_daemon();
    assert_eq!(unconfirmed(&sb).len(), 4, "this start is counted");
    assert_eq!(daemon_status(&sb)["safe_mode"], false);
    // The counter is written before the log line: wait for both.
    wait_until("the start confirms", Duration::from_secs(10), || {
        unconfirmed(&sb).is_empty() && sb.daemon_log_text().contains("boot counter cleared")
    });
    sb.kill_daemon(libc::SIGKILL);

    // A damaged counter is said in the log and counted afresh; never a failed start.
    std::fs::write(sb.state_dir().join("boot.json"), b"{\"format\":1,\"unc").unwrap();
    sb.start_daemon();
    assert_eq!(unconfirmed(&sb).len(), 1);
    assert!(
        sb.daemon_log_text().contains("counting starts afresh"),
        "{}",
        sb.daemon_log_text()
    );
    // No temporary files of the atomic writes are left.
    let left: Vec<String> = std::fs::read_dir(sb.state_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.contains(".tmp."))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A container waiting for a restart when safe mode comes is no failure: it is not started
/// (and not counted) in safe mode, and `clear` gives it back its restarts.
#[test]
fn safe_mode_holds_a_restart_without_failing_the_package() {
    let mut sb = Sandbox::new("safeback");
    sb.add(
        &Pkg::script("flaky", "1", "echo up; sleep 0.3; exit 1")
            .table("[restart]\ndelay = \"1s\"\nmax_retries = 3\n"),
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "flaky"]);
    sb.ok(&["start", "flaky"]);
    wait_state(&sb, "flaky", "backoff");
    sb.ok(&["safe-mode", "enter"]);
    // well past the held restart and the retries it would have used up
    quiet_for(Duration::from_secs(5), "the held restart in safe mode");
    let c = sb.status_of("flaky");
    assert_eq!(c["state"], "stopped", "{c}");
    assert!(c["retries"].as_u64() <= Some(1), "{c}");
    assert!(
        !sb.daemon_log_text().contains("flaky keeps failing"),
        "{}",
        sb.daemon_log_text()
    );
    sb.ok(&["safe-mode", "clear"]);
    // back: started again (and failing again, as before safe mode)
    wait_until(
        "flaky restarted after clear",
        Duration::from_secs(20),
        || {
            sb.status_of("flaky")["restarts"].as_u64() >= Some(1)
                || sb.status_of("flaky")["state"] == "running"
        },
    );
    assert_ne!(sb.status_of("flaky")["state"], "failed");
}
