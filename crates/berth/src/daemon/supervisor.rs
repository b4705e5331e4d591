//! Start-up reconciliation and autostart after a reboot (restart policies come here next).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::daemon::cgroups;
use crate::daemon::runtime::mounts;
use crate::daemon::runtime::probe;
use crate::daemon::runtime::start;
use crate::daemon::runtime::watch;
use crate::daemon::state;
use crate::daemon::store::remove;
use crate::daemon::Daemon;

/// Makes the world match the state after a restart or a crash of the daemon: partial
/// downloads go, running containers are taken over, LXC directories of packages no longer
/// installed go, unused mounts go, and packages marked autostart start after a reboot.
pub(crate) fn reconcile(d: &Arc<Daemon>) {
    remove::clear_tmp(&d.cfg);
    remove::finish_purges(d);
    cgroups::apply_group_budget(d);
    // Temporary files of atomic writes cut short (".state.json.tmp.PID.N"), wherever the
    // daemon or a shim writes atomically.
    let paths = &d.cfg.paths;
    let mut dirs = vec![
        paths.state.clone(),
        paths.state.join("limits"),
        paths.state.join("net"),
        paths.run.join("logs"),
    ];
    if let Ok(entries) = std::fs::read_dir(&paths.lxcpath) {
        dirs.extend(entries.flatten().map(|e| e.path()));
    }
    for dir in dirs {
        berth_sys::fsutil::remove_atomic_leftovers(&dir);
    }
    let st = state::state(d);
    // Leftover verification mounts of an install that was killed.
    for m in mounts::mounts(d) {
        if m.file_name()
            .and_then(|f| f.to_str())
            .is_some_and(|f| f.starts_with(".verify-"))
        {
            let _ = berth_sys::mount::umount(&m, true);
            let _ = std::fs::remove_dir(&m);
        }
    }
    let mut running = BTreeMap::new();
    for p in st.packages.values() {
        let n = p.name.as_str();
        let r = probe::is_running(d, n);
        running.insert(n.to_string(), r);
        if r {
            log::info!("taking over running container {n}");
            watch::watch(d, n);
        }
    }
    if let Ok(entries) = std::fs::read_dir(&d.cfg.paths.lxcpath) {
        for e in entries.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if !st.packages.contains_key(&n) && !probe::is_running(d, &n) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    // cgroups of containers that do not run (a killed monitor leaves its own behind).
    for n in cgroups::cgroup_names(&d.cfg) {
        if !running.get(&n).copied().unwrap_or(false) && !probe::is_running(d, &n) {
            cgroups::remove_stale_cgroups(&d.cfg, &n);
        }
    }
    mounts::release_mounts(d);
}

/// After a reboot /run is empty (no exit file): bring back what the operator had started. A
/// container that ended while the daemon was away is left for its restart policy. Runs after
/// the admin socket is up, so the CLI sees a daemon that is starting containers, not none.
pub(crate) fn autostart(d: &Arc<Daemon>) {
    let st = state::state(d);
    for p in st.packages.values() {
        let n = p.name.as_str();
        let wanted = d.cfg.paths.autostart(n).exists();
        if wanted && !d.cfg.paths.exit_file(n).exists() && !probe::is_running(d, n) {
            let _op = d.op.lock().unwrap();
            match start::start_locked(d, n) {
                Ok(_) => log::info!("autostarted {n}"),
                Err(e) => log::error!("autostart of {n} failed: {e}"),
            }
        }
    }
}
