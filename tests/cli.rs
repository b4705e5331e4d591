//! The command line as a hostile or careless user meets it: arguments that are not UTF-8, a
//! container whose output carries terminal escape sequences, and a reader that stops early.

mod common;

use common::*;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

/// Every command refuses a non-UTF-8 argument with a usage error (exit 2) naming it, never a
/// panic (exit 134, SIGABRT).
#[test]
fn arguments_that_are_not_utf8_are_refused_as_usage_errors() {
    let bad = OsStr::from_bytes(b"na\xffme");
    let cases: Vec<Vec<&OsStr>> = vec![
        vec![bad],
        vec![OsStr::new("status"), bad],
        vec![OsStr::new("install"), OsStr::new("web"), bad],
        vec![OsStr::new("--config"), bad, OsStr::new("status")],
        vec![
            OsStr::new("pack"),
            bad,
            OsStr::new("-o"),
            OsStr::new("/tmp/x.sqfs"),
        ],
        vec![
            OsStr::new("repo"),
            OsStr::new("build"),
            bad,
            OsStr::new("--key"),
            OsStr::new("k"),
        ],
        vec![OsStr::new("logs"), OsStr::new("-f"), bad],
    ];
    for args in cases {
        let out = Command::new(BERTH)
            .args(&args)
            .env("BERTH_CONFIG", "/nonexistent/berth.toml")
            .output()
            .unwrap();
        assert_eq!(out.status.signal(), None, "{args:?}: killed by a signal");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("is not valid UTF-8") && err.contains("na\\xFFme"),
            "{args:?}: {err}"
        );
    }
}

/// `berth logs` shows a container's escape sequences escaped (title change, clear screen,
/// 8-bit CSI), keeps its text, and gives the raw bytes with --raw; `logs -f` too.
#[test]
fn logs_escape_terminal_control_sequences_unless_raw() {
    let mut sb = Sandbox::new("cli-logs");
    sb.add(&Pkg::script(
        "noisy",
        "1.0",
        "printf 'before \\033]0;pwned\\007 \\033[2J after\\n'; printf 'caf\\303\\251 \\302\\2332J\\n'; echo done; exec sleep 600\n",
    ));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "noisy"]);
    sb.ok(&["start", "noisy"]);
    let shown = sb.wait_log("noisy", "done");
    assert!(
        shown.contains("before \\x1b]0;pwned\\x07 \\x1b[2J after\n"),
        "{shown:?}"
    );
    assert!(shown.contains("café \\u{9b}2J\n"), "{shown:?}");
    assert!(
        !shown.contains('\x1b') && !shown.contains('\x07'),
        "{shown:?}"
    );
    let raw = sb.berth(&["logs", "--raw", "noisy"]);
    assert!(raw.status.success());
    assert!(
        raw.stdout.windows(10).any(|w| w == b"\x1b]0;pwned\x07"),
        "{:?}",
        stdout(&raw)
    );
    // Following: the same escaping, until the container ends.
    let f = sb
        .cmd(&["logs", "-f", "noisy"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let_pass(
        std::time::Duration::from_millis(300),
        "the follower attaches to the log",
    );
    sb.ok(&["stop", "noisy"]);
    let out = f.wait_with_output().unwrap();
    let text = stdout(&out);
    assert!(text.contains("\\x1b[2J after"), "{text:?}");
    assert!(!text.contains('\x1b'), "{text:?}");
}

/// The write end of a pipe whose reader has already gone (what `| grep -q` leaves once it has
/// its match): a `true` took the read end and has exited.
fn gone_reader() -> Stdio {
    let mut reader = Command::new("true")
        .stdin(Stdio::piped())
        .spawn()
        .expect("run true");
    let end = reader.stdin.take().expect("the pipe's write end");
    reader.wait().expect("wait for true");
    Stdio::from(end)
}

/// Runs `cmd` with its stdout a pipe whose reader has gone: every write fails with EPIPE.
/// Returns the exit code and stderr.
fn to_a_closed_pipe(mut cmd: Command) -> (i32, String) {
    let out = cmd
        .stdout(gone_reader())
        .stderr(Stdio::piped())
        .output()
        .expect("run berth");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A reader that stops early (`berth --json status x | grep -q running`) neither crashes the
/// CLI (a panic, exit 134) nor changes its exit status; a stdout that cannot be written (a
/// full disk) is an error that says so.
#[test]
fn output_to_a_reader_that_has_gone_or_a_full_disk() {
    let mut sb = Sandbox::new("cli-pipe");
    // No daemon yet: the error's exit status (3) survives the closed pipe.
    let (code, err) = to_a_closed_pipe(sb.cmd(&["--json", "status"]));
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("berth: error:") && !err.contains("panicked"),
        "{err}"
    );
    // Its standard error gone too (`2>&1 | grep -q`), and a usage error: the statuses stay
    // (a panic on the error line would be 101 or 134).
    for (args, want) in [(&["--json", "status"][..], 3), (&["no-such-command"], 2)] {
        let status = sb
            .cmd(args)
            .stdout(gone_reader())
            .stderr(gone_reader())
            .status()
            .expect("run berth");
        assert_eq!(status.code(), Some(want), "berth {args:?}: {status:?}");
    }

    // A usage error whose standard error is a full disk: still status 2.
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full")
    };
    let status = sb
        .cmd(&["no-such-command"])
        .stderr(full())
        .status()
        .expect("run berth");
    assert_eq!(status.code(), Some(2), "{status:?}");

    sb.add(&Pkg::script(
        "piped",
        "1.0",
        "echo one; echo two; exec sleep 600\n",
    ));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "piped"]);
    sb.ok(&["start", "piped"]);
    sb.wait_log("piped", "two");
    for args in [
        &["--help"][..],
        &["--version"],
        &["status"],
        &["--json", "status", "piped"],
        &["list"],
        &["logs", "piped"],
    ] {
        let (code, err) = to_a_closed_pipe(sb.cmd(args));
        assert_eq!((code, err.as_str()), (0, ""), "berth {args:?}");
    }

    // A full disk: the status is 1, and a failed command's own error is said before the
    // JSON that could not be written.
    for args in [
        &["status"][..],
        &["logs", "piped"],
        &["--json", "status", "no-such-container"],
    ] {
        let out = sb.cmd(args).stdout(full()).output().expect("run berth");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "berth {args:?}: {err}");
        assert!(
            err.contains("cannot write to standard output") && !err.contains("panicked"),
            "berth {args:?}: {err}"
        );
        if args[0] == "--json" {
            assert!(err.contains("no-such-container"), "{err}");
        }
    }
}
