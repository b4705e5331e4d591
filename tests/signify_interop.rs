//! berth's signify/usign code against the real tool, both ways.
//!
//! The device trusts a repository because `index.json.sig` verifies; vendors may sign with
//! `berth repo build`, signify or usign. These tests hold berth to what signify-openbsd actually
//! writes and accepts, not to our reading of its format.

mod common;
use common::TempDir;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use berth_core::signify::{self, FileKind, PublicKey, SecretKey, Signature, SignifyError};

const SIGNIFY: &str = "/usr/bin/signify-openbsd";
const MESSAGE: &[u8] = b"{\"packages\":[{\"name\":\"hello\",\"version\":\"1.0\"}]}\n";

/// The real tool is the point of these tests: without it they fail, they never skip.
fn signify_tool() -> Command {
    assert!(
        Path::new(SIGNIFY).exists(),
        "{SIGNIFY} is missing: install the Debian package signify-openbsd \
         (apt-get install signify-openbsd); the signify interop tests need it and never skip"
    );
    let mut cmd = Command::new(SIGNIFY);
    cmd.stdin(Stdio::null());
    cmd
}

fn describe(cmd: &Command, out: &Output) -> String {
    format!(
        "{cmd:?} exited with {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(out.status.success(), "{}", describe(cmd, &out));
    out
}

fn run_fails(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        !out.status.success(),
        "expected failure: {}",
        describe(cmd, &out)
    );
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// `signify -S`: the signature lands in MESSAGE.sig.
fn signify_sign(secret: &Path, message: &Path) -> Signature {
    run_ok(
        signify_tool()
            .arg("-S")
            .arg("-s")
            .arg(secret)
            .arg("-m")
            .arg(message),
    );
    Signature::parse(&read(&sig_path(message))).unwrap()
}

fn signify_verify(public: &Path, message: &Path) -> Command {
    let mut cmd = signify_tool();
    cmd.arg("-V").arg("-p").arg(public).arg("-m").arg(message);
    cmd
}

fn sig_path(message: &Path) -> PathBuf {
    let mut name = message.as_os_str().to_owned();
    name.push(".sig");
    PathBuf::from(name)
}

fn berth_sign(secret: &SecretKey, message: &Path, public_name: &str) -> Signature {
    let sig = signify::sign(secret, &fs::read(message).unwrap());
    fs::write(
        sig_path(message),
        sig.to_file_string(&format!("verify with {public_name}")),
    )
    .unwrap();
    sig
}

fn signify_generate(dir: &TempDir, name: &str) -> (PathBuf, PathBuf) {
    let (public, secret) = (
        dir.path(&format!("{name}.pub")),
        dir.path(&format!("{name}.sec")),
    );
    run_ok(
        signify_tool()
            .args(["-G", "-n", "-c", name, "-p"])
            .arg(&public)
            .arg("-s")
            .arg(&secret),
    );
    (public, secret)
}

#[test]
fn berth_keys_work_with_signify() {
    let dir = TempDir::new("berth-keys");
    let prefix = dir.path("vendor");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_berth"));
    cmd.args(["key", "generate", "-o"]).arg(&prefix);
    run_ok(&mut cmd);
    let (public_path, secret_path) = (dir.path("vendor.pub"), dir.path("vendor.sec"));
    assert!(
        public_path.exists() && secret_path.exists(),
        "`berth key generate -o {}` succeeded but did not write vendor.pub and vendor.sec",
        prefix.display()
    );
    let public = PublicKey::parse(&read(&public_path)).unwrap();
    let secret = SecretKey::parse(&read(&secret_path)).unwrap();
    assert_eq!(secret.public_key(), public);

    // signify signs with berth's secret key; berth verifies.
    let message = dir.path("index.json");
    fs::write(&message, MESSAGE).unwrap();
    let theirs = signify_sign(&secret_path, &message);
    signify::verify(&public, MESSAGE, &theirs).unwrap();
    // ed25519 is deterministic: both implementations must produce the same bytes.
    assert_eq!(signify::sign(&secret, MESSAGE), theirs);

    // berth signs; signify verifies with berth's public key.
    let other = dir.path("other.json");
    fs::write(&other, b"another index\n").unwrap();
    berth_sign(&secret, &other, "vendor.pub");
    run_ok(&mut signify_verify(&public_path, &other));
}

#[test]
fn signify_keys_work_with_berth() {
    let dir = TempDir::new("signify-keys");
    let (public_path, secret_path) = signify_generate(&dir, "acme");
    let public_text = read(&public_path);
    assert!(public_text.starts_with("untrusted comment: acme public key\n"));
    let public = PublicKey::parse(&public_text).unwrap();
    let secret = SecretKey::parse(&read(&secret_path)).unwrap();
    assert_eq!(secret.public_key(), public);

    let message = dir.path("index.json");
    fs::write(&message, MESSAGE).unwrap();
    // Our signature, their verification.
    let ours = berth_sign(&secret, &message, "acme.pub");
    run_ok(&mut signify_verify(&public_path, &message));
    // Their signature, our verification.
    let theirs = signify_sign(&secret_path, &message);
    signify::verify(&public, MESSAGE, &theirs).unwrap();
    assert_eq!(ours, theirs);
    let trusted = [
        PublicKey::parse(&read(&signify_generate(&dir, "x").0)).unwrap(),
        public,
    ];
    assert_eq!(
        signify::verify_with_any(&trusted, MESSAGE, &theirs).unwrap(),
        &public
    );

    // What we write for keys, signify reads: re-encode both and sign/verify with the tool.
    let (public2, secret2) = (dir.path("re.pub"), dir.path("re.sec"));
    fs::write(&public2, public.to_file_string("re public key")).unwrap();
    fs::write(&secret2, secret.to_file_string("re secret key")).unwrap();
    let other = dir.path("other.json");
    fs::write(&other, b"x").unwrap();
    signify_sign(&secret2, &other);
    run_ok(&mut signify_verify(&public2, &other));
}

#[test]
fn tampered_message_is_refused_by_both() {
    let dir = TempDir::new("tampered");
    let (public_path, secret_path) = signify_generate(&dir, "k");
    let public = PublicKey::parse(&read(&public_path)).unwrap();
    let secret = SecretKey::parse(&read(&secret_path)).unwrap();
    let message = dir.path("index.json");
    fs::write(&message, MESSAGE).unwrap();
    let theirs = signify_sign(&secret_path, &message);

    let mut tampered = MESSAGE.to_vec();
    tampered[3] ^= 0x20;
    let err = signify::verify(&public, &tampered, &theirs).unwrap_err();
    assert!(matches!(err, SignifyError::BadSignature), "{err:?}");
    assert_eq!(err.to_string(), "signature does not match the message");

    // And signify refuses our signature once the message changed.
    berth_sign(&secret, &message, "k.pub");
    fs::write(&message, &tampered).unwrap();
    run_fails(&mut signify_verify(&public_path, &message));
}

#[test]
fn wrong_key_is_named() {
    let dir = TempDir::new("wrong-key");
    let (_, secret_path) = signify_generate(&dir, "signer");
    let (other_path, _) = signify_generate(&dir, "other");
    let signer = SecretKey::parse(&read(&secret_path)).unwrap();
    let other = PublicKey::parse(&read(&other_path)).unwrap();
    let message = dir.path("index.json");
    fs::write(&message, MESSAGE).unwrap();

    let theirs = signify_sign(&secret_path, &message);
    let err = signify::verify(&other, MESSAGE, &theirs).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "signature was made by key {}, not by this public key (keynum {})",
            signify::keynum_hex(&signer.keynum()),
            other.keynum_hex()
        )
    );
    let err = signify::verify_with_any(&[other], MESSAGE, &theirs).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "signed by unknown key {}: not in /etc/berth/keys",
            signify::keynum_hex(&signer.keynum())
        )
    );

    berth_sign(&signer, &message, "signer.pub");
    run_fails(&mut signify_verify(&other_path, &message));
}

#[test]
fn damaged_signature_files_are_refused() {
    let dir = TempDir::new("damaged");
    let (_, secret_path) = signify_generate(&dir, "k");
    let message = dir.path("index.json");
    fs::write(&message, MESSAGE).unwrap();
    signify_sign(&secret_path, &message);
    let text = read(&sig_path(&message));
    let (comment, line) = text.trim_end().split_once('\n').unwrap();

    let corrupt = format!("{comment}\n{}!{}\n", &line[..10], &line[11..]);
    let err = Signature::parse(&corrupt).unwrap_err();
    assert!(
        matches!(
            err,
            SignifyError::Base64 {
                kind: FileKind::Signature,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "not a signify signature: the second line is not valid base64"
    );

    // Cut at a group boundary the base64 is fine but the blob is short.
    let short = format!("{comment}\n{}\n", &line[..line.len() - 8]);
    let err = Signature::parse(&short).unwrap_err();
    assert_eq!(
        err.to_string(),
        "not a signify signature: 69 bytes after base64 decoding, expected 74"
    );
    // Cut anywhere else the base64 itself is broken.
    let ragged = format!("{comment}\n{}\n", &line[..line.len() - 5]);
    assert!(matches!(
        Signature::parse(&ragged),
        Err(SignifyError::Base64 { .. })
    ));
    // Only the comment line left.
    assert!(matches!(
        Signature::parse(&format!("{comment}\n")),
        Err(SignifyError::MissingBase64(FileKind::Signature))
    ));
    let err = PublicKey::parse(line).unwrap_err();
    assert_eq!(
        err.to_string(),
        "not a signify public key: missing 'untrusted comment:' line"
    );
}

#[test]
fn encrypted_secret_key_is_refused() {
    let dir = TempDir::new("encrypted");
    let (public, secret) = (dir.path("enc.pub"), dir.path("enc.sec"));
    // Without a tty signify reads the passphrase (twice, to confirm) from stdin.
    let mut cmd = signify_tool();
    cmd.arg("-G").arg("-p").arg(&public).arg("-s").arg(&secret);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"correct horse\ncorrect horse\n").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", describe(&cmd, &out));

    let err = SecretKey::parse(&read(&secret)).unwrap_err();
    assert!(
        matches!(err, SignifyError::Encrypted { kdf_rounds: 42 }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "encrypted secret keys are not supported: generate keys with `berth key generate` or \
         `signify -G -n`"
    );
    // Its public half is an ordinary public key.
    PublicKey::parse(&read(&public)).unwrap();
}
