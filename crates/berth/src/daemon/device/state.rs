//! The persistent records (state.json): read at start, committed atomically, one owner.
//!
//! Crash safety: `state.json` is the commit point. An install downloads into `store/.tmp`,
//! verifies, renames into the store, and only then writes the new state (atomically). A crash
//! before the state write leaves the old state (plus, at most, an unreferenced image that
//! `gc` removes); after it, the new one. Start-up removes partial downloads and unmounts
//! whatever no running container uses.

use std::path::Path;

use anyhow::Context;
use berth_core::config::Config;
use berth_core::state::{Installed, State};
use berth_sys::fsutil::write_atomic;

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};

pub(crate) fn load_state(cfg: &Config) -> anyhow::Result<State> {
    let path = cfg.paths.state_file();
    match std::fs::read(&path) {
        Ok(bytes) => State::parse(&bytes).with_context(|| format!("{}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::default()),
        Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
    }
}

pub(crate) fn commit_state(d: &Daemon, new: State) -> Result<()> {
    let path = d.cfg.paths.state_file();
    write_atomic(&path, &new.to_json(), 0o600)
        .map_err(|e| write_failed(d, &path, e, "nothing was changed"))?;
    *d.state.lock().unwrap() = new;
    Ok(())
}

/// Before an operation that stops a container and then writes the state (a rollback): the
/// state file's size and a page more can be written beside it now, or the operation is
/// refused (507, naming who fills the partition) before anything changes.
pub(crate) fn room_to_commit(d: &Daemon) -> Result<()> {
    let path = d.cfg.paths.state_file();
    let probe = d.cfg.paths.state.join("state.room");
    let n = std::fs::metadata(&path).map_or(0, |m| m.len() as usize) + 4096;
    let wrote = std::fs::write(&probe, vec![0u8; n]);
    let _ = std::fs::remove_file(&probe);
    wrote.map_err(|e| write_failed(d, &path, e, "nothing was changed"))
}

pub(crate) fn state(d: &Daemon) -> State {
    d.state.lock().unwrap().clone()
}

/// A write of berth's own files that failed: a full disk is said as such (507), with who
/// fills it and what it means (`kept`: what stays as it was).
pub(crate) fn write_failed(d: &Daemon, path: &Path, e: std::io::Error, kept: &str) -> Error {
    if berth_sys::fsutil::is_enospc(&e) {
        Error::new(
            Kind::NoSpace,
            format!(
                "cannot write {}: file system full ({}); {kept} (free space with berth gc)",
                path.display(),
                crate::daemon::device::disk::holders(&d.cfg.paths)
            ),
        )
    } else {
        Error::internal(format!("write {}: {e}", path.display()))
    }
}

pub(crate) fn installed(d: &Daemon, name: &str) -> Result<Installed> {
    state(d).packages.get(name).cloned().ok_or_else(|| {
        Error::new(
            Kind::NotInstalled,
            format!("{name} is not installed (berth install {name})"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::testing::{fake_daemon, install, MANIFEST};

    /// No state file is a device with nothing installed; a damaged one is an error naming
    /// the file (never an empty state that would forget what is installed).
    #[test]
    fn a_missing_state_is_empty_and_a_damaged_one_is_refused_naming_the_file() {
        let (_dir, d, _) = fake_daemon("state-load", "");
        let path = d.cfg.paths.state_file();
        assert_eq!(load_state(&d.cfg).unwrap(), State::default());

        std::fs::write(&path, "{\"format\": 1, \"packages\": ").unwrap();
        let e = load_state(&d.cfg).unwrap_err();
        let text = format!("{e:#}");
        assert!(
            text.starts_with(&format!("{}: state file is damaged", path.display())),
            "{text}"
        );

        std::fs::write(&path, "{\"format\": 7, \"packages\": {}}").unwrap();
        let text = format!("{:#}", load_state(&d.cfg).unwrap_err());
        assert!(text.contains("state file has format 7"), "{text}");
    }

    /// A state file that cannot be read (here a directory in its place) is an error saying
    /// what could not be read, not an empty state.
    #[test]
    fn an_unreadable_state_is_an_error_not_an_empty_state() {
        let (_dir, d, _) = fake_daemon("state-unreadable", "");
        let path = d.cfg.paths.state_file();
        std::fs::create_dir(&path).unwrap();
        let text = format!("{:#}", load_state(&d.cfg).unwrap_err());
        assert!(
            text.starts_with(&format!("read {}", path.display())),
            "{text}"
        );
    }

    /// A commit writes the file and then the state in memory; what was written reads back
    /// as what was committed.
    #[test]
    fn a_commit_writes_the_file_then_the_state_in_memory() {
        let (_dir, d, _) = fake_daemon("state-commit", "");
        let p = install(&d, MANIFEST);
        let new = state(&d);
        *d.state.lock().unwrap() = State::default();
        commit_state(&d, new.clone()).unwrap();
        assert_eq!(state(&d), new);
        assert_eq!(load_state(&d.cfg).unwrap(), new);
        assert_eq!(installed(&d, "web").unwrap(), p);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.cfg.paths.state_file())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    /// A commit whose write fails changes nothing: neither the file nor the state in
    /// memory, and the error names the file.
    #[test]
    fn a_failed_commit_changes_nothing() {
        let (_dir, d, _) = fake_daemon("state-commit-fails", "");
        let path = d.cfg.paths.state_file();
        // A directory where the file goes: the rename over it fails, root or not.
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("keep"), "").unwrap();
        install(&d, MANIFEST);
        let new = state(&d);
        *d.state.lock().unwrap() = State::default();
        let e = commit_state(&d, new).unwrap_err();
        assert_eq!(e.kind, Kind::Internal);
        assert!(
            e.message
                .starts_with(&format!("write {}: ", path.display())),
            "{}",
            e.message
        );
        assert!(state(&d).packages.is_empty(), "the state in memory changed");
        assert!(path.join("keep").exists());
    }

    /// A full disk is said as such (507, `no_space`), with what stays as it was and the way
    /// out; any other write error is internal, naming the file and the error.
    #[test]
    fn a_full_disk_is_no_space_and_other_write_errors_are_internal() {
        let (_dir, d, _m) = fake_daemon("state-full", "");
        install(&d, MANIFEST);
        std::fs::create_dir_all(d.cfg.paths.data("web")).unwrap();
        std::fs::write(d.cfg.paths.data("web").join("big"), vec![7u8; 3 << 20]).unwrap();
        let path = Path::new("/var/lib/berth/state.json");
        let full = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let e = write_failed(&d, path, full, "nothing was changed");
        assert_eq!(e.kind, Kind::NoSpace);
        assert_eq!(e.status(), 507);
        // who fills it: the container's /data first (3 MiB and its directories' blocks)
        assert!(
            e.message.starts_with(
                "cannot write /var/lib/berth/state.json: file system full (the biggest: /data of web 3.0 MiB ("
            ) && e
                .message
                .ends_with("); nothing was changed (free space with berth gc)"),
            "{}",
            e.message
        );

        let denied = std::io::Error::from_raw_os_error(libc::EACCES);
        let e = write_failed(&d, path, denied, "nothing was changed");
        assert_eq!(e.kind, Kind::Internal);
        assert!(
            e.message
                .starts_with("write /var/lib/berth/state.json: Permission denied"),
            "{}",
            e.message
        );
    }

    /// A package not installed is `not_installed`, saying how to install it.
    #[test]
    fn an_installed_package_is_found_and_another_is_not_installed() {
        let (_dir, d, _) = fake_daemon("state-installed", "");
        let p = install(&d, MANIFEST);
        assert_eq!(installed(&d, "web").unwrap(), p);
        let e = installed(&d, "db").unwrap_err();
        assert_eq!(e.kind, Kind::NotInstalled);
        assert_eq!(e.message, "db is not installed (berth install db)");
    }
}
