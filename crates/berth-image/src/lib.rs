//! Container images as untrusted input (`berth import`, docs/package-format.md, "Importing a
//! container image"; docs/security.md, "Untrusted trees"): an OCI image layout or a
//! docker-archive is found and checked ([`source`]), and its layers are applied in order
//! beneath a staging root ([`layer`]) without following a link the image made, with its
//! sizes and entry counts capped.
//!
//! The vendor tools of the `berth` binary use it; devices never do.

pub mod layer;
pub mod source;

use std::io;

/// Why an image was not imported: the crate's one error. The message names the entry or the
/// part of the image; [`ImageError::kind`] says what a caller can do about it.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// What names the image is not in a form berth reads (`oci:LAYOUT[:TAG]`,
    /// `docker-archive:FILE`).
    #[error("{0}")]
    Invalid(String),
    /// The image holds what berth refuses (a link followed, a path that leaves the image,
    /// a name that is not UTF-8, a cap passed), or is not what it says it is.
    #[error("{0}")]
    Refused(String),
    /// The file system or a reader failed.
    #[error("{what}: {err}")]
    Io { what: String, err: io::Error },
}

impl ImageError {
    /// The kind of failure, in berth-sys's terms (which the daemon maps to its API's).
    pub fn kind(&self) -> berth_sys::ErrorKind {
        match self {
            ImageError::Invalid(_) => berth_sys::ErrorKind::Invalid,
            ImageError::Refused(_) => berth_sys::ErrorKind::Refused,
            ImageError::Io { err, .. } if err.kind() == io::ErrorKind::NotFound => {
                berth_sys::ErrorKind::NotFound
            }
            ImageError::Io { .. } => berth_sys::ErrorKind::Refused,
        }
    }

    pub(crate) fn io(what: impl Into<String>, err: io::Error) -> ImageError {
        // A refusal of the tree walk is ours: its message is the whole story.
        if berth_sys::tree::is_refusal(&err) {
            return ImageError::Refused(format!("{}: {err}", what.into()));
        }
        ImageError::Io {
            what: what.into(),
            err,
        }
    }
}

pub type Result<T> = std::result::Result<T, ImageError>;

pub(crate) fn refused<T>(msg: impl Into<String>) -> Result<T> {
    Err(ImageError::Refused(msg.into()))
}

/// What one import may unpack: bytes of file data and entries over all its layers. An
/// image past them is refused (a decompression bomb, a huge sparse file, a million empty
/// files), naming the entry that went over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_bytes: u64,
    pub max_entries: u64,
}

impl Default for Limits {
    /// 2 GiB and 250,000 entries: a device's package is far smaller (a Debian base image
    /// holds about 9,000 entries); `berth import --max-size/--max-entries` raise them.
    fn default() -> Limits {
        Limits {
            max_bytes: 2 << 30,
            max_entries: 250_000,
        }
    }
}

/// How deep an entry's path may nest, and how long it may be.
pub const MAX_PATH_DEPTH: usize = 128;
pub const MAX_PATH_BYTES: usize = 4096;

/// The largest JSON document of an image read (index, manifest, configuration).
pub const MAX_JSON: u64 = 4 << 20;

/// Lowercase hex of a digest.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
