//! Command-line parsing and output: readable tables for people, `--json` for machines.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use berth_core::config::{Config, DEFAULT_CONFIG_PATH};
use serde_json::{json, Value};

use crate::client::{self, DaemonError, NoDaemon, EXIT_NO_DAEMON};

const USAGE: &str = "\
usage: berth [--config FILE] [--json] COMMAND [ARGS]

device:
  daemon                     run the supervisor (root; keeps containers across restarts)
  update [--reset-serial]    fetch and verify the repository index (--reset-serial: accept a
                             lower serial once, to switch to another repository)
  list [--installed|--available|--upgradable]
  install NAME...            install packages and their dependencies
  remove [--purge] NAME...   remove packages (--purge also deletes their /data)
  start NAME | stop [-t SECS] NAME | restart NAME
  status [NAME]              containers, their state and last exit
  logs [-f] [--raw] NAME     a container's output (-f: follow; control characters are
                             shown escaped, as \x1b, unless --raw)
  limit NAME [--cpu P%] [--memory SIZE] [--pids N]
                             change a container's limits, running or not (--cpu: percent
                             of one CPU); kept for the next start; no option: show them
  stats [NAME]               CPU %, memory, pids, throttling, OOM kills (group and containers)
  inspect NAME               capabilities, seccomp profile, devices, id map in force (JSON)
  net [hosts]                containers' addresses, published ports, drop counters;
                             hosts: the LAN's hosts (neighbour table, DHCP leases)
  governor                   the adaptive CPU cap: R_n, R_c, the cap, its mode and history
  gc                         delete store images that nothing uses
  check                      kernel features berth uses, present or not

vendor:
  key generate -o PREFIX [--comment TEXT]   ed25519 key pair (signify/usign format)
  pack DIR -o FILE                          build a package image with mksquashfs
  repo build DIR --key SECKEY [--valid-for DURATION]
                                            write and sign DIR/index.json (valid for
                                            DURATION: 90m, 12h, 30d; default: no expiry)

--config defaults to $BERTH_CONFIG or /etc/berth/berth.toml.
exit status: 0 ok, 1 error, 2 usage, 3 daemon not running.";

struct Global {
    config: PathBuf,
    json: bool,
}

pub fn main(args: Vec<String>) -> i32 {
    let mut g = Global {
        config: std::env::var_os("BERTH_CONFIG")
            .map(PathBuf::from)
            .unwrap_or_else(|| DEFAULT_CONFIG_PATH.into()),
        json: false,
    };
    // Global flags may stand anywhere; the rest is the command and its arguments.
    let mut rest = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => g.json = true,
            "--config" => match it.next() {
                Some(p) => g.config = p.into(),
                None => return usage_error("--config needs a file"),
            },
            "-h" | "--help" | "help" if rest.is_empty() => {
                println!("{USAGE}");
                return 0;
            }
            _ => rest.push(a),
        }
    }
    if rest.is_empty() {
        return usage_error("no command given");
    }
    match run(&g, &rest) {
        Ok(code) => code,
        Err(e) => {
            let code = if e.downcast_ref::<NoDaemon>().is_some() {
                EXIT_NO_DAEMON
            } else if e.downcast_ref::<Usage>().is_some() {
                2
            } else {
                1
            };
            if g.json {
                let (status, kind) = match e.downcast_ref::<DaemonError>() {
                    Some(d) => (d.status, d.code.clone()),
                    None if code == EXIT_NO_DAEMON => (0, "no_daemon".to_string()),
                    None if code == 2 => (0, "usage".to_string()),
                    None => (0, "error".to_string()),
                };
                println!(
                    "{}",
                    json!({"error": format!("{e:#}"), "code": kind, "status": status})
                );
            }
            eprintln!("berth: error: {e:#}");
            if code == 2 {
                eprintln!("(berth --help lists the commands)");
            }
            code
        }
    }
}

fn usage_error(msg: &str) -> i32 {
    eprintln!("berth: {msg}\n{USAGE}");
    2
}

#[derive(Debug)]
struct Usage(String);
impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Usage {}

fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow!(Usage(msg.into()))
}

/// Splits `args` into flags (with their values) and positionals.
struct Args {
    pos: Vec<String>,
    flags: Vec<(String, Option<String>)>,
}

fn parse_args(args: &[String], with_value: &[&str], switches: &[&str]) -> Result<Args> {
    let mut a = Args {
        pos: Vec::new(),
        flags: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(x) = it.next() {
        if with_value.contains(&x.as_str()) {
            let v = it
                .next()
                .ok_or_else(|| usage(format!("{x} needs a value")))?;
            a.flags.push((x.clone(), Some(v.clone())));
        } else if switches.contains(&x.as_str()) {
            a.flags.push((x.clone(), None));
        } else if x.starts_with('-') && x.len() > 1 {
            return Err(usage(format!("unknown option {x}")));
        } else {
            a.pos.push(x.clone());
        }
    }
    Ok(a)
}

impl Args {
    fn has(&self, f: &str) -> bool {
        self.flags.iter().any(|(k, _)| k == f)
    }
    fn value(&self, names: &[&str]) -> Option<&str> {
        self.flags
            .iter()
            .find(|(k, _)| names.contains(&k.as_str()))
            .and_then(|(_, v)| v.as_deref())
    }
    fn one(&self, what: &str) -> Result<&str> {
        match self.pos.as_slice() {
            [x] => Ok(x),
            [] => Err(usage(format!("missing {what}"))),
            _ => Err(usage(format!(
                "expected one {what}, got {}",
                self.pos.len()
            ))),
        }
    }
}

/// A package name from the command line, checked here so a typo gets a clear message (and
/// never reaches a request line).
fn package_name(n: &str) -> Result<&str> {
    berth_core::name::Name::parse(n).map_err(|e| usage(e.to_string()))?;
    Ok(n)
}

fn load_config(g: &Global) -> Result<Config> {
    Ok(Config::load(&g.config)?)
}

fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

fn run(g: &Global, rest: &[String]) -> Result<i32> {
    let cmd = rest[0].as_str();
    let args = &rest[1..];
    match cmd {
        "daemon" => {
            parse_args(args, &[], &[])?
                .pos
                .is_empty()
                .then_some(())
                .ok_or_else(|| usage("daemon takes no arguments"))?;
            crate::logger::init("berth");
            crate::daemon::run(load_config(g)?)?;
            Ok(0)
        }
        "version" | "--version" => {
            let v =
                json!({"version": env!("CARGO_PKG_VERSION"), "liblxc": berth_sys::lxc::version()});
            if g.json {
                print_json(&v);
            } else {
                println!(
                    "berth {} (liblxc {})",
                    env!("CARGO_PKG_VERSION"),
                    berth_sys::lxc::version()
                );
            }
            Ok(0)
        }
        "check" => check(g),
        "key" | "pack" | "repo" => vendor_command(g, cmd, args),
        _ => device_command(g, cmd, args),
    }
}

/// The vendor tools (key generation, packing, repository building). A device build can leave
/// them out (`--no-default-features`): devices install packages, they do not make them.
#[cfg(feature = "vendor")]
fn vendor_command(g: &Global, cmd: &str, args: &[String]) -> Result<i32> {
    match cmd {
        "key" => {
            let a = parse_args(args, &["-o", "--output", "--comment"], &[])?;
            if a.pos.first().map(String::as_str) != Some("generate") || a.pos.len() != 1 {
                return Err(usage(
                    "usage: berth key generate -o PREFIX [--comment TEXT]",
                ));
            }
            let prefix = a
                .value(&["-o", "--output"])
                .ok_or_else(|| usage("key generate needs -o PREFIX"))?;
            let r = crate::vendor::key::generate(prefix.as_ref(), a.value(&["--comment"]))?;
            if g.json {
                print_json(&serde_json::to_value(&r)?);
            } else {
                println!(
                    "wrote {} and {} (keynum {})\nkeep the .sec file secret; put the .pub file in the device's /etc/berth/keys/",
                    r.public.display(),
                    r.secret.display(),
                    r.keynum_hex
                );
            }
            Ok(0)
        }
        "pack" => {
            let a = parse_args(args, &["-o", "--output"], &[])?;
            let dir = a.one("package directory")?;
            let out = a
                .value(&["-o", "--output"])
                .ok_or_else(|| usage("pack needs -o FILE"))?;
            let r = crate::vendor::pack::pack(dir.as_ref(), out.as_ref())?;
            if g.json {
                print_json(&serde_json::to_value(&r)?);
            } else {
                for w in &r.warnings {
                    eprintln!("warning: {w}");
                }
                println!(
                    "packed {}@{} into {} ({} bytes, sha256 {})",
                    r.name,
                    r.version,
                    r.file.display(),
                    r.size,
                    r.sha256
                );
            }
            Ok(0)
        }
        "repo" => {
            let a = parse_args(args, &["--key", "-k", "--valid-for"], &[])?;
            if a.pos.first().map(String::as_str) != Some("build") || a.pos.len() != 2 {
                return Err(usage(
                    "usage: berth repo build DIR --key SECKEY [--valid-for DURATION]",
                ));
            }
            let key = a
                .value(&["--key", "-k"])
                .ok_or_else(|| usage("repo build needs --key SECKEY"))?;
            let valid_for = match a.value(&["--valid-for"]) {
                None => None,
                Some(v) => {
                    let s = berth_core::manifest::parse_duration_s(v)
                        .map_err(|e| usage(format!("--valid-for: {e}")))?;
                    if s == 0 {
                        return Err(usage("--valid-for: must be more than 0"));
                    }
                    Some(s)
                }
            };
            let r = crate::vendor::repo::build(a.pos[1].as_ref(), key.as_ref(), valid_for)?;
            if g.json {
                print_json(&serde_json::to_value(&r)?);
            } else {
                for p in &r.packages {
                    println!("  {}@{}  {}", p.name, p.version, p.file);
                }
                println!(
                    "wrote {} ({} packages) and {} (key {})",
                    r.index.display(),
                    r.packages.len(),
                    r.signature.display(),
                    r.keynum
                );
            }
            Ok(0)
        }
        _ => Err(usage(format!("unknown command {cmd:?}"))),
    }
}

#[cfg(not(feature = "vendor"))]
fn vendor_command(_: &Global, cmd: &str, _: &[String]) -> Result<i32> {
    bail!("berth {cmd}: this berth is a device build without the vendor tools; use a build with the default features (cargo build -p berth) on the vendor's machine")
}

fn device_command(g: &Global, cmd: &str, args: &[String]) -> Result<i32> {
    let cfg = load_config(g)?;
    let sock = cfg.paths.admin_socket();
    let sock = sock.as_path();
    match cmd {
        "update" => {
            let a = parse_args(args, &[], &["--reset-serial"])?;
            if !a.pos.is_empty() {
                return Err(usage("update takes no arguments besides --reset-serial"));
            }
            let body = a
                .has("--reset-serial")
                .then(|| json!({"reset_serial": true}));
            let v = client::call(sock, "POST", "/v1/update", body.as_ref())?;
            if g.json {
                print_json(&v);
            } else {
                println!(
                    "repository {}: {} packages, serial {}, signature verified{}",
                    v["repository"].as_str().unwrap_or("?"),
                    v["packages"],
                    v["serial"],
                    match v["expires"].as_u64() {
                        Some(e) => format!(", valid until {}", berth_core::date::utc(e)),
                        None => String::new(),
                    }
                );
                for u in v["upgradable"].as_array().into_iter().flatten() {
                    println!(
                        "  upgradable: {} {} -> {}",
                        u["name"].as_str().unwrap_or(""),
                        u["installed"].as_str().unwrap_or(""),
                        u["available"].as_str().unwrap_or("")
                    );
                }
            }
            Ok(0)
        }
        "list" => {
            let a = parse_args(args, &[], &["--installed", "--available", "--upgradable"])?;
            let v = client::call(sock, "GET", "/v1/packages", None)?;
            let all = !(a.has("--installed") || a.has("--available") || a.has("--upgradable"));
            if g.json {
                let mut out = serde_json::Map::new();
                for k in ["installed", "available", "upgradable"] {
                    if all || a.has(&format!("--{k}")) {
                        out.insert(k.into(), v[k].clone());
                    }
                }
                print_json(&Value::Object(out));
                return Ok(0);
            }
            if all || a.has("--installed") {
                println!("installed:");
                table(
                    &["NAME", "VERSION", "SIZE", "DESCRIPTION"],
                    v["installed"].as_array().into_iter().flatten().map(|p| {
                        vec![
                            s(&p["name"]),
                            s(&p["version"]),
                            size(&p["size"]),
                            s(&p["description"]),
                        ]
                    }),
                );
            }
            if all || a.has("--available") {
                println!("available:");
                if let Some(n) = v["index_note"].as_str() {
                    println!("  ({n})");
                }
                table(
                    &["NAME", "VERSION", "SIZE", "INSTALLED", "DESCRIPTION"],
                    v["available"].as_array().into_iter().flatten().map(|p| {
                        vec![
                            s(&p["name"]),
                            s(&p["version"]),
                            size(&p["size"]),
                            s(&p["installed"]),
                            s(&p["description"]),
                        ]
                    }),
                );
            }
            if all || a.has("--upgradable") {
                println!("upgradable:");
                table(
                    &["NAME", "INSTALLED", "AVAILABLE"],
                    v["upgradable"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|p| vec![s(&p["name"]), s(&p["installed"]), s(&p["available"])]),
                );
            }
            Ok(0)
        }
        "install" => {
            let a = parse_args(args, &[], &[])?;
            if a.pos.is_empty() {
                return Err(usage("install needs at least one package name"));
            }
            let tty = std::io::stderr().is_terminal() && !g.json;
            let mut on_event = |e: &Value| {
                if !tty {
                    return;
                }
                let mut err = std::io::stderr();
                match e["event"].as_str() {
                    Some("progress") => {
                        let done = e["done"].as_u64().unwrap_or(0);
                        let total = e["total"].as_u64().unwrap_or(0).max(1);
                        let _ = write!(
                            err,
                            "\r\x1b[Kfetching {} {} / {} ({}%)",
                            s(&e["package"]),
                            human(done),
                            human(total),
                            done * 100 / total
                        );
                    }
                    Some("fetched") => {
                        let _ = writeln!(
                            err,
                            "\r\x1b[Kfetched {} {}",
                            s(&e["package"]),
                            s(&e["version"])
                        );
                    }
                    _ => {}
                }
            };
            let r = client::call_stream(
                sock,
                "POST",
                "/v1/install",
                Some(&json!({"names": a.pos})),
                &mut on_event,
            );
            if tty {
                eprint!("\r\x1b[K");
            }
            let v = r?;
            if g.json {
                print_json(&v);
            } else {
                for p in v["installed"].as_array().into_iter().flatten() {
                    println!("installed {} {}", s(&p["name"]), s(&p["version"]));
                }
                for p in v["unchanged"].as_array().into_iter().flatten() {
                    println!("{} is already installed", p.as_str().unwrap_or(""));
                }
            }
            Ok(0)
        }
        "remove" => {
            let a = parse_args(args, &[], &["--purge"])?;
            if a.pos.is_empty() {
                return Err(usage("remove needs at least one package name"));
            }
            let v = client::call(
                sock,
                "POST",
                "/v1/remove",
                Some(&json!({"names": a.pos, "purge": a.has("--purge")})),
            )?;
            if g.json {
                print_json(&v);
            } else {
                for n in &a.pos {
                    println!(
                        "removed {n}{}",
                        if a.has("--purge") {
                            " and its data"
                        } else {
                            ""
                        }
                    );
                }
            }
            Ok(0)
        }
        "start" | "restart" => {
            let a = parse_args(args, &[], &[])?;
            let name = package_name(a.one("package name")?)?;
            let v = client::call(
                sock,
                "POST",
                &format!("/v1/{cmd}"),
                Some(&json!({"name": name})),
            )?;
            if g.json {
                print_json(&v);
            } else {
                println!(
                    "{}ed {name} (init pid {})",
                    if cmd == "start" { "start" } else { "restart" },
                    v["init_pid"]
                );
            }
            Ok(0)
        }
        "stop" => {
            let a = parse_args(args, &["-t", "--timeout"], &[])?;
            let name = package_name(a.one("package name")?)?;
            let timeout: Option<u32> = match a.value(&["-t", "--timeout"]) {
                Some(t) => Some(
                    t.parse()
                        .map_err(|_| usage(format!("-t {t}: expected seconds")))?,
                ),
                None => None,
            };
            let v = client::call(
                sock,
                "POST",
                "/v1/stop",
                Some(&json!({"name": name, "timeout": timeout})),
            )?;
            if g.json {
                print_json(&v);
            } else {
                println!(
                    "stopped {name}{}",
                    if v["graceful"] == true {
                        ""
                    } else {
                        " (killed after the timeout)"
                    }
                );
            }
            Ok(0)
        }
        "status" => {
            let a = parse_args(args, &[], &[])?;
            let path = match a.pos.as_slice() {
                [] => "/v1/status".to_string(),
                [n] => format!("/v1/status?name={}", package_name(n)?),
                _ => return Err(usage("status takes at most one name")),
            };
            let v = client::call(sock, "GET", &path, None)?;
            if g.json {
                print_json(&v);
                return Ok(0);
            }
            let d = &v["daemon"];
            println!(
                "berth daemon {} (pid {}), up {}",
                s(&d["version"]),
                d["pid"],
                dur(d["uptime_s"].as_u64().unwrap_or(0))
            );
            let r = &v["repository"];
            if let Some(w) = r["warning"].as_str() {
                println!("warning: {w}");
            }
            let now = berth_sys::process::now_s();
            table(
                &[
                    "NAME",
                    "VERSION",
                    "STATE",
                    "PID",
                    "UPTIME",
                    "NETWORK",
                    "LAST EXIT",
                ],
                v["containers"].as_array().into_iter().flatten().map(|c| {
                    let up = c["started_at"]
                        .as_u64()
                        .map(|t| dur(now.saturating_sub(t)))
                        .unwrap_or_else(|| "-".into());
                    let exit = &c["last_exit"];
                    let last = if exit.is_null() {
                        "-".to_string()
                    } else if let Some(sig) = exit["signal"].as_i64() {
                        format!("signal {sig}")
                    } else {
                        format!("exit {}", exit["code"])
                    };
                    // A kill by the memory guard, noted for the crash report.
                    let g = &c["guard_kill"];
                    let last = if g.is_null() {
                        last
                    } else {
                        format!(
                            "{last} (guard killed pid {} at {} MiB free)",
                            g["pid"],
                            g["available"].as_u64().unwrap_or(0) >> 20
                        )
                    };
                    vec![
                        s(&c["name"]),
                        s(&c["version"]),
                        s(&c["state"]),
                        s(&c["init_pid"]),
                        up,
                        s(&c["network"]),
                        last,
                    ]
                }),
            );
            Ok(0)
        }
        "logs" => {
            let a = parse_args(args, &[], &["-f", "--follow", "--raw"])?;
            let name = package_name(a.one("package name")?)?;
            let follow = a.has("-f") || a.has("--follow");
            let raw = a.has("--raw");
            let (status, mut r) = client::send(
                sock,
                "GET",
                &format!(
                    "/v1/logs?name={name}{}",
                    if follow { "&follow=1" } else { "" }
                ),
                None,
            )?;
            if status != 200 {
                let mut t = String::new();
                r.read_to_string(&mut t)?;
                let v: Value = serde_json::from_str(&t).unwrap_or(Value::Null);
                bail!(DaemonError {
                    status,
                    code: s(&v["code"]),
                    message: s(&v["error"])
                });
            }
            if g.json {
                // One JSON object per output line, as it comes (with -f, until the end).
                use std::io::BufRead;
                let mut out = std::io::stdout();
                let mut line = Vec::new();
                loop {
                    line.clear();
                    // A line is cut at 64 KiB: a container that never writes a newline must
                    // not make the CLI grow without bound.
                    if (&mut r).take(64 * 1024).read_until(b'\n', &mut line)? == 0 {
                        break;
                    }
                    let text = String::from_utf8_lossy(&line);
                    let v = json!({"name": name, "line": text.trim_end_matches(['\n', '\r'])});
                    if writeln!(out, "{v}").is_err() {
                        break;
                    }
                    let _ = out.flush();
                }
                return Ok(0);
            }
            // A container's output is hostile input for the operator's terminal: escape
            // sequences could retitle it, clear it, or worse. Shown escaped unless --raw.
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
                if out.write_all(chunk).is_err() || n == 0 {
                    break;
                }
                let _ = out.flush();
            }
            Ok(0)
        }
        "limit" => {
            let a = parse_args(args, &["--cpu", "--memory", "--pids"], &[])?;
            let name = package_name(a.one("package name")?)?;
            let mut body = json!({ "name": name });
            if let Some(c) = a.value(&["--cpu"]) {
                body["cpu"] = json!(c);
            }
            if let Some(m) = a.value(&["--memory"]) {
                body["memory"] = json!(m);
            }
            if let Some(n) = a.value(&["--pids"]) {
                let n: u32 = n
                    .parse()
                    .map_err(|_| usage(format!("--pids {n}: expected a number")))?;
                body["pids"] = json!(n);
            }
            let v = client::call(sock, "POST", "/v1/limit", Some(&body))?;
            if g.json {
                print_json(&v);
            } else {
                // null is unlimited
                let l = &v["limits"];
                println!(
                    "{name}: cpu {} (% of one CPU), memory {}, pids {} (- is unlimited){}",
                    s(&l["cpu_max_percent"]),
                    size(&l["memory_max"]),
                    s(&l["pids_max"]),
                    if v["applied"] == true {
                        " (applied to the running container)"
                    } else {
                        ""
                    }
                );
            }
            Ok(0)
        }
        "inspect" => {
            let a = parse_args(args, &[], &[])?;
            let [n] = a.pos.as_slice() else {
                return Err(usage("inspect takes one name"));
            };
            let v = client::call(
                sock,
                "GET",
                &format!("/v1/inspect?name={}", package_name(n)?),
                None,
            )?;
            // JSON for people too: the structure is the information (and a table printer
            // would cost the device binary more than it gives).
            print_json(&v);
            Ok(0)
        }
        "stats" => {
            let a = parse_args(args, &[], &[])?;
            let path = match a.pos.as_slice() {
                [] => "/v1/stats".to_string(),
                [n] => format!("/v1/stats?name={n}"),
                _ => return Err(usage("stats takes at most one name")),
            };
            let v = client::call(sock, "GET", &path, None)?;
            if g.json {
                print_json(&v);
                return Ok(0);
            }
            println!(
                "cgroup {}, {} CPUs; CPU % is of one CPU, sampled over {} ms",
                s(&v["cgroup_version"]),
                v["cpus"],
                v["sample_ms"]
            );
            table(STATS_HEAD, stats_rows(&v).into_iter());
            Ok(0)
        }
        "net" => {
            let a = parse_args(args, &[], &[])?;
            let hosts = match a.pos.as_slice() {
                [] => false,
                [h] if h == "hosts" => true,
                _ => return Err(usage("net takes no argument but \"hosts\"")),
            };
            let v = client::call(
                sock,
                "GET",
                if hosts { "/v1/net/hosts" } else { "/v1/net" },
                None,
            )?;
            if g.json {
                print_json(&v);
            } else if hosts {
                let rows = v["hosts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|h| vec![s(&h["ip"]), s(&h["mac"]), s(&h["dev"]), s(&h["hostname"])]);
                table(&["IP", "MAC", "DEVICE", "HOSTNAME"], rows);
            } else {
                println!(
                    "bridge {} gateway {} subnet {} (nft table {})",
                    s(&v["bridge"]),
                    s(&v["gateway"]),
                    s(&v["subnet"]),
                    s(&v["table"])
                );
                let rows = v["containers"].as_array().into_iter().flatten().map(|c| {
                    let ports: Vec<String> = c["publish"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(s)
                        .collect();
                    vec![
                        s(&c["name"]),
                        s(&c["mode"]),
                        s(&c["ipv4"]),
                        s(&c["mac"]),
                        if ports.is_empty() {
                            "-".into()
                        } else {
                            ports.join(",")
                        },
                        s(&c["dropped_spoofed"]),
                        s(&c["dropped_denied"]),
                    ]
                });
                table(
                    &[
                        "NAME", "MODE", "IPV4", "MAC", "PUBLISH", "SPOOFED", "DENIED",
                    ],
                    rows,
                );
                for e in v["errors"].as_array().into_iter().flatten() {
                    eprintln!("warning: {}", s(e));
                }
            }
            Ok(0)
        }
        "governor" => {
            parse_args(args, &[], &[])?;
            let v = client::call(sock, "GET", "/v1/governor", None)?;
            if g.json {
                print_json(&v);
                return Ok(0);
            }
            // Integer arithmetic (fmt1): float formatting costs the device build ~20 KiB.
            use berth_core::governor::fmt1;
            let r = |x: &Value| x.as_f64().map_or("-".into(), |r| format!("{}/s", fmt1(r)));
            let p = |x: &Value| x.as_f64().map_or("-".into(), |p| format!("{}%", fmt1(p)));
            println!(
                "governor: {}{}",
                s(&v["mode"]),
                v["note"]
                    .as_str()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            );
            if let Some(probe) = v["probe"].as_str() {
                println!(
                    "probe: {probe}, every {} ms, timeout {} ms; {} probes, last {}",
                    v["interval_ms"],
                    v["timeout_ms"],
                    v["probes"],
                    v["last_latency_ms"]
                        .as_f64()
                        .map_or("failed".into(), |l| format!("{} ms", fmt1(l)))
                );
            }
            println!(
                "cap: {} of all {} CPUs (T_l {}%, T_u {}%), target {}",
                p(&v["cap"]),
                v["cpus"],
                v["t_lower"],
                v["t_upper"],
                p(&v["target"])
            );
            println!(
                "R_n {} ({}), R_c {}, consecutive failures {}",
                r(&v["r_n"]),
                s(&v["r_n_source"]),
                r(&v["r_c"]),
                v["failures"]
            );
            if let Some(e) = v["last_error"].as_str() {
                println!("last error: {e}");
            }
            let rows = v["history"].as_array().into_iter().flatten().map(|h| {
                let t = h["at"].as_u64().unwrap_or(0) % 86_400;
                vec![
                    format!("{:02}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60),
                    p(&h["cap"]),
                    r(&h["r_c"]),
                    r(&h["r_n"]),
                    s(&h["mode"]),
                    h["note"].as_str().unwrap_or("").to_string(),
                ]
            });
            table(&["TIME (UTC)", "CAP", "R_C", "R_N", "MODE", "NOTE"], rows);
            Ok(0)
        }
        "gc" => {
            parse_args(args, &[], &[])?;
            let v = client::call(sock, "POST", "/v1/gc", None)?;
            if g.json {
                print_json(&v);
            } else {
                println!(
                    "removed {} unused image(s), freed {}",
                    v["removed"].as_array().map(Vec::len).unwrap_or(0),
                    human(v["freed_bytes"].as_u64().unwrap_or(0))
                );
            }
            Ok(0)
        }
        _ => Err(usage(format!("unknown command {cmd:?}"))),
    }
}

fn check(g: &Global) -> Result<i32> {
    use berth_sys::check;
    let mut features = check::check(&check::Roots::default());
    // Where this device's configuration puts containers' roots and /data binds: a user
    // namespace's root must be able to search every directory on the way.
    if let Ok(cfg) = load_config(g) {
        let run = &cfg.paths.run;
        let closed = berth_sys::fsutil::untraversable_ancestor(run);
        features.push(check::Feature {
            name: "run directory traversable",
            group: "configuration",
            status: if closed.is_none() {
                check::Status::Present
            } else {
                check::Status::Missing
            },
            required: false,
            detail: match closed {
                None => format!("{}: unprivileged containers can reach their roots", run.display()),
                Some((dir, mode)) => format!(
                    "{} (mode {mode:04o}) is not searchable by other users: unprivileged containers cannot start; chmod o+x {} or move [paths] run",
                    dir.display(),
                    dir.display()
                ),
            },
        });
    }
    let missing = check::missing_required(&features);
    if g.json {
        let v: Vec<Value> = features
            .iter()
            .map(|f| json!({"name": f.name, "group": f.group, "status": f.status.as_str(), "required": f.required, "detail": f.detail}))
            .collect();
        print_json(&json!({"features": v, "ok": missing.is_empty()}));
    } else {
        let color = std::io::stdout().is_terminal();
        let mut group = "";
        for f in &features {
            if f.group != group {
                group = f.group;
                println!("--- {group} ---");
            }
            let st = f.status.as_str();
            let shown = match (color, st) {
                (true, "present") => format!("\x1b[32m{st}\x1b[0m"),
                (true, "missing") if f.required => format!("\x1b[31m{st}\x1b[0m"),
                (true, "missing") => format!("\x1b[33m{st}\x1b[0m"),
                _ => st.to_string(),
            };
            println!(
                "{:<28} {}{}{}",
                f.name,
                shown,
                if f.required { " (required)" } else { "" },
                if f.detail.is_empty() {
                    String::new()
                } else {
                    format!("  {}", f.detail)
                }
            );
        }
        if !missing.is_empty() {
            println!(
                "\nberth cannot run here: {} required feature(s) missing",
                missing.len()
            );
        }
    }
    Ok(if missing.is_empty() { 0 } else { 1 })
}

fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(x) if x.is_empty() => "-".into(),
        Value::String(x) => x.clone(),
        other => other.to_string(),
    }
}

/// Makes a container's output safe for a terminal, as a stream: `\n` and `\t` and printable
/// UTF-8 pass; other C0 controls, DEL and invalid bytes become `\xNN`, C1 controls `\u{NN}`.
/// A UTF-8 sequence cut by a chunk boundary waits for the next chunk.
#[derive(Default)]
pub struct Escaper {
    pending: Vec<u8>,
}

impl Escaper {
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        let mut data = std::mem::take(&mut self.pending);
        data.extend_from_slice(input);
        let mut i = 0;
        while i < data.len() {
            let b = data[i];
            if b == b'\n' || b == b'\t' || (0x20..0x7f).contains(&b) {
                out.push(b);
                i += 1;
                continue;
            }
            if b < 0x80 {
                let _ = write!(out, "\\x{b:02x}");
                i += 1;
                continue;
            }
            let len = match b {
                0xc2..=0xdf => 2,
                0xe0..=0xef => 3,
                0xf0..=0xf4 => 4,
                _ => 0,
            };
            if len == 0 {
                let _ = write!(out, "\\x{b:02x}");
                i += 1;
                continue;
            }
            if i + len > data.len() {
                // Perhaps completed by the next chunk (if what is there so far fits).
                if std::str::from_utf8(&data[i..]).is_err_and(|e| e.error_len().is_none()) {
                    self.pending = data[i..].to_vec();
                    return;
                }
                let _ = write!(out, "\\x{b:02x}");
                i += 1;
                continue;
            }
            match std::str::from_utf8(&data[i..i + len]) {
                Ok(ch) => {
                    let c = ch.chars().next().unwrap_or('\0');
                    if ('\u{80}'..='\u{9f}').contains(&c) {
                        let _ = write!(out, "\\u{{{:02x}}}", c as u32);
                    } else {
                        out.extend_from_slice(ch.as_bytes());
                    }
                    i += len;
                }
                Err(_) => {
                    let _ = write!(out, "\\x{b:02x}");
                    i += 1;
                }
            }
        }
    }

    /// At the end of the stream: a sequence still waiting is shown as bytes.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        for b in std::mem::take(&mut self.pending) {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
}

/// A size for people, with one decimal (integer arithmetic: no float formatting code).
fn human(n: u64) -> String {
    const U: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut i = 0;
    let mut div = 1u64;
    while n / div >= 1024 && i < 3 {
        div *= 1024;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        let tenths = (n as u128 * 10 + div as u128 / 2) / div as u128;
        format!("{}.{} {}", tenths / 10, tenths % 10, U[i])
    }
}

fn size(v: &Value) -> String {
    v.as_u64().map(human).unwrap_or_else(|| "-".into())
}

fn dur(s: u64) -> String {
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{}s", s / 60, s % 60),
        3600..=86399 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86400, s % 86400 / 3600),
    }
}

/// The columns of `berth stats`: one per cell of [`stats_rows`].
const STATS_HEAD: &[&str] = &[
    "NAME",
    "CPU",
    "CPU MAX",
    "MEMORY / MAX",
    "PEAK",
    "PIDS / MAX",
    "THROTTLED",
    "OOM KILLS",
];

/// The rows of `berth stats`: the group first, then each container.
fn stats_rows(v: &Value) -> Vec<Vec<String>> {
    let pct = |x: &Value| match x.as_f64() {
        Some(p) => {
            let tenths = (p * 10.0).round() as i64;
            format!("{}.{}%", tenths / 10, tenths % 10)
        }
        None => "-".into(),
    };
    let row = |name: String, c: &Value| {
        vec![
            name,
            pct(&c["cpu_percent"]),
            pct(&c["cpu_max_percent"]),
            format!(
                "{} / {}",
                size(&c["memory_current"]),
                size(&c["memory_max"])
            ),
            size(&c["memory_peak"]),
            format!("{} / {}", s(&c["pids_current"]), s(&c["pids_max"])),
            s(&c["nr_throttled"]),
            s(&c["oom_kills"]),
        ]
    };
    let group = &v["group"];
    std::iter::once(row(format!("[{}]", s(&group["cgroup"])), group))
        .chain(
            v["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| row(s(&c["name"]), c)),
        )
        .collect()
}

fn table(head: &[&str], rows: impl Iterator<Item = Vec<String>>) {
    let rows: Vec<Vec<String>> = rows.collect();
    if rows.is_empty() {
        println!("  (none)");
        return;
    }
    debug_assert!(rows.iter().all(|r| r.len() == head.len()), "{head:?}");
    let mut w: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let mut out = String::from("  ");
        let n = cells.len();
        for (i, c) in cells.into_iter().enumerate() {
            if i + 1 == n {
                out.push_str(&c);
            } else {
                out.push_str(&format!("{c:<width$}  ", width = w[i]));
            }
        }
        println!("{}", out.trim_end());
    };
    line(head.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(chunks: &[&[u8]]) -> String {
        let mut e = Escaper::default();
        let mut out = Vec::new();
        for c in chunks {
            e.feed(c, &mut out);
        }
        e.finish(&mut out);
        String::from_utf8(out).expect("the escaped text is UTF-8")
    }

    #[test]
    fn terminal_controls_are_escaped_and_text_kept() {
        assert_eq!(
            escaped(&[b"plain text\n\tindented\n"]),
            "plain text\n\tindented\n"
        );
        assert_eq!(
            escaped(&[b"\x1b]0;pwned\x07title"]),
            "\\x1b]0;pwned\\x07title"
        );
        assert_eq!(escaped(&[b"\x1b[2J\r\x7f\x00"]), "\\x1b[2J\\x0d\\x7f\\x00");
        assert_eq!(escaped(&["grüße 日本 🦀".as_bytes()]), "grüße 日本 🦀");
        // C1 controls (8-bit CSI) and invalid bytes
        assert_eq!(escaped(&["a\u{9b}2Jb".as_bytes()]), "a\\u{9b}2Jb");
        assert_eq!(escaped(&[b"\xff\xfe ok \xc3("]), "\\xff\\xfe ok \\xc3(");
        // a multi-byte character split across chunks is kept whole
        let crab = "🦀".as_bytes();
        for cut in 1..crab.len() {
            assert_eq!(escaped(&[&crab[..cut], &crab[cut..]]), "🦀", "cut {cut}");
        }
        // an escape sequence split across chunks is escaped all the same
        assert_eq!(escaped(&[b"\x1b", b"[2J"]), "\\x1b[2J");
        // a sequence cut off by the end of the stream
        assert_eq!(escaped(&[&crab[..2]]), "\\xf0\\x9f");
    }

    /// Every row of `berth stats` has one cell per column (it once printed 10 headers over
    /// 8 cells), with the values where their headers say.
    #[test]
    fn stats_columns_match_their_cells() {
        let v = serde_json::json!({
            "cgroup_version": "v1", "cpus": 2, "sample_ms": 500,
            "group": {"cgroup": "berth", "cpu_percent": 12.34, "cpu_max_percent": 100,
                      "memory_current": 1048576, "memory_max": 2097152, "memory_peak": 1572864,
                      "pids_current": 3, "pids_max": 1024, "nr_throttled": 7, "oom_kills": 0},
            "containers": [{"name": "web", "cpu_percent": 1.0, "cpu_max_percent": null,
                            "memory_current": 4096, "memory_max": null, "memory_peak": null,
                            "pids_current": 1, "pids_max": 64, "nr_throttled": 0, "oom_kills": 2}]
        });
        let rows = stats_rows(&v);
        assert_eq!(rows.len(), 2);
        for r in &rows {
            assert_eq!(r.len(), STATS_HEAD.len(), "{r:?}");
        }
        let col = |name: &str| STATS_HEAD.iter().position(|h| *h == name).unwrap();
        assert_eq!(rows[0][col("NAME")], "[berth]");
        assert_eq!(rows[0][col("CPU")], "12.3%");
        assert_eq!(rows[0][col("PIDS / MAX")], "3 / 1024");
        assert_eq!(rows[0][col("THROTTLED")], "7");
        assert_eq!(rows[1][col("NAME")], "web");
        assert_eq!(rows[1][col("CPU MAX")], "-");
        assert_eq!(rows[1][col("OOM KILLS")], "2");
    }
}
