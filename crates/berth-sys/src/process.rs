//! Process plumbing for the shim and the daemon: fork, pipes, poll, signals, wait.
//! Thin wrappers: each returns `io::Result` with the kernel's errno.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A pipe; both ends close-on-exec.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds points to two writable ints, as pipe2 requires.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 succeeded, so both fds are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

pub enum Fork {
    Parent(libc::pid_t),
    Child,
}

/// fork(2), for a single-threaded process only: a child of a multi-threaded one could find a
/// lock (malloc's, the logger's) held by a thread that does not exist in it. Refused with
/// an error when this process has more than one thread.
pub fn fork() -> io::Result<Fork> {
    let threads = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse::<u32>().ok())
        });
    if threads != Some(1) {
        return Err(io::Error::other(format!(
            "fork refused: the process has {} threads, not one",
            threads.map_or("an unknown number of".to_string(), |t| t.to_string())
        )));
    }
    // SAFETY: single-threaded (checked above, and only this thread could start another):
    // the child inherits no lock held by another thread.
    unsafe { fork_unchecked() }
}

/// fork(2) without the check.
///
/// # Safety
/// In a multi-threaded process the child may only call async-signal-safe functions until
/// it execs or exits.
unsafe fn fork_unchecked() -> io::Result<Fork> {
    // SAFETY: the caller upholds the contract above.
    match cvt(unsafe { libc::fork() })? {
        0 => Ok(Fork::Child),
        pid => Ok(Fork::Parent(pid)),
    }
}

pub fn setsid() -> io::Result<()> {
    // SAFETY: setsid has no memory-safety preconditions.
    cvt(unsafe { libc::setsid() }).map(|_| ())
}

pub fn dup2(from: RawFd, to: RawFd) -> io::Result<()> {
    // SAFETY: dup2 only manipulates the fd table; invalid fds give EBADF.
    cvt(unsafe { libc::dup2(from, to) }).map(|_| ())
}

pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd we hold; invalid fds give EBADF.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) }).map(|_| ())
}

/// Clears close-on-exec so `fd` survives into an exec'd program.
pub fn clear_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd we hold; invalid fds give EBADF.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }).map(|_| ())
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

pub fn getpid() -> libc::pid_t {
    // SAFETY: getpid cannot fail.
    unsafe { libc::getpid() }
}

pub fn kill(pid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: kill has no memory-safety preconditions.
    cvt(unsafe { libc::kill(pid, sig) }).map(|_| ())
}

/// True if a process with this pid exists (it may be a zombie).
pub fn alive(pid: libc::pid_t) -> bool {
    pid > 0
        && (kill(pid, 0).is_ok() || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// Immediately ends the process without running destructors or atexit handlers (for forked
/// children and for fault injection).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and has no preconditions.
    unsafe { libc::_exit(code) }
}

/// How a child ended.
/// Seconds since the epoch, by the system clock (0 if it is set before 1970): the time
/// berth records (starts, exits, kills, fetches).
pub fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// CLOCK_REALTIME in nanoseconds since the epoch (0 for a clock before 1970): the clock a
/// container's payload reads, so the steps of a traced start line up with it.
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// CLOCK_MONOTONIC in seconds: the clock of durations that must not follow the wall clock
/// when NTP or the operator sets it (update locks); it counts from the boot and is the same
/// for every process of it.
pub fn mono_s() -> u64 {
    monotonic_ns() / 1_000_000_000
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of `perf record -k mono`, which berth-bench
/// lines up with the CLOCK_REALTIME stamps of a traced start.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Exited(i32),
    Signaled(i32),
}

/// waitpid; `None` if `nohang` and the child is still running.
pub fn waitpid(pid: libc::pid_t, nohang: bool) -> io::Result<Option<ExitStatus>> {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, if nohang { libc::WNOHANG } else { 0 }) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Ok(None);
        }
        return Ok(Some(if libc::WIFEXITED(status) {
            ExitStatus::Exited(libc::WEXITSTATUS(status))
        } else {
            ExitStatus::Signaled(libc::WTERMSIG(status))
        }));
    }
}

/// poll(2) over `fds` (fd, events); returns the revents, in order. `timeout_ms` < 0 waits
/// forever. EINTR returns all-zero revents so the caller re-checks its state.
pub fn poll(fds: &[(RawFd, i16)], timeout_ms: i32) -> io::Result<Vec<i16>> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&(fd, events)| libc::pollfd {
            fd,
            events,
            revents: 0,
        })
        .collect();
    // SAFETY: p is a valid array of p.len() pollfd structs.
    let r = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![0; fds.len()]);
        }
        return Err(e);
    }
    Ok(p.iter().map(|p| p.revents).collect())
}

/// `cmd`'s process gets SIGKILL when the thread that spawns it dies (the daemon killed
/// mid-request): a helper never outlives the daemon that waits for it.
pub fn kill_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs in the forked child before exec and makes one raw syscall.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

pub const POLLIN: i16 = libc::POLLIN;
pub const POLLOUT: i16 = libc::POLLOUT;
pub const POLLHUP: i16 = libc::POLLHUP;
pub const POLLERR: i16 = libc::POLLERR;
/// The peer closed its end (Linux ≥ 2.6.17).
pub const POLLRDHUP: i16 = libc::POLLRDHUP;

static SIGCHLD_PIPE: AtomicI32 = AtomicI32::new(-1);

/// Writes one byte to `fd` from a signal handler, keeping the interrupted code's errno.
fn signal_wake(fd: RawFd) {
    if fd < 0 {
        return;
    }
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life.
    let errno = unsafe { libc::__errno_location() };
    // SAFETY: reading and restoring an int through that valid pointer.
    let saved = unsafe { *errno };
    let b = 1u8;
    // SAFETY: write(2) is async-signal-safe; the buffer is a valid byte. A full pipe
    // (EAGAIN) is fine: one pending byte is enough to wake the loop.
    unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    // SAFETY: as above.
    unsafe { *errno = saved };
}

extern "C" fn on_sigchld(_: libc::c_int) {
    signal_wake(SIGCHLD_PIPE.load(Ordering::Relaxed));
}

/// Turns SIGCHLD into a readable byte on the returned (non-blocking) fd, so a poll loop can
/// wait for children without a timeout. Call once per process.
pub fn sigchld_pipe() -> io::Result<OwnedFd> {
    let (r, w) = pipe()?;
    set_nonblocking(r.as_raw_fd())?;
    set_nonblocking(w.as_raw_fd())?;
    SIGCHLD_PIPE.store(w.as_raw_fd(), Ordering::Relaxed);
    // The handler writes to it for the rest of the process's life.
    std::mem::forget(w);
    // SAFETY: a zeroed sigaction is a valid starting point; we set the handler and flags.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = on_sigchld as *const () as usize;
    sa.sa_flags = libc::SA_RESTART | libc::SA_NOCLDSTOP;
    // SAFETY: sa is fully initialised; the handler only calls async-signal-safe write(2).
    cvt(unsafe { libc::sigaction(libc::SIGCHLD, &sa, std::ptr::null_mut()) })?;
    Ok(r)
}

/// Ignores SIGPIPE so writes to closed sockets return EPIPE instead of killing us.
pub fn ignore_sigpipe() {
    // SAFETY: setting a signal to SIG_IGN has no preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// Restores default dispositions for signals a child should not inherit as ignored.
pub fn default_signals() {
    for s in [libc::SIGPIPE, libc::SIGCHLD, libc::SIGTERM, libc::SIGINT] {
        // SAFETY: restoring SIG_DFL has no preconditions.
        unsafe { libc::signal(s, libc::SIG_DFL) };
    }
}

/// Makes SIGTERM and SIGINT readable on the returned fd (a byte per signal), for a poll loop.
pub fn termination_pipe() -> io::Result<OwnedFd> {
    static TERM_PIPE: AtomicI32 = AtomicI32::new(-1);
    extern "C" fn on_term(_: libc::c_int) {
        signal_wake(TERM_PIPE.load(Ordering::Relaxed));
    }
    let (r, w) = pipe()?;
    set_nonblocking(w.as_raw_fd())?;
    TERM_PIPE.store(w.as_raw_fd(), Ordering::Relaxed);
    std::mem::forget(w);
    for s in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: zeroed sigaction then handler set; handler is async-signal-safe.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_term as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        // SAFETY: as above.
        cvt(unsafe { libc::sigaction(s, &sa, std::ptr::null_mut()) })?;
    }
    Ok(r)
}

/// Sets the calling thread's name as seen in /proc (max 15 bytes).
pub fn set_process_name(name: &str) {
    let mut buf = [0u8; 16];
    let n = name.len().min(15);
    buf[..n].copy_from_slice(&name.as_bytes()[..n]);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes from buf.
    unsafe { libc::prctl(libc::PR_SET_NAME, buf.as_ptr() as libc::c_ulong, 0, 0, 0) };
}

/// Opens /dev/null read-write.
pub fn dev_null() -> io::Result<OwnedFd> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    Ok(f.into())
}

/// Closes every descriptor above 2 except those in `keep` (a forked child that must not hold
/// its parent's pipes and sockets open).
pub fn close_fds_except(keep: &[RawFd]) {
    let fds: Vec<RawFd> = match std::fs::read_dir("/proc/self/fd") {
        Ok(d) => d
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
        Err(_) => (3..1024).collect(),
    };
    for fd in fds {
        if fd > 2 && !keep.contains(&fd) {
            // SAFETY: closing an fd number; the caller owns the process's descriptor table
            // (it is a freshly forked child) and no Rust object will use these fds again.
            unsafe { libc::close(fd) };
        }
    }
}

/// Takes an exclusive advisory lock on all of `f` (open for writing) without waiting; false if
/// another process holds it. A POSIX record lock, the process's own: released when the
/// process closes any descriptor of the file or dies, and never inherited by a child it
/// forks (a `flock` lock is the open file's, and a child forked just before the holder was
/// killed, not yet at its exec, would keep it and refuse the next daemon).
pub fn try_lock(f: &std::fs::File) -> io::Result<bool> {
    // SAFETY: all-zero is a valid `struct flock`; the fields set below make it a write lock
    // from offset 0 to the end, whatever the file's size.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = libc::F_WRLCK as _;
    l.l_whence = libc::SEEK_SET as _;
    // SAFETY: fcntl on an fd owned by `f`, which outlives the call, with a valid `flock`.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &l) };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// The processes of the pid namespace that `init` (a host pid) is PID 1 of, except `init`
/// itself: a container's payload and its children. Reads `<proc_root>/*/ns/pid`.
pub fn pid_namespace_members(proc_root: &std::path::Path, init: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(ns) = std::fs::read_link(proc_root.join(init.to_string()).join("ns/pid")) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|&pid| pid != init)
        .filter(|pid| {
            std::fs::read_link(proc_root.join(pid.to_string()).join("ns/pid"))
                .is_ok_and(|n| n == ns)
        })
        .collect()
}

/// One malloc arena for the whole process: glibc otherwise gives each thread that allocates
/// its own arena and keeps it (and its pages) after the thread ends, so a daemon that ran
/// threads for ten containers stays larger after they stop. A no-op elsewhere.
pub fn single_malloc_arena() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes allocator tuning; M_ARENA_MAX = -8 in glibc's malloc.h.
    unsafe {
        libc::mallopt(-8, 1);
    }
}

/// Starts a detached thread named `name` with a stack of `stack` bytes running `f`. Every
/// long-lived thread of berth starts here, so that the binary holds one instance of std's
/// thread-start code (a closure passed to `Builder::spawn` gets its own each).
pub fn spawn_thread(
    name: String,
    stack: usize,
    f: Box<dyn FnOnce() + Send + 'static>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(name)
        .stack_size(stack)
        .spawn(f)
        .map(drop)
}

/// Returns freed heap memory to the kernel (glibc's malloc_trim). A no-op elsewhere.
pub fn trim_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Hands back the pages of code and read-only data that the process maps but does not use
/// while idle, so that code which ran once does not stay resident in a daemon that is idle
/// almost all the time. Two kinds of mappings, both read-only and never written:
/// - this executable's own: with `evict` (after start-up: configuration and state parsing,
///   reconciliation will not run again) its pages are paged out (MADV_PAGEOUT, Linux ≥ 5.4;
///   MADV_DONTNEED before); without (after a request) only the process's mappings are dropped
///   (MADV_DONTNEED) and the pages stay in the page cache, so the next request faults them
///   back in cheaply;
/// - the shared libraries' (libc, the dynamic loader, libgcc_s): only the process's mappings
///   are dropped (MADV_DONTNEED), never the pages, which other processes use. The kernel
///   maps library code 64 KiB around each fault (fault-around), so a daemon that touched a
///   little of libc in many places maps most of it: its RSS counts 1.2 MiB of libc that is
///   the page cache's anyway. Dropped, RSS says what the daemon uses since it last woke;
///   pages only it used become reclaimable like any unmapped page-cache page.
///
/// Returns the bytes advised.
pub fn release_own_code(evict: bool) -> usize {
    const MADV_PAGEOUT: libc::c_int = 21;
    let mut total = 0;
    for &(a, b, own) in code_ranges() {
        let addr = a as *mut libc::c_void;
        let mut done = false;
        if evict && own {
            // SAFETY: [a, b) is a never-written, read-only mapping of our executable; paging
            // it out only makes later accesses fault the unchanged file pages back in.
            done = unsafe { libc::madvise(addr, b - a, MADV_PAGEOUT) } == 0;
        }
        if !done {
            // SAFETY: as above, or a never-written read-only mapping of a shared library;
            // MADV_DONTNEED on a never-written private file mapping drops our page-table
            // entries, and the pages (still in the page cache) fault back in unchanged.
            unsafe { libc::madvise(addr, b - a, libc::MADV_DONTNEED) };
        }
        total += b - a;
    }
    total
}

/// Finds the ranges [`release_own_code`] releases, once: call it while no other thread can
/// be loading a library (a mapping seen half-way through `dlopen` may later hold a
/// library's data). Libraries loaded after it are not released.
pub fn find_code_ranges() {
    code_ranges();
}

/// The read-only, never-written file mappings (start, end, of our own executable) of the
/// executable and the shared objects loaded when first called, from /proc/self/smaps (they
/// stay as they are while mapped: no library is unloaded) so that releasing them again
/// costs only the madvise calls.
fn code_ranges() -> &'static [(usize, usize, bool)] {
    static RANGES: std::sync::OnceLock<Vec<(usize, usize, bool)>> = std::sync::OnceLock::new();
    RANGES.get_or_init(|| {
        let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
            return Vec::new();
        };
        let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
            return Vec::new();
        };
        code_ranges_of(&smaps, &exe)
    })
}

/// `libc.so.6`, `ld-linux-x86-64.so.2`, `liblxc.so`: a shared object's file name.
fn is_shared_object(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or("");
    name.ends_with(".so") || name.contains(".so.")
}

/// [`code_ranges`] of an smaps text, for the executable at `exe`.
fn code_ranges_of(smaps: &str, exe: &std::path::Path) -> Vec<(usize, usize, bool)> {
    // (start, end, perms, path, anonymous kB) of every mapping.
    let mut maps: Vec<(usize, usize, String, String, u64)> = Vec::new();
    for line in smaps.lines() {
        let mut f = line.split_whitespace();
        let Some(first) = f.next() else { continue };
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                let perms = f.next().unwrap_or("").to_string();
                let path = f.nth(3).unwrap_or("").to_string();
                maps.push((a, b, perms, path, 0));
                continue;
            }
        }
        if first == "Anonymous:" {
            if let (Some(m), Some(kb)) = (maps.last_mut(), f.next().and_then(|v| v.parse().ok())) {
                m.4 = kb;
            }
        }
    }
    // Files with code mapped (r-xp): the executable and loaded shared objects, not a data
    // file that happens to be named like one (ld.so.cache, which the loader maps only for
    // a dlopen's while).
    let loaded: std::collections::BTreeSet<String> = maps
        .iter()
        .filter(|m| m.2 == "r-xp")
        .map(|m| m.3.clone())
        .collect();
    maps.into_iter()
        // Only read-only, private file mappings with no page ever written: code, and
        // read-only data other than RELRO (the GOT and .data.rel.ro hold relocations
        // written at load time: dropping those pages would bring back unrelocated bytes).
        .filter(|(_, _, perms, path, anon)| {
            (perms == "r-xp" || perms == "r--p") && *anon == 0 && path.starts_with('/')
        })
        .map(|(a, b, _, path, _)| (a, b, std::path::Path::new(&path) == exe, path))
        // Our executable and shared objects only: they stay mapped for the process's life.
        // A data file someone maps for a moment (liblxc reads configurations through mmap)
        // is gone later, and its addresses may hold a heap or a stack by then: dropping
        // those pages would zero live memory.
        .filter(|(_, _, own, path)| *own || (is_shared_object(path) && loaded.contains(path)))
        .map(|(a, b, own, _)| (a, b, own))
        .collect()
}

/// Urgent data: a PSI trigger fired (Linux ≥ 5.2).
pub const POLLPRI: i16 = libc::POLLPRI;

/// The text of `<proc_root>/meminfo`.
pub fn read_meminfo(proc_root: &std::path::Path) -> io::Result<String> {
    std::fs::read_to_string(proc_root.join("meminfo"))
}

/// A pressure-stall trigger on `<proc_root>/pressure/memory` (e.g. `some 150000 1000000`:
/// 150 ms of stall within 1 s). The fd polls POLLPRI when the trigger fires; it lives as long
/// as the fd. Errors: ENOENT (no PSI), EOPNOTSUPP (psi=0 at boot), EPERM, EINVAL.
pub fn psi_memory_trigger(proc_root: &std::path::Path, trigger: &str) -> io::Result<OwnedFd> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(proc_root.join("pressure/memory"))?;
    // The kernel wants the trigger in one write, with its terminating NUL.
    let mut buf = trigger.as_bytes().to_vec();
    buf.push(0);
    let n = f.write(&buf)?;
    if n != buf.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short PSI trigger write",
        ));
    }
    Ok(OwnedFd::from(f))
}

/// A timer on the wall clock (timerfd, `CLOCK_REALTIME`, Linux ≥ 3.0) that also fires when
/// the clock is set (`TFD_TIMER_CANCEL_ON_SET`): a sleep until a time of day that stays
/// right when NTP or the operator moves the clock, with no wake-ups before.
pub struct WallTimer(OwnedFd);

impl WallTimer {
    pub fn new() -> io::Result<WallTimer> {
        // SAFETY: a clock id and flags; the result is a new fd or -1.
        let fd = cvt(unsafe {
            libc::timerfd_create(libc::CLOCK_REALTIME, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK)
        })?;
        // SAFETY: timerfd_create succeeded: the fd is fresh and ours.
        Ok(WallTimer(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Fires at `ms` milliseconds since the epoch (at once if that has passed), or never
    /// (None). Any thread may arm it; the last arming counts.
    pub fn arm(&self, ms: Option<i64>) -> io::Result<()> {
        // All zero would disarm it: a time is at least 1 ns.
        let (sec, nsec) = match ms {
            None => (0, 0),
            Some(m) => (m.max(0) / 1000, m.max(0) % 1000 * 1_000_000 + 1),
        };
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: libc::time_t::try_from(sec).unwrap_or(libc::time_t::MAX),
                tv_nsec: nsec as libc::c_long,
            },
        };
        // SAFETY: a valid timerfd, a valid itimerspec, no old value asked for.
        cvt(unsafe {
            libc::timerfd_settime(
                self.0.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME | libc::TFD_TIMER_CANCEL_ON_SET,
                &spec,
                std::ptr::null_mut(),
            )
        })?;
        Ok(())
    }

    /// Blocks until the timer fires or the clock is set.
    pub fn wait(&self) {
        let fd = self.0.as_raw_fd();
        let _ = poll(&[(fd, POLLIN)], -1);
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into buf; an error (EAGAIN, ECANCELED: the clock
        // was set) only means there is nothing more to take.
        unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    }
}

/// A pidfd of `pid` (Linux ≥ 5.3): signals through it never reach a recycled pid, and it
/// polls readable when the process has exited.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just gave us this fd; we own it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Sends `sig` to the process of a pidfd.
pub fn pidfd_kill(pidfd: &OwnedFd, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: a valid pidfd, a signal number, no siginfo, no flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether this kernel has pidfds (`pidfd_open`, Linux 5.3): asked once, of our own pid.
/// False also where a seccomp filter answers ENOSYS (the old-kernel test mode).
pub fn pidfd_supported() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| pidfd_open(getpid()).is_ok())
}

/// The state letter (field 3) and start time (field 22, clock ticks after boot) of `pid`
/// from `<proc_root>/PID/stat`. A pid and its start time name one process for as long as
/// the machine runs: a recycled pid has a later start (procd and runc check the same).
pub fn stat_start(proc_root: &std::path::Path, pid: libc::pid_t) -> io::Result<(char, u64)> {
    let text = std::fs::read_to_string(proc_root.join(format!("{pid}/stat")))?;
    parse_stat_start(&text).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
}

/// How long `pid` has run, in whole seconds, by the kernel's boot-relative clocks
/// (`<proc_root>/uptime` less the start time in its stat file): NTP or the operator setting
/// the wall clock does not change it, as it would a start date subtracted from now.
pub fn uptime_of(proc_root: &std::path::Path, pid: libc::pid_t) -> Option<u64> {
    let (_, start) = stat_start(proc_root, pid).ok()?;
    let up = std::fs::read_to_string(proc_root.join("uptime")).ok()?;
    let up: u64 = up.split(['.', ' ']).next()?.parse().ok()?;
    Some(up.saturating_sub(start / u64::from(crate::net::clock_ticks())))
}

/// [`stat_start`] of the text of a stat file: "PID (comm) STATE PPID …", where comm may
/// hold spaces and parentheses; the last ')' ends it.
pub fn parse_stat_start(text: &str) -> Option<(char, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    // Fields 4..=21 lie between the state (3) and the start time (22).
    let start = f.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// One process, pinned so that a recycled pid is never signalled in its place: through a
/// pidfd where the kernel has them (Linux ≥ 5.3); elsewhere by its start time, read again
/// just before each signal (the way procd and runc kill by pid).
pub struct Pinned {
    pid: libc::pid_t,
    start: u64,
    pidfd: Option<OwnedFd>,
    proc_root: std::path::PathBuf,
}

impl Pinned {
    /// Pins `pid` as it is now. ESRCH (or ENOENT) when there is no such process.
    pub fn open(proc_root: &std::path::Path, pid: libc::pid_t) -> io::Result<Pinned> {
        let pidfd = match pidfd_open(pid) {
            Ok(fd) => Some(fd),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Err(e),
            // ENOSYS: Linux < 5.3 (or a filter that says so); anything else: no pidfd either.
            Err(_) => None,
        };
        // Read after the pidfd is held: with one, this is surely the pinned process.
        let (_, start) = stat_start(proc_root, pid)?;
        Ok(Pinned {
            pid,
            start,
            pidfd,
            proc_root: proc_root.to_path_buf(),
        })
    }

    /// Pins `pid` by its start time only, as on a kernel without pidfds (the fallback
    /// alone: its tests, and callers that already know pidfds are missing).
    pub fn open_without_pidfd(proc_root: &std::path::Path, pid: libc::pid_t) -> io::Result<Pinned> {
        let (_, start) = stat_start(proc_root, pid)?;
        Ok(Pinned {
            pid,
            start,
            pidfd: None,
            proc_root: proc_root.to_path_buf(),
        })
    }

    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Its start time (field 22 of stat) when pinned.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Whether it is held by a pidfd (else by its start time).
    pub fn has_pidfd(&self) -> bool {
        self.pidfd.is_some()
    }

    /// Sends `sig`: through the pidfd, or to the pid after checking it still has the start
    /// time it had (ESRCH if not: the process is gone and its pid may be another's).
    pub fn signal(&self, sig: libc::c_int) -> io::Result<()> {
        if let Some(fd) = &self.pidfd {
            return pidfd_kill(fd, sig);
        }
        match stat_start(&self.proc_root, self.pid) {
            Ok((_, s)) if s == self.start => kill(self.pid, sig),
            _ => Err(io::Error::from_raw_os_error(libc::ESRCH)),
        }
    }

    /// Whether it has exited (a zombie has: its memory is freed).
    pub fn exited(&self) -> bool {
        if let Some(fd) = &self.pidfd {
            return poll(&[(fd.as_raw_fd(), POLLIN)], 0).is_ok_and(|r| r[0] != 0);
        }
        match stat_start(&self.proc_root, self.pid) {
            Ok((state, s)) => s != self.start || state == 'Z' || state == 'X',
            Err(_) => true,
        }
    }

    /// Waits until it has exited, at most `timeout` (None: no limit); whether it has. With a
    /// pidfd it sleeps in poll(); without, it looks every `every`.
    pub fn wait_exit(
        &self,
        timeout: Option<std::time::Duration>,
        every: std::time::Duration,
    ) -> bool {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            match &self.pidfd {
                Some(fd) => {
                    let ms = left.map_or(-1, |l| l.as_millis().min(i32::MAX as u128) as i32);
                    match poll(&[(fd.as_raw_fd(), POLLIN)], ms) {
                        Ok(r) if r[0] != 0 => return true,
                        Ok(_) => {}
                        Err(_) => return self.exited(),
                    }
                }
                None => {
                    if self.exited() {
                        return true;
                    }
                    std::thread::sleep(left.map_or(every, |l| l.min(every)));
                }
            }
            if left.is_some_and(|l| l.is_zero()) {
                return self.exited();
            }
        }
    }

    /// The pidfd, for a poll of one's own (None without pidfds).
    pub fn pidfd(&self) -> Option<&OwnedFd> {
        self.pidfd.as_ref()
    }
}

/// How a process ended, read through its pidfd (no need to be its parent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidfdExit {
    pub status: ExitStatus,
    /// Whether a killing signal dumped core (WCOREDUMP).
    pub core_dumped: bool,
}

/// `struct pidfd_info` up to `exit_code` (PIDFD_INFO_SIZE_VER0, 64 bytes).
#[repr(C)]
#[derive(Default)]
struct PidfdInfo {
    mask: u64,
    cgroupid: u64,
    ids: [u32; 11],
    exit_code: i32,
}

const PIDFD_GET_INFO: libc::Ioctl = libc::_IOWR::<PidfdInfo>(0xFF, 11);
const PIDFD_INFO_EXIT: u64 = 1 << 3;

/// The wait status of the process behind `pidfd` once it has exited, even after another
/// process reaped it (PIDFD_GET_INFO with PIDFD_INFO_EXIT, Linux ≥ 6.15). `Ok(None)`: it
/// still runs, or the kernel keeps no exit information for it. Older kernels: an error
/// (ENOTTY or EINVAL).
pub fn pidfd_exit(pidfd: &OwnedFd) -> io::Result<Option<PidfdExit>> {
    let mut info = PidfdInfo {
        mask: PIDFD_INFO_EXIT,
        ..Default::default()
    };
    // SAFETY: a valid pidfd and a writable struct of the size the request number encodes.
    let r = unsafe {
        libc::ioctl(
            pidfd.as_raw_fd(),
            PIDFD_GET_INFO,
            &mut info as *mut PidfdInfo,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if info.mask & PIDFD_INFO_EXIT == 0 {
        return Ok(None);
    }
    let s = info.exit_code;
    Ok(Some(PidfdExit {
        status: if libc::WIFEXITED(s) {
            ExitStatus::Exited(libc::WEXITSTATUS(s))
        } else {
            ExitStatus::Signaled(libc::WTERMSIG(s))
        },
        core_dumped: libc::WIFSIGNALED(s) && libc::WCOREDUMP(s),
    }))
}

/// Host pids of the children of `pid` (`/proc/PID/task/PID/children`, or a scan of the
/// parent pids where the kernel lacks that file, in the directory's order).
pub fn children(proc_root: &std::path::Path, pid: libc::pid_t) -> Vec<libc::pid_t> {
    let file = proc_root.join(format!("{pid}/task/{pid}/children"));
    if let Ok(text) = std::fs::read_to_string(file) {
        return text
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
    }
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return Vec::new();
    };
    let mut kids = Vec::new();
    for e in entries.flatten() {
        let Some(p) = e.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        // "PID (comm) STATE PPID …": comm may hold spaces and parentheses; the last ')' ends it.
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
            .and_then(|s| s.parse::<libc::pid_t>().ok());
        if ppid == Some(pid) {
            kids.push(p);
        }
    }
    kids
}

/// Whether `pid` lives in the pid namespace that `init` is PID 1 of (both host pids).
pub fn in_pid_namespace_of(
    proc_root: &std::path::Path,
    init: libc::pid_t,
    pid: libc::pid_t,
) -> bool {
    let ns = |p: libc::pid_t| std::fs::read_link(proc_root.join(p.to_string()).join("ns/pid"));
    matches!((ns(init), ns(pid)), (Ok(a), Ok(b)) if a == b)
}

/// Moves the calling thread into the network namespace of process `pid` (under
/// `proc_root`), for a probe of a container's own loopback. Call it in a helper process:
/// the thread stays there.
pub fn enter_net_namespace(proc_root: &std::path::Path, pid: libc::pid_t) -> io::Result<()> {
    enter_net_namespace_at(&proc_root.join(format!("{pid}/ns/net")))
}

/// Moves the calling thread into the network namespace `ns` (a `/proc/PID/ns/net` or a
/// `/run/netns/NAME` file); the thread stays there.
pub fn enter_net_namespace_at(ns: &std::path::Path) -> io::Result<()> {
    let f = std::fs::File::open(ns)?;
    // SAFETY: `f` is an open namespace file for the duration of the call; setns changes only
    // this thread's namespace.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Close-on-exec, so that no process another test spawns meanwhile keeps an end open.
    fn pipe() -> (RawFd, RawFd) {
        let mut p = [0; 2];
        // SAFETY: `p` has room for the two descriptors pipe2(2) writes.
        assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        (p[0], p[1])
    }

    /// The lock is its holder's: another process cannot take it while the holder lives, and
    /// it is free once the holder is gone though a child the holder forked lives on with the
    /// descriptor (a daemon killed while a fork of it had not yet reached its exec).
    #[test]
    fn a_lock_goes_with_its_holder_not_with_the_holders_forked_child() {
        let path = std::env::temp_dir().join(format!("berth-lock-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        let (keep_r, keep_w) = pipe();
        let (quit_r, quit_w) = pipe();
        let (ready_r, ready_w) = pipe();
        // SAFETY: the child makes only async-signal-safe calls (close, fcntl, fork, read,
        // write, _exit) before it exits: the test harness has other threads.
        let holder = unsafe { libc::fork() };
        assert!(holder >= 0);
        if holder == 0 {
            // SAFETY: as above; every descriptor is the child's own copy.
            unsafe {
                libc::close(keep_w);
                libc::close(quit_w);
                libc::close(ready_r);
                let locked = u8::from(try_lock(&f).unwrap_or(false));
                if libc::fork() == 0 {
                    // The forked child: keeps `f` until the test closes `keep_w`.
                    let mut b = 0u8;
                    libc::read(keep_r, (&mut b as *mut u8).cast(), 1);
                    libc::_exit(0);
                }
                libc::write(ready_w, (&locked as *const u8).cast(), 1);
                let mut b = 0u8;
                libc::read(quit_r, (&mut b as *mut u8).cast(), 1);
                libc::_exit(0);
            }
        }
        // SAFETY: the parent's copies of the child's ends.
        unsafe {
            libc::close(keep_r);
            libc::close(quit_r);
            libc::close(ready_w);
        }
        let mut locked = 0u8;
        // SAFETY: reads one byte into `locked`.
        let n = unsafe { libc::read(ready_r, (&mut locked as *mut u8).cast(), 1) };
        assert_eq!((n, locked), (1, 1), "the holder took the lock");
        let open = || std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let other = open();
        assert!(!try_lock(&other).unwrap(), "taken while its holder lives");
        drop(other);
        // SAFETY: closing our write end lets the holder exit; waitpid reaps it.
        unsafe {
            libc::close(quit_w);
            let mut status = 0;
            assert_eq!(libc::waitpid(holder, &mut status, 0), holder);
        }
        let after = open();
        let free = try_lock(&after).unwrap();
        // SAFETY: lets the forked child exit (it reads end of file).
        unsafe {
            libc::close(keep_w);
            libc::close(ready_r);
        }
        let _ = std::fs::remove_file(&path);
        assert!(
            free,
            "still held after its holder died, by the child it forked"
        );
    }

    #[test]
    fn code_ranges_are_the_never_written_read_only_file_mappings() {
        let smaps = "\
55d0a0000000-55d0a0010000 r--p 00000000 fe:01 10 /usr/bin/berth
Anonymous:             0 kB
55d0a0010000-55d0a0100000 r-xp 00010000 fe:01 10 /usr/bin/berth
Anonymous:             0 kB
55d0a0100000-55d0a0110000 r--p 00100000 fe:01 10 /usr/bin/berth
Anonymous:            52 kB
55d0a0110000-55d0a0112000 rw-p 00110000 fe:01 10 /usr/bin/berth
Anonymous:             8 kB
7f0000000000-7f0000028000 r--p 00000000 fe:01 20 /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
7f0000028000-7f000019d000 r-xp 00028000 fe:01 20 /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
7f00001f1000-7f00001f5000 r--p 001f0000 fe:01 20 /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:            16 kB
7f0000200000-7f0000201000 r--s 00000000 00:05 30 /dev/shm/x
Anonymous:             0 kB
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0 [vdso]
Anonymous:             0 kB
7f0000300000-7f0000301000 r--p 00000000 fe:01 40 /run/berth/lxc/web/config
Anonymous:             0 kB
7f0000400000-7f0000401000 r--p 00000000 fe:01 41 /usr/lib/x86_64-linux-gnu/libsocket.so.notalib/x
Anonymous:             0 kB
7f0000500000-7f0000510000 r--p 00000000 fe:01 42 /etc/ld.so.cache
Anonymous:             0 kB
";
        let r = code_ranges_of(smaps, std::path::Path::new("/usr/bin/berth"));
        assert_eq!(
            r,
            vec![
                (0x55d0a0000000, 0x55d0a0010000, true),
                (0x55d0a0010000, 0x55d0a0100000, true),
                (0x7f0000000000, 0x7f0000028000, false),
                (0x7f0000028000, 0x7f000019d000, false),
            ],
            "RELRO (written), rw, shared, [vdso], data files and a shared-object name without code mapped (ld.so.cache) are never released"
        );
        assert!(is_shared_object("/lib/ld-musl-mipsel-sf.so.1"));
        assert!(is_shared_object("/usr/lib/liblxc.so"));
        assert!(!is_shared_object("/run/berth/lxc/web/config"));
    }

    #[test]
    fn the_wall_timer_fires_at_its_time_and_can_be_moved_from_another_thread() {
        let now = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as i64
        };
        let t = std::sync::Arc::new(WallTimer::new().unwrap());
        let t0 = std::time::Instant::now();
        t.arm(Some(now() + 50)).unwrap();
        t.wait();
        let took = t0.elapsed();
        assert!(took >= std::time::Duration::from_millis(45), "{took:?}");
        // Disarmed, then moved to "now" by another thread: the sleeper wakes.
        t.arm(None).unwrap();
        let t2 = std::sync::Arc::clone(&t);
        let waker = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(30));
            t2.arm(Some(0)).unwrap();
        });
        let t0 = std::time::Instant::now();
        t.wait();
        assert!(t0.elapsed() < std::time::Duration::from_secs(5));
        waker.join().unwrap();
    }

    #[test]
    fn the_uptime_of_a_process_is_counted_from_the_boot_not_the_wall_clock() {
        let me = uptime_of(std::path::Path::new("/proc"), getpid()).expect("our own uptime");
        assert!(me < 24 * 3600, "{me}");
        let d = std::env::temp_dir().join(format!("berth-uptime-{}", getpid()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("uptime"), "1000.57 3000.00\n").unwrap();
        std::fs::create_dir(d.join("7")).unwrap();
        let ticks = 400 * u64::from(crate::net::clock_ticks());
        let stat = format!("7 (a b) S 1 7 7 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 {ticks} 0 0\n");
        std::fs::write(d.join("7/stat"), stat).unwrap();
        assert_eq!(uptime_of(&d, 7), Some(600));
        assert_eq!(uptime_of(&d, 8), None);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn stat_start_reads_state_and_field_22_past_a_comm_with_parentheses() {
        let line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615";
        assert_eq!(parse_stat_start(line), Some(('S', 987654)));
        assert_eq!(parse_stat_start("1 (x) Z 0"), None);
        let (state, start) = stat_start(std::path::Path::new("/proc"), getpid()).unwrap();
        assert!(state == 'R' || state == 'S', "{state}");
        assert!(start > 0);
    }

    #[test]
    fn without_a_pidfd_a_process_is_killed_only_while_its_start_time_matches() {
        let proc = std::path::Path::new("/proc");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as libc::pid_t;
        let p = Pinned::open_without_pidfd(proc, pid).unwrap();
        assert!(!p.has_pidfd());
        assert!(!p.exited());
        // Another start time is another process behind the same pid: never signalled.
        let other = Pinned {
            start: p.start() + 1,
            ..Pinned::open_without_pidfd(proc, pid).unwrap()
        };
        assert_eq!(
            other.signal(libc::SIGKILL).unwrap_err().raw_os_error(),
            Some(libc::ESRCH)
        );
        assert!(other.exited(), "a different start time counts as gone");
        assert!(!p.exited(), "the process must have survived");
        p.signal(libc::SIGKILL).unwrap();
        // Not reaped yet: a zombie has exited.
        let t0 = std::time::Instant::now();
        assert!(p.wait_exit(
            Some(std::time::Duration::from_secs(5)),
            std::time::Duration::from_millis(5)
        ));
        assert!(t0.elapsed() < std::time::Duration::from_secs(5));
        let st = child.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st), Some(9));
        // Gone and reaped: still exited, and a signal finds nothing.
        assert!(p.exited());
        assert!(p.signal(libc::SIGKILL).is_err());
    }

    #[test]
    fn a_pinned_process_times_out_while_it_runs() {
        let proc = std::path::Path::new("/proc");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as libc::pid_t;
        for p in [
            Pinned::open(proc, pid).unwrap(),
            Pinned::open_without_pidfd(proc, pid).unwrap(),
        ] {
            let t0 = std::time::Instant::now();
            assert!(!p.wait_exit(
                Some(std::time::Duration::from_millis(60)),
                std::time::Duration::from_millis(10)
            ));
            assert!(t0.elapsed() >= std::time::Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn fork_wait_and_sigchld() {
        let sig = sigchld_pipe().unwrap();
        // The test harness has threads, so fork() refuses (tested below); the child only
        // calls _exit.
        assert!(fork().is_err(), "fork() in a multi-threaded process");
        // SAFETY: the child only calls _exit.
        match unsafe { fork_unchecked() }.unwrap() {
            Fork::Child => exit_now(7),
            Fork::Parent(pid) => {
                // EINTR (the signal itself) returns zeros: poll again.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
                let mut woke = false;
                while !woke && std::time::Instant::now() < deadline {
                    woke = poll(&[(sig.as_raw_fd(), POLLIN)], 1000).unwrap()[0] & POLLIN != 0;
                }
                assert!(woke, "SIGCHLD must wake the poll loop");
                assert_eq!(waitpid(pid, false).unwrap(), Some(ExitStatus::Exited(7)));
                assert!(!alive(pid));
            }
        }
        assert!(alive(getpid()));
    }

    #[test]
    fn a_process_end_is_read_through_its_pidfd_and_children_are_found() {
        if !pidfd_supported() {
            // A kernel before 5.3, or the whole run under scripts/oldkernel.sh.
            crate::skip::record(
                "kernel pidfd",
                "process::a_process_end_is_read_through_its_pidfd: no pidfd_open (Linux 5.3)",
            );
            return;
        }
        // The test harness has threads: a plain process, not fork(). It may dump core (a file
        // in its own directory, removed below).
        let dir = std::env::temp_dir().join(format!("berth-core-{}", getpid()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = std::process::Command::new("sh")
            .args(["-c", "ulimit -c unlimited; sleep 0.3 & wait; kill -ABRT $$"])
            .current_dir(&dir)
            .spawn()
            .unwrap();
        let pid = child.id() as libc::pid_t;
        let fd = pidfd_open(pid).unwrap();
        // The shell's one child (sleep), as the shim finds a container's payload.
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(250);
        let mut kids = Vec::new();
        while kids.is_empty() && std::time::Instant::now() < deadline {
            kids = children(std::path::Path::new("/proc"), pid);
        }
        assert_eq!(kids.len(), 1, "{kids:?}");
        let running = pidfd_exit(&fd);
        let st = child.wait().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(st.signal(), Some(libc::SIGABRT));
        // Linux 6.15 keeps the wait status behind the pidfd; decided by the version, so that
        // a broken ioctl fails here instead of passing as a skip.
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut v = release
            .split(|c: char| !c.is_ascii_digit())
            .map(|n| n.parse::<u32>().unwrap_or(0));
        if (v.next().unwrap_or(0), v.next().unwrap_or(0)) < (6, 15) {
            crate::skip::record(
                "kernel",
                "process::a_process_end_is_read_through_its_pidfd: PIDFD_INFO_EXIT (Linux 6.15)",
            );
            return;
        }
        assert_eq!(running.unwrap(), None, "known before the end");
        let e = pidfd_exit(&fd).unwrap().expect("the exit is kept");
        assert_eq!(e.status, ExitStatus::Signaled(libc::SIGABRT));
        // Whatever this host's core_pattern made of it, both ways of asking agree.
        assert_eq!(e.core_dumped, st.core_dumped());
    }

    #[test]
    fn without_a_children_file_the_parent_pids_are_scanned() {
        let root = std::env::temp_dir().join(format!("berth-proc-{}", getpid()));
        for (pid, stat) in [
            ("7", "7 (init.lxc) S 1 7 7 0"),
            ("8", "8 (a) b) (c) S 7 8 8 0"),
            ("9", "9 (x) S 8 9 9 0"),
            ("12", "12 (y) R 7 12 12 0"),
        ] {
            std::fs::create_dir_all(root.join(pid)).unwrap();
            std::fs::write(root.join(pid).join("stat"), stat).unwrap();
        }
        std::fs::create_dir_all(root.join("self")).unwrap();
        let mut kids = children(&root, 7);
        kids.sort_unstable();
        assert_eq!(kids, vec![8, 12]);
        assert_eq!(children(&root, 8), vec![9]);
        assert!(children(&root, 9).is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn releasing_own_code_keeps_the_process_working() {
        // Dropped mappings of code and read-only data fault back in; relocated data (RELRO)
        // is never touched, so formatting (vtables, string tables) still works afterwards.
        assert!(release_own_code(false) > 0);
        let v: Vec<String> = (0..100).map(|i| format!("{i:?}")).collect();
        assert_eq!(v[42], "42");
        assert!(release_own_code(true) > 0);
        assert_eq!(format!("{:?}", Some("x")), "Some(\"x\")");
    }
}
