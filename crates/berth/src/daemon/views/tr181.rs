//! `GET /v1/tr181`: the device's `Device.SoftwareModules.` as TR-181 (Issue 2 Amendment 19)
//! defines it, so that a USP or TR-069 agent exposes berth with a thin adapter (docs/tr181.md):
//! berth is the one ExecEnv, each installed package a DeploymentUnit, its container an
//! ExecutionUnit with the same instance number, and the crash archives
//! `Device.DeviceInfo.VendorLogFile.` rows the units' `VendorLogList` refers to. Read-only: the
//! operations map onto the admin API (docs/tr181.md).

use std::time::{Duration, Instant};

use berth_core::api::report as rfield;
use berth_core::state::{Installed, State};
use berth_core::tr181::{self, Instances, Params};
use berth_sys::cgroupfs::Stats;
use serde_json::{json, Value};
use std::collections::BTreeMap;

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::Result;
use crate::daemon::device::{cgroups, state};
use crate::daemon::ops::reports;
use crate::daemon::views::status;
use crate::daemon::views::status::ContainerStatus;

/// How long CPU use is sampled for `CPUPercentInUse`.
const CPU_SAMPLE: Duration = Duration::from_millis(250);

fn instances_file(d: &Daemon) -> std::path::PathBuf {
    d.cfg.paths.state.join("tr181.json")
}

/// The DeploymentUnits' vendor domain (TR-181 Annex C names a DU by NAME.VENDOR.): the
/// repository's host, or `localhost` without one.
fn vendor(d: &Daemon) -> String {
    d.cfg
        .repository
        .as_deref()
        .and_then(|u| u.split_once("://"))
        .map(|(_, rest)| rest.split(['/', ':']).next().unwrap_or("").to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

pub(crate) fn tr181(d: &Daemon) -> Result<Value> {
    let st = state::state(d);
    let vendor = vendor(d);
    let inst = instances(d, &st, &vendor);
    let safe_mode = d.safe_mode().is_some();
    let containers = status::containers(d, &st, None, true)?;
    let by_name = |n: &str| containers.iter().find(|c| c.name == n);
    let index = crate::daemon::store::repo::load_index(d)
        .ok()
        .map(|(i, _)| i);
    // Running: what the status answer found (its init pid), without asking each shim again.
    let running: Vec<String> = containers
        .iter()
        .filter(|c| c.running())
        .map(|c| c.name.clone())
        .collect();
    let cpu = CpuSample::take(d, &running);
    let usage = crate::daemon::device::disk::usage(d);
    let view = View {
        d,
        inst,
        vendor,
        safe_mode,
        cpus: d.resources.host.cpus.max(1) as f64,
        // After the sample, as each unit's uptime is read.
        now: berth_sys::process::now_s(),
    };

    let mut p = Params::default();
    let root = tr181::ROOT;
    p.set(root, "ExecEnvNumberOfEntries", 1);
    p.set(root, "DeploymentUnitNumberOfEntries", st.packages.len());
    p.set(root, "ExecutionUnitNumberOfEntries", st.packages.len());
    view.exec_env(&mut p, &running);
    let logs_of = view.vendor_logs(&mut p);
    for (name, pkg) in &st.packages {
        // Every package of `st` has its row: the status was taken of the same set.
        let Some(c) = by_name(name) else {
            continue;
        };
        let logs = logs_of
            .get(name.as_str())
            .cloned()
            .unwrap_or_default()
            .join(",");
        let url = match (&d.cfg.repository, &index) {
            (Some(repo), Some(ix)) => ix
                .packages
                .iter()
                .find(|e| e.name == pkg.name && e.version == pkg.version)
                .map(|e| format!("{repo}/{}", e.file))
                .unwrap_or_default(),
            _ => String::new(),
        };
        let resolved = pkg
            .depends
            .iter()
            .all(|dep| st.packages.contains_key(dep.as_str()));
        view.deployment_unit(&mut p, pkg, url, resolved, &logs);
        let (cpu_now, stats) = cpu.of(name).unwrap_or((-1, None));
        let unit = Unit {
            pkg,
            c,
            logs: &logs,
            cpu_now,
            stats,
            data_used: usage.data_of(name),
        };
        view.execution_unit(&mut p, &unit);
    }
    let mut out = serde_json::Map::new();
    let order: Vec<Value> = p.0.iter().map(|(k, _)| json!(k)).collect();
    for (k, v) in p.0 {
        out.insert(k, v);
    }
    Ok(json!({ "parameters": out, "order": order }))
}

/// Stable instance numbers (and UUIDs) of the installed packages, kept across daemon restarts.
fn instances(d: &Daemon, st: &State, vendor: &str) -> Instances {
    let file = instances_file(d);
    let mut inst: Instances = std::fs::read(&file)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let names: Vec<(&str, String)> = st
        .packages
        .keys()
        .map(|n| (n.as_str(), tr181::du_uuid(n, vendor)))
        .collect();
    if inst.assign(&names) {
        let text = serde_json::to_vec(&inst).unwrap_or_default();
        if let Err(e) = berth_sys::fsutil::write_atomic(&file, &text, 0o600) {
            log::warn!("tr181: {}: {e}", file.display());
        }
    }
    inst
}

/// CPU in use: two readings of each running container's counter, `CPU_SAMPLE` apart.
struct CpuSample {
    running: Vec<String>,
    first: Vec<Option<Stats>>,
    second: Vec<Option<Stats>>,
    elapsed_us: f64,
    cpus: f64,
}

impl CpuSample {
    fn take(d: &Daemon, running: &[String]) -> CpuSample {
        let cg = d.resources.cgroups.as_ref().ok();
        let read = |n: &str| cg.map(|c| cgroups::container_stats(c, d, n));
        let first: Vec<_> = running.iter().map(|n| read(n)).collect();
        let t0 = Instant::now();
        if !running.is_empty() {
            std::thread::sleep(CPU_SAMPLE);
        }
        let elapsed_us = t0.elapsed().as_micros().max(1) as f64;
        let second: Vec<_> = running.iter().map(|n| read(n)).collect();
        CpuSample {
            running: running.to_vec(),
            first,
            second,
            elapsed_us,
            cpus: d.resources.host.cpus.max(1) as f64,
        }
    }

    /// The container's share of all CPUs in percent, and its second reading.
    fn of(&self, n: &str) -> Option<(i64, Option<Stats>)> {
        let i = self.running.iter().position(|r| r == n)?;
        let a = self.first[i].as_ref()?.cpu_usage_usec?;
        let s = self.second[i].clone()?;
        let b = s.cpu_usage_usec?;
        let pct = (b.saturating_sub(a) as f64 * 100.0 / self.elapsed_us / self.cpus).round() as i64;
        Some((pct.clamp(0, 100), Some(s)))
    }
}

/// Bytes as the data model's KiB, -1 for unknown.
fn kib(b: Option<u64>) -> i64 {
    b.map(|x| (x / 1024) as i64).unwrap_or(-1)
}

/// What every part of the view shares.
struct View<'a> {
    d: &'a Daemon,
    inst: Instances,
    vendor: String,
    safe_mode: bool,
    cpus: f64,
    now: u64,
}

/// One container's row of the status answer, with what was measured of it.
struct Unit<'a> {
    pkg: &'a Installed,
    c: &'a ContainerStatus,
    logs: &'a str,
    cpu_now: i64,
    stats: Option<Stats>,
    data_used: Option<u64>,
}

impl View<'_> {
    fn number(&self, n: &str) -> u32 {
        self.inst.numbers.get(n).copied().unwrap_or(0)
    }

    fn eu_ref(&self, n: &str) -> String {
        format!("{}ExecutionUnit.{}", tr181::ROOT, self.number(n))
    }

    /// The ExecEnv: berth.
    fn exec_env(&self, p: &mut Params, running: &[String]) {
        let d = self.d;
        let ee = format!("{}.", tr181::EXEC_ENV);
        p.set(&ee, "Enable", !self.safe_mode);
        p.set(
            &ee,
            "Status",
            if self.safe_mode {
                "Disabled"
            } else if d.resources.cgroups.is_err() {
                "Error"
            } else {
                "Up"
            },
        );
        p.set(&ee, "Alias", "cpe-berth");
        p.set(&ee, "Name", "berth");
        p.set(&ee, "Type", "LXC");
        p.set(&ee, "InitialRunLevel", 0);
        // berth has no run levels: -1 as the data model says for none.
        p.set(&ee, "CurrentRunLevel", -1);
        p.set(&ee, "InitialExecutionUnitRunLevel", -1);
        p.set(&ee, "Vendor", "berth");
        p.set(&ee, "Version", env!("CARGO_PKG_VERSION"));
        p.set(&ee, "ParentExecEnv", "");
        let cg = d.resources.cgroups.as_ref().ok();
        let group = cg.map(|c| c.stats(&d.cfg.cgroup_parent));
        let budget = group.as_ref().and_then(|g| g.memory_max);
        p.set(&ee, "AllocatedDiskSpace", -1);
        p.set(&ee, "AllocatedMemory", kib(budget));
        p.set(
            &ee,
            "AllocatedCPUPercent",
            d.cfg.policy.cpu_max_percent as i64,
        );
        p.set(
            &ee,
            "AvailableDiskSpace",
            kib(free_bytes(&d.cfg.paths.state)),
        );
        let used = group.as_ref().and_then(|g| g.memory_current);
        p.set(
            &ee,
            "AvailableMemory",
            match (budget, used) {
                (Some(b), Some(u)) => (b.saturating_sub(u) / 1024) as i64,
                _ => -1,
            },
        );
        let active: Vec<String> = running.iter().map(|n| self.eu_ref(n)).collect();
        p.set(&ee, "ActiveExecutionUnits", active.join(","));
    }

    /// Crash archives: DeviceInfo.VendorLogFile rows, numbered in listing order; what each
    /// container's rows are.
    fn vendor_logs(&self, p: &mut Params) -> BTreeMap<String, Vec<String>> {
        let reports = reports::list(self.d, None).unwrap_or(Value::Null);
        let log_prefix = "Device.DeviceInfo.VendorLogFile.";
        let mut logs_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let list = reports[rfield::REPORTS].as_array().map(Vec::as_slice);
        for (i, r) in list.unwrap_or_default().iter().enumerate() {
            let row = format!("{log_prefix}{}.", i + 1);
            p.set(&row, "Alias", format!("cpe-report-{}", i + 1));
            // The report's id: what `berth report export ID` (and the admin API) takes.
            p.set(&row, "Name", r[rfield::ID].as_str().unwrap_or(""));
            p.set(&row, "MaximumSize", self.d.cfg.reports.max_total_size);
            p.set(&row, "Persistent", true);
            if let Some(c) = r[rfield::NAME].as_str() {
                logs_of
                    .entry(c.to_string())
                    .or_default()
                    .push(format!("{log_prefix}{}", i + 1));
            }
        }
        logs_of
    }

    fn deployment_unit(
        &self,
        p: &mut Params,
        pkg: &Installed,
        url: String,
        resolved: bool,
        logs: &str,
    ) {
        let name = pkg.name.as_str();
        let du = format!("{}DeploymentUnit.{}.", tr181::ROOT, self.number(name));
        let uuid = self.inst.uuids.get(name).cloned().unwrap_or_default();
        p.set(&du, "UUID", uuid);
        p.set(&du, "DUID", name);
        p.set(&du, "Alias", format!("cpe-{name}"));
        p.set(&du, "Name", name);
        p.set(&du, "Status", "Installed");
        p.set(&du, "Resolved", resolved);
        p.set(&du, "URL", url);
        p.set(
            &du,
            "Description",
            pkg.manifest.package.description.as_str(),
        );
        p.set(&du, "Vendor", self.vendor.as_str());
        p.set(&du, "Version", pkg.version.to_string());
        p.set(&du, "VendorLogList", logs);
        p.set(&du, "VendorConfigList", "");
        p.set(&du, "ExecutionUnitList", self.eu_ref(name));
        p.set(&du, "ExecutionEnvRef", tr181::EXEC_ENV);
        p.set(&du, "Installed", tr181::datetime(first_install(pkg)));
        p.set(
            &du,
            "LastUpdate",
            tr181::datetime(if pkg.previous.is_some() {
                pkg.installed_at
            } else {
                0
            }),
        );
    }

    fn execution_unit(&self, p: &mut Params, u: &Unit) {
        let (d, pkg, c) = (self.d, u.pkg, u.c);
        let name = pkg.name.as_str();
        let m = &pkg.manifest;
        let eu = format!("{}ExecutionUnit.{}.", tr181::ROOT, self.number(name));
        let state = c.state;
        let ran = !c.last_exit.is_null() || c.restarts > 0;
        let reason = c.reason.as_deref();
        let fault = tr181::fault_code(state, ran, reason, self.safe_mode);
        p.set(&eu, "EUID", name);
        p.set(&eu, "Alias", format!("cpe-{name}"));
        p.set(&eu, "Name", name);
        p.set(&eu, "ExecEnvLabel", name);
        p.set(&eu, "Status", tr181::eu_status(state));
        p.set(&eu, "ExecutionFaultCode", fault);
        let message: String = match fault {
            "NoFault" => String::new(),
            "UnStartable" => d.safe_mode().unwrap_or_default(),
            _ => reason.unwrap_or("").to_string(),
        };
        p.set(
            &eu,
            "ExecutionFaultMessage",
            message.chars().take(256).collect::<String>(),
        );
        p.set(&eu, "AutoStart", c.autostart);
        p.set(&eu, "RunLevel", 0);
        p.set(&eu, "Vendor", self.vendor.as_str());
        p.set(&eu, "Version", pkg.version.to_string());
        p.set(&eu, "Description", m.package.description.as_str());
        p.set(&eu, "Privileged", pkg.trusted);
        p.set(&eu, "AllocatedDiskSpace", kib(d.cfg.data_size));
        p.set(&eu, "DiskSpaceInUse", kib(u.data_used));
        // Vendor extensions (TR-106's `X_<vendor>_`): its data cap and what it moved over the
        // WAN in the cap's period, KiB (−1 without a cap).
        #[cfg(feature = "shape")]
        {
            let data = crate::daemon::prepare::datacap::usage_of(d, name);
            p.set(&eu, "X_BERTH_DataCap", kib(data["cap"].as_u64()));
            p.set(&eu, "X_BERTH_DataUsed", kib(data["used"].as_u64()));
        }
        let stats = u.stats.as_ref();
        let mem_limit = m
            .resources
            .memory
            .or_else(|| stats.and_then(|s| s.memory_max));
        p.set(&eu, "AllocatedMemory", kib(mem_limit));
        p.set(
            &eu,
            "MemoryInUse",
            kib(stats.and_then(|s| s.memory_current)),
        );
        p.set(
            &eu,
            "AllocatedCPUPercent",
            m.resources
                .cpu_max_percent
                .map(|c| ((c as f64 / self.cpus).round() as i64).clamp(1, 100))
                .unwrap_or(-1),
        );
        p.set(&eu, "CPUPercentInUse", u.cpu_now);
        p.set(&eu, "CreationTime", tr181::datetime(first_install(pkg)));
        p.set(
            &eu,
            "Uptime",
            c.uptime_s
                .filter(|_| tr181::eu_status(state) == "Active")
                .unwrap_or(0),
        );
        p.set(&eu, "References", "");
        p.set(&eu, "AssociatedProcessList", "");
        p.set(&eu, "VendorLogList", u.logs);
        p.set(&eu, "VendorConfigList", "");
        p.set(&eu, "ExecutionEnvRef", tr181::EXEC_ENV);
        self.auto_restart(p, &eu, u);
    }

    fn auto_restart(&self, p: &mut Params, eu: &str, u: &Unit) {
        let (c, r) = (u.c, &u.pkg.manifest.restart);
        let ar = format!("{eu}AutoRestart.");
        p.set(
            &ar,
            "Enable",
            r.policy != berth_core::manifest::RestartPolicy::Never,
        );
        p.set(&ar, "RetryMinimumWaitInterval", r.delay_ms / 1000);
        p.set(&ar, "RetryMaximumWaitInterval", r.max_delay_ms / 1000);
        p.set(&ar, "RetryIntervalMultiplier", r.multiplier_milli);
        p.set(&ar, "MaximumRetryCount", r.max_retries);
        p.set(&ar, "ResetPeriod", r.reset_period_ms / 1000);
        p.set(&ar, "RetryCount", c.retries);
        p.set(
            &ar,
            "NextRestart",
            match c.restart_in_ms {
                Some(ms) => tr181::datetime(self.now + ms.div_ceil(1000)),
                None => tr181::NO_RESTART.into(),
            },
        );
    }
}

/// When the package was first installed (before any upgrade).
fn first_install(pkg: &Installed) -> u64 {
    pkg.previous
        .as_ref()
        .map(|p| p.installed_at)
        .unwrap_or(pkg.installed_at)
}

/// Bytes free to unprivileged use on the file system holding `p`.
fn free_bytes(p: &std::path::Path) -> Option<u64> {
    berth_sys::fsutil::free_bytes(p).ok()
}

#[cfg(test)]
mod tests {
    use berth_core::supervise::Record;

    use super::*;
    use crate::daemon::base::context::{Resources, Supervised};
    use crate::daemon::base::testing::{fake_daemon, install, MANIFEST};
    use crate::daemon::runtime::probe::tests::{
        cgroup_fixture, info, lxc_config, supervised, FakeShim,
    };

    const DB: &str = "[package]\nname = \"db\"\nversion = \"2.1\"\ndescription = \"a database\"\n[entrypoint]\nargv = [\"/bin/db\"]\n";

    /// `Device.SoftwareModules.<key>` of the view.
    fn at<'a>(v: &'a Value, key: &str) -> &'a Value {
        let p = &v["parameters"][format!("{}{key}", tr181::ROOT)];
        assert!(!p.is_null(), "no {key}");
        p
    }

    /// The numbers of the DeploymentUnit rows, by the package they name.
    fn numbers(v: &Value) -> Vec<(String, u32)> {
        let mut out: Vec<(String, u32)> = v["parameters"]
            .as_object()
            .unwrap()
            .iter()
            .filter_map(|(k, val)| {
                let n = k.strip_prefix("Device.SoftwareModules.DeploymentUnit.")?;
                let n = n.strip_suffix(".Name")?;
                Some((val.as_str()?.to_string(), n.parse().ok()?))
            })
            .collect();
        out.sort();
        out
    }

    fn uninstall(d: &Daemon, name: &str) {
        d.state.lock().unwrap().packages.remove(name);
    }

    /// The same daemon started again: nothing in memory, everything on disk as it was.
    fn restarted(d: &Daemon) -> Daemon {
        let res = Resources {
            cgroups: Err("fixture".into()),
            host: d.resources.host,
        };
        let st = state::state(d).clone();
        let mut again = Daemon::new(d.cfg.clone(), d.roots.clone(), res, st);
        again.host = d.host;
        again
    }

    fn set_supervised(d: &Daemon, name: &str, s: Supervised) {
        d.supervision.lock().unwrap().insert(name.into(), s);
    }

    /// A package keeps its instance number across calls, other packages' installs and
    /// removals and daemon restarts; a removed package's number is never given again.
    #[test]
    fn instance_numbers_are_stable_and_never_reused() {
        let (_dir, d, _m) = fake_daemon("tr181-numbers", "");
        install(&d, MANIFEST);
        assert_eq!(numbers(&tr181(&d).unwrap()), [("web".into(), 1)]);
        install(&d, DB);
        let v = tr181(&d).unwrap();
        assert_eq!(numbers(&v), [("db".into(), 2), ("web".into(), 1)]);
        assert_eq!(at(&v, "DeploymentUnitNumberOfEntries"), 2);
        assert_eq!(at(&v, "ExecutionUnit.2.Name"), "db");
        assert_eq!(
            at(&v, "DeploymentUnit.2.ExecutionUnitList"),
            "Device.SoftwareModules.ExecutionUnit.2"
        );
        let uuid = at(&v, "DeploymentUnit.1.UUID").clone();
        assert_eq!(uuid, tr181::du_uuid("web", "localhost"));

        uninstall(&d, "web");
        assert_eq!(numbers(&tr181(&d).unwrap()), [("db".into(), 2)]);
        install(&d, MANIFEST);
        assert_eq!(
            numbers(&tr181(&d).unwrap()),
            [("db".into(), 2), ("web".into(), 3)]
        );

        let d2 = restarted(&d);
        let v = tr181(&d2).unwrap();
        assert_eq!(numbers(&v), [("db".into(), 2), ("web".into(), 3)]);
        assert_eq!(at(&v, "DeploymentUnit.3.UUID"), &uuid);
        install(
            &d2,
            "[package]\nname = \"cam\"\nversion = \"1\"\n[entrypoint]\nargv = [\"/c\"]\n",
        );
        assert_eq!(numbers(&tr181(&d2).unwrap())[0], ("cam".into(), 4));
    }

    /// A stopped package: its DeploymentUnit as installed (vendor from the repository's host,
    /// the URL its index entry gives, unresolved while a dependency is missing) and an idle
    /// ExecutionUnit without fault; the order lists every parameter once.
    #[test]
    fn a_stopped_package_has_its_deployment_and_execution_unit_rows() {
        let (_dir, mut d, _m) = fake_daemon("tr181-rows", "");
        // A top-level key: set here, the fixture's extra configuration comes after [paths].
        d.cfg.repository = Some("https://repo.example.com:8443/berth".into());
        install(&d, DB);
        let dep = berth_core::name::Name::parse("web").unwrap();
        d.state
            .lock()
            .unwrap()
            .packages
            .get_mut("db")
            .unwrap()
            .depends = vec![dep];
        std::fs::create_dir_all(d.cfg.paths.autostart("db").parent().unwrap()).unwrap();
        std::fs::write(d.cfg.paths.autostart("db"), "").unwrap();
        let v = tr181(&d).unwrap();
        for (key, want) in [
            ("DeploymentUnit.1.Name", json!("db")),
            ("DeploymentUnit.1.Status", json!("Installed")),
            ("DeploymentUnit.1.Version", json!("2.1")),
            ("DeploymentUnit.1.Description", json!("a database")),
            ("DeploymentUnit.1.Vendor", json!("repo.example.com")),
            ("DeploymentUnit.1.Resolved", json!(false)),
            ("DeploymentUnit.1.URL", json!("")),
            ("DeploymentUnit.1.Installed", json!("2026-09-21T14:13:20Z")),
            ("DeploymentUnit.1.LastUpdate", json!(tr181::UNKNOWN_TIME)),
            (
                "DeploymentUnit.1.UUID",
                json!(tr181::du_uuid("db", "repo.example.com")),
            ),
            ("ExecutionUnit.1.Status", json!("Idle")),
            ("ExecutionUnit.1.ExecutionFaultCode", json!("NoFault")),
            ("ExecutionUnit.1.ExecutionFaultMessage", json!("")),
            ("ExecutionUnit.1.AutoStart", json!(true)),
            ("ExecutionUnit.1.Uptime", json!(0)),
            ("ExecutionUnit.1.CPUPercentInUse", json!(-1)),
            ("ExecutionUnit.1.MemoryInUse", json!(-1)),
            (
                "ExecutionUnit.1.AutoRestart.NextRestart",
                json!(tr181::NO_RESTART),
            ),
            ("ExecEnv.1.Enable", json!(true)),
            ("ExecEnv.1.Status", json!("Error")),
            ("ExecEnv.1.ActiveExecutionUnits", json!("")),
        ] {
            assert_eq!(at(&v, key), &want, "{key}");
        }
        let order: Vec<&str> = v["order"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect();
        let mut unique = order.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), order.len(), "a parameter twice");
        assert_eq!(order.len(), v["parameters"].as_object().unwrap().len());
        assert_eq!(order[0], "Device.SoftwareModules.ExecEnvNumberOfEntries");
    }

    /// The fault code follows the supervisor's state and reason: a start that failed, a run
    /// that failed once it ran, a missing dependency; the message is the reason.
    #[test]
    fn fault_codes_follow_the_supervisors_word() {
        let (_dir, d, _m) = fake_daemon("tr181-faults", "");
        install(&d, MANIFEST);
        let fault = |d: &Daemon| {
            let v = tr181(d).unwrap();
            let code = at(&v, "ExecutionUnit.1.ExecutionFaultCode").clone();
            let msg = at(&v, "ExecutionUnit.1.ExecutionFaultMessage").clone();
            (code, msg, at(&v, "ExecutionUnit.1.Status").clone())
        };
        set_supervised(
            &d,
            "web",
            supervised("failed", Some("the start failed"), Record::default()),
        );
        assert_eq!(
            fault(&d),
            (
                json!("FailureOnStart"),
                json!("the start failed"),
                json!("Idle")
            )
        );
        let record = Record {
            retries: 4,
            restarts: 6,
            ..Record::default()
        };
        set_supervised(
            &d,
            "web",
            supervised("failed", Some("exit 1: given up"), record),
        );
        assert_eq!(fault(&d).0, "FailureWhileActive");
        assert_eq!(
            at(
                &tr181(&d).unwrap(),
                "ExecutionUnit.1.AutoRestart.RetryCount"
            ),
            4
        );
        let reason = "its dependency db is not running";
        set_supervised(
            &d,
            "web",
            supervised("backoff", Some(reason), Record::default()),
        );
        assert_eq!(
            fault(&d),
            (
                json!("DependencyFailure"),
                json!(reason),
                json!("Restarting")
            )
        );
        let mut held = supervised("backoff", None, Record::default());
        held.next_start = Some(Instant::now() + Duration::from_secs(30));
        set_supervised(&d, "web", held);
        let now = berth_sys::process::now_s();
        let v = tr181(&d).unwrap();
        let next = at(&v, "ExecutionUnit.1.AutoRestart.NextRestart");
        let within = [tr181::datetime(now + 30), tr181::datetime(now + 31)];
        assert!(within.iter().any(|w| next == w), "{next}");
    }

    /// Safe mode: the ExecEnv disabled, every unit unstartable, saying why.
    #[test]
    fn safe_mode_disables_the_exec_env_and_makes_units_unstartable() {
        let (_dir, d, _m) = fake_daemon("tr181-safe", "");
        install(&d, MANIFEST);
        *d.boot.safe_mode.lock().unwrap() = Some("5 daemon starts not confirmed".into());
        let v = tr181(&d).unwrap();
        assert_eq!(at(&v, "ExecEnv.1.Enable"), false);
        assert_eq!(at(&v, "ExecEnv.1.Status"), "Disabled");
        assert_eq!(at(&v, "ExecutionUnit.1.ExecutionFaultCode"), "UnStartable");
        assert_eq!(
            at(&v, "ExecutionUnit.1.ExecutionFaultMessage"),
            "5 daemon starts not confirmed"
        );
    }

    /// A running container: active since its shim's start time, in the ExecEnv's active
    /// units, its memory and CPU as its cgroup counts them (the counters did not move
    /// during the sample: 0 %); the ExecEnv's memory is berth's group's.
    #[test]
    fn a_running_unit_is_active_with_its_cgroups_counters() {
        let (_dir, mut d, _m) = fake_daemon("tr181-running", "");
        install(&d, MANIFEST);
        cgroup_fixture(&mut d, "web");
        lxc_config(&d, "web");
        let mut answer = info(4242);
        let started = berth_sys::process::now_s() - 100;
        answer["started_at"] = json!(started);
        // Its uptime by the boot-relative clocks: the init started 100 s after a boot 1000 s ago.
        let proc = d.proc().to_path_buf();
        std::fs::create_dir_all(proc.join("4242")).unwrap();
        std::fs::write(proc.join("uptime"), "1000.25 1900.00\n").unwrap();
        let ticks = 900 * u64::from(berth_sys::net::clock_ticks());
        std::fs::write(
            proc.join("4242/stat"),
            format!("4242 (init.lxc) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {ticks} 0 0\n"),
        )
        .unwrap();
        let _shim = FakeShim::start(&d, "web", answer, b"");
        let v = tr181(&d).unwrap();
        assert_eq!(at(&v, "ExecutionUnit.1.Status"), "Active");
        let up = at(&v, "ExecutionUnit.1.Uptime").as_u64().unwrap();
        assert!((100..=102).contains(&up), "{up}");
        assert_eq!(
            at(&v, "ExecEnv.1.ActiveExecutionUnits"),
            "Device.SoftwareModules.ExecutionUnit.1"
        );
        assert_eq!(at(&v, "ExecutionUnit.1.MemoryInUse"), 2048);
        assert_eq!(at(&v, "ExecutionUnit.1.AllocatedMemory"), 8192);
        assert_eq!(at(&v, "ExecutionUnit.1.CPUPercentInUse"), 0);
        assert_eq!(at(&v, "ExecEnv.1.Status"), "Up");
        assert_eq!(at(&v, "ExecEnv.1.AllocatedMemory"), 65536);
        assert_eq!(at(&v, "ExecEnv.1.AvailableMemory"), 65536 - 16384);
    }

    /// Crash archives are VendorLogFile rows in listing order, each unit listing its own.
    #[test]
    fn crash_archives_are_the_units_vendor_logs() {
        let (_dir, d, _m) = fake_daemon("tr181-logs", "");
        install(&d, MANIFEST);
        install(&d, DB);
        for (dir, id) in [
            ("web", "20260101T000000Z-web-exit"),
            ("db", "20260102T000000Z-db-oom"),
            ("web", "20260103T000000Z-web-signal"),
        ] {
            let p = d.cfg.paths.reports().join(dir);
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join(format!("{id}.tar.gz")), "x").unwrap();
        }
        let v = tr181(&d).unwrap();
        let log = |n: u32, f: &str| {
            v["parameters"][format!("Device.DeviceInfo.VendorLogFile.{n}.{f}")].clone()
        };
        assert_eq!(log(2, "Name"), "20260102T000000Z-db-oom");
        assert_eq!(log(3, "Alias"), "cpe-report-3");
        assert_eq!(log(4, "Name"), Value::Null);
        let web = numbers(&v).into_iter().find(|(n, _)| n == "web").unwrap().1;
        let want = "Device.DeviceInfo.VendorLogFile.1,Device.DeviceInfo.VendorLogFile.3";
        assert_eq!(at(&v, &format!("DeploymentUnit.{web}.VendorLogList")), want);
        assert_eq!(at(&v, &format!("ExecutionUnit.{web}.VendorLogList")), want);
    }
}
