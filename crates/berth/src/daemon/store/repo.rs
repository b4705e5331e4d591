//! The repository: trusted keys, index verification, `berth update` (serial floor, expiry), `berth list`.

use std::path::PathBuf;

use berth_core::api::{
    list as list_field, package, repository, update as update_field, upgradable as up,
};
use berth_core::config::Config;
use berth_core::index::Index;
use berth_core::signify::{PublicKey, Signature};
use berth_core::state::{RepoCache, State};
use berth_sys::fsutil::write_atomic;
use serde_json::{json, Value};

use crate::daemon::context::Daemon;
use crate::daemon::error::{Error, Kind, Result};
use crate::daemon::state;
use crate::fetch;

pub(crate) const INDEX_LIMIT: u64 = 8 << 20;

pub(crate) const SIG_LIMIT: u64 = 4096;

pub(crate) fn trusted_keys(cfg: &Config) -> Result<Vec<PublicKey>> {
    let dir = &cfg.paths.keys;
    let mut keys = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(_) => {
            return Err(Error::new(
                Kind::NoKeys,
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
            .map_err(|err| Error::internal(format!("read {}: {err}", p.display())))?;
        let key = PublicKey::parse(&text).map_err(|err| {
            Error::new(Kind::BadKey, format!("trusted key {}: {err}", p.display()))
        })?;
        keys.push(key);
    }
    if keys.is_empty() {
        return Err(Error::new(
            Kind::NoKeys,
            format!(
                "no trusted repository keys in {}: put the repository's .pub key there",
                dir.display()
            ),
        ));
    }
    Ok(keys)
}

pub(crate) fn verify_index(cfg: &Config, index: &[u8], sig: &str) -> Result<Index> {
    let keys = trusted_keys(cfg)?;
    let sig = Signature::parse(sig)
        .map_err(|e| Error::new(Kind::BadSignature, format!("index.json.sig: {e}")))?;
    berth_core::signify::verify_with_any(&keys, index, &sig).map_err(|e| {
        let reason = match e {
            // The error's own text names the default key directory; say which one was read.
            berth_core::signify::SignifyError::UnknownKey(keynum) => format!(
                "signed by unknown key {keynum}: not among the trusted keys in {}",
                cfg.paths.keys.display()
            ),
            e => e.to_string(),
        };
        Error::new(
            Kind::BadSignature,
            format!("repository index rejected: {reason}"),
        )
    })?;
    Index::parse(index)
        .map_err(|e| Error::new(Kind::BadIndex, format!("repository index rejected: {e}")))
}

/// The cached index, verified again against the keys trusted now.
pub(crate) fn load_index(d: &Daemon) -> Result<(Index, RepoCache)> {
    let path = d.cfg.paths.repository_file();
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(_) => {
            return Err(Error::new(
                Kind::NoIndex,
                "no repository index yet: run berth update",
            ))
        }
    };
    let cache: RepoCache = serde_json::from_slice(&bytes).map_err(|e| {
        Error::new(
            Kind::BadCache,
            format!("{} is damaged ({e}): run berth update", path.display()),
        )
    })?;
    let index = verify_index(&d.cfg, cache.index.as_bytes(), &cache.signature)?;
    if let Some(e) = index
        .expires
        .filter(|_| index.expired(berth_sys::process::now_s()))
    {
        return Err(Error::new(
            Kind::Expired,
            format!(
                "the cached repository index expired at {}: run berth update (the repository owner must publish a re-signed index)",
                berth_core::date::utc(e)
            ),
        ));
    }
    Ok((index, cache))
}

pub(crate) fn repository_url(d: &Daemon) -> Result<String> {
    d.cfg.repository.clone().ok_or_else(|| {
        Error::new(
            Kind::NoRepository,
            "no repository configured: set repository = \"http://…\" in the berth configuration",
        )
    })
}

pub(crate) fn fetch_err(e: fetch::FetchError) -> Error {
    if e.is_no_space() {
        Error::new(Kind::NoSpace, format!("{e}"))
    } else {
        Error::new(Kind::FetchFailed, format!("{e}"))
    }
}

/// The newest serial this device has accepted (`{"serial", "url"}`), kept apart from the
/// cached index so that a rollback is refused even when that index no longer verifies (its
/// key was removed).
pub(crate) fn serial_file(cfg: &Config) -> PathBuf {
    cfg.paths.state.join("repository.serial")
}

// The serial record's fields. The record is this device's file, not an API answer: its
// names must not follow the API's.
/// The newest serial accepted.
const RECORD_SERIAL: &str = "serial";
/// The repository that served it.
const RECORD_URL: &str = "url";

pub(crate) fn read_serial_floor(cfg: &Config) -> Option<u64> {
    std::fs::read(serial_file(cfg))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v[RECORD_SERIAL].as_u64())
}

pub(crate) const INDEX_KEPT: &str = "the previous repository index stays in use";

/// The sources of the repository, in the order they are tried: `repository`, then `mirrors`.
pub(crate) fn sources(d: &Daemon) -> Result<Vec<String>> {
    let first = repository_url(d)?;
    let mut all = vec![first];
    for m in &d.cfg.mirrors {
        if !all.contains(m) {
            all.push(m.clone());
        }
    }
    Ok(all)
}

/// The index and its signature from one source, each with its entity tag; what the server
/// says is unchanged since the cached copy (304, asked with `If-None-Match` when the cache
/// came from this same source) is taken from the cache.
/// What a source gave: index.json, its signature, their entity tags, whether both were 304.
struct Fetched {
    index: Vec<u8>,
    sig: String,
    index_etag: Option<String>,
    signature_etag: Option<String>,
    unchanged: bool,
}

fn fetch_index(base: &str, cached: Option<&RepoCache>) -> Result<Fetched> {
    let same = cached.filter(|c| c.url == base);
    let index_url = fetch::join_url(base, "index.json").map_err(fetch_err)?;
    let sig_url = fetch::join_url(base, "index.json.sig").map_err(fetch_err)?;
    let (index, ia) = fetch::fetch_bytes_if(
        &index_url,
        INDEX_LIMIT,
        same.and_then(|c| c.index_etag.as_deref()),
    )
    .map_err(fetch_err)?;
    let (sig, sa) = fetch::fetch_bytes_if(
        &sig_url,
        SIG_LIMIT,
        same.and_then(|c| c.signature_etag.as_deref()),
    )
    .map_err(fetch_err)?;
    let unchanged = index.is_none() && sig.is_none();
    let index = match (index, same) {
        (Some(b), _) => b,
        (None, Some(c)) => c.index.clone().into_bytes(),
        (None, None) => {
            return Err(Error::new(
                Kind::BadIndex,
                "304 for index.json without a cached copy",
            ))
        }
    };
    let sig = match (sig, same) {
        (Some(b), _) => String::from_utf8(b)
            .map_err(|_| Error::new(Kind::BadSignature, "index.json.sig is not text"))?,
        (None, Some(c)) => c.signature.clone(),
        (None, None) => {
            return Err(Error::new(
                Kind::BadSignature,
                "304 for index.json.sig without a cached copy",
            ))
        }
    };
    Ok(Fetched {
        index,
        sig,
        index_etag: ia.etag,
        signature_etag: sa.etag,
        unchanged,
    })
}

pub(crate) fn update(d: &Daemon, reset_serial: bool) -> Result<Value> {
    let _op = d.op.lock().unwrap();
    let sources = sources(d)?;
    let cached: Option<RepoCache> = std::fs::read(d.cfg.paths.repository_file())
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    // Each source in turn until one gives an index that verifies: a mirror that cannot be
    // reached, or serves a bad copy, is passed over (the signature decides, not the mirror);
    // every failure is said if none works.
    let mut failures = Vec::new();
    let mut got = None;
    for base in &sources {
        match fetch_index(base, cached.as_ref()).and_then(|f| {
            let parsed = verify_index(&d.cfg, &f.index, &f.sig)?;
            Ok((base.clone(), f, parsed))
        }) {
            Ok(g) => {
                got = Some(g);
                break;
            }
            Err(e) => {
                if sources.len() > 1 {
                    log::warn!("repository source {base}: {}", e.message);
                }
                failures.push((base.clone(), e));
            }
        }
    }
    let (base, fetched, parsed) = match got {
        Some(g) => g,
        None if failures.len() == 1 => return Err(failures.remove(0).1),
        None => {
            let kind = failures[0].1.kind;
            let all: Vec<String> = failures
                .iter()
                .map(|(b, e)| format!("{b}: {}", e.message))
                .collect();
            return Err(Error::new(
                kind,
                format!("no source of the repository worked ({})", all.join("; ")),
            ));
        }
    };
    commit_index(d, &base, fetched, parsed, reset_serial)
}

/// Whether a verified index may replace the cached one: not expired, its serial not older
/// than the newest this device has accepted (no way around the floor: the fleet's bundles).
#[cfg(feature = "fleet")]
pub(crate) fn admissible(d: &Daemon, parsed: &Index) -> Result<()> {
    gate(d, "a fleet bundle", parsed, None)
}

/// Expiry, then the serial floor: the newest serial accepted, from its own record and from
/// the cached index (an index cached by an older berth, which kept no record).
/// `reset_serial`: Some for `berth update`, whose `--reset-serial` (Some(true)) lets an older
/// serial of `base` through, logged; None for a fleet bundle, which nothing lets through.
fn gate(d: &Daemon, base: &str, parsed: &Index, reset_serial: Option<bool>) -> Result<()> {
    if parsed.expired(berth_sys::process::now_s()) {
        let e = parsed.expires.unwrap_or(0);
        return Err(Error::new(
            Kind::Expired,
            format!(
                "repository index rejected: it expired at {} (expires {e}); an expired index may be a replay that freezes this device on old packages: the repository owner must rebuild and re-sign it (berth repo build --valid-for …)",
                berth_core::date::utc(e)
            ),
        ));
    }
    let cached = load_index(d).ok().map(|(i, _)| i.serial);
    let floor = read_serial_floor(&d.cfg).into_iter().chain(cached).max();
    if let Some(floor) = floor.filter(|f| parsed.serial < *f) {
        if reset_serial != Some(true) {
            let advice = if reset_serial.is_some() {
                ". To move to another repository on purpose, run berth update --reset-serial"
            } else {
                ""
            };
            return Err(Error::new(
                Kind::Rollback,
                format!(
                    "repository index rejected: its serial {} is older than {floor}, the newest this device has accepted; refusing a rollback (an old index is being replayed, or a mirror is out of date){advice}",
                    parsed.serial
                ),
            ));
        }
        log::warn!(
            "repository {base}: serial {} accepted below the newest accepted ({floor}) on the operator's request (--reset-serial)",
            parsed.serial
        );
    }
    Ok(())
}

/// A signed index the fleet server deployed in a bundle (docs/fleet.md): checked as `berth
/// update` checks one (signature against the device's keys, expiry, the serial floor; no
/// way around the floor) and cached as if `base` had served it. Under the op lock.
#[cfg(feature = "fleet")]
pub(crate) fn accept_locked(d: &Daemon, base: &str, index: Vec<u8>, sig: String) -> Result<Index> {
    let parsed = verify_index(&d.cfg, &index, &sig)?;
    let fetched = Fetched {
        index,
        sig,
        index_etag: None,
        signature_etag: None,
        unchanged: false,
    };
    commit_index(d, base, fetched, parsed.clone(), false)?;
    Ok(parsed)
}

/// The gate (expiry, serial floor), then the floor record and the cache, atomically each.
/// Under the op lock.
fn commit_index(
    d: &Daemon,
    base: &str,
    fetched: Fetched,
    parsed: Index,
    reset_serial: bool,
) -> Result<Value> {
    let Fetched {
        index,
        sig,
        index_etag,
        signature_etag,
        unchanged,
    } = fetched;
    gate(d, base, &parsed, Some(reset_serial))?;
    let now = berth_sys::process::now_s();
    let index_text = String::from_utf8(index)
        .map_err(|_| Error::new(Kind::BadIndex, "index.json is not UTF-8"))?;
    let cache = RepoCache {
        url: base.to_string(),
        fetched_at: now,
        index: index_text,
        signature: sig,
        index_etag,
        signature_etag,
    };
    // The floor first: a crash between the two writes leaves it raised, never lowered.
    let sf = serial_file(&d.cfg);
    let old_record = std::fs::read(&sf).ok();
    let rec = json!({RECORD_SERIAL: parsed.serial, RECORD_URL: base});
    write_atomic(&sf, rec.to_string().as_bytes(), 0o600)
        .map_err(|e| state::write_failed(&sf, e, INDEX_KEPT))?;
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
        return Err(state::write_failed(&path, e, INDEX_KEPT));
    }
    let st = state::state(d);
    let upgradable = upgradable(&st, &parsed);
    Ok(json!({
        update_field::REPOSITORY: base,
        update_field::UNCHANGED: unchanged,
        update_field::PACKAGES: parsed.packages.len(),
        update_field::SERIAL: parsed.serial,
        update_field::EXPIRES: parsed.expires,
        update_field::UPGRADABLE: upgradable,
    }))
}

/// For `berth status`: the cached index's serial, age and expiry, and a warning when it is
/// expired or older than the policy's `index_max_age`. Read without verifying: display only.
pub(crate) fn repository_status(d: &Daemon) -> Value {
    let now = berth_sys::process::now_s();
    let cache: Option<RepoCache> = std::fs::read(d.cfg.paths.repository_file())
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let Some(cache) = cache else {
        let warning = d
            .cfg
            .index_max_age_s
            .map(|_| "no repository index yet: run berth update".to_string());
        return json!({repository::URL: d.cfg.repository, repository::WARNING: warning});
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
        repository::URL: cache.url,
        repository::SERIAL: index.as_ref().map(|i| i.serial),
        repository::FETCHED_AT: cache.fetched_at,
        repository::AGE_S: age,
        repository::EXPIRES: expires,
        repository::WARNING: warning,
    })
}

pub(crate) fn human_age(s: u64) -> String {
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        7200..=172_799 => format!("{} h", s / 3600),
        _ => format!("{} days", s / 86_400),
    }
}

pub(crate) fn upgradable(st: &State, index: &Index) -> Vec<Value> {
    st.packages
        .values()
        .filter_map(|p| {
            let e = index.get(p.name.as_str())?;
            (e.version > p.version).then(|| {
                json!({
                    up::NAME: p.name.as_str(),
                    up::INSTALLED: p.version.to_string(),
                    up::AVAILABLE: e.version.to_string(),
                })
            })
        })
        .collect()
}

pub(crate) fn list(d: &Daemon) -> Result<Value> {
    let st = state::state(d);
    let installed: Vec<Value> = st
        .packages
        .values()
        .map(|p| {
            json!({
                package::NAME: p.name.as_str(), package::VERSION: p.version.to_string(),
                package::DESCRIPTION: p.manifest.package.description, package::EXPLICIT: p.explicit,
                package::SHA256: p.sha256, package::SIZE: p.size,
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
                        package::NAME: e.name.as_str(), package::VERSION: e.version.to_string(),
                        package::DESCRIPTION: e.description, package::SIZE: e.size,
                        package::INSTALLED: st.packages.get(e.name.as_str()).map(|p| p.version.to_string()),
                    })
                })
                .collect();
            let up = upgradable(&st, &index);
            (avail, up, None)
        }
        Err(e) => (Vec::new(), Vec::new(), Some(e.message)),
    };
    Ok(json!({
        list_field::INSTALLED: installed,
        list_field::AVAILABLE: available,
        list_field::UPGRADABLE: upgradable,
        list_field::INDEX_NOTE: note,
    }))
}
