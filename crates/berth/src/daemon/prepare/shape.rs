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

/// The line governor's state, for `berth net`: what the last look at the uplink found.
static LINE: std::sync::Mutex<LineState> = std::sync::Mutex::new(LineState::Off);

#[derive(Debug, Clone, PartialEq)]
enum LineState {
    /// No container on berth's bridge: the uplink is left as it was.
    Off,
    /// In force; `put` is whether this daemon put (or brought) it there.
    On { put: bool },
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

/// Containers are on berth's bridge (their ruleset is about to load): the governor goes on
/// the uplink, or is brought to the configuration's rates, before their packets are marked
/// for it. An uplink not there yet (a PPPoE link still dialling) is no error: nothing leaves
/// by it, and [`watch_line`] puts the governor there when it comes. Another shaper's root
/// qdisc on it is: berth does not replace it, and no container starts ungoverned.
pub(crate) fn line_on(d: &Daemon) -> std::result::Result<(), String> {
    let Some(l) = &d.cfg.network.line else {
        return Ok(());
    };
    let mut state = LINE.lock().unwrap();
    let now = match tc(d, &["qdisc", "show", "dev", &l.uplink, "root"], None) {
        Err(e) if e.contains("Cannot find device") => LineState::Not(format!(
            "uplink {}: no such interface yet; governed when it comes",
            l.uplink
        )),
        Err(e) => return Err(format!("uplink {}: {e}", l.uplink)),
        Ok(show) => match shape::root_of(&show) {
            shape::Root::Foreign(k) => {
                let why = format!(
                    "uplink {}: its root qdisc is another shaper's ({k}), which berth does not replace: remove it, or [network] uplink",
                    l.uplink
                );
                *state = LineState::Not(why.clone());
                return Err(why);
            }
            // In force, as this daemon put it.
            shape::Root::Ours if *state == (LineState::On { put: true }) => return Ok(()),
            _ => {
                sh(d, &shape::line_script(l), &l.uplink)
                    .map_err(|e| format!("uplink {}: the line governor: {e}", l.uplink))?;
                LineState::On { put: true }
            }
        },
    };
    if let LineState::Not(why) = &now {
        if *state != now {
            log::warn!("network: {why}");
        }
    }
    *state = now;
    Ok(())
}

/// No container on berth's bridge any more: the governor comes off the uplink (the kernel
/// puts its default back); another's root qdisc is left alone.
pub(crate) fn line_off(d: &Daemon) {
    let Some(l) = &d.cfg.network.line else {
        return;
    };
    let mut state = LINE.lock().unwrap();
    if let Err(e) = sh(d, &shape::line_off_script(), &l.uplink) {
        if !e.contains("Cannot find device") {
            log::warn!(
                "network: uplink {}: taking the line governor off: {e}",
                l.uplink
            );
        }
    }
    *state = LineState::Off;
}

/// Every 10 s while containers are governed: a governor gone from the uplink (a PPPoE or
/// DHCP reconnect makes the interface anew; a tool removed the root qdisc) is put back,
/// said once; another shaper found there is reported, not fought.
pub(crate) fn watch_line(d: &std::sync::Arc<Daemon>) {
    if d.cfg.network.line.is_none() {
        return;
    }
    let d = std::sync::Arc::clone(d);
    let spawned = berth_sys::process::spawn_thread(
        "line".into(),
        64 * 1024,
        Box::new(move || loop {
            std::thread::sleep(std::time::Duration::from_secs(10));
            let was = LINE.lock().unwrap().clone();
            if was == LineState::Off {
                continue;
            }
            // Seen as ours, and still so: nothing to do.
            let l = d.cfg.network.line.as_ref().unwrap();
            if let (LineState::On { .. }, Ok(show)) = (
                &was,
                tc(&d, &["qdisc", "show", "dev", &l.uplink, "root"], None),
            ) {
                if shape::root_of(&show) == shape::Root::Ours {
                    continue;
                }
                *LINE.lock().unwrap() = LineState::Not("gone".into());
            }
            match line_on(&d) {
                Ok(()) if matches!(*LINE.lock().unwrap(), LineState::On { .. }) => log::info!(
                    "network: uplink {}: the line governor was gone (the link made anew, or its qdisc removed): put back",
                    l.uplink
                ),
                Ok(()) => {}
                Err(e) if LineState::Not(e.clone()) != was => log::error!("network: {e}"),
                Err(_) => {}
            }
        }),
    );
    if let Err(e) = spawned {
        log::error!("network: cannot start the line governor's watch: {e}");
    }
}

/// `berth net`'s `line`: the uplink, its rates and whether the governor holds it.
pub(crate) fn line_status(d: &Daemon) -> serde_json::Value {
    let Some(l) = &d.cfg.network.line else {
        return serde_json::Value::Null;
    };
    let state = match &*LINE.lock().unwrap() {
        LineState::Off => "off: no container on berth's bridge".to_string(),
        LineState::On { .. } => "in force".to_string(),
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
