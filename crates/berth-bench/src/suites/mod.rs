//! The benchmark suites. Each is a module with a type implementing [`Suite`]; adding one
//! (cpu, mem, fs, net) means adding a module and a line in [`by_name`].
//!
//! What the rest of berth-bench reads in a suite's raw JSON (docs/benchmarks/README.md):
//! `metrics` (host vs guest, `hostguest::Metric::json`), `matrix`, `series` (values per
//! mode, `chart::series_json`) are charted and compared; `"skipped": "why"` marks a suite
//! that could not run. A `Err` from `run` is reported as the suite's failure and the other
//! suites go on. Network namespaces are named by the scope of their sandbox
//! (`berth_testkit::Scope::netns`), so a killed run's are removed at the next start.

use crate::report::SuiteOutput;
use crate::sandbox::{PkgSpec, Sandbox};
use crate::util::Result;

pub mod activation;
pub mod api;
pub mod bind;
pub mod cgroups;
pub mod cost;
pub mod cpu;
pub mod delta;
pub mod fleet;
pub mod footprint;
pub mod fs;
pub mod governor;
pub mod hostguest;
pub mod mem;
pub mod microvm;
pub mod net;
pub mod security;
pub mod soak;
pub mod supervise;
pub mod wear;

/// The order `all` runs them in: footprint first, so "idle" means a daemon that has done
/// nothing but install its packages.
/// The host-vs-guest suites come last: they load the machine for minutes.
pub const ALL: &[&str] = &[
    "footprint",
    "activation",
    "cpu",
    "mem",
    "fs",
    "security",
    "supervise",
    "api",
    "cost",
    "bind",
    "delta",
    "fleet",
    "net",
    "governor",
    "microvm",
    "cgroups",
    "soak",
    "wear",
];

/// What every suite gets.
pub struct Ctx<'a> {
    pub sb: &'a mut Sandbox,
    /// Measured repetitions.
    pub runs: usize,
    /// `--runs N` as given (suites with their own default use it only when given).
    pub runs_given: Option<usize>,
    /// `--events N`: sysbench events per instance (the workload size of the cpu suite).
    pub events: Option<usize>,
    /// Unrecorded repetitions before the measured ones.
    pub warmup: usize,
    pub quick: bool,
    /// `--trace`: activation also traces starts phase by phase.
    pub trace: bool,
}

pub trait Suite {
    fn name(&self) -> &'static str;
    /// Builds what the suite needs before the repository is signed and the daemon starts;
    /// returns the packages it needs in the repository (installed before any suite runs).
    fn prepare(&mut self, sb: &Sandbox) -> Result<Vec<PkgSpec>>;
    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput>;
    /// What the environment table should say about this suite's tools (compiler, …).
    fn environment(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

pub fn by_name(name: &str) -> Option<Box<dyn Suite>> {
    match name {
        "activation" => Some(Box::new(activation::Activation::default())),
        "footprint" => Some(Box::new(footprint::Footprint)),
        "cpu" => Some(Box::new(cpu::Cpu)),
        "mem" => Some(Box::new(mem::Mem)),
        "fs" => Some(Box::new(fs::Fs)),
        "security" => Some(Box::new(security::Security::default())),
        "net" => Some(Box::new(net::Net)),
        "supervise" => Some(Box::new(supervise::Supervise)),
        "api" => Some(Box::new(api::Api)),
        "cost" => Some(Box::new(cost::Cost)),
        "bind" => Some(Box::new(bind::Bind)),
        "delta" => Some(Box::new(delta::Delta)),
        "fleet" => Some(Box::new(fleet::Fleet)),
        "governor" => Some(Box::new(governor::Governor)),
        "microvm" => Some(Box::new(microvm::MicroVm)),
        "cgroups" => Some(Box::new(cgroups::Cgroups)),
        "soak" => Some(Box::new(soak::Soak)),
        "wear" => Some(Box::new(wear::Wear)),
        _ => None,
    }
}
