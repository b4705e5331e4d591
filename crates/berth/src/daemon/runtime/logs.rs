//! `berth logs`: a container's output, live from its shim or as saved when it stopped.

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::Result;
use crate::daemon::device::state;
use crate::daemon::runtime::probe;

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

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::daemon::base::error::Kind;
    use crate::daemon::base::testing::{fake_daemon, install, MANIFEST};
    use crate::daemon::runtime::probe::tests::{info, lxc_config, lxc_monitor, FakeShim};

    fn saved(d: &Daemon, name: &str, text: &[u8]) {
        let f = d.cfg.paths.saved_log(name);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, text).unwrap();
    }

    fn read_all(l: Logs) -> (bool, Vec<u8>) {
        match l {
            Logs::Live(mut s) => {
                let mut out = Vec::new();
                s.read_to_end(&mut out).unwrap();
                (true, out)
            }
            Logs::Saved(b) => (false, b),
        }
    }

    /// A stopped container's log is the ring its shim saved as it ended; none saved, an empty
    /// log.
    #[test]
    fn a_stopped_containers_log_is_the_ring_saved_when_it_ended() {
        let (_dir, d, _m) = fake_daemon("logs-saved", "");
        install(&d, MANIFEST);
        assert_eq!(read_all(logs(&d, "web", false).unwrap()), (false, vec![]));
        saved(&d, "web", b"line 1\nline 2\n");
        assert_eq!(
            read_all(logs(&d, "web", true).unwrap()),
            (false, b"line 1\nline 2\n".to_vec()),
            "nothing to follow once it stopped"
        );
    }

    /// A running container's log comes from its shim, asked for the ring, to follow it, or
    /// to follow it from its last lines.
    #[test]
    fn a_running_containers_log_is_asked_of_its_shim() {
        let (_dir, d, _m) = fake_daemon("logs-live", "");
        install(&d, MANIFEST);
        saved(&d, "web", b"an older run\n");
        lxc_config(&d, "web");
        let shim = FakeShim::start(&d, "web", info(4242), b"live line\n");
        assert_eq!(
            read_all(logs(&d, "web", false).unwrap()),
            (true, b"live line\n".to_vec())
        );
        read_all(logs(&d, "web", true).unwrap());
        read_all(logs_tail(&d, "web", true, Some(5)).unwrap());
        read_all(logs_tail(&d, "web", false, Some(5)).unwrap());
        let requests: Vec<String> = shim.asked().into_iter().filter(|r| r != "info").collect();
        assert_eq!(requests, ["logs", "follow", "tail 5", "logs"]);
    }

    /// A container LXC still runs whose shim was killed: the saved ring, not an error.
    #[test]
    fn a_container_without_its_shim_gives_the_saved_ring() {
        let (_dir, d, _m) = fake_daemon("logs-noshim", "");
        install(&d, MANIFEST);
        lxc_config(&d, "web");
        let _monitor = lxc_monitor(&d, "web");
        assert!(probe::is_running(&d, "web"));
        saved(&d, "web", b"saved\n");
        assert_eq!(
            read_all(logs(&d, "web", true).unwrap()),
            (false, b"saved\n".to_vec())
        );
    }

    /// Only an installed package has a log, whatever files another left behind.
    #[test]
    fn a_package_not_installed_has_no_log() {
        let (_dir, d, _m) = fake_daemon("logs-none", "");
        saved(&d, "web", b"left behind\n");
        let e = logs(&d, "web", false).err().unwrap();
        assert_eq!(e.kind, Kind::NotInstalled);
        assert_eq!(e.message, "web is not installed (berth install web)");
    }
}
