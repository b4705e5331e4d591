//! The vendor tools through the real binary: `berth key generate`, `berth pack`,
//! `berth repo build`, as a vendor runs them.
//!
//! Most checks live as unit tests in `vendor/pack.rs` and `vendor/repo.rs`; these hold the
//! command lines, exit codes, `--json` output and the files on disk. They need squashfs-tools
//! (mksquashfs, unsquashfs) and, for the cross-check, signify-openbsd; they do not need root.

mod common;
use common::{let_pass, TempDir};

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use berth_core::index::{sha256_hex, Index};
use berth_core::signify::{self, PublicKey, Signature};

const SIGNIFY: &str = "/usr/bin/signify-openbsd";

fn berth(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    eprintln!(
        "berth {}: {}\nstdout: {}\nstderr: {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[track_caller]
fn ok(args: &[&str]) -> Output {
    let out = berth(args);
    assert!(out.status.success(), "berth {args:?} failed");
    out
}

#[track_caller]
fn fails(args: &[&str]) -> String {
    let out = berth(args);
    assert!(!out.status.success(), "berth {args:?} should have failed");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).expect("--json prints one JSON document")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The squashfs tools are a hard requirement of the vendor side: fail loudly, never skip.
fn require_squashfs_tools() {
    for tool in ["mksquashfs", "unsquashfs"] {
        // Spawning is the test: `unsquashfs -version` exits non-zero on 4.5.
        let found = Command::new(tool).arg("-version").output().is_ok();
        assert!(
            found,
            "{tool} is missing: apt-get install squashfs-tools (the vendor tool tests need it)"
        );
    }
}

/// A package tree with a manifest and an executable entrypoint /bin/<name>.
fn package_tree(root: &Path, name: &str, extra: &str) {
    fs::create_dir_all(root.join(".berth")).unwrap();
    fs::create_dir_all(root.join("bin")).unwrap();
    fs::write(
        root.join(".berth/manifest.toml"),
        format!(
            "[package]\nname = \"{name}\"\nversion = \"1.0.0\"\n{extra}\n\
             [entrypoint]\nargv = [\"/bin/{name}\"]\n"
        ),
    )
    .unwrap();
    let bin = root.join("bin").join(name);
    fs::write(&bin, "#!/bin/sh\nexec sleep 1000\n").unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn pack_is_reproducible_and_reports_json() {
    require_squashfs_tools();
    let t = TempDir::new("pack");
    let src = t.path("src");
    package_tree(&src, "hello", "description = \"says hello\"");
    let su = src.join("bin/su");
    fs::write(&su, "x").unwrap();
    fs::set_permissions(&su, fs::Permissions::from_mode(0o4755)).unwrap();

    let a = t.path("a.sqfs");
    let out = ok(&["pack", s(&src), "-o", s(&a), "--json"]);
    let report = json(&out);
    assert_eq!(report["name"], "hello");
    assert_eq!(report["version"], "1.0.0");
    let bytes = fs::read(&a).unwrap();
    assert_eq!(report["sha256"], sha256_hex(&bytes));
    assert_eq!(report["size"], bytes.len() as u64);
    let warnings = report["warnings"].to_string();
    assert!(warnings.contains("bin/su is setuid"), "{warnings}");

    // Same tree, packed again later: byte-identical.
    let_pass(
        std::time::Duration::from_millis(1100),
        "the clock moves on: the second pack has other times",
    );
    let b = t.path("b.sqfs");
    ok(&["pack", s(&src), "-o", s(&b)]);
    assert_eq!(fs::read(&b).unwrap(), bytes);
    assert!(!t.path("a.sqfs.tmp").exists() && !t.path("b.sqfs.tmp").exists());
}

#[test]
fn pack_rejects_bad_packages() {
    require_squashfs_tools();
    let t = TempDir::new("pack-bad");
    let src = t.path("src");
    package_tree(&src, "hello", "");
    let out = t.path("x.sqfs");

    fs::write(
        src.join(".berth/manifest.toml"),
        "[package]\nname = \"Hello\"\nversion = \"1\"\n[entrypoint]\nargv = [\"/bin/hello\"]\n",
    )
    .unwrap();
    let err = fails(&["pack", s(&src), "-o", s(&out)]);
    assert!(err.contains("manifest line 2: package.name"), "{err}");

    package_tree(&src, "hello", "");
    fs::remove_file(src.join("bin/hello")).unwrap();
    let err = fails(&["pack", s(&src), "-o", s(&out)]);
    assert!(err.contains("entrypoint /bin/hello not found"), "{err}");
    assert!(!out.exists());
}

#[test]
fn key_pack_repo_end_to_end() {
    require_squashfs_tools();
    let t = TempDir::new("repo");
    let key = t.path("vendor");
    ok(&["key", "generate", "-o", s(&key)]);
    let public_path = t.path("vendor.pub");
    let secret_path = t.path("vendor.sec");
    assert!(public_path.exists() && secret_path.exists());

    let repo = t.path("repo");
    fs::create_dir_all(repo.join("packages")).unwrap();
    let lib = t.path("src-lib");
    package_tree(&lib, "libfoo", "");
    ok(&["pack", s(&lib), "-o", s(&repo.join("packages/libfoo.sqfs"))]);
    let app = t.path("src-app");
    package_tree(&app, "app", "depends = [\"libfoo\"]");
    ok(&["pack", s(&app), "-o", s(&repo.join("app-1.0.0.sqfs"))]);
    fs::write(repo.join("trusted.txt"), "libfoo\n").unwrap();

    let out = ok(&[
        "repo",
        "build",
        s(&repo),
        "--key",
        s(&secret_path),
        "--json",
    ]);
    let report = json(&out);
    assert_eq!(
        report["packages"].as_array().map(Vec::len),
        Some(2),
        "{report}"
    );

    let index_bytes = fs::read(repo.join("index.json")).unwrap();
    let index = Index::parse(&index_bytes).unwrap();
    let app_entry = index.get("app").unwrap();
    assert_eq!(app_entry.file, "app-1.0.0.sqfs");
    assert_eq!(
        app_entry.sha256,
        sha256_hex(&fs::read(repo.join("app-1.0.0.sqfs")).unwrap())
    );
    assert!(index.get("libfoo").unwrap().trusted);
    assert!(!app_entry.trusted);
    let order: Vec<_> = index
        .closure(&["app"])
        .unwrap()
        .iter()
        .map(|e| e.name.to_string())
        .collect();
    assert_eq!(order, ["libfoo", "app"]);

    // The signature verifies with berth's own code and with the real signify.
    let public = PublicKey::parse(&fs::read_to_string(&public_path).unwrap()).unwrap();
    let sig_text = fs::read_to_string(repo.join("index.json.sig")).unwrap();
    assert!(
        sig_text.starts_with("untrusted comment: verify with vendor.pub\n"),
        "{sig_text}"
    );
    let sig = Signature::parse(&sig_text).unwrap();
    signify::verify(&public, &index_bytes, &sig).unwrap();
    if Path::new(SIGNIFY).exists() {
        let out = Command::new(SIGNIFY)
            .args(["-V", "-q", "-p", s(&public_path), "-x"])
            .arg(repo.join("index.json.sig"))
            .arg("-m")
            .arg(repo.join("index.json"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "signify -V: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        eprintln!("key_pack_repo_end_to_end: {SIGNIFY} missing, signify cross-check skipped");
    }

    // Removing the dependency's image makes the repository inconsistent: refused, naming both.
    fs::remove_file(repo.join("packages/libfoo.sqfs")).unwrap();
    fs::write(repo.join("trusted.txt"), "").unwrap();
    let err = fails(&["repo", "build", s(&repo), "--key", s(&secret_path)]);
    assert!(err.contains("app") && err.contains("libfoo"), "{err}");
    // The previous, consistent index is left in place.
    assert_eq!(fs::read(repo.join("index.json")).unwrap(), index_bytes);
}
