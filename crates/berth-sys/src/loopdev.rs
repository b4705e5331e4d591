//! Read-only squashfs mounts, and writable ext4 mounts of /data images, through loop devices,
//! without losetup.
//!
//! The loop device is set up with `LOOP_CONFIGURE` (Linux ≥ 5.8) or, on older kernels, with
//! `LOOP_SET_FD` + `LOOP_SET_STATUS64`; in both cases it is read-only for a squashfs (the image
//! is opened read-only) and auto-clearing: it is released when its last user goes away, i.e.
//! when the file system is unmounted. Our own fd on the device is kept open until mount(2) has returned,
//! since closing it earlier would free the device under us.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use crate::mount::{cpath, sys_mount, SysError};

// From <linux/loop.h>.
const LOOP_SET_FD: libc::c_ulong = 0x4C00;
const LOOP_CLR_FD: libc::c_ulong = 0x4C01;
const LOOP_SET_STATUS64: libc::c_ulong = 0x4C04;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LO_FLAGS_READ_ONLY: u32 = 1;
const LO_FLAGS_AUTOCLEAR: u32 = 4;
const LO_NAME_SIZE: usize = 64;
const LO_KEY_SIZE: usize = 32;

#[repr(C)]
#[derive(Clone, Copy)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; LO_NAME_SIZE],
    lo_crypt_name: [u8; LO_NAME_SIZE],
    lo_encrypt_key: [u8; LO_KEY_SIZE],
    lo_init: [u64; 2],
}

#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

const _: () = assert!(std::mem::size_of::<LoopInfo64>() == 232);
const _: () = assert!(std::mem::size_of::<LoopConfig>() == 304);

/// How many times a free device is looked up again when another process took it first.
const BUSY_RETRIES: usize = 32;

fn loop_info(image: &Path, flags: u32) -> LoopInfo64 {
    let mut info = LoopInfo64 {
        lo_device: 0,
        lo_inode: 0,
        lo_rdevice: 0,
        lo_offset: 0,
        lo_sizelimit: 0,
        lo_number: 0,
        lo_encrypt_type: 0,
        lo_encrypt_key_size: 0,
        lo_flags: flags,
        lo_file_name: [0; LO_NAME_SIZE],
        lo_crypt_name: [0; LO_NAME_SIZE],
        lo_encrypt_key: [0; LO_KEY_SIZE],
        lo_init: [0; 2],
    };
    // Informational only (losetup shows it); the kernel reports the real path in sysfs.
    let b = std::os::unix::ffi::OsStrExt::as_bytes(image.as_os_str());
    let n = b.len().min(LO_NAME_SIZE - 1);
    info.lo_file_name[..n].copy_from_slice(&b[..n]);
    info
}

fn ioctl_arg(fd: RawFd, req: libc::c_ulong, arg: libc::c_ulong) -> io::Result<libc::c_int> {
    // SAFETY: the requests passed here (LOOP_CTL_GET_FREE, LOOP_SET_FD, LOOP_CLR_FD) take an
    // integer argument, not a pointer, so no memory is read or written through `arg`.
    let rc = unsafe { libc::ioctl(fd, req as _, arg) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn ioctl_ptr<T>(fd: RawFd, req: libc::c_ulong, arg: &T) -> io::Result<()> {
    // SAFETY: the requests passed here (LOOP_CONFIGURE, LOOP_SET_STATUS64) read a struct of
    // exactly type T (layouts checked against <linux/loop.h> by the size asserts above);
    // `arg` is a valid reference for the duration of the call and is only read.
    let rc = unsafe { libc::ioctl(fd, req as _, arg as *const T) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::ENOTTY) | Some(libc::ENOSYS)
    )
}

enum Bind {
    Bound,
    Busy,
}

#[cfg(test)]
thread_local! {
    /// Whether the last bind on this thread took the legacy path (tests check the path taken).
    static LEGACY_USED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Binds `img` to the open loop device with the legacy two-step interface.
fn bind_legacy(dev: &File, img: &File, image: &Path, devpath: &Path) -> Result<Bind, SysError> {
    #[cfg(test)]
    LEGACY_USED.with(|c| c.set(true));
    match ioctl_arg(
        dev.as_raw_fd(),
        LOOP_SET_FD,
        img.as_raw_fd() as libc::c_ulong,
    ) {
        Ok(_) => {}
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(Bind::Busy),
        Err(e) => return Err(SysError::io("attach image to", devpath, e)),
    }
    // READ_ONLY is not settable here; the device is read-only when the image fd is.
    let info = loop_info(image, LO_FLAGS_AUTOCLEAR);
    if let Err(e) = ioctl_ptr(dev.as_raw_fd(), LOOP_SET_STATUS64, &info) {
        let _ = ioctl_arg(dev.as_raw_fd(), LOOP_CLR_FD, 0);
        return Err(SysError::io("set autoclear on", devpath, e));
    }
    Ok(Bind::Bound)
}

/// Binds `img` to the open loop device; `Busy` when another process bound it first.
fn bind(
    dev: &File,
    img: &File,
    image: &Path,
    devpath: &Path,
    writable: bool,
    force_legacy: bool,
) -> Result<Bind, SysError> {
    if !force_legacy {
        let ro = if writable { 0 } else { LO_FLAGS_READ_ONLY };
        let cfg = LoopConfig {
            fd: img.as_raw_fd() as u32,
            block_size: 0,
            info: loop_info(image, ro | LO_FLAGS_AUTOCLEAR),
            reserved: [0; 8],
        };
        match ioctl_ptr(dev.as_raw_fd(), LOOP_CONFIGURE, &cfg) {
            Ok(()) => return Ok(Bind::Bound),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(Bind::Busy),
            Err(e) if is_unsupported(&e) => {
                log::debug!("LOOP_CONFIGURE unsupported ({e}), using LOOP_SET_FD");
            }
            Err(e) => return Err(SysError::io("configure", devpath, e)),
        }
    }
    bind_legacy(dev, img, image, devpath)
}

/// Mounts the squashfs `image` read-only (ro, nosuid, nodev) on `target` through a free,
/// auto-clearing loop device; unmounting `target` frees the device.
pub fn mount_squashfs(image: &Path, target: &Path) -> Result<(), SysError> {
    mount_squashfs_with(Path::new("/dev"), image, target, false).map(|_| ())
}

/// [`mount_squashfs`] with the device directory (normally `/dev`) as a parameter and a switch
/// forcing the pre-5.8 `LOOP_SET_FD` path (for kernels whose `LOOP_CONFIGURE` misbehaves, and
/// for tests); returns the loop device used.
pub fn mount_squashfs_with(
    dev_root: &Path,
    image: &Path,
    target: &Path,
    force_legacy: bool,
) -> Result<PathBuf, SysError> {
    mount_loop(dev_root, image, target, "squashfs", false, force_legacy)
}

/// Mounts the ext4 file system in `image` read-write with nosuid,nodev on `target` through a
/// free, auto-clearing loop device (a container's capped /data); unmounting `target` frees the
/// device. Returns the loop device used.
pub fn mount_ext4(image: &Path, target: &Path) -> Result<PathBuf, SysError> {
    mount_loop(Path::new("/dev"), image, target, "ext4", true, false)
}

fn mount_loop(
    dev_root: &Path,
    image: &Path,
    target: &Path,
    fstype: &str,
    writable: bool,
    force_legacy: bool,
) -> Result<PathBuf, SysError> {
    let img = OpenOptions::new()
        .read(true)
        .write(writable)
        .custom_flags(libc::O_CLOEXEC)
        .open(image)
        .map_err(|e| SysError::io("open image", image, e))?;
    let t = cpath(target)?;
    let fs = std::ffi::CString::new(fstype)
        .map_err(|_| SysError::Invalid(format!("file system type {fstype:?}")))?;
    let ctl_path = dev_root.join("loop-control");
    let ctl = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&ctl_path)
        .map_err(|e| SysError::io("open (is the loop driver loaded?)", &ctl_path, e))?;

    let mut last_busy = None;
    for _ in 0..BUSY_RETRIES {
        let n =
            ioctl_arg(ctl.as_raw_fd(), LOOP_CTL_GET_FREE, 0).map_err(|e| SysError::NoFreeLoop {
                image: image.to_path_buf(),
                detail: format!("LOOP_CTL_GET_FREE: {e}"),
            })?;
        let devpath = dev_root.join(format!("loop{n}"));
        let dev = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&devpath)
            .map_err(|e| SysError::io("open loop device", &devpath, e))?;
        match bind(&dev, &img, image, &devpath, writable, force_legacy)? {
            Bind::Busy => {
                log::debug!(
                    "{} was taken by another process, retrying",
                    devpath.display()
                );
                last_busy = Some(devpath);
                continue;
            }
            Bind::Bound => {}
        }
        let src = cpath(&devpath)?;
        let mut flags = libc::MS_NOSUID | libc::MS_NODEV;
        if !writable {
            flags |= libc::MS_RDONLY;
        }
        let r = sys_mount(Some(&src), &t, Some(&fs), flags, None).map_err(|e| {
            SysError::io(
                format!(
                    "mount {fstype} {} ({}) on",
                    image.display(),
                    devpath.display()
                ),
                target,
                e,
            )
        });
        // Only now may our fd go: the mount holds the device, or (on error) autoclear frees it.
        drop(dev);
        return r.map(|()| devpath);
    }
    Err(SysError::NoFreeLoop {
        image: image.to_path_buf(),
        detail: format!(
            "every free device was taken by another process, {BUSY_RETRIES} tries, last {}",
            last_busy
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        ),
    })
}

/// A bound loop device as seen in sysfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopDevice {
    /// "loop3"
    pub name: String,
    /// The backing file as the kernel reports it (may end in " (deleted)").
    pub backing_file: PathBuf,
    pub autoclear: bool,
    pub read_only: bool,
}

/// The bound loop devices listed in `<sys_root>/block/loop*/loop/backing_file`, sorted by name.
pub fn loop_backing_files(sys_root: &Path) -> io::Result<Vec<LoopDevice>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(sys_root.join("block"))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        let dir = e.path();
        let backing = match std::fs::read(dir.join("loop/backing_file")) {
            Ok(b) => b,
            // Unbound devices have no loop/ directory, or it vanished while we looked.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let mut backing = backing;
        while backing.last() == Some(&b'\n') {
            backing.pop();
        }
        let flag = |p: &str| {
            std::fs::read_to_string(dir.join(p))
                .map(|s| s.trim() == "1")
                .unwrap_or(false)
        };
        out.push(LoopDevice {
            backing_file: PathBuf::from(
                <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(backing),
            ),
            autoclear: flag("loop/autoclear"),
            read_only: flag("ro"),
            name,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mount::mounts_under;
    use crate::mount::tests::{require_fs, require_root, umount_waiting, MountGuard, TempDir};

    fn make_image(d: &TempDir) -> PathBuf {
        let src = d.path().join("src");
        std::fs::create_dir_all(src.join("bin")).unwrap();
        std::fs::write(src.join("bin/hello"), "hello from squashfs\n").unwrap();
        let img = d.path().join("pkg.sqfs");
        let out = std::process::Command::new("mksquashfs")
            .arg(&src)
            .arg(&img)
            .args(["-noappend", "-quiet", "-no-progress"])
            .output()
            .expect("mksquashfs (squashfs-tools) is needed to build the test image");
        assert!(out.status.success(), "mksquashfs failed: {out:?}");
        img
    }

    fn check_mount(force_legacy: bool) {
        require_root("loop device test");
        require_fs("squashfs");
        assert!(
            Path::new("/dev/loop-control").exists(),
            "kernel feature missing: /dev/loop-control (loop driver)"
        );
        let d = TempDir::new(if force_legacy { "loop-legacy" } else { "loop" });
        let img = make_image(&d);
        let target = d.path().join("mnt");
        std::fs::create_dir(&target).unwrap();

        LEGACY_USED.with(|c| c.set(false));
        let dev = mount_squashfs_with(Path::new("/dev"), &img, &target, force_legacy).unwrap();
        // This kernel (≥ 5.8) has LOOP_CONFIGURE: the legacy path runs only when forced.
        assert_eq!(LEGACY_USED.with(|c| c.get()), force_legacy);
        let _g = MountGuard(target.clone());
        assert_eq!(
            std::fs::read_to_string(target.join("bin/hello")).unwrap(),
            "hello from squashfs\n"
        );
        let ms = mounts_under(Path::new("/proc"), &target).unwrap();
        assert_eq!(ms.len(), 1);
        assert_eq!(ms[0].fs_type, "squashfs");
        assert_eq!(Path::new(&ms[0].source), dev);
        for o in ["ro", "nosuid", "nodev"] {
            assert!(
                ms[0].options.split(',').any(|x| x == o),
                "{}",
                ms[0].options
            );
        }

        let name = dev.file_name().unwrap().to_str().unwrap().to_string();
        let loops = loop_backing_files(Path::new("/sys")).unwrap();
        let l = loops
            .iter()
            .find(|l| l.name == name)
            .unwrap_or_else(|| panic!("{name} not in sysfs: {loops:?}"));
        assert_eq!(l.backing_file, img);
        assert!(l.autoclear, "{l:?}");
        assert!(l.read_only, "{l:?}");

        assert!(umount_waiting(&target));
        // Autoclear releases the device once the mount is gone (the kernel may take a moment).
        let mut freed = false;
        for _ in 0..100 {
            let still = loop_backing_files(Path::new("/sys"))
                .unwrap()
                .into_iter()
                .any(|l| l.name == name && l.backing_file == img);
            if !still {
                freed = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(
            freed,
            "{name} still bound to {} after umount",
            img.display()
        );
    }

    #[test]
    fn squashfs_via_loop_configure() {
        check_mount(false);
    }

    #[test]
    fn squashfs_via_legacy_set_fd() {
        check_mount(true);
    }

    #[test]
    fn ext4_image_mounts_writable() {
        require_root("loop device test");
        require_fs("ext4");
        let d = TempDir::new("loop-ext4");
        let img = d.path().join("data.img");
        std::fs::File::create(&img)
            .unwrap()
            .set_len(4 << 20)
            .unwrap();
        let out = std::process::Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "0"])
            .arg(&img)
            .output()
            .expect("mkfs.ext4 (e2fsprogs) is needed to build the test image");
        assert!(out.status.success(), "mkfs.ext4 failed: {out:?}");
        let target = d.path().join("mnt");
        std::fs::create_dir(&target).unwrap();
        let dev = mount_ext4(&img, &target).unwrap();
        let g = MountGuard(target.clone());
        std::fs::write(target.join("f"), "kept").unwrap();
        let ms = mounts_under(Path::new("/proc"), &target).unwrap();
        assert_eq!(ms[0].fs_type, "ext4");
        assert_eq!(Path::new(&ms[0].source), dev);
        let opts: Vec<&str> = ms[0].options.split(',').collect();
        assert!(opts.contains(&"rw") && opts.contains(&"nosuid") && opts.contains(&"nodev"));
        let name = dev.file_name().unwrap().to_str().unwrap().to_string();
        let l = loop_backing_files(Path::new("/sys"))
            .unwrap()
            .into_iter()
            .find(|l| l.name == name)
            .unwrap();
        assert!(l.autoclear && !l.read_only, "{l:?}");
        assert!(umount_waiting(&target));
        drop(g);
        let mut freed = false;
        for _ in 0..100 {
            if !loop_backing_files(Path::new("/sys"))
                .unwrap()
                .iter()
                .any(|l| l.backing_file == img)
            {
                freed = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(freed, "{name} still bound to {}", img.display());
    }

    #[test]
    fn errors_name_the_image() {
        let d = TempDir::new("loop-err");
        let e = mount_squashfs(&d.path().join("missing.sqfs"), d.path()).unwrap_err();
        let s = e.to_string();
        assert!(
            s.starts_with("open image ") && s.contains("missing.sqfs"),
            "{s}"
        );

        // A file that is not a squashfs: the loop is set up, the mount fails, the device is freed.
        require_root("loop device error test");
        let bogus = d.path().join("bogus.sqfs");
        std::fs::write(&bogus, vec![0u8; 8192]).unwrap();
        let target = d.path().join("mnt");
        std::fs::create_dir(&target).unwrap();
        let _g = MountGuard(target.clone());
        let e = mount_squashfs(&bogus, &target).unwrap_err();
        let s = e.to_string();
        assert!(
            s.starts_with("mount squashfs ") && s.contains("bogus.sqfs"),
            "{s}"
        );

        // The device set up for it was released when our fd closed (autoclear).
        let bound = || {
            loop_backing_files(Path::new("/sys"))
                .unwrap()
                .into_iter()
                .any(|l| l.backing_file == bogus)
        };
        let mut freed = false;
        for _ in 0..100 {
            if !bound() {
                freed = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(freed, "loop device for {} not released", bogus.display());

        let e = SysError::NoFreeLoop {
            image: PathBuf::from("/var/lib/berth/store/9f.sqfs"),
            detail: "LOOP_CTL_GET_FREE: No space left on device (os error 28)".into(),
        };
        assert!(e
            .to_string()
            .ends_with("free one with berth gc or raise max_loop"));
    }
}
