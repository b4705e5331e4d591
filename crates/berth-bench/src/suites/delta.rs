//! delta: what delta images save on real package upgrades (docs/repository.md, "Delta
//! images"). Each case is a package made of Debian packages at the oldest and the newest
//! version the archive serves today (`apt-cache madison`, `apt-get download`): both are
//! packed with `berth pack` (xz squashfs, as vendors ship), published with `berth repo build
//! --deltas-from` (berth's zstd `--patch-from` delta), and the same pair is diffed with
//! bsdiff and xdelta3 for comparison: delta sizes, the times to make and to apply each, and
//! the peak memory of applying (GNU time's maximum RSS). Then a nested daemon that holds the
//! old version upgrades to the new one through its repository, and its log says how many
//! bytes it fetched. balena reports deltas 10–70× smaller than the images.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::{json, Value};

use super::{Ctx, Suite};
use crate::report::{bytes, Section, SuiteOutput, Table};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::util::{output, progress, run, Result};

/// (case, Debian packages: the first is the one whose versions are compared; the others take
/// the same choice of oldest or newest, or stay at their newest when `libs_fixed`).
struct Case {
    name: &'static str,
    debs: &'static [&'static str],
    libs_fixed: bool,
    what: &'static str,
}

const CASES: &[Case] = &[
    Case {
        name: "nginx-light",
        debs: &["nginx-light"],
        libs_fixed: false,
        what: "a web server's security update (configuration and modules)",
    },
    Case {
        name: "mosquitto",
        debs: &["mosquitto", "libssl3"],
        libs_fixed: true,
        what: "the MQTT broker's update, its bundled OpenSSL unchanged",
    },
    Case {
        name: "mosquitto-openssl",
        debs: &["mosquitto", "libssl3"],
        libs_fixed: false,
        what: "the broker and its bundled OpenSSL both updated",
    },
    Case {
        name: "curl",
        debs: &["curl", "libcurl4"],
        libs_fixed: false,
        what: "curl and libcurl, ten point releases apart",
    },
    Case {
        name: "python3.11",
        debs: &[
            "python3.11-minimal",
            "libpython3.11-minimal",
            "libpython3.11-stdlib",
        ],
        libs_fixed: false,
        what: "a Python runtime's security update (interpreter and standard library)",
    },
];

/// Cases of the quick run: a small one and the one with an unchanged library.
const QUICK: &[&str] = &["nginx-light", "mosquitto"];

pub struct Delta;

/// Versions the archive serves for `pkg`, oldest first (`apt-cache madison`; Debian's
/// ordering by `dpkg --compare-versions`).
fn versions(pkg: &str) -> Result<Vec<String>> {
    let text = run(Command::new("apt-cache").args(["madison", pkg]))?;
    let mut vs: Vec<String> = text
        .lines()
        .filter_map(|l| l.split('|').nth(1).map(|v| v.trim().to_string()))
        .collect();
    vs.dedup();
    vs.sort_by(|a, b| {
        let lt = Command::new("dpkg")
            .args(["--compare-versions", a, "lt", b])
            .status()
            .is_ok_and(|s| s.success());
        if a == b {
            std::cmp::Ordering::Equal
        } else if lt {
            std::cmp::Ordering::Less
        } else {
            std::cmp::Ordering::Greater
        }
    });
    vs.dedup();
    Ok(vs)
}

/// `PKG=VERSION` downloaded into `cache` (kept between runs); its path.
fn download(cache: &Path, pkg: &str, version: &str) -> Result<PathBuf> {
    let found = |c: &Path| {
        std::fs::read_dir(c).ok().and_then(|rd| {
            rd.flatten().map(|e| e.path()).find(|p| {
                let n = p
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .to_string();
                // apt's file names escape ':' of an epoch as %3a.
                let v = version.replace(':', "%3a");
                n.starts_with(&format!("{pkg}_{v}_")) && n.ends_with(".deb")
            })
        })
    };
    if let Some(p) = found(cache) {
        return Ok(p);
    }
    run(Command::new("apt-get")
        .args(["download", "-q", &format!("{pkg}={version}")])
        .current_dir(cache))?;
    found(cache).ok_or_else(|| format!("apt-get download {pkg}={version}: no .deb left").into())
}

/// A package tree from `debs`, with busybox for its entrypoint; packed to `out`.
fn pack(
    sb: &Sandbox,
    tree: &Path,
    debs: &[PathBuf],
    name: &str,
    version: &str,
    out: &Path,
) -> Result<()> {
    let _ = std::fs::remove_dir_all(tree);
    std::fs::create_dir_all(tree.join(".berth")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(tree.join("bin")).map_err(|e| e.to_string())?;
    for d in debs {
        run(Command::new("dpkg-deb").arg("-x").arg(d).arg(tree))?;
    }
    let busybox = berth_testkit::busybox().map_err(|e| e.to_string())?;
    std::fs::copy(busybox, tree.join("bin/busybox")).map_err(|e| e.to_string())?;
    std::fs::write(
        tree.join(".berth/manifest.toml"),
        format!(
            "[package]\nname = \"{name}\"\nversion = \"{version}\"\ndescription = \"berth-bench delta case\"\n[entrypoint]\nargv = [\"/bin/busybox\", \"sleep\", \"1000000\"]\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    run(Command::new(&sb.berth)
        .arg("pack")
        .arg(tree)
        .arg("-o")
        .arg(out))?;
    let _ = std::fs::remove_dir_all(tree);
    Ok(())
}

/// Wall seconds and maximum RSS (KiB) of `cmd` under GNU time.
fn timed(cmd: &[&str]) -> Result<(f64, u64)> {
    let report = std::env::temp_dir().join(format!("berth-bench-time-{}", std::process::id()));
    let t0 = Instant::now();
    let out = output(
        Command::new("/usr/bin/time")
            .args(["-f", "%M", "-o"])
            .arg(&report)
            .args(cmd),
    )?;
    let secs = t0.elapsed().as_secs_f64();
    let rss = std::fs::read_to_string(&report).unwrap_or_default();
    let _ = std::fs::remove_file(&report);
    // bsdiff's status is not always 0 on success; its output is checked by the caller.
    if !out.status.success() && !cmd[0].ends_with("bsdiff") {
        return Err(format!(
            "{} failed: {}",
            cmd.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    let kib = rss
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0);
    Ok((secs, kib))
}

fn size(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

fn same(a: &Path, b: &Path) -> bool {
    std::fs::read(a)
        .ok()
        .zip(std::fs::read(b).ok())
        .is_some_and(|(x, y)| x == y)
}

/// One tool's delta: (size, make s, apply s, apply max RSS KiB).
type Measured = (u64, f64, f64, u64);

fn other_tool(tool: &str, old: &Path, new: &Path, dir: &Path) -> Result<Measured> {
    let p = |x: &Path| x.to_string_lossy().into_owned();
    let delta = dir.join(format!("delta.{tool}"));
    let back = dir.join(format!("rebuilt.{tool}"));
    let (make, apply): (Vec<String>, Vec<String>) = match tool {
        "bsdiff" => (
            vec!["bsdiff".into(), p(old), p(new), p(&delta)],
            vec!["bspatch".into(), p(old), p(&back), p(&delta)],
        ),
        "xdelta3" => (
            vec![
                "xdelta3".into(),
                "-9".into(),
                "-f".into(),
                "-e".into(),
                "-s".into(),
                p(old),
                p(new),
                p(&delta),
            ],
            vec![
                "xdelta3".into(),
                "-f".into(),
                "-d".into(),
                "-s".into(),
                p(old),
                p(&delta),
                p(&back),
            ],
        ),
        _ => unreachable!(),
    };
    let make: Vec<&str> = make.iter().map(String::as_str).collect();
    let apply: Vec<&str> = apply.iter().map(String::as_str).collect();
    let (make_s, _) = timed(&make)?;
    let (apply_s, kib) = timed(&apply)?;
    if !same(&back, new) {
        return Err(format!("{tool}: the rebuilt image differs from the new one").into());
    }
    let out = (size(&delta), make_s, apply_s, kib);
    let _ = std::fs::remove_file(&delta);
    let _ = std::fs::remove_file(&back);
    Ok(out)
}

impl Suite for Delta {
    fn name(&self) -> &'static str {
        "delta"
    }

    fn prepare(&mut self, _sb: &Sandbox) -> Result<Vec<PkgSpec>> {
        Ok(Vec::new())
    }

    fn environment(&self) -> Vec<(String, String)> {
        let v = |cmd: &[&str]| {
            Command::new(cmd[0])
                .args(&cmd[1..])
                .output()
                .map(|o| {
                    let t = String::from_utf8_lossy(&o.stdout).to_string()
                        + &String::from_utf8_lossy(&o.stderr);
                    let line = t.lines().next().unwrap_or("");
                    // Banners: "*** Zstandard CLI (64-bit) v1.5.4, by …", "Xdelta version 3.0.11, Copyright …".
                    line.trim_matches(|c: char| c == '*' || c.is_whitespace())
                        .split(", ")
                        .next()
                        .unwrap_or("")
                        .to_string()
                })
                .unwrap_or_else(|e| format!("missing: {e}"))
        };
        vec![
            ("zstd".into(), v(&["zstd", "--version"])),
            ("xdelta3".into(), v(&["xdelta3", "-V"])),
            (
                "bsdiff".into(),
                v(&["dpkg-query", "-W", "-f", "${Version}", "bsdiff"]),
            ),
        ]
    }

    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput> {
        check_tools()?;
        let cache = PathBuf::from("/var/cache/berth-bench/debs");
        std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
        let mut sb = ctx
            .sb
            .nested("delta", "2s", crate::sandbox::UNCAPPED_POLICY)?;
        sb.start_daemon()?;
        let work = sb.dir.join("delta-work");
        std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;

        let mut t = Table::new(&[
            "upgrade",
            "image",
            "berth (zstd) delta",
            "× smaller",
            "bsdiff",
            "xdelta3",
            "make s zstd / bsdiff / xdelta3",
            "apply s zstd / bsdiff / xdelta3",
            "apply max RSS zstd / bsdiff / xdelta3",
            "device fetched",
        ]);
        let mut raw = Vec::new();
        let mut notes = Vec::new();
        for case in CASES {
            if ctx.quick && !QUICK.contains(&case.name) {
                continue;
            }
            progress!("delta: {}", case.name);
            let (old_debs, new_debs, label) = match debs_of(case, &cache)? {
                Ok(debs) => debs,
                Err(v) => {
                    notes.push(format!(
                        "{}: skipped, the archive serves one version today ({v})",
                        case.name
                    ));
                    continue;
                }
            };
            let (row, json) = measure_case(&mut sb, &work, case, &old_debs, &new_debs, label)?;
            t.row(row);
            raw.push(json);
            notes.push(format!("{}: {}", case.name, case.what));
        }
        notes.push("images are `berth pack`'s (squashfs, xz): a file that changed is compressed anew, so each changed file costs about its compressed size whatever the tool; files that did not change cost nearly nothing".into());
        notes.push("make: berth's `repo build --deltas-from` (zstd -19 --patch-from, one thread; it also hashes and signs); apply: as the device runs it; max RSS from GNU time".into());
        notes.push("device fetched: what a daemon holding the old version fetched to upgrade (its log), the delta checked and the rebuilt image checked against the signed index".into());
        notes.push(
            "balena reports deltas 10–70× smaller than its images (container layers, uncompressed)"
                .into(),
        );
        Ok(SuiteOutput {
            name: "delta",
            sections: vec![Section {
                title: "delta images: real Debian package upgrades, berth's zstd delta beside bsdiff and xdelta3".into(),
                table: t,
                notes,
            }],
            raw: Value::Array(raw),
        })
    }
}

/// The tools the suite runs, each with the Debian package that brings it.
fn check_tools() -> Result<()> {
    for (tool, pkg) in [
        ("zstd", "zstd"),
        ("bsdiff", "bsdiff"),
        ("xdelta3", "xdelta3"),
        ("time", "time"),
        ("apt-get", "apt"),
    ] {
        if berth_testkit::which(tool).is_none() {
            return Err(format!("{tool} is missing: install the Debian package {pkg}").into());
        }
    }
    Ok(())
}

/// One case: its two images packed and published (the new one with berth's delta), the
/// delta applied, bsdiff and xdelta3 on the same images, and the device's upgrade; its
/// table row and raw record.
fn measure_case(
    sb: &mut Sandbox,
    work: &Path,
    case: &Case,
    old_debs: &[PathBuf],
    new_debs: &[PathBuf],
    label: String,
) -> Result<(Vec<String>, Value)> {
    // Two repositories: the old one as published, the new one with deltas from it.
    let name = format!("dc-{}", case.name.replace('.', ""));
    let old_repo = work.join(format!("{name}-old"));
    let new_repo = work.join(format!("{name}-new"));
    for r in [&old_repo, &new_repo] {
        let _ = std::fs::remove_dir_all(r);
        std::fs::create_dir_all(r.join("packages")).map_err(|e| e.to_string())?;
    }
    let old_img = old_repo.join(format!("packages/{name}-1.sqfs"));
    let new_img = new_repo.join(format!("packages/{name}-2.sqfs"));
    pack(sb, &work.join("tree"), old_debs, &name, "1", &old_img)?;
    pack(sb, &work.join("tree"), new_debs, &name, "2", &new_img)?;
    let key = sb.key.to_string_lossy().into_owned();
    run(Command::new(&sb.berth)
        .args(["repo", "build"])
        .arg(&old_repo)
        .args(["--key", &key]))?;
    let t0 = Instant::now();
    let report = run(Command::new(&sb.berth)
        .args(["--json", "repo", "build"])
        .arg(&new_repo)
        .args(["--key", &key, "--deltas-from"])
        .arg(&old_repo))?;
    let zstd_make = t0.elapsed().as_secs_f64();
    let report: Value = serde_json::from_str(&report).map_err(|e| e.to_string())?;
    let image = size(&new_img);
    let delta = &report["packages"][0]["deltas"][0];
    let zstd_size = delta["size"].as_u64();
    // Applying it as the device does (zstd -d --patch-from).
    let (zstd_apply, zstd_kib) = apply_zstd(work, &old_img, &new_img, &new_repo, delta)?;
    let bs = other_tool("bsdiff", &old_img, &new_img, work)?;
    let xd = other_tool("xdelta3", &old_img, &new_img, work)?;

    // The device: holds 1 (installed from the old repository), upgrades to 2.
    let old_url = format!("file://{}", old_repo.display());
    let new_url = format!("file://{}", new_repo.display());
    let fetched = device_upgrade(sb, &name, &old_url, &new_url)?;
    let _ = sb.ok(&["remove", &name]);
    let _ = sb.ok(&["gc"]);

    let ratio = zstd_size.map(|z| image as f64 / z.max(1) as f64);
    let row = vec![
        label.clone(),
        bytes(image),
        zstd_size.map_or("not published (≥ 90 % of the image)".into(), bytes),
        ratio.map_or("–".into(), |r| format!("{r:.1}×")),
        bytes(bs.0),
        bytes(xd.0),
        format!("{:.2} / {:.2} / {:.2}", zstd_make, bs.1, xd.1),
        format!(
            "{} / {:.2} / {:.2}",
            zstd_apply.map_or("–".into(), |s| format!("{s:.2}")),
            bs.2,
            xd.2
        ),
        format!(
            "{} / {} / {} MiB",
            zstd_kib.map_or("–".into(), |k| format!("{:.1}", k as f64 / 1024.0)),
            format!("{:.1}", bs.3 as f64 / 1024.0),
            format!("{:.1}", xd.3 as f64 / 1024.0)
        ),
        fetched.map_or(format!("{} (whole image)", bytes(image)), bytes),
    ];
    let json = json!({
        "case": case.name, "what": case.what, "upgrade": label, "image_bytes": image,
        "zstd": {"bytes": zstd_size, "make_s": zstd_make, "apply_s": zstd_apply, "apply_max_rss_kib": zstd_kib},
        "bsdiff": {"bytes": bs.0, "make_s": bs.1, "apply_s": bs.2, "apply_max_rss_kib": bs.3},
        "xdelta3": {"bytes": xd.0, "make_s": xd.1, "apply_s": xd.2, "apply_max_rss_kib": xd.3},
        "device_fetched_bytes": fetched, "ratio": ratio,
        "delta_bytes_zstd_bsdiff_xdelta3": [zstd_size, bs.0, xd.0],
        "skipped_delta": report["skipped_deltas"],
    });
    for r in [&old_repo, &new_repo] {
        let _ = std::fs::remove_dir_all(r);
    }
    Ok((row, json))
}

/// Berth's zstd delta `delta` (its entry in `repo build`'s report) applied to the old image
/// as the device applies it, checked against the new image: seconds and max RSS (KiB); none
/// when no delta was published.
fn apply_zstd(
    work: &Path,
    old_img: &Path,
    new_img: &Path,
    new_repo: &Path,
    delta: &Value,
) -> Result<(Option<f64>, Option<u64>)> {
    Ok(match delta["file"].as_str() {
        Some(f) => {
            let back = work.join("rebuilt.zstd");
            let old_arg = format!("--patch-from={}", old_img.display());
            let d = new_repo.join(f).to_string_lossy().into_owned();
            let b = back.to_string_lossy().into_owned();
            let r = timed(&["zstd", "-d", "-q", "-f", &old_arg, &d, "-o", &b])?;
            if !same(&back, new_img) {
                return Err("zstd: the rebuilt image differs from the new one".into());
            }
            let _ = std::fs::remove_file(&back);
            (Some(r.0), Some(r.1))
        }
        None => (None, None),
    })
}

/// A case's old and new .debs, and its label.
type Debs = (Vec<PathBuf>, Vec<PathBuf>, String);

/// The case's old and new .debs (downloaded into `cache`) and its label; Err: the archive
/// serves one version of its first package today (that one).
fn debs_of(case: &Case, cache: &Path) -> Result<std::result::Result<Debs, String>> {
    let mut old_debs = Vec::new();
    let mut new_debs = Vec::new();
    let mut label = String::new();
    for (i, pkg) in case.debs.iter().enumerate() {
        let vs = versions(pkg)?;
        let (Some(first), Some(last)) = (vs.first(), vs.last()) else {
            return Err(format!("apt-cache madison {pkg}: no version").into());
        };
        if i == 0 {
            if first == last {
                return Ok(Err(format!("{pkg} {first}")));
            }
            label = format!("{pkg} {first} → {last}");
        }
        let old_v = if i > 0 && case.libs_fixed {
            last
        } else {
            first
        };
        old_debs.push(download(cache, pkg, old_v)?);
        new_debs.push(download(cache, pkg, last)?);
        if i > 0 && !case.libs_fixed && first != last {
            label.push_str(&format!(", {pkg} {first} → {last}"));
        }
    }
    Ok(Ok((old_debs, new_debs, label)))
}

/// Installs `name` 1 from `old_url`, switches the daemon's repository to `new_url` and
/// upgrades; the bytes the daemon fetched for 2 (None: the whole image).
fn device_upgrade(
    sb: &mut Sandbox,
    name: &str,
    old_url: &str,
    new_url: &str,
) -> Result<Option<u64>> {
    set_repository(sb, old_url)?;
    sb.restart_daemon_env(&[])?;
    sb.ok(&["update", "--reset-serial"])?;
    sb.ok(&["install", name])?;
    set_repository(sb, new_url)?;
    sb.restart_daemon_env(&[])?;
    sb.ok(&["update", "--reset-serial"])?;
    sb.ok(&["upgrade", name])?;
    let log = sb.daemon_log_text();
    let needle = format!("{name}@2: rebuilt from the delta from 1 (");
    Ok(log
        .rfind(&needle)
        .and_then(|i| log[i + needle.len()..].split(' ').next()?.parse().ok()))
}

fn set_repository(sb: &Sandbox, url: &str) -> Result<()> {
    let text = std::fs::read_to_string(&sb.config).map_err(|e| e.to_string())?;
    let rest: String = text
        .lines()
        .filter(|l| !l.starts_with("repository ="))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&sb.config, format!("repository = \"{url}\"\n{rest}"))
        .map_err(|e| e.to_string())?;
    Ok(())
}
