//! The QEMU microvm of `scripts/vm/` ([docs/vm.md](../../../docs/vm.md)) for the suites that
//! measure in a virtual machine (microvm, cgroups): the scripts found beside the repository,
//! the image built (or found in its cache) once, KVM used where it boots the stock kernel
//! (else TCG: every figure from the VM then says it is emulated), and one boot at a time
//! whose serial console is read line by line as it comes.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::util::{self, bail, progress, which, Context, Result};

/// How the VM is run.
#[derive(Debug, Clone, PartialEq)]
pub enum Accel {
    Kvm,
    /// Software emulation, and why KVM is not used.
    Tcg(String),
}

impl Accel {
    pub fn name(&self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg(_) => "tcg",
        }
    }

    /// The label every figure measured in the VM carries, None under KVM.
    pub fn label(&self) -> Option<String> {
        match self {
            Accel::Kvm => None,
            Accel::Tcg(_) => Some(EMULATED.to_string()),
        }
    }
}

pub const EMULATED: &str = "emulated (TCG): not a performance figure";

/// `scripts/vm` of the repository this berth-bench was built in: `$BERTH_BENCH_SCRIPTS`, else
/// next to the binary's target directory, else below the current directory.
pub fn scripts() -> Result<PathBuf> {
    let mut tries = Vec::new();
    if let Some(d) = std::env::var_os("BERTH_BENCH_SCRIPTS") {
        tries.push(PathBuf::from(d));
    }
    if let Ok(exe) = std::env::current_exe() {
        // target/release/berth-bench → the repository is two levels up from target/.
        for up in exe.ancestors().skip(1).take(4) {
            tries.push(up.join("scripts/vm"));
        }
    }
    if let Ok(cwd) = std::env::current_dir() {
        tries.push(cwd.join("scripts/vm"));
    }
    tries
        .into_iter()
        .find(|d| d.join("run.sh").is_file() && d.join("build.sh").is_file())
        .ok_or_else(|| {
            "scripts/vm (run.sh, build.sh) not found beside the repository: run berth-bench from the repository, or set BERTH_BENCH_SCRIPTS".into()
        })
}

/// Why the VM cannot run here, or None.
pub fn unavailable() -> Option<String> {
    for (tool, pkg) in [
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("debootstrap", "debootstrap"),
        ("mkfs.ext4", "e2fsprogs"),
    ] {
        if which(tool).is_none() {
            return Some(format!(
                "{tool} is missing: install the Debian package {pkg}"
            ));
        }
    }
    scripts().err().map(|e| e.0)
}

/// The image directory (`build.sh`'s last line); built on first use, minutes from cold.
pub fn image(scripts: &Path) -> Result<PathBuf> {
    static IMAGE: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            progress!("vm: building or finding the image (scripts/vm/build.sh)");
            let out = util::output(Command::new("bash").arg(scripts.join("build.sh")))
                .map_err(|e| e.0)?;
            let text = String::from_utf8_lossy(&out.stdout);
            let dir = text.lines().last().map(PathBuf::from);
            match dir {
                Some(d) if out.status.success() && d.join("vmlinux").is_file() => Ok(d),
                _ => Err(format!(
                    "scripts/vm/build.sh failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                        .lines()
                        .rev()
                        .take(3)
                        .collect::<Vec<_>>()
                        .join(" / ")
                )),
            }
        })
        .clone()
        .map_err(Into::into)
}

/// KVM when /dev/kvm boots the image's kernel (a boot that panics at once for want of an
/// init, seconds), else TCG with the reason. Found once per run.
pub fn accel(image: &Path) -> Accel {
    static ACCEL: OnceLock<Accel> = OnceLock::new();
    ACCEL
        .get_or_init(|| {
            if !Path::new("/dev/kvm").exists() {
                return Accel::Tcg("no /dev/kvm".into());
            }
            let out = util::output(
                Command::new("timeout")
                    .args(["-k", "5", "30", "qemu-system-x86_64", "-M", "microvm"])
                    .args(["-accel", "kvm", "-cpu", "host", "-m", "128", "-smp", "1"])
                    .args([
                        "-nographic",
                        "-nodefaults",
                        "-no-reboot",
                        "-serial",
                        "stdio",
                    ])
                    .arg("-kernel")
                    .arg(image.join("vmlinux"))
                    .args(["-append", "console=ttyS0 panic=-1 init=/berth-no-init"]),
            );
            match out {
                Ok(o) => {
                    let text = String::from_utf8_lossy(&o.stdout).to_string()
                        + &String::from_utf8_lossy(&o.stderr);
                    if text.contains("Linux version") {
                        Accel::Kvm
                    } else {
                        let why = text
                            .lines()
                            .rev()
                            .find(|l| !l.trim().is_empty())
                            .unwrap_or("no output")
                            .trim()
                            .to_string();
                        Accel::Tcg(format!("KVM cannot boot the stock kernel here: {why}"))
                    }
                }
                Err(e) => Accel::Tcg(format!("KVM probe: {e}")),
            }
        })
        .clone()
}

/// A running VM (scripts/vm/run.sh) and its console.
pub struct Boot {
    child: Child,
    lines: Receiver<String>,
    /// Every console line so far.
    pub log: Vec<String>,
    what: String,
}

/// How a boot is set up beyond the payload.
#[derive(Default)]
pub struct BootOpts<'a> {
    /// Runs QEMU in this network namespace (`ip netns exec`), its tap device `tap`.
    pub netns: Option<&'a str>,
    pub tap: Option<&'a str>,
    /// `v1` or `v2` (run.sh's BERTH_VM_CGROUP).
    pub cgroup: &'a str,
    /// More kernel arguments.
    pub append: &'a str,
    /// Free MiB on the payload disk.
    pub payload_mb: u32,
    /// Seconds before run.sh gives up.
    pub timeout_s: u32,
}

impl Boot {
    /// Boots `payload` (a directory with run.sh), with `berth` copied beside it.
    pub fn start(
        what: &str,
        scripts: &Path,
        image: &Path,
        accel: &Accel,
        berth: &Path,
        payload: &Path,
        o: &BootOpts,
    ) -> Result<Boot> {
        let mut c = match o.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "bash"]);
                c
            }
            None => Command::new("bash"),
        };
        c.arg(scripts.join("run.sh"))
            .arg(payload)
            .env("BERTH_VM_IMAGE", image)
            .env("BERTH_VM_ACCEL", accel.name())
            .env(
                "BERTH_VM_CPU",
                if *accel == Accel::Kvm { "host" } else { "max" },
            )
            .env("BERTH_BIN", berth)
            .env(
                "BERTH_VM_CGROUP",
                if o.cgroup.is_empty() { "v2" } else { o.cgroup },
            )
            .env("BERTH_VM_APPEND", o.append)
            .env("BERTH_VM_PAYLOAD_MB", o.payload_mb.max(64).to_string())
            .env("BERTH_VM_TIMEOUT", o.timeout_s.max(60).to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(t) = o.tap {
            c.env("BERTH_VM_TAP", t);
        }
        let mut child = c.spawn().context(format!("boot the VM for {what}"))?;
        let (tx, rx) = channel();
        for r in [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(r).lines() {
                    let Ok(l) = line else { break };
                    if tx.send(l).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Boot {
            child,
            lines: rx,
            log: Vec::new(),
            what: what.to_string(),
        })
    }

    /// The next console line, at most `timeout` from now; None at the end or on time-out.
    pub fn next_line(&mut self, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if util::interrupted() {
                return None;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(200)))
            {
                Ok(l) => {
                    self.log.push(l.clone());
                    return Some(l);
                }
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Reads lines until one starts with `prefix` (returned), giving `each` every other
    /// line; fails, with the console's last lines, on a `VMTEST FAIL`, the end or time-out.
    pub fn until(
        &mut self,
        prefix: &str,
        timeout: Duration,
        mut each: impl FnMut(&str),
    ) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(l) = self.next_line(left) else {
                util::check_interrupted()?;
                bail!(
                    "{}: no \"{prefix}\" from the VM within {} s; its console ends:\n    {}",
                    self.what,
                    timeout.as_secs(),
                    self.tail(12)
                );
            };
            if l.starts_with(prefix) {
                return Ok(l);
            }
            if l.starts_with("VMTEST FAIL") {
                bail!(
                    "{}: {l}; its console ends:\n    {}",
                    self.what,
                    self.tail(12)
                );
            }
            each(&l);
        }
    }

    /// The console's last `n` lines, for an error.
    pub fn tail(&self, n: usize) -> String {
        self.log[self.log.len().saturating_sub(n)..].join("\n    ")
    }

    /// Waits (at most `timeout`) for the VM to end; its exit code. Killed past that.
    pub fn finish(mut self, timeout: Duration) -> Result<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            while self.next_line(Duration::from_millis(50)).is_some() {}
            if let Some(st) = self.child.try_wait().context("wait for the VM")? {
                while self.next_line(Duration::from_millis(50)).is_some() {}
                return Ok(st.code().unwrap_or(-1));
            }
            if Instant::now() > deadline || util::interrupted() {
                self.kill();
                bail!(
                    "{}: the VM did not power off within {} s",
                    self.what,
                    timeout.as_secs()
                );
            }
        }
    }

    fn kill(&mut self) {
        let _ = berth_sys::process::kill(-(self.child.id() as i32), libc::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for Boot {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}

/// The `VMBENCH KIND NAME RUN JSON` lines of a console: (kind, name, run, value).
pub fn bench_line(l: &str) -> Option<(String, String, usize, serde_json::Value)> {
    let rest = l.strip_prefix("VMBENCH ")?;
    let mut f = rest.splitn(4, ' ');
    let (kind, name, run, json) = (f.next()?, f.next()?, f.next()?, f.next()?);
    Some((
        kind.to_string(),
        name.to_string(),
        run.parse().ok()?,
        serde_json::from_str(json).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_lines_parse() {
        let (k, n, r, v) =
            bench_line(r#"VMBENCH fio randread-4k 2 {"jobs": [{"read": {"bw_bytes": 5}}]}"#)
                .unwrap();
        assert_eq!((k.as_str(), n.as_str(), r), ("fio", "randread-4k", 2));
        assert_eq!(v["jobs"][0]["read"]["bw_bytes"], 5);
        assert!(bench_line("VMBENCH fio x notanumber {}").is_none());
        assert!(bench_line("VMBENCH fio x 1 {broken").is_none());
        assert!(bench_line("VMTEST PASS x").is_none());
        assert_eq!(Accel::Kvm.label(), None);
        assert_eq!(Accel::Tcg("x".into()).label().unwrap(), EMULATED);
    }
}
