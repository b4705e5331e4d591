//! Networking plans (pure): the `[network]` section of the device configuration, the address
//! pool, each container's link parameters (address, MAC, host-side veth name, LXC keys) and
//! berth's nftables ruleset as one text that `nft -f -` loads in a single transaction.
//!
//! The ruleset lives in two tables of berth's own (`inet T` and `bridge T`, T = `table`):
//! - `bridge T`: every frame a container sends into the bridge is checked on its host-side
//!   veth against the container's MAC and IPv4 address (Ethernet source, ARP sender MAC and
//!   IP, IPv4 source); IPv6 is dropped uncounted (link-local chatter is no attack), other EtherTypes dropped and counted. Frames between two containers'
//!   ports are dropped unless the policy links them. Drops are counted in named counters
//!   `spoof_<n>` and `deny_<n>` (n: the container's pool index).
//! - `inet T`: containers reach no host service but the listed ones (input), nothing routed
//!   between containers but links (forward), outbound masqueraded from the subnet, published
//!   ports DNATed from the configured interfaces; each container's new tracked connections
//!   capped (`max_connections`, nft `ct count`), so that no container fills the device's
//!   connection-tracking table.
//!
//! Each load first declares then deletes both tables, then recreates them: a failed load
//! changes nothing, a good one replaces everything at once. No other table is touched.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use crate::manifest::{NetMode, Proto, Publish};

/// `[network]` of berth.toml, as written: string values only; lists are space-separated
/// (`outbound = "eth0 wwan0"`). The same type as the manifest's `env` table, so the device
/// binary reuses that deserializer instead of carrying one more (a derived struct with TOML
/// arrays cost about 17 KiB).
pub type RawNet = BTreeMap<String, toml::Spanned<String>>;

/// The keys `[network]` may have.
const KEYS: &[&str] = &[
    "modes",
    "bridge",
    "subnet",
    "table",
    "outbound",
    "publish_on",
    "macvlan_parent",
    "macvlan_pool",
    "macvlan_gateway",
    "host_services",
    "links",
    "dns",
    "lan",
    "dhcp_leases",
    "mdns",
    "max_connections",
    "connection_rate",
    "proxy",
    // The line governor's (feature `shape`; without it they are unknown).
    #[cfg(feature = "shape")]
    "uplink",
    #[cfg(feature = "shape")]
    "uplink_rate",
];

/// `[network] proxy`: a proxy URL libcurl takes, or "" for none.
fn proxy(p: &str) -> Result<String, E> {
    let schemes = [
        "http://",
        "https://",
        "socks4://",
        "socks4a://",
        "socks5://",
        "socks5h://",
    ];
    let plain = !p.bytes().any(|b| b <= b' ' || b == 0x7f);
    let url = plain && schemes.iter().any(|s| p.starts_with(s));
    if !(p.is_empty() || url) {
        return Err(bad(
            "network.proxy",
            p,
            "a proxy URL (http://HOST:PORT, https://, socks5h://) or \"\" for none",
        ));
    }
    Ok(p.to_string())
}

/// Where DHCP servers keep their leases: dnsmasq's on Debian, OpenWrt's dnsmasq, odhcpd's.
const DHCP_LEASES: &str = "/var/lib/misc/dnsmasq.leases /tmp/dhcp.leases /tmp/hosts/odhcpd";

/// The network policy of the device.
#[derive(Debug, Clone, PartialEq)]
pub struct NetConfig {
    /// Modes packages may use (the manifest asks, the device caps). Default: all four.
    pub modes: Vec<NetMode>,
    pub bridge: String,
    /// The isolated subnet: network address and prefix length. The bridge takes the first
    /// host address (the containers' gateway); containers get the others.
    pub subnet: (Ipv4Addr, u8),
    /// nftables table name (in the `inet` and `bridge` families).
    pub table: String,
    /// Interfaces containers' traffic may leave by (masqueraded); empty: any but the bridge.
    pub outbound: Vec<String>,
    /// Interfaces published ports are reachable on; empty: any but the bridge.
    pub publish_on: Vec<String>,
    pub macvlan_parent: Option<String>,
    /// Static LAN addresses for macvlan containers: first, last, prefix length. Without a
    /// pool the package addresses itself (its own DHCP client; it needs net_admin for that).
    pub macvlan_pool: Option<(Ipv4Addr, Ipv4Addr, u8)>,
    /// The LAN's router, the default route of macvlan containers with a pool address.
    pub macvlan_gateway: Option<Ipv4Addr>,
    /// Host services containers may reach on the host: (port, protocol).
    pub host_services: Vec<(u16, Proto)>,
    /// Pairs of containers that may reach each other.
    pub links: Vec<(String, String)>,
    /// Name servers written to containers' resolv.conf; empty: the host's.
    pub dns: Vec<Ipv4Addr>,
    /// The interfaces whose neighbours are the LAN's hosts; empty: see [`NetConfig::is_lan`].
    pub lan: Vec<String>,
    /// DHCP servers' files that name the LAN's hosts (dnsmasq leases or hosts format).
    pub dhcp_leases: Vec<String>,
    /// Ask hosts without a DHCP name for theirs by mDNS (needs berth's `mdns` feature).
    pub mdns: bool,
    /// The most connections one isolated container may have tracked at once: a number, or
    /// (true) a percentage of the kernel's table (`nf_conntrack_max`); None: no cap.
    pub max_connections: Option<(u32, bool)>,
    /// The new connections one isolated container may open: derived from the cap (`auto`),
    /// given, or none.
    pub connection_rate: RateConfig,
    /// `proxy`: the proxy of the device's own downloads (repository, mirrors, fleet server):
    /// a URL, or "" for none whatever the environment says; None: the environment's
    /// `http_proxy`, `https_proxy`, `no_proxy` (libcurl's rules).
    pub proxy: Option<String>,
    /// `uplink` and `uplink_rate`: the WAN line the governor shapes, with the containers'
    /// total `[policy] bandwidth` sets (the configuration fills that in); None: not governed.
    #[cfg(feature = "shape")]
    pub line: Option<crate::shape::Line>,
    /// `[policy] data_reset_day`, `metered`, `metered_data_cap`, `over_cap` (the
    /// configuration fills them in).
    #[cfg(feature = "shape")]
    pub data: crate::datacap::DataPolicy,
}

/// `[network] connection_rate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateConfig {
    /// From the cap: a 240th of it a second (the connections that closed stay in the table
    /// 120 s, so at most half a cap of them), a burst of a quarter of it; none without a cap.
    Auto,
    /// `N/s` or `N/m`, and a burst (None: a quarter of the cap, at least 5).
    Given(Rate, Option<u32>),
    Off,
}

/// A rate of new connections: so many a second, or (true) a minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate(pub u32, pub bool);

/// What the `conns` chain holds for each isolated container: its cap on tracked connections
/// (0: none) and its rate of new ones, with the burst (None: no rate).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnLimits {
    pub cap: u32,
    pub rate: Option<(Rate, u32)>,
}

/// A name the kernel takes for an interface (IFNAMSIZ), and a shell word without quotes.
pub fn is_ifname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

pub fn parse_cidr(s: &str) -> Option<(Ipv4Addr, u8)> {
    let (a, p) = s.split_once('/')?;
    let a: Ipv4Addr = a.parse().ok()?;
    let p: u8 = p.parse().ok().filter(|p| *p <= 32)?;
    Some((a, p))
}

fn mask(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    }
}

/// Do two prefixes share an address?
pub fn overlaps(a: (Ipv4Addr, u8), b: (Ipv4Addr, u8)) -> bool {
    let m = mask(a.1.min(b.1));
    u32::from(a.0) & m == u32::from(b.0) & m
}

pub fn mode_name(m: NetMode) -> &'static str {
    match m {
        NetMode::None => "none",
        NetMode::Isolated => "isolated",
        NetMode::Macvlan => "macvlan",
        NetMode::Shared => "shared",
    }
}

type E = (&'static str, String);

/// One message shape for every value of `[network]`: smaller code than one format per key.
fn bad(key: &'static str, v: &str, want: &str) -> E {
    (key, format!("{v:?}: expected {want}"))
}

/// `[network] uplink` and `uplink_rate`: both or neither; the containers' share is the
/// policy's (half the line until the configuration says otherwise).
#[cfg(feature = "shape")]
fn line(c: &mut NetConfig, uplink: Option<&str>, rate: Option<&str>) -> Result<(), E> {
    let (uplink, rate) = match (uplink, rate) {
        (None, None) => return Ok(()),
        (Some(u), Some(r)) => (u, r),
        (Some(u), None) => return Err(bad("network.uplink_rate", u, "the uplink's rate too")),
        (None, Some(r)) => return Err(bad("network.uplink", r, "the uplink's name too")),
    };
    if !is_ifname(uplink) || uplink == c.bridge {
        return Err(bad(
            "network.uplink",
            uplink,
            "the WAN interface's name (not berth's bridge)",
        ));
    }
    let rate = crate::shape::parse_rate(rate)
        .ok()
        .filter(|r| *r >= crate::shape::MIN_LINE)
        .ok_or_else(|| {
            bad(
                "network.uplink_rate",
                rate,
                "a rate from 1mbit to 10gbit, such as \"20mbit\"",
            )
        })?;
    c.line = Some(crate::shape::Line {
        uplink: uplink.to_string(),
        rate,
        asked: rate / 2,
    });
    Ok(())
}

/// `[network] macvlan_pool` and `macvlan_gateway`: berth's own addresses on the LAN.
fn macvlan(c: &mut NetConfig, pool: Option<&str>, gateway: Option<&str>) -> Result<(), E> {
    if let Some(v) = pool {
        const POOL: &str =
            "FIRST-LAST/LEN, in one LAN prefix, at most 4096 addresses, outside [network] subnet";
        let (range, len) = v
            .split_once('/')
            .ok_or_else(|| bad("network.macvlan_pool", v, POOL))?;
        let (a, b) = range
            .split_once('-')
            .ok_or_else(|| bad("network.macvlan_pool", v, POOL))?;
        let parsed = (
            a.parse::<Ipv4Addr>(),
            b.parse::<Ipv4Addr>(),
            len.parse::<u8>(),
        );
        let (Ok(a), Ok(b), Ok(len)) = parsed else {
            return Err(bad("network.macvlan_pool", v, POOL));
        };
        let (ua, ub) = (u32::from(a), u32::from(b));
        let m = mask(len.min(32));
        let host = |x: u32| x & !m != 0 && x & !m != !m;
        if !(8..=30).contains(&len)
            || ua > ub
            || ub - ua >= 4096
            || ua & m != ub & m
            || !host(ua)
            || !host(ub)
            || (ua..=ub).any(|x| overlaps((Ipv4Addr::from(x), 32), c.subnet))
        {
            return Err(bad("network.macvlan_pool", v, POOL));
        }
        c.macvlan_pool = Some((a, b, len));
    }
    if let Some(v) = gateway {
        const GW: &str = "an IPv4 address in the pool's prefix, outside the pool";
        let g: Ipv4Addr = v
            .parse()
            .map_err(|_| bad("network.macvlan_gateway", v, GW))?;
        let Some((a, b, len)) = c.macvlan_pool else {
            return Err(bad(
                "network.macvlan_gateway",
                v,
                "[network] macvlan_pool beside it",
            ));
        };
        if !overlaps((g, 32), (a, len)) || (a..=b).contains(&g) {
            return Err(bad("network.macvlan_gateway", v, GW));
        }
        c.macvlan_gateway = Some(g);
    }
    Ok(())
}

/// `[network] max_connections` and `connection_rate`: each container's conntrack caps.
fn limits(
    c: &mut NetConfig,
    max_connections: Option<&str>,
    connection_rate: Option<&str>,
) -> Result<(), E> {
    if let Some(v) = max_connections {
        let (n, pct) = v.strip_suffix('%').map_or((v, false), |n| (n, true));
        c.max_connections = match n.parse::<u32>() {
            _ if v == "off" => None,
            Ok(n) if n > 0 && (!pct || n <= 100) => Some((n, pct)),
            _ => {
                return Err(bad(
                    "network.max_connections",
                    v,
                    "N, P% (of nf_conntrack_max) or off",
                ))
            }
        };
    }
    if let Some(v) = connection_rate {
        c.connection_rate = parse_rate(v).ok_or_else(|| {
            bad(
                "network.connection_rate",
                v,
                "auto, off, N/s or N/m, optionally followed by burst B (N and B from 1 to 1000000)",
            )
        })?;
    }
    Ok(())
}

impl NetConfig {
    /// Validates `[network]`; errors are (key, message). Not inlined: every early return
    /// inside `Config::parse` would repeat the clean-up of all its locals.
    #[inline(never)]
    pub fn parse(raw: Option<RawNet>) -> Result<NetConfig, (&'static str, String)> {
        let raw = raw.unwrap_or_default();
        if let Some(k) = raw.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(bad("network", k, &format!("one of {}", KEYS.join(", "))));
        }
        let get = |k: &str| raw.get(k).map(|v| v.get_ref().as_str());
        const IF: &str = "an interface name (1-15 of A-Z a-z 0-9 - _ .)";
        let ifname = |key: &'static str, s: &str| -> Result<String, E> {
            if is_ifname(s) {
                Ok(s.to_string())
            } else {
                Err(bad(key, s, IF))
            }
        };
        // Lists of words, each checked; one function for every list (smaller code).
        fn words(
            raw: &RawNet,
            key: &'static str,
            default: &str,
            ok: fn(&str) -> bool,
            want: &str,
        ) -> Result<Vec<String>, E> {
            let text = raw.get(&key[8..]).map_or(default, |v| v.get_ref().as_str());
            let mut v = Vec::new();
            for w in text.split_whitespace() {
                if !ok(w) {
                    return Err(bad(key, w, want));
                }
                v.push(w.to_string());
            }
            Ok(v)
        }
        let ifnames = |key: &'static str| words(&raw, key, "", is_ifname, IF);
        let mut c = NetConfig {
            modes: vec![
                NetMode::None,
                NetMode::Isolated,
                NetMode::Macvlan,
                NetMode::Shared,
            ],
            bridge: ifname("network.bridge", get("bridge").unwrap_or("berth0"))?,
            subnet: (Ipv4Addr::UNSPECIFIED, 0),
            table: get("table").unwrap_or("berth").to_string(),
            outbound: ifnames("network.outbound")?,
            publish_on: ifnames("network.publish_on")?,
            macvlan_parent: match get("macvlan_parent") {
                Some(p) => Some(ifname("network.macvlan_parent", p)?),
                None => None,
            },
            macvlan_pool: None,
            macvlan_gateway: None,
            host_services: Vec::new(),
            links: Vec::new(),
            dns: Vec::new(),
            lan: ifnames("network.lan")?,
            dhcp_leases: words(
                &raw,
                "network.dhcp_leases",
                DHCP_LEASES,
                |f| f.starts_with('/'),
                "absolute paths",
            )?,
            mdns: false,
            max_connections: Some((25, true)),
            connection_rate: RateConfig::Auto,
            proxy: None,
            #[cfg(feature = "shape")]
            line: None,
            #[cfg(feature = "shape")]
            data: Default::default(),
        };
        #[cfg(feature = "shape")]
        line(&mut c, get("uplink"), get("uplink_rate"))?;
        c.proxy = get("proxy").map(proxy).transpose()?;
        match get("mdns") {
            None | Some("off") => {}
            Some("on") => c.mdns = true,
            Some(v) => return Err(bad("network.mdns", v, "on or off")),
        }
        if let Some(l) = c.lan.iter().find(|l| **l == c.bridge || *l == "lo") {
            return Err(bad(
                "network.lan",
                l,
                "the LAN's interfaces (not loopback, not berth's bridge)",
            ));
        }
        if let Some(m) = get("modes") {
            c.modes.clear();
            for w in m.split_whitespace() {
                c.modes.push(match w {
                    "none" => NetMode::None,
                    "isolated" => NetMode::Isolated,
                    "macvlan" => NetMode::Macvlan,
                    "shared" => NetMode::Shared,
                    _ => return Err(bad("network.modes", w, "none, isolated, macvlan or shared")),
                });
            }
        }
        let subnet = get("subnet").unwrap_or("10.87.0.0/24");
        let (a, p) = parse_cidr(subnet)
            .filter(|(_, p)| (16..=30).contains(p))
            .ok_or_else(|| bad("network.subnet", subnet, "an IPv4 prefix a.b.c.d/16 to /30"))?;
        c.subnet = (Ipv4Addr::from(u32::from(a) & mask(p)), p);
        macvlan(&mut c, get("macvlan_pool"), get("macvlan_gateway"))?;
        let t = &c.table;
        if t.is_empty()
            || t.len() > 32
            || !t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(bad("network.table", t, "1-32 of A-Z a-z 0-9 _"));
        }
        for w in get("host_services").unwrap_or("").split_whitespace() {
            let (p, proto) = match w.split_once('/') {
                Some((p, "tcp")) => (p, Proto::Tcp),
                Some((p, "udp")) => (p, Proto::Udp),
                None => (w, Proto::Tcp),
                _ => ("", Proto::Tcp),
            };
            match p.parse::<u16>() {
                Ok(n) if n > 0 => c.host_services.push((n, proto)),
                _ => return Err(bad("network.host_services", w, "PORT[/tcp|/udp]")),
            }
        }
        limits(&mut c, get("max_connections"), get("connection_rate"))?;
        for w in get("dns").unwrap_or("").split_whitespace() {
            c.dns.push(
                w.parse()
                    .map_err(|_| bad("network.dns", w, "an IPv4 address"))?,
            );
        }
        for w in get("links").unwrap_or("").split_whitespace() {
            match w.split_once(':') {
                Some((a, b)) if !a.is_empty() && !b.is_empty() => {
                    c.links.push((a.into(), b.into()))
                }
                _ => return Err(bad("network.links", w, "NAME:NAME")),
            }
        }
        Ok(c)
    }

    /// The bridge's address: the containers' gateway.
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.subnet.0) + 1)
    }

    /// Addresses containers of `mode` may get, in order: the isolated subnet's, or the
    /// macvlan pool's (empty without one).
    fn pool(&self, mode: NetMode) -> std::ops::Range<u32> {
        match (mode, self.macvlan_pool) {
            (NetMode::Macvlan, Some((a, b, _))) => u32::from(a)..u32::from(b) + 1,
            (NetMode::Macvlan, None) => 0..0,
            _ => {
                let base = u32::from(self.subnet.0);
                let size = 1u32 << (32 - self.subnet.1);
                base + 2..base + size - 1
            }
        }
    }

    fn pool_text(&self, mode: NetMode) -> String {
        match (mode, self.macvlan_pool) {
            (NetMode::Macvlan, Some((a, b, len))) => format!("{a}-{b}/{len}"),
            _ => format!("{}/{}", self.subnet.0, self.subnet.1),
        }
    }

    /// Whether `dev`'s neighbours are the LAN's hosts: one of `lan`, or without it any
    /// interface but loopback, berth's bridge and berth's veths (`vb` + 8 hex digits; macvlan
    /// links live in their containers).
    pub fn is_lan(&self, dev: &str) -> bool {
        if !self.lan.is_empty() {
            return self.lan.iter().any(|l| l == dev);
        }
        let veth = dev.len() == 10
            && dev.starts_with("vb")
            && dev[2..].bytes().all(|b| b.is_ascii_hexdigit());
        // (no name: an interface gone since the kernel listed its neighbours)
        !(dev.is_empty() || dev == "lo" || dev == self.bridge || veth)
    }

    fn linked(&self, a: &str, b: &str) -> bool {
        self.links
            .iter()
            .any(|(x, y)| (x == a && y == b) || (x == b && y == a))
    }
}

/// The address of each container that has one, persisted by the daemon (`net/leases`).
/// A Vec, not a map: a handful of entries, and no B-tree code in the device binary.
pub type Leases = Vec<(String, Ipv4Addr)>;

pub fn lease_of(l: &Leases, name: &str) -> Option<Ipv4Addr> {
    l.iter().find(|(n, _)| n == name).map(|(_, a)| *a)
}

/// The leases file: one `NAME ADDRESS` per line (no JSON: smaller code on the device).
/// Lines that do not parse are skipped.
pub fn parse_leases(text: &str) -> Leases {
    let mut l = Leases::new();
    for line in text.lines() {
        if let Some((n, Ok(a))) = line.split_once(' ').map(|(n, a)| (n, a.trim().parse())) {
            l.retain(|(m, _)| m != n);
            l.push((n.to_string(), a));
        }
    }
    l
}

pub fn format_leases(l: &Leases) -> String {
    l.iter().map(|(n, a)| format!("{n} {a}\n")).collect()
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum NetError {
    #[error("{package}: network mode {mode} is not allowed by the device policy ([network] modes in berth.toml)")]
    ModeDenied { package: String, mode: &'static str },
    #[error("{package}: no free address left in the pool {subnet} ({used} containers have one); remove a package or widen [network] {key}")]
    PoolExhausted {
        package: String,
        subnet: String,
        used: usize,
        key: &'static str,
    },
    #[error("{package}: host port {port}/{proto} is already published by {other}")]
    PortTaken {
        package: String,
        port: u16,
        proto: &'static str,
        other: String,
    },
}

pub fn proto_name(p: Proto) -> &'static str {
    match p {
        Proto::Tcp => "tcp",
        Proto::Udp => "udp",
    }
}

/// The device policy's cap on a package's network mode.
pub fn check_mode(cfg: &NetConfig, package: &str, mode: NetMode) -> Result<(), NetError> {
    if cfg.modes.contains(&mode) {
        Ok(())
    } else {
        Err(NetError::ModeDenied {
            package: package.into(),
            mode: mode_name(mode),
        })
    }
}

/// The container's address in the pool of its mode (the isolated subnet, or the macvlan
/// pool): its lease if it has one there, else the lowest free one (added to `leases`,
/// replacing a lease from the other pool; the caller persists it).
pub fn allocate(
    cfg: &NetConfig,
    leases: &mut Leases,
    name: &str,
    mode: NetMode,
) -> Result<Ipv4Addr, NetError> {
    let pool = cfg.pool(mode);
    if let Some(ip) = lease_of(leases, name) {
        if pool.contains(&u32::from(ip)) {
            return Ok(ip);
        }
    }
    let ip = pool
        .map(Ipv4Addr::from)
        .find(|ip| !leases.iter().any(|(n, l)| l == ip && n != name))
        .ok_or_else(|| NetError::PoolExhausted {
            package: name.into(),
            subnet: cfg.pool_text(mode),
            key: match mode {
                NetMode::Macvlan => "macvlan_pool",
                _ => "subnet",
            },
            used: leases
                .iter()
                .filter(|(_, l)| cfg.pool(mode).contains(&u32::from(*l)))
                .count(),
        })?;
    leases.retain(|(n, _)| n != name);
    leases.push((name.into(), ip));
    Ok(ip)
}

/// Refuses a host port another container already publishes.
pub fn check_ports(
    name: &str,
    mine: &[Publish],
    others: &[(String, Vec<Publish>)],
) -> Result<(), NetError> {
    for p in mine {
        for (other, theirs) in others.iter().filter(|(o, _)| o != name) {
            if theirs
                .iter()
                .any(|q| q.host_port == p.host_port && q.proto == p.proto)
            {
                return Err(NetError::PortTaken {
                    package: name.into(),
                    port: p.host_port,
                    proto: proto_name(p.proto),
                    other: other.clone(),
                });
            }
        }
    }
    Ok(())
}

/// A locally administered MAC derived from the address: stable across restarts, unique in
/// the subnet.
pub fn mac_of(ip: Ipv4Addr) -> String {
    let o = ip.octets();
    format!("02:b7:{:02x}:{:02x}:{:02x}:{:02x}", o[0], o[1], o[2], o[3])
}

/// The host side of the container's veth (≤ 15 characters, unique per address).
pub fn veth_of(ip: Ipv4Addr) -> String {
    format!("vb{:08x}", u32::from(ip))
}

/// The index used in counter names (the address's offset in the subnet).
pub fn index_of(cfg: &NetConfig, ip: Ipv4Addr) -> u32 {
    u32::from(ip) - u32::from(cfg.subnet.0)
}

/// The `lxc.net.0.*` lines of an isolated container. `up_script` (see [`veth_up_script`])
/// attaches the host side to the bridge: LXC's own `link` key decides bridge or Open vSwitch
/// by looking in /sys/class/net, which shows another namespace's devices when the daemon
/// does not run in the namespace that mounted /sys.
pub fn lxc_isolated(cfg: &NetConfig, ip: Ipv4Addr, up_script: &str) -> Vec<(&'static str, String)> {
    vec![
        ("lxc.net.0.type", "veth".into()),
        ("lxc.net.0.script.up", up_script.into()),
        ("lxc.net.0.veth.pair", veth_of(ip)),
        ("lxc.net.0.name", "eth0".into()),
        ("lxc.net.0.hwaddr", mac_of(ip)),
        // with the broadcast address: LXC 5.0 otherwise computes a wrong one (0.0.0.255)
        (
            "lxc.net.0.ipv4.address",
            format!("{ip}/{} {}", cfg.subnet.1, broadcast(cfg)),
        ),
        ("lxc.net.0.ipv4.gateway", cfg.gateway().to_string()),
        ("lxc.net.0.flags", "up".into()),
        // IPv4 only: the bridge drops IPv6 without counting it (the kernel's own link-local
        // chatter is not an attack). No lxc.sysctl to disable it: in a user namespace LXC
        // cannot write the container's /proc/sys (mounted read-only), and the start fails.
    ]
}

fn broadcast(cfg: &NetConfig) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(cfg.subnet.0) | !mask(cfg.subnet.1))
}

/// The script LXC runs on the host when a container's veth exists (hooks version 0 passes:
/// container, "net", "up", "veth", host-side name): into the bridge it goes.
pub fn veth_up_script(cfg: &NetConfig) -> String {
    format!(
        "#!/bin/sh\n# written by berth: attach a container's veth to its bridge\nPATH=$PATH:/usr/sbin:/sbin:/usr/bin:/bin\nexec ip link set dev \"$5\" master {} up\n",
        cfg.bridge
    )
}

/// The `lxc.net.0.*` lines of a macvlan container (bridge mode on the parent). With `ip`
/// (from the device's `macvlan_pool`) LXC sets a fixed MAC, the address and the LAN gateway
/// before the payload runs, so the package needs no capability at all; without, the address
/// comes from the LAN, set by the package or its DHCP client.
pub fn lxc_macvlan(
    cfg: &NetConfig,
    parent: &str,
    ip: Option<Ipv4Addr>,
) -> Vec<(&'static str, String)> {
    let mut v = vec![
        ("lxc.net.0.type", "macvlan".into()),
        ("lxc.net.0.macvlan.mode", "bridge".into()),
        ("lxc.net.0.link", parent.into()),
        ("lxc.net.0.name", "eth0".into()),
    ];
    if let (Some(ip), Some((_, _, len))) = (ip, cfg.macvlan_pool) {
        let bcast = Ipv4Addr::from(u32::from(ip) | !mask(len));
        v.push(("lxc.net.0.hwaddr", mac_of(ip)));
        v.push(("lxc.net.0.ipv4.address", format!("{ip}/{len} {bcast}")));
        if let Some(g) = cfg.macvlan_gateway {
            v.push(("lxc.net.0.ipv4.gateway", g.to_string()));
        }
    }
    v.push(("lxc.net.0.flags", "up".into()));
    v
}

/// berth's DHCP server for `address = "dhcp"` containers: dnsmasq on the bridge, DHCP only (no
/// DNS: port 0), answering the MACs of those containers with their static leases and nobody
/// else (`static` range). Router: the gateway; name servers: `dns`. Restarted with new
/// arguments when the set changes (no file for the dropped-privilege process to read).
pub fn dnsmasq_args(
    cfg: &NetConfig,
    members: &[Member],
    pid_file: &str,
    dns: &[String],
) -> Vec<String> {
    let m = Ipv4Addr::from(mask(cfg.subnet.1));
    let mut a = vec![
        "--conf-file=/dev/null".to_string(),
        "--port=0".into(),
        format!("--interface={}", cfg.bridge),
        "--bind-interfaces".into(),
        "--except-interface=lo".into(),
        format!("--dhcp-range={},static,{m},1h", cfg.subnet.0),
        format!("--dhcp-option=option:router,{}", cfg.gateway()),
        "--dhcp-authoritative".into(),
        "--leasefile-ro".into(),
        "--no-ping".into(),
        format!("--pid-file={pid_file}"),
    ];
    if !dns.is_empty() {
        a.push(format!("--dhcp-option=option:dns-server,{}", dns.join(",")));
    }
    for m in members.iter().filter(|m| m.dhcp) {
        a.push(format!("--dhcp-host={},{}", mac_of(m.ip), m.ip));
    }
    a
}

/// One isolated container in the ruleset.
#[derive(Clone, Copy)]
pub struct Member<'a> {
    pub name: &'a str,
    pub ip: Ipv4Addr,
    pub publish: &'a [Publish],
    /// Its DHCP client may ask berth's dnsmasq (`address = "dhcp"`).
    pub dhcp: bool,
    /// Its data cap's quota (`crate::datacap`; its `index` is the container's).
    #[cfg(feature = "shape")]
    pub quota: Option<crate::datacap::Quota>,
}

fn set(names: &[String]) -> String {
    let q: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    format!("{{ {} }}", q.join(", "))
}

/// The most a rate or a burst may be: a million (nft's bucket is sized from both).
const RATE_MAX: u32 = 1_000_000;

/// `auto`, `off`, or `N/s` / `N/m` optionally followed by `burst B` (N, B in 1..=RATE_MAX).
fn parse_rate(v: &str) -> Option<RateConfig> {
    let within = |x: &u32| (1..=RATE_MAX).contains(x);
    match v {
        "auto" => return Some(RateConfig::Auto),
        "off" => return Some(RateConfig::Off),
        _ => {}
    }
    let w: Vec<&str> = v.split_whitespace().collect();
    let burst = match w[..] {
        [_] => None,
        [_, "burst", b] => Some(b.parse::<u32>().ok().filter(within)?),
        _ => return None,
    };
    let (n, unit) = w.first()?.split_once('/')?;
    let minute = match unit {
        "s" | "second" => false,
        "m" | "minute" => true,
        _ => return None,
    };
    let n = n.parse::<u32>().ok().filter(within)?;
    Some(RateConfig::Given(Rate(n, minute), burst))
}

/// The limits on each container's connections for a kernel whose table holds `table`
/// entries (None: unknown): its cap ([`connection_cap`]) and its rate of new connections.
pub fn connection_limits(cfg: &NetConfig, table: Option<u32>) -> ConnLimits {
    let cap = connection_cap(cfg, table);
    let burst = (cap / 4).clamp(5, RATE_MAX);
    let rate = match cfg.connection_rate {
        RateConfig::Auto if cap > 0 => Some((Rate((cap / 240).clamp(1, RATE_MAX), false), burst)),
        RateConfig::Given(r, b) => Some((r, b.unwrap_or(burst))),
        RateConfig::Auto | RateConfig::Off => None,
    };
    ConnLimits { cap, rate }
}

/// The cap on each container's tracked connections for a kernel whose table holds `table`
/// entries (`nf_conntrack_max`; None: unknown, connection tracking not loaded yet; 0: no
/// limit, to the kernel); 0: none.
pub fn connection_cap(cfg: &NetConfig, table: Option<u32>) -> u32 {
    match (cfg.max_connections, table) {
        (Some((n, false)), _) => n,
        // p% of t without overflow (p <= 100), in 32 bits: no 64-bit division on MIPS.
        (Some((p, true)), Some(t)) if t > 0 => (t / 100 * p + t % 100 * p / 100).max(1),
        _ => 0,
    }
}

/// berth's whole ruleset, for `nft -f -`; `cap`: [`connection_cap`].
pub fn ruleset(cfg: &NetConfig, members: &[Member], limits: ConnLimits) -> String {
    let t = &cfg.table;
    let mut o = String::new();
    // Declare (so the delete cannot fail on a first load), delete, recreate: one transaction.
    for fam in ["inet", "bridge"] {
        let _ = writeln!(o, "table {fam} {t} {{}}\ndelete table {fam} {t}");
    }
    bridge_table(&mut o, cfg, members);
    inet_table(&mut o, cfg, members, limits);
    o
}

/// Each container's two counters: its spoofed frames and its denied packets.
fn counters(w: &mut String, cfg: &NetConfig, members: &[Member]) {
    for m in members {
        let i = index_of(cfg, m.ip);
        let _ = writeln!(w, "  counter spoof_{i} {{}}\n  counter deny_{i} {{}}");
    }
}

/// L2: pin each port to its container, keep containers apart.
fn bridge_table(w: &mut String, cfg: &NetConfig, members: &[Member]) {
    let t = &cfg.table;
    let _ = writeln!(w, "table bridge {t} {{");
    counters(w, cfg, members);
    let _ = writeln!(
        w,
        "  chain prerouting {{\n    type filter hook prerouting priority -200; policy accept;"
    );
    for m in members {
        let _ = writeln!(
            w,
            "    iifname \"{}\" jump port_{}",
            veth_of(m.ip),
            index_of(cfg, m.ip)
        );
    }
    let _ = writeln!(w, "  }}");
    for m in members {
        let i = index_of(cfg, m.ip);
        let (mac, ip) = (mac_of(m.ip), m.ip);
        // A DHCP client asks from 0.0.0.0 before it has (or while it renews from scratch) its
        // address: that one broadcast, from its own MAC, to the server port, passes.
        let dhcp = if m.dhcp {
            format!("    ether saddr {mac} ip saddr 0.0.0.0 ip daddr 255.255.255.255 udp sport 68 udp dport 67 accept\n")
        } else {
            String::new()
        };
        let _ = writeln!(
            w,
            "  chain port_{i} {{\n{dhcp}    ether saddr != {mac} counter name spoof_{i} drop\n    ether type arp arp saddr ether != {mac} counter name spoof_{i} drop\n    ether type arp arp saddr ip != {ip} counter name spoof_{i} drop\n    ether type ip ip saddr != {ip} counter name spoof_{i} drop\n    ether type ip6 drop\n    ether type != {{ ip, arp }} counter name spoof_{i} drop\n  }}"
        );
    }
    let _ = writeln!(
        w,
        "  chain forward {{\n    type filter hook forward priority 0; policy accept;"
    );
    for a in members {
        for b in members {
            if a.name != b.name && cfg.linked(a.name, b.name) {
                let _ = writeln!(
                    w,
                    "    iifname \"{}\" oifname \"{}\" accept",
                    veth_of(a.ip),
                    veth_of(b.ip)
                );
            }
        }
    }
    for m in members {
        let _ = writeln!(
            w,
            "    iifname \"{}\" counter name deny_{} drop",
            veth_of(m.ip),
            index_of(cfg, m.ip)
        );
    }
    let _ = writeln!(w, "  }}\n}}");
}

/// What ends every chain that containers' packets reach: their own deny counter, then drop.
fn deny(w: &mut String, cfg: &NetConfig, members: &[Member]) {
    for m in members {
        let _ = writeln!(
            w,
            "    ip saddr {} counter name deny_{} drop",
            m.ip,
            index_of(cfg, m.ip)
        );
    }
    let _ = writeln!(w, "    drop");
}

/// L3: host services, routing between containers and out, NAT, published ports.
fn inet_table(w: &mut String, cfg: &NetConfig, members: &[Member], limits: ConnLimits) {
    let t = &cfg.table;
    let br = &cfg.bridge;
    let gw = cfg.gateway();
    let _ = writeln!(w, "table inet {t} {{");
    counters(w, cfg, members);
    #[cfg(feature = "shape")]
    crate::datacap::objects(w, &quotas(members));
    // A container's new connections over its cap, or over its rate, are dropped before
    // conntrack confirms them (-150: after conntrack's lookup, before NAT): the table keeps
    // room for the device's. The rate bounds what the cap cannot: the entries of closed
    // connections, which stay (TIME_WAIT) without counting. Each rule's limit is its own: one
    // bucket per container.
    if limits != ConnLimits::default() {
        let _ = writeln!(
            w,
            "  chain conns {{\n    type filter hook prerouting priority -150; policy accept;"
        );
        for m in members {
            let i = index_of(cfg, m.ip);
            let from = format!("iifname \"{br}\" ip saddr {} ct state new", m.ip);
            if limits.cap > 0 {
                let cap = limits.cap;
                let _ = writeln!(
                    w,
                    "    {from} ct count over {cap} counter name deny_{i} drop"
                );
            }
            if let Some((Rate(n, minute), burst)) = limits.rate {
                let unit = if minute { "minute" } else { "second" };
                let _ = writeln!(
                    w,
                    "    {from} limit rate over {n}/{unit} burst {burst} packets counter name deny_{i} drop"
                );
            }
        }
        let _ = writeln!(w, "  }}");
    }
    #[cfg(feature = "shape")]
    if let Some(l) = &cfg.line {
        w.push_str(&crate::shape::line_chain(l));
    }
    let _ = writeln!(
        w,
        "  chain input {{\n    type filter hook input priority 0; policy accept;\n    iifname \"{br}\" jump from_containers\n  }}\n  chain from_containers {{\n    ct state established,related accept"
    );
    for (port, proto) in &cfg.host_services {
        let _ = writeln!(
            w,
            "    ip daddr {gw} {} dport {port} accept",
            proto_name(*proto)
        );
    }
    // berth's dnsmasq, for the containers whose package asked for DHCP
    for m in members.iter().filter(|m| m.dhcp) {
        let _ = writeln!(
            w,
            "    ip saddr {{ 0.0.0.0, {} }} udp sport 68 udp dport 67 accept",
            m.ip
        );
    }
    deny(w, cfg, members);
    let _ = writeln!(w, "  }}");
    let _ = writeln!(
        w,
        "  chain forward {{\n    type filter hook forward priority 0; policy accept;\n    iifname \"{br}\" oifname \"{br}\" jump between\n    iifname \"{br}\" jump outbound"
    );
    // Downloads count against a data cap before the connection's packets are accepted.
    #[cfg(feature = "shape")]
    for m in members {
        if let Some(q) = &m.quota {
            let to = format!("ip daddr {}", m.ip);
            w.push_str(&crate::datacap::download_rule(
                q,
                &to,
                &wan(cfg, "iifname"),
                br,
            ));
        }
    }
    let _ = writeln!(
        w,
        "    oifname \"{br}\" ct state established,related accept\n    oifname \"{br}\" ct status dnat accept\n    oifname \"{br}\" drop\n  }}\n  chain between {{"
    );
    for a in members {
        for b in members {
            if a.name != b.name && cfg.linked(a.name, b.name) {
                let _ = writeln!(w, "    ip saddr {} ip daddr {} accept", a.ip, b.ip);
            }
        }
    }
    deny(w, cfg, members);
    nat(w, cfg, members);
}

/// The outbound chain, published ports (DNAT) and masquerading out.
fn nat(w: &mut String, cfg: &NetConfig, members: &[Member]) {
    let br = &cfg.bridge;
    let net = format!("{}/{}", cfg.subnet.0, cfg.subnet.1);
    let _ = writeln!(w, "  }}\n  chain outbound {{");
    let out = if cfg.outbound.is_empty() {
        format!("oifname != \"{br}\"")
    } else {
        format!("oifname {}", set(&cfg.outbound))
    };
    #[cfg(feature = "shape")]
    for m in members {
        if let Some(q) = &m.quota {
            let from = format!("ip saddr {}", m.ip);
            w.push_str(&crate::datacap::upload_rule(q, &from, &wan(cfg, "oifname")));
        }
    }
    #[cfg(feature = "shape")]
    if let Some(l) = &cfg.line {
        w.push_str(&crate::shape::line_mark(l));
    }
    let _ = writeln!(w, "    ip saddr {net} {out} accept");
    deny(w, cfg, members);
    let _ = writeln!(w, "  }}");
    let inb = if cfg.publish_on.is_empty() {
        format!("iifname != \"{br}\"")
    } else {
        format!("iifname {}", set(&cfg.publish_on))
    };
    let _ = writeln!(
        w,
        "  chain prerouting {{\n    type nat hook prerouting priority -100; policy accept;"
    );
    for m in members {
        for p in m.publish {
            let _ = writeln!(
                w,
                "    {inb} {} dport {} dnat ip to {}:{}",
                proto_name(p.proto),
                p.host_port,
                m.ip,
                p.container_port
            );
        }
    }
    let _ = writeln!(
        w,
        "  }}\n  chain postrouting {{\n    type nat hook postrouting priority 100; policy accept;\n    ip saddr {net} {out} masquerade\n  }}\n}}"
    );
}

/// The members' data-cap quotas.
#[cfg(feature = "shape")]
fn quotas(members: &[Member]) -> Vec<crate::datacap::Quota> {
    members.iter().filter_map(|m| m.quota).collect()
}

/// The WAN's interfaces as a match on `dir` (`oifname`, `iifname`): `[network] outbound`
/// (where containers may go: every way out, a failover LTE link too), else the governed
/// uplink, else any but the bridge. A data cap counts what passes them.
#[cfg(feature = "shape")]
pub fn wan(cfg: &NetConfig, dir: &str) -> String {
    match (cfg.outbound.is_empty(), &cfg.line) {
        (false, _) => format!("{dir} {}", set(&cfg.outbound)),
        (true, Some(l)) => format!("{dir} \"{}\"", l.uplink),
        (true, None) => format!("{dir} != \"{}\"", cfg.bridge),
    }
}

/// Removes both tables (when no container has an address any more). Fails if they are absent.
pub fn teardown(cfg: &NetConfig) -> String {
    let t = &cfg.table;
    format!("table inet {t} {{}}\ndelete table inet {t}\ntable bridge {t} {{}}\ndelete table bridge {t}\n")
}

/// Adds the drop counters in `nft -j list counters …` output to `out`: (index, spoof, deny)
/// packet counts, summed over both tables.
pub fn add_counters(v: &serde_json::Value, out: &mut Vec<(u32, u64, u64)>) {
    for item in v["nftables"].as_array().into_iter().flatten() {
        let c = &item["counter"];
        let (Some(name), Some(pk)) = (c["name"].as_str(), c["packets"].as_u64()) else {
            continue;
        };
        let (kind, idx) = match name.split_once('_') {
            Some((k, i)) => (k, i.parse::<u32>().ok()),
            None => continue,
        };
        let Some(idx) = idx else { continue };
        let k = match out.iter().position(|e| e.0 == idx) {
            Some(k) => k,
            None => {
                out.push((idx, 0, 0));
                out.len() - 1
            }
        };
        match kind {
            "spoof" => out[k].1 += pk,
            "deny" => out[k].2 += pk,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(toml_text: &str) -> NetConfig {
        NetConfig::parse(Some(toml::from_str(toml_text).unwrap())).unwrap()
    }

    #[test]
    fn the_downloads_proxy() {
        assert_eq!(cfg("").proxy, None);
        assert_eq!(cfg("proxy = \"\"").proxy.as_deref(), Some(""));
        let p = cfg("proxy = \"http://10.0.0.1:3128\"").proxy;
        assert_eq!(p.as_deref(), Some("http://10.0.0.1:3128"));
        for bad in [
            "proxy = \"10.0.0.1:3128\"",
            "proxy = \"ftp://p\"",
            "proxy = \"http://p x\"",
        ] {
            let e = NetConfig::parse(Some(toml::from_str(bad).unwrap())).unwrap_err();
            assert_eq!(e.0, "network.proxy", "{bad}");
        }
    }

    #[test]
    fn connection_caps() {
        // Default: a quarter of the kernel's table; none while the table is unknown.
        let c = cfg("");
        assert_eq!(c.max_connections, Some((25, true)));
        assert_eq!(connection_cap(&c, Some(8192)), 2048);
        assert_eq!(connection_cap(&c, Some(3)), 1);
        assert_eq!(connection_cap(&c, Some(2047)), 511);
        assert_eq!(connection_cap(&c, Some(u32::MAX)), 1_073_741_823);
        assert_eq!(connection_cap(&c, None), 0);
        assert_eq!(connection_cap(&c, Some(0)), 0, "a table without a limit");
        let c = cfg("max_connections = \"500\"");
        assert_eq!(connection_cap(&c, None), 500);
        assert_eq!(connection_cap(&c, Some(100)), 500);
        assert_eq!(
            cfg("max_connections = \"100%\"").max_connections,
            Some((100, true))
        );
        let c = cfg("max_connections = \"off\"");
        assert_eq!(connection_cap(&c, Some(8192)), 0);
        for bad in ["0", "101%", "0%", "-1", "x", "5 %", "%", ""] {
            let e = NetConfig::parse(Some(
                toml::from_str(&format!("max_connections = \"{bad}\"")).unwrap(),
            ))
            .unwrap_err();
            assert_eq!(e.0, "network.max_connections", "{bad}");
            assert!(
                e.1.contains("N, P% (of nf_conntrack_max) or off"),
                "{}",
                e.1
            );
        }
    }

    #[test]
    fn connection_rates() {
        // Default: from the cap, a 240th of it a second (at least 1), a burst of a quarter
        // (at least 5); none without a cap.
        let c = cfg("");
        assert_eq!(c.connection_rate, RateConfig::Auto);
        assert_eq!(
            connection_limits(&c, Some(16384)),
            ConnLimits {
                cap: 4096,
                rate: Some((Rate(17, false), 1024))
            }
        );
        assert_eq!(
            connection_limits(&c, Some(100)).rate,
            Some((Rate(1, false), 6))
        );
        assert_eq!(connection_limits(&c, None), ConnLimits::default());
        assert_eq!(
            connection_limits(&c, Some(u32::MAX)).rate,
            Some((Rate(1_000_000, false), 1_000_000)),
            "within what can be written"
        );
        let c = cfg("max_connections = \"5\"");
        assert_eq!(connection_limits(&c, None).rate, Some((Rate(1, false), 5)));
        let off = cfg("max_connections = \"off\"");
        assert_eq!(connection_limits(&off, Some(8192)), ConnLimits::default());
        // Given: its own, the burst given or from the cap.
        let c = cfg("max_connections = \"400\"\nconnection_rate = \"20/s\"");
        assert_eq!(
            connection_limits(&c, None).rate,
            Some((Rate(20, false), 100))
        );
        let c = cfg("max_connections = \"off\"\nconnection_rate = \"600/minute burst 30\"");
        assert_eq!(
            connection_limits(&c, None),
            ConnLimits {
                cap: 0,
                rate: Some((Rate(600, true), 30))
            }
        );
        assert_eq!(
            cfg("connection_rate = \"3/m\"").connection_rate,
            RateConfig::Given(Rate(3, true), None)
        );
        let c = cfg("connection_rate = \"off\"");
        assert_eq!(connection_limits(&c, Some(8192)).rate, None);
        assert_eq!(connection_limits(&c, Some(8192)).cap, 2048);
        for bad in [
            "0/s",
            "5",
            "5/h",
            "/s",
            "x/s",
            "5/s burst",
            "5/s burst 0",
            "5/s bust 3",
            "5/s burst 3 4",
            "",
            "1000001/s",
            "5/s burst 1000001",
        ] {
            let e = NetConfig::parse(Some(
                toml::from_str(&format!("connection_rate = \"{bad}\"")).unwrap(),
            ))
            .unwrap_err();
            assert_eq!(e.0, "network.connection_rate", "{bad}");
        }
    }

    #[test]
    fn defaults_and_validation() {
        let c = cfg("");
        assert_eq!(c.bridge, "berth0");
        assert_eq!(c.subnet, ("10.87.0.0".parse().unwrap(), 24));
        assert_eq!(c.gateway().to_string(), "10.87.0.1");
        assert_eq!(c.modes.len(), 4);
        // the LAN: every interface but loopback, the bridge and berth's veths
        assert!(c.lan.is_empty() && !c.mdns);
        assert_eq!(c.dhcp_leases.len(), 3);
        for (dev, lan) in [
            ("br-lan", true),
            ("eth0", true),
            ("vbtoolong12", true),
            ("lo", false),
            ("berth0", false),
            ("vb0a570002", false),
            ("", false),
        ] {
            assert_eq!(c.is_lan(dev), lan, "{dev}");
        }
        let c = cfg("lan = \"br-lan lan2\"\ndhcp_leases = \"/tmp/l\"\nmdns = \"on\"");
        assert!(c.is_lan("lan2") && !c.is_lan("eth0"));
        assert_eq!((c.dhcp_leases, c.mdns), (vec!["/tmp/l".to_string()], true));
        assert!(cfg("dhcp_leases = \"\"").dhcp_leases.is_empty());
        let c = cfg("subnet = \"10.9.8.77/29\"\nhost_services = \"53/udp 80\"\nlinks = \"a:b\"");
        assert_eq!(c.subnet.0.to_string(), "10.9.8.72");
        assert_eq!(c.host_services, vec![(53, Proto::Udp), (80, Proto::Tcp)]);
        assert!(c.linked("b", "a") && !c.linked("a", "c"));
        for (bad, key) in [
            ("subnet = \"10.0.0.0/8\"", "network.subnet"),
            ("subnet = \"nope\"", "network.subnet"),
            ("bridge = \"a-very-long-bridge-name\"", "network.bridge"),
            ("bridge = \"br;x\"", "network.bridge"),
            ("table = \"x y\"", "network.table"),
            ("modes = \"none bridge\"", "network.modes"),
            ("host_services = \"0/tcp\"", "network.host_services"),
            ("host_services = \"53/sctp\"", "network.host_services"),
            ("dns = \"x\"", "network.dns"),
            ("links = \"a\"", "network.links"),
            ("lan = \"br-lan berth0\"", "network.lan"),
            ("lan = \"lo\"", "network.lan"),
            ("lan = \"br/lan\"", "network.lan"),
            ("dhcp_leases = \"leases\"", "network.dhcp_leases"),
            ("mdns = \"yes\"", "network.mdns"),
            ("bridges = \"x\"", "network"),
            ("macvlan_pool = \"192.168.1.50/24\"", "network.macvlan_pool"),
            ("macvlan_pool = \"192.168.1.60-192.168.1.50/24\"", "network.macvlan_pool"),
            ("macvlan_pool = \"192.168.1.250-192.168.2.5/24\"", "network.macvlan_pool"),
            ("macvlan_pool = \"192.168.1.0-192.168.1.9/24\"", "network.macvlan_pool"),
            ("macvlan_pool = \"192.168.1.250-192.168.1.255/24\"", "network.macvlan_pool"),
            ("macvlan_pool = \"10.87.0.9-10.87.0.20/16\"", "network.macvlan_pool"),
            ("macvlan_pool = \"10.0.0.1-10.0.32.1/8\"", "network.macvlan_pool"),
            ("macvlan_pool = \"192.168.1.50-192.168.1.59/33\"", "network.macvlan_pool"),
            ("macvlan_gateway = \"192.168.1.1\"", "network.macvlan_gateway"),
            (
                "macvlan_pool = \"192.168.1.50-192.168.1.59/24\"\nmacvlan_gateway = \"192.168.1.55\"",
                "network.macvlan_gateway",
            ),
            (
                "macvlan_pool = \"192.168.1.50-192.168.1.59/24\"\nmacvlan_gateway = \"192.168.2.1\"",
                "network.macvlan_gateway",
            ),
        ] {
            let e = NetConfig::parse(Some(toml::from_str(bad).unwrap())).unwrap_err();
            assert_eq!(e.0, key, "{bad}: {}", e.1);
        }
    }

    #[test]
    fn pool_is_static_and_runs_out() {
        let c = cfg("subnet = \"10.1.0.0/29\"");
        let mut l = Leases::new();
        let names = ["a", "b", "c", "d", "e"];
        for (i, n) in names.iter().enumerate() {
            assert_eq!(
                allocate(&c, &mut l, n, NetMode::Isolated)
                    .unwrap()
                    .to_string(),
                format!("10.1.0.{}", i + 2)
            );
        }
        // the same container gets the same address again
        assert_eq!(
            allocate(&c, &mut l, "c", NetMode::Isolated)
                .unwrap()
                .to_string(),
            "10.1.0.4"
        );
        let e = allocate(&c, &mut l, "f", NetMode::Isolated).unwrap_err();
        assert!(matches!(e, NetError::PoolExhausted { used: 5, .. }), "{e}");
        assert!(e.to_string().contains("10.1.0.0/29"));
        // a freed address is reused; the others keep theirs
        l.retain(|(n, _)| n != "b");
        assert_eq!(
            allocate(&c, &mut l, "f", NetMode::Isolated)
                .unwrap()
                .to_string(),
            "10.1.0.3"
        );
        assert_eq!(lease_of(&l, "a").unwrap().to_string(), "10.1.0.2");
        assert_eq!(parse_leases(&format_leases(&l)), l);
        assert_eq!(parse_leases("a 10.1.0.2\nbad\nb x\n").len(), 1);
        // a lease outside a changed subnet is replaced
        let c2 = cfg("subnet = \"10.2.0.0/24\"");
        assert_eq!(
            allocate(&c2, &mut l, "a", NetMode::Isolated)
                .unwrap()
                .to_string(),
            "10.2.0.2"
        );
    }

    #[test]
    fn macvlan_pool_gives_static_lan_addresses() {
        let c = cfg(
            "subnet = \"10.1.0.0/29\"\nmacvlan_parent = \"eth0\"\nmacvlan_pool = \"192.168.1.50-192.168.1.51/24\"\nmacvlan_gateway = \"192.168.1.1\"",
        );
        let mut l = Leases::new();
        let iso = allocate(&c, &mut l, "i", NetMode::Isolated).unwrap();
        assert_eq!(iso.to_string(), "10.1.0.2");
        let a = allocate(&c, &mut l, "a", NetMode::Macvlan).unwrap();
        assert_eq!(a.to_string(), "192.168.1.50");
        assert_eq!(
            allocate(&c, &mut l, "b", NetMode::Macvlan)
                .unwrap()
                .to_string(),
            "192.168.1.51"
        );
        assert_eq!(allocate(&c, &mut l, "a", NetMode::Macvlan).unwrap(), a);
        let e = allocate(&c, &mut l, "x", NetMode::Macvlan).unwrap_err();
        assert_eq!(
            e.to_string(),
            "x: no free address left in the pool 192.168.1.50-192.168.1.51/24 (2 containers have one); remove a package or widen [network] macvlan_pool"
        );
        // a package that moves from isolated to macvlan trades its lease
        l.retain(|(n, _)| n != "b");
        assert_eq!(
            allocate(&c, &mut l, "i", NetMode::Macvlan)
                .unwrap()
                .to_string(),
            "192.168.1.51"
        );
        assert_eq!(l.iter().filter(|(n, _)| n == "i").count(), 1);
        let keys = lxc_macvlan(&c, "eth0", Some(a));
        let get = |k: &str| {
            keys.iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("lxc.net.0.hwaddr"), Some("02:b7:c0:a8:01:32"));
        assert_eq!(
            get("lxc.net.0.ipv4.address"),
            Some("192.168.1.50/24 192.168.1.255")
        );
        assert_eq!(get("lxc.net.0.ipv4.gateway"), Some("192.168.1.1"));
        assert_eq!(keys.last().unwrap().0, "lxc.net.0.flags");
        // without a pool: no address, and no macvlan lease is ever given
        let c = cfg("macvlan_parent = \"eth0\"");
        assert!(lxc_macvlan(&c, "eth0", None)
            .iter()
            .all(|(k, _)| !k.contains("ipv4")));
        assert!(allocate(&c, &mut Leases::new(), "a", NetMode::Macvlan).is_err());
    }

    #[test]
    fn ports_names_and_macs() {
        let p = |h, proto| Publish {
            host_port: h,
            container_port: 80,
            proto,
        };
        let others = vec![("web".to_string(), vec![p(8080, Proto::Tcp)])];
        assert!(check_ports("api", &[p(8080, Proto::Udp)], &others).is_ok());
        assert!(check_ports("web", &[p(8080, Proto::Tcp)], &others).is_ok());
        let e = check_ports("api", &[p(8080, Proto::Tcp)], &others).unwrap_err();
        assert_eq!(
            e.to_string(),
            "api: host port 8080/tcp is already published by web"
        );
        let ip: Ipv4Addr = "10.87.0.2".parse().unwrap();
        assert_eq!(mac_of(ip), "02:b7:0a:57:00:02");
        assert_eq!(veth_of(ip), "vb0a570002");
        assert!(veth_of("255.255.255.255".parse().unwrap()).len() <= 15);
        assert!(overlaps(
            ("10.87.0.0".parse().unwrap(), 24),
            ("10.0.0.0".parse().unwrap(), 8)
        ));
        assert!(!overlaps(
            ("10.87.0.0".parse().unwrap(), 24),
            ("10.87.1.0".parse().unwrap(), 24)
        ));
        assert!(check_mode(&cfg("modes = \"none\""), "x", NetMode::Isolated).is_err());
    }

    #[cfg(feature = "shape")]
    #[test]
    fn data_caps_count_both_ways_over_the_wan_before_anything_is_accepted() {
        let q = |index, over| {
            Some(crate::datacap::Quota {
                index,
                cap: 4 << 20,
                used: 7,
                over,
            })
        };
        let m = [
            Member {
                name: "a",
                ip: "10.87.0.2".parse().unwrap(),
                publish: &[],
                dhcp: false,
                quota: q(2, crate::datacap::Over::Drop),
            },
            Member {
                name: "b",
                ip: "10.87.0.3".parse().unwrap(),
                publish: &[],
                dhcp: false,
                quota: None,
            },
        ];
        for (toml, up, down) in [
            ("", "oifname != \"berth0\"", "iifname != \"berth0\""),
            (
                "outbound = \"wan0\"",
                "oifname { \"wan0\" }",
                "iifname { \"wan0\" }",
            ),
            (
                "uplink = \"ppp0\"\nuplink_rate = \"20mbit\"",
                "oifname \"ppp0\"",
                "iifname \"ppp0\"",
            ),
            // A failover link beside the governed line: every way out counts.
            (
                "uplink = \"ppp0\"\nuplink_rate = \"20mbit\"\noutbound = \"ppp0 wwan0\"",
                "oifname { \"ppp0\", \"wwan0\" }",
                "iifname { \"ppp0\", \"wwan0\" }",
            ),
        ] {
            let r = ruleset(&cfg(toml), &m, ConnLimits::default());
            assert!(
                r.contains("  quota q_2 { over 4194304 bytes used 7 bytes }\n"),
                "{r}"
            );
            assert!(!r.contains("q_3"), "{r}");
            let upload = format!("    ip saddr 10.87.0.2 {up} quota name q_2 drop\n");
            let download =
                format!("    {down} oifname \"berth0\" ip daddr 10.87.0.2 ct state established,related quota name q_2 drop\n");
            let (Some(u), Some(d)) = (r.find(&upload), r.find(&download)) else {
                panic!("{toml}: {r}");
            };
            // Each before the accept it would otherwise never reach.
            assert!(u < r.find("    ip saddr 10.87.0.0/24").unwrap(), "{r}");
            assert!(
                d < r
                    .find("ct state established,related accept\n    oifname")
                    .unwrap(),
                "{r}"
            );
        }
    }

    #[test]
    fn ruleset_text() {
        let c = cfg(
            "table = \"bt\"\npublish_on = \"lan0\"\nhost_services = \"53/udp\"\nlinks = \"a:b\"",
        );
        let pubs = [Publish {
            host_port: 8080,
            container_port: 80,
            proto: Proto::Tcp,
        }];
        let m = [
            Member {
                name: "a",
                ip: "10.87.0.2".parse().unwrap(),
                publish: &pubs,
                dhcp: true,
                #[cfg(feature = "shape")]
                quota: None,
            },
            Member {
                name: "b",
                ip: "10.87.0.3".parse().unwrap(),
                publish: &[],
                dhcp: false,
                #[cfg(feature = "shape")]
                quota: None,
            },
            Member {
                name: "c",
                ip: "10.87.0.4".parse().unwrap(),
                publish: &[],
                dhcp: false,
                #[cfg(feature = "shape")]
                quota: None,
            },
        ];
        let r = ruleset(&c, &m, ConnLimits::default());
        // atomic replace: declare + delete before the new tables
        assert!(r.starts_with(
            "table inet bt {}\ndelete table inet bt\ntable bridge bt {}\ndelete table bridge bt\ntable bridge bt {\n"
        ), "{r}");
        for want in [
            "iifname \"vb0a570002\" jump port_2",
            "ether saddr != 02:b7:0a:57:00:02 counter name spoof_2 drop",
            "ether type arp arp saddr ip != 10.87.0.2 counter name spoof_2 drop",
            "ether type ip ip saddr != 10.87.0.3 counter name spoof_3 drop",
            "ether type != { ip, arp } counter name spoof_4 drop",
            "iifname \"vb0a570002\" oifname \"vb0a570003\" accept",
            "iifname \"vb0a570003\" oifname \"vb0a570002\" accept",
            "iifname \"vb0a570004\" counter name deny_4 drop",
            "ip daddr 10.87.0.1 udp dport 53 accept",
            "ip saddr 10.87.0.2 ip daddr 10.87.0.3 accept",
            "ip saddr 10.87.0.4 counter name deny_4 drop",
            "iifname { \"lan0\" } tcp dport 8080 dnat ip to 10.87.0.2:80",
            "ip saddr 10.87.0.0/24 oifname != \"berth0\" masquerade",
            "counter spoof_3 {}",
            // a asked for DHCP: its DISCOVER passes its port and reaches dnsmasq
            "chain port_2 {\n    ether saddr 02:b7:0a:57:00:02 ip saddr 0.0.0.0 ip daddr 255.255.255.255 udp sport 68 udp dport 67 accept\n",
            "ip saddr { 0.0.0.0, 10.87.0.2 } udp sport 68 udp dport 67 accept",
        ] {
            assert!(r.contains(want), "missing {want:?} in\n{r}");
        }
        // b did not: a DHCP request from 0.0.0.0 is a spoofed source
        assert_eq!(r.matches("udp sport 68").count(), 2, "{r}");
        // No limits: no chain of them.
        assert!(!r.contains("ct count") && !r.contains("chain conns"), "{r}");
        let cap = |cap| ConnLimits { cap, rate: None };
        let r = ruleset(&c, &m, cap(300));
        assert!(r.contains("  chain conns {\n    type filter hook prerouting priority -150; policy accept;\n    iifname \"berth0\" ip saddr 10.87.0.2 ct state new ct count over 300 counter name deny_2 drop\n"), "{r}");
        assert_eq!(r.matches("ct count over 300").count(), 3, "{r}");
        assert!(!r.contains("limit rate"), "{r}");
        // The cap, then the rate: a SYN over the cap takes none of the rate's tokens.
        let both = ConnLimits {
            cap: 300,
            rate: Some((Rate(2, false), 75)),
        };
        let r = ruleset(&c, &m, both);
        assert!(r.contains("    iifname \"berth0\" ip saddr 10.87.0.3 ct state new ct count over 300 counter name deny_3 drop\n    iifname \"berth0\" ip saddr 10.87.0.3 ct state new limit rate over 2/second burst 75 packets counter name deny_3 drop\n"), "{r}");
        assert_eq!(r.matches("limit rate over 2/second").count(), 3, "{r}");
        // A rate alone (a kernel without `ct count`).
        let r = ruleset(&c, &m, ConnLimits { cap: 0, ..both });
        assert!(
            !r.contains("ct count") && r.matches("limit rate over").count() == 3,
            "{r}"
        );
        let a = dnsmasq_args(&c, &m, "/run/p", &["192.0.2.53".into()]);
        assert_eq!(
            a.iter().filter(|x| x.starts_with("--dhcp-host=")).count(),
            1
        );
        for want in [
            "--port=0",
            "--interface=berth0",
            "--dhcp-range=10.87.0.0,static,255.255.255.0,1h",
            "--dhcp-host=02:b7:0a:57:00:02,10.87.0.2",
            "--pid-file=/run/p",
            "--dhcp-option=option:router,10.87.0.1",
            "--dhcp-option=option:dns-server,192.0.2.53",
        ] {
            assert!(a.iter().any(|x| x == want), "missing {want} in {a:?}");
        }
        // no link between a and c
        assert!(!r.contains("oifname \"vb0a570004\" accept"));
        assert_eq!(r.matches("table inet bt {\n").count(), 1);
        assert!(teardown(&c).contains("delete table bridge bt"));
    }

    #[test]
    fn counters() {
        let v: serde_json::Value = serde_json::from_str(r#"{"nftables":[{"metainfo":{}},{"counter":{"family":"bridge","name":"spoof_2","table":"b","handle":1,"packets":3,"bytes":9}},{"counter":{"family":"inet","name":"deny_2","table":"b","handle":2,"packets":4,"bytes":9}},{"counter":{"family":"bridge","name":"deny_2","packets":1,"bytes":1}},{"counter":{"name":"other","packets":1}}]}"#).unwrap();
        let mut c = Vec::new();
        add_counters(&v, &mut c);
        assert_eq!(c, vec![(2, 3, 5)]);
    }
}
