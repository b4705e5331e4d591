//! What the device has installed, as written to `/var/lib/berth/state.json` (atomically:
//! this file is the commit point of every install and remove), and the cached, signed index.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::index::IndexEntry;
use crate::manifest::Manifest;
use crate::name::{Name, Version};

pub const STATE_FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    pub format: u32,
    pub packages: BTreeMap<String, Installed>,
}

impl Default for State {
    fn default() -> Self {
        State {
            format: STATE_FORMAT,
            packages: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Installed {
    pub name: Name,
    pub version: Version,
    pub sha256: String,
    pub size: u64,
    pub trusted: bool,
    /// Asked for by name (not only pulled in as a dependency).
    pub explicit: bool,
    pub depends: Vec<Name>,
    pub manifest: Manifest,
    /// Seconds since the epoch.
    pub installed_at: u64,
    /// The version `berth upgrade` replaced, kept (with its image) for `berth rollback`
    /// until the next upgrade or the package's removal. Never has a `previous` itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<Box<Installed>>,
    /// Set while the upgrade to this version is not confirmed (it has not yet started and
    /// passed its health check): when it was committed, seconds since the epoch. A daemon
    /// that starts and finds it set rolls the upgrade back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial: Option<u64>,
}

impl Installed {
    /// Its image and its previous version's.
    pub fn images(&self) -> impl Iterator<Item = String> + '_ {
        std::iter::once(self.sha256.clone()).chain(self.previous.iter().map(|q| q.sha256.clone()))
    }

    /// A package as installed from its index entry and the manifest its image carries, now.
    pub fn from_entry(e: &IndexEntry, manifest: Manifest, explicit: bool, now: u64) -> Installed {
        Installed {
            name: e.name.clone(),
            version: e.version.clone(),
            sha256: e.sha256.clone(),
            size: e.size,
            trusted: e.trusted,
            explicit,
            depends: e.depends.clone(),
            manifest,
            installed_at: now,
            previous: None,
            trial: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state file is damaged: {0}")]
    Damaged(String),
    #[error("state file has format {0}; this berth reads format {STATE_FORMAT}")]
    Format(u32),
}

impl State {
    pub fn parse(bytes: &[u8]) -> Result<State, StateError> {
        let s: State =
            serde_json::from_slice(bytes).map_err(|e| StateError::Damaged(e.to_string()))?;
        if s.format != STATE_FORMAT {
            return Err(StateError::Format(s.format));
        }
        for (k, p) in &s.packages {
            if k != p.name.as_str() || p.manifest.package.name != p.name {
                return Err(StateError::Damaged(format!(
                    "entry {k:?} holds package {}",
                    p.name
                )));
            }
            // berth wrote it from a validated manifest; anything else is damage.
            if p.manifest.entrypoint.argv.is_empty() {
                return Err(StateError::Damaged(format!("{k}: empty entrypoint")));
            }
        }
        Ok(s)
    }

    pub fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("state serializes");
        v.push(b'\n');
        v
    }

    /// Installed packages that depend on `name`.
    pub fn dependents(&self, name: &str) -> Vec<String> {
        self.packages
            .values()
            .filter(|p| p.depends.iter().any(|d| d.as_str() == name))
            .map(|p| p.name.to_string())
            .collect()
    }

    /// Images that installed packages use: what `berth gc` keeps.
    pub fn referenced_images(&self) -> BTreeSet<String> {
        self.packages.values().flat_map(Installed::images).collect()
    }

    /// The images package `name` uses (its own and its previous version's); none when it is
    /// not installed.
    pub fn images_of(&self, name: &str) -> BTreeSet<String> {
        self.packages
            .get(name)
            .map(|p| p.images().collect())
            .unwrap_or_default()
    }

    /// What installing `names` (whose closure in the index is `closure`, in order) does to
    /// each package of the closure: kept as it is, or fetched, new or replacing an image.
    pub fn install_steps(&self, closure: &[&IndexEntry], names: &[String]) -> Vec<InstallStep> {
        closure
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let old = self.packages.get(e.name.as_str());
                // Asked for by name now, or before: a dependency never demotes a package.
                let explicit =
                    names.iter().any(|n| n == e.name.as_str()) || old.is_some_and(|p| p.explicit);
                match old {
                    Some(p) if p.sha256 == e.sha256 => InstallStep::Keep {
                        name: e.name.to_string(),
                        explicit,
                    },
                    _ => InstallStep::Fetch {
                        entry: i,
                        explicit,
                        replaces: old.map(|p| p.version.clone()),
                    },
                }
            })
            .collect()
    }
}

/// One package's part in an install (`State::install_steps`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstallStep {
    /// Installed with this very image: only whether it was asked for by name may change.
    Keep { name: String, explicit: bool },
    /// Its image is to be fetched (`entry`: its place in the closure); `replaces` is the
    /// version installed now, if any (an upgrade or a downgrade).
    Fetch {
        entry: usize,
        explicit: bool,
        replaces: Option<Version>,
    },
}

/// The last index fetched with `berth update`, kept with its signature so it is verified
/// again (against the keys trusted now) every time it is read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepoCache {
    /// The source it came from: the repository or one of its mirrors.
    pub url: String,
    pub fetched_at: u64,
    pub index: String,
    pub signature: String,
    /// The server's entity tags for the two files, for the next update's `If-None-Match`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_etag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_etag: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn installed(name: &str, deps: &[&str], sha: &str) -> Installed {
        let dep_list = deps
            .iter()
            .map(|d| format!("\"{d}\""))
            .collect::<Vec<_>>()
            .join(",");
        let m = Manifest::parse(&format!(
            "[package]\nname = \"{name}\"\nversion = \"1.0\"\ndepends = [{dep_list}]\n[entrypoint]\nargv = [\"/x\"]\n"
        ))
        .unwrap();
        Installed {
            name: m.package.name.clone(),
            version: m.package.version.clone(),
            sha256: sha.into(),
            size: 1,
            trusted: false,
            explicit: true,
            depends: m.package.depends.clone(),
            manifest: m,
            installed_at: 0,
            previous: None,
            trial: None,
        }
    }

    fn entry(p: &Installed) -> IndexEntry {
        IndexEntry {
            name: p.name.clone(),
            version: p.version.clone(),
            description: String::new(),
            file: format!("{}.sqfs", p.name),
            sha256: p.sha256.clone(),
            size: p.size,
            depends: p.depends.clone(),
            trusted: false,
            manifest: p.manifest.summary(),
            deltas: Vec::new(),
        }
    }

    #[test]
    fn an_install_keeps_what_is_there_and_fetches_the_rest() {
        let mut old = State::default();
        let mut lib = installed("lib", &[], "aa");
        lib.explicit = false;
        old.packages.insert("lib".into(), lib.clone());
        old.packages
            .insert("app".into(), installed("app", &["lib"], "bb"));
        // The index now: lib unchanged, app upgraded (another image), tool new.
        let lib_e = entry(&lib);
        let mut app_e = entry(&old.packages["app"]);
        app_e.sha256 = "cc".into();
        app_e.version = Version::parse("2.0").unwrap();
        let tool_e = entry(&installed("tool", &["lib"], "dd"));
        let closure = [&lib_e, &app_e, &tool_e];
        let steps = old.install_steps(&closure, &["tool".to_string()]);
        assert_eq!(
            steps,
            vec![
                // a dependency stays a dependency
                InstallStep::Keep {
                    name: "lib".into(),
                    explicit: false
                },
                // asked for by name before: still explicit; an upgrade of version 1.0
                InstallStep::Fetch {
                    entry: 1,
                    explicit: true,
                    replaces: Some(Version::parse("1.0").unwrap())
                },
                InstallStep::Fetch {
                    entry: 2,
                    explicit: true,
                    replaces: None
                },
            ]
        );
        // Asking for a dependency by name makes it explicit, without a fetch.
        let steps = old.install_steps(&[&lib_e], &["lib".to_string()]);
        assert_eq!(
            steps,
            vec![InstallStep::Keep {
                name: "lib".into(),
                explicit: true
            }]
        );
    }

    #[test]
    fn round_trip_and_queries() {
        let mut s = State::default();
        s.packages.insert("lib".into(), installed("lib", &[], "aa"));
        s.packages
            .insert("app".into(), installed("app", &["lib"], "bb"));
        let back = State::parse(&s.to_json()).unwrap();
        assert_eq!(back, s);
        assert_eq!(s.dependents("lib"), vec!["app".to_string()]);
        assert!(s.dependents("app").is_empty());
        assert_eq!(
            s.referenced_images().into_iter().collect::<Vec<_>>(),
            vec!["aa", "bb"]
        );
    }

    #[test]
    fn damaged_files_are_reported() {
        assert!(matches!(State::parse(b"{"), Err(StateError::Damaged(_))));
        assert!(matches!(
            State::parse(b"{\"format\":9,\"packages\":{}}"),
            Err(StateError::Format(9))
        ));
        let mut s = State::default();
        s.packages
            .insert("other".into(), installed("lib", &[], "aa"));
        assert!(State::parse(&s.to_json()).is_err());
    }
}
