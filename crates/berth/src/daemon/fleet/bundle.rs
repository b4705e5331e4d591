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
    berth_sys::fsutil::sync(&out).map_err(|x| cleanup(Error::internal(x.to_string())))?;
    std::fs::rename(&tmp, &image).map_err(|x| cleanup(Error::internal(x.to_string())))?;
    let _ = File::open(paths.store()).and_then(|f| berth_sys::fsutil::sync(&f));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::testing::{fake_daemon, image_tree, MANIFEST};
    use crate::daemon::store::testrepo::{files_in, Repo};
    use berth_core::index::IndexEntry;
    use berth_core::name::Name;
    use berth_testkit::fake_host::FakeMounts;
    use berth_testkit::TempDir;
    use serde_json::json;

    struct Fixture {
        dir: TempDir,
        d: Arc<Daemon>,
        m: &'static FakeMounts,
        r: Repo,
    }

    fn setup(tag: &str) -> Fixture {
        let (dir, mut d, m) = fake_daemon(tag, "");
        let r = Repo::for_daemon(&mut d, &dir.0);
        Fixture {
            dir,
            d: Arc::new(d),
            m,
            r,
        }
    }

    /// A bundle as `berth repo bundle` writes it: its sw-description, cpio members in this
    /// order, then the trailer.
    fn cpio(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        let all = [(b::SW_DESCRIPTION, &b"software = {}"[..])]
            .into_iter()
            .chain(members.iter().copied())
            .chain([(b::TRAILER, &b""[..])]);
        for (ino, (name, data)) in all.enumerate() {
            let ino = if name == b::TRAILER {
                0
            } else {
                ino as u32 + 1
            };
            out.extend(b::header(name, data.len() as u64, ino, 0));
            out.extend_from_slice(data);
            out.resize(out.len() + b::pad4(data.len() as u64) as usize, 0);
        }
        out
    }

    /// A bundle's members (name, bytes), in order.
    type Members<'a> = Vec<(&'a str, &'a [u8])>;

    fn descriptor(serial: u64, install: &[&str]) -> Vec<u8> {
        Descriptor {
            version: format!("v{serial}"),
            serial,
            install: install.iter().map(|n| Name::parse(n).unwrap()).collect(),
        }
        .to_json()
        .into_bytes()
    }

    impl Fixture {
        /// `manifest`'s package listed with its image `bytes`; its image shows it when the
        /// fake mounts it from the store.
        fn offer(&mut self, manifest: &str, bytes: &[u8]) -> IndexEntry {
            let e = self.r.add(manifest, bytes);
            let tree = self.dir.path(&format!("tree-{}-{}", e.name, e.version));
            image_tree(&tree, manifest);
            let paths = &self.d.cfg.paths;
            for image in [
                paths.store_tmp().join(format!("{}.part", e.sha256)),
                paths.image(&e.sha256),
            ] {
                self.m.image_tree(&image, &tree);
            }
            e
        }

        /// The index at `serial` and its signature, published in the repository too.
        fn signed(&self, serial: u64) -> (Vec<u8>, Vec<u8>) {
            let index = self.r.publish(serial, None);
            let sig = std::fs::read(self.r.dir.join("index.json.sig")).unwrap();
            (index, sig)
        }

        /// `members` as a bundle file; its path.
        fn write(&self, members: &[(&str, &[u8])]) -> std::path::PathBuf {
            let p = self.dir.path("bundle.swu");
            std::fs::write(&p, cpio(members)).unwrap();
            p
        }

        fn store(&self) -> Vec<String> {
            files_in(&self.d.cfg.paths.store())
        }
    }

    /// A whole bundle: its descriptor and signed index returned as they are, its image
    /// checked into the store under its sha256, nothing left in `.tmp`.
    #[test]
    fn a_bundle_is_read_checked_and_its_images_stored() {
        let mut f = setup("bundle-open");
        let e = f.offer(MANIFEST, b"web 1.0 image");
        let (index, sig) = f.signed(3);
        let desc = descriptor(3, &["web"]);
        let p = f.write(&[
            (b::DESCRIPTOR, &desc),
            (b::INDEX, &index),
            (b::SIGNATURE, &sig),
            (&e.file, b"web 1.0 image"),
        ]);
        let (d, ix, bytes, s) = open(&f.d, &p).unwrap();
        assert_eq!(
            d,
            Descriptor {
                version: "v3".into(),
                serial: 3,
                install: vec![Name::parse("web").unwrap()]
            }
        );
        assert_eq!((ix.serial, ix.packages.len()), (3, 1));
        assert_eq!(bytes, index);
        assert_eq!(s.as_bytes(), sig);
        assert_eq!(
            std::fs::read(f.d.cfg.paths.image(&e.sha256)).unwrap(),
            b"web 1.0 image"
        );
        assert!(files_in(&f.d.cfg.paths.store_tmp()).is_empty());
        assert_eq!(held(&p), Some(std::fs::metadata(&p).unwrap().len()));
        assert_eq!(held(&f.dir.path("none.swu")), None);
    }

    /// Images are only taken after the signed index names them, at its size and hash: each
    /// refusal names the member, and nothing stays in the store or its `.tmp`.
    #[test]
    fn images_the_signed_index_does_not_vouch_for_are_refused() {
        let mut f = setup("bundle-images");
        let e = f.offer(MANIFEST, b"web 1.0 image");
        let (index, sig) = f.signed(1);
        let desc = descriptor(1, &[]);
        let head: [(&str, &[u8]); 3] = [
            (b::DESCRIPTOR, &desc),
            (b::INDEX, &index),
            (b::SIGNATURE, &sig),
        ];
        let cases: [(Members, String); 4] = [
            (
                vec![(&e.file, b"web 1.0 image"), head[0], head[1], head[2]],
                format!("bundle: {:?} comes before the signed index", e.file),
            ),
            (
                [&head[..], &[("packages/other.sqfs", &b"web 1.0 image"[..])]].concat(),
                "bundle: \"packages/other.sqfs\" is not an image the signed index names".into(),
            ),
            (
                [&head[..], &[(e.file.as_str(), &b"web 1.0 image!"[..])]].concat(),
                format!("bundle: {:?} is 14 bytes; the signed index says 13", e.file),
            ),
            (
                [&head[..], &[(e.file.as_str(), &b"web 1.0 IMAGE"[..])]].concat(),
                format!(
                    "bundle: {}: sha256 {}, the signed index says {}",
                    e.file,
                    berth_core::index::sha256_hex(b"web 1.0 IMAGE"),
                    e.sha256
                ),
            ),
        ];
        for (members, message) in cases {
            let p = f.write(&members);
            let err = open(&f.d, &p).unwrap_err();
            assert_eq!((err.kind, err.message), (Kind::BadIndex, message));
            assert!(f.store().iter().all(|n| n == ".tmp"), "{:?}", f.store());
            assert!(files_in(&f.d.cfg.paths.store_tmp()).is_empty());
        }
    }

    /// An index the device's keys do not vouch for, or older than the one it has, is
    /// refused before any image is read: the image after it is not stored.
    #[test]
    fn an_untrusted_or_replayed_index_stores_nothing() {
        let mut f = setup("bundle-trust");
        let e = f.offer(MANIFEST, b"web 1.0 image");
        let (index, _) = f.signed(5);
        let other = Repo::signed_by(&f.dir.path("other"), &f.dir.path("other-keys"), 2);
        let forged = other.sign(&index);
        let desc = descriptor(5, &[]);
        let p = f.write(&[
            (b::DESCRIPTOR, &desc),
            (b::INDEX, &index),
            (b::SIGNATURE, forged.as_bytes()),
            (&e.file, b"web 1.0 image"),
        ]);
        let err = open(&f.d, &p).unwrap_err();
        assert_eq!(err.kind, Kind::BadSignature, "{}", err.message);
        assert!(f.store().iter().all(|n| n == ".tmp"), "{:?}", f.store());

        // The device has serial 5: a bundle with serial 4 is a replay.
        repo::update(&f.d, false).unwrap();
        let (old, old_sig) = f.signed(4);
        let desc = descriptor(4, &[]);
        let p = f.write(&[
            (b::DESCRIPTOR, &desc),
            (b::INDEX, &old),
            (b::SIGNATURE, &old_sig),
            (&e.file, b"web 1.0 image"),
        ]);
        let err = open(&f.d, &p).unwrap_err();
        assert_eq!(err.kind, Kind::Rollback, "{}", err.message);
        assert!(!f.d.cfg.paths.image(&e.sha256).exists());
    }

    /// The descriptor must be there and agree with the signed index.
    #[test]
    fn a_descriptor_that_does_not_match_the_index_is_refused() {
        let mut f = setup("bundle-descriptor");
        f.offer(MANIFEST, b"web 1.0 image");
        let (index, sig) = f.signed(2);
        let cases: [(Option<Vec<u8>>, &str); 3] = [
            (None, "bundle: no berth.json"),
            (
                Some(descriptor(7, &[])),
                "bundle: berth.json names serial 7, the signed index has 2",
            ),
            (
                Some(descriptor(2, &["db"])),
                "bundle: berth.json installs db, which the signed index does not list",
            ),
        ];
        for (desc, message) in cases {
            let mut members: Vec<(&str, &[u8])> = vec![(b::INDEX, &index), (b::SIGNATURE, &sig)];
            if let Some(dj) = &desc {
                members.push((b::DESCRIPTOR, dj));
            }
            let err = open(&f.d, &f.write(&members)).unwrap_err();
            assert_eq!((err.kind, err.message.as_str()), (Kind::BadIndex, message));
        }
        let desc = descriptor(2, &[]);
        let err = open(
            &f.d,
            &f.write(&[(b::DESCRIPTOR, &desc), (b::INDEX, &index)]),
        )
        .unwrap_err();
        assert_eq!(
            (err.kind, err.message.as_str()),
            (
                Kind::BadIndex,
                "bundle: no signed index (index.json and index.json.sig)"
            )
        );
        let err = open(&f.d, &f.dir.path("missing.swu")).unwrap_err();
        assert!(err.message.contains("missing.swu"), "{}", err.message);
    }

    /// Applied, a bundle's index becomes the device's and every installed package moves to
    /// its version from the images the bundle carried (the repository is not asked).
    #[test]
    fn an_applied_bundle_upgrades_from_its_own_images() {
        let mut f = setup("bundle-apply");
        f.offer(MANIFEST, b"web 1.0 image");
        f.signed(1);
        repo::update(&f.d, false).unwrap();
        install::install(&f.d, &["web".to_string()], &mut |_| {}).unwrap();
        let v2 = MANIFEST.replace("1.0", "2.0");
        let e2 = f.offer(&v2, b"web 2.0 image");
        let (index, sig) = f.signed(2);
        // Only the bundle has it.
        std::fs::remove_file(f.r.dir.join(&e2.file)).unwrap();
        let desc = descriptor(2, &[]);
        let p = f.write(&[
            (b::DESCRIPTOR, &desc),
            (b::INDEX, &index),
            (b::SIGNATURE, &sig),
            (&e2.file, b"web 2.0 image"),
        ]);
        let a = apply(&f.d, &p, false, &mut |_| {}).unwrap();
        assert_eq!(a.descriptor.serial, 2);
        assert!(a.installed.is_empty());
        assert_eq!(
            a.result,
            json!({"upgraded": [{"name": "web", "from": "1.0", "to": "2.0"}],
                   "rolled_back": [], "held": []})
        );
        let p = state::installed(&f.d, "web").unwrap();
        assert_eq!((p.version.to_string(), p.sha256), ("2.0".into(), e2.sha256));
        assert_eq!(repo::load_index(&f.d).unwrap().0.serial, 2);
    }
}
