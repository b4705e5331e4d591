//! Mounts: read-only overlays and binds, unmounting, and reading `/proc/self/mountinfo`.
//!
//! Also home of [`SysError`], the error type shared by the kernel-facing modules of this crate
//! (mounts, loop devices).

use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Errors of the mount and loop-device layer. I/O variants carry the operation and the path.
#[derive(Debug, thiserror::Error)]
pub enum SysError {
    /// A system call on a path failed: "mount overlay on /run/berth/rootfs/web: No such file or
    /// directory (os error 2)". The I/O error is part of the message (not a `source`), so it is
    /// never printed twice.
    #[error("{op} {path}: {error}")]
    Io {
        op: String,
        path: PathBuf,
        error: io::Error,
    },
    /// No loop device could be had for an image.
    #[error(
        "no free loop device for {image} ({detail}): free one with berth gc or raise max_loop"
    )]
    NoFreeLoop { image: PathBuf, detail: String },
    /// A caller passed something the kernel interface cannot express.
    #[error("{0}")]
    Invalid(String),
}

impl SysError {
    pub(crate) fn io(op: impl Into<String>, path: &Path, error: io::Error) -> Self {
        SysError::Io {
            op: op.into(),
            path: path.to_path_buf(),
            error,
        }
    }

    /// The errno behind this error, if it came from a system call.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            SysError::Io { error, .. } => error.raw_os_error(),
            _ => None,
        }
    }
}

/// A path as a C string; a NUL byte inside is reported as [`SysError::Invalid`].
pub(crate) fn cpath(path: &Path) -> Result<CString, SysError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| SysError::Invalid(format!("path contains a NUL byte: {}", path.display())))
}

fn cstr(s: &str) -> CString {
    // Only called with literals and strings we built and checked for NUL.
    CString::new(s).expect("no NUL in internal string")
}

/// mount(2). `source`, `fstype` and `data` may be absent.
pub(crate) fn sys_mount(
    source: Option<&CString>,
    target: &CString,
    fstype: Option<&CString>,
    flags: libc::c_ulong,
    data: Option<&CString>,
) -> io::Result<()> {
    let opt = |c: Option<&CString>| c.map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is either null (allowed by mount(2) for source, fstype and data in
    // the uses of this crate) or points to a NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            opt(source),
            target.as_ptr(),
            opt(fstype),
            flags,
            opt(data).cast(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The legacy mount(2) data page is one page; the kernel truncates anything longer.
const MOUNT_DATA_MAX: usize = 4095;

/// Builds the overlayfs option string for a read-only overlay of `lowers` (top layer first).
fn overlay_options(lowers: &[&Path]) -> Result<String, SysError> {
    if lowers.len() < 2 {
        return Err(SysError::Invalid(format!(
            "a read-only overlay needs at least 2 lower layers, got {}: bind the single layer instead",
            lowers.len()
        )));
    }
    let mut opts = String::from("lowerdir=");
    for (i, l) in lowers.iter().enumerate() {
        let s = l.to_str().ok_or_else(|| {
            SysError::Invalid(format!("overlay layer path is not UTF-8: {}", l.display()))
        })?;
        if s.is_empty() || s.contains([',', ':', '\\', '\n', '\0']) {
            return Err(SysError::Invalid(format!(
                "overlay layer path {s:?} is empty or contains one of , : \\ which overlayfs options cannot carry"
            )));
        }
        if i > 0 {
            opts.push(':');
        }
        opts.push_str(s);
    }
    if opts.len() > MOUNT_DATA_MAX {
        return Err(SysError::Invalid(format!(
            "overlay options are {} bytes, more than mount(2) accepts ({MOUNT_DATA_MAX}): use fewer or shorter layer paths",
            opts.len()
        )));
    }
    Ok(opts)
}

/// Mounts an overlayfs made only of lower layers (so read-only by construction) on `target`,
/// with `MS_RDONLY | MS_NOSUID | MS_NODEV`. `lowers[0]` is the top layer. Needs at least two
/// layers: with one, the caller binds it with [`bind_ro`].
pub fn mount_overlay_ro(lowers: &[&Path], target: &Path) -> Result<(), SysError> {
    let opts = overlay_options(lowers)?;
    let t = cpath(target)?;
    let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
    sys_mount(
        Some(&cstr("overlay")),
        &t,
        Some(&cstr("overlay")),
        flags,
        Some(&cstr(&opts)),
    )
    .map_err(|e| SysError::io("mount overlay on", target, e))
}

/// Bind-mounts `src` on `target` (not recursively), then remounts the bind read-only, nosuid,
/// nodev. If the remount fails the bind is undone.
pub fn bind_ro(src: &Path, target: &Path) -> Result<(), SysError> {
    bind(src, target, true)
}

/// Binds `src` on `target` with nosuid,nodev (and read-only if asked). Later binds of
/// `target` (LXC's, into a container) inherit these flags.
pub fn bind(src: &Path, target: &Path, read_only: bool) -> Result<(), SysError> {
    let s = cpath(src)?;
    let t = cpath(target)?;
    sys_mount(Some(&s), &t, None, libc::MS_BIND, None)
        .map_err(|e| SysError::io(format!("bind-mount {} on", src.display()), target, e))?;
    let mut flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV;
    if read_only {
        flags |= libc::MS_RDONLY;
    }
    if let Err(e) = sys_mount(None, &t, None, flags, None) {
        if let Err(u) = umount(target, true) {
            log::warn!("cannot undo bind after failed remount: {u}");
        }
        return Err(SysError::io("remount nosuid,nodev", target, e));
    }
    Ok(())
}

/// Unmounts `target` (lazily with `lazy`, i.e. `MNT_DETACH`); never follows a final symlink.
/// Returns whether something was unmounted: a path that is not a mount point (EINVAL) or does
/// not exist (ENOENT) gives `Ok(false)`, so cleanup can call this unconditionally.
pub fn umount(target: &Path, lazy: bool) -> Result<bool, SysError> {
    let t = cpath(target)?;
    let mut flags = libc::UMOUNT_NOFOLLOW;
    if lazy {
        flags |= libc::MNT_DETACH;
    }
    // SAFETY: `t` is a NUL-terminated string that lives across the call.
    let rc = unsafe { libc::umount2(t.as_ptr(), flags) };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EINVAL) | Some(libc::ENOENT) => Ok(false),
        _ => Err(SysError::io("unmount", target, e)),
    }
}

/// One line of `/proc/<pid>/mountinfo` (see proc(5)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    pub mount_id: u32,
    pub parent_id: u32,
    /// The root of the mount within its file system (differs from "/" for bind mounts).
    pub root: PathBuf,
    pub mount_point: PathBuf,
    pub fs_type: String,
    pub source: String,
    /// Per-mount options ("ro,nosuid,nodev,relatime").
    pub options: String,
    /// Per-superblock options ("rw,lowerdir=…").
    pub super_options: String,
}

/// Undoes the octal escapes (`\040` space, `\011` tab, `\012` newline, `\134` backslash) that
/// the kernel puts in mountinfo fields.
fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            if v <= 0xff {
                out.push(v as u8);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

fn unescape_path(field: &str) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(&unescape(field)))
}

fn unescape_string(field: &str) -> String {
    String::from_utf8_lossy(&unescape(field)).into_owned()
}

fn parse_line(line: &str) -> Option<MountInfo> {
    let mut it = line.split(' ');
    let mount_id = it.next()?.parse().ok()?;
    let parent_id = it.next()?.parse().ok()?;
    let _dev = it.next()?;
    let root = unescape_path(it.next()?);
    let mount_point = unescape_path(it.next()?);
    let options = it.next()?.to_string();
    // Optional fields ("shared:1 master:2") end with a lone "-".
    loop {
        if it.next()? == "-" {
            break;
        }
    }
    let fs_type = unescape_string(it.next()?);
    let source = unescape_string(it.next()?);
    let super_options = it.next().unwrap_or("").to_string();
    Some(MountInfo {
        mount_id,
        parent_id,
        root,
        mount_point,
        fs_type,
        source,
        options,
        super_options,
    })
}

/// Parses mountinfo text; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountInfo> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(parse_line)
        .collect()
}

/// The mounts at or below `prefix` (component-wise), in mount order as listed in
/// `<proc_root>/self/mountinfo`: unmount them in reverse.
pub fn mounts_under(proc_root: &Path, prefix: &Path) -> Result<Vec<MountInfo>, SysError> {
    let p = proc_root.join("self/mountinfo");
    let text = std::fs::read_to_string(&p).map_err(|e| SysError::io("read", &p, e))?;
    Ok(parse_mountinfo(&text)
        .into_iter()
        .filter(|m| m.mount_point.starts_with(prefix))
        .collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// `umount(target, false)`, waiting out EBUSY for up to 2 s. Other tests in this binary
    /// fork children that do not exec: one forked while this test had a file of the mount
    /// open holds that file, and so the mount, until it exits.
    pub fn umount_waiting(target: &Path) -> bool {
        for _ in 0..100 {
            match umount(target, false) {
                Err(SysError::Io { ref error, .. })
                    if error.raw_os_error() == Some(libc::EBUSY) =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                r => return r.unwrap(),
            }
        }
        umount(target, false).unwrap()
    }

    /// A temp dir removed on drop, after lazily unmounting anything still mounted below it.
    pub(crate) struct TempDir(pub PathBuf);

    impl TempDir {
        pub(crate) fn new(tag: &str) -> TempDir {
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "berth-sys-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
        pub(crate) fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            if let Ok(ms) = mounts_under(Path::new("/proc"), &self.0) {
                for m in ms.iter().rev() {
                    let _ = umount(&m.mount_point, true);
                }
            }
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Unmounts a path on drop (test cleanup even when an assertion fails).
    pub(crate) struct MountGuard(pub PathBuf);
    impl Drop for MountGuard {
        fn drop(&mut self) {
            let _ = umount(&self.0, true);
        }
    }

    pub(crate) fn require_root(what: &str) {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        assert_eq!(
            uid, 0,
            "{what} needs root (these tests run as root for real)"
        );
    }

    pub(crate) fn require_fs(fs: &str) {
        let t = std::fs::read_to_string("/proc/filesystems").expect("read /proc/filesystems");
        assert!(
            t.lines().any(|l| l.split_whitespace().last() == Some(fs)),
            "kernel feature missing: file system {fs} is not in /proc/filesystems"
        );
    }

    const FIXTURE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 22 7:0 / /run/berth/store/ab\\040cd ro,nosuid,nodev,relatime shared:5 master:3 - squashfs /dev/loop0 ro,errors=continue
51 22 0:40 / /run/berth/rootfs/web ro,nosuid,nodev - overlay overlay ro,lowerdir=/a:/b
52 51 8:1 /usr/lib /run/berth/rootfs/web/usr/lib ro - ext4 /dev/sda1 rw
53 22 0:41 / /run/berth/rootfs/webx rw - tmpfs tmpfs rw
garbage line
";

    #[test]
    fn parses_mountinfo_fixture() {
        let ms = parse_mountinfo(FIXTURE);
        assert_eq!(ms.len(), 7);
        assert_eq!(ms[0].mount_id, 22);
        assert_eq!(ms[0].parent_id, 1);
        assert_eq!(ms[0].fs_type, "ext4");
        assert_eq!(ms[0].source, "/dev/sda1");
        assert_eq!(ms[0].options, "rw,relatime");
        assert_eq!(ms[0].super_options, "rw,errors=remount-ro");
        assert_eq!(ms[3].mount_point, Path::new("/run/berth/store/ab cd"));
        assert_eq!(ms[3].fs_type, "squashfs");
        assert_eq!(ms[3].source, "/dev/loop0");
        assert_eq!(ms[5].root, Path::new("/usr/lib"));
        assert_eq!(ms[5].parent_id, 51);
    }

    #[test]
    fn unescapes_octal() {
        assert_eq!(unescape("a\\040b\\011c\\012d\\134e"), b"a b\tc\nd\\e");
        assert_eq!(unescape("trailing\\04"), b"trailing\\04");
        assert_eq!(unescape("\\999"), b"\\999");
    }

    #[test]
    fn mounts_under_fixture_is_component_wise() {
        let d = TempDir::new("mi");
        std::fs::create_dir_all(d.path().join("self")).unwrap();
        std::fs::write(d.path().join("self/mountinfo"), FIXTURE).unwrap();
        let ms = mounts_under(d.path(), Path::new("/run/berth/rootfs/web")).unwrap();
        let pts: Vec<_> = ms.iter().map(|m| m.mount_point.clone()).collect();
        assert_eq!(
            pts,
            vec![
                PathBuf::from("/run/berth/rootfs/web"),
                PathBuf::from("/run/berth/rootfs/web/usr/lib")
            ]
        );
        let e = mounts_under(&d.path().join("nope"), Path::new("/")).unwrap_err();
        assert!(e.to_string().starts_with("read "), "{e}");
    }

    #[test]
    fn overlay_options_validate() {
        let a = Path::new("/s/a");
        let b = Path::new("/s/b");
        assert_eq!(overlay_options(&[a, b]).unwrap(), "lowerdir=/s/a:/s/b");
        assert!(overlay_options(&[a])
            .unwrap_err()
            .to_string()
            .contains("bind"));
        assert!(overlay_options(&[a, Path::new("/x:y")]).is_err());
        assert!(overlay_options(&[a, Path::new("/x,y")]).is_err());
        let long = "/".to_string() + &"x".repeat(3000);
        assert!(overlay_options(&[Path::new(&long), Path::new(&long)]).is_err());
    }

    #[test]
    fn error_messages_name_op_and_path() {
        let e = SysError::io(
            "mount overlay on",
            Path::new("/run/berth/rootfs/web"),
            io::Error::from_raw_os_error(libc::ENOENT),
        );
        assert_eq!(
            e.to_string(),
            "mount overlay on /run/berth/rootfs/web: No such file or directory (os error 2)"
        );
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn real_overlay_and_bind_ro() {
        require_root("overlay/bind mount test");
        require_fs("overlay");
        let d = TempDir::new("ovl");
        let (a, b, t, bt) = (
            d.path().join("a"),
            d.path().join("b"),
            d.path().join("t"),
            d.path().join("bt"),
        );
        for p in [&a, &b, &t, &bt] {
            std::fs::create_dir(p).unwrap();
        }
        std::fs::write(a.join("f"), "top").unwrap();
        std::fs::write(b.join("f"), "bottom").unwrap();
        std::fs::write(b.join("g"), "only-b").unwrap();

        mount_overlay_ro(&[&a, &b], &t).unwrap();
        let _g1 = MountGuard(t.clone());
        assert_eq!(std::fs::read_to_string(t.join("f")).unwrap(), "top");
        assert_eq!(std::fs::read_to_string(t.join("g")).unwrap(), "only-b");
        let w = std::fs::write(t.join("new"), "x").unwrap_err();
        assert_eq!(w.raw_os_error(), Some(libc::EROFS), "{w}");
        let ms = mounts_under(Path::new("/proc"), &t).unwrap();
        assert_eq!(ms.len(), 1);
        assert_eq!(ms[0].fs_type, "overlay");
        for o in ["ro", "nosuid", "nodev"] {
            assert!(
                ms[0].options.split(',').any(|x| x == o),
                "{}",
                ms[0].options
            );
        }

        bind_ro(&b, &bt).unwrap();
        let _g2 = MountGuard(bt.clone());
        assert_eq!(std::fs::read_to_string(bt.join("g")).unwrap(), "only-b");
        let w = std::fs::write(bt.join("g"), "x").unwrap_err();
        assert_eq!(w.raw_os_error(), Some(libc::EROFS), "{w}");
        let ms = mounts_under(Path::new("/proc"), &bt).unwrap();
        assert_eq!(ms.len(), 1);
        for o in ["ro", "nosuid", "nodev"] {
            assert!(
                ms[0].options.split(',').any(|x| x == o),
                "{}",
                ms[0].options
            );
        }

        assert!(umount_waiting(&bt));
        assert!(!umount(&bt, false).unwrap(), "second umount is a no-op");
        assert!(umount(&t, true).unwrap());
        assert!(!umount(&d.path().join("missing"), false).unwrap());

        let e = mount_overlay_ro(&[&a, &b], &d.path().join("missing")).unwrap_err();
        assert!(
            e.to_string().starts_with("mount overlay on ") && e.to_string().contains("missing"),
            "{e}"
        );
    }
}
