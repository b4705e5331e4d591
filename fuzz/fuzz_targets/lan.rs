//! `berth net hosts` (and the containers' `GET /v1/lan/hosts`) read the kernel's netlink
//! dump, mDNS answers from anyone on the LAN, /proc/net/arp and DHCP servers' files: no
//! input may panic the daemon, and what comes out is well-formed.
#![no_main]

use std::net::Ipv4Addr;

use berth_core::lan;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // the request number of the first message, so that its body is read
    let seq = data
        .get(8..12)
        .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    let mut hosts = Vec::new();
    let _ = lan::parse_neigh(data, seq, &mut hosts);
    for h in &hosts {
        assert!(h.state.is_some() && !h.mac.is_empty());
        assert!(h.mac.bytes().all(|b| b.is_ascii_hexdigit() || b == b':'));
    }
    // an answer about 192.0.2.3 (the seed's), to query 1
    if let Some(name) = lan::mdns_answer(data, 1, Ipv4Addr::new(192, 0, 2, 3)) {
        assert!(!name.is_empty() && name.len() <= 253);
        assert!(name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)));
    }
    let text = String::from_utf8_lossy(data);
    hosts.extend(lan::parse_proc_arp(&text));
    let mut names = Vec::new();
    lan::dhcp_names(&text, &mut names);
    lan::name_from_dhcp(&mut hosts, &names);
    lan::share_names(&mut hosts);
    lan::sort(&mut hosts);
    for w in hosts.windows(2) {
        assert!((&w[0].dev, w[0].ip) <= (&w[1].dev, w[1].ip));
    }
    let _ = lan::mdns_query(1, &[Ipv4Addr::new(192, 0, 2, 3)]);
});
