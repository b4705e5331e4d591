//! `berth install`: fetch each image of the closure, hash it while writing, verify, store, commit.

use std::sync::Arc;

use berth_core::api::install as field;
use berth_core::index::IndexEntry;
use berth_core::manifest::Manifest;
use berth_core::state::{InstallStep, Installed};
use berth_sys::fsutil::fsync_dir;
use serde_json::{json, Value};

use crate::daemon::boot;
use crate::daemon::context::Daemon;
use crate::daemon::error::{Error, Kind, Result};
use crate::daemon::runtime::mounts;
use crate::daemon::runtime::probe;
use crate::daemon::schedules;
use crate::daemon::security;
use crate::daemon::state;
use crate::daemon::store::download::{download, hash_file, Want};
use crate::daemon::store::image;
use crate::daemon::store::repo;
use crate::hooks;

pub(crate) fn install(
    d: &Arc<Daemon>,
    names: &[String],
    emit: &mut dyn FnMut(Value),
) -> Result<Value> {
    if names.is_empty() {
        return Err(Error::bad_request("install: name at least one package"));
    }
    let _op = d.op.lock().unwrap();
    // Also checked before the stream begins; here under the lock, against a safe-mode enter
    // that came first.
    boot::refuse_in_safe_mode(d, "install")?;
    let (index, cache) = repo::load_index(d)?;
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let closure = index.closure(&refs).map_err(|e| match e {
        berth_core::index::IndexError::UnknownPackage(_) => {
            Error::new(Kind::UnknownPackage, e.to_string())
        }
        _ => Error::new(Kind::BadIndex, e.to_string()),
    })?;
    // What each package asks for, against the device policy, before anything is fetched
    // (the image's own manifest is checked again in read_manifest).
    for e in &closure {
        let asked = berth_core::manifest::Permissions {
            capabilities: e.manifest.capabilities.clone(),
            devices: e.manifest.devices.clone(),
            ..Default::default()
        };
        security::check(&d.cfg, e.name.as_str(), &asked, e.trusted)?;
    }
    let old = state::state(d);
    let steps = old.install_steps(&closure, names);
    // Upgrading a running package in place would pull its root out from under it.
    for step in &steps {
        if let InstallStep::Fetch {
            entry,
            replaces: Some(running_version),
            ..
        } = step
        {
            let e = closure[*entry];
            if probe::is_running(d, e.name.as_str()) {
                return Err(Error::new(
                    Kind::Running,
                    format!(
                        "{} is running {running_version}; stop it before installing {}",
                        e.name, e.version
                    ),
                ));
            }
        }
    }
    let mut new = old.clone();
    let mut done = Vec::new();
    for step in steps {
        match step {
            InstallStep::Keep { name, explicit } => {
                if let Some(p) = new.packages.get_mut(&name) {
                    p.explicit = explicit;
                }
            }
            InstallStep::Fetch {
                entry, explicit, ..
            } => {
                let e = closure[entry];
                let manifest = fetch_image(d, &cache.url, e, emit)?;
                new.packages.insert(
                    e.name.to_string(),
                    Installed::from_entry(e, manifest, explicit, berth_sys::process::now_s()),
                );
                done.push(
                    json!({field::NAME: e.name.as_str(), field::VERSION: e.version.to_string()}),
                );
            }
        }
    }
    hooks::point("install.before-commit");
    state::commit_state(d, new)?;
    hooks::point("install.committed");
    // A new version's manifest brings its own schedules.
    schedules::sync(d);
    // An upgrade leaves the old image unused.
    mounts::release_mounts(d);
    let skipped: Vec<&str> = closure
        .iter()
        .map(|e| e.name.as_str())
        .filter(|n| !done.iter().any(|v| v[field::NAME] == *n))
        .collect();
    Ok(json!({field::INSTALLED: done, field::UNCHANGED: skipped}))
}

/// Brings one image into the store (downloading it unless it is already there and intact)
/// and returns the manifest it carries, checked against the index entry.
pub(crate) fn fetch_image(
    d: &Daemon,
    base: &str,
    e: &IndexEntry,
    emit: &mut dyn FnMut(Value),
) -> Result<Manifest> {
    let paths = &d.cfg.paths;
    let image = paths.image(&e.sha256);
    let label = format!("{}@{}", e.name, e.version);
    if image.exists() {
        if let Ok((size, sha)) = hash_file(&image) {
            if size == e.size && sha == e.sha256 {
                return image::read_manifest(d, &image, e);
            }
        }
        // Damaged: fetch it again (the rename below replaces it atomically).
        log::warn!(
            "{}: store image {} is damaged; fetching it again",
            label,
            image.display()
        );
    }
    // The source the index came from first, then the repository's others (the image is
    // checked against the signed index whichever serves it).
    let mut bases = vec![base.to_string()];
    for b in repo::sources(d).unwrap_or_default() {
        if !bases.contains(&b) {
            bases.push(b);
        }
    }
    let (tmp, bytes, delta_from) = match super::delta::rebuild(d, &bases, e, emit) {
        Some(r) => (r.path, r.delta.size, Some(r.delta.from_version.to_string())),
        None => {
            let label = format!("{}@{}", e.name, e.version);
            let want = Want {
                label: &label,
                what: "image",
                package: e.name.as_str(),
                file: &e.file,
                size: e.size,
                sha256: &e.sha256,
            };
            (download(d, &bases, &want, emit)?, e.size, None)
        }
    };
    let cleanup = |err: Error| {
        let _ = std::fs::remove_file(&tmp);
        err
    };
    let manifest = image::read_manifest(d, &tmp, e).map_err(cleanup)?;
    hooks::point("install.verified");
    std::fs::rename(&tmp, &image).map_err(|err| {
        cleanup(Error::internal(format!(
            "rename {} to {}: {err}",
            tmp.display(),
            image.display()
        )))
    })?;
    let _ = fsync_dir(&paths.store());
    hooks::point("install.stored");
    emit(json!({
        field::EVENT: "fetched",
        field::PACKAGE: e.name.as_str(),
        field::VERSION: e.version.to_string(),
        field::SIZE: e.size,
        field::BYTES: bytes,
        field::DELTA_FROM: delta_from,
    }));
    Ok(manifest)
}
