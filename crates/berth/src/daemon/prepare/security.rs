//! Security at install and at start: a package's permissions against the device policy, its
//! seccomp profile, granted devices, privileged or a user-namespace id map; `berth inspect`.
//! The decisions are berth_core::security's; this file does the I/O around them.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use berth_core::api::inspect::{self as field, idmap, seccomp};
use berth_core::cgroup::CgroupVersion;
use berth_core::config::Config;
use berth_core::manifest::Permissions;
use berth_core::security::{self as sec, DeviceNode, Grants, SecurityPlan};
use berth_core::state::Installed;
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};

fn refused(e: sec::SecurityError) -> Error {
    Error::new(Kind::NotPermitted, e.to_string())
}

/// What a package asks for, checked against the allowlists and the device policy.
pub fn check(cfg: &Config, name: &str, perms: &Permissions, trusted: bool) -> Result<Grants> {
    sec::grants(name, perms, trusted, &cfg.security).map_err(refused)
}

/// The cgroup version whose device controller LXC can use here: a v1 `devices` hierarchy, or
/// cgroup2 (a BPF device program) on a pure-v2 host.
pub fn devices_cgroup(proc: &Path, version: Option<CgroupVersion>) -> Option<CgroupVersion> {
    let text = std::fs::read_to_string(proc.join("self/mounts")).unwrap_or_default();
    let v1 = text.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        f.len() > 3 && f[2] == "cgroup" && f[3].split(',').any(|o| o == "devices")
    });
    match version {
        Some(CgroupVersion::V1) if v1 => Some(CgroupVersion::V1),
        Some(CgroupVersion::V2) => Some(CgroupVersion::V2),
        _ => None,
    }
}

fn resolve_devices(name: &str, paths: &[String]) -> Result<Vec<DeviceNode>> {
    paths
        .iter()
        .map(|p| {
            let md = std::fs::metadata(p).map_err(|e| {
                Error::new(
                    Kind::NoDevice,
                    format!("{name}: device {p}: {e} on this host"),
                )
            })?;
            let kind = if md.file_type().is_char_device() {
                'c'
            } else if md.file_type().is_block_device() {
                'b'
            } else {
                return Err(Error::new(
                    Kind::NoDevice,
                    format!("{name}: {p} is not a device node on this host"),
                ));
            };
            Ok(DeviceNode {
                path: p.clone(),
                kind,
                major: libc::major(md.rdev()),
                minor: libc::minor(md.rdev()),
            })
        })
        .collect()
}

/// Everything `berth inspect` shows and the LXC configuration applies.
pub struct Effective {
    pub grants: Grants,
    pub devices: Vec<DeviceNode>,
    pub idmap: Option<(u32, u32)>,
}

pub fn effective(d: &Daemon, p: &Installed, allocate: bool) -> Result<Effective> {
    let name = p.name.as_str();
    let grants = check(&d.cfg, name, &p.manifest.permissions, p.trusted)?;
    let devices = resolve_devices(name, &grants.devices)?;
    Ok(Effective {
        grants,
        devices,
        idmap: idmap(d, p, allocate)?,
    })
}

/// Whether this kernel lets berth give a container its own user namespace.
pub fn userns_usable(proc: &Path) -> bool {
    proc.join("self/ns/user").exists()
        && std::fs::read_to_string(proc.join("sys/user/max_user_namespaces"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0)
}

fn slots_file(cfg: &Config) -> std::path::PathBuf {
    cfg.paths.state.join("idmap")
}

/// The container's id map (host base, count), or None for a privileged container: only a
/// package the signed index marks trusted, and only when the policy allows privileged ones.
/// `allocate`: persist a new slot (at start); otherwise report what a start would use.
pub fn idmap(d: &Daemon, p: &Installed, allocate: bool) -> Result<Option<(u32, u32)>> {
    let pol = &d.cfg.security;
    let name = p.name.as_str();
    if p.trusted && pol.allow_privileged {
        return Ok(None);
    }
    if !userns_usable(d.proc()) {
        return Err(Error::new(
            Kind::NoUserns,
            format!(
                "{name}: this kernel has no usable user namespaces (see berth check), so only packages the repository marks trusted may run, privileged{}",
                if p.trusted { "; [security] privileged = \"never\" forbids that" } else { "" }
            ),
        ));
    }
    let path = slots_file(&d.cfg);
    let mut slots = sec::parse_slots(&std::fs::read_to_string(&path).unwrap_or_default());
    let (slot, new) = sec::id_slot(&mut slots, name);
    let base = slot
        .checked_mul(pol.idmap_size)
        .and_then(|o| o.checked_add(pol.idmap_base))
        .filter(|b| b.checked_add(pol.idmap_size).is_some())
        .ok_or_else(|| {
            Error::new(
                Kind::NoIds,
                format!("{name}: no subordinate id range left below 2^32 ([security] idmap_base)"),
            )
        })?;
    if new && allocate {
        berth_sys::fsutil::write_atomic(&path, sec::format_slots(&slots).as_bytes(), 0o644)
            .map_err(|e| {
                crate::daemon::device::state::write_failed(d, &path, e, "it did not start")
            })?;
    }
    Ok(Some((base, pol.idmap_size)))
}

/// Before a start, what the host must offer this container: a privileged one sharing the
/// host's network needs a kernel that keeps it from the other containers' LXC command
/// sockets (unless the policy accepts the risk); an unprivileged one needs the run
/// directory's parents searchable by its ids, or LXC fails with an obscure message.
pub fn check_start(d: &Daemon, p: &Installed) -> Result<()> {
    let name = p.name.as_str();
    if p.manifest.network.mode == berth_core::manifest::NetMode::Shared
        && !d.cfg.security.shared_unscoped
        && (!berth_sys::landlock::can_scope_abstract_sockets()
            || crate::hooks::active("landlock.absent"))
    {
        return Err(Error::new(
            Kind::SharedUnscoped,
            format!(
                "{name}: network shared: this kernel cannot keep a container in the host's network namespace from the other containers' LXC command sockets (Landlock {}, needs ABI {} from Linux 6.12); set [security] shared_network = \"unscoped\" in berth.toml to accept that risk (docs/security.md)",
                berth_sys::landlock::abi_version()
                    .map_or("absent".to_string(), |v| format!("ABI {v}")),
                berth_sys::landlock::SCOPE_ABI
            ),
        ));
    }
    if let Some((base, _)) = idmap(d, p, false)? {
        for dir in ["mnt", "rootfs", "data"] {
            if let Some((closed, mode)) =
                berth_sys::fsutil::untraversable_ancestor(&d.cfg.paths.run.join(dir))
            {
                return Err(Error::new(
                    Kind::Untraversable,
                    format!(
                        "{name}: the container's root (host uid {base}) cannot reach its root file system and /data: {} (mode {mode:04o}) is not searchable by other users; chmod o+x {}, or set [paths] run below directories that are (berth check tells)",
                        closed.display(),
                        closed.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Before a start: /data belongs to the ids the container runs with. A directory made for
/// another map (or for a privileged run) is shifted over, without following links.
pub fn own_data(d: &Daemon, p: &Installed, data: &Path) -> Result<()> {
    let Some((base, _)) = idmap(d, p, true)? else {
        return Ok(());
    };
    let pol = &d.cfg.security;
    let want = base + p.manifest.entrypoint.user.min(pol.idmap_size - 1);
    let md = std::fs::symlink_metadata(data).map_err(Error::internal)?;
    if md.uid() == want {
        return Ok(());
    }
    // The container's own tree: walked beneath its top, links changed as themselves, never
    // followed, at any depth the walk's caps allow (a container that nested past them must
    // be purged).
    // The top last: its owner is what says the shift is done, so a daemon killed half-way
    // does the rest at the next start.
    let shift = || -> std::io::Result<()> {
        let top = berth_sys::tree::Dir::open(data)?;
        berth_sys::tree::for_each(&top, &mut |v| {
            let (uid, gid) = (v.stat.uid, v.stat.gid);
            v.dir.chown(
                v.name,
                sec::shift_id(uid, pol, base),
                sec::shift_id(gid, pol, base),
            )
        })?;
        let s = top.stat_self()?;
        let owner = (
            sec::shift_id(s.uid, pol, base),
            sec::shift_id(s.gid, pol, base),
        );
        top.set_attrs(s.mode, Some(owner), None)
    };
    shift().map_err(|e| Error::internal(format!("chown {} for the id map: {e}", data.display())))
}

/// At start: writes the container's seccomp profile next to its LXC configuration and
/// returns the security lines of that configuration.
pub fn lxc_lines(d: &Daemon, p: &Installed, cgroup: Option<CgroupVersion>) -> Result<String> {
    let e = effective(d, p, true)?;
    let dir = d.cfg.paths.lxc_dir(p.name.as_str());
    std::fs::create_dir_all(&dir).map_err(Error::internal)?;
    let profile = dir.join("seccomp");
    berth_sys::fsutil::write_volatile(
        &profile,
        sec::seccomp_profile(&e.grants.syscalls).as_bytes(),
        0o644,
    )
    .map_err(|err| Error::internal(format!("write {}: {err}", profile.display())))?;
    let path = profile.display().to_string();
    let apparmor = if apparmor_enabled(d.sys()) {
        Some(load_apparmor(
            d.host.tools,
            &dir,
            &d.cfg.cgroup_parent,
            p.name.as_str(),
        )?)
    } else if apparmor_without_securityfs(d.sys()) {
        // liblxc sees the module's "Y" too and refuses every start ("Incomplete AppArmor
        // support in your kernel"); no profile can be loaded, so the start fails here, saying
        // what to do.
        return Err(Error::new(
            Kind::Apparmor,
            format!(
                "{}: the kernel enforces AppArmor but securityfs is not mounted ({} is missing): \
                 mount -t securityfs securityfs /sys/kernel/security, or boot with apparmor=0",
                p.name,
                d.sys().join("kernel/security/apparmor").display()
            ),
        ));
    } else {
        None
    };
    Ok(sec::lxc_lines(&SecurityPlan {
        grants: &e.grants,
        seccomp_path: &path,
        devices_cgroup: devices_cgroup(d.proc(), cgroup),
        devices: &e.devices,
        idmap: e.idmap,
        apparmor: apparmor.as_deref(),
    }))
}

/// Whether the running kernel enforces AppArmor.
pub fn apparmor_enabled(sys: &Path) -> bool {
    std::fs::read_to_string(sys.join("module/apparmor/parameters/enabled"))
        .is_ok_and(|v| v.trim() == "Y")
        && sys.join("kernel/security/apparmor").exists()
}

/// The kernel enforces AppArmor, but securityfs is not mounted (a root without AppArmor's
/// userspace, e.g. a router's): no profile can be loaded, and liblxc refuses to start.
pub fn apparmor_without_securityfs(sys: &Path) -> bool {
    std::fs::read_to_string(sys.join("module/apparmor/parameters/enabled"))
        .is_ok_and(|v| v.trim() == "Y")
        && !sys.join("kernel/security/apparmor").exists()
}

/// Writes the container's AppArmor profile next to its LXC configuration and loads (or
/// replaces) it in the kernel; returns its name. A kernel with AppArmor never gets a
/// container without its profile: a failure here fails the start.
fn load_apparmor(
    tools: &dyn berth_sys::host::Tools,
    dir: &Path,
    parent: &str,
    name: &str,
) -> Result<String> {
    let (profile, text) = sec::apparmor_profile(parent, name);
    let file = dir.join("apparmor");
    berth_sys::fsutil::write_volatile(&file, text.as_bytes(), 0o644)
        .map_err(|e| Error::internal(format!("write {}: {e}", file.display())))?;
    let path = file.to_string_lossy();
    let args = ["-r", "-W", path.as_ref()];
    // At most the quick tools' time limit: a start waits for it under the op lock.
    match tools.run("apparmor_parser", &args, None, berth_sys::host::TOOL_LIMIT) {
        Ok(o) if o.status.success() => Ok(profile),
        Ok(o) => Err(Error::new(
            Kind::Apparmor,
            format!(
                "{name}: apparmor_parser refused {} ({}): {}",
                file.display(),
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            ),
        )),
        Err(e) => Err(Error::new(
            Kind::Apparmor,
            format!("{name}: the kernel has AppArmor but apparmor_parser did not run ({}); install apparmor", e.io()),
        )),
    }
}

/// At `berth remove NAME`: unloads the container's AppArmor profile (writing its name to
/// securityfs's `.remove`, so no parser is needed; not loaded is fine), and with `--purge`,
/// once its /data is gone, frees its id range. Without --purge /data stays, owned by those
/// ids, so the range stays reserved: a reinstall gets its data back, and no other container
/// gets ids that own it.
pub fn removed(d: &Daemon, name: &str, purge: bool) {
    unload_apparmor(
        &d.sys().join("kernel/security/apparmor"),
        &d.cfg.cgroup_parent,
        name,
    );
    if purge && !d.cfg.paths.data(name).exists() && !d.cfg.paths.data_image(name).exists() {
        let path = slots_file(&d.cfg);
        let Ok(text) = std::fs::read_to_string(&path) else {
            return;
        };
        let mut slots = sec::parse_slots(&text);
        slots.retain(|(n, _)| n != name);
        if let Err(e) =
            berth_sys::fsutil::write_atomic(&path, sec::format_slots(&slots).as_bytes(), 0o644)
        {
            warnln!(
                "berth: {name}: cannot free its id range in {}: {e}",
                path.display()
            );
        }
    }
}

fn unload_apparmor(securityfs: &Path, parent: &str, name: &str) {
    let f = securityfs.join(".remove");
    if !f.exists() {
        return;
    }
    let profile = sec::apparmor_profile(parent, name).0;
    match std::fs::write(&f, &profile) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            warnln!("berth: {name}: cannot unload AppArmor profile {profile}: {e}")
        }
        _ => {}
    }
}

/// `berth inspect NAME`: the protections a container runs (or would run) with.
pub fn inspect(d: &Daemon, p: &Installed, cgroup: Option<CgroupVersion>) -> Result<Value> {
    let e = effective(d, p, false)?;
    let devcg = devices_cgroup(d.proc(), cgroup);
    let mut devices: Vec<String> = sec::DEFAULT_DEVICES
        .iter()
        .map(|(n, ..)| format!("/dev/{n}"))
        .collect();
    devices.push("/dev/pts/*".into());
    devices.extend(e.devices.iter().map(|n| n.path.clone()));
    let denied: Vec<String> = sec::seccomp_profile(&e.grants.syscalls)
        .lines()
        .filter(|l| l.contains(" errno "))
        .filter_map(|l| l.split(' ').next().map(str::to_string))
        .collect();
    Ok(json!({
        field::NAME: p.name.as_str(),
        field::TRUSTED: p.trusted,
        field::PRIVILEGED: e.idmap.is_none(),
        field::IDMAP: e.idmap.map(|(base, count)| json!({idmap::CONTAINER: 0, idmap::HOST: base, idmap::COUNT: count})),
        field::CAPABILITIES: e.grants.capabilities,
        field::SECCOMP: {
            seccomp::PROFILE: sec::SECCOMP_VERSION,
            seccomp::GRANTED: e.grants.syscalls,
            seccomp::DENIED: denied,
        },
        field::DEVICES: devices,
        field::DEVICES_CGROUP: match devcg {
            Some(CgroupVersion::V1) => "v1",
            Some(CgroupVersion::V2) => "v2 (bpf)",
            None => "none: the kernel has no device controller berth can use",
        },
        field::NO_NEW_PRIVS: true,
        field::APPARMOR: apparmor_enabled(d.sys()).then(|| sec::apparmor_profile(&d.cfg.cgroup_parent, p.name.as_str()).0),
    }))
}

/// `GET /v1/inspect?name=NAME`.
pub fn inspect_op(d: &Daemon, name: &str) -> Result<Value> {
    let p = crate::daemon::device::state::installed(d, name)?;
    inspect(d, &p, crate::daemon::device::cgroups::cgroup_version(d))
}

/// The shim's PATH: the daemon's without the directories of shadow's newuidmap/newgidmap.
/// berth (root) allocates the id ranges itself (state/idmap) and LXC then writes
/// uid_map directly; with newuidmap on PATH, LXC insists on ranges reserved for root in
/// /etc/subuid, a host-wide file berth does not own.
pub fn shim_path() -> String {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    path.split(':')
        .filter(|d| {
            !Path::new(d).join("newuidmap").exists() && !Path::new(d).join("newgidmap").exists()
        })
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generated profile compiles with the real AppArmor parser (without loading it:
    /// this machine's kernel has no AppArmor; the VM harness loads it for real).
    #[test]
    fn apparmor_profile_compiles() {
        let Ok(out) = std::process::Command::new("apparmor_parser")
            .arg("--version")
            .output()
        else {
            berth_sys::skip::record(
                "package apparmor",
                "the AppArmor profile is not compiled: apparmor_parser is not installed",
            );
            return;
        };
        assert!(out.status.success());
        let dir = std::env::temp_dir().join(format!("berth-aa-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("p");
        std::fs::write(&file, sec::apparmor_profile("berth", "web-1").1).unwrap();
        let out = std::process::Command::new("apparmor_parser")
            .args(["-Q", "-K", "-S"])
            .arg(&file)
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stdout.is_empty(), "a compiled policy");
    }

    #[test]
    fn apparmor_is_detected_from_sys() {
        let dir = std::env::temp_dir().join(format!("berth-aa-sys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!apparmor_enabled(&dir));
        std::fs::create_dir_all(dir.join("module/apparmor/parameters")).unwrap();
        std::fs::write(dir.join("module/apparmor/parameters/enabled"), "Y\n").unwrap();
        // enabled, but securityfs not mounted: not usable, and said so
        assert!(!apparmor_enabled(&dir));
        assert!(apparmor_without_securityfs(&dir));
        std::fs::create_dir_all(dir.join("kernel/security/apparmor")).unwrap();
        std::fs::write(dir.join("module/apparmor/parameters/enabled"), "N\n").unwrap();
        assert!(!apparmor_enabled(&dir));
        assert!(!apparmor_without_securityfs(&dir));
        std::fs::write(dir.join("module/apparmor/parameters/enabled"), "Y\n").unwrap();
        assert!(apparmor_enabled(&dir));
        assert!(!apparmor_without_securityfs(&dir));
        // Unloading writes the profile's name to securityfs's .remove, only where it exists
        // (the real kernel is exercised in the VM: scripts/vm/apparmor/).
        let aa = dir.join("kernel/security/apparmor");
        unload_apparmor(&aa, "berth", "web");
        assert!(!aa.join(".remove").exists());
        std::fs::write(aa.join(".remove"), "").unwrap();
        unload_apparmor(&aa, "berth", "web");
        assert_eq!(
            std::fs::read_to_string(aa.join(".remove")).unwrap(),
            "berth-web"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
