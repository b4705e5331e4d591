//! Safe mode: while the device is in it, no image is mounted and no container starts (the
//! admin API's second controller, `api::allowed`, refuses what would do either). `berth safe-mode enter` forces it (every container stopped, every mount
//! released); `berth safe-mode clear` ends it at once and hands the containers marked
//! autostart to the supervisor, as a daemon start does. The boot counter that decides safe
//! mode at start is `boot.rs`.

use std::sync::Arc;

use berth_core::api::safe_mode as field;
use berth_core::supervise::Event;
use serde_json::{json, Value};

use crate::daemon::boot;
use crate::daemon::context::Daemon;
use crate::daemon::error::Result;
use crate::daemon::records;
use crate::daemon::runtime::control::{self, Intent, Who};
use crate::daemon::runtime::{mounts, probe, start};
use crate::daemon::state;

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
        match control::act_locked(d, n, Intent::Stop { timeout: None }, Who::Operator, None) {
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
