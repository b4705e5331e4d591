//! The governor thread (DESIGN.md decision 4; the decisions are `berth_core::governor`).
//!
//! Every `governor.interval` it probes the main service once (`[governor]` http, tcp,
//! command or unix; the response rate is 1 / the probe's latency), reads the group's CPU
//! usage over the interval (idle containers let it learn R_n), and writes the cap the
//! governor decides onto the parent cgroup (`Cgroups::set_cpu_cap`: v1 cpu.cfs_quota_us,
//! v2 cpu.max). Each change of the cap or of the mode is logged and kept in a bounded
//! history for `berth governor`. Without a probe there is no thread and the cap is the
//! static `policy.cpu_max`.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use berth_core::api::governor as field;
use berth_core::cgroup::CPU_PERIOD_US;
use berth_core::config::ProbeSpec;
use berth_core::governor::{self, fmt1, Governor, Mode, Params, Probe};
use berth_sys::cpucap::Clamp;
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;

/// Changes kept for `berth governor`.
const HISTORY: usize = 64;

#[derive(Default)]
struct Shared {
    gov: Option<Governor>,
    history: VecDeque<Value>,
    note: Option<String>,
    last_error: Option<String>,
    probes: u64,
    last_latency_ms: Option<f64>,
    /// v1: container cgroups whose quota the cap holds below their own.
    clamps: Vec<Clamp>,
}

fn shared() -> &'static Mutex<Shared> {
    static S: std::sync::OnceLock<Mutex<Shared>> = std::sync::OnceLock::new();
    S.get_or_init(Default::default)
}

/// Where the v1 clamps live (tmpfs), so a restarted daemon gives the members their own back.
fn clamps_file(d: &Daemon) -> std::path::PathBuf {
    d.cfg.paths.run.join("governor.clamps")
}

/// One line per clamp: "OWN WRITTEN PATH" (text: no JSON code for it on the device).
fn save_clamps(d: &Daemon, clamps: &[Clamp]) {
    let text: String = clamps
        .iter()
        .map(|c| format!("{} {} {}\n", c.own, c.written, c.path.display()))
        .collect();
    let _ = std::fs::write(clamps_file(d), text);
}

fn load_clamps(d: &Daemon) -> Vec<Clamp> {
    let text = std::fs::read_to_string(clamps_file(d)).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ' ');
            Some(Clamp {
                own: it.next()?.parse().ok()?,
                written: it.next()?.parse().ok()?,
                path: it.next()?.into(),
            })
        })
        .collect()
}

pub fn spawn(d: &Arc<Daemon>) {
    let g = &d.cfg.governor;
    let (cgroups, host) = (d.resources.cgroups.as_ref().ok(), d.resources.host);
    // Members a previous daemon's governor held below their own quota get it back now (the
    // group budget is T_u again); this governor clamps anew as it lowers the cap.
    let mut clamps = load_clamps(d);
    if let (false, Some(c)) = (clamps.is_empty(), cgroups) {
        let q = governor::quota_us(
            d.cfg.policy.cpu_max_percent as f64,
            host.cpus,
            CPU_PERIOD_US,
        );
        if let Err(e) = c.set_cpu_cap(&d.cfg.cgroup_parent, q, CPU_PERIOD_US, &mut clamps) {
            log::warn!("governor: {e}");
        }
        save_clamps(d, &clamps);
    }
    shared().lock().unwrap().clamps = clamps;
    let note = match (&g.probe, cgroups) {
        (None, _) => Some("no probe configured ([governor] in berth.toml)".to_string()),
        (Some(_), None) => Some("no cgroup hierarchy: nothing to govern".to_string()),
        (Some(_), Some(c)) if c.root("cpu").is_none() => {
            Some("the cpu cgroup controller is not available on this kernel".to_string())
        }
        _ => None,
    };
    if let Some(n) = note {
        log::info!(
            "governor: {n}; static CPU cap {}% of all CPUs",
            d.cfg.policy.cpu_max_percent
        );
        shared().lock().unwrap().note = Some(n);
        return;
    }
    let params = Params {
        t_lower: g.t_lower as f64,
        t_upper: g.t_upper as f64,
        r_normal: g.r_normal,
        learn: g.learn as usize,
        // Percent of one CPU: well below what a container capped at T_l can use.
        idle_cpu: (g.t_lower as f64 * host.cpus as f64 / 2.0).min(2.0),
        fail_limit: governor::FAIL_LIMIT,
    };
    shared().lock().unwrap().gov = Some(Governor::new(params));
    let d = Arc::clone(d);
    let spawned =
        berth_sys::process::spawn_thread("governor".into(), 128 * 1024, Box::new(move || run(&d)));
    if let Err(e) = spawned {
        log::error!("cannot start the governor: {e}");
    }
}

fn run(d: &Daemon) {
    let g = &d.cfg.governor;
    let Some(spec) = g.probe.clone() else { return };
    let (Ok(c), host) = (&d.resources.cgroups, d.resources.host) else {
        return;
    };
    let rel = d.cfg.cgroup_parent.as_str();
    let interval = Duration::from_millis(g.interval_ms);
    let timeout = Duration::from_millis(g.timeout_ms);
    let write = |cap: f64, clamps: &mut Vec<Clamp>| {
        let q = governor::quota_us(cap, host.cpus, CPU_PERIOD_US);
        c.set_cpu_cap(rel, q, CPU_PERIOD_US, clamps)
    };
    let t_upper = g.t_upper as f64;
    {
        let mut s = shared().lock().unwrap();
        if let Err(e) = write(t_upper, &mut s.clamps) {
            log::error!("governor: {e}");
        }
        save_clamps(d, &s.clamps);
    }
    log::info!(
        "governor: probing {} every {} ms (timeout {} ms); cap between {}% and {}% of all {} CPUs, R_n {}",
        spec.describe(),
        g.interval_ms,
        g.timeout_ms,
        g.t_lower,
        g.t_upper,
        host.cpus,
        match g.r_normal {
            Some(r) => format!("{}/s (configured)", fmt1(r)),
            None => format!("learned from {} idle samples", g.learn),
        }
    );
    let mut usage = (Instant::now(), c.stats(rel).cpu_usage_usec);
    let mut next = Instant::now() + interval;
    loop {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        next += interval;
        let now = Instant::now();
        if next < now {
            next = now + interval; // fell behind (suspend, a slow probe): do not burst
        }
        let (probe, latency) = probe(&spec, timeout);
        let used = c.stats(rel).cpu_usage_usec;
        let now = Instant::now();
        let group_cpu = match (usage.1, used) {
            (Some(a), Some(b)) => Some(
                b.saturating_sub(a) as f64 * 100.0
                    / now.duration_since(usage.0).as_micros().max(1) as f64,
            ),
            _ => None,
        };
        usage = (now, used);
        let mut guard = shared().lock().unwrap();
        let s = &mut *guard;
        s.probes += 1;
        s.last_latency_ms = latency.map(|l| l.as_secs_f64() * 1000.0);
        let Some(gov) = s.gov.as_mut() else { return };
        let old = gov.cap;
        let t = gov.tick(probe, group_cpu);
        let (mode, r_c, r_n) = (gov.mode, gov.r_c, gov.r_n);
        if let Some(n) = &t.note {
            log::warn!("governor: {n}");
        }
        if t.changed {
            let r = write(t.cap, &mut s.clamps);
            save_clamps(d, &s.clamps);
            match r {
                Ok(_) => {
                    s.last_error = None;
                    log::info!(
                        "governor: cap {}% -> {}% of all CPUs (R_c {}, R_n {}, {})",
                        fmt1(old),
                        fmt1(t.cap),
                        rate(r_c),
                        rate(r_n),
                        mode.name()
                    );
                }
                Err(e) => {
                    if s.last_error.is_none() {
                        log::error!("governor: {e}");
                    }
                    s.last_error = Some(e.to_string());
                }
            }
        }
        if t.changed || t.note.is_some() {
            if s.history.len() == HISTORY {
                s.history.pop_front();
            }
            s.history.push_back(json!({
                field::AT: berth_sys::process::now_s(),
                field::CAP: t.cap,
                field::R_C: r_c,
                field::R_N: r_n,
                field::MODE: mode.name(),
                field::NOTE: t.note,
            }));
        }
    }
}

fn rate(r: Option<f64>) -> String {
    r.map(|r| format!("{}/s", fmt1(r)))
        .unwrap_or_else(|| "-".into())
}

/// One probe: the result and, when it answered, its latency.
fn probe(spec: &ProbeSpec, timeout: Duration) -> (Probe, Option<Duration>) {
    let t0 = Instant::now();
    let r = match spec {
        ProbeSpec::Tcp(addr) => connect(addr, timeout).map(|_| ()),
        // berth's own client (fetch.rs): no second HTTP implementation in the binary.
        ProbeSpec::Http(url) => crate::fetch::Fetcher {
            connect_timeout: timeout,
            read_timeout: timeout,
            min_total: timeout,
        }
        .fetch_bytes(url, 16 * 1024)
        .map(|_| ())
        .map_err(|e| std::io::Error::other(e.to_string())),
        ProbeSpec::Unix { path, send } => unix(path, send, timeout),
        ProbeSpec::Command(argv) => command(argv, timeout),
    };
    let took = t0.elapsed();
    let bound = 1.0 / timeout.as_secs_f64();
    match r {
        Ok(()) if took <= timeout => (
            Probe::Answered(1.0 / took.as_secs_f64().max(1e-6)),
            Some(took),
        ),
        // However it failed, a probe that took the whole timeout did not get an answer in
        // time (fetch.rs reports a read timeout as a lost connection).
        Ok(()) => (Probe::TimedOut(bound), None),
        Err(_) if took >= timeout => (Probe::TimedOut(bound), None),
        Err(e) => {
            log::debug!("governor: probe {}: {e}", spec.describe());
            (Probe::Failed, None)
        }
    }
}

fn connect(addr: &str, timeout: Duration) -> std::io::Result<std::net::TcpStream> {
    use std::net::ToSocketAddrs;
    let a = addr
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("no address"))?;
    std::net::TcpStream::connect_timeout(&a, timeout)
}

fn unix(path: &std::path::Path, send: &str, timeout: Duration) -> std::io::Result<()> {
    let mut s = std::os::unix::net::UnixStream::connect(path)?;
    s.set_write_timeout(Some(timeout))?;
    s.set_read_timeout(Some(timeout))?;
    s.write_all(send.as_bytes())?;
    let mut b = [0u8; 64];
    match s.read(&mut b)? {
        0 => Err(std::io::Error::other("closed without a reply")),
        _ => Ok(()),
    }
}

fn command(argv: &[String], timeout: Duration) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::process::Stdio;
    let mut child = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let exited = match berth_sys::process::pidfd_open(child.id() as i32) {
        Ok(fd) => {
            berth_sys::process::poll(
                &[(fd.as_raw_fd(), berth_sys::process::POLLIN)],
                timeout.as_millis() as i32,
            )?[0]
                != 0
        }
        // No pidfd (kernels before 5.3): look every 5 ms, never longer than the timeout.
        Err(_) => {
            let t0 = Instant::now();
            loop {
                if child.try_wait()?.is_some() {
                    break true;
                }
                if t0.elapsed() >= timeout {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    };
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
        return Err(std::io::ErrorKind::TimedOut.into());
    }
    let st = child.wait()?;
    if st.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("exited with {st}")))
    }
}

/// The CPU quota (percent of one CPU) a container can be given now. cgroup v1 refuses a
/// container quota above the group's: while the governor holds the cap below a container's
/// own limit, the container starts (or is limited) at the cap and gets its own back when the
/// cap rises again. v2 caps children by itself.
pub fn fit_container_cpu(d: &Daemon, name: &str, percent: u32) -> u32 {
    let (Ok(c), host) = (&d.resources.cgroups, d.resources.host) else {
        return percent;
    };
    let mut s = shared().lock().unwrap();
    let Some(cap) = s.gov.as_ref().map(|g| g.cap) else {
        return percent;
    };
    let cap_q = governor::quota_us(cap, host.cpus, CPU_PERIOD_US);
    let own_q = berth_core::cgroup::quota_us(percent);
    let Some(dir) = c.dir("cpu", &format!("{}/{name}", d.cfg.cgroup_parent)) else {
        return percent;
    };
    if c.version != berth_sys::cgroupfs::Version::V1 || own_q <= cap_q {
        return percent;
    }
    let fit = ((cap_q * 100 / CPU_PERIOD_US) as u32).max(1);
    s.clamps.retain(|k| k.path != dir);
    s.clamps.push(Clamp {
        path: dir,
        own: own_q,
        written: berth_core::cgroup::quota_us(fit),
    });
    save_clamps(d, &s.clamps);
    log::info!(
        "governor: {name} gets cpu {fit}% (of one CPU) while the group cap is {}% of all CPUs; {percent}% when it rises",
        fmt1(cap)
    );
    fit
}

/// `GET /v1/governor`.
pub fn status(d: &Daemon) -> Value {
    let g = &d.cfg.governor;
    let s = shared().lock().unwrap();
    let (mode, cap, r_n, r_c, target, failures) = match &s.gov {
        Some(v) => (v.mode, v.cap, v.r_n, v.r_c, v.target, v.failures),
        None => {
            let t = d.cfg.policy.cpu_max_percent as f64;
            (Mode::Static, t, None, None, t, 0)
        }
    };
    json!({
        field::MODE: mode.name(),
        field::NOTE: s.note,
        field::PROBE: g.probe.as_ref().map(|p| p.describe()),
        field::INTERVAL_MS: g.interval_ms,
        field::TIMEOUT_MS: g.timeout_ms,
        field::T_LOWER: g.t_lower,
        field::T_UPPER: if s.gov.is_some() { g.t_upper } else { d.cfg.policy.cpu_max_percent },
        field::R_N: r_n,
        field::R_N_SOURCE: if g.r_normal.is_some() { "configured" } else { "learned" },
        field::R_C: r_c,
        field::LAST_LATENCY_MS: s.last_latency_ms,
        field::CAP: cap,
        field::TARGET: target,
        field::FAILURES: failures,
        field::PROBES: s.probes,
        field::LAST_ERROR: s.last_error,
        field::CPUS: d.resources.host.cpus,
        field::HISTORY: s.history.iter().collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::os::unix::net::UnixListener;

    const T: Duration = Duration::from_millis(300);

    fn answered(p: (Probe, Option<Duration>)) -> bool {
        matches!(p.0, Probe::Answered(r) if r > 3.0) && p.1.is_some()
    }

    /// Serves one connection with `reply` after reading the request head (None: never
    /// answers, keeps the connection open for a while).
    fn serve_once(l: TcpListener, reply: Option<&'static [u8]>) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut b = [0u8; 512];
            let _ = c.read(&mut b);
            match reply {
                Some(r) => {
                    let _ = c.write_all(r);
                }
                None => std::thread::sleep(Duration::from_millis(800)),
            }
        })
    }

    fn http(port: u16) -> ProbeSpec {
        ProbeSpec::Http(format!("http://127.0.0.1:{port}/h"))
    }

    #[test]
    fn http_probe_answers_fails_and_times_out() {
        for (reply, want) in [
            (Some(&b"HTTP/1.0 200 OK\r\n\r\nok"[..]), "answered"),
            (Some(&b"HTTP/1.0 500 Oops\r\n\r\n"[..]), "failed"),
            (Some(&b"garbage"[..]), "failed"),
            (None, "timeout"),
        ] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            let h = serve_once(l, reply);
            let p = probe(&http(port), T);
            match want {
                "answered" => assert!(answered(p), "{reply:?}: {p:?}"),
                "failed" => assert_eq!(p.0, Probe::Failed, "{reply:?}"),
                _ => assert!(
                    matches!(p.0, Probe::TimedOut(b) if (b - 1.0 / 0.3).abs() < 1e-9),
                    "{p:?}"
                ),
            }
            h.join().unwrap();
        }
        // Nobody listening: failed, not timed out.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        assert_eq!(probe(&http(port), T).0, Probe::Failed);
    }

    #[test]
    fn tcp_probe() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap().to_string();
        assert!(answered(probe(&ProbeSpec::Tcp(a.clone()), T)));
        drop(l);
        assert_eq!(probe(&ProbeSpec::Tcp(a), T).0, Probe::Failed);
    }

    #[test]
    fn unix_probe_sends_and_waits_for_a_reply() {
        let dir = std::env::temp_dir().join(format!("berth-gov-{}", std::process::id()));
        let _ = std::fs::create_dir(&dir);
        let path = dir.join("s.sock");
        let l = UnixListener::bind(&path).unwrap();
        let spec = ProbeSpec::Unix {
            path: path.clone(),
            send: "PING\n".into(),
        };
        let h = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut b = [0u8; 5];
            c.read_exact(&mut b).unwrap();
            assert_eq!(&b, b"PING\n");
            c.write_all(b"PONG\n").unwrap();
            // The second one never gets a reply.
            let (_c, _) = l.accept().unwrap();
            std::thread::sleep(Duration::from_millis(600));
        });
        assert!(answered(probe(&spec, T)));
        assert!(matches!(probe(&spec, T).0, Probe::TimedOut(_)));
        h.join().unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(probe(&spec, T).0, Probe::Failed);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn command_probe_exit_status_and_timeout() {
        let cmd = |argv: &[&str]| ProbeSpec::Command(argv.iter().map(|s| s.to_string()).collect());
        assert!(answered(probe(&cmd(&["/bin/true"]), T)));
        assert_eq!(probe(&cmd(&["/bin/false"]), T).0, Probe::Failed);
        assert_eq!(probe(&cmd(&["/nonexistent/x"]), T).0, Probe::Failed);
        let t0 = Instant::now();
        assert!(matches!(
            probe(&cmd(&["/bin/sleep", "5"]), T).0,
            Probe::TimedOut(_)
        ));
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "the slow command is killed"
        );
    }
}
