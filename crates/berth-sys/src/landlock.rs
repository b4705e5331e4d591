//! Landlock scoping (Linux 6.12, Landlock ABI 6): a process that restricts itself with
//! `LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET` can no longer connect to abstract UNIX sockets made
//! by processes outside its Landlock domain. berth's LXC monitors do it before they start the
//! container, so a container that shares the host's network namespace (where every monitor's
//! abstract command socket lives) reaches none of them but its own.

use std::io;

/// The first Landlock ABI with scoping of abstract UNIX sockets (Linux 6.12).
pub const SCOPE_ABI: u32 = 6;

const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
const LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1;

/// `struct landlock_ruleset_attr` as of ABI 6.
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// The kernel's Landlock ABI version: None when Landlock is not built in or not enabled.
pub fn abi_version() -> Option<u32> {
    // SAFETY: with a NULL attribute, size 0 and the VERSION flag the call only returns the
    // ABI version (or an error); no memory is read or written.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    (v > 0).then_some(v as u32)
}

/// Whether this kernel can scope abstract UNIX sockets.
pub fn can_scope_abstract_sockets() -> bool {
    abi_version().is_some_and(|v| v >= SCOPE_ABI)
}

/// Restricts the calling thread (and everything it later forks or execs) to abstract UNIX
/// sockets created inside its new Landlock domain. Nothing else is restricted. Needs
/// CAP_SYS_ADMIN or no_new_privs; call it single-threaded (it applies to this thread only).
pub fn scope_abstract_sockets() -> io::Result<()> {
    let attr = RulesetAttr {
        handled_access_fs: 0,
        handled_access_net: 0,
        scoped: LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET,
    };
    // SAFETY: `attr` is a valid landlock_ruleset_attr of the size passed, alive for the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is the ruleset file descriptor just returned; no pointers are passed.
    let r = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd as libc::c_int, 0u32) };
    let err = io::Error::last_os_error();
    // SAFETY: `fd` is ours and closed exactly once.
    unsafe { libc::close(fd as libc::c_int) };
    if r < 0 {
        return Err(err);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};

    /// In a forked child (the restriction is process-wide and permanent): a socket made
    /// before the restriction cannot be reached after it, one made after it can.
    #[test]
    fn scoped_process_reaches_only_its_own_abstract_sockets() {
        if !can_scope_abstract_sockets() {
            crate::skip::record(
                "kernel landlock-scope",
                &format!(
                    "Landlock ABI {:?} has no abstract-socket scoping (needs ABI {SCOPE_ABI}, Linux 6.12)",
                    abi_version()
                ),
            );
            return;
        }
        let name = format!("berth-ll-test-{}", std::process::id());
        let outside = UnixListener::bind_addr(
            &SocketAddr::from_abstract_name(format!("{name}-outside").as_bytes()).unwrap(),
        )
        .unwrap();
        // SAFETY: the child only makes syscalls and exits with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = (|| {
                let before =
                    SocketAddr::from_abstract_name(format!("{name}-outside").as_bytes()).unwrap();
                if UnixStream::connect_addr(&before).is_err() {
                    return 10;
                }
                if scope_abstract_sockets().is_err() {
                    return 11;
                }
                match UnixStream::connect_addr(&before) {
                    Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
                    _ => return 12,
                }
                let inside_addr =
                    SocketAddr::from_abstract_name(format!("{name}-inside").as_bytes()).unwrap();
                let Ok(_l) = UnixListener::bind_addr(&inside_addr) else {
                    return 13;
                };
                if UnixStream::connect_addr(&inside_addr).is_err() {
                    return 14;
                }
                0
            })();
            // SAFETY: leaving the forked child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        drop(outside);
        assert!(libc::WIFEXITED(status), "child status {status}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "see the codes in the child");
    }
}
