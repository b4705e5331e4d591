//! The network as the kernel tells it: rtnetlink dumps (the bytes; `berth_core::lan` reads
//! them), interface names and indexes, the clock tick netlink counts ages in, and the
//! interface a UDP socket's multicast leaves by. All of it in the calling thread's network
//! namespace.

use std::ffi::{CStr, CString};
use std::io;
use std::mem::size_of;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

fn setsockopt<T>(fd: i32, level: i32, name: i32, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a valid, initialised T for the length given.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends `request` to the kernel on a new NETLINK_ROUTE socket and hands each datagram of
/// the answer to `each` until it says the answer is complete (`Ok(true)`). A datagram that
/// takes more than a second fails the dump (`WouldBlock`).
pub fn dump(request: &[u8], mut each: impl FnMut(&[u8]) -> io::Result<bool>) -> io::Result<()> {
    // SAFETY: plain socket(2); the result is checked before use.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let second = libc::timeval {
        tv_sec: 1,
        tv_usec: 0,
    };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &second)?;
    // SAFETY: all-zero is a valid sockaddr_nl: port 0, the kernel.
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    let addr_len = size_of::<libc::sockaddr_nl>() as libc::socklen_t;
    // SAFETY: `request` and `kernel` are valid for the lengths given.
    let sent = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            request.as_ptr().cast(),
            request.len(),
            0,
            (&kernel as *const libc::sockaddr_nl).cast(),
            addr_len,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    // The kernel's dump datagrams stay below 32 KiB whatever the reader's buffer.
    let mut buf = vec![0u8; 32 << 10];
    loop {
        let mut from_len = addr_len;
        // SAFETY: `buf` and `kernel` are valid for the lengths given; MSG_TRUNC returns the
        // datagram's real length, so a cut one is seen.
        let n = unsafe {
            libc::recvfrom(
                sock.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_TRUNC,
                (&mut kernel as *mut libc::sockaddr_nl).cast(),
                &mut from_len,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let n = n as usize;
        if n > buf.len() {
            return Err(io::ErrorKind::InvalidData.into());
        }
        // only the kernel (port 0) answers a dump
        if kernel.nl_pid == 0 && each(&buf[..n])? {
            return Ok(());
        }
    }
}

/// The name of interface `index`.
pub fn ifname(index: u32) -> Option<String> {
    let mut b = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `b` has the IF_NAMESIZE bytes if_indextoname writes at most.
    let p = unsafe { libc::if_indextoname(index, b.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success `b` holds a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(b.as_ptr()) };
    Some(name.to_string_lossy().into_owned())
}

/// The index of interface `name`.
pub fn ifindex(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    // SAFETY: `c` is NUL-terminated.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

/// USER_HZ: the unit of the ages netlink reports (`jiffies_to_clock_t`), 100 on nearly
/// every architecture.
pub fn clock_ticks() -> u32 {
    // SAFETY: sysconf only reads a constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u32
    } else {
        100
    }
}

/// Sends the socket's IPv4 multicast out of interface `index` (IP_MULTICAST_IF).
pub fn set_multicast_if(sock: &UdpSocket, index: u32) -> io::Result<()> {
    let any = libc::in_addr { s_addr: 0 };
    let m = libc::ip_mreqn {
        imr_multiaddr: any,
        imr_address: any,
        imr_ifindex: index as libc::c_int,
    };
    setsockopt(
        sock.as_raw_fd(),
        libc::IPPROTO_IP,
        libc::IP_MULTICAST_IF,
        &m,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_neighbour_dump_ends_and_loopback_is_named() {
        // RTM_GETNEIGH, NLM_F_REQUEST | NLM_F_DUMP, seq 5, AF_UNSPEC
        let mut req = vec![28, 0, 0, 0];
        req.extend_from_slice(&30u16.to_ne_bytes());
        req.extend_from_slice(&0x301u16.to_ne_bytes());
        req.extend_from_slice(&5u32.to_ne_bytes());
        req.resize(28, 0);
        let mut datagrams = 0;
        dump(&req, |b| {
            datagrams += 1;
            // done once a datagram holds NLMSG_DONE (type 3) with our seq
            let mut rest = b;
            while rest.len() >= 16 {
                let len = u32::from_ne_bytes(rest[..4].try_into().unwrap()) as usize;
                let kind = u16::from_ne_bytes(rest[4..6].try_into().unwrap());
                if kind == 3 {
                    return Ok(true);
                }
                rest = &rest[((len + 3) & !3).min(rest.len())..];
            }
            Ok(false)
        })
        .unwrap();
        assert!(datagrams >= 1);
        let lo = ifindex("lo").unwrap();
        assert_eq!(ifname(lo).as_deref(), Some("lo"));
        assert_eq!(ifindex("no-such-if0"), None);
        assert!(clock_ticks() >= 100);
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        set_multicast_if(&s, lo).unwrap();
    }
}
