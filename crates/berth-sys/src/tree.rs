//! Trees that someone else controls: an image being imported, a vendor's package directory, a
//! container's /data (docs/security.md, "Untrusted trees"). Every path inside one is resolved
//! beneath the tree's top without following a symbolic link: with `openat2` and
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` where the kernel has it (Linux 5.6), else one
//! component at a time with `O_NOFOLLOW`. Entries are then acted on as (directory descriptor,
//! name) pairs, so a link swapped in after a check is not followed either. The walks (remove,
//! copy, size) keep their own stacks and two descriptors whatever the depth: they climb back
//! through `..` and check that it is the directory they came from.
//!
//! A refusal names the entry: "/evil is a symbolic link" ([`is_refusal`] tells it from an
//! I/O error).

use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

// 32-bit glibc's `stat` has 32-bit sizes and inode numbers: the 64-bit calls there.
#[cfg(not(all(target_env = "gnu", target_pointer_width = "32")))]
use libc::{fstat, fstatat, lseek, stat as RawStat};
#[cfg(all(target_env = "gnu", target_pointer_width = "32"))]
use libc::{fstat64 as fstat, fstatat64 as fstatat, lseek64 as lseek, stat64 as RawStat};

/// How deep a walked tree may nest and how many entries it may have (a container controls
/// its /data: neither may take the daemon down). Removal has no such cap: whatever a
/// container made can be purged.
pub const MAX_DEPTH: usize = 512;
pub const MAX_ENTRIES: usize = 1_000_000;

/// Why a path in a tree was not resolved or acted on. Carried inside an `io::Error`.
#[derive(Debug)]
pub struct Refusal(String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

fn refuse(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, Refusal(msg))
}

/// Whether `e` is a refusal of this module (a link, a non-directory on the way, a path that
/// leaves the tree, a cap), not an error of the file system.
pub fn is_refusal(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<Refusal>())
}

/// A path shown in messages: from the tree's top, control characters escaped (names come
/// from whoever made the tree).
pub fn shown(rel: &Path) -> String {
    let mut s = String::from("/");
    for c in String::from_utf8_lossy(rel.as_os_str().as_bytes()).chars() {
        if c.is_control() {
            s.extend(c.escape_default());
        } else {
            s.push(c);
        }
    }
    s
}

fn cvt(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// A single name in a directory: no `/`, not empty, not `.` or `..`.
fn entry_name(name: &OsStr) -> io::Result<CString> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        return Err(refuse(format!(
            "{:?} is not a name inside a directory",
            name
        )));
    }
    CString::new(b).map_err(|_| refuse(format!("{name:?} holds a NUL byte")))
}

/// The components of a path inside a tree: relative, no `..`; `.` and a leading `/` dropped.
pub fn components(rel: &Path) -> io::Result<Vec<CString>> {
    let mut out = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push(entry_name(n)?),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(refuse(format!("{}: leaves the tree (..)", rel.display())))
            }
        }
    }
    Ok(out)
}

/// What an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    /// A device node, fifo or socket.
    Special,
}

/// An entry's `lstat`, in fixed types.
#[derive(Clone, Copy, Debug)]
pub struct Stat {
    pub kind: Kind,
    /// Permission bits with setuid, setgid and sticky (`& 0o7777`).
    pub mode: u32,
    /// The type bits (`& S_IFMT`): which kind of special file.
    pub fmt: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Bytes the file takes on disk (`st_blocks * 512`).
    pub used: u64,
    pub dev: u64,
    pub ino: u64,
    pub nlink: u64,
    pub mtime: i64,
}

// The C types of these fields differ between architectures (MIPS o32's `st_dev`).
#[allow(clippy::unnecessary_cast)]
fn to_stat(st: &RawStat) -> Stat {
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFREG => Kind::File,
        libc::S_IFLNK => Kind::Symlink,
        _ => Kind::Special,
    };
    Stat {
        kind,
        mode: (st.st_mode & 0o7777) as u32,
        fmt: (st.st_mode & libc::S_IFMT) as u32,
        uid: st.st_uid as u32,
        gid: st.st_gid as u32,
        size: st.st_size as u64,
        used: (st.st_blocks as u64).saturating_mul(512),
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
        nlink: st.st_nlink as u64,
        mtime: st.st_mtime as i64,
    }
}

fn fstat_fd(fd: RawFd) -> io::Result<Stat> {
    // SAFETY: an all-zero stat is a valid value for the kernel to overwrite.
    let mut st: RawStat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open for the call and `st` a valid out pointer.
    cvt(unsafe { fstat(fd, &mut st) } as libc::c_long)?;
    Ok(to_stat(&st))
}

/// The flags every open here adds: never a link, not inherited; and, but with `O_PATH`
/// (which `openat2` takes with no flag but these), never a controlling terminal and large
/// files.
fn with_ours(flags: libc::c_int) -> libc::c_int {
    let more = match flags & libc::O_PATH {
        0 => libc::O_NOCTTY | libc::O_LARGEFILE,
        _ => 0,
    };
    flags | libc::O_CLOEXEC | libc::O_NOFOLLOW | more
}

fn open_at(dir: RawFd, name: &CStr, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    let flags = with_ours(flags);
    // SAFETY: `name` is NUL-terminated and outlives the call; the fd returned is new and
    // owned by nobody else.
    let fd = cvt(
        unsafe { libc::openat(dir, name.as_ptr(), flags, mode as libc::c_uint) } as libc::c_long,
    )?;
    // SAFETY: see above.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Whether `openat2` is there: 0 not tried yet, 1 yes, 2 no (ENOSYS before Linux 5.6, or a
/// seccomp filter that refuses it).
static OPENAT2: AtomicU8 = AtomicU8::new(0);

/// Whether this kernel resolves with `openat2` (`berth check`); false once it has refused.
pub fn openat2_works() -> bool {
    if OPENAT2.load(Ordering::Relaxed) == 0 {
        let _ = openat2(libc::AT_FDCWD, c".", libc::O_RDONLY | libc::O_DIRECTORY);
    }
    OPENAT2.load(Ordering::Relaxed) == 1
}

/// `openat2(dir, rel, flags, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`; None when the kernel
/// does not have it (remembered).
fn openat2(dir: RawFd, rel: &CStr, flags: libc::c_int) -> Option<io::Result<OwnedFd>> {
    if OPENAT2.load(Ordering::Relaxed) == 2 {
        return None;
    }
    // SAFETY: an all-zero open_how is valid (no mode, no resolve flags) before it is filled.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = with_ours(flags) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: `rel` is NUL-terminated and `how` is a valid open_how of the size passed; both
    // outlive the call. The fd returned is new.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            rel.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    match cvt(rc) {
        Ok(fd) => {
            OPENAT2.store(1, Ordering::Relaxed);
            // SAFETY: see above.
            Some(Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }))
        }
        // Not this kernel's call (or a seccomp filter's answer for one it does not know).
        Err(e) if matches!(errno(&e), libc::ENOSYS | libc::E2BIG) => {
            OPENAT2.store(2, Ordering::Relaxed);
            None
        }
        // A filter's refusal, or an LSM's of this one path: the walk, this time.
        Err(e) if errno(&e) == libc::EPERM => None,
        Err(e) => Some(Err(e)),
    }
}

/// A directory of a tree, held open: the tree's top or a directory found beneath it.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

impl AsRawFd for Dir {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Dir {
    /// Opens a tree's top: `path` is berth's own up to its last component, which must be a
    /// directory, not a link to one.
    pub fn open(path: &Path) -> io::Result<Dir> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| refuse(format!("{}: holds a NUL byte", path.display())))?;
        let fd =
            open_at(libc::AT_FDCWD, &c, libc::O_RDONLY | libc::O_DIRECTORY, 0).map_err(|e| {
                match errno(&e) {
                    libc::ELOOP | libc::ENOTDIR => refuse(format!(
                        "{} is not a directory (a symbolic link is not followed)",
                        path.display()
                    )),
                    _ => io::Error::new(e.kind(), format!("{}: {e}", path.display())),
                }
            })?;
        Ok(Dir { fd })
    }

    /// Opens a directory a person named (a command's argument): links in `path` are
    /// followed as they would be for any command; what is beneath it is the untrusted tree.
    pub fn open_given(path: &Path) -> io::Result<Dir> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| refuse(format!("{}: holds a NUL byte", path.display())))?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
        // SAFETY: `c` is NUL-terminated and outlives the call; the fd returned is new.
        let fd = cvt(unsafe { libc::open(c.as_ptr(), flags) } as libc::c_long)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        // SAFETY: see above.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        Ok(Dir { fd })
    }

    /// The directory's own `stat`.
    pub fn stat_self(&self) -> io::Result<Stat> {
        fstat_fd(self.as_raw_fd())
    }

    fn id(&self) -> io::Result<(u64, u64)> {
        self.stat_self().map(|s| (s.dev, s.ino))
    }

    /// Opens `rel` beneath this directory (`flags`: the last component's), never following a
    /// link: `openat2` where the kernel has it (`fast`), else a walk with `O_NOFOLLOW`. A
    /// link or a non-directory on the way is refused by name.
    fn open_beneath(&self, rel: &Path, flags: libc::c_int, fast: bool) -> io::Result<OwnedFd> {
        let comps = components(rel)?;
        if comps.is_empty() {
            return open_at(self.as_raw_fd(), c".", flags | libc::O_DIRECTORY, 0);
        }
        if fast {
            let joined = comps
                .iter()
                .map(|c| c.as_bytes())
                .collect::<Vec<_>>()
                .join(&b'/');
            // No NUL: each component was checked.
            let joined = CString::new(joined).map_err(io::Error::other)?;
            match openat2(self.as_raw_fd(), &joined, flags) {
                Some(Ok(fd)) => return Ok(fd),
                // A link or a non-directory on the way (the walk names it), a path longer
                // than PATH_MAX, a rename during the resolution: the walk decides.
                Some(Err(e))
                    if !matches!(
                        errno(&e),
                        libc::ELOOP
                            | libc::EXDEV
                            | libc::ENOTDIR
                            | libc::ENAMETOOLONG
                            | libc::EAGAIN
                    ) =>
                {
                    return Err(e)
                }
                _ => {}
            }
        }
        let mut held: Option<OwnedFd> = None;
        let mut seen = PathBuf::new();
        let last = comps.len() - 1;
        for (i, c) in comps.iter().enumerate() {
            seen.push(OsStr::from_bytes(c.as_bytes()));
            let at = held.as_ref().map_or(self.as_raw_fd(), |f| f.as_raw_fd());
            let f = if i == last {
                flags
            } else {
                libc::O_PATH | libc::O_DIRECTORY
            };
            match open_at(at, c, f, 0) {
                Ok(fd) => held = Some(fd),
                Err(e) if matches!(errno(&e), libc::ELOOP | libc::ENOTDIR) => {
                    return Err(self.why_not(at, c, &seen, e));
                }
                Err(e) => return Err(e),
            }
        }
        held.ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
    }

    /// The refusal for `name` in `at` that an open with `O_NOFOLLOW` (and `O_DIRECTORY`)
    /// refused: a link, or something else than a directory.
    fn why_not(&self, at: RawFd, name: &CStr, seen: &Path, e: io::Error) -> io::Error {
        match stat_at(at, name) {
            Ok(Some(s)) if s.kind == Kind::Symlink => refuse(format!(
                "{} is a symbolic link, which is not followed here",
                shown(seen)
            )),
            Ok(Some(s)) if s.kind != Kind::Dir => {
                refuse(format!("{} is not a directory", shown(seen)))
            }
            _ => e,
        }
    }

    /// The directory at `rel` beneath this one (`.` or empty: itself).
    pub fn open_dir(&self, rel: &Path) -> io::Result<Dir> {
        let fd = self.open_beneath(rel, libc::O_RDONLY | libc::O_DIRECTORY, true)?;
        Ok(Dir { fd })
    }

    /// The regular file at `rel` beneath this one, for reading (a fifo put there is opened
    /// without blocking, then refused).
    pub fn open_file(&self, rel: &Path) -> io::Result<File> {
        // Looked at first: a device node is never opened (a tty's or a tape's open acts).
        if let Some(st) = self.stat_beneath(rel)? {
            if st.kind != Kind::File {
                return Err(refuse(format!("{} is not a regular file", shown(rel))));
            }
        }
        let fd = self.open_beneath(rel, libc::O_RDONLY | libc::O_NONBLOCK, true)?;
        regular(fd, rel)
    }

    /// The directory at `rel`, made (mode `mode`, then the caller's to adjust) where missing;
    /// `made` hears each directory it made, by its path from this one.
    pub fn make_dirs(&self, rel: &Path, mode: u32, made: &mut dyn FnMut(&Path)) -> io::Result<Dir> {
        if let Ok(d) = self.open_dir(rel) {
            return Ok(d);
        }
        let mut cur: Option<Dir> = None;
        let mut seen = PathBuf::new();
        for c in components(rel)? {
            seen.push(OsStr::from_bytes(c.as_bytes()));
            let at = cur.as_ref().unwrap_or(self);
            let next = match at.sub(&c) {
                Ok(d) => d,
                Err(e) if errno(&e) == libc::ENOENT => {
                    at.mkdir_c(&c, mode)?;
                    made(&seen);
                    at.sub(&c)?
                }
                Err(e) if matches!(errno(&e), libc::ELOOP | libc::ENOTDIR) => {
                    return Err(at.why_not(at.as_raw_fd(), &c, &seen, e))
                }
                Err(e) => return Err(e),
            };
            cur = Some(next);
        }
        match cur {
            Some(d) => Ok(d),
            None => self.open_dir(Path::new(".")),
        }
    }

    /// The subdirectory `name`, not through a link (ELOOP or ENOTDIR otherwise).
    fn sub(&self, name: &CStr) -> io::Result<Dir> {
        let fd = open_at(
            self.as_raw_fd(),
            name,
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        )?;
        Ok(Dir { fd })
    }

    /// The subdirectory `name` (ELOOP or ENOTDIR when it is a link or not a directory).
    pub fn subdir(&self, name: &OsStr) -> io::Result<Dir> {
        self.sub(&entry_name(name)?)
    }

    fn mkdir_c(&self, name: &CStr, mode: u32) -> io::Result<()> {
        // SAFETY: `name` is NUL-terminated and outlives the call.
        cvt(
            unsafe { libc::mkdirat(self.as_raw_fd(), name.as_ptr(), mode as libc::mode_t) }
                as libc::c_long,
        )
        .map(drop)
    }

    /// Makes the directory `name` (mode `mode`, less the umask).
    pub fn mkdir(&self, name: &OsStr, mode: u32) -> io::Result<()> {
        self.mkdir_c(&entry_name(name)?, mode)
    }

    /// `lstat` of `name` in this directory; None when there is none.
    pub fn stat(&self, name: &OsStr) -> io::Result<Option<Stat>> {
        stat_at(self.as_raw_fd(), &entry_name(name)?)
    }

    /// `lstat` of `rel` beneath this directory (its parents resolved without links); None
    /// when it or a parent is missing.
    pub fn stat_beneath(&self, rel: &Path) -> io::Result<Option<Stat>> {
        let (parent, name) = split(rel)?;
        match self.open_dir(&parent) {
            Ok(d) => d.stat(&name),
            Err(e) if errno(&e) == libc::ENOENT => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Makes the regular file `name` (which must not exist) for writing, mode `mode` exactly.
    pub fn create_file(&self, name: &OsStr, mode: u32) -> io::Result<File> {
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        let f = File::from(open_at(self.as_raw_fd(), &entry_name(name)?, flags, 0o600)?);
        // SAFETY: `f` is open; fchmod sets exactly `mode` whatever the umask.
        cvt(unsafe { libc::fchmod(f.as_raw_fd(), mode as libc::mode_t) } as libc::c_long)?;
        Ok(f)
    }

    /// Opens the regular file `name` in this directory for reading, not through a link.
    pub fn open_entry(&self, name: &OsStr) -> io::Result<File> {
        let n = entry_name(name)?;
        // Looked at first: a device node is never opened (a tty's or a tape's open acts).
        match stat_at(self.as_raw_fd(), &n)? {
            Some(st) if st.kind == Kind::File => {}
            Some(_) => {
                return Err(refuse(format!(
                    "{} is not a regular file",
                    shown(Path::new(name))
                )))
            }
            None => return Err(io::Error::from_raw_os_error(libc::ENOENT)),
        }
        let fd = open_at(self.as_raw_fd(), &n, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
        regular(fd, Path::new(name))
    }

    /// Makes the symbolic link `name` → `target` (the target is stored, never followed).
    pub fn symlink(&self, target: &Path, name: &OsStr) -> io::Result<()> {
        let t = CString::new(target.as_os_str().as_bytes())
            .map_err(|_| refuse(format!("link target {} holds a NUL byte", target.display())))?;
        let n = entry_name(name)?;
        // SAFETY: both strings are NUL-terminated and outlive the call.
        cvt(unsafe { libc::symlinkat(t.as_ptr(), self.as_raw_fd(), n.as_ptr()) } as libc::c_long)
            .map(drop)
    }

    /// The target of the link `name`.
    pub fn read_link(&self, name: &OsStr) -> io::Result<PathBuf> {
        let n = entry_name(name)?;
        let mut buf = vec![0u8; 4096];
        // SAFETY: `n` is NUL-terminated; the buffer is valid for its length.
        let len = cvt(unsafe {
            libc::readlinkat(
                self.as_raw_fd(),
                n.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        } as libc::c_long)? as usize;
        buf.truncate(len);
        Ok(PathBuf::from(OsStr::from_bytes(&buf)))
    }

    /// A hard link `to_name` in `to` of the entry `name` here (a link is linked as itself,
    /// never followed).
    pub fn hard_link(&self, name: &OsStr, to: &Dir, to_name: &OsStr) -> io::Result<()> {
        let (a, b) = (entry_name(name)?, entry_name(to_name)?);
        // SAFETY: both names are NUL-terminated and outlive the call; flags 0: no following.
        cvt(
            unsafe { libc::linkat(self.as_raw_fd(), a.as_ptr(), to.as_raw_fd(), b.as_ptr(), 0) }
                as libc::c_long,
        )
        .map(drop)
    }

    /// Renames the entry `name` here to `to_name` in `to` (replacing a file or empty
    /// directory there, as rename(2) does).
    pub fn rename(&self, name: &OsStr, to: &Dir, to_name: &OsStr) -> io::Result<()> {
        let (a, b) = (entry_name(name)?, entry_name(to_name)?);
        // SAFETY: both names are NUL-terminated and outlive the call.
        cvt(
            unsafe { libc::renameat(self.as_raw_fd(), a.as_ptr(), to.as_raw_fd(), b.as_ptr()) }
                as libc::c_long,
        )
        .map(drop)
    }

    fn unlink_c(&self, name: &CStr, flags: libc::c_int) -> io::Result<()> {
        // SAFETY: `name` is NUL-terminated and outlives the call.
        cvt(unsafe { libc::unlinkat(self.as_raw_fd(), name.as_ptr(), flags) } as libc::c_long)
            .map(drop)
    }

    /// Sets the owner of `name`, a link's own (`AT_SYMLINK_NOFOLLOW`).
    pub fn chown(&self, name: &OsStr, uid: u32, gid: u32) -> io::Result<()> {
        let n = entry_name(name)?;
        // SAFETY: `n` is NUL-terminated and outlives the call.
        cvt(unsafe {
            libc::fchownat(
                self.as_raw_fd(),
                n.as_ptr(),
                uid,
                gid,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        } as libc::c_long)
        .map(drop)
    }

    /// Sets the modification (and access) time of `name`, a link's own.
    pub fn set_mtime(&self, name: &OsStr, secs: i64) -> io::Result<()> {
        let n = entry_name(name)?;
        let t = libc::timespec {
            tv_sec: secs as libc::time_t,
            tv_nsec: 0,
        };
        let times = [t, t];
        // SAFETY: `n` is NUL-terminated, `times` two valid timespecs; both outlive the call.
        cvt(unsafe {
            libc::utimensat(
                self.as_raw_fd(),
                n.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        } as libc::c_long)
        .map(drop)
    }

    /// Sets this directory's own mode, owner (when given) and time (when given).
    pub fn set_attrs(
        &self,
        mode: u32,
        owner: Option<(u32, u32)>,
        mtime: Option<i64>,
    ) -> io::Result<()> {
        set_fd_attrs(self.as_raw_fd(), mode, owner, mtime)
    }

    /// The names in this directory (not `.` and `..`), with what each is where the file
    /// system says so in the listing (`None`: ask with [`Dir::stat`]).
    pub fn entries(&self) -> io::Result<Entries> {
        self.entries_from(0)
    }

    /// The listing from `cookie` on: the place after an entry, as [`Entries::cookie`] gave
    /// it (0: the start).
    fn entries_from(&self, cookie: i64) -> io::Result<Entries> {
        // A descriptor of its own: the listing's offset is not shared with `self`.
        let fd = open_at(
            self.as_raw_fd(),
            c".",
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        )?;
        if cookie != 0 {
            // SAFETY: an open directory descriptor; the offset is one its listing gave.
            cvt(unsafe { lseek(fd.as_raw_fd(), cookie as _, libc::SEEK_SET) } as libc::c_long)?;
        }
        Ok(Entries {
            fd,
            buf: vec![0u8; 4096],
            pos: 0,
            len: 0,
            cookie,
        })
    }

    /// The names in this directory, all at once (a directory the caller keeps small).
    pub fn names(&self) -> io::Result<Vec<std::ffi::OsString>> {
        self.entries()?.map(|r| r.map(|(n, _)| n)).collect()
    }

    /// Removes `name` and all below it, never following a link and never leaving the tree:
    /// any depth, two descriptors, the way back up checked to be the way down. A missing
    /// `name` is no error. A directory that something else fills while it is removed is
    /// emptied again, a few times, then the error is returned.
    pub fn remove_all(&self, name: &OsStr) -> io::Result<()> {
        let first = entry_name(name)?;
        let mut cur = match self.sub(&first) {
            Ok(d) => d,
            Err(e) if errno(&e) == libc::ENOENT => return Ok(()),
            Err(e) if matches!(errno(&e), libc::ELOOP | libc::ENOTDIR) => {
                return ignore_missing(self.unlink_c(&first, 0))
            }
            Err(e) => return Err(e),
        };
        // (name in its parent, the parent's id) from `self` down to `cur`.
        let mut path: Vec<(CString, (u64, u64))> = vec![(first, self.id()?)];
        let mut refills = 0;
        loop {
            let mut deeper = None;
            let mut list = cur.entries()?;
            while let Some((n, kind)) = list.next_entry()? {
                let is_dir = match kind {
                    Some(k) => k == Kind::Dir,
                    None => stat_at(cur.as_raw_fd(), &n)?.is_some_and(|s| s.kind == Kind::Dir),
                };
                if is_dir {
                    deeper = Some(n);
                    break;
                }
                ignore_missing(cur.unlink_c(&n, 0))?;
            }
            drop(list);
            if let Some(n) = deeper {
                match cur.sub(&n) {
                    Ok(d) => {
                        path.push((n, cur.id()?));
                        cur = d;
                    }
                    // Swapped for something else since it was listed.
                    Err(e) if matches!(errno(&e), libc::ELOOP | libc::ENOTDIR) => {
                        ignore_missing(cur.unlink_c(&n, 0))?
                    }
                    Err(e) if errno(&e) == libc::ENOENT => {}
                    Err(e) => return Err(e),
                }
                continue;
            }
            let (n, parent_id) = path.pop().expect("the path holds the directory being left");
            let up = if path.is_empty() {
                None
            } else {
                Some(cur.up(parent_id)?)
            };
            let parent = up.as_ref().unwrap_or(self);
            match parent.unlink_c(&n, libc::AT_REMOVEDIR) {
                Ok(()) => {}
                Err(e) if errno(&e) == libc::ENOENT => {}
                Err(e) if errno(&e) == libc::ENOTEMPTY && refills < 8 => {
                    // Filled again while it was emptied: once more.
                    refills += 1;
                    path.push((n, parent_id));
                    continue;
                }
                Err(e) => return Err(e),
            }
            match up {
                Some(u) => cur = u,
                None => return Ok(()),
            }
        }
    }

    /// The parent (`..`), checked to be the directory whose id is `want`: a tree that
    /// changed under a walk stops it rather than send it elsewhere.
    fn up(&self, want: (u64, u64)) -> io::Result<Dir> {
        let d = self.sub(c"..")?;
        if d.id()? != want {
            return Err(refuse(
                "the tree changed while it was walked (a directory was moved)".into(),
            ));
        }
        Ok(d)
    }
}

fn ignore_missing(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if errno(&e) == libc::ENOENT => Ok(()),
        r => r,
    }
}

fn stat_at(dir: RawFd, name: &CStr) -> io::Result<Option<Stat>> {
    // SAFETY: an all-zero stat is a valid value for the kernel to overwrite.
    let mut st: RawStat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated, `st` a valid out pointer; both outlive the call.
    let rc = unsafe { fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    match cvt(rc as libc::c_long) {
        Ok(_) => Ok(Some(to_stat(&st))),
        Err(e) if errno(&e) == libc::ENOENT => Ok(None),
        Err(e) => Err(e),
    }
}

/// An opened entry, kept only if it is a regular file.
fn regular(fd: OwnedFd, rel: &Path) -> io::Result<File> {
    let st = fstat_fd(fd.as_raw_fd())?;
    if st.kind != Kind::File {
        return Err(refuse(format!("{} is not a regular file", shown(rel))));
    }
    // Reads of a regular file never block: the flag does not matter any more.
    Ok(File::from(fd))
}

fn set_fd_attrs(
    fd: RawFd,
    mode: u32,
    owner: Option<(u32, u32)>,
    mtime: Option<i64>,
) -> io::Result<()> {
    if let Some((uid, gid)) = owner {
        // SAFETY: `fd` is open for the call.
        cvt(unsafe { libc::fchown(fd, uid, gid) } as libc::c_long)?;
    }
    // After the owner: chown clears setuid and setgid.
    // SAFETY: `fd` is open for the call.
    cvt(unsafe { libc::fchmod(fd, mode as libc::mode_t) } as libc::c_long)?;
    if let Some(secs) = mtime {
        let t = libc::timespec {
            tv_sec: secs as libc::time_t,
            tv_nsec: 0,
        };
        let times = [t, t];
        // SAFETY: `fd` is open, `times` two valid timespecs.
        cvt(unsafe { libc::futimens(fd, times.as_ptr()) } as libc::c_long)?;
    }
    Ok(())
}

/// Sets an open file's mode, owner (when given) and time (when given).
pub fn set_file_attrs(
    f: &File,
    mode: u32,
    owner: Option<(u32, u32)>,
    mtime: Option<i64>,
) -> io::Result<()> {
    set_fd_attrs(f.as_raw_fd(), mode, owner, mtime)
}

/// `rel` as (its parent, its last name); refused when it has no name.
pub fn split(rel: &Path) -> io::Result<(PathBuf, std::ffi::OsString)> {
    let comps = components(rel)?;
    let Some((last, parents)) = comps.split_last() else {
        return Err(refuse(format!("{}: no name", shown(rel))));
    };
    let parent: PathBuf = parents
        .iter()
        .map(|c| OsStr::from_bytes(c.as_bytes()))
        .collect();
    Ok((parent, OsStr::from_bytes(last.as_bytes()).to_os_string()))
}

/// A directory's listing, read with `getdents64` a buffer at a time (a huge directory costs
/// no more memory than a small one).
pub struct Entries {
    fd: OwnedFd,
    buf: Vec<u8>,
    pos: usize,
    len: usize,
    /// Where the listing goes on after the entry last returned.
    cookie: i64,
}

impl Entries {
    /// The next name and, where the listing says, its kind.
    pub fn next_entry(&mut self) -> io::Result<Option<(CString, Option<Kind>)>> {
        loop {
            if self.pos >= self.len {
                // SAFETY: the buffer is valid for its length; the fd is an open directory.
                let n = cvt(unsafe {
                    libc::syscall(
                        libc::SYS_getdents64,
                        self.fd.as_raw_fd(),
                        self.buf.as_mut_ptr(),
                        self.buf.len(),
                    )
                })? as usize;
                if n == 0 {
                    return Ok(None);
                }
                (self.pos, self.len) = (0, n);
            }
            // struct linux_dirent64 { u64 ino; i64 off; u16 reclen; u8 type; char name[]; }
            let rec = &self.buf[self.pos..self.len];
            if rec.len() < 20 {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            let reclen = u16::from_ne_bytes([rec[16], rec[17]]) as usize;
            let off = i64::from_ne_bytes(rec[8..16].try_into().expect("8 bytes"));
            if reclen < 20 || reclen > rec.len() {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            let kind = match rec[18] {
                libc::DT_DIR => Some(Kind::Dir),
                libc::DT_REG => Some(Kind::File),
                libc::DT_LNK => Some(Kind::Symlink),
                libc::DT_UNKNOWN => None,
                _ => Some(Kind::Special),
            };
            let name = &rec[19..reclen];
            let name = &name[..name.iter().position(|b| *b == 0).unwrap_or(name.len())];
            self.pos += reclen;
            self.cookie = off;
            if name == b"." || name == b".." || name.is_empty() {
                continue;
            }
            let name = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EIO))?;
            return Ok(Some((name, kind)));
        }
    }
}

impl Entries {
    /// Where a listing of the same directory goes on after the entry last returned.
    fn cookie(&self) -> i64 {
        self.cookie
    }
}

impl Iterator for Entries {
    type Item = io::Result<(std::ffi::OsString, Option<Kind>)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_entry()
            .map(|o| o.map(|(n, k)| (OsStr::from_bytes(n.as_bytes()).to_os_string(), k)))
            .transpose()
    }
}

/// A walk's place: the directory it is in, and the ids of those above it (to check the way
/// back up).
struct Cursor {
    dir: Dir,
    above: Vec<(u64, u64)>,
}

impl Cursor {
    fn as_raw_fd_of_dir(&self) -> RawFd {
        self.dir.as_raw_fd()
    }

    fn new(dir: Dir) -> Cursor {
        Cursor {
            dir,
            above: Vec::new(),
        }
    }

    fn down(&mut self, name: &CStr) -> io::Result<()> {
        let d = self.dir.sub(name)?;
        self.above.push(self.dir.id()?);
        self.dir = d;
        Ok(())
    }

    fn up(&mut self) -> io::Result<()> {
        let want = self
            .above
            .pop()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        self.dir = self.dir.up(want)?;
        Ok(())
    }
}

fn too_big(what: &str) -> io::Error {
    refuse(format!(
        "the tree is too {what} (over {MAX_DEPTH} levels or {MAX_ENTRIES} entries)"
    ))
}

/// Bytes a copy of the regular files below `top` takes, as [`copy_tree`] counts them: each
/// file in whole 4 KiB blocks, at least one (empty files, and small ones a file system keeps
/// in the inode, take one in the copy), of what it holds: a sparse file counts its blocks,
/// not its holes; a file linked under several names counts once; links not followed. Within
/// the caps; None past them, or when the tree changed under the walk.
pub fn tree_size(top: &Dir) -> Option<u64> {
    let mut total = 0u64;
    // The copy's own map (one kind of map in the binary, not two); the paths stay empty.
    let mut linked: std::collections::HashMap<(u64, u64), PathBuf> = Default::default();
    for_each(top, &mut |v| {
        let s = v.stat;
        let mut first = || linked.insert((s.dev, s.ino), PathBuf::new()).is_none();
        if s.kind == Kind::File && (s.nlink < 2 || first()) {
            let held = s.size.min(s.used.max(1));
            total = total.saturating_add(held.div_ceil(4096).max(1) * 4096);
        }
        Ok(())
    })
    .ok()?;
    Some(total)
}

/// An entry a walk visits.
pub struct Visited<'a> {
    /// Its directory, held open.
    pub dir: &'a Dir,
    /// Its directory's path from the tree's top (empty at the top).
    pub parent: &'a Path,
    pub name: &'a OsStr,
    pub stat: &'a Stat,
    /// The destination's directory of a copy.
    dst: Option<&'a Dir>,
}

impl Visited<'_> {
    /// Its path from the tree's top.
    pub fn path(&self) -> PathBuf {
        self.parent.join(self.name)
    }
}

/// What a walk does with each entry.
type Visit<'a> = dyn FnMut(&Visited) -> io::Result<()> + 'a;

/// Visits every entry below `top`, never through a link (depth first, a directory before
/// what it holds; within a directory in the order the file system lists it). Caps:
/// [`MAX_DEPTH`], [`MAX_ENTRIES`]; a tree that changes under the walk stops it.
pub fn for_each(top: &Dir, visit: &mut Visit<'_>) -> io::Result<()> {
    walk(top, None, visit)
}

/// [`for_each`], with `dst` walked in step when given (a copy): a directory that `visit`
/// made in `dst` is gone into there too, and gets its source's mode, owner and time once
/// filled. Depth first: a directory is gone into as soon as it is met, and its parent's
/// listing goes on afterwards from where it stood (the listing's own cookie), so the walk
/// holds one listing and, per level, a number: a directory of a million entries costs it
/// no more memory than one of ten.
fn walk(top: &Dir, dst: Option<&Dir>, visit: &mut Visit<'_>) -> io::Result<()> {
    let mut src = Cursor::new(top.open_dir(Path::new("."))?);
    let mut out = match dst {
        Some(d) => Some(Cursor::new(d.open_dir(Path::new("."))?)),
        None => None,
    };
    let mut rel = PathBuf::new();
    // Per level above: where its listing goes on.
    let mut cookies: Vec<i64> = Vec::new();
    let mut list = src.dir.entries()?;
    let mut seen = 0usize;
    loop {
        let Some((n, _)) = list.next_entry()? else {
            if let Some(o) = out.as_ref() {
                // A directory's own mode last: a read-only one must be filled first.
                let s = src.dir.stat_self()?;
                o.dir
                    .set_attrs(s.mode, Some((s.uid, s.gid)), Some(s.mtime))?;
                let _ = crate::fsutil::sync_fd(o.dir.as_raw_fd());
            }
            let Some(cookie) = cookies.pop() else {
                return Ok(());
            };
            src.up()?;
            if let Some(o) = out.as_mut() {
                o.up()?;
            }
            rel.pop();
            list = src.dir.entries_from(cookie)?;
            continue;
        };
        seen += 1;
        if seen > MAX_ENTRIES {
            return Err(too_big("large"));
        }
        let Some(stat) = stat_at(src.as_raw_fd_of_dir(), &n)? else {
            continue;
        };
        visit(&Visited {
            dir: &src.dir,
            parent: &rel,
            name: OsStr::from_bytes(n.as_bytes()),
            stat: &stat,
            dst: out.as_ref().map(|c| &c.dir),
        })?;
        if stat.kind != Kind::Dir {
            continue;
        }
        if cookies.len() + 1 >= MAX_DEPTH {
            return Err(too_big("deep"));
        }
        match src.down(&n) {
            Ok(()) => {}
            // Gone or swapped since it was listed: nothing of it is walked.
            Err(e) if matches!(errno(&e), libc::ENOENT | libc::ELOOP | libc::ENOTDIR) => continue,
            Err(e) => return Err(e),
        }
        if let Some(o) = out.as_mut() {
            o.down(&n)?;
        }
        cookies.push(list.cookie());
        rel.push(OsStr::from_bytes(n.as_bytes()));
        list = src.dir.entries()?;
    }
}

/// Copies everything below `src` into the empty directory `dst`: directories, regular files
/// and links (as links, never followed), with their modes, owners and times (a container's
/// files belong to its mapped ids), and files linked to each other linked again in the copy;
/// fifos, sockets and device nodes are left out (a copy of /data is of what the container
/// keeps, not of what it runs with), and so are extended attributes. Each file is fsynced.
/// Refused past the caps, or past `max_bytes` (a tree that grows while it is copied, a sparse
/// file whose holes the copy would fill): each file counts its bytes rounded up to 4 KiB,
/// the blocks a copy takes on most file systems; or when the tree changes under the walk.
pub fn copy_tree(src: &Dir, dst: &Dir, max_bytes: u64) -> io::Result<()> {
    let mut copied = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    // A file seen before under another name (device, inode → its path in the copy).
    let mut linked: std::collections::HashMap<(u64, u64), PathBuf> = Default::default();
    walk(src, Some(dst), &mut |v| {
        let (from, s, n) = (v.dir, v.stat, v.name);
        let to = v.dst.expect("a copy walks its destination");
        // Gone, or swapped for something else, since it was listed: not copied.
        let gone = |e: &io::Error| {
            is_refusal(e) || matches!(errno(e), libc::ENOENT | libc::ELOOP | libc::EINVAL)
        };
        match s.kind {
            Kind::Dir => to.mkdir(n, 0o700),
            Kind::Symlink => match from.read_link(n) {
                Ok(target) => {
                    to.symlink(&target, n)?;
                    to.chown(n, s.uid, s.gid)?;
                    to.set_mtime(n, s.mtime)
                }
                Err(e) if gone(&e) => Ok(()),
                Err(e) => Err(e),
            },
            Kind::File => {
                let mut r = match from.open_entry(n) {
                    Ok(f) => f,
                    Err(e) if gone(&e) => return Ok(()),
                    Err(e) => return Err(e),
                };
                let now = fstat_fd(r.as_raw_fd())?;
                let path = v.path();
                if now.nlink > 1 {
                    if let Some(first) = linked.get(&(now.dev, now.ino)) {
                        let (fp, fname) = split(first)?;
                        return dst.open_dir(&fp)?.hard_link(&fname, to, n);
                    }
                    linked.insert((now.dev, now.ino), path);
                }
                let mut w = to.create_file(n, 0o600)?;
                let before = copied;
                loop {
                    let k = r.read(&mut buf)?;
                    // Its bytes so far in whole 4 KiB blocks (an empty file: one, its inode's).
                    let len = copied - before + k as u64;
                    let blocks = len.div_ceil(4096).max(1) * 4096;
                    if before.saturating_add(blocks) > max_bytes {
                        return Err(refuse(format!(
                            "the tree holds more than {max_bytes} bytes"
                        )));
                    }
                    if k == 0 {
                        copied = before + blocks;
                        break;
                    }
                    copied += k as u64;
                    w.write_all(&buf[..k])?;
                }
                crate::fsutil::sync(&w)?;
                set_file_attrs(&w, now.mode, Some((now.uid, now.gid)), Some(now.mtime))
            }
            Kind::Special => Ok(()),
        }
    })
}

/// A path of berth's own to an entry of a tree someone else controls: its parent, opened as a
/// tree's top, and its name.
fn parent_of(path: &Path) -> io::Result<(Dir, &OsStr)> {
    let name = path
        .file_name()
        .ok_or_else(|| refuse(format!("{}: no name", path.display())))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    // The parent is berth's own (its state directory may well be a link to a card): only
    // the name is inside the untrusted tree.
    Ok((Dir::open_given(parent)?, name))
}

/// Removes `path` and all below it ([`Dir::remove_all`] in its parent); a missing path is
/// no error.
pub fn remove_path(path: &Path) -> io::Result<()> {
    match parent_of(path) {
        Ok((dir, name)) => dir.remove_all(name),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Bytes the tree at `path` takes on disk (every entry's blocks, links not followed), up to
/// the caps: past them, what was counted (a lower bound).
pub fn path_usage(path: &Path) -> u64 {
    let Ok(top) = Dir::open(path) else {
        return 0;
    };
    let mut total = top.stat_self().map_or(0, |s| s.used);
    let _ = for_each(&top, &mut |v| {
        total = total.saturating_add(v.stat.used);
        Ok(())
    });
    total
}

/// [`tree_size`] of the tree at `path`.
pub fn path_size(path: &Path) -> Option<u64> {
    tree_size(&Dir::open(path).ok()?)
}

/// [`copy_tree`] of the tree at `src` into `dst`, which it makes (and must not exist).
pub fn copy_path(src: &Path, dst: &Path, max_bytes: u64) -> io::Result<()> {
    let from = Dir::open(src)?;
    let (parent, name) = parent_of(dst)?;
    parent.mkdir(name, 0o700)?;
    copy_tree(&from, &parent.subdir(name)?, max_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mount::tests::TempDir;
    use std::os::unix::fs::{symlink, PermissionsExt};

    /// The tree of a test: `top/` (the tree) beside `canary/` (outside it, which nothing may
    /// touch), with links out of the tree at every level.
    fn hostile(d: &TempDir) -> (PathBuf, PathBuf) {
        let top = d.path().join("top");
        let canary = d.path().join("canary");
        std::fs::create_dir_all(canary.join("sub")).unwrap();
        std::fs::write(canary.join("precious"), "precious").unwrap();
        std::fs::write(canary.join("sub/file"), "file").unwrap();
        std::fs::create_dir_all(top.join("a/b")).unwrap();
        std::fs::write(top.join("a/b/f"), "f").unwrap();
        symlink(&canary, top.join("abs")).unwrap();
        symlink("../canary", top.join("rel")).unwrap();
        symlink("../../../canary", top.join("a/b/up")).unwrap();
        symlink(canary.join("precious"), top.join("a/filelink")).unwrap();
        (top, canary)
    }

    fn canary_intact(canary: &Path) {
        assert_eq!(std::fs::read(canary.join("precious")).unwrap(), b"precious");
        assert_eq!(std::fs::read(canary.join("sub/file")).unwrap(), b"file");
        assert_eq!(std::fs::read_dir(canary).unwrap().count(), 2);
    }

    /// Both ways of resolving: openat2 and the walk.
    fn both(f: impl Fn(bool)) {
        f(true);
        f(false);
    }

    #[test]
    fn paths_through_links_are_refused_by_name_both_ways() {
        let d = TempDir::new("tree-resolve");
        let (top, canary) = hostile(&d);
        let t = Dir::open(&top).unwrap();
        both(|fast| {
            let open = |rel: &str, flags| t.open_beneath(Path::new(rel), flags, fast);
            assert!(open("a/b", libc::O_RDONLY | libc::O_DIRECTORY).is_ok());
            assert!(open("a/b/f", libc::O_RDONLY).is_ok());
            for (rel, what) in [
                ("abs/precious", "/abs is a symbolic link"),
                ("rel/sub/file", "/rel is a symbolic link"),
                ("a/b/up/precious", "/a/b/up is a symbolic link"),
                ("a/filelink", "/a/filelink is a symbolic link"),
                ("a/b/f/x", "/a/b/f is not a directory"),
            ] {
                let e = open(rel, libc::O_RDONLY).unwrap_err();
                assert!(is_refusal(&e), "{rel} ({fast}): {e}");
                assert!(e.to_string().contains(what), "{rel} ({fast}): {e}");
            }
            let e = open("a/../../canary", libc::O_RDONLY).unwrap_err();
            assert!(e.to_string().contains("leaves the tree"), "{e}");
            assert_eq!(
                open("a/missing/x", libc::O_RDONLY).unwrap_err().kind(),
                io::ErrorKind::NotFound
            );
        });
        assert!(
            t.open_file(Path::new("a/b")).is_err(),
            "a directory is not a file"
        );
        assert!(
            Dir::open(&top.join("abs")).is_err(),
            "a tree's top is not a link"
        );
        canary_intact(&canary);
    }

    #[test]
    fn make_dirs_names_what_it_made_and_refuses_links_on_the_way() {
        let d = TempDir::new("tree-mkdirs");
        let (top, canary) = hostile(&d);
        let t = Dir::open(&top).unwrap();
        let mut made = Vec::new();
        t.make_dirs(Path::new("a/x/y"), 0o755, &mut |p| {
            made.push(p.to_path_buf())
        })
        .unwrap();
        assert_eq!(made, [PathBuf::from("a/x"), PathBuf::from("a/x/y")]);
        let e = t
            .make_dirs(Path::new("abs/new"), 0o755, &mut |_| {})
            .unwrap_err();
        assert!(e.to_string().contains("/abs is a symbolic link"), "{e}");
        let e = t
            .make_dirs(Path::new("a/b/up/new"), 0o755, &mut |_| {})
            .unwrap_err();
        assert!(e.to_string().contains("/a/b/up is a symbolic link"), "{e}");
        assert!(!canary.join("new").exists());
        canary_intact(&canary);
    }

    #[test]
    fn remove_all_removes_links_not_what_they_point_at_at_any_depth() {
        let d = TempDir::new("tree-remove");
        let (top, canary) = hostile(&d);
        // deeper than PATH_MAX allows a path to name, made one level at a time
        let mut deep = Dir::open(&top).unwrap();
        let long = "d".repeat(200);
        for _ in 0..40 {
            deep.mkdir(OsStr::new(&long), 0o755).unwrap();
            deep = deep.subdir(OsStr::new(&long)).unwrap();
        }
        deep.symlink(&canary, OsStr::new("out")).unwrap();
        let f = deep.create_file(OsStr::new("f"), 0o400).unwrap();
        drop(f);
        // a read-only directory is removed too
        std::fs::set_permissions(top.join("a/b"), std::fs::Permissions::from_mode(0o500)).unwrap();
        let parent = Dir::open(d.path()).unwrap();
        // on a small stack: no recursion
        let p = d.path().to_path_buf();
        std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                Dir::open(&p)
                    .unwrap()
                    .remove_all(OsStr::new("top"))
                    .unwrap();
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(!top.exists());
        parent.remove_all(OsStr::new("top")).unwrap();
        canary_intact(&canary);
        // a link as the named entry: the link goes, not its target
        symlink(&canary, d.path().join("l")).unwrap();
        parent.remove_all(OsStr::new("l")).unwrap();
        canary_intact(&canary);
        assert!(parent.remove_all(OsStr::new("..")).is_err());
    }

    #[test]
    fn copy_keeps_links_as_links_modes_and_refuses_caps() {
        let d = TempDir::new("tree-copy");
        let (top, canary) = hostile(&d);
        std::fs::set_permissions(top.join("a/b/f"), std::fs::Permissions::from_mode(0o640))
            .unwrap();
        std::fs::set_permissions(top.join("a/b"), std::fs::Permissions::from_mode(0o500)).unwrap();
        let out = d.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let (t, o) = (Dir::open(&top).unwrap(), Dir::open(&out).unwrap());
        // What its one file takes in a copy (a block), not its one byte.
        assert_eq!(tree_size(&t), Some(4096));
        // An empty file takes a block in a copy; a sparse one counts what it holds.
        let extra = d.path().join("extra");
        std::fs::create_dir(&extra).unwrap();
        std::fs::write(extra.join("empty"), b"").unwrap();
        let f = std::fs::File::create(extra.join("holes")).unwrap();
        f.set_len(1 << 40).unwrap();
        assert_eq!(tree_size(&Dir::open(&extra).unwrap()), Some(2 * 4096));
        copy_tree(&t, &o, 1 << 20).unwrap();
        assert_eq!(std::fs::read(out.join("a/b/f")).unwrap(), b"f");
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&out.join("a/b/f")), 0o640);
        assert_eq!(mode(&out.join("a/b")), 0o500);
        assert_eq!(std::fs::read_link(out.join("abs")).unwrap(), canary);
        assert_eq!(
            std::fs::read_link(out.join("a/b/up")).unwrap(),
            Path::new("../../../canary")
        );
        // past its byte budget: refused
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o700)).unwrap();
        Dir::open(d.path())
            .unwrap()
            .remove_all(OsStr::new("out"))
            .unwrap();
        std::fs::create_dir(&out).unwrap();
        let o = Dir::open(&out).unwrap();
        let e = copy_tree(&t, &o, 0).unwrap_err();
        assert!(
            is_refusal(&e) && e.to_string().contains("more than 0 bytes"),
            "{e}"
        );
        canary_intact(&canary);
        // past the depth cap: no size, no copy
        let mut deep = Dir::open(&top).unwrap();
        for _ in 0..MAX_DEPTH + 2 {
            deep.mkdir(OsStr::new("d"), 0o755).unwrap();
            deep = deep.subdir(OsStr::new("d")).unwrap();
        }
        assert_eq!(tree_size(&t), None);
    }

    /// Many directories side by side and nested: the walk's resumed listings visit each
    /// entry once, a copy is the same tree (links, hard links, modes, times), and a tree
    /// below a parent that is a link of berth's own is removed.
    #[test]
    fn walks_resume_their_listings_and_copies_keep_links_and_times() {
        use std::os::unix::fs::MetadataExt;
        let d = TempDir::new("tree-wide");
        let top = d.path().join("wide");
        for i in 0..300 {
            let sub = top.join(format!("d{i:03}/e/f"));
            std::fs::create_dir_all(&sub).unwrap();
            std::fs::write(sub.join("x"), format!("{i}")).unwrap();
        }
        std::fs::write(top.join("first"), "1").unwrap();
        std::fs::hard_link(top.join("first"), top.join("d007/second")).unwrap();
        symlink("../first", top.join("d001/rel")).unwrap();
        let old = 1_600_000_000;
        let t = libc::timespec {
            tv_sec: old,
            tv_nsec: 0,
        };
        let c = CString::new(top.join("first").as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path and two valid timespecs.
        unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), [t, t].as_ptr(), 0) };
        let t = Dir::open(&top).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for_each(&t, &mut |v| {
            assert!(seen.insert(v.path()), "{} twice", v.path().display());
            Ok(())
        })
        .unwrap();
        assert_eq!(seen.len(), 300 * 4 + 3, "every entry once");
        // A block each, each file once (first and second are one file).
        assert_eq!(tree_size(&t), Some(301 * 4096));
        let out = d.path().join("copy");
        // 301 files of a block each.
        assert!(copy_path(&top, &out.with_extension("small"), 301 * 4096 - 1).is_err());
        copy_path(&top, &out, 301 * 4096).unwrap();
        let m = |p: &Path| std::fs::symlink_metadata(p).unwrap();
        assert_eq!(
            m(&out.join("first")).ino(),
            m(&out.join("d007/second")).ino(),
            "linked again"
        );
        assert_eq!(m(&out.join("first")).mtime(), old);
        assert_eq!(
            std::fs::read_link(out.join("d001/rel")).unwrap(),
            Path::new("../first")
        );
        assert_eq!(std::fs::read(out.join("d299/e/f/x")).unwrap(), b"299");
        // a parent that is berth's own link: followed (only the name is the tree's)
        symlink(d.path(), d.path().join("via")).unwrap();
        remove_path(&d.path().join("via/copy")).unwrap();
        assert!(!out.exists());
    }

    #[test]
    fn special_files_are_refused_unopened_and_openat2_is_used_where_the_kernel_has_it() {
        let d = TempDir::new("tree-special");
        let fifo = CString::new(d.path().join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let t = Dir::open(d.path()).unwrap();
        // a fifo with no writer would block an open without O_NONBLOCK: refused first
        assert!(is_refusal(&t.open_entry(OsStr::new("fifo")).unwrap_err()));
        assert!(is_refusal(&t.open_file(Path::new("fifo")).unwrap_err()));
        // O_PATH beneath: never with O_LARGEFILE, which openat2 refuses beside it
        assert!(t
            .open_beneath(Path::new("fifo"), libc::O_PATH, true)
            .is_ok());
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut v = release
            .split(|c: char| !c.is_ascii_digit())
            .map(|n| n.parse::<u32>().unwrap_or(0));
        let kernel = (v.next().unwrap_or(0), v.next().unwrap_or(0));
        // (Under the old-kernel filter, pidfd_open answers ENOSYS too.)
        if kernel >= (5, 6) && crate::process::pidfd_supported() {
            assert!(openat2_works(), "Linux {kernel:?} has openat2");
        }
    }

    #[test]
    fn listings_and_splits() {
        let d = TempDir::new("tree-list");
        let (top, _) = hostile(&d);
        let t = Dir::open(&top).unwrap();
        let mut names: Vec<_> = t
            .entries()
            .unwrap()
            .map(|e| e.unwrap())
            .map(|(n, k)| (n.to_string_lossy().into_owned(), k))
            .collect();
        names.sort();
        assert_eq!(names.len(), 3);
        assert_eq!(names[0].0, "a");
        let (p, n) = split(Path::new("/x/y/z")).unwrap();
        assert_eq!(
            (p.as_path(), n.as_os_str()),
            (Path::new("x/y"), OsStr::new("z"))
        );
        assert!(split(Path::new("/")).is_err());
        assert_eq!(shown(Path::new("a\x1b[2Jb")), "/a\\u{1b}[2Jb");
        assert!(t.stat_beneath(Path::new("abs/precious")).is_err());
        assert!(t.stat_beneath(Path::new("nope/x")).unwrap().is_none());
    }
}
