//! Each container's API socket (`api::container` serves it): made before the container
//! starts, since its LXC configuration binds the socket's directory at `/run/berth`; made
//! again for the containers that run on when the daemon restarts; gone with the package.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;

use berth_core::state::Installed;

use crate::daemon::context::Daemon;
use crate::daemon::endpoints::Endpoint;
use crate::daemon::error::{Error, Result};
use crate::daemon::runtime::probe;
use crate::daemon::{security, state};

/// The host's ids of the container's payload user and group: what owns its socket.
fn payload_ids(d: &Daemon, p: &Installed) -> Result<(u32, u32)> {
    let e = &p.manifest.entrypoint;
    Ok(match security::idmap(d, p, false)? {
        Some((base, count)) if e.user < count && e.group < count => (base + e.user, base + e.group),
        Some((base, _)) => (base, base),
        None => (e.user, e.group),
    })
}

/// Makes `name`'s socket (before its start: the LXC configuration binds its directory), or
/// makes it again after a daemon restart (a running container sees the new socket in the
/// directory it has bound). Only the payload user can connect: the socket is its, 0600; the
/// directory is root's (0755, bound read-only), so nothing can be stored in it.
pub(crate) fn open(d: &Daemon, p: &Installed) -> Result<()> {
    let name = p.name.as_str();
    let dir = d.cfg.paths.api_dir(name);
    let sock = dir.join("api.sock");
    if d.capi.has(name) && sock.exists() {
        // Kept (a running container's bind sees it), but owned by this version's payload
        // user: an upgrade may have changed it.
        let (uid, gid) = payload_ids(d, p)?;
        return std::os::unix::fs::chown(&sock, Some(uid), Some(gid))
            .and_then(|_| std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600)))
            .map_err(|e| {
                Error::internal(format!("{name}: its API socket {}: {e}", sock.display()))
            });
    }
    d.capi.remove(name);
    let fail = |e: std::io::Error| {
        Error::internal(format!(
            "{name}: cannot make its API socket {}: {e}",
            sock.display()
        ))
    };
    let parent = dir.parent().unwrap_or(&dir);
    std::fs::create_dir_all(parent).map_err(fail)?;
    std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o711)).map_err(fail)?;
    // The mount point of hot-binding's stage (`berth_core::bind::STAGE`, bound over it
    // later in the same start): in this read-only bind LXC could not make it.
    std::fs::create_dir_all(dir.join("binds")).map_err(fail)?;
    let (uid, gid) = payload_ids(d, p)?;
    std::os::unix::fs::chown(&dir, Some(0), Some(0)).map_err(fail)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).map_err(fail)?;
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).map_err(fail)?;
    std::os::unix::fs::chown(&sock, Some(uid), Some(gid)).map_err(fail)?;
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600)).map_err(fail)?;
    listener.set_nonblocking(true).map_err(fail)?;
    let now = d.started.elapsed().as_millis() as u64;
    d.capi
        .add(Endpoint::new(name, listener, d.cfg.api.burst, now));
    Ok(())
}

/// The package is removed: its socket and directory go (it is not running).
pub(crate) fn close(d: &Daemon, name: &str) {
    d.capi.remove(name);
    unlock(d, name);
    let dir = d.cfg.paths.api_dir(name);
    let _ = std::fs::remove_file(dir.join("api.sock"));
    let _ = std::fs::remove_dir(dir.join("binds"));
    let _ = std::fs::remove_dir(&dir);
}

/// At daemon start: the sockets of the containers that run on, and their update locks.
pub(crate) fn reopen(d: &Daemon, running: &[String]) {
    for name in running {
        match state::installed(d, name).and_then(|p| open(d, &p)) {
            Ok(()) => {}
            Err(e) => log::warn!("{name}: its container API is not available: {e}"),
        }
        let lock = std::fs::read(lock_file(d, name))
            .ok()
            .and_then(|b| serde_json::from_slice::<(u64, i32, u64)>(&b).ok());
        if let Some((until, run, first)) = lock {
            d.capi.restore(name, until, run, first);
        }
    }
}

/// Where an update lock is kept while the daemon is away (tmpfs: a lock is its run's, and
/// no run outlives a reboot), root's alone.
fn lock_file(d: &Daemon, name: &str) -> std::path::PathBuf {
    d.cfg.paths.run.join("locks").join(format!("{name}.json"))
}

/// Holds off upgrades of `name` for `want_s` seconds, for run `run`, within the policy's
/// maximum counted from the run's first lock; returns until when, and whether the run held
/// no lock before (what is worth a log line).
pub(crate) fn lock(d: &Daemon, name: &str, want_s: u64, run: i32) -> Result<(u64, bool)> {
    let now = berth_sys::process::now_s();
    let had = d.capi.locked_until(name, now, Some(run)).is_some();
    // (a record of this run's earlier lock stays: the maximum counts from it)
    let (until, first) = d
        .capi
        .lock(name, now, want_s, d.cfg.api.max_update_lock_s, run);
    let path = lock_file(d, name);
    let dir = d.cfg.paths.run.join("locks");
    std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)))
        .and_then(|_| {
            berth_sys::fsutil::write_volatile(
                &path,
                serde_json::json!([until, run, first])
                    .to_string()
                    .as_bytes(),
                0o600,
            )
        })
        .map_err(|e| {
            d.capi.unlock(name);
            Error::internal(format!(
                "{name}: cannot keep its update lock in {}: {e}",
                path.display()
            ))
        })?;
    Ok((until, !had))
}

/// Releases `name`'s update lock; whether it held one.
pub(crate) fn unlock(d: &Daemon, name: &str) -> bool {
    let _ = std::fs::remove_file(lock_file(d, name));
    d.capi.unlock(name)
}

/// Until when upgrades of `name` are held off by its update lock, if they are.
pub(crate) fn locked_until(d: &Daemon, name: &str) -> Option<u64> {
    let now = berth_sys::process::now_s();
    d.capi.locked_until(name, now, probe::running_init(d, name))
}
