//! Schedules (docs/schedules.md): each container's cron jobs, its manifest's `[[schedule]]`
//! and those added through the API, kept in `<state>/schedules/NAME.json` (atomic), and the
//! scheduler thread that runs them.
//!
//! The decisions are `berth_core::schedule`'s (what is due, catch-up, caps, ids); this module
//! keeps the tables, writes them, and runs a due job: in the container if it runs (one
//! `berth __health … exec` helper per run, on a short-lived thread), after starting it
//! (as `berth start` does) if it is stopped. The thread exists once there is a job: it
//! sleeps on a wall-clock timer (`WallTimer`) until the next due time, with no wake-ups
//! before; whoever changes a table re-arms that timer to "now" under the tables' lock, so
//! the thread looks again.
//!
//! For the per-container API: [`list`], [`add`], [`delete`] (the caller's container).

use std::sync::Arc;
use std::time::Instant;

use berth_core::api::last_run as run;
use berth_core::schedule::{self, Due, NewJob, Refusal, Table};
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::device::state::{self, write_failed};
use crate::daemon::runtime::control::{self, Intent, Who};
use crate::daemon::runtime::{health, probe};
use crate::health::{HealthArgs, Probe};

/// The last bytes of a run's output kept in its record.
const OUTPUT_MAX: usize = 256;

/// The scheduler's time now (seconds; real UNIX time unless test hooks change it).
fn now(d: &Daemon) -> i64 {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.as_millis() as i64);
    d.schedules.clock.at(ms)
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`, or the tests'), read at daemon start.
pub(crate) fn boot_id(d: &Daemon) -> &str {
    d.schedules.boot_id.get().map_or("", String::as_str)
}

/// At daemon start: this boot's id, every installed package's table as written (a due time
/// that passed while the daemon was down is due now, once, as a catch-up; an `@reboot` job
/// not run in this boot is due now), then [`sync`]; files of packages no longer installed
/// go. The thread starts if there is any job.
pub(crate) fn start(d: &Arc<Daemon>) {
    let from_test = crate::hooks::boot_id();
    let id = from_test.unwrap_or_else(|| {
        std::fs::read_to_string(d.proc().join("sys/kernel/random/boot_id"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    });
    let _ = d.schedules.boot_id.set(id);
    let dir = d.cfg.paths.state.join("schedules");
    berth_sys::fsutil::remove_atomic_leftovers(&dir);
    let now = now(d);
    let st = state::state(d);
    {
        let mut tables = d.schedules.tables.lock().unwrap();
        for name in st.packages.keys() {
            let path = d.cfg.paths.schedules_file(name);
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let (mut t, bad) = Table::from_json(&v);
            if bad > 0 || v.is_null() {
                log::error!("{}: {bad} schedules could not be read", path.display());
            }
            t.name = name.clone();
            t.at_start(now, boot_id(d));
            t.written = now;
            tables.push(t);
        }
    }
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let file = e.file_name().to_string_lossy().to_string();
        if !file
            .strip_suffix(".json")
            .is_some_and(|n| st.packages.contains_key(n))
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
    sync(d);
}

/// After an install, upgrade or rollback (and at start): each package's manifest jobs are
/// those of the version now installed (unchanged entries keep their records), the API's
/// stay; tables of packages no longer installed go.
pub(crate) fn sync(d: &Arc<Daemon>) {
    let now = now(d);
    let st = state::state(d);
    let mut tables = d.schedules.tables.lock().unwrap();
    tables.retain(|t| st.packages.contains_key(&t.name));
    for p in st.packages.values() {
        let t = table(&mut tables, p.name.as_str());
        if t.sync_manifest(&p.manifest.schedules, now, boot_id(d)) {
            if let Err(e) = save(d, t, now) {
                log::error!("{e}");
            }
        }
    }
    if tables.iter().any(|t| !t.jobs.is_empty()) {
        ensure_thread(d);
    }
    wake(d, &tables);
}

/// A container's table, made if it has none yet.
fn table<'a>(tables: &'a mut Vec<Table>, name: &str) -> &'a mut Table {
    match tables.iter().position(|t| t.name == name) {
        Some(i) => &mut tables[i],
        None => {
            tables.push(Table {
                name: name.to_string(),
                ..Table::default()
            });
            tables.last_mut().unwrap()
        }
    }
}

/// `berth remove`: the container's schedules and their file go (after the commit; a run
/// going on ends on its own and its record is dropped).
pub(crate) fn forget(d: &Daemon, name: &str) {
    let mut tables = d.schedules.tables.lock().unwrap();
    tables.retain(|t| t.name != name);
    let path = d.cfg.paths.schedules_file(name);
    if std::fs::remove_file(&path).is_ok() {
        let _ = berth_sys::fsutil::fsync_dir(&d.cfg.paths.state.join("schedules"));
    }
}

/// At a clean stop: run records not written yet are written.
pub(crate) fn flush(d: &Daemon) {
    let now = now(d);
    for t in d.schedules.tables.lock().unwrap().iter_mut() {
        if t.dirty {
            let _ = save(d, t, now);
        }
    }
}

/// `GET …/schedules`: `{"schedules": [...]}`.
pub(crate) fn list(d: &Daemon, container: &str) -> Result<Value> {
    state::installed(d, container)?;
    let mut tables = d.schedules.tables.lock().unwrap();
    Ok(table(&mut tables, container).list())
}

/// `POST …/schedules` with `{"cron", "cmd"}` (unknown fields refused): the schedule added.
/// (The admin API parses the body in `api::request` and calls [`add_job`].)
#[cfg_attr(not(test), allow(dead_code))]
/// A job the package adds itself (its container API).
pub(crate) fn add(d: &Arc<Daemon>, container: &str, body: &Value) -> Result<Value> {
    let mut new = schedule::parse_new(body)?;
    new.package = true;
    add_job(d, container, new)
}

/// Adds a checked job to an installed container's table and writes it; on a failed write
/// nothing changed.
pub(crate) fn add_job(d: &Arc<Daemon>, container: &str, new: NewJob) -> Result<Value> {
    let now = now(d);
    let mut tables = d.schedules.tables.lock().unwrap();
    // Under the tables' lock: a remove committed after this check finds the table to drop.
    state::installed(d, container)?;
    let t = table(&mut tables, container);
    let job = t
        .add(new, now, boot_id(d))
        .map_err(|r| refusal(r, container, ""))?
        .to_json();
    if let Err(e) = save(d, t, now) {
        t.jobs.pop();
        t.next_id -= 1;
        return Err(e);
    }
    ensure_thread(d);
    wake(d, &tables);
    Ok(job)
}

/// `DELETE …/schedules/{id}`: the schedule as it was. The manifest's are read-only.
pub(crate) fn delete(d: &Arc<Daemon>, container: &str, id: &str) -> Result<Value> {
    let now = now(d);
    let mut tables = d.schedules.tables.lock().unwrap();
    state::installed(d, container)?;
    let t = table(&mut tables, container);
    let at = t.jobs.iter().position(|j| j.id == id).unwrap_or(0);
    let job = t.delete(id).map_err(|r| refusal(r, container, id))?;
    if let Err(e) = save(d, t, now) {
        t.jobs.insert(at, job);
        return Err(e);
    }
    wake(d, &tables);
    Ok(job.to_json())
}

fn refusal(r: Refusal, container: &str, id: &str) -> Error {
    match r {
        Refusal::TooMany => Error::new(
            Kind::TooManySchedules,
            format!(
                "{container} has {} schedules already (the most a container may have); remove one first",
                schedule::MAX_SCHEDULES
            ),
        ),
        Refusal::NoSuchSchedule => Error::new(
            Kind::NoSuchSchedule,
            format!("{container} has no schedule {id} (berth schedule list {container})"),
        ),
        Refusal::ReadOnly => Error::new(
            Kind::ReadOnly,
            format!("schedule {id} of {container} is its manifest's: read-only (it goes with the package or its upgrade)"),
        ),
    }
}

/// Writes a table atomically (tmp, fsync, rename, fsync dir): after a power cut the file is
/// the old one or the new one.
fn save(d: &Daemon, t: &mut Table, now: i64) -> Result<()> {
    let path = d.cfg.paths.schedules_file(&t.name);
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    berth_sys::fsutil::write_atomic(&path, t.to_json().to_string().as_bytes(), 0o600)
        .map_err(|e| write_failed(d, &path, e, "the schedules were not changed"))?;
    t.dirty = false;
    t.written = now;
    Ok(())
}

/// Makes the scheduler thread look again (re-arms its timer to now). Under the tables' lock
/// (the guard is the proof): the thread arms its timer under it too, so no change is missed.
fn wake<T>(d: &Daemon, _held: &std::sync::MutexGuard<'_, T>) {
    if let Some(t) = d.schedules.timer.get() {
        let _ = t.arm(Some(0));
    }
}

/// Starts the scheduler thread, once.
fn ensure_thread(d: &Arc<Daemon>) {
    if d.schedules.timer.get().is_some() {
        return;
    }
    let timer = match berth_sys::process::WallTimer::new() {
        Ok(t) => t,
        Err(e) => {
            log::error!("cannot create the scheduler's timer: {e}; no schedule runs");
            return;
        }
    };
    if d.schedules.timer.set(timer).is_err() {
        return;
    }
    let d2 = Arc::clone(d);
    if let Err(e) = spawn("scheduler".into(), Box::new(move || scheduler(&d2))) {
        log::error!("cannot start the scheduler: {e}; no schedule runs");
    }
}

/// A thread of 128 KiB.
fn spawn(name: String, f: Box<dyn FnOnce() + Send>) -> std::io::Result<()> {
    berth_sys::process::spawn_thread(name, 128 * 1024, f)
}

/// The scheduler thread: runs what is due, writes records whose time has come, sleeps until
/// the next due time (or a change).
fn scheduler(d: &Arc<Daemon>) {
    let Some(timer) = d.schedules.timer.get() else {
        return;
    };
    let mut last = now(d);
    loop {
        let now = now(d);
        // Set back by more than a minute while asleep (the timer also wakes when the clock
        // is set): the jobs' times move back with it.
        let went_back = now + 60 < last;
        last = now;
        let mut runs = Vec::new();
        {
            let mut tables = d.schedules.tables.lock().unwrap();
            let mut busy = d.schedules.busy.lock().unwrap();
            let mut next: Option<i64> = None;
            for t in tables.iter_mut() {
                if went_back {
                    t.clock_went_back(now);
                }
                t.enqueue(now, boot_id(d));
            }
            // What is due waits for a slot; the device's are shared among the containers
            // (a run that finds none waits until one ends, or is skipped at its next time).
            let started = schedule::start_fair(&mut tables, &mut busy, now);
            for (i, t) in tables.iter_mut().enumerate() {
                let mine = started.iter().filter(|(k, _)| *k == i);
                // A catch-up or an @reboot run is written before it runs: a daemon killed
                // during it must not run it again.
                if t.flush_due(now) || mine.clone().any(|(_, r)| r.catch_up || r.reboot) {
                    if let Err(e) = save(d, t, now) {
                        // Tried again a minute later (a full disk must not make the timer
                        // fire at once, for ever): the records stay in memory meanwhile.
                        log::warn!("{e}; tried again in a minute");
                        t.written = now - schedule::FLUSH_S + 60;
                    }
                }
                let flush = t.dirty.then_some(t.written + schedule::FLUSH_S);
                next = schedule::min(schedule::min(next, t.next_due()), flush);
                for (_, r) in mine {
                    runs.push((t.name.clone(), r.clone()));
                }
            }
            let _ = timer.arm(next.map(|t| d.schedules.clock.real_ms(t)));
        }
        for (name, r) in runs {
            spawn_run(d, name, r);
        }
        timer.wait();
    }
}

/// One run on a thread of its own; its record goes into the table when it ends.
fn spawn_run(d: &Arc<Daemon>, name: String, r: Due) {
    let (d2, n2, r2) = (Arc::clone(d), name.clone(), r.clone());
    let job = move || {
        let record = run_job(&d2, &n2, &r2);
        finish(&d2, &n2, &r2, record);
    };
    if let Err(e) = spawn(format!("job-{name}"), Box::new(job)) {
        let why = format!("no thread to run it: {e}");
        log::error!("{name}: schedule {}: {why}", r.id);
        finish(d, &name, &r, schedule::skipped(now(d), &why));
    }
}

/// A run ended: its record, the count of runs going on, and the thread woken to arm the
/// job's next time.
fn finish(d: &Arc<Daemon>, name: &str, r: &Due, record: Value) {
    let now = now(d);
    let mut tables = d.schedules.tables.lock().unwrap();
    {
        let mut busy = d.schedules.busy.lock().unwrap();
        *busy = busy.saturating_sub(1);
    }
    if let Some(t) = tables.iter_mut().find(|t| t.name == name) {
        if t.finished(&r.id, record) && (t.flush_due(now) || r.catch_up || r.reboot) {
            if let Err(e) = save(d, t, now) {
                log::warn!("{e}");
            }
        }
    }
    wake(d, &tables);
}

/// Runs one due job: in the container if it runs, after starting it if it is stopped. The
/// record says how it went, or why it did not run.
fn run_job(d: &Arc<Daemon>, name: &str, r: &Due) -> Value {
    let t0 = Instant::now();
    let at = now(d);
    let mut started = false;
    // Not logged (nor each run): a container's own jobs must not fill the daemon's log;
    // `berth schedule list` shows the records.
    let skip = |why: String| schedule::skipped(at, &why);
    if !probe::is_running(d, name) {
        // A stop (the operator's, or the package's own through its API) is not undone by a
        // job the package added itself: the manifest's and the operator's jobs start a
        // stopped container, the package's own only one meant to run (its autostart mark).
        if !r.may_start && !d.cfg.paths.autostart(name).exists() {
            return skip(format!(
                "{name} was stopped: a job the package added itself does not start it (berth start {name})"
            ));
        }
        match control::act(d, name, Intent::Start, Who::Schedule, None) {
            Ok(_) => {
                log::info!("{name}: started by schedule {}", r.id);
                started = true;
            }
            Err(e) if e.kind == Kind::AlreadyRunning => {}
            // The supervisor's machine said no (safe mode, a crash loop, a restart held, a
            // start or a stop on its way): why.
            Err(e) if e.kind == Kind::Busy => return skip(e.message),
            Err(e) => return skip(format!("cannot start {name}: {e}")),
        }
    }
    let (Some(init), Ok(p)) = (probe::running_init(d, name), state::installed(d, name)) else {
        return skip(format!("{name} is not running"));
    };
    let monitor = probe::shim_info(d, name)["monitor_pid"]
        .as_i64()
        .unwrap_or(0);
    let timeout_ms = d.schedules.clock.duration_ms(r.timeout_s).max(1);
    let args = HealthArgs {
        lxcpath: d.cfg.paths.lxcpath.clone(),
        name: name.to_string(),
        init,
        timeout_ms,
        uid: p.manifest.entrypoint.user,
        gid: p.manifest.entrypoint.group,
        probe: Probe::Exec(monitor as i32, r.cmd.clone()),
    };
    let (_, said) = health::run(
        d,
        &args,
        std::time::Duration::from_millis(timeout_ms) + health::GRACE,
    );
    let (line, output) = said.split_once('\n').unwrap_or((&said, ""));
    let verdict = line
        .strip_prefix("ok: ")
        .or_else(|| line.strip_prefix("failed: "))
        .unwrap_or(line);
    let num = |p: &str| verdict.strip_prefix(p).and_then(|n| n.parse::<i32>().ok());
    let (code, signal) = (num("exit "), num("killed by signal "));
    let timed_out = verdict.starts_with("timed out") || line.contains("did not finish");
    if code.is_none() && signal.is_none() && !timed_out {
        return skip(format!("could not run: {verdict}"));
    }
    let mut cut = output.len().saturating_sub(OUTPUT_MAX);
    while !output.is_char_boundary(cut) {
        cut += 1;
    }
    json!({
        run::TIME: at,
        run::CODE: code,
        run::SIGNAL: if timed_out { Some(libc::SIGKILL) } else { signal },
        run::DURATION_MS: t0.elapsed().as_millis() as u64,
        run::CATCH_UP: r.catch_up,
        run::STARTED: started,
        run::TIMED_OUT: timed_out,
        run::OUTPUT: &output[cut..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::context::{Resources, Roots};
    use berth_core::manifest::Manifest;
    use berth_core::state::{Installed, State};

    /// A daemon over a temporary state directory with `web` installed, whose manifest has
    /// one `[[schedule]]`.
    fn daemon(dir: &std::path::Path) -> Arc<Daemon> {
        let text = format!(
            "[paths]\nstate = \"{0}/state\"\nrun = \"{0}/run\"\nkeys = \"{0}/keys\"\nlxcpath = \"{0}/lxc\"\n",
            dir.display()
        );
        let cfg = berth_core::config::Config::parse(&text, "t").unwrap();
        let manifest = Manifest::parse(
            "[package]\nname = \"web\"\nversion = \"1.0\"\n[entrypoint]\nargv = [\"/bin/web\"]\n[[schedule]]\ncron = \"@yearly\"\ncmd = [\"/bin/rotate\"]\n",
        )
        .unwrap();
        let mut st = State::default();
        st.packages.insert(
            "web".into(),
            Installed {
                name: berth_core::name::Name::parse("web").unwrap(),
                version: berth_core::name::Version::parse("1.0").unwrap(),
                sha256: "0".repeat(64),
                size: 0,
                trusted: false,
                explicit: true,
                depends: Vec::new(),
                manifest,
                installed_at: 0,
                previous: None,
                trial: None,
            },
        );
        let resources = Resources {
            cgroups: Err("none".into()),
            host: berth_core::cgroup::Host {
                cpus: 1,
                mem_total: 0,
            },
        };
        Arc::new(Daemon::new(cfg, Roots::default(), resources, st))
    }

    #[test]
    fn the_interface_the_container_api_calls() {
        let dir = std::env::temp_dir().join(format!("berth-sched-{}", std::process::id()));
        let d = daemon(&dir);
        start(&d);
        let file = d.cfg.paths.schedules_file("web");
        assert!(file.exists(), "the manifest's job is installed at start");
        let v = list(&d, "web").unwrap();
        let manifest_id = v["schedules"][0]["id"].as_str().unwrap().to_string();
        assert_eq!(v["schedules"][0]["origin"], "manifest");

        let job = add(
            &d,
            "web",
            &json!({"cron": "0 0 1 1 *", "cmd": ["/bin/x", "y"]}),
        )
        .unwrap();
        assert_eq!(
            (job["id"].as_str(), job["origin"].as_str()),
            (Some("a1"), Some("package"))
        );
        assert!(job["next_run"].as_i64().unwrap() > now(&d));
        let on_disk: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(on_disk["schedules"].as_array().unwrap().len(), 2);

        for (body, kind) in [
            (
                json!({"cron": "60 * * * *", "cmd": ["/x"]}),
                Kind::BadRequest,
            ),
            (json!({"cron": "@daily", "cmd": ["x"]}), Kind::BadRequest),
            (
                json!({"cron": "@daily", "cmd": ["/x"], "env": {}}),
                Kind::BadRequest,
            ),
        ] {
            assert_eq!(add(&d, "web", &body).unwrap_err().kind, kind, "{body}");
        }
        let e = add(&d, "db", &json!({"cron": "@daily", "cmd": ["/x"]})).unwrap_err();
        assert_eq!(e.kind, Kind::NotInstalled);
        assert_eq!(list(&d, "db").unwrap_err().kind, Kind::NotInstalled);

        let e = delete(&d, "web", &manifest_id).unwrap_err();
        assert_eq!((e.kind, e.status()), (Kind::ReadOnly, 403));
        let e = delete(&d, "web", "a9").unwrap_err();
        assert_eq!((e.kind, e.status()), (Kind::NoSuchSchedule, 404));
        assert_eq!(delete(&d, "web", "a1").unwrap()["id"], "a1");

        // The limit: the manifest's job and 63 more; the next is refused, nothing lost.
        for _ in 0..63 {
            add(&d, "web", &json!({"cron": "@yearly", "cmd": ["/x"]})).unwrap();
        }
        let before = std::fs::read(&file).unwrap();
        let e = add(&d, "web", &json!({"cron": "@yearly", "cmd": ["/x"]})).unwrap_err();
        assert_eq!((e.kind, e.status()), (Kind::TooManySchedules, 409));
        assert_eq!(std::fs::read(&file).unwrap(), before);
        assert_eq!(
            list(&d, "web").unwrap()["schedules"]
                .as_array()
                .unwrap()
                .len(),
            64
        );

        forget(&d, "web");
        assert!(!file.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
