//! The command table: every command of the command line declared once, with its operands,
//! options and help, and, for the commands that ask the daemon, the admin API's route and
//! the answer it gives. `--help`, the shell completions and the man page are written from it
//! (`berth completions`, `berth manpage`; `crate::cli::docs`); the admin API's router takes
//! its routes from it (a path no route has is a 404, a method its path lacks a 405), and a
//! unit test holds docs/openapi.yaml to it. A command that needs nothing but its route
//! ([`Parse::Fields`]) is also read from the command line and from a request by the table:
//! adding one is its entry here, its handler in the daemon and a test.
//!
//! The device build (no vendor tools) keeps the vendor tools' names only (to say they are
//! not there); the options and operands of the others are the completions' and the man
//! page's, and the generic commands'.
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
    /// The admin API's routes it asks (most have one; `net` and `safe-mode` two, chosen by
    /// their word), none for a command that runs in the CLI's own process.
    pub routes: &'static [Route],
    pub parse: Parse,
    /// It would mount an image or start a container: refused in safe mode (the admin API
    /// says so before it routes the request; docs/safe-mode.md).
    pub starts: bool,
}

/// How a command's words and its request are read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Parse {
    /// By a parser of its own (`crate::cli::args`, `crate::daemon::api::request`), for the
    /// commands whose words or bodies have rules of their own.
    Own,
    /// By the table: its operand is the field `name` (`NAME` one, `[NAME]` at most one), each
    /// option the field of its long name (`--reset-serial`: `reset_serial`): a switch is
    /// `true`, a value of `SECS` or `N` a number. A GET request carries them in its query
    /// (where, as on every GET, a key the table does not list is ignored), any other in a
    /// JSON object (where it is refused); a field of the wrong type is refused on both
    /// sides. Only a one-word command whose operand is a package name and whose options are
    /// switches and numbers is read so (a unit test holds the table to it): anything else
    /// has rules of its own.
    Fields,
}

/// A route of the admin API.
#[derive(Debug, PartialEq, Eq)]
pub struct Route {
    pub method: &'static str,
    /// `/v1/stop`; `{name}` and `{id}` stand for one segment of the path each.
    pub path: &'static str,
    /// Its operationId in docs/openapi.yaml.
    pub id: &'static str,
    /// What it answers: a media type (`json`, `ndjson`, `text`, `gzip`), then the schema of
    /// docs/openapi.yaml it answers, when the answer is one (`json StopResult`). Read by the
    /// test that holds openapi.yaml to the table only: the binary does not carry it.
    #[cfg(test)]
    pub answer: &'static str,
}

#[cfg_attr(not(test), allow(unused_variables))]
const fn get(path: &'static str, id: &'static str, answer: &'static str) -> Route {
    Route {
        method: "GET",
        path,
        id,
        #[cfg(test)]
        answer,
    }
}

#[cfg_attr(not(test), allow(unused_variables))]
const fn post(path: &'static str, id: &'static str, answer: &'static str) -> Route {
    Route {
        method: "POST",
        path,
        id,
        #[cfg(test)]
        answer,
    }
}

#[cfg_attr(not(test), allow(unused_variables))]
const fn delete(path: &'static str, id: &'static str, answer: &'static str) -> Route {
    Route {
        method: "DELETE",
        path,
        id,
        #[cfg(test)]
        answer,
    }
}

impl Cmd {
    /// The command with its routes.
    const fn to(self, routes: &'static [Route]) -> Cmd {
        Cmd { routes, ..self }
    }

    /// The command read by the table ([`Parse::Fields`]).
    const fn fields(self) -> Cmd {
        Cmd {
            parse: Parse::Fields,
            ..self
        }
    }

    /// The command refused in safe mode ([`Cmd::starts`]).
    const fn starts(self) -> Cmd {
        Cmd {
            starts: true,
            ..self
        }
    }

    /// Its one route (the first of several).
    pub fn route(&self) -> &'static Route {
        &self.routes[0]
    }
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
        routes: &[],
        parse: Parse::Own,
        starts: false,
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
        routes: &[],
        parse: Parse::Own,
        starts: false,
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
        routes: &[],
        parse: Parse::Own,
        starts: false,
    }
}

use Operand as O;

#[cfg(feature = "shape")]
const LIMIT_USAGE: &str =
    "NAME [--cpu P%] [--memory SIZE] [--pids N] [--egress RATE] [--ingress RATE]";
#[cfg(not(feature = "shape"))]
const LIMIT_USAGE: &str = "NAME [--cpu P%] [--memory SIZE] [--pids N]";
#[cfg(feature = "shape")]
const NET_USAGE: &str = "[hosts | metered on|off]";
#[cfg(not(feature = "shape"))]
const NET_USAGE: &str = "[hosts]";

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
    ).to(&[post("/v1/update", "update", "json UpdateResult")]),
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
    ).to(&[get("/v1/packages", "list", "json PackageList")]),
    cmd("install", "NAME...", O::Available, &[], "install packages and their dependencies").to(&[post("/v1/install", "install", "ndjson InstallEvent")])
    .starts(),
    cmd(
        "upgrade",
        "[--force] [NAME...]",
        O::Package,
        &[opt("--force", "", "", "go past the packages' update locks")],
        "move to the newest signed versions (all packages installed by name when none is given); each running one must start and pass its health check, else it is rolled back (exit status 1); refused while a package holds an update lock",
    ).to(&[post("/v1/upgrade", "upgrade", "ndjson")])
    .starts(),
    cmd("rollback", "NAME", O::Package, &[], "back to the version the last upgrade replaced").to(&[post("/v1/rollback", "rollback", "json")])
    .starts(),
    cmd(
        "remove",
        "[--purge] NAME...",
        O::Package,
        &[opt("--purge", "", "", "also delete the packages' /data")],
        "remove packages",
    ).to(&[post("/v1/remove", "remove", "json")]),
    cmd(
        "start",
        "[--trace] NAME",
        O::Package,
        &[opt("--trace", "", "", "when each step of the start began")],
        "start a container",
    ).to(&[post("/v1/start", "start", "json StartResult")])
    .starts(),
    cmd(
        "stop",
        "[-t SECS] NAME|--all",
        O::Package,
        &[
            opt("--timeout", "-t", "SECS", "SIGKILL after SECS (default: [containers] stop_timeout)"),
            opt("--all", "", "", "every running container, one after another"),
        ],
        "stop a container, or all of them (a stop is never followed by a restart)",
    ).to(&[post("/v1/stop", "stop", "json StopResult")]),
    cmd("restart", "NAME", O::Package, &[], "stop a container and start it again").to(&[post("/v1/restart", "restart", "json StartResult")])
    .starts(),
    cmd(
        "reset",
        "NAME",
        O::Package,
        &[],
        "clear a failed container's state and restart count (no start)",
    ).to(&[post("/v1/reset", "reset", "json")]),
    cmd("status", "[NAME]", O::Package, &[], "containers: state, restarts, health, last exit").to(&[get("/v1/status", "status", "json Status")]),
    cmd(
        "logs",
        "[-f] [--raw] NAME",
        O::Package,
        &[
            opt("--follow", "-f", "", "keep printing what the container writes"),
            opt("--raw", "", "", "control characters as written, not escaped as \\x1b"),
        ],
        "a container's output",
    ).to(&[get("/v1/logs", "logs", "text")]),
    cmd(
        "limit",
        LIMIT_USAGE,
        O::Package,
        &[
            opt("--cpu", "", "P%", "percent of one CPU"),
            opt("--memory", "", "SIZE", "memory limit (64M, 1G)"),
            opt("--pids", "", "N", "process limit"),
            #[cfg(feature = "shape")]
            opt("--egress", "", "RATE", "bandwidth from it (8mbit; none: no cap)"),
            #[cfg(feature = "shape")]
            opt("--ingress", "", "RATE", "bandwidth to it (8mbit; none: no cap)"),
        ],
        "change a container's limits, running or not; kept for the next start; no option: show them",
    ).to(&[post("/v1/limit", "limit", "json")]),
    cmd(
        "stats",
        "[NAME]",
        O::Package,
        &[],
        "CPU %, memory, pids, throttling, OOM kills (group and containers)",
    ).to(&[get("/v1/stats", "stats", "json")]),
    cmd(
        "inspect",
        "NAME",
        O::Package,
        &[],
        "capabilities, seccomp profile, devices, id map in force (JSON)",
    ).to(&[get("/v1/inspect", "inspect", "json")]),
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
    ).to(&[post("/v1/bind", "bind", "json")])
    .starts(),
    cmd(
        "unbind",
        "PACKAGE --from NAME",
        O::Package,
        &[opt("--from", "", "NAME", "the container")],
        "take a bound package away again (and its --persist)",
    ).to(&[post("/v1/unbind", "unbind", "json")]),
    cmd(
        "net",
        NET_USAGE,
        O::Words(&["hosts", #[cfg(feature = "shape")] "metered"]),
        &[],
        "containers' addresses, published ports, drop counters, data used; hosts: the LAN's hosts (neighbour table, DHCP, mDNS); metered on|off: the line's metered switch (the policy's stricter data caps)",
    ).to(&[
        get("/v1/net", "net", "json"),
        get("/v1/net/hosts", "netHosts", "json"),
        #[cfg(feature = "shape")]
        post("/v1/net/metered", "netMetered", "json"),
    ]),
    cmd(
        "governor",
        "",
        O::None,
        &[],
        "the adaptive CPU cap: R_n, R_c, the cap, its mode and history",
    ).to(&[get("/v1/governor", "governor", "json")]),
    cmd(
        "metrics",
        "",
        O::None,
        &[],
        "Prometheus metrics of the daemon, the containers, the governor and the store (docs/metrics.md)",
    ).to(&[get("/metrics", "metrics", "text")]),
    cmd(
        "tr181",
        "",
        O::None,
        &[],
        "Device.SoftwareModules. as TR-181 defines it: berth the ExecEnv, packages the DeploymentUnits, containers the ExecutionUnits (docs/tr181.md)",
    ).to(&[get("/v1/tr181", "tr181", "json")]),
    cmd("report list", "[NAME]", O::Package, &[], "crash archives kept on the device").to(&[get("/v1/reports", "reports", "json")]),
    cmd("report show", "ID", O::Any, &[], "one report's summary and the archive's members").to(&[get("/v1/reports/show", "reportShow", "json")]),
    cmd(
        "report export",
        "ID -o FILE [--force]",
        O::Any,
        &[
            opt("--output", "-o", "FILE", "where to copy the archive (.tar.gz)"),
            opt("--force", "", "", "overwrite FILE"),
        ],
        "copy a crash archive out",
    ).to(&[get("/v1/reports/export", "reportExport", "gzip")]),
    cmd(
        "report remove",
        "ID|--all",
        O::Any,
        &[opt("--all", "", "", "every report")],
        "delete reports",
    ).to(&[post("/v1/reports/remove", "reportRemove", "json")]),
    cmd("schedule list", "NAME", O::Package, &[], "a container's cron jobs: next and last runs").to(&[get("/v1/containers/{name}/schedules", "schedules", "json")]),
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
    ).to(&[post("/v1/containers/{name}/schedules", "scheduleAdd", "json Schedule")]),
    cmd("schedule remove", "NAME ID", O::Package, &[], "remove a schedule added with schedule add").to(&[delete("/v1/containers/{name}/schedules/{id}", "scheduleRemove", "json Schedule")]),
    cmd(
        "core-handler",
        "PID SIG",
        O::Any,
        &[],
        "for kernel.core_pattern: |/usr/bin/berth core-handler %P %s",
    ),
    cmd("gc", "", O::None, &[], "delete store images that nothing uses").to(&[post("/v1/gc", "gc", "json")]),
    cmd(
        "safe-mode",
        "enter|clear",
        O::Words(&["enter", "clear"]),
        &[],
        "enter: stop every container, unmount every image, start none until cleared (kept across restarts); clear: back to normal, the containers marked autostart start again",
    ).to(&[post("/v1/safe-mode/enter", "safeModeEnter", "json SafeMode"), post("/v1/safe-mode/clear", "safeModeClear", "json SafeMode")]),
    cmd(
        "ping",
        "",
        O::None,
        &[],
        "whether the daemon answers (exit status 3 when it does not run)",
    )
    .to(&[get("/v1/ping", "ping", "json")])
    .fields(),
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
        "SOURCE -o FILE [--name N] [--version V] [--arch A] [--max-size SIZE] [...]",
        O::Any,
        &[
            opt("--output", "-o", "FILE", "the package image"),
            opt("--name", "", "N", "the package name (default: the image's org.opencontainers.image.title label)"),
            opt("--version", "", "V", "the version (default: the image's org.opencontainers.image.version label, then its tag)"),
            opt("--max-size", "", "SIZE", "refuse an image that unpacks to more file data (default 2G)"),
            opt("--max-entries", "", "N", "refuse an image of more entries (default 250000)"),
            opt("--arch", "", "A", "registry:// multi-platform images: the architecture to take (OCI names: amd64, arm64, arm, mipsle; default this machine's)"),
            opt("--plain-http", "", "", "registry://: http:// instead of https://"),
            opt("--ca-file", "", "F", "registry://: the only CAs its certificate may end in (default the system's store)"),
            opt("--auth-file", "", "F", "registry://: credentials, as podman and skopeo keep them ({\"auths\": {\"HOST\": {\"auth\": BASE64}}})"),
        ],
        "a container image as a package: SOURCE is oci:LAYOUT[:TAG], docker-archive:FILE.tar or registry://HOST[:PORT]/REPO[:TAG|@DIGEST] (or docker://); its layers applied in order (whiteouts honoured), entrypoint, cmd, env, working directory and user as the manifest",
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

/// Routes of the admin API that no command asks: the test hooks' (a build with the
/// `test-hooks` feature only).
#[cfg(feature = "test-hooks")]
pub const TEST_ROUTES: &[Route] = &[post("/v1/test/stall", "testStall", "json")];
#[cfg(not(feature = "test-hooks"))]
pub const TEST_ROUTES: &[Route] = &[];

/// Every route of the admin API, with the command that asks it (none for a test hook's).
pub fn routes() -> impl Iterator<Item = (Option<&'static Cmd>, &'static Route)> {
    COMMANDS
        .iter()
        .flat_map(|c| c.routes.iter().map(move |r| (Some(c), r)))
        .chain(TEST_ROUTES.iter().map(|r| (None, r)))
}

/// A request's route, and the segments of its path that stand for `{name}` and `{id}`.
pub struct Found {
    pub cmd: Option<&'static Cmd>,
    pub route: &'static Route,
    pub name: Option<String>,
    pub id: Option<String>,
}

/// Why no route takes a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Miss {
    /// No route has its path.
    NotFound,
    /// Routes have its path, none its method.
    MethodNotAllowed,
}

/// The route of `method` on `path` (the path without its query).
pub fn find(method: &str, path: &str) -> Result<Found, Miss> {
    let mut miss = Miss::NotFound;
    for (cmd, route) in routes() {
        let Some((name, id)) = matches(route.path, path) else {
            continue;
        };
        if route.method != method {
            miss = Miss::MethodNotAllowed;
            continue;
        }
        return Ok(Found {
            cmd,
            route,
            name,
            id,
        });
    }
    Err(miss)
}

/// Whether `path` is one of `template`'s, with the segments of its `{name}` and `{id}`.
fn matches(template: &str, path: &str) -> Option<(Option<String>, Option<String>)> {
    let (mut name, mut id) = (None, None);
    let mut got = path.split('/');
    for want in template.split('/') {
        let seg = got.next()?;
        match want {
            "{name}" if !seg.is_empty() => name = Some(seg.to_string()),
            "{id}" if !seg.is_empty() => id = Some(seg.to_string()),
            _ if want == seg => {}
            _ => return None,
        }
    }
    got.next().is_none().then_some((name, id))
}

/// The command named `name` (`report list`).
pub fn named(name: &str) -> Option<&'static Cmd> {
    COMMANDS.iter().find(|c| c.name == name)
}

/// A field a [`Parse::Fields`] command takes: its name in the request and its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// The operand: a package name, checked as one.
    Name,
    Switch,
    Number,
    Text,
}

/// The fields of a [`Parse::Fields`] command, in the table's order: `name` for its operand,
/// then one per option.
pub fn fields(c: &Cmd) -> Vec<(String, FieldKind)> {
    let mut out = Vec::new();
    if c.operand == Operand::Package {
        out.push(("name".to_string(), FieldKind::Name));
    }
    for o in c.options {
        let kind = match o.value {
            "" => FieldKind::Switch,
            "SECS" | "N" => FieldKind::Number,
            _ => FieldKind::Text,
        };
        out.push((field_key(o), kind));
    }
    out
}

/// The request's field of an option of a [`Parse::Fields`] command: `--reset-serial` is
/// `reset_serial`.
pub fn field_key(o: &Opt) -> String {
    o.long.trim_start_matches('-').replace('-', "_")
}

/// Whether a [`Parse::Fields`] command's operand may be left out (`[NAME]`).
pub fn operand_optional(c: &Cmd) -> bool {
    c.synopsis.contains("[NAME]")
}

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

    /// The operations of docs/openapi.yaml: method, path, operationId, the media type of
    /// the 200 answer and its schema when it names one.
    fn documented() -> Vec<(String, String, String, String, String)> {
        let spec = include_str!("../../../docs/openapi.yaml");
        let paths = &spec[spec.find("\npaths:").unwrap()..spec.find("\ncomponents:").unwrap()];
        let mut out = Vec::new();
        let (mut path, mut op): (String, Option<(String, String)>) = (String::new(), None);
        let (mut in_200, mut media) = (false, String::new());
        for l in paths.lines() {
            if let Some(p) = l.strip_prefix("  /").and_then(|p| p.strip_suffix(':')) {
                path = format!("/{p}");
            } else if let Some(m) = l
                .strip_prefix("    ")
                .and_then(|m| m.strip_suffix(':'))
                .filter(|m| ["get", "post", "delete", "put"].contains(m))
            {
                op = Some((m.to_ascii_uppercase(), String::new()));
                in_200 = false;
            } else if let (Some(id), Some(o)) = (l.strip_prefix("      operationId: "), &mut op) {
                o.1 = id.to_string();
            } else if l.starts_with("        \"200\":") {
                (in_200, media) = (true, String::new());
            } else if let Some(m) = l
                .strip_prefix("            ")
                .and_then(|m| m.strip_suffix(':'))
                .filter(|_| in_200 && media.is_empty())
            {
                media = m.to_string();
            } else if in_200 && !media.is_empty() {
                let schema = l
                    .trim()
                    .strip_prefix("schema: { $ref: \"#/components/schemas/")
                    .and_then(|r| r.strip_suffix("\" }"))
                    .unwrap_or_default();
                let (m, id) = op.clone().unwrap();
                out.push((m, path.clone(), id, media.clone(), schema.to_string()));
                in_200 = false;
            }
        }
        out
    }

    /// docs/openapi.yaml and the table list the same routes, each with the table's
    /// operationId and answer (its media type, and its schema where the table names one).
    #[test]
    fn openapi_documents_the_table() {
        let docs = documented();
        assert!(docs.len() >= 30, "only {} operations read", docs.len());
        const STALL: Route = post("/v1/test/stall", "testStall", "json");
        let all: Vec<_> = COMMANDS
            .iter()
            .flat_map(|c| c.routes.iter())
            .chain([&STALL])
            .collect();
        for r in &all {
            let d = docs
                .iter()
                .find(|d| d.0 == r.method && d.1 == r.path)
                .unwrap_or_else(|| panic!("{} {} is not in openapi.yaml", r.method, r.path));
            assert_eq!(d.2, r.id, "{} {}: operationId", r.method, r.path);
            let (media, schema) = r.answer.split_once(' ').unwrap_or((r.answer, ""));
            let want = match media {
                "json" => "application/json",
                "ndjson" => "application/x-ndjson",
                "text" => "text/plain",
                "gzip" => "application/gzip",
                m => panic!("{}: unknown media {m}", r.id),
            };
            assert_eq!(d.3, want, "{}: media type", r.id);
            assert_eq!(d.4, schema, "{}: the answer's schema", r.id);
        }
        for d in &docs {
            assert!(
                all.iter().any(|r| r.method == d.0 && r.path == d.1),
                "{} {} is documented but no command of the table has it",
                d.0,
                d.1
            );
        }
    }

    #[test]
    fn requests_find_their_routes() {
        let f = find("POST", "/v1/stop").unwrap();
        assert_eq!((f.route.id, f.cmd.unwrap().name), ("stop", "stop"));
        let f = find("DELETE", "/v1/containers/web/schedules/s1").unwrap();
        assert_eq!(f.route.id, "scheduleRemove");
        assert_eq!(
            (f.name.as_deref(), f.id.as_deref()),
            (Some("web"), Some("s1"))
        );
        let f = find("GET", "/v1/net/hosts").unwrap();
        assert_eq!((f.route.id, f.cmd.unwrap().name), ("netHosts", "net"));
        assert_eq!(find("GET", "/v1/stop").err(), Some(Miss::MethodNotAllowed));
        assert_eq!(
            find("PUT", "/v1/governor").err(),
            Some(Miss::MethodNotAllowed)
        );
        assert_eq!(
            find("GET", "/v1/containers/web/schedules/s1").err(),
            Some(Miss::MethodNotAllowed)
        );
        for p in [
            "/v1/nothing",
            "/v1/stop/x",
            "/v1",
            "/v1/containers//schedules",
            "/v1/containers/web/schedules/s1/x",
            "/v1/containers/web",
        ] {
            assert_eq!(find("GET", p).err(), Some(Miss::NotFound), "{p}");
        }
        // Only a build with the test hooks has their route.
        assert_eq!(
            find("POST", "/v1/test/stall").is_ok(),
            cfg!(feature = "test-hooks")
        );
    }

    /// A command the table reads carries only names, switches and numbers in a query (none
    /// needs escaping), and each of its fields is named once.
    #[test]
    fn commands_read_by_the_table_are_sound() {
        let generic: Vec<_> = COMMANDS
            .iter()
            .filter(|c| c.parse == Parse::Fields)
            .collect();
        assert!(!generic.is_empty());
        for c in generic {
            assert_eq!(c.routes.len(), 1, "{}: one route", c.name);
            assert!(!c.name.contains(' '), "{}: one word", c.name);
            assert!(!c.route().path.contains('{'), "{}: a plain path", c.name);
            assert!(
                matches!(c.operand, Operand::None | Operand::Package),
                "{}: a package name or no operand",
                c.name
            );
            let f = fields(c);
            assert!(
                f.iter().all(|(_, k)| *k != FieldKind::Text),
                "{}: a value no kind checks",
                c.name
            );
            for (i, (n, _)) in f.iter().enumerate() {
                assert!(!f[..i].iter().any(|(m, _)| m == n), "{}: {n} twice", c.name);
            }
        }
        const OPTS: &[Opt] = &[
            opt("--timeout", "-t", "SECS", ""),
            opt("--all", "", "", ""),
            opt("--at", "", "PATH", ""),
        ];
        let status = Cmd {
            parse: Parse::Fields,
            ..cmd(
                "x",
                "[NAME] [-t SECS] [--all] [--at PATH]",
                O::Package,
                OPTS,
                "",
            )
        };
        assert_eq!(
            fields(&status),
            [
                ("name".to_string(), FieldKind::Name),
                ("timeout".to_string(), FieldKind::Number),
                ("all".to_string(), FieldKind::Switch),
                ("at".to_string(), FieldKind::Text)
            ]
        );
        assert!(operand_optional(&status));
    }
}
