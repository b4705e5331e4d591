//! Delta images end to end (docs/repository.md, "Delta images"), as root with real LXC, a
//! real static server (busybox httpd on loopback) and zstd: `berth repo build --deltas-from`
//! publishes a signed delta; a device that holds the old image fetches the delta instead of
//! the image (counted on the wire), rebuilds the new image and checks it before use, and the
//! upgrade runs it; a delta altered after signing, and a zstd that fails, fall back to the
//! whole image, and the upgrade still succeeds; so does a device whose memory guard leaves
//! too little memory to decode one; a device without the old image never asks for the delta.

// An end-to-end scenario reads top to bottom: the 150-line limit of crates/ (clippy.toml)
// does not hold here.
#![allow(clippy::too_many_lines)]

mod common;

use common::*;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

const CONFIG: &str = "[upgrade]\ndeadline = \"10s\"\nsettle = \"200ms\"\n";

/// 2 MiB that do not compress, the same in every version: what a delta saves.
fn blob() -> Vec<u8> {
    noise(2 << 20, 0x2545_f491_4f6c_dd1d)
}

fn app(v: &str) -> Pkg {
    Pkg::script("app", v, &format!("echo up {v}\nexec sleep 600\n"))
        .file("lib/blob.bin", &blob())
        .file("etc/app.conf", format!("version = {v}\n").as_bytes())
        .table("[restart]\npolicy = \"never\"\n")
}

/// busybox httpd on loopback behind a relay that records each request's path and the
/// bytes of its answer.
struct Served {
    _httpd: Httpd,
    relay: u16,
    log: Arc<Mutex<Vec<(String, usize)>>>,
}

impl Served {
    /// Bytes answered to requests whose path contains `part`, since the last `take`.
    fn take(&self, part: &str) -> usize {
        let mut log = self.log.lock().unwrap();
        let n = log
            .iter()
            .filter(|(p, _)| p.contains(part))
            .map(|(_, n)| n)
            .sum();
        log.retain(|(p, _)| !p.contains(part));
        n
    }
}

fn serve(dir: &Path) -> Served {
    let httpd = busybox_httpd(dir);
    let port = httpd.port;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let relay = listener.local_addr().unwrap().port();
    let log = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&log);
    std::thread::spawn(move || {
        for mut client in listener.incoming().flatten() {
            let Ok(mut up) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
                continue;
            };
            let head = read_request_head(&mut client);
            let text = String::from_utf8_lossy(&head).into_owned();
            let path = text.split(' ').nth(1).unwrap_or("").to_string();
            let _ = up.write_all(&head);
            let mut buf = [0u8; 16384];
            let mut n = 0;
            loop {
                match up.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => {
                        if client.write_all(&buf[..k]).is_err() {
                            break;
                        }
                        n += k;
                    }
                }
            }
            record.lock().unwrap().push((path, n));
        }
    });
    Served {
        _httpd: httpd,
        relay,
        log,
    }
}

/// The repository offers `v` only; with `deltas_from`, deltas from that copy of it.
fn publish(sb: &Sandbox, v: &str, deltas_from: Option<&Path>) -> serde_json::Value {
    sb.offer_only(&app(v));
    let Some(old) = deltas_from else {
        return serde_json::Value::Null;
    };
    let out = Command::new(&sb.berth)
        .args(["--json", "repo", "build"])
        .arg(&sb.repo)
        .arg("--key")
        .arg(&sb.key)
        .arg("--deltas-from")
        .arg(old)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "repo build --deltas-from: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `POST /v1/upgrade` on the admin socket: the stream's events.
fn upgrade_stream(sb: &Sandbox) -> Vec<serde_json::Value> {
    let sock = sb.dir.join("run/admin.sock");
    let out = Command::new("curl")
        .args(["-sS", "--unix-socket"])
        .arg(&sock)
        .args(["-X", "POST", "-d", "{}", "http://berth/v1/upgrade"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// A copy of the repository as it is now (what `--deltas-from` reads next).
fn snapshot(sb: &Sandbox, name: &str) -> std::path::PathBuf {
    let to = sb.dir.join(name);
    let ok = Command::new("cp")
        .arg("-a")
        .arg(&sb.repo)
        .arg(&to)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    to
}

fn running(sb: &Sandbox, v: &str) {
    sb.wait_status("app", 20, &format!("app {v} running"), |c| {
        c["state"] == "running" && c["version"] == v
    });
}

#[test]
fn deltas_save_the_bytes_that_did_not_change_and_never_break_an_upgrade() {
    deltas(false);
}

/// The same with the repository on https:// (a TLS front, the repository's own CA).
#[test]
fn deltas_over_https() {
    deltas(true);
}

fn deltas(https: bool) {
    let mut sb = Sandbox::new(if https { "delta-tls" } else { "delta" });
    sb.write_config(CONFIG);
    publish(&sb, "1", None);
    let served = serve(&sb.repo);
    let pki = sb.dir.join("pki");
    let front = https.then(|| {
        loopback_pki(&pki);
        TlsFront::start(served.relay, &pki)
    });
    let repository = match &front {
        Some(f) => format!(
            "repository = \"https://127.0.0.1:{}\"\nrepository_ca_file = \"{}/ca.pem\"",
            f.port,
            pki.display()
        ),
        None => format!("repository = \"http://127.0.0.1:{}\"", served.relay),
    };
    let text: String = std::fs::read_to_string(&sb.config)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("repository ="))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&sb.config, format!("{repository}\n{text}")).unwrap();
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "app"]);
    sb.ok(&["start", "app"]);
    running(&sb, "1");
    let image1 = served.take(".sqfs");
    assert!(image1 > 2 << 20, "{image1}");

    // 2: one small file changed; the delta is published and signed.
    let old = snapshot(&sb, "repo-1");
    let report = publish(&sb, "2", Some(&old));
    let p = &report["packages"][0];
    let delta = &p["deltas"][0];
    let (delta_size, image_size) = (delta["size"].as_u64().unwrap(), p["size"].as_u64().unwrap());
    assert_eq!(delta["from_version"], "1", "{report}");
    assert!(
        delta_size * 20 < image_size,
        "delta {delta_size} of {image_size}: {report}"
    );
    let index = std::fs::read_to_string(sb.repo.join("index.json")).unwrap();
    assert!(
        index.contains("\"deltas\"") && index.contains("zstd-patch"),
        "{index}"
    );

    // The device holds 1: it fetches the delta, not the image, and runs 2. The admin API's
    // stream says so in its `fetched` event.
    sb.ok(&["update"]);
    let events = upgrade_stream(&sb);
    running(&sb, "2");
    let fetched = events
        .iter()
        .find(|e| e["event"] == "fetched")
        .unwrap_or_else(|| panic!("no fetched event: {events:?}"));
    assert_eq!(fetched["delta_from"], "1", "{fetched}");
    assert_eq!(fetched["bytes"].as_u64(), Some(delta_size), "{fetched}");
    assert_eq!(fetched["size"].as_u64(), Some(image_size), "{fetched}");
    let done = events.last().unwrap();
    assert_eq!(done["event"], "done", "{events:?}");
    assert_eq!(done["result"]["upgraded"][0]["to"], "2", "{done}");
    assert_eq!(served.take(".sqfs"), 0, "the image was fetched");
    let on_wire = served.take("/deltas/");
    assert!(
        on_wire as u64 >= delta_size && (on_wire as u64) < delta_size + 4096,
        "{on_wire} bytes for a delta of {delta_size}"
    );
    let log = sb.daemon_log_text();
    assert!(
        log.contains(&format!(
            "app@2: rebuilt from the delta from 1 ({delta_size} bytes instead of {image_size})"
        )),
        "{log}"
    );
    let sha2 = p["sha256"].as_str().unwrap();
    assert!(sb.state_dir().join(format!("store/{sha2}.sqfs")).exists());
    assert_eq!(sb.status_of("app")["image"], sha2);
    println!(
        "delta 1 -> 2: {on_wire} bytes on the wire for an image of {image_size} ({:.0}x fewer)",
        image_size as f64 / on_wire as f64
    );

    // 3: the delta is altered after it was signed. The device refuses it before decoding a
    // byte, fetches the whole image, and the upgrade goes on.
    let old = snapshot(&sb, "repo-2");
    let report = publish(&sb, "3", Some(&old));
    let file = sb
        .repo
        .join(report["packages"][0]["deltas"][0]["file"].as_str().unwrap());
    let mut bytes = std::fs::read(&file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    sb.ok(&["update"]);
    let out = sb.ok(&["upgrade"]);
    running(&sb, "3");
    assert!(out.contains("upgraded app 2 -> 3"), "{out}");
    assert!(served.take(".sqfs") as u64 >= image_size);
    let log = sb.daemon_log_text();
    assert!(
        log.contains("app@3: the delta from 2 is not used: delta sha256 is")
            && log.contains("the signed index says"),
        "{log}"
    );
    assert!(
        !std::fs::read_dir(sb.state_dir().join("store/.tmp"))
            .unwrap()
            .flatten()
            .any(|e| !e.file_name().to_string_lossy().ends_with(".part")
                || e.metadata().unwrap().len() > 0),
        "the refused delta was left behind"
    );

    // 4: a zstd that fails (on the daemon's PATH first): the whole image again.
    let old = snapshot(&sb, "repo-3");
    publish(&sb, "4", Some(&old));
    let bin = sb.dir.join("broken-bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(
        bin.join("zstd"),
        "#!/bin/sh\necho 'zstd: out of memory' >&2\nexit 1\n",
    )
    .unwrap();
    Command::new("chmod")
        .arg("755")
        .arg(bin.join("zstd"))
        .status()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    sb.kill_daemon(15);
    sb.start_daemon_env(&[("PATH", &path)]);
    sb.ok(&["update"]);
    sb.ok(&["upgrade"]);
    running(&sb, "4");
    assert!(served.take(".sqfs") as u64 >= image_size);
    let log = sb.daemon_log_text();
    assert!(
        log.contains("app@4: the delta from 3 is not used: zstd failed: zstd: out of memory"),
        "{log}"
    );

    // 5: the index lists a delta that no source serves: the whole image.
    sb.kill_daemon(15);
    sb.start_daemon();
    let old = snapshot(&sb, "repo-4");
    let report = publish(&sb, "5", Some(&old));
    let file = sb
        .repo
        .join(report["packages"][0]["deltas"][0]["file"].as_str().unwrap());
    std::fs::remove_file(&file).unwrap();
    sb.ok(&["update"]);
    let events = upgrade_stream(&sb);
    running(&sb, "5");
    let failed = events.iter().find(|e| e["event"] == "delta_failed");
    assert!(
        failed.is_some_and(
            |e| e["package"] == "app" && e["error"].as_str().unwrap_or("").contains("404")
        ),
        "{events:?}"
    );
    let fetched = events.iter().find(|e| e["event"] == "fetched").unwrap();
    assert!(fetched["delta_from"].is_null(), "{fetched}");
    assert!(served.take(".sqfs") as u64 >= image_size);

    // 6: a 32-bit zstd, as the MIPS and ARM devices have (Debian's mipsel zstd under
    // qemu-user, which scripts/test.sh prepares): the delta is used.
    match std::env::var_os("BERTH_ZSTD32") {
        Some(wrapper) => {
            let bin = sb.dir.join("zstd32-bin");
            std::fs::create_dir_all(&bin).unwrap();
            std::os::unix::fs::symlink(&wrapper, bin.join("zstd")).unwrap();
            let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
            let old = snapshot(&sb, "repo-5");
            publish(&sb, "6", Some(&old));
            sb.kill_daemon(15);
            sb.start_daemon_env(&[("PATH", &path)]);
            sb.ok(&["update"]);
            sb.ok(&["upgrade"]);
            running(&sb, "6");
            assert_eq!(served.take(".sqfs"), 0, "the 32-bit zstd did not rebuild the image");
            let log = sb.daemon_log_text();
            assert!(log.contains("app@6: rebuilt from the delta from 5"), "{log}");
            sb.kill_daemon(15);
            sb.start_daemon();
        }
        None => berth_sys::skip::record(
            "package qemu-user",
            "delta: no 32-bit zstd (BERTH_ZSTD32, made by scripts/test.sh from Debian's zstd:mipsel and qemu-user): deltas are not decoded as a MIPS device would",
        ),
    }

    // 7: the device at its memory guard's threshold (set above MemAvailable): decoding
    // would need memory the guard keeps for the device, so the delta is not even fetched;
    // the whole image is, streamed, and the upgrade completes. (app is stopped first: the
    // guard would kill it, this device's one container, as it should.)
    sb.ok(&["stop", "app"]);
    let old = snapshot(&sb, "repo-6");
    publish(&sb, "7", Some(&old));
    sb.kill_daemon(15);
    let config = std::fs::read_to_string(&sb.config).unwrap();
    let threshold = (mem_available() >> 10) + (256 << 10);
    std::fs::write(
        &sb.config,
        format!("{config}\n[guard]\nthreshold = \"{threshold}K\"\n"),
    )
    .unwrap();
    sb.start_daemon();
    served.take("/deltas/");
    sb.ok(&["update"]);
    let events = upgrade_stream(&sb);
    let failed = events.iter().find(|e| e["event"] == "delta_failed");
    assert!(
        failed.is_some_and(|e| e["error"]
            .as_str()
            .unwrap_or("")
            .contains("free above the memory guard's threshold")),
        "{events:?}"
    );
    assert_eq!(served.take("/deltas/"), 0, "the delta was fetched");
    assert!(served.take(".sqfs") as u64 >= image_size);
    let done = events.last().unwrap();
    assert_eq!(done["result"]["upgraded"][0]["to"], "7", "{events:?}");
    assert!(sb.ok(&["list"]).contains("7"));
    sb.kill_daemon(15);
    std::fs::write(&sb.config, config).unwrap();
    sb.start_daemon();

    // A device that does not hold the old image never asks for the delta.
    let old = snapshot(&sb, "repo-7");
    publish(&sb, "8", Some(&old));
    sb.ok(&["remove", "app"]);
    sb.ok(&["gc"]);
    served.take("/deltas/");
    sb.ok(&["update"]);
    sb.ok(&["install", "app"]);
    assert_eq!(
        served.take("/deltas/"),
        0,
        "a delta was fetched without its old image"
    );
    assert!(served.take(".sqfs") as u64 >= image_size);
}
