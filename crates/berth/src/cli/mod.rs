//! The command line: global flags, dispatch to the command families, and the mapping of
//! errors to exit statuses (0 ok, 1 error, 2 usage, 3 no daemon). Readable text for people,
//! `--json` for machines.
//!
//! Each family reads its arguments ([`args`]), asks the daemon ([`crate::client`]), builds
//! the text ([`render`]) and prints it.

/// `print!` for the command line's answers, where `print!` would panic. A reader that has
/// gone (`berth --json status x | grep -q running`, `| head -1`) took what it wanted: the
/// rest is dropped and the command's own exit status stands. Any other write error (stdout
/// on a full disk) is named and ends the command with status 1.
macro_rules! say {
    ($($t:tt)*) => { $crate::cli::out(format_args!($($t)*)) };
}

/// `println!`, as [`say!`] is `print!`.
macro_rules! sayln {
    ($($t:tt)*) => { $crate::cli::out(format_args!("{}\n", format_args!($($t)*))) };
}

mod args;
mod check;
mod containers;
#[cfg(feature = "vendor")]
mod docs;
mod net;
mod packages;
mod render;
mod reports;
mod resources;
mod schedules;
#[cfg(feature = "vendor")]
mod vendor;

use std::path::PathBuf;

use anyhow::Result;
use berth_core::config::{Config, DEFAULT_CONFIG_PATH};
use serde_json::{json, Value};

use crate::client::{DaemonError, NoDaemon, EXIT_NO_DAEMON};
use args::{Device, Global, Line, Usage};

/// `--help`: the command table's, with the vendor tools' part in the builds that have them.
fn usage_text() -> String {
    crate::command::usage(cfg!(feature = "vendor"))
}

pub fn main(args: Vec<String>) -> i32 {
    let config = std::env::var_os("BERTH_CONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| DEFAULT_CONFIG_PATH.into());
    let (g, command, args) = match args::global(args, config) {
        Ok(Line::Help) => {
            sayln!("{}", usage_text());
            return 0;
        }
        Ok(Line::Run {
            global,
            command,
            args,
        }) => (global, command, args),
        Err(msg) => {
            warnln!("berth: {msg}\n{}", usage_text());
            return 2;
        }
    };
    match run(&g, &command, &args) {
        Ok(code) => code,
        Err(e) => report(&g, &e),
    }
}

/// Says what failed (as JSON too with `--json`) and gives the exit status.
fn report(g: &Global, e: &anyhow::Error) -> i32 {
    let code = if e.downcast_ref::<NoDaemon>().is_some() {
        EXIT_NO_DAEMON
    } else if e.downcast_ref::<Usage>().is_some() {
        2
    } else {
        1
    };
    // Standard error first: a full standard output ends the command at the JSON.
    warnln!("berth: error: {e:#}");
    if code == 2 {
        warnln!("(berth --help lists the commands)");
    }
    if g.json {
        let (status, kind) = match e.downcast_ref::<DaemonError>() {
            Some(d) => (d.status, d.code.clone()),
            None if code == EXIT_NO_DAEMON => (0, "no_daemon".to_string()),
            None if code == 2 => (0, "usage".to_string()),
            None => (0, "error".to_string()),
        };
        sayln!(
            "{}",
            json!({"error": format!("{e:#}"), "code": kind, "status": status})
        );
    }
    code
}

/// Where [`say!`] writes.
pub(crate) fn out(text: std::fmt::Arguments) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_fmt(text).and_then(|()| o.flush()) {
        unwritten(e);
    }
}

/// A write to stdout failed: a reader that has gone is no error (the caller stops writing);
/// anything else (a full disk) ends the command with status 1, named.
pub(crate) fn unwritten(e: std::io::Error) {
    if e.kind() != std::io::ErrorKind::BrokenPipe {
        warnln!("berth: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

fn load_config(g: &Global) -> Result<Config> {
    Ok(Config::from_file(
        std::fs::read_to_string(&g.config),
        &g.config,
    )?)
}

fn print_json(v: &Value) {
    sayln!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// The daemon's answer as it is with `--json`, else as `human` words it.
fn show(json: bool, v: &Value, human: &dyn Fn(&Value) -> String) {
    if json {
        print_json(v);
    } else {
        say!("{}", human(v));
    }
}

fn run(g: &Global, command: &str, args: &[String]) -> Result<i32> {
    match command {
        "daemon" => {
            args::daemon(args)?;
            crate::logger::init("berth");
            crate::daemon::run(load_config(g)?)?;
            Ok(0)
        }
        "version" | "--version" => {
            version(g.json);
            Ok(0)
        }
        "check" => check::run(g),
        "core-handler" => {
            let a = args::core_handler(args)?;
            reports::core_handler(&load_config(g)?, &a)?;
            Ok(0)
        }
        #[cfg(feature = "vendor")]
        "key" | "pack" | "repo" | "import" => {
            vendor::run(g.json, args::vendor(command, args)?)?;
            Ok(0)
        }
        #[cfg(feature = "vendor")]
        "completions" => {
            let shell = args::one_word(args, "shell (bash, zsh or fish)")?;
            say!("{}", docs::completions(&shell)?);
            Ok(0)
        }
        #[cfg(feature = "vendor")]
        "manpage" => {
            args::none(args, "manpage")?;
            say!("{}", docs::manpage());
            Ok(0)
        }
        // Devices install packages, they do not make them.
        #[cfg(not(feature = "vendor"))]
        "key" | "pack" | "repo" | "import" | "completions" | "manpage" => anyhow::bail!("berth {command}: this berth is a device build without the vendor tools; use a build with the default features (cargo build -p berth) on the vendor's machine"),
        _ => match crate::command::named(command) {
            Some(c) if c.parse == crate::command::Parse::Fields => {
                let fields = args::fields(c, args)?;
                let v = ask(&load_config(g)?.paths.admin_socket(), c.route(), fields)?;
                print_json(&v);
                Ok(0)
            }
            _ => {
                device(g, command, args)?;
                Ok(0)
            }
        },
    }
}

/// A command the table reads: its fields in the query of a GET (names, switches and numbers
/// only, which need no escaping: `crate::command`'s tests hold the table to it), else in a
/// JSON object; the answer as JSON, for people too (its structure is the information).
fn ask(
    sock: &std::path::Path,
    route: &crate::command::Route,
    fields: serde_json::Map<String, Value>,
) -> Result<Value> {
    if route.method != "GET" {
        return crate::client::call(sock, route.method, route.path, Some(&Value::Object(fields)));
    }
    let mut path = route.path.to_string();
    for (i, (k, v)) in fields.iter().enumerate() {
        let v = match v {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        path.push(if i == 0 { '?' } else { '&' });
        path.push_str(k);
        path.push('=');
        path.push_str(&v);
    }
    crate::client::call(sock, "GET", &path, None)
}

fn version(json: bool) {
    let (v, lxc) = (
        env!("CARGO_PKG_VERSION"),
        berth_sys::lxc::version_or_error(),
    );
    // A build for the tests says so (src/hooks.rs); a shipped build never has the hooks.
    let hooks = if crate::hooks::BUILT {
        ", test hooks"
    } else {
        ""
    };
    match (json, lxc) {
        (true, Ok(l)) => print_json(&json!({"version": v, "liblxc": l})),
        (true, Err(e)) => {
            print_json(&json!({"version": v, "liblxc": "", "liblxc_error": e.message}))
        }
        (false, Ok(l)) => sayln!("berth {v} (liblxc {l}{hooks})"),
        (false, Err(e)) => sayln!("berth {v} (no liblxc: {e}{hooks})"),
    }
}

/// The commands that talk to the daemon. A configuration that cannot be read is reported
/// before a command line that cannot be (as berth always has).
fn device(g: &Global, command: &str, args: &[String]) -> Result<()> {
    let cfg = load_config(g)?;
    let sock = cfg.paths.admin_socket();
    match args::device(command, args)? {
        Device::Packages(c) => packages::run(g.json, &sock, c),
        Device::Containers(c) => containers::run(g.json, &sock, c),
        Device::Resources(c) => resources::run(g.json, &sock, c),
        Device::Net { hosts } => net::run(g.json, &sock, hosts),
        #[cfg(feature = "shape")]
        Device::NetMetered(on) => net::metered(g.json, &sock, on),
        Device::SafeMode { enter } => containers::safe_mode(g.json, &sock, enter),
        Device::Reports(c) => reports::run(g.json, &sock, c),
        Device::Schedules(c) => schedules::run(g.json, &sock, c),
        Device::Tr181 => {
            let v = crate::client::call(&sock, "GET", "/v1/tr181", None)?;
            if g.json {
                print_json(&v["parameters"]);
            } else {
                say!("{}", render::tr181(&v));
            }
            Ok(())
        }
        Device::Metrics => {
            // The text as it is: Prometheus's format is the machine-readable one.
            let (status, mut r) = crate::client::send(&sock, "GET", "/metrics", None)?;
            let mut text = String::new();
            std::io::Read::read_to_string(&mut r, &mut text)?;
            if status != 200 {
                let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                return Err(crate::client::error_from(status, &v));
            }
            say!("{text}");
            Ok(())
        }
    }
}
