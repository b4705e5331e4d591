//! mDNS names for the LAN's hosts (the `mdns` cargo feature, `[network] mdns = "on"`):
//! reverse lookups of the IPv4 hosts without a DHCP name (PTR of `d.c.b.a.in-addr.arpa`,
//! QU bit), sent to 224.0.0.251:5353 out of the LAN interfaces they were seen on, answers
//! awaited for 250 ms at most (all hosts together) and kept for 5 minutes, answered or not,
//! so that repeated listings send nothing. The bytes are `berth_core::lan`'s.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use berth_core::lan;

use crate::logger::warn_once;

/// mDNS answers by address: the name (None: no answer) and when it was asked.
type Cache = Vec<(Ipv4Addr, Option<String>, Instant)>;
static CACHE: Mutex<Cache> = Mutex::new(Vec::new());
/// How long an answer (or its absence) is kept: the LAN is asked again after that.
const KEEP: Duration = Duration::from_secs(300);
/// How long a listing waits for answers, all hosts together.
const WAIT: Duration = Duration::from_millis(250);
/// Addresses asked and kept at most (a LAN's neighbour table can be made large).
const MAX_HOSTS: usize = 256;
const GROUP: (Ipv4Addr, u16) = (Ipv4Addr::new(224, 0, 0, 251), 5353);

/// Names the IPv4 hosts without a name by mDNS reverse lookups (IPv6 addresses take their
/// MAC's name afterwards): one query per LAN interface for the addresses not asked
/// lately, answers awaited for at most [`WAIT`], kept for [`KEEP`]. One listing asks at a
/// time; one that comes meanwhile waits for its answers rather than asking again.
pub fn name_hosts(hosts: &mut [lan::Host]) {
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    cache.retain(|e| e.2.elapsed() < KEEP);
    let mut ask: Vec<(u32, Ipv4Addr)> = Vec::new();
    for h in hosts.iter_mut() {
        let IpAddr::V4(a) = h.ip else { continue };
        // /proc/net/arp names the interface only
        if h.ifindex == 0 {
            h.ifindex = berth_sys::net::ifindex(&h.dev).unwrap_or(0);
        }
        if h.hostname.is_none()
            && h.ifindex != 0
            && !cache.iter().any(|e| e.0 == a)
            && !ask.iter().any(|x| x.1 == a)
            && cache.len() + ask.len() < MAX_HOSTS
        {
            ask.push((h.ifindex, a));
        }
    }
    if !ask.is_empty() {
        let asked = Instant::now();
        let answers = query(&ask).unwrap_or_else(|e| {
            static SAID: AtomicBool = AtomicBool::new(false);
            warn_once(&SAID, format_args!("LAN hosts: mDNS: {e}"));
            Vec::new()
        });
        for (_, a) in ask {
            let name = answers.iter().find(|x| x.0 == a).map(|x| x.1.clone());
            cache.push((a, name, asked));
        }
    }
    for h in hosts {
        let IpAddr::V4(a) = h.ip else { continue };
        if h.hostname.is_none() {
            if let Some((_, Some(name), _)) = cache.iter().find(|e| e.0 == a) {
                h.hostname = Some(name.clone());
                h.source = Some(lan::MDNS);
            }
        }
    }
}

/// Sends the reverse lookups of `ask` (interface, address) to the mDNS group out of each
/// interface and collects the answers that come within [`WAIT`].
fn query(ask: &[(u32, Ipv4Addr)]) -> std::io::Result<Vec<(Ipv4Addr, String)>> {
    let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
    s.set_multicast_ttl_v4(255)?;
    s.set_multicast_loop_v4(false)?;
    // any id; answers must repeat it (or be mDNS's own 0) and come from the address asked
    let id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |t| t.subsec_nanos() as u16 | 1);
    // per interface, up to 40 questions (about 1.1 KB) a datagram; an interface that
    // cannot send (no IPv4 address) does not keep the others from asking
    let (mut sent, mut failed) = (false, None);
    let mut done: Vec<u32> = Vec::new();
    for &(dev, _) in ask.iter() {
        if done.contains(&dev) {
            continue;
        }
        done.push(dev);
        let ips: Vec<Ipv4Addr> = ask.iter().filter(|x| x.0 == dev).map(|x| x.1).collect();
        for part in ips.chunks(40) {
            match berth_sys::net::set_multicast_if(&s, dev)
                .and_then(|_| s.send_to(&lan::mdns_query(id, part), GROUP))
            {
                Ok(_) => sent = true,
                Err(e) => failed = Some(e),
            }
        }
    }
    if let (false, Some(e)) = (sent, failed) {
        return Err(e);
    }
    let deadline = Instant::now() + WAIT;
    let mut answers = Vec::new();
    let mut buf = [0u8; 1500];
    while answers.len() < ask.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        s.set_read_timeout(Some(left))?;
        let Ok((n, SocketAddr::V4(from))) = s.recv_from(&mut buf) else {
            break;
        };
        let ip = *from.ip();
        if !ask.iter().any(|x| x.1 == ip) || answers.iter().any(|x: &(Ipv4Addr, String)| x.0 == ip)
        {
            continue;
        }
        if let Some(name) = lan::mdns_answer(&buf[..n], id, ip) {
            answers.push((ip, name));
        }
    }
    Ok(answers)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use super::*;

    /// A neighbour on interface 7 (its index known: no lookup), named by DHCP or not.
    fn host(ip: IpAddr, hostname: Option<&str>) -> lan::Host {
        lan::Host {
            ip,
            mac: "02:00:00:00:00:01".into(),
            ifindex: 7,
            dev: "lan0".into(),
            state: Some("reachable"),
            ticks: Some(10),
            hostname: hostname.map(str::to_string),
            source: hostname.map(|_| lan::DHCP),
        }
    }

    /// Answers kept (and kept absences) name the hosts without asking the LAN again (every
    /// address here is cached, so nothing is sent); a DHCP name is kept, an IPv6 host is
    /// left to its MAC's name.
    #[test]
    fn cached_answers_name_hosts_without_asking_again() {
        // Documentation addresses (TEST-NET-3), used by no other test.
        let named = Ipv4Addr::new(203, 0, 113, 10);
        let silent = Ipv4Addr::new(203, 0, 113, 11);
        let dhcp = Ipv4Addr::new(203, 0, 113, 12);
        {
            let mut c = CACHE.lock().unwrap();
            c.push((named, Some("printer.local".into()), Instant::now()));
            c.push((silent, None, Instant::now()));
            c.push((dhcp, Some("other.local".into()), Instant::now()));
        }
        let v6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
        let mut hosts = vec![
            host(IpAddr::V4(named), None),
            host(IpAddr::V4(silent), None),
            host(IpAddr::V4(dhcp), Some("nas")),
            host(v6, None),
        ];
        name_hosts(&mut hosts);
        assert_eq!(hosts[0].hostname.as_deref(), Some("printer.local"));
        assert_eq!(hosts[0].source, Some(lan::MDNS));
        assert_eq!(
            (hosts[1].hostname.as_deref(), hosts[1].source),
            (None, None),
            "no answer"
        );
        assert_eq!(
            (hosts[2].hostname.as_deref(), hosts[2].source),
            (Some("nas"), Some(lan::DHCP))
        );
        assert_eq!(
            (hosts[3].hostname.as_deref(), hosts[3].source),
            (None, None)
        );
        let c = CACHE.lock().unwrap();
        for a in [named, silent, dhcp] {
            assert_eq!(c.iter().filter(|e| e.0 == a).count(), 1, "{a} asked again");
        }
    }
}
