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

use crate::daemon::context::Daemon;
use crate::daemon::error::{Error, Kind, Result};

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
        .map_err(|e| write_failed(&path, e, "nothing was changed"))?;
    *d.state.lock().unwrap() = new;
    Ok(())
}

pub(crate) fn state(d: &Daemon) -> State {
    d.state.lock().unwrap().clone()
}

/// A write of berth's own files that failed: a full disk is said as such (507), with what
/// it means (`kept`: what stays as it was).
pub(crate) fn write_failed(path: &Path, e: std::io::Error, kept: &str) -> Error {
    if berth_sys::fsutil::is_enospc(&e) {
        Error::new(
            Kind::NoSpace,
            format!(
                "cannot write {}: file system full; {kept} (free space with berth gc)",
                path.display()
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
