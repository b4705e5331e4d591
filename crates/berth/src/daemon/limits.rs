//! A container's limits: the manifest's, the operator's overrides (kept per container), the
//! device policy over both, and what the kernel's controllers can enforce.

use berth_core::cgroup::{self as cg, CgroupVersion, Limits, Overrides};
use berth_core::config::Config;
use berth_core::state::Installed;
use berth_sys::fsutil::write_atomic;
use serde_json::Value;

use crate::daemon::cgroups;
use crate::daemon::context::Daemon;
use crate::daemon::error::{Error, Kind, Result};
use crate::daemon::governor;

/// The operator's overrides of a container (an absent or unreadable file: none).
pub(crate) fn load_overrides(cfg: &Config, name: &str) -> Overrides {
    std::fs::read(cfg.paths.limits_file(name))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| Overrides::from_json(&v))
        .unwrap_or_default()
}

/// A container's limits now: manifest, overrides, policy.
pub(crate) fn limits_of(d: &Daemon, p: &Installed, ov: &Overrides) -> Result<Limits> {
    cg::container_limits(&p.manifest.resources, ov, &d.cfg.policy, d.resources.host)
        .map_err(|e| Error::new(Kind::BeyondPolicy, format!("{}: {e}", p.name.as_str())))
}

/// For the LXC configuration at start: the limits, in the host's cgroup version.
pub(crate) fn start_limits(d: &Daemon, p: &Installed) -> Result<Option<(CgroupVersion, Limits)>> {
    let limits = limits_of(d, p, &load_overrides(&d.cfg, p.name.as_str()))?;
    let Ok(c) = &d.resources.cgroups else {
        return Ok(None);
    };
    let (mut l, missing) = cg::enforceable(&limits, &c.available());
    if !missing.is_empty() {
        // Said at each start: limits the manifest asks for that this kernel cannot enforce.
        log::warn!(
            "{}: no {} cgroup controller on this kernel; those limits are not enforced",
            p.name.as_str(),
            missing.join(", ")
        );
    }
    if let Some(cpu) = l.cpu_max_percent {
        l.cpu_max_percent = Some(governor::fit_container_cpu(d, p.name.as_str(), cpu));
    }
    Ok(Some((cgroups::core_version(c), l)))
}

/// Keeps the operator's overrides for the next start.
pub(crate) fn save_overrides(d: &Daemon, name: &str, ov: &Overrides) -> Result<()> {
    let path = d.cfg.paths.limits_file(name);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(Error::internal)?;
    }
    write_atomic(&path, ov.to_json().to_string().as_bytes(), 0o600)
        .map_err(|e| Error::internal(format!("write {}: {e}", path.display())))
}
