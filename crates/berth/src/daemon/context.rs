//! What every part of the daemon shares: the configuration, the kernel roots it reads (paths,
//! so tests can hand in fixture trees), the host's cgroup layout found at start, and the lock
//! that puts changes in order. Each module owns what it writes; this is what they all read.

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use berth_core::cgroup::Host;
use berth_core::config::Config;
use berth_core::state::State;
use berth_core::supervise::{Event, HealthState, Record};
use berth_sys::cgroupfs::Cgroups;

pub use berth_sys::check::Roots;

pub struct Daemon {
    pub cfg: Config,
    pub roots: Roots,
    /// The host's cgroup layout and size (neither changes while the daemon runs).
    pub resources: Resources,
    /// The installed set, as last committed (`state.rs` is its one writer).
    pub state: Mutex<State>,
    /// Serializes operations that change the store, the state or containers.
    pub op: Mutex<()>,
    pub started: Instant,
    /// Path of this executable, for re-execing shims.
    pub exe: PathBuf,
    /// The memory guard's last kill per container (`records.rs`; also in
    /// `<run>/logs/NAME.guard`).
    pub guard_kills: Mutex<BTreeMap<String, serde_json::Value>>,
    /// What the supervisor last decided per container, for `status` (`supervisor.rs` is
    /// its one writer; the health probes add their last result).
    pub supervision: Mutex<BTreeMap<String, Supervised>>,
    /// What happens to containers, for the supervisor (`notify`, `next_event`).
    inbox: Mutex<VecDeque<(String, Event)>>,
    arrived: Condvar,
}

/// One container as the supervisor sees it.
#[derive(Debug, Clone)]
pub struct Supervised {
    /// `running`, `starting`, `backoff`, `failed`, `unhealthy`, `stopping`, `stopped`.
    pub state: &'static str,
    pub record: Record,
    pub health: HealthState,
    /// Failed checks in a row.
    pub failures: u32,
    pub ready: bool,
    /// When a held restart is due.
    pub next_start: Option<Instant>,
    /// Why it is `failed` (or was last restarted).
    pub reason: Option<String>,
    /// The last probe's verdict line and output, and when (seconds since the epoch).
    pub last_check: Option<(String, u64)>,
}

/// The host's cgroup layout (or why there is none berth can use) and its CPUs and memory.
pub struct Resources {
    pub cgroups: Result<Cgroups, String>,
    pub host: Host,
}

impl Daemon {
    pub fn new(cfg: Config, roots: Roots, resources: Resources, state: State) -> Daemon {
        Daemon {
            cfg,
            roots,
            resources,
            state: Mutex::new(state),
            op: Mutex::new(()),
            started: Instant::now(),
            // Shims are re-execs of this very binary: /proc/self/exe still works after a
            // package manager replaced the file on disk (the daemon and its shims agree).
            exe: PathBuf::from("/proc/self/exe"),
            guard_kills: Mutex::new(BTreeMap::new()),
            supervision: Mutex::new(BTreeMap::new()),
            inbox: Mutex::new(VecDeque::new()),
            arrived: Condvar::new(),
        }
    }

    /// Tells the supervisor what happened to container `name` (never blocks).
    pub fn notify(&self, name: &str, event: Event) {
        self.inbox
            .lock()
            .unwrap()
            .push_back((name.to_string(), event));
        self.arrived.notify_one();
    }

    /// The supervisor's next event, waiting for one at most until `until` (for ever
    /// without); None when the time came first. (A queue and a condition variable: std's
    /// channel cost the device build 7 KiB more.)
    pub fn next_event(&self, until: Option<Instant>) -> Option<(String, Event)> {
        let mut q = self.inbox.lock().unwrap();
        loop {
            if let Some(ev) = q.pop_front() {
                return Some(ev);
            }
            q = match until {
                None => self.arrived.wait(q).unwrap(),
                Some(t) => {
                    let left = t.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    self.arrived.wait_timeout(q, left).unwrap().0
                }
            };
        }
    }

    pub fn proc(&self) -> &Path {
        &self.roots.proc
    }

    pub fn sys(&self) -> &Path {
        &self.roots.sys
    }

    /// Where the cgroup hierarchies are mounted (`<sys>/fs/cgroup`).
    pub fn cgroup_root(&self) -> PathBuf {
        self.roots.sys.join("fs/cgroup")
    }
}
