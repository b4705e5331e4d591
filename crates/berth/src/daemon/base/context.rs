//! What every part of the daemon shares: the configuration, the kernel roots it reads (paths,
//! so tests can hand in fixture trees), the host's cgroup layout found at start, and the lock
//! that puts changes in order. Each module owns what it writes; this is what they all read.

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use berth_core::boot::Record;

use berth_core::cgroup::Host;
use berth_core::config::Config;
use berth_core::schedule::{Clock, Table};
use berth_core::state::State;
use berth_core::supervise::{Event, HealthState, Intent, Who};
use berth_sys::cgroupfs::Cgroups;
use serde_json::Value;

use crate::daemon::base::error::Result;

pub use berth_sys::check::Roots;

pub struct Daemon {
    pub cfg: Config,
    /// The kernel's operations the apply code calls (`berth_sys::host::REAL`; a recording fake
    /// in unit tests).
    pub host: &'static berth_sys::host::Host,
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
    /// What happens to containers and what is asked of them, for the supervisor (`notify`,
    /// `order`, `next`).
    inbox: Mutex<VecDeque<(String, Msg)>>,
    arrived: Condvar,
    /// The supervisor thread runs and carries out intents (`order`); before it does, the
    /// daemon's start carries out its own.
    supervising: AtomicBool,
    /// The boot counter and safe mode (`boot.rs` owns them).
    pub boot: BootState,
    /// Each component's last heartbeat, in milliseconds since `started` (wrapping: a u32,
    /// since 32-bit MIPS has no 64-bit atomics; ages are differences, so the wrap after 49
    /// days does not matter). The watchdog reads them.
    beats: [AtomicU32; Component::ALL.len()],
    /// Each component's last heartbeat proper (same clock): not a busy mark, and after any
    /// stall. The confirmation of a start needs one after it asked.
    alive: [AtomicU32; Component::ALL.len()],
    /// Test hooks only: seconds a component is to sleep at its next heartbeat.
    #[cfg(feature = "test-hooks")]
    stalls: [AtomicU32; Component::ALL.len()],
    /// Set by the watchdog thread to have the supervisor beat now ([`Daemon::ask_beats`]).
    beat_asked: std::sync::atomic::AtomicBool,
    /// The container API's sockets and the update locks (`api::container`).
    pub capi: crate::daemon::base::endpoints::Registry,
    /// The containers' cron jobs (`schedules.rs` owns them).
    pub schedules: Schedules,
    /// Why the slab reserve is not in place (`slab.rs`, set once at start).
    #[cfg(feature = "slab")]
    pub slab_error: OnceLock<String>,
    /// The data caps' counts as the daemon last knew them (`prepare::datacap` owns them).
    #[cfg(feature = "shape")]
    pub usage: Mutex<berth_core::datacap::Counts>,
}

/// Every container's schedules and what the scheduler thread needs to be woken.
pub struct Schedules {
    /// One per container (a few: a list costs the binary less than a map); changed and
    /// written (and the timer re-armed) under this lock.
    pub tables: Mutex<Vec<Table>>,
    /// The scheduler thread's timer: set once the thread runs (it starts with the first
    /// job, so a device without schedules has no such thread).
    pub timer: OnceLock<berth_sys::process::WallTimer>,
    /// Runs going on on the device (`berth_core::schedule::MAX_RUNNING`).
    pub busy: Mutex<usize>,
    /// This boot's id, for `@reboot` jobs (read at start).
    pub boot_id: OnceLock<String>,
    /// Real time, except with test hooks: BERTH_TEST_CRON_SECOND=1 makes a cron minute last
    /// one second, BERTH_TEST_CLOCK_OFFSET=S moves the clock S seconds.
    pub clock: Clock,
}

/// The boot counter of this start and safe mode.
#[derive(Default)]
pub struct BootState {
    /// The unconfirmed starts, this one last while it is unconfirmed.
    pub record: Mutex<Record>,
    /// This start has been confirmed (or needs no confirmation: safe mode).
    pub confirmed: AtomicBool,
    /// Why the daemon is in safe mode; None: it is not.
    pub safe_mode: Mutex<Option<String>>,
}

/// The parts of the daemon whose heartbeats the watchdog watches. The main thread runs the
/// admission loop of the admin socket, so its heartbeat is the API's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    Api = 0,
    Supervisor = 1,
}

impl Component {
    pub const ALL: [Component; 2] = [Component::Api, Component::Supervisor];

    pub fn name(self) -> &'static str {
        match self {
            Component::Api => "api",
            Component::Supervisor => "supervisor",
        }
    }

    #[cfg(feature = "test-hooks")]
    pub fn from_name(n: &str) -> Option<Component> {
        Component::ALL.into_iter().find(|c| c.name() == n)
    }
}

/// One container as the supervisor sees it.
#[derive(Debug, Clone)]
pub struct Supervised {
    /// `running`, `starting`, `backoff`, `failed`, `unhealthy`, `stopping`, `stopped`.
    pub state: &'static str,
    pub record: berth_core::supervise::Record,
    pub health: HealthState,
    /// Failed checks in a row.
    pub failures: u32,
    pub ready: bool,
    /// When a held restart is due.
    pub next_start: Option<Instant>,
    /// The run the supervisor follows (its init's pid), while there is one, and when it
    /// started (seconds since the epoch, as its shim said when the supervisor first saw it).
    pub run: Option<berth_core::supervise::Run>,
    pub started_at: Option<u64>,
    /// While it runs: from when a restart its package asks for is allowed (the pace of
    /// `berth_core::supervise`).
    pub self_restart_at: Option<Instant>,
    /// Why it is `failed` (or was last restarted).
    pub reason: Option<String>,
    /// The last probe's verdict line and output, and when (seconds since the epoch).
    pub last_check: Option<(String, u64)>,
}

/// A message to the supervisor about container `name` (see [`Daemon::next`]).
pub enum Msg {
    /// What happened to it.
    Event(Event),
    /// What is asked of it.
    Order(Order),
    /// Its intent in flight has been carried out (by the supervisor's worker).
    Done,
}

/// An intent for the supervisor to decide on and carry out, and where its answer goes.
pub struct Order {
    pub intent: Intent,
    pub who: Who,
    /// The asker holds the op lock and waits for the answer: the work runs under that hold.
    pub lent: bool,
    /// `berth start --trace`: when the request was read (CLOCK_REALTIME ns).
    pub trace: Option<u64>,
    /// None: nobody waits (the supervisor's own).
    pub reply: Option<std::sync::Arc<Reply>>,
}

/// One answer, given once and waited for once (a mutex and a condition variable: std's
/// channel cost the device build 7 KiB more).
#[derive(Default)]
pub struct Reply {
    answer: Mutex<Option<Result<Value>>>,
    given: Condvar,
}

impl Reply {
    pub fn give(&self, r: Result<Value>) {
        *self.answer.lock().unwrap() = Some(r);
        self.given.notify_one();
    }

    pub fn wait(&self) -> Result<Value> {
        let mut a = self.answer.lock().unwrap();
        loop {
            if let Some(r) = a.take() {
                return r;
            }
            a = self.given.wait(a).unwrap();
        }
    }
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
            host: &berth_sys::host::REAL,
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
            supervising: AtomicBool::new(false),
            beat_asked: Default::default(),
            boot: BootState::default(),
            beats: Default::default(),
            alive: Default::default(),
            #[cfg(feature = "test-hooks")]
            stalls: Default::default(),
            capi: Default::default(),
            schedules: Schedules {
                tables: Mutex::new(Vec::new()),
                timer: OnceLock::new(),
                busy: Mutex::new(0),
                boot_id: OnceLock::new(),
                clock: crate::hooks::clock(),
            },
            #[cfg(feature = "slab")]
            slab_error: OnceLock::new(),
            #[cfg(feature = "shape")]
            usage: Mutex::new(Default::default()),
        }
    }

    /// Milliseconds since the daemon started, wrapping (see `beats`).
    pub fn clock_ms(&self) -> u32 {
        self.started.elapsed().as_millis() as u32
    }

    /// A component says it is alive. With a stall pending (test hooks), it first sleeps
    /// that long, as a hung loop would.
    pub fn beat(&self, c: Component) {
        // Now, not busy any more (`beat_busy`): a stall ages from here.
        self.beats[c as usize].store(self.clock_ms(), Ordering::SeqCst);
        #[cfg(feature = "test-hooks")]
        {
            let stall = self.stalls[c as usize].swap(0, Ordering::SeqCst);
            if stall > 0 {
                log::warn!("test hook: the {} stalls for {stall} s", c.name());
                std::thread::sleep(Duration::from_secs(stall as u64));
            }
        }
        let now = self.clock_ms();
        self.beats[c as usize].store(now, Ordering::SeqCst);
        self.alive[c as usize].store(now, Ordering::SeqCst);
    }

    /// A component starts work that may legitimately take long (the supervisor handling an
    /// event may start or stop a container): it counts as alive until that work's longest
    /// time has passed, a heartbeat in the future.
    pub fn beat_busy(&self, c: Component) {
        // A start waits for its shim at most start_timeout + 5 s; a stop, stop_timeout, then
        // 10 s for SIGKILL to take.
        let grace_s = self.cfg.start_timeout_s + self.cfg.stop_timeout_s + 15;
        let grace = grace_s.saturating_mul(1000);
        self.beats[c as usize].store(self.clock_ms().wrapping_add(grace), Ordering::SeqCst);
    }

    /// When the component last beat for real (`clock_ms`): a busy mark
    /// ([`Daemon::beat_busy`]) does not count, and a stalled beat counts when the stall ends.
    pub fn alive_ms(&self, c: Component) -> u32 {
        self.alive[c as usize].load(Ordering::SeqCst)
    }

    /// Milliseconds since the component's last heartbeat; negative while it is busy.
    pub fn beat_age_ms(&self, c: Component) -> i32 {
        self.clock_ms()
            .wrapping_sub(self.beats[c as usize].load(Ordering::SeqCst)) as i32
    }

    /// Test hooks: makes `c` sleep `seconds` at its next heartbeat.
    #[cfg(feature = "test-hooks")]
    pub fn stall(&self, c: Component, seconds: u32) {
        self.stalls[c as usize].store(seconds, Ordering::SeqCst);
    }

    /// Has the admin loop and the supervisor beat once, now: how the watchdog thread learns
    /// that they are alive when no device needs their heartbeats every interval.
    pub fn ask_beats(&self) {
        self.beat_asked.store(true, Ordering::SeqCst);
        {
            // Under the inbox's lock: the supervisor either sees the flag before it waits, or
            // is waiting and gets the notification.
            let _q = self.inbox.lock().unwrap();
            self.arrived.notify_all();
        }
        self.capi.wake();
    }

    /// How often the loops must beat: every watchdog interval while a watchdog device is
    /// kept; otherwise never (no idle wake-ups): the confirmation of a start asks them once
    /// ([`Daemon::ask_beats`]).
    pub fn beat_every(&self) -> Option<Duration> {
        self.cfg
            .watchdog
            .device
            .is_some()
            .then(|| Duration::from_millis(self.cfg.watchdog.interval_ms))
    }

    /// Why the daemon is in safe mode, or None.
    pub fn safe_mode(&self) -> Option<String> {
        self.boot.safe_mode.lock().unwrap().clone()
    }

    /// Tells the supervisor what happened to container `name` (never blocks).
    pub fn notify(&self, name: &str, event: Event) {
        let mut q = self.inbox.lock().unwrap();
        // What a container says through its API (at its pace, while the supervisor may be
        // busy with a start): the same report already waiting says it all (looked for and
        // queued under one hold of the inbox, so two at once queue it once).
        let coalesce = matches!(
            event,
            Event::KeepAlive(_) | Event::Ready(_) | Event::Reported(..)
        );
        if coalesce
            && q.iter()
                .any(|(n, m)| n == name && matches!(m, Msg::Event(e) if *e == event))
        {
            return;
        }
        q.push_back((name.to_string(), Msg::Event(event)));
        drop(q);
        self.arrived.notify_one();
    }

    /// Hands an intent for container `name` to the supervisor (never blocks; the asker waits
    /// on the order's reply, if it wants the answer).
    pub fn order(&self, name: &str, order: Order) {
        self.send(name, Msg::Order(order));
    }

    /// The supervisor's worker has carried out `name`'s intent in flight.
    pub fn done(&self, name: &str) {
        self.send(name, Msg::Done);
    }

    fn send(&self, name: &str, m: Msg) {
        self.inbox.lock().unwrap().push_back((name.to_string(), m));
        self.arrived.notify_one();
    }

    /// Whether the supervisor thread takes intents (from its spawn on).
    pub fn supervising(&self) -> bool {
        self.supervising.load(Ordering::SeqCst)
    }

    pub fn set_supervising(&self) {
        self.supervising.store(true, Ordering::SeqCst);
    }

    /// The supervisor's next event (skipping any other message): for tests.
    #[cfg(test)]
    pub fn next_event(&self, until: Option<Instant>) -> Option<(String, Event)> {
        loop {
            match self.next(until)? {
                (n, Msg::Event(e)) => return Some((n, e)),
                _ => continue,
            }
        }
    }

    /// The supervisor's next message, waiting for one at most until `until` (for ever
    /// without); None when the time came first. (A queue and a condition variable: std's
    /// channel cost the device build 7 KiB more.)
    pub fn next(&self, until: Option<Instant>) -> Option<(String, Msg)> {
        let mut q = self.inbox.lock().unwrap();
        loop {
            if let Some(ev) = q.pop_front() {
                return Some(ev);
            }
            if self.beat_asked.swap(false, Ordering::SeqCst) {
                return None;
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

/// Hands back the pages of code a wake-up faulted in (`berth_sys::process::release_own_code`),
/// except in the unit tests' process, where other tests run the code it would drop under them.
pub(crate) fn release_code(all: bool) {
    #[cfg(not(test))]
    berth_sys::process::release_own_code(all);
    #[cfg(test)]
    let _ = all;
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::sync::Arc;

    use super::*;
    use crate::daemon::base::testing::fake_daemon;

    /// Waits until `cond` holds, at most 30 s (a busy machine is slow, never this slow).
    fn wait_for(what: &str, cond: impl Fn() -> bool) {
        let until = Instant::now() + Duration::from_secs(30);
        while !cond() {
            assert!(Instant::now() < until, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Every event waiting, without waiting for more.
    fn drain(d: &Daemon) -> Vec<(String, Event)> {
        std::iter::from_fn(|| d.next_event(Some(Instant::now()))).collect()
    }

    /// A heartbeat is fresh and counts as alive; a busy mark is a heartbeat in the future
    /// (start_timeout + stop_timeout + 15 s ahead) that does not count as alive.
    #[test]
    fn a_busy_mark_is_a_heartbeat_in_the_future_that_is_not_alive() {
        let (_dir, d, _m) = fake_daemon("context-beats", "");
        wait_for("the clock to move", || d.clock_ms() >= 5);
        d.beat(Component::Api);
        let age = d.beat_age_ms(Component::Api);
        assert!((0..5_000).contains(&age), "{age}");
        assert!(d.alive_ms(Component::Api) >= 5);
        assert_eq!(d.alive_ms(Component::Supervisor), 0, "never beat");

        d.beat_busy(Component::Supervisor);
        let grace = (d.cfg.start_timeout_s + d.cfg.stop_timeout_s + 15) as i32 * 1000;
        let age = d.beat_age_ms(Component::Supervisor);
        assert!((-grace..=-grace + 5_000).contains(&age), "{age} vs {grace}");
        assert_eq!(d.alive_ms(Component::Supervisor), 0, "busy is not alive");
        // The other component is untouched.
        assert!(d.beat_age_ms(Component::Api) >= 0);

        d.beat(Component::Supervisor);
        assert!(d.beat_age_ms(Component::Supervisor) >= 0);
        assert!(d.alive_ms(Component::Supervisor) >= 5);
    }

    /// A stalled heartbeat (test hook) sleeps first: it ages from the start of the stall and
    /// is alive only once the stall ends.
    #[cfg(feature = "test-hooks")]
    #[test]
    fn a_stalled_beat_counts_as_alive_when_the_stall_ends() {
        let (_dir, d, _m) = fake_daemon("context-stall", "");
        let d = Arc::new(d);
        wait_for("the clock to move", || d.clock_ms() >= 100);
        d.stall(Component::Api, 2);
        let before = d.clock_ms();
        let t = std::thread::spawn({
            let d = Arc::clone(&d);
            move || d.beat(Component::Api)
        });
        // Its stamp is from after `before` (never beaten, its age was the whole clock): the
        // beat has begun, and stalls for 2 s, time enough to look however loaded the machine.
        wait_for("the stalled beat to start", || {
            d.beat_age_ms(Component::Api) <= d.clock_ms().wrapping_sub(before) as i32
        });
        assert_eq!(d.alive_ms(Component::Api), 0, "not alive while it stalls");
        t.join().unwrap();
        assert!(d.alive_ms(Component::Api).wrapping_sub(before) >= 2_000);
        assert_eq!(
            Component::from_name("supervisor"),
            Some(Component::Supervisor)
        );
        assert_eq!(Component::from_name("guard"), None);
    }

    /// What a container says through its API coalesces with the same report still waiting
    /// (same container, same run, same verdict); anything else is queued in order.
    #[test]
    fn repeated_reports_coalesce_while_they_wait() {
        let (_dir, d, _m) = fake_daemon("context-coalesce", "");
        for _ in 0..3 {
            d.notify("web", Event::KeepAlive(7));
            d.notify("web", Event::Ready(7));
            d.notify("web", Event::Reported(7, true));
        }
        d.notify("web", Event::Reported(7, false));
        d.notify("web", Event::KeepAlive(8));
        d.notify("db", Event::KeepAlive(7));
        d.notify("web", Event::Health(7, true));
        d.notify("web", Event::Health(7, true));
        d.notify("web", Event::StopRequested);
        d.notify("web", Event::StopRequested);
        let got = drain(&d);
        let want = [
            ("web", Event::KeepAlive(7)),
            ("web", Event::Ready(7)),
            ("web", Event::Reported(7, true)),
            ("web", Event::Reported(7, false)),
            ("web", Event::KeepAlive(8)),
            ("db", Event::KeepAlive(7)),
            ("web", Event::Health(7, true)),
            ("web", Event::Health(7, true)),
            ("web", Event::StopRequested),
            ("web", Event::StopRequested),
        ];
        let want: Vec<(String, Event)> = want.into_iter().map(|(n, e)| (n.into(), e)).collect();
        assert_eq!(got, want);
        // Taken, a report is news again.
        d.notify("web", Event::KeepAlive(7));
        assert_eq!(drain(&d), [("web".to_string(), Event::KeepAlive(7))]);
    }

    /// With nothing waiting, `next_event` gives up at its deadline (not before); a waiting
    /// supervisor is woken by the next event, long before its deadline.
    #[test]
    fn next_event_waits_until_its_deadline_or_the_next_event() {
        let (_dir, d, _m) = fake_daemon("context-next", "");
        let d = Arc::new(d);
        let t0 = Instant::now();
        assert_eq!(d.next_event(Some(t0 + Duration::from_millis(50))), None);
        assert!(t0.elapsed() >= Duration::from_millis(50));
        assert_eq!(d.next_event(Some(t0)), None, "a deadline past: no wait");

        let (tx, rx) = mpsc::channel();
        let waiter = std::thread::spawn({
            let d = Arc::clone(&d);
            move || {
                let t = Instant::now();
                let ev = d.next_event(Some(t + Duration::from_secs(120)));
                tx.send((ev, t.elapsed())).unwrap();
            }
        });
        d.notify("web", Event::Started(42));
        let (ev, took) = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        waiter.join().unwrap();
        assert_eq!(ev, Some(("web".to_string(), Event::Started(42))));
        assert!(took < Duration::from_secs(60), "{took:?}");
    }

    /// `ask_beats` has a supervisor waiting for ever return (None) once its events are taken,
    /// and wakes the admission loop through the container sockets' wake-up.
    #[test]
    fn ask_beats_wakes_the_supervisor_and_the_admission_loop() {
        let (_dir, d, _m) = fake_daemon("context-ask", "");
        let d = Arc::new(d);
        let wake = d.capi.wake_fd().unwrap();
        let readable = || berth_sys::process::poll(&[(wake, libc::POLLIN)], 0).unwrap()[0] != 0;
        assert!(!readable());

        // Asked while it is not waiting: its next wait returns at once.
        d.notify("web", Event::Ready(3));
        d.ask_beats();
        assert!(readable());
        d.capi.drain();
        let (tx, rx) = mpsc::channel();
        let sup = std::thread::spawn({
            let d = Arc::clone(&d);
            move || {
                tx.send(d.next_event(None)).unwrap();
                tx.send(d.next_event(None)).unwrap();
                // Asked while it waits.
                tx.send(d.next_event(None)).unwrap();
            }
        });
        let limit = Duration::from_secs(60);
        assert_eq!(
            rx.recv_timeout(limit).unwrap(),
            Some(("web".to_string(), Event::Ready(3))),
            "the events first"
        );
        assert_eq!(rx.recv_timeout(limit).unwrap(), None);
        assert!(
            rx.recv_timeout(Duration::from_millis(50)).is_err(),
            "the question is used up: it waits again"
        );
        d.ask_beats();
        assert_eq!(rx.recv_timeout(limit).unwrap(), None);
        sup.join().unwrap();
        assert!(readable());
    }

    /// The loops beat every watchdog interval only while a device is kept; safe mode is
    /// what the boot state says.
    #[test]
    fn loops_beat_every_interval_only_with_a_watchdog_device() {
        let (_dir, d, _m) = fake_daemon("context-every", "");
        assert_eq!(d.beat_every(), None);
        assert_eq!(d.safe_mode(), None);
        *d.boot.safe_mode.lock().unwrap() = Some("3 unconfirmed starts".into());
        assert_eq!(d.safe_mode().as_deref(), Some("3 unconfirmed starts"));
        let (_dir2, d2, _m2) = fake_daemon(
            "context-every-wd",
            "[watchdog]\ndevice = \"/dev/watchdog\"\ninterval = \"250ms\"\n",
        );
        assert_eq!(d2.beat_every(), Some(Duration::from_millis(250)));
        assert_eq!(d2.cgroup_root(), d2.sys().join("fs/cgroup"));
    }
}
