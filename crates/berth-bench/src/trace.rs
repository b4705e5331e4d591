//! Where a container's start spends its time (`berth-bench --trace activation`).
//!
//! Two sources, lined up on one clock:
//! - berth's own steps: `berth start --trace` answers with when each step of the daemon, the
//!   shim and the LXC monitor began (CLOCK_REALTIME nanoseconds);
//! - liblxc's steps inside `start()`, which berth cannot stamp: a system-wide `perf record`
//!   of process events (fork, exec) and a few system calls (clone3, unshare, mkdir, small
//!   writes, the mount family, pivot_root, seccomp), in a mount namespace of its own where
//!   tracefs is mounted (the host's mounts are untouched). perf's clock is CLOCK_MONOTONIC;
//!   its offset to CLOCK_REALTIME is measured as the recording begins and ends.
//!
//! The same events split lxc-execute's start into the same phases, from the process start to
//! the payload, so the two bars of the chart compare like with like. Each run is found from
//! its payload back: the exec of the payload, the fork that made it (LXC's init), the clone
//! that made the init (the monitor).

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::util::{self, which, Context, Result};

/// The phases of a start, in order, with what each holds. The first four and "shim" are
/// berth's own (from its stamps); "process start" is lxc-execute's (its exec, liblxc, its
/// configuration, up to its first cgroup); the rest are liblxc's, the same for both.
pub const PHASES: &[(&str, &str)] = &[
    ("request", "the CLI starts and sends the request; the daemon reads it"),
    ("daemon checks", "op lock, safe mode, installed, not running, security checks"),
    ("image mount", "the package's image (mounted once, then kept) and /data"),
    ("config generation", "LXC configuration, seccomp profile, bindings, API socket"),
    ("shim", "the shim is exec'd, loads liblxc and forks the monitor, which loads the configuration"),
    ("process start", "lxc-execute is exec'd, loads liblxc and its configuration"),
    ("LXC set-up", "liblxc's start() before the cgroups: handler, seccomp policy, command socket"),
    ("cgroup set-up", "cgroups made in every hierarchy; the monitor moves itself into its own, waiting for an RCU grace period unless one passed just before"),
    ("spawn, id map", "clone3 of the namespaces, uid/gid maps, the init moved into the container's cgroups"),
    ("network", "the network namespace and its devices"),
    ("mounts", "root, /proc, /sys, /dev, the mount entries, pivot_root"),
    ("seccomp load", "capabilities dropped, no_new_privs, device limits, the seccomp filter loaded (without a seccomp profile these steps count as payload exec)"),
    ("payload exec", "LXC's init forks and execs the payload, which runs its first instruction"),
];

/// One perf event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub comm: String,
    pub pid: i32,
    pub tid: i32,
    /// CLOCK_MONOTONIC, ns.
    pub ns: u64,
    /// e.g. `sched:sched_process_fork`, `syscalls:sys_enter_clone3`.
    pub name: String,
    pub args: String,
}

impl Event {
    /// The value of `key=VALUE` (sched events) or `key: VALUE,` (syscall events).
    pub fn arg(&self, key: &str) -> Option<&str> {
        let mut rest = self.args.as_str();
        while !rest.is_empty() {
            let word_end = rest.find([' ', '=']).unwrap_or(rest.len());
            let (k, after) = rest.split_at(word_end);
            let k = k.trim_end_matches(':');
            let after = after.trim_start_matches([' ', '=']);
            let v_end = after.find([' ', ',']).unwrap_or(after.len());
            if k == key {
                return Some(&after[..v_end]);
            }
            rest = after[v_end..].trim_start_matches([',', ' ']);
        }
        None
    }

    /// A numeric argument (decimal, or 0x hex as perf prints syscall arguments).
    pub fn num(&self, key: &str) -> Option<u64> {
        parse_num(self.arg(key)?)
    }
}

fn parse_num(v: &str) -> Option<u64> {
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

/// `SECS.NANOS:` → ns.
fn parse_time(t: &str) -> Option<u64> {
    let t = t.strip_suffix(':')?;
    let (s, f) = t.split_once('.')?;
    let frac: String = f.chars().chain(std::iter::repeat('0')).take(9).collect();
    Some(s.parse::<u64>().ok()? * 1_000_000_000 + frac.parse::<u64>().ok()?)
}

/// The events of `perf script -F comm,pid,tid,time,event,trace --ns`, one a line:
/// `COMM PID/TID SECS.NANOS: EVENT: ARGS`. A command name may hold spaces; lines of
/// another shape are skipped.
pub fn parse_script(text: &str) -> Vec<Event> {
    let mut out = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(i) = (0..words.len().saturating_sub(2)).find(|&i| {
            words[i]
                .split_once('/')
                .is_some_and(|(a, b)| a.parse::<i32>().is_ok() && b.parse::<i32>().is_ok())
                && parse_time(words[i + 1]).is_some()
        }) else {
            continue;
        };
        let (pid, tid) = words[i].split_once('/').unwrap_or(("0", "0"));
        let Some(name) = words[i + 2].strip_suffix(':') else {
            continue;
        };
        // The arguments: the rest of the line after the event's name.
        let args = line
            .split_once(words[i + 2])
            .map(|(_, r)| r.trim())
            .unwrap_or("");
        out.push(Event {
            comm: words[..i].join(" "),
            pid: pid.parse().unwrap_or(0),
            tid: tid.parse().unwrap_or(0),
            ns: parse_time(words[i + 1]).unwrap_or(0),
            name: name.to_string(),
            args: args.to_string(),
        });
    }
    out
}

const CLONE_NEWNET: u64 = 0x4000_0000;
const SECCOMP_SET_MODE_FILTER: u64 = 1;
const MOUNT_CALLS: &[&str] = &[
    "syscalls:sys_enter_mount",
    "syscalls:sys_enter_open_tree",
    "syscalls:sys_enter_move_mount",
    "syscalls:sys_enter_fsopen",
];

/// liblxc's steps of one start, CLOCK_REALTIME ns, found in the events.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LxcSteps {
    /// The monitor's first cgroup directory.
    pub mkdir: u64,
    /// The monitor's clone3 of the container's namespaces.
    pub clone: u64,
    /// The init's unshare of its network namespace (none when it shares the host's).
    pub netns: Option<u64>,
    /// The init's first mount call after that.
    pub mount: u64,
    /// The init's pivot_root returned.
    pub pivot: u64,
    /// The init's seccomp filter loaded (none without a seccomp profile).
    pub seccomp: Option<u64>,
    /// The longest small write of the monitor between `mkdir` and `clone`: its move into
    /// its cgroup (ns), where it waited for the grace period.
    pub monitor_move: u64,
}

/// The processes and steps of the start whose payload `payload` (its path in the container)
/// was exec'd between `from` and `to` (CLOCK_REALTIME ns; `offset` turns perf's clock into
/// it). Err names the step that is missing.
pub fn lxc_steps(
    ev: &[Event],
    offset: i64,
    payload: &str,
    from: u64,
    to: u64,
) -> std::result::Result<LxcSteps, String> {
    let rt = |e: &Event| (e.ns as i64 + offset) as u64;
    let within: Vec<&Event> = ev
        .iter()
        .filter(|e| rt(e) + 1_000_000 >= from && rt(e) <= to + 5_000_000)
        .collect();
    let exec = within
        .iter()
        .find(|e| e.name == "sched:sched_process_exec" && e.arg("filename") == Some(payload))
        .ok_or("no exec of the payload")?;
    let forked = |child: i32| {
        within.iter().find(|e| {
            e.name == "sched:sched_process_fork"
                && e.num("child_pid") == Some(child as u64)
                && rt(e) <= rt(exec)
        })
    };
    let init_fork = forked(exec.pid).ok_or("no fork of the payload")?;
    // A fork event is the parent's: its pid is the process that forked.
    let init = init_fork.pid;
    let mon_fork = forked(init).ok_or("no clone of the container's init")?;
    let monitor = mon_fork.pid;
    let of = |tid: i32, name: &str, after: u64| {
        within
            .iter()
            .find(move |e| e.tid == tid && e.name == name && rt(e) >= after)
    };
    let mkdir = within
        .iter()
        .find(|e| {
            e.tid == monitor
                && rt(e) >= from
                && matches!(
                    e.name.as_str(),
                    "syscalls:sys_enter_mkdirat" | "syscalls:sys_enter_mkdir"
                )
        })
        .map(|e| rt(e))
        .ok_or("no cgroup made by the monitor")?;
    let clone = within
        .iter()
        .filter(|e| {
            e.tid == monitor
                && e.name == "syscalls:sys_enter_clone3"
                && rt(e) <= rt(mon_fork)
                && rt(e) >= mkdir
        })
        .map(|e| rt(e))
        .next_back()
        .ok_or("no clone3 by the monitor")?;
    // The monitor's small writes between its first cgroup and the clone: cgroup.procs,
    // the cgroup files LXC sets up.
    let mut monitor_move = 0;
    let mut open: Option<u64> = None;
    for e in within.iter().filter(|e| e.tid == monitor) {
        let t = rt(e);
        if t < mkdir || t > clone {
            continue;
        }
        match e.name.as_str() {
            "syscalls:sys_enter_write" => open = Some(t),
            "syscalls:sys_exit_write" => {
                if let Some(o) = open.take() {
                    monitor_move = monitor_move.max(t - o);
                }
            }
            _ => {}
        }
    }
    let born = rt(mon_fork);
    let netns = within
        .iter()
        .find(|e| {
            e.tid == init
                && e.name == "syscalls:sys_enter_unshare"
                && e.num("unshare_flags")
                    .is_some_and(|f| f & CLONE_NEWNET != 0)
        })
        .map(|e| rt(e));
    let mount = within
        .iter()
        .find(|e| {
            e.tid == init
                && rt(e) >= netns.unwrap_or(born)
                && MOUNT_CALLS.contains(&e.name.as_str())
        })
        .map(|e| rt(e))
        .ok_or("no mount by the container's init")?;
    let pivot = of(init, "syscalls:sys_exit_pivot_root", mount)
        .map(|e| rt(e))
        .ok_or("no pivot_root by the container's init")?;
    let seccomp = match within.iter().find(|e| {
        e.tid == init
            && e.name == "syscalls:sys_enter_seccomp"
            && rt(e) >= pivot
            && e.num("op") == Some(SECCOMP_SET_MODE_FILTER)
    }) {
        Some(filter) => Some(
            of(init, "syscalls:sys_exit_seccomp", rt(filter))
                .map(|e| rt(e))
                .ok_or("no return from the init's seccomp()")?,
        ),
        None => None,
    };
    Ok(LxcSteps {
        mkdir,
        clone,
        netns,
        mount,
        pivot,
        seccomp,
        monitor_move,
    })
}

/// The first small write of a thread named `comm` between `from` and `to` (CLOCK_REALTIME
/// ns): (when it began, how long it took), ns. The daemon's warm-up thread ("warm-moves"):
/// its first move into its own cgroup lasts the grace period.
pub fn first_write(
    ev: &[Event],
    offset: i64,
    comm: &str,
    from: u64,
    to: u64,
) -> Option<(u64, u64)> {
    let rt = |e: &Event| (e.ns as i64 + offset) as u64;
    let enter = ev.iter().find(|e| {
        e.comm == comm && e.name == "syscalls:sys_enter_write" && rt(e) >= from && rt(e) <= to
    })?;
    let exit = ev
        .iter()
        .find(|e| e.tid == enter.tid && e.name == "syscalls:sys_exit_write" && e.ns >= enter.ns)?;
    Some((rt(enter), exit.ns - enter.ns))
}

/// The moment a berth stamp names, if the start reported it.
fn stamp(stamps: &[(String, u64)], step: &str) -> Option<u64> {
    stamps.iter().find(|(s, _)| s == step).map(|(_, ns)| *ns)
}

fn ms(a: u64, b: u64) -> f64 {
    (b as f64 - a as f64) / 1e6
}

/// The phases of one traced berth start: (phase, ms), in [`PHASES`] order, only those that
/// apply. `t0`: the CLI spawned; `first`: the payload's first instruction (CLOCK_REALTIME
/// ns). Without `lxc` (no perf), liblxc's part is one phase, "LXC start (not split)".
pub fn berth_phases(
    t0: u64,
    stamps: &[(String, u64)],
    lxc: Option<&LxcSteps>,
    first: u64,
) -> std::result::Result<Vec<(String, f64)>, String> {
    let at = |s: &str| stamp(stamps, s).ok_or(format!("the start reported no step {s:?}"));
    let (received, checked, mounted, configured, lxc_start) = (
        at("received")?,
        at("checked")?,
        at("mounted")?,
        at("configured")?,
        at("lxc_start")?,
    );
    let mut v = vec![
        ("request".to_string(), ms(t0, received)),
        ("daemon checks".into(), ms(received, checked)),
        ("image mount".into(), ms(checked, mounted)),
        ("config generation".into(), ms(mounted, configured)),
        ("shim".into(), ms(configured, lxc_start)),
    ];
    match lxc {
        Some(l) => {
            v.push(("LXC set-up".into(), ms(lxc_start, l.mkdir)));
            v.extend(liblxc_phases(l, first));
        }
        None => v.push(("LXC start (not split)".into(), ms(lxc_start, first))),
    }
    Ok(v)
}

/// lxc-execute's phases: its process start up to its first cgroup, then liblxc's.
pub fn lxc_execute_phases(t0: u64, lxc: &LxcSteps, first: u64) -> Vec<(String, f64)> {
    let mut v = vec![("process start".to_string(), ms(t0, lxc.mkdir))];
    v.extend(liblxc_phases(lxc, first));
    v
}

fn liblxc_phases(l: &LxcSteps, first: u64) -> Vec<(String, f64)> {
    let spawned_until = l.netns.unwrap_or(l.mount);
    vec![
        ("cgroup set-up".into(), ms(l.mkdir, l.clone)),
        ("spawn, id map".into(), ms(l.clone, spawned_until)),
        ("network".into(), ms(spawned_until, l.mount)),
        ("mounts".into(), ms(l.mount, l.pivot)),
        (
            "seccomp load".into(),
            ms(l.pivot, l.seccomp.unwrap_or(l.pivot)),
        ),
        (
            "payload exec".into(),
            ms(l.seccomp.unwrap_or(l.pivot), first),
        ),
    ]
}

/// The events perf records (those the running kernel has; the shell script checks each).
const SYSCALLS: &[&str] = &[
    "sys_enter_clone3",
    "sys_enter_unshare",
    "sys_enter_mkdirat",
    "sys_enter_mkdir",
    "sys_enter_mount",
    "sys_enter_open_tree",
    "sys_enter_move_mount",
    "sys_enter_fsopen",
    "sys_exit_pivot_root",
    "sys_enter_seccomp",
    "sys_exit_seccomp",
];

/// The script that runs perf, in a private mount namespace (`unshare --mount`): tracefs
/// mounted there, every event the kernel has, writes only when small (cgroup files, not
/// logs), recording disabled until `enable` comes on the control FIFO.
fn script(data: &Path, ctl: &Path, ack: &Path) -> String {
    let mut s = String::from(
        "set -e\nmount -t tracefs nodev /sys/kernel/tracing\nT=/sys/kernel/tracing/events\n\
         set -- -e sched:sched_process_fork -e sched:sched_process_exec\n",
    );
    for c in SYSCALLS {
        s.push_str(&format!(
            "[ -d $T/syscalls/{c} ] && set -- \"$@\" -e syscalls:{c}\n"
        ));
    }
    s.push_str(
        "set -- \"$@\" -e syscalls:sys_enter_write --filter 'count < 16' \
         -e syscalls:sys_exit_write --filter 'ret < 16' --exclude-perf\n",
    );
    s.push_str(&format!(
        "exec perf record -q -a -k mono -D -1 --control=fifo:{},{} -o {} \"$@\"\n",
        ctl.display(),
        ack.display(),
        data.display()
    ));
    s
}

/// A running `perf record`.
pub struct Perf {
    child: Child,
    ctl: File,
    ack: BufReader<File>,
    data: PathBuf,
    log: PathBuf,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC when recording began, ns.
    offset: i64,
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC, ns: the middle of two realtime readings around one
/// monotonic one.
pub fn clock_offset() -> i64 {
    let a = util::now_ns();
    let m = berth_sys::process::monotonic_ns() as i128;
    let b = util::now_ns();
    ((a + b) / 2 - m) as i64
}

/// Why perf cannot run here, or None.
pub fn unavailable() -> Option<String> {
    for (tool, pkg) in [
        ("perf", "linux-perf"),
        ("unshare", "util-linux"),
        ("mkfifo", "coreutils"),
    ] {
        if which(tool).is_none() {
            return Some(format!(
                "{tool} is missing: install the Debian package {pkg}"
            ));
        }
    }
    None
}

impl Perf {
    /// Starts recording into `dir/perf.data`; returns once perf said it records.
    pub fn start(dir: &Path) -> Result<Perf> {
        std::fs::create_dir_all(dir).context(format!("create {}", dir.display()))?;
        let (data, ctl_p, ack_p, log) = (
            dir.join("perf.data"),
            dir.join("perf.ctl"),
            dir.join("perf.ack"),
            dir.join("perf.log"),
        );
        for f in [&ctl_p, &ack_p] {
            let _ = std::fs::remove_file(f);
            util::run(Command::new("mkfifo").arg(f))?;
        }
        let sh = dir.join("perf.sh");
        std::fs::write(&sh, script(&data, &ctl_p, &ack_p)).context("write perf.sh")?;
        // Read-write, so that opening a FIFO does not wait for the other end.
        let open = |p: &Path| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_CLOEXEC)
                .open(p)
                .context(format!("open {}", p.display()))
        };
        let (ctl, ack) = (open(&ctl_p)?, open(&ack_p)?);
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "sh"])
            .arg(&sh)
            .stdin(Stdio::null())
            .stdout(File::create(&log).context("create perf.log")?)
            .stderr(File::create(dir.join("perf.err")).context("create perf.err")?)
            .process_group(0)
            .spawn()
            .context("run perf")?;
        let mut p = Perf {
            child,
            ctl,
            ack: BufReader::new(ack),
            data,
            log: dir.join("perf.err"),
            offset: 0,
        };
        if let Err(e) = p.command("enable") {
            p.kill();
            return Err(e);
        }
        p.offset = clock_offset();
        Ok(p)
    }

    /// Sends a control command and waits (10 s at most) for perf's `ack`.
    fn command(&mut self, what: &str) -> Result<()> {
        writeln!(self.ctl, "{what}").context("write to perf's control FIFO")?;
        let ready = berth_sys::process::poll(
            &[(self.ack.get_ref().as_raw_fd(), berth_sys::process::POLLIN)],
            10_000,
        );
        let mut line = String::new();
        if matches!(ready, Ok(ref r) if r[0] != 0)
            && self.ack.read_line(&mut line).is_ok()
            && line.trim() == "ack"
        {
            return Ok(());
        }
        let err = std::fs::read_to_string(&self.log).unwrap_or_default();
        Err(format!(
            "perf did not acknowledge {what:?} within 10 s: {}",
            err.trim().lines().last().unwrap_or("(no message)")
        )
        .into())
    }

    fn kill(&mut self) {
        let _ = berth_sys::process::kill(self.child.id() as i32, libc::SIGKILL);
        let _ = self.child.wait();
    }

    /// Stops recording; the events and the clock offset (the mean of the offsets at the
    /// start and now).
    pub fn stop(mut self) -> Result<(Vec<Event>, i64)> {
        let _ = self.command("disable");
        let _ = berth_sys::process::kill(self.child.id() as i32, libc::SIGINT);
        let ended = util::poll(
            Duration::from_secs(20),
            Duration::from_millis(20),
            "perf to write its data",
            || self.child.try_wait().ok().flatten(),
        );
        if ended.is_err() {
            self.kill();
        }
        let offset = (self.offset + clock_offset()) / 2;
        let out = util::output(
            Command::new("perf")
                .arg("script")
                .arg("-i")
                .arg(&self.data)
                .args(["-F", "comm,pid,tid,time,event,trace", "--ns"]),
        )?;
        if !out.status.success() {
            return Err(format!(
                "perf script failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )
            .into());
        }
        Ok((parse_script(&String::from_utf8_lossy(&out.stdout)), offset))
    }
}

impl Drop for Perf {
    /// A run that ends early (an error, Ctrl-C) must not leave a system-wide recording
    /// running; a killed berth-bench's is ended by the next run's sweep (its command line
    /// names the sandbox).
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A start as perf shows it (monotonic, offset 0), trimmed from a real trace of this
    /// machine: the monitor 7895, its init 7896, the payload 7898.
    const TRACE: &str = "\
      berth-shim  7894/7894   100.000100000: sched:sched_process_fork: comm=berth-shim pid=7894 child_comm=berth-shim child_pid=7895
   berth-monitor  7895/7895   100.001000000: syscalls:sys_enter_mkdirat: dfd: 0x00000013, pathname: 0x7ffe, mode: 0x000001ed
   berth-monitor  7895/7895   100.001500000: syscalls:sys_enter_write: fd: 0x00000012, buf: 0x7ffcc03c4304, count: 0x00000004
   berth-monitor  7895/7895   100.009500000: syscalls:sys_exit_write: 0x4
   berth-monitor  7895/7895   100.010000000: syscalls:sys_enter_clone3: uargs: 0x7ffcc03af280, size: 0x00000058
   berth-monitor  7895/7895   100.010300000: sched:sched_process_fork: comm=berth-monitor pid=7895 child_comm=berth-monitor child_pid=7896
   berth-monitor  7896/7896   100.011000000: syscalls:sys_enter_unshare: unshare_flags: 0x40000000
   berth-monitor  7896/7896   100.012000000: syscalls:sys_enter_unshare: unshare_flags: 0x02000000
   berth-monitor  7896/7896   100.012500000: syscalls:sys_enter_move_mount: from_dfd: 0x2e, from_pathname: 0x7f
   berth-monitor  7896/7896   100.014000000: syscalls:sys_exit_pivot_root: 0x0
   berth-monitor  7896/7896   100.014200000: syscalls:sys_enter_seccomp: op: 0x00000000, flags: 0x00000001, uargs: 0x0
   berth-monitor  7896/7896   100.014300000: syscalls:sys_exit_seccomp: 0x0
   berth-monitor  7896/7896   100.014500000: syscalls:sys_enter_seccomp: op: 0x00000001, flags: 0x00000000, uargs: 0x557a
   berth-monitor  7896/7896   100.014800000: syscalls:sys_exit_seccomp: 0x0
   berth-monitor  7896/7896   100.015000000: sched:sched_process_fork: comm=berth-monitor pid=7896 child_comm=berth-monitor child_pid=7898
   bench-payload  7898/7898   100.015400000: sched:sched_process_exec: filename=/bin/bench-payload pid=7898 old_pid=7898
   Web Content  1234/1240   100.015500000: syscalls:sys_enter_write: fd: 0x3, buf: 0x1, count: 0x1
garbage line
";

    #[test]
    fn perf_script_lines_parse() {
        let ev = parse_script(TRACE);
        assert_eq!(ev.len(), 17);
        assert_eq!(ev[0].comm, "berth-shim");
        assert_eq!(ev[0].num("child_pid"), Some(7895));
        assert_eq!(ev[1].ns, 100_001_000_000);
        assert_eq!(ev[6].num("unshare_flags"), Some(0x4000_0000));
        assert_eq!(ev[15].arg("filename"), Some("/bin/bench-payload"));
        assert_eq!(
            (ev[16].comm.as_str(), ev[16].pid, ev[16].tid),
            ("Web Content", 1234, 1240)
        );
        assert_eq!(parse_time("1.5:"), Some(1_500_000_000));
    }

    #[test]
    fn steps_are_found_from_the_payload_back() {
        let ev = parse_script(TRACE);
        let s = lxc_steps(
            &ev,
            0,
            "/bin/bench-payload",
            100_000_000_000,
            100_016_000_000,
        )
        .unwrap();
        assert_eq!(s.mkdir, 100_001_000_000);
        assert_eq!(s.clone, 100_010_000_000);
        assert_eq!(s.netns, Some(100_011_000_000));
        assert_eq!(s.mount, 100_012_500_000);
        assert_eq!(s.pivot, 100_014_000_000);
        // the filter's seccomp(), not the probe before pivot_root's
        assert_eq!(s.seccomp, Some(100_014_800_000));
        // without a seccomp profile (lxc-execute's bare peer): none, and its phase is empty
        let bare: Vec<Event> = ev
            .iter()
            .filter(|e| !e.name.contains("seccomp") || e.ns < 100_014_000_000)
            .cloned()
            .collect();
        let b = lxc_steps(
            &bare,
            0,
            "/bin/bench-payload",
            100_000_000_000,
            100_016_000_000,
        )
        .unwrap();
        assert_eq!(b.seccomp, None);
        let p = lxc_execute_phases(99_000_000_000, &b, 100_015_600_000);
        assert_eq!(p[5], ("seccomp load".to_string(), 0.0));
        assert_eq!(s.monitor_move, 8_000_000);
        // with a clock offset: the same steps, moved
        let moved = lxc_steps(
            &ev,
            1_000,
            "/bin/bench-payload",
            100_000_001_000,
            100_016_001_000,
        )
        .unwrap();
        assert_eq!(moved.clone, s.clone + 1_000);
        // a window without the payload, another payload
        let e = lxc_steps(&ev, 0, "/bin/other", 100_000_000_000, 100_016_000_000).unwrap_err();
        assert_eq!(e, "no exec of the payload");
        let e = lxc_steps(&ev[..14], 0, "/bin/bench-payload", 0, u64::MAX / 2).unwrap_err();
        assert_eq!(e, "no exec of the payload");
    }

    #[test]
    fn phases_add_up_to_the_whole_start() {
        let ev = parse_script(TRACE);
        let l = lxc_steps(
            &ev,
            0,
            "/bin/bench-payload",
            100_000_000_000,
            100_016_000_000,
        )
        .unwrap();
        let first = 100_015_600_000;
        let t0 = 99_995_000_000;
        let stamps: Vec<(String, u64)> = [
            ("received", 99_996_000_000u64),
            ("locked", 99_996_100_000),
            ("checked", 99_996_200_000),
            ("mounted", 99_996_500_000),
            ("configured", 99_997_000_000),
            ("lxc_start", 100_000_500_000),
        ]
        .iter()
        .map(|(s, n)| (s.to_string(), *n))
        .collect();
        let p = berth_phases(t0, &stamps, Some(&l), first).unwrap();
        let names: Vec<&str> = p.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "request",
                "daemon checks",
                "image mount",
                "config generation",
                "shim",
                "LXC set-up",
                "cgroup set-up",
                "spawn, id map",
                "network",
                "mounts",
                "seccomp load",
                "payload exec"
            ]
        );
        let total: f64 = p.iter().map(|(_, v)| v).sum();
        assert!((total - ms(t0, first)).abs() < 1e-9, "{total}");
        assert!(p.iter().all(|(_, v)| *v >= 0.0), "{p:?}");
        assert!(PHASES.iter().any(|(n, _)| *n == "process start"));
        for (n, _) in &p {
            assert!(PHASES.iter().any(|(k, _)| k == n), "{n} has a description");
        }
        let lx = lxc_execute_phases(t0, &l, first);
        assert_eq!(lx[0].0, "process start");
        let total: f64 = lx.iter().map(|(_, v)| v).sum();
        assert!((total - ms(t0, first)).abs() < 1e-9);
        // without perf: liblxc's part in one piece
        let p = berth_phases(t0, &stamps, None, first).unwrap();
        assert_eq!(p.last().unwrap().0, "LXC start (not split)");
        // a start that reported no steps
        assert!(berth_phases(t0, &[], None, first)
            .unwrap_err()
            .contains("received"));
    }

    #[test]
    fn the_warm_up_threads_first_write() {
        let t = "\
 warm-moves  5/6   1.000000000: syscalls:sys_enter_write: fd: 0xe, buf: 0x1, count: 0x5
       admin  5/7   1.000100000: syscalls:sys_enter_write: fd: 0x3, buf: 0x1, count: 0x2
 warm-moves  5/6   1.007000000: syscalls:sys_exit_write: 0x5
 warm-moves  5/6   1.009000000: syscalls:sys_enter_write: fd: 0xe, buf: 0x1, count: 0x5
";
        let ev = parse_script(t);
        assert_eq!(
            first_write(&ev, 0, "warm-moves", 900_000_000, 2_000_000_000),
            Some((1_000_000_000, 7_000_000))
        );
        assert_eq!(
            first_write(&ev, 0, "warm-moves", 1_008_000_000, 2_000_000_000),
            None
        );
    }

    #[test]
    fn the_script_checks_each_event() {
        let s = script(Path::new("/d/p.data"), Path::new("/d/c"), Path::new("/d/a"));
        assert!(s.contains(
            "[ -d $T/syscalls/sys_enter_clone3 ] && set -- \"$@\" -e syscalls:sys_enter_clone3\n"
        ));
        assert!(s.contains("--control=fifo:/d/c,/d/a -o /d/p.data"));
        assert!(s.contains("--filter 'count < 16'"));
    }
}
