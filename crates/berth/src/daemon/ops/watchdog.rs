//! The watchdog thread: keeps the hardware watchdog (`[watchdog] device`) alive only while
//! every component's heartbeat is fresh, and confirms this daemon start once it has been up
//! and healthy for `[boot] confirm_after`. A component silent for longer than 3 × the
//! interval stops the keep-alives (and is named in the log); the device then resets the
//! machine after its timeout. A clean stop writes the magic close `V` (`Handle::close`); a
//! stall or a killed daemon never does.
//!
//! Without a device the thread lives only until the start is confirmed, and the loops do not
//! beat every interval: at `confirm_after` the thread asks each loop for one heartbeat and
//! confirms once every one has answered (no wake-ups while idle, so no code faulted back in
//! every interval).

use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::daemon::base::context::{Component, Daemon};
use crate::daemon::device::boot;

/// The open device, shared with the main thread for the magic close.
pub(crate) struct Handle {
    device: Arc<Mutex<Option<File>>>,
}

impl Handle {
    /// The clean stop: `V`, then close, so that the device does not reset the machine while
    /// the daemon is deliberately gone.
    pub(crate) fn close(self) {
        let taken = self.device.lock().unwrap().take();
        if let Some(f) = taken {
            match berth_sys::watchdog::magic_close(f) {
                Ok(()) => log::info!("watchdog: magic close written"),
                Err(e) => log::warn!("watchdog: magic close failed: {e}"),
            }
        }
    }
}

pub(crate) fn spawn(d: &Arc<Daemon>) -> Handle {
    let device = Arc::new(Mutex::new(None));
    let handle = Handle {
        device: Arc::clone(&device),
    };
    // Start-up (reconcile, safe mode's stops) is over: the main thread's clock starts now
    // (the supervisor's started busy, with its boot).
    d.beat(Component::Api);
    if d.cfg.watchdog.device.is_none() && d.boot.confirmed.load(Ordering::SeqCst) {
        return handle;
    }
    let d = Arc::clone(d);
    let spawned = berth_sys::process::spawn_thread(
        "watchdog".into(),
        128 * 1024,
        Box::new(move || run(&d, &device)),
    );
    if let Err(e) = spawned {
        log::error!("cannot start the watchdog thread: {e}");
    }
    handle
}

/// Without a device: at `confirm_after`, asks the loops for a heartbeat each and confirms
/// this start once every one has beaten since (a heartbeat proper: being busy with a start or
/// a stop, a heartbeat in the future for the device's sake, does not count, nor a stalled
/// one before its stall ends). A loop that has not is waited for, at most 3 × the interval;
/// then it is named and asked again an interval later.
fn confirm_on_demand(d: &Daemon) {
    let interval = Duration::from_millis(d.cfg.watchdog.interval_ms);
    let confirm_at = d.started + Duration::from_millis(d.cfg.boot.confirm_after_ms);
    std::thread::sleep(confirm_at.saturating_duration_since(Instant::now()));
    loop {
        // A heartbeat stamped after this millisecond came after the question.
        let asked = d.clock_ms();
        std::thread::sleep(Duration::from_millis(1));
        d.ask_beats();
        let deadline = Instant::now() + 3 * interval;
        let silent = loop {
            let silent: Vec<Component> = Component::ALL
                .into_iter()
                .filter(|c| (d.alive_ms(*c).wrapping_sub(asked) as i32) <= 0)
                .collect();
            if silent.is_empty() || Instant::now() >= deadline {
                break silent;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        if silent.is_empty() {
            boot::confirm(d);
            crate::daemon::base::context::release_code(false);
            return;
        }
        let who: Vec<&str> = silent.iter().map(|c| c.name()).collect();
        log::warn!(
            "watchdog: {} busy or silent for {} ms after being asked; this start is not confirmed yet",
            who.join(", "),
            3 * interval.as_millis()
        );
        std::thread::sleep(interval);
    }
}

fn open(d: &Daemon, device: &Mutex<Option<File>>) {
    let Some(path) = &d.cfg.watchdog.device else {
        return;
    };
    let f = match berth_sys::watchdog::open(path) {
        Ok(f) => f,
        Err(e) => {
            return log::error!(
                "watchdog: cannot open {}: {e}; it is not kept alive",
                path.display()
            )
        }
    };
    if let Some(t) = d.cfg.watchdog.timeout_s {
        if berth_sys::watchdog::is_char_device(path) {
            match berth_sys::watchdog::set_timeout(&f, t) {
                Ok(set) => log::info!("watchdog: timeout {set} s"),
                Err(e) => log::warn!("watchdog: cannot set the timeout to {t} s: {e}"),
            }
        } else {
            log::info!(
                "watchdog: {} is not a character device: timeout not set",
                path.display()
            );
        }
    }
    log::info!(
        "watchdog: keeping {} alive every {} ms",
        path.display(),
        d.cfg.watchdog.interval_ms
    );
    *device.lock().unwrap() = Some(f);
}

fn run(d: &Daemon, device: &Mutex<Option<File>>) {
    if d.cfg.watchdog.device.is_none() {
        return confirm_on_demand(d);
    }
    open(d, device);
    // Taken again by the clean stop's magic close: then there is nothing more to keep alive.
    let opened = device.lock().unwrap().is_some();
    let interval = Duration::from_millis(d.cfg.watchdog.interval_ms);
    let bound_ms = (3 * d.cfg.watchdog.interval_ms).min(i32::MAX as u64) as i32;
    let confirm_at = d.started + Duration::from_millis(d.cfg.boot.confirm_after_ms);
    let mut was_stale: Vec<Component> = Vec::new();
    let mut write_failed = false;
    loop {
        if opened && device.lock().unwrap().is_none() {
            return;
        }
        let stale: Vec<Component> = Component::ALL
            .into_iter()
            .filter(|c| d.beat_age_ms(*c) > bound_ms)
            .collect();
        if stale != was_stale {
            if stale.is_empty() {
                log::info!("watchdog: every component is healthy again; keep-alives resume");
            } else {
                let who: Vec<String> = stale
                    .iter()
                    .map(|c| format!("{} (silent {} ms)", c.name(), d.beat_age_ms(*c)))
                    .collect();
                log::error!(
                    "watchdog: stalled: {}; keep-alives stopped (bound {bound_ms} ms)",
                    who.join(", ")
                );
            }
            was_stale = stale.clone();
        }
        if stale.is_empty() {
            if let Some(f) = device.lock().unwrap().as_mut() {
                match berth_sys::watchdog::keepalive(f) {
                    Ok(()) => write_failed = false,
                    Err(e) if !write_failed => {
                        write_failed = true;
                        log::error!("watchdog: keep-alive failed: {e}");
                    }
                    Err(_) => {}
                }
            }
            if !d.boot.confirmed.load(Ordering::SeqCst) && Instant::now() >= confirm_at {
                boot::confirm(d);
            }
        }
        let confirmed = d.boot.confirmed.load(Ordering::SeqCst);
        if d.cfg.watchdog.device.is_none() && confirmed {
            return;
        }
        let mut sleep = interval;
        if !confirmed {
            let left = confirm_at.saturating_duration_since(Instant::now());
            if !left.is_zero() {
                sleep = sleep.min(left);
            }
        }
        // The loops' heartbeats fault a little code back in every interval: hand it back, as
        // the memory guard does before its own long sleep.
        crate::daemon::base::context::release_code(false);
        std::thread::sleep(sleep);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::PathBuf;
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::daemon::base::testing::fake_daemon;
    use berth_testkit::TempDir;

    /// The device's interval here (the smallest berth.toml allows): 3 × it is the bound.
    const INTERVAL_MS: u64 = 100;

    /// A daemon keeping `device` (in its temp dir) alive every [`INTERVAL_MS`], its start
    /// confirmed after `confirm_after_ms`.
    fn daemon(tag: &str, device: Option<&str>, confirm_after_ms: u64) -> (TempDir, Arc<Daemon>) {
        let (dir, mut d, _m) = fake_daemon(tag, "");
        d.cfg.watchdog.device = device.map(|n| dir.path(n));
        d.cfg.watchdog.interval_ms = INTERVAL_MS;
        d.cfg.boot.confirm_after_ms = confirm_after_ms;
        (dir, Arc::new(d))
    }

    /// Waits until `cond` holds, at most 30 s.
    fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        let until = Instant::now() + Duration::from_secs(30);
        while !cond() {
            assert!(Instant::now() < until, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A component loop as the daemon runs them: beats every few milliseconds while
    /// `alive` says so (the supervisor's flag apart), until `stop`.
    struct Loops {
        stop: Arc<AtomicBool>,
        supervisor: Arc<AtomicBool>,
        t: Option<std::thread::JoinHandle<()>>,
    }

    impl Loops {
        fn start(d: &Arc<Daemon>) -> Loops {
            let stop = Arc::new(AtomicBool::new(false));
            let supervisor = Arc::new(AtomicBool::new(true));
            let (d, s, sup) = (Arc::clone(d), Arc::clone(&stop), Arc::clone(&supervisor));
            let t = std::thread::spawn(move || {
                while !s.load(Ordering::SeqCst) {
                    d.beat(Component::Api);
                    if sup.load(Ordering::SeqCst) {
                        d.beat(Component::Supervisor);
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            });
            Loops {
                stop,
                supervisor,
                t: Some(t),
            }
        }
    }

    impl Drop for Loops {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            if let Some(t) = self.t.take() {
                let _ = t.join();
            }
        }
    }

    fn keepalives(path: &PathBuf) -> usize {
        std::fs::read(path)
            .unwrap()
            .iter()
            .filter(|b| **b == b'k')
            .count()
    }

    /// Long enough for the watchdog to go round many times: a window in which nothing may
    /// be written (not a wait for something to happen).
    fn window() {
        std::thread::sleep(Duration::from_millis(10 * INTERVAL_MS));
    }

    /// While every component beats the device gets keep-alives; the clean stop writes the
    /// magic close `V` last, and nothing after it.
    #[test]
    fn keep_alives_while_every_component_beats_then_the_magic_close() {
        let (dir, d) = daemon("watchdog-keep", Some("wd"), 3_600_000);
        let path = dir.path("wd");
        std::fs::write(&path, b"").unwrap();
        let loops = Loops::start(&d);
        let h = spawn(&d);
        wait_for("three keep-alives", || keepalives(&path) >= 3);
        assert!(
            !d.boot.confirmed.load(Ordering::SeqCst),
            "confirm_after not reached"
        );
        h.close();
        let after_close = std::fs::read(&path).unwrap();
        assert_eq!(after_close.last(), Some(&b'V'), "{after_close:?}");
        assert!(after_close[..after_close.len() - 1]
            .iter()
            .all(|b| *b == b'k'));
        window();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            after_close,
            "closed: no more writes"
        );
        drop(loops);
    }

    /// A component silent for more than 3 intervals stops the keep-alives (the device is to
    /// reset the machine); once it beats again they resume.
    #[test]
    fn a_stalled_component_stops_the_keep_alives_until_it_beats_again() {
        let (dir, d) = daemon("watchdog-stall", Some("wd"), 3_600_000);
        let path = dir.path("wd");
        std::fs::write(&path, b"").unwrap();
        let loops = Loops::start(&d);
        let h = spawn(&d);
        wait_for("keep-alives", || keepalives(&path) >= 2);
        loops.supervisor.store(false, Ordering::SeqCst);
        // Well past the bound: any round that saw it fresh has long written.
        let bound = 3 * INTERVAL_MS as i32;
        wait_for("the supervisor to be stale", || {
            d.beat_age_ms(Component::Supervisor) > bound + 1_000
        });
        let stalled = keepalives(&path);
        window();
        assert_eq!(
            keepalives(&path),
            stalled,
            "no keep-alive while one is stalled"
        );
        // The API kept beating after the supervisor stopped (a loaded machine may hold its
        // beating thread back for a while: no tighter bound than that).
        assert!(
            d.beat_age_ms(Component::Api) < d.beat_age_ms(Component::Supervisor),
            "the API kept beating"
        );

        loops.supervisor.store(true, Ordering::SeqCst);
        wait_for("keep-alives to resume", || keepalives(&path) > stalled);
        h.close();
        assert_eq!(std::fs::read(&path).unwrap().last(), Some(&b'V'));
    }

    /// A FIFO as the device (what a test rig reads): the keep-alives arrive in order, then
    /// the magic close and the end of the stream (the device closed).
    #[test]
    fn a_fifo_device_reads_keep_alives_then_the_magic_close_and_its_end() {
        let (dir, d) = daemon("watchdog-fifo", Some("wd"), 3_600_000);
        let path = dir.path("wd");
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
        // The reader first: a FIFO without one cannot be opened for writing without blocking.
        let mut reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .unwrap();
        let loops = Loops::start(&d);
        let h = spawn(&d);
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        wait_for("keep-alives through the FIFO", || {
            if let Ok(n) = reader.read(&mut buf) {
                got.extend_from_slice(&buf[..n]);
            }
            got.len() >= 3
        });
        h.close();
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < until, "the writer never closed: {got:?}");
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got.last(), Some(&b'V'), "{got:?}");
        assert!(got[..got.len() - 1].iter().all(|b| *b == b'k'), "{got:?}");
        drop(loops);
    }

    /// A device that cannot be opened is never created, and does not hold up the
    /// confirmation of a healthy start.
    #[test]
    fn a_missing_device_is_not_created_and_the_start_is_still_confirmed() {
        let (dir, d) = daemon("watchdog-missing", Some("absent/wd"), 1);
        d.boot.record.lock().unwrap().unconfirmed = vec![berth_core::boot::Start {
            at: 1_790_000_000,
            containers: vec!["web".into()],
        }];
        let loops = Loops::start(&d);
        let h = spawn(&d);
        wait_for("the confirmation", || {
            d.boot.confirmed.load(Ordering::SeqCst)
        });
        assert!(!dir.path("absent/wd").exists());
        assert!(d.boot.record.lock().unwrap().unconfirmed.is_empty());
        assert!(
            d.cfg.paths.boot_file().exists(),
            "the cleared counter is written"
        );
        h.close();
        drop(loops);
    }

    /// Without a device, the start is confirmed once both loops beat after being asked; a
    /// loop only marked busy (a heartbeat in the future) does not count until it beats.
    #[test]
    fn without_a_device_a_busy_loop_holds_the_confirmation_until_it_beats() {
        let (_dir, d) = daemon("watchdog-confirm", None, 1);
        let loops = Loops::start(&d);
        loops.supervisor.store(false, Ordering::SeqCst);
        d.beat_busy(Component::Supervisor);
        let _h = spawn(&d);
        // Past the first question and its 3 intervals of waiting.
        window();
        assert!(
            !d.boot.confirmed.load(Ordering::SeqCst),
            "the supervisor never beat"
        );
        assert!(!d.cfg.paths.boot_file().exists());
        loops.supervisor.store(true, Ordering::SeqCst);
        wait_for("the confirmation", || {
            d.boot.confirmed.load(Ordering::SeqCst)
        });
        assert!(d.cfg.paths.boot_file().exists());
        drop(loops);
    }

    /// A start already confirmed (safe mode) without a device needs no watchdog thread: the
    /// API's clock starts, and nothing confirms (writes the counter) again.
    #[test]
    fn a_confirmed_start_without_a_device_only_starts_the_api_clock() {
        let (_dir, d) = daemon("watchdog-none", None, 1);
        d.boot.confirmed.store(true, Ordering::SeqCst);
        wait_for("the clock to move", || d.clock_ms() >= 5);
        let loops = Loops::start(&d);
        let _h = spawn(&d);
        assert!(d.alive_ms(Component::Api) >= 5);
        window();
        assert!(
            !d.cfg.paths.boot_file().exists(),
            "nothing confirmed it again"
        );
        drop(loops);
    }
}
