//! Mounts made inside another process's mount namespace (hot-binding, docs/hot-binding.md):
//! the kernel's mount API (`open_tree` + `move_mount`, Linux 5.2; `mount_setattr`, 5.12) and
//! plain binds for older kernels. The namespace is entered by a short-lived thread of its
//! own ([`at_target`]), so the daemon's other threads never leave the host's.
//!
//! Paths inside the namespace are walked one component at a time without following a
//! symlink, and mounts are made on (parent directory, name), so a container that can write
//! the directories on the way cannot send a mount elsewhere.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::mount::cpath;

// 32-bit glibc's `stat` has 32-bit device and inode numbers (EOVERFLOW on large ones): the
// 64-bit calls there; musl's and 64-bit glibc's `stat` is already 64-bit.
#[cfg(not(all(target_env = "gnu", target_pointer_width = "32")))]
use libc::{fstat, fstatat, stat as Stat};
#[cfg(all(target_env = "gnu", target_pointer_width = "32"))]
use libc::{fstat64 as fstat, fstatat64 as fstatat, stat64 as Stat};

fn check(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// What [`at_target`] does at its target.
pub enum Mount {
    /// Attach this detached mount ([`clone_tree`]); `true`: remount it read-only, nosuid,
    /// nodev, private in place (a kernel without `mount_setattr`).
    Tree(OwnedFd, bool),
    /// Bind this path of the namespace, then remount the bind read-only, nosuid, nodev,
    /// private (a propagated copy would keep its master otherwise).
    Bind(PathBuf),
    /// Detach the mount there (`MNT_DETACH`) if it shows the identity given.
    Off,
}

/// Steps inside the namespace, named for a caller's hook (`step`: fault injection in the
/// crash tests; `|_| {}` otherwise): `mountns.entered` once the thread is in the namespace
/// and at the target's directory, `mountns.mounted` / `mountns.unmounted` right after the
/// mount is made or taken off, before anything else is checked.
pub type Step = fn(&str);

/// In the mount namespace of `pid` (read below `proc_root`), on a short-lived thread of
/// its own: mounts at `at` (absolute, in normal form; walked from the namespace's root one
/// component at a time, no symlink followed: `ENOTDIR` where one is met), which must be an
/// empty directory with nothing mounted on it (`ENOENT`, `ENOTDIR`, `EBUSY`, `ENOTEMPTY`).
/// The mount must then show `id` (device and inode of the image's root), else it is
/// undone. The thread first gives itself its own root and working directory
/// (`unshare(CLONE_FS)`), which `setns(CLONE_NEWNS)` requires of a thread of a
/// multi-threaded process; both end with it, so no other thread ever leaves the host's.
pub fn at_target(
    proc_root: &Path,
    pid: i32,
    at: PathBuf,
    m: Mount,
    id: (u64, u64),
    step: Step,
) -> io::Result<()> {
    in_namespace(proc_root, pid, move || {
        let (dir, name) = walk(&at)?;
        // This thread's working directory: the calls below take the name.
        // SAFETY: fchdir on an open descriptor; it changes this thread's own fs context.
        check(unsafe { libc::fchdir(dir.as_raw_fd()) } as libc::c_long)?;
        step("mountns.entered");
        let shows = || stat_at(&dir, &name).map(|st| file_id(&st) == id);
        if let Mount::Off = m {
            return match shows()? {
                true => umount_here(&name).map(|()| step("mountns.unmounted")),
                false => Ok(()),
            };
        }
        let st = stat_at(&dir, &name)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        // Something is mounted there: another file system, or the image already.
        if st.st_dev != stat_at(&dir, c".")?.st_dev || file_id(&st) == id {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        if std::fs::read_dir(&at)?.next().is_some() {
            return Err(io::Error::from_raw_os_error(libc::ENOTEMPTY));
        }
        let (mounted, relock) = match m {
            Mount::Tree(tree, relock) => (move_tree(&tree, &dir, &name), relock),
            Mount::Bind(src) => (
                cpath(&src)
                    .map_err(io::Error::other)
                    .and_then(|s| bind_onto(&s, &dir, &name, file_id(&st))),
                true,
            ),
            Mount::Off => (Ok(()), false),
        };
        mounted?;
        step("mountns.mounted");
        let done = match relock {
            true => lock(&name),
            false => Ok(()),
        }
        .and_then(|_| match shows()? {
            true => Ok(()),
            false => Err(io::Error::other(
                "the mount there is not the package's image",
            )),
        });
        if done.is_err() {
            let _ = umount_here(&name);
        }
        done
    })
}

/// Whether the mount at `at` in the mount namespace of `pid` shows `id` (device and inode
/// of an image's root): the binding is there. A target that is gone, or a symlink on the
/// way, shows nothing.
pub fn shows_at(proc_root: &Path, pid: i32, at: PathBuf, id: (u64, u64)) -> io::Result<bool> {
    in_namespace(proc_root, pid, move || {
        let (dir, name) = match walk(&at) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
                ) =>
            {
                return Ok(false)
            }
            Err(e) => return Err(e),
        };
        match stat_at(&dir, &name) {
            Ok(st) => Ok(file_id(&st) == id),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    })
}

/// Runs `f` on a short-lived thread of its own in the mount namespace of `pid` (see
/// [`at_target`]: the thread unshares its fs context first; it ends with it).
fn in_namespace<T: Send + 'static>(
    proc_root: &Path,
    pid: i32,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let ns = std::fs::File::open(proc_root.join(format!("{pid}/ns/mnt")))?;
    std::thread::Builder::new()
        .name("berth-mountns".into())
        .stack_size(128 << 10)
        .spawn(move || {
            // SAFETY: unshare with CLONE_FS only copies this thread's root, cwd and umask.
            check(unsafe { libc::unshare(libc::CLONE_FS) } as libc::c_long)?;
            // SAFETY: `ns` is an open mount-namespace file for the duration of the call;
            // after the unshare above setns changes this thread's namespace only.
            check(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNS) } as libc::c_long)?;
            f()
        })?
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("mount namespace thread panicked")))
}

/// Binds `src` onto the directory `name` in `dir` (the working directory) that was checked
/// as `id`, without following a symlink there: mount(2) follows one in its target's last
/// component, and the container may swap the directory for one after the check. So the
/// directory is opened without following (`O_NOFOLLOW`), checked to be the one seen, made
/// the working directory and mounted on as "."; then the working directory is `dir` again.
fn bind_onto(src: &CString, dir: &OwnedFd, name: &CStr, id: (u64, u64)) -> io::Result<()> {
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
    let target = open_at(dir.as_raw_fd(), name.as_ptr(), flags)?;
    // SAFETY: an all-zero stat is a valid value for the kernel to overwrite.
    let mut st: Stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor and a valid out pointer.
    check(unsafe { fstat(target.as_raw_fd(), &mut st) } as libc::c_long)?;
    if file_id(&st) != id {
        return Err(io::Error::from_raw_os_error(libc::ESTALE));
    }
    // SAFETY: fchdir on an open descriptor; it changes this thread's own fs context.
    check(unsafe { libc::fchdir(target.as_raw_fd()) } as libc::c_long)?;
    let here = CString::new(".").map_err(io::Error::other)?;
    let bound = crate::mount::sys_mount(Some(src), &here, None, libc::MS_BIND, None);
    // SAFETY: as above, back to the parent (the name below it now leads to the mount).
    check(unsafe { libc::fchdir(dir.as_raw_fd()) } as libc::c_long)?;
    bound
}

/// Remounts the mount on `name` (in the working directory) read-only, nosuid, nodev and
/// makes it private.
fn lock(name: &CString) -> io::Result<()> {
    let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID;
    crate::mount::sys_mount(None, name, None, flags | libc::MS_NODEV, None)?;
    crate::mount::sys_mount(None, name, None, libc::MS_PRIVATE, None)
}

/// Detaches the mount on `name` in the working directory, a symlink not followed.
fn umount_here(name: &CStr) -> io::Result<()> {
    let flags = libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW;
    // SAFETY: `name` is NUL-terminated and outlives the call.
    let rc = unsafe { libc::umount2(name.as_ptr(), flags) };
    check(rc as libc::c_long)?;
    Ok(())
}

/// The empty path of the `*_EMPTY_PATH` calls, and the root.
const EMPTY: &[u8] = b"\0";
const ROOT: &[u8] = b"/\0";

fn open_at(dir: RawFd, name: *const libc::c_char, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: callers pass a NUL-terminated string that outlives the call; the fd returned
    // is new and owned by nobody else.
    let fd = check(unsafe { libc::openat(dir, name, flags | libc::O_CLOEXEC) } as libc::c_long)?;
    // SAFETY: see above.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A directory's parent (an `O_PATH` descriptor) and the directory's name in it: `path`
/// walked from this thread's root one component at a time, no symlink followed.
fn walk(path: &Path) -> io::Result<(OwnedFd, CString)> {
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
    let mut dir = open_at(libc::AT_FDCWD, ROOT.as_ptr().cast(), flags)?;
    let mut names = path.components().skip(1).peekable();
    while let Some(c) = names.next() {
        let name = CString::new(c.as_os_str().as_bytes()).map_err(io::Error::other)?;
        if names.peek().is_none() {
            return Ok((dir, name));
        }
        dir = open_at(dir.as_raw_fd(), name.as_ptr(), flags)?;
    }
    Err(io::Error::from_raw_os_error(libc::EINVAL))
}

/// `stat` of `name` in `dir`, not following a symlink (but crossing into a mount on it).
/// A file's (device, inode): their C types differ between architectures (MIPS o32's
/// `stat64` has a 32-bit `st_dev`).
#[allow(clippy::unnecessary_cast)]
fn file_id(st: &Stat) -> (u64, u64) {
    (st.st_dev as u64, st.st_ino as u64)
}

fn stat_at(dir: &OwnedFd, name: &CStr) -> io::Result<Stat> {
    // SAFETY: an all-zero stat is a valid value for the kernel to overwrite.
    let mut st: Stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated, `st` is a valid out pointer; both outlive the call.
    let rc = unsafe {
        fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    check(rc as libc::c_long)?;
    Ok(st)
}

/// A detached copy of the mount at `src` (not of the mounts below it): `open_tree` with
/// `OPEN_TREE_CLONE`. `ENOSYS` before Linux 5.2.
pub fn clone_tree(src: &Path) -> io::Result<OwnedFd> {
    let s = cpath(src).map_err(io::Error::other)?;
    // SAFETY: `s` is NUL-terminated and outlives the call; the fd returned is new.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            s.as_ptr(),
            libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC,
        )
    })?;
    // SAFETY: see above.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Makes a detached mount read-only, nosuid, nodev and private (no propagation to or from
/// the mount it was cloned from): `mount_setattr`, `ENOSYS` before Linux 5.12.
pub fn lock_tree(tree: &OwnedFd) -> io::Result<()> {
    #[allow(clippy::unnecessary_cast)] // c_ulong: 32 bits on 32-bit targets
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: libc::MS_PRIVATE as u64,
        userns_fd: 0,
    };
    // SAFETY: the empty path is NUL-terminated, `attr` is a valid mount_attr of the size
    // passed; both outlive the call.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            EMPTY.as_ptr().cast::<libc::c_char>(),
            libc::AT_EMPTY_PATH,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    })?;
    Ok(())
}

/// Attaches a detached mount on directory `name` of `dir` (`move_mount`; a symlink there
/// is not followed).
fn move_tree(tree: &OwnedFd, dir: &OwnedFd, name: &CStr) -> io::Result<()> {
    // SAFETY: both paths are NUL-terminated and outlive the call; the fds are open.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            EMPTY.as_ptr().cast::<libc::c_char>(),
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    })?;
    Ok(())
}

/// Makes `dir` a mount of its own with shared propagation, in a peer group of its own: what
/// is mounted below it later appears in its copies (bound into a container as slaves).
pub fn bind_shared(dir: &Path) -> io::Result<()> {
    let d = cpath(dir).map_err(io::Error::other)?;
    crate::mount::sys_mount(Some(&d), &d, None, libc::MS_BIND, None)?;
    for flag in [libc::MS_PRIVATE, libc::MS_SHARED] {
        if let Err(e) = crate::mount::sys_mount(None, &d, None, flag, None) {
            let _ = crate::mount::umount(dir, true);
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mount::tests::{require_root, TempDir};
    use std::os::unix::fs::MetadataExt;
    use std::process::{Command, Stdio};

    /// A process in a mount namespace of its own (a private copy of ours), killed on drop.
    struct Ns(std::process::Child);
    impl Drop for Ns {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn ns() -> Ns {
        let child = Command::new("unshare")
            .args(["-m", "--propagation", "slave", "sleep", "60"])
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare (util-linux)");
        let pid = child.id();
        // Until the child has switched namespaces, /proc/PID/ns/mnt is still ours.
        let ours = std::fs::read_link("/proc/self/ns/mnt").unwrap();
        for _ in 0..500 {
            match std::fs::read_link(format!("/proc/{pid}/ns/mnt")) {
                Ok(l) if l != ours => return Ns(child),
                _ => std::thread::sleep(std::time::Duration::from_millis(2)),
            }
        }
        panic!("unshare did not enter a new mount namespace");
    }

    fn root_of(n: &Ns, p: &Path) -> std::path::PathBuf {
        Path::new(&format!("/proc/{}/root", n.0.id())).join(p.strip_prefix("/").unwrap())
    }

    #[test]
    fn walk_refuses_symlinks() {
        let d = TempDir::new("walk");
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        std::os::unix::fs::symlink(d.path().join("a"), d.path().join("l")).unwrap();
        let (_, name) = walk(&d.path().join("a/b")).unwrap();
        assert_eq!(name.as_bytes(), b"b");
        let e = walk(&d.path().join("l/b")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR), "{e}");
        // The last component is not opened: the caller looks at it (stat_at).
        let (dir, name) = walk(&d.path().join("l")).unwrap();
        let st = stat_at(&dir, &name).unwrap();
        assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFLNK);
    }

    #[test]
    fn both_methods_bind_read_only_into_another_namespace() {
        require_root("mount namespace test");
        if crate::check::probe_open_tree().0 != crate::check::Status::Present {
            // Linux < 5.2, or the run under scripts/oldkernel.sh (docs/kernels.md); the
            // propagation method is tested end to end (tests/bind.rs, tests/old_kernel.rs).
            crate::skip::record(
                "kernel open_tree",
                "mountns::both_methods_bind_read_only_into_another_namespace: no mount API (Linux 5.2)",
            );
            return;
        }
        let d = TempDir::new("mountns");
        let p = |s: &str| d.path().join(s);
        for s in ["src", "t1", "t2", "full", "l"] {
            std::fs::create_dir(p(s)).unwrap();
        }
        std::fs::write(p("src/f"), "pkg").unwrap();
        std::fs::write(p("full/f"), "x").unwrap();
        std::os::unix::fs::symlink(p("t1"), p("l/t")).unwrap();
        // The source must be a mount of its own, as an image mount is.
        crate::mount::bind(&p("src"), &p("src"), true).unwrap();
        let md = std::fs::metadata(p("src")).unwrap();
        let id = (md.dev(), md.ino());
        let n = ns();
        let pid = n.0.id() as i32;
        let proc = Path::new("/proc");
        let tree = || {
            let t = clone_tree(&p("src")).unwrap();
            lock_tree(&t).unwrap();
            Mount::Tree(t, false)
        };
        for (at, errno) in [
            ("none", libc::ENOENT),
            ("src/f", libc::ENOTDIR),
            ("full", libc::ENOTEMPTY),
            ("l/t", libc::ENOTDIR),
        ] {
            let e = at_target(proc, pid, p(at), tree(), id, |_| {}).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(errno), "{at}: {e}");
        }
        // A mount that is not the image is taken off again.
        let e = at_target(proc, pid, p("t1"), Mount::Bind(p("full")), id, |_| {}).unwrap_err();
        assert!(e.to_string().contains("not the package's image"), "{e}");
        at_target(proc, pid, p("t1"), tree(), id, |_| {}).unwrap();
        assert!(shows_at(proc, pid, p("t1"), id).unwrap());
        assert!(!shows_at(proc, pid, p("t2"), id).unwrap());
        assert!(!shows_at(proc, pid, p("none/x"), id).unwrap());
        let e = at_target(proc, pid, p("t1"), tree(), id, |_| {}).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBUSY), "{e}");
        at_target(proc, pid, p("t2"), Mount::Bind(p("t1")), id, |_| {}).unwrap();
        for t in [p("t1"), p("t2")] {
            // Inside: the file, read-only; outside: nothing.
            let inside = root_of(&n, &t);
            assert_eq!(std::fs::read_to_string(inside.join("f")).unwrap(), "pkg");
            let e = std::fs::write(inside.join("g"), "x").unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EROFS));
            assert!(
                !t.join("f").exists(),
                "{} leaked into the host",
                t.display()
            );
        }
        let info = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
        for t in [p("t1"), p("t2")] {
            let m = crate::mount::parse_mountinfo(&info)
                .into_iter()
                .find(|m| m.mount_point == t)
                .unwrap();
            for o in ["ro", "nosuid", "nodev"] {
                assert!(m.options.split(',').any(|x| x == o), "{}", m.options);
            }
        }
        for t in ["t2", "t1"] {
            at_target(proc, pid, p(t), Mount::Off, id, |_| {}).unwrap();
        }
        assert!(!root_of(&n, &p("t1")).join("f").exists());
        // This thread never left the host's namespace.
        assert!(crate::mount::umount(&p("src"), false).unwrap());
    }
}
