//! The daemon's one error: a kind (`berth_core::api::ErrorKind`, which carries the HTTP
//! status and the stable code) and a message for people.

use berth_core::api::error::{CODE, ERROR, RETRY_AFTER_MS};
use serde_json::{json, Value};

pub use berth_core::api::ErrorKind as Kind;

#[derive(Debug)]
pub struct Error {
    pub kind: Kind,
    pub message: String,
    /// When the request may be made again (a `429`): `Retry-After` and `retry_after_ms`.
    pub retry_after_ms: Option<u64>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: Kind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            retry_after_ms: None,
        }
    }

    /// `429 rate_limited`: `message`, and try again in `ms`.
    pub fn rate_limited(message: impl Into<String>, ms: u64) -> Error {
        Error {
            retry_after_ms: Some(ms),
            ..Error::new(Kind::RateLimited, message)
        }
    }

    pub fn bad_request(m: impl Into<String>) -> Error {
        Error::new(Kind::BadRequest, m)
    }

    /// An unexpected failure (an I/O error the operation has no better word for).
    pub fn internal(e: impl std::fmt::Display) -> Error {
        Error::new(Kind::Internal, format!("{e:#}"))
    }

    pub fn status(&self) -> u16 {
        self.kind.status()
    }

    pub fn code(&self) -> &'static str {
        self.kind.code()
    }

    /// The body of an error response.
    pub fn to_json(&self) -> Value {
        let mut v = json!({ERROR: self.message, CODE: self.code()});
        if let Some(ms) = self.retry_after_ms {
            v[RETRY_AFTER_MS] = json!(ms);
        }
        v
    }

    /// The whole HTTP response: `body` (the error's own JSON unless given), with a
    /// `Retry-After` header (whole seconds, rounded up) when it says when to try again.
    pub fn response(&self, body: Option<Value>) -> Vec<u8> {
        let headers = self
            .retry_after_ms
            .map(|ms| format!("Retry-After: {}\r\n", ms.div_ceil(1000)))
            .unwrap_or_default();
        let body = body.unwrap_or_else(|| self.to_json()).to_string();
        berth_core::http::response_with(
            self.status(),
            "application/json",
            &headers,
            body.as_bytes(),
        )
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<anyhow::Error> for Error {
    fn from(e: anyhow::Error) -> Error {
        Error::internal(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_429_says_when_to_try_again_in_its_header_and_its_body() {
        let e = Error::rate_limited("web: too soon", 1_001);
        let text = String::from_utf8(e.response(None)).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
            "{head}"
        );
        assert!(
            head.contains("\r\nRetry-After: 2\r\n"),
            "rounded up: {head}"
        );
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            v,
            json!({"error": "web: too soon", "code": "rate_limited", "retry_after_ms": 1001})
        );
        // other errors: no header, no field
        let e = Error::new(Kind::Busy, "busy");
        let text = String::from_utf8(e.response(None)).unwrap();
        assert!(!text.contains("Retry-After"), "{text}");
        assert!(!text.contains("retry_after_ms"), "{text}");
        assert!(text.contains("Content-Length: "), "{text}");
    }
}
