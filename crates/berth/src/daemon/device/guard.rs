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

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_core::guard::{self, Candidate, RateLimit, RecentKill};
use berth_core::supervise::{Event, GuardKill};
use berth_sys::process;

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
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

/// How the guard has process `pid` of container `name` (init `init`), listed as started at
/// `start`, killed: an intent the supervisor carries out ([`kill_listed`]).
pub type KillOf = Box<dyn Fn(&Daemon, &str, i32, u64, i32) -> Result<()> + Send>;

/// Starts the guard thread. It reads the kernel below `d.proc()`, has processes inside
/// containers only killed, and tells the supervisor of each kill (`Event::GuardKilled`).
pub fn spawn(d: &Arc<Daemon>, init_of: InitOf, kill_of: KillOf) {
    let d = Arc::clone(d);
    let spawned = berth_sys::process::spawn_thread(
        "guard".into(),
        128 * 1024,
        Box::new(move || run(&d, &init_of, &kill_of)),
    );
    if let Err(e) = spawned {
        log::error!("cannot start the memory guard: {e}");
    }
}

/// What the daemon may use for its own work now without taking the device below the
/// guard's threshold (where the guard would kill a container for it): MemAvailable less the
/// threshold; None when MemAvailable cannot be read.
pub(crate) fn headroom(d: &Daemon) -> Option<u64> {
    available(d.proc()).map(|a| a.saturating_sub(d.cfg.guard.threshold))
}

fn available(proc: &Path) -> Option<u64> {
    process::read_meminfo(proc)
        .ok()
        .and_then(|t| guard::mem_available(&t))
}

fn run(d: &Daemon, init_of: &InitOf, kill_of: &KillOf) {
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
            relieve(d, init_of, kill_of, &mut limit, t0);
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
            crate::daemon::base::context::release_code(false);
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
    /// Its container's init.
    init: i32,
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
                init,
                start,
            });
        }
    }
    out
}

fn relieve(d: &Daemon, init_of: &InitOf, kill_of: &KillOf, limit: &mut RateLimit, t0: Instant) {
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
        match kill_of(d, &victim.container, victim.pid, f.start, f.init) {
            Ok(()) => {
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
            }
            // Gone by itself meanwhile (or its pid is another's now): nothing to say.
            Err(e) if e.kind == Kind::NotRunning => {
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

/// The guard's kill, as the supervisor's worker carries it out: SIGKILL to process `pid` if
/// it is still the one listed (`start`) in the pid namespace of `init`'s container, then a
/// wait for its exit (its memory is freed as it exits), a second at most. A process gone
/// by itself (or whose pid is another's now) is `not_running`.
pub fn kill_listed(d: &Daemon, pid: i32, start: u64, init: i32) -> Result<()> {
    let proc = d.proc();
    let killed = std::fs::read_link(proc.join(init.to_string()).join("ns/pid"))
        .and_then(|ns| kill(proc, pid, &ns, start));
    match killed {
        Ok(pinned) => {
            pinned.wait_exit(Some(Duration::from_secs(1)), Duration::from_millis(10));
            Ok(())
        }
        Err(e) => {
            let gone =
                e.raw_os_error() == Some(libc::ESRCH) || e.kind() == std::io::ErrorKind::NotFound;
            let kind = if gone {
                Kind::NotRunning
            } else {
                Kind::Internal
            };
            Err(Error::new(kind, e.to_string()))
        }
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

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Child, Command};

    use berth_core::api::guard_kill as gk;
    use serde_json::Value;

    use super::*;
    use crate::daemon::base::testing::{fake_daemon, install, MANIFEST};

    /// A package `db` 1.0 of priority 5 (killed after `web`'s priority 0).
    const DB: &str = "[package]\nname = \"db\"\nversion = \"1.0\"\n[entrypoint]\nargv = [\"/bin/db\"]\n[resources]\npriority = 5\n";
    const SELF_NS: &str = "pid:[4026531836]";
    const WEB_NS: &str = "pid:[4026532100]";
    const DB_NS: &str = "pid:[4026532200]";

    /// Processes the test started (`sleep`), killed and reaped when it ends: the only
    /// processes a guard under test may signal.
    struct Kids(Vec<Child>);

    impl Kids {
        fn start(n: usize) -> Kids {
            Kids(
                (0..n)
                    .map(|_| Command::new("sleep").arg("60").spawn().unwrap())
                    .collect(),
            )
        }
        fn pid(&self, i: usize) -> i32 {
            self.0[i].id() as i32
        }
        fn alive(&mut self, i: usize) -> bool {
            self.0[i].try_wait().unwrap().is_none()
        }
        /// Waits for it (it must have been killed): the signal that ended it.
        fn ended_by(&mut self, i: usize) -> Option<i32> {
            self.0[i].wait().unwrap().signal()
        }
    }

    impl Drop for Kids {
        fn drop(&mut self) {
            for c in &mut self.0 {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    /// `pid` in the daemon's /proc: its stat (start time `start`), status (`rss_kib` of
    /// VmRSS, none when None) and pid namespace `ns`.
    fn process(d: &Daemon, pid: i32, ns: &str, rss_kib: Option<u64>, start: u64) {
        let dir = d.proc().join(pid.to_string());
        std::fs::create_dir_all(dir.join("ns")).unwrap();
        let fields = " 1".repeat(18);
        std::fs::write(
            dir.join("stat"),
            format!("{pid} (sleep) S{fields} {start} 0 0\n"),
        )
        .unwrap();
        let rss = rss_kib.map_or(String::new(), |k| format!("VmRSS:\t{k} kB\n"));
        std::fs::write(dir.join("status"), format!("Name:\tsleep\n{rss}")).unwrap();
        let link = dir.join("ns/pid");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(ns, link).unwrap();
    }

    /// The daemon's /proc: its own pid namespace, and `avail_kib` of MemAvailable.
    fn kernel(d: &Daemon, avail_kib: u64) {
        std::fs::create_dir_all(d.proc().join("self/ns")).unwrap();
        let _ = std::fs::remove_file(d.proc().join("self/ns/pid"));
        std::os::unix::fs::symlink(SELF_NS, d.proc().join("self/ns/pid")).unwrap();
        std::fs::write(
            d.proc().join("meminfo"),
            format!("MemTotal:\t1048576 kB\nMemFree:\t1024 kB\nMemAvailable:\t{avail_kib} kB\n"),
        )
        .unwrap();
        std::fs::create_dir_all(d.cfg.paths.run.join("logs")).unwrap();
    }

    fn inits(list: &[(&str, i32)]) -> InitOf {
        let list: Vec<(String, i32)> = list.iter().map(|(n, p)| (n.to_string(), *p)).collect();
        Box::new(move |_, name| list.iter().find(|(n, _)| n == name).map(|(_, p)| *p))
    }

    /// The supervisor's events so far.
    fn events(d: &Daemon) -> Vec<(String, Event)> {
        std::iter::from_fn(|| d.next_event(Some(Instant::now()))).collect()
    }

    /// The kill the supervisor's worker makes, without the supervisor.
    fn direct() -> KillOf {
        Box::new(|d, _, pid, start, init| kill_listed(d, pid, start, init))
    }

    fn relieve_now(d: &Daemon, init_of: &InitOf) {
        relieve(
            d,
            init_of,
            &direct(),
            &mut RateLimit::default(),
            Instant::now(),
        );
    }

    /// Below the threshold the guard kills the lowest priority's payload first, then its
    /// init, then the next container's; each kill told to the supervisor and recorded per
    /// container (with a count); a process in the daemon's own pid namespace is never hit.
    #[test]
    fn below_the_threshold_the_lowest_priority_payload_goes_first_and_each_kill_is_recorded() {
        let (_dir, d, _m) = fake_daemon("guard-kill", "[guard]\nthreshold = \"64M\"\n");
        install(&d, MANIFEST);
        install(&d, DB);
        kernel(&d, 32 << 10);
        // web's init, web's payload, db's init, a host process.
        let mut kids = Kids::start(4);
        let (web_init, web_payload, db_init, host) =
            (kids.pid(0), kids.pid(1), kids.pid(2), kids.pid(3));
        process(&d, web_init, WEB_NS, Some(1024), 500);
        process(&d, web_payload, WEB_NS, Some(2048), 501);
        process(&d, db_init, DB_NS, Some(4096), 502);
        process(&d, host, SELF_NS, Some(900_000), 503);
        let init_of = inits(&[("web", web_init), ("db", db_init)]);

        relieve_now(&d, &init_of);

        let kills: Vec<(String, GuardKill)> = events(&d)
            .into_iter()
            .map(|(n, e)| match e {
                Event::GuardKilled(k) => (n, k),
                other => panic!("{n}: {other:?}"),
            })
            .collect();
        let k = |pid, init, rss: u64, priority| GuardKill {
            pid,
            init,
            rss: rss << 10,
            priority,
            available: 32 << 20,
        };
        assert_eq!(
            kills,
            [
                ("web".to_string(), k(web_payload, false, 2048, 0)),
                ("web".to_string(), k(web_init, true, 1024, 0)),
                ("db".to_string(), k(db_init, true, 4096, 5)),
            ]
        );
        for i in 0..3 {
            assert_eq!(kids.ended_by(i), Some(libc::SIGKILL), "process {i}");
        }
        assert!(kids.alive(3), "the host's process is never killed");
        let file = |n: &str| -> Value {
            serde_json::from_slice(&std::fs::read(d.cfg.paths.guard_file(n)).unwrap()).unwrap()
        };
        let web = file("web");
        assert_eq!(web[gk::COUNT], 2);
        assert_eq!(web[gk::PID], web_init);
        assert_eq!(web[gk::INIT], true);
        assert_eq!(web[gk::THRESHOLD], 64u64 << 20);
        let db = file("db");
        assert_eq!(
            (db[gk::COUNT].clone(), db[gk::PID].clone()),
            (1.into(), db_init.into())
        );
        assert_eq!(db[gk::PRIORITY], 5);
        assert_eq!(records::last_guard_kill(&d, "web"), web);
    }

    /// At or above the threshold, or without a MemAvailable to read, nothing is killed,
    /// told or recorded; below it with no container process, nothing either.
    #[test]
    fn nothing_is_killed_at_the_threshold_without_memavailable_or_without_candidates() {
        let (_dir, d, _m) = fake_daemon("guard-none", "[guard]\nthreshold = \"64M\"\n");
        install(&d, MANIFEST);
        let mut kids = Kids::start(1);
        process(&d, kids.pid(0), WEB_NS, Some(50_000), 700);
        let init_of = inits(&[("web", kids.pid(0))]);
        for avail_kib in [64 << 10, 900 << 10] {
            kernel(&d, avail_kib);
            relieve_now(&d, &init_of);
            assert!(events(&d).is_empty(), "{avail_kib} kB available");
        }
        std::fs::write(d.proc().join("meminfo"), "MemTotal:\t1048576 kB\n").unwrap();
        relieve_now(&d, &init_of);
        assert!(events(&d).is_empty(), "no MemAvailable");
        // Below, but the container does not run (no init): nothing of it is a candidate.
        kernel(&d, 1 << 10);
        relieve_now(&d, &inits(&[]));
        assert!(events(&d).is_empty(), "no running container");
        assert!(kids.alive(0));
        assert!(!d.cfg.paths.guard_file("web").exists());
        assert_eq!(records::last_guard_kill(&d, "web"), Value::Null);
    }

    /// The candidates are the members of each running container's own pid namespace with
    /// an RSS: not a container whose "init" is in the daemon's namespace, not a process of
    /// another namespace, not one without VmRSS (a zombie, a kernel thread).
    #[test]
    fn candidates_are_only_processes_of_a_containers_own_pid_namespace() {
        let (_dir, d, _m) = fake_daemon("guard-candidates", "");
        install(&d, MANIFEST);
        install(&d, DB);
        kernel(&d, 1 << 10);
        // No signal is sent here: the pids need not be the test's.
        process(&d, 3001, WEB_NS, Some(100), 1);
        process(&d, 3002, WEB_NS, Some(300), 2);
        process(&d, 3003, WEB_NS, None, 3);
        process(&d, 3004, DB_NS, Some(400), 4);
        process(&d, 3005, SELF_NS, Some(500), 5);
        let mut got: Vec<(String, i32, bool, u64, u64)> =
            candidates(&d, &inits(&[("web", 3001), ("db", 3005)]))
                .into_iter()
                .map(|f| (f.c.container, f.c.pid, f.c.is_init, f.c.rss, f.start))
                .collect();
        got.sort_by_key(|c| c.1);
        assert_eq!(
            got,
            [
                ("web".to_string(), 3001, true, 100 << 10, 1),
                ("web".to_string(), 3002, false, 300 << 10, 2),
            ]
        );
        let web = candidates(&d, &inits(&[("web", 3001)]));
        assert!(
            web.iter().all(|f| f.init == 3001),
            "each listed with its init"
        );
        assert!(
            candidates(&d, &inits(&[("web", 3999)])).is_empty(),
            "an init without /proc entry"
        );
    }

    /// A kill goes only to the process listed: another start time or another pid namespace
    /// is as good as gone (ESRCH), a pid without /proc entry is not found; nothing is sent.
    #[test]
    fn a_kill_is_refused_when_the_process_is_no_longer_the_one_listed() {
        let (_dir, d, _m) = fake_daemon("guard-pinned", "");
        let mut kids = Kids::start(2);
        let (pid, other) = (kids.pid(0), kids.pid(1));
        process(&d, pid, WEB_NS, Some(10), 77);
        let proc = d.proc();
        let esrch = |r: std::io::Result<process::Pinned>| r.err().and_then(|e| e.raw_os_error());
        assert_eq!(
            esrch(kill(proc, pid, Path::new(WEB_NS), 78)),
            Some(libc::ESRCH)
        );
        assert_eq!(
            esrch(kill(proc, pid, Path::new(DB_NS), 77)),
            Some(libc::ESRCH)
        );
        let e = kill(proc, other, Path::new(WEB_NS), 77).err().unwrap();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
        assert!(kids.alive(0) && kids.alive(1));
        kill(proc, pid, Path::new(WEB_NS), 77).unwrap();
        assert_eq!(kids.ended_by(0), Some(libc::SIGKILL));
        assert!(kids.alive(1));
    }

    /// Without a MemAvailable to read the guard thread says so and stops (not a spin).
    #[test]
    fn the_guard_stops_when_memavailable_cannot_be_read() {
        let (_dir, d, _m) = fake_daemon("guard-stop", "");
        install(&d, MANIFEST);
        let d = Arc::new(d);
        let (tx, rx) = std::sync::mpsc::channel();
        let d2 = Arc::clone(&d);
        std::thread::spawn(move || {
            run(&d2, &inits(&[]), &direct());
            let _ = tx.send(());
        });
        assert!(
            rx.recv_timeout(Duration::from_secs(30)).is_ok(),
            "the guard runs on without meminfo"
        );
        assert!(events(&d).is_empty());
    }
}
