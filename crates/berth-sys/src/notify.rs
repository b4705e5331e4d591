//! The service manager's readiness protocol (systemd's `sd_notify`, `Type=notify`): one
//! datagram of `KEY=value` lines to the socket named by `$NOTIFY_SOCKET` (a path, or an
//! abstract name written with a leading `@`). Without the variable nothing is sent. The
//! variable is taken out of the environment when first read, so that no child (a shim, a
//! container) inherits it and speaks for the daemon.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::sync::Mutex;

static SOCKET: Mutex<Option<Option<std::ffi::OsString>>> = Mutex::new(None);

/// Reads `$NOTIFY_SOCKET` once and removes it from the environment. Call while the process
/// has one thread (the environment is not safe to change with others running).
pub fn take_socket() {
    let mut s = SOCKET.lock().unwrap_or_else(|e| e.into_inner());
    if s.is_none() {
        let v = std::env::var_os("NOTIFY_SOCKET");
        std::env::remove_var("NOTIFY_SOCKET");
        *s = Some(v);
    }
}

/// Sends `state` (`READY=1`, `STOPPING=1`, `STATUS=…`; lines joined by `\n`) to the service
/// manager. `Ok(false)`: there is none to tell.
pub fn notify(state: &str) -> io::Result<bool> {
    take_socket();
    let addr = match SOCKET.lock().unwrap_or_else(|e| e.into_inner()).clone() {
        Some(Some(a)) => a,
        _ => return Ok(false),
    };
    let sock = UnixDatagram::unbound()?;
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(addr.as_os_str());
    match bytes.first() {
        Some(b'@') => {
            use std::os::linux::net::SocketAddrExt;
            let a = std::os::unix::net::SocketAddr::from_abstract_name(&bytes[1..])?;
            sock.send_to_addr(state.as_bytes(), &a)?;
        }
        Some(b'/') => {
            sock.send_to(state.as_bytes(), &addr)?;
        }
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("NOTIFY_SOCKET={addr:?}: neither a path nor an abstract name (@…)"),
            ))
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::linux::net::SocketAddrExt;

    #[test]
    fn a_path_socket_gets_the_message_and_children_do_not_inherit_it() {
        let dir = std::env::temp_dir().join(format!("berth-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).unwrap();
        std::env::set_var("NOTIFY_SOCKET", &path);
        *SOCKET.lock().unwrap() = None;
        assert!(notify("READY=1\nSTATUS=up").unwrap());
        assert!(std::env::var_os("NOTIFY_SOCKET").is_none());
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=up");
        // An abstract name.
        let name = format!("berth-notify-{}", std::process::id());
        let a = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let rx2 = UnixDatagram::bind_addr(&a).unwrap();
        *SOCKET.lock().unwrap() = Some(Some(format!("@{name}").into()));
        assert!(notify("STOPPING=1").unwrap());
        let n = rx2.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
        // Neither: an error naming it; none: nothing sent.
        *SOCKET.lock().unwrap() = Some(Some("relative".into()));
        let e = notify("READY=1").unwrap_err().to_string();
        assert!(e.contains("relative"), "{e}");
        *SOCKET.lock().unwrap() = Some(None);
        assert!(!notify("READY=1").unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
