//! End to end, as root: the hardware watchdog, with a FIFO in the sandbox standing in for
//! /dev/watchdog. Keep-alives arrive while the daemon is healthy, stop while its supervisor
//! (and, separately, its admin loop) is stalled through the test hook, resume after; a clean
//! stop writes the magic close `V`; a SIGKILL leaves the device without one.

mod common;

use common::*;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Reads the FIFO on a thread, time-stamping every byte, until dropped.
struct Device {
    bytes: Arc<Mutex<Vec<(Instant, u8)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Device {
    fn open(path: &Path) -> Device {
        // Read-write: the open never waits for a writer, and the FIFO never reports an end
        // between two daemons.
        let mut f = File::options()
            .read(true)
            .write(true)
            .open(path)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        let bytes = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (b, s) = (Arc::clone(&bytes), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 256];
            while !s.load(Ordering::SeqCst) {
                let ready = berth_sys::process::poll(&[(f.as_raw_fd(), libc::POLLIN)], 50);
                if !matches!(ready, Ok(ref r) if r[0] != 0) {
                    continue;
                }
                let n = f.read(&mut buf).unwrap_or(0);
                let now = Instant::now();
                b.lock().unwrap().extend(buf[..n].iter().map(|x| (now, *x)));
            }
        });
        Device {
            bytes,
            stop,
            thread: Some(thread),
        }
    }

    /// The bytes written from `from` to `to`.
    fn between(&self, from: Instant, to: Instant) -> Vec<u8> {
        self.bytes
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|(_, b)| *b)
            .collect()
    }

    fn all(&self) -> Vec<u8> {
        self.bytes.lock().unwrap().iter().map(|(_, b)| *b).collect()
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One request to the admin socket; the status and body of the answer.
fn admin(sb: &Sandbox, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = std::os::unix::net::UnixStream::connect(sb.run_dir().join("admin.sock"))
        .expect("connect to the admin socket");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: berth\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

fn sleep_until(t: Instant) {
    measure_over(t.saturating_duration_since(Instant::now()));
}

fn fifo(sb: &Sandbox) -> PathBuf {
    let path = sb.dir.join("watchdog");
    let out = std::process::Command::new("mkfifo")
        .arg(&path)
        .output()
        .expect("mkfifo");
    assert!(out.status.success(), "mkfifo: {}", stderr(&out));
    path
}

/// Stalls `component` for 3 s (interval 200 ms, so stale after 600 ms) and checks the
/// keep-alives stop and come back.
fn stall_stops_keepalives(sb: &Sandbox, dev: &Device, component: &str) {
    let t0 = Instant::now();
    let (status, body) = admin(
        sb,
        "POST",
        "/v1/test/stall",
        &format!(r#"{{"component":"{component}","seconds":3}}"#),
    );
    assert_eq!(status, 200, "{body}");
    // The stall begins at the component's next heartbeat (≤ 200 ms), is seen once its
    // heartbeat is 600 ms old, and by the watchdog's next round (≤ 200 ms).
    sleep_until(t0 + Duration::from_millis(5000));
    let during = dev.between(
        t0 + Duration::from_millis(1200),
        t0 + Duration::from_millis(3000),
    );
    assert!(
        during.is_empty(),
        "{component} stalled, yet {} keep-alives arrived",
        during.len()
    );
    let after = dev.between(
        t0 + Duration::from_millis(3800),
        t0 + Duration::from_millis(5000),
    );
    assert!(
        after.len() >= 3,
        "no keep-alives after the {component} stall: {after:?}\n{}",
        sb.daemon_log_text()
    );
    let log = sb.daemon_log_text();
    assert!(
        log.contains(&format!("watchdog: stalled: {component} (silent")),
        "the log does not name {component}:\n{log}"
    );
}

#[test]
fn keepalives_only_while_healthy_magic_close_only_on_a_clean_stop() {
    let mut sb = Sandbox::new("wdog");
    let path = fifo(&sb);
    sb.write_config(&format!(
        "[watchdog]\ndevice = \"{}\"\ninterval = \"200ms\"\n",
        path.display()
    ));
    let dev = Device::open(&path);
    sb.start_daemon_env(&[("BERTH_TEST_HOOKS", "1")]);

    // Healthy: a keep-alive about every 200 ms, never a V.
    let t0 = Instant::now();
    sleep_until(t0 + Duration::from_millis(1500));
    let healthy = dev.between(t0, t0 + Duration::from_millis(1500));
    assert!(healthy.len() >= 4, "keep-alives: {healthy:?}");
    assert!(!healthy.contains(&b'V'), "{healthy:?}");

    stall_stops_keepalives(&sb, &dev, "supervisor");
    stall_stops_keepalives(&sb, &dev, "api");
    // The daemon still answers after both stalls.
    sb.ok(&["status"]);

    // A clean stop: the last byte written is the magic close.
    sb.stop_daemon();
    wait_until(
        "the magic close read from the device",
        Duration::from_secs(5),
        || dev.all().last() == Some(&b'V'),
    );
    let all = dev.all();
    assert_eq!(
        all.last(),
        Some(&b'V'),
        "{:?}",
        String::from_utf8_lossy(&all)
    );
    assert_eq!(all.iter().filter(|b| **b == b'V').count(), 1);
    assert!(sb
        .daemon_log_text()
        .contains("watchdog: magic close written"));
    drop(dev);

    // A killed daemon writes nothing more, and no V.
    let dev = Device::open(&path);
    sb.start_daemon_env(&[("BERTH_TEST_HOOKS", "1")]);
    let t1 = Instant::now();
    sleep_until(t1 + Duration::from_millis(1000));
    assert!(
        dev.between(t1, t1 + Duration::from_millis(1000)).len() >= 3,
        "no keep-alives after the restart"
    );
    sb.kill_daemon(libc::SIGKILL);
    let killed = Instant::now();
    quiet_for(Duration::from_millis(1000), "a keep-alive after the kill");
    assert!(
        dev.between(killed, Instant::now()).is_empty(),
        "bytes after SIGKILL"
    );
    assert!(!dev.all().contains(&b'V'), "a V after SIGKILL");
}

#[test]
fn the_stall_hook_does_not_exist_without_test_hooks() {
    let mut sb = Sandbox::new("wdhook");
    sb.start_daemon();
    let (status, body) = admin(
        &sb,
        "POST",
        "/v1/test/stall",
        r#"{"component":"supervisor","seconds":3}"#,
    );
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("not_found"), "{body}");
    assert!(!sb.daemon_log_text().contains("stalls"));
}

#[test]
fn a_missing_device_is_reported_not_created() {
    let mut sb = Sandbox::new("wdmiss");
    let path = sb.dir.join("no-watchdog");
    sb.write_config(&format!(
        "[watchdog]\ndevice = \"{}\"\ninterval = \"200ms\"\n",
        path.display()
    ));
    sb.start_daemon();
    wait_until(
        "the daemon logs the missing device",
        Duration::from_secs(5),
        || sb.daemon_log_text().contains("watchdog: cannot open"),
    );
    assert!(!path.exists(), "the device was created");
    // berth check says so too.
    let out = sb.berth(&["--json", "check"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let f = v["features"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "watchdog device")
        .cloned()
        .unwrap_or_default();
    assert_eq!(f["status"], "missing", "{v}");
    assert!(
        f["detail"]
            .as_str()
            .unwrap_or("")
            .contains("does not exist"),
        "{f}"
    );
    sb.ok(&["status"]);
}
