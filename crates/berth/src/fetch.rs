//! The device's downloads: http:// and https:// through libcurl (loaded at run time, see
//! berth_sys::curl), and `file://` read here.
//!
//! What the device installs is trusted because `index.json` is signed and lists each image's
//! sha256, not because of the transport: a repository on plain http:// (as OpenWrt feeds are)
//! is as safe as one on https://, which adds privacy and works through proxies that only pass
//! TLS. The rules are berth's, whatever libcurl would do: redirects are followed here (at most
//! five; never from https:// to http://, never to file://; the fleet's token never to another
//! origin), the size and the whole transfer's time are bounded, and ranges resume downloads.

#[cfg(all(test, feature = "fleet", feature = "vendor"))]
mod tls_tests;

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berth_core::http::{self, Framing, ResponseHead};
use berth_sys::curl::{self, Easy, Method, Outcome, Request};
use sha2::{Digest, Sha256};

const MAX_REDIRECTS: usize = 5;
/// Small on purpose: the daemon's memory budget is a few MiB.
const BUF_SIZE: usize = 16 * 1024;
const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);
/// The slowest transfer berth waits for: a whole fetch gets max(60 s, limit / MIN_RATE). A
/// server that trickles bytes (or sends interim answers for ever) must not hold the daemon's
/// operation lock indefinitely.
const MIN_RATE: u64 = 8 * 1024;
/// Interim (1xx) answers accepted before the real one.
const MAX_INTERIM: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub done: u64,
    pub total: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("invalid URL '{url}': {reason}")]
    BadUrl { url: String, reason: &'static str },
    #[error(
        "unsupported URL scheme '{scheme}' in {url}: berth fetches http://, https:// and \
         file://"
    )]
    Scheme { scheme: String, url: String },
    #[error("cannot resolve {host} ({url}): {reason}")]
    Resolve {
        host: String,
        url: String,
        reason: String,
    },
    #[error("cannot connect to {addr} ({url}): {reason}")]
    Connect {
        addr: String,
        url: String,
        reason: String,
    },
    #[error("{url}: no data from the server for {}", secs(.after))]
    Timeout { url: String, after: Duration },
    #[error("{url}: not complete after {} (slower than {MIN_RATE} bytes/s); giving up", secs(.after))]
    TooSlow { url: String, after: Duration },
    #[error("{url}: connection lost: {reason}")]
    Network { url: String, reason: String },
    #[error("{url}: TLS: {reason}")]
    Tls { url: String, reason: String },
    #[error("{url}: bad HTTP response: {reason}")]
    Protocol { url: String, reason: String },
    #[error("{url}: server answered {status} {reason}")]
    Status {
        url: String,
        status: u16,
        reason: String,
        /// `WWW-Authenticate` of a 401: how the server wants to be asked.
        challenge: Option<String>,
    },
    #[error("{url}: too many redirects (more than {MAX_REDIRECTS})")]
    TooManyRedirects { url: String },
    #[error(
        "{url}: redirect to {location} refused: berth follows redirects to http:// and \
         https:// (from https://, to https:// only; the fleet's GET requests only)"
    )]
    RedirectRefused { url: String, location: String },
    #[error("{url}: truncated: {}", truncation(*.got, *.expected))]
    Truncated {
        url: String,
        got: u64,
        expected: Option<u64>,
    },
    #[error("{url}: {reason}")]
    Unavailable { url: String, reason: String },
    #[error("{url} too large: more than {limit} bytes")]
    TooLarge { url: String, limit: u64 },
    #[error("cannot read {} ({url}): {}", .path.display(), io_reason(.error))]
    ReadFile {
        path: PathBuf,
        url: String,
        error: io::Error,
    },
    #[error("cannot write {} (fetching {url}): {}", .path.display(), io_reason(.error))]
    Write {
        path: PathBuf,
        url: String,
        error: io::Error,
    },
}

impl FetchError {
    /// The destination's file system is full: the caller can say so and suggest `berth gc`.
    /// A failure of the source (it cannot be reached, does not answer in time, answers with an
    /// error or cuts the body short), after which another source of the same repository may do
    /// better; not a failure of the bytes or of this device.
    pub fn is_source_failure(&self) -> bool {
        matches!(
            self,
            FetchError::Resolve { .. }
                | FetchError::Connect { .. }
                | FetchError::Timeout { .. }
                | FetchError::TooSlow { .. }
                | FetchError::Network { .. }
                | FetchError::Tls { .. }
                | FetchError::Unavailable { .. }
                | FetchError::Protocol { .. }
                | FetchError::Status { .. }
                | FetchError::TooManyRedirects { .. }
                | FetchError::RedirectRefused { .. }
                | FetchError::Truncated { .. }
                | FetchError::ReadFile { .. }
        )
    }

    pub fn is_no_space(&self) -> bool {
        match self {
            FetchError::Write { error, .. } => {
                matches!(
                    error.raw_os_error(),
                    Some(libc::ENOSPC) | Some(libc::EDQUOT)
                )
            }
            _ => false,
        }
    }
}

fn secs(d: &Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

fn truncation(got: u64, expected: Option<u64>) -> String {
    match expected {
        Some(expected) => format!("got {got} of {expected} bytes"),
        None => format!("chunked body ended after {got} bytes without its last chunk"),
    }
}

/// `io::Error` text without the "(os error N)" tail, lowercase like our own messages.
fn io_reason(e: &io::Error) -> String {
    let text = e.to_string();
    let text = match text.rfind(" (os error ") {
        Some(i) if text.ends_with(')') => &text[..i],
        _ => &text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The network knobs; tests shorten them.
#[derive(Debug, Clone, Copy)]
pub struct Fetcher {
    pub connect_timeout: Duration,
    /// How long one read may wait for data, not a bound on the whole transfer.
    pub read_timeout: Duration,
    /// The least time a whole fetch is given (more for large limits, see MIN_RATE).
    pub min_total: Duration,
}

impl Default for Fetcher {
    fn default() -> Self {
        Fetcher {
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            min_total: Duration::from_secs(60),
        }
    }
}

/// The fleet client's TLS files, by their keys in berth.toml.
#[cfg(any(feature = "fleet", feature = "vendor"))]
const FLEET_TLS: [&str; 3] = ["[fleet] ca_file", "[fleet] cert_file", "[fleet] key_file"];
#[cfg(not(any(feature = "fleet", feature = "vendor")))]
const FLEET_TLS: [&str; 3] = ["", "", ""];

/// What berth.toml says about every download ([`set_defaults`]).
#[derive(Debug, Default)]
pub struct Defaults {
    /// `[network] proxy`: None, the environment's; `""`, none.
    pub proxy: Option<String>,
    /// `repository_ca_file`: the CAs of https:// downloads other than the fleet server's.
    pub ca_file: Option<PathBuf>,
}

static DEFAULTS: std::sync::OnceLock<Defaults> = std::sync::OnceLock::new();

/// Sets what every later download uses; once per process (the daemon's start: berth.toml is
/// read once).
pub fn set_defaults(d: Defaults) {
    let _ = DEFAULTS.set(d);
}

thread_local! {
    /// The session's libcurl handle on this thread: None outside a [`session`]; inside one,
    /// the handle (with its open connections and TLS sessions) between two fetches.
    static SESSION: std::cell::RefCell<Option<Option<Easy>>> = const { std::cell::RefCell::new(None) };
}

/// Fetches on this thread share one libcurl handle until the guard is dropped: a fleet
/// poll's requests, an update's index and signature, go over one connection (and one TLS
/// handshake) when the server keeps it open. Dropping the guard closes them: nothing stays
/// open between polls. Outside a session every fetch has a handle of its own.
pub struct Session {
    outer: bool,
}

pub fn session() -> Session {
    SESSION.with(|s| {
        let mut s = s.borrow_mut();
        let outer = s.is_none();
        if outer {
            *s = Some(None);
        }
        Session { outer }
    })
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.outer {
            // Taken out first: the handle's cleanup runs with the cell free.
            let held = SESSION.with(|s| s.borrow_mut().take());
            drop(held);
        }
    }
}

/// Appends `rel` to the repository `base`. `rel` comes from the signed index; `..` segments are
/// still refused so that a `file://` repository can never name a file outside itself.
pub fn join_url(base: &str, rel: &str) -> Result<String, FetchError> {
    parse_url(base)?;
    let bad = |reason| FetchError::BadUrl {
        url: rel.to_owned(),
        reason,
    };
    if rel.is_empty() {
        return Err(bad("empty relative path"));
    }
    if rel.contains("://") {
        return Err(bad("expected a path relative to the repository"));
    }
    let rel = rel.trim_start_matches('/');
    if rel.split('/').any(|seg| seg == "..") {
        return Err(bad("'..' is not allowed in repository paths"));
    }
    let joined = format!("{}/{rel}", base.trim_end_matches('/'));
    parse_url(&joined)?;
    Ok(joined)
}

/// Fetch a whole small resource into memory (index.json and .sig), at most `limit` bytes.
#[cfg(test)]
pub fn fetch_bytes(url: &str, limit: u64) -> Result<Vec<u8>, FetchError> {
    Fetcher::default().fetch_bytes(url, limit)
}

/// Stream a resource into `dest` (an already-open file), calling `progress` at most ~10 times a
/// second; returns the byte count. Computes sha256 on the fly and returns it (lowercase hex) so
/// the caller does not re-read the file.
#[cfg(test)]
pub fn fetch_to(
    url: &str,
    dest: &mut File,
    limit: u64,
    progress: &mut dyn FnMut(Progress),
) -> Result<(u64, String), FetchError> {
    Fetcher::default().fetch_to(url, dest, limit, progress)
}

/// What a GET asks beyond the resource itself.
#[derive(Debug, Default, Clone, Copy)]
struct Ask<'a> {
    /// `If-None-Match`: the entity tag of the copy already held.
    if_none_match: Option<&'a str>,
    /// `Range: bytes=FROM-`: the first FROM bytes are already held.
    from: u64,
    /// The fleet client's requests: a method other than GET with a JSON body, and an
    /// `Authorization` header (docs/fleet.md).
    #[cfg(any(feature = "fleet", feature = "vendor"))]
    call: Option<Call<'a>>,
}

/// A request beyond a plain GET: the fleet client's DDI calls, a registry's.
#[cfg(any(feature = "fleet", feature = "vendor"))]
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// `GET`, `PUT` or `POST`.
    pub method: &'a str,
    /// The `Authorization` header's value, if any: never sent to another origin.
    pub auth: Option<&'a str>,
    /// A JSON body (PUT and POST).
    pub json: Option<&'a [u8]>,
    /// The TLS files of https:// URLs; None: the repository's (or the system's store).
    pub tls: Option<TlsFiles<'a>>,
    /// More `Name: value` headers (a registry's `Accept`).
    pub headers: &'a [String],
}

/// A CA file, and the device's certificate and key, for https:// requests.
#[cfg(any(feature = "fleet", feature = "vendor"))]
#[derive(Debug, Default, Clone, Copy)]
pub struct TlsFiles<'a> {
    pub files: curl::Tls<'a>,
    /// What the three are called where the user sets them (for messages).
    pub names: [&'static str; 3],
}

#[cfg(feature = "fleet")]
impl<'a> From<&'a berth_core::config::FleetTls> for TlsFiles<'a> {
    fn from(t: &'a berth_core::config::FleetTls) -> Self {
        TlsFiles {
            files: curl::Tls {
                ca_file: t.ca_file.as_deref(),
                cert_file: t.cert_file.as_deref(),
                key_file: t.key_file.as_deref(),
            },
            names: FLEET_TLS,
        }
    }
}

/// How a fetch ended, beyond its bytes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The server said the copy named by `If-None-Match` is current (304): no body.
    pub not_modified: bool,
    /// The server's entity tag for what it sent (or confirmed).
    pub etag: Option<String>,
    /// The bytes already held were kept and the rest appended (206).
    pub resumed: bool,
}

/// The body's bytes, or the news that what was received so far must be dropped (a server
/// that ignored a range request sends the whole resource from its first byte).
enum Piece<'a> {
    Data(&'a [u8]),
    Restart,
}

/// A small resource unless it is unchanged since `etag` (`If-None-Match`): `Ok((None, …))`
/// when the server answered 304 Not Modified.
pub fn fetch_bytes_if(
    url: &str,
    limit: u64,
    etag: Option<&str>,
) -> Result<(Option<Vec<u8>>, Answer), FetchError> {
    Fetcher::default().fetch_bytes_if(url, limit, etag)
}

/// [`fetch_to`], resuming after the first `have` bytes already in `dest` (a `Range` request):
/// they are hashed from `dest` first and kept if the server answers 206 for exactly that
/// range; a server that sends the whole resource instead (200), or refuses the range (416),
/// has `dest` emptied and written from its start. The sha256 is of the whole file either way.
pub fn fetch_resume(
    url: &str,
    dest: &mut File,
    have: u64,
    limit: u64,
    progress: &mut dyn FnMut(Progress),
) -> Result<(u64, String, Answer), FetchError> {
    Fetcher::default().fetch_resume(url, dest, have, limit, progress)
}

impl Fetcher {
    pub fn fetch_bytes(&self, url: &str, limit: u64) -> Result<Vec<u8>, FetchError> {
        Ok(self.fetch_bytes_if(url, limit, None)?.0.unwrap_or_default())
    }

    // Without the fleet client, `Ask` has no field beyond those named.
    #[cfg_attr(
        not(any(feature = "fleet", feature = "vendor")),
        allow(clippy::needless_update)
    )]
    pub fn fetch_bytes_if(
        &self,
        url: &str,
        limit: u64,
        etag: Option<&str>,
    ) -> Result<(Option<Vec<u8>>, Answer), FetchError> {
        let mut out = Vec::new();
        let ask = Ask {
            if_none_match: etag,
            from: 0,
            ..Ask::default()
        };
        let (_, answer) = self.fetch(url, limit, ask, &mut |_| {}, &mut |piece| {
            match piece {
                Piece::Data(data) => out.extend_from_slice(data),
                Piece::Restart => out.clear(),
            }
            Ok(())
        })?;
        Ok(((!answer.not_modified).then_some(out), answer))
    }

    pub fn fetch_resume(
        &self,
        url: &str,
        dest: &mut File,
        have: u64,
        limit: u64,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(u64, String, Answer), FetchError> {
        self.resume(
            url,
            dest,
            have,
            limit,
            progress,
            #[cfg(any(feature = "fleet", feature = "vendor"))]
            None,
        )
    }

    /// A DDI request: `call`'s method, authorization and JSON body; the answer's body, at
    /// most `limit` bytes. Redirects are followed for GET only.
    #[cfg(any(feature = "fleet", feature = "vendor"))]
    pub fn call(&self, url: &str, call: Call, limit: u64) -> Result<Vec<u8>, FetchError> {
        let mut out = Vec::new();
        let ask = Ask {
            call: Some(call),
            ..Ask::default()
        };
        self.fetch(url, limit, ask, &mut |_| {}, &mut |piece| {
            match piece {
                Piece::Data(data) => out.extend_from_slice(data),
                Piece::Restart => out.clear(),
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// [`Fetcher::fetch_resume`] as a DDI call (a DDI artifact: GET, with the server's
    /// `Authorization` and TLS options).
    #[cfg(any(feature = "fleet", feature = "vendor"))]
    pub fn fetch_resume_call(
        &self,
        url: &str,
        call: Call,
        dest: &mut File,
        have: u64,
        limit: u64,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(u64, String, Answer), FetchError> {
        self.resume(url, dest, have, limit, progress, Some(call))
    }

    #[cfg_attr(
        not(any(feature = "fleet", feature = "vendor")),
        allow(clippy::needless_update)
    )]
    fn resume(
        &self,
        url: &str,
        dest: &mut File,
        have: u64,
        limit: u64,
        progress: &mut dyn FnMut(Progress),
        #[cfg(any(feature = "fleet", feature = "vendor"))] call: Option<Call>,
    ) -> Result<(u64, String, Answer), FetchError> {
        use std::io::{Seek, SeekFrom};
        let write_err = |dest: &File, error: io::Error| FetchError::Write {
            path: fd_path(dest),
            url: url.to_owned(),
            error,
        };
        let mut hasher = Sha256::new();
        if have > 0 {
            dest.seek(SeekFrom::Start(0))
                .map_err(|e| write_err(dest, e))?;
            let mut held = (&mut *dest).take(have);
            let copied = io::copy(&mut held, &mut HashWriter(&mut hasher))
                .map_err(|e| write_err(dest, e))?;
            if copied != have {
                return Err(write_err(
                    dest,
                    io::Error::other(format!("held {copied} bytes, expected {have}")),
                ));
            }
        }
        dest.seek(SeekFrom::Start(have))
            .map_err(|e| write_err(dest, e))?;
        #[allow(unused_mut)]
        let mut ask = Ask {
            if_none_match: None,
            from: have,
            ..Ask::default()
        };
        #[cfg(any(feature = "fleet", feature = "vendor"))]
        {
            ask.call = call;
        }
        let (count, answer) = self.fetch(url, limit, ask, progress, &mut |piece| match piece {
            Piece::Data(data) => {
                hasher.update(data);
                dest.write_all(data).map_err(|e| write_err(dest, e))
            }
            Piece::Restart => {
                hasher = Sha256::new();
                dest.set_len(0)
                    .and_then(|()| dest.seek(SeekFrom::Start(0)).map(|_| ()))
                    .map_err(|e| write_err(dest, e))
            }
        })?;
        let mut hex = String::with_capacity(64);
        for b in hasher.finalize() {
            let _ = write!(hex, "{b:02x}");
        }
        Ok((count, hex, answer))
    }

    #[cfg(test)]
    /// Writes from `dest`'s current position and does not sync: the caller decides when the
    /// file is complete (fsync, rename into the store).
    pub fn fetch_to(
        &self,
        url: &str,
        dest: &mut File,
        limit: u64,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(u64, String), FetchError> {
        let mut hasher = Sha256::new();
        let (count, _) = self.fetch(url, limit, Ask::default(), progress, &mut |piece| {
            // A plain GET asks for no range: nothing ever restarts.
            let Piece::Data(data) = piece else {
                return Ok(());
            };
            hasher.update(data);
            dest.write_all(data).map_err(|error| FetchError::Write {
                path: fd_path(dest),
                url: url.to_owned(),
                error,
            })
        })?;
        let mut hex = String::with_capacity(64);
        for b in hasher.finalize() {
            let _ = write!(hex, "{b:02x}");
        }
        Ok((count, hex))
    }

    fn fetch(
        &self,
        url: &str,
        limit: u64,
        ask: Ask,
        progress: &mut dyn FnMut(Progress),
        sink: &mut dyn FnMut(Piece) -> Result<(), FetchError>,
    ) -> Result<(u64, Answer), FetchError> {
        let allowed = Duration::from_secs(limit / MIN_RATE).max(self.min_total);
        let deadline = (Instant::now() + allowed, allowed);
        // One handle for the redirects' hops (a connection to the same server is reused), the
        // session's if there is one.
        let mut easy = SESSION.with(|s| s.borrow_mut().as_mut().and_then(Option::take));
        let result = self.hops(url, limit, ask, deadline, &mut easy, progress, sink);
        SESSION.with(|s| {
            if let Some(slot) = s.borrow_mut().as_mut() {
                *slot = easy.take();
            }
        });
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn hops(
        &self,
        url: &str,
        limit: u64,
        mut ask: Ask,
        deadline: (Instant, Duration),
        easy: &mut Option<Easy>,
        progress: &mut dyn FnMut(Progress),
        sink: &mut dyn FnMut(Piece) -> Result<(), FetchError>,
    ) -> Result<(u64, Answer), FetchError> {
        let mut current = url.to_owned();
        let mut hops = 0;
        while hops <= MAX_REDIRECTS {
            let mut body = Body {
                url: &current,
                limit,
                deadline,
                done: 0,
                total: None,
                sink: &mut *sink,
                progress: &mut *progress,
                last_report: None,
            };
            let outcome = match parse_url(&current)? {
                Url::File(path) => read_file(&path, &mut body, ask.from).map(|resumed| {
                    Got::Done(Answer {
                        resumed,
                        ..Answer::default()
                    })
                }),
                Url::Http(http) => self.get(easy, &http, &mut body, ask),
            };
            match outcome? {
                Got::Done(answer) => {
                    body.report(true);
                    return Ok((body.done, answer));
                }
                Got::Redirect(location) => {
                    // The token goes to its own server only, never to a host a redirect names.
                    #[cfg(any(feature = "fleet", feature = "vendor"))]
                    if let Some(c) = ask.call.as_mut() {
                        if origin(&location) != origin(&current) {
                            c.auth = None;
                        }
                    }
                    current = location;
                    hops += 1;
                }
                // 416: the range is not there (the resource shrank or was replaced): the
                // bytes held are dropped and it is asked for whole, once.
                Got::RangeRefused if ask.from > 0 => {
                    (body.sink)(Piece::Restart)?;
                    ask.from = 0;
                }
                Got::RangeRefused => {
                    return Err(FetchError::Status {
                        url: current.clone(),
                        status: 416,
                        reason: "Range Not Satisfiable".into(),
                        challenge: None,
                    })
                }
            }
        }
        Err(FetchError::TooManyRedirects {
            url: url.to_owned(),
        })
    }

    /// One request through libcurl; returns the redirect target, if the server sent one.
    fn get(
        &self,
        easy: &mut Option<Easy>,
        url: &HttpUrl,
        body: &mut Body,
        ask: Ask,
    ) -> Result<Got, FetchError> {
        let full = body.url.to_owned();
        let easy = match easy {
            Some(e) => e,
            None => easy.insert(Easy::new().map_err(|reason| FetchError::Unavailable {
                url: full.clone(),
                reason,
            })?),
        };
        let mut headers = vec!["Accept-Encoding: identity".to_owned(), "Expect:".to_owned()];
        if let Some(tag) = ask.if_none_match {
            headers.push(format!("If-None-Match: {tag}"));
        }
        let defaults = DEFAULTS.get();
        // The repository's CA file, unless the fleet's own TLS options say otherwise.
        #[allow(unused_mut)]
        let mut tls = curl::Tls {
            ca_file: defaults.and_then(|d| d.ca_file.as_deref()),
            ..curl::Tls::default()
        };
        #[allow(unused_mut)]
        let mut names = ["repository_ca_file", "", ""];
        #[allow(unused_mut)]
        let (mut method, mut json) = (Method::Get, &[][..]);
        #[cfg(any(feature = "fleet", feature = "vendor"))]
        if let Some(c) = ask.call {
            if let Some(a) = c.auth {
                headers.push(format!("Authorization: {a}"));
            }
            if let Some(j) = c.json {
                headers.push("Content-Type: application/json".to_owned());
                json = j;
            }
            if c.method != "GET" || c.json.is_some() {
                headers.push("Accept: application/json".to_owned());
            }
            method = match c.method {
                "PUT" => Method::Put,
                "POST" => Method::Post,
                _ => Method::Get,
            };
            headers.extend(c.headers.iter().cloned());
            if let Some(t) = c.tls {
                (tls, names) = (t.files, t.names);
            }
        }
        // Said plainly here: libcurl only finds out in the handshake, in its own words.
        let files = [tls.ca_file, tls.cert_file, tls.key_file];
        for (name, file) in names.iter().zip(files) {
            if let (true, Some(path)) = (url.tls, file) {
                if let Err(e) = File::open(path) {
                    return Err(FetchError::Tls {
                        url: full,
                        reason: format!("{name} {}: {}", path.display(), io_reason(&e)),
                    });
                }
            }
        }
        body.check_deadline()?;
        // libcurl counts idle time in whole seconds.
        let t = self.read_timeout;
        let idle = Duration::from_secs((t.as_secs() + u64::from(t.subsec_nanos() > 0)).max(1));
        let request = Request {
            url: &full,
            method,
            headers: &headers,
            body: json,
            range_from: ask.from,
            timeout: body.deadline.0.saturating_duration_since(Instant::now()),
            connect_timeout: self.connect_timeout,
            idle,
            tls,
            proxy: defaults.and_then(|d| d.proxy.as_deref()),
        };
        let mut ex = Exchange {
            body,
            ask: &ask,
            head: Vec::new(),
            raw_head: Vec::new(),
            interim: 0,
            phase: Phase::Head,
            answer: Answer::default(),
            early: None,
            skipped: 0,
        };
        let out = easy.perform(&request, &mut ex);
        let got_head = !matches!(ex.phase, Phase::Head);
        match ex.early.take() {
            Some(Ok(Got::Redirect(location))) => return redirect(url, &full, ask, &out, location),
            Some(done) => return done,
            None => {}
        }
        if out.code == curl::code::OK && got_head {
            return Ok(Got::Done(ex.answer));
        }
        let e = self.failure(&out, url, &full, ex.body, got_head, idle);
        // Some servers (Python's asyncio TLS, so uvicorn) close a session whose client
        // certificate is missing without an alert: the likely reason is worth saying.
        let silent = match &e {
            FetchError::Tls { reason, .. } => reason.ends_with("without answering"),
            FetchError::Protocol { reason, .. } => reason.ends_with("before a response"),
            _ => false,
        };
        // The hint is for the fleet's calls, the only ones with a certificate to show.
        if url.tls && !got_head && silent && names == FLEET_TLS {
            let hint = if request.tls.cert_file.is_some() {
                ""
            } else {
                " (servers that require a client certificate do this when none is shown: \
                 [fleet] cert_file and key_file)"
            };
            return Err(FetchError::Tls {
                url: full,
                reason: format!("the server closed the session without answering{hint}"),
            });
        }
        Err(e)
    }

    /// What a transfer that libcurl ended with `out.code` came to.
    fn failure(
        &self,
        out: &Outcome,
        url: &HttpUrl,
        full: &str,
        body: &Body,
        got_head: bool,
        idle: Duration,
    ) -> FetchError {
        use curl::code;
        let url_s = full.to_owned();
        let reason = || out.message.clone();
        match out.code {
            code::OK | code::GOT_NOTHING => FetchError::Protocol {
                url: url_s,
                reason: "connection closed before a response".into(),
            },
            code::COULDNT_RESOLVE_HOST => FetchError::Resolve {
                host: url.host.clone(),
                url: url_s,
                reason: reason(),
            },
            code::COULDNT_RESOLVE_PROXY => FetchError::Resolve {
                host: "the proxy".into(),
                url: url_s,
                reason: reason(),
            },
            code::PROXY => FetchError::Connect {
                addr: "the proxy".into(),
                url: url_s,
                reason: reason(),
            },
            code::COULDNT_CONNECT => FetchError::Connect {
                addr: url.addr(),
                url: url_s,
                reason: if out.os_errno != 0 {
                    io_reason(&io::Error::from_raw_os_error(out.os_errno))
                } else {
                    reason()
                },
            },
            code::OPERATION_TIMEDOUT if !got_head && out.primary_ip.is_empty() => {
                FetchError::Connect {
                    addr: url.addr(),
                    url: url_s,
                    reason: format!("timed out after {}", secs(&self.connect_timeout)),
                }
            }
            // libcurl's own clock may end the transfer a moment before berth's deadline.
            code::OPERATION_TIMEDOUT
                if !out.message.contains("too slow")
                    && Instant::now() + Duration::from_millis(100) >= body.deadline.0 =>
            {
                FetchError::TooSlow {
                    url: url_s,
                    after: body.deadline.1,
                }
            }
            code::OPERATION_TIMEDOUT => FetchError::Timeout {
                url: url_s,
                after: idle,
            },
            code::PARTIAL_FILE => FetchError::Truncated {
                url: url_s,
                got: body.done,
                expected: body.total,
            },
            code::FILESIZE_EXCEEDED => body.too_large(),
            code::SEND_ERROR | code::RECV_ERROR if url.tls && !got_head => FetchError::Tls {
                url: url_s,
                reason: if out.message.contains("alert ") {
                    tls_reason(out.code, &out.message)
                } else {
                    "the server closed the session without answering".into()
                },
            },
            c if code::is_tls(c) => FetchError::Tls {
                url: url_s,
                reason: tls_reason(c, &out.message),
            },
            code::UNSUPPORTED_PROTOCOL | code::NOT_BUILT_IN | code::UNKNOWN_OPTION => {
                FetchError::Unavailable {
                    url: url_s,
                    reason: reason(),
                }
            }
            code::WEIRD_SERVER_REPLY | code::BAD_CONTENT_ENCODING | code::URL_MALFORMAT => {
                FetchError::Protocol {
                    url: url_s,
                    reason: reason(),
                }
            }
            _ => FetchError::Network {
                url: url_s,
                reason: if out.message.is_empty() {
                    format!("libcurl error {}", out.code)
                } else {
                    reason()
                },
            },
        }
    }
}

/// A 3xx's target, if berth follows it: GET only for the fleet's calls, from https:// to
/// https:// only, never to another scheme.
#[cfg_attr(
    not(any(feature = "fleet", feature = "vendor")),
    allow(unused_variables)
)]
fn redirect(
    url: &HttpUrl,
    full: &str,
    ask: Ask,
    out: &Outcome,
    location: String,
) -> Result<Got, FetchError> {
    // libcurl's resolution of a relative Location; berth's when the transfer ended at the
    // head (libcurl resolves it only after).
    let target = out
        .redirect
        .clone()
        .unwrap_or_else(|| resolve_location(full, &location));
    let refused = || FetchError::RedirectRefused {
        url: full.to_owned(),
        location: target.clone(),
    };
    #[cfg(any(feature = "fleet", feature = "vendor"))]
    if ask.call.is_some_and(|c| c.method != "GET") {
        return Err(refused());
    }
    match parse_url(&target) {
        Ok(Url::Http(to)) if to.tls || !url.tls => Ok(Got::Redirect(target)),
        Err(e @ FetchError::Scheme { .. }) => Err(e),
        _ => Err(refused()),
    }
}

/// A Location header resolved against the URL that answered with it (RFC 9110 §10.2.2,
/// RFC 3986 §5.2; dot segments are left to the server). What comes out is checked by
/// `parse_url` like any URL.
fn resolve_location(base: &str, location: &str) -> String {
    // An absolute reference starts with a scheme: a letter, then letters, digits, + - .
    let scheme = location.find(':').filter(|&i| {
        i > 0
            && location[..i].bytes().enumerate().all(|(j, b)| {
                b.is_ascii_alphabetic() || (j > 0 && (b.is_ascii_digit() || b"+-.".contains(&b)))
            })
    });
    if scheme.is_some() {
        return location.to_owned();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    if let Some(net) = location.strip_prefix("//") {
        return format!("{scheme}://{net}");
    }
    let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    if location.starts_with('/') {
        return format!("{scheme}://{authority}{location}");
    }
    let path = path.split(['?', '#']).next().unwrap_or("");
    // A query or a fragment alone keeps the path.
    if location.starts_with(['?', '#']) {
        let path = if path.is_empty() { "/" } else { path };
        return format!("{scheme}://{authority}{path}{location}");
    }
    let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
    let dir = if dir.is_empty() { "/" } else { dir };
    format!("{scheme}://{authority}{dir}{location}")
}

/// libcurl's TLS failure in berth's words. OpenWrt's libcurl is built without its messages
/// ("Error"): the code then says what failed.
fn tls_reason(code: i32, message: &str) -> String {
    use curl::code as c;
    if let Some(why) = message.strip_prefix("SSL certificate problem: ") {
        // A certificate's dates are always checked; a clock not set yet is said so.
        let clock = if berth_core::date::clock_set(berth_sys::process::now_s()) {
            ""
        } else {
            " (this device's clock is not set yet, before 2026: NTP must set it before a certificate's dates can be checked)"
        };
        return format!("the server's certificate failed verification: {why}{clock}");
    }
    if let Some(why) = message.strip_prefix("SSL: ") {
        return format!("the server's certificate failed verification: {why}");
    }
    if let Some((_, alert)) = message.split_once("alert ") {
        let alert = alert.split(',').next().unwrap_or(alert).trim();
        return format!("the server refused the session: {alert}");
    }
    if !message.is_empty() && message != "Error" {
        return message.to_owned();
    }
    match code {
        c::PEER_FAILED_VERIFICATION => "the server's certificate failed verification",
        c::SSL_CACERT_BADFILE => "cannot read the CA file",
        c::SSL_CERTPROBLEM | c::SSL_CLIENTCERT => "cannot use the device's certificate or key",
        c::SSL_CONNECT_ERROR => "the TLS handshake failed",
        _ => "the TLS session failed",
    }
    .to_owned()
}

/// The value of the header `name` (lowercase) in a raw response head.
fn header(head: &[u8], name: &str) -> Option<String> {
    String::from_utf8_lossy(head).lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_owned())
    })
}

/// Where the stages of a response are.
enum Phase {
    /// Reading a head (interim ones included).
    Head,
    /// The final head said a body follows: it goes to the sink.
    Body,
    /// The final head decided the request (a redirect, 304, 416, 204): what follows is
    /// read off and dropped, at most [`SKIP_LIMIT`] bytes, so the connection can be reused.
    Skip,
}

/// The most bytes of an answer without a use (a redirect's page) read before giving up on it.
const SKIP_LIMIT: u64 = 64 * 1024;

/// One request's answer as libcurl hands it over: heads, then body bytes.
struct Exchange<'b, 'a> {
    body: &'b mut Body<'a>,
    ask: &'b Ask<'b>,
    head: Vec<u8>,
    /// The last complete head as received (for a header berth does not parse).
    raw_head: Vec<u8>,
    interim: usize,
    phase: Phase,
    /// The final head's answer, for a body that follows.
    answer: Answer,
    /// What the request came to before its body: a decision from the final head, or why a
    /// callback stopped the transfer.
    early: Option<Result<Got, FetchError>>,
    skipped: u64,
}

impl Exchange<'_, '_> {
    /// Stops the transfer for `e`; a decision already made stands.
    fn fail(&mut self, e: FetchError) -> bool {
        if !matches!(self.early, Some(Ok(_))) {
            self.early = Some(Err(e));
        }
        false
    }

    fn protocol(&self, reason: String) -> FetchError {
        FetchError::Protocol {
            url: self.body.url.to_owned(),
            reason,
        }
    }

    /// The final head's decision: whether a body follows, or what the request came to.
    fn decide(&mut self, head: ResponseHead) -> Result<Option<Got>, FetchError> {
        let ask = self.ask;
        let body = &mut *self.body;
        if matches!(head.status, 301 | 302 | 303 | 307 | 308) {
            if head.location.is_none() {
                return Err(self.protocol(format!(
                    "redirect {} without a Location header",
                    head.status
                )));
            }
            // libcurl resolves the target once the transfer is over.
            return Ok(Some(Got::Redirect(head.location.unwrap_or_default())));
        }
        if head.status == 304 && ask.if_none_match.is_some() {
            return Ok(Some(Got::Done(Answer {
                not_modified: true,
                etag: head.etag.or_else(|| ask.if_none_match.map(String::from)),
                resumed: false,
            })));
        }
        if head.status == 416 {
            return Ok(Some(Got::RangeRefused));
        }
        if !(200..300).contains(&head.status) {
            let challenge =
                (head.status == 401).then(|| header(&self.raw_head, "www-authenticate"));
            return Err(FetchError::Status {
                url: body.url.to_owned(),
                status: head.status,
                reason: head.reason,
                challenge: challenge.flatten(),
            });
        }
        let mut resumed = false;
        if head.status == 206 {
            // Only the range asked for is taken: from the first byte not held to the end.
            match head.content_range {
                Some(r) if ask.from > 0 && r.first == ask.from => {
                    body.done = ask.from;
                    resumed = true;
                }
                other => {
                    let from = ask.from;
                    return Err(self.protocol(format!(
                        "206 for a range not asked for ({other:?}; asked from byte {from})"
                    )));
                }
            }
        } else if ask.from > 0 {
            // The server ignored the range: the whole resource follows.
            (body.sink)(Piece::Restart)?;
        }
        self.answer = Answer {
            not_modified: false,
            etag: head.etag,
            resumed,
        };
        if head.status == 204 {
            return Ok(Some(Got::Done(self.answer.clone())));
        }
        if let Framing::Length(len) = head.framing {
            // A resumed body's length is what remains after the bytes held.
            let whole = body.done.saturating_add(len);
            if whole > body.limit {
                return Err(body.too_large());
            }
            body.total = Some(whole);
            body.report(false);
        }
        Ok(None)
    }
}

impl curl::Handler for Exchange<'_, '_> {
    fn header(&mut self, line: &[u8]) -> bool {
        // Lines after the final head are a chunked body's trailers.
        if !matches!(self.phase, Phase::Head) {
            return true;
        }
        self.head.extend_from_slice(line);
        if !self.head.ends_with(b"\n") && self.head.len() <= http::MAX_RESPONSE_HEAD {
            return true;
        }
        let head = match http::parse_response_head(&self.head) {
            Ok(Some((head, _))) => head,
            Ok(None) => return true,
            Err(e) => return self.fail(self.protocol(e.to_string())),
        };
        self.raw_head = std::mem::take(&mut self.head);
        // 1xx are interim answers (100 Continue); the real one follows.
        if (100..200).contains(&head.status) {
            self.interim += 1;
            if self.interim > MAX_INTERIM {
                let e = self.protocol(format!("more than {MAX_INTERIM} interim (1xx) answers"));
                return self.fail(e);
            }
            return true;
        }
        let small = matches!(head.framing, Framing::Length(n) if n <= SKIP_LIMIT);
        match self.decide(head) {
            Ok(None) => {
                self.phase = Phase::Body;
                true
            }
            // A redirect's or a refused range's page is read off only when it is short and
            // its length said (the connection is then kept); otherwise the transfer ends here.
            Ok(Some(got)) => {
                let keep = small || matches!(got, Got::Done(_));
                self.phase = Phase::Skip;
                self.early = Some(Ok(got));
                keep
            }
            Err(e) => {
                self.phase = Phase::Skip;
                self.fail(e)
            }
        }
    }

    fn data(&mut self, data: &[u8]) -> bool {
        match self.phase {
            Phase::Body => match self.body.push(data) {
                Ok(()) => true,
                Err(e) => self.fail(e),
            },
            Phase::Skip => {
                self.skipped += data.len() as u64;
                self.skipped <= SKIP_LIMIT
            }
            Phase::Head => {
                let e = self.protocol("body bytes before the response head".into());
                self.fail(e)
            }
        }
    }

    fn tick(&mut self) -> bool {
        match self.body.check_deadline() {
            Ok(()) => true,
            Err(e) => self.fail(e),
        }
    }
}

fn read_some(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match reader.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// A `file://` resource, from byte `from` when that many are held (and the file still has
/// them); whether the bytes held were kept.
fn read_file(path: &Path, body: &mut Body, from: u64) -> Result<bool, FetchError> {
    use std::io::{Seek, SeekFrom};
    let read_err = |error| FetchError::ReadFile {
        path: path.to_owned(),
        url: body.url.to_owned(),
        error,
    };
    let mut file = File::open(path).map_err(read_err)?;
    let len = file.metadata().map_err(read_err)?.len();
    if len > body.limit {
        return Err(body.too_large());
    }
    let resumed = from > 0 && from <= len;
    if resumed {
        file.seek(SeekFrom::Start(from)).map_err(read_err)?;
        body.done = from;
    } else if from > 0 {
        (body.sink)(Piece::Restart)?;
    }
    body.total = Some(len);
    body.report(false);
    let mut buf = vec![0u8; BUF_SIZE];
    loop {
        let n = read_some(&mut file, &mut buf).map_err(read_err)?;
        if n == 0 {
            return Ok(resumed);
        }
        // push() re-checks the limit: the file may grow while we read it.
        body.push(&buf[..n])?;
    }
}

/// What one GET came to.
enum Got {
    Done(Answer),
    Redirect(String),
    /// 416: the range asked for is not in the resource.
    RangeRefused,
}

/// Feeds a hasher through `io::copy`.
struct HashWriter<'a>(&'a mut Sha256);

impl Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The destination's path for error messages; the caller hands us only the open file.
fn fd_path(file: &File) -> PathBuf {
    let fd = file.as_raw_fd();
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .unwrap_or_else(|_| PathBuf::from(format!("file descriptor {fd}")))
}

/// Where body bytes go, with the counting, limit and progress shared by every transport.
struct Body<'a> {
    url: &'a str,
    limit: u64,
    /// When the whole fetch must be done, and how long that was.
    deadline: (Instant, Duration),
    done: u64,
    total: Option<u64>,
    sink: &'a mut dyn FnMut(Piece) -> Result<(), FetchError>,
    progress: &'a mut dyn FnMut(Progress),
    last_report: Option<Instant>,
}

impl Body<'_> {
    fn check_deadline(&self) -> Result<(), FetchError> {
        if Instant::now() > self.deadline.0 {
            return Err(FetchError::TooSlow {
                url: self.url.to_owned(),
                after: self.deadline.1,
            });
        }
        Ok(())
    }

    fn push(&mut self, data: &[u8]) -> Result<(), FetchError> {
        if self.done.saturating_add(data.len() as u64) > self.limit {
            return Err(self.too_large());
        }
        self.check_deadline()?;
        (self.sink)(Piece::Data(data))?;
        self.done += data.len() as u64;
        self.report(false);
        Ok(())
    }

    fn report(&mut self, last: bool) {
        let now = Instant::now();
        let recent = matches!(self.last_report, Some(t) if now - t < PROGRESS_INTERVAL);
        if last || !recent {
            self.last_report = Some(now);
            (self.progress)(Progress {
                done: self.done,
                total: self.total,
            });
        }
    }

    fn too_large(&self) -> FetchError {
        FetchError::TooLarge {
            url: self.url.to_owned(),
            limit: self.limit,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Url {
    Http(HttpUrl),
    File(PathBuf),
}

#[derive(Debug, PartialEq, Eq)]
struct HttpUrl {
    /// https://.
    tls: bool,
    /// Without brackets, as the resolver wants it.
    host: String,
    port: u16,
}

impl HttpUrl {
    /// `host:port`, with brackets for IPv6 (for messages).
    fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// `(https, host, port)` of an http:// or https:// URL; None for anything else.
#[cfg(any(feature = "fleet", feature = "vendor"))]
pub fn origin(url: &str) -> Option<(bool, String, u16)> {
    match parse_url(url) {
        Ok(Url::Http(h)) => Some((h.tls, h.host.to_ascii_lowercase(), h.port)),
        _ => None,
    }
}

/// berth's own reading of a URL, before libcurl sees it: the origin it decides the token's
/// destination by must be the one libcurl connects to, so only plain host names and
/// addresses are taken.
fn parse_url(url: &str) -> Result<Url, FetchError> {
    let bad = |reason| FetchError::BadUrl {
        url: url.to_owned(),
        reason,
    };
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| bad("expected http://HOST/PATH or file:///PATH"))?;
    // Anything that would end the request line or a header early must not reach the socket.
    if url.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(bad("spaces and control characters must be percent-encoded"));
    }
    let rest = rest.split('#').next().unwrap_or("");
    if scheme.eq_ignore_ascii_case("file") {
        let path = rest
            .strip_prefix("localhost")
            .unwrap_or(rest)
            .split('?')
            .next()
            .unwrap_or("");
        if !path.starts_with('/') {
            return Err(bad("file URLs need an absolute path: file:///PATH"));
        }
        return Ok(Url::File(PathBuf::from(
            percent_decode(path).ok_or_else(|| bad("bad percent-encoding"))?,
        )));
    }
    let tls = scheme.eq_ignore_ascii_case("https");
    if !tls && !scheme.eq_ignore_ascii_case("http") {
        return Err(FetchError::Scheme {
            scheme: scheme.to_owned(),
            url: url.to_owned(),
        });
    }
    let default_port = if tls { 443 } else { 80 };
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..split];
    if authority.contains('@') {
        return Err(bad("credentials in URLs are not supported"));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| bad("missing ']' after the IPv6 address"))?;
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(bad("bad IPv6 address"));
        }
        match after {
            "" => (host, None),
            _ => (
                host,
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| bad("unexpected text after the IPv6 address"))?,
                ),
            ),
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(bad("missing host"));
    }
    if host.contains(':') && !authority.starts_with('[') {
        return Err(bad(
            "IPv6 addresses must be in brackets: http://[::1]:8080/",
        ));
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    if !authority.starts_with('[') && !host.chars().all(plain) {
        return Err(bad(
            "a host is a name or an address: letters, digits, '.', '-' and '_'",
        ));
    }
    let port = match port {
        None | Some("") => default_port,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| bad("bad port"))?,
    };
    Ok(Url::Http(HttpUrl {
        tls,
        host: host.to_owned(),
        port,
    }))
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::thread;

    /// Serves one canned response per connection, in order, and hands back the requests.
    fn serve(responses: Vec<Vec<u8>>) -> (String, thread::JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let handle = thread::spawn(move || {
            let mut requests = Vec::new();
            for response in responses {
                let (mut stream, _) = listener.accept().unwrap();
                requests.push(read_request(&mut stream));
                let _ = stream.write_all(&response);
            }
            requests
        });
        (base, handle)
    }

    fn read_request(stream: &mut TcpStream) -> String {
        let mut request = Vec::new();
        let mut byte = [0u8];
        while !request.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap() == 1 {
            request.push(byte[0]);
        }
        String::from_utf8(request).unwrap()
    }

    fn ok(body: &[u8]) -> Vec<u8> {
        let mut r =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        r.extend_from_slice(body);
        r
    }

    fn quick() -> Fetcher {
        Fetcher {
            connect_timeout: Duration::from_secs(2),
            read_timeout: Duration::from_millis(300),
            min_total: Duration::from_secs(5),
        }
    }

    #[test]
    fn content_length_body_and_request_shape() {
        let (base, server) = serve(vec![ok(b"{\"packages\":[]}")]);
        let url = format!("{base}/repo/index.json");
        assert_eq!(fetch_bytes(&url, 1000).unwrap(), b"{\"packages\":[]}");
        let request = &server.join().unwrap()[0];
        assert!(
            request.starts_with("GET /repo/index.json HTTP/1.1\r\n"),
            "{request}"
        );
        let port = base.rsplit(':').next().unwrap();
        assert!(request.contains(&format!("\r\nHost: 127.0.0.1:{port}\r\n")));
        assert!(request.contains(&format!(
            "\r\nUser-Agent: berth/{}\r\n",
            env!("CARGO_PKG_VERSION")
        )));
    }

    #[test]
    fn chunked_body_with_extensions_and_trailers() {
        let response = b"HTTP/1.1 200 OK\r\ntransfer-ENCODING: chunked\r\n\r\n\
            5;ext=1\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nX-Trailer: y\r\n\r\n";
        let (base, server) = serve(vec![response.to_vec()]);
        assert_eq!(
            fetch_bytes(&format!("{base}/x"), 100).unwrap(),
            b"hello 0123456789"
        );
        server.join().unwrap();
    }

    #[test]
    fn read_to_close_body() {
        let (base, server) = serve(vec![b"HTTP/1.0 200 OK\r\n\r\nuntil the end".to_vec()]);
        assert_eq!(
            fetch_bytes(&format!("{base}/x"), 100).unwrap(),
            b"until the end"
        );
        server.join().unwrap();
    }

    #[test]
    fn follows_redirects() {
        let (base, server) = serve(vec![
            b"HTTP/1.1 301 Moved\r\nLocation: /new/place\r\nContent-Length: 0\r\n\r\n".to_vec(),
            b"HTTP/1.1 302 Found\r\nLocation: other\r\n\r\n".to_vec(),
            b"HTTP/1.1 100 Continue\r\n\r\n"
                .iter()
                .chain(&ok(b"here"))
                .copied()
                .collect(),
        ]);
        assert_eq!(fetch_bytes(&format!("{base}/old"), 100).unwrap(), b"here");
        let requests = server.join().unwrap();
        assert!(requests[1].starts_with("GET /new/place "));
        assert!(requests[2].starts_with("GET /new/other "));
    }

    #[test]
    fn redirect_limit_and_refused_schemes() {
        let again = b"HTTP/1.1 307 Again\r\nLocation: /loop\r\n\r\n".to_vec();
        let (base, server) = serve(vec![again; MAX_REDIRECTS + 1]);
        let err = fetch_bytes(&format!("{base}/loop"), 100).unwrap_err();
        assert!(matches!(err, FetchError::TooManyRedirects { .. }), "{err}");
        server.join().unwrap();

        let (base, server) = serve(vec![
            b"HTTP/1.1 302 Found\r\nLocation: ftp://example.org/x\r\n\r\n".to_vec(),
            b"HTTP/1.1 302 Found\r\nLocation: file:///etc/shadow\r\n\r\n".to_vec(),
        ]);
        let err = fetch_bytes(&format!("{base}/a"), 100).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("unsupported URL scheme 'ftp' in ftp://example.org/x"),
            "{err}"
        );
        let err = fetch_bytes(&format!("{base}/b"), 100).unwrap_err();
        assert!(matches!(err, FetchError::RedirectRefused { .. }), "{err}");
        server.join().unwrap();
    }

    #[test]
    fn status_errors_name_the_url() {
        let (base, server) = serve(vec![
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found".to_vec(),
        ]);
        let url = format!("{base}/x.sqfs");
        let err = fetch_bytes(&url, 100).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{url}: server answered 404 Not Found")
        );
        server.join().unwrap();
    }

    #[test]
    fn truncated_bodies() {
        let mut short = b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n".to_vec();
        short.extend_from_slice(&[b'x'; 1000]);
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nonly".to_vec();
        let no_end = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nsome\r\n".to_vec();
        let (base, server) = serve(vec![short, chunked, no_end]);
        let url = format!("{base}/x");
        let err = fetch_bytes(&url, 10_000).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{url}: truncated: got 1000 of 5000 bytes")
        );
        for _ in 0..2 {
            let err = fetch_bytes(&url, 10_000).unwrap_err();
            assert!(
                matches!(
                    err,
                    FetchError::Truncated {
                        expected: None,
                        got: 4,
                        ..
                    }
                ),
                "{err}"
            );
        }
        server.join().unwrap();
    }

    #[test]
    fn silent_server_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let server = thread::spawn(move || {
            let (_stream, _) = listener.accept().unwrap();
            // Hold the connection open, silent, until the client has given up.
            let _ = done_rx.recv_timeout(Duration::from_secs(10));
        });
        let started = Instant::now();
        let err = quick().fetch_bytes(&format!("{base}/x"), 100).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        // libcurl counts idle time in whole seconds: 300 ms is one.
        assert_eq!(
            err.to_string(),
            format!("{base}/x: no data from the server for 1 s")
        );
        done_tx.send(()).unwrap();
        server.join().unwrap();
    }

    #[test]
    fn refused_connection_names_address_and_url() {
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        // The listener is gone: nothing listens on that port any more.
        let url = format!("http://{addr}/index.json");
        let err = quick().fetch_bytes(&url, 100).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("cannot connect to {addr} ({url}): connection refused")
        );
    }

    #[test]
    fn limit_is_enforced_for_every_framing() {
        let mut close = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        close.extend_from_slice(&[b'y'; 100]);
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
            8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n"
            .to_vec();
        let (base, server) = serve(vec![ok(&[b'z'; 11]), close, chunked, ok(&[b'z'; 10])]);
        let url = format!("{base}/big");
        for _ in 0..3 {
            let err = fetch_bytes(&url, 10).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("{url} too large: more than 10 bytes")
            );
        }
        assert_eq!(fetch_bytes(&url, 10).unwrap().len(), 10);
        server.join().unwrap();
    }

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("berth-fetch-{name}-{}", std::process::id()))
    }

    #[test]
    fn fetch_to_streams_hashes_and_reports_progress() {
        let body = vec![7u8; 100_000];
        let (base, server) = serve(vec![ok(&body)]);
        let path = temp_path("to");
        let mut file = File::create(&path).unwrap();
        let mut reports = Vec::new();
        let (count, sha) = fetch_to(&format!("{base}/a.sqfs"), &mut file, 1 << 20, &mut |p| {
            reports.push(p)
        })
        .unwrap();
        server.join().unwrap();
        assert_eq!(count, 100_000);
        assert_eq!(std::fs::read(&path).unwrap(), body);
        let expected: String = Sha256::digest(&body)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(sha, expected);
        assert_eq!(
            reports.last(),
            Some(&Progress {
                done: 100_000,
                total: Some(100_000)
            })
        );
        // A fast local transfer takes well under a second: a handful of reports, not one per read.
        assert!(reports.len() <= 4, "{reports:?}");
        std::fs::remove_file(&path).unwrap();
    }

    fn sha_hex(data: &[u8]) -> String {
        Sha256::digest(data)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    #[test]
    fn an_unchanged_resource_is_not_sent_again() {
        let tagged = b"HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nContent-Length: 2\r\n\r\n{}".to_vec();
        let not_modified = b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n".to_vec();
        let (base, server) = serve(vec![tagged, not_modified]);
        let url = format!("{base}/index.json");
        let (body, a) = fetch_bytes_if(&url, 100, None).unwrap();
        assert_eq!(
            (body.as_deref(), a.etag.as_deref()),
            (Some(&b"{}"[..]), Some("\"v1\""))
        );
        let (body, a) = fetch_bytes_if(&url, 100, a.etag.as_deref()).unwrap();
        assert!(body.is_none() && a.not_modified, "{a:?}");
        let requests = server.join().unwrap();
        assert!(!requests[0].contains("If-None-Match"), "{}", requests[0]);
        assert!(
            requests[1].contains("If-None-Match: \"v1\"\r\n"),
            "{}",
            requests[1]
        );
        // A 304 nobody asked for is an error, not an empty body.
        let (base, server) = serve(vec![b"HTTP/1.1 304 Not Modified\r\n\r\n".to_vec()]);
        assert!(fetch_bytes(&format!("{base}/x"), 100).is_err());
        server.join().unwrap();
    }

    #[test]
    fn a_download_resumes_after_the_bytes_held_or_starts_over() {
        let whole = b"0123456789".to_vec();
        let partial = b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 4-9/10\r\nContent-Length: 6\r\n\r\n456789".to_vec();
        let path = temp_path("resume");
        // 206 for exactly the bytes not held: appended, the hash of the whole.
        let (base, server) = serve(vec![partial]);
        std::fs::write(&path, b"0123").unwrap();
        let mut f = File::options().read(true).write(true).open(&path).unwrap();
        let mut seen = Vec::new();
        let (count, sha, a) =
            fetch_resume(&format!("{base}/a"), &mut f, 4, 11, &mut |p| seen.push(p)).unwrap();
        assert!(a.resumed);
        assert_eq!((count, sha), (10, sha_hex(&whole)));
        assert_eq!(std::fs::read(&path).unwrap(), whole);
        assert_eq!(seen.last().unwrap().total, Some(10));
        assert!(server.join().unwrap()[0].contains("Range: bytes=4-\r\n"));
        // A server that ignores the range: the whole file from its first byte.
        let (base, server) = serve(vec![ok(&whole)]);
        std::fs::write(&path, b"XXXX").unwrap();
        let mut f = File::options().read(true).write(true).open(&path).unwrap();
        let (count, sha, a) =
            fetch_resume(&format!("{base}/a"), &mut f, 4, 11, &mut |_| {}).unwrap();
        assert!(!a.resumed);
        assert_eq!((count, sha), (10, sha_hex(&whole)));
        assert_eq!(std::fs::read(&path).unwrap(), whole);
        server.join().unwrap();
        // 416 (the resource is shorter than what is held): asked again whole, once.
        let refused = b"HTTP/1.1 416 Range Not Satisfiable\r\nContent-Length: 0\r\n\r\n".to_vec();
        let (base, server) = serve(vec![refused, ok(b"abc")]);
        std::fs::write(&path, b"0123").unwrap();
        let mut f = File::options().read(true).write(true).open(&path).unwrap();
        let (count, sha, _) =
            fetch_resume(&format!("{base}/a"), &mut f, 4, 11, &mut |_| {}).unwrap();
        assert_eq!((count, sha), (3, sha_hex(b"abc")));
        assert_eq!(std::fs::read(&path).unwrap(), b"abc");
        let requests = server.join().unwrap();
        assert!(requests[0].contains("Range:") && !requests[1].contains("Range:"));
        // A 206 for another range is refused.
        let wrong = b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/10\r\nContent-Length: 10\r\n\r\n0123456789".to_vec();
        let (base, server) = serve(vec![wrong]);
        std::fs::write(&path, b"0123").unwrap();
        let mut f = File::options().read(true).write(true).open(&path).unwrap();
        let err = fetch_resume(&format!("{base}/a"), &mut f, 4, 11, &mut |_| {}).unwrap_err();
        assert!(
            err.to_string().contains("206 for a range not asked for"),
            "{err}"
        );
        assert!(err.is_source_failure());
        server.join().unwrap();
        // file:// resumes too.
        let src = temp_path("resume-src");
        std::fs::write(&src, &whole).unwrap();
        std::fs::write(&path, b"012345").unwrap();
        let mut f = File::options().read(true).write(true).open(&path).unwrap();
        let (count, sha, a) = fetch_resume(
            &format!("file://{}", src.display()),
            &mut f,
            6,
            11,
            &mut |_| {},
        )
        .unwrap();
        assert!(a.resumed);
        assert_eq!((count, sha), (10, sha_hex(&whole)));
        std::fs::remove_file(&src).unwrap();
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn write_errors_carry_the_path_and_spot_enospc() {
        let (base, server) = serve(vec![ok(b"data")]);
        // /dev/full fails every write with ENOSPC.
        let mut full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let err = fetch_to(&format!("{base}/a"), &mut full, 100, &mut |_| {}).unwrap_err();
        assert!(err.is_no_space(), "{err}");
        assert!(
            err.to_string().starts_with("cannot write /dev/full"),
            "{err}"
        );
        assert!(
            err.to_string().ends_with(": no space left on device"),
            "{err}"
        );
        server.join().unwrap();
    }

    #[test]
    fn file_urls() {
        let dir = temp_path("file dir");
        std::fs::create_dir_all(dir.join("packages")).unwrap();
        std::fs::write(dir.join("packages/a.sqfs"), b"squash").unwrap();
        let base = format!("file://{}", dir.display().to_string().replace(' ', "%20"));
        let url = join_url(&base, "packages/a.sqfs").unwrap();
        assert_eq!(fetch_bytes(&url, 100).unwrap(), b"squash");
        let err = fetch_bytes(&url, 3).unwrap_err();
        assert!(
            matches!(err, FetchError::TooLarge { limit: 3, .. }),
            "{err}"
        );
        let missing = join_url(&base, "index.json").unwrap();
        let err = fetch_bytes(&missing, 100).unwrap_err();
        assert!(
            err.to_string().ends_with(": no such file or directory"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn join_url_cases() {
        for base in ["http://h:8080/repo", "http://h:8080/repo/"] {
            assert_eq!(
                join_url(base, "index.json").unwrap(),
                "http://h:8080/repo/index.json"
            );
            assert_eq!(
                join_url(base, "packages/a.sqfs").unwrap(),
                "http://h:8080/repo/packages/a.sqfs"
            );
        }
        assert_eq!(
            join_url("file:///srv/repo/", "/index.json").unwrap(),
            "file:///srv/repo/index.json"
        );
        assert!(join_url("http://h/repo", "../etc/passwd").is_err());
        assert!(join_url("http://h/repo", "http://other/x").is_err());
        assert_eq!(
            join_url("https://h/repo", "index.json").unwrap(),
            "https://h/repo/index.json"
        );
        let err = join_url("ftp://h/repo", "index.json").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported URL scheme 'ftp' in ftp://h/repo: berth fetches http://, https:// and \
             file://"
        );
    }

    #[test]
    fn parses_urls() {
        let http = |url| match parse_url(url).unwrap() {
            Url::Http(h) => h,
            other => panic!("{other:?}"),
        };
        let u = http("http://[::1]:8080/repo/x?y=1#frag");
        assert_eq!((u.host.as_str(), u.port), ("::1", 8080));
        assert_eq!(u.addr(), "[::1]:8080");
        let u = http("HTTP://example.org");
        assert_eq!(
            (u.port, u.tls, u.addr().as_str()),
            (80, false, "example.org:80")
        );
        let u = http("HTTPS://h/a/b");
        assert_eq!((u.tls, u.port), (true, 443));
        assert_eq!(http("https://h:8443/").port, 8443);
        for bad in [
            "http://::1/x",
            "http://h:0/",
            "http://h:99999/",
            "http://user:pw@h/",
            "http:///x",
            "http://h/a b",
            "http://h/a\r\nX: y",
            "http://[::1/",
            // Only what berth and libcurl read alike: the token's origin is decided here.
            "http://good\\evil/",
            "http://a%2eb/",
            "http://h\u{e9}/",
            "file://relative",
            "no-scheme",
        ] {
            assert!(
                matches!(parse_url(bad), Err(FetchError::BadUrl { .. })),
                "{bad}"
            );
        }
        assert_eq!(
            parse_url("file:///srv/a%20b").unwrap(),
            Url::File("/srv/a b".into())
        );
    }

    #[test]
    fn the_status_decides_before_the_size() {
        // A 404 page larger than the limit is a 404 (the next mirror is tried), not "too
        // large"; a redirect with a large page is followed.
        let mut big404 = b"HTTP/1.1 404 Not Found\r\nContent-Length: 100000\r\n\r\n".to_vec();
        big404.extend(std::iter::repeat_n(b'x', 100_000));
        let mut moved =
            b"HTTP/1.1 302 Found\r\nLocation: /b\r\nContent-Length: 100000\r\n\r\n".to_vec();
        moved.extend(std::iter::repeat_n(b'x', 100_000));
        let (base, server) = serve(vec![big404, moved, ok(b"sig")]);
        let err = fetch_bytes(&format!("{base}/index.json.sig"), 4096).unwrap_err();
        assert!(
            matches!(err, FetchError::Status { status: 404, .. }),
            "{err}"
        );
        assert!(err.is_source_failure());
        assert_eq!(fetch_bytes(&format!("{base}/a"), 4096).unwrap(), b"sig");
        let requests = server.join().unwrap();
        assert!(
            requests[2].starts_with("GET /b HTTP/1.1\r\n"),
            "{}",
            requests[2]
        );
    }

    #[test]
    fn ipv6_loopback() {
        let Ok(listener) = TcpListener::bind("[::1]:0") else {
            berth_sys::skip::record(
                "kernel IPv6",
                "fetch::tests::ipv6_loopback: no IPv6 loopback (::1) on this machine",
            );
            return;
        };
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let request = read_request(&mut s);
            s.write_all(&ok(b"six")).unwrap();
            request
        });
        assert_eq!(fetch_bytes(&format!("{base}/x"), 100).unwrap(), b"six");
        let request = server.join().unwrap();
        assert!(request.contains("\r\nHost: [::1]:"), "{request}");
    }

    #[test]
    fn resolves_locations() {
        let base = "http://h:81/a/b?q";
        assert_eq!(resolve_location(base, "c"), "http://h:81/a/c");
        assert_eq!(resolve_location(base, "/c"), "http://h:81/c");
        assert_eq!(resolve_location(base, "//o/c"), "http://o/c");
        assert_eq!(resolve_location(base, "http://o:9/c"), "http://o:9/c");
        assert_eq!(resolve_location("https://h", "c"), "https://h/c");
        assert_eq!(resolve_location(base, "?q2"), "http://h:81/a/b?q2");
        assert_eq!(
            resolve_location(base, "/p?n=http://x"),
            "http://h:81/p?n=http://x"
        );
        // What a hostile server might try: each stays on its host, or is another origin
        // (the token is dropped), or is no URL berth takes.
        assert_eq!(
            resolve_location("https://h/a", "//evil/x"),
            "https://evil/x"
        );
        assert_eq!(resolve_location(base, "\\evil"), "http://h:81/a/\\evil");
        assert_eq!(resolve_location(base, "http:evil"), "http:evil");
        assert!(parse_url("http:evil").is_err());
        assert!(
            matches!(parse_url(&resolve_location(base, "\\evil")), Ok(Url::Http(u)) if u.host == "h")
        );
    }

    #[cfg(any(feature = "fleet", feature = "vendor"))]
    #[test]
    fn origins() {
        // The scheme is part of the origin: a token for https://h never goes to http://h.
        assert_eq!(origin("https://H/x"), Some((true, "h".into(), 443)));
        assert_ne!(origin("https://h:80/x"), origin("http://h:80/x"));
        assert_eq!(origin("file:///x"), None);
    }

    #[cfg(any(feature = "fleet", feature = "vendor"))]
    #[test]
    fn redirects_keep_the_token_at_home_and_never_leave_http_and_https() {
        // http:// may move to https:// (nothing listens on port 1: the connection fails), but
        // never to file://, and a PUT is not redirected at all.
        let (base, server) = serve(vec![
            b"HTTP/1.1 302 Found\r\nLocation: https://127.0.0.1:1/x\r\n\r\n".to_vec(),
            b"HTTP/1.1 302 Found\r\nLocation: file:///etc/shadow\r\n\r\n".to_vec(),
            b"HTTP/1.1 307 Again\r\nLocation: /y\r\n\r\n".to_vec(),
        ]);
        let call = Call {
            method: "GET",
            auth: Some("TargetToken t"),
            json: None,
            tls: None,
            headers: &[],
        };
        let err = quick().call(&format!("{base}/a"), call, 100).unwrap_err();
        assert!(
            matches!(&err, FetchError::Connect { url, .. } if url == "https://127.0.0.1:1/x"),
            "{err}"
        );
        let err = quick().call(&format!("{base}/b"), call, 100).unwrap_err();
        assert!(matches!(err, FetchError::RedirectRefused { .. }), "{err}");
        let put = Call {
            method: "PUT",
            json: Some(b"{}"),
            ..call
        };
        let err = quick().call(&format!("{base}/c"), put, 100).unwrap_err();
        assert!(matches!(err, FetchError::RedirectRefused { .. }), "{err}");
        server.join().unwrap();
        // To another host (localhost is not 127.0.0.1 for the origin rule): no token there.
        let (other, other_server) = serve(vec![ok(b"elsewhere")]);
        let other = other.replace("127.0.0.1", "localhost");
        let moved = format!("HTTP/1.1 302 Found\r\nLocation: {other}/z\r\n\r\n");
        let (base, server) = serve(vec![moved.into_bytes()]);
        assert_eq!(
            quick().call(&format!("{base}/a"), call, 100).unwrap(),
            b"elsewhere"
        );
        assert!(server.join().unwrap()[0].contains("\r\nAuthorization: TargetToken t\r\n"));
        let there = &other_server.join().unwrap()[0];
        assert!(there.starts_with("GET /z HTTP/1.1\r\n"), "{there}");
        assert!(!there.contains("Authorization"), "{there}");
    }

    type Count = Arc<std::sync::atomic::AtomicUsize>;

    /// Answers every request with `body` on keep-alive connections; counts the connections
    /// opened and those the client closed.
    fn keep_alive(body: &'static [u8]) -> (String, Count, Count) {
        use std::io::BufRead;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let count = Count::default();
        let closed = Count::default();
        let (seen, ended) = (count.clone(), closed.clone());
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let ended = ended.clone();
                thread::spawn(move || {
                    let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
                    let mut stream = stream;
                    loop {
                        let mut line = String::new();
                        match reader.read_line(&mut line) {
                            Ok(0) | Err(_) => {
                                ended.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                                return;
                            }
                            Ok(_) if line == "\r\n" => {
                                if stream.write_all(&ok(body)).is_err() {
                                    return;
                                }
                            }
                            Ok(_) => {}
                        }
                    }
                });
            }
        });
        (base, count, closed)
    }

    #[test]
    fn a_session_keeps_its_connection_and_closes_it_at_its_end() {
        use std::sync::atomic::Ordering;
        let (base, connections, closed) = keep_alive(b"{}");
        let url = format!("{base}/index.json");
        {
            let _session = session();
            let nested = session();
            for _ in 0..3 {
                assert_eq!(fetch_bytes(&url, 100).unwrap(), b"{}");
            }
            drop(nested);
            assert_eq!(fetch_bytes(&url, 100).unwrap(), b"{}");
            assert_eq!(
                connections.load(Ordering::SeqCst),
                1,
                "one connection for the session"
            );
            assert_eq!(
                closed.load(Ordering::SeqCst),
                0,
                "kept open within the session"
            );
        }
        // The session's end closes it.
        let t0 = Instant::now();
        while closed.load(Ordering::SeqCst) == 0 && t0.elapsed() < Duration::from_secs(5) {
            thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            closed.load(Ordering::SeqCst),
            1,
            "closed when the session ended"
        );
        // Outside a session, each fetch has a connection of its own.
        fetch_bytes(&url, 100).unwrap();
        fetch_bytes(&url, 100).unwrap();
        assert_eq!(connections.load(Ordering::SeqCst), 3);
        // Another thread's fetches are not the session's.
        let _session = session();
        fetch_bytes(&url, 100).unwrap();
        let u = url.clone();
        thread::spawn(move || fetch_bytes(&u, 100).unwrap())
            .join()
            .unwrap();
        fetch_bytes(&url, 100).unwrap();
        assert_eq!(connections.load(Ordering::SeqCst), 5);
    }

    #[test]
    fn io_reasons_read_like_ours() {
        let e = io::Error::from_raw_os_error(libc::ENOSPC);
        assert_eq!(io_reason(&e), "no space left on device");
    }

    #[test]
    fn endless_interim_answers_are_refused() {
        let mut resp = Vec::new();
        for _ in 0..20 {
            resp.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        let (base, _h) = serve(vec![resp]);
        let e = quick().fetch_bytes(&format!("{base}/x"), 100).unwrap_err();
        assert!(e.to_string().contains("interim"), "{e}");
    }

    #[test]
    fn a_trickling_server_is_given_up_on() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let h = thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let _ = read_request(&mut s);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
            // One byte every 100 ms: never idle long enough for the read timeout.
            for _ in 0..40 {
                if s.write_all(b"x").is_err() {
                    break;
                }
                thread::sleep(Duration::from_millis(100));
            }
        });
        let f = Fetcher {
            min_total: Duration::from_millis(700),
            ..quick()
        };
        let t0 = Instant::now();
        let e = f
            .fetch_bytes(&format!("http://{addr}/x"), 1000)
            .unwrap_err();
        assert!(matches!(e, FetchError::TooSlow { .. }), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        let _ = h.join();
    }
}
