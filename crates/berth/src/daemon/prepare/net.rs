//! Networking, the apply side: the bridge (`ip`), berth's nftables tables (`nft -f -`, one
//! transaction per change), address leases (`<state>/net/leases.json`, written atomically),
//! resolv.conf, and the `lxc.net.0.*` keys of a container. The plans are `berth_core::net`.
//!
//! Nothing here runs unless a container asks for isolated or macvlan networking, or leases
//! exist at daemon start: a device whose packages use `none` or `shared` keeps its network
//! exactly as it was.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use crate::logger::warn_once;

use berth_core::api::{hosts as host_field, net as field};
use berth_core::lan;
use berth_core::manifest::NetMode;
use berth_core::net::{self, ConnLimits, Leases, Member, NetConfig};
use berth_core::state::{Installed, State};
use berth_sys::fsutil::write_atomic;
use serde_json::{json, Value};

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
#[cfg(feature = "shape")]
use crate::daemon::prepare::{datacap, shape};

fn leases_file(d: &Daemon) -> PathBuf {
    d.cfg.paths.state.join("net/leases")
}

fn resolv_file(d: &Daemon, name: &str) -> PathBuf {
    d.cfg
        .paths
        .run
        .join("net")
        .join(format!("{name}.resolv.conf"))
}

pub fn load_leases(d: &Daemon) -> Leases {
    net::parse_leases(&std::fs::read_to_string(leases_file(d)).unwrap_or_default())
}

fn save_leases(d: &Daemon, l: &Leases) -> Result<()> {
    let f = leases_file(d);
    if let Some(p) = f.parent() {
        std::fs::create_dir_all(p).map_err(Error::internal)?;
    }
    write_atomic(&f, net::format_leases(l).as_bytes(), 0o600)
        .map_err(|e| Error::internal(format!("{}: {e}", f.display())))
}

fn net_err(m: String) -> Error {
    Error::new(Kind::Network, m)
}

/// Runs `ip`/`nft`/`dnsmasq` through the host's tools, feeding `input`: stdout, or an
/// error naming the command.
fn run(d: &Daemon, prog: &str, args: &[&str], input: Option<&str>) -> Result<String, String> {
    berth_sys::host::run_checked(d.host.tools, prog, args, input, berth_sys::host::TOOL_LIMIT)
        .map_err(String::from)
}

/// The host's IPv4 routes other than the bridge's own: (prefix, device).
type Route = ((Ipv4Addr, u8), String);

fn host_routes(d: &Daemon, bridge: &str) -> Result<Vec<Route>, String> {
    let text = run(
        d,
        "ip",
        &["-4", "-o", "route", "show", "table", "all"],
        None,
    )?;
    let mut out = Vec::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let Some(dst) = f.first() else { continue };
        let dev = f
            .iter()
            .position(|w| *w == "dev")
            .and_then(|i| f.get(i + 1))
            .unwrap_or(&"");
        let pfx = if dst.contains('/') {
            net::parse_cidr(dst)
        } else {
            dst.parse().ok().map(|a| (a, 32))
        };
        // default routes, broadcast/local entries of the bridge, unparsable types: skip
        if let Some(p) = pfx {
            if *dev != bridge && p.1 > 0 {
                out.push((p, dev.to_string()));
            }
        }
    }
    Ok(out)
}

/// Creates the bridge with the gateway address (once), and lets the device forward.
fn ensure_bridge(d: &Daemon) -> Result<(), String> {
    let c = &d.cfg.network;
    let exists = run(d, "ip", &["-o", "link", "show", "dev", &c.bridge], None).is_ok();
    if !exists {
        let mine = c.subnet;
        if let Some((p, dev)) = host_routes(d, &c.bridge)?
            .into_iter()
            .find(|(p, _)| net::overlaps(*p, mine))
        {
            return Err(format!(
                "[network] subnet {}/{} overlaps the host's route {}/{} on {dev}: choose another subnet in berth.toml",
                mine.0, mine.1, p.0, p.1
            ));
        }
        run(d, "ip", &["link", "add", &c.bridge, "type", "bridge"], None)?;
    }
    let gw = format!("{}/{}", c.gateway(), c.subnet.1);
    run(d, "ip", &["addr", "replace", &gw, "dev", &c.bridge], None)?;
    run(d, "ip", &["link", "set", &c.bridge, "up"], None)?;
    // Per network namespace: this is the device's own forwarding switch, which NAT needs.
    let forward = d.proc().join("sys/net/ipv4/ip_forward");
    std::fs::write(&forward, "1")
        .map_err(|e| format!("enable IPv4 forwarding ({}): {e}", forward.display()))
}

fn members<'a>(st: &'a State, leases: &Leases) -> Vec<Member<'a>> {
    leases
        .iter()
        .filter_map(|(n, ip)| {
            let p = st
                .packages
                .get(n)
                .filter(|p| p.manifest.network.mode == NetMode::Isolated)?;
            Some(Member {
                name: p.name.as_str(),
                ip: *ip,
                publish: &p.manifest.network.publish,
                dhcp: p.manifest.network.dhcp,
                #[cfg(feature = "shape")]
                quota: None,
            })
        })
        .collect()
}

/// A hash of the ruleset this daemon asked for last, and got (or, where the kernel refused
/// the connection limits, got without them): a restart of a container whose rules are
/// already in force skips the reload (and keeps its counters and its rate's bucket).
static LOADED: std::sync::Mutex<u64> = std::sync::Mutex::new(0);

/// Said once each: the kernel refused the containers' caps (no nft `ct count`: no
/// nft_connlimit), their rate (no `limit`), or both.
static NO_CAP: [AtomicBool; 3] = [
    AtomicBool::new(false),
    AtomicBool::new(false),
    AtomicBool::new(false),
];

/// The ruleset for `leases` ([`load`]), and the uplink's governor with it (feature `shape`).
#[cfg(feature = "shape")]
fn apply(d: &Daemon, st: &State, leases: &Leases) -> Result<(), String> {
    // The uplink's governor before the rules that file packets into it, off after them.
    let governed = !members(st, leases).is_empty();
    if governed {
        shape::line_on(d)?;
    }
    load(d, st, leases)?;
    if !governed {
        shape::line_off(d);
    }
    Ok(())
}

#[cfg(not(feature = "shape"))]
fn apply(d: &Daemon, st: &State, leases: &Leases) -> Result<(), String> {
    load(d, st, leases)
}

/// Loads the whole ruleset for `leases` in one nft transaction: on failure the previous
/// ruleset stays in force. Where the kernel refuses the containers' connection limits it
/// goes in without the caps (no nft `ct count`), else without the rate (no `limit`), else
/// without either, said once; every change of the ruleset tries them again, so that a
/// passing failure does not leave them off. A percentage cap whose table was unknown
/// (connection tracking loaded by this very ruleset) is resolved and loaded again at once.
fn load(d: &Daemon, st: &State, leases: &Leases) -> Result<(), String> {
    use std::hash::{Hash, Hasher};
    let c = &d.cfg.network;
    #[allow(unused_mut)]
    let mut m = members(st, leases);
    // Data caps: the hash sees the quotas' periods, not their counts, which go in after it.
    #[cfg(feature = "shape")]
    let (periods, counts) = datacap::fill(d, st, &mut m);
    let table = || {
        std::fs::read_to_string(d.proc().join("sys/net/netfilter/nf_conntrack_max"))
            .ok()
            .and_then(|t| t.trim().parse().ok())
    };
    let text = |limits| {
        if m.is_empty() {
            net::teardown(c)
        } else {
            net::ruleset(c, &m, limits)
        }
    };
    #[cfg(feature = "shape")]
    let counted = |t: String| berth_core::datacap::with_counts(t, &counts);
    #[cfg(not(feature = "shape"))]
    let counted = |t: String| t;
    let hash = |t: &str| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        t.hash(&mut h);
        #[cfg(feature = "shape")]
        periods.hash(&mut h);
        h.finish()
    };
    let mut loaded = LOADED.lock().unwrap();
    loop {
        let size = table();
        let limits = net::connection_limits(c, size);
        let t = text(limits);
        let want = hash(&t);
        let t = counted(t);
        if *loaded == want {
            #[cfg(feature = "shape")]
            datacap::confirm(d);
            return Ok(());
        }
        *loaded = 0;
        // Whether the ruleset went in without some limit, and whether the kernel refused it.
        let (mut partial, mut refused) = (false, false);
        if let Err(e) = run(d, "nft", &["-f", "-"], Some(&t)) {
            // Without the caps (no `ct count`: nft_connlimit, Linux 4.18), without the rate
            // (no `limit`), without either; nothing to leave out: the failure is the error.
            let mut tried = vec![limits];
            let mut fell_back = None;
            for f in [
                ConnLimits { cap: 0, ..limits },
                ConnLimits {
                    rate: None,
                    ..limits
                },
                ConnLimits::default(),
            ] {
                if tried.contains(&f) {
                    continue;
                }
                tried.push(f);
                if run(d, "nft", &["-f", "-"], Some(&counted(text(f)))).is_ok() {
                    fell_back = Some(f);
                    break;
                }
            }
            let Some(f) = fell_back else {
                return Err(e);
            };
            partial = true;
            // What was asked for and did not go in.
            let no_cap = limits.cap > 0 && f.cap == 0;
            let no_rate = limits.rate.is_some() && f.rate.is_none();
            let (kind, what) = match (no_cap, no_rate) {
                (true, false) if f.rate.is_some() => (
                    0,
                    "no cap on containers' connections (their rate is limited)",
                ),
                (true, false) => (0, "no cap on containers' connections"),
                (false, true) if f.cap > 0 => (
                    1,
                    "no rate limit on containers' new connections (their number is capped)",
                ),
                (false, true) => (1, "no rate limit on containers' new connections"),
                _ => (2, "no cap or rate limit on containers' connections"),
            };
            // nft's words for an expression the kernel has not (no such module, or not
            // supported): that stays so, and is said once. Anything else (memory, netlink)
            // may pass: said each time, and the whole ruleset is tried again next time.
            refused = e.contains("No such file or directory") || e.contains("not supported");
            if refused {
                warn_once(&NO_CAP[kind], format_args!("network: {what}: {e}"));
            } else {
                log::warn!("network: {what} for now: {e}");
            }
        }
        // What was asked for, whether it went in whole or without the limits the kernel
        // refused: the same ruleset asked for again is not reloaded. A fallback for another
        // failure is not kept: the next load tries the whole again.
        *loaded = if partial && !refused { 0 } else { want };
        // The quotas went in with their counts.
        #[cfg(feature = "shape")]
        datacap::confirm(d);
        // A table not there before this load (connection tracking loaded by it): now there,
        // a percentage cap goes in at once.
        if size.is_some() || c.max_connections.is_none() || table().is_none() {
            return Ok(());
        }
    }
}

/// The container's address in its mode's pool, persisted before it is used: (address, the
/// lease it had before this start).
fn lease(d: &Daemon, name: &str, mode: NetMode) -> Result<(Ipv4Addr, Option<Ipv4Addr>)> {
    let mut leases = load_leases(d);
    let had = net::lease_of(&leases, name);
    let ip = net::allocate(&d.cfg.network, &mut leases, name, mode)
        .map_err(|e| Error::new(Kind::PoolExhausted, e.to_string()))?;
    if had != Some(ip) {
        save_leases(d, &leases)?;
    }
    Ok((ip, had))
}

/// Before a start: the policy's cap on the mode, then (isolated) the lease, the bridge and
/// the ruleset, (macvlan) the parent. Returns the LXC lines to append to the configuration.
pub fn prepare(d: &Daemon, p: &Installed, st: &State, rootfs: &Path) -> Result<String> {
    let c = &d.cfg.network;
    let name = p.name.as_str();
    let mode = p.manifest.network.mode;
    net::check_mode(c, name, mode).map_err(|e| Error::new(Kind::Refused, e.to_string()))?;
    #[cfg(feature = "shape")]
    let caps = shape::caps_of(d, p);
    #[cfg(feature = "shape")]
    shape::check(name, mode, caps)?;
    let keys = match mode {
        NetMode::None | NetMode::Shared => return Ok(String::new()),
        NetMode::Macvlan => {
            let parent = c.macvlan_parent.as_deref().ok_or_else(|| {
                Error::new(
                    Kind::Refused,
                    format!(
                        "{name}: network mode macvlan needs [network] macvlan_parent in berth.toml"
                    ),
                )
            })?;
            let link =
                run(d, "ip", &["-o", "link", "show", "dev", parent], None).map_err(|_| {
                    net_err(format!(
                        "{name}: macvlan parent interface {parent} does not exist"
                    ))
                })?;
            let flags = link.split(['<', '>']).nth(1).unwrap_or("");
            if !flags.split(',').any(|f| f == "UP") {
                return Err(net_err(format!(
                    "{name}: macvlan parent interface {parent} is down"
                )));
            }
            // With a pool: a static address (and MAC) of the device's choosing, persisted like
            // an isolated lease, so the package needs no capability to address itself.
            let ip = match c.macvlan_pool {
                None => None,
                Some(_) => Some(lease(d, name, mode)?.0),
            };
            net::lxc_macvlan(c, parent, ip)
        }
        NetMode::Isolated => {
            let leases = load_leases(d);
            let others: Vec<(String, Vec<_>)> = leases
                .iter()
                .filter_map(|(n, _)| st.packages.get(n))
                .map(|o| (o.name.to_string(), o.manifest.network.publish.clone()))
                .collect();
            net::check_ports(name, &p.manifest.network.publish, &others)
                .map_err(|e| Error::new(Kind::PortTaken, e.to_string()))?;
            let (ip, had) = lease(d, name, mode)?;
            let mut leases = load_leases(d);
            if let Err(e) = ensure_bridge(d)
                .and_then(|_| apply(d, st, &leases))
                .and_then(|_| sync_dhcp(d, st, &leases))
            {
                if had != Some(ip) {
                    leases.retain(|(n, _)| n != name);
                    let _ = save_leases(d, &leases);
                    // the ruleset may already hold its rules (a DHCP server that failed)
                    let _ = apply(d, st, &leases);
                }
                return Err(net_err(format!("{name}: {e}")));
            }
            let script = d.cfg.paths.run.join("net/veth-up");
            let _ = std::fs::create_dir_all(d.cfg.paths.run.join("net"));
            berth_sys::fsutil::write_volatile(&script, net::veth_up_script(c).as_bytes(), 0o755)
                .map_err(|e| Error::internal(format!("{}: {e}", script.display())))?;
            #[cfg(feature = "shape")]
            let (script, down) = shape::scripts(d, name, ip, caps, script)?;
            #[cfg(feature = "shape")]
            let keys = {
                let mut keys = net::lxc_isolated(c, ip, &script.display().to_string());
                keys.push(("lxc.net.0.script.down", down.display().to_string()));
                keys
            };
            #[cfg(not(feature = "shape"))]
            let keys = net::lxc_isolated(c, ip, &script.display().to_string());
            keys
        }
    };
    let mut out: String = keys.iter().map(|(k, v)| format!("{k} = {v}\n")).collect();
    // DNS: a resolv.conf of our own over the image's, when the image has one to cover.
    if std::fs::symlink_metadata(rootfs.join("etc/resolv.conf")).is_ok_and(|m| m.is_file()) {
        let f = resolv_file(d, name);
        let servers = dns_servers(c);
        let text: String = servers
            .iter()
            .map(|s| format!("nameserver {s}\n"))
            .collect();
        let _ = std::fs::create_dir_all(f.parent().unwrap_or(Path::new("/")));
        berth_sys::fsutil::write_volatile(&f, text.as_bytes(), 0o644).map_err(Error::internal)?;
        out.push_str(&format!(
            "lxc.mount.entry = {} etc/resolv.conf none bind,ro,nosuid,nodev 0 0\n",
            f.display()
        ));
    }
    Ok(out)
}

/// Name servers for containers: the policy's, else the host's own (but loopback ones).
fn dns_servers(c: &NetConfig) -> Vec<String> {
    if c.dns.is_empty() {
        std::fs::read_to_string("/etc/resolv.conf")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("nameserver"))
            .map(|s| s.trim().to_string())
            .filter(|s| s.parse::<Ipv4Addr>().is_ok_and(|a| !a.is_loopback()))
            .collect()
    } else {
        c.dns.iter().map(Ipv4Addr::to_string).collect()
    }
}

fn dnsmasq_pid_file(d: &Daemon) -> PathBuf {
    d.cfg.paths.run.join("net/dnsmasq.pid")
}

/// berth's dnsmasq, if running: its pid and arguments (the pid file's process, checked to be
/// a dnsmasq using that very pid file, so a reused pid is never signalled).
fn dnsmasq_running(proc: &Path, pid_file: &Path) -> Option<(i32, Vec<String>)> {
    let pid: i32 = std::fs::read_to_string(pid_file)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let cmdline = std::fs::read(proc.join(format!("{pid}/cmdline"))).ok()?;
    let mut args = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned());
    let prog = args.next()?;
    let args: Vec<String> = args.collect();
    let mine = format!("--pid-file={}", pid_file.display());
    (prog.ends_with("dnsmasq") && args.contains(&mine)).then_some((pid, args))
}

/// Keeps berth's DHCP server in step with the containers whose package asked for DHCP:
/// started for the first, restarted with the new set on a change, stopped after the last.
fn sync_dhcp(d: &Daemon, st: &State, leases: &Leases) -> Result<(), String> {
    let c = &d.cfg.network;
    let m = members(st, leases);
    let pid_file = dnsmasq_pid_file(d);
    let running = dnsmasq_running(d.proc(), &pid_file);
    let want = m
        .iter()
        .any(|m| m.dhcp)
        .then(|| net::dnsmasq_args(c, &m, &pid_file.display().to_string(), &dns_servers(c)));
    if let (Some((_, have)), Some(want)) = (&running, &want) {
        if have == want {
            return Ok(());
        }
    }
    if let Some((pid, _)) = running {
        // A pid checked above to be berth's dnsmasq.
        let _ = d.host.signals.kill(pid, libc::SIGTERM);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while d.proc().join(pid.to_string()).exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = std::fs::remove_file(&pid_file);
    }
    let Some(want) = want else {
        return Ok(());
    };
    let _ = std::fs::create_dir_all(d.cfg.paths.run.join("net"));
    let args: Vec<&str> = want.iter().map(String::as_str).collect();
    run(d, "dnsmasq", &args, None).map(|_| ())
}

/// After packages are removed: their leases go, the ruleset follows.
pub fn forget(d: &Daemon, st: &State, names: &[String]) {
    let mut leases = load_leases(d);
    let before = leases.len();
    #[cfg(feature = "shape")]
    for (_, ip) in leases.iter().filter(|(n, _)| names.contains(n)) {
        shape::forget(d, *ip);
    }
    leases.retain(|(n, _)| !names.contains(n));
    for n in names {
        let _ = std::fs::remove_file(resolv_file(d, n));
        #[cfg(feature = "shape")]
        datacap::forget(d, n);
        #[cfg(feature = "shape")]
        let _ = std::fs::remove_file(d.cfg.paths.run.join(format!("net/up-{n}")));
    }
    if leases.len() == before {
        return;
    }
    if let Err(e) = save_leases(d, &leases) {
        log::warn!("network leases: {e}");
    }
    if let Err(e) = apply(d, st, &leases).and_then(|_| sync_dhcp(d, st, &leases)) {
        log::warn!("network rules after removing {}: {e}", names.join(", "));
    }
}

/// Every minute: the data caps' look ([`datacap::look`]); at a period's end (or after a load
/// whose counts did not go in) the ruleset is loaded again, under the daemon's operation
/// lock, from the state as it is then.
#[cfg(feature = "shape")]
pub(crate) fn watch_usage(d: &std::sync::Arc<Daemon>) {
    let d = std::sync::Arc::clone(d);
    let spawned = berth_sys::process::spawn_thread(
        "usage".into(),
        // The whole load runs here (the state, the line governor, the ruleset, nft's answer):
        // the stack of the threads that run it otherwise.
        256 * 1024,
        Box::new(move || loop {
            std::thread::sleep(std::time::Duration::from_secs(datacap::LOOK_S));
            if datacap::look(&d, false) {
                let _op = d.op.lock().unwrap();
                reload(&d, "the data caps");
            }
        }),
    );
    if let Err(e) = spawned {
        log::error!("network: cannot start the data caps' count: {e}");
    }
}

/// The ruleset loaded again from the state as it is (`why` for the log, on failure).
#[cfg(feature = "shape")]
pub(crate) fn reload(d: &Daemon, why: &str) {
    let st = crate::daemon::device::state::state(d);
    let leases = load_leases(d);
    // No container on the bridge: only a teardown still to go in (it failed) is loaded.
    if members(&st, &leases).is_empty() && !datacap::waiting(d) {
        return;
    }
    if let Err(e) = apply(d, &st, &leases) {
        log::error!("network: loading the ruleset for {why}: {e}");
    }
}

/// `berth net metered on|off`: the switch kept, the ruleset loaded again with the caps it
/// gives (under the daemon's operation lock, as a start's load is).
#[cfg(feature = "shape")]
pub(crate) fn set_metered(d: &Daemon, on: bool) -> Result<Value> {
    let _op = d.op.lock().unwrap();
    datacap::set_metered(d, on).map_err(|e| {
        Error::new(
            Kind::Internal,
            format!(
                "the metered switch ({}): {e}",
                d.cfg.paths.state.join("net/metered").display()
            ),
        )
    })?;
    let st = crate::daemon::device::state::state(d);
    let leases = load_leases(d);
    if !members(&st, &leases).is_empty() {
        apply(d, &st, &leases).map_err(net_err)?;
    }
    log::info!(
        "network: the line is {}metered",
        if on { "" } else { "not " }
    );
    Ok(json!({ "metered": on }))
}

/// Whether containers are on berth's bridge (isolated leases of installed packages).
#[cfg(feature = "shape")]
pub fn bridged(d: &Daemon, st: &State) -> bool {
    !members(st, &load_leases(d)).is_empty()
}

/// Daemon start: rebuild the bridge and ruleset from the leases, so a restarted daemon (or
/// a rebooted device) enforces exactly what the state says.
pub fn restore(d: &Daemon, st: &State) {
    let leases = load_leases(d);
    // macvlan leases need no bridge and no ruleset
    if members(st, &leases).is_empty() {
        return;
    }
    if let Err(e) = ensure_bridge(d)
        .and_then(|_| apply(d, st, &leases))
        .and_then(|_| sync_dhcp(d, st, &leases))
    {
        log::error!("network: restoring the ruleset: {e}");
    }
}

/// `berth net`: each container's mode, address, MAC, ports and drop counters.
/// One container's network: its mode, published ports, address and MAC (and with `counts`,
/// its veth and drop counters).
fn entry(
    d: &Daemon,
    leases: &Vec<(String, std::net::Ipv4Addr)>,
    p: &berth_core::state::Installed,
    counts: Option<&[(u32, u64, u64)]>,
) -> Value {
    let c = &d.cfg.network;
    let n = p.name.as_str();
    let mode = p.manifest.network.mode;
    let mut v = json!({field::NAME: n, field::MODE: net::mode_name(mode),
        field::PUBLISH: p.manifest.network.publish.iter().map(|q| format!("{}:{}/{}", q.host_port, q.container_port, net::proto_name(q.proto))).collect::<Vec<_>>()});
    #[cfg(feature = "shape")]
    {
        v[field::DATA] = datacap::usage_of(d, n);
    }
    if let (NetMode::Macvlan, Some(ip), Some((_, _, len))) =
        (mode, net::lease_of(leases, n), c.macvlan_pool)
    {
        v[field::IPV4] = json!(format!("{ip}/{len}"));
        v[field::MAC] = json!(net::mac_of(ip));
    }
    if let (NetMode::Isolated, Some(ip)) = (mode, net::lease_of(leases, n)) {
        v[field::IPV4] = json!(format!("{ip}/{}", c.subnet.1));
        v[field::MAC] = json!(net::mac_of(ip));
        if let Some(counts) = counts {
            let (_, s, dn) = counts
                .iter()
                .find(|e| e.0 == net::index_of(c, ip))
                .copied()
                .unwrap_or_default();
            v[field::VETH] = json!(net::veth_of(ip));
            v[field::DHCP] = json!(p.manifest.network.dhcp);
            v[field::DROPPED_SPOOFED] = json!(s);
            v[field::DROPPED_DENIED] = json!(dn);
        }
    }
    v
}

/// One container's network as its own `GET /v1/self` shows it: mode, published ports,
/// address and MAC (no counters: nothing is asked of nft).
pub fn of(d: &Daemon, p: &berth_core::state::Installed) -> Value {
    entry(d, &load_leases(d), p, None)
}

pub fn status(d: &Daemon, st: &State) -> Result<Value> {
    let c = &d.cfg.network;
    let leases = load_leases(d);
    let mut counts = Vec::new();
    let mut errors = Vec::new();
    // The data caps' counts as the kernel has them now.
    #[cfg(feature = "shape")]
    datacap::look(d, false);
    if !members(st, &leases).is_empty() {
        for fam in ["bridge", "inet"] {
            match run(
                d,
                "nft",
                &["-j", "list", "counters", "table", fam, &c.table],
                None,
            ) {
                Ok(text) => net::add_counters(
                    &serde_json::from_str(&text).unwrap_or(Value::Null),
                    &mut counts,
                ),
                Err(e) => errors.push(e),
            }
        }
    }
    let list: Vec<Value> = st
        .packages
        .values()
        .map(|p| entry(d, &leases, p, Some(&counts)))
        .collect();
    #[allow(unused_mut)]
    let mut v = json!({
        field::BRIDGE: c.bridge,
        field::GATEWAY: c.gateway().to_string(),
        field::SUBNET: format!("{}/{}", c.subnet.0, c.subnet.1),
        field::TABLE: c.table,
        field::DHCP_SERVER: dnsmasq_running(d.proc(), &dnsmasq_pid_file(d)).map(|(pid, _)| pid),
        field::CONTAINERS: list,
        field::ERRORS: errors,
    });
    #[cfg(feature = "shape")]
    {
        v["line"] = shape::line_status(d);
        v["metered"] = json!(datacap::metered(d));
    }
    Ok(v)
}

/// `berth net hosts` and the container API's `GET /v1/lan/hosts`: the neighbours on the
/// LAN's interfaces (`[network] lan`), named by the DHCP servers' files or by mDNS, sorted by
/// interface then address. Not inlined into the API's router, whose size it would grow by
/// more than its own (about 400 bytes more in the device build).
#[inline(never)]
pub fn hosts(d: &Daemon) -> Value {
    let c = &d.cfg.network;
    let mut hosts = neighbours(d);
    hosts.retain(|h| c.is_lan(&h.dev));
    let mut names = Vec::new();
    for f in &c.dhcp_leases {
        lan::dhcp_names(&std::fs::read_to_string(f).unwrap_or_default(), &mut names);
    }
    lan::name_from_dhcp(&mut hosts, &names);
    #[cfg(feature = "mdns")]
    if c.mdns {
        super::mdns::name_hosts(&mut hosts);
        lan::share_names(&mut hosts);
    }
    lan::sort(&mut hosts);
    let (now, hz) = (berth_sys::process::now_s(), berth_sys::net::clock_ticks());
    let list: Vec<Value> = hosts
        .into_iter()
        .map(|h| {
            let age = h.ticks.map(|t| u64::from(t / hz));
            // one loop over the fields: smaller than json!'s insert per field
            let fields = [
                (host_field::IP, Value::from(h.ip.to_string())),
                (host_field::MAC, h.mac.into()),
                (host_field::DEV, h.dev.into()),
                (host_field::HOSTNAME, h.hostname.into()),
                (host_field::HOSTNAME_SOURCE, h.source.into()),
                (host_field::STATE, h.state.into()),
                (
                    host_field::LAST_SEEN,
                    age.map(|a| now.saturating_sub(a)).into(),
                ),
                (host_field::AGE_S, age.into()),
            ];
            // (not collect(): a BTreeMap from an iterator sorts, with 4 KB of sort code)
            let mut m = serde_json::Map::new();
            for (k, v) in fields {
                m.insert(k.into(), v);
            }
            Value::Object(m)
        })
        .collect();
    let mut m = serde_json::Map::new();
    m.insert(host_field::HOSTS.into(), Value::Array(list));
    Value::Object(m)
}

/// The kernel's neighbour table by rtnetlink, or from /proc/net/arp where that fails (old
/// or odd kernels; `BERTH_FAULT=netlink.absent` in the tests): no state but permanent, no
/// age.
fn neighbours(d: &Daemon) -> Vec<lan::Host> {
    let netlink = || -> std::io::Result<Vec<lan::Host>> {
        if crate::hooks::active("netlink.absent") {
            return Err(std::io::Error::from_raw_os_error(libc::EPROTONOSUPPORT));
        }
        let seq = berth_sys::process::now_s() as u32;
        let mut hosts = Vec::new();
        berth_sys::net::dump(&lan::neigh_request(seq), |b| {
            lan::parse_neigh(b, seq, &mut hosts).map_err(|e| match e {
                lan::LanError::Kernel(n) => std::io::Error::from_raw_os_error(n),
                lan::LanError::Malformed => std::io::ErrorKind::InvalidData.into(),
            })
        })?;
        let mut last = (0, String::new());
        for h in &mut hosts {
            if last.0 != h.ifindex {
                last = (
                    h.ifindex,
                    berth_sys::net::ifname(h.ifindex).unwrap_or_default(),
                );
            }
            h.dev.clone_from(&last.1);
        }
        Ok(hosts)
    };
    netlink().unwrap_or_else(|e| {
        static SAID: AtomicBool = AtomicBool::new(false);
        warn_once(
            &SAID,
            format_args!("LAN hosts: the neighbour table by netlink: {e}; reading /proc/net/arp"),
        );
        lan::parse_proc_arp(&std::fs::read_to_string(d.proc().join("net/arp")).unwrap_or_default())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::testing::{fake_daemon, fakes, install, MANIFEST};
    use berth_testkit::fake_host::FakeTools;
    use berth_testkit::TempDir;

    fn networked(name: &str, network: &str) -> String {
        format!("[package]\nname = \"{name}\"\nversion = \"1.0\"\n[entrypoint]\nargv = [\"/bin/{name}\"]\n[network]\n{network}")
    }

    /// Leases are kept atomically in the state and read back; a damaged line is no lease;
    /// leases that cannot be written are an error naming the file.
    #[test]
    fn leases_read_back_as_saved_and_a_write_failure_names_the_file() {
        let (_dir, d, _) = fake_daemon("net-leases", "");
        assert!(load_leases(&d).is_empty());
        let l: Leases = vec![
            ("web".into(), Ipv4Addr::new(10, 99, 0, 2)),
            ("db".into(), Ipv4Addr::new(10, 99, 0, 3)),
        ];
        save_leases(&d, &l).unwrap();
        assert_eq!(load_leases(&d), l);
        std::fs::write(leases_file(&d), "web 10.99.0.2\nbroken\ndb not-an-ip\n").unwrap();
        assert_eq!(
            load_leases(&d),
            [("web".to_string(), Ipv4Addr::new(10, 99, 0, 2))]
        );
        std::fs::remove_file(leases_file(&d)).unwrap();
        std::fs::create_dir_all(leases_file(&d).join("x")).unwrap();
        let e = save_leases(&d, &l).unwrap_err();
        assert_eq!(e.kind, Kind::Internal);
        assert!(
            e.message
                .starts_with(&leases_file(&d).display().to_string()),
            "{}",
            e.message
        );
    }

    /// Modes that need nothing of the host add no LXC lines; what the policy or the
    /// configuration refuses is refused before any command runs; a published port another
    /// container holds is refused naming it (no lease taken).
    #[test]
    fn prepare_refuses_a_denied_mode_a_missing_macvlan_parent_and_a_port_taken() {
        let (dir, d, _) = fake_daemon("net-prepare", "");
        let rootfs = dir.path("rootfs");
        let web = install(&d, MANIFEST);
        let st = crate::daemon::device::state::state(&d);
        assert_eq!(prepare(&d, &web, &st, &rootfs).unwrap(), "");
        let shared = install(&d, &networked("sh", "mode = \"shared\"\n"));
        assert_eq!(prepare(&d, &shared, &st, &rootfs).unwrap(), "");

        let mv = install(&d, &networked("mv", "mode = \"macvlan\"\n"));
        let e = prepare(&d, &mv, &st, &rootfs).unwrap_err();
        assert_eq!(e.kind, Kind::Refused);
        assert_eq!(
            e.message,
            "mv: network mode macvlan needs [network] macvlan_parent in berth.toml"
        );

        let (_dir2, strict, _) = fake_daemon("net-strict", "[network]\nmodes = \"none\"\n");
        let sh = install(&strict, &networked("sh", "mode = \"shared\"\n"));
        let e = prepare(
            &strict,
            &sh,
            &crate::daemon::device::state::state(&strict),
            &rootfs,
        )
        .unwrap_err();
        assert_eq!(e.kind, Kind::Refused);
        assert!(
            e.message
                .starts_with("sh: network mode shared is not allowed"),
            "{}",
            e.message
        );

        install(
            &d,
            &networked("db", "mode = \"isolated\"\npublish = [\"8080:80/tcp\"]\n"),
        );
        let a = install(
            &d,
            &networked(
                "app",
                "mode = \"isolated\"\npublish = [\"8080:8000/tcp\"]\n",
            ),
        );
        save_leases(&d, &vec![("db".into(), Ipv4Addr::new(10, 99, 0, 2))]).unwrap();
        let st = crate::daemon::device::state::state(&d);
        let e = prepare(&d, &a, &st, &rootfs).unwrap_err();
        assert_eq!(e.kind, Kind::PortTaken);
        assert!(
            e.message.contains("8080") && e.message.contains("db"),
            "{}",
            e.message
        );
        assert_eq!(load_leases(&d).len(), 1, "no lease taken");
    }

    /// berth's dnsmasq is the pid file's process only when it is a dnsmasq using that very
    /// pid file (a reused pid is never taken for it).
    #[test]
    fn dnsmasq_is_recognised_by_its_pid_file_and_command_line() {
        let (_dir, d, _) = fake_daemon("net-dnsmasq", "");
        let pid_file = dnsmasq_pid_file(&d);
        assert_eq!(dnsmasq_running(d.proc(), &pid_file), None);
        std::fs::create_dir_all(pid_file.parent().unwrap()).unwrap();
        std::fs::write(&pid_file, "5150\n").unwrap();
        assert_eq!(
            dnsmasq_running(d.proc(), &pid_file),
            None,
            "no such process"
        );
        let cmdline = d.proc().join("5150/cmdline");
        std::fs::create_dir_all(cmdline.parent().unwrap()).unwrap();
        let mine = format!("--pid-file={}", pid_file.display());
        std::fs::write(
            &cmdline,
            format!("/usr/sbin/dnsmasq\0--keep-in-foreground\0{mine}\0"),
        )
        .unwrap();
        assert_eq!(
            dnsmasq_running(d.proc(), &pid_file),
            Some((5150, vec!["--keep-in-foreground".to_string(), mine.clone()]))
        );
        std::fs::write(&cmdline, format!("/bin/sleep\0{mine}\0")).unwrap();
        assert_eq!(
            dnsmasq_running(d.proc(), &pid_file),
            None,
            "another program"
        );
        std::fs::write(&cmdline, "/usr/sbin/dnsmasq\0--pid-file=/run/other.pid\0").unwrap();
        assert_eq!(
            dnsmasq_running(d.proc(), &pid_file),
            None,
            "another dnsmasq"
        );
    }

    /// A container's own view of its network: its mode and ports, and with a lease its
    /// address and MAC; a removed container's resolv.conf goes (its leases unchanged: no
    /// ruleset is loaded).
    #[test]
    fn a_containers_network_shows_its_lease_and_forget_drops_its_files() {
        let (_dir, d, _) = fake_daemon("net-of", "");
        let app = install(
            &d,
            &networked("app", "mode = \"isolated\"\npublish = [\"8080:80/tcp\"]\n"),
        );
        let v = of(&d, &app);
        assert_eq!(v[field::MODE], "isolated");
        assert_eq!(v[field::PUBLISH], serde_json::json!(["8080:80/tcp"]));
        assert_eq!(v[field::IPV4], Value::Null);
        let ip = d.cfg.network.gateway();
        let ip = Ipv4Addr::from(u32::from(ip) + 5);
        save_leases(&d, &vec![("app".into(), ip)]).unwrap();
        let v = of(&d, &app);
        assert_eq!(v[field::IPV4], format!("{ip}/{}", d.cfg.network.subnet.1));
        assert_eq!(v[field::MAC], net::mac_of(ip));
        assert_eq!(v[field::VETH], Value::Null, "no counters asked for");

        let resolv = resolv_file(&d, "gone");
        std::fs::create_dir_all(resolv.parent().unwrap()).unwrap();
        std::fs::write(&resolv, "nameserver 192.0.2.1\n").unwrap();
        let st = crate::daemon::device::state::state(&d);
        forget(&d, &st, &["gone".into()]);
        assert!(!resolv.exists());
        assert_eq!(load_leases(&d), [("app".to_string(), ip)]);
    }

    /// A daemon whose fixture /proc takes the forwarding switch, its fake tools answering
    /// `ip` and `nft` as a host with no bridge yet: `nft` loads, `ip` does what it is asked,
    /// the host's routes are a default one and its LAN's.
    fn networked_daemon(tag: &str, extra: &str) -> (TempDir, Daemon, &'static FakeTools) {
        let (dir, d, _) = fake_daemon(tag, extra);
        std::fs::create_dir_all(d.proc().join("sys/net/ipv4")).unwrap();
        let tools = fakes(&d).tools;
        tools.answer("ip", &[], Ok(String::new()));
        let no_link = Err("Device \"berth0\" does not exist.".to_string());
        tools.answer("ip", &["-o", "link", "show"], no_link);
        tools.answer(
            "ip",
            &["-4", "-o", "route"],
            Ok("default via 192.168.1.1 dev eth0\n192.168.1.0/24 dev eth0 proto kernel scope link src 192.168.1.2\n".into()),
        );
        tools.answer("nft", &["-f", "-"], Ok(String::new()));
        (dir, d, tools)
    }

    /// What `nft -f -` was fed, each load in order.
    fn loads(tools: &FakeTools) -> Vec<String> {
        let calls = tools.calls().into_iter().filter(|c| c.line() == "nft -f -");
        calls.map(|c| c.input.unwrap_or_default()).collect()
    }

    /// A daemon with one isolated package capped at 4 MiB a day (the policy's metered cap: 2
    /// MiB), started once: its quota loaded from zero.
    #[cfg(feature = "shape")]
    fn capped_daemon(tag: &str) -> (TempDir, Daemon, &'static FakeTools, Installed) {
        // A table of its own: the hash of the ruleset last loaded is the process's.
        let (dir, d, tools) = networked_daemon(
            tag,
            &format!(
                "[network]\ntable = \"bt_{}\"\n[policy]\nmetered_data_cap = \"2M/day\"\n",
                tag.replace('-', "_")
            ),
        );
        tools.answer(
            "nft",
            &["-j", "list", "quotas"],
            Err("No such file or directory".into()),
        );
        let app = install(
            &d,
            &(networked("app", "mode = \"isolated\"\n") + "[resources]\ndata_cap = \"4M/day\"\n"),
        );
        let st = crate::daemon::device::state::state(&d);
        prepare(&d, &app, &st, &dir.path("rootfs")).unwrap();
        let rules = loads(tools).pop().unwrap();
        assert!(
            rules.contains("  quota q_2 { over 4194304 bytes used 0 bytes }\n"),
            "{rules}"
        );
        (dir, d, tools, app)
    }

    /// nft's answer to `list quotas` with q_2 having counted `used`.
    #[cfg(feature = "shape")]
    fn quotas(used: u64) -> std::result::Result<String, String> {
        Ok(format!(
            r#"{{"nftables": [{{"quota": {{"family": "inet", "name": "q_2", "table": "bt_cap", "bytes": 4194304, "used": {used}, "inv": true}}}}]}}"#
        ))
    }

    /// The count kept on flash for `app`.
    #[cfg(feature = "shape")]
    fn kept(d: &Daemon) -> u64 {
        berth_core::datacap::Usage::parse(
            &std::fs::read_to_string(d.cfg.paths.state.join("usage/app")).unwrap(),
        )
        .unwrap()
        .used
    }

    /// A capped container's quota goes in with the count kept for it; looks take the kernel's
    /// count (what it refused beyond the cap not counted) and write it where it moved; the
    /// metered switch loads the policy's smaller cap with the count (the kernel takes no more
    /// than the cap); a new period starts from zero.
    #[cfg(feature = "shape")]
    #[test]
    fn a_data_cap_is_loaded_with_its_count_and_the_count_kept() {
        use crate::daemon::prepare::datacap;
        const MIB: u64 = 1 << 20;
        let (dir, d, tools, app) = capped_daemon("net-cap");
        let kept = || kept(&d);
        assert_eq!(kept(), 0);
        // 3 MiB counted: written (it moved a MiB or more).
        tools.answer("nft", &["-j", "list", "quotas"], quotas(3 * MIB));
        assert!(!datacap::look(&d, false));
        assert_eq!(datacap::usage_of(&d, "app")["used"], 3 * MIB);
        assert_eq!(kept(), 3 * MIB);
        // A little more: known, not written.
        tools.answer("nft", &["-j", "list", "quotas"], quotas(3 * MIB + 5000));
        datacap::look(&d, false);
        assert_eq!(datacap::usage_of(&d, "app")["used"], 3 * MIB + 5000);
        assert_eq!(kept(), 3 * MIB);
        // Beyond the cap the kernel counts what it refused: the cap is what passed.
        tools.answer("nft", &["-j", "list", "quotas"], quotas(5 * MIB));
        datacap::look(&d, false);
        let u = datacap::usage_of(&d, "app");
        assert_eq!(
            (u["used"].as_u64(), u["over"].as_bool()),
            (Some(4 * MIB), Some(true)),
            "{u}"
        );
        assert_eq!(u["notice"]["status"], 429, "{u}");
        assert_eq!(kept(), 4 * MIB);
        // Metered: the policy's 2 MiB, loaded with the count as the cap.
        set_metered(&d, true).unwrap();
        let rules = loads(tools).pop().unwrap();
        assert!(
            rules.contains("  quota q_2 { over 2097152 bytes used 2097152 bytes }\n"),
            "{rules}"
        );
        let u = datacap::usage_of(&d, "app");
        assert_eq!(
            (u["cap"].as_u64(), u["used"].as_u64()),
            (Some(2 * MIB), Some(4 * MIB)),
            "{u}"
        );
        // The same state asked again: no reload, though the count moves.
        let before = loads(tools).len();
        tools.answer("nft", &["-j", "list", "quotas"], quotas(2 * MIB + 70_000));
        prepare(
            &d,
            &app,
            &crate::daemon::device::state::state(&d),
            &dir.path("rootfs"),
        )
        .unwrap();
        assert_eq!(loads(tools).len(), before);
        assert_eq!(datacap::usage_of(&d, "app")["used"], 4 * MIB);
        // A period that ended (the count on flash is of an earlier day; a daemon that starts
        // anew): the count starts at zero, written, and the ruleset is loaded again.
        std::fs::write(
            d.cfg.paths.state.join("usage/app"),
            "{\"period\":20000,\"used\":3000000}\n",
        )
        .unwrap();
        *d.usage.lock().unwrap() = Default::default();
        set_metered(&d, false).unwrap();
        let rules = loads(tools).pop().unwrap();
        assert!(
            rules.contains("  quota q_2 { over 4194304 bytes used 0 bytes }\n"),
            "{rules}"
        );
        assert_eq!(kept(), 0);
        let u = datacap::usage_of(&d, "app");
        assert!(u["since"].as_str().unwrap() > "2024-10-04", "{u}");
    }

    /// A load that fails neither carries an old period's count into a new one (nor puts its
    /// records on flash), nor stops the count of the records in force; each look asks for it
    /// again; a removal drops the count.
    #[cfg(feature = "shape")]
    #[test]
    fn a_failed_load_keeps_counting_what_is_in_force_and_is_tried_again() {
        use crate::daemon::prepare::datacap;
        const MIB: u64 = 1 << 20;
        let (_dir, d, tools, _app) = capped_daemon("net-cap-fail");
        let kept = || kept(&d);
        // A new period whose load fails: the kernel's quota still counts the old one (here
        // over its cap). Its count is not carried into the new period, and each look asks
        // for the load again until it goes in.
        tools.answer("nft", &["-j", "list", "quotas"], quotas(4 * MIB));
        datacap::look(&d, true);
        std::fs::write(
            d.cfg.paths.state.join("usage/app"),
            "{\"period\":20000,\"ends\":20001,\"used\":4194304}\n",
        )
        .unwrap();
        *d.usage.lock().unwrap() = Default::default();
        tools.answer(
            "nft",
            &["-f", "-"],
            Err("netlink: Error: out of memory".into()),
        );
        // (Metered, so that the ruleset differs from the one in force and is loaded.)
        assert!(set_metered(&d, true).is_err());
        assert!(datacap::look(&d, false), "the load is to be tried again");
        // Nothing of the new period is in force, nor on flash (a restart now would find the
        // old period there, ended: a count from zero, not the kernel's).
        assert_eq!(datacap::usage_of(&d, "app"), Value::Null);
        assert_eq!(kept(), 4 * MIB);
        tools.answer("nft", &["-f", "-"], Ok(String::new()));
        reload(&d, "the test");
        let rules = loads(tools).pop().unwrap();
        assert!(
            rules.contains("  quota q_2 { over 2097152 bytes used 0 bytes }\n"),
            "{rules}"
        );
        assert_eq!(kept(), 0);
        tools.answer("nft", &["-j", "list", "quotas"], quotas(0));
        assert!(!datacap::look(&d, false));
        // A load that fails while records are in force: they go on being counted (the
        // kernel's quotas are theirs), and the next load carries what they counted.
        tools.answer("nft", &["-j", "list", "quotas"], quotas(MIB));
        tools.answer(
            "nft",
            &["-f", "-"],
            Err("netlink: Error: out of memory".into()),
        );
        assert!(set_metered(&d, false).is_err());
        assert!(datacap::look(&d, false));
        let u = datacap::usage_of(&d, "app");
        assert_eq!(
            (u["used"].as_u64(), u["cap"].as_u64()),
            (Some(MIB), Some(2 * MIB)),
            "{u}"
        );
        tools.answer("nft", &["-f", "-"], Ok(String::new()));
        reload(&d, "the test");
        let rules = loads(tools).pop().unwrap();
        assert!(
            rules.contains("  quota q_2 { over 4194304 bytes used 1048576 bytes }\n"),
            "{rules}"
        );
        tools.answer("nft", &["-j", "list", "quotas"], quotas(MIB));
        assert!(!datacap::look(&d, false));
        // A daemon that starts anew finds a quota that counted, beyond the cap it was loaded
        // with, what it refused: that cap is what passed.
        *d.usage.lock().unwrap() = Default::default();
        tools.answer("nft", &["-j", "list", "quotas"], quotas(40 * MIB));
        reload(&d, "the test");
        assert_eq!(datacap::usage_of(&d, "app")["used"], 4 * MIB);
        forget(
            &d,
            &crate::daemon::device::state::state(&d),
            &["app".into()],
        );
        assert!(!d.cfg.paths.state.join("usage/app").exists());
        assert_eq!(datacap::usage_of(&d, "app"), Value::Null);
    }

    /// The first isolated container makes the bridge (its gateway address, up) after checking
    /// the subnet against the host's routes, lets the device forward, and loads a ruleset
    /// holding its address; the next finds the bridge there and does not make it again.
    #[test]
    fn the_bridge_is_made_once_and_each_start_loads_the_ruleset_with_its_address() {
        let (dir, d, tools) = networked_daemon("net-bridge", "[network]\ntable = \"bt_bridge\"\n");
        let rootfs = dir.path("rootfs");
        let app = install(&d, &networked("app", "mode = \"isolated\"\n"));
        let st = crate::daemon::device::state::state(&d);
        let lines = prepare(&d, &app, &st, &rootfs).unwrap();
        let c = &d.cfg.network;
        let ip = net::lease_of(&load_leases(&d), "app").expect("a lease");
        assert!(lines.contains(&ip.to_string()), "{lines}");
        let (br, gw) = (&c.bridge, format!("{}/{}", c.gateway(), c.subnet.1));
        assert_eq!(
            tools.lines(),
            [
                format!("ip -o link show dev {br}"),
                "ip -4 -o route show table all".into(),
                format!("ip link add {br} type bridge"),
                format!("ip addr replace {gw} dev {br}"),
                format!("ip link set {br} up"),
                "nft -f -".into(),
            ]
        );
        let forward = d.proc().join("sys/net/ipv4/ip_forward");
        assert_eq!(std::fs::read_to_string(forward).unwrap(), "1");
        let rules = &loads(tools)[0];
        assert!(rules.contains("table inet bt_bridge {"), "{rules}");
        assert!(rules.contains("table bridge bt_bridge {"), "{rules}");
        assert!(rules.contains(&format!("ip saddr {ip}")), "{rules}");

        tools.answer(
            "ip",
            &["-o", "link", "show"],
            Ok(format!(
                "7: {br}: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500\n"
            )),
        );
        let db = install(&d, &networked("db", "mode = \"isolated\"\n"));
        let st = crate::daemon::device::state::state(&d);
        prepare(&d, &db, &st, &rootfs).unwrap();
        let db_ip = net::lease_of(&load_leases(&d), "db").expect("a lease");
        assert_ne!(db_ip, ip);
        assert_eq!(
            tools.lines()[6..],
            [
                format!("ip -o link show dev {br}"),
                format!("ip addr replace {gw} dev {br}"),
                format!("ip link set {br} up"),
                "nft -f -".into(),
            ]
        );
        let rules = &loads(tools)[1];
        assert!(rules.contains(&format!("ip saddr {ip}")), "{rules}");
        assert!(rules.contains(&format!("ip saddr {db_ip}")), "{rules}");
    }

    /// The line governor follows the containers on the bridge: on the uplink before the
    /// ruleset that marks packets for it (the same script in place at each load), refused
    /// where another shaper holds the uplink (no ruleset loaded, no lease kept), waited for
    /// where the uplink is not there yet, and off when the last container goes.
    #[cfg(feature = "shape")]
    #[test]
    fn the_line_governor_goes_on_before_the_rules_and_refuses_another_shaper() {
        let (dir, d, tools) = networked_daemon(
            "net-line",
            "[network]\ntable = \"bt_line\"\nuplink = \"wan0\"\nuplink_rate = \"20mbit\"\n[policy]\nbandwidth = \"25%\"\n",
        );
        let rootfs = dir.path("rootfs");
        let line = d.cfg.network.line.clone().expect("a line");
        assert_eq!(line.containers(), 5_000_000);
        let show = ["qdisc", "show", "dev", "wan0", "root"];
        tools.answer(
            "tc",
            &show,
            Ok("qdisc cake 8001: root refcnt 2 bandwidth 20Mbit\n".into()),
        );
        tools.answer("sh", &[], Ok(String::new()));
        let app = install(&d, &networked("app", "mode = \"isolated\"\n"));
        let st = crate::daemon::device::state::state(&d);
        let e = prepare(&d, &app, &st, &rootfs).unwrap_err();
        assert_eq!(e.kind, Kind::Network);
        assert!(
            e.message.contains("uplink wan0: its root qdisc is another shaper's (cake 8001:), which berth does not replace"),
            "{}",
            e.message
        );
        // The governor was not put on; the start's undoing asks only to take off one of
        // berth's (a script that leaves another's qdisc alone).
        let line_script = berth_core::shape::line_script(&line);
        assert!(
            !tools
                .calls()
                .iter()
                .any(|c| c.input.as_deref() == Some(line_script.as_str())),
            "{:?}",
            tools.lines()
        );
        assert!(
            loads(tools).iter().all(|r| !r.contains("meta priority")),
            "no rules for a line not governed"
        );
        assert!(load_leases(&d).is_empty());

        // The kernel's default there: the governor goes on, then the rules that mark for it.
        tools.answer(
            "tc",
            &show,
            Ok("qdisc pfifo_fast 0: root refcnt 2 bands 3\n".into()),
        );
        let before = tools.calls().len();
        prepare(&d, &app, &st, &rootfs).unwrap();
        let calls = &tools.calls()[before..];
        let lines: Vec<String> = calls.iter().map(|c| c.line()).collect();
        let sh_at = lines
            .iter()
            .position(|l| l == "sh -s -- wan0")
            .expect("the script");
        let nft_at = lines
            .iter()
            .position(|l| l == "nft -f -")
            .expect("the rules");
        assert!(sh_at < nft_at, "{lines:?}");
        assert_eq!(
            calls[sh_at].input.as_deref(),
            Some(berth_core::shape::line_script(&line).as_str())
        );
        let rules = loads(tools).pop().unwrap();
        assert!(
            rules.contains("oifname \"wan0\" meta priority set b3:20\n"),
            "{rules}"
        );
        assert!(rules.contains("chain line {"), "{rules}");
        assert_eq!(shape::line_status(&d)["state"], "in force");

        // Held by this daemon already: the next start looks and leaves it.
        tools.answer(
            "tc",
            &show,
            Ok("qdisc htb b3: root refcnt 2 r2q 10 default 0x10 direct_packets_stat 0\n".into()),
        );
        let db = install(&d, &networked("db", "mode = \"isolated\"\n"));
        let st = crate::daemon::device::state::state(&d);
        let before = tools.calls().len();
        prepare(&d, &db, &st, &rootfs).unwrap();
        assert!(
            !tools.lines()[before..].iter().any(|l| l.starts_with("sh ")),
            "{:?}",
            tools.lines()
        );

        // The last container gone: the governor comes off after the rules.
        forget(&d, &st, &["app".into(), "db".into()]);
        let calls = tools.calls();
        let last = calls.last().unwrap();
        assert_eq!(last.line(), "sh -s -- wan0");
        assert_eq!(
            last.input.as_deref(),
            Some(berth_core::shape::line_off_script().as_str())
        );
        assert_eq!(
            shape::line_status(&d)["state"],
            "off: no container on berth's bridge"
        );

        // No uplink yet (a PPPoE link dialling): the container starts, the governor waits.
        tools.answer("tc", &show, Err("Cannot find device \"wan0\"".into()));
        let st = crate::daemon::device::state::state(&d);
        prepare(&d, &app, &st, &rootfs).unwrap();
        let state = shape::line_status(&d);
        assert!(
            state["state"]
                .as_str()
                .unwrap()
                .contains("no such interface yet"),
            "{state}"
        );

        // A governor this daemon's configuration no longer names (the uplink renamed, or
        // left by a daemon killed before it took it off) comes off at the next look.
        std::fs::write(d.cfg.paths.run.join("net/line"), "wan9").unwrap();
        let before = tools.calls().len();
        prepare(&d, &app, &st, &rootfs).unwrap();
        let calls = &tools.calls()[before..];
        let off = berth_core::shape::line_off_script();
        assert!(
            calls
                .iter()
                .any(|c| c.line() == "sh -s -- wan9" && c.input.as_deref() == Some(off.as_str())),
            "{:?}",
            tools.lines()
        );
        assert!(!d.cfg.paths.run.join("net/line").exists());

        watch_looks(&d, tools, &st);
    }

    /// The line governor's watch, after the test above (one test: the governor's state is
    /// the daemon's, one per process).
    #[cfg(feature = "shape")]
    fn watch_looks(d: &Daemon, tools: &FakeTools, st: &State) {
        let show = ["qdisc", "show", "dev", "wan0", "root"];
        // A script that fails half-way (its qdisc made, its classes not) is run again at the
        // next look, though the root is berth's: never shown as in force.
        tools.answer("tc", &show, Ok("qdisc noqueue 0: root refcnt 2\n".into()));
        tools.answer_once("sh", &[], Err("Error: Specified class not found.".into()));
        shape::look(d);
        let state = shape::line_status(d);
        assert!(
            state["state"]
                .as_str()
                .unwrap()
                .contains("the line governor: sh -s -- wan0 failed"),
            "{state}"
        );
        tools.answer(
            "tc",
            &show,
            Ok("qdisc htb b3: root refcnt 2 r2q 10 default 0x10\n".into()),
        );
        let before = tools.calls().len();
        shape::look(d);
        assert_eq!(
            tools.lines()[before..],
            ["tc qdisc show dev wan0 root", "sh -s -- wan0"]
        );
        assert_eq!(shape::line_status(d)["state"], "in force");
        // The watch: the uplink comes (or the governor was removed): put there.
        tools.answer("tc", &show, Ok("qdisc noqueue 0: root refcnt 2\n".into()));
        let before = tools.calls().len();
        shape::look(d);
        let lines = tools.lines()[before..].to_vec();
        assert_eq!(lines, ["tc qdisc show dev wan0 root", "sh -s -- wan0"]);
        assert_eq!(shape::line_status(d)["state"], "in force");
        // Still there: looked at, nothing run.
        tools.answer(
            "tc",
            &show,
            Ok("qdisc htb b3: root refcnt 2 r2q 10 default 0x10\n".into()),
        );
        let before = tools.calls().len();
        shape::look(d);
        assert_eq!(tools.lines()[before..], ["tc qdisc show dev wan0 root"]);
        // Another shaper took the uplink: reported, not fought.
        tools.answer("tc", &show, Ok("qdisc cake 8001: root refcnt 2\n".into()));
        let before = tools.calls().len();
        shape::look(d);
        assert_eq!(tools.lines()[before..], ["tc qdisc show dev wan0 root"]);
        let state = shape::line_status(d);
        assert!(
            state["state"]
                .as_str()
                .unwrap()
                .contains("another shaper's (cake 8001:)"),
            "{state}"
        );
        // No container left: the watch does nothing at all.
        forget(d, st, &["app".into(), "db".into()]);
        let before = tools.calls().len();
        shape::look(d);
        assert_eq!(tools.calls().len(), before);
    }

    /// A subnet that overlaps a host route is refused naming both, before any link is made
    /// (no lease kept).
    #[test]
    fn a_subnet_overlapping_a_host_route_makes_no_bridge() {
        let (dir, d, tools) =
            networked_daemon("net-overlap", "[network]\ntable = \"bt_overlap\"\n");
        let c = &d.cfg.network;
        let route = format!("{}/{} dev wg0 scope link\n", c.subnet.0, c.subnet.1);
        tools.answer("ip", &["-4", "-o", "route"], Ok(route));
        let app = install(&d, &networked("app", "mode = \"isolated\"\n"));
        let st = crate::daemon::device::state::state(&d);
        let e = prepare(&d, &app, &st, &dir.path("rootfs")).unwrap_err();
        assert_eq!(e.kind, Kind::Network);
        assert!(
            e.message.contains("overlaps the host's route") && e.message.contains("on wg0"),
            "{}",
            e.message
        );
        assert!(
            !tools.lines().iter().any(|l| l.starts_with("ip link add")),
            "{:?}",
            tools.lines()
        );
        assert!(load_leases(&d).is_empty());
    }

    /// `nft` refusing the ruleset: the start fails naming nft and its words; the lease it
    /// took goes back, the ruleset without the container is asked for, no veth script is
    /// written, and the next start loads again.
    #[test]
    fn nft_refusing_fails_the_start_and_gives_the_lease_back() {
        let (dir, d, tools) =
            networked_daemon("net-nft-refused", "[network]\ntable = \"bt_refused\"\n");
        let refused = "Error: Could not process rule: Operation not permitted";
        tools.answer("nft", &["-f", "-"], Err(refused.into()));
        let app = install(&d, &networked("app", "mode = \"isolated\"\n"));
        let st = crate::daemon::device::state::state(&d);
        let e = prepare(&d, &app, &st, &dir.path("rootfs")).unwrap_err();
        assert_eq!(e.kind, Kind::Network);
        assert_eq!(
            e.message,
            format!("app: nft -f - failed (exit status: 1): {refused}")
        );
        assert!(load_leases(&d).is_empty(), "the lease given back");
        assert!(!d.cfg.paths.run.join("net/veth-up").exists());
        let loads = loads(tools);
        assert_eq!(
            loads.len(),
            2,
            "the ruleset, then the one without the container"
        );
        assert!(loads[0].contains("ip saddr"), "{}", loads[0]);
        assert_eq!(loads[1], net::teardown(&d.cfg.network));

        tools.answer("nft", &["-f", "-"], Ok(String::new()));
        prepare(&d, &app, &st, &dir.path("rootfs")).unwrap();
        assert_eq!(self::loads(tools).len(), 3, "loaded again");
        assert_eq!(load_leases(&d).len(), 1);
    }

    /// A kernel that has no `ct count` (nft_connlimit): the ruleset goes in without the cap,
    /// its rate limit kept, and the start goes on.
    #[test]
    fn a_ruleset_the_kernel_refuses_the_cap_of_goes_in_without_it() {
        let (dir, d, tools) = networked_daemon(
            "net-nft-fallback",
            "[network]\ntable = \"bt_fallback\"\nmax_connections = \"200\"\n",
        );
        let no_cap = "Error: Could not process rule: No such file or directory";
        tools.answer_once("nft", &["-f", "-"], Err(no_cap.into()));
        let app = install(&d, &networked("app", "mode = \"isolated\"\n"));
        let st = crate::daemon::device::state::state(&d);
        prepare(&d, &app, &st, &dir.path("rootfs")).unwrap();
        let loads = loads(tools);
        assert_eq!(loads.len(), 2);
        assert!(loads[0].contains("ct count over 200"), "{}", loads[0]);
        assert!(loads[0].contains("limit rate over"), "{}", loads[0]);
        assert!(!loads[1].contains("ct count"), "{}", loads[1]);
        assert!(loads[1].contains("limit rate over"), "{}", loads[1]);
        assert_eq!(load_leases(&d).len(), 1);
    }

    /// macvlan: a parent the host does not have, or has down, is the error the user sees; one
    /// that is up gives the container its link.
    #[test]
    fn a_macvlan_parent_missing_or_down_is_refused_naming_it() {
        let (dir, d, _) = fake_daemon("net-macvlan", "[network]\nmacvlan_parent = \"eth9\"\n");
        let tools = fakes(&d).tools;
        let rootfs = dir.path("rootfs");
        let mv = install(&d, &networked("mv", "mode = \"macvlan\"\n"));
        let st = crate::daemon::device::state::state(&d);
        let missing = "Device \"eth9\" does not exist.";
        tools.answer(
            "ip",
            &["-o", "link", "show", "dev", "eth9"],
            Err(missing.into()),
        );
        let e = prepare(&d, &mv, &st, &rootfs).unwrap_err();
        assert_eq!(e.kind, Kind::Network);
        assert_eq!(
            e.message,
            "mv: macvlan parent interface eth9 does not exist"
        );
        let down = "3: eth9: <BROADCAST,MULTICAST> mtu 1500 qdisc noop state DOWN\n";
        tools.answer(
            "ip",
            &["-o", "link", "show", "dev", "eth9"],
            Ok(down.into()),
        );
        let e = prepare(&d, &mv, &st, &rootfs).unwrap_err();
        assert_eq!(e.message, "mv: macvlan parent interface eth9 is down");
        let up = "3: eth9: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 state UP\n";
        tools.answer("ip", &["-o", "link", "show", "dev", "eth9"], Ok(up.into()));
        let lines = prepare(&d, &mv, &st, &rootfs).unwrap();
        assert!(lines.contains("lxc.net.0.type = macvlan\n"), "{lines}");
        assert!(lines.contains("lxc.net.0.link = eth9\n"), "{lines}");
        assert_eq!(tools.lines().len(), 3, "{:?}", tools.lines());
    }

    /// A container that asks for DHCP starts berth's dnsmasq on the bridge, with a static
    /// host entry for its address and the daemon's pid file; dnsmasq failing to start fails
    /// the start naming it, the lease given back.
    #[test]
    fn dnsmasq_starts_with_the_containers_host_entry() {
        let (dir, d, tools) = networked_daemon("net-dhcp", "[network]\ntable = \"bt_dhcp\"\n");
        tools.answer("dnsmasq", &[], Ok(String::new()));
        let app = install(
            &d,
            &networked("app", "mode = \"isolated\"\naddress = \"dhcp\"\n"),
        );
        let st = crate::daemon::device::state::state(&d);
        prepare(&d, &app, &st, &dir.path("rootfs")).unwrap();
        let ip = net::lease_of(&load_leases(&d), "app").unwrap();
        let calls = tools.calls();
        // Every network tool gets the short limit.
        assert!(
            calls.iter().all(|c| c.limit == berth_sys::host::TOOL_LIMIT),
            "{calls:?}"
        );
        let run = calls
            .iter()
            .find(|c| c.prog == "dnsmasq")
            .expect("dnsmasq run");
        let c = &d.cfg.network;
        for a in [
            format!("--interface={}", c.bridge),
            format!("--dhcp-host={},{ip}", net::mac_of(ip)),
            format!("--pid-file={}", dnsmasq_pid_file(&d).display()),
            format!("--dhcp-option=option:router,{}", c.gateway()),
        ] {
            assert!(run.args.contains(&a), "{a} in {:?}", run.args);
        }
        assert_eq!(run.input, None);

        let (dir, d, tools) =
            networked_daemon("net-dhcp-fails", "[network]\ntable = \"bt_dhcp2\"\n");
        let taken = "dnsmasq: failed to create listening socket for port 67: Address in use";
        tools.answer("dnsmasq", &[], Err(taken.into()));
        let app = install(
            &d,
            &networked("app", "mode = \"isolated\"\naddress = \"dhcp\"\n"),
        );
        let st = crate::daemon::device::state::state(&d);
        let e = prepare(&d, &app, &st, &dir.path("rootfs")).unwrap_err();
        assert!(
            e.message.starts_with("app: dnsmasq --conf-file=/dev/null ")
                && e.message
                    .ends_with(&format!(" failed (exit status: 1): {taken}")),
            "{}",
            e.message
        );
        assert!(load_leases(&d).is_empty());
    }
}
