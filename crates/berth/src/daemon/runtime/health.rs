//! Health probes: one short-lived helper process (`berth __health`) per check, waited for
//! on a thread of its own so that a hung probe never holds up the supervisor. The helper
//! enforces the manifest's timeout; this side only gives up on a helper that outlives it
//! by `GRACE` (a wedged attach), which also counts as a failed check.

use std::io::Read;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_core::manifest::Manifest;
use berth_core::supervise::{Event, Run};

use crate::daemon::base::context::Daemon;
use crate::daemon::device::cgroups;
use crate::health::{HealthArgs, Probe};

/// How long past its own timeout a probe helper may take before it is killed.
pub(crate) const GRACE: Duration = Duration::from_secs(5);

/// Runs the manifest's probe once against run `init` of `name`; the verdict arrives as
/// `Event::Health(init, ok)`, and the verdict line is kept for `status`.
pub(crate) fn check(d: &Arc<Daemon>, name: &str, init: Run, m: &Manifest) {
    let Some(h) = &m.health else {
        return;
    };
    let probe = if let Some(port) = h.tcp {
        Probe::Tcp(port)
    } else if let Some(http) = &h.http {
        Probe::Http(http.port, http.path.clone())
    } else {
        Probe::Cmd(h.cmd.clone())
    };
    let args = HealthArgs {
        lxcpath: d.cfg.paths.lxcpath.clone(),
        name: name.to_string(),
        init,
        timeout_ms: h.timeout_ms,
        uid: m.entrypoint.user,
        gid: m.entrypoint.group,
        probe,
    };
    let limit = Duration::from_millis(h.timeout_ms) + GRACE;
    let (d2, n2) = (Arc::clone(d), name.to_string());
    // (BERTH_FAULT=thread.health: no thread, as when memory is short)
    let spawned = if crate::hooks::active("thread.health") {
        Err(std::io::Error::from(std::io::ErrorKind::OutOfMemory))
    } else {
        berth_sys::process::spawn_thread(
            format!("health-{name}"),
            128 * 1024,
            Box::new(move || {
                let (ok, line) = run(&d2, &args, limit);
                verdict(&d2, &n2, line, Event::Health(init, ok));
            }),
        )
    };
    if let Err(e) = spawned {
        // No thread (memory is short): no verdict on the package (berth's own failure is
        // not the package's), and the next probe is due as after one (without an event the
        // machine would wait for this one, and never probe again). Said at most once a
        // minute.
        let line = format!("the probe could not start: {e}");
        // (seconds since boot: a u32 holds 136 years, and 32-bit MIPS has no 64-bit atomics)
        static SAID: AtomicU32 = AtomicU32::new(0);
        let (now, last) = (
            berth_sys::process::mono_s() as u32,
            SAID.load(Ordering::Relaxed),
        );
        if last == 0 || now >= last + 60 {
            SAID.store(now.max(1), Ordering::Relaxed);
            log::warn!("{name}: {line}; the next check is due as usual");
        }
        verdict(d, name, line, Event::HealthSkipped(init));
    }
}

/// What a probe said (or why there was none), kept for `status`, and its event for the
/// supervisor.
fn verdict(d: &Daemon, name: &str, line: String, ev: Event) {
    if let Some(s) = d.supervision.lock().unwrap().get_mut(name) {
        s.last_check = Some((line, berth_sys::process::now_s()));
    }
    d.notify(name, ev);
}

/// Runs the helper (a probe, or a scheduled job's run); (passed, what it said). Blocked on
/// the helper's report, which comes as it exits (looked at least every second, so a report
/// pipe some leftover process keeps open cannot hold this past `limit`).
pub(crate) fn run(d: &Daemon, args: &HealthArgs, limit: Duration) -> (bool, String) {
    use std::os::fd::AsRawFd;
    // The helper's work (the attach, the job's output it relays) is the container's: it
    // enters the container's budget first.
    let leaf = cgroups::helpers_leaf(d, &args.name);
    let env = [(crate::shim::CGROUP_ENV, leaf.as_deref())];
    let spawned = d.host.processes.spawn(
        &d.exe,
        &args.to_args(),
        &env,
        Stdio::piped(),
        Stdio::piped(),
    );
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return (false, format!("cannot run the probe: {e}")),
    };
    let deadline = Instant::now() + limit;
    let fd = child.stdout.as_ref().map_or(-1, |o| o.as_raw_fd());
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if Instant::now() < deadline => {
                // The report comes as the helper exits: its pipe wakes this (a second at
                // most, should a process the job left behind hold the pipe open).
                let left = deadline.saturating_duration_since(Instant::now());
                let ms = left.as_millis().clamp(1, 1000) as i32;
                if berth_sys::process::poll(&[(fd, libc::POLLIN)], ms).is_ok_and(|r| r[0] != 0) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    // The helper writes a bounded report; what is there is taken without waiting.
    let out = child
        .stdout
        .take()
        .map(|mut o| rest(&mut o, fd))
        .unwrap_or_default();
    let err = child
        .stderr
        .take()
        .map(|mut e| {
            let fd = e.as_raw_fd();
            rest(&mut e, fd)
        })
        .unwrap_or_default();
    // The probe's output is the container's: any bytes, cut anywhere.
    let out = String::from_utf8_lossy(&out);
    let err = String::from_utf8_lossy(&err);
    let out = out.trim_end();
    match status {
        None => (
            false,
            format!("the probe did not finish within {} ms", limit.as_millis()),
        ),
        Some(st) if st.success() => (true, out.to_string()),
        Some(st) if st.code() == Some(1) => (false, out.to_string()),
        Some(_) => (false, format!("probe error: {}", err.trim_end())),
    }
}

/// What a pipe holds now, at most 8 KiB, without waiting for more.
fn rest(r: &mut dyn Read, fd: std::os::fd::RawFd) -> Vec<u8> {
    let _ = berth_sys::process::set_nonblocking(fd);
    let mut v = Vec::new();
    let mut buf = [0u8; 1024];
    while let Ok(n @ 1..) = r.read(&mut buf) {
        v.extend_from_slice(&buf[..n]);
        if v.len() >= 8192 {
            break;
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::daemon::base::testing::{fake_daemon, fakes, install};
    use crate::daemon::runtime::probe::tests::supervised;

    /// A stand-in for `berth __health`: it notes its arguments in `asked` next to it and acts
    /// on the probe command's first word as the helper would end: `/pass` (exit 0), `/fail`
    /// (exit 1, its output the verdict), `/gone` (the container is not running: exit 2, why on
    /// stderr), `/hang` (never ends), `/big` (20 000 bytes of output).
    const HELPER: &str = r#"#!/bin/sh
[ "$1" = __health ] || exit 0
echo "$@" >> "$(dirname "$0")/asked"
echo "cgroup=${BERTH_CGROUP:-none}" >> "$(dirname "$0")/asked"
case "$9" in
/pass) echo "all good   "; exit 0 ;;
/fail) echo "port 80 refused"; exit 1 ;;
/gone) echo "cannot enter the network namespace of pid $4: No such process" >&2; exit 2 ;;
/hang) exec sleep 60 ;;
/big) head -c 20000 /dev/zero | tr '\0' x; exit 0 ;;
esac
exit 3
"#;

    /// `d`'s helper is the stand-in, in the temp dir.
    fn helper(d: &Daemon, dir: &Path) -> PathBuf {
        let exe = dir.join("helper");
        std::fs::write(&exe, HELPER).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        fakes(d).processes.answer("__health", &exe);
        exe
    }

    fn args(name: &str, init: i32, probe: &str) -> HealthArgs {
        HealthArgs {
            lxcpath: PathBuf::from("/var/lib/berth/lxc"),
            name: name.into(),
            init,
            timeout_ms: 5000,
            uid: 1000,
            gid: 1000,
            probe: Probe::Cmd(vec![probe.into(), "--quick".into()]),
        }
    }

    fn asked(dir: &Path) -> String {
        std::fs::read_to_string(dir.join("asked")).unwrap_or_default()
    }

    const LIMIT: Duration = Duration::from_secs(30);

    /// The helper's exit says the verdict: 0 passed (its output, trimmed), 1 failed (its
    /// output), anything else a probe error (its stderr); it gets the probe's arguments, and
    /// no cgroup where the host has none.
    #[test]
    fn the_helpers_exit_is_the_verdict_and_its_output_the_line() {
        let (dir, d, _m) = fake_daemon("health-verdict", "");
        helper(&d, &dir.0);
        assert_eq!(
            run(&d, &args("web", 4242, "/pass"), LIMIT),
            (true, "all good".to_string())
        );
        assert_eq!(
            asked(&dir.0),
            "__health /var/lib/berth/lxc web 4242 5000 1000 1000 cmd /pass --quick\ncgroup=none\n"
        );
        assert_eq!(
            run(&d, &args("web", 4242, "/fail"), LIMIT),
            (false, "port 80 refused".to_string())
        );
        assert_eq!(
            run(&d, &args("web", 4242, "/other"), LIMIT),
            (false, "probe error: ".to_string()),
            "exit 3, nothing on stderr"
        );
    }

    /// A container that is not running (its init gone): the helper cannot enter it, and the
    /// check fails with the helper's reason.
    #[test]
    fn a_probe_of_a_container_that_is_not_running_fails_with_the_helpers_reason() {
        let (dir, d, _m) = fake_daemon("health-gone", "");
        helper(&d, &dir.0);
        let (ok, line) = run(&d, &args("web", 999_999, "/gone"), LIMIT);
        assert!(!ok);
        assert_eq!(
            line,
            "probe error: cannot enter the network namespace of pid 999999: No such process"
        );
    }

    /// A helper that outlives its limit is killed and the check fails, naming the limit; a
    /// helper that cannot be run fails the check too; a long output is cut at 8 KiB.
    #[test]
    fn a_hung_or_missing_helper_fails_and_long_output_is_cut() {
        let (dir, d, _m) = fake_daemon("health-hang", "");
        helper(&d, &dir.0);
        let t0 = Instant::now();
        let (ok, line) = run(&d, &args("web", 1, "/hang"), Duration::from_millis(300));
        assert!(!ok);
        assert_eq!(line, "the probe did not finish within 300 ms");
        assert!(t0.elapsed() >= Duration::from_millis(300));
        assert!(
            t0.elapsed() < Duration::from_secs(50),
            "not waited for the sleep"
        );

        let (ok, line) = run(&d, &args("web", 1, "/big"), LIMIT);
        assert!(ok);
        assert!((8192..8192 + 1024).contains(&line.len()), "{}", line.len());
        assert!(line.bytes().all(|b| b == b'x'));

        fakes(&d).processes.fail_next("__health", libc::EAGAIN);
        let (ok, line) = run(&d, &args("web", 1, "/pass"), LIMIT);
        assert!(!ok);
        assert!(line.starts_with("cannot run the probe: "), "{line}");
    }

    const PROBED: &str = "[package]\nname = \"web\"\nversion = \"1.0\"\n[entrypoint]\nargv = [\"/bin/httpd\"]\nuser = 1000\ngroup = 1000\n[health]\ncmd = [\"/pass\"]\ntimeout = \"5s\"\n";

    /// A check runs on its own thread: the verdict reaches the supervisor as the run's
    /// `Health` event and is kept, with its time, as the container's last check.
    #[test]
    fn a_checks_verdict_reaches_the_supervisor_and_is_recorded() {
        let (dir, d, _m) = fake_daemon("health-check", "");
        helper(&d, &dir.0);
        let d = Arc::new(d);
        let p = install(&d, PROBED);
        d.supervision.lock().unwrap().insert(
            "web".into(),
            supervised("running", None, Default::default()),
        );
        let t0 = berth_sys::process::now_s();
        check(&d, "web", 4242, &p.manifest);
        let ev = d.next_event(Some(Instant::now() + Duration::from_secs(60)));
        assert_eq!(ev, Some(("web".to_string(), Event::Health(4242, true))));
        let (line, at) = d.supervision.lock().unwrap()["web"]
            .last_check
            .clone()
            .unwrap();
        assert_eq!(line, "all good");
        assert!((t0..=berth_sys::process::now_s()).contains(&at));
        let args = asked(&dir.0);
        assert!(
            args.starts_with(&format!(
                "__health {} web 4242 5000 1000 1000 cmd /pass\n",
                d.cfg.paths.lxcpath.display()
            )),
            "{args}"
        );
    }

    /// A failing check of a container the supervisor no longer follows still reaches it
    /// (as a failure); nothing is recorded for it. A package without a probe is never checked.
    #[test]
    fn a_failed_check_is_told_and_a_package_without_a_probe_is_not_checked() {
        let (dir, d, _m) = fake_daemon("health-fail", "");
        helper(&d, &dir.0);
        let d = Arc::new(d);
        let p = install(&d, &PROBED.replace("[\"/pass\"]", "[\"/fail\"]"));
        check(&d, "web", 7, &p.manifest);
        let ev = d.next_event(Some(Instant::now() + Duration::from_secs(60)));
        assert_eq!(ev, Some(("web".to_string(), Event::Health(7, false))));
        assert!(d.supervision.lock().unwrap().get("web").is_none());

        let plain = install(&d, crate::daemon::base::testing::MANIFEST);
        let before = asked(&dir.0);
        check(&d, "web", 7, &plain.manifest);
        assert_eq!(
            d.next_event(Some(Instant::now() + Duration::from_millis(300))),
            None
        );
        assert_eq!(asked(&dir.0), before, "no helper ran");
    }

    /// A probe whose helper cannot be started (the kernel refuses the fork) is a failed
    /// check, told to the supervisor and recorded with the reason.
    #[test]
    fn a_probe_that_cannot_be_spawned_is_a_failed_check() {
        let (dir, d, _m) = fake_daemon("health-spawn", "");
        helper(&d, &dir.0);
        fakes(&d).processes.fail_next("__health", libc::EAGAIN);
        let d = Arc::new(d);
        let p = install(&d, PROBED);
        d.supervision.lock().unwrap().insert(
            "web".into(),
            supervised("running", None, Default::default()),
        );
        check(&d, "web", 4242, &p.manifest);
        let ev = d.next_event(Some(Instant::now() + Duration::from_secs(60)));
        assert_eq!(ev, Some(("web".to_string(), Event::Health(4242, false))));
        let (line, _) = d.supervision.lock().unwrap()["web"]
            .last_check
            .clone()
            .unwrap();
        assert!(line.starts_with("cannot run the probe: "), "{line}");
        assert_eq!(asked(&dir.0), "", "no helper ran");
        let spawned = fakes(&d).processes.calls();
        assert_eq!(spawned.len(), 1);
        assert!(spawned[0].starts_with("__health "), "{spawned:?}");
    }

    /// Where the host has cgroups, the helper is told to enter the container's helpers leaf
    /// (its work is the container's, in its budget).
    #[test]
    fn the_helper_enters_the_containers_helpers_cgroup() {
        let (dir, mut d, _m) = fake_daemon("health-cgroup", "");
        helper(&d, &dir.0);
        crate::daemon::runtime::probe::tests::cgroup_fixture(&mut d, "web");
        let leaf = cgroups::of(&d, "web").helpers;
        std::fs::create_dir_all(d.cgroup_root().join(&leaf)).unwrap();
        assert_eq!(
            run(&d, &args("web", 4242, "/pass"), LIMIT),
            (true, "all good".to_string())
        );
        assert!(
            asked(&dir.0).ends_with(&format!("\ncgroup={leaf}\n")),
            "{}",
            asked(&dir.0)
        );
        let spawned = fakes(&d).processes.calls();
        assert!(
            spawned[0].ends_with(&format!(" BERTH_CGROUP={leaf}")),
            "{spawned:?}"
        );
    }
}
