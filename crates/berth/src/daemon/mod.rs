//! `berth daemon`: wiring only. It prepares berth's directories, loads the state, builds the
//! shared context, reconciles the world with the state, starts the peer threads, and hands
//! the main thread to the admin socket until it is told to stop.
//!
//! Threads: the admin socket's front door (main thread, `api::server`), one short-lived
//! thread per admin request, one watcher per running container blocked on its shim's `wait`
//! (no polling when idle), the memory guard (`guard.rs`: blocked on a PSI trigger, or
//! polling meminfo without PSI), the CPU governor (`governor.rs`: one probe per interval,
//! only when a probe is configured), the supervisor (`supervisor.rs`: blocked on its
//! events), the scheduler (`schedules.rs`: only once a container has a cron job; asleep on a
//! wall-clock timer until the next due time, one short-lived thread per run), the listeners
//! of `[metrics] listen` and `[web] listen` (`metrics.rs`, `web.rs`: only when set; blocked
//! in accept), the fleet client (`fleet/`: only with `[fleet]`; asleep until its next poll)
//! and the watchdog (`watchdog.rs`: only with a `[watchdog] device`, or until this
//! start is confirmed; while it runs, the main thread and the supervisor wake every
//! `[watchdog] interval` to record a heartbeat). Mutating operations take `Daemon::op` so they apply one at a time, in order;
//! reads (status, list, logs) do not wait for a long install.
//!
//! Layers, each using only those below it (ARCHITECTURE.md draws them), each a folder:
//! `api/` → `views/` (status, metrics, tr181, web) → `supervisor.rs`, `fleet/` (the DDI
//! client, feature `fleet`) → `store/` → `ops/` (reports, safe_mode, schedules, watchdog) →
//! `runtime/` → `prepare/` (limits, security, net, mdns) → `device/` (guard, boot, governor,
//! cgroups, records, state, disk, slab) → `base/` (context, error, endpoints). Modules are
//! named by their whole path (`crate::daemon::device::state`): the path says the layer.

mod api;
mod base;
mod device;
#[cfg(feature = "fleet")]
mod fleet;
mod ops;
mod prepare;
mod runtime;
mod store;
mod supervisor;
mod views;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use berth_core::config::{Config, Paths};

use base::context::{Daemon, Roots};

pub fn run(cfg: Config) -> Result<()> {
    if !berth_sys::process::is_root() {
        bail!("berth daemon must run as root (it mounts images and starts containers)");
    }
    if cfg.network.mdns && !cfg!(feature = "mdns") {
        bail!("[network] mdns = \"on\": this berth is built without mDNS; build it with --features mdns or set mdns = \"off\"");
    }
    if cfg.metrics.listen.is_some() && !cfg!(feature = "metrics") {
        bail!("[metrics] listen: this berth is built without metrics; build it with --features metrics or remove the key");
    }
    if cfg.web.listen.is_some() && !cfg!(feature = "web") {
        bail!("[web] listen: this berth is built without its web page; build it with --features web or remove the key");
    }
    berth_sys::process::ignore_sigpipe();
    berth_sys::process::single_malloc_arena();
    crate::fetch::set_defaults(crate::fetch::Defaults {
        proxy: cfg.network.proxy.clone(),
        ca_file: cfg.repository_ca_file.clone(),
    });
    // While this is the only thread: the service manager's socket, kept from the children.
    berth_sys::notify::take_socket();
    prepare_dirs(&cfg.paths)?;
    let lock = single_instance(&cfg)?;
    let state = device::state::load_state(&cfg)?;
    let roots = Roots::default();
    let host = device::cgroups::detect(&roots);
    let d = Arc::new(Daemon::new(cfg, roots, host, state));
    // From here a panic leaves a crash report behind before the process aborts.
    ops::reports::install_panic_hook(&d);
    // The kernel's reserve before any container can use the caches up.
    #[cfg(feature = "slab")]
    device::slab::apply(&d);
    // Before anything is mounted: in safe mode nothing will be.
    device::boot::begin(&d);
    // An upgrade a dead daemon left on trial goes back before anything is taken over.
    store::upgrade::recover(&d);
    let mut taken_over = supervisor::reconcile(&d);
    if d.safe_mode().is_some() {
        ops::safe_mode::at_start(&d);
        taken_over.clear();
    }
    for (n, _) in &taken_over {
        device::boot::note_running(&d, n);
    }
    let st = device::state::state(&d);
    prepare::net::restore(&d, &st);
    #[cfg(feature = "shape")]
    prepare::shape::watch_line(&d, prepare::net::bridged(&d, &st));
    #[cfg(feature = "shape")]
    prepare::net::watch_usage(&d);
    let running: Vec<String> = taken_over.iter().map(|(n, _)| n.clone()).collect();
    runtime::sockets::reopen(&d, &running);
    // A bind or unbind a killed daemon left half done: finished or undone before any request.
    for n in &running {
        let _op = d.op.lock().unwrap();
        runtime::bind::settle(&d, n);
    }
    let listener = api::server::bind(&d)?;
    log::info!(
        "berth daemon {} ready on {} (pid {})",
        env!("CARGO_PKG_VERSION"),
        d.cfg.paths.admin_socket().display(),
        std::process::id()
    );
    // systemd's Type=notify: ready once the admin socket answers (it is bound and listening).
    notify(&format!(
        "READY=1\nMAINPID={}\nSTATUS=serving {}",
        std::process::id(),
        d.cfg.paths.admin_socket().display()
    ));
    // The code the daemon hands back when idle, found while this is its only thread that
    // loads libraries (the supervisor may load liblxc).
    berth_sys::process::find_code_ranges();
    // The supervisor first hands the containers to their machines (it may start some).
    d.beat_busy(base::context::Component::Supervisor);
    supervisor::spawn(&d, taken_over);
    ops::schedules::start(&d);
    #[cfg(feature = "metrics")]
    views::metrics::spawn_listener(&d);
    #[cfg(feature = "web")]
    views::web::spawn(&d);
    #[cfg(feature = "fleet")]
    fleet::spawn(&d);
    let watchdog = ops::watchdog::spawn(&d);
    let term = berth_sys::process::termination_pipe()?;
    // Start-up code (configuration and state parsing, reconciliation) will not run again.
    berth_sys::process::trim_heap();
    crate::daemon::base::context::release_code(true);
    api::server::serve(&d, &listener, &term)?;
    notify("STOPPING=1");
    // Only a clean stop disarms the watchdog; an error above leaves it to reset the device.
    watchdog.close();
    ops::schedules::flush(&d);
    // The data caps' counts as they are (a reboot may follow).
    #[cfg(feature = "shape")]
    prepare::datacap::look(&d, true);
    device::boot::clean_stop(&d);
    // Containers keep running: a daemon restart must not touch them.
    log::info!("berth daemon stopping; containers keep running");
    let _ = std::fs::remove_file(d.cfg.paths.admin_socket());
    drop(lock);
    Ok(())
}

/// Tells the service manager, if one asked (`$NOTIFY_SOCKET`); a failure is logged only.
fn notify(state: &str) {
    if let Err(e) = berth_sys::notify::notify(state) {
        log::warn!("cannot notify the service manager: {e}");
    }
}

/// Modes (docs/security.md, "Host side"): what containers write (data/, through their binds)
/// and what berth keeps (state, store, logs, sockets) is root's alone; only the directories
/// on the way to a container's root and /data binds are traversable by others, as a user
/// namespace's root is one of those others. Set at every start, so a state directory made
/// by an older berth is closed too.
fn prepare_dirs(paths: &Paths) -> Result<()> {
    for (dir, mode) in [
        (paths.state.clone(), 0o700),
        (paths.store(), 0o700),
        (paths.store_tmp(), 0o700),
        (paths.state.join("data"), 0o700),
        (paths.run.clone(), 0o711),
        (paths.run.join("mnt"), 0o711),
        (paths.run.join("rootfs"), 0o711),
        (paths.run.join("data"), 0o711),
        (paths.run.join("binds"), 0o711),
        (paths.run.join("shim"), 0o700),
        (paths.run.join("logs"), 0o700),
        (paths.lxcpath.clone(), 0o711),
    ] {
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("chmod {}", dir.display()))?;
    }
    // What is bound over the kernel files and directories a container must not read
    // (berth_core::plan::MASKED_PROC_FILES): empty, read-only, root's.
    std::fs::write(paths.mask_file(), b"")
        .and_then(|_| {
            std::fs::set_permissions(paths.mask_file(), std::fs::Permissions::from_mode(0o444))
        })
        .and_then(|_| std::fs::create_dir_all(paths.mask_dir()))
        .and_then(|_| {
            std::fs::set_permissions(paths.mask_dir(), std::fs::Permissions::from_mode(0o555))
        })
        .with_context(|| format!("create {}", paths.mask_file().display()))
}

/// One daemon per state directory: a lock file held for the daemon's lifetime. A POSIX
/// record lock: closing any other descriptor of this file in the daemon would release it, so
/// nothing else in the daemon opens it.
fn single_instance(cfg: &Config) -> Result<std::fs::File> {
    let path = cfg.paths.daemon_pid();
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("open {}", path.display()))?;
    if !berth_sys::process::try_lock(&f)? {
        let mut other = String::new();
        let _ = f.read_to_string(&mut other);
        bail!(
            "another berth daemon is running (pid {}, lock {})",
            other.trim(),
            path.display()
        );
    }
    f.set_len(0)?;
    write!(f, "{}", std::process::id())?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::path::Path;
    use std::process::{Command, Stdio};

    /// A configuration whose directories are under `dir`.
    fn config_at(dir: &Path) -> Config {
        base::testing::config_under(dir, "")
    }

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    /// berth's directories are made with their modes, and a state directory an older berth
    /// left open is closed; the mask file is empty and read-only, even if something was
    /// written to it.
    #[test]
    fn directories_get_their_modes_at_every_start() {
        let dir = berth_testkit::TempDir::new("daemon-dirs");
        let cfg = config_at(dir.path("").as_path());
        let paths = &cfg.paths;
        std::fs::create_dir_all(&paths.state).unwrap();
        std::fs::set_permissions(&paths.state, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir_all(&paths.run).unwrap();
        std::fs::write(paths.mask_file(), b"left over").unwrap();
        prepare_dirs(paths).unwrap();
        for (d, want) in [
            (paths.state.clone(), 0o700),
            (paths.store(), 0o700),
            (paths.state.join("data"), 0o700),
            (paths.run.clone(), 0o711),
            (paths.run.join("rootfs"), 0o711),
            (paths.run.join("binds"), 0o711),
            (paths.run.join("shim"), 0o700),
            (paths.run.join("logs"), 0o700),
            (paths.lxcpath.clone(), 0o711),
            (paths.mask_dir(), 0o555),
        ] {
            assert_eq!(mode(&d), want, "{}", d.display());
        }
        assert_eq!(mode(&paths.mask_file()), 0o444);
        assert_eq!(std::fs::read(paths.mask_file()).unwrap(), b"");
        // A path that cannot be a directory: an error naming it.
        let file = dir.path("file");
        std::fs::write(&file, b"").unwrap();
        let cfg = config_at(&file);
        let e = format!("{:#}", prepare_dirs(&cfg.paths).unwrap_err());
        assert!(e.contains(&file.display().to_string()), "{e}");
    }

    /// One daemon per state directory: a second is refused naming the first's pid (the lock
    /// is a process's, so the first is a process of its own: this test, run again as it);
    /// once the first is gone the lock is the next one's, with its pid in the file.
    #[test]
    fn a_second_daemon_is_refused_naming_the_first() {
        const HOLD: &str = "BERTH_TEST_HOLD_DAEMON_LOCK";
        if let Some(dir) = std::env::var_os(HOLD) {
            let _lock = single_instance(&config_at(Path::new(&dir))).unwrap();
            // (After the harness's "test … … " on the same line.)
            println!("held");
            let _ = std::io::stdin().read_line(&mut String::new());
            return;
        }
        let dir = berth_testkit::TempDir::new("daemon-lock");
        let cfg = config_at(dir.path("").as_path());
        prepare_dirs(&cfg.paths).unwrap();
        let mut first = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "daemon::tests::a_second_daemon_is_refused_naming_the_first",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HOLD, dir.path(""))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(first.stdout.take().unwrap()).lines();
        let held = out
            .by_ref()
            .map_while(|l| l.ok())
            .any(|l| l.ends_with("held"));
        assert!(held, "the first daemon's process did not take the lock");
        let e = single_instance(&cfg).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "another berth daemon is running (pid {}",
                first.id()
            )),
            "{e}"
        );
        drop(first.stdin.take());
        // What it says as it ends is read (a closed pipe would make it complain).
        out.for_each(drop);
        assert!(first.wait().unwrap().success());
        let _lock = single_instance(&cfg).unwrap();
        assert_eq!(
            std::fs::read_to_string(cfg.paths.daemon_pid()).unwrap(),
            std::process::id().to_string()
        );
    }
}
