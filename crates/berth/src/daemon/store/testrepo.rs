//! For the store's unit tests: a repository signed in the test and served from a directory
//! (`file://`), and a tiny HTTP server on 127.0.0.1 that answers what the test scripts.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use berth_core::index::{Index, IndexEntry, INDEX_FORMAT};
use berth_core::signify::{self, PublicKey, SecretKey};

use crate::daemon::base::context::Daemon;

/// A signing key made from `n` (1..=255): the same `n`, the same key.
pub(crate) fn key(n: u8) -> (PublicKey, SecretKey) {
    signify::generate([n; 32], [n; 8])
}

/// Trusts `public` as `<keys>/<name>.pub`.
pub(crate) fn trust(keys: &Path, name: &str, public: &PublicKey) {
    std::fs::create_dir_all(keys).unwrap();
    std::fs::write(
        keys.join(format!("{name}.pub")),
        public.to_file_string("test public key"),
    )
    .unwrap();
}

/// A repository in a directory: its images, and the index it publishes signed by its key.
pub(crate) struct Repo {
    pub dir: PathBuf,
    key: SecretKey,
    pub packages: Vec<IndexEntry>,
}

impl Repo {
    /// An empty repository in `dir`, signed by key 1, which `keys` trusts.
    pub(crate) fn new(dir: &Path, keys: &Path) -> Repo {
        Repo::signed_by(dir, keys, 1)
    }

    /// An empty repository in `dir`, signed by key `n`, which `keys` trusts.
    pub(crate) fn signed_by(dir: &Path, keys: &Path, n: u8) -> Repo {
        std::fs::create_dir_all(dir.join("packages")).unwrap();
        let (public, secret) = key(n);
        trust(keys, "vendor", &public);
        Repo {
            dir: dir.to_path_buf(),
            key: secret,
            packages: Vec::new(),
        }
    }

    /// A repository for `d`: in `<dir>/repo`, its key trusted by `d`, `d`'s repository.
    pub(crate) fn for_daemon(d: &mut Daemon, dir: &Path) -> Repo {
        let r = Repo::new(&dir.join("repo"), &d.cfg.paths.keys);
        d.cfg.repository = Some(r.url());
        // As the daemon's start makes it.
        std::fs::create_dir_all(d.cfg.paths.store_tmp()).unwrap();
        r
    }

    pub(crate) fn url(&self) -> String {
        format!("file://{}", self.dir.display())
    }

    /// The package `manifest` describes, its image `bytes`, listed (replacing an entry of
    /// the same name); its entry.
    pub(crate) fn add(&mut self, manifest: &str, bytes: &[u8]) -> IndexEntry {
        let mut e = crate::daemon::base::testing::entry(manifest);
        std::fs::write(self.dir.join(&e.file), bytes).unwrap();
        e.sha256 = berth_core::index::sha256_hex(bytes);
        e.size = bytes.len() as u64;
        self.packages.retain(|p| p.name != e.name);
        self.packages.push(e.clone());
        e
    }

    /// index.json and index.json.sig for what is listed now.
    pub(crate) fn publish(&self, serial: u64, expires: Option<u64>) -> Vec<u8> {
        let index = Index {
            format: INDEX_FORMAT,
            serial,
            expires,
            packages: self.packages.clone(),
        };
        let text = index.to_json().into_bytes();
        self.publish_bytes(&text);
        text
    }

    /// `bytes` as index.json, signed.
    pub(crate) fn publish_bytes(&self, bytes: &[u8]) {
        std::fs::write(self.dir.join("index.json"), bytes).unwrap();
        std::fs::write(self.dir.join("index.json.sig"), self.sign(bytes)).unwrap();
    }

    /// The signature file of `bytes` by the repository's key.
    pub(crate) fn sign(&self, bytes: &[u8]) -> String {
        signify::sign(&self.key, bytes).to_file_string("signed in a test")
    }
}

/// Serves `answers` on 127.0.0.1, one connection each, in order; the requests received.
/// A connection that does not come within 10 s ends the server.
pub(crate) fn serve(answers: Vec<Vec<u8>>) -> (String, thread::JoinHandle<Vec<String>>) {
    serve_at(|_| answers)
}

/// [`serve`], with answers that name the server's own URL (`http://127.0.0.1:PORT`).
pub(crate) fn serve_at(
    answers: impl FnOnce(&str) -> Vec<Vec<u8>>,
) -> (String, thread::JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let answers = answers(&base);
    let handle = thread::spawn(move || {
        let mut requests = Vec::new();
        for answer in answers {
            let Some(mut stream) = accept(&listener) else {
                break;
            };
            requests.push(read_request(&mut stream));
            let _ = stream.write_all(&answer);
        }
        requests
    });
    (base, handle)
}

fn accept(listener: &TcpListener) -> Option<TcpStream> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                return Some(s);
            }
            Err(_) => thread::sleep(Duration::from_millis(5)),
        }
    }
    None
}

/// The request's head, and its body when it announces one (`Content-Length`).
fn read_request(stream: &mut TcpStream) -> String {
    let mut request = Vec::new();
    let mut byte = [0u8];
    while !request.ends_with(b"\r\n\r\n") && matches!(stream.read(&mut byte), Ok(1)) {
        request.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&request).into_owned();
    let length = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let mut body = Vec::new();
    let _ = Read::take(&mut *stream, length).read_to_end(&mut body);
    head + &String::from_utf8_lossy(&body)
}

/// `200 OK` with `body` (and an entity tag when given).
pub(crate) fn ok(body: &[u8], etag: Option<&str>) -> Vec<u8> {
    let tag = etag.map(|t| format!("ETag: {t}\r\n")).unwrap_or_default();
    let mut r = format!(
        "HTTP/1.1 200 OK\r\n{tag}Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// An answer that announces `whole.len()` bytes and sends only the first `sent`.
pub(crate) fn cut(whole: &[u8], sent: usize) -> Vec<u8> {
    let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", whole.len()).into_bytes();
    r.extend_from_slice(&whole[..sent]);
    r
}

/// `206 Partial Content`: `whole` from byte `from`.
pub(crate) fn partial(whole: &[u8], from: usize) -> Vec<u8> {
    let n = whole.len();
    let mut r = format!(
        "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {from}-{}/{n}\r\nContent-Length: {}\r\n\r\n",
        n - 1,
        n - from
    )
    .into_bytes();
    r.extend_from_slice(&whole[from..]);
    r
}

pub(crate) use crate::daemon::base::testing::noise;

/// The files in `dir` (names), sorted; none when it is missing.
pub(crate) fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}
