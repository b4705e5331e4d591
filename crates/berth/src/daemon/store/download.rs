//! Downloads into the store's `.tmp`: what the signed index names (an image, or a delta),
//! resumed from a part held, checked whole against the index's size and sha256.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berth_core::api::install as field;
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
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
    berth_sys::fsutil::sync(&f).map_err(|err| {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::testing::fake_daemon;
    use crate::daemon::store::testrepo::{cut, files_in, noise, ok, partial, serve};
    use berth_core::index::sha256_hex;

    /// A daemon whose store has its `.tmp` (as the daemon's start makes it), and a source
    /// directory holding `packages/web-1.0.sqfs` = `bytes`; the source's `file://` URL.
    fn setup(tag: &str, bytes: &[u8]) -> (berth_testkit::TempDir, Daemon, String) {
        let (dir, d, _) = fake_daemon(tag, "");
        std::fs::create_dir_all(d.cfg.paths.store_tmp()).unwrap();
        let src = dir.path("src");
        std::fs::create_dir_all(src.join("packages")).unwrap();
        std::fs::write(src.join("packages/web-1.0.sqfs"), bytes).unwrap();
        let url = format!("file://{}", src.display());
        (dir, d, url)
    }

    fn want<'a>(sha256: &'a str, size: u64) -> Want<'a> {
        Want {
            label: "web@1.0",
            what: "image",
            package: "web",
            file: "packages/web-1.0.sqfs",
            size,
            sha256,
        }
    }

    fn part(d: &Daemon, sha: &str) -> PathBuf {
        d.cfg.paths.store_tmp().join(format!("{sha}.part"))
    }

    /// A whole download from a `file://` source: in `.tmp`, named by its sha256, the bytes
    /// the source holds, its progress reported up to the last byte.
    #[test]
    fn a_download_lands_in_tmp_named_by_its_sha256_with_its_progress() {
        let bytes = noise(100_000, 1);
        let sha = sha256_hex(&bytes);
        let (_dir, d, url) = setup("dl-ok", &bytes);
        let mut events = Vec::new();
        let got = download(&d, &[url], &want(&sha, 100_000), &mut |v| events.push(v)).unwrap();
        assert_eq!(got, part(&d, &sha));
        assert_eq!(std::fs::read(&got).unwrap(), bytes);
        let last = events.last().expect("progress reported");
        assert_eq!(
            *last,
            json!({"event": "progress", "package": "web", "done": 100_000, "total": 100_000})
        );
        assert_eq!(files_in(&d.cfg.paths.store_tmp()), [format!("{sha}.part")]);
    }

    /// A file shorter than the signed index says, or one byte longer, is refused as a bad
    /// image naming both sizes; one much longer is refused while it is read; none leaves a
    /// byte behind.
    #[test]
    fn a_file_of_another_size_is_refused_and_leaves_nothing() {
        let whole = noise(10, 2);
        let sha = sha256_hex(&whole);
        for (got, kind, says) in [
            (&whole[..5], Kind::BadImage, "web@1.0: image is 5 bytes, the index says 10: truncated or replaced download; nothing was changed"),
            (&[&whole[..], b"x"].concat()[..], Kind::BadImage, "web@1.0: image is 11 bytes, the index says 10: truncated or replaced download; nothing was changed"),
            (&[&whole[..], b"xyz"].concat()[..], Kind::FetchFailed, "too large: more than 11 bytes"),
        ] {
            let (_dir, d, url) = setup("dl-size", got);
            let e = download(&d, &[url], &want(&sha, 10), &mut |_| {}).unwrap_err();
            assert_eq!(e.kind, kind, "{}", e.message);
            assert!(e.message.contains(says), "{}", e.message);
            assert!(files_in(&d.cfg.paths.store_tmp()).is_empty());
        }
    }

    /// Bytes of the right size whose sha256 is not the signed index's are refused, both
    /// hashes named, and removed (a resumed download must not build on them).
    #[test]
    fn a_wrong_sha256_is_refused_naming_both_and_leaves_nothing() {
        let served = noise(64, 3);
        let listed = sha256_hex(&noise(64, 4));
        let (_dir, d, url) = setup("dl-sha", &served);
        let e = download(&d, &[url], &want(&listed, 64), &mut |_| {}).unwrap_err();
        assert_eq!(e.kind, Kind::BadImage);
        assert_eq!(
            e.message,
            format!(
                "web@1.0: image sha256 is {}, the signed index says {listed}: refusing it; nothing was changed",
                sha256_hex(&served)
            )
        );
        assert!(files_in(&d.cfg.paths.store_tmp()).is_empty());
    }

    /// A server that cuts the body short: the bytes received are kept and said so; the next
    /// download asks only for the rest (a range) and checks the whole.
    #[test]
    fn a_cut_download_keeps_its_bytes_and_the_next_resumes_from_them() {
        let whole = noise(10_000, 5);
        let sha = sha256_hex(&whole);
        let (_dir, d, _) = setup("dl-resume", b"");
        let (base, server) = serve(vec![cut(&whole, 4_000)]);
        let e = download(&d, &[base], &want(&sha, 10_000), &mut |_| {}).unwrap_err();
        assert_eq!(e.kind, Kind::FetchFailed);
        assert!(
            e.message
                .ends_with("; 4000 of 10000 bytes kept: the next install resumes from there"),
            "{}",
            e.message
        );
        assert_eq!(std::fs::read(part(&d, &sha)).unwrap(), &whole[..4_000]);
        server.join().unwrap();

        let (base, server) = serve(vec![partial(&whole, 4_000)]);
        let got = download(&d, &[base], &want(&sha, 10_000), &mut |_| {}).unwrap();
        assert_eq!(std::fs::read(got).unwrap(), whole);
        let requests = server.join().unwrap();
        assert!(
            requests[0].contains("Range: bytes=4000-\r\n"),
            "{}",
            requests[0]
        );
    }

    /// A part held longer than the file cannot be a part of it: dropped, and the file asked
    /// for whole. A part of the right length but wrong bytes fails the whole's hash and goes.
    #[test]
    fn a_held_part_that_cannot_be_of_the_file_is_not_built_on() {
        let whole = noise(100, 6);
        let sha = sha256_hex(&whole);
        let (_dir, d, _) = setup("dl-part", b"");
        std::fs::write(part(&d, &sha), noise(150, 7)).unwrap();
        let (base, server) = serve(vec![ok(&whole, None)]);
        let got = download(&d, &[base], &want(&sha, 100), &mut |_| {}).unwrap();
        assert_eq!(std::fs::read(got).unwrap(), whole);
        let requests = server.join().unwrap();
        assert!(!requests[0].contains("Range:"), "{}", requests[0]);

        std::fs::write(part(&d, &sha), b"XXXX").unwrap();
        let (base, server) = serve(vec![partial(&whole, 4)]);
        let e = download(&d, &[base], &want(&sha, 100), &mut |_| {}).unwrap_err();
        assert_eq!(e.kind, Kind::BadImage);
        assert!(e.message.contains("image sha256 is"), "{}", e.message);
        assert!(!part(&d, &sha).exists());
        server.join().unwrap();
    }

    /// Sources are tried in order: one that fails (nothing there, nobody listening) is passed
    /// over; when all fail, the last one's failure is said.
    #[test]
    fn sources_are_tried_in_order_and_the_last_failure_is_said() {
        let whole = noise(50, 8);
        let sha = sha256_hex(&whole);
        let (dir, d, url) = setup("dl-sources", &whole);
        let missing = format!("file://{}", dir.path("nowhere").display());
        // A port nobody listens on: bound, then closed.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", l.local_addr().unwrap())
        };
        let bases = [missing.clone(), closed.clone(), url];
        let got = download(&d, &bases, &want(&sha, 50), &mut |_| {}).unwrap();
        assert_eq!(std::fs::read(got).unwrap(), whole);

        std::fs::remove_file(part(&d, &sha)).unwrap();
        let e = download(&d, &bases[..2], &want(&sha, 50), &mut |_| {}).unwrap_err();
        assert_eq!(e.kind, Kind::FetchFailed);
        assert!(
            e.message.starts_with("cannot connect to 127.0.0.1:"),
            "{}",
            e.message
        );
        assert!(!e.message.contains("kept"), "{}", e.message);
        assert_eq!(std::fs::metadata(part(&d, &sha)).unwrap().len(), 0);
    }

    /// A full store (every write refused with ENOSPC, as /dev/full does) is `no_space`,
    /// naming the store, and leaves no part behind.
    #[test]
    fn a_full_store_is_no_space_and_leaves_nothing() {
        if std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .is_err()
        {
            berth_sys::skip::record("host /dev/full", "no writable /dev/full to fill a store");
            return;
        }
        let whole = noise(100, 9);
        let sha = sha256_hex(&whole);
        let (_dir, d, url) = setup("dl-full", &whole);
        std::os::unix::fs::symlink("/dev/full", part(&d, &sha)).unwrap();
        let e = download(&d, &[url], &want(&sha, 100), &mut |_| {}).unwrap_err();
        assert_eq!(e.kind, Kind::NoSpace);
        assert_eq!(
            e.message,
            format!(
                "store full: no room for web@1.0 (100 bytes) in {}; nothing was changed (free space with berth gc or berth remove)",
                d.cfg.paths.store().display()
            )
        );
        assert!(files_in(&d.cfg.paths.store_tmp()).is_empty());
    }

    /// A path of the index that would leave the repository is refused before any fetch.
    #[test]
    fn a_path_leaving_the_repository_is_refused() {
        let (_dir, d, url) = setup("dl-dotdot", b"x");
        let sha = "cd".repeat(32);
        let mut w = want(&sha, 1);
        w.file = "../src/packages/web-1.0.sqfs";
        let e = download(&d, &[url], &w, &mut |_| {}).unwrap_err();
        assert_eq!(e.kind, Kind::FetchFailed);
        assert!(
            e.message
                .contains("'..' is not allowed in repository paths"),
            "{}",
            e.message
        );
    }

    /// The store's hash of a file: its length and sha256; a missing file is an error.
    #[test]
    fn hash_file_gives_length_and_sha256() {
        let (dir, _d, _) = setup("dl-hash", b"");
        let bytes = noise(200_000, 10);
        let f = dir.path("f");
        std::fs::write(&f, &bytes).unwrap();
        assert_eq!(hash_file(&f).unwrap(), (200_000, sha256_hex(&bytes)));
        let e = hash_file(&dir.path("none")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }
}
