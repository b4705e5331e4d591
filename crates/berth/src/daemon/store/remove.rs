//! `berth remove` (with a resumable purge) and `berth gc`.

use std::path::PathBuf;

use berth_core::api::{gc as gc_field, remove as remove_field};
use berth_core::config::Config;
use berth_sys::fsutil::fsync_dir;
use serde_json::{json, Value};

use crate::daemon::cgroups;
use crate::daemon::context::Daemon;
use crate::daemon::error::{Error, Kind, Result};
use crate::daemon::net;
use crate::daemon::records;
use crate::daemon::runtime::bind;
use crate::daemon::runtime::data;
use crate::daemon::runtime::mounts;
use crate::daemon::runtime::probe;
use crate::daemon::security;
use crate::daemon::state;
use crate::hooks;

pub(crate) fn remove(d: &Daemon, names: &[String], purge: bool) -> Result<Value> {
    if names.is_empty() {
        return Err(Error::bad_request("remove: name at least one package"));
    }
    let _op = d.op.lock().unwrap();
    let old = state::state(d);
    // `remove --purge` of packages no longer installed whose /data is still there (a purge
    // cut short by an older berth, or a plain remove before): purge that /data.
    if purge && names.iter().all(|n| !old.packages.contains_key(n)) {
        let leftovers: Vec<&String> = names
            .iter()
            .filter(|n| {
                set_aside_pairs(&d.cfg, n)
                    .iter()
                    .any(|(from, to)| from.exists() || to.exists())
            })
            .collect();
        if leftovers.len() == names.len() {
            for n in &leftovers {
                purge_data(d, n)
                    .map_err(|e| Error::internal(format!("{n}: cannot delete its /data: {e}")))?;
            }
            return Ok(json!({
                remove_field::REMOVED: [],
                remove_field::PURGED: true,
                remove_field::DATA_PURGED: leftovers,
            }));
        }
    }
    for n in names {
        if !old.packages.contains_key(n) {
            return Err(Error::new(
                Kind::NotInstalled,
                format!("{n} is not installed"),
            ));
        }
        if probe::is_running(d, n) {
            return Err(Error::new(
                Kind::Running,
                format!("{n} is running: stop it first (berth stop {n})"),
            ));
        }
        let users: Vec<String> = old
            .dependents(n)
            .into_iter()
            .filter(|u| !names.contains(u))
            .collect();
        if !users.is_empty() {
            return Err(Error::new(
                Kind::Needed,
                format!("{n} is needed by {}: remove those first", users.join(", ")),
            ));
        }
        let into = bind::bound_into(d, &old, n, names);
        if !into.is_empty() {
            return Err(Error::new(
                Kind::Needed,
                format!(
                    "{n} is bound into {}: berth unbind {n} --from {} first (a binding of a manifest's [[bind]] goes with its package)",
                    into.join(", "),
                    into[0]
                ),
            ));
        }
    }
    let mut new = old.clone();
    for n in names {
        new.packages.remove(n);
    }
    // A purge is made resumable before the commit: /data moves aside (one rename), so that a
    // crash before the commit puts it back (the package is still installed) and one after
    // it finishes the purge (reconcile, gc, or remove --purge again).
    let mut set_aside: Vec<(PathBuf, PathBuf)> = Vec::new();
    let put_back = |set_aside: &[(PathBuf, PathBuf)]| {
        for (from, to) in set_aside {
            let _ = std::fs::rename(to, from);
        }
    };
    if purge {
        for n in names {
            // The plain directory and, with containers.data_size, the image.
            for (from, to) in set_aside_pairs(&d.cfg, n) {
                if from.exists() {
                    if let Err(e) = std::fs::rename(&from, &to) {
                        put_back(&set_aside);
                        return Err(Error::internal(format!(
                            "{n}: cannot set its /data aside for the purge: {e}; nothing was changed"
                        )));
                    }
                    set_aside.push((from, to));
                }
            }
        }
        let _ = fsync_dir(&d.cfg.paths.state.join("data"));
        hooks::point("remove.set-aside");
    }
    if let Err(e) = state::commit_state(d, new) {
        put_back(&set_aside);
        return Err(e);
    }
    hooks::point("remove.committed");
    mounts::release_mounts(d);
    net::forget(d, &state::state(d), names);
    for n in names {
        let _ = std::fs::remove_dir_all(d.cfg.paths.lxc_dir(n));
        cgroups::remove_stale_cgroups(d, n);
        let _ = std::fs::remove_file(d.cfg.paths.saved_log(n));
        let _ = std::fs::remove_file(d.cfg.paths.exit_file(n));
        let _ = std::fs::remove_file(d.cfg.paths.autostart(n));
        let _ = std::fs::remove_file(d.cfg.paths.limits_file(n));
        let _ = std::fs::remove_file(d.cfg.paths.supervise_file(n));
        crate::daemon::schedules::forget(d, n);
        crate::daemon::store::upgrade::forget(d, n);
        bind::forget(d, n);
        records::forget(d, n);
        crate::daemon::runtime::sockets::close(d, n);
        if purge {
            if let Err(e) = purge_data(d, n) {
                log::error!("{n}: its /data is only partly deleted ({e}); berth gc finishes it");
            }
        } else {
            security::removed(d, n, false);
        }
    }
    Ok(json!({remove_field::REMOVED: names, remove_field::PURGED: purge}))
}

/// Where a container's /data waits while it is being purged.
pub(crate) fn purging_dir(cfg: &Config, name: &str) -> PathBuf {
    cfg.paths.state.join("data").join(format!(".purge-{name}"))
}

/// Where a container's /data image waits while it is being purged.
pub(crate) fn purging_image(cfg: &Config, name: &str) -> PathBuf {
    cfg.paths
        .state
        .join("data")
        .join(format!(".purge-{name}.img"))
}

/// What a purge sets aside: (where it is, where it waits).
fn set_aside_pairs(cfg: &Config, name: &str) -> [(PathBuf, PathBuf); 2] {
    [
        (cfg.paths.data(name), purging_dir(cfg, name)),
        (cfg.paths.data_image(name), purging_image(cfg, name)),
    ]
}

/// Deletes a container's /data (set aside or not: its directory, its image) and then frees
/// its id range.
pub(crate) fn purge_data(d: &Daemon, name: &str) -> std::io::Result<()> {
    for dir in [purging_dir(&d.cfg, name), d.cfg.paths.data(name)] {
        match berth_sys::tree::remove_path(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    // And an image whose making a crash cut short (`runtime::data`).
    let making = data::in_making(&d.cfg.paths.data_image(name));
    for image in [
        purging_image(&d.cfg, name),
        d.cfg.paths.data_image(name),
        making,
    ] {
        match std::fs::remove_file(&image) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    security::removed(d, name, true);
    Ok(())
}

/// Purges cut short by a crash: a package still installed gets its /data back (its remove
/// never committed); any other set-aside /data is deleted.
pub(crate) fn finish_purges(d: &Daemon) {
    let st = state::state(d);
    let Ok(entries) = std::fs::read_dir(d.cfg.paths.state.join("data")) else {
        return;
    };
    for e in entries.flatten() {
        let f = e.file_name();
        let Some(aside) = f.to_str().and_then(|f| f.strip_prefix(".purge-")) else {
            continue;
        };
        let (name, home) = match aside.strip_suffix(".img") {
            Some(n) => (n, d.cfg.paths.data_image(n)),
            None => (aside, d.cfg.paths.data(aside)),
        };
        if st.packages.contains_key(name) && !home.exists() {
            match std::fs::rename(e.path(), home) {
                Ok(()) => {
                    log::warn!("{name}: a purge was cut short before it committed; /data is back")
                }
                Err(err) => log::error!("{name}: cannot put /data back: {err}"),
            }
        } else if let Err(err) = purge_data(d, name) {
            log::error!("{name}: cannot finish the purge of /data: {err}");
        } else {
            log::info!("{name}: finished a purge cut short");
        }
    }
}

pub(crate) fn gc(d: &Daemon) -> Result<Value> {
    let _op = d.op.lock().unwrap();
    finish_purges(d);
    mounts::release_mounts(d);
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
            if keep.contains(sha)
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
    let _ = fsync_dir(&store);
    clear_tmp(&d.cfg);
    Ok(json!({gc_field::REMOVED: removed, gc_field::FREED_BYTES: freed}))
}

pub(crate) fn clear_tmp(cfg: &Config) {
    if let Ok(entries) = std::fs::read_dir(cfg.paths.store_tmp()) {
        for e in entries.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// At daemon start: what an interrupted operation left in the store's partial downloads,
/// except the partial images (`SHA256.part`), which the next install of the same image
/// resumes (its sha256 is checked whole at the end, so a damaged one is refused then).
pub(crate) fn clear_tmp_but_partial_images(cfg: &Config) {
    let Ok(entries) = std::fs::read_dir(cfg.paths.store_tmp()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let keep = name
            .to_str()
            .and_then(|n| n.strip_suffix(".part"))
            .is_some_and(|h| {
                h.len() == 64
                    && h.bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            });
        if !keep {
            let _ = std::fs::remove_file(e.path());
        }
    }
}
