//! `berth upgrade` and `berth rollback`: the installed set moves to the newest signed set, and
//! back when a new version does not prove itself.
//!
//! An upgrade downloads and verifies every image first; only then does it switch, package by
//! package: stop it (if it runs), snapshot its /data (admitted with the images: each copy
//! must fit beside them with `[upgrade] reserve` left), commit the new version with the old
//! one kept as `previous` and the new marked `trial`, run its migration command if it has
//! one (`[upgrade] migrate`: once, in its container, with the old version as last
//! argument; a failure rolls back), start it (if it ran), and wait until it has been
//! running and ready (its first health check passed) for `[upgrade] settle` within
//! `[upgrade] deadline`. Confirmed, the trial mark and the snapshot go; otherwise the
//! upgrade is rolled back: the new version is stopped, /data is restored from the
//! snapshot, the old version is committed and started again, and a crash archive says why.
//! A failed upgrade is never retried on its own.
//!
//! Crash safety: state.json is the commit point. A daemon that starts and finds a package in
//! `trial` rolls it back (`recover`); snapshot renames are ordered so that `restore_data`
//! finishes whatever a killed rollback began; `.tmp` copies are removed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_core::api::upgrade as field;
use berth_core::index::IndexEntry;
use berth_core::manifest::Manifest;
use berth_core::name::Version;
use berth_core::state::{InstallStep, Installed, State};
use berth_core::supervise::Report;
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::device::boot;
use crate::daemon::device::disk;
use crate::daemon::device::state;
use crate::daemon::ops::reports;
use crate::daemon::runtime::control::{self, Intent, Who};
use crate::daemon::runtime::{mounts, probe, sockets, start};
use crate::daemon::store::{gc, install, repo};
use crate::hooks;

/// An upgrade's or rollback's stop: the stop timeout as configured.
const SWITCH_STOP: Intent = Intent::Stop { timeout: None };

/// Where a container's /data is kept during its upgrade, and its copy in progress.
fn snapshot(d: &Daemon, name: &str) -> PathBuf {
    d.cfg
        .paths
        .state
        .join("data")
        .join(format!(".upgrade-{name}"))
}
fn snapshot_tmp(d: &Daemon, name: &str) -> PathBuf {
    d.cfg
        .paths
        .state
        .join("data")
        .join(format!(".upgrade-{name}.tmp"))
}
/// The mark that the package had no /data when the upgrade began (it never ran): a rollback
/// takes away whatever the new version made, so that the old one starts on none again.
fn snapshot_absent(d: &Daemon, name: &str) -> PathBuf {
    d.cfg
        .paths
        .state
        .join("data")
        .join(format!(".upgrade-{name}.absent"))
}
/// The failed version's /data while a rollback puts the snapshot back.
fn data_failed(d: &Daemon, name: &str) -> PathBuf {
    d.cfg
        .paths
        .state
        .join("data")
        .join(format!(".failed-{name}"))
}

/// One package's move, as the switch goes.
struct Move {
    name: String,
    from: String,
    to: String,
    /// It ran before: it runs after (and is what the trial watches).
    was_running: bool,
    /// Its migration command failed (why): it is rolled back without a start.
    migration_failed: Option<String>,
}

pub(crate) fn upgrade(
    d: &Arc<Daemon>,
    names: &[String],
    force: bool,
    emit: &mut dyn FnMut(Value),
) -> Result<Value> {
    let mut moves = Vec::new();
    let mut held = Vec::new();
    // The moved packages' images before and after the switch: what the upgrade may leave
    // unused (not another package's, which a remove during the trial may have left for gc).
    let mut images = BTreeSet::new();
    let switched = {
        let _op = d.op.lock().unwrap();
        boot::refuse_in_safe_mode(d, "upgrade")?;
        let before = state::state(d);
        let r = switch(d, names, force, emit, &mut moves, &mut held);
        let after = state::state(d);
        for m in &moves {
            images.extend(before.images_of(&m.name));
            images.extend(after.images_of(&m.name));
        }
        r
    };
    if let Err(e) = switched {
        // Cut short (a stop refused, a full flash): what was switched goes back.
        let _op = d.op.lock().unwrap();
        for m in &moves {
            let why = format!("the upgrade stopped: {}", e.message);
            let start_after = m.was_running && d.cfg.paths.autostart(&m.name).exists();
            if let Err(r) = rollback_locked(d, &m.name, start_after, &why, false) {
                log::error!("{}: rollback failed: {r}", m.name);
            }
        }
        gc::prune(d, &images);
        return Err(e);
    }
    let mut upgraded = Vec::new();
    let mut rolled_back = Vec::new();
    for m in &moves {
        let verdict = match &m.migration_failed {
            Some(why) => Err(why.clone()),
            None => confirm(d, m),
        };
        match verdict {
            Ok(()) => {
                upgraded.push(json!({field::NAME: m.name, field::FROM: m.from, field::TO: m.to}))
            }
            Err(why) => {
                log::error!(
                    "{}: upgrade to {} failed: {why}; rolling back to {}",
                    m.name,
                    m.to,
                    m.from
                );
                emit(json!({field::EVENT: "rollback", field::NAME: m.name, field::REASON: why}));
                let _op = d.op.lock().unwrap();
                // Not if the operator stopped it meanwhile (the mark is theirs).
                let start_after = m.was_running && d.cfg.paths.autostart(&m.name).exists();
                // (a rollback that failed says so in the reason: nothing was rolled back)
                let why = match rollback_locked(d, &m.name, start_after, &why, false) {
                    Ok(()) => why,
                    Err(e) => {
                        log::error!("{}: rollback failed: {e}", m.name);
                        format!("{why}; the rollback failed: {}", e.message)
                    }
                };
                rolled_back.push(json!({
                    field::NAME: m.name, field::FROM: m.from, field::TO: m.to, field::REASON: why,
                }));
            }
        }
    }
    // The versions now installed bring their manifests' schedules.
    crate::daemon::ops::schedules::sync(d);
    if !moves.is_empty() {
        let _op = d.op.lock().unwrap();
        gc::prune(d, &images);
    }
    Ok(json!({ field::UPGRADED: upgraded, field::ROLLED_BACK: rolled_back, field::HELD: held }))
}

/// Downloads and verifies everything, then switches each package to its new version (as a
/// trial when it runs). Under the op lock.
fn switch(
    d: &Arc<Daemon>,
    names: &[String],
    force: bool,
    emit: &mut dyn FnMut(Value),
    moves: &mut Vec<Move>,
    held: &mut Vec<Value>,
) -> Result<()> {
    let old = state::state(d);
    for n in names {
        state::installed(d, n)?;
    }
    if let Some(p) = old.packages.values().find(|p| p.trial.is_some()) {
        return Err(Error::new(
            Kind::Running,
            format!(
                "{}: an upgrade to {} is still being confirmed",
                p.name, p.version
            ),
        ));
    }
    let wanted: Vec<String> = if names.is_empty() {
        // Every package installed by name, but those that hold an update lock: they wait,
        // the others go on (a lock is the package's own word, not the device's).
        old.packages
            .values()
            .filter(|p| p.explicit)
            .map(|p| p.name.to_string())
            .filter(|n| {
                let until = (!force).then(|| sockets::locked_until(d, n)).flatten();
                if let Some(t) = until {
                    emit(json!({field::EVENT: "held", field::NAME: n, field::UNTIL: t}));
                    held.push(json!({field::NAME: n, field::UNTIL: t}));
                }
                until.is_none()
            })
            .collect()
    } else {
        names.to_vec()
    };
    let (index, cache) = repo::load_index(d)?;
    let refs: Vec<&str> = wanted.iter().map(String::as_str).collect();
    let closure = index
        .closure(&refs)
        .map_err(|e| Error::new(Kind::UnknownPackage, e.to_string()))?;
    for e in &closure {
        let asked = berth_core::manifest::Permissions {
            capabilities: e.manifest.capabilities.clone(),
            devices: e.manifest.devices.clone(),
            ..Default::default()
        };
        crate::daemon::prepare::security::check(&d.cfg, e.name.as_str(), &asked, e.trusted)?;
    }
    let steps = old.install_steps(&closure, &[]);
    if !force {
        let closure_names: Vec<String> = closure.iter().map(|e| e.name.to_string()).collect();
        refuse_locked(d, &steps, &closure_names)?;
    }
    install::admit(d, &closure, &steps, true)?;
    // Everything first: a missing or bad image stops the upgrade before anything changed.
    let mut fetched = Vec::new();
    for step in &steps {
        if let InstallStep::Fetch {
            entry,
            explicit,
            replaces,
        } = step
        {
            let e = closure[*entry];
            let manifest = install::fetch_image(d, &cache.url, e, emit)?;
            install::admit_memory(d, e.name.as_str(), &manifest)?;
            fetched.push((e, manifest, *explicit, replaces.clone()));
        }
    }
    hooks::point("upgrade.fetched");
    for (e, manifest, explicit, replaces) in fetched {
        switch_one(d, e, manifest, explicit, replaces, emit, moves)?;
    }
    Ok(())
}

/// Switches one package to its fetched version: a new dependency is installed; a package
/// that replaces its old version is stopped (if it runs), snapshotted, committed as a trial,
/// migrated and started again (if it ran), its move recorded for the caller to confirm or
/// roll back.
fn switch_one(
    d: &Arc<Daemon>,
    e: &IndexEntry,
    manifest: Manifest,
    explicit: bool,
    replaces: Option<Version>,
    emit: &mut dyn FnMut(Value),
    moves: &mut Vec<Move>,
) -> Result<()> {
    let name = e.name.to_string();
    let mut new = state::state(d);
    let entry = Installed::from_entry(e, manifest, explicit, berth_sys::process::now_s());
    let Some(from) = replaces else {
        // A new dependency: installed as `install` would.
        new.packages.insert(name.clone(), entry);
        return state::commit_state(d, new);
    };
    let was_running = probe::is_running(d, &name);
    if was_running {
        // The stop is the upgrade's, not the operator's: it still starts after a reboot,
        // and its end is no run's end for the supervisor to judge at the next start.
        stop_for_switch(d, &name, Who::Upgrade)?;
        let _ = std::fs::remove_file(d.cfg.paths.exit_file(&name));
    }
    hooks::point("upgrade.stopped");
    // What a trial may have to undo: a run of the new version, or its migration.
    if was_running || !entry.manifest.migrate.is_empty() {
        take_snapshot(d, &name);
    }
    hooks::point("upgrade.snapshotted");
    let mut current = new.packages.get(&name).cloned().ok_or_else(|| {
        Error::new(
            Kind::NotInstalled,
            format!("{name} was removed during the upgrade"),
        )
    })?;
    current.previous = None;
    current.trial = None;
    let mut entry = entry;
    entry.explicit = current.explicit || explicit;
    entry.previous = Some(Box::new(current));
    let migrate = entry.manifest.migrate.clone();
    entry.trial = (was_running || !migrate.is_empty()).then(berth_sys::process::now_s);
    new.packages.insert(name.clone(), entry);
    if let Err(err) = state::commit_state(d, new) {
        // Not switched: the old version runs again as it did.
        remove_any(&snapshot(d, &name));
        if was_running {
            let _ = control::act_locked(d, &name, Intent::Start, Who::Upgrade);
        }
        return Err(err);
    }
    hooks::point("upgrade.committed");
    mounts::release_mounts(d);
    emit(
        json!({field::EVENT: "switched", field::NAME: name, field::FROM: from.to_string(), field::TO: e.version.to_string()}),
    );
    // From the commit on, the caller rolls it back if anything below fails.
    moves.push(Move {
        name: name.clone(),
        from: from.to_string(),
        to: e.version.to_string(),
        was_running,
        migration_failed: None,
    });
    let i = moves.len() - 1;
    if !migrate.is_empty() {
        let failed = migrate_data(d, &moves[i], migrate);
        hooks::point("upgrade.migrated");
        if failed.is_some() {
            moves[i].migration_failed = failed;
            return Ok(());
        }
        if !was_running {
            confirm_now(d, &name)?;
        }
    }
    if was_running {
        if let Err(err) = control::act_locked(d, &name, Intent::Start, Who::Upgrade) {
            // The trial sees it not running and rolls it back.
            log::error!("{name}: start of {} failed: {err}", moves[i].to);
        }
        hooks::point("upgrade.started");
    }
    Ok(())
}

/// Stops `name` for a switch of versions. A container that ended between the look and the
/// stop (the memory guard's kill, a crash) is stopped all the same: the switch goes on,
/// and a trial's rollback is never left undone by it.
fn stop_for_switch(d: &Arc<Daemon>, name: &str, who: Who) -> Result<()> {
    control::stopped(control::act_locked(d, name, SWITCH_STOP, who))
}

/// Runs the new version's migration command (with the version it replaces as its last
/// argument) once in its container; why it failed, if it did.
fn migrate_data(d: &Arc<Daemon>, m: &Move, mut argv: Vec<String>) -> Option<String> {
    argv.push(m.from.clone());
    let limit = Duration::from_millis(d.cfg.upgrade.deadline_ms);
    log::info!(
        "{}: migrating /data from {} to {}: {argv:?}",
        m.name,
        m.from,
        m.to
    );
    match start::run_once(d, &m.name, argv, limit) {
        Ok(e) if !e.failed() => None,
        Ok(e) => Some(match (e.code, e.signal) {
            (_, Some(s)) => format!("the migration command of {} was killed by signal {s}", m.to),
            (Some(c), _) => format!("the migration command of {} exited {c}", m.to),
            _ => format!("the migration command of {} ended unrecorded", m.to),
        }),
        Err(e) => Some(format!(
            "the migration command of {} could not run: {}",
            m.to, e.message
        )),
    }
}

/// The trial of a package that was not running ends with its migration: confirmed.
/// Upgrades of packages that hold an update lock (container API) wait until it ends, unless
/// the operator forces them: an upgrade that names one (or needs one as a dependency) is
/// refused, naming each lock.
fn refuse_locked(d: &Daemon, steps: &[InstallStep], names: &[String]) -> Result<()> {
    let now = berth_sys::process::now_s();
    let held: Vec<String> = steps
        .iter()
        .filter_map(|s| match s {
            InstallStep::Fetch {
                entry,
                replaces: Some(_),
                ..
            } => names.get(*entry),
            _ => None,
        })
        .filter_map(|n| {
            sockets::locked_until(d, n).map(|t| {
                format!(
                    "{n} holds an update lock for {} s more",
                    t.saturating_sub(now)
                )
            })
        })
        .collect();
    if held.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        Kind::UpdateLocked,
        format!(
            "{} (through its container API); upgrade later, or now with berth upgrade --force",
            held.join("; ")
        ),
    ))
}

fn confirm_now(d: &Daemon, name: &str) -> Result<()> {
    let mut st = state::state(d);
    if let Some(p) = st.packages.get_mut(name) {
        p.trial = None;
    }
    state::commit_state(d, st)?;
    remove_any(&snapshot(d, name));
    Ok(())
}

/// Waits for the trial of an upgraded package that ran: confirmed once it has been running
/// and ready for the settle time, failed when it ends, fails or the deadline passes.
fn confirm(d: &Arc<Daemon>, m: &Move) -> std::result::Result<(), String> {
    if !m.was_running {
        return Ok(());
    }
    let (deadline, settle) = (
        Duration::from_millis(d.cfg.upgrade.deadline_ms),
        Duration::from_millis(d.cfg.upgrade.settle_ms),
    );
    let t0 = Instant::now();
    // Since when it has been ready, in which run, after how many restarts: one run must
    // stay ready for the settle time (a fast crash loop between two looks is no pass).
    let mut ready_since: Option<(Instant, Option<i32>, u32)> = None;
    let verdict = loop {
        let view = d.supervision.lock().unwrap().get(&m.name).cloned();
        let running = probe::is_running(d, &m.name);
        match view {
            Some(v) if running && v.state == "running" && v.ready => {
                let run = (probe::running_init(d, &m.name), v.record.restarts);
                match ready_since {
                    Some((since, init, restarts)) if (init, restarts) == run => {
                        if since.elapsed() >= settle {
                            break Ok(());
                        }
                    }
                    _ => ready_since = Some((Instant::now(), run.0, run.1)),
                }
            }
            Some(v)
                if matches!(v.state, "failed" | "backoff" | "stopped")
                    && t0.elapsed() > Duration::from_millis(300) =>
            {
                break Err(format!(
                    "{} {} ({})",
                    m.to,
                    v.state,
                    v.reason.unwrap_or_else(|| "no reason recorded".into())
                ));
            }
            _ => ready_since = None,
        }
        if t0.elapsed() >= deadline {
            break Err(format!(
                "{} was not running and ready for {} ms within {} ms",
                m.to,
                settle.as_millis(),
                deadline.as_millis()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if verdict.is_ok() {
        let _op = d.op.lock().unwrap();
        let mut st = state::state(d);
        if let Some(p) = st.packages.get_mut(&m.name) {
            p.trial = None;
        }
        state::commit_state(d, st).map_err(|e| e.message)?;
        hooks::point("upgrade.confirmed");
        remove_any(&snapshot(d, &m.name));
        remove_any(&snapshot_absent(d, &m.name));
        log::info!("{}: upgrade to {} confirmed", m.name, m.to);
    }
    verdict
}

/// `berth rollback NAME`: back to the version the last upgrade replaced.
pub(crate) fn rollback(d: &Arc<Daemon>, name: &str) -> Result<Value> {
    let _op = d.op.lock().unwrap();
    boot::refuse_in_safe_mode(d, "rollback")?;
    let p = state::installed(d, name)?;
    let Some(prev) = &p.previous else {
        return Err(Error::new(
            Kind::NoPrevious,
            format!("{name} has no previous version to roll back to (only an upgrade keeps one)"),
        ));
    };
    let (from, to) = (p.version.to_string(), prev.version.to_string());
    let running = probe::is_running(d, name);
    let images = state::state(d).images_of(name);
    rollback_locked(d, name, running, "berth rollback", false)?;
    crate::daemon::ops::schedules::sync(d);
    gc::prune(d, &images);
    Ok(json!({field::NAME: name, field::FROM: from, field::TO: to}))
}

/// Back to `previous`: stop, restore /data if a snapshot is there, commit, start it again
/// if it ran; a crash archive says why. `quiet`: before the supervisor runs (no events, and
/// no exit record left to be taken for the end of a run). Under the op lock.
fn rollback_locked(
    d: &Arc<Daemon>,
    name: &str,
    start_after: bool,
    why: &str,
    quiet: bool,
) -> Result<()> {
    let p = state::installed(d, name)?;
    let Some(prev) = p.previous.clone() else {
        return Ok(());
    };
    // Refused before anything changes when the state cannot be written (a full disk).
    state::room_to_commit(d)?;
    if probe::is_running(d, name) {
        stop_for_switch(d, name, if quiet { Who::Daemon } else { Who::Upgrade })?;
    }
    // The new version's end (by this stop, or on its own before the daemon died) is no end
    // of the old version's for the supervisor to judge.
    let _ = std::fs::remove_file(d.cfg.paths.exit_file(name));
    hooks::point("rollback.stopped");
    let restored = snapshot(d, name).exists() || snapshot_absent(d, name).exists();
    restore_data(d, name);
    hooks::point("rollback.restored");
    let mut st = state::state(d);
    let mut back = *prev;
    back.previous = None;
    back.trial = None;
    st.packages.insert(name.to_string(), back);
    if let Err(e) = state::commit_state(d, st) {
        // The state still names the new version. Unless its /data was put back to the old
        // version's, it runs again as it was; with the old /data it stays stopped (the new
        // version must not run on the data it migrated from): berth rollback once space
        // returns finishes it.
        if start_after && !restored {
            let _ = control::act_locked(d, name, Intent::Start, Who::Upgrade);
        }
        return Err(e);
    }
    hooks::point("rollback.committed");
    mounts::release_mounts(d);
    reports::collect(
        d,
        name,
        &Report::UpgradeFailed {
            from: p.version.to_string(),
            why: why.to_string(),
        },
    );
    if start_after {
        if let Err(e) = control::act_locked(d, name, Intent::Start, Who::Upgrade) {
            log::error!(
                "{name}: start of {} after the rollback failed: {e}",
                prev_version(&state::state(d), name)
            );
        }
        hooks::point("rollback.started");
    }
    log::warn!("{name}: rolled back from {} ({why})", p.version);
    Ok(())
}

fn prev_version(st: &State, name: &str) -> String {
    st.packages
        .get(name)
        .map_or(String::new(), |p| p.version.to_string())
}

/// A package removed: its upgrade copies go with it.
pub(crate) fn forget(d: &Daemon, name: &str) {
    for p in [
        snapshot(d, name),
        snapshot_tmp(d, name),
        snapshot_absent(d, name),
        data_failed(d, name),
    ] {
        remove_any(&p);
    }
}

/// At daemon start, before the supervisor and before running containers are taken over:
/// an upgrade whose trial a dead daemon left unconfirmed is rolled back (a failed upgrade
/// never retries on its own; the supervisor then starts the old version if it is marked
/// autostart); leftover copies go.
pub(crate) fn recover(d: &Arc<Daemon>) {
    let st = state::state(d);
    for p in st.packages.values() {
        let n = p.name.as_str();
        if p.trial.is_some() {
            log::warn!(
                "{n}: the upgrade to {} was not confirmed when the daemon stopped; rolling back",
                p.version
            );
            let _op = d.op.lock().unwrap();
            let why = "the daemon stopped during the upgrade's trial";
            let images = st.images_of(n);
            if let Err(e) = rollback_locked(d, n, false, why, true) {
                log::error!("{n}: rollback failed: {e}");
            }
            gc::prune(d, &images);
        } else {
            // A confirmed upgrade (or one never committed): its snapshot is not needed.
            remove_any(&snapshot(d, n));
            remove_any(&snapshot_absent(d, n));
            remove_any(&data_failed(d, n));
        }
        remove_any(&snapshot_tmp(d, n));
    }
}

/// /data as it is kept: the plain directory, or (with `[containers] data_size`) its image.
fn data_of(d: &Daemon, name: &str) -> PathBuf {
    let image = d.cfg.paths.data_image(name);
    if image.is_file() {
        image
    } else {
        d.cfg.paths.data(name)
    }
}

fn remove_any(p: &Path) {
    let _ = berth_sys::tree::remove_path(p);
}

/// Copies /data aside (the directory, or its image sparsely), when the copy fits in half
/// the free space (flash is precious: no snapshot then, and a rollback keeps the data as
/// the new version left it; logged).
fn take_snapshot(d: &Daemon, name: &str) {
    let data = data_of(d, name);
    let (tmp, snap, absent) = (
        snapshot_tmp(d, name),
        snapshot(d, name),
        snapshot_absent(d, name),
    );
    remove_any(&tmp);
    remove_any(&snap);
    remove_any(&absent);
    if !data.exists() {
        // Never ran: none is what a rollback puts back (the same rule as for a copy).
        if let Err(e) = berth_sys::fsutil::write_atomic(&absent, b"", 0o600) {
            log::warn!("{name}: cannot mark its /data as absent ({e}): a rollback keeps what the new version made");
        }
        return;
    }
    let image = data.is_file();
    // Past the walk's caps (a hostile tree): no copy.
    let size = disk::snapshot_size(d, name).unwrap_or(u64::MAX);
    // Admitted with the upgrade; checked again: the device's own writes since then count.
    let room = berth_sys::fsutil::free_bytes(&data)
        .unwrap_or(0)
        .saturating_sub(d.cfg.upgrade.reserve);
    if size > room {
        log::warn!("{name}: /data ({size} B) is too large to snapshot in {room} B free (beyond [upgrade] reserve): a rollback keeps it as it is");
        return;
    }
    let copied = if image {
        berth_sys::fsutil::copy_sparse(&data, &tmp)
    } else {
        // What it was admitted for and a quarter more (a tree that grows while it is copied,
        // a sparse file whose holes the copy would fill stop the copy), within the room.
        let bound = size.saturating_add(size / 4).saturating_add(1 << 20);
        berth_sys::tree::copy_path(&data, &tmp, bound.min(room))
    };
    match copied.and_then(|_| std::fs::rename(&tmp, &snap)) {
        Ok(()) => {
            let _ = berth_sys::fsutil::fsync_dir(snap.parent().unwrap_or(Path::new("/")));
        }
        Err(e) => {
            log::warn!("{name}: no snapshot of /data ({e}): a rollback keeps it as it is");
            remove_any(&tmp);
        }
    }
}

/// Puts the snapshot back in place of /data. Each step can be cut short: run again, it
/// finishes (the snapshot is only ever renamed onto a /data that is out of the way; the
/// mark of an absent /data goes only once all that the new version made is gone).
fn restore_data(d: &Daemon, name: &str) {
    let absent = snapshot_absent(d, name);
    if absent.exists() {
        let image = d.cfg.paths.data_image(name);
        for p in [
            d.cfg.paths.data(name),
            crate::daemon::runtime::data::in_making(&image),
            image,
        ] {
            if let Err(e) = berth_sys::tree::remove_path(&p) {
                log::error!(
                    "{name}: cannot remove the /data its new version made ({}: {e})",
                    p.display()
                );
                return;
            }
        }
        remove_any(&absent);
        let _ = berth_sys::fsutil::fsync_dir(absent.parent().unwrap_or(Path::new("/")));
        return;
    }
    let (snap, failed) = (snapshot(d, name), data_failed(d, name));
    // The snapshot is of the kind /data is kept as.
    let data = if snap.is_file() {
        d.cfg.paths.data_image(name)
    } else {
        d.cfg.paths.data(name)
    };
    if snap.exists() {
        if snap.is_dir() {
            // A directory copied while no cap was in force, and an image the new version's
            // start made from it since: the image holds the new version's data; the old
            // version's start would take it over the restored directory.
            remove_any(&d.cfg.paths.data_image(name));
        }
        if data.exists() {
            remove_any(&failed);
            if let Err(e) = std::fs::rename(&data, &failed) {
                log::error!("{name}: cannot move /data aside for the rollback: {e}");
                return;
            }
        }
        if let Err(e) = std::fs::rename(&snap, &data) {
            log::error!("{name}: cannot put the /data snapshot back: {e}");
            return;
        }
        let _ = berth_sys::fsutil::fsync_dir(data.parent().unwrap_or(Path::new("/")));
    }
    remove_any(&failed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::context::Supervised;
    use crate::daemon::base::testing::{fake_daemon, image_tree, MANIFEST};
    use crate::daemon::runtime::probe::tests::{info, lxc_config, FakeShim};
    use crate::daemon::store::testrepo::{files_in, Repo};
    use berth_core::index::IndexEntry;
    use berth_core::supervise::{HealthState, Record};
    use berth_testkit::fake_host::FakeMounts;
    use berth_testkit::TempDir;

    const V2: &str =
        "[package]\nname = \"web\"\nversion = \"2.0\"\n[entrypoint]\nargv = [\"/bin/httpd\"]\n";

    struct Fixture {
        dir: TempDir,
        d: Arc<Daemon>,
        m: &'static FakeMounts,
        r: Repo,
    }

    /// A daemon over a `file://` repository it trusts; `extra` is more of its configuration.
    fn setup(tag: &str, extra: &str) -> Fixture {
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
        /// `manifest`'s package in the repository (its image `bytes`), its image showing it.
        fn offer(&mut self, manifest: &str, bytes: &[u8]) -> IndexEntry {
            let e = self.r.add(manifest, bytes);
            let tree = self.dir.path(&format!("tree-{}-{}", e.name, e.version));
            image_tree(&tree, manifest);
            let paths = &self.d.cfg.paths;
            for image in [
                paths.store_tmp().join(format!("{}.part", e.sha256)),
                paths.image(&e.sha256),
            ] {
                self.m.image_tree(&image, &tree);
            }
            e
        }

        fn publish(&self, serial: u64) {
            self.r.publish(serial, None);
            repo::update(&self.d, false).unwrap();
        }

        /// `manifests` offered at serial 1 and installed.
        fn installed(&mut self, manifests: &[&str]) {
            let mut names = Vec::new();
            for (i, m) in manifests.iter().enumerate() {
                let e = self.offer(m, format!("image {i} 1.0").as_bytes());
                names.push(e.name.to_string());
            }
            self.publish(1);
            install::install(&self.d, &names, &mut |_| {}).unwrap();
        }

        fn upgrade(&self, names: &[&str]) -> (Result<Value>, Vec<Value>) {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            let mut events = Vec::new();
            let got = upgrade(&self.d, &names, false, &mut |v| events.push(v));
            (got, events)
        }

        fn data(&self) -> PathBuf {
            self.d.cfg.paths.data("web")
        }

        /// The installed set (in memory and committed), web's /data and its boot mark.
        fn kept(&self) -> (State, Vec<u8>, Vec<String>, bool) {
            (
                state::state(&self.d),
                std::fs::read(self.d.cfg.paths.state_file()).unwrap(),
                files_in(&self.data()),
                self.d.cfg.paths.autostart("web").exists(),
            )
        }
    }

    /// `web` marked to start at boot.
    fn mark_autostart(d: &Daemon) {
        let p = d.cfg.paths.autostart("web");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"").unwrap();
    }

    fn version(d: &Daemon, name: &str) -> (String, Option<String>, bool) {
        let p = state::installed(d, name).unwrap();
        (
            p.version.to_string(),
            p.previous.map(|q| q.version.to_string()),
            p.trial.is_some(),
        )
    }

    /// The summaries of the crash archives written for `name` (on a thread: waited for).
    fn archives(d: &Daemon, name: &str) -> Vec<String> {
        let dir = d.cfg.paths.reports().join(name);
        let t0 = Instant::now();
        let summaries = || -> Vec<String> {
            files_in(&dir)
                .into_iter()
                .filter(|f| f.ends_with(".json"))
                .map(|f| String::from_utf8_lossy(&std::fs::read(dir.join(f)).unwrap()).into_owned())
                .collect()
        };
        while summaries().is_empty() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        summaries()
    }

    /// One crash archive for `name`, an upgrade's, saying `why`.
    fn archived(d: &Daemon, name: &str, why: &str) {
        let a = archives(d, name);
        assert_eq!(a.len(), 1, "{a:?}");
        assert!(a[0].contains("upgrade") && a[0].contains(why), "{a:?}");
    }

    /// `web` as a running container: its LXC configuration and a shim that answers with
    /// its init pid; with `ready`, the supervisor's view says it runs and is ready.
    fn running(d: &Daemon, ready: bool) -> FakeShim {
        lxc_config(d, "web");
        let shim = FakeShim::start(d, "web", info(4242), b"");
        if ready {
            d.supervision.lock().unwrap().insert(
                "web".into(),
                Supervised {
                    state: "running",
                    record: Record::default(),
                    health: HealthState::Healthy,
                    failures: 0,
                    ready: true,
                    next_start: None,
                    run: Some(4242),
                    started_at: None,
                    self_restart_at: None,
                    reason: None,
                    last_check: None,
                },
            );
        }
        assert!(probe::is_running(d, "web"));
        shim
    }

    /// A migration runs the new version's command once in the container (through the
    /// shim, as a start does), the version it replaces as its last argument: exit 0 is a
    /// success, another code the reason the upgrade rolls back, and so is a shim that cannot
    /// be spawned.
    #[test]
    fn a_migration_runs_once_in_the_container_and_its_end_is_the_verdict() {
        use crate::daemon::base::testing::fakes;
        use crate::daemon::runtime::start::tests::with_ended_shim;
        let to_2 = Move {
            name: "web".into(),
            from: "1.0".into(),
            to: "2.0".into(),
            was_running: false,
            migration_failed: None,
        };
        let (_dir, d) = with_ended_shim("migrate-ok", r#"{"code": 0}"#);
        assert_eq!(migrate_data(&d, &to_2, vec!["/migrate".into()]), None);
        let spawned = fakes(&d).processes.calls();
        assert_eq!(spawned.len(), 1);
        assert!(
            spawned[0].starts_with("__shim web ") && spawned[0].contains(" -- /migrate 1.0 "),
            "{spawned:?}"
        );
        assert!(!probe::is_running(&d, "web"), "a run, not a start");

        let (_dir, d) = with_ended_shim("migrate-exit", r#"{"code": 3}"#);
        assert_eq!(
            migrate_data(&d, &to_2, vec!["/migrate".into()]).as_deref(),
            Some("the migration command of 2.0 exited 3")
        );
        fakes(&d).processes.fail_next("__shim", libc::EAGAIN);
        let why = migrate_data(&d, &to_2, vec!["/migrate".into()]).unwrap();
        assert!(
            why.starts_with("the migration command of 2.0 could not run: spawn shim for web: "),
            "{why}"
        );
    }

    /// A package that does not run moves to the new version at once: the old one kept as
    /// `previous`, no trial, no snapshot; the schedules and the answer say so.
    #[test]
    fn a_stopped_package_is_switched_and_keeps_its_previous_version() {
        let mut f = setup("upgrade-stopped", "");
        f.installed(&[MANIFEST]);
        let e2 = f.offer(V2, b"web 2.0 image");
        f.publish(2);
        let (got, events) = f.upgrade(&[]);
        assert_eq!(
            got.unwrap(),
            json!({"upgraded": [{"name": "web", "from": "1.0", "to": "2.0"}],
                   "rolled_back": [], "held": []})
        );
        assert!(
            events
                .contains(&json!({"event": "switched", "name": "web", "from": "1.0", "to": "2.0"})),
            "{events:?}"
        );
        assert_eq!(
            version(&f.d, "web"),
            ("2.0".into(), Some("1.0".into()), false)
        );
        assert_eq!(state::installed(&f.d, "web").unwrap().sha256, e2.sha256);
        let on_disk = State::parse(&std::fs::read(f.d.cfg.paths.state_file()).unwrap()).unwrap();
        assert_eq!(on_disk, state::state(&f.d));
        assert!(!snapshot(&f.d, "web").exists() && !snapshot_absent(&f.d, "web").exists());
        // Nothing newer: nothing moves.
        let (got, _) = f.upgrade(&[]);
        assert_eq!(got.unwrap()["upgraded"], json!([]));
    }

    /// Every image is fetched before anything switches: one bad image among two stops the
    /// upgrade, and both packages stay at their version, with their data and boot marks.
    #[test]
    fn a_bad_image_stops_the_upgrade_before_any_switch() {
        let mut f = setup("upgrade-bad-image", "");
        let db = MANIFEST.replace("web", "db");
        f.installed(&[MANIFEST, &db]);
        std::fs::create_dir_all(f.data()).unwrap();
        std::fs::write(f.data().join("kept"), b"1.0's").unwrap();
        mark_autostart(&f.d);
        let before = f.kept();
        f.offer(V2, b"web 2.0 image");
        let db2 = db.replace("1.0", "2.0");
        let e = f.offer(&db2, b"db 2.0 image");
        f.publish(2);
        std::fs::write(f.r.dir.join(&e.file), b"db 2.0 IMAGE").unwrap();
        let (got, events) = f.upgrade(&[]);
        let err = got.unwrap_err();
        assert_eq!(err.kind, Kind::BadImage);
        assert!(err.message.starts_with("db@2.0: "), "{}", err.message);
        assert!(
            !events.iter().any(|v| v["event"] == "switched"),
            "{events:?}"
        );
        assert_eq!(f.kept(), before);
        assert_eq!(version(&f.d, "db"), ("1.0".into(), None, false));
    }

    /// Refused with nothing changed: in safe mode, a name not installed, while another
    /// upgrade's trial is unconfirmed.
    #[test]
    fn refusals_name_their_reason_and_change_nothing() {
        let mut f = setup("upgrade-refused", "");
        f.installed(&[MANIFEST]);
        f.offer(V2, b"web 2.0 image");
        f.publish(2);
        let before = f.kept();
        let (got, _) = f.upgrade(&["nginx"]);
        let e = got.unwrap_err();
        assert_eq!(e.kind, Kind::NotInstalled);
        assert!(e.message.contains("nginx"), "{}", e.message);

        *f.d.boot.safe_mode.lock().unwrap() = Some("3 failed starts".into());
        let (got, _) = f.upgrade(&[]);
        let e = got.unwrap_err();
        assert_eq!(e.kind, Kind::SafeMode);
        assert!(
            e.message.starts_with("upgrade: the device is in safe mode"),
            "{}",
            e.message
        );
        let e = rollback(&f.d, "web").unwrap_err();
        assert_eq!(e.kind, Kind::SafeMode);
        *f.d.boot.safe_mode.lock().unwrap() = None;
        assert_eq!(f.kept(), before);

        let mut st = state::state(&f.d);
        st.packages.get_mut("web").unwrap().trial = Some(1);
        state::commit_state(&f.d, st).unwrap();
        let (got, events) = f.upgrade(&[]);
        let e = got.unwrap_err();
        assert_eq!(e.kind, Kind::Running);
        assert_eq!(e.message, "web: an upgrade to 1.0 is still being confirmed");
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(version(&f.d, "web"), ("1.0".into(), None, true));
    }

    /// `berth rollback` goes back to the version the upgrade replaced, once: the previous
    /// version is not kept again, and a crash archive says why.
    #[test]
    fn rollback_goes_back_once_and_is_archived() {
        let mut f = setup("upgrade-rollback", "");
        let e = rollback(&f.d, "web").unwrap_err();
        assert_eq!(e.kind, Kind::NotInstalled);
        f.installed(&[MANIFEST]);
        let e = rollback(&f.d, "web").unwrap_err();
        assert_eq!(e.kind, Kind::NoPrevious);
        assert_eq!(
            e.message,
            "web has no previous version to roll back to (only an upgrade keeps one)"
        );
        let sha1 = state::installed(&f.d, "web").unwrap().sha256;
        f.offer(V2, b"web 2.0 image");
        f.publish(2);
        f.upgrade(&[]).0.unwrap();
        assert_eq!(
            rollback(&f.d, "web").unwrap(),
            json!({"name": "web", "from": "2.0", "to": "1.0"})
        );
        assert_eq!(version(&f.d, "web"), ("1.0".into(), None, false));
        assert_eq!(state::installed(&f.d, "web").unwrap().sha256, sha1);
        let on_disk = State::parse(&std::fs::read(f.d.cfg.paths.state_file()).unwrap()).unwrap();
        assert_eq!(on_disk, state::state(&f.d));
        archived(&f.d, "web", "berth rollback");
        assert_eq!(rollback(&f.d, "web").unwrap_err().kind, Kind::NoPrevious);
    }

    /// The trial's container ends (the memory guard kills it) between the rollback's look
    /// and its stop: the rollback goes on, and no trial is left behind.
    #[test]
    fn a_trial_that_ends_as_its_rollback_stops_it_is_rolled_back() {
        let mut f = setup("upgrade-rollback-ended", "");
        in_trial(&mut f);
        lxc_config(&f.d, "web");
        let shim = FakeShim::ending(&f.d, "web", info(4242), b"", 2);
        assert!(probe::is_running(&f.d, "web"));
        let _op = f.d.op.lock().unwrap();
        rollback_locked(&f.d, "web", false, "the guard", true).unwrap();
        assert_eq!(version(&f.d, "web"), ("1.0".into(), None, false));
        archived(&f.d, "web", "the guard");
        assert!(
            !shim.asked().iter().any(|l| l.starts_with("stop")),
            "{:?}",
            shim.asked()
        );
    }

    /// The container ends (the memory guard kills it) between the upgrade's look and its
    /// stop: the switch goes on as for a running package (a trial), and the trial, which
    /// finds it not running, rolls it back: no error half-way, no trial left.
    #[test]
    fn a_package_that_ends_as_the_upgrade_stops_it_is_switched_and_judged() {
        let mut f = setup(
            "upgrade-ended",
            "[upgrade]\ndeadline = \"600ms\"\nsettle = \"100ms\"\n",
        );
        f.installed(&[MANIFEST]);
        f.offer(V2, b"web 2.0 image");
        f.publish(2);
        lxc_config(&f.d, "web");
        let shim = FakeShim::ending(&f.d, "web", info(4242), b"", 4);
        let (got, _) = f.upgrade(&[]);
        let got = got.unwrap();
        assert_eq!(got["rolled_back"][0]["to"], "2.0", "{got}");
        assert_eq!(version(&f.d, "web"), ("1.0".into(), None, false));
        assert!(
            !shim.asked().iter().any(|l| l.starts_with("stop")),
            "{:?}",
            shim.asked()
        );
    }

    /// web 2.0 committed in trial over 1.0, as a dead daemon leaves it.
    fn in_trial(f: &mut Fixture) {
        f.installed(&[MANIFEST]);
        f.offer(V2, b"web 2.0 image");
        f.publish(2);
        f.upgrade(&[]).0.unwrap();
        let mut st = state::state(&f.d);
        st.packages.get_mut("web").unwrap().trial = Some(1_790_000_000);
        state::commit_state(&f.d, st).unwrap();
    }

    /// The daemon starts and finds a trial: rolled back to 1.0, /data put back from the
    /// snapshot (what the new version wrote goes), the new version's exit record removed.
    #[test]
    fn recover_rolls_back_a_trial_and_puts_its_data_back() {
        let mut f = setup("upgrade-recover", "");
        in_trial(&mut f);
        std::fs::create_dir_all(f.data()).unwrap();
        std::fs::write(f.data().join("new"), b"2.0's").unwrap();
        let snap = snapshot(&f.d, "web");
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::write(snap.join("old"), b"1.0's").unwrap();
        std::fs::create_dir_all(snapshot_tmp(&f.d, "web")).unwrap();
        let exit = f.d.cfg.paths.exit_file("web");
        std::fs::create_dir_all(exit.parent().unwrap()).unwrap();
        std::fs::write(&exit, b"{}").unwrap();
        recover(&f.d);
        assert_eq!(version(&f.d, "web"), ("1.0".into(), None, false));
        assert_eq!(files_in(&f.data()), ["old"]);
        assert_eq!(std::fs::read(f.data().join("old")).unwrap(), b"1.0's");
        for p in [
            snap,
            snapshot_tmp(&f.d, "web"),
            data_failed(&f.d, "web"),
            exit,
        ] {
            assert!(!p.exists(), "{} left", p.display());
        }
        let on_disk = State::parse(&std::fs::read(f.d.cfg.paths.state_file()).unwrap()).unwrap();
        assert_eq!(on_disk.packages["web"].version.to_string(), "1.0");
        archived(&f.d, "web", "the daemon stopped during the upgrade's trial");
    }

    /// A trial of a package that had no /data: what the new version made goes, and so does
    /// the mark.
    #[test]
    fn recover_takes_away_the_data_a_package_that_had_none_made() {
        let mut f = setup("upgrade-recover-absent", "");
        in_trial(&mut f);
        std::fs::create_dir_all(f.data()).unwrap();
        std::fs::write(f.data().join("new"), b"2.0's").unwrap();
        std::fs::write(snapshot_absent(&f.d, "web"), b"").unwrap();
        recover(&f.d);
        assert_eq!(version(&f.d, "web").0, "1.0");
        assert!(!f.data().exists());
        assert!(!snapshot_absent(&f.d, "web").exists());
    }

    /// A confirmed upgrade is kept; only the copies a killed daemon left go, /data stays.
    #[test]
    fn recover_keeps_a_confirmed_upgrade_and_clears_leftovers() {
        let mut f = setup("upgrade-recover-confirmed", "");
        f.installed(&[MANIFEST]);
        f.offer(V2, b"web 2.0 image");
        f.publish(2);
        f.upgrade(&[]).0.unwrap();
        std::fs::create_dir_all(f.data()).unwrap();
        std::fs::write(f.data().join("new"), b"2.0's").unwrap();
        for p in [
            snapshot(&f.d, "web"),
            snapshot_tmp(&f.d, "web"),
            data_failed(&f.d, "web"),
        ] {
            std::fs::create_dir_all(p).unwrap();
        }
        let before = f.kept();
        recover(&f.d);
        assert_eq!(f.kept(), before);
        assert_eq!(
            version(&f.d, "web"),
            ("2.0".into(), Some("1.0".into()), false)
        );
        assert_eq!(files_in(&f.d.cfg.paths.state.join("data")), ["web"]);
    }

    /// A running package is stopped, switched and started again; ready for the settle
    /// time, its trial is confirmed and its snapshot goes.
    #[test]
    fn a_running_package_ready_for_the_settle_time_is_confirmed() {
        let mut f = setup(
            "upgrade-confirmed",
            "[upgrade]\ndeadline = \"5s\"\nsettle = \"200ms\"\n",
        );
        f.installed(&[MANIFEST]);
        std::fs::create_dir_all(f.data()).unwrap();
        std::fs::write(f.data().join("kept"), b"1.0's").unwrap();
        f.offer(V2, b"web 2.0 image");
        f.publish(2);
        let _shim = running(&f.d, true);
        let t0 = Instant::now();
        let (got, events) = f.upgrade(&[]);
        assert_eq!(
            got.unwrap(),
            json!({"upgraded": [{"name": "web", "from": "1.0", "to": "2.0"}],
                   "rolled_back": [], "held": []})
        );
        assert!(t0.elapsed() >= Duration::from_millis(200));
        assert!(
            !events.iter().any(|v| v["event"] == "rollback"),
            "{events:?}"
        );
        assert_eq!(
            version(&f.d, "web"),
            ("2.0".into(), Some("1.0".into()), false)
        );
        assert!(!snapshot(&f.d, "web").exists());
        assert_eq!(files_in(&f.data()), ["kept"]);
    }

    /// A running package whose new version never gets ready within the deadline is rolled
    /// back: 1.0 installed again, /data as it was before the upgrade (what 2.0 wrote
    /// goes), its boot mark kept, and an archive says why.
    #[test]
    fn a_trial_that_never_gets_ready_is_rolled_back_with_its_data() {
        let mut f = setup(
            "upgrade-trial-failed",
            "[upgrade]\ndeadline = \"600ms\"\nsettle = \"100ms\"\n",
        );
        f.installed(&[MANIFEST]);
        std::fs::create_dir_all(f.data()).unwrap();
        std::fs::write(f.data().join("kept"), b"1.0's").unwrap();
        mark_autostart(&f.d);
        let before = f.kept();
        let e2 = f.offer(V2, b"web 2.0 image");
        f.publish(2);
        let _shim = running(&f.d, false);
        let data = f.data();
        let mut events = Vec::new();
        let got = upgrade(&f.d, &[], false, &mut |v| {
            if v["event"] == "switched" {
                // The new version's run changes /data.
                std::fs::write(data.join("kept"), b"2.0's").unwrap();
                std::fs::write(data.join("new"), b"2.0's").unwrap();
            }
            events.push(v);
        });
        let why = "2.0 was not running and ready for 100 ms within 600 ms";
        assert_eq!(
            got.unwrap(),
            json!({"upgraded": [], "held": [],
                   "rolled_back": [{"name": "web", "from": "1.0", "to": "2.0", "reason": why}]})
        );
        assert!(
            events.contains(&json!({"event": "rollback", "name": "web", "reason": why})),
            "{events:?}"
        );
        assert_eq!(f.kept(), before);
        assert_eq!(std::fs::read(f.data().join("kept")).unwrap(), b"1.0's");
        assert!(!snapshot(&f.d, "web").exists() && !data_failed(&f.d, "web").exists());
        archived(&f.d, "web", why);
        assert!(
            !f.d.cfg.paths.image(&e2.sha256).exists(),
            "the rolled-back image stayed in the store"
        );
    }

    /// Upgrades and rollbacks leave in the store what the state references and no more: the
    /// image two versions back and the one rolled back from are deleted; an image the upgrade
    /// never referenced (a `berth remove` left it) stays for `berth gc`.
    #[test]
    fn upgrades_and_rollbacks_delete_the_images_they_leave_unused() {
        let mut f = setup("upgrade-prune", "");
        f.installed(&[MANIFEST]);
        let paths = f.d.cfg.paths.clone();
        let image = |sha: &str| paths.image(sha);
        let sha1 = state::installed(&f.d, "web").unwrap().sha256;
        let stray = image(&"ab".repeat(32));
        std::fs::write(&stray, b"left by a remove").unwrap();
        let e2 = f.offer(V2, b"web 2.0 image");
        f.publish(2);
        f.upgrade(&[]).0.unwrap();
        assert!(image(&sha1).exists(), "1.0 is 2.0's previous version");
        let e3 = f.offer(&V2.replace("2.0", "3.0"), b"web 3.0 image");
        f.publish(3);
        f.upgrade(&[]).0.unwrap();
        assert!(
            !image(&sha1).exists(),
            "1.0's image, two versions back, stayed"
        );
        assert!(image(&e2.sha256).exists() && image(&e3.sha256).exists());
        rollback(&f.d, "web").unwrap();
        assert!(
            !image(&e3.sha256).exists(),
            "the image rolled back from stayed"
        );
        assert!(image(&e2.sha256).exists());
        assert!(
            stray.exists(),
            "an image the upgrade never referenced was deleted"
        );
    }
}
