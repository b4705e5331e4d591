//! The old-kernel test mode (docs/kernels.md): a process made to look like it runs on Linux
//! 4.14, as crun's tests force ENOSYS. A seccomp filter answers ENOSYS for the syscalls
//! newer than 4.14 that berth, Rust's std, glibc or liblxc may call ([`NEWER_SYSCALLS`];
//! by default all but `close_range`, see [`chosen`]), and
//! a mount namespace of its own hides what `/proc/pressure` holds (no `memory`, `cpu`, `io`:
//! as without CONFIG_PSI; berth then takes cgroup `*.pressure` files as absent too, as
//! the kernel hides them when PSI is off). Both are inherited by everything the process
//! starts: the daemon, its shims, LXC's monitors and the containers.
//!
//! Only tests and `scripts/oldkernel.sh` use this (through berth-testkit, with the
//! `test-support` feature); no build of berth has it.

use std::io;
use std::process::Command;

/// The syscalls a kernel before 5.x lacks, each with the first Linux that has it.
pub const NEWER_SYSCALLS: &[(&str, libc::c_long, &str)] = &[
    ("pidfd_open", libc::SYS_pidfd_open, "5.3"),
    ("pidfd_send_signal", libc::SYS_pidfd_send_signal, "5.1"),
    ("pidfd_getfd", libc::SYS_pidfd_getfd, "5.6"),
    ("open_tree", libc::SYS_open_tree, "5.2"),
    ("move_mount", libc::SYS_move_mount, "5.2"),
    ("fsopen", libc::SYS_fsopen, "5.2"),
    ("fsconfig", libc::SYS_fsconfig, "5.2"),
    ("fsmount", libc::SYS_fsmount, "5.2"),
    ("fspick", libc::SYS_fspick, "5.2"),
    ("mount_setattr", libc::SYS_mount_setattr, "5.12"),
    ("clone3", libc::SYS_clone3, "5.3"),
    ("openat2", libc::SYS_openat2, "5.6"),
    ("close_range", libc::SYS_close_range, "5.9"),
    ("faccessat2", libc::SYS_faccessat2, "5.8"),
];

/// The syscalls the filter answers ENOSYS for: `spec` "all", or names separated by commas
/// (to find which one a failure needs); None: all but `close_range`, which liblxc 5.0.2
/// (Debian 12) needs to start a container at all (its start fails when `close_range(3, ~0,
/// CLOSE_RANGE_UNSHARE)` answers ENOSYS; berth itself never calls it, docs/kernels.md).
pub fn chosen(spec: Option<&str>) -> Vec<libc::c_long> {
    NEWER_SYSCALLS
        .iter()
        .filter(|s| match spec {
            None => s.0 != "close_range",
            Some("all") => true,
            Some(list) => list.split(',').any(|n| n.trim() == s.0),
        })
        .map(|s| s.1)
        .collect()
}

/// The audit architecture of this build: the filter leaves other ABIs alone.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;
#[cfg(target_arch = "arm")]
const AUDIT_ARCH: u32 = 0x4000_0028;
#[cfg(all(target_arch = "mips", target_endian = "little"))]
const AUDIT_ARCH: u32 = 0x4000_0008;
#[cfg(all(target_arch = "mips", target_endian = "big"))]
const AUDIT_ARCH: u32 = 0x0000_0008;
#[cfg(target_arch = "riscv64")]
const AUDIT_ARCH: u32 = 0xC000_00F3;

const SECCOMP_DATA_NR: u32 = 0;
const SECCOMP_DATA_ARCH: u32 = 4;

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

/// The classic BPF program: native ABI and one of `nrs` → ENOSYS, everything else allowed.
pub fn enosys_filter(nrs: &[libc::c_long]) -> Vec<libc::sock_filter> {
    let n = nrs.len();
    let mut p = vec![
        stmt(
            libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
            SECCOMP_DATA_ARCH,
        ),
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 1,
            jf: 0,
            k: AUDIT_ARCH,
        },
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, SECCOMP_DATA_NR),
    ];
    // Instruction 4 + i compares nrs[i]; 4 + n allows; 4 + n + 1 answers ENOSYS.
    for (i, &nr) in nrs.iter().enumerate() {
        p.push(libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: (n - i) as u8,
            jf: 0,
            k: nr as u32,
        });
    }
    p.push(stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW));
    p.push(stmt(
        libc::BPF_RET | libc::BPF_K,
        libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
    ));
    p
}

/// What the child does between fork and exec; only raw syscalls (async-signal-safe).
fn enter(filter: &[libc::sock_filter], hide_psi: bool) -> io::Result<()> {
    if hide_psi {
        // SAFETY: unshare(CLONE_NEWNS) gives this (single-threaded, just forked) process a
        // copy of the mount table; nothing else changes.
        if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let proc_dir = c"/proc";
        let pressure = c"/proc/pressure";
        // /proc a slave first: where the host's /proc is shared, the tmpfs below must not
        // propagate back. On a private /proc this changes nothing.
        // SAFETY: NUL-terminated literals; a propagation change takes no source or data.
        unsafe {
            libc::mount(
                std::ptr::null(),
                proc_dir.as_ptr(),
                std::ptr::null(),
                libc::MS_SLAVE,
                std::ptr::null(),
            )
        };
        // Over /proc/pressure goes a whole proc instance of its own, not an empty tmpfs:
        // the kernel lets a user namespace (an unprivileged container) mount proc only
        // while some proc mount of its mount namespace is fully visible (no mount on a
        // directory that has entries: mount_too_revealing), and a tmpfs there would hide
        // part of /proc. This one has nothing mounted below it; what berth looks up there,
        // "memory", is no entry of a proc root.
        // SAFETY: NUL-terminated literals; proc takes no data.
        let rc = unsafe {
            libc::mount(
                c"proc".as_ptr(),
                pressure.as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            )
        };
        // No /proc/pressure at all: the kernel has no PSI already.
        if rc != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::ENOENT) {
            return Err(io::Error::last_os_error());
        }
    }
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    let install = || {
        // SAFETY: `prog` points at `filter`, alive for the call; the kernel copies it.
        unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            )
        }
    };
    // Root (CAP_SYS_ADMIN) installs a filter without no_new_privs, so the daemon runs as it
    // would on a device; anyone else needs it.
    if install() != 0 {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 || install() != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Makes `cmd` run as on an old kernel: [`NEWER_SYSCALLS`] answer ENOSYS, and with
/// `hide_psi` `/proc/pressure` holds no pressure file in a mount namespace of its own (a copy of the
/// caller's: mounts below a shared mount of the caller still reach it both ways).
pub fn command(cmd: &mut Command, hide_psi: bool) {
    use std::os::unix::process::CommandExt;
    let nrs = chosen(std::env::var("BERTH_OLDKERNEL_SYSCALLS").ok().as_deref());
    let filter = enosys_filter(&nrs);
    // SAFETY: the hook runs in the forked child before exec and only makes raw syscalls
    // (unshare, mount, prctl) on data prepared before the fork; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || enter(&filter, hide_psi));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_answers_enosys_for_each_newer_syscall_and_nothing_else() {
        let sh = |script: &str| {
            let mut c = Command::new("sh");
            c.args(["-c", script]);
            command(&mut c, false);
            c.output().unwrap()
        };
        // A child under the filter: pidfd_open of itself fails with ENOSYS (the probe of
        // berth check says so), ordinary calls work.
        let me = std::env::current_exe().unwrap();
        let out = {
            let mut c = Command::new(&me);
            c.args([
                "--exact",
                "oldkernel::tests::probe_inside",
                "--nocapture",
                "--include-ignored",
            ])
            .env("BERTH_OLDKERNEL_PROBE", "1");
            command(&mut c, false);
            c.output().unwrap()
        };
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("probe: pidfd Missing"), "{text}");
        assert!(text.contains("probe: open_tree Missing"), "{text}");
        assert!(text.contains("probe: mount_setattr Missing"), "{text}");
        assert!(text.contains("probe: getpid ok"), "{text}");
        let o = sh("echo hello");
        assert_eq!(String::from_utf8_lossy(&o.stdout), "hello\n");
    }

    /// Run by the test above inside the filter.
    #[test]
    #[ignore = "runs only inside the filter, started by the test above"]
    fn probe_inside() {
        if std::env::var_os("BERTH_OLDKERNEL_PROBE").is_none() {
            return;
        }
        println!("probe: pidfd {:?}", crate::check::probe_pidfd().0);
        println!("probe: open_tree {:?}", crate::check::probe_open_tree().0);
        println!(
            "probe: mount_setattr {:?}",
            crate::check::probe_mount_setattr().0
        );
        for (name, nr, _) in NEWER_SYSCALLS.iter().filter(|s| s.0 != "close_range") {
            // SAFETY: every argument zero: each of these fails at once (EBADF, EFAULT,
            // EINVAL) when present; under the filter it never reaches the kernel. clone3
            // with a NULL argument fails with EFAULT/EINVAL, creating nothing.
            let rc = unsafe { libc::syscall(*nr, 0, 0, 0, 0, 0) };
            let e = io::Error::last_os_error().raw_os_error();
            assert_eq!((rc, e), (-1, Some(libc::ENOSYS)), "{name}");
        }
        println!(
            "probe: getpid {}",
            if crate::process::getpid() > 0 {
                "ok"
            } else {
                "bad"
            }
        );
    }

    #[test]
    fn the_default_leaves_close_range_to_liblxc() {
        let all = chosen(Some("all"));
        assert_eq!(all.len(), NEWER_SYSCALLS.len());
        let default = chosen(None);
        assert_eq!(default.len(), NEWER_SYSCALLS.len() - 1);
        assert!(!default.contains(&libc::SYS_close_range));
        assert_eq!(
            chosen(Some("clone3, close_range")),
            vec![libc::SYS_clone3, libc::SYS_close_range]
        );
    }

    #[test]
    fn jumps_land_on_the_enosys_return() {
        let p = enosys_filter(&[10, 20, 30]);
        assert_eq!(p.len(), 4 + 3 + 2);
        for (i, ins) in p[4..7].iter().enumerate() {
            let at = 4 + i + 1 + ins.jt as usize;
            assert_eq!(at, p.len() - 1, "instruction {}", 4 + i);
            assert_eq!(p[at].k, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
        }
        assert_eq!(p[7].k, libc::SECCOMP_RET_ALLOW);
    }
}
