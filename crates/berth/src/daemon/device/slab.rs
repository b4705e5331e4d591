//! The slab reserve (`[slab]`, feature `slab`; docs/resources.md, "Slab reserve"): at the
//! daemon's start, before any container runs, the kernel module of kmod/berth-slab is loaded
//! where the kernel takes modules and told the policy's caches and reserves; `berth stats`
//! shows each cache and whether its reserve holds. A reserve that cannot be set is an error
//! in the log and in `berth stats`, not a reason to keep the device's packages down.

use std::path::Path;

use berth_core::api::slab as field;
use berth_core::slab::{self, SlabPolicy, MODULE};
use berth_sys::kmod;
use serde_json::{Map, Value};

use crate::daemon::base::context::Daemon;

pub(crate) fn apply(d: &Daemon) {
    let Some(p) = &d.cfg.slab else { return };
    match configure(p, &d.roots.proc, &d.roots.sys) {
        Ok(param) => log::info!("slab reserve: {param}"),
        Err(e) => {
            log::error!("slab reserve: {e}");
            let _ = d.slab_error.set(e);
        }
    }
}

/// Loads the module if it is not loaded, then sets its caches; the parameter it was given.
/// A module that already keeps these reserves (the daemon restarted) is left as it is: a
/// new fill would free the reserve first and might not get it back under memory pressure.
fn configure(p: &SlabPolicy, proc: &Path, sys: &Path) -> Result<String, String> {
    if !kmod::loaded(sys, MODULE) {
        if let Some(why) = kmod::refusal(proc) {
            return Err(format!("cannot load {MODULE}: {why}"));
        }
        let release = std::fs::read_to_string(proc.join("sys/kernel/osrelease"))
            .map_err(|e| format!("the kernel's release: {e}"))?;
        kmod::load(
            &p.module_file(&release, Path::exists)?,
            &format!("max_reserve={}", p.max_reserve),
        )?;
    }
    let info = read(&proc.join("slabinfo"))?;
    let param = slab::caches_param(p, &slab::parse_slabinfo(&info))?;
    let now = kmod::param(sys, MODULE, "caches").unwrap_or_default();
    if now.trim() == param {
        return Ok(param);
    }
    kmod::set_param(sys, MODULE, "caches", &param).map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::E2BIG) => "a reserve above the loaded module's max_reserve (rmmod berth_slab to load it with this policy's), or more than 16 caches",
            Some(libc::ENOENT) => "this kernel has no such cache",
            Some(libc::ENOMEM) => "the kernel had not the memory to fill it (no reserve is kept)",
            Some(libc::EPERM) => "not a cache built into the kernel",
            Some(libc::EINVAL) => "objects too close to a page to keep free (kmalloc-2k and up with 4 KiB pages; the kernel log names the cache)",
            _ => "refused (the kernel log says why)",
        };
        format!("{MODULE} caches={param:?}: {why}: {e}")
    })?;
    Ok(param)
}

fn read(p: &Path) -> Result<String, String> {
    std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))
}

/// `berth stats`' `slab`: each cache's objects in use and in all, the reserve, what the
/// module holds. None without `[slab]`.
pub(crate) fn stats(d: &Daemon) -> Option<Value> {
    let p = d.cfg.slab.as_ref()?;
    let info = read(&d.roots.proc.join("slabinfo"));
    let sys = &d.roots.sys;
    let loaded = kmod::loaded(sys, MODULE);
    let state = kmod::param(sys, MODULE, "state").unwrap_or_default();
    // Maps filled by hand, not json!: no serializer per field type in the binary.
    let caches: Vec<Value> = slab::report(p, info.as_deref().unwrap_or(""), &state)
        .iter()
        .map(|c| {
            let mut m = Map::new();
            m.insert(field::NAME.into(), c.name.as_str().into());
            for (k, v) in [
                (field::ACTIVE_OBJS, c.active),
                (field::TOTAL_OBJS, c.total),
                (field::FREE_OBJS, c.free()),
                (field::OBJECT_SIZE, c.objsize),
                (field::RESERVE, c.reserve),
                (field::HELD, Some(c.held)),
                (field::PAGES, Some(c.pages)),
            ] {
                m.insert(k.into(), v.into());
            }
            m.insert(field::HOLDS.into(), c.holds().into());
            Value::Object(m)
        })
        .collect();
    let error = d
        .slab_error
        .get()
        .cloned()
        .or_else(|| info.err())
        .or_else(|| (!loaded).then(|| format!("{MODULE} is not loaded")));
    let mut m = Map::new();
    m.insert(field::LOADED.into(), loaded.into());
    m.insert(field::ERROR.into(), error.into());
    m.insert(field::CACHES.into(), caches.into());
    Some(Value::Object(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::testing::fake_daemon;

    const SLAB: &str = "[slab]\ncaches = [\"kmalloc-256\", \"skbuff_head_cache\"]\nreserve = 64\n";
    const SLABINFO: &str = "slabinfo - version: 2.1\n# name <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : tunables <limit> <batchcount> <sharedfactor> : slabdata <active_slabs> <num_slabs> <sharedavail>\nskbuff_head_cache    640   1169    256   16    1 : tunables    0    0    0 : slabdata     74     74      0\nkmalloc-256         1200   2256    256   16    1 : tunables    0    0    0 : slabdata    141    141      0\n";
    const PARAM: &str = "kmalloc-256:64 skbuff_head_cache:64";

    /// The module as loaded (its parameters in the daemon's /sys), the kernel's slabinfo.
    fn loaded(d: &Daemon) -> std::path::PathBuf {
        let params = d.sys().join("module").join(MODULE).join("parameters");
        std::fs::create_dir_all(&params).unwrap();
        std::fs::write(params.join("caches"), "").unwrap();
        std::fs::write(d.proc().join("slabinfo"), SLABINFO).unwrap();
        params
    }

    fn policy(d: &Daemon) -> &SlabPolicy {
        d.cfg.slab.as_ref().unwrap()
    }

    /// With the module loaded, the policy's caches are told it in objects; told again only
    /// when they differ from what it holds.
    #[test]
    fn a_loaded_module_is_told_the_caches_once() {
        let (_dir, d, _) = fake_daemon("slab-set", SLAB);
        let params = loaded(&d);
        assert_eq!(configure(policy(&d), d.proc(), d.sys()).unwrap(), PARAM);
        assert_eq!(
            std::fs::read_to_string(params.join("caches")).unwrap(),
            PARAM
        );
        // What the module says it holds (with its newline) is not written over.
        std::fs::write(params.join("caches"), format!("{PARAM}\n")).unwrap();
        assert_eq!(configure(policy(&d), d.proc(), d.sys()).unwrap(), PARAM);
        assert_eq!(
            std::fs::read_to_string(params.join("caches")).unwrap(),
            format!("{PARAM}\n")
        );
    }

    /// A parameter the kernel refuses is an error naming the module, the value and why;
    /// `apply` keeps it for `berth stats`.
    #[test]
    fn a_refused_parameter_is_an_error_kept_for_stats() {
        let (_dir, d, _) = fake_daemon("slab-refused", SLAB);
        let params = loaded(&d);
        std::fs::remove_file(params.join("caches")).unwrap();
        std::fs::create_dir(params.join("caches")).unwrap();
        let e = configure(policy(&d), d.proc(), d.sys()).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "{MODULE} caches={PARAM:?}: refused (the kernel log says why): "
            )),
            "{e}"
        );
        apply(&d);
        assert_eq!(d.slab_error.get(), Some(&e));
        let s = stats(&d).unwrap();
        assert_eq!(s[field::ERROR], e.as_str());
        assert_eq!(s[field::LOADED], true);
    }

    /// Where the module is not loaded and cannot be (no module support, loading switched
    /// off, no kernel release to find it by), the reason is the error; nothing is loaded.
    #[test]
    fn a_module_that_cannot_be_loaded_says_why() {
        let (_dir, d, _) = fake_daemon("slab-unloadable", SLAB);
        let e = configure(policy(&d), d.proc(), d.sys()).unwrap_err();
        assert_eq!(
            e,
            format!("cannot load {MODULE}: the kernel has no module support (no /proc/modules)")
        );
        std::fs::write(d.proc().join("modules"), "").unwrap();
        std::fs::create_dir_all(d.proc().join("sys/kernel")).unwrap();
        std::fs::write(d.proc().join("sys/kernel/modules_disabled"), "1\n").unwrap();
        let e = configure(policy(&d), d.proc(), d.sys()).unwrap_err();
        assert!(e.ends_with("(kernel.modules_disabled = 1)"), "{e}");
        std::fs::write(d.proc().join("sys/kernel/modules_disabled"), "0\n").unwrap();
        let e = configure(policy(&d), d.proc(), d.sys()).unwrap_err();
        assert!(e.starts_with("the kernel's release: "), "{e}");
    }

    /// Without a slabinfo, or with a cache the kernel lacks (a reserve in bytes cannot be
    /// counted in objects), nothing is written.
    #[test]
    fn a_missing_slabinfo_or_cache_is_an_error_and_nothing_is_written() {
        let (_dir, d, _) = fake_daemon(
            "slab-nocache",
            "[slab]\ncaches = [\"kmalloc-256\", \"kmalloc-8192:64K\"]\n",
        );
        let params = loaded(&d);
        std::fs::remove_file(d.proc().join("slabinfo")).unwrap();
        let e = configure(policy(&d), d.proc(), d.sys()).unwrap_err();
        assert!(
            e.starts_with(&d.proc().join("slabinfo").display().to_string()),
            "{e}"
        );
        std::fs::write(d.proc().join("slabinfo"), SLABINFO).unwrap();
        let e = configure(policy(&d), d.proc(), d.sys()).unwrap_err();
        assert_eq!(e, "kmalloc-8192: this kernel has no such slab cache");
        assert_eq!(std::fs::read_to_string(params.join("caches")).unwrap(), "");
    }

    /// `berth stats`' slab: nothing without `[slab]`; each cache's counters, the reserve and
    /// what the module holds; a module not loaded is the error.
    #[test]
    fn stats_show_each_cache_and_whether_its_reserve_holds() {
        let (_dir, d, _) = fake_daemon("slab-none", "");
        assert_eq!(stats(&d), None);
        apply(&d);
        assert_eq!(d.slab_error.get(), None);

        let (_dir, d, _) = fake_daemon("slab-stats", SLAB);
        std::fs::write(d.proc().join("slabinfo"), SLABINFO).unwrap();
        let s = stats(&d).unwrap();
        assert_eq!(s[field::LOADED], false);
        assert_eq!(s[field::ERROR], format!("{MODULE} is not loaded"));
        let params = loaded(&d);
        std::fs::write(
            params.join("state"),
            "kmalloc-256 64 64 4\nskbuff_head_cache 64 10 1\n",
        )
        .unwrap();
        let s = stats(&d).unwrap();
        assert_eq!(s[field::ERROR], Value::Null);
        let c = &s[field::CACHES];
        assert_eq!(c[0][field::NAME], "kmalloc-256");
        assert_eq!(
            (
                c[0][field::ACTIVE_OBJS].clone(),
                c[0][field::TOTAL_OBJS].clone(),
                c[0][field::FREE_OBJS].clone()
            ),
            (1200.into(), 2256.into(), 1056.into())
        );
        assert_eq!(
            (
                c[0][field::RESERVE].clone(),
                c[0][field::HELD].clone(),
                c[0][field::PAGES].clone()
            ),
            (64.into(), 64.into(), 4.into())
        );
        assert_eq!(c[0][field::HOLDS], true);
        assert_eq!(c[1][field::NAME], "skbuff_head_cache");
        assert_eq!(c[1][field::HOLDS], false, "10 of 64 held");
    }
}
