//! The memory guard's decisions (DESIGN.md decision 4): when the host's available memory is
//! below the threshold, which container process dies next. Pure: the caller reads
//! `/proc/meminfo` and the candidates' `/proc/PID/status` and hands the text in.
//!
//! Order: the lowest manifest `[resources] priority` first; within a priority, a container's
//! payload before any container's init (killing the payload ends its container cleanly, the
//! init follows); then the largest RSS; ties by name and pid, so the choice is stable.

/// A process of a running berth container that the guard may kill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub container: String,
    /// The package's `[resources] priority` (-100..100, lower dies first).
    pub priority: i32,
    /// Host pid.
    pub pid: i32,
    /// Resident set, bytes.
    pub rss: u64,
    /// The container's init (PID 1 inside): chosen only after every payload process of the
    /// same priority.
    pub is_init: bool,
}

/// `MemAvailable` of a `/proc/meminfo` text, bytes.
pub fn mem_available(meminfo: &str) -> Option<u64> {
    kib_field(meminfo, "MemAvailable:")
}

/// `VmRSS` of a `/proc/PID/status` text, bytes (None for kernel threads and zombies).
pub fn status_rss(status: &str) -> Option<u64> {
    kib_field(status, "VmRSS:")
}

fn kib_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.trim();
        let n = rest.strip_suffix("kB").unwrap_or(rest).trim();
        n.parse::<u64>().ok()?.checked_mul(1024)
    })
}

/// Who to kill next: None while `available` is at or above `threshold`, or with no candidate.
pub fn pick(available: u64, threshold: u64, candidates: &[Candidate]) -> Option<&Candidate> {
    if available >= threshold {
        return None;
    }
    candidates.iter().min_by(|a, b| {
        a.priority
            .cmp(&b.priority)
            .then(a.is_init.cmp(&b.is_init))
            .then(b.rss.cmp(&a.rss))
            .then(a.container.cmp(&b.container))
            .then(a.pid.cmp(&b.pid))
    })
}

/// A kill whose memory the kernel may not have reported back yet: MemAvailable lags the
/// freeing (per-CPU vmstat deltas are folded in about once a second, `vm.stat_interval`), so
/// without this the guard would kill a second, innocent process right after the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecentKill {
    pub at_ms: u64,
    /// MemAvailable when the process was killed, bytes.
    pub available: u64,
    pub rss: u64,
}

/// How long a kill counts as pending: longer than `vm.stat_interval` (1 s by default).
pub const SETTLE_MS: u64 = 1500;

/// Memory that kills of the last `SETTLE_MS` are still to give back, as far as MemAvailable
/// (`available`, read at `now_ms`) shows: their RSS minus the rise since the earliest of them.
pub fn pending(recent: &[RecentKill], now_ms: u64, available: u64) -> u64 {
    let live: Vec<&RecentKill> = recent
        .iter()
        .filter(|k| now_ms.saturating_sub(k.at_ms) < SETTLE_MS)
        .collect();
    let Some(first) = live.iter().min_by_key(|k| k.at_ms) else {
        return 0;
    };
    let rss: u64 = live.iter().map(|k| k.rss).sum();
    rss.saturating_sub(available.saturating_sub(first.available))
}

/// At most `per_second` log lines per second; the rest are counted and reported with the
/// next line that is let through.
#[derive(Debug, Default)]
pub struct RateLimit {
    window_start_ms: u64,
    in_window: u32,
    suppressed: u32,
}

impl RateLimit {
    /// Whether a line may be written at `now_ms`; Some(n) with n lines suppressed since the
    /// last one that was.
    pub fn allow(&mut self, now_ms: u64, per_second: u32) -> Option<u32> {
        if now_ms.saturating_sub(self.window_start_ms) >= 1000 {
            self.window_start_ms = now_ms;
            self.in_window = 0;
        }
        if self.in_window < per_second {
            self.in_window += 1;
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(container: &str, priority: i32, pid: i32, rss_mib: u64, is_init: bool) -> Candidate {
        Candidate {
            container: container.into(),
            priority,
            pid,
            rss: rss_mib << 20,
            is_init,
        }
    }

    #[test]
    fn parses_meminfo_and_status() {
        let m = "MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   20480 kB\n";
        assert_eq!(mem_available(m), Some(20 << 20));
        assert_eq!(mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(mem_available("MemAvailable: lots kB\n"), None);
        let s = "Name:\tcat\nVmPeak:\t  9000 kB\nVmRSS:\t     1024 kB\n";
        assert_eq!(status_rss(s), Some(1 << 20));
        assert_eq!(status_rss("Name:\tkthreadd\n"), None);
    }

    #[test]
    fn nothing_at_or_above_the_threshold() {
        let cs = [c("a", 0, 10, 100, false)];
        assert_eq!(pick(30 << 20, 30 << 20, &cs), None);
        assert_eq!(pick(1 << 30, 30 << 20, &cs), None);
        assert_eq!(pick(0, 30 << 20, &[]), None);
        assert_eq!(pick((30 << 20) - 1, 30 << 20, &cs).unwrap().pid, 10);
    }

    #[test]
    fn lowest_priority_first_then_largest_rss() {
        let cs = [
            c("big", 50, 1, 500, false),
            c("low", -10, 2, 5, false),
            c("low2", -10, 3, 50, false),
            c("mid", 0, 4, 400, false),
        ];
        assert_eq!(pick(0, 1, &cs).unwrap().pid, 3);
        let rest: Vec<_> = cs.iter().filter(|x| x.pid != 3).cloned().collect();
        assert_eq!(pick(0, 1, &rest).unwrap().pid, 2);
        let rest: Vec<_> = rest.into_iter().filter(|x| x.pid != 2).collect();
        assert_eq!(pick(0, 1, &rest).unwrap().pid, 4);
        let rest: Vec<_> = rest.into_iter().filter(|x| x.pid != 4).collect();
        assert_eq!(pick(0, 1, &rest).unwrap().pid, 1);
    }

    #[test]
    fn payload_before_init_and_stable_ties() {
        let cs = [
            c("a", 0, 100, 900, true),
            c("a", 0, 101, 10, false),
            c("b", 0, 200, 10, false),
        ];
        // Same priority: payloads first; equal RSS: by name, then pid.
        assert_eq!(pick(0, 1, &cs).unwrap().pid, 101);
        let cs = [c("x", 0, 9, 10, false), c("x", 0, 7, 10, false)];
        assert_eq!(pick(0, 1, &cs).unwrap().pid, 7);
        // An init of a lower priority still goes before a payload of a higher one.
        let cs = [c("a", -1, 100, 1, true), c("b", 5, 200, 900, false)];
        assert_eq!(pick(0, 1, &cs).unwrap().pid, 100);
    }

    #[test]
    fn recent_kills_count_until_memavailable_shows_them() {
        let k = RecentKill {
            at_ms: 1000,
            available: 10 << 20,
            rss: 100 << 20,
        };
        // Not yet visible: all of it pending.
        assert_eq!(pending(&[k], 1100, 10 << 20), 100 << 20);
        // Partly visible.
        assert_eq!(pending(&[k], 1200, 70 << 20), 40 << 20);
        // All visible, or more (others freed memory too).
        assert_eq!(pending(&[k], 1300, 110 << 20), 0);
        assert_eq!(pending(&[k], 1300, 500 << 20), 0);
        // Settled: MemAvailable is the truth again.
        assert_eq!(pending(&[k], 1000 + SETTLE_MS, 10 << 20), 0);
        assert_eq!(pending(&[], 0, 0), 0);
        let k2 = RecentKill {
            at_ms: 1200,
            available: 5 << 20,
            rss: 50 << 20,
        };
        assert_eq!(pending(&[k, k2], 1300, 20 << 20), 140 << 20);
        // A pending kill keeps pick() from choosing another victim.
        let cs = [c("quiet", 50, 7, 1, false)];
        let avail = 10 << 20;
        assert_eq!(
            pick(avail + pending(&[k], 1100, avail), 30 << 20, &cs),
            None
        );
        assert!(pick(avail + pending(&[k], 9999, avail), 30 << 20, &cs).is_some());
    }

    #[test]
    fn rate_limit_lets_a_few_lines_a_second() {
        let mut r = RateLimit::default();
        assert_eq!(r.allow(5000, 3), Some(0));
        assert_eq!(r.allow(5100, 3), Some(0));
        assert_eq!(r.allow(5200, 3), Some(0));
        assert_eq!(r.allow(5300, 3), None);
        assert_eq!(r.allow(5400, 3), None);
        assert_eq!(r.allow(6000, 3), Some(2));
        assert_eq!(r.allow(6001, 3), Some(0));
    }
}
