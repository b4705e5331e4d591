//! The governor's CPU cap on the parent cgroup: v1 `cpu.cfs_quota_us`, v2 `cpu.max`.
//!
//! cgroup v1 refuses (EINVAL) a quota below that of any descendant that has its own, so
//! lowering the cap first lowers such descendants to it (deepest first) and remembers their
//! own quota; raising it gives each back min(own, cap) (shallowest first). A descendant whose
//! quota someone else changed meanwhile (`berth limit`) is forgotten, not overwritten. v2
//! takes the minimum along the path by itself.

use std::path::{Path, PathBuf};

use crate::cgroupfs::{CgroupError, Cgroups, Version};

/// A descendant cgroup the cap lowered: its own quota and what was written instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clamp {
    pub path: PathBuf,
    pub own: u64,
    pub written: u64,
}

fn read_i64(p: &Path) -> Option<i64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

fn write(p: &Path, value: String) -> Result<(), CgroupError> {
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true) // as `echo V > file`; fixture trees are regular files
        .open(p)
        .and_then(|mut f| std::io::Write::write_all(&mut f, value.as_bytes()))
        .map_err(|source| CgroupError::Write {
            path: p.display().to_string(),
            value,
            source,
        })
}

/// Every cgroup below `dir` (not `dir`), parents before children, at most 4 levels deep.
fn below(dir: &Path, depth: u32, out: &mut Vec<PathBuf>) {
    if depth == 4 {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.push(e.path());
            below(&e.path(), depth + 1, out);
        }
    }
}

impl Cgroups {
    /// Sets cgroup `rel`'s CPU quota to `quota_us` per `period_us`. Returns false when the
    /// kernel has no cpu controller (nothing written).
    pub fn set_cpu_cap(
        &self,
        rel: &str,
        quota_us: u64,
        period_us: u64,
        clamps: &mut Vec<Clamp>,
    ) -> Result<bool, CgroupError> {
        let Some(dir) = self.dir("cpu", rel) else {
            return Ok(false);
        };
        if self.version == Version::V2 {
            write(&dir.join("cpu.max"), format!("{quota_us} {period_us}"))?;
            return Ok(true);
        }
        // A descendant's quota in its own period, against the cap in ours.
        let scaled = |p: &Path| read_i64(&p.join("cpu.cfs_period_us")).filter(|p| *p > 0);
        let mut all = Vec::new();
        below(&dir, 0, &mut all);
        for p in all.iter().rev() {
            let (Some(q), Some(per)) = (read_i64(&p.join("cpu.cfs_quota_us")), scaled(p)) else {
                continue;
            };
            let cap = quota_us * per as u64 / period_us;
            if q < 0 || q as u64 <= cap {
                continue;
            }
            let own = match clamps.iter().find(|c| c.path == *p) {
                Some(c) if c.written == q as u64 => c.own,
                _ => q as u64,
            };
            write(&p.join("cpu.cfs_quota_us"), cap.to_string())?;
            clamps.retain(|c| c.path != *p);
            clamps.push(Clamp {
                path: p.clone(),
                own,
                written: cap,
            });
        }
        write(&dir.join("cpu.cfs_period_us"), period_us.to_string())?;
        write(&dir.join("cpu.cfs_quota_us"), quota_us.to_string())?;
        // Shallowest first (insertion: no generic sort code for the device build).
        let depth = |c: &Clamp| c.path.components().count();
        let mut order: Vec<Clamp> = Vec::new();
        for c in std::mem::take(clamps) {
            let i = order
                .iter()
                .position(|k| depth(k) > depth(&c))
                .unwrap_or(order.len());
            order.insert(i, c);
        }
        let mut keep = Vec::new();
        for mut c in order {
            let (Some(q), Some(per)) =
                (read_i64(&c.path.join("cpu.cfs_quota_us")), scaled(&c.path))
            else {
                continue; // gone with its container
            };
            if q != c.written as i64 {
                continue; // changed by someone else: theirs now
            }
            let want = c.own.min(quota_us * per as u64 / period_us);
            if want != c.written {
                write(&c.path.join("cpu.cfs_quota_us"), want.to_string())?;
                c.written = want;
            }
            if want < c.own {
                keep.push(c);
            }
        }
        *clamps = keep;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mount::tests::TempDir;

    fn put(p: &Path, text: &str) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    fn get(p: &Path) -> String {
        std::fs::read_to_string(p).unwrap()
    }

    fn fixture(tag: &str, fs: &str, opts: &str) -> (TempDir, Cgroups) {
        let d = TempDir::new(tag);
        let cg = d.0.join("cg/cpu");
        std::fs::create_dir_all(&cg).unwrap();
        put(&cg.join("cgroup.controllers"), "cpu memory pids");
        let info = format!("40 31 0:40 / {} rw - {fs} {fs} {opts}\n", cg.display());
        put(&d.0.join("proc/self/mountinfo"), &info);
        let c = Cgroups::detect(&d.0.join("proc")).unwrap();
        (d, c)
    }

    #[test]
    fn v1_lowers_descendants_first_and_gives_them_back() {
        let (d, c) = fixture("cap-v1", "cgroup", "rw,cpu,cpuacct");
        let g = d.0.join("cg/cpu/berth");
        for (sub, q) in [
            ("", "100000"),
            ("/web", "60000"),
            ("/db", "-1"),
            ("/web/x", "50000"),
        ] {
            put(&g.join(format!(".{sub}/cpu.cfs_quota_us")), q);
            put(&g.join(format!(".{sub}/cpu.cfs_period_us")), "100000");
        }
        let mut clamps = Vec::new();
        assert!(c
            .set_cpu_cap("berth", 20_000, 100_000, &mut clamps)
            .unwrap());
        assert_eq!(get(&g.join("cpu.cfs_quota_us")), "20000");
        assert_eq!(get(&g.join("web/cpu.cfs_quota_us")), "20000");
        assert_eq!(get(&g.join("web/x/cpu.cfs_quota_us")), "20000");
        assert_eq!(get(&g.join("db/cpu.cfs_quota_us")), "-1");
        assert_eq!(clamps.len(), 2);
        // Lower again: the own quotas are remembered, not the clamped ones.
        c.set_cpu_cap("berth", 10_000, 100_000, &mut clamps)
            .unwrap();
        assert_eq!(get(&g.join("web/cpu.cfs_quota_us")), "10000");
        // Up to 55 %: web gets 55 % back, x its own 50 %, and x is no longer clamped.
        c.set_cpu_cap("berth", 55_000, 100_000, &mut clamps)
            .unwrap();
        assert_eq!(get(&g.join("web/cpu.cfs_quota_us")), "55000");
        assert_eq!(get(&g.join("web/x/cpu.cfs_quota_us")), "50000");
        assert_eq!(clamps.len(), 1);
        // Someone else (berth limit) sets web: the governor leaves it alone from then on.
        put(&g.join("web/cpu.cfs_quota_us"), "30000");
        c.set_cpu_cap("berth", 100_000, 100_000, &mut clamps)
            .unwrap();
        assert_eq!(get(&g.join("web/cpu.cfs_quota_us")), "30000");
        assert!(clamps.is_empty());
    }

    #[test]
    fn v2_writes_cpu_max_only() {
        let (d, c) = fixture("cap-v2", "cgroup2", "rw");
        let g = d.0.join("cg/cpu/berth");
        put(&g.join("cpu.max"), "max 100000");
        put(&g.join("web/cpu.max"), "60000 100000");
        let mut clamps = Vec::new();
        c.set_cpu_cap("berth", 20_000, 100_000, &mut clamps)
            .unwrap();
        assert_eq!(get(&g.join("cpu.max")), "20000 100000");
        assert_eq!(get(&g.join("web/cpu.max")), "60000 100000");
        assert!(clamps.is_empty());
    }
}
