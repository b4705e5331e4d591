//! A berth of its own for the benchmark: configuration, key, repository, daemon and cgroup
//! parent in `$TMPDIR/berth-bench-<pid>`, torn down completely when dropped (also after an
//! error or Ctrl-C), and the sweep that removes what an interrupted earlier run left behind.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use berth_core::config::Config;

use crate::procfs;
use crate::util::{bail, progress, run, run_quiet, which, Context, Result};

const DIR_PREFIX: &str = "berth-bench-";

/// A package the suites need in the repository.
pub struct PkgSpec {
    pub name: String,
    pub argv: Vec<String>,
    /// Files relative to the package root: path, contents, mode.
    pub files: Vec<(String, Vec<u8>, u32)>,
    /// Puts a static busybox at /bin/busybox.
    pub busybox: bool,
    /// `base = "host"`: the host's library directories, read-only (for dynamically linked
    /// host tools copied into the package).
    pub host_base: bool,
}

/// The sandbox's device policy: the group may use every CPU. Host runs of the host-vs-guest
/// suites join siblings of the container's cgroup, so under the default group cap (T_u = 50 %
/// of all CPUs, one CPU here) both sides would share one CPU: parallel instances and "host and
/// guest at once" would measure the device policy, not the container. The governor suite
/// takes this out again to work with the default T_u.
pub const UNCAPPED_POLICY: &str = "[policy]\ncpu_max = \"100%\"\n";

pub struct Sandbox {
    pub dir: PathBuf,
    pub config_path: PathBuf,
    pub cfg: Config,
    pub berth: PathBuf,
    pub repo: PathBuf,
    pub cgroup_parent: String,
    daemon: Option<Child>,
}

/// The directory of the run with this pid.
pub fn dir_for(pid: u32) -> PathBuf {
    std::env::temp_dir().join(format!("{DIR_PREFIX}{pid}"))
}

/// The name of a network namespace of this run (`ip netns` style, under /run/netns): the
/// prefix lets the next start remove it when this run is killed outright.
#[allow(dead_code)] // for the suites that make namespaces (net)
pub fn netns_name(what: &str) -> String {
    format!("{DIR_PREFIX}{}.{what}", std::process::id())
}

const NETNS_DIR: &str = "/run/netns";

/// Removes the named network namespaces of the run with `pid`; returns their names.
fn remove_netns(pid: u32) -> Vec<String> {
    let mut gone = Vec::new();
    let Ok(d) = std::fs::read_dir(NETNS_DIR) else {
        return gone;
    };
    for e in d.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if pid_of(&name) == Some(pid) {
            let _ = berth_sys::mount::umount(&e.path(), true);
            if std::fs::remove_file(e.path()).is_ok() {
                gone.push(name);
            }
        }
    }
    gone
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

/// Every top-level cgroup name a run with this pid may create: berth's parent and LXC's
/// monitor parent (`<parent>.monitor`), the bare lxc-execute peer's (below the same parent)
/// and runc's (`<parent>.runc`).
pub fn cgroup_names(pid: u32) -> Vec<String> {
    let p = format!("{DIR_PREFIX}{pid}");
    vec![format!("{p}.runc"), format!("{p}.monitor"), p]
}

impl Sandbox {
    pub fn create(berth: PathBuf) -> Result<Sandbox> {
        let pid = std::process::id();
        let dir = dir_for(pid);
        if dir.exists() {
            sweep(&dir, pid);
        }
        std::fs::create_dir_all(dir.join("repo/packages")).context("create sandbox")?;
        std::fs::create_dir_all(dir.join("keys")).context("create sandbox")?;
        let cgroup_parent = format!("{DIR_PREFIX}{pid}");
        let config_path = dir.join("berth.toml");
        let text = format!(
            "repository = \"file://{repo}\"\n[paths]\nstate = \"{state}\"\nrun = \"{run}\"\nkeys = \"{keys}\"\nlxcpath = \"{lxc}\"\n[containers]\ncgroup_parent = \"{cgroup_parent}\"\nstop_timeout = \"10s\"\n{UNCAPPED_POLICY}",
            repo = dir.join("repo").display(),
            state = dir.join("state").display(),
            run = dir.join("run").display(),
            keys = dir.join("keys").display(),
            lxc = dir.join("run/lxc").display(),
        );
        std::fs::write(&config_path, text).context("write berth.toml")?;
        let cfg = Config::from_file(std::fs::read_to_string(&config_path), &config_path).map_err(|e| format!("sandbox config: {e}"))?;
        let sb = Sandbox {
            repo: dir.join("repo"),
            config_path,
            cfg,
            berth,
            cgroup_parent,
            daemon: None,
            dir,
        };
        sb.ok(&[
            "key",
            "generate",
            "-o",
            &sb.dir.join("vendor").display().to_string(),
        ])?;
        std::fs::copy(sb.dir.join("vendor.pub"), sb.dir.join("keys/vendor.pub"))
            .context("copy the public key")?;
        Ok(sb)
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.berth);
        c.args(args)
            .env("BERTH_CONFIG", &self.config_path)
            .stdin(Stdio::null())
            .process_group(0);
        c
    }

    /// Runs berth, fails with its stderr; returns stdout.
    pub fn ok(&self, args: &[&str]) -> Result<String> {
        run(&mut self.cmd(args)).map_err(|e| {
            let log = std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            if tail.is_empty() {
                e
            } else {
                format!("{e}\n  daemon log ends:\n    {}", tail.join("\n    ")).into()
            }
        })
    }

    /// Runs `berth --json ARGS` and parses its output.
    pub fn json(&self, args: &[&str]) -> Result<serde_json::Value> {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let s = self.ok(&a)?;
        serde_json::from_str(&s).map_err(|e| format!("berth {args:?}: bad JSON ({e}): {s}").into())
    }

    /// The file `berth pack` writes for this package.
    pub fn package_file(&self, name: &str) -> PathBuf {
        self.repo.join("packages").join(format!("{name}-1.sqfs"))
    }

    pub fn pack(&self, p: &PkgSpec) -> Result<()> {
        let dir = self.dir.join("src").join(&p.name);
        std::fs::create_dir_all(dir.join(".berth")).context("create package tree")?;
        if p.busybox {
            let bb = which("busybox").ok_or("busybox is missing: install busybox-static")?;
            std::fs::create_dir_all(dir.join("bin")).context("create package tree")?;
            std::fs::copy(&bb, dir.join("bin/busybox")).context("copy busybox")?;
        }
        for (path, data, mode) in &p.files {
            let f = dir.join(path);
            if let Some(d) = f.parent() {
                std::fs::create_dir_all(d).context(format!("create {}", d.display()))?;
            }
            std::fs::write(&f, data).context(format!("write {}", f.display()))?;
            std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(*mode))
                .context(format!("chmod {}", f.display()))?;
        }
        let argv: Vec<String> = p.argv.iter().map(|a| format!("{a:?}")).collect();
        let manifest = format!(
            "[package]\nname = \"{}\"\nversion = \"1\"\ndescription = \"berth-bench payload\"\n{}\n[entrypoint]\nargv = [{}]\n",
            p.name,
            if p.host_base { "base = \"host\"\n" } else { "" },
            argv.join(", ")
        );
        std::fs::write(dir.join(".berth/manifest.toml"), manifest).context("write manifest")?;
        let out = self.package_file(&p.name);
        self.ok(&[
            "pack",
            &dir.display().to_string(),
            "-o",
            &out.display().to_string(),
        ])?;
        Ok(())
    }

    pub fn build_repo(&self) -> Result<()> {
        std::fs::File::create(self.repo.join("trusted.txt")).context("write trusted.txt")?;
        self.ok(&[
            "repo",
            "build",
            &self.repo.display().to_string(),
            "--key",
            &self.dir.join("vendor.sec").display().to_string(),
        ])?;
        Ok(())
    }

    pub fn start_daemon(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("daemon.log"))
            .context("open daemon.log")?;
        let mut c = self.cmd(&["daemon"]);
        c.stdout(log.try_clone().context("daemon.log")?).stderr(log);
        self.daemon = Some(c.spawn().context("start berth daemon")?);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            crate::util::check_interrupted()?;
            if self
                .cmd(&["status"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
            {
                return Ok(());
            }
            if let Some(st) = self
                .daemon
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.daemon = None;
                let log = std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default();
                bail!("berth daemon exited at start ({st}):\n{log}");
            }
            if Instant::now() > deadline {
                bail!("berth daemon did not answer within 20 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn daemon_pid(&self) -> Option<i32> {
        self.daemon.as_ref().map(|c| c.id() as i32)
    }

    /// Stops the daemon: SIGTERM, then SIGKILL after 5 s.
    pub fn stop_daemon(&mut self) {
        if let Some(mut c) = self.daemon.take() {
            let pid = c.id() as i32;
            let _ = berth_sys::process::kill(pid, libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        progress!("cleaning up {}", self.dir.display());
        self.stop_daemon();
        sweep(&self.dir, std::process::id());
    }
}

/// Removes everything the run with `pid` created in `dir`: runc and LXC containers, their
/// processes, mounts below `dir`, the run's cgroups and the directory itself. Safe to call
/// on a partial or already-cleaned directory. Returns what it found, for the report.
pub fn sweep(dir: &Path, pid: u32) -> Vec<String> {
    let mut found = Vec::new();
    let me = std::process::id() as i32;
    // A daemon (or shim) of that run would restart or hold things: kill processes that name
    // the directory in their arguments or environment (BERTH_CONFIG) first.
    let kill_ours = |sig: i32| {
        let mut n = 0;
        for p in procfs::pids() {
            if p == me || p == 1 {
                continue;
            }
            if procfs::mentions(&procfs::cmdline(p), dir)
                || procfs::mentions(&procfs::environ(p), dir)
            {
                let _ = berth_sys::process::kill(p, sig);
                n += 1;
            }
        }
        n
    };
    let is_daemon = |p: i32| procfs::cmdline(p).get(1).is_some_and(|a| a == "daemon");
    for p in procfs::pids() {
        if p != me && is_daemon(p) && procfs::mentions(&procfs::environ(p), dir) {
            let _ = berth_sys::process::kill(p, libc::SIGKILL);
        }
    }
    if let Some(runc) = which("runc") {
        let root = dir.join("runc-state");
        if root.is_dir() {
            if let Ok(ids) = std::fs::read_dir(&root) {
                for id in ids.flatten() {
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
    }
    for lxcpath in [dir.join("run/lxc"), dir.join("bare-lxc")] {
        if let Ok(entries) = std::fs::read_dir(&lxcpath) {
            for e in entries
                .flatten()
                .filter(|e| e.path().join("config").is_file())
            {
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
    let n = kill_ours(libc::SIGKILL);
    if n > 0 {
        found.push(format!("{n} processes"));
        let deadline = Instant::now() + Duration::from_secs(3);
        while kill_ours(0) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    for i in 0..3 {
        let Ok(mut mounts) = berth_sys::mount::mounts_under(Path::new("/proc"), dir) else {
            break;
        };
        if mounts.is_empty() {
            break;
        }
        if i == 0 {
            found.push(format!("{} mounts", mounts.len()));
        }
        mounts.reverse();
        for m in mounts {
            let _ = berth_sys::mount::umount(&m.mount_point, true);
        }
    }
    let loops = detach_loops(dir);
    if !loops.is_empty() {
        found.push(format!("loop devices {}", loops.join(", ")));
    }
    let ns = remove_netns(pid);
    if !ns.is_empty() {
        found.push(format!("network namespaces {}", ns.join(", ")));
    }
    let cg = remove_cgroups(pid);
    if cg > 0 {
        found.push(format!("{cg} cgroups"));
    }
    match berth_sys::mount::mounts_under(Path::new("/proc"), dir) {
        Ok(m) if m.is_empty() => {
            if std::env::var_os("BERTH_BENCH_KEEP").is_none() {
                if let Err(e) = std::fs::remove_dir_all(dir) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        eprintln!("berth-bench: warning: cannot remove {}: {e}", dir.display());
                    }
                }
            }
        }
        Ok(m) => eprintln!(
            "berth-bench: warning: {} still has {} mounts; not removing it",
            dir.display(),
            m.len()
        ),
        Err(e) => eprintln!("berth-bench: warning: {e}"),
    }
    found
}

/// The cgroup hierarchies: every v1 controller directory and the unified one (or the root
/// itself on a pure v2 host).
fn hierarchies() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let mut v = vec![root.to_path_buf()];
    if let Ok(d) = std::fs::read_dir(root) {
        for e in d.flatten() {
            let p = e.path();
            // Controller directories of v1 (not a v2 child cgroup, which has cgroup.procs
            // directly below the mount point of the whole tree).
            if p.is_dir() && !p.is_symlink() && !root.join("cgroup.procs").exists() {
                v.push(p);
            }
        }
    }
    v
}

/// rmdir a cgroup and everything below it, children first.
fn rmdir_tree(p: &Path) -> bool {
    if let Ok(kids) = std::fs::read_dir(p) {
        for k in kids.flatten() {
            let kp = k.path();
            if kp.is_dir() && !kp.is_symlink() {
                rmdir_tree(&kp);
            }
        }
    }
    std::fs::remove_dir(p).is_ok() || !p.exists()
}

/// Removes the run's cgroups; returns how many top-level ones there were.
fn remove_cgroups(pid: u32) -> usize {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut count = 0;
    loop {
        let mut left = Vec::new();
        for h in hierarchies() {
            for name in cgroup_names(pid) {
                let p = h.join(&name);
                if p.is_dir() {
                    count += 1;
                    if !rmdir_tree(&p) {
                        left.push(p);
                    }
                }
            }
        }
        if left.is_empty() {
            return count;
        }
        if Instant::now() > deadline {
            for p in left {
                eprintln!("berth-bench: warning: cannot remove cgroup {}", p.display());
            }
            return count;
        }
        count = 0;
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A berth-bench with this pid is still running (pid reuse by another program does not count).
fn bench_alive(pid: u32) -> bool {
    procfs::comm(pid as i32).is_some_and(|c| c == "berth-bench")
}

fn pid_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(DIR_PREFIX)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let tail = &rest[digits.len()..];
    if digits.is_empty() || !(tail.is_empty() || tail.starts_with('.')) {
        return None;
    }
    digits.parse().ok()
}

/// Removes what earlier runs whose berth-bench is gone left behind (temp dirs with their
/// daemon, containers, mounts and loop devices; cgroups; network namespaces); returns one
/// line per run, for the report.
pub fn sweep_leftovers() -> Vec<String> {
    let me = std::process::id();
    let mut dead = Vec::new();
    let mut names = |dir: &Path| {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if let Some(pid) = pid_of(&e.file_name().to_string_lossy()) {
                if pid != me && !bench_alive(pid) && !dead.contains(&pid) {
                    dead.push(pid);
                }
            }
        }
    };
    names(&std::env::temp_dir());
    names(Path::new(NETNS_DIR));
    for h in hierarchies() {
        names(&h);
    }
    let mut report = Vec::new();
    for pid in dead {
        let dir = dir_for(pid);
        let mut found = Vec::new();
        if dir.is_dir() {
            found.push(dir.display().to_string());
            found.extend(sweep(&dir, pid));
        } else {
            let ns = remove_netns(pid);
            if !ns.is_empty() {
                found.push(format!("network namespaces {}", ns.join(", ")));
            }
            let cg = remove_cgroups(pid);
            if cg > 0 {
                found.push(format!("{cg} cgroups"));
            }
        }
        if found.is_empty() {
            continue;
        }
        let line = format!(
            "removed the leftovers of an earlier run that was killed (pid {pid}): {}",
            found.join(", ")
        );
        eprintln!("berth-bench: {line}");
        report.push(line);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftover_names() {
        assert_eq!(pid_of("berth-bench-123"), Some(123));
        assert_eq!(pid_of("berth-bench-123.monitor"), Some(123));
        assert_eq!(pid_of("berth-bench-123.runc"), Some(123));
        assert_eq!(pid_of("berth-bench-x"), None);
        assert_eq!(pid_of("berth-bench-12x"), None);
        assert_eq!(pid_of("berth-test-1"), None);
    }
}
