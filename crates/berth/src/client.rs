//! The CLI's side of the admin socket.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use anyhow::{anyhow, bail, Result};
use berth_core::api::{error, install};
use berth_core::http;
use serde_json::Value;

/// The daemon is not running: the CLI says so and exits with this code.
pub const EXIT_NO_DAEMON: i32 = 3;

#[derive(Debug)]
pub struct NoDaemon(pub String);
impl std::fmt::Display for NoDaemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for NoDaemon {}

/// An error answer from the daemon.
#[derive(Debug)]
pub struct DaemonError {
    pub status: u16,
    pub code: String,
    pub message: String,
}
impl std::fmt::Display for DaemonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
impl std::error::Error for DaemonError {}

fn connect(sock: &Path) -> Result<UnixStream> {
    UnixStream::connect(sock).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                format!("nothing listens on {}", sock.display())
            }
            std::io::ErrorKind::PermissionDenied => {
                return anyhow!(
                    "permission denied on {}: the admin socket is for root",
                    sock.display()
                )
            }
            _ => format!("{}: {e}", sock.display()),
        };
        anyhow!(NoDaemon(format!(
            "the berth daemon is not running ({why}); start it with `berth daemon` (as root, e.g. from your init system)"
        )))
    })
}

/// Sends a request; returns the status and a reader positioned at the body.
pub fn send(
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, BufReader<UnixStream>)> {
    send_head(sock, method, path, body).map(|(h, r)| (h.status, r))
}

/// Sends a request; returns the answer's head and a reader positioned at the body.
pub fn send_head(
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(http::ResponseHead, BufReader<UnixStream>)> {
    let mut s = connect(sock)?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: berth\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())?;
    let mut r = BufReader::new(s);
    let mut head = Vec::new();
    loop {
        let n = r.read_until(b'\n', &mut head)?;
        if n == 0 {
            bail!("the daemon closed the connection without answering (did it crash? see its log)");
        }
        if head.ends_with(b"\r\n\r\n") {
            break;
        }
    }
    let (answer, _) = http::parse_response_head(&head)
        .ok()
        .flatten()
        .ok_or_else(|| anyhow!("malformed answer from the daemon"))?;
    Ok((answer, r))
}

pub fn error_from(status: u16, v: &Value) -> anyhow::Error {
    anyhow!(DaemonError {
        status,
        code: v[error::CODE].as_str().unwrap_or("error").to_string(),
        message: v[error::ERROR]
            .as_str()
            .unwrap_or("the daemon reported an error")
            .to_string(),
    })
}

/// A request with a JSON answer.
pub fn call(sock: &Path, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
    let (status, mut r) = send(sock, method, path, body)?;
    let mut text = String::new();
    r.read_to_string(&mut text)?;
    let v: Value =
        serde_json::from_str(&text).map_err(|e| anyhow!("malformed JSON from the daemon: {e}"))?;
    if status != 200 {
        return Err(error_from(status, &v));
    }
    Ok(v)
}

/// A request whose answer is a stream of JSON lines; `on_event` sees each; the last one
/// (`done` or `error`) decides the result.
pub fn call_stream(
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<&Value>,
    on_event: &mut dyn FnMut(&Value),
) -> Result<Value> {
    let (status, r) = send(sock, method, path, body)?;
    if status != 200 {
        let mut text = String::new();
        let mut r = r;
        r.read_to_string(&mut text)?;
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        return Err(error_from(status, &v));
    }
    for line in r.lines() {
        let line = line?;
        let v: Value = serde_json::from_str(&line)
            .map_err(|e| anyhow!("malformed event from the daemon: {e}"))?;
        match v[install::EVENT].as_str() {
            Some("done") => return Ok(v[install::RESULT].clone()),
            Some("error") => {
                return Err(error_from(
                    v[install::STATUS].as_u64().unwrap_or(500) as u16,
                    &v,
                ))
            }
            _ => on_event(&v),
        }
    }
    bail!("the daemon stopped answering in the middle of the operation (did it crash? run berth status)")
}
