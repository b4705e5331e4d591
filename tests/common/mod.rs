//! Shared harness of the end-to-end tests: the berth-testkit sandbox (its own state, run dir,
//! lxcpath, keys, repository and cgroup parent under a unique name, a real daemon, real LXC,
//! real squashfs mounts) with the kit's errors turned into panics, and what only tests need.
//! Everything a sandbox creates is removed when it is dropped, also when the test fails.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

// Each test crate includes this module and uses some of it.
#[allow(unused_imports)]
pub use berth_testkit::{stderr, stdout, which, Pkg, TempDir};
use berth_testkit::{Options, SandboxError, Scope};

pub const BERTH: &str = env!("CARGO_BIN_EXE_berth");

/// Fails loudly (never skips) when the test cannot run here.
pub fn require_root_and_tools() {
    let uid = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap_or(1);
    assert_eq!(
        uid, 0,
        "end-to-end tests need root (real LXC, loop mounts, cgroups): run them with sudo"
    );
    for (tool, pkg) in [
        ("mksquashfs", "squashfs-tools"),
        ("unsquashfs", "squashfs-tools"),
        ("lxc-ls", "lxc"),
        ("busybox", "busybox-static"),
    ] {
        assert!(
            which(tool).is_some(),
            "missing {tool}: install the Debian package {pkg}"
        );
    }
}

/// A static busybox to build test packages from.
pub fn busybox() -> PathBuf {
    berth_testkit::busybox().unwrap_or_else(|e| panic!("{e}"))
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The kit's sandbox; every call that can fail panics with what failed (the command's output
/// and the whole daemon log).
pub struct Sandbox(berth_testkit::Sandbox);

impl std::ops::Deref for Sandbox {
    type Target = berth_testkit::Sandbox;
    fn deref(&self) -> &berth_testkit::Sandbox {
        &self.0
    }
}

impl std::ops::DerefMut for Sandbox {
    fn deref_mut(&mut self) -> &mut berth_testkit::Sandbox {
        &mut self.0
    }
}

/// The value, or a panic that says what failed.
fn check<T>(r: Result<T, SandboxError>) -> T {
    match r {
        Ok(v) => v,
        Err(SandboxError::Failed {
            args,
            status,
            stdout,
            stderr,
            daemon_log,
        }) => panic!(
            "berth {args:?} failed ({status}): {stderr}\n{stdout}\ndaemon log:\n{daemon_log}"
        ),
        Err(e) => panic!("{e}"),
    }
}

impl Sandbox {
    /// A sandbox in `$TMPDIR/berth-test-<tag>-<pid>-<n>` with the cgroup parent
    /// `berth-t-<tag>-<pid>-<n>`; BERTH_KEEP_TEST_DIRS keeps the directory after the test.
    pub fn new(tag: &str) -> Sandbox {
        Sandbox::with(tag, berth_testkit::sandbox::old_kernel_from_env())
    }

    /// A sandbox whose berths (daemon and CLI) run as on an old kernel: the syscalls newer
    /// than Linux 4.14 answer ENOSYS and PSI is hidden (docs/kernels.md). Every sandbox is
    /// one with BERTH_TEST_OLDKERNEL=1.
    pub fn old_kernel(tag: &str) -> Sandbox {
        Sandbox::with(tag, true)
    }

    fn with(tag: &str, old_kernel: bool) -> Sandbox {
        require_root_and_tools();
        let id = berth_testkit::unique_id(tag);
        let mut scope = Scope::new(
            std::env::temp_dir().join(format!("berth-test-{id}")),
            format!("berth-t-{id}"),
        );
        scope.keep_dir = std::env::var_os("BERTH_KEEP_TEST_DIRS").is_some();
        let mut opts = Options::new(BERTH.into(), scope);
        opts.program = "berth test";
        opts.old_kernel = old_kernel;
        Sandbox(check(berth_testkit::Sandbox::create(opts)))
    }

    /// (Re)writes the configuration; `extra` is appended under [containers] unless it starts
    /// with its own table.
    pub fn write_config(&self, extra: &str) {
        check(self.0.write_config(extra))
    }

    /// Points the configuration at another repository URL (an HTTP server of the test).
    pub fn set_repository(&self, url: &str) {
        check(self.0.set_repository(url))
    }

    pub fn berth(&self, args: &[&str]) -> Output {
        self.output(args).expect("run berth")
    }

    /// Runs berth and asserts success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        check(self.0.ok(args))
    }

    /// Runs berth --json and parses stdout.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        check(self.0.json(args))
    }

    /// Runs berth and asserts failure; returns (exit code, stderr).
    pub fn fail(&self, args: &[&str]) -> (i32, String) {
        let out = self.berth(args);
        assert!(
            !out.status.success(),
            "berth {args:?} should have failed: {}",
            stdout(&out)
        );
        (out.status.code().unwrap_or(-1), stderr(&out))
    }

    /// Restarts the daemon with the memory guard's threshold 96 MiB below what is available
    /// now (containers keep running across a daemon restart), so that what the host did
    /// meanwhile (a build freeing its memory) does not move it. Returns the threshold.
    pub fn restart_with_guard_below_available(&mut self) -> u64 {
        self.kill_daemon(15);
        let threshold = mem_available() - (96 << 20);
        self.write_config(&format!(
            "\n[guard]\nthreshold = \"{}K\"\ninterval = \"200ms\"\n",
            threshold >> 10
        ));
        self.start_daemon();
        threshold
    }

    pub fn start_daemon(&mut self) {
        check(self.0.start_daemon())
    }

    pub fn start_daemon_env(&mut self, env: &[(&str, &str)]) {
        check(self.0.start_daemon_env(env))
    }

    /// The repository offers only `p`'s version of its package from now on (the others'
    /// files removed from packages/, `p` packed); the index is rebuilt.
    pub fn offer_only(&self, p: &Pkg) {
        let prefix = format!("{}-", p.name);
        for e in std::fs::read_dir(self.repo.join("packages"))
            .unwrap()
            .flatten()
        {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
        self.add(p);
    }

    /// Builds a package directory and packs it into the repository's packages/.
    pub fn pack(&self, p: &Pkg) -> PathBuf {
        check(self.0.pack(p))
    }

    /// Writes trusted.txt and (re)builds and signs the repository index.
    pub fn build_repo(&self) {
        check(self.0.build_repo())
    }

    pub fn add(&self, p: &Pkg) {
        check(self.0.add(p))
    }

    /// Mount points below the sandbox.
    pub fn mounts(&self) -> Vec<String> {
        check(self.0.mounts())
    }

    /// Mounts that should not be there while no container runs: everything below the
    /// sandbox except the image mounts of installed packages.
    pub fn stray_mounts(&self) -> Vec<String> {
        check(self.0.stray_mounts())
    }

    /// Waits until `berth logs NAME` contains `needle`.
    pub fn wait_log(&self, name: &str, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = self.berth(&["logs", name]);
            let s = stdout(&out);
            if s.contains(needle) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "log of {name} never showed {needle:?}; it is:\n{s}\n{}",
                stderr(&out)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Names of the installed (`"installed"`) or available (`"available"`) packages, from
    /// `berth list`.
    pub fn listed(&self, which: &str) -> Vec<String> {
        self.json(&["list"])[which]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect()
    }

    /// Status of one container as JSON.
    pub fn status_of(&self, name: &str) -> serde_json::Value {
        let v = self.json(&["status", name]);
        v["containers"][0].clone()
    }

    /// Polls the container's status until `f` holds; panics with the last status (and the
    /// daemon's log) after `secs`.
    pub fn wait_status(
        &self,
        name: &str,
        secs: u64,
        what: &str,
        f: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let c = self.status_of(name);
            if f(&c) {
                return c;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: not {what} within {secs} s: {c}\n{}",
                self.daemon_log_text()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Files in the store's partial-download directory.
    pub fn partial_downloads(&self) -> Vec<String> {
        std::fs::read_dir(self.state_dir().join("store/.tmp"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// GET http://127.0.0.1:port/path with a plain TcpStream (no curl needed); body or error.
pub fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// Retries `http_get` until it answers (the server in the container may take a moment).
pub fn http_get_retry(port: u16, path: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match http_get(port, path) {
            Ok(s) if !s.is_empty() => return s,
            r => assert!(
                Instant::now() < deadline,
                "no HTTP answer on 127.0.0.1:{port}{path}: {r:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `cond` holds, polling every 20 ms; fails naming `what` after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A window in which something must NOT happen (a restart, a run, a byte, a connection): the
/// test looks again after it. Not a wait (a condition is waited for with [`wait_until`]):
/// when the point is that nothing comes, there is nothing to wait for. `what` names what
/// must not happen.
pub fn quiet_for(window: Duration, what: &str) {
    let _ = what;
    std::thread::sleep(window);
}

/// A window a rate or a usage is measured over.
pub fn measure_over(window: Duration) {
    std::thread::sleep(window);
}

/// Time that must pass for what the test checks: a clock that must move on (timestamps that
/// differ, a rate's bucket that fills again), or a step the test cannot observe (a follower
/// attaching, a server taking connections in). `why` says which.
pub fn let_pass(time: Duration, why: &str) {
    let _ = why;
    std::thread::sleep(time);
}

/// Signs the sandbox repository's index.json with signify-openbsd itself (not berth), with
/// the secret key `key`, into index.json.sig.
pub fn signify_sign(sb: &Sandbox, key: &Path) {
    const SIGNIFY: &str = "/usr/bin/signify-openbsd";
    let out = Command::new(SIGNIFY)
        .args(["-S", "-s"])
        .arg(key)
        .arg("-m")
        .arg(sb.repo.join("index.json"))
        .arg("-x")
        .arg(sb.repo.join("index.json.sig"))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{SIGNIFY}: {e} (install signify-openbsd)"));
    assert!(out.status.success(), "signify -S: {}", stderr(&out));
}

/// `len` bytes that do not compress (xorshift from `seed`, not 0): an image of a known size.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut x = seed;
    for b in out.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    out
}

/// The host's MemAvailable, in bytes.
pub fn mem_available() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    text.lines()
        .find_map(|l| {
            l.strip_prefix("MemAvailable:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .unwrap()
        * 1024
}

/// Alive and not a zombie.
pub fn alive(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|s| {
            !s.lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'))
        })
        .unwrap_or(false)
}

/// A static memory hog, compiled in `dir`: it takes `steps` blocks of `block_mib` MiB, one
/// every `pause_ms`, printing its total after each, then says "hog holding" and waits.
pub fn hog_binary(dir: &Path, steps: u32, block_mib: u32, pause_ms: u32) -> Vec<u8> {
    let src = dir.join("hog.c");
    std::fs::write(
        &src,
        format!(
            "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <unistd.h>\n\
             int main(void) {{\n\
               setvbuf(stdout, 0, _IONBF, 0);\n\
               for (int i = 1; i <= {steps}; i++) {{\n\
                 char *p = malloc({block_mib} << 20);\n\
                 if (!p) return 1;\n\
                 memset(p, i, {block_mib} << 20);\n\
                 printf(\"hog %d MiB\\n\", i * {block_mib});\n\
                 usleep({pause_us});\n\
               }}\n\
               printf(\"hog holding\\n\");\n\
               for (;;) pause();\n\
             }}\n",
            pause_us = pause_ms * 1000
        ),
    )
    .unwrap();
    let bin = dir.join("hog");
    let out = Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("cc");
    assert!(out.status.success(), "cc: {}", stderr(&out));
    std::fs::read(&bin).unwrap()
}

/// busybox httpd serving `dir` on a free loopback port (it answers ETags with 304 and
/// ranges with 206); killed when dropped.
pub struct Httpd {
    child: std::process::Child,
    pub port: u16,
}

impl Drop for Httpd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn busybox_httpd(dir: &Path) -> Httpd {
    let port = free_port();
    let child = Command::new(busybox())
        .args(["httpd", "-f", "-p", &format!("127.0.0.1:{port}"), "-h"])
        .arg(dir)
        .spawn()
        .expect("busybox httpd");
    let httpd = Httpd { child, port };
    wait_until("busybox httpd listens", Duration::from_secs(5), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    httpd
}

/// A relay's helper: the request head `client` sends (up to the blank line), byte by byte
/// so that nothing of the body is taken.
pub fn read_request_head(client: &mut std::net::TcpStream) -> Vec<u8> {
    use std::io::Read;
    let mut head = Vec::new();
    let mut b = [0u8];
    while !head.ends_with(b"\r\n\r\n") && client.read(&mut b).unwrap_or(0) == 1 {
        head.push(b[0]);
    }
    head
}

/// A PKI for 127.0.0.1 made with the openssl program: `ca.pem` signs `srv.pem`; `other.pem`
/// is a CA that signed nothing here.
pub fn loopback_pki(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    let script = format!(
        "set -e; cd {d}; for ca in ca other; do openssl req -x509 {key} -days 2 -keyout $ca.key \
         -out $ca.pem -subj /CN=berth-repo-$ca 2>&1; done; \
         echo subjectAltName=IP:127.0.0.1 > srv.ext; \
         openssl req {key} -keyout srv.key -out srv.csr -subj /CN=srv 2>&1; \
         openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
         -extfile srv.ext -out srv.pem 2>&1",
        d = dir.display()
    );
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert!(
        out.status.success(),
        "openssl (Debian package openssl): {out:?}"
    );
}

/// A TLS front (Python's `ssl`) on a loopback port for a plain server on `backend`: each
/// connection's bytes relayed both ways, each side closed when the other ends (a backend
/// that cuts an answer short cuts it over TLS too). Its certificate is [`loopback_pki`]'s.
pub struct TlsFront {
    child: std::process::Child,
    pub port: u16,
}

impl TlsFront {
    pub fn start(backend: u16, pki: &Path) -> TlsFront {
        let port = free_port();
        let script = format!(
            "import socket, ssl, threading\n\
             c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n\
             c.load_cert_chain('{pki}/srv.pem', '{pki}/srv.key')\n\
             ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             ls.bind(('127.0.0.1', {port})); ls.listen(64)\n\
             def pump(a, b):\n\
             \x20   try:\n\
             \x20       while True:\n\
             \x20           d = a.recv(65536)\n\
             \x20           if not d: break\n\
             \x20           b.sendall(d)\n\
             \x20   except Exception: pass\n\
             \x20   for s in (a, b):\n\
             \x20       try: s.shutdown(socket.SHUT_RDWR)\n\
             \x20       except Exception: pass\n\
             def serve(raw):\n\
             \x20   try:\n\
             \x20       t = c.wrap_socket(raw, server_side=True)\n\
             \x20       up = socket.create_connection(('127.0.0.1', {backend}))\n\
             \x20   except Exception:\n\
             \x20       raw.close(); return\n\
             \x20   threading.Thread(target=pump, args=(up, t), daemon=True).start()\n\
             \x20   pump(t, up)\n\
             print('ready', flush=True)\n\
             while True:\n\
             \x20   raw, _ = ls.accept()\n\
             \x20   threading.Thread(target=serve, args=(raw,), daemon=True).start()\n",
            pki = pki.display()
        );
        let mut child = Command::new("python3")
            .args(["-c", &script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the TLS front needs python3");
        let mut ready = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut ready,
        )
        .unwrap();
        assert_eq!(ready.trim(), "ready", "the TLS front did not start");
        TlsFront { child, port }
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
