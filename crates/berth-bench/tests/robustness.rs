//! berth-bench under bad conditions, with real runs (root, LXC): an interrupted run keeps
//! its partial results, missing and failing tools are reported per test while the other
//! suites go on, a server that never comes up fails its suite by name, leftovers of a killed
//! run are cleaned on the next start, and every tool berth-bench asks for names the Debian
//! package that really ships it.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use berth_testkit::TempDir;
use serde_json::Value;

const BENCH: &str = env!("CARGO_BIN_EXE_berth-bench");

/// The runs load the machine: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn have(tool: &str) -> bool {
    ["/usr/bin", "/usr/sbin", "/bin", "/sbin"]
        .iter()
        .any(|d| Path::new(d).join(tool).is_file())
}

/// berth-bench runs the `berth` next to it: build it (debug, the same target directory).
fn berth_built() {
    let next = Path::new(BENCH).with_file_name("berth");
    if !next.is_file() {
        let st = Command::new(env!("CARGO"))
            .args(["build", "-q", "-p", "berth", "--bin", "berth"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo");
        assert!(st.success(), "cargo build -p berth failed");
    }
    assert!(next.is_file(), "no berth next to berth-bench");
}

fn json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn metric<'a>(doc: &'a Value, suite: &str, starts: &str) -> &'a Value {
    doc["suites"][suite]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["test"].as_str().unwrap().starts_with(starts))
        .unwrap_or_else(|| panic!("no {suite} metric {starts}"))
}

fn no_leftovers(pid: u32) {
    let dir = std::env::temp_dir().join(format!("berth-bench-{pid}"));
    assert!(!dir.exists(), "{} is left", dir.display());
    for h in ["cpu", "memory", "unified"] {
        let cg = Path::new("/sys/fs/cgroup")
            .join(h)
            .join(format!("berth-bench-{pid}"));
        assert!(!cg.exists(), "{} is left", cg.display());
    }
}

#[test]
fn interrupted_run_keeps_what_completed() {
    if !(have("sysbench") && have("stress-ng")) {
        berth_sys::skip::record(
            "package sysbench stress-ng",
            "interrupted_run_keeps_what_completed: sysbench and stress-ng are not installed",
        );
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    berth_built();
    let t = TempDir::new("intr");
    let (j, md, svg) = (t.0.join("run.json"), t.0.join("run.md"), t.0.join("svg"));
    let mut child = Command::new(BENCH)
        .args(["--quick", "--json"])
        .arg(&j)
        .arg("--markdown")
        .arg(&md)
        .arg("--svg")
        .arg(&svg)
        .arg("cpu")
        .env("BERTH_BENCH_PROGRESS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let err = BufReader::new(child.stderr.take().unwrap());
    let mut log = Vec::new();
    let mut sent = false;
    // Interrupt once the sysbench tests are done and stress-ng runs.
    for l in err.lines() {
        let l = l.unwrap();
        if !sent && l.contains("cpu: stress-ng") {
            // SAFETY: plain kill(2) of our own child.
            assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGINT) }, 0);
            sent = true;
        }
        log.push(l);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "berth-bench did not stop: {log:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(sent, "never reached stress-ng: {log:#?}");
    assert_eq!(st.code(), Some(130), "{log:#?}");

    let doc = json(&j);
    assert_eq!(doc["interrupted"], true);
    assert_eq!(doc["format"], 1);
    // The sysbench tests completed before the signal: all their samples are there.
    let s1 = metric(&doc, "cpu", "sysbench cpu, 1 instance");
    assert_eq!(s1["host"].as_array().unwrap().len(), 3, "{s1}");
    assert!(s1["error"].is_null());
    // Linpack came after the signal: marked, not measured.
    let hpl = metric(&doc, "cpu", "Linpack");
    assert!(
        hpl["error"] == "interrupted" || hpl["skipped"].is_string(),
        "{hpl}"
    );
    let report = std::fs::read_to_string(&md).unwrap();
    assert!(report.starts_with("# berth-bench report (interrupted)"));
    assert!(report.contains("## cpu (interrupted)"));
    assert!(report.contains("not measured (interrupted)") || hpl["skipped"].is_string());
    assert!(report.contains("| sysbench cpu, 8 instances (s) | "));
    assert!(svg.join("cpu.svg").is_file());
    assert!(log.iter().any(|l| l.contains("partial results written")));
    no_leftovers(pid);
}

/// A PATH with everything of /usr/bin, /usr/sbin except `hide`, and `extra` scripts.
fn path_without(dir: &Path, hide: &[&str], extra: &[(&str, &str)]) -> String {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for d in ["/usr/local/bin", "/usr/bin", "/usr/sbin", "/bin", "/sbin"] {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let name = e.file_name();
            let to = bin.join(&name);
            if hide.iter().any(|h| name == **h) || to.exists() {
                continue;
            }
            symlink(e.path(), to).unwrap();
        }
    }
    for (name, body) in extra {
        let p = bin.join(name);
        let _ = std::fs::remove_file(&p);
        std::fs::write(&p, body).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(&p, mode).unwrap();
    }
    bin.display().to_string()
}

#[test]
fn missing_and_failing_tools_are_reported_and_the_rest_goes_on() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    berth_built();
    let t = TempDir::new("tools");
    let path = path_without(
        &t.0,
        &["sysbench", "stress-ng", "hpcc", "mbw"],
        &[(
            "sysbench",
            "#!/bin/sh\necho 'sysbench: simulated failure' >&2\nexit 3\n",
        )],
    );
    let (j, md) = (t.0.join("run.json"), t.0.join("run.md"));
    let child = Command::new(BENCH)
        .args(["--quick", "--json"])
        .arg(&j)
        .arg("--markdown")
        .arg(&md)
        .args(["cpu", "mem"])
        .env("PATH", &path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // The failed test makes the run fail, after everything was written.
    assert_eq!(out.status.code(), Some(1), "{err}");
    let doc = json(&j);
    let s1 = metric(&doc, "cpu", "sysbench cpu, 1 instance");
    let e = s1["error"].as_str().unwrap_or_else(|| panic!("{s1}"));
    assert!(
        e.contains("sysbench") && e.contains("simulated failure"),
        "{e}"
    );
    for (suite, test, pkg) in [
        ("cpu", "stress-ng", "stress-ng"),
        ("cpu", "Linpack", "hpcc"),
        ("mem", "STREAM Copy", "hpcc"),
        ("mem", "mbw memcpy", "mbw"),
    ] {
        let m = metric(&doc, suite, test);
        let why = m["skipped"].as_str().unwrap_or_else(|| panic!("{m}"));
        assert!(
            why.contains(&format!("install the Debian package {pkg})")),
            "{why}"
        );
    }
    let report = std::fs::read_to_string(&md).unwrap();
    assert!(report.contains("## mem"), "the mem suite did not run");
    assert!(report.contains("error: sysbench: unexpected output: sysbench: simulated failure"));
    assert!(
        err.contains("self-check: cpu: sysbench cpu, 1 instance: "),
        "{err}"
    );
    no_leftovers(pid);
}

/// Undoes what `leftovers_are_cleaned_on_the_next_start` set up when it fails.
struct Leftovers {
    dir: PathBuf,
    netns: String,
    cgroups: Vec<PathBuf>,
}
impl Drop for Leftovers {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.join("mnt"))
            .status();
        if let Ok(out) = Command::new("losetup")
            .args(["-j"])
            .arg(self.dir.join("img"))
            .output()
        {
            for l in String::from_utf8_lossy(&out.stdout).lines() {
                if let Some(dev) = l.split(':').next() {
                    let _ = Command::new("losetup").args(["-d", dev]).status();
                }
            }
        }
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.netns])
            .stderr(Stdio::null())
            .status();
        for c in &self.cgroups {
            let _ = std::fs::remove_dir(c);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn leftovers_are_cleaned_on_the_next_start() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A pid no process has: the run that "was killed".
    let pid = (3_900_000..3_999_999)
        .find(|p| !Path::new(&format!("/proc/{p}")).exists())
        .unwrap();
    let name = format!("berth-bench-{pid}");
    let dir = std::env::temp_dir().join(&name);
    let mut l = Leftovers {
        dir: dir.clone(),
        netns: format!("{name}.test"),
        cgroups: Vec::new(),
    };
    std::fs::create_dir_all(dir.join("mnt")).unwrap();
    let ok = |c: &mut Command| assert!(c.status().unwrap().success(), "{c:?}");
    ok(Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(dir.join("mnt")));
    std::fs::write(dir.join("img"), vec![0u8; 1 << 20]).unwrap();
    let lo = Command::new("losetup")
        .args(["-f", "--show"])
        .arg(dir.join("img"))
        .output()
        .unwrap();
    assert!(lo.status.success());
    let lo = String::from_utf8_lossy(&lo.stdout).trim().to_string();
    ok(Command::new("ip").args(["netns", "add", &l.netns]));
    for h in ["cpu", "unified"] {
        let c = Path::new("/sys/fs/cgroup").join(h).join(&name);
        if std::fs::create_dir(&c).is_ok() {
            l.cgroups.push(c);
        }
    }
    assert!(!l.cgroups.is_empty(), "no cgroup hierarchy to test with");

    let out = Command::new(BENCH).arg("clean").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let line = err
        .lines()
        .find(|x| x.contains(&format!("killed (pid {pid})")))
        .unwrap_or_else(|| panic!("not reported: {err}"));
    for what in [
        "1 mounts",
        "loop devices loop",
        "network namespaces",
        "cgroups",
    ] {
        assert!(line.contains(what), "{what} not in {line}");
    }
    assert!(!dir.exists());
    assert!(!Path::new("/run/netns").join(&l.netns).exists());
    for c in &l.cgroups {
        assert!(!c.exists(), "{}", c.display());
    }
    let dev = lo.trim_start_matches("/dev/");
    assert!(!Path::new("/sys/block")
        .join(dev)
        .join("loop/backing_file")
        .exists());
    // Nothing left: a second clean has nothing to say about that pid.
    let again = Command::new(BENCH).arg("clean").output().unwrap();
    assert!(!String::from_utf8_lossy(&again.stderr).contains(&format!("(pid {pid})")));
}

/// Every tool berth-bench names with a Debian package (the check before a run, each suite's
/// `Tool`) is shipped by that package, as dpkg says for the tools installed here.
#[test]
fn every_tool_names_its_debian_package() {
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let mut pairs: Vec<(String, String)> = Vec::new();
    // main.rs: need.push(("tool", "package")) and the initial vec![("tool", "package"), …].
    let main = std::fs::read_to_string(format!("{src}/main.rs")).unwrap();
    let check = &main[main.find("fn check_tools").unwrap()..];
    let check = &check[..check.find("\n}\n").unwrap()];
    for part in check.split("(\"").skip(1) {
        let mut q = part.split('"');
        let (tool, sep, pkg) = (q.next(), q.next(), q.next());
        if let (Some(t), Some(", "), Some(p)) = (tool, sep, pkg) {
            pairs.push((t.into(), p.into()));
        }
    }
    // suites: Tool { bin: "x", debian: "y" }.
    for e in std::fs::read_dir(format!("{src}/suites"))
        .unwrap()
        .flatten()
    {
        let text = std::fs::read_to_string(e.path()).unwrap();
        for part in text.split("bin: \"").skip(1) {
            let bin = part.split('"').next().unwrap();
            let deb = part
                .split("debian: \"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            pairs.push((bin.into(), deb.into()));
        }
    }
    // The suites' and modules' own lists: `const NEEDED: … = &[("tool", "package"), …]` and
    // `for (tool, pkg) in [("tool", "package"), …]`.
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(src)
        .unwrap()
        .chain(std::fs::read_dir(format!("{src}/suites")).unwrap())
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    let mut listed = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for marker in ["const NEEDED", "for (tool, pkg) in ["] {
            for block in text.split(marker).skip(1) {
                let end = [block.find("];"), block.find("] {")]
                    .into_iter()
                    .flatten()
                    .min()
                    .unwrap_or(block.len());
                let block = &block[..end];
                for part in block.split("(\"").skip(1) {
                    let mut q = part.split('"');
                    if let (Some(t), Some(", "), Some(p)) = (q.next(), q.next(), q.next()) {
                        pairs.push((t.into(), p.into()));
                        listed += 1;
                    }
                }
            }
        }
    }
    assert!(
        listed >= 15,
        "the suites' tool lists were not found: {pairs:?}"
    );
    pairs.push(("runc".into(), "runc".into()));
    pairs.push(("gcc".into(), "gcc".into()));
    assert!(pairs.len() >= 12, "{pairs:?}");
    let mut checked = 0;
    for (tool, pkg) in &pairs {
        if !have(tool) {
            println!("not installed here, not checked: {tool}");
            continue;
        }
        let out = Command::new("dpkg")
            .args(["-S", &format!("*bin/{tool}")])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let owners: Vec<&str> = text
            .lines()
            .filter(|l| l.ends_with(&format!("bin/{tool}")))
            .flat_map(|l| l.split(':').next().unwrap().split(", "))
            .collect();
        // gcc's binary is a symlink from the gcc package (to gcc-12).
        assert!(
            owners.contains(&pkg.as_str()),
            "{tool}: {pkg} not among {owners:?}"
        );
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} tools installed");
}

#[test]
fn terminated_during_setup_writes_a_report_that_says_so() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    berth_built();
    let t = TempDir::new("term");
    let (j, md) = (t.0.join("run.json"), t.0.join("run.md"));
    let mut child = Command::new(BENCH)
        .args(["--quick", "--json"])
        .arg(&j)
        .arg("--markdown")
        .arg(&md)
        .args(["footprint", "fs"])
        .env("BERTH_BENCH_PROGRESS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut log = Vec::new();
    for l in BufReader::new(child.stderr.take().unwrap()).lines() {
        let l = l.unwrap();
        if log.is_empty() && l.contains("sandbox in") {
            // SAFETY: plain kill(2) of our own child.
            assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
        }
        log.push(l);
    }
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(130), "{log:#?}");
    let doc = json(&j);
    assert_eq!(doc["interrupted"], true);
    for s in ["footprint", "fs"] {
        let e = doc["suites"][s]["error"].as_str().unwrap_or_default();
        assert!(
            e.starts_with("not run: the run was interrupted"),
            "{s}: {e}"
        );
    }
    let report = std::fs::read_to_string(&md).unwrap();
    assert!(report.starts_with("# berth-bench report (interrupted)"));
    assert!(report.contains("## fs\n\n**not run: the run was interrupted"));
    no_leftovers(pid);
}

/// The committed runs stay readable: compare of one against itself, charts of each.
#[test]
fn committed_results_compare_and_chart() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/benchmarks/results");
    let t = TempDir::new("committed");
    for f in ["full-activation-footprint", "full-cpu-mem-fs", "quick-all"] {
        let p = format!("{dir}/{f}.json");
        let out = Command::new(BENCH)
            .args(["compare", &p, &p])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let md = String::from_utf8_lossy(&out.stdout);
        assert!(md.contains("No difference in the recorded environment."));
        assert!(!md.contains("| yes |"), "a run differs from itself: {md}");
        let out = Command::new(BENCH)
            .args(["svg", &p])
            .arg(t.0.join(f))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let n = std::fs::read_dir(t.0.join(f)).unwrap().count();
        assert!(n >= 2, "{f}: {n} charts");
    }
    // Bad input: a clear message naming the file, exit 1.
    let out = Command::new(BENCH)
        .args(["compare", "/nonexistent/a.json", "b.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/a.json: no such file"));
    let out = Command::new(BENCH)
        .args(["compare", "one.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("compare needs two files"));
}

#[test]
fn interrupted_activation_keeps_its_complete_rounds() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    berth_built();
    let t = TempDir::new("act");
    let j = t.0.join("run.json");
    let mut child = Command::new(BENCH)
        .args(["--quick", "--runs", "30", "--json"])
        .arg(&j)
        .args(["--markdown", "/dev/null", "activation"])
        .env("BERTH_BENCH_PROGRESS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut log = Vec::new();
    for l in BufReader::new(child.stderr.take().unwrap()).lines() {
        let l = l.unwrap();
        if l.contains("activation: round 4/30") {
            // SAFETY: plain kill(2) of our own child.
            assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGINT) }, 0);
        }
        log.push(l);
    }
    assert_eq!(child.wait().unwrap().code(), Some(130), "{log:#?}");
    let doc = json(&j);
    let a = &doc["suites"]["activation"];
    let done = a["rounds_completed"]
        .as_u64()
        .unwrap_or_else(|| panic!("{a}")) as usize;
    assert!((3..30).contains(&done), "{done} rounds");
    for k in [
        "berth_first_instruction",
        "lxc_execute_first_instruction",
        "berth_stop",
    ] {
        assert_eq!(a["samples_ms"][k].as_array().unwrap().len(), done, "{k}");
    }
    no_leftovers(pid);
}

/// A server that never comes up (here: the host's request-response server, which starts but
/// never listens) makes its suite fail with a message naming the server and its address,
/// after a bounded wait; the report is written and the suite's namespaces, containers and
/// cgroups are gone.
#[test]
fn a_server_that_never_comes_up_fails_its_suite_with_its_name() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    berth_built();
    for tool in ["iperf3", "perl", "ip", "nft"] {
        assert!(
            have(tool),
            "the net suite needs {tool}: install iperf3, perl, iproute2, nftables"
        );
    }
    let t = TempDir::new("noserver");
    // `perl echo.pl PORT` is the suite's request-response server on the host: it sleeps
    // instead; every other use of perl (the client) is the real one.
    let pidfile = t.0.join("server.pid");
    let wrapper = format!(
        "#!/bin/sh\ncase \"$1\" in */echo.pl) echo $$ > {}; exec sleep 600 ;; esac\nexec /usr/bin/perl \"$@\"\n",
        pidfile.display()
    );
    let path = path_without(&t.0, &[], &[("perl", &wrapper)]);
    let (j, md) = (t.0.join("run.json"), t.0.join("run.md"));
    let t0 = Instant::now();
    let child = Command::new(BENCH)
        .args(["--quick", "--json"])
        .arg(&j)
        .arg("--markdown")
        .arg(&md)
        .arg("net")
        .env("PATH", &path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        took < Duration::from_secs(240),
        "gave up only after {took:?}"
    );
    let doc = json(&j);
    let e = doc["suites"]["net"]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error for net: {}", doc["suites"]["net"]));
    assert!(
        e.contains("host (device namespace) does not answer on 192.0.2.1:7101"),
        "{e}"
    );
    let report = std::fs::read_to_string(&md).unwrap();
    assert!(report.contains("## net"), "{report}");
    assert!(
        report.contains("does not answer on 192.0.2.1:7101"),
        "{report}"
    );
    no_leftovers(pid);
    let ns = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("berth-bench-{pid}.")))
        .collect::<Vec<_>>();
    assert!(ns.is_empty(), "network namespaces left: {ns:?}");
    // the sleeping "server" was stopped with the run
    let server = std::fs::read_to_string(&pidfile).expect("the server was never started");
    let server = server.trim();
    let stat = std::fs::read_to_string(format!("/proc/{server}/cmdline")).unwrap_or_default();
    assert!(
        !stat.starts_with("sleep\x00600"),
        "the run's server (pid {server}) is still running"
    );
}
