//! Security policy end to end, as root with real LXC: what a package asks for in
//! `[permissions]` against the allowlists and the device policy (`[security]`), refused at
//! install with the reason and the previous state intact; granted capabilities and devices
//! in force inside the container; trust only through the signed index.

mod common;

use common::*;

fn asking(name: &str, permissions: &str) -> Pkg {
    Pkg::script(name, "1.0", "echo up\nexec sleep 600\n")
        .table(&format!("[permissions]\n{permissions}"))
}

#[test]
fn permissions_outside_the_allowlist_or_the_policy_are_refused_at_install() {
    let mut sb = Sandbox::new("sec-refuse");
    sb.trust("tadmin");
    sb.trust("tmount");
    for p in [
        asking("plain", ""),
        asking("admin", "capabilities = [\"sys_admin\"]"),
        asking("tadmin", "capabilities = [\"sys_admin\"]"),
        asking("tmount", "syscalls = [\"mount\"]"),
        asking("netcaps", "capabilities = [\"net_admin\", \"net_raw\"]"),
        asking("tracer", "syscalls = [\"ptrace\"]"),
        asking("disk", "devices = [\"/dev/sda\"]"),
    ] {
        sb.pack(&p);
    }
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "plain"]);
    let cases: &[(&str, &[&str])] = &[
        // outside the allowlist: refused even for a trusted package
        ("admin", &["capability sys_admin is never granted"]),
        ("tadmin", &["capability sys_admin is never granted"]),
        ("tmount", &["syscall mount is never granted"]),
        // on the allowlist, but the default policy grants it to trusted packages only
        (
            "netcaps",
            &[
                "capability net_admin is not granted by the device policy",
                "not marked trusted",
            ],
        ),
        (
            "tracer",
            &["syscall ptrace is not granted", "not marked trusted"],
        ),
        // devices are the host's: none is granted by default
        (
            "disk",
            &["device /dev/sda is not granted", "[security] grant"],
        ),
    ];
    for (name, needles) in cases {
        let (code, err) = sb.fail(&["install", name]);
        assert_eq!(code, 1, "{name}: {err}");
        for n in *needles {
            assert!(err.contains(n), "install {name}: {err:?} lacks {n:?}");
        }
        assert!(err.contains(name), "the error names the package: {err}");
        assert_eq!(
            sb.listed("installed"),
            ["plain"],
            "state intact after refusing {name}"
        );
    }
    // Nothing was downloaded for a refused package.
    let store: Vec<_> = std::fs::read_dir(sb.state_dir().join("store"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "sqfs"))
        .collect();
    assert_eq!(store.len(), 1);
}

#[test]
fn trusted_packages_get_what_they_ask_and_the_policy_can_grant_devices() {
    let mut sb = Sandbox::new("sec-grant");
    sb.trust("fw");
    sb.trust("tun");
    sb.pack(&asking("fw", "capabilities = [\"net_admin\", \"net_raw\"]"));
    sb.pack(
        &Pkg::script(
            "tun",
            "1.0",
            "if busybox cat /dev/net/tun 2>/tmp/e; then echo tun=ok; else echo \"tun=$(busybox cat /tmp/e)\"; fi\nbusybox ls -l /dev/net/tun\necho done\nexec sleep 600\n",
        )
        .table("[permissions]\ndevices = [\"/dev/net/tun\"]"),
    );
    sb.pack(&Pkg::script(
        "notun",
        "1.0",
        "busybox ls /dev/net/tun 2>&1; echo done\nexec sleep 600\n",
    ));
    sb.build_repo();
    // The default policy grants a trusted package nothing it asks for by name.
    sb.start_daemon();
    sb.ok(&["update"]);
    let (_, err) = sb.fail(&["install", "fw"]);
    assert!(
        err.contains("fw: capability net_admin is not granted by the device policy ([security] grant_trusted"),
        "{err}"
    );
    assert!(sb.listed("installed").is_empty(), "nothing installed");
    sb.kill_daemon(15);
    // Granted by name: exactly what the device maker lists.
    sb.write_config("[security]\ngrant_trusted = \"/dev/net/tun net_admin net_raw\"\n");
    sb.start_daemon();
    sb.ok(&["install", "fw", "tun", "notun"]);

    // A trusted package asking net_admin and net_raw gets them once the policy grants them
    // (in the bounding set, and effective for its root).
    let v = sb.json(&["inspect", "fw"]);
    let caps = v["capabilities"].to_string();
    assert!(
        caps.contains("\"net_admin\"") && caps.contains("\"net_raw\""),
        "{v}"
    );
    assert_eq!(v["privileged"], true);
    sb.ok(&["start", "fw"]);
    let pid = sb.status_of("fw")["init_pid"].as_i64().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let bnd = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:\t"))
        .unwrap();
    let bnd = u64::from_str_radix(bnd, 16).unwrap();
    const NET_ADMIN: u32 = 12;
    const NET_RAW: u32 = 13;
    const SYS_ADMIN: u32 = 21;
    const MKNOD: u32 = 27;
    assert_ne!(bnd & (1 << NET_ADMIN), 0, "CapBnd {bnd:x}");
    assert_ne!(bnd & (1 << NET_RAW), 0, "CapBnd {bnd:x}");
    assert_eq!(bnd & (1 << SYS_ADMIN), 0, "CapBnd {bnd:x}");
    assert_eq!(bnd & (1 << MKNOD), 0, "CapBnd {bnd:x}");
    sb.ok(&["stop", "fw"]);

    // A granted device: bound into the container and allowed by the device cgroup (tun
    // answers EBADFD to a read before TUNSETIFF: the open went through).
    sb.ok(&["start", "tun"]);
    let log = sb.wait_log("tun", "done");
    assert!(
        log.contains("tun=cat: read error: File descriptor in bad state"),
        "{log}"
    );
    let v = sb.json(&["inspect", "tun"]);
    assert!(v["devices"].to_string().contains("/dev/net/tun"), "{v}");
    // Not granted: not there.
    sb.ok(&["start", "notun"]);
    let log = sb.wait_log("notun", "done");
    assert!(log.contains("No such file or directory"), "{log}");
    sb.ok(&["stop", "tun"]);
    sb.ok(&["stop", "notun"]);
}

#[test]
fn privileged_never_runs_trusted_packages_in_a_user_namespace() {
    let mut sb = Sandbox::new("sec-unpriv");
    sb.trust("svc");
    sb.add(&Pkg::script("svc", "1.0", "echo up\nexec sleep 600\n"));
    sb.write_config("[security]\nprivileged = \"never\"\n");
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "svc"]);
    let v = sb.json(&["inspect", "svc"]);
    assert_eq!(v["trusted"], true);
    assert_eq!(v["privileged"], false, "{v}");
    sb.ok(&["start", "svc"]);
    sb.wait_log("svc", "up");
    let pid = sb.status_of("svc")["init_pid"].as_i64().unwrap();
    let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
    let host = v["idmap"]["host"].as_u64().unwrap().to_string();
    assert_eq!(
        map.split_whitespace().collect::<Vec<_>>(),
        ["0", host.as_str(), "65536"]
    );
    sb.ok(&["stop", "svc"]);
}

#[test]
fn trust_comes_only_from_an_index_signed_by_a_trusted_key() {
    let mut sb = Sandbox::new("sec-trust");
    sb.trust("app");
    sb.add(&Pkg::script("app", "1.0", "sleep 600\n"));
    sb.pack(&Pkg::script("other", "1.0", "sleep 600\n"));
    sb.build_repo();
    sb.start_daemon();
    let index = sb.repo.join("index.json");
    let text = std::fs::read_to_string(&index).unwrap();
    assert!(text.contains("\"trusted\": true") || text.contains("\"trusted\":true"));

    // 1. The index, with a package flipped to trusted after signing: rejected.
    let flipped = text.replacen("\"trusted\": false", "\"trusted\": true", 1);
    let flipped = if flipped == text {
        text.replacen("\"trusted\":false", "\"trusted\":true", 1)
    } else {
        flipped
    };
    assert_ne!(
        flipped, text,
        "the index lists an untrusted package: {text}"
    );
    std::fs::write(&index, &flipped).unwrap();
    let (_, err) = sb.fail(&["update"]);
    assert!(err.contains("repository index rejected"), "{err}");
    let (_, err) = sb.fail(&["install", "other"]);
    assert!(err.contains("berth update"), "no index was accepted: {err}");

    // 2. A whole index marking packages trusted, signed by a key the device does not trust.
    let rogue = sb.dir.join("rogue");
    sb.ok(&["key", "generate", "-o", rogue.to_str().unwrap()]);
    sb.ok(&[
        "repo",
        "build",
        sb.repo.to_str().unwrap(),
        "--key",
        sb.dir.join("rogue.sec").to_str().unwrap(),
    ]);
    let (_, err) = sb.fail(&["update"]);
    assert!(
        err.contains("repository index rejected") && err.contains("unknown key"),
        "{err}"
    );

    // 3. Signed by the trusted key: accepted, and trust is what the owner listed.
    sb.build_repo();
    sb.ok(&["update"]);
    sb.ok(&["install", "app", "other"]);
    assert_eq!(sb.json(&["inspect", "app"])["trusted"], true);
    assert_eq!(sb.json(&["inspect", "other"])["trusted"], false);
    assert_eq!(sb.json(&["inspect", "other"])["privileged"], false);
}

/// The demo's services keep working in the default (unprivileged) container: busybox httpd
/// as root binding port 80 (`net_bind_service`), Debian's mosquitto with the host's libraries
/// running as its own user and writing its persistence file to /data.
#[test]
fn demo_services_work_unprivileged() {
    let mut sb = Sandbox::new("sec-demo");
    sb.pack(
        &Pkg::script(
            "web",
            "1.0",
            "busybox httpd -p 80 -h /www\nbusybox sleep 0.5\nbusybox wget -q -O - http://127.0.0.1:80/ && echo served\nexec sleep 600\n",
        )
        .file("www/index.html", b"hello from port 80\n"),
    );
    let mosquitto = which("mosquitto").or_else(|| {
        let p = std::path::PathBuf::from("/usr/sbin/mosquitto");
        p.exists().then_some(p)
    });
    if let Some(m) = &mosquitto {
        sb.pack(
            &Pkg::new(
                "mqtt",
                "1.0",
                &["/bin/mosquitto", "-c", "/etc/mosquitto/mosquitto.conf"],
            )
            .package_key("base = \"host\"")
            .entrypoint_key("user = 1883")
            .entrypoint_key("group = 1883")
            .file("bin/mosquitto", &std::fs::read(m).unwrap())
            .file(
                "etc/mosquitto/mosquitto.conf",
                b"listener 1883 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location /data/\nautosave_interval 1\nlog_dest stderr\nlog_type all\n",
            )
            .file(
                "etc/passwd",
                b"root:x:0:0:root:/root:/bin/false\nmqtt:x:1883:1883:mqtt:/data:/bin/false\n",
            )
            .file("etc/group", b"root:x:0:\nmqtt:x:1883:\n"),
        );
    } else {
        berth_sys::skip::record(
            "package mosquitto",
            "demo_services_work_unprivileged: the mosquitto part: /usr/sbin/mosquitto is missing",
        );
    }
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "web"]);
    assert_eq!(sb.json(&["inspect", "web"])["privileged"], false);
    sb.ok(&["start", "web"]);
    let log = sb.wait_log("web", "served");
    assert!(log.contains("hello from port 80"), "{log}");
    sb.ok(&["stop", "web"]);
    if mosquitto.is_some() {
        sb.ok(&["install", "mqtt"]);
        assert_eq!(sb.json(&["inspect", "mqtt"])["privileged"], false);
        sb.ok(&["start", "mqtt"]);
        let log = sb.wait_log("mqtt", "Opening ipv4 listen socket on port 1883");
        assert!(!log.contains("Error"), "{log}");
        // Its graceful stop saves the database into /data, as the mapped mqtt user.
        sb.ok(&["stop", "mqtt"]);
        let db = sb.state_dir().join("data/mqtt/mosquitto.db");
        assert!(db.exists(), "no {}: {log}", db.display());
    }
}

/// A kernel without usable user namespaces, simulated without touching the host: the daemon
/// runs in a private mount namespace where /proc/sys/user/max_user_namespaces reads 0.
/// Untrusted packages refuse to start and say why; trusted ones start, privileged.
#[test]
fn without_user_namespaces_only_trusted_packages_start() {
    let mut sb = Sandbox::new("sec-nouserns");
    sb.trust("good");
    sb.pack(&Pkg::script("good", "1.0", "echo up\nexec sleep 600\n"));
    sb.pack(&Pkg::script("plain", "1.0", "echo up\nexec sleep 600\n"));
    sb.build_repo();
    let zero = sb.dir.join("zero");
    std::fs::write(&zero, "0\n").unwrap();
    let knob = "/proc/sys/user/max_user_namespaces";
    let script = format!(
        "mount --make-rprivate / && mount --bind {} {knob} && exec \"$0\" daemon",
        zero.display()
    );
    let log = std::fs::File::create(&sb.daemon_log).unwrap();
    let child = std::process::Command::new("unshare")
        .args(["-m", "sh", "-c", &script, BERTH])
        .env("BERTH_CONFIG", &sb.config)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    sb.daemon = Some(child);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !sb.berth(&["status"]).status.success() {
        assert!(
            std::time::Instant::now() < deadline,
            "daemon did not come up: {}",
            sb.daemon_log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // `berth check` in such a namespace says so.
    let out = std::process::Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            &format!(
                "mount --make-rprivate / && mount --bind {} {knob} && exec \"$0\" check",
                zero.display()
            ),
            BERTH,
        ])
        .output()
        .unwrap();
    let check = stdout(&out);
    assert!(
        check
            .lines()
            .any(|l| l.starts_with("unprivileged containers") && l.contains("missing")),
        "{check}"
    );
    sb.ok(&["update"]);
    sb.ok(&["install", "good", "plain"]);
    let (_, err) = sb.fail(&["start", "plain"]);
    assert!(
        err.contains("plain: this kernel has no usable user namespaces")
            && err.contains("only packages the repository marks trusted may run"),
        "{err}"
    );
    assert_eq!(
        sb.status_of("plain")["state"],
        "stopped",
        "nothing half-started"
    );
    sb.ok(&["start", "good"]);
    sb.wait_log("good", "up");
    assert_eq!(sb.json(&["inspect", "good"])["privileged"], true);
    sb.ok(&["stop", "good"]);
}

/// Id ranges: a container's range stays reserved while its /data (owned by those ids) exists —
/// `berth remove` without `--purge` keeps both, and a reinstall gets its data back — and
/// `berth remove --purge` deletes /data and frees the range for the next container.
#[test]
fn purge_frees_the_id_range_and_plain_remove_keeps_it() {
    let mut sb = Sandbox::new("sec-idfree");
    let script = "cat /data/f 2>/dev/null\necho up\necho kept > /data/f\nexec sleep 600\n";
    for n in ["a", "b", "c", "d"] {
        sb.pack(&Pkg::script(n, "1.0", script));
    }
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    let slots = || std::fs::read_to_string(sb.state_dir().join("idmap")).unwrap_or_default();
    let host = |n: &str| sb.json(&["inspect", n])["idmap"]["host"].as_u64().unwrap();
    let run = |n: &str| {
        sb.ok(&["install", n]);
        sb.ok(&["start", n]);
        let log = sb.wait_log(n, "up");
        sb.ok(&["stop", n]);
        (host(n), log)
    };
    let (base_a, _) = run("a");
    let (base_b, _) = run("b");
    assert_eq!(base_b, base_a + 65536);
    let data_a = sb.state_dir().join("data/a");
    let owner = |p: &std::path::Path| {
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(p).unwrap()) as u64
    };
    assert_eq!(owner(&data_a.join("f")), base_a);
    assert_eq!(slots(), "a 0\nb 1\n");

    // Plain remove: /data stays, owned by a's ids, so the range stays reserved.
    sb.ok(&["remove", "a"]);
    assert!(data_a.join("f").exists());
    assert_eq!(slots(), "a 0\nb 1\n");
    let (base_c, _) = run("c");
    assert_eq!(
        base_c,
        base_a + 2 * 65536,
        "c must not get a's ids: {}",
        slots()
    );
    // A reinstall gets the same ids, and so its data.
    let (again, log) = run("a");
    assert_eq!(again, base_a);
    assert!(log.contains("kept"), "a lost its /data: {log}");

    // remove --purge: /data gone, the range freed and reused by the next container.
    sb.ok(&["remove", "--purge", "a"]);
    assert!(!data_a.exists());
    assert_eq!(slots(), "b 1\nc 2\n");
    let (base_d, log) = run("d");
    assert_eq!(
        base_d,
        base_a,
        "d should reuse the freed range: {}",
        slots()
    );
    assert!(!log.contains("kept"), "d sees a's data: {log}");
    assert_eq!(owner(&sb.state_dir().join("data/d/f")), base_a);
    assert_eq!(slots(), "b 1\nc 2\nd 0\n");
    sb.ok(&["remove", "--purge", "b", "c", "d"]);
    assert_eq!(slots(), "");
}

/// A run directory below a directory that other users cannot search: a user namespace's
/// root (one of those others on the host) cannot reach the container's root, so `berth start`
/// refuses with the directory and the fix instead of LXC's "Failed to receive file
/// descriptors", and `berth check` names it too.
#[test]
fn a_run_directory_unreachable_for_the_containers_ids_is_named() {
    use std::os::unix::fs::PermissionsExt;
    let mut sb = Sandbox::new("sec-trav");
    sb.add(&asking("plain", ""));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "plain"]);
    let check = |sb: &Sandbox| -> serde_json::Value {
        let out = sb.berth(&["--json", "check"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["features"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "run directory traversable")
            .cloned()
            .expect("berth check reports the run directory")
    };
    assert_eq!(check(&sb)["status"], "present", "{}", check(&sb));
    std::fs::set_permissions(&sb.dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (code, err) = sb.fail(&["start", "plain"]);
    let shown = sb.dir.display().to_string();
    std::fs::set_permissions(&sb.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("{shown} (mode 0700) is not searchable"))
            && err.contains(&format!("chmod o+x {shown}")),
        "{err}"
    );
    std::fs::set_permissions(&sb.dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let f = check(&sb);
    std::fs::set_permissions(&sb.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(f["status"], "missing", "{f}");
    let detail = f["detail"].as_str().unwrap();
    assert!(
        detail.contains(&shown) && detail.contains(&format!("chmod o+x {shown}")),
        "berth check names the directory and the fix: {f}"
    );
    // Searchable again: it starts.
    sb.ok(&["start", "plain"]);
    sb.wait_log("plain", "up");
    sb.ok(&["stop", "plain"]);
}
