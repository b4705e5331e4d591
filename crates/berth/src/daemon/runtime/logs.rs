//! `berth logs`: a container's output, live from its shim or as saved when it stopped.

use crate::daemon::context::Daemon;
use crate::daemon::error::Result;
use crate::daemon::runtime::probe;
use crate::daemon::state;

/// Logs of a container: the live ring (from its shim) or the ring saved when it stopped.
pub(crate) enum Logs {
    Live(std::os::unix::net::UnixStream),
    Saved(Vec<u8>),
}

pub(crate) fn logs(d: &Daemon, name: &str, follow: bool) -> Result<Logs> {
    logs_tail(d, name, follow, None)
}

/// The same; a followed log starts with the ring's last `tail` lines (all without).
pub(crate) fn logs_tail(d: &Daemon, name: &str, follow: bool, tail: Option<usize>) -> Result<Logs> {
    state::installed(d, name)?;
    let sock = d.cfg.paths.shim_socket(name);
    if probe::is_running(d, name) {
        let what = match (follow, tail) {
            (true, Some(n)) => format!("tail {n}"),
            (true, None) => "follow".into(),
            (false, _) => "logs".into(),
        };
        if let Ok(s) = crate::shim::request(&sock, &what) {
            return Ok(Logs::Live(s));
        }
    }
    Ok(Logs::Saved(
        std::fs::read(d.cfg.paths.saved_log(name)).unwrap_or_default(),
    ))
}
