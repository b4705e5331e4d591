//! The package manifest (`.berth/manifest.toml` inside every package image).
//!
//! Parsing is two-step: the TOML is read into `Raw*` structs (through `crate::tree`) that deny
//! unknown keys and keep the byte span of every value, then `validate` turns them into the
//! clean public types. Every error names the manifest line, the key and the reason, because the manifest is written by
//! hand by vendors and checked on the device from untrusted input.

pub use crate::path::check_abs_path;
pub use crate::schedule::Schedule;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;

use crate::error::Error;
use crate::tree::{self, line_of, Spanned, Table, TreeError, Val};
use serde::{Deserialize, Serialize};

use crate::name::{Name, Version};

/// Where the manifest lives, relative to the root of the package image.
pub const MANIFEST_PATH: &str = ".berth/manifest.toml";

/// Longest accepted description, in characters.
pub const DESCRIPTION_MAX: usize = 512;

/// Container-API operations a package may ask for.
pub const API_OPERATIONS: &[&str] = &[
    "status",
    "stop",
    "restart",
    "schedule",
    "lan-hosts",
    "logs",
    "update-lock",
];

/// Linux capabilities (without `CAP_`, lowercase), as of Linux 5.9.
pub const CAPABILITIES: &[&str] = &[
    "chown",
    "dac_override",
    "dac_read_search",
    "fowner",
    "fsetid",
    "kill",
    "setgid",
    "setuid",
    "setpcap",
    "linux_immutable",
    "net_bind_service",
    "net_broadcast",
    "net_admin",
    "net_raw",
    "ipc_lock",
    "ipc_owner",
    "sys_module",
    "sys_rawio",
    "sys_chroot",
    "sys_ptrace",
    "sys_pacct",
    "sys_admin",
    "sys_boot",
    "sys_nice",
    "sys_resource",
    "sys_time",
    "sys_tty_config",
    "mknod",
    "lease",
    "audit_write",
    "audit_control",
    "setfcap",
    "mac_override",
    "mac_admin",
    "syslog",
    "wake_alarm",
    "block_suspend",
    "audit_read",
    "perfmon",
    "bpf",
    "checkpoint_restore",
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// TOML syntax, wrong value types, unknown keys: reported by the TOML parser.
    #[error("manifest line {line}: {message}")]
    Syntax { line: usize, message: String },
    /// A well-formed value that breaks a rule of the manifest schema.
    #[error("manifest line {line}: {key}: {reason}")]
    Invalid {
        line: usize,
        key: String,
        reason: String,
    },
}

impl ManifestError {
    /// 1-based line of the manifest the error is about.
    pub fn line(&self) -> usize {
        match self {
            ManifestError::Syntax { line, .. } | ManifestError::Invalid { line, .. } => *line,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Clean public types.

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub package: Package,
    pub entrypoint: Entrypoint,
    pub resources: Resources,
    pub network: Network,
    pub permissions: Permissions,
    pub restart: Restart,
    pub health: Option<Health>,
    pub schedules: Vec<Schedule>,
    /// `[upgrade] migrate`: run once in this version's container when `berth upgrade`
    /// brings it, before it starts, with the version it replaces as one more argument; a
    /// non-zero exit rolls the upgrade back. Empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub migrate: Vec<String>,
    /// `[[bind]]`: installed packages the container sees read-only at each start, each as
    /// `"PACKAGE TARGET"` (both checked: neither holds a space; a list of strings costs the
    /// device build nothing new to store in state.json). Read with [`Manifest::binds`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bind: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Package {
    pub name: Name,
    pub version: Version,
    pub description: String,
    pub depends: Vec<Name>,
    pub base: Base,
    pub rootfs: RootfsMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Base {
    /// The package image is the whole root.
    None,
    /// The host's library directories are bound read-only into the container.
    Host,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RootfsMode {
    /// The root is the package image alone.
    Package,
    /// The root is an overlay of the package over its dependencies.
    Merged,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entrypoint {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub workdir: String,
    pub user: u32,
    pub group: u32,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Resources {
    pub cpu_weight: Option<u32>,
    /// Percent of one CPU (200 = two full CPUs).
    pub cpu_max_percent: Option<u32>,
    /// Bytes.
    pub memory: Option<u64>,
    /// Bytes.
    pub memory_soft: Option<u64>,
    pub pids: Option<u32>,
    pub cpuset: Option<String>,
    /// Memory-guard kill order: lower dies first.
    pub priority: i32,
    /// Bandwidth caps, bits per second (`crate::shape`, feature `shape`).
    #[cfg(feature = "shape")]
    pub egress: Option<u64>,
    #[cfg(feature = "shape")]
    pub ingress: Option<u64>,
    /// The most it may move over the WAN in a period (`crate::datacap`, feature `shape`).
    #[cfg(feature = "shape")]
    #[serde(default, with = "crate::datacap::as_text")]
    pub data_cap: Option<crate::datacap::DataCap>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetMode {
    None,
    Isolated,
    Macvlan,
    Shared,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Tcp,
    Udp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Publish {
    pub host_port: u16,
    pub container_port: u16,
    pub proto: Proto,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Network {
    pub mode: NetMode,
    pub publish: Vec<Publish>,
    /// `address = "dhcp"`: the device also answers the container's DHCP client (isolated
    /// only), with the container's static address.
    #[serde(default)]
    pub dhcp: bool,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Permissions {
    pub capabilities: Vec<String>,
    pub devices: Vec<String>,
    pub syscalls: Vec<String>,
    pub api: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    Never,
    OnFailure,
    Always,
}

/// `[restart]`: TR-181's `ExecutionUnit.{i}.AutoRestart` one to one. `delay_ms` is
/// `RetryMinimumWaitInterval`, `max_delay_ms` `RetryMaximumWaitInterval`, `multiplier_milli`
/// `RetryIntervalMultiplier` (thousandths, as TR-181 writes it), `max_retries`
/// `MaximumRetryCount`, `reset_period_ms` `ResetPeriod`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Restart {
    pub policy: RestartPolicy,
    pub max_retries: u32,
    pub delay_ms: u64,
    // Defaults for state files written before these keys existed.
    #[serde(default = "default_max_delay")]
    pub max_delay_ms: u64,
    #[serde(default = "default_multiplier")]
    pub multiplier_milli: u32,
    #[serde(default = "default_reset_period")]
    pub reset_period_ms: u64,
}

fn default_max_delay() -> u64 {
    DEFAULT_RESTART_MAX_DELAY_MS
}
fn default_multiplier() -> u32 {
    DEFAULT_RESTART_MULTIPLIER_MILLI
}
fn default_reset_period() -> u64 {
    DEFAULT_RESTART_RESET_PERIOD_MS
}

/// `[health]`: one probe (a command run inside the container, a TCP connect or an HTTP GET
/// in its network namespace), how often, how long it may take, how many failures in a row
/// make the container unhealthy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// The command probe; empty when the probe is `tcp` or `http`.
    pub cmd: Vec<String>,
    pub interval_ms: u64,
    pub timeout_ms: u64,
    pub retries: u32,
    /// TCP probe: a port on the container's loopback.
    #[serde(default)]
    pub tcp: Option<u16>,
    /// HTTP probe: a port and path on the container's loopback (`"8080/healthz"`).
    #[serde(default)]
    pub http: Option<HttpProbe>,
    /// When the container counts as ready (what `depends` waits for).
    #[serde(default)]
    pub ready: Ready,
    /// The keep-alive period the package promises (`POST /v1/self/watchdog`); a run that
    /// lets it pass is ended and counts as a failure.
    #[serde(default)]
    pub watchdog_ms: Option<u64>,
}

impl Health {
    /// Whether the daemon probes it (cmd, tcp or http); without a probe the package's own
    /// reports (readiness, health, keep-alive) are all there is.
    pub fn has_probe(&self) -> bool {
        !self.cmd.is_empty() || self.tcp.is_some() || self.http.is_some()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpProbe {
    pub port: u16,
    pub path: String,
}

/// When a container with a `[health]` probe counts as ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ready {
    /// Once its first health check passed.
    #[default]
    Healthy,
    /// As soon as it runs.
    Started,
    /// When the package says so through the container API (`POST /v1/self/ready`).
    Api,
}

/// What the repository index carries about each package's manifest: enough for `berth search`
/// and for policy checks before download, nothing more.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestSummary {
    pub base: Base,
    pub rootfs: RootfsMode,
    pub network_mode: NetMode,
    pub argv0: String,
    pub capabilities: Vec<String>,
    pub devices: Vec<String>,
}

/// Defaults of optional keys, shared by the parser and documentation.
pub const DEFAULT_MAX_RETRIES: u32 = 5;
pub const DEFAULT_RESTART_DELAY_MS: u64 = 1_000;
pub const DEFAULT_HEALTH_INTERVAL_MS: u64 = 30_000;
pub const DEFAULT_HEALTH_TIMEOUT_MS: u64 = 5_000;
pub const DEFAULT_HEALTH_RETRIES: u32 = 3;
pub const MIN_HEALTH_INTERVAL_MS: u64 = 100;
pub const DEFAULT_RESTART_MAX_DELAY_MS: u64 = 300_000;
/// TR-181's default `RetryIntervalMultiplier`: 2.000.
pub const DEFAULT_RESTART_MULTIPLIER_MILLI: u32 = 2_000;
pub const DEFAULT_RESTART_RESET_PERIOD_MS: u64 = 600_000;

impl Manifest {
    pub fn parse(text: &str) -> Result<Manifest, ManifestError> {
        let doc = tree::parse(text).map_err(|e| syntax_error(text, &e))?;
        let raw = RawManifest::read(doc).map_err(|e| ManifestError::Syntax {
            line: line_of(text, e.offset),
            message: e.message,
        })?;
        Validator { text }.manifest(raw)
    }

    /// The `[[bind]]` tables: (package, target; `bind::default_target` unless given).
    pub fn binds(&self) -> impl Iterator<Item = (&str, &str)> {
        self.bind.iter().filter_map(|b| b.split_once(' '))
    }

    pub fn summary(&self) -> ManifestSummary {
        ManifestSummary {
            base: self.package.base,
            rootfs: self.package.rootfs,
            network_mode: self.network.mode,
            argv0: self.entrypoint.argv.first().cloned().unwrap_or_default(),
            capabilities: self.permissions.capabilities.clone(),
            devices: self.permissions.devices.clone(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Value helpers, reused by the CLI.

/// Parses a size: a decimal integer with an optional binary suffix `K`, `M` or `G`
/// (1024-based), e.g. `"32M"`. Returns bytes.
pub fn parse_size(s: &str) -> Result<u64, Error> {
    size(s).map_err(Error::invalid)
}

/// [`parse_size`]'s reading: whatever it refuses is the value, of one kind.
/// Why a network mode takes no bandwidth cap (`crate::shape`): only an isolated container
/// has a veth of its own on the host, which carries all its traffic and which it cannot
/// reach.
#[cfg(feature = "shape")]
pub fn cap_refusal(mode: NetMode) -> String {
    format!(
        "a bandwidth cap needs network mode isolated (the container's own veth on the host carries all its traffic); mode {} has none",
        match mode {
            NetMode::Shared => "shared (the host's interfaces)",
            NetMode::Macvlan => "macvlan (its traffic leaves by the parent's own queue)",
            NetMode::None => "none",
            NetMode::Isolated => "isolated",
        }
    )
}

fn size(s: &str) -> Result<u64, String> {
    let (digits, mult) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 1 << 20),
        Some(b'G' | b'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n = parse_decimal(digits)
        .ok_or_else(|| format!("invalid size {s:?}: expected a number with optional K, M or G"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("invalid size {s:?}: too large"))
}

/// Parses a duration: a decimal integer followed by `ms`, `s` or `m`, e.g. `"500ms"`.
/// Returns milliseconds.
pub fn parse_duration_ms(s: &str) -> Result<u64, Error> {
    duration_ms(s).map_err(Error::invalid)
}

/// [`parse_duration_ms`]'s reading: whatever it refuses is the value, of one kind.
fn duration_ms(s: &str) -> Result<u64, String> {
    let (digits, mult) = if let Some(d) = s.strip_suffix("ms") {
        (d, 1u64)
    } else if let Some(d) = s.strip_suffix('s') {
        (d, 1_000)
    } else if let Some(d) = s.strip_suffix('m') {
        (d, 60_000)
    } else {
        return Err(format!(
            "invalid duration {s:?}: expected a number followed by ms, s or m"
        ));
    };
    let n = parse_decimal(digits).ok_or_else(|| {
        format!("invalid duration {s:?}: expected a number followed by ms, s or m")
    })?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("invalid duration {s:?}: too large"))
}

/// Parses a long duration: a decimal integer followed by `s`, `m`, `h` or `d`, e.g. `"30d"`
/// (an index's validity, the age at which a cached index is stale). Returns seconds.
pub fn parse_duration_s(s: &str) -> Result<u64, Error> {
    let bad = || {
        Error::invalid(format!(
            "invalid duration {s:?}: expected a number followed by s, m, h or d"
        ))
    };
    let (digits, mult) = match s.as_bytes().last() {
        Some(b's') => (&s[..s.len() - 1], 1u64),
        Some(b'm') => (&s[..s.len() - 1], 60),
        Some(b'h') => (&s[..s.len() - 1], 3600),
        Some(b'd') => (&s[..s.len() - 1], 86_400),
        _ => return Err(bad()),
    };
    let n = parse_decimal(digits).ok_or_else(bad)?;
    n.checked_mul(mult)
        .ok_or_else(|| Error::invalid(format!("invalid duration {s:?}: too large")))
}

/// Parses a percentage `"N%"`, e.g. `"20%"`.
pub fn parse_percent(s: &str) -> Result<u32, Error> {
    s.strip_suffix('%')
        .and_then(parse_decimal)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| {
            Error::invalid(format!(
                "invalid percentage {s:?}: expected a number followed by %"
            ))
        })
}

/// Plain decimal digits only: `str::parse` would also accept a leading '+'.
fn parse_decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn check_cpuset(s: &str) -> Result<(), String> {
    // Far above any embedded board; keeps the kernel's parser away from silly numbers.
    const CPU_MAX: u64 = 4095;
    let bad = || format!("invalid cpu list {s:?}: expected e.g. \"0\", \"0-3\" or \"0,2-3\"");
    if s.is_empty() {
        return Err(bad());
    }
    for item in s.split(',') {
        let (a, b) = match item.split_once('-') {
            Some((a, b)) => (parse_decimal(a), parse_decimal(b)),
            None => (parse_decimal(item), parse_decimal(item)),
        };
        match (a, b) {
            (Some(a), Some(b)) if a <= b && b <= CPU_MAX => {}
            _ => return Err(bad()),
        }
    }
    Ok(())
}

/// The scheduler's own parser, so that the manifest and the scheduler never disagree.
fn check_cron(s: &str) -> Result<(), String> {
    crate::cron::parse(s)
        .map(|_| ())
        .map_err(|e| format!("invalid cron expression {s:?}: {e}"))
}

fn parse_publish(s: &str) -> Result<Publish, String> {
    let bad = |why: &str| format!("invalid port mapping {s:?}: {why}");
    let (ports, proto) = match s.split_once('/') {
        Some((p, "tcp")) => (p, Proto::Tcp),
        Some((p, "udp")) => (p, Proto::Udp),
        Some(_) => return Err(bad("protocol must be tcp or udp")),
        None => (s, Proto::Tcp),
    };
    let (h, c) = ports
        .split_once(':')
        .ok_or_else(|| bad("expected HOST:CONTAINER[/tcp|/udp]"))?;
    let port = |p: &str| {
        parse_decimal(p)
            .and_then(|n| u16::try_from(n).ok())
            .filter(|&n| n != 0)
            .ok_or_else(|| bad("ports must be 1..65535"))
    };
    Ok(Publish {
        host_port: port(h)?,
        container_port: port(c)?,
        proto,
    })
}

// ---------------------------------------------------------------------------------------------
// Raw TOML shape: read from the document tree (`crate::tree`), unknown keys refused.

type S<T> = Spanned<T>;
type TreeR<T> = Result<T, TreeError>;

struct RawManifest {
    package: Option<S<RawPackage>>,
    entrypoint: Option<S<RawEntrypoint>>,
    resources: Option<RawResources>,
    network: Option<RawNetwork>,
    permissions: Option<RawPermissions>,
    restart: Option<RawRestart>,
    health: Option<S<RawHealth>>,
    schedule: Option<Vec<S<RawSchedule>>>,
    upgrade: Option<S<RawCommand>>,
    bind: Option<Vec<S<RawBind>>>,
}

/// A `[[bind]]` as written: `package`, `at`.
type RawBind = [Option<S<String>>; 2];

/// A command as written (`migrate = [...]`), before `Validator::command` checks it.
type RawCommand = Option<S<Vec<S<String>>>>;

/// Reads a sub-table with `f`, which takes its keys; what is left is refused.
fn sub<T>(t: &mut Table, key: &str, f: impl Fn(&mut Table) -> TreeR<T>) -> TreeR<Option<S<T>>> {
    let Some(mut sub) = t.table(key)? else {
        return Ok(None);
    };
    let v = f(&mut sub)?;
    let span = sub.span.clone();
    sub.finish()?;
    Ok(Some(Spanned::new(span, v)))
}

fn list(t: &mut Table, key: &str) -> TreeR<Option<Vec<S<String>>>> {
    Ok(t.strs(key)?.map(Spanned::into_inner))
}

impl RawManifest {
    fn read(mut t: Table) -> TreeR<RawManifest> {
        let raw = RawManifest {
            package: sub(&mut t, "package", RawPackage::read)?,
            entrypoint: sub(&mut t, "entrypoint", RawEntrypoint::read)?,
            resources: sub(&mut t, "resources", RawResources::read)?.map(Spanned::into_inner),
            network: sub(&mut t, "network", |t| {
                Ok(RawNetwork {
                    mode: t.str("mode")?,
                    publish: list(t, "publish")?,
                    address: t.str("address")?,
                })
            })?
            .map(Spanned::into_inner),
            permissions: sub(&mut t, "permissions", |t| {
                Ok(RawPermissions {
                    capabilities: list(t, "capabilities")?,
                    devices: list(t, "devices")?,
                    syscalls: list(t, "syscalls")?,
                    api: list(t, "api")?,
                })
            })?
            .map(Spanned::into_inner),
            restart: sub(&mut t, "restart", |t| {
                Ok(RawRestart {
                    policy: t.str("policy")?,
                    max_retries: t.int("max_retries")?,
                    delay: t.str("delay")?,
                    max_delay: t.str("max_delay")?,
                    multiplier: t.take("multiplier"),
                    reset_period: t.str("reset_period")?,
                })
            })?
            .map(Spanned::into_inner),
            health: sub(&mut t, "health", |t| {
                Ok(RawHealth {
                    cmd: t.strs("cmd")?,
                    tcp: t.int("tcp")?,
                    http: t.str("http")?,
                    ready: t.str("ready")?,
                    watchdog: t.str("watchdog")?,
                    interval: t.str("interval")?,
                    timeout: t.str("timeout")?,
                    retries: t.int("retries")?,
                })
            })?,
            upgrade: sub(&mut t, "upgrade", |t| t.strs("migrate"))?,
            schedule: match t.tables("schedule")? {
                None => None,
                Some(tables) => {
                    let mut out = Vec::with_capacity(tables.len());
                    for mut s in tables {
                        let raw = RawSchedule {
                            cron: s.str("cron")?,
                            cmd: s.strs("cmd")?,
                        };
                        out.push(Spanned::new(s.span.clone(), raw));
                        s.finish()?;
                    }
                    Some(out)
                }
            },
            bind: match t.tables("bind")? {
                None => None,
                Some(tables) => {
                    let mut out = Vec::with_capacity(tables.len());
                    for mut b in tables {
                        let raw = [b.str("package")?, b.str("at")?];
                        out.push(Spanned::new(b.span.clone(), raw));
                        b.finish()?;
                    }
                    Some(out)
                }
            },
        };
        t.finish()?;
        Ok(raw)
    }
}

struct RawPackage {
    name: Option<S<String>>,
    version: Option<S<String>>,
    description: Option<S<String>>,
    depends: Option<Vec<S<String>>>,
    base: Option<S<String>>,
    rootfs: Option<S<String>>,
}

impl RawPackage {
    fn read(t: &mut Table) -> TreeR<RawPackage> {
        Ok(RawPackage {
            name: t.str("name")?,
            version: t.str("version")?,
            description: t.str("description")?,
            depends: list(t, "depends")?,
            base: t.str("base")?,
            rootfs: t.str("rootfs")?,
        })
    }
}

struct RawEntrypoint {
    argv: Option<S<Vec<S<String>>>>,
    env: Option<BTreeMap<String, S<String>>>,
    workdir: Option<S<String>>,
    user: Option<S<i64>>,
    group: Option<S<i64>>,
}

impl RawEntrypoint {
    fn read(t: &mut Table) -> TreeR<RawEntrypoint> {
        Ok(RawEntrypoint {
            argv: t.strs("argv")?,
            env: match t.table("env")? {
                None => None,
                Some(env) => Some(env.strings()?.into_iter().collect()),
            },
            workdir: t.str("workdir")?,
            user: t.int("user")?,
            group: t.int("group")?,
        })
    }
}

struct RawResources {
    cpu_weight: Option<S<i64>>,
    cpu_max: Option<S<String>>,
    memory: Option<S<SizeValue>>,
    memory_soft: Option<S<SizeValue>>,
    pids: Option<S<i64>>,
    cpuset: Option<S<String>>,
    priority: Option<S<i64>>,
    #[cfg(feature = "shape")]
    egress: Option<S<String>>,
    #[cfg(feature = "shape")]
    ingress: Option<S<String>>,
    #[cfg(feature = "shape")]
    data_cap: Option<S<String>>,
}

impl RawResources {
    fn read(t: &mut Table) -> TreeR<RawResources> {
        let mut size = |key: &str| -> TreeR<Option<S<SizeValue>>> {
            let Some(v) = t.take(key) else {
                return Ok(None);
            };
            let span = v.span();
            match v.into_inner() {
                Val::Int(n) => Ok(Some(Spanned::new(span, SizeValue::Int(n)))),
                Val::Str(s) => Ok(Some(Spanned::new(span, SizeValue::Text(s)))),
                other => Err(TreeError {
                    offset: span.start,
                    message: format!(
                        "{}: expected a size such as \"32M\" or an integer number of bytes, found {}",
                        t.path(key),
                        other.kind()
                    ),
                }),
            }
        };
        let memory = size("memory")?;
        let memory_soft = size("memory_soft")?;
        Ok(RawResources {
            cpu_weight: t.int("cpu_weight")?,
            cpu_max: t.str("cpu_max")?,
            memory,
            memory_soft,
            pids: t.int("pids")?,
            cpuset: t.str("cpuset")?,
            priority: t.int("priority")?,
            #[cfg(feature = "shape")]
            egress: t.str("egress")?,
            #[cfg(feature = "shape")]
            ingress: t.str("ingress")?,
            #[cfg(feature = "shape")]
            data_cap: t.str("data_cap")?,
        })
    }
}

/// Sizes may be written as `"32M"` or as a plain integer number of bytes.
enum SizeValue {
    Int(i64),
    Text(String),
}

struct RawNetwork {
    mode: Option<S<String>>,
    publish: Option<Vec<S<String>>>,
    address: Option<S<String>>,
}

struct RawPermissions {
    capabilities: Option<Vec<S<String>>>,
    devices: Option<Vec<S<String>>>,
    syscalls: Option<Vec<S<String>>>,
    api: Option<Vec<S<String>>>,
}

struct RawRestart {
    policy: Option<S<String>>,
    max_retries: Option<S<i64>>,
    delay: Option<S<String>>,
    max_delay: Option<S<String>>,
    /// An integer or a float (`2`, `1.5`).
    multiplier: Option<S<Val>>,
    reset_period: Option<S<String>>,
}

struct RawHealth {
    cmd: Option<S<Vec<S<String>>>>,
    tcp: Option<S<i64>>,
    http: Option<S<String>>,
    ready: Option<S<String>>,
    watchdog: Option<S<String>>,
    interval: Option<S<String>>,
    timeout: Option<S<String>>,
    retries: Option<S<i64>>,
}

struct RawSchedule {
    cron: Option<S<String>>,
    cmd: Option<S<Vec<S<String>>>>,
}

// ---------------------------------------------------------------------------------------------
// Validation.

/// Turns a TOML parser error into ours: the line from its span, and its one-line message
/// (the parser's own Display is a multi-line source excerpt).
fn syntax_error(text: &str, e: &tree::SyntaxError) -> ManifestError {
    let line = e.span().map_or(1, |s| line_of(text, s.start));
    let message = e.message().trim().replace('\n', "; ");
    // The parser does not name the key for type errors; recover it from the source line so the
    // vendor sees `package.name: invalid type ...`.
    let message = match key_at_line(text, line) {
        Some(key) if !message.contains('`') || message.starts_with("invalid") => {
            format!("{key}: {message}")
        }
        _ => message,
    };
    ManifestError::Syntax { line, message }
}

/// Best effort `table.key` for a `key = value` line, from the nearest table header above.
fn key_at_line(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let this = lines.get(line.checked_sub(1)?)?;
    let (key, _) = this.split_once('=')?;
    let key = key.trim();
    let simple = |k: &str| {
        !k.is_empty()
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    };
    if !simple(key) {
        return None;
    }
    let table = lines[..line - 1].iter().rev().find_map(|l| {
        let l = l.trim();
        let inner = l.strip_prefix("[[").and_then(|l| l.split_once("]]"));
        let inner = inner.or_else(|| l.strip_prefix('[').and_then(|l| l.split_once(']')));
        inner.map(|(t, _)| t.trim().to_string())
    });
    match table {
        Some(t) if simple(&t) => Some(format!("{t}.{key}")),
        Some(_) => None,
        None => Some(key.to_string()),
    }
}

struct Validator<'a> {
    text: &'a str,
}

type R<T> = Result<T, ManifestError>;

impl Validator<'_> {
    fn err(&self, span: Range<usize>, key: &str, reason: impl fmt::Display) -> ManifestError {
        ManifestError::Invalid {
            line: line_of(self.text, span.start),
            key: key.to_string(),
            reason: reason.to_string(),
        }
    }

    fn int<T: TryFrom<i64>>(&self, v: &S<i64>, key: &str, lo: i64, hi: i64) -> R<T> {
        let n = *v.get_ref();
        if n < lo || n > hi {
            return Err(self.err(v.span(), key, format!("{n} is out of range {lo}..={hi}")));
        }
        T::try_from(n).map_err(|_| self.err(v.span(), key, "out of range"))
    }

    fn duration(&self, v: &Option<S<String>>, key: &str, default: u64) -> R<u64> {
        match v {
            None => Ok(default),
            Some(v) => {
                parse_duration_ms(v.get_ref()).map_err(|e| self.err(v.span(), key, e.message))
            }
        }
    }

    fn size(&self, v: &S<SizeValue>, key: &str) -> R<u64> {
        let n = match v.get_ref() {
            SizeValue::Int(n) => u64::try_from(*n)
                .map_err(|_| self.err(v.span(), key, format!("invalid size {n}: negative")))?,
            SizeValue::Text(s) => parse_size(s).map_err(|e| self.err(v.span(), key, e.message))?,
        };
        // Below 1 MiB not even a shell starts; almost certainly a missing suffix.
        if n < 1 << 20 {
            return Err(self.err(v.span(), key, "must be at least 1M"));
        }
        Ok(n)
    }

    fn path(&self, v: &S<String>, key: &str) -> R<String> {
        check_abs_path(v.get_ref()).map_err(|e| self.err(v.span(), key, e.message))?;
        Ok(v.get_ref().clone())
    }

    /// A command line: non-empty, program an absolute path, no NUL in any argument.
    fn command(
        &self,
        v: &Option<S<Vec<S<String>>>>,
        key: &str,
        table: Range<usize>,
    ) -> R<Vec<String>> {
        let v = v
            .as_ref()
            .ok_or_else(|| self.err(table, key, "required key is missing"))?;
        let args = v.get_ref();
        let first = args
            .first()
            .ok_or_else(|| self.err(v.span(), key, "must not be empty"))?;
        self.path(first, &format!("{key}[0]"))?;
        for a in args {
            if a.get_ref().contains('\0') {
                return Err(self.err(a.span(), key, "arguments must not contain NUL"));
            }
        }
        Ok(args.iter().map(|a| a.get_ref().clone()).collect())
    }

    /// A list of unique strings each accepted by `check`.
    fn list(
        &self,
        v: &Option<Vec<S<String>>>,
        key: &str,
        check: impl Fn(&str) -> Result<(), String>,
    ) -> R<Vec<String>> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for item in v.iter().flatten() {
            let s = item.get_ref();
            check(s).map_err(|e| self.err(item.span(), key, e))?;
            if !seen.insert(s.as_str()) {
                return Err(self.err(item.span(), key, format!("duplicate entry {s:?}")));
            }
            out.push(s.clone());
        }
        Ok(out)
    }

    fn manifest(&self, raw: RawManifest) -> R<Manifest> {
        let package = raw
            .package
            .as_ref()
            .ok_or_else(|| self.err(0..0, "package", "required table [package] is missing"))?;
        let package = self.package(package)?;
        let entrypoint = raw.entrypoint.as_ref().ok_or_else(|| {
            self.err(0..0, "entrypoint", "required table [entrypoint] is missing")
        })?;
        let entrypoint = self.entrypoint(entrypoint)?;
        let resources = match &raw.resources {
            Some(r) => self.resources(r)?,
            None => Resources::default(),
        };
        let network = self.network(raw.network.as_ref())?;
        #[cfg(feature = "shape")]
        let resources = self.rates(raw.resources.as_ref(), network.mode, resources)?;
        let permissions = match &raw.permissions {
            Some(p) => self.permissions(p)?,
            None => Permissions::default(),
        };
        let restart = self.restart(raw.restart.as_ref())?;
        let health = raw.health.as_ref().map(|h| self.health(h)).transpose()?;
        let mut schedules = Vec::new();
        for s in raw.schedule.iter().flatten() {
            let cron =
                s.get_ref().cron.as_ref().ok_or_else(|| {
                    self.err(s.span(), "schedule.cron", "required key is missing")
                })?;
            check_cron(cron.get_ref()).map_err(|e| self.err(cron.span(), "schedule.cron", e))?;
            let cmd = self.command(&s.get_ref().cmd, "schedule.cmd", s.span())?;
            crate::schedule::check_cmd(&cmd)
                .map_err(|e| self.err(s.span(), "schedule.cmd", e.message))?;
            if schedules.len() == crate::schedule::MAX_SCHEDULES {
                return Err(self.err(
                    s.span(),
                    "schedule",
                    format!("at most {} schedules", crate::schedule::MAX_SCHEDULES),
                ));
            }
            schedules.push(Schedule {
                cron: cron.get_ref().clone(),
                cmd,
            });
        }
        let migrate = match &raw.upgrade {
            Some(u) => self.command(u.get_ref(), "upgrade.migrate", u.span())?,
            None => Vec::new(),
        };
        let mut bind: Vec<String> = Vec::new();
        for b in raw.bind.iter().flatten() {
            let [name, at] = b.get_ref();
            let name = name
                .as_ref()
                .ok_or_else(|| self.err(b.span(), "bind.package", "required key is missing"))?;
            let span = name.span();
            let name = Name::parse(name.get_ref())
                .map_err(|e| self.err(span.clone(), "bind.package", e))?;
            let twice = |b: &String| b.split_once(' ').is_some_and(|(n, _)| n == name.as_str());
            if name == package.name || bind.iter().any(twice) {
                return Err(self.err(span, "bind.package", "bound twice, or the package itself"));
            }
            let (at, span) = match at {
                Some(at) => (at.get_ref().clone(), at.span()),
                None => (crate::bind::default_target(name.as_str()), span),
            };
            crate::bind::check_target(&at)
                .map_err(|e| self.err(span.clone(), "bind.at", e.message))?;
            if let Some((_, o)) = bind
                .iter()
                .filter_map(|b| b.split_once(' '))
                .find(|(_, o)| crate::bind::overlap(o, &at))
            {
                return Err(self.err(span, "bind.at", format!("{at} overlaps {o}")));
            }
            bind.push(format!("{name} {at}"));
        }
        Ok(Manifest {
            package,
            entrypoint,
            resources,
            network,
            permissions,
            restart,
            health,
            schedules,
            migrate,
            bind,
        })
    }

    fn package(&self, p: &S<RawPackage>) -> R<Package> {
        let table = p.span();
        let p = p.get_ref();
        let name = p
            .name
            .as_ref()
            .ok_or_else(|| self.err(table.clone(), "package.name", "required key is missing"))?;
        let name_v =
            Name::parse(name.get_ref()).map_err(|e| self.err(name.span(), "package.name", e))?;
        let version = p
            .version
            .as_ref()
            .ok_or_else(|| self.err(table, "package.version", "required key is missing"))?;
        let version = Version::parse(version.get_ref())
            .map_err(|e| self.err(version.span(), "package.version", e))?;
        let description = match &p.description {
            None => String::new(),
            Some(d) => {
                let s = d.get_ref();
                if s.chars().count() > DESCRIPTION_MAX {
                    return Err(self.err(
                        d.span(),
                        "package.description",
                        format!("longer than {DESCRIPTION_MAX} characters"),
                    ));
                }
                if s.chars().any(char::is_control) {
                    return Err(self.err(
                        d.span(),
                        "package.description",
                        "must not contain control characters (one line of text)",
                    ));
                }
                s.clone()
            }
        };
        let mut depends: Vec<Name> = Vec::new();
        for d in p.depends.iter().flatten() {
            let n =
                Name::parse(d.get_ref()).map_err(|e| self.err(d.span(), "package.depends", e))?;
            if n == name_v {
                return Err(self.err(
                    d.span(),
                    "package.depends",
                    format!("package {n} depends on itself"),
                ));
            }
            if depends.contains(&n) {
                return Err(self.err(
                    d.span(),
                    "package.depends",
                    format!("duplicate dependency {n}"),
                ));
            }
            depends.push(n);
        }
        let base = match p.base.as_ref().map(|b| (b.get_ref().as_str(), b.span())) {
            None | Some(("none", _)) => Base::None,
            Some(("host", _)) => Base::Host,
            Some((other, span)) => {
                return Err(self.err(
                    span,
                    "package.base",
                    format!("{other:?} is not one of \"none\", \"host\""),
                ))
            }
        };
        let rootfs = match p.rootfs.as_ref().map(|b| (b.get_ref().as_str(), b.span())) {
            None | Some(("package", _)) => RootfsMode::Package,
            Some(("merged", _)) => RootfsMode::Merged,
            Some((other, span)) => {
                return Err(self.err(
                    span,
                    "package.rootfs",
                    format!("{other:?} is not one of \"package\", \"merged\""),
                ))
            }
        };
        Ok(Package {
            name: name_v,
            version,
            description,
            depends,
            base,
            rootfs,
        })
    }

    fn entrypoint(&self, e: &S<RawEntrypoint>) -> R<Entrypoint> {
        let table = e.span();
        let e = e.get_ref();
        let argv = self.command(&e.argv, "entrypoint.argv", table)?;
        let mut env = BTreeMap::new();
        for (k, v) in e.env.iter().flatten() {
            let key_ok = k
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !key_ok {
                return Err(self.err(
                    v.span(),
                    "entrypoint.env",
                    format!("invalid variable name {k:?}: expected [A-Za-z_][A-Za-z0-9_]*"),
                ));
            }
            if v.get_ref().contains(['\0', '\n']) {
                return Err(self.err(
                    v.span(),
                    &format!("entrypoint.env.{k}"),
                    "value must not contain NUL or newline",
                ));
            }
            env.insert(k.clone(), v.get_ref().clone());
        }
        let workdir = match &e.workdir {
            Some(w) => self.path(w, "entrypoint.workdir")?,
            None => "/".to_string(),
        };
        let id = |v: &Option<S<i64>>, key| v.as_ref().map_or(Ok(0), |v| self.int(v, key, 0, 65534));
        Ok(Entrypoint {
            argv,
            env,
            workdir,
            user: id(&e.user, "entrypoint.user")?,
            group: id(&e.group, "entrypoint.group")?,
        })
    }

    fn resources(&self, r: &RawResources) -> R<Resources> {
        let cpu_max_percent = match &r.cpu_max {
            None => None,
            Some(v) => {
                let p = parse_percent(v.get_ref())
                    .map_err(|e| self.err(v.span(), "resources.cpu_max", e.message))?;
                if !(1..=800).contains(&p) {
                    return Err(self.err(
                        v.span(),
                        "resources.cpu_max",
                        "must be between 1% and 800%",
                    ));
                }
                Some(p)
            }
        };
        let memory = r
            .memory
            .as_ref()
            .map(|v| self.size(v, "resources.memory"))
            .transpose()?;
        let memory_soft = r
            .memory_soft
            .as_ref()
            .map(|v| self.size(v, "resources.memory_soft"))
            .transpose()?;
        if let (Some(hard), Some(soft), Some(v)) = (memory, memory_soft, &r.memory_soft) {
            if soft > hard {
                return Err(self.err(
                    v.span(),
                    "resources.memory_soft",
                    "must not exceed resources.memory",
                ));
            }
        }
        let cpuset = match &r.cpuset {
            None => None,
            Some(v) => {
                check_cpuset(v.get_ref()).map_err(|e| self.err(v.span(), "resources.cpuset", e))?;
                Some(v.get_ref().clone())
            }
        };
        Ok(Resources {
            cpu_weight: r
                .cpu_weight
                .as_ref()
                .map(|v| self.int(v, "resources.cpu_weight", 1, 10_000))
                .transpose()?,
            cpu_max_percent,
            memory,
            memory_soft,
            pids: r
                .pids
                .as_ref()
                .map(|v| self.int(v, "resources.pids", 1, 65_536))
                .transpose()?,
            cpuset,
            priority: r
                .priority
                .as_ref()
                .map_or(Ok(0), |v| self.int(v, "resources.priority", -100, 100))?,
            // Read after the network table, by `rates`.
            #[cfg(feature = "shape")]
            egress: None,
            #[cfg(feature = "shape")]
            ingress: None,
            #[cfg(feature = "shape")]
            data_cap: None,
        })
    }

    /// `[resources] egress` and `ingress` (feature `shape`; without it they are unknown
    /// keys): rates, in a mode with a veth of its own (shared and macvlan have none).
    #[cfg(feature = "shape")]
    fn rates(&self, r: Option<&RawResources>, mode: NetMode, res: Resources) -> R<Resources> {
        let Some(r) = r else { return Ok(res) };
        let rate = |v: &Option<S<String>>, key: &str| -> R<Option<u64>> {
            let Some(v) = v else { return Ok(None) };
            if matches!(mode, NetMode::Shared | NetMode::Macvlan) {
                return Err(self.err(v.span(), key, cap_refusal(mode)));
            }
            crate::shape::parse_rate(v.get_ref())
                .map(Some)
                .map_err(|e| self.err(v.span(), key, e))
        };
        // Counted on the bridge, where only an isolated container's packets are its own.
        let data_cap = match &r.data_cap {
            None => None,
            Some(v) if mode != NetMode::Isolated => {
                return Err(self.err(
                    v.span(),
                    "resources.data_cap",
                    format!(
                        "a data cap needs network mode isolated (its packets cross berth's bridge, where they are counted); mode {} has none",
                        match mode {
                            NetMode::Shared => "shared",
                            NetMode::Macvlan => "macvlan",
                            _ => "none",
                        }
                    ),
                ))
            }
            Some(v) => Some(
                crate::datacap::parse_cap(v.get_ref())
                    .map_err(|e| self.err(v.span(), "resources.data_cap", e))?,
            ),
        };
        Ok(Resources {
            egress: rate(&r.egress, "resources.egress")?,
            ingress: rate(&r.ingress, "resources.ingress")?,
            data_cap,
            ..res
        })
    }

    fn network(&self, n: Option<&RawNetwork>) -> R<Network> {
        let Some(n) = n else {
            return Ok(Network {
                mode: NetMode::None,
                publish: Vec::new(),
                dhcp: false,
            });
        };
        let mode = match n.mode.as_ref().map(|m| (m.get_ref().as_str(), m.span())) {
            None | Some(("none", _)) => NetMode::None,
            Some(("isolated", _)) => NetMode::Isolated,
            Some(("macvlan", _)) => NetMode::Macvlan,
            Some(("shared", _)) => NetMode::Shared,
            Some((other, span)) => {
                return Err(self.err(
                    span,
                    "network.mode",
                    format!(
                        "{other:?} is not one of \"none\", \"isolated\", \"macvlan\", \"shared\""
                    ),
                ))
            }
        };
        let mut publish: Vec<Publish> = Vec::new();
        for p in n.publish.iter().flatten() {
            // Port forwarding goes through berth's NAT, which only exists for veth containers:
            // macvlan and shared containers are reachable directly, "none" not at all.
            if mode != NetMode::Isolated {
                return Err(self.err(
                    p.span(),
                    "network.publish",
                    "needs network.mode = \"isolated\"",
                ));
            }
            let v =
                parse_publish(p.get_ref()).map_err(|e| self.err(p.span(), "network.publish", e))?;
            if publish
                .iter()
                .any(|q| q.host_port == v.host_port && q.proto == v.proto)
            {
                return Err(self.err(
                    p.span(),
                    "network.publish",
                    format!("host port {} is published twice", v.host_port),
                ));
            }
            publish.push(v);
        }
        let dhcp = match n.address.as_ref().map(|a| (a.get_ref().as_str(), a.span())) {
            None | Some(("static", _)) => false,
            Some(("dhcp", _)) if mode == NetMode::Isolated => true,
            Some(("dhcp", span)) => {
                return Err(self.err(
                    span,
                    "network.address",
                    "\"dhcp\" needs network.mode = \"isolated\" (on macvlan the LAN's own DHCP server answers)",
                ))
            }
            Some((other, span)) => {
                return Err(self.err(
                    span,
                    "network.address",
                    format!("{other:?} is not one of \"static\", \"dhcp\""),
                ))
            }
        };
        Ok(Network {
            mode,
            publish,
            dhcp,
        })
    }

    fn permissions(&self, p: &RawPermissions) -> R<Permissions> {
        Ok(Permissions {
            capabilities: self.list(&p.capabilities, "permissions.capabilities", |c| {
                if CAPABILITIES.contains(&c) {
                    Ok(())
                } else {
                    Err(format!(
                        "unknown capability {c:?} (lowercase, without cap_, e.g. \"net_bind_service\")"
                    ))
                }
            })?,
            devices: self.list(&p.devices, "permissions.devices", |d| {
                check_abs_path(d)?;
                if d.strip_prefix("/dev/").is_some_and(|r| !r.is_empty()) {
                    Ok(())
                } else {
                    Err(format!("{d:?} is not under /dev"))
                }
            })?,
            syscalls: self.list(&p.syscalls, "permissions.syscalls", |s| {
                if !s.is_empty()
                    && s.len() <= 64
                    && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                {
                    Ok(())
                } else {
                    Err(format!("invalid syscall name {s:?}: expected [a-z0-9_]+"))
                }
            })?,
            api: self.list(&p.api, "permissions.api", |a| {
                if API_OPERATIONS.contains(&a) {
                    Ok(())
                } else {
                    Err(format!(
                        "unknown api operation {a:?} (known: {})",
                        API_OPERATIONS.join(", ")
                    ))
                }
            })?,
        })
    }

    fn restart(&self, r: Option<&RawRestart>) -> R<Restart> {
        let Some(r) = r else {
            return Ok(Restart {
                policy: RestartPolicy::OnFailure,
                max_retries: DEFAULT_MAX_RETRIES,
                delay_ms: DEFAULT_RESTART_DELAY_MS,
                max_delay_ms: DEFAULT_RESTART_MAX_DELAY_MS,
                multiplier_milli: DEFAULT_RESTART_MULTIPLIER_MILLI,
                reset_period_ms: DEFAULT_RESTART_RESET_PERIOD_MS,
            });
        };
        let policy = match r.policy.as_ref().map(|m| (m.get_ref().as_str(), m.span())) {
            None | Some(("on-failure", _)) => RestartPolicy::OnFailure,
            Some(("never", _)) => RestartPolicy::Never,
            Some(("always", _)) => RestartPolicy::Always,
            Some((other, span)) => {
                return Err(self.err(
                    span,
                    "restart.policy",
                    format!("{other:?} is not one of \"never\", \"on-failure\", \"always\""),
                ))
            }
        };
        let delay_ms = self.duration(&r.delay, "restart.delay", DEFAULT_RESTART_DELAY_MS)?;
        let max_delay_ms = self.duration(
            &r.max_delay,
            "restart.max_delay",
            DEFAULT_RESTART_MAX_DELAY_MS.max(delay_ms),
        )?;
        if max_delay_ms < delay_ms {
            let span = r.max_delay.as_ref().map(|v| v.span()).unwrap_or_default();
            return Err(self.err(
                span,
                "restart.max_delay",
                format!("{max_delay_ms} ms is shorter than restart.delay ({delay_ms} ms)"),
            ));
        }
        let multiplier_milli = match &r.multiplier {
            None => DEFAULT_RESTART_MULTIPLIER_MILLI,
            Some(v) => {
                let x = match v.get_ref() {
                    Val::Int(n) => *n as f64,
                    Val::Float(x) => *x,
                    other => {
                        return Err(self.err(
                            v.span(),
                            "restart.multiplier",
                            format!("expected a number such as 2 or 1.5, found {}", other.kind()),
                        ))
                    }
                };
                // TR-181 allows 1.000 … 10.000.
                if !(1.0..=10.0).contains(&x) {
                    return Err(self.err(
                        v.span(),
                        "restart.multiplier",
                        // Said without formatting a float: that code would cost the device
                        // binary 9 KiB.
                        "is out of range 1..=10",
                    ));
                }
                (x * 1000.0).round() as u32
            }
        };
        Ok(Restart {
            policy,
            max_retries: r
                .max_retries
                .as_ref()
                .map_or(Ok(DEFAULT_MAX_RETRIES), |v| {
                    self.int(v, "restart.max_retries", 0, 1000)
                })?,
            delay_ms,
            max_delay_ms,
            multiplier_milli,
            reset_period_ms: self.duration(
                &r.reset_period,
                "restart.reset_period",
                DEFAULT_RESTART_RESET_PERIOD_MS,
            )?,
        })
    }

    fn health(&self, h: &S<RawHealth>) -> R<Health> {
        let table = h.span();
        let h = h.get_ref();
        let interval_ms =
            self.duration(&h.interval, "health.interval", DEFAULT_HEALTH_INTERVAL_MS)?;
        let timeout_ms = self.duration(&h.timeout, "health.timeout", DEFAULT_HEALTH_TIMEOUT_MS)?;
        // Each check is a process the daemon starts: a tiny interval would spin it.
        if interval_ms < MIN_HEALTH_INTERVAL_MS {
            let span = h.interval.as_ref().map_or(table.clone(), |v| v.span());
            return Err(self.err(span, "health.interval", "must be at least 100ms"));
        }
        if timeout_ms == 0 {
            let span = h.timeout.as_ref().map_or(table.clone(), |v| v.span());
            return Err(self.err(span, "health.timeout", "must be greater than 0"));
        }
        let probes = [h.cmd.is_some(), h.tcp.is_some(), h.http.is_some()];
        let self_reported =
            h.watchdog.is_some() || h.ready.as_ref().is_some_and(|r| r.get_ref() == "api");
        match probes.iter().filter(|p| **p).count() {
            1 => {}
            0 if self_reported => {}
            0 => {
                return Err(self.err(
                    table,
                    "health.cmd",
                    "required key is missing (or give tcp or http instead, or ready = \"api\" or watchdog for a package that reports through the container API)",
                ))
            }
            _ => {
                return Err(self.err(
                    table,
                    "health",
                    "give one probe: cmd, tcp or http, not several",
                ))
            }
        }
        let cmd = match &h.cmd {
            Some(_) => self.command(&h.cmd, "health.cmd", table.clone())?,
            None => Vec::new(),
        };
        let tcp = h
            .tcp
            .as_ref()
            .map(|v| self.int::<u16>(v, "health.tcp", 1, 65535))
            .transpose()?;
        let http = match &h.http {
            None => None,
            Some(v) => Some(
                parse_http_probe(v.get_ref()).map_err(|e| self.err(v.span(), "health.http", e))?,
            ),
        };
        let ready = match h.ready.as_ref().map(|v| (v.get_ref().as_str(), v.span())) {
            None | Some(("healthy", _)) => Ready::Healthy,
            Some(("started", _)) => Ready::Started,
            Some(("api", _)) => Ready::Api,
            Some((other, span)) => {
                return Err(self.err(
                    span,
                    "health.ready",
                    format!("{other:?} is not one of \"healthy\", \"started\", \"api\""),
                ))
            }
        };
        let watchdog_ms = match &h.watchdog {
            None => None,
            Some(v) => {
                let ms = parse_duration_ms(v.get_ref())
                    .map_err(|e| self.err(v.span(), "health.watchdog", e.message))?;
                // Each keep-alive is a request: a period below a second would be a flood.
                if !(1_000..=86_400_000).contains(&ms) {
                    return Err(self.err(
                        v.span(),
                        "health.watchdog",
                        "must be between 1s and 24h",
                    ));
                }
                Some(ms)
            }
        };
        Ok(Health {
            cmd,
            interval_ms,
            timeout_ms,
            retries: h.retries.as_ref().map_or(Ok(DEFAULT_HEALTH_RETRIES), |v| {
                self.int(v, "health.retries", 1, 1000)
            })?,
            tcp,
            http,
            ready,
            watchdog_ms,
        })
    }
}

/// `"8080/healthz"` or `"8080"` (path `/`): a port on the container's loopback and the path
/// to GET there.
fn parse_http_probe(s: &str) -> Result<HttpProbe, String> {
    let (port, path) = match s.split_once('/') {
        Some((p, rest)) => (p, format!("/{rest}")),
        None => (s, "/".to_string()),
    };
    let port: u16 =
        port.parse().ok().filter(|p| *p > 0).ok_or_else(|| {
            format!("{s:?}: expected PORT or PORT/PATH, such as \"8080/healthz\"")
        })?;
    if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(format!(
            "{s:?}: the path may not contain spaces or control characters"
        ));
    }
    Ok(HttpProbe { port, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
[package]
name = "httpd"
version = "1.0.0"
description = "a small web server"
depends = ["libfoo", "libbar"]
base = "host"
rootfs = "merged"

[entrypoint]
argv = ["/bin/httpd", "-f"]
env = { LANG = "C", _X1 = "a b" }
workdir = "/srv"
user = 1000
group = 1000

[resources]
cpu_weight = 100
cpu_max = "20%"
memory = "32M"
memory_soft = 16777216
pids = 64
cpuset = "0,2-3"
priority = -5

[network]
mode = "isolated"
publish = ["8080:80/tcp", "8080:80/udp", "5353:53"]
address = "dhcp"

[permissions]
capabilities = ["net_bind_service"]
devices = ["/dev/ttyUSB0"]
syscalls = ["io_uring_setup"]
api = ["status", "logs"]

[restart]
policy = "always"
max_retries = 10
delay = "500ms"

[health]
cmd = ["/bin/check", "--quick"]
interval = "1m"
timeout = "5s"
retries = 2

[[schedule]]
cron = "*/5 * * * *"
cmd = ["/bin/job"]

[[schedule]]
cron = "@daily"
cmd = ["/bin/rotate"]
"#;

    #[test]
    // `..Resources::default()` fills the rates, fields only with feature `shape`.
    #[allow(clippy::needless_update)]
    fn full_manifest() {
        let m = Manifest::parse(FULL).unwrap();
        assert_eq!(m.package.name.as_str(), "httpd");
        assert_eq!(m.package.version.to_string(), "1.0.0");
        assert_eq!(m.package.depends.len(), 2);
        assert_eq!(m.package.base, Base::Host);
        assert_eq!(m.package.rootfs, RootfsMode::Merged);
        assert_eq!(m.entrypoint.argv, ["/bin/httpd", "-f"]);
        assert_eq!(m.entrypoint.env["LANG"], "C");
        assert_eq!(m.entrypoint.workdir, "/srv");
        assert_eq!((m.entrypoint.user, m.entrypoint.group), (1000, 1000));
        assert_eq!(
            m.resources,
            Resources {
                cpu_weight: Some(100),
                cpu_max_percent: Some(20),
                memory: Some(32 << 20),
                memory_soft: Some(16 << 20),
                pids: Some(64),
                cpuset: Some("0,2-3".into()),
                priority: -5,
                ..Resources::default()
            }
        );
        assert_eq!(m.network.mode, NetMode::Isolated);
        assert!(m.network.dhcp);
        assert_eq!(
            m.network.publish,
            [
                Publish {
                    host_port: 8080,
                    container_port: 80,
                    proto: Proto::Tcp
                },
                Publish {
                    host_port: 8080,
                    container_port: 80,
                    proto: Proto::Udp
                },
                Publish {
                    host_port: 5353,
                    container_port: 53,
                    proto: Proto::Tcp
                },
            ]
        );
        assert_eq!(m.permissions.capabilities, ["net_bind_service"]);
        assert_eq!(m.permissions.devices, ["/dev/ttyUSB0"]);
        assert_eq!(m.permissions.api, ["status", "logs"]);
        assert_eq!(
            m.restart,
            Restart {
                policy: RestartPolicy::Always,
                max_retries: 10,
                delay_ms: 500,
                max_delay_ms: DEFAULT_RESTART_MAX_DELAY_MS,
                multiplier_milli: 2_000,
                reset_period_ms: DEFAULT_RESTART_RESET_PERIOD_MS,
            }
        );
        assert_eq!(
            m.health,
            Some(Health {
                cmd: vec!["/bin/check".into(), "--quick".into()],
                interval_ms: 60_000,
                timeout_ms: 5_000,
                retries: 2,
                tcp: None,
                http: None,
                ready: Ready::Healthy,
                watchdog_ms: None,
            })
        );
        assert_eq!(m.schedules.len(), 2);
        assert_eq!(m.schedules[1].cron, "@daily");

        // The daemon keeps parsed manifests in its JSON state.
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<Manifest>(&json).unwrap(), m);
        let s = m.summary();
        assert_eq!(s.argv0, "/bin/httpd");
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains(r#""network_mode":"isolated""#), "{json}");
        assert_eq!(serde_json::from_str::<ManifestSummary>(&json).unwrap(), s);
    }

    #[test]
    fn minimal_manifest_defaults() {
        let m = Manifest::parse(
            "[package]\nname = \"a\"\nversion = \"1\"\n[entrypoint]\nargv = [\"/a\"]\n",
        )
        .unwrap();
        assert_eq!(m.package.base, Base::None);
        assert_eq!(m.package.rootfs, RootfsMode::Package);
        assert_eq!(m.entrypoint.workdir, "/");
        assert_eq!(m.network.mode, NetMode::None);
        assert!(!m.network.dhcp);
        assert_eq!(m.restart.policy, RestartPolicy::OnFailure);
        assert_eq!(m.restart.max_retries, DEFAULT_MAX_RETRIES);
        assert_eq!(m.resources, Resources::default());
        assert!(m.health.is_none() && m.schedules.is_empty());
    }

    /// Replaces the first line that starts with `key =` (or appends `extra` at the end when
    /// `key` is empty) and returns the error.
    fn err_with(key: &str, line: &str) -> ManifestError {
        let text = if key.is_empty() {
            format!("{FULL}{line}\n")
        } else {
            let mut done = false;
            FULL.lines()
                .map(|l| {
                    if !done && l.starts_with(&format!("{key} =")) {
                        done = true;
                        line.to_string()
                    } else {
                        l.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        Manifest::parse(&text).unwrap_err()
    }

    /// FULL with bandwidth caps after its `priority`; the line of `egress`.
    #[cfg(feature = "shape")]
    fn with_rates(egress: &str, ingress: &str) -> (String, usize) {
        let text = FULL.replace(
            "priority = -5\n",
            &format!("priority = -5\negress = \"{egress}\"\ningress = \"{ingress}\"\n"),
        );
        (text, line_in_full("priority =") + 1)
    }

    #[cfg(feature = "shape")]
    #[test]
    fn rates_are_read_and_bad_ones_refused_on_their_line() {
        let (text, _) = with_rates("8mbit", "1500kbit");
        let m = Manifest::parse(&text).unwrap();
        assert_eq!(
            (m.resources.egress, m.resources.ingress),
            (Some(8_000_000), Some(1_500_000))
        );
        let (text, line) = with_rates("8mb", "1mbit");
        check(
            Manifest::parse(&text).unwrap_err(),
            line,
            "resources.egress: invalid rate \"8mb\"",
        );
        let (text, line) = with_rates("1mbit", "10kbit");
        check(
            Manifest::parse(&text).unwrap_err(),
            line + 1,
            "resources.ingress: rate \"10kbit\" is out of range",
        );
    }

    #[cfg(feature = "shape")]
    #[test]
    fn a_cap_in_a_mode_without_a_veth_of_its_own_is_refused() {
        for mode in ["shared", "macvlan"] {
            let (text, line) = with_rates("8mbit", "8mbit");
            let text = text
                .replace("mode = \"isolated\"", &format!("mode = \"{mode}\""))
                .replace(
                    "publish = [\"8080:80/tcp\", \"8080:80/udp\", \"5353:53\"]\n",
                    "",
                )
                .replace("address = \"dhcp\"\n", "");
            check(
                Manifest::parse(&text).unwrap_err(),
                line,
                "resources.egress: a bandwidth cap needs network mode isolated",
            );
        }
    }

    #[cfg(feature = "shape")]
    #[test]
    fn a_data_cap_is_read_and_refused_by_name_outside_isolated_or_malformed() {
        let with = |cap: &str| {
            FULL.replace(
                "priority = -5\n",
                &format!("priority = -5\ndata_cap = \"{cap}\"\n"),
            )
        };
        let line = line_in_full("priority =") + 1;
        let m = Manifest::parse(&with("2GiB/month")).unwrap();
        assert_eq!(
            m.resources.data_cap,
            Some(crate::datacap::DataCap {
                bytes: 2 << 30,
                period: crate::datacap::Period::Month
            })
        );
        check(
            Manifest::parse(&with("2G/fortnight")).unwrap_err(),
            line,
            "resources.data_cap: \"2G/fortnight\": unknown period",
        );
        let shared = with("2G/day")
            .replace("mode = \"isolated\"", "mode = \"shared\"")
            .replace(
                "publish = [\"8080:80/tcp\", \"8080:80/udp\", \"5353:53\"]\n",
                "",
            )
            .replace("address = \"dhcp\"\n", "");
        check(
            Manifest::parse(&shared).unwrap_err(),
            line,
            "resources.data_cap: a data cap needs network mode isolated",
        );
    }

    /// Without the `shape` feature the keys are unknown: refused by name.
    #[cfg(not(feature = "shape"))]
    #[test]
    fn without_shaping_a_rate_is_an_unknown_key() {
        let text = FULL.replace("priority = -5\n", "priority = -5\negress = \"8mbit\"\n");
        check(
            Manifest::parse(&text).unwrap_err(),
            line_in_full("priority =") + 1,
            "unknown key `egress` in [resources]",
        );
    }

    fn line_in_full(prefix: &str) -> usize {
        FULL.lines().position(|l| l.starts_with(prefix)).unwrap() + 1
    }

    #[track_caller]
    fn check(e: ManifestError, line: usize, contains: &str) {
        let s = e.to_string();
        assert_eq!(e.line(), line, "{s}");
        assert!(s.starts_with(&format!("manifest line {line}: ")), "{s}");
        assert!(s.contains(contains), "{s:?} lacks {contains:?}");
    }

    #[test]
    fn error_lines() {
        let name = line_in_full("name =");
        check(
            err_with("name", "name = \"Foo\""),
            name,
            r#"package.name: invalid package name "Foo": only a-z, 0-9 and '-' are allowed"#,
        );
        let e = Manifest::parse("\n\n[package]\nname = \"Foo\"\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"manifest line 4: package.name: invalid package name "Foo": only a-z, 0-9 and '-' are allowed"#
        );
        check(
            err_with("version", "version = \"1..2\""),
            line_in_full("version ="),
            "package.version: invalid version \"1..2\": empty component",
        );
        check(
            err_with("argv", "argv = [\"bin/httpd\"]"),
            line_in_full("argv ="),
            "entrypoint.argv[0]",
        );
        check(
            err_with("argv", "argv = [\"bin/httpd\"]"),
            line_in_full("argv ="),
            "absolute",
        );
        check(
            err_with("argv", "argv = [\"/bin/../sh\"]"),
            line_in_full("argv ="),
            "\"..\"",
        );
        check(
            err_with("argv", "argv = [\"/bin//sh\"]"),
            line_in_full("argv ="),
            "\"//\"",
        );
        check(
            err_with("argv", "argv = [\"/bin/\"]"),
            line_in_full("argv ="),
            "end with",
        );
        check(
            err_with("argv", "argv = []"),
            line_in_full("argv ="),
            "must not be empty",
        );
        check(
            err_with("workdir", "workdir = \"/srv/./x\""),
            line_in_full("workdir ="),
            "/./",
        );
        check(
            err_with("depends", "depends = [\"libfoo\", \"libfoo\"]"),
            line_in_full("depends ="),
            "package.depends: duplicate dependency libfoo",
        );
        check(
            err_with("depends", "depends = [\"httpd\"]"),
            line_in_full("depends ="),
            "depends on itself",
        );
        check(
            err_with("memory", "memory = \"32X\""),
            line_in_full("memory ="),
            "resources.memory: invalid size",
        );
        check(
            err_with("memory", "memory = \"512K\""),
            line_in_full("memory ="),
            "at least 1M",
        );
        check(
            err_with("memory", "memory = \"8M\""),
            line_in_full("memory_soft ="),
            "must not exceed",
        );
        check(
            err_with("cpu_max", "cpu_max = \"900%\""),
            line_in_full("cpu_max ="),
            "800%",
        );
        check(
            err_with("cpu_max", "cpu_max = \"20\""),
            line_in_full("cpu_max ="),
            "invalid percentage",
        );
        check(
            err_with("cpuset", "cpuset = \"3-1\""),
            line_in_full("cpuset ="),
            "cpu list",
        );
    }

    /// The same, for the resources' and network's keys and the later sections.
    #[test]
    fn error_lines_of_later_keys() {
        check(
            err_with("pids", "pids = 0"),
            line_in_full("pids ="),
            "resources.pids: 0 is out of range",
        );
        check(
            err_with("address", "address = \"auto\""),
            line_in_full("address ="),
            "network.address: \"auto\" is not one of \"static\", \"dhcp\"",
        );
        let e = Manifest::parse(
            "[package]\nname = \"a\"\nversion = \"1\"\n[entrypoint]\nargv = [\"/x\"]\n[network]\nmode = \"macvlan\"\naddress = \"dhcp\"\n",
        )
        .unwrap_err();
        assert_eq!(e.line(), 8);
        assert!(
            e.to_string()
                .contains("\"dhcp\" needs network.mode = \"isolated\""),
            "{e}"
        );
        check(
            err_with("publish", "publish = [\"80\"]"),
            line_in_full("publish ="),
            "network.publish: invalid port mapping",
        );
        check(
            err_with("publish", "publish = [\"0:80\"]"),
            line_in_full("publish ="),
            "1..65535",
        );
        check(
            err_with("publish", "publish = [\"1:80/sctp\"]"),
            line_in_full("publish ="),
            "tcp or udp",
        );
        check(
            err_with("publish", "publish = [\"1:80\", \"1:81/tcp\"]"),
            line_in_full("publish ="),
            "published twice",
        );
        check(
            err_with("mode", "mode = \"none\""),
            line_in_full("publish ="),
            "needs network.mode",
        );
        check(
            err_with("mode", "mode = \"bridge\""),
            line_in_full("mode ="),
            "network.mode",
        );
        check(
            err_with("capabilities", "capabilities = [\"cap_sys_admin\"]"),
            line_in_full("capabilities ="),
            "permissions.capabilities: unknown capability \"cap_sys_admin\"",
        );
        check(
            err_with("devices", "devices = [\"/dev/../etc\"]"),
            line_in_full("devices ="),
            "\"..\"",
        );
        check(
            err_with("devices", "devices = [\"/etc/passwd\"]"),
            line_in_full("devices ="),
            "not under /dev",
        );
        check(
            err_with("api", "api = [\"reboot\"]"),
            line_in_full("api ="),
            "unknown api operation",
        );
        check(
            err_with("policy", "policy = \"sometimes\""),
            line_in_full("policy ="),
            "restart.policy",
        );
        check(
            err_with("delay", "delay = \"1h\""),
            line_in_full("delay ="),
            "invalid duration",
        );
        check(
            err_with("cron", "cron = \"* * *\""),
            line_in_full("cron ="),
            "5 fields",
        );
        check(
            err_with("cron", "cron = \"a * * * *\""),
            line_in_full("cron ="),
            "minute: \"a\" is not a number",
        );
        check(
            err_with("user", "user = 70000"),
            line_in_full("user ="),
            "entrypoint.user",
        );
        check(
            err_with("env", "env = { \"1X\" = \"a\" }"),
            line_in_full("env ="),
            "invalid variable name",
        );
        check(
            err_with("description", "description = \"a\\nb\""),
            line_in_full("description ="),
            "control",
        );
    }

    #[test]
    fn bind_tables() {
        let head = "[package]\nname = \"app\"\nversion = \"1\"\n[entrypoint]\nargv = [\"/x\"]\n";
        let m = Manifest::parse(&format!(
            "{head}[[bind]]\npackage = \"tools\"\n[[bind]]\npackage = \"lib\"\nat = \"/usr/share/lib\"\n"
        ))
        .unwrap();
        assert_eq!(
            m.binds().collect::<Vec<_>>(),
            [("tools", "/opt/tools"), ("lib", "/usr/share/lib")]
        );
        assert!(Manifest::parse(head).unwrap().bind.is_empty());
        // Line 6 is the first [[bind]]; errors name the key and the line of its value.
        for (tables, line, needle) in [
            (
                "[[bind]]\nat = \"/opt/x\"\n",
                6,
                "bind.package: required key is missing",
            ),
            ("[[bind]]\npackage = \"Tools\"\n", 7, "bind.package:"),
            (
                "[[bind]]\npackage = \"app\"\n",
                7,
                "bind.package: bound twice, or the package itself",
            ),
            (
                "[[bind]]\npackage = \"a\"\n[[bind]]\npackage = \"a\"\nat = \"/srv/a\"\n",
                9,
                "bind.package: bound twice",
            ),
            (
                "[[bind]]\npackage = \"a\"\nat = \"/proc/a\"\n",
                8,
                "bind.at: /proc/a: is below /proc",
            ),
            (
                "[[bind]]\npackage = \"a\"\nat = \"opt/a\"\n",
                8,
                "bind.at: \"opt/a\" must be an absolute path",
            ),
            (
                "[[bind]]\npackage = \"a\"\nat = \"/\"\n",
                8,
                "bind.at: /: is the container's own",
            ),
            (
                "[[bind]]\npackage = \"a\"\n[[bind]]\npackage = \"b\"\nat = \"/opt/a/b\"\n",
                10,
                "bind.at: /opt/a/b overlaps /opt/a",
            ),
            (
                "[[bind]]\npackage = \"a\"\nmode = \"rw\"\n",
                8,
                "unknown key `mode` in [bind]",
            ),
            ("[[bind]]\npackage = 3\n", 7, "bind.package"),
        ] {
            check(
                Manifest::parse(&format!("{head}{tables}")).unwrap_err(),
                line,
                needle,
            );
        }
    }

    #[test]
    fn syntax_and_unknown_key_lines() {
        // Unknown top-level table.
        check(
            err_with("", "[extra]\nx = 1"),
            FULL.lines().count() + 1,
            "unknown key `extra`",
        );
        // Unknown nested key.
        check(
            err_with("pids", "pidz = 64"),
            line_in_full("pids ="),
            "unknown key `pidz` in [resources]",
        );
        // Wrong type: the key is recovered from the source line.
        check(
            err_with("name", "name = 5"),
            line_in_full("name ="),
            "package.name: expected a string, found an integer",
        );
        // Plain TOML syntax error.
        check(
            err_with("name", "name = \"unterminated"),
            line_in_full("name ="),
            "",
        );
        check(
            err_with(
                "",
                "[[schedule]]\ncron = \"@daily\"\ncmd = [\"/x\"]\nwhat = 1",
            ),
            FULL.lines().count() + 4,
            "unknown key `what` in [schedule]",
        );
    }

    #[test]
    fn missing_required() {
        check(
            Manifest::parse("").unwrap_err(),
            1,
            "required table [package]",
        );
        check(
            Manifest::parse("[package]\nname = \"a\"\nversion = \"1\"\n").unwrap_err(),
            1,
            "required table [entrypoint]",
        );
        check(
            Manifest::parse(
                "[package]\nname = \"a\"\nversion = \"1\"\n\n[entrypoint]\nworkdir = \"/\"\n",
            )
            .unwrap_err(),
            5,
            "entrypoint.argv: required key is missing",
        );
        check(
            Manifest::parse("\n[package]\nversion = \"1\"\n").unwrap_err(),
            2,
            "package.name: required key is missing",
        );
        check(
            Manifest::parse(
                "[package]\nname = \"a\"\nversion = \"1\"\n[entrypoint]\nargv = [\"/a\"]\n\n[health]\ninterval = \"1s\"\n",
            )
            .unwrap_err(),
            7,
            "health.cmd: required key is missing",
        );
    }

    #[test]
    fn helpers() {
        assert_eq!(parse_size("1"), Ok(1));
        assert_eq!(parse_size("32M"), Ok(32 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert!(parse_size("").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("+1M").is_err());
        assert!(parse_size("1.5M").is_err());
        assert!(parse_size("99999999999999999G")
            .unwrap_err()
            .message
            .contains("too large"));
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        assert_eq!(parse_duration_ms("2s"), Ok(2000));
        assert_eq!(parse_duration_ms("3m"), Ok(180_000));
        assert!(parse_duration_ms("3").is_err());
        assert!(parse_duration_ms("s").is_err());
        assert!(parse_duration_ms("1 s").is_err());
        assert_eq!(parse_percent("20%"), Ok(20));
        assert!(parse_percent("20").is_err());
        assert!(parse_percent("-1%").is_err());
        assert!(check_abs_path("/").is_ok());
        assert!(check_abs_path("/a/b..c").is_ok());
        assert!(check_abs_path("/a\0").is_err());
        assert!(check_cpuset("0").is_ok() && check_cpuset("0-3,5").is_ok());
        assert!(
            check_cpuset("").is_err() && check_cpuset("0,").is_err() && check_cpuset("a").is_err()
        );
    }

    /// Property-style: parse must return (not panic) on arbitrary mutations of a valid
    /// manifest, including cuts inside multi-byte characters' neighbourhood and random bytes.
    #[test]
    fn parse_never_panics() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let alphabet: Vec<char> = "[]=\"'{},.\n #-_/%aZ09é\u{0}\\".chars().collect();
        let base: Vec<char> = FULL.chars().collect();
        for _ in 0..3000 {
            let mut s = base.clone();
            for _ in 0..(next() % 8 + 1) {
                let pos = (next() as usize) % (s.len() + 1);
                match next() % 3 {
                    0 if pos < s.len() => {
                        s.remove(pos);
                    }
                    1 => s.insert(pos, alphabet[(next() as usize) % alphabet.len()]),
                    _ => s.truncate(pos),
                }
            }
            let text: String = s.into_iter().collect();
            let _ = Manifest::parse(&text);
        }
        for len in 0..64 {
            let text: String = (0..len)
                .map(|_| alphabet[(next() as usize) % alphabet.len()])
                .collect();
            let _ = Manifest::parse(&text);
        }
    }

    #[test]
    fn restart_and_health_take_the_tr181_keys_and_one_probe() {
        let base = "[package]\nname = \"a\"\nversion = \"1\"\n[entrypoint]\nargv = [\"/a\"]\n";
        let m = Manifest::parse(&format!(
            "{base}[restart]\ndelay = \"2s\"\nmax_delay = \"1m\"\nmultiplier = 3\nreset_period = \"5m\"\n\
             [health]\nhttp = \"8080/healthz\"\nready = \"started\"\n"
        ))
        .unwrap();
        assert_eq!(
            (
                m.restart.delay_ms,
                m.restart.max_delay_ms,
                m.restart.multiplier_milli,
                m.restart.reset_period_ms
            ),
            (2_000, 60_000, 3_000, 300_000)
        );
        let h = m.health.unwrap();
        assert_eq!(
            h.http,
            Some(HttpProbe {
                port: 8080,
                path: "/healthz".into()
            })
        );
        assert_eq!((h.ready, h.cmd.len(), h.tcp), (Ready::Started, 0, None));
        let m = Manifest::parse(&format!(
            "{base}[upgrade]\nmigrate = [\"/bin/migrate\", \"--db\"]\n"
        ))
        .unwrap();
        assert_eq!(m.migrate, ["/bin/migrate", "--db"]);
        let e =
            Manifest::parse(&format!("{base}[upgrade]\nmigrate = [\"migrate\"]\n")).unwrap_err();
        assert!(e.to_string().contains("upgrade.migrate"), "{e}");
        let e = Manifest::parse(&format!("{base}[upgrade]\nhook = 1\n")).unwrap_err();
        assert!(e.to_string().contains("hook"), "{e}");
        let m = Manifest::parse(&format!("{base}[health]\ntcp = 53\n")).unwrap();
        assert_eq!(m.health.unwrap().tcp, Some(53));
        // Reported through the container API alone: no probe needed.
        let m = Manifest::parse(&format!(
            "{base}[health]\nready = \"api\"\nwatchdog = \"30s\"\n"
        ))
        .unwrap();
        let h = m.health.unwrap();
        assert_eq!(
            (h.ready, h.watchdog_ms, h.has_probe()),
            (Ready::Api, Some(30_000), false)
        );
        let m = Manifest::parse(&format!("{base}[health]\nwatchdog = \"5s\"\n")).unwrap();
        assert_eq!(m.health.unwrap().ready, Ready::Healthy);
        for (bad, want) in [
            (
                "[restart]\nmultiplier = 0.5\n",
                "restart.multiplier: is out of range 1..=10",
            ),
            (
                "[restart]\nmultiplier = \"x\"\n",
                "restart.multiplier: expected a number",
            ),
            (
                "[restart]\ndelay = \"10s\"\nmax_delay = \"5s\"\n",
                "restart.max_delay: 5000 ms is shorter",
            ),
            ("[health]\ntcp = 80\ncmd = [\"/c\"]\n", "give one probe"),
            ("[health]\ntcp = 0\n", "health.tcp: 0 is out of range"),
            (
                "[health]\nhttp = \"x/y\"\n",
                "health.http: \"x/y\": expected PORT",
            ),
            (
                "[health]\ntcp = 1\nready = \"later\"\n",
                "health.ready: \"later\" is not one of",
            ),
            (
                "[health]\nwatchdog = \"500ms\"\n",
                "health.watchdog: must be between 1s and 24h",
            ),
            ("[health]\nwatchdog = \"soon\"\n", "health.watchdog:"),
            ("[health]\nretries = 2\n", "or ready = \"api\" or watchdog"),
            (
                "[health]\ntcp = 1\ntimeout = \"0s\"\n",
                "health.timeout: must be greater than 0",
            ),
        ] {
            let e = Manifest::parse(&format!("{base}{bad}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{bad:?}: {e}");
        }
    }
}
