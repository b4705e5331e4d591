//! A full state partition (issue 35, docs/repository.md "A full disk"): the state directory on
//! a real tmpfs, filled to 100 % by a container's /data without a cap (a tmpfs keeps nothing
//! for root: the worst case; ext4 and UBIFS keep root's reserve, which an unprivileged
//! container cannot take). At every step the daemon answers, says what is full and who filled
//! it, changes nothing, and once the space returns works again by itself, without a restart.

mod common;

use common::*;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

struct Tmpfs(PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The state directory on a 24 MiB file system of its own, before the daemon uses it;
/// unmounted when the guard goes.
fn small_state(sb: &Sandbox) -> Tmpfs {
    std::fs::create_dir_all(sb.state_dir()).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=24M,mode=0755", "tmpfs"])
        .arg(sb.state_dir())
        .status()
        .unwrap();
    assert!(st.success(), "mount tmpfs");
    Tmpfs(sb.state_dir())
}

fn service(name: &str, version: &str) -> Pkg {
    Pkg::script(
        name,
        version,
        "trap 'exit 0' TERM PWR INT; echo up; while true; do sleep 0.1; done",
    )
}

fn version_of(sb: &Sandbox, name: &str) -> String {
    sb.status_of(name)["version"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[test]
fn a_full_state_partition_refuses_cleanly_names_who_filled_it_and_recovers() {
    let mut sb = Sandbox::new("fulldisk");
    sb.pack(&service("svc", "1"));
    let mut filler = Pkg::script(
        "filler",
        "1",
        "trap 'exit 0' TERM PWR INT; dd if=/dev/zero of=/data/fill bs=64k 2>/dev/null; echo full; while true; do sleep 0.1; done",
    );
    filler.applets = &["sh", "dd", "echo", "sleep"];
    sb.pack(&filler);
    sb.pack(&Pkg::script("quits", "1", "echo bye; exit 3").table("[restart]\npolicy = \"never\""));
    sb.pack(&service("late", "1"));
    sb.pack(&service("late0", "1"));
    sb.build_repo();
    let _guard = small_state(&sb);
    sb.write_config("[upgrade]\nreserve = \"1M\"\n");
    sb.start_daemon();
    let daemon = sb.daemon_pid();
    sb.ok(&["update"]);
    sb.ok(&["install", "svc", "filler", "quits", "late0"]);
    // svc 2 kept, so that svc has a previous version to roll back to.
    std::fs::remove_file(sb.package_file("svc", "1")).unwrap();
    sb.add(&service("svc", "2"));
    sb.ok(&["update"]);
    sb.ok(&["upgrade", "svc"]);
    assert_eq!(version_of(&sb, "svc"), "2");
    sb.ok(&["start", "svc"]);
    // quits has run once (its ids and /data are allocated) and left its report.
    sb.berth(&["start", "quits"]);
    let reports = |sb: &Sandbox| {
        sb.json(&["report", "list"])["reports"]
            .as_array()
            .map_or(0, Vec::len)
    };
    wait_until("the first report", Duration::from_secs(20), || {
        reports(&sb) == 1
    });
    let state_before = std::fs::read(sb.state_dir().join("state.json")).unwrap();

    // The container fills the partition through its /data.
    sb.ok(&["start", "filler"]);
    sb.wait_log("filler", "full");
    let df = Command::new("stat")
        .args(["-f", "-c", "%a"])
        .arg(sb.state_dir())
        .output()
        .unwrap();
    assert_eq!(stdout(&df).trim(), "0", "the partition is full");

    // 1. The daemon answers, and its status says what is full and who filled it.
    let s = sb.json(&["status"]);
    let w = s["daemon"]["space_warning"].as_str().unwrap_or("");
    assert!(
        w.contains("has 0.0 MiB (0 B) free, less than [upgrade] reserve keeps")
            && w.contains("the biggest: /data of filler 1"),
        "{s}"
    );
    assert!(sb.ok(&["status"]).contains("warning: "));

    // 2. An install is refused before anything is fetched: what it needs, what there is, who.
    let (_, err) = sb.fail(&["install", "late"]);
    assert!(
        err.contains("no room for late@1: space required ")
            && err.contains("available 0.0 MiB (0 B)")
            && err.contains("/data of filler"),
        "{err}"
    );

    // 3. A rollback cannot write the state: refused, named, nothing changed.
    let (_, err) = sb.fail(&["rollback", "svc"]);
    assert!(
        err.contains("full") && err.contains("/data of filler"),
        "{err}"
    );
    assert_eq!(version_of(&sb, "svc"), "2");
    assert_eq!(sb.status_of("svc")["state"], "running");

    // 4. A schedule cannot be written: refused, named, none added.
    const ADD: &[&str] = &[
        "schedule",
        "add",
        "svc",
        "--cron",
        "* * * * *",
        "--",
        "/bin/busybox",
        "true",
    ];
    let (_, err) = sb.fail(ADD);
    assert!(
        err.contains("file system full") && err.contains("/data of filler"),
        "{err}"
    );
    let listed = sb.json(&["schedule", "list", "svc"]);
    assert_eq!(
        listed["schedules"].as_array().map(Vec::len),
        Some(0),
        "{listed}"
    );

    // 5. A crash report cannot be written: said in the log, with who filled the partition.
    sb.berth(&["start", "quits"]);
    let said = || {
        let log = sb.daemon_log_text();
        log.contains("quits: no crash report: ")
            && log.contains("(flash full)")
            && log.contains("/data of filler")
    };
    for _ in 0..200 {
        if said() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        said(),
        "the report's failure logged:\n{}",
        sb.daemon_log_text()
    );
    assert_eq!(reports(&sb), 1);

    // 6. A container that never ran cannot be given its ids and /data: refused, named.
    let (_, err) = sb.fail(&["start", "late0"]);
    assert!(
        err.contains("file system full") && err.contains("/data of filler"),
        "{err}"
    );
    assert_eq!(sb.status_of("late0")["state"], "stopped");
    assert_eq!(
        std::fs::read(sb.state_dir().join("state.json")).unwrap(),
        state_before,
        "the state file is as it was"
    );

    // The space returns (the operator deletes the file): everything works again, the same
    // daemon, no restart.
    std::fs::remove_file(sb.state_dir().join("data/filler/fill")).unwrap();
    let s = sb.json(&["status"]);
    assert!(s["daemon"]["space_warning"].is_null(), "{s}");
    let r = sb.json(&["rollback", "svc"]);
    assert_eq!(r["to"], "1", "{r}");
    sb.ok(ADD);
    sb.berth(&["start", "quits"]);
    wait_until("the report written", Duration::from_secs(20), || {
        reports(&sb) == 2
    });
    sb.ok(&["install", "late"]);
    sb.ok(&["start", "late0"]);
    assert_eq!(sb.daemon_pid(), daemon, "the same daemon throughout");
    for name in ["svc", "filler", "late0"] {
        sb.ok(&["stop", name]);
    }
}

/// Admission (issue 36): an upgrade whose /data snapshot would not fit beside its image with
/// `[upgrade] reserve` left is refused before anything is fetched, naming the snapshot, what
/// it needs and what there is; with room made, the same upgrade takes its snapshot and
/// passes. A version that declares more memory than the device policy gives any container is
/// refused too, before the state changes.
#[test]
fn an_upgrade_is_admitted_with_its_data_snapshot_and_its_declared_memory() {
    let mut sb = Sandbox::new("admit");
    let keeper = |version: &str| {
        let mut p = Pkg::script(
            "keeper",
            version,
            "trap 'exit 0' TERM PWR INT; [ -f /data/blob ] || dd if=/dev/urandom of=/data/blob bs=64k count=160 2>/dev/null; echo kept; while true; do sleep 0.1; done",
        );
        p.applets = &["sh", "dd", "echo", "sleep", "rm"];
        p
    };
    sb.pack(&keeper("1"));
    sb.build_repo();
    let _guard = small_state(&sb);
    sb.write_config("[upgrade]\nreserve = \"1M\"\n[policy]\ncontainer_memory_max = \"64M\"\n");
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "keeper"]);
    sb.ok(&["start", "keeper"]);
    sb.wait_log("keeper", "kept");
    sb.ok(&["stop", "keeper"]);
    // 10 MiB of /data; and a file of the test's own that leaves less than that free.
    let free = || {
        let o = Command::new("stat")
            .args(["-f", "-c", "%a %S"])
            .arg(sb.state_dir())
            .output()
            .unwrap();
        let t = stdout(&o);
        let mut w = t.split_whitespace().map(|n| n.parse::<u64>().unwrap());
        w.next().unwrap() * w.next().unwrap()
    };
    let ballast = sb.state_dir().join("ballast");
    let keep = 6 << 20;
    let st = Command::new("fallocate")
        .args(["-l", &(free() - keep).to_string()])
        .arg(&ballast)
        .status()
        .unwrap();
    assert!(st.success(), "fallocate");
    std::fs::remove_file(sb.package_file("keeper", "1")).unwrap();
    sb.add(&keeper("2"));
    sb.ok(&["update"]);
    let state_before = std::fs::read(sb.state_dir().join("state.json")).unwrap();
    let (code, err) = sb.fail(&["upgrade", "keeper"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("no room for keeper's /data snapshot, keeper@2: space required 10.")
            && err.contains("available 6.0 MiB"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(sb.state_dir().join("state.json")).unwrap(),
        state_before,
        "the refused upgrade changed the state"
    );
    assert_eq!(version_of(&sb, "keeper"), "1");
    let images = std::fs::read_dir(sb.state_dir().join("store"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".sqfs")
        })
        .count();
    assert_eq!(images, 1, "nothing fetched for a refused upgrade");

    // Room made: the same upgrade passes, its snapshot taken (and gone once confirmed).
    std::fs::remove_file(&ballast).unwrap();
    sb.ok(&["upgrade", "keeper"]);
    assert_eq!(version_of(&sb, "keeper"), "2");
    let log = sb.daemon_log_text();
    assert!(!log.contains("too large to snapshot"), "{log}");
    println!("refused: {err}");

    // A version that declares more memory than any container may have: refused after its
    // image is checked, before the state changes.
    std::fs::remove_file(sb.package_file("keeper", "2")).unwrap();
    sb.add(&keeper("3").table("[resources]\nmemory = \"128M\""));
    sb.ok(&["update"]);
    let (code, err) = sb.fail(&["upgrade", "keeper"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("keeper: memory 128M is beyond what the device policy gives a container (64M: policy.memory_budget, policy.container_memory_max)")
            && err.contains("nothing was changed"),
        "{err}"
    );
    assert_eq!(version_of(&sb, "keeper"), "2");
    sb.stop_daemon();
}
