//! Admin requests as typed actions: a pure parse of method, path, query and body, with the
//! manifest's syntax and ranges for limits. Nothing here touches the daemon.

use berth_core::api::request as field;
use berth_core::cgroup::Overrides;
use berth_core::http::Request;
use berth_core::manifest::{parse_percent, parse_size};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::command::{self, Cmd, FieldKind, Miss, Parse};

#[cfg(feature = "test-hooks")]
use crate::daemon::base::context::Component;
use crate::daemon::base::error::{Error, Kind, Result};

#[derive(Debug, PartialEq)]
pub enum Action {
    /// A command the table reads ([`Parse::Fields`]): its name and its checked fields.
    Call {
        command: &'static str,
        fields: Map<String, Value>,
    },
    /// `GET /metrics`: Prometheus's text format, not JSON.
    Metrics,
    /// `GET /v1/tr181`: `Device.SoftwareModules.` as TR-181 parameters.
    Tr181,
    Status(Option<String>),
    List,
    Update {
        reset_serial: bool,
    },
    Install(Vec<String>),
    Remove {
        names: Vec<String>,
        purge: bool,
    },
    Start {
        name: String,
        trace: bool,
    },
    Stop {
        name: String,
        timeout: Option<u32>,
    },
    Restart(String),
    /// `berth upgrade [--force] [NAME…]`: none is every package installed by name; `force`
    /// goes past the packages' update locks.
    Upgrade {
        names: Vec<String>,
        force: bool,
    },
    Rollback(String),
    /// `berth reset`: out of `failed`, restart counts back to 0.
    Reset(String),
    Logs {
        name: String,
        follow: bool,
    },
    Gc,
    Limit {
        name: String,
        limits: Overrides,
    },
    Stats(Option<String>),
    Inspect(String),
    Net,
    NetHosts,
    /// `POST /v1/net/metered`: the line's metered switch.
    #[cfg(feature = "shape")]
    NetMetered(bool),
    Governor,
    Reports(Option<String>),
    ReportShow(String),
    ReportExport(String),
    /// One report, or all (None).
    ReportRemove(Option<String>),
    SafeModeEnter,
    SafeModeClear,
    /// `GET /v1/containers/NAME/schedules`.
    Schedules(String),
    /// `POST /v1/containers/NAME/schedules`: a checked job.
    ScheduleAdd {
        name: String,
        job: berth_core::schedule::NewJob,
    },
    /// `DELETE /v1/containers/NAME/schedules/ID`.
    ScheduleRemove {
        name: String,
        id: String,
    },
    /// `berth bind PACKAGE --into CONTAINER [--at PATH] [--persist]`.
    Bind {
        package: String,
        container: String,
        at: Option<String>,
        persist: bool,
    },
    /// `berth unbind PACKAGE --from CONTAINER`.
    Unbind {
        package: String,
        container: String,
    },
    /// Test hooks only (a build with the `test-hooks` feature, honoured when the daemon runs
    /// with BERTH_TEST_HOOKS=1): the component sleeps `seconds` at its next heartbeat, as a
    /// hung loop would.
    #[cfg(feature = "test-hooks")]
    TestStall {
        component: Component,
        seconds: u32,
    },
}

/// Pure: a stall request `{"component": "api"|"supervisor", "seconds": N}` (N ≤ 600).
#[cfg(feature = "test-hooks")]
fn stall_request(req: &Request) -> Result<Action> {
    let v: Value = body(req)?;
    let bad = |m: String| Error::bad_request(format!("POST /v1/test/stall: {m}"));
    let obj = v
        .as_object()
        .ok_or_else(|| bad("expected a JSON object".into()))?;
    let (mut component, mut seconds) = (None, None);
    for (k, x) in obj {
        match (k.as_str(), x) {
            (field::COMPONENT, Value::String(s)) => {
                component = Some(Component::from_name(s).ok_or_else(|| {
                    bad(format!(
                        "component {s:?}: expected \"api\" or \"supervisor\""
                    ))
                })?)
            }
            (field::SECONDS, Value::Number(n)) => {
                seconds = Some(
                    n.as_u64()
                        .filter(|n| (1..=600).contains(n))
                        .ok_or_else(|| bad(format!("seconds: {n}: must be between 1 and 600")))?
                        as u32,
                )
            }
            (field::COMPONENT | field::SECONDS, _) => return Err(bad(format!("{k}: wrong type"))),
            _ => return Err(bad(format!("unknown field {k:?}"))),
        }
    }
    match (component, seconds) {
        (Some(component), Some(seconds)) => Ok(Action::TestStall { component, seconds }),
        _ => Err(bad("needs component and seconds".into())),
    }
}

/// Pure: a limit request `{"name", "cpu": "20%", "memory": "32M", "pids": N}`, with the
/// manifest's syntax and ranges. Read from a `Value` rather than a derived struct: the
/// derive costs the binary more than these few lines.
fn limit_request(req: &Request) -> Result<(String, Overrides)> {
    let v: Value = body(req)?;
    let bad = |m: String| Error::bad_request(format!("POST /v1/limit: {m}"));
    let obj = v
        .as_object()
        .ok_or_else(|| bad("expected a JSON object".into()))?;
    let mut name = None;
    let mut cpu_s = None;
    let mut mem_s = None;
    let mut pids = None;
    #[cfg(feature = "shape")]
    let (mut egress, mut ingress) = (None, None);
    // A rate, or "none": 0, which lifts the manifest's cap.
    #[cfg(feature = "shape")]
    let rate = |k: &str, s: &str| match s {
        "none" => Ok(0),
        _ => berth_core::shape::parse_rate(s).map_err(|e| bad(format!("{k}: {e}"))),
    };
    for (k, x) in obj {
        match (k.as_str(), x) {
            (field::NAME, Value::String(s)) => name = Some(s.as_str()),
            #[cfg(feature = "shape")]
            (field::EGRESS, Value::String(s)) => egress = Some(rate(k, s)?),
            #[cfg(feature = "shape")]
            (field::INGRESS, Value::String(s)) => ingress = Some(rate(k, s)?),
            #[cfg(feature = "shape")]
            (field::EGRESS | field::INGRESS, _) => return Err(bad(format!("{k}: wrong type"))),
            (field::CPU, Value::String(s)) => cpu_s = Some(s.as_str()),
            (field::MEMORY, Value::String(s)) => mem_s = Some(s.as_str()),
            (field::PIDS, Value::Number(n)) => {
                pids = Some(
                    n.as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| bad(format!("pids: {n}: must be between 1 and 65536")))?,
                )
            }
            (field::NAME | field::CPU | field::MEMORY | field::PIDS, _) => {
                return Err(bad(format!("{k}: wrong type")))
            }
            _ => return Err(bad(format!("unknown field {k:?}"))),
        }
    }
    let name = check_name(name.ok_or_else(|| bad(format!("missing field {:?}", field::NAME)))?)?;
    let cpu = match cpu_s {
        None => None,
        Some(v) => {
            let p = parse_percent(v).map_err(|e| Error::bad_request(format!("cpu: {e}")))?;
            if !(1..=800).contains(&p) {
                return Err(Error::bad_request(format!(
                    "cpu: {v}: must be between 1% and 800% (percent of one CPU)"
                )));
            }
            Some(p)
        }
    };
    let memory = match mem_s {
        None => None,
        Some(v) => {
            let m = parse_size(v).map_err(|e| Error::bad_request(format!("memory: {e}")))?;
            // Below 1 MiB not even a shell starts; almost certainly a missing suffix.
            if m < 1 << 20 {
                return Err(Error::bad_request(format!(
                    "memory: {v}: must be at least 1M"
                )));
            }
            Some(m)
        }
    };
    if let Some(n) = pids {
        if !(1..=65_536).contains(&n) {
            return Err(Error::bad_request(format!(
                "pids: {n}: must be between 1 and 65536"
            )));
        }
    }
    Ok((
        name,
        Overrides {
            cpu_max_percent: cpu,
            memory_max: memory,
            pids_max: pids,
            #[cfg(feature = "shape")]
            egress,
            #[cfg(feature = "shape")]
            ingress,
        },
    ))
}

/// Pure: a bind request `{"package", "container", "at", "persist"}` or, for unbind, one
/// of the first two only; the target's rules are `berth_core::bind::check_target`'s.
fn bind_request(req: &Request, unbind: bool) -> Result<Action> {
    let v: Value = body(req)?;
    let bad = |m: String| Error::bad_request(format!("POST {}: {m}", req.path));
    let obj = v
        .as_object()
        .ok_or_else(|| bad("expected a JSON object".into()))?;
    let (mut package, mut container, mut at, mut persist) = (None, None, None, false);
    for (k, x) in obj {
        match (k.as_str(), x, unbind) {
            (field::PACKAGE, Value::String(s), _) => package = Some(check_name(s)?),
            (field::CONTAINER, Value::String(s), _) => container = Some(check_name(s)?),
            (field::AT, Value::String(s), false) => {
                berth_core::bind::check_target(s).map_err(|e| bad(format!("at: {e}")))?;
                at = Some(s.clone())
            }
            (field::PERSIST, Value::Bool(b), false) => persist = *b,
            (field::AT, Value::Null, false) => {}
            (field::PACKAGE | field::CONTAINER, _, _) | (field::AT | field::PERSIST, _, false) => {
                return Err(bad(format!("{k}: wrong type")))
            }
            _ => return Err(bad(format!("unknown field {k:?}"))),
        }
    }
    let (Some(package), Some(container)) = (package, container) else {
        return Err(bad("needs package and container".into()));
    };
    Ok(match unbind {
        true => Action::Unbind { package, container },
        false => Action::Bind {
            package,
            container,
            at,
            persist,
        },
    })
}

/// Pure: an update request's optional body `{"reset_serial": bool}`.
fn update_request(req: &Request) -> Result<bool> {
    if req.body.is_empty() {
        return Ok(false);
    }
    let v: Value = body(req)?;
    let bad = |m: &str| Error::bad_request(format!("POST /v1/update: {m}"));
    let obj = v.as_object().ok_or_else(|| bad("expected a JSON object"))?;
    let mut reset = false;
    for (k, x) in obj {
        match (k.as_str(), x) {
            (field::RESET_SERIAL, Value::Bool(b)) => reset = *b,
            (field::RESET_SERIAL, _) => return Err(bad("reset_serial: expected true or false")),
            _ => return Err(bad(&format!("unknown field {k:?}"))),
        }
    }
    Ok(reset)
}

// The derived bodies' field names are `field::NAMES`, `field::PURGE`, `field::NAME` and
// `field::TIMEOUT` (an attribute cannot name a constant; a test holds them together).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InstallBody {
    names: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct UpgradeBody {
    #[serde(default)]
    names: Vec<String>,
    #[serde(default)]
    force: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RemoveBody {
    names: Vec<String>,
    #[serde(default)]
    purge: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameBody {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StartBody {
    name: String,
    #[serde(default)]
    trace: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StopBody {
    name: String,
    #[serde(default)]
    timeout: Option<u32>,
}

fn body<T: for<'a> Deserialize<'a>>(req: &Request) -> Result<T> {
    serde_json::from_slice(&req.body)
        .map_err(|e| Error::bad_request(format!("{} {}: bad JSON body: {e}", req.method, req.path)))
}

fn check_name(n: &str) -> Result<String> {
    berth_core::name::Name::parse(n)
        .map(|n| n.to_string())
        .map_err(|e| Error::bad_request(e.to_string()))
}

/// A report id, as `berth_core::report` makes them (nothing that could name another path).
fn check_report_id(id: &str) -> Result<String> {
    berth_core::report::parse_id(id)
        .map(|_| id.to_string())
        .map_err(Error::from)
}

/// Pure: a report removal `{"id": ID}` or `{"all": true}`, exactly one of them.
fn report_remove_request(req: &Request) -> Result<Option<String>> {
    let v: Value = body(req)?;
    let bad = |m: String| Error::bad_request(format!("POST /v1/reports/remove: {m}"));
    let obj = v
        .as_object()
        .ok_or_else(|| bad("expected a JSON object".into()))?;
    let (mut id, mut all) = (None, false);
    for (k, x) in obj {
        match (k.as_str(), x) {
            (field::ID, Value::String(s)) => id = Some(check_report_id(s)?),
            (field::ALL, Value::Bool(b)) => all = *b,
            (field::ID | field::ALL, _) => return Err(bad(format!("{k}: wrong type"))),
            _ => return Err(bad(format!("unknown field {k:?}"))),
        }
    }
    match (id, all) {
        (Some(id), false) => Ok(Some(id)),
        (None, true) => Ok(None),
        _ => Err(bad("give either \"id\" or \"all\": true".into())),
    }
}

/// Pure: which action a request asks for. Its route is the command table's
/// (`crate::command`): a path no route has is a 404, a method its path lacks a 405.
#[cfg(test)]
pub fn parse(req: &Request) -> Result<Action> {
    parse_routed(req).map(|(a, _)| a)
}

/// Pure: [`parse`], with the command of the table that asks the route (none for a test
/// hook's).
pub fn parse_routed(req: &Request) -> Result<(Action, Option<&'static Cmd>)> {
    let (m, path) = (req.method.as_str(), req.path.as_str());
    let found = command::find(m, path).map_err(|miss| match miss {
        Miss::NotFound => Error::new(Kind::NotFound, format!("no such endpoint {path}")),
        Miss::MethodNotAllowed => {
            Error::new(Kind::MethodNotAllowed, format!("{m} not allowed on {path}"))
        }
    })?;
    if let Some(c) = found.cmd.filter(|c| c.parse == Parse::Fields) {
        let fields = fields(c, req)?;
        return Ok((
            Action::Call {
                command: c.name,
                fields,
            },
            Some(c),
        ));
    }
    let name_q = || -> Result<String> {
        check_name(
            req.query
                .get(field::NAME)
                .ok_or_else(|| Error::bad_request("missing ?name="))?,
        )
    };
    let name_q_opt = || -> Result<Option<String>> {
        req.query
            .get(field::NAME)
            .map(|n| check_name(n))
            .transpose()
    };
    let id_q = || {
        check_report_id(
            req.query
                .get(field::ID)
                .ok_or_else(|| Error::bad_request("missing ?id="))?,
        )
    };
    let named = || check_name(found.name.as_deref().unwrap_or_default());
    let action = match found.route.id {
        // Prometheus's conventional path (docs/metrics.md).
        "metrics" => Action::Metrics,
        "tr181" => Action::Tr181,
        "status" => Action::Status(name_q_opt()?),
        "list" => Action::List,
        "update" => Action::Update {
            reset_serial: update_request(req)?,
        },
        "install" => Action::Install(names(&body::<InstallBody>(req)?.names)?),
        "remove" => {
            let b: RemoveBody = body(req)?;
            Action::Remove {
                names: names(&b.names)?,
                purge: b.purge,
            }
        }
        "start" => {
            let b: StartBody = body(req)?;
            Action::Start {
                name: check_name(&b.name)?,
                trace: b.trace,
            }
        }
        "stop" => {
            let b: StopBody = body(req)?;
            Action::Stop {
                name: check_name(&b.name)?,
                timeout: b.timeout,
            }
        }
        "restart" => Action::Restart(check_name(&body::<NameBody>(req)?.name)?),
        "reset" => Action::Reset(check_name(&body::<NameBody>(req)?.name)?),
        "rollback" => Action::Rollback(check_name(&body::<NameBody>(req)?.name)?),
        "upgrade" => {
            let b = if req.body.is_empty() {
                UpgradeBody::default()
            } else {
                body::<UpgradeBody>(req)?
            };
            Action::Upgrade {
                names: names(&b.names)?,
                force: b.force,
            }
        }
        "logs" => Action::Logs {
            name: name_q()?,
            follow: req.query_flag("follow"),
        },
        "gc" => Action::Gc,
        "limit" => {
            let (name, limits) = limit_request(req)?;
            Action::Limit { name, limits }
        }
        "net" => Action::Net,
        "netHosts" => Action::NetHosts,
        #[cfg(feature = "shape")]
        "netMetered" => {
            #[derive(Deserialize)]
            #[serde(deny_unknown_fields)]
            struct B {
                metered: bool,
            }
            Action::NetMetered(body::<B>(req)?.metered)
        }
        "stats" => Action::Stats(name_q_opt()?),
        "inspect" => Action::Inspect(name_q()?),
        "governor" => Action::Governor,
        "safeModeEnter" => Action::SafeModeEnter,
        "safeModeClear" => Action::SafeModeClear,
        "bind" => bind_request(req, false)?,
        "unbind" => bind_request(req, true)?,
        #[cfg(feature = "test-hooks")]
        "testStall" => stall_request(req)?,
        "reports" => Action::Reports(name_q_opt()?),
        "reportShow" => Action::ReportShow(id_q()?),
        "reportExport" => Action::ReportExport(id_q()?),
        "reportRemove" => Action::ReportRemove(report_remove_request(req)?),
        "schedules" => Action::Schedules(named()?),
        "scheduleAdd" => {
            let name = named()?;
            let job = berth_core::schedule::parse_new(&body::<Value>(req)?)
                .map_err(|e| Error::bad_request(format!("POST {path}: {e}")))?;
            Action::ScheduleAdd { name, job }
        }
        "scheduleRemove" => {
            let name = named()?;
            let id = found.id.unwrap_or_default();
            if !berth_core::schedule::check_id(&id) {
                return Err(Error::bad_request(format!(
                    "{id:?} is not a schedule id (1-16 of a-z, 0-9, -)"
                )));
            }
            Action::ScheduleRemove { name, id }
        }
        // A route of the table that nothing here reads: a programming error, said as one.
        id => {
            return Err(Error::internal(format!(
                "{m} {path}: route {id} has no reader"
            )))
        }
    };
    Ok((action, found.cmd))
}

fn names(names: &[String]) -> Result<Vec<String>> {
    names.iter().map(|n| check_name(n)).collect()
}

/// Pure: the fields of a command the table reads ([`Parse::Fields`]): from the query of a
/// GET (a key the table does not list is ignored, as on every GET), else from a JSON object
/// (an empty body is an empty object; a field it does not list is refused); each of the
/// kind the table gives it.
fn fields(c: &Cmd, req: &Request) -> Result<Map<String, Value>> {
    let (m, path) = (req.method.as_str(), req.path.as_str());
    let bad = |msg: String| Error::bad_request(format!("{m} {path}: {msg}"));
    let given: Map<String, Value> = if m == "GET" {
        let mut q = Map::new();
        for (k, v) in &req.query {
            q.insert(k.clone(), Value::String(v.clone()));
        }
        q
    } else if req.body.is_empty() {
        Map::new()
    } else {
        match body::<Value>(req)? {
            Value::Object(o) => o,
            _ => return Err(bad("expected a JSON object".into())),
        }
    };
    let kinds = command::fields(c);
    let mut out = Map::new();
    for (k, v) in given {
        let Some((_, kind)) = kinds.iter().find(|(f, _)| *f == k) else {
            if m == "GET" {
                continue;
            }
            return Err(bad(format!("unknown field {k:?}")));
        };
        let v = match (kind, v) {
            (FieldKind::Name, Value::String(s)) => Value::String(check_name(&s)?),
            (FieldKind::Text, v @ Value::String(_)) => v,
            (FieldKind::Switch, v @ Value::Bool(_)) => v,
            (FieldKind::Number, Value::Number(n)) => n
                .as_u64()
                .map(Value::from)
                .ok_or_else(|| bad(format!("{k}: {n} is not a whole number")))?,
            // A query carries words: a switch's `1`/`true` or `0`/`false`, a number's digits.
            (FieldKind::Switch, Value::String(s)) if m == "GET" => match s.as_str() {
                "" | "1" | "true" => Value::Bool(true),
                "0" | "false" => Value::Bool(false),
                _ => return Err(bad(format!("{k}: {s:?} is not 1, true, 0 or false"))),
            },
            (FieldKind::Number, Value::String(s)) if m == "GET" => s
                .parse::<u64>()
                .map(Value::from)
                .map_err(|_| bad(format!("{k}: {s:?} is not a number")))?,
            _ => return Err(bad(format!("{k}: wrong type"))),
        };
        out.insert(k, v);
    }
    let needs_name =
        kinds.first().is_some_and(|(_, k)| *k == FieldKind::Name) && !command::operand_optional(c);
    if needs_name && !out.contains_key(field::NAME) {
        return Err(bad(format!("missing field {:?}", field::NAME)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::http;

    fn req(m: &str, path: &str, body: &str) -> Request {
        let raw = format!(
            "{m} {path} HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let (mut r, _) = http::parse_head(raw.as_bytes()).unwrap();
        r.body = body.as_bytes().to_vec();
        r
    }

    /// Every path and method docs/openapi.yaml lists is routed (a 400 for an empty body is
    /// fine; a 404 or 405 would be a documented endpoint the router does not know).
    #[test]
    fn every_documented_endpoint_is_routed() {
        let spec = include_str!("../../../../../docs/openapi.yaml");
        let ops = berth_core::api::documented_operations(spec);
        for (m, p) in &ops {
            // Test-only: there only in a build with the test hooks (`stall_requests`).
            if p == "/v1/test/stall" && !crate::hooks::BUILT {
                continue;
            }
            let p = p.replace("{name}", "web").replace("{id}", "a1");
            if let Err(e) = parse(&req(m, &p, "")) {
                assert!(
                    ![404, 405].contains(&e.status()),
                    "{m} {p}: {} {}",
                    e.status(),
                    e.message
                );
            }
        }
        assert!(
            ops.len() >= 30,
            "only {} operations read from openapi.yaml",
            ops.len()
        );
    }

    #[test]
    fn requests_become_actions() {
        let ping = Action::Call {
            command: "ping",
            fields: Map::new(),
        };
        assert_eq!(parse(&req("GET", "/v1/ping", "")).unwrap(), ping);
        assert_eq!(
            parse(&req("POST", "/v1/ping", "")).unwrap_err().status(),
            405
        );
        // As on every GET, a key the table does not list is ignored.
        assert_eq!(parse(&req("GET", "/v1/ping?x=1", "")).unwrap(), ping);
        assert_eq!(
            parse(&req("POST", "/v1/update", "")).unwrap(),
            Action::Update {
                reset_serial: false
            }
        );
        assert_eq!(
            parse(&req("POST", "/v1/update", r#"{"reset_serial":true}"#)).unwrap(),
            Action::Update { reset_serial: true }
        );
        for bad in [r#"{"reset_serial":1}"#, r#"{"x":true}"#, "[]", "{"] {
            assert_eq!(
                parse(&req("POST", "/v1/update", bad)).unwrap_err().status(),
                400,
                "{bad}"
            );
        }
        assert_eq!(
            parse(&req("POST", "/v1/install", r#"{"names":["web","db"]}"#)).unwrap(),
            Action::Install(vec!["web".into(), "db".into()])
        );
        assert_eq!(
            parse(&req("POST", "/v1/upgrade", "")).unwrap(),
            Action::Upgrade {
                names: vec![],
                force: false
            }
        );
        assert_eq!(
            parse(&req(
                "POST",
                "/v1/upgrade",
                r#"{"names":["web"],"force":true}"#
            ))
            .unwrap(),
            Action::Upgrade {
                names: vec!["web".into()],
                force: true
            }
        );
        assert_eq!(
            parse(&req("POST", "/v1/upgrade", r#"{"force":"yes"}"#))
                .unwrap_err()
                .status(),
            400
        );
        assert_eq!(
            parse(&req("POST", "/v1/stop", r#"{"name":"web","timeout":3}"#)).unwrap(),
            Action::Stop {
                name: "web".into(),
                timeout: Some(3)
            }
        );
        assert_eq!(
            parse(&req("GET", "/v1/logs?name=web&follow=1", "")).unwrap(),
            Action::Logs {
                name: "web".into(),
                follow: true
            }
        );
        assert_eq!(
            parse(&req("GET", "/v1/status?name=web", "")).unwrap(),
            Action::Status(Some("web".into()))
        );
    }

    #[test]
    fn bodies_use_the_shared_field_names() {
        let post = |path: &str, v: serde_json::Value| parse(&req("POST", path, &v.to_string()));
        let names = serde_json::json!({ field::NAMES: ["web"], field::PURGE: true });
        assert_eq!(
            post("/v1/remove", names).unwrap(),
            Action::Remove {
                names: vec!["web".into()],
                purge: true
            }
        );
        let stop = serde_json::json!({ field::NAME: "web", field::TIMEOUT: 3 });
        assert_eq!(
            post("/v1/stop", stop).unwrap(),
            Action::Stop {
                name: "web".into(),
                timeout: Some(3)
            }
        );
        let start = serde_json::json!({ field::NAME: "web" });
        assert_eq!(
            post("/v1/start", start).unwrap(),
            Action::Start {
                name: "web".into(),
                trace: false
            }
        );
        let traced = serde_json::json!({ field::NAME: "web", field::TRACE: true });
        assert_eq!(
            post("/v1/start", traced).unwrap(),
            Action::Start {
                name: "web".into(),
                trace: true
            }
        );
        let bad = serde_json::json!({ field::NAME: "web", field::TRACE: "yes" });
        assert!(post("/v1/start", bad).is_err());
        let install = serde_json::json!({ field::NAMES: ["web"] });
        assert_eq!(
            post("/v1/install", install).unwrap(),
            Action::Install(vec!["web".into()])
        );
        let update = serde_json::json!({ field::RESET_SERIAL: true });
        assert_eq!(
            post("/v1/update", update).unwrap(),
            Action::Update { reset_serial: true }
        );
        let limit = serde_json::json!({
            field::NAME: "web", field::CPU: "20%", field::MEMORY: "32M", field::PIDS: 64,
        });
        assert!(matches!(
            post("/v1/limit", limit).unwrap(),
            Action::Limit { limits, .. } if limits.pids_max == Some(64) && limits.cpu_max_percent == Some(20)
        ));
        #[cfg(feature = "shape")]
        let rates = serde_json::json!({
            field::NAME: "web", field::EGRESS: "8mbit", field::INGRESS: "none",
        });
        #[cfg(feature = "shape")]
        assert!(matches!(
            post("/v1/limit", rates).unwrap(),
            Action::Limit { limits, .. } if limits.egress == Some(8_000_000) && limits.ingress == Some(0)
        ));
        #[cfg(feature = "shape")]
        for (body, says) in [
            (
                r#"{"name":"web","egress":"8mb"}"#,
                "egress: invalid rate \"8mb\"",
            ),
            (
                r#"{"name":"web","ingress":"10kbit"}"#,
                "ingress: rate \"10kbit\" is out of range",
            ),
            (r#"{"name":"web","egress":8000000}"#, "egress: wrong type"),
        ] {
            let e = parse(&req("POST", "/v1/limit", body)).unwrap_err();
            assert_eq!(e.status(), 400, "{body}");
            assert!(e.message.contains(says), "{body}: {}", e.message);
        }
    }

    #[test]
    fn bad_requests_are_refused_with_reasons() {
        let e = parse(&req("POST", "/v1/install", r#"{"names":["../etc"]}"#)).unwrap_err();
        assert_eq!(e.status(), 400);
        assert!(e.message.contains("../etc"), "{}", e.message);
        let e = parse(&req("POST", "/v1/install", r#"{"names":["a"],"x":1}"#)).unwrap_err();
        assert_eq!(e.status(), 400);
        let e = parse(&req("GET", "/v1/install", "")).unwrap_err();
        assert_eq!(e.status(), 405);
        let e = parse(&req("GET", "/v2/nothing", "")).unwrap_err();
        assert_eq!(e.status(), 404);
        let e = parse(&req("GET", "/v1/logs", "")).unwrap_err();
        assert_eq!(e.status(), 400);
    }

    #[test]
    fn safe_mode_and_test_hook_requests() {
        assert_eq!(
            parse(&req("POST", "/v1/safe-mode/enter", "")).unwrap(),
            Action::SafeModeEnter
        );
        assert_eq!(
            parse(&req("POST", "/v1/safe-mode/clear", "")).unwrap(),
            Action::SafeModeClear
        );
        assert_eq!(
            parse(&req("GET", "/v1/safe-mode/clear", ""))
                .unwrap_err()
                .status(),
            405
        );
    }

    /// The stall hook is there only in a build with the test hooks; elsewhere its path is
    /// unknown, as any other.
    #[test]
    fn stall_requests() {
        #[cfg(not(feature = "test-hooks"))]
        {
            let e = parse(&req("POST", "/v1/test/stall", "{}")).unwrap_err();
            assert_eq!(e.status(), 404, "{}", e.message);
        }
        #[cfg(feature = "test-hooks")]
        {
            let stall = serde_json::json!({ field::COMPONENT: "supervisor", field::SECONDS: 3 });
            assert_eq!(
                parse(&req("POST", "/v1/test/stall", &stall.to_string())).unwrap(),
                Action::TestStall {
                    component: Component::Supervisor,
                    seconds: 3
                }
            );
            for (body, needle) in [
                (r#"{"component":"gc","seconds":3}"#, "component \"gc\""),
                (r#"{"component":"api","seconds":0}"#, "between 1 and 600"),
                (r#"{"component":"api","seconds":601}"#, "between 1 and 600"),
                (r#"{"component":"api"}"#, "needs component and seconds"),
                (r#"{"component":1,"seconds":1}"#, "component: wrong type"),
                (r#"{"component":"api","seconds":1,"x":1}"#, "unknown field"),
                ("[]", "expected a JSON object"),
            ] {
                let e = parse(&req("POST", "/v1/test/stall", body)).unwrap_err();
                assert_eq!(e.status(), 400, "{body}");
                assert!(e.message.contains(needle), "{body}: {}", e.message);
            }
        }
    }

    #[test]
    fn report_requests() {
        let id = "20261125T101500Z-web-signal";
        assert_eq!(
            parse(&req("GET", "/v1/reports", "")).unwrap(),
            Action::Reports(None)
        );
        assert_eq!(
            parse(&req("GET", "/v1/reports?name=web", "")).unwrap(),
            Action::Reports(Some("web".into()))
        );
        assert_eq!(
            parse(&req("GET", &format!("/v1/reports/show?id={id}"), "")).unwrap(),
            Action::ReportShow(id.into())
        );
        assert_eq!(
            parse(&req("GET", &format!("/v1/reports/export?id={id}"), "")).unwrap(),
            Action::ReportExport(id.into())
        );
        let body = serde_json::json!({ field::ID: id }).to_string();
        assert_eq!(
            parse(&req("POST", "/v1/reports/remove", &body)).unwrap(),
            Action::ReportRemove(Some(id.into()))
        );
        let body = serde_json::json!({ field::ALL: true }).to_string();
        assert_eq!(
            parse(&req("POST", "/v1/reports/remove", &body)).unwrap(),
            Action::ReportRemove(None)
        );
        for (m, path, body, needle) in [
            ("GET", "/v1/reports/show", "", "missing ?id="),
            (
                "GET",
                "/v1/reports/show?id=../../etc/passwd",
                "",
                "not a report id",
            ),
            ("GET", "/v1/reports/export?id=x", "", "not a report id"),
            ("POST", "/v1/reports/remove", "{}", "either"),
            ("POST", "/v1/reports/remove", r#"{"all":false}"#, "either"),
            (
                "POST",
                "/v1/reports/remove",
                r#"{"id":"20261125T101500Z-web-exit","all":true}"#,
                "either",
            ),
            (
                "POST",
                "/v1/reports/remove",
                r#"{"id":3}"#,
                "id: wrong type",
            ),
            ("POST", "/v1/reports/remove", r#"{"x":1}"#, "unknown field"),
        ] {
            let e = parse(&req(m, path, body)).unwrap_err();
            assert_eq!(e.status(), 400, "{path} {body}");
            assert!(e.message.contains(needle), "{path} {body}: {}", e.message);
        }
        assert_eq!(
            parse(&req("POST", "/v1/reports", "")).unwrap_err().status(),
            405
        );
    }

    #[test]
    fn schedule_requests() {
        assert_eq!(
            parse(&req("GET", "/v1/containers/web/schedules", "")).unwrap(),
            Action::Schedules("web".into())
        );
        let body = r#"{"cron":"*/5 * * * *","cmd":["/bin/job","-v"]}"#;
        match parse(&req("POST", "/v1/containers/web/schedules", body)).unwrap() {
            Action::ScheduleAdd { name, job } => {
                assert_eq!((name.as_str(), job.cron.as_str()), ("web", "*/5 * * * *"));
                assert_eq!(job.cmd, ["/bin/job", "-v"]);
            }
            a => panic!("{a:?}"),
        }
        assert_eq!(
            parse(&req("DELETE", "/v1/containers/web/schedules/a12", "")).unwrap(),
            Action::ScheduleRemove {
                name: "web".into(),
                id: "a12".into()
            }
        );
        for (m, path, body, status, needle) in [
            (
                "POST",
                "/v1/containers/web/schedules",
                r#"{"cron":"* 25 * * *","cmd":["/x"]}"#,
                400,
                "hour: 25 is out of range 0-23",
            ),
            (
                "POST",
                "/v1/containers/web/schedules",
                r#"{"cron":"@daily","cmd":["/x"],"user":0}"#,
                400,
                "unknown field",
            ),
            ("POST", "/v1/containers/web/schedules", "{", 400, "bad JSON"),
            ("GET", "/v1/containers/../schedules", "", 400, "invalid"),
            (
                "DELETE",
                "/v1/containers/web/schedules/..",
                "",
                400,
                "not a schedule id",
            ),
            (
                "DELETE",
                "/v1/containers/web/schedules",
                "",
                405,
                "not allowed",
            ),
            (
                "GET",
                "/v1/containers/web/schedules/a1",
                "",
                405,
                "not allowed",
            ),
            ("GET", "/v1/containers/web", "", 404, "no such endpoint"),
            (
                "GET",
                "/v1/containers/web/schedules/a1/x",
                "",
                404,
                "no such endpoint",
            ),
        ] {
            let e = parse(&req(m, path, body)).unwrap_err();
            assert_eq!(e.status(), status, "{m} {path} {body}");
            assert!(e.message.contains(needle), "{m} {path}: {}", e.message);
        }
    }

    #[test]
    fn bind_requests() {
        let post = |path: &str, v: serde_json::Value| parse(&req("POST", path, &v.to_string()));
        let b = serde_json::json!({
            field::PACKAGE: "tools", field::CONTAINER: "web", field::AT: "/srv/t", field::PERSIST: true,
        });
        assert_eq!(
            post("/v1/bind", b).unwrap(),
            Action::Bind {
                package: "tools".into(),
                container: "web".into(),
                at: Some("/srv/t".into()),
                persist: true
            }
        );
        let b = serde_json::json!({ field::PACKAGE: "tools", field::CONTAINER: "web" });
        assert_eq!(
            post("/v1/bind", b.clone()).unwrap(),
            Action::Bind {
                package: "tools".into(),
                container: "web".into(),
                at: None,
                persist: false
            }
        );
        assert_eq!(
            post("/v1/unbind", b).unwrap(),
            Action::Unbind {
                package: "tools".into(),
                container: "web".into()
            }
        );
        for (path, body, needle) in [
            (
                "/v1/bind",
                r#"{"package":"tools"}"#,
                "needs package and container",
            ),
            (
                "/v1/bind",
                r#"{"package":"tools","container":"../x"}"#,
                "../x",
            ),
            (
                "/v1/bind",
                r#"{"package":"t","container":"w","at":"/proc/x"}"#,
                "at: /proc/x: is below /proc",
            ),
            (
                "/v1/bind",
                r#"{"package":"t","container":"w","at":"o p"}"#,
                "absolute",
            ),
            (
                "/v1/bind",
                r#"{"package":"t","container":"w","persist":"yes"}"#,
                "persist: wrong type",
            ),
            (
                "/v1/bind",
                r#"{"package":"t","container":"w","rw":true}"#,
                "unknown field \"rw\"",
            ),
            (
                "/v1/unbind",
                r#"{"package":"t","container":"w","at":"/opt/t"}"#,
                "unknown field \"at\"",
            ),
            (
                "/v1/unbind",
                r#"{"package":1,"container":"w"}"#,
                "package: wrong type",
            ),
            ("/v1/unbind", "[]", "expected a JSON object"),
        ] {
            let e = parse(&req("POST", path, body)).unwrap_err();
            assert_eq!(e.status(), 400, "{body}");
            assert!(e.message.contains(needle), "{body}: {}", e.message);
        }
        assert_eq!(
            parse(&req("GET", "/v1/bind", "")).unwrap_err().status(),
            405
        );
    }

    #[test]
    fn limit_requests() {
        assert_eq!(
            parse(&req(
                "POST",
                "/v1/limit",
                r#"{"name":"web","cpu":"20%","memory":"32M","pids":64}"#
            ))
            .unwrap(),
            Action::Limit {
                name: "web".into(),
                limits: Overrides {
                    cpu_max_percent: Some(20),
                    memory_max: Some(32 << 20),
                    pids_max: Some(64),
                    ..Overrides::default()
                }
            }
        );
        assert_eq!(
            parse(&req("POST", "/v1/limit", r#"{"name":"web"}"#)).unwrap(),
            Action::Limit {
                name: "web".into(),
                limits: Overrides::default()
            }
        );
        assert_eq!(
            parse(&req("GET", "/v1/stats", "")).unwrap(),
            Action::Stats(None)
        );
        assert_eq!(
            parse(&req("GET", "/v1/governor", "")).unwrap(),
            Action::Governor
        );
        assert_eq!(
            parse(&req("POST", "/v1/governor", ""))
                .unwrap_err()
                .status(),
            405
        );
        for (body, needle) in [
            (r#"{"name":"web","cpu":"20"}"#, "invalid percentage"),
            (r#"{"name":"web","cpu":"0%"}"#, "between 1% and 800%"),
            (r#"{"name":"web","cpu":"-3%"}"#, "invalid percentage"),
            (r#"{"name":"web","cpu":"900%"}"#, "between 1% and 800%"),
            (r#"{"name":"web","memory":"32X"}"#, "invalid size"),
            (r#"{"name":"web","memory":"512"}"#, "at least 1M"),
            (r#"{"name":"web","pids":0}"#, "between 1 and 65536"),
            (r#"{"name":"web","pids":-1}"#, "between 1 and 65536"),
            (r#"{"name":"web","pids":"3"}"#, "pids: wrong type"),
            (r#"{"name":"web","swap":"1M"}"#, "unknown field \"swap\""),
            (r#"{"cpu":"1%"}"#, "missing field \"name\""),
            (r#"[1]"#, "expected a JSON object"),
            (r#"{"name":"../x"}"#, "../x"),
        ] {
            let e = parse(&req("POST", "/v1/limit", body)).unwrap_err();
            assert_eq!(e.status(), 400, "{body}");
            assert!(e.message.contains(needle), "{body}: {}", e.message);
        }
    }

    /// A command the table reads: its fields from a query or a body, checked by kind; what
    /// the table does not list is refused, and so is a missing name.
    #[test]
    fn fields_of_commands_read_by_the_table() {
        use crate::command::{named, Operand};
        let stop = named("stop").unwrap();
        let c = Cmd {
            parse: Parse::Fields,
            operand: Operand::Package,
            ..*stop
        };
        let f = fields(&c, &req("GET", "/v1/x?name=web&timeout=5&all=1", "")).unwrap();
        assert_eq!(
            Value::Object(f).to_string(),
            r#"{"all":true,"name":"web","timeout":5}"#
        );
        let f = fields(&c, &req("POST", "/v1/x", r#"{"name":"web","all":false}"#)).unwrap();
        assert_eq!(
            Value::Object(f).to_string(),
            r#"{"all":false,"name":"web"}"#
        );
        let refused = |m: &str, p: &str, b: &str| fields(&c, &req(m, p, b)).unwrap_err().message;
        assert_eq!(
            refused("GET", "/v1/x", ""),
            r#"GET /v1/x: missing field "name""#
        );
        assert_eq!(
            refused("GET", "/v1/x?name=web&timeout=soon", ""),
            r#"GET /v1/x: timeout: "soon" is not a number"#
        );
        assert_eq!(
            refused("POST", "/v1/x", r#"{"name":"web","as":1}"#),
            r#"POST /v1/x: unknown field "as""#
        );
        assert_eq!(
            refused("POST", "/v1/x", r#"{"name":"web","timeout":"5"}"#),
            "POST /v1/x: timeout: wrong type"
        );
        assert_eq!(
            refused("POST", "/v1/x", "[1]"),
            "POST /v1/x: expected a JSON object"
        );
        assert!(refused("POST", "/v1/x", r#"{"name":"../x"}"#).contains("../x"));
        assert_eq!(
            refused("POST", "/v1/x", r#"{"name":"web","timeout":-1}"#),
            "POST /v1/x: timeout: -1 is not a whole number"
        );
        assert_eq!(
            refused("GET", "/v1/x?name=web&all=yes", ""),
            r#"GET /v1/x: all: "yes" is not 1, true, 0 or false"#
        );
        let f = fields(&c, &req("GET", "/v1/x?name=web&all=0&cache=1", "")).unwrap();
        assert_eq!(
            Value::Object(f).to_string(),
            r#"{"all":false,"name":"web"}"#
        );
    }
}
