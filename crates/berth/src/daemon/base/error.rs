//! The daemon's one error: a kind (`berth_core::api::ErrorKind`, which carries the HTTP
//! status and the stable code) and a message for people.

use berth_core::api::error::{CODE, ERROR, RETRY_AFTER_MS};
use serde_json::{json, Value};

pub use berth_core::api::ErrorKind as Kind;

#[derive(Debug)]
pub struct Error {
    pub kind: Kind,
    pub message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: Kind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// `429 rate_limited`: `message`, then when to try again (`; try again in MS ms`), which
    /// the answer's `Retry-After` and `retry_after_ms` are read back from. In the message,
    /// not a field of its own: an error is made and moved at every `?` of the daemon, and
    /// each field costs the device build bytes at every one of them.
    pub fn rate_limited(message: impl std::fmt::Display, ms: u64) -> Error {
        Error::new(
            Kind::RateLimited,
            format!("{message}; try again in {} ms", ms.max(1)),
        )
    }

    /// When a `429` may be asked again, in milliseconds (see `rate_limited`).
    pub fn retry_after_ms(&self) -> Option<u64> {
        if self.kind != Kind::RateLimited {
            return None;
        }
        let rest = self.message.strip_suffix(" ms")?;
        rest.rsplit(' ').next()?.parse().ok()
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
        if let Some(ms) = self.retry_after_ms() {
            v[RETRY_AFTER_MS] = json!(ms);
        }
        v
    }

    /// The whole HTTP response: its JSON, with a `Retry-After` header (whole seconds,
    /// rounded up) when it says when to try again.
    pub fn response(&self) -> Vec<u8> {
        let headers = self
            .retry_after_ms()
            .map(|ms| format!("Retry-After: {}\r\n", ms.div_ceil(1000)))
            .unwrap_or_default();
        let body = self.to_json().to_string();
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

/// berth-core's error keeps its kind (the same table) and its message.
impl From<berth_core::Error> for Error {
    fn from(e: berth_core::Error) -> Error {
        Error::new(e.kind, e.message)
    }
}

/// berth-sys's kinds, as the API answers them: a value it cannot take is the request's
/// fault; a refusal is the device's (`409 refused`); a library that does not load is the
/// device's failure.
impl From<berth_sys::Error> for Error {
    fn from(e: berth_sys::Error) -> Error {
        use berth_sys::ErrorKind as Sys;
        let kind = match e.kind {
            Sys::Invalid => Kind::BadRequest,
            Sys::NotFound => Kind::NotFound,
            Sys::Refused => Kind::Refused,
            Sys::Unavailable => Kind::Internal,
        };
        Error::new(kind, e.message)
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
    fn an_error_stays_as_small_as_its_kind_and_message() {
        assert_eq!(std::mem::size_of::<Error>(), 32);
    }

    #[test]
    fn a_library_error_gets_the_status_of_its_kind_and_keeps_its_message() {
        use berth_core::manifest::parse_size;
        let e = Error::from(parse_size("lots").unwrap_err());
        assert_eq!((e.kind, e.status()), (Kind::BadRequest, 400));
        assert_eq!(
            e.message,
            "invalid size \"lots\": expected a number with optional K, M or G"
        );
        let e = Error::from(berth_core::report::parse_id("x").unwrap_err());
        assert_eq!((e.status(), e.code()), (400, "bad_request"));
        let e = Error::from(berth_core::Error::not_found("no module"));
        assert_eq!((e.status(), e.message.as_str()), (404, "no module"));
        let e = Error::from(berth_core::Error::refused("no such cache"));
        assert_eq!((e.status(), e.code()), (409, "refused"));
        for (kind, status, code) in [
            (berth_sys::ErrorKind::Invalid, 400, "bad_request"),
            (berth_sys::ErrorKind::NotFound, 404, "not_found"),
            (berth_sys::ErrorKind::Refused, 409, "refused"),
            (berth_sys::ErrorKind::Unavailable, 500, "internal"),
        ] {
            let e = Error::from(berth_sys::Error::new(kind, "why"));
            assert_eq!(
                (e.status(), e.code(), e.message.as_str()),
                (status, code, "why")
            );
        }
    }

    #[test]
    fn a_429_says_when_to_try_again_in_its_header_and_its_body() {
        let e = Error::rate_limited("web: too soon", 1_001);
        let text = String::from_utf8(e.response()).unwrap();
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
            json!({"error": "web: too soon; try again in 1001 ms", "code": "rate_limited", "retry_after_ms": 1001})
        );
        // a 429 made otherwise (no time in its message): no header, no field
        let e = Error::new(Kind::RateLimited, "slow down");
        assert_eq!(e.retry_after_ms(), None);
        // other errors: no header, no field
        let e = Error::new(Kind::Busy, "busy");
        let text = String::from_utf8(e.response()).unwrap();
        assert!(!text.contains("Retry-After"), "{text}");
        assert!(!text.contains("retry_after_ms"), "{text}");
        assert!(text.contains("Content-Length: "), "{text}");
    }
}
