//! `[web] listen`: the device's web page (docs/web.md). One HTML file with its CSS and script
//! inline (`web.html`, embedded), and under `/api/` a short list of admin requests relayed to
//! the admin socket: the page is one more client of the admin API, so every rule the API
//! keeps (safe mode, one mutation at a time, the update locks) holds for it too.
//!
//! Only a bearer token opens `/api/`: the token is `[web] token_file` (`<state>/web.token`,
//! made with 192 random bits and mode 0600 at the first start). The page itself holds no data
//! and is served to anyone; it is sent with a Content-Security-Policy that lets only its own
//! script and style run (by their sha256) and no frame embed it. A peer that sends ten wrong
//! tokens within a minute gets `429` for the rest of that minute.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use berth_core::http::{self, Request};
use sha2::{Digest, Sha256};

use crate::daemon::context::Daemon;

/// The page, as served.
pub(crate) const PAGE: &str = include_str!("web.html");
/// Connections served at once; beyond, `503`.
const MAX_CONNECTIONS: usize = 4;
/// Wrong tokens a peer may send within [`FAIL_WINDOW`].
const MAX_FAILURES: u32 = 10;
const FAIL_WINDOW: Duration = Duration::from_secs(60);
/// Peers remembered for [`MAX_FAILURES`]; beyond, the oldest window is forgotten.
const MAX_PEERS: usize = 64;

/// The admin requests the page may make, with the query keys each may carry. Everything else
/// under `/api/` is `404`: no install, remove, limits, binds, schedules, safe-mode changes,
/// crash archives, followed logs.
const ALLOWED: &[(&str, &str, &[&str])] = &[
    ("GET", "/v1/status", &["name"]),
    ("GET", "/v1/packages", &[]),
    ("GET", "/v1/stats", &["name"]),
    ("GET", "/v1/governor", &[]),
    ("GET", "/v1/logs", &["name"]),
    ("POST", "/v1/start", &[]),
    ("POST", "/v1/stop", &[]),
    ("POST", "/v1/restart", &[]),
    ("POST", "/v1/reset", &[]),
    ("POST", "/v1/update", &[]),
    ("POST", "/v1/upgrade", &[]),
];

struct Web {
    token: String,
    admin_socket: PathBuf,
    /// The page's headers, with the hashes of its script and style.
    page_head: String,
    failures: Mutex<HashMap<IpAddr, (Instant, u32)>>,
    active: AtomicUsize,
}

/// Starts the listener when `[web] listen` is set; an error is logged and leaves the daemon
/// without its page, never without the rest.
pub(crate) fn spawn(d: &Arc<Daemon>) {
    let Some(addr) = d.cfg.web.listen.clone() else {
        return;
    };
    let token_file = token_path(d);
    let token = match load_or_make_token(&token_file) {
        Ok(t) => t,
        Err(e) => {
            log::error!(
                "[web] token_file {}: {e}; no web page",
                token_file.display()
            );
            return;
        }
    };
    let listener = match TcpListener::bind(&addr) {
        Ok(l) => l,
        Err(e) => {
            log::error!("[web] listen = {addr:?}: cannot listen: {e}; no web page");
            return;
        }
    };
    let web = Arc::new(Web {
        token,
        admin_socket: d.cfg.paths.admin_socket(),
        page_head: page_head(PAGE),
        failures: Mutex::new(HashMap::new()),
        active: AtomicUsize::new(0),
    });
    log::info!(
        "web page on http://{addr}/ (token in {})",
        token_file.display()
    );
    let spawned = std::thread::Builder::new()
        .name("web".into())
        .stack_size(128 * 1024)
        .spawn(move || {
            for s in listener.incoming().flatten() {
                accept(&web, s);
            }
        });
    if let Err(e) = spawned {
        log::error!("cannot start the web thread: {e}");
    }
}

pub(crate) fn token_path(d: &Daemon) -> PathBuf {
    d.cfg
        .web
        .token_file
        .clone()
        .unwrap_or_else(|| d.cfg.paths.state.join("web.token"))
}

/// The token in `path`, made when the file is missing. A file others may read or write is
/// refused, as is a token too short to resist guessing.
fn load_or_make_token(path: &Path) -> Result<String, String> {
    match std::fs::metadata(path) {
        Ok(m) => {
            if m.permissions().mode() & 0o077 != 0 {
                return Err(format!(
                    "mode {:o} lets others read it; chmod 600 it",
                    m.permissions().mode() & 0o777
                ));
            }
            let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
            let t = text.trim();
            if t.len() < 16 || !t.bytes().all(|b| b.is_ascii_graphic()) {
                return Err("the token must be at least 16 printable characters, no spaces".into());
            }
            Ok(t.to_string())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut raw = [0u8; 24];
            berth_sys::fsutil::fill_random(&mut raw).map_err(|e| e.to_string())?;
            let t = berth_core::index::hex(&raw);
            berth_sys::fsutil::write_atomic(path, format!("{t}\n").as_bytes(), 0o600)
                .map_err(|e| format!("cannot write it: {e}"))?;
            log::info!("made a web token in {}", path.display());
            Ok(t)
        }
        Err(e) => Err(e.to_string()),
    }
}

/// What is between `<open` and the next `</close>` in `page`: an inline script or style.
fn inline<'a>(page: &'a str, tag: &str) -> &'a str {
    let start = page
        .find(&format!("<{tag}>"))
        .map(|i| i + tag.len() + 2)
        .unwrap_or(0);
    let end = page[start..]
        .find(&format!("</{tag}>"))
        .map(|i| start + i)
        .unwrap_or(start);
    &page[start..end]
}

/// The page's response head: its Content-Security-Policy allows its one inline script and
/// its one inline style (by sha256), requests to itself, nothing else.
fn page_head(page: &str) -> String {
    let hash = |s: &str| berth_core::base64::encode(&Sha256::digest(s.as_bytes()));
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\n\
         Content-Security-Policy: default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; \
         connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\n\
         X-Frame-Options: DENY\r\nX-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        page.len(),
        hash(inline(page, "script")),
        hash(inline(page, "style")),
    )
}

fn accept(web: &Arc<Web>, mut s: TcpStream) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(10)));
    if web.active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
        web.active.fetch_sub(1, Ordering::SeqCst);
        let _ = s.write_all(&http::response(503, "text/plain", b"busy; try again\n"));
        return;
    }
    let w = Arc::clone(web);
    let spawned = std::thread::Builder::new()
        .name("web-request".into())
        .stack_size(128 * 1024)
        .spawn(move || {
            serve(&w, s);
            w.active.fetch_sub(1, Ordering::SeqCst);
        });
    if spawned.is_err() {
        web.active.fetch_sub(1, Ordering::SeqCst);
    }
}

fn read_request(s: &mut TcpStream) -> Result<Request, String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    loop {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return Err("the request ended early".into()),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                match http::parse_complete(&buf) {
                    Ok(Some(req)) => return Ok(req),
                    Ok(None) => continue,
                    Err(e) => return Err(e.to_string()),
                }
            }
        }
    }
}

fn serve(web: &Web, mut s: TcpStream) {
    let peer = s.peer_addr().map(|a| a.ip()).ok();
    let req = match read_request(&mut s) {
        Ok(r) => r,
        Err(e) => {
            let _ = s.write_all(&http::response(
                400,
                "text/plain",
                format!("{e}\n").as_bytes(),
            ));
            return;
        }
    };
    let answer = match (req.method.as_str(), req.path.as_str()) {
        ("GET" | "HEAD", "/" | "/index.html") => {
            let mut out = web.page_head.clone().into_bytes();
            if req.method == "GET" {
                out.extend_from_slice(PAGE.as_bytes());
            }
            out
        }
        (_, p) if p.starts_with("/api/") => match api(web, peer, &req) {
            Ok(admin) => return relay(admin, s),
            Err((status, why)) => text(status, &why),
        },
        _ => text(404, "not found: the page is at /\n"),
    };
    let _ = s.write_all(&answer);
}

fn text(status: u16, body: &str) -> Vec<u8> {
    let mut r = http::response(status, "text/plain; charset=utf-8", body.as_bytes());
    if status == 401 {
        // Before the blank line that ends the head.
        let at = r.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(0) + 2;
        r.splice(
            at..at,
            b"WWW-Authenticate: Bearer realm=\"berth\"\r\n"
                .iter()
                .copied(),
        );
    }
    r
}

/// Checks the token and the request against [`ALLOWED`], and sends it to the admin socket.
fn api(web: &Web, peer: Option<IpAddr>, req: &Request) -> Result<UnixStream, (u16, String)> {
    authenticate(web, peer, req)?;
    let path = &req.path["/api".len()..];
    let keys = ALLOWED
        .iter()
        .find(|(m, p, _)| *m == req.method && *p == path)
        .map(|(_, _, k)| *k)
        .ok_or_else(|| {
            (
                404,
                format!("{} {path} is not offered on the web page\n", req.method),
            )
        })?;
    let mut query = Vec::new();
    for (k, v) in &req.query {
        if !keys.contains(&k.as_str()) {
            return Err((400, format!("{path} takes no ?{k} here\n")));
        }
        if v.is_empty()
            || !v
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err((400, format!("?{k}={v:?}: not a package name\n")));
        }
        query.push(format!("{k}={v}"));
    }
    let target = if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", query.join("&"))
    };
    let mut admin = UnixStream::connect(&web.admin_socket).map_err(|e| {
        (
            503,
            format!("the daemon's admin socket does not answer: {e}\n"),
        )
    })?;
    let mut head = format!(
        "{} {target} HTTP/1.1\r\nHost: berth\r\nConnection: close\r\nContent-Length: {}\r\n",
        req.method,
        req.body.len()
    );
    if !req.body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    head.push_str("\r\n");
    admin
        .write_all(head.as_bytes())
        .and_then(|_| admin.write_all(&req.body))
        .map_err(|e| (503, format!("cannot ask the daemon: {e}\n")))?;
    Ok(admin)
}

fn authenticate(web: &Web, peer: Option<IpAddr>, req: &Request) -> Result<(), (u16, String)> {
    let now = Instant::now();
    let ip = peer.unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let mut failures = web.failures.lock().unwrap();
    failures.retain(|_, (t, _)| now.duration_since(*t) < FAIL_WINDOW);
    if failures.get(&ip).is_some_and(|(_, n)| *n >= MAX_FAILURES) {
        return Err((
            429,
            format!("{MAX_FAILURES} wrong tokens within a minute; wait\n"),
        ));
    }
    let given = req
        .headers
        .get("authorization")
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim);
    match given {
        Some(t) if same(t.as_bytes(), web.token.as_bytes()) => Ok(()),
        _ => {
            if failures.len() >= MAX_PEERS && !failures.contains_key(&ip) {
                if let Some(oldest) = failures
                    .iter()
                    .min_by_key(|(_, (t, _))| *t)
                    .map(|(k, _)| *k)
                {
                    failures.remove(&oldest);
                }
            }
            let e = failures.entry(ip).or_insert((now, 0));
            e.1 += 1;
            Err((
                401,
                match given {
                    None => "this needs the web token (Authorization: Bearer …)\n".into(),
                    Some(_) => "wrong token\n".into(),
                },
            ))
        }
    }
}

/// Compares in time that does not depend on where the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (i, x) in b.iter().enumerate() {
        diff |= x ^ a.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

/// The admin socket's answer, as it comes (a JSON body, or an upgrade's event stream).
fn relay(mut admin: UnixStream, mut s: TcpStream) {
    let mut buf = [0u8; 4096];
    loop {
        match admin.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_has_one_script_and_one_style_and_no_outside_assets() {
        assert_eq!(PAGE.matches("<script>").count(), 1);
        assert_eq!(PAGE.matches("<style>").count(), 1);
        assert!(!inline(PAGE, "script").is_empty());
        assert!(!inline(PAGE, "style").is_empty());
        for outside in [
            "src=\"http",
            "href=\"http",
            "url(http",
            "@import",
            " style=\"",
        ] {
            assert!(!PAGE.contains(outside), "the page has {outside:?}");
        }
        let head = page_head(PAGE);
        let script = berth_core::base64::encode(&Sha256::digest(inline(PAGE, "script")));
        assert!(
            head.contains(&format!("script-src 'sha256-{script}'")),
            "{head}"
        );
        assert!(head.contains(&format!("Content-Length: {}\r\n", PAGE.len())));
    }

    #[test]
    fn every_request_the_page_makes_is_allowed_and_nothing_that_installs_or_removes() {
        let script = inline(PAGE, "script");
        for (m, p, _) in ALLOWED {
            assert!(!p.contains("install") && !p.contains("remove") && !p.contains("safe"));
            let _ = m;
        }
        // Every `api('METHOD', '/v1/…'` in the script is on the list.
        let asked = script.split("api('").skip(1);
        assert!(
            asked.clone().count() >= 9,
            "the script's requests were not found"
        );
        for part in asked {
            let method = &part[..part.find('\'').unwrap()];
            let rest = &part[method.len() + 4..];
            let path = &rest[..rest.find(['\'', '?']).unwrap()];
            assert!(
                ALLOWED.iter().any(|(m, p, _)| *m == method && *p == path),
                "the page asks {method} {path}, which the server refuses"
            );
        }
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abcdef", b"abcdef"));
        assert!(!same(b"abcdeg", b"abcdef"));
        assert!(!same(b"abcde", b"abcdef"));
        assert!(!same(b"abcdefg", b"abcdef"));
        assert!(!same(b"", b"abcdef"));
    }

    #[test]
    fn a_token_file_others_can_read_is_refused_and_a_missing_one_is_made_private() {
        let dir = std::env::temp_dir().join(format!("berth-web-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("web.token");
        let _ = std::fs::remove_file(&f);
        let made = load_or_make_token(&f).unwrap();
        assert_eq!(made.len(), 48);
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(load_or_make_token(&f).unwrap(), made);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(load_or_make_token(&f).unwrap_err().contains("chmod 600"));
        std::fs::write(&f, "short\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(load_or_make_token(&f).unwrap_err().contains("16 printable"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
