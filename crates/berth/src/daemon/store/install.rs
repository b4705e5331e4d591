//! `berth install`: fetch each image of the closure, hash it while writing, verify, store, commit.

use std::sync::Arc;

use berth_core::api::install as field;
use berth_core::index::IndexEntry;
use berth_core::manifest::Manifest;
use berth_core::state::{InstallStep, Installed};
use berth_sys::fsutil::fsync_dir;
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::device::boot;
use crate::daemon::device::disk;
use crate::daemon::device::state;
use crate::daemon::ops::schedules;
use crate::daemon::prepare::security;
use crate::daemon::runtime::mounts;
use crate::daemon::runtime::probe;
use crate::daemon::store::download::{download, hash_file, Want};
use crate::daemon::store::image;
use crate::daemon::store::repo;
use crate::hooks;

pub(crate) fn install(
    d: &Arc<Daemon>,
    names: &[String],
    emit: &mut dyn FnMut(Value),
) -> Result<Value> {
    if names.is_empty() {
        return Err(Error::bad_request("install: name at least one package"));
    }
    let _op = d.op.lock().unwrap();
    // Also checked before the stream begins; here under the lock, against a safe-mode enter
    // that came first.
    boot::refuse_in_safe_mode(d, "install")?;
    let (index, cache) = repo::load_index(d)?;
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let closure = index.closure(&refs).map_err(|e| match e {
        berth_core::index::IndexError::UnknownPackage(_) => {
            Error::new(Kind::UnknownPackage, e.to_string())
        }
        _ => Error::new(Kind::BadIndex, e.to_string()),
    })?;
    // What each package asks for, against the device policy, before anything is fetched
    // (the image's own manifest is checked again in read_manifest).
    for e in &closure {
        let asked = berth_core::manifest::Permissions {
            capabilities: e.manifest.capabilities.clone(),
            devices: e.manifest.devices.clone(),
            ..Default::default()
        };
        security::check(&d.cfg, e.name.as_str(), &asked, e.trusted)?;
    }
    let old = state::state(d);
    let steps = old.install_steps(&closure, names);
    // Upgrading a running package in place would pull its root out from under it.
    for step in &steps {
        if let InstallStep::Fetch {
            entry,
            replaces: Some(running_version),
            ..
        } = step
        {
            let e = closure[*entry];
            if probe::is_running(d, e.name.as_str()) {
                return Err(Error::new(
                    Kind::Running,
                    format!(
                        "{} is running {running_version}; stop it before installing {}",
                        e.name, e.version
                    ),
                ));
            }
        }
    }
    admit(d, &closure, &steps, false)?;
    let mut new = old.clone();
    let mut done = Vec::new();
    for step in steps {
        match step {
            InstallStep::Keep { name, explicit } => {
                if let Some(p) = new.packages.get_mut(&name) {
                    p.explicit = explicit;
                }
            }
            InstallStep::Fetch {
                entry, explicit, ..
            } => {
                let e = closure[entry];
                let manifest = fetch_image(d, &cache.url, e, emit)?;
                admit_memory(d, e.name.as_str(), &manifest)?;
                new.packages.insert(
                    e.name.to_string(),
                    Installed::from_entry(e, manifest, explicit, berth_sys::process::now_s()),
                );
                done.push(
                    json!({field::NAME: e.name.as_str(), field::VERSION: e.version.to_string()}),
                );
            }
        }
    }
    hooks::point("install.before-commit");
    state::commit_state(d, new)?;
    hooks::point("install.committed");
    // A new version's manifest brings its own schedules.
    schedules::sync(d);
    // An upgrade leaves the old image unused.
    mounts::release_mounts(d);
    let skipped: Vec<&str> = closure
        .iter()
        .map(|e| e.name.as_str())
        .filter(|n| !done.iter().any(|v| v[field::NAME] == *n))
        .collect();
    Ok(json!({field::INSTALLED: done, field::UNCHANGED: skipped}))
}

/// Before anything is fetched: the images `steps` bring, and with `snapshots` (an upgrade)
/// the /data copies of the packages it replaces (the blocks they take), must fit on the
/// store's file system with
/// `[upgrade] reserve` left over for berth's own state (its records, the state file, crash
/// reports), or the whole operation is refused (`no_space`, "space required X, available
/// Y") with nothing changed. An image already in the store needs nothing; one a cut
/// download began needs what it lacks.
pub(crate) fn admit(
    d: &Daemon,
    closure: &[&IndexEntry],
    steps: &[InstallStep],
    snapshots: bool,
) -> Result<()> {
    let paths = &d.cfg.paths;
    let mut need = 0u64;
    let mut what = Vec::new();
    for step in steps {
        let InstallStep::Fetch {
            entry, replaces, ..
        } = step
        else {
            continue;
        };
        let e = closure[*entry];
        // An upgrade's copy of the /data of a package it replaces (a hostile tree past the
        // walk's caps: none, as at the copy).
        let snapshot = snapshots && replaces.is_some();
        if let Some(n) = snapshot
            .then(|| disk::snapshot_size(d, e.name.as_str()))
            .flatten()
            .filter(|n| *n > 0)
        {
            need = need.saturating_add(n);
            what.push(format!("{}'s /data snapshot", e.name));
        }
        if paths.image(&e.sha256).exists() {
            continue;
        }
        let part = paths.store_tmp().join(format!("{}.part", e.sha256));
        // Not through a link: the download replaces one (what a link points at is no part).
        let begun = std::fs::symlink_metadata(part)
            .ok()
            .filter(|m| m.is_file())
            .map_or(0, |m| m.len());
        need = need.saturating_add(e.size.saturating_sub(begun));
        what.push(format!("{}@{}", e.name, e.version));
    }
    if need == 0 {
        return Ok(());
    }
    let store = paths.store();
    let on = if store.is_dir() { &store } else { &paths.state };
    let refused =
        disk::no_room(paths, &what.join(", "), need, d.cfg.upgrade.reserve, on).map_err(|e| {
            Error::internal(format!(
                "cannot tell the free space of {}: {e}",
                on.display()
            ))
        })?;
    match refused {
        None => Ok(()),
        Some(why) => Err(Error::new(
            Kind::NoSpace,
            format!("{why}; nothing was changed (free space with berth gc or berth remove)"),
        )),
    }
}

/// The memory a package declares (`[resources] memory`, or what `berth limit` set in its
/// place) must fit the device policy (the containers' budget and the per-container cap) on
/// its own, or it could never start: the
/// install or upgrade is refused before its state changes, naming both ("memory 512M is
/// beyond the device policy: policy.memory_budget = 256M"). Other limits beyond the policy
/// wait for the start (an operator's `berth limit` may lower them first).
pub(crate) fn admit_memory(d: &Daemon, name: &str, m: &Manifest) -> Result<()> {
    let p = &d.cfg.policy;
    let budget = p.memory_budget.bytes(d.resources.host.mem_total);
    let cap = p.container_memory_max.map_or(budget, |c| c.min(budget));
    // An operator's `berth limit --memory` stands for the manifest's (an installed package's
    // upgrade; a removed package's limits go with it).
    let ov = crate::daemon::prepare::limits::load_overrides(&d.cfg, name);
    match ov.memory_max.or(m.resources.memory) {
        Some(asked) if asked > cap => Err(Error::new(
            Kind::BeyondPolicy,
            format!(
                "{name}: memory {} is beyond what the device policy gives a container ({}: policy.memory_budget, policy.container_memory_max); nothing was changed",
                berth_core::cgroup::fmt_size(asked),
                berth_core::cgroup::fmt_size(cap)
            ),
        )),
        _ => Ok(()),
    }
}

/// Brings one image into the store (downloading it unless it is already there and intact)
/// and returns the manifest it carries, checked against the index entry.
pub(crate) fn fetch_image(
    d: &Daemon,
    base: &str,
    e: &IndexEntry,
    emit: &mut dyn FnMut(Value),
) -> Result<Manifest> {
    let paths = &d.cfg.paths;
    let image = paths.image(&e.sha256);
    let label = format!("{}@{}", e.name, e.version);
    if image.exists() {
        if let Ok((size, sha)) = hash_file(&image) {
            if size == e.size && sha == e.sha256 {
                return image::read_manifest(d, &image, e);
            }
        }
        // Damaged: fetch it again (the rename below replaces it atomically).
        log::warn!(
            "{}: store image {} is damaged; fetching it again",
            label,
            image.display()
        );
    }
    // The source the index came from first, then the repository's others (the image is
    // checked against the signed index whichever serves it).
    let mut bases = vec![base.to_string()];
    for b in repo::sources(d).unwrap_or_default() {
        if !bases.contains(&b) {
            bases.push(b);
        }
    }
    let (tmp, bytes, delta_from) = match super::delta::rebuild(d, &bases, e, emit) {
        Some(r) => (r.path, r.delta.size, Some(r.delta.from_version.to_string())),
        None => {
            let label = format!("{}@{}", e.name, e.version);
            let want = Want {
                label: &label,
                what: "image",
                package: e.name.as_str(),
                file: &e.file,
                size: e.size,
                sha256: &e.sha256,
            };
            (download(d, &bases, &want, emit)?, e.size, None)
        }
    };
    let cleanup = |err: Error| {
        let _ = std::fs::remove_file(&tmp);
        err
    };
    let manifest = image::read_manifest(d, &tmp, e).map_err(cleanup)?;
    hooks::point("install.verified");
    std::fs::rename(&tmp, &image).map_err(|err| {
        cleanup(Error::internal(format!(
            "rename {} to {}: {err}",
            tmp.display(),
            image.display()
        )))
    })?;
    let _ = fsync_dir(&paths.store());
    hooks::point("install.stored");
    emit(json!({
        field::EVENT: "fetched",
        field::PACKAGE: e.name.as_str(),
        field::VERSION: e.version.to_string(),
        field::SIZE: e.size,
        field::BYTES: bytes,
        field::DELTA_FROM: delta_from,
    }));
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::testing::{fake_daemon, fakes, image_tree, MANIFEST};
    use crate::daemon::store::testrepo::{files_in, noise, Repo};
    use berth_core::state::State;
    use berth_testkit::fake_host::FakeMounts;
    use berth_testkit::TempDir;

    struct Fixture {
        dir: TempDir,
        d: Arc<Daemon>,
        m: &'static FakeMounts,
        r: Repo,
    }

    /// A daemon over a `file://` repository it trusts (nothing published yet).
    fn setup(tag: &str) -> Fixture {
        setup_with(tag, "")
    }

    fn setup_with(tag: &str, extra: &str) -> Fixture {
        let (dir, mut d, m) = fake_daemon(tag, extra);
        let r = Repo::for_daemon(&mut d, &dir.0);
        Fixture {
            dir,
            d: Arc::new(d),
            m,
            r,
        }
    }

    impl Fixture {
        /// The package `manifest` describes, its image `bytes` in the repository, and what
        /// the image shows when the fake mounts it (downloaded or stored): a tree carrying
        /// `shows` as its manifest.
        fn offer(&mut self, manifest: &str, bytes: &[u8], shows: &str) -> IndexEntry {
            let e = self.r.add(manifest, bytes);
            let tree = self.dir.path(&format!("tree-{}-{}", e.name, e.version));
            let _ = std::fs::remove_dir_all(&tree);
            image_tree(&tree, shows);
            let paths = &self.d.cfg.paths;
            for image in [
                paths.store_tmp().join(format!("{}.part", e.sha256)),
                paths.store_tmp().join(format!("{}.from-delta", e.sha256)),
                paths.image(&e.sha256),
            ] {
                self.m.image_tree(&image, &tree);
            }
            e
        }

        /// Publishes the repository and runs `berth update`.
        fn publish(&self, serial: u64) {
            self.r.publish(serial, None);
            repo::update(&self.d, false).unwrap();
        }

        fn install(&self, names: &[&str]) -> (Result<Value>, Vec<Value>) {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            let mut events = Vec::new();
            let got = install(&self.d, &names, &mut |v| events.push(v));
            (got, events)
        }

        /// The installed set, in memory and as committed to disk, with the store's images.
        fn kept(&self) -> (State, Option<Vec<u8>>, Vec<String>) {
            (
                state::state(&self.d),
                std::fs::read(self.d.cfg.paths.state_file()).ok(),
                files_in(&self.d.cfg.paths.store()),
            )
        }

        fn mounts_of_squashfs(&self) -> Vec<String> {
            self.m
                .calls()
                .into_iter()
                .filter(|c| c.starts_with("mount_squashfs "))
                .collect()
        }
    }

    /// The whole install: the image fetched into `.tmp`, its manifest read on the private
    /// mount, moved into the store under its sha256, the state committed; asked again,
    /// nothing is fetched.
    #[test]
    fn install_fetches_verifies_stores_and_commits() {
        let mut f = setup("install-ok");
        let bytes = noise(5_000, 1);
        let e = f.offer(MANIFEST, &bytes, MANIFEST);
        f.publish(1);
        let (got, events) = f.install(&["web"]);
        assert_eq!(
            got.unwrap(),
            json!({"installed": [{"name": "web", "version": "1.0"}], "unchanged": []})
        );
        let paths = &f.d.cfg.paths;
        assert_eq!(std::fs::read(paths.image(&e.sha256)).unwrap(), bytes);
        assert!(files_in(&paths.store_tmp()).is_empty());
        assert_eq!(
            *events.last().unwrap(),
            json!({"event": "fetched", "package": "web", "version": "1.0", "size": 5_000,
                   "bytes": 5_000, "delta_from": null})
        );
        let on_disk = State::parse(&std::fs::read(paths.state_file()).unwrap()).unwrap();
        assert_eq!(on_disk, state::state(&f.d));
        let p = &on_disk.packages["web"];
        assert_eq!(
            (p.version.to_string(), p.sha256.as_str(), p.explicit),
            ("1.0".into(), e.sha256.as_str(), true)
        );
        let verify = paths.run.join("mnt").join(format!(".verify-{}", e.sha256));
        assert_eq!(
            f.mounts_of_squashfs(),
            [format!(
                "mount_squashfs {} {}",
                paths
                    .store_tmp()
                    .join(format!("{}.part", e.sha256))
                    .display(),
                verify.display()
            )]
        );
        assert!(f.m.mounted().is_empty(), "{:?}", f.m.mounted());

        let (got, events) = f.install(&["web"]);
        assert_eq!(got.unwrap(), json!({"installed": [], "unchanged": ["web"]}));
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(f.mounts_of_squashfs().len(), 1);
    }

    /// Dependencies come first and are installed as such, not as asked for.
    #[test]
    fn a_package_comes_with_its_dependencies_first() {
        let mut f = setup("install-deps");
        let lib = MANIFEST.replace("web", "lib");
        let app = MANIFEST.replace("web", "app");
        f.offer(&lib, b"lib image", &lib);
        f.offer(&app, b"app image", &app);
        f.r.packages
            .iter_mut()
            .find(|p| p.name.as_str() == "app")
            .unwrap()
            .depends = vec![berth_core::name::Name::parse("lib").unwrap()];
        f.publish(1);
        let (got, events) = f.install(&["app"]);
        assert_eq!(
            got.unwrap()["installed"],
            json!([{"name": "lib", "version": "1.0"}, {"name": "app", "version": "1.0"}])
        );
        let fetched: Vec<&Value> = events
            .iter()
            .filter(|v| v["event"] == "fetched")
            .map(|v| &v["package"])
            .collect();
        assert_eq!(fetched, [&json!("lib"), &json!("app")]);
        let st = state::state(&f.d);
        assert_eq!(
            (st.packages["app"].explicit, st.packages["lib"].explicit),
            (true, false)
        );
    }

    /// Refused before anything is fetched: no name, no index, a name the index does not
    /// list, safe mode.
    #[test]
    fn refusals_before_any_fetch_leave_nothing() {
        let mut f = setup("install-refused");
        let (got, _) = f.install(&[]);
        assert_eq!(got.unwrap_err().kind, Kind::BadRequest);
        let (got, _) = f.install(&["web"]);
        assert_eq!(got.unwrap_err().kind, Kind::NoIndex);
        f.offer(MANIFEST, b"web", MANIFEST);
        f.publish(1);
        let (got, _) = f.install(&["nginx"]);
        let e = got.unwrap_err();
        assert_eq!(e.kind, Kind::UnknownPackage);
        assert!(e.message.contains("\"nginx\""), "{}", e.message);
        *f.d.boot.safe_mode.lock().unwrap() = Some("3 failed starts".into());
        let (got, _) = f.install(&["web"]);
        let e = got.unwrap_err();
        assert_eq!(e.kind, Kind::SafeMode);
        assert!(
            e.message
                .starts_with("install: the device is in safe mode (3 failed starts)"),
            "{}",
            e.message
        );
        assert_eq!(f.kept(), (State::default(), None, vec![".tmp".to_string()]));
        assert!(files_in(&f.d.cfg.paths.store_tmp()).is_empty());
        assert!(f.m.calls().is_empty(), "{:?}", f.m.calls());
    }

    /// An upgrade whose image is not what the signed index lists (replaced on the server):
    /// refused before it is mounted, and the installed version, its image and the committed
    /// state stay exactly as they were.
    #[test]
    fn a_hash_mismatch_leaves_the_previous_install_intact() {
        let mut f = setup("install-sha");
        f.offer(MANIFEST, b"web 1.0 image", MANIFEST);
        f.publish(1);
        f.install(&["web"]).0.unwrap();
        let before = f.kept();
        let v2 = MANIFEST.replace("1.0", "2.0");
        let e2 = f.offer(&v2, b"web 2.0 image", &v2);
        f.publish(2);
        std::fs::write(f.r.dir.join(&e2.file), b"web 2.0 IMAGE").unwrap();
        let (got, _) = f.install(&["web"]);
        let e = got.unwrap_err();
        assert_eq!(e.kind, Kind::BadImage);
        assert!(
            e.message.starts_with("web@2.0: image sha256 is "),
            "{}",
            e.message
        );
        assert_eq!(f.kept(), before);
        assert!(files_in(&f.d.cfg.paths.store_tmp()).is_empty());
        assert_eq!(f.mounts_of_squashfs().len(), 1, "only 1.0's");
    }

    /// An image that verifies by hash but carries another package's manifest is refused at
    /// the verification mount: not stored, not committed, unmounted.
    #[test]
    fn an_image_holding_another_package_is_refused_at_verification() {
        let mut f = setup("install-manifest");
        let e = f.offer(MANIFEST, b"web image", &MANIFEST.replace("1.0", "1.1"));
        f.publish(1);
        let (got, events) = f.install(&["web"]);
        let err = got.unwrap_err();
        assert_eq!(err.kind, Kind::BadImage);
        assert!(
            err.message
                .contains("the image holds web@1.1, not what the index lists"),
            "{}",
            err.message
        );
        assert!(!events.iter().any(|v| v["event"] == "fetched"));
        assert_eq!(f.kept(), (State::default(), None, vec![".tmp".to_string()]));
        assert!(!f.d.cfg.paths.image(&e.sha256).exists());
        assert!(files_in(&f.d.cfg.paths.store_tmp()).is_empty());
        assert!(f.m.mounted().is_empty());
    }

    /// A full store during an upgrade's download: `no_space`, and the installed version, its
    /// image and the state stay as they were.
    #[test]
    fn a_full_store_leaves_the_previous_install_intact() {
        if std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .is_err()
        {
            berth_sys::skip::record("host /dev/full", "no writable /dev/full to fill a store");
            return;
        }
        let mut f = setup("install-full");
        f.offer(MANIFEST, b"web 1.0", MANIFEST);
        f.publish(1);
        f.install(&["web"]).0.unwrap();
        let before = f.kept();
        let v2 = MANIFEST.replace("1.0", "2.0");
        let e2 = f.offer(&v2, b"web 2.0", &v2);
        f.publish(2);
        let part =
            f.d.cfg
                .paths
                .store_tmp()
                .join(format!("{}.part", e2.sha256));
        std::os::unix::fs::symlink("/dev/full", &part).unwrap();
        let (got, _) = f.install(&["web"]);
        let e = got.unwrap_err();
        assert_eq!(e.kind, Kind::NoSpace);
        assert!(
            e.message.starts_with("store full: no room for web@2.0"),
            "{}",
            e.message
        );
        assert_eq!(f.kept(), before);
        assert!(std::fs::symlink_metadata(&part).is_err(), "part left");
    }

    /// What does not fit beside the reserve is refused before anything is fetched, saying
    /// what it needs and what there is; an image already in the store needs nothing, and
    /// one a cut download began needs only what it lacks.
    #[test]
    fn an_install_that_does_not_fit_is_refused_before_it_fetches() {
        // A reserve beyond what any file system here has free: web's image (7 bytes) does
        // not fit beside it.
        let reserve = "1000000G";
        let mut f = setup_with(
            "install-admit",
            &format!("[upgrade]\nreserve = \"{reserve}\"\n"),
        );
        let e = f.offer(MANIFEST, b"web 1.0", MANIFEST);
        f.publish(1);
        let before = f.kept();
        let (got, events) = f.install(&["web"]);
        let err = got.unwrap_err();
        assert_eq!(err.kind, Kind::NoSpace);
        assert!(
            err.message
                .starts_with("no room for web@1.0: space required 0.0 MiB (7 B) (and ")
                && err.message.contains(", available "),
            "{}",
            err.message
        );
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(f.kept(), before);
        assert!(!f.d.cfg.paths.image(&e.sha256).exists());
        // All of it already fetched by a cut download: nothing more is needed.
        let part = f.d.cfg.paths.store_tmp().join(format!("{}.part", e.sha256));
        std::fs::create_dir_all(part.parent().unwrap()).unwrap();
        std::fs::write(&part, b"web 1.0").unwrap();
        f.install(&["web"]).0.unwrap();
        assert!(f.d.cfg.paths.image(&e.sha256).exists());
    }

    /// A package running the installed version is not upgraded under it: refused before
    /// anything is fetched. (Running: LXC's monitor listens on the container's command
    /// socket, here a listener of the test's.)
    #[test]
    fn a_running_package_is_not_upgraded_under_it() {
        let mut f = setup("install-running");
        f.offer(MANIFEST, b"web 1.0", MANIFEST);
        f.publish(1);
        f.install(&["web"]).0.unwrap();
        let before = f.kept();
        let v2 = MANIFEST.replace("1.0", "2.0");
        f.offer(&v2, b"web 2.0", &v2);
        f.publish(2);
        let _monitor = crate::daemon::base::testing::pretend_running(&f.d, "web");
        let (got, events) = f.install(&["web"]);
        let e = got.unwrap_err();
        assert_eq!(e.kind, Kind::Running);
        assert_eq!(
            e.message,
            "web is running 1.0; stop it before installing 2.0"
        );
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(f.kept(), before);
        assert!(files_in(&f.d.cfg.paths.store_tmp()).is_empty());
    }

    /// A state that cannot be committed: the error names state.json and the installed set
    /// stays as it was (the image fetched stays in the store for gc).
    #[test]
    fn a_state_that_cannot_be_committed_changes_nothing_installed() {
        let mut f = setup("install-commit");
        let e = f.offer(MANIFEST, b"web", MANIFEST);
        f.publish(1);
        let state_file = f.d.cfg.paths.state_file();
        std::fs::create_dir_all(state_file.join("in-the-way")).unwrap();
        let (got, _) = f.install(&["web"]);
        let err = got.unwrap_err();
        assert_eq!(err.kind, Kind::Internal);
        assert!(
            err.message
                .starts_with(&format!("write {}", state_file.display())),
            "{}",
            err.message
        );
        assert_eq!(state::state(&f.d), State::default());
        assert!(f.d.cfg.paths.image(&e.sha256).exists());
    }

    /// A store image that no longer matches its sha256 is fetched again and replaced; an
    /// intact one is only verified again.
    #[test]
    fn a_damaged_store_image_is_fetched_again() {
        let mut f = setup("install-damaged");
        let bytes = noise(3_000, 2);
        let e = f.offer(MANIFEST, &bytes, MANIFEST);
        f.publish(1);
        let image = f.d.cfg.paths.image(&e.sha256);
        std::fs::write(&image, noise(3_000, 3)).unwrap();
        let url = f.r.url();
        let mut events = Vec::new();
        let m = fetch_image(&f.d, &url, &e, &mut |v| events.push(v)).unwrap();
        assert_eq!(m.package.version.to_string(), "1.0");
        assert_eq!(std::fs::read(&image).unwrap(), bytes);
        assert!(events.iter().any(|v| v["event"] == "fetched"));

        let mut events = Vec::new();
        fetch_image(&f.d, &url, &e, &mut |v| events.push(v)).unwrap();
        assert!(events.is_empty(), "{events:?}");
        let last = f.mounts_of_squashfs().pop().unwrap();
        assert!(
            last.starts_with(&format!("mount_squashfs {} ", image.display())),
            "{last}"
        );
    }

    /// An upgrade with a delta from the image the store holds fetches only the delta, and
    /// says so.
    #[test]
    fn an_upgrade_takes_the_delta_from_the_image_held() {
        if berth_sys::check::which(std::env::var_os("PATH").as_ref(), "zstd").is_none() {
            berth_sys::skip::record("host zstd", "no zstd on PATH to make and decode deltas");
            return;
        }
        let mut f = setup("install-delta");
        fakes(&f.d).tools.real("zstd");
        let old = noise(100_000, 4);
        let e1 = f.offer(MANIFEST, &old, MANIFEST);
        f.publish(1);
        f.install(&["web"]).0.unwrap();
        let mut new = old.clone();
        new[500..900].copy_from_slice(&noise(400, 5));
        let v2 = MANIFEST.replace("1.0", "2.0");
        let e2 = f.offer(&v2, &new, &v2);
        std::fs::create_dir_all(f.r.dir.join("deltas")).unwrap();
        let delta_file = f.r.dir.join("deltas/web.zst");
        let made = std::process::Command::new("zstd")
            .args(["-q", "-f"])
            .arg(format!(
                "--patch-from={}",
                f.d.cfg.paths.image(&e1.sha256).display()
            ))
            .arg(f.r.dir.join(&e2.file))
            .arg("-o")
            .arg(&delta_file)
            .output()
            .unwrap();
        assert!(made.status.success(), "{made:?}");
        let delta = std::fs::read(&delta_file).unwrap();
        f.r.packages.last_mut().unwrap().deltas = vec![berth_core::index::Delta {
            from: e1.sha256.clone(),
            from_version: e1.version.clone(),
            format: berth_core::index::DELTA_ZSTD_PATCH.into(),
            file: "deltas/web.zst".into(),
            sha256: berth_core::index::sha256_hex(&delta),
            size: delta.len() as u64,
        }];
        f.publish(2);
        let (got, events) = f.install(&["web"]);
        assert_eq!(
            got.unwrap()["installed"],
            json!([{"name": "web", "version": "2.0"}])
        );
        let fetched = events.iter().find(|v| v["event"] == "fetched").unwrap();
        assert_eq!(
            (&fetched["bytes"], &fetched["delta_from"]),
            (&json!(delta.len()), &json!("1.0"))
        );
        assert_eq!(std::fs::read(f.d.cfg.paths.image(&e2.sha256)).unwrap(), new);
        assert_eq!(state::state(&f.d).packages["web"].sha256, e2.sha256);
    }
}
