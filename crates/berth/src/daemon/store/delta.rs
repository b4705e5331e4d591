//! Images rebuilt from a delta (docs/repository.md, "Delta images"): when the signed index
//! lists a delta from an image the store holds, the delta is fetched instead of the image,
//! checked against its own sha256 before a byte of it is decoded, decoded by `zstd
//! --patch-from` against the held image, and the result checked against the image's sha256
//! before it is used. Any failure (no zstd, a source without the delta, a wrong hash, a full
//! disk) is logged and reported as a `delta_failed` event, and the caller fetches the whole
//! image as before: a delta can only save bytes, never break an install.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use berth_core::api::install as field;
use berth_core::index::{Delta, IndexEntry, DELTA_ZSTD_PATCH};
use serde_json::{json, Value};

use crate::daemon::context::Daemon;
use crate::daemon::store::download::{download, hash_file, Want};

/// A rebuilt image, checked: where it is and what it cost to fetch.
pub(crate) struct Rebuilt<'a> {
    pub path: PathBuf,
    pub delta: &'a Delta,
}

/// The delta to use for `e`: the first of a known format whose old image the store holds.
fn usable<'a>(d: &Daemon, e: &'a IndexEntry) -> Option<&'a Delta> {
    e.deltas
        .iter()
        .find(|x| x.format == DELTA_ZSTD_PATCH && d.cfg.paths.image(&x.from).is_file())
}

/// `zstd` on the daemon's PATH.
fn zstd() -> Option<PathBuf> {
    berth_sys::check::which(std::env::var_os("PATH").as_ref(), "zstd")
}

/// Tries the delta route for `e`; None when there is none or it failed (said in the log and
/// as an event), and the whole image is to be fetched.
pub(crate) fn rebuild<'a>(
    d: &Daemon,
    bases: &[String],
    e: &'a IndexEntry,
    emit: &mut dyn FnMut(Value),
) -> Option<Rebuilt<'a>> {
    let delta = usable(d, e)?;
    let label = format!("{}@{}", e.name, e.version);
    // A part of the image held already (a cut download) may leave less to fetch than the
    // delta: then the image's download resumes instead.
    let part = d.cfg.paths.store_tmp().join(format!("{}.part", e.sha256));
    let held = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
    if e.size.saturating_sub(held) <= delta.size {
        return None;
    }
    let out = d
        .cfg
        .paths
        .store_tmp()
        .join(format!("{}.from-delta", e.sha256));
    match try_rebuild(d, bases, e, delta, &label, &out, emit) {
        Ok(()) => {
            let _ = std::fs::remove_file(&part);
            log::info!(
                "{label}: rebuilt from the delta from {} ({} bytes instead of {})",
                delta.from_version,
                delta.size,
                e.size
            );
            Some(Rebuilt { path: out, delta })
        }
        Err(why) => {
            let _ = std::fs::remove_file(&out);
            log::warn!(
                "{label}: the delta from {} is not used: {why}; fetching the whole image",
                delta.from_version
            );
            emit(json!({
                field::EVENT: "delta_failed",
                field::PACKAGE: e.name.as_str(),
                field::ERROR: why,
            }));
            None
        }
    }
}

fn try_rebuild(
    d: &Daemon,
    bases: &[String],
    e: &IndexEntry,
    delta: &Delta,
    label: &str,
    out: &Path,
    emit: &mut dyn FnMut(Value),
) -> Result<(), String> {
    let zstd = zstd().ok_or("zstd is not installed")?;
    // Fetched and checked as an image is (resumable, named by its own sha256): zstd only
    // ever reads bytes the index's signature covers.
    let want = Want {
        label,
        what: "delta",
        package: e.name.as_str(),
        file: &delta.file,
        size: delta.size,
        sha256: &delta.sha256,
    };
    let part = download(d, bases, &want, emit).map_err(|err| {
        let prefix = format!("{label}: ");
        err.message
            .strip_prefix(&prefix)
            .map(String::from)
            .unwrap_or(err.message)
    })?;
    let old = d.cfg.paths.image(&delta.from);
    let decoded = Command::new(&zstd)
        .args(["-d", "-q", "-f", "--no-progress"])
        .arg(format!("--patch-from={}", old.display()))
        .arg(&part)
        .arg("-o")
        .arg(out)
        .output();
    let _ = std::fs::remove_file(&part);
    let output = decoded.map_err(|err| format!("cannot run {}: {err}", zstd.display()))?;
    if !output.status.success() {
        return Err(format!(
            "zstd failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let (size, sha) = hash_file(out).map_err(|err| format!("read {}: {err}", out.display()))?;
    if size != e.size || sha != e.sha256 {
        return Err(format!(
            "the rebuilt image is {size} bytes with sha256 {sha}, the signed index says {} bytes, {}",
            e.size, e.sha256
        ));
    }
    File::open(out)
        .and_then(|f| f.sync_all())
        .map_err(|err| format!("fsync {}: {err}", out.display()))
}
