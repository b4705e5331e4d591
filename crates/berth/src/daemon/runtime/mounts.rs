//! Image mounts, merged roots and /data binds: what a start needs, released when nothing uses them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use berth_core::plan::{self};
use berth_core::state::{Installed, State};

use crate::daemon::runtime::probe;
use crate::daemon::state;
use crate::daemon::context::Daemon;
use crate::daemon::error::{Error, Kind, Result};

pub(crate) fn mounts(d: &Daemon) -> Vec<PathBuf> {
    berth_sys::mount::mounts_under(d.proc(), &d.cfg.paths.run)
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
    berth_sys::loopdev::mount_squashfs(&image, &mnt).map_err(|e| {
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

/// Unmounts every image mount and merged root that no running container uses.
pub(crate) fn release_mounts(d: &Daemon) {
    let st = state::state(d);
    let mut used_images = BTreeSet::new();
    let mut used_roots = BTreeSet::new();
    // Images of installed packages stay mounted once mounted: a later start finds their
    // pages (decompressed squashfs blocks) still cached, which halves the start time of a
    // package whose files are large.
    for p in st.packages.values() {
        used_images.insert(d.cfg.paths.image_mount(&p.sha256));
    }
    for p in st.packages.values() {
        if probe::is_running(d, p.name.as_str()) {
            used_roots.insert(d.cfg.paths.rootfs(p.name.as_str()));
            used_roots.insert(d.cfg.paths.data_mount(p.name.as_str()));
            for l in running_layers(d, &st, p) {
                used_images.insert(d.cfg.paths.image_mount(&l));
            }
        }
    }
    let rootfs_dir = d.cfg.paths.run.join("rootfs");
    let data_dir = d.cfg.paths.run.join("data");
    let mnt_dir = d.cfg.paths.run.join("mnt");
    // Roots first: they sit on the image mounts.
    let mut all = mounts(d);
    all.sort_by_key(|p| !p.starts_with(&rootfs_dir));
    for m in all {
        let per_container = m.starts_with(&rootfs_dir) || m.starts_with(&data_dir);
        let unused = (per_container && !used_roots.contains(&m))
            || (m.starts_with(&mnt_dir) && !used_images.contains(&m));
        if unused {
            match berth_sys::mount::umount(&m, false) {
                Ok(_) => {
                    let _ = std::fs::remove_dir(&m);
                }
                Err(e) => log::warn!("cannot unmount {}: {e}", m.display()),
            }
        }
    }
}
