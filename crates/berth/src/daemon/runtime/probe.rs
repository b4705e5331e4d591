//! Is a container running, and with which init: asked of its shim, or of LXC when the shim is gone.

use std::io::Read;
use std::time::{Duration, Instant};

use berth_core::api::container;
use berth_core::api::exit;
use berth_core::supervise::Exit;
use serde_json::Value;

use crate::daemon::base::context::Daemon;

/// The init pid of a running container. The daemon asks the container's shim (which holds
/// the liblxc handle), so it never loads liblxc itself; only a container whose shim is gone
/// (killed) makes it ask LXC.
pub(crate) fn running_init(d: &Daemon, name: &str) -> Option<i32> {
    if let Some(pid) = shim_info(d, name)[container::INIT_PID].as_i64() {
        return Some(pid as i32);
    }
    if !lxc_monitor_alive(d, name) {
        return None;
    }
    d.host.lxc.running_init(&d.cfg.paths.lxcpath, name)
}

pub(crate) fn is_running(d: &Daemon, name: &str) -> bool {
    // Without a config LXC knows nothing of the container: not ours, or never started.
    if !d.cfg.paths.lxc_dir(name).join("config").exists() {
        return false;
    }
    d.cfg.paths.shim_socket(name).exists() && shim_info(d, name)[container::INIT_PID].is_i64()
        || lxc_monitor_alive(d, name)
}

/// Whether an LXC monitor of this container listens on its command socket (LXC's abstract
/// socket `@<lxcpath>/<name>/command`): the container exists, with or without a shim.
pub(crate) fn lxc_monitor_alive(d: &Daemon, name: &str) -> bool {
    d.host.lxc.monitor_alive(&d.cfg.paths.lxcpath, name)
}

/// Waits until no LXC monitor of the container listens any more; false at the limit.
pub(crate) fn wait_monitor_gone(d: &Daemon, name: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut delay = Duration::from_millis(1);
    while lxc_monitor_alive(d, name) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(50));
    }
    true
}

pub(crate) fn exit_info(d: &Daemon, name: &str) -> Value {
    std::fs::read(d.cfg.paths.exit_file(name))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null)
}

/// The shim's `info` answer: the container's fields `init_pid`, `started_at` and
/// `log_bytes` as `berth status` shows them, and the monitor's pid.
pub(crate) fn shim_info(d: &Daemon, name: &str) -> Value {
    crate::shim::request(&d.cfg.paths.shim_socket(name), "info")
        .ok()
        .and_then(|mut s| {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut t = String::new();
            s.read_to_string(&mut t).ok()?;
            serde_json::from_str(&t).ok()
        })
        .unwrap_or(Value::Null)
}

/// How its last run ended, from its exit record; neither a code nor a signal when there is
/// none (a shim killed before it could write one), which counts as a failure.
pub(crate) fn exit_of(d: &Daemon, name: &str) -> Exit {
    let v = exit_info(d, name);
    let int = |k: &str| v[k].as_i64().map(|n| n as i32);
    Exit {
        code: int(exit::CODE),
        signal: int(exit::SIGNAL),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    pub(crate) use crate::daemon::base::testing::lxc_monitor;
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    use serde_json::json;

    use super::*;
    use crate::daemon::base::testing::{fake_daemon, install, MANIFEST};

    /// A container's shim as the daemon talks to it, on the shim's socket in the daemon's run
    /// directory: one request line per connection, answered, then the connection closed.
    /// `info` gets `info`, a log request (`logs`, `follow`, `tail N`) gets `log`.
    pub(crate) struct FakeShim {
        path: PathBuf,
        asked: Arc<Mutex<Vec<String>>>,
        stop: Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl FakeShim {
        pub(crate) fn start(d: &Daemon, name: &str, info: Value, log: &[u8]) -> FakeShim {
            FakeShim::ending(d, name, info, log, usize::MAX)
        }

        /// A container that ends (its init killed, by the memory guard say) once its shim has
        /// answered `infos` requests for `info`: later ones get no init pid.
        pub(crate) fn ending(
            d: &Daemon,
            name: &str,
            info: Value,
            log: &[u8],
            infos: usize,
        ) -> FakeShim {
            let path = d.cfg.paths.shim_socket(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let listener = UnixListener::bind(&path).unwrap();
            let asked = Arc::new(Mutex::new(Vec::new()));
            let stop = Arc::new(AtomicBool::new(false));
            let (a, s, log) = (Arc::clone(&asked), Arc::clone(&stop), log.to_vec());
            let thread = std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if s.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(mut conn) = conn else { continue };
                    let mut line = String::new();
                    let _ = BufReader::new(&conn).read_line(&mut line);
                    let line = line.trim_end().to_string();
                    let answered = a.lock().unwrap().iter().filter(|l| *l == "info").count();
                    let answer = match line.split(' ').next() {
                        Some("info") if answered >= infos => b"{}".to_vec(),
                        Some("info") => info.to_string().into_bytes(),
                        Some("logs" | "follow" | "tail") => log.clone(),
                        _ => Vec::new(),
                    };
                    a.lock().unwrap().push(line);
                    let _ = conn.write_all(&answer);
                }
            });
            FakeShim {
                path,
                asked,
                stop,
                thread: Some(thread),
            }
        }

        /// The request lines it got, in order.
        pub(crate) fn asked(&self) -> Vec<String> {
            self.asked.lock().unwrap().clone()
        }
    }

    impl Drop for FakeShim {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            let _ = UnixStream::connect(&self.path);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// What a shim answers `info` with for a container whose init is `pid`.
    pub(crate) fn info(pid: i32) -> Value {
        json!({container::INIT_PID: pid, container::STARTED_AT: 1_790_000_100u64, container::LOG_BYTES: 12})
    }

    /// The LXC configuration a start leaves: without it, LXC knows nothing of the container.
    pub(crate) fn lxc_config(d: &Daemon, name: &str) {
        let dir = d.cfg.paths.lxc_dir(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config"), "lxc.uts.name = web\n").unwrap();
    }

    /// A v2 cgroup hierarchy in the daemon's /sys (announced in its /proc's mountinfo) with
    /// berth's group and `name`'s budget and payload counters: CPU 5 s, 2 MiB of 8 MiB, 3
    /// tasks; the group 16 MiB of 64 MiB.
    pub(crate) fn cgroup_fixture(d: &mut crate::daemon::base::context::Daemon, name: &str) {
        let root = d.cgroup_root();
        let group = root.join(&d.cfg.cgroup_parent);
        let budget = group.join(name);
        std::fs::create_dir_all(budget.join("payload")).unwrap();
        std::fs::write(root.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        std::fs::create_dir_all(d.proc().join("self")).unwrap();
        std::fs::write(
            d.proc().join("self/mountinfo"),
            format!(
                "30 1 0:26 / {} rw,nosuid - cgroup2 cgroup2 rw\n",
                root.display()
            ),
        )
        .unwrap();
        let write =
            |dir: &std::path::Path, f: &str, v: &str| std::fs::write(dir.join(f), v).unwrap();
        write(
            &budget,
            "cpu.stat",
            "usage_usec 5000000\nnr_periods 10\nnr_throttled 2\nthrottled_usec 250000\n",
        );
        let payload = budget.join("payload");
        write(&payload, "memory.current", "2097152\n");
        write(&payload, "memory.max", "8388608\n");
        write(&payload, "pids.current", "3\n");
        write(&payload, "pids.max", "max\n");
        write(&group, "memory.current", "16777216\n");
        write(&group, "memory.max", "67108864\n");
        d.resources.cgroups =
            berth_sys::cgroupfs::Cgroups::detect(d.proc()).map_err(|e| e.to_string());
        assert!(d.resources.cgroups.is_ok());
    }

    /// What the supervisor last decided of a container that does not run.
    pub(crate) fn supervised(
        state: &'static str,
        reason: Option<&str>,
        record: berth_core::supervise::Record,
    ) -> crate::daemon::base::context::Supervised {
        crate::daemon::base::context::Supervised {
            state,
            record,
            health: berth_core::supervise::HealthState::None,
            failures: 0,
            ready: false,
            next_start: None,
            run: None,
            started_at: None,
            self_restart_at: None,
            reason: reason.map(str::to_string),
            last_check: None,
        }
    }

    /// The shim's word counts only for a container LXC has a configuration of; then its init
    /// is the one the shim names.
    #[test]
    fn a_container_runs_when_it_has_a_config_and_its_shim_names_an_init() {
        let (_dir, d, _m) = fake_daemon("probe-running", "");
        install(&d, MANIFEST);
        let shim = FakeShim::start(&d, "web", info(4242), b"");
        assert!(!is_running(&d, "web"), "no LXC config: never started");
        assert!(shim.asked().is_empty(), "the shim is not asked then");
        lxc_config(&d, "web");
        assert!(is_running(&d, "web"));
        assert_eq!(running_init(&d, "web"), Some(4242));
        assert_eq!(shim_info(&d, "web")[container::LOG_BYTES], 12);
        assert_eq!(shim.asked(), ["info", "info", "info"]);
    }

    /// A shim that answers without an init (the container is ending) or a socket nobody
    /// listens on (a shim killed) is no running container.
    #[test]
    fn a_shim_without_an_init_or_gone_is_no_running_container() {
        let (_dir, d, _m) = fake_daemon("probe-gone", "");
        lxc_config(&d, "web");
        let shim = FakeShim::start(&d, "web", json!({container::INIT_PID: null}), b"");
        assert!(!is_running(&d, "web"));
        assert_eq!(running_init(&d, "web"), None);
        assert_eq!(shim.asked(), ["info", "info"]);
        drop(shim);

        let sock = d.cfg.paths.shim_socket("web");
        // A socket file left by a shim that died: connecting is refused.
        drop(UnixListener::bind(&sock).unwrap());
        assert!(sock.exists());
        assert_eq!(shim_info(&d, "web"), Value::Null);
        assert!(!is_running(&d, "web"));
        assert_eq!(running_init(&d, "web"), None);
    }

    /// Without its shim, an LXC monitor still listening means the container exists; waiting
    /// for it to go gives up at the limit and succeeds once it has gone.
    #[test]
    fn an_lxc_monitor_is_found_on_its_command_socket_and_waited_out() {
        let (_dir, d, _m) = fake_daemon("probe-monitor", "");
        lxc_config(&d, "web");
        assert!(!lxc_monitor_alive(&d, "web"));
        assert!(wait_monitor_gone(&d, "web", Duration::from_millis(1)));
        let monitor = lxc_monitor(&d, "web");
        assert!(lxc_monitor_alive(&d, "web"));
        assert!(!lxc_monitor_alive(&d, "db"), "another container's socket");
        assert!(is_running(&d, "web"), "a shim killed: LXC still runs it");
        let t0 = Instant::now();
        assert!(!wait_monitor_gone(&d, "web", Duration::from_millis(60)));
        assert!(t0.elapsed() >= Duration::from_millis(60));
        drop(monitor);
        assert!(wait_monitor_gone(&d, "web", Duration::from_millis(60)));
        assert!(!is_running(&d, "web"));
    }

    /// A container whose shim is gone (killed) but whose LXC monitor runs: its init is
    /// liblxc's answer, asked only then; liblxc naming none, it still runs (the monitor) but
    /// has no init to give.
    #[test]
    fn without_its_shim_a_containers_init_is_liblxcs_answer() {
        let (_dir, d, _m) = fake_daemon("probe-liblxc", "");
        lxc_config(&d, "web");
        let lxc = crate::daemon::base::testing::fakes(&d).lxc;
        assert_eq!(running_init(&d, "web"), None);
        assert!(
            !lxc.calls().iter().any(|c| c.starts_with("running_init")),
            "no monitor, liblxc not asked: {:?}",
            lxc.calls()
        );
        let monitor = lxc.monitor(&d.cfg.paths.lxcpath, "web", Some(77));
        assert_eq!(running_init(&d, "web"), Some(77));
        assert!(is_running(&d, "web"));
        drop(monitor);
        let _monitor = lxc.monitor(&d.cfg.paths.lxcpath, "web", None);
        assert_eq!(running_init(&d, "web"), None);
        assert!(is_running(&d, "web"), "its monitor still runs");
        assert!(lxc.calls().contains(&"running_init web".to_string()));
    }

    /// The exit record the shim wrote: read as it is; none, or a damaged one, is an end
    /// nobody recorded (neither a code nor a signal: a failure).
    #[test]
    fn an_exit_record_is_read_and_a_missing_or_damaged_one_is_an_unknown_end() {
        let (_dir, d, _m) = fake_daemon("probe-exit", "");
        let file = d.cfg.paths.exit_file("web");
        let unknown = Exit {
            code: None,
            signal: None,
        };
        assert_eq!(exit_info(&d, "web"), Value::Null);
        assert_eq!(exit_of(&d, "web"), unknown);

        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(
            &file,
            r#"{"code": 3, "signal": null, "stopped_at": 1790000200}"#,
        )
        .unwrap();
        assert_eq!(exit_info(&d, "web")[exit::STOPPED_AT], 1_790_000_200u64);
        assert_eq!(
            exit_of(&d, "web"),
            Exit {
                code: Some(3),
                signal: None
            }
        );
        std::fs::write(
            &file,
            r#"{"code": null, "signal": 11, "core_dumped": true}"#,
        )
        .unwrap();
        assert_eq!(
            exit_of(&d, "web"),
            Exit {
                code: None,
                signal: Some(11)
            }
        );
        assert_eq!(exit_of(&d, "db"), unknown, "another container's record");
        std::fs::write(&file, "{\"code\": 3").unwrap();
        assert_eq!(exit_info(&d, "web"), Value::Null);
        assert_eq!(exit_of(&d, "web"), unknown);
    }
}
