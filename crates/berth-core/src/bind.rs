//! Hot-binding (docs/hot-binding.md): an installed package's tree shown read-only inside a
//! container at a path (`/opt/PACKAGE` unless told otherwise). Pure: which paths may be
//! targets, where a target's mount point comes from, the LXC lines of a start, and the two
//! small records the daemon keeps (the bindings of a run, the operator's persistent ones),
//! one binding per line.

use crate::error::Error;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Where the daemon's bind anchor appears in a container whose image has an empty `/opt`:
/// a directory the daemon can make mount points in (the image itself is read-only).
pub const ANCHOR: &str = "/opt";
/// The propagation method's way in: the daemon's binds made below the anchor's `stage/`
/// on the host appear here, inside the container, and are bound on from here.
pub const STAGE: &str = "/run/berth/binds";
/// Longest accepted target.
pub const TARGET_MAX: usize = 240;

/// Where a package is bound when no path is given.
pub fn default_target(package: &str) -> String {
    format!("{ANCHOR}/{package}")
}

/// Whether `at` may be a bind target: an absolute path in normal form, of letters, digits
/// and `/._-+@` only (LXC's mount entries are split at spaces), never one of the container's
/// own mount points, nor below the kernel's file systems or berth's own `/run/berth`.
pub fn check_target(at: &str) -> Result<(), Error> {
    crate::path::check_abs_path(at)?;
    if at.len() > TARGET_MAX
        || !at
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+@".contains(&b))
    {
        return Err(Error::invalid(format!(
            "{at:?}: only letters, digits and /._-+@ (at most {TARGET_MAX} bytes)"
        )));
    }
    for own in ["/", ANCHOR, "/tmp", "/run", "/data"] {
        if at == own {
            return Err(Error::invalid(format!(
                "{at}: is the container's own mount point"
            )));
        }
    }
    for kernel in ["/proc", "/sys", "/dev", "/run/berth"] {
        if below_or_at(at, kernel) {
            return Err(Error::invalid(format!("{at}: is below {kernel}")));
        }
    }
    Ok(())
}

fn below_or_at(path: &str, dir: &str) -> bool {
    path == dir || path.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

/// Whether two targets would stack: equal, or one below the other.
pub fn overlap(a: &str, b: &str) -> bool {
    below_or_at(a, b) || below_or_at(b, a)
}

/// The part of `at` below the anchor (`tools` for `/opt/tools`), when the container has
/// the anchor: that mount point is made by the daemon. Otherwise the target must be a
/// directory of the image.
pub fn under_anchor(at: &str, anchored: bool) -> Option<&str> {
    at.strip_prefix(ANCHOR)
        .and_then(|r| r.strip_prefix('/'))
        .filter(|_| anchored)
}

/// The directories to remove once a binding at `at` ends, deepest first: `at` and its
/// parents up to `created`, the first one the daemon made for it.
pub fn made_dirs<'a>(at: &'a str, created: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    if created.is_empty() || !below_or_at(at, created) {
        return out;
    }
    let mut p = at;
    loop {
        out.push(p);
        if p.len() <= created.len() {
            return out;
        }
        p = &p[..p.rfind('/').unwrap_or(0)];
    }
}

/// How a binding was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// open_tree + move_mount into the container's mount namespace (Linux ≥ 5.2).
    MountApi,
    /// A bind on the host below the anchor, propagated into the container, bound on there.
    Propagation,
    /// An LXC mount entry of the container's start (persistent and manifest bindings).
    Start,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::MountApi => "mount-api",
            Method::Propagation => "propagation",
            Method::Start => "start",
        }
    }

    fn parse(s: &str) -> Option<Method> {
        [Method::MountApi, Method::Propagation, Method::Start]
            .into_iter()
            .find(|m| m.as_str() == s)
    }
}

/// One binding of a container's run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub package: String,
    pub version: String,
    /// The image bound (the package's version when it was bound: an upgrade leaves it).
    pub sha256: String,
    pub at: String,
    pub method: Method,
    /// Asked for by the container's manifest (`[[bind]]`), not by the operator.
    pub manifest: bool,
    /// The first directory the daemon made for the mount point, or empty.
    pub created: String,
    /// Where a `bind` or `unbind` is: recorded before the mount is made or taken off, and
    /// confirmed after, so that a daemon killed in between finds what it was doing.
    pub state: BindState,
}

/// A binding's place in its operation (docs/hot-binding.md, "A daemon killed mid-way").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindState {
    /// Made and confirmed (or made by the start).
    Bound,
    /// Being made: the mount may or may not be there yet; `persist`: the operator asked for
    /// it to outlive the run.
    Binding { persist: bool },
    /// Being taken off: the mount may or may not be gone yet; `forget`: its persistent
    /// record goes too.
    Unbinding { forget: bool },
}

impl BindState {
    fn as_str(self) -> &'static str {
        match self {
            BindState::Bound => "bound",
            BindState::Binding { persist: false } => "binding",
            BindState::Binding { persist: true } => "binding+persist",
            BindState::Unbinding { forget: false } => "unbinding",
            BindState::Unbinding { forget: true } => "unbinding+forget",
        }
    }

    fn parse(s: &str) -> Option<BindState> {
        Some(match s {
            "bound" => BindState::Bound,
            "binding" => BindState::Binding { persist: false },
            "binding+persist" => BindState::Binding { persist: true },
            "unbinding" => BindState::Unbinding { forget: false },
            "unbinding+forget" => BindState::Unbinding { forget: true },
            _ => return None,
        })
    }
}

/// What a daemon that finds an unfinished binding does, knowing whether the image shows
/// at its target in the container: finish the operation or undo it, so that the record and
/// the container's mounts agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Nothing to do.
    Keep,
    /// The mount is there: the binding is made (and persisted, when asked).
    Confirm { persist: bool },
    /// The mount is not there: the record goes (and the directories made for it).
    Drop,
    /// Being taken off and still there: unmount, then the record goes (and its persistent
    /// record, when asked).
    Unmount { forget: bool },
    /// Taken off: the record goes (and its persistent record, when asked).
    Forget { forget: bool },
}

/// The settling of a binding in `state` whose image does (`shows`) or does not show at its
/// target.
pub fn settle(state: BindState, shows: bool) -> Settle {
    match (state, shows) {
        (BindState::Bound, _) => Settle::Keep,
        (BindState::Binding { persist }, true) => Settle::Confirm { persist },
        (BindState::Binding { .. }, false) => Settle::Drop,
        (BindState::Unbinding { forget }, true) => Settle::Unmount { forget },
        (BindState::Unbinding { forget }, false) => Settle::Forget { forget },
    }
}

/// The record of a run's bindings: one line per binding, fields split by spaces (no field
/// can hold one: names, versions, hex digests and checked targets).
pub fn format_bindings(b: &[Binding]) -> String {
    let mut out = String::new();
    for b in b {
        let _ = writeln!(
            out,
            "{} {} {} {} {} {} {} {}",
            b.package,
            b.version,
            b.sha256,
            b.at,
            b.method.as_str(),
            if b.manifest { "manifest" } else { "operator" },
            if b.created.is_empty() {
                "-"
            } else {
                &b.created
            },
            b.state.as_str()
        );
    }
    out
}

/// Reads [`format_bindings`]' text; a line it cannot read is skipped.
pub fn parse_bindings(text: &str) -> Vec<Binding> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            // Seven fields: written by a berth from before the states (all bound).
            let (fields, state) = match f[..] {
                [.., s] if f.len() == 8 => (&f[..7], BindState::parse(s)?),
                _ => (&f[..], BindState::Bound),
            };
            let [package, version, sha256, at, method, origin, created] = fields[..] else {
                return None;
            };
            Some(Binding {
                package: package.into(),
                version: version.into(),
                sha256: sha256.into(),
                at: at.into(),
                method: Method::parse(method)?,
                manifest: origin == "manifest",
                created: if created == "-" { "" } else { created }.into(),
                state,
            })
        })
        .collect()
}

/// The operator's persistent bindings of a container, `PACKAGE TARGET` per line.
pub fn format_persisted(p: &[(String, String)]) -> String {
    p.iter().map(|(n, at)| format!("{n} {at}\n")).collect()
}

pub fn parse_persisted(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(n, at)| crate::name::Name::parse(n).is_ok() && check_target(at).is_ok())
        .map(|(n, at)| (n.to_string(), at.to_string()))
        .collect()
}

/// The LXC lines of a start: the anchor (`anchor` is the daemon's directory of this
/// container: its `opt/` is the container's `/opt` when `opt` is set, its `stage/` the
/// propagation method's way in, both slaves of the host's shared mount), then each binding
/// (image mount, target), read-only, nosuid, nodev.
pub fn lxc_lines(anchor: &Path, opt: bool, binds: &[(PathBuf, &str)]) -> String {
    let mut out = String::new();
    let a = anchor.display();
    if opt {
        let _ = writeln!(
            out,
            "lxc.mount.entry = {a}/opt opt none bind,ro,nosuid,nodev,slave 0 0"
        );
    }
    let _ = writeln!(
        out,
        "lxc.mount.entry = {a}/stage {} none bind,ro,nosuid,nodev,noexec,create=dir,slave 0 0",
        &STAGE[1..]
    );
    for (image, at) in binds {
        let _ = writeln!(
            out,
            "lxc.mount.entry = {} {} none bind,ro,nosuid,nodev 0 0",
            image.display(),
            &at[1..]
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        for ok in [
            "/opt/tools",
            "/opt/a/b",
            "/usr/share/x",
            "/srv/v1.2_x-y+z@",
            "/data/x",
        ] {
            assert_eq!(check_target(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("opt/x", "absolute"),
            ("/opt/../etc", ".."),
            ("/opt//x", "//"),
            ("/opt/x/", "end with"),
            ("/opt/a b", "only letters"),
            ("/opt/ä", "only letters"),
            ("/", "own mount point"),
            ("/opt", "own mount point"),
            ("/run", "own mount point"),
            ("/data", "own mount point"),
            ("/proc", "below /proc"),
            ("/proc/1", "below /proc"),
            ("/sys/x", "below /sys"),
            ("/dev/shm", "below /dev"),
            ("/run/berth", "below /run/berth"),
            ("/run/berth/binds/x", "below /run/berth"),
        ] {
            let e = check_target(bad).unwrap_err();
            assert!(e.message.contains(why), "{bad}: {e}");
        }
        assert!(check_target(&format!("/opt/{}", "x".repeat(TARGET_MAX))).is_err());
        // Near misses are fine.
        assert_eq!(check_target("/procx"), Ok(()));
        assert_eq!(check_target("/run/berthx"), Ok(()));
        assert_eq!(check_target("/run/x"), Ok(()));
        assert_eq!(default_target("tools"), "/opt/tools");
    }

    #[test]
    fn overlaps_and_anchor() {
        assert!(overlap("/opt/a", "/opt/a"));
        assert!(overlap("/opt/a", "/opt/a/b"));
        assert!(overlap("/opt/a/b", "/opt/a"));
        assert!(!overlap("/opt/a", "/opt/ab"));
        assert_eq!(under_anchor("/opt/tools/x", true), Some("tools/x"));
        assert_eq!(under_anchor("/opt/tools", false), None);
        assert_eq!(under_anchor("/optx/tools", true), None);
        assert_eq!(under_anchor("/usr/x", true), None);
    }

    #[test]
    fn made_dirs_deepest_first() {
        assert_eq!(
            made_dirs("/opt/a/b/c", "/opt/a"),
            ["/opt/a/b/c", "/opt/a/b", "/opt/a"]
        );
        assert_eq!(made_dirs("/opt/a", "/opt/a"), ["/opt/a"]);
        assert!(made_dirs("/opt/a", "").is_empty());
        assert!(made_dirs("/opt/a", "/opt/b").is_empty());
    }

    #[test]
    fn records_round_trip() {
        let b = vec![
            Binding {
                package: "tools".into(),
                version: "1.0.2-rc1".into(),
                sha256: "ab".repeat(32),
                at: "/opt/tools".into(),
                method: Method::MountApi,
                manifest: false,
                created: "/opt/tools".into(),
                state: BindState::Binding { persist: true },
            },
            Binding {
                package: "lib".into(),
                version: "2".into(),
                sha256: "cd".repeat(32),
                at: "/usr/share/lib".into(),
                method: Method::Start,
                manifest: true,
                created: String::new(),
                state: BindState::Bound,
            },
        ];
        let text = format_bindings(&b);
        assert!(
            text.contains(" mount-api operator /opt/tools binding+persist\n"),
            "{text}"
        );
        assert!(text.ends_with(" start manifest - bound\n"), "{text}");
        assert_eq!(parse_bindings(&text), b);
        // a record of a berth from before the states: bound
        let old = format!(
            "tools 1 {} /opt/tools mount-api operator -\n",
            "ab".repeat(32)
        );
        assert_eq!(parse_bindings(&old)[0].state, BindState::Bound);
        assert!(
            parse_bindings(&format!("{}x\n", old.trim_end()).replace(" -x", " - x")).is_empty()
        );
        assert_eq!(
            parse_bindings("garbage\na b c d nomethod operator -\n\n"),
            []
        );
        let p = vec![("tools".to_string(), "/opt/tools".to_string())];
        assert_eq!(parse_persisted(&format_persisted(&p)), p);
        assert!(parse_persisted("Bad /opt/x\ntools /proc/x\ntools\n").is_empty());
    }

    #[test]
    fn an_unfinished_binding_is_finished_or_undone_by_what_the_container_shows() {
        use BindState::*;
        for (state, shows, want) in [
            (Bound, true, Settle::Keep),
            (Bound, false, Settle::Keep),
            (
                Binding { persist: false },
                true,
                Settle::Confirm { persist: false },
            ),
            (
                Binding { persist: true },
                true,
                Settle::Confirm { persist: true },
            ),
            (Binding { persist: true }, false, Settle::Drop),
            (
                Unbinding { forget: true },
                true,
                Settle::Unmount { forget: true },
            ),
            (
                Unbinding { forget: false },
                true,
                Settle::Unmount { forget: false },
            ),
            (
                Unbinding { forget: true },
                false,
                Settle::Forget { forget: true },
            ),
        ] {
            assert_eq!(settle(state, shows), want, "{state:?} shows={shows}");
            assert_eq!(BindState::parse(state.as_str()), Some(state));
        }
    }

    #[test]
    fn lxc_lines_anchor_then_binds() {
        let a = Path::new("/run/berth/binds/web");
        let text = lxc_lines(a, true, &[("/run/berth/mnt/ab".into(), "/opt/tools")]);
        assert_eq!(
            text,
            "lxc.mount.entry = /run/berth/binds/web/opt opt none bind,ro,nosuid,nodev,slave 0 0\n\
             lxc.mount.entry = /run/berth/binds/web/stage run/berth/binds none bind,ro,nosuid,nodev,noexec,create=dir,slave 0 0\n\
             lxc.mount.entry = /run/berth/mnt/ab opt/tools none bind,ro,nosuid,nodev 0 0\n"
        );
        assert!(!lxc_lines(a, false, &[]).contains(" opt "));
    }
}
