//! `berth remove` (with a resumable purge) and `berth gc`.

use std::path::PathBuf;

use berth_core::api::{gc as gc_field, remove as remove_field};
use berth_core::config::Config;
use berth_sys::fsutil::fsync_dir;
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::device::cgroups;
use crate::daemon::device::records;
use crate::daemon::device::state;
use crate::daemon::prepare::net;
use crate::daemon::prepare::security;
use crate::daemon::runtime::bind;
use crate::daemon::runtime::data;
use crate::daemon::runtime::mounts;
use crate::daemon::runtime::probe;
use crate::hooks;

pub(crate) fn remove(d: &Daemon, names: &[String], purge: bool) -> Result<Value> {
    if names.is_empty() {
        return Err(Error::bad_request("remove: name at least one package"));
    }
    let _op = d.op.lock().unwrap();
    let old = state::state(d);
    // `remove --purge` of packages no longer installed whose /data is still there (a purge
    // cut short by an older berth, or a plain remove before): purge that /data.
    if purge && names.iter().all(|n| !old.packages.contains_key(n)) {
        let leftovers: Vec<&String> = names
            .iter()
            .filter(|n| {
                set_aside_pairs(&d.cfg, n)
                    .iter()
                    .any(|(from, to)| from.exists() || to.exists())
            })
            .collect();
        if leftovers.len() == names.len() {
            for n in &leftovers {
                purge_data(d, n)
                    .map_err(|e| Error::internal(format!("{n}: cannot delete its /data: {e}")))?;
            }
            return Ok(json!({
                remove_field::REMOVED: [],
                remove_field::PURGED: true,
                remove_field::DATA_PURGED: leftovers,
            }));
        }
    }
    for n in names {
        if !old.packages.contains_key(n) {
            return Err(Error::new(
                Kind::NotInstalled,
                format!("{n} is not installed"),
            ));
        }
        if probe::is_running(d, n) {
            return Err(Error::new(
                Kind::Running,
                format!("{n} is running: stop it first (berth stop {n})"),
            ));
        }
        let users: Vec<String> = old
            .dependents(n)
            .into_iter()
            .filter(|u| !names.contains(u))
            .collect();
        if !users.is_empty() {
            return Err(Error::new(
                Kind::Needed,
                format!("{n} is needed by {}: remove those first", users.join(", ")),
            ));
        }
        let into = bind::bound_into(d, &old, n, names);
        if !into.is_empty() {
            return Err(Error::new(
                Kind::Needed,
                format!(
                    "{n} is bound into {}: berth unbind {n} --from {} first (a binding of a manifest's [[bind]] goes with its package)",
                    into.join(", "),
                    into[0]
                ),
            ));
        }
    }
    let mut new = old.clone();
    for n in names {
        new.packages.remove(n);
    }
    // A purge is made resumable before the commit: /data moves aside (one rename), so that a
    // crash before the commit puts it back (the package is still installed) and one after
    // it finishes the purge (reconcile, gc, or remove --purge again).
    let mut set_aside: Vec<(PathBuf, PathBuf)> = Vec::new();
    let put_back = |set_aside: &[(PathBuf, PathBuf)]| {
        for (from, to) in set_aside {
            let _ = std::fs::rename(to, from);
        }
    };
    if purge {
        for n in names {
            // The plain directory and, with containers.data_size, the image.
            for (from, to) in set_aside_pairs(&d.cfg, n) {
                if from.exists() {
                    if let Err(e) = std::fs::rename(&from, &to) {
                        put_back(&set_aside);
                        return Err(Error::internal(format!(
                            "{n}: cannot set its /data aside for the purge: {e}; nothing was changed"
                        )));
                    }
                    set_aside.push((from, to));
                }
            }
        }
        let _ = fsync_dir(&d.cfg.paths.state.join("data"));
        hooks::point("remove.set-aside");
    }
    if let Err(e) = state::commit_state(d, new) {
        put_back(&set_aside);
        return Err(e);
    }
    hooks::point("remove.committed");
    mounts::release_mounts(d);
    net::forget(d, &state::state(d), names);
    for n in names {
        let _ = std::fs::remove_dir_all(d.cfg.paths.lxc_dir(n));
        cgroups::remove_stale_cgroups(d, n);
        let _ = std::fs::remove_file(d.cfg.paths.saved_log(n));
        let _ = std::fs::remove_file(d.cfg.paths.exit_file(n));
        let _ = std::fs::remove_file(d.cfg.paths.autostart(n));
        let _ = std::fs::remove_file(d.cfg.paths.limits_file(n));
        let _ = std::fs::remove_file(d.cfg.paths.supervise_file(n));
        crate::daemon::ops::schedules::forget(d, n);
        crate::daemon::store::upgrade::forget(d, n);
        bind::forget(d, n);
        records::forget(d, n);
        crate::daemon::runtime::sockets::close(d, n);
        if purge {
            if let Err(e) = purge_data(d, n) {
                log::error!("{n}: its /data is only partly deleted ({e}); berth gc finishes it");
            }
        } else {
            security::removed(d, n, false);
        }
    }
    Ok(json!({remove_field::REMOVED: names, remove_field::PURGED: purge}))
}

/// Where a container's /data waits while it is being purged.
pub(crate) fn purging_dir(cfg: &Config, name: &str) -> PathBuf {
    cfg.paths.state.join("data").join(format!(".purge-{name}"))
}

/// Where a container's /data image waits while it is being purged.
pub(crate) fn purging_image(cfg: &Config, name: &str) -> PathBuf {
    cfg.paths
        .state
        .join("data")
        .join(format!(".purge-{name}.img"))
}

/// What a purge sets aside: (where it is, where it waits).
fn set_aside_pairs(cfg: &Config, name: &str) -> [(PathBuf, PathBuf); 2] {
    [
        (cfg.paths.data(name), purging_dir(cfg, name)),
        (cfg.paths.data_image(name), purging_image(cfg, name)),
    ]
}

/// Deletes a container's /data (set aside or not: its directory, its image) and then frees
/// its id range.
pub(crate) fn purge_data(d: &Daemon, name: &str) -> std::io::Result<()> {
    for dir in [purging_dir(&d.cfg, name), d.cfg.paths.data(name)] {
        match berth_sys::tree::remove_path(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    // And an image whose making a crash cut short (`runtime::data`).
    let making = data::in_making(&d.cfg.paths.data_image(name));
    let growing = data::growing(&d.cfg.paths.data_image(name));
    for image in [
        purging_image(&d.cfg, name),
        d.cfg.paths.data_image(name),
        making,
        growing,
    ] {
        match std::fs::remove_file(&image) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    security::removed(d, name, true);
    Ok(())
}

/// Purges cut short by a crash: a package still installed gets its /data back (its remove
/// never committed); any other set-aside /data is deleted.
pub(crate) fn finish_purges(d: &Daemon) {
    let st = state::state(d);
    let Ok(entries) = std::fs::read_dir(d.cfg.paths.state.join("data")) else {
        return;
    };
    for e in entries.flatten() {
        let f = e.file_name();
        let Some(aside) = f.to_str().and_then(|f| f.strip_prefix(".purge-")) else {
            continue;
        };
        let (name, home) = match aside.strip_suffix(".img") {
            Some(n) => (n, d.cfg.paths.data_image(n)),
            None => (aside, d.cfg.paths.data(aside)),
        };
        if st.packages.contains_key(name) && !home.exists() {
            match std::fs::rename(e.path(), home) {
                Ok(()) => {
                    log::warn!("{name}: a purge was cut short before it committed; /data is back")
                }
                Err(err) => log::error!("{name}: cannot put /data back: {err}"),
            }
        } else if let Err(err) = purge_data(d, name) {
            log::error!("{name}: cannot finish the purge of /data: {err}");
        } else {
            log::info!("{name}: finished a purge cut short");
        }
    }
}

pub(crate) fn gc(d: &Daemon) -> Result<Value> {
    let _op = d.op.lock().unwrap();
    finish_purges(d);
    mounts::release_mounts(d);
    let (removed, freed) = super::gc::delete_unused(d, None);
    clear_tmp(&d.cfg);
    Ok(json!({gc_field::REMOVED: removed, gc_field::FREED_BYTES: freed}))
}

pub(crate) fn clear_tmp(cfg: &Config) {
    if let Ok(entries) = std::fs::read_dir(cfg.paths.store_tmp()) {
        for e in entries.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// At daemon start: what an interrupted operation left in the store's partial downloads,
/// except the partial images (`SHA256.part`), which the next install of the same image
/// resumes (its sha256 is checked whole at the end, so a damaged one is refused then).
pub(crate) fn clear_tmp_but_partial_images(cfg: &Config) {
    let Ok(entries) = std::fs::read_dir(cfg.paths.store_tmp()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let keep = name
            .to_str()
            .and_then(|n| n.strip_suffix(".part"))
            .is_some_and(|h| {
                h.len() == 64
                    && h.bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            });
        if !keep {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use berth_core::manifest::Manifest;
    use berth_core::state::Installed;
    use berth_testkit::fake_host::FakeMounts;
    use berth_testkit::TempDir;

    use super::*;
    use crate::daemon::base::testing::pretend_running;
    use crate::daemon::base::testing::{entry, fake_daemon, MANIFEST};
    use crate::daemon::runtime::mounts::ensure_image_mounted;

    /// Package `name` installed with image `sha` (two hex digits, repeated), depending on
    /// `depends`.
    fn add(d: &Daemon, name: &str, sha: &str, depends: &[&str]) -> Installed {
        let text = MANIFEST.replace("\"web\"", &format!("\"{name}\""));
        let mut e = entry(&text);
        e.sha256 = sha.repeat(32);
        e.depends = depends
            .iter()
            .map(|n| berth_core::name::Name::parse(n).unwrap())
            .collect();
        let p = Installed::from_entry(&e, Manifest::parse(&text).unwrap(), true, 1_790_000_000);
        let mut st = d.state.lock().unwrap();
        st.packages.insert(name.to_string(), p.clone());
        p
    }

    /// A daemon with `web` (image ab…) installed, committed to its state file.
    fn setup(tag: &str) -> (TempDir, Daemon, &'static FakeMounts) {
        let (dir, d, m) = fake_daemon(tag, "");
        add(&d, "web", "ab", &[]);
        state::commit_state(&d, state::state(&d)).unwrap();
        (dir, d, m)
    }

    /// An image of `len` bytes in the store.
    fn image(d: &Daemon, sha: &str, len: usize) -> PathBuf {
        let p = d.cfg.paths.image(&sha.repeat(32));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, vec![7u8; len]).unwrap();
        p
    }

    /// A file with its directories.
    fn put(p: &Path, text: &str) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// `/data` of `name` with a file in it.
    fn data(d: &Daemon, name: &str) -> PathBuf {
        let p = d.cfg.paths.data(name);
        put(&p.join("kept"), "the package's data");
        p
    }

    /// The names installed as the state file says.
    fn on_disk(d: &Daemon) -> Vec<String> {
        state::load_state(&d.cfg)
            .unwrap()
            .packages
            .into_keys()
            .collect()
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// What cannot be removed is refused, each with its kind and a message naming the
    /// package and the way out; the state stays as it was.
    #[test]
    fn what_cannot_be_removed_is_refused_and_nothing_changes() {
        let (_dir, d, m) = setup("remove-refused");
        add(&d, "app", "cd", &["web"]);
        add(&d, "tool", "ef", &[]);
        state::commit_state(&d, state::state(&d)).unwrap();

        let e = remove(&d, &[], false).unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (Kind::BadRequest, "remove: name at least one package")
        );
        let e = remove(&d, &names(&["tool", "db"]), false).unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (Kind::NotInstalled, "db is not installed")
        );
        let e = remove(&d, &names(&["web"]), false).unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (Kind::Needed, "web is needed by app: remove those first")
        );

        put(&d.cfg.paths.binds_file("app"), "tool /opt/tool\n");
        let e = remove(&d, &names(&["tool"]), false).unwrap_err();
        assert_eq!(e.kind, Kind::Needed);
        assert!(
            e.message
                .starts_with("tool is bound into app: berth unbind tool --from app first"),
            "{}",
            e.message
        );

        let _monitor = pretend_running(&d, "tool");
        let e = remove(&d, &names(&["tool"]), true).unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (
                Kind::Running,
                "tool is running: stop it first (berth stop tool)"
            )
        );
        assert_eq!(on_disk(&d), ["app", "tool", "web"]);
        assert_eq!(state::state(&d).packages.len(), 3);
        assert!(m.calls().is_empty(), "{:?}", m.calls());
    }

    /// A package and the one that needs it go together; the remove is committed, its image
    /// unmounted, and what the container left (LXC's directory, its marks, records and
    /// cgroups) goes, while /data and its id range stay for a reinstall.
    #[test]
    fn a_remove_commits_and_clears_what_the_container_left() {
        let (dir, d, m) = setup("remove-ok");
        add(&d, "app", "cd", &["web"]);
        let mnt = ensure_image_mounted(&d, &"ab".repeat(32)).unwrap();
        let p = &d.cfg.paths;
        let left = [
            p.lxc_dir("web").join("config"),
            p.autostart("web"),
            p.limits_file("web"),
            p.supervise_file("web"),
            p.saved_log("web"),
            p.exit_file("web"),
            p.guard_file("web"),
            p.binds_file("web"),
            p.schedules_file("web"),
        ];
        for f in &left {
            put(f, "{}");
        }
        let cgroups = [
            dir.path("sys/fs/cgroup/berth/web/payload"),
            dir.path("sys/fs/cgroup/memory/berth.monitor/web"),
        ];
        for c in &cgroups {
            std::fs::create_dir_all(c).unwrap();
        }
        let data = data(&d, "web");
        put(&p.state.join("idmap"), "web 0\napp 1\n");

        let v = remove(&d, &names(&["web", "app"]), false).unwrap();
        assert_eq!(
            v,
            json!({remove_field::REMOVED: ["web", "app"], remove_field::PURGED: false})
        );
        assert!(on_disk(&d).is_empty());
        assert!(state::state(&d).packages.is_empty());
        assert!(m.mounted().is_empty(), "{:?}", m.mounted());
        assert!(m.calls().contains(&format!("umount {} now", mnt.display())));
        for f in left.iter().chain(&cgroups) {
            assert!(!f.exists(), "{} left", f.display());
        }
        assert!(!p.lxc_dir("web").exists());
        assert!(dir.path("sys/fs/cgroup/berth").is_dir(), "the parent went");
        assert!(data.join("kept").exists(), "/data went without --purge");
        assert_eq!(
            std::fs::read_to_string(p.state.join("idmap")).unwrap(),
            "web 0\napp 1\n"
        );
    }

    /// A purge deletes /data (directory, image, an image half made) and frees the id range.
    #[test]
    fn a_purge_deletes_data_and_frees_the_id_range() {
        let (_dir, d, _) = setup("remove-purge");
        let p = &d.cfg.paths;
        let data = data(&d, "web");
        put(&p.data_image("web"), "ext4");
        put(&data::in_making(&p.data_image("web")), "half");
        put(&p.state.join("idmap"), "db 0\nweb 1\n");
        let v = remove(&d, &names(&["web"]), true).unwrap();
        assert_eq!(
            v,
            json!({remove_field::REMOVED: ["web"], remove_field::PURGED: true})
        );
        for gone in [
            data,
            p.data_image("web"),
            data::in_making(&p.data_image("web")),
            purging_dir(&d.cfg, "web"),
            purging_image(&d.cfg, "web"),
        ] {
            assert!(!gone.exists(), "{} left", gone.display());
        }
        assert_eq!(
            std::fs::read_to_string(p.state.join("idmap")).unwrap(),
            "db 0\n"
        );
    }

    /// /data that cannot be set aside for a purge stops it before the commit: what was set
    /// aside already is put back, and the packages stay installed.
    #[test]
    fn a_purge_that_cannot_set_data_aside_changes_nothing() {
        let (_dir, d, m) = setup("remove-aside-fails");
        add(&d, "db", "cd", &[]);
        state::commit_state(&d, state::state(&d)).unwrap();
        let web = data(&d, "web");
        data(&d, "db");
        // A directory with files where db's /data would wait: the rename is refused.
        put(&purging_dir(&d.cfg, "db").join("other"), "");
        let e = remove(&d, &names(&["web", "db"]), true).unwrap_err();
        assert_eq!(e.kind, Kind::Internal);
        assert!(
            e.message
                .starts_with("db: cannot set its /data aside for the purge: ")
                && e.message.ends_with("; nothing was changed"),
            "{}",
            e.message
        );
        assert_eq!(on_disk(&d), ["db", "web"]);
        assert!(web.join("kept").exists(), "web's /data was not put back");
        assert!(!purging_dir(&d.cfg, "web").exists());
        assert!(d.cfg.paths.data("db").join("kept").exists());
        assert!(m.calls().is_empty(), "{:?}", m.calls());
    }

    /// A commit that fails puts the /data set aside back, and unmounts nothing.
    #[test]
    fn a_purge_whose_commit_fails_puts_data_back() {
        let (_dir, d, m) = setup("remove-commit-fails");
        let web = data(&d, "web");
        put(&d.cfg.paths.data_image("web"), "ext4");
        let file = d.cfg.paths.state_file();
        std::fs::remove_file(&file).unwrap();
        std::fs::create_dir_all(file.join("inside")).unwrap();
        let e = remove(&d, &names(&["web"]), true).unwrap_err();
        assert_eq!(e.kind, Kind::Internal);
        assert!(
            e.message.starts_with(&format!("write {}", file.display())),
            "{}",
            e.message
        );
        assert!(state::state(&d).packages.contains_key("web"));
        assert!(web.join("kept").exists());
        assert!(d.cfg.paths.data_image("web").exists());
        assert!(!purging_dir(&d.cfg, "web").exists());
        assert!(!purging_image(&d.cfg, "web").exists());
        assert!(m.calls().is_empty(), "{:?}", m.calls());
    }

    /// `remove --purge` of packages no longer installed deletes the /data they left (set
    /// aside or not); with nothing left it is `not_installed`.
    #[test]
    fn a_purge_of_removed_packages_deletes_what_they_left() {
        let (_dir, d, _) = setup("remove-leftovers");
        let old = data(&d, "old");
        put(&purging_image(&d.cfg, "gone"), "ext4");
        let v = remove(&d, &names(&["old", "gone"]), true).unwrap();
        assert_eq!(
            v,
            json!({
                remove_field::REMOVED: [],
                remove_field::PURGED: true,
                remove_field::DATA_PURGED: ["old", "gone"],
            })
        );
        assert!(!old.exists());
        assert!(!purging_image(&d.cfg, "gone").exists());
        assert_eq!(on_disk(&d), ["web"]);

        let e = remove(&d, &names(&["old"]), true).unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (Kind::NotInstalled, "old is not installed")
        );
    }

    /// After a crash mid-purge: a package still installed gets its /data back (its remove
    /// never committed); what a removed package set aside is deleted.
    #[test]
    fn purges_cut_short_are_undone_or_finished() {
        let (_dir, d, _) = setup("remove-finish");
        put(&purging_dir(&d.cfg, "web").join("kept"), "back");
        put(&purging_image(&d.cfg, "web"), "ext4");
        put(&purging_dir(&d.cfg, "old").join("f"), "");
        put(&purging_image(&d.cfg, "old"), "ext4");
        finish_purges(&d);
        assert_eq!(
            std::fs::read_to_string(d.cfg.paths.data("web").join("kept")).unwrap(),
            "back"
        );
        assert_eq!(
            std::fs::read_to_string(d.cfg.paths.data_image("web")).unwrap(),
            "ext4"
        );
        for gone in [
            purging_dir(&d.cfg, "web"),
            purging_image(&d.cfg, "web"),
            purging_dir(&d.cfg, "old"),
            purging_image(&d.cfg, "old"),
        ] {
            assert!(!gone.exists(), "{} left", gone.display());
        }
    }

    /// gc deletes only images nothing uses: not an installed package's or its previous
    /// version's, not one a running container was started on, not one still mounted (its
    /// unmount refused) and not one a loop device reads; partial downloads go too.
    #[test]
    fn gc_deletes_only_images_nothing_uses() {
        let (dir, d, m) = setup("gc");
        let mut web = state::state(&d).packages["web"].clone();
        let mut previous = web.clone();
        previous.sha256 = "a0".repeat(32);
        web.previous = Some(Box::new(previous));
        d.state.lock().unwrap().packages.insert("web".into(), web);
        let kept: Vec<PathBuf> = ["ab", "a0", "b1", "b2", "b3"]
            .iter()
            .map(|s| image(&d, s, 1000))
            .collect();
        let unused = image(&d, "c0", 4096);
        put(&d.cfg.paths.store().join("README"), "not an image");
        put(&d.cfg.paths.store_tmp().join("x.part"), "partial");

        // b1: the running web's recorded layers.
        let _monitor = pretend_running(&d, "web");
        put(
            &d.cfg.paths.lxc_dir("web").join("layers"),
            &format!("{}\n", "b1".repeat(32)),
        );
        // b2: mounted, and its unmount refused.
        let busy = ensure_image_mounted(&d, &"b2".repeat(32)).unwrap();
        m.fail_next("umount", libc::EBUSY);
        // b3: a loop device still reads it.
        put(
            &dir.path("sys/block/loop3/loop/backing_file"),
            &format!("{}\n", kept[4].display()),
        );
        std::fs::create_dir_all(dir.path("sys/block/loop4")).unwrap();

        let v = gc(&d).unwrap();
        assert_eq!(
            v,
            json!({gc_field::REMOVED: ["c0".repeat(32)], gc_field::FREED_BYTES: 4096})
        );
        assert!(!unused.exists());
        for k in &kept {
            assert!(k.exists(), "{} deleted", k.display());
        }
        assert!(d.cfg.paths.store().join("README").exists());
        assert!(!d.cfg.paths.store_tmp().join("x.part").exists());
        assert_eq!(m.mounted(), vec![busy]);
    }

    /// gc finishes a purge cut short and unmounts what nothing uses before it looks.
    #[test]
    fn gc_finishes_purges_and_releases_mounts_first() {
        let (_dir, d, m) = setup("gc-release");
        put(&purging_dir(&d.cfg, "old").join("f"), "");
        let unused = image(&d, "c0", 10);
        ensure_image_mounted(&d, &"c0".repeat(32)).unwrap();
        let v = gc(&d).unwrap();
        assert_eq!(v[gc_field::REMOVED], json!(["c0".repeat(32)]));
        assert!(!unused.exists());
        assert!(m.mounted().is_empty(), "{:?}", m.mounted());
        assert!(!purging_dir(&d.cfg, "old").exists());
    }

    /// At start, partial images (`SHA256.part`) stay to be resumed; anything else in the
    /// partial downloads goes. `clear_tmp` takes them all.
    #[test]
    fn partial_images_stay_at_start_and_the_rest_goes() {
        let (_dir, d, _) = fake_daemon("clear-tmp", "");
        let tmp = d.cfg.paths.store_tmp();
        let partial = tmp.join(format!("{}.part", "0f".repeat(32)));
        let others = [
            tmp.join(format!("{}.part", "0F".repeat(32))),
            tmp.join(format!("{}.part", "0f".repeat(31))),
            tmp.join("index.json"),
            tmp.join(format!("{}.sqfs", "0f".repeat(32))),
        ];
        for f in others.iter().chain([&partial]) {
            put(f, "x");
        }
        clear_tmp_but_partial_images(&d.cfg);
        assert!(partial.exists());
        for f in &others {
            assert!(!f.exists(), "{} left", f.display());
        }
        clear_tmp(&d.cfg);
        assert!(!partial.exists());
        assert!(tmp.is_dir());
    }
}
