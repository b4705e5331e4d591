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
            json!(d.capi.locked_until(name, berth_sys::process::now_s(), run)),
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
