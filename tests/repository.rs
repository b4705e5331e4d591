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

/// A real static server (busybox httpd, which answers ETags with 304 and ranges with 206) on
/// loopback, behind a relay that cuts the first download of an image after `cut` bytes.
struct Served {
    _httpd: Httpd,
    port: u16,
    relay: u16,
}

fn serve_repo(dir: &Path, cut: usize) -> Served {
    let httpd = busybox_httpd(dir);
    let port = httpd.port;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let relay = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        let mut cut_done = false;
        for client in listener.incoming().flatten() {
            let mut client = client;
            let mut up = match std::net::TcpStream::connect(("127.0.0.1", port)) {
                Ok(u) => u,
                Err(_) => continue,
            };
            // The request head, passed on whole.
            let head = read_request_head(&mut client);
            let image = String::from_utf8_lossy(&head).contains(".sqfs");
            let _ = up.write_all(&head);
            let mut budget = if image && !cut_done {
                cut_done = true;
                cut
            } else {
                usize::MAX
            };
            let mut buf = [0u8; 16384];
            loop {
                let n = match up.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n.min(budget),
                };
                if client.write_all(&buf[..n]).is_err() {
                    break;
                }
                budget -= n;
                if budget == 0 {
                    break;
                }
            }
            // Dropping both ends mid-body is the failure under test.
        }
    });
    Served {
        _httpd: httpd,
        port,
        relay,
    }
}

/// Sets `repository` (and `mirrors`, and `repository_ca_file` for https://) in the sandbox's
/// configuration.
fn set_sources(sb: &Sandbox, repository: &str, mirrors: &[String]) {
    let text = std::fs::read_to_string(&sb.config).unwrap();
    let rest: String = text
        .lines()
        .filter(|l| {
            !l.starts_with("repository =")
                && !l.starts_with("mirrors =")
                && !l.starts_with("repository_ca_file =")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let list: Vec<String> = mirrors.iter().map(|m| format!("\"{m}\"")).collect();
    let ca = if repository.starts_with("https://") {
        format!("repository_ca_file = \"{}/pki/ca.pem\"\n", sb.dir.display())
    } else {
        String::new()
    };
    std::fs::write(
        &sb.config,
        format!(
            "repository = \"{repository}\"\nmirrors = [{}]\n{ca}{rest}",
            list.join(", ")
        ),
    )
    .unwrap();
}

/// The URL of a loopback server on `port`: itself, or a TLS front for it (kept in `fronts`).
fn source(tls: Option<&Path>, port: u16, fronts: &mut Vec<TlsFront>) -> String {
    match tls {
        None => format!("http://127.0.0.1:{port}"),
        Some(pki) => {
            let front = TlsFront::start(port, pki);
            let url = format!("https://127.0.0.1:{}", front.port);
            fronts.push(front);
            url
        }
    }
}

/// A fleet's repository over plain HTTP: an index that did not change is not sent again (304
/// to If-None-Match), a download cut in the middle resumes from the bytes received (Range)
/// instead of starting over, and a source that cannot be reached is passed over for the next
/// mirror; every copy is checked against the signed index as always.
#[test]
fn unchanged_indexes_cut_downloads_and_dead_mirrors() {
    mirrors_and_resumes(false);
}

/// The same over https:// (each server behind a TLS front, the repository's own CA).
#[test]
fn unchanged_indexes_cut_downloads_and_dead_mirrors_over_https() {
    mirrors_and_resumes(true);
}

fn mirrors_and_resumes(https: bool) {
    let mut sb = Sandbox::new(if https { "mirrors-tls" } else { "mirrors" });
    let pki = sb.dir.join("pki");
    if https {
        loopback_pki(&pki);
    }
    let tls = https.then_some(pki.as_path());
    let mut fronts = Vec::new();
    // An image of about 2 MB that does not compress: random bytes.
    let noise = noise(2 << 20, 0x9e37_79b9_7f4a_7c15);
    sb.add(&service("big").file("noise.bin", &noise));
    let image = std::fs::metadata(sb.package_file("big", "1"))
        .unwrap()
        .len();
    let served = serve_repo(&sb.repo, (image / 2) as usize);
    let scheme = if https { "https" } else { "http" };
    let dead = format!("{scheme}://127.0.0.1:{}", free_port());
    let relay = source(tls, served.relay, &mut fronts);
    let direct = source(tls, served.port, &mut fronts);

    // The repository cannot be reached: its mirror serves the index.
    set_sources(&sb, &dead, std::slice::from_ref(&relay));
    sb.start_daemon();
    let v = sb.json(&["update"]);
    assert_eq!(v["repository"], relay.as_str(), "{v}");
    assert_eq!(v["unchanged"], false);
    // Nothing changed on the server: 304 for both files, the cached index stays in use.
    let v = sb.json(&["update"]);
    assert_eq!(v["unchanged"], true, "{v}");
    assert_eq!(v["packages"], 1);

    // Only the relay: its first image download is cut half way; the install fails, keeping
    // what it received, and the next resumes from there.
    set_sources(&sb, &relay, &[]);
    sb.kill_daemon(15);
    sb.start_daemon();
    let (code, err) = sb.fail(&["install", "big"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("bytes kept: the next install resumes from there"),
        "{err}"
    );
    let partial = sb.state_dir().join("store/.tmp");
    let held: u64 = std::fs::read_dir(&partial)
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(held > 0 && held < image, "held {held} of {image}");
    // Kept across a daemon restart too.
    sb.kill_daemon(15);
    sb.start_daemon();
    sb.ok(&["install", "big"]);
    let log = std::fs::read_to_string(&sb.daemon_log).unwrap();
    assert!(
        log.contains(&format!("big@1: resumed from byte {held} of {image}")),
        "{log}"
    );
    sb.ok(&["start", "big"]);
    sb.wait_log("big", "up");
    sb.ok(&["stop", "big"]);
    sb.ok(&["remove", "big"]);

    // A cut download with a mirror behind: the mirror completes it at once.
    set_sources(&sb, &relay, std::slice::from_ref(&direct));
    let served2 = serve_repo(&sb.repo, (image / 3) as usize);
    let relay2 = source(tls, served2.relay, &mut fronts);
    set_sources(&sb, &relay2, std::slice::from_ref(&direct));
    sb.kill_daemon(15);
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["gc"]);
    sb.ok(&["install", "big"]);
    let log = std::fs::read_to_string(&sb.daemon_log).unwrap();
    assert!(log.matches("resumed from byte").count() >= 2, "{log}");
    drop(served2);
    drop(served);
}

/// An HTTP proxy on loopback that tunnels CONNECT requests and records each request line.
fn connect_proxy() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut reader = std::io::BufReader::new(client.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap_or(0);
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                }
                log.lock().unwrap().push(line.trim().to_string());
                let Some(target) = line
                    .strip_prefix("CONNECT ")
                    .and_then(|r| r.split(' ').next())
                else {
                    let _ = (&client).write_all(b"HTTP/1.1 405 Only CONNECT\r\n\r\n");
                    return;
                };
                let Ok(up) = std::net::TcpStream::connect(target) else {
                    let _ = (&client).write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n");
                    return;
                };
                let _ = (&client).write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
                let (mut c2, mut u2) = (client.try_clone().unwrap(), up.try_clone().unwrap());
                let t = std::thread::spawn(move || {
                    let _ = std::io::copy(&mut u2, &mut c2);
                    let _ = c2.shutdown(std::net::Shutdown::Write);
                });
                let (mut c, mut u) = (client, up);
                let _ = std::io::copy(&mut c, &mut u);
                let _ = u.shutdown(std::net::Shutdown::Write);
                let _ = t.join();
            });
        }
    });
    (port, seen)
}

/// Rewrites the sandbox's top-level source lines (`repository`, `repository_ca_file`) and its
/// `[network]` table.
fn set_https_sources(sb: &Sandbox, top: &str, network: &str) {
    sb.write_config(network);
    let text = std::fs::read_to_string(&sb.config).unwrap();
    let rest: String = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
    std::fs::write(&sb.config, format!("{top}\n{rest}")).unwrap();
}

/// A repository on https:// (busybox httpd behind a TLS front, a CA of the test's own): with
/// `repository_ca_file` the index and the image come over TLS and the package runs; the
/// system's store (no CA file) or another CA is refused with the certificate's reason, and
/// nothing changes; with `[network] proxy` the same repository is reached through an HTTP
/// proxy's CONNECT tunnel.
#[test]
fn an_https_repository_with_its_own_ca_and_through_a_proxy() {
    let mut sb = Sandbox::new("https-repo");
    sb.add(&service("tls"));
    let pki = sb.dir.join("pki");
    loopback_pki(&pki);
    let httpd = busybox_httpd(&sb.repo);
    let server = TlsFront::start(httpd.port, &pki);
    let url = format!("https://127.0.0.1:{}", server.port);
    let ca = |name: &str| format!("repository_ca_file = \"{}/{name}.pem\"", pki.display());

    // No CA file: the system's store does not know the test's CA.
    set_https_sources(&sb, &format!("repository = \"{url}\""), "");
    sb.start_daemon();
    let (code, err) = sb.fail(&["update"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("TLS: the server's certificate failed verification"),
        "{err}"
    );
    assert!(sb.listed("available").is_empty());
    // Another CA: refused the same way.
    set_https_sources(&sb, &format!("repository = \"{url}\"\n{}", ca("other")), "");
    sb.kill_daemon(15);
    sb.start_daemon();
    let (_, err) = sb.fail(&["update"]);
    assert!(
        err.contains("unable to get local issuer certificate"),
        "{err}"
    );

    // Its own CA: the index, then the image, over TLS.
    set_https_sources(&sb, &format!("repository = \"{url}\"\n{}", ca("ca")), "");
    sb.kill_daemon(15);
    sb.start_daemon();
    let v = sb.json(&["update"]);
    assert_eq!(v["repository"], url.as_str(), "{v}");
    sb.ok(&["install", "tls"]);
    sb.ok(&["start", "tls"]);
    sb.wait_log("tls", "up");
    sb.ok(&["stop", "tls"]);
    sb.ok(&["remove", "tls"]);

    // Through a proxy (berth.toml's, whatever the environment says).
    let (port, seen) = connect_proxy();
    set_https_sources(
        &sb,
        &format!("repository = \"{url}\"\n{}", ca("ca")),
        &format!("[network]\nproxy = \"http://127.0.0.1:{port}\"\n"),
    );
    sb.kill_daemon(15);
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "tls"]);
    let lines = seen.lock().unwrap().clone();
    let tunnel = format!("CONNECT 127.0.0.1:{} HTTP/1.1", server.port);
    assert!(lines.len() >= 2, "{lines:?}");
    assert!(lines.iter().all(|l| *l == tunnel), "{lines:?}");
    sb.ok(&["remove", "tls"]);
    drop(server);
}
