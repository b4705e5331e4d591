//! What berth keeps about a container's past for `berth status`: the memory guard's last
//! kill, in memory and in `<run>/logs/NAME.guard` (tmpfs), so a restarted daemon still
//! shows it; and the supervisor's record of each container (its retry count and whether it
//! failed, on flash). Removed with the package.

use berth_core::api::guard_kill as field;
use berth_core::supervise::{GuardKill, Record};
use berth_sys::fsutil::write_atomic;
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;

pub(crate) fn record_guard_kill(d: &Daemon, name: &str, k: &GuardKill) {
    // The count lives with the last kill, on tmpfs: since boot, across daemon restarts.
    let count = last_guard_kill(d, name)[field::COUNT].as_u64().unwrap_or(0) + 1;
    let v = json!({
        field::COUNT: count,
        field::AT: berth_sys::process::now_s(),
        field::PID: k.pid,
        field::INIT: k.init,
        field::RSS: k.rss,
        field::PRIORITY: k.priority,
        field::AVAILABLE: k.available,
        field::THRESHOLD: d.cfg.guard.threshold,
    });
    let path = d.cfg.paths.guard_file(name);
    if let Err(e) = berth_sys::fsutil::write_atomic(&path, v.to_string().as_bytes(), 0o600) {
        log::warn!("memory guard: {}: {e}", path.display());
    }
    d.guard_kills.lock().unwrap().insert(name.to_string(), v);
}

/// The last guard kill of a container: this daemon's, or one a previous daemon recorded.
pub(crate) fn last_guard_kill(d: &Daemon, name: &str) -> Value {
    if let Some(v) = d.guard_kills.lock().unwrap().get(name) {
        return v.clone();
    }
    std::fs::read(d.cfg.paths.guard_file(name))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null)
}

pub(crate) fn forget(d: &Daemon, name: &str) {
    let _ = std::fs::remove_file(d.cfg.paths.guard_file(name));
    d.guard_kills.lock().unwrap().remove(name);
}

/// The supervisor's record of a container (`<state>/supervise/NAME.json`); a clean one
/// when there is none or it is damaged.
pub(crate) fn load_supervised(d: &Daemon, name: &str) -> Record {
    let path = d.cfg.paths.supervise_file(name);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            log::warn!("{}: {e}; starting from a clean record", path.display());
            Record::default()
        }),
        Err(_) => Record::default(),
    }
}

/// Writes the supervisor's record atomically; a failed write is logged (the record in
/// memory stays right, only a daemon restart would forget it).
pub(crate) fn save_supervised(d: &Daemon, name: &str, r: &Record) {
    let path = d.cfg.paths.supervise_file(name);
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let written = serde_json::to_vec(r)
        .map_err(std::io::Error::other)
        .and_then(|b| write_atomic(&path, &b, 0o600));
    if let Err(e) = written {
        log::warn!("cannot write {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::testing::fake_daemon;

    fn kill(pid: i32) -> GuardKill {
        GuardKill {
            pid,
            init: false,
            rss: 48 << 20,
            priority: -5,
            available: 3 << 20,
        }
    }

    /// A guard kill is kept in memory and on the run directory with what the guard saw; a
    /// second one counts on from the first.
    #[test]
    fn a_guard_kill_is_recorded_with_its_count_in_memory_and_on_disk() {
        let (_dir, d, _) = fake_daemon("records-guard", "[guard]\nthreshold = \"8M\"\n");
        std::fs::create_dir_all(d.cfg.paths.guard_file("web").parent().unwrap()).unwrap();
        record_guard_kill(&d, "web", &kill(4242));
        let v = last_guard_kill(&d, "web");
        assert_eq!(v[field::COUNT], 1);
        assert_eq!(v[field::PID], 4242);
        assert_eq!(v[field::INIT], false);
        assert_eq!(v[field::RSS], 48u64 << 20);
        assert_eq!(v[field::PRIORITY], -5);
        assert_eq!(v[field::AVAILABLE], 3u64 << 20);
        assert_eq!(v[field::THRESHOLD], 8u64 << 20);
        assert!(v[field::AT].as_u64().unwrap() > 1_700_000_000);
        let on_disk: Value =
            serde_json::from_slice(&std::fs::read(d.cfg.paths.guard_file("web")).unwrap()).unwrap();
        assert_eq!(on_disk, v);

        record_guard_kill(&d, "web", &kill(4243));
        let v = last_guard_kill(&d, "web");
        assert_eq!(
            (v[field::COUNT].as_u64(), v[field::PID].as_i64()),
            (Some(2), Some(4243))
        );
        assert_eq!(
            last_guard_kill(&d, "db"),
            Value::Null,
            "another container's"
        );
    }

    /// A restarted daemon (nothing in memory) still shows the last kill from the run
    /// directory and counts on from it; a damaged file is no kill.
    #[test]
    fn a_restarted_daemon_reads_the_last_kill_back_and_a_damaged_file_is_none() {
        let (_dir, d, _) = fake_daemon("records-guard-restart", "");
        std::fs::create_dir_all(d.cfg.paths.guard_file("web").parent().unwrap()).unwrap();
        record_guard_kill(&d, "web", &kill(7));
        d.guard_kills.lock().unwrap().clear();
        assert_eq!(last_guard_kill(&d, "web")[field::PID], 7);
        record_guard_kill(&d, "web", &kill(8));
        assert_eq!(last_guard_kill(&d, "web")[field::COUNT], 2);

        d.guard_kills.lock().unwrap().clear();
        std::fs::write(d.cfg.paths.guard_file("web"), "{\"count\": ").unwrap();
        assert_eq!(last_guard_kill(&d, "web"), Value::Null);
    }

    /// A kill that cannot be written (no log directory) is still shown by this daemon.
    #[test]
    fn a_kill_that_cannot_be_written_is_still_kept_in_memory() {
        let (_dir, d, _) = fake_daemon("records-guard-unwritten", "");
        let path = d.cfg.paths.guard_file("web");
        assert!(!path.parent().unwrap().exists());
        record_guard_kill(&d, "web", &kill(9));
        assert!(!path.exists());
        assert_eq!(last_guard_kill(&d, "web")[field::PID], 9);
    }

    /// `forget` takes the kill from memory and disk: a reinstalled package starts clean.
    #[test]
    fn forget_removes_the_kill_from_memory_and_disk() {
        let (_dir, d, _) = fake_daemon("records-forget", "");
        std::fs::create_dir_all(d.cfg.paths.guard_file("web").parent().unwrap()).unwrap();
        record_guard_kill(&d, "web", &kill(10));
        record_guard_kill(&d, "db", &kill(11));
        forget(&d, "web");
        assert!(!d.cfg.paths.guard_file("web").exists());
        assert_eq!(last_guard_kill(&d, "web"), Value::Null);
        assert_eq!(last_guard_kill(&d, "db")[field::PID], 11, "only web's goes");
    }

    /// The supervisor's record is written (its directory made) and read back as it was; none
    /// is a clean record.
    #[test]
    fn the_supervisors_record_reads_back_as_saved() {
        let (_dir, d, _) = fake_daemon("records-supervise", "");
        assert_eq!(load_supervised(&d, "web"), Record::default());
        let r = Record {
            retries: 3,
            restarts: 2,
            failed: true,
            self_restarts: 1,
        };
        save_supervised(&d, "web", &r);
        assert!(d.cfg.paths.supervise_file("web").exists());
        assert_eq!(load_supervised(&d, "web"), r);
        assert_eq!(load_supervised(&d, "db"), Record::default());
    }

    /// A damaged record is a clean one (logged), never an error that keeps a container from
    /// being supervised; a record of an older berth without `self_restarts` reads.
    #[test]
    fn a_damaged_record_is_a_clean_one_and_an_older_one_reads() {
        let (_dir, d, _) = fake_daemon("records-supervise-damaged", "");
        let path = d.cfg.paths.supervise_file("web");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "{\"retries\": \"many\"}").unwrap();
        assert_eq!(load_supervised(&d, "web"), Record::default());
        std::fs::write(&path, "{\"retries\":4,\"restarts\":1,\"failed\":false}").unwrap();
        assert_eq!(
            load_supervised(&d, "web"),
            Record {
                retries: 4,
                restarts: 1,
                failed: false,
                self_restarts: 0
            }
        );
    }

    /// A record that cannot be written (a directory in its place) is logged, and the one
    /// there stays untouched.
    #[test]
    fn a_record_that_cannot_be_written_leaves_what_is_there() {
        let (_dir, d, _) = fake_daemon("records-supervise-unwritten", "");
        let path = d.cfg.paths.supervise_file("web");
        std::fs::create_dir_all(path.join("inside")).unwrap();
        save_supervised(
            &d,
            "web",
            &Record {
                failed: true,
                ..Record::default()
            },
        );
        assert!(path.join("inside").is_dir());
        assert_eq!(load_supervised(&d, "web"), Record::default());
    }
}
