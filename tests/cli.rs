//! The command line as a hostile or careless user meets it: arguments that are not UTF-8,
//! and a container whose output carries terminal escape sequences.

mod common;

use common::*;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

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
    std::thread::sleep(std::time::Duration::from_millis(300));
    sb.ok(&["stop", "noisy"]);
    let out = f.wait_with_output().unwrap();
    let text = stdout(&out);
    assert!(text.contains("\\x1b[2J after"), "{text:?}");
    assert!(!text.contains('\x1b'), "{text:?}");
}
