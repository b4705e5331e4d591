//! Small file-system helpers: atomic writes, directory fsync, free space, peer credentials.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::mount::cpath;

/// Writes `data` to `path` so that a power cut leaves either the old file or the new one:
/// a temporary file in the same directory is written, fsynced and renamed over `path`, then
/// the directory is fsynced. The file gets exactly `mode` (the umask does not apply). The
/// temporary file is removed on error.
pub fn write_atomic(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    replace(path, data, mode, true)
}

/// Writes `data` to `path` whole (a temporary file renamed over it, exactly `mode`), without
/// the fsyncs: for files on the run directory (tmpfs on a device), which never outlive a
/// power cut, so that only a crash in the middle of the write must not leave half a file.
/// On the start path the two fsyncs of each of its files cost about a millisecond where the
/// run directory sits on a disk (tests, benchmarks) and nothing on tmpfs.
pub fn write_volatile(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    replace(path, data, mode, false)
}

fn replace(path: &Path, data: &[u8], mode: u32, durable: bool) -> io::Result<()> {
    // usize, not u64: MIPS32 and ARMv5 have no 64-bit atomics.
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("no file name in {}", path.display()),
        )
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(
        ".tmp.{}.{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = dir.join(tmp_name);

    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_CLOEXEC)
            .open(&tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.write_all(data)?;
        if durable {
            sync(&f)?;
        }
        drop(f);
        std::fs::rename(&tmp, path)?;
        Ok(())
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if !durable {
        return Ok(());
    }
    // The rename is done: the new content is what every reader now sees. A failing directory
    // fsync only means it may not survive a power cut yet; reporting an error here would make
    // callers believe nothing changed.
    if let Err(e) = fsync_dir(&dir) {
        log::warn!(
            "{} written, but fsync of {} failed: {e}",
            path.display(),
            dir.display()
        );
    }
    Ok(())
}

/// fsyncs a directory, making renames and creations inside it durable.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    sync(&File::open(dir)?)
}

/// The fsyncs this process asked for through [`sync`] (flash wear: `berth stats`, metrics);
/// a usize: 32-bit MIPS has no 64-bit atomics.
static FSYNCS: AtomicUsize = AtomicUsize::new(0);

/// fsyncs a file or directory, counted in [`fsyncs`].
pub fn sync(f: &File) -> io::Result<()> {
    FSYNCS.fetch_add(1, Ordering::Relaxed);
    f.sync_all()
}

/// fsyncs an open descriptor (a directory of a tree being copied), counted in [`fsyncs`].
pub fn sync_fd(fd: std::os::fd::RawFd) -> io::Result<()> {
    FSYNCS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: fsync takes any descriptor; a bad one is EBADF, reported.
    if unsafe { libc::fsync(fd) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// How many fsyncs this process has asked for.
pub fn fsyncs() -> u64 {
    FSYNCS.load(Ordering::Relaxed) as u64
}

/// What this process has written: (bytes that reached the block layer, less those of files
/// truncated or deleted before writeback; write system calls), from /proc/self/io under
/// `proc_root`; None without the kernel's task I/O accounting (`CONFIG_TASK_IO_ACCOUNTING`).
pub fn own_writes(proc_root: &Path) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(proc_root.join("self/io")).ok()?;
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let cancelled = field("cancelled_write_bytes").unwrap_or(0);
    Some((
        field("write_bytes")?.saturating_sub(cancelled),
        field("syscw")?,
    ))
}

/// Whether an I/O error means the file system is full (ENOSPC or a quota, EDQUOT).
pub fn is_enospc(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// The (pid, uid) of the process at the other end of a UNIX stream socket, via SO_PEERCRED
/// (the credentials at connect() time).
pub fn peer_uid(stream: &UnixStream) -> io::Result<(i32, u32)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the fd is a valid socket owned by `stream`; `cred` and `len` are valid for writes
    // and `len` holds the size of `cred`.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((cred.pid, cred.uid))
}

/// Copies at most `limit` bytes from `r` to `w`; returns how many. A plain loop: std's
/// `io::copy` brings its copy_file_range/sendfile/splice paths into the binary.
pub fn copy_max(r: &mut dyn io::Read, w: &mut dyn Write, limit: u64) -> io::Result<u64> {
    let mut buf = [0u8; 8192];
    let mut done = 0u64;
    while done < limit {
        let want = buf.len().min((limit - done) as usize);
        let n = match r.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        w.write_all(&buf[..n])?;
        done += n as u64;
    }
    Ok(done)
}

/// Bytes available to unprivileged users on the file system holding `path` (statvfs f_bavail).
pub fn free_bytes(path: &Path) -> io::Result<u64> {
    let c = cpath(path).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and lives across the call; `st` is valid for writes.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Removes what [`write_atomic`] leaves in `dir` when the writer is killed between creating
/// its temporary file and renaming it (`.NAME.tmp.PID.N`); returns how many went.
pub fn remove_atomic_leftovers(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut n = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.contains(".tmp.") && std::fs::remove_file(e.path()).is_ok()
        {
            n += 1;
        }
    }
    n
}

/// The first directory on the way to `path` (from `/` down, `path` itself included) that
/// users other than its owner and group cannot search (no `o+x`), with its mode. A user
/// namespace's root is such a user on the host: LXC cannot reach a container's root or /data
/// below such a directory. Components that do not exist yet are not checked.
pub fn untraversable_ancestor(path: &Path) -> Option<(std::path::PathBuf, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut p = std::path::PathBuf::new();
    for c in path.components() {
        p.push(c);
        match std::fs::metadata(&p) {
            Ok(md) if md.is_dir() && md.permissions().mode() & 0o001 == 0 => {
                return Some((p, md.permissions().mode() & 0o7777))
            }
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

/// Fills `buf` from getrandom(2), falling back to /dev/urandom on kernels older than 3.17.
pub fn fill_random(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: the pointer and length describe `rest`, a live, writable slice that
        // getrandom fills with at most `rest.len()` bytes.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ENOSYS) => {
                    return std::io::Read::read_exact(
                        &mut std::fs::File::open("/dev/urandom")?,
                        rest,
                    )
                }
                _ => return Err(err),
            }
        }
        filled += n as usize;
    }
    Ok(())
}

/// Copies a file leaving holes where `src` reads as zeros (a sparse disk image stays
/// sparse: flash is not written for nothing), with its mode; fsynced.
pub fn copy_sparse(src: &Path, dst: &Path) -> io::Result<()> {
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::os::unix::fs::PermissionsExt;
    let mut from = std::fs::File::open(src)?;
    let meta = from.metadata()?;
    let mut to = std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(dst)?;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buf)?;
        if n == 0 {
            break;
        }
        if buf[..n].iter().all(|b| *b == 0) {
            to.seek(SeekFrom::Current(n as i64))?;
        } else {
            to.write_all(&buf[..n])?;
        }
    }
    to.set_len(meta.len())?;
    to.set_permissions(std::fs::Permissions::from_mode(
        meta.permissions().mode() & 0o7777,
    ))?;
    sync(&to)
}

#[cfg(test)]
mod tests {

    /// Every fsync through `sync`, `fsync_dir` and `write_atomic` is counted; the process's
    /// own writes are read from its /proc/self/io, and are absent without it.
    #[test]
    fn fsyncs_are_counted_and_own_writes_read() {
        let dir = std::env::temp_dir().join(format!("berth-sys-fsyncs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let n0 = fsyncs();
        write_atomic(&dir.join("f"), b"x", 0o600).unwrap();
        fsync_dir(&dir).unwrap();
        // the file, its directory, and the directory again (other tests may add more)
        assert!(fsyncs() >= n0 + 3, "{} {}", n0, fsyncs());
        let (bytes, calls) = own_writes(Path::new("/proc")).expect("task I/O accounting");
        assert!(calls > 0, "{bytes} {calls}");
        std::fs::create_dir_all(dir.join("proc/self")).unwrap();
        assert_eq!(own_writes(&dir.join("proc")), None);
        std::fs::write(dir.join("proc/self/io"), "syscw: 3\nwrite_bytes: 4096\n").unwrap();
        assert_eq!(own_writes(&dir.join("proc")), Some((4096, 3)));
        let io = "syscw: 3\nwrite_bytes: 12288\ncancelled_write_bytes: 4096\n";
        std::fs::write(dir.join("proc/self/io"), io).unwrap();
        assert_eq!(own_writes(&dir.join("proc")), Some((8192, 3)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn untraversable_ancestor_names_the_first_closed_directory() {
        use std::os::unix::fs::PermissionsExt;
        let d = super::super::mount::tests::TempDir::new("trav");
        let inner = d.path().join("a/b/c");
        std::fs::create_dir_all(&inner).unwrap();
        for p in [d.path().join("a"), d.path().join("a/b"), inner.clone()] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o711)).unwrap();
        }
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(super::untraversable_ancestor(&inner), None);
        std::fs::set_permissions(d.path().join("a/b"), std::fs::Permissions::from_mode(0o750))
            .unwrap();
        assert_eq!(
            super::untraversable_ancestor(&inner.join("not-yet")),
            Some((d.path().join("a/b"), 0o750))
        );
    }

    use super::*;
    use crate::mount::tests::TempDir;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn write_atomic_replaces_and_sets_mode() {
        let d = TempDir::new("atomic");
        let p = d.path().join("state.json");
        write_atomic(&p, b"one", 0o600).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        write_atomic(&p, b"two", 0o644).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o644);
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            vec![std::ffi::OsString::from("state.json")],
            "no tmp left"
        );
    }

    #[test]
    fn write_atomic_cleans_tmp_on_error() {
        let d = TempDir::new("atomic-err");
        // Renaming a file over a non-empty directory fails after the tmp file was written.
        let p = d.path().join("dir");
        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join("x"), "x").unwrap();
        assert!(write_atomic(&p, b"data", 0o600).is_err());
        assert_eq!(
            std::fs::read_dir(d.path()).unwrap().count(),
            1,
            "tmp removed"
        );
        assert!(write_atomic(&d.path().join("no/such/dir/f"), b"", 0o600).is_err());
    }

    #[test]
    fn enospc_detection() {
        assert!(is_enospc(&io::Error::from_raw_os_error(libc::ENOSPC)));
        assert!(is_enospc(&io::Error::from_raw_os_error(libc::EDQUOT)));
        assert!(!is_enospc(&io::Error::from_raw_os_error(libc::EIO)));
        assert!(!is_enospc(&io::Error::other("x")));
    }

    #[test]
    fn peer_credentials_of_socketpair() {
        let (a, _b) = UnixStream::pair().unwrap();
        let (pid, uid) = peer_uid(&a).unwrap();
        assert_eq!(pid as u32, std::process::id());
        // SAFETY: geteuid has no preconditions.
        assert_eq!(uid, unsafe { libc::geteuid() });
    }

    #[test]
    fn free_bytes_of_tmp() {
        let d = TempDir::new("free");
        assert!(free_bytes(d.path()).unwrap() > 0);
        assert!(free_bytes(&d.path().join("missing")).is_err());
    }
}
