//! The sweep for real (root): a sandbox directory with a process that names it, a tmpfs
//! mount, a loop device, a network namespace and cgroups is left with nothing after one sweep,
//! and a second sweep finds nothing more.

use std::path::Path;
use std::process::{Command, Stdio};

use berth_testkit::{sweep, unique_id, Scope};

fn ok(c: &mut Command) {
    let st = c.stdin(Stdio::null()).status().unwrap();
    assert!(st.success(), "{c:?}: {st}");
}

#[test]
fn sweep_removes_everything_the_scope_owns() {
    let root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false);
    if !root {
        berth_sys::skip::record(
            "host root",
            "sweep_removes_everything_the_scope_owns: mounts, loop devices and cgroups need root",
        );
        return;
    }
    let id = unique_id("kit");
    let scope = Scope::new(
        std::env::temp_dir().join(format!("berth-kit-{id}")),
        format!("berth-kit-{id}"),
    );
    let dir = &scope.dir;
    std::fs::create_dir_all(dir.join("mnt")).unwrap();
    ok(Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(dir.join("mnt")));
    std::fs::write(dir.join("img"), vec![0u8; 1 << 20]).unwrap();
    let lo = Command::new("losetup")
        .args(["-f", "--show"])
        .arg(dir.join("img"))
        .output()
        .unwrap();
    assert!(lo.status.success(), "losetup");
    let lo = String::from_utf8_lossy(&lo.stdout).trim().to_string();
    let netns = scope.netns("t");
    ok(Command::new("ip").args(["netns", "add", &netns]));
    let mut cgroups = Vec::new();
    for h in ["cpu", "memory", "unified", ""] {
        let h = Path::new("/sys/fs/cgroup").join(h);
        for name in [scope.name.clone(), format!("{}.monitor", scope.name)] {
            let c = h.join(&name);
            if (h.join("cgroup.procs").exists() || h.join("tasks").exists())
                && std::fs::create_dir_all(c.join("inner")).is_ok()
            {
                cgroups.push(c);
            }
        }
    }
    assert!(!cgroups.is_empty(), "no cgroup hierarchy to test with");
    let mut child = Command::new("sleep")
        .arg("600")
        .env("BERTH_CONFIG", dir.join("berth.toml"))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();

    let r = sweep(&scope);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    let found = r.found.join(", ");
    for what in [
        "1 processes",
        "1 mounts",
        "loop devices loop",
        "network namespaces",
        "cgroups",
    ] {
        assert!(found.contains(what), "{what} not in {found}");
    }
    assert!(
        child.wait().unwrap().code().is_none(),
        "sleep was not killed"
    );
    assert!(!dir.exists());
    assert!(!Path::new("/run/netns").join(&netns).exists());
    for c in &cgroups {
        assert!(!c.exists(), "{}", c.display());
    }
    let dev = lo.trim_start_matches("/dev/");
    assert!(!Path::new("/sys/block")
        .join(dev)
        .join("loop/backing_file")
        .exists());
    let again = sweep(&scope);
    assert!(again.found.is_empty(), "{:?}", again.found);
}
