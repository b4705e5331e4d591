//! The daemon's one error: a kind (`berth_core::api::ErrorKind`, which carries the HTTP
//! status and the stable code) and a message for people.

use berth_core::api::error::{CODE, ERROR};
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
        json!({ERROR: self.message, CODE: self.code()})
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
