//! `berth net hosts` end to end: the daemon runs in a "device" network namespace whose bridge
//! `brlan` is the LAN (`[network] lan`), with two LAN hosts (namespaces behind veths in the
//! bridge) and a WAN host on `wan0`. One LAN host has a DHCP lease in a leases file of the
//! test; the other answers mDNS reverse lookups (a small responder of the test, inside its
//! namespace). Every namespace is the sandbox's (swept with it) and deleted at the end, also
//! on failure; nothing touches the root network namespace.

mod common;

use std::net::{Ipv4Addr, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use common::{stderr, stdout, Sandbox};
use serde_json::Value;

fn must(cmd: &str) -> String {
    let o = Command::new("sh")
        .args(["-c", cmd])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{cmd}: {}{}", stdout(&o), stderr(&o));
    stdout(&o)
}

const MAC_A: &str = "02:00:5e:00:00:0a";
const MAC_B: &str = "02:00:5e:00:00:0b";
const MAC_W: &str = "02:00:5e:00:00:77";

/// An mDNS responder in a namespace: answers the PTR query for its own address's reverse
/// name (by unicast, to the asker's port, repeating its id) and counts those queries.
struct Responder {
    stop: Arc<AtomicBool>,
    asked: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Responder {
    fn start(netns: &str, own: Ipv4Addr, name: &'static str) -> Responder {
        let stop = Arc::new(AtomicBool::new(false));
        let asked = Arc::new(AtomicUsize::new(0));
        let (ready, up) = std::sync::mpsc::channel();
        let ns = PathBuf::from(format!("/run/netns/{netns}"));
        let (stop2, asked2) = (stop.clone(), asked.clone());
        let thread = std::thread::spawn(move || {
            // this thread alone moves into the namespace
            berth_sys::process::enter_net_namespace_at(&ns).unwrap();
            let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 5353)).unwrap();
            s.join_multicast_v4(&Ipv4Addr::new(224, 0, 0, 251), &own)
                .unwrap();
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            ready.send(()).unwrap();
            let o = own.octets();
            let mut qname = Vec::new();
            for l in [
                o[3].to_string(),
                o[2].to_string(),
                o[1].to_string(),
                o[0].to_string(),
                "in-addr".into(),
                "arpa".into(),
            ] {
                qname.push(l.len() as u8);
                qname.extend_from_slice(l.as_bytes());
            }
            qname.push(0);
            let mut buf = [0u8; 1500];
            while !stop2.load(Ordering::SeqCst) {
                let Ok((n, from)) = s.recv_from(&mut buf) else {
                    continue;
                };
                let q = &buf[..n];
                // a query (QR clear) with our name among its questions
                if n < 12 || q[2] & 0x80 != 0 || !q.windows(qname.len()).any(|w| w == qname) {
                    continue;
                }
                asked2.fetch_add(1, Ordering::SeqCst);
                let mut a = vec![q[0], q[1], 0x84, 0, 0, 0, 0, 1, 0, 0, 0, 0];
                a.extend_from_slice(&qname);
                a.extend_from_slice(&[0, 12, 0x80, 1, 0, 0, 0, 10]);
                let mut target = vec![name.len() as u8];
                target.extend_from_slice(name.as_bytes());
                target.extend_from_slice(b"\x05local\x00");
                a.extend_from_slice(&(target.len() as u16).to_be_bytes());
                a.extend_from_slice(&target);
                let _ = s.send_to(&a, from);
            }
        });
        up.recv_timeout(Duration::from_secs(5))
            .expect("mDNS responder did not start");
        Responder {
            stop,
            asked,
            thread: Some(thread),
        }
    }

    fn asked(&self) -> usize {
        self.asked.load(Ordering::SeqCst)
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The device (`brlan` 192.0.2.1/24 and 2001:db8::1/64 with the veths `lana`, `lanb`;
/// `wan0` 198.51.100.1/24), LAN hosts a (192.0.2.2, 2001:db8::a) and b (192.0.2.3), WAN
/// host w (198.51.100.2). Responders are stopped and the namespaces deleted on drop.
struct Net {
    dev: String,
    a: String,
    b: String,
    w: String,
    responders: Vec<Responder>,
}

impl Net {
    fn new(sb: &Sandbox) -> Net {
        let ns = |what| sb.scope().netns(what);
        let n = Net {
            dev: ns("dev"),
            a: ns("a"),
            b: ns("b"),
            w: ns("w"),
            responders: Vec::new(),
        };
        let (d, a, b, w) = (&n.dev, &n.a, &n.b, &n.w);
        for ns in [d, a, b, w] {
            must(&format!("ip netns add {ns} && ip -n {ns} link set lo up"));
        }
        must(&format!(
            "ip -n {d} link add brlan type bridge && \
             ip -n {d} link add lana type veth peer name eth0 netns {a} && \
             ip -n {d} link add lanb type veth peer name eth0 netns {b} && \
             ip -n {d} link add wan0 type veth peer name eth0 netns {w} && \
             ip -n {d} link set lana master brlan && ip -n {d} link set lanb master brlan && \
             ip -n {a} link set eth0 address {MAC_A} && ip -n {b} link set eth0 address {MAC_B} && \
             ip -n {w} link set eth0 address {MAC_W} && \
             ip -n {d} addr add 192.0.2.1/24 dev brlan && \
             ip -n {d} addr add 2001:db8::1/64 dev brlan nodad && \
             ip -n {d} addr add 198.51.100.1/24 dev wan0 && \
             ip -n {a} addr add 192.0.2.2/24 dev eth0 && \
             ip -n {a} addr add 2001:db8::a/64 dev eth0 nodad && \
             ip -n {b} addr add 192.0.2.3/24 dev eth0 && \
             ip -n {w} addr add 198.51.100.2/24 dev eth0 && \
             for l in brlan lana lanb wan0; do ip -n {d} link set $l up; done && \
             for h in {a} {b} {w}; do ip -n $h link set eth0 up; done"
        ));
        n
    }

    /// `busybox ping` from namespace `ns` to `to`, once.
    fn ping(&self, ns: &str, to: &str) {
        let ping = if to.contains(':') { "ping6" } else { "ping" };
        must(&format!("ip netns exec {ns} busybox {ping} -c 1 -W 2 {to}"));
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.responders.clear();
        for ns in [&self.dev, &self.a, &self.b, &self.w] {
            let _ = Command::new("sh")
                .args([
                    "-c",
                    &format!("ip netns pids {ns} | xargs -r kill -9; ip netns del {ns}"),
                ])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn host<'a>(v: &'a Value, ip: &str) -> Option<&'a Value> {
    v["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["ip"] == ip)
}

#[test]
fn lan_hosts_by_netlink_with_dhcp_and_mdns_names_and_by_proc_arp() {
    let mut sb = Sandbox::new("lanh");
    let net = {
        let mut net = Net::new(&sb);
        for (ns, ip, name) in [
            (net.a.clone(), "192.0.2.2", "laptop-a-mdns"),
            (net.b.clone(), "192.0.2.3", "printer-b"),
            (net.w.clone(), "198.51.100.2", "isp-gw"),
        ] {
            net.responders
                .push(Responder::start(&ns, ip.parse().unwrap(), name));
        }
        net
    };
    // a has a lease (dnsmasq's format); so has w, but w is not on the LAN
    let leases = sb.dir.join("dnsmasq.leases");
    std::fs::write(
        &leases,
        format!(
            "1900000000 {MAC_A} 192.0.2.2 laptop-a 01:{MAC_A}\n\
             1900000000 {MAC_W} 198.51.100.2 isp-router *\n"
        ),
    )
    .unwrap();
    sb.write_config(&format!(
        "[network]\nlan = \"brlan\"\nmdns = \"on\"\ndhcp_leases = \"/nonexistent/leases {}\"\n",
        leases.display()
    ));
    sb.daemon_netns = Some(net.dev.clone());
    sb.start_daemon();

    let t0 = berth_sys::process::now_s();
    // The device asks for each host's address (its ARP or neighbour solicitation is
    // answered: reachable), then the hosts talk to the device (a host's own ARP request
    // alone would leave a stale entry, and the device's reply to it a delayed one).
    for to in ["192.0.2.2", "192.0.2.3", "198.51.100.2", "2001:db8::a"] {
        net.ping(&net.dev, to);
    }
    for (ns, to) in [
        (&net.a, "192.0.2.1"),
        (&net.b, "192.0.2.1"),
        (&net.w, "198.51.100.1"),
    ] {
        net.ping(ns, to);
    }
    let v = sb.json(&["net", "hosts"]);
    let now = berth_sys::process::now_s();
    let a = host(&v, "192.0.2.2").unwrap_or_else(|| panic!("192.0.2.2 not listed: {v}"));
    assert_eq!(a["mac"], MAC_A, "{a}");
    assert_eq!(a["dev"], "brlan", "{a}");
    assert_eq!(a["hostname"], "laptop-a", "{a}");
    assert_eq!(a["hostname_source"], "dhcp", "{a}");
    assert_eq!(a["state"], "reachable", "{a}");
    let seen = a["last_seen"].as_u64().unwrap();
    assert!(
        t0 - 1 <= seen && seen <= now,
        "last_seen {seen}, test ran {t0}..{now}"
    );
    assert!(a["age_s"].as_u64().unwrap() <= now - t0 + 1, "{a}");
    // b has no lease: its name is its mDNS answer
    let b = host(&v, "192.0.2.3").unwrap_or_else(|| panic!("192.0.2.3 not listed: {v}"));
    assert_eq!(
        (&b["mac"], &b["state"]),
        (&MAC_B.into(), &"reachable".into()),
        "{b}"
    );
    assert_eq!(
        (&b["hostname"], &b["hostname_source"]),
        (&"printer-b".into(), &"mdns".into())
    );
    // a's IPv6 address takes its MAC's lease
    let a6 = host(&v, "2001:db8::a").unwrap_or_else(|| panic!("2001:db8::a not listed: {v}"));
    assert_eq!(
        (&a6["mac"], &a6["hostname"]),
        (&MAC_A.into(), &"laptop-a".into())
    );
    // the WAN's host is not the LAN's, whatever the leases say
    assert!(host(&v, "198.51.100.2").is_none(), "{v}");
    // sorted: by interface, then address (IPv4 first)
    let ips: Vec<&str> = v["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["ip"].as_str().unwrap())
        .collect();
    let lan: Vec<&str> = ips
        .iter()
        .copied()
        .filter(|i| !i.starts_with("fe80"))
        .collect();
    assert_eq!(lan, ["192.0.2.2", "192.0.2.3", "2001:db8::a"], "{v}");
    // mDNS asked b only: a has its DHCP name, w is not on the LAN
    let [ra, rb, rw] = &net.responders[..] else {
        unreachable!()
    };
    assert_eq!((ra.asked(), rb.asked(), rw.asked()), (0, 1, 0));
    // a second listing sends nothing: the answer is kept
    let text = sb.ok(&["net", "hosts"]);
    assert_eq!(rb.asked(), 1);
    for want in ["laptop-a", "printer-b", "mdns", "reachable", " ago"] {
        assert!(text.contains(want), "{want:?} not in\n{text}");
    }
    assert!(!text.contains("198.51.100.2"), "{text}");

    // The fallback: /proc/net/arp (no state, no age), the same policy and names.
    sb.kill_daemon(libc::SIGTERM);
    sb.start_daemon_env(&[("BERTH_FAULT", "netlink.absent")]);
    let v = sb.json(&["net", "hosts"]);
    let a = host(&v, "192.0.2.2").unwrap_or_else(|| panic!("192.0.2.2 not listed: {v}"));
    assert_eq!(
        (&a["mac"], &a["dev"]),
        (&MAC_A.into(), &"brlan".into()),
        "{a}"
    );
    assert_eq!(a["hostname"], "laptop-a", "{a}");
    for k in ["state", "last_seen", "age_s"] {
        assert!(a[k].is_null(), "{k}: {a}");
    }
    // a new daemon asks again (its answers are kept in memory only)
    assert_eq!(
        host(&v, "192.0.2.3").unwrap()["hostname"],
        "printer-b",
        "{v}"
    );
    assert_eq!(rb.asked(), 2);
    assert!(host(&v, "198.51.100.2").is_none(), "{v}");
    assert!(
        host(&v, "2001:db8::a").is_none(),
        "IPv6 is not in /proc/net/arp: {v}"
    );
    assert!(
        sb.daemon_log_text().contains("reading /proc/net/arp"),
        "{}",
        sb.daemon_log_text()
    );
    drop(net);
    let left = must("ip netns list");
    assert!(!left.contains(&sb.scope().netns("")), "{left}");
}
