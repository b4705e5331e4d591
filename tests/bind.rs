//! End to end, as root, with real LXC: hot-binding (docs/hot-binding.md). An installed
//! package appears read-only, nosuid, nodev inside a running container and goes again,
//! the payload untouched; by the mount API and by mount propagation (forced, as on a kernel
//! without the mount API); persistent bindings across a restart; a manifest's `[[bind]]`;
//! the refusals.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// errno of a write to a read-only file system.
const EROFS: i32 = 30;

/// A payload that only waits (its init must outlive every bind and unbind).
fn app() -> Pkg {
    Pkg::script("app", "1", "echo up\nexec sleep 100000\n")
}

/// The package to bind: a data file, a script and a setuid-root program printing its uids.
fn tools(sb: &Sandbox, version: &str) -> Pkg {
    Pkg::new("tools", version, &["/bin/busybox", "true"])
        .file("share/data.txt", format!("tools {version}\n").as_bytes())
        .file("bin/euid", &euid_probe(&sb.dir))
        .file("bin/hello.sh", b"#!/bin/sh\necho hello\n")
}

/// A static program that prints its real and effective uid.
fn euid_probe(dir: &Path) -> Vec<u8> {
    let bin = dir.join("euid");
    if !bin.exists() {
        let src = dir.join("euid.c");
        std::fs::write(
            &src,
            "#include <stdio.h>\n#include <unistd.h>\nint main(void) {\n\
             printf(\"uid=%d euid=%d\\n\", (int)getuid(), (int)geteuid());\nreturn 0;\n}\n",
        )
        .unwrap();
        let o = Command::new("cc")
            .args(["-static", "-Os", "-o"])
            .arg(&bin)
            .arg(&src)
            .output()
            .expect("cc");
        assert!(o.status.success(), "cc: {}", stderr(&o));
    }
    std::fs::read(&bin).unwrap()
}

/// Packs `p` with `tweak` applied to its tree (modes, empty directories), as a vendor would.
fn pack_tweaked(sb: &Sandbox, p: &Pkg, tweak: impl FnOnce(&Path)) {
    let out = sb.pack(p);
    let dir = sb.dir.join("src").join(format!("{}-{}", p.name, p.version));
    tweak(&dir);
    let o = sb.berth(&["pack", dir.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "pack {}: {}", p.name, stderr(&o));
}

/// tools with its euid program setuid root.
fn add_tools(sb: &Sandbox, version: &str) {
    pack_tweaked(sb, &tools(sb, version), |d| {
        use std::os::unix::fs::PermissionsExt;
        let euid = d.join("bin/euid");
        std::os::unix::fs::chown(&euid, Some(0), Some(0)).unwrap();
        std::fs::set_permissions(&euid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    });
}

fn init_of(sb: &Sandbox, name: &str) -> i64 {
    sb.status_of(name)["init_pid"]
        .as_i64()
        .unwrap_or_else(|| panic!("{name} is not running: {}", sb.status_of(name)))
}

/// A path inside the container of `init`, seen from the host.
fn inside(init: i64, path: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{init}/root{path}"))
}

/// The container's mountinfo line of the mount on `path`.
fn mount_line(init: i64, path: &str) -> Option<String> {
    let info = std::fs::read_to_string(format!("/proc/{init}/mountinfo")).unwrap();
    info.lines()
        .find(|l| l.split(' ').nth(4) == Some(path))
        .map(str::to_string)
}

/// The binding's files are there, read-only, nosuid, nodev, private, and its setuid program
/// gains nothing.
fn assert_bound(sb: &Sandbox, init: i64, at: &str, version: &str) {
    let data = std::fs::read_to_string(inside(init, &format!("{at}/share/data.txt")))
        .unwrap_or_else(|e| panic!("{at}/share/data.txt in the container: {e}"));
    assert_eq!(data, format!("tools {version}\n"));
    let e = std::fs::write(inside(init, &format!("{at}/new")), "x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(EROFS), "{e}");
    let e = std::fs::write(inside(init, &format!("{at}/share/data.txt")), "x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(EROFS), "{e}");
    let line = mount_line(init, at).unwrap_or_else(|| panic!("no mount on {at}"));
    let opts: Vec<&str> = line.split(' ').nth(5).unwrap().split(',').collect();
    for o in ["ro", "nosuid", "nodev"] {
        assert!(opts.contains(&o), "{at}: {line}");
    }
    // No tie to a host mount: not a slave, and no peer of one (LXC makes the container's
    // mounts shared among themselves).
    assert!(
        !line.contains("master:"),
        "{at} receives from the host: {line}"
    );
    assert_no_host_peer(&line);
    // The setuid-root program, run by uid 1000 from that very mount (through an fd opened
    // there: no container policy, only the mount's nosuid, stands between it and root).
    let euid = inside(init, &format!("{at}/bin/euid"));
    let out = Command::new("sh")
        .arg("-c")
        .arg("exec 3<\"$1\"; exec setpriv --reuid 1000 --regid 1000 --clear-groups /proc/self/fd/3")
        .arg("sh")
        .arg(&euid)
        .output()
        .unwrap();
    assert_eq!(
        stdout(&out).trim(),
        "uid=1000 euid=1000",
        "{}",
        stderr(&out)
    );
    // The same program outside a nosuid mount does become root: the probe works.
    let copy = sb.dir.join("euid-suid");
    if !copy.exists() {
        // Copied by another process: a write descriptor of this one could be inherited by a
        // child another test forks meanwhile, and the exec would fail (ETXTBSY).
        let o = Command::new("install")
            .args(["-m", "4755"])
            .arg(&euid)
            .arg(&copy)
            .output()
            .unwrap();
        assert!(o.status.success(), "install: {}", stderr(&o));
    }
    let out = Command::new("setpriv")
        .args(["--reuid", "1000", "--regid", "1000", "--clear-groups"])
        .arg(&copy)
        .output()
        .unwrap();
    assert_eq!(stdout(&out).trim(), "uid=1000 euid=0", "{}", stderr(&out));
}

/// The peer group of a container's mount (if shared) is none of the host's.
fn assert_no_host_peer(line: &str) {
    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for tag in line.split(' ').filter(|f| f.starts_with("shared:")) {
        assert!(
            !host.lines().any(|l| l.split(' ').any(|f| f == tag)),
            "a peer of a host mount: {line}"
        );
    }
}

fn assert_unbound(init: i64, at: &str) {
    assert!(mount_line(init, at).is_none(), "{at} still mounted");
    assert!(
        !inside(init, &format!("{at}/share/data.txt")).exists(),
        "{at} still shows the package"
    );
}

/// bind, check, unbind, check: by `method`, into a running container whose init never
/// changes.
fn bind_unbind(sb: &Sandbox, method: &str) {
    let init = init_of(sb, "app");
    let v = sb.json(&["bind", "tools", "--into", "app"]);
    assert_eq!(v["method"], method, "{v}");
    assert_eq!(v["at"], "/opt/tools");
    assert_eq!(v["version"], "1.0");
    assert!(v["bind_ms"].as_f64().unwrap() > 0.0, "{v}");
    assert_bound(sb, init, "/opt/tools", "1.0");
    let st = sb.status_of("app");
    assert_eq!(st["init_pid"], init, "the payload was restarted");
    let b = &st["bindings"][0];
    assert_eq!(
        (&b["package"], &b["at"], &b["method"], &b["persist"]),
        (
            &"tools".into(),
            &"/opt/tools".into(),
            &method.into(),
            &false.into()
        ),
        "{st}"
    );
    let text = sb.ok(&["status"]);
    assert!(
        text.contains(&format!("app: bound tools@1.0 at /opt/tools ({method})")),
        "{text}"
    );
    // The propagation method's way in is empty again.
    assert_eq!(
        std::fs::read_dir(inside(init, "/run/berth/binds"))
            .map(|d| d.count())
            .unwrap_or(0),
        0
    );

    // An image directory elsewhere: it must exist, empty, in the image.
    let v = sb.json(&["bind", "lib", "--into", "app", "--at", "/srv/lib"]);
    assert_eq!(v["method"], method, "{v}");
    let lib = std::fs::read_to_string(inside(init, "/srv/lib/share/data.txt")).unwrap();
    assert_eq!(lib, "lib\n");
    assert!(mount_line(init, "/srv/lib")
        .unwrap()
        .contains(" ro,nosuid,nodev"));

    // Refusals, each with its reason and exit status 1 (2 for the command line).
    for (args, code, needle) in [
        (
            &["bind", "tools", "--into", "app"][..],
            1,
            "tools is already bound into app at /opt/tools",
        ),
        (
            &["bind", "other", "--into", "app", "--at", "/opt/tools/x"],
            1,
            "/opt/tools/x in app: tools is bound at /opt/tools",
        ),
        (
            &["bind", "other", "--into", "app", "--at", "/srv/none"],
            1,
            "/srv/none in app: no such directory",
        ),
        (
            &["bind", "other", "--into", "app", "--at", "/srv/full"],
            1,
            "/srv/full in app: not empty",
        ),
        (
            &["bind", "other", "--into", "app", "--at", "/srv/link/x"],
            1,
            "a symlink on the way",
        ),
        (
            &["bind", "nothere", "--into", "app"],
            1,
            "nothere is not installed",
        ),
        (
            &["bind", "tools", "--into", "other"],
            1,
            "other is not running",
        ),
        (
            &["bind", "tools", "--into", "app", "--at", "/proc/x"],
            2,
            "--at /proc/x: is below /proc",
        ),
        (
            &["unbind", "other", "--from", "app"],
            1,
            "other is not bound into app",
        ),
        (&["remove", "tools"], 1, "tools is bound into app"),
    ] {
        let (c, err) = sb.fail(args);
        assert_eq!(c, code, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let (_, err) = sb.fail(&["--json", "bind", "tools", "--into", "app"]);
    assert!(err.contains("already bound"), "{err}");

    let v = sb.json(&["unbind", "tools", "--from", "app"]);
    assert_eq!(v["unmounted"], true, "{v}");
    assert_unbound(init, "/opt/tools");
    assert!(
        !inside(init, "/opt/tools").exists(),
        "mount point left behind"
    );
    sb.ok(&["unbind", "lib", "--from", "app"]);
    assert_unbound(init, "/srv/lib");
    assert!(
        inside(init, "/srv/lib").is_dir(),
        "the image's directory is the image's"
    );
    assert_eq!(init_of(sb, "app"), init, "the payload was restarted");
    assert_eq!(sb.status_of("app")["bindings"], serde_json::json!([]));
    // Bound again after an unbind: nothing was left over.
    sb.ok(&["bind", "tools", "--into", "app"]);
    assert_bound(sb, init, "/opt/tools", "1.0");
    sb.ok(&["unbind", "tools", "--from", "app"]);
}

/// app with image directories to bind at (empty, full, behind a symlink), tools, lib and
/// other; all installed, app running.
fn sandbox(tag: &str, env: &[(&str, &str)]) -> Sandbox {
    let mut sb = Sandbox::new(tag);
    pack_tweaked(&sb, &app().file("srv/full/f", b"x"), |d| {
        std::fs::create_dir_all(d.join("srv/lib")).unwrap();
        std::os::unix::fs::symlink("/srv", d.join("srv/link")).unwrap();
    });
    add_tools(&sb, "1.0");
    sb.add(&Pkg::new("lib", "1", &["/bin/busybox", "true"]).file("share/data.txt", b"lib\n"));
    sb.add(&Pkg::new("other", "1", &["/bin/busybox", "true"]));
    sb.build_repo();
    sb.start_daemon_env(env);
    sb.ok(&["update"]);
    sb.ok(&["install", "app", "tools", "lib", "other"]);
    sb.ok(&["start", "app"]);
    sb
}

#[test]
fn hot_bind_by_the_mount_api() {
    let sb = sandbox("bind-api", &[]);
    if sb.old_kernel() || berth_sys::check::probe_open_tree().0 != berth_sys::check::Status::Present
    {
        // Linux < 5.2, or the old-kernel filter (docs/kernels.md): the daemon falls back.
        berth_sys::skip::record(
            "kernel open_tree",
            "bind: hot_bind_by_the_mount_api: no mount API (Linux 5.2); checked the fallback instead",
        );
        bind_unbind(&sb, "propagation");
        return;
    }
    bind_unbind(&sb, "mount-api");
    sb.ok(&["stop", "app"]);
    assert!(sb.stray_mounts().is_empty(), "{:?}", sb.stray_mounts());
}

#[test]
fn hot_bind_by_propagation_forced() {
    let sb = sandbox("bind-prop", &[("BERTH_FORCE_MOUNT_FALLBACK", "1")]);
    // The anchor reaches the container as a slave of the host's shared anchor: what the
    // host mounts below it goes in, nothing mounted inside goes back.
    let init = init_of(&sb, "app");
    let anchor = sb.run_dir().join("binds/app");
    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let group = host
        .lines()
        .find(|l| l.split(' ').nth(4) == anchor.to_str())
        .and_then(|l| l.split(' ').find(|f| f.starts_with("shared:")))
        .unwrap_or_else(|| panic!("{} is no shared mount", anchor.display()))
        .replace("shared:", "master:");
    for at in ["/opt", "/run/berth/binds"] {
        let l = mount_line(init, at).unwrap_or_else(|| panic!("no anchor at {at}"));
        assert!(
            l.split(' ').any(|f| f == group),
            "{at} not a slave of {group}: {l}"
        );
        assert_no_host_peer(&l);
    }
    bind_unbind(&sb, "propagation");
    sb.ok(&["stop", "app"]);
    assert!(sb.stray_mounts().is_empty(), "{:?}", sb.stray_mounts());
}

#[test]
fn persistent_bindings_survive_a_restart() {
    let mut sb = sandbox("bind-persist", &[]);
    let v = sb.json(&["bind", "tools", "--into", "app", "--persist"]);
    assert_eq!(v["persist"], true);
    sb.ok(&["bind", "lib", "--into", "app"]);
    // A new daemon finds the bindings of the container it takes over.
    sb.stop_daemon();
    sb.start_daemon();
    assert_eq!(sb.status_of("app")["bindings"][1]["package"], "lib");
    let st = sb.status_of("app");
    assert_eq!(st["bindings"][0]["persist"], true, "{st}");
    assert_eq!(st["bindings"][1]["persist"], false, "{st}");
    sb.ok(&["restart", "app"]);
    let init = init_of(&sb, "app");
    assert_bound(&sb, init, "/opt/tools", "1.0");
    assert_unbound(init, "/opt/lib");
    let st = sb.status_of("app");
    let b = st["bindings"].as_array().unwrap();
    assert_eq!(b.len(), 1, "{st}");
    assert_eq!(
        (&b[0]["method"], &b[0]["persist"]),
        (&"start".into(), &true.into())
    );
    // Stopped: what the next start binds.
    sb.ok(&["stop", "app"]);
    let st = sb.status_of("app");
    assert_eq!(st["bindings"][0]["method"], serde_json::Value::Null, "{st}");
    assert!(sb
        .ok(&["status"])
        .contains("tools@1.0 at /opt/tools (at the next start, persistent)"));
    let (_, err) = sb.fail(&["remove", "tools"]);
    assert!(err.contains("tools is bound into app"), "{err}");
    // An unbind of a stopped container's persistent binding forgets it.
    let v = sb.json(&["unbind", "tools", "--from", "app"]);
    assert_eq!(
        (&v["unmounted"], &v["persist"]),
        (&false.into(), &true.into())
    );
    sb.ok(&["start", "app"]);
    assert_unbound(init_of(&sb, "app"), "/opt/tools");
    sb.ok(&["stop", "app"]);
    sb.ok(&["remove", "tools"]);
    assert!(sb.stray_mounts().is_empty(), "{:?}", sb.stray_mounts());
}

#[test]
fn manifest_bindings_are_made_at_start() {
    let mut sb = Sandbox::new("bind-manifest");
    let svc = Pkg::script(
        "svc",
        "1",
        "cat /opt/tools/share/data.txt /srv/lib/share/data.txt\necho up\nexec sleep 100000\n",
    )
    .table("[[bind]]\npackage = \"tools\"\n\n[[bind]]\npackage = \"lib\"\nat = \"/srv/lib\"");
    pack_tweaked(&sb, &svc, |d| {
        std::fs::create_dir_all(d.join("srv/lib")).unwrap()
    });
    add_tools(&sb, "1.0");
    sb.add(&Pkg::new("lib", "1", &["/bin/busybox", "true"]).file("share/data.txt", b"lib\n"));
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "svc", "lib"]);
    let (_, err) = sb.fail(&["start", "svc"]);
    assert!(
        err.contains("tools is to be bound at /opt/tools (its manifest's [[bind]]) but is not installed: berth install tools"),
        "{err}"
    );
    sb.ok(&["install", "tools"]);
    sb.ok(&["start", "svc"]);
    // The payload saw both from its first instruction.
    let log = sb.wait_log("svc", "up");
    assert!(log.starts_with("tools 1.0\nlib\n"), "{log}");
    let init = init_of(&sb, "svc");
    assert_bound(&sb, init, "/opt/tools", "1.0");
    let st = sb.status_of("svc");
    assert_eq!(st["bindings"][0]["origin"], "manifest", "{st}");
    assert_eq!(st["bindings"][1]["at"], "/srv/lib", "{st}");
    let (_, err) = sb.fail(&["remove", "lib"]);
    assert!(err.contains("lib is bound into svc"), "{err}");
    sb.ok(&["stop", "svc"]);
    let (_, err) = sb.fail(&["remove", "tools"]);
    assert!(err.contains("tools is bound into svc"), "{err}");
    sb.ok(&["remove", "svc", "tools", "lib"]);
    assert!(sb.stray_mounts().is_empty(), "{:?}", sb.stray_mounts());
}

#[test]
fn an_upgrade_leaves_a_running_binding_on_its_image() {
    let sb = sandbox("bind-upgrade", &[]);
    let init = init_of(&sb, "app");
    sb.ok(&["bind", "tools", "--into", "app", "--persist"]);
    let old = sb.status_of("tools")["image"].as_str().unwrap().to_string();
    std::fs::remove_file(sb.package_file("tools", "1.0")).unwrap();
    add_tools(&sb, "2.0");
    sb.build_repo();
    sb.ok(&["update"]);
    sb.ok(&["upgrade", "tools"]);
    // The container keeps the version it was given, whose image stays mounted and stored.
    assert_bound(&sb, init, "/opt/tools", "1.0");
    assert_eq!(sb.status_of("app")["bindings"][0]["version"], "1.0");
    sb.ok(&["gc"]);
    let image = sb.state_dir().join(format!("store/{old}.sqfs"));
    assert!(image.exists(), "gc removed the bound image");
    let mounted = || sb.mounts().iter().any(|m| m.ends_with(&old));
    assert!(mounted(), "the bound image was unmounted");
    // Its next start binds the new version; the old image is let go (kept in the store
    // only for `berth rollback`).
    sb.ok(&["restart", "app"]);
    let init = init_of(&sb, "app");
    assert_bound(&sb, init, "/opt/tools", "2.0");
    assert_eq!(sb.status_of("app")["bindings"][0]["version"], "2.0");
    assert!(!mounted(), "the old image outlived its binding");
    sb.ok(&["stop", "app"]);
    assert!(sb.stray_mounts().is_empty(), "{:?}", sb.stray_mounts());
}

/// Where a `bind` can be cut short, by method (the propagation method stages a host bind
/// first): before the mount, inside the container's mount namespace before and after it,
/// after it, after the persistent record, after the confirmation.
const BIND_POINTS: &[(&str, bool)] = &[
    ("bind.recorded", false),
    ("bind.staged", true),
    ("mountns.entered", false),
    ("mountns.mounted", false),
    ("bind.mounted", false),
    ("bind.persisted", false),
    ("bind.confirmed", false),
];
/// Where an `unbind` can be cut short.
const UNBIND_POINTS: &[&str] = &[
    "unbind.recorded",
    "mountns.entered",
    "mountns.unmounted",
    "unbind.unmounted",
    "unbind.forgotten",
];

/// Whether the container shows the tools image at /opt/tools.
fn shows_tools(init: i64) -> bool {
    mount_line(init, "/opt/tools").is_some() && inside(init, "/opt/tools/share/data.txt").exists()
}

/// After a daemon killed mid-way and started again: `status` and the container's mounts
/// agree, and so does the persistent record; then the operation that follows works and
/// leaves them agreeing (and the binding gone). Returns whether it was found bound.
fn agree_then_follow(sb: &Sandbox, what: &str, persist: bool) -> bool {
    let init = init_of(sb, "app");
    let c = sb.status_of("app");
    let listed = c["bindings"]
        .as_array()
        .is_some_and(|b| b.iter().any(|b| b["package"] == "tools"));
    let shown = shows_tools(init);
    assert_eq!(
        listed,
        shown,
        "{what}: status says bound={listed}, the container shows it={shown}: {c}\n{}",
        sb.daemon_log_text()
    );
    let kept = std::fs::read_to_string(sb.state_dir().join("binds/app")).unwrap_or_default();
    if !listed {
        assert!(
            !kept.contains("tools"),
            "{what}: persisted but not bound: {kept}"
        );
    } else if persist {
        // a `bind --persist` finished by the next daemon keeps its persistence
        assert!(
            kept.contains("tools"),
            "{what}: bound but its --persist lost: {kept:?}"
        );
    }
    if listed {
        sb.ok(&["unbind", "tools", "--from", "app"]);
    } else {
        sb.ok(&["bind", "tools", "--into", "app"]);
        assert!(shows_tools(init), "{what}: the following bind did not show");
        sb.ok(&["unbind", "tools", "--from", "app"]);
    }
    assert!(
        !shows_tools(init),
        "{what}: the following unbind left the mount"
    );
    let c = sb.status_of("app");
    assert_eq!(
        c["bindings"].as_array().map(Vec::len),
        Some(0),
        "{what}: {c}"
    );
    assert!(
        !std::fs::read_to_string(sb.state_dir().join("binds/app"))
            .unwrap_or_default()
            .contains("tools"),
        "{what}: a persistent record left"
    );
    // No stage bind of the propagation method left on the host.
    let stage = sb.run_dir().join("binds/app/stage");
    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !host.lines().any(|l| l
            .split(' ')
            .nth(4)
            .is_some_and(|m| Path::new(m).starts_with(&stage))),
        "{what}: a stage bind left below {}",
        stage.display()
    );
    listed
}

/// SIGKILL of the daemon at `point` during `args`; then a daemon start.
fn kill_during(sb: &mut Sandbox, point: &str, args: &[&str], env: &[(&str, &str)]) {
    sb.stop_daemon();
    let mut with = env.to_vec();
    with.push(("BERTH_FAULT", point));
    sb.start_daemon_env(&with);
    let _ = sb.output(args).unwrap();
    assert!(
        sb.wait_daemon_exit(std::time::Duration::from_secs(20)),
        "{point}: the daemon did not die there ({args:?})\n{}",
        sb.daemon_log_text()
    );
    sb.start_daemon_env(env);
    // Each killed daemon is an unconfirmed start: the operator's word keeps the boot
    // counter from ending in safe mode.
    sb.ok(&["safe-mode", "clear"]);
}

/// `rounds` passes over every point of bind and unbind (with and without --persist) by one
/// method; (kills, found bound afterwards).
fn bind_kill_rounds(tag: &str, propagation: bool, rounds: usize) -> (usize, usize) {
    let env: &[(&str, &str)] = if propagation {
        &[("BERTH_FORCE_MOUNT_FALLBACK", "1")]
    } else {
        &[]
    };
    let mut sb = sandbox(tag, env);
    let (mut kills, mut bound) = (0, 0);
    for r in 0..rounds {
        let persist = r % 2 == 1;
        for (point, prop_only) in BIND_POINTS {
            if (*prop_only && !propagation) || (*point == "bind.persisted" && !persist) {
                continue;
            }
            let mut args = vec!["bind", "tools", "--into", "app"];
            if persist {
                args.push("--persist");
            }
            kill_during(&mut sb, point, &args, env);
            kills += 1;
            bound += usize::from(agree_then_follow(
                &sb,
                &format!("{tag} bind {point}"),
                persist,
            ));
        }
        for point in UNBIND_POINTS {
            let mut args = vec!["bind", "tools", "--into", "app"];
            if persist {
                args.push("--persist");
            }
            sb.ok(&args);
            kill_during(&mut sb, point, &["unbind", "tools", "--from", "app"], env);
            kills += 1;
            bound += usize::from(agree_then_follow(
                &sb,
                &format!("{tag} unbind {point}"),
                false,
            ));
        }
    }
    // The payload never noticed.
    assert_eq!(sb.status_of("app")["state"], "running");
    (kills, bound)
}

#[test]
fn sigkill_at_every_step_of_bind_and_unbind_leaves_status_and_mounts_agreeing() {
    require_root_and_tools();
    let rounds: usize = std::env::var("BERTH_BIND_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let api = berth_sys::check::probe_open_tree().0 == berth_sys::check::Status::Present
        && !berth_testkit::sandbox::old_kernel_from_env();
    if !api {
        berth_sys::skip::record(
            "kernel open_tree",
            "bind: the kill rounds of the mount API: no mount API (Linux 5.2); the propagation rounds only",
        );
    }
    // Both methods at once, each in a sandbox of its own (a kill waits on its daemon far
    // more than it computes).
    let prop = std::thread::spawn(move || bind_kill_rounds("bindkill-prop", true, rounds));
    let (mut kills, mut bound) = (0, 0);
    if api {
        let (k, b) = bind_kill_rounds("bindkill-api", false, rounds);
        kills += k;
        bound += b;
    }
    let (k, b) = prop.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
    kills += k;
    bound += b;
    eprintln!("bind kill rounds: {kills} kills, status and mounts agreed every time ({bound} found bound, {} not)", kills - bound);
    assert!(kills >= 100 || rounds < 5, "only {kills} kills");
}
