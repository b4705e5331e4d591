//! For the daemon's unit tests: a daemon over a temporary directory (its state, run and
//! lxcpath there, no cgroups) whose kernel is berth-testkit's recording fake, so that apply
//! code runs without root and its failures can be asked for.

use std::path::Path;

use berth_core::config::Config;
use berth_core::index::IndexEntry;
use berth_core::manifest::Manifest;
use berth_core::state::Installed;
use berth_testkit::fake_host::{fake_host, FakeHost, FakeMounts, FakeSignals, Monitor};
use berth_testkit::TempDir;

use crate::daemon::base::context::{Daemon, Resources, Roots};

/// A daemon with the fake host; `extra` is more of its configuration (TOML, its own
/// `[paths]` excepted).
pub(crate) fn fake_daemon(tag: &str, extra: &str) -> (TempDir, Daemon, &'static FakeMounts) {
    let (dir, d, mounts, _) = fake_daemon_with_signals(tag, extra);
    (dir, d, mounts)
}

/// A configuration whose state, run, keys and lxcpath are under `root`; `extra` is more of
/// it (TOML, its own `[paths]` excepted).
pub(crate) fn config_under(root: &Path, extra: &str) -> Config {
    let p = |n: &str| root.join(n).display().to_string();
    // `extra` first: its top-level keys (`repository = …`) stay top-level.
    let text = format!(
        "{extra}\n[paths]\nstate = \"{}\"\nrun = \"{}\"\nkeys = \"{}\"\nlxcpath = \"{}\"\n",
        p("state"),
        p("run"),
        p("keys"),
        p("lxc"),
    );
    Config::parse(&text, "fixture").unwrap()
}

/// [`fake_daemon`], with its signals: they reach the processes of its fixture /proc.
pub(crate) fn fake_daemon_with_signals(
    tag: &str,
    extra: &str,
) -> (TempDir, Daemon, &'static FakeMounts, &'static FakeSignals) {
    let dir = TempDir::new(tag);
    let cfg = config_under(&dir.path(""), extra);
    for sub in ["state", "run", "keys", "lxc", "proc", "sys"] {
        std::fs::create_dir_all(dir.path(sub)).unwrap();
    }
    let roots = Roots {
        proc: dir.path("proc"),
        sys: dir.path("sys"),
        dev: dir.path("dev"),
        boot: dir.path("boot"),
    };
    let resources = Resources {
        cgroups: Err("fixture".into()),
        host: berth_core::cgroup::Host {
            cpus: 1,
            mem_total: 0,
        },
    };
    let proc = roots.proc.clone();
    let f = fake_host(FakeMounts::new(), FakeSignals::new(Some(&proc)));
    FAKES.lock().unwrap().push(f);
    let mut d = Daemon::new(cfg, roots, resources, Default::default());
    d.host = f.host;
    (dir, d, f.mounts, f.signals)
}

/// Every fake host a test made, to find a daemon's by its host.
static FAKES: std::sync::Mutex<Vec<&'static FakeHost>> = std::sync::Mutex::new(Vec::new());

/// The fake host of a daemon [`fake_daemon`] made: its processes and liblxc, to be told
/// what to answer.
pub(crate) fn fakes(d: &Daemon) -> &'static FakeHost {
    let all = FAKES.lock().unwrap();
    let found = all.iter().find(|f| std::ptr::eq(f.host, d.host));
    found.copied().expect("a daemon of fake_daemon")
}

/// A package's image tree as `berth pack` makes it: its manifest and the mount points.
pub(crate) fn image_tree(root: &Path, manifest: &str) {
    std::fs::create_dir_all(root.join(".berth")).unwrap();
    std::fs::write(root.join(berth_core::manifest::MANIFEST_PATH), manifest).unwrap();
    for d in berth_core::plan::SKELETON_DIRS {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
}

/// A package `web` 1.0 (runs /bin/httpd, no network).
pub(crate) const MANIFEST: &str =
    "[package]\nname = \"web\"\nversion = \"1.0\"\n[entrypoint]\nargv = [\"/bin/httpd\"]\n";

/// The index entry of the package `manifest` describes (its image's sha256 `ab…ab`).
pub(crate) fn entry(manifest: &str) -> IndexEntry {
    let m = Manifest::parse(manifest).unwrap();
    IndexEntry {
        name: m.package.name.clone(),
        version: m.package.version.clone(),
        description: String::new(),
        file: format!("packages/{}-{}.sqfs", m.package.name, m.package.version),
        sha256: "ab".repeat(32),
        size: 1,
        depends: Vec::new(),
        trusted: false,
        manifest: m.summary(),
        deltas: Vec::new(),
    }
}

/// The package `manifest` describes, installed in `d`'s state (not started).
pub(crate) fn install(d: &Daemon, manifest: &str) -> Installed {
    let m = Manifest::parse(manifest).unwrap();
    let p = Installed::from_entry(&entry(manifest), m, true, 1_790_000_000);
    d.state
        .lock()
        .unwrap()
        .packages
        .insert(p.name.to_string(), p.clone());
    p
}

/// An LXC monitor of `name` as the daemon finds one (liblxc names no init for it): gone with
/// the guard.
pub(crate) fn lxc_monitor(d: &Daemon, name: &str) -> Monitor {
    fakes(d).lxc.monitor(&d.cfg.paths.lxcpath, name, None)
}

/// A container LXC would say runs (`runtime::probe::is_running`): its configuration, and its
/// monitor ([`lxc_monitor`]).
pub(crate) fn pretend_running(d: &Daemon, name: &str) -> Monitor {
    let dir = d.cfg.paths.lxc_dir(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config"), "").unwrap();
    lxc_monitor(d, name)
}

/// `len` bytes that do not compress (no file system compresses them away, a delta of a
/// change is much smaller than the image), different for each `seed`.
pub(crate) fn noise(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}
