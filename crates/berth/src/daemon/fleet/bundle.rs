//! A deployed bundle (`berth_core::bundle`) on the device: read member by member from the
//! downloaded file, its signed index checked with the device's own keys, its images checked
//! against that index and moved into the store, the index accepted (serial floor), then the
//! packages it names installed and every installed package upgraded through the health-gated
//! upgrade.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

use berth_core::bundle::{self as b, Descriptor};
use berth_core::index::Index;
use serde_json::Value;

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::device::state;
use crate::daemon::runtime::control::{self, Intent, Who};
use crate::daemon::store::{install, repo, upgrade};
use crate::hooks;

fn bad(m: impl Into<String>) -> Error {
    Error::new(Kind::BadIndex, format!("bundle: {}", m.into()))
}

/// What a bundle did: its descriptor and the upgrade's answer (`upgraded`, `rolled_back`,
/// `held`), with `installed` for the packages it added.
pub(crate) struct Applied {
    pub descriptor: Descriptor,
    pub installed: Vec<String>,
    pub result: Value,
}

/// Checks the bundle and brings its images into the store; the descriptor and the index.
/// Nothing of the device's state changes here but images in the store, each checked. Under
/// the op lock (a `gc` must not take the images it puts in the store).
pub(crate) fn open(d: &Daemon, path: &Path) -> Result<(Descriptor, Index, Vec<u8>, String)> {
    let f =
        File::open(path).map_err(|e| Error::internal(format!("open {}: {e}", path.display())))?;
    let mut m = b::Members::new(BufReader::with_capacity(16 * 1024, f));
    let mut descriptor = None;
    let (mut index_bytes, mut sig) = (None::<Vec<u8>>, None::<String>);
    let mut index: Option<Index> = None;
    while let Some((name, size)) = m.next_member().map_err(|e| bad(e.0))? {
        match name.as_str() {
            // For the server; what is not read is skipped.
            b::SW_DESCRIPTION => {}
            b::DESCRIPTOR => {
                let v = m.small(&name, 64 * 1024).map_err(|e| bad(e.0))?;
                descriptor = Some(Descriptor::parse(&v).map_err(|e| bad(e.0))?);
            }
            b::INDEX => {
                index_bytes = Some(m.small(&name, repo::INDEX_LIMIT).map_err(|e| bad(e.0))?)
            }
            b::SIGNATURE => {
                let v = m.small(&name, repo::SIG_LIMIT).map_err(|e| bad(e.0))?;
                sig = Some(String::from_utf8(v).map_err(|_| bad("index.json.sig is not text"))?);
            }
            file => {
                // An image: after the index, named by it, its sha256 checked as it is copied.
                let Some(ix) = index.as_ref() else {
                    return Err(bad(format!("{file:?} comes before the signed index")));
                };
                let Some(e) = ix.packages.iter().find(|e| e.file == file) else {
                    return Err(bad(format!(
                        "{file:?} is not an image the signed index names"
                    )));
                };
                if e.size != size {
                    return Err(bad(format!(
                        "{file:?} is {size} bytes; the signed index says {}",
                        e.size
                    )));
                }
                seed_image(d, &mut m.data(), e, file)?;
            }
        }
        if index.is_none() {
            if let (Some(i), Some(s)) = (&index_bytes, &sig) {
                // The signature, the expiry and the serial floor decide before any image is
                // read or stored: a replayed old bundle leaves nothing behind.
                let ix = repo::verify_index(&d.cfg, i, s)?;
                repo::admissible(d, &ix)?;
                index = Some(ix);
            }
        }
    }
    let descriptor = descriptor.ok_or_else(|| bad(format!("no {}", b::DESCRIPTOR)))?;
    let (Some(index), Some(bytes), Some(sig)) = (index, index_bytes, sig) else {
        return Err(bad("no signed index (index.json and index.json.sig)"));
    };
    if descriptor.serial != index.serial {
        return Err(bad(format!(
            "berth.json names serial {}, the signed index has {}",
            descriptor.serial, index.serial
        )));
    }
    for n in &descriptor.install {
        if !index.packages.iter().any(|e| e.name == *n) {
            return Err(bad(format!(
                "berth.json installs {n}, which the signed index does not list"
            )));
        }
    }
    Ok((descriptor, index, bytes, sig))
}

/// Copies one image member into the store's `.tmp`, checks its sha256 against the signed
/// index, syncs it and renames it into the store (unless the store holds it already).
fn seed_image(
    d: &Daemon,
    r: &mut impl Read,
    e: &berth_core::index::IndexEntry,
    file: &str,
) -> Result<()> {
    use sha2::{Digest, Sha256};
    let paths = &d.cfg.paths;
    let image = paths.image(&e.sha256);
    if image.exists() {
        let mut sink = std::io::sink();
        std::io::copy(&mut r.take(e.size), &mut sink).map_err(|x| bad(x.to_string()))?;
        return Ok(());
    }
    let tmp = paths.store_tmp().join(format!("{}.bundle", e.sha256));
    let mut out = File::create(&tmp)
        .map_err(|x| Error::internal(format!("create {}: {x}", tmp.display())))?;
    let cleanup = |err: Error| {
        let _ = std::fs::remove_file(&tmp);
        err
    };
    let mut h = Sha256::new();
    let mut left = e.size;
    let mut buf = vec![0u8; 64 * 1024];
    while left > 0 {
        let n = (left as usize).min(buf.len());
        r.read_exact(&mut buf[..n])
            .map_err(|x| cleanup(bad(format!("{file}: {x}"))))?;
        h.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(|x| {
            cleanup(if x.raw_os_error() == Some(libc::ENOSPC) {
                Error::new(
                    Kind::NoSpace,
                    format!("{}: no space left on the device", tmp.display()),
                )
            } else {
                Error::internal(format!("write {}: {x}", tmp.display()))
            })
        })?;
        left -= n as u64;
    }
    let sha: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    if sha != e.sha256 {
        return Err(cleanup(bad(format!(
            "{file}: sha256 {sha}, the signed index says {}",
            e.sha256
        ))));
    }
    out.sync_all()
        .map_err(|x| cleanup(Error::internal(x.to_string())))?;
    std::fs::rename(&tmp, &image).map_err(|x| cleanup(Error::internal(x.to_string())))?;
    let _ = File::open(paths.store()).and_then(|f| f.sync_all());
    Ok(())
}

/// Opens, checks and applies a bundle: its index becomes the device's (served, for what the
/// bundle does not carry, by the configured repository), the packages it names are
/// installed, and every installed package moves to the index's version through the
/// health-gated upgrade (`force` passes update locks).
pub(crate) fn apply(
    d: &Arc<Daemon>,
    path: &Path,
    force: bool,
    emit: &mut dyn FnMut(Value),
) -> Result<Applied> {
    let base = d
        .cfg
        .repository
        .clone()
        .unwrap_or_else(|| format!("file://{}", d.cfg.paths.state.join("fleet").display()));
    let descriptor = {
        let _op = d.op.lock().unwrap();
        let (descriptor, _index, bytes, sig) = open(d, path)?;
        hooks::point("fleet.opened");
        repo::accept_locked(d, &base, bytes, sig)?;
        descriptor
    };
    let st = state::state(d);
    let missing: Vec<String> = descriptor
        .install
        .iter()
        .map(|n| n.to_string())
        .filter(|n| !st.packages.contains_key(n.as_str()))
        .collect();
    if !missing.is_empty() {
        install::install(d, &missing, emit)?;
    }
    hooks::point("fleet.installed");
    // What a deployment adds runs, and starts again after a reboot (as `berth start`); also
    // what an interrupted apply installed but had not started yet.
    for n in &descriptor.install {
        let n = n.as_str();
        if crate::daemon::runtime::probe::is_running(d, n) {
            continue;
        }
        control::act(d, n, Intent::Start, Who::Operator, None).map_err(|e| {
            Error::new(
                e.kind,
                format!("{n} was installed but did not start: {}", e.message),
            )
        })?;
    }
    let result = upgrade::upgrade(d, &[], force, emit)?;
    Ok(Applied {
        descriptor,
        installed: missing,
        result,
    })
}

/// The bundle's size on disk, if it is there.
pub(crate) fn held(path: &Path) -> Option<u64> {
    let mut f = File::open(path).ok()?;
    f.seek(SeekFrom::End(0)).ok()
}
