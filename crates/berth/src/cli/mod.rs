//! The command line: global flags, dispatch to the command families, and the mapping of
//! errors to exit statuses (0 ok, 1 error, 2 usage, 3 no daemon). Readable text for people,
//! `--json` for machines.
//!
//! Each family reads its arguments ([`args`]), asks the daemon ([`crate::client`]), builds
//! the text ([`render`]) and prints it.

mod args;
mod check;
mod containers;
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

const USAGE: &str = "\
usage: berth [--config FILE] [--json] COMMAND [ARGS]

device:
  daemon                     run the supervisor (root; keeps containers across restarts)
  update [--reset-serial]    fetch and verify the repository index (--reset-serial: accept a
                             lower serial once, to switch to another repository)
  list [--installed|--available|--upgradable]
  install NAME...            install packages and their dependencies
  upgrade [--force] [NAME...]
                             move to the newest signed versions (all packages installed by
                             name when none is given); each running one must start and pass
                             its health check, else it is rolled back (exit status 1);
                             refused while a package holds an update lock, unless --force
  rollback NAME              back to the version the last upgrade replaced
  remove [--purge] NAME...   remove packages (--purge also deletes their /data)
  start [--trace] NAME       start a container (--trace: when each step of the start began)
  stop [-t SECS] NAME | restart NAME
  reset NAME                 clear a failed container's state and restart count (no start)
  status [NAME]              containers: state, restarts, health, last exit
  logs [-f] [--raw] NAME     a container's output (-f: follow; control characters are
                             shown escaped, as \x1b, unless --raw)
  limit NAME [--cpu P%] [--memory SIZE] [--pids N]
                             change a container's limits, running or not (--cpu: percent
                             of one CPU); kept for the next start; no option: show them
  stats [NAME]               CPU %, memory, pids, throttling, OOM kills (group and containers)
  inspect NAME               capabilities, seccomp profile, devices, id map in force (JSON)
  bind PACKAGE --into NAME [--at PATH] [--persist]
                             show an installed package read-only in a running container
                             (at /opt/PACKAGE); --persist: again at its next starts
  unbind PACKAGE --from NAME take it away again (and its --persist)
  net [hosts]                containers' addresses, published ports, drop counters;
                             hosts: the LAN's hosts (neighbour table, DHCP, mDNS)
  governor                   the adaptive CPU cap: R_n, R_c, the cap, its mode and history
  report list [NAME]         crash archives kept on the device (docs/reports.md)
  report show ID             one report's summary and the archive's members
  report export ID -o FILE [--force]
                             copy the archive (.tar.gz) to FILE
  report remove ID|--all     delete reports
  schedule list NAME         a container's cron jobs: next and last runs (docs/schedules.md)
  schedule add NAME --cron EXPR -- CMD [ARGS...]
                             run CMD in the container at the times of EXPR (UTC; five
                             fields or @hourly, @daily, @weekly, @monthly, @yearly, @reboot),
                             starting it first if it is stopped
  schedule remove NAME ID    remove a schedule added with schedule add
  core-handler PID SIG [COMM]
                             for kernel.core_pattern: |/usr/bin/berth core-handler %P %s %e
  gc                         delete store images that nothing uses
  safe-mode enter|clear      enter: stop every container, unmount every image, start none
                             until cleared (kept across restarts); clear: back to normal,
                             the containers marked autostart start again
  check                      kernel features berth uses, present or not

vendor:
  key generate -o PREFIX [--comment TEXT]   ed25519 key pair (signify/usign format)
  pack DIR -o FILE                          build a package image with mksquashfs
  repo build DIR --key SECKEY [--valid-for DURATION]
                                            write and sign DIR/index.json (valid for
                                            DURATION: 90m, 12h, 30d; default: no expiry)

--config defaults to $BERTH_CONFIG or /etc/berth/berth.toml.
exit status: 0 ok, 1 error, 2 usage, 3 daemon not running.";

pub fn main(args: Vec<String>) -> i32 {
    let config = std::env::var_os("BERTH_CONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| DEFAULT_CONFIG_PATH.into());
    let (g, command, args) = match args::global(args, config) {
        Ok(Line::Help) => {
            println!("{USAGE}");
            return 0;
        }
        Ok(Line::Run {
            global,
            command,
            args,
        }) => (global, command, args),
        Err(msg) => {
            eprintln!("berth: {msg}\n{USAGE}");
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

fn load_config(g: &Global) -> Result<Config> {
    Ok(Config::from_file(
        std::fs::read_to_string(&g.config),
        &g.config,
    )?)
}

fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// The daemon's answer as it is with `--json`, else as `human` words it.
fn show(json: bool, v: &Value, human: &dyn Fn(&Value) -> String) {
    if json {
        print_json(v);
    } else {
        print!("{}", human(v));
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
        "key" | "pack" | "repo" => {
            vendor::run(g.json, args::vendor(command, args)?)?;
            Ok(0)
        }
        // Devices install packages, they do not make them.
        #[cfg(not(feature = "vendor"))]
        "key" | "pack" | "repo" => anyhow::bail!("berth {command}: this berth is a device build without the vendor tools; use a build with the default features (cargo build -p berth) on the vendor's machine"),
        _ => {
            device(g, command, args)?;
            Ok(0)
        }
    }
}

fn version(json: bool) {
    let (v, lxc) = (
        env!("CARGO_PKG_VERSION"),
        berth_sys::lxc::version_or_error(),
    );
    match (json, lxc) {
        (true, Ok(l)) => print_json(&json!({"version": v, "liblxc": l})),
        (true, Err(e)) => print_json(&json!({"version": v, "liblxc": "", "liblxc_error": e})),
        (false, Ok(l)) => println!("berth {v} (liblxc {l})"),
        (false, Err(e)) => println!("berth {v} (no liblxc: {e})"),
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
        Device::SafeMode { enter } => containers::safe_mode(g.json, &sock, enter),
        Device::Reports(c) => reports::run(g.json, &sock, c),
        Device::Schedules(c) => schedules::run(g.json, &sock, c),
    }
}
