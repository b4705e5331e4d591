//! `berth check`: which kernel features berth uses are present, like `lxc-checkconfig`.
//!
//! Everything is read below [`Roots`] (so tests run on fixture trees); the few probes that
//! cannot be read from files (liblxc's version, tools on PATH, the pidfd and mount API
//! syscalls) are gathered in [`Probes`]. The group [`NEWER`] lists the interfaces newer
//! than Linux 4.14 that berth uses where it finds them, each with its fallback
//! ([`fallbacks`]: the ones in use; docs/kernels.md).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::mount::{parse_mountinfo, MountInfo};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Present,
    Missing,
    /// Could not be determined (e.g. no kernel config readable).
    Unknown,
}

impl Status {
    pub fn as_str(&self) -> &'static str {
        match self {
            Status::Present => "present",
            Status::Missing => "missing",
            Status::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feature {
    pub name: &'static str,
    pub group: &'static str,
    pub status: Status,
    /// berth cannot run containers without it.
    pub required: bool,
    pub detail: String,
}

/// Where the kernel's views are mounted; tests point these at fixture trees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    pub proc: PathBuf,
    pub sys: PathBuf,
    pub dev: PathBuf,
    pub boot: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Roots {
            proc: "/proc".into(),
            sys: "/sys".into(),
            dev: "/dev".into(),
            boot: "/boot".into(),
        }
    }
}

/// The answers that do not come from files below [`Roots`].
#[derive(Debug, Clone)]
pub struct Probes {
    /// liblxc's version, or why it cannot be loaded (the loader's own words).
    pub lxc_version: Result<String, crate::error::Error>,
    /// libcurl (every http:// and https:// transfer), or why it cannot be loaded.
    pub curl: Result<crate::curl::Version, String>,
    /// The PATH searched for tools (nft, ip, mksquashfs, zcat).
    pub path: Option<OsString>,
    /// Result of the open_tree syscall probe.
    pub open_tree: (Status, String),
    /// Result of the mount_setattr syscall probe.
    pub mount_setattr: (Status, String),
    /// Result of the pidfd_open syscall probe.
    pub pidfd: (Status, String),
    /// Result of the close_range syscall probe.
    pub close_range: (Status, String),
    /// Result of the openat2 syscall probe.
    pub openat2: (Status, String),
    /// The kernel's Landlock ABI version (None: no Landlock).
    pub landlock: Option<u32>,
}

impl Probes {
    /// The real machine: liblxc, `$PATH`, the running kernel.
    pub fn real() -> Probes {
        Probes {
            lxc_version: crate::lxc::version_or_error(),
            curl: crate::curl::version(),
            path: std::env::var_os("PATH"),
            open_tree: probe_open_tree(),
            mount_setattr: probe_mount_setattr(),
            pidfd: probe_pidfd(),
            close_range: probe_close_range(),
            openat2: probe_openat2(),
            landlock: crate::landlock::abi_version(),
        }
    }
}

/// Calls open_tree(2) on an invalid fd with an empty path: EBADF means the syscall exists
/// (Linux ≥ 5.2), ENOSYS that it does not (or a seccomp filter hides it).
pub fn probe_open_tree() -> (Status, String) {
    let empty = b"\0";
    // SAFETY: open_tree reads only the NUL-terminated path, which lives across the call;
    // with dirfd -1 and AT_EMPTY_PATH it fails with EBADF without creating an fd.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            -1 as libc::c_int,
            empty.as_ptr().cast::<libc::c_char>(),
            libc::AT_EMPTY_PATH as libc::c_uint,
        )
    };
    if rc >= 0 {
        // Cannot happen with these arguments; do not leak whatever we got.
        // SAFETY: rc is an fd the syscall just returned to us and nobody else owns.
        unsafe { libc::close(rc as libc::c_int) };
        return (Status::Present, "open_tree available".into());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EBADF) => (
            Status::Present,
            "open_tree available (Linux ≥ 5.2): hot-binding clones the image's mount".into(),
        ),
        Some(libc::ENOSYS) => (
            Status::Missing,
            "ENOSYS (Linux < 5.2): hot-binding binds the image below the container's bind anchor and lets mount propagation carry it in".into(),
        ),
        Some(libc::EPERM) => (
            Status::Unknown,
            "open_tree: EPERM (blocked by a seccomp filter?)".into(),
        ),
        _ => (Status::Unknown, format!("open_tree probe: unexpected {e}")),
    }
}

/// Calls mount_setattr(2) with a zero-sized attribute: EINVAL means the syscall exists
/// (Linux ≥ 5.12), ENOSYS that it does not.
pub fn probe_mount_setattr() -> (Status, String) {
    let empty = b"\0";
    // SAFETY: mount_setattr reads the NUL-terminated path (alive across the call) and, with
    // size 0, no attribute at all: it fails with EINVAL before touching any mount.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            -1 as libc::c_int,
            empty.as_ptr().cast::<libc::c_char>(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            std::ptr::null_mut::<libc::c_void>(),
            0usize,
        )
    };
    let e = std::io::Error::last_os_error();
    match (rc, e.raw_os_error()) {
        (0.., _) | (_, Some(libc::EINVAL | libc::EBADF)) => (
            Status::Present,
            "mount_setattr available (Linux ≥ 5.12): a hot-bound clone is made read-only before it is attached".into(),
        ),
        (_, Some(libc::ENOSYS)) => (
            Status::Missing,
            "ENOSYS (Linux < 5.12): a hot-bound image is remounted read-only, nosuid, nodev in place once attached".into(),
        ),
        _ => (Status::Unknown, format!("mount_setattr probe: unexpected {e}")),
    }
}

/// Opens a pidfd of this process: the memory guard, the supervisor's watchers, health
/// probes and the governor use pidfds where the kernel has them (Linux ≥ 5.3).
pub fn probe_pidfd() -> (Status, String) {
    match crate::process::pidfd_open(crate::process::getpid()) {
        Ok(_) => (
            Status::Present,
            "pidfd_open available (Linux ≥ 5.3): the memory guard kills through pidfds".into(),
        ),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => (
            Status::Missing,
            "ENOSYS (kernel < 5.3): the memory guard kills by pid after checking the start time and pid namespace; process ends are seen by reading /proc".into(),
        ),
        Err(e) => (
            Status::Unknown,
            format!("pidfd_open: {e}: the memory guard kills by pid after checking the start time"),
        ),
    }
}

/// Calls close_range(2) on a range no descriptor can be in: 0 means the syscall exists
/// (Linux ≥ 5.9), ENOSYS that it does not. berth never calls it; liblxc does.
pub fn probe_close_range() -> (Status, String) {
    // SAFETY: closes descriptors ~0 .. ~0, which cannot exist: nothing is closed.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, u32::MAX, u32::MAX, 0u32) };
    let e = std::io::Error::last_os_error();
    match (rc, e.raw_os_error()) {
        (0.., _) => (Status::Present, "close_range available (Linux ≥ 5.9)".into()),
        (_, Some(libc::ENOSYS)) => (
            Status::Missing,
            "ENOSYS (Linux < 5.9): berth does not need it, but liblxc 5.0.2 (Debian 12) cannot start a container without it; use a liblxc that falls back to closing descriptors one by one".into(),
        ),
        _ => (Status::Unknown, format!("close_range probe: unexpected {e}")),
    }
}

/// Whether paths in untrusted trees are resolved with openat2 (Linux ≥ 5.6) or walked.
pub fn probe_openat2() -> (Status, String) {
    if crate::tree::openat2_works() {
        (
            Status::Present,
            "openat2 available (Linux ≥ 5.6): paths in untrusted trees are resolved beneath their root in one call".into(),
        )
    } else {
        (
            Status::Missing,
            "ENOSYS (Linux < 5.6): paths in untrusted trees (images being imported, package directories, containers' /data) are walked one component at a time with O_NOFOLLOW".into(),
        )
    }
}

/// The group of the interfaces newer than Linux 4.14 that berth uses where it finds them.
pub const NEWER: &str = "newer kernel interfaces";

/// The fallbacks in use: one line per newer interface this kernel lacks, saying what berth
/// does instead ("pidfd missing: ENOSYS (kernel < 5.3): the memory guard kills by pid …").
pub fn fallbacks(features: &[Feature]) -> Vec<String> {
    features
        .iter()
        .filter(|f| f.group == NEWER && f.status != Status::Present)
        .map(|f| format!("{} {}: {}", f.name, f.status.as_str(), f.detail))
        .collect()
}

/// The checks on the real machine.
pub fn check(roots: &Roots) -> Vec<Feature> {
    check_with(roots, &Probes::real())
}

/// The required features that are not present.
pub fn missing_required(features: &[Feature]) -> Vec<&Feature> {
    features
        .iter()
        .filter(|f| f.required && f.status != Status::Present)
        .collect()
}

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

fn feature(
    group: &'static str,
    name: &'static str,
    required: bool,
    status: Status,
    detail: impl Into<String>,
) -> Feature {
    Feature {
        name,
        group,
        status,
        required,
        detail: detail.into(),
    }
}

fn present(yes: bool) -> Status {
    if yes {
        Status::Present
    } else {
        Status::Missing
    }
}

/// Finds an executable named `tool` in `path`.
/// An executable `tool` in one of `path`'s directories.
pub fn which(path: Option<&OsString>, tool: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = path?;
    std::env::split_paths(path).map(|d| d.join(tool)).find(|p| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    })
}

/// Maps an absolute host path from mountinfo below the `sys` root (for fixture trees).
fn under_sys(roots: &Roots, p: &Path) -> PathBuf {
    match p.strip_prefix("/sys") {
        Ok(rest) => roots.sys.join(rest),
        Err(_) => p.to_path_buf(),
    }
}

fn namespaces(roots: &Roots, out: &mut Vec<Feature>) {
    let ns = roots.proc.join("self/ns");
    for (file, name, required) in [
        ("mnt", "mount namespace", true),
        ("uts", "uts namespace", true),
        ("ipc", "ipc namespace", true),
        ("pid", "pid namespace", true),
        ("net", "network namespace", false),
        ("user", "user namespace", false),
        ("cgroup", "cgroup namespace", false),
    ] {
        let p = ns.join(file);
        let ok = std::fs::symlink_metadata(&p).is_ok();
        let detail = if ok {
            p.display().to_string()
        } else {
            format!(
                "{} missing (CONFIG_{}_NS)",
                p.display(),
                file.to_uppercase()
            )
        };
        out.push(feature("namespaces", name, required, present(ok), detail));
    }

    // Usable user namespaces: what unprivileged containers (the default) need.
    let has_userns = std::fs::symlink_metadata(ns.join("user")).is_ok();
    let max = read(&roots.proc.join("sys/user/max_user_namespaces"))
        .and_then(|s| s.trim().parse::<u64>().ok());
    let unpriv = read(&roots.proc.join("sys/kernel/unprivileged_userns_clone"))
        .map(|s| s.trim().to_string());
    let (status, mut detail) = match (has_userns, max) {
        (false, _) => (Status::Missing, "no user namespace support".to_string()),
        (true, Some(0)) => (
            Status::Missing,
            "user.max_user_namespaces = 0: set it above 0 for unprivileged containers".to_string(),
        ),
        (true, Some(n)) => (Status::Present, format!("max_user_namespaces = {n}")),
        (true, None) => (
            Status::Unknown,
            "cannot read sys/user/max_user_namespaces".to_string(),
        ),
    };
    if let Some(u) = unpriv {
        // Debian's knob restricts non-root only; berth (root) is not affected, but say it.
        detail.push_str(&format!("; kernel.unprivileged_userns_clone = {u}"));
    }
    out.push(feature(
        "namespaces",
        "user namespaces usable",
        false,
        status,
        detail,
    ));
}

/// Controllers of a v1 cgroup mount from its super options ("rw,cpu,cpuacct").
fn v1_controllers(m: &MountInfo, known: &[String]) -> Vec<String> {
    m.super_options
        .split(',')
        .filter(|o| known.iter().any(|k| k == o) || o.starts_with("name="))
        .map(str::to_string)
        .collect()
}

fn cgroups(roots: &Roots, out: &mut Vec<Feature>) {
    let mounts = read(&roots.proc.join("self/mountinfo"))
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default();
    // <proc>/cgroups: "#subsys_name hierarchy num_cgroups enabled"
    let enabled: Vec<String> = read(&roots.proc.join("cgroups"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4 && f[3] == "1").then(|| f[0].to_string())
        })
        .collect();

    let v1: Vec<(Vec<String>, &MountInfo)> = mounts
        .iter()
        .filter(|m| m.fs_type == "cgroup")
        .map(|m| (v1_controllers(m, &enabled), m))
        .collect();
    let v2 = mounts.iter().find(|m| m.fs_type == "cgroup2");
    let v2_controllers: Vec<String> = v2
        .and_then(|m| read(&under_sys(roots, &m.mount_point).join("cgroup.controllers")))
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default();

    let v1_detail = v1
        .iter()
        .map(|(c, m)| format!("{} at {}", c.join(","), m.mount_point.display()))
        .collect::<Vec<_>>()
        .join("; ");
    out.push(feature(
        "cgroups",
        "cgroup v1",
        false,
        present(!v1.is_empty()),
        if v1.is_empty() {
            "no cgroup v1 hierarchy mounted".to_string()
        } else {
            v1_detail
        },
    ));
    let v2_detail = match v2 {
        Some(m) => format!(
            "at {} (controllers: {})",
            m.mount_point.display(),
            if v2_controllers.is_empty() {
                "none".to_string()
            } else {
                v2_controllers.join(" ")
            }
        ),
        None => "no cgroup2 mount".to_string(),
    };
    out.push(feature(
        "cgroups",
        "cgroup v2",
        false,
        present(v2.is_some()),
        v2_detail,
    ));

    let layout = match (!v1.is_empty(), v2.is_some()) {
        (true, true) => "hybrid: cgroup v1 controllers plus a cgroup2 mount",
        (true, false) => "legacy: cgroup v1 only",
        (false, true) => "unified: cgroup v2 only",
        (false, false) => "no cgroup hierarchy mounted: mount cgroup v1 controllers or cgroup2",
    };
    out.push(feature(
        "cgroups",
        "cgroup hierarchy",
        true,
        present(!v1.is_empty() || v2.is_some()),
        layout,
    ));

    // Every cgroup move takes one kernel lock (cgroup_threadgroup_rwsem): the first after a
    // quiet spell waits for an RCU grace period unless the kernel favours dynamic changes.
    // LXC's monitor moves itself on every start (docs/benchmarks/README.md, "The start path").
    let dynmods = mounts
        .iter()
        .filter(|m| m.fs_type == "cgroup" || m.fs_type == "cgroup2")
        .any(|m| m.super_options.split(',').any(|o| o == "favordynmods"));
    if !v1.is_empty() || v2.is_some() {
        out.push(feature(
            "cgroups",
            "fast cgroup moves",
            false,
            present(dynmods),
            if dynmods {
                "favordynmods: no cgroup move waits for an RCU grace period".to_string()
            } else {
                "every container start waits once for an RCU grace period (several ms, overlapped by berth): mount cgroups with -o favordynmods (Linux ≥ 6.0)".to_string()
            },
        ));
    }

    for (ctrl, name) in [
        ("cpu", "cpu controller"),
        ("memory", "memory controller"),
        ("pids", "pids controller"),
    ] {
        let in_v1 = v1.iter().find(|(c, _)| c.iter().any(|x| x == ctrl));
        let in_v2 = v2_controllers.iter().any(|x| x == ctrl);
        let (status, detail) = match (in_v1, in_v2) {
            (Some((_, m)), _) => (
                Status::Present,
                format!("v1 at {}", m.mount_point.display()),
            ),
            (None, true) => (Status::Present, "v2".to_string()),
            (None, false) if enabled.iter().any(|e| e == ctrl) => (
                Status::Missing,
                format!("{ctrl} is enabled in the kernel but not mounted"),
            ),
            (None, false) => (
                Status::Missing,
                format!("{ctrl} controller not available: quotas on it are not enforced"),
            ),
        };
        out.push(feature("cgroups", name, false, status, detail));
        if ctrl == "memory" {
            let kmem = in_v1.map(|(_, m)| {
                under_sys(roots, &m.mount_point)
                    .join("memory.kmem.usage_in_bytes")
                    .exists()
            });
            let (yes, detail) = kmem_accounting(roots, kmem, in_v2);
            out.push(feature(
                "cgroups",
                "kmem accounting",
                false,
                present(yes),
                detail,
            ));
        }
    }
}

/// Whether a container's kernel memory (slab: dentries, inodes, sockets; kernel stacks) is
/// charged to its memory limit, so that flooding the kernel hits its own limit; and why.
/// `v1`: the memory controller on v1, and whether its groups have memory.kmem.*; `v2`: on v2.
/// Not in force: a kernel booted with `cgroup.memory=nokmem`, and v1 before Linux 4.6, which
/// charges a group only once its memory.kmem.limit_in_bytes is set, before the group has a
/// task (berth sets none).
/// `cgroup.memory=nosocket` leaves sockets' buffers out.
fn kmem_accounting(roots: &Roots, v1: Option<bool>, v2: bool) -> (bool, String) {
    let cmdline = read(&roots.proc.join("cmdline")).unwrap_or_default();
    let off = |what: &str| {
        cmdline
            .split_whitespace()
            .filter_map(|w| w.strip_prefix("cgroup.memory="))
            .any(|v| v.split(',').any(|x| x == what))
    };
    let release = read(&roots.proc.join("sys/kernel/osrelease")).unwrap_or_default();
    let mut n = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|x| x.parse::<u32>().ok());
    let before_4_6 =
        matches!((n.next(), n.next()), (Some(Some(a)), Some(Some(b))) if (a, b) < (4, 6));
    let (yes, mut detail) = match (v1, v2) {
        (Some(true), _) if before_4_6 => (
            false,
            format!(
                "v1 on Linux {} (before 4.6): kernel memory is charged only to groups with memory.kmem.limit_in_bytes set, and berth's have none",
                release.trim()
            ),
        ),
        (Some(true), _) => (true, "v1: memory.kmem.usage_in_bytes".to_string()),
        (Some(false), _) => (false, "v1: no memory.kmem.*".to_string()),
        (None, true) => (true, "v2: memory.stat slab, sock".to_string()),
        (None, false) => return (false, "no memory controller".to_string()),
    };
    if off("nokmem") {
        return (
            false,
            "the kernel was booted with cgroup.memory=nokmem: no slab is charged to a group"
                .to_string(),
        );
    }
    if yes && off("nosocket") {
        detail.push_str("; sockets' buffers are not charged (cgroup.memory=nosocket)");
    }
    (yes, detail)
}

fn filesystems(roots: &Roots, out: &mut Vec<Feature>) {
    let p = roots.proc.join("filesystems");
    let text = read(&p);
    for (fs, required) in [
        ("squashfs", true),
        ("overlay", false),
        ("tmpfs", false),
        ("proc", false),
        ("sysfs", false),
        ("devpts", false),
    ] {
        let f = match &text {
            None => feature(
                "file systems",
                fs,
                required,
                Status::Unknown,
                format!("cannot read {}", p.display()),
            ),
            Some(t) => {
                let ok = t.lines().any(|l| l.split_whitespace().last() == Some(fs));
                let detail = if ok {
                    "registered".to_string()
                } else {
                    format!(
                        "not in {} (if built as a module: modprobe {fs})",
                        p.display()
                    )
                };
                feature("file systems", fs, required, present(ok), detail)
            }
        };
        out.push(f);
    }
}

fn loop_devices(roots: &Roots, out: &mut Vec<Feature>) {
    let ctl = roots.dev.join("loop-control");
    let ok = std::fs::symlink_metadata(&ctl).is_ok();
    let mut detail = if ok {
        ctl.display().to_string()
    } else {
        format!(
            "{} missing (CONFIG_BLK_DEV_LOOP; modprobe loop)",
            ctl.display()
        )
    };
    if let Some(m) = read(&roots.sys.join("module/loop/parameters/max_loop")) {
        detail.push_str(&format!("; max_loop = {}", m.trim()));
    }
    out.push(feature("loop", "loop devices", true, present(ok), detail));
}

fn security(roots: &Roots, out: &mut Vec<Feature>) {
    let status = read(&roots.proc.join("self/status")).unwrap_or_default();
    let line = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
    };
    let seccomp = line("Seccomp:");
    out.push(feature(
        "security",
        "seccomp",
        false,
        present(seccomp.is_some()),
        match &seccomp {
            Some(m) => format!("mode of this process: {m}"),
            None => "no Seccomp: line in self/status (CONFIG_SECCOMP)".to_string(),
        },
    ));
    let actions = read(&roots.proc.join("sys/kernel/seccomp/actions_avail"));
    out.push(feature(
        "security",
        "seccomp filter actions",
        false,
        if actions.is_some() {
            Status::Present
        } else if seccomp.is_some() {
            Status::Unknown
        } else {
            Status::Missing
        },
        match &actions {
            Some(a) => a.trim().to_string(),
            None => "sys/kernel/seccomp/actions_avail not readable (Linux < 4.14?)".to_string(),
        },
    ));
    let nnp = line("NoNewPrivs:");
    out.push(feature(
        "security",
        "no_new_privs",
        false,
        present(nnp.is_some()),
        if nnp.is_some() {
            "available"
        } else {
            "no NoNewPrivs: line in self/status (Linux < 4.10 reports it there; needs ≥ 3.5)"
        },
    ));
    let aa = read(&roots.sys.join("module/apparmor/parameters/enabled"));
    let enabled = aa.as_deref().map(str::trim) == Some("Y");
    let fs = roots.sys.join("kernel/security/apparmor");
    // Enabled without securityfs: no profile can be loaded and liblxc refuses every start
    // ("Incomplete AppArmor support"), so then it is required.
    let usable = !enabled || fs.exists();
    out.push(feature(
        "security",
        "apparmor",
        !usable,
        present(enabled && usable),
        match aa {
            Some(_) if !usable => format!(
                "enabled = Y, but {} is missing (securityfs not mounted): no container can start; \
                 mount -t securityfs securityfs /sys/kernel/security, or boot with apparmor=0",
                fs.display()
            ),
            Some(v) => format!("enabled = {}", v.trim()),
            None => "not built in: no AppArmor profiles".to_string(),
        },
    ));
}

fn pressure(roots: &Roots, out: &mut Vec<Feature>) {
    let p = roots.proc.join("pressure/memory");
    let (status, detail) = match std::fs::read_to_string(&p) {
        Ok(_) => (
            Status::Present,
            format!("{}: the memory guard sleeps on a PSI trigger", p.display()),
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (
            Status::Missing,
            "no PSI (Linux < 4.20 or CONFIG_PSI off): the memory guard reads MemAvailable every [guard] interval; crash reports carry no pressure files".to_string(),
        ),
        Err(e) => (
            Status::Missing,
            format!("{}: {e} (PSI disabled? boot with psi=1): the memory guard reads MemAvailable every [guard] interval", p.display()),
        ),
    };
    out.push(feature(NEWER, "PSI memory", false, status, detail));
}

/// The kernel configuration text: `<boot>/config-<release>`, else `<proc>/config.gz` through
/// zcat. Returns where it came from.
fn kernel_config(
    roots: &Roots,
    probes: &Probes,
    release: Option<&str>,
) -> Option<(String, String)> {
    if let Some(r) = release {
        let p = roots.boot.join(format!("config-{r}"));
        if let Some(t) = read(&p) {
            return Some((t, p.display().to_string()));
        }
    }
    let gz = roots.proc.join("config.gz");
    if !gz.exists() {
        return None;
    }
    let zcat = which(probes.path.as_ref(), "zcat")?;
    let out = std::process::Command::new(zcat)
        .arg(&gz)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some((
        String::from_utf8_lossy(&out.stdout).into_owned(),
        gz.display().to_string(),
    ))
}

fn kconfig(roots: &Roots, probes: &Probes, release: Option<&str>, out: &mut Vec<Feature>) {
    let cfg = kernel_config(roots, probes, release);
    for (opt, name) in [
        ("CONFIG_VETH", "veth"),
        ("CONFIG_BRIDGE", "bridge"),
        ("CONFIG_MACVLAN", "macvlan"),
        ("CONFIG_NF_TABLES", "nf_tables"),
        ("CONFIG_SECCOMP_FILTER", "seccomp filter"),
        ("CONFIG_CGROUP_BPF", "cgroup bpf"),
        // Bandwidth caps: the token bucket, the ingress qdisc and its redirect to an IFB.
        #[cfg(feature = "shape")]
        ("CONFIG_NET_SCH_TBF", "tbf shaper (bandwidth caps)"),
        #[cfg(feature = "shape")]
        ("CONFIG_NET_SCH_INGRESS", "ingress qdisc (egress caps)"),
        #[cfg(feature = "shape")]
        ("CONFIG_NET_CLS_U32", "u32 classifier (egress caps)"),
        #[cfg(feature = "shape")]
        ("CONFIG_NET_ACT_MIRRED", "mirred action (egress caps)"),
        #[cfg(feature = "shape")]
        ("CONFIG_IFB", "ifb (egress caps)"),
        // The line governor ([network] uplink): HTB's classes on the uplink, filled by nft.
        #[cfg(feature = "shape")]
        ("CONFIG_NET_SCH_HTB", "htb shaper (the line governor)"),
    ] {
        let f = match &cfg {
            None => feature(
                "kernel config",
                name,
                false,
                Status::Unknown,
                format!(
                    "{opt}: no kernel config readable ({}/config.gz needs zcat, or {}/config-<release>)",
                    roots.proc.display(),
                    roots.boot.display()
                ),
            ),
            Some((text, src)) => {
                let value = text.lines().find_map(|l| {
                    l.strip_prefix(opt)
                        .and_then(|r| r.strip_prefix('='))
                        .map(str::to_string)
                });
                match value.as_deref() {
                    Some("y") => feature("kernel config", name, false, Status::Present, format!("{opt}=y ({src})")),
                    Some("m") => feature(
                        "kernel config",
                        name,
                        false,
                        Status::Present,
                        format!("{opt}=m, a module ({src})"),
                    ),
                    _ => feature(
                        "kernel config",
                        name,
                        false,
                        Status::Missing,
                        format!("{opt} is not set ({src})"),
                    ),
                }
            }
        };
        out.push(f);
    }
}

fn tools(probes: &Probes, out: &mut Vec<Feature>) {
    out.push(match &probes.lxc_version {
        Ok(v) => feature(
            "tools",
            "liblxc",
            true,
            Status::Present,
            format!("version {v}"),
        ),
        Err(e) => feature("tools", "liblxc", true, Status::Missing, e.clone()),
    });
    out.push(match &probes.curl {
        Ok(v) => feature("tools", "libcurl", false, Status::Present, curl_detail(v)),
        Err(e) => feature("tools", "libcurl", false, Status::Missing, e.clone()),
    });
    for (tool, why) in [
        ("nft", "network isolation rules"),
        ("ip", "network setup"),
        #[cfg(feature = "shape")]
        ("tc", "bandwidth caps"),
        ("mksquashfs", "building packages on the device"),
        (
            "zstd",
            "delta images: without it, upgrades fetch whole images",
        ),
    ] {
        let found = which(probes.path.as_ref(), tool);
        out.push(feature(
            "tools",
            tool,
            false,
            present(found.is_some()),
            match found {
                Some(p) => p.display().to_string(),
                None => format!("not on PATH (needed for {why})"),
            },
        ));
    }
}

/// libcurl's version and what it can do: the TLS library decides whether https://
/// repositories and fleet servers are reachable.
fn curl_detail(v: &crate::curl::Version) -> String {
    let mut d = format!("version {}", v.version);
    match &v.tls {
        Some(tls) if v.speaks("https") => d.push_str(&format!(", TLS {tls}")),
        _ => d.push_str(", no TLS: https:// unavailable"),
    }
    if !v.speaks("http") {
        d.push_str(", no HTTP: http:// unavailable");
    }
    for (has, what) in [
        (v.ipv6, "IPv6"),
        (v.async_dns, "asynchronous DNS"),
        (v.https_proxy, "HTTPS proxy"),
    ] {
        if has {
            d.push_str(", ");
            d.push_str(what);
        }
    }
    if !v.threadsafe {
        d.push_str(", its start not thread-safe (before 7.84)");
    }
    d
}

/// [`check`] with the non-file probes given.
pub fn check_with(roots: &Roots, probes: &Probes) -> Vec<Feature> {
    let mut out = Vec::new();
    let release = read(&roots.proc.join("sys/kernel/osrelease")).map(|s| s.trim().to_string());
    out.push(feature(
        "kernel",
        "kernel release",
        false,
        if release.is_some() {
            Status::Present
        } else {
            Status::Unknown
        },
        release.clone().unwrap_or_else(|| "unknown".to_string()),
    ));
    namespaces(roots, &mut out);
    cgroups(roots, &mut out);
    filesystems(roots, &mut out);
    loop_devices(roots, &mut out);
    security(roots, &mut out);
    kconfig(roots, probes, release.as_deref(), &mut out);
    tools(probes, &mut out);
    out.push(feature(
        NEWER,
        "pidfd",
        false,
        probes.pidfd.0,
        probes.pidfd.1.clone(),
    ));
    pressure(roots, &mut out);
    out.push(feature(
        NEWER,
        "open_tree",
        false,
        probes.open_tree.0,
        probes.open_tree.1.clone(),
    ));
    out.push(feature(
        NEWER,
        "mount_setattr",
        false,
        probes.mount_setattr.0,
        probes.mount_setattr.1.clone(),
    ));
    out.push(feature(
        NEWER,
        "close_range",
        false,
        probes.close_range.0,
        probes.close_range.1.clone(),
    ));
    out.push(feature(
        NEWER,
        "openat2",
        false,
        probes.openat2.0,
        probes.openat2.1.clone(),
    ));
    protections(roots, &mut out);
    let scoped = probes
        .landlock
        .is_some_and(|v| v >= crate::landlock::SCOPE_ABI);
    out.push(feature(
        "protections",
        "shared network scoping",
        false,
        present(scoped),
        match probes.landlock {
            _ if scoped => "Landlock scopes abstract sockets: a shared-network container reaches no other container's LXC command socket".to_string(),
            Some(v) => format!("Landlock ABI {v} (scoping needs ABI {}, Linux 6.12): shared-network containers start only with [security] shared_network = \"unscoped\"", crate::landlock::SCOPE_ABI),
            None => "no Landlock: shared-network containers start only with [security] shared_network = \"unscoped\"".to_string(),
        },
    ));
    out
}

/// What berth puts in force for containers on this kernel, from the features found above
/// (docs/security.md).
fn protections(roots: &Roots, out: &mut Vec<Feature>) {
    let is = |name: &str| {
        out.iter()
            .any(|f| f.name == name && f.status == Status::Present)
    };
    let userns = is("user namespaces usable");
    let seccomp = is("seccomp filter actions") || is("seccomp filter");
    let nnp = is("no_new_privs");
    let v2 = is("cgroup v2") && is("cgroup bpf");
    let aa = is("apparmor");
    let v1_devices = read(&roots.proc.join("self/mountinfo")).is_some_and(|t| {
        parse_mountinfo(&t)
            .iter()
            .any(|m| m.fs_type == "cgroup" && m.super_options.split(',').any(|o| o == "devices"))
    });
    let mut add = |name: &'static str, on: bool, yes: &str, no: &str| {
        let detail = if on { yes } else { no }.to_string();
        out.push(feature("protections", name, false, present(on), detail));
    };
    add(
        "unprivileged containers",
        userns,
        "untrusted packages run in their own user namespace",
        "no usable user namespaces: only trusted packages start (privileged); untrusted ones are refused",
    );
    add(
        "seccomp profile",
        seccomp,
        "berth-default-2 loaded into every container",
        "no seccomp filter support: containers run without a syscall filter",
    );
    add(
        "capability bounding set",
        true,
        "a minimal kept set (lxc.cap.keep) plus grants",
        "",
    );
    add(
        "no_new_privs in containers",
        nnp,
        "set for every container",
        "not available on this kernel",
    );
    add(
        "device allowlist",
        v1_devices || v2,
        if v1_devices {
            "cgroup v1 devices controller"
        } else {
            "cgroup v2 BPF device program"
        },
        "no devices controller and no cgroup BPF: device nodes are limited to what is bound in",
    );
    add(
        "apparmor profile",
        aa,
        "a generated profile per container",
        "no AppArmor on this kernel: no profile applied",
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mount::tests::TempDir;

    const V1_MOUNTS: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
";
    const V2_MOUNT_UNIFIED: &str =
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
    const V2_ONLY_MOUNTS: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 23 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate
";
    const CGROUPS: &str = "\
#subsys_name\thierarchy\tnum_cgroups\tenabled
cpu\t1\t5\t1
cpuacct\t1\t5\t1
memory\t4\t21\t1
pids\t8\t5\t1
hugetlb\t0\t5\t0
";
    const FILESYSTEMS: &str = "nodev\tsysfs\nnodev\ttmpfs\nnodev\tproc\nnodev\tcgroup\nnodev\tcgroup2\nnodev\tdevpts\n\text4\n\tsquashfs\nnodev\toverlay\n";

    struct Fx {
        dir: TempDir,
    }

    impl Fx {
        fn new(mountinfo: &str) -> Fx {
            let dir = TempDir::new("check");
            let fx = Fx { dir };
            for ns in ["mnt", "uts", "ipc", "pid", "net", "user", "cgroup"] {
                fx.write(&format!("proc/self/ns/{ns}"), "");
            }
            fx.write("proc/self/mountinfo", mountinfo);
            fx.write("proc/cgroups", CGROUPS);
            fx.write("proc/filesystems", FILESYSTEMS);
            fx.write(
                "proc/self/status",
                "Name:\tberth\nNoNewPrivs:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\n",
            );
            fx.write("proc/sys/user/max_user_namespaces", "63457\n");
            fx.write("proc/sys/kernel/osrelease", "5.10.0-test\n");
            fx.write(
                "proc/sys/kernel/seccomp/actions_avail",
                "kill_process kill_thread trap errno user_notif trace log allow\n",
            );
            fx.write("dev/loop-control", "");
            fx
        }
        fn write(&self, rel: &str, text: &str) {
            let p = self.dir.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        fn roots(&self) -> Roots {
            let d = self.dir.path();
            Roots {
                proc: d.join("proc"),
                sys: d.join("sys"),
                dev: d.join("dev"),
                boot: d.join("boot"),
            }
        }
        fn run(&self) -> Vec<Feature> {
            let probes = Probes {
                lxc_version: Ok("5.0.2".into()),
                curl: Ok(fixture_curl()),
                path: Some(OsString::from(self.dir.path().join("bin"))),
                open_tree: (Status::Present, "fixture".into()),
                mount_setattr: (Status::Present, "fixture".into()),
                pidfd: (Status::Present, "fixture".into()),
                close_range: (Status::Present, "fixture".into()),
                openat2: (Status::Present, "fixture".into()),
                landlock: Some(6),
            };
            check_with(&self.roots(), &probes)
        }
    }

    /// Debian 12's libcurl, as the fixtures' probe finds it.
    fn fixture_curl() -> crate::curl::Version {
        crate::curl::Version {
            version: "7.88.1".into(),
            number: 0x075801,
            tls: Some("OpenSSL/3.0.11".into()),
            protocols: vec!["http".into(), "https".into()],
            ipv6: true,
            async_dns: true,
            https_proxy: true,
            threadsafe: true,
        }
    }

    fn get<'a>(fs: &'a [Feature], name: &str) -> &'a Feature {
        fs.iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no feature {name}"))
    }

    #[test]
    fn v1_only() {
        let fx = Fx::new(V1_MOUNTS);
        let fs = fx.run();
        assert_eq!(get(&fs, "cgroup v1").status, Status::Present);
        assert!(get(&fs, "cgroup v1")
            .detail
            .contains("cpu,cpuacct at /sys/fs/cgroup/cpu,cpuacct"));
        assert!(get(&fs, "cgroup v1").detail.contains("name=systemd"));
        assert_eq!(get(&fs, "cgroup v2").status, Status::Missing);
        let h = get(&fs, "cgroup hierarchy");
        assert_eq!(h.status, Status::Present);
        assert!(h.detail.starts_with("legacy"), "{}", h.detail);
        assert_eq!(get(&fs, "memory controller").status, Status::Present);
        assert_eq!(get(&fs, "pids controller").status, Status::Present);
        assert!(
            missing_required(&fs).is_empty(),
            "{:?}",
            missing_required(&fs)
        );
        // No config anywhere: unknown, not missing.
        assert_eq!(get(&fs, "veth").status, Status::Unknown);
        assert_eq!(get(&fs, "kernel release").detail, "5.10.0-test");
        assert_eq!(get(&fs, "nft").status, Status::Missing);
        #[cfg(feature = "shape")]
        assert!(get(&fs, "tc").detail.contains("needed for bandwidth caps"));
        assert_eq!(
            get(&fs, "libcurl").detail,
            "version 7.88.1, TLS OpenSSL/3.0.11, IPv6, asynchronous DNS, HTTPS proxy"
        );
        let k = get(&fs, "kmem accounting");
        assert_eq!(k.status, Status::Missing);
        assert_eq!(k.detail, "v1: no memory.kmem.*");
        fx.write(
            "sys/fs/cgroup/memory/memory.kmem.usage_in_bytes",
            "259579904\n",
        );
        let k = get(&fx.run(), "kmem accounting").clone();
        assert_eq!(k.status, Status::Present);
        assert_eq!(k.detail, "v1: memory.kmem.usage_in_bytes");
        // v1 before 4.6: charged only where a kmem limit was set
        fx.write("proc/sys/kernel/osrelease", "4.4.198-vendor\n");
        let k = get(&fx.run(), "kmem accounting").clone();
        assert_eq!(k.status, Status::Missing);
        assert!(
            k.detail
                .starts_with("v1 on Linux 4.4.198-vendor (before 4.6)"),
            "{}",
            k.detail
        );
        fx.write("proc/sys/kernel/osrelease", "4.6.0\n");
        assert_eq!(get(&fx.run(), "kmem accounting").status, Status::Present);
        // booted without kmem accounting, or without the sockets'
        fx.write(
            "proc/cmdline",
            "console=ttyS0 cgroup.memory=nosocket,nokmem quiet\n",
        );
        let k = get(&fx.run(), "kmem accounting").clone();
        assert_eq!(k.status, Status::Missing);
        assert!(k.detail.contains("cgroup.memory=nokmem"), "{}", k.detail);
        fx.write("proc/cmdline", "root=/dev/sda1 cgroup.memory=nosocket\n");
        let k = get(&fx.run(), "kmem accounting").clone();
        assert_eq!(k.status, Status::Present);
        assert!(
            k.detail.ends_with("not charged (cgroup.memory=nosocket)"),
            "{}",
            k.detail
        );
        fx.write("proc/cmdline", "root=/dev/sda1 cgroup_memory=nokmem\n");
        assert_eq!(
            get(&fx.run(), "kmem accounting").status,
            Status::Present,
            "only cgroup.memory= is the kernel's parameter"
        );
    }

    #[test]
    fn favordynmods_is_seen_on_any_cgroup_mount() {
        let fx = Fx::new(V2_ONLY_MOUNTS);
        let fs = fx.run();
        let f = get(&fs, "fast cgroup moves");
        assert_eq!(f.status, Status::Missing);
        assert!(f.detail.contains("-o favordynmods"), "{}", f.detail);
        let fx = Fx::new(&V2_ONLY_MOUNTS.replace("rw,nsdelegate", "rw,nsdelegate,favordynmods"));
        assert!(V2_ONLY_MOUNTS.contains("rw,nsdelegate"), "{V2_ONLY_MOUNTS}");
        let fs = fx.run();
        assert_eq!(get(&fs, "fast cgroup moves").status, Status::Present);
        assert!(missing_required(&fs).is_empty());
    }

    #[test]
    fn v2_only() {
        let fx = Fx::new(V2_ONLY_MOUNTS);
        fx.write(
            "sys/fs/cgroup/cgroup.controllers",
            "cpuset cpu io memory pids\n",
        );
        let fs = fx.run();
        assert_eq!(get(&fs, "cgroup v1").status, Status::Missing);
        let v2 = get(&fs, "cgroup v2");
        assert_eq!(v2.status, Status::Present);
        assert_eq!(
            v2.detail,
            "at /sys/fs/cgroup (controllers: cpuset cpu io memory pids)"
        );
        assert!(get(&fs, "cgroup hierarchy").detail.starts_with("unified"));
        assert_eq!(get(&fs, "memory controller").detail, "v2");
        assert!(missing_required(&fs).is_empty());
        let k = get(&fs, "kmem accounting");
        assert_eq!(k.status, Status::Present);
        assert!(k.detail.starts_with("v2: "), "{}", k.detail);
        fx.write("proc/cmdline", "cgroup.memory=nokmem\n");
        let k = get(&fx.run(), "kmem accounting").clone();
        assert_eq!(k.status, Status::Missing, "{}", k.detail);
        fx.write("proc/cmdline", "\n");
        fx.write("sys/fs/cgroup/cgroup.controllers", "cpu pids\n");
        let k = get(&fx.run(), "kmem accounting").clone();
        assert_eq!(
            (k.status, k.detail.as_str()),
            (Status::Missing, "no memory controller")
        );
    }

    #[test]
    fn hybrid() {
        let fx = Fx::new(&format!("{V1_MOUNTS}{V2_MOUNT_UNIFIED}"));
        fx.write("sys/fs/cgroup/unified/cgroup.controllers", "\n");
        let fs = fx.run();
        assert_eq!(get(&fs, "cgroup v1").status, Status::Present);
        assert_eq!(
            get(&fs, "cgroup v2").detail,
            "at /sys/fs/cgroup/unified (controllers: none)"
        );
        let h = get(&fs, "cgroup hierarchy");
        assert!(h.detail.starts_with("hybrid"), "{}", h.detail);
        assert_eq!(
            get(&fs, "cpu controller").detail,
            "v1 at /sys/fs/cgroup/cpu,cpuacct"
        );
    }

    #[test]
    fn no_cgroups_and_missing_squashfs_and_loop() {
        let fx = Fx::new("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n");
        fx.write("proc/filesystems", "nodev\tproc\nnodev\ttmpfs\n");
        std::fs::remove_file(fx.dir.path().join("dev/loop-control")).unwrap();
        let fs = fx.run();
        let sq = get(&fs, "squashfs");
        assert_eq!(sq.status, Status::Missing);
        assert!(sq.required);
        assert!(sq.detail.contains("modprobe squashfs"), "{}", sq.detail);
        assert_eq!(get(&fs, "overlay").status, Status::Missing);
        assert_eq!(get(&fs, "tmpfs").status, Status::Present);
        let missing: Vec<_> = missing_required(&fs).iter().map(|f| f.name).collect();
        assert_eq!(
            missing,
            vec!["cgroup hierarchy", "squashfs", "loop devices"]
        );
    }

    #[test]
    fn protections_follow_the_kernel() {
        let fx = Fx::new(V1_MOUNTS);
        let fs = fx.run();
        assert_eq!(get(&fs, "unprivileged containers").status, Status::Present);
        assert_eq!(get(&fs, "seccomp profile").status, Status::Present);
        // V1_MOUNTS has no devices hierarchy and no cgroup2 mount
        assert_eq!(get(&fs, "device allowlist").status, Status::Missing);
        assert_eq!(get(&fs, "apparmor profile").status, Status::Missing);
        let with_devices = format!(
            "{V1_MOUNTS}45 31 0:40 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
        );
        let fx = Fx::new(&with_devices);
        fx.write("proc/sys/user/max_user_namespaces", "0\n");
        fx.write("sys/module/apparmor/parameters/enabled", "Y\n");
        // AppArmor enabled without securityfs: required, missing, and no profile
        let fs = fx.run();
        let a = get(&fs, "apparmor");
        assert!(a.required && a.status == Status::Missing, "{a:?}");
        assert!(a.detail.contains("securityfs"), "{}", a.detail);
        assert_eq!(get(&fs, "apparmor profile").status, Status::Missing);
        fx.write("sys/kernel/security/apparmor/profiles", "");
        let fs = fx.run();
        assert!(missing_required(&fs).is_empty());
        let d = get(&fs, "device allowlist");
        assert_eq!(d.status, Status::Present);
        assert!(d.detail.contains("v1"), "{}", d.detail);
        let u = get(&fs, "unprivileged containers");
        assert_eq!(u.status, Status::Missing);
        assert!(
            u.detail.contains("untrusted ones are refused"),
            "{}",
            u.detail
        );
        assert_eq!(get(&fs, "apparmor profile").status, Status::Present);
        // Landlock ABI 6 (the fixture's) scopes abstract sockets; ABI 5 or none does not
        assert_eq!(get(&fs, "shared network scoping").status, Status::Present);
        for abi in [Some(5), None] {
            let probes = Probes {
                lxc_version: Ok("5.0.2".into()),
                curl: Ok(fixture_curl()),
                path: None,
                open_tree: (Status::Present, "fixture".into()),
                mount_setattr: (Status::Present, "fixture".into()),
                pidfd: (Status::Present, "fixture".into()),
                close_range: (Status::Present, "fixture".into()),
                openat2: (Status::Present, "fixture".into()),
                landlock: abi,
            };
            let fs = check_with(&fx.roots(), &probes);
            let f = get(&fs, "shared network scoping");
            assert_eq!(f.status, Status::Missing, "{abi:?}");
            assert!(
                f.detail.contains("shared_network = \"unscoped\""),
                "{}",
                f.detail
            );
        }
    }

    #[test]
    fn user_namespaces_disabled() {
        let fx = Fx::new(V1_MOUNTS);
        fx.write("proc/sys/user/max_user_namespaces", "0\n");
        fx.write("proc/sys/kernel/unprivileged_userns_clone", "0\n");
        let fs = fx.run();
        assert_eq!(get(&fs, "user namespace").status, Status::Present);
        let u = get(&fs, "user namespaces usable");
        assert_eq!(u.status, Status::Missing);
        assert!(u.detail.contains("max_user_namespaces = 0"), "{}", u.detail);
        assert!(
            u.detail.contains("unprivileged_userns_clone = 0"),
            "{}",
            u.detail
        );
        assert!(!u.required);

        std::fs::remove_file(fx.dir.path().join("proc/self/ns/user")).unwrap();
        std::fs::remove_file(fx.dir.path().join("proc/self/ns/pid")).unwrap();
        let fs = fx.run();
        assert_eq!(get(&fs, "user namespace").status, Status::Missing);
        assert_eq!(get(&fs, "user namespaces usable").status, Status::Missing);
        let missing: Vec<_> = missing_required(&fs).iter().map(|f| f.name).collect();
        assert_eq!(missing, vec!["pid namespace"]);
    }

    #[test]
    fn kernel_config_from_boot_and_config_gz() {
        let fx = Fx::new(V1_MOUNTS);
        fx.write(
            "boot/config-5.10.0-test",
            "CONFIG_VETH=m\nCONFIG_BRIDGE=y\n# CONFIG_MACVLAN is not set\nCONFIG_NF_TABLES=y\nCONFIG_SECCOMP_FILTER=y\nCONFIG_NET_SCH_TBF=y\nCONFIG_IFB=m\n",
        );
        let fs = fx.run();
        assert_eq!(get(&fs, "veth").status, Status::Present);
        assert!(get(&fs, "veth").detail.contains("module"));
        assert_eq!(get(&fs, "macvlan").status, Status::Missing);
        assert_eq!(get(&fs, "cgroup bpf").status, Status::Missing);
        // Bandwidth caps' parts, with the feature.
        #[cfg(feature = "shape")]
        {
            assert_eq!(
                get(&fs, "tbf shaper (bandwidth caps)").status,
                Status::Present
            );
            assert_eq!(get(&fs, "ifb (egress caps)").status, Status::Present);
            let htb = get(&fs, "htb shaper (the line governor)");
            assert_eq!(htb.status, Status::Missing);
            let m = get(&fs, "mirred action (egress caps)");
            assert_eq!(m.status, Status::Missing);
            assert!(
                m.detail.contains("CONFIG_NET_ACT_MIRRED is not set"),
                "{}",
                m.detail
            );
        }

        // config.gz, decompressed with zcat found on the probe PATH.
        std::fs::remove_file(fx.dir.path().join("boot/config-5.10.0-test")).unwrap();
        let plain = fx.dir.path().join("proc/config");
        std::fs::write(&plain, "CONFIG_MACVLAN=y\nCONFIG_CGROUP_BPF=y\n").unwrap();
        let st = std::process::Command::new("gzip")
            .arg(&plain)
            .status()
            .expect("gzip is needed for this test");
        assert!(st.success());
        let fs = fx.run();
        assert_eq!(
            get(&fs, "macvlan").status,
            Status::Unknown,
            "no zcat on fixture PATH"
        );
        std::fs::create_dir_all(fx.dir.path().join("bin")).unwrap();
        let zcat = which(std::env::var_os("PATH").as_ref(), "zcat").expect("zcat on PATH");
        std::os::unix::fs::symlink(zcat, fx.dir.path().join("bin/zcat")).unwrap();
        let fs = fx.run();
        assert_eq!(get(&fs, "macvlan").status, Status::Present);
        assert_eq!(get(&fs, "cgroup bpf").status, Status::Present);
        assert_eq!(get(&fs, "veth").status, Status::Missing);
    }

    #[test]
    fn status_strings() {
        assert_eq!(Status::Present.as_str(), "present");
        assert_eq!(Status::Missing.as_str(), "missing");
        assert_eq!(Status::Unknown.as_str(), "unknown");
    }

    #[test]
    fn fallbacks_name_each_missing_newer_interface_and_what_berth_does_instead() {
        let fx = Fx::new("");
        // The fixture has no pressure/memory: PSI is missing.
        let probes = Probes {
            lxc_version: Err(crate::error::Error::new(
                crate::error::ErrorKind::Unavailable,
                "cannot load liblxc.so.1: Dynamic loading not supported",
            )),
            curl: Err("cannot load libcurl.so.4: libcurl.so.4: cannot open shared object file".into()),
            path: None,
            open_tree: (Status::Present, "fixture".into()),
            mount_setattr: (Status::Present, "fixture".into()),
            pidfd: (
                Status::Missing,
                "ENOSYS (kernel < 5.3): the memory guard kills by pid after checking the start time"
                    .into(),
            ),
            close_range: (Status::Present, "fixture".into()),
            openat2: (Status::Present, "fixture".into()),
            landlock: None,
        };
        let fs = check_with(&fx.roots(), &probes);
        let lxc = get(&fs, "liblxc");
        assert_eq!(lxc.status, Status::Missing);
        assert!(
            lxc.detail.contains("Dynamic loading not supported"),
            "{}",
            lxc.detail
        );
        // libcurl is optional (a file:// repository needs none) but says why it is missing.
        let curl = get(&fs, "libcurl");
        assert_eq!((curl.status, curl.required), (Status::Missing, false));
        assert!(
            curl.detail.contains("cannot open shared object"),
            "{}",
            curl.detail
        );
        let fb = fallbacks(&fs);
        assert_eq!(fb.len(), 2, "{fb:?}");
        assert!(
            fb[0]
                .starts_with("pidfd missing: ENOSYS (kernel < 5.3): the memory guard kills by pid"),
            "{fb:?}"
        );
        assert!(fb[1].starts_with("PSI memory missing: no PSI"), "{fb:?}");
        assert!(
            fb[1].contains("reads MemAvailable every [guard] interval"),
            "{fb:?}"
        );
        fx.write(
            "proc/pressure/memory",
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        );
        let probes = Probes {
            pidfd: (Status::Present, "fixture".into()),
            ..probes
        };
        assert!(fallbacks(&check_with(&fx.roots(), &probes)).is_empty());
    }

    #[test]
    fn the_probes_of_this_kernel_agree_with_the_process_layer() {
        // This test binary runs without a filter: the answer follows the kernel (or the
        // old-kernel wrapper the whole test run was started under).
        let (st, detail) = probe_pidfd();
        assert_eq!(
            st == Status::Present,
            crate::process::pidfd_supported(),
            "{detail}"
        );
        let (st, detail) = probe_mount_setattr();
        assert_ne!(st, Status::Unknown, "{detail}");
        let (st, detail) = probe_open_tree();
        assert_ne!(st, Status::Unknown, "{detail}");
        let (st, detail) = probe_close_range();
        assert_ne!(st, Status::Unknown, "{detail}");
    }

    #[test]
    fn real_machine_has_required_features() {
        let fs = check(&Roots::default());
        for f in &fs {
            eprintln!(
                "{:<14} {:<24} {:<8} {}",
                f.group,
                f.name,
                f.status.as_str(),
                f.detail
            );
        }
        let missing: Vec<String> = missing_required(&fs)
            .iter()
            .map(|f| format!("{} ({})", f.name, f.detail))
            .collect();
        assert!(
            missing.is_empty(),
            "required kernel features missing: {missing:?}"
        );
    }
}
