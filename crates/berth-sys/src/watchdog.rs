//! The Linux watchdog device (`Documentation/watchdog/watchdog-api.rst`): any write keeps it
//! alive, a `V` written just before close disarms it (unless the driver is `nowayout`), and
//! WDIOC_SETTIMEOUT sets its timeout. The daemon's thread decides when; this only does it.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// `_IOWR('W', 6, int)`. The same number on every architecture berth builds for: where the
/// ioctl direction bits differ (MIPS, PowerPC: read 2, write 4, shifted by 29) they still
/// come to 0xC000_0000 for read+write.
const WDIOC_SETTIMEOUT: u32 = 0xC004_5706;

/// The byte of a keep-alive: anything but `V`, which would arm the magic close.
const KEEPALIVE: &[u8] = b"k";

/// Opens the device for writing. Never creates it: a missing device is an error to report,
/// not a file to make. Non-blocking, so that a FIFO nobody reads (the tests' stand-in) is an
/// error (ENXIO) rather than a thread blocked for ever; watchdog drivers ignore the flag.
pub fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
}

/// Whether `path` is a character device (a real watchdog), as opposed to a file or a FIFO.
pub fn is_char_device(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device())
}

/// Sets the device's timeout, in seconds; returns the timeout the driver chose (it may round).
pub fn set_timeout(f: &File, seconds: u32) -> io::Result<u32> {
    let mut t: libc::c_int = seconds.min(i32::MAX as u32) as libc::c_int;
    // SAFETY: the fd is open for as long as `f` lives; WDIOC_SETTIMEOUT reads and writes one
    // int through the pointer, and `t` is a valid, aligned int for the whole call. The request
    // type differs between C libraries (unsigned long on glibc, int on musl), hence `as _`.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), WDIOC_SETTIMEOUT as _, &mut t) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(t.max(0) as u32)
}

/// One keep-alive.
pub fn keepalive(f: &mut File) -> io::Result<()> {
    f.write_all(KEEPALIVE)
}

/// The magic close: `V`, then close. A driver without `nowayout` stops its timer; with it,
/// the device resets the machine after its timeout whatever we write.
pub fn magic_close(mut f: File) -> io::Result<()> {
    f.write_all(b"V")
    // Dropping `f` closes it.
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keepalives_and_the_magic_close_are_plain_writes() {
        let dir = std::env::temp_dir().join(format!("berth-wd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("wd");
        assert!(open(&path).is_err(), "a missing device is never created");
        std::fs::write(&path, b"").unwrap();
        let mut f = open(&path).unwrap();
        keepalive(&mut f).unwrap();
        keepalive(&mut f).unwrap();
        assert!(!is_char_device(&path));
        assert!(set_timeout(&f, 30).is_err(), "not a watchdog");
        magic_close(f).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"kkV");
        assert!(is_char_device(Path::new("/dev/null")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
