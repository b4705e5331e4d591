//! The command line as typed values: pure functions from the words after `berth` to a command
//! and its options. Every refusal is a [`Usage`] error (exit 2), worded as berth always has.

use std::path::PathBuf;

/// A command line berth cannot make sense of: exit status 2 and a pointer to `--help`.
#[derive(Debug, PartialEq, Eq)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

fn usage(msg: impl Into<String>) -> Usage {
    Usage(msg.into())
}

/// The flags every command shares.
#[derive(Debug, PartialEq, Eq)]
pub struct Global {
    pub config: PathBuf,
    pub json: bool,
}

/// What the whole line asks for, once the global flags are taken out.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    Help,
    Run {
        global: Global,
        command: String,
        args: Vec<String>,
    },
}

/// Takes `--json` and `--config FILE` from anywhere on the line (even after the command, even
/// where another option expects a value) up to a `--`, after which every word is the
/// command's (`schedule add … -- CMD…`); `-h`, `--help` or `help` only before the command.
/// `core-handler` is the exception: the kernel runs it with words a crashing process chose
/// (an old pattern's `%e`, split at its spaces), so every word after it is its own, never a
/// global option. A refusal here is printed with the whole usage text, hence a bare message.
pub fn global(args: Vec<String>, config: PathBuf) -> Result<Line, &'static str> {
    let mut global = Global {
        config,
        json: false,
    };
    let mut rest = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => global.json = true,
            "--config" => global.config = it.next().ok_or("--config needs a file")?.into(),
            "-h" | "--help" | "help" if rest.is_empty() => return Ok(Line::Help),
            "core-handler" if rest.is_empty() => {
                rest.push(a);
                rest.extend(it.by_ref());
            }
            "--" => {
                rest.push(a);
                rest.extend(it.by_ref());
            }
            _ => rest.push(a),
        }
    }
    if rest.is_empty() {
        return Err("no command given");
    }
    let command = rest.remove(0);
    Ok(Line::Run {
        global,
        command,
        args: rest,
    })
}

/// The words after an option, from which it takes its value.
type Words<'a> = std::slice::Iter<'a, String>;

/// Reads one command's arguments: each word that looks like an option (`-t`, `--timeout`)
/// goes to `option`, which takes its value from the words that follow if it has one and says
/// whether it knows the option; the other words are returned in order.
///
/// Options are matched whole: no `--timeout=5`, `-t5` or `-fr`, and `--` is an unknown
/// option. A parser crate (lexopt) would read those, but costs the device build ~5 KiB.
fn scan(
    args: &[String],
    option: &mut dyn FnMut(&str, &mut Words) -> Result<bool, Usage>,
) -> Result<Vec<String>, Usage> {
    let mut words = args.iter();
    let mut pos = Vec::new();
    while let Some(w) = words.next() {
        if w.len() < 2 || !w.starts_with('-') {
            pos.push(w.clone());
        } else if !option(w, &mut words)? {
            return Err(usage(format!("unknown option {w}")));
        }
    }
    Ok(pos)
}

/// An option's value: the next word, even one that looks like an option (`-t -5`).
fn value(words: &mut Words, option: &str) -> Result<String, Usage> {
    words
        .next()
        .cloned()
        .ok_or_else(|| usage(format!("{option} needs a value")))
}

/// Keeps the first of repeated values, as berth always has.
fn first(slot: &mut Option<String>, words: &mut Words, option: &str) -> Result<bool, Usage> {
    let v = value(words, option)?;
    slot.get_or_insert(v);
    Ok(true)
}

/// Sets a switch.
fn on(flag: &mut bool) -> Result<bool, Usage> {
    *flag = true;
    Ok(true)
}

/// A command with neither options nor positionals it looks at.
fn bare(args: &[String]) -> Result<Vec<String>, Usage> {
    scan(args, &mut |_, _| Ok(false))
}

/// The one positional, called `what` in messages.
fn one(pos: Vec<String>, what: &str) -> Result<String, Usage> {
    let n = pos.len();
    match <[String; 1]>::try_from(pos) {
        Ok([x]) => Ok(x),
        Err(_) if n == 0 => Err(usage(format!("missing {what}"))),
        Err(_) => Err(usage(format!("expected one {what}, got {n}"))),
    }
}

/// A package name, checked here so a typo gets a clear message (and never reaches a request
/// line).
fn package_name(n: String) -> Result<String, Usage> {
    berth_core::name::Name::parse(&n).map_err(|e| usage(e.to_string()))?;
    Ok(n)
}

fn one_name(args: &[String]) -> Result<String, Usage> {
    package_name(one(bare(args)?, "package name")?)
}

/// At most one positional, refused with `msg` past that.
fn at_most_one(pos: Vec<String>, msg: &str) -> Result<Option<String>, Usage> {
    match pos.len() {
        0 | 1 => Ok(pos.into_iter().next()),
        _ => Err(usage(msg)),
    }
}

/// `berth daemon`.
/// A command's one word (`completions bash`).
#[cfg(feature = "vendor")]
pub fn one_word(args: &[String], what: &str) -> Result<String, Usage> {
    one(bare(args)?, what)
}

/// A command that takes nothing.
#[cfg(feature = "vendor")]
pub fn none(args: &[String], command: &str) -> Result<(), Usage> {
    match bare(args)?.is_empty() {
        true => Ok(()),
        false => Err(usage(format!("{command} takes no arguments"))),
    }
}

pub fn daemon(args: &[String]) -> Result<(), Usage> {
    match bare(args)?.is_empty() {
        true => Ok(()),
        false => Err(usage("daemon takes no arguments")),
    }
}

/// A command the table reads ([`crate::command::Parse::Fields`]): its fields from its words,
/// as the daemon will read them from the request.
pub fn fields(
    c: &crate::command::Cmd,
    args: &[String],
) -> Result<serde_json::Map<String, serde_json::Value>, Usage> {
    use crate::command::{self, FieldKind};
    use serde_json::Value;
    let kinds = command::fields(c);
    let mut out = serde_json::Map::new();
    let pos = scan(args, &mut |o, p| {
        let Some(opt) = c.options.iter().find(|x| x.long == o || x.short == o) else {
            return Ok(false);
        };
        let key = command::field_key(opt);
        let kind = kinds.iter().find(|(f, _)| *f == key).map(|(_, k)| *k);
        let v = match kind {
            Some(FieldKind::Switch) => Value::Bool(true),
            Some(FieldKind::Number) => {
                let w = value(p, o)?;
                w.parse::<u64>()
                    .map(Value::from)
                    .map_err(|_| usage(format!("{o} {w}: expected a number")))?
            }
            _ => Value::String(value(p, o)?),
        };
        // Keeps the first of repeated values, as berth always has.
        out.entry(key).or_insert(v);
        Ok(true)
    })?;
    let takes_name = kinds.first().is_some_and(|(_, k)| *k == FieldKind::Name);
    let name = match (takes_name, command::operand_optional(c)) {
        (false, _) if pos.is_empty() => None,
        (false, _) => return Err(usage(format!("{} takes no arguments", c.name))),
        (true, true) => at_most_one(pos, &format!("{} takes at most one name", c.name))?,
        (true, false) => Some(one(pos, "package name")?),
    };
    if let Some(n) = name {
        out.insert("name".into(), Value::String(package_name(n)?));
    }
    Ok(out)
}

#[cfg(feature = "shape")]
const NET_REFUSAL: &str = "net takes no argument but \"hosts\" or \"metered on|off\"";
#[cfg(not(feature = "shape"))]
const NET_REFUSAL: &str = "net takes no argument but \"hosts\"";

/// The commands that talk to the daemon, by family.
#[derive(Debug, PartialEq, Eq)]
pub enum Device {
    Packages(Packages),
    Containers(Containers),
    Resources(Resources),
    Net {
        hosts: bool,
    },
    /// `net metered on|off` (feature `shape`).
    #[cfg(feature = "shape")]
    NetMetered(bool),
    /// `safe-mode enter` (true) or `safe-mode clear` (false).
    SafeMode {
        enter: bool,
    },
    Reports(Reports),
    Schedules(Schedules),
    /// `berth metrics`: Prometheus's text, as `GET /metrics` gives it.
    Metrics,
    /// `berth tr181`: `Device.SoftwareModules.` as TR-181 parameters.
    Tr181,
}

/// `berth schedule …`: a container's cron jobs.
#[derive(Debug, PartialEq, Eq)]
pub enum Schedules {
    List(String),
    Add {
        name: String,
        cron: String,
        cmd: Vec<String>,
    },
    Remove {
        name: String,
        id: String,
    },
}

/// `berth report …`: the crash archives.
#[derive(Debug, PartialEq, Eq)]
pub enum Reports {
    List(Option<String>),
    Show(String),
    Export {
        id: String,
        out: String,
        force: bool,
    },
    /// One report, or all (None).
    Remove(Option<String>),
}

#[derive(Debug, PartialEq, Eq)]
pub enum Packages {
    Update {
        reset_serial: bool,
    },
    List(Lists),
    Install(Vec<String>),
    /// None named: every package installed by name.
    Upgrade {
        names: Vec<String>,
        force: bool,
    },
    Rollback(String),
    Remove {
        names: Vec<String>,
        purge: bool,
    },
    Gc,
}

/// The sections `berth list` shows (all of them when no option picks some).
#[derive(Debug, PartialEq, Eq)]
pub struct Lists {
    pub installed: bool,
    pub available: bool,
    pub upgradable: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Containers {
    /// With `--trace`: when each step of the start began.
    Start {
        name: String,
        trace: bool,
    },
    Restart(String),
    /// Out of `failed` without starting it; restart counts back to 0.
    Reset(String),
    Stop {
        name: String,
        timeout: Option<u32>,
    },
    /// `stop --all`: every container that is not stopped or failed, one after another.
    StopAll {
        timeout: Option<u32>,
    },
    Status(Option<String>),
    Logs {
        name: String,
        follow: bool,
        raw: bool,
    },
    Inspect(String),
    /// `bind PACKAGE --into CONTAINER [--at PATH] [--persist]`.
    Bind {
        package: String,
        container: String,
        at: Option<String>,
        persist: bool,
    },
    /// `unbind PACKAGE --from CONTAINER`.
    Unbind {
        package: String,
        container: String,
    },
}

#[derive(Debug, PartialEq, Eq)]
pub enum Resources {
    Limit(Limit),
    Stats(Option<String>),
    Governor,
}

/// `berth limit NAME [--cpu P%] [--memory SIZE] [--pids N]`: CPU and memory go to the daemon
/// as written (it reads their units).
#[derive(Debug, PartialEq, Eq)]
pub struct Limit {
    pub name: String,
    pub cpu: Option<String>,
    pub memory: Option<String>,
    pub pids: Option<u32>,
    #[cfg(feature = "shape")]
    pub egress: Option<String>,
    #[cfg(feature = "shape")]
    pub ingress: Option<String>,
}

/// A device command: `command` is the word after the global flags.
pub fn device(command: &str, args: &[String]) -> Result<Device, Usage> {
    use Containers as C;
    use Packages as P;
    use Resources as R;
    Ok(match command {
        "update" => Device::Packages(update(args)?),
        "list" => Device::Packages(P::List(list(args)?)),
        "install" => Device::Packages(install(args)?),
        "upgrade" => {
            let mut force = false;
            let names = scan(args, &mut |o, _| match o {
                "--force" => on(&mut force),
                _ => Ok(false),
            })?;
            Device::Packages(Packages::Upgrade {
                names: names
                    .into_iter()
                    .map(package_name)
                    .collect::<Result<_, _>>()?,
                force,
            })
        }
        "rollback" => Device::Packages(Packages::Rollback(one_name(args)?)),
        "remove" => Device::Packages(remove(args)?),
        "gc" => {
            // Positionals were never looked at.
            bare(args)?;
            Device::Packages(P::Gc)
        }
        "start" => Device::Containers(start(args)?),
        "restart" => Device::Containers(C::Restart(one_name(args)?)),
        "reset" => Device::Containers(C::Reset(one_name(args)?)),
        "stop" => Device::Containers(stop(args)?),
        "bind" | "unbind" => Device::Containers(bind(command == "unbind", args)?),
        "status" => Device::Containers(C::Status(
            at_most_one(bare(args)?, "status takes at most one name")?
                .map(package_name)
                .transpose()?,
        )),
        "logs" => Device::Containers(logs(args)?),
        "inspect" => match <[String; 1]>::try_from(bare(args)?) {
            Ok([n]) => Device::Containers(C::Inspect(package_name(n)?)),
            Err(_) => return Err(usage("inspect takes one name")),
        },
        "limit" => Device::Resources(R::Limit(limit(args)?)),
        // The daemon checks this name.
        "stats" => Device::Resources(R::Stats(at_most_one(
            bare(args)?,
            "stats takes at most one name",
        )?)),
        "governor" => {
            bare(args)?;
            Device::Resources(R::Governor)
        }
        "net" => {
            let words = bare(args)?;
            #[cfg(feature = "shape")]
            if words.first().is_some_and(|w| w == "metered") {
                return match words.get(1).map(String::as_str) {
                    Some(w @ ("on" | "off")) if words.len() == 2 => {
                        Ok(Device::NetMetered(w == "on"))
                    }
                    _ => Err(usage("usage: berth net metered on|off")),
                };
            }
            Device::Net {
                hosts: match words.as_slice() {
                    [] => false,
                    [h] if h == "hosts" => true,
                    _ => return Err(usage(NET_REFUSAL)),
                },
            }
        }
        "safe-mode" => Device::SafeMode {
            enter: match bare(args)?.as_slice() {
                [w] if w == "enter" => true,
                [w] if w == "clear" => false,
                _ => return Err(usage("usage: berth safe-mode enter|clear")),
            },
        },
        "report" => Device::Reports(report(args)?),
        "tr181" => match bare(args)?.is_empty() {
            true => Device::Tr181,
            false => return Err(usage("tr181 takes no arguments")),
        },
        "metrics" => {
            bare(args)?
                .is_empty()
                .then_some(())
                .ok_or_else(|| usage("metrics takes no arguments"))?;
            Device::Metrics
        }
        "schedule" => Device::Schedules(schedule(args)?),
        _ => return Err(usage(format!("unknown command {command:?}"))),
    })
}

/// `report list [NAME] | show ID | export ID -o FILE [--force] | remove ID|--all`; the
/// daemon checks ids (it says which one it does not know).
fn report(args: &[String]) -> Result<Reports, Usage> {
    let (mut out, mut force, mut all) = (None, false, false);
    let pos = scan(args, &mut |o, p| match o {
        "-o" | "--output" => first(&mut out, p, o),
        "--force" => on(&mut force),
        "--all" => on(&mut all),
        _ => Ok(false),
    })?;
    let (sub, rest) = match pos.split_first() {
        Some((s, r)) => (s.as_str(), r.to_vec()),
        None => return Err(usage("report needs list, show, export or remove")),
    };
    let only = |what: &str, ok: bool| match ok {
        true => Ok(()),
        false => Err(usage(format!("report {sub}: {what}"))),
    };
    match sub {
        "list" => {
            only("takes no options", out.is_none() && !force && !all)?;
            Ok(Reports::List(
                at_most_one(rest, "report list takes at most one name")?
                    .map(package_name)
                    .transpose()?,
            ))
        }
        "show" => {
            only("takes no options", out.is_none() && !force && !all)?;
            Ok(Reports::Show(one(rest, "report id")?))
        }
        "export" => {
            only("takes -o FILE and --force only", !all)?;
            let id = one(rest, "report id")?;
            let out = out.ok_or_else(|| usage("report export needs -o FILE"))?;
            Ok(Reports::Export { id, out, force })
        }
        "remove" => {
            only("takes --all only", out.is_none() && !force)?;
            match (rest.len(), all) {
                (0, true) => Ok(Reports::Remove(None)),
                (1, false) => Ok(Reports::Remove(Some(one(rest, "report id")?))),
                _ => Err(usage("report remove takes one id, or --all")),
            }
        }
        _ => Err(usage(format!(
            "unknown report command {sub:?} (list, show, export, remove)"
        ))),
    }
}

/// `schedule list NAME | add NAME --cron EXPR -- CMD… | remove NAME ID`; the daemon checks
/// the expression, the command and the id (and says what is wrong with them).
fn schedule(args: &[String]) -> Result<Schedules, Usage> {
    let (before, cmd) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], Some(args[i + 1..].to_vec())),
        None => (args, None),
    };
    let mut cron = None;
    let pos = scan(before, &mut |o, p| match o {
        "--cron" => first(&mut cron, p, o),
        _ => Ok(false),
    })?;
    let (sub, rest) = match pos.split_first() {
        Some((s, r)) => (s.as_str(), r.to_vec()),
        None => return Err(usage("schedule needs list, add or remove")),
    };
    if sub != "add" && (cron.is_some() || cmd.is_some()) {
        return Err(usage(format!(
            "schedule {sub}: takes no --cron and no -- CMD"
        )));
    }
    match sub {
        "list" => Ok(Schedules::List(package_name(one(rest, "package name")?)?)),
        "add" => {
            let name = package_name(one(rest, "package name")?)?;
            let cron = cron.ok_or_else(|| usage("schedule add needs --cron EXPR"))?;
            match cmd {
                Some(cmd) if !cmd.is_empty() => Ok(Schedules::Add { name, cron, cmd }),
                _ => Err(usage("schedule add needs -- and the command to run")),
            }
        }
        "remove" => match <[String; 2]>::try_from(rest) {
            Ok([name, id]) => Ok(Schedules::Remove {
                name: package_name(name)?,
                id,
            }),
            Err(_) => Err(usage("usage: berth schedule remove NAME ID")),
        },
        _ => Err(usage(format!(
            "unknown schedule command {sub:?} (list, add, remove)"
        ))),
    }
}

/// `berth core-handler PID SIGNAL`, as the kernel's core_pattern pipe runs it. Words after
/// them come from an older pattern's `%e` (the crashing process's name, which it chose, split
/// at its spaces): ignored, never read.
#[derive(Debug, PartialEq, Eq)]
pub struct CoreHandler {
    pub pid: i32,
    pub signal: i32,
}

pub fn core_handler(args: &[String]) -> Result<CoreHandler, Usage> {
    let bad = || usage("usage: berth core-handler %P %s (for kernel.core_pattern)");
    // Not `bare`: a word of the process's name that looks like an option is no option.
    let (pid, signal) = match args {
        [p, s, ..] => (p, s),
        _ => return Err(bad()),
    };
    Ok(CoreHandler {
        pid: pid.parse().map_err(|_| bad())?,
        signal: signal.parse().map_err(|_| bad())?,
    })
}

fn update(args: &[String]) -> Result<Packages, Usage> {
    let mut reset_serial = false;
    let pos = scan(args, &mut |o, _| match o {
        "--reset-serial" => on(&mut reset_serial),
        _ => Ok(false),
    })?;
    if !pos.is_empty() {
        return Err(usage("update takes no arguments besides --reset-serial"));
    }
    Ok(Packages::Update { reset_serial })
}

fn list(args: &[String]) -> Result<Lists, Usage> {
    let (mut installed, mut available, mut upgradable) = (false, false, false);
    // Positionals were never looked at.
    scan(args, &mut |o, _| match o {
        "--installed" => on(&mut installed),
        "--available" => on(&mut available),
        "--upgradable" => on(&mut upgradable),
        _ => Ok(false),
    })?;
    let all = !(installed || available || upgradable);
    Ok(Lists {
        installed: all || installed,
        available: all || available,
        upgradable: all || upgradable,
    })
}

fn install(args: &[String]) -> Result<Packages, Usage> {
    // Names are checked by the daemon, which says which one it does not know.
    let names = bare(args)?;
    if names.is_empty() {
        return Err(usage("install needs at least one package name"));
    }
    Ok(Packages::Install(names))
}

fn remove(args: &[String]) -> Result<Packages, Usage> {
    let mut purge = false;
    let names = scan(args, &mut |o, _| match o {
        "--purge" => on(&mut purge),
        _ => Ok(false),
    })?;
    if names.is_empty() {
        return Err(usage("remove needs at least one package name"));
    }
    Ok(Packages::Remove { names, purge })
}

fn stop(args: &[String]) -> Result<Containers, Usage> {
    let (mut timeout, mut all) = (None, false);
    let pos = scan(args, &mut |o, p| match o {
        "-t" | "--timeout" => first(&mut timeout, p, o),
        "--all" => on(&mut all),
        _ => Ok(false),
    })?;
    // The name is checked before the timeout.
    let name = match (all, pos.is_empty()) {
        (true, true) => None,
        (true, false) => return Err(usage("stop --all takes no package name")),
        (false, _) => Some(package_name(one(pos, "package name")?)?),
    };
    let timeout = match timeout {
        Some(t) => Some(
            t.parse()
                .map_err(|_| usage(format!("-t {t}: expected seconds")))?,
        ),
        None => None,
    };
    Ok(match name {
        Some(name) => Containers::Stop { name, timeout },
        None => Containers::StopAll { timeout },
    })
}

/// `start [--trace] NAME`
fn start(args: &[String]) -> Result<Containers, Usage> {
    let mut trace = false;
    let pos = scan(args, &mut |o, _| match o {
        "--trace" => on(&mut trace),
        _ => Ok(false),
    })?;
    let name = package_name(one(pos, "package name")?)?;
    Ok(Containers::Start { name, trace })
}

/// `bind PACKAGE --into CONTAINER [--at PATH] [--persist]`, `unbind PACKAGE --from CONTAINER`.
fn bind(unbind: bool, args: &[String]) -> Result<Containers, Usage> {
    let (mut container, mut at, mut persist) = (None, None, false);
    let pos = scan(args, &mut |o, p| match (o, unbind) {
        ("--into", false) | ("--from", true) => first(&mut container, p, o),
        ("--at", false) => first(&mut at, p, o),
        ("--persist", false) => on(&mut persist),
        _ => Ok(false),
    })?;
    let package = package_name(one(pos, "package name")?)?;
    let opt = if unbind { "--from" } else { "--into" };
    let container =
        package_name(container.ok_or_else(|| usage(format!("missing {opt} CONTAINER")))?)?;
    if let Some(at) = &at {
        berth_core::bind::check_target(at).map_err(|e| usage(format!("--at {e}")))?;
    }
    Ok(match unbind {
        true => Containers::Unbind { package, container },
        false => Containers::Bind {
            package,
            container,
            at,
            persist,
        },
    })
}

fn logs(args: &[String]) -> Result<Containers, Usage> {
    let (mut follow, mut raw) = (false, false);
    let pos = scan(args, &mut |o, _| match o {
        "-f" | "--follow" => on(&mut follow),
        "--raw" => on(&mut raw),
        _ => Ok(false),
    })?;
    let name = package_name(one(pos, "package name")?)?;
    Ok(Containers::Logs { name, follow, raw })
}

fn limit(args: &[String]) -> Result<Limit, Usage> {
    let (mut cpu, mut memory, mut pids) = (None, None, None);
    #[cfg(feature = "shape")]
    let (mut egress, mut ingress) = (None, None);
    let pos = scan(args, &mut |o, p| match o {
        "--cpu" => first(&mut cpu, p, o),
        "--memory" => first(&mut memory, p, o),
        "--pids" => first(&mut pids, p, o),
        #[cfg(feature = "shape")]
        "--egress" => first(&mut egress, p, o),
        #[cfg(feature = "shape")]
        "--ingress" => first(&mut ingress, p, o),
        _ => Ok(false),
    })?;
    let name = package_name(one(pos, "package name")?)?;
    let pids = match pids {
        Some(n) => Some(
            n.parse()
                .map_err(|_| usage(format!("--pids {n}: expected a number")))?,
        ),
        None => None,
    };
    Ok(Limit {
        name,
        cpu,
        memory,
        pids,
        #[cfg(feature = "shape")]
        egress,
        #[cfg(feature = "shape")]
        ingress,
    })
}

/// The vendor tools' commands.
#[cfg(feature = "vendor")]
#[derive(Debug, PartialEq, Eq)]
pub enum Vendor {
    Key {
        prefix: String,
        comment: Option<String>,
    },
    Pack {
        dir: String,
        out: String,
        strict: bool,
    },
    Repo {
        dir: String,
        key: String,
        valid_for_s: Option<u64>,
        /// `--deltas-from OLD_REPO`: publish deltas from its images to this one's.
        deltas_from: Option<String>,
    },
    /// `repo bundle DIR -o FILE [--version V] [--install N,…] [--board B[:REV,…]] [--index-only]`.
    Bundle {
        dir: String,
        out: String,
        version: Option<String>,
        install: Vec<String>,
        board: Option<(String, Vec<String>)>,
        index_only: bool,
    },
    /// `import oci:LAYOUT[:TAG]|docker-archive:FILE|registry://HOST/REPO[:TAG] -o FILE
    /// [--name N] [--version V] [--max-size SIZE] [--max-entries N] [--arch A] [--plain-http]
    /// [--ca-file F] [--auth-file F]`.
    Import {
        source: String,
        out: String,
        name: Option<String>,
        version: Option<String>,
        limits: crate::vendor::import::Limits,
        registry: crate::vendor::registry::Options,
    },
}

/// `key`, `pack` or `repo` and their arguments.
#[cfg(feature = "vendor")]
pub fn vendor(command: &str, args: &[String]) -> Result<Vendor, Usage> {
    match command {
        "key" => key(args),
        "pack" => pack(args),
        "repo" => repo(args),
        "import" => import(args),
        _ => Err(usage(format!("unknown command {command:?}"))),
    }
}

#[cfg(feature = "vendor")]
fn key(args: &[String]) -> Result<Vendor, Usage> {
    let (mut prefix, mut comment) = (None, None);
    let pos = scan(args, &mut |o, p| match o {
        "-o" | "--output" => first(&mut prefix, p, o),
        "--comment" => first(&mut comment, p, o),
        _ => Ok(false),
    })?;
    if pos != ["generate"] {
        return Err(usage(
            "usage: berth key generate -o PREFIX [--comment TEXT]",
        ));
    }
    let prefix = prefix.ok_or_else(|| usage("key generate needs -o PREFIX"))?;
    Ok(Vendor::Key { prefix, comment })
}

#[cfg(feature = "vendor")]
fn import(args: &[String]) -> Result<Vendor, Usage> {
    let (mut out, mut name, mut version) = (None, None, None);
    let (mut max_size, mut max_entries) = (None, None);
    let (mut arch, mut plain_http, mut ca_file, mut auth_file) = (None, false, None, None);
    let pos = scan(args, &mut |o, p| match o {
        "-o" | "--output" => first(&mut out, p, o),
        "--name" => first(&mut name, p, o),
        "--version" => first(&mut version, p, o),
        "--max-size" => first(&mut max_size, p, o),
        "--max-entries" => first(&mut max_entries, p, o),
        "--arch" => first(&mut arch, p, o),
        "--plain-http" => on(&mut plain_http),
        "--ca-file" => first(&mut ca_file, p, o),
        "--auth-file" => first(&mut auth_file, p, o),
        _ => Ok(false),
    })?;
    let registry = crate::vendor::registry::Options {
        arch,
        plain_http,
        ca_file: ca_file.map(std::path::PathBuf::from),
        auth_file: auth_file.map(std::path::PathBuf::from),
        max_bytes: None,
    };
    let mut limits = crate::vendor::import::Limits::default();
    if let Some(s) = max_size {
        limits.max_bytes =
            berth_core::manifest::parse_size(&s).map_err(|e| usage(format!("--max-size: {e}")))?;
    }
    if let Some(n) = max_entries {
        limits.max_entries = n
            .parse()
            .map_err(|_| usage(format!("--max-entries {n:?}: expected a number")))?;
    }
    let source = one(
        pos,
        "image (oci:LAYOUT[:TAG], docker-archive:FILE or registry://HOST/REPO[:TAG])",
    )?;
    let out = out.ok_or_else(|| usage("import needs -o FILE"))?;
    if let Some(n) = &name {
        berth_core::name::Name::parse(n).map_err(|e| usage(format!("--name {n}: {e}")))?;
    }
    Ok(Vendor::Import {
        source,
        out,
        name,
        version,
        limits,
        registry,
    })
}

#[cfg(feature = "vendor")]
fn pack(args: &[String]) -> Result<Vendor, Usage> {
    let (mut out, mut strict) = (None, false);
    let pos = scan(args, &mut |o, p| match o {
        "-o" | "--output" => first(&mut out, p, o),
        "--strict" => on(&mut strict),
        _ => Ok(false),
    })?;
    let dir = one(pos, "package directory")?;
    let out = out.ok_or_else(|| usage("pack needs -o FILE"))?;
    Ok(Vendor::Pack { dir, out, strict })
}

#[cfg(feature = "vendor")]
fn repo(args: &[String]) -> Result<Vendor, Usage> {
    if args.first().is_some_and(|w| w == "bundle") {
        return bundle(args);
    }
    let (mut key, mut valid_for, mut deltas_from) = (None, None, None);
    let pos = scan(args, &mut |o, p| match o {
        "--key" | "-k" => first(&mut key, p, o),
        "--valid-for" => first(&mut valid_for, p, o),
        "--deltas-from" => first(&mut deltas_from, p, o),
        _ => Ok(false),
    })?;
    let dir = match <[String; 2]>::try_from(pos) {
        Ok([build, dir]) if build == "build" => dir,
        _ => {
            return Err(usage(
                "usage: berth repo build DIR --key SECKEY [--valid-for DURATION] [--deltas-from OLD_REPO]",
            ))
        }
    };
    let key = key.ok_or_else(|| usage("repo build needs --key SECKEY"))?;
    let valid_for_s = match valid_for {
        None => None,
        Some(v) => match berth_core::manifest::parse_duration_s(&v) {
            Err(e) => return Err(usage(format!("--valid-for: {e}"))),
            Ok(0) => return Err(usage("--valid-for: must be more than 0")),
            Ok(s) => Some(s),
        },
    };
    Ok(Vendor::Repo {
        dir,
        key,
        valid_for_s,
        deltas_from,
    })
}

#[cfg(feature = "vendor")]
const BUNDLE_USAGE: &str = "usage: berth repo bundle DIR -o FILE [--version V] [--install NAME,…] [--board BOARD[:REV,…]] [--index-only]";

#[cfg(feature = "vendor")]
fn bundle(args: &[String]) -> Result<Vendor, Usage> {
    let (mut out, mut version, mut install, mut board) = (None, None, None, None);
    let mut index_only = false;
    let pos = scan(args, &mut |o, p| match o {
        "-o" | "--output" => first(&mut out, p, o),
        "--version" => first(&mut version, p, o),
        "--install" => first(&mut install, p, o),
        "--board" => first(&mut board, p, o),
        "--index-only" => {
            index_only = true;
            Ok(true)
        }
        _ => Ok(false),
    })?;
    let dir = match <[String; 2]>::try_from(pos) {
        Ok([b, dir]) if b == "bundle" => dir,
        _ => return Err(usage(BUNDLE_USAGE)),
    };
    let out = out.ok_or_else(|| usage("repo bundle needs -o FILE"))?;
    let install: Vec<String> = install
        .map(|l| {
            l.split(',')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    for n in &install {
        berth_core::name::Name::parse(n).map_err(|e| usage(format!("--install {n}: {e}")))?;
    }
    let board = board.map(|b| match b.split_once(':') {
        Some((name, revs)) => (
            name.to_string(),
            revs.split(',')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
        ),
        None => (b, Vec::new()),
    });
    if let Some((b, revs)) = &board {
        if !berth_core::bundle::valid_board(b) || revs.is_empty() {
            return Err(usage(format!(
                "--board {b}: BOARD:REV[,REV…], a board name (a letter, then letters, digits, '-', '_') and its revisions"
            )));
        }
    }
    Ok(Vendor::Bundle {
        dir,
        out,
        version,
        install,
        board,
        index_only,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    /// `berth COMMAND ARGS`, read as a device command.
    fn dev(line: &str) -> Result<Device, Usage> {
        let w = words(line);
        device(&w[0], &w[1..])
    }

    fn refused(line: &str) -> String {
        match dev(line) {
            Err(Usage(m)) => m,
            Ok(c) => panic!("{line:?} was taken as {c:?}"),
        }
    }

    fn name_error(n: &str) -> String {
        berth_core::name::Name::parse(n).unwrap_err().to_string()
    }

    #[test]
    fn bind_and_unbind() {
        assert_eq!(
            dev("bind tools --into web").unwrap(),
            Device::Containers(Containers::Bind {
                package: "tools".into(),
                container: "web".into(),
                at: None,
                persist: false
            })
        );
        assert_eq!(
            dev("bind --persist tools --at /srv/t --into web").unwrap(),
            Device::Containers(Containers::Bind {
                package: "tools".into(),
                container: "web".into(),
                at: Some("/srv/t".into()),
                persist: true
            })
        );
        assert_eq!(
            dev("unbind tools --from web").unwrap(),
            Device::Containers(Containers::Unbind {
                package: "tools".into(),
                container: "web".into()
            })
        );
        for (line, msg) in [
            ("bind tools", "missing --into CONTAINER"),
            ("bind --into web", "missing package name"),
            ("bind a b --into web", "expected one package name, got 2"),
            ("bind tools --into", "--into needs a value"),
            (
                "bind tools --into web --at opt/x",
                "--at \"opt/x\" must be an absolute path",
            ),
            (
                "bind tools --into web --at /proc/x",
                "--at /proc/x: is below /proc",
            ),
            ("bind tools --from web", "unknown option --from"),
            ("unbind tools --into web", "unknown option --into"),
            (
                "unbind tools --from web --persist",
                "unknown option --persist",
            ),
            ("unbind tools", "missing --from CONTAINER"),
        ] {
            assert_eq!(refused(line), msg, "{line}");
        }
        assert_eq!(refused("bind tools --into Web"), name_error("Web"));
    }

    #[test]
    fn report_commands() {
        let id = "20261125T101500Z-web-exit";
        assert_eq!(dev("report list"), Ok(Device::Reports(Reports::List(None))));
        assert_eq!(
            dev("report list web"),
            Ok(Device::Reports(Reports::List(Some("web".into()))))
        );
        assert_eq!(
            dev(&format!("report show {id}")),
            Ok(Device::Reports(Reports::Show(id.into())))
        );
        assert_eq!(
            dev(&format!("report export {id} -o /tmp/r.tgz --force")),
            Ok(Device::Reports(Reports::Export {
                id: id.into(),
                out: "/tmp/r.tgz".into(),
                force: true
            }))
        );
        assert_eq!(
            dev("report remove --all"),
            Ok(Device::Reports(Reports::Remove(None)))
        );
        assert_eq!(
            dev(&format!("report remove {id}")),
            Ok(Device::Reports(Reports::Remove(Some(id.into()))))
        );
        for (line, needle) in [
            ("report", "list, show, export or remove"),
            ("report frob", "unknown report command"),
            ("report list a b", "at most one name"),
            ("report list Web", "invalid"),
            ("report show", "missing report id"),
            ("report export x", "needs -o FILE"),
            ("report remove", "one id, or --all"),
            ("report remove x --all", "one id, or --all"),
            ("report list --force", "takes no options"),
        ] {
            let m = refused(line);
            assert!(m.contains(needle), "{line}: {m}");
        }
        let w = words("4242 11 crashy");
        assert_eq!(
            core_handler(&w),
            Ok(CoreHandler {
                pid: 4242,
                signal: 11
            })
        );
        assert!(core_handler(&words("x 11")).is_err());
        assert!(core_handler(&words("1")).is_err());
        // A crashing process named "x --config /t" under an old pattern's %e: its words are
        // the handler's, ignored; the configuration stays the one given before the command.
        let line = global(
            words("--config /etc/berth/berth.toml core-handler 12 11 x --config /t --json"),
            "/etc/b.toml".into(),
        );
        assert_eq!(
            line,
            Ok(Line::Run {
                global: Global {
                    config: "/etc/berth/berth.toml".into(),
                    json: false
                },
                command: "core-handler".into(),
                args: words("12 11 x --config /t --json"),
            })
        );
        let Ok(Line::Run { args, .. }) = line else {
            unreachable!()
        };
        assert_eq!(
            core_handler(&args),
            Ok(CoreHandler {
                pid: 12,
                signal: 11
            })
        );
    }

    #[test]
    fn global_flags_stand_anywhere_and_help_only_before_the_command() {
        let run = |line: &str| global(words(line), "/etc/b.toml".into());
        assert_eq!(
            run("status web --json --config /tmp/c.toml"),
            Ok(Line::Run {
                global: Global {
                    config: "/tmp/c.toml".into(),
                    json: true
                },
                command: "status".into(),
                args: words("web"),
            })
        );
        // --json is taken even where an option expects a value.
        assert_eq!(
            run("stop -t --json web"),
            Ok(Line::Run {
                global: Global {
                    config: "/etc/b.toml".into(),
                    json: true
                },
                command: "stop".into(),
                args: words("-t web"),
            })
        );
        for help in [
            "-h",
            "--help",
            "help",
            "--json --help",
            "--config x help status",
        ] {
            assert_eq!(run(help), Ok(Line::Help), "{help}");
        }
        let Ok(Line::Run { args, .. }) = run("status --help") else {
            panic!("status --help")
        };
        assert_eq!(args, ["--help"]);
        assert_eq!(run("status --config"), Err("--config needs a file"));
        assert_eq!(run(""), Err("no command given"));
        assert_eq!(run("--json"), Err("no command given"));
        // The word after --config is the file, whatever it looks like.
        assert_eq!(run("--config --help"), Err("no command given"));
    }

    #[test]
    fn daemon_takes_nothing() {
        assert_eq!(daemon(&[]), Ok(()));
        assert_eq!(
            daemon(&words("now")),
            Err(Usage("daemon takes no arguments".into()))
        );
        assert_eq!(
            daemon(&words("--now")),
            Err(Usage("unknown option --now".into()))
        );
    }

    #[test]
    fn upgrade_takes_force_and_names() {
        use Packages as P;
        assert_eq!(
            dev("upgrade"),
            Ok(Device::Packages(P::Upgrade {
                names: vec![],
                force: false
            }))
        );
        assert_eq!(
            dev("upgrade web --force db"),
            Ok(Device::Packages(P::Upgrade {
                names: vec!["web".into(), "db".into()],
                force: true
            }))
        );
        assert_eq!(
            dev("upgrade --now"),
            Err(Usage("unknown option --now".into()))
        );
    }

    #[test]
    fn package_commands() {
        use Packages as P;
        assert_eq!(
            dev("update"),
            Ok(Device::Packages(P::Update {
                reset_serial: false
            }))
        );
        assert_eq!(
            dev("update --reset-serial"),
            Ok(Device::Packages(P::Update { reset_serial: true }))
        );
        assert_eq!(
            refused("update --reset-serial extra"),
            "update takes no arguments besides --reset-serial"
        );
        let lists = |installed, available, upgradable| {
            Ok(Device::Packages(P::List(Lists {
                installed,
                available,
                upgradable,
            })))
        };
        assert_eq!(dev("list"), lists(true, true, true));
        assert_eq!(dev("list --installed"), lists(true, false, false));
        assert_eq!(
            dev("list --available --upgradable"),
            lists(false, true, true)
        );
        // Positionals were never looked at.
        assert_eq!(dev("list whatever"), lists(true, true, true));
        assert_eq!(refused("list --all"), "unknown option --all");
        // Names go to the daemon as they are: it names the one it does not know.
        assert_eq!(
            dev("install web Bad_Name"),
            Ok(Device::Packages(P::Install(words("web Bad_Name"))))
        );
        assert_eq!(
            refused("install"),
            "install needs at least one package name"
        );
        assert_eq!(refused("install -y web"), "unknown option -y");
        assert_eq!(
            dev("remove --purge a b"),
            Ok(Device::Packages(P::Remove {
                names: words("a b"),
                purge: true
            }))
        );
        assert_eq!(
            dev("remove a"),
            Ok(Device::Packages(P::Remove {
                names: words("a"),
                purge: false
            }))
        );
        assert_eq!(
            refused("remove --purge"),
            "remove needs at least one package name"
        );
        assert_eq!(dev("gc"), Ok(Device::Packages(P::Gc)));
        assert_eq!(dev("gc now"), Ok(Device::Packages(P::Gc)));
        assert_eq!(refused("gc --all"), "unknown option --all");
    }

    #[test]
    fn container_commands() {
        use Containers as C;
        assert_eq!(
            dev("start web"),
            Ok(Device::Containers(C::Start {
                name: "web".into(),
                trace: false
            }))
        );
        assert_eq!(
            dev("start --trace web"),
            Ok(Device::Containers(C::Start {
                name: "web".into(),
                trace: true
            }))
        );
        assert_eq!(refused("start --trace"), "missing package name");
        assert_eq!(
            dev("restart web"),
            Ok(Device::Containers(C::Restart("web".into())))
        );
        for cmd in ["start", "restart", "stop", "logs", "logs -f"] {
            assert_eq!(refused(cmd), "missing package name", "{cmd}");
            assert_eq!(
                refused(&format!("{cmd} a b")),
                "expected one package name, got 2",
                "{cmd}"
            );
            assert_eq!(
                refused(&format!("{cmd} Bad_Name")),
                name_error("Bad_Name"),
                "{cmd}"
            );
        }
        let stop = |name: &str, timeout| {
            Ok(Device::Containers(C::Stop {
                name: name.into(),
                timeout,
            }))
        };
        assert_eq!(dev("stop web"), stop("web", None));
        assert_eq!(dev("stop -t 5 web"), stop("web", Some(5)));
        assert_eq!(dev("stop web --timeout 0"), stop("web", Some(0)));
        // The first of repeated values counts.
        assert_eq!(dev("stop -t 5 --timeout 9 web"), stop("web", Some(5)));
        assert_eq!(refused("stop web -t soon"), "-t soon: expected seconds");
        assert_eq!(refused("stop web --timeout -5"), "-t -5: expected seconds");
        assert_eq!(refused("stop web -t"), "-t needs a value");
        assert_eq!(refused("stop web --timeout"), "--timeout needs a value");
        // Options are matched whole.
        assert_eq!(refused("stop web -t5"), "unknown option -t5");
        assert_eq!(
            refused("stop web --timeout=5"),
            "unknown option --timeout=5"
        );
        assert_eq!(refused("stop -- web"), "unknown option --");
        // The name is checked before the timeout.
        assert_eq!(refused("stop -t soon"), "missing package name");
        assert_eq!(
            dev("stop --all -t 3"),
            Ok(Device::Containers(C::StopAll { timeout: Some(3) }))
        );
        assert_eq!(
            refused("stop --all web"),
            "stop --all takes no package name"
        );
        assert_eq!(dev("metrics"), Ok(Device::Metrics));
        assert_eq!(refused("metrics now"), "metrics takes no arguments");

        assert_eq!(dev("status"), Ok(Device::Containers(C::Status(None))));
        assert_eq!(
            dev("status web"),
            Ok(Device::Containers(C::Status(Some("web".into()))))
        );
        assert_eq!(refused("status a b"), "status takes at most one name");
        assert_eq!(refused("status Bad_Name"), name_error("Bad_Name"));
        assert_eq!(refused("status -"), name_error("-"));

        let logs = |follow, raw| {
            Ok(Device::Containers(C::Logs {
                name: "web".into(),
                follow,
                raw,
            }))
        };
        assert_eq!(dev("logs web"), logs(false, false));
        assert_eq!(dev("logs -f web"), logs(true, false));
        assert_eq!(dev("logs web --follow --raw"), logs(true, true));
        assert_eq!(dev("logs --raw web"), logs(false, true));
        assert_eq!(refused("logs -fr web"), "unknown option -fr");
        assert_eq!(refused("logs --raw=1 web"), "unknown option --raw=1");

        assert_eq!(
            dev("inspect web"),
            Ok(Device::Containers(C::Inspect("web".into())))
        );
        assert_eq!(refused("inspect"), "inspect takes one name");
        assert_eq!(refused("inspect a b"), "inspect takes one name");
        assert_eq!(refused("inspect Bad_Name"), name_error("Bad_Name"));
    }

    #[test]
    fn schedule_commands() {
        let w = |line: &str| line.split(' ').map(String::from).collect::<Vec<_>>();
        let sched = |line: &str| schedule(&w(line));
        assert_eq!(sched("list web"), Ok(Schedules::List("web".into())));
        assert_eq!(
            sched("add web --cron */5_*_*_*_* -- /bin/job -v --cron x --"),
            Ok(Schedules::Add {
                name: "web".into(),
                cron: "*/5_*_*_*_*".into(),
                cmd: w("/bin/job -v --cron x --"),
            })
        );
        assert_eq!(
            sched("remove web a3"),
            Ok(Schedules::Remove {
                name: "web".into(),
                id: "a3".into()
            })
        );
        for (line, needle) in [
            ("", "list, add or remove"),
            ("list", "missing package name"),
            ("list Web", "invalid"),
            ("list web --cron x", "takes no --cron"),
            ("add web -- /x", "needs --cron"),
            ("add web --cron @daily", "needs -- and the command"),
            ("add web --cron @daily --", "needs -- and the command"),
            ("add --cron @daily -- /x", "missing package name"),
            ("remove web", "schedule remove NAME ID"),
            ("remove web a1 -- /x", "takes no --cron"),
            ("frob web", "unknown schedule command"),
            ("add web --cron", "--cron needs a value"),
        ] {
            match schedule(
                &w(line)
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>(),
            ) {
                Err(Usage(m)) => assert!(m.contains(needle), "{line}: {m}"),
                Ok(c) => panic!("{line:?} was taken as {c:?}"),
            }
        }
        // Global flags after `--` are the command's.
        let Ok(Line::Run { global, args, .. }) = global_flags(w(
            "schedule add web --cron @daily --json -- /bin/x --json --config y",
        )) else {
            panic!()
        };
        assert!(global.json);
        assert_eq!(args, w("add web --cron @daily -- /bin/x --json --config y"));
    }

    fn global_flags(args: Vec<String>) -> Result<Line, &'static str> {
        global(args, "/etc/b.toml".into())
    }

    #[test]
    fn safe_mode_commands() {
        assert_eq!(dev("safe-mode enter"), Ok(Device::SafeMode { enter: true }));
        assert_eq!(
            dev("safe-mode clear"),
            Ok(Device::SafeMode { enter: false })
        );
        for bad in ["safe-mode", "safe-mode on", "safe-mode enter clear"] {
            assert_eq!(refused(bad), "usage: berth safe-mode enter|clear", "{bad}");
        }
        assert_eq!(refused("safe-mode clear --now"), "unknown option --now");
    }

    #[test]
    fn resource_commands() {
        use Resources as R;
        let limit = |cpu: Option<&str>, memory: Option<&str>, pids| {
            Ok(Device::Resources(R::Limit(Limit {
                name: "web".into(),
                cpu: cpu.map(String::from),
                memory: memory.map(String::from),
                pids,
                #[cfg(feature = "shape")]
                egress: None,
                #[cfg(feature = "shape")]
                ingress: None,
            })))
        };
        assert_eq!(dev("limit web"), limit(None, None, None));
        assert_eq!(
            dev("limit --cpu 50% web --memory 64M --pids 32"),
            limit(Some("50%"), Some("64M"), Some(32))
        );
        // CPU and memory go to the daemon as written: it reads their units.
        assert_eq!(dev("limit web --cpu lots"), limit(Some("lots"), None, None));
        assert_eq!(
            refused("limit web --pids lots"),
            "--pids lots: expected a number"
        );
        assert_eq!(
            refused("limit web --pids -1"),
            "--pids -1: expected a number"
        );
        assert_eq!(refused("limit web --cpu"), "--cpu needs a value");
        assert_eq!(refused("limit web --memory"), "--memory needs a value");
        // Rates too go as written (a build without bandwidth shaping has no such options).
        #[cfg(feature = "shape")]
        {
            let Ok(Device::Resources(R::Limit(l))) = dev("limit web --egress 8mbit --ingress none")
            else {
                panic!("limit with rates")
            };
            assert_eq!(
                (l.egress.as_deref(), l.ingress.as_deref()),
                (Some("8mbit"), Some("none"))
            );
            assert_eq!(refused("limit web --egress"), "--egress needs a value");
        }
        #[cfg(not(feature = "shape"))]
        assert_eq!(
            refused("limit web --egress 8mbit"),
            "unknown option --egress"
        );
        assert_eq!(refused("limit web --swap 1G"), "unknown option --swap");
        assert_eq!(refused("limit --cpu 5"), "missing package name");
        assert_eq!(refused("limit Bad_Name"), name_error("Bad_Name"));

        assert_eq!(dev("stats"), Ok(Device::Resources(R::Stats(None))));
        // The daemon checks this name.
        assert_eq!(
            dev("stats Bad_Name"),
            Ok(Device::Resources(R::Stats(Some("Bad_Name".into()))))
        );
        assert_eq!(refused("stats a b"), "stats takes at most one name");
        assert_eq!(dev("governor"), Ok(Device::Resources(R::Governor)));
        assert_eq!(dev("governor now"), Ok(Device::Resources(R::Governor)));
        assert_eq!(refused("governor -v"), "unknown option -v");
    }

    #[test]
    fn net_commands() {
        let net = |hosts| Ok(Device::Net { hosts });
        assert_eq!(dev("net"), net(false));
        assert_eq!(dev("net hosts"), net(true));
        for bad in ["net ports", "net hosts hosts"] {
            assert_eq!(refused(bad), NET_REFUSAL);
        }
        #[cfg(feature = "shape")]
        {
            assert_eq!(dev("net metered on"), Ok(Device::NetMetered(true)));
            assert_eq!(dev("net metered off"), Ok(Device::NetMetered(false)));
            assert_eq!(refused("net metered"), "usage: berth net metered on|off");
            assert_eq!(
                refused("net metered yes"),
                "usage: berth net metered on|off"
            );
        }
        assert_eq!(refused("net --hosts"), "unknown option --hosts");
    }

    #[test]
    fn unknown_commands_are_named() {
        assert_eq!(refused("frobnicate"), "unknown command \"frobnicate\"");
        assert_eq!(refused("--verbose"), "unknown command \"--verbose\"");
    }

    #[cfg(feature = "vendor")]
    #[test]
    fn vendor_commands() {
        let ven = |line: &str| {
            let w = words(line);
            vendor(&w[0], &w[1..])
        };
        let refused = |line: &str| match ven(line) {
            Err(Usage(m)) => m,
            Ok(c) => panic!("{line:?} was taken as {c:?}"),
        };
        assert_eq!(
            ven("key generate -o /tmp/k --comment vendor"),
            Ok(Vendor::Key {
                prefix: "/tmp/k".into(),
                comment: Some("vendor".into())
            })
        );
        assert_eq!(
            ven("key --output /tmp/k generate"),
            Ok(Vendor::Key {
                prefix: "/tmp/k".into(),
                comment: None
            })
        );
        let key_usage = "usage: berth key generate -o PREFIX [--comment TEXT]";
        for bad in ["key", "key make -o k", "key generate now -o k"] {
            assert_eq!(refused(bad), key_usage, "{bad}");
        }
        assert_eq!(refused("key generate"), "key generate needs -o PREFIX");
        assert_eq!(refused("key generate -o"), "-o needs a value");

        assert_eq!(
            ven("pack pkg/ -o out.sqfs"),
            Ok(Vendor::Pack {
                dir: "pkg/".into(),
                out: "out.sqfs".into(),
                strict: false
            })
        );
        assert_eq!(
            ven("pack pkg/ -o out.sqfs --strict"),
            Ok(Vendor::Pack {
                dir: "pkg/".into(),
                out: "out.sqfs".into(),
                strict: true
            })
        );
        assert_eq!(refused("pack -o out.sqfs"), "missing package directory");
        assert_eq!(
            refused("pack a b -o out.sqfs"),
            "expected one package directory, got 2"
        );
        assert_eq!(refused("pack pkg/"), "pack needs -o FILE");
        assert_eq!(refused("pack pkg/ --out x"), "unknown option --out");

        let repo = |valid_for_s, deltas_from: Option<&str>| {
            Ok(Vendor::Repo {
                dir: "r".into(),
                key: "k.sec".into(),
                valid_for_s,
                deltas_from: deltas_from.map(String::from),
            })
        };
        assert_eq!(ven("repo build r --key k.sec"), repo(None, None));
        assert_eq!(
            ven("repo build r -k k.sec --valid-for 2h"),
            repo(Some(7200), None)
        );
        assert_eq!(
            ven("repo build r -k k.sec --deltas-from old/"),
            repo(None, Some("old/"))
        );
        assert_eq!(
            ven("repo bundle r -o b.berth --install web,mqtt --board rt:1,2 --index-only"),
            Ok(Vendor::Bundle {
                dir: "r".into(),
                out: "b.berth".into(),
                version: None,
                install: vec!["web".into(), "mqtt".into()],
                board: Some(("rt".into(), vec!["1".into(), "2".into()])),
                index_only: true,
            })
        );
        assert_eq!(refused("repo bundle r"), "repo bundle needs -o FILE");
        assert!(refused("repo bundle -o x").starts_with("usage: berth repo bundle"));
        assert!(refused("repo bundle r -o x --install 'Bad'").contains("--install"));
        assert!(refused("repo bundle r -o x --board rt").contains("BOARD:REV"));
        let repo_usage = "usage: berth repo build DIR --key SECKEY [--valid-for DURATION] [--deltas-from OLD_REPO]";
        for bad in [
            "repo",
            "repo build",
            "repo make r -k k",
            "repo build r s -k k",
        ] {
            assert_eq!(refused(bad), repo_usage, "{bad}");
        }
        assert_eq!(refused("repo build r"), "repo build needs --key SECKEY");
        assert_eq!(
            refused("repo build r -k k --valid-for 0d"),
            "--valid-for: must be more than 0"
        );
        assert_eq!(
            refused("repo build r -k k --valid-for soon"),
            format!(
                "--valid-for: {}",
                berth_core::manifest::parse_duration_s("soon").unwrap_err()
            )
        );
        // The key is asked for before the duration is read.
        assert_eq!(
            refused("repo build r --valid-for soon"),
            "repo build needs --key SECKEY"
        );
    }

    /// Words that satisfy a command's operands and required options, so that only the option
    /// `trying` is on trial ("" for none).
    fn operands(c: &crate::command::Cmd, trying: &str) -> Vec<String> {
        let w: &[&str] = match (c.name, trying) {
            ("report remove" | "stop", "--all") => &[],
            ("report show" | "report remove", _) => &["r1"],
            ("report export", _) => &["r1", "-o", "/tmp/r1.tar.gz"],
            ("schedule remove", _) => &["web", "s1"],
            ("schedule add", _) => &["web", "--cron", "@daily", "--", "true"],
            ("bind", _) => &["web", "--into", "web"],
            ("unbind", _) => &["web", "--from", "web"],
            ("safe-mode", _) => &["enter"],
            ("net", _) => &[],
            _ if c.synopsis.contains("NAME") || c.synopsis.contains("PACKAGE") => &["web"],
            _ => &[],
        };
        w.iter().map(|x| x.to_string()).collect()
    }

    /// Every option the table lists is one the command's parser takes, and every command
    /// the table lists for the device is one `args::device` knows.
    #[test]
    fn the_table_and_the_parsers_agree() {
        let top_level = ["daemon", "check", "version", "core-handler"];
        for c in crate::command::COMMANDS
            .iter()
            .filter(|c| c.part == crate::command::Part::Device)
        {
            if top_level.contains(&c.name) || c.parse == crate::command::Parse::Fields {
                continue;
            }
            let mut words: Vec<String> = c.name.split(' ').map(String::from).collect();
            let first = words.remove(0);
            let with = |extra: &[String]| {
                let mut w = words.clone();
                w.extend(extra.iter().cloned());
                let ops = operands(c, extra.first().map(String::as_str).unwrap_or(""));
                // Options before the operands' `--`, if any.
                match ops.iter().position(|x| x == "--") {
                    Some(i) => {
                        w.extend(ops[..i].iter().cloned());
                        w.extend(ops[i..].iter().cloned());
                    }
                    None => w.extend(ops),
                }
                device(&first, &w)
            };
            if let Err(Usage(m)) = with(&[]) {
                assert!(
                    !m.contains("unknown command"),
                    "{}: the parser does not know it: {m}",
                    c.name
                );
            }
            for o in c.options {
                for spelling in [o.long, o.short].into_iter().filter(|s| !s.is_empty()) {
                    let mut extra = vec![spelling.to_string()];
                    if !o.value.is_empty() {
                        extra.push(match o.value {
                            "SECS" | "N" => "5".into(),
                            "P%" => "50%".into(),
                            "SIZE" => "64M".into(),
                            "PATH" => "/opt/x".into(),
                            "EXPR" => "@daily".into(),
                            _ => "web".into(),
                        });
                    }
                    match with(&extra) {
                        Ok(_) => {}
                        Err(Usage(m)) => panic!("{} {spelling}: refused: {m}", c.name),
                    }
                }
            }
        }
        assert!(matches!(
            device("frobnicate", &[]),
            Err(Usage(m)) if m.contains("unknown command")
        ));
    }

    /// A command the table reads takes its operand and options by the table, and refuses
    /// what the table does not list.
    #[test]
    fn commands_read_by_the_table() {
        use crate::command::{named, Cmd, Operand, Parse, COMMANDS};
        let ping = named("ping").unwrap();
        assert_eq!(ping.parse, Parse::Fields);
        assert!(fields(ping, &[]).unwrap().is_empty());
        assert_eq!(
            fields(ping, &words("x")),
            Err(Usage("ping takes no arguments".into()))
        );
        assert_eq!(
            fields(ping, &words("--x")),
            Err(Usage("unknown option --x".into()))
        );
        // A command with an operand and options of each kind, as the table would declare it.
        let stop = COMMANDS.iter().find(|c| c.name == "stop").unwrap();
        let c = Cmd {
            parse: Parse::Fields,
            operand: Operand::Package,
            ..*stop
        };
        let f = fields(&c, &words("web -t 5 --all -t 7")).unwrap();
        assert_eq!(
            serde_json::Value::Object(f).to_string(),
            r#"{"all":true,"name":"web","timeout":5}"#
        );
        assert_eq!(
            fields(&c, &words("web -t soon")),
            Err(Usage("-t soon: expected a number".into()))
        );
        assert_eq!(
            fields(&c, &words("")),
            Err(Usage("missing package name".into()))
        );
        assert!(fields(&c, &words("Bad/Name")).is_err());
        assert_eq!(
            fields(&c, &words("web -t")),
            Err(Usage("-t needs a value".into()))
        );
    }
}
