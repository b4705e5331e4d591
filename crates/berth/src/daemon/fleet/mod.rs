//! The hawkBit DDI client (`[fleet]`, docs/fleet.md): one thread that polls the server's
//! controller base resource at the interval the server sets (with jitter, and backoff while
//! it cannot be reached), reports the device's attributes (configData), and carries out
//! deployments of signed bundles (`bundle.rs`) with DDI feedback as it goes. The server
//! chooses what to deploy; the device's keys decide whether it is installed.
//!
//! What the client has promised the server is kept in `<state>/fleet.json` (atomically): the
//! action in hand and its phase, the result not yet reported, the bundle version installed.
//! A daemon killed while applying finds the phase `applying` at its next start: the upgrade's
//! own recovery has rolled back any trial by then; the action is applied once more if the
//! server still offers it (`resumed`), and a second interruption fails it. Nothing else of
//! berth waits on the server: an unreachable server leaves the installed set running.

mod bundle;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use berth_core::api::{fleet as field, upgrade as up};
use berth_core::config::{Fleet, FleetTls};
use berth_core::ddi::{self, Deployment, Execution, Finished, Step};
use berth_sys::fsutil::write_atomic;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;
use crate::daemon::device::state;
use crate::daemon::store::repo;
use crate::fetch::{self, Call, Fetcher};
use crate::hooks;

/// The largest DDI answer read (a deploymentBase with many artifacts is a few KiB).
const ANSWER_LIMIT: u64 = 256 << 10;
/// The largest bundle downloaded (whatever size the server announces).
const BUNDLE_LIMIT: u64 = 1 << 30;
/// Applies of one action interrupted by a restart before it fails.
const MAX_ATTEMPTS: u32 = 2;
/// Times a failed action offered again is tried again (gooseBit's `force_update`).
const MAX_RETRIES: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Phase {
    Downloading,
    Downloaded,
    Applying,
    Finished,
}

/// The action in hand.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Action {
    id: String,
    version: Option<String>,
    phase: Phase,
    /// Applies begun (a restart while applying leaves this at 1).
    attempts: u32,
    /// The last `Wait` reason said in a feedback (said once).
    said: Option<String>,
    /// `downloaded` said (an `update: skip` action).
    downloaded_said: bool,
    /// When a lock first deferred an `attempt` update: CLOCK_MONOTONIC seconds in the boot
    /// `deferred_boot`, so that NTP setting the wall clock neither ends nor stretches the
    /// policy's bound; after a reboot the count starts again (the locks died with the boot).
    deferred_since: Option<u64>,
    #[serde(default)]
    deferred_boot: Option<String>,
    /// Finished: success or failure, and the details.
    success: Option<bool>,
    details: Vec<String>,
    /// The final feedback was accepted by the server.
    reported: bool,
    /// Tries of this action after it failed (offered again).
    #[serde(default)]
    retries: u32,
    /// The sha256 of the bundle downloaded for it: a later action with the same artifact (a
    /// download-only action staged it) takes it as it is.
    #[serde(default)]
    bundle_sha256: Option<String>,
}

impl Action {
    fn new(id: &str, version: Option<String>) -> Action {
        Action {
            id: id.to_string(),
            version,
            phase: Phase::Downloading,
            attempts: 0,
            said: None,
            downloaded_said: false,
            deferred_since: None,
            deferred_boot: None,
            success: None,
            details: Vec::new(),
            reported: false,
            retries: 0,
            bundle_sha256: None,
        }
    }
}

/// `<state>/fleet.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Record {
    /// The version of the last bundle applied with success (`sw_version`).
    sw_version: Option<String>,
    action: Option<Action>,
    /// The configData body the server last accepted.
    attributes_sent: Option<String>,
}

/// What `berth status` shows of the client (memory only).
#[derive(Debug, Clone, Default)]
struct View {
    controller_id: String,
    last_poll: Option<u64>,
    last_error: Option<String>,
    next_poll: Option<u64>,
    polls: u64,
    /// The record's parts `berth status` shows, as last saved (status does not read flash).
    sw_version: Option<String>,
    action: Option<Action>,
}

struct Shared {
    view: Mutex<View>,
    /// What wakes the thread before its time (nothing yet but a spurious wake-up).
    wake: (Mutex<bool>, Condvar),
}

static SHARED: OnceLock<Shared> = OnceLock::new();

fn record_path(d: &Daemon) -> PathBuf {
    d.cfg.paths.state.join("fleet.json")
}

fn bundle_path(d: &Daemon) -> PathBuf {
    d.cfg.paths.state.join("fleet").join("bundle.part")
}

fn load(d: &Daemon) -> Record {
    match std::fs::read(record_path(d)) {
        Ok(b) => serde_json::from_slice(&b).unwrap_or_else(|e| {
            log::error!(
                "{}: damaged ({e}); starting afresh",
                record_path(d).display()
            );
            Record::default()
        }),
        Err(_) => Record::default(),
    }
}

fn save(d: &Daemon, r: &Record) {
    show(r);
    let p = record_path(d);
    if let Err(e) = write_atomic(&p, &serde_json::to_vec(r).expect("serializes"), 0o600) {
        log::error!("cannot write {}: {e}", p.display());
    }
}

/// What `berth status` shows of the record.
fn show(r: &Record) {
    if let Some(s) = SHARED.get() {
        let mut v = s.view.lock().unwrap();
        v.sw_version.clone_from(&r.sw_version);
        v.action.clone_from(&r.action);
    }
}

/// The DDI endpoints of this device, with its authorization.
struct Client<'a> {
    base: String,
    auth: Option<String>,
    /// An https:// server's TLS options.
    tls: Option<&'a FleetTls>,
    http: Fetcher,
}

impl Client<'_> {
    fn url(&self, rel: &str) -> String {
        if rel.is_empty() {
            self.base.clone()
        } else {
            format!("{}/{rel}", self.base)
        }
    }

    fn call(&self, method: &str, url: &str, body: Option<&str>) -> Result<Vec<u8>, String> {
        self.try_call(method, url, body).map_err(|e| e.to_string())
    }

    fn try_call(
        &self,
        method: &str,
        url: &str,
        body: Option<&str>,
    ) -> Result<Vec<u8>, fetch::FetchError> {
        let call = self.request(method, self.auth.as_deref(), body);
        self.http.call(url, call, ANSWER_LIMIT)
    }

    /// A request with this server's TLS options; `auth` only for the server's own origin.
    fn request<'c>(
        &'c self,
        method: &'c str,
        auth: Option<&'c str>,
        body: Option<&'c str>,
    ) -> Call<'c> {
        Call {
            method,
            auth,
            json: body.map(str::as_bytes),
            tls: self.tls.map(fetch::TlsFiles::from),
            headers: &[],
        }
    }

    fn feedback(&self, id: &str, body: &str) -> Result<(), String> {
        let url = self.url(&format!("deploymentBase/{id}/feedback"));
        self.call("POST", &url, Some(body)).map(|_| ())
    }

    /// A link the server gave for its own DDI resources: only on the server itself (same
    /// scheme, host and port as `[fleet] server`), so that no answer sends the device, its
    /// token, or its requests anywhere else (a file://, another host on the LAN).
    fn own(&self, href: &str) -> Result<String, String> {
        match (fetch::origin(href), fetch::origin(&self.base)) {
            (Some(a), Some(b)) if a == b => Ok(href.to_string()),
            _ => Err(format!(
                "the server's link {href:?} is not on the server ({})",
                self.base
            )),
        }
    }
}

/// A 4xx answer (but 408 and 429, which ask for later): the server will not take this.
fn refused(e: &fetch::FetchError) -> bool {
    matches!(e, fetch::FetchError::Status { status, .. }
        if (400..500).contains(status) && !matches!(status, 408 | 429))
}

/// The token header from the configured file, read at each poll (a rotated token is used at
/// the next one).
fn auth(cfg: &Fleet) -> Result<Option<String>, String> {
    let (file, scheme) = match (&cfg.token_file, &cfg.gateway_token_file) {
        (Some(f), _) => (f, "TargetToken"),
        (None, Some(f)) => (f, "GatewayToken"),
        (None, None) => return Ok(None),
    };
    let t = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let t = t.trim();
    if t.is_empty() || t.len() > 512 || !t.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "{}: not a token (1 to 512 printable characters)",
            file.display()
        ));
    }
    Ok(Some(format!("{scheme} {t}")))
}

/// The controller id: configured, or derived from the machine id.
fn controller_id(cfg: &Fleet) -> Option<String> {
    cfg.controller_id.clone().or_else(|| {
        ["/etc/machine-id", "/var/lib/dbus/machine-id"]
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .and_then(|m| ddi::controller_id(&m))
    })
}

/// Starts the client if `[fleet]` is set.
pub(crate) fn spawn(d: &Arc<Daemon>) {
    let Some(cfg) = d.cfg.fleet.clone() else {
        return;
    };
    let Some(id) = controller_id(&cfg) else {
        log::error!("[fleet]: no controller_id and no machine id (/etc/machine-id) to derive one from; the fleet client is off");
        return;
    };
    let shared = SHARED.get_or_init(|| Shared {
        view: Mutex::new(View::default()),
        wake: (Mutex::new(false), Condvar::new()),
    });
    shared.view.lock().unwrap().controller_id = id.clone();
    std::fs::create_dir_all(d.cfg.paths.state.join("fleet")).ok();
    let d = Arc::clone(d);
    let spawned = berth_sys::process::spawn_thread(
        "fleet".into(),
        256 * 1024,
        Box::new(move || run(&d, &cfg, &id, shared)),
    );
    if let Err(e) = spawned {
        log::error!("cannot start the fleet client: {e}");
    }
}

fn run(d: &Arc<Daemon>, cfg: &Fleet, id: &str, shared: &Shared) {
    let mut rec = load(d);
    show(&rec);
    let base = format!("{}/{}/controller/v1/{id}", cfg.server, cfg.tenant);
    log::info!("fleet: polling {base}");
    let mut seed = [0u8; 8];
    let _ = berth_sys::fsutil::fill_random(&mut seed);
    let mut seed = u64::from_le_bytes(seed) | 1;
    let mut sleep_ms = cfg.poll_ms;
    let mut failures = 0u32;
    // A fleet that boots together (a district's power comes back) does not poll together:
    // the first poll waits up to a tenth of the poll time, at most 30 s.
    let first = (cfg.poll_ms / 10).min(30_000);
    if first > 0 {
        std::thread::sleep(Duration::from_millis(seed % first));
    }
    loop {
        // A poll's requests share their connections; none stays open until the next poll.
        let session = fetch::session();
        let outcome = auth(cfg).and_then(|auth| {
            let client = Client {
                base: base.clone(),
                auth,
                tls: cfg.tls.as_ref(),
                http: Fetcher::default(),
            };
            poll(d, cfg, &client, &mut rec, &mut sleep_ms)
        });
        drop(session);
        let now = berth_sys::process::now_s();
        match &outcome {
            Ok(()) => failures = 0,
            Err(e) => {
                failures = failures.saturating_add(1);
                log::warn!("fleet: {e} (poll {failures} in a row to fail)");
            }
        }
        // xorshift: each device's own jitter.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let wait = ddi::next_poll_ms(sleep_ms, failures, cfg.max_backoff_ms, seed);
        {
            // One update: a reader sees the error with the wait it causes.
            let mut v = shared.view.lock().unwrap();
            v.polls += 1;
            match outcome {
                Ok(()) => {
                    v.last_poll = Some(now);
                    v.last_error = None;
                }
                Err(e) => v.last_error = Some(e),
            }
            v.next_poll = Some(now + wait / 1000);
        }
        // What a poll (or a deployment) allocated goes back before the long sleep.
        berth_sys::process::trim_heap();
        let (lock, cv) = &shared.wake;
        let woken = lock.lock().unwrap();
        let (mut woken, _) = cv
            .wait_timeout_while(woken, Duration::from_millis(wait), |w| !*w)
            .unwrap();
        *woken = false;
    }
}

/// One poll: the base resource, a pending report, configData, then a cancel or a deployment.
fn poll(
    d: &Arc<Daemon>,
    cfg: &Fleet,
    client: &Client,
    rec: &mut Record,
    sleep_ms: &mut u64,
) -> Result<(), String> {
    let body = client.call("GET", &client.url(""), None)?;
    let base = ddi::parse_base(&body).map_err(|e| e.to_string())?;
    if let Some(s) = base.sleep_s {
        *sleep_ms = (s * 1000).max(1000);
    }
    report(client, rec, d)?;
    config_data(d, cfg, client, rec, base.config_data.is_some());
    if let Some(href) = &base.cancel {
        return cancel(d, client, rec, &client.own(href)?);
    }
    if let Some(href) = &base.deployment {
        let href = client.own(href)?;
        let body = client.call("GET", &href, None)?;
        let dep = ddi::parse_deployment(&body).map_err(|e| e.to_string())?;
        deploy(d, client, rec, &dep)?;
        // What the deployment changed, said at once.
        config_data(d, cfg, client, rec, false);
    }
    Ok(())
}

/// The attributes, when the server asks for them or they changed. A refusal is the
/// server's business and a failure is retried at the next poll: neither stops the poll.
fn config_data(d: &Daemon, cfg: &Fleet, client: &Client, rec: &mut Record, asked: bool) {
    let attrs = ddi::config_data(&attributes(d, cfg, rec));
    if !asked && rec.attributes_sent.as_deref() == Some(attrs.as_str()) {
        return;
    }
    match client.try_call("PUT", &client.url("configData"), Some(&attrs)) {
        Ok(_) => {}
        Err(e) if refused(&e) => log::warn!("fleet: the server refused configData: {e}"),
        Err(e) => {
            log::warn!("fleet: configData: {e}");
            return;
        }
    }
    rec.attributes_sent = Some(attrs);
    save(d, rec);
}

/// The final feedback of a finished action, if the server has not taken it yet.
fn report(client: &Client, rec: &mut Record, d: &Daemon) -> Result<(), String> {
    let Some(a) = rec.action.as_mut() else {
        return Ok(());
    };
    if a.phase != Phase::Finished || a.reported {
        return Ok(());
    }
    let finished = if a.success == Some(true) {
        Finished::Success
    } else {
        Finished::Failure
    };
    let url = client.url(&format!("deploymentBase/{}/feedback", a.id));
    let body = ddi::feedback(Execution::Closed, finished, None, &a.details);
    match client.try_call("POST", &url, Some(&body)) {
        Ok(_) => {}
        // The action is gone on the server (deleted, closed): nothing to wait for.
        Err(e) if refused(&e) => log::warn!(
            "fleet: the server refused the report of action {}: {e}",
            a.id
        ),
        Err(e) => return Err(e.to_string()),
    }
    a.reported = true;
    log::info!("fleet: action {} reported: {}", a.id, finished.as_str());
    save(d, rec);
    Ok(())
}

/// A `proceeding` (or other) feedback that may be lost: logged, never fatal.
fn tell(
    client: &Client,
    id: &str,
    exec: Execution,
    progress: Option<(u32, u32)>,
    details: &[String],
) {
    let body = ddi::feedback(exec, Finished::None, progress, details);
    if let Err(e) = client.feedback(id, &body) {
        log::warn!("fleet: feedback {} for action {id}: {e}", exec.as_str());
    }
}

/// The attributes the server sees (configData).
fn attributes(d: &Daemon, cfg: &Fleet, rec: &Record) -> BTreeMap<String, String> {
    let mut a = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        a.insert(k.to_string(), v);
    };
    put("hw_boardname", cfg.board.clone());
    put("hw_revision", cfg.revision.clone());
    if let Some(v) = &rec.sw_version {
        put("sw_version", v.clone());
    }
    put("berth_version", env!("CARGO_PKG_VERSION").to_string());
    put("arch", std::env::consts::ARCH.to_string());
    if let Ok(k) = std::fs::read_to_string(d.roots.proc.join("sys/kernel/osrelease")) {
        put("kernel", k.trim().to_string());
    }
    put(
        "cgroup",
        match crate::daemon::device::cgroups::cgroup_version(d) {
            Some(berth_core::cgroup::CgroupVersion::V1) => "v1",
            Some(berth_core::cgroup::CgroupVersion::V2) => "v2",
            None => "none",
        }
        .to_string(),
    );
    // The newest serial accepted (a small file): verifying the cached index at every poll
    // would cost a signature check and the index's size in memory.
    if let Some(serial) = repo::read_serial_floor(&d.cfg) {
        put("repository_serial", serial.to_string());
    }
    put(
        "safe_mode",
        d.safe_mode().unwrap_or_else(|| "off".to_string()),
    );
    let st = state::state(d);
    for p in st.packages.values() {
        put(&format!("package.{}", p.name), p.version.to_string());
    }
    // The line's metered switch and the containers at their data caps: states that change
    // seldom (a count that grows would send configData at every poll).
    #[cfg(feature = "shape")]
    {
        use crate::daemon::prepare::datacap;
        put(
            "metered",
            if datacap::metered(d) { "on" } else { "off" }.into(),
        );
        let over: Vec<&str> = st
            .packages
            .keys()
            .filter(|n| datacap::usage_of(d, n)["over"] == true)
            .map(String::as_str)
            .collect();
        // hawkBit keeps 128 characters of a value: more names are a number.
        match over.join(",") {
            v if v.is_empty() => {}
            v if v.len() <= 128 => put("data_cap_reached", v),
            _ => put("data_cap_reached", format!("{} containers", over.len())),
        }
    }
    a
}

/// `cancelAction`: an action not yet applying is dropped (`closed` + `success`); one being
/// or already applied cannot be taken back (`rejected`).
fn cancel(d: &Daemon, client: &Client, rec: &mut Record, href: &str) -> Result<(), String> {
    let body = client.call("GET", href, None)?;
    let (cancel_id, stop) = ddi::parse_cancel(&body).map_err(|e| e.to_string())?;
    let url = client.url(&format!("cancelAction/{cancel_id}/feedback"));
    let ours = rec.action.as_ref().filter(|a| a.id == stop);
    let (exec, finished, why) = match ours.map(|a| a.phase) {
        Some(Phase::Applying) | Some(Phase::Finished) => (
            Execution::Rejected,
            Finished::Success,
            format!("action {stop} is already applied or being applied: it cannot be cancelled"),
        ),
        _ => (
            Execution::Closed,
            Finished::Success,
            format!("action {stop} cancelled before it was applied; nothing changed"),
        ),
    };
    if exec == Execution::Closed {
        if rec.action.as_ref().is_some_and(|a| a.id == stop) {
            rec.action = None;
            let _ = std::fs::remove_file(bundle_path(d));
            save(d, rec);
        }
        log::info!("fleet: {why}");
    } else {
        log::warn!("fleet: {why}");
    }
    let body = ddi::feedback(exec, finished, None, &[why]);
    client.call("POST", &url, Some(&body)).map(|_| ())
}

/// Which installed packages hold update locks (their names and how long), if any.
fn locks(d: &Daemon) -> Option<String> {
    // Names only: the reason is said once, not again each second a lock runs down.
    let held: Vec<String> = state::state(d)
        .packages
        .values()
        .filter(|p| crate::daemon::runtime::sockets::locked_until(d, p.name.as_str()).is_some())
        .map(|p| format!("{} holds an update lock", p.name))
        .collect();
    (!held.is_empty()).then(|| held.join("; "))
}

/// The action for a deployment newly offered, in place of `old`: downloaded already when
/// `old` staged a bundle of the same artifact (download-only), else from the start.
fn offered(d: &Daemon, dep: &Deployment, old: Option<&Action>) -> Action {
    let mut fresh = Action::new(&dep.id, dep.version.clone());
    let staged = old.and_then(|o| o.bundle_sha256.clone()).filter(|h| {
        ddi::bundle_artifact(dep).is_ok_and(|a| a.sha256.as_ref() == Some(h))
            && bundle::held(&bundle_path(d)).is_some()
    });
    if let Some(old) = old {
        if old.phase != Phase::Finished && staged.is_none() {
            log::warn!(
                "fleet: action {} replaced by {} before it finished",
                old.id,
                dep.id
            );
        }
    }
    log::info!(
        "fleet: action {} offered (version {})",
        dep.id,
        dep.version.as_deref().unwrap_or("?")
    );
    if staged.is_some() {
        fresh.phase = Phase::Downloaded;
        fresh.bundle_sha256 = staged;
    } else {
        let _ = std::fs::remove_file(bundle_path(d));
    }
    fresh
}

fn deploy(
    d: &Arc<Daemon>,
    client: &Client,
    rec: &mut Record,
    dep: &Deployment,
) -> Result<(), String> {
    let same = rec.action.as_ref().is_some_and(|a| a.id == dep.id);
    let mut changed = false;
    match rec.action.as_ref() {
        // Failed, reported, and offered again: the operator asks for another try (gooseBit's
        // force_update offers the same action again), a few times, not at every poll.
        Some(a) if same && a.phase == Phase::Finished && a.reported && a.success != Some(true) => {
            if a.retries >= MAX_RETRIES {
                return Ok(());
            }
            let retries = a.retries + 1;
            log::info!(
                "fleet: action {} offered again after its failure: trying again ({retries} of {MAX_RETRIES})",
                dep.id
            );
            let mut fresh = Action::new(&dep.id, dep.version.clone());
            fresh.retries = retries;
            rec.action = Some(fresh);
            let _ = std::fs::remove_file(bundle_path(d));
            changed = true;
        }
        // Done and offered again: the server did not take the report; it is sent again.
        Some(a) if same && a.phase == Phase::Finished => {
            if a.reported {
                log::warn!("fleet: action {} offered again after its success was reported: reporting it again", dep.id);
                rec.action.as_mut().unwrap().reported = false;
            }
            return report(client, rec, d);
        }
        Some(_) if same => {}
        old => {
            rec.action = Some(offered(d, dep, old));
            changed = true;
        }
    }
    let id = dep.id.clone();
    // A restart while applying: once more (as the action says: window, locks), or failed.
    if rec
        .action
        .as_ref()
        .is_some_and(|a| a.phase == Phase::Applying)
    {
        let a = rec.action.as_mut().unwrap();
        if a.attempts >= MAX_ATTEMPTS {
            let why = format!(
                "the device restarted while applying this action {} times; the installed set is what the upgrade's recovery kept",
                a.attempts
            );
            return finish(d, client, rec, false, vec![why]);
        }
        tell(
            client,
            &id,
            Execution::Resumed,
            None,
            &[format!(
                "the device restarted while applying (attempt {}): any upgrade on trial was rolled back at start; applying again",
                a.attempts
            )],
        );
        a.phase = if bundle::held(&bundle_path(d)).is_some() {
            Phase::Downloaded
        } else {
            Phase::Downloading
        };
        changed = true;
    }
    if changed {
        save(d, rec);
    }
    for _ in 0..2 {
        let a = rec.action.as_ref().unwrap();
        if a.phase == Phase::Finished {
            return Ok(());
        }
        let downloaded = a.phase == Phase::Downloaded && bundle::held(&bundle_path(d)).is_some();
        let now = berth_sys::process::mono_s();
        let boot = crate::daemon::ops::schedules::boot_id(d);
        let locked = locks(d);
        // (a count from an earlier boot, or from a berth that counted on the wall clock, is
        // not this boot's: it starts again)
        let since = a
            .deferred_since
            .filter(|t| *t <= now && a.deferred_boot.as_deref() == Some(boot));
        let deferred_ms = since.map_or(0, |t| (now - t) * 1000);
        let max_defer = d.cfg.api.max_update_lock_s * 1000;
        match ddi::step(dep, downloaded, locked.as_deref(), deferred_ms, max_defer) {
            Step::Wait(why) => {
                let a = rec.action.as_mut().unwrap();
                // The policy's bound counts from the first wait for a lock, not for the
                // window or the download.
                let for_lock = downloaded
                    && locked.is_some()
                    && dep.window != Some(false)
                    && dep.update == ddi::Handling::Attempt;
                if for_lock && since.is_none() {
                    a.deferred_since = Some(now);
                    a.deferred_boot = Some(boot.to_string());
                    changed = true;
                }
                // Said once, and written once, however many polls the wait lasts.
                if a.said.as_deref() != Some(why.as_str()) {
                    log::info!("fleet: action {id}: {why}");
                    tell(
                        client,
                        &id,
                        Execution::Scheduled,
                        None,
                        std::slice::from_ref(&why),
                    );
                    rec.action.as_mut().unwrap().said = Some(why);
                    changed = true;
                }
                if changed {
                    save(d, rec);
                }
                return Ok(());
            }
            Step::Download => {
                download(d, client, rec, dep)?;
                continue;
            }
            Step::Downloaded => {
                if !rec.action.as_ref().unwrap().downloaded_said {
                    let body = ddi::feedback(
                        Execution::Downloaded,
                        Finished::None,
                        None,
                        &["downloaded; the server asks for no update now".into()],
                    );
                    client.feedback(&id, &body)?;
                    rec.action.as_mut().unwrap().downloaded_said = true;
                    save(d, rec);
                }
                return Ok(());
            }
            Step::Apply { force } => return apply(d, client, rec, force),
        }
    }
    Ok(())
}

/// Downloads the bundle (resuming a part held for this action).
fn download(d: &Daemon, client: &Client, rec: &mut Record, dep: &Deployment) -> Result<(), String> {
    let id = dep.id.clone();
    let art = match ddi::bundle_artifact(dep) {
        Ok(a) => a,
        Err(e) => return finish(d, client, rec, false, vec![e.to_string()]),
    };
    // Over TLS, hawkBit's https:// link (it gives a plain one too, which would carry no token
    // and no privacy).
    let href = match (client.tls, &art.secure_href) {
        (Some(_), Some(secure)) => secure,
        _ => &art.href,
    };
    // http:// or https:// only (a file:// link would have the daemon read its own files);
    // the token goes to the server's own origin only.
    let Some(origin) = fetch::origin(href) else {
        let why = format!("the artifact's link {href:?} is not an http:// or https:// URL");
        return finish(d, client, rec, false, vec![why]);
    };
    if origin.0 && client.tls.is_none() {
        let why = format!(
            "the artifact's link {href:?} is https:// but the server is plain http:// (no TLS options to reach it)"
        );
        return finish(d, client, rec, false, vec![why]);
    }
    let auth = client
        .auth
        .as_deref()
        .filter(|_| fetch::origin(&client.base) == Some(origin));
    if art.size.is_some_and(|s| s > BUNDLE_LIMIT) {
        let why = format!(
            "{}: {} bytes, more than the {BUNDLE_LIMIT} bytes a bundle may have",
            art.filename,
            art.size.unwrap_or(0)
        );
        return finish(d, client, rec, false, vec![why]);
    }
    let path = bundle_path(d);
    let mut f = std::fs::File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| format!("open {}: {e}", path.display()))?;
    let limit = art.size.unwrap_or(BUNDLE_LIMIT);
    let held = f.metadata().map(|m| m.len()).unwrap_or(0);
    let held = if held > limit {
        let _ = f.set_len(0);
        0
    } else {
        held
    };
    // Admission, as for an install: what the bundle still needs, and berth's own reserve.
    if let Some(why) = art
        .size
        .and_then(|s| no_room(d, &art.filename, s - held, &path))
    {
        drop(f);
        let _ = std::fs::remove_file(&path);
        return finish(d, client, rec, false, vec![why]);
    }
    tell(
        client,
        &id,
        Execution::Proceeding,
        Some((1, 3)),
        &[format!(
            "downloading {} ({} bytes{})",
            art.filename,
            art.size.map_or("?".into(), |s| s.to_string()),
            if held > 0 {
                format!(", resuming after {held}")
            } else {
                String::new()
            }
        )],
    );
    let mut last = 0u64;
    let mut progress = |p: fetch::Progress| {
        // A quarter at a time, never more often.
        if let Some(t) = p.total.filter(|t| *t > 0) {
            let q = p.done * 4 / t;
            if q > last && q < 4 {
                last = q;
                tell(
                    client,
                    &id,
                    Execution::Proceeding,
                    Some((1, 3)),
                    &[format!("downloaded {} of {t} bytes", p.done)],
                );
            }
        }
    };
    let call = client.request("GET", auth, None);
    let got = client.http.fetch_resume_call(
        href,
        call,
        &mut f,
        held,
        limit.saturating_add(u64::from(art.size.is_some())),
        &mut progress,
    );
    hooks::point("fleet.downloaded");
    let (size, sha, _) = match got {
        Ok(g) => g,
        // No room, no such artifact, one larger than announced: no later poll does better.
        Err(e)
            if e.is_no_space()
                || refused(&e)
                || matches!(e, fetch::FetchError::TooLarge { .. }) =>
        {
            let _ = std::fs::remove_file(&path);
            let who = if e.is_no_space() {
                format!(" ({})", crate::daemon::device::disk::holders(&d.cfg.paths))
            } else {
                String::new()
            };
            return finish(d, client, rec, false, vec![format!("download: {e}{who}")]);
        }
        // Kept: the next poll resumes it.
        Err(e) => return Err(format!("download of {}: {e}", art.filename)),
    };
    if art.size.is_some_and(|s| s != size) || art.sha256.as_ref().is_some_and(|h| *h != sha) {
        let _ = std::fs::remove_file(&path);
        return finish(
            d,
            client,
            rec,
            false,
            vec![format!(
                "{}: {size} bytes with sha256 {sha}; the server announced {:?} bytes, sha256 {:?}",
                art.filename, art.size, art.sha256
            )],
        );
    }
    let _ = berth_sys::fsutil::sync(&f);
    let a = rec.action.as_mut().unwrap();
    a.phase = Phase::Downloaded;
    a.bundle_sha256 = Some(sha);
    save(d, rec);
    log::info!("fleet: action {id}: bundle downloaded ({size} bytes)");
    Ok(())
}

/// Why a bundle needing `need` more bytes at `path` cannot be downloaded now: it and
/// `[upgrade] reserve` must fit in what the file system has free ("space required X,
/// available Y", and who fills it); None when it fits (or the free space cannot be told).
fn no_room(d: &Daemon, file: &str, need: u64, path: &std::path::Path) -> Option<String> {
    let refused = crate::daemon::device::disk::no_room(
        &d.cfg.paths,
        file,
        need,
        d.cfg.upgrade.reserve,
        path.parent()?,
    );
    Some(format!(
        "download: {}; nothing was downloaded",
        refused.ok()??
    ))
}

fn apply(d: &Arc<Daemon>, client: &Client, rec: &mut Record, force: bool) -> Result<(), String> {
    let a = rec.action.as_mut().unwrap();
    let id = a.id.clone();
    a.phase = Phase::Applying;
    a.attempts += 1;
    save(d, rec);
    hooks::point("fleet.applying");
    tell(
        client,
        &id,
        Execution::Proceeding,
        Some((2, 3)),
        &["applying the bundle".into()],
    );
    let mut emit = |e: Value| {
        let line = match e[up::EVENT].as_str() {
            Some("switched") => format!(
                "{}: switched {} -> {}",
                e[up::NAME].as_str().unwrap_or("?"),
                e[up::FROM],
                e[up::TO]
            ),
            Some("rollback") => format!(
                "{}: rolling back: {}",
                e[up::NAME].as_str().unwrap_or("?"),
                e[up::REASON].as_str().unwrap_or("?")
            ),
            _ => return,
        };
        tell(client, &id, Execution::Proceeding, Some((3, 3)), &[line]);
    };
    let outcome = bundle::apply(d, &bundle_path(d), force, &mut emit);
    let (success, details) = match outcome {
        Ok(applied) => {
            let r = &applied.result;
            let list = |k: &str| r[k].as_array().cloned().unwrap_or_default();
            let (ok, back, held) = (list(up::UPGRADED), list(up::ROLLED_BACK), list(up::HELD));
            // A lock taken while this `attempt` applied: the rest went on, the locked ones
            // wait as a lock before the apply would have made them (the bundle is kept).
            if !held.is_empty() && back.is_empty() && !force {
                let a = rec.action.as_mut().unwrap();
                a.phase = Phase::Downloaded;
                a.said = None;
                save(d, rec);
                log::info!("fleet: action {id}: a package took an update lock during the apply; waiting for it");
                return Ok(());
            }
            let mut details = vec![format!(
                "bundle {} (repository serial {}): {} installed, {} upgraded, {} rolled back, {} held",
                applied.descriptor.version,
                applied.descriptor.serial,
                applied.installed.len(),
                ok.len(),
                back.len(),
                held.len()
            )];
            for u in &ok {
                details.push(format!(
                    "{} {} -> {}",
                    u[up::NAME].as_str().unwrap_or("?"),
                    u[up::FROM].as_str().unwrap_or("?"),
                    u[up::TO].as_str().unwrap_or("?")
                ));
            }
            for b in &back {
                let n = b[up::NAME].as_str().unwrap_or("?");
                details.push(format!(
                    "{n} {} rolled back to {}: {}; {}",
                    b[up::TO].as_str().unwrap_or("?"),
                    b[up::FROM].as_str().unwrap_or("?"),
                    b[up::REASON].as_str().unwrap_or("?"),
                    crash_archive(d, n),
                ));
            }
            for h in &held {
                details.push(format!(
                    "{} held by its update lock",
                    h[up::NAME].as_str().unwrap_or("?")
                ));
            }
            let success = back.is_empty() && held.is_empty();
            if success {
                rec.sw_version = Some(applied.descriptor.version.clone());
            }
            (success, details)
        }
        Err(e) => (false, vec![format!("{} ({})", e.message, e.kind.code())]),
    };
    let _ = std::fs::remove_file(bundle_path(d));
    finish(d, client, rec, success, details)
}

/// Where the crash archive of a rolled-back upgrade is: the newest of the container's, once
/// the report thread has written it (it is collected as the rollback begins).
fn crash_archive(d: &Daemon, name: &str) -> String {
    use berth_core::api::report as rf;
    let newest = || {
        crate::daemon::ops::reports::list(d, Some(name))
            .ok()
            .and_then(|v| {
                v[rf::REPORTS]
                    .as_array()?
                    .iter()
                    .filter_map(|r| r[rf::ID].as_str().map(String::from))
                    .filter(|id| id.ends_with("-upgrade"))
                    .max()
            })
    };
    for _ in 0..20 {
        if let Some(id) = newest() {
            return format!("crash archive {id} (berth report show {id})");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    format!("crash archive: berth report list {name}")
}

/// The action is over: recorded first (the report may have to wait for the server).
fn finish(
    d: &Daemon,
    client: &Client,
    rec: &mut Record,
    success: bool,
    details: Vec<String>,
) -> Result<(), String> {
    let a = rec.action.as_mut().unwrap();
    a.phase = Phase::Finished;
    a.success = Some(success);
    if success {
        log::info!("fleet: action {}: success: {}", a.id, details.join("; "));
    } else {
        log::error!("fleet: action {}: failure: {}", a.id, details.join("; "));
    }
    a.details = details;
    a.reported = false;
    save(d, rec);
    hooks::point("fleet.finished");
    report(client, rec, d)
}

/// For `berth status`: the client's view, or null without `[fleet]`.
pub(crate) fn status(d: &Daemon) -> Value {
    let (Some(cfg), Some(s)) = (&d.cfg.fleet, SHARED.get()) else {
        return Value::Null;
    };
    let v = s.view.lock().unwrap().clone();
    json!({
        field::SERVER: cfg.server,
        field::TENANT: cfg.tenant,
        field::CONTROLLER_ID: v.controller_id,
        field::LAST_POLL: v.last_poll,
        field::NEXT_POLL: v.next_poll,
        field::POLLS: v.polls,
        field::LAST_ERROR: v.last_error,
        field::SW_VERSION: v.sw_version,
        field::ACTION: v.action.map(|a| json!({
            field::ID: a.id,
            field::VERSION: a.version,
            field::PHASE: a.phase,
            field::SUCCESS: a.success,
            field::REPORTED: a.reported,
            field::DETAILS: a.details,
        })),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::testing::fake_daemon;
    use crate::daemon::store::testrepo::{ok, serve, serve_at};

    const FLEET: &str = "[fleet]\nserver = \"http://127.0.0.1:9\"\ncontroller_id = \"dev1\"\nboard = \"gw\"\nrevision = \"2\"\n";

    fn daemon(tag: &str) -> (berth_testkit::TempDir, Arc<Daemon>) {
        let (dir, d, _) = fake_daemon(tag, FLEET);
        std::fs::create_dir_all(d.cfg.paths.state.join("fleet")).unwrap();
        (dir, Arc::new(d))
    }

    /// A bundle that does not fit with berth's reserve is refused before a byte is fetched,
    /// saying what it needs, what there is and who fills the partition.
    #[test]
    fn a_bundle_that_does_not_fit_is_refused_before_its_download() {
        let (_dir, d) = daemon("fleet-room");
        let path = bundle_path(&d);
        assert_eq!(no_room(&d, "b.bundle", 1 << 20, &path), None, "fits");
        let free = berth_sys::fsutil::free_bytes(path.parent().unwrap()).unwrap();
        let why = no_room(&d, "b.bundle", free, &path).expect("refused");
        assert!(
            why.starts_with("download: no room for b.bundle: space required ")
                && why.contains("(and 4.0 MiB (4194304 B) kept for berth's own state, [upgrade] reserve), available ")
                && (why.contains(" (the biggest: ") || why.contains(" (none of it in berth's"))
                && why.ends_with("nothing was downloaded"),
            "{why}"
        );
    }

    fn cfg(d: &Daemon) -> Fleet {
        d.cfg.fleet.clone().unwrap()
    }

    /// The device's client of a server at `url` (a test server's), with a token.
    fn client(url: &str) -> Client<'static> {
        Client {
            base: format!("{url}/DEFAULT/controller/v1/dev1"),
            auth: Some("TargetToken t0k".into()),
            tls: None,
            http: Fetcher {
                connect_timeout: Duration::from_secs(2),
                read_timeout: Duration::from_secs(5),
                min_total: Duration::from_secs(10),
            },
        }
    }

    fn status(code: &str) -> Vec<u8> {
        format!("HTTP/1.1 {code}\r\nContent-Length: 0\r\n\r\n").into_bytes()
    }

    /// A record whose attributes the server has already (so a poll sends none).
    fn sent(d: &Daemon) -> Record {
        let mut rec = Record::default();
        rec.attributes_sent = Some(ddi::config_data(&attributes(d, &cfg(d), &rec)));
        rec
    }

    /// The request's first line and its body (after the head).
    fn line_and_body(r: &str) -> (&str, &str) {
        let line = r.lines().next().unwrap_or("");
        (line, r.split_once("\r\n\r\n").map_or("", |(_, b)| b))
    }

    fn deployment(id: &str, update: &str, size: usize, sha256: &str, href: &str) -> Deployment {
        let body = format!(
            r#"{{"id":"{id}","deployment":{{"download":"forced","update":"{update}","chunks":[
              {{"part":"os","version":"7","name":"b","artifacts":[{{"filename":"b.swu",
              "hashes":{{"sha256":"{sha256}"}},"size":{size},"_links":{{"download-http":{{"href":"{href}"}}}}}}]}}]}}}}"#
        );
        ddi::parse_deployment(body.as_bytes()).unwrap()
    }

    /// A poll with nothing offered: the base resource, then the attributes when the server
    /// asks (with the board, the revision and the daemon's version), the server's polling
    /// time taken; the next poll sends them only if they changed.
    #[test]
    fn a_poll_sends_the_attributes_when_asked_or_changed() {
        let (_dir, d) = daemon("fleet-poll");
        let base = br#"{"config":{"polling":{"sleep":"00:00:10"}},"_links":{
            "configData":{"href":"http://127.0.0.1:9/DEFAULT/controller/v1/dev1/configData"}}}"#;
        let (url, server) = serve(vec![ok(base, None), ok(b"", None)]);
        let (mut rec, mut sleep_ms) = (Record::default(), 1000);
        poll(&d, &cfg(&d), &client(&url), &mut rec, &mut sleep_ms).unwrap();
        let got = server.join().unwrap();
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got[0].starts_with("GET /DEFAULT/controller/v1/dev1 HTTP/1.1"),
            "{}",
            got[0]
        );
        assert!(
            got[0].contains("Authorization: TargetToken t0k"),
            "{}",
            got[0]
        );
        let (line, body) = line_and_body(&got[1]);
        assert_eq!(line, "PUT /DEFAULT/controller/v1/dev1/configData HTTP/1.1");
        let sent: Value = serde_json::from_str(body).unwrap();
        assert_eq!(sent["data"]["hw_boardname"], "gw", "{body}");
        assert_eq!(sent["data"]["hw_revision"], "2", "{body}");
        assert_eq!(sent["data"]["berth_version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(sleep_ms, 10_000);
        // Kept on flash: a restarted daemon does not send them again.
        assert_eq!(load(&d).attributes_sent.as_deref(), Some(body));
        // Not asked, unchanged: the base resource only. (A second answer is served, so that
        // a configData would reach it; the test's own request takes it afterwards.)
        let (url, server) = serve(vec![ok(br#"{"_links":{}}"#, None), ok(b"", None)]);
        poll(&d, &cfg(&d), &client(&url), &mut rec, &mut sleep_ms).unwrap();
        client(&url)
            .call("GET", &format!("{url}/after"), None)
            .unwrap();
        let got = server.join().unwrap();
        assert!(
            got[1].starts_with("GET /after "),
            "sent after the base resource: {}",
            got[1]
        );
    }

    /// A link the server gives to another origin (another port here) is not followed: the
    /// poll fails naming it, and nothing is sent there.
    #[test]
    fn a_link_off_the_server_is_not_followed() {
        let (_dir, d) = daemon("fleet-own");
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let elsewhere = format!(
            "http://{}/DEFAULT/controller/v1/dev1/deploymentBase/5",
            other.local_addr().unwrap()
        );
        let base = format!(r#"{{"_links":{{"deploymentBase":{{"href":"{elsewhere}"}}}}}}"#);
        let (url, server) = serve(vec![ok(base.as_bytes(), None)]);
        let mut rec = sent(&d);
        let e = poll(&d, &cfg(&d), &client(&url), &mut rec, &mut 1000).unwrap_err();
        assert!(
            e.contains(&elsewhere) && e.contains("is not on the server"),
            "{e}"
        );
        assert_eq!(server.join().unwrap().len(), 1);
        other.set_nonblocking(true).unwrap();
        assert!(
            other.accept().is_err(),
            "a request reached the other origin"
        );
        // The same origin, as the client's own links are.
        let c = client(&url);
        assert!(c.own(&c.url("deploymentBase/5")).is_ok());
        for href in [
            "file:///etc/shadow",
            "https://127.0.0.1/x",
            "http://127.0.0.2/x",
        ] {
            assert!(c.own(href).is_err(), "{href}");
        }
    }

    /// cancelAction: an action not yet applying is dropped with its partial bundle
    /// (`closed`); one being applied is not (`rejected`) and stays.
    #[test]
    fn a_cancel_drops_an_action_only_before_it_is_applied() {
        for (phase, execution, kept) in [
            (Phase::Downloading, "closed", false),
            (Phase::Applying, "rejected", true),
        ] {
            let (_dir, d) = daemon("fleet-cancel");
            let mut rec = sent(&d);
            let mut a = Action::new("7", Some("3".into()));
            a.phase = phase;
            rec.action = Some(a);
            save(&d, &rec);
            std::fs::write(bundle_path(&d), b"part").unwrap();
            let (url, server) = serve_at(|url| {
                let base = format!(
                    r#"{{"_links":{{"cancelAction":{{"href":"{url}/DEFAULT/controller/v1/dev1/cancelAction/8"}}}}}}"#
                );
                let cancel = br#"{"id":"8","cancelAction":{"stopId":"7"}}"#;
                vec![ok(base.as_bytes(), None), ok(cancel, None), ok(b"", None)]
            });
            poll(&d, &cfg(&d), &client(&url), &mut rec, &mut 1000).unwrap();
            let got = server.join().unwrap();
            assert_eq!(got.len(), 3, "{got:?}");
            assert!(got[1].starts_with("GET /DEFAULT/controller/v1/dev1/cancelAction/8 "));
            let (line, body) = line_and_body(&got[2]);
            assert_eq!(
                line,
                "POST /DEFAULT/controller/v1/dev1/cancelAction/8/feedback HTTP/1.1"
            );
            let fb: Value = serde_json::from_str(body).unwrap();
            assert_eq!(fb["status"]["execution"], execution, "{body}");
            assert_eq!(rec.action.is_some(), kept, "{phase:?}");
            assert_eq!(
                bundle_path(&d).exists(),
                kept,
                "{phase:?}: the partial bundle"
            );
            assert_eq!(
                load(&d).action.is_some(),
                kept,
                "{phase:?}: the record on flash"
            );
        }
    }

    /// A finished action's report: sent until the server takes it; a 4xx (the action is gone
    /// on the server) ends the waiting, a 5xx is tried again at the next poll.
    #[test]
    fn a_report_is_sent_until_the_server_takes_or_refuses_it() {
        let (_dir, d) = daemon("fleet-report");
        let mut rec = sent(&d);
        let mut a = Action::new("4", None);
        a.phase = Phase::Finished;
        a.success = Some(false);
        a.details = vec!["it broke".into()];
        rec.action = Some(a);
        let (url, server) = serve(vec![status("503 Service Unavailable")]);
        let e = report(&client(&url), &mut rec, &d).unwrap_err();
        assert!(e.contains("503"), "{e}");
        assert!(!rec.action.as_ref().unwrap().reported);
        let got = server.join().unwrap();
        let (line, body) = line_and_body(&got[0]);
        assert_eq!(
            line,
            "POST /DEFAULT/controller/v1/dev1/deploymentBase/4/feedback HTTP/1.1"
        );
        let fb: Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            (
                &fb["status"]["execution"],
                &fb["status"]["result"]["finished"]
            ),
            (&json!("closed"), &json!("failure"))
        );
        assert_eq!(fb["status"]["details"], json!(["it broke"]));
        let (url, server) = serve(vec![status("404 Not Found")]);
        report(&client(&url), &mut rec, &d).unwrap();
        assert!(rec.action.as_ref().unwrap().reported);
        assert!(load(&d).action.unwrap().reported, "kept on flash");
        // Reported: nothing more is sent (no server answers here).
        report(&client("http://127.0.0.1:9"), &mut rec, &d).unwrap();
        assert_eq!(server.join().unwrap().len(), 1);
    }

    /// A bundle that is not what the server announced (its sha256) fails the action at once:
    /// the part is deleted, the failure recorded and reported with both hashes.
    #[test]
    fn a_bundle_unlike_its_announcement_fails_the_action() {
        let (_dir, d) = daemon("fleet-hash");
        let mut rec = sent(&d);
        let announced = berth_core::index::sha256_hex(b"the real bundle");
        let (url, server) = serve(vec![
            ok(b"", None),
            ok(b"a forged bundle", None),
            ok(b"", None),
        ]);
        let dep = deployment(
            "9",
            "forced",
            15,
            &announced,
            &format!("{url}/artifacts/b.swu"),
        );
        deploy(&d, &client(&url), &mut rec, &dep).unwrap();
        let got = server.join().unwrap();
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got[1].starts_with("GET /artifacts/b.swu "), "{}", got[1]);
        assert!(
            got[1].contains("Authorization: TargetToken t0k"),
            "the server's own origin"
        );
        let a = rec.action.as_ref().unwrap();
        assert_eq!(
            (a.phase, a.success, a.reported),
            (Phase::Finished, Some(false), true)
        );
        assert!(a.details[0].contains(&announced), "{:?}", a.details);
        assert!(!bundle_path(&d).exists());
        let (_, body) = line_and_body(&got[2]);
        assert!(
            body.contains("\"failure\"") && body.contains(&announced),
            "{body}"
        );
    }

    /// A download-only action (`update: skip`): the bundle fetched, checked and kept, and
    /// `downloaded` said once however many polls offer it again.
    #[test]
    fn a_download_only_action_is_staged_and_said_once() {
        let (_dir, d) = daemon("fleet-stage");
        let mut rec = sent(&d);
        let bundle = b"a staged bundle";
        let sha = berth_core::index::sha256_hex(bundle);
        let (url, server) = serve(vec![ok(b"", None), ok(bundle, None), ok(b"", None)]);
        let dep = deployment("5", "skip", bundle.len(), &sha, &format!("{url}/a/b.swu"));
        deploy(&d, &client(&url), &mut rec, &dep).unwrap();
        let got = server.join().unwrap();
        assert_eq!(got.len(), 3, "{got:?}");
        let (_, body) = line_and_body(&got[2]);
        assert!(body.contains("\"downloaded\""), "{body}");
        let a = rec.action.as_ref().unwrap();
        assert_eq!((a.phase, a.downloaded_said), (Phase::Downloaded, true));
        assert_eq!(a.bundle_sha256.as_deref(), Some(sha.as_str()));
        assert_eq!(std::fs::read(bundle_path(&d)).unwrap(), bundle);
        // Offered again: nothing to fetch, nothing to say (no server answers here).
        deploy(&d, &client("http://127.0.0.1:9"), &mut rec, &dep).unwrap();
        assert_eq!(rec.action.as_ref().unwrap().phase, Phase::Downloaded);
        // A new action for the same artifact takes the staged bundle as it is.
        let again = deployment("6", "skip", bundle.len(), &sha, &format!("{url}/a/b.swu"));
        let fresh = offered(&d, &again, rec.action.as_ref());
        assert_eq!((fresh.id.as_str(), fresh.phase), ("6", Phase::Downloaded));
        // Another artifact: the staged one is deleted and the new one starts afresh.
        let other = deployment(
            "7",
            "skip",
            3,
            &berth_core::index::sha256_hex(b"new"),
            "http://127.0.0.1:9/n",
        );
        assert_eq!(
            offered(&d, &other, rec.action.as_ref()).phase,
            Phase::Downloading
        );
        assert!(!bundle_path(&d).exists());
    }

    /// An action the daemon restarted in while applying it: applied once more, and failed
    /// (reported as such) when that happened twice.
    #[test]
    fn a_second_restart_while_applying_fails_the_action() {
        let (_dir, d) = daemon("fleet-restart");
        let mut rec = sent(&d);
        let mut a = Action::new("3", None);
        a.phase = Phase::Applying;
        a.attempts = MAX_ATTEMPTS;
        rec.action = Some(a);
        let dep = deployment("3", "forced", 1, &"0".repeat(64), "http://127.0.0.1:9/x");
        let (url, server) = serve(vec![ok(b"", None)]);
        deploy(&d, &client(&url), &mut rec, &dep).unwrap();
        let a = rec.action.as_ref().unwrap();
        assert_eq!(
            (a.phase, a.success, a.reported),
            (Phase::Finished, Some(false), true)
        );
        assert!(
            a.details[0].contains("restarted while applying"),
            "{:?}",
            a.details
        );
        let got = server.join().unwrap();
        let (_, body) = line_and_body(&got[0]);
        assert!(body.contains("\"failure\""), "{body}");
    }

    /// The token is read from its file at each poll and checked: a missing file or one that
    /// is not a token is an error naming the file.
    #[test]
    fn the_token_file_is_read_and_checked() {
        let (dir, d) = daemon("fleet-token");
        let mut f = cfg(&d);
        assert_eq!(auth(&f).unwrap(), None);
        let path = dir.path("token");
        f.token_file = Some(path.clone());
        let e = auth(&f).unwrap_err();
        assert!(e.starts_with(&path.display().to_string()), "{e}");
        for bad in ["", "two words", &"x".repeat(513)] {
            std::fs::write(&path, bad).unwrap();
            assert!(auth(&f).unwrap_err().contains("not a token"), "{bad:?}");
        }
        std::fs::write(&path, "s3cret\n").unwrap();
        assert_eq!(auth(&f).unwrap().as_deref(), Some("TargetToken s3cret"));
        f.gateway_token_file = f.token_file.take();
        assert_eq!(auth(&f).unwrap().as_deref(), Some("GatewayToken s3cret"));
    }

    /// The record on flash: written whole, and a damaged one is started afresh (logged).
    #[test]
    fn a_damaged_record_starts_afresh() {
        let (_dir, d) = daemon("fleet-record");
        assert!(load(&d).action.is_none(), "none yet");
        let rec = Record {
            sw_version: Some("12".into()),
            action: Some(Action::new("2", None)),
            ..Record::default()
        };
        save(&d, &rec);
        let back = load(&d);
        assert_eq!(back.sw_version.as_deref(), Some("12"));
        assert_eq!(back.action.unwrap().id, "2");
        std::fs::write(record_path(&d), b"{\"action\": 3").unwrap();
        let back = load(&d);
        assert!(back.sw_version.is_none() && back.action.is_none());
    }

    /// Which answers end the waiting for the server: 4xx but 408 and 429.
    #[test]
    fn which_refusals_are_final() {
        let st = |status| fetch::FetchError::Status {
            status,
            url: "http://h/x".into(),
            reason: String::new(),
            challenge: None,
        };
        for (status, final_) in [
            (400, true),
            (404, true),
            (409, true),
            (408, false),
            (429, false),
            (500, false),
            (503, false),
        ] {
            assert_eq!(refused(&st(status)), final_, "{status}");
        }
    }
}
