//! The container API (docs/container-api.yaml): the socket bound at `/run/berth/api.sock`
//! in every container. Pure parts: a request becomes a typed operation, each operation names
//! the permission it needs, the device policy (`[api]`) decides what a package is granted,
//! and a token bucket paces each container. The daemon knows the caller by the socket the
//! request came on; nothing here reads who the caller says it is.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::api::ErrorKind;
use crate::error::Error;
use crate::http::Request;

/// Where the socket appears inside every container.
pub const SOCKET_IN_CONTAINER: &str = "/run/berth/api.sock";

/// The largest request body a container may send (a schedule, a health message).
pub const MAX_BODY: usize = 16 * 1024;

/// The longest health message kept (bytes; longer ones are cut at a character boundary).
pub const MAX_MESSAGE: usize = 256;

/// What a package may ask of the API, as `[permissions] api` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Permission {
    Status,
    Stop,
    Restart,
    Schedule,
    LanHosts,
    Logs,
    UpdateLock,
}

impl Permission {
    pub const ALL: [Permission; 7] = [
        Permission::Status,
        Permission::Stop,
        Permission::Restart,
        Permission::Schedule,
        Permission::LanHosts,
        Permission::Logs,
        Permission::UpdateLock,
    ];

    /// What the default policy grants to a package that asks: what only speaks about or
    /// acts on the caller itself. `lan-hosts` (the LAN's addresses) and `update-lock` (it
    /// holds off the operator) need the policy to name them.
    pub const DEFAULT_GRANT: [Permission; 5] = [
        Permission::Status,
        Permission::Stop,
        Permission::Restart,
        Permission::Logs,
        Permission::Schedule,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Permission::Status => "status",
            Permission::Stop => "stop",
            Permission::Restart => "restart",
            Permission::Schedule => "schedule",
            Permission::LanHosts => "lan-hosts",
            Permission::Logs => "logs",
            Permission::UpdateLock => "update-lock",
        }
    }

    pub fn from_name(s: &str) -> Option<Permission> {
        Permission::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// A request, typed.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `GET /v1/self`.
    Status,
    /// `POST /v1/self/stop`: answered first, then the container stops (no restart follows).
    Stop,
    /// `POST /v1/self/restart`: answered first, then the container restarts.
    Restart,
    /// `GET /v1/schedules`.
    Schedules,
    /// `POST /v1/schedules`: the body, checked by the scheduler.
    AddSchedule(Value),
    /// `DELETE /v1/schedules/{id}`.
    DeleteSchedule(String),
    /// `GET /v1/lan/hosts`.
    LanHosts,
    /// `GET /v1/logs?tail=N&follow=1`.
    Logs { tail: Option<u32>, follow: bool },
    /// `POST /v1/self/ready`: the package says it is ready (`[health] ready = "api"`).
    Ready,
    /// `POST /v1/self/health`: the package's own verdict on its health.
    Health { ok: bool, message: Option<String> },
    /// `POST /v1/self/watchdog`: the keep-alive `[health] watchdog` asks for.
    KeepAlive,
    /// `POST /v1/self/update-lock`: hold off upgrades of this package for `seconds` (the
    /// policy's maximum when absent or larger).
    Lock { seconds: Option<u64> },
    /// `DELETE /v1/self/update-lock`.
    Unlock,
}

impl Op {
    /// The permission this operation needs; None: it only speaks about the caller
    /// (readiness, health, keep-alive), which every package may do.
    pub fn permission(&self) -> Option<Permission> {
        match self {
            Op::Status => Some(Permission::Status),
            Op::Stop => Some(Permission::Stop),
            Op::Restart => Some(Permission::Restart),
            Op::Schedules | Op::AddSchedule(_) | Op::DeleteSchedule(_) => {
                Some(Permission::Schedule)
            }
            Op::LanHosts => Some(Permission::LanHosts),
            Op::Logs { .. } => Some(Permission::Logs),
            Op::Lock { .. } | Op::Unlock => Some(Permission::UpdateLock),
            Op::Ready | Op::Health { .. } | Op::KeepAlive => None,
        }
    }
}

/// Why a request cannot become an operation: the error kind (its status) and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub kind: ErrorKind,
    pub message: String,
}

fn refuse(kind: ErrorKind, message: impl Into<String>) -> Refusal {
    Refusal {
        kind,
        message: message.into(),
    }
}

/// Pure: method, path, query and body to an operation.
pub fn parse(req: &Request) -> Result<Op, Refusal> {
    let path = req.path.as_str();
    let m = req.method.as_str();
    if req.body.len() > MAX_BODY {
        return Err(refuse(
            ErrorKind::BadRequest,
            format!("{m} {path}: body larger than {MAX_BODY} bytes"),
        ));
    }
    let method_not_allowed = |allowed: &str| {
        Err(refuse(
            ErrorKind::MethodNotAllowed,
            format!("{m} {path}: use {allowed}"),
        ))
    };
    // Operations without a body refuse one that is not empty (or `{}`): a client that
    // thinks it sends something must learn that it is ignored.
    let no_body = |op: Op| {
        let b = trim(&req.body);
        if b.is_empty() || b == b"{}" {
            Ok(op)
        } else {
            Err(refuse(
                ErrorKind::BadRequest,
                format!("{m} {path}: takes no body"),
            ))
        }
    };
    match path {
        "/v1/self" => match m {
            "GET" => Ok(Op::Status),
            _ => method_not_allowed("GET"),
        },
        "/v1/self/stop" | "/v1/self/restart" | "/v1/self/ready" | "/v1/self/watchdog" => {
            if m != "POST" {
                return method_not_allowed("POST");
            }
            no_body(match path {
                "/v1/self/stop" => Op::Stop,
                "/v1/self/restart" => Op::Restart,
                "/v1/self/ready" => Op::Ready,
                _ => Op::KeepAlive,
            })
        }
        "/v1/self/health" => match m {
            "POST" => health(req),
            _ => method_not_allowed("POST"),
        },
        "/v1/self/update-lock" => match m {
            "POST" => lock(req),
            "DELETE" => no_body(Op::Unlock),
            _ => method_not_allowed("POST or DELETE"),
        },
        "/v1/schedules" => match m {
            "GET" => Ok(Op::Schedules),
            "POST" => Ok(Op::AddSchedule(object(req)?.into())),
            _ => method_not_allowed("GET or POST"),
        },
        "/v1/lan/hosts" => match m {
            "GET" => Ok(Op::LanHosts),
            _ => method_not_allowed("GET"),
        },
        "/v1/logs" => match m {
            "GET" => logs(req),
            _ => method_not_allowed("GET"),
        },
        _ => match path.strip_prefix("/v1/schedules/") {
            Some(id) if m == "DELETE" => {
                if !crate::schedule::check_id(id) {
                    return Err(refuse(
                        ErrorKind::BadRequest,
                        format!("DELETE {path}: a schedule id is lowercase letters, digits and '-' (at most 16)"),
                    ));
                }
                no_body(Op::DeleteSchedule(id.to_string()))
            }
            Some(_) => method_not_allowed("DELETE"),
            None => Err(refuse(
                ErrorKind::NotFound,
                format!(
                    "no such endpoint {path} (docs/container-api.yaml lists them)",
                    path = path.chars().take(80).collect::<String>()
                ),
            )),
        },
    }
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end.max(start)]
}

/// The body as a JSON object.
fn object(req: &Request) -> Result<Map<String, Value>, Refusal> {
    let what = || format!("{} {}", req.method, req.path);
    match serde_json::from_slice::<Value>(&req.body) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(refuse(
            ErrorKind::BadRequest,
            format!("{}: expected a JSON object", what()),
        )),
        Err(e) => Err(refuse(
            ErrorKind::BadRequest,
            format!("{}: bad JSON body: {e}", what()),
        )),
    }
}

fn unknown_field(req: &Request, k: &str) -> Refusal {
    refuse(
        ErrorKind::BadRequest,
        format!(
            "{} {}: unknown field {:?}",
            req.method,
            req.path,
            k.chars().take(40).collect::<String>()
        ),
    )
}

/// `{"ok": bool, "message": "…"}`; `message` optional, cut at [`MAX_MESSAGE`] bytes.
fn health(req: &Request) -> Result<Op, Refusal> {
    let (mut ok, mut message) = (None, None);
    for (k, v) in object(req)? {
        match (k.as_str(), v) {
            ("ok", Value::Bool(b)) => ok = Some(b),
            ("message", Value::String(s)) => message = Some(cut(&s, MAX_MESSAGE)),
            ("message", Value::Null) => {}
            ("ok" | "message", _) => {
                return Err(refuse(
                    ErrorKind::BadRequest,
                    format!(
                        "POST /v1/self/health: {k} must be {}",
                        if k == "ok" {
                            "true or false"
                        } else {
                            "a string"
                        }
                    ),
                ))
            }
            (k, _) => return Err(unknown_field(req, k)),
        }
    }
    let ok = ok.ok_or_else(|| {
        refuse(
            ErrorKind::BadRequest,
            "POST /v1/self/health: \"ok\" (true or false) is required",
        )
    })?;
    Ok(Op::Health { ok, message })
}

/// The message without control characters, at most `max` bytes.
fn cut(s: &str, max: usize) -> String {
    let mut out = String::new();
    for c in s.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    out
}

/// `{"seconds": N}` or nothing (the policy's maximum).
fn lock(req: &Request) -> Result<Op, Refusal> {
    if trim(&req.body).is_empty() {
        return Ok(Op::Lock { seconds: None });
    }
    let mut seconds = None;
    for (k, v) in object(req)? {
        match (k.as_str(), v.as_u64()) {
            ("seconds", Some(s)) if s > 0 => seconds = Some(s),
            ("seconds", _) => {
                return Err(refuse(
                    ErrorKind::BadRequest,
                    "POST /v1/self/update-lock: seconds must be a whole number above 0",
                ))
            }
            (k, _) => return Err(unknown_field(req, k)),
        }
    }
    Ok(Op::Lock { seconds })
}

/// `tail` (lines, at most 10,000) and `follow`; nothing else.
fn logs(req: &Request) -> Result<Op, Refusal> {
    let mut tail = None;
    for (k, v) in &req.query {
        match k.as_str() {
            "tail" => {
                tail = Some(
                    v.parse::<u32>()
                        .ok()
                        .filter(|n| *n <= 10_000)
                        .ok_or_else(|| {
                            refuse(
                                ErrorKind::BadRequest,
                                format!(
                            "GET /v1/logs: tail {:?}: expected a number of lines from 0 to 10000",
                            v.chars().take(20).collect::<String>()
                        ),
                            )
                        })?,
                )
            }
            "follow" => {}
            k => {
                return Err(refuse(
                    ErrorKind::BadRequest,
                    format!(
                        "GET /v1/logs: unknown parameter {:?} (tail, follow)",
                        k.chars().take(40).collect::<String>()
                    ),
                ))
            }
        }
    }
    Ok(Op::Logs {
        tail,
        follow: req.query_flag("follow"),
    })
}

/// The last `n` lines of a log (an unfinished last line counts as one).
pub fn tail_lines(bytes: &[u8], n: usize) -> &[u8] {
    if n == 0 {
        return &[];
    }
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let mut seen = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == n {
                return &bytes[i + 1..];
            }
        }
    }
    bytes
}

/// The device policy's `[api]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiPolicy {
    /// Granted to every package that asks for it.
    pub grant: Vec<Permission>,
    /// Granted, beyond `grant`, to the packages named (`[api.packages]`).
    pub packages: BTreeMap<String, Vec<Permission>>,
    /// Requests per second each container may make (the bucket's refill)…
    pub rate: u32,
    /// …and how many at once after a quiet time (its size).
    pub burst: u32,
    /// The longest an update lock holds (a request for longer gets this).
    pub max_update_lock_s: u64,
}

impl Default for ApiPolicy {
    fn default() -> Self {
        ApiPolicy {
            grant: Permission::DEFAULT_GRANT.to_vec(),
            packages: BTreeMap::new(),
            rate: 20,
            burst: 40,
            max_update_lock_s: 3600,
        }
    }
}

impl ApiPolicy {
    /// What a package is granted of what its manifest asks (`asked`, names as in
    /// `[permissions] api`), in the order of [`Permission::ALL`].
    pub fn granted(&self, package: &str, asked: &[String]) -> Vec<Permission> {
        let extra = self.packages.get(package);
        Permission::ALL
            .into_iter()
            .filter(|p| asked.iter().any(|a| a == p.name()))
            .filter(|p| self.grant.contains(p) || extra.is_some_and(|e| e.contains(p)))
            .collect()
    }

    /// Why `op` is refused to a package granted `granted`, or None.
    pub fn refusal(
        op: &Op,
        package: &str,
        asked: &[String],
        granted: &[Permission],
    ) -> Option<(Permission, String)> {
        let p = op.permission()?;
        if granted.contains(&p) {
            return None;
        }
        let why = if asked.iter().any(|a| a == p.name()) {
            format!(
                "{package}: the device policy does not grant the api permission {:?} ([api] grant or [api.packages] in berth.toml)",
                p.name()
            )
        } else {
            format!(
                "{package}: needs the api permission {:?}, which its manifest does not ask for ([permissions] api)",
                p.name()
            )
        };
        Some((p, why))
    }
}

/// A permission list as berth.toml writes it: names separated by spaces.
pub fn permission_list(v: &str) -> Result<Vec<Permission>, Error> {
    let mut out = Vec::new();
    for w in v.split_whitespace() {
        let p = Permission::from_name(w).ok_or_else(|| {
            Error::invalid(format!(
                "{w:?} is not an api permission (known: {})",
                Permission::ALL.map(Permission::name).join(", ")
            ))
        })?;
        if !out.contains(&p) {
            out.push(p);
        }
    }
    Ok(out)
}

/// A token bucket per container: `rate` tokens a second up to `burst`; a request takes one.
/// Kept in thousandths, so that a slow rate still refills between requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    milli: u64,
    last_ms: u64,
}

impl Bucket {
    /// Full.
    pub fn new(burst: u32, now_ms: u64) -> Bucket {
        Bucket {
            milli: burst as u64 * 1000,
            last_ms: now_ms,
        }
    }

    /// Milliseconds until a token is there (0: now), without taking one.
    pub fn wait_ms(&self, now_ms: u64, rate: u32, burst: u32) -> u64 {
        let elapsed = now_ms.saturating_sub(self.last_ms);
        let milli = (self.milli + elapsed * rate as u64).min(burst as u64 * 1000);
        if milli >= 1000 {
            return 0;
        }
        (1000 - milli).div_ceil((rate as u64).max(1))
    }

    /// Takes a token if there is one. `Err(ms)`: none; the next comes in `ms`.
    pub fn take(&mut self, now_ms: u64, rate: u32, burst: u32) -> Result<(), u64> {
        let elapsed = now_ms.saturating_sub(self.last_ms);
        self.last_ms = self.last_ms.max(now_ms);
        self.milli = (self.milli + elapsed * rate as u64).min(burst as u64 * 1000);
        if self.milli >= 1000 {
            self.milli -= 1000;
            return Ok(());
        }
        let rate = (rate as u64).max(1);
        Err((1000 - self.milli).div_ceil(rate))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, target: &str, body: &str) -> Request {
        let text = format!(
            "{method} {target} HTTP/1.1\r\nHost: berth\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        crate::http::parse_complete(text.as_bytes())
            .unwrap()
            .unwrap()
    }

    fn op(method: &str, target: &str, body: &str) -> Result<Op, Refusal> {
        parse(&req(method, target, body))
    }

    fn kind(r: Result<Op, Refusal>) -> (ErrorKind, String) {
        let e = r.unwrap_err();
        (e.kind, e.message)
    }

    #[test]
    fn every_endpoint_parses_to_its_operation() {
        assert_eq!(op("GET", "/v1/self", ""), Ok(Op::Status));
        assert_eq!(op("POST", "/v1/self/stop", ""), Ok(Op::Stop));
        assert_eq!(op("POST", "/v1/self/stop", " {} "), Ok(Op::Stop));
        assert_eq!(op("POST", "/v1/self/restart", ""), Ok(Op::Restart));
        assert_eq!(op("POST", "/v1/self/ready", ""), Ok(Op::Ready));
        assert_eq!(op("POST", "/v1/self/watchdog", ""), Ok(Op::KeepAlive));
        assert_eq!(
            op(
                "POST",
                "/v1/self/health",
                r#"{"ok": false, "message": "disk\nfull"}"#
            ),
            Ok(Op::Health {
                ok: false,
                message: Some("disk full".into())
            })
        );
        assert_eq!(
            op("POST", "/v1/self/health", r#"{"ok": true}"#),
            Ok(Op::Health {
                ok: true,
                message: None
            })
        );
        assert_eq!(
            op("POST", "/v1/self/update-lock", r#"{"seconds": 90}"#),
            Ok(Op::Lock { seconds: Some(90) })
        );
        assert_eq!(
            op("POST", "/v1/self/update-lock", ""),
            Ok(Op::Lock { seconds: None })
        );
        assert_eq!(op("DELETE", "/v1/self/update-lock", ""), Ok(Op::Unlock));
        assert_eq!(op("GET", "/v1/schedules", ""), Ok(Op::Schedules));
        assert_eq!(
            op(
                "POST",
                "/v1/schedules",
                r#"{"cron": "@daily", "cmd": ["/bin/true"]}"#
            ),
            Ok(Op::AddSchedule(
                serde_json::json!({"cron": "@daily", "cmd": ["/bin/true"]})
            ))
        );
        assert_eq!(
            op("DELETE", "/v1/schedules/a1-b2", ""),
            Ok(Op::DeleteSchedule("a1-b2".into()))
        );
        assert_eq!(op("GET", "/v1/lan/hosts", ""), Ok(Op::LanHosts));
        assert_eq!(
            op("GET", "/v1/logs?tail=20&follow=1", ""),
            Ok(Op::Logs {
                tail: Some(20),
                follow: true
            })
        );
        assert_eq!(
            op("GET", "/v1/logs", ""),
            Ok(Op::Logs {
                tail: None,
                follow: false
            })
        );
    }

    #[test]
    fn bad_requests_get_clear_4xx() {
        for (m, t, b, want, says) in [
            (
                "GET",
                "/v1/nothing",
                "",
                ErrorKind::NotFound,
                "no such endpoint /v1/nothing",
            ),
            (
                "GET",
                "/v1/self/stop",
                "",
                ErrorKind::MethodNotAllowed,
                "use POST",
            ),
            (
                "PUT",
                "/v1/schedules",
                "",
                ErrorKind::MethodNotAllowed,
                "GET or POST",
            ),
            (
                "POST",
                "/v1/self/stop",
                "{\"now\":1}",
                ErrorKind::BadRequest,
                "takes no body",
            ),
            (
                "POST",
                "/v1/self/health",
                "{}",
                ErrorKind::BadRequest,
                "\"ok\" (true or false) is required",
            ),
            (
                "POST",
                "/v1/self/health",
                "{\"ok\":1}",
                ErrorKind::BadRequest,
                "ok must be true or false",
            ),
            (
                "POST",
                "/v1/self/health",
                "{\"ok\":true,\"x\":1}",
                ErrorKind::BadRequest,
                "unknown field \"x\"",
            ),
            (
                "POST",
                "/v1/self/health",
                "{\"ok\":",
                ErrorKind::BadRequest,
                "bad JSON body",
            ),
            (
                "POST",
                "/v1/self/health",
                "[1]",
                ErrorKind::BadRequest,
                "expected a JSON object",
            ),
            (
                "POST",
                "/v1/self/update-lock",
                "{\"seconds\":0}",
                ErrorKind::BadRequest,
                "above 0",
            ),
            (
                "POST",
                "/v1/self/update-lock",
                "{\"seconds\":-5}",
                ErrorKind::BadRequest,
                "above 0",
            ),
            (
                "POST",
                "/v1/schedules",
                "null",
                ErrorKind::BadRequest,
                "expected a JSON object",
            ),
            (
                "DELETE",
                "/v1/schedules/../x",
                "",
                ErrorKind::BadRequest,
                "a schedule id is",
            ),
            (
                "DELETE",
                "/v1/schedules/",
                "",
                ErrorKind::BadRequest,
                "a schedule id is",
            ),
            (
                "GET",
                "/v1/logs?tail=x",
                "",
                ErrorKind::BadRequest,
                "tail \"x\"",
            ),
            (
                "GET",
                "/v1/logs?tail=10001",
                "",
                ErrorKind::BadRequest,
                "from 0 to 10000",
            ),
            (
                "GET",
                "/v1/logs?name=other",
                "",
                ErrorKind::BadRequest,
                "unknown parameter \"name\"",
            ),
        ] {
            let (k, msg) = kind(op(m, t, b));
            assert_eq!(k, want, "{m} {t} {b}: {msg}");
            assert!(msg.contains(says), "{m} {t} {b}: {msg}");
        }
        let big = format!("{{\"ok\":true,\"message\":\"{}\"}}", "x".repeat(MAX_BODY));
        let (k, msg) = kind(op("POST", "/v1/self/health", &big));
        assert_eq!(k, ErrorKind::BadRequest);
        assert!(msg.contains("body larger than 16384"), "{msg}");
        // a long message is kept short, at a character boundary
        let long = format!("{{\"ok\":true,\"message\":\"{}\"}}", "é".repeat(300));
        let Ok(Op::Health {
            message: Some(m), ..
        }) = op("POST", "/v1/self/health", &long)
        else {
            panic!()
        };
        assert!(
            m.len() <= MAX_MESSAGE && m.len() >= MAX_MESSAGE - 1,
            "{}",
            m.len()
        );
    }

    #[test]
    fn no_request_names_another_container() {
        // Nothing a caller can send carries a container's name: the operations have no
        // field for it, and the paths are all of "self".
        for (m, t, b) in [
            ("POST", "/v1/containers/other/stop", ""),
            ("POST", "/v1/self/other/stop", ""),
            ("GET", "/v1/self?name=other", ""),
        ] {
            match op(m, t, b) {
                Err(_) | Ok(Op::Status) => {}
                Ok(o) => panic!("{m} {t}: {o:?}"),
            }
        }
    }

    #[test]
    fn permissions_need_the_manifest_and_the_policy() {
        let mut pol = ApiPolicy::default();
        let asked: Vec<String> = ["status", "stop", "lan-hosts", "update-lock"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            pol.granted("media", &asked),
            [Permission::Status, Permission::Stop]
        );
        pol.packages
            .insert("media".into(), vec![Permission::LanHosts]);
        let g = pol.granted("media", &asked);
        assert_eq!(
            g,
            [Permission::Status, Permission::Stop, Permission::LanHosts]
        );
        assert_eq!(ApiPolicy::refusal(&Op::Stop, "media", &asked, &g), None);
        assert_eq!(ApiPolicy::refusal(&Op::Ready, "media", &asked, &[]), None);
        let (p, why) = ApiPolicy::refusal(&Op::Restart, "media", &asked, &g).unwrap();
        assert_eq!(p, Permission::Restart);
        assert!(
            why.contains("does not ask for ([permissions] api)"),
            "{why}"
        );
        let (p, why) = ApiPolicy::refusal(&Op::Unlock, "media", &asked, &g).unwrap();
        assert_eq!(p, Permission::UpdateLock);
        assert!(why.contains("the device policy does not grant"), "{why}");
        // another package's grants are not this one's
        assert_eq!(
            pol.granted("other", &asked),
            [Permission::Status, Permission::Stop]
        );
    }

    #[test]
    fn permission_lists_name_what_is_wrong() {
        assert_eq!(
            permission_list("stop  lan-hosts stop"),
            Ok(vec![Permission::Stop, Permission::LanHosts])
        );
        let e = permission_list("stop reboot").unwrap_err();
        assert!(
            e.message.contains("\"reboot\" is not an api permission"),
            "{e}"
        );
        for p in Permission::ALL {
            assert_eq!(Permission::from_name(p.name()), Some(p));
        }
        // the manifest knows the same names
        for n in crate::manifest::API_OPERATIONS {
            assert!(Permission::from_name(n).is_some(), "{n}");
        }
        assert_eq!(crate::manifest::API_OPERATIONS.len(), Permission::ALL.len());
    }

    /// Every path and method docs/container-api.yaml lists is routed (a 400 for an empty
    /// body is fine; a 404 or 405 would be a documented endpoint the router does not know).
    #[test]
    fn every_documented_endpoint_is_routed() {
        let spec = include_str!("../../../docs/container-api.yaml");
        let ops = crate::api::documented_operations(spec);
        for (m, p) in &ops {
            let p = p.replace("{id}", "a1");
            if let Err(r) = op(m, &p, "") {
                assert!(
                    ![ErrorKind::NotFound, ErrorKind::MethodNotAllowed].contains(&r.kind),
                    "{m} {p}: {r:?}"
                );
            }
        }
        assert!(
            ops.len() >= 13,
            "only {} operations read from container-api.yaml",
            ops.len()
        );
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail_lines(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(tail_lines(b"a\nb\nc", 2), b"b\nc");
        assert_eq!(tail_lines(b"a\nb\n", 5), b"a\nb\n");
        assert_eq!(tail_lines(b"a\nb\n", 0), b"");
        assert_eq!(tail_lines(b"", 3), b"");
        assert_eq!(tail_lines(b"\n\n\n", 1), b"\n");
    }

    #[test]
    fn the_bucket_allows_a_burst_then_the_rate() {
        let mut b = Bucket::new(3, 0);
        for _ in 0..3 {
            assert_eq!(b.take(0, 10, 3), Ok(()));
        }
        assert_eq!(b.take(0, 10, 3), Err(100));
        assert_eq!(b.take(50, 10, 3), Err(50));
        assert_eq!(b.take(100, 10, 3), Ok(()));
        // a long quiet time fills it to the burst, no more
        for _ in 0..3 {
            assert_eq!(b.take(60_000, 10, 3), Ok(()));
        }
        assert!(b.take(60_000, 10, 3).is_err());
        // a clock that goes back does not mint tokens
        assert!(b.take(1_000, 10, 3).is_err());
        // waiting says the same as taking, without taking
        let mut b = Bucket::new(1, 0);
        assert_eq!(b.wait_ms(0, 10, 1), 0);
        assert_eq!(b.wait_ms(0, 10, 1), 0);
        b.take(0, 10, 1).unwrap();
        assert_eq!(b.wait_ms(0, 10, 1), 100);
        assert_eq!(b.wait_ms(60, 10, 1), 40);
        assert_eq!(b.take(60, 10, 1), Err(40));
        // over any window, at most burst + rate·t requests pass
        let mut b = Bucket::new(40, 0);
        let passed = (0..10_000u64)
            .filter(|t| b.take(*t, 20, 40).is_ok())
            .count();
        assert_eq!(passed, 40 + 200 - 1, "10 s at 20/s after a burst of 40");
    }
}
