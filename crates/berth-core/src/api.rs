//! What the daemon and its clients agree on: the error kinds of the API, each with its one
//! HTTP status and stable machine code (docs/openapi.yaml lists them).

/// One table: kind, HTTP status, code. The code is the API's contract (scripts match on it);
/// the status follows from it.
macro_rules! kinds {
    ($($kind:ident = $status:literal $code:literal,)*) => {
        /// Why an API request failed.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ErrorKind {
            $($kind,)*
        }

        impl ErrorKind {
            /// Every kind, in the table's order.
            pub const ALL: &'static [ErrorKind] = &[$(ErrorKind::$kind,)*];

            pub fn status(self) -> u16 {
                match self {
                    $(ErrorKind::$kind => $status,)*
                }
            }

            pub fn code(self) -> &'static str {
                match self {
                    $(ErrorKind::$kind => $code,)*
                }
            }

            pub fn from_code(code: &str) -> Option<ErrorKind> {
                match code {
                    $($code => Some(ErrorKind::$kind),)*
                    _ => None,
                }
            }
        }
    };
}

kinds! {
    // The request itself.
    BadRequest = 400 "bad_request",
    Forbidden = 403 "forbidden",
    NotPermitted = 403 "not_permitted",
    NotFound = 404 "not_found",
    MethodNotAllowed = 405 "method_not_allowed",
    // Packages and containers.
    NotInstalled = 404 "not_installed",
    UnknownPackage = 404 "unknown_package",
    AlreadyRunning = 409 "already_running",
    NotRunning = 409 "not_running",
    Running = 409 "running",
    Needed = 409 "needed",
    MissingLayer = 409 "missing_layer",
    // The device policy and the kernel say no.
    Refused = 409 "refused",
    BeyondPolicy = 409 "beyond_policy",
    NoDevice = 409 "no_device",
    NoIds = 409 "no_ids",
    NoUserns = 409 "no_userns",
    SharedUnscoped = 409 "shared_unscoped",
    Untraversable = 409 "untraversable",
    PoolExhausted = 409 "pool_exhausted",
    PortTaken = 409 "port_taken",
    // The repository.
    NoRepository = 412 "no_repository",
    NoKeys = 412 "no_keys",
    NoIndex = 412 "no_index",
    BadIndex = 422 "bad_index",
    BadSignature = 422 "bad_signature",
    Expired = 422 "expired",
    Rollback = 422 "rollback",
    BadImage = 422 "bad_image",
    BadManifest = 422 "bad_manifest",
    FetchFailed = 502 "fetch_failed",
    // The device could not do it.
    Internal = 500 "internal",
    BadCache = 500 "bad_cache",
    BadKey = 500 "bad_key",
    NoCgroups = 500 "no_cgroups",
    LimitFailed = 500 "limit_failed",
    MountFailed = 500 "mount_failed",
    StartFailed = 500 "start_failed",
    StopFailed = 500 "stop_failed",
    Network = 500 "network",
    Apparmor = 500 "apparmor",
    Busy = 503 "busy",
    NoSpace = 507 "no_space",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_read_back() {
        let mut seen = std::collections::BTreeSet::new();
        for k in ErrorKind::ALL {
            assert!(seen.insert(k.code()), "{} twice", k.code());
            assert_eq!(ErrorKind::from_code(k.code()), Some(*k));
            assert!((400..600).contains(&k.status()), "{k:?}");
            assert!(
                k.code().bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{}",
                k.code()
            );
        }
        assert_eq!(ErrorKind::from_code("nonsense"), None);
        assert_eq!(ErrorKind::NotInstalled.status(), 404);
        assert_eq!(ErrorKind::NoSpace.code(), "no_space");
    }

    #[test]
    fn the_openapi_file_lists_every_code() {
        let spec = include_str!("../../../docs/openapi.yaml");
        for k in ErrorKind::ALL {
            let row = format!("| {} | {} |", k.code(), k.status());
            let item = format!("            - {}\n", k.code());
            assert!(spec.contains(&row), "docs/openapi.yaml: no row {row}");
            assert!(spec.contains(&item), "docs/openapi.yaml: {} not in the enum", k.code());
        }
    }
}
