//! Container plans: what a container's file system and LXC configuration are, computed from
//! the manifest, the device configuration and a few facts about the host. Pure: the daemon
//! writes the result to `<lxcpath>/<name>/config` and mounts what `image_layers` names.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::cgroup::{self, CgroupVersion, Limits};
use crate::config::Config;
use crate::manifest::{Base, Manifest, NetMode, RootfsMode};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlanError {
    #[error("{package}: network mode shared gives the host's network to the package; only packages the repository marks trusted may use it")]
    SharedNeedsTrust { package: String },
    #[error("{package}: {what} contains a line break or NUL; refusing to write it into the LXC configuration")]
    UnsafeValue { package: String, what: String },
    #[error("{package}: rootfs = \"merged\" needs the images of its dependencies: {missing} is not installed")]
    MissingLayer { package: String, missing: String },
}

/// The host directories a `base = "host"` package gets, read-only, when they exist on the host.
pub const HOST_BASE_DIRS: &[&str] = &["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/lib32"];

/// Mount points that must exist in every package image (the root is read-only, so LXC cannot
/// create them). `berth pack` adds them.
pub const SKELETON_DIRS: &[&str] = &["proc", "sys", "dev", "tmp", "run", "data"];

/// Kernel files a container must not read, even as a privileged (trusted) container: kernel
/// memory, keys of every user, timers and slab caches (allocation patterns that help kernel
/// exploits), kernel symbols. Each gets the daemon's empty read-only file bound over it;
/// `optional`, since not every kernel has every file.
pub const MASKED_PROC_FILES: &[&str] = &[
    "proc/kcore",
    "proc/keys",
    "proc/key-users",
    "proc/timer_list",
    "proc/sched_debug",
    "proc/slabinfo",
    "proc/vmallocinfo",
    "proc/pagetypeinfo",
    "proc/kallsyms",
    "proc/latency_stats",
];
/// Directories a container must not read: hardware tables and buses.
pub const MASKED_DIRS: &[&str] = &["proc/acpi", "proc/scsi", "sys/firmware"];
/// Kernel directories of /proc that `proc:mixed` leaves writable to a privileged container:
/// read-only binds of themselves (IRQ affinity, bus and file-system knobs).
pub const READ_ONLY_PROC_DIRS: &[&str] = &["proc/irq", "proc/bus", "proc/fs"];

/// One container to be started.
pub struct ContainerPlan<'a> {
    pub manifest: &'a Manifest,
    pub trusted: bool,
    pub config: &'a Config,
    /// The root file system: the package's image mount, or the merged overlay.
    pub rootfs: PathBuf,
    /// Host base directories that exist on this host (subset of [`HOST_BASE_DIRS`]).
    pub host_base_dirs: Vec<PathBuf>,
    /// The container's cgroup limits, for the cgroup version the host runs (None: no cgroup
    /// controllers found; the container runs unlimited below the group budget, if any).
    pub limits: Option<(CgroupVersion, Limits)>,
}

/// The store images a container's root is made of, top layer first: the package itself, then,
/// for `rootfs = "merged"`, its dependencies in reverse install order (closest first).
/// `image_of` maps a package name to its installed image's sha256.
pub fn image_layers(
    manifest: &Manifest,
    sha256: &str,
    image_of: &dyn Fn(&str) -> Option<String>,
    depends_of: &dyn Fn(&str) -> Vec<String>,
) -> Result<Vec<String>, PlanError> {
    let mut layers = vec![sha256.to_string()];
    if manifest.package.rootfs == RootfsMode::Package {
        return Ok(layers);
    }
    // Depth-first over the dependency graph; a package's dependencies sit below it.
    let mut seen = vec![manifest.package.name.as_str().to_string()];
    let mut stack: Vec<String> = manifest
        .package
        .depends
        .iter()
        .rev()
        .map(|n| n.as_str().to_string())
        .collect();
    while let Some(dep) = stack.pop() {
        if seen.contains(&dep) {
            continue;
        }
        let sha = image_of(&dep).ok_or_else(|| PlanError::MissingLayer {
            package: manifest.package.name.to_string(),
            missing: dep.clone(),
        })?;
        if !layers.contains(&sha) {
            layers.push(sha);
        }
        for d in depends_of(&dep).into_iter().rev() {
            stack.push(d);
        }
        seen.push(dep);
    }
    Ok(layers)
}

fn check_value(package: &str, what: &str, value: &str) -> Result<(), PlanError> {
    if value.contains(['\n', '\r', '\0']) {
        return Err(PlanError::UnsafeValue {
            package: package.to_string(),
            what: what.to_string(),
        });
    }
    Ok(())
}

/// The LXC configuration of a container, one `key = value` per line.
pub fn lxc_config(plan: &ContainerPlan) -> Result<String, PlanError> {
    let m = plan.manifest;
    let name = m.package.name.as_str();
    let mut lines = Lines {
        out: String::new(),
        package: name,
    };
    let _ = writeln!(
        lines.out,
        "# generated by berth for {}@{}; rewritten at every start",
        name, m.package.version
    );
    lxc_root_and_network(&mut lines, plan)?;
    lxc_mounts(&mut lines, plan)?;
    lxc_init(&mut lines, m)?;
    lxc_cgroups_and_log(&mut lines, plan)?;
    Ok(lines.out)
}

/// An LXC configuration as it is written: `key = value` lines, each value checked first.
struct Lines<'a> {
    out: String,
    package: &'a str,
}

impl Lines<'_> {
    fn line(&mut self, k: &str, v: &str) -> Result<(), PlanError> {
        check_value(self.package, k, v)?;
        let _ = writeln!(self.out, "{k} = {v}");
        Ok(())
    }
}

/// The container's name, its read-only root and its network.
fn lxc_root_and_network(lines: &mut Lines, plan: &ContainerPlan) -> Result<(), PlanError> {
    let m = plan.manifest;
    let name = m.package.name.as_str();
    let mut line = |k: &str, v: &str| lines.line(k, v);
    line("lxc.uts.name", name)?;
    line("lxc.rootfs.path", &format!("dir:{}", plan.rootfs.display()))?;
    // The root is a read-only squashfs (or an overlay with no upper layer): nothing a package
    // ships can be written, and LXC must not try to manage (or destroy) it.
    line("lxc.rootfs.options", "ro")?;
    line("lxc.rootfs.managed", "0")?;
    match m.network.mode {
        NetMode::None => {
            line("lxc.net.0.type", "empty")?;
            // Loopback up: LXC leaves it down in a user namespace unless told.
            line("lxc.net.0.flags", "up")?
        }
        NetMode::Shared => {
            if !plan.trusted {
                return Err(PlanError::SharedNeedsTrust {
                    package: name.to_string(),
                });
            }
            line("lxc.net.0.type", "none")?
        }
        // The daemon appends the lxc.net.0.* keys of the container's link (net::lxc_isolated,
        // net::lxc_macvlan) once it has its address; without them LXC gives the container an
        // empty network namespace, so a forgotten link is no network, never the host's.
        NetMode::Isolated | NetMode::Macvlan => {}
    }
    Ok(())
}

/// /proc and /sys with their masks, the devices, the tmpfs mounts, the container API's
/// directory, /data and the host's base directories.
fn lxc_mounts(lines: &mut Lines, plan: &ContainerPlan) -> Result<(), PlanError> {
    let m = plan.manifest;
    let name = m.package.name.as_str();
    let cfg = plan.config;
    let paths = &cfg.paths;
    let mut line = |k: &str, v: &str| lines.line(k, v);
    line("lxc.mount.auto", "proc:mixed sys:ro")?;
    // After proc and sys: LXC mounts lxc.mount.auto before lxc.mount.entry.
    for (src, targets) in [
        (paths.mask_file(), MASKED_PROC_FILES),
        (paths.mask_dir(), MASKED_DIRS),
    ] {
        for t in targets {
            line(
                "lxc.mount.entry",
                &format!("{} {t} none bind,ro,optional 0 0", src.display()),
            )?;
        }
    }
    for d in READ_ONLY_PROC_DIRS {
        line(
            "lxc.mount.entry",
            &format!("/{d} {d} none bind,ro,nosuid,nodev,noexec,optional 0 0"),
        )?;
    }
    line("lxc.autodev", "1")?;
    line("lxc.tty.max", "0")?;
    line("lxc.pty.max", "0")?;
    // The payload's output goes to the shim's pipe, not to a console: no pty to leak or flood.
    line("lxc.console.path", "none")?;
    line(
        "lxc.mount.entry",
        &format!(
            "tmpfs tmp tmpfs rw,nosuid,nodev,size={},mode=1777 0 0",
            cfg.tmp_size
        ),
    )?;
    line(
        "lxc.mount.entry",
        &format!(
            "tmpfs run tmpfs rw,nosuid,nodev,size={},mode=755 0 0",
            cfg.run_size
        ),
    )?;
    // The container API: the directory of its socket (the daemon makes it before the start;
    // after a daemon restart a new socket in it is seen through the same bind). Read-only
    // and root's: the payload can connect to its socket, never store anything in the host's
    // run directory.
    line(
        "lxc.mount.entry",
        &format!(
            "{} run/berth none bind,ro,create=dir,nosuid,nodev,noexec 0 0",
            paths.api_dir(name).display()
        ),
    )?;
    // The source is the daemon's nosuid,nodev bind of the data directory: LXC 5.0 does not
    // remount a rw bind to apply flags, but a bind inherits the flags of the mount it copies.
    line(
        "lxc.mount.entry",
        &format!(
            "{} data none bind,rw,nosuid,nodev 0 0",
            paths.data_mount(name).display()
        ),
    )?;
    if m.package.base == Base::Host {
        for dir in &plan.host_base_dirs {
            let rel = dir.strip_prefix("/").unwrap_or(dir);
            line(
                "lxc.mount.entry",
                &format!(
                    "{} {} none ro,bind,nosuid,nodev 0 0",
                    dir.display(),
                    rel.display()
                ),
            )?;
        }
    }
    Ok(())
}

/// Who the init runs as, where, and its environment.
fn lxc_init(lines: &mut Lines, m: &Manifest) -> Result<(), PlanError> {
    let name = m.package.name.as_str();
    let mut line = |k: &str, v: &str| lines.line(k, v);
    line("lxc.init.uid", &m.entrypoint.user.to_string())?;
    line("lxc.init.gid", &m.entrypoint.group.to_string())?;
    line("lxc.init.cwd", &m.entrypoint.workdir)?;
    line("lxc.no_new_privs", "1")?;
    // Capabilities, seccomp, devices and the id map: security::lxc_lines, appended by the
    // daemon.
    let mut env: Vec<(String, String)> = vec![
        (
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ),
        ("HOME".into(), "/data".into()),
        ("BERTH_CONTAINER".into(), name.to_string()),
    ];
    for (k, v) in &m.entrypoint.env {
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    for (k, v) in env {
        line("lxc.environment", &format!("{k}={v}"))?;
    }
    Ok(())
}

/// The payload's and the monitor's cgroups, the payload's limits, and LXC's log.
fn lxc_cgroups_and_log(lines: &mut Lines, plan: &ContainerPlan) -> Result<(), PlanError> {
    let name = plan.manifest.package.name.as_str();
    let cfg = plan.config;
    let mut line = |k: &str, v: &str| lines.line(k, v);
    // The payload and its monitor in leaves of the container's budget (which the daemon
    // makes and limits before the shim, itself in the budget, starts the monitor), so that
    // the monitor's work is the container's. Where LXC parks the monitor as it tears down
    // (lxc.cgroup.dir.monitor.pivot, the budget's lxc.pivot) the monitor tells liblxc itself:
    // LXC 4 has no such key and refuses a configuration that names it.
    let cg = cgroup::ContainerCgroups::of(&cfg.cgroup_parent, name);
    line("lxc.cgroup.dir.container", &cg.payload)?;
    line("lxc.cgroup.dir.monitor", &cg.monitor)?;
    // LXC writes the payload's own limits into its leaf before its init runs: the payload
    // never runs unlimited, not even for an instant (its CPU quota is on the budget, in
    // force before the monitor exists).
    if let Some((version, limits)) = &plan.limits {
        let prefix = match version {
            CgroupVersion::V1 => "lxc.cgroup",
            CgroupVersion::V2 => "lxc.cgroup2",
        };
        for (_, file, value) in cgroup::files(*version, &limits.payload()) {
            line(&format!("{prefix}.{file}"), &value)?;
        }
    }
    line(
        "lxc.log.file",
        &cfg.paths
            .lxc_dir(name)
            .join("lxc.log")
            .display()
            .to_string(),
    )?;
    line("lxc.log.level", "WARN")?;
    Ok(())
}

/// Where a base directory of the host goes inside the container.
pub fn host_base_target(rootfs: &Path, dir: &Path) -> PathBuf {
    rootfs.join(dir.strip_prefix("/").unwrap_or(dir))
}

/// Which of berth's mounts below `run` nothing uses any more, in the order to unmount them:
/// per-container mounts (merged roots in `<run>/rootfs`, /data binds in `<run>/data`, bind
/// anchors in `<run>/binds` and what is staged below them) not in `used` first, deepest
/// first, as they may sit on image mounts, then image mounts (`<run>/mnt`) not in `used`.
/// Anything else below `run` is not berth's to release.
pub fn unused_mounts(
    mounts: &[PathBuf],
    run: &Path,
    used: &std::collections::BTreeSet<PathBuf>,
) -> Vec<PathBuf> {
    let (roots, data, images) = (run.join("rootfs"), run.join("data"), run.join("mnt"));
    let binds = run.join("binds");
    let below = |m: &Path, dir: &Path| m.starts_with(dir) && m != dir;
    let per_container: Vec<&PathBuf> = mounts
        .iter()
        .filter(|m| below(m, &roots) || below(m, &data) || below(m, &binds))
        .collect();
    // Deepest first: a mount on top of another goes before it (or that unmount is EBUSY);
    // equals in their order (no sort: a few mounts, a few levels).
    let depth = |m: &Path| m.components().count();
    let deepest = per_container.iter().map(|m| depth(m)).max().unwrap_or(0);
    let deepest_first = (0..=deepest)
        .rev()
        .flat_map(|n| per_container.iter().copied().filter(move |m| depth(m) == n));
    let image = mounts.iter().filter(|m| below(m, &images));
    deepest_first
        .chain(image)
        .filter(|m| !used.contains(*m))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unused_mounts_go_roots_first_and_nothing_used_or_foreign_goes() {
        let run = Path::new("/run/berth");
        let p = |s: &str| run.join(s);
        let mounts = vec![
            p("mnt/aa"),
            p("mnt/bb"),
            p("rootfs/app"),
            p("data/app"),
            p("data/web"),
            p("mnt/cc"),
            p("shim/web.sock"),
            p("rootfs/app/proc"),
            p("binds/app"),
            p("binds/app/stage/tools"),
            p("binds/web"),
        ];
        let used: std::collections::BTreeSet<PathBuf> =
            [p("mnt/bb"), p("data/web"), p("binds/web")]
                .into_iter()
                .collect();
        assert_eq!(
            unused_mounts(&mounts, run, &used),
            vec![
                p("binds/app/stage/tools"),
                p("rootfs/app/proc"),
                p("rootfs/app"),
                p("data/app"),
                p("binds/app"),
                p("mnt/aa"),
                p("mnt/cc")
            ]
        );
        let all: std::collections::BTreeSet<PathBuf> = mounts.iter().cloned().collect();
        assert!(unused_mounts(&mounts, run, &all).is_empty());
    }

    fn manifest(extra: &str) -> Manifest {
        Manifest::parse(&format!(
            "[package]\nname = \"web\"\nversion = \"1.0\"\n{extra}\n[entrypoint]\nargv = [\"/bin/httpd\", \"-f\"]\nenv = {{ LANG = \"C\", PATH = \"/bin\" }}\nuser = 33\n"
        ))
        .unwrap()
    }

    fn plan<'a>(m: &'a Manifest, cfg: &'a Config) -> ContainerPlan<'a> {
        ContainerPlan {
            manifest: m,
            trusted: false,
            config: cfg,
            rootfs: "/run/berth/mnt/abc".into(),
            host_base_dirs: vec!["/lib".into(), "/usr/lib".into()],
            limits: None,
        }
    }

    #[test]
    fn cgroup_limits_for_either_version() {
        let cfg = Config::parse("", "t").unwrap();
        let m = manifest("");
        let mut p = plan(&m, &cfg);
        assert!(!lxc_config(&p).unwrap().contains("lxc.cgroup.pids"));
        let l = Limits {
            cpu_max_percent: Some(20),
            memory_max: Some(16 << 20),
            pids_max: Some(32),
            ..Limits::default()
        };
        p.limits = Some((CgroupVersion::V1, l.clone()));
        let text = lxc_config(&p).unwrap();
        // CPU is the budget's (written by the daemon), not the payload's
        assert!(!text.contains("lxc.cgroup.cpu."), "{text}");
        assert!(
            text.contains("lxc.cgroup.memory.limit_in_bytes = 16777216\n"),
            "{text}"
        );
        assert!(text.contains("lxc.cgroup.pids.max = 32\n"), "{text}");
        assert!(!text.contains("lxc.cgroup2"));
        p.limits = Some((CgroupVersion::V2, l));
        let text = lxc_config(&p).unwrap();
        assert!(!text.contains("lxc.cgroup2.cpu."), "{text}");
        assert!(
            text.contains("lxc.cgroup2.memory.max = 16777216\n"),
            "{text}"
        );
        assert!(text.contains("lxc.cgroup2.pids.max = 32\n"), "{text}");
        // the payload and its monitor in leaves of the container's budget
        assert!(
            text.contains(
                "lxc.cgroup.dir.container = berth/web/payload\nlxc.cgroup.dir.monitor = berth/web/monitor\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn config_for_a_plain_package() {
        let cfg = Config::parse("", "t").unwrap();
        let m = manifest("");
        let text = lxc_config(&plan(&m, &cfg)).unwrap();
        assert!(text.contains("lxc.rootfs.path = dir:/run/berth/mnt/abc\n"));
        assert!(text.contains("lxc.net.0.type = empty\nlxc.net.0.flags = up\n"));
        assert!(text.contains("lxc.init.uid = 33\n"));
        // kernel files masked and knobs read-only, after proc and sys are mounted
        let auto = text.find("lxc.mount.auto = proc:mixed sys:ro\n").unwrap();
        for want in [
            "lxc.mount.entry = /run/berth/empty proc/slabinfo none bind,ro,optional 0 0\n",
            "lxc.mount.entry = /run/berth/empty proc/keys none bind,ro,optional 0 0\n",
            "lxc.mount.entry = /run/berth/empty.d sys/firmware none bind,ro,optional 0 0\n",
            "lxc.mount.entry = /proc/irq proc/irq none bind,ro,nosuid,nodev,noexec,optional 0 0\n",
        ] {
            let at = text.find(want).unwrap_or_else(|| panic!("{want}{text}"));
            assert!(at > auto, "{want} before lxc.mount.auto");
        }
        assert!(text.contains("lxc.environment = PATH=/bin\n"), "{text}");
        assert_eq!(text.matches("PATH=").count(), 1);
        assert!(text.contains("lxc.environment = LANG=C\n"));
        assert!(text.contains(
            "lxc.mount.entry = /run/berth/data/web data none bind,rw,nosuid,nodev 0 0\n"
        ));
        // the container API's socket directory, read-only, after the /run tmpfs it sits in
        let api = "lxc.mount.entry = /run/berth/api/web run/berth none bind,ro,create=dir,nosuid,nodev,noexec 0 0\n";
        let run = text.find("tmpfs run tmpfs").unwrap();
        assert!(text.find(api).is_some_and(|i| i > run), "{text}");
        assert!(text.contains("lxc.cgroup.dir.container = berth/web/payload\n"));
        assert!(text.contains("lxc.no_new_privs = 1\n"));
        assert!(!text.contains("lxc.hook"), "{text}");
        assert!(!text.contains("lxc.cap."), "{text}");
        // base = none: no host directories
        assert!(!text.contains("/usr/lib usr/lib"));
        for l in text.lines() {
            assert!(l.starts_with("lxc.") || l.starts_with('#'), "{l}");
        }
    }

    #[test]
    fn host_base_binds_read_only() {
        let cfg = Config::parse("", "t").unwrap();
        let m = manifest("base = \"host\"");
        let text = lxc_config(&plan(&m, &cfg)).unwrap();
        assert!(text.contains("lxc.mount.entry = /usr/lib usr/lib none ro,bind,nosuid,nodev 0 0\n"));
        assert!(text.contains("lxc.mount.entry = /lib lib none ro,bind,nosuid,nodev 0 0\n"));
    }

    #[test]
    fn network_modes() {
        let cfg = Config::parse("", "t").unwrap();
        let m = manifest("[network]\nmode = \"shared\"");
        // The manifest's [network] table follows [package]: rebuild in the right order.
        let _ = m;
        let m = Manifest::parse(
            "[package]\nname = \"web\"\nversion = \"1\"\n[entrypoint]\nargv = [\"/x\"]\n[network]\nmode = \"shared\"\n",
        )
        .unwrap();
        let mut p = plan(&m, &cfg);
        assert_eq!(
            lxc_config(&p).unwrap_err(),
            PlanError::SharedNeedsTrust {
                package: "web".into()
            }
        );
        p.trusted = true;
        assert!(lxc_config(&p).unwrap().contains("lxc.net.0.type = none\n"));
        let m = Manifest::parse(
            "[package]\nname = \"web\"\nversion = \"1\"\n[entrypoint]\nargv = [\"/x\"]\n[network]\nmode = \"macvlan\"\n",
        )
        .unwrap();
        let text = lxc_config(&plan(&m, &cfg)).unwrap();
        assert!(!text.contains("lxc.net.0"), "{text}");
    }

    #[test]
    fn refuses_line_breaks() {
        let cfg = Config::parse("", "t").unwrap();
        let m = manifest("");
        let mut p = plan(&m, &cfg);
        p.rootfs = "/x\nlxc.cap.keep = all".into();
        assert!(matches!(lxc_config(&p), Err(PlanError::UnsafeValue { .. })));
    }

    #[test]
    fn layers_of_a_merged_tree() {
        let m = Manifest::parse(
            "[package]\nname = \"app\"\nversion = \"1\"\ndepends = [\"py\", \"ssl\"]\nrootfs = \"merged\"\n[entrypoint]\nargv = [\"/x\"]\n",
        )
        .unwrap();
        let image_of = |n: &str| match n {
            "py" => Some("p".to_string()),
            "ssl" => Some("s".to_string()),
            "libc" => Some("c".to_string()),
            _ => None,
        };
        let deps = |n: &str| match n {
            "py" => vec!["libc".to_string()],
            "ssl" => vec!["libc".to_string()],
            _ => vec![],
        };
        assert_eq!(
            image_layers(&m, "a", &image_of, &deps).unwrap(),
            vec!["a", "p", "c", "s"]
        );
        let none = |_: &str| None;
        assert!(matches!(
            image_layers(&m, "a", &none, &deps),
            Err(PlanError::MissingLayer { .. })
        ));
        // rootfs = package: just the package
        let m = manifest("");
        assert_eq!(image_layers(&m, "a", &none, &deps).unwrap(), vec!["a"]);
    }
}
