//! Shared harness of the end-to-end tests: a sandboxed berth (its own state, run dir,
//! lxcpath, keys, repository and cgroup parent under a unique name) with a real daemon, real
//! LXC, real squashfs mounts. Everything a sandbox creates is removed when it is dropped, also
//! when the test fails.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const BERTH: &str = env!("CARGO_BIN_EXE_berth");

static COUNTER: AtomicUsize = AtomicUsize::new(0);

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

pub fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file())
}

/// A static busybox to build test packages from.
pub fn busybox() -> PathBuf {
    let p = which("busybox").expect("busybox-static is required");
    let out = Command::new("file").arg(&p).output();
    if let Ok(o) = out {
        let t = String::from_utf8_lossy(&o.stdout);
        assert!(
            !t.contains("dynamically"),
            "{} is dynamically linked: install busybox-static",
            p.display()
        );
    }
    p
}

/// A fresh directory, removed on drop even when the test fails.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "berth-tmp-{name}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// What goes into a test package.
pub struct Pkg {
    pub name: String,
    pub version: String,
    /// More keys of the [package] table (`base = "host"`, `depends = [...]`).
    pub package_keys: String,
    /// More tables of the manifest (`[network]`, `[entrypoint]` keys go in `entrypoint_keys`).
    pub tables: String,
    /// More keys of [entrypoint] (`user = 1000`, `env = {...}`).
    pub entrypoint_keys: String,
    pub argv: Vec<String>,
    /// Extra files: path relative to the package root → contents.
    pub files: Vec<(String, Vec<u8>)>,
    pub with_busybox: bool,
}

impl Pkg {
    pub fn new(name: &str, version: &str, argv: &[&str]) -> Pkg {
        Pkg {
            name: name.into(),
            version: version.into(),
            package_keys: String::new(),
            tables: String::new(),
            entrypoint_keys: String::new(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            files: Vec::new(),
            with_busybox: true,
        }
    }
    /// A package whose payload is a shell script run by busybox sh.
    pub fn script(name: &str, version: &str, script: &str) -> Pkg {
        let mut p = Pkg::new(name, version, &["/bin/busybox", "sh", "/run.sh"]);
        p.files.push(("run.sh".into(), script.as_bytes().to_vec()));
        p
    }
    pub fn package_key(mut self, toml: &str) -> Pkg {
        self.package_keys.push_str(toml);
        self.package_keys.push('\n');
        self
    }
    pub fn entrypoint_key(mut self, toml: &str) -> Pkg {
        self.entrypoint_keys.push_str(toml);
        self.entrypoint_keys.push('\n');
        self
    }
    pub fn table(mut self, toml: &str) -> Pkg {
        self.tables.push_str(toml);
        self.tables.push('\n');
        self
    }
    pub fn file(mut self, path: &str, data: &[u8]) -> Pkg {
        self.files.push((path.into(), data.to_vec()));
        self
    }
}

pub struct Sandbox {
    pub dir: PathBuf,
    pub config: PathBuf,
    pub repo: PathBuf,
    pub key: PathBuf,
    pub cgroup_parent: String,
    pub daemon: Option<Child>,
    pub daemon_log: PathBuf,
    trusted: Vec<String>,
    /// Runs the daemon in this network namespace (`/run/netns/NAME`) via nsenter.
    pub daemon_netns: Option<String>,
}

impl Sandbox {
    pub fn new(tag: &str) -> Sandbox {
        require_root_and_tools();
        let id = format!(
            "{tag}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let dir = std::env::temp_dir().join(format!("berth-test-{id}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("repo/packages")).unwrap();
        std::fs::create_dir_all(dir.join("keys")).unwrap();
        let sb = Sandbox {
            config: dir.join("berth.toml"),
            repo: dir.join("repo"),
            key: dir.join("vendor.sec"),
            cgroup_parent: format!("berth-t-{id}"),
            daemon: None,
            daemon_log: dir.join("daemon.log"),
            dir,
            trusted: Vec::new(),
            daemon_netns: None,
        };
        sb.write_config("");
        let out = sb.berth(&[
            "key",
            "generate",
            "-o",
            sb.dir.join("vendor").to_str().unwrap(),
        ]);
        assert!(out.status.success(), "key generate: {}", stderr(&out));
        std::fs::copy(sb.dir.join("vendor.pub"), sb.dir.join("keys/vendor.pub")).unwrap();
        sb
    }

    /// (Re)writes the configuration; `extra` is appended under [containers] unless it starts
    /// with its own table.
    pub fn write_config(&self, extra: &str) {
        let d = &self.dir;
        let text = format!(
            "repository = \"file://{repo}\"\n[paths]\nstate = \"{state}\"\nrun = \"{run}\"\nkeys = \"{keys}\"\n[containers]\ncgroup_parent = \"{cg}\"\nstop_timeout = \"5s\"\n{extra}\n",
            repo = self.repo.display(),
            state = d.join("state").display(),
            run = d.join("run").display(),
            keys = d.join("keys").display(),
            cg = self.cgroup_parent,
        );
        std::fs::write(&self.config, text).unwrap();
    }

    /// Points the configuration at another repository URL (an HTTP server of the test).
    pub fn set_repository(&self, url: &str) {
        let text = std::fs::read_to_string(&self.config).unwrap();
        let rest: String = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
        std::fs::write(&self.config, format!("repository = \"{url}\"\n{rest}")).unwrap();
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }
    pub fn run_dir(&self) -> PathBuf {
        self.dir.join("run")
    }
    pub fn lxcpath(&self) -> PathBuf {
        self.dir.join("run/lxc")
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BERTH);
        c.args(args)
            .env("BERTH_CONFIG", &self.config)
            .stdin(Stdio::null());
        c
    }

    pub fn berth(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run berth")
    }

    /// Runs berth and asserts success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.berth(args);
        assert!(
            out.status.success(),
            "berth {args:?} failed ({}): {}\n{}\ndaemon log:\n{}",
            out.status,
            stderr(&out),
            stdout(&out),
            self.daemon_log_text()
        );
        stdout(&out)
    }

    /// Runs berth --json and parses stdout.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let s = self.ok(&a);
        serde_json::from_str(&s).unwrap_or_else(|e| panic!("berth {args:?}: bad JSON ({e}): {s}"))
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

    pub fn daemon_log_text(&self) -> String {
        std::fs::read_to_string(&self.daemon_log).unwrap_or_default()
    }

    pub fn start_daemon(&mut self) {
        self.start_daemon_env(&[]);
    }

    pub fn start_daemon_env(&mut self, env: &[(&str, &str)]) {
        assert!(self.daemon.is_none(), "daemon already started");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.daemon_log)
            .unwrap();
        let mut c = match &self.daemon_netns {
            Some(ns) => {
                // nsenter joins only the network namespace (ip netns exec would also remount
                // /sys, hiding the cgroup mounts) and execs berth: the pid stays the daemon's.
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/run/netns/{ns}"))
                    .args([BERTH, "daemon"])
                    .env("BERTH_CONFIG", &self.config)
                    .stdin(Stdio::null());
                c
            }
            None => self.cmd(&["daemon"]),
        };
        c.stdout(log.try_clone().unwrap()).stderr(log);
        for (k, v) in env {
            c.env(k, v);
        }
        self.daemon = Some(c.spawn().expect("spawn daemon"));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.berth(&["status"]).status.success() {
                return;
            }
            if let Some(st) = self.daemon.as_mut().unwrap().try_wait().unwrap() {
                panic!("daemon exited at start ({st}):\n{}", self.daemon_log_text());
            }
            assert!(Instant::now() < deadline, "daemon did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the daemon with `signal` and reaps it.
    pub fn kill_daemon(&mut self, signal: i32) {
        if let Some(mut c) = self.daemon.take() {
            // SAFETY-free: kill(1) keeps unsafe out of the tests.
            let _ = Command::new("kill")
                .args([format!("-{signal}"), c.id().to_string()])
                .status();
            let _ = c.wait();
        }
    }

    /// Waits for the daemon to exit on its own (e.g. after fault injection).
    pub fn wait_daemon_exit(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        if let Some(c) = self.daemon.as_mut() {
            while Instant::now() < deadline {
                if c.try_wait().unwrap().is_some() {
                    self.daemon = None;
                    return true;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            return false;
        }
        true
    }

    pub fn trust(&mut self, name: &str) {
        self.trusted.push(name.into());
    }

    /// Builds a package directory and packs it into the repository's packages/.
    pub fn pack(&self, p: &Pkg) -> PathBuf {
        let dir = self
            .dir
            .join("src")
            .join(format!("{}-{}", p.name, p.version));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(".berth")).unwrap();
        if p.with_busybox {
            std::fs::create_dir_all(dir.join("bin")).unwrap();
            std::fs::copy(busybox(), dir.join("bin/busybox")).unwrap();
            for l in ["sh", "cat", "echo", "sleep", "ls", "id"] {
                let _ = std::os::unix::fs::symlink("busybox", dir.join("bin").join(l));
            }
        }
        for (path, data) in &p.files {
            let f = dir.join(path);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(&f, data).unwrap();
            if path.ends_with(".sh") || path.starts_with("bin/") {
                std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                    .unwrap();
            }
        }
        let argv = p
            .argv
            .iter()
            .map(|a| format!("{a:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let manifest = format!(
            "[package]\nname = \"{}\"\nversion = \"{}\"\ndescription = \"test package {}\"\n{}\n[entrypoint]\nargv = [{argv}]\n{}\n{}\n",
            p.name, p.version, p.name, p.package_keys, p.entrypoint_keys, p.tables
        );
        std::fs::write(dir.join(".berth/manifest.toml"), manifest).unwrap();
        let out = self
            .repo
            .join("packages")
            .join(format!("{}-{}.sqfs", p.name, p.version));
        let o = self.berth(&["pack", dir.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert!(o.status.success(), "pack {}: {}", p.name, stderr(&o));
        out
    }

    /// Writes trusted.txt and (re)builds and signs the repository index.
    pub fn build_repo(&self) {
        let mut t = std::fs::File::create(self.repo.join("trusted.txt")).unwrap();
        for n in &self.trusted {
            writeln!(t, "{n}").unwrap();
        }
        self.ok(&[
            "repo",
            "build",
            self.repo.to_str().unwrap(),
            "--key",
            self.key.to_str().unwrap(),
        ]);
    }

    pub fn add(&self, p: &Pkg) {
        self.pack(p);
        self.build_repo();
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

    /// Mount points below the sandbox.
    pub fn mounts(&self) -> Vec<String> {
        let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let prefix = self.dir.to_str().unwrap().to_string();
        text.lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| m.starts_with(&prefix))
            .map(String::from)
            .collect()
    }

    /// Mounts that should not be there while no container runs: everything below the
    /// sandbox except the image mounts of installed packages (berth keeps those, so a restart
    /// finds the image's pages still cached).
    pub fn stray_mounts(&self) -> Vec<String> {
        let installed: Vec<String> = std::fs::read(self.state_dir().join("state.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| {
                v["packages"].as_object().map(|o| {
                    o.values()
                        .filter_map(|p| p["sha256"].as_str().map(String::from))
                        .collect()
                })
            })
            .unwrap_or_default();
        let mnt = self.run_dir().join("mnt");
        self.mounts()
            .into_iter()
            .filter(|m| {
                let p = Path::new(m);
                !(p.parent() == Some(mnt.as_path())
                    && p.file_name()
                        .and_then(|f| f.to_str())
                        .is_some_and(|f| installed.iter().any(|i| i == f)))
            })
            .collect()
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

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.kill_daemon(9);
        // Containers: stop everything LXC knows under our lxcpath.
        if let Ok(entries) = std::fs::read_dir(self.lxcpath()) {
            for e in entries.flatten() {
                let _ = Command::new("lxc-stop")
                    .args(["-P", self.lxcpath().to_str().unwrap(), "-n"])
                    .arg(e.file_name())
                    .arg("-k")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
        // Shims of this sandbox (they exit when their container ends; make sure).
        let _ = Command::new("pkill")
            .args([
                "-9",
                "-f",
                &format!("__shim .* {}", self.lxcpath().display()),
            ])
            .status();
        // Mounts, deepest first.
        let mut m = self.mounts();
        m.sort();
        for p in m.iter().rev() {
            let _ = Command::new("umount").args(["-l", p]).status();
        }
        // cgroups in every hierarchy.
        if let Ok(h) = std::fs::read_dir("/sys/fs/cgroup") {
            for h in h.flatten() {
                for parent in [
                    self.cgroup_parent.clone(),
                    format!("{}.monitor", self.cgroup_parent),
                ] {
                    let p = h.path().join(&parent);
                    if let Ok(kids) = std::fs::read_dir(&p) {
                        for k in kids.flatten().filter(|k| k.path().is_dir()) {
                            if let Ok(inner) = std::fs::read_dir(k.path()) {
                                for i in inner.flatten().filter(|i| i.path().is_dir()) {
                                    let _ = std::fs::remove_dir(i.path());
                                }
                            }
                            let _ = std::fs::remove_dir(k.path());
                        }
                    }
                    let _ = std::fs::remove_dir(&p);
                }
            }
        }
        if std::env::var_os("BERTH_KEEP_TEST_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
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
