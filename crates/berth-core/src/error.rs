//! berth-core's error at its boundary, for what its checks and parsers of single values
//! refuse: a kind the admin API answers with (its HTTP status and stable code,
//! [`ErrorKind`]) and the message people read, which is all that `Display` shows. The
//! daemon's error takes both as they are; the manifest's and the configuration's readers put
//! the message in their own, with its line or key.
//!
//! Where a function refuses in many places and always with one kind, its reading says why
//! as text and the public function gives the kind once (`parse_new`, `parse_size`): one
//! construction of the error instead of one at each refusal, which the device build,
//! compiled for size, counts.

pub use crate::api::ErrorKind;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// A value that is not what it must be (`400 bad_request` when a request carried it).
    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::BadRequest, message)
    }

    /// What was looked for and is not there (`404 not_found`).
    pub fn not_found(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::NotFound, message)
    }

    /// What the device or its kernel cannot do as asked (`409 refused`).
    pub fn refused(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Refused, message)
    }

    /// The same error, its message after `prefix` (the field or entry that held the value).
    pub fn context(self, prefix: &str) -> Error {
        Error::new(self.kind, format!("{prefix}: {}", self.message))
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The message alone, for the readers that put it in an error of their own.
impl From<Error> for String {
    fn from(e: Error) -> String {
        e.message
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slab::{Amount, SlabLine, SlabPolicy};

    #[test]
    fn each_check_says_its_kind_and_shows_only_its_message() {
        let invalid = [
            crate::manifest::parse_size("lots").unwrap_err(),
            crate::manifest::parse_duration_ms("3").unwrap_err(),
            crate::manifest::parse_duration_s("3").unwrap_err(),
            crate::manifest::parse_percent("20").unwrap_err(),
            crate::path::check_abs_path("a/b").unwrap_err(),
            crate::bind::check_target("/proc/x").unwrap_err(),
            crate::report::parse_id("x").unwrap_err(),
            crate::schedule::check_cmd(&[]).unwrap_err(),
            crate::schedule::parse_new(&serde_json::json!([])).unwrap_err(),
            crate::container_api::permission_list("reboot").unwrap_err(),
            Amount::parse("0").unwrap_err(),
            crate::slab::cache_entry("dentry", Amount::Objects(1)).unwrap_err(),
        ];
        for e in &invalid {
            assert_eq!(e.kind, ErrorKind::BadRequest, "{e}");
            assert_eq!(e.to_string(), e.message);
        }
        let policy = SlabPolicy {
            caches: vec![("kmalloc-8k".into(), Amount::Bytes(1 << 20))],
            module: None,
            max_reserve: 100,
        };
        let e = policy.module_file("6.1.0", |_| false).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
        let slabs: [SlabLine; 0] = [];
        let e = crate::slab::caches_param(&policy, &slabs).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Refused, "{e}");
        assert_eq!(
            e.to_string(),
            "kmalloc-8k: this kernel has no such slab cache"
        );
    }

    #[test]
    fn context_goes_before_the_message_and_keeps_the_kind() {
        let e = Error::refused("too big").context("cache");
        assert_eq!(
            (e.kind, e.to_string().as_str()),
            (ErrorKind::Refused, "cache: too big")
        );
        assert_eq!(String::from(e), "cache: too big");
    }
}
