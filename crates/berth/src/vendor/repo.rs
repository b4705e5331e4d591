//! `berth repo build DIR --key SECKEY`: indexes the package images in a directory and signs
//! the index, producing a repository any static HTTP server (or `file://`) can serve.
//!
//! Layout of DIR:
//! - `*.sqfs` and `packages/*.sqfs`: the images (built with `berth pack`);
//! - `trusted.txt` (optional): package names the repository owner marks trusted, one per line;
//!   blank lines and lines starting with '#' are ignored. Trusted packages may run privileged
//!   on the device, so an unknown name there is an error rather than a silent no-op;
//! - written: `index.json` and `index.json.sig` (signify format, usable with `signify -V`);
//! - with `--deltas-from OLD_REPO`, written too: `deltas/NAME-OLD-NEW.zst`, one per package
//!   whose image changed, made with `zstd --patch-from` from OLD_REPO's image of it and listed
//!   (signed) in the index; a rebuild keeps the deltas the index already lists for images
//!   that did not change, while their files are there.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, Context};
use berth_core::index::{Delta, Index, IndexEntry, DELTA_ZSTD_PATCH, INDEX_FORMAT};
use berth_core::manifest::{Manifest, MANIFEST_PATH};
use berth_core::name::{Name, Version};
use berth_core::signify;
use serde::Serialize;

use super::pack::hash_file;

pub const INDEX_FILE: &str = "index.json";
pub const SIGNATURE_FILE: &str = "index.json.sig";
pub const TRUSTED_FILE: &str = "trusted.txt";

#[derive(Debug, Clone, Serialize)]
pub struct RepoReport {
    pub index: PathBuf,
    pub signature: PathBuf,
    /// Key number of the signing key (hex), to match against the device's keys.
    pub keynum: String,
    pub serial: u64,
    /// UNIX seconds, with `--valid-for`.
    pub expires: Option<u64>,
    pub packages: Vec<RepoPackage>,
    /// Why a package got no delta from `--deltas-from` (not older, not smaller, …).
    pub skipped_deltas: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RepoPackage {
    pub name: Name,
    pub version: Version,
    pub file: String,
    pub sha256: String,
    pub size: u64,
    pub trusted: bool,
    pub deltas: Vec<Delta>,
}

/// Where deltas go, relative to the repository.
pub const DELTAS_DIR: &str = "deltas";

/// Builds and signs `dir/index.json`; `valid_for` (seconds) sets the index's expiry;
/// `deltas_from` names an older repository to publish deltas from.
pub fn build(
    dir: &Path,
    key: &Path,
    valid_for: Option<u64>,
    deltas_from: Option<&Path>,
) -> anyhow::Result<RepoReport> {
    // Read the key first: a wrong key file should fail before minutes of hashing.
    let key_text = fs::read_to_string(key)
        .with_context(|| format!("cannot read secret key {}", key.display()))?;
    let secret = signify::SecretKey::parse(&key_text)
        .with_context(|| format!("invalid secret key {}", key.display()))?;

    let images = find_images(dir)?;
    let mut entries: Vec<IndexEntry> = Vec::new();
    // name -> file, to name both files when a package appears twice.
    let mut seen: BTreeMap<Name, String> = BTreeMap::new();
    for file in &images {
        let path = dir.join(file);
        let text = read_image_manifest(&path)?;
        let manifest = Manifest::parse(&text)
            .with_context(|| format!("invalid {MANIFEST_PATH} in {}", path.display()))?;
        let name = manifest.package.name.clone();
        if let Some(other) = seen.insert(name.clone(), file.clone()) {
            bail!(
                "package {name} is in both {other} and {file}: a repository holds one version \
                 of each package; remove one"
            );
        }
        let (sha256, size) = hash_file(&path)?;
        entries.push(IndexEntry {
            name,
            version: manifest.package.version.clone(),
            description: manifest.package.description.clone(),
            file: file.clone(),
            sha256,
            size,
            depends: manifest.package.depends.clone(),
            trusted: false,
            manifest: manifest.summary(),
            deltas: Vec::new(),
        });
    }

    // Checked here, before Index validation, to name the image files involved.
    for e in &entries {
        for d in &e.depends {
            if !seen.contains_key(d) {
                bail!(
                    "package {} ({}) depends on {d}, which is not in {}: add its image or \
                     remove the dependency",
                    e.name,
                    e.file,
                    dir.display()
                );
            }
        }
    }

    for name in read_trusted(dir, &seen)? {
        if let Some(e) = entries.iter_mut().find(|e| e.name == name) {
            e.trusted = true;
        }
    }

    let previous = std::fs::read(dir.join("index.json"))
        .ok()
        .and_then(|b| Index::parse(&b).ok());
    keep_deltas(dir, previous.as_ref(), &mut entries);
    let mut skipped_deltas = Vec::new();
    if let Some(old) = deltas_from {
        skipped_deltas = make_deltas(dir, old, &mut entries)?;
    }

    // Serials only grow: the time, or one more than the index this directory already has. A
    // rebuild that changes nothing keeps the serial, so it gives byte-identical files.
    let now = berth_sys::process::now_s();
    let mut index = Index {
        format: INDEX_FORMAT,
        serial: 0,
        expires: valid_for.map(|v| now.saturating_add(v)),
        packages: entries,
    };
    index.serial = match previous {
        Some(p) => {
            let unchanged = Index {
                serial: p.serial,
                ..index.clone()
            }
            .to_json()
                == p.to_json();
            if unchanged {
                p.serial
            } else {
                now.max(p.serial.saturating_add(1))
            }
        }
        None => now,
    };
    let json = index.to_json();
    // Parse our own output back: the device will run exactly this check.
    let index = Index::parse(json.as_bytes()).context("the built index does not validate")?;

    let index_path = dir.join(INDEX_FILE);
    let sig_path = dir.join(SIGNATURE_FILE);
    berth_sys::fsutil::write_atomic(&index_path, json.as_bytes(), 0o644)
        .with_context(|| format!("cannot write {}", index_path.display()))?;
    let signature = signify::sign(&secret, json.as_bytes());
    let sig_text = signature.to_file_string(&format!("verify with {}", public_key_name(key)));
    berth_sys::fsutil::write_atomic(&sig_path, sig_text.as_bytes(), 0o644)
        .with_context(|| format!("cannot write {}", sig_path.display()))?;

    Ok(RepoReport {
        index: index_path,
        signature: sig_path,
        keynum: secret.public_key().keynum_hex(),
        serial: index.serial,
        expires: index.expires,
        packages: index
            .packages
            .into_iter()
            .map(|e| RepoPackage {
                name: e.name,
                version: e.version,
                file: e.file,
                sha256: e.sha256,
                size: e.size,
                trusted: e.trusted,
                deltas: e.deltas,
            })
            .collect(),
        skipped_deltas,
    })
}

/// The deltas the directory's index lists for images that did not change, while each file is
/// there as listed (hashed again: a rebuild without `--deltas-from` keeps what an earlier one
/// made, never a file changed since).
fn keep_deltas(dir: &Path, previous: Option<&Index>, entries: &mut [IndexEntry]) {
    let Some(previous) = previous else { return };
    for e in entries.iter_mut() {
        if let Some(p) = previous
            .get(e.name.as_str())
            .filter(|p| p.sha256 == e.sha256)
        {
            e.deltas = p
                .deltas
                .iter()
                .filter(|d| {
                    hash_file(&dir.join(&d.file))
                        .is_ok_and(|(sha, size)| sha == d.sha256 && size == d.size)
                })
                .cloned()
                .collect();
        }
    }
}

/// A delta is published only when it is at most this share of the image (in percent): a
/// device that can use it should gain more than the cost of decoding it.
const DELTA_MAX_PERCENT: u64 = 90;

/// One `zstd --patch-from` delta per package whose image differs from `old`'s older version
/// of it. Returns why packages got none.
fn make_deltas(dir: &Path, old: &Path, entries: &mut [IndexEntry]) -> anyhow::Result<Vec<String>> {
    let old_index_path = old.join(INDEX_FILE);
    let bytes = fs::read(&old_index_path)
        .with_context(|| format!("--deltas-from: cannot read {}", old_index_path.display()))?;
    let old_index = Index::parse(&bytes)
        .with_context(|| format!("--deltas-from: {}", old_index_path.display()))?;
    let mut skipped = Vec::new();
    fs::create_dir_all(dir.join(DELTAS_DIR))
        .with_context(|| format!("cannot create {}", dir.join(DELTAS_DIR).display()))?;
    for e in entries.iter_mut() {
        let Some(o) = old_index.get(e.name.as_str()) else {
            continue;
        };
        let label = format!("{}@{}", e.name, e.version);
        if o.sha256 == e.sha256 || e.deltas.iter().any(|d| d.from == o.sha256) {
            continue;
        }
        if o.version >= e.version {
            skipped.push(format!(
                "{label}: {} has version {}, not an older one",
                old.display(),
                o.version
            ));
            continue;
        }
        let old_image = old.join(&o.file);
        match hash_file(&old_image) {
            Ok((sha, _)) if sha == o.sha256 => {}
            Ok(_) => bail!(
                "--deltas-from: {} does not match its index's sha256 for {}@{}",
                old_image.display(),
                o.name,
                o.version
            ),
            Err(err) => return Err(err.context("--deltas-from: the old image")),
        }
        let file = format!(
            "{DELTAS_DIR}/{}-{}-{}.zst",
            e.name,
            &o.sha256[..12],
            &e.sha256[..12]
        );
        let path = dir.join(&file);
        zstd_patch(&old_image, &dir.join(&e.file), &path)?;
        let (sha256, size) = hash_file(&path)?;
        if size * 100 > e.size * DELTA_MAX_PERCENT {
            let _ = fs::remove_file(&path);
            skipped.push(format!(
                "{label}: the delta from {} is {size} bytes of the image's {}: not published",
                o.version, e.size
            ));
            continue;
        }
        e.deltas.push(Delta {
            from: o.sha256.clone(),
            from_version: o.version.clone(),
            format: DELTA_ZSTD_PATCH.into(),
            file,
            sha256,
            size,
        });
    }
    Ok(skipped)
}

/// `zstd -19 --patch-from=OLD NEW -o OUT`, single-threaded so that the same images
/// always give the same delta; written beside OUT and renamed.
fn zstd_patch(old: &Path, new: &Path, out: &Path) -> anyhow::Result<()> {
    let tmp = out.with_extension("zst.tmp");
    let output = Command::new("zstd")
        .args(["-q", "-f", "-19", "-T1", "--no-progress"])
        .arg(format!("--patch-from={}", old.display()))
        .arg(new)
        .arg("-o")
        .arg(&tmp)
        .output()
        .map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                anyhow::anyhow!("--deltas-from: cannot run zstd: not found (install zstd)")
            } else {
                anyhow::anyhow!("--deltas-from: cannot run zstd: {e}")
            }
        })?;
    if !output.status.success() {
        let _ = fs::remove_file(&tmp);
        bail!(
            "zstd --patch-from={} {} failed: {}",
            old.display(),
            new.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    fs::rename(&tmp, out).with_context(|| format!("cannot write {}", out.display()))
}

/// signify names the public key in the signature's comment: `foo.sec` → `foo.pub`.
fn public_key_name(key: &Path) -> String {
    let file = key
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    match file.strip_suffix(".sec") {
        Some(stem) => format!("{stem}.pub"),
        None => format!("{file}.pub"),
    }
}

/// Image paths relative to `dir`, sorted: `*.sqfs` in DIR and in DIR/packages.
fn find_images(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    for sub in ["", "packages"] {
        let d = dir.join(sub);
        let rd = match fs::read_dir(&d) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !sub.is_empty() => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", d.display())),
        };
        for entry in rd {
            let entry = entry.with_context(|| format!("cannot read {}", d.display()))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if !name.ends_with(".sqfs") || !entry.path().is_file() {
                continue;
            }
            // The index only allows these characters (it becomes part of a URL).
            if !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
                || name.starts_with('.')
            {
                bail!(
                    "image file name {:?} in {} may only use A-Z a-z 0-9 . _ - and must not \
                     start with '.': rename it",
                    name,
                    d.display()
                );
            }
            found.push(if sub.is_empty() {
                name.to_string()
            } else {
                format!("{sub}/{name}")
            });
        }
    }
    found.sort();
    Ok(found)
}

/// The manifest inside an image, read without mounting (no root, no loop device needed).
fn read_image_manifest(image: &Path) -> anyhow::Result<String> {
    let output = Command::new("unsquashfs")
        .arg("-cat")
        .arg(image)
        .arg(MANIFEST_PATH)
        .output()
        .map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                anyhow::anyhow!("cannot run unsquashfs: not found (install squashfs-tools)")
            } else {
                anyhow::anyhow!("cannot run unsquashfs: {e}")
            }
        })?;
    if output.status.success() {
        return String::from_utf8(output.stdout)
            .with_context(|| format!("{MANIFEST_PATH} in {} is not UTF-8", image.display()));
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("no matches for") {
        bail!(
            "{} has no {MANIFEST_PATH}: was it built with berth pack?",
            image.display()
        );
    }
    // squashfs-tools before 4.5 have no -cat: extract the one file instead.
    if stderr.contains("SYNTAX") || stderr.contains("nrecognised") {
        return extract_manifest(image);
    }
    bail!(
        "cannot read {MANIFEST_PATH} from {}: {}",
        image.display(),
        stderr.trim().replace('\n', "; ")
    )
}

fn extract_manifest(image: &Path) -> anyhow::Result<String> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let tmp = std::env::temp_dir().join(format!(
        "berth-unsquash-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&tmp);
    let result = (|| {
        let output = Command::new("unsquashfs")
            .arg("-n")
            .arg("-d")
            .arg(&tmp)
            .arg("-f")
            .arg(image)
            .arg(MANIFEST_PATH)
            .output()
            .context("cannot run unsquashfs")?;
        if !output.status.success() {
            bail!(
                "cannot read {MANIFEST_PATH} from {}: {}",
                image.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        // The extracted path is a regular file or absent; never follow a symlink out of tmp.
        let path = tmp.join(MANIFEST_PATH);
        match fs::symlink_metadata(&path) {
            Ok(md) if md.is_file() => fs::read_to_string(&path)
                .with_context(|| format!("{MANIFEST_PATH} in {} is unreadable", image.display())),
            _ => bail!(
                "{} has no {MANIFEST_PATH}: was it built with berth pack?",
                image.display()
            ),
        }
    })();
    let _ = fs::remove_dir_all(&tmp);
    result
}

fn read_trusted(dir: &Path, known: &BTreeMap<Name, String>) -> anyhow::Result<Vec<Name>> {
    let path = dir.join(TRUSTED_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let mut names = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name =
            Name::parse(line).with_context(|| format!("{} line {}", path.display(), i + 1))?;
        if !known.contains_key(&name) {
            bail!(
                "{} line {}: package {name} is not in the repository",
                path.display(),
                i + 1
            );
        }
        names.push(name);
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vendor::pack::pack;
    use crate::vendor::pack::tests::{package_tree, TempDir};

    fn write_key(dir: &Path) -> (PathBuf, signify::PublicKey) {
        let (public, secret) = signify::generate([7; 32], [1, 2, 3, 4, 5, 6, 7, 8]);
        let path = dir.join("test.sec");
        fs::write(&path, secret.to_file_string("test secret key")).unwrap();
        (path, public)
    }

    /// Packs a package `name` with `extra` manifest lines into `repo/<file>`.
    fn add(t: &TempDir, repo: &Path, name: &str, extra: &str, file: &str) {
        let src = t.0.join(format!("src-{name}-{}", file.replace('/', "_")));
        package_tree(&src, name, extra);
        let out = repo.join(file);
        fs::create_dir_all(out.parent().unwrap()).unwrap();
        pack(&src, &out).unwrap();
    }

    #[test]
    fn builds_and_signs_an_index() {
        let t = TempDir::new("repo");
        let repo = t.0.join("repo");
        fs::create_dir(&repo).unwrap();
        let (key, public) = write_key(&t.0);
        add(
            &t,
            &repo,
            "libfoo",
            "description = \"a library\"",
            "libfoo-1.0.sqfs",
        );
        add(
            &t,
            &repo,
            "app",
            "depends = [\"libfoo\"]",
            "packages/app.sqfs",
        );
        fs::write(repo.join(TRUSTED_FILE), "# trusted\n\napp\n").unwrap();
        fs::write(repo.join("notes.txt"), "ignored").unwrap();

        let r = build(&repo, &key, None, None).unwrap();
        assert_eq!(r.packages.len(), 2);
        assert_eq!(r.keynum, public.keynum_hex());

        let json = fs::read(repo.join(INDEX_FILE)).unwrap();
        let index = Index::parse(&json).unwrap();
        let app = index.get("app").unwrap();
        assert_eq!(app.file, "packages/app.sqfs");
        assert!(app.trusted);
        assert_eq!(app.depends[0].as_str(), "libfoo");
        assert_eq!(app.manifest.argv0, "/bin/app");
        let (sha, size) = hash_file(&repo.join("packages/app.sqfs")).unwrap();
        assert_eq!((app.sha256.as_str(), app.size), (sha.as_str(), size));
        let lib = index.get("libfoo").unwrap();
        assert_eq!(lib.description, "a library");
        assert!(!lib.trusted);
        let order: Vec<_> = index
            .closure(&["app"])
            .unwrap()
            .iter()
            .map(|e| e.name.to_string())
            .collect();
        assert_eq!(order, ["libfoo", "app"]);

        let sig_text = fs::read_to_string(repo.join(SIGNATURE_FILE)).unwrap();
        assert!(
            sig_text.starts_with("untrusted comment: verify with test.pub\n"),
            "{sig_text}"
        );
        let sig = signify::Signature::parse(&sig_text).unwrap();
        signify::verify(&public, &json, &sig).unwrap();
        let mut tampered = json.clone();
        tampered[10] ^= 1;
        assert!(signify::verify(&public, &tampered, &sig).is_err());

        // Rebuilding the same images gives byte-identical files.
        build(&repo, &key, None, None).unwrap();
        assert_eq!(fs::read(repo.join(INDEX_FILE)).unwrap(), json);
        assert_eq!(
            fs::read_to_string(repo.join(SIGNATURE_FILE)).unwrap(),
            sig_text
        );
        // No temporary files left behind.
        let names: Vec<_> = fs::read_dir(&repo)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.contains(".tmp")), "{names:?}");
    }

    #[test]
    fn missing_dependency_names_both() {
        let t = TempDir::new("repo-dep");
        let repo = t.0.join("repo");
        fs::create_dir(&repo).unwrap();
        let (key, _) = write_key(&t.0);
        add(&t, &repo, "app", "depends = [\"libfoo\"]", "app.sqfs");
        let e = format!("{:#}", build(&repo, &key, None, None).unwrap_err());
        assert!(
            e.contains("package app (app.sqfs) depends on libfoo"),
            "{e}"
        );
        assert!(!repo.join(INDEX_FILE).exists());
    }

    #[test]
    fn duplicate_package_names_both_files() {
        let t = TempDir::new("repo-dup");
        let repo = t.0.join("repo");
        fs::create_dir(&repo).unwrap();
        let (key, _) = write_key(&t.0);
        add(&t, &repo, "app", "", "app-1.sqfs");
        add(&t, &repo, "app", "", "packages/app-2.sqfs");
        let e = format!("{:#}", build(&repo, &key, None, None).unwrap_err());
        assert!(
            e.contains("package app is in both app-1.sqfs and packages/app-2.sqfs"),
            "{e}"
        );
    }

    #[test]
    fn bad_trusted_and_bad_images() {
        let t = TempDir::new("repo-bad");
        let repo = t.0.join("repo");
        fs::create_dir(&repo).unwrap();
        let (key, _) = write_key(&t.0);
        add(&t, &repo, "app", "", "app.sqfs");

        fs::write(repo.join(TRUSTED_FILE), "app\nnope\n").unwrap();
        let e = format!("{:#}", build(&repo, &key, None, None).unwrap_err());
        assert!(
            e.contains("trusted.txt line 2: package nope is not in the repository"),
            "{e}"
        );
        fs::write(repo.join(TRUSTED_FILE), "Bad\n").unwrap();
        let e = format!("{:#}", build(&repo, &key, None, None).unwrap_err());
        assert!(
            e.contains("trusted.txt line 1") && e.contains("invalid package name"),
            "{e}"
        );
        fs::remove_file(repo.join(TRUSTED_FILE)).unwrap();

        // An image without a manifest.
        let plain = t.0.join("plain");
        fs::create_dir_all(plain.join("bin")).unwrap();
        let ok = Command::new("mksquashfs")
            .arg(&plain)
            .arg(repo.join("plain.sqfs"))
            .args(["-noappend", "-quiet", "-no-progress"])
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let e = format!("{:#}", build(&repo, &key, None, None).unwrap_err());
        assert!(e.contains("plain.sqfs has no .berth/manifest.toml"), "{e}");
        fs::remove_file(repo.join("plain.sqfs")).unwrap();

        // Not an image at all.
        fs::write(repo.join("junk.sqfs"), "not squashfs").unwrap();
        let e = format!("{:#}", build(&repo, &key, None, None).unwrap_err());
        assert!(e.contains("junk.sqfs"), "{e}");
        fs::remove_file(repo.join("junk.sqfs")).unwrap();

        // A file name the index cannot carry.
        fs::copy(repo.join("app.sqfs"), repo.join("my app.sqfs")).unwrap();
        let e = format!("{:#}", build(&repo, &key, None, None).unwrap_err());
        assert!(e.contains("rename it"), "{e}");
        fs::remove_file(repo.join("my app.sqfs")).unwrap();

        // A bad key.
        fs::write(t.0.join("bad.sec"), "nonsense").unwrap();
        let e = format!(
            "{:#}",
            build(&repo, &t.0.join("bad.sec"), None, None).unwrap_err()
        );
        assert!(e.contains("invalid secret key"), "{e}");

        build(&repo, &key, None, None).unwrap();
    }

    #[test]
    fn empty_repository_is_valid() {
        let t = TempDir::new("repo-empty");
        let (key, _) = write_key(&t.0);
        let r = build(&t.0, &key, None, None).unwrap();
        assert!(r.packages.is_empty());
        let index = Index::parse(&fs::read(t.0.join(INDEX_FILE)).unwrap()).unwrap();
        assert!(index.packages.is_empty());
    }

    #[test]
    fn extract_fallback_reads_the_manifest() {
        let t = TempDir::new("repo-extract");
        add(&t, &t.0, "app", "", "app.sqfs");
        let text = extract_manifest(&t.0.join("app.sqfs")).unwrap();
        assert!(text.contains("name = \"app\""));
    }

    #[test]
    fn key_names() {
        assert_eq!(public_key_name(Path::new("/k/vendor.sec")), "vendor.pub");
        assert_eq!(public_key_name(Path::new("key")), "key.pub");
    }
}
