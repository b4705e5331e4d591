//! The device policy's resource caps (`[policy]` in berth.toml): what all containers
//! together, and each one, may use. Its own module, below both the configuration (which
//! reads it) and the cgroup plans (which apply it), so neither depends on the other.

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
