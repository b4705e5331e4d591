//! The escape-probe suite, as root with real LXC: a static C program (tests/probes/escape.c)
//! packed into a package tries, from inside its container, to take the device: load a
//! module, mount, write the package or the kernel's knobs, create or open devices, forge
//! packets, reach host processes, gain root through a setuid file, rename the host, reboot,
//! use bpf/perf, set the clock, open_by_handle_at, io_uring, fork without end, read another
//! container's /data, read the kernel's keys, timers and slab caches, write IRQ affinity,
//! administer the host's interfaces, reach another container's LXC command socket. Every
//! attempt must fail in the SPECIFIC way listed here; a table of probe, expected, observed is
//! printed for each container kind: unprivileged, privileged (trusted), and privileged sharing
//! the host's network namespace (trusted, network "shared").

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Compiles the probe program (static: the package carries no libc).
fn build_probe(tmp: &TempDir) -> Option<PathBuf> {
    let Some(gcc) = which("gcc") else {
        berth_sys::skip::record(
            "package gcc libc6-dev",
            "escape probes: gcc is not installed",
        );
        return None;
    };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/probes/escape.c");
    let out = tmp.path("escape");
    let o = Command::new(gcc)
        .args(["-static", "-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "gcc -static {}: {}\n(install libc6-dev)",
        src.display(),
        stderr(&o)
    );
    Some(out)
}

/// Packs the probe as package `name`: /bin/escape, and a setuid-root copy /bin/escape-suid.
fn pack_probe(sb: &Sandbox, probe: &Path, name: &str, argv: &[String], tables: &str) {
    let dir = sb.dir.join("src").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join(".berth")).unwrap();
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::copy(probe, dir.join("bin/escape")).unwrap();
    std::fs::copy(probe, dir.join("bin/escape-suid")).unwrap();
    std::fs::set_permissions(
        dir.join("bin/escape-suid"),
        std::fs::Permissions::from_mode(0o4755),
    )
    .unwrap();
    let argv: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
    std::fs::write(
        dir.join(".berth/manifest.toml"),
        format!(
            "[package]\nname = \"{name}\"\nversion = \"1.0\"\n[entrypoint]\nargv = [{}]\n{tables}\n",
            argv.join(", ")
        ),
    )
    .unwrap();
    let out = sb.repo.join("packages").join(format!("{name}-1.0.sqfs"));
    let o = sb.berth(&["pack", dir.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "pack {name}: {}", stderr(&o));
    assert!(
        stderr(&o).contains("setuid"),
        "pack should warn about the setuid file: {}",
        stderr(&o)
    );
}

/// A host process the probes try to reach; killed even when the test fails.
struct HostProc(Child);
impl Drop for HostProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

/// Waits for the probes to finish; returns (probe → result, fork count).
fn results(sb: &Sandbox, name: &str) -> (Vec<(String, String)>, u32) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let text = loop {
        let s = stdout(&sb.berth(&["logs", name]));
        if s.contains("probes done") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: the probes did not finish; output so far:\n{s}\ndaemon log:\n{}",
            sb.daemon_log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut out = Vec::new();
    let mut forks = 0;
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            ["probe", n, r] => out.push((n.to_string(), r.to_string())),
            ["forks", n] => forks = n.parse().unwrap(),
            ["detail", ..] => println!("{name}: {l}"),
            _ => {}
        }
    }
    (out, forks)
}

/// What each probe must observe. Errnos: EPERM from the seccomp profile or a missing
/// capability, EROFS from read-only mounts, ENOENT/ESRCH where the thing is not in the
/// container's namespaces at all.
/// `userns`: the container has its own user namespace (files of the host's root are not its
/// own, so some denials come before the read-only check).
fn expected(kind: Kind) -> Vec<(&'static str, &'static str)> {
    let userns = kind == Kind::Unprivileged;
    // A masked file reads empty; a kernel without the file has nothing to mask.
    let masked = |p: &str| {
        if Path::new(p).exists() {
            "empty"
        } else {
            "ENOENT"
        }
    };
    let mut e = vec![
        ("init_module", "EPERM"),
        ("finit_module", "EPERM"),
        ("mount_tmpfs", "EPERM"),
        ("remount_root_rw", "EPERM"),
        ("umount_proc", "EPERM"),
        ("open_tree", "EPERM"),
        ("write_package_new", "EROFS"),
        ("write_package_file", "EROFS"),
        ("write_sys_kernel", "EROFS"),
        ("write_proc_sys", if userns { "EACCES" } else { "EROFS" }),
        // a kernel without magic SysRq has no such file
        (
            "write_sysrq_trigger",
            if Path::new("/proc/sysrq-trigger").exists() {
                "EROFS"
            } else {
                "ENOENT"
            },
        ),
        // IRQ affinity and bus knobs: read-only binds over what proc:mixed leaves writable
        ("write_proc_irq", if userns { "EACCES" } else { "EROFS" }),
        (
            "write_proc_irq_n",
            if !has_numbered_irq() {
                "ENOENT"
            } else if userns {
                "EACCES"
            } else {
                "EROFS"
            },
        ),
        (
            "write_proc_bus",
            if !Path::new("/proc/bus/pci/devices").exists() {
                "ENOENT"
            } else if userns {
                "EACCES"
            } else {
                "EROFS"
            },
        ),
        ("read_proc_keys", masked("/proc/keys")),
        ("read_proc_key_users", masked("/proc/key-users")),
        ("read_proc_timer_list", masked("/proc/timer_list")),
        ("read_proc_slabinfo", masked("/proc/slabinfo")),
        ("read_proc_vmallocinfo", masked("/proc/vmallocinfo")),
        ("read_proc_kallsyms", masked("/proc/kallsyms")),
        ("list_proc_acpi", masked("/proc/acpi")),
        // no net_admin: the default policy grants trusted packages nothing by name
        ("net_admin_lo_mtu", "EPERM"),
        // other containers' LXC command sockets live in the host's network namespace: a
        // container with its own namespace does not even find them; one sharing the host's
        // is refused by Landlock's abstract-socket scope
        (
            "lxc_command_socket",
            if kind == Kind::Shared {
                "EPERM"
            } else {
                "ECONNREFUSED"
            },
        ),
        ("mknod_block", "EPERM"),
        ("mknod_mem", "EPERM"),
        ("open_dev_sda", "ENOENT"),
        ("open_dev_vda", "ENOENT"),
        ("open_dev_loop0", "ENOENT"),
        ("open_dev_mem", "ENOENT"),
        ("open_dev_kmsg", "ENOENT"),
        ("raw_packet_socket", "EPERM"),
        ("raw_inet_socket", "EPERM"),
        ("ptrace_host_pid", "EPERM"),
        ("kill_host_pid", "ESRCH"),
        ("proc_host_pid", "ENOENT"),
        ("visible_processes", "few"),
        ("setuid_file", "euid1000"),
        ("sethostname", "EPERM"),
        ("reboot", "EPERM"),
        ("kexec_load", "EPERM"),
        ("kexec_file_load", "EPERM"),
        ("swapon", "EPERM"),
        ("bpf", "EPERM"),
        ("perf_event_open", "EPERM"),
        ("clock_settime", "EPERM"),
        ("settimeofday", "EPERM"),
        ("keyctl", "EPERM"),
        ("unshare_user", "EPERM"),
        ("unshare_mount", "EPERM"),
        ("userfaultfd", "EPERM"),
        ("io_uring_setup", "EPERM"),
        ("io_uring_enter", "EPERM"),
        ("io_uring_register", "EPERM"),
        ("fanotify_init", "EPERM"),
        ("pidfd_getfd", "EPERM"),
        ("open_by_handle_at", "EPERM"),
        ("name_to_handle_at", "EPERM"),
        ("other_data", "ENOENT"),
        // the probe's own root has no such path; init's root is not even open to it
        ("other_data_via_proc_root", "EACCES+ENOENT"),
        ("fork_bomb", "EAGAIN"),
    ];
    if cfg!(target_arch = "x86_64") {
        e.push(("iopl", "EPERM"));
    }
    e
}

const PIDS_MAX: u32 = 48;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Unprivileged,
    Privileged,
    Shared,
}

fn check(kind: Kind, got: &[(String, String)], forks: u32) -> Vec<String> {
    println!("\nescape probes, {kind:?} container:");
    println!("{:<26} {:<10} {:<10}", "PROBE", "EXPECTED", "OBSERVED");
    let mut bad = Vec::new();
    for (probe, want) in expected(kind) {
        let seen = got
            .iter()
            .find(|(n, _)| n == probe)
            .map(|(_, r)| r.as_str())
            .unwrap_or("(not run)");
        let mark = if seen == want { "" } else { "  <-- WRONG" };
        println!("{probe:<26} {want:<10} {seen:<10}{mark}");
        if seen != want {
            bad.push(format!(
                "{kind:?}: {probe}: expected {want}, observed {seen}"
            ));
        }
    }
    println!("(fork bomb stopped after {forks} processes; pids limit {PIDS_MAX})");
    if forks >= PIDS_MAX {
        bad.push(format!("{kind:?}: forked {forks} >= pids limit {PIDS_MAX}"));
    }
    bad
}

#[test]
fn every_escape_attempt_fails_in_the_expected_way() {
    let tmp = TempDir::new("escape");
    let Some(probe) = build_probe(&tmp) else {
        return;
    };
    let scoped = kernel_scopes_abstract_sockets();
    let mut sb = Sandbox::new("escape");
    sb.trust("probetrusted");
    sb.trust("probeshared");
    let host = HostProc(Command::new("sleep").arg("300").spawn().unwrap());
    let other = sb.state_dir().join("data/victim/secret");
    let victim_socket = sb.lxcpath().join("victim/command");
    let argv = vec![
        "/bin/escape".to_string(),
        host.0.id().to_string(),
        other.display().to_string(),
        victim_socket.display().to_string(),
    ];
    let tables = format!("[resources]\npids = {PIDS_MAX}\n");
    pack_probe(&sb, &probe, "probe", &argv, &tables);
    pack_probe(&sb, &probe, "probetrusted", &argv, &tables);
    pack_probe(
        &sb,
        &probe,
        "probeshared",
        &argv,
        &format!("{tables}[network]\nmode = \"shared\"\n"),
    );
    sb.pack(&Pkg::script(
        "victim",
        "1.0",
        "echo secret > /data/secret\necho written\nexec sleep 600\n",
    ));
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "probe", "probetrusted", "probeshared", "victim"]);
    start(&sb, "victim");
    sb.wait_log("victim", "written");
    assert!(other.exists(), "the victim's secret is on the host");
    let host_name = hostname();

    let mut bad = Vec::new();
    let mut kinds = vec![
        ("probe", Kind::Unprivileged),
        ("probetrusted", Kind::Privileged),
    ];
    if scoped {
        kinds.push(("probeshared", Kind::Shared));
    } else {
        // Without Landlock's scope the default policy keeps shared containers from starting.
        berth_sys::skip::record(
            "kernel",
            "escape: the shared container's probes need Landlock abstract-socket scoping (Linux 6.12, ABI 6); its refusal is tested instead",
        );
        let (_, err) = sb.fail(&["start", "probeshared"]);
        assert!(err.contains("shared_network = \"unscoped\""), "{err}");
    }
    for (name, kind) in kinds {
        let inspect = sb.json(&["inspect", name]);
        println!("berth inspect {name}: {inspect}");
        let caps: Vec<&str> = inspect["capabilities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert_eq!(caps, berth_kept_caps(), "{name}");
        assert_eq!(inspect["seccomp"]["profile"], "berth-default-2");
        assert_eq!(inspect["trusted"], name != "probe");
        // untrusted: a user namespace; trusted: privileged (the default policy allows it)
        assert_eq!(inspect["privileged"], name != "probe");
        assert_eq!(inspect["idmap"].is_object(), name == "probe");
        start(&sb, name);
        let (got, forks) = results(&sb, name);
        bad.extend(check(kind, &got, forks));
        // The container's own config says what inspect says.
        let cfg = std::fs::read_to_string(sb.lxcpath().join(name).join("config")).unwrap();
        assert!(
            cfg.contains(&format!("lxc.cap.keep = {}\n", caps.join(" "))),
            "{cfg}"
        );
        assert!(cfg.contains("lxc.seccomp.profile = "), "{cfg}");
        // Seccomp is in force in filter mode on the payload.
        let pid = sb.status_of(name)["init_pid"].as_i64().unwrap();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        assert!(status.contains("Seccomp:\t2"), "{status}");
        assert!(status.contains("NoNewPrivs:\t1"), "{status}");
        // The device cgroup allows the allowlist and nothing else (v1; v2 uses a BPF program):
        // in the payload's leaf of the container's budget, where LXC puts the container.
        let list = Path::new("/sys/fs/cgroup/devices")
            .join(&sb.cgroup_parent)
            .join(name)
            .join("payload")
            .join("devices.list");
        if list.exists() {
            let mut got: Vec<String> = std::fs::read_to_string(&list)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect();
            got.sort();
            let mut want: Vec<&str> = vec![
                "c 1:3 rwm",
                "c 1:5 rwm",
                "c 1:7 rwm",
                "c 1:8 rwm",
                "c 1:9 rwm",
                "c 5:0 rwm",
                "c 5:2 rwm",
                "c 136:* rwm",
            ];
            want.sort();
            assert_eq!(got, want, "{}", list.display());
        } else {
            berth_sys::skip::record(
                "kernel cgroup-v1-devices",
                "device cgroup list check: no cgroup v1 devices hierarchy",
            );
        }
        let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
        let map: Vec<&str> = map.split_whitespace().collect();
        if name == "probe" {
            let host = inspect["idmap"]["host"].as_u64().unwrap().to_string();
            assert_eq!(map, ["0", host.as_str(), "65536"], "{name}: uid_map");
        } else {
            assert_eq!(map, ["0", "0", "4294967295"], "{name}: uid_map");
        }
        sb.ok(&["stop", name]);
    }
    assert_eq!(hostname(), host_name, "the host's hostname changed");
    assert_eq!(
        sb.status_of("victim")["state"],
        "running",
        "the victim container survived"
    );
    assert!(
        bad.is_empty(),
        "escape probes did not fail as expected:\n{}",
        bad.join("\n")
    );
}

/// A syscall the default profile denies, granted to one package by the device policy: it
/// works in that package's container, and only there.
#[test]
fn a_granted_syscall_works_in_that_container_only() {
    let tmp = TempDir::new("grant-sys");
    let Some(probe) = build_probe(&tmp) else {
        return;
    };
    let mut sb = Sandbox::new("grant-sys");
    let argv = vec!["/bin/escape".to_string(), "--grantable".to_string()];
    pack_probe(
        &sb,
        &probe,
        "granted",
        &argv,
        "[permissions]\nsyscalls = [\"keyctl\", \"personality\"]",
    );
    pack_probe(&sb, &probe, "plain", &argv, "");
    sb.build_repo();
    sb.write_config("[security]\ngrant = \"keyctl personality\"\n");
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "granted", "plain"]);
    let inspect = sb.json(&["inspect", "granted"]);
    assert_eq!(
        inspect["seccomp"]["granted"],
        serde_json::json!(["keyctl", "personality"]),
        "{inspect}"
    );
    assert_eq!(
        sb.json(&["inspect", "plain"])["seccomp"]["granted"],
        serde_json::json!([])
    );
    let mut table = Vec::new();
    for (name, want) in [("granted", "ok"), ("plain", "EPERM")] {
        start(&sb, name);
        let (got, _) = results(&sb, name);
        for call in ["keyctl", "personality"] {
            let r = got
                .iter()
                .find(|(n, _)| n == call)
                .map(|(_, r)| r.as_str())
                .unwrap_or("(no result)");
            table.push(format!("| {name} | {call} | {want} | {r} |"));
            assert_eq!(r, want, "{name}: {call}");
        }
        // The profile in force is the default one minus exactly the granted lines.
        let prof = std::fs::read_to_string(sb.lxcpath().join(name).join("seccomp")).unwrap();
        for call in ["keyctl", "personality"] {
            let denied = prof
                .lines()
                .any(|l| l.starts_with(&format!("{call} errno")));
            assert_eq!(denied, name == "plain", "{name}: {call} in\n{prof}");
        }
        assert!(
            prof.lines().any(|l| l.starts_with("ptrace errno")),
            "{prof}"
        );
        sb.ok(&["stop", name]);
    }
    println!("| container | syscall | expected | observed |\n|---|---|---|---|");
    println!("{}", table.join("\n"));
}

/// Starts a container; on failure, shows LXC's log (the sandbox is gone afterwards).
fn start(sb: &Sandbox, name: &str) {
    let o = sb.berth(&["start", name]);
    if !o.status.success() {
        let log = std::fs::read_to_string(sb.lxcpath().join(name).join("lxc.log"));
        panic!(
            "start {name}: {}\nlxc.log:\n{}",
            stderr(&o),
            log.unwrap_or_default()
        );
    }
}

fn berth_kept_caps() -> Vec<&'static str> {
    vec![
        "audit_write",
        "chown",
        "dac_override",
        "fowner",
        "fsetid",
        "kill",
        "net_bind_service",
        "setgid",
        "setpcap",
        "setuid",
        "sys_chroot",
    ]
}

/// Whether /proc/irq lists a numbered IRQ (the probe writes the first one's affinity).
fn has_numbered_irq() -> bool {
    std::fs::read_dir("/proc/irq").is_ok_and(|d| {
        d.flatten().any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(|c: char| c.is_ascii_digit()))
        })
    })
}

/// Whether this kernel has Landlock ABI 6 (abstract-socket scoping): asked the way berth does.
fn kernel_scopes_abstract_sockets() -> bool {
    let out = Command::new(BERTH)
        .args(["--json", "check"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["features"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["name"] == "shared network scoping" && f["status"] == "present")
}

/// A trusted package sharing the host's network runs LXC's own `lxc-stop` (the host's binary,
/// its libraries from `base = "host"`) against another container: LXC's command socket is an
/// abstract socket in the host's network namespace, and Landlock's scope keeps the container
/// from it, so the other container keeps running. Then the same package on a kernel without
/// the scope (simulated): refused by the default policy, and with `shared_network =
/// "unscoped"` the risk that policy accepts is real.
#[test]
fn shared_container_cannot_stop_another_through_lxc() {
    let mut sb = Sandbox::new("lxcstop");
    let lxc_stop = which("lxc-stop").expect("lxc-stop (Debian package lxc)");
    sb.trust("stopper");
    sb.pack(&Pkg::script("victim", "1.0", "echo up\nexec sleep 600\n"));
    let script = format!(
        "/bin/lxc-stop -P {} -n victim -k\necho \"lxc-stop rc=$?\"\nexec sleep 600\n",
        sb.lxcpath().display()
    );
    sb.pack(
        &Pkg::script("stopper", "1.0", &script)
            .package_key("base = \"host\"")
            .table("[network]\nmode = \"shared\"")
            .file("bin/lxc-stop", &std::fs::read(&lxc_stop).unwrap()),
    );
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "victim", "stopper"]);
    sb.ok(&["start", "victim"]);
    sb.wait_log("victim", "up");
    let scoped = kernel_scopes_abstract_sockets();
    if scoped {
        sb.ok(&["start", "stopper"]);
        let log = sb.wait_log("stopper", "lxc-stop rc=");
        println!("stopper's log:\n{log}");
        assert!(!log.contains("lxc-stop rc=0"), "lxc-stop succeeded:\n{log}");
        assert!(
            !log.contains("doesn't allow"),
            "lxc-stop's usage, not the socket:\n{log}"
        );
        assert_eq!(sb.status_of("victim")["state"], "running", "{log}");
        sb.ok(&["stop", "stopper"]);
    } else {
        berth_sys::skip::record(
            "kernel",
            "escape: lxc-stop from a shared container needs Landlock abstract-socket scoping (Linux 6.12, ABI 6); only the refusal is tested",
        );
    }

    // As on a kernel without the scope: the default policy refuses to start the package.
    sb.kill_daemon(15);
    sb.start_daemon_env(&[("BERTH_FAULT", "landlock.absent")]);
    let (code, err) = sb.fail(&["start", "stopper"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("network shared") && err.contains("shared_network = \"unscoped\""),
        "{err}"
    );
    // The device maker's opt-out, and what it costs: the other container is stopped.
    sb.kill_daemon(15);
    sb.write_config("[security]\nshared_network = \"unscoped\"");
    sb.start_daemon_env(&[("BERTH_FAULT", "landlock.absent")]);
    sb.ok(&["start", "stopper"]);
    let log = sb.wait_log("stopper", "lxc-stop rc=");
    assert!(
        log.contains("lxc-stop rc=0"),
        "unscoped, lxc-stop should reach the victim:\n{log}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while sb.status_of("victim")["state"] == "running" {
        assert!(Instant::now() < deadline, "the victim kept running");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A trusted (privileged) package plants a setuid-root copy of a program in its /data and
/// opens /data to everyone. No unprivileged host user may run it as root: the state directory
/// is root's alone (0700), and the run directory's bind of /data is nosuid.
#[test]
fn a_setuid_file_planted_in_data_gives_host_users_nothing() {
    let tmp = TempDir::new("plant");
    let Some(probe) = build_probe(&tmp) else {
        return;
    };
    let mut sb = Sandbox::new("plant");
    sb.trust("planter");
    sb.add(
        &Pkg::script(
            "planter",
            "1.0",
            "cp /bin/escape /data/escape && chmod 4755 /data/escape && chmod 755 /data && echo planted\nexec sleep 600\n",
        )
        .file("bin/escape", &std::fs::read(&probe).unwrap()),
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "planter"]);
    start(&sb, "planter");
    sb.wait_log("planter", "planted");
    let state_copy = sb.state_dir().join("data/planter/escape");
    let md = std::fs::metadata(&state_copy).unwrap();
    assert_eq!(
        md.permissions().mode() & 0o4000,
        0o4000,
        "the package did plant a setuid file"
    );
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&md), 0, "owned by root");
    let state_mode = std::fs::metadata(sb.state_dir())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(state_mode, 0o700, "state directory mode");
    for path in [state_copy, sb.run_dir().join("data/planter/escape")] {
        // Through a shell: setpriv's own exec of a path is not a fair test of the path.
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .args(["sh", "-c", "exec \"$0\" --euid"])
            .arg(&path)
            .output()
            .expect("setpriv (util-linux)");
        let said = format!("{}{}", stdout(&out), stderr(&out));
        println!("{}: {said}", path.display());
        assert!(
            !said.contains("euid 0"),
            "{}: a host user ran the planted file as root: {said}",
            path.display()
        );
        assert!(
            said.contains("Permission denied") || said.contains("euid 65534"),
            "{}: {said}",
            path.display()
        );
    }
}
