//! api: the container API's latency and throughput (issue 16), in its own sandbox and daemon.
//!
//! A client process is put into a container's memory cgroup (which is what the daemon checks
//! the peer by, with the socket it came on) and makes requests one after another on the
//! container's socket, each on a new connection, timing each from connect to the end of the
//! answer. Two requests: `POST /v1/self/ready` (the lightest: the caller's run is looked up
//! and the supervisor told) and `GET /v1/self` (status, usage and permissions). Then 20
//! containers, one such client each, all at once. The containers' pace is lifted (`[api]
//! rate`) so that the daemon's own capacity shows, not the policy's.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Instant;

use berth_testkit::Pkg;
use serde_json::{json, Value};

use super::{Ctx, Suite};
use crate::report::{ms, Section, SuiteOutput, Table};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::util::{progress, Result};

/// The hidden subcommand of berth-bench that is the client.
pub const CLIENT: &str = "__api-client";

pub struct Api;

const MANY: usize = 20;

fn package(name: &str) -> Pkg {
    let mut p = Pkg::new(name, "1", &["/bin/busybox", "sh", "/run.sh"])
        .file("run.sh", b"echo up\nexec /bin/busybox sleep 100000\n")
        .table("[permissions]\napi = [\"status\"]\n[network]\nmode = \"none\"\n");
    p.description = "berth-bench payload".into();
    p.applets = &[];
    p
}

/// `berth-bench __api-client SOCKET METHOD PATH N`: N requests, one per connection; prints
/// each one's time in microseconds as a JSON array, or fails at the first non-2xx answer.
pub fn client(args: &[String]) -> i32 {
    let [sock, method, path, n] = args else {
        eprintln!("usage: berth-bench {CLIENT} SOCKET METHOD PATH N");
        return 2;
    };
    let n: usize = n.parse().unwrap_or(0);
    let req = format!("{method} {path} HTTP/1.1\r\nHost: berth\r\nContent-Length: 0\r\n\r\n");
    let mut times = Vec::with_capacity(n);
    let mut buf = Vec::with_capacity(4096);
    for _ in 0..n {
        let t0 = Instant::now();
        let answer = UnixStream::connect(sock).and_then(|mut s| {
            s.write_all(req.as_bytes())?;
            buf.clear();
            s.read_to_end(&mut buf)?;
            Ok(())
        });
        times.push(t0.elapsed().as_micros() as u64);
        if let Err(e) = answer {
            eprintln!("{sock}: {e}");
            return 1;
        }
        if !buf.starts_with(b"HTTP/1.1 2") {
            eprintln!("{method} {path}: {}", String::from_utf8_lossy(&buf));
            return 1;
        }
    }
    println!("{}", json!(times));
    0
}

/// The memory cgroup's `cgroup.procs` of a running container (v1 memory, else v2).
fn procs_file(init: i64) -> Result<PathBuf> {
    let cg = std::fs::read_to_string(format!("/proc/{init}/cgroup"))
        .map_err(|e| format!("/proc/{init}/cgroup: {e}"))?;
    let v2 = !cg.lines().any(|l| l.split(':').nth(1) == Some("memory"));
    cg.lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
            match ctrl {
                "memory" => Some(PathBuf::from(format!(
                    "/sys/fs/cgroup/memory{path}/cgroup.procs"
                ))),
                "" if v2 => {
                    let root = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
                        .into_iter()
                        .find(|r| Path::new(r).join("cgroup.controllers").exists())?;
                    Some(PathBuf::from(format!("{root}{path}/cgroup.procs")))
                }
                _ => None,
            }
        })
        .ok_or_else(|| format!("no memory cgroup for pid {init}").into())
}

/// Starts a client in `name`'s container's memory cgroup.
fn spawn_client(
    sb: &Sandbox,
    name: &str,
    method: &str,
    path: &str,
    n: usize,
) -> Result<std::process::Child> {
    let sock = sb.cfg.paths.api_dir(name).join("api.sock");
    let sock = sock.display().to_string();
    spawn_in(sb, name, CLIENT, &[&sock, method, path, &n.to_string()])
}

/// Starts berth-bench's hidden `subcommand` with `args` in `name`'s container's memory
/// cgroup (the daemon takes a peer in it for that container), its output piped.
pub fn spawn_in(
    sb: &Sandbox,
    name: &str,
    subcommand: &str,
    args: &[&str],
) -> Result<std::process::Child> {
    let init = sb.json(&["status", name])?["containers"][0]["init_pid"]
        .as_i64()
        .ok_or_else(|| format!("{name} is not running"))?;
    let procs = procs_file(init)?;
    let me = std::env::current_exe().map_err(|e| format!("berth-bench's own path: {e}"))?;
    std::process::Command::new("sh")
        .arg("-c")
        .arg("echo $$ > \"$1\" && shift && exec \"$@\"")
        .args(["sh"])
        .arg(&procs)
        .arg(&me)
        .arg(subcommand)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("start {subcommand}: {e}").into())
}

fn collect(c: std::process::Child, what: &str) -> Result<Vec<f64>> {
    let out = c.wait_with_output().map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{what}: {}", String::from_utf8_lossy(&out.stderr).trim()).into());
    }
    let v: Vec<u64> = serde_json::from_slice(&out.stdout).map_err(|e| format!("{what}: {e}"))?;
    Ok(v.into_iter().map(|us| us as f64 / 1000.0).collect())
}

impl Suite for Api {
    fn name(&self) -> &'static str {
        "api"
    }

    fn prepare(&mut self, _sb: &Sandbox) -> Result<Vec<PkgSpec>> {
        Ok(Vec::new())
    }

    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput> {
        let n = ctx.runs_given.unwrap_or(if ctx.quick { 200 } else { 2000 });
        let extra = format!(
            "{}[api]\nrate = 10000\nburst = 10000\n",
            crate::sandbox::UNCAPPED_POLICY
        );
        let mut sb = ctx.sb.nested("api", "2s", &extra)?;
        let names: Vec<String> = (0..MANY).map(|i| format!("api-{i:02}")).collect();
        for name in &names {
            sb.pack_pkg(&package(name))?;
        }
        sb.build_repo()?;
        sb.start_daemon()?;
        sb.ok(&["update"])?;
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut install = vec!["install"];
        install.extend(&refs);
        sb.ok(&install)?;
        for name in &names {
            sb.ok(&["start", name])?;
        }
        let one = &names[0];
        let mut rows = Vec::new();
        for (method, path) in [("POST", "/v1/self/ready"), ("GET", "/v1/self")] {
            progress!("api: {method} {path}, one container, {n} requests");
            let t0 = Instant::now();
            let times = collect(spawn_client(&sb, one, method, path, n)?, path)?;
            let secs = t0.elapsed().as_secs_f64();
            rows.push((
                format!("{method} {path}, 1 container"),
                times,
                n as f64 / secs,
            ));
        }
        progress!("api: GET /v1/self, {MANY} containers at once, {n} requests each");
        let t0 = Instant::now();
        let clients: Vec<_> = names
            .iter()
            .map(|name| spawn_client(&sb, name, "GET", "/v1/self", n))
            .collect::<Result<_>>()?;
        let mut all = Vec::new();
        for c in clients {
            all.extend(collect(c, "/v1/self")?);
        }
        let secs = t0.elapsed().as_secs_f64();
        rows.push((
            format!("GET /v1/self, {MANY} containers at once"),
            all,
            (n * MANY) as f64 / secs,
        ));
        for name in &names {
            let _ = sb.ok(&["stop", "-t", "1", name]);
        }
        Ok(output(n, &rows))
    }
}

fn pct(xs: &[f64], p: f64) -> f64 {
    let mut s: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

fn output(n: usize, rows: &[(String, Vec<f64>, f64)]) -> SuiteOutput {
    let mut t = Table::new(&["requests", "n", "p50 ms", "p99 ms", "max ms", "requests/s"]);
    let mut raw = serde_json::Map::new();
    for (what, xs, rate) in rows {
        t.row(vec![
            what.clone(),
            xs.len().to_string(),
            ms(pct(xs, 0.5)),
            ms(pct(xs, 0.99)),
            ms(pct(xs, 1.0)),
            format!("{rate:.0}"),
        ]);
        raw.insert(
            what.clone(),
            json!({"ms": xs, "p50_ms": pct(xs, 0.5), "p99_ms": pct(xs, 0.99), "per_s": rate}),
        );
    }
    SuiteOutput {
        name: "api",
        sections: vec![Section {
            title: "container API: latency and throughput".into(),
            table: t,
            notes: vec![
                format!("{n} requests per client, one after another, each on a new connection to the container's own socket, timed from connect to the end of the answer; the client runs in the container's memory cgroup, as the daemon checks"),
                "the containers' pace is lifted for this suite ([api] rate = 10000): the default policy lets a container make 20 requests a second, 40 at once".into(),
                "each request gets a thread of its own in the daemon (at most 4 per container and 16 in all), which gives back its heap and the code pages it touched when it ends".into(),
            ],
        }],
        raw: Value::Object(raw),
    }
}
