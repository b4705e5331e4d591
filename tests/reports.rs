//! Crash archives (docs/reports.md): a failed payload leaves exactly one archive with its
//! manifest, LXC configuration, log tail, cgroup state and summary; a crash says its
//! signal; the caps keep the newest; a clean exit leaves none; export and remove.

mod common;

use common::*;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

fn reports(sb: &Sandbox, name: &str) -> Vec<Value> {
    sb.json(&["report", "list", name])["reports"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Waits until `name` has `n` reports (the archive is written on its own thread).
fn wait_reports(sb: &Sandbox, name: &str, n: usize) -> Vec<Value> {
    wait_until(
        &format!("{n} report(s) of {name}"),
        Duration::from_secs(15),
        || reports(sb, name).len() == n,
    );
    reports(sb, name)
}

fn wait_stopped(sb: &Sandbox, name: &str) {
    wait_until(&format!("{name} stopped"), Duration::from_secs(15), || {
        let c = sb.status_of(name);
        c["state"] == "stopped" && !c["last_exit"].is_null()
    });
}

/// `tar` on the exported archive: its member list, or one member's bytes.
fn tar(args: &[&str], file: &std::path::Path) -> String {
    let out = Command::new("tar")
        .args(args)
        .arg(file)
        .output()
        .expect("run tar");
    assert!(out.status.success(), "tar {args:?}: {}", stderr(&out));
    stdout(&out)
}

fn member(file: &std::path::Path, path: &str) -> String {
    let out = Command::new("tar")
        .args(["-xzOf"])
        .arg(file)
        .arg(path)
        .output()
        .expect("run tar");
    assert!(out.status.success(), "tar -xzOf {path}: {}", stderr(&out));
    stdout(&out)
}

#[test]
fn crash_archives_are_written_listed_exported_capped_and_removed() {
    let mut sb = Sandbox::new("reports");
    let never = "[restart]\npolicy = \"never\"";
    sb.pack(
        &Pkg::script(
            "fails",
            "1.0",
            "echo payload-says-goodbye\nsleep 0.2\nexit 1\n",
        )
        .table(never),
    );
    sb.pack(
        &Pkg::script(
            "segv",
            "1.0",
            "echo up\nsleep 0.2\nkill -SEGV $$\nsleep 5\n",
        )
        .table(never),
    );
    sb.pack(&Pkg::script("fine", "1.0", "echo fine\nsleep 0.2\nexit 0\n").table(never));
    sb.pack(&Pkg::script("flaky", "1.0", "echo flaky\nsleep 0.2\nexit 2\n").table(never));
    sb.build_repo();
    sb.write_config("[reports]\nmax_per_container = 2\n");
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "fails", "segv", "fine", "flaky"]);

    // A payload that exits 1: exactly one archive.
    sb.ok(&["start", "fails"]);
    wait_stopped(&sb, "fails");
    let list = wait_reports(&sb, "fails", 1);
    quiet_for(Duration::from_millis(500), "a second archive of one event");
    assert_eq!(reports(&sb, "fails").len(), 1, "one event, one archive");
    let r = &list[0];
    let id = r["id"].as_str().unwrap().to_string();
    assert!(id.ends_with("-fails-exit"), "{id}");
    assert_eq!(r["reason"], "exit", "{r}");
    assert_eq!(r["detail"], "exit 1", "{r}");
    let text = sb.ok(&["report", "list"]);
    assert!(text.contains(&id) && text.contains("exit 1"), "{text}");
    let stored = sb.state_dir().join(format!(
        "reports/fails/{id}.{}",
        r["format"].as_str().unwrap()
    ));
    assert!(stored.is_file(), "{}", stored.display());

    let out_dir = TempDir::new("berth-report-export");
    let file = out_dir.path("fails.tar.gz");
    let file_s = file.to_str().unwrap();
    sb.ok(&["report", "export", &id, "-o", file_s]);
    let members = tar(&["-tzf"], &file);
    for m in [
        "summary.json",
        "manifest.json",
        "lxc.config",
        "log.txt",
        "exit.json",
        "cgroup.txt",
        "meminfo.txt",
    ] {
        assert!(
            members.lines().any(|l| l == format!("{id}/{m}")),
            "{m} not in the archive:\n{members}"
        );
    }
    assert!(member(&file, &format!("{id}/log.txt")).contains("payload-says-goodbye"));
    assert!(member(&file, &format!("{id}/lxc.config")).contains("lxc."));
    assert!(member(&file, &format!("{id}/manifest.json")).contains("fails"));
    let summary: Value =
        serde_json::from_str(&member(&file, &format!("{id}/summary.json"))).unwrap();
    assert_eq!(summary["reason"], "exit", "{summary}");
    assert_eq!(summary["exit"]["code"], 1, "{summary}");
    assert_eq!(summary["name"], "fails", "{summary}");
    assert_eq!(summary["version"], "1.0", "{summary}");
    println!(
        "archive of a payload that exits 1: {} bytes",
        std::fs::metadata(&file).unwrap().len()
    );
    // show: the summary and the members
    let shown = sb.ok(&["report", "show", &id]);
    assert!(
        shown.contains("log.txt") && shown.contains("exit 1"),
        "{shown}"
    );
    // no overwrite without --force; an unknown id is named
    let (code, err) = sb.fail(&["report", "export", &id, "-o", file_s]);
    assert_eq!(code, 1);
    assert!(err.contains("exists") && err.contains("--force"), "{err}");
    sb.ok(&["report", "export", &id, "-o", file_s, "--force"]);
    let unknown = "20000101T000000Z-fails-exit";
    let (_, err) = sb.fail(&["report", "show", unknown]);
    assert!(err.contains(unknown), "{err}");
    // (a path of this test's own that does not exist: a fixed /tmp/x once existed here)
    let none = format!("{file_s}.none");
    let v = sb.berth(&["--json", "report", "export", unknown, "-o", &none]);
    assert!(stdout(&v).contains("no_such_report"), "{}", stdout(&v));

    // Killed by SIGSEGV: the summary says the signal.
    sb.ok(&["start", "segv"]);
    wait_stopped(&sb, "segv");
    let r = &wait_reports(&sb, "segv", 1)[0];
    assert_eq!(r["reason"], "signal", "{r}");
    let id = r["id"].as_str().unwrap();
    let v = sb.json(&["report", "show", id]);
    assert_eq!(v["summary"]["exit"]["signal"], 11, "{v}");
    assert!(
        v["summary"]["detail"]
            .as_str()
            .unwrap()
            .starts_with("signal 11"),
        "{v}"
    );

    // A clean exit makes none.
    sb.ok(&["start", "fine"]);
    wait_stopped(&sb, "fine");
    quiet_for(Duration::from_secs(1), "an archive of a clean exit");
    assert!(reports(&sb, "fine").is_empty());

    // max_per_container = 2: of three crashes the two newest remain.
    let mut made = Vec::new();
    for i in 1..=3 {
        sb.ok(&["start", "flaky"]);
        wait_stopped(&sb, "flaky");
        let want = i.min(2);
        wait_until("the new report", Duration::from_secs(15), || {
            let ids: Vec<String> = reports(&sb, "flaky")
                .iter()
                .map(|r| r["id"].as_str().unwrap().to_string())
                .collect();
            match ids.iter().find(|id| !made.contains(*id)) {
                Some(new) if ids.len() == want => {
                    made.push(new.clone());
                    true
                }
                _ => false,
            }
        });
    }
    let left: Vec<String> = reports(&sb, "flaky")
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(left, made[1..].to_vec(), "made {made:?}");

    // remove one, then all
    sb.ok(&["report", "remove", &made[2]]);
    assert_eq!(reports(&sb, "flaky").len(), 1);
    sb.ok(&["report", "remove", "--all"]);
    assert!(sb.json(&["report", "list"])["reports"]
        .as_array()
        .unwrap()
        .is_empty());
}
