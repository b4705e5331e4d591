//! What the daemon does: update, install, remove, start, stop, status, logs, gc, and the
//! reconciliation that makes a restarted daemon take over what a previous one left.
//!
//! Crash safety: `state.json` is the commit point. An install downloads into `store/.tmp`,
//! verifies, renames into the store, and only then writes the new state (atomically). A crash
//! before the state write leaves the old state (plus, at most, an unreferenced image that
//! `gc` removes); after it, the new one. Start-up removes partial downloads and unmounts
//! whatever no running container uses.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use berth_core::cgroup::{self as cg, CgroupVersion, Host, Limits, Overrides};
use berth_core::config::Config;
use berth_core::index::{Index, IndexEntry};
use berth_core::manifest::{Manifest, MANIFEST_PATH};
use berth_core::plan::{self, ContainerPlan, HOST_BASE_DIRS, SKELETON_DIRS};
use berth_core::signify::{PublicKey, Signature};
use berth_core::state::{Installed, RepoCache, State};
use berth_sys::cgroupfs::{self, Cgroups};
use berth_sys::fsutil::{fsync_dir, write_atomic};
use berth_sys::lxc::Container;
use serde_json::{json, Value};

use super::{ApiError, ApiResult, Daemon};
use crate::fault;
use crate::fetch;

const INDEX_LIMIT: u64 = 8 << 20;
const SIG_LIMIT: u64 = 4096;

pub fn load_state(cfg: &Config) -> anyhow::Result<State> {
    let path = cfg.paths.state_file();
    match std::fs::read(&path) {
        Ok(bytes) => State::parse(&bytes).with_context(|| format!("{}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::default()),
        Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
    }
}

fn commit_state(d: &Daemon, new: State) -> ApiResult<()> {
    let path = d.cfg.paths.state_file();
    write_atomic(&path, &new.to_json(), 0o600)
        .map_err(|e| write_failed(&path, e, "nothing was changed"))?;
    *d.state.lock().unwrap() = new;
    Ok(())
}

fn state(d: &Daemon) -> State {
    d.state.lock().unwrap().clone()
}

// ---------------------------------------------------------------------------------------
// Repository: update and the verified index

fn trusted_keys(cfg: &Config) -> ApiResult<Vec<PublicKey>> {
    let dir = &cfg.paths.keys;
    let mut keys = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(_) => {
            return Err(ApiError::new(
                412,
                "no_keys",
                format!(
                "no trusted repository keys: {} is missing; put the repository's .pub key there",
                dir.display()
            ),
            ))
        }
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().and_then(|x| x.to_str()) != Some("pub") {
            continue;
        }
        let text = std::fs::read_to_string(&p)
            .map_err(|err| ApiError::internal(format!("read {}: {err}", p.display())))?;
        let key = PublicKey::parse(&text).map_err(|err| {
            ApiError::new(
                500,
                "bad_key",
                format!("trusted key {}: {err}", p.display()),
            )
        })?;
        keys.push(key);
    }
    if keys.is_empty() {
        return Err(ApiError::new(
            412,
            "no_keys",
            format!(
                "no trusted repository keys in {}: put the repository's .pub key there",
                dir.display()
            ),
        ));
    }
    Ok(keys)
}

fn verify_index(cfg: &Config, index: &[u8], sig: &str) -> ApiResult<Index> {
    let keys = trusted_keys(cfg)?;
    let sig = Signature::parse(sig)
        .map_err(|e| ApiError::new(422, "bad_signature", format!("index.json.sig: {e}")))?;
    berth_core::signify::verify_with_any(&keys, index, &sig).map_err(|e| {
        let reason = match e {
            // The error's own text names the default key directory; say which one was read.
            berth_core::signify::SignifyError::UnknownKey(keynum) => format!(
                "signed by unknown key {keynum}: not among the trusted keys in {}",
                cfg.paths.keys.display()
            ),
            e => e.to_string(),
        };
        ApiError::new(
            422,
            "bad_signature",
            format!("repository index rejected: {reason}"),
        )
    })?;
    Index::parse(index)
        .map_err(|e| ApiError::new(422, "bad_index", format!("repository index rejected: {e}")))
}

/// The cached index, verified again against the keys trusted now.
pub fn load_index(d: &Daemon) -> ApiResult<(Index, RepoCache)> {
    let path = d.cfg.paths.repository_file();
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(_) => {
            return Err(ApiError::new(
                412,
                "no_index",
                "no repository index yet: run berth update",
            ))
        }
    };
    let cache: RepoCache = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::new(
            500,
            "bad_cache",
            format!("{} is damaged ({e}): run berth update", path.display()),
        )
    })?;
    let index = verify_index(&d.cfg, cache.index.as_bytes(), &cache.signature)?;
    if let Some(e) = index
        .expires
        .filter(|_| index.expired(berth_sys::process::now_s()))
    {
        return Err(ApiError::new(
            422,
            "expired",
            format!(
                "the cached repository index expired at {}: run berth update (the repository owner must publish a re-signed index)",
                berth_core::date::utc(e)
            ),
        ));
    }
    Ok((index, cache))
}

fn repository_url(d: &Daemon) -> ApiResult<String> {
    d.cfg.repository.clone().ok_or_else(|| {
        ApiError::new(
            412,
            "no_repository",
            "no repository configured: set repository = \"http://…\" in the berth configuration",
        )
    })
}

fn fetch_err(e: fetch::FetchError) -> ApiError {
    if e.is_no_space() {
        ApiError::new(507, "no_space", format!("{e}"))
    } else {
        ApiError::new(502, "fetch_failed", format!("{e}"))
    }
}

/// The newest serial this device has accepted (`{"serial", "url"}`), kept apart from the
/// cached index so that a rollback is refused even when that index no longer verifies (its
/// key was removed).
fn serial_file(cfg: &Config) -> PathBuf {
    cfg.paths.state.join("repository.serial")
}

fn read_serial_floor(cfg: &Config) -> Option<u64> {
    std::fs::read(serial_file(cfg))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v["serial"].as_u64())
}

/// A write of berth's own files that failed: a full disk is said as such (507), with what
/// it means (`kept`: what stays as it was).
fn write_failed(path: &Path, e: std::io::Error, kept: &str) -> ApiError {
    if berth_sys::fsutil::is_enospc(&e) {
        ApiError::new(
            507,
            "no_space",
            format!(
                "cannot write {}: file system full; {kept} (free space with berth gc)",
                path.display()
            ),
        )
    } else {
        ApiError::internal(format!("write {}: {e}", path.display()))
    }
}

const INDEX_KEPT: &str = "the previous repository index stays in use";

pub fn update(d: &Daemon, reset_serial: bool) -> ApiResult<Value> {
    let _op = d.op.lock().unwrap();
    let base = repository_url(d)?;
    let index_url = fetch::join_url(&base, "index.json").map_err(fetch_err)?;
    let sig_url = fetch::join_url(&base, "index.json.sig").map_err(fetch_err)?;
    let index = fetch::fetch_bytes(&index_url, INDEX_LIMIT).map_err(fetch_err)?;
    let sig = fetch::fetch_bytes(&sig_url, SIG_LIMIT).map_err(fetch_err)?;
    let sig = String::from_utf8(sig)
        .map_err(|_| ApiError::new(422, "bad_signature", "index.json.sig is not text"))?;
    let parsed = verify_index(&d.cfg, &index, &sig)?;
    let now = berth_sys::process::now_s();
    if parsed.expired(now) {
        let e = parsed.expires.unwrap_or(0);
        return Err(ApiError::new(
            422,
            "expired",
            format!(
                "repository index rejected: it expired at {} (expires {e}); an expired index may be a replay that freezes this device on old packages: the repository owner must rebuild and re-sign it (berth repo build --valid-for …)",
                berth_core::date::utc(e)
            ),
        ));
    }
    // The floor: the newest serial accepted, from its own record and from the cached index
    // (an index cached by an older berth, which kept no record).
    let cached = load_index(d).ok().map(|(i, _)| i.serial);
    let floor = read_serial_floor(&d.cfg).into_iter().chain(cached).max();
    if let Some(floor) = floor.filter(|f| parsed.serial < *f) {
        if !reset_serial {
            return Err(ApiError::new(
                422,
                "rollback",
                format!(
                    "repository index rejected: its serial {} is older than {floor}, the newest this device has accepted; refusing a rollback (an old index is being replayed, or a mirror is out of date). To move to another repository on purpose, run berth update --reset-serial",
                    parsed.serial
                ),
            ));
        }
        log::warn!(
            "repository {base}: serial {} accepted below the newest accepted ({floor}) on the operator's request (--reset-serial)",
            parsed.serial
        );
    }
    let index_text = String::from_utf8(index)
        .map_err(|_| ApiError::new(422, "bad_index", "index.json is not UTF-8"))?;
    let cache = RepoCache {
        url: base.clone(),
        fetched_at: now,
        index: index_text,
        signature: sig,
    };
    // The floor first: a crash between the two writes leaves it raised, never lowered.
    let sf = serial_file(&d.cfg);
    let old_record = std::fs::read(&sf).ok();
    let rec = json!({"serial": parsed.serial, "url": base});
    write_atomic(&sf, rec.to_string().as_bytes(), 0o600)
        .map_err(|e| write_failed(&sf, e, INDEX_KEPT))?;
    let path = d.cfg.paths.repository_file();
    if let Err(e) = write_atomic(
        &path,
        &serde_json::to_vec(&cache).expect("serializes"),
        0o600,
    ) {
        // Put the floor back with the index it belongs to (a small file: it fits where the
        // larger index did not; if not, the floor stays raised, which only refuses more).
        if let Some(old) = old_record {
            let _ = write_atomic(&sf, &old, 0o600);
        }
        return Err(write_failed(&path, e, INDEX_KEPT));
    }
    let st = state(d);
    let upgradable = upgradable(&st, &parsed);
    Ok(json!({
        "repository": base,
        "packages": parsed.packages.len(),
        "serial": parsed.serial,
        "expires": parsed.expires,
        "upgradable": upgradable,
    }))
}

/// For `berth status`: the cached index's serial, age and expiry, and a warning when it is
/// expired or older than the policy's `index_max_age`. Read without verifying: display only.
fn repository_status(d: &Daemon) -> Value {
    let now = berth_sys::process::now_s();
    let cache: Option<RepoCache> = std::fs::read(d.cfg.paths.repository_file())
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let Some(cache) = cache else {
        let warning = d
            .cfg
            .index_max_age_s
            .map(|_| "no repository index yet: run berth update".to_string());
        return json!({"url": d.cfg.repository, "warning": warning});
    };
    let index = Index::parse(cache.index.as_bytes()).ok();
    let expires = index.as_ref().and_then(|i| i.expires);
    let age = now.saturating_sub(cache.fetched_at);
    let warning = if let Some(e) = expires.filter(|e| now >= *e) {
        Some(format!(
            "the cached repository index expired at {}: installs are refused until berth update fetches a re-signed one",
            berth_core::date::utc(e)
        ))
    } else {
        d.cfg.index_max_age_s.filter(|max| age > *max).map(|max| {
            format!(
                "the repository index was fetched {} ago (index_max_age {}): run berth update; is {} reachable?",
                human_age(age),
                human_age(max),
                cache.url
            )
        })
    };
    json!({
        "url": cache.url,
        "serial": index.as_ref().map(|i| i.serial),
        "fetched_at": cache.fetched_at,
        "age_s": age,
        "expires": expires,
        "warning": warning,
    })
}

fn human_age(s: u64) -> String {
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        7200..=172_799 => format!("{} h", s / 3600),
        _ => format!("{} days", s / 86_400),
    }
}

fn upgradable(st: &State, index: &Index) -> Vec<Value> {
    st.packages
        .values()
        .filter_map(|p| {
            let e = index.get(p.name.as_str())?;
            (e.version > p.version).then(|| {
                json!({"name": p.name.as_str(), "installed": p.version.to_string(), "available": e.version.to_string()})
            })
        })
        .collect()
}

pub fn list(d: &Daemon) -> ApiResult<Value> {
    let st = state(d);
    let installed: Vec<Value> = st
        .packages
        .values()
        .map(|p| {
            json!({
                "name": p.name.as_str(), "version": p.version.to_string(),
                "description": p.manifest.package.description, "explicit": p.explicit,
                "sha256": p.sha256, "size": p.size,
            })
        })
        .collect();
    let (available, upgradable, note) = match load_index(d) {
        Ok((index, _)) => {
            let avail: Vec<Value> = index
                .packages
                .iter()
                .map(|e| {
                    json!({
                        "name": e.name.as_str(), "version": e.version.to_string(),
                        "description": e.description, "size": e.size,
                        "installed": st.packages.get(e.name.as_str()).map(|p| p.version.to_string()),
                    })
                })
                .collect();
            let up = upgradable(&st, &index);
            (avail, up, None)
        }
        Err(e) => (Vec::new(), Vec::new(), Some(e.message)),
    };
    Ok(
        json!({"installed": installed, "available": available, "upgradable": upgradable, "index_note": note}),
    )
}

// ---------------------------------------------------------------------------------------
// Install

pub fn install(d: &Daemon, names: &[String], emit: &mut dyn FnMut(Value)) -> ApiResult<Value> {
    if names.is_empty() {
        return Err(ApiError::bad_request("install: name at least one package"));
    }
    let _op = d.op.lock().unwrap();
    let (index, cache) = load_index(d)?;
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let closure = index.closure(&refs).map_err(|e| match e {
        berth_core::index::IndexError::UnknownPackage(_) => {
            ApiError::new(404, "unknown_package", e.to_string())
        }
        _ => ApiError::new(422, "bad_index", e.to_string()),
    })?;
    // What each package asks for, against the device policy, before anything is fetched
    // (the image's own manifest is checked again in read_manifest).
    for e in &closure {
        let asked = berth_core::manifest::Permissions {
            capabilities: e.manifest.capabilities.clone(),
            devices: e.manifest.devices.clone(),
            ..Default::default()
        };
        super::security::check(&d.cfg, e.name.as_str(), &asked, e.trusted)?;
    }
    let old = state(d);
    // Upgrading a running package in place would pull its root out from under it.
    for e in &closure {
        if let Some(p) = old.packages.get(e.name.as_str()) {
            if p.sha256 != e.sha256 && is_running(d, e.name.as_str()) {
                return Err(ApiError::new(
                    409,
                    "running",
                    format!(
                        "{} is running {}; stop it before installing {}",
                        e.name, p.version, e.version
                    ),
                ));
            }
        }
    }
    let mut new = old.clone();
    let mut done = Vec::new();
    for e in &closure {
        let same = old
            .packages
            .get(e.name.as_str())
            .is_some_and(|p| p.sha256 == e.sha256);
        let explicit = names.iter().any(|n| n == e.name.as_str())
            || old
                .packages
                .get(e.name.as_str())
                .is_some_and(|p| p.explicit);
        if same {
            if let Some(p) = new.packages.get_mut(e.name.as_str()) {
                p.explicit = explicit;
            }
            continue;
        }
        let manifest = fetch_image(d, &cache.url, e, emit)?;
        new.packages.insert(
            e.name.to_string(),
            Installed {
                name: e.name.clone(),
                version: e.version.clone(),
                sha256: e.sha256.clone(),
                size: e.size,
                trusted: e.trusted,
                explicit,
                depends: e.depends.clone(),
                manifest,
                installed_at: berth_sys::process::now_s(),
            },
        );
        done.push(json!({"name": e.name.as_str(), "version": e.version.to_string()}));
    }
    fault::point("install.before-commit");
    commit_state(d, new)?;
    fault::point("install.committed");
    // An upgrade leaves the old image unused.
    release_mounts(d);
    let skipped: Vec<&str> = closure
        .iter()
        .map(|e| e.name.as_str())
        .filter(|n| !done.iter().any(|v| v["name"] == *n))
        .collect();
    Ok(json!({"installed": done, "unchanged": skipped}))
}

/// Brings one image into the store (downloading it unless it is already there and intact)
/// and returns the manifest it carries, checked against the index entry.
fn fetch_image(
    d: &Daemon,
    base: &str,
    e: &IndexEntry,
    emit: &mut dyn FnMut(Value),
) -> ApiResult<Manifest> {
    let paths = &d.cfg.paths;
    let image = paths.image(&e.sha256);
    let label = format!("{}@{}", e.name, e.version);
    if image.exists() {
        if let Ok((size, sha)) = hash_file(&image) {
            if size == e.size && sha == e.sha256 {
                return read_manifest(d, &image, e);
            }
        }
        // Damaged: fetch it again (the rename below replaces it atomically).
        log::warn!(
            "{}: store image {} is damaged; fetching it again",
            label,
            image.display()
        );
    }
    let url = fetch::join_url(base, &e.file).map_err(fetch_err)?;
    let tmp = paths.store_tmp().join(format!("{}.part", e.sha256));
    let _ = std::fs::remove_file(&tmp);
    let mut f = File::options()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|err| ApiError::internal(format!("create {}: {err}", tmp.display())))?;
    let name = e.name.as_str();
    let total = e.size;
    let mut last = Instant::now() - Duration::from_secs(1);
    let mut progress = |p: fetch::Progress| {
        if last.elapsed() >= Duration::from_millis(100) || p.done == total {
            last = Instant::now();
            emit(json!({"event": "progress", "package": name, "done": p.done, "total": total}));
        }
    };
    let cleanup = |err: ApiError| {
        let _ = std::fs::remove_file(&tmp);
        err
    };
    // One byte more than announced is enough to notice an image larger than the index says.
    let (size, sha) = fetch::fetch_to(&url, &mut f, e.size.saturating_add(1), &mut progress).map_err(|err| {
        cleanup(if err.is_no_space() {
            ApiError::new(
                507,
                "no_space",
                format!(
                    "store full: no room for {label} ({} bytes) in {}; nothing was changed (free space with berth gc or berth remove)",
                    e.size,
                    paths.store().display()
                ),
            )
        } else {
            fetch_err(err)
        })
    })?;
    fault::point("install.fetched");
    if size != e.size {
        return Err(cleanup(ApiError::new(
            422,
            "bad_image",
            format!("{label}: image is {size} bytes, the index says {}: truncated or replaced download; nothing was changed", e.size),
        )));
    }
    if sha != e.sha256 {
        return Err(cleanup(ApiError::new(
            422,
            "bad_image",
            format!("{label}: image sha256 is {sha}, the signed index says {}: refusing it; nothing was changed", e.sha256),
        )));
    }
    f.sync_all().map_err(|err| {
        cleanup(if berth_sys::fsutil::is_enospc(&err) {
            ApiError::new(507, "no_space", format!("store full while writing {label}"))
        } else {
            ApiError::internal(format!("fsync {}: {err}", tmp.display()))
        })
    })?;
    drop(f);
    let manifest = read_manifest(d, &tmp, e).map_err(cleanup)?;
    fault::point("install.verified");
    std::fs::rename(&tmp, &image).map_err(|err| {
        cleanup(ApiError::internal(format!(
            "rename {} to {}: {err}",
            tmp.display(),
            image.display()
        )))
    })?;
    let _ = fsync_dir(&paths.store());
    fault::point("install.stored");
    emit(
        json!({"event": "fetched", "package": name, "version": e.version.to_string(), "size": size}),
    );
    Ok(manifest)
}

fn hash_file(path: &Path) -> std::io::Result<(u64, String)> {
    use sha2::Digest;
    let mut f = File::open(path)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf)?;
        if k == 0 {
            break;
        }
        n += k as u64;
        h.update(&buf[..k]);
    }
    Ok((n, berth_core::index::hex(&h.finalize())))
}

/// Mounts an image on a private mount point to read and check the manifest it carries.
fn read_manifest(d: &Daemon, image: &Path, e: &IndexEntry) -> ApiResult<Manifest> {
    let label = format!("{}@{}", e.name, e.version);
    let mnt = d
        .cfg
        .paths
        .run
        .join("mnt")
        .join(format!(".verify-{}", e.sha256));
    let _ = berth_sys::mount::umount(&mnt, true);
    std::fs::create_dir_all(&mnt).map_err(ApiError::internal)?;
    let result = (|| {
        berth_sys::loopdev::mount_squashfs(image, &mnt).map_err(|err| {
            ApiError::new(
                422,
                "bad_image",
                format!("{label}: not a usable squashfs image: {err}"),
            )
        })?;
        let text = read_image_manifest(&mnt)
            .map_err(|why| ApiError::new(422, "bad_image", format!("{label}: {why}")))?;
        let m = Manifest::parse(&text)
            .map_err(|err| ApiError::new(422, "bad_manifest", format!("{label}: {err}")))?;
        super::security::check(&d.cfg, e.name.as_str(), &m.permissions, e.trusted)?;
        if m.package.name != e.name || m.package.version != e.version {
            return Err(ApiError::new(
                422,
                "bad_image",
                format!(
                    "{label}: the image holds {}@{}, not what the index lists",
                    m.package.name, m.package.version
                ),
            ));
        }
        for dir in SKELETON_DIRS {
            // Not followed: a link would make the container's mount land where it points.
            let why = match std::fs::symlink_metadata(mnt.join(dir)) {
                Ok(md) if md.is_dir() => continue,
                Ok(md) => format!(
                    "image's mount point /{dir} is a {}, not a directory",
                    file_kind(&md.file_type())
                ),
                Err(_) => format!("image lacks the mount point /{dir}"),
            };
            return Err(ApiError::new(
                422,
                "bad_image",
                format!("{label}: {why}; build it with berth pack"),
            ));
        }
        Ok(m)
    })();
    let _ = berth_sys::mount::umount(&mnt, true);
    let _ = std::fs::remove_dir(&mnt);
    result
}

/// Real manifests are a few hundred bytes; the daemon's memory budget is a few MiB.
const MANIFEST_LIMIT: u64 = 64 * 1024;

/// Reads the manifest of an image mounted at `root`: only from the image itself (a symlink
/// would lead into the host, a FIFO would block the daemon) and only a bounded amount.
fn read_image_manifest(root: &Path) -> Result<String, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = root.join(MANIFEST_PATH);
    let dir = file.parent().unwrap_or(root).to_path_buf();
    for (path, want_dir) in [(&dir, true), (&file, false)] {
        let rel = path.strip_prefix(root).unwrap_or(path).display();
        let md = std::fs::symlink_metadata(path)
            .map_err(|e| format!("image has no readable /{MANIFEST_PATH}: {e}"))?;
        if (want_dir && !md.is_dir()) || (!want_dir && !md.is_file()) {
            return Err(format!(
                "/{rel} in the image is a {}, not a {}; build it with berth pack",
                file_kind(&md.file_type()),
                if want_dir {
                    "directory"
                } else {
                    "regular file"
                }
            ));
        }
    }
    let f = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&file)
        .map_err(|e| format!("image has no readable /{MANIFEST_PATH}: {e}"))?;
    let mut bytes = Vec::new();
    f.take(MANIFEST_LIMIT + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("image has no readable /{MANIFEST_PATH}: {e}"))?;
    if bytes.len() as u64 > MANIFEST_LIMIT {
        return Err(format!(
            "/{MANIFEST_PATH} is larger than {MANIFEST_LIMIT} bytes; refusing to read it"
        ));
    }
    String::from_utf8(bytes).map_err(|_| format!("/{MANIFEST_PATH} is not UTF-8"))
}

fn file_kind(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_symlink() {
        "symlink"
    } else if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_block_device() || t.is_char_device() {
        "device"
    } else {
        "regular file"
    }
}

// ---------------------------------------------------------------------------------------
// Remove and gc

pub fn remove(d: &Daemon, names: &[String], purge: bool) -> ApiResult<Value> {
    if names.is_empty() {
        return Err(ApiError::bad_request("remove: name at least one package"));
    }
    let _op = d.op.lock().unwrap();
    let old = state(d);
    // `remove --purge` of packages no longer installed whose /data is still there (a purge
    // cut short by an older berth, or a plain remove before): purge that /data.
    if purge && names.iter().all(|n| !old.packages.contains_key(n)) {
        let leftovers: Vec<&String> = names
            .iter()
            .filter(|n| d.cfg.paths.data(n).exists() || purging_dir(&d.cfg, n).exists())
            .collect();
        if leftovers.len() == names.len() {
            for n in &leftovers {
                purge_data(d, n).map_err(|e| {
                    ApiError::internal(format!("{n}: cannot delete its /data: {e}"))
                })?;
            }
            return Ok(json!({"removed": [], "purged": true, "data_purged": leftovers}));
        }
    }
    for n in names {
        if !old.packages.contains_key(n) {
            return Err(ApiError::new(
                404,
                "not_installed",
                format!("{n} is not installed"),
            ));
        }
        if is_running(d, n) {
            return Err(ApiError::new(
                409,
                "running",
                format!("{n} is running: stop it first (berth stop {n})"),
            ));
        }
        let users: Vec<String> = old
            .dependents(n)
            .into_iter()
            .filter(|u| !names.contains(u))
            .collect();
        if !users.is_empty() {
            return Err(ApiError::new(
                409,
                "needed",
                format!("{n} is needed by {}: remove those first", users.join(", ")),
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
    let mut set_aside: Vec<String> = Vec::new();
    if purge {
        for n in names {
            let (from, to) = (d.cfg.paths.data(n), purging_dir(&d.cfg, n));
            if from.exists() {
                if let Err(e) = std::fs::rename(&from, &to) {
                    for n in &set_aside {
                        let _ = std::fs::rename(purging_dir(&d.cfg, n), d.cfg.paths.data(n));
                    }
                    return Err(ApiError::internal(format!(
                        "{n}: cannot set its /data aside for the purge: {e}; nothing was changed"
                    )));
                }
                set_aside.push(n.clone());
            }
        }
        let _ = fsync_dir(&d.cfg.paths.state.join("data"));
        fault::point("remove.set-aside");
    }
    if let Err(e) = commit_state(d, new) {
        for n in &set_aside {
            let _ = std::fs::rename(purging_dir(&d.cfg, n), d.cfg.paths.data(n));
        }
        return Err(e);
    }
    fault::point("remove.committed");
    release_mounts(d);
    super::net::forget(d, &state(d), names);
    for n in names {
        let _ = std::fs::remove_dir_all(d.cfg.paths.lxc_dir(n));
        remove_stale_cgroups(&d.cfg, n);
        let _ = std::fs::remove_file(d.cfg.paths.saved_log(n));
        let _ = std::fs::remove_file(d.cfg.paths.exit_file(n));
        let _ = std::fs::remove_file(d.cfg.paths.autostart(n));
        let _ = std::fs::remove_file(d.cfg.paths.limits_file(n));
        let _ = std::fs::remove_file(d.cfg.paths.guard_file(n));
        d.guard_kills.lock().unwrap().remove(n.as_str());
        if purge {
            if let Err(e) = purge_data(d, n) {
                log::error!("{n}: its /data is only partly deleted ({e}); berth gc finishes it");
            }
        } else {
            super::security::removed(d, n, false);
        }
    }
    Ok(json!({"removed": names, "purged": purge}))
}

/// Where a container's /data waits while it is being purged.
fn purging_dir(cfg: &Config, name: &str) -> PathBuf {
    cfg.paths.state.join("data").join(format!(".purge-{name}"))
}

/// Deletes a container's /data (set aside or not) and then frees its id range.
fn purge_data(d: &Daemon, name: &str) -> std::io::Result<()> {
    for dir in [purging_dir(&d.cfg, name), d.cfg.paths.data(name)] {
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    super::security::removed(d, name, true);
    Ok(())
}

/// Purges cut short by a crash: a package still installed gets its /data back (its remove
/// never committed); any other set-aside /data is deleted.
fn finish_purges(d: &Daemon) {
    let st = state(d);
    let Ok(entries) = std::fs::read_dir(d.cfg.paths.state.join("data")) else {
        return;
    };
    for e in entries.flatten() {
        let f = e.file_name();
        let Some(name) = f.to_str().and_then(|f| f.strip_prefix(".purge-")) else {
            continue;
        };
        if st.packages.contains_key(name) && !d.cfg.paths.data(name).exists() {
            match std::fs::rename(e.path(), d.cfg.paths.data(name)) {
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

pub fn gc(d: &Daemon) -> ApiResult<Value> {
    let _op = d.op.lock().unwrap();
    finish_purges(d);
    release_mounts(d);
    let st = state(d);
    let mut keep = st.referenced_images();
    // What running containers were started on, whatever the state says now.
    for p in st.packages.values() {
        if is_running(d, p.name.as_str()) {
            keep.extend(running_layers(d, &st, p));
        }
    }
    // And, whatever berth believes, nothing a loop device still reads.
    let backing: Vec<PathBuf> = berth_sys::loopdev::loop_backing_files(Path::new("/sys"))
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
                || is_mounted(d, &d.cfg.paths.image_mount(sha))
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
    Ok(json!({"removed": removed, "freed_bytes": freed}))
}

fn clear_tmp(cfg: &Config) {
    if let Ok(entries) = std::fs::read_dir(cfg.paths.store_tmp()) {
        for e in entries.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

// ---------------------------------------------------------------------------------------
// Mounts

fn mounts(d: &Daemon) -> Vec<PathBuf> {
    berth_sys::mount::mounts_under(Path::new("/proc"), &d.cfg.paths.run)
        .map(|v| v.into_iter().map(|m| m.mount_point).collect())
        .unwrap_or_default()
}

fn is_mounted(d: &Daemon, p: &Path) -> bool {
    mounts(d).iter().any(|m| m == p)
}

fn ensure_image_mounted(d: &Daemon, sha: &str) -> ApiResult<PathBuf> {
    let mnt = d.cfg.paths.image_mount(sha);
    if is_mounted(d, &mnt) {
        return Ok(mnt);
    }
    std::fs::create_dir_all(&mnt).map_err(ApiError::internal)?;
    let image = d.cfg.paths.image(sha);
    berth_sys::loopdev::mount_squashfs(&image, &mnt).map_err(|e| {
        ApiError::new(
            500,
            "mount_failed",
            format!("cannot mount {}: {e}", image.display()),
        )
    })?;
    Ok(mnt)
}

/// Image layers (sha256s) of an installed package, top first.
fn layers(st: &State, p: &Installed) -> ApiResult<Vec<String>> {
    let image_of = |n: &str| st.packages.get(n).map(|p| p.sha256.clone());
    let depends_of = |n: &str| {
        st.packages
            .get(n)
            .map(|p| p.depends.iter().map(|d| d.to_string()).collect())
            .unwrap_or_default()
    };
    plan::image_layers(&p.manifest, &p.sha256, &image_of, &depends_of)
        .map_err(|e| ApiError::new(409, "missing_layer", e.to_string()))
}

/// The images a running container was started on (recorded at its start), or, for one
/// started by an older berth, those its installed package names now.
fn running_layers(d: &Daemon, st: &State, p: &Installed) -> Vec<String> {
    match std::fs::read_to_string(d.cfg.paths.lxc_dir(p.name.as_str()).join("layers")) {
        Ok(text) => text.lines().map(str::to_string).collect(),
        Err(_) => layers(st, p).unwrap_or_default(),
    }
}

/// Unmounts every image mount and merged root that no running container uses.
pub fn release_mounts(d: &Daemon) {
    let st = state(d);
    let mut used_images = BTreeSet::new();
    let mut used_roots = BTreeSet::new();
    // Images of installed packages stay mounted once mounted: a later start finds their
    // pages (decompressed squashfs blocks) still cached, which halves the start time of a
    // package whose files are large.
    for p in st.packages.values() {
        used_images.insert(d.cfg.paths.image_mount(&p.sha256));
    }
    for p in st.packages.values() {
        if is_running(d, p.name.as_str()) {
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

// ---------------------------------------------------------------------------------------
// Containers

/// The init pid of a running container. The daemon asks the container's shim (which holds
/// the liblxc handle), so it never loads liblxc itself; only a container whose shim is gone
/// (killed) makes it ask LXC.
pub fn running_init(d: &Daemon, name: &str) -> Option<i32> {
    if let Some(pid) = shim_info(d, name)["init_pid"].as_i64() {
        return Some(pid as i32);
    }
    if !lxc_monitor_alive(d, name) {
        return None;
    }
    Container::new(name, &d.cfg.paths.lxcpath)
        .ok()
        .filter(|c| c.is_running())
        .and_then(|c| c.init_pid())
}

pub fn is_running(d: &Daemon, name: &str) -> bool {
    // Without a config LXC knows nothing of the container: not ours, or never started.
    if !d.cfg.paths.lxc_dir(name).join("config").exists() {
        return false;
    }
    d.cfg.paths.shim_socket(name).exists() && shim_info(d, name)["init_pid"].is_i64()
        || lxc_monitor_alive(d, name)
}

/// Whether an LXC monitor of this container listens on its command socket (LXC's abstract
/// socket `@<lxcpath>/<name>/command`): the container exists, with or without a shim.
fn lxc_monitor_alive(d: &Daemon, name: &str) -> bool {
    use std::os::linux::net::SocketAddrExt;
    let path = d.cfg.paths.lxc_dir(name).join("command");
    std::os::unix::net::SocketAddr::from_abstract_name(path.as_os_str().as_encoded_bytes())
        .and_then(|a| std::os::unix::net::UnixStream::connect_addr(&a))
        .is_ok()
}

pub(super) fn installed(d: &Daemon, name: &str) -> ApiResult<Installed> {
    state(d).packages.get(name).cloned().ok_or_else(|| {
        ApiError::new(
            404,
            "not_installed",
            format!("{name} is not installed (berth install {name})"),
        )
    })
}

pub fn start(d: &Arc<Daemon>, name: &str) -> ApiResult<Value> {
    let _op = d.op.lock().unwrap();
    start_locked(d, name)
}

fn start_locked(d: &Arc<Daemon>, name: &str) -> ApiResult<Value> {
    let t_begin = Instant::now();
    let p = installed(d, name)?;
    if is_running(d, name) {
        // A monitor whose shim was killed outlives its container by a moment (LXC's
        // teardown): that container is stopping, not running.
        let init = running_init(d, name);
        if init.is_some() || !wait_monitor_gone(d, name, Duration::from_secs(10)) {
            return Err(ApiError::new(
                409,
                "already_running",
                match init {
                    Some(pid) => format!("{name} is already running (init pid {pid})"),
                    None => format!("{name} is still stopping (its LXC monitor has not exited)"),
                },
            ));
        }
    }
    let paths = &d.cfg.paths;
    super::security::check_start(d, &p)?;
    let st = state(d);
    let layer_shas = layers(&st, &p)?;
    let mut lowers = Vec::new();
    for sha in &layer_shas {
        lowers.push(ensure_image_mounted(d, sha)?);
    }
    let rootfs = if lowers.len() == 1 {
        lowers[0].clone()
    } else {
        let root = paths.rootfs(name);
        let _ = berth_sys::mount::umount(&root, true);
        std::fs::create_dir_all(&root).map_err(ApiError::internal)?;
        let refs: Vec<&Path> = lowers.iter().map(PathBuf::as_path).collect();
        berth_sys::mount::mount_overlay_ro(&refs, &root)
            .map_err(|e| ApiError::new(500, "mount_failed", format!("{name}: merged root: {e}")))?;
        root
    };
    let data = paths.data(name);
    if !data.exists() {
        std::fs::create_dir_all(&data).map_err(ApiError::internal)?;
        std::fs::set_permissions(&data, std::os::unix::fs::PermissionsExt::from_mode(0o750))
            .map_err(ApiError::internal)?;
        std::os::unix::fs::chown(
            &data,
            Some(p.manifest.entrypoint.user),
            Some(p.manifest.entrypoint.group),
        )
        .map_err(ApiError::internal)?;
    }
    if let Err(e) = super::security::own_data(d, &p, &data) {
        release_mounts(d);
        return Err(e);
    }
    // Bind what the host has and the image has a mount point for (the root is read-only:
    // LXC cannot create one). A host without /lib64 simply has nothing to bind there.
    let data_mnt = paths.data_mount(name);
    if !is_mounted(d, &data_mnt) {
        std::fs::create_dir_all(&data_mnt).map_err(ApiError::internal)?;
        berth_sys::mount::bind(&data, &data_mnt, false)
            .map_err(|e| ApiError::new(500, "mount_failed", format!("{name}: /data: {e}")))?;
    }
    let host_base_dirs: Vec<PathBuf> = HOST_BASE_DIRS
        .iter()
        .map(PathBuf::from)
        .filter(|p| {
            p.is_dir()
                && std::fs::symlink_metadata(plan::host_base_target(&rootfs, p))
                    .is_ok_and(|m| m.is_dir())
        })
        .collect();
    let limits = match start_limits(d, &p) {
        Ok(l) => l,
        Err(e) => {
            release_mounts(d);
            return Err(e);
        }
    };
    let cg_version = limits.as_ref().map(|(v, _)| *v);
    let net_keys = match super::net::prepare(d, &p, &st, &rootfs) {
        Ok(k) => k,
        Err(e) => {
            release_mounts(d);
            return Err(e);
        }
    };
    let mut text = plan::lxc_config(&ContainerPlan {
        manifest: &p.manifest,
        trusted: p.trusted,
        config: &d.cfg,
        rootfs,
        host_base_dirs,
        limits,
    })
    .map_err(|e| ApiError::new(409, "refused", e.to_string()))?;
    match super::security::lxc_lines(d, &p, cg_version) {
        Ok(lines) => text.push_str(&lines),
        Err(e) => {
            release_mounts(d);
            return Err(e);
        }
    }
    text.push_str(&net_keys);
    let dir = paths.lxc_dir(name);
    std::fs::create_dir_all(&dir).map_err(ApiError::internal)?;
    berth_sys::fsutil::remove_atomic_leftovers(&dir);
    // Its configuration, seccomp profile and LXC's log are root's alone.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .map_err(ApiError::internal)?;
    write_atomic(&dir.join("config"), text.as_bytes(), 0o640).map_err(ApiError::internal)?;
    // The images this run is made of: an upgrade of a dependency while it runs changes the
    // state, not the layers under its root; mounts and gc keep these until it stops.
    write_atomic(&dir.join("layers"), layer_shas.join("\n").as_bytes(), 0o600)
        .map_err(ApiError::internal)?;
    remove_stale_cgroups(&d.cfg, name);
    let args = crate::shim::ShimArgs {
        name: name.to_string(),
        lxcpath: paths.lxcpath.clone(),
        socket: paths.shim_socket(name),
        ring_bytes: d.cfg.log_ring_bytes,
        saved_log: paths.saved_log(name),
        exit_file: paths.exit_file(name),
        start_timeout: Duration::from_secs(d.cfg.start_timeout_s as u64),
        argv: p.manifest.entrypoint.argv.clone(),
    };
    // The shim's own complaints (not the payload's output) go next to LXC's log.
    let shim_log = File::options()
        .create(true)
        .append(true)
        .open(dir.join("shim.log"))
        .map_err(ApiError::internal)?;
    let t0 = Instant::now();
    log::debug!("{name}: prepared in {:?}", t0 - t_begin);
    let mut child = Command::new(&d.exe)
        .args(args.to_args())
        .env("PATH", super::security::shim_path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(shim_log)
        .spawn()
        .map_err(|e| ApiError::internal(format!("spawn shim for {name}: {e}")))?;
    let mut out = String::new();
    let _ = child.stdout.take().map(|mut s| {
        // One line: "ok PID" or "error: …". Reading to EOF would wait for the shim's exit.
        // The shim has its own start timeout; this one guards against a shim wedged in
        // liblxc, which would otherwise hold the operation lock for ever.
        use std::os::fd::AsRawFd;
        let deadline = Instant::now() + args.start_timeout + Duration::from_secs(5);
        let mut b = [0u8; 1];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ready = berth_sys::process::poll(
                &[(s.as_raw_fd(), berth_sys::process::POLLIN)],
                left.as_millis().min(i32::MAX as u128) as i32,
            );
            if !matches!(ready, Ok(ref r) if r[0] != 0) {
                if left.is_zero() {
                    out = format!(
                        "error: {name}: the shim did not report within {} s",
                        args.start_timeout.as_secs() + 5
                    );
                    break;
                }
                continue;
            }
            if s.read(&mut b).unwrap_or(0) != 1 || b[0] == b'\n' {
                break;
            }
            out.push(b[0] as char);
        }
    });
    let _ = child.wait();
    let elapsed = t0.elapsed();
    let Some(pid) = out.strip_prefix("ok ") else {
        release_mounts(d);
        let msg = out.strip_prefix("error: ").unwrap_or(&out).to_string();
        return Err(ApiError::new(
            500,
            "start_failed",
            if msg.is_empty() {
                format!("{name}: the shim died before reporting")
            } else {
                msg
            },
        ));
    };
    let pid: i32 = pid.trim().parse().unwrap_or(0);
    set_autostart(d, name, true)?;
    watch(d, name);
    log::info!(
        "started {name} (init pid {pid}) in {} ms",
        elapsed.as_millis()
    );
    Ok(json!({"name": name, "init_pid": pid, "start_ms": elapsed.as_secs_f64() * 1000.0}))
}

/// Records the operator's last start or stop of a container (an empty marker file): what
/// the daemon starts again after a reboot. Not fsynced: it is a preference, and it must not
/// cost a flash flush on every start and stop; a power cut in the next few seconds at worst
/// forgets the last change.
fn set_autostart(d: &Daemon, name: &str, on: bool) -> ApiResult<()> {
    let marker = d.cfg.paths.autostart(name);
    if on {
        if let Some(dir) = marker.parent() {
            std::fs::create_dir_all(dir).map_err(ApiError::internal)?;
        }
        File::create(&marker)
            .map(drop)
            .map_err(|e| ApiError::internal(format!("{}: {e}", marker.display())))
    } else {
        match std::fs::remove_file(&marker) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(ApiError::internal(format!("{}: {e}", marker.display())))
            }
            _ => Ok(()),
        }
    }
}

/// LXC refuses to start when the container's cgroup already exists (a crash may leave one),
/// and a monitor killed before its clean-up leaves them behind: removes the cgroups of
/// container `name` (`<parent>/<name>` and `<parent>.monitor/<name>`) in every hierarchy,
/// deepest first. Only empty cgroups can go: a running container's stay.
fn remove_stale_cgroups(cfg: &Config, name: &str) {
    fn rmdir_tree(p: &Path) {
        if let Ok(kids) = std::fs::read_dir(p) {
            for k in kids.flatten() {
                if k.file_type().is_ok_and(|t| t.is_dir()) {
                    rmdir_tree(&k.path());
                }
            }
        }
        let _ = std::fs::remove_dir(p);
    }
    let Ok(hiers) = std::fs::read_dir("/sys/fs/cgroup") else {
        return;
    };
    let mut roots: Vec<PathBuf> = hiers.flatten().map(|e| e.path()).collect();
    roots.push(PathBuf::from("/sys/fs/cgroup"));
    for parent in [
        cfg.cgroup_parent.clone(),
        format!("{}.monitor", cfg.cgroup_parent),
    ] {
        for h in &roots {
            let p = h.join(&parent).join(name);
            if p.is_dir() {
                rmdir_tree(&p);
            }
        }
    }
}

/// Names with a cgroup below berth's parent (or its monitors' parent) in any hierarchy.
fn cgroup_names(cfg: &Config) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let Ok(hiers) = std::fs::read_dir("/sys/fs/cgroup") else {
        return names;
    };
    let mut roots: Vec<PathBuf> = hiers.flatten().map(|e| e.path()).collect();
    roots.push(PathBuf::from("/sys/fs/cgroup"));
    for parent in [
        cfg.cgroup_parent.clone(),
        format!("{}.monitor", cfg.cgroup_parent),
    ] {
        for h in &roots {
            if let Ok(kids) = std::fs::read_dir(h.join(&parent)) {
                for k in kids.flatten() {
                    if k.file_type().is_ok_and(|t| t.is_dir()) {
                        names.insert(k.file_name().to_string_lossy().into_owned());
                    }
                }
            }
        }
    }
    names
}

/// Waits until no LXC monitor of the container listens any more; false at the limit.
fn wait_monitor_gone(d: &Daemon, name: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut delay = Duration::from_millis(1);
    while lxc_monitor_alive(d, name) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(50));
    }
    true
}

/// A thread that waits for the container's end (blocked on the shim, no polling) and then
/// releases its mounts.
pub fn watch(d: &Arc<Daemon>, name: &str) {
    let d = Arc::clone(d);
    let name = name.to_string();
    let _ = std::thread::Builder::new()
        .name(format!("watch-{name}"))
        .stack_size(128 * 1024)
        .spawn(move || {
            let sock = d.cfg.paths.shim_socket(&name);
            match crate::shim::request(&sock, "wait") {
                Ok(mut s) => {
                    let mut line = String::new();
                    let _ = s.read_to_string(&mut line);
                    if line.is_empty() {
                        // The shim died without an answer (killed): the container may run
                        // on; ask LXC now and then until it ends.
                        while is_running(&d, &name) {
                            std::thread::sleep(Duration::from_secs(2));
                        }
                        log::info!("{name} stopped (its shim had gone)");
                    } else {
                        log::info!("{name} stopped: {}", line.trim());
                    }
                }
                Err(_) => {
                    // No shim (killed?): fall back to asking LXC now and then.
                    while is_running(&d, &name) {
                        std::thread::sleep(Duration::from_secs(2));
                    }
                    log::info!("{name} stopped");
                }
            }
            // Give the shim a moment to finish writing its exit file.
            let deadline = Instant::now() + Duration::from_secs(2);
            while sock.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _op = d.op.lock().unwrap();
            if !is_running(&d, &name) {
                release_mounts(&d);
                remove_stale_cgroups(&d.cfg, &name);
            }
            berth_sys::process::trim_heap();
            berth_sys::process::release_own_code(false);
        });
}

pub fn stop(d: &Arc<Daemon>, name: &str, timeout: Option<u32>) -> ApiResult<Value> {
    let _op = d.op.lock().unwrap();
    stop_locked(d, name, timeout)
}

fn stop_locked(d: &Arc<Daemon>, name: &str, timeout: Option<u32>) -> ApiResult<Value> {
    installed(d, name)?;
    if !is_running(d, name) {
        return Err(ApiError::new(
            409,
            "not_running",
            format!("{name} is not running"),
        ));
    }
    let timeout = timeout.unwrap_or(d.cfg.stop_timeout_s);
    let t0 = Instant::now();
    let Some(init) = running_init(d, name) else {
        return Err(ApiError::new(
            409,
            "not_running",
            format!("{name} is not running"),
        ));
    };
    // Subscribed before the first signal: the shim answers once it has saved the log ring
    // and the exit status, which is when the stop is complete.
    let shim_wait = crate::shim::request(&d.cfg.paths.shim_socket(name), "wait").ok();
    // SIGTERM goes straight to the payload's processes (not through init.lxc, whose own halt
    // handling gives them one second before SIGKILL, whatever the timeout). When the payload
    // exits, init.lxc exits and the container stops.
    // The init pid is re-checked (same pid namespace) before every signal and while waiting:
    // once the container is gone its pid may be reused by an unrelated process.
    let init_ns = std::fs::read_link(format!("/proc/{init}/ns/pid")).ok();
    let still_init =
        || init_ns.is_some() && std::fs::read_link(format!("/proc/{init}/ns/pid")).ok() == init_ns;
    let members = berth_sys::process::pid_namespace_members(Path::new("/proc"), init);
    for pid in &members {
        let _ = berth_sys::process::kill(*pid, libc::SIGTERM);
    }
    let wait_gone = |limit: Duration| {
        let deadline = Instant::now() + limit;
        let mut delay = Duration::from_millis(1);
        while still_init() && Instant::now() < deadline {
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_millis(50));
        }
        !still_init()
    };
    let graceful = if members.is_empty() {
        // Only init is left (the payload is gone): nothing to be graceful with.
        if still_init() {
            let _ = berth_sys::process::kill(init, libc::SIGKILL);
        }
        wait_gone(Duration::from_secs(10))
    } else {
        wait_gone(Duration::from_secs(timeout as u64))
    };
    if !graceful {
        log::warn!("{name} did not stop within {timeout} s; killing it");
        // Killing a pid namespace's init kills everything in it.
        if still_init() {
            let _ = berth_sys::process::kill(init, libc::SIGKILL);
        }
        if !wait_gone(Duration::from_secs(10)) {
            // Seen with an AppArmor profile that refused the host's signals: never report
            // a stop that did not happen.
            return Err(ApiError::new(
                500,
                "stop_failed",
                format!("{name}: its init (pid {init}) survived SIGKILL: the kernel refused the signal (an LSM such as AppArmor? see the kernel log); it is still running"),
            ));
        }
    }
    match shim_wait {
        Some(mut s) => {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut line = String::new();
            let _ = s.read_to_string(&mut line);
        }
        None => {
            // No shim (it was killed): nobody will save a ring or write an exit file, and
            // the orphaned LXC monitor tears down on its own: its mounts are released only
            // once it has gone.
            let _ = std::fs::remove_file(d.cfg.paths.shim_socket(name));
            if !wait_monitor_gone(d, name, Duration::from_secs(10)) {
                log::warn!("{name}: its LXC monitor is still there 10 s after the stop");
            }
        }
    }
    if !graceful {
        // liblxc reports a killed init as a plain exit; say what really happened.
        let mut exit = exit_info(d, name);
        if let Some(o) = exit.as_object_mut() {
            o.insert("code".into(), Value::Null);
            o.insert("signal".into(), json!(libc::SIGKILL));
            o.insert(
                "killed".into(),
                json!(format!("did not stop within {timeout} s")),
            );
            let _ = write_atomic(
                &d.cfg.paths.exit_file(name),
                exit.to_string().as_bytes(),
                0o600,
            );
        }
    }
    set_autostart(d, name, false)?;
    release_mounts(d);
    let exit = exit_info(d, name);
    Ok(json!({
        "name": name, "graceful": graceful,
        "stop_ms": t0.elapsed().as_secs_f64() * 1000.0, "exit": exit,
    }))
}

pub fn restart(d: &Arc<Daemon>, name: &str) -> ApiResult<Value> {
    let _op = d.op.lock().unwrap();
    installed(d, name)?;
    if is_running(d, name) {
        stop_locked(d, name, None)?;
    }
    start_locked(d, name)
}

fn exit_info(d: &Daemon, name: &str) -> Value {
    std::fs::read(d.cfg.paths.exit_file(name))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null)
}

fn shim_info(d: &Daemon, name: &str) -> Value {
    crate::shim::request(&d.cfg.paths.shim_socket(name), "info")
        .ok()
        .and_then(|mut s| {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut t = String::new();
            s.read_to_string(&mut t).ok()?;
            serde_json::from_str(&t).ok()
        })
        .unwrap_or(Value::Null)
}

pub fn status(d: &Daemon, name: Option<&str>) -> ApiResult<Value> {
    let st = state(d);
    if let Some(n) = name {
        installed(d, n)?;
    }
    let mut containers = Vec::new();
    for p in st.packages.values() {
        if name.is_some_and(|n| n != p.name.as_str()) {
            continue;
        }
        let n = p.name.as_str();
        // One question to the shim gives the state, the pid and the ring's size.
        let info = shim_info(d, n);
        let pid = match info["init_pid"].as_i64() {
            Some(pid) => Some(pid as i32),
            None if is_running(d, n) => running_init(d, n),
            None => None,
        };
        let running = pid.is_some();
        let lxc_state = if running { "RUNNING" } else { "STOPPED" };
        containers.push(json!({
            "name": n,
            "version": p.version.to_string(),
            "state": lxc_state.to_lowercase(),
            "init_pid": pid,
            "started_at": info.get("started_at"),
            "log_bytes": info.get("log_bytes"),
            "network": p.manifest.summary().network_mode,
            "autostart": d.cfg.paths.autostart(n).exists(),
            "last_exit": if running { Value::Null } else { exit_info(d, n) },
            "guard_kill": super::guard::last_kill(d, n),
            "image": p.sha256,
        }));
    }
    Ok(json!({
        "repository": repository_status(d),
        "daemon": {
            "pid": std::process::id(),
            "version": env!("CARGO_PKG_VERSION"),
            "uptime_s": d.started.elapsed().as_secs(),
            "lxcpath": d.cfg.paths.lxcpath,
        },
        "containers": containers,
    }))
}

/// Logs of a container: the live ring (from its shim) or the ring saved when it stopped.
pub enum Logs {
    Live(std::os::unix::net::UnixStream),
    Saved(Vec<u8>),
}

pub fn logs(d: &Daemon, name: &str, follow: bool) -> ApiResult<Logs> {
    installed(d, name)?;
    let sock = d.cfg.paths.shim_socket(name);
    if is_running(d, name) {
        if let Ok(s) = crate::shim::request(&sock, if follow { "follow" } else { "logs" }) {
            return Ok(Logs::Live(s));
        }
    }
    Ok(Logs::Saved(
        std::fs::read(d.cfg.paths.saved_log(name)).unwrap_or_default(),
    ))
}

// ---------------------------------------------------------------------------------------
// Start-up

/// Makes the world match the state after a restart or a crash of the daemon: partial
/// downloads go, running containers are taken over, LXC directories of packages no longer
/// installed go, unused mounts go, and packages marked autostart start after a reboot.
pub fn reconcile(d: &Arc<Daemon>) {
    clear_tmp(&d.cfg);
    finish_purges(d);
    apply_group_budget(d);
    // Temporary files of atomic writes cut short (".state.json.tmp.PID.N"), wherever the
    // daemon or a shim writes atomically.
    let paths = &d.cfg.paths;
    let mut dirs = vec![
        paths.state.clone(),
        paths.state.join("limits"),
        paths.state.join("net"),
        paths.run.join("logs"),
    ];
    if let Ok(entries) = std::fs::read_dir(&paths.lxcpath) {
        dirs.extend(entries.flatten().map(|e| e.path()));
    }
    for dir in dirs {
        berth_sys::fsutil::remove_atomic_leftovers(&dir);
    }
    let st = state(d);
    // Leftover verification mounts of an install that was killed.
    for m in mounts(d) {
        if m.file_name()
            .and_then(|f| f.to_str())
            .is_some_and(|f| f.starts_with(".verify-"))
        {
            let _ = berth_sys::mount::umount(&m, true);
            let _ = std::fs::remove_dir(&m);
        }
    }
    let mut running = BTreeMap::new();
    for p in st.packages.values() {
        let n = p.name.as_str();
        let r = is_running(d, n);
        running.insert(n.to_string(), r);
        if r {
            log::info!("taking over running container {n}");
            watch(d, n);
        }
    }
    if let Ok(entries) = std::fs::read_dir(&d.cfg.paths.lxcpath) {
        for e in entries.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if !st.packages.contains_key(&n) && !is_running(d, &n) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    // cgroups of containers that do not run (a killed monitor leaves its own behind).
    for n in cgroup_names(&d.cfg) {
        if !running.get(&n).copied().unwrap_or(false) && !is_running(d, &n) {
            remove_stale_cgroups(&d.cfg, &n);
        }
    }
    release_mounts(d);
}

/// After a reboot /run is empty (no exit file): bring back what the operator had started. A
/// container that ended while the daemon was away is left for its restart policy. Runs after
/// the admin socket is up, so the CLI sees a daemon that is starting containers, not none.
pub fn autostart(d: &Arc<Daemon>) {
    let st = state(d);
    for p in st.packages.values() {
        let n = p.name.as_str();
        let wanted = d.cfg.paths.autostart(n).exists();
        if wanted && !d.cfg.paths.exit_file(n).exists() && !is_running(d, n) {
            let _op = d.op.lock().unwrap();
            match start_locked(d, n) {
                Ok(_) => log::info!("autostarted {n}"),
                Err(e) => log::error!("autostart of {n} failed: {e}"),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Resources: cgroup limits, the group budget, `berth limit` and `berth stats`

/// The host's cgroup layout and size, found once per daemon (neither changes while it runs).
struct Resources {
    cgroups: Result<Cgroups, String>,
    host: Host,
}

fn resources() -> &'static Resources {
    static R: std::sync::OnceLock<Resources> = std::sync::OnceLock::new();
    R.get_or_init(|| {
        let proc = Path::new("/proc");
        Resources {
            cgroups: Cgroups::detect(proc).map_err(|e| e.to_string()),
            host: Host {
                cpus: cgroupfs::online_cpus(Path::new("/sys")).unwrap_or(1),
                mem_total: cgroupfs::mem_total(proc).unwrap_or(0),
            },
        }
    })
}

fn core_version(c: &Cgroups) -> CgroupVersion {
    match c.version {
        cgroupfs::Version::V1 => CgroupVersion::V1,
        cgroupfs::Version::V2 => CgroupVersion::V2,
    }
}

fn container_cgroup(cfg: &Config, name: &str) -> String {
    format!("{}/{name}", cfg.cgroup_parent)
}

/// The operator's overrides of a container (an absent or unreadable file: none).
fn load_overrides(cfg: &Config, name: &str) -> Overrides {
    std::fs::read(cfg.paths.limits_file(name))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| Overrides::from_json(&v))
        .unwrap_or_default()
}

/// A container's limits now: manifest, overrides, policy.
fn limits_of(d: &Daemon, p: &Installed, ov: &Overrides) -> ApiResult<Limits> {
    cg::container_limits(&p.manifest.resources, ov, &d.cfg.policy, resources().host)
        .map_err(|e| ApiError::new(409, "beyond_policy", format!("{}: {e}", p.name.as_str())))
}

/// The host's cgroup version, if it has cgroups berth can use.
pub(super) fn cgroup_version() -> Option<CgroupVersion> {
    resources().cgroups.as_ref().ok().map(core_version)
}

/// For the LXC configuration at start: the limits, in the host's cgroup version.
fn start_limits(d: &Daemon, p: &Installed) -> ApiResult<Option<(CgroupVersion, Limits)>> {
    let limits = limits_of(d, p, &load_overrides(&d.cfg, p.name.as_str()))?;
    Ok(match &resources().cgroups {
        Ok(c) => {
            // LXC fails the start on a file of a controller the kernel lacks: leave those out.
            let avail = c.available();
            let has = |n: &str| avail.contains(&n);
            // Limits the manifest asks for that this kernel cannot enforce: said at each start.
            let mut missing = Vec::new();
            for (n, asked) in [
                (
                    "cpu",
                    limits.cpu_weight.or(limits.cpu_max_percent).is_some(),
                ),
                ("memory", limits.memory_max.or(limits.memory_soft).is_some()),
                ("pids", limits.pids_max.is_some()),
                ("cpuset", limits.cpuset.is_some()),
            ] {
                if asked && !has(n) {
                    missing.push(n);
                }
            }
            if !missing.is_empty() {
                log::warn!(
                    "{}: no {} cgroup controller on this kernel; those limits are not enforced",
                    p.name.as_str(),
                    missing.join(", ")
                );
            }
            let mut l = limits;
            if !has("cpu") {
                l.cpu_weight = None;
                l.cpu_max_percent = None;
            }
            if !has("memory") {
                l.memory_max = None;
                l.memory_soft = None;
            }
            if !has("pids") {
                l.pids_max = None;
            }
            if !has("cpuset") {
                l.cpuset = None;
            }
            if let Some(cpu) = l.cpu_max_percent {
                let fit = super::governor::fit_container_cpu(d, p.name.as_str(), cpu);
                l.cpu_max_percent = Some(fit);
            }
            Some((core_version(c), l))
        }
        Err(_) => None,
    })
}

/// At daemon start: the parent cgroup every container lives in, capped by the group budget.
pub fn apply_group_budget(d: &Daemon) {
    let r = resources();
    let c = match &r.cgroups {
        Ok(c) => c,
        Err(e) => {
            log::warn!("no resource control: {e}");
            return;
        }
    };
    let rel = d.cfg.cgroup_parent.as_str();
    let limits = cg::group_limits(&d.cfg.policy, r.host);
    let files = cg::files(core_version(c), &limits);
    let result = c
        .ensure(rel, &["cpu", "cpuacct", "memory", "pids"])
        .and_then(|_| {
            c.apply(
                rel,
                files.iter().map(|(k, f, v)| (k.name(), *f, v.as_str())),
            )
        });
    match result {
        Ok(a) => {
            if let Some(note) = a.missing_note() {
                log::warn!("{note}");
            }
            log::info!(
                "group budget on cgroup {rel} ({:?}): cpu {}% of {} CPUs, memory {}, pids {}",
                c.version,
                d.cfg.policy.cpu_max_percent,
                r.host.cpus,
                cg::fmt_size(limits.memory_max.unwrap_or(0)),
                d.cfg.policy.pids_budget
            );
        }
        Err(e) => log::error!("group budget not applied: {e}"),
    }
}

/// `berth limit NAME [--cpu P%] [--memory SIZE] [--pids N]`: checked against the policy,
/// written into the running container's cgroup, and kept for the next start.
pub fn limit(d: &Daemon, name: &str, newer: &Overrides) -> ApiResult<Value> {
    let _op = d.op.lock().unwrap();
    let p = installed(d, name)?;
    let old = load_overrides(&d.cfg, name);
    let ov = old.merged(newer);
    let limits = limits_of(d, &p, &ov)?;
    let running = is_running(d, name);
    let mut applied = false;
    if running && *newer != Overrides::default() {
        let c = resources()
            .cgroups
            .as_ref()
            .map_err(|e| ApiError::new(500, "no_cgroups", format!("cannot change limits: {e}")))?;
        let version = core_version(c);
        // Only what this request changes: the other files already hold their values.
        let changed = Limits {
            cpu_max_percent: newer
                .cpu_max_percent
                .and(limits.cpu_max_percent)
                .map(|p| super::governor::fit_container_cpu(d, name, p)),
            memory_max: newer.memory_max.and(limits.memory_max),
            memory_soft: newer.memory_max.and(limits.memory_soft),
            pids_max: newer.pids_max.and(limits.pids_max),
            ..Limits::default()
        };
        let files = cg::files(version, &changed);
        let a = c
            .apply(
                &container_cgroup(&d.cfg, name),
                files.iter().map(|(k, f, v)| (k.name(), *f, v.as_str())),
            )
            .map_err(|e| {
                ApiError::new(
                    500,
                    "limit_failed",
                    format!("{name}: {e} (the limits were not changed)"),
                )
            })?;
        if let Some(note) = a.missing_note() {
            log::warn!("{name}: {note}");
        }
        applied = true;
    }
    if ov != old {
        let path = d.cfg.paths.limits_file(name);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(ApiError::internal)?;
        }
        let bytes = ov.to_json().to_string().into_bytes();
        write_atomic(&path, &bytes, 0o600)
            .map_err(|e| ApiError::internal(format!("write {}: {e}", path.display())))?;
        log::info!("{name}: limits set to {}", ov.to_json());
    }
    Ok(json!({
        "name": name,
        "running": running,
        "applied": applied,
        "overrides": ov.to_json(),
        "limits": limits.to_json(),
    }))
}

/// One cgroup's counters as JSON; `cpu_percent` (of one CPU) from two usage samples.
fn stats_json(s0: &cgroupfs::Stats, s1: &cgroupfs::Stats, elapsed: Duration) -> Value {
    let cpu_percent = match (s0.cpu_usage_usec, s1.cpu_usage_usec) {
        (Some(a), Some(b)) if elapsed.as_micros() > 0 => {
            Some(b.saturating_sub(a) as f64 * 100.0 / elapsed.as_micros() as f64)
        }
        _ => None,
    };
    let cpu_max_percent = match (s1.cpu_quota_us, s1.cpu_period_us) {
        (Some(q), Some(p)) if p > 0 => Some(q * 100 / p),
        _ => None,
    };
    let mut m = serde_json::Map::new();
    m.insert(
        "cpu_percent".into(),
        cpu_percent.map(|p| (p * 10.0).round() / 10.0).into(),
    );
    m.insert("cpu_max_percent".into(), cpu_max_percent.into());
    // A table, not json!: one insert loop instead of a serializer call per field.
    for (k, v) in [
        ("cpu_usage_usec", s1.cpu_usage_usec),
        ("nr_periods", s1.nr_periods),
        ("nr_throttled", s1.nr_throttled),
        ("throttled_usec", s1.throttled_usec),
        ("memory_current", s1.memory_current),
        ("memory_peak", s1.memory_peak),
        ("memory_max", s1.memory_max),
        ("oom_kills", s1.oom_kills),
        ("pids_current", s1.pids_current),
        ("pids_max", s1.pids_max),
    ] {
        m.insert(k.into(), v.into());
    }
    Value::Object(m)
}

/// How long `berth stats` samples CPU usage.
const STATS_SAMPLE: Duration = Duration::from_millis(500);

pub fn stats(d: &Daemon, name: Option<&str>) -> ApiResult<Value> {
    let c = resources()
        .cgroups
        .as_ref()
        .map_err(|e| ApiError::new(500, "no_cgroups", format!("no stats: {e}")))?;
    let st = state(d);
    if let Some(n) = name {
        installed(d, n)?;
    }
    let names: Vec<String> = st
        .packages
        .keys()
        .filter(|n| match name {
            Some(x) => x == n.as_str(),
            None => true,
        })
        .filter(|n| is_running(d, n))
        .cloned()
        .collect();
    let group = d.cfg.cgroup_parent.clone();
    let rels: Vec<String> = std::iter::once(group.clone())
        .chain(names.iter().map(|n| container_cgroup(&d.cfg, n)))
        .collect();
    let t0 = Instant::now();
    let first: Vec<cgroupfs::Stats> = rels.iter().map(|r| c.stats(r)).collect();
    std::thread::sleep(STATS_SAMPLE);
    let elapsed = t0.elapsed();
    let second: Vec<cgroupfs::Stats> = rels.iter().map(|r| c.stats(r)).collect();
    let mut containers = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let mut v = stats_json(&first[i + 1], &second[i + 1], elapsed);
        v["name"] = json!(n);
        containers.push(v);
    }
    let mut g = stats_json(&first[0], &second[0], elapsed);
    g["cgroup"] = json!(group);
    Ok(json!({
        "cgroup_version": core_version(c).name(),
        "cpus": resources().host.cpus,
        "sample_ms": elapsed.as_millis() as u64,
        "group": g,
        "containers": containers,
    }))
}

/// The cgroup layout (None without one) and the host, for the governor thread.
pub fn cgroups_host() -> (Option<&'static Cgroups>, Host) {
    let r = resources();
    (r.cgroups.as_ref().ok(), r.host)
}
