//! One thread watches every running container: a `poll()` over each one's shim (it answers
//! `wait` when the container ends) and its memory cgroup's OOM events; when a run ends, it
//! tells the supervisor how (the supervisor releases what it held). The thread is started
//! with the first container and sleeps in `poll()` without a timeout while nothing ends:
//! no wake-ups of its own. (Before, each running container had a thread of its own: a
//! 128 KiB stack each, and glibc's cache of those stacks after they ended.)

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use berth_core::supervise::{Event, Run};
use berth_sys::cgroupfs::OomWatch;
use berth_sys::process::{Pinned, POLLIN};

use crate::daemon::base::context::Daemon;
use crate::daemon::device::cgroups;
use crate::daemon::runtime::probe;

/// After the shim answered: how long it may take to remove its socket (its exit file is
/// written by then).
const SHIM_EXIT: Duration = Duration::from_secs(2);
/// Without a pidfd (Linux < 5.3): how often an orphaned init is looked at.
const INIT_LOOK: Duration = Duration::from_secs(1);
/// cgroup v1 tells when the OOM killer is invoked, before it has counted its kill: after
/// such an event the count is read again this often, this many times.
const OOM_LOOK: Duration = Duration::from_millis(50);
const OOM_LOOKS: u32 = 20;

/// What ends a watched run.
enum Until {
    /// The shim's answer to `wait` (the container ended), or its end.
    Shim(UnixStream),
    /// The shim answered; done when its socket is gone (it wrote the exit file first), at
    /// the latest at `until`.
    ShimGone { sock: PathBuf, until: Instant },
    /// No shim (killed, or never answered): the container may run on, and nobody records
    /// how it ends. Done when its init is gone: by its pidfd, or by its start time looked
    /// at every [`INIT_LOOK`].
    Init { init: Pinned, next: Instant },
    /// Over: tell the supervisor.
    Ended,
}

struct Watched {
    name: String,
    init: Run,
    until: Until,
    oom: Option<OomWatch>,
    /// OOM kills counted so far.
    seen: u64,
    /// Not looked at yet: a kill before the watch was set up is still told.
    first: bool,
    /// v1, after an OOM event: (next look, looks left). A run that ended meanwhile is told
    /// only after these looks, so that a kill the kernel counts late is still its own.
    oom_again: Option<(Instant, u32)>,
    /// What the shim has answered so far (its line comes whole, but a read may split it).
    answer: Vec<u8>,
}

/// The watcher's inbox: runs to watch, and a pipe that wakes its `poll()`.
struct Inbox {
    new: Arc<Mutex<Vec<Watched>>>,
    wake: Mutex<std::fs::File>,
}

static INBOX: Mutex<Option<Inbox>> = Mutex::new(None);

/// Watches the run whose init is `init` until it ends, then notifies the supervisor.
/// `fresh`: the run has just been started (its cgroup is new: every OOM kill counted there
/// is this run's, also one that came before the watch was set up), not taken over.
pub(crate) fn watch(d: &Arc<Daemon>, name: &str, init: Run, fresh: bool) {
    let until = match crate::shim::request(&d.cfg.paths.shim_socket(name), "wait") {
        Ok(s) if s.set_nonblocking(true).is_ok() => Until::Shim(s),
        _ => orphan(d, init),
    };
    let oom = match &until {
        Until::Shim(_) => d.resources.cgroups.as_ref().ok().and_then(|c| {
            c.oom_watch(&cgroups::payload_cgroup(d, name))
                .map_err(|e| log::warn!("{name}: OOM kills will not be reported: {e}"))
                .ok()
        }),
        _ => None,
    };
    let seen = match &oom {
        Some(w) if !fresh => w.kills().unwrap_or(0),
        _ => 0,
    };
    let w = Watched {
        name: name.to_string(),
        init,
        until,
        oom,
        seen,
        first: true,
        oom_again: None,
        answer: Vec::new(),
    };
    let mut inbox = INBOX.lock().unwrap();
    if inbox.is_none() {
        match start(d) {
            Ok(i) => *inbox = Some(i),
            Err(e) => {
                // Out of descriptors or threads: the container runs on unwatched; the next
                // start tries again, a daemon restart takes it over.
                return log::error!("{name}: cannot start the container watcher ({e}): its end will not be noticed until the daemon restarts");
            }
        }
    }
    if let Some(i) = inbox.as_ref() {
        i.new.lock().unwrap().push(w);
        let _ = i.wake.lock().unwrap().write_all(b"w");
    }
}

/// Until the init of a run without a shim is gone; Ended at once when it already is.
fn orphan(d: &Daemon, init: Run) -> Until {
    let ns = |p: String| std::fs::read_link(d.proc().join(p)).ok();
    let Some(theirs) = ns(format!("{init}/ns/pid")) else {
        return Until::Ended;
    };
    // A container's init is never in the daemon's own pid namespace: anything else is a
    // recycled pid, and the init is long gone.
    if ns("self/ns/pid".into()).as_ref() == Some(&theirs) {
        return Until::Ended;
    }
    match Pinned::open(d.proc(), init) {
        Ok(init) => Until::Init {
            init,
            next: Instant::now() + INIT_LOOK,
        },
        Err(_) => Until::Ended,
    }
}

/// Starts the watcher's thread; its inbox.
fn start(d: &Arc<Daemon>) -> std::io::Result<Inbox> {
    let (r, w) = berth_sys::process::pipe()?;
    berth_sys::process::set_nonblocking(r.as_raw_fd())?;
    let new = Arc::new(Mutex::new(Vec::new()));
    let queue = Arc::clone(&new);
    let d = Arc::clone(d);
    berth_sys::process::spawn_thread(
        "watch".into(),
        128 * 1024,
        Box::new(move || run(&d, r, &queue)),
    )?;
    Ok(Inbox {
        new,
        wake: Mutex::new(std::fs::File::from(w)),
    })
}

/// What a slot of the poll set belongs to.
enum Slot {
    Wake,
    Until(usize),
    Oom(usize),
}

fn run(d: &Daemon, wake: OwnedFd, queue: &Mutex<Vec<Watched>>) {
    let mut runs: Vec<Watched> = Vec::new();
    let mut wake = std::fs::File::from(wake);
    loop {
        runs.append(&mut queue.lock().unwrap());
        for w in runs.iter_mut() {
            if std::mem::take(&mut w.first) {
                look_for_oom_kills(d, w);
            }
        }
        let mut fds: Vec<(RawFd, i16)> = vec![(wake.as_raw_fd(), POLLIN)];
        let mut slots = vec![Slot::Wake];
        for (i, w) in runs.iter().enumerate() {
            let fd = match &w.until {
                Until::Shim(s) => Some(s.as_raw_fd()),
                Until::Init { init, .. } => init.pidfd().map(|f| f.as_raw_fd()),
                _ => None,
            };
            if let Some(fd) = fd {
                fds.push((fd, POLLIN));
                slots.push(Slot::Until(i));
            }
            if let (Some(o), Until::Shim(_)) = (&w.oom, &w.until) {
                fds.push((o.fd(), POLLIN));
                slots.push(Slot::Oom(i));
            }
        }
        let timeout = next_look(&runs).map_or(-1, |t| {
            t.saturating_duration_since(Instant::now()).as_millis() as i32 + 1
        });
        let ready = match berth_sys::process::poll(&fds, timeout) {
            Ok(r) => r,
            Err(e) => {
                log::error!("container watcher: poll: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        // OOM events first: a kill that ended the run is told before its end.
        for (slot, r) in slots.iter().zip(&ready) {
            match (slot, *r != 0) {
                (Slot::Wake, true) => {
                    let mut b = [0u8; 64];
                    while matches!(wake.read(&mut b), Ok(n) if n > 0) {}
                }
                (Slot::Oom(i), true) => {
                    let w = &mut runs[*i];
                    // v1 tells of an OOM before its kill is counted: look again a few times.
                    // v2's file changes with the count (and with memory.high's events,
                    // which need no looks).
                    let again = w.oom.as_ref().is_some_and(|o| {
                        o.drain();
                        o.fires_before_the_kill() && o.kills().is_some()
                    });
                    if !look_for_oom_kills(d, w) && again {
                        w.oom_again = Some((Instant::now() + OOM_LOOK, OOM_LOOKS));
                    }
                }
                _ => {}
            }
        }
        for (slot, r) in slots.iter().zip(&ready) {
            if let (Slot::Until(i), true) = (slot, *r != 0) {
                let w = &mut runs[*i];
                w.until = match std::mem::replace(&mut w.until, Until::Ended) {
                    Until::Shim(s) => shim_answered(d, w, s),
                    // The init's pidfd is readable: it exited.
                    _ => Until::Ended,
                };
            }
        }
        looks(d, &mut runs);
        let before = runs.len();
        runs.retain_mut(|w| {
            // After the OOM kills the kernel may still count (v1), never before.
            let over = matches!(w.until, Until::Ended) && w.oom_again.is_none();
            if over {
                look_for_oom_kills(d, w);
                d.notify(&w.name, Event::Exited(w.init, probe::exit_of(d, &w.name)));
            }
            !over
        });
        if runs.len() < before {
            berth_sys::process::trim_heap();
            crate::daemon::base::context::release_code(false);
        }
    }
}

/// The shim's socket said something or closed: the container ended (a whole answer), or
/// the shim died without one (the container may still run). Never blocks: a part of the
/// answer waits in `w.answer` for the rest.
fn shim_answered(d: &Daemon, w: &mut Watched, mut s: UnixStream) -> Until {
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(n) => {
                w.answer.extend_from_slice(&b[..n]);
                if w.answer.ends_with(b"\n") || w.answer.len() > 4096 {
                    break;
                }
            }
            // Woken for nothing yet, or half an answer: keep waiting.
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Until::Shim(s),
            Err(_) => break,
        }
    }
    if w.answer.is_empty() {
        return orphan(d, w.init);
    }
    Until::ShimGone {
        sock: d.cfg.paths.shim_socket(&w.name),
        until: Instant::now() + SHIM_EXIT,
    }
}

/// Reads the run's OOM kill count; tells the supervisor of new ones. Whether there were.
fn look_for_oom_kills(d: &Daemon, w: &mut Watched) -> bool {
    let Some(o) = &w.oom else { return false };
    let now = o.kills().unwrap_or(w.seen);
    if now <= w.seen {
        return false;
    }
    d.notify(
        &w.name,
        Event::OomKilled(w.init, (now - w.seen).min(u32::MAX as u64) as u32),
    );
    w.seen = now;
    w.oom_again = None;
    true
}

/// The earliest moment something must be looked at without an fd to wake the loop.
fn next_look(runs: &[Watched]) -> Option<Instant> {
    let mut next: Option<Instant> = None;
    let mut at = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
    for w in runs {
        match &w.until {
            // The socket's removal has no fd: every 20 ms, as the thread did before.
            Until::ShimGone { until, .. } => {
                at((Instant::now() + Duration::from_millis(20)).min(*until))
            }
            Until::Init { init, next } if init.pidfd().is_none() => at(*next),
            Until::Ended if w.oom_again.is_none() => at(Instant::now()),
            _ => {}
        }
        if let Some((t, _)) = w.oom_again {
            at(t);
        }
    }
    next
}

/// What is due without an fd: a shim's socket gone, an orphaned init without a pidfd, the
/// OOM count again.
fn looks(d: &Daemon, runs: &mut [Watched]) {
    let now = Instant::now();
    for w in runs.iter_mut() {
        if let Some((t, left)) = w.oom_again {
            if t <= now && !look_for_oom_kills(d, w) {
                w.oom_again = (left > 1).then(|| (now + OOM_LOOK, left - 1));
            }
        }
        let done = match &mut w.until {
            Until::ShimGone { sock, until } => !sock.exists() || *until <= now,
            Until::Init { init, next } if init.pidfd().is_none() && *next <= now => {
                *next = now + INIT_LOOK;
                init.exited()
            }
            _ => false,
        };
        if done {
            w.until = Until::Ended;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::process::{Child, Command};

    use berth_core::supervise::Exit;

    use super::*;
    use crate::daemon::base::testing::{fake_daemon, install, MANIFEST};
    use crate::daemon::runtime::probe::tests::cgroup_fixture;

    const SELF_NS: &str = "pid:[4026531836]";
    const WEB_NS: &str = "pid:[4026532100]";

    /// A run as the watcher keeps it.
    fn watched(name: &str, init: Run, until: Until, oom: Option<OomWatch>, seen: u64) -> Watched {
        Watched {
            name: name.into(),
            init,
            until,
            oom,
            seen,
            first: true,
            oom_again: None,
            answer: Vec::new(),
        }
    }

    /// `pid` in the daemon's /proc, in pid namespace `ns`; the daemon's own namespace.
    fn process(d: &Daemon, pid: i32, ns: &str) {
        let dir = d.proc().join(pid.to_string());
        std::fs::create_dir_all(dir.join("ns")).unwrap();
        std::fs::write(
            dir.join("stat"),
            format!("{pid} (init) S{} 4242 0 0\n", " 1".repeat(18)),
        )
        .unwrap();
        std::os::unix::fs::symlink(ns, dir.join("ns/pid")).unwrap();
        std::fs::create_dir_all(d.proc().join("self/ns")).unwrap();
        let _ = std::os::unix::fs::symlink(SELF_NS, d.proc().join("self/ns/pid"));
    }

    /// A process the test started: the only one a watcher under test pins.
    struct Kid(Child);

    impl Drop for Kid {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn events(d: &Daemon, until: Instant) -> Vec<(String, Event)> {
        std::iter::from_fn(|| d.next_event(Some(until))).collect()
    }

    fn exit_record(d: &Daemon, name: &str, text: &str) {
        let f = d.cfg.paths.exit_file(name);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, text).unwrap();
    }

    /// A run whose shim is gone ends at once when its init has no /proc entry, or is in
    /// the daemon's own pid namespace (a recycled pid); otherwise the init is pinned and
    /// watched until it exits.
    #[test]
    fn an_orphaned_run_is_over_unless_its_init_lives_in_a_namespace_of_its_own() {
        let (_dir, d, _) = fake_daemon("watch-orphan", "");
        assert!(matches!(orphan(&d, 4001), Until::Ended), "no /proc entry");
        // A live process (the test's), but in the daemon's own namespace.
        let host = Kid(Command::new("sleep").arg("60").spawn().unwrap());
        process(&d, host.0.id() as i32, SELF_NS);
        let until = orphan(&d, host.0.id() as i32);
        assert!(matches!(until, Until::Ended), "the daemon's namespace");

        let mut kid = Kid(Command::new("sleep").arg("60").spawn().unwrap());
        let pid = kid.0.id() as i32;
        process(&d, pid, WEB_NS);
        let Until::Init { init, .. } = orphan(&d, pid) else {
            panic!("the init is not watched")
        };
        assert_eq!((init.pid(), init.start()), (pid, 4242));
        assert!(!init.exited());
        kid.0.kill().unwrap();
        kid.0.wait().unwrap();
        if init.has_pidfd() {
            assert!(init.exited(), "its pidfd says it exited");
        }
    }

    /// The shim's answer may come in parts: the run waits for the whole line, then for the
    /// shim's socket to go; a shim that closes without an answer leaves an orphan.
    #[test]
    fn a_shims_answer_is_read_whole_and_its_silence_makes_an_orphan() {
        let (_dir, d, _) = fake_daemon("watch-answer", "");
        let (ours, mut shim) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let mut w = watched("web", 4100, Until::Ended, None, 0);
        shim.write_all(b"{\"code\"").unwrap();
        let Until::Shim(ours) = shim_answered(&d, &mut w, ours) else {
            panic!("half an answer ended the wait")
        };
        assert_eq!(w.answer, b"{\"code\"");
        shim.write_all(b": 0}\n").unwrap();
        match shim_answered(&d, &mut w, ours) {
            Until::ShimGone { sock, until } => {
                assert_eq!(sock, d.cfg.paths.shim_socket("web"));
                assert!(until > Instant::now());
            }
            _ => panic!("a whole answer is not the shim's end"),
        }
        assert_eq!(w.answer, b"{\"code\": 0}\n");

        let (ours, shim) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        drop(shim);
        let mut w = watched("web", 4101, Until::Ended, None, 0);
        assert!(matches!(shim_answered(&d, &mut w, ours), Until::Ended));
    }

    /// After the answer: the run is over once the shim's socket is gone, or at the limit;
    /// v1's OOM looks count down and stop.
    #[test]
    fn a_run_is_over_when_the_shims_socket_goes_or_its_time_is_up() {
        let (_dir, d, _) = fake_daemon("watch-looks", "");
        let sock = d.cfg.paths.shim_socket("web");
        std::fs::create_dir_all(sock.parent().unwrap()).unwrap();
        std::fs::write(&sock, "").unwrap();
        let later = Instant::now() + Duration::from_secs(60);
        let gone = |until| Until::ShimGone {
            sock: sock.clone(),
            until,
        };
        let mut runs = vec![watched("web", 1, gone(later), None, 0)];
        assert!(next_look(&runs).is_some_and(|t| t <= Instant::now() + Duration::from_millis(20)));
        looks(&d, &mut runs);
        assert!(
            matches!(runs[0].until, Until::ShimGone { .. }),
            "its socket is there"
        );
        std::fs::remove_file(&sock).unwrap();
        looks(&d, &mut runs);
        assert!(matches!(runs[0].until, Until::Ended));

        std::fs::write(&sock, "").unwrap();
        let mut runs = vec![watched("web", 1, gone(Instant::now()), None, 0)];
        looks(&d, &mut runs);
        assert!(matches!(runs[0].until, Until::Ended), "its time is up");

        runs[0].oom_again = Some((Instant::now(), 2));
        looks(&d, &mut runs);
        assert!(matches!(runs[0].oom_again, Some((_, 1))));
        runs[0].oom_again = Some((Instant::now(), 1));
        looks(&d, &mut runs);
        assert!(runs[0].oom_again.is_none());
        let (ours, _shim) = UnixStream::pair().unwrap();
        assert!(next_look(&[watched("web", 1, Until::Shim(ours), None, 0)]).is_none());
    }

    /// The payload's OOM kills (its memory.events) are told as they are counted, once each.
    #[test]
    fn oom_kills_are_told_once_as_they_are_counted() {
        let (_dir, mut d, _) = fake_daemon("watch-oom", "");
        cgroup_fixture(&mut d, "web");
        let events_file = d
            .cgroup_root()
            .join(cgroups::payload_cgroup(&d, "web"))
            .join("memory.events");
        std::fs::write(&events_file, "oom 0\noom_kill 0\n").unwrap();
        let c = d.resources.cgroups.as_ref().unwrap();
        let o = c.oom_watch(&cgroups::payload_cgroup(&d, "web")).unwrap();
        let mut w = watched("web", 4200, Until::Ended, Some(o), 0);
        assert!(!look_for_oom_kills(&d, &mut w));
        std::fs::write(&events_file, "oom 3\noom_kill 3\n").unwrap();
        assert!(look_for_oom_kills(&d, &mut w));
        assert!(!look_for_oom_kills(&d, &mut w), "told once");
        assert_eq!(w.seen, 3);
        let now = Instant::now();
        assert_eq!(
            events(&d, now),
            [("web".to_string(), Event::OomKilled(4200, 3))]
        );
    }

    /// The watcher tells the supervisor how a run ended: the OOM kills before the end, the
    /// exit the shim recorded; a run whose shim went silent with no init left ends with an
    /// unknown exit.
    #[test]
    fn the_watcher_tells_the_supervisor_of_oom_kills_then_the_recorded_exit() {
        let (_dir, mut d, _) = fake_daemon("watch-run", "");
        install(&d, MANIFEST);
        cgroup_fixture(&mut d, "web");
        let payload = cgroups::payload_cgroup(&d, "web");
        std::fs::write(
            d.cgroup_root().join(&payload).join("memory.events"),
            "oom_kill 2\n",
        )
        .unwrap();
        exit_record(&d, "web", r#"{"code": 3, "signal": null}"#);
        let d = Arc::new(d);
        let oom = d
            .resources
            .cgroups
            .as_ref()
            .unwrap()
            .oom_watch(&payload)
            .unwrap();
        let (ours, mut shim) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        shim.write_all(b"{\"code\": 3}\n").unwrap();
        drop(shim);
        let (silent, shim) = UnixStream::pair().unwrap();
        silent.set_nonblocking(true).unwrap();
        drop(shim);

        let inbox = start(&d).unwrap();
        inbox.new.lock().unwrap().extend([
            watched("web", 4300, Until::Shim(ours), Some(oom), 0),
            watched("db", 4301, Until::Shim(silent), None, 0),
        ]);
        inbox.wake.lock().unwrap().write_all(b"w").unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut got = Vec::new();
        while got.len() < 3 {
            match d.next_event(Some(deadline)) {
                Some(e) => got.push(e),
                None => break,
            }
        }
        let web: Vec<&Event> = got
            .iter()
            .filter(|(n, _)| n == "web")
            .map(|(_, e)| e)
            .collect();
        let db: Vec<&Event> = got
            .iter()
            .filter(|(n, _)| n == "db")
            .map(|(_, e)| e)
            .collect();
        let exit = |code| Exit { code, signal: None };
        assert_eq!(
            web,
            [
                &Event::OomKilled(4300, 2),
                &Event::Exited(4300, exit(Some(3)))
            ]
        );
        assert_eq!(db, [&Event::Exited(4301, exit(None))]);
        // Its thread sleeps on: its wake pipe stays open (closed, it would spin).
        std::mem::forget(inbox);
    }
}
