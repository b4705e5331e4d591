//! `berth tr181` end to end (docs/tr181.md): berth's ExecEnv, a DeploymentUnit per package
//! and an ExecutionUnit per container, with the data model's names and values; instance
//! numbers that stay and are never reused; Annex C's UUID, unchanged by an upgrade; safe mode
//! as a disabled ExecEnv whose units cannot start.

// An end-to-end scenario reads top to bottom: the 150-line limit of crates/ (clippy.toml)
// does not hold here.
#![allow(clippy::too_many_lines)]

mod common;

use common::*;
use serde_json::Value;

fn params(sb: &Sandbox) -> Value {
    sb.json(&["tr181"])
}

fn get<'a>(v: &'a Value, path: &str) -> &'a Value {
    let x = &v[path];
    assert!(!x.is_null(), "no {path} in {v:#}");
    x
}

/// The instance number of a package's DeploymentUnit (its DUID is its name).
fn du_of(v: &Value, name: &str) -> u32 {
    v.as_object()
        .unwrap()
        .iter()
        .find_map(|(k, x)| {
            let rest = k.strip_prefix("Device.SoftwareModules.DeploymentUnit.")?;
            let (n, field) = rest.split_once('.')?;
            (field == "DUID" && x == name).then(|| n.parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no DeploymentUnit for {name}"))
}

#[test]
fn software_modules_follow_the_packages_and_containers() {
    let mut sb = Sandbox::new("tr181");
    sb.add(
        &Pkg::script("web", "1.0", "exec sleep 1000\n")
            .table("[resources]\nmemory = \"32M\"\ncpu_max = \"50%\"\n[restart]\npolicy = \"on-failure\"\nmax_retries = 4\ndelay = \"2s\"\nmultiplier = 1.5\nmax_delay = \"30s\"\n"),
    );
    sb.add(&Pkg::script("crashy", "1.0", "sleep 0.2\nexit 3\n").table(
        "[restart]\npolicy = \"on-failure\"\nmax_retries = 1\ndelay = \"100ms\"\nmultiplier = 1\nmax_delay = \"100ms\"\n",
    ));
    sb.add(&Pkg::script("idle", "1.0", "exec sleep 1000\n"));
    sb.start_daemon();
    sb.ok(&["update"]);
    sb.ok(&["install", "web", "crashy", "idle"]);
    sb.ok(&["start", "web"]);
    sb.ok(&["start", "crashy"]);
    sb.wait_status("crashy", 20, "crashy failed", |c| c["state"] == "failed");

    let v = params(&sb);
    let root = "Device.SoftwareModules.";
    assert_eq!(get(&v, &format!("{root}ExecEnvNumberOfEntries")), 1);
    assert_eq!(get(&v, &format!("{root}DeploymentUnitNumberOfEntries")), 3);
    assert_eq!(get(&v, &format!("{root}ExecutionUnitNumberOfEntries")), 3);
    let ee = format!("{root}ExecEnv.1.");
    assert_eq!(get(&v, &format!("{ee}Enable")), true);
    assert_eq!(get(&v, &format!("{ee}Status")), "Up");
    assert_eq!(get(&v, &format!("{ee}Name")), "berth");
    assert_eq!(get(&v, &format!("{ee}CurrentRunLevel")), -1);

    let web = du_of(&v, "web");
    let du = format!("{root}DeploymentUnit.{web}.");
    let eu = format!("{root}ExecutionUnit.{web}.");
    assert_eq!(get(&v, &format!("{du}Name")), "web");
    assert_eq!(get(&v, &format!("{du}Status")), "Installed");
    assert_eq!(get(&v, &format!("{du}Version")), "1.0");
    assert_eq!(get(&v, &format!("{du}Description")), "test package web");
    assert_eq!(get(&v, &format!("{du}Resolved")), true);
    assert_eq!(
        get(&v, &format!("{du}ExecutionEnvRef")),
        "Device.SoftwareModules.ExecEnv.1"
    );
    assert_eq!(
        get(&v, &format!("{du}ExecutionUnitList")),
        format!("{root}ExecutionUnit.{web}").as_str()
    );
    let vendor = get(&v, &format!("{du}Vendor"))
        .as_str()
        .unwrap()
        .to_string();
    let uuid = get(&v, &format!("{du}UUID")).as_str().unwrap().to_string();
    assert_eq!(uuid, berth_core::tr181::du_uuid("web", &vendor));
    assert!(
        get(&v, &format!("{du}URL"))
            .as_str()
            .unwrap()
            .ends_with(".sqfs"),
        "{v:#}"
    );
    assert!(get(&v, &format!("{du}Installed"))
        .as_str()
        .unwrap()
        .ends_with('Z'));
    assert_eq!(
        get(&v, &format!("{du}LastUpdate")),
        berth_core::tr181::UNKNOWN_TIME
    );
    assert_eq!(get(&v, &format!("{eu}Status")), "Active");
    assert_eq!(get(&v, &format!("{eu}ExecutionFaultCode")), "NoFault");
    assert_eq!(get(&v, &format!("{eu}AllocatedMemory")), 32 * 1024);
    assert!(get(&v, &format!("{eu}MemoryInUse")).as_i64().unwrap() > 0);
    let cpus = std::thread::available_parallelism().unwrap().get() as f64;
    assert_eq!(
        get(&v, &format!("{eu}AllocatedCPUPercent"))
            .as_i64()
            .unwrap(),
        (50.0 / cpus).round() as i64
    );
    assert!((0..=100).contains(&get(&v, &format!("{eu}CPUPercentInUse")).as_i64().unwrap()));
    assert_eq!(get(&v, &format!("{eu}AutoRestart.Enable")), true);
    assert_eq!(
        get(&v, &format!("{eu}AutoRestart.RetryMinimumWaitInterval")),
        2
    );
    assert_eq!(
        get(&v, &format!("{eu}AutoRestart.RetryMaximumWaitInterval")),
        30
    );
    assert_eq!(
        get(&v, &format!("{eu}AutoRestart.RetryIntervalMultiplier")),
        1500
    );
    assert_eq!(get(&v, &format!("{eu}AutoRestart.MaximumRetryCount")), 4);
    assert_eq!(
        get(&v, &format!("{eu}AutoRestart.NextRestart")),
        berth_core::tr181::NO_RESTART
    );
    let active = get(&v, &format!("{ee}ActiveExecutionUnits"))
        .as_str()
        .unwrap()
        .to_string();
    assert!(active.contains(&format!("ExecutionUnit.{web}")), "{active}");

    let crashy = du_of(&v, "crashy");
    let ceu = format!("{root}ExecutionUnit.{crashy}.");
    assert_eq!(get(&v, &format!("{ceu}Status")), "Idle");
    assert_eq!(
        get(&v, &format!("{ceu}ExecutionFaultCode")),
        "FailureWhileActive"
    );
    assert!(!get(&v, &format!("{ceu}ExecutionFaultMessage"))
        .as_str()
        .unwrap()
        .is_empty());
    assert_eq!(get(&v, &format!("{ceu}AutoRestart.RetryCount")), 1);
    let idle = du_of(&v, "idle");
    assert_eq!(
        get(&v, &format!("{root}ExecutionUnit.{idle}.Status")),
        "Idle"
    );
    assert_eq!(
        get(
            &v,
            &format!("{root}ExecutionUnit.{idle}.ExecutionFaultCode")
        ),
        "NoFault"
    );
    // A crash archive of crashy, if one was kept, is a VendorLogFile its units refer to.
    let logs = get(&v, &format!("{ceu}VendorLogList"))
        .as_str()
        .unwrap()
        .to_string();
    for r in logs.split(',').filter(|s| !s.is_empty()) {
        assert!(!get(&v, &format!("{r}.Name")).as_str().unwrap().is_empty());
    }

    // The text form: one PATH => VALUE line each, in the data model's order.
    let text = sb.ok(&["tr181"]);
    assert!(
        text.starts_with("Device.SoftwareModules.ExecEnvNumberOfEntries => 1\n"),
        "{text}"
    );
    assert!(text.contains(&format!("{du}Name => web\n")), "{text}");

    // Numbers stay, and a removed package's is not reused; the UUID survives an upgrade.
    sb.ok(&["remove", "idle"]);
    std::fs::remove_file(sb.package_file("web", "1.0")).unwrap();
    sb.add(&Pkg::script("web", "2.0", "exec sleep 1000\n"));
    sb.add(&Pkg::script("newer", "1.0", "exec sleep 1000\n"));
    sb.ok(&["update"]);
    sb.ok(&["install", "newer"]);
    sb.ok(&["upgrade", "web"]);
    let v2 = params(&sb);
    assert_eq!(du_of(&v2, "web"), web);
    assert_eq!(du_of(&v2, "crashy"), crashy);
    let newer = du_of(&v2, "newer");
    assert!(
        newer > web.max(crashy).max(idle),
        "newer got {newer}, a number already used"
    );
    assert_eq!(get(&v2, &format!("{du}Version")), "2.0");
    assert_eq!(get(&v2, &format!("{du}UUID")).as_str().unwrap(), uuid);
    assert_ne!(
        get(&v2, &format!("{du}LastUpdate")),
        berth_core::tr181::UNKNOWN_TIME
    );
    // Across a daemon restart too.
    sb.kill_daemon(15);
    sb.start_daemon();
    assert_eq!(du_of(&params(&sb), "newer"), newer);

    // Safe mode: the ExecEnv is disabled and its units cannot start.
    sb.ok(&["safe-mode", "enter"]);
    let v3 = params(&sb);
    assert_eq!(get(&v3, &format!("{ee}Status")), "Disabled");
    assert_eq!(get(&v3, &format!("{ee}Enable")), false);
    assert_eq!(get(&v3, &format!("{eu}ExecutionFaultCode")), "UnStartable");
    assert_eq!(get(&v3, &format!("{eu}Status")), "Idle");
    sb.ok(&["safe-mode", "clear"]);
}
