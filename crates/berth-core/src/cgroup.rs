//! Resource limits: what a container (or the whole group of containers) may use, computed from
//! the manifest's `[resources]`, the operator's overrides (`berth limit`) and the device
//! policy, and translated into cgroup files for either cgroup version. Pure: `berth-sys`'s
//! `cgroupfs` writes the files, `plan` puts them into the LXC configuration.
//!
//! Units, once and for all:
//! - a container's `cpu_max_percent` is percent of ONE CPU (200 = two full CPUs), as in the
//!   manifest;
//! - the policy's group `cpu_max` is percent of ALL CPUs (50 = half the machine);
//! - sizes are bytes.

use crate::manifest::Resources;
use crate::policy::{MemoryBudget, Policy};

/// The scheduler period berth uses for CPU quotas, microseconds (the kernel's default).
pub const CPU_PERIOD_US: u64 = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// A cgroup controller. On v1 each is its own hierarchy (cpu and cpuacct may share one); on
/// v2 all files live in the one unified directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Controller {
    Cpu,
    Cpuacct,
    Cpuset,
    Memory,
    Pids,
}

impl Controller {
    pub const ALL: [Controller; 5] = [
        Controller::Cpu,
        Controller::Cpuacct,
        Controller::Cpuset,
        Controller::Memory,
        Controller::Pids,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Controller::Cpu => "cpu",
            Controller::Cpuacct => "cpuacct",
            Controller::Cpuset => "cpuset",
            Controller::Memory => "memory",
            Controller::Pids => "pids",
        }
    }

    pub fn from_name(s: &str) -> Option<Controller> {
        Controller::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// The limits of one cgroup. `None` leaves the kernel's default (unlimited).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Limits {
    /// Relative share, 1..=10000, 100 is the default (cgroup v2 scale).
    pub cpu_weight: Option<u32>,
    /// Hard cap, percent of one CPU.
    pub cpu_max_percent: Option<u32>,
    pub memory_max: Option<u64>,
    pub memory_soft: Option<u64>,
    pub pids_max: Option<u32>,
    pub cpuset: Option<String>,
}

/// A container's cgroups below the group (docs/resources.md, "A container's cgroups"):
/// `<parent>/<name>` is its budget, where everything it costs is counted and capped, and
/// its processes live in leaves below it (cgroup v2 allows processes in leaves only):
///
/// ```text
/// <parent>/<name>/            budget: CPU weight and quota, memory and pids with room for berth's part
///                 payload/    the container (lxc.cgroup.dir.container): its memory, pids, cpuset
///                 monitor/    its LXC monitor (lxc.cgroup.dir.monitor)
///                 lxc.pivot/  where LXC parks the monitor as it tears down (lxc.cgroup.dir.monitor.pivot)
///                 berth/      what berth runs for it: the shim, health probes, scheduled jobs' helpers
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerCgroups {
    pub budget: String,
    pub payload: String,
    pub monitor: String,
    pub helpers: String,
}

/// The leaves of a container's budget.
pub const PAYLOAD_LEAF: &str = "payload";
pub const MONITOR_LEAF: &str = "monitor";
pub const HELPERS_LEAF: &str = "berth";
pub const PIVOT_LEAF: &str = "lxc.pivot";

/// What a container's budget holds beyond its payload's own limits: its shim and its LXC
/// monitor (364 KiB private together, `berth-bench footprint`), a health probe's helper and
/// up to 3 scheduled jobs' helpers while they run (each liblxc's attach and its children);
/// and the shim's log ring, whose size is the device's (`containers.log_ring`, added by
/// [`Limits::budget`]).
pub const BUDGET_MEMORY_OVERHEAD: u64 = 8 << 20;
/// The shim, the monitor, and each helper with liblxc's attach's short-lived children.
pub const BUDGET_PIDS_OVERHEAD: u32 = 16;

impl ContainerCgroups {
    pub fn of(parent: &str, name: &str) -> ContainerCgroups {
        let budget = format!("{parent}/{name}");
        ContainerCgroups {
            payload: format!("{budget}/{PAYLOAD_LEAF}"),
            monitor: format!("{budget}/{MONITOR_LEAF}"),
            helpers: format!("{budget}/{HELPERS_LEAF}"),
            budget,
        }
    }
}

impl Limits {
    /// The budget's part of a container's limits: its CPU weight among the containers and
    /// its quota, for everything it costs (payload, shim, monitor, helpers); memory and pids
    /// the payload's with room for berth's processes; the soft limit as the payload's (v2
    /// protects a cgroup only as far as its ancestors are protected). `log_ring`: the bytes
    /// of the shim's log ring, charged to the budget as it fills.
    pub fn budget(&self, log_ring: u64) -> Limits {
        Limits {
            cpu_weight: self.cpu_weight,
            cpu_max_percent: self.cpu_max_percent,
            memory_max: self.memory_max.map(|m| {
                m.saturating_add(BUDGET_MEMORY_OVERHEAD)
                    .saturating_add(log_ring)
            }),
            memory_soft: self.memory_soft,
            pids_max: self
                .pids_max
                .map(|n| n.saturating_add(BUDGET_PIDS_OVERHEAD)),
            cpuset: None,
        }
    }

    /// The payload's part, which LXC writes into its leaf before its init runs: memory, its
    /// soft limit, pids, cpuset, exactly as asked (CPU is the budget's alone).
    pub fn payload(&self) -> Limits {
        Limits {
            cpu_weight: None,
            cpu_max_percent: None,
            ..self.clone()
        }
    }
}

/// What the operator set with `berth limit`; each replaces the manifest's value. Persisted
/// per container, so the next start uses them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Overrides {
    pub cpu_max_percent: Option<u32>,
    pub memory_max: Option<u64>,
    pub pids_max: Option<u32>,
    /// Bandwidth caps, bits per second (`crate::shape`, feature `shape`); 0 lifts the
    /// manifest's.
    #[cfg(feature = "shape")]
    pub egress: Option<u64>,
    #[cfg(feature = "shape")]
    pub ingress: Option<u64>,
}

impl CgroupVersion {
    pub fn name(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "v1",
            CgroupVersion::V2 => "v2",
        }
    }
}

impl Limits {
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for (k, v) in [
            ("cpu_weight", self.cpu_weight.map(u64::from)),
            ("cpu_max_percent", self.cpu_max_percent.map(u64::from)),
            ("memory_max", self.memory_max),
            ("memory_soft", self.memory_soft),
            ("pids_max", self.pids_max.map(u64::from)),
        ] {
            m.insert(k.into(), v.into());
        }
        m.insert("cpuset".into(), self.cpuset.clone().into());
        serde_json::Value::Object(m)
    }
}

impl Overrides {
    /// The stored form: only what is set.
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        if let Some(v) = self.cpu_max_percent {
            m.insert("cpu_max_percent".into(), v.into());
        }
        if let Some(v) = self.memory_max {
            m.insert("memory_max".into(), v.into());
        }
        if let Some(v) = self.pids_max {
            m.insert("pids_max".into(), v.into());
        }
        #[cfg(feature = "shape")]
        for (k, v) in [("egress", self.egress), ("ingress", self.ingress)] {
            if let Some(v) = v {
                m.insert(k.into(), v.into());
            }
        }
        serde_json::Value::Object(m)
    }

    /// Reads the stored form; unknown keys or wrong types are errors (a hand-edited file
    /// must not silently lose a limit).
    pub fn from_json(v: &serde_json::Value) -> Option<Overrides> {
        let m = v.as_object()?;
        let mut o = Overrides::default();
        for (k, v) in m {
            let n = v.as_u64()?;
            match k.as_str() {
                "cpu_max_percent" => o.cpu_max_percent = Some(u32::try_from(n).ok()?),
                "memory_max" => o.memory_max = Some(n),
                "pids_max" => o.pids_max = Some(u32::try_from(n).ok()?),
                #[cfg(feature = "shape")]
                "egress" => o.egress = Some(crate::shape::stored_rate(n)?),
                #[cfg(feature = "shape")]
                "ingress" => o.ingress = Some(crate::shape::stored_rate(n)?),
                _ => return None,
            }
        }
        Some(o)
    }

    /// `self` with every value `newer` sets replaced.
    pub fn merged(&self, newer: &Overrides) -> Overrides {
        Overrides {
            cpu_max_percent: newer.cpu_max_percent.or(self.cpu_max_percent),
            memory_max: newer.memory_max.or(self.memory_max),
            pids_max: newer.pids_max.or(self.pids_max),
            #[cfg(feature = "shape")]
            egress: newer.egress.or(self.egress),
            #[cfg(feature = "shape")]
            ingress: newer.ingress.or(self.ingress),
        }
    }

    /// The bandwidth caps in force: these over the manifest's, 0 none.
    #[cfg(feature = "shape")]
    pub fn caps(&self, res: &crate::manifest::Resources) -> crate::shape::Caps {
        let pick = |o: Option<u64>, m: Option<u64>| o.or(m).filter(|&r| r > 0);
        crate::shape::Caps {
            egress: pick(self.egress, res.egress),
            ingress: pick(self.ingress, res.ingress),
        }
    }
}

/// Facts about the host the policy is relative to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host {
    pub cpus: u32,
    /// MemTotal, bytes.
    pub mem_total: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("{what} {asked} is beyond the device policy: {key} = {cap}")]
    BeyondPolicy {
        what: &'static str,
        asked: String,
        key: &'static str,
        cap: String,
    },
}

/// A size the way people write it: "32M", "1G", "1536K", or bytes.
pub fn fmt_size(b: u64) -> String {
    for (unit, shift) in [("G", 30), ("M", 20), ("K", 10)] {
        if b >= 1 << shift && b & ((1 << shift) - 1) == 0 {
            return format!("{}{unit}", b >> shift);
        }
    }
    b.to_string()
}

impl MemoryBudget {
    pub fn bytes(&self, mem_total: u64) -> u64 {
        match *self {
            MemoryBudget::Percent(p) => mem_total / 100 * p as u64,
            MemoryBudget::Bytes(b) => b,
        }
    }
}

impl Policy {
    /// The group's CPU cap in percent of one CPU (the unit of container limits).
    pub fn group_cpu_percent(&self, host: Host) -> u32 {
        self.cpu_max_percent * host.cpus.max(1)
    }
}

/// The limits of the parent cgroup every container lives in: the group budget.
pub fn group_limits(policy: &Policy, host: Host) -> Limits {
    Limits {
        cpu_max_percent: Some(policy.group_cpu_percent(host)),
        memory_max: Some(policy.memory_budget.bytes(host.mem_total)),
        pids_max: Some(policy.pids_budget),
        ..Limits::default()
    }
}

/// A container's limits: the manifest's, replaced by the operator's overrides, checked against
/// the policy. A value beyond a cap is refused (naming the cap), never silently lowered: the
/// package asked for it and should know. With no value asked, the per-container cap is the
/// limit.
pub fn container_limits(
    res: &Resources,
    ov: &Overrides,
    policy: &Policy,
    host: Host,
) -> Result<Limits, LimitError> {
    fn capped(
        asked: Option<u64>,
        caps: &[(Option<u64>, &'static str, String)],
        what: &'static str,
        show: &dyn Fn(u64) -> String,
    ) -> Result<Option<u64>, LimitError> {
        for (cap, key, cap_text) in caps {
            if let (Some(a), Some(c)) = (asked, *cap) {
                if a > c {
                    return Err(LimitError::BeyondPolicy {
                        what,
                        asked: show(a),
                        key,
                        cap: cap_text.clone(),
                    });
                }
            }
        }
        Ok(asked)
    }
    let group_cpu = policy.group_cpu_percent(host);
    let cpu = capped(
        ov.cpu_max_percent.or(res.cpu_max_percent).map(u64::from),
        &[
            (
                policy.container_cpu_max.map(u64::from),
                "policy.container_cpu_max",
                format!(
                    "{}% (of one CPU)",
                    policy.container_cpu_max.unwrap_or_default()
                ),
            ),
            // cgroup v1 refuses a child quota above its parent's; v2 would silently cap it.
            (
                Some(group_cpu.into()),
                "policy.cpu_max",
                format!(
                    "{}% of all {} CPUs ({group_cpu}% of one CPU)",
                    policy.cpu_max_percent, host.cpus
                ),
            ),
        ],
        "cpu",
        &|p| format!("{p}% (of one CPU)"),
    )?
    .map(|p| p as u32);
    // Nothing asked: the per-container cap (if any) is the limit; the group cap is the
    // group's, applied to the parent.
    let cpu = cpu.or(policy.container_cpu_max);
    let budget = policy.memory_budget.bytes(host.mem_total);
    let memory = capped(
        ov.memory_max.or(res.memory),
        &[
            (
                policy.container_memory_max,
                "policy.container_memory_max",
                fmt_size(policy.container_memory_max.unwrap_or_default()),
            ),
            (
                Some(budget),
                "policy.memory_budget",
                match policy.memory_budget {
                    MemoryBudget::Percent(p) => format!("{p}% of RAM ({})", fmt_size(budget)),
                    MemoryBudget::Bytes(b) => fmt_size(b),
                },
            ),
        ],
        "memory",
        &fmt_size,
    )?;
    let memory = memory.or(policy.container_memory_max);
    let pids = capped(
        ov.pids_max.or(res.pids).map(u64::from),
        &[
            (
                policy.container_pids_max.map(u64::from),
                "policy.container_pids_max",
                policy.container_pids_max.unwrap_or_default().to_string(),
            ),
            (
                Some(policy.pids_budget.into()),
                "policy.pids_budget",
                policy.pids_budget.to_string(),
            ),
        ],
        "pids",
        &|n| n.to_string(),
    )?
    .map(|n| n as u32);
    let pids = pids.or(policy.container_pids_max);
    // A lowered hard limit takes the soft one down with it.
    let memory_soft = match (res.memory_soft, memory) {
        (Some(s), Some(m)) => Some(s.min(m)),
        (s, _) => s,
    };
    Ok(Limits {
        cpu_weight: res.cpu_weight,
        cpu_max_percent: cpu,
        memory_max: memory,
        memory_soft,
        pids_max: pids,
        cpuset: res.cpuset.clone(),
    })
}

/// cgroup v2 weight (1..=10000, default 100) → v1 cpu.shares (2..=262144, default 1024),
/// linear so that the default maps to the default and order is kept.
pub fn weight_to_shares(weight: u32) -> u64 {
    (weight as u64 * 1024 / 100).clamp(2, 262_144)
}

/// CPU quota in microseconds per [`CPU_PERIOD_US`] for a percentage of one CPU.
pub fn quota_us(percent: u32) -> u64 {
    percent as u64 * CPU_PERIOD_US / 100
}

/// The cgroup files that implement `limits`, in the order they must be written (a v1 quota
/// after its period).
pub fn files(version: CgroupVersion, l: &Limits) -> Vec<(Controller, &'static str, String)> {
    use CgroupVersion::*;
    use Controller::*;
    let mut out = Vec::new();
    if let Some(w) = l.cpu_weight {
        out.push(match version {
            V1 => (Cpu, "cpu.shares", weight_to_shares(w).to_string()),
            V2 => (Cpu, "cpu.weight", w.clamp(1, 10_000).to_string()),
        });
    }
    if let Some(p) = l.cpu_max_percent {
        match version {
            V1 => {
                out.push((Cpu, "cpu.cfs_period_us", CPU_PERIOD_US.to_string()));
                out.push((Cpu, "cpu.cfs_quota_us", quota_us(p).to_string()));
            }
            V2 => out.push((Cpu, "cpu.max", format!("{} {CPU_PERIOD_US}", quota_us(p)))),
        }
    }
    if let Some(m) = l.memory_max {
        out.push(match version {
            V1 => (Memory, "memory.limit_in_bytes", m.to_string()),
            V2 => (Memory, "memory.max", m.to_string()),
        });
    }
    if let Some(s) = l.memory_soft {
        // v1's soft limit is where reclaim pushes a cgroup back under pressure; v2's nearest
        // is memory.low (protection up to it), as runc maps memory.reservation.
        out.push(match version {
            V1 => (Memory, "memory.soft_limit_in_bytes", s.to_string()),
            V2 => (Memory, "memory.low", s.to_string()),
        });
    }
    if let Some(n) = l.pids_max {
        out.push((Pids, "pids.max", n.to_string()));
    }
    if let Some(c) = &l.cpuset {
        out.push((Cpuset, "cpuset.cpus", c.clone()));
    }
    out
}

/// The files that reset a controller's limit to unlimited, for the values `files` would
/// write: used when an override is removed from a running container.
pub fn unlimited(version: CgroupVersion) -> Vec<(Controller, &'static str, String)> {
    use CgroupVersion::*;
    use Controller::*;
    match version {
        V1 => vec![
            (Cpu, "cpu.cfs_quota_us", "-1".into()),
            (Memory, "memory.limit_in_bytes", "-1".into()),
            (Pids, "pids.max", "max".into()),
        ],
        V2 => vec![
            (Cpu, "cpu.max", format!("max {CPU_PERIOD_US}")),
            (Memory, "memory.max", "max".into()),
            (Pids, "pids.max", "max".into()),
        ],
    }
}

/// The limits this kernel can enforce, given the controllers it has (LXC fails a start on a
/// file of a missing controller), and the controllers asked for that it lacks.
pub fn enforceable(l: &Limits, controllers: &[&str]) -> (Limits, Vec<&'static str>) {
    let has = |n: &str| controllers.contains(&n);
    let mut out = l.clone();
    let mut missing = Vec::new();
    if !has("cpu") {
        if l.cpu_weight.or(l.cpu_max_percent).is_some() {
            missing.push("cpu");
        }
        out.cpu_weight = None;
        out.cpu_max_percent = None;
    }
    if !has("memory") {
        if l.memory_max.or(l.memory_soft).is_some() {
            missing.push("memory");
        }
        out.memory_max = None;
        out.memory_soft = None;
    }
    if !has("pids") {
        if l.pids_max.is_some() {
            missing.push("pids");
        }
        out.pids_max = None;
    }
    if !has("cpuset") {
        if l.cpuset.is_some() {
            missing.push("cpuset");
        }
        out.cpuset = None;
    }
    (out, missing)
}

#[cfg(test)]
// `..Overrides::default()` fills the rates, fields only with feature `shape`.
#[allow(clippy::needless_update)]
mod tests {
    use super::*;

    #[test]
    fn limits_of_missing_controllers_are_left_out_and_named() {
        let l = Limits {
            cpu_weight: Some(50),
            cpu_max_percent: Some(20),
            memory_max: Some(64 << 20),
            memory_soft: Some(32 << 20),
            pids_max: Some(64),
            cpuset: None,
        };
        let all = ["cpu", "cpuacct", "memory", "pids", "cpuset"];
        assert_eq!(enforceable(&l, &all), (l.clone(), vec![]));
        let (got, missing) = enforceable(&l, &["cpu", "pids"]);
        assert_eq!(missing, vec!["memory"]);
        assert_eq!((got.memory_max, got.memory_soft), (None, None));
        assert_eq!((got.cpu_max_percent, got.pids_max), (Some(20), Some(64)));
        // Nothing asked of a missing controller: nothing said about it.
        let (got, missing) = enforceable(&Limits::default(), &[]);
        assert_eq!((got, missing), (Limits::default(), vec![]));
        let (got, missing) = enforceable(&l, &[]);
        assert_eq!(missing, vec!["cpu", "memory", "pids"]);
        assert_eq!(got, Limits::default());
    }
    use crate::config::Config;

    const HOST: Host = Host {
        cpus: 2,
        mem_total: 1000 << 20,
    };

    fn policy(extra: &str) -> Policy {
        Config::parse(&format!("[policy]\n{extra}"), "t")
            .unwrap()
            .policy
    }

    #[test]
    fn weights_map_monotonically_and_keep_the_default() {
        assert_eq!(weight_to_shares(100), 1024);
        let mut last = 0;
        for w in 1..=10_000 {
            let s = weight_to_shares(w);
            assert!(s >= last, "weight {w}");
            assert!((2..=262_144).contains(&s));
            last = s;
        }
        assert!(weight_to_shares(10_000) > weight_to_shares(100));
        assert!(weight_to_shares(1) < weight_to_shares(100));
    }

    #[test]
    fn percent_to_quota_is_exact() {
        for p in 1..=800 {
            let f = files(
                CgroupVersion::V1,
                &Limits {
                    cpu_max_percent: Some(p),
                    ..Limits::default()
                },
            );
            assert_eq!(
                f[0],
                (Controller::Cpu, "cpu.cfs_period_us", "100000".into())
            );
            assert_eq!(f[1].2, (p as u64 * 1000).to_string());
            // quota / period == p / 100 exactly
            assert_eq!(
                f[1].2.parse::<u64>().unwrap() * 100,
                p as u64 * CPU_PERIOD_US
            );
            let f = files(
                CgroupVersion::V2,
                &Limits {
                    cpu_max_percent: Some(p),
                    ..Limits::default()
                },
            );
            assert_eq!(f[0].2, format!("{} 100000", p as u64 * 1000));
        }
    }

    #[test]
    fn sizes_and_every_file_for_both_versions() {
        let l = Limits {
            cpu_weight: Some(200),
            cpu_max_percent: Some(20),
            memory_max: Some(32 << 20),
            memory_soft: Some(16 << 20),
            pids_max: Some(64),
            cpuset: Some("0-1".into()),
        };
        let v1: Vec<(&str, String)> = files(CgroupVersion::V1, &l)
            .into_iter()
            .map(|(_, f, v)| (f, v))
            .collect();
        assert_eq!(
            v1,
            vec![
                ("cpu.shares", "2048".into()),
                ("cpu.cfs_period_us", "100000".into()),
                ("cpu.cfs_quota_us", "20000".into()),
                ("memory.limit_in_bytes", "33554432".into()),
                ("memory.soft_limit_in_bytes", "16777216".into()),
                ("pids.max", "64".into()),
                ("cpuset.cpus", "0-1".into()),
            ]
        );
        let v2: Vec<(&str, String)> = files(CgroupVersion::V2, &l)
            .into_iter()
            .map(|(_, f, v)| (f, v))
            .collect();
        assert_eq!(
            v2,
            vec![
                ("cpu.weight", "200".into()),
                ("cpu.max", "20000 100000".into()),
                ("memory.max", "33554432".into()),
                ("memory.low", "16777216".into()),
                ("pids.max", "64".into()),
                ("cpuset.cpus", "0-1".into()),
            ]
        );
        assert!(files(CgroupVersion::V2, &Limits::default()).is_empty());
        for b in [1u64, 4095, 4096, 1 << 20, (1 << 30) + 1, u64::MAX / 2] {
            let f = files(
                CgroupVersion::V1,
                &Limits {
                    memory_max: Some(b),
                    ..Limits::default()
                },
            );
            assert_eq!(f[0].2.parse::<u64>().unwrap(), b);
        }
    }

    #[test]
    fn group_budget_defaults() {
        let p = policy("");
        let g = group_limits(&p, HOST);
        // 50 % of 2 CPUs = one full CPU
        assert_eq!(g.cpu_max_percent, Some(100));
        assert_eq!(g.memory_max, Some(300 << 20));
        assert_eq!(g.pids_max, Some(1024));
        let g = group_limits(&policy("cpu_max = \"25%\"\nmemory_budget = \"64M\""), HOST);
        assert_eq!(g.cpu_max_percent, Some(50));
        assert_eq!(g.memory_max, Some(64 << 20));
    }

    #[test]
    fn container_limits_follow_manifest_overrides_and_policy() {
        let p = policy(
            "container_cpu_max = \"80%\"\ncontainer_memory_max = \"64M\"\ncontainer_pids_max = 100",
        );
        let res = Resources {
            cpu_weight: Some(50),
            cpu_max_percent: Some(20),
            memory: Some(32 << 20),
            memory_soft: Some(16 << 20),
            pids: Some(32),
            ..Resources::default()
        };
        let l = container_limits(&res, &Overrides::default(), &p, HOST).unwrap();
        assert_eq!(l.cpu_max_percent, Some(20));
        assert_eq!(l.memory_max, Some(32 << 20));
        assert_eq!(l.pids_max, Some(32));
        assert_eq!(l.cpu_weight, Some(50));
        // nothing asked: the per-container caps are the limits
        let l = container_limits(&Resources::default(), &Overrides::default(), &p, HOST).unwrap();
        assert_eq!(l.cpu_max_percent, Some(80));
        assert_eq!(l.memory_max, Some(64 << 20));
        assert_eq!(l.pids_max, Some(100));
        // no per-container caps: unlimited (the group budget still holds)
        let l = container_limits(
            &Resources::default(),
            &Overrides::default(),
            &policy(""),
            HOST,
        )
        .unwrap();
        assert_eq!(l, Limits::default());
        // overrides win, and take the soft limit down with them
        let ov = Overrides {
            cpu_max_percent: Some(5),
            memory_max: Some(8 << 20),
            pids_max: None,
            ..Overrides::default()
        };
        let l = container_limits(&res, &ov, &p, HOST).unwrap();
        assert_eq!(l.cpu_max_percent, Some(5));
        assert_eq!(l.memory_max, Some(8 << 20));
        assert_eq!(l.memory_soft, Some(8 << 20));
        assert_eq!(l.pids_max, Some(32));
    }

    #[test]
    fn beyond_policy_is_refused_naming_both_numbers() {
        let p = policy(
            "container_cpu_max = \"80%\"\ncontainer_memory_max = \"64M\"\ncontainer_pids_max = 100",
        );
        let res = |cpu, mem, pids| Resources {
            cpu_max_percent: cpu,
            memory: mem,
            pids,
            ..Resources::default()
        };
        let e = container_limits(&res(Some(90), None, None), &Overrides::default(), &p, HOST)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "cpu 90% (of one CPU) is beyond the device policy: policy.container_cpu_max = 80% (of one CPU)"
        );
        let e = container_limits(
            &res(None, Some(65 << 20), None),
            &Overrides::default(),
            &p,
            HOST,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("65M") && e.contains("container_memory_max = 64M"),
            "{e}"
        );
        let e = container_limits(&res(None, None, Some(101)), &Overrides::default(), &p, HOST)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("101") && e.contains("container_pids_max = 100"),
            "{e}"
        );
        // the group caps hold even without per-container caps
        let p = policy("");
        let e = container_limits(&res(Some(150), None, None), &Overrides::default(), &p, HOST)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("policy.cpu_max = 50% of all 2 CPUs (100% of one CPU)"),
            "{e}"
        );
        let e = container_limits(
            &res(None, Some(301 << 20), None),
            &Overrides::default(),
            &p,
            HOST,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("memory_budget = 30% of RAM (300M)"), "{e}");
        let e = container_limits(
            &res(None, None, Some(2000)),
            &Overrides::default(),
            &p,
            HOST,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("pids_budget = 1024"), "{e}");
        // an override is checked the same way
        let ov = Overrides {
            pids_max: Some(5000),
            ..Overrides::default()
        };
        assert!(container_limits(&Resources::default(), &ov, &p, HOST).is_err());
    }

    #[test]
    fn sizes_print_the_way_people_write_them() {
        assert_eq!(fmt_size(32 << 20), "32M");
        assert_eq!(fmt_size(1 << 30), "1G");
        assert_eq!(fmt_size(1536 << 10), "1536K");
        assert_eq!(fmt_size(1000), "1000");
    }

    #[test]
    fn overrides_round_trip() {
        let o = Overrides {
            cpu_max_percent: Some(20),
            memory_max: None,
            pids_max: Some(3),
            ..Overrides::default()
        };
        assert_eq!(
            o.to_json().to_string(),
            r#"{"cpu_max_percent":20,"pids_max":3}"#
        );
        assert_eq!(Overrides::from_json(&o.to_json()), Some(o.clone()));
        #[cfg(feature = "shape")]
        let o = Overrides {
            cpu_max_percent: Some(20),
            memory_max: None,
            pids_max: Some(3),
            egress: Some(8_000_000),
            ingress: Some(0),
        };
        #[cfg(feature = "shape")]
        assert_eq!(
            o.to_json().to_string(),
            r#"{"cpu_max_percent":20,"egress":8000000,"ingress":0,"pids_max":3}"#
        );
        // A hand-edited rate tc would refuse makes the file unreadable, as any bad value.
        #[cfg(feature = "shape")]
        assert_eq!(
            Overrides::from_json(&serde_json::json!({"egress": 1})),
            None
        );
        assert_eq!(Overrides::from_json(&o.to_json()), Some(o));
        assert_eq!(Overrides::from_json(&serde_json::json!({"cpu": 1})), None);
        assert_eq!(
            Overrides::from_json(&serde_json::json!({"pids_max": -1})),
            None
        );
    }

    #[test]
    fn overrides_merge_newest_first() {
        let a = Overrides {
            cpu_max_percent: Some(10),
            memory_max: Some(1),
            pids_max: None,
            ..Overrides::default()
        };
        let b = Overrides {
            cpu_max_percent: Some(20),
            memory_max: None,
            pids_max: Some(3),
            ..Overrides::default()
        };
        assert_eq!(
            a.merged(&b),
            Overrides {
                cpu_max_percent: Some(20),
                memory_max: Some(1),
                pids_max: Some(3),
                ..Overrides::default()
            }
        );
    }

    #[cfg(feature = "shape")]
    #[test]
    fn the_caps_in_force_are_the_overrides_over_the_manifest_and_0_lifts_one() {
        let res = crate::manifest::Resources {
            egress: Some(8_000_000),
            ingress: Some(4_000_000),
            ..Default::default()
        };
        let none = Overrides::default();
        assert_eq!(
            none.caps(&res),
            crate::shape::Caps {
                egress: Some(8_000_000),
                ingress: Some(4_000_000)
            }
        );
        let ov = Overrides {
            egress: Some(2_000_000),
            ingress: Some(0),
            ..none
        };
        assert_eq!(
            ov.caps(&res),
            crate::shape::Caps {
                egress: Some(2_000_000),
                ingress: None
            }
        );
        assert!(!none.caps(&Default::default()).any());
    }

    #[test]
    fn a_containers_limits_split_into_its_budget_and_its_payload() {
        let l = Limits {
            cpu_weight: Some(50),
            cpu_max_percent: Some(20),
            memory_max: Some(16 << 20),
            memory_soft: Some(8 << 20),
            pids_max: Some(32),
            cpuset: Some("0".into()),
        };
        let b = l.budget(64 << 10);
        let p = l.payload();
        // CPU once, on the budget: its quota holds the payload and berth's part together
        assert_eq!((b.cpu_weight, b.cpu_max_percent), (Some(50), Some(20)));
        assert_eq!((p.cpu_weight, p.cpu_max_percent), (None, None));
        // the payload's memory and pids exactly as asked; the budget with room for berth's
        assert_eq!((p.memory_max, p.pids_max), (Some(16 << 20), Some(32)));
        assert_eq!(
            b.memory_max,
            Some((16 << 20) + BUDGET_MEMORY_OVERHEAD + (64 << 10))
        );
        assert_eq!(b.pids_max, Some(32 + BUDGET_PIDS_OVERHEAD));
        assert_eq!(
            (b.memory_soft, p.memory_soft),
            (Some(8 << 20), Some(8 << 20))
        );
        assert_eq!(
            (b.cpuset.as_deref(), p.cpuset.as_deref()),
            (None, Some("0"))
        );
        // nothing asked: nothing on either (the group's budget holds)
        assert_eq!(Limits::default().budget(1 << 20), Limits::default());
        assert_eq!(Limits::default().payload(), Limits::default());
        // no file is lost or written twice, in either version
        for v in [CgroupVersion::V1, CgroupVersion::V2] {
            let mut all: Vec<&str> = files(v, &b).iter().map(|(_, f, _)| *f).collect();
            all.extend(files(v, &p).iter().map(|(_, f, _)| *f));
            let mut whole: Vec<&str> = files(v, &l).iter().map(|(_, f, _)| *f).collect();
            // memory and pids (and the soft limit) on both levels
            whole.extend(["memory", "pids"].iter().flat_map(|c| {
                files(v, &l)
                    .into_iter()
                    .filter(move |(k, _, _)| k.name() == *c)
                    .map(|(_, f, _)| f)
            }));
            all.sort();
            whole.sort();
            assert_eq!(all, whole, "{v:?}");
        }
        let c = ContainerCgroups::of("berth", "web");
        assert_eq!(
            (
                c.budget.as_str(),
                c.payload.as_str(),
                c.monitor.as_str(),
                c.helpers.as_str()
            ),
            (
                "berth/web",
                "berth/web/payload",
                "berth/web/monitor",
                "berth/web/berth"
            )
        );
    }
}
