//! A container's /data with `containers.data_size`: an ext4 image of that size, made at the
//! first capped start (a plain data directory moves into it), grown when the cap grows, and
//! mounted through a loop device on `Paths::data_mount` while the container runs.
//!
//! ext4 with its journal: a router loses power, and a journal-less file system nobody checks
//! at mount would collect damage with every cut. `-m 0`: the cap is the operator's number,
//! no blocks held back for root (the container's root would be the one to use them).

use std::path::{Path, PathBuf};

use berth_core::state::Installed;
use berth_sys::fsutil::fsync_dir;
use berth_sys::host::LONG_TOOL_LIMIT;

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::prepare::security;

/// What a start does with a container's /data.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// No cap and no image: the plain directory, bound (today's way).
    Dir,
    /// Make the image (`migrate`: copy the plain directory into it first).
    Create { migrate: bool },
    /// Grow the image's file system from its size to the cap, then mount it.
    Grow { from: u64 },
    /// Mount the image as it is.
    Use,
}

/// The choice, from the cap, the image's size (if there is one) and whether a plain data
/// directory exists. Removing the cap does not move data back out of the image: the start is
/// refused, so that a package never silently starts on an empty /data beside its real one.
pub(crate) fn plan(
    name: &str,
    image: &Path,
    cap: Option<u64>,
    image_len: Option<u64>,
    dir_exists: bool,
) -> std::result::Result<Plan, String> {
    match (cap, image_len) {
        (None, None) => Ok(Plan::Dir),
        (None, Some(len)) => Err(format!(
            "{name}: its /data is in {} ({} bytes) but containers.data_size is not set: set it \
             again (at least {}), or copy the files out of the image and delete it",
            image.display(),
            len,
            human(len)
        )),
        (Some(_), None) => Ok(Plan::Create {
            migrate: dir_exists,
        }),
        (Some(cap), Some(len)) if len > cap => Err(format!(
            "{name}: its /data image {} is {}, larger than containers.data_size ({}): berth \
             does not shrink it; set data_size to at least {}",
            image.display(),
            human(len),
            human(cap),
            human(len)
        )),
        (Some(cap), Some(len)) if len < cap => Ok(Plan::Grow { from: len }),
        (Some(_), Some(_)) => Ok(Plan::Use),
    }
}

fn human(b: u64) -> String {
    if b.is_multiple_of(1 << 20) {
        format!("{}M", b >> 20)
    } else if b.is_multiple_of(1024) {
        format!("{}K", b >> 10)
    } else {
        format!("{b}")
    }
}

/// Prepares a capped /data and mounts it on the container's data mount point; `Plan::Dir`
/// is the caller's.
pub(crate) fn mount_image(d: &Daemon, p: &Installed, cap: u64, plan: Plan) -> Result<()> {
    let name = p.name.as_str();
    let paths = &d.cfg.paths;
    let (image, dir, mnt) = (
        paths.data_image(name),
        paths.data(name),
        paths.data_mount(name),
    );
    // A leftover mount of a stopped container (the bind of an uncapped start, say) goes first.
    d.host
        .mounts
        .umount(&mnt, false)
        .map_err(|e| Error::new(Kind::MountFailed, format!("{name}: /data: {e}")))?;
    std::fs::create_dir_all(&mnt).map_err(Error::internal)?;
    match resumed(&image, plan, cap) {
        Plan::Dir => return Err(Error::internal("data::mount_image called without a cap")),
        Plan::Create { migrate } => create(d, p, cap, migrate)?,
        Plan::Grow { from } => grow(d, name, &image, from, cap)?,
        Plan::Use => {}
    }
    // The copy of a plain directory is complete once the image has its name: a directory
    // still there is what a power cut left between the rename and its removal.
    if dir.is_dir() {
        log::warn!(
            "{name}: removing {} (its files are in {})",
            dir.display(),
            image.display()
        );
        berth_sys::tree::remove_path(&dir)
            .map_err(|e| Error::internal(format!("remove {}: {e}", dir.display())))?;
    }
    d.host
        .mounts
        .mount_ext4(&image, &mnt)
        .map_err(|e| Error::new(Kind::MountFailed, format!("{name}: /data: {e}")))?;
    security::own_data(d, p, &mnt)
}

/// Marks an image whose file system is being grown (`NAME.img.growing`): a resize2fs cut
/// short (its time limit, a power cut) leaves it, and the next start checks and grows the
/// file system again before it mounts it. A purge deletes it.
pub(crate) fn growing(image: &Path) -> PathBuf {
    image.with_extension("img.growing")
}

/// The plan, unless a growth was cut short: then grown again (the file has its new size).
fn resumed(image: &Path, plan: Plan, cap: u64) -> Plan {
    match plan {
        Plan::Use if growing(image).exists() => Plan::Grow { from: cap },
        p => p,
    }
}

/// Where an image is made (`NAME.img.tmp`) before it gets its name; a purge deletes one a
/// crash left.
pub(crate) fn in_making(image: &Path) -> PathBuf {
    image.with_extension("img.tmp")
}

/// Makes the image under a temporary name, fills it (root directory owned as the plain one
/// would be, or the plain directory's files), and names it only once that all worked: a
/// failure leaves the plain directory as it was and no image.
fn create(d: &Daemon, p: &Installed, cap: u64, migrate: bool) -> Result<()> {
    let name = p.name.as_str();
    let paths = &d.cfg.paths;
    let (image, dir, mnt) = (
        paths.data_image(name),
        paths.data(name),
        paths.data_mount(name),
    );
    let tmp = in_making(&image);
    let fail = |msg: String| {
        let _ = d.host.mounts.umount(&mnt, true);
        let _ = std::fs::remove_file(&tmp);
        Error::new(Kind::MountFailed, format!("{name}: /data: {msg}"))
    };
    if let Some(parent) = image.parent() {
        std::fs::create_dir_all(parent).map_err(Error::internal)?;
    }
    std::fs::File::create(&tmp)
        .and_then(|f| f.set_len(cap))
        .map_err(|e| fail(format!("cannot make {}: {e}", tmp.display())))?;
    run(
        d,
        "mkfs.ext4",
        &["-q", "-F", "-m", "0", "-E", "nodiscard"],
        &tmp,
    )
    .map_err(fail)?;
    d.host
        .mounts
        .mount_ext4(&tmp, &mnt)
        .map_err(|e| fail(e.to_string()))?;
    let fill = || -> std::result::Result<(), String> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        // lost+found is e2fsck's; the package's /data starts empty (e2fsck makes it again
        // when it needs it).
        let _ = std::fs::remove_dir(mnt.join("lost+found"));
        let (mode, uid, gid) = if migrate {
            let md = std::fs::metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            (md.mode() & 0o7777, md.uid(), md.gid())
        } else {
            let e = &p.manifest.entrypoint;
            (0o750, e.user, e.group)
        };
        std::fs::set_permissions(&mnt, PermissionsExt::from_mode(mode))
            .and_then(|()| std::os::unix::fs::chown(&mnt, Some(uid), Some(gid)))
            .map_err(|e| format!("{}: {e}", mnt.display()))?;
        if migrate {
            // The container's tree, walked by descriptor beneath its top (links copied as
            // links, never followed); the image's size bounds it.
            let copied = berth_sys::tree::Dir::open(&dir).and_then(|from| {
                berth_sys::tree::copy_tree(&from, &berth_sys::tree::Dir::open(&mnt)?, u64::MAX)
            });
            if let Err(e) = copied {
                return Err(format!(
                    "cannot copy {} into its image (does it fit in containers.data_size?): {e}; \
                     the directory is kept as it was",
                    dir.display()
                ));
            }
        }
        Ok(())
    };
    fill().map_err(fail)?;
    // The unmount writes everything out; only then is the image complete.
    d.host
        .mounts
        .umount(&mnt, false)
        .map_err(|e| fail(e.to_string()))?;
    std::fs::rename(&tmp, &image).map_err(|e| fail(format!("rename {}: {e}", tmp.display())))?;
    if let Some(parent) = image.parent() {
        let _ = fsync_dir(parent);
    }
    if migrate {
        log::info!("{name}: /data moved into {}", image.display());
    }
    Ok(())
}

/// Grows the image file and then its file system (offline: e2fsck first, as resize2fs asks).
fn grow(d: &Daemon, name: &str, image: &Path, from: u64, cap: u64) -> Result<()> {
    let err = |m: String| Error::new(Kind::MountFailed, format!("{name}: /data: {m}"));
    // Before the file changes: without resize2fs nothing is touched.
    let resize2fs = tool("resize2fs").map_err(err)?;
    tool("e2fsck").map_err(err)?;
    std::fs::OpenOptions::new()
        .write(true)
        .open(image)
        .and_then(|f| f.set_len(cap))
        .map_err(|e| err(format!("cannot grow {}: {e}", image.display())))?;
    let undo = |m: String| {
        // The file system still fits its old size; the file goes back to it, so the next
        // start tries again.
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .open(image)
            .and_then(|f| f.set_len(from));
        err(m)
    };
    let e2fsck = tool("e2fsck").map_err(err)?;
    let out = d
        .host
        .tools
        .run(
            &path_str(&e2fsck),
            &["-f", "-p", &path_str(image)],
            None,
            LONG_TOOL_LIMIT,
        )
        .map_err(|e| undo(format!("e2fsck: {}", e.io())))?;
    // 0: clean, 1: errors corrected.
    if !matches!(out.status.code(), Some(0 | 1)) {
        return Err(undo(format!(
            "e2fsck {} before growing it failed: {}",
            image.display(),
            last_line(&out.stderr)
        )));
    }
    // From here the file system may reach past the old size: the file keeps its new one.
    let mark = growing(image);
    std::fs::write(&mark, b"")
        .and_then(|()| image.parent().map_or(Ok(()), fsync_dir))
        .map_err(|e| undo(format!("write {}: {e}", mark.display())))?;
    let out = d
        .host
        .tools
        .run(
            &path_str(&resize2fs),
            &[&path_str(image)],
            None,
            LONG_TOOL_LIMIT,
        )
        .map_err(|e| err(format!("resize2fs: {}", e.io())))?;
    if !out.status.success() {
        return Err(err(format!(
            "resize2fs {} failed: {}",
            image.display(),
            last_line(&out.stderr)
        )));
    }
    let _ = std::fs::remove_file(&mark);
    log::info!("{name}: /data grew from {} to {}", human(from), human(cap));
    Ok(())
}

/// Where e2fsprogs' tools are looked for (the daemon may run with a short PATH).
const TOOL_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

/// An e2fsprogs tool: found in PATH or the usual sbin directories, or an error saying which
/// package has it.
fn tool(name: &str) -> std::result::Result<PathBuf, String> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(TOOL_PATH.split(':'))
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            format!(
                "{name} not found: containers.data_size needs e2fsprogs (Debian: apt install \
                 e2fsprogs; OpenWrt: opkg install e2fsprogs), or unset data_size"
            )
        })
}

/// A path as a tool's argument: the daemon's paths come from its configuration (text).
fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn run(d: &Daemon, name: &str, args: &[&str], file: &Path) -> std::result::Result<(), String> {
    let file_arg = path_str(file);
    let args: Vec<&str> = args.iter().copied().chain([file_arg.as_str()]).collect();
    let out = d
        .host
        .tools
        .run(&path_str(&tool(name)?), &args, None, LONG_TOOL_LIMIT)
        .map_err(|e| format!("{name}: {}", e.io()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{name} {} failed: {}",
            file.display(),
            last_line(&out.stderr)
        ))
    }
}

fn last_line(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(no message)")
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans() {
        let img = Path::new("/var/lib/berth/data/web.img");
        let p = |cap, len, dir| plan("web", img, cap, len, dir);
        assert_eq!(p(None, None, true), Ok(Plan::Dir));
        assert_eq!(p(None, None, false), Ok(Plan::Dir));
        assert_eq!(
            p(Some(8 << 20), None, true),
            Ok(Plan::Create { migrate: true })
        );
        assert_eq!(
            p(Some(8 << 20), None, false),
            Ok(Plan::Create { migrate: false })
        );
        assert_eq!(p(Some(8 << 20), Some(8 << 20), false), Ok(Plan::Use));
        assert_eq!(
            p(Some(16 << 20), Some(8 << 20), false),
            Ok(Plan::Grow { from: 8 << 20 })
        );
        let e = p(Some(4 << 20), Some(8 << 20), false).unwrap_err();
        assert!(
            e.contains("web.img") && e.contains("does not shrink") && e.contains("at least 8M"),
            "{e}"
        );
        let e = p(None, Some(8 << 20), false).unwrap_err();
        assert!(
            e.contains("containers.data_size is not set") && e.contains("at least 8M"),
            "{e}"
        );
    }
}

#[cfg(test)]
mod fake_host_tests {
    use super::*;
    use crate::daemon::base::testing::{fake_daemon, fakes, install, MANIFEST};

    const CAP: u64 = 8 << 20;

    /// A plain /data with a file, and the package it belongs to.
    fn setup(
        tag: &str,
    ) -> (
        berth_testkit::TempDir,
        Daemon,
        &'static berth_testkit::fake_host::FakeMounts,
        Installed,
    ) {
        let (dir, d, m) = fake_daemon(tag, "");
        fakes(&d).tools.answer("mkfs.ext4", &[], Ok(String::new()));
        let p = install(&d, MANIFEST);
        let data = d.cfg.paths.data("web");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("kept"), "the package's data").unwrap();
        (dir, d, m, p)
    }

    /// Nothing of a failed move into an image is left but the plain directory as it was.
    fn as_it_was(d: &Daemon) {
        let image = d.cfg.paths.data_image("web");
        assert!(!image.exists(), "{} made", image.display());
        assert!(
            !in_making(&image).exists(),
            "{} left",
            in_making(&image).display()
        );
        let kept = d.cfg.paths.data("web").join("kept");
        assert_eq!(std::fs::read_to_string(kept).unwrap(), "the package's data");
    }

    /// The image made for a capped /data cannot be mounted (no loop device): the start fails
    /// naming the container and /data, and the plain directory is as it was, no image made.
    #[test]
    fn a_refused_mount_of_the_new_image_leaves_the_plain_directory() {
        let (_dir, d, m, p) = setup("data-mount-refused");
        m.fail_next("mount_ext4", libc::ENXIO);
        let e = mount_image(&d, &p, CAP, Plan::Create { migrate: true }).unwrap_err();
        assert_eq!(e.kind, Kind::MountFailed);
        assert!(e.message.starts_with("web: /data: "), "{}", e.message);
        as_it_was(&d);
        assert!(m.mounted().is_empty(), "{:?}", m.mounted());
    }

    /// The unmount that writes the new image out fails (the mount is busy): the image is
    /// not named, the half-made one goes, the plain directory stays.
    #[test]
    fn a_refused_unmount_before_the_rename_leaves_the_plain_directory() {
        let (_dir, d, m, p) = setup("data-umount-refused");
        if uid() != 0 {
            // The image's root is given the directory's owner (chown): only root may.
            berth_sys::skip::record(
                "host root",
                "data: the unmount before the rename: the image's root is chowned, which needs root",
            );
            return;
        }
        // The first unmount is of a leftover mount; the second writes the image out.
        m.fail_after("umount", 1, libc::EBUSY);
        let e = mount_image(&d, &p, CAP, Plan::Create { migrate: true }).unwrap_err();
        assert_eq!(e.kind, Kind::MountFailed);
        as_it_was(&d);
        let ops: Vec<String> = m
            .calls()
            .iter()
            .map(|c| c.split(' ').next().unwrap().into())
            .collect();
        assert_eq!(
            ops,
            ["umount", "mount_ext4", "umount", "umount"],
            "{:?}",
            m.calls()
        );
    }

    /// A leftover mount that cannot be taken away stops the start before anything is made.
    #[test]
    fn a_leftover_mount_that_stays_stops_the_start_first() {
        let (_dir, d, m, p) = setup("data-leftover");
        m.fail_next("umount", libc::EBUSY);
        let e = mount_image(&d, &p, CAP, Plan::Create { migrate: true }).unwrap_err();
        assert_eq!(e.kind, Kind::MountFailed);
        as_it_was(&d);
        assert_eq!(m.calls().len(), 1, "{:?}", m.calls());
    }

    fn uid() -> u32 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid())
    }

    /// Growing /data: e2fsck first (its 1, errors corrected, is no failure), then resize2fs
    /// on the longer file; e2fsck failing puts the file back to its old size, the error
    /// naming the image and e2fsck's last words.
    #[test]
    fn growing_checks_first_and_a_failed_check_gives_the_old_size_back() {
        if tool("e2fsck").is_err() || tool("resize2fs").is_err() {
            berth_sys::skip::record(
                "host e2fsprogs",
                "data: growing needs e2fsck and resize2fs in PATH",
            );
            return;
        }
        let (dir, d, _) = fake_daemon("data-grow", "");
        let tools = fakes(&d).tools;
        let image = dir.path("web.img");
        std::fs::write(&image, vec![0u8; 4096]).unwrap();
        let shown = image.display().to_string();
        tools.answer_exit(
            "e2fsck",
            &[],
            1,
            "web: ***** FILE SYSTEM WAS MODIFIED *****",
        );
        tools.answer("resize2fs", &[], Ok(String::new()));
        grow(&d, "web", &image, 4096, 8192).unwrap();
        assert_eq!(std::fs::metadata(&image).unwrap().len(), 8192);
        let calls = tools.calls();
        // The file system's tools get the long limit.
        assert!(
            calls.iter().all(|c| c.limit == LONG_TOOL_LIMIT),
            "{calls:?}"
        );
        let words: Vec<(&str, Vec<String>)> = calls
            .iter()
            .map(|c| (c.prog.rsplit('/').next().unwrap(), c.args.clone()))
            .collect();
        assert_eq!(
            words,
            [
                ("e2fsck", vec!["-f".into(), "-p".into(), shown.clone()]),
                ("resize2fs", vec![shown.clone()]),
            ]
        );

        tools.answer_exit(
            "e2fsck",
            &[],
            8,
            "e2fsck: Bad magic number in super-block\n\n",
        );
        let e = grow(&d, "web", &image, 8192, 16384).unwrap_err();
        assert_eq!(e.kind, Kind::MountFailed);
        assert_eq!(
            e.message,
            format!("web: /data: e2fsck {shown} before growing it failed: e2fsck: Bad magic number in super-block")
        );
        assert_eq!(
            std::fs::metadata(&image).unwrap().len(),
            8192,
            "the old size back"
        );
        assert_eq!(tools.calls().len(), 3, "no resize2fs");

        tools.answer_exit("e2fsck", &[], 0, "");
        tools.answer_exit("resize2fs", &[], 1, "resize2fs: No space left on device");
        let e = grow(&d, "web", &image, 8192, 16384).unwrap_err();
        assert_eq!(
            e.message,
            format!("web: /data: resize2fs {shown} failed: resize2fs: No space left on device")
        );
        // Cut short after the file grew: it keeps its size, and the next start grows the
        // file system again (checked first) instead of mounting it half-grown.
        assert_eq!(std::fs::metadata(&image).unwrap().len(), 16384);
        assert!(growing(&image).exists());
        assert_eq!(
            resumed(&image, Plan::Use, 16384),
            Plan::Grow { from: 16384 }
        );
        tools.answer_exit("e2fsck", &[], 0, "");
        tools.answer_exit("resize2fs", &[], 0, "");
        grow(&d, "web", &image, 16384, 16384).unwrap();
        assert!(!growing(&image).exists());
        assert_eq!(resumed(&image, Plan::Use, 16384), Plan::Use);
    }
}
