//! Container security: the kept capabilities, the seccomp profile, the device allowlist, the
//! user-namespace id map, and what the device policy (`[security]` in berth.toml) may grant a
//! package beyond them. Pure: the daemon writes the profile and appends [`lxc_lines`] to the
//! container's LXC configuration. docs/security.md explains every choice.

use std::fmt::Write as _;

use crate::cgroup::CgroupVersion;
use crate::manifest::Permissions;

/// The default seccomp profile, LXC policy format 2 (a denylist), versioned in its header.
pub const SECCOMP_DEFAULT: &str = include_str!("../data/seccomp-default.policy");
/// The version of [`SECCOMP_DEFAULT`], as `berth inspect` reports it.
pub const SECCOMP_VERSION: &str = "berth-default-2";

/// Capabilities every container keeps (`lxc.cap.keep`); all others are dropped from the
/// bounding set. Enough for a daemon that starts as root, binds a low port and drops to its
/// own user; nothing that reaches past the container.
pub const KEPT_CAPS: &[&str] = &[
    "audit_write",      // PAM-style login records (sshd, su) go to the audit socket
    "chown",            // package set-up: chown its files in /data
    "dac_override",     // root in the container reads and writes its own files regardless
    "fowner",           // chmod/utime on its own files
    "fsetid",           // keep setgid bits on files it creates in /data
    "kill",             // signal its own processes after dropping to another uid
    "net_bind_service", // bind ports below 1024 (httpd on 80)
    "setgid",           // drop to the service's group (mosquitto, httpd -u)
    "setpcap",          // drop capabilities from its own bounding set
    "setuid",           // drop to the service's user
    "sys_chroot",       // daemons that chroot themselves into an empty directory
];

/// Capabilities a package may ask for (`[permissions] capabilities`), granted only when the
/// device policy allows. Never grantable, whatever the policy: sys_admin, sys_module,
/// sys_rawio, sys_boot, mknod, dac_read_search (open_by_handle_at), bpf, perfmon, syslog,
/// mac_admin, mac_override, audit_control, audit_read, sys_pacct, setfcap,
/// checkpoint_restore: each reaches the host kernel or other containers.
pub const GRANTABLE_CAPS: &[&str] = &[
    "block_suspend",
    "ipc_lock",
    "ipc_owner",
    "lease",
    "linux_immutable",
    "net_admin",
    "net_broadcast",
    "net_raw",
    "sys_nice",
    "sys_ptrace",
    "sys_resource",
    "sys_time",
    "sys_tty_config",
    "wake_alarm",
];

/// Syscalls of the default profile a package may ask to have back (`[permissions] syscalls`),
/// granted only when the device policy allows.
pub const GRANTABLE_SYSCALLS: &[&str] = &[
    "adjtimex",
    "clock_adjtime",
    "clock_adjtime64",
    "clock_settime",
    "clock_settime64",
    "settimeofday",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "personality",
    "keyctl",
    "add_key",
    "request_key",
    "userfaultfd",
    "perf_event_open",
];

/// Device nodes every container has (LXC's autodev creates them): type, major, minor.
pub const DEFAULT_DEVICES: &[(&str, char, u32, u32)] = &[
    ("null", 'c', 1, 3),
    ("zero", 'c', 1, 5),
    ("full", 'c', 1, 7),
    ("random", 'c', 1, 8),
    ("urandom", 'c', 1, 9),
    ("tty", 'c', 5, 0),
    ("ptmx", 'c', 5, 2),
];
/// Pseudo-terminal slaves (devpts), any minor.
pub const PTS_MAJOR: u32 = 136;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SecurityError {
    #[error("{package}: {kind} {what} is never granted to a package (docs/security.md lists what can be)")]
    NotGrantable {
        package: String,
        kind: &'static str,
        what: String,
    },
    #[error("{package}: {kind} {what} is not granted by the device policy ([security] {} in berth.toml{})", if *.trusted { "grant_trusted" } else { "grant" }, if *.trusted { "" } else { "; the package is not marked trusted by the repository" })]
    NotGranted {
        package: String,
        kind: &'static str,
        what: String,
        trusted: bool,
    },
}

/// The device policy's `[security]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct SecurityPolicy {
    /// Capabilities, syscalls and device paths (`/dev/…`) granted to any package that asks.
    /// Default none.
    pub grant: Vec<String>,
    /// The same, for packages the signed index marks trusted. Default none: trust lets a
    /// package run privileged and share the host's network, nothing more; every capability,
    /// syscall or device beyond that is granted by name.
    pub grant_trusted: Vec<String>,
    /// Whether a trusted package may run privileged (no user namespace). Default true.
    pub allow_privileged: bool,
    /// Whether `shared` networking is allowed on a kernel that cannot keep such a container
    /// from the other containers' LXC command sockets (Landlock scoping, Linux 6.12).
    /// Default false (`[security] shared_network = "scoped"`).
    pub shared_unscoped: bool,
    /// First host id of the subordinate ranges for unprivileged containers.
    pub idmap_base: u32,
    /// Ids per container: 65536 (uid_t of a classic Unix; what /etc/subuid hands out).
    pub idmap_size: u32,
}

impl Default for SecurityPolicy {
    fn default() -> Self {
        SecurityPolicy {
            grant: Vec::new(),
            grant_trusted: Vec::new(),
            allow_privileged: true,
            shared_unscoped: false,
            idmap_base: 1_000_000,
            idmap_size: 65_536,
        }
    }
}

/// `[security]` as written in berth.toml. Grants are space-separated strings and the
/// privileged policy a word: the value types of the other sections.
#[derive(Default)]
pub struct RawSecurity {
    grant: Option<String>,
    grant_trusted: Option<String>,
    privileged: Option<String>,
    shared_network: Option<String>,
    idmap_base: Option<i64>,
}

fn is_device_path(p: &str) -> bool {
    p.strip_prefix("/dev/").is_some_and(|r| {
        !r.is_empty() && !r.split('/').any(|c| c == ".." || c == "." || c.is_empty())
    }) && !p.contains(['\n', ' ', '\0'])
}

/// A grant string: capabilities, syscalls and device paths, each by name and checked against
/// what can be granted at all (there is no wildcard).
fn grant_list(key: &'static str, v: Option<String>) -> Result<Vec<String>, (&'static str, String)> {
    let v = v.unwrap_or_default();
    let mut out: Vec<String> = Vec::new();
    for x in v.split_whitespace() {
        if !GRANTABLE_CAPS.contains(&x) && !GRANTABLE_SYSCALLS.contains(&x) && !is_device_path(x) {
            return Err((key, format!("{x:?} cannot be granted (docs/security.md)")));
        }
        out.push(x.to_string());
    }
    Ok(out)
}

impl RawSecurity {
    /// Takes the section's keys from the document tree.
    pub fn read(t: &mut crate::tree::Table) -> Result<RawSecurity, crate::tree::TreeError> {
        let mut text =
            |k| Ok::<_, crate::tree::TreeError>(t.str(k)?.map(toml::Spanned::into_inner));
        let grant = text("grant")?;
        let grant_trusted = text("grant_trusted")?;
        let privileged = text("privileged")?;
        let shared_network = text("shared_network")?;
        Ok(RawSecurity {
            grant,
            grant_trusted,
            privileged,
            shared_network,
            idmap_base: t.int("idmap_base")?.map(toml::Spanned::into_inner),
        })
    }

    /// Validates: `Err((key, message))` names the offending key.
    pub fn validate(self) -> Result<SecurityPolicy, (&'static str, String)> {
        let d = SecurityPolicy::default();
        let idmap_base = match self.idmap_base {
            None => d.idmap_base,
            Some(n) if (65_536..=4_000_000_000).contains(&n) => n as u32,
            Some(_) => {
                return Err((
                    "security.idmap_base",
                    "must be between 65536 and 4000000000".into(),
                ))
            }
        };
        let allow_privileged = match self.privileged.as_deref() {
            None | Some("trusted") => true,
            Some("never") => false,
            Some(v) => {
                return Err((
                    "security.privileged",
                    format!("{v:?}: \"trusted\" (packages the index marks trusted) or \"never\""),
                ))
            }
        };
        let shared_unscoped = match self.shared_network.as_deref() {
            None | Some("scoped") => false,
            Some("unscoped") => true,
            Some(v) => {
                return Err((
                    "security.shared_network",
                    format!("{v:?}: \"scoped\" (only where the kernel scopes abstract sockets) or \"unscoped\""),
                ))
            }
        };
        Ok(SecurityPolicy {
            grant: grant_list("security.grant", self.grant)?,
            grant_trusted: grant_list("security.grant_trusted", self.grant_trusted)?,
            allow_privileged,
            shared_unscoped,
            idmap_base,
            idmap_size: d.idmap_size,
        })
    }
}

/// What a package gets: the effective capability set, the syscalls given back, the devices.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Grants {
    /// Sorted, without duplicates: [`KEPT_CAPS`] plus what was granted.
    pub capabilities: Vec<String>,
    pub syscalls: Vec<String>,
    pub devices: Vec<String>,
}

/// Checks a package's `[permissions]` against the allowlists and the device policy: at install
/// (a refusal names the reason) and again at every start (the policy may have changed).
pub fn grants(
    package: &str,
    perms: &Permissions,
    trusted: bool,
    policy: &SecurityPolicy,
) -> Result<Grants, SecurityError> {
    let check = |kind: &'static str, what: &String, grantable: bool| {
        if !grantable {
            return Err(SecurityError::NotGrantable {
                package: package.to_string(),
                kind,
                what: what.clone(),
            });
        }
        if policy.grant.contains(what) || (trusted && policy.grant_trusted.contains(what)) {
            Ok(())
        } else {
            Err(SecurityError::NotGranted {
                package: package.to_string(),
                kind,
                what: what.clone(),
                trusted,
            })
        }
    };
    let mut caps: Vec<String> = KEPT_CAPS.iter().map(|s| s.to_string()).collect();
    for c in &perms.capabilities {
        if !KEPT_CAPS.contains(&c.as_str()) {
            check("capability", c, GRANTABLE_CAPS.contains(&c.as_str()))?;
            caps.push(c.clone());
        }
    }
    caps.sort_unstable();
    caps.dedup();
    for s in &perms.syscalls {
        check("syscall", s, GRANTABLE_SYSCALLS.contains(&s.as_str()))?;
    }
    for dev in &perms.devices {
        check("device", dev, true)?;
    }
    Ok(Grants {
        capabilities: caps,
        syscalls: perms.syscalls.clone(),
        devices: perms.devices.clone(),
    })
}

/// The seccomp profile of a container: the default one without the lines of the syscalls
/// the package was granted.
pub fn seccomp_profile(granted: &[String]) -> String {
    let mut out = String::with_capacity(SECCOMP_DEFAULT.len());
    for line in SECCOMP_DEFAULT.lines() {
        let name = line.split(' ').next().unwrap_or("");
        if line.contains(" errno ") && granted.iter().any(|g| g == name) {
            let _ = writeln!(out, "# granted to the package: {name}");
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Subordinate id ranges: container name → slot; slot n maps container ids 0..size to host
/// ids `base + n * size`. Persisted in the state directory (one `NAME SLOT` line each), so
/// /data keeps its owner.
pub type IdSlots = Vec<(String, u32)>;

pub fn parse_slots(text: &str) -> IdSlots {
    text.lines()
        .filter_map(|l| {
            let (n, s) = l.split_once(' ')?;
            Some((n.to_string(), s.parse().ok()?))
        })
        .collect()
}

pub fn format_slots(slots: &IdSlots) -> String {
    slots.iter().map(|(n, s)| format!("{n} {s}\n")).collect()
}

/// The slot of `name`, allocating the lowest free one. Returns (slot, whether it is new).
pub fn id_slot(slots: &mut IdSlots, name: &str) -> (u32, bool) {
    if let Some((_, s)) = slots.iter().find(|(n, _)| n == name) {
        return (*s, false);
    }
    let mut n = 0;
    while slots.iter().any(|(_, v)| *v == n) {
        n += 1;
    }
    slots.push((name.to_string(), n));
    (n, true)
}

/// The host id a file owned by host id `uid` gets when /data moves to the range at `base`
/// (from privileged ids, or from another slot of the same policy).
pub fn shift_id(uid: u32, policy: &SecurityPolicy, base: u32) -> u32 {
    let c = if uid >= policy.idmap_base {
        (uid - policy.idmap_base) % policy.idmap_size
    } else {
        uid.min(policy.idmap_size - 1)
    };
    base + c
}

/// The AppArmor profile template; `@NAME@` is the container's name, `@PROFILE@` the
/// profile's.
pub const APPARMOR_TEMPLATE: &str = include_str!("../data/apparmor.profile.in");

/// The AppArmor profile of a container and its name. Profiles are the kernel's, one
/// namespace for the whole machine: a device's berth (cgroup parent `berth`) names them
/// `berth-NAME`; any other instance on the machine (a test's sandbox, a demo beside the
/// device's) `PARENT.NAME`, so that its `web` never replaces, or unloads, another's. Container
/// names are `[a-z0-9-]` and parents `[A-Za-z0-9._-]`, safe inside the profile text; the dot
/// keeps the two forms apart.
pub fn apparmor_profile(cgroup_parent: &str, container: &str) -> (String, String) {
    let name = match cgroup_parent {
        "berth" => format!("berth-{container}"),
        other => format!("{other}.{container}"),
    };
    let text = APPARMOR_TEMPLATE
        .replace("@PROFILE@", &name)
        .replace("@NAME@", container);
    (name, text)
}

/// A device node to give a container, resolved on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceNode {
    pub path: String,
    /// 'c' or 'b'.
    pub kind: char,
    pub major: u32,
    pub minor: u32,
}

/// How a container is isolated, as the LXC configuration says it.
pub struct SecurityPlan<'a> {
    pub grants: &'a Grants,
    /// Where the daemon wrote [`seccomp_profile`].
    pub seccomp_path: &'a str,
    /// The cgroup version whose device controller is usable (None: no device cgroup).
    pub devices_cgroup: Option<CgroupVersion>,
    /// The granted devices, resolved.
    pub devices: &'a [DeviceNode],
    /// (first host id, count) for an unprivileged container; None: privileged.
    pub idmap: Option<(u32, u32)>,
    /// The AppArmor profile loaded for the container (None: the kernel has no AppArmor).
    pub apparmor: Option<&'a str>,
}

/// Device cgroup rules: deny everything, then allow the defaults and the granted nodes.
pub fn device_rules(devices: &[DeviceNode]) -> Vec<String> {
    let mut rules = vec!["a".to_string()];
    for (_, kind, major, minor) in DEFAULT_DEVICES {
        rules.push(format!("{kind} {major}:{minor} rwm"));
    }
    rules.push(format!("c {PTS_MAJOR}:* rwm"));
    for d in devices {
        rules.push(format!("{} {}:{} rw", d.kind, d.major, d.minor));
    }
    rules
}

/// The security part of a container's LXC configuration (`key = value` lines); it replaces
/// any capability setting of [`crate::plan::lxc_config`].
pub fn lxc_lines(p: &SecurityPlan) -> String {
    let mut out = String::new();
    let mut line = |k: &str, v: &str| {
        let _ = writeln!(out, "{k} = {v}");
    };
    line("lxc.cap.keep", &p.grants.capabilities.join(" "));
    line("lxc.seccomp.profile", p.seccomp_path);
    // LXC skips the profile when the monitor is already under a seccomp filter (a daemon
    // started by procd or systemd with a syscall filter, or the old-kernel test mode)
    // unless nesting is allowed: the filter then stacks on the inherited one.
    line("lxc.seccomp.allow_nesting", "1");
    if let Some(v) = p.devices_cgroup {
        let prefix = match v {
            CgroupVersion::V1 => "lxc.cgroup.devices",
            CgroupVersion::V2 => "lxc.cgroup2.devices",
        };
        for (i, r) in device_rules(p.devices).iter().enumerate() {
            let kind = if i == 0 { "deny" } else { "allow" };
            line(&format!("{prefix}.{kind}"), r);
        }
    }
    for d in p.devices {
        let rel = d.path.trim_start_matches('/');
        line(
            "lxc.mount.entry",
            &format!("{} {rel} none bind,create=file 0 0", d.path),
        );
    }
    if let Some(profile) = p.apparmor {
        line("lxc.apparmor.profile", profile);
        line("lxc.apparmor.allow_incomplete", "0");
    }
    if let Some((base, count)) = p.idmap {
        line("lxc.idmap", &format!("u 0 {base} {count}"));
        line("lxc.idmap", &format!("g 0 {base} {count}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perms(caps: &[&str], sys: &[&str], dev: &[&str]) -> Permissions {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect();
        Permissions {
            capabilities: v(caps),
            syscalls: v(sys),
            devices: v(dev),
            api: vec![],
        }
    }

    #[test]
    fn kept_and_grantable_sets_are_disjoint_and_exclude_host_reaching_caps() {
        for c in KEPT_CAPS.iter().chain(GRANTABLE_CAPS) {
            assert!(crate::manifest::CAPABILITIES.contains(c), "{c}");
        }
        for c in [
            "sys_admin",
            "sys_module",
            "sys_rawio",
            "sys_boot",
            "mknod",
            "dac_read_search",
            "bpf",
            "perfmon",
            "net_raw",
            "net_admin",
            "sys_time",
            "sys_ptrace",
        ] {
            assert!(!KEPT_CAPS.contains(&c), "{c}");
        }
        for c in GRANTABLE_CAPS {
            assert!(!KEPT_CAPS.contains(c), "{c}");
        }
        for c in ["sys_admin", "sys_module", "mknod", "dac_read_search", "bpf"] {
            assert!(!GRANTABLE_CAPS.contains(&c), "{c}");
        }
    }

    #[test]
    fn grant_trusted_grants_to_trusted_packages_only() {
        let pol = SecurityPolicy {
            grant_trusted: vec!["net_admin".into(), "net_raw".into()],
            ..SecurityPolicy::default()
        };
        let p = perms(&["net_admin", "net_raw"], &[], &[]);
        let g = grants("fw", &p, true, &pol).unwrap();
        assert!(g.capabilities.contains(&"net_admin".to_string()));
        assert!(g.capabilities.contains(&"net_raw".to_string()));
        assert!(g.capabilities.contains(&"setuid".to_string()));
        let e = grants("fw", &p, false, &pol).unwrap_err();
        assert_eq!(
            e.to_string(),
            "fw: capability net_admin is not granted by the device policy ([security] grant in berth.toml; the package is not marked trusted by the repository)"
        );
        // kept capabilities need no grant
        assert!(grants("web", &perms(&["net_bind_service"], &[], &[]), false, &pol).is_ok());
    }

    /// Trust is not a blank cheque: under the default policy a trusted package that asks for
    /// the clock, the keyring or the host's network administration is refused, by name.
    #[test]
    fn default_policy_grants_trusted_packages_nothing_by_default() {
        let pol = SecurityPolicy::default();
        assert!(pol.grant_trusted.is_empty());
        for (caps, sys) in [
            (&["sys_time"][..], &[][..]),
            (&["net_admin"], &[]),
            (&["net_raw"], &[]),
            (&[], &["settimeofday"]),
            (&[], &["clock_settime"]),
            (&[], &["keyctl"]),
            (&[], &["add_key"]),
        ] {
            let e = grants("vpn", &perms(caps, sys, &[]), true, &pol).unwrap_err();
            assert!(
                matches!(e, SecurityError::NotGranted { trusted: true, .. }),
                "{caps:?} {sys:?}: {e}"
            );
        }
    }

    #[test]
    fn outside_the_allowlists_is_refused_even_for_trusted() {
        let pol = SecurityPolicy::default();
        let e = grants("x", &perms(&["sys_admin"], &[], &[]), true, &pol).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("x: capability sys_admin is never granted to a package"),
            "{e}"
        );
        let e = grants("x", &perms(&[], &["init_module"], &[]), true, &pol).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("x: syscall init_module is never granted"),
            "{e}"
        );
        let e = grants("x", &perms(&[], &[], &["/dev/sda"]), true, &pol).unwrap_err();
        assert!(
            e.to_string().contains("device /dev/sda is not granted")
                && e.to_string().contains("grant_trusted"),
            "{e}"
        );
        let e = grants("x", &perms(&[], &["ptrace"], &[]), false, &pol).unwrap_err();
        assert!(
            e.to_string().contains("syscall ptrace is not granted"),
            "{e}"
        );
    }

    /// `[security]` read the way berth.toml's reader does.
    fn raw_security(text: &str) -> Result<RawSecurity, crate::tree::TreeError> {
        let mut t = crate::tree::parse(text).unwrap();
        let raw = RawSecurity::read(&mut t)?;
        t.finish()?;
        Ok(raw)
    }

    #[test]
    fn policy_grants_to_any_package() {
        let raw = raw_security(
            "privileged = \"never\"\ngrant = \"sys_time clock_settime /dev/ttyUSB0\"\n",
        )
        .unwrap();
        let pol = raw.validate().unwrap();
        assert!(!pol.allow_privileged);
        let g = grants(
            "ntp",
            &perms(&["sys_time"], &["clock_settime"], &["/dev/ttyUSB0"]),
            false,
            &pol,
        )
        .unwrap();
        assert_eq!(g.syscalls, ["clock_settime"]);
        assert_eq!(g.devices, ["/dev/ttyUSB0"]);
        let prof = seccomp_profile(&g.syscalls);
        assert!(!prof.contains("\nclock_settime errno"));
        assert!(prof.contains("\nclock_settime64 errno 1\n"));
        assert!(prof.contains("# granted to the package: clock_settime\n"));
    }

    #[test]
    fn policy_refuses_what_cannot_be_granted() {
        let bad = |t: &str| raw_security(t).unwrap().validate().unwrap_err();
        assert_eq!(bad("grant = \"sys_admin\"").0, "security.grant");
        let (key, msg) = bad("grant_trusted = \"ptrace mount\"");
        assert_eq!(key, "security.grant_trusted");
        assert!(msg.starts_with("\"mount\" cannot be granted"), "{msg}");
        assert_eq!(bad("grant = \"/dev/../etc/x\"").0, "security.grant");
        assert_eq!(bad("grant = \"/dev/\"").0, "security.grant");
        assert_eq!(bad("idmap_base = 1000").0, "security.idmap_base");
        assert_eq!(bad("privileged = \"always\"").0, "security.privileged");
        assert_eq!(
            bad("shared_network = \"open\"").0,
            "security.shared_network"
        );
        // grants are by name only: granting one thing grants nothing else
        let p = raw_security("grant_trusted = \"/dev/net/tun\"")
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!(p.grant_trusted, ["/dev/net/tun"]);
        assert!(!p.shared_unscoped);
        let p = raw_security("grant_trusted = \"net_raw\"\nshared_network = \"unscoped\"")
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!(p.grant_trusted, ["net_raw"]);
        assert!(p.shared_unscoped);
        assert!(raw_security("allow_all = true").is_err());
    }

    #[test]
    fn default_profile_denies_the_documented_calls() {
        let prof = seccomp_profile(&[]);
        assert!(prof.starts_with("2\ndenylist\n"));
        let denied: Vec<&str> = prof
            .lines()
            .filter(|l| l.contains(" errno "))
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        for s in [
            "init_module",
            "finit_module",
            "kexec_load",
            "kexec_file_load",
            "reboot",
            "swapon",
            "swapoff",
            "io_uring_setup",
            "io_uring_enter",
            "io_uring_register",
            "fanotify_init",
            "pidfd_getfd",
            "bpf",
            "perf_event_open",
            "keyctl",
            "add_key",
            "request_key",
            "userfaultfd",
            "iopl",
            "ioperm",
            "settimeofday",
            "clock_settime",
            "adjtimex",
            "clock_adjtime",
            "mount",
            "umount2",
            "pivot_root",
            "move_mount",
            "open_tree",
            "fsopen",
            "open_by_handle_at",
            "name_to_handle_at",
            "acct",
            "quotactl",
            "lookup_dcookie",
            "personality",
            "unshare",
            "setns",
            "kcmp",
            "process_vm_readv",
            "process_vm_writev",
            "ptrace",
        ] {
            assert!(denied.contains(&s), "{s}");
        }
        // every grantable call is one the profile denies
        for s in GRANTABLE_SYSCALLS {
            assert!(denied.contains(s), "{s}");
        }
        assert!(prof.contains(&format!("version {}", &SECCOMP_VERSION[14..])));
    }

    #[test]
    fn id_slots_are_stable_and_reused() {
        let mut s = IdSlots::new();
        assert_eq!(id_slot(&mut s, "a"), (0, true));
        assert_eq!(id_slot(&mut s, "b"), (1, true));
        assert_eq!(id_slot(&mut s, "a"), (0, false));
        s.retain(|(n, _)| n != "a");
        assert_eq!(id_slot(&mut s, "c"), (0, true));
        let text = format_slots(&s);
        assert_eq!(text, "b 1\nc 0\n");
        assert_eq!(parse_slots(&text), s);
        assert_eq!(parse_slots("junk\nx 3\ny z\n"), vec![("x".to_string(), 3)]);
        let p = SecurityPolicy::default();
        assert_eq!(shift_id(0, &p, 2_000_000), 2_000_000);
        assert_eq!(shift_id(1000, &p, 2_000_000), 2_001_000);
        assert_eq!(shift_id(1_065_536 + 33, &p, 2_000_000), 2_000_033);
    }

    #[test]
    fn lxc_lines_deny_devices_by_default_on_either_version() {
        let g = grants(
            "web",
            &Permissions::default(),
            false,
            &SecurityPolicy::default(),
        )
        .unwrap();
        let usb = DeviceNode {
            path: "/dev/ttyUSB0".into(),
            kind: 'c',
            major: 188,
            minor: 0,
        };
        let mut p = SecurityPlan {
            grants: &g,
            seccomp_path: "/run/berth/lxc/web/seccomp",
            devices_cgroup: Some(CgroupVersion::V1),
            devices: &[],
            idmap: Some((1_000_000, 65536)),
            apparmor: None,
        };
        let text = lxc_lines(&p);
        assert!(
            text.starts_with("lxc.cap.keep = audit_write chown dac_override "),
            "{text}"
        );
        assert!(text.contains("lxc.seccomp.profile = /run/berth/lxc/web/seccomp\n"));
        assert!(text.contains("lxc.seccomp.allow_nesting = 1\n"));
        assert!(text.contains("lxc.cgroup.devices.deny = a\n"));
        assert!(text.contains("lxc.cgroup.devices.allow = c 1:3 rwm\n"));
        assert!(text.contains("lxc.cgroup.devices.allow = c 136:* rwm\n"));
        assert!(!text.contains("*:*"), "never allow all: {text}");
        assert!(text.contains("lxc.idmap = u 0 1000000 65536\nlxc.idmap = g 0 1000000 65536\n"));
        let devs = [usb];
        p.devices = &devs;
        p.devices_cgroup = Some(CgroupVersion::V2);
        p.idmap = None;
        let text = lxc_lines(&p);
        assert!(text.contains("lxc.cgroup2.devices.deny = a\n"));
        assert!(text.contains("lxc.cgroup2.devices.allow = c 188:0 rw\n"));
        assert!(
            text.contains("lxc.mount.entry = /dev/ttyUSB0 dev/ttyUSB0 none bind,create=file 0 0\n")
        );
        assert!(!text.contains("lxc.idmap"));
        assert!(!text.contains("lxc.cgroup.devices"));
        assert!(!text.contains("lxc.apparmor"));
        p.apparmor = Some("berth-web");
        let text = lxc_lines(&p);
        assert!(
            text.contains("lxc.apparmor.profile = berth-web\nlxc.apparmor.allow_incomplete = 0\n")
        );
    }

    #[test]
    fn apparmor_profile_matches_the_fixture() {
        let (other, _) = apparmor_profile("berth-demo-7", "web");
        assert_eq!(other, "berth-demo-7.web");
        let (name, text) = apparmor_profile("berth", "web");
        assert_eq!(name, "berth-web");
        assert_eq!(text, include_str!("../data/apparmor-web.fixture"));
    }
}
