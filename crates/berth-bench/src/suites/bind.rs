//! bind: what hot-binding a package into a running container costs (docs/hot-binding.md),
//! in its own sandbox and daemon. Two packages of incompressible data, 1 MiB and 50 MiB,
//! are bound into a running container and unbound again, N times each, first by the mount
//! API, then by mount propagation (the daemon restarted with BERTH_FORCE_MOUNT_FALLBACK=1;
//! the container keeps running). Each time is the daemon's own (`bind_ms`, `unbind_ms`)
//! beside the CLI's round trip; the first bind of each package (its image not mounted yet)
//! is shown apart. The seed's design said "up to a few seconds for large packages".

use std::time::Instant;

use berth_testkit::Pkg;
use serde_json::{json, Value};

use super::{Ctx, Suite};
use crate::report::{ms, Section, SuiteOutput, Table};
use crate::sandbox::{PkgSpec, Sandbox};
use crate::stats::summarize;
use crate::util::{progress, Result};

const APP: &str = "bind-app";
/// (package, MiB of data).
const SIZES: [(&str, usize); 2] = [("bind-1m", 1), ("bind-50m", 50)];

pub struct Bind;

/// `mib` MiB that no compressor shrinks (xorshift), so the image is as large as the data.
fn noise(mib: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ mib as u64;
    (0..mib << 17)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect()
}

fn packages() -> Vec<Pkg> {
    let mut app = Pkg::new(APP, "1", &["/bin/busybox", "sleep", "1000000"]);
    app.applets = &[];
    let mut out = vec![app];
    for (name, mib) in SIZES {
        let mut p = Pkg::new(name, "1", &["/bin/busybox", "true"]).file("share/noise", &noise(mib));
        p.applets = &[];
        out.push(p);
    }
    for p in &mut out {
        p.description = "berth-bench payload".into();
    }
    out
}

/// One method's samples per package: (first bind, binds, unbinds, CLI round trips of binds).
type Samples = Vec<(f64, Vec<f64>, Vec<f64>, Vec<f64>)>;

fn measure(sb: &Sandbox, method: &str, runs: usize) -> Result<Samples> {
    let mut out = Vec::new();
    for (name, _) in SIZES {
        let (mut first, mut binds, mut unbinds, mut cli) = (f64::NAN, vec![], vec![], vec![]);
        // The mount API goes first: its first bind is the one that mounts the image.
        let from = usize::from(method != "mount-api");
        for i in from..=runs {
            progress!("bind: {method} {name} {i}/{runs}");
            let t0 = Instant::now();
            let v = sb.json(&["bind", name, "--into", APP])?;
            let wall = t0.elapsed().as_secs_f64() * 1e3;
            if v["method"] != method {
                return Err(
                    format!("bind {name}: method {} instead of {method}", v["method"]).into(),
                );
            }
            let bind_ms = v["bind_ms"].as_f64().unwrap_or(f64::NAN);
            let u = sb.json(&["unbind", name, "--from", APP])?;
            // The first bind of a package also mounts its image (a loop device and squashfs).
            if i == 0 {
                first = bind_ms;
                continue;
            }
            binds.push(bind_ms);
            cli.push(wall);
            unbinds.push(u["unbind_ms"].as_f64().unwrap_or(f64::NAN));
        }
        out.push((first, binds, unbinds, cli));
    }
    Ok(out)
}

impl Suite for Bind {
    fn name(&self) -> &'static str {
        "bind"
    }

    fn prepare(&mut self, _sb: &Sandbox) -> Result<Vec<PkgSpec>> {
        Ok(Vec::new())
    }

    fn run(&mut self, ctx: &mut Ctx) -> Result<SuiteOutput> {
        let runs = ctx.runs_given.unwrap_or(if ctx.quick { 5 } else { 30 });
        let mut sb = ctx
            .sb
            .nested("bind", "2s", crate::sandbox::UNCAPPED_POLICY)?;
        for p in packages() {
            sb.pack_pkg(&p)?;
        }
        sb.build_repo()?;
        sb.start_daemon()?;
        sb.ok(&["update"])?;
        let mut names = vec![APP];
        names.extend(SIZES.iter().map(|(n, _)| *n));
        sb.ok(&[&["install"][..], &names].concat())?;
        sb.ok(&["start", APP])?;
        let init = sb.json(&["status", APP])?["containers"][0]["init_pid"].clone();
        let api = measure(&sb, "mount-api", runs)?;
        // The fallback is forced by a test hook: only a berth built with them can.
        let prop = if let Some(hooks) = crate::util::hooks_berth(&sb.berth) {
            // The container keeps running across the daemon's restart.
            sb.berth = hooks;
            sb.restart_daemon_env(&[("BERTH_FORCE_MOUNT_FALLBACK", "1")])?;
            let prop = measure(&sb, "propagation", runs)?;
            let after = sb.json(&["status", APP])?["containers"][0]["init_pid"].clone();
            if after != init {
                return Err(format!("{APP} was restarted (init {init} → {after})").into());
            }
            Some(prop)
        } else {
            progress!("bind: propagation not measured: {}", NO_HOOKS);
            None
        };
        let _ = sb.ok(&["stop", "-t", "1", APP]);
        Ok(output(runs, &api, prop.as_ref()))
    }
}

/// Why the propagation method is not measured with a berth built without the test hooks.
const NO_HOOKS: &str = "neither this berth nor a berth-test-hooks beside it has the test hooks, and forcing the fallback is one (build one with `cargo build --release -p berth --features test-hooks` and copy it beside berth as berth-test-hooks, as scripts/test.sh does)";

fn output(runs: usize, api: &Samples, prop: Option<&Samples>) -> SuiteOutput {
    let med = |xs: &[f64]| summarize(xs).map_or("–".into(), |s| ms(s.median));
    let p90 = |xs: &[f64]| summarize(xs).map_or("–".into(), |s| ms(s.p90));
    let mut t = Table::new(&[
        "package",
        "method",
        "n",
        "bind median ms",
        "bind p90 ms",
        "unbind median ms",
        "CLI bind median ms",
        "first bind ms",
    ]);
    let mut raw = Vec::new();
    let empty = Vec::new();
    for (method, samples) in [("mount-api", api), ("propagation", prop.unwrap_or(&empty))] {
        for ((name, mib), (first, binds, unbinds, cli)) in SIZES.iter().zip(samples) {
            t.row(vec![
                format!("{mib} MiB ({name})"),
                method.into(),
                binds.len().to_string(),
                med(binds),
                p90(binds),
                med(unbinds),
                med(cli),
                ms(*first),
            ]);
            raw.push(json!({
                "package": name, "mib": mib, "method": method, "first_bind_ms": first,
                "bind_ms": binds, "unbind_ms": unbinds, "cli_bind_ms": cli,
            }));
        }
    }
    SuiteOutput {
        name: "bind",
        sections: vec![Section {
            title: "hot-binding: a package into a running container, and out again".into(),
            table: t,
            notes: vec![
                format!("{runs} binds and unbinds per package and method into one running container (its init never changes); the daemon's own times (`bind_ms`, `unbind_ms`: under the op lock, from the request to the answer) beside the CLI's round trip (process start, socket, JSON)"),
                "first bind: the image was not mounted yet (loop device and squashfs mount), by the mount API; later binds find it mounted".into(),
                match prop {
                    Some(_) => "propagation: the daemon restarted with BERTH_FORCE_MOUNT_FALLBACK=1 (a test hook), as on a kernel without open_tree (Linux < 5.2); the same container".into(),
                    None => format!("propagation: not measured: {NO_HOOKS}"),
                },
                "the seed's design: \"up to a few seconds for large packages\"; a bind copies nothing, so the package's size does not show".into(),
            ],
        }],
        raw: Value::Array(raw),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noise_is_the_size_asked_and_does_not_compress() {
        let n = noise(1);
        assert_eq!(n.len(), 1 << 20);
        assert_ne!(n[..8], n[8..16]);
        assert_ne!(noise(1)[..64], noise(2)[..64]);
    }
}
