//! `berth stop` and `berth restart`: SIGTERM to the payload, SIGKILL to init after the timeout.

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_core::api::{exit as exit_field, stop as field};
use berth_core::supervise::Event;
use berth_sys::fsutil::write_volatile;
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::device::cgroups;
use crate::daemon::device::state;
use crate::daemon::runtime::mounts;
use crate::daemon::runtime::probe;
use crate::daemon::runtime::start;

/// Who stops a container, which decides what the supervisor hears and whether the
/// operator's autostart mark goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Why {
    /// `berth stop`: told, and the mark cleared.
    Operator,
    /// An upgrade's or a rollback's switch: the supervisor is told (its end is no failure
    /// and starts nothing), but the autostart mark stays: the container is meant to run
    /// again, also if the power goes before the upgrade starts it.
    Switch,
    /// The supervisor's own (an unhealthy run, a restart the package asked for) or the
    /// daemon's before the supervisor runs: not told, the mark kept.
    Quiet,
}

/// Ends run `run` of `name` for the supervisor (its health checks failed, or its package
/// asked for a restart): the same stop as the operator's, with no word to the supervisor,
/// whose machine already knows what the end means. Nothing (null) if that run has ended.
/// Under the op lock.
pub(crate) fn end_run_locked(d: &Arc<Daemon>, name: &str, run: i32) -> Result<Value> {
    if probe::running_init(d, name) != Some(run) {
        return Ok(Value::Null);
    }
    end(d, name, None, Why::Quiet)
}

/// Stops `name` as `why` says (`control.rs` is its one caller). Under the op lock.
pub(crate) fn end(d: &Arc<Daemon>, name: &str, timeout: Option<u32>, why: Why) -> Result<Value> {
    let operator = why == Why::Operator;
    state::installed(d, name)?;
    if !probe::is_running(d, name) {
        if operator {
            // A restart held in backoff is dropped: the operator wants it stopped, also
            // after the daemon's next start (which restarts what is marked autostart).
            d.notify(name, Event::StopRequested);
            start::set_autostart(d, name, false)?;
        }
        return Err(Error::new(
            Kind::NotRunning,
            format!("{name} is not running"),
        ));
    }
    let timeout = timeout.unwrap_or(d.cfg.stop_timeout_s);
    let t0 = Instant::now();
    let Some(init) = probe::running_init(d, name) else {
        return Err(Error::new(
            Kind::NotRunning,
            format!("{name} is not running"),
        ));
    };
    if why != Why::Quiet {
        d.notify(name, Event::StopRequested);
    }
    // Subscribed before the first signal: the shim answers once it has saved the log ring
    // and the exit status, which is when the stop is complete.
    let shim_wait = crate::shim::request(&d.cfg.paths.shim_socket(name), "wait").ok();
    // SIGTERM goes straight to the payload's processes (not through init.lxc, whose own halt
    // handling gives them one second before SIGKILL, whatever the timeout). When the payload
    // exits, init.lxc exits and the container stops.
    // The init pid is re-checked (same pid namespace) before every signal and while waiting:
    // once the container is gone its pid may be reused by an unrelated process.
    let ns_link = d.proc().join(format!("{init}/ns/pid"));
    let init_ns = std::fs::read_link(&ns_link).ok();
    let still_init = || init_ns.is_some() && std::fs::read_link(&ns_link).ok() == init_ns;
    let members = berth_sys::process::pid_namespace_members(d.proc(), init);
    for pid in &members {
        let _ = d.host.signals.kill(*pid, libc::SIGTERM);
    }
    let wait_gone = |limit: Duration| {
        let deadline = Instant::now() + limit;
        let mut delay = Duration::from_millis(1);
        while still_init() && Instant::now() < deadline {
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_millis(50));
        }
        !still_init()
    };
    let graceful = if members.is_empty() {
        // Only init is left (the payload is gone): nothing to be graceful with.
        if still_init() {
            let _ = d.host.signals.kill(init, libc::SIGKILL);
        }
        wait_gone(Duration::from_secs(10))
    } else {
        wait_gone(Duration::from_secs(timeout as u64))
    };
    if !graceful {
        log::warn!("{name} did not stop within {timeout} s; killing it");
        // Killing a pid namespace's init kills everything in it.
        if still_init() {
            let _ = d.host.signals.kill(init, libc::SIGKILL);
        }
        if !wait_gone(Duration::from_secs(10)) {
            // Seen with an AppArmor profile that refused the host's signals: never report
            // a stop that did not happen.
            return Err(Error::new(
                Kind::StopFailed,
                format!("{name}: its init (pid {init}) survived SIGKILL: the kernel refused the signal (an LSM such as AppArmor? see the kernel log); it is still running"),
            ));
        }
    }
    match shim_wait {
        Some(mut s) => {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut line = String::new();
            let _ = s.read_to_string(&mut line);
        }
        None => {
            // No shim (it was killed): nobody will save a ring or write an exit file, and
            // the orphaned LXC monitor tears down on its own: its mounts are released only
            // once it has gone.
            let _ = std::fs::remove_file(d.cfg.paths.shim_socket(name));
            if !probe::wait_monitor_gone(d, name, Duration::from_secs(10)) {
                log::warn!("{name}: its LXC monitor is still there 10 s after the stop");
            }
        }
    }
    if !graceful {
        // liblxc reports a killed init as a plain exit; say what really happened.
        let mut exit = probe::exit_info(d, name);
        if let Some(o) = exit.as_object_mut() {
            o.insert(exit_field::CODE.into(), Value::Null);
            o.insert(exit_field::SIGNAL.into(), json!(libc::SIGKILL));
            o.insert(
                exit_field::KILLED.into(),
                json!(format!("did not stop within {timeout} s")),
            );
            let _ = write_volatile(
                &d.cfg.paths.exit_file(name),
                exit.to_string().as_bytes(),
                0o600,
            );
        }
    }
    if operator {
        // The operator's word for the next boot; the supervisor's and the upgrade's own
        // stops leave it as it was.
        start::set_autostart(d, name, false)?;
    }
    mounts::release_mounts(d);
    // Its budget (the payload's and the monitor's leaves are gone with LXC's teardown).
    cgroups::reap(d, name);
    let exit = probe::exit_info(d, name);
    Ok(json!({
        field::NAME: name, field::GRACEFUL: graceful,
        field::STOP_MS: t0.elapsed().as_secs_f64() * 1000.0, field::EXIT: exit,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::testing::{fake_daemon, install, MANIFEST};
    use crate::daemon::runtime::control::{self, Intent, Who};

    const STOP: Intent = Intent::Stop { timeout: None };

    fn events(d: &Daemon) -> Vec<(String, Event)> {
        let mut v = Vec::new();
        while let Some(e) = d.next_event(Some(Instant::now())) {
            v.push(e);
        }
        v
    }

    /// The operator stops a container that is not running (held in backoff, say): refused as
    /// not running, and yet the held restart is dropped (the supervisor is told) and the
    /// container no longer starts at boot.
    #[test]
    fn an_operators_stop_of_a_stopped_container_drops_its_restart_and_boot_mark() {
        let (_dir, d, _m) = fake_daemon("stop-stopped", "");
        install(&d, MANIFEST);
        let d = Arc::new(d);
        start::set_autostart(&d, "web", true).unwrap();
        let e = control::act(&d, "web", STOP, Who::Operator, None).unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (Kind::NotRunning, "web is not running")
        );
        assert!(!d.cfg.paths.autostart("web").exists());
        assert_eq!(events(&d), [("web".to_string(), Event::StopRequested)]);
    }

    /// The daemon's own stops (an upgrade's switch, a quiet stop) of a container that is not
    /// running leave the boot mark and say nothing to the supervisor.
    #[test]
    fn the_daemons_own_stops_of_a_stopped_container_leave_the_mark_and_the_supervisor() {
        let (_dir, d, _m) = fake_daemon("stop-quiet", "");
        install(&d, MANIFEST);
        let d = Arc::new(d);
        start::set_autostart(&d, "web", true).unwrap();
        for who in [Who::Upgrade, Who::Daemon] {
            let e = control::act(&d, "web", STOP, who, None);
            assert_eq!(e.unwrap_err().kind, Kind::NotRunning);
        }
        assert!(d.cfg.paths.autostart("web").exists());
        assert!(events(&d).is_empty());
        // A package that is not installed is named as such.
        let e = control::act(&d, "nope", STOP, Who::Operator, None).unwrap_err();
        assert_eq!(e.kind, Kind::NotInstalled, "{}", e.message);
    }
    /// A container that runs as its shim and LXC say: init `4242` and one payload process
    /// `4243` in its pid namespace, in the daemon's fixture /proc.
    fn running(d: &Daemon) -> crate::daemon::runtime::probe::tests::FakeShim {
        use crate::daemon::runtime::probe::tests::{info, lxc_config, FakeShim};
        lxc_config(d, "web");
        for pid in [4242, 4243] {
            let ns = d.proc().join(format!("{pid}/ns"));
            std::fs::create_dir_all(&ns).unwrap();
            std::os::unix::fs::symlink("pid:[4026532001]", ns.join("pid")).unwrap();
        }
        std::fs::create_dir_all(d.cfg.paths.run.join("logs")).unwrap();
        FakeShim::start(d, "web", info(4242), b"")
    }

    /// SIGTERM goes to the payload, not to init; the payload ends and init with it: a
    /// graceful stop, no SIGKILL, the boot mark cleared, the supervisor told.
    #[test]
    fn a_stop_signals_the_payload_and_ends_gracefully() {
        let (_dir, d, _m, sig) =
            crate::daemon::base::testing::fake_daemon_with_signals("stop-term", "");
        install(&d, MANIFEST);
        let d = Arc::new(d);
        let _shim = running(&d);
        start::set_autostart(&d, "web", true).unwrap();
        sig.ends_on(4243, libc::SIGTERM, &[4242]);
        let v = control::act(
            &d,
            "web",
            Intent::Stop { timeout: Some(5) },
            Who::Operator,
            None,
        )
        .unwrap();
        assert_eq!(v[field::GRACEFUL], true, "{v}");
        assert_eq!(sig.calls(), [(4243, libc::SIGTERM)]);
        assert!(!d.cfg.paths.autostart("web").exists());
        assert_eq!(events(&d), [("web".to_string(), Event::StopRequested)]);
    }

    /// A payload that ignores SIGTERM: after the timeout init gets SIGKILL, and the exit
    /// record says so (liblxc would report a plain exit).
    #[test]
    fn a_payload_that_ignores_sigterm_is_killed_after_the_timeout_and_the_record_says_so() {
        let (_dir, d, _m, sig) =
            crate::daemon::base::testing::fake_daemon_with_signals("stop-kill", "");
        install(&d, MANIFEST);
        let d = Arc::new(d);
        let _shim = running(&d);
        std::fs::write(d.cfg.paths.exit_file("web"), r#"{"code":0,"signal":null}"#).unwrap();
        sig.ends_on(4242, libc::SIGKILL, &[4243]);
        let t0 = Instant::now();
        let v = control::act(
            &d,
            "web",
            Intent::Stop { timeout: Some(1) },
            Who::Upgrade,
            None,
        )
        .unwrap();
        assert!(t0.elapsed() >= Duration::from_secs(1), "{:?}", t0.elapsed());
        assert_eq!(v[field::GRACEFUL], false, "{v}");
        assert_eq!(sig.calls(), [(4243, libc::SIGTERM), (4242, libc::SIGKILL)]);
        let exit = &v[field::EXIT];
        assert_eq!(exit[exit_field::SIGNAL], libc::SIGKILL, "{exit}");
        assert_eq!(exit[exit_field::CODE], Value::Null, "{exit}");
        assert_eq!(
            exit[exit_field::KILLED],
            "did not stop within 1 s",
            "{exit}"
        );
    }
}
