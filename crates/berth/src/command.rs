//! The command line's definitions: every command with its operands, options and help. `--help`
//! is written from this table, and so are the shell completions and the man page
//! (`berth completions`, `berth manpage`; [`super::docs`]). A unit test holds the parsers of
//! [`super::args`] to it: every option listed here is one its command accepts.
//!
//! The device build (no vendor tools) writes only `--help` from it; the options and operands
//! are the completions' and the man page's.
#![cfg_attr(not(feature = "vendor"), allow(dead_code))]

/// One option of a command.
pub struct Opt {
    /// `--timeout`, or a short-only option such as `-o`.
    pub long: &'static str,
    /// Its short form (`-t`), or "".
    pub short: &'static str,
    /// The value's name (`SECS`), or "" for a switch.
    pub value: &'static str,
    pub help: &'static str,
}

/// What a command's operands are, for the completions.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Operand {
    None,
    /// Installed packages (and so containers).
    Package,
    /// Packages of the repository's index.
    Available,
    /// Fixed words (`enter`, `clear`).
    Words(&'static [&'static str]),
    Dir,
    /// Anything (report ids, cron expressions, process ids).
    Any,
}

/// The part of `--help` a command is listed in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Part {
    Device,
    Vendor,
}

pub struct Cmd {
    /// One word, or two for a command with subcommands (`report list`).
    pub name: &'static str,
    /// What follows the name in the synopsis.
    pub synopsis: &'static str,
    pub help: &'static str,
    pub options: &'static [Opt],
    pub operand: Operand,
    pub part: Part,
}

const fn opt(
    long: &'static str,
    short: &'static str,
    value: &'static str,
    help: &'static str,
) -> Opt {
    Opt {
        long,
        short,
        value,
        help,
    }
}

const fn cmd(
    name: &'static str,
    synopsis: &'static str,
    operand: Operand,
    options: &'static [Opt],
    help: &'static str,
) -> Cmd {
    Cmd {
        name,
        synopsis,
        help,
        options,
        operand,
        part: Part::Device,
    }
}

#[cfg(feature = "vendor")]
const fn vendor(
    name: &'static str,
    synopsis: &'static str,
    operand: Operand,
    options: &'static [Opt],
    help: &'static str,
) -> Cmd {
    Cmd {
        name,
        synopsis,
        help,
        options,
        operand,
        part: Part::Vendor,
    }
}

/// A device build neither lists nor runs the vendor tools: their names stay (to say so),
/// their help does not take the device's flash.
#[cfg(not(feature = "vendor"))]
const fn vendor(
    name: &'static str,
    _synopsis: &'static str,
    operand: Operand,
    _options: &'static [Opt],
    _help: &'static str,
) -> Cmd {
    Cmd {
        name,
        synopsis: "",
        help: "",
        options: &[],
        operand,
        part: Part::Vendor,
    }
}

use Operand as O;

/// The flags every command takes, anywhere on the line.
pub const GLOBAL: &[Opt] = &[
    opt(
        "--config",
        "",
        "FILE",
        "the configuration (default: $BERTH_CONFIG, else /etc/berth/berth.toml)",
    ),
    opt("--json", "", "", "machine-readable output, errors included"),
    opt("--help", "-h", "", "this list of commands"),
];

pub const COMMANDS: &[Cmd] = &[
    cmd("daemon", "", O::None, &[], "run the supervisor (root; keeps containers across restarts)"),
    cmd(
        "update",
        "[--reset-serial]",
        O::None,
        &[opt(
            "--reset-serial",
            "",
            "",
            "accept a lower serial once, to switch to another repository",
        )],
        "fetch and verify the repository index",
    ),
    cmd(
        "list",
        "[--installed|--available|--upgradable]",
        O::None,
        &[
            opt("--installed", "", "", "the installed packages"),
            opt("--available", "", "", "the packages of the repository"),
            opt("--upgradable", "", "", "the installed packages with a newer version"),
        ],
        "packages: installed, available, upgradable (all three when no option picks some)",
    ),
    cmd("install", "NAME...", O::Available, &[], "install packages and their dependencies"),
    cmd(
        "upgrade",
        "[--force] [NAME...]",
        O::Package,
        &[opt("--force", "", "", "go past the packages' update locks")],
        "move to the newest signed versions (all packages installed by name when none is given); each running one must start and pass its health check, else it is rolled back (exit status 1); refused while a package holds an update lock",
    ),
    cmd("rollback", "NAME", O::Package, &[], "back to the version the last upgrade replaced"),
    cmd(
        "remove",
        "[--purge] NAME...",
        O::Package,
        &[opt("--purge", "", "", "also delete the packages' /data")],
        "remove packages",
    ),
    cmd(
        "start",
        "[--trace] NAME",
        O::Package,
        &[opt("--trace", "", "", "when each step of the start began")],
        "start a container",
    ),
    cmd(
        "stop",
        "[-t SECS] NAME|--all",
        O::Package,
        &[
            opt("--timeout", "-t", "SECS", "SIGKILL after SECS (default: [containers] stop_timeout)"),
            opt("--all", "", "", "every running container, one after another"),
        ],
        "stop a container, or all of them (a stop is never followed by a restart)",
    ),
    cmd("restart", "NAME", O::Package, &[], "stop a container and start it again"),
    cmd(
        "reset",
        "NAME",
        O::Package,
        &[],
        "clear a failed container's state and restart count (no start)",
    ),
    cmd("status", "[NAME]", O::Package, &[], "containers: state, restarts, health, last exit"),
    cmd(
        "logs",
        "[-f] [--raw] NAME",
        O::Package,
        &[
            opt("--follow", "-f", "", "keep printing what the container writes"),
            opt("--raw", "", "", "control characters as written, not escaped as \\x1b"),
        ],
        "a container's output",
    ),
    cmd(
        "limit",
        "NAME [--cpu P%] [--memory SIZE] [--pids N]",
        O::Package,
        &[
            opt("--cpu", "", "P%", "percent of one CPU"),
            opt("--memory", "", "SIZE", "memory limit (64M, 1G)"),
            opt("--pids", "", "N", "process limit"),
        ],
        "change a container's limits, running or not; kept for the next start; no option: show them",
    ),
    cmd(
        "stats",
        "[NAME]",
        O::Package,
        &[],
        "CPU %, memory, pids, throttling, OOM kills (group and containers)",
    ),
    cmd(
        "inspect",
        "NAME",
        O::Package,
        &[],
        "capabilities, seccomp profile, devices, id map in force (JSON)",
    ),
    cmd(
        "bind",
        "PACKAGE --into NAME [--at PATH] [--persist]",
        O::Package,
        &[
            opt("--into", "", "NAME", "the running container"),
            opt("--at", "", "PATH", "where (default /opt/PACKAGE)"),
            opt("--persist", "", "", "again at the container's next starts"),
        ],
        "show an installed package read-only in a running container",
    ),
    cmd(
        "unbind",
        "PACKAGE --from NAME",
        O::Package,
        &[opt("--from", "", "NAME", "the container")],
        "take a bound package away again (and its --persist)",
    ),
    cmd(
        "net",
        "[hosts]",
        O::Words(&["hosts"]),
        &[],
        "containers' addresses, published ports, drop counters; hosts: the LAN's hosts (neighbour table, DHCP, mDNS)",
    ),
    cmd(
        "governor",
        "",
        O::None,
        &[],
        "the adaptive CPU cap: R_n, R_c, the cap, its mode and history",
    ),
    cmd(
        "metrics",
        "",
        O::None,
        &[],
        "Prometheus metrics of the daemon, the containers, the governor and the store (docs/metrics.md)",
    ),
    cmd(
        "tr181",
        "",
        O::None,
        &[],
        "Device.SoftwareModules. as TR-181 defines it: berth the ExecEnv, packages the DeploymentUnits, containers the ExecutionUnits (docs/tr181.md)",
    ),
    cmd("report list", "[NAME]", O::Package, &[], "crash archives kept on the device"),
    cmd("report show", "ID", O::Any, &[], "one report's summary and the archive's members"),
    cmd(
        "report export",
        "ID -o FILE [--force]",
        O::Any,
        &[
            opt("--output", "-o", "FILE", "where to copy the archive (.tar.gz)"),
            opt("--force", "", "", "overwrite FILE"),
        ],
        "copy a crash archive out",
    ),
    cmd(
        "report remove",
        "ID|--all",
        O::Any,
        &[opt("--all", "", "", "every report")],
        "delete reports",
    ),
    cmd("schedule list", "NAME", O::Package, &[], "a container's cron jobs: next and last runs"),
    cmd(
        "schedule add",
        "NAME --cron EXPR -- CMD [ARGS...]",
        O::Package,
        &[opt(
            "--cron",
            "",
            "EXPR",
            "five fields (UTC) or @hourly, @daily, @weekly, @monthly, @yearly, @reboot",
        )],
        "run CMD in the container at the times of EXPR, starting it first if it is stopped",
    ),
    cmd("schedule remove", "NAME ID", O::Package, &[], "remove a schedule added with schedule add"),
    cmd(
        "core-handler",
        "PID SIG",
        O::Any,
        &[],
        "for kernel.core_pattern: |/usr/bin/berth core-handler %P %s",
    ),
    cmd("gc", "", O::None, &[], "delete store images that nothing uses"),
    cmd(
        "safe-mode",
        "enter|clear",
        O::Words(&["enter", "clear"]),
        &[],
        "enter: stop every container, unmount every image, start none until cleared (kept across restarts); clear: back to normal, the containers marked autostart start again",
    ),
    cmd("check", "", O::None, &[], "kernel features berth uses, present or not"),
    cmd("version", "", O::None, &[], "berth's version and liblxc's"),
    vendor(
        "key generate",
        "-o PREFIX [--comment TEXT]",
        O::None,
        &[
            opt("--output", "-o", "PREFIX", "writes PREFIX.pub and PREFIX.sec"),
            opt("--comment", "", "TEXT", "the keys' comment line"),
        ],
        "ed25519 key pair (signify/usign format)",
    ),
    vendor(
        "pack",
        "DIR -o FILE [--strict]",
        O::Dir,
        &[
            opt("--output", "-o", "FILE", "the package image"),
            opt("--strict", "", "", "refuse to pack what it would warn about"),
        ],
        "build a package image with mksquashfs",
    ),
    vendor(
        "repo build",
        "DIR --key SECKEY [--valid-for DURATION] [--deltas-from OLD_REPO]",
        O::Dir,
        &[
            opt("--key", "-k", "SECKEY", "the secret key that signs the index"),
            opt("--valid-for", "", "DURATION", "90m, 12h, 30d (default: no expiry)"),
            opt(
                "--deltas-from",
                "",
                "OLD_REPO",
                "publish zstd deltas from that repository's images",
            ),
        ],
        "write and sign DIR/index.json",
    ),
    vendor(
        "repo bundle",
        "DIR -o FILE [--version V] [--install N,...] [--board B:REV,...] [--index-only]",
        O::Dir,
        &[
            opt("--output", "-o", "FILE", "the bundle (a .swu-layout cpio archive)"),
            opt("--version", "", "V", "the bundle's version (default: the index's serial)"),
            opt("--install", "", "NAME,...", "packages the devices install (and only their images)"),
            opt("--board", "", "BOARD:REV,...", "the board and revisions it fits (default: all)"),
            opt("--index-only", "", "", "no images: the devices fetch them from their repository"),
        ],
        "a signed bundle for a fleet server (docs/fleet.md)",
    ),
    vendor(
        "import",
        "SOURCE -o FILE [--name N] [--version V] [--max-size SIZE] [--max-entries N]",
        O::Any,
        &[
            opt("--output", "-o", "FILE", "the package image"),
            opt("--name", "", "N", "the package name (default: the image's org.opencontainers.image.title label)"),
            opt("--version", "", "V", "the version (default: the image's org.opencontainers.image.version label, then its tag)"),
            opt("--max-size", "", "SIZE", "refuse an image that unpacks to more file data (default 2G)"),
            opt("--max-entries", "", "N", "refuse an image of more entries (default 250000)"),
        ],
        "a container image as a package: SOURCE is oci:LAYOUT[:TAG] or docker-archive:FILE.tar; its layers applied in order (whiteouts honoured), entrypoint, cmd, env, working directory and user as the manifest",
    ),
    vendor(
        "completions",
        "bash|zsh|fish",
        O::Words(&["bash", "zsh", "fish"]),
        &[],
        "a shell completion script, on standard output",
    ),
    vendor("manpage", "", O::None, &[], "the man page berth(1), on standard output"),
];

/// The commands with subcommands, and theirs.
pub fn families() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out: Vec<(&str, Vec<&str>)> = Vec::new();
    for c in COMMANDS {
        if let Some((family, sub)) = c.name.split_once(' ') {
            match out.iter_mut().find(|(f, _)| *f == family) {
                Some((_, subs)) => subs.push(sub),
                None => out.push((family, vec![sub])),
            }
        }
    }
    out
}

/// The first words of the commands, in table order, once each.
pub fn first_words() -> Vec<&'static str> {
    let mut out: Vec<&str> = Vec::new();
    for c in COMMANDS {
        let w = c.name.split(' ').next().unwrap_or(c.name);
        if !out.contains(&w) {
            out.push(w);
        }
    }
    out
}

/// Help text: "name synopsis" in the left column, the help wrapped beside it (or under it
/// when the left part is too wide), as berth's `--help` has always been laid out.
pub fn usage(with_vendor: bool) -> String {
    const LEFT: usize = 29;
    const WIDTH: usize = 94;
    let mut s = String::from("usage: berth [--config FILE] [--json] COMMAND [ARGS]\n");
    for (part, title) in [(Part::Device, "device"), (Part::Vendor, "vendor")] {
        if part == Part::Vendor && !with_vendor {
            continue;
        }
        s.push('\n');
        s.push_str(title);
        s.push_str(":\n");
        for c in COMMANDS.iter().filter(|c| c.part == part) {
            let mut left = format!("  {}", c.name);
            if !c.synopsis.is_empty() {
                left.push(' ');
                left.push_str(c.synopsis);
            }
            // The help, then each option's (`-t, --timeout SECS: …`).
            let mut help = c.help.to_string();
            for o in c.options {
                let name = match o.short {
                    "" => o.long.to_string(),
                    s => format!("{s}, {}", o.long),
                };
                help.push_str(&format!("; {name}: {}", o.help));
            }
            let lines = wrap(&help, WIDTH - LEFT);
            if left.len() + 1 > LEFT {
                s.push_str(&left);
                s.push('\n');
                left.clear();
            }
            for (i, l) in lines.iter().enumerate() {
                let lead = if i == 0 { left.as_str() } else { "" };
                s.push_str(&format!("{lead:<LEFT$}{l}\n"));
            }
        }
    }
    s.push_str(
        "\n--config defaults to $BERTH_CONFIG or /etc/berth/berth.toml.\n\
         exit status: 0 ok, 1 error, 2 usage, 3 daemon not running.",
    );
    s
}

/// Words of `text` in lines of at most `width` characters (a longer word has its own line).
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for w in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + w.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(w);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args;

    /// Words that satisfy a command's operands and required options, so that only the option
    /// `trying` is on trial ("" for none).
    fn operands(c: &Cmd, trying: &str) -> Vec<String> {
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
        for c in COMMANDS.iter().filter(|c| c.part == Part::Device) {
            if top_level.contains(&c.name) {
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
                args::device(&first, &w)
            };
            if let Err(args::Usage(m)) = with(&[]) {
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
                        Err(args::Usage(m)) => panic!("{} {spelling}: refused: {m}", c.name),
                    }
                }
            }
        }
        assert!(matches!(
            args::device("frobnicate", &[]),
            Err(args::Usage(m)) if m.contains("unknown command")
        ));
    }

    /// `--help` lists every command of the table, each line within 94 columns.
    #[test]
    fn usage_lists_every_command_within_the_width() {
        let u = usage(true);
        // A device build keeps no help for the vendor tools.
        let listed = COMMANDS
            .iter()
            .filter(|c| cfg!(feature = "vendor") || !matches!(c.part, Part::Vendor));
        for c in listed {
            assert!(u.contains(&format!("  {}", c.name)), "{} missing", c.name);
        }
        for l in u.lines() {
            assert!(l.chars().count() <= 94, "too wide: {l:?}");
        }
        let device = usage(false);
        assert!(!device.contains("vendor:") && !device.contains("repo build"));
        assert!(device.contains("  stop [-t SECS] NAME|--all"));
    }

    #[test]
    fn wrap_keeps_words_whole_and_lines_short() {
        assert_eq!(wrap("a bb ccc dddd", 6), ["a bb", "ccc", "dddd"]);
        assert_eq!(
            wrap("averyveryverylongword x", 5),
            ["averyveryverylongword", "x"]
        );
        assert!(wrap("", 5).is_empty());
    }
}
