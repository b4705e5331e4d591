//! End to end, as root, with real LXC: the container's file system (DESIGN.md decision 3) and
//! what a hostile package cannot gain from it (decision 6). Every check runs a probe script
//! inside a real container and asserts the exact failure the payload sees (busybox's errno
//! text) or its effect on the host.
//!
//! Probes run as root inside the container unless the check is about another user: a package
//! chooses its user, so "even root cannot" is the claim worth testing.

mod common;

use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Shell helpers every probe starts with. `try LABEL CMD` runs CMD (through eval, so it may
/// hold redirections) and prints one line `LABEL: rc=N OUTPUT`.
const PROBE_LIB: &str = r#"
try() {
    label=$1; shift
    out=$(eval "$*" 2>&1); rc=$?
    echo "$label: rc=$rc $(echo "$out" | tr '\n' ' ')"
}
"#;

const END: &str = "PROBE-END";

/// A probe package: PROBE_LIB, then `body`, then the end marker. Stays alive afterwards so
/// the container can be looked at from the host.
fn probe_pkg(name: &str, body: &str) -> Pkg {
    Pkg::script(
        name,
        "1",
        &format!("{PROBE_LIB}\n{body}\necho {END}\nexec sleep 600\n"),
    )
}

/// Installs and starts `name`, returns its log once the probe has finished.
fn run_probe(sb: &Sandbox, name: &str) -> String {
    sb.ok(&["install", name]);
    sb.ok(&["start", name]);
    sb.wait_log(name, END)
}

/// The `try` line of `label`.
fn line<'a>(log: &'a str, label: &str) -> &'a str {
    let prefix = format!("{label}: ");
    log.lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("probe printed no {label:?} line:\n{log}"))
}

/// Asserts that the probe step `label` failed with a message containing `msg`.
fn assert_fails(log: &str, label: &str, msg: &str) {
    let l = line(log, label);
    assert!(
        !l.starts_with(&format!("{label}: rc=0 ")),
        "{label} succeeded inside the container: {l}\n{log}"
    );
    assert!(
        l.to_lowercase().contains(&msg.to_lowercase()),
        "{label}: expected {msg:?}: {l}"
    );
}

/// Asserts that the probe step `label` succeeded; returns its output.
fn assert_ok<'a>(log: &'a str, label: &str) -> &'a str {
    let l = line(log, label);
    let prefix = format!("{label}: rc=0 ");
    assert!(l.starts_with(&prefix), "{label} failed: {l}\n{log}");
    l[prefix.len()..].trim()
}

/// The package tree the harness built for `p`.
fn src_dir(sb: &Sandbox, p: &Pkg) -> PathBuf {
    sb.dir.join("src").join(format!("{}-{}", p.name, p.version))
}

/// Packs `p`, lets `tweak` add what the harness cannot express (modes, device nodes,
/// symlinks) to its tree, packs it again as a vendor would and rebuilds the repository.
/// Returns `berth pack`'s stderr: its warnings.
fn pack_tweaked(sb: &Sandbox, p: &Pkg, tweak: impl FnOnce(&Path)) -> String {
    let out = sb.pack(p);
    let dir = src_dir(sb, p);
    tweak(&dir);
    let o = sb.berth(&["pack", dir.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "pack {}: {}", p.name, stderr(&o));
    sb.build_repo();
    stderr(&o)
}

fn run(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(o.status.success(), "{cmd:?}: {}", stderr(&o));
    stdout(&o)
}

fn sha256_of(path: &Path) -> String {
    run(Command::new("sha256sum").arg(path))
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// Waits until `name` is stopped with an exit recorded; returns its status.
fn wait_stopped(sb: &Sandbox, name: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let st = sb.status_of(name);
        if st["state"] == "stopped" && !st["last_exit"].is_null() {
            return st;
        }
        assert!(Instant::now() < deadline, "{name} never stopped: {st}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A static program that prints its real and effective uid: busybox drops a setuid bit by
/// itself (FEATURE_SUID), so it cannot show whether the kernel honoured one.
fn euid_probe(dir: &Path) -> Vec<u8> {
    let src = dir.join("euid.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <unistd.h>\nint main(void) {\n\
         printf(\"uid=%d euid=%d\\n\", (int)getuid(), (int)geteuid());\nreturn 0;\n}\n",
    )
    .unwrap();
    let bin = dir.join("euid");
    run(Command::new("cc")
        .args(["-static", "-Os", "-o"])
        .arg(&bin)
        .arg(&src));
    std::fs::read(&bin).unwrap()
}

/// The ELF interpreter (PT_INTERP) of a 64-bit little-endian executable, if it has one.
fn elf_interpreter(elf: &[u8]) -> Option<String> {
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    assert!(
        elf.starts_with(b"\x7fELF\x02\x01"),
        "not a 64-bit little-endian ELF"
    );
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    (0..phnum)
        .map(|i| phoff + i * phentsize)
        .find(|&ph| u32_at(ph) == 3)
        .map(|ph| {
            let (off, size) = (u64_at(ph + 8), u64_at(ph + 32));
            String::from_utf8_lossy(&elf[off..off + size])
                .trim_end_matches('\0')
                .to_string()
        })
}

// ---------------------------------------------------------------------------------------------

#[test]
fn package_tree_is_read_only_even_for_root() {
    let mut sb = Sandbox::new("fs-ro");
    sb.add(&probe_pkg(
        "ro",
        r#"
try whoami 'id -u'
try newfile 'echo x > /newfile'
try mkdir 'busybox mkdir /newdir'
try append 'echo x >> /bin/busybox'
try unlink 'busybox rm -f /bin/sh'
try chmod 'busybox chmod 4777 /bin/busybox'
try remount 'busybox mount -o remount,rw /'
try remount-bind 'busybox mount -o remount,bind,rw /'
try after 'echo x > /newfile'
"#,
    ));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "ro"]);
    let sha = sb.status_of("ro")["image"].as_str().unwrap().to_string();
    let image = sb.state_dir().join(format!("store/{sha}.sqfs"));
    assert_eq!(sha256_of(&image), sha, "store image is named by its hash");

    let log = run_probe(&sb, "ro");
    assert_eq!(assert_ok(&log, "whoami"), "0");
    assert_fails(
        &log,
        "newfile",
        "can't create /newfile: Read-only file system",
    );
    assert_fails(&log, "mkdir", "Read-only file system");
    assert_fails(
        &log,
        "append",
        "can't create /bin/busybox: Read-only file system",
    );
    assert_fails(&log, "unlink", "Read-only file system");
    assert_fails(&log, "chmod", "Read-only file system");
    // Without CAP_SYS_ADMIN the mount(2) itself is refused (busybox's text for EPERM).
    assert_fails(&log, "remount", "permission denied");
    assert_fails(&log, "remount-bind", "permission denied");
    assert_fails(&log, "after", "Read-only file system");

    sb.ok(&["stop", "ro"]);
    assert_eq!(sha256_of(&image), sha, "the store image changed");
}

#[test]
fn setuid_bits_in_a_package_give_nothing() {
    let mut sb = Sandbox::new("fs-suid");
    let p = probe_pkg(
        "suid",
        r#"
try mode 'busybox stat -c "%A %u" /bin/euid'
try bb-id 'busybox.suid id -u'
try euid '/bin/euid'
"#,
    )
    .entrypoint_key("user = 1000")
    .entrypoint_key("group = 1000");
    let probe = euid_probe(&sb.dir);
    let warnings = pack_tweaked(&sb, &p, |dir| {
        for (f, data) in [
            ("bin/busybox.suid", std::fs::read(busybox()).unwrap()),
            ("bin/euid", probe),
        ] {
            let f = dir.join(f);
            std::fs::write(&f, data).unwrap();
            std::os::unix::fs::chown(&f, Some(0), Some(0)).unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o4755)).unwrap();
        }
    });
    for f in ["bin/busybox.suid", "bin/euid"] {
        assert!(
            warnings.contains(&format!(
                "warning: {f} is setuid: ignored on the device (packages are mounted nosuid)"
            )),
            "{warnings}"
        );
    }
    // Control: on the host the probe does reveal a setuid bit.
    let host = run(std::os::unix::process::CommandExt::gid(
        std::os::unix::process::CommandExt::uid(
            &mut Command::new(src_dir(&sb, &p).join("bin/euid")),
            1000,
        ),
        1000,
    ));
    assert_eq!(host.trim(), "uid=1000 euid=0", "probe does not work here");

    sb.start_daemon();
    sb.ok(&["update"]);
    let log = run_probe(&sb, "suid");
    // The bit is in the image; the mount (nosuid) and no_new_privs make it inert. The owner
    // is the host's root, which an unprivileged container (own user namespace) sees as the
    // overflow id 65534.
    assert_eq!(assert_ok(&log, "mode"), "-rwsr-xr-x 65534");
    assert_eq!(assert_ok(&log, "bb-id"), "1000");
    assert_eq!(assert_ok(&log, "euid"), "uid=1000 euid=1000");
}

#[test]
fn device_nodes_are_inert_and_cannot_be_made() {
    let mut sb = Sandbox::new("fs-nodev");
    let p = probe_pkg(
        "nodev",
        r#"
try shipped-read 'busybox head -c 1 /etc/null'
try shipped-write 'echo x > /etc/null'
try mknod-tmp 'busybox mknod /tmp/null c 1 3'
try made 'busybox test -e /tmp/null'
try mknod-dev 'busybox mknod /dev/kmsg c 1 11'
try mknod-data 'busybox mknod /data/disk b 254 0'
"#,
    );
    let warnings = pack_tweaked(&sb, &p, |dir| {
        std::fs::create_dir_all(dir.join("etc")).unwrap();
        run(Command::new("mknod")
            .arg(dir.join("etc/null"))
            .args(["c", "1", "3"]));
    });
    assert!(
        warnings.contains(
            "warning: etc/null is a device node: unusable on the device (packages are mounted nodev)"
        ),
        "{warnings}"
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    let log = run_probe(&sb, "nodev");
    assert_fails(&log, "shipped-read", "/etc/null: Permission denied");
    assert_fails(
        &log,
        "shipped-write",
        "can't create /etc/null: Permission denied",
    );
    // Root in the container has no CAP_MKNOD: no node anywhere, not even on a dev mount.
    assert_fails(&log, "mknod-tmp", "Operation not permitted");
    assert_fails(&log, "made", "");
    assert_fails(&log, "mknod-dev", "Operation not permitted");
    assert_fails(&log, "mknod-data", "Operation not permitted");
    assert!(!sb.state_dir().join("data/nodev/disk").exists());
}

#[test]
fn tmp_and_run_are_small_private_tmpfs() {
    let mut sb = Sandbox::new("fs-tmp");
    sb.write_config("tmp_size = \"1M\"\nrun_size = \"1M\"");
    sb.add(&probe_pkg(
        "tmpfs",
        r#"
try tmp-write 'echo hello > /tmp/small && busybox cat /tmp/small'
try run-write 'echo hello > /run/small && busybox cat /run/small'
try tmp-fill 'busybox dd if=/dev/zero of=/tmp/big bs=64k count=32'
try run-fill 'busybox dd if=/dev/zero of=/run/big bs=64k count=32'
try tmp-mount 'busybox grep " /tmp " /proc/mounts | busybox tail -n 1'
try run-mount 'busybox grep " /run " /proc/mounts | busybox tail -n 1'
"#,
    ));
    sb.start_daemon();
    sb.ok(&["update"]);
    let log = run_probe(&sb, "tmpfs");
    assert_eq!(assert_ok(&log, "tmp-write"), "hello");
    assert_eq!(assert_ok(&log, "run-write"), "hello");
    assert_fails(&log, "tmp-fill", "No space left on device");
    assert_fails(&log, "run-fill", "No space left on device");
    for (label, dir) in [("tmp-mount", "/tmp"), ("run-mount", "/run")] {
        let m = assert_ok(&log, label);
        assert!(m.starts_with(&format!("tmpfs {dir} tmpfs ")), "{m}");
        let opts: Vec<&str> = m.split(' ').nth(3).unwrap().split(',').collect();
        for o in ["rw", "nosuid", "nodev", "size=1024k"] {
            assert!(opts.contains(&o), "{dir} lacks {o}: {m}");
        }
    }
    // Private to the container: nothing reached the host.
    assert!(!Path::new("/tmp/small").exists() && !Path::new("/tmp/big").exists());
}

#[test]
fn data_persists_belongs_to_the_payload_and_is_the_only_persistent_place() {
    let mut sb = Sandbox::new("fs-data");
    sb.add(
        &probe_pkg(
            "keeper",
            r#"
echo run >> /data/runs
echo run >> /tmp/runs
echo "data-runs=$(busybox wc -l < /data/runs) tmp-runs=$(busybox wc -l < /tmp/runs)"
try whoami 'echo $(id -u):$(id -g)'
try owner 'busybox stat -c "%u:%g %a" /data'
try rw-mounts 'busybox awk "\$4 ~ /^rw/ { print \$2 \" \" \$3 }" /proc/mounts | busybox sort -u'
try flags 'busybox grep " /data " /proc/mounts | busybox tail -n 1'
"#,
        )
        .entrypoint_key("user = 1000")
        .entrypoint_key("group = 1001"),
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    let log = run_probe(&sb, "keeper");
    assert!(log.contains("data-runs=1 tmp-runs=1"), "{log}");
    assert_eq!(assert_ok(&log, "whoami"), "1000:1001");
    assert_eq!(assert_ok(&log, "owner"), "1000:1001 750");
    // Writable mounts: /data is the only one backed by storage; the rest vanish at stop.
    let rw = assert_ok(&log, "rw-mounts");
    let words: Vec<&str> = rw.split_whitespace().collect();
    let persistent: Vec<&str> = words
        .chunks(2)
        .filter(|m| !["tmpfs", "proc", "sysfs", "devpts"].contains(&m[1]))
        // In a user namespace LXC cannot mknod: it binds the host's nodes of the allowlist.
        .filter(|m| {
            !(m[1] == "devtmpfs"
                && [
                    "/dev/full",
                    "/dev/null",
                    "/dev/random",
                    "/dev/tty",
                    "/dev/urandom",
                    "/dev/zero",
                ]
                .contains(&m[0]))
        })
        .map(|m| m[0])
        .collect();
    assert_eq!(persistent, vec!["/data"], "writable mounts: {rw}");
    let flags = assert_ok(&log, "flags");
    for o in ["nosuid", "nodev"] {
        assert!(flags.contains(o), "/data lacks {o}: {flags}");
    }

    // On the host: <state>/data/NAME, owned by the entrypoint's uid:gid as the container's
    // id map (unprivileged by default) puts them on the host.
    let base = sb.json(&["inspect", "keeper"])["idmap"]["host"]
        .as_u64()
        .expect("an untrusted package runs in a user namespace") as u32;
    let host = sb.state_dir().join("data/keeper");
    let md = std::fs::metadata(&host).unwrap();
    assert_eq!((md.uid(), md.gid()), (base + 1000, base + 1001));
    assert_eq!(md.mode() & 0o7777, 0o750);
    let f = std::fs::metadata(host.join("runs")).unwrap();
    assert_eq!((f.uid(), f.gid()), (base + 1000, base + 1001));

    // Stop and start: /data keeps its content, /tmp starts empty.
    sb.ok(&["stop", "keeper"]);
    sb.ok(&["start", "keeper"]);
    sb.wait_log("keeper", "data-runs=2 tmp-runs=1");
    // Restart of a running container: the same.
    sb.ok(&["restart", "keeper"]);
    sb.wait_log("keeper", "data-runs=3 tmp-runs=1");
    sb.ok(&["stop", "keeper"]);
    assert_eq!(
        std::fs::read_to_string(host.join("runs")).unwrap(),
        "run\nrun\nrun\n"
    );
}

#[test]
fn proc_and_sys_are_read_only_and_the_hostname_is_the_package() {
    let mut sb = Sandbox::new("fs-proc");
    let host_name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    // Any sysfs file: the mount is read-only whatever it is.
    let sys_file = ["/sys/kernel/uevent_helper", "/sys/kernel/profiling"]
        .into_iter()
        .find(|f| Path::new(f).exists())
        .unwrap_or("/sys/kernel/mm/transparent_hugepage/enabled");
    sb.add(&probe_pkg(
        "procsys",
        &format!(
            r#"
try sys-write 'echo 1 > {sys_file}'
try sys-create 'echo 1 > /sys/kernel/berth-test'
try procsys-write 'echo evil > /proc/sys/kernel/hostname'
try core-pattern 'echo "|/tmp/x" > /proc/sys/kernel/core_pattern'
try sys-remount 'busybox mount -o remount,rw /sys'
try procsys-umount 'busybox umount /proc/sys'
try proc-mount 'busybox mkdir -p /tmp/p && busybox mount -t proc proc /tmp/p'
try hostname 'busybox hostname'
try sethostname 'busybox hostname evil'
"#
        ),
    ));
    sb.start_daemon();
    sb.ok(&["update"]);
    let log = run_probe(&sb, "procsys");
    assert_fails(&log, "sys-write", "Read-only file system");
    assert_fails(&log, "sys-create", "Read-only file system");
    assert_fails(&log, "procsys-write", "Read-only file system");
    assert_fails(&log, "core-pattern", "Read-only file system");
    // Root cannot undo it: no CAP_SYS_ADMIN, so no remount, umount or fresh procfs.
    assert_fails(&log, "sys-remount", "permission denied");
    assert_fails(&log, "procsys-umount", "Operation not permitted");
    assert_fails(&log, "proc-mount", "permission denied");
    assert_eq!(assert_ok(&log, "hostname"), "procsys");
    assert_fails(&log, "sethostname", "Operation not permitted");
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(),
        host_name
    );
}

#[test]
fn dev_holds_only_the_allowed_nodes() {
    let mut sb = Sandbox::new("fs-dev");
    sb.add(&probe_pkg(
        "devs",
        r#"
try ls 'busybox ls -A /dev | busybox tr "\n" " "'
try mem 'busybox head -c 1 /dev/mem'
try kmsg 'busybox head -c 1 /dev/kmsg'
try make-mem 'busybox mknod /dev/mem c 1 1'
try null 'echo x > /dev/null && busybox head -c 4 /dev/zero | busybox wc -c'
"#,
    ));
    sb.start_daemon();
    sb.ok(&["update"]);
    let log = run_probe(&sb, "devs");
    let allowed = [
        "null",
        "zero",
        "full",
        "random",
        "urandom",
        "tty",
        "console",
        "ptmx",
        "pts",
        "shm",
        "mqueue",
        "fd",
        "stdin",
        "stdout",
        "stderr",
        ".lxc-boot-id",
    ];
    let listing = assert_ok(&log, "ls");
    for n in listing.split_whitespace() {
        assert!(allowed.contains(&n), "/dev/{n} in the container: {listing}");
    }
    for n in ["null", "zero", "urandom"] {
        assert!(listing.split_whitespace().any(|x| x == n), "{listing}");
    }
    assert_fails(&log, "mem", "/dev/mem: No such file or directory");
    assert_fails(&log, "kmsg", "/dev/kmsg: No such file or directory");
    assert_fails(&log, "make-mem", "Operation not permitted");
    assert_eq!(assert_ok(&log, "null"), "4");
}

#[test]
fn environment_workdir_user_and_init() {
    let mut sb = Sandbox::new("fs-env");
    sb.add(
        &probe_pkg(
            "envy",
            r#"
try pwd 'pwd'
try id 'echo $(id -u):$(id -g)'
try lang 'echo $LANG'
try extra 'echo $EXTRA'
try path 'echo $PATH'
try home 'echo $HOME'
try name 'echo $BERTH_CONTAINER'
try pid1 'busybox tr "\0" " " < /proc/1/cmdline'
try self 'echo $$ $PPID'
"#,
        )
        .file("srv/www/index.html", b"x")
        .entrypoint_key("workdir = \"/srv/www\"")
        .entrypoint_key("user = 1234")
        .entrypoint_key("group = 2345")
        .entrypoint_key("env = { LANG = \"C.UTF-8\", EXTRA = \"a b=c\" }"),
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    let log = run_probe(&sb, "envy");
    assert_eq!(assert_ok(&log, "pwd"), "/srv/www");
    assert_eq!(assert_ok(&log, "id"), "1234:2345");
    assert_eq!(assert_ok(&log, "lang"), "C.UTF-8");
    assert_eq!(assert_ok(&log, "extra"), "a b=c");
    assert_eq!(
        assert_ok(&log, "path"),
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    );
    assert_eq!(assert_ok(&log, "home"), "/data");
    assert_eq!(assert_ok(&log, "name"), "envy");
    // PID 1 is LXC's init; the payload is its child, not PID 1.
    let pid1 = assert_ok(&log, "pid1");
    assert!(
        pid1.starts_with("init") || pid1.contains("lxc"),
        "PID 1 is {pid1:?}"
    );
    assert!(!pid1.contains("run.sh"), "the payload is PID 1: {pid1}");
    let me = assert_ok(&log, "self");
    let (pid, ppid) = me.split_once(' ').unwrap();
    assert_ne!(pid, "1", "{me}");
    assert_eq!(ppid, "1", "the payload's parent is not init: {me}");
}

#[test]
fn host_base_lends_the_host_libraries_read_only() {
    let prog = ["/usr/bin/env", "/bin/env", "/bin/ls", "/usr/bin/ls"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .expect("no /usr/bin/env or /bin/ls on this host");
    let elf = std::fs::read(prog).unwrap();
    let interp = elf_interpreter(&elf);
    assert!(
        interp.is_some(),
        "{} is statically linked: this test needs a dynamically linked host program",
        prog.display()
    );
    let mut sb = Sandbox::new("fs-host");
    sb.add(
        &probe_pkg(
            "hosty",
            r#"
try run '/bin/hostprog BERTH_PROBE=yes | busybox grep BERTH_'
try usr-lib 'echo x > /usr/lib/evil'
try lib 'busybox touch /lib/evil'
try loader 'busybox ls /usr/lib >/dev/null && echo listed'
"#,
        )
        .package_key("base = \"host\"")
        .file("bin/hostprog", &elf),
    );
    // The same program without base = "host": its loader is not in the container.
    sb.add(
        &Pkg::new("bare", "1", &["/bin/hostprog", "BERTH_PROBE=yes"])
            .file("bin/hostprog", &elf)
            .table("[restart]\npolicy = \"never\""),
    );
    sb.start_daemon();
    sb.ok(&["update"]);

    let log = run_probe(&sb, "hosty");
    let out = assert_ok(&log, "run");
    assert!(
        out.contains("BERTH_PROBE=yes") && out.contains("BERTH_CONTAINER=hosty"),
        "{out}"
    );
    assert_fails(
        &log,
        "usr-lib",
        "can't create /usr/lib/evil: Read-only file system",
    );
    assert_fails(&log, "lib", "Read-only file system");
    assert_eq!(assert_ok(&log, "loader"), "listed");
    assert!(!Path::new("/usr/lib/evil").exists());

    sb.ok(&["install", "bare"]);
    // It may die before or after the start is confirmed; either way berth says so.
    let out = sb.berth(&["start", "bare"]);
    if out.status.success() {
        let st = wait_stopped(&sb, "bare");
        assert_ne!(st["last_exit"]["code"], 0, "{st}");
        let log = sb.ok(&["logs", "bare"]);
        assert!(!log.contains("BERTH_PROBE=yes"), "it ran: {log}");
    } else {
        let err = stderr(&out);
        assert!(err.contains("container bare did not start"), "{err}");
    }
}

#[test]
fn merged_root_overlays_dependencies_read_only() {
    let mut sb = Sandbox::new("fs-merged");
    sb.add(&Pkg::script("lib1", "1", "exit 0").file("share/lib1.txt", b"shipped by lib1\n"));
    sb.add(
        &probe_pkg(
            "app",
            r#"
try cat 'busybox cat /share/lib1.txt'
try overwrite 'echo x > /share/lib1.txt'
try create 'echo x > /share/new'
try root 'busybox touch /newfile'
try mounts 'busybox grep " / " /proc/mounts'
"#,
        )
        .package_key("depends = [\"lib1\"]")
        .package_key("rootfs = \"merged\""),
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "app"]);
    let installed = sb.json(&["list", "--installed"])["installed"].to_string();
    assert!(
        installed.contains("\"lib1\"") && installed.contains("\"app\""),
        "install app did not bring lib1: {installed}"
    );
    let log = run_probe(&sb, "app");
    assert_eq!(assert_ok(&log, "cat"), "shipped by lib1");
    assert_fails(&log, "overwrite", "Read-only file system");
    assert_fails(&log, "create", "Read-only file system");
    assert_fails(&log, "root", "Read-only file system");
    let root = assert_ok(&log, "mounts");
    assert!(
        root.contains(" overlay ro"),
        "root is not a read-only overlay: {root}"
    );
}

#[test]
fn symlinks_resolve_inside_the_container() {
    assert!(
        Path::new("/etc/shadow").exists(),
        "the host has no /etc/shadow to leak"
    );
    let mut sb = Sandbox::new("fs-link");
    let p = probe_pkg(
        "linky",
        r#"
try relative 'busybox cat /etc/passwd-link'
try absolute 'busybox cat /etc/abs-link'
try resolved 'busybox readlink -f /etc/passwd-link'
"#,
    );
    let warnings = pack_tweaked(&sb, &p, |dir| {
        std::fs::create_dir_all(dir.join("etc")).unwrap();
        std::os::unix::fs::symlink("../../../../etc/shadow", dir.join("etc/passwd-link")).unwrap();
        std::os::unix::fs::symlink("/etc/shadow", dir.join("etc/abs-link")).unwrap();
    });
    assert!(
        warnings.contains(
            "warning: etc/passwd-link -> ../../../../etc/shadow points outside the package"
        ),
        "{warnings}"
    );
    assert!(
        warnings.contains("warning: etc/abs-link -> /etc/shadow is an absolute symlink"),
        "{warnings}"
    );
    sb.start_daemon();
    sb.ok(&["update"]);
    let log = run_probe(&sb, "linky");
    // Both resolve to the container's /etc/shadow, which the package does not have.
    assert_fails(
        &log,
        "relative",
        "can't open '/etc/passwd-link': No such file or directory",
    );
    assert_fails(
        &log,
        "absolute",
        "can't open '/etc/abs-link': No such file or directory",
    );
    assert_eq!(assert_ok(&log, "resolved"), "/etc/shadow");
    assert!(!log.contains("root:"), "host's shadow leaked:\n{log}");
}

/// A payload that loops on short sleeps, with `trap` as its SIGTERM handler.
fn trapping_pkg(name: &str, trap: &str) -> Pkg {
    Pkg::script(
        name,
        "1",
        &format!("trap {trap} TERM\necho ready\nwhile true; do sleep 0.1; done\n"),
    )
}

fn start_all(sb: &Sandbox, names: &[&str]) {
    for n in names {
        sb.ok(&["install", n]);
        sb.ok(&["start", n]);
        sb.wait_log(n, "ready");
    }
}

#[test]
fn stop_is_graceful_for_who_listens_and_forced_for_who_does_not() {
    let mut sb = Sandbox::new("fs-stop");
    sb.add(&trapping_pkg(
        "polite",
        "'echo got TERM > /data/term; exit 0'",
    ));
    sb.add(&trapping_pkg("deaf", "''"));
    sb.start_daemon();
    sb.ok(&["update"]);
    start_all(&sb, &["polite", "deaf"]);

    let v = sb.json(&["stop", "polite"]);
    assert_eq!(v["graceful"], true, "{v}");
    assert_eq!(v["exit"]["code"], 0, "{v}");
    assert_eq!(
        std::fs::read_to_string(sb.state_dir().join("data/polite/term")).unwrap(),
        "got TERM\n"
    );
    // A sanity bound, not a latency figure (berth-bench activation measures stop times,
    // ~7 ms): a polite payload must not have waited for the 5 s timeout.
    assert!(v["stop_ms"].as_f64().unwrap() < 4000.0, "{v}");

    // A payload deaf to SIGTERM is killed when the timeout runs out, and says so.
    let v = sb.json(&["stop", "-t", "1", "deaf"]);
    assert_eq!(v["graceful"], false, "{v}");
    assert_eq!(v["exit"]["signal"], 9, "{v}");
    let ms = v["stop_ms"].as_f64().unwrap();
    // The 1 s timeout was honoured (it waited), and the kill followed (a generous bound).
    assert!((900.0..5000.0).contains(&ms), "stop took {ms} ms: {v}");
    assert_eq!(sb.status_of("deaf")["state"], "stopped");
    assert!(
        sb.stray_mounts().is_empty(),
        "left mounted: {:?}",
        sb.stray_mounts()
    );
}

/// The contract of `berth stop -t`: the payload has the whole timeout to clean up, and a
/// payload that had to be killed is reported as not graceful, killed by signal 9. (LXC's
/// init alone would SIGKILL one second after the halt signal whatever the timeout, so berth
/// sends SIGTERM to the payload itself.)
#[test]
fn stop_timeout_is_honoured_and_a_kill_is_not_graceful() {
    let mut sb = Sandbox::new("fs-stop-t");
    sb.add(&trapping_pkg(
        "slow",
        "'sleep 2; echo cleaned > /data/done; exit 0'",
    ));
    sb.add(&trapping_pkg("deaf", "''"));
    sb.start_daemon();
    sb.ok(&["update"]);
    start_all(&sb, &["slow", "deaf"]);

    let v = sb.json(&["stop", "-t", "5", "slow"]);
    assert!(
        sb.state_dir().join("data/slow/done").exists(),
        "cleanup cut short: {v}"
    );
    assert_eq!(v["graceful"], true, "{v}");

    let v = sb.json(&["stop", "-t", "3", "deaf"]);
    assert_eq!(v["graceful"], false, "{v}");
    // Killed is not "exited with 0" (what berth records when its own stop kills).
    assert_ne!(v["exit"]["code"], 0, "{v}");
    assert!(v["stop_ms"].as_f64().unwrap() >= 3000.0, "{v}");
}
