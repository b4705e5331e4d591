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
    let spawned = std::thread::Builder::new()
        .name("watchdog".into())
        .stack_size(128 * 1024)
        .spawn(move || run(&d, &device));
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
            berth_sys::process::release_own_code(false);
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
    let interval = Duration::from_millis(d.cfg.watchdog.interval_ms);
    let bound_ms = (3 * d.cfg.watchdog.interval_ms).min(i32::MAX as u64) as i32;
    let confirm_at = d.started + Duration::from_millis(d.cfg.boot.confirm_after_ms);
    let mut was_stale: Vec<Component> = Vec::new();
    let mut write_failed = false;
    loop {
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
        berth_sys::process::release_own_code(false);
        std::thread::sleep(sleep);
    }
}
