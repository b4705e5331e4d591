//! Crash archives, the pure parts: report ids (sortable by time), which archives go when the
//! caps are exceeded, a ustar writer, the container a crashing process belongs to (from its
//! `/proc/PID/cgroup`), and the names of the core files the core handler leaves for the daemon.
//! The daemon (`daemon/ops/reports.rs`) gathers the members and writes the files.

use std::io::{self, Read, Write};

use crate::error::Error;

/// What made a report; the last word of its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Ended with a non-zero exit code.
    Exit,
    /// Killed by a signal (a crash, or the OOM killer's SIGKILL).
    Signal,
    /// Its start failed before the payload ran.
    Start,
    /// Restarted too often: the supervisor gave up.
    CrashLoop,
    HealthFailed,
    /// The memory guard killed in it.
    Guard,
    /// The daemon itself panicked.
    Panic,
    /// An upgrade did not prove itself and was rolled back.
    Upgrade,
    /// The kernel's OOM killer killed in it.
    Oom,
}

impl Reason {
    pub const ALL: &'static [Reason] = &[
        Reason::Exit,
        Reason::Signal,
        Reason::Start,
        Reason::CrashLoop,
        Reason::HealthFailed,
        Reason::Guard,
        Reason::Panic,
        Reason::Upgrade,
        Reason::Oom,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Exit => "exit",
            Reason::Signal => "signal",
            Reason::Start => "start",
            Reason::CrashLoop => "crashloop",
            Reason::HealthFailed => "health",
            Reason::Guard => "guard",
            Reason::Panic => "panic",
            Reason::Upgrade => "upgrade",
            Reason::Oom => "oom",
        }
    }

    pub fn parse(s: &str) -> Option<Reason> {
        Reason::ALL.iter().copied().find(|r| r.as_str() == s)
    }
}

/// The directory below `reports/` that holds the daemon's own (panic) reports: no package
/// can have this name (package names have no `_`).
pub const DAEMON_DIR: &str = "_daemon";

/// The extension of a gzip-compressed archive, and of a plain one (no gzip on the device).
pub const EXT_GZ: &str = ".tar.gz";
pub const EXT_TAR: &str = ".tar";
/// The summary kept beside each archive (uncompressed, so `list` and `show` need no gzip).
pub const EXT_SUMMARY: &str = ".json";

/// UNIX seconds as `YYYYMMDDTHHMMSSZ` (ISO 8601 basic, UTC): ids sort by time as strings.
pub fn stamp(secs: u64) -> String {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let (y, m, d) = crate::date::civil(days);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A report's id: `<stamp>-<container>-<reason>`, and `.N` after it for the N-th report of
/// the same container and reason within one second (`taken` says which ids exist).
pub fn new_id(secs: u64, container: &str, reason: Reason, taken: &dyn Fn(&str) -> bool) -> String {
    let base = format!("{}-{container}-{}", stamp(secs), reason.as_str());
    if !taken(&base) {
        return base;
    }
    (2..)
        .map(|n| format!("{base}.{n}"))
        .find(|id| !taken(id))
        .unwrap_or(base)
}

/// An id as the API and the CLI accept it: the form `new_id` makes, nothing that could
/// name another path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Id {
    pub stamp: String,
    pub container: String,
    pub reason: Reason,
}

pub fn parse_id(id: &str) -> Result<Id, Error> {
    let bad = |why: &str| Err(Error::invalid(format!("{id:?} is not a report id ({why})")));
    if id.len() > 128
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
    {
        return bad("letters, digits, '-', '.' and '_' only");
    }
    let Some((stamp, rest)) = id.split_once('-') else {
        return bad("no time");
    };
    let st = stamp.as_bytes();
    let stamp_ok = st.len() == 16
        && st[8] == b'T'
        && st[15] == b'Z'
        && st[..8].iter().chain(&st[9..15]).all(u8::is_ascii_digit);
    if !stamp_ok {
        return bad("expected YYYYMMDDTHHMMSSZ-CONTAINER-REASON");
    }
    // An optional `.N` ends it.
    let rest = match rest.rsplit_once('.') {
        Some((r, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => r,
        Some(_) => return bad("bad sequence number"),
        None => rest,
    };
    let Some((container, reason)) = rest.rsplit_once('-') else {
        return bad("no reason");
    };
    let Some(reason) = Reason::parse(reason) else {
        return bad("unknown reason");
    };
    let container_ok = container == DAEMON_DIR || crate::name::Name::parse(container).is_ok();
    if !container_ok {
        return bad("bad container name");
    }
    Ok(Id {
        stamp: stamp.to_string(),
        container: container.to_string(),
        reason,
    })
}

/// The caps of `[reports]` in berth.toml.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub max_per_container: u32,
    /// Bytes of archives (and their summaries) in all, on flash.
    pub max_total_size: u64,
    /// A larger core is cut at this size (and the summary says so).
    pub max_core_size: u64,
    /// Whether core files are collected at all (the device policy's word).
    pub cores: bool,
}

impl Default for Caps {
    fn default() -> Caps {
        Caps {
            max_per_container: 5,
            max_total_size: 4 << 20,
            max_core_size: 1 << 20,
            cores: false,
        }
    }
}

/// One stored report, as eviction sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub id: String,
    /// Its directory below `reports/`: a container's name, or [`DAEMON_DIR`].
    pub dir: String,
    /// Bytes on flash: the archive and its summary.
    pub size: u64,
}

/// The reports to delete so that the caps hold: per directory the oldest beyond
/// `max_per_container`, then overall the oldest until the total fits. `keep` (the report
/// just written) is never chosen: an event's archive deleted at once would help nobody, and
/// the core cap keeps one archive well below the total.
///
/// `stored` is sorted by id (ids begin with their time: sorted as strings), as the daemon's
/// listing gives it; sorting again here would cost the device binary another sort. Oldest
/// first by the clock at `now`: a report dated ahead of `now` was written before the clock
/// was set back, so it is older than every one dated at or before `now` (written since).
pub fn evict(stored: &[Stored], caps: &Caps, keep: &str, now: u64) -> Vec<String> {
    let now = stamp(now + 1);
    let behind = stored.partition_point(|s| s.id <= now);
    let all: Vec<&Stored> = stored[behind..].iter().chain(&stored[..behind]).collect();
    let mut out: Vec<String> = Vec::new();
    let mut dirs: Vec<&str> = Vec::new();
    for s in &all {
        if !dirs.contains(&s.dir.as_str()) {
            dirs.push(&s.dir);
        }
    }
    for dir in dirs {
        let mine: Vec<&&Stored> = all.iter().filter(|s| s.dir == dir).collect();
        let extra = mine.len().saturating_sub(caps.max_per_container as usize);
        out.extend(
            mine.iter()
                .filter(|s| s.id != keep)
                .take(extra)
                .map(|s| s.id.clone()),
        );
    }
    let mut total: u64 = all
        .iter()
        .filter(|s| !out.contains(&s.id))
        .map(|s| s.size)
        .sum();
    for s in &all {
        if total <= caps.max_total_size {
            break;
        }
        if s.id != keep && !out.contains(&s.id) {
            total -= s.size;
            out.push(s.id.clone());
        }
    }
    out
}

/// The container a process belongs to, from its `/proc/PID/cgroup`: the path segment after
/// berth's cgroup parent, for a process of the container's payload (`<parent>/<name>/payload`
/// and below, in any hierarchy, also below a delegated subtree; `<parent>/<name>` itself and
/// below for a container started before the budget had leaves). berth's own processes for
/// a container (its shim and helpers in `berth/`, its LXC monitor in `monitor/` or
/// `lxc.pivot/`, or `<parent>.monitor/<name>` before) are no process of the container.
pub fn container_of_cgroup(proc_cgroup: &str, parent: &str) -> Option<String> {
    use crate::cgroup::{HELPERS_LEAF, MONITOR_LEAF, PIVOT_LEAF};
    for line in proc_cgroup.lines() {
        // `ID:CONTROLLERS:PATH`; the path may itself hold ':'.
        let Some(path) = line.splitn(3, ':').nth(2) else {
            continue;
        };
        let mut segs = path.split('/');
        while let Some(s) = segs.next() {
            if s == parent {
                match (segs.next(), segs.next()) {
                    (_, Some(HELPERS_LEAF | MONITOR_LEAF | PIVOT_LEAF)) => return None,
                    (Some(n), _) if crate::name::Name::parse(n).is_ok() => {
                        return Some(n.to_string())
                    }
                    _ => break,
                }
            }
        }
    }
    None
}

/// A core file the handler leaves in `<run>/cores/<container>/`: `<secs>-<pid>-<signal>.core`,
/// or `…-truncated.core` when it was cut at the cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreName {
    pub secs: u64,
    pub pid: i32,
    pub signal: i32,
    pub truncated: bool,
}

impl CoreName {
    pub fn file_name(&self) -> String {
        format!(
            "{}-{}-{}{}.core",
            self.secs,
            self.pid,
            self.signal,
            if self.truncated { "-truncated" } else { "" }
        )
    }

    pub fn parse(s: &str) -> Option<CoreName> {
        let s = s.strip_suffix(".core")?;
        let (s, truncated) = match s.strip_suffix("-truncated") {
            Some(s) => (s, true),
            None => (s, false),
        };
        let mut it = s.splitn(3, '-');
        Some(CoreName {
            secs: it.next()?.parse().ok()?,
            pid: it.next()?.parse().ok()?,
            signal: it.next()?.parse().ok()?,
            truncated,
        })
    }
}

/// Signals whose default action dumps core (signal(7)), on the architectures berth runs on.
pub fn dumps_core(signal: i32) -> bool {
    // SIGQUIT SIGILL SIGTRAP SIGABRT SIGBUS SIGFPE SIGSEGV SIGXCPU SIGXFSZ SIGSYS (x86, ARM;
    // MIPS numbers SIGBUS 10 and SIGSYS 12, also covered).
    matches!(signal, 3 | 4 | 5 | 6 | 7 | 8 | 10 | 11 | 12 | 24 | 25 | 31)
}

/// A ustar archive written member by member: each a 512-byte header and the data padded to
/// 512 bytes, two zero blocks at the end (POSIX.1-1988 ustar, as GNU and busybox tar read it).
pub struct TarWriter<W: Write> {
    out: W,
    mtime: u64,
}

const BLOCK: usize = 512;

impl<W: Write> TarWriter<W> {
    /// Every member gets `mtime` (seconds since the epoch), mode 0600, owner root.
    pub fn new(out: W, mtime: u64) -> TarWriter<W> {
        TarWriter { out, mtime }
    }

    /// A member with the bytes `data`.
    pub fn append(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        self.append_reader(name, data.len() as u64, &mut &data[..])
    }

    /// A member of `size` bytes read from `r`; a reader that ends early is padded with
    /// zeros (a file that shrank while it was read) so the archive stays readable.
    pub fn append_reader(&mut self, name: &str, size: u64, r: &mut dyn Read) -> io::Result<()> {
        let header = header(name, size, self.mtime)?;
        self.out.write_all(&header)?;
        let mut left = size;
        let mut buf = [0u8; 8192];
        while left > 0 {
            let want = buf.len().min(left as usize);
            let n = match r.read(&mut buf[..want]) {
                Ok(0) => {
                    buf[..want].fill(0);
                    want
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.out.write_all(&buf[..n])?;
            left -= n as u64;
        }
        let pad = (BLOCK - (size as usize % BLOCK)) % BLOCK;
        self.out.write_all(&[0u8; BLOCK][..pad])
    }

    /// The end-of-archive marker; gives the writer back.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&[0u8; 2 * BLOCK])?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// A ustar header block for a regular file.
fn header(name: &str, size: u64, mtime: u64) -> io::Result<[u8; BLOCK]> {
    let bad = |m: &str| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("tar member {name}: {m}"),
        )
    };
    let (prefix, base) = split_name(name).ok_or_else(|| bad("name too long"))?;
    // 11 octal digits: 8 GiB, far beyond any member here.
    if size >= 1 << 33 {
        return Err(bad("too large"));
    }
    let mut h = [0u8; BLOCK];
    h[..base.len()].copy_from_slice(base.as_bytes());
    octal(&mut h[100..108], 0o600);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], mtime.min(0o77777777777));
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[265..269].copy_from_slice(b"root");
    h[297..301].copy_from_slice(b"root");
    h[345..345 + prefix.len()].copy_from_slice(prefix.as_bytes());
    // The checksum is taken with its own field as eight spaces.
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    octal(&mut h[148..155], u64::from(sum));
    h[155] = b' ';
    Ok(h)
}

/// A name as ustar's (prefix ≤ 155, name ≤ 100), split at a '/'.
fn split_name(name: &str) -> Option<(&str, &str)> {
    if name.is_empty() || !name.is_ascii() {
        return None;
    }
    if name.len() <= 100 {
        return Some(("", name));
    }
    name.char_indices()
        .filter(|&(_, c)| c == '/')
        .map(|(i, _)| (&name[..i], &name[i + 1..]))
        .find(|(p, n)| p.len() <= 155 && n.len() <= 100 && !n.is_empty())
}

/// `v` as zero-padded octal digits filling the field but its last byte (NUL).
fn octal(field: &mut [u8], v: u64) {
    let digits = field.len() - 1;
    let s = format!("{v:0digits$o}");
    field[..digits].copy_from_slice(&s.as_bytes()[s.len() - digits..]);
    field[digits] = 0;
}

/// The last `max` bytes of `data`, starting after a newline where one is near (a log tail
/// that begins mid-line reads badly).
pub fn tail(data: &[u8], max: usize) -> &[u8] {
    if data.len() <= max {
        return data;
    }
    let t = &data[data.len() - max..];
    match t.iter().take(256).position(|&b| b == b'\n') {
        Some(i) => &t[i + 1..],
        None => t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads a ustar archive back: (name, data) per member; checks every header's checksum.
    fn untar(mut b: &[u8]) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        loop {
            let h = &b[..BLOCK];
            if h.iter().all(|&x| x == 0) {
                assert!(b[BLOCK..2 * BLOCK].iter().all(|&x| x == 0));
                return out;
            }
            let field = |r: std::ops::Range<usize>| {
                let f = &h[r];
                let end = f.iter().position(|&x| x == 0).unwrap_or(f.len());
                String::from_utf8(f[..end].to_vec()).unwrap()
            };
            let num = |r| u64::from_str_radix(field(r).trim(), 8).unwrap();
            let mut copy = h.to_vec();
            copy[148..156].fill(b' ');
            let sum: u64 = copy.iter().map(|&x| u64::from(x)).sum();
            assert_eq!(num(148..156), sum, "checksum");
            assert_eq!(&h[257..263], b"ustar\0");
            let prefix = field(345..500);
            let name = if prefix.is_empty() {
                field(0..100)
            } else {
                format!("{prefix}/{}", field(0..100))
            };
            let size = num(124..136) as usize;
            let data = b[BLOCK..BLOCK + size].to_vec();
            out.push((name, data));
            b = &b[BLOCK + size.div_ceil(BLOCK) * BLOCK..];
        }
    }

    #[test]
    fn tar_round_trip() {
        let long = format!("{}/{}", "d".repeat(120), "f".repeat(90));
        let mut w = TarWriter::new(Vec::new(), 1_795_579_551);
        w.append("a/summary.json", b"{}").unwrap();
        w.append("a/empty", b"").unwrap();
        w.append("a/block", &[7u8; 512]).unwrap();
        w.append(&long, b"x").unwrap();
        // a reader shorter than announced: padded
        w.append_reader("a/short", 5, &mut &b"ab"[..]).unwrap();
        let bytes = w.finish().unwrap();
        assert_eq!(bytes.len() % BLOCK, 0);
        let m = untar(&bytes);
        let names: Vec<&str> = m.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            vec!["a/summary.json", "a/empty", "a/block", &long, "a/short"]
        );
        assert_eq!(m[0].1, b"{}");
        assert_eq!(m[2].1, vec![7u8; 512]);
        assert_eq!(m[4].1, b"ab\0\0\0");
    }

    #[test]
    fn tar_refuses_names_it_cannot_hold() {
        let mut w = TarWriter::new(Vec::new(), 0);
        assert!(w.append(&"x".repeat(101), b"").is_err());
        assert!(w.append("", b"").is_err());
        assert!(w.append("caf\u{e9}", b"").is_err());
    }

    #[test]
    fn stamps_and_ids_sort_by_time() {
        assert_eq!(stamp(0), "19700101T000000Z");
        assert_eq!(stamp(1_795_579_551), "20261125T040551Z");
        assert_eq!(stamp(951_782_400), "20000229T000000Z");
        let none = |_: &str| false;
        let id = new_id(1_795_579_551, "web", Reason::Exit, &none);
        assert_eq!(id, "20261125T040551Z-web-exit");
        let taken = |s: &str| s == "20261125T040551Z-web-exit" || s.ends_with(".2");
        assert_eq!(
            new_id(1_795_579_551, "web", Reason::Exit, &taken),
            "20261125T040551Z-web-exit.3"
        );
        assert!(stamp(1_000) < stamp(1_001) && stamp(99_999_999) < stamp(100_000_000));
    }

    #[test]
    fn ids_parse_back_and_nothing_else_does() {
        let id = parse_id("20261125T040551Z-my-web-signal.2").unwrap();
        assert_eq!(id.container, "my-web");
        assert_eq!(id.reason, Reason::Signal);
        assert_eq!(id.stamp, "20261125T040551Z");
        assert_eq!(
            parse_id("20261125T040551Z-_daemon-panic")
                .unwrap()
                .container,
            DAEMON_DIR
        );
        for r in Reason::ALL {
            let id = new_id(5, "a", *r, &|_| false);
            assert_eq!(parse_id(&id).unwrap().reason, *r);
        }
        for bad in [
            "",
            "../etc",
            "20261125T040551Z-web",
            "20261125T040551Z-web-boom",
            "2026112xT040551Z-web-exit",
            "20261125T040551Z-../x-exit",
            "20261125T040551Z-web-exit.",
            "20261125T040551Z-web-exit.x",
            "20261125T040551Z-Web-exit",
            "20261125T040551Z-web/x-exit",
        ] {
            assert!(parse_id(bad).is_err(), "{bad}");
        }
    }

    fn stored(id: &str, dir: &str, size: u64) -> Stored {
        Stored {
            id: id.into(),
            dir: dir.into(),
            size,
        }
    }

    #[test]
    fn eviction_takes_the_oldest_first_per_container_then_overall() {
        let caps = |n, total| Caps {
            max_per_container: n,
            max_total_size: total,
            ..Caps::default()
        };
        // oldest first, as the daemon lists them
        let s = vec![
            stored("20260101T000001Z-web-exit", "web", 10),
            stored("20260101T000002Z-db-exit", "db", 10),
            stored("20260101T000003Z-web-exit", "web", 10),
            stored("20260101T000004Z-web-exit", "web", 10),
            stored("20260101T000005Z-db-exit", "db", 10),
        ];
        // (caps, keep, expected evictions)
        let table: &[(Caps, &str, &[&str])] = &[
            (caps(5, 1000), "", &[]),
            (caps(2, 1000), "", &["20260101T000001Z-web-exit"]),
            (
                caps(1, 1000),
                "",
                &[
                    "20260101T000002Z-db-exit",
                    "20260101T000001Z-web-exit",
                    "20260101T000003Z-web-exit",
                ],
            ),
            // the total: oldest first across containers
            (
                caps(5, 30),
                "",
                &["20260101T000001Z-web-exit", "20260101T000002Z-db-exit"],
            ),
            // both caps
            (
                caps(2, 20),
                "",
                &[
                    "20260101T000001Z-web-exit",
                    "20260101T000002Z-db-exit",
                    "20260101T000003Z-web-exit",
                ],
            ),
            // the report just written stays, even alone over the total
            (
                caps(5, 5),
                "20260101T000005Z-db-exit",
                &[
                    "20260101T000001Z-web-exit",
                    "20260101T000002Z-db-exit",
                    "20260101T000003Z-web-exit",
                    "20260101T000004Z-web-exit",
                ],
            ),
        ];
        for (i, (c, keep, want)) in table.iter().enumerate() {
            let mut got = evict(&s, c, keep, 1_790_000_000);
            got.sort();
            let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
            want.sort();
            assert_eq!(got, want, "row {i}");
        }
        assert!(evict(&[], &Caps::default(), "", 0).is_empty());
    }

    /// Reports written in 2026, the clock then set back to 2025 and two written since: the
    /// two from "the future" are the oldest, so the cap keeps the newest.
    #[test]
    fn after_the_clock_was_set_back_the_reports_ahead_of_it_are_the_oldest() {
        let s = vec![
            stored("20250601T000000Z-web-exit", "web", 10),
            stored("20250601T000005Z-web-exit", "web", 10),
            stored("20260101T000001Z-web-exit", "web", 10),
            stored("20260101T000002Z-web-exit", "web", 10),
        ];
        let now = 1_748_736_010; // 2025-06-01 00:00:10 UTC
        let caps = Caps {
            max_per_container: 2,
            ..Caps::default()
        };
        let mut gone = evict(&s, &caps, "20250601T000005Z-web-exit", now);
        gone.sort();
        assert_eq!(
            gone,
            ["20260101T000001Z-web-exit", "20260101T000002Z-web-exit"]
        );
        // with the clock right, the oldest by their ids go
        assert_eq!(
            evict(&s, &caps, "", 1_790_000_000),
            ["20250601T000000Z-web-exit", "20250601T000005Z-web-exit"]
        );
    }

    #[test]
    fn the_container_of_a_crashing_process_comes_from_its_cgroup() {
        let v2 = "0::/berth/web/init.scope\n";
        assert_eq!(container_of_cgroup(v2, "berth"), Some("web".into()));
        let v1 = "12:pids:/berth/db\n4:memory:/berth/db\n1:name=systemd:/\n";
        assert_eq!(container_of_cgroup(v1, "berth"), Some("db".into()));
        let nested = "0::/system.slice/x.service/berth-t-1/web-2\n";
        assert_eq!(
            container_of_cgroup(nested, "berth-t-1"),
            Some("web-2".into())
        );
        // the payload's leaf of the budget, and a cgroup the container made in it
        let payload = "12:pids:/berth/web/payload\n4:memory:/berth/web/payload\n1:name=systemd:/\n";
        assert_eq!(container_of_cgroup(payload, "berth"), Some("web".into()));
        let inner = "0::/berth/web/payload/sub\n";
        assert_eq!(container_of_cgroup(inner, "berth"), Some("web".into()));
        for other in [
            // berth's own processes for a container are not the container's
            "12:pids:/berth/web/berth\n4:memory:/berth/web/berth\n1:name=systemd:/system.slice\n",
            "0::/berth/web/monitor\n",
            "0::/berth/web/lxc.pivot\n",
            "0::/user.slice/session-1.scope\n",
            "0::/berth.monitor/web\n",
            "0::/berth\n",
            "0::/berth/Bad_Name\n",
            "garbage",
            "",
        ] {
            assert_eq!(container_of_cgroup(other, "berth"), None, "{other}");
        }
    }

    #[test]
    fn core_names_round_trip() {
        for truncated in [false, true] {
            let c = CoreName {
                secs: 1_795_579_551,
                pid: 4242,
                signal: 11,
                truncated,
            };
            assert_eq!(CoreName::parse(&c.file_name()), Some(c));
        }
        assert_eq!(CoreName::parse("x.core"), None);
        assert_eq!(CoreName::parse(".1-2-3.core.tmp"), None);
        assert!(dumps_core(11) && dumps_core(6) && !dumps_core(9) && !dumps_core(15));
    }

    #[test]
    fn a_tail_starts_at_a_line() {
        assert_eq!(tail(b"abc", 10), b"abc");
        assert_eq!(tail(b"one\ntwo\nthree\n", 8), b"three\n");
        assert_eq!(tail(b"xxxxxxxxxx", 4), b"xxxx");
    }
}
