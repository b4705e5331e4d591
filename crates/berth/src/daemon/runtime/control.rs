//! The one way into a container's start and stop. Every start, stop and restart — the
//! operator's (the CLI, the web page, safe mode), a container's own through its API, a
//! scheduled job's, a fleet deployment's, an upgrade's or rollback's, the supervisor's — is an
//! [`Intent`] with [`Who`] asks for it, given here; only this module calls `start.rs` and
//! `stop.rs` (a unit test holds every other module of the daemon to it). What differs by who
//! asks is decided here, in one table: whether the supervisor is told of a stop, whether the
//! container's boot mark goes, whether a start keeps the supervisor's record of the container.
//! What holds for every start (safe mode, a package that is installed and not running, its
//! permissions) is checked by the start itself, which every intent reaches.

use std::sync::Arc;

use serde_json::Value;

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Kind, Result};
use crate::daemon::device::state;
use crate::daemon::runtime::{probe, start, stop};

/// Who asks for a start or a stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Who {
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
    /// The supervisor: a restart its policy decided.
    Supervisor,
}

/// What is asked of a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Intent {
    Start,
    /// Stop, SIGKILL after `timeout` seconds (None: `containers.stop_timeout`).
    Stop {
        timeout: Option<u32>,
    },
    /// Stop if it runs, then start.
    Restart,
    /// End run `run` (its init's pid) if it is still the container's: the supervisor's,
    /// for a run whose health checks failed or whose package asked for a restart.
    EndRun {
        run: i32,
    },
}

/// How a start is made for `who`: whether the supervisor keeps its record of the container
/// (a scheduled start of a stopped container is no new start by the operator).
fn keeps_record(who: Who) -> bool {
    who == Who::Schedule
}

/// How a stop is made for `who`.
fn stop_kind(who: Who) -> stop::Why {
    match who {
        // Told to the supervisor, the boot mark cleared: stopped until started again.
        Who::Operator | Who::Container => stop::Why::Operator,
        // Told, the mark kept: the container is meant to run again after the switch.
        Who::Upgrade => stop::Why::Switch,
        // Not told (the supervisor's machine knows, or does not run yet), the mark kept.
        Who::Daemon | Who::Supervisor | Who::Schedule => stop::Why::Quiet,
    }
}

/// `intent` for container `name`, taking the operation lock. `trace`: the start's phases,
/// for `berth start --trace`.
pub(crate) fn act(
    d: &Arc<Daemon>,
    name: &str,
    intent: Intent,
    who: Who,
    trace: Option<start::Stamps>,
) -> Result<Value> {
    let _op = d.op.lock().unwrap();
    act_locked(d, name, intent, who, trace)
}

/// [`act`] for a caller that holds the operation lock.
pub(crate) fn act_locked(
    d: &Arc<Daemon>,
    name: &str,
    intent: Intent,
    who: Who,
    mut trace: Option<start::Stamps>,
) -> Result<Value> {
    match intent {
        Intent::Start => start::start_traced(d, name, &mut trace, keeps_record(who)),
        Intent::Stop { timeout } => stop::end(d, name, timeout, stop_kind(who)),
        Intent::Restart => {
            state::installed(d, name)?;
            if probe::is_running(d, name) {
                match stop::end(d, name, None, stop_kind(who)) {
                    // Ended on its own meanwhile (LXC still tearing down): stopped all the
                    // same.
                    Err(e) if e.kind == Kind::NotRunning => {}
                    r => {
                        r?;
                    }
                }
            }
            start::start_traced(d, name, &mut trace, keeps_record(who))
        }
        Intent::EndRun { run } => stop::end_run_locked(d, name, run),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The table: who is told, what the boot mark does, whose start keeps the record.
    #[test]
    fn who_decides_how_a_start_and_a_stop_are_made() {
        use stop::Why;
        let cases = [
            (Who::Operator, Why::Operator, false),
            (Who::Container, Why::Operator, false),
            (Who::Schedule, Why::Quiet, true),
            (Who::Upgrade, Why::Switch, false),
            (Who::Daemon, Why::Quiet, false),
            (Who::Supervisor, Why::Quiet, false),
        ];
        for (who, why, keeps) in cases {
            assert_eq!(stop_kind(who), why, "{who:?}");
            assert_eq!(keeps_record(who), keeps, "{who:?}");
        }
    }

    /// Only this module calls the runtime's start and stop: every other module of the
    /// daemon gives an intent here.
    #[test]
    fn only_the_controller_starts_and_stops_containers() {
        let daemon = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/daemon");
        let calls = [
            "start::start(",
            "start::start_locked(",
            "start::start_resumed(",
            "start::start_traced(",
            "stop::stop(",
            "stop::stop_locked(",
            "stop::stop_for_switch(",
            "stop::stop_quietly(",
            "stop::end(",
            "stop::restart",
            "stop::end_run",
        ];
        let mut found = Vec::new();
        let mut stack = vec![daemon.clone()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let path = e.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let rel = path
                    .strip_prefix(&daemon)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                if !rel.ends_with(".rs") || rel == "runtime/control.rs" {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                for (i, line) in text.lines().enumerate() {
                    if calls.iter().any(|c| line.contains(c)) {
                        found.push(format!("{rel}:{}: {}", i + 1, line.trim()));
                    }
                }
            }
        }
        assert!(found.is_empty(), "calls around the controller: {found:#?}");
    }
}
