//! State under faults, as a power cut or a careless operator leaves it: SIGKILL of the shim,
//! of the LXC monitor, of the daemon in the middle of `remove --purge` or of a start, and a
//! store image collected while a running container still uses it. Each case is repeated, and
//! after each the state must be consistent: nothing mounted that nothing uses, no cgroup or
//! temporary file left behind, every command working again.

mod common;

use common::*;
use std::process::Command;
use std::time::Duration;

/// The pid of the process whose command line matches `pattern` (the oldest).
fn pgrep_oldest(pattern: &str) -> Option<i32> {
    let out = Command::new("pgrep")
        .args(["-o", "-f", pattern])
        .output()
        .unwrap();
    stdout(&out).trim().parse().ok()
}

fn kill9(pid: i32) {
    let st = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "kill -9 {pid}");
}

/// cgroup directories of container `name` below the sandbox's parent, in every hierarchy.
fn cgroups_of(sb: &Sandbox, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(hiers) = std::fs::read_dir("/sys/fs/cgroup") else {
        return out;
    };
    for h in hiers.flatten() {
        for parent in [
            sb.cgroup_parent.clone(),
            format!("{}.monitor", sb.cgroup_parent),
        ] {
            let p = h.path().join(parent).join(name);
            if p.is_dir() {
                out.push(p.display().to_string());
            }
        }
    }
    out
}

/// Killing the shim (the start helper) leaves the container running; the daemon still
/// stops it, releases its mounts, and the next start works (six times over).
#[test]
fn after_the_shim_is_killed_stop_releases_everything_and_start_works() {
    let mut sb = Sandbox::new("shimkill");
    sb.add(&Pkg::script("quiet", "1.0", "echo up\nexec sleep 600\n").package_key("depends = []"));
    // A root merged (overlayfs) over a dependency: one more mount to release.
    sb.add(&Pkg::new("base", "1.0", &["/bin/busybox", "true"]).file("etc/base-layer", b"base\n"));
    sb.add(
        &Pkg::script(
            "merged",
            "1.0",
            "cat /etc/base-layer\necho up\nexec sleep 600\n",
        )
        .package_key("depends = [\"base\"]\nrootfs = \"merged\""),
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "quiet", "merged"]);
    for round in 0..6 {
        let name = if round % 2 == 0 { "quiet" } else { "merged" };
        sb.ok(&["start", name]);
        sb.wait_log(name, "up");
        let root = sb.run_dir().join("rootfs").join(name);
        assert_eq!(
            sb.mounts().iter().any(|m| std::path::Path::new(m) == root),
            name == "merged",
            "round {round}: {name}'s merged root mounted: {:?}",
            sb.mounts()
        );
        let shim = pgrep_oldest(&format!("__shim {name} {}", sb.lxcpath().display()))
            .expect("the shim runs");
        kill9(shim);
        wait_until("the shim gone", Duration::from_secs(5), || {
            !std::path::Path::new(&format!("/proc/{shim}")).exists()
        });
        assert_eq!(sb.status_of(name)["state"], "running", "round {round}");
        sb.ok(&["stop", name]);
        assert_eq!(sb.status_of(name)["state"], "stopped", "round {round}");
        assert!(
            sb.stray_mounts().is_empty(),
            "round {round}: left mounted after stop of {name}: {:?}",
            sb.stray_mounts()
        );
    }
    for name in ["quiet", "merged"] {
        sb.ok(&["start", name]);
        sb.wait_log(name, "up");
        sb.ok(&["stop", name]);
    }
}

/// Killing the LXC monitor (which takes the container with it) leaves its cgroups behind;
/// the daemon reaps the cgroups of containers it owns that do not run: after the watcher
/// sees the end, at remove, and at its own start.
#[test]
fn cgroups_left_by_a_killed_monitor_are_reaped() {
    let mut sb = Sandbox::new("monkill");
    // No restart: the end the kill causes must stay an end, for the watcher's reaping to be
    // seen (with the default on-failure policy the supervisor starts it again at once).
    sb.add(
        &Pkg::script("quiet", "1.0", "echo up\nexec sleep 600\n")
            .table("[restart]\npolicy = \"never\"\n"),
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "quiet"]);
    for round in 0..5 {
        sb.ok(&["start", "quiet"]);
        sb.wait_log("quiet", "up");
        assert!(
            !cgroups_of(&sb, "quiet").is_empty(),
            "a running container has cgroups"
        );
        let shim = pgrep_oldest(&format!("__shim quiet {}", sb.lxcpath().display())).unwrap();
        let kids = std::fs::read_to_string(format!("/proc/{shim}/task/{shim}/children")).unwrap();
        let monitor: i32 = kids.split_whitespace().next().unwrap().parse().unwrap();
        // Rounds 2 and 3: the daemon is gone first, so no watcher sees the end and only the
        // next daemon's start can reap.
        let daemon_away = matches!(round, 2 | 3);
        if daemon_away {
            sb.kill_daemon(9);
        }
        kill9(monitor);
        if daemon_away {
            wait_until("the shim ended", Duration::from_secs(15), || {
                pgrep_oldest(&format!("__shim quiet {}", sb.lxcpath().display())).is_none()
            });
            assert!(
                !cgroups_of(&sb, "quiet").is_empty(),
                "round {round}: the killed monitor's cgroups are there for the next daemon"
            );
            sb.start_daemon();
        } else {
            wait_until("the container stopped", Duration::from_secs(15), || {
                sb.status_of("quiet")["state"] == "stopped"
            });
        }
        match round {
            // the watcher reaps once it has seen the end (0, 1); the next daemon (2, 3)
            0..=3 => {}
            // remove reaps too, and so does the next daemon
            _ => {
                sb.ok(&["remove", "quiet"]);
                sb.kill_daemon(9);
                sb.start_daemon();
            }
        }
        wait_until(
            &format!(
                "round {round}: cgroups of quiet reaped: {:?}",
                cgroups_of(&sb, "quiet")
            ),
            Duration::from_secs(10),
            || cgroups_of(&sb, "quiet").is_empty(),
        );
    }
}

/// Temporary files of atomic writes (`.NAME.tmp.PID.N`) under the state and run directories.
fn atomic_leftovers(sb: &Sandbox) -> Vec<String> {
    fn walk(dir: &std::path::Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let n = e.file_name().to_string_lossy().into_owned();
            if e.file_type().is_ok_and(|t| t.is_dir())
                && !p.ends_with("mnt")
                && !p.ends_with("rootfs")
                && !p.ends_with("data")
            {
                walk(&p, out);
            } else if n.starts_with('.') && n.contains(".tmp.") {
                out.push(p.display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(&sb.state_dir(), &mut out);
    walk(&sb.run_dir(), &mut out);
    out
}

/// A daemon killed in the middle of a start leaves temporary files of its atomic writes
/// (the seccomp profile, the LXC configuration) in the container's directory: the next start
/// of that container and the next daemon remove them. Ten kills at random moments of a
/// start, then the planted leftovers of a kill mid-write.
#[test]
fn temporary_files_of_a_start_cut_short_are_removed() {
    let mut sb = Sandbox::new("tmpkill");
    // Every SIGKILL here is a daemon start that never confirms: this test is about the
    // state, not safe mode (safe_mode.rs), so the boot counter may count far.
    sb.write_config("[boot]\nmax_failed = 100\n");
    sb.add(&Pkg::script("quiet", "1.0", "echo up\nexec sleep 600\n"));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "quiet"]);
    let mut seed: u64 = std::process::id() as u64;
    for round in 0..10 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let delay = Duration::from_micros(seed >> 33 & 0x7fff); // 0..33 ms
        let mut start = sb.cmd(&["start", "quiet"]).spawn().unwrap();
        std::thread::sleep(delay);
        sb.kill_daemon(9);
        let _ = start.wait();
        sb.start_daemon();
        let left = atomic_leftovers(&sb);
        assert!(left.is_empty(), "round {round} ({delay:?}): left {left:?}");
        if sb.status_of("quiet")["state"] == "running" {
            sb.ok(&["stop", "quiet"]);
        }
        sb.ok(&["start", "quiet"]);
        sb.ok(&["stop", "quiet"]);
    }
    // What a kill between a temporary file's creation and its rename leaves.
    let dir = sb.lxcpath().join("quiet");
    let plant = || {
        for f in [".seccomp.tmp.4242.0", ".config.tmp.4242.1"] {
            std::fs::write(dir.join(f), b"partial").unwrap();
        }
    };
    plant();
    sb.ok(&["start", "quiet"]);
    assert!(
        atomic_leftovers(&sb).is_empty(),
        "{:?}",
        atomic_leftovers(&sb)
    );
    sb.ok(&["stop", "quiet"]);
    plant();
    std::fs::write(sb.state_dir().join(".state.json.tmp.4242.2"), b"partial").unwrap();
    sb.kill_daemon(9);
    sb.start_daemon();
    assert!(
        atomic_leftovers(&sb).is_empty(),
        "{:?}",
        atomic_leftovers(&sb)
    );
}

fn idmap_slots(sb: &Sandbox) -> String {
    std::fs::read_to_string(sb.state_dir().join("idmap")).unwrap_or_default()
}

/// A package with some data in /data, started once (so it has an id range) and stopped.
fn with_data(sb: &Sandbox, name: &str) {
    sb.ok(&["install", name]);
    sb.ok(&["start", name]);
    sb.wait_log(name, "written");
    sb.ok(&["stop", name]);
    assert!(sb.state_dir().join("data").join(name).join("f999").exists());
    assert!(idmap_slots(sb).contains(name));
}

/// SIGKILL of the daemon in the middle of `remove --purge` (at the two points where state
/// and disk differ, then at random moments of a slow purge): afterwards the package is either
/// still installed with all its /data, or gone with its /data and its id range freed, and a
/// purge cut short is always finished (by the next daemon, by gc, or by remove --purge of the
/// name that is no longer installed).
#[test]
fn a_purge_cut_short_is_undone_or_finished() {
    let mut sb = Sandbox::new("purgekill");
    // Every SIGKILL here is a daemon start that never confirms: this test is about the
    // state, not safe mode (safe_mode.rs), so the boot counter may count far.
    sb.write_config("[boot]\nmax_failed = 100\n");
    sb.add(&Pkg::script(
        "keeper",
        "1.0",
        "i=0; while [ $i -lt 1000 ]; do echo $i > /data/f$i; i=$((i+1)); done; echo written\nexec sleep 600\n",
    ));
    sb.start_daemon();
    sb.ok(&["update"]);

    // Killed after /data was set aside, before the commit: still installed, /data back.
    with_data(&sb, "keeper");
    sb.kill_daemon(15);
    sb.start_daemon_env(&[("BERTH_FAULT", "remove.set-aside")]);
    let _ = sb.berth(&["remove", "--purge", "keeper"]);
    assert!(
        sb.wait_daemon_exit(Duration::from_secs(10)),
        "fault point reached"
    );
    sb.start_daemon();
    assert_eq!(sb.listed("installed"), ["keeper"]);
    assert!(
        sb.state_dir().join("data/keeper/f999").exists(),
        "/data is back"
    );
    assert!(idmap_slots(&sb).contains("keeper"));

    // Killed after the commit, before the delete: gone, and the next daemon finishes it.
    sb.kill_daemon(15);
    sb.start_daemon_env(&[("BERTH_FAULT", "remove.committed")]);
    let _ = sb.berth(&["remove", "--purge", "keeper"]);
    assert!(
        sb.wait_daemon_exit(Duration::from_secs(10)),
        "fault point reached"
    );
    sb.start_daemon();
    assert!(sb.listed("installed").is_empty());
    let data = sb.state_dir().join("data");
    let left: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left in data/: {left:?}");
    assert!(!idmap_slots(&sb).contains("keeper"), "id range freed");

    // /data without a package (left by an older berth, or a plain remove): remove --purge
    // deletes it instead of answering "not installed"; a plain remove still refuses.
    with_data(&sb, "keeper");
    sb.ok(&["remove", "keeper"]);
    assert!(data.join("keeper").exists());
    let (code, err) = sb.fail(&["remove", "keeper"]);
    assert_eq!(code, 1);
    assert!(err.contains("keeper is not installed"), "{err}");
    sb.ok(&["remove", "--purge", "keeper"]);
    assert!(!data.join("keeper").exists());
    assert!(!idmap_slots(&sb).contains("keeper"), "id range freed");

    // The set-aside /data of a purge that committed, found while a daemon runs (as one cut
    // short leaves it): gc finishes the purge.
    with_data(&sb, "keeper");
    sb.ok(&["remove", "keeper"]);
    std::fs::rename(data.join("keeper"), data.join(".purge-keeper")).unwrap();
    sb.ok(&["gc"]);
    assert!(
        !data.join(".purge-keeper").exists(),
        "gc finished the purge"
    );
    assert!(!idmap_slots(&sb).contains("keeper"), "id range freed by gc");

    // Random moments of a slow purge (1000 files): never half a state.
    let mut seed = std::process::id() as u64;
    for round in 0..8 {
        with_data(&sb, "keeper");
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let delay = Duration::from_micros(seed >> 33 & 0x3fff); // 0..16 ms
        let mut rm = sb.cmd(&["remove", "--purge", "keeper"]).spawn().unwrap();
        std::thread::sleep(delay);
        sb.kill_daemon(9);
        let _ = rm.wait();
        sb.start_daemon();
        let installed = sb.listed("installed");
        let entries: Vec<String> = std::fs::read_dir(&data)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if installed.is_empty() {
            assert!(
                entries.is_empty(),
                "round {round}: removed, yet data/ has {entries:?}"
            );
            assert!(!idmap_slots(&sb).contains("keeper"), "round {round}");
        } else {
            assert_eq!(
                entries,
                ["keeper"],
                "round {round}: installed, data/ has {entries:?}"
            );
            assert!(
                data.join("keeper/f999").exists(),
                "round {round}: /data intact"
            );
            sb.ok(&["remove", "--purge", "keeper"]);
        }
    }
}

/// An app whose root is a merged overlay over its dependency keeps running on the old image
/// of that dependency after the dependency is upgraded: `berth gc` must not delete that image
/// while the app runs; once it stops, gc may.
#[test]
fn gc_never_collects_an_image_a_running_container_uses() {
    let mut sb = Sandbox::new("gcuse");
    let base = |v: &str| {
        let mut p = Pkg::new("base", v, &["/bin/busybox", "true"]);
        p.files
            .push((format!("share/base-{v}.txt"), v.as_bytes().to_vec()));
        p
    };
    let base1 = sb.pack(&base("1.0"));
    sb.pack(
        &Pkg::script("app", "1.0", "echo up\nwhile true; do sleep 0.2; done\n")
            .package_key("depends = [\"base\"]\nrootfs = \"merged\""),
    );
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "app"]);
    let v1 = sb.json(&["list"])["installed"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "base")
        .unwrap()["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    sb.ok(&["start", "app"]);
    sb.wait_log("app", "up");
    let merged = sb.run_dir().join("rootfs/app/share/base-1.0.txt");
    assert!(merged.exists(), "the app's root holds base 1.0");

    // base 2.0 replaces 1.0 in the repository and on the device, the app still running.
    std::fs::remove_file(&base1).unwrap();
    sb.pack(&base("2.0"));
    sb.build_repo();
    sb.ok(&["update"]);
    sb.ok(&["install", "base"]);
    let image = sb.state_dir().join("store").join(format!("{v1}.sqfs"));
    for _ in 0..3 {
        sb.ok(&["gc"]);
        assert!(
            image.exists(),
            "gc deleted {} under the running app",
            image.display()
        );
        assert_eq!(std::fs::read_to_string(&merged).unwrap(), "1.0");
    }
    // The daemon restarted meanwhile: still kept.
    sb.kill_daemon(9);
    sb.start_daemon();
    sb.ok(&["gc"]);
    assert!(
        image.exists(),
        "gc after a daemon restart deleted {}",
        image.display()
    );

    sb.ok(&["stop", "app"]);
    let v = sb.json(&["gc"]);
    assert!(v["removed"].to_string().contains(&v1), "{v}");
    assert!(!image.exists());
    sb.ok(&["start", "app"]);
    assert!(sb.run_dir().join("rootfs/app/share/base-2.0.txt").exists());
    sb.ok(&["stop", "app"]);
}
