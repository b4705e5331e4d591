//! cgroup file systems, v1 and v2 behind one interface: which layout the host has (from
//! `<proc>/self/mountinfo`), creating berth's cgroups, writing limit files and reading usage.
//!
//! Every kernel root is a parameter (the proc root; the mount points come from mountinfo),
//! so the tests run on fixture trees. Controllers are named as the kernel names them
//! ("cpu", "cpuacct", "cpuset", "memory", "pids"); file names are those of the detected
//! version (`berth_core::cgroup::files` produces both).

use std::path::{Path, PathBuf};

use crate::mount::parse_mountinfo;

/// The controllers berth uses.
pub const CONTROLLERS: [&str; 5] = ["cpu", "cpuacct", "cpuset", "memory", "pids"];

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error(
        "no cgroup hierarchy with the cpu, memory or pids controller is mounted (looked in {0})"
    )]
    NotMounted(String),
    #[error("read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("create {path}: {source}")]
    Create {
        path: String,
        source: std::io::Error,
    },
    #[error("write {value:?} to {path}: {source}")]
    Write {
        path: String,
        value: String,
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// The host's cgroup layout as berth uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroups {
    pub version: Version,
    /// Controller → the directory of its hierarchy's root. On v2 every available controller
    /// points at the unified mount.
    roots: Vec<(&'static str, PathBuf)>,
}

/// What an `apply` did: files written, and controllers the kernel lacks (their files skipped).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Applied {
    pub written: Vec<PathBuf>,
    pub missing: Vec<String>,
}

impl Applied {
    /// A sentence for the log when some controllers were missing.
    pub fn missing_note(&self) -> Option<String> {
        (!self.missing.is_empty()).then(|| {
            format!(
                "the {} cgroup controller{} not available on this kernel; those limits are not enforced",
                self.missing.join(", "),
                if self.missing.len() == 1 { " is" } else { "s are" }
            )
        })
    }
}

/// Usage counters of one cgroup; None where the kernel (or the version) has no such file.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    pub cpu_usage_usec: Option<u64>,
    pub cpu_quota_us: Option<u64>,
    pub cpu_period_us: Option<u64>,
    pub nr_periods: Option<u64>,
    pub nr_throttled: Option<u64>,
    pub throttled_usec: Option<u64>,
    pub memory_current: Option<u64>,
    pub memory_peak: Option<u64>,
    pub memory_max: Option<u64>,
    pub oom_kills: Option<u64>,
    pub pids_current: Option<u64>,
    pub pids_max: Option<u64>,
}

/// v1 writes "unlimited" as a huge number (PAGE_COUNTER_MAX pages, rounded).
const V1_UNLIMITED: u64 = 1 << 62;

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn read_u64(path: &Path) -> Option<u64> {
    read(path)?.parse().ok()
}

/// "max" → None (unlimited).
fn read_max(path: &Path) -> Option<u64> {
    let s = read(path)?;
    if s == "max" {
        None
    } else {
        s.parse().ok()
    }
}

/// A "key value" line of a flat-keyed file (cpu.stat, memory.events, memory.oom_control).
fn keyed(path: &Path, key: &str) -> Option<u64> {
    let text = read(path)?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

impl Cgroups {
    /// Reads `<proc>/self/mountinfo`. v1 controllers are used where mounted; a cgroup2 mount
    /// is used only when no v1 hierarchy carries cpu, memory or pids (pure v2). So a hybrid
    /// host with an empty unified mount, like systemd's "hybrid" mode, is driven as v1.
    pub fn detect(proc: &Path) -> Result<Cgroups, CgroupError> {
        let p = proc.join("self/mountinfo");
        let text = std::fs::read_to_string(&p).map_err(|source| CgroupError::Read {
            path: p.display().to_string(),
            source,
        })?;
        let mut v1: Vec<(&'static str, PathBuf)> = Vec::new();
        let mut unified: Option<PathBuf> = None;
        for m in parse_mountinfo(&text) {
            match m.fs_type.as_str() {
                "cgroup" => {
                    for opt in m.super_options.split(',') {
                        if let Some(c) = CONTROLLERS.iter().find(|c| **c == opt) {
                            if !v1.iter().any(|(k, _)| k == c) {
                                v1.push((c, m.mount_point.clone()));
                            }
                        }
                    }
                }
                "cgroup2" if unified.is_none() => unified = Some(m.mount_point),
                _ => {}
            }
        }
        if v1
            .iter()
            .any(|(c, _)| matches!(*c, "cpu" | "memory" | "pids"))
        {
            return Ok(Cgroups {
                version: Version::V1,
                roots: v1,
            });
        }
        if let Some(u) = unified {
            let available = read(&u.join("cgroup.controllers")).unwrap_or_default();
            let mut roots: Vec<(&'static str, PathBuf)> = CONTROLLERS
                .iter()
                .filter(|c| available.split(' ').any(|a| a == **c))
                .map(|c| (*c, u.clone()))
                .collect();
            // cpu usage is always in cpu.stat on v2, even without the cpu controller.
            if !roots.iter().any(|(c, _)| *c == "cpuacct") {
                roots.push(("cpuacct", u.clone()));
            }
            if roots.iter().any(|(c, _)| *c != "cpuacct") {
                return Ok(Cgroups {
                    version: Version::V2,
                    roots,
                });
            }
        }
        Err(CgroupError::NotMounted(p.display().to_string()))
    }

    /// The root of the hierarchy carrying `controller`, if the kernel has it mounted.
    pub fn root(&self, controller: &str) -> Option<&Path> {
        self.roots
            .iter()
            .find(|(c, _)| *c == controller)
            .map(|(_, p)| p.as_path())
    }

    /// The `cgroup.procs` file of the cgroup that process `pid` ("self" for this one) is in,
    /// in one of the hierarchies berth uses, from `<proc>/<pid>/cgroup`.
    pub fn procs_file_of(&self, proc: &Path, pid: &str) -> Option<PathBuf> {
        let text = std::fs::read_to_string(proc.join(pid).join("cgroup")).ok()?;
        text.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
            let root = match self.version {
                Version::V2 if controllers.is_empty() => self.roots.first()?.1.as_path(),
                Version::V1 => controllers.split(',').find_map(|c| self.root(c))?,
                Version::V2 => return None,
            };
            Some(root.join(path.trim_start_matches('/')).join("cgroup.procs"))
        })
    }

    /// The directory of cgroup `rel` (e.g. "berth/web") for a controller.
    pub fn dir(&self, controller: &str, rel: &str) -> Option<PathBuf> {
        self.root(controller).map(|r| r.join(rel))
    }

    /// Controllers the kernel has.
    pub fn available(&self) -> Vec<&'static str> {
        self.roots.iter().map(|(c, _)| *c).collect()
    }

    /// Creates cgroup `rel` (and its ancestors) in the hierarchies of `controllers`. On v1 a
    /// new cpuset cgroup gets its parent's cpus and mems (it is unusable empty); on v2 the
    /// controllers are enabled in each ancestor's subtree_control. Missing controllers are
    /// reported in `Applied::missing`, not errors.
    pub fn ensure(&self, rel: &str, controllers: &[&str]) -> Result<Applied, CgroupError> {
        let mut done = Applied::default();
        let mut made: Vec<PathBuf> = Vec::new();
        for c in controllers {
            let Some(root) = self.root(c) else {
                done.missing.push(c.to_string());
                continue;
            };
            let mut dir = root.to_path_buf();
            for part in rel.split('/').filter(|p| !p.is_empty()) {
                if self.version == Version::V2 {
                    // Enabling an already enabled controller is harmless; a failure here shows
                    // up as a missing file at the first write.
                    let _ = std::fs::write(dir.join("cgroup.subtree_control"), format!("+{c}"));
                }
                let parent = dir.clone();
                dir.push(part);
                if made.contains(&dir) {
                    continue;
                }
                match std::fs::create_dir(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(source) => {
                        return Err(CgroupError::Create {
                            path: dir.display().to_string(),
                            source,
                        })
                    }
                }
                if self.version == Version::V1 && *c == "cpuset" {
                    for f in ["cpuset.cpus", "cpuset.mems"] {
                        if read(&dir.join(f)).unwrap_or_default().is_empty() {
                            let v = read(&parent.join(f)).unwrap_or_default();
                            write_file(&dir.join(f), &v)?;
                        }
                    }
                }
                made.push(dir.clone());
            }
        }
        Ok(done)
    }

    /// Writes `files` (controller, file name, value) into cgroup `rel`, in order. A controller
    /// the kernel lacks is skipped and reported; any other failure stops, naming the file.
    pub fn apply<'a>(
        &self,
        rel: &str,
        files: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    ) -> Result<Applied, CgroupError> {
        let mut done = Applied::default();
        for (c, file, value) in files {
            match self.dir(c, rel) {
                None => {
                    if !done.missing.iter().any(|m| m == c) {
                        done.missing.push(c.to_string());
                    }
                }
                Some(dir) => {
                    let p = dir.join(file);
                    write_file(&p, value)?;
                    done.written.push(p);
                }
            }
        }
        Ok(done)
    }

    /// Usage counters of cgroup `rel`.
    pub fn stats(&self, rel: &str) -> Stats {
        self.stats_of(rel, rel)
    }

    /// CPU counters of cgroup `rel`, memory's and pids' of `mem_rel` (a container: its
    /// budget's CPU, its payload's memory and pids).
    pub fn stats_of(&self, rel: &str, mem_rel: &str) -> Stats {
        let at = |c: &str, f: &str| {
            let r = if matches!(c, "memory" | "pids") {
                mem_rel
            } else {
                rel
            };
            self.dir(c, r).map(|d| d.join(f))
        };
        let mut s = Stats::default();
        match self.version {
            Version::V1 => {
                s.cpu_usage_usec = at("cpuacct", "cpuacct.usage")
                    .and_then(|p| read_u64(&p))
                    .map(|ns| ns / 1000);
                if let Some(p) = at("cpu", "cpu.stat") {
                    s.nr_periods = keyed(&p, "nr_periods");
                    s.nr_throttled = keyed(&p, "nr_throttled");
                    s.throttled_usec = keyed(&p, "throttled_time").map(|ns| ns / 1000);
                }
                s.cpu_quota_us = at("cpu", "cpu.cfs_quota_us")
                    .and_then(|p| read(&p))
                    .and_then(|q| q.parse::<i64>().ok())
                    .and_then(|q| u64::try_from(q).ok());
                s.cpu_period_us = at("cpu", "cpu.cfs_period_us").and_then(|p| read_u64(&p));
                s.memory_current = at("memory", "memory.usage_in_bytes").and_then(|p| read_u64(&p));
                s.memory_peak =
                    at("memory", "memory.max_usage_in_bytes").and_then(|p| read_u64(&p));
                s.memory_max = at("memory", "memory.limit_in_bytes")
                    .and_then(|p| read_u64(&p))
                    .filter(|m| *m < V1_UNLIMITED);
                s.oom_kills =
                    at("memory", "memory.oom_control").and_then(|p| keyed(&p, "oom_kill"));
            }
            Version::V2 => {
                if let Some(p) = at("cpuacct", "cpu.stat") {
                    s.cpu_usage_usec = keyed(&p, "usage_usec");
                    s.nr_periods = keyed(&p, "nr_periods");
                    s.nr_throttled = keyed(&p, "nr_throttled");
                    s.throttled_usec = keyed(&p, "throttled_usec");
                }
                if let Some(max) = at("cpu", "cpu.max").and_then(|p| read(&p)) {
                    let mut it = max.split(' ');
                    s.cpu_quota_us = it.next().and_then(|q| q.parse().ok());
                    s.cpu_period_us = it.next().and_then(|q| q.parse().ok());
                }
                s.memory_current = at("memory", "memory.current").and_then(|p| read_u64(&p));
                s.memory_peak = at("memory", "memory.peak").and_then(|p| read_u64(&p));
                s.memory_max = at("memory", "memory.max").and_then(|p| read_max(&p));
                s.oom_kills = at("memory", "memory.events").and_then(|p| keyed(&p, "oom_kill"));
            }
        }
        s.pids_current = at("pids", "pids.current").and_then(|p| read_u64(&p));
        s.pids_max = at("pids", "pids.max").and_then(|p| read_max(&p));
        s
    }

    /// Whether cgroup `rel` exists in any hierarchy berth uses.
    pub fn exists(&self, rel: &str) -> bool {
        self.roots.iter().any(|(_, r)| r.join(rel).is_dir())
    }

    /// Moves the calling process (all its threads) into cgroup `rel` of the hierarchies of
    /// `controllers` (each once): a process of berth's that works for a container (its shim,
    /// a helper) enters the container's budget as its first act, before it forks or makes a
    /// thread, so that everything it and its children do is the container's.
    pub fn enter(&self, rel: &str, controllers: &[&str]) -> Result<(), CgroupError> {
        let pid = std::process::id().to_string();
        let mut done: Vec<PathBuf> = Vec::new();
        for c in controllers {
            if let Some(dir) = self.dir(c, rel) {
                if !done.contains(&dir) {
                    write_file(&dir.join("cgroup.procs"), &pid)?;
                    done.push(dir);
                }
            }
        }
        Ok(())
    }
}

fn write_file(p: &Path, value: &str) -> Result<(), CgroupError> {
    // cgroup files take one value per write(2); no truncation or temp file (not a regular fs).
    std::fs::OpenOptions::new()
        .write(true)
        .open(p)
        .and_then(|mut f| std::io::Write::write_all(&mut f, value.as_bytes()))
        .map_err(|source| CgroupError::Write {
            path: p.display().to_string(),
            value: value.to_string(),
            source,
        })
}

/// MemTotal from `<proc>/meminfo`, bytes.
pub fn mem_total(proc: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(proc.join("meminfo")).ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line
        .trim_start_matches("MemTotal:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Number of online CPUs from `<sys>/devices/system/cpu/online` ("0-1", "0,2-3").
pub fn online_cpus(sys: &Path) -> Option<u32> {
    let text = read(&sys.join("devices/system/cpu/online"))?;
    let mut n = 0u32;
    for item in text.split(',') {
        let (a, b) = item.split_once('-').unwrap_or((item, item));
        let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
        n += b.checked_sub(a)? + 1;
    }
    Some(n)
}

/// Notice of the kernel's OOM kills in one memory cgroup: its fd polls readable (POLLIN)
/// after the OOM killer acted there (v1: an eventfd registered on `memory.oom_control`; v2:
/// inotify on `memory.events`); `kills()` then says how many so far. No polling.
pub struct OomWatch {
    fd: std::os::fd::OwnedFd,
    /// v1: the `memory.oom_control` the eventfd is registered on, held open.
    _control: Option<std::fs::File>,
    counter: PathBuf,
}

impl Cgroups {
    /// Watches cgroup `rel`'s OOM kills.
    pub fn oom_watch(&self, rel: &str) -> std::io::Result<OomWatch> {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let dir = self
            .dir("memory", rel)
            .ok_or_else(|| std::io::Error::other("no memory controller"))?;
        match self.version {
            Version::V1 => {
                let counter = dir.join("memory.oom_control");
                let control = std::fs::File::open(&counter)?;
                // SAFETY: eventfd takes an initial value and flags and returns a new fd or -1.
                let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
                if efd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // SAFETY: the kernel just gave us this fd; we own it.
                let fd = unsafe { OwnedFd::from_raw_fd(efd) };
                std::fs::write(
                    dir.join("cgroup.event_control"),
                    format!("{} {}", fd.as_raw_fd(), control.as_raw_fd()),
                )?;
                Ok(OomWatch {
                    fd,
                    _control: Some(control),
                    counter,
                })
            }
            Version::V2 => {
                let counter = dir.join("memory.events");
                // SAFETY: inotify_init1 takes flags and returns a new fd or -1.
                let ifd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
                if ifd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // SAFETY: the kernel just gave us this fd; we own it.
                let fd = unsafe { OwnedFd::from_raw_fd(ifd) };
                let path = std::ffi::CString::new(counter.as_os_str().as_encoded_bytes())
                    .map_err(std::io::Error::other)?;
                // SAFETY: `fd` is an inotify instance and `path` a NUL-terminated path that
                // outlives the call.
                if unsafe {
                    libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), libc::IN_MODIFY)
                } < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(OomWatch {
                    fd,
                    _control: None,
                    counter,
                })
            }
        }
    }
}

impl OomWatch {
    pub fn fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.fd)
    }

    /// Reads what woke the poll (the fd is non-blocking).
    pub fn drain(&self) {
        let mut buf = [0u8; 512];
        // SAFETY: reads into a local buffer of its length from an fd we own.
        while unsafe { libc::read(self.fd(), buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
    }

    /// v1's eventfd fires when an OOM begins, before its kill is chosen and counted; v2's
    /// `memory.events` changes with the count itself (and with every other event).
    pub fn fires_before_the_kill(&self) -> bool {
        self._control.is_some()
    }

    /// The cgroup's OOM kills so far (`oom_kill`), if the kernel counts them (v1: 4.13+).
    pub fn kills(&self) -> Option<u64> {
        keyed(&self.counter, "oom_kill")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mount::tests::TempDir;

    /// A fixture: <tmp>/proc/self/mountinfo naming hierarchies below <tmp>/cg.
    fn fixture(tag: &str, mounts: &[(&str, &str, &str)]) -> (TempDir, PathBuf) {
        let d = TempDir::new(tag);
        let proc = d.0.join("proc");
        std::fs::create_dir_all(proc.join("self")).unwrap();
        let mut info = String::from("22 1 0:21 / /proc rw,nosuid - proc proc rw\n");
        for (i, (dir, fs, opts)) in mounts.iter().enumerate() {
            let mp = d.0.join("cg").join(dir);
            std::fs::create_dir_all(&mp).unwrap();
            info.push_str(&format!(
                "{} 31 0:{} / {} rw,relatime shared:9 - {fs} {fs} {opts}\n",
                40 + i,
                40 + i,
                mp.display()
            ));
        }
        std::fs::write(proc.join("self/mountinfo"), info).unwrap();
        (d, proc)
    }

    fn put(p: &Path, text: &str) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    const V1_MOUNTS: &[(&str, &str, &str)] = &[
        ("cpu", "cgroup", "rw,cpu"),
        ("cpuacct", "cgroup", "rw,cpuacct"),
        ("cpuset", "cgroup", "rw,cpuset,clone_children"),
        ("memory", "cgroup", "rw,memory"),
        ("pids", "cgroup", "rw,pids"),
        ("systemd", "cgroup", "rw,name=systemd"),
        ("unified", "cgroup2", "rw"),
    ];

    #[test]
    fn hybrid_with_an_empty_unified_mount_is_v1() {
        let (d, proc) = fixture("cg-hybrid", V1_MOUNTS);
        put(&d.0.join("cg/unified/cgroup.controllers"), "\n");
        let cg = Cgroups::detect(&proc).unwrap();
        assert_eq!(cg.version, Version::V1);
        assert_eq!(cg.root("memory").unwrap(), d.0.join("cg/memory"));
        assert_eq!(cg.root("cpuacct").unwrap(), d.0.join("cg/cpuacct"));
        assert_eq!(
            cg.dir("pids", "berth/web").unwrap(),
            d.0.join("cg/pids/berth/web")
        );
    }

    #[test]
    fn co_mounted_cpu_and_cpuacct() {
        let (d, proc) = fixture("cg-comount", &[("cpu,cpuacct", "cgroup", "rw,cpu,cpuacct")]);
        let cg = Cgroups::detect(&proc).unwrap();
        assert_eq!(cg.root("cpu"), cg.root("cpuacct"));
        assert_eq!(cg.root("cpu").unwrap(), d.0.join("cg/cpu,cpuacct"));
        assert_eq!(cg.root("memory"), None);
    }

    #[test]
    fn pure_v2() {
        let (d, proc) = fixture("cg-v2", &[("", "cgroup2", "rw,nsdelegate")]);
        put(
            &d.0.join("cg/cgroup.controllers"),
            "cpuset cpu io memory hugetlb pids rdma\n",
        );
        let cg = Cgroups::detect(&proc).unwrap();
        assert_eq!(cg.version, Version::V2);
        assert_eq!(cg.root("memory").unwrap(), d.0.join("cg"));
        assert_eq!(cg.root("cpuacct").unwrap(), d.0.join("cg"));
    }

    #[test]
    fn the_procs_file_of_a_process() {
        let (d, proc) = fixture("cg-procs-v1", V1_MOUNTS);
        put(&d.0.join("cg/unified/cgroup.controllers"), "\n");
        // The first line whose hierarchy berth uses: not name=systemd's.
        put(
            &proc.join("self/cgroup"),
            "9:name=systemd:/\n4:memory:/svc/berth\n1:cpu:/\n0::/\n",
        );
        let cg = Cgroups::detect(&proc).unwrap();
        assert_eq!(
            cg.procs_file_of(&proc, "self").unwrap(),
            d.0.join("cg/memory/svc/berth/cgroup.procs")
        );
        assert_eq!(cg.procs_file_of(&proc, "4242"), None);

        let (d, proc) = fixture("cg-procs-v2", &[("", "cgroup2", "rw,nsdelegate")]);
        put(&d.0.join("cg/cgroup.controllers"), "cpu memory pids\n");
        put(
            &proc.join("self/cgroup"),
            "0::/system.slice/berth.service\n",
        );
        let cg = Cgroups::detect(&proc).unwrap();
        assert_eq!(
            cg.procs_file_of(&proc, "self").unwrap(),
            d.0.join("cg/system.slice/berth.service/cgroup.procs")
        );
    }

    #[test]
    fn nothing_mounted_is_a_clear_error() {
        let (d, proc) = fixture("cg-none", &[("unified", "cgroup2", "rw")]);
        put(&d.0.join("cg/unified/cgroup.controllers"), "");
        let e = Cgroups::detect(&proc).unwrap_err().to_string();
        assert!(
            e.contains("cpu, memory or pids") && e.contains("mountinfo"),
            "{e}"
        );
    }

    #[test]
    fn v1_ensure_copies_cpuset_and_apply_writes_in_order() {
        let (d, proc) = fixture("cg-v1-apply", V1_MOUNTS);
        put(&d.0.join("cg/cpuset/cpuset.cpus"), "0-1\n");
        put(&d.0.join("cg/cpuset/cpuset.mems"), "0\n");
        let cg = Cgroups::detect(&proc).unwrap();
        // Fixture directories are plain: pre-create the files the kernel would.
        for dir in ["berth", "berth/web"] {
            put(&d.0.join("cg/cpuset").join(dir).join("cpuset.cpus"), "");
            put(&d.0.join("cg/cpuset").join(dir).join("cpuset.mems"), "");
        }
        let a = cg
            .ensure("berth/web", &["cpu", "cpuset", "memory", "pids"])
            .unwrap();
        assert!(a.missing.is_empty());
        assert!(d.0.join("cg/memory/berth/web").is_dir());
        assert_eq!(
            read(&d.0.join("cg/cpuset/berth/cpuset.cpus")).unwrap(),
            "0-1"
        );
        assert_eq!(
            read(&d.0.join("cg/cpuset/berth/web/cpuset.mems")).unwrap(),
            "0"
        );
        for f in [
            "cpu/berth/web/cpu.cfs_quota_us",
            "memory/berth/web/memory.limit_in_bytes",
        ] {
            put(&d.0.join("cg").join(f), "");
        }
        let a = cg
            .apply(
                "berth/web",
                [
                    ("cpu", "cpu.cfs_quota_us", "20000"),
                    ("memory", "memory.limit_in_bytes", "16777216"),
                ],
            )
            .unwrap();
        assert_eq!(a.written.len(), 2);
        assert_eq!(
            read(&d.0.join("cg/cpu/berth/web/cpu.cfs_quota_us")).unwrap(),
            "20000"
        );
        // A file that does not exist: the error names it and the value.
        let e = cg
            .apply("berth/web", [("pids", "pids.max", "32")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("pids/berth/web/pids.max") && e.contains("\"32\""),
            "{e}"
        );
    }

    #[test]
    fn a_missing_controller_is_reported_and_the_rest_still_works() {
        let (d, proc) = fixture(
            "cg-nomem",
            &[("cpu", "cgroup", "rw,cpu"), ("pids", "cgroup", "rw,pids")],
        );
        let cg = Cgroups::detect(&proc).unwrap();
        let a = cg.ensure("berth", &["cpu", "memory", "pids"]).unwrap();
        assert_eq!(a.missing, vec!["memory"]);
        put(&d.0.join("cg/pids/berth/pids.max"), "max");
        let a = cg
            .apply(
                "berth",
                [
                    ("memory", "memory.limit_in_bytes", "1"),
                    ("memory", "memory.soft_limit_in_bytes", "1"),
                    ("pids", "pids.max", "1024"),
                ],
            )
            .unwrap();
        assert_eq!(a.missing, vec!["memory"]);
        assert_eq!(read(&d.0.join("cg/pids/berth/pids.max")).unwrap(), "1024");
        let note = a.missing_note().unwrap();
        assert!(
            note.contains("memory cgroup controller is not available"),
            "{note}"
        );
    }

    #[test]
    fn v2_ensure_enables_controllers_in_each_ancestor() {
        let (d, proc) = fixture("cg-v2-ensure", &[("", "cgroup2", "rw")]);
        put(&d.0.join("cg/cgroup.controllers"), "cpu memory pids");
        let cg = Cgroups::detect(&proc).unwrap();
        let a = cg
            .ensure("berth/web", &["cpu", "memory", "pids", "cpuset"])
            .unwrap();
        assert_eq!(a.missing, vec!["cpuset"]);
        assert!(d.0.join("cg/berth/web").is_dir());
        // The fixture keeps only the last write of each file; the kernel would accumulate.
        assert_eq!(
            read(&d.0.join("cg/cgroup.subtree_control")).unwrap(),
            "+pids"
        );
        assert_eq!(
            read(&d.0.join("cg/berth/cgroup.subtree_control")).unwrap(),
            "+pids"
        );
    }

    #[test]
    fn a_process_enters_its_cgroup_in_each_hierarchy_or_says_which_it_could_not() {
        let (d, proc) = fixture("cg-enter", V1_MOUNTS);
        let cg = Cgroups::detect(&proc).unwrap();
        let a = d.0.join("cg/cpu/berth/web/berth/cgroup.procs");
        let b = d.0.join("cg/memory/berth/web/berth/cgroup.procs");
        put(&a, "");
        put(&b, "");
        cg.enter("berth/web/berth", &["cpu", "memory"]).unwrap();
        let me = std::process::id().to_string();
        assert_eq!(read(&a).unwrap(), me);
        assert_eq!(read(&b).unwrap(), me);
        let e = cg
            .enter("berth/web/berth", &["pids"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("pids/berth/web/berth/cgroup.procs"), "{e}");
    }

    #[test]
    fn v1_stats() {
        let (d, proc) = fixture("cg-v1-stats", V1_MOUNTS);
        let cg = Cgroups::detect(&proc).unwrap();
        let c = d.0.join("cg");
        put(&c.join("cpuacct/berth/web/cpuacct.usage"), "2500000000\n");
        put(
            &c.join("cpu/berth/web/cpu.stat"),
            "nr_periods 40\nnr_throttled 30\nthrottled_time 1500000000\nnr_bursts 0\nburst_time 0\n",
        );
        put(&c.join("cpu/berth/web/cpu.cfs_quota_us"), "20000\n");
        put(&c.join("cpu/berth/web/cpu.cfs_period_us"), "100000\n");
        put(
            &c.join("memory/berth/web/memory.usage_in_bytes"),
            "1048576\n",
        );
        put(
            &c.join("memory/berth/web/memory.max_usage_in_bytes"),
            "2097152\n",
        );
        put(
            &c.join("memory/berth/web/memory.limit_in_bytes"),
            "9223372036854771712\n",
        );
        put(
            &c.join("memory/berth/web/memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        );
        put(&c.join("pids/berth/web/pids.current"), "3\n");
        put(&c.join("pids/berth/web/pids.max"), "max\n");
        let s = cg.stats("berth/web");
        assert_eq!(
            s,
            Stats {
                cpu_usage_usec: Some(2_500_000),
                cpu_quota_us: Some(20_000),
                cpu_period_us: Some(100_000),
                nr_periods: Some(40),
                nr_throttled: Some(30),
                throttled_usec: Some(1_500_000),
                memory_current: Some(1 << 20),
                memory_peak: Some(2 << 20),
                memory_max: None,
                oom_kills: Some(2),
                pids_current: Some(3),
                pids_max: None,
            }
        );
        put(&c.join("cpu/berth/web/cpu.cfs_quota_us"), "-1\n");
        assert_eq!(cg.stats("berth/web").cpu_quota_us, None);
        // a cgroup that does not exist: nothing, no panic
        assert_eq!(cg.stats("berth/none"), Stats::default());
    }

    #[test]
    fn v2_stats() {
        let (d, proc) = fixture("cg-v2-stats", &[("", "cgroup2", "rw")]);
        let c = d.0.join("cg");
        put(&c.join("cgroup.controllers"), "cpu memory pids");
        let cg = Cgroups::detect(&proc).unwrap();
        put(
            &c.join("berth/web/cpu.stat"),
            "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 40\nnr_throttled 30\nthrottled_usec 1500000\n",
        );
        put(&c.join("berth/web/cpu.max"), "20000 100000\n");
        put(&c.join("berth/web/memory.current"), "1048576\n");
        put(&c.join("berth/web/memory.peak"), "2097152\n");
        put(&c.join("berth/web/memory.max"), "16777216\n");
        put(
            &c.join("berth/web/memory.events"),
            "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n",
        );
        put(&c.join("berth/web/pids.current"), "3\n");
        put(&c.join("berth/web/pids.max"), "32\n");
        let s = cg.stats("berth/web");
        assert_eq!(s.cpu_usage_usec, Some(2_500_000));
        assert_eq!(s.cpu_quota_us, Some(20_000));
        assert_eq!(s.throttled_usec, Some(1_500_000));
        assert_eq!(s.memory_max, Some(16 << 20));
        assert_eq!(s.memory_peak, Some(2 << 20));
        assert_eq!(s.oom_kills, Some(2));
        assert_eq!(s.pids_max, Some(32));
        put(&c.join("berth/web/cpu.max"), "max 100000\n");
        assert_eq!(cg.stats("berth/web").cpu_quota_us, None);
    }

    #[test]
    fn host_facts() {
        let d = TempDir::new("cg-host");
        put(
            &d.0.join("proc/meminfo"),
            "MemTotal:        2038424 kB\nMemFree:          100 kB\n",
        );
        assert_eq!(mem_total(&d.0.join("proc")), Some(2038424 * 1024));
        put(&d.0.join("sys/devices/system/cpu/online"), "0-1\n");
        assert_eq!(online_cpus(&d.0.join("sys")), Some(2));
        put(&d.0.join("sys/devices/system/cpu/online"), "0,2-3\n");
        assert_eq!(online_cpus(&d.0.join("sys")), Some(3));
        // and the real ones parse
        assert!(mem_total(Path::new("/proc")).unwrap() > 0);
        assert!(online_cpus(Path::new("/sys")).unwrap() >= 1);
    }

    #[test]
    fn the_real_host_is_detected() {
        if let Ok(cg) = Cgroups::detect(Path::new("/proc")) {
            assert!(!cg.available().is_empty());
        }
    }
}
