//! Image mounts, merged roots, /data binds and bind anchors: what a start needs, released when
//! nothing uses them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use berth_core::plan::{self};
use berth_core::state::{Installed, State};

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::device::state;
use crate::daemon::runtime::probe;

pub(crate) fn mounts(d: &Daemon) -> Vec<PathBuf> {
    d.host
        .mounts
        .mounts_under(d.proc(), &d.cfg.paths.run)
        .map(|v| v.into_iter().map(|m| m.mount_point).collect())
        .unwrap_or_default()
}

pub(crate) fn is_mounted(d: &Daemon, p: &Path) -> bool {
    mounts(d).iter().any(|m| m == p)
}

pub(crate) fn ensure_image_mounted(d: &Daemon, sha: &str) -> Result<PathBuf> {
    let mnt = d.cfg.paths.image_mount(sha);
    if is_mounted(d, &mnt) {
        return Ok(mnt);
    }
    std::fs::create_dir_all(&mnt).map_err(Error::internal)?;
    let image = d.cfg.paths.image(sha);
    d.host.mounts.mount_squashfs(&image, &mnt).map_err(|e| {
        Error::new(
            Kind::MountFailed,
            format!("cannot mount {}: {e}", image.display()),
        )
    })?;
    Ok(mnt)
}

/// Image layers (sha256s) of an installed package, top first.
pub(crate) fn layers(st: &State, p: &Installed) -> Result<Vec<String>> {
    let image_of = |n: &str| st.packages.get(n).map(|p| p.sha256.clone());
    let depends_of = |n: &str| {
        st.packages
            .get(n)
            .map(|p| p.depends.iter().map(|d| d.to_string()).collect())
            .unwrap_or_default()
    };
    plan::image_layers(&p.manifest, &p.sha256, &image_of, &depends_of)
        .map_err(|e| Error::new(Kind::MissingLayer, e.to_string()))
}

/// The images a running container was started on (recorded at its start), or, for one
/// started by an older berth, those its installed package names now.
pub(crate) fn running_layers(d: &Daemon, st: &State, p: &Installed) -> Vec<String> {
    match std::fs::read_to_string(d.cfg.paths.lxc_dir(p.name.as_str()).join("layers")) {
        Ok(text) => text.lines().map(str::to_string).collect(),
        Err(_) => layers(st, p).unwrap_or_default(),
    }
}

/// The bindings of a container's run (`runtime::bind`), as recorded at its start and by
/// each bind and unbind since: meaningful while it runs.
pub(crate) fn run_bindings(d: &Daemon, name: &str) -> Vec<berth_core::bind::Binding> {
    std::fs::read_to_string(d.cfg.paths.lxc_dir(name).join("binds"))
        .map(|t| berth_core::bind::parse_bindings(&t))
        .unwrap_or_default()
}

/// Unmounts every merged root, /data bind and image mount that nothing uses (the choice is
/// `plan::unused_mounts`).
pub(crate) fn release_mounts(d: &Daemon) {
    let st = state::state(d);
    let paths = &d.cfg.paths;
    // Images of installed packages stay mounted once mounted: a later start finds their
    // pages (decompressed squashfs blocks) still cached, which halves the start time of a
    // package whose files are large. Not in safe mode: no package image stays mounted.
    let mut used: BTreeSet<PathBuf> = BTreeSet::new();
    if d.safe_mode().is_none() {
        used.extend(st.packages.values().map(|p| paths.image_mount(&p.sha256)));
    }
    for p in st.packages.values() {
        let n = p.name.as_str();
        if probe::is_running(d, n) {
            used.extend([paths.rootfs(n), paths.data_mount(n), paths.bind_anchor(n)]);
            used.extend(
                running_layers(d, &st, p)
                    .iter()
                    .map(|l| paths.image_mount(l)),
            );
            // Bound images stay mounted while bound, also one an upgrade replaced.
            used.extend(
                run_bindings(d, n)
                    .iter()
                    .map(|b| paths.image_mount(&b.sha256)),
            );
        }
    }
    for m in plan::unused_mounts(&mounts(d), &paths.run, &used) {
        match d.host.mounts.umount(&m, false) {
            Ok(_) => {
                let _ = std::fs::remove_dir(&m);
            }
            Err(e) => log::warn!("cannot unmount {}: {e}", m.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::testing::{fake_daemon, install, MANIFEST};

    /// An image is mounted once, however many starts ask for it; a mount the kernel
    /// refuses is `mount_failed`, naming the image.
    #[test]
    fn an_image_is_mounted_once_and_a_refusal_names_it() {
        let (_dir, d, m) = fake_daemon("mounts-once", "");
        let sha = "cd".repeat(32);
        let mnt = ensure_image_mounted(&d, &sha).unwrap();
        assert_eq!(mnt, d.cfg.paths.image_mount(&sha));
        assert_eq!(ensure_image_mounted(&d, &sha).unwrap(), mnt);
        let mounts: Vec<_> = m
            .calls()
            .into_iter()
            .filter(|c| c.starts_with("mount_squashfs"))
            .collect();
        assert_eq!(mounts.len(), 1, "{mounts:?}");

        let other = "ef".repeat(32);
        m.fail_next("mount_squashfs", libc::ENOMEM);
        let e = ensure_image_mounted(&d, &other).unwrap_err();
        assert_eq!(e.kind, Kind::MountFailed);
        assert!(
            e.message.starts_with(&format!(
                "cannot mount {}",
                d.cfg.paths.image(&other).display()
            )),
            "{}",
            e.message
        );
        assert_eq!(m.mounted(), vec![mnt]);
    }

    /// What nothing uses is unmounted and its mount point removed: the image of a package no
    /// longer installed; an installed package's image stays (its pages stay cached), except in
    /// safe mode, where no image stays mounted.
    #[test]
    fn unused_mounts_go_and_installed_images_stay_outside_safe_mode() {
        let (_dir, d, m) = fake_daemon("mounts-release", "");
        let p = install(&d, MANIFEST);
        let kept = ensure_image_mounted(&d, &p.sha256).unwrap();
        let gone = ensure_image_mounted(&d, &"01".repeat(32)).unwrap();
        release_mounts(&d);
        assert_eq!(m.mounted(), vec![kept.clone()]);
        assert!(!gone.exists(), "{} left behind", gone.display());

        *d.boot.safe_mode.lock().unwrap() = Some("5 daemon starts".into());
        release_mounts(&d);
        assert!(m.mounted().is_empty(), "{:?}", m.mounted());
        assert!(!kept.exists());
    }

    /// An unmount the kernel refuses (busy) is logged and leaves the mount as it is: the
    /// next release tries again.
    #[test]
    fn a_refused_unmount_is_left_for_the_next_release() {
        let (_dir, d, m) = fake_daemon("mounts-busy", "");
        let gone = ensure_image_mounted(&d, &"01".repeat(32)).unwrap();
        m.fail_next("umount", libc::EBUSY);
        release_mounts(&d);
        assert_eq!(m.mounted(), vec![gone.clone()]);
        assert!(gone.exists());
        release_mounts(&d);
        assert!(m.mounted().is_empty());
    }
}
