//! The supervisor: start-up reconciliation, then one thread that takes what happens to
//! containers (their starts and ends, the operator's stops, the memory guard's kills) and
//! acts on the decisions of `berth_core::supervise` (one machine per container): start
//! after a reboot, release what an ended container held, hold a restart, report. It also
//! starts its peers, the memory guard and the governor, and wires them to the runtime.

use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_core::supervise::{Action, Event, Exit, Machine, Policy, Report, Run};

use crate::daemon::cgroups;
use crate::daemon::context::Daemon;
use crate::daemon::governor;
use crate::daemon::guard;
use crate::daemon::runtime::mounts;
use crate::daemon::runtime::probe;
use crate::daemon::runtime::start;
use crate::daemon::runtime::watch;
use crate::daemon::state;
use crate::daemon::store::remove;

/// Makes the world match the state after a restart or a crash of the daemon: partial
/// downloads go, running containers are taken over, LXC directories of packages no longer
/// installed go, unused mounts go, and packages marked autostart start after a reboot.
pub(crate) fn reconcile(d: &Arc<Daemon>) -> Vec<(String, Run)> {
    remove::clear_tmp(&d.cfg);
    remove::finish_purges(d);
    cgroups::apply_group_budget(d);
    // Temporary files of atomic writes cut short (".state.json.tmp.PID.N"), wherever the
    // daemon or a shim writes atomically.
    let paths = &d.cfg.paths;
    let mut dirs = vec![
        paths.state.clone(),
        paths.state.join("limits"),
        paths.state.join("net"),
        paths.run.join("logs"),
    ];
    if let Ok(entries) = std::fs::read_dir(&paths.lxcpath) {
        dirs.extend(entries.flatten().map(|e| e.path()));
    }
    for dir in dirs {
        berth_sys::fsutil::remove_atomic_leftovers(&dir);
    }
    let st = state::state(d);
    // Leftover verification mounts of an install that was killed.
    for m in mounts::mounts(d) {
        if m.file_name()
            .and_then(|f| f.to_str())
            .is_some_and(|f| f.starts_with(".verify-"))
        {
            let _ = berth_sys::mount::umount(&m, true);
            let _ = std::fs::remove_dir(&m);
        }
    }
    let mut running = Vec::new();
    for p in st.packages.values() {
        let n = p.name.as_str();
        if !probe::is_running(d, n) {
            continue;
        }
        match probe::running_init(d, n) {
            Some(init) => {
                log::info!("taking over running container {n}");
                watch::watch(d, n, init);
                running.push((n.to_string(), init));
            }
            None => log::warn!("{n} runs but its init is not known: not watched"),
        }
    }
    if let Ok(entries) = std::fs::read_dir(&d.cfg.paths.lxcpath) {
        for e in entries.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if !st.packages.contains_key(&n) && !probe::is_running(d, &n) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    // cgroups of containers that do not run (a killed monitor leaves its own behind).
    for n in cgroups::cgroup_names(d) {
        if !running.iter().any(|(r, _)| *r == n) && !probe::is_running(d, &n) {
            cgroups::remove_stale_cgroups(d, &n);
        }
    }
    mounts::release_mounts(d);
    running
}

/// Starts the peers and the supervisor thread, which knows the runs `reconcile` took over.
/// Runs after the admin socket is up, so the CLI sees a daemon that is starting containers,
/// not none.
pub(crate) fn spawn(d: &Arc<Daemon>, taken_over: Vec<(String, Run)>) {
    guard::spawn(d, Box::new(probe::running_init));
    governor::spawn(d);
    let d = Arc::clone(d);
    let spawned = std::thread::Builder::new()
        .name("supervisor".into())
        .stack_size(256 * 1024)
        .spawn(move || Supervisor::new(d).run(&taken_over));
    if let Err(e) = spawned {
        log::error!("cannot start the supervisor: {e}");
    }
}

/// The supervisor thread's own state: a machine per container and its clock.
struct Supervisor {
    d: Arc<Daemon>,
    /// One machine per container, in the order they were first seen (a handful).
    machines: Vec<(String, Machine)>,
    policy: Policy,
    t0: Instant,
}

impl Supervisor {
    fn new(d: Arc<Daemon>) -> Supervisor {
        Supervisor {
            d,
            machines: Vec::new(),
            // Restart policies per package come with their manifest keys; until then no
            // container is restarted by berth.
            policy: Policy::never(),
            t0: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    fn run(mut self, taken_over: &[(String, Run)]) {
        self.boot(taken_over);
        loop {
            // Asleep until something happens, or until the next held restart is due.
            let due = self.machines.iter().filter_map(|(_, m)| m.due()).min();
            let until = due.map(|t| self.t0 + Duration::from_millis(t));
            match self.d.next_event(until) {
                Some((name, ev)) => self.feed(&name, ev),
                None => {
                    let names: Vec<String> = self.machines.iter().map(|(n, _)| n.clone()).collect();
                    for n in names {
                        self.feed(&n, Event::Tick);
                    }
                }
            }
        }
    }

    /// What the daemon found at its start, per installed package: the runs it took over
    /// (their ends come from their watchers, even when that is now); after a reboot /run is
    /// empty (no exit record), and what the operator had started starts again.
    fn boot(&mut self, taken_over: &[(String, Run)]) {
        let st = state::state(&self.d);
        for p in st.packages.values() {
            let n = p.name.as_str();
            let running = taken_over.iter().find(|(t, _)| t == n).map(|(_, r)| *r);
            let ended = (running.is_none() && self.d.cfg.paths.exit_file(n).exists())
                .then(|| probe::exit_of(&self.d, n));
            let ev = Event::Boot {
                running,
                autostart: self.d.cfg.paths.autostart(n).exists(),
                ended,
            };
            self.feed(n, ev);
        }
    }

    fn feed(&mut self, name: &str, ev: Event) {
        if let Event::Exited(_, e) = &ev {
            log::info!("{name} stopped: {}", describe(Some(e)));
        }
        let now = self.now_ms();
        let policy = self.policy;
        let i = match self.machines.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None => {
                self.machines
                    .push((name.to_string(), Machine::new(&policy)));
                self.machines.len() - 1
            }
        };
        let m = &mut self.machines[i].1;
        let actions = m.on(now, &ev, &policy);
        for a in actions {
            self.act(name, a);
        }
        if state::installed(&self.d, name).is_err() {
            // Removed: nothing more will happen to it.
            self.machines.retain(|(n, _)| n != name);
        }
    }

    fn act(&mut self, name: &str, a: Action) {
        let d = &self.d;
        match a {
            Action::Start => {
                let started = {
                    let _op = d.op.lock().unwrap();
                    // Removed or started by the operator meanwhile: nothing to do.
                    if state::installed(d, name).is_err() || probe::is_running(d, name) {
                        return;
                    }
                    start::start_locked(d, name)
                };
                match started {
                    Ok(_) => log::info!("started {name} (supervisor)"),
                    Err(e) => {
                        log::error!("start of {name} failed: {e}");
                        self.feed(name, Event::StartFailed);
                    }
                }
            }
            Action::Release => {
                {
                    let _op = d.op.lock().unwrap();
                    if !probe::is_running(d, name) {
                        mounts::release_mounts(d);
                        cgroups::remove_stale_cgroups(d, name);
                    }
                }
                // Rare work: give back what it allocated and the code it ran.
                berth_sys::process::trim_heap();
                berth_sys::process::release_own_code(false);
            }
            Action::Hold { until_ms } => log::info!(
                "{name}: restart in {} ms",
                until_ms.saturating_sub(self.now_ms())
            ),
            Action::Report(r) => report(&self.d, name, &r),
        }
    }
}

/// A report is logged and archived (`reports.rs`: one crash archive per event, written on
/// a short-lived thread). A guard kill was recorded and logged by the guard itself, as it
/// happened.
fn report(d: &Arc<Daemon>, name: &str, r: &Report) {
    match r {
        Report::GuardKilled(_) => {}
        Report::Failed(e) => log::warn!("{name} failed: {}", describe(e.as_ref())),
        Report::CrashLoop { restarts } => log::error!(
            "{name} keeps failing ({restarts} restarts): not restarted again until berth start {name}"
        ),
        Report::HealthFailed => log::warn!("{name}: health check failed"),
    }
    crate::daemon::reports::collect(d, name, r);
}

fn describe(e: Option<&Exit>) -> String {
    match e {
        None => "the start failed".into(),
        Some(Exit {
            signal: Some(s), ..
        }) => format!("signal {s}"),
        Some(Exit { code: Some(c), .. }) => format!("exit {c}"),
        Some(_) => "end not recorded".into(),
    }
}
