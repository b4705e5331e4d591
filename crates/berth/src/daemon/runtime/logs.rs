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

/// A container API client's followed log (`GET /v1/logs?follow=1`), handed to the
/// container's shim with the client's connection: the shim answers it and follows the log
/// from then on, in the container's budget, and no thread of the daemon is held for it.
/// False when there is no shim to take it (the container does not run).
pub(crate) fn hand_over(
    d: &Daemon,
    name: &str,
    tail: Option<usize>,
    client: &std::os::unix::net::UnixStream,
) -> bool {
    use std::os::fd::AsRawFd;
    if !probe::is_running(d, name) {
        return false;
    }
    let what = match tail {
        Some(n) => format!("http-tail {n}\n"),
        None => "http-follow\n".into(),
    };
    std::os::unix::net::UnixStream::connect(d.cfg.paths.shim_socket(name))
        .and_then(|s| berth_sys::fsutil::send_fd(&s, what.as_bytes(), client.as_raw_fd()))
        .is_ok()
}
