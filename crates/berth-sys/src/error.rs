//! berth-sys's error at its boundary, for the calls that answer with a message rather than
//! an `io::Error` or an error of their module: a kind callers can act on (the daemon maps it
//! to its API's kinds, and so to an HTTP status) and the message people read, which is all
//! that `Display` shows.

/// What went wrong, as a caller would act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A value handed in is not one the call can take.
    Invalid,
    /// A file or an object the call needs is not there.
    NotFound,
    /// The kernel or the system refused the call.
    Refused,
    /// What the call needs cannot be had on this system (a library that does not load).
    Unavailable,
}

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
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The message alone, for callers that carry errors as text.
impl From<Error> for String {
    fn from(e: Error) -> String {
        e.message
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_a_module_cannot_take_are_invalid() {
        let dir = std::env::temp_dir().join(format!("berth-sys-error-{}", std::process::id()));
        std::fs::write(&dir, b"not a module").unwrap();
        let e = crate::kmod::load(&dir, "a=\0").unwrap_err();
        let _ = std::fs::remove_file(&dir);
        assert_eq!(
            (e.kind, e.to_string().as_str()),
            (ErrorKind::Invalid, "a NUL in the parameters")
        );
        assert_eq!(String::from(e), "a NUL in the parameters");
    }

    #[test]
    fn liblxc_missing_is_unavailable() {
        // Whether liblxc loads here depends on the machine; when it does not, the error is
        // the loader's, and of the kind that says so.
        if let Err(e) = crate::lxc::available() {
            assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
        }
        if let Err(e) = crate::lxc::version_or_error() {
            assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
        }
    }
}
