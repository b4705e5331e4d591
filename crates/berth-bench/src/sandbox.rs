//! The benchmark's berth: the berth-testkit sandbox in `$TMPDIR/berth-bench-<pid>` (cgroup
//! parent `berth-bench-<pid>`, stop timeout 10 s, the whole CPU for the group, its own process
//! groups so Ctrl-C reaches only berth-bench), torn down completely when dropped (also after
//! an error or Ctrl-C), and the sweep of what an interrupted earlier run left behind.

use std::path::PathBuf;

use berth_core::config::Config;
use berth_testkit::{Options, Pkg, SandboxError, Scope};

use crate::procfs;
use crate::util::{self, progress, Error, Result};

const DIR_PREFIX: &str = "berth-bench-";

/// The version of every package of the suites.
const VERSION: &str = "1";

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

impl PkgSpec {
    /// The kit's package, for keys the spec has no field for (`Pkg::table`).
    pub fn to_pkg(&self) -> Pkg {
        let argv: Vec<&str> = self.argv.iter().map(String::as_str).collect();
        let mut p = Pkg::new(&self.name, VERSION, &argv);
        p.description = "berth-bench payload".into();
        if self.host_base {
            p = p.package_key("base = \"host\"");
        }
        for (path, data, mode) in &self.files {
            p = p.file(path, data);
            p.modes.push((path.clone(), *mode));
        }
        p.with_busybox = self.busybox;
        p.applets = &[];
        p
    }
}

/// The sandbox's device policy: the group may use every CPU. Host runs of the host-vs-guest
/// suites join siblings of the container's cgroup, so under the default group cap (T_u = 50 %
/// of all CPUs, one CPU here) both sides would share one CPU: parallel instances and "host and
/// guest at once" would measure the device policy, not the container. The governor suite
/// takes this out again to work with the default T_u.
pub const UNCAPPED_POLICY: &str = "[policy]\ncpu_max = \"100%\"\n";

impl From<SandboxError> for Error {
    fn from(e: SandboxError) -> Error {
        Error(e.to_string())
    }
}

/// What the run with this pid owns: its directory, the cgroups and network namespaces named
/// `berth-bench-<pid>[.<what>]`, the bare LXC and runc containers of the activation suite.
fn scope(pid: u32) -> Scope {
    let mut s = Scope::per_run(DIR_PREFIX, pid);
    s.lxcpaths.push("bare-lxc".into());
    s.runc_roots.push("runc-state".into());
    s.keep_dir = std::env::var_os("BERTH_BENCH_KEEP").is_some();
    s
}

/// The kit's sandbox (see its fields and methods) with the benchmark's errors and the
/// loaded configuration.
pub struct Sandbox {
    kit: berth_testkit::Sandbox,
    pub cfg: Config,
}

impl std::ops::Deref for Sandbox {
    type Target = berth_testkit::Sandbox;
    fn deref(&self) -> &berth_testkit::Sandbox {
        &self.kit
    }
}

impl std::ops::DerefMut for Sandbox {
    fn deref_mut(&mut self) -> &mut berth_testkit::Sandbox {
        &mut self.kit
    }
}

/// The benchmark's choices for a sandbox of `scope`: its own process groups, Ctrl-C checked
/// while the daemon comes up, warnings said as berth-bench's.
fn options(berth: PathBuf, scope: Scope, stop_timeout: &'static str, extra: String) -> Options {
    let mut opts = Options::new(berth, scope);
    opts.stop_timeout = stop_timeout;
    opts.config_extra = extra;
    opts.own_process_group = true;
    opts.interrupted = util::interrupted;
    opts.program = "berth-bench";
    opts
}

impl Sandbox {
    pub fn create(berth: PathBuf) -> Result<Sandbox> {
        let scope = scope(std::process::id());
        let sb = Sandbox::with(options(berth, scope, "10s", UNCAPPED_POLICY.into()))?;
        // The activation suite's peers keep their state where a device keeps it too.
        for d in ["bare-lxc", "runc-state"] {
            tmpfs(&sb.dir.join(d))?;
        }
        Ok(sb)
    }

    /// A second berth of the same binary in `DIR/<what>` with cgroup parent `<parent>.<what>`
    /// (this run's names, so the sweep of a killed run finds it), its configuration ending in
    /// `extra`; swept when dropped.
    pub fn nested(&self, what: &str, stop_timeout: &'static str, extra: &str) -> Result<Sandbox> {
        let mut scope = Scope::new(
            self.dir.join(what),
            format!("{}.{what}", self.cgroup_parent),
        );
        scope.keep_dir = self.scope().keep_dir;
        let opts = options(self.berth.clone(), scope, stop_timeout, extra.into());
        Sandbox::with(opts)
    }

    fn with(opts: Options) -> Result<Sandbox> {
        let kit = berth_testkit::Sandbox::create(opts)?;
        // On a device the run directory is /run, a tmpfs: what berth writes there on every
        // start (LXC configuration, seccomp profile, bindings) costs no disk write there, so
        // the benchmark's is one too. The sweep unmounts it with everything else.
        tmpfs(&kit.dir.join("run"))?;
        let cfg = Config::from_file(std::fs::read_to_string(&kit.config), &kit.config)
            .map_err(|e| format!("sandbox config: {e}"))?;
        Ok(Sandbox { kit, cfg })
    }

    /// Runs berth, fails with its stderr and the end of the daemon log; returns stdout.
    pub fn ok(&self, args: &[&str]) -> Result<String> {
        Ok(self.kit.ok(args)?)
    }

    /// Runs `berth --json ARGS` and parses its output.
    pub fn json(&self, args: &[&str]) -> Result<serde_json::Value> {
        Ok(self.kit.json(args)?)
    }

    /// The file `berth pack` writes for this package.
    pub fn package_file(&self, name: &str) -> PathBuf {
        self.kit.package_file(name, VERSION)
    }

    pub fn pack(&self, p: &PkgSpec) -> Result<()> {
        self.pack_pkg(&p.to_pkg())
    }

    pub fn pack_pkg(&self, p: &Pkg) -> Result<()> {
        self.kit.pack(p)?;
        Ok(())
    }

    pub fn build_repo(&self) -> Result<()> {
        Ok(self.kit.build_repo()?)
    }

    pub fn start_daemon(&mut self) -> Result<()> {
        Ok(self.kit.start_daemon()?)
    }

    /// Stops the daemon (its containers keep running) and starts it again with `env`.
    pub fn restart_daemon_env(&mut self, env: &[(&str, &str)]) -> Result<()> {
        self.kit.stop_daemon();
        Ok(self.kit.start_daemon_env(env)?)
    }
}

/// Stops every container of `sb` from inside the network namespace `ns` its daemon ran in,
/// where LXC's command sockets are (the sweep's lxc-stop, from the host's, does not reach
/// them).
pub fn stop_in_netns(sb: &Sandbox, ns: &str) {
    let lxcpath = sb.lxcpath();
    for e in std::fs::read_dir(&lxcpath).into_iter().flatten().flatten() {
        let _ = std::process::Command::new("nsenter")
            .arg(format!("--net=/run/netns/{ns}"))
            .arg("lxc-stop")
            .arg("-P")
            .arg(&lxcpath)
            .arg("-n")
            .arg(e.file_name())
            .arg("-k")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// A small tmpfs at `dir` (made when missing), traversable by the containers' ids.
fn tmpfs(dir: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    util::run(
        std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "mode=0711,size=64m", "tmpfs"])
            .arg(dir),
    )?;
    Ok(())
}

impl Drop for Sandbox {
    /// A gentle stop first; the kit's sandbox sweeps the rest when it goes.
    fn drop(&mut self) {
        progress!("cleaning up {}", self.dir.display());
        self.kit.stop_daemon();
    }
}

/// A berth-bench with this pid is still running (pid reuse by another program does not count).
fn bench_alive(pid: u32) -> bool {
    procfs::comm(pid as i32).is_some_and(|c| c == "berth-bench")
}

/// Removes what earlier runs whose berth-bench is gone left behind (temp dirs with their
/// daemon, containers, mounts and loop devices; cgroups; network namespaces); returns one
/// line per run, for the report.
pub fn sweep_leftovers() -> Vec<String> {
    let r = berth_testkit::sweep_leftovers(DIR_PREFIX, &bench_alive, &scope);
    for w in &r.warnings {
        eprintln!("berth-bench: warning: {w}");
    }
    for line in &r.found {
        eprintln!("berth-bench: {line}");
    }
    r.found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_owns_its_pid_names() {
        let s = scope(123);
        assert_eq!(s.name, "berth-bench-123");
        for n in [
            "berth-bench-123.monitor",
            "berth-bench-123.runc",
            "berth-bench-123.net",
            // the net suite's nested sandbox and its namespaces
            "berth-bench-123.net.monitor",
            "berth-bench-123.net.dev",
        ] {
            assert!(s.owns(n), "{n}");
        }
        assert!(!s.owns("berth-bench-1234"));
        assert!(s.lxcpaths.contains(&PathBuf::from("bare-lxc")));
    }

    #[test]
    fn specs_become_kit_packages() {
        let p = PkgSpec {
            name: "gov".into(),
            argv: vec!["/bin/busybox".into(), "sh".into(), "/run.sh".into()],
            files: vec![("run.sh".into(), b"exit 0\n".to_vec(), 0o644)],
            busybox: true,
            host_base: true,
        }
        .to_pkg();
        assert_eq!(p.mode_of("run.sh"), Some(0o644));
        assert!(p.applets.is_empty());
        let m = p.manifest();
        assert!(
            m.contains("version = \"1\"\ndescription = \"berth-bench payload\"\nbase = \"host\"\n")
        );
    }
}
