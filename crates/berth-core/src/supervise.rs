//! Supervision decisions, as a pure state machine per container: events come in (the daemon
//! started, the container started, the operator stopped it, it ended, a health check passed
//! or failed, the memory guard killed in it, time passed), actions come out (start it,
//! release what it held, hold a restart until a time, run a health check, kill an unhealthy
//! run, report). The daemon's supervisor thread feeds it and carries the actions out; timers,
//! signals, probes and mounts stay there, so every decision here is tested from tables,
//! without root.
//!
//! Restarts follow TR-181's `ExecutionUnit.{i}.AutoRestart` (and TR-069's session retry
//! formula it borrows): the n-th retry waits a time drawn uniformly from
//! `[m·k^(n-1), m·k^n]` (m the minimum wait, k the multiplier), capped at the maximum wait.
//! After `MaximumRetryCount` retries the next failure leaves the container `failed` until
//! the operator starts or resets it; a run that lasted `ResetPeriod` sets the count back to 0.
//!
//! A restart the package asks for itself (its container API) is the machine's too: counted
//! in `restarts`, and paced. The first [`SELF_RESTARTS_FREE`] of a streak come at once; the
//! k-th after those only once the run has lasted what the k-th crash restart would wait at
//! least (never less than the default policy's wait, whatever the manifest says), so a payload that
//! asks at every start restarts a few times, then ever more slowly, at most once per
//! `max(max_delay, 5 min)`. A run that lasts [`SELF_RESTART_WINDOW_MS`] (or the reset period,
//! if longer) ends the streak. A paced request is refused, not queued: the payload is alive
//! and may ask again when it is allowed (`self_restart_at`).

use crate::manifest::{Manifest, Ready, RestartPolicy};

/// A container's supervision policy: the manifest's `[restart]` and `[health]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub restart: RestartPolicy,
    /// TR-181 `RetryMinimumWaitInterval`.
    pub min_wait_ms: u64,
    /// TR-181 `RetryMaximumWaitInterval`.
    pub max_wait_ms: u64,
    /// TR-181 `RetryIntervalMultiplier`, thousandths (2000 = ×2).
    pub multiplier_milli: u32,
    /// TR-181 `MaximumRetryCount`: retries allowed before `failed`.
    pub max_retries: u32,
    /// TR-181 `ResetPeriod`: a run this long sets the retry count back to 0.
    pub reset_period_ms: u64,
    /// Draw each wait from its range (TR-181); off, the wait is the range's low end.
    pub jitter: bool,
    pub health: Option<HealthPolicy>,
}

/// The `[health]` probe's schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthPolicy {
    pub interval_ms: u64,
    /// Consecutive failures that make the run unhealthy (it is then killed and restarted).
    pub retries: u32,
    /// Ready as soon as it runs, not at its first passed check.
    pub ready_on_start: bool,
    /// Ready only when the package says so (`ready = "api"`), not at a passed check.
    pub ready_by_api: bool,
    /// The daemon runs a probe (cmd, tcp or http); without, only the package reports.
    pub probe: bool,
    /// The keep-alive period the package promised (`[health] watchdog`).
    pub watchdog_ms: Option<u64>,
}

/// Self-requested restarts of a streak that come at once; the next ones are paced.
pub const SELF_RESTARTS_FREE: u32 = 3;
/// A run this long (or the policy's reset period, if longer) ends a streak of self-requested
/// restarts.
pub const SELF_RESTART_WINDOW_MS: u64 = 600_000;
/// The least a paced self-requested restart waits: the default policy's, 1 s doubling up to
/// 5 min, whatever the manifest's `[restart]` says (a package must not pace itself).
const SELF_FLOOR_MS: u64 = 1_000;
const SELF_FLOOR_CAP_MS: u64 = 300_000;

/// A SIGKILLed end this soon after an OOM kill in the run is that kill.
pub const OOM_END_MS: u64 = 10_000;

/// The first health check comes this soon after a start (or at the interval, if shorter),
/// so that readiness, which `depends` waits for, is known early.
pub const FIRST_CHECK_MS: u64 = 1_000;

impl Policy {
    /// No restarts, no health checks: a container that ends stays stopped.
    pub fn never() -> Policy {
        Policy {
            restart: RestartPolicy::Never,
            min_wait_ms: crate::manifest::DEFAULT_RESTART_DELAY_MS,
            max_wait_ms: crate::manifest::DEFAULT_RESTART_MAX_DELAY_MS,
            multiplier_milli: crate::manifest::DEFAULT_RESTART_MULTIPLIER_MILLI,
            max_retries: crate::manifest::DEFAULT_MAX_RETRIES,
            reset_period_ms: crate::manifest::DEFAULT_RESTART_RESET_PERIOD_MS,
            jitter: false,
            health: None,
        }
    }

    /// The policy a manifest's `[restart]` and `[health]` ask for.
    pub fn of(m: &Manifest) -> Policy {
        let r = &m.restart;
        Policy {
            restart: r.policy,
            min_wait_ms: r.delay_ms,
            max_wait_ms: r.max_delay_ms.max(r.delay_ms),
            multiplier_milli: r.multiplier_milli.max(1_000),
            max_retries: r.max_retries,
            reset_period_ms: r.reset_period_ms,
            jitter: true,
            health: m.health.as_ref().map(|h| HealthPolicy {
                interval_ms: h.interval_ms.max(1),
                retries: h.retries.max(1),
                ready_on_start: h.ready == Ready::Started,
                ready_by_api: h.ready == Ready::Api,
                probe: h.has_probe(),
                watchdog_ms: h.watchdog_ms,
            }),
        }
    }

    /// The range the `n`-th retry's wait is drawn from (n ≥ 1), each end capped at the
    /// maximum wait.
    pub fn wait_range(&self, n: u32) -> (u64, u64) {
        let k = self.multiplier_milli as f64 / 1000.0;
        let m = self.min_wait_ms as f64;
        let cap = self.max_wait_ms as f64;
        let lo = (m * k.powi(n.saturating_sub(1) as i32)).min(cap);
        let hi = (m * k.powi(n as i32)).min(cap);
        (lo as u64, hi as u64)
    }
}

/// How a container ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl Exit {
    /// Anything but exit code 0: a code, a killing signal, or an end nobody recorded.
    pub fn failed(&self) -> bool {
        self.signal.is_some() || self.code != Some(0)
    }
}

/// What the memory guard did in a container (it kills one process at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardKill {
    pub pid: i32,
    /// The container's init: the whole container ends with it.
    pub init: bool,
    pub rss: u64,
    pub priority: i32,
    /// MemAvailable when it was chosen.
    pub available: u64,
}

/// One run of a container: its init's pid (on the host). An end is only ever the end of the
/// run it names: the end of an earlier run, reported late, changes nothing.
pub type Run = i32;

/// What the supervisor keeps on disk per container, so that a daemon restart or a reboot
/// neither forgets a `failed` container nor the count towards it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Record {
    /// TR-181 `RetryCount`: retries since the count was last set back to 0.
    pub retries: u32,
    /// Restarts made by the supervisor since the operator last started the container.
    pub restarts: u32,
    /// Given up: not started again until the operator starts or resets it.
    pub failed: bool,
    /// Restarts the package asked for itself in the current streak (paced beyond
    /// [`SELF_RESTARTS_FREE`]); a run of [`SELF_RESTART_WINDOW_MS`] sets it back to 0.
    #[serde(default)]
    pub self_restarts: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The daemon started and found the container running (this run) or not; `autostart` is
    /// the operator's last word (started, not stopped); `ended` is how it ended while no
    /// daemon watched, if it did; `record` what the supervisor had kept.
    Boot {
        running: Option<Run>,
        autostart: bool,
        ended: Option<Exit>,
        record: Record,
    },
    /// It runs (started by the operator or by this machine's `Start`).
    Started(Run),
    /// A start that is not the operator's (a scheduled job's of a stopped container): as
    /// `Started`, but the record (the restarts counted, a self-restart streak) stays.
    Resumed(Run),
    /// A start failed before the payload ran.
    StartFailed,
    /// The operator is stopping it (or asked to while nothing runs): its end is no failure,
    /// a held restart is dropped, nothing restarts it.
    StopRequested,
    /// The package asked through its container API to restart this run. Allowed (see
    /// `self_restart_at`), it is counted and the run's end becomes a wanted one, followed by
    /// a start; refused, nothing changes. Told before the package is answered, so an end
    /// that comes at once is already the wanted one.
    RestartRequested(Run),
    /// The package has had its answer to the restart it asked for: the run may be ended now.
    RestartAnswered(Run),
    /// That run ended.
    Exited(Run, Exit),
    /// A health check of that run passed (true) or failed.
    Health(Run, bool),
    /// A health check of that run could not be made (the daemon had no memory for it): no
    /// verdict on the package, and the next check is due as after one.
    HealthSkipped(Run),
    /// The package's own verdict on that run's health (container API): counted apart from
    /// the probe's, so that a report of good health cannot hide a failing probe.
    Reported(Run, bool),
    /// The package said through the container API that this run is ready.
    Ready(Run),
    /// The package's keep-alive (`[health] watchdog`) for this run.
    KeepAlive(Run),
    GuardKilled(GuardKill),
    /// The kernel's OOM killer killed `kills` processes of that run (in its memory cgroup).
    OomKilled(Run, u32),
    /// The operator's `berth reset`: out of `failed`, counts back to 0.
    Reset,
    /// Time passed: a held restart or a health check may be due.
    Tick,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Start,
    /// Unmount what it held and remove its cgroups: it has ended.
    Release,
    /// Start it again at this time (ms on the caller's clock); a `Tick` then says `Start`.
    Hold {
        until_ms: u64,
    },
    /// Run the health probe in this run; answer with `Health`.
    Check(Run),
    /// End this run, as `berth stop` would: it is unhealthy (its end then counts as a
    /// failure), or its package asked for a restart (its end is then followed by a start).
    Kill(Run),
    Report(Report),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// Ended on its own with a failure, or failed to start (no exit).
    Failed(Option<Exit>),
    /// Failed again after `retries` retries: given up until the operator starts it.
    CrashLoop {
        retries: u32,
    },
    /// `failures` health checks in a row failed: the run is killed.
    Unhealthy {
        failures: u32,
    },
    /// No keep-alive came within the period the package promised: the run is killed.
    WatchdogExpired {
        period_ms: u64,
    },
    GuardKilled(GuardKill),
    /// The kernel's OOM killer killed `kills` processes in it (the run may go on).
    OomKilled {
        kills: u32,
    },
    /// An upgrade from version `from` was rolled back (not the machine's: `berth upgrade`'s).
    UpgradeFailed {
        from: String,
        why: String,
    },
}

/// Who asks for a start or a stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// The operator: the CLI and the admin API, the web page, `berth safe-mode enter`, a
    /// fleet deployment's installs.
    Operator,
    /// The container itself, through its API (`POST /v1/self/stop`).
    Container,
    /// A scheduled job of a stopped container.
    Schedule,
    /// An upgrade's or rollback's switch from one version to the other.
    Upgrade,
    /// The daemon's own work before the supervisor runs (a trial a dead daemon left, rolled
    /// back at start).
    Daemon,
    /// The supervisor: a start or an end its machine decided.
    Supervisor,
    /// The memory guard: a process it chose to kill.
    Guard,
}

/// What is asked of a container: an intent, which the machine of that container takes
/// ([`Machine::ask`]) before the daemon carries it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    Start,
    /// Stop, SIGKILL after `timeout` seconds (None: the device's stop timeout).
    Stop {
        timeout: Option<u32>,
    },
    /// Stop if it runs, then start.
    Restart,
    /// End run `run` if it is still the container's: the supervisor's, for a run whose
    /// health checks failed or whose package asked for a restart.
    EndRun {
        run: Run,
    },
    /// SIGKILL process `pid` of the container whose init is `init`, if it is still the
    /// process listed (it started at `start`): the memory guard's, carried out at once.
    Kill {
        pid: Run,
        start: u64,
        init: Run,
    },
}

/// Why the machine refuses an intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Nothing starts in safe mode, whoever asks.
    SafeMode,
    /// Its restart policy gave up: only the operator starts it again.
    Failed,
    /// On its way somewhere (a held restart, a start, a stop; the state `status` shows): a
    /// scheduled start does not cut in.
    Busy(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Stopped,
    Starting,
    Running,
    Stopping,
    /// Unhealthy: being killed, to be restarted.
    Killing,
    /// Its package asked for a restart: its end (once `ending`, after the package had its
    /// answer) is followed by a start.
    Restarting {
        ending: bool,
    },
    /// A restart is held until then (backoff).
    Waiting {
        until_ms: u64,
    },
    /// Given up until the operator starts or resets it.
    Failed,
}

/// What the health checks of the current run found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthState {
    /// No check configured.
    None,
    /// No result yet in this run.
    Starting,
    Healthy,
    Unhealthy,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    phase: Phase,
    /// The run this machine follows, while there is one.
    run: Option<Run>,
    /// When the current run started, for the reset period.
    started_ms: Option<u64>,
    record: Record,
    health: HealthState,
    /// Consecutive failed checks of this run.
    failures: u32,
    /// When the next check is due; None while one is running or nothing runs.
    check_due: Option<u64>,
    /// When the running check began: the next is due an interval after it (not after its
    /// end), so a probe that hangs to its timeout does not stretch the period.
    check_started: u64,
    /// When the package's keep-alive is due at the latest (`[health] watchdog`).
    keepalive_due: Option<u64>,
    /// The package's own failed reports in a row.
    report_failures: u32,
    ready: bool,
    /// When the OOM killer last killed in this run: a SIGKILLed end soon after is that
    /// kill, reported once.
    last_oom_ms: Option<u64>,
    /// From when this run may restart itself (drawn when it started).
    self_restart_ms: u64,
    /// xorshift32 state for the waits' jitter.
    rng: u32,
}

impl Machine {
    /// `seed` feeds the jitter of the waits (any value; 0 is replaced).
    pub fn new(seed: u32) -> Machine {
        Machine {
            phase: Phase::Stopped,
            run: None,
            started_ms: None,
            record: Record::default(),
            health: HealthState::None,
            failures: 0,
            check_due: None,
            check_started: 0,
            keepalive_due: None,
            report_failures: 0,
            ready: false,
            last_oom_ms: None,
            self_restart_ms: 0,
            rng: seed.max(1),
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn record(&self) -> Record {
        self.record
    }

    /// The run this machine follows, while there is one.
    pub fn run(&self) -> Option<Run> {
        self.run
    }

    /// While it runs: from when (ms on the caller's clock) a restart its package asks for
    /// is allowed (a time in the past: now). None while it does not run, or is ending.
    pub fn self_restart_at(&self) -> Option<u64> {
        (self.phase == Phase::Running).then_some(self.self_restart_ms)
    }

    pub fn health(&self) -> (HealthState, u32) {
        (self.health, self.failures.max(self.report_failures))
    }

    /// It runs and is ready: its health check passed once (or it has none, or it is ready
    /// at start).
    pub fn ready(&self) -> bool {
        self.phase == Phase::Running && self.ready
    }

    /// The state `berth status` shows.
    pub fn state(&self) -> &'static str {
        match self.phase {
            Phase::Stopped => "stopped",
            Phase::Starting => "starting",
            Phase::Running if self.health == HealthState::Unhealthy => "unhealthy",
            Phase::Running => "running",
            Phase::Stopping => "stopping",
            Phase::Killing => "unhealthy",
            // Being stopped, to be started again at once.
            Phase::Restarting { .. } => "stopping",
            Phase::Waiting { .. } => "backoff",
            Phase::Failed => "failed",
        }
    }

    /// When this machine next wants a `Tick`: a held restart or a health check.
    pub fn due(&self) -> Option<u64> {
        match self.phase {
            Phase::Waiting { until_ms } => Some(until_ms),
            Phase::Running => match (self.check_due, self.keepalive_due) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            _ => None,
        }
    }

    pub fn on(&mut self, now_ms: u64, ev: &Event, policy: &Policy) -> Vec<Action> {
        match ev {
            Event::Boot { record, .. } => {
                self.record = *record;
                self.boot(now_ms, ev, policy)
            }
            Event::Resumed(run) => {
                self.running(now_ms, *run, policy);
                Vec::new()
            }
            Event::Started(run) => {
                if matches!(
                    self.phase,
                    Phase::Failed | Phase::Stopped | Phase::Waiting { .. }
                ) {
                    // The operator's start (the machine's own come from `Starting`): a
                    // clean slate.
                    self.record = Record::default();
                }
                self.running(now_ms, *run, policy);
                Vec::new()
            }
            Event::StartFailed => self.ended(now_ms, None, policy),
            Event::StopRequested => {
                self.stop_requested();
                Vec::new()
            }
            Event::RestartRequested(run) => self.restart_requested(now_ms, *run, policy),
            Event::RestartAnswered(run) => match self.phase {
                Phase::Restarting { ending: false } if self.run == Some(*run) => {
                    self.phase = Phase::Restarting { ending: true };
                    vec![Action::Kill(*run)]
                }
                _ => Vec::new(),
            },
            // The end of another run than this one (an earlier run's, reported late).
            Event::Exited(run, _) if self.run != Some(*run) => Vec::new(),
            Event::Exited(..) if matches!(self.phase, Phase::Restarting { .. }) => {
                // The end its package asked for (or its own exit right after asking): no
                // failure, started again at once.
                self.run = None;
                self.started_ms = None;
                self.ready = false;
                self.phase = Phase::Starting;
                vec![Action::Release, Action::Start]
            }
            Event::Exited(_, exit) => {
                self.run = None;
                self.check_due = None;
                self.keepalive_due = None;
                self.ended(now_ms, Some(*exit), policy)
            }
            Event::Health(run, _) if self.run != Some(*run) || self.phase != Phase::Running => {
                Vec::new()
            }
            Event::Health(run, ok) => self.checked(now_ms, *run, *ok, policy),
            Event::HealthSkipped(run) if self.run == Some(*run) && self.phase == Phase::Running => {
                if let Some(h) = policy.health.filter(|h| h.probe) {
                    self.check_due = Some(now_ms.max(self.check_started + h.interval_ms));
                }
                Vec::new()
            }
            Event::HealthSkipped(_) => Vec::new(),
            Event::Ready(run) | Event::KeepAlive(run) | Event::Reported(run, _)
                if self.run != Some(*run) || self.phase != Phase::Running =>
            {
                Vec::new()
            }
            Event::Ready(_) => {
                // Only where readiness is the package's to say: with a probe deciding it,
                // a package cannot declare itself ready before the probe passed.
                if policy.health.is_some_and(|h| h.ready_by_api) {
                    self.ready = true;
                }
                Vec::new()
            }
            Event::Reported(run, ok) => self.reported(*run, *ok, policy),
            Event::KeepAlive(_) => {
                if let Some(w) = policy.health.and_then(|h| h.watchdog_ms) {
                    self.keepalive_due = Some(now_ms + w);
                }
                Vec::new()
            }
            Event::GuardKilled(k) => vec![Action::Report(Report::GuardKilled(*k))],
            Event::OomKilled(run, _) if self.run != Some(*run) => Vec::new(),
            Event::OomKilled(_, kills) => {
                // A container can make the kernel kill again and again: one report per
                // `OOM_END_MS` at most (crash archives are flash writes).
                let recent = self
                    .last_oom_ms
                    .is_some_and(|t| now_ms.saturating_sub(t) < OOM_END_MS);
                self.last_oom_ms = Some(now_ms);
                if recent {
                    return Vec::new();
                }
                vec![Action::Report(Report::OomKilled { kills: *kills })]
            }
            Event::Reset => {
                self.record = Record::default();
                if self.phase == Phase::Failed {
                    self.phase = Phase::Stopped;
                }
                Vec::new()
            }
            Event::Tick => match self.phase {
                Phase::Waiting { until_ms } if now_ms >= until_ms => {
                    self.phase = Phase::Starting;
                    vec![Action::Start]
                }
                Phase::Running => match (self.run, self.check_due) {
                    (Some(run), _) if self.keepalive_due.is_some_and(|t| now_ms >= t) => {
                        let period_ms = policy.health.and_then(|h| h.watchdog_ms).unwrap_or(0);
                        self.end_run(run, Report::WatchdogExpired { period_ms })
                    }
                    (Some(run), Some(due)) if now_ms >= due => {
                        self.check_due = None;
                        self.check_started = now_ms;
                        vec![Action::Check(run)]
                    }
                    _ => Vec::new(),
                },
                _ => Vec::new(),
            },
        }
    }

    /// An intent for this container from `who`, as it arrives (the daemon carries out a
    /// container's intents in that order): refused, or taken, with what it means here at
    /// once. `safe_mode`: the device is in safe mode.
    ///
    /// Nothing starts in safe mode, whoever asks; the supervisor's own start refused so is no
    /// failure and leaves nothing held (`safe-mode clear` hands the container back as at
    /// boot). A scheduled start waits for the operator after a crash loop and does not cut
    /// into a held restart, a start or a stop. The operator's stop, or the container's own,
    /// drops a held restart now, not once the stop is carried out.
    pub fn ask(&mut self, intent: &Intent, who: Who, safe_mode: bool) -> Result<(), Refusal> {
        let starts = matches!(intent, Intent::Start | Intent::Restart);
        if starts && safe_mode {
            if who == Who::Supervisor {
                self.stop_requested();
            }
            return Err(Refusal::SafeMode);
        }
        match (intent, who) {
            (Intent::Start, Who::Schedule) => match self.phase {
                Phase::Failed => Err(Refusal::Failed),
                Phase::Waiting { .. }
                | Phase::Starting
                | Phase::Stopping
                | Phase::Restarting { .. } => Err(Refusal::Busy(self.state())),
                _ => Ok(()),
            },
            (Intent::Stop { .. }, Who::Operator | Who::Container) => {
                self.stop_requested();
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The operator is stopping it: its end is no failure, a held restart is dropped.
    fn stop_requested(&mut self) {
        self.phase = match self.phase {
            // Nothing runs: nothing to wait for.
            Phase::Waiting { .. } | Phase::Failed | Phase::Stopped | Phase::Starting => {
                Phase::Stopped
            }
            _ => Phase::Stopping,
        };
        self.check_due = None;
        self.keepalive_due = None;
    }

    fn boot(&mut self, now_ms: u64, ev: &Event, policy: &Policy) -> Vec<Action> {
        let Event::Boot {
            running,
            autostart,
            ended,
            ..
        } = ev
        else {
            return Vec::new();
        };
        if let Some(run) = running {
            // Taken over: whatever it was, it runs. A run that says its readiness itself
            // said it (if ever) to the daemon before: it will not say it again, so a run
            // taken over counts as ready rather than holding its dependents for ever.
            self.running(now_ms, *run, policy);
            if policy.health.is_some_and(|h| h.ready_by_api) {
                self.ready = true;
            }
            return Vec::new();
        }
        if self.record.failed {
            self.phase = Phase::Failed;
            return Vec::new();
        }
        match ended {
            // It ended while nobody watched: its restart policy decides, as if seen.
            Some(exit) if *autostart => {
                self.phase = Phase::Running;
                self.ended(now_ms, Some(*exit), policy)
                    .into_iter()
                    .filter(|a| *a != Action::Release)
                    .collect()
            }
            None if *autostart => {
                self.phase = Phase::Starting;
                vec![Action::Start]
            }
            _ => Vec::new(),
        }
    }

    fn running(&mut self, now_ms: u64, run: Run, policy: &Policy) {
        self.phase = Phase::Running;
        self.run = Some(run);
        self.started_ms = Some(now_ms);
        self.self_restart_ms = now_ms + self.self_restart_delay(policy);
        self.failures = 0;
        self.report_failures = 0;
        self.last_oom_ms = None;
        match policy.health {
            None => {
                self.health = HealthState::None;
                self.check_due = None;
                self.keepalive_due = None;
                self.ready = true;
            }
            Some(h) => {
                self.health = HealthState::Starting;
                self.check_due = h.probe.then(|| now_ms + h.interval_ms.min(FIRST_CHECK_MS));
                self.keepalive_due = h.watchdog_ms.map(|w| now_ms + w);
                // Without a probe and without readiness by API, nothing else would ever
                // say it is ready.
                self.ready = h.ready_on_start || (!h.probe && !h.ready_by_api);
            }
        }
    }

    fn checked(&mut self, now_ms: u64, run: Run, ok: bool, policy: &Policy) -> Vec<Action> {
        let Some(h) = policy.health else {
            return Vec::new();
        };
        if h.probe {
            self.check_due = Some(now_ms.max(self.check_started + h.interval_ms));
        }
        if ok {
            self.failures = 0;
            self.health = HealthState::Healthy;
            self.ready |= !h.ready_by_api;
            return Vec::new();
        }
        self.failures += 1;
        self.health = HealthState::Unhealthy;
        if self.failures < h.retries {
            return Vec::new();
        }
        self.end_run(
            run,
            Report::Unhealthy {
                failures: self.failures,
            },
        )
    }

    /// The package's own report: `retries` failures in a row end the run as the probe's do;
    /// a good report clears only the reports' count, and schedules no probe.
    fn reported(&mut self, run: Run, ok: bool, policy: &Policy) -> Vec<Action> {
        let Some(h) = policy.health else {
            return Vec::new();
        };
        if ok {
            self.report_failures = 0;
            if self.failures == 0 {
                self.health = HealthState::Healthy;
            }
            return Vec::new();
        }
        self.report_failures += 1;
        self.health = HealthState::Unhealthy;
        if self.report_failures < h.retries {
            return Vec::new();
        }
        self.end_run(
            run,
            Report::Unhealthy {
                failures: self.report_failures,
            },
        )
    }

    /// How long a run must last before its package may restart it: nothing for the first
    /// [`SELF_RESTARTS_FREE`] of a streak, then the k-th paced one the low end of what the
    /// k-th crash restart would wait (no draw: the package asks, no fleet restarts in
    /// step), at least the default policy's, at most the streak's window (after which the
    /// streak is over anyway).
    fn self_restart_delay(&self, policy: &Policy) -> u64 {
        let n = self.record.self_restarts;
        if n < SELF_RESTARTS_FREE {
            return 0;
        }
        let k = n + 1 - SELF_RESTARTS_FREE;
        let floor = SELF_FLOOR_MS
            .saturating_mul(1 << (k - 1).min(20))
            .min(SELF_FLOOR_CAP_MS);
        let window = policy.reset_period_ms.max(SELF_RESTART_WINDOW_MS);
        policy.wait_range(k).0.max(floor).min(window)
    }

    /// A run that lasted the reset period clears the retry count, and one that lasted the
    /// self-restarts' window their streak.
    fn long_run_resets(&mut self, now_ms: u64, policy: &Policy) {
        let Some(lasted) = self.started_ms.map(|t| now_ms.saturating_sub(t)) else {
            return;
        };
        if lasted >= policy.reset_period_ms {
            self.record.retries = 0;
        }
        if lasted >= policy.reset_period_ms.max(SELF_RESTART_WINDOW_MS) {
            self.record.self_restarts = 0;
        }
    }

    /// The package asks to restart `run`: counted and begun if its pace allows, else
    /// nothing (the API has answered `429` with the time it may ask again).
    fn restart_requested(&mut self, now_ms: u64, run: Run, policy: &Policy) -> Vec<Action> {
        if self.run != Some(run) || self.phase != Phase::Running || now_ms < self.self_restart_ms {
            return Vec::new();
        }
        self.long_run_resets(now_ms, policy);
        self.record.self_restarts = self.record.self_restarts.saturating_add(1);
        self.record.restarts = self.record.restarts.saturating_add(1);
        self.phase = Phase::Restarting { ending: false };
        self.check_due = None;
        self.keepalive_due = None;
        Vec::new()
    }

    /// This run is to be ended (and its end counted as a failure), for `why`.
    fn end_run(&mut self, run: Run, why: Report) -> Vec<Action> {
        self.phase = Phase::Killing;
        self.check_due = None;
        self.keepalive_due = None;
        vec![Action::Report(why), Action::Kill(run)]
    }

    /// It ended (`exit`), or a start failed (`None`).
    fn ended(&mut self, now_ms: u64, exit: Option<Exit>, policy: &Policy) -> Vec<Action> {
        let mut out = Vec::new();
        if exit.is_some() {
            out.push(Action::Release);
        }
        let wanted_end = self.phase == Phase::Stopping;
        let unhealthy = self.phase == Phase::Killing;
        let failed = unhealthy || exit.is_none_or(|e| e.failed());
        // The OOM killer's SIGKILL of the init: reported as the OOM kill it is.
        let oom_end = exit.is_some_and(|e| e.signal == Some(9))
            && self
                .last_oom_ms
                .is_some_and(|t| now_ms.saturating_sub(t) < OOM_END_MS);
        // An unhealthy run was reported when it was killed.
        if failed && !wanted_end && !unhealthy && !oom_end {
            out.push(Action::Report(Report::Failed(exit)));
        }
        self.long_run_resets(now_ms, policy);
        self.started_ms = None;
        let restart = !wanted_end
            && match policy.restart {
                RestartPolicy::Never => false,
                RestartPolicy::OnFailure => failed,
                RestartPolicy::Always => true,
            };
        if !restart {
            self.phase = Phase::Stopped;
            return out;
        }
        if self.record.retries >= policy.max_retries {
            self.phase = Phase::Failed;
            self.record.failed = true;
            out.push(Action::Report(Report::CrashLoop {
                retries: self.record.retries,
            }));
            return out;
        }
        self.record.retries += 1;
        self.record.restarts = self.record.restarts.saturating_add(1);
        let until_ms = now_ms + self.wait(self.record.retries, policy);
        self.phase = Phase::Waiting { until_ms };
        out.push(Action::Hold { until_ms });
        out
    }

    /// The wait before the `n`-th retry: drawn from its range, or its low end without jitter.
    fn wait(&mut self, n: u32, policy: &Policy) -> u64 {
        let (lo, hi) = policy.wait_range(n);
        if !policy.jitter || hi <= lo {
            return lo;
        }
        // xorshift32: enough to keep a fleet's restarts apart, no dependency.
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng = x;
        lo + (x as u64) % (hi - lo + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: Exit = Exit {
        code: Some(0),
        signal: None,
    };
    const FAIL: Exit = Exit {
        code: Some(3),
        signal: None,
    };
    const KILLED: Exit = Exit {
        code: None,
        signal: Some(9),
    };

    fn policy(restart: RestartPolicy) -> Policy {
        Policy {
            restart,
            ..Policy::never()
        }
    }

    /// Runs events through a fresh machine: (time, event, expected actions, phase after).
    fn table(p: &Policy, rows: &[(u64, Event, Vec<Action>, Phase)]) -> Machine {
        let mut m = Machine::new(1);
        for (i, (now, ev, want, phase)) in rows.iter().enumerate() {
            let got = m.on(*now, ev, p);
            assert_eq!(&got, want, "row {i}: {ev:?} at {now}");
            assert_eq!(m.phase(), *phase, "row {i}: {ev:?} at {now}");
        }
        m
    }

    fn boot(running: Option<Run>, autostart: bool, ended: Option<Exit>, record: Record) -> Event {
        Event::Boot {
            running,
            autostart,
            ended,
            record,
        }
    }

    #[test]
    fn without_a_restart_policy_an_end_releases_and_reports_failures_only() {
        let p = policy(RestartPolicy::Never);
        table(
            &p,
            &[
                (0, Event::Started(7), vec![], Phase::Running),
                (
                    10,
                    Event::Exited(7, OK),
                    vec![Action::Release],
                    Phase::Stopped,
                ),
                (20, Event::Started(7), vec![], Phase::Running),
                (
                    30,
                    Event::Exited(7, KILLED),
                    vec![
                        Action::Release,
                        Action::Report(Report::Failed(Some(KILLED))),
                    ],
                    Phase::Stopped,
                ),
                (40, Event::Tick, vec![], Phase::Stopped),
                (
                    50,
                    Event::StartFailed,
                    vec![Action::Report(Report::Failed(None))],
                    Phase::Stopped,
                ),
            ],
        );
    }

    #[test]
    fn an_operator_stop_is_no_failure_and_restarts_nothing() {
        for r in [
            RestartPolicy::Never,
            RestartPolicy::OnFailure,
            RestartPolicy::Always,
        ] {
            table(
                &policy(r),
                &[
                    (0, Event::Started(7), vec![], Phase::Running),
                    (5, Event::StopRequested, vec![], Phase::Stopping),
                    (
                        9,
                        Event::Exited(7, KILLED),
                        vec![Action::Release],
                        Phase::Stopped,
                    ),
                    (5_000, Event::Tick, vec![], Phase::Stopped),
                ],
            );
        }
    }

    #[test]
    fn an_operators_start_during_a_backoff_is_a_clean_slate_and_a_stop_before_a_start_ends_it() {
        let p = tr181();
        let mut m = table(
            &p,
            &[
                (0, Event::Started(7), vec![], Phase::Running),
                (
                    10,
                    Event::Exited(7, FAIL),
                    vec![
                        Action::Release,
                        Action::Report(Report::Failed(Some(FAIL))),
                        Action::Hold { until_ms: 110 },
                    ],
                    Phase::Waiting { until_ms: 110 },
                ),
                (20, Event::Started(8), vec![], Phase::Running),
            ],
        );
        assert_eq!(m.record(), Record::default());
        // a held start that is not to happen (safe mode): stopped, nothing pending
        assert_eq!(
            m.on(30, &Event::Exited(8, FAIL), &p).last(),
            Some(&Action::Hold { until_ms: 130 })
        );
        assert_eq!(m.on(130, &Event::Tick, &p), vec![Action::Start]);
        assert_eq!(m.on(131, &Event::StopRequested, &p), vec![]);
        assert_eq!((m.phase(), m.due()), (Phase::Stopped, None));
    }

    /// Every `Who`, every intent: in safe mode no start goes ahead (the supervisor's own
    /// refused start leaves the container stopped, no failure); a scheduled start waits for
    /// the operator after a crash loop and does not cut into a held restart, a start or a
    /// stop; the operator's stop and the container's own drop a held restart at once.
    #[test]
    fn intents_are_refused_or_taken_by_the_machine() {
        use Who::*;
        const WHO: [Who; 7] = [
            Operator, Container, Schedule, Upgrade, Daemon, Supervisor, Guard,
        ];
        let stop = Intent::Stop { timeout: None };
        let p = tr181();
        let waiting = || {
            let mut m = Machine::new(1);
            m.on(0, &Event::Started(7), &p);
            m.on(10, &Event::Exited(7, FAIL), &p);
            assert!(matches!(m.phase(), Phase::Waiting { .. }));
            m
        };
        for who in WHO {
            for intent in [Intent::Start, Intent::Restart] {
                let mut m = waiting();
                let before = m.phase();
                assert_eq!(m.ask(&intent, who, true), Err(Refusal::SafeMode), "{who:?}");
                let after = if who == Supervisor {
                    Phase::Stopped
                } else {
                    before
                };
                assert_eq!(m.phase(), after, "{who:?}");
            }
            let mut m = waiting();
            assert_eq!(m.ask(&stop, who, true), Ok(()), "{who:?}: stops go ahead");
            let cancelled = matches!(who, Operator | Container);
            assert_eq!(m.phase() == Phase::Stopped, cancelled, "{who:?}");
            assert_eq!(m.due().is_none(), cancelled, "{who:?}");
            assert_eq!(
                m.on(5_000, &Event::Tick, &p).is_empty(),
                cancelled,
                "{who:?}"
            );
        }
        // A scheduled start.
        let mut m = waiting();
        assert_eq!(
            m.ask(&Intent::Start, Schedule, false),
            Err(Refusal::Busy("backoff"))
        );
        assert_eq!(m.ask(&Intent::Start, Operator, false), Ok(()));
        let mut m = Machine::new(1);
        assert_eq!(m.ask(&Intent::Start, Schedule, false), Ok(()));
        m.on(0, &Event::Started(7), &p);
        assert_eq!(m.ask(&Intent::Start, Schedule, false), Ok(()), "running");
        m.on(1, &Event::StopRequested, &p);
        assert_eq!(
            m.ask(&Intent::Start, Schedule, false),
            Err(Refusal::Busy("stopping"))
        );
        m.on(2, &Event::Exited(7, OK), &p);
        m.on(3, &Event::Started(8), &p);
        let mut t = 3;
        for _ in 0..10 {
            if m.phase() == Phase::Failed {
                break;
            }
            m.on(t + 1, &Event::Exited(8, FAIL), &p);
            t += 1_000;
            m.on(t, &Event::Tick, &p);
            if m.phase() == Phase::Starting {
                m.on(t, &Event::Started(8), &p);
            }
        }
        assert_eq!(m.ask(&Intent::Start, Schedule, false), Err(Refusal::Failed));
        assert_eq!(m.ask(&Intent::Start, Supervisor, false), Ok(()));
    }

    #[test]
    fn a_stop_during_a_backoff_drops_the_held_restart() {
        let p = policy(RestartPolicy::OnFailure);
        table(
            &p,
            &[
                (0, Event::Started(7), vec![], Phase::Running),
                (
                    10,
                    Event::Exited(7, FAIL),
                    vec![
                        Action::Release,
                        Action::Report(Report::Failed(Some(FAIL))),
                        Action::Hold { until_ms: 1_010 },
                    ],
                    Phase::Waiting { until_ms: 1_010 },
                ),
                (20, Event::StopRequested, vec![], Phase::Stopped),
                (2_000, Event::Tick, vec![], Phase::Stopped),
            ],
        );
    }

    pub(super) fn tr181() -> Policy {
        Policy {
            restart: RestartPolicy::OnFailure,
            min_wait_ms: 100,
            max_wait_ms: 300,
            multiplier_milli: 2_000,
            max_retries: 3,
            reset_period_ms: 10_000,
            jitter: false,
            health: None,
        }
    }

    #[test]
    fn on_failure_restarts_with_growing_waits_and_fails_after_the_maximum_retry_count() {
        let p = tr181();
        let failed = |e: Exit| vec![Action::Release, Action::Report(Report::Failed(Some(e)))];
        let hold = |e: Exit, until_ms: u64| {
            let mut v = failed(e);
            v.push(Action::Hold { until_ms });
            v
        };
        let m = table(
            &p,
            &[
                (0, Event::Started(7), vec![], Phase::Running),
                // a clean exit: no restart under on-failure
                (
                    10,
                    Event::Exited(7, OK),
                    vec![Action::Release],
                    Phase::Stopped,
                ),
                (20, Event::Started(7), vec![], Phase::Running),
                (
                    30,
                    Event::Exited(7, FAIL),
                    hold(FAIL, 130),
                    Phase::Waiting { until_ms: 130 },
                ),
                (100, Event::Tick, vec![], Phase::Waiting { until_ms: 130 }),
                (130, Event::Tick, vec![Action::Start], Phase::Starting),
                (131, Event::Started(7), vec![], Phase::Running),
                (
                    140,
                    Event::Exited(7, KILLED),
                    hold(KILLED, 340),
                    Phase::Waiting { until_ms: 340 },
                ),
                (340, Event::Tick, vec![Action::Start], Phase::Starting),
                // a failed start counts as a failure; the wait is capped at 300
                (
                    341,
                    Event::StartFailed,
                    vec![
                        Action::Report(Report::Failed(None)),
                        Action::Hold { until_ms: 641 },
                    ],
                    Phase::Waiting { until_ms: 641 },
                ),
                (641, Event::Tick, vec![Action::Start], Phase::Starting),
                (642, Event::Started(7), vec![], Phase::Running),
                // the failure after the third retry: failed
                (
                    650,
                    Event::Exited(7, FAIL),
                    {
                        let mut v = failed(FAIL);
                        v.push(Action::Report(Report::CrashLoop { retries: 3 }));
                        v
                    },
                    Phase::Failed,
                ),
                (20_000, Event::Tick, vec![], Phase::Failed),
            ],
        );
        assert_eq!(
            m.record(),
            Record {
                retries: 3,
                restarts: 3,
                failed: true,
                self_restarts: 0
            }
        );
        assert_eq!(m.state(), "failed");
        // a scheduled job starts it: its record stays (the restarts it made still count)
        let mut m = m;
        let mut resumed = m.clone();
        assert_eq!(resumed.on(20_001, &Event::Resumed(8), &p), vec![]);
        assert_eq!(resumed.record().restarts, 3);
        assert_eq!(resumed.state(), "running");
        // the operator starts it: a clean slate, the first wait again
        assert_eq!(m.on(20_001, &Event::Started(8), &p), vec![]);
        assert_eq!(m.record(), Record::default());
        assert_eq!(
            m.on(20_002, &Event::Exited(8, FAIL), &p),
            hold(FAIL, 20_102)
        );
    }

    #[test]
    fn a_reset_leaves_failed_without_starting_anything() {
        let p = Policy {
            max_retries: 0,
            ..tr181()
        };
        let mut m = table(
            &p,
            &[
                (0, Event::Started(7), vec![], Phase::Running),
                (
                    5,
                    Event::Exited(7, FAIL),
                    vec![
                        Action::Release,
                        Action::Report(Report::Failed(Some(FAIL))),
                        Action::Report(Report::CrashLoop { retries: 0 }),
                    ],
                    Phase::Failed,
                ),
                (6, Event::Reset, vec![], Phase::Stopped),
            ],
        );
        assert_eq!(m.record(), Record::default());
        assert_eq!(m.on(7, &Event::Tick, &p), vec![]);
    }

    #[test]
    fn always_restarts_after_a_clean_exit_and_a_run_of_the_reset_period_resets_the_count() {
        let p = Policy {
            restart: RestartPolicy::Always,
            max_retries: 5,
            reset_period_ms: 1_000,
            max_wait_ms: 1_000,
            ..tr181()
        };
        table(
            &p,
            &[
                (0, Event::Started(7), vec![], Phase::Running),
                (
                    10,
                    Event::Exited(7, OK),
                    vec![Action::Release, Action::Hold { until_ms: 110 }],
                    Phase::Waiting { until_ms: 110 },
                ),
                (110, Event::Tick, vec![Action::Start], Phase::Starting),
                (111, Event::Started(7), vec![], Phase::Running),
                (
                    120,
                    Event::Exited(7, OK),
                    vec![Action::Release, Action::Hold { until_ms: 320 }],
                    Phase::Waiting { until_ms: 320 },
                ),
                (320, Event::Tick, vec![Action::Start], Phase::Starting),
                (321, Event::Started(7), vec![], Phase::Running),
                // ran for a whole reset period: the first wait again
                (
                    5_000,
                    Event::Exited(7, OK),
                    vec![Action::Release, Action::Hold { until_ms: 5_100 }],
                    Phase::Waiting { until_ms: 5_100 },
                ),
            ],
        );
    }

    #[test]
    fn waits_are_drawn_from_the_tr181_ranges() {
        let p = Policy {
            min_wait_ms: 1_000,
            max_wait_ms: 20_000,
            multiplier_milli: 2_500,
            ..tr181()
        };
        assert_eq!(p.wait_range(1), (1_000, 2_500));
        assert_eq!(p.wait_range(2), (2_500, 6_250));
        assert_eq!(p.wait_range(4), (15_625, 20_000));
        assert_eq!(p.wait_range(9), (20_000, 20_000));
        let p = Policy { jitter: true, ..p };
        let mut seen = std::collections::BTreeSet::new();
        for seed in 1..200u32 {
            let mut m = Machine::new(seed.wrapping_mul(2_654_435_761));
            for n in 1..6 {
                let w = m.wait(n, &p);
                let (lo, hi) = p.wait_range(n);
                assert!((lo..=hi).contains(&w), "retry {n}: {w} not in {lo}..={hi}");
                if n == 1 {
                    seen.insert(w / 100);
                }
            }
        }
        // spread over the range, not one value
        assert!(seen.len() > 10, "{seen:?}");
    }

    #[test]
    fn the_end_of_an_earlier_run_changes_nothing() {
        // stop, then start again before the first run's end is reported: the late report is
        // not the new run's end, and restarts nothing
        table(
            &policy(RestartPolicy::Always),
            &[
                (0, Event::Started(7), vec![], Phase::Running),
                (5, Event::StopRequested, vec![], Phase::Stopping),
                (9, Event::Started(8), vec![], Phase::Running),
                (10, Event::Exited(7, KILLED), vec![], Phase::Running),
                (
                    20,
                    Event::Exited(8, FAIL),
                    vec![
                        Action::Release,
                        Action::Report(Report::Failed(Some(FAIL))),
                        Action::Hold { until_ms: 1_020 },
                    ],
                    Phase::Waiting { until_ms: 1_020 },
                ),
                // reported twice: the second is no run's end any more
                (
                    21,
                    Event::Exited(8, FAIL),
                    vec![],
                    Phase::Waiting { until_ms: 1_020 },
                ),
            ],
        );
    }

    #[test]
    fn at_boot_the_operators_last_word_and_the_record_decide() {
        let p = policy(RestartPolicy::Never);
        let none = Record::default();
        // running: taken over
        table(
            &p,
            &[(0, boot(Some(7), true, None, none), vec![], Phase::Running)],
        );
        // started before the reboot, not stopped since: started again
        table(
            &p,
            &[(
                0,
                boot(None, true, None, none),
                vec![Action::Start],
                Phase::Starting,
            )],
        );
        // stopped by the operator: left alone
        table(
            &p,
            &[(0, boot(None, false, None, none), vec![], Phase::Stopped)],
        );
        // failed before the reboot: still failed, not started
        let failed = Record {
            retries: 5,
            restarts: 5,
            failed: true,
            self_restarts: 0,
        };
        let m = table(
            &p,
            &[(0, boot(None, true, None, failed), vec![], Phase::Failed)],
        );
        assert_eq!(m.record(), failed);
        // ended while no daemon watched: its policy decides (none here), reported as seen
        table(
            &p,
            &[(
                0,
                boot(None, true, Some(KILLED), none),
                vec![Action::Report(Report::Failed(Some(KILLED)))],
                Phase::Stopped,
            )],
        );
        // the count kept on disk goes on: the second retry's wait
        let p = tr181();
        let once = Record {
            retries: 1,
            restarts: 1,
            failed: false,
            self_restarts: 0,
        };
        table(
            &p,
            &[(
                0,
                boot(None, true, Some(FAIL), once),
                vec![
                    Action::Report(Report::Failed(Some(FAIL))),
                    Action::Hold { until_ms: 200 },
                ],
                Phase::Waiting { until_ms: 200 },
            )],
        );
    }

    fn checked(retries: u32, ready_on_start: bool) -> Policy {
        Policy {
            health: Some(HealthPolicy {
                interval_ms: 500,
                retries,
                ready_on_start,
                ready_by_api: false,
                probe: true,
                watchdog_ms: None,
            }),
            ..tr181()
        }
    }

    #[test]
    fn health_checks_are_scheduled_and_make_the_run_ready() {
        let p = checked(2, false);
        let mut m = table(
            &p,
            &[
                (0, Event::Started(7), vec![], Phase::Running),
                (400, Event::Tick, vec![], Phase::Running),
                // the first check comes early (500 ms interval, 1 s first-check bound)
                (500, Event::Tick, vec![Action::Check(7)], Phase::Running),
                // while it runs, no second one
                (900, Event::Tick, vec![], Phase::Running),
            ],
        );
        assert!(!m.ready());
        assert_eq!(m.health(), (HealthState::Starting, 0));
        assert_eq!(m.on(950, &Event::Health(7, true), &p), vec![]);
        assert!(m.ready());
        // an interval after the check began, not after it ended
        assert_eq!(m.due(), Some(1_000));
        assert_eq!(m.on(1_000, &Event::Tick, &p), vec![Action::Check(7)]);
        // a check that took longer than the interval: the next one at once
        assert_eq!(m.on(1_700, &Event::Health(7, true), &p), vec![]);
        assert_eq!(m.due(), Some(1_700));
        assert_eq!(m.on(1_700, &Event::Tick, &p), vec![Action::Check(7)]);
        // a result for another run changes nothing
        assert_eq!(m.on(1_460, &Event::Health(6, false), &p), vec![]);
        assert_eq!(m.health(), (HealthState::Healthy, 0));
        // ready at start: no check needed for readiness
        let p = checked(2, true);
        let m = table(&p, &[(0, Event::Started(7), vec![], Phase::Running)]);
        assert!(m.ready());
        // no health section: ready, never checked
        let m = table(&tr181(), &[(0, Event::Started(7), vec![], Phase::Running)]);
        assert!(m.ready() && m.due().is_none());
    }

    /// A check the daemon could not make counts neither way: the state stays, and the next
    /// is due an interval later, as after a verdict (not never).
    #[test]
    fn a_skipped_check_is_no_verdict_and_the_next_stays_due() {
        let p = checked(2, false);
        let mut m = table(&p, &[(0, Event::Started(7), vec![], Phase::Running)]);
        for t in [500, 1_000, 1_500, 2_000] {
            assert_eq!(m.on(t, &Event::Tick, &p), vec![Action::Check(7)], "at {t}");
            assert_eq!(m.on(t + 10, &Event::HealthSkipped(7), &p), vec![]);
            assert_eq!(m.state(), "running");
            assert_eq!(
                m.on(t + 20, &Event::Tick, &p),
                vec![],
                "at {t}: due again at once"
            );
        }
        // a verdict after them counts as the first
        assert_eq!(m.on(2_500, &Event::Tick, &p), vec![Action::Check(7)]);
        assert_eq!(m.on(2_510, &Event::Health(7, false), &p), vec![]);
        assert_eq!(m.state(), "unhealthy");
        // another run's, or one after the run: nothing
        assert_eq!(m.on(2_520, &Event::HealthSkipped(6), &p), vec![]);
    }

    #[test]
    fn retries_failed_checks_in_a_row_kill_the_run_and_restart_it() {
        let p = checked(2, false);
        let mut m = table(&p, &[(0, Event::Started(7), vec![], Phase::Running)]);
        assert_eq!(m.on(500, &Event::Tick, &p), vec![Action::Check(7)]);
        assert_eq!(m.on(510, &Event::Health(7, false), &p), vec![]);
        assert_eq!(m.state(), "unhealthy");
        // a pass in between starts the count again
        assert_eq!(m.on(1_010, &Event::Tick, &p), vec![Action::Check(7)]);
        assert_eq!(m.on(1_020, &Event::Health(7, true), &p), vec![]);
        assert_eq!(m.state(), "running");
        assert_eq!(m.on(1_520, &Event::Tick, &p), vec![Action::Check(7)]);
        assert_eq!(m.on(1_530, &Event::Health(7, false), &p), vec![]);
        assert_eq!(m.on(2_030, &Event::Tick, &p), vec![Action::Check(7)]);
        assert_eq!(
            m.on(2_040, &Event::Health(7, false), &p),
            vec![
                Action::Report(Report::Unhealthy { failures: 2 }),
                Action::Kill(7)
            ]
        );
        assert_eq!(m.phase(), Phase::Killing);
        assert_eq!(m.due(), None);
        // its end (by our SIGKILL, or a clean exit on SIGTERM) is a failure, reported once
        assert_eq!(
            m.on(2_100, &Event::Exited(7, OK), &p),
            vec![Action::Release, Action::Hold { until_ms: 2_200 }]
        );
        assert_eq!(m.record().retries, 1);
        // even under `never`, an unhealthy run is ended (and stays stopped)
        let p = Policy {
            restart: RestartPolicy::Never,
            ..checked(1, false)
        };
        let mut m = table(&p, &[(0, Event::Started(7), vec![], Phase::Running)]);
        m.on(500, &Event::Tick, &p);
        assert_eq!(
            m.on(501, &Event::Health(7, false), &p),
            vec![
                Action::Report(Report::Unhealthy { failures: 1 }),
                Action::Kill(7)
            ]
        );
        assert_eq!(
            m.on(600, &Event::Exited(7, KILLED), &p),
            vec![Action::Release]
        );
        assert_eq!(m.phase(), Phase::Stopped);
    }

    #[test]
    fn oom_kills_are_reported_once_and_the_init_they_kill_is_no_second_report() {
        let p = tr181();
        let mut m = table(&p, &[(0, Event::Started(7), vec![], Phase::Running)]);
        assert_eq!(
            m.on(5, &Event::OomKilled(7, 1), &p),
            vec![Action::Report(Report::OomKilled { kills: 1 })]
        );
        // another run's is stale
        assert_eq!(m.on(6, &Event::OomKilled(6, 1), &p), vec![]);
        // kill after kill: one report per window
        assert_eq!(m.on(50, &Event::OomKilled(7, 3), &p), vec![]);
        // the init killed by it: restarted under its policy, not reported again
        assert_eq!(
            m.on(100, &Event::Exited(7, KILLED), &p),
            vec![Action::Release, Action::Hold { until_ms: 200 }]
        );
        // a SIGKILL long after an OOM kill is its own failure
        let mut m = table(&p, &[(0, Event::Started(8), vec![], Phase::Running)]);
        m.on(5, &Event::OomKilled(8, 2), &p);
        assert_eq!(
            m.on(5 + OOM_END_MS, &Event::Exited(8, KILLED), &p)[1],
            Action::Report(Report::Failed(Some(KILLED)))
        );
    }

    #[test]
    fn guard_kills_are_reported() {
        let p = policy(RestartPolicy::Never);
        let k = GuardKill {
            pid: 42,
            init: false,
            rss: 64 << 20,
            priority: -10,
            available: 10 << 20,
        };
        table(
            &p,
            &[
                (0, Event::Started(7), vec![], Phase::Running),
                (
                    2,
                    Event::GuardKilled(k),
                    vec![Action::Report(Report::GuardKilled(k))],
                    Phase::Running,
                ),
            ],
        );
    }

    /// One self-requested restart of the current run: asked, answered, ended, started
    /// again as `next`. Returns what the request got.
    fn self_restart(m: &mut Machine, now: u64, run: Run, next: Run, p: &Policy) -> Vec<Action> {
        let got = m.on(now, &Event::RestartRequested(run), p);
        assert_eq!(m.phase(), Phase::Restarting { ending: false });
        assert_eq!(m.self_restart_at(), None, "a second ask while it ends");
        assert_eq!(
            m.on(now, &Event::RestartAnswered(run), p),
            vec![Action::Kill(run)]
        );
        assert_eq!(m.on(now, &Event::RestartAnswered(run), p), vec![], "once");
        assert_eq!(m.state(), "stopping");
        assert_eq!(
            m.on(now + 1, &Event::Exited(run, KILLED), p),
            vec![Action::Release, Action::Start],
            "no failure, no report, no wait"
        );
        assert_eq!(m.phase(), Phase::Starting);
        assert_eq!(m.on(now + 2, &Event::Started(next), p), vec![]);
        got
    }

    #[test]
    fn a_restart_the_package_asks_for_is_counted_then_paced_like_crash_restarts() {
        // whatever the restart policy: asked for, not a crash
        for restart in [RestartPolicy::Never, RestartPolicy::Always] {
            let p = policy(restart);
            let mut m = Machine::new(1);
            m.on(0, &Event::Started(1), &p);
            let mut now = 0;
            let mut delays = Vec::new();
            for run in 1..=14 {
                let at = m.self_restart_at().unwrap();
                delays.push(at - now);
                // asked too early: refused, nothing changes
                if at > now {
                    assert_eq!(m.on(at - 1, &Event::RestartRequested(run), &p), vec![]);
                    assert_eq!(m.phase(), Phase::Running);
                }
                now = at;
                self_restart(&mut m, now, run, run + 1, &p);
                now += 2;
                assert_eq!(m.record().restarts, run as u32, "counted");
                assert_eq!(m.record().retries, 0, "no failure");
                assert!(!m.record().failed);
            }
            // 3 at once, then the default policy's doubling waits, capped at 5 minutes
            assert_eq!(
                delays,
                vec![
                    0, 0, 0, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000,
                    300_000, 300_000
                ],
                "{restart:?}"
            );
            // a run that lasts the window ends the streak: free again
            let at = m.self_restart_at().unwrap();
            assert_eq!(at, now + 300_000);
            now += SELF_RESTART_WINDOW_MS;
            self_restart(&mut m, now, 15, 16, &p);
            assert_eq!(m.record().self_restarts, 1);
            assert_eq!(m.self_restart_at(), Some(now + 2));
        }
    }

    #[test]
    fn a_manifest_cannot_make_its_own_restarts_faster_than_the_default_pace() {
        let p = Policy {
            restart: RestartPolicy::Always,
            min_wait_ms: 0,
            max_wait_ms: 0,
            multiplier_milli: 1_000,
            max_retries: 1_000,
            reset_period_ms: 0,
            jitter: true,
            health: None,
        };
        let mut m = Machine::new(7);
        m.on(0, &Event::Started(1), &p);
        let mut now = 0;
        let mut delays = Vec::new();
        for run in 1..=6 {
            let at = m.self_restart_at().unwrap();
            delays.push(at - now);
            now = at;
            self_restart(&mut m, now, run, run + 1, &p);
            now += 2;
        }
        assert_eq!(delays, vec![0, 0, 0, 1_000, 2_000, 4_000]);
        // a slower policy's waits are kept (the low end of its range, above the floor)
        let slow = Policy {
            min_wait_ms: 10_000,
            max_wait_ms: 60_000,
            multiplier_milli: 2_000,
            ..p
        };
        for seed in 1..50 {
            let mut m = Machine::new(seed);
            m.on(
                0,
                &boot(
                    Some(1),
                    true,
                    None,
                    Record {
                        self_restarts: 4,
                        ..Record::default()
                    },
                ),
                &slow,
            );
            // the 5th of the streak is the 2nd paced one: [20 s, 40 s], its low end
            assert_eq!(m.self_restart_at(), Some(20_000));
        }
    }

    #[test]
    fn a_package_that_exits_right_after_asking_is_started_again_once_without_a_failure() {
        let p = policy(RestartPolicy::OnFailure);
        table(
            &p,
            &[
                (0, Event::Started(7), vec![], Phase::Running),
                (
                    10,
                    Event::RestartRequested(7),
                    vec![],
                    Phase::Restarting { ending: false },
                ),
                (
                    12,
                    Event::Exited(7, KILLED),
                    vec![Action::Release, Action::Start],
                    Phase::Starting,
                ),
                // its answer was read after the end: nothing left to end
                (13, Event::RestartAnswered(7), vec![], Phase::Starting),
                (20, Event::Started(8), vec![], Phase::Running),
            ],
        );
    }

    #[test]
    fn self_restarts_of_another_run_or_while_ending_are_refused_and_an_operator_stop_wins() {
        let p = policy(RestartPolicy::Always);
        let m = table(
            &p,
            &[
                (0, Event::Started(7), vec![], Phase::Running),
                // an earlier run's request, late
                (1, Event::RestartRequested(6), vec![], Phase::Running),
                (2, Event::RestartAnswered(7), vec![], Phase::Running),
                (
                    3,
                    Event::RestartRequested(7),
                    vec![],
                    Phase::Restarting { ending: false },
                ),
                // the operator's stop: stopped, not restarted
                (4, Event::StopRequested, vec![], Phase::Stopping),
                (5, Event::RestartAnswered(7), vec![], Phase::Stopping),
                (
                    6,
                    Event::Exited(7, OK),
                    vec![Action::Release],
                    Phase::Stopped,
                ),
                (7, Event::RestartRequested(7), vec![], Phase::Stopped),
            ],
        );
        assert_eq!(m.self_restart_at(), None);
        // an unhealthy run being killed cannot turn its end into a wanted one
        let p = Policy {
            health: Some(HealthPolicy {
                interval_ms: 10,
                retries: 1,
                ready_on_start: false,
                ready_by_api: false,
                probe: true,
                watchdog_ms: None,
            }),
            ..policy(RestartPolicy::Always)
        };
        let mut m = Machine::new(1);
        m.on(0, &Event::Started(7), &p);
        m.on(10, &Event::Tick, &p);
        m.on(11, &Event::Health(7, false), &p);
        assert_eq!(m.phase(), Phase::Killing);
        assert_eq!(m.on(12, &Event::RestartRequested(7), &p), vec![]);
        assert_eq!(m.phase(), Phase::Killing);
        // and the operator's start is a clean slate for the streak too
        let p = policy(RestartPolicy::Never);
        let mut m = Machine::new(1);
        m.on(0, &Event::Started(1), &p);
        for run in 1..=3 {
            self_restart(&mut m, run as u64 * 10, run, run + 1, &p);
        }
        assert_eq!(m.self_restart_at(), Some(32 + 1_000));
        m.on(40, &Event::StopRequested, &p);
        m.on(41, &Event::Exited(4, OK), &p);
        m.on(50, &Event::Started(5), &p);
        assert_eq!(m.record(), Record::default());
        assert_eq!(m.self_restart_at(), Some(50));
    }
}

#[cfg(test)]
mod policy_tests {
    const OK: Exit = Exit {
        code: Some(0),
        signal: None,
    };
    use super::*;
    use crate::manifest::Manifest;

    #[test]
    fn a_manifest_becomes_a_policy() {
        let m = Manifest::parse(
            "[package]\nname = \"a\"\nversion = \"1\"\n[entrypoint]\nargv = [\"/a\"]\n\
             [restart]\npolicy = \"always\"\nmax_retries = 2\ndelay = \"90s\"\nmultiplier = 1.5\n\
             reset_period = \"3m\"\n[health]\ntcp = 80\ninterval = \"2s\"\nretries = 4\n",
        )
        .unwrap();
        let p = Policy::of(&m);
        assert_eq!(p.restart, RestartPolicy::Always);
        assert_eq!((p.max_retries, p.min_wait_ms), (2, 90_000));
        // a minimum wait above the default maximum raises the maximum: never shorter
        assert_eq!(p.max_wait_ms, 300_000);
        assert_eq!((p.multiplier_milli, p.reset_period_ms), (1_500, 180_000));
        assert!(p.jitter);
        assert_eq!(
            p.health,
            Some(HealthPolicy {
                interval_ms: 2_000,
                retries: 4,
                ready_on_start: false,
                ready_by_api: false,
                probe: true,
                watchdog_ms: None,
            })
        );
        assert_eq!(Policy::never().restart, RestartPolicy::Never);
    }

    fn reported(ready_by_api: bool, watchdog_ms: Option<u64>) -> Policy {
        Policy {
            health: Some(HealthPolicy {
                interval_ms: 30_000,
                retries: 2,
                ready_on_start: false,
                ready_by_api,
                probe: false,
                watchdog_ms,
            }),
            ..super::tests::tr181()
        }
    }

    #[test]
    fn readiness_by_api_comes_from_the_package_alone() {
        let p = reported(true, None);
        let mut m = Machine::new(1);
        m.on(0, &Event::Started(7), &p);
        // no probe: nothing is ever due, and a passed report does not make it ready
        assert_eq!((m.due(), m.ready()), (None, false));
        assert!(m.on(10, &Event::Health(7, true), &p).is_empty());
        assert!(!m.ready());
        assert_eq!(m.due(), None, "a report must not schedule probes");
        // another run's word counts for nothing
        m.on(20, &Event::Ready(6), &p);
        assert!(!m.ready());
        m.on(30, &Event::Ready(7), &p);
        assert!(m.ready());
        // a new run starts unready again
        m.on(40, &Event::Exited(7, OK), &p);
        m.on(50, &Event::Started(8), &p);
        assert!(!m.ready());
        // without ready = "api" and without a probe it is ready at once
        let mut m = Machine::new(1);
        m.on(0, &Event::Started(7), &reported(false, Some(5_000)));
        assert!(m.ready());
        // with a probe deciding readiness, the package's word does not count
        let p = Policy {
            health: Some(HealthPolicy {
                probe: true,
                ..reported(false, None).health.unwrap()
            }),
            ..reported(false, None)
        };
        let mut m = Machine::new(1);
        m.on(0, &Event::Started(7), &p);
        m.on(10, &Event::Ready(7), &p);
        assert!(!m.ready());
        // a run taken over by a restarted daemon said it before: ready
        let p = reported(true, None);
        let mut m = Machine::new(1);
        m.on(
            0,
            &Event::Boot {
                running: Some(7),
                autostart: true,
                ended: None,
                record: Record::default(),
            },
            &p,
        );
        assert!(m.ready());
    }

    #[test]
    fn reported_failures_end_the_run_after_retries() {
        let p = reported(false, None);
        let mut m = Machine::new(1);
        m.on(0, &Event::Started(7), &p);
        assert!(m.on(10, &Event::Reported(7, false), &p).is_empty());
        assert_eq!(m.state(), "unhealthy");
        assert!(m.on(20, &Event::Reported(7, true), &p).is_empty());
        assert_eq!(m.state(), "running");
        m.on(30, &Event::Reported(7, false), &p);
        assert_eq!(
            m.on(40, &Event::Reported(7, false), &p),
            vec![
                Action::Report(Report::Unhealthy { failures: 2 }),
                Action::Kill(7)
            ]
        );
        // a good report does not hide a failing probe, nor schedule one
        let p = Policy {
            health: Some(HealthPolicy {
                probe: true,
                retries: 3,
                ..reported(false, None).health.unwrap()
            }),
            ..reported(false, None)
        };
        let mut m = Machine::new(1);
        m.on(0, &Event::Started(7), &p);
        let due = m.due();
        m.on(10, &Event::Health(7, false), &p);
        let due_after_check = m.due();
        m.on(20, &Event::Reported(7, true), &p);
        assert_eq!((m.state(), m.health().1), ("unhealthy", 1));
        assert_eq!(m.due(), due_after_check, "a report must not move the probe");
        assert_ne!(due, None);
    }

    #[test]
    fn a_missed_keep_alive_kills_the_run_and_counts_as_a_failure() {
        let p = reported(false, Some(1_000));
        let mut m = Machine::new(1);
        m.on(0, &Event::Started(7), &p);
        assert_eq!(m.due(), Some(1_000));
        assert!(m.on(900, &Event::KeepAlive(7), &p).is_empty());
        assert_eq!(m.due(), Some(1_900));
        // a late keep-alive of an earlier run does not push the deadline
        m.on(1_000, &Event::KeepAlive(6), &p);
        assert!(m.on(1_899, &Event::Tick, &p).is_empty());
        assert_eq!(
            m.on(1_900, &Event::Tick, &p),
            vec![
                Action::Report(Report::WatchdogExpired { period_ms: 1_000 }),
                Action::Kill(7)
            ]
        );
        assert_eq!(m.state(), "unhealthy");
        assert_eq!(m.due(), None);
        // its end is a failure: restarted with backoff, no second report
        let a = m.on(
            2_000,
            &Event::Exited(
                7,
                Exit {
                    code: None,
                    signal: Some(9),
                },
            ),
            &p,
        );
        assert_eq!(a[0], Action::Release);
        assert!(matches!(a[1], Action::Hold { .. }), "{a:?}");
        assert_eq!(a.len(), 2, "{a:?}");
        // an operator's stop clears the deadline
        let mut m = Machine::new(1);
        m.on(0, &Event::Started(7), &p);
        m.on(10, &Event::StopRequested, &p);
        assert!(m.on(5_000, &Event::Tick, &p).is_empty());
    }
}
