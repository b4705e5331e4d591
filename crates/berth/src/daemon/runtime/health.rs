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

use crate::daemon::context::Daemon;
use crate::health::{HealthArgs, Probe};

/// How long past its own timeout a probe helper may take before it is killed.
const GRACE: Duration = Duration::from_secs(5);

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

/// Runs the helper; (passed, what it said).
fn run(d: &Daemon, args: &HealthArgs, limit: Duration) -> (bool, String) {
    let mut child = match Command::new(&d.exe)
        .args(args.to_args())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return (false, format!("cannot run the probe: {e}")),
    };
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    // The helper writes a bounded report and exits: its pipes hold all of it.
    // The probe's output is the container's: any bytes, cut anywhere.
    let mut out = Vec::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_end(&mut out);
    }
    let mut err = Vec::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_end(&mut err);
    }
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
