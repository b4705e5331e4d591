//! One thread per running container, blocked on its shim until the container ends; then it
//! tells the supervisor how that run ended (the supervisor releases what it held).

use std::io::Read;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_core::supervise::{Event, Run};

use crate::daemon::cgroups;
use crate::daemon::context::Daemon;
use crate::daemon::runtime::probe;

/// A thread that waits for the end of the run whose init is `init` (blocked on the shim, or
/// on the init's pidfd when the shim is gone: no polling) and notifies the supervisor.
/// `fresh`: the run has just been started (its cgroup is new: every OOM kill counted there
/// is this run's, also one that came before this thread looked), not taken over.
pub(crate) fn watch(d: &Arc<Daemon>, name: &str, init: Run, fresh: bool) {
    let d = Arc::clone(d);
    let name = name.to_string();
    let _ = std::thread::Builder::new()
        .name(format!("watch-{name}"))
        .stack_size(128 * 1024)
        .spawn(move || {
            let sock = d.cfg.paths.shim_socket(&name);
            let answered = crate::shim::request(&sock, "wait")
                .is_ok_and(|s| wait_end(&d, &name, init, fresh, s));
            if answered {
                // Give the shim a moment to finish writing its exit file.
                let deadline = Instant::now() + Duration::from_secs(2);
                while sock.exists() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
            } else {
                // The shim died (killed) or never answered: the container may run on, and
                // nobody records how it ends.
                wait_init_gone(&d, init);
            }
            d.notify(&name, Event::Exited(init, probe::exit_of(&d, &name)));
            berth_sys::process::trim_heap();
            berth_sys::process::release_own_code(false);
        });
}

/// Blocks until the shim answers `wait` (the container ended): whether it did. Meanwhile
/// the kernel's OOM kills in the container's memory cgroup are told to the supervisor as
/// they happen (one poll on both: no wake-ups of its own).
fn wait_end(
    d: &Daemon,
    name: &str,
    init: Run,
    fresh: bool,
    mut shim: std::os::unix::net::UnixStream,
) -> bool {
    use berth_sys::process::POLLIN;
    let oom = d.resources.cgroups.as_ref().ok().and_then(|c| {
        c.oom_watch(&cgroups::container_cgroup(d, name))
            .map_err(|e| log::warn!("{name}: OOM kills will not be reported: {e}"))
            .ok()
    });
    let mut seen = match &oom {
        Some(w) if !fresh => w.kills().unwrap_or(0),
        _ => 0,
    };
    let mut first = true;
    while let Some(w) = &oom {
        // The first round looks at once: a kill before the watch was set up is still told.
        if std::mem::take(&mut first) {
            let now = w.kills().unwrap_or(seen);
            if now > seen {
                d.notify(
                    name,
                    Event::OomKilled(init, (now - seen).min(u32::MAX as u64) as u32),
                );
                seen = now;
            }
        }
        let Ok(ready) =
            berth_sys::process::poll(&[(shim.as_raw_fd(), POLLIN), (w.fd(), POLLIN)], -1)
        else {
            break;
        };
        if ready.get(1).is_some_and(|r| *r != 0) {
            w.drain();
            // v1 tells when the OOM killer is invoked, before it has counted its kill:
            // look again for a moment (only after such an event).
            let mut now = w.kills().unwrap_or(seen);
            for _ in 0..20 {
                if now > seen {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
                now = w.kills().unwrap_or(seen);
            }
            if now > seen {
                d.notify(
                    name,
                    Event::OomKilled(init, (now - seen).min(u32::MAX as u64) as u32),
                );
                seen = now;
            }
        }
        if ready.first().is_some_and(|r| *r != 0) {
            break;
        }
    }
    let mut line = String::new();
    let _ = shim.read_to_string(&mut line);
    !line.is_empty()
}

/// Blocks until the container's init has gone: on its pidfd (readable when it exits), or,
/// on kernels without pidfds (before 5.3), by reading its start time every second
/// ([`berth_sys::process::Pinned`]: a recycled pid has another).
fn wait_init_gone(d: &Daemon, init: Run) {
    let Ok(ns) = std::fs::read_link(d.proc().join(format!("{init}/ns/pid"))) else {
        return;
    };
    // A container's init is never in the daemon's own pid namespace: anything else is a
    // recycled pid, and the init is long gone.
    if std::fs::read_link(d.proc().join("self/ns/pid"))
        .ok()
        .as_ref()
        == Some(&ns)
    {
        return;
    }
    if let Ok(p) = berth_sys::process::Pinned::open(d.proc(), init) {
        p.wait_exit(None, Duration::from_secs(1));
    }
}
