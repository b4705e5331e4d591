//! The supervisor: start-up reconciliation, then one thread that takes what happens to
//! containers (their starts and ends, the memory guard's kills) and what is asked of them
//! (every start, stop and restart, whoever asks: `runtime/control.rs`), and acts on the
//! decisions of `berth_core::supervise` (one machine per container): refuse or take an
//! intent, start after a reboot, release what an ended container held, hold a restart,
//! report. It alone carries out the runtime's work: on one short-lived worker per container
//! at a time, the container's later work queued in order, so that a long start never holds
//! up its thread (restarts, health checks, the watchdog's heartbeat). It also starts its
//! peers, the memory guard and the governor, and wires them to the runtime.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_core::api::reset as reset_field;
use berth_core::supervise::{Action, Event, Exit, Machine, Phase, Policy, Record, Report, Run};
use berth_sys::process::spawn_thread;
use serde_json::{json, Value};

use crate::daemon::base::context::{Component, Daemon, Msg, Order, Reply, Supervised};
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::device::cgroups;
use crate::daemon::device::governor;
use crate::daemon::device::guard;
use crate::daemon::device::records;
use crate::daemon::device::state;
use crate::daemon::runtime::control::{self, Intent, Who};
use crate::daemon::runtime::health;
use crate::daemon::runtime::mounts;
use crate::daemon::runtime::probe;
use crate::daemon::runtime::watch;
use crate::daemon::store::remove;

/// Makes the world match the state after a restart or a crash of the daemon: partial
/// downloads go, running containers are taken over, LXC directories of packages no longer
/// installed go, unused mounts go, and packages marked autostart start after a reboot.
pub(crate) fn reconcile(d: &Arc<Daemon>) -> Vec<(String, Run)> {
    remove::clear_tmp_but_partial_images(&d.cfg);
    remove::finish_purges(d);
    cgroups::apply_group_budget(d);
    // Temporary files of atomic writes cut short (".state.json.tmp.PID.N"), wherever the
    // daemon or a shim writes atomically.
    let paths = &d.cfg.paths;
    let mut dirs = vec![
        paths.state.clone(),
        paths.state.join("limits"),
        paths.state.join("net"),
        paths.state.join("supervise"),
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
            let _ = d.host.mounts.umount(&m, true);
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
                watch::watch(d, n, init, false);
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
    // The guard's kills are intents: the supervisor carries them out, at once.
    let sup = Arc::clone(d);
    let kill_of: guard::KillOf = Box::new(move |_, name, pid, start, init| {
        let kill = Intent::Kill { pid, start, init };
        control::act(&sup, name, kill, Who::Guard, None).map(|_| ())
    });
    guard::spawn(d, Box::new(probe::running_init), kill_of);
    governor::spawn(d);
    let sup = Arc::clone(d);
    let spawned = spawn_thread(
        "supervisor".into(),
        256 * 1024,
        Box::new(move || Supervisor::new(sup).run(&taken_over)),
    );
    match spawned {
        // From here every intent is the supervisor's (those sent before it takes them wait
        // in its inbox).
        Ok(_) => d.set_supervising(),
        Err(e) => log::error!("cannot start the supervisor: {e}"),
    }
}

/// `berth reset NAME`: out of `failed`, counts back to 0, nothing started. Answered once
/// the supervisor has taken it (it is a message to its thread), or after a second.
pub(crate) fn reset(d: &Arc<Daemon>, name: &str) -> Result<Value> {
    state::installed(d, name)?;
    d.notify(name, Event::Reset);
    let deadline = Instant::now() + Duration::from_secs(1);
    let state = loop {
        let s = d
            .supervision
            .lock()
            .unwrap()
            .get(name)
            .map(|s| (s.state, s.record));
        match s {
            Some((state, r)) if state != "failed" && r == Record::default() => break state,
            _ if Instant::now() >= deadline => break s.map_or("stopped", |(st, _)| st),
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    Ok(json!({ reset_field::NAME: name, reset_field::STATE: state }))
}

/// How long a start waits for the containers it `depends` on to be ready (their first
/// health check passed); then it starts anyway, and says so.
const READY_WAIT: Duration = Duration::from_secs(120);

/// Runtime work for a container, carried out by the supervisor's worker.
enum Job {
    /// An intent taken: the asker's (who waits for its answer) or the supervisor's own.
    Order(Order),
    /// The container ended: give back what it held, if it has not started again.
    Release,
}

/// The supervisor thread's own state: a machine per container, the starts waiting for
/// their dependencies, each container's work, and its clock.
struct Supervisor {
    d: Arc<Daemon>,
    /// One machine per container, in the order they were first seen (a handful).
    machines: Vec<(String, Machine)>,
    /// Starts held until the containers they depend on are ready, with their deadlines.
    pending: Vec<(String, u64)>,
    /// Runtime work waiting, in order (a container's after the one in flight).
    waiting: Vec<(String, Job)>,
    /// The containers whose work is in flight, on a worker each, and since when it holds
    /// what it needs.
    busy: Vec<(String, Holding)>,
    /// A worker wedged (its container named once in the log).
    wedged: bool,
    t0: Instant,
}

/// How long a worker may carry out one intent, from the time it holds the op lock, before
/// the supervisor stops beating: longer than any start or stop takes (their own bounds are
/// `start_timeout` and `stop_timeout`). A worker wedged (a shim that never answers, a kernel
/// call that never returns) is then the watchdog's to end, with the device. Its wait for the
/// op lock does not count: that is another's work, which no bound of this clock's could
/// judge (an install's downloads may hold the lock for hours on a slow link, each bounded
/// by its own deadline, size / 8 KiB/s); a holder that never returns leaves the work queued
/// behind it waiting, and the device serving.
const WEDGED: Duration = Duration::from_secs(600);

/// When a worker began to carry its job out, in seconds since the supervisor's start plus
/// one; 0 while it waits for the op lock. (32 bits: the MIPS32 devices have no 64-bit
/// atomics; seconds: 136 years of uptime.)
type Holding = Arc<AtomicU32>;

/// Now, as a [`Holding`] counts.
fn holding_now(t0: Instant) -> u32 {
    u32::try_from(t0.elapsed().as_secs()).unwrap_or(u32::MAX - 1) + 1
}

impl Supervisor {
    fn new(d: Arc<Daemon>) -> Supervisor {
        Supervisor {
            d,
            machines: Vec::new(),
            pending: Vec::new(),
            waiting: Vec::new(),
            busy: Vec::new(),
            wedged: false,
            t0: Instant::now(),
        }
    }

    /// Whether a worker has carried one intent out for longer than [`WEDGED`] (said once).
    fn wedged_worker(&mut self) -> bool {
        let now = holding_now(self.t0);
        let longest = self.busy.iter().find_map(|(name, h)| {
            let since = h.load(Ordering::Relaxed);
            let secs = now.saturating_sub(since);
            (since != 0 && u64::from(secs) > WEDGED.as_secs()).then_some((name, secs))
        });
        let Some((name, secs)) = longest else {
            self.wedged = false;
            return false;
        };
        if !self.wedged {
            log::error!(
                "{name}: its start or stop has run for {secs} s: the supervisor stops its heartbeat"
            );
            self.wedged = true;
        }
        true
    }

    fn now_ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    fn run(mut self, taken_over: &[(String, Run)]) {
        self.boot(taken_over);
        loop {
            let wedged = self.wedged_worker();
            if !wedged {
                self.d.beat(Component::Supervisor);
            }
            // Asleep until something happens, or until the next held restart, health check
            // or dependency deadline is due, or (for the watchdog) the next heartbeat.
            let due = self
                .machines
                .iter()
                .filter_map(|(_, m)| m.due())
                .chain(self.pending.iter().map(|(_, t)| *t))
                .min();
            let due = due.map(|t| self.t0 + Duration::from_millis(t));
            let beat = self.d.beat_every().map(|b| Instant::now() + b);
            let until = match (due, beat) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let msg = self.d.next(until);
            // Handling a message may take a while (a health probe's helper, a shim's
            // answer): busy, not hung.
            if !wedged {
                self.d.beat_busy(Component::Supervisor);
            }
            match msg {
                Some((name, m)) => self.handle(&name, m),
                None if due.is_none_or(|t| Instant::now() < t) => {}
                None => {
                    let now = self.now_ms();
                    let names: Vec<String> = self
                        .machines
                        .iter()
                        .filter(|(_, m)| m.due().is_some_and(|t| t <= now))
                        .map(|(n, _)| n.clone())
                        .collect();
                    for n in names {
                        self.feed(&n, Event::Tick);
                    }
                }
            }
            self.start_pending();
        }
    }

    fn handle(&mut self, name: &str, m: Msg) {
        match m {
            Msg::Event(ev) => self.feed(name, ev),
            Msg::Order(o) => self.take(name, o),
            Msg::Done => self.done(name),
        }
    }

    /// What the daemon found at its start, per installed package: the runs it took over
    /// (their ends come from their watchers, even when that is now); after a reboot /run is
    /// empty (no exit record), and what the operator had started starts again, unless the
    /// supervisor's record says it had failed.
    fn boot(&mut self, taken_over: &[(String, Run)]) {
        // In safe mode nothing starts; `safe_mode::clear` sends these events later.
        if self.d.safe_mode().is_some() {
            return;
        }
        let st = state::state(&self.d);
        // Dependencies first, so that a start can see what it must wait for.
        let mut order: Vec<&str> = Vec::new();
        while order.len() < st.packages.len() {
            let before = order.len();
            for p in st.packages.values() {
                let n = p.name.as_str();
                let deps_placed = p.manifest.package.depends.iter().all(|dep| {
                    order.contains(&dep.as_str()) || !st.packages.contains_key(dep.as_str())
                });
                if !order.contains(&n) && deps_placed {
                    order.push(n);
                }
            }
            if order.len() == before {
                // A cycle (not installable, but never loop on a damaged state).
                order.extend(
                    st.packages
                        .keys()
                        .map(|k| k.as_str())
                        .filter(|k| !order.contains(k))
                        .collect::<Vec<_>>(),
                );
            }
        }
        for n in order {
            let running = taken_over.iter().find(|(t, _)| t == n).map(|(_, r)| *r);
            let ended = (running.is_none() && self.d.cfg.paths.exit_file(n).exists())
                .then(|| probe::exit_of(&self.d, n));
            let ev = Event::Boot {
                running,
                autostart: self.d.cfg.paths.autostart(n).exists(),
                ended,
                record: records::load_supervised(&self.d, n),
            };
            self.feed(n, ev);
        }
    }

    fn feed(&mut self, name: &str, ev: Event) {
        if let Event::Exited(_, e) = &ev {
            log::info!("{name} stopped: {}", describe(Some(e)));
        }
        let Some(policy) = policy_of(&self.d, name) else {
            // Removed: nothing more will happen to it.
            self.forget(name);
            return;
        };
        let now = self.now_ms();
        let i = match self.machines.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None => {
                self.machines
                    .push((name.to_string(), Machine::new(seed(name))));
                self.machines.len() - 1
            }
        };
        let m = &mut self.machines[i].1;
        let before = match &ev {
            Event::Boot { record, .. } => *record,
            _ => m.record(),
        };
        let actions = m.on(now, &ev, &policy);
        let after = m.record();
        if after != before {
            records::save_supervised(&self.d, name, &after);
        }
        self.publish(name, &actions);
        for a in actions {
            self.act(name, a, now);
        }
    }

    /// A removed package: its machine, its held start and its view go.
    fn forget(&mut self, name: &str) {
        self.machines.retain(|(n, _)| n != name);
        self.pending.retain(|(n, _)| n != name);
        self.d.supervision.lock().unwrap().remove(name);
    }

    /// Puts what the machine now says where `status` reads it.
    fn publish(&self, name: &str, actions: &[Action]) {
        let Some((_, m)) = self.machines.iter().find(|(n, _)| n == name) else {
            return;
        };
        let (health, failures) = m.health();
        let mut views = self.d.supervision.lock().unwrap();
        let v = views.entry(name.to_string()).or_insert_with(|| Supervised {
            state: "stopped",
            record: Record::default(),
            health,
            failures,
            ready: false,
            next_start: None,
            run: None,
            started_at: None,
            self_restart_at: None,
            reason: None,
            last_check: None,
        });
        v.state = m.state();
        v.record = m.record();
        v.health = health;
        v.failures = failures;
        v.ready = m.ready();
        v.next_start = match m.phase() {
            Phase::Waiting { until_ms } => Some(self.t0 + Duration::from_millis(until_ms)),
            _ => None,
        };
        if v.run != m.run() {
            // A new run (or a run taken over): its start as its shim says, once; no check
            // of it yet (a check it could not have still shows, with no verdict counted).
            v.last_check = None;
            v.started_at = m.run().and_then(|_| {
                probe::shim_info(&self.d, name)[berth_core::api::container::STARTED_AT].as_u64()
            });
        }
        v.run = m.run();
        v.self_restart_at = m
            .self_restart_at()
            .map(|t| self.t0 + Duration::from_millis(t));
        for a in actions {
            if let Action::Report(r) = a {
                v.reason = Some(reason(r));
            }
        }
    }

    /// `now` is the machine's clock at the event that asked for `a`.
    fn act(&mut self, name: &str, a: Action, now: u64) {
        let d = &self.d;
        match a {
            Action::Start => {
                if let Some(deadline) = self.waits_for_dependencies(name) {
                    if !self.pending.iter().any(|(n, _)| n == name) {
                        self.pending.push((name.to_string(), deadline));
                    }
                    return;
                }
                self.start(name);
            }
            // Under the op lock, which is not this thread's to wait for.
            Action::Release => self.queue(name, Job::Release),
            Action::Hold { until_ms } => {
                log::info!("{name}: restart in {} ms", until_ms.saturating_sub(now))
            }
            Action::Check(run) => {
                if let Ok(p) = state::installed(d, name) {
                    health::check(d, name, run, &p.manifest);
                }
            }
            Action::Kill(run) => self.queue(name, Job::Order(own(Intent::EndRun { run }))),
            Action::Report(r) => report(&self.d, name, &r),
        }
    }

    fn start(&mut self, name: &str) {
        self.take(name, own(Intent::Start));
    }

    /// An intent for `name`: its machine takes or refuses it (refused, the asker has the
    /// reason at once); taken, it is carried out after the container's earlier work, or at
    /// once when its asker holds the op lock (nothing else runs a start or a stop then).
    fn take(&mut self, name: &str, o: Order) {
        let safe = self.d.boot.safe_mode.lock().unwrap().is_some();
        let verdict = match self.machines.iter_mut().find(|(n, _)| n == name) {
            Some((_, m)) => m.ask(&o.intent, o.who, safe),
            // Never seen (not installed, or before its first event): nothing to keep.
            None => Machine::new(1).ask(&o.intent, o.who, safe),
        };
        // What the intent changed (a held restart dropped) shows at once.
        self.publish(name, &[]);
        if let Err(r) = verdict {
            let e = control::refused(&self.d, name, o.intent, o.who, r);
            // The supervisor's own start, in safe mode: its machine knows.
            if let Some(reply) = o.reply {
                reply.give(Err(e));
            }
            return;
        }
        if matches!(o.intent, Intent::Kill { .. }) {
            // The guard's kill, here and now: a signal and a record, beside whatever the
            // container's worker does, and no thread to create when memory is short.
            work(&self.d, name, Job::Order(o), &|| {});
        } else if o.lent {
            self.spawn(name, Job::Order(o));
        } else {
            self.queue(name, Job::Order(o));
        }
    }

    /// Queues `job` for `name`, started at once if nothing is carried out for `name` now.
    fn queue(&mut self, name: &str, job: Job) {
        self.waiting.push((name.to_string(), job));
        self.pump();
    }

    /// `name`'s worker has ended: its next job, if any.
    fn done(&mut self, name: &str) {
        self.busy.retain(|(n, _)| n != name);
        self.pump();
    }

    /// Starts the first waiting job of each container that has none in flight.
    fn pump(&mut self) {
        let mut i = 0;
        while i < self.waiting.len() {
            if self.busy.iter().any(|(n, _)| *n == self.waiting[i].0) {
                i += 1;
                continue;
            }
            let (name, job) = self.waiting.remove(i);
            // A start of its own that an operator's stop overtook (or a removal): dropped.
            let stale = matches!(&job, Job::Order(o) if o.who == Who::Supervisor
                && o.intent == Intent::Start
                && !self.machines.iter().any(|(n, m)| *n == name && m.phase() == Phase::Starting));
            if stale {
                continue;
            }
            if let Some(holding) = self.spawn(&name, job) {
                self.busy.push((name, holding));
            }
        }
    }

    /// Carries `job` out for `name` on a worker of its own (under the op lock, or under the
    /// asker's hold of it), which answers the asker and tells this thread when it is done.
    /// When it holds the op lock, if the worker runs.
    fn spawn(&mut self, name: &str, job: Job) -> Option<Holding> {
        let d = Arc::clone(&self.d);
        let holding = Holding::default();
        let (held, t0) = (Arc::clone(&holding), self.t0);
        let n = name.to_string();
        // Kept here too, for an answer if the worker cannot start.
        let (lent, reply, own_start) = match &job {
            // The guard's kill runs beside the container's work, not after it.
            Job::Order(o) => (o.lent, o.reply.clone(), o.intent == Intent::Start),
            Job::Release => (false, None, false),
        };
        let answer = reply.clone();
        let spawned = spawn_thread(
            format!("act-{name}"),
            256 * 1024,
            Box::new(move || {
                let _finish = Finish {
                    d: &d,
                    name: &n,
                    done: !lent,
                    reply: answer,
                };
                let began = || held.store(holding_now(t0), Ordering::Relaxed);
                work(&d, &n, job, &began);
            }),
        );
        match (spawned, reply) {
            (Ok(_), _) => return Some(holding),
            (Err(e), Some(reply)) => reply.give(Err(Error::internal(e))),
            (Err(_), None) if own_start => self.feed(name, Event::StartFailed),
            // An end or a release that the next one makes up for.
            (Err(_), None) => {}
        }
        None
    }

    /// Whether `name` must wait for a dependency that is on its way up but not ready yet;
    /// the deadline of the wait if so. Dependencies that nobody starts are not waited for.
    fn waits_for_dependencies(&self, name: &str) -> Option<u64> {
        let now = self.now_ms();
        if let Some((_, deadline)) = self.pending.iter().find(|(n, _)| n == name) {
            if now >= *deadline {
                log::warn!(
                    "{name}: its dependencies are not ready after {} s; starting it anyway",
                    READY_WAIT.as_secs()
                );
                return None;
            }
        }
        let deps = state::installed(&self.d, name)
            .ok()?
            .manifest
            .package
            .depends;
        let waiting = deps.iter().any(|dep| {
            self.machines.iter().any(|(n, m)| {
                n == dep.as_str()
                    && !m.ready()
                    && matches!(
                        m.phase(),
                        Phase::Starting | Phase::Running | Phase::Waiting { .. }
                    )
            })
        });
        waiting.then(|| {
            self.pending
                .iter()
                .find(|(n, _)| n == name)
                .map_or(now + READY_WAIT.as_millis() as u64, |(_, t)| *t)
        })
    }

    /// Starts what waited for dependencies that are now ready (or waited long enough).
    fn start_pending(&mut self) {
        let mut i = 0;
        while i < self.pending.len() {
            let name = self.pending[i].0.clone();
            if self.waits_for_dependencies(&name).is_some() {
                i += 1;
                continue;
            }
            self.pending.remove(i);
            // Still meant to start (not stopped or removed meanwhile).
            if self
                .machines
                .iter()
                .any(|(n, m)| *n == name && m.phase() == Phase::Starting)
            {
                self.start(&name);
            }
        }
    }
}

/// The supervisor's own intent (nobody waits for its answer).
fn own(intent: Intent) -> Order {
    Order {
        intent,
        who: Who::Supervisor,
        lent: false,
        trace: None,
        reply: None,
    }
}

/// A worker's end: the supervisor told it is done (unless its asker lent the op lock), and,
/// should the worker panic (a test build unwinds), its asker answered rather than left
/// waiting.
struct Finish<'a> {
    d: &'a Daemon,
    name: &'a str,
    done: bool,
    reply: Option<Arc<Reply>>,
}

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(r) = &self.reply {
                r.give(Err(Error::internal(format!(
                    "{}: the work carrying it out panicked",
                    self.name
                ))));
            }
        }
        if self.done {
            self.d.done(self.name);
        }
    }
}

/// A worker's job for container `name`; `began` once it holds what it needs.
fn work(d: &Arc<Daemon>, name: &str, job: Job, began: &dyn Fn()) {
    let o = match job {
        Job::Release => {
            {
                let _op = d.op.lock().unwrap();
                began();
                if !probe::is_running(d, name) {
                    mounts::release_mounts(d);
                    cgroups::reap(d, name);
                }
            }
            // Rare work: give back what it allocated and the code it ran.
            berth_sys::process::trim_heap();
            crate::daemon::base::context::release_code(false);
            return;
        }
        Job::Order(o) => o,
    };
    let r = {
        // A kill takes no op lock: it ends a container whatever its worker is doing.
        let kill = matches!(o.intent, Intent::Kill { .. });
        let _op = (!o.lent && !kill).then(|| d.op.lock().unwrap());
        began();
        let own_start = o.who == Who::Supervisor && o.intent == Intent::Start;
        // Removed or started by the operator meanwhile: nothing to do.
        if own_start && (state::installed(d, name).is_err() || probe::is_running(d, name)) {
            Ok(Value::Null)
        } else {
            let trace = o.trace.map(crate::daemon::runtime::start::Stamps::from);
            control::execute(d, name, o.intent, o.who, trace)
        }
    };
    match (o.reply, o.intent, r) {
        (Some(reply), _, r) => reply.give(r),
        (None, _, Ok(Value::Null)) => {}
        (None, Intent::Start, Ok(_)) => log::info!("started {name} (supervisor)"),
        // Safe mode entered while the start waited for the op lock: no failure of the
        // container's, which stays stopped until safe mode is cleared.
        (None, Intent::Start, Err(e)) if e.kind == Kind::SafeMode => {
            log::info!("{name}: not started: {e}");
            d.notify(name, Event::StopRequested);
        }
        (None, Intent::Start, Err(e)) => {
            log::error!("start of {name} failed: {e}");
            d.notify(name, Event::StartFailed);
        }
        (None, Intent::EndRun { run }, Err(e)) => {
            log::warn!("{name}: cannot end its run (init pid {run}): {e}")
        }
        (None, _, _) => {}
    }
}

/// The supervision policy of an installed package; None once it is removed.
fn policy_of(d: &Daemon, name: &str) -> Option<Policy> {
    d.state
        .lock()
        .unwrap()
        .packages
        .get(name)
        .map(|p| Policy::of(&p.manifest))
}

/// Jitter per container and per daemon start, so that a fleet's devices and a device's
/// containers do not restart in step.
fn seed(name: &str) -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    name.bytes().fold(t ^ std::process::id(), |h, b| {
        h.rotate_left(5) ^ u32::from(b)
    })
}

/// The reason `status` shows for a report.
fn reason(r: &Report) -> String {
    match r {
        Report::Failed(e) => describe(e.as_ref()),
        Report::CrashLoop { retries } => {
            format!("failed again after {retries} restarts (berth start or berth reset)")
        }
        Report::Unhealthy { failures } => format!("{failures} health checks in a row failed"),
        Report::WatchdogExpired { period_ms } => {
            format!("no keep-alive within {period_ms} ms ([health] watchdog)")
        }
        Report::GuardKilled(k) => format!("memory guard killed pid {}", k.pid),
        Report::UpgradeFailed { from, why } => format!("upgrade from {from} rolled back: {why}"),
        Report::OomKilled { kills } => {
            format!("the kernel's OOM killer killed {kills} of its processes")
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
        Report::CrashLoop { retries } => log::error!(
            "{name} keeps failing ({retries} restarts): not restarted again until berth start {name} or berth reset {name}"
        ),
        Report::Unhealthy { failures } => {
            log::warn!("{name}: {failures} health checks in a row failed; ending it")
        }
        Report::WatchdogExpired { period_ms } => {
            log::warn!("{name}: no keep-alive within {period_ms} ms ([health] watchdog); ending it")
        }
        Report::UpgradeFailed { .. } => {}
        Report::OomKilled { kills } => log::warn!(
            "{name}: the kernel's OOM killer killed {kills} of its processes (its memory limit)"
        ),
    }
    crate::daemon::ops::reports::collect(d, name, r);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::error::Kind;
    use crate::daemon::base::testing::{fake_daemon, install, MANIFEST};
    use crate::daemon::runtime::probe::tests::{info, lxc_config, FakeShim};
    use berth_core::supervise::SELF_RESTARTS_FREE;
    use berth_testkit::fake_host::FakeMounts;
    use berth_testkit::TempDir;
    use std::path::Path;

    /// A daemon with `web` installed (not running).
    fn setup(tag: &str) -> (TempDir, Arc<Daemon>, &'static FakeMounts) {
        let (dir, d, m) = fake_daemon(tag, "");
        install(&d, MANIFEST);
        (dir, Arc::new(d), m)
    }

    fn mark_autostart(d: &Daemon, name: &str) {
        let p = d.cfg.paths.autostart(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"").unwrap();
    }

    fn boot(autostart: bool, ended: Option<Exit>) -> Event {
        Event::Boot {
            running: None,
            autostart,
            ended,
            record: Record::default(),
        }
    }

    fn view(d: &Daemon, name: &str) -> Option<(&'static str, Option<String>, bool)> {
        d.supervision
            .lock()
            .unwrap()
            .get(name)
            .map(|v| (v.state, v.reason.clone(), v.next_start.is_some()))
    }

    /// Takes the supervisor's messages, as its thread would, until `until` holds (a minute
    /// at most).
    fn serve_until(s: &mut Supervisor, what: &str, until: impl Fn(&Supervisor) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !until(s) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            if let Some((n, m)) = s.d.next(Some(Instant::now() + Duration::from_millis(20))) {
                s.handle(&n, m);
            }
        }
    }

    fn idle(s: &Supervisor) -> bool {
        s.waiting.is_empty() && s.busy.is_empty()
    }

    /// Takes the supervisor's messages until every container's work is done.
    fn settle(s: &mut Supervisor) {
        serve_until(s, "the work to be done", idle);
    }

    /// `intent` asked by `who` as its asker asks (`control::act`, which waits), with this
    /// test's thread as the supervisor's: the answer.
    fn ask(s: &mut Supervisor, name: &str, intent: Intent, who: Who) -> Result<Value> {
        let d = Arc::clone(&s.d);
        let n = name.to_string();
        let asker = std::thread::spawn(move || control::act(&d, &n, intent, who, None));
        serve_until(s, "the answer", |s| asker.is_finished() && idle(s));
        asker.join().unwrap()
    }

    /// The answer as the admin API writes it.
    fn bytes(r: Result<Value>) -> Vec<u8> {
        match r {
            Ok(v) => v.to_string().into_bytes(),
            Err(e) => e.response(),
        }
    }

    const STOP: Intent = Intent::Stop { timeout: None };

    /// What a start leaves behind (LXC's configuration, a mount): none of it.
    fn nothing_started(d: &Daemon, m: &FakeMounts, name: &str) {
        assert!(!d.cfg.paths.lxc_dir(name).exists(), "configured");
        assert!(m.calls().is_empty(), "{:?}", m.calls());
    }

    /// After a restart of the daemon: atomic writes cut short, verification mounts of a
    /// killed install and LXC directories of packages no longer installed go; a running
    /// container is taken over with its init; an installed package's directory stays.
    #[test]
    fn reconcile_clears_leftovers_and_takes_over_what_runs() {
        let (_dir, d, m) = setup("sup-reconcile");
        let paths = &d.cfg.paths;
        let leftover = paths.state.join(".state.json.tmp.123.1");
        std::fs::write(&leftover, b"half").unwrap();
        let verify = paths.run.join("mnt").join(".verify-abc");
        std::fs::create_dir_all(&verify).unwrap();
        d.host
            .mounts
            .mount_squashfs(Path::new("/img"), &verify)
            .unwrap();
        let gone = paths.lxc_dir("gone");
        std::fs::create_dir_all(&gone).unwrap();
        std::fs::write(gone.join("config"), b"").unwrap();
        lxc_config(&d, "web");
        let _shim = FakeShim::start(&d, "web", info(4242), b"");
        let running = reconcile(&d);
        assert_eq!(running, [("web".to_string(), 4242)]);
        assert!(!leftover.exists() && !verify.exists() && !gone.exists());
        assert!(paths.lxc_dir("web").join("config").exists());
        assert!(m.mounted().is_empty(), "{:?}", m.mounted());
        // The verification mount goes at once, lazily (a killed install may hold it busy).
        assert!(
            m.calls()
                .contains(&format!("umount {} lazy", verify.display())),
            "{:?}",
            m.calls()
        );
    }

    /// In safe mode the supervisor's boot starts nothing and judges nothing.
    #[test]
    fn boot_in_safe_mode_starts_nothing() {
        let (_dir, d, m) = setup("sup-boot-safe");
        mark_autostart(&d, "web");
        *d.boot.safe_mode.lock().unwrap() = Some("3 failed starts".into());
        let mut s = Supervisor::new(Arc::clone(&d));
        s.boot(&[]);
        assert!(s.machines.is_empty());
        assert!(d.supervision.lock().unwrap().is_empty());
        nothing_started(&d, m, "web");
    }

    /// A start the machine asks for while safe mode is on is no start and no failure: the
    /// machine is told it was stopped, nothing is mounted or configured.
    #[test]
    fn a_start_in_safe_mode_is_a_stop() {
        let (_dir, d, m) = setup("sup-start-safe");
        *d.boot.safe_mode.lock().unwrap() = Some("3 failed starts".into());
        let mut s = Supervisor::new(Arc::clone(&d));
        s.feed("web", boot(true, None));
        assert_eq!(view(&d, "web"), Some(("stopped", None, false)));
        assert_eq!(s.machines[0].1.phase(), Phase::Stopped);
        nothing_started(&d, m, "web");
    }

    /// A start of a package removed meanwhile does nothing (its view is not forgotten as
    /// it would be after a failed start), and neither does one of a package that already
    /// runs (no failed start counted).
    #[test]
    fn a_start_of_a_removed_or_running_package_does_nothing() {
        let (_dir, d, m) = setup("sup-start-gone");
        let mut s = Supervisor::new(Arc::clone(&d));
        *d.boot.safe_mode.lock().unwrap() = Some("held".into());
        s.feed("web", boot(true, None));
        *d.boot.safe_mode.lock().unwrap() = None;
        d.state.lock().unwrap().packages.clear();
        s.act("web", Action::Start, 0);
        settle(&mut s);
        assert_eq!(view(&d, "web"), Some(("stopped", None, false)));
        nothing_started(&d, m, "web");

        install(&d, MANIFEST);
        lxc_config(&d, "web");
        let _shim = FakeShim::start(&d, "web", info(4242), b"");
        s.act("web", Action::Start, 0);
        settle(&mut s);
        assert_eq!(view(&d, "web"), Some(("stopped", None, false)));
        assert_eq!(s.machines[0].1.record(), Record::default());
    }

    /// A run that ended while no daemon watched, marked to start: a restart is held
    /// (backoff, its time shown), the failure is the reason, and nothing starts yet; the
    /// record is saved.
    #[test]
    fn a_failed_end_at_boot_holds_a_restart() {
        let (_dir, d, m) = setup("sup-hold");
        let mut s = Supervisor::new(Arc::clone(&d));
        let exit = Exit {
            code: Some(3),
            signal: None,
        };
        s.feed("web", boot(true, Some(exit)));
        let (state, reason, next) = view(&d, "web").unwrap();
        assert_eq!(
            (state, reason.as_deref(), next),
            ("backoff", Some("exit 3"), true)
        );
        nothing_started(&d, m, "web");
        let saved = records::load_supervised(&d, "web");
        assert_eq!(saved, s.machines[0].1.record());
        assert_ne!(saved, Record::default());
    }

    /// Release: what a container that no longer runs held is unmounted; while it runs,
    /// nothing is.
    #[test]
    fn release_unmounts_what_a_stopped_container_held() {
        let (_dir, d, m) = setup("sup-release");
        let rootfs = d.cfg.paths.rootfs("web");
        std::fs::create_dir_all(&rootfs).unwrap();
        lxc_config(&d, "web");
        let shim = FakeShim::start(&d, "web", info(4242), b"");
        d.host
            .mounts
            .bind(Path::new("/src"), &rootfs, true)
            .unwrap();
        let mut s = Supervisor::new(Arc::clone(&d));
        s.act("web", Action::Release, 0);
        settle(&mut s);
        assert_eq!(m.mounted(), std::slice::from_ref(&rootfs));
        drop(shim);
        assert!(!probe::is_running(&d, "web"));
        s.act("web", Action::Release, 0);
        settle(&mut s);
        assert!(m.mounted().is_empty(), "{:?}", m.calls());
    }

    /// A removed package's machine, held start and view go at its next event.
    #[test]
    fn an_event_of_a_removed_package_forgets_it() {
        let (_dir, d, _m) = setup("sup-forget");
        let mut s = Supervisor::new(Arc::clone(&d));
        s.feed("web", boot(false, None));
        s.pending.push(("web".into(), 1));
        assert!(view(&d, "web").is_some());
        d.state.lock().unwrap().packages.clear();
        s.feed("web", Event::StartFailed);
        assert!(s.machines.is_empty() && s.pending.is_empty());
        assert_eq!(view(&d, "web"), None);
    }

    /// `berth reset`: refused for a package not installed; otherwise the supervisor is sent
    /// the reset, and without its answer the state it shows is said after a second.
    #[test]
    fn reset_sends_the_reset_and_answers_the_state() {
        let (_dir, d, _m) = setup("sup-reset");
        let e = reset(&d, "nginx").unwrap_err();
        assert_eq!(e.kind, Kind::NotInstalled);
        assert!(e.message.contains("nginx"), "{}", e.message);
        assert!(d.next_event(Some(Instant::now())).is_none());

        let mut s = Supervisor::new(Arc::clone(&d));
        s.feed("web", boot(false, None));
        assert_eq!(
            reset(&d, "web").unwrap(),
            json!({"name": "web", "state": "stopped"})
        );
        assert!(matches!(
            d.next_event(Some(Instant::now())),
            Some((n, Event::Reset)) if n == "web"
        ));
        d.supervision.lock().unwrap().get_mut("web").unwrap().state = "failed";
        let t0 = Instant::now();
        assert_eq!(
            reset(&d, "web").unwrap(),
            json!({"name": "web", "state": "failed"})
        );
        assert!(t0.elapsed() >= Duration::from_secs(1));
    }

    /// Every asker's intent reaches the supervisor's inbox (the daemon's own, before the
    /// supervisor runs, is carried out where it is asked); the supervisor carries out one
    /// intent of a container at a time, in the order they came, another container's beside
    /// them, and each asker has the runtime's answer.
    #[test]
    fn intents_of_every_asker_reach_the_supervisor_and_run_in_order_per_container() {
        let (_dir, d, _m) = setup("sup-order");
        install(&d, &MANIFEST.replace("\"web\"", "\"db\""));
        d.set_supervising();
        let mut s = Supervisor::new(Arc::clone(&d));
        // The daemon's own: not the supervisor's.
        let direct = control::act(&d, "web", STOP, Who::Daemon, None);
        assert_eq!(direct.as_ref().unwrap_err().kind, Kind::NotRunning);
        assert!(d.next(Some(Instant::now())).is_none(), "nothing sent");

        let askers = [Who::Operator, Who::Container, Who::Upgrade, Who::Schedule];
        // Held, so that no worker gets far before every intent is in.
        let op = d.op.lock().unwrap();
        let mut threads = Vec::new();
        for (i, who) in askers.into_iter().enumerate() {
            let intent = match i % 2 {
                0 => STOP,
                _ => Intent::EndRun { run: 7 },
            };
            threads.push(std::thread::spawn({
                let d = Arc::clone(&d);
                move || control::act(&d, "web", intent, who, None)
            }));
            let (n, m) = d
                .next(Some(Instant::now() + Duration::from_secs(60)))
                .unwrap();
            match &m {
                Msg::Order(o) => assert_eq!((n.as_str(), o.who, o.intent), ("web", who, intent)),
                _ => panic!("{who:?}: not an order"),
            }
            s.handle(&n, m);
        }
        let db = std::thread::spawn({
            let d = Arc::clone(&d);
            move || control::act(&d, "db", STOP, Who::Operator, None)
        });
        serve_until(&mut s, "db's order", |s| {
            s.busy.iter().any(|(n, _)| n == "db")
        });
        let q = |s: &Supervisor, n: &str| {
            let busy = s.busy.iter().any(|(b, _)| b == n);
            let waiting = s.waiting.iter().filter(|(w, _)| w == n).count();
            (busy || waiting > 0).then_some((busy, waiting))
        };
        assert_eq!(
            q(&s, "web"),
            Some((true, 3)),
            "one in flight, the others wait"
        );
        assert_eq!(q(&s, "db"), Some((true, 0)), "beside web's");
        drop(op);
        for (i, t) in threads.into_iter().enumerate() {
            // Answered in order: the next is not carried out before this one's end is told.
            let r = t.join().unwrap();
            match i % 2 {
                0 => assert_eq!(
                    String::from_utf8(bytes(r)).unwrap(),
                    String::from_utf8(
                        Error::new(Kind::NotRunning, "web is not running").response()
                    )
                    .unwrap()
                ),
                _ => assert_eq!(r.unwrap(), Value::Null, "that run is not web's"),
            }
            if i + 1 < askers.len() {
                assert_eq!(q(&s, "web").map(|q| q.1), Some(askers.len() - 1 - i));
            }
            serve_until(&mut s, "web's next", |s| {
                q(s, "web").is_none_or(|(busy, left)| busy && left + i + 2 == askers.len())
            });
        }
        assert_eq!(db.join().unwrap().unwrap_err().kind, Kind::NotRunning);
        settle(&mut s);
    }

    /// The memory guard's kill is an intent too, carried out at once: beside the
    /// container's work in flight, without the op lock (held here for minutes, as an install
    /// may), its answer the kill's (a process that is gone: `not_running`).
    #[test]
    fn the_guards_kill_is_carried_out_at_once() {
        let (_dir, d, _m) = setup("sup-guard");
        d.set_supervising();
        let mut s = Supervisor::new(Arc::clone(&d));
        let op = d.op.lock().unwrap();
        let stop = std::thread::spawn({
            let d = Arc::clone(&d);
            move || control::act(&d, "web", STOP, Who::Operator, None)
        });
        serve_until(&mut s, "the stop in flight", |s| !s.busy.is_empty());
        let kill = Intent::Kill {
            pid: 999_999,
            start: 1,
            init: 999_998,
        };
        let guard = std::thread::spawn({
            let d = Arc::clone(&d);
            move || control::act(&d, "web", kill, Who::Guard, None)
        });
        serve_until(&mut s, "the kill's answer", |_| guard.is_finished());
        let e = guard.join().unwrap().unwrap_err();
        assert_eq!(e.kind, Kind::NotRunning, "{}", e.message);
        assert_eq!(s.busy[0].0, "web", "the stop still waits for the op lock");
        assert_eq!(s.busy.len(), 1);
        drop(op);
        settle(&mut s);
        assert_eq!(stop.join().unwrap().unwrap_err().kind, Kind::NotRunning);
    }

    /// The asker has the answer the runtime gave, byte for byte what it gave without the
    /// supervisor in between.
    #[test]
    fn the_asker_gets_the_runtimes_answer() {
        let (_dir, d, _m) = setup("sup-answer");
        let cases = [
            ("web", STOP, Who::Operator),
            ("nginx", STOP, Who::Operator),
            ("nginx", Intent::Start, Who::Operator),
            ("nginx", Intent::Restart, Who::Operator),
            ("web", Intent::EndRun { run: 9 }, Who::Supervisor),
        ];
        let direct: Vec<Vec<u8>> = cases
            .iter()
            .map(|(n, i, w)| bytes(control::act(&d, n, *i, *w, None)))
            .collect();
        d.set_supervising();
        let mut s = Supervisor::new(Arc::clone(&d));
        for ((n, i, w), want) in cases.into_iter().zip(direct) {
            let got = bytes(ask(&mut s, n, i, w));
            assert_eq!(
                String::from_utf8(got).unwrap(),
                String::from_utf8(want).unwrap(),
                "{n} {i:?}"
            );
        }
    }

    /// In safe mode no start goes ahead, whoever asks: refused as the start itself refuses
    /// (a scheduled run's says why it was skipped), nothing mounted or configured.
    #[test]
    fn safe_mode_refuses_a_start_from_every_asker() {
        let (_dir, d, m) = setup("sup-safe-all");
        *d.boot.safe_mode.lock().unwrap() = Some("3 failed starts".into());
        d.set_supervising();
        let mut s = Supervisor::new(Arc::clone(&d));
        let refusal = |what: &str| {
            format!("{what} web: the device is in safe mode (3 failed starts); berth safe-mode clear returns to normal")
        };
        let all = [
            Who::Operator,
            Who::Container,
            Who::Schedule,
            Who::Upgrade,
            Who::Daemon,
            Who::Supervisor,
            Who::Guard,
        ];
        for who in all {
            for (intent, what) in [(Intent::Start, "start"), (Intent::Restart, "restart")] {
                let e = ask(&mut s, "web", intent, who).unwrap_err();
                let want = match who {
                    Who::Schedule => (
                        Kind::Busy,
                        "safe mode (3 failed starts): nothing starts".into(),
                    ),
                    // The start's own refusal (a restart first stops what runs).
                    Who::Daemon => (Kind::SafeMode, refusal("start")),
                    _ => (Kind::SafeMode, refusal(what)),
                };
                assert_eq!((e.kind, e.message), want, "{who:?} {intent:?}");
            }
        }
        // The supervisor's own start, as its machine asks for it.
        s.feed("web", boot(true, None));
        settle(&mut s);
        assert_eq!(s.machines[0].1.phase(), Phase::Stopped);
        nothing_started(&d, m, "web");
    }

    /// Safe mode entered while the supervisor's own start waited for the op lock (taken by
    /// its machine, refused by the start itself): no failure of the container's, which
    /// stays stopped until safe mode is cleared.
    #[test]
    fn a_start_overtaken_by_safe_mode_is_no_failure() {
        let (_dir, d, m) = setup("sup-safe-late");
        *d.boot.safe_mode.lock().unwrap() = Some("entered".into());
        work(&d, "web", Job::Order(own(Intent::Start)), &|| {});
        let t = Instant::now() + Duration::from_secs(5);
        assert_eq!(
            d.next_event(Some(t)),
            Some(("web".to_string(), Event::StopRequested))
        );
        nothing_started(&d, m, "web");
    }

    /// A worker that carries one intent out for longer than any start or stop may take
    /// stops the supervisor's heartbeat (the watchdog's to end), and only while it lasts.
    #[test]
    fn a_wedged_worker_stops_the_heartbeat() {
        let (_dir, d, _m) = setup("sup-wedged");
        let mut s = Supervisor::new(Arc::clone(&d));
        assert!(!s.wedged_worker());
        let holding = Holding::default();
        s.busy.push(("web".into(), Arc::clone(&holding)));
        let Some(long_ago) = Instant::now().checked_sub(WEDGED + Duration::from_secs(1)) else {
            panic!("this machine's monotonic clock started less than 10 minutes ago");
        };
        // Waiting for the op lock (another's install) for longer: not wedged.
        s.t0 = long_ago;
        assert!(
            !s.wedged_worker(),
            "a worker waiting for the op lock is no wedged one"
        );
        holding.store(holding_now(s.t0), Ordering::Relaxed);
        assert!(!s.wedged_worker(), "a worker at work is no wedged one");
        holding.store(1, Ordering::Relaxed);
        assert!(s.wedged_worker());
        assert!(s.wedged_worker(), "still wedged (said once)");
        s.done("web");
        assert!(!s.wedged_worker());
    }

    /// A worker's clock starts once it holds the op lock, not while it waits for it.
    #[test]
    fn a_workers_clock_starts_once_it_holds_the_op_lock() {
        let (_dir, d, _m) = setup("sup-holding");
        let mut s = Supervisor::new(Arc::clone(&d));
        let op = d.op.lock().unwrap();
        let holding = s.spawn("web", Job::Release).expect("the worker runs");
        // Time for the worker to reach the lock (it cannot pass it).
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            holding.load(Ordering::Relaxed),
            0,
            "waiting for the op lock"
        );
        drop(op);
        let deadline = Instant::now() + Duration::from_secs(30);
        while holding.load(Ordering::Relaxed) == 0 {
            assert!(
                Instant::now() < deadline,
                "the worker never took the op lock"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The operator's stop while a crash restart is held drops it at once: stopped, no
    /// restart due, nothing started when its time comes; the stop's answer is the runtime's.
    #[test]
    fn an_operators_stop_during_a_held_restart_cancels_it() {
        let (_dir, d, m) = setup("sup-stop-held");
        d.set_supervising();
        let mut s = Supervisor::new(Arc::clone(&d));
        let exit = Exit {
            code: Some(3),
            signal: None,
        };
        s.feed("web", boot(true, Some(exit)));
        assert_eq!(view(&d, "web").map(|v| v.0), Some("backoff"));
        let due = s.machines[0].1.due().unwrap();
        let e = ask(&mut s, "web", STOP, Who::Operator).unwrap_err();
        assert_eq!(e.kind, Kind::NotRunning);
        assert_eq!(
            view(&d, "web"),
            Some(("stopped", Some("exit 3".into()), false))
        );
        assert_eq!(s.machines[0].1.due(), None);
        s.t0 -= Duration::from_millis(due + 1);
        s.feed("web", Event::Tick);
        settle(&mut s);
        nothing_started(&d, m, "web");
        assert!(
            !d.cfg.paths.autostart("web").exists(),
            "stopped after a reboot too"
        );
    }

    /// A container's own restarts go through the supervisor: the first ones at once (its
    /// run ended by the supervisor's worker, then started again), then paced, a request
    /// before its time changing nothing; counted, they do not reset the crash-loop limit,
    /// which then holds: no restart after `max_retries` failures.
    #[test]
    fn a_containers_own_restarts_are_paced_and_the_crash_loop_limit_holds() {
        let (_dir, d, _m) = setup("sup-self");
        install(
            &d,
            &format!("{MANIFEST}[restart]\npolicy = \"on-failure\"\nmax_retries = 1\ndelay = \"1ms\"\nmax_delay = \"1ms\"\n"),
        );
        // Running as init 4242 for its shim: the supervisor's start finds it started
        // already, its ends of runs 1, 2, … find another run: no runtime work is done.
        lxc_config(&d, "web");
        let _shim = FakeShim::start(&d, "web", info(4242), b"");
        d.set_supervising();
        let mut s = Supervisor::new(Arc::clone(&d));
        s.feed("web", Event::Started(1));
        let machine = |s: &Supervisor| s.machines[0].1.clone();
        for run in 1..=SELF_RESTARTS_FREE as i32 {
            let at = d.supervision.lock().unwrap()["web"]
                .self_restart_at
                .unwrap();
            assert!(at <= Instant::now(), "run {run}: free");
            s.feed("web", Event::RestartRequested(run));
            s.feed("web", Event::RestartAnswered(run));
            let busy: Vec<&str> = s.busy.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(busy, ["web"], "run {run}: its end is the supervisor's work");
            settle(&mut s);
            s.feed(
                "web",
                Event::Exited(
                    run,
                    Exit {
                        code: Some(0),
                        signal: None,
                    },
                ),
            );
            assert_eq!(machine(&s).phase(), Phase::Starting);
            settle(&mut s);
            s.feed("web", Event::Started(run + 1));
        }
        let run = SELF_RESTARTS_FREE as i32 + 1;
        let before = machine(&s);
        assert_eq!(before.record().self_restarts, SELF_RESTARTS_FREE);
        let at = d.supervision.lock().unwrap()["web"]
            .self_restart_at
            .unwrap();
        assert!(at > Instant::now(), "paced");
        s.feed("web", Event::RestartRequested(run));
        s.feed("web", Event::RestartAnswered(run));
        assert!(idle(&s), "nothing ended");
        assert_eq!(machine(&s), before);
        // Crashes: one retry, then given up.
        let fail = Exit {
            code: Some(1),
            signal: None,
        };
        s.feed("web", Event::Exited(run, fail));
        assert!(matches!(machine(&s).phase(), Phase::Waiting { .. }));
        settle(&mut s);
        s.t0 -= Duration::from_millis(10);
        s.feed("web", Event::Tick);
        settle(&mut s);
        s.feed("web", Event::Started(run + 1));
        s.feed("web", Event::Exited(run + 1, fail));
        assert_eq!(machine(&s).phase(), Phase::Failed);
        assert_eq!(view(&d, "web").map(|v| v.0), Some("failed"));
        // A scheduled start waits for the operator.
        let e = ask(&mut s, "web", Intent::Start, Who::Schedule).unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (Kind::Busy, "web failed (its restart policy gave up): not started until berth start web or berth reset web")
        );
    }

    /// What `status` and the logs say of each report and end.
    #[test]
    fn reasons_say_what_happened() {
        assert_eq!(describe(None), "the start failed");
        let e = |code, signal| Exit { code, signal };
        assert_eq!(describe(Some(&e(Some(1), Some(9)))), "signal 9");
        assert_eq!(describe(Some(&e(Some(2), None))), "exit 2");
        assert_eq!(describe(Some(&e(None, None))), "end not recorded");
        assert_eq!(
            reason(&Report::CrashLoop { retries: 5 }),
            "failed again after 5 restarts (berth start or berth reset)"
        );
        assert_eq!(
            reason(&Report::UpgradeFailed {
                from: "1.0".into(),
                why: "not ready".into()
            }),
            "upgrade from 1.0 rolled back: not ready"
        );
        assert_eq!(
            reason(&Report::WatchdogExpired { period_ms: 500 }),
            "no keep-alive within 500 ms ([health] watchdog)"
        );
    }
}
