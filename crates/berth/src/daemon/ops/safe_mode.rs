//! Safe mode: while the device is in it, no image is mounted and no container starts (the
//! admin API's second controller, `api::allowed`, refuses what would do either). `berth safe-mode enter` forces it (every container stopped, every mount
//! released); `berth safe-mode clear` ends it at once and hands the containers marked
//! autostart to the supervisor, as a daemon start does. The boot counter that decides safe
//! mode at start is `boot.rs`.

use std::sync::Arc;

use berth_core::api::safe_mode as field;
use berth_core::supervise::Event;
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::Result;
use crate::daemon::device::boot;
use crate::daemon::device::records;
use crate::daemon::device::state;
use crate::daemon::runtime::control::{self, Intent, Who};
use crate::daemon::runtime::{mounts, probe, start};

/// The reason `berth safe-mode enter` gives.
const BY_OPERATOR: &str = "entered by the operator (berth safe-mode enter)";

/// At a start in safe mode: what still runs from before is stopped, every mount released.
pub(crate) fn at_start(d: &Arc<Daemon>) {
    let _op = d.op.lock().unwrap();
    let stopped = stop_all(d);
    if !stopped.is_empty() {
        log::warn!("safe mode: stopped {}", stopped.join(", "));
    }
}

/// Stops every running container, keeping its autostart mark (safe mode is not the
/// operator's stop: a clear starts it again), then releases every mount. The op lock is held.
fn stop_all(d: &Arc<Daemon>) -> Vec<String> {
    let mut stopped = Vec::new();
    for p in state::state(d).packages.values() {
        let n = p.name.as_str();
        if !probe::is_running(d, n) {
            continue;
        }
        let autostart = d.cfg.paths.autostart(n).exists();
        match control::act_locked(d, n, Intent::Stop { timeout: None }, Who::Operator) {
            Ok(_) => stopped.push(n.to_string()),
            Err(e) => log::error!("safe mode: cannot stop {n}: {e}"),
        }
        if autostart {
            if let Err(e) = start::set_autostart(d, n, true) {
                log::error!("safe mode: {n}: {e}");
            }
        }
    }
    // In safe mode this releases the images of installed packages too.
    mounts::release_mounts(d);
    stopped
}

/// `POST /v1/safe-mode/enter`.
pub(crate) fn enter(d: &Arc<Daemon>) -> Result<Value> {
    let _op = d.op.lock().unwrap();
    // Persisted before the first stop: a daemon killed meanwhile starts in safe mode.
    let reason = match d.safe_mode() {
        Some(r) => r,
        None => {
            boot::enter(d, BY_OPERATOR)?;
            log::warn!("safe mode: {BY_OPERATOR}");
            BY_OPERATOR.to_string()
        }
    };
    let stopped = stop_all(d);
    Ok(json!({
        field::SAFE_MODE: true,
        field::SAFE_MODE_REASON: reason,
        field::CONTAINERS: stopped,
    }))
}

/// `POST /v1/safe-mode/clear`: back to normal without a daemon restart; the containers
/// marked autostart go to the supervisor as at boot.
pub(crate) fn clear(d: &Arc<Daemon>) -> Result<Value> {
    let _op = d.op.lock().unwrap();
    let was = d.safe_mode();
    boot::clear(d)?;
    let mut starting = Vec::new();
    if was.is_some() {
        log::warn!("safe mode cleared by the operator");
        for p in state::state(d).packages.values() {
            let n = p.name.as_str();
            if d.cfg.paths.autostart(n).exists() && !probe::is_running(d, n) {
                d.notify(
                    n,
                    Event::Boot {
                        running: None,
                        autostart: true,
                        ended: None,
                        record: records::load_supervised(d, n),
                    },
                );
                starting.push(n.to_string());
            }
        }
    }
    Ok(json!({
        field::SAFE_MODE: false,
        field::SAFE_MODE_REASON: null,
        field::CONTAINERS: starting,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::testing::pretend_running;
    use std::time::Instant;

    use berth_core::boot::Marker;
    use berth_core::supervise::Record;

    use crate::daemon::base::testing::{fake_daemon, install, MANIFEST};
    use crate::daemon::runtime::mounts::ensure_image_mounted;

    fn daemon(
        tag: &str,
    ) -> (
        berth_testkit::TempDir,
        Arc<Daemon>,
        &'static berth_testkit::fake_host::FakeMounts,
    ) {
        let (dir, d, m) = fake_daemon(tag, "");
        install(&d, MANIFEST);
        install(&d, &MANIFEST.replace("\"web\"", "\"db\""));
        (dir, Arc::new(d), m)
    }

    /// The events waiting for the supervisor.
    fn events(d: &Daemon) -> Vec<(String, Event)> {
        std::iter::from_fn(|| d.next_event(Some(Instant::now()))).collect()
    }

    /// The operator's `enter`: persisted first, with the operator's reason; every image
    /// mount released, the installed packages' too; nothing was running, nothing stopped.
    #[test]
    fn enter_persists_the_operators_reason_and_releases_every_mount() {
        let (_dir, d, m) = daemon("safe-enter");
        let web = ensure_image_mounted(&d, &"ab".repeat(32)).unwrap();
        let v = enter(&d).unwrap();
        assert_eq!(
            v,
            json!({field::SAFE_MODE: true, field::SAFE_MODE_REASON: BY_OPERATOR, field::CONTAINERS: []})
        );
        assert_eq!(d.safe_mode().as_deref(), Some(BY_OPERATOR));
        let marker = std::fs::read_to_string(d.cfg.paths.safe_mode_file()).unwrap();
        assert_eq!(Marker::parse(&marker).unwrap().reason, BY_OPERATOR);
        assert!(m.mounted().is_empty(), "{:?}", m.mounted());
        assert!(!web.exists(), "{} left", web.display());
        assert!(m.calls().contains(&format!("umount {} now", web.display())));
    }

    /// Already in safe mode (a boot loop): `enter` keeps that reason and its marker.
    #[test]
    fn enter_in_safe_mode_keeps_the_reason_it_has() {
        let (_dir, d, _) = daemon("safe-enter-again");
        boot::enter(&d, "5 daemon starts in a row did not stay up").unwrap();
        let before = std::fs::read(d.cfg.paths.safe_mode_file()).unwrap();
        let v = enter(&d).unwrap();
        assert_eq!(
            v[field::SAFE_MODE_REASON],
            "5 daemon starts in a row did not stay up"
        );
        assert_eq!(std::fs::read(d.cfg.paths.safe_mode_file()).unwrap(), before);
    }

    /// A marker that cannot be written fails `enter` before anything is stopped or
    /// unmounted.
    #[test]
    fn enter_whose_marker_cannot_be_written_releases_nothing() {
        let (_dir, d, m) = daemon("safe-enter-fails");
        let web = ensure_image_mounted(&d, &"ab".repeat(32)).unwrap();
        std::fs::create_dir_all(d.cfg.paths.safe_mode_file().join("inside")).unwrap();
        let e = enter(&d).unwrap_err();
        assert_eq!(e.kind, crate::daemon::base::error::Kind::Internal);
        assert_eq!(m.mounted(), vec![web]);
        assert!(
            !m.calls().iter().any(|c| c.starts_with("umount")),
            "{:?}",
            m.calls()
        );
    }

    /// At a start in safe mode nothing stays mounted, installed images included.
    #[test]
    fn a_start_in_safe_mode_releases_every_mount() {
        let (_dir, d, m) = daemon("safe-at-start");
        ensure_image_mounted(&d, &"ab".repeat(32)).unwrap();
        ensure_image_mounted(&d, &"01".repeat(32)).unwrap();
        boot::enter(&d, "boot loop").unwrap();
        at_start(&d);
        assert!(m.mounted().is_empty(), "{:?}", m.mounted());
    }

    /// `clear` ends safe mode (the marker goes) and hands the containers marked autostart,
    /// and only those, to the supervisor with their records, as at boot.
    #[test]
    fn clear_hands_the_autostart_containers_to_the_supervisor() {
        let (_dir, d, _) = daemon("safe-clear");
        enter(&d).unwrap();
        start::set_autostart(&d, "web", true).unwrap();
        let kept = Record {
            retries: 2,
            ..Record::default()
        };
        records::save_supervised(&d, "web", &kept);
        let v = clear(&d).unwrap();
        assert_eq!(
            v,
            json!({field::SAFE_MODE: false, field::SAFE_MODE_REASON: null, field::CONTAINERS: ["web"]})
        );
        assert_eq!(d.safe_mode(), None);
        assert!(!d.cfg.paths.safe_mode_file().exists());
        assert_eq!(
            events(&d),
            [(
                "web".to_string(),
                Event::Boot {
                    running: None,
                    autostart: true,
                    ended: None,
                    record: kept
                }
            )]
        );
    }

    /// A container that runs already is not started again; out of safe mode a clear
    /// starts nothing at all.
    #[test]
    fn clear_starts_nothing_that_runs_or_out_of_safe_mode() {
        let (_dir, d, _) = daemon("safe-clear-running");
        start::set_autostart(&d, "web", true).unwrap();
        let v = clear(&d).unwrap();
        assert_eq!(v[field::CONTAINERS], json!([]));
        assert!(events(&d).is_empty());

        boot::enter(&d, "boot loop").unwrap();
        let _monitor = pretend_running(&d, "web");
        let v = clear(&d).unwrap();
        assert_eq!(v[field::CONTAINERS], json!([]));
        assert!(events(&d).is_empty());
    }

    /// A marker that cannot be removed fails `clear`: still safe mode, nothing started.
    #[test]
    fn clear_whose_marker_cannot_be_removed_starts_nothing() {
        let (_dir, d, _) = daemon("safe-clear-fails");
        start::set_autostart(&d, "web", true).unwrap();
        boot::enter(&d, "boot loop").unwrap();
        let marker = d.cfg.paths.safe_mode_file();
        std::fs::remove_file(&marker).unwrap();
        std::fs::create_dir_all(marker.join("inside")).unwrap();
        let e = clear(&d).unwrap_err();
        assert!(
            e.message
                .starts_with(&format!("cannot remove {}", marker.display())),
            "{}",
            e.message
        );
        assert_eq!(d.safe_mode().as_deref(), Some("boot loop"));
        assert!(events(&d).is_empty());
    }
}
