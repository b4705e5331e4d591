//! A berth of its own: configuration, vendor key, signed repository, state, run dir,
//! lxcpath and cgroup parent below one directory, a real daemon, the CLI against it. The
//! sandbox sweeps everything it made when dropped (also after a failure).

use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use crate::package::{PackageError, Pkg};
use crate::sweep::{sweep, Scope};

/// How long the daemon may take to answer after it starts.
const DAEMON_START: Duration = Duration::from_secs(20);
/// How long `stop_daemon` waits after SIGTERM before SIGKILL.
const DAEMON_STOP: Duration = Duration::from_secs(5);

/// Errors of a sandbox. I/O errors are part of the message, never a source.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("{op} {path}: {error}")]
    Io {
        op: &'static str,
        path: PathBuf,
        error: io::Error,
    },
    #[error(transparent)]
    Package(#[from] PackageError),
    #[error("cannot run {program}: {error}")]
    Spawn { program: String, error: io::Error },
    /// The command failed; `daemon_log` is the whole log, the message shows its end.
    #[error(
        "berth {} failed ({status}): {}{}{}",
        args.join(" "),
        stderr.trim(),
        stdout.trim(),
        log_tail(daemon_log)
    )]
    Failed {
        args: Vec<String>,
        status: ExitStatus,
        stdout: String,
        stderr: String,
        daemon_log: String,
    },
    #[error("berth {args:?}: bad JSON ({error}): {text}")]
    BadJson {
        args: Vec<String>,
        error: serde_json::Error,
        text: String,
    },
    #[error("berth daemon already started")]
    DaemonRunning,
    /// A test hands a test hook's switch to a berth built without the hooks: the switch would
    /// be ignored, and the test would test nothing.
    #[error(
        "{berth} was built without the test hooks, so {switch} would be ignored: build the \
         tests' berth with them (cargo test --features berth/test-hooks, as scripts/test.sh does)"
    )]
    NoTestHooks { berth: String, switch: String },
    #[error("berth daemon exited at start ({status}):\n{log}")]
    DaemonExited { status: ExitStatus, log: String },
    #[error("berth daemon did not answer within {} s", DAEMON_START.as_secs())]
    DaemonTimeout,
    #[error("interrupted; cleaning up")]
    Interrupted,
    #[error(transparent)]
    Mounts(#[from] berth_sys::mount::SysError),
}

/// The last lines of a daemon log, to follow an error message.
fn log_tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let tail = &lines[lines.len().saturating_sub(5)..];
    if tail.is_empty() {
        String::new()
    } else {
        format!("\n  daemon log ends:\n    {}", tail.join("\n    "))
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// What differs between the sandboxes of the end-to-end tests and of berth-bench.
pub struct Options {
    /// The berth binary.
    pub berth: PathBuf,
    /// The directory and the names of cgroups and network namespaces.
    pub scope: Scope,
    /// `[containers] stop_timeout`.
    pub stop_timeout: &'static str,
    /// Appended to the configuration the sandbox starts with.
    pub config_extra: String,
    /// Runs berth (daemon and CLI) in process groups of their own, so a Ctrl-C reaches only
    /// the caller, which then cleans up.
    pub own_process_group: bool,
    /// Polled while the daemon comes up: true gives up with [`SandboxError::Interrupted`].
    pub interrupted: fn() -> bool,
    /// Who says the warnings of the sweep ("berth-bench: warning: …").
    pub program: &'static str,
    /// Runs every berth of the sandbox (daemon and CLI) as on an old kernel: the syscalls
    /// newer than Linux 4.14 answer ENOSYS and PSI is hidden (`berth_sys::oldkernel`,
    /// docs/kernels.md). [`Options::new`] sets it when `BERTH_TEST_OLDKERNEL=1`.
    pub old_kernel: bool,
}

/// Whether `BERTH_TEST_OLDKERNEL=1` asks for every sandbox to run as on an old kernel.
pub fn old_kernel_from_env() -> bool {
    std::env::var_os("BERTH_TEST_OLDKERNEL").is_some_and(|v| v == "1")
}

impl Options {
    /// The tests' choices: stop_timeout 5 s, nothing extra, never interrupted.
    pub fn new(berth: PathBuf, scope: Scope) -> Options {
        Options {
            berth,
            scope,
            stop_timeout: "5s",
            config_extra: String::new(),
            own_process_group: false,
            interrupted: || false,
            program: "berth-testkit",
            old_kernel: old_kernel_from_env(),
        }
    }
}

/// The configuration of a sandbox in `dir`; `extra` is appended under [containers] unless it
/// starts with its own table.
pub fn config_text(dir: &Path, cgroup_parent: &str, stop_timeout: &str, extra: &str) -> String {
    // `berth start` reports a payload that ends at once after a short wait
    // (`start_settle`, 300 ms): not in sandboxes, whose tests and benchmarks start
    // containers by the hundred, unless the extra configuration sets it.
    let settle = match extra.contains("start_settle") {
        true => "",
        false => "start_settle = \"0s\"\n",
    };
    format!(
        "repository = \"file://{repo}\"\n[paths]\nstate = \"{state}\"\nrun = \"{run}\"\nkeys = \"{keys}\"\nlxcpath = \"{lxc}\"\n[containers]\ncgroup_parent = \"{cgroup_parent}\"\nstop_timeout = \"{stop_timeout}\"\n{settle}{extra}\n",
        repo = dir.join("repo").display(),
        state = dir.join("state").display(),
        run = dir.join("run").display(),
        keys = dir.join("keys").display(),
        lxc = dir.join("run/lxc").display(),
    )
}

pub struct Sandbox {
    pub dir: PathBuf,
    pub config: PathBuf,
    pub repo: PathBuf,
    /// The vendor's secret key that signs the repository.
    pub key: PathBuf,
    pub cgroup_parent: String,
    /// The berth binary.
    pub berth: PathBuf,
    pub daemon: Option<Child>,
    pub daemon_log: PathBuf,
    /// Runs the daemon in this network namespace (`/run/netns/NAME`) via nsenter.
    pub daemon_netns: Option<String>,
    trusted: Vec<String>,
    scope: Scope,
    stop_timeout: &'static str,
    own_process_group: bool,
    interrupted: fn() -> bool,
    program: &'static str,
    old_kernel: bool,
}

impl Sandbox {
    /// Makes the directories, the configuration and the vendor key (its public half trusted
    /// by the sandbox's berth). What an earlier sandbox of the same scope left goes first.
    pub fn create(opts: Options) -> Result<Sandbox, SandboxError> {
        let dir = opts.scope.dir.clone();
        if dir.exists() {
            sweep(&opts.scope);
        }
        let sb = Sandbox {
            config: dir.join("berth.toml"),
            repo: dir.join("repo"),
            key: dir.join("vendor.sec"),
            cgroup_parent: opts.scope.name.clone(),
            berth: opts.berth,
            daemon: None,
            daemon_log: dir.join("daemon.log"),
            daemon_netns: None,
            trusted: Vec::new(),
            scope: opts.scope,
            stop_timeout: opts.stop_timeout,
            own_process_group: opts.own_process_group,
            interrupted: opts.interrupted,
            program: opts.program,
            old_kernel: opts.old_kernel,
            dir,
        };
        for d in [sb.repo.join("packages"), sb.dir.join("keys")] {
            std::fs::create_dir_all(&d).map_err(io_err("create", &d))?;
        }
        if sb.old_kernel {
            // The daemon gets a mount namespace of its own (to hide PSI): with the sandbox a
            // shared mount, what it mounts below reaches the tests' namespace and the next
            // daemon's, as if it shared ours. The sweep unmounts it last.
            berth_sys::mountns::bind_shared(&sb.dir).map_err(io_err("bind", &sb.dir))?;
        }
        sb.write_config(&opts.config_extra)?;
        sb.ok(&[
            "key",
            "generate",
            "-o",
            &sb.dir.join("vendor").display().to_string(),
        ])?;
        let public = sb.dir.join("vendor.pub");
        std::fs::copy(&public, sb.dir.join("keys/vendor.pub")).map_err(io_err("copy", &public))?;
        Ok(sb)
    }

    /// What the sandbox owns on the host (for naming network namespaces of its own).
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// (Re)writes the configuration with `extra` (see [`config_text`]).
    pub fn write_config(&self, extra: &str) -> Result<(), SandboxError> {
        let text = config_text(&self.dir, &self.cgroup_parent, self.stop_timeout, extra);
        std::fs::write(&self.config, text).map_err(io_err("write", &self.config))
    }

    /// Points the configuration at another repository URL (an HTTP server of a test).
    pub fn set_repository(&self, url: &str) -> Result<(), SandboxError> {
        let text = std::fs::read_to_string(&self.config).map_err(io_err("read", &self.config))?;
        let rest: String = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
        std::fs::write(&self.config, format!("repository = \"{url}\"\n{rest}"))
            .map_err(io_err("write", &self.config))
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }
    pub fn run_dir(&self) -> PathBuf {
        self.dir.join("run")
    }
    pub fn lxcpath(&self) -> PathBuf {
        self.dir.join("run/lxc")
    }

    /// `berth ARGS` against this sandbox's configuration, stdin from /dev/null.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.berth);
        c.args(args);
        self.prepare(&mut c);
        c
    }

    fn prepare(&self, c: &mut Command) {
        c.env("BERTH_CONFIG", &self.config).stdin(Stdio::null());
        if self.own_process_group {
            c.process_group(0);
        }
        if self.old_kernel {
            berth_sys::oldkernel::command(c, true);
        }
    }

    /// Whether its berths run as on an old kernel ([`Options::old_kernel`]).
    pub fn old_kernel(&self) -> bool {
        self.old_kernel
    }

    /// The sandbox's own mount point (old-kernel mode) is no mount of berth's.
    fn berths(&self, mounts: Vec<PathBuf>) -> Vec<PathBuf> {
        mounts.into_iter().filter(|m| *m != self.dir).collect()
    }

    /// Runs berth to completion, whatever its exit status.
    pub fn output(&self, args: &[&str]) -> Result<Output, SandboxError> {
        self.cmd(args)
            .output()
            .map_err(|error| SandboxError::Spawn {
                program: self.berth.display().to_string(),
                error,
            })
    }

    /// Runs berth; fails with its output and the daemon's log unless it succeeds. Returns
    /// stdout.
    pub fn ok(&self, args: &[&str]) -> Result<String, SandboxError> {
        let out = self.output(args)?;
        if !out.status.success() {
            return Err(SandboxError::Failed {
                args: args.iter().map(|a| a.to_string()).collect(),
                status: out.status,
                stdout: stdout(&out),
                stderr: stderr(&out),
                daemon_log: self.daemon_log_text(),
            });
        }
        Ok(stdout(&out))
    }

    /// Runs `berth --json ARGS` and parses its output.
    pub fn json(&self, args: &[&str]) -> Result<serde_json::Value, SandboxError> {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let text = self.ok(&a)?;
        serde_json::from_str(&text).map_err(|error| SandboxError::BadJson {
            args: args.iter().map(|a| a.to_string()).collect(),
            error,
            text,
        })
    }

    pub fn daemon_log_text(&self) -> String {
        std::fs::read_to_string(&self.daemon_log).unwrap_or_default()
    }

    pub fn start_daemon(&mut self) -> Result<(), SandboxError> {
        self.start_daemon_env(&[])
    }

    /// Starts `berth daemon` with more environment (in `daemon_netns` when set) and waits
    /// until it answers `berth status`.
    pub fn start_daemon_env(&mut self, env: &[(&str, &str)]) -> Result<(), SandboxError> {
        if self.daemon.is_some() {
            return Err(SandboxError::DaemonRunning);
        }
        if let Some((switch, _)) = env.iter().find(|(k, _)| is_hook_switch(k)) {
            if !has_test_hooks(&self.berth) {
                return Err(SandboxError::NoTestHooks {
                    berth: self.berth.display().to_string(),
                    switch: switch.to_string(),
                });
            }
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.daemon_log)
            .map_err(io_err("open", &self.daemon_log))?;
        let log2 = log.try_clone().map_err(io_err("open", &self.daemon_log))?;
        let mut c = match &self.daemon_netns {
            Some(ns) => {
                // nsenter joins only the network namespace (ip netns exec would also remount
                // /sys, hiding the cgroup mounts) and execs berth: the pid stays the daemon's.
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/run/netns/{ns}"))
                    .arg(&self.berth)
                    .arg("daemon");
                self.prepare(&mut c);
                c
            }
            None => self.cmd(&["daemon"]),
        };
        c.stdout(log2).stderr(log).envs(env.iter().copied());
        let child = c.spawn().map_err(|error| SandboxError::Spawn {
            program: format!("{} daemon", self.berth.display()),
            error,
        })?;
        self.daemon = Some(child);
        let deadline = Instant::now() + DAEMON_START;
        loop {
            if (self.interrupted)() {
                return Err(SandboxError::Interrupted);
            }
            let up = self
                .cmd(&["status"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if up {
                return Ok(());
            }
            if let Some(status) = self
                .daemon
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.daemon = None;
                let log = self.daemon_log_text();
                return Err(SandboxError::DaemonExited { status, log });
            }
            if Instant::now() > deadline {
                return Err(SandboxError::DaemonTimeout);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn daemon_pid(&self) -> Option<i32> {
        self.daemon.as_ref().map(|c| c.id() as i32)
    }

    /// Sends `signal` to the daemon and reaps it.
    pub fn kill_daemon(&mut self, signal: i32) {
        if let Some(mut c) = self.daemon.take() {
            let _ = berth_sys::process::kill(c.id() as i32, signal);
            let _ = c.wait();
        }
    }

    /// Stops the daemon: SIGTERM, then SIGKILL after 5 s.
    pub fn stop_daemon(&mut self) {
        if let Some(mut c) = self.daemon.take() {
            let _ = berth_sys::process::kill(c.id() as i32, libc::SIGTERM);
            let deadline = Instant::now() + DAEMON_STOP;
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

    /// Waits for the daemon to exit on its own (after fault injection); whether it did.
    pub fn wait_daemon_exit(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let Some(c) = self.daemon.as_mut() else {
            return true;
        };
        while Instant::now() < deadline {
            if !matches!(c.try_wait(), Ok(None)) {
                self.daemon = None;
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Lists the package in the repository's trusted.txt (at the next `build_repo`).
    pub fn trust(&mut self, name: &str) {
        self.trusted.push(name.into());
    }

    /// The image `pack` writes for a package.
    pub fn package_file(&self, name: &str, version: &str) -> PathBuf {
        self.repo
            .join("packages")
            .join(format!("{name}-{version}.sqfs"))
    }

    /// Builds the package's tree and packs it into the repository's packages/.
    pub fn pack(&self, p: &Pkg) -> Result<PathBuf, SandboxError> {
        let dir = self
            .dir
            .join("src")
            .join(format!("{}-{}", p.name, p.version));
        p.write_tree(&dir)?;
        let out = self.package_file(&p.name, &p.version);
        self.ok(&[
            "pack",
            &dir.display().to_string(),
            "-o",
            &out.display().to_string(),
        ])?;
        Ok(out)
    }

    /// Writes trusted.txt and (re)builds and signs the repository index.
    pub fn build_repo(&self) -> Result<(), SandboxError> {
        let trusted = self.repo.join("trusted.txt");
        let text: String = self.trusted.iter().map(|n| format!("{n}\n")).collect();
        std::fs::write(&trusted, text).map_err(io_err("write", &trusted))?;
        self.ok(&[
            "repo",
            "build",
            &self.repo.display().to_string(),
            "--key",
            &self.key.display().to_string(),
        ])?;
        Ok(())
    }

    /// `pack` and `build_repo`.
    pub fn add(&self, p: &Pkg) -> Result<(), SandboxError> {
        self.pack(p)?;
        self.build_repo()
    }

    /// Mount points below the sandbox.
    pub fn mounts(&self) -> Result<Vec<String>, SandboxError> {
        Ok(self
            .berths(crate::mounts::mounts_under(&self.dir)?)
            .iter()
            .map(|m| m.display().to_string())
            .collect())
    }

    /// Mounts below the sandbox that should not be there while no container runs (see
    /// [`crate::mounts::stray`]).
    pub fn stray_mounts(&self) -> Result<Vec<String>, SandboxError> {
        let installed = crate::mounts::installed_images(&self.state_dir());
        let all = self.berths(crate::mounts::mounts_under(&self.dir)?);
        Ok(
            crate::mounts::stray(all, &self.run_dir().join("mnt"), &installed)
                .iter()
                .map(|m| m.display().to_string())
                .collect(),
        )
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.kill_daemon(libc::SIGKILL);
        for w in sweep(&self.scope).warnings {
            eprintln!("{}: warning: {w}", self.program);
        }
    }
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> SandboxError {
    let path = path.to_path_buf();
    move |error| SandboxError::Io { op, path, error }
}

/// The environment switches that only a berth built with the test hooks reads
/// (crates/berth/src/hooks.rs).
pub fn is_hook_switch(name: &str) -> bool {
    name.starts_with("BERTH_TEST_") || name == "BERTH_FAULT" || name.starts_with("BERTH_FORCE_")
}

/// Whether this berth has the test hooks: its `berth version` says so.
pub fn has_test_hooks(berth: &Path) -> bool {
    Command::new(berth)
        .arg("version")
        .env_remove("BERTH_CONFIG")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(", test hooks)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_has_every_path_below_the_sandbox() {
        let t = config_text(Path::new("/s"), "berth-t-x-1-2", "5s", "tmp_size = \"1M\"");
        assert_eq!(
            t,
            "repository = \"file:///s/repo\"\n[paths]\nstate = \"/s/state\"\nrun = \"/s/run\"\n\
             keys = \"/s/keys\"\nlxcpath = \"/s/run/lxc\"\n[containers]\n\
             cgroup_parent = \"berth-t-x-1-2\"\nstop_timeout = \"5s\"\nstart_settle = \"0s\"\n\
             tmp_size = \"1M\"\n"
        );
    }

    #[test]
    fn failure_message_ends_with_the_log() {
        use std::os::unix::process::ExitStatusExt;
        let e = SandboxError::Failed {
            args: vec!["start".into(), "web".into()],
            status: ExitStatus::from_raw(256),
            stdout: String::new(),
            stderr: "no such package\n".into(),
            daemon_log: (1..=7).map(|i| format!("line {i}\n")).collect(),
        };
        assert_eq!(
            e.to_string(),
            "berth start web failed (exit status: 1): no such package\n  daemon log ends:\n    \
             line 3\n    line 4\n    line 5\n    line 6\n    line 7"
        );
        assert_eq!(log_tail(""), "");
    }
}
