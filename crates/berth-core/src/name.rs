//! Package names and versions.
//!
//! A package name doubles as the LXC container name and the container's hostname, so it is
//! restricted to what is safe in all three places (and in file names under the store).

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest package name: hostnames allow 63, but LXC and interface names derived from the
/// container name are much shorter on old kernels, so keep room for prefixes.
pub const NAME_MAX: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("invalid package name {0:?}: must not be empty")]
    EmptyName(String),
    #[error("invalid package name {0:?}: longer than {NAME_MAX} characters")]
    NameTooLong(String),
    #[error("invalid package name {0:?}: only a-z, 0-9 and '-' are allowed")]
    NameChars(String),
    #[error("invalid package name {0:?}: must start with a-z or 0-9")]
    NameStart(String),
    #[error("invalid package name {0:?}: must not end with '-'")]
    NameEnd(String),
    #[error("invalid package name {0:?}: must not contain \"--\"")]
    NameDoubleDash(String),
    #[error("invalid version {0:?}: must not be empty")]
    EmptyVersion(String),
    #[error("invalid version {0:?}: empty component")]
    EmptyComponent(String),
    #[error("invalid version {0:?}: components must be decimal numbers")]
    NotNumeric(String),
    #[error("invalid version {0:?}: leading zero in a component")]
    LeadingZero(String),
    #[error("invalid version {0:?}: component too large")]
    ComponentTooLarge(String),
    #[error("invalid version {0:?}: at most 4 numeric components")]
    TooManyComponents(String),
    #[error("invalid version {0:?}: pre-release after '-' must be non-empty [0-9A-Za-z.]")]
    PreRelease(String),
}

/// A validated package name: `^[a-z0-9][a-z0-9-]{0,31}$`, not ending in '-', no "--".
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(String);

impl Name {
    pub fn parse(s: &str) -> Result<Name, NameError> {
        let err = |f: fn(String) -> NameError| Err(f(s.to_string()));
        if s.is_empty() {
            return err(NameError::EmptyName);
        }
        if !s
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return err(NameError::NameChars);
        }
        if s.len() > NAME_MAX {
            return err(NameError::NameTooLong);
        }
        if s.starts_with('-') {
            return err(NameError::NameStart);
        }
        if s.ends_with('-') {
            return err(NameError::NameEnd);
        }
        if s.contains("--") {
            return err(NameError::NameDoubleDash);
        }
        Ok(Name(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Serialize for Name {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Name::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A package version: 1 to 4 dotted numeric components, optionally followed by `-` and a
/// pre-release tag. Ordering is numeric with missing components read as 0 (so `1.2` equals
/// `1.2.0`), and a pre-release sorts before its release, as in semver.
#[derive(Debug, Clone)]
pub struct Version {
    text: String,
    nums: [u32; 4],
    pre: Option<String>,
}

impl Version {
    pub fn parse(s: &str) -> Result<Version, NameError> {
        let err = |f: fn(String) -> NameError| Err(f(s.to_string()));
        if s.is_empty() {
            return err(NameError::EmptyVersion);
        }
        let (core, pre) = match s.split_once('-') {
            Some((c, p)) => {
                if p.is_empty()
                    || !p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.')
                    || p.starts_with('.')
                    || p.ends_with('.')
                    || p.contains("..")
                {
                    return err(NameError::PreRelease);
                }
                (c, Some(p.to_string()))
            }
            None => (s, None),
        };
        let mut nums = [0u32; 4];
        for (i, part) in core.split('.').enumerate() {
            if i >= 4 {
                return err(NameError::TooManyComponents);
            }
            if part.is_empty() {
                return err(NameError::EmptyComponent);
            }
            if !part.bytes().all(|b| b.is_ascii_digit()) {
                return err(NameError::NotNumeric);
            }
            if part.len() > 1 && part.starts_with('0') {
                return err(NameError::LeadingZero);
            }
            nums[i] = match part.parse() {
                Ok(n) => n,
                Err(_) => return err(NameError::ComponentTooLarge),
            };
        }
        Ok(Version {
            text: s.to_string(),
            nums,
            pre,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// Compares semver pre-release tags: dot-separated identifiers, numeric ones numerically and
/// below alphanumeric ones, a shorter list of equal prefix first.
fn cmp_pre(a: &str, b: &str) -> Ordering {
    let mut ia = a.split('.');
    let mut ib = b.split('.');
    loop {
        match (ia.next(), ib.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let xn = x.bytes().all(|c| c.is_ascii_digit());
                let yn = y.bytes().all(|c| c.is_ascii_digit());
                let o = match (xn, yn) {
                    // Compare by length first so huge numbers never overflow.
                    (true, true) => {
                        let (x, y) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
                        x.len().cmp(&y.len()).then_with(|| x.cmp(y))
                    }
                    (true, false) => Ordering::Less,
                    (false, true) => Ordering::Greater,
                    (false, false) => x.cmp(y),
                };
                if o != Ordering::Equal {
                    return o;
                }
            }
        }
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nums
            .cmp(&other.nums)
            .then_with(|| match (&self.pre, &other.pre) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), None) => Ordering::Less,
                (Some(a), Some(b)) => cmp_pre(a, b),
            })
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Equality follows the ordering (`1.2 == 1.2.0`) so that Eq, Ord and Hash agree.
impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Version {}

impl Hash for Version {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.nums.hash(h);
        // Pre-release tags equal under cmp_pre may differ in leading zeros; hash a normal form.
        if let Some(p) = &self.pre {
            for id in p.split('.') {
                if id.bytes().all(|c| c.is_ascii_digit()) {
                    id.trim_start_matches('0').hash(h);
                } else {
                    id.hash(h);
                }
            }
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for Version {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Version::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_names() {
        for n in ["a", "0", "httpd", "lib-foo", "a1-b2-c3", &"x".repeat(32)] {
            assert_eq!(Name::parse(n).unwrap().as_str(), n);
        }
    }

    #[test]
    fn invalid_names() {
        let cases = [
            ("", "must not be empty"),
            ("Foo", "only a-z, 0-9 and '-' are allowed"),
            ("foo_bar", "only a-z"),
            ("foo.bar", "only a-z"),
            ("-foo", "must start"),
            ("foo-", "must not end"),
            ("a--b", "\"--\""),
            (&"x".repeat(33), "longer than 32"),
        ];
        for (n, msg) in cases {
            let e = Name::parse(n).unwrap_err().to_string();
            assert!(e.contains(msg), "{n:?}: {e}");
        }
        assert_eq!(
            Name::parse("Foo").unwrap_err().to_string(),
            r#"invalid package name "Foo": only a-z, 0-9 and '-' are allowed"#
        );
    }

    #[test]
    fn name_serde() {
        let n: Name = serde_json::from_str("\"httpd\"").unwrap();
        assert_eq!(serde_json::to_string(&n).unwrap(), "\"httpd\"");
        assert!(serde_json::from_str::<Name>("\"Bad\"").is_err());
    }

    #[test]
    fn valid_versions() {
        for v in [
            "0",
            "1",
            "1.2",
            "1.2.3",
            "1.2.3.4",
            "2.0.0-rc1",
            "4.19.0-r2",
            "1-a.1",
        ] {
            assert_eq!(Version::parse(v).unwrap().to_string(), v);
        }
        assert!(Version::parse("4294967295").is_ok());
    }

    #[test]
    fn invalid_versions() {
        let cases = [
            ("", "must not be empty"),
            ("1..2", "empty component"),
            (".1", "empty component"),
            ("1.", "empty component"),
            ("1.a", "decimal"),
            ("01", "leading zero"),
            ("4294967296", "too large"),
            ("1.2.3.4.5", "at most 4"),
            ("1.0-", "pre-release"),
            ("1.0-r_2", "pre-release"),
            ("1.0-a..b", "pre-release"),
            ("+1", "decimal"),
        ];
        for (v, msg) in cases {
            let e = Version::parse(v).unwrap_err().to_string();
            assert!(e.contains(msg), "{v:?}: {e}");
        }
        assert_eq!(
            Version::parse("1..2").unwrap_err().to_string(),
            r#"invalid version "1..2": empty component"#
        );
    }

    #[test]
    fn version_order() {
        let v = |s| Version::parse(s).unwrap();
        assert_eq!(v("1.2"), v("1.2.0"));
        assert_eq!(v("1.2").cmp(&v("1.2.0.0")), Ordering::Equal);
        assert_eq!(v("1.2").to_string(), "1.2");
        let sorted = [
            "0.9",
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc1",
            "1",
            "1.0.1",
            "1.2",
            "1.10",
            "2.0.0.1",
            "10",
        ];
        for w in sorted.windows(2) {
            assert!(v(w[0]) < v(w[1]), "{} < {}", w[0], w[1]);
        }
    }

    #[test]
    fn version_serde() {
        let v: Version = serde_json::from_str("\"1.2.3-rc1\"").unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), "\"1.2.3-rc1\"");
        assert!(serde_json::from_str::<Version>("\"1..2\"").is_err());
    }
}
