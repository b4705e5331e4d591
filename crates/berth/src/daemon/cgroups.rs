//! The host's cgroup layout, the group budget, and the reaping of stale container cgroups.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use berth_core::cgroup::{self as cg, CgroupVersion, Host};
use berth_sys::cgroupfs::{self, Cgroups};

use crate::daemon::context::{Daemon, Resources, Roots};

/// LXC refuses to start when the container's cgroup already exists (a crash may leave one),
/// and a monitor killed before its clean-up leaves them behind: removes the cgroups of
/// container `name` (`<parent>/<name>` and `<parent>.monitor/<name>`) in every hierarchy,
/// deepest first. Only empty cgroups can go: a running container's stay.
pub(crate) fn remove_stale_cgroups(d: &Daemon, name: &str) {
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
    for parent in parents(d) {
        for h in hierarchies(d) {
            let p = h.join(&parent).join(name);
            if p.is_dir() {
                rmdir_tree(&p);
            }
        }
    }
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
    std::thread::Builder::new()
        .name("warm-moves".into())
        .stack_size(64 * 1024)
        .spawn(move || {
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
        })
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

/// berth's parent cgroup and its monitors' parent.
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

pub(crate) fn container_cgroup(d: &Daemon, name: &str) -> String {
    format!("{}/{name}", d.cfg.cgroup_parent)
}

/// The host's cgroup version, if it has cgroups berth can use.
pub(crate) fn cgroup_version(d: &Daemon) -> Option<CgroupVersion> {
    d.resources.cgroups.as_ref().ok().map(core_version)
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

    #[test]
    fn stale_cgroups_are_found_and_reaped_in_every_hierarchy_deepest_first() {
        let root = std::env::temp_dir().join(format!("berth-cg-{}", std::process::id()));
        let cg = root.join("sys/fs/cgroup");
        for dir in [
            "cpu/berth-t/web/sub",
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
