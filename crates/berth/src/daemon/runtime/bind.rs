//! `berth bind` and `berth unbind` (docs/hot-binding.md): an installed package's image shown
//! read-only, nosuid, nodev inside a running container, without a restart; the bindings a
//! start makes (the manifest's `[[bind]]`, the operator's persistent ones); what `status`
//! and `remove` are told.
//!
//! Each running container has a bind anchor, `<run>/binds/NAME`: a shared mount of its own
//! whose `opt/` is the container's `/opt` (when the image's `/opt` is empty: mount points
//! below it are made here, on the host side) and whose `stage/` is the container's
//! `/run/berth/binds` (the propagation method's way in). The mount API clones the image
//! mount and moves the clone into the container's mount namespace; without it (Linux < 5.2,
//! or the test hooks' `BERTH_FORCE_MOUNT_FALLBACK=1`) the image is bound below `stage/` on the host, appears
//! in the container by propagation, and is bound on from there inside the namespace.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use berth_core::api::bind as field;
use berth_core::bind::{self, BindState, Binding, Method, Settle};
use berth_core::state::{Installed, State};
use berth_sys::fsutil::write_atomic;
use berth_sys::mountns::Mount;
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::device::state;
use crate::daemon::runtime::mounts;
use crate::daemon::runtime::probe;
use crate::hooks;

pub(crate) fn bind(
    d: &Daemon,
    package: &str,
    container: &str,
    at: Option<String>,
    persist: bool,
) -> Result<Value> {
    let _op = d.op.lock().unwrap();
    let t0 = Instant::now();
    let p = state::installed(d, package)?;
    state::installed(d, container)?;
    let at = at.unwrap_or_else(|| bind::default_target(package));
    bind::check_target(&at).map_err(|e| Error::new(e.kind, format!("cannot bind at {e}")))?;
    let init = probe::running_init(d, container).ok_or_else(|| {
        Error::new(
            Kind::NotRunning,
            format!("{container} is not running (berth start {container})"),
        )
    })?;
    settle(d, container);
    let mut run = mounts::run_bindings(d, container);
    if let Some(b) = run.iter().find(|b| b.package == package) {
        return Err(Error::new(
            Kind::AlreadyBound,
            format!(
                "{package} is already bound into {container} at {} (berth unbind {package} --from {container})",
                b.at
            ),
        ));
    }
    taken(&run, container, &at)?;
    let image = mounts::ensure_image_mounted(d, &p.sha256)?;
    let anchor = d.cfg.paths.bind_anchor(container);
    let created = match bind::under_anchor(&at, anchor.join("opt").is_dir()) {
        Some(_) => make_dirs(&anchor, &at)?,
        None => String::new(),
    };
    // Decided before it is recorded: the record says how, should the daemon die mid-way.
    let method = if crate::hooks::force_mount_fallback() || !mount_api() {
        Method::Propagation
    } else {
        Method::MountApi
    };
    // Recorded before the mount is made, confirmed after: a daemon killed in between
    // finds the record and settles it by what the container shows (`settle`).
    run.push(Binding {
        package: package.into(),
        version: p.version.to_string(),
        sha256: p.sha256,
        at,
        method,
        manifest: false,
        created,
        state: BindState::Binding { persist },
    });
    let i = run.len() - 1;
    write_run(d, container, &run)?;
    hooks::point("bind.recorded");
    let attached = attach(d, init, &image, &run[i].at, method, &anchor, package);
    let method = match attached {
        Ok(m) => m,
        Err(e) => {
            let b = run.remove(i);
            remove_dirs(&anchor, &b.at, &b.created);
            write_run(d, container, &run)?;
            return Err(fail(e, container, &b.at));
        }
    };
    hooks::point("bind.mounted");
    log::info!(
        "bound {package}@{} into {container} at {} ({})",
        p.version,
        run[i].at,
        method.as_str()
    );
    if persist {
        keep(d, container, package, &run[i].at)?;
        hooks::point("bind.persisted");
    }
    run[i].method = method;
    run[i].state = BindState::Bound;
    write_run(d, container, &run)?;
    hooks::point("bind.confirmed");
    let mut v = entry(&run[i], persist, Some(method));
    v[field::CONTAINER] = container.into();
    v[field::BIND_MS] = (t0.elapsed().as_secs_f64() * 1000.0).into();
    Ok(v)
}

/// The operator's persistent binding of `package` into `container` at `at` (replacing one
/// of the same package).
fn keep(d: &Daemon, container: &str, package: &str, at: &str) -> Result<()> {
    let mut kept = persisted(d, container);
    kept.retain(|(n, _)| n != package);
    kept.push((package.into(), at.into()));
    write_persisted(d, container, &kept)
}

/// Forgets the operator's persistent binding of `package` into `container`.
fn unkeep(d: &Daemon, container: &str, package: &str) -> Result<()> {
    let mut kept = persisted(d, container);
    let before = kept.len();
    kept.retain(|(n, _)| n != package);
    match kept.len() == before {
        true => Ok(()),
        false => write_persisted(d, container, &kept),
    }
}

pub(crate) fn unbind(d: &Daemon, package: &str, container: &str) -> Result<Value> {
    let _op = d.op.lock().unwrap();
    let t0 = Instant::now();
    state::installed(d, container)?;
    settle(d, container);
    let mut run = mounts::run_bindings(d, container);
    let init = probe::running_init(d, container);
    let i = run
        .iter()
        .position(|b| b.package == package)
        .filter(|_| init.is_some());
    let persist = persisted(d, container).iter().any(|(n, _)| n == package);
    if i.is_none() && !persist {
        return Err(Error::new(
            Kind::NotBound,
            format!("{package} is not bound into {container}"),
        ));
    }
    let mut at = None;
    if let (Some(i), Some(init)) = (i, init) {
        // Recorded before the mount is taken off, the record dropped after (`settle`).
        run[i].state = BindState::Unbinding { forget: persist };
        write_run(d, container, &run)?;
        hooks::point("unbind.recorded");
        let b = run[i].clone();
        // Only what is still the package's image goes: the container cannot mount, but the
        // path is its own (a target no longer there has nothing to unmount).
        if let Some(id) = image_id(&d.cfg.paths.image_mount(&b.sha256)) {
            match d.host.mounts.at_target(
                d.proc(),
                init,
                b.at.clone().into(),
                Mount::Off,
                id,
                hooks::point,
            ) {
                Err(e) if e.raw_os_error() != Some(libc::ENOENT) => {
                    run[i].state = BindState::Bound;
                    write_run(d, container, &run)?;
                    return Err(fail(e, container, &b.at));
                }
                _ => {}
            }
        }
        hooks::point("unbind.unmounted");
        remove_dirs(&d.cfg.paths.bind_anchor(container), &b.at, &b.created);
        if persist {
            unkeep(d, container, package)?;
        }
        run.remove(i);
        write_run(d, container, &run)?;
        hooks::point("unbind.forgotten");
        log::info!("unbound {package} from {container} at {}", b.at);
        at = Some(b.at);
    } else if persist {
        unkeep(d, container, package)?;
    }
    // An image an upgrade replaced stayed mounted for this binding alone.
    mounts::release_mounts(d);
    Ok(json!({
        field::PACKAGE: package, field::CONTAINER: container, field::AT: at,
        field::UNMOUNTED: at.is_some(), field::PERSIST: persist,
        field::UNBIND_MS: t0.elapsed().as_secs_f64() * 1000.0,
    }))
}

/// Finishes or undoes what a daemon killed during a `bind` or `unbind` of `container` left
/// half done, by what the container's mount namespace shows at each unfinished binding's
/// target (`berth_core::bind::settle`): afterwards the record and the container's mounts
/// agree. A stage bind of the propagation method left on the host goes too. Called under
/// the op lock (at daemon start before any request, and by every bind and unbind).
pub(crate) fn settle(d: &Daemon, container: &str) {
    let Some(init) = probe::running_init(d, container) else {
        return;
    };
    let anchor = d.cfg.paths.bind_anchor(container);
    let stage = anchor.join("stage");
    for m in d
        .host
        .mounts
        .mounts_under(d.proc(), &stage)
        .unwrap_or_default()
        .iter()
        .rev()
    {
        log::warn!(
            "{container}: a stage bind a killed daemon left, {}: taken off",
            m.mount_point.display()
        );
        let _ = d.host.mounts.umount(&m.mount_point, true);
        let _ = std::fs::remove_dir(&m.mount_point);
    }
    let mut run = mounts::run_bindings(d, container);
    if run.iter().all(|b| b.state == BindState::Bound) {
        return;
    }
    let mut out = Vec::new();
    for mut b in run.drain(..) {
        let id = image_id(&d.cfg.paths.image_mount(&b.sha256));
        let shows = id.is_some_and(|id| {
            d.host
                .mounts
                .shows_at(d.proc(), init, b.at.clone().into(), id)
                .unwrap_or(false)
        });
        let action = bind::settle(b.state, shows);
        if action != Settle::Keep {
            log::warn!(
                "{container}: {} at {} was left {:?} by a daemon that stopped: {}",
                b.package,
                b.at,
                b.state,
                if shows {
                    "it is there"
                } else {
                    "it is not there"
                }
            );
        }
        let done = match action {
            Settle::Keep => Ok(true),
            Settle::Confirm { persist } => {
                b.state = BindState::Bound;
                match persist {
                    true => keep(d, container, &b.package, &b.at).map(|()| true),
                    false => Ok(true),
                }
            }
            Settle::Drop => Ok(false),
            Settle::Unmount { forget } => match id.map(|id| {
                let at = b.at.clone().into();
                d.host
                    .mounts
                    .at_target(d.proc(), init, at, Mount::Off, id, |_| {})
            }) {
                Some(Err(e)) => {
                    log::error!("{container}: cannot take {} off {}: {e}", b.package, b.at);
                    Ok(true)
                }
                _ if forget => unkeep(d, container, &b.package).map(|()| false),
                _ => Ok(false),
            },
            Settle::Forget { forget } => match forget {
                true => unkeep(d, container, &b.package).map(|()| false),
                false => Ok(false),
            },
        };
        match done {
            Ok(true) => out.push(b),
            Ok(false) => remove_dirs(&anchor, &b.at, &b.created),
            Err(e) => {
                log::error!("{container}: {}: {}", b.package, e.message);
                out.push(b);
            }
        }
    }
    if let Err(e) = write_run(d, container, &out) {
        log::error!("{container}: cannot record its bindings: {}", e.message);
    }
}

/// Whether this kernel has the mount API's `open_tree` (Linux 5.2), asked once.
fn mount_api() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| berth_sys::check::probe_open_tree().0 == berth_sys::check::Status::Present)
}

/// Refuses a target that would stack on (or under) one of the run's bindings.
fn taken(run: &[Binding], container: &str, at: &str) -> Result<()> {
    match run.iter().find(|b| bind::overlap(&b.at, at)) {
        Some(b) => Err(Error::new(
            Kind::TargetTaken,
            format!("{at} in {container}: {} is bound at {}", b.package, b.at),
        )),
        None => Ok(()),
    }
}

/// What a failed mount says: the target and the reason in words.
fn fail(e: io::Error, container: &str, at: &str) -> Error {
    let (kind, why) = match e.raw_os_error() {
        Some(libc::ENOENT) => (
            Kind::Refused,
            "no such directory (berth makes one only below an empty /opt of the image)".into(),
        ),
        Some(libc::ENOTDIR) => (
            Kind::Refused,
            "not a directory, or a symlink on the way".into(),
        ),
        Some(libc::EBUSY) => (Kind::TargetTaken, "something is mounted there".into()),
        Some(libc::ENOTEMPTY) => (
            Kind::TargetTaken,
            "not empty (a binding would hide its files)".into(),
        ),
        _ => (Kind::MountFailed, e.to_string()),
    };
    Error::new(kind, format!("{at} in {container}: {why}"))
}

/// The device and inode of a mount's root: what a binding of it shows at its target.
fn image_id(mnt: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(mnt).ok().map(|m| (m.dev(), m.ino()))
}

/// Mounts `image` on `at` inside the mount namespace of `init`, by `method`; the mount API
/// falls back to propagation where the kernel has no open_tree. Returns the method used.
fn attach(
    d: &Daemon,
    init: i32,
    image: &Path,
    at: &str,
    method: Method,
    anchor: &Path,
    package: &str,
) -> io::Result<Method> {
    let id = image_id(image).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
    if method == Method::MountApi {
        match d.host.mounts.clone_tree(image) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
            tree => {
                let tree = tree?;
                // Linux 5.2 to 5.11: no mount_setattr; the clone is remounted in place.
                let relock = match d.host.mounts.lock_tree(&tree) {
                    Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => true,
                    r => r.map(|_| false)?,
                };
                let m = Mount::Tree(tree, relock);
                return d
                    .host
                    .mounts
                    .at_target(d.proc(), init, at.into(), m, id, hooks::point)
                    .map(|_| method);
            }
        }
    }
    // The host's bind below the anchor's stage/ appears at /run/berth/binds/PACKAGE inside.
    let stage = anchor.join("stage").join(package);
    std::fs::create_dir_all(&stage)?;
    let r = d
        .host
        .mounts
        .bind(image, &stage, true)
        .map_err(|e| io::Error::other(e.to_string()))
        .and_then(|_| {
            hooks::point("bind.staged");
            let inside = Mount::Bind(Path::new(bind::STAGE).join(package));
            let m = &d.host.mounts;
            m.at_target(d.proc(), init, at.into(), inside, id, hooks::point)
        });
    // Leaving: its copy in the container goes with it (the binding made from it stays).
    let _ = d.host.mounts.umount(&stage, true);
    let _ = std::fs::remove_dir(&stage);
    r.map(|_| Method::Propagation)
}

/// Makes the mount point of `at` (below `/opt`) on the host side of the anchor; returns the
/// first directory it made, as the container sees it ("" if none): what an unbind removes.
fn make_dirs(anchor: &Path, at: &str) -> Result<String> {
    let created = at
        .match_indices('/')
        .skip(2)
        .map(|(i, _)| &at[..i])
        .chain([at])
        .find(|p| !anchor.join(&p[1..]).exists())
        .unwrap_or_default()
        .to_string();
    std::fs::create_dir_all(anchor.join(&at[1..]))
        .map_err(|e| Error::new(Kind::TargetTaken, format!("{at}: {e}")))?;
    Ok(created)
}

fn remove_dirs(anchor: &Path, at: &str, created: &str) {
    for dir in bind::made_dirs(at, created) {
        let _ = std::fs::remove_dir(anchor.join(&dir[1..]));
    }
}

/// The operator's persistent bindings of a container.
pub(crate) fn persisted(d: &Daemon, name: &str) -> Vec<(String, String)> {
    std::fs::read_to_string(d.cfg.paths.binds_file(name))
        .map(|t| bind::parse_persisted(&t))
        .unwrap_or_default()
}

fn write_persisted(d: &Daemon, name: &str, kept: &[(String, String)]) -> Result<()> {
    let path = d.cfg.paths.binds_file(name);
    if kept.is_empty() {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Error::internal(e)),
            _ => Ok(()),
        };
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(Error::internal)?;
    }
    write_atomic(&path, bind::format_persisted(kept).as_bytes(), 0o600)
        .map_err(|e| state::write_failed(d, &path, e, "the binding stays for this run only"))
}

fn write_run(d: &Daemon, name: &str, run: &[Binding]) -> Result<()> {
    let path = d.cfg.paths.lxc_dir(name).join("binds");
    berth_sys::fsutil::write_volatile(&path, bind::format_bindings(run).as_bytes(), 0o600)
        .map_err(Error::internal)
}

/// The bindings a start of `p` makes, manifest ones first: (package, target, from the
/// manifest). The operator's persistent binding of a package the manifest binds is not
/// made twice.
fn wanted<'a>(p: &'a Installed, kept: &'a [(String, String)]) -> Vec<(&'a str, &'a str, bool)> {
    let mut out: Vec<(&str, &str, bool)> =
        p.manifest.binds().map(|(n, at)| (n, at, true)).collect();
    for (n, at) in kept {
        if !out.iter().any(|(m, _, _)| m == n) {
            out.push((n, at, false));
        }
    }
    out
}

/// At a start, before LXC's configuration is written: the container's bind anchor made
/// afresh (a shared mount of its own, with `stage/`, and `opt/` when the image's `/opt`
/// is an empty directory), and the LXC lines of the bindings the start makes, recorded as
/// the run's. A package to bind that is not installed, or a target the image has no
/// directory for, fails the start.
pub(crate) fn prepare(d: &Daemon, st: &State, p: &Installed, rootfs: &Path) -> Result<String> {
    let name = p.name.as_str();
    let anchor = d.cfg.paths.bind_anchor(name);
    clear_anchor(d, &anchor)?;
    let opt = empty_dir(&rootfs.join("opt"));
    std::fs::create_dir_all(anchor.join("stage"))
        .and_then(|_| match opt {
            true => std::fs::create_dir(anchor.join("opt")),
            false => Ok(()),
        })
        .map_err(Error::internal)?;
    d.host.mounts.bind_shared(&anchor).map_err(|e| {
        Error::new(
            Kind::MountFailed,
            format!("{name}: bind anchor {}: {e}", anchor.display()),
        )
    })?;
    let kept = persisted(d, name);
    let (mut lines, mut run) = (Vec::new(), Vec::new());
    for (pkg, at, manifest) in wanted(p, &kept) {
        let why = if manifest {
            "its manifest's [[bind]]"
        } else {
            "berth bind --persist"
        };
        let b = st.packages.get(pkg).ok_or_else(|| {
            Error::new(
                Kind::NotInstalled,
                format!("{name}: {pkg} is to be bound at {at} ({why}) but is not installed: berth install {pkg}"),
            )
        })?;
        taken(&run, name, at)?;
        let created = match bind::under_anchor(at, opt) {
            Some(_) => make_dirs(&anchor, at)?,
            None if image_dir(rootfs, at) => String::new(),
            None => {
                return Err(Error::new(
                    Kind::Refused,
                    format!("{name}: cannot bind {pkg} at {at} ({why}): the image has no empty directory there, and berth makes one only below an empty /opt"),
                ))
            }
        };
        lines.push((mounts::ensure_image_mounted(d, &b.sha256)?, at));
        run.push(Binding {
            package: pkg.into(),
            version: b.version.to_string(),
            sha256: b.sha256.clone(),
            at: at.into(),
            method: Method::Start,
            manifest,
            created,
            state: BindState::Bound,
        });
    }
    std::fs::create_dir_all(d.cfg.paths.lxc_dir(name)).map_err(Error::internal)?;
    write_run(d, name, &run)?;
    Ok(bind::lxc_lines(&anchor, opt, &lines))
}

/// Unmounts what a former run left below a container's anchor and removes it.
fn clear_anchor(d: &Daemon, anchor: &Path) -> Result<()> {
    let left = d
        .host
        .mounts
        .mounts_under(d.proc(), anchor)
        .unwrap_or_default();
    for m in left.iter().rev() {
        let _ = d.host.mounts.umount(&m.mount_point, true);
    }
    // Only berth's own mounts can be there (the container's copies are slaves): an image
    // still mounted makes this fail (read-only), the anchor's own bind is its directory.
    match std::fs::remove_dir_all(anchor) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Error::internal(e)),
        _ => Ok(()),
    }
}

/// Whether `dir` is an empty directory (not a symlink to one).
fn empty_dir(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
        && std::fs::read_dir(dir).is_ok_and(|mut r| r.next().is_none())
}

/// Whether the image has an empty directory at `at`, reached without a symlink.
fn image_dir(rootfs: &Path, at: &str) -> bool {
    let mut p = PathBuf::from(rootfs);
    for c in at[1..].split('/') {
        p.push(c);
        if !std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
            return false;
        }
    }
    empty_dir(&p)
}

/// One binding as `status` and `bind` show it; `method` None: made at the next start.
fn entry(b: &Binding, persist: bool, method: Option<Method>) -> Value {
    json!({
        field::PACKAGE: b.package, field::VERSION: b.version, field::AT: b.at,
        field::PERSIST: persist, field::METHOD: method.map(Method::as_str),
        field::ORIGIN: if b.manifest { "manifest" } else { "operator" },
    })
}

/// A container's bindings for `status`: this run's while it runs, else those its next
/// start makes.
pub(crate) fn listing(d: &Daemon, st: &State, p: &Installed, running: bool) -> Value {
    let name = p.name.as_str();
    let kept = persisted(d, name);
    let list = match running {
        true => mounts::run_bindings(d, name),
        false => wanted(p, &kept)
            .into_iter()
            .map(|(pkg, at, manifest)| Binding {
                package: pkg.into(),
                version: st
                    .packages
                    .get(pkg)
                    .map(|i| i.version.to_string())
                    .unwrap_or_default(),
                sha256: String::new(),
                at: at.into(),
                method: Method::Start,
                manifest,
                created: String::new(),
                state: BindState::Bound,
            })
            .collect(),
    };
    list.iter()
        .map(|b| {
            let persist = kept.iter().any(|(n, _)| *n == b.package);
            entry(b, persist, running.then_some(b.method))
        })
        .collect()
}

/// The containers `package` is bound into (this run's bindings of running ones, persistent
/// ones, manifests), other than `except`: what `berth remove` refuses to pull from under.
pub(crate) fn bound_into(d: &Daemon, st: &State, package: &str, except: &[String]) -> Vec<String> {
    st.packages
        .values()
        .filter(|c| !except.iter().any(|e| e == c.name.as_str()))
        .filter(|c| {
            let n = c.name.as_str();
            wanted(c, &persisted(d, n))
                .iter()
                .any(|(p, _, _)| *p == package)
                || probe::is_running(d, n)
                    && mounts::run_bindings(d, n)
                        .iter()
                        .any(|b| b.package == package)
        })
        .map(|c| c.name.to_string())
        .collect()
}

/// A removed container's persistent bindings go with it.
pub(crate) fn forget(d: &Daemon, name: &str) {
    let _ = std::fs::remove_file(d.cfg.paths.binds_file(name));
    // Its anchor's empty directories (its mounts went with its last run); remove_dir, never
    // a recursive removal: something still mounted there stays, and says so by staying.
    let anchor = d.cfg.paths.bind_anchor(name);
    for sub in ["opt", "stage"] {
        let _ = std::fs::remove_dir(anchor.join(sub));
    }
    let _ = std::fs::remove_dir(&anchor);
}

#[cfg(test)]
mod tests {
    use berth_core::api::bind as f;
    use serde_json::json;

    use super::*;
    use crate::daemon::base::testing::{fake_daemon, install};
    use crate::daemon::runtime::probe::tests::{info, lxc_config, FakeShim};

    /// `web`, whose manifest binds `tool` at /opt/tool.
    const WEB: &str = "[package]\nname = \"web\"\nversion = \"1.0\"\n[entrypoint]\nargv = [\"/bin/httpd\"]\n[[bind]]\npackage = \"tool\"\nat = \"/opt/tool\"\n";

    fn package(name: &str, version: &str) -> String {
        format!("[package]\nname = \"{name}\"\nversion = \"{version}\"\n[entrypoint]\nargv = [\"/bin/{name}\"]\n")
    }

    fn binding(package: &str, at: &str, created: &str, state: BindState) -> Binding {
        Binding {
            package: package.into(),
            version: "2.0".into(),
            sha256: "cd".repeat(32),
            at: at.into(),
            method: Method::MountApi,
            manifest: false,
            created: created.into(),
            state,
        }
    }

    /// `web` and its packages installed, running by its shim's word (init 4242: a pid no
    /// namespace of which is entered here, its /proc entry is not in the fixture).
    fn running(
        tag: &str,
    ) -> (
        berth_testkit::TempDir,
        Daemon,
        &'static berth_testkit::fake_host::FakeMounts,
        FakeShim,
    ) {
        let (dir, d, m) = fake_daemon(tag, "");
        install(&d, WEB);
        install(&d, &package("tool", "2.0"));
        install(&d, &package("lib", "3.0"));
        lxc_config(&d, "web");
        let shim = FakeShim::start(&d, "web", info(4242), b"");
        (dir, d, m, shim)
    }

    /// What `bind` refuses before anything is mounted: a package or container not
    /// installed, a target not allowed, a container that does not run.
    #[test]
    fn bind_refuses_what_is_not_installed_a_bad_target_or_a_stopped_container() {
        let (_dir, d, m) = fake_daemon("bind-refused", "");
        let e = bind(&d, "tool", "web", None, false).unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (
                Kind::NotInstalled,
                "tool is not installed (berth install tool)"
            )
        );
        install(&d, &package("tool", "2.0"));
        let e = bind(&d, "tool", "web", None, false).unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (
                Kind::NotInstalled,
                "web is not installed (berth install web)"
            )
        );
        install(&d, WEB);
        let e = bind(&d, "tool", "web", Some("/opt/a b".into()), false).unwrap_err();
        assert_eq!(e.kind, Kind::BadRequest);
        assert!(e.message.starts_with("cannot bind at "), "{}", e.message);
        let e = bind(&d, "tool", "web", None, false).unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (Kind::NotRunning, "web is not running (berth start web)")
        );
        assert!(m.calls().is_empty(), "{:?}", m.calls());
        assert!(!d.cfg.paths.lxc_dir("web").join("binds").exists());
    }

    /// A running container: a package already bound, or a target on or below another
    /// binding's, is refused naming it; an image that cannot be mounted leaves no record.
    #[test]
    fn bind_refuses_a_package_already_bound_a_target_taken_and_an_image_not_mounted() {
        let (_dir, d, m, _shim) = running("bind-taken");
        let lib = binding("lib", "/srv/lib", "", BindState::Bound);
        write_run(
            &d,
            "web",
            &[
                binding("tool", "/opt/tool", "", BindState::Bound),
                lib.clone(),
            ],
        )
        .unwrap();
        let e = bind(&d, "tool", "web", Some("/opt/other".into()), false).unwrap_err();
        assert_eq!(e.kind, Kind::AlreadyBound);
        assert_eq!(
            e.message,
            "tool is already bound into web at /opt/tool (berth unbind tool --from web)"
        );

        write_run(&d, "web", std::slice::from_ref(&lib)).unwrap();
        let e = bind(&d, "tool", "web", Some("/srv/lib/x".into()), false).unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (
                Kind::TargetTaken,
                "/srv/lib/x in web: lib is bound at /srv/lib"
            )
        );
        let e = bind(&d, "tool", "web", Some("/srv".into()), false).unwrap_err();
        assert_eq!(e.kind, Kind::TargetTaken, "{}", e.message);
        assert!(
            m.calls().iter().all(|c| !c.starts_with("mount_squashfs")),
            "{:?}",
            m.calls()
        );

        m.fail_next("mount_squashfs", libc::EIO);
        let e = bind(&d, "tool", "web", None, true).unwrap_err();
        assert_eq!(e.kind, Kind::MountFailed);
        let image = d.cfg.paths.image(&"ab".repeat(32));
        assert!(
            e.message
                .starts_with(&format!("cannot mount {}: ", image.display())),
            "{}",
            e.message
        );
        assert!(
            m.calls().iter().any(|c| c.starts_with("mount_squashfs ")),
            "{:?}",
            m.calls()
        );
        assert_eq!(mounts::run_bindings(&d, "web"), [lib]);
        assert!(persisted(&d, "web").is_empty());
    }

    /// A package bound into a running container: its image is mounted and shown at the
    /// target in the container's mount namespace (the fake's: its init's fixture root), the
    /// binding recorded as bound and, asked, kept; a target with files is refused first,
    /// leaving no record. Unbound, it is taken off there and forgotten.
    #[test]
    fn a_package_is_bound_into_the_running_containers_namespace_and_unbound_again() {
        if !mount_api() {
            berth_sys::skip::record(
                "open_tree",
                "runtime::bind: the fake host models the mount API's way in, not propagation",
            );
            return;
        }
        let (dir, d, m, _shim) = running("bind-ok");
        let tree = dir.path("tool-tree");
        std::fs::create_dir_all(tree.join("bin")).unwrap();
        std::fs::write(tree.join("bin/tool"), "#!/bin/sh\n").unwrap();
        m.image_tree(&d.cfg.paths.image(&"ab".repeat(32)), &tree);
        let target = d.proc().join("4242/root/opt/tool");
        std::fs::create_dir_all(&target).unwrap();
        std::fs::write(target.join("left"), "").unwrap();
        let e = bind(&d, "tool", "web", None, true).unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (
                Kind::TargetTaken,
                "/opt/tool in web: not empty (a binding would hide its files)"
            )
        );
        assert!(mounts::run_bindings(&d, "web").is_empty());
        std::fs::remove_file(target.join("left")).unwrap();

        let v = bind(&d, "tool", "web", None, true).unwrap();
        assert_eq!(v[f::METHOD], Method::MountApi.as_str());
        assert_eq!(
            (&v[f::AT], &v[f::CONTAINER]),
            (&json!("/opt/tool"), &json!("web"))
        );
        assert!(target.join("bin/tool").is_file(), "the image shown inside");
        let run = mounts::run_bindings(&d, "web");
        assert_eq!(run.len(), 1);
        assert_eq!(
            (run[0].at.as_str(), run[0].state),
            ("/opt/tool", BindState::Bound)
        );
        assert_eq!(persisted(&d, "web"), [("tool".into(), "/opt/tool".into())]);
        let image = d.cfg.paths.image_mount(&"ab".repeat(32));
        let calls = m.calls();
        for want in [
            format!("clone_tree {}", image.display()),
            format!("lock_tree {}", image.display()),
            "at_target 4242 /opt/tool tree".to_string(),
        ] {
            assert!(calls.contains(&want), "{want}: {calls:?}");
        }

        let v = unbind(&d, "tool", "web").unwrap();
        assert_eq!(
            (&v[f::UNMOUNTED], &v[f::PERSIST]),
            (&json!(true), &json!(true))
        );
        assert!(!target.join("bin").exists(), "taken off inside");
        assert!(target.is_dir(), "the container's own directory stays");
        assert!(m
            .calls()
            .contains(&"at_target 4242 /opt/tool off".to_string()));
        assert!(mounts::run_bindings(&d, "web").is_empty());
        assert!(persisted(&d, "web").is_empty());
        assert_eq!(m.mounted(), [image], "only the image, for the next bind");
    }

    /// The journal a killed daemon left is settled by what the container shows (here: no
    /// image mounted, so nothing): a binding half made is dropped with the directories made
    /// for it, one half taken off is forgotten (its persistent binding too), a confirmed one
    /// stays; a stage bind left on the host is taken off. A container not running is left.
    #[test]
    fn the_bind_journal_is_settled_by_what_the_container_shows() {
        let (_dir, d, m, shim) = running("bind-settle");
        let anchor = d.cfg.paths.bind_anchor("web");
        std::fs::create_dir_all(anchor.join("opt/made/deep")).unwrap();
        let stage = anchor.join("stage/lib");
        std::fs::create_dir_all(&stage).unwrap();
        let src = d.cfg.paths.run.join("src");
        std::fs::create_dir_all(&src).unwrap();
        d.host.mounts.bind(&src, &stage, true).unwrap();
        write_persisted(
            &d,
            "web",
            &[
                ("lib".into(), "/srv/lib".into()),
                ("other".into(), "/srv/o".into()),
            ],
        )
        .unwrap();
        let kept = binding("tool", "/opt/tool", "", BindState::Bound);
        let journal = [
            kept.clone(),
            binding(
                "new",
                "/opt/made/deep",
                "/opt/made",
                BindState::Binding { persist: true },
            ),
            binding("lib", "/srv/lib", "", BindState::Unbinding { forget: true }),
        ];
        write_run(&d, "web", &journal).unwrap();

        drop(shim);
        settle(&d, "web");
        assert_eq!(
            mounts::run_bindings(&d, "web"),
            journal,
            "not running: left"
        );

        let _shim = FakeShim::start(&d, "web", info(4242), b"");
        settle(&d, "web");
        assert_eq!(mounts::run_bindings(&d, "web"), [kept]);
        assert!(
            !anchor.join("opt/made").exists(),
            "the directories made for it"
        );
        assert!(anchor.join("opt").is_dir());
        assert_eq!(
            persisted(&d, "web"),
            [("other".to_string(), "/srv/o".to_string())]
        );
        assert!(
            m.calls()
                .contains(&format!("umount {} lazy", stage.display())),
            "{:?}",
            m.calls()
        );
        assert!(m.mounted().is_empty());
        assert!(!stage.exists());
    }

    /// unbind: a container not installed, a package not bound; a persistent binding of a
    /// stopped container is forgotten (nothing to unmount); a running one's binding whose
    /// image is no longer mounted is dropped with its directories.
    #[test]
    fn unbind_refuses_what_is_not_bound_and_forgets_what_is() {
        let (_dir, d, _m, shim) = running("bind-unbind");
        let e = unbind(&d, "tool", "db").unwrap_err();
        assert_eq!(e.kind, Kind::NotInstalled);
        let e = unbind(&d, "tool", "web").unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (Kind::NotBound, "tool is not bound into web")
        );

        let anchor = d.cfg.paths.bind_anchor("web");
        std::fs::create_dir_all(anchor.join("opt/tool")).unwrap();
        write_run(
            &d,
            "web",
            &[binding("tool", "/opt/tool", "/opt/tool", BindState::Bound)],
        )
        .unwrap();
        keep(&d, "web", "tool", "/opt/tool").unwrap();
        let v = unbind(&d, "tool", "web").unwrap();
        assert_eq!(
            (
                v[f::AT].clone(),
                v[f::UNMOUNTED].clone(),
                v[f::PERSIST].clone()
            ),
            (json!("/opt/tool"), json!(true), json!(true))
        );
        assert!(mounts::run_bindings(&d, "web").is_empty());
        assert!(!anchor.join("opt/tool").exists());
        assert!(!d.cfg.paths.binds_file("web").exists());

        drop(shim);
        keep(&d, "web", "lib", "/srv/lib").unwrap();
        let v = unbind(&d, "lib", "web").unwrap();
        assert_eq!(
            (
                v[f::AT].clone(),
                v[f::UNMOUNTED].clone(),
                v[f::PERSIST].clone()
            ),
            (Value::Null, json!(false), json!(true))
        );
        assert!(persisted(&d, "web").is_empty());
        assert_eq!(unbind(&d, "lib", "web").unwrap_err().kind, Kind::NotBound);
    }

    /// status' listing: a stopped container's next bindings (manifest first, an operator's
    /// binding of the same package not twice), a running one's recorded bindings; and the
    /// containers a package is bound into.
    #[test]
    fn listing_and_bound_into_show_the_manifests_and_the_operators_bindings() {
        let (_dir, d, _m, _shim) = running("bind-listing");
        write_persisted(
            &d,
            "web",
            &[
                ("tool".into(), "/srv/t".into()),
                ("lib".into(), "/srv/lib".into()),
            ],
        )
        .unwrap();
        let st = state::state(&d);
        let web = st.packages.get("web").unwrap();
        let next = listing(&d, &st, web, false);
        assert_eq!(
            next,
            json!([
                {f::PACKAGE: "tool", f::VERSION: "2.0", f::AT: "/opt/tool", f::PERSIST: true, f::METHOD: null, f::ORIGIN: "manifest"},
                {f::PACKAGE: "lib", f::VERSION: "3.0", f::AT: "/srv/lib", f::PERSIST: true, f::METHOD: null, f::ORIGIN: "operator"},
            ])
        );
        write_run(
            &d,
            "web",
            &[binding("lib", "/srv/lib", "", BindState::Bound)],
        )
        .unwrap();
        let now = listing(&d, &st, web, true);
        assert_eq!(now.as_array().unwrap().len(), 1);
        assert_eq!(now[0][f::METHOD], "mount-api");
        assert_eq!(
            now[0][f::VERSION],
            "2.0",
            "the version bound, not the installed one"
        );

        assert_eq!(bound_into(&d, &st, "tool", &[]), ["web"]);
        assert_eq!(bound_into(&d, &st, "lib", &[]), ["web"]);
        assert!(bound_into(&d, &st, "lib", &["web".into()]).is_empty());
        assert!(bound_into(&d, &st, "web", &[]).is_empty());
    }

    /// A removed container's persistent bindings and empty anchor go; a directory with
    /// something in it stays.
    #[test]
    fn forget_removes_the_persistent_bindings_and_the_empty_anchor() {
        let (_dir, d, _m) = fake_daemon("bind-forget", "");
        keep(&d, "web", "tool", "/opt/tool").unwrap();
        let anchor = d.cfg.paths.bind_anchor("web");
        std::fs::create_dir_all(anchor.join("opt")).unwrap();
        std::fs::create_dir_all(anchor.join("stage/left")).unwrap();
        forget(&d, "web");
        assert!(!d.cfg.paths.binds_file("web").exists());
        assert!(!anchor.join("opt").exists());
        assert!(
            anchor.join("stage/left").is_dir(),
            "not removed recursively"
        );
    }

    /// A failed mount says the target and why; the mount points made below the anchor are
    /// the ones removed again.
    #[test]
    fn a_failed_mount_is_named_and_made_directories_are_removed_again() {
        let e = |errno| fail(io::Error::from_raw_os_error(errno), "web", "/opt/t");
        assert_eq!(e(libc::ENOENT).kind, Kind::Refused);
        assert!(e(libc::ENOENT)
            .message
            .starts_with("/opt/t in web: no such directory"));
        assert_eq!(e(libc::EBUSY).kind, Kind::TargetTaken);
        assert_eq!(
            e(libc::ENOTEMPTY).message,
            "/opt/t in web: not empty (a binding would hide its files)"
        );
        assert_eq!(e(libc::EIO).kind, Kind::MountFailed);

        let (_dir, d, _m) = fake_daemon("bind-dirs", "");
        let anchor = d.cfg.paths.bind_anchor("web");
        std::fs::create_dir_all(anchor.join("opt/a")).unwrap();
        let created = make_dirs(&anchor, "/opt/a/b/c").unwrap();
        assert_eq!(created, "/opt/a/b");
        assert!(anchor.join("opt/a/b/c").is_dir());
        remove_dirs(&anchor, "/opt/a/b/c", &created);
        assert!(!anchor.join("opt/a/b").exists());
        assert!(anchor.join("opt/a").is_dir(), "there before");
        std::fs::write(anchor.join("opt/file"), "").unwrap();
        let e = make_dirs(&anchor, "/opt/file/x").unwrap_err();
        assert_eq!(e.kind, Kind::TargetTaken);
        assert!(e.message.starts_with("/opt/file/x: "), "{}", e.message);
    }

    /// At a start, the bind anchor is a shared mount: refused (here by the fake host, as
    /// without CAP_SYS_ADMIN), it is named, after what a former run left below it was taken
    /// off through the host.
    #[test]
    fn prepare_takes_off_a_former_runs_mounts_then_needs_the_anchor_mount() {
        let (dir, d, m) = fake_daemon("bind-prepare", "");
        m.fail_next("bind_shared", libc::EPERM);
        let web = install(&d, WEB);
        let anchor = d.cfg.paths.bind_anchor("web");
        let left = anchor.join("stage/old");
        std::fs::create_dir_all(&left).unwrap();
        d.host.mounts.bind(&dir.path("state"), &left, true).unwrap();
        let rootfs = dir.path("rootfs");
        std::fs::create_dir_all(rootfs.join("opt")).unwrap();
        let e = prepare(&d, &state::state(&d), &web, &rootfs).unwrap_err();
        assert_eq!(e.kind, Kind::MountFailed);
        assert!(
            e.message
                .starts_with(&format!("web: bind anchor {}: ", anchor.display())),
            "{}",
            e.message
        );
        assert!(
            m.calls()
                .contains(&format!("umount {} lazy", left.display())),
            "{:?}",
            m.calls()
        );
        assert!(anchor.join("opt").is_dir() && !left.exists());
    }
}
