//! The host's cgroup layout, the group budget, and the reaping of stale container cgroups.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use berth_core::cgroup::{self as cg, CgroupVersion, ContainerCgroups, Host, Limits};
use berth_sys::cgroupfs::{self, Cgroups};

use crate::daemon::base::context::{Daemon, Resources, Roots};
use crate::daemon::base::error::{Error, Kind, Result};

/// LXC refuses to start when the container's cgroup already exists (a crash may leave one),
/// and a monitor killed before its clean-up leaves them behind: removes the cgroups of
/// container `name` (its budget `<parent>/<name>` with its leaves, and the monitors'
/// `<parent>.monitor/<name>` of containers started before the budget had leaves) in every
/// hierarchy, deepest first. Only empty cgroups can go: a running container's stay, and so
/// does the helpers' leaf while a shim that is exiting is still in it (`true`: all gone).
pub(crate) fn remove_stale_cgroups(d: &Daemon, name: &str) -> bool {
    fn rmdir_tree(p: &Path) {
        if let Ok(kids) = std::fs::read_dir(p) {
            for k in kids.flatten() {
                if k.file_type().is_ok_and(|t| t.is_dir()) {
                    rmdir_tree(&k.path());
                }
            }
        }
        let _ = std::fs::remove_dir(p);
    }
    let mut gone = true;
    for parent in parents(d) {
        for h in hierarchies(d) {
            let p = h.join(&parent).join(name);
            if p.is_dir() {
                rmdir_tree(&p);
                gone &= !p.exists();
            }
        }
    }
    gone
}

/// After a container's end: its cgroups go. The shim answers the end just before it exits,
/// so its leaf may hold it a moment longer: tried again for up to 100 ms (what is left, the
/// next start or daemon start reaps).
pub(crate) fn reap(d: &Daemon, name: &str) {
    for _ in 0..5 {
        if remove_stale_cgroups(d, name) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

use crate::shim::BUDGET_CONTROLLERS;

/// Before a start (its stale cgroups reaped): the container's budget with its limits
/// (`limits`: the container's, of which the budget takes CPU and memory and pids with room
/// for berth's processes) and the leaf for berth's processes. Returns that leaf, which the
/// shim and the helpers enter (None without cgroups).
pub(crate) fn prepare_budget(
    d: &Daemon,
    name: &str,
    limits: Option<&Limits>,
) -> Result<Option<String>> {
    let Ok(c) = &d.resources.cgroups else {
        return Ok(None);
    };
    let cgs = of(d, name);
    let failed = |e: cgroupfs::CgroupError| {
        Error::new(
            Kind::LimitFailed,
            format!("{name}: cannot set up its cgroup {}: {e}", cgs.budget),
        )
    };
    v1_hierarchical(c, &cgs.budget);
    // The budget and its leaf for berth's processes (v2: the controllers enabled down to
    // the budget, whose leaves LXC and berth fill), then the budget's limits.
    c.ensure(&cgs.helpers, &BUDGET_CONTROLLERS)
        .map_err(failed)?;
    if let Some(l) = limits {
        let files = cg::files(core_version(c), &l.budget(d.cfg.log_ring_bytes as u64));
        c.apply(
            &cgs.budget,
            files.iter().map(|(k, f, v)| (k.name(), *f, v.as_str())),
        )
        .map_err(failed)?;
    }
    Ok(Some(cgs.helpers))
}

/// The leaf for berth's processes of container `name` (its shim, its helpers), as
/// [`crate::shim::CGROUP_ENV`] takes it, if it has one (not without cgroups, nor for a
/// container started before the budget had leaves: its helpers stay in the daemon's cgroup).
pub(crate) fn helpers_leaf(d: &Daemon, name: &str) -> Option<String> {
    let c = d.resources.cgroups.as_ref().ok()?;
    let helpers = of(d, name).helpers;
    c.exists(&helpers).then_some(helpers)
}

/// The cgroups of container `name` (its budget and the budget's leaves).
pub(crate) fn of(d: &Daemon, name: &str) -> ContainerCgroups {
    ContainerCgroups::of(&d.cfg.cgroup_parent, name)
}

/// Where the payload's own limits and counters are: its leaf, or the budget itself for a
/// container started before the budget had leaves.
pub(crate) fn payload_cgroup(d: &Daemon, name: &str) -> String {
    let budget = container_cgroup(d, name);
    let payload = format!("{budget}/{}", cg::PAYLOAD_LEAF);
    match &d.resources.cgroups {
        Ok(c) if !c.exists(&payload) && c.exists(&budget) => budget,
        _ => payload,
    }
}

/// A container's counters: CPU of its whole budget (the payload and berth's processes for
/// it), memory, OOM kills and pids of its payload (with their limits as the package asked).
pub(crate) fn container_stats(c: &Cgroups, d: &Daemon, name: &str) -> cgroupfs::Stats {
    c.stats_of(&container_cgroup(d, name), &payload_cgroup(d, name))
}

/// Keeps the kernel's lock for cgroup moves warm while a start runs; dropped when the start
/// has reported.
pub(crate) struct WarmMoves(Arc<AtomicBool>);

impl Drop for WarmMoves {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Early in every start, LXC's monitor moves itself into its cgroup and then the container's
/// init into the container's, by writing to `cgroup.procs`. Every such write takes the
/// kernel's lock for cgroup moves (`cgroup_threadgroup_rwsem`, a per-CPU rwsem): the first
/// writer after a quiet spell waits for an RCU grace period, any writer within a grace
/// period of the last one does not. On the development machine that wait is 7–8 ms, a third
/// of the whole start, and it came after everything the daemon and the shim do. So, as a
/// start begins, a thread of the daemon moves the daemon into the cgroup it is already in (a
/// move that changes nothing): the grace period runs while the start is prepared, and the
/// same move again every 2 ms (at most 60 ms) keeps it passed until the start reports. A
/// kernel whose cgroups favour dynamic changes (`favordynmods`, Linux 6.0) never waits, and
/// the moves then cost a few microseconds each (docs/benchmarks/README.md, "The start
/// path"). None when the host's layout or the daemon's own cgroup is not known.
pub(crate) fn warm_moves(d: &Daemon) -> Option<WarmMoves> {
    let cg = d.resources.cgroups.as_ref().ok()?.clone();
    let proc = d.proc().to_path_buf();
    let done = Arc::new(AtomicBool::new(false));
    let seen = done.clone();
    berth_sys::process::spawn_thread(
        "warm-moves".into(),
        64 * 1024,
        Box::new(move || {
            let Some(procs) = cg.procs_file_of(&proc, "self") else {
                return;
            };
            let pid = std::process::id().to_string();
            for _ in 0..30 {
                if std::fs::write(&procs, &pid).is_err() || seen.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }),
    )
    .ok()?;
    Some(WarmMoves(done))
}

/// Names with a cgroup below berth's parent (or its monitors' parent) in any hierarchy.
pub(crate) fn cgroup_names(d: &Daemon) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for parent in parents(d) {
        for h in hierarchies(d) {
            if let Ok(kids) = std::fs::read_dir(h.join(&parent)) {
                for k in kids.flatten() {
                    if k.file_type().is_ok_and(|t| t.is_dir()) {
                        names.insert(k.file_name().to_string_lossy().into_owned());
                    }
                }
            }
        }
    }
    names
}

/// The cgroup root itself (a unified mount) and every hierarchy mounted below it.
fn hierarchies(d: &Daemon) -> Vec<PathBuf> {
    let root = d.cgroup_root();
    let mut all: Vec<PathBuf> = std::fs::read_dir(&root)
        .map(|h| h.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    all.push(root);
    all
}

/// berth's parent cgroup and the monitors' parent of containers started before the budget
/// had leaves.
fn parents(d: &Daemon) -> [String; 2] {
    let p = &d.cfg.cgroup_parent;
    [p.clone(), format!("{p}.monitor")]
}

/// The host's cgroup layout and size, found once at daemon start (neither changes while it
/// runs).
pub(crate) fn detect(roots: &Roots) -> Resources {
    Resources {
        cgroups: Cgroups::detect(&roots.proc).map_err(|e| e.to_string()),
        host: Host {
            cpus: cgroupfs::online_cpus(&roots.sys).unwrap_or(1),
            mem_total: cgroupfs::mem_total(&roots.proc).unwrap_or(0),
        },
    }
}

pub(crate) fn core_version(c: &Cgroups) -> CgroupVersion {
    match c.version {
        cgroupfs::Version::V1 => CgroupVersion::V1,
        cgroupfs::Version::V2 => CgroupVersion::V2,
    }
}

/// The container's budget: everything it costs, the payload and berth's processes for it.
pub(crate) fn container_cgroup(d: &Daemon, name: &str) -> String {
    format!("{}/{name}", d.cfg.cgroup_parent)
}

/// The host's cgroup version, if it has cgroups berth can use.
pub(crate) fn cgroup_version(d: &Daemon) -> Option<CgroupVersion> {
    d.resources.cgroups.as_ref().ok().map(core_version)
}

/// On v1, a memory cgroup made hierarchical as it is made (`memory.use_hierarchy`, settable
/// only while it has no children): a v1 root's default is 0 before Linux 5.11 unless a
/// service manager set it, and children inherit it; then a limit would not hold what is
/// below it (the group's its containers, a budget's its leaves). Newer kernels: always 1.
fn v1_hierarchical(c: &cgroupfs::Cgroups, rel: &str) {
    if c.version != cgroupfs::Version::V1 {
        return;
    }
    if let Some(dir) = c.dir("memory", rel) {
        if std::fs::create_dir(&dir).is_ok() {
            let _ = std::fs::write(dir.join("memory.use_hierarchy"), "1");
        }
    }
}

/// At daemon start: the parent cgroup every container lives in, capped by the group budget.
pub(crate) fn apply_group_budget(d: &Daemon) {
    let r = &d.resources;
    let c = match &r.cgroups {
        Ok(c) => c,
        Err(e) => {
            log::warn!("no resource control: {e}");
            return;
        }
    };
    let rel = d.cfg.cgroup_parent.as_str();
    let limits = cg::group_limits(&d.cfg.policy, r.host);
    let files = cg::files(core_version(c), &limits);
    v1_hierarchical(c, rel);
    let result = c
        .ensure(rel, &["cpu", "cpuacct", "memory", "pids"])
        .and_then(|_| {
            c.apply(
                rel,
                files.iter().map(|(k, f, v)| (k.name(), *f, v.as_str())),
            )
        });
    match result {
        Ok(a) => {
            if let Some(note) = a.missing_note() {
                log::warn!("{note}");
            }
            log::info!(
                "group budget on cgroup {rel} ({:?}): cpu {}% of {} CPUs, memory {}, pids {}",
                c.version,
                d.cfg.policy.cpu_max_percent,
                r.host.cpus,
                cg::fmt_size(limits.memory_max.unwrap_or(0)),
                d.cfg.policy.pids_budget
            );
        }
        Err(e) => log::error!("group budget not applied: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::config::Config;

    /// A daemon whose kernel is a fixture tree below `root`.
    fn daemon(root: &Path) -> Daemon {
        let cfg = Config::parse("[containers]\ncgroup_parent = \"berth-t\"\n", "fixture").unwrap();
        let roots = Roots {
            proc: root.join("proc"),
            sys: root.join("sys"),
            dev: root.join("dev"),
            boot: root.join("boot"),
        };
        let resources = Resources {
            cgroups: Err("fixture".into()),
            host: Host {
                cpus: 1,
                mem_total: 0,
            },
        };
        Daemon::new(cfg, roots, resources, Default::default())
    }

    /// A daemon over a fixture cgroup tree: `mounts` (directory below <root>/cg, fs type,
    /// super options) in its mountinfo, `files` (path below <root>/cg, text) put there. A
    /// fixture's file takes a write over what it holds, untruncated: those to be written
    /// start empty.
    fn fixture_daemon(
        tag: &str,
        mounts: &[(&str, &str, &str)],
        files: &[(&str, &str)],
    ) -> (PathBuf, Daemon) {
        let root = std::env::temp_dir().join(format!("berth-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mut info = String::new();
        for (i, (dir, fs, opts)) in mounts.iter().enumerate() {
            let mp = root.join("sys/fs/cgroup").join(dir);
            std::fs::create_dir_all(&mp).unwrap();
            info.push_str(&format!(
                "{} 31 0:{} / {} rw,relatime - {fs} {fs} {opts}\n",
                40 + i,
                40 + i,
                mp.display()
            ));
        }
        std::fs::create_dir_all(root.join("proc/self")).unwrap();
        std::fs::write(root.join("proc/self/mountinfo"), info).unwrap();
        for (f, text) in files {
            let p = root.join("sys/fs/cgroup").join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let mut d = daemon(&root);
        d.resources.cgroups = Cgroups::detect(&root.join("proc")).map_err(|e| e.to_string());
        (root, d)
    }

    fn read(p: PathBuf) -> String {
        std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .trim()
            .to_string()
    }

    fn limits() -> Limits {
        Limits {
            cpu_weight: Some(50),
            cpu_max_percent: Some(20),
            memory_max: Some(16 << 20),
            memory_soft: None,
            pids_max: Some(32),
            cpuset: Some("0".into()),
        }
    }

    #[test]
    fn v2_a_budget_gets_the_cpu_and_room_for_berth_and_a_leaf_for_berths_processes() {
        let b = "berth-t/web";
        let (root, d) = fixture_daemon(
            "budget-v2",
            &[("", "cgroup2", "rw")],
            &[
                ("cgroup.controllers", "cpuset cpu io memory pids"),
                (&format!("{b}/cpu.weight"), ""),
                (&format!("{b}/cpu.max"), ""),
                (&format!("{b}/memory.max"), ""),
                (&format!("{b}/pids.max"), ""),
                (&format!("{b}/berth/cgroup.procs"), ""),
            ],
        );
        let cg = root.join("sys/fs/cgroup");
        let leaf = prepare_budget(&d, "web", Some(&limits())).unwrap().unwrap();
        assert_eq!(leaf, "berth-t/web/berth");
        assert_eq!(
            helpers_leaf(&d, "web").as_deref(),
            Some("berth-t/web/berth")
        );
        assert!(cg.join("berth-t/web/berth").is_dir());
        assert_eq!(read(cg.join(b).join("cpu.weight")), "50");
        assert_eq!(read(cg.join(b).join("cpu.max")), "20000 100000");
        assert_eq!(
            read(cg.join(b).join("memory.max")),
            // the payload's 16 MiB, 8 MiB for berth's processes, the shim's log ring
            ((24u64 << 20) + (64 << 10)).to_string()
        );
        assert_eq!(read(cg.join(b).join("pids.max")), "48");
        // controllers enabled down to the budget (whose leaves LXC and berth fill); the
        // fixture keeps only the last write, the kernel accumulates
        for dir in ["", "berth-t", b] {
            assert!(
                cg.join(dir).join("cgroup.subtree_control").is_file(),
                "{dir}"
            );
        }
        assert!(
            !cg.join(b).join("berth/cgroup.subtree_control").exists(),
            "a leaf"
        );
        // the payload's counters: its leaf once it exists, the budget for a container
        // started before the budget had leaves
        assert_eq!(payload_cgroup(&d, "web"), b);
        std::fs::create_dir_all(cg.join(b).join("payload")).unwrap();
        assert_eq!(payload_cgroup(&d, "web"), format!("{b}/payload"));
        // reaped deepest first, leaves and all
        assert!(remove_stale_cgroups_fixture(&d, &cg, b));
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// The kernel refuses a write of the budget (here memory.max cannot be written: EISDIR;
    /// on a device, EBUSY or EINVAL): the start is refused as `limit_failed`, naming the
    /// container and its budget, rather than run without its limit.
    #[test]
    fn a_refused_budget_write_refuses_the_start_naming_the_budget() {
        let b = "berth-t/web";
        let (root, d) = fixture_daemon(
            "budget-refused",
            &[("", "cgroup2", "rw")],
            &[
                ("cgroup.controllers", "cpuset cpu io memory pids"),
                (&format!("{b}/cpu.weight"), ""),
                (&format!("{b}/cpu.max"), ""),
                (&format!("{b}/pids.max"), ""),
                (&format!("{b}/berth/cgroup.procs"), ""),
            ],
        );
        let cg = root.join("sys/fs/cgroup");
        std::fs::create_dir_all(cg.join(b).join("memory.max")).unwrap();
        let e = prepare_budget(&d, "web", Some(&limits())).unwrap_err();
        assert_eq!(e.kind, Kind::LimitFailed);
        assert!(
            e.message
                .starts_with("web: cannot set up its cgroup berth-t/web: ")
                && e.message.contains("memory.max"),
            "{}",
            e.message
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// The fixture's files are regular files, which rmdir cannot pass: removed first, as the
    /// kernel's cgroupfs has none to remove.
    fn remove_stale_cgroups_fixture(d: &Daemon, cg: &Path, rel: &str) -> bool {
        fn files_out(p: &Path) {
            for e in std::fs::read_dir(p).unwrap().flatten() {
                if e.file_type().unwrap().is_dir() {
                    files_out(&e.path());
                } else {
                    std::fs::remove_file(e.path()).unwrap();
                }
            }
        }
        files_out(&cg.join(rel));
        let gone = remove_stale_cgroups(d, rel.rsplit('/').next().unwrap());
        gone && !cg.join(rel).exists()
    }

    #[test]
    fn v1_a_budget_in_each_hierarchy_and_a_leaf_in_those_that_count() {
        let b = "berth-t/web";
        let (root, d) = fixture_daemon(
            "budget-v1",
            &[
                ("cpu", "cgroup", "rw,cpu"),
                ("cpuacct", "cgroup", "rw,cpuacct"),
                ("memory", "cgroup", "rw,memory"),
                ("pids", "cgroup", "rw,pids"),
                ("cpuset", "cgroup", "rw,cpuset"),
            ],
            &[
                (&format!("cpu/{b}/cpu.shares"), ""),
                (&format!("cpu/{b}/cpu.cfs_period_us"), ""),
                (&format!("cpu/{b}/cpu.cfs_quota_us"), ""),
                (&format!("memory/{b}/memory.limit_in_bytes"), ""),
                (&format!("pids/{b}/pids.max"), ""),
                (&format!("cpu/{b}/berth/cgroup.procs"), ""),
                (&format!("cpuacct/{b}/berth/cgroup.procs"), ""),
                (&format!("memory/{b}/berth/cgroup.procs"), ""),
                (&format!("pids/{b}/berth/cgroup.procs"), ""),
            ],
        );
        let cg = root.join("sys/fs/cgroup");
        let procs = prepare_budget(&d, "web", Some(&limits())).unwrap().unwrap();
        assert_eq!(procs, "berth-t/web/berth");
        for h in ["cpu", "cpuacct", "memory", "pids"] {
            assert!(cg.join(h).join(b).join("berth").is_dir(), "{h}");
        }
        assert_eq!(read(cg.join("cpu").join(b).join("cpu.shares")), "512");
        assert_eq!(
            read(cg.join("cpu").join(b).join("cpu.cfs_quota_us")),
            "20000"
        );
        assert_eq!(
            read(cg.join("memory").join(b).join("memory.limit_in_bytes")),
            ((24u64 << 20) + (64 << 10)).to_string()
        );
        // (memory.use_hierarchy is written only into a budget made new: not this fixture's)
        assert_eq!(read(cg.join("pids").join(b).join("pids.max")), "48");
        // LXC makes its own cpuset cgroups: berth's budget is not in that hierarchy
        assert!(!cg.join("cpuset").join(b).exists());
        // without limits (a package that asks for none): the budget and the leaf all the same
        std::fs::write(cg.join("pids").join(b).join("pids.max"), "max").unwrap();
        assert!(prepare_budget(&d, "web", None).unwrap().is_some());
        assert_eq!(read(cg.join("pids").join(b).join("pids.max")), "max");
        // a write the kernel refuses names the cgroup and the file
        std::fs::remove_file(cg.join("pids").join(b).join("pids.max")).unwrap();
        let e = prepare_budget(&d, "web", Some(&limits())).unwrap_err();
        assert_eq!(e.kind, Kind::LimitFailed);
        assert!(
            e.message
                .starts_with("web: cannot set up its cgroup berth-t/web: write \"48\" to ")
                && e.message.contains("pids/berth-t/web/pids.max"),
            "{e}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn stale_cgroups_are_found_and_reaped_in_every_hierarchy_deepest_first() {
        let root = std::env::temp_dir().join(format!("berth-cg-{}", std::process::id()));
        let cg = root.join("sys/fs/cgroup");
        for dir in [
            "cpu/berth-t/web/sub",
            "cpu/berth-t/web/berth",
            "cpu/berth-t/web/payload/inner",
            "cpu/berth-t/web/lxc.pivot",
            "memory/berth-t/web",
            "memory/berth-t.monitor/web",
            "memory/berth-t/db",
            "unified/berth-t/web",
            "cpu/other/web",
        ] {
            std::fs::create_dir_all(cg.join(dir)).unwrap();
        }
        let d = daemon(&root);
        assert_eq!(
            cgroup_names(&d).into_iter().collect::<Vec<_>>(),
            vec!["db", "web"]
        );
        remove_stale_cgroups(&d, "web");
        for gone in [
            "cpu/berth-t/web",
            "memory/berth-t/web",
            "memory/berth-t.monitor/web",
            "unified/berth-t/web",
        ] {
            assert!(!cg.join(gone).exists(), "{gone} still there");
        }
        // Another container's, and what is not below berth's parent, stay.
        assert!(cg.join("memory/berth-t/db").is_dir());
        assert!(cg.join("cpu/other/web").is_dir());
        assert_eq!(cgroup_names(&d).into_iter().collect::<Vec<_>>(), vec!["db"]);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
