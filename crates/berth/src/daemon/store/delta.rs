//! Images rebuilt from a delta (docs/repository.md, "Delta images"): when the signed index
//! lists a delta from an image the store holds, the delta is fetched instead of the image,
//! checked against its own sha256 before a byte of it is decoded, decoded by `zstd
//! --patch-from` against the held image, and the result checked against the image's sha256
//! before it is used. Any failure (no zstd, a source without the delta, a wrong hash, a full
//! disk) is logged and reported as a `delta_failed` event, and the caller fetches the whole
//! image as before: a delta can only save bytes, never break an install.

use std::fs::File;
use std::path::{Path, PathBuf};

use berth_core::api::install as field;
use berth_core::index::{Delta, IndexEntry, DELTA_ZSTD_PATCH};
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;
use crate::daemon::device::disk::mib;
use crate::daemon::device::guard;
use crate::daemon::store::download::{download, hash_file, Want};

/// What zstd needs besides the two images while it decodes, with a margin.
const ZSTD_OWN: u64 = 4 << 20;

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
    // zstd holds the old image and a window as large as the new one while it decodes, and
    // about 2.4 MB of its own (RSS measured with Debian's zstd 1.5.4: 4.4 MB for two 1 MB
    // images, 41 MB for two 20 MB, 100 MB for two 50 MB): that much must be free above the
    // memory guard's threshold, or the guard would kill a container for berth's own work.
    let from = std::fs::metadata(d.cfg.paths.image(&delta.from)).map_or(0, |m| m.len());
    let need = from.saturating_add(e.size).saturating_add(ZSTD_OWN);
    if let Some(room) = guard::headroom(d).filter(|&r| r < need) {
        return Err(format!(
            "decoding it needs about {} of memory, {} is free above the memory guard's threshold",
            mib(need),
            mib(room)
        ));
    }
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
    let patch_from = format!("--patch-from={}", old.display());
    let (part_arg, out_arg) = (part.to_string_lossy(), out.to_string_lossy());
    let decoded = d.host.tools.run(
        &zstd.to_string_lossy(),
        &[
            "-d",
            "-q",
            "-f",
            "--no-progress",
            &patch_from,
            &part_arg,
            "-o",
            &out_arg,
        ],
        None,
        berth_sys::host::LONG_TOOL_LIMIT,
    );
    let _ = std::fs::remove_file(&part);
    let output = decoded.map_err(|err| format!("cannot run {}: {}", zstd.display(), err.io()))?;
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
        .and_then(|f| berth_sys::fsutil::sync(&f))
        .map_err(|err| format!("fsync {}: {err}", out.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::testing::{entry, fake_daemon, fakes, MANIFEST};
    use crate::daemon::store::testrepo::{files_in, noise};
    use berth_core::index::sha256_hex;
    use berth_core::name::Version;
    use berth_testkit::TempDir;

    /// web 0.9's image held in the store, web 1.0's a small change of it; a source holding
    /// the zstd delta from one to the other, and the index entry of 1.0 that lists it.
    struct Fixture {
        _dir: TempDir,
        d: Daemon,
        bases: Vec<String>,
        src: PathBuf,
        new: Vec<u8>,
        e: IndexEntry,
    }

    /// None (the skip recorded) without zstd on this machine.
    fn fixture(tag: &str) -> Option<Fixture> {
        if zstd().is_none() {
            berth_sys::skip::record("host zstd", "no zstd on PATH to make and decode deltas");
            return None;
        }
        let (dir, d, _) = fake_daemon(tag, "");
        fakes(&d).tools.real("zstd");
        std::fs::create_dir_all(d.cfg.paths.store_tmp()).unwrap();
        let old = noise(200_000, 1);
        let mut new = old.clone();
        new[1000..2000].copy_from_slice(&noise(1000, 2));
        new.extend_from_slice(&noise(500, 3));
        let old_sha = sha256_hex(&old);
        std::fs::write(d.cfg.paths.image(&old_sha), &old).unwrap();
        let src = dir.path("src");
        std::fs::create_dir_all(src.join("deltas")).unwrap();
        let (old_file, new_file) = (dir.path("old"), dir.path("new"));
        std::fs::write(&old_file, &old).unwrap();
        std::fs::write(&new_file, &new).unwrap();
        let delta_file = src.join("deltas/web-0.9-1.0.zst");
        let made = std::process::Command::new("zstd")
            .args(["-q", "-f"])
            .arg(format!("--patch-from={}", old_file.display()))
            .arg(&new_file)
            .arg("-o")
            .arg(&delta_file)
            .output()
            .unwrap();
        assert!(made.status.success(), "{made:?}");
        let delta = std::fs::read(&delta_file).unwrap();
        assert!(delta.len() < 10_000, "delta of {} bytes", delta.len());
        let mut e = entry(MANIFEST);
        e.sha256 = sha256_hex(&new);
        e.size = new.len() as u64;
        e.deltas = vec![Delta {
            from: old_sha,
            from_version: Version::parse("0.9").unwrap(),
            format: DELTA_ZSTD_PATCH.into(),
            file: "deltas/web-0.9-1.0.zst".into(),
            sha256: sha256_hex(&delta),
            size: delta.len() as u64,
        }];
        let bases = vec![format!("file://{}", src.display())];
        Some(Fixture {
            _dir: dir,
            d,
            bases,
            src,
            new,
            e,
        })
    }

    fn events_of(f: &Fixture, e: &IndexEntry) -> (Option<PathBuf>, Vec<Value>) {
        let mut events = Vec::new();
        let got = rebuild(&f.d, &f.bases, e, &mut |v| events.push(v)).map(|r| r.path);
        (got, events)
    }

    fn failures(events: &[Value]) -> Vec<&Value> {
        events
            .iter()
            .filter(|v| v["event"] == "delta_failed")
            .collect()
    }

    /// The delta is fetched, decoded against the held image and the result is exactly the
    /// image the index lists; the delta's own file and a part of the image held go.
    #[test]
    fn a_delta_from_a_held_image_rebuilds_the_image_the_index_lists() {
        let Some(f) = fixture("delta-ok") else { return };
        let tmp = f.d.cfg.paths.store_tmp();
        std::fs::write(tmp.join(format!("{}.part", f.e.sha256)), &f.new[..10]).unwrap();
        let mut events = Vec::new();
        let r = rebuild(&f.d, &f.bases, &f.e, &mut |v| events.push(v)).expect("rebuilt");
        assert_eq!(r.path, tmp.join(format!("{}.from-delta", f.e.sha256)));
        assert_eq!(r.delta.from_version.to_string(), "0.9");
        assert_eq!(std::fs::read(&r.path).unwrap(), f.new);
        assert_eq!(files_in(&tmp), [format!("{}.from-delta", f.e.sha256)]);
        assert!(failures(&events).is_empty(), "{events:?}");
        // The progress said is the delta's, not the image's.
        let last = events.last().unwrap();
        assert_eq!(last["total"], f.e.deltas[0].size);
    }

    /// No delta is tried when the store does not hold its old image, when its format is not
    /// known, or when a part of the image held leaves less to fetch than the delta: nothing
    /// is fetched, nothing is said.
    #[test]
    fn no_delta_is_tried_without_its_image_in_a_known_format_or_when_the_image_is_cheaper() {
        let Some(f) = fixture("delta-none") else {
            return;
        };
        let tmp = f.d.cfg.paths.store_tmp();

        let mut unknown = f.e.clone();
        unknown.deltas[0].format = "bsdiff".into();
        assert_eq!(events_of(&f, &unknown), (None, vec![]));

        let mut elsewhere = f.e.clone();
        elsewhere.deltas[0].from = "ef".repeat(32);
        assert_eq!(events_of(&f, &elsewhere), (None, vec![]));
        assert!(files_in(&tmp).is_empty());

        let held = f.e.size - f.e.deltas[0].size;
        let part = tmp.join(format!("{}.part", f.e.sha256));
        std::fs::write(&part, &f.new[..held as usize]).unwrap();
        assert_eq!(events_of(&f, &f.e), (None, vec![]));
        assert_eq!(std::fs::metadata(&part).unwrap().len(), held);
        assert_eq!(files_in(&tmp), [format!("{}.part", f.e.sha256)]);
    }

    /// Decoding holds the old image and a window as large as the new one: with less than
    /// that free above the memory guard's threshold the delta is not even fetched (the
    /// guard would kill a container for berth's own work), said as `delta_failed`; with it
    /// free, the delta is used.
    #[test]
    fn a_delta_needing_more_memory_than_is_free_above_the_guard_is_not_fetched() {
        let Some(f) = fixture("delta-memory") else {
            return;
        };
        let need = 200_000 + f.e.size + ZSTD_OWN;
        let threshold = f.d.cfg.guard.threshold;
        let meminfo = f.d.proc().join("meminfo");
        let short_kib = ((threshold + need) >> 10) - 4;
        std::fs::write(&meminfo, format!("MemAvailable: {short_kib} kB\n")).unwrap();
        let (got, events) = events_of(&f, &f.e);
        assert_eq!(got, None);
        let failed = failures(&events);
        assert_eq!(failed.len(), 1, "{events:?}");
        assert_eq!(
            failed[0]["error"],
            format!(
                "decoding it needs about {} of memory, {} is free above the memory guard's threshold",
                mib(need),
                mib((short_kib << 10) - threshold)
            )
        );
        assert_eq!(events.len(), 1, "fetched: {events:?}");
        assert!(files_in(&f.d.cfg.paths.store_tmp()).is_empty());

        let enough_kib = ((threshold + need) >> 10) + 4;
        std::fs::write(&meminfo, format!("MemAvailable: {enough_kib} kB\n")).unwrap();
        let (got, events) = events_of(&f, &f.e);
        assert_eq!(std::fs::read(got.expect("rebuilt")).unwrap(), f.new);
        assert!(failures(&events).is_empty(), "{events:?}");
    }

    /// A delta whose bytes are not those the signed index lists is refused before zstd reads
    /// a byte of it: said as `delta_failed`, nothing left, the caller fetches the image.
    #[test]
    fn a_delta_unlike_the_signed_index_is_never_decoded() {
        let Some(f) = fixture("delta-sha") else {
            return;
        };
        let file = f.src.join(&f.e.deltas[0].file);
        let len = std::fs::metadata(&file).unwrap().len() as usize;
        let other = noise(len, 4);
        std::fs::write(&file, &other).unwrap();
        let (got, events) = events_of(&f, &f.e);
        assert_eq!(got, None);
        let failed = failures(&events);
        assert_eq!(failed.len(), 1, "{events:?}");
        assert_eq!(failed[0]["package"], "web");
        assert_eq!(
            failed[0]["error"],
            format!(
                "delta sha256 is {}, the signed index says {}: refusing it; nothing was changed",
                sha256_hex(&other),
                f.e.deltas[0].sha256
            )
        );
        assert!(files_in(&f.d.cfg.paths.store_tmp()).is_empty());
    }

    /// A delta the index vouches for but zstd cannot decode, and one whose result is not the
    /// image the index lists, both fall back to the image, leaving nothing behind.
    #[test]
    fn a_delta_that_does_not_give_the_listed_image_falls_back() {
        let Some(mut f) = fixture("delta-bad") else {
            return;
        };
        let tmp = f.d.cfg.paths.store_tmp();
        let mut wrong = f.e.clone();
        wrong.sha256 = sha256_hex(b"another image");
        let (got, events) = events_of(&f, &wrong);
        assert_eq!(got, None);
        let failed = failures(&events);
        assert_eq!(
            failed[0]["error"],
            format!(
                "the rebuilt image is {n} bytes with sha256 {}, the signed index says {n} bytes, {}",
                f.e.sha256,
                wrong.sha256,
                n = f.e.size
            )
        );
        assert!(files_in(&tmp).is_empty(), "{:?}", files_in(&tmp));

        let garbage = noise(300, 5);
        std::fs::write(f.src.join(&f.e.deltas[0].file), &garbage).unwrap();
        f.e.deltas[0].sha256 = sha256_hex(&garbage);
        f.e.deltas[0].size = 300;
        let (got, events) = events_of(&f, &f.e);
        assert_eq!(got, None);
        let failed = failures(&events);
        let why = failed[0]["error"].as_str().unwrap();
        assert!(why.starts_with("zstd failed: "), "{why}");
        assert!(files_in(&tmp).is_empty(), "{:?}", files_in(&tmp));
    }

    /// zstd is run on the fetched delta with the held image as its base, writing the image
    /// being made; its failure is said in its own words, and the delta fetched goes.
    #[test]
    fn zstd_decodes_against_the_held_image_and_its_failure_is_said() {
        let Some(f) = fixture("delta-zstd-fails") else {
            return;
        };
        let tools = fakes(&f.d).tools;
        let full = "zstd: error 70 : Write error : No space left on device";
        tools.answer("zstd", &[], Err(format!("{full}\n")));
        let (got, events) = events_of(&f, &f.e);
        assert_eq!(got, None);
        assert_eq!(
            failures(&events)[0]["error"],
            format!("zstd failed: {full}")
        );
        let tmp = f.d.cfg.paths.store_tmp();
        assert!(files_in(&tmp).is_empty(), "{:?}", files_in(&tmp));
        let run = tools.calls().pop().unwrap();
        let old = f.d.cfg.paths.image(&f.e.deltas[0].from);
        let out = tmp.join(format!("{}.from-delta", f.e.sha256));
        assert_eq!(
            run.args[..5],
            [
                "-d",
                "-q",
                "-f",
                "--no-progress",
                &format!("--patch-from={}", old.display())
            ]
        );
        assert_eq!(run.args[6..], ["-o".to_string(), out.display().to_string()]);
    }

    /// A source without the delta: said, and the image is fetched instead.
    #[test]
    fn a_source_without_the_delta_falls_back() {
        let Some(f) = fixture("delta-missing") else {
            return;
        };
        std::fs::remove_file(f.src.join(&f.e.deltas[0].file)).unwrap();
        let (got, events) = events_of(&f, &f.e);
        assert_eq!(got, None);
        let failed = failures(&events);
        assert_eq!(failed.len(), 1, "{events:?}");
        let why = failed[0]["error"].as_str().unwrap();
        assert!(
            why.starts_with(&format!(
                "cannot read {}",
                f.src.join(&f.e.deltas[0].file).display()
            )),
            "{why}"
        );
        assert!(!f
            .d
            .cfg
            .paths
            .store_tmp()
            .join(format!("{}.from-delta", f.e.sha256))
            .exists());
    }
}
