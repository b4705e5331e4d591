//! The admin socket's front door, run by the daemon's main thread: the peer is checked at
//! accept, requests are read without blocking under one deadline each, and only a complete
//! request gets a thread (a bounded number of them). No wake-ups while nothing is pending.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use berth_core::http;
use berth_sys::process::{poll, POLLIN};

use super::Caller;
use crate::daemon::context::{Component, Daemon};
use crate::daemon::error::{Error, Kind};

/// Admin connections still sending their request: at most this many at once; one more
/// closes the oldest, so that a client that sends its request at once is always read.
const MAX_PENDING: usize = 64;
/// The whole request must arrive within this time of the connection (not per read).
const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// Requests being served at once (streams such as `logs -f` and install progress count);
/// beyond that the answer is 503 `busy`.
const MAX_WORKERS: usize = 32;

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
        // The listener, the termination pipe, then every connection still sending its request.
        let mut fds = vec![(listener.as_raw_fd(), POLLIN), (term.as_raw_fd(), POLLIN)];
        fds.extend(admin.pending.iter().map(|p| (p.stream.as_raw_fd(), POLLIN)));
        // Without pending connections nothing is timed: no wake-ups while idle, unless the
        // watchdog wants a heartbeat every interval.
        let beat = d.beat_every().map(|b| Instant::now() + b);
        let timeout = match (admin.next_deadline(), beat) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
        .map(|t| t.saturating_duration_since(Instant::now()).as_millis() as i32 + 1)
        .unwrap_or(-1);
        let rev = poll(&fds, timeout)?;
        d.beat(Component::Api);
        if rev[1] != 0 {
            return Ok(());
        }
        // Readable first (in poll's order), then new connections, then the deadlines.
        let readable: Vec<bool> = rev[2..].iter().map(|r| *r != 0).collect();
        admin.read_ready(d, &readable);
        if rev[0] != 0 {
            while let Ok((stream, _)) = listener.accept() {
                admin.accept(stream);
            }
        }
        admin.expire(Instant::now());
    }
}

struct Pending {
    stream: UnixStream,
    caller: Caller,
    buf: Vec<u8>,
    deadline: Instant,
}

#[derive(Default)]
struct Admission {
    pending: VecDeque<Pending>,
    workers: Arc<AtomicUsize>,
}

impl Admission {
    fn next_deadline(&self) -> Option<Instant> {
        self.pending.iter().map(|p| p.deadline).min()
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
            caller,
            buf: Vec::with_capacity(512),
            deadline: Instant::now() + REQUEST_DEADLINE,
        });
    }

    /// Reads what arrived on the connections poll found readable; complete requests go to a
    /// worker, broken ones get their 400, closed ones go.
    fn read_ready(&mut self, d: &Arc<Daemon>, readable: &[bool]) {
        let mut keep = VecDeque::with_capacity(self.pending.len());
        for (i, mut p) in std::mem::take(&mut self.pending).into_iter().enumerate() {
            if !readable.get(i).copied().unwrap_or(false) {
                keep.push_back(p);
                continue;
            }
            match read_request(&mut p) {
                Ok(None) => keep.push_back(p),
                Ok(Some(req)) => self.dispatch(d, p.caller, p.stream, req),
                Err(Some(why)) => reply_now(p.stream, Error::bad_request(why)),
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
        let spawned = std::thread::Builder::new()
            .name("admin".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                if stream.set_nonblocking(false).is_ok() {
                    super::route(&d, caller, req, stream);
                }
                // Requests are rare; give back what this one allocated (install buffers,
                // JSON) and the mappings of the code it ran.
                berth_sys::process::trim_heap();
                berth_sys::process::release_own_code(false);
                workers.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            self.workers.fetch_sub(1, Ordering::SeqCst);
            log::error!("cannot start a thread for an admin request: {e}");
        }
    }

    /// Connections that did not send a whole request in time are closed.
    fn expire(&mut self, now: Instant) {
        self.pending.retain(|p| p.deadline > now);
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
    let _ = stream.write_all(&http::response(
        e.status(),
        "application/json",
        e.to_json().to_string().as_bytes(),
    ));
}
