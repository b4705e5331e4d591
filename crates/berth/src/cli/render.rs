//! What people see: pure builders from the daemon's JSON answers to text (tables, sizes,
//! durations), and the escaper that makes a container's output safe for a terminal. Nothing
//! here prints; every builder returns whole lines, each ending in a newline.

use std::fmt::Write as _;
use std::io::Write as _;

use berth_core::api::{
    bind, container, daemon, exit, gc, governor, guard_kill, health, hosts, install, limit, limits,
    list, net, package, repository, reset, start, stats, status, stop, update, upgradable, upgrade,
};
use berth_core::governor::fmt1;
use serde_json::Value;

use super::args::Lists;

/// One cell: `-` for nothing (null or an empty string), strings as they are, anything else
/// as JSON.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(x) if x.is_empty() => "-".into(),
        Value::String(x) => x.clone(),
        other => other.to_string(),
    }
}

/// A size for people, with one decimal (integer arithmetic: no float formatting code).
pub fn human(n: u64) -> String {
    const U: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut i = 0;
    let mut div = 1u64;
    while n / div >= 1024 && i < 3 {
        div *= 1024;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        let tenths = (n as u128 * 10 + div as u128 / 2) / div as u128;
        format!("{}.{} {}", tenths / 10, tenths % 10, U[i])
    }
}

/// A size in bytes from JSON, `-` when there is none (unlimited, unknown).
pub fn size(v: &Value) -> String {
    v.as_u64().map(human).unwrap_or_else(|| "-".into())
}

/// A duration in its two largest units.
pub fn dur(s: u64) -> String {
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{}s", s / 60, s % 60),
        3600..=86399 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86400, s % 86400 / 3600),
    }
}

/// Columns padded to their widest cell, indented by two; `(none)` when there is no row.
/// Every row has one cell per header.
pub fn table(head: &[&str], rows: Vec<Vec<String>>) -> String {
    if rows.is_empty() {
        return "  (none)\n".into();
    }
    debug_assert!(rows.iter().all(|r| r.len() == head.len()), "{head:?}");
    let mut w: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[String]| {
        let mut l = String::from("  ");
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<width$}  ", width = w[i]);
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&head.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    for r in &rows {
        line(r);
    }
    out
}

/// The items of a JSON array (none if it is not one), mapped to rows.
fn rows(v: &Value, row: impl Fn(&Value) -> Vec<String>) -> Vec<Vec<String>> {
    v.as_array().into_iter().flatten().map(row).collect()
}

/// `berth update`: the index taken, then what can be upgraded.
pub fn update(v: &Value) -> String {
    let mut out = format!(
        "repository {}: {} packages, serial {}, signature verified{}\n",
        v[update::REPOSITORY].as_str().unwrap_or("?"),
        v[update::PACKAGES],
        v[update::SERIAL],
        match v[update::EXPIRES].as_u64() {
            Some(e) => format!(", valid until {}", berth_core::date::utc(e)),
            None => String::new(),
        }
    );
    for u in v[update::UPGRADABLE].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  upgradable: {} {} -> {}",
            u[upgradable::NAME].as_str().unwrap_or(""),
            u[upgradable::INSTALLED].as_str().unwrap_or(""),
            u[upgradable::AVAILABLE].as_str().unwrap_or("")
        );
    }
    out
}

pub const INSTALLED_HEAD: &[&str] = &["NAME", "VERSION", "SIZE", "DESCRIPTION"];
pub const AVAILABLE_HEAD: &[&str] = &["NAME", "VERSION", "SIZE", "INSTALLED", "DESCRIPTION"];
pub const UPGRADABLE_HEAD: &[&str] = &["NAME", "INSTALLED", "AVAILABLE"];

pub fn installed_rows(v: &Value) -> Vec<Vec<String>> {
    rows(&v[list::INSTALLED], |p| {
        vec![
            cell(&p[package::NAME]),
            cell(&p[package::VERSION]),
            size(&p[package::SIZE]),
            cell(&p[package::DESCRIPTION]),
        ]
    })
}

pub fn available_rows(v: &Value) -> Vec<Vec<String>> {
    rows(&v[list::AVAILABLE], |p| {
        vec![
            cell(&p[package::NAME]),
            cell(&p[package::VERSION]),
            size(&p[package::SIZE]),
            cell(&p[package::INSTALLED]),
            cell(&p[package::DESCRIPTION]),
        ]
    })
}

pub fn upgradable_rows(v: &Value) -> Vec<Vec<String>> {
    rows(&v[list::UPGRADABLE], |p| {
        vec![
            cell(&p[upgradable::NAME]),
            cell(&p[upgradable::INSTALLED]),
            cell(&p[upgradable::AVAILABLE]),
        ]
    })
}

/// `berth list`: the sections asked for, in this order.
pub fn list(v: &Value, which: &Lists) -> String {
    let mut out = String::new();
    if which.installed {
        out.push_str("installed:\n");
        out.push_str(&table(INSTALLED_HEAD, installed_rows(v)));
    }
    if which.available {
        out.push_str("available:\n");
        if let Some(n) = v[list::INDEX_NOTE].as_str() {
            let _ = writeln!(out, "  ({n})");
        }
        out.push_str(&table(AVAILABLE_HEAD, available_rows(v)));
    }
    if which.upgradable {
        out.push_str("upgradable:\n");
        out.push_str(&table(UPGRADABLE_HEAD, upgradable_rows(v)));
    }
    out
}

/// An install event for a terminal: it overwrites the line it is on (`\r`, erase).
pub fn progress(e: &Value) -> Option<String> {
    match e[install::EVENT].as_str() {
        Some("progress") => {
            let done = e[install::DONE].as_u64().unwrap_or(0);
            let total = e[install::TOTAL].as_u64().unwrap_or(0).max(1);
            Some(format!(
                "\r\x1b[Kfetching {} {} / {} ({}%)",
                cell(&e[install::PACKAGE]),
                human(done),
                human(total),
                done * 100 / total
            ))
        }
        Some("fetched") => Some(format!(
            "\r\x1b[Kfetched {} {}{}\n",
            cell(&e[install::PACKAGE]),
            cell(&e[install::VERSION]),
            match e[install::DELTA_FROM].as_str() {
                Some(from) => format!(
                    " as a delta from {from} ({} instead of {})",
                    human(e[install::BYTES].as_u64().unwrap_or(0)),
                    human(e[install::SIZE].as_u64().unwrap_or(0)),
                ),
                None => String::new(),
            }
        )),
        _ => None,
    }
}

/// `berth install`'s result.
/// `berth upgrade`'s result: what moved, what went back and why.
pub fn upgraded(v: &Value) -> String {
    let mut out = String::new();
    for p in v[upgrade::UPGRADED].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "upgraded {} {} -> {}",
            cell(&p[upgrade::NAME]),
            cell(&p[upgrade::FROM]),
            cell(&p[upgrade::TO])
        );
    }
    for p in v[upgrade::ROLLED_BACK].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "rolled back {} to {}: {}",
            cell(&p[upgrade::NAME]),
            cell(&p[upgrade::FROM]),
            cell(&p[upgrade::REASON])
        );
    }
    for p in v[upgrade::HELD].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "held {}: it holds an update lock (berth upgrade --force {} goes past it)",
            cell(&p[upgrade::NAME]),
            cell(&p[upgrade::NAME])
        );
    }
    if out.is_empty() {
        out.push_str("nothing to upgrade\n");
    }
    out
}

/// `berth rollback`'s result.
pub fn rolled_back(v: &Value) -> String {
    format!(
        "rolled back {} from {} to {}\n",
        cell(&v[upgrade::NAME]),
        cell(&v[upgrade::FROM]),
        cell(&v[upgrade::TO])
    )
}

pub fn installed(v: &Value) -> String {
    let mut out = String::new();
    for p in v[install::INSTALLED].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "installed {} {}",
            cell(&p[install::NAME]),
            cell(&p[install::VERSION])
        );
    }
    for p in v[install::UNCHANGED].as_array().into_iter().flatten() {
        let _ = writeln!(out, "{} is already installed", p.as_str().unwrap_or(""));
    }
    out
}

/// `berth remove`'s result.
pub fn removed(names: &[String], purge: bool) -> String {
    let what = if purge { " and its data" } else { "" };
    names
        .iter()
        .map(|n| format!("removed {n}{what}\n"))
        .collect()
}

/// `berth gc`'s result.
pub fn gc(v: &Value) -> String {
    format!(
        "removed {} unused image(s), freed {}\n",
        v[gc::REMOVED].as_array().map(Vec::len).unwrap_or(0),
        human(v[gc::FREED_BYTES].as_u64().unwrap_or(0))
    )
}

/// `berth reset`'s result.
pub fn reset(name: &str, v: &Value) -> String {
    format!("reset {name}: now {}\n", cell(&v[reset::STATE]))
}

/// `berth start` or `berth restart`'s result.
pub fn started(name: &str, restart: bool, v: &Value) -> String {
    let verb = if restart { "restart" } else { "start" };
    let mut s = format!("{verb}ed {name} (init pid {})\n", v[start::INIT_PID]);
    // `--trace`: each step, when it began after the request was read and how long it ran.
    let steps: Vec<(&str, u64)> = v[start::TRACE]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| Some((x[0].as_str()?, x[1].as_u64()?)))
                .collect()
        })
        .unwrap_or_default();
    if let Some(&(_, first)) = steps.first() {
        // Milliseconds with three decimals, in integers: float formatting would cost the
        // device build 15 KB.
        let ms = |ns: u64| format!("{:>4}.{:03}", ns / 1_000_000, ns / 1_000 % 1_000);
        for (i, (step, at)) in steps.iter().enumerate() {
            let took = match steps.get(i + 1) {
                Some((_, next)) => format!("{} ms", ms(next.saturating_sub(*at))),
                None => String::new(),
            };
            s.push_str(&format!(
                "  {step:<16} +{} ms {took}\n",
                ms(at.saturating_sub(first))
            ));
        }
    }
    s
}

/// `berth stop`'s result.
pub fn stopped(name: &str, v: &Value) -> String {
    let how = if v[stop::GRACEFUL] == true {
        ""
    } else {
        " (killed after the timeout)"
    };
    format!("stopped {name}{how}\n")
}

/// One binding: `tools@1.0 at /opt/tools (mount-api, persistent)`.
fn binding(b: &Value) -> String {
    let mut how = vec![b[bind::METHOD].as_str().unwrap_or("at the next start")];
    if b[bind::PERSIST] == true {
        how.push("persistent");
    }
    if b[bind::ORIGIN] == "manifest" {
        how.push("manifest");
    }
    format!(
        "{}@{} at {} ({})",
        cell(&b[bind::PACKAGE]),
        cell(&b[bind::VERSION]),
        cell(&b[bind::AT]),
        how.join(", ")
    )
}

/// `berth bind`'s result.
pub fn bound(v: &Value) -> String {
    format!(
        "bound {} into {} in {} ms\n",
        binding(v),
        cell(&v[bind::CONTAINER]),
        fmt1(v[bind::BIND_MS].as_f64().unwrap_or(0.0))
    )
}

/// `berth unbind`'s result.
pub fn unbound(v: &Value) -> String {
    let (p, c) = (cell(&v[bind::PACKAGE]), cell(&v[bind::CONTAINER]));
    let mut out = match v[bind::AT].as_str() {
        Some(at) => format!("unbound {p} from {c} (was at {at})\n"),
        None => String::new(),
    };
    if v[bind::PERSIST] == true {
        let _ = writeln!(out, "{p} is no longer bound into {c} at its starts");
    }
    out
}

pub const STATUS_HEAD: &[&str] = &[
    "NAME",
    "VERSION",
    "STATE",
    "RESTARTS",
    "PID",
    "UPTIME",
    "NETWORK",
    "LAST EXIT",
];

/// The supervisor's state, with what the health checks or the backoff add to it.
fn state_cell(c: &Value) -> String {
    let state = cell(&c[container::STATE]);
    match (
        state.as_str(),
        c[container::HEALTH][health::STATUS].as_str(),
    ) {
        ("running", Some("healthy")) => "running, healthy".into(),
        ("running", Some("starting")) => "running, checking".into(),
        ("backoff", _) => match c[container::RESTART_IN_MS].as_u64() {
            Some(ms) => format!("backoff {}.{}s", ms / 1000, ms % 1000 / 100),
            None => state,
        },
        _ => state,
    }
}

/// How a container last ended, with the memory guard's kill if it was one.
fn last_exit(c: &Value) -> String {
    let e = &c[container::LAST_EXIT];
    let last = if e.is_null() {
        "-".to_string()
    } else if let Some(sig) = e[exit::SIGNAL].as_i64() {
        if e[exit::CORE_DUMPED] == true {
            format!("signal {sig} (core dumped)")
        } else {
            format!("signal {sig}")
        }
    } else {
        format!("exit {}", e[exit::CODE])
    };
    let g = &c[container::GUARD_KILL];
    if g.is_null() {
        return last;
    }
    format!(
        "{last} (guard killed pid {} at {} MiB free)",
        g[guard_kill::PID],
        g[guard_kill::AVAILABLE].as_u64().unwrap_or(0) >> 20
    )
}

/// The containers of `berth status`; `now` (seconds since the epoch) gives their uptime.
pub fn status_rows(v: &Value, now: u64) -> Vec<Vec<String>> {
    rows(&v[status::CONTAINERS], |c| {
        // (the daemon's uptime, which no wall clock set since moves; else from the date)
        let up = c[container::UPTIME_S]
            .as_u64()
            .or_else(|| {
                c[container::STARTED_AT]
                    .as_u64()
                    .map(|t| now.saturating_sub(t))
            })
            .map(dur)
            .unwrap_or_else(|| "-".into());
        vec![
            cell(&c[container::NAME]),
            cell(&c[container::VERSION]),
            state_cell(c),
            cell(&c[container::RESTARTS]),
            cell(&c[container::INIT_PID]),
            up,
            cell(&c[container::NETWORK]),
            last_exit(c),
        ]
    })
}

/// `berth status`: the daemon, the repository's warning if any, the containers.
pub fn status(v: &Value, now: u64) -> String {
    let d = &v[status::DAEMON];
    let mut out = format!(
        "berth daemon {} (pid {}), up {}\n",
        cell(&d[daemon::VERSION]),
        d[daemon::PID],
        dur(d[daemon::UPTIME_S].as_u64().unwrap_or(0))
    );
    if d[daemon::SAFE_MODE] == true {
        let _ = writeln!(
            out,
            "safe mode: {}\n  no image is mounted and no container starts; berth safe-mode clear returns to normal",
            d[daemon::SAFE_MODE_REASON].as_str().unwrap_or("reason not known")
        );
    }
    for w in [
        &d[daemon::SPACE_WARNING],
        &v[status::REPOSITORY][repository::WARNING],
    ] {
        if let Some(w) = w.as_str() {
            let _ = writeln!(out, "warning: {w}");
        }
    }
    out.push_str(&table(STATUS_HEAD, status_rows(v, now)));
    // Why a container is not simply running or stopped.
    for c in v[status::CONTAINERS].as_array().into_iter().flatten() {
        let state = c[container::STATE].as_str().unwrap_or("");
        if let (true, Some(r)) = (
            matches!(state, "failed" | "backoff" | "unhealthy"),
            c[container::REASON].as_str(),
        ) {
            let _ = writeln!(out, "{}: {state}: {r}", cell(&c[container::NAME]));
        }
        if state == "failed" {
            let n = cell(&c[container::NAME]);
            let _ = writeln!(
                out,
                "  (berth start {n} to try again, berth reset {n} to clear)"
            );
        }
        for b in c[container::BINDINGS].as_array().into_iter().flatten() {
            let _ = writeln!(out, "{}: bound {}", cell(&c[container::NAME]), binding(b));
        }
    }
    out
}

/// `berth safe-mode enter` and `clear`.
pub fn safe_mode(v: &Value) -> String {
    use berth_core::api::safe_mode as f;
    let names: Vec<String> = v[f::CONTAINERS]
        .as_array()
        .map(|a| a.iter().map(cell).collect())
        .unwrap_or_default();
    let list = |what: &str| {
        if names.is_empty() {
            String::new()
        } else {
            format!("; {what}: {}", names.join(", "))
        }
    };
    if v[f::SAFE_MODE] == true {
        format!(
            "safe mode: {}{}\n",
            cell(&v[f::SAFE_MODE_REASON]),
            list("stopped")
        )
    } else {
        format!("safe mode cleared{}\n", list("starting"))
    }
}

/// `berth limit`'s answer: the limits in force (null is unlimited).
pub fn limit(name: &str, v: &Value) -> String {
    let l = &v[limit::LIMITS];
    let applied = if v[limit::APPLIED] == true {
        " (applied to the running container)"
    } else {
        ""
    };
    #[cfg(feature = "shape")]
    {
        let rate = |k| {
            l[k].as_u64()
                .map_or("-".to_string(), berth_core::shape::fmt_rate)
        };
        format!(
            "{name}: cpu {} (% of one CPU), memory {}, pids {}, egress {}, ingress {} (- is unlimited){applied}\n",
            cell(&l[limits::CPU_MAX_PERCENT]),
            size(&l[limits::MEMORY_MAX]),
            cell(&l[limits::PIDS_MAX]),
            rate(limits::EGRESS),
            rate(limits::INGRESS),
        )
    }
    #[cfg(not(feature = "shape"))]
    format!(
        "{name}: cpu {} (% of one CPU), memory {}, pids {} (- is unlimited){applied}\n",
        cell(&l[limits::CPU_MAX_PERCENT]),
        size(&l[limits::MEMORY_MAX]),
        cell(&l[limits::PIDS_MAX]),
    )
}

/// The columns of `berth stats`: one per cell of [`stats_rows`].
pub const STATS_HEAD: &[&str] = &[
    "NAME",
    "CPU",
    "CPU MAX",
    "MEMORY / MAX",
    "PEAK",
    "PIDS / MAX",
    "THROTTLED",
    "OOM KILLS",
];

/// The rows of `berth stats`: the group first, then each container.
pub fn stats_rows(v: &Value) -> Vec<Vec<String>> {
    let pct = |x: &Value| match x.as_f64() {
        Some(p) => {
            let tenths = (p * 10.0).round() as i64;
            format!("{}.{}%", tenths / 10, tenths % 10)
        }
        None => "-".into(),
    };
    let row = |name: String, c: &Value| {
        vec![
            name,
            pct(&c[stats::CPU_PERCENT]),
            pct(&c[stats::CPU_MAX_PERCENT]),
            format!(
                "{} / {}",
                size(&c[stats::MEMORY_CURRENT]),
                size(&c[stats::MEMORY_MAX])
            ),
            size(&c[stats::MEMORY_PEAK]),
            format!(
                "{} / {}",
                cell(&c[stats::PIDS_CURRENT]),
                cell(&c[stats::PIDS_MAX])
            ),
            cell(&c[stats::NR_THROTTLED]),
            cell(&c[stats::OOM_KILLS]),
        ]
    };
    let group = &v[stats::GROUP];
    let mut out = vec![row(format!("[{}]", cell(&group[stats::CGROUP])), group)];
    out.extend(rows(&v[stats::CONTAINERS], |c| {
        row(cell(&c[stats::NAME]), c)
    }));
    out
}

/// `berth stats`.
pub fn stats(v: &Value) -> String {
    let mut out = format!(
        "cgroup {}, {} CPUs; CPU % is of one CPU, sampled over {} ms\n",
        cell(&v[stats::CGROUP_VERSION]),
        v[stats::CPUS],
        v[stats::SAMPLE_MS]
    );
    out.push_str(&table(STATS_HEAD, stats_rows(v)));
    out.push_str(&own_writes(&v[stats::WRITES]));
    #[cfg(feature = "shape")]
    data_lines(&v[stats::CONTAINERS], &mut out);
    #[cfg(feature = "slab")]
    if v[stats::SLAB].is_object() {
        out.push_str(&slab(&v[stats::SLAB]));
    }
    out
}

/// `berth stats`' line on the daemon's own writes (nothing from an older daemon).
fn own_writes(w: &Value) -> String {
    use berth_core::api::writes as f;
    if !w.is_object() {
        return String::new();
    }
    let bytes = match (w[f::BYTES].as_u64(), w[f::BYTES_PER_HOUR].as_u64()) {
        (Some(b), Some(h)) => format!("{} ({}/hour)", human(b), human(h)),
        _ => "unknown (no task I/O accounting in this kernel)".into(),
    };
    format!(
        "\nthe daemon's own writes in {}: {bytes}, {} fsyncs\n",
        dur(w[f::SECONDS].as_u64().unwrap_or(0)),
        w[f::FSYNCS]
    )
}

#[cfg(feature = "slab")]
pub const SLAB_HEAD: &[&str] = &[
    "SLAB CACHE",
    "OBJECT",
    "IN USE / TOTAL",
    "FREE",
    "RESERVE",
    "HELD",
    "PAGES",
    "HOLDS",
];

/// `berth stats`' slab reserve: one row per configured cache.
#[cfg(feature = "slab")]
pub fn slab(s: &Value) -> String {
    use berth_core::api::slab as f;
    let mut out = match s[f::ERROR].as_str() {
        Some(e) => format!("\nslab reserve: {e}\n"),
        None => "\nslab reserve (berth_slab):\n".to_string(),
    };
    let rows = rows(&s[f::CACHES], |c| {
        vec![
            cell(&c[f::NAME]),
            size(&c[f::OBJECT_SIZE]),
            format!("{} / {}", cell(&c[f::ACTIVE_OBJS]), cell(&c[f::TOTAL_OBJS])),
            cell(&c[f::FREE_OBJS]),
            cell(&c[f::RESERVE]),
            cell(&c[f::HELD]),
            cell(&c[f::PAGES]),
            if c[f::HOLDS] == true { "yes" } else { "NO" }.to_string(),
        ]
    });
    out.push_str(&table(SLAB_HEAD, rows));
    out
}

// Integer arithmetic (fmt1): float formatting costs the device build ~20 KiB.
fn rate(x: &Value) -> String {
    x.as_f64().map_or("-".into(), |r| format!("{}/s", fmt1(r)))
}

fn percent(x: &Value) -> String {
    x.as_f64().map_or("-".into(), |p| format!("{}%", fmt1(p)))
}

pub const GOVERNOR_HEAD: &[&str] = &["TIME (UTC)", "CAP", "R_C", "R_N", "MODE", "NOTE"];

/// The governor's history, one row per decision.
pub fn governor_rows(v: &Value) -> Vec<Vec<String>> {
    rows(&v[governor::HISTORY], |h| {
        let t = h[governor::AT].as_u64().unwrap_or(0) % 86_400;
        vec![
            format!("{:02}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60),
            percent(&h[governor::CAP]),
            rate(&h[governor::R_C]),
            rate(&h[governor::R_N]),
            cell(&h[governor::MODE]),
            h[governor::NOTE].as_str().unwrap_or("").to_string(),
        ]
    })
}

/// `berth governor`: its mode, probe, cap and rates, then its history.
pub fn governor(v: &Value) -> String {
    let mut out = format!(
        "governor: {}{}\n",
        cell(&v[governor::MODE]),
        v[governor::NOTE]
            .as_str()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default()
    );
    if let Some(probe) = v[governor::PROBE].as_str() {
        let _ = writeln!(
            out,
            "probe: {probe}, every {} ms, timeout {} ms; {} probes, last {}",
            v[governor::INTERVAL_MS],
            v[governor::TIMEOUT_MS],
            v[governor::PROBES],
            v[governor::LAST_LATENCY_MS]
                .as_f64()
                .map_or("failed".into(), |l| format!("{} ms", fmt1(l)))
        );
    }
    let _ = writeln!(
        out,
        "cap: {} of all {} CPUs (T_l {}%, T_u {}%), target {}",
        percent(&v[governor::CAP]),
        v[governor::CPUS],
        v[governor::T_LOWER],
        v[governor::T_UPPER],
        percent(&v[governor::TARGET])
    );
    let _ = writeln!(
        out,
        "R_n {} ({}), R_c {}, consecutive failures {}",
        rate(&v[governor::R_N]),
        cell(&v[governor::R_N_SOURCE]),
        rate(&v[governor::R_C]),
        v[governor::FAILURES]
    );
    if let Some(e) = v[governor::LAST_ERROR].as_str() {
        let _ = writeln!(out, "last error: {e}");
    }
    out.push_str(&table(GOVERNOR_HEAD, governor_rows(v)));
    out
}

pub const NET_HEAD: &[&str] = &[
    "NAME", "MODE", "IPV4", "MAC", "PUBLISH", "SPOOFED", "DENIED",
];

/// The containers of `berth net`.
pub fn net_rows(v: &Value) -> Vec<Vec<String>> {
    rows(&v[net::CONTAINERS], |c| {
        let ports: Vec<String> = c[net::PUBLISH]
            .as_array()
            .into_iter()
            .flatten()
            .map(cell)
            .collect();
        vec![
            cell(&c[net::NAME]),
            cell(&c[net::MODE]),
            cell(&c[net::IPV4]),
            cell(&c[net::MAC]),
            if ports.is_empty() {
                "-".into()
            } else {
                ports.join(",")
            },
            cell(&c[net::DROPPED_SPOOFED]),
            cell(&c[net::DROPPED_DENIED]),
        ]
    })
}

/// `berth net`: the bridge, then the containers (its errors are warnings, for stderr).
pub fn net(v: &Value) -> String {
    let mut out = format!(
        "bridge {} gateway {} subnet {} (nft table {})\n",
        cell(&v[net::BRIDGE]),
        cell(&v[net::GATEWAY]),
        cell(&v[net::SUBNET]),
        cell(&v[net::TABLE])
    );
    #[cfg(feature = "shape")]
    if let Some(l) = v["line"].as_object() {
        let rate = |k: &str| {
            l[k].as_u64()
                .map_or("-".into(), berth_core::shape::fmt_rate)
        };
        out.push_str(&format!(
            "line {} {}: shaped at {}, containers {}, host {} or more: {}\n",
            cell(&l["uplink"]),
            rate("rate"),
            rate("shaped"),
            rate("containers"),
            rate("host"),
            cell(&l["state"])
        ));
    }
    out.push_str(&table(NET_HEAD, net_rows(v)));
    #[cfg(feature = "shape")]
    data_lines(&v[net::CONTAINERS], &mut out);
    out
}

/// Under `berth net` and `berth stats`: each capped container's data used in its period.
#[cfg(feature = "shape")]
fn data_lines(containers: &Value, out: &mut String) {
    for c in containers.as_array().into_iter().flatten() {
        let d = &c[net::DATA];
        if let (Some(used), Some(cap)) = (d["used"].as_u64(), d["cap"].as_u64()) {
            let over = if d["over"] == true {
                ": at its cap"
            } else {
                ""
            };
            out.push_str(&format!(
                "data {}: {} of {} ({}%) since {}, resets {}{over}\n",
                cell(&c[net::NAME]),
                human(used),
                cell(&d["period"]),
                used.saturating_mul(100) / cap.max(1),
                cell(&d["since"]),
                cell(&d["resets"]),
            ));
        }
    }
}

pub const HOSTS_HEAD: &[&str] = &["IP", "MAC", "DEVICE", "STATE", "SEEN", "HOSTNAME", "SOURCE"];

pub fn hosts_rows(v: &Value) -> Vec<Vec<String>> {
    rows(&v[hosts::HOSTS], |h| {
        let seen = h[hosts::AGE_S].as_u64().map(|a| format!("{} ago", dur(a)));
        vec![
            cell(&h[hosts::IP]),
            cell(&h[hosts::MAC]),
            cell(&h[hosts::DEV]),
            cell(&h[hosts::STATE]),
            seen.unwrap_or_else(|| "-".into()),
            cell(&h[hosts::HOSTNAME]),
            cell(&h[hosts::HOSTNAME_SOURCE]),
        ]
    })
}

/// `berth check`: the features by group; `color` marks their status for a terminal.
pub fn check(features: &[berth_sys::check::Feature], missing: usize, color: bool) -> String {
    let mut out = String::new();
    let mut group = "";
    for f in features {
        if f.group != group {
            group = f.group;
            let _ = writeln!(out, "--- {group} ---");
        }
        let st = f.status.as_str();
        let shown = match (color, st) {
            (true, "present") => format!("\x1b[32m{st}\x1b[0m"),
            (true, "missing") if f.required => format!("\x1b[31m{st}\x1b[0m"),
            (true, "missing") => format!("\x1b[33m{st}\x1b[0m"),
            _ => st.to_string(),
        };
        let _ = writeln!(
            out,
            "{:<28} {}{}{}",
            f.name,
            shown,
            if f.required { " (required)" } else { "" },
            if f.detail.is_empty() {
                String::new()
            } else {
                format!("  {}", f.detail)
            }
        );
    }
    if missing > 0 {
        let _ = writeln!(
            out,
            "\nberth cannot run here: {missing} required feature(s) missing"
        );
    }
    out
}

/// `berth check`: the fallbacks in use for interfaces this kernel lacks (none: nothing).
pub fn fallbacks(lines: &[String]) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nfallbacks in use (older kernel, docs/kernels.md):\n");
    for l in lines {
        let _ = writeln!(out, "  {l}");
    }
    out
}

/// Makes a container's output safe for a terminal, as a stream: `\n` and `\t` and printable
/// UTF-8 pass; other C0 controls, DEL and invalid bytes become `\xNN`, C1 controls `\u{NN}`.
/// A UTF-8 sequence cut by a chunk boundary waits for the next chunk.
#[derive(Default)]
pub struct Escaper {
    pending: Vec<u8>,
}

impl Escaper {
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        let mut data = std::mem::take(&mut self.pending);
        data.extend_from_slice(input);
        let mut i = 0;
        while i < data.len() {
            let b = data[i];
            if b == b'\n' || b == b'\t' || (0x20..0x7f).contains(&b) {
                out.push(b);
                i += 1;
                continue;
            }
            if b < 0x80 {
                let _ = write!(out, "\\x{b:02x}");
                i += 1;
                continue;
            }
            let len = match b {
                0xc2..=0xdf => 2,
                0xe0..=0xef => 3,
                0xf0..=0xf4 => 4,
                _ => 0,
            };
            if len == 0 {
                let _ = write!(out, "\\x{b:02x}");
                i += 1;
                continue;
            }
            if i + len > data.len() {
                // Perhaps completed by the next chunk (if what is there so far fits).
                if std::str::from_utf8(&data[i..]).is_err_and(|e| e.error_len().is_none()) {
                    self.pending = data[i..].to_vec();
                    return;
                }
                let _ = write!(out, "\\x{b:02x}");
                i += 1;
                continue;
            }
            match std::str::from_utf8(&data[i..i + len]) {
                Ok(ch) => {
                    let c = ch.chars().next().unwrap_or('\0');
                    if ('\u{80}'..='\u{9f}').contains(&c) {
                        let _ = write!(out, "\\u{{{:02x}}}", c as u32);
                    } else {
                        out.extend_from_slice(ch.as_bytes());
                    }
                    i += len;
                }
                Err(_) => {
                    let _ = write!(out, "\\x{b:02x}");
                    i += 1;
                }
            }
        }
    }

    /// At the end of the stream: a sequence still waiting is shown as bytes.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        for b in std::mem::take(&mut self.pending) {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
}

/// `berth tr181`: one `PATH => VALUE` line per parameter, in the data model's order (strings
/// as they are, an empty one as nothing after the arrow).
pub fn tr181(v: &Value) -> String {
    let mut out = String::new();
    for k in v["order"].as_array().into_iter().flatten() {
        let Some(k) = k.as_str() else { continue };
        let val = &v["parameters"][k];
        let shown = match val {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let _ = writeln!(out, "{k} => {shown}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each row has one cell per header.
    fn fits(head: &[&str], rows: &[Vec<String>]) {
        for r in rows {
            assert_eq!(r.len(), head.len(), "{head:?} over {r:?}");
        }
    }

    /// The cell of `row` under the header `name`.
    fn at<'a>(head: &[&str], row: &'a [String], name: &str) -> &'a str {
        &row[head.iter().position(|h| *h == name).unwrap()]
    }

    fn escaped(chunks: &[&[u8]]) -> String {
        let mut e = Escaper::default();
        let mut out = Vec::new();
        for c in chunks {
            e.feed(c, &mut out);
        }
        e.finish(&mut out);
        String::from_utf8(out).expect("the escaped text is UTF-8")
    }

    #[test]
    fn terminal_controls_are_escaped_and_text_kept() {
        assert_eq!(
            escaped(&[b"plain text\n\tindented\n"]),
            "plain text\n\tindented\n"
        );
        assert_eq!(
            escaped(&[b"\x1b]0;pwned\x07title"]),
            "\\x1b]0;pwned\\x07title"
        );
        assert_eq!(escaped(&[b"\x1b[2J\r\x7f\x00"]), "\\x1b[2J\\x0d\\x7f\\x00");
        assert_eq!(escaped(&["grüße 日本 🦀".as_bytes()]), "grüße 日本 🦀");
        // C1 controls (8-bit CSI) and invalid bytes
        assert_eq!(escaped(&["a\u{9b}2Jb".as_bytes()]), "a\\u{9b}2Jb");
        assert_eq!(escaped(&[b"\xff\xfe ok \xc3("]), "\\xff\\xfe ok \\xc3(");
        // a multi-byte character split across chunks is kept whole
        let crab = "🦀".as_bytes();
        for cut in 1..crab.len() {
            assert_eq!(escaped(&[&crab[..cut], &crab[cut..]]), "🦀", "cut {cut}");
        }
        // an escape sequence split across chunks is escaped all the same
        assert_eq!(escaped(&[b"\x1b", b"[2J"]), "\\x1b[2J");
        // a sequence cut off by the end of the stream
        assert_eq!(escaped(&[&crab[..2]]), "\\xf0\\x9f");
    }

    #[test]
    fn cells_sizes_and_durations() {
        assert_eq!(cell(&Value::Null), "-");
        assert_eq!(cell(&json!("")), "-");
        assert_eq!(cell(&json!("web")), "web");
        assert_eq!(cell(&json!(42)), "42");
        assert_eq!(cell(&json!(true)), "true");
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1024), "1.0 KiB");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(10 << 20), "10.0 MiB");
        assert_eq!(human(3 << 30), "3.0 GiB");
        assert_eq!(human(4096 << 30), "4096.0 GiB");
        assert_eq!(size(&json!(2048)), "2.0 KiB");
        assert_eq!(size(&Value::Null), "-");
        assert_eq!(dur(0), "0s");
        assert_eq!(dur(59), "59s");
        assert_eq!(dur(61), "1m1s");
        assert_eq!(dur(3600), "1h0m");
        assert_eq!(dur(86399), "23h59m");
        assert_eq!(dur(90000), "1d1h");
    }

    #[test]
    fn tables_pad_columns_to_their_widest_cell() {
        let rows = vec![
            vec!["web".to_string(), "running".into(), "last".into()],
            vec!["database".to_string(), "-".into(), "x".into()],
        ];
        assert_eq!(
            table(&["NAME", "STATE", "NOTE"], rows),
            "  NAME      STATE    NOTE\n  web       running  last\n  database  -        x\n"
        );
        // Width is counted in characters, and the last cell carries no padding.
        let rows = vec![vec!["grüße".to_string(), String::new()]];
        assert_eq!(table(&["A", "B"], rows), "  A      B\n  grüße\n");
        assert_eq!(table(&["A", "B"], Vec::new()), "  (none)\n");
    }

    #[test]
    fn update_names_the_index_and_what_can_be_upgraded() {
        let v = json!({"repository": "https://repo", "packages": 3, "serial": 7,
            "upgradable": [{"name": "web", "installed": "1.0", "available": "1.1"}]});
        assert_eq!(
            update(&v),
            "repository https://repo: 3 packages, serial 7, signature verified\n  upgradable: web 1.0 -> 1.1\n"
        );
        let v = json!({"packages": 0, "serial": 1, "expires": 0, "upgradable": []});
        assert_eq!(
            update(&v),
            format!(
                "repository ?: 0 packages, serial 1, signature verified, valid until {}\n",
                berth_core::date::utc(0)
            )
        );
    }

    #[test]
    fn list_rows_and_sections() {
        let v = json!({
            "installed": [{"name": "web", "version": "1.0", "size": 2048, "description": "a server"}],
            "available": [{"name": "web", "version": "1.1", "size": null, "installed": "1.0", "description": ""},
                          {"name": "db", "version": "2", "size": 1, "installed": null, "description": "sql"}],
            "upgradable": [{"name": "web", "installed": "1.0", "available": "1.1"}],
            "index_note": "index 3 days old"
        });
        let inst = installed_rows(&v);
        fits(INSTALLED_HEAD, &inst);
        assert_eq!(inst, [["web", "1.0", "2.0 KiB", "a server"]]);
        let avail = available_rows(&v);
        fits(AVAILABLE_HEAD, &avail);
        assert_eq!(avail[0], ["web", "1.1", "-", "1.0", "-"]);
        assert_eq!(at(AVAILABLE_HEAD, &avail[1], "INSTALLED"), "-");
        assert_eq!(at(AVAILABLE_HEAD, &avail[1], "SIZE"), "1 B");
        let up = upgradable_rows(&v);
        fits(UPGRADABLE_HEAD, &up);
        assert_eq!(up, [["web", "1.0", "1.1"]]);

        let only = |installed, available, upgradable| Lists {
            installed,
            available,
            upgradable,
        };
        assert_eq!(
            list(&v, &only(false, false, true)),
            "upgradable:\n  NAME  INSTALLED  AVAILABLE\n  web   1.0        1.1\n"
        );
        assert!(list(&v, &only(false, true, false))
            .starts_with("available:\n  (index 3 days old)\n  NAME  VERSION"));
        let all = list(&json!({}), &only(true, true, true));
        assert_eq!(
            all,
            "installed:\n  (none)\navailable:\n  (none)\nupgradable:\n  (none)\n"
        );
    }

    #[test]
    fn package_results() {
        assert_eq!(
            progress(&json!({"event": "progress", "package": "web", "done": 512, "total": 2048})),
            Some("\r\x1b[Kfetching web 512 B / 2.0 KiB (25%)".into())
        );
        // A total of 0 divides by 1.
        assert_eq!(
            progress(&json!({"event": "progress", "package": "web"})),
            Some("\r\x1b[Kfetching web 0 B / 1 B (0%)".into())
        );
        assert_eq!(
            progress(&json!({"event": "fetched", "package": "web", "version": "1.0"})),
            Some("\r\x1b[Kfetched web 1.0\n".into())
        );
        assert_eq!(
            progress(
                &json!({"event": "fetched", "package": "web", "version": "1.1",
                "size": 4 << 20, "bytes": 40960, "delta_from": "1.0"})
            ),
            Some(
                "\r\x1b[Kfetched web 1.1 as a delta from 1.0 (40.0 KiB instead of 4.0 MiB)\n"
                    .into()
            )
        );
        assert_eq!(
            progress(
                &json!({"event": "delta_failed", "package": "web", "error": "zstd is not installed"})
            ),
            // Said in the daemon's log; the whole image's download follows.
            None
        );
        assert_eq!(progress(&json!({"event": "verifying"})), None);
        let v = json!({"installed": [{"name": "web", "version": "1.0"}], "unchanged": ["db"]});
        assert_eq!(
            installed(&v),
            "installed web 1.0\ndb is already installed\n"
        );
        let names = ["a".to_string(), "b".to_string()];
        assert_eq!(removed(&names, false), "removed a\nremoved b\n");
        assert_eq!(removed(&names[..1], true), "removed a and its data\n");
        assert_eq!(
            gc(&json!({"removed": ["x", "y"], "freed_bytes": 3145728})),
            "removed 2 unused image(s), freed 3.0 MiB\n"
        );
        assert_eq!(gc(&json!({})), "removed 0 unused image(s), freed 0 B\n");
    }

    #[test]
    fn container_results() {
        let v = json!({"init_pid": 42});
        assert_eq!(started("web", false, &v), "started web (init pid 42)\n");
        assert_eq!(started("web", true, &v), "restarted web (init pid 42)\n");
        let traced = json!({"init_pid": 42, "trace": [["received", 1_000_000_000u64],
            ["locked", 1_000_250_000u64], ["reported", 1_009_250_000u64]]});
        assert_eq!(
            started("web", false, &traced),
            "started web (init pid 42)\n  received         +   0.000 ms    0.250 ms\n  \
             locked           +   0.250 ms    9.000 ms\n  reported         +   9.250 ms \n"
        );
        assert_eq!(stopped("web", &json!({"graceful": true})), "stopped web\n");
        assert_eq!(
            stopped("web", &json!({"graceful": false})),
            "stopped web (killed after the timeout)\n"
        );
    }

    #[test]
    fn status_rows_show_uptime_and_how_containers_last_ended() {
        let v = json!({
            "daemon": {"version": "0.1.0", "pid": 7, "uptime_s": 3700},
            "repository": {"warning": "the index expired"},
            "containers": [
                {"name": "web", "version": "1.0", "state": "running", "init_pid": 99,
                 "started_at": 1000, "network": "bridge", "last_exit": null, "restarts": 2,
                 "health": {"status": "healthy"}},
                {"name": "job", "version": "2", "state": "stopped", "init_pid": null,
                 "network": "", "last_exit": {"code": 1}},
                {"name": "crash", "version": "1", "state": "failed", "restarts": 5,
                 "reason": "failed again after 5 restarts (berth start or berth reset)",
                 "last_exit": {"code": 1}},
                {"name": "wait", "version": "1", "state": "backoff", "restart_in_ms": 2500,
                 "restarts": 1, "reason": "exit 3", "last_exit": {"code": 3}},
                {"name": "hog", "version": "3", "state": "stopped",
                 "last_exit": {"signal": 9},
                 "guard_kill": {"pid": 12, "available": 5242880}},
                {"name": "segv", "version": "1", "state": "stopped",
                 "last_exit": {"signal": 11, "core_dumped": true}},
                {"name": "abrt", "version": "1", "state": "stopped",
                 "last_exit": {"signal": 6, "core_dumped": null}}
            ]
        });
        let rows = status_rows(&v, 1090);
        fits(STATUS_HEAD, &rows);
        assert_eq!(
            rows[0],
            [
                "web",
                "1.0",
                "running, healthy",
                "2",
                "99",
                "1m30s",
                "bridge",
                "-"
            ]
        );
        assert_eq!(at(STATUS_HEAD, &rows[3], "STATE"), "backoff 2.5s");
        let rows: Vec<_> = rows
            .into_iter()
            .filter(|r| r[0] != "crash" && r[0] != "wait")
            .collect();
        assert_eq!(at(STATUS_HEAD, &rows[1], "PID"), "-");
        assert_eq!(at(STATUS_HEAD, &rows[1], "UPTIME"), "-");
        assert_eq!(at(STATUS_HEAD, &rows[1], "NETWORK"), "-");
        assert_eq!(at(STATUS_HEAD, &rows[1], "LAST EXIT"), "exit 1");
        assert_eq!(
            at(STATUS_HEAD, &rows[2], "LAST EXIT"),
            "signal 9 (guard killed pid 12 at 5 MiB free)"
        );
        assert_eq!(
            at(STATUS_HEAD, &rows[3], "LAST EXIT"),
            "signal 11 (core dumped)"
        );
        assert_eq!(at(STATUS_HEAD, &rows[4], "LAST EXIT"), "signal 6");
        let text = status(&v, 1090);
        assert!(
            text.starts_with(
                "berth daemon 0.1.0 (pid 7), up 1h1m\nwarning: the index expired\n  NAME"
            ),
            "{text}"
        );
        assert!(
            text.ends_with(
                "crash: failed: failed again after 5 restarts (berth start or berth reset)\n  \
                 (berth start crash to try again, berth reset crash to clear)\n\
                 wait: backoff: exit 3\n"
            ),
            "{text}"
        );
        assert_eq!(text.lines().count(), 13);
    }

    #[test]
    fn status_and_safe_mode_answers_say_safe_mode_and_why() {
        let v = json!({
            "daemon": {"version": "0.1.0", "pid": 7, "uptime_s": 5, "safe_mode": true,
                       "safe_mode_reason": "5 daemon starts in a row did not stay up 30 s ([boot] confirm_after); containers running in them: web"},
            "repository": {},
            "containers": []
        });
        let text = status(&v, 0);
        assert!(
            text.contains("\nsafe mode: 5 daemon starts in a row did not stay up 30 s ([boot] confirm_after); containers running in them: web\n  no image is mounted and no container starts; berth safe-mode clear returns to normal\n"),
            "{text}"
        );
        let v = json!({"daemon": {"version": "0.1.0", "pid": 7, "uptime_s": 5, "safe_mode": false,
                                  "safe_mode_reason": null}});
        assert!(!status(&v, 0).contains("safe mode"));
        assert_eq!(
            safe_mode(
                &json!({"safe_mode": true, "safe_mode_reason": "why", "containers": ["web", "db"]})
            ),
            "safe mode: why; stopped: web, db\n"
        );
        assert_eq!(
            safe_mode(&json!({"safe_mode": false, "safe_mode_reason": null, "containers": []})),
            "safe mode cleared\n"
        );
        assert_eq!(
            safe_mode(&json!({"safe_mode": false, "containers": ["web"]})),
            "safe mode cleared; starting: web\n"
        );
    }

    #[cfg(feature = "shape")]
    #[test]
    fn limit_output_says_what_is_in_force() {
        let v = json!({"limits": {"cpu_max_percent": 50, "memory_max": 67108864, "pids_max": null,
                                  "egress": 8000000, "ingress": null},
                       "applied": true});
        assert_eq!(
            limit("web", &v),
            "web: cpu 50 (% of one CPU), memory 64.0 MiB, pids -, egress 8mbit, ingress - (- is unlimited) (applied to the running container)\n"
        );
        let v = json!({"limits": {}, "applied": false});
        assert_eq!(
            limit("web", &v),
            "web: cpu - (% of one CPU), memory -, pids -, egress -, ingress - (- is unlimited)\n"
        );
    }

    /// Every row of `berth stats` has one cell per column (it once printed 10 headers over
    /// 8 cells), with the values where their headers say.
    #[test]
    fn stats_columns_match_their_cells() {
        let v = json!({
            "cgroup_version": "v1", "cpus": 2, "sample_ms": 500,
            "group": {"cgroup": "berth", "cpu_percent": 12.34, "cpu_max_percent": 100,
                      "memory_current": 1048576, "memory_max": 2097152, "memory_peak": 1572864,
                      "pids_current": 3, "pids_max": 1024, "nr_throttled": 7, "oom_kills": 0},
            "containers": [{"name": "web", "cpu_percent": 1.0, "cpu_max_percent": null,
                            "memory_current": 4096, "memory_max": null, "memory_peak": null,
                            "pids_current": 1, "pids_max": 64, "nr_throttled": 0, "oom_kills": 2}]
        });
        let rows = stats_rows(&v);
        assert_eq!(rows.len(), 2);
        fits(STATS_HEAD, &rows);
        let col = |r: usize, name: &str| at(STATS_HEAD, &rows[r], name);
        assert_eq!(col(0, "NAME"), "[berth]");
        assert_eq!(col(0, "CPU"), "12.3%");
        assert_eq!(col(0, "MEMORY / MAX"), "1.0 MiB / 2.0 MiB");
        assert_eq!(col(0, "PEAK"), "1.5 MiB");
        assert_eq!(col(0, "PIDS / MAX"), "3 / 1024");
        assert_eq!(col(0, "THROTTLED"), "7");
        assert_eq!(col(1, "NAME"), "web");
        assert_eq!(col(1, "CPU MAX"), "-");
        assert_eq!(col(1, "MEMORY / MAX"), "4.0 KiB / -");
        assert_eq!(col(1, "OOM KILLS"), "2");
        assert!(stats(&v)
            .starts_with("cgroup v1, 2 CPUs; CPU % is of one CPU, sampled over 500 ms\n  NAME"));
        assert!(!stats(&v).contains("slab"));
    }

    /// The daemon's own writes under the table; said plainly when the kernel cannot count
    /// them; nothing from a daemon that does not report them.
    #[test]
    fn the_daemons_own_writes_in_stats() {
        let v = json!({"cgroup_version": "v1", "cpus": 2, "sample_ms": 500,
            "group": {}, "containers": [],
            "writes": {"bytes": 12288, "syscalls": 40, "fsyncs": 7, "seconds": 7200,
                       "bytes_per_hour": 6144}});
        assert!(stats(&v)
            .ends_with("\nthe daemon's own writes in 2h0m: 12.0 KiB (6.0 KiB/hour), 7 fsyncs\n"));
        let v = json!({"cgroup_version": "v1", "cpus": 2, "sample_ms": 500,
            "group": {}, "containers": [],
            "writes": {"bytes": null, "syscalls": null, "fsyncs": 0, "seconds": 5,
                       "bytes_per_hour": null}});
        assert!(stats(&v).contains(
            "own writes in 5s: unknown (no task I/O accounting in this kernel), 0 fsyncs"
        ));
        let v = json!({"cgroup_version": "v1", "cpus": 2, "sample_ms": 500,
            "group": {}, "containers": []});
        assert!(!stats(&v).contains("own writes"));
    }

    #[cfg(feature = "slab")]
    #[test]
    fn the_slab_reserve_in_stats() {
        let mut v = json!({"cgroup_version": "v2", "cpus": 2, "sample_ms": 500, "group": {}, "containers": []});
        v["slab"] = json!({"loaded": true, "error": null, "caches": [
            {"name": "skbuff_head_cache", "active_objs": 640, "total_objs": 1169, "free_objs": 529,
             "object_size": 256, "reserve": 512, "held": 525, "pages": 35, "holds": true},
            {"name": "kmalloc-8k", "active_objs": null, "total_objs": null, "free_objs": null,
             "object_size": null, "reserve": null, "held": 0, "pages": 0, "holds": false}]});
        let out = stats(&v);
        let lines: Vec<&str> = out.lines().collect();
        let at = lines
            .iter()
            .position(|l| *l == "slab reserve (berth_slab):")
            .unwrap();
        assert!(
            lines[at + 1].trim_start().starts_with("SLAB CACHE"),
            "{out}"
        );
        let row: Vec<&str> = lines[at + 2].split_whitespace().collect();
        assert_eq!(
            row,
            [
                "skbuff_head_cache",
                "256",
                "B",
                "640",
                "/",
                "1169",
                "529",
                "512",
                "525",
                "35",
                "yes"
            ]
        );
        assert!(lines[at + 3].trim_end().ends_with("NO"), "{out}");
        v["slab"]["error"] =
            json!("cannot load berth_slab: the kernel has no module support (no /proc/modules)");
        assert!(stats(&v)
            .contains("\nslab reserve: cannot load berth_slab: the kernel has no module support"));
    }

    #[test]
    fn governor_rows_and_summary() {
        let v = json!({
            "mode": "capped", "note": "slow probe", "probe": "http://127.0.0.1/",
            "interval_ms": 1000, "timeout_ms": 200, "probes": 5, "last_latency_ms": 12.25,
            "cap": 75.0, "cpus": 4, "t_lower": 10, "t_upper": 30, "target": 80.5,
            "r_n": 100.0, "r_n_source": "probe", "r_c": null, "failures": 0,
            "last_error": "timed out",
            "history": [
                {"at": 86_400 + 3723, "cap": 50.0, "r_c": 2.5, "r_n": null, "mode": "capped",
                 "note": "cut"},
                {"at": 0, "cap": null, "mode": "off"}
            ]
        });
        let rows = governor_rows(&v);
        fits(GOVERNOR_HEAD, &rows);
        assert_eq!(rows[0], ["01:02:03", "50%", "2.5/s", "-", "capped", "cut"]);
        assert_eq!(rows[1], ["00:00:00", "-", "-", "-", "off", ""]);
        let text = governor(&v);
        let head: Vec<&str> = text.lines().take(5).collect();
        assert_eq!(
            head,
            [
                "governor: capped (slow probe)",
                "probe: http://127.0.0.1/, every 1000 ms, timeout 200 ms; 5 probes, last 12.3 ms",
                "cap: 75% of all 4 CPUs (T_l 10%, T_u 30%), target 80.5%",
                "R_n 100/s (probe), R_c -, consecutive failures 0",
                "last error: timed out",
            ]
        );
        // No probe, no error: those lines are left out.
        let text = governor(&json!({"mode": "off", "probe": null, "last_latency_ms": null}));
        assert!(
            text.starts_with("governor: off\ncap: - of all null CPUs"),
            "{text}"
        );
        assert!(text.ends_with("  (none)\n"), "{text}");
    }

    #[cfg(feature = "shape")]
    #[test]
    fn a_capped_containers_data_shows_under_net_and_stats() {
        let data = json!({"cap": 4194304, "period": "4M/day", "used": 3145728,
            "since": "2026-12-07", "resets": "2026-12-08", "over": false});
        let mut v = json!({"bridge": "berth0", "gateway": "g", "subnet": "s", "table": "t",
            "containers": [{"name": "dl", "mode": "isolated", "publish": [], "data": data},
                           {"name": "web", "mode": "isolated", "publish": [], "data": null}]});
        let text = net(&v);
        assert!(
            text.ends_with(
                "data dl: 3.0 MiB of 4M/day (75%) since 2026-12-07, resets 2026-12-08\n"
            ),
            "{text}"
        );
        assert!(!text.contains("data web"), "{text}");
        v["containers"][0]["data"]["over"] = json!(true);
        assert!(net(&v).ends_with("resets 2026-12-08: at its cap\n"));
        let mut out = String::new();
        data_lines(&v["containers"], &mut out);
        assert_eq!(out.lines().count(), 1, "{out}");
    }

    #[test]
    fn net_rows_show_ports_and_drops() {
        let v = json!({
            "bridge": "berth0", "gateway": "10.0.3.1", "subnet": "10.0.3.0/24", "table": "berth",
            "containers": [
                {"name": "web", "mode": "bridge", "ipv4": "10.0.3.2", "mac": "02:00:00:00:00:02",
                 "publish": ["8080:80/tcp", "53:53/udp"], "dropped_spoofed": 0, "dropped_denied": 4},
                {"name": "db", "mode": "none", "ipv4": null, "mac": null, "publish": []}
            ],
            "hosts": [
                {"ip": "192.0.2.9", "mac": "aa:bb:cc:dd:ee:ff", "dev": "eth0", "hostname": null,
                 "hostname_source": null, "state": null, "last_seen": null, "age_s": null},
                {"ip": "192.0.2.10", "mac": "aa:bb:cc:dd:ee:00", "dev": "eth0", "hostname": "tv",
                 "hostname_source": "mdns", "state": "stale", "last_seen": 1700000000, "age_s": 75}
            ]
        });
        let rows = net_rows(&v);
        fits(NET_HEAD, &rows);
        assert_eq!(
            rows[0],
            [
                "web",
                "bridge",
                "10.0.3.2",
                "02:00:00:00:00:02",
                "8080:80/tcp,53:53/udp",
                "0",
                "4"
            ]
        );
        assert_eq!(rows[1], ["db", "none", "-", "-", "-", "-", "-"]);
        assert!(net(&v).starts_with(
            "bridge berth0 gateway 10.0.3.1 subnet 10.0.3.0/24 (nft table berth)\n  NAME"
        ));
        #[cfg(feature = "shape")]
        {
            let mut lined = v.clone();
            lined["line"] = json!({"uplink": "wan", "rate": 20_000_000u64, "shaped": 18_000_000u64,
                "containers": 10_000_000u64, "host": 7_100_000u64, "state": "in force"});
            assert!(net(&lined).contains(
                "(nft table berth)\nline wan 20mbit: shaped at 18mbit, containers 10mbit, host 7100kbit or more: in force\n  NAME"
            ), "{}", net(&lined));
        }
        let hosts = hosts_rows(&v);
        fits(HOSTS_HEAD, &hosts);
        assert_eq!(
            hosts,
            [
                ["192.0.2.9", "aa:bb:cc:dd:ee:ff", "eth0", "-", "-", "-", "-"],
                [
                    "192.0.2.10",
                    "aa:bb:cc:dd:ee:00",
                    "eth0",
                    "stale",
                    "1m15s ago",
                    "tv",
                    "mdns"
                ]
            ]
        );
    }

    #[test]
    fn check_lists_the_fallbacks_in_use_only_when_there_are_some() {
        assert_eq!(fallbacks(&[]), "");
        let text = fallbacks(&["pidfd missing: ENOSYS (kernel < 5.3): by pid".to_string()]);
        assert_eq!(
            text,
            "\nfallbacks in use (older kernel, docs/kernels.md):\n  pidfd missing: ENOSYS (kernel < 5.3): by pid\n"
        );
    }

    #[test]
    fn check_groups_features_and_counts_what_is_missing() {
        use berth_sys::check::{Feature, Status};
        let f = |name, group, status, required, detail: &str| Feature {
            name,
            group,
            status,
            required,
            detail: detail.into(),
        };
        let features = [
            f("cgroup v2", "kernel", Status::Present, true, ""),
            f(
                "user namespaces",
                "kernel",
                Status::Missing,
                true,
                "CONFIG_USER_NS",
            ),
            f("mksquashfs", "tools", Status::Unknown, false, ""),
        ];
        assert_eq!(
            check(&features, 1, false),
            format!(
                "--- kernel ---\n{:<28} present (required)\n{:<28} missing (required)  CONFIG_USER_NS\n--- tools ---\n{:<28} unknown\n\nberth cannot run here: 1 required feature(s) missing\n",
                "cgroup v2", "user namespaces", "mksquashfs"
            )
        );
        let colored = check(&features[..2], 0, true);
        assert!(
            colored.contains("\x1b[32mpresent\x1b[0m (required)"),
            "{colored}"
        );
        assert!(
            colored.contains("\x1b[31mmissing\x1b[0m (required)"),
            "{colored}"
        );
        assert!(!colored.contains("cannot run here"), "{colored}");
    }
}
