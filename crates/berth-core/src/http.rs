//! Just enough HTTP/1.1 for berth's local APIs (admin socket, later the container API):
//! one request per connection, `Content-Length` bodies, bounded sizes. Pure parsing, so it
//! can be fuzzed; the caller reads bytes and writes responses.

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
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        412 => "Precondition Failed",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        507 => "Insufficient Storage",
        _ => "Unknown",
    }
}

/// A complete response with a body.
pub fn response(status: u16, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
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

/// Parses a response head (client side): status code and lowercase headers.
pub fn parse_response_head(head: &[u8]) -> Option<(u16, BTreeMap<String, String>)> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let mut headers = BTreeMap::new();
    for l in lines.filter(|l| !l.is_empty()) {
        let (k, v) = l.split_once(':')?;
        headers.insert(k.to_ascii_lowercase(), v.trim().to_string());
    }
    Some((status, headers))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let (status, headers) = parse_response_head(&r[..end]).unwrap();
        assert_eq!(status, 404);
        assert_eq!(headers["content-length"], "2");
        assert_eq!(&r[end..], b"{}");
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
