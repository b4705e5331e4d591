//! End to end, as root, real LXC, as on an old kernel (docs/kernels.md): every berth of these
//! sandboxes, the daemon and all it starts (shims, LXC monitors, containers, health probes)
//! runs under a seccomp filter that answers ENOSYS for the syscalls newer than Linux 4.14
//! (pidfd_open, pidfd_send_signal, pidfd_getfd, the mount API, clone3, openat2, close_range,
//! faccessat2) and with `/proc/pressure` hidden (no PSI), the way crun's tests force ENOSYS.
//! Containers start and stop, the supervisor sees ends and restarts, health probes run,
//! the memory guard kills a hog by pid, hot-binding works by mount propagation, and
//! `berth check` names each fallback in use.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Whether this test process sees PSI (not when the whole run is under
/// scripts/oldkernel.sh): the daemon's hiding must not change it.
fn own_psi() -> bool {
    Path::new("/proc/pressure/memory").exists()
}

/// The daemon really runs under the filter and without PSI: its own view says so; and the
/// test's own view (`psi`, taken before) is what it was.
fn assert_daemon_is_old_kernel(sb: &Sandbox, psi: bool) {
    let pid = sb.daemon_pid().expect("daemon");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(
        status.lines().any(|l| l == "Seccomp:\t2"),
        "the daemon runs without the filter:\n{status}"
    );
    assert!(
        !Path::new(&format!("/proc/{pid}/root/proc/pressure/memory")).exists(),
        "the daemon sees PSI"
    );
    assert_eq!(
        own_psi(),
        psi,
        "the tests' own view of PSI changed: the hiding leaked"
    );
}

#[test]
fn check_names_the_fallbacks_and_version_shows_the_loader_error() {
    let sb = Sandbox::old_kernel("ok-check");
    let v = sb.json(&["check"]);
    let fallbacks: Vec<String> = v["fallbacks"]
        .as_array()
        .unwrap_or_else(|| panic!("no fallbacks: {v}"))
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    for (name, says) in [
        (
            "pidfd missing: ENOSYS (kernel < 5.3)",
            "kills by pid after checking the start time",
        ),
        (
            "PSI memory missing",
            "reads MemAvailable every [guard] interval",
        ),
        (
            "open_tree missing: ENOSYS (Linux < 5.2)",
            "mount propagation",
        ),
        (
            "mount_setattr missing: ENOSYS (Linux < 5.12)",
            "remounted read-only",
        ),
    ] {
        assert!(
            fallbacks
                .iter()
                .any(|f| f.starts_with(name) && f.contains(says)),
            "{name} … {says} not in {fallbacks:?}"
        );
    }
    let text = sb.ok(&["check"]);
    assert!(text.contains("fallbacks in use"), "{text}");
    assert!(
        text.contains("pidfd missing: ENOSYS (kernel < 5.3): the memory guard kills by pid"),
        "{text}"
    );
    // liblxc itself loads under the filter.
    let lxc = v["features"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "liblxc")
        .unwrap();
    assert_eq!(lxc["status"], "present", "{lxc}");

    // The same binary without the filter uses none of the fallbacks this kernel need not
    // (unless the whole run is under the filter: then this process has no pidfds either).
    if !berth_sys::process::pidfd_supported() {
        berth_sys::skip::record(
            "kernel pidfd",
            "old_kernel: check without the filter not compared (this test runs without pidfds)",
        );
    }
    let plain = Command::new(BERTH)
        .args(["--json", "check"])
        .env("BERTH_CONFIG", &sb.config)
        .output()
        .unwrap();
    let pv: serde_json::Value = serde_json::from_slice(&plain.stdout).unwrap();
    let plain_fb = pv["fallbacks"].as_array().unwrap();
    assert_eq!(
        plain_fb
            .iter()
            .any(|f| f.as_str().unwrap().starts_with("pidfd")),
        !berth_sys::process::pidfd_supported(),
        "{pv}"
    );

    // liblxc that cannot be loaded: `--version` and `check` show the loader's own error.
    let lib = [
        "/usr/lib/x86_64-linux-gnu",
        "/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
    ]
    .iter()
    .map(|d| Path::new(d).join("liblxc.so.1"))
    .find(|p| p.exists())
    .expect("liblxc.so.1 in the usual library directories");
    let real = std::fs::canonicalize(&lib).unwrap();
    // In a mount namespace of its own (unshare, util-linux): the host keeps its liblxc.
    let script = format!(
        "mount --bind /dev/null {real} && {berth} --version && {berth} check; true",
        real = real.display(),
        berth = BERTH
    );
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .env("BERTH_CONFIG", &sb.config)
        .output()
        .expect("unshare (util-linux)");
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        text.contains("(no liblxc: cannot load liblxc.so.1: ") && text.contains("too short"),
        "--version hides the loader error:\n{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("liblxc")
            && l.contains("missing")
            && l.contains("cannot load liblxc.so.1: ")
            && l.contains("too short")),
        "check hides the loader error:\n{text}"
    );
    assert!(!text.contains("did not report a version"), "{text}");
}

#[test]
fn containers_supervision_and_health_probes_work_without_pidfds() {
    let psi = own_psi();
    let mut sb = Sandbox::old_kernel("ok-sup");
    sb.pack(
        &Pkg::script("svc", "1.0", "echo up\nexec sleep 600\n")
            .file("check.sh", b"test ! -e /data/sick\n")
            .table("[restart]\ndelay = \"100ms\"\n[health]\ncmd = [\"/bin/busybox\", \"sh\", \"/check.sh\"]\ninterval = \"300ms\"\ntimeout = \"2s\"\nretries = 2\n"),
    );
    sb.pack(
        &Pkg::script("crasher", "1.0", "echo crashing\nsleep 0.2\nexit 3\n").table(
            "[restart]\npolicy = \"on-failure\"\nmax_retries = 2\ndelay = \"100ms\"\nmultiplier = 1\n",
        ),
    );
    sb.pack(&Pkg::script(
        "plain",
        "1.0",
        "echo plain up\nexec sleep 600\n",
    ));
    sb.build_repo();
    sb.start_daemon();
    assert_daemon_is_old_kernel(&sb, psi);
    sb.ok(&["update"]);
    sb.ok(&["install", "svc", "crasher", "plain"]);

    // Start and stop.
    sb.ok(&["start", "plain"]);
    sb.wait_log("plain", "plain up");
    let init = sb.status_of("plain")["init_pid"].as_i64().unwrap();
    let st = std::fs::read_to_string(format!("/proc/{init}/status")).unwrap();
    assert!(
        st.lines().any(|l| l.starts_with("Seccomp:\t2")),
        "the container runs without the filter"
    );
    // berth's own profile stacks on the inherited filter (LXC skips it under a filter
    // unless lxc.seccomp.allow_nesting): the payload has more filters than the daemon.
    let filters = |pid: i64| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| {
                l.strip_prefix("Seccomp_filters:")?
                    .trim()
                    .parse::<u32>()
                    .ok()
            })
            .unwrap_or(0)
    };
    let payload = berth_sys::process::children(Path::new("/proc"), init as i32)[0];
    let daemon = sb.daemon_pid().unwrap() as i64;
    assert!(
        filters(payload as i64) > filters(daemon),
        "berth's seccomp profile is not loaded: payload {} filters, daemon {}",
        filters(payload as i64),
        filters(daemon)
    );

    // Health: healthy, then two failed probes end the run and it is started again.
    sb.ok(&["start", "svc"]);
    let c = sb.wait_status("svc", 15, "healthy", |c| c["health"]["status"] == "healthy");
    assert!(
        c["health"]["last"]
            .as_str()
            .unwrap()
            .starts_with("ok: exit 0"),
        "{c}"
    );
    let first = c["init_pid"].as_i64().unwrap();
    std::fs::write(sb.state_dir().join("data/svc/sick"), b"").unwrap();
    let c = sb.wait_status("svc", 15, "restarted after failed probes", |c| {
        c["init_pid"].as_i64().is_some_and(|p| p != first)
    });
    assert_eq!(c["restarts"], 1, "{c}");
    assert!(
        c["reason"]
            .as_str()
            .unwrap()
            .contains("health checks in a row failed"),
        "{c}"
    );
    std::fs::remove_file(sb.state_dir().join("data/svc/sick")).unwrap();

    // Exits: each end is seen, restarted twice, then failed.
    sb.ok(&["start", "crasher"]);
    let c = sb.wait_status("crasher", 20, "failed", |c| c["state"] == "failed");
    assert_eq!(c["restarts"], 2, "{c}");
    assert_eq!(c["last_exit"]["code"], 3, "{c}");

    // The shim gone, the daemon's watcher waits on the init itself (no pidfd: by its start
    // time in /proc) and still sees the end.
    let shim = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .find(|p| {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            comm.trim() == "berth-shim"
                && args.get(1) == Some(&&b"__shim"[..])
                && args.get(2) == Some(&&b"plain"[..])
                && String::from_utf8_lossy(&cmd).contains(sb.dir.to_str().unwrap())
        })
        .expect("plain's shim");
    berth_sys::process::kill(shim, libc::SIGKILL).unwrap();
    quiet_for(Duration::from_millis(300), "plain ending with its shim");
    assert_eq!(sb.status_of("plain")["state"], "running");
    berth_sys::process::kill(init as i32, libc::SIGKILL).unwrap();
    sb.wait_status("plain", 10, "seen stopped without its shim", |c| {
        c["state"] != "running" && c["init_pid"].is_null()
    });

    sb.ok(&["stop", "-t", "2", "svc"]);
    assert_eq!(sb.status_of("svc")["state"], "stopped");
    let log = sb.daemon_log_text();
    assert!(
        log.contains("memory guard: no pidfd (Linux < 5.3)"),
        "the guard did not say it kills by pid:\n{log}"
    );
    assert!(log.contains("no PSI trigger"), "{log}");
    sb.ok(&["remove", "svc", "crasher", "plain"]);
    assert!(sb.stray_mounts().is_empty(), "{:?}", sb.stray_mounts());
}

#[test]
fn the_memory_guard_kills_a_hog_by_pid_without_pidfds_or_psi() {
    let psi = own_psi();
    let mut sb = Sandbox::old_kernel("ok-guard");
    let tmp = TempDir::new("ok-guard-hog");
    sb.add(
        &Pkg::new("hog", "1", &["/bin/hog"])
            .file("bin/hog", &hog_binary(&tmp.0, 64, 16, 50))
            .table("[resources]\npriority = -10\n[restart]\npolicy = \"never\""),
    );
    sb.add(
        &Pkg::script("quiet", "1", "echo quiet up\nwhile :; do sleep 1; done\n")
            .table("[resources]\npriority = 50"),
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "hog", "quiet"]);
    sb.ok(&["start", "quiet"]);
    sb.wait_log("quiet", "quiet up");
    let quiet_init = sb.status_of("quiet")["init_pid"].as_i64().unwrap();
    // The threshold just below what is available now (as tests/guard.rs); the hog takes up
    // to 1 GiB, so that what the other tests of this file free meanwhile cannot keep
    // MemAvailable above it.
    let threshold = sb.restart_with_guard_below_available();
    assert_daemon_is_old_kernel(&sb, psi);
    let daemon_pid = sb.daemon_pid().unwrap();
    sb.ok(&["start", "hog"]);
    sb.wait_log("hog", "hog 16 MiB");
    let hog_init = sb.status_of("hog")["init_pid"].as_i64().unwrap();
    let ns = std::fs::read_link(format!("/proc/{hog_init}/ns/pid")).unwrap();
    let hog = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i64>().ok())
        .filter(|&p| p != hog_init)
        .find(|p| std::fs::read_link(format!("/proc/{p}/ns/pid")).is_ok_and(|n| n == ns))
        .expect("the hog's payload");
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive(hog) {
        assert!(
            Instant::now() < deadline,
            "the guard never killed the hog (MemAvailable {} MiB, threshold {} MiB); daemon log:\n{}",
            mem_available() >> 20,
            threshold >> 20,
            sb.daemon_log_text()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The guard records its kill just after the signal: the end may be seen first.
    let st = sb.wait_status("hog", 10, "stopped, its guard kill recorded", |c| {
        c["state"] == "stopped" && !c["last_exit"].is_null() && !c["guard_kill"].is_null()
    });
    assert_eq!(st["last_exit"]["signal"], 9, "{st}");
    assert_eq!(st["guard_kill"]["pid"].as_i64(), Some(hog), "{st}");
    let log = sb.daemon_log_text();
    assert!(
        log.contains("memory guard: no pidfd (Linux < 5.3): kills by pid"),
        "{log}"
    );
    assert!(log.contains("no PSI trigger"), "{log}");
    assert!(
        log.contains(&format!("memory guard: killed hog pid {hog}")),
        "{log}"
    );
    // Nothing else was touched.
    let q = sb.status_of("quiet");
    assert_eq!(q["state"], "running", "{q}");
    assert_eq!(q["init_pid"].as_i64(), Some(quiet_init));
    assert!(alive(daemon_pid as i64), "the daemon was killed");
    sb.ok(&["stop", "-t", "1", "quiet"]);
    sb.ok(&["remove", "hog", "quiet"]);
}

#[test]
fn hot_binding_works_by_mount_propagation_without_the_mount_api() {
    let psi = own_psi();
    let mut sb = Sandbox::old_kernel("ok-bind");
    sb.pack(&Pkg::script("app", "1", "echo up\nexec sleep 100000\n"));
    sb.pack(
        &Pkg::new("tools", "1.0", &["/bin/busybox", "true"]).file("share/data.txt", b"tools 1.0\n"),
    );
    sb.build_repo();
    sb.start_daemon();
    assert_daemon_is_old_kernel(&sb, psi);
    sb.ok(&["update"]);
    sb.ok(&["install", "app", "tools"]);
    sb.ok(&["start", "app"]);
    sb.wait_log("app", "up");
    let init = sb.status_of("app")["init_pid"].as_i64().unwrap();
    let v = sb.json(&["bind", "tools", "--into", "app"]);
    assert_eq!(v["method"], "propagation", "{v}");
    let data = format!("/proc/{init}/root/opt/tools/share/data.txt");
    assert_eq!(std::fs::read_to_string(&data).unwrap(), "tools 1.0\n");
    let info = std::fs::read_to_string(format!("/proc/{init}/mountinfo")).unwrap();
    let line = info
        .lines()
        .find(|l| l.split(' ').nth(4) == Some("/opt/tools"))
        .unwrap_or_else(|| panic!("/opt/tools not mounted:\n{info}"));
    assert!(line.contains(" ro,nosuid,nodev"), "{line}");
    assert_eq!(sb.status_of("app")["init_pid"].as_i64(), Some(init));
    sb.ok(&["unbind", "tools", "--from", "app"]);
    assert!(!Path::new(&data).exists(), "still bound");
    sb.ok(&["stop", "-t", "1", "app"]);
    sb.ok(&["remove", "app", "tools"]);
    assert!(sb.stray_mounts().is_empty(), "{:?}", sb.stray_mounts());
}
