//! The device configuration, `/etc/berth/berth.toml`: where things live, which repository
//! to use, and the device policy that caps what packages may ask for.
//!
//! Every key has a default, so an empty file (or none) is a valid configuration. Unknown keys
//! are errors: a typo in a policy must not silently weaken it.

use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::manifest::{parse_duration_ms, parse_percent, parse_size};
pub use crate::policy::{MemoryBudget, Policy};
use crate::tree::{self, line_of, Spanned, Table, TreeError};

pub const DEFAULT_CONFIG_PATH: &str = "/etc/berth/berth.toml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: line {line}: {message}")]
    Parse {
        path: String,
        line: usize,
        message: String,
    },
    #[error("{path}: {key}: {message}")]
    Value {
        path: String,
        key: &'static str,
        message: String,
    },
}

/// The configuration after validation, with every path resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Base URL of the single repository (`http://…` or `file://…`); None until configured.
    pub repository: Option<String>,
    /// `mirrors`: more base URLs serving the same repository, tried in order when the one
    /// before fails (docs/repository.md, "Mirrors"); every copy is checked the same way.
    pub mirrors: Vec<String>,
    /// `berth status` warns when the cached index was fetched longer ago than this (seconds;
    /// `index_max_age = "7d"`). None: no warning.
    pub index_max_age_s: Option<u64>,
    /// `repository_ca_file`: the only CAs an https:// repository's or mirror's certificate may
    /// end in; None: the system's trust store.
    pub repository_ca_file: Option<PathBuf>,
    pub paths: Paths,
    /// Seconds a container gets between the halt signal and SIGKILL.
    pub stop_timeout_s: u32,
    /// Size of each container's in-memory log ring, bytes.
    pub log_ring_bytes: usize,
    pub tmp_size: u64,
    pub run_size: u64,
    /// `containers.data_size`: each container's /data is an ext4 image of this many bytes
    /// (`Paths::data_image`) instead of a plain directory. None: no cap.
    pub data_size: Option<u64>,
    /// Name of the cgroup under which every container lives (below each hierarchy's root).
    pub cgroup_parent: String,
    /// Seconds `berth start` waits for a container to reach RUNNING.
    pub start_timeout_s: u32,
    /// `containers.start_settle`: how long an operator's `berth start` (or `restart`) waits,
    /// once the container runs, for a payload that ends at once, to report that end and its
    /// last output as the start's error (milliseconds; 0: not at all).
    pub start_settle_ms: u64,
    pub policy: Policy,
    pub guard: Guard,
    /// `[security]`: what packages may be granted (docs/security.md).
    pub security: crate::security::SecurityPolicy,
    /// `[network]`: the device's network policy (see `net`).
    pub network: crate::net::NetConfig,
    pub governor: Governor,
    /// `[watchdog]`: the hardware watchdog the daemon keeps alive (off without a device).
    pub watchdog: Watchdog,
    /// `[boot]`: the boot counter and safe mode.
    pub boot: Boot,
    /// `[upgrade]`: how long an upgraded container has to prove itself.
    pub upgrade: Upgrade,
    /// `[reports]`: the caps on crash archives (docs/reports.md).
    pub reports: crate::report::Caps,
    /// `[api]`: what the container API grants and how fast it answers each container.
    pub api: crate::container_api::ApiPolicy,
    /// `[metrics]`: Prometheus metrics on a TCP address too (docs/metrics.md).
    pub metrics: Metrics,
    /// `[web]`: the device's web page (docs/web.md).
    pub web: Web,
    /// `[fleet]`: the hawkBit DDI client (docs/fleet.md); None: no fleet server. Only builds
    /// with the fleet client have it (the others refuse the section).
    #[cfg(feature = "fleet")]
    pub fleet: Option<Fleet>,
    /// `[slab]`: the slab reserve the daemon has the kernel module keep (docs/resources.md,
    /// "Slab reserve"); None: none. Only builds with the `slab` feature read it.
    #[cfg(feature = "slab")]
    pub slab: Option<crate::slab::SlabPolicy>,
}

/// `[fleet]`: the device polls a hawkBit DDI server (Eclipse hawkBit, gooseBit) for
/// deployments of signed berth bundles (docs/fleet.md).
#[cfg(feature = "fleet")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fleet {
    /// `http://host:port` or `https://host:port` (no trailing slash).
    pub server: String,
    /// How an https:// server is reached and checked; None for http://.
    pub tls: Option<FleetTls>,
    /// The tenant in every DDI path; default `DEFAULT`.
    pub tenant: String,
    /// None: derived from the machine id when the daemon starts (`ddi::controller_id`).
    pub controller_id: Option<String>,
    /// The target's security token (`Authorization: TargetToken …`), read from this file.
    pub token_file: Option<PathBuf>,
    /// Or the tenant's gateway token (`Authorization: GatewayToken …`).
    pub gateway_token_file: Option<PathBuf>,
    /// Reported as `hw_boardname` and `hw_revision` (what servers match bundles against).
    pub board: String,
    pub revision: String,
    /// Milliseconds between polls until the server sets its own (`config.polling.sleep`).
    pub poll_ms: u64,
    /// The longest wait between polls while the server cannot be reached.
    pub max_backoff_ms: u64,
}

/// `[fleet]`'s TLS options, for libcurl (berth carries no
/// TLS stack of its own): the server's certificate is verified against `ca_file` (or the
/// system's store) and its name, and `cert_file` + `key_file` identify the device to servers
/// that ask for a client certificate.
#[cfg(feature = "fleet")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetTls {
    /// PEM certificates the server's chain must end in; None: the system's trust store.
    pub ca_file: Option<PathBuf>,
    /// The device's certificate (PEM) and its key, for mutual TLS.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

/// `[web] listen = "192.168.1.1:8080"`: where the daemon serves its web page and the part of
/// the admin API the page uses, behind a bearer token read from `token_file` (made, 0600,
/// at the daemon's start when missing). None: no web page (the default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Web {
    pub listen: Option<String>,
    /// Default `<state>/web.token`.
    pub token_file: Option<PathBuf>,
}

/// `[metrics] listen = "127.0.0.1:9101"`: where the daemon also serves `GET /metrics` (the
/// admin socket always does). None: no TCP listener.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metrics {
    pub listen: Option<String>,
}

/// The hardware watchdog (`[watchdog]`): while every part of the daemon is healthy, one byte
/// is written to `device` every `interval`; a clean stop writes the magic close `V`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watchdog {
    /// The watchdog device (`/dev/watchdog`); None: no watchdog (the default).
    pub device: Option<PathBuf>,
    /// Milliseconds between keep-alives, and between the daemon's own heartbeats. Default 5 s.
    pub interval_ms: u64,
    /// Seconds to set the device's timeout to (WDIOC_SETTIMEOUT), if set; else the device
    /// keeps its own.
    pub timeout_s: Option<u32>,
}

/// `[upgrade]`: an upgraded container is confirmed once it has run, ready (its first health
/// check passed), for `settle_ms`; if that has not happened `deadline_ms` after its start,
/// the upgrade is rolled back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upgrade {
    pub deadline_ms: u64,
    pub settle_ms: u64,
    /// Bytes an install or upgrade leaves free on the store's file system for berth's own
    /// state (`reserve`, default 4M): one that would not is refused before it fetches.
    pub reserve: u64,
}

/// The boot counter (`[boot]`): a start is unconfirmed until the daemon has stayed up and
/// healthy for `confirm_after_ms`; `max_failed` unconfirmed starts in a row and the next one
/// is in safe mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boot {
    pub confirm_after_ms: u64,
    pub max_failed: u32,
}

/// The memory guard (`[guard]`): below `threshold` bytes of MemAvailable, container
/// processes are killed (lowest priority first, then the largest) until it is above again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guard {
    /// Bytes of MemAvailable below which the guard kills. Default 30 MiB.
    pub threshold: u64,
    /// Polling interval, ms, when the kernel has no PSI (and near the threshold). Default 500.
    pub interval_ms: u64,
}

/// Where berth keeps things. State is on flash (written atomically); run is tmpfs.
#[derive(Debug, Clone, PartialEq)]
pub struct Paths {
    pub state: PathBuf,
    pub run: PathBuf,
    pub keys: PathBuf,
    pub lxcpath: PathBuf,
}

impl Paths {
    pub fn store(&self) -> PathBuf {
        self.state.join("store")
    }
    /// Partial downloads; emptied at every daemon start.
    pub fn store_tmp(&self) -> PathBuf {
        self.state.join("store/.tmp")
    }
    pub fn image(&self, sha256: &str) -> PathBuf {
        self.store().join(format!("{sha256}.sqfs"))
    }
    pub fn data(&self, container: &str) -> PathBuf {
        self.state.join("data").join(container)
    }
    /// `data(container)` bound with nosuid,nodev while the container runs; LXC binds this
    /// one into the container, and the bind inherits the flags.
    pub fn data_mount(&self, container: &str) -> PathBuf {
        self.run.join("data").join(container)
    }
    /// With `containers.data_size`: the sparse ext4 image holding the container's /data,
    /// beside where its plain directory would be (names have no '.', so no clash). Mounted
    /// through a loop device on `data_mount(container)` while the container runs.
    pub fn data_image(&self, container: &str) -> PathBuf {
        self.state.join("data").join(format!("{container}.img"))
    }
    /// Marker: the container was last started (not stopped) by the operator, so the daemon
    /// starts it again after a reboot.
    pub fn autostart(&self, container: &str) -> PathBuf {
        self.state.join("autostart").join(container)
    }
    pub fn state_file(&self) -> PathBuf {
        self.state.join("state.json")
    }
    pub fn repository_file(&self) -> PathBuf {
        self.state.join("repository.json")
    }
    pub fn admin_socket(&self) -> PathBuf {
        self.run.join("admin.sock")
    }
    pub fn daemon_pid(&self) -> PathBuf {
        self.run.join("daemon.pid")
    }
    /// Where each store image is mounted, once, shared by every container that uses it.
    pub fn image_mount(&self, sha256: &str) -> PathBuf {
        self.run.join("mnt").join(sha256)
    }
    /// A container's merged root (overlay of its package over its dependencies).
    pub fn rootfs(&self, container: &str) -> PathBuf {
        self.run.join("rootfs").join(container)
    }
    /// The directory of a container's API socket (`api.sock`), bound at `/run/berth` in it.
    pub fn api_dir(&self, container: &str) -> PathBuf {
        self.run.join("api").join(container)
    }
    pub fn shim_socket(&self, container: &str) -> PathBuf {
        self.run.join("shim").join(format!("{container}.sock"))
    }
    /// The log ring of a container that has stopped, saved by its shim (tmpfs).
    pub fn saved_log(&self, container: &str) -> PathBuf {
        self.run.join("logs").join(format!("{container}.log"))
    }
    /// How a stopped container ended, written by its shim.
    pub fn exit_file(&self, container: &str) -> PathBuf {
        self.run.join("logs").join(format!("{container}.exit"))
    }
    pub fn lxc_dir(&self, container: &str) -> PathBuf {
        self.lxcpath.join(container)
    }
    /// A running container's bind anchor (tmpfs): a shared mount of its own, whose `opt/`
    /// and `stage/` LXC binds into the container (`bind::lxc_lines`).
    pub fn bind_anchor(&self, container: &str) -> PathBuf {
        self.run.join("binds").join(container)
    }
    /// The operator's persistent bindings of a container (`bind::format_persisted`, atomic).
    pub fn binds_file(&self, container: &str) -> PathBuf {
        self.state.join("binds").join(container)
    }
    /// The memory guard's last kill of a container (JSON, tmpfs).
    pub fn guard_file(&self, container: &str) -> PathBuf {
        self.run.join("logs").join(format!("{container}.guard"))
    }
    /// An empty read-only file and directory that the daemon makes at start: bound over the
    /// kernel interfaces a container must not read (`plan::MASKED_PROC_FILES`, `MASKED_DIRS`).
    pub fn mask_file(&self) -> PathBuf {
        self.run.join("empty")
    }
    pub fn mask_dir(&self) -> PathBuf {
        self.run.join("empty.d")
    }
    /// Crash archives (flash): `reports/<container>/<id>.tar.gz` and `<id>.json`.
    pub fn reports(&self) -> PathBuf {
        self.state.join("reports")
    }
    /// Core files the core handler left for the daemon's next archive (tmpfs).
    pub fn cores(&self) -> PathBuf {
        self.run.join("cores")
    }
    /// The operator's `berth limit` overrides of a container (JSON, written atomically).
    pub fn limits_file(&self, container: &str) -> PathBuf {
        self.state.join("limits").join(format!("{container}.json"))
    }
    /// The supervisor's record of a container (retry count, `failed`; JSON, atomic).
    pub fn supervise_file(&self, container: &str) -> PathBuf {
        self.state
            .join("supervise")
            .join(format!("{container}.json"))
    }
    /// A container's cron jobs and their last runs (`berth_core::schedule::Table`, atomic).
    pub fn schedules_file(&self, container: &str) -> PathBuf {
        self.state
            .join("schedules")
            .join(format!("{container}.json"))
    }
    /// The unconfirmed daemon starts (`berth_core::boot::Record`, written atomically).
    pub fn boot_file(&self) -> PathBuf {
        self.state.join("boot.json")
    }
    /// Present while the device is in safe mode (`berth_core::boot::Marker`, atomic).
    pub fn safe_mode_file(&self) -> PathBuf {
        self.state.join("safe-mode.json")
    }
}

/// berth.toml as written, read from the document tree (`crate::tree`): unknown keys refused.
#[derive(Default)]
struct RawConfig {
    repository: Option<String>,
    repository_ca_file: Option<String>,
    mirrors: Vec<String>,
    index_max_age: Option<String>,
    paths: RawPaths,
    containers: RawContainers,
    policy: RawPolicy,
    guard: RawGuard,
    reports: RawReports,
    security: crate::security::RawSecurity,
    network: Option<crate::net::RawNet>,
    /// Strings only, read by hand (`governor()`).
    governor: Option<std::collections::BTreeMap<String, Spanned<String>>>,
    watchdog: RawWatchdog,
    boot: RawBoot,
    upgrade: RawUpgrade,
    api: RawApi,
    metrics_listen: Option<String>,
    web: (Option<String>, Option<String>),
    #[cfg(feature = "fleet")]
    fleet: Option<std::collections::BTreeMap<String, Spanned<String>>>,
    #[cfg(feature = "slab")]
    slab: Option<RawSlab>,
}

/// `[slab]` as written: `reserve` is objects (an integer) or a size (a string).
#[cfg(feature = "slab")]
#[derive(Default)]
struct RawSlab {
    caches: Option<Vec<String>>,
    reserve: Option<String>,
    module: Option<String>,
    max_reserve: Option<i64>,
}

#[derive(Default)]
struct RawApi {
    grant: Option<String>,
    rate: Option<i64>,
    burst: Option<i64>,
    max_update_lock: Option<String>,
    packages: Option<std::collections::BTreeMap<String, Spanned<String>>>,
}

#[derive(Default)]
struct RawUpgrade {
    deadline: Option<String>,
    settle: Option<String>,
    reserve: Option<String>,
}

#[derive(Default)]
struct RawWatchdog {
    device: Option<String>,
    interval: Option<String>,
    timeout: Option<String>,
}

#[derive(Default)]
struct RawBoot {
    confirm_after: Option<String>,
    max_failed: Option<i64>,
}

/// `Some(value)` of a string key.
fn text(t: &mut Table, key: &str) -> Result<Option<String>, TreeError> {
    Ok(t.str(key)?.map(Spanned::into_inner))
}

/// Reads the section `key` with `f`, which takes its keys; what is left is refused.
fn section<T: Default>(
    t: &mut Table,
    key: &str,
    f: impl FnOnce(&mut Table) -> Result<T, TreeError>,
) -> Result<T, TreeError> {
    let Some(mut sub) = t.table(key)? else {
        return Ok(T::default());
    };
    let v = f(&mut sub)?;
    sub.finish()?;
    Ok(v)
}

/// A section of string values only, kept as a map for its own validation.
fn strings(
    t: &mut Table,
    key: &str,
) -> Result<Option<std::collections::BTreeMap<String, Spanned<String>>>, TreeError> {
    Ok(match t.table(key)? {
        None => None,
        Some(sub) => Some(sub.strings()?.into_iter().collect()),
    })
}

impl RawConfig {
    fn read(mut t: Table) -> Result<RawConfig, TreeError> {
        let raw = RawConfig {
            repository: text(&mut t, "repository")?,
            repository_ca_file: text(&mut t, "repository_ca_file")?,
            mirrors: t
                .strs("mirrors")?
                .map(|v| v.into_inner().into_iter().map(|s| s.into_inner()).collect())
                .unwrap_or_default(),
            index_max_age: text(&mut t, "index_max_age")?,
            paths: section(&mut t, "paths", |t| {
                let mut path = |k| Ok::<_, TreeError>(text(t, k)?.map(PathBuf::from));
                Ok(RawPaths {
                    state: path("state")?,
                    run: path("run")?,
                    keys: path("keys")?,
                    lxcpath: path("lxcpath")?,
                })
            })?,
            containers: section(&mut t, "containers", |t| {
                Ok(RawContainers {
                    stop_timeout: text(t, "stop_timeout")?,
                    start_timeout: text(t, "start_timeout")?,
                    start_settle: text(t, "start_settle")?,
                    log_ring: text(t, "log_ring")?,
                    tmp_size: text(t, "tmp_size")?,
                    run_size: text(t, "run_size")?,
                    data_size: text(t, "data_size")?,
                    cgroup_parent: text(t, "cgroup_parent")?,
                })
            })?,
            policy: section(&mut t, "policy", |t| {
                let mut int = |k| Ok::<_, TreeError>(t.int(k)?.map(Spanned::into_inner));
                let pids_budget = int("pids_budget")?;
                let container_pids_max = int("container_pids_max")?;
                Ok(RawPolicy {
                    cpu_max: text(t, "cpu_max")?,
                    memory_budget: text(t, "memory_budget")?,
                    pids_budget,
                    container_cpu_max: text(t, "container_cpu_max")?,
                    container_memory_max: text(t, "container_memory_max")?,
                    container_pids_max,
                    #[cfg(feature = "shape")]
                    bandwidth: text(t, "bandwidth")?,
                    #[cfg(feature = "shape")]
                    data_reset_day: t.int("data_reset_day")?.map(Spanned::into_inner),
                    #[cfg(feature = "shape")]
                    metered: t.bool("metered")?.map(Spanned::into_inner),
                    #[cfg(feature = "shape")]
                    metered_data_cap: text(t, "metered_data_cap")?,
                    #[cfg(feature = "shape")]
                    over_cap: text(t, "over_cap")?,
                })
            })?,
            guard: section(&mut t, "guard", |t| {
                Ok(RawGuard {
                    threshold: text(t, "threshold")?,
                    interval: text(t, "interval")?,
                })
            })?,
            reports: section(&mut t, "reports", |t| {
                Ok(RawReports {
                    max_per_container: t.int("max_per_container")?.map(Spanned::into_inner),
                    max_total_size: text(t, "max_total_size")?,
                    max_core_size: text(t, "max_core_size")?,
                    cores: t.bool("cores")?.map(Spanned::into_inner),
                })
            })?,
            security: section(&mut t, "security", crate::security::RawSecurity::read)?,
            network: strings(&mut t, "network")?,
            governor: strings(&mut t, "governor")?,
            watchdog: section(&mut t, "watchdog", |t| {
                Ok(RawWatchdog {
                    device: text(t, "device")?,
                    interval: text(t, "interval")?,
                    timeout: text(t, "timeout")?,
                })
            })?,
            boot: section(&mut t, "boot", |t| {
                Ok(RawBoot {
                    confirm_after: text(t, "confirm_after")?,
                    max_failed: t.int("max_failed")?.map(Spanned::into_inner),
                })
            })?,
            upgrade: section(&mut t, "upgrade", |t| {
                Ok(RawUpgrade {
                    deadline: text(t, "deadline")?,
                    settle: text(t, "settle")?,
                    reserve: text(t, "reserve")?,
                })
            })?,
            metrics_listen: section(&mut t, "metrics", |t| text(t, "listen"))?,
            web: section(&mut t, "web", |t| {
                Ok((text(t, "listen")?, text(t, "token_file")?))
            })?,
            #[cfg(feature = "fleet")]
            fleet: strings(&mut t, "fleet")?,
            #[cfg(feature = "slab")]
            slab: match t.table("slab")? {
                None => None,
                Some(mut sub) => {
                    let reserve = match sub.take("reserve") {
                        None => None,
                        Some(v) => match (v.span().start, v.into_inner()) {
                            (_, tree::Val::Int(n)) => Some(n.to_string()),
                            (_, tree::Val::Str(s)) => Some(s),
                            (offset, other) => {
                                return Err(TreeError {
                                    offset,
                                    message: format!(
                                        "slab.reserve: expected objects (an integer) or a size (a string), found {}",
                                        other.kind()
                                    ),
                                })
                            }
                        },
                    };
                    let raw = RawSlab {
                        caches: sub.strs("caches")?.map(|v| {
                            v.into_inner()
                                .into_iter()
                                .map(Spanned::into_inner)
                                .collect()
                        }),
                        reserve,
                        module: text(&mut sub, "module")?,
                        max_reserve: sub.int("max_reserve")?.map(Spanned::into_inner),
                    };
                    sub.finish()?;
                    Some(raw)
                }
            },
            api: section(&mut t, "api", |t| {
                Ok(RawApi {
                    grant: text(t, "grant")?,
                    rate: t.int("rate")?.map(Spanned::into_inner),
                    burst: t.int("burst")?.map(Spanned::into_inner),
                    max_update_lock: text(t, "max_update_lock")?,
                    packages: strings(t, "packages")?,
                })
            })?,
        };
        // Without the fleet client, `[fleet]` is an unknown key like any other.
        t.finish()?;
        Ok(raw)
    }
}

#[derive(Default)]
struct RawGuard {
    threshold: Option<String>,
    interval: Option<String>,
}

#[derive(Default)]
struct RawReports {
    max_per_container: Option<i64>,
    max_total_size: Option<String>,
    max_core_size: Option<String>,
    cores: Option<bool>,
}

#[derive(Default)]
struct RawPolicy {
    cpu_max: Option<String>,
    memory_budget: Option<String>,
    pids_budget: Option<i64>,
    container_cpu_max: Option<String>,
    container_memory_max: Option<String>,
    container_pids_max: Option<i64>,
    #[cfg(feature = "shape")]
    bandwidth: Option<String>,
    #[cfg(feature = "shape")]
    data_reset_day: Option<i64>,
    #[cfg(feature = "shape")]
    metered: Option<bool>,
    #[cfg(feature = "shape")]
    metered_data_cap: Option<String>,
    #[cfg(feature = "shape")]
    over_cap: Option<String>,
}

#[derive(Default)]
struct RawPaths {
    state: Option<PathBuf>,
    run: Option<PathBuf>,
    keys: Option<PathBuf>,
    lxcpath: Option<PathBuf>,
}

#[derive(Default)]
struct RawContainers {
    stop_timeout: Option<String>,
    start_timeout: Option<String>,
    start_settle: Option<String>,
    log_ring: Option<String>,
    tmp_size: Option<String>,
    run_size: Option<String>,
    data_size: Option<String>,
    cgroup_parent: Option<String>,
}

impl Config {
    /// The configuration from the result of reading the file at `path` (the read is the
    /// caller's: this crate does no I/O); a missing file gives the defaults.
    pub fn from_file(read: std::io::Result<String>, path: &Path) -> Result<Config, ConfigError> {
        match read {
            Ok(text) => Config::parse(&text, &path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Config::parse("", &path.display().to_string())
            }
            Err(e) => Err(ConfigError::Parse {
                path: path.display().to_string(),
                line: 0,
                message: e.to_string(),
            }),
        }
    }

    pub fn parse(text: &str, path: &str) -> Result<Config, ConfigError> {
        let parse_err = |line, message| ConfigError::Parse {
            path: path.to_string(),
            line,
            message,
        };
        let doc = tree::parse(text).map_err(|e| {
            let line = e.span().map_or(0, |s| line_of(text, s.start));
            parse_err(line, e.message().trim().replace('\n', "; "))
        })?;
        let raw =
            RawConfig::read(doc).map_err(|e| parse_err(line_of(text, e.offset), e.message))?;
        let value_err = |key: &'static str, message: String| ConfigError::Value {
            path: path.to_string(),
            key,
            message,
        };
        let index_max_age_s = sources(
            &raw.repository,
            &raw.mirrors,
            &raw.index_max_age,
            &value_err,
        )?;
        let repository_ca_file = repository_ca_file(&raw, &value_err)?;
        let absolute = |key: &'static str, p: Option<PathBuf>, default: PathBuf| {
            let p = p.unwrap_or(default);
            if p.is_absolute() {
                Ok(p)
            } else {
                Err(value_err(
                    key,
                    format!("{} is not an absolute path", p.display()),
                ))
            }
        };
        let state = absolute("paths.state", raw.paths.state, "/var/lib/berth".into())?;
        let run = absolute("paths.run", raw.paths.run, "/run/berth".into())?;
        let keys = absolute("paths.keys", raw.paths.keys, "/etc/berth/keys".into())?;
        let lxcpath = absolute("paths.lxcpath", raw.paths.lxcpath, run.join("lxc"))?;
        let c = raw.containers;
        let secs = |key: &'static str, v: Option<String>, default: u32| match v {
            None => Ok(default),
            Some(v) => {
                let ms = parse_duration_ms(&v).map_err(|m| value_err(key, m.into()))?;
                if ms > 3_600_000 {
                    return Err(value_err(key, format!("{v}: at most 1 hour")));
                }
                Ok((ms / 1000).max(1) as u32)
            }
        };
        let size = |key: &'static str, v: Option<String>, default: u64| match v {
            None => Ok(default),
            Some(v) => parse_size(&v).map_err(|m| value_err(key, m.into())),
        };
        let log_ring = size("containers.log_ring", c.log_ring, 64 * 1024)?;
        if !(4096..=16 << 20).contains(&log_ring) {
            return Err(value_err(
                "containers.log_ring",
                "must be between 4K and 16M".into(),
            ));
        }
        let cgroup_parent = c.cgroup_parent.unwrap_or_else(|| "berth".into());
        if cgroup_parent.is_empty()
            || !cgroup_parent
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_' || ch == '.')
        {
            return Err(value_err(
                "containers.cgroup_parent",
                format!("{cgroup_parent:?}: use letters, digits, '-', '_' and '.'"),
            ));
        }
        #[cfg(feature = "shape")]
        let line = line_parts(&raw.policy, &value_err)?;
        let policy = policy(raw.policy, &value_err)?;
        let guard = guard(raw.guard, &value_err)?;
        let watchdog = watchdog(raw.watchdog, &value_err)?;
        let boot = boot(raw.boot, &value_err)?;
        let upgrade = upgrade(raw.upgrade, &value_err)?;
        let reports = reports(raw.reports, &value_err)?;
        let api = api(raw.api, &value_err)?;
        let (metrics, web) = listeners(raw.metrics_listen, raw.web, &value_err)?;
        #[cfg(feature = "fleet")]
        let fleet = match raw.fleet {
            None => None,
            Some(f) => Some(fleet(f, &value_err)?),
        };
        #[cfg(feature = "slab")]
        let slab = raw.slab.map(|s| slab(s, &value_err)).transpose()?;
        Ok(Config {
            #[cfg(feature = "slab")]
            slab,
            api,
            metrics,
            web,
            #[cfg(feature = "fleet")]
            fleet,
            watchdog,
            boot,
            upgrade,
            reports,
            repository: raw.repository.map(|u| u.trim_end_matches('/').to_string()),
            repository_ca_file,
            mirrors: raw
                .mirrors
                .iter()
                .map(|u| u.trim_end_matches('/').to_string())
                .collect(),
            index_max_age_s,
            paths: Paths {
                state,
                run,
                keys,
                lxcpath,
            },
            stop_timeout_s: secs("containers.stop_timeout", c.stop_timeout, 10)?,
            start_timeout_s: secs("containers.start_timeout", c.start_timeout, 30)?,
            start_settle_ms: match c.start_settle {
                None => 300,
                Some(t) => crate::manifest::parse_duration_ms(&t)
                    .and_then(|ms| match ms {
                        0..=10_000 => Ok(ms),
                        _ => Err(Error::invalid(format!("{t}: at most 10s"))),
                    })
                    .map_err(|m| value_err("containers.start_settle", m.into()))?,
            },
            log_ring_bytes: log_ring as usize,
            tmp_size: size("containers.tmp_size", c.tmp_size, 16 << 20)?,
            run_size: size("containers.run_size", c.run_size, 4 << 20)?,
            data_size: data_size(c.data_size, &value_err)?,
            cgroup_parent,
            governor: governor(raw.governor.unwrap_or_default(), &policy, &value_err)?,
            policy,
            guard,
            security: raw
                .security
                .validate()
                .map_err(|(key, m)| value_err(key, m))?,
            network: {
                #[allow(unused_mut)]
                let mut n = crate::net::NetConfig::parse(raw.network)
                    .map_err(|(key, m)| value_err(key, m))?;
                #[cfg(feature = "shape")]
                line_policy(&mut n, line, &value_err)?;
                n
            },
        })
    }
}

/// The policy's part of the line: its data caps ([`data_policy`]) and `[policy] bandwidth`,
/// what all containers together send on the uplink, a rate or a share of `[network]
/// uplink_rate` (which it needs); half the line when unset.
#[cfg(feature = "shape")]
fn line_policy(
    n: &mut crate::net::NetConfig,
    (bandwidth, data): (Option<String>, crate::datacap::DataPolicy),
    value_err: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    n.data = data;
    let Some(v) = bandwidth else { return Ok(()) };
    let key = "policy.bandwidth";
    let Some(line) = n.line.as_mut() else {
        return Err(value_err(
            key,
            format!("{v}: needs the line it shares: [network] uplink and uplink_rate"),
        ));
    };
    line.asked = if v.ends_with('%') {
        match parse_percent(&v) {
            Ok(p) if (1..=100).contains(&p) => line.rate / 100 * p as u64,
            _ => return Err(value_err(key, format!("{v}: a share between 1% and 100%"))),
        }
    } else {
        crate::shape::parse_rate(&v).map_err(|m| value_err(key, m))?
    };
    let rate = crate::shape::fmt_rate(line.rate);
    if line.asked > line.rate {
        return Err(value_err(key, format!("{v}: more than the line ({rate})")));
    }
    if line.asked < crate::shape::MIN_RATE {
        return Err(value_err(
            key,
            format!("{v}: less than 64kbit of the line ({rate})"),
        ));
    }
    Ok(())
}

/// The policy's keys for the line: `bandwidth` as written, and the data caps'.
#[cfg(feature = "shape")]
fn line_parts(
    r: &RawPolicy,
    value_err: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<(Option<String>, crate::datacap::DataPolicy), ConfigError> {
    Ok((r.bandwidth.clone(), data_policy(r, value_err)?))
}

/// `[policy] data_reset_day`, `metered`, `metered_data_cap` and `over_cap` (data caps).
#[cfg(feature = "shape")]
fn data_policy(
    r: &RawPolicy,
    value_err: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<crate::datacap::DataPolicy, ConfigError> {
    use crate::datacap;
    let reset_day = match r.data_reset_day {
        None => 1,
        Some(d @ 1..=28) => d as u8,
        Some(d) => {
            return Err(value_err(
                "policy.data_reset_day",
                format!("{d}: a day between 1 and 28 (every month has it)"),
            ))
        }
    };
    Ok(datacap::DataPolicy {
        reset_day,
        metered: r.metered.unwrap_or(false),
        metered_cap: r
            .metered_data_cap
            .as_deref()
            .map(datacap::parse_cap)
            .transpose()
            .map_err(|m| value_err("policy.metered_data_cap", m))?,
        over: r
            .over_cap
            .as_deref()
            .map(datacap::parse_over)
            .transpose()
            .map_err(|m| value_err("policy.over_cap", m))?
            .unwrap_or_default(),
    })
}

/// `repository_ca_file`: an absolute path, with an https:// source to apply to.
fn repository_ca_file(
    raw: &RawConfig,
    value_err: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<Option<PathBuf>, ConfigError> {
    let Some(f) = &raw.repository_ca_file else {
        return Ok(None);
    };
    if !Path::new(f).is_absolute() {
        return Err(value_err(
            "repository_ca_file",
            format!("{f:?}: must be an absolute path"),
        ));
    }
    let https = raw.repository.iter().chain(&raw.mirrors);
    if !https.into_iter().any(|u| u.starts_with("https://")) {
        return Err(value_err(
            "repository_ca_file",
            "applies to an https:// repository or mirror, and none is set".into(),
        ));
    }
    Ok(Some(PathBuf::from(f)))
}

/// The repository, its mirrors (http://, https:// or file://, mirrors only of a repository)
/// and how long its index is trusted.
fn sources(
    repository: &Option<String>,
    mirrors: &[String],
    index_max_age: &Option<String>,
    value_err: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<Option<u64>, ConfigError> {
    let fetched = |url: &str| {
        ["http://", "https://", "file://"]
            .iter()
            .any(|s| url.starts_with(s))
    };
    if let Some(url) = repository.as_deref().filter(|u| !fetched(u)) {
        return Err(value_err(
            "repository",
            format!("{url:?}: berth fetches http://, https:// and file:// URLs"),
        ));
    }
    if let Some(url) = mirrors.iter().find(|u| !fetched(u)) {
        return Err(value_err(
            "mirrors",
            format!("{url:?}: berth fetches http://, https:// and file:// URLs"),
        ));
    }
    if !mirrors.is_empty() && repository.is_none() {
        return Err(value_err(
            "mirrors",
            "mirrors of no repository: set repository first".into(),
        ));
    }
    Ok(match index_max_age {
        None => None,
        Some(v) => match crate::manifest::parse_duration_s(v) {
            Ok(0) => {
                return Err(value_err(
                    "index_max_age",
                    format!("{v}: must be more than 0"),
                ))
            }
            Ok(s) => Some(s),
            Err(m) => return Err(value_err("index_max_age", m.into())),
        },
    })
}

/// `[guard]`: the memory guard's threshold and interval.
fn guard(
    r: RawGuard,
    value_err: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<Guard, ConfigError> {
    Ok(Guard {
        threshold: match r.threshold {
            None => 30 << 20,
            Some(v) => {
                let b = parse_size(&v).map_err(|m| value_err("guard.threshold", m.into()))?;
                // "30" for "30M" would switch the guard off without a word.
                if b < 1 << 20 {
                    return Err(value_err("guard.threshold", format!("{v}: at least 1M")));
                }
                b
            }
        },
        interval_ms: match r.interval {
            None => 500,
            Some(v) => {
                let ms =
                    parse_duration_ms(&v).map_err(|m| value_err("guard.interval", m.into()))?;
                if !(50..=60_000).contains(&ms) {
                    return Err(value_err(
                        "guard.interval",
                        format!("{v}: must be between 50ms and 60s"),
                    ));
                }
                ms
            }
        },
    })
}

/// `[metrics] listen` and `[web]`: the addresses berth serves on besides its socket.
fn listeners(
    metrics_listen: Option<String>,
    web: (Option<String>, Option<String>),
    value_err: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<(Metrics, Web), ConfigError> {
    let listen = |key: &'static str, v: Option<String>, eg: &str| match v {
        None => Ok(None),
        Some(a) => match a.parse::<std::net::SocketAddr>() {
            Ok(_) => Ok(Some(a)),
            Err(_) => Err(value_err(
                key,
                format!("{a:?}: expected ADDRESS:PORT, e.g. \"{eg}\""),
            )),
        },
    };
    let metrics = Metrics {
        listen: listen("metrics.listen", metrics_listen, "127.0.0.1:9101")?,
    };
    let web = Web {
        listen: listen("web.listen", web.0, "192.168.1.1:8080")?,
        token_file: match web.1 {
            Some(f) if !f.starts_with('/') => {
                return Err(value_err(
                    "web.token_file",
                    format!("{f:?}: must be an absolute path"),
                ))
            }
            f => f.map(PathBuf::from),
        },
    };
    Ok((metrics, web))
}

/// `[api]`: the permissions granted to every package that asks (default: what only concerns
/// the caller), more per package in `[api.packages]`, and the per-container pace.
fn api(
    r: RawApi,
    value_err: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<crate::container_api::ApiPolicy, ConfigError> {
    use crate::container_api::{permission_list, ApiPolicy};
    let d = ApiPolicy::default();
    let grant = match &r.grant {
        None => d.grant,
        Some(v) => permission_list(v).map_err(|m| value_err("api.grant", m.into()))?,
    };
    let mut packages = std::collections::BTreeMap::new();
    for (name, v) in r.packages.unwrap_or_default() {
        crate::name::Name::parse(&name)
            .map_err(|e| value_err("api.packages", format!("{name:?}: {e}")))?;
        let list = permission_list(v.get_ref())
            .map_err(|m| value_err("api.packages", format!("{name}: {m}")))?;
        packages.insert(name, list);
    }
    let count = |key: &'static str, v: Option<i64>, default: u32| match v {
        None => Ok(default),
        Some(n) if (1..=10_000).contains(&n) => Ok(n as u32),
        Some(n) => Err(value_err(key, format!("{n}: must be between 1 and 10000"))),
    };
    let rate = count("api.rate", r.rate, d.rate)?;
    let burst = count("api.burst", r.burst, d.burst)?;
    let max_update_lock_s = match &r.max_update_lock {
        None => d.max_update_lock_s,
        Some(v) => {
            let s = crate::manifest::parse_duration_s(v)
                .map_err(|m| value_err("api.max_update_lock", m.into()))?;
            if !(1..=7 * 86_400).contains(&s) {
                return Err(value_err(
                    "api.max_update_lock",
                    format!("{v}: must be between 1s and 7d"),
                ));
            }
            s
        }
    };
    Ok(ApiPolicy {
        grant,
        packages,
        rate,
        burst,
        max_update_lock_s,
    })
}

/// `containers.data_size`: at least 1M (an ext4 file system with room for a package's
/// files; "64" for "64M" would otherwise make one no package could use), at most 1T.
fn data_size(
    v: Option<String>,
    value_err: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<Option<u64>, ConfigError> {
    let Some(v) = v else {
        return Ok(None);
    };
    let b = parse_size(&v).map_err(|m| value_err("containers.data_size", m.into()))?;
    if !(1 << 20..=1 << 40).contains(&b) {
        return Err(value_err(
            "containers.data_size",
            format!("{v}: must be between 1M and 1T"),
        ));
    }
    Ok(Some(b))
}

fn watchdog(
    r: RawWatchdog,
    value_err: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<Watchdog, ConfigError> {
    let device = match r.device {
        None => None,
        Some(d) => {
            let p = PathBuf::from(&d);
            if !p.is_absolute() || d.contains('\n') {
                return Err(value_err(
                    "watchdog.device",
                    format!("{d:?} is not an absolute path"),
                ));
            }
            Some(p)
        }
    };
    let interval_ms = match r.interval {
        None => 5000,
        Some(v) => {
            let ms = parse_duration_ms(&v).map_err(|m| value_err("watchdog.interval", m.into()))?;
            if !(100..=60_000).contains(&ms) {
                return Err(value_err(
                    "watchdog.interval",
                    format!("{v}: must be between 100ms and 60s"),
                ));
            }
            ms
        }
    };
    let timeout_s = match r.timeout {
        None => None,
        Some(v) => {
            let ms = parse_duration_ms(&v).map_err(|m| value_err("watchdog.timeout", m.into()))?;
            if !ms.is_multiple_of(1000) || !(1000..=3_600_000).contains(&ms) {
                return Err(value_err(
                    "watchdog.timeout",
                    format!("{v}: must be whole seconds between 1s and 60m"),
                ));
            }
            // A keep-alive must come well within the timeout, or the device resets a healthy
            // system between two of them.
            if interval_ms * 2 > ms {
                return Err(value_err(
                    "watchdog.timeout",
                    format!("{v}: must be at least twice watchdog.interval ({interval_ms}ms)"),
                ));
            }
            Some((ms / 1000) as u32)
        }
    };
    if timeout_s.is_some() && device.is_none() {
        return Err(value_err(
            "watchdog.timeout",
            "needs watchdog.device".into(),
        ));
    }
    Ok(Watchdog {
        device,
        interval_ms,
        timeout_s,
    })
}

/// `[slab]`, checked: caches the module can hold, each named once, reserves within
/// `max_reserve` (default 4096 objects, at most the module's own limit), an absolute module path.
#[cfg(feature = "slab")]
fn slab(
    raw: RawSlab,
    value_err: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<crate::slab::SlabPolicy, ConfigError> {
    use crate::slab::{cache_entry, Amount, RESERVE_LIMIT};
    let max_reserve = match raw.max_reserve {
        None => 4096,
        Some(n) if (1..=i64::from(RESERVE_LIMIT)).contains(&n) => n as u32,
        Some(n) => {
            return Err(value_err(
                "slab.max_reserve",
                format!("{n}: between 1 and {RESERVE_LIMIT} objects"),
            ))
        }
    };
    let reserve = match raw.reserve {
        None => Amount::Objects(512),
        Some(r) => Amount::parse(&r).map_err(|m| value_err("slab.reserve", m.into()))?,
    };
    let entries = raw.caches.unwrap_or_default();
    if entries.is_empty() {
        return Err(value_err(
            "slab.caches",
            "missing or empty: the caches to keep free objects in, e.g. [\"skbuff_head_cache\", \"kmalloc-256\"]".into(),
        ));
    }
    if entries.len() > crate::slab::MAX_CACHES {
        return Err(value_err(
            "slab.caches",
            format!(
                "{} caches: the module keeps at most {}",
                entries.len(),
                crate::slab::MAX_CACHES
            ),
        ));
    }
    let mut caches: Vec<(String, Amount)> = Vec::with_capacity(entries.len());
    for e in &entries {
        let (name, amount) =
            cache_entry(e, reserve).map_err(|m| value_err("slab.caches", m.into()))?;
        if caches.iter().any(|(n, _)| *n == name) {
            return Err(value_err("slab.caches", format!("{name:?} named twice")));
        }
        if let Amount::Objects(n) = amount {
            if n > max_reserve {
                return Err(value_err(
                    "slab.caches",
                    format!(
                        "{name}: a reserve of {n} objects is above max_reserve ({max_reserve})"
                    ),
                ));
            }
        }
        caches.push((name, amount));
    }
    let module = match raw.module {
        Some(m) if !m.starts_with('/') => {
            return Err(value_err(
                "slab.module",
                format!("{m:?}: must be an absolute path"),
            ))
        }
        m => m.map(PathBuf::from),
    };
    Ok(crate::slab::SlabPolicy {
        caches,
        module,
        max_reserve,
    })
}

/// `[fleet]`, checked: an http:// or https:// server (TLS options with https:// only), a tenant and controller id DDI paths can carry,
/// absolute token files, sane poll times.
#[cfg(feature = "fleet")]
fn fleet(
    mut raw: std::collections::BTreeMap<String, Spanned<String>>,
    value_err: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<Fleet, ConfigError> {
    let mut take = |k: &str| raw.remove(k).map(Spanned::into_inner);
    let server = take("server").ok_or_else(|| {
        value_err(
            "fleet.server",
            "missing: the DDI server's base URL, e.g. \"http://fleet.example.net:8080\"".into(),
        )
    })?;
    let https = server.starts_with("https://");
    let scheme = if https { 8 } else { 7 };
    if !(https || server.starts_with("http://"))
        || server.len() <= scheme
        || server.contains(char::is_whitespace)
    {
        return Err(value_err(
            "fleet.server",
            format!("{server:?}: expected http://HOST[:PORT] or https://HOST[:PORT]"),
        ));
    }
    let segment = |key: &'static str, v: String| {
        if v.is_empty()
            || v.len() > 64
            || !v
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
        {
            return Err(value_err(
                key,
                format!("{v:?}: 1 to 64 letters, digits, '-', '_', '.' or ':'"),
            ));
        }
        Ok(v)
    };
    let tenant = segment(
        "fleet.tenant",
        take("tenant").unwrap_or_else(|| "DEFAULT".into()),
    )?;
    let controller_id = take("controller_id")
        .map(|v| segment("fleet.controller_id", v))
        .transpose()?;
    let file = |key: &'static str, v: Option<String>| match v {
        Some(f) if !f.starts_with('/') => {
            Err(value_err(key, format!("{f:?}: must be an absolute path")))
        }
        f => Ok(f.map(PathBuf::from)),
    };
    let token_file = file("fleet.token_file", take("token_file"))?;
    let ca_file = file("fleet.ca_file", take("ca_file"))?;
    let cert_file = file("fleet.cert_file", take("cert_file"))?;
    let key_file = file("fleet.key_file", take("key_file"))?;
    // The openssl program berth ran before libcurl: no longer used, still accepted so that
    // a berth.toml written for it loads.
    let _ = take("openssl");
    if cert_file.is_some() != key_file.is_some() {
        return Err(value_err(
            "fleet.key_file",
            "cert_file and key_file go together (the device's certificate and its key)".into(),
        ));
    }
    let tls = if https {
        Some(FleetTls {
            ca_file,
            cert_file,
            key_file,
        })
    } else if ca_file.is_some() || cert_file.is_some() {
        return Err(value_err(
            "fleet.server",
            format!("{server:?}: ca_file, cert_file and key_file apply to an https:// server"),
        ));
    } else {
        None
    };
    let gateway_token_file = file("fleet.gateway_token_file", take("gateway_token_file"))?;
    if token_file.is_some() && gateway_token_file.is_some() {
        return Err(value_err(
            "fleet.gateway_token_file",
            "set token_file or gateway_token_file, not both".into(),
        ));
    }
    let attr = |key: &'static str, v: Option<String>| {
        let v = v.unwrap_or_else(|| "default".into());
        if v.is_empty() || v.len() > 128 || v.chars().any(char::is_control) {
            return Err(value_err(
                key,
                format!("{v:?}: 1 to 128 printable characters"),
            ));
        }
        Ok(v)
    };
    let board = attr("fleet.board", take("board"))?;
    let revision = attr("fleet.revision", take("revision"))?;
    let ms = |key: &'static str, v: Option<String>, default: u64| match v {
        None => Ok(default),
        Some(v) => {
            let ms = parse_duration_ms(&v).map_err(|m| value_err(key, m.into()))?;
            if !(1000..=86_400_000).contains(&ms) {
                return Err(value_err(key, format!("{v}: must be between 1s and 24h")));
            }
            Ok(ms)
        }
    };
    let poll_ms = ms("fleet.poll", take("poll"), 300_000)?;
    let max_backoff_ms = ms("fleet.max_backoff", take("max_backoff"), 3_600_000)?;
    if let Some(k) = raw.keys().next() {
        return Err(value_err(
            "fleet",
            format!("unknown key {k:?} (known: server, tenant, controller_id, token_file, gateway_token_file, ca_file, cert_file, key_file, openssl, board, revision, poll, max_backoff)"),
        ));
    }
    Ok(Fleet {
        server: server.trim_end_matches('/').to_string(),
        tls,
        tenant,
        controller_id,
        token_file,
        gateway_token_file,
        board,
        revision,
        poll_ms,
        max_backoff_ms,
    })
}

fn upgrade(
    r: RawUpgrade,
    value_err: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<Upgrade, ConfigError> {
    let ms = |key: &'static str, v: Option<String>, default: u64| match v {
        None => Ok(default),
        Some(v) => parse_duration_ms(&v).map_err(|m| value_err(key, m.into())),
    };
    let deadline_ms = ms("upgrade.deadline", r.deadline, 60_000)?;
    let settle_ms = ms("upgrade.settle", r.settle, 5_000)?;
    if settle_ms >= deadline_ms {
        return Err(value_err(
            "upgrade.settle",
            format!("{settle_ms} ms is not shorter than upgrade.deadline ({deadline_ms} ms)"),
        ));
    }
    let reserve = match r.reserve {
        None => 4 << 20,
        Some(v) => crate::manifest::parse_size(&v)
            .map_err(|e| value_err("upgrade.reserve", e.to_string()))?,
    };
    Ok(Upgrade {
        deadline_ms,
        settle_ms,
        reserve,
    })
}

fn boot(
    r: RawBoot,
    value_err: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<Boot, ConfigError> {
    let confirm_after_ms = match r.confirm_after {
        None => 120_000,
        Some(v) => {
            let ms =
                parse_duration_ms(&v).map_err(|m| value_err("boot.confirm_after", m.into()))?;
            if !(1000..=86_400_000).contains(&ms) {
                return Err(value_err(
                    "boot.confirm_after",
                    format!("{v}: must be between 1s and 1440m"),
                ));
            }
            ms
        }
    };
    let max_failed = match r.max_failed {
        None => 5,
        Some(n) if (1..=crate::boot::MAX_KEPT as i64).contains(&n) => n as u32,
        Some(n) => {
            return Err(value_err(
                "boot.max_failed",
                format!("{n}: must be between 1 and {}", crate::boot::MAX_KEPT),
            ))
        }
    };
    Ok(Boot {
        confirm_after_ms,
        max_failed,
    })
}

/// `[reports]`: every cap checked, so a typo cannot fill the flash or switch reports off.
fn reports(
    r: RawReports,
    value_err: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<crate::report::Caps, ConfigError> {
    let d = crate::report::Caps::default();
    let max_per_container = match r.max_per_container {
        None => d.max_per_container,
        Some(n) if (1..=100).contains(&n) => n as u32,
        Some(n) => {
            return Err(value_err(
                "reports.max_per_container",
                format!("{n}: must be between 1 and 100"),
            ))
        }
    };
    let size = |key: &'static str, v: Option<String>, default: u64| match v {
        None => Ok(default),
        Some(v) => {
            let b = parse_size(&v).map_err(|m| value_err(key, m.into()))?;
            // "4" for "4M" would make every archive too large to keep.
            if b < 64 << 10 {
                return Err(value_err(key, format!("{v}: at least 64K")));
            }
            Ok(b)
        }
    };
    let max_total_size = size("reports.max_total_size", r.max_total_size, d.max_total_size)?;
    let max_core_size = size("reports.max_core_size", r.max_core_size, d.max_core_size)?;
    if max_core_size >= max_total_size {
        return Err(value_err(
            "reports.max_core_size",
            format!(
                "{}: must be below reports.max_total_size ({})",
                crate::cgroup::fmt_size(max_core_size),
                crate::cgroup::fmt_size(max_total_size)
            ),
        ));
    }
    Ok(crate::report::Caps {
        max_per_container,
        max_total_size,
        max_core_size,
        cores: r.cores.unwrap_or(d.cores),
    })
}

fn policy(
    r: RawPolicy,
    value_err: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<Policy, ConfigError> {
    let percent = |key: &'static str, v: &str, max: u32| {
        let p = parse_percent(v).map_err(|m| value_err(key, m.into()))?;
        if !(1..=max).contains(&p) {
            return Err(value_err(
                key,
                format!("{v}: must be between 1% and {max}%"),
            ));
        }
        Ok(p)
    };
    let count = |key: &'static str, n: i64| {
        if !(1..=1 << 22).contains(&n) {
            return Err(value_err(
                key,
                format!("{n}: must be between 1 and 4194304"),
            ));
        }
        Ok(n as u32)
    };
    // Below a few MiB no container starts at all: a typo ("64" for "64M") must not pass.
    let size = |key: &'static str, v: &str| {
        let b = parse_size(v).map_err(|m| value_err(key, m.into()))?;
        if b < 4 << 20 {
            return Err(value_err(key, format!("{v}: at least 4M")));
        }
        Ok(b)
    };
    Ok(Policy {
        cpu_max_percent: match &r.cpu_max {
            None => 50,
            Some(v) => percent("policy.cpu_max", v, 100)?,
        },
        memory_budget: match &r.memory_budget {
            None => MemoryBudget::Percent(30),
            Some(v) if v.ends_with('%') => {
                MemoryBudget::Percent(percent("policy.memory_budget", v, 100)?)
            }
            Some(v) => MemoryBudget::Bytes(size("policy.memory_budget", v)?),
        },
        pids_budget: match r.pids_budget {
            None => 1024,
            Some(n) => count("policy.pids_budget", n)?,
        },
        container_cpu_max: r
            .container_cpu_max
            .map(|v| percent("policy.container_cpu_max", &v, 800))
            .transpose()?,
        container_memory_max: r
            .container_memory_max
            .map(|v| size("policy.container_memory_max", &v))
            .transpose()?,
        container_pids_max: r
            .container_pids_max
            .map(|n| count("policy.container_pids_max", n))
            .transpose()?,
    })
}

/// The adaptive CPU governor (`[governor]`, see `berth_core::governor`): how the main
/// service is probed and the bounds of the containers' share.
#[derive(Debug, Clone, PartialEq)]
pub struct Governor {
    /// None: no governor, the group's CPU cap is the static `policy.cpu_max`.
    pub probe: Option<ProbeSpec>,
    pub interval_ms: u64,
    pub timeout_ms: u64,
    /// T_l and T_u, percent of all CPUs; T_u defaults to `policy.cpu_max`.
    pub t_lower: u32,
    pub t_upper: u32,
    /// R_n, responses per second; None: learned while the containers are idle.
    pub r_normal: Option<f64>,
    /// Idle samples the learned R_n is the median of.
    pub learn: u32,
}

/// How the main service is asked; the response rate is 1 / the time it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeSpec {
    /// GET of an http:// URL (berth's own HTTP client, `fetch.rs`): a 2xx answer whose body
    /// (at most 16 KiB) arrives whole is an answer; redirects are followed.
    Http(String),
    /// TCP connect to host:port.
    Tcp(String),
    /// A command (argv, absolute path first); exit status 0 is an answer.
    Command(Vec<String>),
    /// Connect to a UNIX stream socket, send `send`, and wait for at least one byte back.
    Unix { path: PathBuf, send: String },
}

impl ProbeSpec {
    pub fn describe(&self) -> String {
        match self {
            ProbeSpec::Http(url) => format!("http GET {url}"),
            ProbeSpec::Tcp(a) => format!("tcp connect {a}"),
            ProbeSpec::Command(argv) => format!("command {}", argv.join(" ")),
            ProbeSpec::Unix { path, send } => format!("unix {} send {send:?}", path.display()),
        }
    }
}

/// "host:port" with a numeric port and a non-empty host.
fn host_port(s: &str) -> bool {
    s.rsplit_once(':').is_some_and(|(h, p)| {
        !h.is_empty()
            && !h.starts_with(':')
            && !h.contains('/')
            && p.parse::<u16>().is_ok_and(|p| p > 0)
    })
}

/// `probe`: "http://HOST[:PORT]/PATH", "tcp:HOST:PORT", "unix:/PATH" (with `send`) or
/// "exec:/PATH [ARG…]" (split at spaces). One string rather than a table per kind: each
/// derived field type costs the device build kilobytes.
fn probe_spec(p: &str, send: Option<String>) -> Result<ProbeSpec, String> {
    if p.chars().any(|c| c.is_control()) {
        return Err(format!("{p:?}: control characters"));
    }
    if send.is_some() && !p.starts_with("unix:") {
        return Err("governor.send: only the unix: probe sends a request".into());
    }
    if let Some(rest) = p.strip_prefix("http://") {
        let auth = rest.split('/').next().unwrap_or_default();
        let addr = if auth.ends_with(']') || !auth.contains(':') {
            format!("{auth}:80")
        } else {
            auth.to_string()
        };
        if !host_port(&addr) || p.contains(' ') {
            return Err(format!("{p:?}: expected http://HOST[:PORT]/PATH"));
        }
        return Ok(ProbeSpec::Http(p.to_string()));
    }
    if let Some(a) = p.strip_prefix("tcp:") {
        return if host_port(a) {
            Ok(ProbeSpec::Tcp(a.to_string()))
        } else {
            Err(format!("{p:?}: expected tcp:HOST:PORT"))
        };
    }
    if let Some(path) = p.strip_prefix("unix:") {
        if !path.starts_with('/') {
            return Err(format!("{p:?}: expected unix:/ABSOLUTE/PATH"));
        }
        return match send {
            Some(s) if !s.is_empty() => Ok(ProbeSpec::Unix {
                path: path.into(),
                send: s,
            }),
            _ => Err("governor.send: the unix: probe needs a request to send".into()),
        };
    }
    if let Some(cmd) = p.strip_prefix("exec:") {
        let argv: Vec<String> = cmd
            .split(' ')
            .filter(|a| !a.is_empty())
            .map(String::from)
            .collect();
        if argv.first().is_some_and(|a| a.starts_with('/')) {
            return Ok(ProbeSpec::Command(argv));
        }
        return Err(format!("{p:?}: expected exec:/ABSOLUTE/PATH [ARG…]"));
    }
    Err(format!(
        "{p:?}: expected http://…, tcp:HOST:PORT, unix:/PATH or exec:/PATH"
    ))
}

fn governor(
    table: std::collections::BTreeMap<String, Spanned<String>>,
    policy: &Policy,
    value_err: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<Governor, ConfigError> {
    // probe, send, interval, timeout, t_lower, t_upper, r_normal, learn
    let mut f: [Option<String>; 8] = Default::default();
    for (k, v) in table {
        let i = match k.as_str() {
            "probe" => 0,
            "send" => 1,
            "interval" => 2,
            "timeout" => 3,
            "t_lower" => 4,
            "t_upper" => 5,
            "r_normal" => 6,
            "learn" => 7,
            _ => return Err(value_err("governor", format!("unknown key {k:?}"))),
        };
        f[i] = Some(v.into_inner());
    }
    let [probe, send, interval, timeout, t_lower, t_upper, r_normal, learn] = f;
    let probe = match probe {
        Some(p) => Some(probe_spec(&p, send).map_err(|m| value_err("governor.probe", m))?),
        None if send.is_some() => {
            return Err(value_err(
                "governor.send",
                "needs probe = \"unix:…\"".into(),
            ))
        }
        None => None,
    };
    let ms = |key: &'static str, v: Option<String>, default: u64, lo: u64, hi: u64| match v {
        None => Ok(default),
        Some(v) => {
            let ms = parse_duration_ms(&v).map_err(|m| value_err(key, m.into()))?;
            if !(lo..=hi).contains(&ms) {
                return Err(value_err(
                    key,
                    format!("{v}: must be between {lo}ms and {}s", hi / 1000),
                ));
            }
            Ok(ms)
        }
    };
    let interval_ms = ms("governor.interval", interval, 1000, 100, 60_000)?;
    let timeout_ms = ms(
        "governor.timeout",
        timeout,
        500.min(interval_ms),
        10,
        60_000,
    )?;
    if timeout_ms > interval_ms {
        return Err(value_err(
            "governor.timeout",
            format!("{timeout_ms}ms: must not be longer than governor.interval ({interval_ms}ms)"),
        ));
    }
    let pct = |key: &'static str, v: Option<String>, default: u32| match v {
        None => Ok(default),
        Some(v) => {
            let p = parse_percent(&v).map_err(|m| value_err(key, m.into()))?;
            if !(1..=policy.cpu_max_percent).contains(&p) {
                return Err(value_err(
                    key,
                    format!(
                        "{v}: must be between 1% and policy.cpu_max ({}%, of all CPUs)",
                        policy.cpu_max_percent
                    ),
                ));
            }
            Ok(p)
        }
    };
    let t_upper = pct("governor.t_upper", t_upper, policy.cpu_max_percent)?;
    let lower_given = t_lower.is_some();
    let t_lower = pct("governor.t_lower", t_lower, 5.min(t_upper))?;
    // policy.cpu_max = "1%" without a governor is a valid configuration.
    if t_lower >= t_upper && (probe.is_some() || lower_given) {
        return Err(value_err(
            "governor.t_lower",
            format!("{t_lower}%: must be below governor.t_upper ({t_upper}%)"),
        ));
    }
    // "40/s" or "12.5/s": responses per second.
    let r_normal = match r_normal {
        None => None,
        Some(v) => {
            let n = v
                .strip_suffix("/s")
                .filter(|n| {
                    n.bytes().all(|b| b.is_ascii_digit() || b == b'.')
                        && n.bytes().filter(|b| *b == b'.').count() <= 1
                })
                .and_then(crate::float::parse)
                .filter(|r| *r > 0.0);
            Some(n.ok_or_else(|| {
                value_err(
                    "governor.r_normal",
                    format!(
                        "{v}: expected a positive rate such as \"40/s\" (responses per second)"
                    ),
                )
            })?)
        }
    };
    // The learning window: how many probe intervals of idle containers R_n is the median of.
    let learn = match learn {
        None => (10_000 / interval_ms).clamp(3, 1000) as u32,
        Some(v) => {
            let ms = parse_duration_ms(&v).map_err(|m| value_err("governor.learn", m.into()))?;
            let n = ms / interval_ms;
            if !(3..=1000).contains(&n) {
                return Err(value_err(
                    "governor.learn",
                    format!("{v}: must be between 3 and 1000 intervals of governor.interval ({interval_ms}ms)"),
                ));
            }
            n as u32
        }
    };
    Ok(Governor {
        probe,
        interval_ms,
        timeout_ms,
        t_lower,
        t_upper,
        r_normal,
        learn,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_gives_the_defaults_and_an_unreadable_one_an_error() {
        let path = Path::new("/etc/berth/berth.toml");
        let gone = std::io::Error::from(std::io::ErrorKind::NotFound);
        let defaults = Config::from_file(Err(gone), path).unwrap();
        assert_eq!(
            defaults.cgroup_parent,
            Config::parse("", "x").unwrap().cgroup_parent
        );
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let e = Config::from_file(Err(denied), path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/etc/berth/berth.toml"), "{e}");
        let c = Config::from_file(Ok("[containers]\ncgroup_parent = \"x\"\n".into()), path);
        assert_eq!(c.unwrap().cgroup_parent, "x");
    }

    /// The configuration the packages install (dist/berth.toml) is valid as shipped and with
    /// every commented key switched on: its comments are true to the parser.
    #[test]
    fn the_packaged_configuration_parses_as_shipped_and_uncommented() {
        let text = include_str!("../../../dist/berth.toml");
        let shipped = Config::parse(text, "dist/berth.toml").unwrap();
        assert_eq!(shipped.repository, None);
        let on: String = text
            .lines()
            .map(|l| {
                l.strip_prefix('#')
                    .filter(|r| r.contains(" = "))
                    .unwrap_or(l)
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let all = Config::parse(&on, "dist/berth.toml, uncommented").unwrap();
        assert_eq!(
            all.repository.as_deref(),
            Some("http://updates.example.net/berth")
        );
        assert_eq!(all.guard.threshold, 30 << 20);
        assert_eq!(all.stop_timeout_s, shipped.stop_timeout_s);
        assert_eq!(all.start_settle_ms, shipped.start_settle_ms);
        assert_eq!(all.data_size, Some(32 << 20));
        assert!(all.watchdog.device.is_some());
        assert_eq!(all.web.listen.as_deref(), Some("192.168.1.1:8080"));
        assert_eq!(shipped.web, Web::default());
        // [network]'s keys are shown at their defaults
        assert_eq!(all.network, shipped.network);
    }

    #[cfg(feature = "slab")]
    #[test]
    fn the_slab_section() {
        use crate::slab::Amount;
        let c = Config::parse(
            "[slab]\ncaches = [\"skbuff_head_cache\", \"kmalloc-256:64K\"]\nreserve = 512\nmodule = \"/opt/berth_slab.ko\"\n",
            "t",
        )
        .unwrap();
        let s = c.slab.unwrap();
        assert_eq!(
            s.caches,
            vec![
                ("skbuff_head_cache".to_string(), Amount::Objects(512)),
                ("kmalloc-256".to_string(), Amount::Bytes(64 << 10)),
            ]
        );
        assert_eq!(s.module.as_deref(), Some(Path::new("/opt/berth_slab.ko")));
        assert_eq!(s.max_reserve, 4096);
        assert_eq!(Config::parse("", "t").unwrap().slab, None);
        let sized = Config::parse(
            "[slab]\ncaches = [\"kmalloc-64\"]\nreserve = \"32K\"\nmax_reserve = 600\n",
            "t",
        )
        .unwrap();
        let sized = sized.slab.unwrap();
        assert_eq!(sized.caches[0].1, Amount::Bytes(32 << 10));
        assert_eq!(sized.max_reserve, 600);
        for (text, want) in [
            ("[slab]\n", "t: slab.caches: missing or empty"),
            ("[slab]\ncaches = []\n", "t: slab.caches: missing or empty"),
            (
                "[slab]\ncaches = [\"dentry\"]\n",
                "t: slab.caches: \"dentry\": not a cache the reserve can hold",
            ),
            (
                "[slab]\ncaches = [\"kmalloc-64\", \"kmalloc-64:3\"]\n",
                "t: slab.caches: \"kmalloc-64\" named twice",
            ),
            (
                "[slab]\ncaches = [\"kmalloc-64\"]\nreserve = 5000\n",
                "t: slab.caches: kmalloc-64: a reserve of 5000 objects is above max_reserve (4096)",
            ),
            (
                "[slab]\ncaches = [\"kmalloc-64:x\"]\n",
                "t: slab.caches: kmalloc-64: invalid size \"x\"",
            ),
            (
                "[slab]\ncaches = [\"kmalloc-64\"]\nreserve = 0\n",
                "t: slab.reserve: \"0\": a reserve is 1 or more objects",
            ),
            (
                "[slab]\ncaches = [\"kmalloc-64\"]\nreserve = true\n",
                "slab.reserve: expected objects (an integer) or a size (a string), found a boolean",
            ),
            (
                "[slab]\ncaches = [\"kmalloc-64\"]\nmax_reserve = 0\n",
                "t: slab.max_reserve: 0: between 1 and 1048576 objects",
            ),
            (
                "[slab]\ncaches = [\"kmalloc-64\"]\nmodule = \"x.ko\"\n",
                "t: slab.module: \"x.ko\": must be an absolute path",
            ),
            (
                "[slab]\ncaches = [\"kmalloc-64\"]\nreserves = 5\n",
                "unknown key `reserves` in [slab]",
            ),
        ] {
            let e = Config::parse(text, "t").unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        let many: Vec<String> = (0..17).map(|i| format!("\"kmalloc-{}\"", 8 << i)).collect();
        let text = format!("[slab]\ncaches = [{}]\n", many.join(", "));
        let e = Config::parse(&text, "t").unwrap_err().to_string();
        assert!(
            e.contains("t: slab.caches: 17 caches: the module keeps at most 16"),
            "{e}"
        );
    }

    #[cfg(feature = "fleet")]
    #[test]
    fn the_fleet_section() {
        let c = Config::parse(
            "[fleet]\nserver = \"http://fleet.example:8080/\"\ntoken_file = \"/etc/berth/fleet.token\"\nboard = \"rt-ax58\"\npoll = \"30s\"\n",
            "t",
        )
        .unwrap();
        let f = c.fleet.unwrap();
        assert_eq!(
            (
                f.server.as_str(),
                f.tenant.as_str(),
                f.controller_id,
                f.poll_ms,
                f.max_backoff_ms
            ),
            (
                "http://fleet.example:8080",
                "DEFAULT",
                None,
                30_000,
                3_600_000
            )
        );
        assert_eq!(
            (f.board.as_str(), f.revision.as_str()),
            ("rt-ax58", "default")
        );
        assert_eq!(f.tls, None);
        assert_eq!(Config::parse("", "t").unwrap().fleet, None);
        let tls = |text: &str| {
            Config::parse(text, "t")
                .unwrap()
                .fleet
                .unwrap()
                .tls
                .unwrap()
        };
        assert_eq!(
            tls("[fleet]\nserver = \"https://h:8443\"\n"),
            FleetTls {
                ca_file: None,
                cert_file: None,
                key_file: None
            }
        );
        assert_eq!(
            tls("[fleet]\nserver = \"https://h\"\nca_file = \"/c\"\ncert_file = \"/d\"\nkey_file = \"/k\"\nopenssl = \"/usr/bin/openssl\"\n"),
            FleetTls {
                ca_file: Some("/c".into()),
                cert_file: Some("/d".into()),
                key_file: Some("/k".into())
            }
        );
        for (text, says) in [
            ("[fleet]\ntenant = \"x\"\n", "fleet.server"),
            ("[fleet]\nserver = \"ftp://h\"\n", "expected http://HOST"),
            ("[fleet]\nserver = \"https://\"\n", "expected http://HOST"),
            ("[fleet]\nserver = \"http://h\"\nca_file = \"/c\"\n", "apply to an https:// server"),
            ("[fleet]\nserver = \"https://h\"\ncert_file = \"/c\"\n", "go together"),
            ("[fleet]\nserver = \"https://h\"\nca_file = \"c.pem\"\n", "fleet.ca_file"),
            ("[fleet]\nserver = \"http://h\"\ncontroller_id = \"a/b\"\n", "fleet.controller_id"),
            ("[fleet]\nserver = \"http://h\"\ntoken_file = \"t\"\n", "absolute"),
            ("[fleet]\nserver = \"http://h\"\ntoken_file = \"/a\"\ngateway_token_file = \"/b\"\n", "not both"),
            ("[fleet]\nserver = \"http://h\"\npoll = \"100ms\"\n", "between 1s and 24h"),
            ("[fleet]\nserver = \"http://h\"\nsrever = \"x\"\n", "unknown key \"srever\""),
        ] {
            let e = Config::parse(text, "t").unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[cfg(not(feature = "fleet"))]
    #[test]
    fn a_build_without_the_fleet_client_refuses_its_section() {
        let e = Config::parse("[fleet]\nserver = \"http://h\"\n", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown key `fleet`"), "{e}");
    }

    #[test]
    fn the_web_page_needs_an_address_and_an_absolute_token_file() {
        let c = Config::parse(
            "[web]\nlisten = \"[::1]:8080\"\ntoken_file = \"/etc/berth/web.token\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.web.listen.as_deref(), Some("[::1]:8080"));
        assert_eq!(
            c.web.token_file,
            Some(PathBuf::from("/etc/berth/web.token"))
        );
        let e = Config::parse("[web]\nlisten = \"8080\"\n", "t")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("web.listen") && e.contains("ADDRESS:PORT"),
            "{e}"
        );
        let e = Config::parse(
            "[web]\nlisten = \"0.0.0.0:80\"\ntoken_file = \"web.token\"\n",
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("web.token_file") && e.contains("absolute"),
            "{e}"
        );
        let e = Config::parse("[web]\nport = 80\n", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("port"), "{e}");
    }

    #[test]
    fn mirrors_are_urls_of_a_repository() {
        let c = Config::parse(
            "repository = \"http://a/r/\"\nmirrors = [\"http://b/r/\", \"file:///srv/r\"]\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.mirrors, ["http://b/r", "file:///srv/r"]);
        let e = Config::parse("repository = \"http://a\"\nmirrors = [\"ftp://b\"]\n", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mirrors") && e.contains("ftp://b"), "{e}");
        let e = Config::parse("mirrors = [\"http://b\"]\n", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("set repository first"), "{e}");
    }

    #[test]
    fn empty_gives_defaults() {
        let c = Config::parse("", "t").unwrap();
        assert_eq!(c.paths.state, PathBuf::from("/var/lib/berth"));
        assert_eq!(c.paths.lxcpath, PathBuf::from("/run/berth/lxc"));
        assert_eq!(c.stop_timeout_s, 10);
        assert_eq!(c.start_settle_ms, 300);
        assert_eq!(c.log_ring_bytes, 65536);
        assert_eq!(c.repository, None);
        assert_eq!(
            c.paths.image("ab"),
            PathBuf::from("/var/lib/berth/store/ab.sqfs")
        );
    }

    #[test]
    fn data_size_caps_data_in_an_image() {
        let c = Config::parse("", "t").unwrap();
        assert_eq!(c.data_size, None);
        let c = Config::parse("[containers]\ndata_size = \"64M\"\n", "t").unwrap();
        assert_eq!(c.data_size, Some(64 << 20));
        assert_eq!(
            c.paths.data_image("web"),
            PathBuf::from("/var/lib/berth/data/web.img")
        );
        for bad in ["64", "512K", "2T", "lots"] {
            let e = Config::parse(&format!("[containers]\ndata_size = \"{bad}\"\n"), "t")
                .unwrap_err()
                .to_string();
            assert!(e.contains("containers.data_size"), "{bad}: {e}");
        }
        let e = Config::parse("[containers]\ndata_size = \"64\"\n", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 1M") || e.contains("between 1M"), "{e}");
    }

    #[test]
    fn full_file() {
        let c = Config::parse(
            "repository = \"http://127.0.0.1:8080/repo/\"\n[paths]\nstate = \"/tmp/s\"\nrun = \"/tmp/r\"\n[containers]\nstop_timeout = \"3s\"\nlog_ring = \"8K\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.repository.as_deref(), Some("http://127.0.0.1:8080/repo"));
        assert_eq!(c.paths.lxcpath, PathBuf::from("/tmp/r/lxc"));
        assert_eq!(c.stop_timeout_s, 3);
        assert_eq!(c.log_ring_bytes, 8192);
        for (v, ms) in [
            ("0s", Some(0)),
            ("50ms", Some(50)),
            ("2s", Some(2000)),
            ("11s", None),
            ("3", None),
        ] {
            let r = Config::parse(&format!("[containers]\nstart_settle = \"{v}\"\n"), "t");
            match ms {
                Some(ms) => assert_eq!(r.unwrap().start_settle_ms, ms, "{v}"),
                None => assert!(
                    r.unwrap_err()
                        .to_string()
                        .contains("containers.start_settle"),
                    "{v}"
                ),
            }
        }
    }

    #[test]
    fn errors_name_the_line_and_key() {
        let e = Config::parse(
            "[paths]\nstate = \"/x\"\nbogus = 1\n",
            "/etc/berth/berth.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 3"), "{e}");
        assert!(e.contains("bogus"), "{e}");
        let e = Config::parse("repository = \"ftp://x\"", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("repository") && e.contains("https://"), "{e}");
        let c = Config::parse(
            "repository = \"https://x/r/\"\nrepository_ca_file = \"/etc/berth/repo-ca.pem\"",
            "f",
        )
        .unwrap();
        assert_eq!(c.repository.as_deref(), Some("https://x/r"));
        assert_eq!(
            c.repository_ca_file.as_deref(),
            Some(Path::new("/etc/berth/repo-ca.pem"))
        );
        for (text, says) in [
            (
                "repository = \"https://x\"\nrepository_ca_file = \"ca.pem\"",
                "absolute",
            ),
            (
                "repository = \"http://x\"\nrepository_ca_file = \"/ca.pem\"",
                "https://",
            ),
        ] {
            let e = Config::parse(text, "f").unwrap_err().to_string();
            assert!(e.contains("repository_ca_file") && e.contains(says), "{e}");
        }
        let e = Config::parse("[paths]\nstate = \"rel\"", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("paths.state") && e.contains("absolute"), "{e}");
        let e = Config::parse("[containers]\nlog_ring = \"1G\"", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("log_ring"), "{e}");
        let e = Config::parse("[containers]\ncgroup_parent = \"../x\"", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cgroup_parent"), "{e}");
    }

    #[test]
    fn api_defaults_values_and_refusals() {
        use crate::container_api::Permission as P;
        let c = Config::parse("", "t").unwrap();
        assert_eq!(c.api, crate::container_api::ApiPolicy::default());
        let c = Config::parse(
            "[api]\ngrant = \"status logs\"\nrate = 5\nburst = 8\nmax_update_lock = \"2h\"\n[api.packages]\nmedia = \"lan-hosts update-lock\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.api.grant, [P::Status, P::Logs]);
        assert_eq!(c.api.packages["media"], [P::LanHosts, P::UpdateLock]);
        assert_eq!(
            (c.api.rate, c.api.burst, c.api.max_update_lock_s),
            (5, 8, 7200)
        );
        for (text, key, says) in [
            (
                "[api]\ngrant = \"stop reboot\"\n",
                "api.grant",
                "\"reboot\" is not an api permission",
            ),
            ("[api]\nrate = 0\n", "api.rate", "between 1 and 10000"),
            (
                "[api]\nmax_update_lock = \"30d\"\n",
                "api.max_update_lock",
                "between 1s and 7d",
            ),
            (
                "[api.packages]\nmedia = \"all\"\n",
                "api.packages",
                "media: \"all\"",
            ),
            (
                "[api.packages]\n\"Bad Name\" = \"stop\"\n",
                "api.packages",
                "Bad Name",
            ),
        ] {
            let e = Config::parse(text, "t").unwrap_err();
            match &e {
                ConfigError::Value {
                    key: k, message, ..
                } => {
                    assert_eq!(*k, key, "{text}: {e}");
                    assert!(message.contains(says), "{text}: {e}");
                }
                _ => panic!("{text}: {e}"),
            }
        }
        let e = Config::parse("[api]\nspeed = 1\n", "t").unwrap_err();
        assert!(e.to_string().contains("speed"), "{e}");
    }

    #[test]
    fn policy_defaults_and_values() {
        let p = Config::parse("", "t").unwrap().policy;
        assert_eq!(p.cpu_max_percent, 50);
        assert_eq!(p.memory_budget, MemoryBudget::Percent(30));
        assert_eq!(p.pids_budget, 1024);
        assert_eq!(p.container_cpu_max, None);
        let p = Config::parse(
            "[policy]\ncpu_max = \"40%\"\nmemory_budget = \"256M\"\npids_budget = 300\ncontainer_cpu_max = \"150%\"\ncontainer_memory_max = \"64M\"\ncontainer_pids_max = 64\n",
            "t",
        )
        .unwrap()
        .policy;
        assert_eq!(p.cpu_max_percent, 40);
        assert_eq!(p.memory_budget, MemoryBudget::Bytes(256 << 20));
        assert_eq!(p.pids_budget, 300);
        assert_eq!(p.container_cpu_max, Some(150));
        assert_eq!(p.container_memory_max, Some(64 << 20));
        assert_eq!(p.container_pids_max, Some(64));
        let p = Config::parse("[policy]\nmemory_budget = \"25%\"", "t")
            .unwrap()
            .policy;
        assert_eq!(p.memory_budget, MemoryBudget::Percent(25));
    }

    #[test]
    fn guard_defaults_values_and_refusals() {
        let g = Config::parse("", "t").unwrap().guard;
        assert_eq!(g.threshold, 30 << 20);
        assert_eq!(g.interval_ms, 500);
        let g = Config::parse("[guard]\nthreshold = \"64M\"\ninterval = \"200ms\"\n", "t")
            .unwrap()
            .guard;
        assert_eq!(g.threshold, 64 << 20);
        assert_eq!(g.interval_ms, 200);
        for (text, key) in [
            ("threshold = \"30\"", "guard.threshold"),
            ("threshold = \"lots\"", "guard.threshold"),
            ("threshold = 30", "line 2"),
            ("interval = \"10ms\"", "guard.interval"),
            ("interval = \"2m\"", "guard.interval"),
            ("interval = \"fast\"", "guard.interval"),
            ("bogus = 1", "bogus"),
        ] {
            let e = Config::parse(&format!("[guard]\n{text}"), "f")
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn upgrade_defaults_values_and_refusals() {
        let u = Config::parse("", "t").unwrap().upgrade;
        assert_eq!((u.deadline_ms, u.settle_ms), (60_000, 5_000));
        let u = Config::parse(
            "[upgrade]\ndeadline = \"20s\"\nsettle = \"500ms\"\nreserve = \"1M\"\n",
            "t",
        )
        .unwrap()
        .upgrade;
        assert_eq!(
            (u.deadline_ms, u.settle_ms, u.reserve),
            (20_000, 500, 1 << 20)
        );
        assert_eq!(Config::parse("", "t").unwrap().upgrade.reserve, 4 << 20);
        for (text, key) in [
            (
                "[upgrade]\nsettle = \"2m\"",
                "upgrade.settle: 120000 ms is not shorter",
            ),
            ("[upgrade]\ndeadline = \"soon\"", "upgrade.deadline"),
            ("[upgrade]\nreserve = \"lots\"", "upgrade.reserve"),
            ("[upgrade]\nretry = 1", "retry"),
        ] {
            let e = Config::parse(text, "f").unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn watchdog_and_boot_defaults_values_and_refusals() {
        let c = Config::parse("", "t").unwrap();
        assert_eq!(
            c.watchdog,
            Watchdog {
                device: None,
                interval_ms: 5000,
                timeout_s: None
            }
        );
        assert_eq!(
            c.boot,
            Boot {
                confirm_after_ms: 120_000,
                max_failed: 5
            }
        );
        assert_eq!(
            c.paths.boot_file(),
            PathBuf::from("/var/lib/berth/boot.json")
        );
        let c = Config::parse(
            "[watchdog]\ndevice = \"/dev/watchdog\"\ninterval = \"2s\"\ntimeout = \"30s\"\n[boot]\nconfirm_after = \"30s\"\nmax_failed = 3\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.watchdog.device, Some(PathBuf::from("/dev/watchdog")));
        assert_eq!(
            (c.watchdog.interval_ms, c.watchdog.timeout_s),
            (2000, Some(30))
        );
        assert_eq!((c.boot.confirm_after_ms, c.boot.max_failed), (30_000, 3));
        for (text, key) in [
            ("[watchdog]\ndevice = \"dev/watchdog\"", "watchdog.device"),
            ("[watchdog]\ndevice = 1", "line 2"),
            ("[watchdog]\ninterval = \"10ms\"", "watchdog.interval"),
            ("[watchdog]\ninterval = \"2m\"", "watchdog.interval"),
            ("[watchdog]\ninterval = \"often\"", "watchdog.interval"),
            (
                "[watchdog]\ndevice = \"/d\"\ntimeout = \"1500ms\"",
                "watchdog.timeout",
            ),
            (
                "[watchdog]\ndevice = \"/d\"\ntimeout = \"0s\"",
                "watchdog.timeout",
            ),
            (
                "[watchdog]\ndevice = \"/d\"\ntimeout = \"8s\"",
                "twice watchdog.interval",
            ),
            ("[watchdog]\ntimeout = \"30s\"", "needs watchdog.device"),
            ("[watchdog]\nbogus = 1", "bogus"),
            ("[boot]\nconfirm_after = \"500ms\"", "boot.confirm_after"),
            ("[boot]\nconfirm_after = \"2d\"", "boot.confirm_after"),
            ("[boot]\nmax_failed = 0", "boot.max_failed"),
            ("[boot]\nmax_failed = 101", "boot.max_failed"),
            ("[boot]\nmax_failed = \"5\"", "line 2"),
            ("[boot]\nbogus = 1", "bogus"),
        ] {
            let e = Config::parse(text, "f").unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn reports_defaults_values_and_refusals() {
        let r = Config::parse("", "t").unwrap().reports;
        assert_eq!(r, crate::report::Caps::default());
        assert_eq!((r.max_per_container, r.cores), (5, false));
        assert_eq!((r.max_total_size, r.max_core_size), (4 << 20, 1 << 20));
        let r = Config::parse(
            "[reports]\nmax_per_container = 2\nmax_total_size = \"8M\"\nmax_core_size = \"2M\"\ncores = true\n",
            "t",
        )
        .unwrap()
        .reports;
        assert_eq!(r.max_per_container, 2);
        assert_eq!(r.max_total_size, 8 << 20);
        assert_eq!(r.max_core_size, 2 << 20);
        assert!(r.cores);
        for (text, key) in [
            ("max_per_container = 0", "reports.max_per_container"),
            ("max_per_container = 1000", "reports.max_per_container"),
            (
                "max_per_container = \"2\"",
                "max_per_container: expected an integer",
            ),
            ("max_total_size = \"4\"", "reports.max_total_size"),
            ("max_total_size = \"lots\"", "reports.max_total_size"),
            ("max_core_size = \"4M\"", "reports.max_core_size"),
            ("cores = \"yes\"", "cores: expected true or false"),
            ("core = true", "core"),
        ] {
            let e = Config::parse(&format!("[reports]\n{text}"), "f")
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn malformed_policy_is_refused_naming_the_key() {
        for (text, key) in [
            ("cpu_max = \"50\"", "policy.cpu_max"),
            ("cpu_max = \"150%\"", "policy.cpu_max"),
            ("cpu_max = \"0%\"", "policy.cpu_max"),
            ("cpu_max = \"-5%\"", "policy.cpu_max"),
            ("memory_budget = \"lots\"", "policy.memory_budget"),
            ("memory_budget = \"101%\"", "policy.memory_budget"),
            ("memory_budget = \"64\"", "policy.memory_budget"),
            ("pids_budget = 0", "policy.pids_budget"),
            ("container_cpu_max = \"900%\"", "policy.container_cpu_max"),
            (
                "container_memory_max = \"1X\"",
                "policy.container_memory_max",
            ),
            ("container_pids_max = -1", "policy.container_pids_max"),
            ("bogus = 1", "bogus"),
        ] {
            let e = Config::parse(&format!("[policy]\n{text}"), "f")
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[cfg(feature = "shape")]
    #[test]
    fn the_data_policy_is_read_and_refused_by_name() {
        use crate::datacap::{DataCap, Over, Period};
        let c = Config::parse(
            "[policy]\ndata_reset_day = 15\nmetered = true\nmetered_data_cap = \"100M/day\"\nover_cap = \"128kbit\"",
            "f",
        )
        .unwrap();
        let p = c.network.data;
        assert_eq!(p.reset_day, 15);
        assert!(p.metered);
        assert_eq!(p.over, Over::Throttle(16_000));
        let day = |mib: u64| DataCap {
            bytes: mib << 20,
            period: Period::Day,
        };
        assert_eq!(p.metered_cap, Some(day(100)));
        // While metered the smaller of the policy's and the package's own, in bytes.
        assert_eq!(p.cap(None, true), Some(day(100)));
        assert_eq!(p.cap(Some(day(10)), true), Some(day(10)));
        assert_eq!(p.cap(Some(day(500)), true), Some(day(100)));
        let month = DataCap {
            bytes: 50 << 20,
            period: Period::Month,
        };
        assert_eq!(p.cap(Some(month), true), Some(month));
        assert_eq!(p.cap(Some(day(500)), false), Some(day(500)));
        assert_eq!(p.cap(None, false), None);
        let d = Config::parse("", "f").unwrap().network.data;
        assert_eq!((d.reset_day, d.metered, d.over), (1, false, Over::Drop));
        for (text, key, words) in [
            (
                "[policy]\ndata_reset_day = 31",
                "policy.data_reset_day",
                "between 1 and 28",
            ),
            (
                "[policy]\nmetered_data_cap = \"1G\"",
                "policy.metered_data_cap",
                "a size and a period",
            ),
            (
                "[policy]\nover_cap = \"slow\"",
                "policy.over_cap",
                "or \"drop\"",
            ),
            ("[policy]\nmetered = \"yes\"", "policy.metered", ""),
        ] {
            let e = Config::parse(text, "f").unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(words), "{text}: {e}");
        }
    }

    #[cfg(feature = "shape")]
    #[test]
    fn the_uplink_and_the_containers_share_of_it() {
        let line = |text: &str| Config::parse(text, "t").map(|c| c.network.line);
        assert_eq!(line("").unwrap(), None);
        let l = line("[network]\nuplink = \"wan0\"\nuplink_rate = \"20mbit\"")
            .unwrap()
            .unwrap();
        // Half the line until the policy says otherwise.
        assert_eq!(
            (l.uplink.as_str(), l.rate, l.asked),
            ("wan0", 20_000_000, 10_000_000)
        );
        let share = |b: &str| {
            line(&format!("[network]\nuplink = \"wan0\"\nuplink_rate = \"20mbit\"\n[policy]\nbandwidth = \"{b}\""))
                .map(|l| l.unwrap().asked)
        };
        assert_eq!(share("25%").unwrap(), 5_000_000);
        assert_eq!(share("3mbit").unwrap(), 3_000_000);
        let e = line(
            "[network]\nuplink = \"wan0\"\nuplink_rate = \"1mbit\"\n[policy]\nbandwidth = \"5%\"",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("less than 64kbit of the line (1mbit)"), "{e}");
        for (text, key, words) in [
            (
                "[network]\nuplink = \"wan0\"",
                "network.uplink_rate",
                "the uplink's rate too",
            ),
            (
                "[network]\nuplink_rate = \"20mbit\"",
                "network.uplink",
                "the uplink's name too",
            ),
            (
                "[network]\nuplink = \"wan0\"\nuplink_rate = \"500kbit\"",
                "network.uplink_rate",
                "from 1mbit",
            ),
            (
                "[network]\nuplink = \"berth0\"\nuplink_rate = \"20mbit\"",
                "network.uplink",
                "not berth's bridge",
            ),
            (
                "[network]\nuplink = \"a b\"\nuplink_rate = \"20mbit\"",
                "network.uplink",
                "WAN interface",
            ),
            (
                "[policy]\nbandwidth = \"5mbit\"",
                "policy.bandwidth",
                "needs the line it shares",
            ),
        ] {
            let e = Config::parse(text, "f").unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(words), "{text}: {e}");
        }
        for bad in ["0%", "101%", "lots", "5mb", "21mbit"] {
            let e = share(bad).unwrap_err().to_string();
            assert!(
                e.contains("policy.bandwidth") && e.contains(bad),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn governor_defaults_probes_and_refusals() {
        let g = Config::parse("", "t").unwrap().governor;
        assert_eq!(g.probe, None);
        Config::parse("[policy]\ncpu_max = \"1%\"", "t").unwrap();
        assert_eq!((g.interval_ms, g.timeout_ms), (1000, 500));
        assert_eq!((g.t_lower, g.t_upper, g.learn), (5, 50, 10));
        let g = Config::parse(
            "[policy]\ncpu_max = \"40%\"\n[governor]\nprobe = \"http://127.0.0.1:8080/health\"\ninterval = \"2s\"\ntimeout = \"1s\"\nt_lower = \"10%\"\nr_normal = \"25/s\"\nlearn = \"40s\"\n",
            "t",
        )
        .unwrap()
        .governor;
        assert_eq!(
            g.probe,
            Some(ProbeSpec::Http("http://127.0.0.1:8080/health".into()))
        );
        assert_eq!((g.interval_ms, g.timeout_ms), (2000, 1000));
        assert_eq!((g.t_lower, g.t_upper, g.r_normal), (10, 40, Some(25.0)));
        assert_eq!(g.learn, 20, "40 s of 2 s intervals");
        let p = |t: &str| {
            Config::parse(&format!("[governor]\n{t}"), "t")
                .unwrap()
                .governor
                .probe
                .unwrap()
        };
        assert_eq!(
            p("probe = \"http://localhost\""),
            ProbeSpec::Http("http://localhost".into())
        );
        assert_eq!(
            p("probe = \"tcp:10.0.0.1:22\""),
            ProbeSpec::Tcp("10.0.0.1:22".into())
        );
        assert_eq!(
            p("probe = \"exec:/bin/true  x\""),
            ProbeSpec::Command(vec!["/bin/true".into(), "x".into()])
        );
        assert_eq!(
            p("probe = \"unix:/run/main.sock\"\nsend = \"PING\\n\""),
            ProbeSpec::Unix {
                path: "/run/main.sock".into(),
                send: "PING\n".into()
            }
        );
        for (text, key) in [
            ("probe = \"https://x/\"", "governor.probe"),
            ("probe = \"http://:80/\"", "governor.probe"),
            ("probe = \"http://h:99999/\"", "governor.probe"),
            ("probe = \"http://h/a b\"", "governor.probe"),
            ("probe = \"tcp:nohost\"", "expected tcp:HOST:PORT"),
            ("probe = \"tcp:h:0\"", "governor.probe"),
            ("probe = \"exec:\"", "expected exec:/ABSOLUTE/PATH"),
            ("probe = \"exec:true\"", "governor.probe"),
            (
                "probe = \"unix:rel.sock\"\nsend = \"x\"",
                "unix:/ABSOLUTE/PATH",
            ),
            ("probe = \"unix:/a.sock\"", "needs a request to send"),
            (
                "probe = \"unix:/a.sock\"\nsend = \"\"",
                "needs a request to send",
            ),
            ("probe = \"tcp:h:1\"\nsend = \"x\"", "only the unix: probe"),
            ("send = \"x\"", "governor.send"),
            ("probe = \"ftp://x\"", "expected http://…, tcp:HOST:PORT"),
            ("probe = 5", "line 2"),
            ("interval = \"10ms\"", "governor.interval"),
            ("interval = \"2m\"", "governor.interval"),
            ("interval = \"1s\"\ntimeout = \"2s\"", "governor.timeout"),
            ("timeout = \"1ms\"", "governor.timeout"),
            ("t_upper = \"60%\"", "policy.cpu_max (50%"),
            ("t_lower = \"0%\"", "governor.t_lower"),
            ("t_lower = \"5\"", "governor.t_lower"),
            (
                "t_lower = \"30%\"\nt_upper = \"20%\"",
                "below governor.t_upper",
            ),
            ("r_normal = \"0/s\"", "governor.r_normal"),
            ("r_normal = \"-3.5/s\"", "governor.r_normal"),
            ("r_normal = \"40\"", "governor.r_normal"),
            ("r_normal = \"1.2.3/s\"", "governor.r_normal"),
            ("r_normal = 40", "line 2"),
            ("learn = \"2s\"", "governor.learn"),
            ("learn = \"2h\"", "governor.learn"),
            ("learn = \"10\"", "governor.learn"),
            ("http = \"http://x/\"", "unknown key \"http\""),
        ] {
            let e = Config::parse(&format!("[governor]\n{text}"), "f")
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }
}
