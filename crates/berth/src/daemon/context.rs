//! What every part of the daemon shares: the configuration, the kernel roots it reads (paths,
//! so tests can hand in fixture trees), the host's cgroup layout found at start, and the lock
//! that puts changes in order. Each module owns what it writes; this is what they all read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Mutex;
use std::time::Instant;

use berth_core::cgroup::Host;
use berth_core::config::Config;
use berth_core::state::State;
use berth_core::supervise::Event;
use berth_sys::cgroupfs::Cgroups;

pub use berth_sys::check::Roots;

pub struct Daemon {
    pub cfg: Config,
    pub roots: Roots,
    /// The host's cgroup layout and size (neither changes while the daemon runs).
    pub host: Resources,
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
    /// What happens to containers, for the supervisor (`notify`); its inbox until it runs.
    events: Mutex<Sender<(String, Event)>>,
    inbox: Mutex<Option<Receiver<(String, Event)>>>,
}

/// The host's cgroup layout (or why there is none berth can use) and its CPUs and memory.
pub struct Resources {
    pub cgroups: Result<Cgroups, String>,
    pub host: Host,
}

impl Daemon {
    pub fn new(cfg: Config, roots: Roots, host: Resources, state: State) -> Daemon {
        let (events, inbox) = std::sync::mpsc::channel();
        Daemon {
            cfg,
            roots,
            host,
            state: Mutex::new(state),
            op: Mutex::new(()),
            started: Instant::now(),
            // Shims are re-execs of this very binary: /proc/self/exe still works after a
            // package manager replaced the file on disk (the daemon and its shims agree).
            exe: PathBuf::from("/proc/self/exe"),
            guard_kills: Mutex::new(BTreeMap::new()),
            events: Mutex::new(events),
            inbox: Mutex::new(Some(inbox)),
        }
    }

    /// Tells the supervisor what happened to container `name` (never blocks).
    pub fn notify(&self, name: &str, event: Event) {
        let _ = self.events.lock().unwrap().send((name.to_string(), event));
    }

    /// The supervisor's inbox: taken once, by the supervisor.
    pub fn take_inbox(&self) -> Option<Receiver<(String, Event)>> {
        self.inbox.lock().unwrap().take()
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
