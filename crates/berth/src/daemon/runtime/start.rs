//! `berth start`: roots, /data, limits, network and security into an LXC configuration, then the shim.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_core::plan::{self, ContainerPlan, HOST_BASE_DIRS};
use berth_sys::fsutil::write_atomic;
use serde_json::{json, Value};

use crate::daemon::cgroups;
use crate::daemon::limits;
use crate::daemon::net;
use crate::daemon::runtime::mounts;
use crate::daemon::runtime::probe;
use crate::daemon::runtime::watch;
use crate::daemon::security;
use crate::daemon::state;
use crate::daemon::{ApiError, ApiResult, Daemon};

pub(crate) fn start(d: &Arc<Daemon>, name: &str) -> ApiResult<Value> {
    let _op = d.op.lock().unwrap();
    start_locked(d, name)
}

pub(crate) fn start_locked(d: &Arc<Daemon>, name: &str) -> ApiResult<Value> {
    let t_begin = Instant::now();
    let p = state::installed(d, name)?;
    if probe::is_running(d, name) {
        // A monitor whose shim was killed outlives its container by a moment (LXC's
        // teardown): that container is stopping, not running.
        let init = probe::running_init(d, name);
        if init.is_some() || !probe::wait_monitor_gone(d, name, Duration::from_secs(10)) {
            return Err(ApiError::new(
                409,
                "already_running",
                match init {
                    Some(pid) => format!("{name} is already running (init pid {pid})"),
                    None => format!("{name} is still stopping (its LXC monitor has not exited)"),
                },
            ));
        }
    }
    let paths = &d.cfg.paths;
    security::check_start(d, &p)?;
    let st = state::state(d);
    let layer_shas = mounts::layers(&st, &p)?;
    let mut lowers = Vec::new();
    for sha in &layer_shas {
        lowers.push(mounts::ensure_image_mounted(d, sha)?);
    }
    let rootfs = if lowers.len() == 1 {
        lowers[0].clone()
    } else {
        let root = paths.rootfs(name);
        let _ = berth_sys::mount::umount(&root, true);
        std::fs::create_dir_all(&root).map_err(ApiError::internal)?;
        let refs: Vec<&Path> = lowers.iter().map(PathBuf::as_path).collect();
        berth_sys::mount::mount_overlay_ro(&refs, &root)
            .map_err(|e| ApiError::new(500, "mount_failed", format!("{name}: merged root: {e}")))?;
        root
    };
    let data = paths.data(name);
    if !data.exists() {
        std::fs::create_dir_all(&data).map_err(ApiError::internal)?;
        std::fs::set_permissions(&data, std::os::unix::fs::PermissionsExt::from_mode(0o750))
            .map_err(ApiError::internal)?;
        std::os::unix::fs::chown(
            &data,
            Some(p.manifest.entrypoint.user),
            Some(p.manifest.entrypoint.group),
        )
        .map_err(ApiError::internal)?;
    }
    if let Err(e) = security::own_data(d, &p, &data) {
        mounts::release_mounts(d);
        return Err(e);
    }
    // Bind what the host has and the image has a mount point for (the root is read-only:
    // LXC cannot create one). A host without /lib64 simply has nothing to bind there.
    let data_mnt = paths.data_mount(name);
    if !mounts::is_mounted(d, &data_mnt) {
        std::fs::create_dir_all(&data_mnt).map_err(ApiError::internal)?;
        berth_sys::mount::bind(&data, &data_mnt, false)
            .map_err(|e| ApiError::new(500, "mount_failed", format!("{name}: /data: {e}")))?;
    }
    let host_base_dirs: Vec<PathBuf> = HOST_BASE_DIRS
        .iter()
        .map(PathBuf::from)
        .filter(|p| {
            p.is_dir()
                && std::fs::symlink_metadata(plan::host_base_target(&rootfs, p))
                    .is_ok_and(|m| m.is_dir())
        })
        .collect();
    let limits = match limits::start_limits(d, &p) {
        Ok(l) => l,
        Err(e) => {
            mounts::release_mounts(d);
            return Err(e);
        }
    };
    let cg_version = limits.as_ref().map(|(v, _)| *v);
    let net_keys = match net::prepare(d, &p, &st, &rootfs) {
        Ok(k) => k,
        Err(e) => {
            mounts::release_mounts(d);
            return Err(e);
        }
    };
    let mut text = plan::lxc_config(&ContainerPlan {
        manifest: &p.manifest,
        trusted: p.trusted,
        config: &d.cfg,
        rootfs,
        host_base_dirs,
        limits,
    })
    .map_err(|e| ApiError::new(409, "refused", e.to_string()))?;
    match security::lxc_lines(d, &p, cg_version) {
        Ok(lines) => text.push_str(&lines),
        Err(e) => {
            mounts::release_mounts(d);
            return Err(e);
        }
    }
    text.push_str(&net_keys);
    let dir = paths.lxc_dir(name);
    std::fs::create_dir_all(&dir).map_err(ApiError::internal)?;
    berth_sys::fsutil::remove_atomic_leftovers(&dir);
    // Its configuration, seccomp profile and LXC's log are root's alone.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .map_err(ApiError::internal)?;
    write_atomic(&dir.join("config"), text.as_bytes(), 0o640).map_err(ApiError::internal)?;
    // The images this run is made of: an upgrade of a dependency while it runs changes the
    // state, not the layers under its root; mounts and gc keep these until it stops.
    write_atomic(&dir.join("layers"), layer_shas.join("\n").as_bytes(), 0o600)
        .map_err(ApiError::internal)?;
    cgroups::remove_stale_cgroups(&d.cfg, name);
    let args = crate::shim::ShimArgs {
        name: name.to_string(),
        lxcpath: paths.lxcpath.clone(),
        socket: paths.shim_socket(name),
        ring_bytes: d.cfg.log_ring_bytes,
        saved_log: paths.saved_log(name),
        exit_file: paths.exit_file(name),
        start_timeout: Duration::from_secs(d.cfg.start_timeout_s as u64),
        argv: p.manifest.entrypoint.argv.clone(),
    };
    // The shim's own complaints (not the payload's output) go next to LXC's log.
    let shim_log = File::options()
        .create(true)
        .append(true)
        .open(dir.join("shim.log"))
        .map_err(ApiError::internal)?;
    let t0 = Instant::now();
    log::debug!("{name}: prepared in {:?}", t0 - t_begin);
    let mut child = Command::new(&d.exe)
        .args(args.to_args())
        .env("PATH", security::shim_path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(shim_log)
        .spawn()
        .map_err(|e| ApiError::internal(format!("spawn shim for {name}: {e}")))?;
    let mut out = String::new();
    let _ = child.stdout.take().map(|mut s| {
        // One line: "ok PID" or "error: …". Reading to EOF would wait for the shim's exit.
        // The shim has its own start timeout; this one guards against a shim wedged in
        // liblxc, which would otherwise hold the operation lock for ever.
        use std::os::fd::AsRawFd;
        let deadline = Instant::now() + args.start_timeout + Duration::from_secs(5);
        let mut b = [0u8; 1];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ready = berth_sys::process::poll(
                &[(s.as_raw_fd(), berth_sys::process::POLLIN)],
                left.as_millis().min(i32::MAX as u128) as i32,
            );
            if !matches!(ready, Ok(ref r) if r[0] != 0) {
                if left.is_zero() {
                    out = format!(
                        "error: {name}: the shim did not report within {} s",
                        args.start_timeout.as_secs() + 5
                    );
                    break;
                }
                continue;
            }
            if s.read(&mut b).unwrap_or(0) != 1 || b[0] == b'\n' {
                break;
            }
            out.push(b[0] as char);
        }
    });
    let _ = child.wait();
    let elapsed = t0.elapsed();
    let Some(pid) = out.strip_prefix("ok ") else {
        mounts::release_mounts(d);
        let msg = out.strip_prefix("error: ").unwrap_or(&out).to_string();
        return Err(ApiError::new(
            500,
            "start_failed",
            if msg.is_empty() {
                format!("{name}: the shim died before reporting")
            } else {
                msg
            },
        ));
    };
    let pid: i32 = pid.trim().parse().unwrap_or(0);
    set_autostart(d, name, true)?;
    watch::watch(d, name);
    log::info!(
        "started {name} (init pid {pid}) in {} ms",
        elapsed.as_millis()
    );
    Ok(json!({"name": name, "init_pid": pid, "start_ms": elapsed.as_secs_f64() * 1000.0}))
}

/// Records the operator's last start or stop of a container (an empty marker file): what
/// the daemon starts again after a reboot. Not fsynced: it is a preference, and it must not
/// cost a flash flush on every start and stop; a power cut in the next few seconds at worst
/// forgets the last change.
pub(crate) fn set_autostart(d: &Daemon, name: &str, on: bool) -> ApiResult<()> {
    let marker = d.cfg.paths.autostart(name);
    if on {
        if let Some(dir) = marker.parent() {
            std::fs::create_dir_all(dir).map_err(ApiError::internal)?;
        }
        File::create(&marker)
            .map(drop)
            .map_err(|e| ApiError::internal(format!("{}: {e}", marker.display())))
    } else {
        match std::fs::remove_file(&marker) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(ApiError::internal(format!("{}: {e}", marker.display())))
            }
            _ => Ok(()),
        }
    }
}
