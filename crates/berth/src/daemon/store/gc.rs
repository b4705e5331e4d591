//! Deleting store images nothing uses: `berth gc` (`remove::gc`, which also finishes purges
//! and releases mounts first) and the prune after an upgrade or a rollback.

use std::collections::BTreeSet;
use std::path::PathBuf;

use berth_sys::fsutil::fsync_dir;

use crate::daemon::base::context::Daemon;
use crate::daemon::device::state;
use crate::daemon::runtime::mounts;
use crate::daemon::runtime::probe;

/// After an upgrade or a rollback (under the op lock): deletes those of `candidates` (the
/// images the operation's packages referenced before and after) that nothing uses any more,
/// so that a device upgraded for months keeps no more than each package's image (and, after
/// an upgrade, its previous one). An image still mounted stays for `berth gc`.
pub(crate) fn prune(d: &Daemon, candidates: &BTreeSet<String>) {
    // Most upgrades leave one image or none: no scan of loop devices and running layers,
    // and no fsync of the store, for candidates the state still holds.
    let held = state::state(d).referenced_images();
    if candidates.iter().all(|c| held.contains(c)) {
        return;
    }
    let (removed, freed) = delete_unused(d, Some(candidates));
    if !removed.is_empty() {
        log::info!(
            "store: deleted {} image(s) nothing uses any more ({freed} bytes)",
            removed.len()
        );
    }
}

/// Deletes the store images (of `only`, when given) that the state does not reference, no
/// running container was started on or has bound, and no mount or loop device reads; fsyncs
/// the store when it deleted any. Returns their sha256s and the bytes freed. Under the op
/// lock.
pub(crate) fn delete_unused(d: &Daemon, only: Option<&BTreeSet<String>>) -> (Vec<String>, u64) {
    let st = state::state(d);
    let mut keep = st.referenced_images();
    // What running containers were started on, whatever the state says now.
    for p in st.packages.values() {
        if probe::is_running(d, p.name.as_str()) {
            keep.extend(mounts::running_layers(d, &st, p));
            keep.extend(
                mounts::run_bindings(d, p.name.as_str())
                    .into_iter()
                    .map(|b| b.sha256),
            );
        }
    }
    // And, whatever berth believes, nothing a loop device still reads.
    let backing: Vec<PathBuf> = berth_sys::loopdev::loop_backing_files(d.sys())
        .map(|v| v.into_iter().map(|l| l.backing_file).collect())
        .unwrap_or_default();
    let mut removed = Vec::new();
    let mut freed = 0u64;
    let store = d.cfg.paths.store();
    if let Ok(entries) = std::fs::read_dir(&store) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let Some(sha) = name.strip_suffix(".sqfs") else {
                continue;
            };
            if only.is_some_and(|o| !o.contains(sha))
                || keep.contains(sha)
                || mounts::is_mounted(d, &d.cfg.paths.image_mount(sha))
                || backing.iter().any(|b| *b == e.path())
            {
                continue;
            }
            let size = e.metadata().map(|m| m.len()).unwrap_or(0);
            if std::fs::remove_file(e.path()).is_ok() {
                freed += size;
                removed.push(sha.to_string());
            }
        }
    }
    if !removed.is_empty() {
        let _ = fsync_dir(&store);
    }
    (removed, freed)
}
