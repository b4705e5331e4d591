//! Health probes: one short-lived helper process (`berth __health`) per check, waited for
//! on a thread of its own so that a hung probe never holds up the supervisor. The helper
//! enforces the manifest's timeout; this side only gives up on a helper that outlives it
//! by `GRACE` (a wedged attach), which also counts as a failed check.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_core::manifest::Manifest;
use berth_core::supervise::{Event, Run};

use crate::daemon::base::context::Daemon;
use crate::daemon::device::cgroups;
use crate::health::{HealthArgs, Probe};

/// How long past its own timeout a probe helper may take before it is killed.
pub(crate) const GRACE: Duration = Duration::from_secs(5);

/// Runs the manifest's probe once against run `init` of `name`; the verdict arrives as
/// `Event::Health(init, ok)`, and the verdict line is kept for `status`.
pub(crate) fn check(d: &Arc<Daemon>, name: &str, init: Run, m: &Manifest) {
    let Some(h) = &m.health else {
        return;
    };
    let probe = if let Some(port) = h.tcp {
        Probe::Tcp(port)
    } else if let Some(http) = &h.http {
        Probe::Http(http.port, http.path.clone())
    } else {
        Probe::Cmd(h.cmd.clone())
    };
    let args = HealthArgs {
        lxcpath: d.cfg.paths.lxcpath.clone(),
        name: name.to_string(),
        init,
        timeout_ms: h.timeout_ms,
        uid: m.entrypoint.user,
        gid: m.entrypoint.group,
        probe,
    };
    let limit = Duration::from_millis(h.timeout_ms) + GRACE;
    let d = Arc::clone(d);
    let name = name.to_string();
    let spawned = std::thread::Builder::new()
        .name(format!("health-{name}"))
        .stack_size(128 * 1024)
        .spawn(move || {
            let (ok, line) = run(&d, &args, limit);
            if let Some(s) = d.supervision.lock().unwrap().get_mut(&name) {
                s.last_check = Some((line, berth_sys::process::now_s()));
            }
            d.notify(&name, Event::Health(init, ok));
        });
    if let Err(e) = spawned {
        log::warn!("cannot start a health probe thread: {e}");
    }
}

/// Runs the helper (a probe, or a scheduled job's run); (passed, what it said). Blocked on
/// the helper's report, which comes as it exits (looked at least every second, so a report
/// pipe some leftover process keeps open cannot hold this past `limit`).
pub(crate) fn run(d: &Daemon, args: &HealthArgs, limit: Duration) -> (bool, String) {
    use std::os::fd::AsRawFd;
    let mut cmd = Command::new(&d.exe);
    cmd.args(args.to_args())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // The helper's work (the attach, the job's output it relays) is the container's: it
    // enters the container's budget first.
    if let Some(leaf) = cgroups::helpers_leaf(d, &args.name) {
        cmd.env(crate::shim::CGROUP_ENV, leaf);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return (false, format!("cannot run the probe: {e}")),
    };
    let deadline = Instant::now() + limit;
    let fd = child.stdout.as_ref().map_or(-1, |o| o.as_raw_fd());
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if Instant::now() < deadline => {
                // The report comes as the helper exits: its pipe wakes this (a second at
                // most, should a process the job left behind hold the pipe open).
                let left = deadline.saturating_duration_since(Instant::now());
                let ms = left.as_millis().clamp(1, 1000) as i32;
                if berth_sys::process::poll(&[(fd, libc::POLLIN)], ms).is_ok_and(|r| r[0] != 0) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    // The helper writes a bounded report; what is there is taken without waiting.
    let out = child
        .stdout
        .take()
        .map(|mut o| rest(&mut o, fd))
        .unwrap_or_default();
    let err = child
        .stderr
        .take()
        .map(|mut e| {
            let fd = e.as_raw_fd();
            rest(&mut e, fd)
        })
        .unwrap_or_default();
    // The probe's output is the container's: any bytes, cut anywhere.
    let out = String::from_utf8_lossy(&out);
    let err = String::from_utf8_lossy(&err);
    let out = out.trim_end();
    match status {
        None => (
            false,
            format!("the probe did not finish within {} ms", limit.as_millis()),
        ),
        Some(st) if st.success() => (true, out.to_string()),
        Some(st) if st.code() == Some(1) => (false, out.to_string()),
        Some(_) => (false, format!("probe error: {}", err.trim_end())),
    }
}

/// What a pipe holds now, at most 8 KiB, without waiting for more.
fn rest(r: &mut dyn Read, fd: std::os::fd::RawFd) -> Vec<u8> {
    let _ = berth_sys::process::set_nonblocking(fd);
    let mut v = Vec::new();
    let mut buf = [0u8; 1024];
    while let Ok(n @ 1..) = r.read(&mut buf) {
        v.extend_from_slice(&buf[..n]);
        if v.len() >= 8192 {
            break;
        }
    }
    v
}
