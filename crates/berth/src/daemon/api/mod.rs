//! The admin API (docs/openapi.yaml): a request becomes a typed action (`request`, pure), the
//! caller is authorised for it, and the module that owns the thing acts; the answer is JSON,
//! or a stream (install progress, followed logs). `server` is the socket's front door.

pub(crate) mod container;
pub(crate) mod request;
pub(crate) mod server;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use berth_core::api::ping;
use berth_core::http::{self, Request};
use serde_json::{json, Value};

use crate::command::Cmd;
use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::device::{governor, state};
use crate::daemon::ops::{reports, safe_mode, schedules};
use crate::daemon::prepare::{net, security};
use crate::daemon::runtime::control::{self, Intent, Who};
use crate::daemon::views::status;
use crate::daemon::{runtime, store};
use request::Action;

/// Who sent a request: the admin socket's peer, by its uid (checked again at accept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caller {
    pub uid: u32,
}

/// What a caller may ask. On the admin socket that depends on the caller alone: root may
/// ask for everything, anyone else for nothing (the per-container API of issue 16 decides
/// per action here).
pub(crate) fn authorise(caller: Caller, _action: &Action) -> Result<()> {
    if caller.uid == 0 {
        return Ok(());
    }
    Err(Error::new(
        Kind::Forbidden,
        format!("the admin socket is for root only (uid {})", caller.uid),
    ))
}

/// The second controller (STYLE.md, "Requests become actions"): in safe mode, the requests
/// of the commands that would mount an image or start a container (the command table marks
/// them: `Cmd::starts`) are refused before they are routed.
pub(crate) fn allowed(d: &Daemon, cmd: Option<&Cmd>) -> Result<()> {
    match cmd {
        Some(c) if c.starts => crate::daemon::device::boot::refuse_in_safe_mode(d, c.name),
        _ => Ok(()),
    }
}

/// A part of the admin API this build leaves out (a cargo feature of berth).
#[cfg(not(all(feature = "metrics", feature = "tr181")))]
fn not_built(feature: &str) -> Error {
    Error::new(
        Kind::NotFound,
        format!(
            "this berth is built without {feature} (cargo build -p berth --features {feature})"
        ),
    )
}

fn reply(stream: &mut UnixStream, r: Result<Value>) {
    let bytes = match r {
        Ok(v) => http::response(200, "application/json", v.to_string().as_bytes()),
        Err(e) => e.response(),
    };
    let _ = stream.write_all(&bytes);
}

/// How long a write to an admin client may wait for it to read: a client that stops reading
/// (a paused pager, a dead terminal) must not hold an install, and the op lock it holds,
/// for ever; past this its answer is dropped and the work goes on.
const WRITE_LIMIT: Duration = Duration::from_secs(30);

/// Serves one complete request on its own thread.
pub(crate) fn route(d: &Arc<Daemon>, caller: Caller, req: Request, mut stream: UnixStream) {
    let received = runtime::start::Stamps::now();
    let _ = stream.set_write_timeout(Some(WRITE_LIMIT));
    let action = match request::parse_routed(&req)
        .and_then(|(a, c)| authorise(caller, &a).map(|_| (a, c)))
        .and_then(|(a, c)| allowed(d, c).map(|_| a))
    {
        Ok(a) => a,
        Err(e) => return reply(&mut stream, Err(e)),
    };
    let answer = match action {
        Action::Install(names) => return install(d, &names, stream, None),
        Action::Upgrade { names, force } => return install(d, &names, stream, Some(force)),
        Action::Rollback(n) => store::upgrade::rollback(d, &n),
        Action::Logs { name, follow } => return logs(d, &name, follow, stream),
        Action::ReportExport(id) => return export(d, &id, stream),
        Action::Call { command, fields } => call(d, command, &fields),
        #[cfg(not(feature = "metrics"))]
        Action::Metrics => Err(not_built("metrics")),
        #[cfg(feature = "metrics")]
        Action::Metrics => {
            let text = crate::daemon::views::metrics::text(d);
            let _ = stream.write_all(&http::response(
                200,
                berth_core::metrics::CONTENT_TYPE,
                text.as_bytes(),
            ));
            return;
        }
        Action::Status(n) => status::status(d, n.as_deref()),
        #[cfg(feature = "tr181")]
        Action::Tr181 => crate::daemon::views::tr181::tr181(d),
        #[cfg(not(feature = "tr181"))]
        Action::Tr181 => Err(not_built("tr181")),
        Action::List => store::repo::list(d),
        Action::Update { reset_serial } => store::repo::update(d, reset_serial),
        Action::Remove { names, purge } => store::remove::remove(d, &names, purge),
        Action::Start { name, trace } => control::act(
            d,
            &name,
            Intent::Start,
            Who::Operator,
            trace.then_some(received),
        )
        .and_then(|v| runtime::start::settled(d, &name, v)),
        Action::Stop { name, timeout } => {
            control::act(d, &name, Intent::Stop { timeout }, Who::Operator, None)
        }
        Action::Restart(n) => control::act(d, &n, Intent::Restart, Who::Operator, None)
            .and_then(|v| runtime::start::settled(d, &n, v)),
        Action::Reset(n) => crate::daemon::supervisor::reset(d, &n),
        Action::Gc => store::remove::gc(d),
        Action::Limit { name, limits } => runtime::limit::limit(d, &name, &limits),
        Action::Stats(n) => runtime::limit::stats(d, n.as_deref()),
        Action::Inspect(n) => security::inspect_op(d, &n),
        Action::Net => net::status(d, &state::state(d)),
        #[cfg(feature = "shape")]
        Action::NetMetered(on) => net::set_metered(d, on),
        Action::NetHosts => Ok(net::hosts(d)),
        Action::Governor => Ok(governor::status(d)),
        Action::SafeModeEnter => safe_mode::enter(d),
        Action::SafeModeClear => safe_mode::clear(d),
        Action::Schedules(n) => schedules::list(d, &n),
        Action::ScheduleAdd { name, job } => schedules::add_job(d, &name, job),
        Action::ScheduleRemove { name, id } => schedules::delete(d, &name, &id),
        Action::Bind {
            package,
            container,
            at,
            persist,
        } => runtime::bind::bind(d, &package, &container, at, persist),
        Action::Unbind { package, container } => runtime::bind::unbind(d, &package, &container),
        #[cfg(feature = "test-hooks")]
        Action::TestStall { component, seconds } => test_stall(d, component, seconds),
        Action::Reports(n) => reports::list(d, n.as_deref()),
        Action::ReportShow(id) => reports::show(d, &id),
        Action::ReportRemove(id) => reports::remove(d, id.as_deref()),
    };
    reply(&mut stream, answer)
}

/// The commands the table reads (`crate::command::Parse::Fields`), by name: each one's
/// handler, given its checked fields.
fn call(
    _d: &Arc<Daemon>,
    command: &str,
    _fields: &serde_json::Map<String, Value>,
) -> Result<Value> {
    match command {
        "ping" => Ok(json!({ping::OK: true})),
        _ => Err(Error::internal(format!("{command}: no handler"))),
    }
}

/// The test hook: absent (404, as any unknown path) unless the daemon was built with the
/// `test-hooks` feature and started with BERTH_TEST_HOOKS=1, so that no production daemon can
/// be stalled through its API.
#[cfg(feature = "test-hooks")]
fn test_stall(
    d: &Daemon,
    component: crate::daemon::base::context::Component,
    seconds: u32,
) -> Result<Value> {
    use berth_core::api::request::{COMPONENT, SECONDS};
    if !crate::hooks::enabled() {
        return Err(Error::new(
            Kind::NotFound,
            "no such endpoint /v1/test/stall",
        ));
    }
    d.stall(component, seconds);
    Ok(json!({COMPONENT: component.name(), SECONDS: seconds}))
}

/// Streamed: progress events, then one result (or error) event, as JSON lines. `upgrade`:
/// an upgrade, forced past update locks or not.
fn install(d: &Arc<Daemon>, names: &[String], mut stream: UnixStream, upgrade: Option<bool>) {
    use berth_core::api::install::{CODE, ERROR, EVENT, RESULT, STATUS};
    if stream
        .write_all(&http::stream_head(200, "application/x-ndjson"))
        .is_err()
    {
        return;
    }
    let mut events = Events {
        stream: &mut stream,
        gone: false,
    };
    let mut emit = |v: Value| events.send(&v);
    let result = match upgrade {
        Some(force) => store::upgrade::upgrade(d, names, force, &mut emit),
        None => store::install::install(d, names, &mut emit),
    };
    let last = match result {
        Ok(v) => json!({EVENT: "done", RESULT: v}),
        Err(e) => json!({EVENT: "error", STATUS: e.status(), CODE: e.code(), ERROR: e.message}),
    };
    events.send(&last);
}

/// A stream of JSON lines to a client, dropped at its first failed write (a client gone, or
/// not reading within the write limit): one wait, not one per event.
struct Events<'a> {
    stream: &'a mut UnixStream,
    gone: bool,
}

impl Events<'_> {
    fn send(&mut self, v: &Value) {
        if !self.gone {
            self.gone = self.stream.write_all(format!("{v}\n").as_bytes()).is_err();
        }
    }
}

/// The archive's bytes with their length: the CLI writes the file itself, as the caller, and
/// can tell a whole copy from a cut one.
fn export(d: &Daemon, id: &str, mut stream: UnixStream) {
    let (mut f, content_type, len) = match reports::export(d, id) {
        Ok(x) => x,
        Err(e) => return reply(&mut stream, Err(e)),
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(head.as_bytes()).is_ok() {
        let _ = berth_sys::fsutil::copy_max(&mut f, &mut stream, len);
    }
}

/// The ring saved when the container stopped, or the live ring from its shim; with
/// `follow`, relayed until the container ends or the client goes away (a client that leaves
/// a quiet container must not leave this thread behind).
fn logs(d: &Daemon, name: &str, follow: bool, mut stream: UnixStream) {
    let shim = match runtime::logs::logs(d, name, follow) {
        Err(e) => return reply(&mut stream, Err(e)),
        Ok(runtime::logs::Logs::Saved(bytes)) => {
            let _ = stream.write_all(&http::response(200, "text/plain", &bytes));
            return;
        }
        Ok(runtime::logs::Logs::Live(shim)) => shim,
    };
    relay(shim, stream)
}

/// A followed log, from the shim to the client, until the container ends or the client goes
/// away (a client that leaves a quiet container must not leave this thread behind).
pub(crate) fn relay(mut shim: UnixStream, mut stream: UnixStream) {
    if stream
        .write_all(&http::stream_head(200, "text/plain"))
        .is_err()
    {
        return;
    }
    use berth_sys::process::{poll, POLLERR, POLLHUP, POLLIN};
    use std::os::fd::AsRawFd;
    let mut buf = [0u8; 8192];
    // The client is gone when its socket is closed (POLLHUP, reported unasked), not when it
    // only shut down its sending side, as socat and ncat do once their stdin ends.
    while let Ok(rev) = poll(&[(shim.as_raw_fd(), POLLIN), (stream.as_raw_fd(), 0)], -1) {
        if rev[1] & (POLLHUP | POLLERR) != 0 {
            break;
        }
        if rev[0] == 0 {
            continue;
        }
        match shim.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if stream.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that stops reading costs one write limit, then nothing: every later event
    /// is dropped at once and the work goes on.
    #[test]
    fn a_client_that_stops_reading_is_dropped_after_one_wait() {
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        ours.set_write_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut events = Events {
            stream: &mut ours,
            gone: false,
        };
        let line = serde_json::json!({"event": "progress", "bytes": "x".repeat(200)});
        let t0 = std::time::Instant::now();
        for _ in 0..100_000 {
            events.send(&line);
        }
        assert!(events.gone);
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        drop(theirs);
    }

    #[test]
    fn only_root_is_authorised_on_the_admin_socket() {
        let a = Action::Gc;
        assert!(authorise(Caller { uid: 0 }, &a).is_ok());
        let e = authorise(Caller { uid: 1000 }, &a).unwrap_err();
        assert_eq!(e.kind, Kind::Forbidden);
        assert_eq!(e.status(), 403);
    }

    #[test]
    fn safe_mode_refuses_what_would_mount_or_start_and_nothing_else() {
        use crate::daemon::base::context::{Resources, Roots};
        let cfg = berth_core::config::Config::parse("", "t").unwrap();
        let resources = Resources {
            cgroups: Err("none".into()),
            host: berth_core::cgroup::Host {
                cpus: 1,
                mem_total: 0,
            },
        };
        let d = Daemon::new(cfg, Roots::default(), resources, Default::default());
        use crate::command;
        let start = command::named("start");
        assert!(allowed(&d, start).is_ok());
        *d.boot.safe_mode.lock().unwrap() = Some("5 daemon starts".into());
        let refused = ["install", "upgrade", "rollback", "start", "restart", "bind"];
        for c in command::COMMANDS {
            let r = allowed(&d, Some(c));
            if !refused.contains(&c.name) {
                assert!(r.is_ok(), "{}", c.name);
                continue;
            }
            let e = r.unwrap_err();
            assert_eq!((e.kind, e.status()), (Kind::SafeMode, 409), "{}", c.name);
            assert!(
                e.message.contains("(5 daemon starts)")
                    && e.message.contains("berth safe-mode clear")
                    && e.message.contains(c.name),
                "{}",
                e.message
            );
        }
        // A test hook's route has no command: never refused here.
        assert!(allowed(&d, None).is_ok());
    }

    /// Every command the table reads (`Parse::Fields`) has its handler in `call`.
    #[test]
    fn every_command_read_by_the_table_has_a_handler() {
        use crate::command::{Parse, COMMANDS};
        let (_dir, d, _) = crate::daemon::base::testing::fake_daemon("api-call", "");
        let d = Arc::new(d);
        let generic = COMMANDS.iter().filter(|c| c.parse == Parse::Fields);
        for c in generic {
            if let Err(e) = call(&d, c.name, &Default::default()) {
                assert!(
                    !e.message.contains("no handler"),
                    "{}: {}",
                    c.name,
                    e.message
                );
            }
        }
        let e = call(&d, "nothing", &Default::default()).unwrap_err();
        assert!(e.message.contains("no handler"), "{}", e.message);
    }
}
