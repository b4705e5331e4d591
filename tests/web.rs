//! The web page end to end (docs/web.md), as root with real LXC, on loopback: `[web] listen`
//! serves the page to anyone and the admin requests it uses only with the token; what the page
//! may not do (install, remove, safe mode, followed logs, odd names) is refused with the token
//! too; a stop and a start through it reach the containers; headless Chromium renders the
//! page from the live daemon (containers with their states and sparklines, an upgradable
//! package, a hostile description shown as text, the safe-mode banner) and takes the
//! screenshot of docs/web.md; ten wrong tokens shut the peer out for a minute.

// An end-to-end scenario reads top to bottom: the 150-line limit of crates/ (clippy.toml)
// does not hold here.
#![allow(clippy::too_many_lines)]

mod common;

use common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const HOSTILE: &str = "<img src=x onerror=alert(1)> tells the time";

struct Answer {
    status: u16,
    head: String,
    body: String,
}

fn http(port: u16, method: &str, path: &str, token: Option<&str>, body: &str) -> Answer {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    // A server that answers before the whole request is written (503 busy) may have closed
    // already: its answer is read all the same.
    let _ = write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("a head");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

fn chromium() -> Option<PathBuf> {
    let found = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    if found.is_none() {
        berth_sys::skip::record(
            "package chromium",
            "web: chromium is missing, the page is not rendered (apt-get install chromium)",
        );
    }
    found
}

/// Chromium, headless, on `url`: `args` add `--dump-dom` or `--screenshot=…`. Its profile is
/// a directory of the sandbox's.
fn browse(browser: &Path, profile: &Path, url: &str, args: &[&str]) -> String {
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1100,900",
            "--virtual-time-budget=40000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `<tr data-name="NAME" …>…</tr>` of the dumped DOM.
fn row<'a>(dom: &'a str, name: &str) -> &'a str {
    let at = dom
        .find(&format!("data-name=\"{name}\""))
        .unwrap_or_else(|| panic!("no row for {name} in the page:\n{dom}"));
    let start = dom[..at].rfind("<tr").unwrap();
    let end = at + dom[at..].find("</tr>").unwrap();
    &dom[start..end]
}

/// A relay on loopback that adds `Authorization: Bearer TOKEN` to every request, as a
/// device's web server in front of the page would; its port.
fn token_adding_proxy(port: u16, token: &str) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let relay = listener.local_addr().unwrap().port();
    let auth = format!("Authorization: Bearer {token}\r\n");
    std::thread::spawn(move || {
        for mut client in listener.incoming().flatten() {
            let auth = auth.clone();
            std::thread::spawn(move || {
                let head = read_request_head(&mut client);
                let Ok(mut up) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
                    return;
                };
                let text = String::from_utf8_lossy(&head);
                let Some((line, rest)) = text.split_once("\r\n") else {
                    return;
                };
                // The page's own requests carry no body here (GETs).
                let _ = write!(up, "{line}\r\n{auth}{rest}");
                let mut back = Vec::new();
                let _ = up.read_to_end(&mut back);
                let _ = client.write_all(&back);
            });
        }
    });
    relay
}

/// The text of the safe-mode banner (empty when hidden).
fn banner(dom: &str) -> &str {
    let at = dom.find("id=\"safe\"").expect("the banner's element");
    let div = &dom[at..at + dom[at..].find("</div>").unwrap()];
    if div.contains(" hidden") {
        return "";
    }
    &div[div.find('>').unwrap() + 1..]
}

#[test]
fn the_web_page_shows_the_device_and_acts_only_with_its_token() {
    let mut sb = Sandbox::new("web");
    let port = free_port();
    sb.write_config(&format!("[web]\nlisten = \"127.0.0.1:{port}\"\n"));
    let clock = |v: &str| {
        let mut p = Pkg::script(
            "clock",
            v,
            "while :; do echo tick; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 0.2; done\n",
        )
        .table("[resources]\nmemory = \"32M\"\n");
        p.description = HOSTILE.into();
        p
    };
    sb.add(&clock("1"));
    sb.add(&Pkg::script("idle", "1", "exec sleep 1000\n"));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "clock", "idle"]);
    sb.ok(&["start", "clock"]);
    sb.wait_status("clock", 10, "clock running", |c| c["state"] == "running");
    // A newer clock in the repository: upgradable.
    std::fs::remove_file(sb.package_file("clock", "1")).unwrap();
    sb.add(&clock("2"));
    sb.ok(&["update"]);

    // The token: made at the first start, the daemon's alone.
    let token_file = sb.state_dir().join("web.token");
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", token_file.display());
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();
    assert!(token.len() >= 32, "{token}");
    let t = Some(token.as_str());

    // The page: anyone may load it; it holds no data, and only its own script may run.
    let page = http(port, "GET", "/", None, "");
    assert_eq!(page.status, 200, "{}", page.head);
    for h in [
        "Content-Security-Policy: default-src 'none'; script-src 'sha256-",
        "frame-ancestors 'none'",
        "X-Frame-Options: DENY",
        "Cache-Control: no-store",
    ] {
        assert!(page.head.contains(h), "no {h:?} in:\n{}", page.head);
    }
    assert!(page.body.contains("<script>") && !page.body.contains("clock"));
    assert_eq!(http(port, "GET", "/etc/passwd", None, "").status, 404);

    // Without the token, or with a wrong one, the API is closed.
    let none = http(port, "GET", "/api/v1/status", None, "");
    assert_eq!(none.status, 401, "{}", none.body);
    assert!(
        none.head.contains("WWW-Authenticate: Bearer"),
        "{}",
        none.head
    );
    let wrong = format!("{}x", &token[..token.len() - 1]);
    assert_eq!(
        http(port, "GET", "/api/v1/status", Some(&wrong), "").status,
        401
    );
    assert_eq!(
        http(port, "POST", "/api/v1/stop", None, r#"{"name":"clock"}"#).status,
        401
    );

    // With the token: only what the page offers.
    for (method, path, body) in [
        ("POST", "/api/v1/install", r#"{"names":["idle"]}"#),
        ("POST", "/api/v1/remove", r#"{"names":["clock"]}"#),
        ("POST", "/api/v1/safe-mode/enter", ""),
        (
            "POST",
            "/api/v1/limit",
            r#"{"name":"clock","cpu_max":"100%"}"#,
        ),
        (
            "POST",
            "/api/v1/bind",
            r#"{"package":"idle","container":"clock"}"#,
        ),
        ("GET", "/api/v1/reports/export?id=x", ""),
        ("GET", "/api/metrics", ""),
        ("DELETE", "/api/v1/status", ""),
    ] {
        let a = http(port, method, path, t, body);
        assert_eq!(a.status, 404, "{method} {path}: {} {}", a.head, a.body);
    }
    for path in [
        "/api/v1/logs?name=clock&follow=1",
        "/api/v1/status?name=..%2Fx",
        "/api/v1/packages?x=1",
    ] {
        let a = http(port, "GET", path, t, "");
        assert_eq!(a.status, 400, "{path}: {}", a.body);
    }
    // A body is written anew from what the page sends: nothing else passes.
    for (path, body) in [
        ("/api/v1/update", r#"{"reset_serial":true}"#),
        ("/api/v1/upgrade", r#"{"names":["clock"],"force":true}"#),
        ("/api/v1/stop", r#"{"name":"clock","timeout":4294967295}"#),
        ("/api/v1/start", r#"{"name":"../x"}"#),
    ] {
        let a = http(port, "POST", path, t, body);
        assert_eq!(a.status, 400, "{path} {body}: {}", a.body);
    }
    assert_eq!(sb.status_of("idle")["state"], "stopped");
    assert_eq!(sb.status_of("clock")["state"], "running");
    assert!(sb.state_dir().join("store").exists());

    let status: Value =
        serde_json::from_str(&http(port, "GET", "/api/v1/status", t, "").body).unwrap();
    let names: Vec<&str> = status["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["clock", "idle"], "{status}");
    let logs = http(port, "GET", "/api/v1/logs?name=clock", t, "");
    assert!(
        logs.status == 200 && logs.body.contains("tick"),
        "{}",
        logs.body
    );

    // A stop and a start through the page reach the container.
    let a = http(port, "POST", "/api/v1/stop", t, r#"{"name":"clock"}"#);
    assert_eq!(a.status, 200, "{}", a.body);
    sb.wait_status("clock", 15, "clock stopped", |c| c["state"] == "stopped");
    let a = http(port, "POST", "/api/v1/start", t, r#"{"name":"clock"}"#);
    assert_eq!(a.status, 200, "{}", a.body);
    sb.wait_status("clock", 10, "clock running", |c| c["state"] == "running");

    // A peer holds at most 4 connections, and a request must be whole within 10 s: four
    // that send nothing keep a fifth out only until then.
    let idle: Vec<std::net::TcpStream> = (0..4)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let_pass(
        Duration::from_millis(200),
        "the server takes the four connections in",
    );
    assert_eq!(http(port, "GET", "/", None, "").status, 503);
    let t0 = Instant::now();
    loop {
        let a = http(port, "GET", "/", None, "");
        if a.status == 200 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "still {}", a.status);
        std::thread::sleep(Duration::from_millis(250));
    }
    drop(idle);

    if let Some(browser) = chromium() {
        let profile = sb.dir.join("chromium");
        // Without a token the page asks once and shows its sign-in form, and asks no more.
        let dom = browse(
            &browser,
            &profile,
            &format!("http://127.0.0.1:{port}/"),
            &["--dump-dom"],
        );
        assert!(
            dom.contains("<form id=\"login\">"),
            "no sign-in form:\n{dom}"
        );
        assert!(dom.contains("<main id=\"main\" hidden=\"\">"), "{dom}");
        // Behind a web server that adds the token (a device's own login in front), the page
        // works without one.
        let proxy = token_adding_proxy(port, &token);
        let dom = browse(
            &browser,
            &profile,
            &format!("http://127.0.0.1:{proxy}/"),
            &["--dump-dom"],
        );
        assert!(
            dom.contains("data-loaded=\"1\""),
            "the page did not load behind the proxy:\n{dom}"
        );
        assert!(row(&dom, "clock").contains("data-state=\"running\""));
        let url = format!("http://127.0.0.1:{port}/#token={token}");
        let dom = browse(&browser, &profile, &url, &["--dump-dom"]);
        assert!(
            dom.contains("data-loaded=\"1\""),
            "the page did not load:\n{dom}"
        );
        let clock_row = row(&dom, "clock");
        assert!(clock_row.contains("data-state=\"running\""), "{clock_row}");
        assert!(clock_row.contains(">Stop</button>"), "{clock_row}");
        // CPU and memory sparklines, each with the samples of several ticks.
        let points: Vec<usize> = clock_row
            .split("points=\"")
            .skip(1)
            .map(|p| p[..p.find('"').unwrap()].split(' ').count())
            .collect();
        assert!(
            points.len() == 2 && points.iter().all(|n| *n >= 2),
            "{clock_row}"
        );
        assert!(
            clock_row.contains("MiB") || clock_row.contains("KiB"),
            "{clock_row}"
        );
        let idle_row = row(&dom, "idle");
        assert!(
            idle_row.contains("data-state=\"stopped\"") && idle_row.contains(">Start</button>")
        );
        // Packages: clock 1 installed, 2 available, with its button; the vendor's
        // description shown as text, never as markup.
        let pk = &dom[dom.find("id=\"pk\"").unwrap()..];
        let clock_pk = row(pk, "clock");
        assert!(
            clock_pk.contains("data-upgradable=\"1\"") && clock_pk.contains("Upgrade to 2"),
            "{clock_pk}"
        );
        assert!(
            dom.contains("&lt;img src=x onerror=alert(1)&gt; tells the time"),
            "{clock_pk}"
        );
        assert!(
            !dom.contains("<img"),
            "the description became markup:\n{dom}"
        );
        assert!(dom.contains("<dt>mode</dt>"), "no governor in:\n{dom}");
        assert!(
            banner(&dom).is_empty(),
            "a safe-mode banner out of safe mode:\n{dom}"
        );

        let shot = sb.dir.join("web.png");
        browse(
            &browser,
            &profile,
            &url,
            &[&format!("--screenshot={}", shot.display())],
        );
        let png = std::fs::read(&shot).expect("the screenshot");
        assert!(
            png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 20_000,
            "{} B",
            png.len()
        );
        if let Some(to) = std::env::var_os("BERTH_WEB_SCREENSHOT") {
            std::fs::copy(&shot, to).unwrap();
        }

        // Safe mode: the banner, and the page's start is refused by the daemon.
        sb.ok(&["safe-mode", "enter"]);
        let dom = browse(&browser, &profile, &url, &["--dump-dom"]);
        assert!(
            banner(&dom).starts_with("Safe mode: no container is started (entered by"),
            "no banner:\n{dom}"
        );
        let a = http(port, "POST", "/api/v1/start", t, r#"{"name":"idle"}"#);
        assert_eq!(a.status, 409, "{}", a.body);
        assert!(a.body.contains("safe_mode"), "{}", a.body);
        sb.ok(&["safe-mode", "clear"]);
    }

    // Ten wrong tokens within a minute: the peer is shut out, the right token too.
    let started = Instant::now();
    for _ in 0..10 {
        http(port, "GET", "/api/v1/status", Some(&wrong), "");
    }
    let a = http(port, "GET", "/api/v1/status", t, "");
    assert_eq!(a.status, 429, "{}", a.body);
    assert!(started.elapsed() < Duration::from_secs(60));
    // The page itself is still served.
    assert_eq!(http(port, "GET", "/", None, "").status, 200);
}
