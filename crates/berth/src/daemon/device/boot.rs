//! The boot counter (`<state>/boot.json`) and the safe-mode marker (`<state>/safe-mode.json`):
//! read once at start, changed atomically, decided by `berth_core::boot`. A damaged or
//! unreadable counter is logged and counted afresh: it must never keep the daemon from
//! starting. A marker that cannot be read means safe mode: in doubt, start nothing.

use std::sync::atomic::Ordering;

use berth_core::boot::{self, Decision, Marker, Record};
use berth_sys::fsutil::write_atomic;

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::device::state::write_failed;

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
        .map_err(|e| write_failed(d, &path, e, "safe mode holds until the daemon stops"))?;
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
        Some(reason) => Err(safe_mode_error(what, &reason)),
    }
}

/// The refusal of `what` in safe mode, entered for `reason`.
pub(crate) fn safe_mode_error(what: &str, reason: &str) -> Error {
    Error::new(
        Kind::SafeMode,
        format!("{what}: the device is in safe mode ({reason}); berth safe-mode clear returns to normal"),
    )
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::testing::fake_daemon;
    use berth_core::boot::Start;

    const BOOT: &str = "[boot]\nmax_failed = 3\nconfirm_after = \"30s\"\n";

    fn record_on_disk(d: &Daemon) -> Record {
        Record::parse(&std::fs::read_to_string(d.cfg.paths.boot_file()).unwrap()).unwrap()
    }

    fn starts(n: usize, names: &[&str]) -> Record {
        Record {
            unconfirmed: (0..n)
                .map(|i| Start {
                    at: 1_790_000_000 + i as u64,
                    containers: names.iter().map(|s| s.to_string()).collect(),
                })
                .collect(),
        }
    }

    /// A first start is counted, unconfirmed, on disk and in memory; no safe mode.
    #[test]
    fn a_start_is_counted_unconfirmed() {
        let (_dir, d, _) = fake_daemon("boot-first", BOOT);
        begin(&d);
        assert_eq!(d.safe_mode(), None);
        assert!(!d.boot.confirmed.load(Ordering::SeqCst));
        let r = record_on_disk(&d);
        assert_eq!(r.unconfirmed.len(), 1);
        assert!(r.unconfirmed[0].containers.is_empty());
        assert_eq!(*d.boot.record.lock().unwrap(), r);
        assert!(!d.cfg.paths.safe_mode_file().exists());
    }

    /// `max_failed` unconfirmed starts before this one: safe mode, its reason naming the
    /// containers that ran in them, persisted as the marker; the counter is emptied.
    #[test]
    fn too_many_unconfirmed_starts_enter_safe_mode() {
        let (_dir, d, _) = fake_daemon("boot-loop", BOOT);
        std::fs::write(d.cfg.paths.boot_file(), starts(3, &["web", "db"]).to_json()).unwrap();
        begin(&d);
        let reason = d.safe_mode().expect("safe mode");
        assert_eq!(
            reason,
            "3 daemon starts in a row did not stay up 30 s ([boot] confirm_after); containers running in them: db, web"
        );
        let m =
            Marker::parse(&std::fs::read_to_string(d.cfg.paths.safe_mode_file()).unwrap()).unwrap();
        assert_eq!(m.reason, reason);
        assert_eq!(record_on_disk(&d), Record::default());
        assert!(
            d.boot.confirmed.load(Ordering::SeqCst),
            "nothing to confirm"
        );
        assert_eq!(
            refuse_in_safe_mode(&d, "start web").unwrap_err().kind,
            Kind::SafeMode
        );
    }

    /// A start with fewer unconfirmed starts before it adds itself to them.
    #[test]
    fn a_start_below_the_limit_adds_itself() {
        let (_dir, d, _) = fake_daemon("boot-below", BOOT);
        std::fs::write(d.cfg.paths.boot_file(), starts(2, &["web"]).to_json()).unwrap();
        begin(&d);
        assert_eq!(d.safe_mode(), None);
        let r = record_on_disk(&d);
        assert_eq!(r.unconfirmed.len(), 3);
        assert_eq!(r.unconfirmed[..2], starts(2, &["web"]).unconfirmed[..]);
    }

    /// The marker decides before the counter: its reason is the safe mode's; a damaged marker
    /// is still safe mode (in doubt, start nothing), its reason naming the file.
    #[test]
    fn a_marker_means_safe_mode_even_a_damaged_one() {
        let (_dir, d, _) = fake_daemon("boot-marker", BOOT);
        let marker = d.cfg.paths.safe_mode_file();
        let m = Marker {
            since: 1_790_000_000,
            reason: "entered by the operator (berth safe-mode enter)".into(),
        };
        std::fs::write(&marker, m.to_json()).unwrap();
        begin(&d);
        assert_eq!(d.safe_mode().as_deref(), Some(m.reason.as_str()));
        assert!(!d.cfg.paths.boot_file().exists(), "the counter was touched");

        let (_dir, d, _) = fake_daemon("boot-marker-damaged", BOOT);
        let marker = d.cfg.paths.safe_mode_file();
        std::fs::write(&marker, "{\"since\": 1}").unwrap();
        begin(&d);
        let reason = d.safe_mode().expect("safe mode");
        assert!(
            reason.starts_with(&format!(
                "{}: safe-mode marker is damaged",
                marker.display()
            )),
            "{reason}"
        );
    }

    /// A damaged counter never keeps the daemon from starting: counted afresh.
    #[test]
    fn a_damaged_counter_is_counted_afresh() {
        let (_dir, d, _) = fake_daemon("boot-damaged", BOOT);
        std::fs::write(
            d.cfg.paths.boot_file(),
            "{\"format\": 1, \"unconfirmed\": [{",
        )
        .unwrap();
        begin(&d);
        assert_eq!(d.safe_mode(), None);
        assert_eq!(record_on_disk(&d).unconfirmed.len(), 1);

        // So is one of a format this berth does not read.
        let (_dir, d, _) = fake_daemon("boot-format", BOOT);
        let future = String::from_utf8(starts(5, &[]).to_json())
            .unwrap()
            .replace("\"format\":1", "\"format\":2");
        std::fs::write(d.cfg.paths.boot_file(), future).unwrap();
        begin(&d);
        assert_eq!(d.safe_mode(), None);
        assert_eq!(record_on_disk(&d).unconfirmed.len(), 1);
    }

    /// While the start is unconfirmed the containers that run are noted, once each; a
    /// confirmed start notes nothing and empties the counter.
    #[test]
    fn running_containers_are_noted_until_the_start_is_confirmed() {
        let (_dir, d, _) = fake_daemon("boot-note", BOOT);
        begin(&d);
        note_running(&d, "web");
        note_running(&d, "web");
        note_running(&d, "db");
        assert_eq!(record_on_disk(&d).unconfirmed[0].containers, ["web", "db"]);
        confirm(&d);
        assert!(d.boot.confirmed.load(Ordering::SeqCst));
        assert_eq!(record_on_disk(&d), Record::default());
        note_running(&d, "cache");
        assert_eq!(record_on_disk(&d), Record::default());
        assert_eq!(*d.boot.record.lock().unwrap(), Record::default());
    }

    /// A clean stop takes this start off the counter (an operator's restarts are no boot
    /// loop); after a confirmation, or in safe mode, it changes nothing.
    #[test]
    fn a_clean_stop_takes_this_start_off_the_counter() {
        let (_dir, d, _) = fake_daemon("boot-clean-stop", BOOT);
        std::fs::write(d.cfg.paths.boot_file(), starts(2, &["web"]).to_json()).unwrap();
        begin(&d);
        clean_stop(&d);
        assert_eq!(record_on_disk(&d), starts(2, &["web"]));

        let (_dir, d, _) = fake_daemon("boot-clean-stop-safe", BOOT);
        std::fs::write(d.cfg.paths.boot_file(), starts(3, &[]).to_json()).unwrap();
        begin(&d);
        *d.boot.record.lock().unwrap() = starts(1, &[]);
        d.boot.confirmed.store(false, Ordering::SeqCst);
        clean_stop(&d);
        assert_eq!(
            *d.boot.record.lock().unwrap(),
            starts(1, &[]),
            "in safe mode"
        );
    }

    /// `enter` persists safe mode before anything else and empties the counter; `clear` ends
    /// it, removing the marker; a clear out of safe mode is no error.
    #[test]
    fn enter_persists_safe_mode_and_clear_ends_it() {
        let (_dir, d, _) = fake_daemon("boot-enter-clear", BOOT);
        begin(&d);
        note_running(&d, "web");
        enter(&d, "by hand").unwrap();
        assert_eq!(d.safe_mode().as_deref(), Some("by hand"));
        let m =
            Marker::parse(&std::fs::read_to_string(d.cfg.paths.safe_mode_file()).unwrap()).unwrap();
        assert_eq!(m.reason, "by hand");
        assert_eq!(record_on_disk(&d), Record::default());
        let e = refuse_in_safe_mode(&d, "mount web's image").unwrap_err();
        assert_eq!(
            e.message,
            "mount web's image: the device is in safe mode (by hand); berth safe-mode clear returns to normal"
        );

        clear(&d).unwrap();
        assert_eq!(d.safe_mode(), None);
        assert!(!d.cfg.paths.safe_mode_file().exists());
        assert!(refuse_in_safe_mode(&d, "start web").is_ok());
        clear(&d).unwrap();
        assert_eq!(record_on_disk(&d), Record::default());
    }

    /// A marker that cannot be written: safe mode still holds for this run, and the error
    /// says so; a marker that cannot be removed keeps safe mode, with an error naming it.
    #[test]
    fn a_marker_that_cannot_be_written_or_removed_keeps_safe_mode() {
        let (_dir, d, _) = fake_daemon("boot-marker-stuck", BOOT);
        let marker = d.cfg.paths.safe_mode_file();
        // A directory in its place: neither a rename over it nor its removal as a file work.
        std::fs::create_dir_all(marker.join("inside")).unwrap();
        let e = enter(&d, "by hand").unwrap_err();
        assert_eq!(e.kind, Kind::Internal);
        assert!(
            e.message
                .starts_with(&format!("write {}: ", marker.display())),
            "{}",
            e.message
        );
        assert_eq!(d.safe_mode().as_deref(), Some("by hand"));

        let e = clear(&d).unwrap_err();
        assert_eq!(e.kind, Kind::Internal);
        assert!(
            e.message
                .starts_with(&format!("cannot remove {}: ", marker.display())),
            "{}",
            e.message
        );
        assert_eq!(d.safe_mode().as_deref(), Some("by hand"), "still safe mode");
    }
}
