//! `start`, `stop`, `restart`, `reset`, `status`, `logs`, `inspect`, `bind`, `unbind`: the
//! containers' lifecycle, what they say, and the packages bound into them.

use std::io::{BufRead, Read, Write};
use std::path::Path;

use anyhow::{bail, Result};
use berth_core::api::{error, request};
use serde_json::{json, Value};

use super::args::Containers;
use super::render::{self, cell, Escaper};
use super::{print_json, show};
use crate::client::{self, DaemonError};

pub fn run(json: bool, sock: &Path, cmd: Containers) -> Result<()> {
    match cmd {
        Containers::Start { name, trace } => start(json, sock, &name, false, trace),
        Containers::Restart(name) => start(json, sock, &name, true, false),
        Containers::Reset(name) => {
            let v = client::call(
                sock,
                "POST",
                "/v1/reset",
                Some(&json!({ request::NAME: name })),
            )?;
            show(json, &v, &|v| render::reset(&name, v));
            Ok(())
        }
        Containers::Stop { name, timeout } => {
            let body = json!({request::NAME: name, request::TIMEOUT: timeout});
            let v = client::call(sock, "POST", "/v1/stop", Some(&body))?;
            show(json, &v, &|v| render::stopped(&name, v));
            Ok(())
        }
        Containers::StopAll { timeout } => stop_all(json, sock, timeout),
        Containers::Status(name) => {
            let path = match name {
                None => "/v1/status".to_string(),
                Some(n) => format!("/v1/status?name={n}"),
            };
            let v = client::call(sock, "GET", &path, None)?;
            let now = berth_sys::process::now_s();
            show(json, &v, &|v| render::status(v, now));
            Ok(())
        }
        Containers::Logs { name, follow, raw } => logs(json, sock, &name, follow, raw),
        Containers::Bind {
            package,
            container,
            at,
            persist,
        } => {
            use berth_core::api::bind as f;
            let body = json!({f::PACKAGE: package, f::CONTAINER: container, f::AT: at, f::PERSIST: persist});
            let v = client::call(sock, "POST", "/v1/bind", Some(&body))?;
            show(json, &v, &render::bound);
            Ok(())
        }
        Containers::Unbind { package, container } => {
            use berth_core::api::bind as f;
            let body = json!({f::PACKAGE: package, f::CONTAINER: container});
            let v = client::call(sock, "POST", "/v1/unbind", Some(&body))?;
            show(json, &v, &render::unbound);
            Ok(())
        }
        Containers::Inspect(name) => {
            let v = client::call(sock, "GET", &format!("/v1/inspect?name={name}"), None)?;
            // JSON for people too: the structure is the information (and a table printer
            // would cost the device binary more than it gives).
            print_json(&v);
            Ok(())
        }
    }
}

/// `berth stop --all`: each container that is not stopped or failed, one after another (a
/// backoff's pending restart is cancelled too). Every one is tried; the first error is
/// reported after the others were stopped.
fn stop_all(json: bool, sock: &Path, timeout: Option<u32>) -> Result<()> {
    use berth_core::api::{container, status};
    let v = client::call(sock, "GET", "/v1/status", None)?;
    let names: Vec<String> = v[status::CONTAINERS]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| !matches!(c[container::STATE].as_str(), Some("stopped" | "failed")))
        .filter_map(|c| c[container::NAME].as_str().map(String::from))
        .collect();
    let mut stopped = Vec::new();
    let mut first_error = None;
    for name in names {
        let body = json!({request::NAME: name, request::TIMEOUT: timeout});
        match client::call(sock, "POST", "/v1/stop", Some(&body)) {
            Ok(v) => {
                if !json {
                    say!("{}", render::stopped(&name, &v));
                }
                stopped.push(json!({"name": name, "result": v}));
            }
            Err(e) => {
                warnln!("berth: stop {name}: {e:#}");
                first_error.get_or_insert(e);
            }
        }
    }
    if json {
        print_json(&json!({ "stopped": stopped }));
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// `berth safe-mode enter|clear`.
pub fn safe_mode(json: bool, sock: &Path, enter: bool) -> Result<()> {
    let path = if enter {
        "/v1/safe-mode/enter"
    } else {
        "/v1/safe-mode/clear"
    };
    let v = client::call(sock, "POST", path, None)?;
    show(json, &v, &render::safe_mode);
    Ok(())
}

fn start(json: bool, sock: &Path, name: &str, restart: bool, trace: bool) -> Result<()> {
    let path = if restart { "/v1/restart" } else { "/v1/start" };
    let body = if trace {
        json!({ request::NAME: name, request::TRACE: true })
    } else {
        json!({ request::NAME: name })
    };
    let v = client::call(sock, "POST", path, Some(&body))?;
    show(json, &v, &|v| render::started(name, restart, v));
    Ok(())
}

fn logs(json: bool, sock: &Path, name: &str, follow: bool, raw: bool) -> Result<()> {
    let follow = if follow { "&follow=1" } else { "" };
    let (status, mut r) =
        client::send(sock, "GET", &format!("/v1/logs?name={name}{follow}"), None)?;
    if status != 200 {
        let mut t = String::new();
        r.read_to_string(&mut t)?;
        let v: Value = serde_json::from_str(&t).unwrap_or(Value::Null);
        bail!(DaemonError {
            status,
            code: cell(&v[error::CODE]),
            message: cell(&v[error::ERROR])
        });
    }
    if json {
        json_lines(name, &mut r)
    } else {
        escaped(&mut r, raw)
    }
}

/// One JSON object per output line, as it comes (with -f, until the end).
fn json_lines(name: &str, r: &mut impl BufRead) -> Result<()> {
    let mut out = std::io::stdout();
    let mut line = Vec::new();
    loop {
        line.clear();
        // A line is cut at 64 KiB: a container that never writes a newline must not make
        // the CLI grow without bound.
        if (&mut *r).take(64 * 1024).read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&line);
        let v = json!({"name": name, "line": text.trim_end_matches(['\n', '\r'])});
        if let Err(e) = writeln!(out, "{v}") {
            super::unwritten(e);
            return Ok(());
        }
        if let Err(e) = out.flush() {
            super::unwritten(e);
            return Ok(());
        }
    }
}

/// A container's output is hostile input for the operator's terminal: escape sequences could
/// retitle it, clear it, or worse. Shown escaped unless `raw`.
fn escaped(r: &mut impl Read, raw: bool) -> Result<()> {
    let mut out = std::io::stdout();
    let mut buf = [0u8; 8192];
    let mut esc = Escaper::default();
    let mut shown = Vec::with_capacity(4 * buf.len());
    loop {
        let n = r.read(&mut buf)?;
        let chunk: &[u8] = if raw {
            &buf[..n]
        } else {
            shown.clear();
            if n == 0 {
                esc.finish(&mut shown);
            } else {
                esc.feed(&buf[..n], &mut shown);
            }
            &shown
        };
        // Flushed each time, the last chunk too: a full disk is named, never lost at exit.
        if let Err(e) = out.write_all(chunk).and_then(|()| out.flush()) {
            super::unwritten(e);
            return Ok(());
        }
        if n == 0 {
            return Ok(());
        }
    }
}
