//! The activation payload: a tiny static program that, first thing in `main`, reads
//! CLOCK_REALTIME and writes it (nanoseconds, one line) to the file named by its first
//! argument; then exits (`exit`) or waits for SIGTERM/SIGINT/SIGPWR (`wait`).
//!
//! It installs handlers rather than relying on default dispositions: under runc the payload is
//! the PID namespace's init, which the kernel shields from signals it has no handler for.

use std::path::Path;
use std::process::Command;

use crate::util::{output, which, Context, Result};

pub const SOURCE: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

static void on_signal(int sig) { (void)sig; _exit(0); }

int main(int argc, char **argv) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char buf[48];
    int n = snprintf(buf, sizeof buf, "%lld%09ld\n", (long long)ts.tv_sec, ts.tv_nsec);
    const char *path = argc > 1 ? argv[1] : "/data/t0";
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, buf, n) != n) return 111;
    close(fd);
    if (argc > 2 && strcmp(argv[2], "exit") == 0) return 0;
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGPWR, on_signal);
    for (;;) pause();
}
"#;

/// How the payload reports its first instruction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// The C program above: nanosecond timestamp written by the payload itself.
    Native,
    /// No compiler: busybox `touch`; the file's mtime is the timestamp (coarse: the kernel's
    /// file time granularity, a few ms, plus busybox sh start-up).
    Busybox,
}

pub struct Payload {
    pub kind: Kind,
    /// Files to put into the package: path, contents, mode.
    pub files: Vec<(String, Vec<u8>, u32)>,
    pub compiler: Option<String>,
}

impl Payload {
    /// The payload's command line inside the container.
    pub fn argv(&self, file: &str, mode: &str) -> Vec<String> {
        let v: Vec<&str> = match self.kind {
            Kind::Native => vec!["/bin/bench-payload", file, mode],
            Kind::Busybox => vec!["/bin/busybox", "sh", "/bench.sh", file, mode],
        };
        v.into_iter().map(String::from).collect()
    }

    pub fn needs_busybox(&self) -> bool {
        self.kind == Kind::Busybox
    }
}

const FALLBACK_SCRIPT: &str = "/bin/busybox touch \"$1\"\n[ \"$2\" = exit ] && exit 0\ntrap 'exit 0' TERM INT\nwhile :; do /bin/busybox sleep 1 & wait $!; done\n";

/// Compiles the payload with `gcc -static -O2` into `work`; without gcc, the busybox fallback.
pub fn build(work: &Path) -> Result<Payload> {
    if let Some(gcc) = which("gcc").or_else(|| which("cc")) {
        std::fs::create_dir_all(work).context(format!("create {}", work.display()))?;
        let src = work.join("payload.c");
        let bin = work.join("bench-payload");
        std::fs::write(&src, SOURCE).context("write payload.c")?;
        let out = output(
            Command::new(&gcc)
                .args(["-static", "-O2", "-s", "-o"])
                .arg(&bin)
                .arg(&src),
        )?;
        if out.status.success() {
            let data = std::fs::read(&bin).context("read the compiled payload")?;
            let version = output(Command::new(&gcc).arg("--version"))
                .ok()
                .and_then(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .next()
                        .map(String::from)
                });
            return Ok(Payload {
                kind: Kind::Native,
                files: vec![("bin/bench-payload".into(), data, 0o755)],
                compiler: version,
            });
        }
        eprintln!(
            "berth-bench: warning: gcc -static failed (is libc6-dev installed?): {}; using the busybox payload",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    } else {
        eprintln!("berth-bench: warning: no gcc (Debian package gcc): using the busybox payload, timestamps are coarse");
    }
    Ok(Payload {
        kind: Kind::Busybox,
        files: vec![(
            "bench.sh".into(),
            FALLBACK_SCRIPT.as_bytes().to_vec(),
            0o755,
        )],
        compiler: None,
    })
}

/// The first-instruction timestamp the payload left in `file`, ns since the epoch; None
/// while the file is missing or not completely written.
pub fn read_stamp(kind: Kind, file: &Path) -> Option<i128> {
    match kind {
        Kind::Native => {
            let s = std::fs::read_to_string(file).ok()?;
            s.strip_suffix('\n')?.trim().parse().ok()
        }
        Kind::Busybox => {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(file).ok()?;
            Some(m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128)
        }
    }
}
