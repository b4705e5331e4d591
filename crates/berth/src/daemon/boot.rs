//! The boot counter (`<state>/boot.json`) and the safe-mode marker (`<state>/safe-mode.json`):
//! read once at start, changed atomically, decided by `berth_core::boot`. A damaged or
//! unreadable counter is logged and counted afresh: it must never keep the daemon from
//! starting. A marker that cannot be read means safe mode: in doubt, start nothing.

use std::sync::atomic::Ordering;

use berth_core::boot::{self, Decision, Marker, Record};
use berth_sys::fsutil::write_atomic;

use crate::daemon::context::Daemon;
use crate::daemon::error::{Error, Kind, Result};
use crate::daemon::state::write_failed;

/// At start: safe mode if the marker says so or too many starts went unconfirmed; else this
/// start is counted, unconfirmed.
pub(crate) fn begin(d: &Daemon) {
    let paths = &d.cfg.paths;
    let marker = paths.safe_mode_file();
    let reason = match std::fs::read_to_string(&marker) {
        Ok(text) => Some(match Marker::parse(&text) {
            Ok(m) => m.reason,
            Err(e) => format!("{}: {e}", marker.display()),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(format!("cannot read {}: {e}", marker.display())),
    };
    if let Some(reason) = reason {
        log::warn!("safe mode (until berth safe-mode clear): {reason}");
        set_safe(d, Some(reason));
        return;
    }
    let path = paths.boot_file();
    let found = match std::fs::read_to_string(&path) {
        Ok(text) => match Record::parse(&text) {
            Ok(r) => Some(r),
            Err(e) => {
                log::error!("{}: {e}; counting starts afresh", path.display());
                None
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            log::error!(
                "cannot read {}: {e}; counting starts afresh",
                path.display()
            );
            None
        }
    };
    let b = d.cfg.boot;
    let now = berth_sys::process::now_s();
    match boot::decide(found, b.max_failed, b.confirm_after_ms, now) {
        Decision::SafeMode { reason } => {
            log::error!("safe mode: {reason}; no image is mounted and no container starts until berth safe-mode clear");
            if let Err(e) = enter(d, &reason) {
                // Still safe mode for this run; the next start counts again.
                log::error!("{e}");
            }
        }
        Decision::Normal(r) => {
            log::info!(
                "daemon start {} of at most {} unconfirmed; confirmed after {} ms up",
                r.unconfirmed.len(),
                b.max_failed,
                b.confirm_after_ms
            );
            write_record(d, &r);
            *d.boot.record.lock().unwrap() = r;
        }
    }
}

fn set_safe(d: &Daemon, reason: Option<String>) {
    *d.boot.safe_mode.lock().unwrap() = reason;
    // Nothing runs in safe mode, so there is nothing to confirm; after a clear the operator
    // is there.
    d.boot.confirmed.store(true, Ordering::SeqCst);
}

fn write_record(d: &Daemon, r: &Record) {
    let path = d.cfg.paths.boot_file();
    if let Err(e) = write_atomic(&path, &r.to_json(), 0o600) {
        log::error!("cannot write the boot counter {}: {e}", path.display());
    }
}

/// Safe mode from now on, persisted before anything else changes: a daemon killed right
/// after still starts in safe mode. The boot counter is emptied (its starts are in the reason).
pub(crate) fn enter(d: &Daemon, reason: &str) -> Result<()> {
    set_safe(d, Some(reason.to_string()));
    let m = Marker {
        since: berth_sys::process::now_s(),
        reason: reason.to_string(),
    };
    let path = d.cfg.paths.safe_mode_file();
    write_atomic(&path, &m.to_json(), 0o600)
        .map_err(|e| write_failed(&path, e, "safe mode holds until the daemon stops"))?;
    let empty = Record::default();
    write_record(d, &empty);
    *d.boot.record.lock().unwrap() = empty;
    Ok(())
}

/// Back to normal: the marker goes (and the directory is synced, so that it stays gone), the
/// counter is emptied.
pub(crate) fn clear(d: &Daemon) -> Result<()> {
    let path = d.cfg.paths.safe_mode_file();
    match std::fs::remove_file(&path) {
        Ok(()) => {
            if let Err(e) = berth_sys::fsutil::fsync_dir(&d.cfg.paths.state) {
                log::warn!(
                    "{} removed, but fsync of its directory failed: {e}",
                    path.display()
                );
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(Error::internal(format!(
                "cannot remove {}: {e}",
                path.display()
            )))
        }
    }
    let empty = Record::default();
    write_record(d, &empty);
    *d.boot.record.lock().unwrap() = empty;
    set_safe(d, None);
    Ok(())
}

/// The refusal of whatever would mount an image or start a container in safe mode.
pub(crate) fn refuse_in_safe_mode(d: &Daemon, what: &str) -> Result<()> {
    match d.safe_mode() {
        None => Ok(()),
        Some(reason) => Err(Error::new(
            Kind::SafeMode,
            format!("{what}: the device is in safe mode ({reason}); berth safe-mode clear returns to normal"),
        )),
    }
}

/// `name` ran during this start: kept in the counter while the start is unconfirmed, so
/// that safe mode can say which packages ran in the starts that failed.
pub(crate) fn note_running(d: &Daemon, name: &str) {
    if d.boot.confirmed.load(Ordering::SeqCst) {
        return;
    }
    let mut r = d.boot.record.lock().unwrap();
    if r.note(name) {
        write_record(d, &r);
    }
}

/// A clean stop (SIGTERM, SIGINT: an operator's restart, a shutdown) is no failed start:
/// this start leaves the counter. A device in a boot loop never gets this far; a daemon
/// restarted by hand five times in two minutes must not end in safe mode.
pub(crate) fn clean_stop(d: &Daemon) {
    if d.boot.confirmed.load(Ordering::SeqCst) || d.safe_mode().is_some() {
        return;
    }
    let mut r = d.boot.record.lock().unwrap();
    if r.unconfirmed.pop().is_some() {
        write_record(d, &r);
    }
}

/// This start stayed up and healthy for `[boot] confirm_after`: the counter is emptied.
pub(crate) fn confirm(d: &Daemon) {
    let mut r = d.boot.record.lock().unwrap();
    r.unconfirmed.clear();
    write_record(d, &r);
    d.boot.confirmed.store(true, Ordering::SeqCst);
    log::info!(
        "daemon start confirmed ({} ms up and healthy): boot counter cleared",
        d.cfg.boot.confirm_after_ms
    );
}
