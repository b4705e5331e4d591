//! Supervision decisions, as a pure state machine per container: events come in (the daemon
//! started, the container started, the operator stopped it, it ended, a health check failed,
//! the memory guard killed in it, time passed), actions come out (start it, release what it
//! held, hold a restart until a time, report). The daemon's supervisor thread feeds it and
//! carries the actions out; timers, signals and mounts stay there, so every decision here is
//! tested from tables, without root.
//!
//! Restarts back off exponentially (`delay_ms`, doubled per restart up to `delay_max_ms`);
//! a failure after `max_retries` restarts within `window_ms` is a crash loop: the machine
//! gives up until the operator starts the container again. A container that ran for a whole
//! window before it ended starts from a clean slate.

use crate::manifest::{Restart, RestartPolicy};

/// A container's restart policy: the manifest's `[restart]` (`policy`, `max_retries`,
/// `delay`), plus the cap on the doubling delay and the crash-loop window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub restart: RestartPolicy,
    /// The first delay before a restart; doubled after each, up to `delay_max_ms`.
    pub delay_ms: u64,
    pub delay_max_ms: u64,
    /// Restarts allowed within `window_ms`; one more failure is a crash loop.
    pub max_retries: u32,
    pub window_ms: u64,
}

/// The longest delay between restarts, whatever the doubling reaches.
pub const DELAY_MAX_MS: u64 = 60_000;
/// Restarts older than this no longer count towards a crash loop; a container that ran this
/// long before it ended starts from a clean slate.
pub const WINDOW_MS: u64 = 300_000;

impl Policy {
    /// No restarts: a container that ends stays stopped until the operator starts it.
    pub fn never() -> Policy {
        Policy {
            restart: RestartPolicy::Never,
            delay_ms: crate::manifest::DEFAULT_RESTART_DELAY_MS,
            delay_max_ms: DELAY_MAX_MS,
            max_retries: crate::manifest::DEFAULT_MAX_RETRIES,
            window_ms: WINDOW_MS,
        }
    }

    /// The policy a manifest's `[restart]` asks for.
    pub fn of(r: &Restart) -> Policy {
        Policy {
            restart: r.policy,
            delay_ms: r.delay_ms,
            delay_max_ms: DELAY_MAX_MS.max(r.delay_ms),
            max_retries: r.max_retries,
            window_ms: WINDOW_MS,
        }
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The daemon started and found the container running (this run) or not; `autostart` is
    /// the operator's last word (started, not stopped); `ended` is how it ended while no
    /// daemon watched, if it did.
    Boot {
        running: Option<Run>,
        autostart: bool,
        ended: Option<Exit>,
    },
    /// It runs (started by the operator or by this machine's `Start`).
    Started(Run),
    /// A start failed before the payload ran.
    StartFailed,
    /// The operator is stopping it: its end is no failure and nothing restarts it.
    StopRequested,
    /// That run ended.
    Exited(Run, Exit),
    HealthFailed,
    GuardKilled(GuardKill),
    /// Time passed: a held restart may be due.
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
    Report(Report),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// Ended on its own with a failure, or failed to start (no exit).
    Failed(Option<Exit>),
    /// Restarted `restarts` times within the window: no more restarts until the operator
    /// starts it.
    CrashLoop {
        restarts: u32,
    },
    HealthFailed,
    GuardKilled(GuardKill),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Stopped,
    Starting,
    Running,
    Stopping,
    Waiting {
        until_ms: u64,
    },
    /// A crash loop: given up until the operator starts it.
    GaveUp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    phase: Phase,
    /// The run this machine follows, while there is one.
    run: Option<Run>,
    /// When it was last started, for the clean slate after a whole window of running.
    started_ms: Option<u64>,
    /// Restarts this machine made within the window, oldest first.
    restarts: Vec<u64>,
    delay_ms: u64,
}

impl Machine {
    pub fn new(policy: &Policy) -> Machine {
        Machine {
            phase: Phase::Stopped,
            run: None,
            started_ms: None,
            restarts: Vec::new(),
            delay_ms: policy.delay_ms,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// When a held restart is due, if one is.
    pub fn due(&self) -> Option<u64> {
        match self.phase {
            Phase::Waiting { until_ms } => Some(until_ms),
            _ => None,
        }
    }

    pub fn on(&mut self, now_ms: u64, ev: &Event, policy: &Policy) -> Vec<Action> {
        match ev {
            Event::Boot {
                running: Some(run), ..
            }
            | Event::Started(run) => {
                if matches!(self.phase, Phase::GaveUp | Phase::Stopped)
                    && matches!(ev, Event::Started(_))
                {
                    // The operator's start: a clean slate.
                    self.restarts.clear();
                    self.delay_ms = policy.delay_ms;
                }
                self.phase = Phase::Running;
                self.run = Some(*run);
                self.started_ms = Some(now_ms);
                Vec::new()
            }
            Event::Boot {
                running: None,
                autostart,
                ended,
            } => match ended {
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
            },
            Event::StartFailed => self.ended(now_ms, None, policy),
            Event::StopRequested => {
                self.phase = Phase::Stopping;
                Vec::new()
            }
            // The end of another run than this one (an earlier run's, reported late).
            Event::Exited(run, _) if self.run != Some(*run) => Vec::new(),
            Event::Exited(_, exit) => {
                self.run = None;
                self.ended(now_ms, Some(*exit), policy)
            }
            Event::HealthFailed => vec![Action::Report(Report::HealthFailed)],
            Event::GuardKilled(k) => vec![Action::Report(Report::GuardKilled(*k))],
            Event::Tick => match self.phase {
                Phase::Waiting { until_ms } if now_ms >= until_ms => {
                    self.phase = Phase::Starting;
                    vec![Action::Start]
                }
                _ => Vec::new(),
            },
        }
    }

    /// It ended (`exit`), or a start failed (`None`).
    fn ended(&mut self, now_ms: u64, exit: Option<Exit>, policy: &Policy) -> Vec<Action> {
        let mut out = Vec::new();
        if exit.is_some() {
            out.push(Action::Release);
        }
        let wanted_end = self.phase == Phase::Stopping;
        let failed = exit.is_none_or(|e| e.failed());
        if failed && !wanted_end {
            out.push(Action::Report(Report::Failed(exit)));
        }
        if self
            .started_ms
            .is_some_and(|t| now_ms.saturating_sub(t) >= policy.window_ms)
        {
            self.restarts.clear();
            self.delay_ms = policy.delay_ms;
        }
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
        self.restarts
            .retain(|t| now_ms.saturating_sub(*t) < policy.window_ms);
        if self.restarts.len() >= policy.max_retries as usize {
            self.phase = Phase::GaveUp;
            out.push(Action::Report(Report::CrashLoop {
                restarts: self.restarts.len() as u32,
            }));
            return out;
        }
        let until_ms = now_ms + self.delay_ms;
        self.restarts.push(now_ms);
        self.delay_ms = (self.delay_ms * 2).min(policy.delay_max_ms);
        self.phase = Phase::Waiting { until_ms };
        out.push(Action::Hold { until_ms });
        out
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
    fn table(p: &Policy, rows: &[(u64, Event, Vec<Action>, Phase)]) {
        let mut m = Machine::new(p);
        for (i, (now, ev, want, phase)) in rows.iter().enumerate() {
            let got = m.on(*now, ev, p);
            assert_eq!(&got, want, "row {i}: {ev:?} at {now}");
            assert_eq!(m.phase(), *phase, "row {i}: {ev:?} at {now}");
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
    fn on_failure_restarts_with_a_doubling_delay_and_gives_up_on_a_crash_loop() {
        let p = Policy {
            restart: RestartPolicy::OnFailure,
            delay_ms: 100,
            delay_max_ms: 300,
            max_retries: 3,
            window_ms: 10_000,
        };
        let failed = |e: Exit| vec![Action::Release, Action::Report(Report::Failed(Some(e)))];
        let hold = |e: Exit, until_ms: u64| {
            let mut v = failed(e);
            v.push(Action::Hold { until_ms });
            v
        };
        table(
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
                // a failed start counts as a failure; the delay is capped at 300
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
                // the fourth failure within the window: a crash loop
                (
                    650,
                    Event::Exited(7, FAIL),
                    {
                        let mut v = failed(FAIL);
                        v.push(Action::Report(Report::CrashLoop { restarts: 3 }));
                        v
                    },
                    Phase::GaveUp,
                ),
                (20_000, Event::Tick, vec![], Phase::GaveUp),
                // the operator starts it: a clean slate, the first delay again
                (20_001, Event::Started(7), vec![], Phase::Running),
                (
                    20_002,
                    Event::Exited(7, FAIL),
                    hold(FAIL, 20_102),
                    Phase::Waiting { until_ms: 20_102 },
                ),
            ],
        );
    }

    #[test]
    fn always_restarts_after_a_clean_exit_and_a_long_run_resets_the_delay() {
        let p = Policy {
            restart: RestartPolicy::Always,
            delay_ms: 100,
            delay_max_ms: 1_000,
            max_retries: 5,
            window_ms: 1_000,
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
                // ran for a whole window: the first delay again
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
    fn at_boot_the_operators_last_word_decides() {
        let p = policy(RestartPolicy::Never);
        let boot = |running: bool, autostart, ended| Event::Boot {
            running: running.then_some(7),
            autostart,
            ended,
        };
        // running: taken over
        table(&p, &[(0, boot(true, true, None), vec![], Phase::Running)]);
        // started before the reboot, not stopped since: started again
        table(
            &p,
            &[(
                0,
                boot(false, true, None),
                vec![Action::Start],
                Phase::Starting,
            )],
        );
        // stopped by the operator: left alone
        table(&p, &[(0, boot(false, false, None), vec![], Phase::Stopped)]);
        // ended while no daemon watched: its policy decides (none here), reported as seen
        table(
            &p,
            &[(
                0,
                boot(false, true, Some(KILLED)),
                vec![Action::Report(Report::Failed(Some(KILLED)))],
                Phase::Stopped,
            )],
        );
        let p = policy(RestartPolicy::OnFailure);
        table(
            &p,
            &[(
                0,
                boot(false, true, Some(FAIL)),
                vec![
                    Action::Report(Report::Failed(Some(FAIL))),
                    Action::Hold { until_ms: 1_000 },
                ],
                Phase::Waiting { until_ms: 1_000 },
            )],
        );
    }

    #[test]
    fn health_failures_and_guard_kills_are_reported() {
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
                    1,
                    Event::HealthFailed,
                    vec![Action::Report(Report::HealthFailed)],
                    Phase::Running,
                ),
                (
                    2,
                    Event::GuardKilled(k),
                    vec![Action::Report(Report::GuardKilled(k))],
                    Phase::Running,
                ),
            ],
        );
    }
}

#[cfg(test)]
mod policy_tests {
    use super::*;

    #[test]
    fn a_manifest_restart_section_becomes_a_policy() {
        let p = Policy::of(&Restart {
            policy: RestartPolicy::Always,
            max_retries: 2,
            delay_ms: 90_000,
        });
        assert_eq!(p.restart, RestartPolicy::Always);
        assert_eq!((p.max_retries, p.delay_ms), (2, 90_000));
        // A first delay above the cap raises the cap: never shorter than asked.
        assert_eq!(p.delay_max_ms, 90_000);
        assert_eq!(Policy::never().restart, RestartPolicy::Never);
    }
}
