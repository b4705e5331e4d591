//! One thread per running container, blocked on its shim until the container ends; then it
//! tells the supervisor how it ended (the supervisor releases what it held).

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_core::supervise::{Event, Exit};

use crate::daemon::context::Daemon;
use crate::daemon::runtime::probe;

/// A thread that waits for the container's end (blocked on the shim, no polling) and
/// notifies the supervisor with its exit.
pub(crate) fn watch(d: &Arc<Daemon>, name: &str) {
    let d = Arc::clone(d);
    let name = name.to_string();
    let _ = std::thread::Builder::new()
        .name(format!("watch-{name}"))
        .stack_size(128 * 1024)
        .spawn(move || {
            let sock = d.cfg.paths.shim_socket(&name);
            let answered = crate::shim::request(&sock, "wait").is_ok_and(|mut s| {
                let mut line = String::new();
                let _ = s.read_to_string(&mut line);
                !line.is_empty()
            });
            if !answered {
                // The shim died (killed) or never answered: the container may run on; ask
                // LXC now and then until it ends.
                while probe::is_running(&d, &name) {
                    std::thread::sleep(Duration::from_secs(2));
                }
            }
            // Give the shim a moment to finish writing its exit file.
            let deadline = Instant::now() + Duration::from_secs(2);
            while sock.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            d.notify(&name, Event::Exited(exit_of(&probe::exit_info(&d, &name))));
            berth_sys::process::trim_heap();
            berth_sys::process::release_own_code(false);
        });
}

/// How it ended, from its exit record; neither a code nor a signal when there is none (a
/// shim killed before it could write one), which counts as a failure.
fn exit_of(v: &serde_json::Value) -> Exit {
    let int = |k: &str| v[k].as_i64().map(|n| n as i32);
    Exit {
        code: int("code"),
        signal: int("signal"),
    }
}
