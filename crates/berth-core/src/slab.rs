//! The slab reserve (`[slab]`, docs/resources.md "Slab reserve"): which kernel slab caches
//! keep free objects for the device's atomic allocations, and how many. The kernel module
//! `kmod/berth-slab` holds them; this is the pure part: the policy, what the module is told,
//! and what `/proc/slabinfo` and the module's `state` say about whether each reserve holds.

use crate::error::Error;
use std::path::{Path, PathBuf};

/// The module's name (`/sys/module/berth_slab`).
pub const MODULE: &str = "berth_slab";
/// Where the module is looked for when `[slab] module` is not set, in turn (`{}` is the
/// kernel's release): `make modules_install`'s place for a module built out of the kernel's
/// tree (Yocto's module class too), DKMS's (Debian's berth-slab-dkms), and OpenWrt's (its
/// kmod-berth-slab package: every module in the release's own directory).
pub const DEFAULT_MODULES: [&str; 3] = [
    "/lib/modules/{}/extra/berth_slab.ko",
    "/lib/modules/{}/updates/dkms/berth_slab.ko",
    "/lib/modules/{}/berth_slab.ko",
];
/// The module refuses a cap above this (`RESERVE_LIMIT` in berth_slab.c).
pub const RESERVE_LIMIT: u32 = 1 << 20;
/// The module keeps at most this many caches (`MAX_CACHES`).
pub const MAX_CACHES: usize = 16;

/// A reserve: a number of free objects, or the memory they may take (objects of the cache's
/// size, rounded up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    Objects(u32),
    Bytes(u64),
}

impl Amount {
    /// `512` (objects) or `"128K"` (a size); a string of digits is objects too.
    pub fn parse(s: &str) -> Result<Amount, Error> {
        if s.bytes().all(|b| b.is_ascii_digit()) {
            return match s.parse::<u32>() {
                Ok(n) if n > 0 => Ok(Amount::Objects(n)),
                Ok(_) => Err(Error::invalid(format!(
                    "{s:?}: a reserve is 1 or more objects"
                ))),
                Err(_) => Err(Error::invalid(format!(
                    "{s:?}: too many objects (at most {RESERVE_LIMIT})"
                ))),
            };
        }
        match crate::manifest::parse_size(s)? {
            0 => Err(Error::invalid(format!(
                "{s:?}: a reserve is more than 0 bytes"
            ))),
            b => Ok(Amount::Bytes(b)),
        }
    }

    /// The objects this reserve means in a cache of `objsize`-byte objects.
    pub fn objects(self, objsize: u64) -> u32 {
        match self {
            Amount::Objects(n) => n,
            Amount::Bytes(b) => u32::try_from(b.div_ceil(objsize.max(1))).unwrap_or(u32::MAX),
        }
    }
}

/// `[slab]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlabPolicy {
    /// Each cache and its reserve, in the order written.
    pub caches: Vec<(String, Amount)>,
    /// The module file; None: the first of [`DEFAULT_MODULES`] there for the running kernel.
    pub module: Option<PathBuf>,
    /// The cap the module is loaded with (its `max_reserve`): no reserve may be above it.
    pub max_reserve: u32,
}

impl SlabPolicy {
    /// The module file to load on a kernel of this release: `[slab] module`, or the first
    /// of [`DEFAULT_MODULES`] that `exists`; Err names every place looked at.
    pub fn module_file(
        &self,
        release: &str,
        exists: impl Fn(&Path) -> bool,
    ) -> Result<PathBuf, Error> {
        if let Some(m) = &self.module {
            return Ok(m.clone());
        }
        let places: Vec<PathBuf> = DEFAULT_MODULES
            .iter()
            .map(|p| PathBuf::from(p.replace("{}", release.trim())))
            .collect();
        if let Some(p) = places.iter().find(|p| exists(p)) {
            return Ok(p.clone());
        }
        let names: Vec<String> = places.iter().map(|p| p.display().to_string()).collect();
        Err(Error::not_found(format!(
            "no {MODULE}.ko for this kernel at {} (install the module built for it, or set [slab] module)",
            names.join(", ")
        )))
    }
}

/// The caches the module accepts: the kernel's own, which live as long as it does (a module's
/// cache could go away under the reserve).
pub fn allowed(name: &str) -> bool {
    let kmalloc = |n: &str| {
        n.strip_prefix("kmalloc-").is_some_and(|s| {
            let digits = s.strip_suffix('k').unwrap_or(s);
            !digits.starts_with('0')
                && !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
        })
    };
    matches!(name, "skbuff_head_cache" | "skbuff_fclone_cache")
        || kmalloc(name)
        || name.strip_prefix("dma-").is_some_and(kmalloc)
}

/// One entry of `caches`: `NAME` (the section's `reserve`) or `NAME:RESERVE`.
pub fn cache_entry(entry: &str, reserve: Amount) -> Result<(String, Amount), Error> {
    let (name, amount) = match entry.split_once(':') {
        Some((n, a)) => (n, Amount::parse(a).map_err(|m| m.context(n))?),
        None => (entry, reserve),
    };
    if !allowed(name) {
        return Err(Error::invalid(format!(
            "{name:?}: not a cache the reserve can hold (kmalloc-N, dma-kmalloc-N, skbuff_head_cache, skbuff_fclone_cache)"
        )));
    }
    Ok((name.to_string(), amount))
}

/// One cache in `/proc/slabinfo` (version 2.1): `name active_objs num_objs objsize …`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlabLine {
    pub name: String,
    pub active: u64,
    pub total: u64,
    pub objsize: u64,
}

pub fn parse_slabinfo(text: &str) -> Vec<SlabLine> {
    rows(text)
        .map(|(name, [active, total, objsize])| SlabLine {
            name,
            active,
            total,
            objsize,
        })
        .collect()
}

/// Lines of a name and (at least) three numbers; the others (slabinfo's headers) are left out.
fn rows(text: &str) -> impl Iterator<Item = (String, [u64; 3])> + '_ {
    text.lines().filter_map(|l| {
        let mut f = l.split_whitespace();
        let name = f.next()?.to_string();
        let mut n = || f.next()?.parse::<u64>().ok();
        Some((name, [n()?, n()?, n()?]))
    })
}

/// One line of the module's `state`: `NAME OBJECTS HELD PAGES OBJECT_SIZE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub name: String,
    pub want: u64,
    pub held: u64,
    pub pages: u64,
}

pub fn parse_state(text: &str) -> Vec<Held> {
    rows(text)
        .map(|(name, [want, held, pages])| Held {
            name,
            want,
            held,
            pages,
        })
        .collect()
}

/// The module's `caches` parameter for `policy` on a kernel whose slabinfo is `slabs`: each
/// reserve in objects. Errors name a cache this kernel has not, or a reserve above the cap.
pub fn caches_param(policy: &SlabPolicy, slabs: &[SlabLine]) -> Result<String, Error> {
    let mut out = Vec::with_capacity(policy.caches.len());
    for (name, amount) in &policy.caches {
        let objsize = match (amount, slabs.iter().find(|s| &s.name == name)) {
            (_, Some(s)) => s.objsize,
            (Amount::Objects(_), None) => 1,
            (Amount::Bytes(_), None) => {
                return Err(Error::refused(format!(
                    "{name}: this kernel has no such slab cache"
                )))
            }
        };
        let n = amount.objects(objsize);
        if n > policy.max_reserve {
            return Err(Error::refused(format!(
                "{name}: a reserve of {n} objects is above max_reserve ({})",
                policy.max_reserve
            )));
        }
        out.push(format!("{name}:{n}"));
    }
    Ok(out.join(" "))
}

/// One cache as `berth check` and `berth stats` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheReport {
    pub name: String,
    /// From /proc/slabinfo (None: the kernel has no such cache).
    pub active: Option<u64>,
    pub total: Option<u64>,
    pub objsize: Option<u64>,
    /// The reserve asked for, in objects (None: unknown, the cache is missing).
    pub reserve: Option<u64>,
    /// What the module holds now, and on how many pages.
    pub held: u64,
    pub pages: u64,
}

impl CacheReport {
    /// Free objects the kernel can hand out from the cache's slabs without a new page.
    pub fn free(&self) -> Option<u64> {
        Some(self.total?.saturating_sub(self.active?))
    }
    /// The module holds at least the reserve.
    pub fn holds(&self) -> bool {
        self.reserve.is_some_and(|r| self.held >= r)
    }
}

/// Each configured cache: its slabinfo counters, the reserve and what the module holds.
pub fn report(policy: &SlabPolicy, slabinfo: &str, state: &str) -> Vec<CacheReport> {
    let slabs = parse_slabinfo(slabinfo);
    let held = parse_state(state);
    policy
        .caches
        .iter()
        .map(|(name, amount)| {
            let s = slabs.iter().find(|s| &s.name == name);
            let h = held.iter().find(|h| &h.name == name);
            CacheReport {
                name: name.clone(),
                active: s.map(|s| s.active),
                total: s.map(|s| s.total),
                objsize: s.map(|s| s.objsize),
                reserve: s.map(|s| u64::from(amount.objects(s.objsize))),
                held: h.map_or(0, |h| h.held),
                pages: h.map_or(0, |h| h.pages),
            }
        })
        .collect()
}

/// "skbuff_head_cache: 529 free (640/1169 in use), reserve 512, held 525 on 35 pages"
pub fn describe(r: &CacheReport) -> String {
    match (r.active, r.total, r.reserve) {
        (Some(a), Some(t), Some(res)) => format!(
            "{}: {} free ({a}/{t} in use), reserve {res}, held {} on {} pages{}",
            r.name,
            t.saturating_sub(a),
            r.held,
            r.pages,
            if r.holds() { "" } else { ": short" }
        ),
        _ => format!("{}: no such cache in /proc/slabinfo", r.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const SLABINFO: &str = "slabinfo - version: 2.1\n# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : tunables <limit> <batchcount> <sharedfactor> : slabdata <active_slabs> <num_slabs> <sharedavail>\nskbuff_head_cache    640   1169    256   16    1 : tunables    0    0    0 : slabdata     74     74      0\nkmalloc-256         1200   2256    256   16    1 : tunables    0    0    0 : slabdata    141    141      0\nkmalloc-cg-256       100    112    256   16    1 : tunables    0    0    0 : slabdata      7      7      0\n";

    fn policy(caches: &[(&str, Amount)]) -> SlabPolicy {
        SlabPolicy {
            caches: caches.iter().map(|(n, a)| (n.to_string(), *a)).collect(),
            module: None,
            max_reserve: 4096,
        }
    }

    #[test]
    fn amounts_are_objects_or_sizes() {
        assert_eq!(Amount::parse("512"), Ok(Amount::Objects(512)));
        assert_eq!(Amount::parse("128K"), Ok(Amount::Bytes(131_072)));
        assert!(Amount::parse("0")
            .unwrap_err()
            .message
            .contains("1 or more"));
        assert!(Amount::parse("0K")
            .unwrap_err()
            .message
            .contains("more than 0 bytes"));
        assert!(Amount::parse("lots").is_err());
        assert_eq!(
            Amount::parse("99999999999"),
            Err(Error::invalid(
                "\"99999999999\": too many objects (at most 1048576)"
            ))
        );
        assert_eq!(Amount::Bytes(131_072).objects(256), 512);
        assert_eq!(Amount::Bytes(1000).objects(256), 4, "rounded up");
        assert_eq!(Amount::Objects(7).objects(256), 7);
    }

    #[test]
    fn only_the_kernels_own_caches() {
        for ok in [
            "skbuff_head_cache",
            "skbuff_fclone_cache",
            "kmalloc-256",
            "kmalloc-1k",
            "dma-kmalloc-64",
        ] {
            assert!(allowed(ok), "{ok}");
        }
        for bad in [
            "ext4_inode_cache",
            "kmalloc-",
            "kmalloc-k",
            "kmalloc-cg-256",
            "kmalloc-256x",
            "kmalloc-0",
            "kmalloc-08",
            "dma-skbuff_head_cache",
            "",
        ] {
            assert!(!allowed(bad), "{bad}");
        }
        assert_eq!(
            cache_entry("kmalloc-256:1K", Amount::Objects(5)),
            Ok(("kmalloc-256".into(), Amount::Bytes(1024)))
        );
        assert_eq!(
            cache_entry("kmalloc-256", Amount::Objects(5)),
            Ok(("kmalloc-256".into(), Amount::Objects(5)))
        );
        // The first place that has it, in turn; none: every place named.
        let p = policy(&[]);
        let at = |there: &'static str| move |f: &Path| f == Path::new(there) || there == "*";
        assert_eq!(
            p.module_file("6.1.0-56-amd64\n", at("*")),
            Ok(PathBuf::from(
                "/lib/modules/6.1.0-56-amd64/extra/berth_slab.ko"
            ))
        );
        for place in [
            "/lib/modules/6.1.0-56-amd64/updates/dkms/berth_slab.ko",
            "/lib/modules/6.1.0-56-amd64/berth_slab.ko",
        ] {
            assert_eq!(
                p.module_file("6.1.0-56-amd64", at(place)),
                Ok(PathBuf::from(place))
            );
        }
        let e = p.module_file("5.15.0", at("")).unwrap_err();
        assert!(
            e.message.starts_with("no berth_slab.ko for this kernel at /lib/modules/5.15.0/extra/berth_slab.ko, /lib/modules/5.15.0/updates/dkms/berth_slab.ko, /lib/modules/5.15.0/berth_slab.ko"),
            "{e}"
        );
        let mut own = policy(&[]);
        own.module = Some(PathBuf::from("/opt/berth_slab.ko"));
        assert_eq!(
            own.module_file("5.15.0", at("")),
            Ok(PathBuf::from("/opt/berth_slab.ko")),
            "[slab] module is taken as it is (its load says what is wrong with it)"
        );
        let e = cache_entry("dentry", Amount::Objects(5)).unwrap_err();
        assert!(
            e.message
                .starts_with("\"dentry\": not a cache the reserve can hold"),
            "{e}"
        );
    }

    #[test]
    fn the_module_is_told_objects() {
        let slabs = parse_slabinfo(SLABINFO);
        assert_eq!(slabs.len(), 3);
        assert_eq!(
            slabs[0],
            SlabLine {
                name: "skbuff_head_cache".into(),
                active: 640,
                total: 1169,
                objsize: 256
            }
        );
        let p = policy(&[
            ("skbuff_head_cache", Amount::Objects(512)),
            ("kmalloc-256", Amount::Bytes(64 << 10)),
        ]);
        assert_eq!(
            caches_param(&p, &slabs),
            Ok("skbuff_head_cache:512 kmalloc-256:256".into())
        );
        let mut big = p.clone();
        big.max_reserve = 300;
        assert_eq!(
            caches_param(&big, &slabs),
            Err(Error::refused(
                "skbuff_head_cache: a reserve of 512 objects is above max_reserve (300)"
            ))
        );
        let missing = policy(&[("kmalloc-8k", Amount::Bytes(1 << 20))]);
        assert_eq!(
            caches_param(&missing, &slabs),
            Err(Error::refused(
                "kmalloc-8k: this kernel has no such slab cache"
            ))
        );
        // In objects, a missing cache is the module's to refuse (it names it).
        let objs = policy(&[("kmalloc-8k", Amount::Objects(3))]);
        assert_eq!(caches_param(&objs, &slabs), Ok("kmalloc-8k:3".into()));
    }

    #[test]
    fn a_reserve_holds_when_the_module_holds_it() {
        let p = policy(&[
            ("skbuff_head_cache", Amount::Objects(512)),
            ("kmalloc-256", Amount::Objects(1024)),
            ("kmalloc-8k", Amount::Objects(8)),
        ]);
        let state = "skbuff_head_cache 512 525 35 256\nkmalloc-256 1024 1000 63 256\n";
        let r = report(&p, SLABINFO, state);
        assert_eq!(r[0].free(), Some(529));
        assert!(r[0].holds());
        assert_eq!(
            describe(&r[0]),
            "skbuff_head_cache: 529 free (640/1169 in use), reserve 512, held 525 on 35 pages"
        );
        assert!(!r[1].holds());
        assert!(describe(&r[1]).ends_with("held 1000 on 63 pages: short"));
        assert!(!r[2].holds());
        assert_eq!(
            describe(&r[2]),
            "kmalloc-8k: no such cache in /proc/slabinfo"
        );
        // The module not loaded: nothing is held.
        let none = report(&p, SLABINFO, "");
        assert!(none.iter().all(|c| !c.holds() && c.held == 0));
    }
}
