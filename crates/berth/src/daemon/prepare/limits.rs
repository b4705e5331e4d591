//! A container's limits: the manifest's, the operator's overrides (kept per container), the
//! device policy over both, and what the kernel's controllers can enforce.

use berth_core::cgroup::{self as cg, CgroupVersion, Limits, Overrides};
use berth_core::config::Config;
use berth_core::state::Installed;
use berth_sys::fsutil::write_atomic;
use serde_json::Value;

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::device::cgroups;
use crate::daemon::device::governor;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::testing::{fake_daemon, install, MANIFEST};

    const POLICY: &str =
        "[policy]\ncpu_max = \"100%\"\nmemory_budget = \"256M\"\ncontainer_cpu_max = \"50%\"\n";

    fn manifest() -> String {
        format!("{MANIFEST}[resources]\ncpu_max = \"20%\"\nmemory = \"32M\"\npids = 50\n")
    }

    fn overrides(cpu: Option<u32>, memory: Option<u64>, pids: Option<u32>) -> Overrides {
        Overrides {
            cpu_max_percent: cpu,
            memory_max: memory,
            pids_max: pids,
            ..Overrides::default()
        }
    }

    /// The operator's overrides are kept per container and read back as saved (their
    /// directory made on the way); another container has none.
    #[test]
    fn overrides_read_back_as_saved() {
        let (_dir, d, _) = fake_daemon("limits-save", "");
        assert_eq!(load_overrides(&d.cfg, "web"), Overrides::default());
        let ov = overrides(Some(40), Some(16 << 20), None);
        save_overrides(&d, "web", &ov).unwrap();
        assert_eq!(load_overrides(&d.cfg, "web"), ov);
        assert_eq!(load_overrides(&d.cfg, "db"), Overrides::default());
        let text = std::fs::read_to_string(d.cfg.paths.limits_file("web")).unwrap();
        assert_eq!(text, "{\"cpu_max_percent\":40,\"memory_max\":16777216}");
    }

    /// A damaged or hand-edited file with an unknown key or a wrong type is no override at
    /// all (none is guessed).
    #[test]
    fn a_damaged_overrides_file_is_no_override() {
        let (_dir, d, _) = fake_daemon("limits-damaged", "");
        let path = d.cfg.paths.limits_file("web");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        for text in [
            "{\"cpu_max_percent\": 40",
            "{\"cpu_max_percent\": 40, \"swap\": 1}",
            "{\"memory_max\": \"16M\"}",
            "[40]",
        ] {
            std::fs::write(&path, text).unwrap();
            assert_eq!(
                load_overrides(&d.cfg, "web"),
                Overrides::default(),
                "{text}"
            );
        }
    }

    /// Overrides that cannot be written are an internal error naming the file; what was
    /// there stays.
    #[test]
    fn overrides_that_cannot_be_written_are_an_error_naming_the_file() {
        let (_dir, d, _) = fake_daemon("limits-unwritten", "");
        let path = d.cfg.paths.limits_file("web");
        std::fs::create_dir_all(path.join("inside")).unwrap();
        let e = save_overrides(&d, "web", &overrides(Some(10), None, None)).unwrap_err();
        assert_eq!(e.kind, Kind::Internal);
        assert!(
            e.message
                .starts_with(&format!("write {}: ", path.display())),
            "{}",
            e.message
        );
        assert!(path.join("inside").is_dir());
    }

    /// The manifest's limits, each replaced by the operator's override; with nothing asked
    /// the per-container cap is the limit.
    #[test]
    fn overrides_replace_the_manifests_limits() {
        let (_dir, d, _) = fake_daemon("limits-of", POLICY);
        let p = install(&d, &manifest());
        let l = limits_of(&d, &p, &Overrides::default()).unwrap();
        assert_eq!(
            (l.cpu_max_percent, l.memory_max, l.pids_max),
            (Some(20), Some(32 << 20), Some(50))
        );
        let l = limits_of(&d, &p, &overrides(Some(40), None, Some(10))).unwrap();
        assert_eq!(
            (l.cpu_max_percent, l.memory_max, l.pids_max),
            (Some(40), Some(32 << 20), Some(10))
        );
        let bare = install(&d, MANIFEST);
        let l = limits_of(&d, &bare, &Overrides::default()).unwrap();
        assert_eq!(l.cpu_max_percent, Some(50), "policy.container_cpu_max");
    }

    /// A limit beyond the device policy is refused naming the container and the cap, never
    /// lowered in silence.
    #[test]
    fn a_limit_beyond_the_policy_is_refused_naming_the_cap() {
        let (_dir, d, _) = fake_daemon("limits-beyond", POLICY);
        let p = install(&d, &manifest());
        let e = limits_of(&d, &p, &overrides(Some(60), None, None)).unwrap_err();
        assert_eq!(e.kind, Kind::BeyondPolicy);
        assert_eq!(
            e.message,
            "web: cpu 60% (of one CPU) is beyond the device policy: policy.container_cpu_max = 50% (of one CPU)"
        );
        let e = limits_of(&d, &p, &overrides(None, Some(512 << 20), None)).unwrap_err();
        assert_eq!(e.kind, Kind::BeyondPolicy);
        assert!(
            e.message.starts_with("web: memory ")
                && e.message.ends_with("policy.memory_budget = 256M"),
            "{}",
            e.message
        );
    }

    /// At a start without usable cgroups there are no limits to write, but a saved override
    /// beyond the policy still refuses the start.
    #[test]
    fn without_cgroups_a_start_has_no_limits_but_the_policy_still_holds() {
        let (_dir, d, _) = fake_daemon("limits-start-none", POLICY);
        let p = install(&d, &manifest());
        assert_eq!(start_limits(&d, &p).unwrap(), None);
        save_overrides(&d, "web", &overrides(Some(99), None, None)).unwrap();
        let e = start_limits(&d, &p).unwrap_err();
        assert_eq!(e.kind, Kind::BeyondPolicy);
        assert!(e.message.starts_with("web: cpu 99%"), "{}", e.message);
    }

    /// On a cgroup v2 host (a fixture mountinfo and hierarchy) without the pids controller,
    /// the start's limits are in v2 and leave out the pids limit LXC could not write.
    #[test]
    fn a_start_gets_what_the_hosts_controllers_can_enforce() {
        let (dir, mut d, _) = fake_daemon("limits-start-v2", POLICY);
        let root = dir.path("sys/fs/cgroup");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("cgroup.controllers"), "cpuset cpu io memory\n").unwrap();
        std::fs::create_dir_all(dir.path("proc/self")).unwrap();
        std::fs::write(
            dir.path("proc/self/mountinfo"),
            format!(
                "30 25 0:26 / {} rw,nosuid,nodev,noexec shared:4 - cgroup2 cgroup2 rw,nsdelegate\n",
                root.display()
            ),
        )
        .unwrap();
        d.resources.cgroups =
            berth_sys::cgroupfs::Cgroups::detect(d.proc()).map_err(|e| e.to_string());
        assert!(
            d.resources.cgroups.is_ok(),
            "the fixture is not a cgroup v2 host"
        );
        let p = install(&d, &manifest());
        save_overrides(&d, "web", &overrides(Some(30), None, None)).unwrap();
        let (version, l) = start_limits(&d, &p).unwrap().unwrap();
        assert_eq!(version, CgroupVersion::V2);
        assert_eq!(
            (l.cpu_max_percent, l.memory_max, l.pids_max),
            (Some(30), Some(32 << 20), None)
        );
    }
}
