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

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::device::state;
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
    // The index and its signature over one connection when the server keeps it open.
    let _session = fetch::session();
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
        .map_err(|e| state::write_failed(d, &sf, e, INDEX_KEPT))?;
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
        return Err(state::write_failed(d, &path, e, INDEX_KEPT));
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
    // None: fetched before the clock was set (or ahead of a clock set back since)
    let age = berth_core::date::age(cache.fetched_at, now);
    let warning = if let Some(e) = expires.filter(|e| now >= *e) {
        Some(format!(
            "the cached repository index expired at {}: installs are refused until berth update fetches a re-signed one",
            berth_core::date::utc(e)
        ))
    } else {
        d.cfg.index_max_age_s.and_then(|max| match age {
            Some(age) if age > max => Some(format!(
                "the repository index was fetched {} ago (index_max_age {}): run berth update; is {} reachable?",
                human_age(age),
                human_age(max),
                cache.url
            )),
            None if berth_core::date::clock_set(now)
                && !berth_core::date::clock_set(cache.fetched_at) =>
            {
                Some(format!(
                    "the repository index was fetched before the clock was set: its age is unknown (index_max_age {}): run berth update",
                    human_age(max),
                ))
            }
            _ => None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::testing::{fake_daemon, install, MANIFEST};
    use crate::daemon::store::testrepo::{key, ok, serve, trust, Repo};
    use berth_testkit::TempDir;

    /// A daemon whose repository is a `file://` one signed by a key it trusts, listing web
    /// 1.0 (not published yet).
    fn setup(tag: &str) -> (TempDir, Daemon, Repo) {
        let (dir, mut d, _) = fake_daemon(tag, "");
        let mut r = Repo::for_daemon(&mut d, &dir.0);
        r.add(MANIFEST, b"web 1.0");
        (dir, d, r)
    }

    /// What `berth update` keeps: the cached index and the serial record, as bytes.
    fn kept(d: &Daemon) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        (
            std::fs::read(d.cfg.paths.repository_file()).ok(),
            std::fs::read(serial_file(&d.cfg)).ok(),
        )
    }

    fn cache(d: &Daemon) -> RepoCache {
        serde_json::from_slice(&std::fs::read(d.cfg.paths.repository_file()).unwrap()).unwrap()
    }

    /// The trusted keys are the `.pub` files of the key directory; none (no directory, or
    /// no `.pub` in it) is `no_keys`, a damaged one `bad_key`, each naming the path.
    #[test]
    fn trusted_keys_are_the_pub_files_of_the_key_directory() {
        let (_dir, d, _) = fake_daemon("repo-keys", "");
        let keys = d.cfg.paths.keys.clone();
        std::fs::remove_dir(&keys).unwrap();
        let e = trusted_keys(&d.cfg).unwrap_err();
        assert_eq!(e.kind, Kind::NoKeys);
        assert!(
            e.message
                .contains(&format!("{} is missing", keys.display())),
            "{}",
            e.message
        );

        std::fs::create_dir(&keys).unwrap();
        std::fs::write(keys.join("vendor.txt"), key(1).0.to_file_string("not .pub")).unwrap();
        let e = trusted_keys(&d.cfg).unwrap_err();
        assert_eq!(e.kind, Kind::NoKeys);
        assert_eq!(
            e.message,
            format!(
                "no trusted repository keys in {}: put the repository's .pub key there",
                keys.display()
            )
        );

        trust(&keys, "one", &key(1).0);
        trust(&keys, "two", &key(2).0);
        let mut got: Vec<[u8; 8]> = trusted_keys(&d.cfg)
            .unwrap()
            .iter()
            .map(|k| k.keynum)
            .collect();
        got.sort();
        assert_eq!(got, [[1; 8], [2; 8]]);

        std::fs::write(keys.join("bad.pub"), "untrusted comment: x\nnot base64!\n").unwrap();
        let e = trusted_keys(&d.cfg).unwrap_err();
        assert_eq!(e.kind, Kind::BadKey);
        assert!(
            e.message.starts_with(&format!(
                "trusted key {}: not a signify public key",
                keys.join("bad.pub").display()
            )),
            "{}",
            e.message
        );
    }

    /// An index is accepted only with a good signature of a trusted key over exactly its
    /// bytes, and only if it is a valid index.
    #[test]
    fn an_index_verifies_only_with_a_trusted_keys_signature_over_its_bytes() {
        let (_dir, d, r) = setup("repo-verify");
        let text = r.publish(7, None);
        let sig = r.sign(&text);
        assert_eq!(verify_index(&d.cfg, &text, &sig).unwrap().serial, 7);

        let mut tampered = text.clone();
        let at = tampered.len() - 3;
        tampered[at] ^= 1;
        let e = verify_index(&d.cfg, &tampered, &sig).unwrap_err();
        assert_eq!(e.kind, Kind::BadSignature);
        assert_eq!(
            e.message,
            "repository index rejected: signature does not match the message"
        );

        let other = berth_core::signify::sign(&key(2).1, &text).to_file_string("x");
        let e = verify_index(&d.cfg, &text, &other).unwrap_err();
        assert_eq!(e.kind, Kind::BadSignature);
        assert_eq!(
            e.message,
            format!(
                "repository index rejected: signed by unknown key {}: not among the trusted keys in {}",
                "02".repeat(8),
                d.cfg.paths.keys.display()
            )
        );

        let e = verify_index(&d.cfg, &text, "hello").unwrap_err();
        assert_eq!(e.kind, Kind::BadSignature);
        assert!(e.message.starts_with("index.json.sig: "), "{}", e.message);

        let not_index = br#"{"format": 1, "packages": 3}"#;
        let e = verify_index(&d.cfg, not_index, &r.sign(not_index)).unwrap_err();
        assert_eq!(e.kind, Kind::BadIndex);
        assert!(
            e.message.starts_with("repository index rejected: "),
            "{}",
            e.message
        );
    }

    /// `berth update`: the verified index cached with its source, the serial floor raised,
    /// and the answer says what it got.
    #[test]
    fn update_caches_a_verified_index_and_raises_the_serial_floor() {
        let (_dir, d, r) = setup("repo-update");
        let text = r.publish(10, Some(4_000_000_000));
        let got = update(&d, false).unwrap();
        assert_eq!(
            got,
            json!({
                "repository": r.url(), "unchanged": false, "packages": 1, "serial": 10,
                "expires": 4_000_000_000u64, "upgradable": [],
            })
        );
        let c = cache(&d);
        assert_eq!(
            (c.url.as_str(), c.index.as_bytes()),
            (r.url().as_str(), &text[..])
        );
        assert_eq!(c.signature, r.sign(&text));
        assert_eq!(read_serial_floor(&d.cfg), Some(10));
        let (index, _) = load_index(&d).unwrap();
        assert_eq!(index.packages[0].name.as_str(), "web");
    }

    /// A tampered index, an expired one and an older serial are each refused, and leave the
    /// cached index and the serial record exactly as they were; `--reset-serial` lets the
    /// older serial through on purpose.
    #[test]
    fn a_refused_index_leaves_the_cached_one_in_use() {
        let (_dir, d, r) = setup("repo-refused");
        let text = r.publish(10, None);
        update(&d, false).unwrap();
        let before = kept(&d);

        let sig = r.sign(&text);
        let mut tampered = text.clone();
        tampered.extend_from_slice(b" ");
        std::fs::write(r.dir.join("index.json"), &tampered).unwrap();
        std::fs::write(r.dir.join("index.json.sig"), sig).unwrap();
        assert_eq!(update(&d, false).unwrap_err().kind, Kind::BadSignature);
        assert_eq!(kept(&d), before);

        r.publish(11, Some(1));
        let e = update(&d, false).unwrap_err();
        assert_eq!(e.kind, Kind::Expired);
        assert!(
            e.message.starts_with(&format!(
                "repository index rejected: it expired at {} (expires 1)",
                berth_core::date::utc(1)
            )),
            "{}",
            e.message
        );
        assert_eq!(kept(&d), before);

        r.publish(9, None);
        let e = update(&d, false).unwrap_err();
        assert_eq!(e.kind, Kind::Rollback);
        assert!(
            e.message.starts_with(
                "repository index rejected: its serial 9 is older than 10, the newest this device has accepted"
            ) && e.message.ends_with("run berth update --reset-serial"),
            "{}",
            e.message
        );
        assert_eq!(kept(&d), before);
        // The floor holds without the cached index too (its own record).
        std::fs::remove_file(d.cfg.paths.repository_file()).unwrap();
        assert_eq!(update(&d, false).unwrap_err().kind, Kind::Rollback);
        assert!(!d.cfg.paths.repository_file().exists());

        assert_eq!(update(&d, true).unwrap()["serial"], 9);
        assert_eq!(read_serial_floor(&d.cfg), Some(9));
        assert_eq!(load_index(&d).unwrap().0.serial, 9);
    }

    /// The repository, then its mirrors: one that cannot be read or serves an index signed
    /// by an unknown key is passed over; when none works, every failure is said.
    #[test]
    fn sources_are_tried_in_order_and_every_failure_said() {
        let (dir, mut d, r) = setup("repo-mirrors");
        r.publish(3, None);
        let nowhere = format!("file://{}", dir.path("nowhere").display());
        let mut forged = Repo::signed_by(&dir.path("forged"), &dir.path("untrusted-keys"), 2);
        forged.add(MANIFEST, b"evil");
        forged.publish(99, None);
        d.cfg.repository = Some(nowhere.clone());
        d.cfg.mirrors = vec![forged.url(), r.url()];
        let got = update(&d, false).unwrap();
        assert_eq!(
            (&got["repository"], &got["serial"]),
            (&json!(r.url()), &json!(3))
        );
        assert_eq!(cache(&d).url, r.url());

        let before = kept(&d);
        d.cfg.mirrors = vec![forged.url()];
        let e = update(&d, false).unwrap_err();
        assert_eq!(e.kind, Kind::FetchFailed);
        assert!(
            e.message.starts_with(&format!(
                "no source of the repository worked ({nowhere}: cannot read {}",
                dir.path("nowhere/index.json").display()
            )) && e.message.contains(&format!(
                "; {}: repository index rejected: signed by unknown key",
                forged.url()
            )),
            "{}",
            e.message
        );
        assert_eq!(kept(&d), before);

        d.cfg.repository = None;
        d.cfg.mirrors.clear();
        assert_eq!(update(&d, false).unwrap_err().kind, Kind::NoRepository);
    }

    /// Over HTTP, the entity tags of the cached copy are sent again and a 304 for both files
    /// takes the cached index: `unchanged`.
    #[test]
    fn an_unchanged_index_is_taken_from_the_cache() {
        let (_dir, mut d, r) = setup("repo-etag");
        let text = r.publish(5, None);
        let sig = r.sign(&text).into_bytes();
        let not_modified = b"HTTP/1.1 304 Not Modified\r\n\r\n".to_vec();
        let (base, server) = serve(vec![
            ok(&text, Some("\"i1\"")),
            ok(&sig, Some("\"s1\"")),
            not_modified.clone(),
            not_modified,
        ]);
        d.cfg.repository = Some(base.clone());
        assert_eq!(update(&d, false).unwrap()["unchanged"], false);
        let c = cache(&d);
        assert_eq!(
            (c.index_etag.as_deref(), c.signature_etag.as_deref()),
            (Some("\"i1\""), Some("\"s1\""))
        );
        let got = update(&d, false).unwrap();
        assert_eq!(
            (&got["unchanged"], &got["serial"]),
            (&json!(true), &json!(5))
        );
        assert_eq!(cache(&d).index.as_bytes(), &text[..]);
        let requests = server.join().unwrap();
        assert_eq!(requests.len(), 4);
        assert!(!requests[0].contains("If-None-Match"), "{}", requests[0]);
        assert!(
            requests[2].contains("If-None-Match: \"i1\"\r\n"),
            "{}",
            requests[2]
        );
        assert!(
            requests[3].contains("If-None-Match: \"s1\"\r\n"),
            "{}",
            requests[3]
        );
    }

    /// The cached index is verified again at every use, against the keys trusted now.
    #[test]
    fn the_cached_index_is_verified_again_at_every_use() {
        let (_dir, d, r) = setup("repo-load");
        let e = load_index(&d).unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (Kind::NoIndex, "no repository index yet: run berth update")
        );
        let path = d.cfg.paths.repository_file();
        std::fs::write(&path, "{").unwrap();
        let e = load_index(&d).unwrap_err();
        assert_eq!(e.kind, Kind::BadCache);
        assert!(
            e.message
                .starts_with(&format!("{} is damaged", path.display())),
            "{}",
            e.message
        );

        r.publish(1, None);
        update(&d, false).unwrap();
        assert!(load_index(&d).is_ok());
        // The vendor's key replaced: the cached index no longer verifies.
        std::fs::remove_file(d.cfg.paths.keys.join("vendor.pub")).unwrap();
        trust(&d.cfg.paths.keys, "new", &key(3).0);
        assert_eq!(load_index(&d).unwrap_err().kind, Kind::BadSignature);
        trust(&d.cfg.paths.keys, "vendor", &key(1).0);

        // An index that expired since it was cached.
        let mut c = cache(&d);
        let index = Index {
            expires: Some(1),
            ..Index::parse(c.index.as_bytes()).unwrap()
        };
        c.index = index.to_json();
        c.signature = r.sign(c.index.as_bytes());
        std::fs::write(&path, serde_json::to_vec(&c).unwrap()).unwrap();
        let e = load_index(&d).unwrap_err();
        assert_eq!(e.kind, Kind::Expired);
        assert!(
            e.message.starts_with(&format!(
                "the cached repository index expired at {}",
                berth_core::date::utc(1)
            )),
            "{}",
            e.message
        );
    }

    /// When the cache cannot be written, the serial record goes back to what it was: the
    /// floor stays with the index it belongs to.
    #[test]
    fn a_cache_that_cannot_be_written_puts_the_serial_record_back() {
        let (_dir, d, r) = setup("repo-write");
        r.publish(10, None);
        update(&d, false).unwrap();
        let record = std::fs::read(serial_file(&d.cfg)).unwrap();
        let path = d.cfg.paths.repository_file();
        std::fs::remove_file(&path).unwrap();
        // A directory that is not empty cannot be replaced by a file.
        std::fs::create_dir_all(path.join("in-the-way")).unwrap();
        r.publish(11, None);
        let e = update(&d, false).unwrap_err();
        assert_eq!(e.kind, Kind::Internal);
        assert!(
            e.message.starts_with(&format!("write {}", path.display())),
            "{}",
            e.message
        );
        assert_eq!(std::fs::read(serial_file(&d.cfg)).unwrap(), record);
        assert_eq!(read_serial_floor(&d.cfg), Some(10));
    }

    /// `berth list`: what is installed, what the index offers (with the version installed)
    /// and what can be upgraded; without an index, why there is nothing available.
    #[test]
    fn list_shows_installed_available_and_upgradable() {
        let (_dir, d, mut r) = setup("repo-list");
        install(&d, MANIFEST);
        let got = list(&d).unwrap();
        assert_eq!(got["available"], json!([]));
        assert_eq!(
            got["index_note"],
            "no repository index yet: run berth update"
        );
        assert_eq!(got["installed"][0]["version"], "1.0");

        r.add(&MANIFEST.replace("1.0", "2.0"), b"web 2.0");
        r.add(&MANIFEST.replace("web", "db"), b"db 1.0");
        r.publish(2, None);
        let up = json!([{"name": "web", "installed": "1.0", "available": "2.0"}]);
        assert_eq!(update(&d, false).unwrap()["upgradable"], up);
        let got = list(&d).unwrap();
        assert_eq!(got["upgradable"], up);
        assert_eq!(got["index_note"], Value::Null);
        let avail: Vec<(String, String, Value)> = got["available"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap().into(),
                    p["version"].as_str().unwrap().into(),
                    p["installed"].clone(),
                )
            })
            .collect();
        assert_eq!(
            avail,
            [
                ("db".into(), "1.0".into(), Value::Null),
                ("web".into(), "2.0".into(), json!("1.0"))
            ]
        );
        let installed = &got["installed"][0];
        assert_eq!(
            (
                &installed["name"],
                &installed["explicit"],
                &installed["sha256"]
            ),
            (&json!("web"), &json!(true), &json!("ab".repeat(32)))
        );
    }

    /// `berth status`'s view of the cache: a warning once it is older than `index_max_age`.
    #[test]
    fn repository_status_warns_of_an_index_older_than_allowed() {
        let (_dir, mut d, r) = setup("repo-status");
        d.cfg.index_max_age_s = Some(60);
        let s = repository_status(&d);
        assert_eq!(s["warning"], "no repository index yet: run berth update");
        r.publish(4, None);
        update(&d, false).unwrap();
        let s = repository_status(&d);
        assert_eq!((&s["serial"], &s["warning"]), (&json!(4), &Value::Null));
        let mut c = cache(&d);
        c.fetched_at -= 7_300;
        let path = d.cfg.paths.repository_file();
        std::fs::write(&path, serde_json::to_vec(&c).unwrap()).unwrap();
        let s = repository_status(&d);
        let w = s["warning"].as_str().unwrap();
        assert!(
            w.starts_with("the repository index was fetched 2 h ago (index_max_age 60 s)"),
            "{w}"
        );
        // Fetched in 1970 (no real-time clock, NTP not answered yet), read with the clock
        // set: no age of 56 years, but an unknown one, said so.
        c.fetched_at = 300;
        std::fs::write(&path, serde_json::to_vec(&c).unwrap()).unwrap();
        let s = repository_status(&d);
        assert_eq!(s["age_s"], Value::Null);
        assert_eq!(
            s["warning"],
            "the repository index was fetched before the clock was set: its age is unknown (index_max_age 60 s): run berth update"
        );
        // Fetched ahead of a clock set back since: no age, and nothing to warn of yet.
        c.fetched_at = berth_sys::process::now_s() + 86_400;
        std::fs::write(&path, serde_json::to_vec(&c).unwrap()).unwrap();
        let s = repository_status(&d);
        assert_eq!((&s["age_s"], &s["warning"]), (&Value::Null, &Value::Null));
        assert_eq!(
            [
                human_age(59),
                human_age(120),
                human_age(7_200),
                human_age(172_800)
            ],
            ["59 s", "2 min", "2 h", "2 days"]
        );
    }
}
