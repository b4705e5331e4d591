//! The container API's daemon side (docs/container-api.yaml, DESIGN.md decision 7): one
//! listening socket per container, in `<run>/api/NAME/`, which the container's LXC
//! configuration binds at `/run/berth`. The daemon knows the caller by the socket the
//! connection came on; the peer's cgroup must say the same container, so a process of
//! another container that got hold of the path is refused. What the request asks is then
//! checked against the manifest's `[permissions] api` and the device policy's `[api]`.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_core::api::{container as cfield, selfapi as field};
use berth_core::container_api::{self as capi, ApiPolicy, Op};
use berth_core::http;
use berth_core::state::Installed;
use berth_core::supervise::Event;
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;
use crate::daemon::base::endpoints::Endpoint;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::device::state;
use crate::daemon::ops::schedules;
use crate::daemon::prepare::net;
use crate::daemon::runtime;
use crate::daemon::views::status;

fn reply(stream: &mut UnixStream, status: u16, v: Value) {
    let _ = stream.write_all(&http::response(
        status,
        "application/json",
        v.to_string().as_bytes(),
    ));
}

fn reply_err(stream: &mut UnixStream, e: Error) {
    let _ = stream.write_all(&e.response());
}

/// Serves one request of `ep`'s container (parsed by the admission loop), on its own thread.
pub(crate) fn route(d: &Arc<Daemon>, ep: &Endpoint, op: Op, mut stream: UnixStream) {
    let name = ep.name.as_str();
    let p = match state::installed(d, name) {
        Ok(p) => p,
        Err(e) => return reply_err(&mut stream, e),
    };
    let asked = &p.manifest.permissions.api;
    let granted = d.cfg.api.granted(name, asked);
    if let Some((perm, why)) = ApiPolicy::refusal(&op, name, asked, &granted) {
        let mut body = Error::new(Kind::NotPermitted, why).to_json();
        body[field::PERMISSION] = json!(perm.name());
        return reply(&mut stream, 403, body);
    }
    let answer = match op {
        Op::Status => self_status(d, &p, &granted),
        Op::Stop => {
            // Before the answer: an end that comes at once (the payload exits as soon as
            // it has asked) is then already the wanted one, never a failure to restart.
            d.notify(name, Event::StopRequested);
            reply(
                &mut stream,
                202,
                json!({field::NAME: name, field::ACCEPTED: "stop"}),
            );
            answered(stream);
            log::info!("{name}: asked through its API to stop");
            let stop = runtime::control::Intent::Stop { timeout: None };
            let who = runtime::control::Who::Container;
            if let Err(e) = runtime::control::act(d, name, stop, who, None) {
                if e.kind != Kind::NotRunning {
                    log::warn!("{name}: its own stop failed: {e}");
                }
            }
            return;
        }
        Op::Restart => return restart_self(d, name, stream),
        Op::Schedules => schedules::list(d, name),
        Op::AddSchedule(body) => change(d, name).and_then(|_| schedules::add(d, name, &body)),
        Op::DeleteSchedule(id) => change(d, name).and_then(|_| schedules::delete(d, name, &id)),
        Op::LanHosts => Ok(net::hosts(d)),
        Op::Logs { tail, follow } => return logs(d, name, tail, follow, stream),
        Op::Ready => with_run(d, name, Event::Ready).map(|_| json!({cfield::READY: true})),
        Op::Health { ok, message } => health(d, name, ok, message),
        Op::KeepAlive => with_run(d, name, Event::KeepAlive).map(
            |_| json!({field::WATCHDOG_MS: p.manifest.health.as_ref().and_then(|h| h.watchdog_ms)}),
        ),
        Op::Lock { seconds } => {
            let s = seconds.unwrap_or(d.cfg.api.max_update_lock_s);
            current_run(d, name)
                .and_then(|run| runtime::sockets::lock(d, name, s, run))
                .map(|(until, new)| {
                    // At debug level only, and not renewals: a package may lock and unlock as
                    // often as its pace lets it (an upgrade refused names the lock anyway).
                    if new {
                        log::debug!("{name}: holds off its upgrades (update lock, until {until})");
                    }
                    json!({field::LOCKED_UNTIL: until})
                })
        }
        Op::Unlock => {
            if runtime::sockets::unlock(d, name) {
                log::debug!("{name}: released its update lock");
            }
            Ok(json!({field::LOCKED_UNTIL: null}))
        }
    };
    match answer {
        Ok(v) => reply(&mut stream, 200, v),
        Err(e) => reply_err(&mut stream, e),
    }
}

/// One of the container's schedule changes (each rewrites its schedule file on flash: a
/// package must not wear the flash out), or `429 rate_limited`.
fn change(d: &Daemon, name: &str) -> Result<()> {
    let now = d.started.elapsed().as_millis() as u64;
    d.capi.take_change(name, now).map_err(|ms| {
        Error::rate_limited(
            format_args!(
                "{name}: at most {} schedule changes at once, then one every {} s",
                crate::daemon::base::endpoints::CHANGES_BURST,
                crate::daemon::base::endpoints::CHANGE_EVERY_MS / 1000
            ),
            ms,
        )
    })
}

/// The current run of `name`: its init pid.
fn current_run(d: &Daemon, name: &str) -> Result<i32> {
    runtime::probe::running_init(d, name)
        .ok_or_else(|| Error::new(Kind::NotRunning, format!("{name} is not running")))
}

/// Tells the supervisor `ev` of the current run of `name`.
fn with_run(d: &Daemon, name: &str, ev: impl FnOnce(i32) -> Event) -> Result<i32> {
    let run = current_run(d, name)?;
    d.notify(name, ev(run));
    Ok(run)
}

/// The package's own verdict: counted as a health check of the run, shown by `status` as
/// its last check.
fn health(d: &Daemon, name: &str, ok: bool, message: Option<String>) -> Result<Value> {
    let line = format!(
        "reported {}{}",
        if ok { "healthy" } else { "unhealthy" },
        message
            .as_deref()
            .map(|m| format!(": {m}"))
            .unwrap_or_default()
    );
    if let Some(s) = d.supervision.lock().unwrap().get_mut(name) {
        s.last_check = Some((line, berth_sys::process::now_s()));
    }
    with_run(d, name, |run| Event::Reported(run, ok))?;
    Ok(json!({field::OK: ok, field::MESSAGE: message}))
}

/// `GET /v1/self`: the container's status entry, its usage and its permissions.
fn self_status(d: &Daemon, p: &Installed, granted: &[capi::Permission]) -> Result<Value> {
    let name = p.name.as_str();
    let mine = status::containers(
        d,
        &crate::daemon::device::state::state(d),
        Some(name),
        false,
    )?;
    let mut me = mine
        .first()
        .map(status::ContainerStatus::to_json)
        .unwrap_or_else(|| json!({}));
    let usage = runtime::limit::snapshot(d, name);
    if let Some(o) = me.as_object_mut() {
        o.insert(field::USAGE.into(), usage.unwrap_or(Value::Null));
        o.insert(field::ADDRESSES.into(), net::of(d, p));
        o.insert(
            field::PERMISSIONS.into(),
            json!({
                field::ASKED: p.manifest.permissions.api,
                field::GRANTED: granted.iter().map(|g| g.name()).collect::<Vec<_>>(),
            }),
        );
        // The run as the supervisor sees it: no question to the shim (see `status_of`).
        let run = o
            .get(berth_core::api::common::INIT_PID)
            .and_then(Value::as_i64)
            .map(|p| p as i32);
        o.insert(
            field::LOCKED_UNTIL.into(),
            json!(runtime::sockets::locked_until_run(d, name, run)),
        );
    }
    Ok(me)
}

/// The client has a moment to read its answer before its processes are told to end: until
/// it closes the connection, at most a second.
fn answered(mut stream: UnixStream) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = std::io::Read::read(&mut stream, &mut [0u8; 64]);
}

/// `POST /v1/self/restart`, through the supervisor's policy: counted, and paced (docs/
/// supervision.md). Allowed, the supervisor is told before the answer (an end that comes at
/// once is then the wanted one), and once the package has read its answer the supervisor
/// ends the run and starts it again on its own threads: this worker holds nothing while the
/// restart happens. Paced, `429 rate_limited` says when it may ask again, and nothing is done.
fn restart_self(d: &Arc<Daemon>, name: &str, mut stream: UnixStream) {
    let run = match current_run(d, name).and_then(|run| self_restart_pace(d, name, run)) {
        Ok(run) => run,
        Err(e) => return reply_err(&mut stream, e),
    };
    d.notify(name, Event::RestartRequested(run));
    reply(
        &mut stream,
        202,
        json!({field::NAME: name, field::ACCEPTED: "restart"}),
    );
    answered(stream);
    // Paced, so the log cannot be flooded through it.
    log::info!("{name}: asked through its API to restart");
    d.notify(name, Event::RestartAnswered(run));
}

/// Whether run `run` of `name` may restart itself now: the supervisor's pace, as it
/// published it once it follows that run (a request right after a start may come before the
/// supervisor has heard of the start: waited for, a second at most).
fn self_restart_pace(d: &Daemon, name: &str, run: i32) -> Result<i32> {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let now = Instant::now();
        let seen = {
            let mut sup = d.supervision.lock().unwrap();
            let s = sup.get_mut(name);
            let seen = s
                .as_ref()
                .map(|s| (s.run, s.self_restart_at, s.state, s.record.self_restarts));
            // Allowed: taken at once, under the lock, so that a second request before the
            // supervisor has published its next pace is not allowed as well.
            if let (Some(s), Some((Some(r), Some(at), _, _))) = (s, seen) {
                if r == run && at <= now {
                    s.self_restart_at = None;
                    return Ok(run);
                }
            }
            seen
        };
        match seen {
            Some((Some(r), Some(at), _, n)) if r == run => {
                let ms = (at - now).as_millis() as u64 + 1;
                return Err(Error::rate_limited(
                    format_args!(
                        "{name}: restarted {n} times in a row at its own request, paced as its [restart] policy paces crash restarts"
                    ),
                    ms,
                ));
            }
            // Ending already (a restart on its way, a stop), or a start the supervisor has
            // not taken in within a second.
            Some((Some(r), None, ..)) if r == run => return Err(not_now()),
            _ if now >= deadline => return Err(not_now()),
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn not_now() -> Error {
    Error::new(
        Kind::Busy,
        "not restarted: the run is ending, or its start is not taken in yet; try again",
    )
}

/// Its own log: the last `tail` lines, then (`follow`) what comes until it ends or the
/// client goes.
fn logs(d: &Daemon, name: &str, tail: Option<u32>, follow: bool, mut stream: UnixStream) {
    let tail = tail.map(|t| t as usize);
    match runtime::logs::logs_tail(d, name, follow, tail) {
        Err(e) => reply_err(&mut stream, e),
        Ok(runtime::logs::Logs::Live(shim)) if follow => super::relay(shim, stream),
        Ok(logs) => {
            let bytes = match logs {
                runtime::logs::Logs::Saved(bytes) => bytes,
                runtime::logs::Logs::Live(shim) => {
                    let mut bytes = Vec::new();
                    let _ = std::io::Read::read_to_end(
                        &mut std::io::Read::take(&shim, 16 << 20),
                        &mut bytes,
                    );
                    bytes
                }
            };
            let bytes = match tail {
                Some(n) => capi::tail_lines(&bytes, n),
                None => &bytes,
            };
            let _ = stream.write_all(&http::response(200, "text/plain", bytes));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::unix::net::UnixListener;

    use berth_core::api::error as efield;
    use berth_testkit::TempDir;

    use super::*;
    use crate::daemon::base::testing::{fake_daemon, install};
    use crate::daemon::runtime::probe::tests::{info, lxc_config, supervised, FakeShim};

    /// `web`, asking for every permission but `stop`.
    const ASKS: &str = "[package]\nname = \"web\"\nversion = \"1.0\"\n[entrypoint]\nargv = [\"/bin/httpd\"]\n[permissions]\napi = [\"status\", \"restart\", \"schedule\", \"logs\", \"lan-hosts\", \"update-lock\"]\n";

    /// A daemon with `web` installed (`ASKS`) and its API endpoint (a socket in the temp dir).
    fn setup(tag: &str, extra: &str) -> (TempDir, Arc<Daemon>, Arc<Endpoint>) {
        let (dir, d, _m) = fake_daemon(tag, extra);
        install(&d, ASKS);
        let ep = endpoint(&d, &dir, "web");
        (dir, Arc::new(d), ep)
    }

    fn endpoint(d: &Daemon, dir: &TempDir, name: &str) -> Arc<Endpoint> {
        let l = UnixListener::bind(dir.path(&format!("{name}.sock"))).unwrap();
        Arc::new(Endpoint::new(name, l, d.cfg.api.burst, 0))
    }

    /// `web` runs with init 4242 (its shim answers, LXC has its configuration).
    fn running(d: &Daemon, log: &[u8]) -> FakeShim {
        lxc_config(d, "web");
        FakeShim::start(d, "web", info(4242), log)
    }

    /// An answer: its status, its content type, its body.
    struct Answer {
        status: u16,
        head: String,
        body: Vec<u8>,
    }

    impl Answer {
        fn json(&self) -> Value {
            serde_json::from_slice(&self.body)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
        }

        /// An error's code and message.
        fn error(&self) -> (String, String) {
            let v = self.json();
            (
                v[efield::CODE].as_str().unwrap().to_string(),
                v[efield::ERROR].as_str().unwrap().to_string(),
            )
        }
    }

    /// Serves `op` as the container's worker does and reads the whole answer as the
    /// container would (then closes, as a client that has read its answer does).
    fn ask(d: &Arc<Daemon>, ep: &Arc<Endpoint>, op: Op) -> Answer {
        let (mut client, server) = UnixStream::pair().unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let (d2, ep2) = (Arc::clone(d), Arc::clone(ep));
        let worker = std::thread::spawn(move || route(&d2, &ep2, op, server));
        let mut raw = Vec::new();
        client.read_to_end(&mut raw).unwrap();
        drop(client);
        worker.join().unwrap();
        let end = http::head_end(&raw).expect("a whole head");
        let head = String::from_utf8(raw[..end].to_vec()).unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        Answer {
            status,
            head,
            body: raw[end..].to_vec(),
        }
    }

    /// Everything the supervisor was told, without waiting.
    fn told(d: &Daemon) -> Vec<Event> {
        std::iter::from_fn(|| d.next_event(Some(Instant::now())))
            .map(|(n, e)| {
                assert_eq!(n, "web");
                e
            })
            .collect()
    }

    /// `GET /v1/self` of a container that is not running: its entry, no usage (no
    /// cgroups), its permissions asked and granted (the default policy's), no lock.
    #[test]
    fn self_status_of_a_container_that_is_not_running() {
        let (_dir, d, ep) = setup("capi-self", "");
        let a = ask(&d, &ep, Op::Status);
        assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
        assert!(a.head.contains("application/json"), "{}", a.head);
        let v = a.json();
        assert_eq!(v[field::NAME], "web");
        assert_eq!(v[field::USAGE], Value::Null);
        assert_eq!(v[field::LOCKED_UNTIL], Value::Null);
        assert_eq!(
            v[field::PERMISSIONS][field::ASKED],
            json!([
                "status",
                "restart",
                "schedule",
                "logs",
                "lan-hosts",
                "update-lock"
            ])
        );
        assert_eq!(
            v[field::PERMISSIONS][field::GRANTED],
            json!(["status", "restart", "schedule", "logs"])
        );
        assert!(v[berth_core::api::common::INIT_PID].is_null(), "{v}");
        assert!(told(&d).is_empty());
    }

    /// What the manifest does not ask for, and what the device policy does not grant, is
    /// refused with 403 naming the permission; nothing is done.
    #[test]
    fn permissions_not_asked_or_not_granted_are_refused() {
        let (_dir, d, ep) = setup("capi-refused", "");
        let a = ask(&d, &ep, Op::Stop);
        assert_eq!(a.status, 403);
        let v = a.json();
        assert_eq!(v[field::PERMISSION], "stop");
        assert_eq!(v[efield::CODE], "not_permitted");
        assert_eq!(
            v[efield::ERROR],
            "web: needs the api permission \"stop\", which its manifest does not ask for ([permissions] api)"
        );
        assert!(told(&d).is_empty(), "not even told of a stop");

        for (op, perm) in [
            (Op::Lock { seconds: Some(60) }, "update-lock"),
            (Op::Unlock, "update-lock"),
            (Op::LanHosts, "lan-hosts"),
        ] {
            let a = ask(&d, &ep, op);
            assert_eq!(a.status, 403);
            let v = a.json();
            assert_eq!(v[field::PERMISSION], perm);
            let (_, why) = a.error();
            assert!(
                why.starts_with(&format!(
                    "web: the device policy does not grant the api permission {perm:?}"
                )),
                "{why}"
            );
        }
    }

    /// A socket left for a package that is no longer installed answers 404.
    #[test]
    fn a_package_that_is_not_installed_gets_not_found() {
        let (dir, d, _ep) = setup("capi-ghost", "");
        let ghost = endpoint(&d, &dir, "ghost");
        let a = ask(&d, &ghost, Op::Status);
        assert_eq!(a.status, 404);
        let (code, why) = a.error();
        assert_eq!(code, "not_installed");
        assert!(why.contains("ghost"), "{why}");
    }

    /// Readiness, keep-alives and health reports need a running container: refused with
    /// `not_running` while it is not, nothing told; once it runs, told of its run.
    #[test]
    fn reports_need_a_running_container_and_are_told_of_its_run() {
        let (_dir, d, ep) = setup("capi-reports", "");
        let unhealthy = || Op::Health {
            ok: false,
            message: Some("db down".into()),
        };
        for op in [Op::Ready, Op::KeepAlive, unhealthy()] {
            let a = ask(&d, &ep, op);
            assert_eq!(a.status, 409);
            assert_eq!(
                a.error(),
                ("not_running".to_string(), "web is not running".to_string())
            );
        }
        assert!(told(&d).is_empty());

        let _shim = running(&d, b"");
        d.supervision.lock().unwrap().insert(
            "web".into(),
            supervised("running", None, Default::default()),
        );
        let a = ask(&d, &ep, Op::Ready);
        assert_eq!((a.status, a.json()), (200, json!({cfield::READY: true})));
        let a = ask(&d, &ep, Op::KeepAlive);
        assert_eq!(
            (a.status, a.json()),
            (200, json!({field::WATCHDOG_MS: null}))
        );
        let a = ask(&d, &ep, unhealthy());
        assert_eq!(
            (a.status, a.json()),
            (200, json!({field::OK: false, field::MESSAGE: "db down"}))
        );
        assert_eq!(
            told(&d),
            [
                Event::Ready(4242),
                Event::KeepAlive(4242),
                Event::Reported(4242, false)
            ]
        );
        let last = d.supervision.lock().unwrap()["web"].last_check.clone();
        assert_eq!(last.unwrap().0, "reported unhealthy: db down");
    }

    /// A restart the supervisor's pace allows is accepted (202) and told before and after
    /// the answer; asked again while that run ends, `busy`; paced, `429` with when.
    #[test]
    fn a_self_restart_is_paced_by_the_supervisor() {
        let (_dir, d, ep) = setup("capi-restart", "");
        let a = ask(&d, &ep, Op::Restart);
        assert_eq!(a.error().0, "not_running");

        let _shim = running(&d, b"");
        let mut s = supervised("running", None, Default::default());
        s.run = Some(4242);
        s.self_restart_at = Some(Instant::now());
        d.supervision.lock().unwrap().insert("web".into(), s);
        let a = ask(&d, &ep, Op::Restart);
        assert_eq!(a.status, 202);
        assert_eq!(
            a.json(),
            json!({field::NAME: "web", field::ACCEPTED: "restart"})
        );
        assert_eq!(
            told(&d),
            [Event::RestartRequested(4242), Event::RestartAnswered(4242)]
        );

        let a = ask(&d, &ep, Op::Restart);
        assert_eq!(a.status, 503);
        assert_eq!(a.error().1, not_now().message);
        assert!(told(&d).is_empty());

        {
            let mut sup = d.supervision.lock().unwrap();
            let s = sup.get_mut("web").unwrap();
            s.self_restart_at = Some(Instant::now() + Duration::from_secs(60));
            s.record.self_restarts = 3;
        }
        let a = ask(&d, &ep, Op::Restart);
        assert_eq!(a.status, 429);
        let v = a.json();
        assert!(
            v[efield::ERROR]
                .as_str()
                .unwrap()
                .starts_with("web: restarted 3 times in a row at its own request"),
            "{v}"
        );
        let ms = v[efield::RETRY_AFTER_MS].as_u64().unwrap();
        assert!((50_000..=60_001).contains(&ms), "{ms}");
        assert!(a.head.contains("Retry-After: 60\r\n"), "{}", a.head);
        assert!(told(&d).is_empty());
    }

    /// Schedule changes are paced: ten at once, then `429` (each rewrites a file on flash).
    #[test]
    fn schedule_changes_are_rate_limited() {
        let (_dir, d, ep) = setup("capi-schedules", "");
        let a = ask(&d, &ep, Op::Schedules);
        assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
        for _ in 0..crate::daemon::base::endpoints::CHANGES_BURST {
            let a = ask(&d, &ep, Op::DeleteSchedule("nightly".into()));
            assert_eq!(a.status, 404);
            assert!(a.error().1.contains("nightly"), "{}", a.error().1);
        }
        let a = ask(&d, &ep, Op::DeleteSchedule("nightly".into()));
        assert_eq!(a.status, 429);
        let (code, why) = a.error();
        assert_eq!(code, "rate_limited");
        assert!(
            why.starts_with("web: at most 10 schedule changes at once, then one every 6 s"),
            "{why}"
        );
        let a = ask(&d, &ep, Op::Schedules);
        assert_eq!(a.status, 200, "reading is not a change");
    }

    /// Its own log: the last lines from its shim, as text.
    #[test]
    fn logs_come_from_the_shim_cut_to_the_tail() {
        let (_dir, d, ep) = setup("capi-logs", "");
        let shim = running(&d, b"one\ntwo\nthree\n");
        let a = ask(
            &d,
            &ep,
            Op::Logs {
                tail: Some(2),
                follow: false,
            },
        );
        assert_eq!(a.status, 200);
        assert!(a.head.contains("text/plain"), "{}", a.head);
        assert_eq!(a.body, b"two\nthree\n");
        assert!(shim
            .asked()
            .iter()
            .any(|l| l.starts_with("tail") || l == "logs"));
    }

    /// With the policy granting it, a running container holds off its upgrades and lets go;
    /// not running, it cannot.
    #[test]
    fn an_update_lock_needs_the_grant_and_a_running_container() {
        let (_dir, d, ep) = setup("capi-lock", "[api]\ngrant = \"status update-lock\"\n");
        let a = ask(&d, &ep, Op::Lock { seconds: Some(100) });
        assert_eq!(a.error().0, "not_running");
        let _shim = running(&d, b"");
        let t0 = berth_sys::process::now_s();
        let a = ask(&d, &ep, Op::Lock { seconds: Some(100) });
        assert_eq!(a.status, 200);
        let until = a.json()[field::LOCKED_UNTIL].as_u64().unwrap();
        assert!((t0 + 100..=berth_sys::process::now_s() + 100).contains(&until));
        let held = runtime::sockets::locked_until_run(&d, "web", Some(4242));
        assert!(held.is_some_and(|u| u.abs_diff(until) <= 1), "{held:?}");
        let a = ask(&d, &ep, Op::Unlock);
        assert_eq!(
            (a.status, a.json()),
            (200, json!({field::LOCKED_UNTIL: null}))
        );
        assert_eq!(
            runtime::sockets::locked_until_run(&d, "web", Some(4242)),
            None
        );
    }

    /// A stop it may ask for is accepted (202), the supervisor told first; a container
    /// that is not running stays so.
    #[test]
    fn an_allowed_stop_is_accepted_and_told_first() {
        let (dir, d, _m) = fake_daemon("capi-stop", "");
        install(&d, &ASKS.replace("\"status\",", "\"status\", \"stop\","));
        let d = Arc::new(d);
        let ep = endpoint(&d, &dir, "web");
        let a = ask(&d, &ep, Op::Stop);
        assert_eq!(a.status, 202, "{}", String::from_utf8_lossy(&a.body));
        assert_eq!(
            a.json(),
            json!({field::NAME: "web", field::ACCEPTED: "stop"})
        );
        assert_eq!(told(&d).first(), Some(&Event::StopRequested));
        assert!(!runtime::probe::is_running(&d, "web"));
    }
}
