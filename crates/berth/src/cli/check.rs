//! `check`: the kernel features berth uses, present or not, and whether this device's
//! configuration lets unprivileged containers reach their roots. Exit status 1 when a
//! required feature is missing.

use std::io::IsTerminal;

use anyhow::Result;
use berth_sys::check::{self, Feature, Status};
use serde_json::{json, Value};

use super::args::Global;
use super::{load_config, print_json, render};

pub fn run(g: &Global) -> Result<i32> {
    let roots = check::Roots::default();
    let mut features = check::check(&roots);
    // Where this device's configuration puts containers' roots and /data binds: a user
    // namespace's root must be able to search every directory on the way.
    if let Ok(cfg) = load_config(g) {
        features.push(run_dir(&cfg.paths.run));
        if let Some(dev) = &cfg.watchdog.device {
            features.push(watchdog(dev));
        }
        #[cfg(feature = "slab")]
        if let Some(p) = &cfg.slab {
            features.push(slab(p, &roots));
        }
    }
    let missing = check::missing_required(&features).len();
    let fallbacks = check::fallbacks(&features);
    if g.json {
        let v: Vec<Value> = features
            .iter()
            .map(|f| json!({"name": f.name, "group": f.group, "status": f.status.as_str(), "required": f.required, "detail": f.detail}))
            .collect();
        print_json(&json!({"features": v, "fallbacks": fallbacks, "ok": missing == 0}));
    } else {
        let color = std::io::stdout().is_terminal();
        say!("{}", render::check(&features, missing, color));
        say!("{}", render::fallbacks(&fallbacks));
    }
    Ok(if missing == 0 { 0 } else { 1 })
}

/// The configured watchdog device: a character device, or the daemon cannot keep it.
fn watchdog(dev: &std::path::Path) -> Feature {
    let (status, detail) = if berth_sys::watchdog::is_char_device(dev) {
        (
            Status::Present,
            format!("{}: a character device", dev.display()),
        )
    } else if dev.exists() {
        (
            Status::Missing,
            format!(
                "{} is not a character device (a file or FIFO: only tests use those)",
                dev.display()
            ),
        )
    } else {
        (
            Status::Missing,
            format!(
                "{} does not exist: load the watchdog driver or fix [watchdog] device",
                dev.display()
            ),
        )
    };
    Feature {
        name: "watchdog device",
        group: "configuration",
        status,
        required: false,
        detail,
    }
}

/// The slab reserve of `[slab]`: the module loaded and every cache's reserve held.
#[cfg(feature = "slab")]
fn slab(p: &berth_core::slab::SlabPolicy, roots: &check::Roots) -> Feature {
    use berth_core::slab::{self, MODULE};
    use berth_sys::kmod;
    let (ok, detail) = if kmod::loaded(&roots.sys, MODULE) {
        let info = roots.proc.join("slabinfo");
        match std::fs::read_to_string(&info) {
            Ok(text) => {
                let state = kmod::param(&roots.sys, MODULE, "state").unwrap_or_default();
                let r = slab::report(p, &text, &state);
                (
                    r.iter().all(|c| c.holds()),
                    r.iter().map(slab::describe).collect::<Vec<_>>().join("; "),
                )
            }
            // 0400: root's only.
            Err(e) => (
                false,
                format!("{MODULE} is loaded; {}: {e}", info.display()),
            ),
        }
    } else {
        let path = std::fs::read_to_string(roots.proc.join("sys/kernel/osrelease"))
            .map_err(|e| format!("the kernel's release: {e}"))
            .and_then(|r| {
                p.module_file(&r, std::path::Path::exists)
                    .map_err(String::from)
            });
        let why = kmod::refusal(&roots.proc).unwrap_or_else(|| match path {
            Ok(f) => format!("the daemon loads it at its start from {}", f.display()),
            Err(e) => e,
        });
        (false, format!("{MODULE} is not loaded: {why}"))
    };
    Feature {
        name: "slab reserve",
        group: "configuration",
        status: if ok { Status::Present } else { Status::Missing },
        required: false,
        detail,
    }
}

fn run_dir(run: &std::path::Path) -> Feature {
    let closed = berth_sys::fsutil::untraversable_ancestor(run);
    Feature {
        name: "run directory traversable",
        group: "configuration",
        status: if closed.is_none() {
            Status::Present
        } else {
            Status::Missing
        },
        required: false,
        detail: match closed {
            None => format!("{}: unprivileged containers can reach their roots", run.display()),
            Some((dir, mode)) => format!(
                "{} (mode {mode:04o}) is not searchable by other users: unprivileged containers cannot start; chmod o+x {} or move [paths] run",
                dir.display(),
                dir.display()
            ),
        },
    }
}
