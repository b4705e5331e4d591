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
