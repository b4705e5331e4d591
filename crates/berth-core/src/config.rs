//! The device configuration, `/etc/berth/berth.toml`: where things live, which repository
//! to use, and the device policy that caps what packages may ask for.
//!
//! Every key has a default, so an empty file (or none) is a valid configuration. Unknown keys
//! are errors: a typo in a policy must not silently weaken it.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::manifest::{parse_duration_ms, parse_percent, parse_size};

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
    pub paths: Paths,
    /// Seconds a container gets between the halt signal and SIGKILL.
    pub stop_timeout_s: u32,
    /// Size of each container's in-memory log ring, bytes.
    pub log_ring_bytes: usize,
    pub tmp_size: u64,
    pub run_size: u64,
    /// Name of the cgroup under which every container lives (below each hierarchy's root).
    pub cgroup_parent: String,
    /// Seconds `berth start` waits for a container to reach RUNNING.
    pub start_timeout_s: u32,
    pub policy: Policy,
    pub guard: Guard,
    /// `[security]`: what packages may be granted (docs/security.md).
    pub security: crate::security::SecurityPolicy,
    /// `[network]`: the device's network policy (see `net`).
    pub network: crate::net::NetConfig,
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

/// The device policy (`[policy]`): what all containers together, and each one, may use.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Group CPU cap T_u, percent of ALL CPUs (50 = half the machine). Default 50.
    pub cpu_max_percent: u32,
    /// Memory of all containers together. Default 30 % of RAM.
    pub memory_budget: MemoryBudget,
    /// Processes of all containers together. Default 1024.
    pub pids_budget: u32,
    /// Per-container CPU cap, percent of ONE CPU (the manifest's unit). Default none.
    pub container_cpu_max: Option<u32>,
    /// Per-container memory cap, bytes. Default none.
    pub container_memory_max: Option<u64>,
    /// Per-container pids cap. Default none.
    pub container_pids_max: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryBudget {
    /// Percent of MemTotal.
    Percent(u32),
    Bytes(u64),
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
    /// The memory guard's last kill of a container (JSON, tmpfs).
    pub fn guard_file(&self, container: &str) -> PathBuf {
        self.run.join("logs").join(format!("{container}.guard"))
    }
    /// The operator's `berth limit` overrides of a container (JSON, written atomically).
    pub fn limits_file(&self, container: &str) -> PathBuf {
        self.state.join("limits").join(format!("{container}.json"))
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    repository: Option<String>,
    #[serde(default)]
    paths: RawPaths,
    #[serde(default)]
    containers: RawContainers,
    #[serde(default)]
    policy: RawPolicy,
    #[serde(default)]
    guard: RawGuard,
    #[serde(default)]
    security: crate::security::RawSecurity,
    network: Option<crate::net::RawNet>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawGuard {
    threshold: Option<String>,
    interval: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    cpu_max: Option<String>,
    memory_budget: Option<String>,
    pids_budget: Option<i64>,
    container_cpu_max: Option<String>,
    container_memory_max: Option<String>,
    container_pids_max: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPaths {
    state: Option<PathBuf>,
    run: Option<PathBuf>,
    keys: Option<PathBuf>,
    lxcpath: Option<PathBuf>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawContainers {
    stop_timeout: Option<String>,
    start_timeout: Option<String>,
    log_ring: Option<String>,
    tmp_size: Option<String>,
    run_size: Option<String>,
    cgroup_parent: Option<String>,
}

impl Config {
    /// Reads the configuration at `path`; a missing file gives the defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(path) {
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
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_string(),
            line: e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1)
                .unwrap_or(0),
            message: e.message().to_string(),
        })?;
        let value_err = |key: &'static str, message: String| ConfigError::Value {
            path: path.to_string(),
            key,
            message,
        };
        if let Some(url) = &raw.repository {
            if !(url.starts_with("http://") || url.starts_with("file://")) {
                return Err(value_err(
                    "repository",
                    format!("{url:?}: berth fetches http:// and file:// URLs"),
                ));
            }
        }
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
                let ms = parse_duration_ms(&v).map_err(|m| value_err(key, m))?;
                if ms > 3_600_000 {
                    return Err(value_err(key, format!("{v}: at most 1 hour")));
                }
                Ok((ms / 1000).max(1) as u32)
            }
        };
        let size = |key: &'static str, v: Option<String>, default: u64| match v {
            None => Ok(default),
            Some(v) => parse_size(&v).map_err(|m| value_err(key, m)),
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
        let policy = policy(raw.policy, &value_err)?;
        let guard = Guard {
            threshold: match raw.guard.threshold {
                None => 30 << 20,
                Some(v) => {
                    let b = parse_size(&v).map_err(|m| value_err("guard.threshold", m))?;
                    // "30" for "30M" would switch the guard off without a word.
                    if b < 1 << 20 {
                        return Err(value_err("guard.threshold", format!("{v}: at least 1M")));
                    }
                    b
                }
            },
            interval_ms: match raw.guard.interval {
                None => 500,
                Some(v) => {
                    let ms = parse_duration_ms(&v).map_err(|m| value_err("guard.interval", m))?;
                    if !(50..=60_000).contains(&ms) {
                        return Err(value_err(
                            "guard.interval",
                            format!("{v}: must be between 50ms and 60s"),
                        ));
                    }
                    ms
                }
            },
        };
        Ok(Config {
            repository: raw.repository.map(|u| u.trim_end_matches('/').to_string()),
            paths: Paths {
                state,
                run,
                keys,
                lxcpath,
            },
            stop_timeout_s: secs("containers.stop_timeout", c.stop_timeout, 10)?,
            start_timeout_s: secs("containers.start_timeout", c.start_timeout, 30)?,
            log_ring_bytes: log_ring as usize,
            tmp_size: size("containers.tmp_size", c.tmp_size, 16 << 20)?,
            run_size: size("containers.run_size", c.run_size, 4 << 20)?,
            cgroup_parent,
            policy,
            guard,
            security: raw
                .security
                .validate()
                .map_err(|(key, m)| value_err(key, m))?,
            network: crate::net::NetConfig::parse(raw.network)
                .map_err(|(key, m)| value_err(key, m))?,
        })
    }
}

fn policy(
    r: RawPolicy,
    value_err: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<Policy, ConfigError> {
    let percent = |key: &'static str, v: &str, max: u32| {
        let p = parse_percent(v).map_err(|m| value_err(key, m))?;
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
        let b = parse_size(v).map_err(|m| value_err(key, m))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_gives_defaults() {
        let c = Config::parse("", "t").unwrap();
        assert_eq!(c.paths.state, PathBuf::from("/var/lib/berth"));
        assert_eq!(c.paths.lxcpath, PathBuf::from("/run/berth/lxc"));
        assert_eq!(c.stop_timeout_s, 10);
        assert_eq!(c.log_ring_bytes, 65536);
        assert_eq!(c.repository, None);
        assert_eq!(
            c.paths.image("ab"),
            PathBuf::from("/var/lib/berth/store/ab.sqfs")
        );
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
        let e = Config::parse("repository = \"https://x\"", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("repository") && e.contains("http://"), "{e}");
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
}
