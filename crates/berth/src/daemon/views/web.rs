//! `[web] listen`: the device's web page (docs/web.md). One HTML file with its CSS and script
//! inline (`web.html`, embedded), and under `/api/` a short list of admin requests relayed to
//! the admin socket: the page is one more client of the admin API, so every rule the API
//! keeps (safe mode, one mutation at a time, the update locks) holds for it too.
//!
//! Only a bearer token opens `/api/`: the token is `[web] token_file` (`<state>/web.token`,
//! made with 192 random bits and mode 0600 at the first start). The page itself holds no data
//! and is served to anyone; it is sent with a Content-Security-Policy that lets only its own
//! script and style run (by their sha256) and no frame embed it. A peer that sends ten wrong
//! tokens within a minute gets `429` for the rest of that minute, as does everyone once 100
//! wrong tokens came within a minute. A request body is never passed on as sent: the keys the
//! page needs are taken from it and the admin request is written anew (no `force`, no
//! `reset_serial`, no stop `timeout`).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use berth_core::http::{self, Request};
use sha2::{Digest, Sha256};

use crate::daemon::base::context::Daemon;

/// The page, as served.
pub(crate) const PAGE: &str = include_str!("web.html");
/// Connections served at once; beyond, `503`.
const MAX_CONNECTIONS: usize = 8;
/// Connections one peer may hold at once (a browser opens a few in parallel); beyond, `503`.
const MAX_PER_PEER: usize = 4;
/// The whole request (head and body) must arrive within this time of the connection.
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// The largest body the page sends (a name or a list of names).
const MAX_BODY: usize = 4096;
/// Wrong tokens a peer may send within [`FAIL_WINDOW`].
const MAX_FAILURES: u32 = 10;
/// Wrong tokens from all peers together within [`FAIL_WINDOW`] (peers that change addresses).
const MAX_FAILURES_ALL: u32 = 100;
const FAIL_WINDOW: Duration = Duration::from_secs(60);
/// Peers remembered for [`MAX_FAILURES`]; beyond, the oldest window is forgotten.
const MAX_PEERS: usize = 64;

/// What a request may carry: for GET the query keys, for POST the body's keys (`name`: one
/// package name; `names`: a list of them).
type Keys = &'static [&'static str];

/// The admin requests the page may make. Everything else under `/api/` is `404`: no install,
/// remove, limits, binds, schedules, safe-mode changes, crash archives, followed logs.
const ALLOWED: &[(&str, &str, Keys)] = &[
    ("GET", "/v1/status", &["name"]),
    ("GET", "/v1/packages", &[]),
    ("GET", "/v1/stats", &["name"]),
    ("GET", "/v1/governor", &[]),
    ("GET", "/v1/logs", &["name"]),
    ("POST", "/v1/start", &["name"]),
    ("POST", "/v1/stop", &["name"]),
    ("POST", "/v1/restart", &["name"]),
    ("POST", "/v1/reset", &["name"]),
    ("POST", "/v1/update", &[]),
    ("POST", "/v1/upgrade", &["names"]),
];

struct Web {
    token: String,
    admin_socket: PathBuf,
    /// The page's headers, with the hashes of its script and style.
    page_head: String,
    failures: Mutex<Failures>,
    active: AtomicUsize,
    /// Connections held per peer.
    peers: Mutex<HashMap<IpAddr, usize>>,
}

#[derive(Default)]
struct Failures {
    by_peer: HashMap<IpAddr, (Instant, u32)>,
    /// All peers' wrong tokens in the window that began at `.0`.
    all: Option<(Instant, u32)>,
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
    if addr
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|a| a.ip().is_unspecified())
    {
        log::warn!("[web] listen = {addr:?}: every interface, the WAN side too if the device has one; give the LAN address");
    }
    let web = Arc::new(Web {
        token,
        admin_socket: d.cfg.paths.admin_socket(),
        page_head: page_head(PAGE),
        failures: Mutex::new(Failures::default()),
        active: AtomicUsize::new(0),
        peers: Mutex::new(HashMap::new()),
    });
    log::info!(
        "web page on http://{addr}/ (token in {})",
        token_file.display()
    );
    let spawned = berth_sys::process::spawn_thread(
        "web".into(),
        128 * 1024,
        Box::new(move || {
            for s in listener.incoming().flatten() {
                accept(&web, s);
            }
        }),
    );
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

/// The token in `path`, made when the file is missing. A file that is not root's own regular
/// file (a symbolic link, another owner) or that others may read or write is refused, as is a
/// token too short to resist guessing.
fn load_or_make_token(path: &Path) -> Result<String, String> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    match std::fs::symlink_metadata(path) {
        Ok(m) => {
            if !m.is_file() || m.uid() != 0 {
                return Err("not a regular file of root's".into());
            }
            if m.mode() & 0o077 != 0 {
                return Err(format!(
                    "mode {:o} lets others read it; chmod 600 it",
                    m.mode() & 0o777
                ));
            }
            let mut text = String::new();
            std::fs::File::options()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
                .and_then(|f| f.take(4096).read_to_string(&mut text))
                .map_err(|e| e.to_string())?;
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
    let _ = s.set_write_timeout(Some(Duration::from_secs(10)));
    let Ok(peer) = s.peer_addr().map(|a| a.ip()) else {
        return;
    };
    let admitted = {
        let mut peers = web.peers.lock().unwrap();
        let held = peers.get(&peer).copied().unwrap_or(0);
        if held >= MAX_PER_PEER || web.active.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
            false
        } else {
            peers.insert(peer, held + 1);
            web.active.fetch_add(1, Ordering::SeqCst);
            true
        }
    };
    if !admitted {
        // What has arrived is read first (without waiting): closing a socket with unread
        // bytes would reset the connection before the client reads the answer.
        let _ = s.set_nonblocking(true);
        let _ = s.read(&mut [0u8; 4096]);
        let _ = s.write_all(&text(503, "busy; try again\n"));
        let _ = s.shutdown(std::net::Shutdown::Write);
        return;
    }
    let w = Arc::clone(web);
    let spawned = berth_sys::process::spawn_thread(
        "web-request".into(),
        128 * 1024,
        Box::new(move || {
            serve(&w, peer, s);
            release(&w, peer);
        }),
    );
    if spawned.is_err() {
        release(web, peer);
    }
}

fn release(web: &Web, peer: IpAddr) {
    web.active.fetch_sub(1, Ordering::SeqCst);
    let mut peers = web.peers.lock().unwrap();
    if let Some(n) = peers.get_mut(&peer) {
        *n -= 1;
        if *n == 0 {
            peers.remove(&peer);
        }
    }
}

/// Reads into `buf` until `done` says the request is whole, within [`REQUEST_DEADLINE`] of
/// `start` however slowly the bytes come.
fn read_until(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    start: Instant,
    done: impl Fn(&[u8]) -> bool,
) -> Result<(), String> {
    let mut chunk = [0u8; 2048];
    while !done(buf) {
        let left = REQUEST_DEADLINE
            .checked_sub(start.elapsed())
            .filter(|d| !d.is_zero())
            .ok_or("the request took too long")?;
        let _ = s.set_read_timeout(Some(left));
        match s.read(&mut chunk) {
            Ok(0) => return Err("the request ended early".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Err("the request took too long".into()),
        }
        if buf.len() > http::MAX_HEAD + MAX_BODY {
            return Err("the request is too large".into());
        }
    }
    Ok(())
}

fn serve(web: &Web, peer: IpAddr, mut s: TcpStream) {
    let start = Instant::now();
    let mut buf = Vec::new();
    // The head first: the token is checked before a byte of the body is waited for.
    let head = read_until(&mut s, &mut buf, start, |b| {
        http::head_end(b).is_some() || b.len() > http::MAX_HEAD
    })
    .and_then(|_| {
        let end = http::head_end(&buf).ok_or("the request head is too large")?;
        http::parse_head(&buf[..end])
            .map(|(req, len)| (req, end, len))
            .map_err(|e| e.to_string())
    });
    let (mut req, end, len) = match head {
        Ok(h) => h,
        Err(e) => {
            let _ = s.write_all(&text(400, &format!("{e}\n")));
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
        (_, p) if p.starts_with("/api/") => {
            let read_body = |req: &mut Request, s: &mut TcpStream, buf: &mut Vec<u8>| {
                if len > MAX_BODY {
                    return Err((413, format!("a body of at most {MAX_BODY} bytes\n")));
                }
                read_until(s, buf, start, |b| b.len() >= end + len).map_err(|e| (400, e))?;
                req.body = buf[end..end + len].to_vec();
                Ok(())
            };
            match authenticate(web, peer, &req)
                .and_then(|_| read_body(&mut req, &mut s, &mut buf))
                .and_then(|_| api(web, peer, &req))
            {
                Ok(admin) => return relay(admin, s),
                Err((status, why)) => text(status, &why),
            }
        }
        _ => text(404, "not found: the page is at /\n"),
    };
    let _ = s.write_all(&answer);
}

fn text(status: u16, body: &str) -> Vec<u8> {
    let mut r = http::response(status, "text/plain; charset=utf-8", body.as_bytes());
    add_headers(&mut r, ANSWER_HEADERS);
    if status == 401 {
        add_headers(&mut r, "WWW-Authenticate: Bearer realm=\"berth\"\r\n");
    }
    r
}

/// The headers every answer of the web page's server carries.
const ANSWER_HEADERS: &str = "X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n";

/// Adds `headers` (each ending in CRLF) to the head at the start of `r`, before the blank
/// line that ends it.
fn add_headers(r: &mut Vec<u8>, headers: &str) {
    if let Some(end) = http::head_end(r) {
        let at = end - 2;
        r.splice(at..at, headers.bytes());
    }
}

/// Checks the request against [`ALLOWED`], writes it anew and sends it to the admin socket.
fn api(web: &Web, peer: IpAddr, req: &Request) -> Result<UnixStream, (u16, String)> {
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
    let is_name = |v: &str| {
        !v.is_empty()
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    };
    let mut query = Vec::new();
    let mut body = String::new();
    if req.method == "GET" {
        for (k, v) in &req.query {
            if !keys.contains(&k.as_str()) {
                return Err((400, format!("{path} takes no ?{k} here\n")));
            }
            if !is_name(v) {
                return Err((400, format!("?{k}={v:?}: not a package name\n")));
            }
            query.push(format!("{k}={v}"));
        }
    } else {
        if !req.query.is_empty() {
            return Err((400, format!("{path} takes no query here\n")));
        }
        body = post_body(path, keys, &req.body, &is_name)?;
        log::info!("web: {peer} asks {path} {body}");
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
    let head = format!(
        "{} {target} HTTP/1.1\r\nHost: berth\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        req.method,
        body.len()
    );
    admin
        .write_all(head.as_bytes())
        .and_then(|_| admin.write_all(body.as_bytes()))
        .map_err(|e| (503, format!("cannot ask the daemon: {e}\n")))?;
    Ok(admin)
}

/// The body of a POST, written anew from the keys the page may send: `name` (a package name)
/// or `names` (a list of them); an empty body stays empty. Anything else is refused.
fn post_body(
    path: &str,
    keys: Keys,
    sent: &[u8],
    is_name: &dyn Fn(&str) -> bool,
) -> Result<String, (u16, String)> {
    let refuse = |why: String| Err((400, format!("{path}: {why}\n")));
    if sent.iter().all(u8::is_ascii_whitespace) {
        return Ok(String::new());
    }
    let v: serde_json::Value = match serde_json::from_slice(sent) {
        Ok(v) => v,
        Err(e) => return refuse(format!("the body is not JSON: {e}")),
    };
    let Some(o) = v.as_object() else {
        return refuse("the body must be a JSON object".into());
    };
    let mut out = serde_json::Map::new();
    for (k, v) in o {
        let ok = match k.as_str() {
            "name" if keys.contains(&"name") => v.as_str().is_some_and(is_name),
            "names" if keys.contains(&"names") => v.as_array().is_some_and(|a| {
                a.len() <= 64 && a.iter().all(|n| n.as_str().is_some_and(is_name))
            }),
            _ => return refuse(format!("{k:?} is not offered on the web page")),
        };
        if !ok {
            return refuse(format!("{k:?} must be a package name, or a list of them"));
        }
        out.insert(k.clone(), v.clone());
    }
    Ok(serde_json::Value::Object(out).to_string())
}

fn authenticate(web: &Web, peer: IpAddr, req: &Request) -> Result<(), (u16, String)> {
    let now = Instant::now();
    let mut f = web.failures.lock().unwrap();
    f.by_peer
        .retain(|_, (t, _)| now.duration_since(*t) < FAIL_WINDOW);
    if f.all
        .is_some_and(|(t, _)| now.duration_since(t) >= FAIL_WINDOW)
    {
        f.all = None;
    }
    if f.by_peer
        .get(&peer)
        .is_some_and(|(_, n)| *n >= MAX_FAILURES)
        || f.all.is_some_and(|(_, n)| n >= MAX_FAILURES_ALL)
    {
        return Err((429, "too many wrong tokens within a minute; wait\n".into()));
    }
    let given = req
        .headers
        .get("authorization")
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim);
    match given {
        Some(t) if same(t.as_bytes(), web.token.as_bytes()) => Ok(()),
        // No token is not a guess: the page asks once without one (a web server in front
        // of it may add it).
        None => Err((
            401,
            "this needs the web token (Authorization: Bearer …)\n".into(),
        )),
        Some(_) => {
            if f.by_peer.len() >= MAX_PEERS && !f.by_peer.contains_key(&peer) {
                if let Some(oldest) = f
                    .by_peer
                    .iter()
                    .min_by_key(|(_, (t, _))| *t)
                    .map(|(k, _)| *k)
                {
                    f.by_peer.remove(&oldest);
                }
            }
            f.by_peer.entry(peer).or_insert((now, 0)).1 += 1;
            f.all.get_or_insert((now, 0)).1 += 1;
            Err((401, "wrong token\n".into()))
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

/// The admin socket's answer (a JSON body, or an upgrade's event stream), with
/// [`ANSWER_HEADERS`] added to its head.
fn relay(mut admin: UnixStream, mut s: TcpStream) {
    let mut buf = [0u8; 4096];
    // The head, whole (the admin socket's are a few hundred bytes), and what came with it.
    let mut head = Vec::new();
    while http::head_end(&head).is_none() && head.len() < http::MAX_HEAD {
        match admin.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    add_headers(&mut head, ANSWER_HEADERS);
    if head.is_empty() || s.write_all(&head).is_err() {
        return;
    }
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
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_body_is_written_anew_from_the_keys_the_page_sends_and_nothing_else() {
        let name = |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric());
        let names: Keys = &["names"];
        let one: Keys = &["name"];
        assert_eq!(post_body("/v1/update", &[], b"", &name).unwrap(), "");
        assert_eq!(
            post_body("/v1/stop", one, br#" {"name": "web"} "#, &name).unwrap(),
            r#"{"name":"web"}"#
        );
        assert_eq!(
            post_body("/v1/upgrade", names, br#"{"names":["a","b"]}"#, &name).unwrap(),
            r#"{"names":["a","b"]}"#
        );
        for (path, keys, body, want) in [
            (
                "/v1/update",
                &[][..],
                &br#"{"reset_serial":true}"#[..],
                "\"reset_serial\" is not offered",
            ),
            (
                "/v1/upgrade",
                names,
                br#"{"names":["a"],"force":true}"#,
                "\"force\" is not offered",
            ),
            (
                "/v1/stop",
                one,
                br#"{"name":"a","timeout":4294967295}"#,
                "\"timeout\" is not offered",
            ),
            (
                "/v1/stop",
                one,
                br#"{"name":"../x"}"#,
                "must be a package name",
            ),
            ("/v1/stop", one, br#"{"name":7}"#, "must be a package name"),
            (
                "/v1/upgrade",
                names,
                br#"{"names":"a"}"#,
                "must be a package name",
            ),
            ("/v1/start", one, br#"["a"]"#, "must be a JSON object"),
            ("/v1/start", one, b"name=a", "not JSON"),
        ] {
            let (status, why) = post_body(path, keys, body, &name).unwrap_err();
            assert_eq!(status, 400);
            assert!(
                why.contains(want),
                "{path} {}: {why}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn answers_say_nosniff_and_no_store_and_401_asks_for_the_bearer() {
        let r = String::from_utf8(text(401, "no\n")).unwrap();
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert_eq!(body, "no\n");
        for h in [
            "X-Content-Type-Options: nosniff",
            "Cache-Control: no-store",
            "WWW-Authenticate: Bearer",
        ] {
            assert!(head.contains(h), "{head}");
        }
        let mut relayed = http::response(200, "application/json", b"{}");
        add_headers(&mut relayed, ANSWER_HEADERS);
        assert!(String::from_utf8(relayed)
            .unwrap()
            .ends_with("no-store\r\n\r\n{}"));
    }

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
        use std::os::unix::fs::MetadataExt;
        if std::fs::metadata("/proc/self").map_or(true, |m| m.uid() != 0) {
            // The token must be a file of root's: made by another user, it is refused.
            berth_sys::skip::record(
                "host root",
                "web: the token file is root's: only root makes one the daemon takes",
            );
            return;
        }
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
        // A link to a private file of root's is not the file.
        std::fs::write(&f, format!("{made}\n")).unwrap();
        assert_eq!(load_or_make_token(&f).unwrap(), made);
        let link = dir.join("link.token");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert!(load_or_make_token(&link)
            .unwrap_err()
            .contains("not a regular file"));
        // Nor is a private file of another user's.
        std::os::unix::fs::chown(&f, Some(65534), None).unwrap();
        assert!(load_or_make_token(&f)
            .unwrap_err()
            .contains("not a regular file of root's"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
