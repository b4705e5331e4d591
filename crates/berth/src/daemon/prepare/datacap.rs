//! Data caps, the apply side (`berth_core::datacap`): each isolated container's count of WAN
//! bytes, read back from its nft quota before every load of the ruleset (which starts quotas
//! anew) and written into the new one, kept on flash in `<state>/usage/NAME`; the period's
//! rollover; the metered switch (`<state>/net/metered`, over the policy's `metered`).
//!
//! The counts are written when they moved a hundredth of the cap (at least a MiB) or reached
//! it, seen at each load and each look (every minute), and at the daemon's clean stop: a power
//! cut forgets what moved since the last write, at most that much and a minute's traffic.

use std::path::PathBuf;

use berth_core::datacap::{self, DataCap, Known, Quota, Usage};
use berth_core::net::{self, Member};
use berth_core::state::State;
use berth_sys::fsutil::write_atomic;
use berth_sys::host::TOOL_LIMIT;
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;

fn file(d: &Daemon, name: &str) -> PathBuf {
    d.cfg.paths.state.join("usage").join(name)
}

fn metered_file(d: &Daemon) -> PathBuf {
    d.cfg.paths.state.join("net/metered")
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.as_secs())
}

/// Whether the line is metered: the switch's file (`on`/`off`), else the policy's `metered`.
pub(crate) fn metered(d: &Daemon) -> bool {
    match std::fs::read_to_string(metered_file(d))
        .as_deref()
        .map(str::trim)
    {
        Ok("on") => true,
        Ok("off") => false,
        _ => d.cfg.network.data.metered,
    }
}

/// Sets the metered switch (kept across restarts); the caller reloads the ruleset.
pub(crate) fn set_metered(d: &Daemon, on: bool) -> std::io::Result<()> {
    let f = metered_file(d);
    if let Some(dir) = f.parent() {
        std::fs::create_dir_all(dir)?;
    }
    write_atomic(&f, if on { b"on\n" } else { b"off\n" }, 0o600)
}

/// The cap in force for an installed package, metered or not.
pub(crate) fn cap_of(d: &Daemon, st: &State, name: &str, metered: bool) -> Option<DataCap> {
    let own = st.packages.get(name)?.manifest.resources.data_cap;
    d.cfg.network.data.cap(own, metered)
}

/// The counts nft's quotas hold now, by container index; empty without the table.
fn counted(d: &Daemon) -> Vec<(u32, u64, u64)> {
    let t = &d.cfg.network.table;
    let args = ["-j", "list", "quotas", "table", "inet", t];
    match berth_sys::host::run_checked(d.host.tools, "nft", &args, None, TOOL_LIMIT) {
        Ok(text) => datacap::parse_quotas(&serde_json::from_str(&text).unwrap_or(Value::Null)),
        Err(_) => Vec::new(),
    }
}

/// The daemon's entry for `name`.
fn entry<'a>(known: &'a mut [(String, Known)], name: &str) -> Option<&'a mut Known> {
    known.iter_mut().find(|(n, _)| n == name).map(|(_, k)| k)
}

fn today(now: u64) -> i64 {
    (now / 86_400) as i64
}

/// Before a load: each member with a cap in force gets its quota (its count 0 in the text the
/// ruleset's hash is taken of: a count that grew is no reason to reload); the quotas with what
/// each counted in this period (the kernel's count where its quota counts this record, else
/// the flash's, as after a reboot) are returned for [`datacap::with_counts`], with the
/// fingerprint the hash takes besides: the periods (a new one, its count from zero, is a
/// reason to reload). The records wait until [`confirm`]: until the load goes in, the kernel
/// counts the records in force, which the looks go on counting; and the flash holds no record
/// the kernel does not (a restart after a failed load trusts the kernel only for what the
/// flash says). The last count of one whose cap goes is written now.
pub(crate) fn fill(d: &Daemon, st: &State, members: &mut [Member]) -> (String, Vec<Quota>) {
    let metered = metered(d);
    let caps: Vec<Option<DataCap>> = members
        .iter()
        .map(|m| cap_of(d, st, m.name, metered))
        .collect();
    let capped = |n: &str| {
        members
            .iter()
            .zip(&caps)
            .any(|(m, c)| m.name == n && c.is_some())
    };
    let mut u = d.usage.lock().unwrap();
    let mut quotas = Vec::new();
    if u.known.is_empty() && u.pending.is_none() && caps.iter().all(Option::is_none) {
        return (String::new(), quotas);
    }
    let kernel = counted(d);
    let in_kernel = |index: u32| kernel.iter().find(|k| k.0 == index).map(|k| (k.1, k.2));
    // A cap that goes (metered off, an upgrade without it): its last count kept first.
    for (n, k) in u.known.iter_mut().filter(|(n, _)| !capped(n)) {
        let c = in_kernel(k.index).map_or(0, |(c, _)| passed(c, k.cap.bytes, k.loaded));
        let usage = Usage {
            used: c.max(k.usage.used),
            ..k.usage
        };
        if usage != k.saved {
            match write(d, n, usage) {
                Ok(()) => k.saved = usage,
                Err(e) => log::warn!("{n}: data usage: {e}"),
            }
        }
    }
    let now = now();
    let policy = d.cfg.network.data;
    let mut fingerprint = String::new();
    let mut next = Vec::new();
    for (m, cap) in members.iter_mut().zip(caps) {
        let Some(cap) = cap else { continue };
        let index = net::index_of(&d.cfg.network, m.ip);
        let had = entry(&mut u.known, m.name).copied();
        let saved = match had {
            Some(k) => k.saved,
            None => std::fs::read_to_string(file(d, m.name))
                .ok()
                .and_then(|t| Usage::parse(&t))
                .unwrap_or_default(),
        };
        // The record in force (or, after a restart, the one on flash): its period, its count.
        let base = had.map_or(saved, |k| k.usage);
        let (mut start, mut resets) = datacap::period_of(cap.period, policy.reset_day, now);
        // A clock not set yet (no RTC, no NTP answer) cannot tell a period: the last one goes on.
        let clock = berth_core::date::clock_set(now);
        if !clock && base.ends != 0 {
            (start, resets) = (base.period, base.ends);
        }
        // The kernel's quota at this index counts the record in force: this daemon's; after a
        // restart, the one on flash (written only once its load went in).
        let kernel_count = match had {
            Some(k) if k.index == index => {
                in_kernel(index).map(|(c, _)| passed(c, k.cap.bytes, k.loaded))
            }
            Some(_) => None,
            // Beyond the cap it was loaded with it counted what it refused.
            None => in_kernel(index).map(|(c, bytes)| c.min(bytes)),
        };
        let live = !clock || today(now) < base.ends;
        let used = match live {
            true => kernel_count.unwrap_or(0).max(base.used),
            false => 0,
        };
        // A count carried into a cap of another period (the metered switch, an upgrade) is
        // kept until the period it was counted in ends, if that is later.
        if live && base.ends > resets {
            resets = base.ends;
        }
        let usage = Usage {
            period: start,
            ends: resets,
            used,
        };
        next.push((
            m.name.to_string(),
            Known {
                cap,
                usage,
                resets,
                saved,
                loaded: used,
                index,
            },
        ));
        let q = Quota {
            index,
            cap: cap.bytes,
            used: 0,
            over: policy.over,
        };
        m.quota = Some(q);
        quotas.push(Quota { used, ..q });
        fingerprint.push_str(&format!("{index}:{start}:{resets} "));
    }
    // The same records as those in force (a load for another reason): nothing waits on it,
    // and its failure is no reason for the looks to ask for it again.
    let same = next.len() == u.known.len()
        && next.iter().zip(&u.known).all(|((n, a), (m, b))| {
            n == m
                && a.index == b.index
                && a.cap == b.cap
                && a.usage.period == b.usage.period
                && a.resets == b.resets
        });
    u.pending = (!same).then_some(next);
    (fingerprint, quotas)
}

/// The ruleset [`fill`] prepared is in force (it went in, or was already): its records are
/// the ones counted from now, written where they moved enough.
pub(crate) fn confirm(d: &Daemon) {
    let mut u = d.usage.lock().unwrap();
    let Some(mut next) = u.pending.take() else {
        return;
    };
    for (n, k) in next.iter_mut() {
        // A look while the load went in may have counted and written more: kept.
        if let Some(was) = entry(&mut u.known, n).filter(|w| w.index == k.index) {
            if was.usage.period == k.usage.period {
                k.usage.used = k.usage.used.max(was.usage.used);
            }
            k.saved = was.saved;
        }
        if k.usage != k.saved && datacap::worth_writing(k.saved, k.usage, k.cap.bytes) {
            match write(d, n, k.usage) {
                Ok(()) => k.saved = k.usage,
                Err(e) => log::warn!("{n}: data usage: {e}"),
            }
        }
    }
    u.known = next;
}

/// Whether records wait for a load (one that failed, or is going in).
pub(crate) fn waiting(d: &Daemon) -> bool {
    d.usage.lock().unwrap().pending.is_some()
}

/// What passed a quota that counts `kernel`: beyond its cap it counts what it refused too (a
/// sender's retransmissions), so no more than the cap, or the count it was loaded with if
/// that was more (a cap lowered: it was written as the cap).
fn passed(kernel: u64, cap: u64, loaded: u64) -> u64 {
    kernel.min(cap).max(loaded)
}

fn write(d: &Daemon, name: &str, u: Usage) -> std::io::Result<()> {
    let f = file(d, name);
    if let Some(dir) = f.parent() {
        std::fs::create_dir_all(dir)?;
    }
    write_atomic(&f, u.to_text().as_bytes(), 0o600)
}

/// A look (every minute, and at the daemon's clean stop): the kernel's counts into what the
/// daemon knows, written where they moved enough (`force`: wherever they moved at all); a
/// container that reached its cap since the last look is said so. Returns whether the
/// ruleset is to be loaded again: a period has ended (its quotas then start from zero), or a
/// load whose counts did not go in is to be tried again.
pub(crate) fn look(d: &Daemon, force: bool) -> bool {
    let mut u = d.usage.lock().unwrap();
    if u.known.is_empty() && u.pending.is_none() {
        return false;
    }
    // Records waiting for a load that did not go in (or is going in): it is tried again.
    let mut again = u.pending.is_some();
    // Under the lock: a load between the kernel's answer and its use would change whose
    // count it is.
    let kernel = counted(d);
    let now = now();
    for (name, k) in u.known.iter_mut() {
        if berth_core::date::clock_set(now) && today(now) >= k.resets {
            again = true;
            continue;
        }
        let Some(used) = kernel.iter().find(|q| q.0 == k.index).map(|q| q.1) else {
            continue;
        };
        let was = k.usage.used;
        k.usage.used = passed(used, k.cap.bytes, k.loaded).max(was);
        if was < k.cap.bytes && k.usage.used >= k.cap.bytes {
            log::warn!(
                "{name}: reached its data cap ({}); its WAN traffic is {} until {}",
                datacap::fmt_cap(k.cap),
                over_text(d.cfg.network.data.over),
                day(k.resets)
            );
        }
        let moved = k.usage != k.saved;
        if moved && (force || datacap::worth_writing(k.saved, k.usage, k.cap.bytes)) {
            match write(d, name, k.usage) {
                Ok(()) => k.saved = k.usage,
                Err(e) => log::warn!("{name}: data usage: {e}"),
            }
        }
    }
    again
}

/// What is done to WAN traffic at the cap, for people.
fn over_text(o: datacap::Over) -> String {
    match o {
        datacap::Over::Drop => "dropped".into(),
        datacap::Over::Throttle(b) => format!("held to {b} bytes/s each way"),
    }
}

/// A day (days since 1970) as `YYYY-MM-DD`.
fn day(days: i64) -> String {
    let (y, m, d) = berth_core::date::civil(days);
    format!("{y:04}-{m:02}-{d:02}")
}

/// One container's data usage for the views and its own `GET /v1/self`: null without a cap.
pub(crate) fn usage_of(d: &Daemon, name: &str) -> Value {
    let over_policy = d.cfg.network.data.over;
    let mut u = d.usage.lock().unwrap();
    let Some(k) = entry(&mut u.known, name).copied() else {
        return Value::Null;
    };
    let over = k.usage.used >= k.cap.bytes;
    let mut v = json!({
        "cap": k.cap.bytes,
        "period": datacap::fmt_cap(k.cap),
        "used": k.usage.used,
        "since": day(k.usage.period),
        "resets": day(k.resets),
        "over": over,
    });
    // What the package reads in its own `GET /v1/self`: a 429 of the line's, until the reset.
    if over {
        v["notice"] = json!({
            "status": 429,
            "code": "data_cap_reached",
            "message": format!("data cap {} reached: WAN traffic {} until {}", datacap::fmt_cap(k.cap), over_text(over_policy), day(k.resets)),
        });
    }
    v
}

/// A package removed: its count goes with it.
pub(crate) fn forget(d: &Daemon, name: &str) {
    let mut u = d.usage.lock().unwrap();
    u.known.retain(|(n, _)| n != name);
    if let Some(p) = u.pending.as_mut() {
        p.retain(|(n, _)| n != name);
    }
    drop(u);
    let _ = std::fs::remove_file(file(d, name));
}

/// Seconds between two looks.
pub(crate) const LOOK_S: u64 = 60;
