//! The kernel behind one boundary: the operations the daemon's apply code asks of the host,
//! as traits, so that a recording fake (berth-testkit's `fake_host`) can stand in for the
//! kernel in unit tests that run without root, failures included (a mount refused half-way).
//! The daemon holds a [`Host`] of `&'static dyn` parts ([`REAL`] in every build): one pointer
//! per concern, no generics, so the binary carries each operation once.

use std::io;
use std::path::{Path, PathBuf};

use crate::mount::{MountInfo, SysError};

/// Mounts and loop devices (the images, merged roots, /data and bindings).
pub trait Mounts: Sync {
    /// [`crate::loopdev::mount_squashfs`]: the image read-only on `target`.
    fn mount_squashfs(&self, image: &Path, target: &Path) -> Result<(), SysError>;
    /// [`crate::loopdev::mount_ext4`]: a capped /data image read-write on `target`; the loop
    /// device used.
    fn mount_ext4(&self, image: &Path, target: &Path) -> Result<PathBuf, SysError>;
    /// [`crate::mount::mount_overlay_ro`]: `lowers` (top first) merged read-only on `target`.
    fn mount_overlay_ro(&self, lowers: &[&Path], target: &Path) -> Result<(), SysError>;
    /// [`crate::mount::bind`].
    fn bind(&self, src: &Path, target: &Path, read_only: bool) -> Result<(), SysError>;
    /// [`crate::mountns::bind_shared`]: `dir` bound onto itself and made a shared mount (a
    /// container's bind anchor).
    fn bind_shared(&self, dir: &Path) -> io::Result<()>;
    /// [`crate::mount::umount`]: whether something was mounted there.
    fn umount(&self, target: &Path, lazy: bool) -> Result<bool, SysError>;
    /// [`crate::mount::mounts_under`]: the mounts at or below `prefix`, as `proc_root`'s
    /// mountinfo shows them.
    fn mounts_under(&self, proc_root: &Path, prefix: &Path) -> Result<Vec<MountInfo>, SysError>;
}

/// Signals to processes: a container's init and payload, the daemon's helpers.
pub trait Signals: Sync {
    /// [`crate::process::kill`].
    fn kill(&self, pid: libc::pid_t, sig: libc::c_int) -> io::Result<()>;
}

/// What the daemon asks of the host, one part per concern.
pub struct Host {
    pub mounts: &'static dyn Mounts,
    pub signals: &'static dyn Signals,
}

/// The kernel itself.
pub static REAL: Host = Host {
    mounts: &RealMounts,
    signals: &RealSignals,
};

struct RealSignals;

impl Signals for RealSignals {
    fn kill(&self, pid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
        crate::process::kill(pid, sig)
    }
}

struct RealMounts;

impl Mounts for RealMounts {
    fn mount_squashfs(&self, image: &Path, target: &Path) -> Result<(), SysError> {
        crate::loopdev::mount_squashfs(image, target)
    }
    fn mount_ext4(&self, image: &Path, target: &Path) -> Result<PathBuf, SysError> {
        crate::loopdev::mount_ext4(image, target)
    }
    fn mount_overlay_ro(&self, lowers: &[&Path], target: &Path) -> Result<(), SysError> {
        crate::mount::mount_overlay_ro(lowers, target)
    }
    fn bind(&self, src: &Path, target: &Path, read_only: bool) -> Result<(), SysError> {
        crate::mount::bind(src, target, read_only)
    }
    fn bind_shared(&self, dir: &Path) -> io::Result<()> {
        crate::mountns::bind_shared(dir)
    }
    fn umount(&self, target: &Path, lazy: bool) -> Result<bool, SysError> {
        crate::mount::umount(target, lazy)
    }
    fn mounts_under(&self, proc_root: &Path, prefix: &Path) -> Result<Vec<MountInfo>, SysError> {
        crate::mount::mounts_under(proc_root, prefix)
    }
}
