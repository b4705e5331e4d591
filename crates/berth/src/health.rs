//! `berth __health`: one health probe of one running container, or one run of a scheduled
//! job in it, in a short-lived helper process the daemon starts (liblxc forks to attach,
//! and a probe enters the container's network namespace: neither may happen in the daemon
//! itself).
//!
//! The probe is the manifest's `[health]`: a command run inside the container (through
//! liblxc's attach: its namespaces, cgroup, capabilities, seccomp and `no_new_privs`, as the
//! payload's user), a TCP connect or an HTTP GET on the container's own loopback. A job
//! (`exec`) is a command run the same way, whose output also goes to the container's log:
//! the write end of its shim's pipe, opened through the LXC monitor's stdout. The helper
//! enforces the timeout itself (a hung command is killed), prints one line saying what it
//! found and at most `OUTPUT_MAX` bytes of the command's output, and exits 0 for a pass.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use berth_sys::process::{self, ExitStatus};

/// The most of a probe's output the daemon keeps (the last bytes).
pub const OUTPUT_MAX: usize = 512;

/// What to probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    Cmd(Vec<String>),
    /// A scheduled job: its output also goes to the log of the container whose LXC monitor
    /// has this pid (0: nowhere).
    Exec(i32, Vec<String>),
    Tcp(u16),
    Http(u16, String),
}

/// The helper's arguments, as the daemon writes them and the helper reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthArgs {
    pub lxcpath: PathBuf,
    pub name: String,
    pub init: i32,
    pub timeout_ms: u64,
    pub uid: u32,
    pub gid: u32,
    pub probe: Probe,
}

impl HealthArgs {
    pub fn to_args(&self) -> Vec<String> {
        let mut v = vec![
            "__health".to_string(),
            self.lxcpath.display().to_string(),
            self.name.clone(),
            self.init.to_string(),
            self.timeout_ms.to_string(),
            self.uid.to_string(),
            self.gid.to_string(),
        ];
        match &self.probe {
            Probe::Cmd(argv) => {
                v.push("cmd".into());
                v.extend(argv.iter().cloned());
            }
            Probe::Exec(monitor, argv) => {
                v.extend(["exec".into(), monitor.to_string()]);
                v.extend(argv.iter().cloned());
            }
            Probe::Tcp(port) => v.extend(["tcp".into(), port.to_string()]),
            Probe::Http(port, path) => v.extend(["http".into(), port.to_string(), path.clone()]),
        }
        v
    }

    /// From the arguments after `__health`.
    pub fn from_args(a: &[String]) -> Result<HealthArgs> {
        let num = |i: usize, what: &str| -> Result<u64> {
            a.get(i).and_then(|s| s.parse().ok()).with_context(|| {
                format!(
                    "__health: argument {} ({what}) is missing or not a number",
                    i + 1
                )
            })
        };
        if a.len() < 8 {
            bail!("__health: usage: LXCPATH NAME INIT TIMEOUT_MS UID GID cmd ARGV…|tcp PORT|http PORT PATH");
        }
        let probe = match (a[6].as_str(), &a[7..]) {
            ("cmd", argv) if !argv.is_empty() => Probe::Cmd(argv.to_vec()),
            ("exec", [monitor, argv @ ..]) if !argv.is_empty() => Probe::Exec(
                monitor.parse().context("__health: exec monitor pid")?,
                argv.to_vec(),
            ),
            ("tcp", [port]) => Probe::Tcp(port.parse().context("__health: tcp port")?),
            ("http", [port, path]) => {
                Probe::Http(port.parse().context("__health: http port")?, path.clone())
            }
            (kind, _) => bail!("__health: unknown probe {kind:?} or wrong arguments"),
        };
        Ok(HealthArgs {
            lxcpath: PathBuf::from(&a[0]),
            name: a[1].clone(),
            init: num(2, "init pid")? as i32,
            timeout_ms: num(3, "timeout")?,
            uid: num(4, "uid")? as u32,
            gid: num(5, "gid")? as u32,
            probe,
        })
    }
}

/// Runs the probe; prints the verdict line and the output; the exit code is the verdict.
pub fn run(a: HealthArgs) -> i32 {
    let deadline = Instant::now() + Duration::from_millis(a.timeout_ms);
    let (verdict, output) = match &a.probe {
        Probe::Cmd(argv) => match command(&a, argv, deadline, None) {
            Ok(r) => r,
            Err(e) => (Err(format!("{e:#}")), Vec::new()),
        },
        Probe::Exec(monitor, argv) => match command(&a, argv, deadline, log_pipe(*monitor)) {
            Ok(r) => r,
            Err(e) => (Err(format!("{e:#}")), Vec::new()),
        },
        Probe::Tcp(port) => (net(&a, *port, None, deadline), Vec::new()),
        Probe::Http(port, path) => (net(&a, *port, Some(path), deadline), Vec::new()),
    };
    let mut out = std::io::stdout().lock();
    let code = match &verdict {
        Ok(line) => {
            let _ = writeln!(out, "ok: {line}");
            0
        }
        Err(line) => {
            let _ = writeln!(out, "failed: {line}");
            1
        }
    };
    let tail = &output[output.len().saturating_sub(OUTPUT_MAX)..];
    let _ = out.write_all(tail);
    let _ = out.flush();
    code
}

type Verdict = std::result::Result<String, String>;

/// The write end of a container's log pipe (its shim reads the other end into the ring): the
/// stdout of its LXC monitor, which the payload inherited. Only if that process is still the
/// monitor (a pid can be reused) and its stdout a pipe; non-blocking, so that a full pipe
/// loses output instead of stalling the job.
fn log_pipe(monitor: i32) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let proc = PathBuf::from(format!("/proc/{monitor}"));
    let comm = std::fs::read_to_string(proc.join("comm")).ok()?;
    let link = std::fs::read_link(proc.join("fd/1")).ok()?;
    if monitor <= 0 || comm.trim_end() != "berth-monitor" || !link.to_str()?.starts_with("pipe:") {
        return None;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(proc.join("fd/1"))
        .ok()
}

/// The command probe: attach, collect its output (and pass it on to `log`) until it exits
/// or the deadline passes.
fn command(
    a: &HealthArgs,
    argv: &[String],
    deadline: Instant,
    mut log: Option<std::fs::File>,
) -> Result<(Verdict, Vec<u8>)> {
    let c = berth_sys::lxc::Container::new(&a.name, &a.lxcpath)?;
    let (r, w) = process::pipe()?;
    let null = process::dev_null()?;
    let args: Vec<&str> = argv.iter().map(String::as_str).collect();
    let pid = c.attach(
        &args,
        &[
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME=/",
        ],
        a.uid,
        a.gid,
        [null.as_raw_fd(), w.as_raw_fd(), w.as_raw_fd()],
    )?;
    drop(w);
    process::set_nonblocking(r.as_raw_fd())?;
    // Its end wakes the poll below (Linux ≥ 5.3); without, it is looked for every 20 ms.
    let pidfd = process::pidfd_open(pid).ok();
    let mut reader = std::fs::File::from(r);
    let mut output = Vec::new();
    // A job's output is relayed in pieces of up to a pipe's default capacity: fewer system
    // calls for one that floods (its cost is the container's, this helper being in its
    // budget, but the budget is better spent on the job).
    let mut buf = vec![0u8; 16 * 1024];
    let mut open = true;
    loop {
        if let Some(st) = process::waitpid(pid, true)? {
            // Whatever it wrote before it exited is in the pipe.
            drain(&mut reader, &mut output, &mut buf, &mut log);
            let verdict = match st {
                ExitStatus::Exited(0) => Ok("exit 0".to_string()),
                ExitStatus::Exited(c) => Err(format!("exit {c}")),
                ExitStatus::Signaled(s) => Err(format!("killed by signal {s}")),
            };
            return Ok((verdict, output));
        }
        let now = Instant::now();
        if now >= deadline {
            let _ = process::kill(pid, libc::SIGKILL);
            let _ = process::waitpid(pid, false);
            drain(&mut reader, &mut output, &mut buf, &mut log);
            return Ok((Err(format!("timed out after {} ms", a.timeout_ms)), output));
        }
        let mut wait = deadline - now;
        let mut fds = Vec::new();
        if open {
            fds.push((reader.as_raw_fd(), libc::POLLIN));
        }
        match &pidfd {
            Some(p) => fds.push((p.as_raw_fd(), libc::POLLIN)),
            None => wait = wait.min(Duration::from_millis(20)),
        }
        let ms = wait.as_millis().clamp(1, i32::MAX as u128) as i32;
        if fds.is_empty() {
            std::thread::sleep(wait);
        } else {
            let _ = process::poll(&fds, ms);
        }
        if open {
            open = drain(&mut reader, &mut output, &mut buf, &mut log);
        }
    }
}

/// Reads what is there without blocking, keeping the last `OUTPUT_MAX` bytes and passing
/// every byte on to `log` (what a full log pipe does not take is lost); false at EOF.
fn drain(
    r: &mut std::fs::File,
    out: &mut Vec<u8>,
    buf: &mut [u8],
    log: &mut Option<std::fs::File>,
) -> bool {
    loop {
        match r.read(buf) {
            Ok(0) => return false,
            Ok(n) => {
                if let Some(l) = log {
                    let _ = l.write(&buf[..n]);
                }
                out.extend_from_slice(&buf[..n]);
                if out.len() > 2 * OUTPUT_MAX {
                    out.drain(..out.len() - OUTPUT_MAX);
                }
            }
            Err(_) => return true,
        }
    }
}

/// TCP and HTTP probes, from inside the container's network namespace.
fn net(a: &HealthArgs, port: u16, path: Option<&str>, deadline: Instant) -> Verdict {
    process::enter_net_namespace(Path::new("/proc"), a.init)
        .map_err(|e| format!("cannot enter the network namespace of pid {}: {e}", a.init))?;
    let left = |what: &str| {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("timed out after {} ms ({what})", a.timeout_ms))
    };
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut s = TcpStream::connect_timeout(&addr, left("connect")?)
        .map_err(|e| format!("connect to port {port}: {e}"))?;
    let Some(path) = path else {
        return Ok(format!("port {port} accepts connections"));
    };
    let t = left("request")?;
    let _ = s.set_write_timeout(Some(t));
    let _ = s.set_read_timeout(Some(t));
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: localhost\r\nUser-Agent: berth-health\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("send request: {e}"))?;
    let mut head = [0u8; 64];
    let mut n = 0;
    while n < head.len() && !head[..n].contains(&b'\n') {
        match s.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return Err(format!("timed out after {} ms (response)", a.timeout_ms))
            }
            Err(e) => return Err(format!("read response: {e}")),
        }
    }
    let line = String::from_utf8_lossy(&head[..n]);
    let status = line
        .strip_prefix("HTTP/1.")
        .and_then(|r| r.get(2..5))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| {
            format!(
                "GET {path}: not an HTTP response ({:?})",
                line.lines().next().unwrap_or("")
            )
        })?;
    if (200..400).contains(&status) {
        Ok(format!("GET {path}: {status}"))
    } else {
        Err(format!("GET {path}: {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_round_trip() {
        for probe in [
            Probe::Cmd(vec!["/bin/check".into(), "--quick".into()]),
            Probe::Exec(77, vec!["/bin/job".into()]),
            Probe::Tcp(53),
            Probe::Http(8080, "/healthz".into()),
        ] {
            let a = HealthArgs {
                lxcpath: "/var/lib/berth/lxc".into(),
                name: "web".into(),
                init: 42,
                timeout_ms: 5_000,
                uid: 1000,
                gid: 1000,
                probe,
            };
            let args = a.to_args();
            assert_eq!(args[0], "__health");
            assert_eq!(HealthArgs::from_args(&args[1..]).unwrap(), a);
        }
        let bad = ["x", "web", "1", "zz", "0", "0", "tcp", "53"].map(String::from);
        assert!(HealthArgs::from_args(&bad)
            .unwrap_err()
            .to_string()
            .contains("argument 4 (timeout)"));
    }
}
