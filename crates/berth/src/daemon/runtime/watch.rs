//! One thread per running container, blocked on its shim until it ends; then its mounts go.

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::daemon::cgroups;
use crate::daemon::runtime::mounts;
use crate::daemon::runtime::probe;
use crate::daemon::Daemon;

/// A thread that waits for the container's end (blocked on the shim, no polling) and then
/// releases its mounts.
pub(crate) fn watch(d: &Arc<Daemon>, name: &str) {
    let d = Arc::clone(d);
    let name = name.to_string();
    let _ = std::thread::Builder::new()
        .name(format!("watch-{name}"))
        .stack_size(128 * 1024)
        .spawn(move || {
            let sock = d.cfg.paths.shim_socket(&name);
            match crate::shim::request(&sock, "wait") {
                Ok(mut s) => {
                    let mut line = String::new();
                    let _ = s.read_to_string(&mut line);
                    if line.is_empty() {
                        // The shim died without an answer (killed): the container may run
                        // on; ask LXC now and then until it ends.
                        while probe::is_running(&d, &name) {
                            std::thread::sleep(Duration::from_secs(2));
                        }
                        log::info!("{name} stopped (its shim had gone)");
                    } else {
                        log::info!("{name} stopped: {}", line.trim());
                    }
                }
                Err(_) => {
                    // No shim (killed?): fall back to asking LXC now and then.
                    while probe::is_running(&d, &name) {
                        std::thread::sleep(Duration::from_secs(2));
                    }
                    log::info!("{name} stopped");
                }
            }
            // Give the shim a moment to finish writing its exit file.
            let deadline = Instant::now() + Duration::from_secs(2);
            while sock.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _op = d.op.lock().unwrap();
            if !probe::is_running(&d, &name) {
                mounts::release_mounts(&d);
                cgroups::remove_stale_cgroups(&d.cfg, &name);
            }
            berth_sys::process::trim_heap();
            berth_sys::process::release_own_code(false);
        });
}
