//! The clean-up sweep: removes everything a sandbox made on the host (processes, LXC and runc
//! containers, mounts, loop devices, network namespaces, cgroups, its directory), also what a
//! killed run left behind. Safe to run on a partial or already swept sandbox.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::package::which;
use crate::procs;

const CGROUP_ROOT: &str = "/sys/fs/cgroup";
const NETNS_DIR: &str = "/run/netns";

/// What one sandbox owns on the host: its directory and every process that names it, and
/// the cgroups and network namespaces called `name` or `name.<what>` (LXC's monitor cgroup
/// `name.monitor`, the benchmark's `name.runc`, …). A name is unique per sandbox: the tests
/// add a counter to theirs, a benchmark run its pid.
#[derive(Clone, Debug)]
pub struct Scope {
    pub dir: PathBuf,
    pub name: String,
    /// lxcpaths (relative to `dir`) whose containers the sweep stops.
    pub lxcpaths: Vec<PathBuf>,
    /// runc state roots (relative to `dir`) whose containers the sweep deletes.
    pub runc_roots: Vec<PathBuf>,
    /// Leaves the directory (not its mounts) in place, for a look after a failure.
    pub keep_dir: bool,
}

impl Scope {
    pub fn new(dir: PathBuf, name: String) -> Scope {
        Scope {
            dir,
            name,
            lxcpaths: vec![PathBuf::from("run/lxc")],
            runc_roots: Vec::new(),
            keep_dir: false,
        }
    }

    /// `$TMPDIR/<prefix><pid>` named `<prefix><pid>`: one sandbox per run of a program, so a
    /// later run finds what a killed one left by its pid ([`pid_of`], [`sweep_leftovers`]).
    pub fn per_run(prefix: &str, pid: u32) -> Scope {
        let name = format!("{prefix}{pid}");
        Scope::new(std::env::temp_dir().join(&name), name)
    }

    /// The name of a network namespace of this sandbox (`ip netns` style, under /run/netns).
    pub fn netns(&self, what: &str) -> String {
        format!("{}.{what}", self.name)
    }

    /// Whether a cgroup or network namespace of this name is the sandbox's.
    pub fn owns(&self, name: &str) -> bool {
        name.strip_prefix(self.name.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    }
}

/// What a sweep found and removed ("3 mounts"), and what it could not remove.
#[derive(Debug, Default)]
pub struct Report {
    pub found: Vec<String>,
    pub warnings: Vec<String>,
}

/// The pid in a name `<prefix><pid>` or `<prefix><pid>.<what>`.
pub fn pid_of(prefix: &str, name: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let tail = &rest[digits.len()..];
    if digits.is_empty() || !(tail.is_empty() || tail.starts_with('.')) {
        return None;
    }
    digits.parse().ok()
}

fn run_quiet(cmd: &mut Command) {
    let _ = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Signals the processes (not this one, not init) that name `dir` in their arguments or
/// environment (BERTH_CONFIG); returns how many there were.
fn signal_mentioning(dir: &Path, sig: i32) -> usize {
    let me = std::process::id() as i32;
    let mut n = 0;
    for p in procs::pids() {
        if p == me || p == 1 {
            continue;
        }
        if procs::mentions(&procs::cmdline(p), dir) || procs::mentions(&procs::environ(p), dir) {
            let _ = berth_sys::process::kill(p, sig);
            n += 1;
        }
    }
    n
}

/// Removes everything `scope` owns; see [`Report`].
pub fn sweep(scope: &Scope) -> Report {
    let mut r = Report::default();
    let dir = &scope.dir;
    let me = std::process::id() as i32;
    // A daemon of the sandbox would restart containers or hold mounts: first.
    for p in procs::pids() {
        let daemon = procs::cmdline(p).get(1).is_some_and(|a| a == "daemon");
        if p != me && daemon && procs::mentions(&procs::environ(p), dir) {
            let _ = berth_sys::process::kill(p, libc::SIGKILL);
        }
    }
    if let Some(runc) = which("runc") {
        for root in scope.runc_roots.iter().map(|r| dir.join(r)) {
            for id in std::fs::read_dir(&root).into_iter().flatten().flatten() {
                run_quiet(
                    Command::new(&runc)
                        .arg("--root")
                        .arg(&root)
                        .args(["delete", "--force"])
                        .arg(id.file_name()),
                );
            }
        }
    }
    for lxcpath in scope.lxcpaths.iter().map(|l| dir.join(l)) {
        for e in std::fs::read_dir(&lxcpath).into_iter().flatten().flatten() {
            if e.path().join("config").is_file() {
                run_quiet(
                    Command::new("lxc-stop")
                        .arg("-P")
                        .arg(&lxcpath)
                        .arg("-n")
                        .arg(e.file_name())
                        .args(["-k", "-t", "5"]),
                );
            }
        }
    }
    let n = signal_mentioning(dir, libc::SIGKILL);
    if n > 0 {
        r.found.push(format!("{n} processes"));
        let deadline = Instant::now() + Duration::from_secs(3);
        while signal_mentioning(dir, 0) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    for i in 0..3 {
        let Ok(mut mounts) = crate::mounts::mounts_under(dir) else {
            break;
        };
        if mounts.is_empty() {
            break;
        }
        if i == 0 {
            r.found.push(format!("{} mounts", mounts.len()));
        }
        mounts.reverse();
        for m in mounts {
            let _ = berth_sys::mount::umount(&m, true);
        }
    }
    let loops = detach_loops(dir);
    if !loops.is_empty() {
        r.found.push(format!("loop devices {}", loops.join(", ")));
    }
    remove_names(scope, &mut r);
    match crate::mounts::mounts_under(dir) {
        Ok(m) if m.is_empty() => {
            if !scope.keep_dir {
                if let Err(e) = std::fs::remove_dir_all(dir) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        r.warnings
                            .push(format!("cannot remove {}: {e}", dir.display()));
                    }
                }
            }
        }
        Ok(m) => r.warnings.push(format!(
            "{} still has {} mounts; not removing it",
            dir.display(),
            m.len()
        )),
        Err(e) => r.warnings.push(e.to_string()),
    }
    r
}

/// Where the kernel lists its AppArmor profiles and takes their unloading.
const APPARMOR: &str = "/sys/kernel/security/apparmor";

/// The AppArmor profiles of `scope`'s daemons (`PARENT.NAME`: berth names a non-default
/// instance's profiles after its cgroup parent, the sandbox's name): unloaded. On a kernel
/// without AppArmor, nothing.
fn unload_profiles(scope: &Scope) -> Vec<String> {
    let aa = Path::new(APPARMOR);
    let listed = std::fs::read_to_string(aa.join("profiles")).unwrap_or_default();
    let mut gone = Vec::new();
    for line in listed.lines() {
        let name = line.split(" (").next().unwrap_or("");
        let owner = name.rsplit_once('.').map_or("", |(p, _)| p);
        if !owner.is_empty()
            && scope.owns(owner)
            && std::fs::write(aa.join(".remove"), name).is_ok()
        {
            gone.push(name.to_string());
        }
    }
    gone
}

/// The network namespaces, cgroups and AppArmor profiles of `scope`.
fn remove_names(scope: &Scope, r: &mut Report) {
    let profiles = unload_profiles(scope);
    if !profiles.is_empty() {
        r.found
            .push(format!("AppArmor profiles {}", profiles.join(", ")));
    }
    let ns = remove_netns(Path::new(NETNS_DIR), scope);
    if !ns.is_empty() {
        r.found
            .push(format!("network namespaces {}", ns.join(", ")));
    }
    let (cg, left) = remove_cgroups(Path::new(CGROUP_ROOT), scope);
    if cg > 0 {
        r.found.push(format!("{cg} cgroups"));
    }
    r.warnings.extend(
        left.iter()
            .map(|p| format!("cannot remove cgroup {}", p.display())),
    );
}

/// Detaches loop devices whose backing file is below `dir`; returns their names.
fn detach_loops(dir: &Path) -> Vec<String> {
    let mut gone = Vec::new();
    for l in berth_sys::loopdev::loop_backing_files(Path::new("/sys")).unwrap_or_default() {
        if l.backing_file.starts_with(dir) {
            run_quiet(
                Command::new("losetup")
                    .arg("-d")
                    .arg(format!("/dev/{}", l.name)),
            );
            gone.push(l.name);
        }
    }
    gone
}

/// Removes the scope's named network namespaces below `netns_dir`; returns their names.
fn remove_netns(netns_dir: &Path, scope: &Scope) -> Vec<String> {
    let mut gone = Vec::new();
    for e in std::fs::read_dir(netns_dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if scope.owns(&name) {
            let _ = berth_sys::mount::umount(&e.path(), true);
            if std::fs::remove_file(e.path()).is_ok() {
                gone.push(name);
            }
        }
    }
    gone
}

/// The cgroup hierarchies: every v1 controller directory and the unified one (or the root
/// itself on a pure v2 host).
fn hierarchies(root: &Path) -> Vec<PathBuf> {
    let mut v = vec![root.to_path_buf()];
    // Controller directories of v1 (not child cgroups of v2, whose root has cgroup.procs).
    if !root.join("cgroup.procs").exists() {
        for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                v.push(p);
            }
        }
    }
    v
}

/// rmdir a cgroup and everything below it, children first.
fn rmdir_tree(p: &Path) -> bool {
    for k in std::fs::read_dir(p).into_iter().flatten().flatten() {
        let kp = k.path();
        if kp.is_dir() && !kp.is_symlink() {
            rmdir_tree(&kp);
        }
    }
    std::fs::remove_dir(p).is_ok() || !p.exists()
}

/// The scope's top-level cgroups in every hierarchy below `root`.
fn cgroups(root: &Path, scope: &Scope) -> Vec<PathBuf> {
    hierarchies(root)
        .iter()
        .flat_map(|h| std::fs::read_dir(h).into_iter().flatten().flatten())
        .filter(|e| scope.owns(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .filter(|p| p.is_dir() && !p.is_symlink())
        .collect()
}

/// Removes the scope's cgroups below `root`, retrying while their last processes exit;
/// returns how many there were and those that stayed.
fn remove_cgroups(root: &Path, scope: &Scope) -> (usize, Vec<PathBuf>) {
    let found = cgroups(root, scope);
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut left = found.clone();
    loop {
        left.retain(|p| !rmdir_tree(p));
        if left.is_empty() || Instant::now() > deadline {
            return (found.len(), left);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The pids of runs named `<prefix><pid>` (directories below the temp dir, network
/// namespaces, cgroups) that are not this process and not `alive`.
fn dead_runs(places: &[PathBuf], prefix: &str, alive: &dyn Fn(u32) -> bool) -> Vec<u32> {
    let me = std::process::id();
    let mut dead = Vec::new();
    for dir in places {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if let Some(pid) = pid_of(prefix, &e.file_name().to_string_lossy()) {
                if pid != me && !alive(pid) && !dead.contains(&pid) {
                    dead.push(pid);
                }
            }
        }
    }
    dead
}

/// Sweeps what earlier runs named `<prefix><pid>` left behind when they were killed (`alive`
/// tells whether the run of a pid still goes); `scope_of` gives a run's [`Scope`]. Returns
/// one line per run for the report, and the warnings.
pub fn sweep_leftovers(
    prefix: &str,
    alive: &dyn Fn(u32) -> bool,
    scope_of: &dyn Fn(u32) -> Scope,
) -> Report {
    let mut places = vec![std::env::temp_dir(), PathBuf::from(NETNS_DIR)];
    places.extend(hierarchies(Path::new(CGROUP_ROOT)));
    let mut out = Report::default();
    for pid in dead_runs(&places, prefix, alive) {
        let scope = scope_of(pid);
        let mut r = Report::default();
        if scope.dir.is_dir() {
            r.found.push(scope.dir.display().to_string());
            let s = sweep(&scope);
            r.found.extend(s.found);
            r.warnings.extend(s.warnings);
        } else {
            remove_names(&scope, &mut r);
        }
        out.warnings.extend(r.warnings);
        if !r.found.is_empty() {
            out.found.push(format!(
                "removed the leftovers of an earlier run that was killed (pid {pid}): {}",
                r.found.join(", ")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TempDir;

    #[test]
    fn leftover_names() {
        assert_eq!(pid_of("berth-bench-", "berth-bench-123"), Some(123));
        assert_eq!(pid_of("berth-bench-", "berth-bench-123.monitor"), Some(123));
        assert_eq!(pid_of("berth-bench-", "berth-bench-123.runc"), Some(123));
        assert_eq!(pid_of("berth-bench-", "berth-bench-x"), None);
        assert_eq!(pid_of("berth-bench-", "berth-bench-12x"), None);
        assert_eq!(pid_of("berth-bench-", "berth-test-1"), None);
    }

    #[test]
    fn scope_owns_its_name_and_dotted_kin() {
        let s = Scope::new("/tmp/x".into(), "berth-t-a-1-1".into());
        assert!(s.owns("berth-t-a-1-1"));
        assert!(s.owns("berth-t-a-1-1.monitor"));
        assert!(s.owns(&s.netns("dev")));
        assert!(!s.owns("berth-t-a-1-10"));
        assert!(!s.owns("berth-t-a-1-10.monitor"));
        let r = Scope::per_run("berth-bench-", 42);
        assert_eq!(r.name, "berth-bench-42");
        assert_eq!(r.dir, std::env::temp_dir().join("berth-bench-42"));
    }

    /// A v1 layout in a temp dir: the sandbox's cgroups go, children first; a neighbour whose
    /// name only starts alike stays.
    #[test]
    fn cgroups_of_a_fixture_tree() {
        let t = TempDir::new("cgfix");
        let mk = |p: &str| std::fs::create_dir_all(t.path(p)).unwrap();
        mk("cpu/berth-t-a-1-1/web/inner");
        mk("memory/berth-t-a-1-1.monitor/lxc.monitor.web");
        mk("memory/berth-t-a-1-10/other");
        mk("unified/unrelated");
        let s = Scope::new(t.path("sb"), "berth-t-a-1-1".into());
        let (n, left) = remove_cgroups(&t.0, &s);
        assert_eq!((n, left.len()), (2, 0));
        assert!(!t.path("cpu/berth-t-a-1-1").exists());
        assert!(!t.path("memory/berth-t-a-1-1.monitor").exists());
        assert!(t.path("memory/berth-t-a-1-10/other").exists());
        assert!(t.path("unified/unrelated").exists());
        // pure v2: the root's children are cgroups, not hierarchies
        std::fs::write(t.path("cgroup.procs"), "").unwrap();
        assert_eq!(hierarchies(&t.0), vec![t.0.clone()]);
    }

    #[test]
    fn netns_and_dead_runs_of_a_fixture() {
        let t = TempDir::new("nsfix");
        for n in [
            "berth-bench-7.net",
            "berth-bench-70",
            "bdev1",
            "berth-bench-8",
        ] {
            std::fs::write(t.path(n), "").unwrap();
        }
        let s = Scope::per_run("berth-bench-", 7);
        assert_eq!(
            remove_netns(&t.0, &s),
            vec!["berth-bench-7.net".to_string()]
        );
        assert!(t.path("berth-bench-70").exists());
        let mut dead = dead_runs(std::slice::from_ref(&t.0), "berth-bench-", &|p| p == 8);
        dead.sort();
        assert_eq!(dead, vec![70]);
    }
}
