//! What /proc says about processes: memory, names, parents.

use serde::Serialize;

// The process listing the sandbox's sweep uses too.
pub use berth_testkit::procs::{cmdline, mentions, pids};

use crate::util::{Context, Result};

/// Memory of one process, KiB.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Mem {
    /// VmRSS of /proc/PID/status: every resident page, shared library pages included.
    pub rss_kib: u64,
    /// Pss of smaps_rollup: shared pages divided among their users.
    pub pss_kib: u64,
    /// Private_Clean + Private_Dirty of smaps_rollup: what this process alone holds.
    pub private_kib: u64,
    /// Private_Dirty alone: heap, stacks, written data (not the binary's own text pages,
    /// which count as Private_Clean while no other process maps the binary).
    pub private_dirty_kib: u64,
    pub threads: u64,
}

impl std::ops::Add for Mem {
    type Output = Mem;
    fn add(self, o: Mem) -> Mem {
        Mem {
            rss_kib: self.rss_kib + o.rss_kib,
            pss_kib: self.pss_kib + o.pss_kib,
            private_kib: self.private_kib + o.private_kib,
            private_dirty_kib: self.private_dirty_kib + o.private_dirty_kib,
            threads: self.threads + o.threads,
        }
    }
}

/// The value of `key:` in a /proc key-value file, in KiB (or as a plain number).
pub fn field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

pub fn parse_mem(status: &str, rollup: &str) -> Mem {
    Mem {
        rss_kib: field(status, "VmRSS").unwrap_or(0),
        threads: field(status, "Threads").unwrap_or(0),
        pss_kib: field(rollup, "Pss").unwrap_or(0),
        private_kib: field(rollup, "Private_Clean").unwrap_or(0)
            + field(rollup, "Private_Dirty").unwrap_or(0),
        private_dirty_kib: field(rollup, "Private_Dirty").unwrap_or(0),
    }
}

pub fn mem(pid: i32) -> Result<Mem> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .context(format!("read /proc/{pid}/status"))?;
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .context(format!("read /proc/{pid}/smaps_rollup"))?;
    Ok(parse_mem(&status, &rollup))
}

pub fn comm(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_string())
}

/// Parent pid and state letter from /proc/PID/stat (the comm field may hold spaces).
pub fn stat(pid: i32) -> Option<(i32, char)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let mut it = rest.split(' ');
    let state = it.next()?.chars().next()?;
    let ppid = it.next()?.parse().ok()?;
    Some((ppid, state))
}

/// True once the process is gone or a zombie nobody has reaped yet.
pub fn gone(pid: i32) -> bool {
    !matches!(stat(pid), Some((_, st)) if st != 'Z' && st != 'X')
}

pub fn children(pid: i32) -> Vec<i32> {
    pids()
        .into_iter()
        .filter(|&p| matches!(stat(p), Some((pp, _)) if pp == pid))
        .collect()
}

/// The process and all its descendants.
pub fn tree(pid: i32) -> Vec<i32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let kids = children(out[i]);
        out.extend(kids);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_fields() {
        let status = "Name:\tberth\nVmRSS:\t    3120 kB\nThreads:\t4\n";
        let rollup = "55d0-7ff [rollup]\nRss:  3120 kB\nPss:  1200 kB\nPrivate_Clean:  100 kB\nPrivate_Dirty:  612 kB\n";
        let m = parse_mem(status, rollup);
        assert_eq!(
            m,
            Mem {
                rss_kib: 3120,
                pss_kib: 1200,
                private_kib: 712,
                private_dirty_kib: 612,
                threads: 4
            }
        );
        // Pss_Anon must not be taken for Pss.
        assert_eq!(field("Pss_Anon: 5 kB\nPss: 7 kB\n", "Pss"), Some(7));
    }

    #[test]
    fn own_process() {
        let me = std::process::id() as i32;
        assert!(!gone(me));
        assert!(mem(me).unwrap().rss_kib > 0);
        assert!(tree(me).contains(&me));
    }
}
