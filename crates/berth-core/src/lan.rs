//! The LAN's hosts (pure): the kernel's neighbour table as rtnetlink dumps it (RTM_NEWNEIGH
//! messages, in the host's byte order), `/proc/net/arp` where netlink fails, host names from
//! DHCP servers' files and from mDNS reverse lookups (the query and its answer as bytes).
//! The daemon does the I/O (`daemon/prepare/net.rs` `hosts`); every byte it hands in here comes
//! from the kernel or the LAN, so nothing here panics on any input
//! (`fuzz/fuzz_targets/lan.rs`).

use std::net::{IpAddr, Ipv4Addr};

/// Where a host's name came from.
pub const DHCP: &str = "dhcp";
pub const MDNS: &str = "mdns";

/// A host in the neighbour table.
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    pub ip: IpAddr,
    /// Lowercase, colon-separated.
    pub mac: String,
    /// The interface's index (0 where only its name is known) and name (empty until the
    /// caller has looked it up).
    pub ifindex: u32,
    pub dev: String,
    /// The neighbour state (reachable, stale, delay, probe, permanent); None from
    /// /proc/net/arp, which does not tell.
    pub state: Option<&'static str>,
    /// Clock ticks (USER_HZ) since the kernel last heard of the host; None for permanent
    /// entries and from /proc/net/arp.
    pub ticks: Option<u32>,
    pub hostname: Option<String>,
    /// [`DHCP`] or [`MDNS`].
    pub source: Option<&'static str>,
}

impl Host {
    fn new(ip: IpAddr, mac: String) -> Host {
        Host {
            ip,
            mac,
            ifindex: 0,
            dev: String::new(),
            state: None,
            ticks: None,
            hostname: None,
            source: None,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LanError {
    #[error("netlink: the kernel answered error {0}")]
    Kernel(i32),
    #[error("netlink: malformed answer")]
    Malformed,
}

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
/// NLM_F_REQUEST | NLM_F_DUMP
const DUMP: u16 = 0x301;
const NLMSG_HDRLEN: usize = 16;
/// nlmsghdr + ndmsg
const NEIGH_HDRLEN: usize = NLMSG_HDRLEN + 12;

/// The request for a dump of every neighbour table (family AF_UNSPEC: IPv4's ARP and IPv6's
/// neighbour discovery).
pub fn neigh_request(seq: u32) -> [u8; NEIGH_HDRLEN] {
    let mut r = [0u8; NEIGH_HDRLEN];
    r[..4].copy_from_slice(&(NEIGH_HDRLEN as u32).to_ne_bytes());
    r[4..6].copy_from_slice(&RTM_GETNEIGH.to_ne_bytes());
    r[6..8].copy_from_slice(&DUMP.to_ne_bytes());
    r[8..12].copy_from_slice(&seq.to_ne_bytes());
    r
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_ne_bytes([b[i], b[i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// What follows a netlink message or attribute of length `len` in `b`.
fn after(b: &[u8], len: usize) -> &[u8] {
    &b[((len + 3) & !3).min(b.len())..]
}

/// Adds the usable neighbours of one datagram of the dump answering request `seq` to `out`;
/// true once the dump is complete. Skipped: states incomplete, failed, noarp and none,
/// entries without a link-layer address (or an all-zero one), families other than IPv4
/// and IPv6.
pub fn parse_neigh(buf: &[u8], seq: u32, out: &mut Vec<Host>) -> Result<bool, LanError> {
    let mut b = buf;
    while !b.is_empty() {
        if b.len() < NLMSG_HDRLEN {
            return Err(LanError::Malformed);
        }
        let len = u32_at(b, 0) as usize;
        if len < NLMSG_HDRLEN || len > b.len() {
            return Err(LanError::Malformed);
        }
        let m = &b[..len];
        if u32_at(m, 8) == seq {
            match u16_at(m, 4) {
                // a dump's end carries its error (0: complete)
                NLMSG_DONE | NLMSG_ERROR => {
                    let e = if len >= NLMSG_HDRLEN + 4 {
                        u32_at(m, NLMSG_HDRLEN) as i32
                    } else {
                        0
                    };
                    if e != 0 {
                        return Err(LanError::Kernel(e.wrapping_neg()));
                    }
                    if u16_at(m, 4) == NLMSG_DONE {
                        return Ok(true);
                    }
                }
                RTM_NEWNEIGH => neighbour(m, out)?,
                _ => {}
            }
        }
        b = after(b, len);
    }
    Ok(false)
}

fn neighbour(m: &[u8], out: &mut Vec<Host>) -> Result<(), LanError> {
    if m.len() < NEIGH_HDRLEN {
        return Err(LanError::Malformed);
    }
    let family = m[16];
    let nud = u16_at(m, 24);
    let state = match nud {
        0x02 => "reachable",
        0x04 => "stale",
        0x08 => "delay",
        0x10 => "probe",
        0x80 => "permanent",
        _ => return Ok(()),
    };
    let (mut ip, mut mac, mut ticks) = (None, &[][..], None);
    let mut a = &m[NEIGH_HDRLEN..];
    while a.len() >= 4 {
        let len = u16_at(a, 0) as usize;
        if len < 4 || len > a.len() {
            return Err(LanError::Malformed);
        }
        let v = &a[4..len];
        // NLA_TYPE_MASK: without the nested and byte-order flags
        match (u16_at(a, 2) & 0x3fff, family, v.len()) {
            // NDA_DST
            (1, 2, 4) => ip = <[u8; 4]>::try_from(v).ok().map(IpAddr::from),
            (1, 10, 16) => ip = <[u8; 16]>::try_from(v).ok().map(IpAddr::from),
            // NDA_LLADDR
            (2, ..) => mac = v,
            // NDA_CACHEINFO: ages of the last confirmation, use, update (jiffies_to_clock_t)
            (3, _, 16..) => ticks = Some(u32_at(v, 0).min(u32_at(v, 8))),
            _ => {}
        }
        a = after(a, len);
    }
    let Some(ip) = ip else { return Ok(()) };
    if mac.iter().all(|x| *x == 0) {
        return Ok(());
    }
    let mut text = Vec::with_capacity(mac.len() * 3);
    for x in mac {
        if !text.is_empty() {
            text.push(b':');
        }
        text.push(b"0123456789abcdef"[usize::from(x >> 4)]);
        text.push(b"0123456789abcdef"[usize::from(x & 15)]);
    }
    let text = String::from_utf8(text).unwrap_or_default();
    let mut h = Host::new(ip, text);
    h.ifindex = u32_at(m, 20);
    h.state = Some(state);
    h.ticks = ticks.filter(|_| nud != 0x80);
    out.push(h);
    Ok(())
}

/// The neighbours in `/proc/net/arp` (IPv4 only, no state but permanent, no age): complete
/// entries with a MAC.
pub fn parse_proc_arp(text: &str) -> Vec<Host> {
    let mut out = Vec::new();
    for l in text.lines().skip(1) {
        // IP address, HW type, Flags, HW address, Mask, Device
        let f: Vec<&str> = l.split_whitespace().collect();
        let [ip, _, flags, mac, _, dev, ..] = f[..] else {
            continue;
        };
        // the lowest hex digit holds ATF_COM (complete, 2) and ATF_PERM (4)
        let flags = flags
            .chars()
            .last()
            .and_then(|c| c.to_digit(16))
            .unwrap_or(0);
        let (Ok(ip), true) = (ip.parse::<Ipv4Addr>(), flags & 2 != 0) else {
            continue;
        };
        if mac.bytes().all(|b| b == b'0' || b == b':') {
            continue;
        }
        let mut h = Host::new(ip.into(), mac.to_ascii_lowercase());
        h.dev = dev.into();
        // ATF_PERM
        h.state = (flags & 4 != 0).then_some("permanent");
        out.push(h);
    }
    out
}

/// A host name as a LAN may tell it: letters, digits, `-`, `_`, `.`; at most 253 bytes.
fn host_name(s: &str) -> Option<String> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    ok.then(|| s.to_string())
}

/// A name from a DHCP server's file: (address, MAC or "" where the line has none, name).
pub type DhcpName = (IpAddr, String, String);

/// Adds the names in a DHCP server's file to `out`: dnsmasq's leases (`EXPIRY MAC ADDRESS
/// NAME CLIENT-ID`, also OpenWrt's /tmp/dhcp.leases; DHCPv6 lines have an IAID where the MAC
/// is) and hosts-file lines (`ADDRESS NAME... SHORT-NAME`, odhcpd's /tmp/hosts/odhcpd; its
/// `#` lines are skipped).
pub fn dhcp_names(text: &str, out: &mut Vec<DhcpName>) {
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (ip, mac, name) = match f[..] {
            [ip, .., name] if f.len() > 1 && ip.parse::<IpAddr>().is_ok() => (ip, "", name),
            [expiry, mac, ip, name, ..] if expiry.bytes().all(|b| b.is_ascii_digit()) => {
                (ip, mac, name)
            }
            _ => continue,
        };
        let (Ok(ip), Some(name)) = (ip.parse(), host_name(name)) else {
            continue;
        };
        let mac = if mac.contains(':') {
            mac.to_ascii_lowercase()
        } else {
            String::new()
        };
        out.push((ip, mac, name));
    }
}

/// Names hosts from DHCP: by address where the lease's MAC (if it has one) is the host's,
/// else by MAC (the same machine's other addresses, such as its IPv6 ones).
pub fn name_from_dhcp(hosts: &mut [Host], names: &[DhcpName]) {
    for h in hosts {
        let by_ip = names
            .iter()
            .find(|n| n.0 == h.ip && (n.1.is_empty() || n.1 == h.mac));
        if let Some(n) = by_ip.or_else(|| names.iter().find(|n| n.1 == h.mac)) {
            h.hostname = Some(n.2.clone());
            h.source = Some(DHCP);
        }
    }
}

/// Hosts without a name take the one another address of the same MAC has.
pub fn share_names(hosts: &mut [Host]) {
    for i in 0..hosts.len() {
        if hosts[i].hostname.is_some() {
            continue;
        }
        if let Some(o) = hosts
            .iter()
            .find(|o| o.hostname.is_some() && o.mac == hosts[i].mac)
        {
            let (name, source) = (o.hostname.clone(), o.source);
            hosts[i].hostname = name;
            hosts[i].source = source;
        }
    }
}

/// By interface, then address (IPv4 first). An insertion sort: a LAN's few hundred hosts
/// at most, and kilobytes less code on the device than the standard library's sorts.
pub fn sort(hosts: &mut [Host]) {
    fn key(h: &Host) -> (&[u8], bool, u128) {
        let ip = match h.ip {
            IpAddr::V4(a) => u32::from(a).into(),
            IpAddr::V6(a) => u128::from(a),
        };
        (h.dev.as_bytes(), h.ip.is_ipv6(), ip)
    }
    for i in 1..hosts.len() {
        let mut j = i;
        while j > 0 && key(&hosts[j - 1]) > key(&hosts[j]) {
            hosts.swap(j - 1, j);
            j -= 1;
        }
    }
}

/// `d.c.b.a.in-addr.arpa`: the name an mDNS responder answers a reverse lookup of its
/// address for.
fn reverse_name(ip: Ipv4Addr) -> String {
    let o = ip.octets();
    format!("{}.{}.{}.{}.in-addr.arpa", o[3], o[2], o[1], o[0])
}

/// An mDNS query for the PTR records of `ips` (reverse lookups), each with the QU bit: a
/// unicast answer is asked for (our source port is not 5353, so responders answer to it
/// anyway, as to a legacy resolver).
pub fn mdns_query(id: u16, ips: &[Ipv4Addr]) -> Vec<u8> {
    let mut p = Vec::with_capacity(12 + 30 * ips.len());
    let [i0, i1] = id.to_be_bytes();
    let [q0, q1] = (ips.len() as u16).to_be_bytes();
    p.extend_from_slice(&[i0, i1, 0, 0, q0, q1, 0, 0, 0, 0, 0, 0]);
    for ip in ips {
        for label in reverse_name(*ip).split('.') {
            p.push(label.len() as u8);
            p.extend_from_slice(label.as_bytes());
        }
        // end of name, type PTR, class IN with the QU bit
        p.extend_from_slice(&[0, 0, 12, 0x80, 1]);
    }
    p
}

/// The DNS name at `pos` of message `p` (following compression pointers) and where the
/// bytes after it start.
fn dns_name(p: &[u8], mut pos: usize) -> Option<(String, usize)> {
    let mut name = String::new();
    let mut end = None;
    // each round reads a label or follows a pointer: bounded against pointer loops
    for _ in 0..128 {
        let len = *p.get(pos)? as usize;
        match len {
            0 => return Some((name, end.unwrap_or(pos + 1))),
            1..=63 => {
                let label = std::str::from_utf8(p.get(pos + 1..pos + 1 + len)?).ok()?;
                if !name.is_empty() {
                    name.push('.');
                }
                name.push_str(label);
                pos += 1 + len;
            }
            0xc0.. => {
                end.get_or_insert(pos + 2);
                pos = ((len & 0x3f) << 8) | *p.get(pos + 1)? as usize;
            }
            _ => return None,
        }
    }
    None
}

/// The host name in an mDNS answer from `from` to query `id`: its PTR record for the
/// reverse name of `from` itself (a host names only its own address), without `.local`.
pub fn mdns_answer(p: &[u8], id: u16, from: Ipv4Addr) -> Option<String> {
    let word = |i: usize| -> Option<usize> {
        Some(u16::from_be_bytes([*p.get(i)?, *p.get(i + 1)?]) as usize)
    };
    // a response (QR) to our query (legacy unicast answers repeat its id; 0 is mDNS's own)
    let rid = word(0)? as u16;
    if p.get(2)? & 0x80 == 0 || (rid != id && rid != 0) {
        return None;
    }
    let records = word(6)? + word(8)? + word(10)?;
    let mut pos = 12;
    for _ in 0..word(4)? {
        pos = dns_name(p, pos)?.1 + 4;
    }
    let want = reverse_name(from);
    for _ in 0..records {
        let (owner, at) = dns_name(p, pos)?;
        let (rtype, len) = (word(at)?, word(at + 8)?);
        let data = at + 10;
        if rtype == 12 && owner.eq_ignore_ascii_case(&want) {
            let (target, _) = dns_name(p.get(..data + len)?, data)?;
            let mut name = host_name(target.trim_end_matches('.'))?;
            // ASCII only (host_name): the byte index is a character boundary
            let n = name.len();
            if n > 6 && name[n - 6..].eq_ignore_ascii_case(".local") {
                name.truncate(n - 6);
            }
            return Some(name);
        }
        pos = data + len;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One netlink message: header (type, seq) and payload.
    fn msg(kind: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let len = NLMSG_HDRLEN + payload.len();
        let mut m = Vec::new();
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&2u16.to_ne_bytes()); // NLM_F_MULTI
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&4242u32.to_ne_bytes());
        m.extend_from_slice(payload);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    fn attr(kind: u16, v: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&(4 + v.len() as u16).to_ne_bytes());
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(v);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    /// An RTM_NEWNEIGH message as the kernel's neigh_fill_info writes it.
    fn neigh(family: u8, ifindex: u32, state: u16, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut p = vec![family, 0, 0, 0];
        p.extend_from_slice(&ifindex.to_ne_bytes());
        p.extend_from_slice(&state.to_ne_bytes());
        p.extend_from_slice(&[0, 1]); // flags, type RTN_UNICAST
        for a in attrs {
            p.extend_from_slice(a);
        }
        msg(RTM_NEWNEIGH, 7, &p)
    }

    fn cacheinfo(confirmed: u32, used: u32, updated: u32) -> Vec<u8> {
        let mut v = Vec::new();
        for x in [confirmed, used, updated, 1] {
            v.extend_from_slice(&x.to_ne_bytes());
        }
        attr(3, &v)
    }

    const MAC: [u8; 6] = [0x02, 0x00, 0x5e, 0x00, 0x00, 0x0a];

    #[test]
    fn the_request_dumps_every_family() {
        let r = neigh_request(9);
        assert_eq!(u32_at(&r, 0), 28);
        assert_eq!(u16_at(&r, 4), RTM_GETNEIGH);
        assert_eq!(u16_at(&r, 6), 0x301);
        assert_eq!(u32_at(&r, 8), 9);
        assert_eq!(r[16], 0, "AF_UNSPEC");
    }

    #[test]
    fn neighbours_with_state_mac_and_age() {
        let mut dump = neigh(
            2,
            3,
            0x02,
            &[
                attr(1, &[192, 0, 2, 2]),
                attr(2, &MAC),
                attr(4, &0u32.to_ne_bytes()), // NDA_PROBES
                cacheinfo(250, 100, 900),
            ],
        );
        // a stale IPv6 neighbour: the later of its confirmation and its update counts
        let v6: std::net::Ipv6Addr = "fe80::5e:ff:fe00:a".parse().unwrap();
        dump.extend(neigh(
            10,
            3,
            0x04,
            &[
                attr(1, &v6.octets()),
                attr(2, &MAC),
                cacheinfo(6000, 10, 1200),
            ],
        ));
        // permanent: no age
        dump.extend(neigh(
            2,
            4,
            0x80,
            &[
                attr(1, &[192, 0, 2, 9]),
                attr(2, &[0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF]),
                cacheinfo(5, 5, 5),
            ],
        ));
        // skipped: incomplete, failed, noarp, no lladdr, zero lladdr, another family
        dump.extend(neigh(2, 3, 0x01, &[attr(1, &[192, 0, 2, 3])]));
        dump.extend(neigh(2, 3, 0x20, &[attr(1, &[192, 0, 2, 4])]));
        dump.extend(neigh(
            10,
            3,
            0x40,
            &[attr(1, &[0xff; 16]), attr(2, &[0x33, 0x33, 0, 0, 0, 1])],
        ));
        dump.extend(neigh(2, 3, 0x04, &[attr(1, &[192, 0, 2, 5])]));
        dump.extend(neigh(
            2,
            3,
            0x02,
            &[attr(1, &[192, 0, 2, 6]), attr(2, &[0; 6])],
        ));
        dump.extend(neigh(7, 3, 0x02, &[attr(1, &[1, 2, 3, 4]), attr(2, &MAC)]));
        // another request's message is not ours
        let mut other = neigh(2, 3, 0x02, &[attr(1, &[192, 0, 2, 7]), attr(2, &MAC)]);
        other[8..12].copy_from_slice(&8u32.to_ne_bytes());
        dump.extend(other);
        let mut out = Vec::new();
        assert_eq!(parse_neigh(&dump, 7, &mut out), Ok(false));
        assert_eq!(out.len(), 3, "{out:?}");
        let h = &out[0];
        assert_eq!(h.ip.to_string(), "192.0.2.2");
        assert_eq!(h.mac, "02:00:5e:00:00:0a");
        assert_eq!(
            (h.ifindex, h.state, h.ticks),
            (3, Some("reachable"), Some(250))
        );
        assert_eq!(out[1].ip, IpAddr::from(v6));
        assert_eq!((out[1].state, out[1].ticks), (Some("stale"), Some(1200)));
        assert_eq!(out[2].mac, "aa:bb:cc:dd:ee:ff");
        assert_eq!((out[2].state, out[2].ticks), (Some("permanent"), None));

        // the end of the dump, then an error in its end, then an error message
        let done = msg(NLMSG_DONE, 7, &0i32.to_ne_bytes());
        assert_eq!(parse_neigh(&done, 7, &mut out), Ok(true));
        let bad = msg(NLMSG_DONE, 7, &(-16i32).to_ne_bytes());
        assert_eq!(parse_neigh(&bad, 7, &mut out), Err(LanError::Kernel(16)));
        let mut e = (-93i32).to_ne_bytes().to_vec();
        e.extend_from_slice(&neigh_request(7)[..16]);
        assert_eq!(
            parse_neigh(&msg(NLMSG_ERROR, 7, &e), 7, &mut out),
            Err(LanError::Kernel(93))
        );
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn malformed_dumps_are_errors_not_panics() {
        let good = neigh(2, 3, 0x02, &[attr(1, &[192, 0, 2, 2]), attr(2, &MAC)]);
        let mut out = Vec::new();
        for cut in 0..good.len() {
            let r = parse_neigh(&good[..cut], 7, &mut out);
            assert!(cut == 0 || r.is_err(), "{cut}: {r:?}");
        }
        // an attribute longer than its message
        let mut long = good.clone();
        long[NEIGH_HDRLEN..NEIGH_HDRLEN + 2].copy_from_slice(&200u16.to_ne_bytes());
        assert_eq!(parse_neigh(&long, 7, &mut out), Err(LanError::Malformed));
        // a message length below the header's
        let mut short = good.clone();
        short[..4].copy_from_slice(&3u32.to_ne_bytes());
        assert_eq!(parse_neigh(&short, 7, &mut out), Err(LanError::Malformed));
        assert!(out.is_empty());
    }

    /// A dump of this machine's kernel (Linux 6.1, x86_64, request seq 5) taken 3 s after
    /// the device pinged each neighbour: a bridge `brlan` (index 2) with a LAN host
    /// (192.0.2.2 and its link-local IPv6 address), `wan0` (index 4) with the WAN's
    /// 198.51.100.2, and the noarp multicast entries the kernel keeps.
    #[cfg(target_endian = "little")]
    #[test]
    fn a_dump_of_the_kernel() {
        let dump = include_bytes!("../../../fuzz/seeds/lan/neigh-dump");
        let mut out = Vec::new();
        assert_eq!(parse_neigh(dump, 5, &mut out), Ok(true));
        let got: Vec<String> = out
            .iter()
            .map(|h| format!("{} {} {} {:?}", h.ifindex, h.ip, h.mac, h.state))
            .collect();
        assert_eq!(
            got,
            [
                "2 192.0.2.2 02:00:5e:00:00:0a Some(\"reachable\")",
                "4 198.51.100.2 02:00:5e:00:00:77 Some(\"reachable\")",
                "2 fe80::5eff:fe00:a 02:00:5e:00:00:0a Some(\"reachable\")",
            ]
        );
        // `ip -s neigh` said "used 3/3/3" (seconds, USER_HZ 100): ticks, not jiffies or ms
        for h in &out {
            assert!((300..400).contains(&h.ticks.unwrap()), "{h:?}");
        }
        // the same bytes from another request are not this dump's
        assert_eq!(parse_neigh(dump, 6, &mut Vec::new()), Ok(false));
    }

    #[test]
    fn proc_arp_fallback() {
        let arp =
            "IP address       HW type     Flags       HW address            Mask     Device\n\
                   192.0.2.2        0x1         0x2         02:00:5E:00:00:0A     *        lan0\n\
                   192.0.2.9        0x1         0x0         00:00:00:00:00:00     *        lan0\n\
                   192.0.2.8        0x1         0x6         aa:bb:cc:dd:ee:ff     *        lan0\n\
                   192.0.2.7        0x1         0x4         aa:bb:cc:dd:ee:07     *        lan0\n\
                   bad line\n";
        let h = parse_proc_arp(arp);
        assert_eq!(h.len(), 2, "{h:?}");
        assert_eq!(h[0].mac, "02:00:5e:00:00:0a");
        assert_eq!(
            (h[0].dev.as_str(), h[0].state, h[0].ticks),
            ("lan0", None, None)
        );
        assert_eq!(h[1].state, Some("permanent"));
    }

    #[test]
    fn dhcp_names_from_dnsmasq_openwrt_and_odhcpd() {
        let mut names = Vec::new();
        // dnsmasq (and OpenWrt's /tmp/dhcp.leases), with its DHCPv6 part
        dhcp_names(
            "1700000000 02:00:5E:00:00:0A 192.0.2.2 laptop 01:02:00:5e:00:00:0a\n\
             1700000000 11:22:33:44:55:66 192.0.2.7 * *\n\
             1700000000 11:22:33:44:55:77 192.0.2.8 bad;name *\n\
             duid 00:01:00:01:2c:5f:1a:2b:02:00:5e:00:00:01\n\
             1700000000 1234567 2001:db8::7 printer 00:01:00:01\n",
            &mut names,
        );
        // odhcpd's state file: `#` lines and hosts lines
        dhcp_names(
            "# br-lan 0001000129 1a2b3c4d nas 1700000000 5 128 2001:db8::5/128\n\
             2001:db8::5\tnas.lan\tnas\n\
             192.0.2.30\ttv\n\
             192.0.2.31\n",
            &mut names,
        );
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            names,
            [
                (ip("192.0.2.2"), "02:00:5e:00:00:0a".into(), "laptop".into()),
                (ip("2001:db8::7"), String::new(), "printer".into()),
                (ip("2001:db8::5"), String::new(), "nas".into()),
                (ip("192.0.2.30"), String::new(), "tv".into()),
            ]
        );
        let host = |ip: &str, mac: &str| Host::new(ip.parse().unwrap(), mac.into());
        let mut hosts = [
            host("192.0.2.2", "02:00:5e:00:00:0a"),
            host("fe80::5e:ff:fe00:a", "02:00:5e:00:00:0a"),
            // the address of a lease, but another machine's MAC: an old lease
            host("192.0.2.2", "02:00:5e:00:00:0b"),
            host("192.0.2.30", "02:00:5e:00:00:1e"),
            host("192.0.2.40", "02:00:5e:00:00:28"),
        ];
        name_from_dhcp(&mut hosts, &names);
        let got: Vec<_> = hosts.iter().map(|h| h.hostname.as_deref()).collect();
        assert_eq!(
            got,
            [Some("laptop"), Some("laptop"), None, Some("tv"), None]
        );
        assert_eq!(hosts[0].source, Some(DHCP));
        hosts[4].hostname = Some("cam".into());
        hosts[4].source = Some(MDNS);
        hosts[2].mac = hosts[4].mac.clone();
        share_names(&mut hosts);
        assert_eq!(
            (hosts[2].hostname.as_deref(), hosts[2].source),
            (Some("cam"), Some(MDNS))
        );
    }

    #[test]
    fn sorted_by_interface_then_address() {
        let mut h: Vec<Host> = [
            ("lan1", "192.0.2.1"),
            ("lan0", "fe80::1"),
            ("lan0", "192.0.2.10"),
            ("lan0", "192.0.2.9"),
        ]
        .iter()
        .map(|(d, ip)| {
            let mut h = Host::new(ip.parse().unwrap(), String::new());
            h.dev = d.to_string();
            h
        })
        .collect();
        sort(&mut h);
        let got: Vec<String> = h.iter().map(|h| format!("{} {}", h.dev, h.ip)).collect();
        assert_eq!(
            got,
            [
                "lan0 192.0.2.9",
                "lan0 192.0.2.10",
                "lan0 fe80::1",
                "lan1 192.0.2.1"
            ]
        );
    }

    /// An answer as a responder sends it: header, the question repeated, answers.
    fn answer(id: u16, question: &[u8], records: &[&[u8]]) -> Vec<u8> {
        let mut p = id.to_be_bytes().to_vec();
        p.extend_from_slice(&[0x84, 0, 0, 1]);
        p.extend_from_slice(&(records.len() as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 0]);
        p.extend_from_slice(question);
        for r in records {
            p.extend_from_slice(r);
        }
        p
    }

    #[test]
    fn mdns_reverse_lookup() {
        let ip: Ipv4Addr = "192.0.2.3".parse().unwrap();
        let q = mdns_query(0x1234, &[ip, "192.0.2.4".parse().unwrap()]);
        let one = b"\x013\x012\x010\x03192\x07in-addr\x04arpa\x00\x00\x0c\x80\x01";
        assert_eq!(&q[..12], b"\x12\x34\0\0\0\x02\0\0\0\0\0\0");
        assert_eq!(&q[12..12 + one.len()], one);
        assert_eq!(q.len(), 12 + 2 * one.len());

        // owner: a pointer to the question's name; target: "Printer-B.local" (cache flush)
        let rec: &[u8] =
            b"\xc0\x0c\x00\x0c\x80\x01\x00\x00\x00\x0a\x00\x11\x09Printer-B\x05local\x00";
        let a = answer(0x1234, &q[12..12 + one.len()], &[rec]);
        assert_eq!(mdns_answer(&a, 0x1234, ip).as_deref(), Some("Printer-B"));
        // mDNS's own id 0 too; not another query's, not another address's, not a query
        assert!(mdns_answer(&answer(0, one, &[rec]), 0x1234, ip).is_some());
        assert_eq!(mdns_answer(&answer(7, one, &[rec]), 0x1234, ip), None);
        assert_eq!(mdns_answer(&a, 0x1234, "192.0.2.4".parse().unwrap()), None);
        let mut query = a.clone();
        query[2] = 0;
        assert_eq!(mdns_answer(&query, 0x1234, ip), None);
        // a record of another type first, then the PTR with the names written out
        let txt: &[u8] = b"\xc0\x0c\x00\x10\x00\x01\x00\x00\x00\x0a\x00\x02\x01x";
        let mut ptr = one[..one.len() - 4].to_vec();
        ptr.extend_from_slice(b"\x00\x0c\x00\x01\x00\x00\x00\x0a\x00\x0a\x02tv\x05LOCAL\x00");
        let b = answer(1, one, &[txt, &ptr]);
        assert_eq!(mdns_answer(&b, 1, ip).as_deref(), Some("tv"));
        // a name that is not a host name; a pointer to itself; truncated answers
        let bad: &[u8] = b"\xc0\x0c\x00\x0c\x00\x01\x00\x00\x00\x0a\x00\x07\x05a b;c\x00";
        assert_eq!(mdns_answer(&answer(1, one, &[bad]), 1, ip), None);
        let looped: &[u8] = b"\xc0\x0c\x00\x0c\x00\x01\x00\x00\x00\x0a\x00\x02\xc0\x34";
        let l = answer(1, one, &[looped]);
        assert_eq!(&l[0x34..], b"\xc0\x34");
        assert_eq!(mdns_answer(&l, 1, ip), None);
        for cut in 0..a.len() {
            assert_eq!(mdns_answer(&a[..cut], 0x1234, ip), None, "{cut}");
        }
    }
}
