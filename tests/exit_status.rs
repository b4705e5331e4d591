//! How a container ended, as `berth status` reports it: an exit code, or the signal that
//! killed the payload (with the core-dump flag), never a killed payload shown as "exit 0".

mod common;

use common::*;
use std::time::{Duration, Instant};

/// Waits until the container has stopped and returns its `last_exit`.
fn last_exit(sb: &Sandbox, name: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let c = sb.status_of(name);
        if c["state"] == "stopped" && !c["last_exit"].is_null() {
            return c["last_exit"].clone();
        }
        assert!(Instant::now() < deadline, "{name} did not stop: {c}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn payload_pid(sb: &Sandbox, name: &str) -> i32 {
    let init = sb.status_of(name)["init_pid"].as_i64().unwrap() as i32;
    // init.lxc's one child is the payload
    let kids = std::fs::read_to_string(format!("/proc/{init}/task/{init}/children")).unwrap();
    kids.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn exit_codes_and_killing_signals_are_reported_as_they_were() {
    let mut sb = Sandbox::new("exitst");
    sb.pack(&Pkg::script("three", "1.0", "echo up\nsleep 0.2\nexit 3\n"));
    sb.pack(&Pkg::script(
        "segv",
        "1.0",
        "echo up\nsleep 0.2\nkill -SEGV $$\nsleep 5\n",
    ));
    sb.pack(&Pkg::script("victim", "1.0", "echo up\nexec sleep 600\n"));
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "three", "segv", "victim"]);

    sb.ok(&["start", "three"]);
    let e = last_exit(&sb, "three");
    assert_eq!(e["code"], 3, "{e}");
    assert!(e["signal"].is_null(), "{e}");
    assert_eq!(e["core_dumped"], false, "{e}");
    assert!(sb.ok(&["status", "three"]).contains("exit 3"));

    sb.ok(&["start", "segv"]);
    let e = last_exit(&sb, "segv");
    assert_eq!(e["signal"], 11, "{e}");
    assert!(e["code"].is_null(), "{e}");
    // relayed by LXC's init as exit 139: whether it dumped core is not known, and not claimed
    assert!(e["core_dumped"].is_null(), "{e}");
    assert!(sb.ok(&["status", "segv"]).contains("signal 11"));

    // The payload killed from the host.
    sb.ok(&["start", "victim"]);
    sb.wait_log("victim", "up");
    let pid = payload_pid(&sb, "victim");
    let _ = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status();
    let e = last_exit(&sb, "victim");
    assert_eq!(e["signal"], 9, "payload SIGKILLed: {e}");
    assert!(e["code"].is_null(), "{e}");
    assert!(sb.ok(&["status", "victim"]).contains("signal 9"));

    // The container's init killed from the host.
    sb.ok(&["start", "victim"]);
    sb.wait_log("victim", "up");
    let init = sb.status_of("victim")["init_pid"].as_i64().unwrap();
    let _ = std::process::Command::new("kill")
        .args(["-9", &init.to_string()])
        .status();
    let e = last_exit(&sb, "victim");
    assert_eq!(e["signal"], 9, "init SIGKILLed: {e}");
    assert!(e["code"].is_null(), "{e}");
    let text = sb.ok(&["status", "victim"]);
    assert!(text.contains("signal 9"), "{text}");
}
