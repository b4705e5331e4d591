//! The one way into a container's start and stop. Every start, stop and restart — the
//! operator's (the CLI, the web page, safe mode), a container's own through its API, a
//! scheduled job's, a fleet deployment's, an upgrade's or rollback's, the supervisor's — is an
//! [`Intent`] with [`Who`] asks for it, handed to the supervisor ([`act`]): its thread has
//! the container's machine (`berth_core::supervise::Machine::ask`) take or refuse it, and
//! carries it out on the container's worker, after the container's earlier intents
//! ([`execute`]); the asker waits for the answer. Only this module calls `start.rs` and
//! `stop.rs` (a unit test holds every other module of the daemon to it), and only the
//! supervisor calls [`execute`]. What differs by who asks in how it is carried out is one
//! table here: whether the supervisor is told of a stop, whether the container's boot mark
//! goes, whether a start keeps the supervisor's record of the container. What holds for
//! every start (a package that is installed and not running, its permissions; safe mode
//! again, under the op lock) is checked by the start itself, which every intent reaches.

use std::sync::Arc;

use serde_json::Value;

pub(crate) use berth_core::supervise::{Intent, Refusal, Who};

use crate::daemon::base::context::{Daemon, Order, Reply};
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::device::{boot, guard, state};
use crate::daemon::runtime::{probe, start, stop};

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
        Who::Daemon | Who::Supervisor | Who::Schedule | Who::Guard => stop::Why::Quiet,
    }
}

/// `intent` for container `name`, asked by `who`, carried out by the supervisor; waits for
/// the answer. `trace`: when the request was read, for `berth start --trace`.
pub(crate) fn act(
    d: &Arc<Daemon>,
    name: &str,
    intent: Intent,
    who: Who,
    trace: Option<u64>,
) -> Result<Value> {
    ask(d, name, intent, who, trace, false)
}

/// [`act`] for an asker that holds the operation lock: the supervisor's worker carries the
/// intent out under that hold, at once (nothing else runs a start or a stop meanwhile).
pub(crate) fn act_locked(d: &Arc<Daemon>, name: &str, intent: Intent, who: Who) -> Result<Value> {
    ask(d, name, intent, who, None, true)
}

fn ask(
    d: &Arc<Daemon>,
    name: &str,
    intent: Intent,
    who: Who,
    trace: Option<u64>,
    lent: bool,
) -> Result<Value> {
    if who == Who::Daemon || !d.supervising() {
        // The daemon's start, before the supervisor runs (a trial a dead daemon left rolled
        // back, safe mode's stops at start): nobody else is there to carry it out.
        // The guard's kill takes no op lock (see `execute`).
        let kill = matches!(intent, Intent::Kill { .. });
        let _op = (!lent && !kill).then(|| d.op.lock().unwrap());
        return execute(d, name, intent, who, trace.map(start::Stamps::from));
    }
    let reply = Arc::new(Reply::default());
    d.order(
        name,
        Order {
            intent,
            who,
            lent,
            trace,
            reply: Some(Arc::clone(&reply)),
        },
    );
    reply.wait()
}

/// What the answer to an intent the machine refused says: to the operator, the start's
/// own refusal in safe mode; to a scheduled run (`503 busy`, never an API's answer), why
/// it was skipped.
pub(crate) fn refused(d: &Daemon, name: &str, intent: Intent, who: Who, r: Refusal) -> Error {
    let why = d.safe_mode().unwrap_or_default();
    let skipped = |m: String| Error::new(Kind::Busy, m);
    match r {
        Refusal::SafeMode if who == Who::Schedule => {
            skipped(format!("safe mode ({why}): nothing starts"))
        }
        Refusal::SafeMode => {
            let what = match intent {
                Intent::Restart => "restart",
                _ => "start",
            };
            boot::safe_mode_error(&format!("{what} {name}"), &why)
        }
        Refusal::Failed => skipped(format!(
            "{name} failed (its restart policy gave up): not started until berth start {name} or berth reset {name}"
        )),
        Refusal::Busy(state) => skipped(format!("{name} is {state}")),
    }
}

/// A stop's answer for one that needs the container gone and nothing more (a restart, a
/// switch of versions): one that ended on its own meanwhile (LXC still tearing down, the
/// memory guard's kill) is stopped all the same.
pub(crate) fn stopped(r: Result<Value>) -> Result<()> {
    match r {
        Err(e) if e.kind == Kind::NotRunning => Ok(()),
        r => r.map(drop),
    }
}

/// Carries `intent` out: the supervisor's worker, or the daemon's start before the
/// supervisor runs. Under the op lock. `trace`: the start's phases, for `berth start
/// --trace`.
pub(crate) fn execute(
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
                stopped(stop::end(d, name, None, stop_kind(who)))?;
            }
            start::start_traced(d, name, &mut trace, keeps_record(who))
        }
        Intent::EndRun { run } => stop::end_run_locked(d, name, run),
        // The guard's: no op lock (memory is short now, and an install may hold it).
        Intent::Kill { pid, start, init } => {
            guard::kill_listed(d, pid, start, init).map(|_| Value::Null)
        }
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
            (Who::Guard, Why::Quiet, false),
        ];
        for (who, why, keeps) in cases {
            assert_eq!(stop_kind(who), why, "{who:?}");
            assert_eq!(keeps_record(who), keeps, "{who:?}");
        }
    }

    /// Only this module calls the runtime's start and stop: every other module of the
    /// daemon gives an intent here, and only the supervisor carries one out.
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
                    // Carrying an intent out is the supervisor's alone.
                    let executes = line.contains("control::execute(") && rel != "supervisor.rs";
                    if executes || calls.iter().any(|c| line.contains(c)) {
                        found.push(format!("{rel}:{}: {}", i + 1, line.trim()));
                    }
                }
            }
        }
        assert!(found.is_empty(), "calls around the controller: {found:#?}");
    }
}
