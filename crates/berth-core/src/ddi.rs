//! The pure parts of berth's hawkBit DDI client (docs/fleet.md): the controller base
//! resource, a `deploymentBase` action, a `cancelAction`, the feedback and configData
//! bodies, the poll schedule (the server's sleep, jitter, backoff), and what to do with an
//! action given the device's situation. JSON shapes follow Eclipse hawkBit's Direct Device
//! Integration API (v1), which gooseBit implements too.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

/// A DDI answer berth cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {reason}")]
pub struct DdiError {
    pub what: &'static str,
    pub reason: String,
}

fn bad(what: &'static str, reason: impl Into<String>) -> DdiError {
    DdiError {
        what,
        reason: reason.into(),
    }
}

/// The controller base resource: how long to sleep, and the links the server offers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Base {
    /// `config.polling.sleep` in seconds, if the server set one.
    pub sleep_s: Option<u64>,
    pub deployment: Option<String>,
    pub config_data: Option<String>,
    pub cancel: Option<String>,
}

/// `HH:MM:SS` (hawkBit's polling time) in seconds.
pub fn parse_sleep(s: &str) -> Option<u64> {
    let mut parts = s.split(':');
    let (h, m, sec) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let num = |p: &str| {
        (!p.is_empty() && p.len() <= 4 && p.bytes().all(|b| b.is_ascii_digit()))
            .then(|| p.parse::<u64>().ok())
            .flatten()
    };
    let (h, m, sec) = (num(h)?, num(m)?, num(sec)?);
    if m >= 60 || sec >= 60 {
        return None;
    }
    Some(h * 3600 + m * 60 + sec)
}

fn href(links: &Value, rel: &str) -> Option<String> {
    links
        .get(rel)?
        .get("href")?
        .as_str()
        .filter(|h| !h.is_empty())
        .map(String::from)
}

pub fn parse_base(body: &[u8]) -> Result<Base, DdiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| bad("controller base", format!("not JSON: {e}")))?;
    if !v.is_object() {
        return Err(bad("controller base", "not a JSON object"));
    }
    let sleep_s = match v.pointer("/config/polling/sleep") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(parse_sleep(s).ok_or_else(|| {
            bad(
                "controller base",
                format!("polling sleep {s:?} is not HH:MM:SS"),
            )
        })?),
        Some(other) => {
            return Err(bad(
                "controller base",
                format!("polling sleep {other} is not a string"),
            ))
        }
    };
    let links = v.get("_links").cloned().unwrap_or(Value::Null);
    Ok(Base {
        sleep_s,
        deployment: href(&links, "deploymentBase"),
        config_data: href(&links, "configData"),
        cancel: href(&links, "cancelAction"),
    })
}

/// The action id in a `deploymentBase/{id}` or `cancelAction/{id}` link (the query, such
/// as hawkBit's `?c=…`, is not part of it).
pub fn action_id(href: &str) -> Option<String> {
    let path = href.split(['?', '#']).next()?;
    let id = path.trim_end_matches('/').rsplit('/').next()?;
    valid_id(id).then(|| id.to_string())
}

/// An action id berth puts in a URL, a log line and its record: 1 to 64 letters, digits or
/// '-' (hawkBit's are numbers, gooseBit's too).
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// `download` and `update` of a deployment: `skip` (not now), `attempt` (when the device
/// sees fit), `forced` (now).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handling {
    Skip,
    Attempt,
    Forced,
}

impl Handling {
    fn parse(v: Option<&Value>, what: &str) -> Result<Handling, DdiError> {
        match v.and_then(Value::as_str) {
            Some("skip") => Ok(Handling::Skip),
            Some("attempt") => Ok(Handling::Attempt),
            Some("forced") => Ok(Handling::Forced),
            // Absent means "do it" for servers that leave it out.
            None => Ok(Handling::Forced),
            Some(o) => Err(bad(
                "deploymentBase",
                format!("{what} {o:?} is not skip, attempt or forced"),
            )),
        }
    }
}

/// One artifact of a deployment's chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    pub filename: String,
    pub size: Option<u64>,
    /// When the server gives one (hawkBit does; gooseBit gives sha1 only): checked after the
    /// download. Trust never rests on it: the bundle's signature decides.
    pub sha256: Option<String>,
    /// hawkBit's `download-http` (plain), else `download`.
    pub href: String,
    /// hawkBit's `download` (its https:// link) when it also gave `download-http`: what a
    /// device talking to an https:// server fetches.
    pub secure_href: Option<String>,
}

/// A `deploymentBase` action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    pub id: String,
    pub download: Handling,
    pub update: Handling,
    /// `maintenanceWindow`: Some(true) available, Some(false) unavailable, None: no window.
    pub window: Option<bool>,
    /// The chunk's version (what the server calls the software's version).
    pub version: Option<String>,
    pub artifacts: Vec<Artifact>,
}

pub fn parse_deployment(body: &[u8]) -> Result<Deployment, DdiError> {
    const W: &str = "deploymentBase";
    let v: Value = serde_json::from_slice(body).map_err(|e| bad(W, format!("not JSON: {e}")))?;
    let id = match v.get("id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err(bad(W, "no action id")),
    };
    if !valid_id(&id) {
        return Err(bad(
            W,
            "the action id is not 1 to 64 letters, digits or '-'",
        ));
    }
    let dep = v
        .get("deployment")
        .filter(|d| d.is_object())
        .ok_or_else(|| bad(W, "no deployment object"))?;
    let download = Handling::parse(dep.get("download"), "download")?;
    let update = Handling::parse(dep.get("update"), "update")?;
    let window = match dep.get("maintenanceWindow").and_then(Value::as_str) {
        None => None,
        Some("available") => Some(true),
        Some("unavailable") => Some(false),
        Some(o) => {
            return Err(bad(
                W,
                format!("maintenanceWindow {o:?} is not available or unavailable"),
            ))
        }
    };
    let mut artifacts = Vec::new();
    let mut version = None;
    for chunk in dep
        .get("chunks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if version.is_none() {
            version = chunk
                .get("version")
                .and_then(Value::as_str)
                .map(String::from);
        }
        for a in chunk
            .get("artifacts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let filename = a
                .get("filename")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(W, "an artifact without a filename"))?
                .to_string();
            let links = a.get("_links").cloned().unwrap_or(Value::Null);
            // hawkBit: download-http (plain) and download (https); gooseBit: download.
            let secure = href(&links, "download");
            let (href, secure_href) = match href(&links, "download-http") {
                Some(plain) => (plain, secure),
                None => (
                    secure.ok_or_else(|| {
                        bad(W, format!("artifact {filename:?} has no download link"))
                    })?,
                    None,
                ),
            };
            let sha256 = a
                .pointer("/hashes/sha256")
                .and_then(Value::as_str)
                .map(str::to_ascii_lowercase);
            if let Some(h) = &sha256 {
                if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(bad(
                        W,
                        format!("artifact {filename:?}: sha256 {h:?} is not 64 hex digits"),
                    ));
                }
            }
            artifacts.push(Artifact {
                filename,
                size: a.get("size").and_then(Value::as_u64),
                sha256,
                href,
                secure_href,
            });
        }
    }
    Ok(Deployment {
        id,
        download,
        update,
        window,
        version,
        artifacts,
    })
}

/// The artifact that is a berth bundle: named `*.berth` or `*.swu`, else the only one.
pub fn bundle_artifact(dep: &Deployment) -> Result<&Artifact, DdiError> {
    let named: Vec<&Artifact> = dep
        .artifacts
        .iter()
        .filter(|a| a.filename.ends_with(".berth") || a.filename.ends_with(".swu"))
        .collect();
    match (named.as_slice(), dep.artifacts.as_slice()) {
        ([one], _) => Ok(one),
        ([], [one]) => Ok(one),
        ([], []) => Err(bad("deploymentBase", "no artifact")),
        _ => Err(bad(
            "deploymentBase",
            format!(
                "{} artifacts and none (or more than one) named *.berth or *.swu: which is the bundle?",
                dep.artifacts.len()
            ),
        )),
    }
}

/// `cancelAction`: the id of the action to stop.
pub fn parse_cancel(body: &[u8]) -> Result<(String, String), DdiError> {
    const W: &str = "cancelAction";
    let v: Value = serde_json::from_slice(body).map_err(|e| bad(W, format!("not JSON: {e}")))?;
    let s = |v: Option<&Value>| match v {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let id = s(v.get("id")).ok_or_else(|| bad(W, "no id"))?;
    let stop = s(v.pointer("/cancelAction/stopId")).ok_or_else(|| bad(W, "no stopId"))?;
    if !valid_id(&id) || !valid_id(&stop) {
        return Err(bad(W, "an id is not 1 to 64 letters, digits or '-'"));
    }
    Ok((id, stop))
}

/// `status.execution` of a feedback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Execution {
    Proceeding,
    Scheduled,
    Resumed,
    Downloaded,
    Closed,
    Rejected,
}

impl Execution {
    pub fn as_str(self) -> &'static str {
        match self {
            Execution::Proceeding => "proceeding",
            Execution::Scheduled => "scheduled",
            Execution::Resumed => "resumed",
            Execution::Downloaded => "downloaded",
            Execution::Closed => "closed",
            Execution::Rejected => "rejected",
        }
    }
}

/// `status.result.finished`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    Success,
    Failure,
    None,
}

impl Finished {
    pub fn as_str(self) -> &'static str {
        match self {
            Finished::Success => "success",
            Finished::Failure => "failure",
            Finished::None => "none",
        }
    }
}

/// hawkBit keeps at most this many characters of one detail line.
pub const MAX_DETAIL: usize = 512;

/// A feedback body (`POST …/deploymentBase/{id}/feedback` or `…/cancelAction/{id}/feedback`).
pub fn feedback(
    execution: Execution,
    finished: Finished,
    progress: Option<(u32, u32)>,
    details: &[String],
) -> String {
    let mut result = Map::new();
    result.insert("finished".into(), finished.as_str().into());
    if let Some((cnt, of)) = progress {
        result.insert("progress".into(), json!({"cnt": cnt, "of": of}));
    }
    let details: Vec<String> = details.iter().map(|d| cut(d, MAX_DETAIL)).collect();
    json!({"status": {"execution": execution.as_str(), "result": result, "details": details}})
        .to_string()
}

/// A configData body: it replaces what the server holds (a removed package's attribute goes
/// with it).
pub fn config_data(attributes: &BTreeMap<String, String>) -> String {
    let data: Map<String, Value> = attributes
        .iter()
        .map(|(k, v)| (cut(k, 128), Value::String(cut(v, 128))))
        .collect();
    json!({"mode": "replace", "data": data}).to_string()
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The controller id a device gets without `[fleet] controller_id`: `berth-` and 16 hex
/// digits of SHA-256 over the machine id (the id itself stays on the device, as
/// machine-id(5) asks of identifiers derived from it).
pub fn controller_id(machine_id: &str) -> Option<String> {
    use sha2::{Digest, Sha256};
    let id = machine_id.trim();
    if id.is_empty() {
        return None;
    }
    let h = Sha256::digest(format!("berth-ddi:{id}").as_bytes());
    Some(format!(
        "berth-{}",
        h[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    ))
}

/// Milliseconds until the next poll: the server's sleep (or the configured one) after a
/// success, with up to ±10 % jitter from `seed` so that a fleet that was restarted together
/// does not poll together; after `failures` failed polls in a row, 30 s doubled per failure
/// but never sooner than the sleep (a server in trouble is not asked more often than a well
/// one), up to `max_backoff_ms` (or the sleep, if longer), with the same jitter.
pub fn next_poll_ms(sleep_ms: u64, failures: u32, max_backoff_ms: u64, seed: u64) -> u64 {
    let base = if failures == 0 {
        sleep_ms
    } else {
        let doubled = 30_000u64.saturating_mul(1u64 << (failures - 1).min(20));
        doubled.max(sleep_ms).min(max_backoff_ms.max(sleep_ms))
    };
    let span = base / 10;
    if span == 0 {
        return base.max(1);
    }
    // seed in [0, 2·span] → [-span, +span].
    base - span + seed % (2 * span + 1)
}

/// What the device does with an offered action now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing yet, and why (said once in a feedback).
    Wait(String),
    /// Fetch the bundle.
    Download,
    /// The server wants the bundle downloaded only (`update: skip`): say `downloaded`.
    Downloaded,
    /// Apply it; `force` passes update locks (a `forced` update).
    Apply { force: bool },
}

/// What an action asks of a device that has (or has not) the bundle, whose packages hold
/// update locks (`locked`: why), and whose deferral for those locks has lasted
/// `deferred_ms` of `max_defer_ms`.
pub fn step(
    dep: &Deployment,
    downloaded: bool,
    locked: Option<&str>,
    deferred_ms: u64,
    max_defer_ms: u64,
) -> Step {
    if !downloaded {
        return match dep.download {
            Handling::Skip => Step::Wait("the server says: skip the download for now".into()),
            _ => Step::Download,
        };
    }
    // hawkBit outside a maintenance window: `update: skip` with the window unavailable.
    if dep.window == Some(false) {
        return Step::Wait("downloaded; waiting for the maintenance window".into());
    }
    // A download-only action.
    if dep.update == Handling::Skip {
        return Step::Downloaded;
    }
    match (dep.update, locked) {
        (Handling::Attempt, Some(why)) if deferred_ms < max_defer_ms => {
            Step::Wait(format!("deferred: {why}"))
        }
        (Handling::Attempt, Some(_)) => Step::Apply { force: true },
        (Handling::Forced, _) => Step::Apply { force: true },
        _ => Step::Apply { force: false },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleep_times() {
        assert_eq!(parse_sleep("00:05:00"), Some(300));
        assert_eq!(parse_sleep("12:00:00"), Some(43_200));
        assert_eq!(parse_sleep("00:00:10"), Some(10));
        for bad in [
            "",
            "5",
            "00:05",
            "00:60:00",
            "00:00:60",
            "a:b:c",
            "00:05:00:00",
            "-1:00:00",
        ] {
            assert_eq!(parse_sleep(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_hawkbit_base_resource() {
        let b = br#"{"config":{"polling":{"sleep":"00:05:00"}},"_links":{
            "deploymentBase":{"href":"http://h:8080/DEFAULT/controller/v1/dev1/deploymentBase/5?c=-2129030598"},
            "configData":{"href":"http://h:8080/DEFAULT/controller/v1/dev1/configData"}}}"#;
        let base = parse_base(b).unwrap();
        assert_eq!(base.sleep_s, Some(300));
        assert_eq!(
            action_id(base.deployment.as_deref().unwrap()).as_deref(),
            Some("5")
        );
        assert!(base.config_data.is_some());
        assert!(base.cancel.is_none());
        // gooseBit: no links at all.
        let g = parse_base(br#"{"config":{"polling":{"sleep":"00:00:10"}},"_links":{}}"#).unwrap();
        assert_eq!(
            g,
            Base {
                sleep_s: Some(10),
                ..Base::default()
            }
        );
        assert!(parse_base(b"[]").is_err());
        let e = parse_base(br#"{"config":{"polling":{"sleep":"5m"}}}"#).unwrap_err();
        assert!(e.to_string().contains("HH:MM:SS"), "{e}");
        assert_eq!(action_id("http://h/x/cancelAction/17"), Some("17".into()));
        assert_eq!(action_id("http://h/x/deploymentBase/.."), None);
        assert_eq!(action_id("http://h/x/deploymentBase/a%20b"), None);
    }

    #[test]
    fn a_hawkbit_deployment() {
        let b = br#"{"id":"8","deployment":{"download":"forced","update":"attempt",
          "maintenanceWindow":"unavailable","chunks":[{"part":"os","version":"42","name":"berth",
          "artifacts":[{"filename":"site.berth","hashes":{"sha1":"aa","md5":"bb",
            "sha256":"ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789"},"size":3,
            "_links":{"download":{"href":"https://h/a"},"download-http":{"href":"http://h/a"}}}]}]}}"#;
        let d = parse_deployment(b).unwrap();
        assert_eq!(d.id, "8");
        assert_eq!(
            (d.download, d.update, d.window),
            (Handling::Forced, Handling::Attempt, Some(false))
        );
        assert_eq!(d.version.as_deref(), Some("42"));
        let a = bundle_artifact(&d).unwrap();
        assert_eq!(a.href, "http://h/a");
        assert_eq!(a.secure_href.as_deref(), Some("https://h/a"));
        assert_eq!(a.size, Some(3));
        assert!(a.sha256.as_deref().unwrap().starts_with("abcdef"));
        // gooseBit's shape: numeric-looking string id, sha1 only, a `download` link.
        let g = br#"{"id":"3","deployment":{"download":"forced","update":"forced","chunks":[
          {"part":"os","version":"2","name":"b.swu","artifacts":[{"filename":"b.swu",
          "hashes":{"sha1":"0a"},"size":10,"_links":{"download":{"href":"http://g/d"}}}]}]}}"#;
        let d = parse_deployment(g).unwrap();
        assert_eq!(
            (d.window, bundle_artifact(&d).unwrap().sha256.clone()),
            (None, None)
        );
        for (body, says) in [
            (&br#"{"deployment":{}}"#[..], "no action id"),
            (br#"{"id":"1"}"#, "no deployment"),
            (
                br#"{"id":"1","deployment":{"update":"later"}}"#,
                "update \"later\"",
            ),
            (
                br#"{"id":"1","deployment":{"maintenanceWindow":"soon"}}"#,
                "maintenanceWindow",
            ),
            (
                br#"{"id":"1","deployment":{"chunks":[{"artifacts":[{"filename":"x"}]}]}}"#,
                "no download link",
            ),
        ] {
            let e = parse_deployment(body).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
        let two = br#"{"id":"1","deployment":{"chunks":[{"artifacts":[
          {"filename":"a.bin","_links":{"download":{"href":"http://x/a"}}},
          {"filename":"b.bin","_links":{"download":{"href":"http://x/b"}}}]}]}}"#;
        assert!(bundle_artifact(&parse_deployment(two).unwrap()).is_err());
    }

    #[test]
    fn cancel_and_bodies() {
        let (id, stop) = parse_cancel(br#"{"id":"11","cancelAction":{"stopId":"8"}}"#).unwrap();
        assert_eq!((id.as_str(), stop.as_str()), ("11", "8"));
        assert!(parse_cancel(br#"{"id":"11"}"#).is_err());
        assert!(parse_cancel(br#"{"id":"11","cancelAction":{"stopId":"../x"}}"#).is_err());
        assert!(parse_deployment(br#"{"id":"1/../2","deployment":{}}"#).is_err());
        assert!(parse_deployment(br#"{"id":"a\nb","deployment":{}}"#).is_err());
        let f: Value = serde_json::from_str(&feedback(
            Execution::Proceeding,
            Finished::None,
            Some((1, 3)),
            &["x".repeat(600)],
        ))
        .unwrap();
        assert_eq!(f["status"]["execution"], "proceeding");
        assert_eq!(f["status"]["result"]["progress"]["of"], 3);
        assert_eq!(
            f["status"]["details"][0].as_str().unwrap().len(),
            MAX_DETAIL
        );
        let mut attrs = BTreeMap::new();
        attrs.insert("sw_version".to_string(), "é".repeat(100));
        let c: Value = serde_json::from_str(&config_data(&attrs)).unwrap();
        assert_eq!(c["mode"], "replace");
        assert!(c["data"]["sw_version"].as_str().unwrap().len() <= 128);
    }

    #[test]
    fn controller_ids_hide_the_machine_id() {
        let a = controller_id("0123456789abcdef0123456789abcdef\n").unwrap();
        assert!(a.starts_with("berth-") && a.len() == 22, "{a}");
        assert!(!a.contains("0123456789abcdef"));
        assert_eq!(controller_id("0123456789abcdef0123456789abcdef"), Some(a));
        assert_ne!(controller_id("x"), controller_id("y"));
        assert_eq!(controller_id("  "), None);
    }

    #[test]
    fn polls_jitter_and_back_off() {
        for seed in [0, 1, 7, 59_999, u64::MAX] {
            let t = next_poll_ms(300_000, 0, 3_600_000, seed);
            assert!((270_000..=330_000).contains(&t), "{t}");
        }
        assert_ne!(
            next_poll_ms(300_000, 0, 3_600_000, 1),
            next_poll_ms(300_000, 0, 3_600_000, 2)
        );
        let backoff: Vec<u64> = (1..=10)
            .map(|f| next_poll_ms(300_000, f, 3_600_000, 0))
            .collect();
        // Never sooner than the sleep: 5 min, …, then 8 min, 16 min, …, 1 h.
        assert_eq!(backoff[0], 270_000);
        assert_eq!(backoff[5], 864_000);
        assert!(backoff.windows(2).all(|w| w[0] <= w[1]), "{backoff:?}");
        assert_eq!(*backoff.last().unwrap(), 3_240_000);
        // A short sleep backs off from 30 s.
        assert_eq!(next_poll_ms(2_000, 1, 3_600_000, 0), 27_000);
        // A sleep longer than the bound is kept as it is.
        assert_eq!(next_poll_ms(86_400_000, 30, 600_000, 0), 77_760_000);
    }

    fn dep(download: Handling, update: Handling, window: Option<bool>) -> Deployment {
        Deployment {
            id: "1".into(),
            download,
            update,
            window,
            version: None,
            artifacts: vec![],
        }
    }

    #[test]
    fn what_an_action_asks() {
        use Handling::*;
        let d = dep(Forced, Forced, None);
        assert_eq!(step(&d, false, None, 0, 0), Step::Download);
        assert_eq!(
            step(&d, true, Some("a holds a lock"), 0, 60_000),
            Step::Apply { force: true }
        );
        assert!(matches!(
            step(&dep(Skip, Forced, None), false, None, 0, 0),
            Step::Wait(_)
        ));
        assert_eq!(
            step(&dep(Attempt, Skip, None), true, None, 0, 0),
            Step::Downloaded
        );
        for update in [Forced, Skip] {
            let w = step(&dep(Forced, update, Some(false)), true, None, 0, 0);
            assert!(
                matches!(w, Step::Wait(ref m) if m.contains("maintenance window")),
                "{w:?}"
            );
        }
        assert_eq!(
            step(&dep(Forced, Attempt, Some(true)), true, None, 0, 0),
            Step::Apply { force: false }
        );
        let a = dep(Attempt, Attempt, None);
        let held = step(&a, true, Some("web holds an update lock"), 20_000, 60_000);
        assert_eq!(
            held,
            Step::Wait("deferred: web holds an update lock".into())
        );
        // The policy's bound: a lock defers an attempt, not for ever.
        assert_eq!(
            step(&a, true, Some("web"), 60_000, 60_000),
            Step::Apply { force: true }
        );
    }
}
