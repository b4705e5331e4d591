//! The boot counter and safe mode, as pure decisions: the daemon hands in the text of
//! `<state>/boot.json` (and of the safe-mode marker), this module says what it means and what
//! to write back; the files, the clock and the timer stay in the daemon.
//!
//! Every daemon start is unconfirmed until it has stayed up (and healthy) for `[boot]
//! confirm_after`; then the list of unconfirmed starts is emptied. A start that finds
//! `max_failed` unconfirmed starts before it is in safe mode: the reason (how many, which
//! containers ran in them) goes into the marker, which only the operator removes.
//!
//! Both files are read as JSON `Value`s by hand: derived serde code for three small records
//! would cost the device binary more than these lines.

use serde_json::{json, Value};

/// The format of `boot.json` this berth writes and reads.
pub const FORMAT: u64 = 1;

/// How many unconfirmed starts the file keeps at most: more say nothing new, and the file
/// must stay small whatever a broken device does.
pub const MAX_KEPT: usize = 100;

/// How many container names one start keeps at most (one per installed package, normally).
const MAX_NAMES: usize = 64;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BootError {
    #[error("boot counter is damaged: {0}")]
    Damaged(String),
    #[error("boot counter has format {0}; this berth reads format {FORMAT}")]
    Format(u64),
    #[error("safe-mode marker is damaged: {0}")]
    Marker(String),
}

/// One daemon start not confirmed (yet).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Start {
    /// When it started, seconds since the epoch.
    pub at: u64,
    /// The containers that ran during it (taken over or started), in the order seen.
    pub containers: Vec<String>,
}

/// `boot.json`: the starts since the last confirmed one, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    pub unconfirmed: Vec<Start>,
}

/// What a daemon start does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Start normally; write this record (it holds this start, unconfirmed).
    Normal(Record),
    /// Start in safe mode for this reason; write the marker, and an empty record (the
    /// starts it counted are in the reason now).
    SafeMode { reason: String },
}

impl Record {
    pub fn parse(text: &str) -> Result<Record, BootError> {
        let v: Value = serde_json::from_str(text).map_err(|e| BootError::Damaged(e.to_string()))?;
        let damaged = |m: &str| BootError::Damaged(m.to_string());
        let o = v.as_object().ok_or_else(|| damaged("expected an object"))?;
        match o.get("format").and_then(Value::as_u64) {
            Some(FORMAT) => {}
            Some(f) => return Err(BootError::Format(f)),
            None => return Err(damaged("no format")),
        }
        let starts = o
            .get("unconfirmed")
            .and_then(Value::as_array)
            .ok_or_else(|| damaged("no list of unconfirmed starts"))?;
        let mut unconfirmed = Vec::with_capacity(starts.len().min(MAX_KEPT));
        for s in starts {
            let at = s["at"]
                .as_u64()
                .ok_or_else(|| damaged("a start without its time"))?;
            let names = s["containers"]
                .as_array()
                .ok_or_else(|| damaged("a start without its containers"))?;
            let mut containers = Vec::new();
            for n in names {
                let n = n
                    .as_str()
                    .ok_or_else(|| damaged("a container name is not a string"))?;
                // Names go into messages: only what a package name can be.
                crate::name::Name::parse(n)
                    .map_err(|e| BootError::Damaged(format!("container {n:?}: {e}")))?;
                containers.push(n.to_string());
            }
            unconfirmed.push(Start { at, containers });
        }
        let keep_from = unconfirmed.len().saturating_sub(MAX_KEPT);
        unconfirmed.drain(..keep_from);
        Ok(Record { unconfirmed })
    }

    pub fn to_json(&self) -> Vec<u8> {
        let starts: Vec<Value> = self
            .unconfirmed
            .iter()
            .map(|s| json!({"at": s.at, "containers": s.containers}))
            .collect();
        json!({"format": FORMAT, "unconfirmed": starts})
            .to_string()
            .into_bytes()
    }

    /// Notes that `name` ran during the newest start; whether that changed the record.
    pub fn note(&mut self, name: &str) -> bool {
        match self.unconfirmed.last_mut() {
            Some(s)
                if !s.containers.iter().any(|n| n == name) && s.containers.len() < MAX_NAMES =>
            {
                s.containers.push(name.to_string());
                true
            }
            _ => false,
        }
    }
}

/// What a daemon start at `now` does, given the record it found (`None`: none, or damaged:
/// the caller has logged why) and `[boot] max_failed`.
pub fn decide(found: Option<Record>, max_failed: u32, confirm_after_ms: u64, now: u64) -> Decision {
    let mut r = found.unwrap_or_default();
    if r.unconfirmed.len() >= max_failed as usize {
        return Decision::SafeMode {
            reason: reason(&r.unconfirmed, confirm_after_ms),
        };
    }
    r.unconfirmed.push(Start {
        at: now,
        containers: Vec::new(),
    });
    let keep_from = r.unconfirmed.len().saturating_sub(MAX_KEPT);
    r.unconfirmed.drain(..keep_from);
    Decision::Normal(r)
}

/// Why safe mode: the operator reads this in `berth status`.
pub fn reason(starts: &[Start], confirm_after_ms: u64) -> String {
    let mut names: Vec<&str> = starts
        .iter()
        .flat_map(|s| s.containers.iter().map(String::as_str))
        .collect();
    names.sort_unstable();
    names.dedup();
    let ran = if names.is_empty() {
        "no container ran in them".to_string()
    } else {
        format!("containers running in them: {}", names.join(", "))
    };
    format!(
        "{} daemon starts in a row did not stay up {} ([boot] confirm_after); {ran}",
        starts.len(),
        human_ms(confirm_after_ms)
    )
}

fn human_ms(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

/// The safe-mode marker (`<state>/safe-mode.json`): present means safe mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// Since when, seconds since the epoch.
    pub since: u64,
    pub reason: String,
}

impl Marker {
    pub fn parse(text: &str) -> Result<Marker, BootError> {
        let v: Value = serde_json::from_str(text).map_err(|e| BootError::Marker(e.to_string()))?;
        match (v["since"].as_u64(), v["reason"].as_str()) {
            (Some(since), Some(reason)) => Ok(Marker {
                since,
                reason: reason.to_string(),
            }),
            _ => Err(BootError::Marker("expected since and reason".into())),
        }
    }

    pub fn to_json(&self) -> Vec<u8> {
        json!({"since": self.since, "reason": self.reason})
            .to_string()
            .into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(at: u64, names: &[&str]) -> Start {
        Start {
            at,
            containers: names.iter().map(|n| n.to_string()).collect(),
        }
    }

    #[test]
    fn a_record_reads_back_what_it_wrote() {
        let r = Record {
            unconfirmed: vec![start(10, &["web"]), start(20, &[])],
        };
        let text = String::from_utf8(r.to_json()).unwrap();
        assert_eq!(Record::parse(&text).unwrap(), r);
        assert_eq!(
            Record::parse(r#"{"format":1,"unconfirmed":[]}"#).unwrap(),
            Record::default()
        );
    }

    #[test]
    fn damaged_records_are_errors_never_panics() {
        for (text, needle) in [
            ("", "damaged"),
            ("{", "damaged"),
            ("[]", "expected an object"),
            (r#"{"unconfirmed":[]}"#, "no format"),
            (r#"{"format":2,"unconfirmed":[]}"#, "format 2"),
            (r#"{"format":1}"#, "no list"),
            (r#"{"format":1,"unconfirmed":[{"containers":[]}]}"#, "time"),
            (r#"{"format":1,"unconfirmed":[{"at":1}]}"#, "containers"),
            (
                r#"{"format":1,"unconfirmed":[{"at":1,"containers":[3]}]}"#,
                "not a string",
            ),
            (
                r#"{"format":1,"unconfirmed":[{"at":1,"containers":["../x"]}]}"#,
                "../x",
            ),
            ("\0\u{1}garbage", "damaged"),
        ] {
            let e = Record::parse(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_long_record_keeps_the_newest_starts() {
        let starts: Vec<String> = (0..150)
            .map(|i| format!(r#"{{"at":{i},"containers":[]}}"#))
            .collect();
        let text = format!(r#"{{"format":1,"unconfirmed":[{}]}}"#, starts.join(","));
        let r = Record::parse(&text).unwrap();
        assert_eq!(r.unconfirmed.len(), MAX_KEPT);
        assert_eq!(r.unconfirmed[0].at, 50);
    }

    #[test]
    fn starts_count_until_max_failed_then_safe_mode() {
        let max = 5;
        let mut found = None;
        for i in 0..max {
            match decide(found.take(), max, 30_000, 100 + i as u64) {
                Decision::Normal(mut r) => {
                    assert_eq!(r.unconfirmed.len(), i as usize + 1);
                    assert_eq!(r.unconfirmed.last().unwrap().at, 100 + i as u64);
                    r.note("web");
                    found = Some(r);
                }
                d => panic!("start {i}: {d:?}"),
            }
        }
        match decide(found, max, 30_000, 200) {
            Decision::SafeMode { reason } => assert_eq!(
                reason,
                "5 daemon starts in a row did not stay up 30 s ([boot] confirm_after); containers running in them: web"
            ),
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn a_missing_or_damaged_counter_starts_afresh() {
        assert_eq!(
            decide(None, 1, 1000, 7),
            Decision::Normal(Record {
                unconfirmed: vec![start(7, &[])]
            })
        );
        let one = Record {
            unconfirmed: vec![start(1, &[])],
        };
        assert!(matches!(
            decide(Some(one), 1, 1500, 7),
            Decision::SafeMode { reason } if reason.contains("1 daemon starts") && reason.contains("1500 ms") && reason.contains("no container ran")
        ));
    }

    #[test]
    fn notes_go_to_the_newest_start_once() {
        let mut r = Record {
            unconfirmed: vec![start(1, &["a"]), start(2, &[])],
        };
        assert!(r.note("b"));
        assert!(!r.note("b"));
        assert_eq!(r.unconfirmed[1].containers, ["b"]);
        assert_eq!(r.unconfirmed[0].containers, ["a"]);
        assert!(!Record::default().note("x"), "no start to note it in");
        assert_eq!(
            reason(&r.unconfirmed, 120_000),
            "2 daemon starts in a row did not stay up 120 s ([boot] confirm_after); containers running in them: a, b"
        );
    }

    #[test]
    fn the_marker_reads_back_and_refuses_damage() {
        let m = Marker {
            since: 5,
            reason: "entered by the operator".into(),
        };
        let text = String::from_utf8(m.to_json()).unwrap();
        assert_eq!(Marker::parse(&text).unwrap(), m);
        for bad in ["", "{}", r#"{"since":"x","reason":"r"}"#, "[1]"] {
            assert!(Marker::parse(bad).is_err(), "{bad}");
        }
    }
}
