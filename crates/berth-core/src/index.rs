//! The repository index (`index.json`): one consistent set of packages, one version of each.
//!
//! The index comes from the network, so `Index::parse` checks everything the device later
//! relies on: unique names, well-formed hashes and file paths, dependencies present and acyclic.
//! With a single repository there is no solver: installing means taking the `closure`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::manifest::ManifestSummary;
use crate::name::{Name, Version};

pub const INDEX_FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error("invalid index: {0}")]
    Json(String),
    #[error(
        "unsupported index format {0} (this berth reads format {INDEX_FORMAT}; upgrade berth)"
    )]
    Format(u32),
    #[error("invalid index: package {0} is listed twice")]
    Duplicate(String),
    #[error("invalid index: package {package}: sha256 {sha256:?} is not 64 lowercase hex digits")]
    BadSha256 { package: String, sha256: String },
    #[error("invalid index: package {package}: delta {file:?}: {reason}")]
    BadDelta {
        package: String,
        file: String,
        reason: String,
    },
    #[error("invalid index: package {package}: file {file:?} {reason}")]
    BadFile {
        package: String,
        file: String,
        reason: &'static str,
    },
    #[error("invalid index: package {package} depends on {dependency}, which is not in the index")]
    MissingDependency { package: String, dependency: String },
    #[error("invalid index: dependency cycle {}", .0.join(" -> "))]
    Cycle(Vec<String>),
    #[error("unknown package {0:?}: not in the repository index (run berth update?)")]
    UnknownPackage(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Index {
    pub format: u32,
    /// Increases with every index the repository publishes (`berth repo build` uses the time
    /// in seconds, or one more than the previous index). A device refuses an index whose serial
    /// is lower than the one it already verified: an old, validly signed index cannot be
    /// replayed to roll it back to vulnerable versions.
    #[serde(default)]
    pub serial: u64,
    /// When the repository owner stops vouching for this index (UNIX seconds; set by `berth
    /// repo build --valid-for`). A device refuses an expired index, so an attacker who can
    /// only replay what was once signed cannot freeze a device on it for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<u64>,
    pub packages: Vec<IndexEntry>,
}

impl Index {
    /// Whether the index has expired at `now` (UNIX seconds).
    pub fn expired(&self, now: u64) -> bool {
        self.expires.is_some_and(|e| now >= e)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexEntry {
    pub name: Name,
    pub version: Version,
    #[serde(default)]
    pub description: String,
    /// Image path relative to the index's location.
    pub file: String,
    /// Hex sha256 of the image; also its name in the device's store.
    pub sha256: String,
    pub size: u64,
    #[serde(default)]
    pub depends: Vec<Name>,
    /// Marked trusted by the repository owner: may run privileged (see DESIGN.md, security).
    #[serde(default)]
    pub trusted: bool,
    pub manifest: ManifestSummary,
    /// Binary deltas that rebuild this image from an older one (`berth repo build
    /// --deltas-from`): a device holding `from` may fetch one of these instead of the image.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "deltas_from_json"
    )]
    pub deltas: Vec<Delta>,
}

/// The one delta format: `zstd --patch-from=OLD_IMAGE` (a zstd frame whose window reaches
/// into the old image), decoded with `zstd -d --patch-from=OLD_IMAGE`, which allows the
/// window the old image needs by itself (never `--long=31`: a 32-bit zstd refuses it).
pub const DELTA_ZSTD_PATCH: &str = "zstd-patch";

/// One binary delta in the signed index. The device checks the delta's own sha256 before it
/// decodes a byte of it, and the rebuilt image against the entry's sha256 before it uses it;
/// on any failure it fetches the whole image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Delta {
    /// The sha256 of the image it applies to (an older version's, held in the store).
    pub from: String,
    /// That image's version, for people.
    pub from_version: Version,
    /// How it was made; a device skips a format it does not know ([`DELTA_ZSTD_PATCH`]).
    pub format: String,
    /// Path relative to the index's location, as an image's.
    pub file: String,
    pub sha256: String,
    pub size: u64,
}

/// `deltas` read through `serde_json::Value`, which devices parse anyway: a derived
/// deserializer for one more struct costs the device build 5 KB. As strict as the derived
/// one: every key known and present, with its type.
fn deltas_from_json<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Delta>, D::Error> {
    const KEYS: [&str; 6] = ["from", "from_version", "format", "file", "sha256", "size"];
    let list = Vec::<serde_json::Value>::deserialize(d)?;
    list.iter()
        // A format this berth does not know may have keys of its own: skipped, not refused,
        // so that a repository can publish a new format beside this one.
        .filter(|v| v.get("format").and_then(|f| f.as_str()) == Some(DELTA_ZSTD_PATCH))
        .map(|v| {
            let o = v
                .as_object()
                .filter(|o| o.keys().all(|k| KEYS.contains(&k.as_str())));
            let text = |k: &str| Some(o?.get(k)?.as_str()?.to_string());
            Some(Delta {
                from: text("from")?,
                from_version: Version::parse(&text("from_version")?).ok()?,
                format: text("format")?,
                file: text("file")?,
                sha256: text("sha256")?,
                size: o?.get("size")?.as_u64()?,
            })
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| {
            serde::de::Error::custom(
                "a zstd-patch delta is {from, from_version, format, file, sha256: strings; size: an integer} and nothing else",
            )
        })
}

fn check_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The file name is joined to the repository URL or directory, so it must not climb out of it.
fn check_file(f: &str) -> Result<(), &'static str> {
    if f.is_empty() {
        return Err("is empty");
    }
    if !f
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/'))
    {
        return Err("may only contain A-Z a-z 0-9 . _ - /");
    }
    if f.starts_with('/') {
        return Err("must be relative");
    }
    if f.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err("must not contain empty, \".\" or \"..\" components");
    }
    Ok(())
}

/// Streaming sha256 of a package image: the index and the store identify images by it.
#[derive(Clone, Default)]
pub struct ImageHasher(sha2::Sha256);

impl ImageHasher {
    pub fn new() -> ImageHasher {
        ImageHasher::default()
    }

    pub fn update(&mut self, data: &[u8]) {
        sha2::Digest::update(&mut self.0, data);
    }

    /// Lowercase hex, the form `IndexEntry::sha256` holds.
    pub fn finish_hex(self) -> String {
        hex(&sha2::Digest::finalize(self.0))
    }
}

/// Lowercase hex of `bytes` (digests in the index and the store are written this way).
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// Lowercase hex sha256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    let mut h = ImageHasher::new();
    h.update(data);
    h.finish_hex()
}

impl Index {
    pub fn parse(bytes: &[u8]) -> Result<Index, IndexError> {
        let index: Index =
            serde_json::from_slice(bytes).map_err(|e| IndexError::Json(e.to_string()))?;
        index.validate()?;
        Ok(index)
    }

    /// Checks the rules `parse` enforces; also useful on an index built in memory.
    pub fn validate(&self) -> Result<(), IndexError> {
        if self.format != INDEX_FORMAT {
            return Err(IndexError::Format(self.format));
        }
        let mut names = BTreeSet::new();
        for p in &self.packages {
            if !names.insert(p.name.as_str()) {
                return Err(IndexError::Duplicate(p.name.to_string()));
            }
            if !check_sha256(&p.sha256) {
                return Err(IndexError::BadSha256 {
                    package: p.name.to_string(),
                    sha256: p.sha256.clone(),
                });
            }
            check_file(&p.file).map_err(|reason| IndexError::BadFile {
                package: p.name.to_string(),
                file: p.file.clone(),
                reason,
            })?;
            for (i, d) in p.deltas.iter().enumerate() {
                let bad = |reason: String| IndexError::BadDelta {
                    package: p.name.to_string(),
                    file: d.file.clone(),
                    reason,
                };
                check_file(&d.file).map_err(|r| bad(format!("file {r}")))?;
                for (what, h) in [("from", &d.from), ("sha256", &d.sha256)] {
                    if !check_sha256(h) {
                        return Err(bad(format!("{what} {h:?} is not 64 lowercase hex digits")));
                    }
                }
                if d.from == p.sha256 {
                    return Err(bad("applies to the image it makes".into()));
                }
                if p.deltas[..i]
                    .iter()
                    .any(|x| x.from == d.from && x.format == d.format)
                {
                    return Err(bad(format!("a second delta from {}", d.from)));
                }
            }
        }
        for p in &self.packages {
            for d in &p.depends {
                if !names.contains(d.as_str()) {
                    return Err(IndexError::MissingDependency {
                        package: p.name.to_string(),
                        dependency: d.to_string(),
                    });
                }
            }
        }
        let all: Vec<&str> = self.packages.iter().map(|p| p.name.as_str()).collect();
        self.order(&all).map(|_| ())
    }

    /// Pretty JSON with packages sorted by name, so the same set always signs the same way.
    pub fn to_json(&self) -> String {
        let mut sorted = self.clone();
        sorted.packages.sort_by(|a, b| a.name.cmp(&b.name));
        let mut s = serde_json::to_string_pretty(&sorted).expect("index serializes");
        s.push('\n');
        s
    }

    pub fn get(&self, name: &str) -> Option<&IndexEntry> {
        self.packages.iter().find(|p| p.name.as_str() == name)
    }

    /// The requested packages and everything they depend on, each once, dependencies before
    /// their dependents (the order to mount and start them in).
    pub fn closure(&self, names: &[&str]) -> Result<Vec<&IndexEntry>, IndexError> {
        self.order(names)
    }

    /// Depth-first post-order from `roots`; reports unknown names and cycles.
    fn order(&self, roots: &[&str]) -> Result<Vec<&IndexEntry>, IndexError> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            Active,
            Done,
        }
        // Names are unique (`validate`); an index holds tens of packages, not thousands.
        let mut marks: BTreeMap<&str, Mark> = BTreeMap::new();
        let mut out = Vec::new();
        for &root in roots {
            let entry = self
                .get(root)
                .ok_or_else(|| IndexError::UnknownPackage(root.to_string()))?;
            if marks.contains_key(root) {
                continue;
            }
            // Explicit stack instead of recursion: a hostile index must not blow the stack.
            // Each frame is (entry, index of the next dependency to visit).
            let mut stack: Vec<(&IndexEntry, usize)> = vec![(entry, 0)];
            marks.insert(entry.name.as_str(), Mark::Active);
            while let Some(top) = stack.last_mut() {
                let e: &IndexEntry = top.0;
                let next = e.depends.get(top.1);
                top.1 += 1;
                if let Some(dep) = next {
                    let d =
                        self.get(dep.as_str())
                            .ok_or_else(|| IndexError::MissingDependency {
                                package: e.name.to_string(),
                                dependency: dep.to_string(),
                            })?;
                    match marks.get(dep.as_str()) {
                        Some(Mark::Done) => {}
                        Some(Mark::Active) => {
                            let start = stack.iter().position(|(s, _)| s.name == *dep).unwrap_or(0);
                            let mut cycle: Vec<String> = stack[start..]
                                .iter()
                                .map(|(s, _)| s.name.to_string())
                                .collect();
                            cycle.push(dep.to_string());
                            return Err(IndexError::Cycle(cycle));
                        }
                        None => {
                            marks.insert(d.name.as_str(), Mark::Active);
                            stack.push((d, 0));
                        }
                    }
                } else {
                    marks.insert(e.name.as_str(), Mark::Done);
                    out.push(e);
                    stack.pop();
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{Base, NetMode, RootfsMode};

    fn entry(name: &str, deps: &[&str]) -> IndexEntry {
        IndexEntry {
            name: Name::parse(name).unwrap(),
            version: Version::parse("1.0").unwrap(),
            description: format!("the {name} package"),
            file: format!("packages/{name}-1.0.sqfs"),
            sha256: "ab".repeat(32),
            size: 4096,
            depends: deps.iter().map(|d| Name::parse(d).unwrap()).collect(),
            trusted: false,
            manifest: ManifestSummary {
                base: Base::None,
                rootfs: RootfsMode::Package,
                network_mode: NetMode::None,
                argv0: "/bin/x".into(),
                capabilities: vec![],
                devices: vec![],
            },
            deltas: vec![],
        }
    }

    fn delta(from: &str) -> Delta {
        Delta {
            from: from.repeat(32),
            from_version: Version::parse("0.9").unwrap(),
            format: DELTA_ZSTD_PATCH.into(),
            file: "deltas/a.zst".into(),
            sha256: "cd".repeat(32),
            size: 100,
        }
    }

    #[test]
    fn deltas_are_checked_like_images_and_round_trip() {
        let mut e = entry("a", &[]);
        e.deltas.push(delta("01"));
        let ok = index(vec![e.clone()]);
        let back = Index::parse(ok.to_json().as_bytes()).unwrap();
        assert_eq!(back.packages[0].deltas, e.deltas);
        // An index without deltas does not name the field (devices before them read it).
        assert!(!index(vec![entry("b", &[])]).to_json().contains("deltas"));
        for (change, want) in [
            (
                Box::new(|d: &mut Delta| d.file = "../x".into()) as Box<dyn Fn(&mut Delta)>,
                "file must not contain",
            ),
            (
                Box::new(|d: &mut Delta| d.from = "AB".repeat(32)),
                "from \"ABAB",
            ),
            (
                Box::new(|d: &mut Delta| d.sha256 = "x".into()),
                "sha256 \"x\"",
            ),
            (
                Box::new(|d: &mut Delta| d.from = "ab".repeat(32)),
                "applies to the image it makes",
            ),
        ] {
            let mut bad = e.clone();
            change(&mut bad.deltas[0]);
            let err = index(vec![bad]).validate().unwrap_err().to_string();
            assert!(
                err.contains("package a: delta") && err.contains(want),
                "{err}"
            );
        }
        let mut twice = e.clone();
        twice.deltas.push(delta("01"));
        let err = index(vec![twice]).validate().unwrap_err().to_string();
        assert!(err.contains("a second delta from"), "{err}");
        let text = ok
            .to_json()
            .replace("\"size\": 100", "\"size\": 100, \"extra\": 1");
        assert!(Index::parse(text.as_bytes()).is_err());
    }

    fn index(entries: Vec<IndexEntry>) -> Index {
        Index {
            format: INDEX_FORMAT,
            serial: 1,
            expires: None,
            packages: entries,
        }
    }

    fn reparse(i: &Index) -> Result<Index, IndexError> {
        Index::parse(i.to_json().as_bytes())
    }

    #[test]
    fn sha256_vectors() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let mut h = ImageHasher::new();
        h.update(b"a");
        h.update(b"bc");
        assert_eq!(
            h.finish_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(check_sha256(&sha256_hex(b"x")));
        assert_eq!(hex(&[0x00, 0x9f, 0xff]), "009fff");
    }

    #[test]
    fn roundtrip_sorted_and_deterministic() {
        let i = index(vec![
            entry("zed", &["app"]),
            entry("app", &[]),
            entry("lib", &[]),
        ]);
        let json = i.to_json();
        let back = Index::parse(json.as_bytes()).unwrap();
        let names: Vec<&str> = back.packages.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["app", "lib", "zed"]);
        assert_eq!(back.to_json(), json);
        assert_eq!(back.get("lib").unwrap().size, 4096);
        assert!(back.get("nope").is_none());
    }

    #[test]
    fn trusted_defaults_to_false() {
        let mut v: serde_json::Value =
            serde_json::from_str(&index(vec![entry("a", &[])]).to_json()).unwrap();
        v["packages"][0].as_object_mut().unwrap().remove("trusted");
        let i = Index::parse(v.to_string().as_bytes()).unwrap();
        assert!(!i.packages[0].trusted);
    }

    #[test]
    fn rejects_bad_indexes() {
        let mut bad_format = index(vec![]);
        bad_format.format = 2;
        assert_eq!(reparse(&bad_format), Err(IndexError::Format(2)));

        assert_eq!(
            reparse(&index(vec![entry("a", &[]), entry("a", &[])])),
            Err(IndexError::Duplicate("a".into()))
        );

        for sha in ["AB".repeat(32), "ab".repeat(31), "zz".repeat(32)] {
            let mut e = entry("a", &[]);
            e.sha256 = sha;
            assert!(matches!(
                reparse(&index(vec![e])),
                Err(IndexError::BadSha256 { .. })
            ));
        }

        for file in [
            "/abs.sqfs",
            "../x.sqfs",
            "a/../../x",
            "a//b",
            "./a",
            "a b",
            "",
            "a\\b",
        ] {
            let mut e = entry("a", &[]);
            e.file = file.into();
            assert!(
                matches!(reparse(&index(vec![e])), Err(IndexError::BadFile { .. })),
                "{file:?}"
            );
        }

        let e = reparse(&index(vec![entry("app", &["lib"])])).unwrap_err();
        assert_eq!(
            e,
            IndexError::MissingDependency {
                package: "app".into(),
                dependency: "lib".into()
            }
        );
        assert!(e.to_string().contains("app depends on lib"));

        let e = reparse(&index(vec![
            entry("a", &["b"]),
            entry("b", &["c"]),
            entry("c", &["a"]),
            entry("d", &[]),
        ]))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid index: dependency cycle a -> b -> c -> a"
        );

        // Unknown keys and invalid names are rejected by serde.
        let json = index(vec![entry("a", &[])])
            .to_json()
            .replace("\"format\"", "\"extra\": 1, \"format\"");
        assert!(matches!(
            Index::parse(json.as_bytes()),
            Err(IndexError::Json(_))
        ));
        let json = index(vec![entry("a", &[])])
            .to_json()
            .replace("\"a\"", "\"A\"");
        assert!(matches!(
            Index::parse(json.as_bytes()),
            Err(IndexError::Json(_))
        ));
        assert!(matches!(Index::parse(b"\xff"), Err(IndexError::Json(_))));
    }

    #[test]
    fn closure_orders_dependencies_first() {
        let i = index(vec![
            entry("app", &["web", "lib"]),
            entry("web", &["lib", "ssl"]),
            entry("lib", &[]),
            entry("ssl", &["lib"]),
            entry("other", &[]),
        ]);
        i.validate().unwrap();
        let names = |v: Vec<&IndexEntry>| v.iter().map(|e| e.name.to_string()).collect::<Vec<_>>();
        assert_eq!(
            names(i.closure(&["app"]).unwrap()),
            ["lib", "ssl", "web", "app"]
        );
        assert_eq!(
            names(i.closure(&["lib", "app", "lib"]).unwrap()),
            ["lib", "ssl", "web", "app"]
        );
        assert_eq!(
            names(i.closure(&["other", "ssl"]).unwrap()),
            ["other", "lib", "ssl"]
        );
        assert!(i.closure(&[]).unwrap().is_empty());
        let e = i.closure(&["app", "x"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"unknown package "x": not in the repository index (run berth update?)"#
        );
    }

    #[test]
    fn deep_chain_does_not_overflow() {
        let n = 20_000;
        let names: Vec<String> = (0..n).map(|i| format!("p{i}")).collect();
        let entries = (0..n)
            .map(|i| {
                let deps: Vec<&str> = if i + 1 < n {
                    vec![names[i + 1].as_str()]
                } else {
                    vec![]
                };
                entry(&names[i], &deps)
            })
            .collect();
        let i = index(entries);
        i.validate().unwrap();
        let c = i.closure(&["p0"]).unwrap();
        assert_eq!(c.len(), n);
        assert_eq!(c[0].name.as_str(), "p19999");
    }
}
