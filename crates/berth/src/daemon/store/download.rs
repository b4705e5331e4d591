//! Downloads into the store's `.tmp`: what the signed index names (an image, or a delta),
//! resumed from a part held, checked whole against the index's size and sha256.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berth_core::api::install as field;
use serde_json::{json, Value};

use crate::daemon::context::Daemon;
use crate::daemon::error::{Error, Kind, Result};
use crate::daemon::store::repo;
use crate::fetch;
use crate::hooks;

/// A file the signed index names, to download: an image or a delta.
pub(crate) struct Want<'a> {
    /// For messages: `app@2`.
    pub label: &'a str,
    /// `image` or `delta`.
    pub what: &'a str,
    /// For progress events.
    pub package: &'a str,
    pub file: &'a str,
    pub size: u64,
    pub sha256: &'a str,
}

/// Downloads what `want` names into the store's `.tmp` (resuming a part held), checks its
/// size and sha256 against the signed index and syncs it; its path.
pub(crate) fn download(
    d: &Daemon,
    bases: &[String],
    want: &Want,
    emit: &mut dyn FnMut(Value),
) -> Result<PathBuf> {
    let paths = &d.cfg.paths;
    let label = want.label;
    let what = want.what;
    // A partial download of this very file (named by its sha256) is resumed: kept across
    // failures and daemon restarts, checked as a whole at the end like any download.
    let tmp = paths.store_tmp().join(format!("{}.part", want.sha256));
    // One longer than the file cannot be a part of it.
    if std::fs::metadata(&tmp).is_ok_and(|m| m.len() > want.size) {
        let _ = std::fs::remove_file(&tmp);
    }
    let mut f = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&tmp)
        .map_err(|err| Error::internal(format!("open {}: {err}", tmp.display())))?;
    let name = want.package;
    let total = want.size;
    let mut last = Instant::now() - Duration::from_secs(1);
    let mut progress = |p: fetch::Progress| {
        if last.elapsed() >= Duration::from_millis(100) || p.done == total {
            last = Instant::now();
            emit(json!({
                field::EVENT: "progress",
                field::PACKAGE: name,
                field::DONE: p.done,
                field::TOTAL: total,
            }));
        }
    };
    let cleanup = |err: Error| {
        let _ = std::fs::remove_file(&tmp);
        err
    };
    let mut outcome = None;
    let mut failed = Vec::new();
    for b in bases {
        let url = fetch::join_url(b, want.file).map_err(repo::fetch_err)?;
        let held = f.metadata().map(|m| m.len()).unwrap_or(0).min(want.size);
        // One byte more than announced is enough to notice a file larger than the index says.
        match fetch::fetch_resume(&url, &mut f, held, want.size.saturating_add(1), &mut progress) {
            Ok((size, sha, answer)) => {
                if answer.resumed {
                    log::info!("{label}: resumed from byte {held} of {}", want.size);
                }
                outcome = Some((size, sha));
                break;
            }
            Err(err) if err.is_source_failure() => {
                log::warn!("{label}: {err}");
                failed.push(err);
            }
            Err(err) if err.is_no_space() => {
                return Err(cleanup(Error::new(
                    Kind::NoSpace,
                    format!(
                        "store full: no room for {label} ({} bytes) in {}; nothing was changed (free space with berth gc or berth remove)",
                        want.size,
                        paths.store().display()
                    ),
                )))
            }
            Err(err) => return Err(cleanup(repo::fetch_err(err))),
        }
    }
    let (size, sha) = match outcome {
        Some(o) => o,
        None => {
            // The bytes received stay for the next attempt, which resumes from them.
            let held = f.metadata().map(|m| m.len()).unwrap_or(0);
            let mut err = repo::fetch_err(failed.pop().expect("at least one source tried"));
            if held > 0 {
                err.message.push_str(&format!(
                    "; {held} of {} bytes kept: the next install resumes from there",
                    want.size
                ));
            }
            return Err(err);
        }
    };
    hooks::point("install.fetched");
    if size != want.size {
        return Err(cleanup(Error::new(
            Kind::BadImage,
            format!("{label}: {what} is {size} bytes, the index says {}: truncated or replaced download; nothing was changed", want.size),
        )));
    }
    if sha != want.sha256 {
        return Err(cleanup(Error::new(
            Kind::BadImage,
            format!("{label}: {what} sha256 is {sha}, the signed index says {}: refusing it; nothing was changed", want.sha256),
        )));
    }
    f.sync_all().map_err(|err| {
        cleanup(if berth_sys::fsutil::is_enospc(&err) {
            Error::new(Kind::NoSpace, format!("store full while writing {label}"))
        } else {
            Error::internal(format!("fsync {}: {err}", tmp.display()))
        })
    })?;
    drop(f);
    Ok(tmp)
}

pub(crate) fn hash_file(path: &Path) -> std::io::Result<(u64, String)> {
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
