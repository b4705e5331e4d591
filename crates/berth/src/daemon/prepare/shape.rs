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
