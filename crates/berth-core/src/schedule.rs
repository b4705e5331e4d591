//! A container's schedules (docs/schedules.md): the jobs its manifest's `[[schedule]]`
//! installs and those added through the API, their ids, limits and run records, and the
//! scheduler's decisions: what is due, what a daemon start catches up, how long a run may
//! take. Pure: the daemon hands in the time (`Clock`) and the boot id, and writes the table
//! (`Table::to_json`) to `<state>/schedules/NAME.json`.

use serde_json::{json, Map, Value};

use crate::api::last_run as run;
use crate::api::schedule as f;
use crate::cron::{self, Cron};
use crate::error::Error;
use crate::path::check_abs_path;

/// One `[[schedule]]` entry of a manifest: a cron expression and the command it runs.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Schedule {
    pub cron: String,
    pub cmd: Vec<String>,
}

/// Schedules per container, the manifest's included (`POST` beyond: 409
/// `too_many_schedules`; a manifest may have at most as many).
pub const MAX_SCHEDULES: usize = 64;
/// A command's arguments, at most.
pub const MAX_ARGS: usize = 64;
/// A command's bytes, all arguments together, at most.
pub const MAX_CMD_BYTES: usize = 4096;
/// The longest a run may take, whatever its period (seconds).
pub const MAX_RUN_S: i64 = 86_400;
/// How old the run records on flash may get (seconds): a run's record is written at once
/// unless the table was written less than this ago (then at the next wake-up after, or at
/// the daemon's clean stop), so a job every minute does not write flash every minute: an
/// hour keeps an idle device's writes to one small file an hour (`berth-bench wear`).
pub const FLUSH_S: i64 = 3600;
/// Jobs running at once, per container and on the device. A run due beyond waits for a slot
/// (one per job), the device's slots shared fairly among the containers wanting them
/// ([`start_fair`]), until its job's next time: then it is skipped and recorded.
pub const MAX_RUNNING_PER_CONTAINER: usize = 3;
pub const MAX_RUNNING: usize = 16;

/// The table's own key in the file (not in the API's answers).
const NEXT_ID: &str = "next_id";

/// One job.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// `m…` for the manifest's (a hash of cron and cmd, so an unchanged entry keeps its id
    /// and records across upgrades), `a1`, `a2`… for the API's (never reused).
    pub id: String,
    pub cron: String,
    pub when: Cron,
    pub cmd: Vec<String>,
    /// From the manifest: read-only to the API, replaced at upgrade.
    pub manifest: bool,
    /// Added by the package itself (its container API), not by the operator.
    pub package: bool,
    pub created: i64,
    pub next_run: Option<i64>,
    /// The last run's record (`api::last_run`), or null.
    pub last_run: Value,
    /// `@reboot`: the boot it last ran in (or was added in).
    pub boot_id: Option<String>,
    /// Not kept: a run is going on.
    pub running: bool,
    /// Not kept: its due time passed before this daemon started.
    pub catch_up: bool,
    /// Not kept: a run due that waits for a slot, and since when it waits.
    pub waiting: Option<(Due, i64)>,
}

/// A new job, as a request asks for it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub cron: String,
    pub when: Cron,
    pub cmd: Vec<String>,
    /// Added by the package itself, through its container API (not by the operator).
    pub package: bool,
}

/// A run to make now.
#[derive(Debug, Clone, PartialEq)]
pub struct Due {
    pub id: String,
    pub cmd: Vec<String>,
    /// The time it was due (scheduler seconds).
    pub due: i64,
    pub catch_up: bool,
    /// An `@reboot` job.
    pub reboot: bool,
    /// Scheduler seconds it may take before it is killed.
    pub timeout_s: i64,
    /// It may start a container that was stopped: the manifest's and the operator's jobs
    /// may, the package's own not.
    pub may_start: bool,
}

/// Why an add or a delete is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    TooMany,
    NoSuchSchedule,
    ReadOnly,
}

/// The scheduler's clock: `speed` scheduler seconds per real second (1; 60 in the tests'
/// "a cron minute lasts one second" mode) plus `offset` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    pub speed: i64,
    pub offset: i64,
}

impl Clock {
    pub const REAL: Clock = Clock {
        speed: 1,
        offset: 0,
    };

    /// The scheduler's time (seconds) at real time `ms` (milliseconds since the epoch).
    pub fn at(&self, ms: i64) -> i64 {
        (ms * self.speed).div_euclid(1000) + self.offset
    }

    /// The first real time (ms since the epoch) at which the scheduler's clock shows `t`.
    pub fn real_ms(&self, t: i64) -> i64 {
        -(-(t - self.offset) * 1000).div_euclid(self.speed)
    }

    /// Scheduler seconds as real milliseconds.
    pub fn duration_ms(&self, secs: i64) -> u64 {
        (secs.max(0) as u64).saturating_mul(1000) / self.speed as u64
    }
}

/// Checks a job's command: an absolute path first, bounded in count and length.
pub fn check_cmd(cmd: &[String]) -> Result<(), Error> {
    let first = cmd
        .first()
        .ok_or_else(|| Error::invalid("cmd: must not be empty"))?;
    check_abs_path(first).map_err(|e| Error::invalid(format!("cmd[0]: {e}")))?;
    if cmd.len() > MAX_ARGS {
        return Err(Error::invalid(format!(
            "cmd: more than {MAX_ARGS} arguments"
        )));
    }
    if cmd.iter().map(|a| a.len() + 1).sum::<usize>() > MAX_CMD_BYTES {
        return Err(Error::invalid(format!(
            "cmd: longer than {MAX_CMD_BYTES} bytes"
        )));
    }
    if cmd.iter().any(|a| a.contains('\0')) {
        return Err(Error::invalid("cmd: arguments must not contain NUL"));
    }
    Ok(())
}

/// An array of strings, or None.
fn strings(v: &Value) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for a in v.as_array()? {
        out.push(a.as_str()?.to_string());
    }
    Some(out)
}

/// A request's body `{"cron": "…", "cmd": ["/bin/x", …]}`, unknown fields refused.
pub fn parse_new(v: &Value) -> Result<NewJob, Error> {
    new_job(v).map_err(Error::invalid)
}

/// [`parse_new`]'s reading: whatever it refuses is the request's value, of one kind.
fn new_job(v: &Value) -> Result<NewJob, String> {
    let obj = v.as_object().ok_or("expected a JSON object")?;
    let (mut cron_text, mut cmd) = (None, None);
    for (k, x) in obj {
        match (k.as_str(), x) {
            (f::CRON, Value::String(s)) => cron_text = Some(s.clone()),
            (f::CMD, Value::Array(_)) => {
                cmd = Some(strings(x).ok_or("cmd: expected an array of strings")?)
            }
            (f::CRON | f::CMD, _) => return Err(format!("{k}: wrong type")),
            _ => return Err(format!("unknown field {k:?}")),
        }
    }
    let cron_text = cron_text.ok_or("missing field \"cron\"")?;
    let cmd = cmd.ok_or("missing field \"cmd\"")?;
    let when = cron::parse(&cron_text).map_err(|e| format!("cron {cron_text:?}: {e}"))?;
    check_cmd(&cmd)?;
    Ok(NewJob {
        cron: cron_text,
        when,
        cmd,
        package: false,
    })
}

/// The earlier of two times, either of which may be missing.
pub fn min(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        _ => a.or(b),
    }
}

/// Ids are what a request path may carry: 1-16 of `a-z 0-9 -`.
pub fn check_id(id: &str) -> bool {
    (1..=16).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The id of a manifest entry: `m` and 7 hex digits of a hash (FNV-1a) of its cron and
/// command.
fn manifest_id(s: &Schedule) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in s
        .cron
        .bytes()
        .chain(s.cmd.iter().flat_map(|a| a.bytes().chain([0])))
    {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    format!("m{:07x}", h >> 4)
}

/// A record of a run that did not happen (`skipped`: why).
pub fn skipped(now: i64, why: &str) -> Value {
    json!({ run::TIME: now, run::SKIPPED: why })
}

impl Job {
    fn new(id: String, new: NewJob, manifest: bool, now: i64, boot: &str) -> Job {
        Job {
            id,
            next_run: new.when.next_after(now),
            // An `@reboot` job added during a boot first runs at the next.
            boot_id: (new.when == Cron::Reboot).then(|| boot.to_string()),
            cron: new.cron,
            when: new.when,
            cmd: new.cmd,
            manifest,
            package: new.package,
            created: now,
            last_run: Value::Null,
            running: false,
            catch_up: false,
            waiting: None,
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            f::ID: self.id,
            f::CRON: self.cron,
            f::CMD: self.cmd,
            f::ORIGIN: match (self.manifest, self.package) {
                (true, _) => "manifest",
                (_, true) => "package",
                _ => "api",
            },
            f::CREATED: self.created,
            f::NEXT_RUN: self.next_run,
            f::LAST_RUN: self.last_run,
            f::BOOT_ID: self.boot_id,
        })
    }

    /// A job as `to_json` wrote it; None if any part of it is not.
    pub fn from_json(v: &Value) -> Option<Job> {
        let cron = v[f::CRON].as_str()?.to_string();
        let cmd = strings(&v[f::CMD])?;
        let id = v[f::ID].as_str().filter(|id| check_id(id))?.to_string();
        check_cmd(&cmd).ok()?;
        Some(Job {
            when: cron::parse(&cron).ok()?,
            manifest: match v[f::ORIGIN].as_str()? {
                "manifest" => true,
                "api" | "package" => false,
                _ => return None,
            },
            package: v[f::ORIGIN] == "package",
            id,
            cron,
            cmd,
            created: v[f::CREATED].as_i64()?,
            next_run: v[f::NEXT_RUN].as_i64(),
            last_run: v[f::LAST_RUN].clone(),
            boot_id: v[f::BOOT_ID].as_str().map(String::from),
            running: false,
            catch_up: false,
            waiting: None,
        })
    }

    /// How long a run due at `due` may take: until a little before the next due time (a
    /// tenth of the period, at most 5 s), at most `MAX_RUN_S`.
    fn timeout_s(&self, due: i64) -> i64 {
        match self.when.next_after(due) {
            Some(next) => {
                let period = next - due;
                (period - (period / 10).min(5)).min(MAX_RUN_S)
            }
            None => MAX_RUN_S,
        }
    }
}

/// One container's jobs, as kept in `<state>/schedules/NAME.json`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    /// The container's (not kept in the file: it is the file's name).
    pub name: String,
    /// The number of the next API job's id.
    pub next_id: u32,
    /// The manifest's jobs in its order, then the API's in the order they were added.
    pub jobs: Vec<Job>,
    /// Run records not written yet, and when the table was last written (scheduler
    /// seconds): see `FLUSH_S`.
    pub dirty: bool,
    pub written: i64,
}

impl Table {
    /// The file's contents; jobs that do not read back are left out (and counted).
    pub fn from_json(v: &Value) -> (Table, usize) {
        let list = v[f::SCHEDULES].as_array().map_or(&[][..], |a| &a[..]);
        let mut jobs = Vec::new();
        for v in list {
            jobs.extend(Job::from_json(v));
        }
        let bad = list.len() - jobs.len();
        let next_id = v[NEXT_ID].as_u64().unwrap_or(0) as u32;
        (
            Table {
                next_id,
                jobs,
                ..Table::default()
            },
            bad,
        )
    }

    pub fn to_json(&self) -> Value {
        let mut v = self.list();
        v[NEXT_ID] = json!(self.next_id);
        v
    }

    /// The API's answer: `{"schedules": [...]}`.
    pub fn list(&self) -> Value {
        let mut m = Map::new();
        let mut list = Vec::new();
        for j in &self.jobs {
            list.push(j.to_json());
        }
        m.insert(f::SCHEDULES.into(), Value::Array(list));
        Value::Object(m)
    }

    /// Makes the manifest's jobs those of `entries` (an install, an upgrade): unchanged
    /// entries keep their id and records, the others are replaced; the API's are kept.
    /// Whether anything changed.
    pub fn sync_manifest(&mut self, entries: &[Schedule], now: i64, boot: &str) -> bool {
        let before: Vec<String> = self.jobs.iter().map(|j| j.id.clone()).collect();
        let mut jobs: Vec<Job> = Vec::new();
        for (i, s) in entries.iter().enumerate() {
            let mut id = manifest_id(s);
            if jobs.iter().any(|j| j.id == id) {
                id = format!("{id}-{i}");
            }
            let kept = self
                .jobs
                .iter()
                .position(|j| j.manifest && j.id == id)
                .map(|p| self.jobs.remove(p));
            jobs.push(kept.unwrap_or_else(|| {
                let new = NewJob {
                    cron: s.cron.clone(),
                    // The manifest parser checked it with the same parser.
                    when: cron::parse(&s.cron).unwrap_or(Cron::Reboot),
                    cmd: s.cmd.clone(),
                    package: false,
                };
                Job::new(id, new, true, now, boot)
            }));
        }
        self.jobs.retain(|j| !j.manifest);
        let changed = before.len() != self.jobs.len() + jobs.len()
            || jobs.iter().zip(&before).any(|(j, b)| j.id != *b);
        jobs.append(&mut self.jobs);
        self.jobs = jobs;
        changed
    }

    /// Adds an API job (its id `a<n>`).
    pub fn add(&mut self, new: NewJob, now: i64, boot: &str) -> Result<&Job, Refusal> {
        if self.jobs.len() >= MAX_SCHEDULES {
            return Err(Refusal::TooMany);
        }
        self.next_id = self.next_id.max(1);
        let id = format!("a{}", self.next_id);
        self.next_id += 1;
        self.jobs.push(Job::new(id, new, false, now, boot));
        Ok(&self.jobs[self.jobs.len() - 1])
    }

    /// Deletes an API job; the manifest's are read-only.
    pub fn delete(&mut self, id: &str) -> Result<Job, Refusal> {
        match self.jobs.iter().position(|j| j.id == id) {
            None => Err(Refusal::NoSuchSchedule),
            Some(p) if self.jobs[p].manifest => Err(Refusal::ReadOnly),
            Some(p) => Ok(self.jobs.remove(p)),
        }
    }

    /// At a daemon start (`now`, in boot `boot`): a job whose due time has passed (the
    /// device was off, or the daemon down) is due now, once, as a catch-up; one due later
    /// than its cron says from now on (the clock was set back) is due at that time instead;
    /// an `@reboot` job is due now if it has not run in this boot.
    ///
    /// A clock behind the newest time the table knows (a job's creation or last run) by
    /// more than a minute is not set yet (a device without a real-time clock boots with an
    /// old time until NTP answers): the recorded times are kept as they are, nothing is
    /// caught up, and the jobs wait for the clock to reach them.
    pub fn at_start(&mut self, now: i64, boot: &str) {
        let newest = self
            .jobs
            .iter()
            .map(|j| j.created.max(j.last_run[run::TIME].as_i64().unwrap_or(0)))
            .max()
            .unwrap_or(0);
        let unset = now + 60 < newest;
        for j in &mut self.jobs {
            if j.when == Cron::Reboot {
                j.next_run = (j.boot_id.as_deref() != Some(boot)).then_some(now);
                continue;
            }
            let next = j.when.next_after(now);
            match j.next_run {
                Some(_) if unset => {}
                Some(t) if t <= now => j.catch_up = true,
                Some(t) => j.next_run = next.map_or(Some(t), |n| Some(n.min(t))),
                None => j.next_run = next,
            }
        }
    }

    /// The clock was set back while the daemon ran (to `now`): a recorded next run later
    /// than the expression's next time from now is moved to that time, as at a start, so no
    /// job waits out the jump.
    pub fn clock_went_back(&mut self, now: i64) {
        for j in self.jobs.iter_mut().filter(|j| j.when != Cron::Reboot) {
            if let (Some(t), Some(n)) = (j.next_run, j.when.next_after(now)) {
                j.next_run = Some(n.min(t));
            }
        }
    }

    /// The earliest due time, of jobs not running.
    pub fn next_due(&self) -> Option<i64> {
        let mut next = None;
        for j in self.jobs.iter().filter(|j| !j.running) {
            next = min(next, j.next_run);
        }
        next
    }

    /// The runs due at `now` join the wait for a slot, each job at most once however many
    /// of its times passed; each job moves on to its next time after `now`. A job still
    /// running is passed over (never twice at once). A run still waiting since the job's
    /// previous time never had a slot: it is dropped (and recorded as skipped) for the new.
    pub fn enqueue(&mut self, now: i64, boot: &str) {
        for j in &mut self.jobs {
            let Some(due) = j.next_run.filter(|t| *t <= now) else {
                continue;
            };
            if j.running {
                // Killed at its timeout before its next time: only a late wake-up comes here.
                continue;
            }
            j.next_run = j.when.next_after(now);
            if j.when == Cron::Reboot {
                j.boot_id = Some(boot.to_string());
            }
            let catch_up = std::mem::take(&mut j.catch_up) || now - due >= 60;
            if let Some((old, _)) = j.waiting.take() {
                let why = format!(
                    "no slot was free from its time {} until its next (runs at once: {MAX_RUNNING_PER_CONTAINER} per container, {MAX_RUNNING} on the device, shared)",
                    old.due
                );
                j.last_run = skipped(now, &why);
                self.dirty = true;
            }
            let run = Due {
                id: j.id.clone(),
                cmd: j.cmd.clone(),
                due,
                catch_up,
                reboot: j.when == Cron::Reboot,
                timeout_s: j.timeout_s(due),
                may_start: !j.package,
            };
            j.waiting = Some((run, now));
        }
    }

    /// Its runs going on.
    pub fn running(&self) -> usize {
        self.jobs.iter().filter(|j| j.running).count()
    }

    /// Its runs waiting for a slot, and since when the oldest waits.
    pub fn waiting(&self) -> (usize, Option<i64>) {
        let mut since: Option<i64> = None;
        let mut n = 0;
        for (_, t) in self.jobs.iter().filter_map(|j| j.waiting.as_ref()) {
            n += 1;
            since = min(since, Some(*t));
        }
        (n, since)
    }

    /// Starts `n` of its waiting runs (in the jobs' order), at `now`: a run that waited for a
    /// slot has that much less time before its job's next time.
    fn start(&mut self, n: usize, now: i64) -> Vec<Due> {
        let mut out = Vec::new();
        for j in self.jobs.iter_mut() {
            if out.len() == n {
                break;
            }
            if let Some((mut d, since)) = j.waiting.take() {
                d.timeout_s = (d.timeout_s - (now - since).max(0)).max(1);
                j.running = true;
                out.push(d);
            }
        }
        self.dirty |= !out.is_empty();
        out
    }

    /// A run ended with `record`; false if the job is gone (deleted, replaced) meanwhile.
    pub fn finished(&mut self, id: &str, record: Value) -> bool {
        match self.jobs.iter_mut().find(|j| j.id == id) {
            Some(j) => {
                j.running = false;
                j.last_run = record;
                self.dirty = true;
                true
            }
            None => false,
        }
    }

    /// Whether the table should be written now: a run's record waits until `FLUSH_S` after
    /// the last write, or until the clock is found set back behind that write (else the
    /// records would wait for the clock to catch up: months).
    pub fn flush_due(&self, now: i64) -> bool {
        self.dirty && (now - self.written >= FLUSH_S || now < self.written)
    }
}

/// Starts what waits, device-wide: `busy` runs go on now (at most [`MAX_RUNNING`]); the
/// free slots are shared by water-filling, one at a time to the container with the fewest
/// runs going on, the one waiting longest among equals, none beyond
/// [`MAX_RUNNING_PER_CONTAINER`] (the allotment of `fair::allot`, which the tests hold it
/// to). So a few containers with many jobs cannot hold the device's slots while another's
/// job waits, and no container is first for being first in the list. Returns each run with
/// its table's index.
pub fn start_fair(tables: &mut [Table], busy: &mut usize, now: i64) -> Vec<(usize, Due)> {
    let mut out = Vec::new();
    while *busy < MAX_RUNNING {
        let mut best: Option<(usize, (usize, i64))> = None;
        for (i, t) in tables.iter().enumerate() {
            let (n, since) = t.waiting();
            let held = t.running();
            let key = (held, since.unwrap_or(i64::MAX));
            if n > 0 && held < MAX_RUNNING_PER_CONTAINER && best.is_none_or(|(_, b)| key < b) {
                best = Some((i, key));
            }
        }
        let Some((i, _)) = best else { break };
        let Some(d) = tables[i].start(1, now).pop() else {
            break;
        };
        *busy += 1;
        out.push((i, d));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT: &str = "b1";
    /// 2026-01-01 00:00 UTC.
    const T0: i64 = 1_767_225_600;

    fn new(cron_text: &str, cmd: &[&str]) -> NewJob {
        parse_new(&json!({"cron": cron_text, "cmd": cmd})).unwrap()
    }

    fn entry(cron_text: &str, cmd: &str) -> Schedule {
        Schedule {
            cron: cron_text.into(),
            cmd: vec![cmd.into()],
        }
    }

    #[test]
    fn requests_are_checked() {
        let j = new("*/5 * * * *", &["/bin/job", "-v"]);
        assert_eq!(j.cmd, ["/bin/job", "-v"]);
        for (body, want) in [
            (
                json!({"cron": "61 * * * *", "cmd": ["/x"]}),
                "cron \"61 * * * *\": minute: 61 is out of range 0-59",
            ),
            (json!({"cron": "@often", "cmd": ["/x"]}), "unknown nickname"),
            (
                json!({"cron": "* * * * *", "cmd": []}),
                "cmd: must not be empty",
            ),
            (
                json!({"cron": "* * * * *", "cmd": ["x"]}),
                "cmd[0]: \"x\" must be an absolute path",
            ),
            (
                json!({"cron": "* * * * *", "cmd": ["/a/../b"]}),
                "must not contain \"..\"",
            ),
            (
                json!({"cron": "* * * * *", "cmd": ["/x", 3]}),
                "array of strings",
            ),
            (
                json!({"cron": "* * * * *", "cmd": ["/x", "a\u{0}b"]}),
                "NUL",
            ),
            (
                json!({"cron": "* * * * *", "cmd": vec!["/x"; 65]}),
                "more than 64 arguments",
            ),
            (
                json!({"cron": "* * * * *", "cmd": ["/x", "y".repeat(4100)]}),
                "longer than 4096 bytes",
            ),
            (json!({"cron": 5, "cmd": ["/x"]}), "cron: wrong type"),
            (json!({"cron": "* * * * *", "cmd": "/x"}), "cmd: wrong type"),
            (json!({"cron": "* * * * *"}), "missing field \"cmd\""),
            (json!({"cmd": ["/x"]}), "missing field \"cron\""),
            (
                json!({"cron": "* * * * *", "cmd": ["/x"], "user": 0}),
                "unknown field \"user\"",
            ),
            (json!(["* * * * *"]), "expected a JSON object"),
        ] {
            let e = parse_new(&body).unwrap_err();
            assert!(e.message.contains(want), "{body}: {e}");
        }
        assert!(check_id("a12") && check_id("m0abc123-2"));
        assert!(
            !check_id("") && !check_id("A1") && !check_id("../x") && !check_id(&"a".repeat(17))
        );
    }

    #[test]
    fn adds_deletes_and_the_limit() {
        let mut t = Table::default();
        t.sync_manifest(&[entry("@daily", "/bin/m")], T0, BOOT);
        let a = t
            .add(new("*/5 * * * *", &["/bin/a"]), T0 + 1, BOOT)
            .unwrap()
            .clone();
        assert_eq!(
            (a.id.as_str(), a.next_run, a.created),
            ("a1", Some(T0 + 300), T0 + 1)
        );
        assert_eq!(t.delete("a1").unwrap().id, "a1");
        // Ids are never reused.
        assert_eq!(
            t.add(new("@hourly", &["/bin/a"]), T0, BOOT).unwrap().id,
            "a2"
        );
        assert_eq!(t.delete("a1"), Err(Refusal::NoSuchSchedule));
        let m = t.jobs[0].id.clone();
        assert!(m.starts_with('m') && m.len() == 8, "{m}");
        assert_eq!(t.delete(&m), Err(Refusal::ReadOnly));
        while t.jobs.len() < MAX_SCHEDULES {
            t.add(new("@hourly", &["/bin/a"]), T0, BOOT).unwrap();
        }
        let before = t.clone();
        assert_eq!(
            t.add(new("@hourly", &["/bin/a"]), T0, BOOT),
            Err(Refusal::TooMany)
        );
        assert_eq!(t, before);
        // Written and read back, the same (transient flags aside).
        let (back, bad) = Table::from_json(&t.to_json());
        assert_eq!(
            (back.jobs, back.next_id, bad),
            (t.jobs.clone(), t.next_id, 0)
        );
        assert_eq!(
            t.list()["schedules"].as_array().unwrap().len(),
            MAX_SCHEDULES
        );
        assert!(t.list().get(NEXT_ID).is_none());
        // A damaged entry is left out, the others kept.
        let mut v = t.to_json();
        v["schedules"][1]["cron"] = json!("99 * * * *");
        v["schedules"][2]["cmd"] = json!("rm");
        assert_eq!(Table::from_json(&v).1, 2);
    }

    #[test]
    fn manifest_entries_are_replaced_and_api_ones_kept() {
        let mut t = Table::default();
        let v1 = [
            entry("@daily", "/bin/a"),
            entry("@hourly", "/bin/b"),
            entry("@hourly", "/bin/b"),
        ];
        assert!(t.sync_manifest(&v1, T0, BOOT));
        t.add(new("*/5 * * * *", &["/bin/api"]), T0, BOOT).unwrap();
        let ids: Vec<String> = t.jobs.iter().map(|j| j.id.clone()).collect();
        assert_eq!(
            ids[2],
            format!("{}-2", ids[1]),
            "a duplicate entry gets its own id"
        );
        assert!(
            !t.sync_manifest(&v1, T0 + 50, BOOT),
            "the same manifest changes nothing"
        );
        t.jobs[0].last_run = json!({"time": 1});
        // An upgrade: /bin/a kept (with its record), /bin/b gone, /bin/c new; the API's kept.
        let v2 = [entry("@weekly", "/bin/c"), entry("@daily", "/bin/a")];
        assert!(t.sync_manifest(&v2, T0 + 100, BOOT));
        let got: Vec<(&str, bool)> = t
            .jobs
            .iter()
            .map(|j| (j.cmd[0].as_str(), j.manifest))
            .collect();
        assert_eq!(
            got,
            [("/bin/c", true), ("/bin/a", true), ("/bin/api", false)]
        );
        assert_eq!(t.jobs[1].id, ids[0]);
        assert_eq!(t.jobs[1].last_run, json!({"time": 1}));
        assert_eq!(t.jobs[0].created, T0 + 100);
        assert!(t.sync_manifest(&[], T0, BOOT));
        assert_eq!(t.jobs.len(), 1);
    }

    #[test]
    fn due_runs_once_each_and_moves_on() {
        let mut t = Table::default();
        t.add(new("*/5 * * * *", &["/bin/a"]), T0, BOOT).unwrap();
        t.add(new("0 * * * *", &["/bin/b"]), T0, BOOT).unwrap();
        assert_eq!(t.next_due(), Some(T0 + 300));
        let mut busy = 0;
        assert!(t.due(T0 + 299, BOOT, &mut busy).is_empty());
        let d = t.due(T0 + 300, BOOT, &mut busy);
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].id.as_str(), d[0].due, d[0].catch_up),
            ("a1", T0 + 300, false)
        );
        // Killed 5 s before the next time.
        assert_eq!(d[0].timeout_s, 295);
        assert_eq!(busy, 1);
        // Running: not due again, and not counted as the next due time.
        assert_eq!(t.next_due(), Some(T0 + 3600));
        assert!(t.finished("a1", json!({"time": T0 + 300, "code": 0})));
        assert!(!t.finished("a9", Value::Null));
        assert_eq!(t.next_due(), Some(T0 + 600));
        // Woken late (a clock set forward): one run, late, then the next time after now.
        let d = t.due(T0 + 3 * 3600 + 7, BOOT, &mut busy);
        assert_eq!(d.len(), 2);
        assert!(d.iter().all(|d| d.catch_up));
        assert_eq!(t.jobs[0].next_run, Some(T0 + 3 * 3600 + 300));
        assert_eq!(t.jobs[1].next_run, Some(T0 + 4 * 3600));
        // An hourly job may take 3600 - 5 s; a daily one is cut at a day less 5 s.
        assert_eq!(d[1].timeout_s, 3595);
    }

    impl Table {
        /// The runs that start at `now`, this table alone on the device.
        fn due(&mut self, now: i64, boot: &str, busy: &mut usize) -> Vec<Due> {
            self.enqueue(now, boot);
            start_fair(std::slice::from_mut(self), busy, now)
                .into_iter()
                .map(|(_, d)| d)
                .collect()
        }
    }

    #[test]
    fn runs_beyond_the_caps_wait_for_a_slot_until_their_next_time() {
        let mut t = Table::default();
        for _ in 0..6 {
            t.add(new("* * * * *", &["/bin/a"]), T0, BOOT).unwrap();
        }
        let mut busy = 0;
        let d = t.due(T0 + 60, BOOT, &mut busy);
        assert_eq!((d.len(), busy), (MAX_RUNNING_PER_CONTAINER, 3));
        // the others wait, not skipped
        assert_eq!(t.waiting(), (3, Some(T0 + 60)));
        assert!(t.jobs[5].last_run.is_null());
        // one ends: a waiting run starts in its slot, with what is left of its time (a
        // minutely job may take 55 s from its due time)
        assert!(t.finished(&d[0].id, json!({"code": 0})));
        busy -= 1;
        let started = start_fair(std::slice::from_mut(&mut t), &mut busy, T0 + 70);
        assert_eq!(started.len(), 1);
        assert_eq!(started[0].1.timeout_s, 45);
        assert_eq!((t.running(), busy, t.waiting().0), (3, 3, 2));
        // their next time comes: the runs that never had a slot are dropped and recorded;
        // the jobs that are not running wait again for this time
        t.enqueue(T0 + 120, BOOT);
        let skipped: Vec<&Job> = t
            .jobs
            .iter()
            .filter(|j| j.last_run["skipped"].is_string())
            .collect();
        assert_eq!(skipped.len(), 2);
        let why = skipped[0].last_run["skipped"].as_str().unwrap();
        assert!(
            why.contains(&format!("no slot was free from its time {}", T0 + 60)),
            "{why}"
        );
        assert_eq!(t.waiting().0, 3);
        // a device whose slots are all taken: it waits too
        let mut other = Table::default();
        other.add(new("* * * * *", &["/bin/a"]), T0, BOOT).unwrap();
        let mut busy = MAX_RUNNING;
        assert!(other.due(T0 + 60, BOOT, &mut busy).is_empty());
        assert_eq!(other.waiting().0, 1);
        assert_eq!(other.jobs[0].next_run, Some(T0 + 120));
    }

    /// Each of `containers` tables with `jobs` minutely jobs.
    fn tables(containers: usize, jobs: usize) -> Vec<Table> {
        (0..containers)
            .map(|i| {
                let mut t = Table {
                    name: format!("c{i}"),
                    ..Table::default()
                };
                for _ in 0..jobs {
                    t.add(new("* * * * *", &["/bin/a"]), T0, BOOT).unwrap();
                }
                t
            })
            .collect()
    }

    /// start_fair gives each container what the water-filling model (`fair::allot`) says,
    /// whatever the numbers.
    #[test]
    fn the_scheduler_allots_as_the_water_filling_model() {
        let mut x: u32 = 99;
        let mut rnd = |m: usize| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as usize % m
        };
        for _ in 0..300 {
            let n = 1 + rnd(5);
            let mut ts = tables(n, 6);
            let mut busy = rnd(MAX_RUNNING + 1);
            let mut held = Vec::new();
            let mut wanted = Vec::new();
            let mut since = Vec::new();
            for t in ts.iter_mut() {
                // some runs going on, some waiting since some time
                let r = rnd(MAX_RUNNING_PER_CONTAINER + 1);
                for j in t.jobs.iter_mut().take(r) {
                    j.running = true;
                }
                let s = T0 + rnd(100) as i64;
                let w = rnd(4);
                t.enqueue(T0 + 60, BOOT);
                for (k, j) in t.jobs.iter_mut().filter(|j| !j.running).enumerate() {
                    match &mut j.waiting {
                        Some((_, at)) if k < w => *at = s,
                        _ => j.waiting = None,
                    }
                }
                held.push(t.running());
                wanted.push(t.waiting().0);
                since.push(t.waiting().1.unwrap_or(i64::MAX));
            }
            let free = MAX_RUNNING - busy;
            let want = crate::fair::allot(&held, &wanted, &since, MAX_RUNNING_PER_CONTAINER, free);
            let got = start_fair(&mut ts, &mut busy, T0 + 61);
            let per: Vec<usize> = (0..n)
                .map(|i| got.iter().filter(|(k, _)| *k == i).count())
                .collect();
            assert_eq!(per, want, "{held:?} {wanted:?} {since:?} {free}");
        }
    }

    #[test]
    fn the_devices_slots_are_shared_among_the_containers_that_want_them() {
        // 8 containers with 3 jobs each, all due: 16 slots, 2 each (not 3 for the first
        // five and 1 or 0 for the rest, as in list order)
        let mut ts = tables(8, 3);
        let mut busy = 0;
        for t in ts.iter_mut() {
            t.enqueue(T0 + 60, BOOT);
        }
        let started = start_fair(&mut ts, &mut busy, T0 + 60);
        assert_eq!(started.len(), MAX_RUNNING);
        assert!(
            ts.iter().all(|t| t.running() == 2),
            "{:?}",
            ts.iter().map(Table::running).collect::<Vec<_>>()
        );
        // a ninth container's job falls due: the next freed slot is its, although the
        // others have waited longer
        let mut late = tables(1, 1).remove(0);
        late.name = "late".into();
        ts.push(late);
        ts[8].enqueue(T0 + 90, BOOT);
        assert!(
            start_fair(&mut ts, &mut busy, T0 + 90).is_empty(),
            "the device is full"
        );
        let id = ts[0].jobs.iter().find(|j| j.running).unwrap().id.clone();
        ts[0].finished(&id, json!({"code": 0}));
        busy -= 1;
        let started = start_fair(&mut ts, &mut busy, T0 + 91);
        assert_eq!(started.len(), 1);
        assert_eq!(ts[started[0].0].name, "late");
        // the next freed slot goes back to the container that gave one up
        let id = ts[3].jobs.iter().find(|j| j.running).unwrap().id.clone();
        ts[3].finished(&id, json!({"code": 0}));
        busy -= 1;
        let started = start_fair(&mut ts, &mut busy, T0 + 92);
        assert_eq!(ts[started[0].0].name, "c0");
    }

    #[test]
    fn a_clock_not_set_yet_keeps_the_times_and_a_clock_set_back_moves_them() {
        let mut t = Table::default();
        t.add(new("0 0 * * *", &["/bin/daily"]), T0, BOOT).unwrap();
        let next = t.jobs[0].next_run;
        let saved = t.to_json();
        // The device boots in 1970 (no real-time clock) and NTP has not answered yet.
        let (mut t, _) = Table::from_json(&saved);
        t.at_start(1_000, "b2");
        assert_eq!(t.jobs[0].next_run, next, "kept until the clock reaches it");
        assert!(!t.jobs[0].catch_up);
        assert!(t.due(1_000, "b2", &mut 0).is_empty());
        // Set back by a day while running: the next run comes a day earlier.
        let (mut t, _) = Table::from_json(&saved);
        t.at_start(T0 + 10, "b2");
        assert_eq!(t.jobs[0].next_run, Some(T0 + 86_400));
        t.clock_went_back(T0 - 86_400 + 10);
        assert_eq!(t.jobs[0].next_run, Some(T0));
    }

    #[test]
    fn a_daemon_start_catches_up_once_and_reboot_jobs_run_once_per_boot() {
        let mut t = Table::default();
        t.add(new("0 0 * * *", &["/bin/daily"]), T0 - 10, BOOT)
            .unwrap();
        t.add(new("@reboot", &["/bin/boot"]), T0 - 10, BOOT)
            .unwrap();
        t.add(new("0 * * * *", &["/bin/hourly"]), T0 - 10, BOOT)
            .unwrap();
        assert_eq!(
            t.jobs[1].next_run, None,
            "added during a boot: not run in it"
        );
        let saved = t.to_json();
        // Three days later, another boot.
        let now = T0 + 3 * 86_400 + 1800;
        let (mut t, _) = Table::from_json(&saved);
        t.at_start(now, "b2");
        assert_eq!(t.next_due(), Some(T0));
        let d = t.due(now, "b2", &mut 0);
        let ran: Vec<(&str, bool)> = d.iter().map(|d| (d.cmd[0].as_str(), d.catch_up)).collect();
        assert_eq!(
            ran,
            [
                ("/bin/daily", true),
                ("/bin/boot", false),
                ("/bin/hourly", true)
            ]
        );
        assert_eq!(t.jobs[0].next_run, Some(T0 + 4 * 86_400));
        assert_eq!(t.jobs[1].next_run, None);
        assert_eq!(t.jobs[2].next_run, Some(T0 + 3 * 86_400 + 3600));
        // The daemon restarts in the same boot: nothing to catch up, @reboot not again.
        for d in &d {
            t.finished(&d.id, json!({}));
        }
        let (mut t, _) = Table::from_json(&t.to_json());
        t.at_start(now + 60, "b2");
        assert!(t.due(now + 60, "b2", &mut 0).is_empty());
        assert_eq!(t.next_due(), Some(T0 + 3 * 86_400 + 3600));
        // A start with the clock a year behind what the table knows: not set yet (no
        // real-time clock, NTP not answered): the due times stay for the clock to reach.
        t.at_start(now - 365 * 86_400, "b2");
        assert_eq!(t.jobs[2].next_run, Some(T0 + 3 * 86_400 + 3600));
        // Set back a year while the daemon runs: they follow it.
        t.clock_went_back(now - 365 * 86_400);
        assert_eq!(t.jobs[2].next_run, Some(now - 365 * 86_400 + 1800));
        // A restart just after a due time (the daemon was down across it): caught up too.
        let mut t2 = Table::default();
        t2.add(new("0 * * * *", &["/bin/h"]), T0, BOOT).unwrap();
        t2.at_start(T0 + 3610, BOOT);
        assert!(t2.due(T0 + 3610, BOOT, &mut 0)[0].catch_up);
    }

    #[test]
    fn flush_waits_for_its_time() {
        let mut t = Table {
            written: T0,
            ..Table::default()
        };
        assert!(!t.flush_due(T0 + FLUSH_S));
        t.dirty = true;
        assert!(!t.flush_due(T0 + FLUSH_S - 1));
        assert!(t.flush_due(T0 + FLUSH_S));
        // the clock set back a year: written now, not in a year
        assert!(t.flush_due(T0 - 365 * 86_400));
    }

    #[test]
    fn the_test_clock() {
        let real = Clock::REAL;
        assert_eq!(real.at(1_500_000_000_999), 1_500_000_000);
        assert_eq!(real.real_ms(1_500_000_000), 1_500_000_000_000);
        // A cron minute lasts one second, and an offset moves the days.
        let fast = Clock {
            speed: 60,
            offset: 86_400,
        };
        assert_eq!(fast.at(1000), 60 + 86_400);
        assert_eq!(fast.duration_ms(60), 1000);
        for t in [86_400 + 1, 86_400 + 59, 86_400 + 61, 123_456_789] {
            let ms = fast.real_ms(t);
            assert!(fast.at(ms) >= t && fast.at(ms - 1) < t, "{t}");
        }
    }
}
