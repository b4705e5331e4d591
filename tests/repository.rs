//! The repository as an attacker or a full disk would have it: an older index replayed after
//! the key that signed the cached one was removed, an index that has expired (a freeze), a
//! switch to another repository, and `berth update` on a full state file system.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn index_path(sb: &Sandbox) -> PathBuf {
    sb.repo.join("index.json")
}

fn read_index(sb: &Sandbox) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(index_path(sb)).unwrap()).unwrap()
}

/// Writes `index` as the repository's index.json and signs it with signify-openbsd and `key`.
fn publish(sb: &Sandbox, index: &serde_json::Value, key: &Path) {
    std::fs::write(
        index_path(sb),
        serde_json::to_string_pretty(index).unwrap() + "\n",
    )
    .unwrap();
    signify_sign(sb, key);
}

fn service(name: &str) -> Pkg {
    Pkg::script(name, "1", "echo up; exec sleep 600")
}

fn serial_record(sb: &Sandbox) -> Option<serde_json::Value> {
    std::fs::read(sb.state_dir().join("repository.serial"))
        .ok()
        .map(|b| serde_json::from_slice(&b).unwrap())
}

/// The key that signed the cached index is removed from the device; an older index signed by
/// the key now trusted must still be refused as a rollback (the newest accepted serial is kept
/// on its own), until the operator asks for the switch with --reset-serial.
#[test]
fn a_rollback_is_refused_even_after_the_old_key_is_gone_and_reset_serial_allows_a_switch() {
    let mut sb = Sandbox::new("repo-rollback");
    sb.pack(&service("good"));
    sb.pack(&service("newer"));
    sb.build_repo();
    sb.start_daemon();
    let v = sb.json(&["update"]);
    let serial = v["serial"].as_u64().unwrap();
    assert_eq!(serial_record(&sb).unwrap()["serial"], serial);

    // Key B replaces key A on the device.
    let b = sb.dir.join("b");
    sb.ok(&["key", "generate", "-o", b.to_str().unwrap()]);
    std::fs::remove_file(sb.dir.join("keys/vendor.pub")).unwrap();
    std::fs::copy(b.with_extension("pub"), sb.dir.join("keys/b.pub")).unwrap();
    // An older index (one package fewer, a lower serial), validly signed by B.
    let mut old = read_index(&sb);
    old["serial"] = serde_json::json!(serial - 100);
    old["packages"]
        .as_array_mut()
        .unwrap()
        .retain(|p| p["name"] == "good");
    publish(&sb, &old, &b.with_extension("sec"));
    let (code, err) = sb.fail(&["update"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("rollback")
            && err.contains(&format!("older than {serial}"))
            && err.contains("--reset-serial"),
        "{err}"
    );
    assert_eq!(serial_record(&sb).unwrap()["serial"], serial, "floor kept");

    // The operator moves the device to that repository on purpose.
    let v = sb.json(&["update", "--reset-serial"]);
    assert_eq!(v["serial"], serial - 100, "{v}");
    assert_eq!(sb.listed("available"), ["good"]);
    assert_eq!(serial_record(&sb).unwrap()["serial"], serial - 100);
    // From there on, serials only grow again.
    old["serial"] = serde_json::json!(serial - 200);
    publish(&sb, &old, &b.with_extension("sec"));
    let (_, err) = sb.fail(&["update"]);
    assert!(err.contains("rollback"), "{err}");
    let (code, err) = sb.fail(&["update", "--reset-serial", "extra"]);
    assert_eq!(code, 2, "{err}");
}

/// An index past its `expires` is refused at update; one that expires after it was fetched
/// is refused at install; `repo build --valid-for` sets the expiry; `berth status` shows the
/// index's serial, age and expiry, and warns when it is expired or older than index_max_age.
#[test]
fn an_expired_index_is_refused_and_a_stale_one_is_warned_about() {
    let mut sb = Sandbox::new("repo-expiry");
    sb.pack(&service("good"));
    sb.build_repo();
    sb.write_config("");
    let text = std::fs::read_to_string(&sb.config).unwrap();
    std::fs::write(&sb.config, format!("index_max_age = \"7d\"\n{text}")).unwrap();
    sb.start_daemon();

    // repo build --valid-for: the index carries its expiry; bad durations are usage errors.
    let out = sb.berth(&[
        "--json",
        "repo",
        "build",
        sb.repo.to_str().unwrap(),
        "--key",
        sb.key.to_str().unwrap(),
        "--valid-for",
        "30d",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let expires = read_index(&sb)["expires"].as_u64().unwrap();
    assert!((now() + 30 * 86_400).abs_diff(expires) < 60, "{expires}");
    for bad in ["30", "0d", "1w", "-1d"] {
        let out = sb.berth(&[
            "repo",
            "build",
            sb.repo.to_str().unwrap(),
            "--key",
            sb.key.to_str().unwrap(),
            "--valid-for",
            bad,
        ]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "--valid-for {bad}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains("--valid-for"), "{}", stderr(&out));
    }
    let v = sb.json(&["update"]);
    assert_eq!(v["expires"], expires, "{v}");
    let st = sb.json(&["status"]);
    assert_eq!(st["repository"]["expires"], expires, "{st}");
    assert_eq!(st["repository"]["serial"], v["serial"], "{st}");
    assert!(st["repository"]["warning"].is_null(), "{st}");

    // Expired before it is fetched: refused, and the cached one stays.
    let mut idx = read_index(&sb);
    idx["serial"] = serde_json::json!(v["serial"].as_u64().unwrap() + 1);
    idx["expires"] = serde_json::json!(now() - 10);
    publish(&sb, &idx, &sb.key);
    let (code, err) = sb.fail(&["update"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("expired at") && err.contains("re-sign"),
        "{err}"
    );
    assert_eq!(sb.json(&["status"])["repository"]["serial"], v["serial"]);

    // Valid when fetched, expired by the time of the install.
    idx["serial"] = serde_json::json!(v["serial"].as_u64().unwrap() + 2);
    idx["expires"] = serde_json::json!(now() + 2);
    publish(&sb, &idx, &sb.key);
    sb.ok(&["update"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let err = loop {
        let out = sb.berth(&["install", "good"]);
        if !out.status.success() {
            break stderr(&out);
        }
        assert!(
            Instant::now() < deadline,
            "install kept working after expiry"
        );
        sb.ok(&["remove", "good"]);
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        err.contains("expired at") && err.contains("berth update"),
        "{err}"
    );
    let st = sb.ok(&["status"]);
    assert!(
        st.contains("warning: the cached repository index expired"),
        "{st}"
    );

    // Fetched ten days ago (the cache's fetched_at is not signed: set back by hand) with
    // index_max_age = 7d: status warns, in the table and in JSON.
    idx["serial"] = serde_json::json!(v["serial"].as_u64().unwrap() + 3);
    idx["expires"] = serde_json::json!(now() + 86_400 * 365);
    publish(&sb, &idx, &sb.key);
    sb.ok(&["update"]);
    assert!(sb.json(&["status"])["repository"]["warning"].is_null());
    let cache_path = sb.state_dir().join("repository.json");
    let mut cache: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cache_path).unwrap()).unwrap();
    cache["fetched_at"] = serde_json::json!(now() - 10 * 86_400);
    std::fs::write(&cache_path, cache.to_string()).unwrap();
    let st = sb.json(&["status"]);
    let w = st["repository"]["warning"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        w.contains("fetched 10 days ago") && w.contains("index_max_age 7 days"),
        "{st}"
    );
    assert!(sb
        .ok(&["status"])
        .contains("warning: the repository index was fetched 10 days ago"));
}

struct TmpfsGuard(PathBuf);
impl Drop for TmpfsGuard {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the file system of `dir` until ENOSPC, then frees `leave` bytes.
fn fill(dir: &Path, leave: u64) -> PathBuf {
    use std::io::Write;
    let f = dir.join("filler");
    let mut file = std::fs::File::create(&f).unwrap();
    let chunk = vec![0xa5u8; 4096];
    let mut n = 0u64;
    while file.write_all(&chunk).is_ok() {
        n += 4096;
    }
    drop(file);
    let keep = n.saturating_sub(leave);
    let file = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
    file.set_len(keep).unwrap();
    f
}

/// `berth update` with the state file system full answers the clean no-space error (507,
/// exit 1), never "internal", and changes nothing: the cached index and the serial floor stay
/// and are used; once there is room the update goes through. Twice: full to the last byte,
/// then with room for the small serial record but not for the index.
#[test]
fn update_on_a_full_disk_is_a_clean_error_and_changes_nothing() {
    let mut sb = Sandbox::new("repo-full");
    sb.pack(&service("good"));
    sb.build_repo();
    std::fs::create_dir_all(sb.state_dir()).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2M,mode=0700", "tmpfs"])
        .arg(sb.state_dir())
        .status()
        .unwrap();
    assert!(st.success(), "mount tmpfs");
    let _guard = TmpfsGuard(sb.state_dir());
    sb.start_daemon();
    sb.ok(&["update"]);
    // A larger index (more packages, a higher serial) is published.
    for i in 0..20 {
        sb.pack(&service(&format!("more{i}")));
    }
    sb.build_repo();
    let cache_path = sb.state_dir().join("repository.json");
    for leave in [0u64, 4096] {
        let cache = std::fs::read(&cache_path).unwrap();
        let record = serial_record(&sb);
        let before = sb.listed("available");
        let filler = fill(&sb.state_dir(), leave);
        let out = sb.berth(&["--json", "update"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(out.status.code(), Some(1), "leave {leave}: {v}");
        assert_eq!(v["status"], 507, "leave {leave}: {v}");
        assert_eq!(v["code"], "no_space", "leave {leave}: {v}");
        assert!(
            v["error"].as_str().unwrap().contains("file system full"),
            "leave {leave}: {v}"
        );
        assert_eq!(
            std::fs::read(&cache_path).unwrap(),
            cache,
            "leave {leave}: cache"
        );
        assert_eq!(serial_record(&sb), record, "leave {leave}: serial floor");
        assert_eq!(
            sb.listed("available"),
            before,
            "leave {leave}: the old index in use"
        );
        std::fs::remove_file(filler).unwrap();
    }
    sb.ok(&["update"]);
    assert_eq!(sb.listed("available").len(), 21);
}
