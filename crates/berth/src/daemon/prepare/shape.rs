//! Bandwidth caps, the apply side (docs/network.md, "Bandwidth"): `berth_core::shape`'s
//! commands on an isolated container's host-side veth, put there by the script LXC runs when
//! the veth exists (before the payload runs), changed in place by `berth limit`, and the IFB
//! device removed when the veth goes (LXC's down script) or the package does. Feature
//! `shape`: without it the manifest's rates are unknown keys and `berth limit` has no such
//! options.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use berth_core::manifest::NetMode;
use berth_core::net;
use berth_core::shape::{self, Caps};
use berth_core::state::Installed;

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::prepare::limits;

/// The caps in force for `p`: `berth limit`'s over the manifest's.
pub(crate) fn caps_of(d: &Daemon, p: &Installed) -> Caps {
    limits::load_overrides(&d.cfg, p.name.as_str()).caps(&p.manifest.resources)
}

/// Whether `caps` can be had in `mode`: shared and macvlan have no veth of their own (the
/// manifest refuses them there; `berth limit` is checked here).
pub(crate) fn check(name: &str, mode: NetMode, caps: Caps) -> Result<()> {
    if !caps.any() || mode == NetMode::None {
        return Ok(());
    }
    if mode != NetMode::Isolated {
        return Err(Error::new(
            Kind::Refused,
            format!("{name}: {}", berth_core::manifest::cap_refusal(mode)),
        ));
    }
    Ok(())
}

/// The `lxc.net.0.script.up` and `.down` of an isolated container at `ip`: without a cap the
/// shared up script (`shared`, the attach only); with one, a script of its own that shapes
/// too. The down script removes the IFB device a cap made, now or by a later `berth limit`.
pub(crate) fn scripts(
    d: &Daemon,
    name: &str,
    ip: Ipv4Addr,
    caps: Caps,
    shared: PathBuf,
) -> Result<(PathBuf, PathBuf)> {
    let dir = d.cfg.paths.run.join("net");
    let write = |f: &PathBuf, text: String| {
        berth_sys::fsutil::write_volatile(f, text.as_bytes(), 0o755)
            .map_err(|e| Error::internal(format!("{}: {e}", f.display())))
    };
    let down = dir.join("veth-down");
    write(&down, shape::down_script())?;
    let up = if caps.any() {
        let f = dir.join(format!("up-{name}"));
        let ifb = shape::ifb_of(&net::veth_of(ip));
        write(&f, shape::up_script(&d.cfg.network.bridge, &ifb, caps))?;
        f
    } else {
        let _ = std::fs::remove_file(dir.join(format!("up-{name}")));
        shared
    };
    Ok((up, down))
}

/// `berth limit`: the running isolated container at `ip` gets exactly `caps`, in place.
/// When the shaping fails half-way, the caps it had (`was`) are put back, and the error
/// says whether that worked.
pub(crate) fn apply(d: &Daemon, name: &str, ip: Ipv4Addr, caps: Caps, was: Caps) -> Result<()> {
    let veth = net::veth_of(ip);
    let ifb = shape::ifb_of(&veth);
    let run = |caps| {
        berth_sys::host::run_checked(
            d.host.tools,
            "sh",
            &["-s", "--", &veth],
            Some(&shape::script(&ifb, caps)),
            berth_sys::host::TOOL_LIMIT,
        )
    };
    let Err(e) = run(caps) else {
        return Ok(());
    };
    let state = match run(was) {
        Ok(_) => "the bandwidth caps were not changed".to_string(),
        Err(again) => format!("the bandwidth caps may be partly changed (putting the old ones back failed too: {again}): berth limit again, or restart {name}"),
    };
    Err(Error::new(
        Kind::LimitFailed,
        format!("{name}: {state}: {e}"),
    ))
}

/// A package removed (or its container gone without LXC's down script, the daemon killed):
/// the IFB device of its lease, if one is left.
pub(crate) fn forget(d: &Daemon, ip: Ipv4Addr) {
    let ifb = shape::ifb_of(&net::veth_of(ip));
    // Asked of ip, not of /sys/class/net: sysfs shows the network namespace it was mounted
    // in, which need not be the daemon's.
    match berth_sys::host::run_checked(
        d.host.tools,
        "ip",
        &["link", "del", "dev", &ifb],
        None,
        berth_sys::host::TOOL_LIMIT,
    ) {
        Ok(_) => log::info!("network: removed {ifb}, left by a container gone"),
        Err(e) if e.to_string().contains("Cannot find device") => {}
        Err(e) => log::warn!("network: removing {ifb}: {e}"),
    }
}

/// The line governor's state, for `berth net`: what the last look at the uplink found. Held
/// across each look and what follows from it (the watch's and `apply`'s), so that neither
/// acts on what the other has just changed.
static LINE: std::sync::Mutex<LineState> = std::sync::Mutex::new(LineState::Off);

#[derive(Debug, Clone, PartialEq)]
enum LineState {
    /// No container on berth's bridge: the uplink is left as it was.
    Off,
    /// In force, put (or brought to the configuration's rates) by this daemon.
    On,
    /// Wanted, and not there: why (no such interface yet, another shaper, tc failing).
    Not(String),
}

fn tc(d: &Daemon, args: &[&str], input: Option<&str>) -> std::result::Result<String, String> {
    berth_sys::host::run_checked(d.host.tools, "tc", args, input, berth_sys::host::TOOL_LIMIT)
        .map_err(String::from)
}

fn sh(d: &Daemon, script: &str, uplink: &str) -> std::result::Result<String, String> {
    berth_sys::host::run_checked(
        d.host.tools,
        "sh",
        &["-s", "--", uplink],
        Some(script),
        berth_sys::host::TOOL_LIMIT,
    )
    .map_err(String::from)
}

/// Where the name of the interface the governor was put on is kept (the run directory: a
/// reboot takes both away), so that one no longer configured, or left by a daemon killed
/// before it took it off, is found and taken off.
fn record(d: &Daemon) -> PathBuf {
    d.cfg.paths.run.join("net/line")
}

/// Takes berth's governor off `uplink` (another's root qdisc stays): whether it is off (or
/// the interface gone).
fn take_off(d: &Daemon, uplink: &str) -> bool {
    match sh(d, &shape::line_off_script(), uplink) {
        Ok(_) => true,
        Err(e) if e.contains("Cannot find device") => true,
        Err(e) => {
            log::warn!("network: taking the line governor off {uplink}: {e}");
            false
        }
    }
}

/// Takes the governor off the interface it was put on, unless that is `keep`; the record
/// goes once it is off (a failure is tried again at the next look or start).
fn forget_stale(d: &Daemon, keep: Option<&str>) {
    let Ok(was) = std::fs::read_to_string(record(d)) else {
        return;
    };
    let was = was.trim();
    if Some(was) == keep {
        return;
    }
    if !berth_core::net::is_ifname(was) || take_off(d, was) {
        let _ = std::fs::remove_file(record(d));
    }
}

/// Containers are on berth's bridge (their ruleset is about to load): the governor goes on
/// the uplink, or is brought to the configuration's rates, before their packets are marked
/// for it. An uplink not there yet (a PPPoE link still dialling) is no error: nothing leaves
/// by it, and [`watch_line`] puts the governor there when it comes. Another shaper's root
/// qdisc on it is: berth does not replace it, and no container starts ungoverned.
pub(crate) fn line_on(d: &Daemon) -> std::result::Result<(), String> {
    if d.cfg.network.line.is_none() {
        return Ok(());
    }
    let mut state = LINE.lock().unwrap();
    let was = state.clone();
    let r = ensure(d, &mut state);
    if let LineState::Not(why) = &*state {
        if *state != was && r.is_ok() {
            log::warn!("network: {why}");
        }
    }
    r.map(drop)
}

/// [`line_on`] under the state's lock: a governor of berth's found there is left as it is
/// only when this daemon put it there whole; any other (a daemon's before, a script that
/// failed half-way) is brought to the configuration's rates. True when it made (or remade)
/// the governor.
fn ensure(d: &Daemon, state: &mut LineState) -> std::result::Result<bool, String> {
    let l = d.cfg.network.line.as_ref().expect("a line");
    forget_stale(d, Some(&l.uplink));
    let show = match tc(d, &["qdisc", "show", "dev", &l.uplink, "root"], None) {
        Err(e) if e.contains("Cannot find device") => {
            *state = LineState::Not(format!(
                "uplink {}: no such interface yet; governed when it comes",
                l.uplink
            ));
            return Ok(false);
        }
        Err(e) => {
            let why = format!("uplink {}: {e}", l.uplink);
            *state = LineState::Not(why.clone());
            return Err(why);
        }
        Ok(show) => show,
    };
    match shape::root_of(&show) {
        shape::Root::Foreign(k) => {
            let why = format!(
                "uplink {}: its root qdisc is another shaper's ({k}), which berth does not replace: remove it, or [network] uplink",
                l.uplink
            );
            *state = LineState::Not(why.clone());
            Err(why)
        }
        shape::Root::Ours if *state == LineState::On => Ok(false),
        _ => {
            // Recorded first: a daemon killed half-way leaves a name to take it off by.
            let f = record(d);
            let _ = std::fs::create_dir_all(d.cfg.paths.run.join("net"));
            if let Err(e) = berth_sys::fsutil::write_volatile(&f, l.uplink.as_bytes(), 0o644) {
                log::warn!("network: {}: {e}", f.display());
            }
            if let Err(e) = sh(d, &shape::line_script(l), &l.uplink) {
                let why = format!("uplink {}: the line governor: {e}", l.uplink);
                *state = LineState::Not(why.clone());
                return Err(why);
            }
            *state = LineState::On;
            Ok(true)
        }
    }
}

/// No container on berth's bridge any more: the governor comes off the uplink (the kernel
/// puts its default back); another's root qdisc is left alone.
pub(crate) fn line_off(d: &Daemon) {
    if d.cfg.network.line.is_none() {
        return;
    }
    let mut state = LINE.lock().unwrap();
    let uplink = &d.cfg.network.line.as_ref().expect("a line").uplink;
    forget_stale(d, Some(uplink));
    // Off the configured uplink whatever the record says (one that could not be written).
    if take_off(d, uplink) {
        let _ = std::fs::remove_file(record(d));
    }
    *state = LineState::Off;
}

/// At the daemon's start: a governor left on an interface no longer configured, or by a
/// daemon killed with no container left, comes off. Then, every 10 s while containers are
/// governed: a governor gone from the uplink (a PPPoE or DHCP reconnect makes the interface
/// anew; a tool removed the root qdisc) is put back, said once; another shaper found there is
/// reported, not fought.
/// `bridged`: containers are on berth's bridge (whether or not their ruleset could be
/// restored: a failed restore leaves the governor to the watch, not taken off).
pub(crate) fn watch_line(d: &std::sync::Arc<Daemon>, bridged: bool) {
    if !bridged {
        forget_stale(d, None);
    }
    if d.cfg.network.line.is_none() {
        return;
    }
    let mut state = LINE.lock().unwrap();
    if bridged && *state == LineState::Off {
        *state = LineState::Not("the ruleset was not restored at the daemon's start".into());
    }
    drop(state);
    let d = std::sync::Arc::clone(d);
    let spawned = berth_sys::process::spawn_thread(
        "line".into(),
        64 * 1024,
        Box::new(move || loop {
            std::thread::sleep(std::time::Duration::from_secs(10));
            look(&d);
        }),
    );
    if let Err(e) = spawned {
        log::error!("network: cannot start the line governor's watch: {e}");
    }
}

/// One look of the watch, under the state's lock throughout.
pub(crate) fn look(d: &Daemon) {
    let mut state = LINE.lock().unwrap();
    let was = state.clone();
    if was == LineState::Off {
        return;
    }
    let uplink = &d.cfg.network.line.as_ref().expect("a line").uplink;
    match ensure(d, &mut state) {
        Ok(true) => log::info!("network: uplink {uplink}: the line governor is in force again"),
        Ok(false) if *state != was => {
            if let LineState::Not(why) = &*state {
                log::warn!("network: {why}");
            }
        }
        Err(e) if LineState::Not(e.clone()) != was => log::error!("network: {e}"),
        _ => {}
    }
}

/// `berth net`'s `line`: the uplink, its rates and whether the governor holds it.
pub(crate) fn line_status(d: &Daemon) -> serde_json::Value {
    let Some(l) = &d.cfg.network.line else {
        return serde_json::Value::Null;
    };
    let state = match &*LINE.lock().unwrap() {
        LineState::Off => "off: no container on berth's bridge".to_string(),
        LineState::On => "in force".to_string(),
        LineState::Not(why) => format!("not in force: {why}"),
    };
    serde_json::json!({
        "uplink": l.uplink,
        "rate": l.rate,
        "shaped": l.shaped(),
        "containers": l.containers(),
        "host": l.host(),
        "state": state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_is_refused_where_no_veth_of_its_own_carries_the_traffic() {
        let capped = Caps {
            egress: Some(8_000_000),
            ingress: None,
        };
        for mode in [NetMode::Shared, NetMode::Macvlan] {
            let e = check("web", mode, capped).unwrap_err();
            assert_eq!(e.kind, Kind::Refused);
            assert!(
                e.message
                    .starts_with("web: a bandwidth cap needs network mode isolated"),
                "{}",
                e.message
            );
            // No cap: nothing to refuse.
            assert!(check("web", mode, Caps::default()).is_ok());
        }
        // No network: nothing to shape.
        assert!(check("web", NetMode::None, capped).is_ok());
        assert!(check("web", NetMode::Isolated, capped).is_ok());
    }

    /// The down script names the IFB device as `ifb_of` does: run with a stand-in `ip` that
    /// records its arguments.
    #[test]
    fn the_down_script_removes_the_ifb_device_ifb_of_names() {
        let dir = std::env::temp_dir().join(format!("berth-shape-down-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("ip.log");
        std::fs::write(
            dir.join("ip"),
            format!("#!/bin/sh\necho \"$@\" >> {}\nexit 1\n", log.display()),
        )
        .unwrap();
        std::fs::write(dir.join("down"), shape::down_script()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        for f in ["ip", "down"] {
            std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let veth = net::veth_of(Ipv4Addr::new(10, 87, 0, 2));
        let st = std::process::Command::new(dir.join("down"))
            .args(["web", "net", "down", "veth", &veth])
            .env("PATH", &dir)
            .status()
            .unwrap();
        // Its ip failed (no such device): the down script still succeeds.
        assert!(st.success());
        let said = std::fs::read_to_string(&log).unwrap();
        assert_eq!(said, format!("link del dev {}\n", shape::ifb_of(&veth)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
