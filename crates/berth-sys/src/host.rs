//! The kernel behind one boundary: the operations the daemon's apply code asks of the host,
//! as traits, so that a recording fake (berth-testkit's `fake_host`) can stand in for the
//! kernel in unit tests that run without root, failures included (a mount refused half-way).
//! The daemon holds a [`Host`] of `&'static dyn` parts ([`REAL`] in every build): one pointer
//! per concern, no generics, so the binary carries each operation once.

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind};
use crate::mount::{MountInfo, SysError};
use crate::mountns::{Mount, Step};

/// Mounts and loop devices (the images, merged roots, /data and bindings).
pub trait Mounts: Sync {
    /// [`crate::loopdev::mount_squashfs`]: the image read-only on `target`.
    fn mount_squashfs(&self, image: &Path, target: &Path) -> Result<(), SysError>;
    /// [`crate::loopdev::mount_ext4`]: a capped /data image read-write on `target`; the loop
    /// device used.
    fn mount_ext4(&self, image: &Path, target: &Path) -> Result<PathBuf, SysError>;
    /// [`crate::mount::mount_overlay_ro`]: `lowers` (top first) merged read-only on `target`.
    fn mount_overlay_ro(&self, lowers: &[&Path], target: &Path) -> Result<(), SysError>;
    /// [`crate::mount::bind`].
    fn bind(&self, src: &Path, target: &Path, read_only: bool) -> Result<(), SysError>;
    /// [`crate::mountns::bind_shared`]: `dir` bound onto itself and made a shared mount (a
    /// container's bind anchor).
    fn bind_shared(&self, dir: &Path) -> io::Result<()>;
    /// [`crate::mount::umount`]: whether something was mounted there.
    fn umount(&self, target: &Path, lazy: bool) -> Result<bool, SysError>;
    /// [`crate::mount::mounts_under`]: the mounts at or below `prefix`, as `proc_root`'s
    /// mountinfo shows them.
    fn mounts_under(&self, proc_root: &Path, prefix: &Path) -> Result<Vec<MountInfo>, SysError>;
    /// [`crate::mountns::clone_tree`]: a detached copy of the mount at `image`.
    fn clone_tree(&self, image: &Path) -> io::Result<OwnedFd>;
    /// [`crate::mountns::lock_tree`]: the detached copy made read-only, nosuid, nodev.
    fn lock_tree(&self, tree: &OwnedFd) -> io::Result<()>;
    /// [`crate::mountns::at_target`]: `m` at `at` in the mount namespace of `pid`.
    fn at_target(
        &self,
        proc_root: &Path,
        pid: i32,
        at: PathBuf,
        m: Mount,
        id: (u64, u64),
        step: Step,
    ) -> io::Result<()>;
    /// [`crate::mountns::shows_at`]: whether `at` in the mount namespace of `pid` shows `id`.
    fn shows_at(&self, proc_root: &Path, pid: i32, at: PathBuf, id: (u64, u64))
        -> io::Result<bool>;
}

/// Signals to processes: a container's init and payload, the daemon's helpers.
pub trait Signals: Sync {
    /// [`crate::process::kill`].
    fn kill(&self, pid: libc::pid_t, sig: libc::c_int) -> io::Result<()>;
}

/// Processes the daemon starts: its own binary as a container's shim or as a helper (a
/// health probe, a scheduled job's run).
pub trait Processes: Sync {
    /// Runs `exe` with `args` and the variables of `env` that have a value added to the
    /// daemon's environment, stdin from /dev/null, stdout and stderr as given.
    fn spawn(
        &self,
        exe: &Path,
        args: &[String],
        env: &[(&str, Option<&str>)],
        stdout: Stdio,
        stderr: Stdio,
    ) -> io::Result<Child>;
}

/// What LXC knows of a container: its monitor, and through liblxc its init.
pub trait Lxc: Sync {
    /// Whether an LXC monitor of `name` listens on its command socket (LXC's abstract
    /// socket `@<lxcpath>/<name>/command`): the container exists, with or without a shim.
    fn monitor_alive(&self, lxcpath: &Path, name: &str) -> bool;
    /// liblxc ([`crate::lxc::Container`]): the init pid of `name` while it runs.
    fn running_init(&self, lxcpath: &Path, name: &str) -> Option<i32>;
}

/// A tool run that did not get as far as an exit status.
#[derive(Debug)]
pub enum ToolError {
    /// It could not be started (not in PATH, not executable, no memory to fork).
    Spawn(io::Error),
    /// It started, but its output or its end could not be had.
    Wait(io::Error),
}

impl ToolError {
    /// The error, whichever step it was.
    pub fn io(&self) -> &io::Error {
        match self {
            ToolError::Spawn(e) | ToolError::Wait(e) => e,
        }
    }
}

/// The system's tools the daemon runs for what it has no syscall of its own for: links
/// (`ip`), berth's nftables tables (`nft`), its DHCP server (`dnsmasq`), a /data image's file
/// system (`mkfs.ext4`, `e2fsck`, `resize2fs`), a delta's decoding (`zstd`).
pub trait Tools: Sync {
    /// Runs `prog` (a path, or a name looked up in PATH) with `args`, `input` on its stdin
    /// (else /dev/null), and waits for it, at most `limit`: its exit status, stdout and
    /// stderr. Past the limit it is killed with its process group (SIGKILL), and the error
    /// says so (`TimedOut`): no tool holds the daemon, and the op lock it may hold, for ever.
    /// `input` is written before the limit counts (a ruleset: a few KiB, within a pipe's
    /// buffer).
    fn run(
        &self,
        prog: &str,
        args: &[&str],
        input: Option<&[u8]>,
        limit: Duration,
    ) -> Result<Output, ToolError>;
}

/// How long a quick tool (`ip`, `nft`, `apparmor_parser`) may run before it is killed.
pub const TOOL_LIMIT: Duration = Duration::from_secs(30);
/// How long a tool that works through a file (`mkfs.ext4`, `e2fsck`, `resize2fs` on a /data
/// image, `zstd` rebuilding an image from a delta) may run on a slow device's flash. Two of
/// them in one start stay well within the supervisor's 10 minutes for one intent.
pub const LONG_TOOL_LIMIT: Duration = Duration::from_secs(240);

/// [`Tools::run`] of a tool that must succeed: its stdout, or an error naming the command:
/// `Unavailable` when it cannot run (`{prog}: cannot run it (…); berth needs {prog} in PATH`),
/// `Refused` when it fails (`{prog} {args} failed ({status}): {stderr}`).
pub fn run_checked(
    tools: &dyn Tools,
    prog: &str,
    args: &[&str],
    input: Option<&str>,
    limit: Duration,
) -> Result<String, Error> {
    let o = match tools.run(prog, args, input.map(str::as_bytes), limit) {
        Ok(o) => o,
        Err(ToolError::Spawn(e)) => {
            let why = format!("{prog}: cannot run it ({e}); berth needs {prog} in PATH");
            return Err(Error::new(ErrorKind::Unavailable, why));
        }
        Err(ToolError::Wait(e)) => {
            return Err(Error::new(ErrorKind::Refused, format!("{prog}: {e}")))
        }
    };
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&o.stderr);
        let why = format!(
            "{prog} {} failed ({}): {}",
            args.join(" "),
            o.status,
            err.trim()
        );
        Err(Error::new(ErrorKind::Refused, why))
    }
}

/// What the daemon asks of the host, one part per concern.
pub struct Host {
    pub mounts: &'static dyn Mounts,
    pub signals: &'static dyn Signals,
    pub processes: &'static dyn Processes,
    pub lxc: &'static dyn Lxc,
    pub tools: &'static dyn Tools,
}

/// The kernel itself.
pub static REAL: Host = Host {
    mounts: &RealMounts,
    signals: &RealSignals,
    processes: &RealProcesses,
    lxc: &RealLxc,
    tools: &RealTools,
};

struct RealTools;

impl Tools for RealTools {
    fn run(
        &self,
        prog: &str,
        args: &[&str],
        input: Option<&[u8]>,
        limit: Duration,
    ) -> Result<Output, ToolError> {
        use std::io::Write;
        let deadline = Instant::now() + limit;
        let mut cmd = std::process::Command::new(prog);
        cmd.args(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Its own process group: at the limit, what it started goes with it.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut c = cmd.spawn().map_err(ToolError::Spawn)?;
        if let (Some(i), Some(mut s)) = (input, c.stdin.take()) {
            let _ = s.write_all(i);
        }
        let pipes = [
            c.stdout.take().map(OwnedFd::from),
            c.stderr.take().map(OwnedFd::from),
        ];
        let mut outs = [Vec::new(), Vec::new()];
        let ended =
            drain(&pipes, &mut outs, deadline, limit).and_then(|()| reap(&mut c, deadline, limit));
        match ended {
            Ok(status) => {
                let [stdout, stderr] = outs;
                Ok(Output {
                    status,
                    stdout,
                    stderr,
                })
            }
            Err(e) => {
                // SAFETY: a plain syscall; the group is the child's own (not reaped yet).
                unsafe { libc::kill(-(c.id() as libc::pid_t), libc::SIGKILL) };
                // A process stuck in the kernel (I/O to flash) dies when that ends: waited
                // for a little, then left to end on its own (the error says it was killed).
                let _ = reap(&mut c, Instant::now() + Duration::from_secs(5), limit);
                Err(ToolError::Wait(e))
            }
        }
    }
}

fn timed_out(limit: Duration) -> io::Error {
    let why = format!("killed after {} s, its time limit", limit.as_secs());
    io::Error::new(io::ErrorKind::TimedOut, why)
}

/// Reads both pipes to their ends, each into its buffer, until `deadline`.
fn drain(
    pipes: &[Option<OwnedFd>; 2],
    outs: &mut [Vec<u8>; 2],
    deadline: Instant,
    limit: Duration,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut fds = [0, 1].map(|i| {
        (
            pipes[i].as_ref().map_or(-1, |p| p.as_raw_fd()),
            libc::POLLIN,
        )
    });
    let mut buf = [0u8; 4096];
    while fds[0].0 >= 0 || fds[1].0 >= 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out(limit));
        }
        let rev = crate::process::poll(&fds, left.as_millis().min(60_000) as i32 + 1)?;
        for (f, (rev, out)) in fds.iter_mut().zip(rev.iter().zip(outs.iter_mut())) {
            if f.0 < 0 || *rev == 0 {
                continue;
            }
            // SAFETY: `buf` is valid for `buf.len()` bytes; the fd is open (held by `pipes`).
            let n = unsafe { libc::read(f.0, buf.as_mut_ptr().cast(), buf.len()) };
            match n {
                0 => f.0 = -1,
                n if n > 0 => out.extend_from_slice(&buf[..n as usize]),
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
    }
    Ok(())
}

/// Waits for `c` to end, until `deadline` (its output is closed: it is ending).
fn reap(c: &mut Child, deadline: Instant, limit: Duration) -> io::Result<std::process::ExitStatus> {
    let mut pause = Duration::from_micros(200);
    loop {
        if let Some(s) = c.try_wait()? {
            return Ok(s);
        }
        if Instant::now() >= deadline {
            return Err(timed_out(limit));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

struct RealProcesses;

impl Processes for RealProcesses {
    fn spawn(
        &self,
        exe: &Path,
        args: &[String],
        env: &[(&str, Option<&str>)],
        stdout: Stdio,
        stderr: Stdio,
    ) -> io::Result<Child> {
        let mut cmd = std::process::Command::new(exe);
        for (k, v) in env {
            if let Some(v) = v {
                cmd.env(k, v);
            }
        }
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
    }
}

struct RealLxc;

impl Lxc for RealLxc {
    fn monitor_alive(&self, lxcpath: &Path, name: &str) -> bool {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::net::{SocketAddr, UnixStream};
        let path = lxcpath.join(name).join("command");
        SocketAddr::from_abstract_name(path.as_os_str().as_encoded_bytes())
            .and_then(|a| UnixStream::connect_addr(&a))
            .is_ok()
    }
    fn running_init(&self, lxcpath: &Path, name: &str) -> Option<i32> {
        crate::lxc::Container::new(name, lxcpath)
            .ok()
            .filter(|c| c.is_running())
            .and_then(|c| c.init_pid())
    }
}

struct RealSignals;

impl Signals for RealSignals {
    fn kill(&self, pid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
        crate::process::kill(pid, sig)
    }
}

struct RealMounts;

impl Mounts for RealMounts {
    fn mount_squashfs(&self, image: &Path, target: &Path) -> Result<(), SysError> {
        crate::loopdev::mount_squashfs(image, target)
    }
    fn mount_ext4(&self, image: &Path, target: &Path) -> Result<PathBuf, SysError> {
        crate::loopdev::mount_ext4(image, target)
    }
    fn mount_overlay_ro(&self, lowers: &[&Path], target: &Path) -> Result<(), SysError> {
        crate::mount::mount_overlay_ro(lowers, target)
    }
    fn bind(&self, src: &Path, target: &Path, read_only: bool) -> Result<(), SysError> {
        crate::mount::bind(src, target, read_only)
    }
    fn bind_shared(&self, dir: &Path) -> io::Result<()> {
        crate::mountns::bind_shared(dir)
    }
    fn umount(&self, target: &Path, lazy: bool) -> Result<bool, SysError> {
        crate::mount::umount(target, lazy)
    }
    fn mounts_under(&self, proc_root: &Path, prefix: &Path) -> Result<Vec<MountInfo>, SysError> {
        crate::mount::mounts_under(proc_root, prefix)
    }
    fn clone_tree(&self, image: &Path) -> io::Result<OwnedFd> {
        crate::mountns::clone_tree(image)
    }
    fn lock_tree(&self, tree: &OwnedFd) -> io::Result<()> {
        crate::mountns::lock_tree(tree)
    }
    fn at_target(
        &self,
        proc_root: &Path,
        pid: i32,
        at: PathBuf,
        m: Mount,
        id: (u64, u64),
        step: Step,
    ) -> io::Result<()> {
        crate::mountns::at_target(proc_root, pid, at, m, id, step)
    }
    fn shows_at(
        &self,
        proc_root: &Path,
        pid: i32,
        at: PathBuf,
        id: (u64, u64),
    ) -> io::Result<bool> {
        crate::mountns::shows_at(proc_root, pid, at, id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both outputs in full, however large (one pipe full must not stall the other), with
    /// the input and the exit status.
    #[test]
    fn a_tool_gives_both_outputs_in_full_and_its_status() {
        let script = "cat; head -c 300000 /dev/zero; head -c 200000 /dev/zero >&2; exit 3";
        let o = REAL
            .tools
            .run("sh", &["-c", script], Some(b"in\n"), TOOL_LIMIT)
            .unwrap();
        assert_eq!(o.status.code(), Some(3));
        assert_eq!(o.stdout.len(), 3 + 300_000);
        assert!(o.stdout.starts_with(b"in\n"));
        assert_eq!(o.stderr.len(), 200_000);
    }

    /// A tool that does not end is killed at its limit, and the error says so; so is one
    /// that closed its outputs and hangs on, and what a tool started goes with it.
    #[test]
    fn a_tool_past_its_limit_is_killed_with_what_it_started_and_says_so() {
        let dir = std::env::temp_dir().join(format!("berth-tool-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pid_file = dir.join("pid");
        let started = format!("sleep 30 & echo $! > {}; wait", pid_file.display());
        for script in ["sleep 30", "exec >&- 2>&-; sleep 30", started.as_str()] {
            let t0 = Instant::now();
            let e = REAL
                .tools
                .run("sh", &["-c", script], None, Duration::from_secs(1))
                .unwrap_err();
            let waited = t0.elapsed();
            assert!(matches!(e, ToolError::Wait(_)), "{script}: {e:?}");
            assert_eq!(e.io().kind(), io::ErrorKind::TimedOut, "{script}");
            assert_eq!(e.io().to_string(), "killed after 1 s, its time limit");
            assert!(waited < Duration::from_secs(6), "{script}: {waited:?}");
        }
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let stat = format!("/proc/{}/stat", pid.trim());
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            std::fs::read_to_string(&stat).map_or(true, |s| s.contains(") Z "))
        });
        assert!(gone, "the tool's own child {} lives on", pid.trim());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
