//! End to end, as root, with real LXC: bad input and faults, each one tested.
//!
//! The rule every test here holds berth to: bad input gets a clear error that names the thing
//! and what is wrong, a non-zero exit status, and loses nothing. After each fault the installed
//! set and `state.json` are exactly what they were, no partial download and no mount is left,
//! and a correct operation (install and start of a good package) still works.
//!
//! The crash tests kill the daemon with SIGKILL, at named points of an install (fault
//! injection) and at arbitrary moments of a slow download, and hold the store and state to
//! "as before or as after, never broken".

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A package that runs until asked to stop, and stops at once when asked (LXC halts with
/// SIGPWR; the init of a container ignores signals it does not handle).
fn service(name: &str) -> Pkg {
    Pkg::script(
        name,
        "1",
        "trap 'exit 0' TERM PWR INT; echo up; while true; do sleep 0.1; done",
    )
}

fn lines(v: &str) -> String {
    v.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What must survive a fault unchanged.
#[derive(Debug, PartialEq)]
struct Snapshot {
    installed: serde_json::Value,
    state_file: Option<Vec<u8>>,
}

fn snapshot(sb: &Sandbox) -> Snapshot {
    Snapshot {
        installed: sb.json(&["list", "--installed"]),
        state_file: std::fs::read(sb.state_dir().join("state.json")).ok(),
    }
}

/// Mounts berth made below the sandbox (a tmpfs a test put under the state dir is not one).
fn berth_mounts(sb: &Sandbox) -> Vec<String> {
    let state = sb.state_dir();
    sb.stray_mounts()
        .into_iter()
        .filter(|m| Path::new(m) != state)
        .collect()
}

/// The store's images (file names), without the partial-download directory.
fn store_images(sb: &Sandbox) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(sb.state_dir().join("store"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|n| n.ends_with(".sqfs"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Partial downloads that are not the start of an image of the repository: a `SHA256.part`
/// whose bytes begin the image with that sha256 is kept on purpose (the next install resumes
/// from it, docs/repository.md); anything else is a leftover.
fn stray_partials(sb: &Sandbox) -> Vec<String> {
    let images: Vec<(String, Vec<u8>)> = std::fs::read_dir(sb.repo.join("packages"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".sqfs"))
                .map(|e| (sha256_of(&e.path()), std::fs::read(e.path()).unwrap()))
                .collect()
        })
        .unwrap_or_default();
    sb.partial_downloads()
        .into_iter()
        .filter(|name| {
            let tmp = sb.state_dir().join("store/.tmp").join(name);
            let held = std::fs::read(&tmp).unwrap_or_default();
            let resumable = name.strip_suffix(".part").is_some_and(|sha| {
                images.iter().any(|(s, bytes)| {
                    s == sha && held.len() <= bytes.len() && bytes.starts_with(&held)
                })
            });
            !resumable
        })
        .collect()
}

/// Nothing was lost or left behind by a refused operation.
fn assert_intact(sb: &Sandbox, before: &Snapshot, what: &str) {
    let now = snapshot(sb);
    assert_eq!(
        &now, before,
        "{what}: the installed set or state.json changed"
    );
    assert!(
        stray_partials(sb).is_empty(),
        "{what}: partial downloads left that resume nothing: {:?}",
        stray_partials(sb)
    );
    assert!(
        berth_mounts(sb).is_empty(),
        "{what}: left mounted: {:?}",
        berth_mounts(sb)
    );
}

/// Runs berth, expects it to fail with exit status 1 and an error naming every one of
/// `words`; returns the error text.
fn refused(sb: &Sandbox, args: &[&str], words: &[&str]) -> String {
    let out = sb.berth(args);
    let err = stderr(&out);
    assert!(
        !out.status.success(),
        "berth {args:?} should have failed; it said:\n{}",
        stdout(&out)
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "berth {args:?}: exit status {}:\n{err}",
        out.status
    );
    for w in words {
        assert!(
            err.contains(w),
            "berth {args:?}: the error should mention {w:?}; it is:\n{}",
            lines(&err)
        );
    }
    err
}

/// A correct operation still works after a fault: install, start and stop `name`.
fn good_op_works(sb: &Sandbox, name: &str) {
    sb.ok(&["install", name]);
    sb.ok(&["start", name]);
    sb.wait_log(name, "up");
    let v = sb.json(&["stop", name]);
    assert_eq!(v["graceful"], true, "{v}");
    assert!(
        berth_mounts(sb).is_empty(),
        "left mounted after stop: {:?}",
        berth_mounts(sb)
    );
}

fn index_path(sb: &Sandbox) -> PathBuf {
    sb.repo.join("index.json")
}

fn read_index(sb: &Sandbox) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(index_path(sb)).unwrap()).unwrap()
}

/// Writes a hand-made index and signs it with the repository's own (trusted) key.
fn write_signed_index(sb: &Sandbox, index: &serde_json::Value) {
    std::fs::write(
        index_path(sb),
        serde_json::to_string_pretty(index).unwrap() + "\n",
    )
    .unwrap();
    signify_sign(sb, &sb.key);
}

fn entry_mut<'a>(index: &'a mut serde_json::Value, name: &str) -> &'a mut serde_json::Value {
    index["packages"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not in the index"))
}

fn sha256_of(path: &Path) -> String {
    berth_core::index::sha256_hex(&std::fs::read(path).unwrap())
}

/// An image made without `berth pack` (which would refuse what these tests need), straight
/// with mksquashfs: busybox, the given manifest and, if `skeleton`, the mount points; `tweak`
/// may then change the tree.
fn hand_made_image(
    sb: &Sandbox,
    file: &str,
    manifest: &str,
    skeleton: bool,
    tweak: &dyn Fn(&Path),
) -> PathBuf {
    let src = sb.dir.join("hand").join(file);
    let _ = std::fs::remove_dir_all(&src);
    std::fs::create_dir_all(src.join(".berth")).unwrap();
    std::fs::create_dir_all(src.join("bin")).unwrap();
    std::fs::copy(busybox(), src.join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", src.join("bin/sh")).unwrap();
    if skeleton {
        for d in ["proc", "sys", "dev", "tmp", "run", "data"] {
            std::fs::create_dir_all(src.join(d)).unwrap();
        }
    }
    std::fs::write(src.join(".berth/manifest.toml"), manifest).unwrap();
    tweak(&src);
    let out = sb.repo.join("packages").join(file);
    let o = Command::new("mksquashfs")
        .arg(&src)
        .arg(&out)
        .args(["-noappend", "-all-root", "-quiet", "-no-progress"])
        .output()
        .unwrap();
    assert!(o.status.success(), "mksquashfs: {}", stderr(&o));
    out
}

fn no_tweak(_: &Path) {}

fn manifest(name: &str, extra_pkg: &str, argv: &str) -> String {
    format!(
        "[package]\nname = \"{name}\"\nversion = \"1\"\n{extra_pkg}[entrypoint]\nargv = {argv}\n"
    )
}

/// A hand-made image: index name, manifest, whether it has the skeleton, a change to its tree.
type HandMade<'a> = (&'a str, String, bool, &'a dyn Fn(&Path));

/// Adds index entries for hand-made images (name, manifest, skeleton, tweak) to the
/// repository's index, signs it with the trusted key and makes the daemon take it.
fn add_hand_made(sb: &Sandbox, cases: &[HandMade]) {
    let mut index = read_index(sb);
    for (name, text, skeleton, tweak) in cases {
        let image = hand_made_image(sb, &format!("{name}-1.sqfs"), text, *skeleton, *tweak);
        let e = entry_for(&index, "good", name, "1", &image);
        index["packages"].as_array_mut().unwrap().push(e);
    }
    write_signed_index(sb, &index);
    let v = sb.json(&["update"]);
    assert_eq!(v["packages"], cases.len() + 1, "{v}");
}

/// An index entry for a hand-made image: a copy of `like`'s entry with the image's name,
/// version, file, size and sha256 (correct ones: only the content is bad).
fn entry_for(
    index: &serde_json::Value,
    like: &str,
    name: &str,
    version: &str,
    image: &Path,
) -> serde_json::Value {
    let mut e = index["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == like)
        .unwrap()
        .clone();
    e["name"] = name.into();
    e["version"] = version.into();
    e["description"] = format!("hand-made {name}").into();
    e["file"] = format!("packages/{}", image.file_name().unwrap().to_str().unwrap()).into();
    e["size"] = std::fs::metadata(image).unwrap().len().into();
    e["sha256"] = sha256_of(image).into();
    e["depends"] = serde_json::json!([]);
    e
}

// ---------------------------------------------------------------------------------------
// A test HTTP server for the repository, on 127.0.0.1 only.

const GOOD: u8 = 0;
/// Images: announces the full Content-Length, sends half, closes.
const TRUNCATE: u8 = 1;
/// Images: small chunks with short sleeps between them.
const SLOW: u8 = 2;

struct RepoServer {
    port: u16,
    mode: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
}

impl RepoServer {
    fn start(root: &Path, mode: u8) -> RepoServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(AtomicU8::new(mode));
        let stop = Arc::new(AtomicBool::new(false));
        let (m, s, root) = (Arc::clone(&mode), Arc::clone(&stop), root.to_path_buf());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let root = root.clone();
                let mode = m.load(Ordering::SeqCst);
                std::thread::spawn(move || serve(conn, &root, mode));
            }
        });
        RepoServer { port, mode, stop }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn set_mode(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }
}

impl Drop for RepoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(mut s: TcpStream, root: &Path, mode: u8) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head.split(' ').nth(1).unwrap_or("/").to_string();
    let body = if path.split('/').any(|c| c == "..") {
        None
    } else {
        std::fs::read(root.join(path.trim_start_matches('/'))).ok()
    };
    let Some(body) = body else {
        let _ = s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    let _ = write!(
        s,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let image = path.ends_with(".sqfs");
    match mode {
        TRUNCATE if image => {
            let _ = s.write_all(&body[..body.len() / 2]);
            let _ = s.flush();
            // Dropping the stream closes the connection early.
        }
        SLOW if image => {
            for chunk in body.chunks(16 * 1024) {
                if s.write_all(chunk).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(4));
            }
        }
        _ => {
            let _ = s.write_all(&body);
        }
    }
}

/// Points the sandbox at `url`: the configuration is read at daemon start, and the index
/// cache remembers where it came from, so restart and update.
fn use_repository(sb: &mut Sandbox, url: &str) {
    sb.set_repository(url);
    sb.kill_daemon(15);
    sb.start_daemon();
    let v = sb.json(&["update"]);
    assert_eq!(v["repository"], url, "{v}");
}

// ---------------------------------------------------------------------------------------
// The repository index

#[test]
fn index_with_bad_missing_or_foreign_signature_is_refused_and_the_old_one_kept() {
    let mut sb = Sandbox::new("sig");
    sb.pack(&service("good"));
    sb.pack(&service("other"));
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    let available = sb.json(&["list", "--available"]);
    assert_eq!(available["available"].as_array().unwrap().len(), 2);
    let good_index = std::fs::read(index_path(&sb)).unwrap();
    let good_sig = std::fs::read(sb.repo.join("index.json.sig")).unwrap();
    let restore = |sb: &Sandbox| {
        std::fs::write(index_path(sb), &good_index).unwrap();
        std::fs::write(sb.repo.join("index.json.sig"), &good_sig).unwrap();
    };
    let before = snapshot(&sb);

    // 1. index.json changed after signing: one byte of a description.
    let text = String::from_utf8(good_index.clone()).unwrap();
    assert!(text.contains("test package good"));
    std::fs::write(
        index_path(&sb),
        text.replacen("test package good", "test package gOod", 1),
    )
    .unwrap();
    let err = refused(&sb, &["update"], &["signature", "index"]);
    assert!(err.contains("does not match"), "{err}");
    assert_intact(&sb, &before, "tampered index");
    assert_eq!(
        sb.json(&["list", "--available"]),
        available,
        "the last good index must stay in use"
    );

    // 2. No signature at all.
    restore(&sb);
    std::fs::remove_file(sb.repo.join("index.json.sig")).unwrap();
    refused(&sb, &["update"], &["index.json.sig"]);
    assert_intact(&sb, &before, "missing signature");
    assert_eq!(sb.json(&["list", "--available"]), available);

    // 3. Signed (validly) by a key the device does not trust.
    restore(&sb);
    sb.ok(&[
        "key",
        "generate",
        "-o",
        sb.dir.join("other").to_str().unwrap(),
    ]);
    signify_sign(&sb, &sb.dir.join("other.sec"));
    let err = refused(&sb, &["update"], &["unknown key"]);
    // It names where the device looks for trusted keys: the configured directory.
    let keys = sb.dir.join("keys");
    assert!(err.contains(keys.to_str().unwrap()), "{err}");
    assert_intact(&sb, &before, "foreign key");
    assert_eq!(sb.json(&["list", "--available"]), available);

    // A restarted daemon verifies its cache again and still has the good index.
    sb.kill_daemon(9);
    sb.start_daemon();
    assert_eq!(sb.json(&["list", "--available"]), available);
    // The kept index still installs.
    good_op_works(&sb, "good");
    // And a good index is taken again.
    restore(&sb);
    sb.ok(&["update"]);
}

#[test]
fn index_with_a_missing_dependency_is_refused_naming_package_and_dependency() {
    let mut sb = Sandbox::new("ghost");
    sb.pack(&service("good"));
    sb.pack(&service("haunted"));
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    let available = sb.json(&["list", "--available"]);
    let before = snapshot(&sb);

    let mut index = read_index(&sb);
    entry_mut(&mut index, "haunted")["depends"] = serde_json::json!(["ghost"]);
    write_signed_index(&sb, &index);
    // The signature is fine: what is refused is the content.
    let err = refused(&sb, &["update"], &["haunted", "ghost"]);
    assert!(err.contains("not in the index"), "{err}");
    assert_intact(&sb, &before, "missing dependency");
    assert_eq!(sb.json(&["list", "--available"]), available);
    good_op_works(&sb, "good");
}

#[test]
fn an_older_signed_index_is_refused_as_a_rollback() {
    let mut sb = Sandbox::new("rollback");
    sb.pack(&service("good"));
    sb.build_repo();
    let old_index = std::fs::read(index_path(&sb)).unwrap();
    let old_sig = std::fs::read(sb.repo.join("index.json.sig")).unwrap();
    sb.start_daemon();
    sb.ok(&["update"]);

    // The repository publishes a newer index (its serial grows); the device takes it.
    sb.pack(&service("newer"));
    sb.build_repo();
    let v = sb.json(&["update"]);
    assert_eq!(v["packages"], 2, "{v}");
    let available = sb.json(&["list", "--available"]);
    let before = snapshot(&sb);

    // Someone serves the old one again: validly signed, but older than what the device has.
    std::fs::write(index_path(&sb), &old_index).unwrap();
    std::fs::write(sb.repo.join("index.json.sig"), &old_sig).unwrap();
    let err = refused(&sb, &["update"], &["serial", "older", "rollback"]);
    assert!(err.contains("index rejected"), "{err}");
    assert_intact(&sb, &before, "rollback");
    assert_eq!(sb.json(&["list", "--available"]), available);
    good_op_works(&sb, "good");
}

// ---------------------------------------------------------------------------------------
// Images

#[test]
fn image_with_a_wrong_sha256_is_refused_and_not_stored() {
    let mut sb = Sandbox::new("sha");
    sb.pack(&service("good"));
    let image = sb.pack(&service("bent"));
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    let sha = sha256_of(&image);
    let original = std::fs::read(&image).unwrap();
    // Same size, some bytes in the middle flipped: only the hash can tell.
    let mut bent = original.clone();
    let mid = bent.len() / 2;
    for b in &mut bent[mid..mid + 64] {
        *b ^= 0xff;
    }
    std::fs::write(&image, &bent).unwrap();
    let before = snapshot(&sb);

    let err = refused(&sb, &["install", "bent"], &["bent", "sha256", &sha]);
    assert!(err.contains("nothing was changed"), "{err}");
    assert_intact(&sb, &before, "sha256 mismatch");
    assert!(
        !sb.state_dir()
            .join("store")
            .join(format!("{sha}.sqfs"))
            .exists(),
        "a refused image is in the store"
    );
    assert!(store_images(&sb).is_empty(), "{:?}", store_images(&sb));

    good_op_works(&sb, "good");
    // The real image, once the repository serves it again, installs.
    std::fs::write(&image, &original).unwrap();
    good_op_works(&sb, "bent");
}

/// A cut download is refused and changes nothing installed; what it received stays only as
/// the start of the image, for the next install to resume from (a restarted daemon keeps it).
#[test]
fn truncated_http_download_is_refused_and_leaves_nothing() {
    let mut sb = Sandbox::new("trunc");
    sb.pack(&service("good"));
    sb.build_repo();
    sb.start_daemon();
    let server = RepoServer::start(&sb.repo, TRUNCATE);
    use_repository(&mut sb, &server.url());
    let before = snapshot(&sb);

    let err = refused(&sb, &["install", "good"], &["truncated", "good"]);
    assert!(err.contains(&server.url()), "names the URL: {err}");
    assert_intact(&sb, &before, "truncated download");
    assert!(store_images(&sb).is_empty(), "{:?}", store_images(&sb));
    // A restarted daemon finds nothing to clean either (the resumable part aside).
    sb.kill_daemon(9);
    sb.start_daemon();
    assert_intact(&sb, &before, "truncated download, after a restart");

    server.set_mode(GOOD);
    good_op_works(&sb, "good");
}

#[test]
fn hostile_or_malformed_images_are_refused_with_the_reason() {
    let mut sb = Sandbox::new("hostile");
    sb.pack(&service("good"));
    sb.build_repo();
    sb.start_daemon();
    add_hand_made(
        &sb,
        &[
            (
                "colour",
                manifest("colour", "colour = \"red\"\n", "[\"/bin/sh\"]"),
                true,
                &no_tweak,
            ),
            (
                "climber",
                manifest("climber", "", "[\"../../bin/sh\"]"),
                true,
                &no_tweak,
            ),
            (
                "impostor",
                manifest("good", "", "[\"/bin/sh\"]"),
                true,
                &no_tweak,
            ),
            (
                "bare",
                manifest("bare", "", "[\"/bin/sh\"]"),
                false,
                &no_tweak,
            ),
        ],
    );
    let before = snapshot(&sb);

    // An unknown key: its line and its name.
    let err = refused(
        &sb,
        &["install", "colour"],
        &["colour@1", "manifest line 4", "colour"],
    );
    assert!(err.contains("unknown"), "{err}");
    assert_intact(&sb, &before, "unknown manifest key");
    // A relative path that climbs: its line, the key and the rule.
    let err = refused(
        &sb,
        &["install", "climber"],
        &["climber@1", "manifest line 5", "entrypoint.argv"],
    );
    assert!(err.contains("absolute"), "{err}");
    assert_intact(&sb, &before, "argv climbing out");
    // An image that holds another package than the index says.
    refused(
        &sb,
        &["install", "impostor"],
        &["impostor@1", "good@1", "not what the index lists"],
    );
    assert_intact(&sb, &before, "impostor image");
    // No mount-point skeleton: says how to build it properly.
    refused(
        &sb,
        &["install", "bare"],
        &["bare@1", "mount point /proc", "berth pack"],
    );
    assert_intact(&sb, &before, "image without skeleton");
    assert!(store_images(&sb).is_empty(), "{:?}", store_images(&sb));

    good_op_works(&sb, "good");
}

/// Runs berth with a deadline: a hostile image must be refused, not hang the daemon.
fn refused_in_time(sb: &Sandbox, args: &[&str], words: &[&str]) -> String {
    let mut child = sb
        .cmd(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let st = wait_cli(&mut child, &format!("berth {args:?}"));
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(st.code(), Some(1), "berth {args:?}: {st}:\n{err}");
    for w in words {
        assert!(
            err.contains(w),
            "berth {args:?}: the error should mention {w:?}; it is:\n{}",
            lines(&err)
        );
    }
    err
}

#[test]
fn images_whose_manifest_or_mount_points_lead_outside_them_are_refused() {
    let mut sb = Sandbox::new("escape");
    sb.pack(&service("good"));
    sb.build_repo();
    // Files of the host that a link in an image could point at: valid manifests, so that
    // only where they are makes them wrong.
    let host = sb.dir.join("host");
    std::fs::create_dir_all(host.join("berthdir")).unwrap();
    std::fs::write(
        host.join("manifest.toml"),
        manifest("linked", "", "[\"/bin/sh\"]"),
    )
    .unwrap();
    std::fs::write(
        host.join("berthdir/manifest.toml"),
        manifest("linkdir", "", "[\"/bin/sh\"]"),
    )
    .unwrap();
    let (h1, h2) = (host.clone(), host.clone());
    let link_manifest = move |src: &Path| {
        std::fs::remove_file(src.join(".berth/manifest.toml")).unwrap();
        std::os::unix::fs::symlink(h1.join("manifest.toml"), src.join(".berth/manifest.toml"))
            .unwrap();
    };
    let link_dir = move |src: &Path| {
        std::fs::remove_dir_all(src.join(".berth")).unwrap();
        std::os::unix::fs::symlink(h2.join("berthdir"), src.join(".berth")).unwrap();
    };
    let fifo = |src: &Path| {
        let m = src.join(".berth/manifest.toml");
        std::fs::remove_file(&m).unwrap();
        let st = Command::new("mkfifo").arg(&m).status().unwrap();
        assert!(st.success(), "mkfifo");
    };
    let link_proc = |src: &Path| {
        std::fs::remove_dir(src.join("proc")).unwrap();
        std::os::unix::fs::symlink("/proc", src.join("proc")).unwrap();
    };
    // Comments compress to nothing: a small image, a huge manifest.
    let huge = manifest("huge", "", "[\"/bin/sh\"]") + &"# padding padding\n".repeat(256 * 1024);
    sb.start_daemon();
    add_hand_made(
        &sb,
        &[
            ("linked", String::new(), true, &link_manifest),
            ("linkdir", String::new(), true, &link_dir),
            ("piped", String::new(), true, &fifo),
            ("huge", huge, true, &no_tweak),
            (
                "symproc",
                manifest("symproc", "", "[\"/bin/sh\"]"),
                true,
                &link_proc,
            ),
        ],
    );
    let before = snapshot(&sb);

    // The manifest is read from the image, never through a link into the host.
    refused_in_time(
        &sb,
        &["install", "linked"],
        &["linked@1", ".berth/manifest.toml", "symlink"],
    );
    assert_intact(&sb, &before, "manifest linked to a host file");
    refused_in_time(
        &sb,
        &["install", "linkdir"],
        &["linkdir@1", ".berth", "symlink"],
    );
    assert_intact(&sb, &before, ".berth linked to a host directory");
    // A FIFO would block the reader (and with it every other operation) for ever.
    refused_in_time(
        &sb,
        &["install", "piped"],
        &["piped@1", ".berth/manifest.toml", "FIFO"],
    );
    assert_intact(&sb, &before, "manifest is a FIFO");
    // The daemon reads a manifest into memory: a bounded amount.
    refused_in_time(
        &sb,
        &["install", "huge"],
        &["huge@1", ".berth/manifest.toml", "larger than"],
    );
    assert_intact(&sb, &before, "huge manifest");
    // A mount point must be a directory of the image, not a link to the host's.
    refused_in_time(
        &sb,
        &["install", "symproc"],
        &["symproc@1", "mount point /proc", "berth pack"],
    );
    assert_intact(&sb, &before, "mount point linked to the host");
    assert!(store_images(&sb).is_empty(), "{:?}", store_images(&sb));

    good_op_works(&sb, "good");
}

/// Unmounts the tmpfs a test put under the sandbox, even when the test fails.
struct TmpfsGuard(PathBuf);

impl Drop for TmpfsGuard {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn an_image_the_store_cannot_hold_is_refused_before_it_is_fetched_and_leaves_nothing() {
    let mut sb = Sandbox::new("full");
    sb.pack(&service("small"));
    let noise = {
        let mut b = vec![0u8; 4 << 20];
        std::fs::File::open("/dev/urandom")
            .unwrap()
            .read_exact(&mut b)
            .unwrap();
        b
    };
    let big = sb.pack(&service("big").file("noise.bin", &noise));
    assert!(std::fs::metadata(&big).unwrap().len() > 4 << 20);
    sb.build_repo();
    // The state dir (and so the store) on a 3 MiB file system, before the daemon uses it.
    std::fs::create_dir_all(sb.state_dir()).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=3M,mode=0755", "tmpfs"])
        .arg(sb.state_dir())
        .status()
        .unwrap();
    assert!(st.success(), "mount tmpfs");
    let _guard = TmpfsGuard(sb.state_dir());
    // A reserve for berth's own state that leaves room for small (the default, 4M, would
    // not on a 3 MiB file system).
    sb.write_config("[upgrade]\nreserve = \"256K\"\n");
    sb.start_daemon();
    sb.ok(&["update"]);
    let before = snapshot(&sb);

    // Refused before anything is fetched: what it needs, what there is.
    let (code, err) = sb.fail(&["install", "big"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no room for big@1: space required 4.")
            && err.contains("(and 0.3 MiB (262144 B) kept for berth's own state")
            && err.contains(", available ")
            && err.contains("nothing was changed (free space with berth gc"),
        "should say what big needs and what there is: {err}"
    );
    assert!(err.contains("berth gc"), "should say what to do: {err}");
    assert_intact(&sb, &before, "full store");
    assert!(store_images(&sb).is_empty(), "{:?}", store_images(&sb));

    good_op_works(&sb, "small");
}

// ---------------------------------------------------------------------------------------
// Removal

#[test]
fn removing_a_needed_package_is_refused_and_purge_deletes_data() {
    let mut sb = Sandbox::new("rmdeps");
    sb.pack(&service("lib"));
    sb.pack(&service("app").package_key("depends = [\"lib\"]"));
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "app"]);
    for n in ["lib", "app"] {
        sb.ok(&["start", n]);
        sb.wait_log(n, "up");
        sb.ok(&["stop", n]);
        std::fs::write(sb.state_dir().join("data").join(n).join("keep"), n).unwrap();
    }
    let before = snapshot(&sb);

    refused(&sb, &["remove", "lib"], &["lib", "needed by app"]);
    refused(
        &sb,
        &["remove", "--purge", "lib"],
        &["lib", "needed by app"],
    );
    assert_intact(&sb, &before, "remove of a needed package");
    assert!(sb.state_dir().join("data/lib/keep").exists());

    // Plain remove keeps /data (a reinstall finds it), --purge deletes it.
    sb.ok(&["remove", "app"]);
    assert!(sb.state_dir().join("data/app/keep").exists(), "data lost");
    sb.ok(&["remove", "--purge", "lib"]);
    assert!(!sb.state_dir().join("data/lib").exists(), "not purged");
    assert!(sb.json(&["list", "--installed"])["installed"]
        .as_array()
        .unwrap()
        .is_empty());
    sb.ok(&["install", "app"]);
    sb.ok(&["start", "app"]);
    sb.wait_log("app", "up");
    sb.ok(&["stop", "app"]);
    assert_eq!(
        std::fs::read_to_string(sb.state_dir().join("data/app/keep")).unwrap(),
        "app"
    );
}

// ---------------------------------------------------------------------------------------
// Crashes: SIGKILL in the middle of an install

/// After a crash and a restart: the installed set is none of `requested` or all of them (with
/// what they need), never broken. Returns the installed names.
fn assert_consistent_after_crash(sb: &Sandbox, requested: &[&str], what: &str) -> Vec<String> {
    let v = sb.json(&["list", "--installed"]);
    let installed: Vec<String> = v["installed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    let none = installed.is_empty();
    let all = requested.iter().all(|r| installed.iter().any(|i| i == r))
        && installed.len() == requested.len();
    assert!(
        none || all,
        "{what}: installed {installed:?}, expected none or all of {requested:?}"
    );
    for p in v["installed"].as_array().unwrap() {
        let sha = p["sha256"].as_str().unwrap();
        let image = sb.state_dir().join("store").join(format!("{sha}.sqfs"));
        assert!(image.exists(), "{what}: {p} has no image in the store");
        assert_eq!(
            sha256_of(&image),
            sha,
            "{what}: store image of {} is damaged",
            p["name"]
        );
    }
    assert!(
        stray_partials(sb).is_empty(),
        "{what}: partial downloads left that resume nothing: {:?}",
        stray_partials(sb)
    );
    assert!(
        berth_mounts(sb).is_empty(),
        "{what}: left mounted: {:?}",
        berth_mounts(sb)
    );
    for n in &installed {
        sb.ok(&["start", n]);
        sb.wait_log(n, "up");
        sb.ok(&["stop", n]);
    }
    installed
}

/// Back to nothing installed and an empty store, for the next round.
fn reset(sb: &Sandbox, requested: &[&str]) {
    let mut args = vec!["remove", "--purge"];
    args.extend_from_slice(requested);
    sb.ok(&args);
    sb.ok(&["gc"]);
    assert!(store_images(sb).is_empty(), "{:?}", store_images(sb));
}

/// Waits for `child` (a CLI call whose daemon was killed) to end.
fn wait_cli(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what}: the CLI hangs after the daemon died");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// For each (fault point, whether the state is committed there): a daemon that kills itself
/// there during `berth install NAME`, a restart, and the checks; `expect` is what NAME brings.
fn crash_at_points(sb: &mut Sandbox, name: &str, expect: &[&str], points: &[(&str, bool)]) {
    for (round, (point, commits)) in points.iter().enumerate() {
        let what = format!("SIGKILL at {point} installing {name}");
        sb.start_daemon_env(&[("BERTH_FAULT", point)]);
        let args = ["install", name];
        let out = sb.berth(&args);
        assert!(
            !out.status.success(),
            "{what}: install succeeded, the fault point was never reached: {}",
            stdout(&out)
        );
        assert!(
            sb.wait_daemon_exit(Duration::from_secs(10)),
            "{what}: the daemon did not die"
        );
        // It died by the injected fault, there, and not by anything else.
        let log = sb.daemon_log_text();
        let kills: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("fault injection: SIGKILL at"))
            .collect();
        let (base_point, nth) = point.split_once(':').unwrap_or((point, "1"));
        assert!(
            kills.len() == round + 1 && kills[round].ends_with(base_point),
            "{what}: fault injections logged: {kills:?}"
        );
        // What the dead daemon left: before the rename into the store, a partial download;
        // at a second hit, the first package is already stored.
        if matches!(base_point, "install.fetched" | "install.verified") {
            assert_eq!(sb.partial_downloads().len(), 1, "{what}");
        }
        let stored = store_images(sb).len();
        if nth == "2" {
            assert!(stored >= 1, "{what}: first package not stored");
        } else if matches!(base_point, "install.fetched" | "install.verified") {
            assert_eq!(stored, 0, "{what}");
        }
        sb.start_daemon();
        let installed = assert_consistent_after_crash(sb, expect, &what);
        // Before the state is committed the crash leaves the old state, after it the new one.
        assert_eq!(
            !installed.is_empty(),
            *commits,
            "{what}: installed {installed:?}"
        );
        sb.ok(&args);
        assert_consistent_after_crash(sb, expect, &format!("{what}, installed again"));
        reset(sb, expect);
        sb.kill_daemon(15);
    }
}

#[test]
fn sigkill_at_each_install_step_leaves_old_or_new_state() {
    let mut sb = Sandbox::new("crash1");
    // Every SIGKILL here is a daemon start that never confirms: this test is about the
    // state, not safe mode (safe_mode.rs), so the boot counter may count far.
    sb.write_config("[boot]\nmax_failed = 100\n");
    sb.pack(&service("solo"));
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.kill_daemon(15);
    crash_at_points(
        &mut sb,
        "solo",
        &["solo"],
        &[
            ("install.fetched", false),
            ("install.verified", false),
            ("install.stored", false),
            ("install.before-commit", false),
            ("install.committed", true),
        ],
    );
}

#[test]
fn sigkill_at_each_step_of_a_two_package_install_never_splits_them() {
    let mut sb = Sandbox::new("crash2");
    // Every SIGKILL here is a daemon start that never confirms: this test is about the
    // state, not safe mode (safe_mode.rs), so the boot counter may count far.
    sb.write_config("[boot]\nmax_failed = 100\n");
    sb.pack(&service("base"));
    sb.pack(&service("top").package_key("depends = [\"base\"]"));
    sb.build_repo();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.kill_daemon(15);
    // base is fetched first (:1), then top (:2); the state is committed once, for both.
    crash_at_points(
        &mut sb,
        "top",
        &["top", "base"],
        &[
            ("install.fetched:1", false),
            ("install.fetched:2", false),
            ("install.verified:1", false),
            ("install.verified:2", false),
            ("install.stored:1", false),
            ("install.stored:2", false),
            ("install.before-commit:1", false),
            ("install.committed:1", true),
        ],
    );
}

#[test]
fn sigkill_at_arbitrary_moments_of_a_slow_install_leaves_old_or_new_state() {
    let mut sb = Sandbox::new("crashtime");
    // Every SIGKILL here is a daemon start that never confirms: this test is about the
    // state, not safe mode (safe_mode.rs), so the boot counter may count far.
    sb.write_config("[boot]\nmax_failed = 100\n");
    sb.pack(&service("base"));
    sb.pack(&service("top").package_key("depends = [\"base\"]"));
    sb.build_repo();
    sb.start_daemon();
    let server = RepoServer::start(&sb.repo, SLOW);
    use_repository(&mut sb, &server.url());
    let requested = ["top", "base"];

    // How long a whole install takes here, to spread the kills over it.
    let t0 = Instant::now();
    sb.ok(&["install", "top"]);
    let whole = t0.elapsed();
    assert_consistent_after_crash(&sb, &requested, "no crash");
    reset(&sb, &requested);

    let mut outcomes = Vec::new();
    let mut killed_mid_download = false;
    for frac in [0.02, 0.15, 0.3, 0.45, 0.6, 0.75, 0.9, 1.0] {
        let delay = whole.mul_f64(frac);
        let what = format!(
            "SIGKILL {} ms into a {} ms install",
            delay.as_millis(),
            whole.as_millis()
        );
        let mut child = sb
            .cmd(&["install", "top"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        sb.kill_daemon(9);
        wait_cli(&mut child, &what);
        // Where the kill landed, seen from what it left (before a new daemon cleans up).
        let partial = sb.partial_downloads().len();
        let stored = store_images(&sb).len();
        sb.start_daemon();
        let installed = assert_consistent_after_crash(&sb, &requested, &what);
        outcomes.push(format!(
            "{} ms: {partial} partial, {stored} stored, {} installed",
            delay.as_millis(),
            installed.len()
        ));
        killed_mid_download |= partial > 0;
        sb.ok(&["install", "top"]);
        assert_consistent_after_crash(&sb, &requested, &format!("{what}, installed again"));
        reset(&sb, &requested);
    }
    eprintln!(
        "a whole install took {} ms; after each kill: {outcomes:#?}",
        whole.as_millis()
    );
    // The download dominates an install from the slow server, so some kills must land in it.
    assert!(
        killed_mid_download,
        "no kill landed in a download: {outcomes:#?}"
    );
}
