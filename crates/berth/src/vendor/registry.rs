//! `berth import registry://HOST[:PORT]/REPO[:TAG|@sha256:HEX]` (or skopeo's spelling,
//! `docker://…`): an image pulled from an OCI distribution registry into a private OCI image
//! layout, then imported as `oci:` layouts are (docs/package-format.md).
//!
//! The registry is untrusted: every manifest and blob is fetched by digest (or its digest
//! computed when named by tag), checked against it and against its size, and bounded; the
//! layout written is then read with all of `berth_image`'s checks again. Requests go through
//! the device's fetcher (libcurl; https:// by default, `--plain-http` for a registry without
//! TLS), with the registry's token auth: a 401's `Bearer realm=…` challenge is answered by
//! asking the realm for a token (with the credentials of an auth file, as podman and skopeo
//! keep them, when there are some), and `Basic` with those credentials. The token never goes
//! to another origin (a blob redirected to a storage service goes there without it).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use berth_sys::curl;

use crate::fetch::{Call, FetchError, Fetcher, TlsFiles};

/// The most a manifest or an index may be.
const MANIFEST_LIMIT: u64 = 4 << 20;
/// The most a token answer may be.
const TOKEN_LIMIT: u64 = 64 << 10;
/// The most one blob may be (a layer).
const BLOB_LIMIT: u64 = 4 << 30;

const ACCEPT: &str = "Accept: application/vnd.oci.image.index.v1+json, \
    application/vnd.docker.distribution.manifest.list.v2+json, \
    application/vnd.oci.image.manifest.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json";

/// How the registry is reached.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Options {
    /// The architecture to take from a multi-platform index (OCI names: amd64, arm64, arm,
    /// mipsle…); None: this machine's.
    pub arch: Option<String>,
    /// http:// instead of https:// (a registry without TLS, on a trusted network).
    pub plain_http: bool,
    /// The only CAs the registry's certificate may end in; None: the system's store.
    pub ca_file: Option<PathBuf>,
    /// Credentials: `{"auths": {"HOST[:PORT]": {"auth": "BASE64(USER:PASSWORD)"}}}`.
    pub auth_file: Option<PathBuf>,
    /// The most the image's blobs may be together (the import's `--max-size`).
    pub max_bytes: Option<u64>,
}

/// The most layers an image may have (Docker's own limit is 127).
const MAX_LAYERS: usize = 128;

/// An image in a registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `host[:port]`.
    pub host: String,
    pub repo: String,
    /// A tag, or `sha256:HEX`.
    pub reference: String,
}

impl Reference {
    /// `registry://…` or `docker://…`; None for anything else.
    pub fn parse(s: &str) -> Option<Result<Reference>> {
        let (docker, rest) = match (s.strip_prefix("registry://"), s.strip_prefix("docker://")) {
            (Some(r), _) => (false, r),
            (_, Some(r)) => (true, r),
            _ => return None,
        };
        Some(Self::parse_rest(s, docker, rest))
    }

    fn parse_rest(s: &str, docker: bool, rest: &str) -> Result<Reference> {
        let bad = |why: &str| anyhow!("{s}: {why} (expected registry://HOST[:PORT]/REPO[:TAG])");
        let (first, path) = rest.split_once('/').unwrap_or((rest, ""));
        // skopeo's docker:// without a registry host means Docker Hub.
        let hostlike = first.contains(['.', ':']) || first == "localhost";
        let (host, path) = if hostlike && !path.is_empty() {
            (first.to_string(), path.to_string())
        } else if docker {
            let p = if rest.contains('/') {
                rest.to_string()
            } else {
                format!("library/{rest}")
            };
            ("registry-1.docker.io".to_string(), p)
        } else {
            return Err(bad("no registry host"));
        };
        let host_ok = host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b));
        if host.is_empty() || !host_ok {
            return Err(bad("bad registry host"));
        }
        let (repo, reference) = if let Some((r, d)) = path.split_once('@') {
            (r.to_string(), d.to_string())
        } else {
            match path.rsplit_once(':') {
                Some((r, t)) if !t.contains('/') => (r.to_string(), t.to_string()),
                _ => (path.clone(), "latest".to_string()),
            }
        };
        let component = |c: &str| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
                && !c.starts_with(['.', '-', '_'])
        };
        if repo.is_empty() || !repo.split('/').all(component) {
            return Err(bad(
                "bad repository name (lowercase letters, digits, '.', '_', '-', '/')",
            ));
        }
        let tag_ok = reference.len() <= 128
            && reference
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
            && !reference.starts_with(['.', '-']);
        if !(tag_ok || digest_hex(&reference).is_some()) {
            return Err(bad("bad tag or digest"));
        }
        Ok(Reference {
            host,
            repo,
            reference,
        })
    }

    /// The tag the layout names the image by (the digest's hex for a digest reference).
    pub fn tag(&self) -> String {
        digest_hex(&self.reference).map_or_else(|| self.reference.clone(), str::to_string)
    }
}

/// The hex of a `sha256:HEX` digest.
fn digest_hex(d: &str) -> Option<&str> {
    let h = d.strip_prefix("sha256:")?;
    (h.len() == 64
        && h.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
    .then_some(h)
}

/// A registry session: its base URL, the token it gave, the credentials for it.
struct Registry<'a> {
    base: String,
    opts: &'a Options,
    auth: Option<String>,
    basic: Option<String>,
    fetcher: Fetcher,
}

impl Registry<'_> {
    fn call<'c>(&'c self, headers: &'c [String]) -> Call<'c> {
        Call {
            method: "GET",
            auth: self.auth.as_deref(),
            json: None,
            tls: Some(TlsFiles {
                files: curl::Tls {
                    ca_file: self.opts.ca_file.as_deref(),
                    ..curl::Tls::default()
                },
                names: ["--ca-file", "", ""],
            }),
            headers,
        }
    }

    /// Runs `f` with the current authorization; a 401 is answered once (a token, or the
    /// credentials), then `f` runs again.
    fn authorized<T>(&mut self, mut f: impl FnMut(&Self) -> Result<T, FetchError>) -> Result<T> {
        match f(self) {
            Err(FetchError::Status {
                status: 401,
                challenge,
                url,
                ..
            }) if self.auth.is_none() => {
                // Only the registry's own challenge is answered: a storage service a blob is
                // redirected to does not choose where the credentials go.
                if crate::fetch::origin(&url) != crate::fetch::origin(&self.base) {
                    bail!("{url}: 401 from outside the registry: not answered");
                }
                let challenge = challenge
                    .ok_or_else(|| anyhow!("{url}: 401 without a WWW-Authenticate challenge"))?;
                self.auth = Some(self.answer(&challenge, &url)?);
                f(self).map_err(|e| self.refused(e))
            }
            other => other.map_err(|e| self.refused(e)),
        }
    }

    fn refused(&self, e: FetchError) -> anyhow::Error {
        match e {
            FetchError::Status {
                status: 401, url, ..
            } if crate::fetch::origin(&url) != crate::fetch::origin(&self.base) => {
                anyhow!("{url}: 401 from outside the registry: not answered")
            }
            FetchError::Status {
                status: 401, url, ..
            } => anyhow!(
                "{url}: the registry refused the credentials{} (401)",
                if self.basic.is_none() {
                    " (none given: --auth-file)"
                } else {
                    ""
                }
            ),
            e => e.into(),
        }
    }

    /// The `Authorization` a challenge asks for.
    fn answer(&self, challenge: &str, url: &str) -> Result<String> {
        let (scheme, params) = challenge.split_once(' ').unwrap_or((challenge, ""));
        if scheme.eq_ignore_ascii_case("basic") {
            return self
                .basic
                .as_ref()
                .map(|b| format!("Basic {b}"))
                .ok_or_else(|| {
                    anyhow!("{url}: the registry asks for credentials: give --auth-file")
                });
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            bail!(
                "{url}: the registry asks for {scheme} authentication, which berth does not speak"
            );
        }
        let p = challenge_params(params);
        let realm = p
            .iter()
            .find(|(k, _)| k == "realm")
            .map(|(_, v)| v.clone())
            .ok_or_else(|| anyhow!("{url}: a Bearer challenge without a realm"))?;
        // http:// or https:// only (never file://), https:// unless the registry is plain.
        let realm_https = realm
            .get(..8)
            .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
        if crate::fetch::origin(&realm).is_none() || !(realm_https || self.opts.plain_http) {
            bail!("{url}: the token realm {realm:?} is not an https:// URL: not asked");
        }
        let mut token_url = realm.clone();
        let mut sep = if realm.contains('?') { '&' } else { '?' };
        for (k, v) in p.iter().filter(|(k, _)| k == "service" || k == "scope") {
            token_url.push(sep);
            token_url.push_str(&format!("{k}={}", query_escape(v)));
            sep = '&';
        }
        // Credentials go to the registry's own origin, or to the https:// realm an https://
        // registry names (its answer came over TLS); never where a plain registry points.
        let same = crate::fetch::origin(&realm) == crate::fetch::origin(&self.base);
        let basic = self
            .basic
            .as_ref()
            .filter(|_| same || (realm_https && !self.opts.plain_http))
            .map(|b| format!("Basic {b}"));
        let call = Call {
            auth: basic.as_deref(),
            ..self.call(&[])
        };
        let body = self
            .fetcher
            .call(&token_url, call, TOKEN_LIMIT)
            .map_err(|e| anyhow!("the registry's token service: {e}"))?;
        let v: Value = serde_json::from_slice(&body)
            .map_err(|e| anyhow!("{token_url}: the token answer is not JSON: {e}"))?;
        let token = v["token"]
            .as_str()
            .or_else(|| v["access_token"].as_str())
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()))
            .ok_or_else(|| anyhow!("{token_url}: no usable token in the answer"))?;
        Ok(format!("Bearer {token}"))
    }

    /// A manifest or an index by tag or digest: its bytes, checked against the digest when
    /// there is one; its sha256 either way.
    fn manifest(&mut self, reference: &str) -> Result<(Vec<u8>, String)> {
        let url = format!("{}/manifests/{reference}", self.base);
        let headers = [ACCEPT.to_string()];
        let body = self.authorized(|r| r.fetcher.call(&url, r.call(&headers), MANIFEST_LIMIT))?;
        let got = berth_core::index::sha256_hex(&body);
        if let Some(want) = digest_hex(reference) {
            if got != want {
                bail!("{url}: its sha256 is {got}, not the digest it was asked by: refused");
            }
        }
        Ok((body, got))
    }

    /// A blob into `dir/blobs/sha256/HEX`, checked against its digest and size.
    fn blob(&mut self, dir: &Path, desc: &Value) -> Result<()> {
        let digest = desc["digest"].as_str().unwrap_or_default();
        let hex = digest_hex(digest)
            .ok_or_else(|| anyhow!("a blob's digest {digest:?}: expected sha256:HEX"))?
            .to_string();
        let size = desc["size"]
            .as_u64()
            .filter(|&s| s <= BLOB_LIMIT)
            .ok_or_else(|| anyhow!("blob {digest}: no size, or more than {BLOB_LIMIT} bytes"))?;
        let path = dir.join("blobs/sha256").join(&hex);
        if path.exists() {
            return Ok(());
        }
        let part = path.with_extension("part");
        let url = format!("{}/blobs/{digest}", self.base);
        let (count, got) = self.authorized(|r| {
            let mut f = std::fs::File::create(&part).map_err(|error| FetchError::Write {
                path: part.clone(),
                url: url.clone(),
                error,
            })?;
            // One byte more than the descriptor says is enough to notice a larger blob.
            let (n, sha, _) =
                r.fetcher
                    .fetch_resume_call(&url, r.call(&[]), &mut f, 0, size + 1, &mut |_| {})?;
            Ok((n, sha))
        })?;
        if got != hex || count != size {
            let _ = std::fs::remove_file(&part);
            bail!(
                "{url}: the registry sent {count} bytes with sha256 {got}; the manifest says \
                 {size} bytes, {digest}: refused"
            );
        }
        std::fs::rename(&part, &path).with_context(|| format!("{}", path.display()))?;
        Ok(())
    }
}

/// `key="value", key=value` of a challenge.
fn challenge_params(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = s.trim();
    while let Some((k, after)) = rest.split_once('=') {
        let k = k.trim().trim_start_matches(',').trim().to_ascii_lowercase();
        let (v, next) = if let Some(q) = after.strip_prefix('"') {
            match q.split_once('"') {
                Some((v, n)) => (v.to_string(), n),
                None => (q.to_string(), ""),
            }
        } else {
            match after.split_once(',') {
                Some((v, n)) => (v.trim().to_string(), n),
                None => (after.trim().to_string(), ""),
            }
        };
        out.push((k, v));
        rest = next.trim_start_matches([',', ' ']);
    }
    out
}

fn query_escape(v: &str) -> String {
    let mut o = String::new();
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

/// The credentials for `host` in an auth file (base64 of `user:password`).
fn credentials(file: &Path, host: &str) -> Result<Option<String>> {
    let text = std::fs::read(file).with_context(|| format!("--auth-file {}", file.display()))?;
    let v: Value = serde_json::from_slice(&text)
        .map_err(|e| anyhow!("--auth-file {}: not JSON: {e}", file.display()))?;
    // Docker Hub's credentials are kept under its older names.
    let names: &[&str] = if host == "registry-1.docker.io" {
        &[
            "registry-1.docker.io",
            "docker.io",
            "index.docker.io",
            "https://index.docker.io/v1/",
        ]
    } else {
        &[host]
    };
    let auth = names
        .iter()
        .find_map(|n| v["auths"][*n]["auth"].as_str())
        .map(str::to_string);
    if let Some(a) = &auth {
        if berth_core::base64::decode(a).is_err() {
            bail!(
                "--auth-file {}: the entry for {host} is not base64",
                file.display()
            );
        }
    }
    Ok(auth)
}

/// Pulls `r` into a new OCI image layout at `dir`, the image tagged [`Reference::tag`];
/// returns the number of layers.
pub fn pull(r: &Reference, opts: &Options, dir: &Path) -> Result<usize> {
    let scheme = if opts.plain_http { "http" } else { "https" };
    let mut reg = Registry {
        base: format!("{scheme}://{}/v2/{}", r.host, r.repo),
        opts,
        auth: None,
        basic: match &opts.auth_file {
            Some(f) => credentials(f, &r.host)?,
            None => None,
        },
        fetcher: Fetcher::default(),
    };
    std::fs::create_dir_all(dir.join("blobs/sha256"))
        .with_context(|| format!("{}", dir.display()))?;
    let _session = crate::fetch::session();
    let (mut body, mut digest) = reg.manifest(&r.reference)?;
    let arch = opts
        .arch
        .as_deref()
        .unwrap_or(berth_image::source::oci_arch());
    let mut hops = 0;
    let manifest = loop {
        let v: Value = serde_json::from_slice(&body)
            .map_err(|e| anyhow!("{}: the manifest is not JSON: {e}", r.repo))?;
        if !v["manifests"].is_array() {
            break v;
        }
        hops += 1;
        if hops > 2 {
            bail!("{}: an index of indexes of indexes", r.repo);
        }
        let list = v["manifests"].as_array().into_iter().flatten();
        let chosen = list
            .into_iter()
            .find(|m| m["platform"]["os"] == "linux" && m["platform"]["architecture"] == arch)
            .ok_or_else(|| {
                let have: Vec<String> = v["manifests"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|m| {
                        format!(
                            "{}/{}",
                            m["platform"]["os"].as_str().unwrap_or("?"),
                            m["platform"]["architecture"].as_str().unwrap_or("?")
                        )
                    })
                    .collect();
                anyhow!(
                    "{}:{}: no linux/{arch} image (the index has {}); choose one with --arch",
                    r.repo,
                    r.reference,
                    have.join(", ")
                )
            })?;
        let d = chosen["digest"].as_str().unwrap_or_default().to_string();
        if digest_hex(&d).is_none() {
            bail!(
                "{}: the index names a manifest by {d:?}: expected sha256:HEX",
                r.repo
            );
        }
        (body, digest) = reg.manifest(&d)?;
    };
    let media = manifest["mediaType"]
        .as_str()
        .unwrap_or("application/vnd.oci.image.manifest.v1+json")
        .to_string();
    std::fs::write(dir.join("blobs/sha256").join(&digest), &body)?;
    let layers = manifest["layers"].as_array().cloned().unwrap_or_default();
    // Bounded before a byte of them is fetched: the staging directory is on the vendor's disk.
    let total: u64 = layers
        .iter()
        .chain([&manifest["config"]])
        .map(|l| l["size"].as_u64().unwrap_or(u64::MAX))
        .fold(0u64, u64::saturating_add);
    let cap = opts.max_bytes.unwrap_or(BLOB_LIMIT);
    if layers.len() > MAX_LAYERS || total > cap {
        bail!(
            "{}: {} layers, {total} bytes: more than {MAX_LAYERS} layers or {cap} bytes (--max-size)",
            r.repo,
            layers.len()
        );
    }
    // The configuration is JSON: no larger than a manifest.
    if manifest["config"]["size"]
        .as_u64()
        .is_none_or(|s| s > MANIFEST_LIMIT)
    {
        bail!(
            "{}: the image's configuration is over {MANIFEST_LIMIT} bytes",
            r.repo
        );
    }
    reg.blob(dir, &manifest["config"])?;
    for l in &layers {
        reg.blob(dir, l)?;
    }
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    let index = json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": media,
            "digest": format!("sha256:{digest}"),
            "size": body.len(),
            "annotations": {"org.opencontainers.image.ref.name": r.tag()},
        }],
    });
    let mut f = std::fs::File::create(dir.join("index.json"))?;
    f.write_all(index.to_string().as_bytes())?;
    Ok(layers.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references() {
        let r = Reference::parse("registry://127.0.0.1:5000/team/app:1.2")
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.host.as_str(), r.repo.as_str(), r.reference.as_str()),
            ("127.0.0.1:5000", "team/app", "1.2")
        );
        let r = Reference::parse("docker://localhost:5000/app")
            .unwrap()
            .unwrap();
        assert_eq!((r.repo.as_str(), r.reference.as_str()), ("app", "latest"));
        let r = Reference::parse("docker://alpine:3.19").unwrap().unwrap();
        assert_eq!(
            (r.host.as_str(), r.repo.as_str()),
            ("registry-1.docker.io", "library/alpine")
        );
        let d = format!("sha256:{}", "a".repeat(64));
        let r = Reference::parse(&format!("registry://h.example/x@{d}"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.reference.as_str(), r.tag()),
            (d.as_str(), "a".repeat(64))
        );
        assert!(Reference::parse("oci:x").is_none());
        for bad in [
            "registry://app:1",
            "registry://h.example/UPPER:1",
            "registry://h.example/a/../b",
            "registry://h.example/x:bad tag",
            "registry://h.example/x@sha256:12",
            "registry://h ex/x",
        ] {
            assert!(Reference::parse(bad).unwrap().is_err(), "{bad}");
        }
    }

    /// A registry with token auth on loopback: each request's line and Authorization are
    /// logged; `answer` gives the response to (path, authorization).
    fn fake(
        answer: impl Fn(&str, Option<&str>) -> Vec<u8> + Send + Sync + 'static,
    ) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        use std::io::BufRead;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (seen, answer) = (log.clone(), std::sync::Arc::new(answer));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (seen, answer) = (seen.clone(), answer.clone());
                std::thread::spawn(move || {
                    let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
                    let mut out = stream;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let mut auth = None;
                        loop {
                            let mut h = String::new();
                            if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                                break;
                            }
                            if let Some(v) = h.strip_prefix("Authorization: ") {
                                auth = Some(v.trim().to_string());
                            }
                        }
                        let path = line.split(' ').nth(1).unwrap_or("").to_string();
                        seen.lock().unwrap().push(format!("{path} {auth:?}"));
                        if out.write_all(&answer(&path, auth.as_deref())).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (port, log)
    }

    fn ok(body: &[u8]) -> Vec<u8> {
        let mut r =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        r.extend_from_slice(body);
        r
    }

    fn sha(b: &[u8]) -> String {
        berth_core::index::sha256_hex(b)
    }

    #[test]
    fn a_bearer_challenge_is_answered_with_a_token_got_with_the_auth_files_credentials() {
        let config = br#"{"architecture":"amd64","os":"linux","config":{}}"#.to_vec();
        let layer = b"not really a tar, but its digest is right".to_vec();
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": format!("sha256:{}", sha(&config)), "size": config.len()},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": format!("sha256:{}", sha(&layer)), "size": layer.len()}],
        })
        .to_string()
        .into_bytes();
        let port = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(0));
        let p = port.clone();
        let (m, c, l) = (manifest.clone(), config.clone(), layer.clone());
        let (port_n, log) = fake(move |path, auth| {
            let me = p.load(std::sync::atomic::Ordering::SeqCst);
            if path.starts_with("/token?") {
                return if auth == Some("Basic dXNlcjpwYXNz") {
                    ok(br#"{"token":"T0K3N"}"#)
                } else {
                    b"HTTP/1.1 401 No\r\nContent-Length: 0\r\n\r\n".to_vec()
                };
            }
            if auth != Some("Bearer T0K3N") {
                return format!(
                    "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"http://127.0.0.1:{me}/token\",service=\"reg\",scope=\"repository:team/app:pull\"\r\nContent-Length: 0\r\n\r\n"
                )
                .into_bytes();
            }
            match path {
                "/v2/team/app/manifests/1" => ok(&m),
                p if p.ends_with(&sha(&c)) => ok(&c),
                p if p.ends_with(&sha(&l)) => ok(&l),
                _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
            }
        });
        port.store(port_n, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("berth-registry-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let auth_file = dir.join("auth.json");
        let host = format!("127.0.0.1:{port_n}");
        std::fs::write(
            &auth_file,
            json!({"auths": {&host: {"auth": "dXNlcjpwYXNz"}}}).to_string(),
        )
        .unwrap();
        let r = Reference::parse(&format!("registry://{host}/team/app:1"))
            .unwrap()
            .unwrap();
        let opts = Options {
            plain_http: true,
            auth_file: Some(auth_file.clone()),
            ..Options::default()
        };
        let layout = dir.join("layout");
        assert_eq!(pull(&r, &opts, &layout).unwrap(), 1);
        for b in [&manifest, &config, &layer] {
            assert_eq!(
                &std::fs::read(layout.join("blobs/sha256").join(sha(b))).unwrap(),
                b
            );
        }
        let index = std::fs::read_to_string(layout.join("index.json")).unwrap();
        assert!(
            index.contains(&sha(&manifest)) && index.contains("\"1\""),
            "{index}"
        );
        let log = log.lock().unwrap().clone();
        assert_eq!(log[0], "/v2/team/app/manifests/1 None", "{log:?}");
        assert_eq!(
            log[1],
            "/token?service=reg&scope=repository%3Ateam%2Fapp%3Apull Some(\"Basic dXNlcjpwYXNz\")",
            "{log:?}"
        );
        assert!(
            log[2..]
                .iter()
                .all(|l| l.ends_with("Some(\"Bearer T0K3N\")")),
            "{log:?}"
        );
        assert_eq!(log.len(), 5, "{log:?}");
        // Without credentials the token service refuses: said so.
        let e = pull(
            &r,
            &Options {
                plain_http: true,
                ..Options::default()
            },
            &dir.join("l2"),
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("token service"), "{e:#}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_hostile_realm_gets_no_file_and_no_credentials() {
        let dir = std::env::temp_dir().join(format!("berth-realm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Another origin's token service: it sees no credentials (the registry is plain).
        let (other, other_log) = fake(|_, _| ok(br#"{"token":"T"}"#));
        let realm = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let r2 = realm.clone();
        let (port, _) = fake(move |_, _| {
            format!(
                "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"{}\"\r\nContent-Length: 0\r\n\r\n",
                r2.lock().unwrap()
            )
            .into_bytes()
        });
        let host = format!("127.0.0.1:{port}");
        let auth_file = dir.join("auth.json");
        std::fs::write(
            &auth_file,
            json!({"auths": {&host: {"auth": "dXNlcjpwYXNz"}}}).to_string(),
        )
        .unwrap();
        let r = Reference::parse(&format!("registry://{host}/app:1"))
            .unwrap()
            .unwrap();
        let opts = Options {
            plain_http: true,
            auth_file: Some(auth_file),
            ..Options::default()
        };
        *realm.lock().unwrap() = "file:///etc/hostname".into();
        let e = format!("{:#}", pull(&r, &opts, &dir.join("l1")).unwrap_err());
        assert!(e.contains("is not an https:// URL: not asked"), "{e}");
        *realm.lock().unwrap() = format!("http://127.0.0.1:{other}/token");
        let e = format!("{:#}", pull(&r, &opts, &dir.join("l2")).unwrap_err());
        assert!(e.contains("refused the credentials"), "{e}");
        let asked = other_log.lock().unwrap().clone();
        assert_eq!(asked, vec!["/token None".to_string()]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn blobs_are_bounded_before_any_is_fetched() {
        let d = |c: char| format!("sha256:{}", c.to_string().repeat(64));
        let manifest = json!({
            "schemaVersion": 2,
            "config": {"digest": d('a'), "size": 100},
            "layers": [{"digest": d('b'), "size": 5000u64}, {"digest": d('c'), "size": 10u64 << 30}],
        })
        .to_string()
        .into_bytes();
        let (port, log) = fake(move |_, _| ok(&manifest));
        let dir = std::env::temp_dir().join(format!("berth-bound-{}", std::process::id()));
        let r = Reference::parse(&format!("registry://127.0.0.1:{port}/app:1"))
            .unwrap()
            .unwrap();
        let opts = Options {
            plain_http: true,
            max_bytes: Some(1 << 20),
            ..Options::default()
        };
        let e = format!("{:#}", pull(&r, &opts, &dir).unwrap_err());
        assert!(e.contains("more than 128 layers or 1048576 bytes"), "{e}");
        assert_eq!(
            log.lock().unwrap().len(),
            1,
            "only the manifest was asked for"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn challenges() {
        let p = challenge_params(
            r#"realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull""#,
        );
        assert_eq!(
            p,
            vec![
                ("realm".into(), "https://auth.example/token".into()),
                ("service".into(), "registry.example".into()),
                ("scope".into(), "repository:a/b:pull".into()),
            ]
        );
        assert_eq!(
            query_escape("repository:a/b:pull"),
            "repository%3Aa%2Fb%3Apull"
        );
    }
}
