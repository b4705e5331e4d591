//! Each container's API socket (`api::container` serves it): made before the container
//! starts, since its LXC configuration binds the socket's directory at `/run/berth`; made
//! again for the containers that run on when the daemon restarts; gone with the package.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;

use berth_core::state::Installed;

use crate::daemon::base::context::Daemon;
use crate::daemon::base::endpoints::Endpoint;
use crate::daemon::base::error::{Error, Result};
use crate::daemon::device::state;
use crate::daemon::prepare::security;
use crate::daemon::runtime::probe;

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
    // The daemon runs as root (`daemon::run`); its unit tests, as another user, keep the
    // directory theirs.
    if berth_sys::process::is_root() {
        std::os::unix::fs::chown(&dir, Some(0), Some(0)).map_err(fail)?;
    }
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
        // (a lock kept by an older berth, on the wall clock, does not read: it is dropped)
        let lock = std::fs::read(lock_file(d, name))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .filter(|l| l[3] == MONOTONIC);
        if let Some(l) = lock {
            let n = |i: usize| l[i].as_u64();
            // (a run directory that outlived a reboot could hold another boot's clock:
            // a lock beyond the policy's bound from now, or begun in the future, is none)
            let now = berth_sys::process::mono_s();
            if let (Some(until), Some(run), Some(first)) = (n(0), n(1), n(2)) {
                if first <= now && until <= now + d.cfg.api.max_update_lock_s {
                    d.capi.restore(name, until, run as i32, first);
                }
            }
        }
    }
}

/// Where an update lock is kept while the daemon is away (tmpfs: a lock is its run's, and
/// no run outlives a reboot), root's alone.
fn lock_file(d: &Daemon, name: &str) -> std::path::PathBuf {
    d.cfg.paths.run.join("locks").join(format!("{name}.json"))
}

/// The clock an update lock counts on, as its file names it.
const MONOTONIC: &str = "monotonic";

/// An update lock counts on CLOCK_MONOTONIC, not the wall clock: NTP setting the clock
/// forward by years must not end it, nor setting it back stretch it. Its file is in /run, so
/// no lock outlives the boot its clock counts from. The API and the CLI see its end as a date:
/// the wall clock now plus what is left.
fn as_date(until: u64, mono: u64) -> u64 {
    berth_sys::process::now_s() + until.saturating_sub(mono)
}

/// Holds off upgrades of `name` for `want_s` seconds, for run `run`, within the policy's
/// maximum counted from the run's first lock; returns until when (a date), and whether the
/// run held no lock before (what is worth a log line).
pub(crate) fn lock(d: &Daemon, name: &str, want_s: u64, run: i32) -> Result<(u64, bool)> {
    let now = berth_sys::process::mono_s();
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
                serde_json::json!([until, run, first, MONOTONIC])
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
    Ok((as_date(until, now), !had))
}

/// Releases `name`'s update lock; whether it held one.
pub(crate) fn unlock(d: &Daemon, name: &str) -> bool {
    let _ = std::fs::remove_file(lock_file(d, name));
    d.capi.unlock(name)
}

/// Until when (a date) upgrades of `name` are held off by its update lock, if they are.
pub(crate) fn locked_until(d: &Daemon, name: &str) -> Option<u64> {
    locked_until_run(d, name, probe::running_init(d, name))
}

/// The same for the run `run` (None: nothing runs).
pub(crate) fn locked_until_run(d: &Daemon, name: &str, run: Option<i32>) -> Option<u64> {
    let now = berth_sys::process::mono_s();
    d.capi.locked_until(name, now, run).map(|u| as_date(u, now))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::daemon::base::context::Resources;
    use crate::daemon::base::error::Kind;
    use crate::daemon::base::testing::{fake_daemon, install, MANIFEST};
    use crate::daemon::runtime::probe::tests::{info, lxc_config, FakeShim};
    use berth_sys::process::{mono_s, now_s};

    /// The same daemon started again: its configuration and kernel roots, nothing in memory.
    fn restarted(d: &Daemon) -> Daemon {
        let resources = Resources {
            cgroups: Err("fixture".into()),
            host: d.resources.host,
        };
        let mut again = Daemon::new(
            d.cfg.clone(),
            d.roots.clone(),
            resources,
            state::state(d).clone(),
        );
        again.host = d.host;
        again
    }

    /// The kernel has user namespaces (what `security::idmap` reads of /proc).
    fn userns(d: &Daemon) {
        std::fs::create_dir_all(d.proc().join("self/ns")).unwrap();
        std::fs::write(d.proc().join("self/ns/user"), "").unwrap();
        std::fs::create_dir_all(d.proc().join("sys/user")).unwrap();
        std::fs::write(d.proc().join("sys/user/max_user_namespaces"), "15000\n").unwrap();
    }

    /// A lock holds for the time asked, is kept in the run directory (until, run, first lock)
    /// and, after a daemon restart, is the running run's again; the run's end ends it.
    #[test]
    fn an_update_lock_is_kept_across_a_daemon_restart_for_its_run() {
        let (_dir, d, _m) = fake_daemon("sockets-lock", "");
        install(&d, MANIFEST);
        lxc_config(&d, "web");
        let (t0, m0) = (now_s(), mono_s());
        let (until, first) = lock(&d, "web", 100, 4242).unwrap();
        let (t1, m1) = (now_s(), mono_s());
        assert!((t0 + 100..=t1 + 100).contains(&until), "{until}: a date");
        assert!(first, "the run held no lock before");
        // Kept on the monotonic clock, which NTP does not move.
        let kept: (u64, i32, u64, String) =
            serde_json::from_slice(&std::fs::read(lock_file(&d, "web")).unwrap()).unwrap();
        assert!((m0 + 100..=m1 + 100).contains(&kept.0), "{kept:?}");
        assert_eq!((kept.1, kept.3.as_str()), (4242, MONOTONIC));
        assert!((m0..=m1).contains(&kept.2));
        let mode = std::fs::metadata(lock_file(&d, "web")).unwrap().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!lock(&d, "web", 100, 4242).unwrap().1, "renewed, not new");
        // Without its shim nothing runs: no run holds the lock.
        assert_eq!(locked_until(&d, "web"), None);

        let d2 = restarted(&d);
        let shim = FakeShim::start(&d2, "web", info(4242), b"");
        // No user namespaces here: its socket cannot be made (logged), its lock is restored.
        reopen(&d2, &["web".to_string()]);
        assert!(!d2.capi.has("web"));
        assert!(locked_until(&d2, "web").is_some_and(|u| u.abs_diff(until) <= 2));
        drop(shim);
        let _other_run = FakeShim::start(&d2, "web", info(4343), b"");
        assert_eq!(locked_until(&d2, "web"), None, "the lock was another run's");
    }

    /// A lock file on the wall clock (an older berth's) is not read as a monotonic one,
    /// which would hold the upgrades for decades: it is dropped at the restart.
    #[test]
    fn a_lock_kept_on_the_wall_clock_is_dropped() {
        let (_dir, d, _m) = fake_daemon("sockets-oldlock", "");
        install(&d, MANIFEST);
        lxc_config(&d, "web");
        std::fs::create_dir_all(d.cfg.paths.run.join("locks")).unwrap();
        let wall = now_s();
        std::fs::write(
            lock_file(&d, "web"),
            serde_json::json!([wall + 100, 4242, wall]).to_string(),
        )
        .unwrap();
        let _shim = FakeShim::start(&d, "web", info(4242), b"");
        reopen(&d, &["web".to_string()]);
        assert_eq!(locked_until(&d, "web"), None);
        // …while this berth's own is restored
        std::fs::write(
            lock_file(&d, "web"),
            serde_json::json!([mono_s() + 100, 4242, mono_s(), MONOTONIC]).to_string(),
        )
        .unwrap();
        reopen(&d, &["web".to_string()]);
        let u = locked_until(&d, "web").expect("restored");
        assert!(u.abs_diff(now_s() + 100) <= 2, "{u}");
    }

    /// Unlocking says whether a lock was held, and removes its file.
    #[test]
    fn unlocking_removes_the_kept_lock() {
        let (_dir, d, _m) = fake_daemon("sockets-unlock", "");
        lock(&d, "web", 100, 7).unwrap();
        assert!(lock_file(&d, "web").exists());
        assert!(unlock(&d, "web"));
        assert!(!lock_file(&d, "web").exists());
        assert!(!unlock(&d, "web"));
        assert_eq!(locked_until_run(&d, "web", Some(7)), None);
    }

    /// A lock that cannot be written to the run directory is not held either, and the error
    /// names where it would have been kept.
    #[test]
    fn a_lock_that_cannot_be_kept_is_not_held() {
        let (_dir, d, _m) = fake_daemon("sockets-nolock", "");
        std::fs::write(d.cfg.paths.run.join("locks"), "not a directory").unwrap();
        let e = lock(&d, "web", 100, 7).unwrap_err();
        assert_eq!(e.kind, Kind::Internal);
        assert!(
            e.message.starts_with(&format!(
                "web: cannot keep its update lock in {}: ",
                lock_file(&d, "web").display()
            )),
            "{}",
            e.message
        );
        assert_eq!(locked_until_run(&d, "web", Some(7)), None);
    }

    /// An unprivileged package's socket needs its ids: without user namespaces there are none,
    /// and no socket is made or registered.
    #[test]
    fn no_socket_without_the_payloads_ids() {
        let (_dir, d, _m) = fake_daemon("sockets-noids", "");
        let p = install(&d, MANIFEST);
        let e = open(&d, &p).unwrap_err();
        assert_eq!(e.kind, Kind::NoUserns);
        assert!(e
            .message
            .starts_with("web: this kernel has no usable user namespaces"));
        assert!(!d.cfg.paths.api_dir("web").join("api.sock").exists());
        assert!(!d.capi.has("web"));
    }

    /// Removing the package: its socket, its stage's mount point, its directory and its lock
    /// all go.
    #[test]
    fn closing_removes_the_socket_its_directory_and_the_lock() {
        let (_dir, d, _m) = fake_daemon("sockets-close", "");
        let dir = d.cfg.paths.api_dir("web");
        std::fs::create_dir_all(dir.join("binds")).unwrap();
        let l = UnixListener::bind(dir.join("api.sock")).unwrap();
        d.capi.add(Endpoint::new("web", l, 4, 0));
        lock(&d, "web", 100, 7).unwrap();
        close(&d, "web");
        assert!(!dir.exists(), "{} left", dir.display());
        assert!(!d.capi.has("web"));
        assert!(!lock_file(&d, "web").exists());
        assert!(d.cfg.paths.api_dir("db").parent().unwrap().exists());
    }

    /// The socket is the payload user's alone (0600) in a directory root owns (0755), with
    /// the stage's mount point; made again, it is the same endpoint's. Needs root (chown).
    #[test]
    fn a_socket_is_the_payload_users_in_a_root_directory() {
        if !berth_sys::process::is_root() {
            berth_sys::skip::record(
                "host root",
                "sockets::open chowns the socket's directory to root and the socket to the payload's host ids",
            );
            return;
        }
        let (_dir, d, _m) = fake_daemon("sockets-open", "");
        userns(&d);
        let p = install(&d, MANIFEST);
        open(&d, &p).unwrap();
        let (base, _) = security::idmap(&d, &p, false).unwrap().unwrap();
        assert_ne!(base, 0);
        let dir = d.cfg.paths.api_dir("web");
        let sock = std::fs::metadata(dir.join("api.sock")).unwrap();
        assert_eq!(
            (sock.uid(), sock.gid(), sock.mode() & 0o777),
            (base, base, 0o600)
        );
        let dm = std::fs::metadata(&dir).unwrap();
        assert_eq!((dm.uid(), dm.mode() & 0o777), (0, 0o755));
        assert!(dir.join("binds").is_dir());
        assert!(d.capi.has("web"));
        // Again (an upgrade, a restart that kept it): the same socket, its owner set again.
        std::os::unix::fs::chown(dir.join("api.sock"), Some(0), Some(0)).unwrap();
        open(&d, &p).unwrap();
        let again = std::fs::metadata(dir.join("api.sock")).unwrap();
        assert_eq!((again.uid(), again.ino()), (base, sock.ino()));
        close(&d, "web");
        assert!(!dir.exists());
    }
}
