//! Just enough HTTP/1.1 for berth's local APIs (admin socket, later the container API):
//! one request per connection, `Content-Length` bodies, bounded sizes. Pure parsing, so it
//! can be fuzzed; the caller reads bytes and writes responses.
//!
//! The client side, for the CLI and the repository fetcher: response heads (status, framing,
//! redirect target) and chunked bodies. A repository is any static HTTP server, so these
//! parse what a remote peer sends.

use std::collections::BTreeMap;

/// Largest request head we accept; a request is a method, a short path and a few headers.
pub const MAX_HEAD: usize = 8 * 1024;
/// Largest request body (JSON of a few names).
pub const MAX_BODY: usize = 64 * 1024;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HttpError {
    #[error("request head larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("request body larger than {MAX_BODY} bytes")]
    BodyTooLarge,
    #[error("malformed request line {0:?}")]
    BadRequestLine(String),
    #[error("malformed header line {0:?}")]
    BadHeader(String),
    #[error("unsupported HTTP version {0:?}")]
    BadVersion(String),
    #[error("bad Content-Length {0:?}")]
    BadLength(String),
    #[error("request head is not UTF-8")]
    NotUtf8,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub method: String,
    /// Path without the query, percent-decoding not applied (berth's paths are plain names).
    pub path: String,
    pub query: BTreeMap<String, String>,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn query_flag(&self, key: &str) -> bool {
        matches!(
            self.query.get(key).map(String::as_str),
            Some("1") | Some("true") | Some("")
        )
    }
}

/// Where the head ends (index just past the blank line), if it is complete.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// A whole request from what has arrived so far: `Ok(None)` while the head or the body is
/// incomplete, an error as soon as what arrived cannot become a valid request.
pub fn parse_complete(buf: &[u8]) -> Result<Option<Request>, HttpError> {
    let Some(end) = head_end(buf) else {
        if buf.len() > MAX_HEAD {
            return Err(HttpError::HeadTooLarge);
        }
        return Ok(None);
    };
    let (mut req, len) = parse_head(&buf[..end])?;
    if buf.len() - end < len {
        return Ok(None);
    }
    req.body = buf[end..end + len].to_vec();
    Ok(Some(req))
}

/// Parses a request head. Returns the request (with an empty body) and the body length the
/// headers announce.
pub fn parse_head(head: &[u8]) -> Result<(Request, usize), HttpError> {
    if head.len() > MAX_HEAD {
        return Err(HttpError::HeadTooLarge);
    }
    let text = std::str::from_utf8(head).map_err(|_| HttpError::NotUtf8)?;
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut parts = first.split(' ');
    let (method, target, version) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(t), Some(v), None) if !m.is_empty() && t.starts_with('/') => (m, t, v),
        _ => return Err(HttpError::BadRequestLine(first.chars().take(80).collect())),
    };
    if !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(HttpError::BadRequestLine(first.chars().take(80).collect()));
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(HttpError::BadVersion(version.chars().take(20).collect()));
    }
    let (path, query_text) = match target.split_once('?') {
        Some((p, q)) => (p, q),
        None => (target, ""),
    };
    let mut query = BTreeMap::new();
    for pair in query_text.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        query.insert(k.to_string(), v.to_string());
    }
    let mut headers = BTreeMap::new();
    for l in lines {
        if l.is_empty() {
            continue;
        }
        let (k, v) = l
            .split_once(':')
            .ok_or_else(|| HttpError::BadHeader(l.chars().take(80).collect()))?;
        if k.is_empty() || k.contains(' ') {
            return Err(HttpError::BadHeader(l.chars().take(80).collect()));
        }
        headers.insert(k.to_ascii_lowercase(), v.trim().to_string());
    }
    let len = match headers.get("content-length") {
        None => 0,
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| HttpError::BadLength(v.chars().take(20).collect()))?,
    };
    if len > MAX_BODY {
        return Err(HttpError::BodyTooLarge);
    }
    Ok((
        Request {
            method: method.to_string(),
            path: path.to_string(),
            query,
            headers,
            body: Vec::new(),
        },
        len,
    ))
}

pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        202 => "Accepted",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        412 => "Precondition Failed",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        507 => "Insufficient Storage",
        _ => "Unknown",
    }
}

/// A complete response with a body.
pub fn response(status: u16, content_type: &str, body: &[u8]) -> Vec<u8> {
    response_with(status, content_type, "", body)
}

/// A complete response with a body and `headers`: whole header lines, each ending in CRLF
/// (`"Retry-After: 3\r\n"`), or nothing.
pub fn response_with(status: u16, content_type: &str, headers: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{headers}Connection: close\r\n\r\n",
        reason(status),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// The head of a streamed response: the body runs until the connection closes.
pub fn stream_head(status: u16, content_type: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nConnection: close\r\n\r\n",
        reason(status)
    )
    .into_bytes()
}

/// Largest response head (status line and headers); a static file server sends a few hundred
/// bytes. Also the bound on the trailers of a chunked body.
pub const MAX_RESPONSE_HEAD: usize = 32 * 1024;
/// Most header lines in one response head.
pub const MAX_RESPONSE_HEADERS: usize = 100;

/// What is wrong with a response; the repository fetcher shows it after the URL.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ResponseError {
    #[error("response head longer than {MAX_RESPONSE_HEAD} bytes")]
    HeadTooLarge,
    #[error("response head is not UTF-8")]
    NotUtf8,
    #[error("bad status line {0:?}")]
    BadStatusLine(String),
    #[error("bad header line {0:?}")]
    BadHeader(String),
    #[error("more than {MAX_RESPONSE_HEADERS} headers")]
    TooManyHeaders,
    #[error("bad Content-Length {0:?}")]
    BadLength(String),
    #[error("conflicting Content-Length headers")]
    ConflictingLength,
    #[error("unsupported Transfer-Encoding {0:?}")]
    TransferEncoding(String),
    #[error("unsupported Content-Encoding {0:?}")]
    ContentEncoding(String),
}

/// How the body of a response ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// After `Content-Length` bytes.
    Length(u64),
    /// At the last chunk (`Transfer-Encoding: chunked`: libcurl decodes it).
    Chunked,
    /// When the server closes the connection.
    Close,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    /// The reason phrase, trimmed; may be empty.
    pub reason: String,
    pub framing: Framing,
    /// The `Location` header, for redirects.
    pub location: Option<String>,
    /// The `ETag` header, as sent (quotes and a weak `W/` included), for `If-None-Match` and
    /// `If-Range`.
    pub etag: Option<String>,
    /// `Content-Range: bytes FIRST-LAST/TOTAL` of a 206 answer (TOTAL `*`: unknown).
    pub content_range: Option<ContentRange>,
}

/// The part of a resource a 206 answer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentRange {
    pub first: u64,
    pub last: u64,
    pub total: Option<u64>,
}

/// `bytes FIRST-LAST/TOTAL` (RFC 9110 §14.4), FIRST ≤ LAST < TOTAL; None otherwise.
pub fn parse_content_range(v: &str) -> Option<ContentRange> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (first, last) = range.split_once('-')?;
    let (first, last): (u64, u64) = (first.trim().parse().ok()?, last.trim().parse().ok()?);
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse::<u64>().ok()?),
    };
    if first > last || total.is_some_and(|t| last >= t) {
        return None;
    }
    Some(ContentRange { first, last, total })
}

/// A response head from what has arrived so far: `Ok(None)` while it is incomplete, else the
/// head and its length in bytes (the body follows). Every complete line is checked as it
/// arrives, so a caller that parses again at each line end learns of a bad status line before
/// the rest of the head comes. Lines may end in LF alone (RFC 9112 §2.2).
pub fn parse_response_head(buf: &[u8]) -> Result<Option<(ResponseHead, usize)>, ResponseError> {
    let mut status: Option<ResponseHead> = None;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut count = 0;
    let mut pos = 0;
    while let Some(nl) = buf[pos..].iter().position(|&b| b == b'\n') {
        let end = pos + nl + 1;
        if end > MAX_RESPONSE_HEAD {
            return Err(ResponseError::HeadTooLarge);
        }
        let line = trim_eol(&buf[pos..end]);
        let line = std::str::from_utf8(line).map_err(|_| ResponseError::NotUtf8)?;
        pos = end;
        let Some(head) = status.as_mut() else {
            status = Some(parse_status_line(line)?);
            continue;
        };
        if line.is_empty() {
            head.framing = if chunked {
                // Chunked wins over Content-Length (RFC 9112 §6.3).
                Framing::Chunked
            } else if let Some(len) = length {
                Framing::Length(len)
            } else {
                Framing::Close
            };
            return Ok(status.map(|head| (head, end)));
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| ResponseError::BadHeader(line.to_owned()))?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let len: u64 = value
                .parse()
                .map_err(|_| ResponseError::BadLength(value.to_owned()))?;
            // Two different lengths mean nobody can tell where the body ends.
            if length.is_some_and(|l| l != len) {
                return Err(ResponseError::ConflictingLength);
            }
            length = Some(len);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // Only chunked alone: gzip and friends would need a decoder we do not carry.
            if !value.eq_ignore_ascii_case("chunked") {
                return Err(ResponseError::TransferEncoding(value.to_owned()));
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case("location") {
            head.location = Some(value.to_owned());
        } else if name.eq_ignore_ascii_case("etag") {
            head.etag = Some(value.to_owned());
        } else if name.eq_ignore_ascii_case("content-range") {
            head.content_range = Some(
                parse_content_range(value)
                    .ok_or_else(|| ResponseError::BadHeader(line.to_owned()))?,
            );
        } else if name.eq_ignore_ascii_case("content-encoding")
            && !value.eq_ignore_ascii_case("identity")
        {
            return Err(ResponseError::ContentEncoding(value.to_owned()));
        }
        count += 1;
        if count > MAX_RESPONSE_HEADERS {
            return Err(ResponseError::TooManyHeaders);
        }
    }
    if buf.len() > MAX_RESPONSE_HEAD {
        return Err(ResponseError::HeadTooLarge);
    }
    Ok(None)
}

/// `HTTP/1.x NNN reason`.
fn parse_status_line(line: &str) -> Result<ResponseHead, ResponseError> {
    let bad = || ResponseError::BadStatusLine(line.to_owned());
    let mut parts = line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let code = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") || code.len() != 3 {
        return Err(bad());
    }
    Ok(ResponseHead {
        status: code.parse().map_err(|_| bad())?,
        reason: parts.next().unwrap_or("").trim().to_owned(),
        framing: Framing::Close,
        location: None,
        etag: None,
        content_range: None,
    })
}

/// A line without its LF and the CR before it, if any.
fn trim_eol(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etag_and_content_range_are_read() {
        let (h, _) = parse_response_head(
            b"HTTP/1.1 206 Partial Content\r\nETag: \"6b0a-186a0\"\r\nContent-Range: bytes 99990-99999/100000\r\nContent-Length: 10\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.etag.as_deref(), Some("\"6b0a-186a0\""));
        assert_eq!(
            h.content_range,
            Some(ContentRange {
                first: 99990,
                last: 99999,
                total: Some(100000)
            })
        );
        assert_eq!(parse_content_range("bytes 0-9/*").unwrap().total, None);
        for bad in [
            "bytes 9-0/10",
            "bytes 0-10/10",
            "items 0-1/2",
            "bytes 0-1",
            "bytes x-1/2",
        ] {
            assert_eq!(parse_content_range(bad), None, "{bad}");
        }
        assert!(
            parse_response_head(b"HTTP/1.1 206 x\r\nContent-Range: bytes 5-1/9\r\n\r\n").is_err()
        );
    }

    #[test]
    fn parses_a_request() {
        let raw =
            b"POST /v1/install?follow=1&x HTTP/1.1\r\nHost: berth\r\nContent-Length: 5\r\n\r\n";
        assert_eq!(head_end(raw), Some(raw.len()));
        let (r, len) = parse_head(raw).unwrap();
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/v1/install");
        assert!(r.query_flag("follow"));
        assert!(r.query_flag("x"));
        assert!(!r.query_flag("y"));
        assert_eq!(r.headers["host"], "berth");
        assert_eq!(len, 5);
    }

    #[test]
    fn rejects_garbage() {
        assert!(matches!(
            parse_head(b"GET\r\n\r\n"),
            Err(HttpError::BadRequestLine(_))
        ));
        assert!(matches!(
            parse_head(b"get / HTTP/1.1\r\n\r\n"),
            Err(HttpError::BadRequestLine(_))
        ));
        assert!(matches!(
            parse_head(b"GET / HTTP/2\r\n\r\n"),
            Err(HttpError::BadVersion(_))
        ));
        assert!(matches!(
            parse_head(b"GET / HTTP/1.1\r\nNoColon\r\n\r\n"),
            Err(HttpError::BadHeader(_))
        ));
        assert!(matches!(
            parse_head(b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"),
            Err(HttpError::BadLength(_))
        ));
        assert_eq!(
            parse_head(b"GET / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n"),
            Err(HttpError::BodyTooLarge)
        );
        assert_eq!(
            parse_head(&[b'a'; MAX_HEAD + 1]),
            Err(HttpError::HeadTooLarge)
        );
        assert_eq!(parse_head(&[0xff, 0xfe]), Err(HttpError::NotUtf8));
    }

    #[test]
    fn never_panics_on_noise() {
        // A cheap stand-in for the fuzz target: every prefix and byte mutation of a request.
        let base = b"POST /v1/x?a=b HTTP/1.1\r\nContent-Length: 3\r\nA: b\r\n\r\n".to_vec();
        for i in 0..base.len() {
            let _ = parse_head(&base[..i]);
            for b in [0u8, b' ', b':', b'\r', b'\n', 0xff, b'?', b'='] {
                let mut m = base.clone();
                m[i] = b;
                let _ = parse_head(&m);
            }
        }
    }

    #[test]
    fn responses_round_trip() {
        let r = response(404, "application/json", b"{}");
        let end = head_end(&r).unwrap();
        let (head, len) = parse_response_head(&r).unwrap().unwrap();
        assert_eq!(len, end);
        assert_eq!((head.status, head.reason.as_str()), (404, "Not Found"));
        assert_eq!(head.framing, Framing::Length(2));
        assert_eq!(&r[end..], b"{}");
        let r = stream_head(200, "text/plain");
        let (head, _) = parse_response_head(&r).unwrap().unwrap();
        assert_eq!(head.framing, Framing::Close);
    }

    fn head_of(text: &str) -> Result<Option<(ResponseHead, usize)>, ResponseError> {
        parse_response_head(text.as_bytes())
    }

    #[test]
    fn parses_response_heads() {
        let raw =
            "HTTP/1.1 301 Moved  Permanently \r\nLocation: /new\r\nContent-Length: 0\r\n\r\nbody";
        let (head, len) = head_of(raw).unwrap().unwrap();
        assert_eq!(
            head,
            ResponseHead {
                status: 301,
                reason: "Moved  Permanently".into(),
                framing: Framing::Length(0),
                location: Some("/new".into()),
                etag: None,
                content_range: None,
            }
        );
        assert_eq!(&raw[len..], "body");
        // Bare LF line ends, no reason phrase, no framing header.
        let (head, len) = head_of("HTTP/1.0 200\nServer: x\n\nrest").unwrap().unwrap();
        assert_eq!((head.status, head.reason.as_str()), (200, ""));
        assert_eq!((head.framing, len), (Framing::Close, 24));
        // Incomplete until the blank line, at every cut.
        for cut in 0..raw.len() - 4 {
            assert_eq!(head_of(&raw[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn response_framing_rules() {
        let framing = |headers: &str| {
            head_of(&format!("HTTP/1.1 200 OK\r\n{headers}\r\n")).map(|h| h.unwrap().0.framing)
        };
        let chunked = "Transfer-Encoding: Chunked\r\nContent-Length: 5\r\n";
        assert_eq!(framing(chunked), Ok(Framing::Chunked));
        let same_twice = "content-length: 5\r\nContent-Length:5\r\n";
        assert_eq!(framing(same_twice), Ok(Framing::Length(5)));
        let conflicting = "Content-Length: 5\r\nContent-Length: 6\r\n";
        assert_eq!(framing(conflicting), Err(ResponseError::ConflictingLength));
        assert_eq!(
            framing("Content-Length: -1\r\n"),
            Err(ResponseError::BadLength("-1".into()))
        );
        assert_eq!(
            framing("Transfer-Encoding: gzip, chunked\r\n"),
            Err(ResponseError::TransferEncoding("gzip, chunked".into()))
        );
        assert_eq!(
            framing("Transfer-Encoding: gzip\r\n"),
            Err(ResponseError::TransferEncoding("gzip".into()))
        );
        assert_eq!(
            framing("Content-Encoding: gzip\r\n"),
            Err(ResponseError::ContentEncoding("gzip".into()))
        );
        assert_eq!(
            framing("Content-Encoding: identity\r\n"),
            Ok(Framing::Close)
        );
        assert_eq!(
            framing("NoColon\r\n"),
            Err(ResponseError::BadHeader("NoColon".into()))
        );
    }

    #[test]
    fn bad_status_lines_are_refused_before_the_head_ends() {
        for line in [
            "HTTP/2 200 OK",
            "HTTP/1.1 20 OK",
            "HTTP/1.1 abc",
            "ICY 200 OK",
            "",
        ] {
            assert_eq!(
                head_of(&format!("{line}\r\nServer: still coming")),
                Err(ResponseError::BadStatusLine(line.into()))
            );
        }
        assert_eq!(head_of("HTTP/1.1 200"), Ok(None));
        assert_eq!(
            parse_response_head(b"HTTP/1.1 200 \xff\r\n"),
            Err(ResponseError::NotUtf8)
        );
    }

    #[test]
    fn response_heads_are_bounded() {
        let with_headers = |n: usize| {
            let mut text = "HTTP/1.1 200 OK\r\n".to_string();
            for i in 0..n {
                text.push_str(&format!("X-{i}: y\r\n"));
            }
            text + "\r\n"
        };
        assert!(head_of(&with_headers(MAX_RESPONSE_HEADERS)).is_ok());
        assert_eq!(
            head_of(&with_headers(MAX_RESPONSE_HEADERS + 1)),
            Err(ResponseError::TooManyHeaders)
        );
        let long = format!(
            "HTTP/1.1 200 OK\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_RESPONSE_HEAD)
        );
        assert_eq!(head_of(&long), Err(ResponseError::HeadTooLarge));
        // A head that never ends is refused once too long, not waited for.
        let endless = "HTTP/1.1 200 OK\r\nX: ".to_string() + &"a".repeat(MAX_RESPONSE_HEAD);
        assert_eq!(head_of(&endless), Err(ResponseError::HeadTooLarge));
        let exact = format!(
            "HTTP/1.1 200 OK\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_RESPONSE_HEAD - 24)
        );
        assert_eq!(exact.len(), MAX_RESPONSE_HEAD);
        assert!(head_of(&exact).unwrap().is_some());
    }

    #[test]
    fn response_parsers_never_panic_on_noise() {
        let base = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nETag: \"x\"\r\n\r\n".to_vec();
        for i in 0..base.len() {
            for b in [0u8, b' ', b':', b'\r', b'\n', 0xff, b';', b'0', b'f'] {
                let mut m = base.clone();
                m[i] = b;
                let _ = parse_response_head(&m);
            }
        }
    }

    #[test]
    fn requests_complete_only_when_head_and_body_have_arrived() {
        let full = b"POST /v1/stop HTTP/1.1\r\nContent-Length: 14\r\n\r\n{\"name\":\"web\"}";
        for cut in 0..full.len() {
            assert_eq!(parse_complete(&full[..cut]).unwrap(), None, "cut at {cut}");
        }
        let r = parse_complete(full).unwrap().unwrap();
        assert_eq!(r.path, "/v1/stop");
        assert_eq!(r.body, b"{\"name\":\"web\"}");
        // a head that never ends is refused once it is too large, not waited for
        let endless = vec![b'a'; MAX_HEAD + 1];
        assert!(matches!(
            parse_complete(&endless),
            Err(HttpError::HeadTooLarge)
        ));
        assert!(parse_complete(b"GARBAGE\r\n\r\n").is_err());
    }
}
