//! `berth schedule list|add|remove`: a container's cron jobs (docs/schedules.md).

use std::path::Path;

use anyhow::Result;
use berth_core::api::{last_run as run, schedule as field};
use serde_json::{json, Value};

use super::args::Schedules;
use super::render::{cell, table, Escaper};
use super::show;
use crate::client;

pub fn run(json: bool, sock: &Path, cmd: Schedules) -> Result<()> {
    let path = |name: &str| format!("/v1/containers/{name}/schedules");
    match cmd {
        Schedules::List(name) => {
            let v = client::call(sock, "GET", &path(&name), None)?;
            show(json, &v, &list);
        }
        Schedules::Add { name, cron, cmd } => {
            let body = json!({ field::CRON: cron, field::CMD: cmd });
            let v = client::call(sock, "POST", &path(&name), Some(&body))?;
            show(json, &v, &|v| {
                format!(
                    "added schedule {} to {name}; next run: {}\n",
                    cell(&v[field::ID]),
                    time(&v[field::NEXT_RUN])
                )
            });
        }
        Schedules::Remove { name, id } => {
            let v = client::call(sock, "DELETE", &format!("{}/{id}", path(&name)), None)?;
            show(json, &v, &|_| {
                format!("removed schedule {id} from {name}\n")
            });
        }
    }
    Ok(())
}

const HEAD: &[&str] = &[
    "ID",
    "ORIGIN",
    "CRON",
    "NEXT RUN (UTC)",
    "LAST RUN",
    "COMMAND",
];

fn time(v: &Value) -> String {
    v.as_u64()
        .map(berth_core::date::utc)
        .unwrap_or_else(|| "-".into())
}

/// How a run went, in a few words.
fn result(r: &Value) -> String {
    let mut s = match (&r[run::SKIPPED], &r[run::CODE], &r[run::SIGNAL]) {
        (Value::String(why), _, _) => return format!("skipped: {why}"),
        (_, Value::Number(c), _) => format!("exit {c}"),
        (_, _, Value::Number(s)) => format!("signal {s}"),
        _ => return "-".into(),
    };
    if r[run::TIMED_OUT] == true {
        s.push_str(" (timed out)");
    }
    s
}

/// `berth schedule list NAME`: a table, its control characters escaped (commands and
/// reasons come from a container).
fn list(v: &Value) -> String {
    let mut rows = Vec::new();
    for s in v[field::SCHEDULES].as_array().into_iter().flatten() {
        let mut cmd = String::new();
        for a in s[field::CMD].as_array().into_iter().flatten() {
            cmd.push_str(a.as_str().unwrap_or(""));
            cmd.push(' ');
        }
        rows.push(vec![
            cell(&s[field::ID]),
            cell(&s[field::ORIGIN]),
            cell(&s[field::CRON]),
            time(&s[field::NEXT_RUN]),
            result(&s[field::LAST_RUN]),
            cmd,
        ]);
    }
    let mut out = Vec::new();
    let mut esc = Escaper::default();
    esc.feed(table(HEAD, rows).as_bytes(), &mut out);
    esc.finish(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_for_people() {
        let v = json!({"schedules": [
            {"id": "m0a1b2c3", "origin": "manifest", "cron": "@daily", "cmd": ["/bin/rotate"],
             "next_run": 1_767_312_000, "last_run": null},
            {"id": "a1", "origin": "api", "cron": "*/5 * * * *", "cmd": ["/bin/sh", "-c", "echo \u{1b}[2J"],
             "next_run": 1_767_225_900,
             "last_run": {"time": 1_767_225_600, "code": 0, "signal": null, "duration_ms": 12, "catch_up": true, "started": true}},
            {"id": "a2", "origin": "api", "cron": "@reboot", "cmd": ["/bin/x"], "next_run": null,
             "last_run": {"time": 1_767_225_600, "skipped": "safe mode (operator)"}},
            {"id": "a3", "origin": "api", "cron": "* * * * *", "cmd": ["/bin/x"], "next_run": 1,
             "last_run": {"time": 1, "code": null, "signal": 9, "timed_out": true, "duration_ms": 55000}},
        ]});
        let text = list(&v);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("  ID  "), "{text}");
        assert!(
            lines[1].contains("m0a1b2c3  manifest  @daily")
                && lines[1].contains("2026-01-02 00:00 UTC"),
            "{text}"
        );
        assert!(lines[2].contains("exit 0"), "{text}");
        assert!(lines[2].contains("echo \\x1b[2J"), "escaped: {text}");
        assert!(lines[3].contains("skipped: safe mode (operator)"), "{text}");
        assert!(lines[4].contains("signal 9 (timed out)"), "{text}");
        assert_eq!(list(&json!({"schedules": []})), "  (none)\n");
    }
}
