//! The front door of the admin socket and of every container's API socket, run by the
//! daemon's main thread: the peer is checked at accept, requests are read without blocking
//! under one deadline each, and only a complete request gets a thread (a bounded number of
//! them). No wake-ups while nothing is pending.
//!
//! A container cannot crowd out the others or the operator: its connections are paced by its
//! own token bucket at accept, it has its own few pending and busy slots (one more closes its
//! own oldest, or gets `503 busy`), and the container requests have a pool of workers apart
//! from the admin socket's.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use berth_core::container_api::Op;
use berth_core::{fair, http};
use berth_sys::process::{poll, POLLIN};

use super::Caller;
use crate::daemon::base::context::{Component, Daemon};
use crate::daemon::base::endpoints::{Endpoint, MAX_BUSY_PER_CONTAINER, MAX_PENDING_PER_CONTAINER};
use crate::daemon::base::error::{Error, Kind};

/// Admin connections still sending their request: at most this many at once; one more
/// closes the oldest, so that a client that sends its request at once is always read.
const MAX_PENDING: usize = 64;
/// The whole request must arrive within this time of the connection (not per read).
const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// Requests being served at once (streams such as `logs -f` and install progress count);
/// beyond that the answer is 503 `busy`.
const MAX_WORKERS: usize = 32;
/// Container requests being served at once, all containers together.
const MAX_CONTAINER_WORKERS: usize = 16;
/// Connections taken from one container's socket per turn of the loop: a container that
/// connects without pause still leaves the loop to the others.
const ACCEPTS_PER_TURN: usize = 8;
/// The admin socket, root's alone.
pub(crate) fn bind(d: &Daemon) -> anyhow::Result<UnixListener> {
    let sock = d.cfg.paths.admin_socket();
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).with_context(|| format!("bind {}", sock.display()))?;
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves the admin socket until `term` is readable (the daemon is told to stop).
pub(crate) fn serve(
    d: &Arc<Daemon>,
    listener: &UnixListener,
    term: &OwnedFd,
) -> anyhow::Result<()> {
    let mut admin = Admission::default();
    loop {
        // The listener, the termination pipe, the wake-up of a changed set of container
        // sockets, every connection still sending its request, then the container sockets.
        let wake = d.capi.wake_fd().unwrap_or(-1);
        let mut fds = vec![
            (listener.as_raw_fd(), POLLIN),
            (term.as_raw_fd(), POLLIN),
            (wake, POLLIN),
        ];
        fds.extend(admin.pending.iter().map(|p| (p.stream.as_raw_fd(), POLLIN)));
        // A container whose pace is spent is not listened to until its next token: its
        // connections wait in the kernel's backlog, at its cost, not the daemon's.
        let now_ms = d.started.elapsed().as_millis() as u64;
        let mut paced: Option<u64> = None;
        let endpoints: Vec<_> = d
            .capi
            .endpoints()
            .into_iter()
            .filter(
                |e| match e.wait_ms(now_ms, d.cfg.api.rate, d.cfg.api.burst) {
                    0 => true,
                    ms => {
                        paced = Some(paced.map_or(ms, |p| p.min(ms)));
                        false
                    }
                },
            )
            .collect();
        fds.extend(endpoints.iter().map(|e| (e.listener.as_raw_fd(), POLLIN)));
        let paced = paced.map(|ms| Instant::now() + Duration::from_millis(ms));
        // Without pending connections nothing is timed: no wake-ups while idle, unless the
        // watchdog wants a heartbeat every interval.
        let beat = d.beat_every().map(|b| Instant::now() + b);
        let timeout = [admin.next_deadline(), beat, paced]
            .into_iter()
            .flatten()
            .min()
            .map(|t| t.saturating_duration_since(Instant::now()).as_millis() as i32 + 1)
            .unwrap_or(-1);
        let rev = poll(&fds, timeout)?;
        d.beat(Component::Api);
        if rev[1] != 0 {
            return Ok(());
        }
        if rev[2] != 0 {
            d.capi.drain();
            admin.run_queued(d);
        }
        let eps = d.capi.endpoints();
        // Readable first (in poll's order), then new connections, then the deadlines.
        let n = admin.pending.len();
        let readable: Vec<bool> = rev[3..3 + n].iter().map(|r| *r != 0).collect();
        admin.read_ready(d, &eps, &readable);
        if rev[0] != 0 {
            while let Ok((stream, _)) = listener.accept() {
                admin.accept(stream);
            }
        }
        for (e, r) in endpoints.iter().zip(&rev[3 + n..]) {
            if *r != 0 {
                admin.accept_container(d, e);
            }
        }
        admin.expire(Instant::now());
    }
}

/// Who is on the other end: root on the admin socket, or a container on its own socket.
enum Peer {
    Admin(Caller),
    Container(Arc<Endpoint>),
    /// Refused at accept, answered with this once its request has arrived (a client that
    /// is still sending when the connection closes sees a broken pipe, not the answer).
    /// `of`: the container whose pace refused it, in whose slots it waits; None: a stranger
    /// on a container's socket, in the few slots strangers share (so that one container
    /// cannot use up another's).
    Refused {
        e: Error,
        of: Option<Arc<Endpoint>>,
    },
}

impl Peer {
    /// Whether it takes one of `e`'s pending slots (None: a stranger's slot).
    fn is(&self, e: Option<&Arc<Endpoint>>) -> bool {
        match (self, e) {
            (Peer::Container(x), Some(e)) => Arc::ptr_eq(x, e),
            (Peer::Refused { of: Some(x), .. }, Some(e)) => Arc::ptr_eq(x, e),
            (Peer::Refused { of: None, .. }, None) => true,
            _ => false,
        }
    }
}

/// Connections of strangers on the containers' sockets waiting to be refused, all together.
const MAX_STRANGERS: usize = 4;

struct Pending {
    stream: UnixStream,
    peer: Peer,
    buf: Vec<u8>,
    deadline: Instant,
}

/// A complete container request waiting for a worker.
struct Queued {
    e: Arc<Endpoint>,
    class: Class,
    stream: UnixStream,
    op: Op,
    deadline: Instant,
}

#[derive(Default)]
struct Admission {
    pending: VecDeque<Pending>,
    queued: VecDeque<Queued>,
    workers: Arc<AtomicUsize>,
    container_workers: Arc<AtomicUsize>,
    /// Followed logs being relayed, all containers together.
    streams: Arc<AtomicUsize>,
}

/// What a container request holds a worker for, and so which slots it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Most requests: short, in the container's and the pool's slots.
    Regular,
    /// Readiness, health and keep-alive reports: short, and never to wait behind the
    /// container's other requests (a missed keep-alive ends its run).
    Report,
    /// A followed log: held until the run ends or the client goes.
    Stream,
}

impl Class {
    /// Slots one container may hold, and the pool's (reports have a reserve beyond it).
    fn caps(self) -> (usize, usize) {
        match self {
            Class::Regular => (MAX_BUSY_PER_CONTAINER, MAX_CONTAINER_WORKERS),
            Class::Report => (
                MAX_REPORTS_PER_CONTAINER,
                MAX_CONTAINER_WORKERS + REPORT_RESERVE,
            ),
            Class::Stream => (1, MAX_STREAMS),
        }
    }

    fn of(op: &Op) -> Class {
        match op {
            Op::Logs { follow: true, .. } => Class::Stream,
            Op::Ready | Op::Health { .. } | Op::KeepAlive => Class::Report,
            _ => Class::Regular,
        }
    }
}

/// Followed logs at once on the device, one per container: no container holds more than
/// its share of them (a share is at least one), and they hold no worker of the pool.
const MAX_STREAMS: usize = 8;
/// The answer beyond them (a constant: each formatted message costs the device build bytes).
const STREAMS_BUSY: &str = "one followed log per container, 8 on the device, at a time; try again";
/// Reports one container may have served at once.
const MAX_REPORTS_PER_CONTAINER: usize = 2;
/// Workers kept for reports beyond the pool's.
const REPORT_RESERVE: usize = 8;

impl Admission {
    fn next_deadline(&self) -> Option<Instant> {
        self.pending
            .iter()
            .map(|p| p.deadline)
            .chain(self.queued.iter().map(|q| q.deadline))
            .min()
    }

    fn accept(&mut self, stream: UnixStream) {
        // A peer whose credentials cannot be read is nobody: refused like any other.
        let caller = Caller {
            uid: berth_sys::fsutil::peer_uid(&stream).map_or(u32::MAX, |(_, uid)| uid),
        };
        if caller.uid != 0 {
            // Refused before a byte is read: the request of a non-root peer is never parsed.
            let e = Error::new(Kind::Forbidden, "the admin socket is for root only");
            return reply_now(stream, e);
        }
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        if self.pending.len() >= MAX_PENDING {
            // The oldest has had the longest to send its request.
            self.pending.pop_front();
        }
        self.pending.push_back(Pending {
            stream,
            peer: Peer::Admin(caller),
            buf: Vec::with_capacity(512),
            deadline: Instant::now() + REQUEST_DEADLINE,
        });
    }

    /// New connections on a container's socket: paced by its bucket, and only from its own
    /// processes.
    fn accept_container(&mut self, d: &Daemon, e: &Arc<Endpoint>) {
        for _ in 0..ACCEPTS_PER_TURN {
            let Ok((stream, _)) = e.listener.accept() else {
                return;
            };
            let now = d.started.elapsed().as_millis() as u64;
            let peer = if !e.is_own(d.proc(), &d.cfg.cgroup_parent, &stream) {
                // The path leaked to another container (or the host): it acts only as
                // itself, and here it is not itself.
                Peer::Refused {
                    e: Error::new(
                        Kind::Forbidden,
                        "this API socket belongs to another container; use your own /run/berth/api.sock",
                    ),
                    of: None,
                }
            } else if let Err(ms) = e.admit(now, d.cfg.api.rate, d.cfg.api.burst) {
                Peer::Refused {
                    e: Error::rate_limited(
                        format_args!(
                            "{}: more than {} requests a second ([api] rate)",
                            e.name, d.cfg.api.rate
                        ),
                        ms,
                    ),
                    of: Some(Arc::clone(e)),
                }
            } else {
                Peer::Container(Arc::clone(e))
            };
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            // Over its slots: its own oldest goes (never another's).
            let slot = match &peer {
                Peer::Refused { of: None, .. } => None,
                _ => Some(e),
            };
            let cap = if slot.is_some() {
                MAX_PENDING_PER_CONTAINER
            } else {
                MAX_STRANGERS
            };
            if self.pending.iter().filter(|p| p.peer.is(slot)).count() >= cap {
                if let Some(i) = self.pending.iter().position(|p| p.peer.is(slot)) {
                    self.pending.remove(i);
                }
            }
            self.pending.push_back(Pending {
                stream,
                peer,
                buf: Vec::with_capacity(512),
                deadline: Instant::now() + REQUEST_DEADLINE,
            });
        }
    }

    /// Reads what arrived on the connections poll found readable; complete requests go to a
    /// worker, broken ones get their 400, closed ones go.
    fn read_ready(&mut self, d: &Arc<Daemon>, eps: &[Arc<Endpoint>], readable: &[bool]) {
        let mut keep = VecDeque::with_capacity(self.pending.len());
        for (i, mut p) in std::mem::take(&mut self.pending).into_iter().enumerate() {
            if !readable.get(i).copied().unwrap_or(false) {
                keep.push_back(p);
                continue;
            }
            match read_request(&mut p) {
                Ok(None) => keep.push_back(p),
                Ok(Some(req)) => match p.peer {
                    Peer::Admin(caller) => self.dispatch(d, caller, p.stream, req),
                    Peer::Container(e) => {
                        self.dispatch_container(d, eps, e, p.stream, req, p.deadline)
                    }
                    Peer::Refused { e, .. } => reply_now(p.stream, e),
                },
                Err(Some(why)) => match p.peer {
                    Peer::Refused { e, .. } => reply_now(p.stream, e),
                    _ => reply_now(p.stream, Error::bad_request(why)),
                },
                Err(None) => {}
            }
        }
        self.pending = keep;
    }

    fn dispatch(&self, d: &Arc<Daemon>, caller: Caller, stream: UnixStream, req: http::Request) {
        if self.workers.fetch_add(1, Ordering::SeqCst) >= MAX_WORKERS {
            self.workers.fetch_sub(1, Ordering::SeqCst);
            let why = format!("the daemon is serving {MAX_WORKERS} requests already; try again");
            return reply_now(stream, Error::new(Kind::Busy, why));
        }
        let d = Arc::clone(d);
        let workers = Arc::clone(&self.workers);
        let spawned = berth_sys::process::spawn_thread(
            "admin".into(),
            256 * 1024,
            Box::new(move || {
                if stream.set_nonblocking(false).is_ok() {
                    super::route(&d, caller, req, stream);
                }
                // Requests are rare; give back what this one allocated (install buffers,
                // JSON) and the mappings of the code it ran.
                berth_sys::process::trim_heap();
                crate::daemon::base::context::release_code(false);
                workers.fetch_sub(1, Ordering::SeqCst);
            }),
        );
        if let Err(e) = spawned {
            self.workers.fetch_sub(1, Ordering::SeqCst);
            log::error!("cannot start a thread for an admin request: {e}");
        }
    }

    /// A complete container request: served on a worker now, or queued until one is free
    /// (at most its container's pending share; beyond, `503 busy`). A followed log has a
    /// budget of its own and never waits.
    fn dispatch_container(
        &mut self,
        d: &Arc<Daemon>,
        eps: &[Arc<Endpoint>],
        e: Arc<Endpoint>,
        stream: UnixStream,
        req: http::Request,
        deadline: Instant,
    ) {
        // Parsed here, once (pure and bounded): a bad request is answered without a worker.
        let op = match berth_core::container_api::parse(&req) {
            Ok(op) => op,
            Err(r) => return reply_now(stream, Error::new(r.kind, r.message)),
        };
        let class = Class::of(&op);
        if class == Class::Stream {
            if !self.take(eps, &e, class) {
                return reply_now(stream, Error::new(Kind::Busy, STREAMS_BUSY));
            }
            return self.start_worker(d, e, class, stream, op);
        }
        let behind = self
            .queued
            .iter()
            .any(|q| Arc::ptr_eq(&q.e, &e) && q.class == class);
        if behind || !self.take(eps, &e, class) {
            let own = self.queued.iter().filter(|q| Arc::ptr_eq(&q.e, &e)).count();
            if own >= MAX_PENDING_PER_CONTAINER {
                let why = format!(
                    "{}: {} of its requests are being served or waiting already; try again",
                    e.name,
                    MAX_BUSY_PER_CONTAINER + MAX_PENDING_PER_CONTAINER
                );
                return reply_now(stream, Error::new(Kind::Busy, why));
            }
            self.queued.push_back(Queued {
                e,
                class,
                stream,
                op,
                deadline,
            });
            return;
        }
        self.start_worker(d, e, class, stream, op);
    }

    /// Takes a slot of `class` for `e` if there is one: a regular request one of its
    /// container's and of the pool's; a report (ready, health, keep-alive) one of the pool
    /// or of the few kept for reports, whatever its container's others do, so that a
    /// container's keep-alive is never stuck behind the others' work. Fairly (`berth_core::fair`): while another container's request of the same
    /// class waits, a container at its share of the pool takes no slot.
    fn take(&self, eps: &[Arc<Endpoint>], e: &Arc<Endpoint>, class: Class) -> bool {
        let (own_cap, all_cap) = class.caps();
        let (own, all) = match class {
            Class::Regular => (&e.busy, &self.container_workers),
            Class::Report => (&e.reports, &self.container_workers),
            Class::Stream => (&e.streams, &self.streams),
        };
        if class != Class::Stream {
            let (claims, me) = self.claims(eps, e, class);
            let in_use = all.load(Ordering::SeqCst);
            if !fair::may_take(&claims, me, own_cap, in_use, all_cap) {
                return false;
            }
        }
        let o = own.fetch_add(1, Ordering::SeqCst);
        let a = all.fetch_add(1, Ordering::SeqCst);
        if o >= own_cap || a >= all_cap {
            own.fetch_sub(1, Ordering::SeqCst);
            all.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Every container's claim on the slots of `class`: what it holds, whether a request of
    /// it waits; and the index of `e`'s (added if it is no longer listed).
    fn claims(
        &self,
        eps: &[Arc<Endpoint>],
        e: &Arc<Endpoint>,
        class: Class,
    ) -> (Vec<fair::Claim>, usize) {
        let held = |x: &Endpoint| match class {
            Class::Report => x.reports.load(Ordering::SeqCst),
            _ => x.busy.load(Ordering::SeqCst),
        };
        let claim = |x: &Arc<Endpoint>| fair::Claim {
            held: held(x),
            waiting: self
                .queued
                .iter()
                .any(|q| Arc::ptr_eq(&q.e, x) && q.class == class),
        };
        let mut claims: Vec<fair::Claim> = eps.iter().map(claim).collect();
        let me = match eps.iter().position(|x| Arc::ptr_eq(x, e)) {
            Some(i) => i,
            None => {
                claims.push(claim(e));
                claims.len() - 1
            }
        };
        (claims, me)
    }

    /// Serves a request on a thread of its own, in the slot taken for it; when it ends the
    /// loop is woken to serve what waits. The last worker to end gives back the heap and the
    /// code pages the requests touched (not every request: keep-alives come often).
    fn start_worker(
        &self,
        d: &Arc<Daemon>,
        e: Arc<Endpoint>,
        class: Class,
        stream: UnixStream,
        op: Op,
    ) {
        let (pool, streams) = (
            Arc::clone(&self.container_workers),
            Arc::clone(&self.streams),
        );
        let release = move |e: &Endpoint| {
            let (own, all) = match class {
                Class::Regular => (&e.busy, &pool),
                Class::Report => (&e.reports, &pool),
                Class::Stream => (&e.streams, &streams),
            };
            own.fetch_sub(1, Ordering::SeqCst);
            all.fetch_sub(1, Ordering::SeqCst) == 1
        };
        let d2 = Arc::clone(d);
        let ep = Arc::clone(&e);
        let spawned = berth_sys::process::spawn_thread(
            "api".into(),
            256 * 1024,
            Box::new(move || {
                // A client that does not read its answer holds a worker no longer than this
                // (a followed log's relay drops a client that stops reading, as the shim
                // drops a follower that cannot keep up).
                let _ = stream.set_write_timeout(Some(REQUEST_DEADLINE));
                if class == Class::Regular {
                    if let Some(t) = crate::hooks::api_delay() {
                        std::thread::sleep(t);
                    }
                }
                if stream.set_nonblocking(false).is_ok() {
                    super::container::route(&d2, &ep, op, stream);
                }
                if release(&ep) {
                    berth_sys::process::trim_heap();
                    crate::daemon::base::context::release_code(false);
                }
                d2.capi.wake();
            }),
        );
        if let Err(err) = spawned {
            let (own, all) = match class {
                Class::Regular => (&e.busy, &self.container_workers),
                Class::Report => (&e.reports, &self.container_workers),
                Class::Stream => (&e.streams, &self.streams),
            };
            own.fetch_sub(1, Ordering::SeqCst);
            all.fetch_sub(1, Ordering::SeqCst);
            log::error!("cannot start a thread for a container API request: {err}");
        }
    }

    /// Serves the queued requests that have a worker slot now: reports first, then the
    /// others; within a class the oldest request of the container that holds the fewest
    /// slots, so that a freed slot goes to the container that has the least, never to one
    /// at its share while another waits (`berth_core::fair::may_take`). Each container's
    /// requests keep their order.
    fn run_queued(&mut self, d: &Arc<Daemon>) {
        let eps = d.capi.endpoints();
        for class in [Class::Report, Class::Regular] {
            loop {
                // The waiting request of the container holding the fewest slots of the
                // class, the oldest among equals (so each container's keep their order).
                let mut best: Option<(usize, usize)> = None;
                for (i, q) in self.queued.iter().enumerate() {
                    let held = match class {
                        Class::Report => q.e.reports.load(Ordering::SeqCst),
                        _ => q.e.busy.load(Ordering::SeqCst),
                    };
                    if q.class == class && best.is_none_or(|(_, h)| held < h) {
                        best = Some((i, held));
                    }
                }
                let Some((i, _)) = best else {
                    break;
                };
                let Some(q) = self.queued.remove(i) else {
                    break;
                };
                // No slot, or not its turn (`fair::may_take`): it waits on, in its place.
                if !self.take(&eps, &q.e, class) {
                    self.queued.insert(i, q);
                    break;
                }
                self.start_worker(d, q.e, q.class, q.stream, q.op);
            }
        }
    }

    /// Connections that did not send a whole request in time are closed; requests that
    /// waited for a worker until their deadline get `503 busy`.
    fn expire(&mut self, now: Instant) {
        self.pending.retain(|p| p.deadline > now);
        while let Some(i) = self.queued.iter().position(|q| q.deadline <= now) {
            if let Some(q) = self.queued.remove(i) {
                let why = format!("{}: no worker was free within 5 s; try again", q.e.name);
                reply_now(q.stream, Error::new(Kind::Busy, why));
            }
        }
    }
}

/// What a readable connection sent: a complete request, nothing complete yet (`Ok(None)`),
/// a malformed one (`Err(Some(why))`) or a closed connection (`Err(None)`).
fn read_request(p: &mut Pending) -> Result<Option<http::Request>, Option<String>> {
    let mut chunk = [0u8; 2048];
    loop {
        match p.stream.read(&mut chunk) {
            Ok(0) => return Err(None),
            Ok(n) => {
                p.buf.extend_from_slice(&chunk[..n]);
                match http::parse_complete(&p.buf) {
                    Ok(Some(req)) => return Ok(Some(req)),
                    Ok(None) => continue,
                    Err(e) => return Err(Some(e.to_string())),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(None),
        }
    }
}

/// An answer from the main thread, which must not block: a short write to a socket whose
/// buffer is empty, or nothing.
fn reply_now(mut stream: UnixStream, e: Error) {
    let _ = stream.set_nonblocking(true);
    let _ = stream.write_all(&e.response());
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use berth_core::api::error as efield;
    use berth_testkit::TempDir;
    use serde_json::{json, Value};

    use super::*;
    use crate::daemon::base::testing::{fake_daemon, install};

    /// `web`, asking for its status through its API.
    const ASKS_STATUS: &str = "[package]\nname = \"web\"\nversion = \"1.0\"\n[entrypoint]\nargv = [\"/bin/httpd\"]\n[permissions]\napi = [\"status\"]\n";

    const LIMIT: Duration = Duration::from_secs(30);

    fn get(path: &str) -> Vec<u8> {
        format!("GET {path} HTTP/1.1\r\nHost: berth\r\n\r\n").into_bytes()
    }

    /// A whole answer: its status and its JSON body (Null when there is none).
    fn answer(client: &mut UnixStream) -> (u16, Value) {
        client.set_read_timeout(Some(LIMIT)).unwrap();
        let mut raw = Vec::new();
        // Closed with what it sent unread: a reset, no answer.
        match client.read_to_end(&mut raw) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            r => {
                r.unwrap();
            }
        }
        if raw.is_empty() {
            return (0, Value::Null);
        }
        let end = http::head_end(&raw).expect("a whole head");
        let head = String::from_utf8_lossy(&raw[..end]).to_string();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        let body = serde_json::from_slice(&raw[end..]).unwrap_or(Value::Null);
        (status, body)
    }

    /// Nothing has been answered yet (the connection is open, nothing to read).
    fn unanswered(client: &UnixStream) -> bool {
        client.set_nonblocking(true).unwrap();
        let r = (&*client).read(&mut [0u8; 16]);
        client.set_nonblocking(false).unwrap();
        matches!(r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }

    /// A connection as the admission loop holds it after accept: the server's end, pending;
    /// the client's end to talk on.
    fn pending(a: &mut Admission, peer: Peer) -> UnixStream {
        let (client, server) = UnixStream::pair().unwrap();
        server.set_nonblocking(true).unwrap();
        a.pending.push_back(Pending {
            stream: server,
            peer,
            buf: Vec::new(),
            deadline: Instant::now() + REQUEST_DEADLINE,
        });
        client
    }

    /// Reads what every pending connection has sent.
    fn read_all(a: &mut Admission, d: &Arc<Daemon>, eps: &[Arc<Endpoint>]) {
        let readable = vec![true; a.pending.len()];
        a.read_ready(d, eps, &readable);
    }

    fn root() -> Peer {
        Peer::Admin(Caller { uid: 0 })
    }

    /// `web`'s endpoint (its socket in the temp dir), in `d`'s registry; the test's own
    /// process counts as one of `cgroup_of`'s processes (in the daemon's /proc).
    fn container(d: &Daemon, dir: &TempDir, cgroup_of: &str) -> Arc<Endpoint> {
        install(d, ASKS_STATUS);
        let l = UnixListener::bind(dir.path("web.sock")).unwrap();
        l.set_nonblocking(true).unwrap();
        d.capi.add(Endpoint::new("web", l, d.cfg.api.burst, 0));
        let me = d.proc().join(std::process::id().to_string());
        std::fs::create_dir_all(&me).unwrap();
        let cg = format!("0::/{}/{cgroup_of}/payload\n", d.cfg.cgroup_parent);
        std::fs::write(me.join("cgroup"), cg).unwrap();
        d.capi.endpoints().pop().unwrap()
    }

    /// The daemon's main loop on a thread, until `stop` is dropped.
    struct Serving {
        term: Option<UnixStream>,
        t: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
    }

    impl Serving {
        fn start(d: &Arc<Daemon>, listener: UnixListener) -> Serving {
            let (term_w, term_r) = UnixStream::pair().unwrap();
            let d = Arc::clone(d);
            let t = std::thread::spawn(move || serve(&d, &listener, &OwnedFd::from(term_r)));
            Serving {
                term: Some(term_w),
                t: Some(t),
            }
        }

        /// Tells the loop to stop and waits for it: it returns Ok.
        fn stop(mut self) {
            self.term.take().unwrap().write_all(b"x").unwrap();
            self.t.take().unwrap().join().unwrap().unwrap();
        }
    }

    /// The admin socket in the run directory, root's alone (0600); a request over it is
    /// answered — served to root, refused before it is read to anyone else — and the loop
    /// stops when told.
    #[test]
    fn the_admin_socket_answers_root_and_refuses_anyone_else() {
        let (dir, d, _m) = fake_daemon("server-admin", "");
        let d = Arc::new(d);
        let listener = bind(&d).unwrap();
        let sock = d.cfg.paths.admin_socket();
        assert!(sock.starts_with(&dir.0));
        assert_eq!(std::fs::metadata(&sock).unwrap().mode() & 0o777, 0o600);
        // Who the tests run as: the owner of a file they make.
        std::fs::write(dir.path("me"), "").unwrap();
        let uid = std::fs::metadata(dir.path("me")).unwrap().uid();

        let serving = Serving::start(&d, listener);
        for _ in 0..2 {
            let mut c = UnixStream::connect(&sock).unwrap();
            // Refused before it is read, a request can meet a socket already closed (EPIPE);
            // the refusal is there to read all the same.
            let wrote = c.write_all(&get("/v1/ping"));
            assert!(uid != 0 || wrote.is_ok(), "{wrote:?}");
            let (status, body) = answer(&mut c);
            if uid == 0 {
                assert_eq!((status, body), (200, json!({"ok": true})));
            } else {
                assert_eq!(status, 403);
                assert_eq!(body[efield::CODE], "forbidden");
                assert_eq!(body[efield::ERROR], "the admin socket is for root only");
            }
        }
        serving.stop();
        assert!(
            UnixStream::connect(&sock).is_err(),
            "stopped: nobody listens"
        );
    }

    /// A complete request is served on a worker; a malformed one gets its 400; a head over
    /// the limit is refused as soon as it passes it; a closed connection is dropped.
    #[test]
    fn complete_requests_are_served_broken_ones_refused() {
        let (_dir, d, _m) = fake_daemon("server-read", "");
        let d = Arc::new(d);
        let mut a = Admission::default();
        let mut ok = pending(&mut a, root());
        let mut broken = pending(&mut a, root());
        let mut huge = pending(&mut a, root());
        let half = pending(&mut a, root());
        let gone = pending(&mut a, root());
        // In two pieces: the first is not a request yet.
        ok.write_all(b"GET /v1/pi").unwrap();
        read_all(&mut a, &d, &[]);
        assert_eq!(a.pending.len(), 5);
        ok.write_all(b"ng HTTP/1.1\r\n\r\n").unwrap();
        broken.write_all(b"NONSENSE\r\n\r\n").unwrap();
        huge.write_all(&vec![b'a'; http::MAX_HEAD + 1]).unwrap();
        (&half).write_all(b"GET /v1/ping HTTP/1.1\r\n").unwrap();
        drop(gone);
        read_all(&mut a, &d, &[]);
        assert_eq!(a.pending.len(), 1, "only the half request waits");
        assert_eq!(answer(&mut ok), (200, json!({"ok": true})));
        let (status, body) = answer(&mut broken);
        assert_eq!((status, &body[efield::CODE]), (400, &json!("bad_request")));
        let (status, body) = answer(&mut huge);
        assert_eq!(status, 400);
        assert_eq!(
            body[efield::ERROR],
            format!("request head larger than {} bytes", http::MAX_HEAD)
        );
        assert!(unanswered(&half));
    }

    /// A connection gets one deadline for its whole request: past it, it is closed without
    /// an answer; before it, it waits.
    #[test]
    fn a_request_not_sent_within_its_deadline_is_closed() {
        let mut a = Admission::default();
        let mut slow = pending(&mut a, root());
        slow.write_all(b"GET /v1/ping HTTP/1.1\r\n").unwrap();
        let deadline = a.next_deadline().unwrap();
        assert!(deadline <= Instant::now() + REQUEST_DEADLINE);
        a.expire(deadline - Duration::from_millis(1));
        assert_eq!(a.pending.len(), 1);
        assert!(unanswered(&slow));
        a.expire(deadline);
        assert!(a.pending.is_empty());
        assert_eq!(answer(&mut slow), (0, Value::Null), "closed, no answer");
        assert_eq!(a.next_deadline(), None, "nothing timed while idle");
    }

    /// With every admin worker busy, a request is answered `503 busy` at once.
    #[test]
    fn admin_requests_beyond_the_workers_get_busy() {
        let (_dir, d, _m) = fake_daemon("server-busy", "");
        let d = Arc::new(d);
        let mut a = Admission::default();
        a.workers.store(MAX_WORKERS, Ordering::SeqCst);
        let mut c = pending(&mut a, root());
        c.write_all(&get("/v1/ping")).unwrap();
        read_all(&mut a, &d, &[]);
        let (status, body) = answer(&mut c);
        assert_eq!(status, 503);
        assert_eq!(
            body[efield::ERROR],
            "the daemon is serving 32 requests already; try again"
        );
        assert_eq!(a.workers.load(Ordering::SeqCst), MAX_WORKERS, "given back");
    }

    /// A container's requests over its own socket, through the main loop: its own process
    /// is served, one of another container is refused; a request the API does not know is
    /// answered without a worker.
    #[test]
    fn a_containers_socket_serves_its_own_processes_only() {
        let (dir, d, _m) = fake_daemon("server-capi", "[api]\nburst = 50\n");
        let d = Arc::new(d);
        let ep = container(&d, &dir, "web");
        let serving = Serving::start(&d, bind(&d).unwrap());
        let mut c = UnixStream::connect(dir.path("web.sock")).unwrap();
        c.write_all(&get("/v1/self")).unwrap();
        let (status, body) = answer(&mut c);
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["name"], "web");

        let mut c = UnixStream::connect(dir.path("web.sock")).unwrap();
        c.write_all(b"POST /v1/self HTTP/1.1\r\n\r\n").unwrap();
        let (status, body) = answer(&mut c);
        assert_eq!(status, 405);
        assert_eq!(body[efield::ERROR], "POST /v1/self: use GET");

        // Now this process is another container's.
        let me = d.proc().join(std::process::id().to_string());
        let cg = format!("0::/{}/db/payload\n", d.cfg.cgroup_parent);
        std::fs::write(me.join("cgroup"), cg).unwrap();
        let mut c = UnixStream::connect(dir.path("web.sock")).unwrap();
        c.write_all(&get("/v1/self")).unwrap();
        let (status, body) = answer(&mut c);
        assert_eq!(status, 403);
        assert_eq!(body[efield::CODE], "forbidden");
        assert!(body[efield::ERROR]
            .as_str()
            .unwrap()
            .starts_with("this API socket belongs to another container"));
        serving.stop();
        assert_eq!(ep.busy.load(Ordering::SeqCst), 0, "every slot given back");
    }

    /// A container at its share waits in its few queue places (beyond them, `503 busy`);
    /// freed slots serve the queue; what waits past its deadline gets `503`.
    #[test]
    fn a_containers_requests_queue_within_its_share() {
        let (dir, d, _m) = fake_daemon("server-queue", "");
        let d = Arc::new(d);
        let ep = container(&d, &dir, "web");
        let eps = vec![Arc::clone(&ep)];
        let mut a = Admission::default();
        ep.busy.store(MAX_BUSY_PER_CONTAINER, Ordering::SeqCst);
        a.container_workers
            .store(MAX_BUSY_PER_CONTAINER, Ordering::SeqCst);
        let mut waiting: Vec<UnixStream> = (0..MAX_PENDING_PER_CONTAINER + 1)
            .map(|_| pending(&mut a, Peer::Container(Arc::clone(&ep))))
            .collect();
        for c in &mut waiting {
            c.write_all(&get("/v1/self")).unwrap();
        }
        read_all(&mut a, &d, &eps);
        assert_eq!(a.queued.len(), MAX_PENDING_PER_CONTAINER);
        let mut over = waiting.pop().unwrap();
        let (status, body) = answer(&mut over);
        assert_eq!(status, 503);
        assert_eq!(
            body[efield::ERROR],
            "web: 8 of its requests are being served or waiting already; try again"
        );
        assert!(waiting.iter().all(unanswered));

        // Two slots free: the two oldest are served.
        ep.busy.store(MAX_BUSY_PER_CONTAINER - 2, Ordering::SeqCst);
        a.container_workers
            .store(MAX_BUSY_PER_CONTAINER - 2, Ordering::SeqCst);
        {
            // The workers wait for the state until the queue is looked at (so that none has
            // ended and freed its slot for a third).
            let _state = d.state.lock().unwrap();
            a.run_queued(&d);
            assert_eq!(a.queued.len(), MAX_PENDING_PER_CONTAINER - 2);
        }
        for c in waiting.iter_mut().take(2) {
            let (status, body) = answer(c);
            assert_eq!((status, &body["name"]), (200, &json!("web")));
        }
        // The rest wait until their deadline.
        a.expire(Instant::now() + REQUEST_DEADLINE + Duration::from_secs(1));
        assert!(a.queued.is_empty());
        for c in waiting.iter_mut().skip(2) {
            let (status, body) = answer(c);
            assert_eq!(status, 503);
            assert_eq!(
                body[efield::ERROR],
                "web: no worker was free within 5 s; try again"
            );
        }
    }

    /// One followed log per container: a second is refused at once, without a worker.
    #[test]
    fn one_followed_log_per_container() {
        let (dir, d, _m) = fake_daemon("server-stream", "");
        let d = Arc::new(d);
        let ep = container(&d, &dir, "web");
        let mut a = Admission::default();
        ep.streams.store(1, Ordering::SeqCst);
        a.streams.store(1, Ordering::SeqCst);
        let mut c = pending(&mut a, Peer::Container(Arc::clone(&ep)));
        c.write_all(&get("/v1/logs?follow=1")).unwrap();
        read_all(&mut a, &d, &[Arc::clone(&ep)]);
        let (status, body) = answer(&mut c);
        assert_eq!(status, 503);
        assert_eq!(body[efield::ERROR], STREAMS_BUSY);
        assert_eq!(ep.streams.load(Ordering::SeqCst), 1);
        assert!(a.queued.is_empty(), "a followed log never waits");
    }

    /// A peer refused at accept gets its refusal once its request has arrived, whatever it
    /// asked; a broken request of it gets the refusal too.
    #[test]
    fn a_refused_peer_gets_its_refusal_once_its_request_arrives() {
        let (_dir, d, _m) = fake_daemon("server-refused", "");
        let d = Arc::new(d);
        let mut a = Admission::default();
        let refused = || Peer::Refused {
            e: Error::new(Kind::Forbidden, "not yours"),
            of: None,
        };
        let mut c1 = pending(&mut a, refused());
        let mut c2 = pending(&mut a, refused());
        c1.write_all(b"GET /v1/se").unwrap();
        read_all(&mut a, &d, &[]);
        assert!(unanswered(&c1), "not before its request has arrived");
        c1.write_all(b"lf HTTP/1.1\r\n\r\n").unwrap();
        c2.write_all(b"NONSENSE\r\n\r\n").unwrap();
        read_all(&mut a, &d, &[]);
        for c in [&mut c1, &mut c2] {
            let (status, body) = answer(c);
            assert_eq!((status, &body[efield::ERROR]), (403, &json!("not yours")));
        }
        assert!(a.pending.is_empty());
    }
}
