//! The container API's sockets as the daemon keeps them (`api::container` opens and serves
//! them; the admission loop in `api::server` polls them), and the update locks the packages
//! hold through them. A leaf: what is here needs nothing else of the daemon.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use berth_core::container_api::Bucket;

/// Requests one container may have served at once; more get `503 busy`.
pub const MAX_BUSY_PER_CONTAINER: usize = 4;
/// Connections one container may have still sending their request; one more closes its own
/// oldest (never another container's).
pub const MAX_PENDING_PER_CONTAINER: usize = 4;

/// One container's socket, and what paces it.
pub struct Endpoint {
    pub name: String,
    pub listener: UnixListener,
    bucket: Mutex<Bucket>,
    /// Its requests being served now (reports and followed logs apart).
    pub busy: AtomicUsize,
    /// Its readiness, health and keep-alive reports being served now.
    pub reports: AtomicUsize,
    /// Its followed logs being relayed now.
    pub streams: AtomicUsize,
}

impl Endpoint {
    pub fn new(name: &str, listener: UnixListener, burst: u32, now_ms: u64) -> Endpoint {
        Endpoint {
            name: name.to_string(),
            listener,
            bucket: Mutex::new(Bucket::new(burst, now_ms)),
            busy: AtomicUsize::new(0),
            reports: AtomicUsize::new(0),
            streams: AtomicUsize::new(0),
        }
    }

    /// Milliseconds until the container may make a request again (0: now).
    pub fn wait_ms(&self, now_ms: u64, rate: u32, burst: u32) -> u64 {
        self.bucket.lock().unwrap().wait_ms(now_ms, rate, burst)
    }

    /// Takes one of the container's request tokens; `Err(ms)` until the next one.
    pub fn admit(&self, now_ms: u64, rate: u32, burst: u32) -> Result<(), u64> {
        self.bucket.lock().unwrap().take(now_ms, rate, burst)
    }

    /// Whether the peer of `stream` is a process of this endpoint's container: its cgroup
    /// (`<proc>/PID/cgroup`, read when the connection is accepted) names it below
    /// `cgroup_parent`.
    pub fn is_own(&self, proc: &Path, cgroup_parent: &str, stream: &UnixStream) -> bool {
        let Ok((pid, _)) = berth_sys::fsutil::peer_uid(stream) else {
            return false;
        };
        if pid <= 0 {
            return false;
        }
        let cg = std::fs::read_to_string(proc.join(format!("{pid}/cgroup"))).unwrap_or_default();
        berth_core::report::container_of_cgroup(&cg, cgroup_parent).as_deref()
            == Some(self.name.as_str())
    }
}

/// Every container's socket and the update locks.
pub struct Registry {
    endpoints: Mutex<Vec<Arc<Endpoint>>>,
    /// Written when the set of sockets changes, so the admission loop polls the new set.
    wake: Option<(UnixStream, UnixStream)>,
    /// Update locks: (container, until in seconds since the epoch, the run that took it,
    /// when that run first took one). A few at most: a list (a map's removal code costs the
    /// device build kilobytes).
    locks: Mutex<Vec<(String, u64, i32, u64)>>,
    /// Each container's pace of schedule changes through its API (each change rewrites
    /// its schedule file on flash).
    changes: Mutex<Vec<(String, Bucket)>>,
}

/// Schedule changes a container may make through its API: this many at once…
pub const CHANGES_BURST: u32 = 10;
/// …then one every this many milliseconds (ten a minute).
pub const CHANGE_EVERY_MS: u64 = 6_000;

impl Default for Registry {
    fn default() -> Self {
        Registry {
            endpoints: Mutex::new(Vec::new()),
            wake: UnixStream::pair()
                .and_then(|(r, w)| {
                    r.set_nonblocking(true)?;
                    w.set_nonblocking(true)?;
                    Ok((r, w))
                })
                .ok(),
            locks: Mutex::new(Vec::new()),
            changes: Mutex::new(Vec::new()),
        }
    }
}

impl Registry {
    pub fn endpoints(&self) -> Vec<Arc<Endpoint>> {
        self.endpoints.lock().unwrap().clone()
    }

    pub fn has(&self, name: &str) -> bool {
        self.endpoints
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.name == name)
    }

    pub fn add(&self, e: Endpoint) {
        let mut eps = self.endpoints.lock().unwrap();
        eps.retain(|x| x.name != e.name);
        eps.push(Arc::new(e));
        drop(eps);
        self.changed();
    }

    pub fn remove(&self, name: &str) {
        let mut eps = self.endpoints.lock().unwrap();
        let before = eps.len();
        eps.retain(|e| e.name != name);
        let changed = eps.len() != before;
        drop(eps);
        if changed {
            self.changed();
        }
    }

    /// The read end the admission loop polls.
    pub fn wake_fd(&self) -> Option<i32> {
        self.wake.as_ref().map(|(r, _)| r.as_raw_fd())
    }

    /// Empties the wake socket (after poll found it readable).
    pub fn drain(&self) {
        if let Some((r, _)) = &self.wake {
            let mut buf = [0u8; 64];
            while std::io::Read::read(&mut &*r, &mut buf).is_ok_and(|n| n > 0) {}
        }
    }

    /// Takes one of `name`'s schedule changes; `Err(ms)`: none until then.
    pub fn take_change(&self, name: &str, now_ms: u64) -> Result<(), u64> {
        let mut all = self.changes.lock().unwrap();
        let i = match all.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None => {
                all.push((
                    name.to_string(),
                    Bucket::new(CHANGES_BURST, now_ms / CHANGE_EVERY_MS * 1000),
                ));
                all.len() - 1
            }
        };
        // The bucket counts a token a second; its clock here runs at one "second" per
        // CHANGE_EVERY_MS.
        all[i]
            .1
            .take(now_ms * 1000 / CHANGE_EVERY_MS, 1, CHANGES_BURST)
            .map_err(|ms| ms * CHANGE_EVERY_MS / 1000)
    }

    /// Wakes the admission loop (a worker ended: what waits may be served now).
    pub fn wake(&self) {
        self.changed();
    }

    fn changed(&self) {
        if let Some((_, w)) = &self.wake {
            let _ = (&*w).write(b"x");
        }
    }

    /// Holds off upgrades of `name`, for run `run`, for `want_s` from `now` (CLOCK_MONOTONIC
    /// seconds, as every time of the locks here) — but never
    /// beyond `max_s` after this run first took a lock (renewals do not stretch it); returns
    /// until when, and since when the run holds it.
    pub fn lock(&self, name: &str, now: u64, want_s: u64, max_s: u64, run: i32) -> (u64, u64) {
        let mut locks = self.locks.lock().unwrap();
        let first = locks
            .iter()
            .find(|l| l.0 == name && l.2 == run)
            .map_or(now, |l| l.3);
        let until = (now + want_s.min(max_s)).min(first + max_s);
        locks.retain(|l| l.0 != name);
        locks.push((name.to_string(), until, run, first));
        (until, first)
    }

    /// A lock kept while the daemon was away, as it was.
    pub fn restore(&self, name: &str, until: u64, run: i32, first: u64) {
        let mut locks = self.locks.lock().unwrap();
        locks.retain(|l| l.0 != name);
        locks.push((name.to_string(), until, run, first));
    }

    /// Releases `name`'s lock; whether it held one.
    pub fn unlock(&self, name: &str) -> bool {
        let mut locks = self.locks.lock().unwrap();
        let before = locks.len();
        locks.retain(|l| l.0 != name);
        locks.len() != before
    }

    /// Until when upgrades of `name` are held off, if they are at `now`: only while the
    /// run that took the lock is the one running (`run`), so that a lock dies with its run.
    /// The record of a lock that ran out stays while its run does (a renewal cannot start
    /// a new maximum); another run's goes.
    pub fn locked_until(&self, name: &str, now: u64, run: Option<i32>) -> Option<u64> {
        let mut locks = self.locks.lock().unwrap();
        locks.retain(|l| l.0 != name || Some(l.2) == run);
        locks.iter().find(|l| l.0 == name && l.1 > now).map(|l| l.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_ends_with_its_time_or_its_run() {
        let r = Registry::default();
        assert_eq!(r.lock("vpn", 0, 100, 3600, 7), (100, 0));
        assert_eq!(r.locked_until("vpn", 50, Some(7)), Some(100));
        assert_eq!(r.locked_until("other", 50, Some(7)), None);
        // another run: the lock was the old run's
        assert_eq!(r.locked_until("vpn", 50, Some(8)), None);
        assert_eq!(r.locked_until("vpn", 50, Some(7)), None, "forgotten");
        r.lock("vpn", 0, 100, 3600, 7);
        assert_eq!(r.locked_until("vpn", 100, Some(7)), None, "expired");
        // ran out, taken again by the same run: within the first lock's maximum
        assert_eq!(r.lock("vpn", 200, 3600, 3600, 7), (3600, 0));
        r.unlock("vpn");
        // renewals never hold past the maximum after the run's first lock
        assert_eq!(r.lock("vpn", 1000, 3600, 3600, 7), (4600, 1000));
        assert_eq!(r.lock("vpn", 4000, 3600, 3600, 7), (4600, 1000));
        // a new run starts a new maximum
        assert_eq!(r.lock("vpn", 5000, 100, 3600, 8), (5100, 5000));
        assert!(r.unlock("vpn"));
        assert!(!r.unlock("vpn"));
    }

    #[test]
    fn schedule_changes_are_paced_per_container() {
        let r = Registry::default();
        for _ in 0..CHANGES_BURST {
            assert_eq!(r.take_change("web", 0), Ok(()));
        }
        let wait = r.take_change("web", 0).unwrap_err();
        assert!((1..=CHANGE_EVERY_MS).contains(&wait), "{wait}");
        assert_eq!(
            r.take_change("db", 0),
            Ok(()),
            "another container's own pace"
        );
        assert_eq!(r.take_change("web", CHANGE_EVERY_MS), Ok(()));
        assert!(r.take_change("web", CHANGE_EVERY_MS).is_err());
    }

    #[test]
    fn a_change_of_the_set_wakes_the_loop() {
        let r = Registry::default();
        let fd = r.wake_fd().unwrap();
        let readable =
            || berth_sys::process::poll(&[(fd, berth_sys::process::POLLIN)], 0).unwrap()[0] != 0;
        assert!(!readable());
        let l = UnixListener::bind(
            std::env::temp_dir().join(format!("berth-ep-{}", std::process::id())),
        )
        .unwrap();
        r.add(Endpoint::new("web", l, 4, 0));
        assert!(readable());
        r.drain();
        assert!(!readable());
        assert!(r.has("web"));
        r.remove("nothing");
        assert!(!readable(), "no change, no wake-up");
        r.remove("web");
        assert!(readable());
        let _ = std::fs::remove_file(
            std::env::temp_dir().join(format!("berth-ep-{}", std::process::id())),
        );
    }

    /// A connection is the container's own when its peer's cgroup (read from the proc root
    /// given) is the container's payload; its shim or monitor, another container, a peer
    /// whose cgroup cannot be read are not.
    #[test]
    fn a_peer_is_the_containers_own_by_its_cgroup() {
        let dir = berth_testkit::TempDir::new("endpoints-own");
        let sock = dir.path("api.sock");
        let e = Endpoint::new("web", UnixListener::bind(&sock).unwrap(), 4, 0);
        let (ours, _peer) = UnixStream::pair().unwrap();
        let proc = dir.path("proc");
        assert!(!e.is_own(&proc, "berth", &ours), "no cgroup file");
        let file = proc.join(format!("{}/cgroup", std::process::id()));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        for (cgroup, own) in [
            ("0::/berth/web/payload\n", true),
            ("0::/berth/web/payload/app\n", true),
            ("0::/berth/web/berth\n", false),
            ("0::/berth/web/monitor\n", false),
            ("0::/berth/db/payload\n", false),
            ("0::/other/web/payload\n", false),
        ] {
            std::fs::write(&file, cgroup).unwrap();
            assert_eq!(e.is_own(&proc, "berth", &ours), own, "{cgroup:?}");
        }
    }

    /// A container's requests are paced by its bucket: the burst at once, then one a second.
    #[test]
    fn an_endpoint_admits_its_burst_then_paces() {
        let dir = berth_testkit::TempDir::new("endpoints-pace");
        let e = Endpoint::new("web", UnixListener::bind(dir.path("s")).unwrap(), 2, 0);
        assert_eq!(e.wait_ms(0, 1, 2), 0);
        assert_eq!(e.admit(0, 1, 2), Ok(()));
        assert_eq!(e.admit(0, 1, 2), Ok(()));
        let wait = e.admit(0, 1, 2).unwrap_err();
        assert!((1..=1000).contains(&wait), "{wait}");
        assert_eq!(e.wait_ms(0, 1, 2), wait);
        assert_eq!(e.admit(1000, 1, 2), Ok(()));
        assert!(e.admit(1000, 1, 2).is_err());
    }
}
