//! A recording fake of the kernel boundary (`berth_sys::host`), for unit tests of the daemon's
//! apply code that run without root in milliseconds. It keeps a mount table of its own,
//! records every call in order, fails the calls a test asks to fail (with the errno a kernel
//! would give), and makes a mount show files: an image "mounted" shows the fixture tree the
//! test gave for it (copied into the mount point, removed again when it is unmounted), an
//! overlay shows its lowers merged (top wins), a bind shows its source. A process's mount
//! namespace is its fixture root, `<proc>/PID/root`, as the kernel shows it there. Processes
//! it starts are the programs a test names for them; liblxc knows the containers a test says
//! run; the system's tools (`ip`, `nft`, `dnsmasq`, e2fsprogs, `zstd`) answer what a test
//! says they answer, and a run nobody answered fails.
//!
//! What it does not model it refuses loudly (a mount on a directory that is not empty, a
//! mount point that does not exist), rather than let a test pass on a behaviour the kernel
//! does not have.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use berth_sys::host::{Host, Lxc, Mounts, Processes, Signals, ToolError, Tools};
use berth_sys::mount::{MountInfo, SysError};
use berth_sys::mountns::{Mount, Step};

/// The file system type the fake gives a directory bound onto itself.
const SELF_BIND: &str = "bind-self";

/// The fake's mounts and loop devices.
#[derive(Default)]
pub struct FakeMounts {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    calls: Vec<String>,
    table: Vec<MountInfo>,
    /// Failures asked for: (operation, calls of it to let through first, errno).
    failures: Vec<(&'static str, usize, i32)>,
    /// What mounting an image shows: image → fixture tree.
    trees: BTreeMap<PathBuf, PathBuf>,
    next_id: u32,
    next_loop: u32,
}

impl FakeMounts {
    pub fn new() -> FakeMounts {
        FakeMounts::default()
    }

    /// Mounting `image` (squashfs or ext4) shows the files of `tree`.
    pub fn image_tree(&self, image: &Path, tree: &Path) {
        let mut i = self.inner.lock().unwrap();
        i.trees.insert(image.to_path_buf(), tree.to_path_buf());
    }

    /// The next call of `op` (`mount_squashfs`, `mount_ext4`, `mount_overlay_ro`, `bind`,
    /// `bind_shared`, `umount`, `mounts_under`, `clone_tree`, `lock_tree`, `at_target`,
    /// `shows_at`) fails with `errno`, as the kernel would refuse it.
    pub fn fail_next(&self, op: &'static str, errno: i32) {
        self.fail_after(op, 0, errno);
    }

    /// The call of `op` after the next `skip` ones fails with `errno`.
    pub fn fail_after(&self, op: &'static str, skip: usize, errno: i32) {
        self.inner.lock().unwrap().failures.push((op, skip, errno));
    }

    /// Every call so far, in order: `OP ARG…` with the paths as given.
    pub fn calls(&self) -> Vec<String> {
        self.inner.lock().unwrap().calls.clone()
    }

    /// The mount points now mounted, in the order they were mounted.
    pub fn mounted(&self) -> Vec<PathBuf> {
        let i = self.inner.lock().unwrap();
        i.table.iter().map(|m| m.mount_point.clone()).collect()
    }

    /// This fake as the daemon's host, with signals that reach no process (every kill
    /// answers ESRCH): leaked, as a test's daemon lives as long as the test.
    pub fn into_host(self) -> (&'static FakeMounts, &'static Host) {
        let f = fake_host(self, FakeSignals::new(None));
        (f.mounts, f.host)
    }

    /// [`Self::enter`], failing as the mount namespace calls do (an errno).
    fn enter_io(&self, op: &'static str, args: &[&Path], target: &Path) -> io::Result<()> {
        self.enter(op, args, target)
            .map_err(|e| match e.raw_os_error() {
                Some(n) => io::Error::from_raw_os_error(n),
                None => io::Error::other(e.to_string()),
            })
    }

    /// Where `at` in the mount namespace of `pid` is: below its fixture root.
    fn in_namespace(proc_root: &Path, pid: i32, at: &Path) -> io::Result<PathBuf> {
        let root = proc_root.join(pid.to_string()).join("root");
        if !root.is_dir() {
            // No such process: its namespace cannot be entered.
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        Ok(root.join(at.strip_prefix("/").unwrap_or(at)))
    }

    /// Whether the top mount on `target` is of the image `id`.
    fn shows(&self, target: &Path, id: (u64, u64)) -> bool {
        let i = self.inner.lock().unwrap();
        i.table
            .iter()
            .rev()
            .find(|m| m.mount_point == target)
            .is_some_and(|m| m.source == id_word(id))
    }

    /// Records the call; the failure asked for it, if any.
    fn enter(&self, op: &'static str, args: &[&Path], target: &Path) -> Result<(), SysError> {
        let mut i = self.inner.lock().unwrap();
        let words: Vec<String> = args.iter().map(|p| p.display().to_string()).collect();
        i.calls.push(format!("{op} {}", words.join(" ")));
        if let Some(k) = i.failures.iter().position(|(o, _, _)| *o == op) {
            if i.failures[k].1 > 0 {
                i.failures[k].1 -= 1;
                return Ok(());
            }
            let (_, _, errno) = i.failures.remove(k);
            return Err(SysError::Io {
                op: op.to_string(),
                path: target.to_path_buf(),
                error: io::Error::from_raw_os_error(errno),
            });
        }
        Ok(())
    }

    /// Puts `shown` (trees, lowest first) on `target`, as a new mount.
    fn mount(
        &self,
        fs_type: &str,
        source: &Path,
        shown: &[PathBuf],
        target: &Path,
    ) -> Result<(), SysError> {
        let refuse =
            |why: &str| SysError::Invalid(format!("fake host: {why}: {}", target.display()));
        let has_files = std::fs::read_dir(target)
            .map_err(|e| SysError::Io {
                op: "mount".into(),
                path: target.to_path_buf(),
                error: e,
            })?
            .next()
            .is_some();
        if has_files {
            return Err(refuse(
                "a mount on a directory that is not empty is not modelled",
            ));
        }
        for tree in shown {
            copy_into(tree, target).map_err(|e| SysError::Io {
                op: format!("fake host: show {}", tree.display()),
                path: target.to_path_buf(),
                error: e,
            })?;
        }
        let mut i = self.inner.lock().unwrap();
        i.next_id += 1;
        let id = i.next_id;
        i.table.push(MountInfo {
            mount_id: id,
            parent_id: 0,
            root: "/".into(),
            mount_point: target.to_path_buf(),
            fs_type: fs_type.into(),
            source: source.display().to_string(),
            options: "ro".into(),
            super_options: String::new(),
        });
        Ok(())
    }

    fn tree_of(&self, image: &Path) -> Vec<PathBuf> {
        let i = self.inner.lock().unwrap();
        i.trees.get(image).cloned().into_iter().collect()
    }
}

impl Mounts for FakeMounts {
    fn mount_squashfs(&self, image: &Path, target: &Path) -> Result<(), SysError> {
        self.enter("mount_squashfs", &[image, target], target)?;
        let shown = self.tree_of(image);
        self.mount("squashfs", image, &shown, target)
    }

    fn mount_ext4(&self, image: &Path, target: &Path) -> Result<PathBuf, SysError> {
        self.enter("mount_ext4", &[image, target], target)?;
        let shown = self.tree_of(image);
        self.mount("ext4", image, &shown, target)?;
        let mut i = self.inner.lock().unwrap();
        i.next_loop += 1;
        Ok(PathBuf::from(format!("/dev/loop{}", i.next_loop - 1)))
    }

    fn mount_overlay_ro(&self, lowers: &[&Path], target: &Path) -> Result<(), SysError> {
        let mut args = lowers.to_vec();
        args.push(target);
        self.enter("mount_overlay_ro", &args, target)?;
        // Top first in the call; shown bottom first, so that the top wins.
        let shown: Vec<PathBuf> = lowers.iter().rev().map(|p| p.to_path_buf()).collect();
        self.mount("overlay", Path::new("overlay"), &shown, target)
    }

    fn bind(&self, src: &Path, target: &Path, read_only: bool) -> Result<(), SysError> {
        let ro = Path::new(if read_only { "ro" } else { "rw" });
        self.enter("bind", &[src, target, ro], target)?;
        let shown = if src.is_dir() {
            vec![src.to_path_buf()]
        } else {
            Vec::new()
        };
        self.mount("bind", src, &shown, target)
    }

    fn bind_shared(&self, dir: &Path) -> io::Result<()> {
        self.enter_io("bind_shared", &[dir], dir)?;
        if !dir.is_dir() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        // A directory bound onto itself shows what it holds: nothing to copy, nothing to
        // hide when it goes.
        let mut i = self.inner.lock().unwrap();
        i.next_id += 1;
        let id = i.next_id;
        i.table.push(MountInfo {
            mount_id: id,
            parent_id: 0,
            root: "/".into(),
            mount_point: dir.to_path_buf(),
            fs_type: SELF_BIND.into(),
            source: dir.display().to_string(),
            options: "rw,shared".into(),
            super_options: String::new(),
        });
        Ok(())
    }

    fn umount(&self, target: &Path, lazy: bool) -> Result<bool, SysError> {
        let how = Path::new(if lazy { "lazy" } else { "now" });
        self.enter("umount", &[target, how], target)?;
        let mut i = self.inner.lock().unwrap();
        // The last mount on it goes, as the kernel's umount takes the top one.
        let Some(k) = i.table.iter().rposition(|m| m.mount_point == target) else {
            return Ok(false);
        };
        let gone = i.table.remove(k);
        drop(i);
        if gone.fs_type == SELF_BIND {
            return Ok(true);
        }
        empty(target).map_err(|e| SysError::Io {
            op: "fake host: hide the mount's files".into(),
            path: target.to_path_buf(),
            error: e,
        })?;
        Ok(true)
    }

    fn mounts_under(&self, _proc_root: &Path, prefix: &Path) -> Result<Vec<MountInfo>, SysError> {
        self.enter("mounts_under", &[prefix], prefix)?;
        let i = self.inner.lock().unwrap();
        Ok(i.table
            .iter()
            .filter(|m| m.mount_point.starts_with(prefix))
            .cloned()
            .collect())
    }

    /// The image's directory itself, opened: what the fake's `at_target` shows for it.
    fn clone_tree(&self, image: &Path) -> io::Result<OwnedFd> {
        self.enter_io("clone_tree", &[image], image)?;
        Ok(std::fs::File::open(image)?.into())
    }

    fn lock_tree(&self, tree: &OwnedFd) -> io::Result<()> {
        let path = fd_path(tree)?;
        self.enter_io("lock_tree", &[&path], &path)
    }

    /// Refuses as the kernel does (`ENOENT`, `ENOTDIR`, `EBUSY`, `ENOTEMPTY`), then mounts
    /// what `m` names on the fixture root's directory; a mount that does not show `id` is
    /// undone, as the real one is. A propagated stage is not modelled: a `Mount::Bind` shows
    /// the path inside the fixture root, which nothing propagates to.
    fn at_target(
        &self,
        proc_root: &Path,
        pid: i32,
        at: PathBuf,
        m: Mount,
        id: (u64, u64),
        step: Step,
    ) -> io::Result<()> {
        let how = match &m {
            Mount::Tree(..) => "tree",
            Mount::Bind(_) => "bind",
            Mount::Off => "off",
        };
        let pid_word = PathBuf::from(pid.to_string());
        self.enter_io("at_target", &[&pid_word, &at, Path::new(how)], &at)?;
        let target = FakeMounts::in_namespace(proc_root, pid, &at)?;
        step("mountns.entered");
        if let Mount::Off = m {
            if self.shows(&target, id) {
                self.umount(&target, true).map_err(io::Error::other)?;
                step("mountns.unmounted");
            }
            return Ok(());
        }
        let md = std::fs::symlink_metadata(&target)?;
        if !md.is_dir() {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        if self.mounted().contains(&target) {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        if std::fs::read_dir(&target)?.next().is_some() {
            return Err(io::Error::from_raw_os_error(libc::ENOTEMPTY));
        }
        let source = match m {
            Mount::Tree(tree, _) => fd_path(&tree)?,
            Mount::Bind(src) => FakeMounts::in_namespace(proc_root, pid, &src)?,
            Mount::Off => unreachable!(),
        };
        let shown = std::fs::metadata(&source).map(|m| (m.dev(), m.ino()))?;
        self.mount(how, Path::new(&id_word(shown)), &[source], &target)
            .map_err(io::Error::other)?;
        step("mountns.mounted");
        if shown != id {
            let _ = self.umount(&target, true);
            return Err(io::Error::other(
                "the mount there is not the package's image",
            ));
        }
        Ok(())
    }

    fn shows_at(
        &self,
        proc_root: &Path,
        pid: i32,
        at: PathBuf,
        id: (u64, u64),
    ) -> io::Result<bool> {
        let pid_word = PathBuf::from(pid.to_string());
        self.enter_io("shows_at", &[&pid_word, &at], &at)?;
        let target = FakeMounts::in_namespace(proc_root, pid, &at)?;
        Ok(self.shows(&target, id))
    }
}

/// How the fake's table names an image shown in a namespace: its root's device and inode.
fn id_word(id: (u64, u64)) -> String {
    format!("{}:{}", id.0, id.1)
}

/// The path an open descriptor of the fake's is of.
fn fd_path(fd: &OwnedFd) -> io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// A fake host, its parts, and the host made of them.
pub struct FakeHost {
    pub mounts: &'static FakeMounts,
    pub signals: &'static FakeSignals,
    pub processes: &'static FakeProcesses,
    pub lxc: &'static FakeLxc,
    pub tools: &'static FakeTools,
    pub host: &'static Host,
}

/// A fake host of these mounts and signals, no process answered, no container running, no
/// tool answered (leaked: a test's daemon lives as long as the test).
pub fn fake_host(mounts: FakeMounts, signals: FakeSignals) -> &'static FakeHost {
    fn leak<T>(t: T) -> &'static T {
        Box::leak(Box::new(t))
    }
    let (mounts, signals) = (leak(mounts), leak(signals));
    let (processes, lxc) = (leak(FakeProcesses::default()), leak(FakeLxc::default()));
    let tools = leak(FakeTools::default());
    let host = leak(Host {
        mounts,
        signals,
        processes,
        lxc,
        tools,
    });
    leak(FakeHost {
        mounts,
        signals,
        processes,
        lxc,
        tools,
        host,
    })
}

/// The system's tools (`ip`, `nft`, `dnsmasq`, e2fsprogs, `zstd`): each run answered from a
/// table a test sets, by program (its file name: `/usr/sbin/e2fsck` is `e2fsck`) and the
/// first words of its arguments (the longest such prefix wins; an answer given once is used
/// once, before the lasting ones), or run for real where the test says so. A run nothing
/// answers could not be started, with an error saying the fake has no answer, so that no
/// test passes on a command it did not expect. Every run is recorded: its program, arguments
/// and input.
#[derive(Default)]
pub struct FakeTools {
    inner: Mutex<ToolState>,
}

/// One run: the program as given, its arguments, what it was fed on stdin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub prog: String,
    pub args: Vec<String>,
    pub input: Option<String>,
    /// The time limit it was run with.
    pub limit: Duration,
}

impl ToolCall {
    /// The command line: `prog arg…`.
    pub fn line(&self) -> String {
        std::iter::once(self.prog.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// How a run ends: its exit code, stdout and stderr; or the real tool's run.
#[derive(Clone)]
enum ToolAnswer {
    Exit(i32, String, String),
    Real,
}

#[derive(Default)]
struct ToolState {
    calls: Vec<ToolCall>,
    /// (program, arguments' prefix, answer, once).
    answers: Vec<(String, Vec<String>, ToolAnswer, bool)>,
}

impl FakeTools {
    /// Runs of `prog` whose arguments start with `prefix` answer `answer` (Ok: exit 0 with
    /// that stdout; Err: exit 1 with that stderr), until answered again.
    pub fn answer(&self, prog: &str, prefix: &[&str], answer: Result<String, String>) {
        self.set(prog, prefix, exit(answer), false);
    }

    /// The next run of `prog` whose arguments start with `prefix` answers `answer`.
    pub fn answer_once(&self, prog: &str, prefix: &[&str], answer: Result<String, String>) {
        self.set(prog, prefix, exit(answer), true);
    }

    /// Runs of `prog` whose arguments start with `prefix` exit with `code`, `stderr` said.
    pub fn answer_exit(&self, prog: &str, prefix: &[&str], code: i32, stderr: &str) {
        let answer = ToolAnswer::Exit(code, String::new(), stderr.into());
        self.set(prog, prefix, answer, false);
    }

    /// Runs of `prog` run the real tool (which the test checked is there).
    pub fn real(&self, prog: &str) {
        self.set(prog, &[], ToolAnswer::Real, false);
    }

    fn set(&self, prog: &str, prefix: &[&str], answer: ToolAnswer, once: bool) {
        let mut i = self.inner.lock().unwrap();
        let key: Vec<String> = prefix.iter().map(|a| a.to_string()).collect();
        if !once {
            i.answers
                .retain(|(p, k, _, o)| *o || p != prog || *k != key);
        }
        i.answers.push((prog.into(), key, answer, once));
    }

    /// Every run so far, in order.
    pub fn calls(&self) -> Vec<ToolCall> {
        self.inner.lock().unwrap().calls.clone()
    }

    /// The command lines of every run so far ([`ToolCall::line`]).
    pub fn lines(&self) -> Vec<String> {
        self.calls().iter().map(ToolCall::line).collect()
    }

    /// The answer to a run of `name` with `args`: the once-answer it takes, else the lasting.
    fn find(&self, name: &str, args: &[String]) -> Option<ToolAnswer> {
        let mut i = self.inner.lock().unwrap();
        let fits =
            |a: &&(String, Vec<String>, ToolAnswer, bool)| a.0 == name && args.starts_with(&a.1);
        let once = i.answers.iter().enumerate().filter(|(_, a)| a.3 && fits(a));
        if let Some((at, _)) = once.max_by_key(|(_, a)| a.1.len()) {
            return Some(i.answers.remove(at).2);
        }
        let lasting = i.answers.iter().filter(|a| !a.3).filter(fits);
        lasting.max_by_key(|a| a.1.len()).map(|a| a.2.clone())
    }
}

fn exit(answer: Result<String, String>) -> ToolAnswer {
    match answer {
        Ok(out) => ToolAnswer::Exit(0, out, String::new()),
        Err(err) => ToolAnswer::Exit(1, String::new(), err),
    }
}

impl Tools for FakeTools {
    fn run(
        &self,
        prog: &str,
        args: &[&str],
        input: Option<&[u8]>,
        limit: Duration,
    ) -> Result<Output, ToolError> {
        use std::os::unix::process::ExitStatusExt;
        let call = ToolCall {
            prog: prog.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            input: input.map(|i| String::from_utf8_lossy(i).into_owned()),
            limit,
        };
        self.inner.lock().unwrap().calls.push(call.clone());
        let name = Path::new(prog)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(prog);
        match self.find(name, &call.args) {
            Some(ToolAnswer::Exit(code, out, err)) => Ok(Output {
                status: std::process::ExitStatus::from_raw(code << 8),
                stdout: out.into_bytes(),
                stderr: err.into_bytes(),
            }),
            Some(ToolAnswer::Real) => berth_sys::host::REAL.tools.run(prog, args, input, limit),
            None => Err(ToolError::Spawn(io::Error::other(format!(
                "fake tools: no answer for `{}`",
                call.line()
            )))),
        }
    }
}

/// Processes the daemon starts: a start whose first argument a test answered runs the
/// program it named instead (a stand-in shim or helper, with the same arguments, environment
/// and pipes); any other is refused as a missing program is (ENOENT), and so is one the test
/// asked to fail, with its errno. Every start is recorded.
#[derive(Default)]
pub struct FakeProcesses {
    inner: Mutex<ProcessState>,
}

#[derive(Default)]
struct ProcessState {
    calls: Vec<String>,
    /// First argument → the program run instead.
    answers: Vec<(String, PathBuf)>,
    /// First argument → the errno of its next start.
    failures: Vec<(String, i32)>,
}

impl FakeProcesses {
    /// A start whose first argument is `word` (`__shim`, `__health`) runs `program`.
    pub fn answer(&self, word: &str, program: &Path) {
        let mut i = self.inner.lock().unwrap();
        i.answers.retain(|(w, _)| w != word);
        i.answers.push((word.into(), program.to_path_buf()));
    }

    /// The next start whose first argument is `word` fails with `errno`.
    pub fn fail_next(&self, word: &str, errno: i32) {
        let mut i = self.inner.lock().unwrap();
        i.failures.push((word.into(), errno));
    }

    /// Every start so far: its arguments, then its environment's `KEY=VALUE` words.
    pub fn calls(&self) -> Vec<String> {
        self.inner.lock().unwrap().calls.clone()
    }
}

impl Processes for FakeProcesses {
    fn spawn(
        &self,
        _exe: &Path,
        args: &[String],
        env: &[(&str, Option<&str>)],
        stdout: Stdio,
        stderr: Stdio,
    ) -> io::Result<Child> {
        let env: Vec<(&str, &str)> = env.iter().filter_map(|(k, v)| v.map(|v| (*k, v))).collect();
        let word = args.first().cloned().unwrap_or_default();
        let program = {
            let mut i = self.inner.lock().unwrap();
            let mut call = args.join(" ");
            for (k, v) in &env {
                call.push_str(&format!(" {k}={v}"));
            }
            i.calls.push(call);
            if let Some(k) = i.failures.iter().position(|(w, _)| *w == word) {
                let (_, errno) = i.failures.remove(k);
                return Err(io::Error::from_raw_os_error(errno));
            }
            match i.answers.iter().find(|(w, _)| *w == word) {
                Some((_, p)) => p.clone(),
                None => return Err(io::Error::from_raw_os_error(libc::ENOENT)),
            }
        };
        let mut cmd = std::process::Command::new(&program);
        cmd.args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        // A stand-in the test just wrote may still be open for writing in a process forked
        // elsewhere in the test binary (ETXTBSY) for a moment.
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            match cmd.spawn() {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                r => return r,
            }
        }
    }
}

/// What LXC knows: the containers a test says exist (a monitor listening), each with the
/// init liblxc names for it (None: liblxc says it does not run). Every question is recorded.
#[derive(Default)]
pub struct FakeLxc {
    inner: Mutex<LxcState>,
}

#[derive(Default)]
struct LxcState {
    calls: Vec<String>,
    /// `<lxcpath>/<name>` → its init, as liblxc would answer.
    monitors: Vec<(PathBuf, Option<i32>)>,
}

impl FakeLxc {
    /// An LXC monitor of `name` listens while the guard lives; liblxc says `init` runs it.
    pub fn monitor(&'static self, lxcpath: &Path, name: &str, init: Option<i32>) -> Monitor {
        let key = lxcpath.join(name);
        let mut i = self.inner.lock().unwrap();
        i.monitors.retain(|(k, _)| *k != key);
        i.monitors.push((key.clone(), init));
        Monitor { lxc: self, key }
    }

    /// Every question so far: `monitor_alive NAME` or `running_init NAME`.
    pub fn calls(&self) -> Vec<String> {
        self.inner.lock().unwrap().calls.clone()
    }

    fn ask(&self, op: &str, lxcpath: &Path, name: &str) -> Option<Option<i32>> {
        let mut i = self.inner.lock().unwrap();
        i.calls.push(format!("{op} {name}"));
        let key = lxcpath.join(name);
        i.monitors.iter().find(|(k, _)| *k == key).map(|(_, p)| *p)
    }
}

impl Lxc for FakeLxc {
    fn monitor_alive(&self, lxcpath: &Path, name: &str) -> bool {
        self.ask("monitor_alive", lxcpath, name).is_some()
    }
    fn running_init(&self, lxcpath: &Path, name: &str) -> Option<i32> {
        self.ask("running_init", lxcpath, name).flatten()
    }
}

/// A fake LXC monitor: gone (its container with it) when dropped.
pub struct Monitor {
    lxc: &'static FakeLxc,
    key: PathBuf,
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let mut i = self.lxc.inner.lock().unwrap();
        i.monitors.retain(|(k, _)| *k != self.key);
    }
}

/// Signals to processes of a fixture /proc: every kill is recorded; a process the test says
/// ends on a signal ends when it gets it (its directory in the fixture /proc goes, with
/// those of the processes that end with it, as a container's init follows its payload); a
/// pid without a directory there answers ESRCH, as the kernel does for a process that is gone.
pub struct FakeSignals {
    proc_root: Option<PathBuf>,
    inner: Mutex<SignalState>,
}

#[derive(Default)]
struct SignalState {
    calls: Vec<(i32, i32)>,
    /// (pid, signal) → the pids that end when it gets that signal.
    ends: Vec<((i32, i32), Vec<i32>)>,
}

impl FakeSignals {
    /// Over the fixture /proc at `proc_root` (None: no process exists).
    pub fn new(proc_root: Option<&Path>) -> FakeSignals {
        FakeSignals {
            proc_root: proc_root.map(Path::to_path_buf),
            inner: Mutex::new(SignalState::default()),
        }
    }

    /// `pid` ends when it gets `sig`, and `with` end with it.
    pub fn ends_on(&self, pid: i32, sig: i32, with: &[i32]) {
        let mut gone = vec![pid];
        gone.extend_from_slice(with);
        self.inner.lock().unwrap().ends.push(((pid, sig), gone));
    }

    /// Every kill so far: (pid, signal), in order.
    pub fn calls(&self) -> Vec<(i32, i32)> {
        self.inner.lock().unwrap().calls.clone()
    }
}

impl Signals for FakeSignals {
    fn kill(&self, pid: i32, sig: i32) -> io::Result<()> {
        let mut i = self.inner.lock().unwrap();
        i.calls.push((pid, sig));
        let Some(root) = &self.proc_root else {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        };
        if !root.join(pid.to_string()).exists() {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        let gone: Vec<i32> = i
            .ends
            .iter()
            .filter(|(k, _)| *k == (pid, sig))
            .flat_map(|(_, g)| g.clone())
            .collect();
        drop(i);
        for p in gone {
            let _ = std::fs::remove_dir_all(root.join(p.to_string()));
        }
        Ok(())
    }
}

/// Copies the files of `from` into the directory `to` (links as links).
fn copy_into(from: &Path, to: &Path) -> io::Result<()> {
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let t = e.file_type()?;
        if t.is_dir() {
            std::fs::create_dir_all(&dst)?;
            copy_into(&src, &dst)?;
        } else if t.is_symlink() {
            let _ = std::fs::remove_file(&dst);
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

/// Removes what is inside `dir`, leaving `dir` (what was under the mount point before).
fn empty(dir: &Path) -> io::Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries {
        let e = e?;
        if e.file_type()?.is_dir() {
            std::fs::remove_dir_all(e.path())?;
        } else {
            std::fs::remove_file(e.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_shows_its_tree_until_it_is_unmounted_and_failures_come_as_asked() {
        let d = crate::TempDir::new("fake-host");
        let (tree, mnt) = (d.path("tree"), d.path("mnt"));
        std::fs::create_dir_all(tree.join("etc")).unwrap();
        std::fs::write(tree.join("etc/hello"), "hi").unwrap();
        std::fs::create_dir_all(&mnt).unwrap();
        let (m, _) = FakeMounts::new().into_host();
        m.image_tree(Path::new("/img"), &tree);
        m.mount_squashfs(Path::new("/img"), &mnt).unwrap();
        assert_eq!(
            std::fs::read_to_string(mnt.join("etc/hello")).unwrap(),
            "hi"
        );
        assert_eq!(m.mounted(), vec![mnt.clone()]);
        assert_eq!(m.mounts_under(Path::new("/proc"), &d.0).unwrap().len(), 1);
        // A second mount on a mount point that shows files is not modelled: refused.
        assert!(m.mount_squashfs(Path::new("/img"), &mnt).is_err());
        assert!(m.umount(&mnt, true).unwrap());
        assert!(!mnt.join("etc").exists());
        assert!(!m.umount(&mnt, true).unwrap(), "nothing mounted any more");
        m.fail_next("mount_squashfs", libc::EBUSY);
        let e = m.mount_squashfs(Path::new("/img"), &mnt).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBUSY));
        assert!(m.mounted().is_empty());
        m.mount_squashfs(Path::new("/img"), &mnt).unwrap();
        let ops: Vec<String> = m
            .calls()
            .iter()
            .map(|c| c.split(' ').next().unwrap().to_string())
            .collect();
        assert_eq!(
            ops,
            [
                "mount_squashfs",
                "mounts_under",
                "mount_squashfs",
                "umount",
                "umount",
                "mount_squashfs",
                "mount_squashfs"
            ]
        );
    }

    #[test]
    fn a_signal_ends_whom_the_test_says_and_a_gone_process_is_esrch() {
        let d = crate::TempDir::new("fake-signals");
        for pid in [10, 11, 12] {
            std::fs::create_dir_all(d.path(&pid.to_string())).unwrap();
        }
        let s = FakeSignals::new(Some(&d.0));
        s.ends_on(11, libc::SIGTERM, &[10]);
        s.kill(12, libc::SIGTERM).unwrap();
        assert!(d.path("12").exists(), "12 ignores SIGTERM");
        s.kill(11, libc::SIGTERM).unwrap();
        assert!(!d.path("11").exists() && !d.path("10").exists());
        let e = s.kill(10, libc::SIGKILL).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESRCH));
        assert_eq!(
            s.calls(),
            [
                (12, libc::SIGTERM),
                (11, libc::SIGTERM),
                (10, libc::SIGKILL)
            ]
        );
        let none = FakeSignals::new(None);
        assert_eq!(
            none.kill(1, 0).unwrap_err().raw_os_error(),
            Some(libc::ESRCH)
        );
    }

    #[test]
    fn a_namespace_shows_an_image_at_its_fixture_root_refusing_as_the_kernel_does() {
        let d = crate::TempDir::new("fake-ns");
        let (img, proc) = (d.path("img"), d.path("proc"));
        std::fs::create_dir_all(img.join("bin")).unwrap();
        std::fs::write(img.join("bin/tool"), "").unwrap();
        let target = proc.join("7/root/opt/tool");
        std::fs::create_dir_all(&target).unwrap();
        let md = std::fs::metadata(&img).unwrap();
        let id = (md.dev(), md.ino());
        let (m, _) = FakeMounts::new().into_host();
        let at = PathBuf::from("/opt/tool");
        let tree = |m: &FakeMounts| Mount::Tree(m.clone_tree(&img).unwrap(), false);
        let e = m.at_target(&proc, 8, at.clone(), tree(m), id, |_| {});
        assert_eq!(
            e.unwrap_err().raw_os_error(),
            Some(libc::ENOENT),
            "no pid 8"
        );
        std::fs::write(target.join("x"), "").unwrap();
        let e = m.at_target(&proc, 7, at.clone(), tree(m), id, |_| {});
        assert_eq!(e.unwrap_err().raw_os_error(), Some(libc::ENOTEMPTY));
        std::fs::remove_file(target.join("x")).unwrap();
        let e = m.at_target(&proc, 7, at.clone(), tree(m), (0, 0), |_| {});
        assert!(e.is_err(), "not the image asked for: undone");
        assert!(!m.shows_at(&proc, 7, at.clone(), id).unwrap());
        m.at_target(&proc, 7, at.clone(), tree(m), id, |_| {})
            .unwrap();
        assert!(target.join("bin/tool").exists());
        assert!(m.shows_at(&proc, 7, at.clone(), id).unwrap());
        let e = m.at_target(&proc, 7, at.clone(), tree(m), id, |_| {});
        assert_eq!(e.unwrap_err().raw_os_error(), Some(libc::EBUSY));
        m.at_target(&proc, 7, at.clone(), Mount::Off, id, |_| {})
            .unwrap();
        assert!(!target.join("bin").exists() && target.is_dir());
        assert!(m.mounted().is_empty());
    }

    #[test]
    fn a_process_runs_the_program_answered_for_it_or_is_refused() {
        let d = crate::TempDir::new("fake-processes");
        let p = FakeProcesses::default();
        let args = |w: &str| vec![w.to_string(), "a b".to_string()];
        let run = |w: &str| {
            p.spawn(
                Path::new("/proc/self/exe"),
                &args(w),
                &[("K", Some("v")), ("UNSET", None)],
                Stdio::piped(),
                Stdio::null(),
            )
        };
        let e = run("__shim").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "nothing answers it");
        let script = d.path("stand-in");
        std::fs::write(&script, "#!/bin/sh\necho \"$1|$2|$K|${UNSET-unset}\"\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        p.answer("__shim", &script);
        let out = run("__shim").unwrap().wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "__shim|a b|v|unset\n");
        p.fail_next("__shim", libc::EAGAIN);
        let e = run("__shim").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
        assert!(run("__shim").is_ok(), "one failure asked, one given");
        assert_eq!(p.calls().len(), 4);
        assert_eq!(p.calls()[0], "__shim a b K=v");
    }

    #[test]
    fn liblxc_knows_the_containers_a_test_says_run_while_their_monitor_lives() {
        let lxc: &'static FakeLxc = Box::leak(Box::default());
        let path = Path::new("/lxc");
        assert!(!lxc.monitor_alive(path, "web"));
        let m = lxc.monitor(path, "web", Some(42));
        assert!(lxc.monitor_alive(path, "web"));
        assert!(!lxc.monitor_alive(Path::new("/other"), "web"));
        assert_eq!(lxc.running_init(path, "web"), Some(42));
        drop(m);
        assert_eq!(lxc.running_init(path, "web"), None);
        assert!(!lxc.monitor_alive(path, "web"));
        assert_eq!(lxc.calls().len(), 6);
    }

    #[test]
    fn tools_answer_from_the_table_longest_prefix_first_once_before_lasting_and_record_all() {
        let t = FakeTools::default();
        use berth_sys::error::ErrorKind;
        let checked = |prog: &str, args: &[&str], input: Option<&str>| {
            berth_sys::host::run_checked(&t, prog, args, input, berth_sys::host::TOOL_LIMIT)
        };
        let run = |prog: &str, args: &[&str], input: Option<&str>| {
            checked(prog, args, input).map_err(String::from)
        };
        let e = checked("ip", &["link", "show"], None).unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (
                ErrorKind::Unavailable,
                "ip: cannot run it (fake tools: no answer for `ip link show`); berth needs ip in PATH"
            )
        );
        t.answer("ip", &[], Ok("any".into()));
        t.answer("ip", &["link", "show"], Err("no such device".into()));
        assert_eq!(run("ip", &["addr"], None).unwrap(), "any");
        let e = checked("ip", &["link", "show", "x"], None).unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (
                ErrorKind::Refused,
                "ip link show x failed (exit status: 1): no such device"
            )
        );
        t.answer_once("ip", &["link"], Ok("once".into()));
        assert_eq!(run("ip", &["link", "show"], None).unwrap(), "once");
        assert!(run("ip", &["link", "show"], None).is_err(), "used once");
        t.answer("ip", &["link", "show"], Ok("there".into()));
        assert_eq!(run("ip", &["link", "show"], None).unwrap(), "there");
        t.answer_exit("e2fsck", &["-f"], 1, "corrected");
        let o = t
            .run(
                "/usr/sbin/e2fsck",
                &["-f", "-p", "img"],
                None,
                berth_sys::host::TOOL_LIMIT,
            )
            .unwrap();
        assert_eq!(
            (o.status.code(), &o.stderr[..]),
            (Some(1), &b"corrected"[..])
        );
        t.real("true");
        assert!(t
            .run("true", &[], None, berth_sys::host::TOOL_LIMIT)
            .unwrap()
            .status
            .success());
        assert!(run("nft", &["-f", "-"], Some("table inet t {}")).is_err());
        let calls = t.calls();
        assert_eq!(calls.len(), 9);
        assert_eq!(calls[6].line(), "/usr/sbin/e2fsck -f -p img");
        assert_eq!(calls[8].line(), "nft -f -");
        assert_eq!(calls[8].input.as_deref(), Some("table inet t {}"));
        assert_eq!(calls[1].input, None);
    }
}
