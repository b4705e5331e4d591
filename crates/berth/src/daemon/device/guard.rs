//! The memory guard thread (DESIGN.md decision 4; the decisions are `berth_core::guard`).
//!
//! Where the kernel has pressure-stall information, the thread opens
//! `<proc>/pressure/memory`, writes a trigger (`some 150000 1000000`: 150 ms of memory stall
//! within 1 s) and blocks in poll() for POLLPRI; each event, and a 5 s safety net, makes it
//! read MemAvailable. While MemAvailable is within twice the threshold (a fast allocation does
//! not always stall first) it also reads it every `guard.interval`. Without PSI (or when the
//! trigger cannot be written) it reads `<proc>/meminfo` every `guard.interval`.
//!
//! Below the threshold it SIGKILLs one process of a running container (`berth_core::guard::pick`:
//! lowest priority, payload before init, largest RSS), after checking the process is still
//! the one listed (same start time, field 22 of its stat) in that container's pid namespace
//! (never anything outside berth's containers), waits for it to exit (at most 1 s), reads
//! MemAvailable again and repeats until it is above. The kill goes through a pidfd (Linux ≥
//! 5.3), so a recycled pid is never hit; without pidfds it goes to the pid after the start
//! time is read again just before the signal, as procd and runc do (docs/kernels.md).
//! MemAvailable lags the freeing by up to a second, so the RSS of kills of the last 1.5 s
//! not yet visible in it counts as available (`guard::pending`): one hog
//! costs one kill, not a bystander too. Each kill is logged (at most 3 lines a second) and kept as the
//! container's `guard_kill` (in memory and in `<run>/logs/NAME.guard`) for `berth status`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_core::guard::{self, Candidate, RateLimit, RecentKill};
use berth_core::supervise::{Event, GuardKill};
use berth_sys::process;

use crate::daemon::base::context::Daemon;
use crate::daemon::device::records;

const PSI_TRIGGER: &str = "some 150000 1000000";
/// Without CAP_SYS_RESOURCE (a confined root) the kernel takes only windows that are
/// multiples of 2 s.
const PSI_TRIGGER_UNPRIVILEGED: &str = "some 150000 2000000";
/// With PSI, how often MemAvailable is read anyway when far above the threshold.
const SAFETY_NET_MS: i32 = 5000;
/// At most one hand-back of code pages per this long (wake-ups close together, at the
/// polling interval near the threshold, fault the same pages back in).
const RELEASE_GAP: Duration = Duration::from_secs(1);
const LOG_LINES_PER_S: u32 = 3;

/// How the guard learns a container's init pid: the runtime knows; the guard only asks.
pub type InitOf = Box<dyn Fn(&Daemon, &str) -> Option<i32> + Send>;

/// Starts the guard thread. It reads the kernel below `d.proc()`, kills inside containers
/// only, and tells the supervisor of each kill (`Event::GuardKilled`).
pub fn spawn(d: &Arc<Daemon>, init_of: InitOf) {
    let d = Arc::clone(d);
    let spawned = std::thread::Builder::new()
        .name("guard".into())
        .stack_size(128 * 1024)
        .spawn(move || run(&d, &init_of));
    if let Err(e) = spawned {
        log::error!("cannot start the memory guard: {e}");
    }
}

fn available(proc: &Path) -> Option<u64> {
    process::read_meminfo(proc)
        .ok()
        .and_then(|t| guard::mem_available(&t))
}

fn run(d: &Daemon, init_of: &InitOf) {
    let proc = d.proc();
    let g = d.cfg.guard;
    let trigger = |t: &'static str| process::psi_memory_trigger(proc, t).map(|fd| (fd, t));
    let mut psi = match trigger(PSI_TRIGGER).or_else(|e| match e.raw_os_error() {
        Some(libc::EINVAL) => trigger(PSI_TRIGGER_UNPRIVILEGED),
        _ => Err(e),
    }) {
        Ok((fd, t)) => {
            log::info!(
                "memory guard: threshold {} MiB, PSI trigger \"{t}\"",
                g.threshold >> 20
            );
            Some(fd)
        }
        Err(e) => {
            log::info!(
                "memory guard: threshold {} MiB, no PSI trigger ({e}): reading meminfo every {} ms",
                g.threshold >> 20,
                g.interval_ms
            );
            None
        }
    };
    if !process::pidfd_supported() {
        log::info!(
            "memory guard: no pidfd (Linux < 5.3): kills by pid after checking the start time and pid namespace"
        );
    }
    let mut limit = RateLimit::default();
    let t0 = Instant::now();
    let mut released = t0;
    loop {
        let Some(avail) = available(proc) else {
            log::error!(
                "memory guard: cannot read MemAvailable from {}/meminfo; guard stopped",
                proc.display()
            );
            return;
        };
        if avail < g.threshold {
            relieve(d, init_of, &mut limit, t0);
            // Whatever was left (nothing killable), do not spin.
            std::thread::sleep(Duration::from_millis(g.interval_ms));
            continue;
        }
        let near = avail < g.threshold.saturating_mul(2);
        if !near && released.elapsed() >= RELEASE_GAP {
            // Before a long sleep: the wake-ups (and whatever code requests ran on other
            // threads) faulted pages of berth's code back in, by fault-around windows of up
            // to 64 KiB; hand them back, so a daemon left alone stays small. Also after a
            // PSI event (a memory stall anywhere on the machine), not only every 5 s: what
            // that wake-up faulted in would otherwise stay until the next safety-net wake.
            process::trim_heap();
            process::release_own_code(false);
            released = Instant::now();
        }
        match &psi {
            Some(fd) => {
                use std::os::fd::AsRawFd;
                let timeout = if near {
                    g.interval_ms as i32
                } else {
                    SAFETY_NET_MS
                };
                match process::poll(&[(fd.as_raw_fd(), process::POLLPRI)], timeout) {
                    Ok(rev) if rev[0] & process::POLLERR != 0 => {
                        log::warn!(
                            "memory guard: PSI trigger failed; reading meminfo every {} ms",
                            g.interval_ms
                        );
                        psi = None;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        log::warn!(
                            "memory guard: poll: {e}; reading meminfo every {} ms",
                            g.interval_ms
                        );
                        psi = None;
                    }
                }
            }
            None => std::thread::sleep(Duration::from_millis(g.interval_ms)),
        }
    }
}

/// A candidate and what proves it is a container's: its container's init and pid namespace.
struct Found {
    c: Candidate,
    ns: PathBuf,
    /// Its start time when listed: a pid with another is another process.
    start: u64,
}

fn candidates(d: &Daemon, init_of: &InitOf) -> Vec<Found> {
    let proc = d.proc();
    let packages: Vec<(String, i32)> = d
        .state
        .lock()
        .unwrap()
        .packages
        .values()
        .map(|p| (p.name.to_string(), p.manifest.resources.priority))
        .collect();
    let own_ns = std::fs::read_link(proc.join("self/ns/pid")).ok();
    let mut out = Vec::new();
    for (name, priority) in packages {
        let Some(init) = init_of(d, &name) else {
            continue;
        };
        let Ok(ns) = std::fs::read_link(proc.join(init.to_string()).join("ns/pid")) else {
            continue;
        };
        // A container always has a pid namespace of its own; anything else is not ours.
        if own_ns.as_ref() == Some(&ns) {
            continue;
        }
        let mut pids = process::pid_namespace_members(proc, init);
        pids.push(init);
        for pid in pids {
            let Some(rss) = std::fs::read_to_string(proc.join(pid.to_string()).join("status"))
                .ok()
                .and_then(|s| guard::status_rss(&s))
            else {
                continue;
            };
            let Ok((_, start)) = process::stat_start(proc, pid) else {
                continue;
            };
            out.push(Found {
                c: Candidate {
                    container: name.clone(),
                    priority,
                    pid,
                    rss,
                    is_init: pid == init,
                },
                ns: ns.clone(),
                start,
            });
        }
    }
    out
}

fn relieve(d: &Daemon, init_of: &InitOf, limit: &mut RateLimit, t0: Instant) {
    let proc = d.proc();
    let threshold = d.cfg.guard.threshold;
    let mut skip: Vec<i32> = Vec::new();
    let mut recent: Vec<RecentKill> = Vec::new();
    loop {
        let Some(avail) = available(proc) else { return };
        if avail >= threshold {
            return;
        }
        let now_ms = t0.elapsed().as_millis() as u64;
        let pend = guard::pending(&recent, now_ms, avail);
        if avail.saturating_add(pend) >= threshold {
            // The last kill's memory is on its way back: look again shortly, kill nothing.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        let found: Vec<Found> = candidates(d, init_of)
            .into_iter()
            .filter(|f| !skip.contains(&f.c.pid))
            .collect();
        let list: Vec<Candidate> = found.iter().map(|f| f.c.clone()).collect();
        let Some(victim) = guard::pick(avail + pend, threshold, &list) else {
            if let Some(n) = limit.allow(t0.elapsed().as_millis() as u64, LOG_LINES_PER_S) {
                log::warn!(
                    "memory guard: {} MiB available, below {} MiB, and no container process to kill{}",
                    avail >> 20,
                    threshold >> 20,
                    suppressed(n)
                );
            }
            return;
        };
        let f = found.iter().find(|f| f.c.pid == victim.pid).unwrap();
        match kill(proc, victim.pid, &f.ns, f.start) {
            Ok(pinned) => {
                if let Some(n) = limit.allow(t0.elapsed().as_millis() as u64, LOG_LINES_PER_S) {
                    log::warn!(
                        "memory guard: killed {} pid {}{} (RSS {} MiB, priority {}): {} MiB available, below {} MiB{}",
                        victim.container,
                        victim.pid,
                        if victim.is_init { " (init)" } else { "" },
                        victim.rss >> 20,
                        victim.priority,
                        avail >> 20,
                        threshold >> 20,
                        suppressed(n)
                    );
                }
                let kill = GuardKill {
                    pid: victim.pid,
                    init: victim.is_init,
                    rss: victim.rss,
                    priority: victim.priority,
                    available: avail,
                };
                records::record_guard_kill(d, &victim.container, &kill);
                d.notify(&victim.container, Event::GuardKilled(kill));
                recent.push(RecentKill {
                    at_ms: t0.elapsed().as_millis() as u64,
                    available: avail,
                    rss: victim.rss,
                });
                // Its memory is freed as it exits: wait for that, briefly.
                pinned.wait_exit(Some(Duration::from_secs(1)), Duration::from_millis(10));
            }
            // Gone by itself meanwhile (or its pid is another's now): nothing to say.
            Err(e)
                if e.raw_os_error() == Some(libc::ESRCH)
                    || e.kind() == std::io::ErrorKind::NotFound =>
            {
                log::debug!("memory guard: pid {} not killed: {e}", victim.pid);
            }
            Err(e) => {
                if let Some(n) = limit.allow(t0.elapsed().as_millis() as u64, LOG_LINES_PER_S) {
                    log::warn!(
                        "memory guard: cannot kill {} pid {}: {e}{}",
                        victim.container,
                        victim.pid,
                        suppressed(n)
                    );
                }
            }
        }
        // Killed or gone or not ours any more: never pick it again in this round.
        skip.push(victim.pid);
    }
}

fn suppressed(n: u32) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" ({n} earlier guard lines not logged)")
    }
}

/// SIGKILL to the process listed as (`pid`, `start`), after checking that it still is that
/// process (its start time) in the container's pid namespace. With a pidfd the pid cannot be
/// recycled between the checks and the signal; without one ([`process::Pinned`]) the start
/// time is read again just before the signal, which leaves a window of two syscalls.
fn kill(proc: &Path, pid: i32, ns: &Path, start: u64) -> std::io::Result<process::Pinned> {
    let pinned = process::Pinned::open(proc, pid)?;
    if pinned.start() != start {
        return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
    }
    let now = std::fs::read_link(proc.join(pid.to_string()).join("ns/pid"))?;
    if now != ns {
        // No longer the container's: as good as gone.
        return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
    }
    pinned.signal(libc::SIGKILL)?;
    Ok(pinned)
}
