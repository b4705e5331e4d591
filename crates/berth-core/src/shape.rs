//! A container's bandwidth caps (`[resources] egress` and `ingress`, `berth limit --egress`):
//! rates as tc writes them, and the commands that shape an isolated container's traffic on
//! its host-side veth, where the container cannot reach them (even with CAP_NET_ADMIN in its
//! own network namespace):
//! - **ingress** (to the container) leaves the host through the veth: a token-bucket filter
//!   (`tbf`) is the veth's root qdisc;
//! - **egress** (from the container) enters the host through the veth: its ingress qdisc
//!   redirects every packet (u32, match-all; `mirred`) to an IFB device of the container's
//!   own, whose root is the same kind of filter.
//!
//! The rate counts whole frames (Ethernet headers too), as the kernel's shapers do: a TCP
//! stream's payload gets about 96 % of it. At most 20 ms of queue stands behind a shaper
//! (`latency`), so a capped container's own flows keep short delays.

/// The most a rate may be: 10 gbit.
pub const MAX_RATE: u64 = 10_000_000_000;
/// The least a rate may be: 64 kbit (below that a full frame alone takes longer than the
/// 20 ms of queue a shaper keeps).
pub const MIN_RATE: u64 = 64_000;

/// One container's caps, bits per second; None is uncapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Caps {
    pub egress: Option<u64>,
    pub ingress: Option<u64>,
}

impl Caps {
    pub fn any(self) -> bool {
        self.egress.or(self.ingress).is_some()
    }
}

/// Parses a rate as tc writes one: a whole number with `bit`, `kbit`, `mbit` or `gbit`
/// (powers of 1000), e.g. `"8mbit"`; bits per second, between [`MIN_RATE`] and [`MAX_RATE`].
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let (digits, mult) = [
        ("gbit", 1_000_000_000u64),
        ("mbit", 1_000_000),
        ("kbit", 1_000),
        ("bit", 1),
    ]
    .into_iter()
    .find_map(|(u, m)| s.strip_suffix(u).map(|d| (d, m)))
    .ok_or_else(|| {
        format!(
            "invalid rate {s:?}: expected a number with bit, kbit, mbit or gbit, such as \"8mbit\""
        )
    })?;
    let n = digits
        .parse::<u64>()
        .ok()
        .filter(|_| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("invalid rate {s:?}: expected a whole number before the unit"))?;
    if !(MIN_RATE..=MAX_RATE).contains(&n) {
        return Err(format!(
            "rate {s:?} is out of range: between {} and {}",
            fmt_rate(MIN_RATE),
            fmt_rate(MAX_RATE)
        ));
    }
    Ok(n)
}

/// A rate read back from `berth limit`'s file: 0 (no cap) or one [`parse_rate`] takes.
pub fn stored_rate(n: u64) -> Option<u64> {
    (n == 0 || (MIN_RATE..=MAX_RATE).contains(&n)).then_some(n)
}

/// A rate as people and tc read it: the largest unit that divides it (`8mbit`, `1500kbit`).
pub fn fmt_rate(bits: u64) -> String {
    let (n, u) = [
        (1_000_000_000, "gbit"),
        (1_000_000, "mbit"),
        (1_000, "kbit"),
    ]
    .into_iter()
    .find(|(m, _)| bits.is_multiple_of(*m) && bits >= *m)
    .map_or((bits, "bit"), |(m, u)| (bits / m, u));
    format!("{n}{u}")
}

/// The IFB device that carries the egress of the container whose host-side veth is `veth`
/// (`vb0a570002` → `bi0a570002`): as unique as the veth, within IFNAMSIZ.
pub fn ifb_of(veth: &str) -> String {
    format!("bi{}", veth.strip_prefix("vb").unwrap_or(veth))
}

/// The bucket: 10 ms at the rate, at least 16 KiB (a few full frames; tbf needs at least
/// the rate over the kernel's HZ).
fn burst(rate: u64) -> u64 {
    (rate / 8 / 100).max(16 << 10)
}

fn tbf(dev: &str, rate: u64) -> String {
    format!(
        "tc qdisc replace dev {dev} root tbf rate {rate}bit burst {} latency 20ms\n",
        burst(rate)
    )
}

/// The sh script (`sh -s -- VETH`) that gives the veth `$1` exactly `caps`, whatever shaping
/// it had: a cap set or changed is replaced in place (`replace`: no instant uncapped, the
/// redirect to the IFB device kept as it is), one lifted is removed (with the IFB device
/// when egress goes). A device of the IFB's name that is no IFB device fails it.
pub fn script(ifb: &str, caps: Caps) -> String {
    format!("{PATH}set -e\n{}", body(ifb, caps))
}

fn body(ifb: &str, caps: Caps) -> String {
    let mut s = String::new();
    match caps.ingress {
        Some(r) => s.push_str(&tbf("\"$1\"", r)),
        None => s.push_str("tc qdisc del dev \"$1\" root 2>/dev/null || true\n"),
    }
    match caps.egress {
        Some(r) => {
            s.push_str(&format!(
                "ip link add name {ifb} type ifb 2>/dev/null || ip -d link show dev {ifb} | grep -qw ifb || {{ echo \"{ifb} exists and is no IFB device\" >&2; exit 1; }}\nip link set dev {ifb} up\n"
            ));
            s.push_str(&tbf(ifb, r));
            // The redirect last: until the IFB device shapes, nothing goes to it. Replaced,
            // never deleted first: egress is never without its shaper.
            s.push_str(&format!(
                "tc qdisc add dev \"$1\" handle ffff: ingress 2>/dev/null || true\n\
                 tc filter replace dev \"$1\" parent ffff: protocol all prio 1 handle 800::800 u32 match u32 0 0 action mirred egress redirect dev {ifb}\n"
            ));
        }
        None => s.push_str(&format!(
            "tc qdisc del dev \"$1\" ingress 2>/dev/null || true\nip link del dev {ifb} 2>/dev/null || true\n"
        )),
    }
    s
}

const PATH: &str = "PATH=$PATH:/usr/sbin:/sbin:/usr/bin:/bin\n";

/// The script LXC runs on the host when a capped container's veth exists (its name is `$5`,
/// as in [`crate::net::veth_up_script`]): into the bridge, then its caps, before the payload
/// runs; any failure fails the start.
pub fn up_script(bridge: &str, ifb: &str, caps: Caps) -> String {
    format!(
        "#!/bin/sh\n# written by berth: attach a container's veth to its bridge and cap its bandwidth\n{PATH}set -e\nip link set dev \"$5\" master {bridge} up\nset -- \"$5\"\n{}",
        body(ifb, caps)
    )
}

/// The script LXC runs on the host when an isolated container's veth goes: its IFB device
/// (if a cap made one, at the start or later) goes with it; [`ifb_of`] in sh.
pub fn down_script() -> String {
    format!("#!/bin/sh\n# written by berth: a container's veth goes, its IFB device with it\n{PATH}ip link del dev \"bi${{5#vb}}\" 2>/dev/null\nexit 0\n")
}

/// The line governor (docs/network.md, "The line"): `[network] uplink` and `uplink_rate`
/// declare the device's WAN line; `[policy] bandwidth` caps what all containers together send
/// on it. berth shapes the line a little below its rate (so the queue forms here, where it is
/// short, not in the modem) with an HTB tree of three classes, each with a short queue:
/// - **interactive** (`b3:5`, first): the host's ICMP, DNS and bare TCP ACKs, at most a third
///   of the line;
/// - **host** (`b3:10`, the default): everything else the device sends, guaranteed what the
///   others leave and borrowing up to the whole line;
/// - **containers** (`b3:20`, last): every packet containers send out the uplink, marked in
///   berth's nft forward chain, held to the policy's cap (never above it, even on an idle
///   line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub uplink: String,
    /// `uplink_rate`: the line's sustained upload rate, bits per second.
    pub rate: u64,
    /// `[policy] bandwidth`: the containers' total as the policy asks, bits per second
    /// (a share is resolved against `rate`); [`Line::containers`] is what they get.
    pub asked: u64,
}

/// The handle (hex) of the governor's HTB qdisc; its classes and leaves derive from it.
pub const LINE_HANDLE: &str = "b3";
/// The least `uplink_rate`: below it the interactive class's floor is a tenth of the line.
pub const MIN_LINE: u64 = 1_000_000;

/// Frames of 1 ms at `rate`, at least two full ones: each class's burst.
fn line_burst(rate: u64) -> u64 {
    (rate / 8000).max(3028)
}

/// 1 ms at `rate`, between one and forty full frames: each class's quantum (set, so tc does
/// not derive one that warns).
fn quantum(rate: u64) -> u64 {
    (rate / 8000).clamp(1514, 60_560)
}

impl Line {
    /// The rate the line is shaped at: 90 % of the declared rate (frames without the link's
    /// own overhead, which the margin covers).
    pub fn shaped(&self) -> u64 {
        self.rate / 10 * 9
    }
    /// The interactive class's guaranteed rate: a twentieth of the line, at least 64 kbit.
    fn interactive(&self) -> u64 {
        (self.shaped() / 20).max(MIN_RATE)
    }
    /// What containers together may send: the policy's cap, at most 85 % of the shaped
    /// line (the host always keeps a tenth, the interactive class a twentieth).
    pub fn containers(&self) -> u64 {
        self.asked.min(self.shaped() / 100 * 85)
    }
    /// The host's guaranteed rate: what the others leave.
    pub fn host(&self) -> u64 {
        self.shaped() - self.containers() - self.interactive()
    }
}

/// Who holds an interface's root qdisc, from `tc qdisc show dev DEV root`.
#[derive(Debug, PartialEq, Eq)]
pub enum Root {
    /// The kernel's default (handle `0:`: pfifo_fast, fq_codel, mq, noqueue).
    Free,
    /// berth's governor.
    Ours,
    /// Another shaper (SQM's cake, qosify, a firmware's own): its kind and handle.
    Foreign(String),
}

pub fn root_of(tc_show: &str) -> Root {
    let mut w = tc_show.split_whitespace().skip(1);
    match (w.next(), w.next()) {
        (_, Some("0:")) | (None, _) => Root::Free,
        (Some("htb"), Some(h)) if h.strip_suffix(':') == Some(LINE_HANDLE) => Root::Ours,
        (Some(k), h) => Root::Foreign(format!("{k} {}", h.unwrap_or(""))),
    }
}

/// The sh script (`sh -s -- UPLINK`) that puts the governor on `$1`, or brings one there to
/// `l`'s rates in place. The qdisc is made only where it is not there yet (HTB cannot be
/// changed, and replacing it would drop its classes); the classes and their leaves are
/// replaced. One `tc -batch` makes them all, so the qdisc's default class exists within
/// microseconds of it (until then HTB would pass packets unshaped, by its direct queue).
/// Each leaf is a token bucket far faster than its class, so it never holds a packet back:
/// it keeps the queue short (a byte limit: `ms` at the class's guaranteed rate, at least
/// four frames) and cuts the 64 KiB segments of offloaded TCP into frames (a byte FIFO would
/// drop them whole; a segment longer than the queue loses its tail, which TCP takes as
/// congestion: the queue's delay is bounded first).
pub fn line_script(l: &Line) -> String {
    let h = LINE_HANDLE;
    let t = l.shaped();
    let (i, host, c) = (l.interactive(), l.host(), l.containers());
    let class = |id: u32, rate: u64, ceil: u64, prio: &str| {
        let b = line_burst(ceil);
        format!(
            "class replace dev $1 parent {h}:1 classid {h}:{id} htb rate {rate}bit ceil {ceil}bit burst {b} cburst {b} quantum {}{prio}\n",
            quantum(rate)
        )
    };
    let leaf = |id: u32, rate: u64, ceil: u64, ms: u64| {
        format!(
            "qdisc replace dev $1 parent {h}:{id} handle {h}{id:02}: tbf rate {}bit burst 6056 limit {}\n",
            ceil * 10,
            (rate / 8000 * ms).max(6056)
        )
    };
    let b = line_burst(t);
    format!(
        "{PATH}set -e\nroot=\"qdisc replace dev $1 root handle {h}: htb default 10\"\n! tc qdisc show dev \"$1\" root | grep -q '^qdisc htb {h}: ' || root=\nexec tc -batch - <<EOF\n$root\nclass replace dev $1 parent {h}: classid {h}:1 htb rate {t}bit ceil {t}bit burst {b} cburst {b} quantum {}\n{}{}{}{}{}{}EOF\n",
        quantum(t),
        class(5, i, t / 3, " prio 0"),
        class(10, host, t, " prio 1"),
        class(20, c, c, " prio 2"),
        leaf(5, i, t / 3, 20),
        leaf(10, host, t, 25),
        leaf(20, c, c, 50),
    )
}

/// Takes the governor off `$1` (`sh -s -- UPLINK`), if it is there and berth's: the kernel
/// puts its default back.
pub fn line_off_script() -> String {
    format!(
        "{PATH}if tc qdisc show dev \"$1\" root | grep -q '^qdisc htb {LINE_HANDLE}: '; then tc qdisc del dev \"$1\" root; fi\n"
    )
}

/// The rule in berth's forward chain that puts containers' packets out the uplink into their
/// class (before the rule that lets them out).
pub fn line_mark(l: &Line) -> String {
    format!(
        "    oifname \"{}\" meta priority set {LINE_HANDLE}:20\n",
        l.uplink
    )
}

/// The chain that files everything else the device sends out the uplink: the containers'
/// stay theirs, the host's interactive packets go first, the rest to the host's class
/// (whatever priority a socket chose: none reaches the containers' class or bypasses the
/// tree).
pub fn line_chain(l: &Line) -> String {
    let h = LINE_HANDLE;
    format!(
        "  chain line {{\n    type filter hook postrouting priority 0; policy accept;\n    oifname != \"{}\" accept\n    meta priority {h}:20 accept\n    meta l4proto {{ icmp, ipv6-icmp }} meta priority set {h}:5 accept\n    meta l4proto {{ tcp, udp }} th dport 53 meta priority set {h}:5 accept\n    tcp flags & (fin|syn|rst|psh|ack) == ack meta length < 128 meta priority set {h}:5 accept\n    meta priority set {h}:10\n  }}\n",
        l.uplink
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_as_tc_writes_them_and_refuse_the_rest() {
        assert_eq!(parse_rate("8mbit"), Ok(8_000_000));
        assert_eq!(parse_rate("1500kbit"), Ok(1_500_000));
        assert_eq!(parse_rate("1gbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate("64000bit"), Ok(64_000));
        for bad in [
            "8",
            "8mb",
            "mbit",
            "-8mbit",
            "8.5mbit",
            "8 mbit",
            " 8mbit",
            "8Mbit",
            "",
            "99999999999999999999gbit",
        ] {
            let e = parse_rate(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
        assert!(parse_rate("63kbit")
            .unwrap_err()
            .contains("between 64kbit and 10gbit"));
        assert!(parse_rate("11gbit").is_err());
    }

    #[test]
    fn rates_print_in_their_largest_whole_unit() {
        assert_eq!(fmt_rate(8_000_000), "8mbit");
        assert_eq!(fmt_rate(1_500_000), "1500kbit");
        assert_eq!(fmt_rate(64_001), "64001bit");
        assert_eq!(fmt_rate(10_000_000_000), "10gbit");
        for r in [64_000, 1_500_000, 8_000_000, 2_000_000_000] {
            assert_eq!(parse_rate(&fmt_rate(r)), Ok(r));
        }
    }

    #[test]
    fn the_ifb_device_is_named_after_the_veth_within_ifnamsiz() {
        let i = ifb_of("vb0a570002");
        assert_eq!(i, "bi0a570002");
        assert!(i.len() < 16);
    }

    #[test]
    fn the_script_shapes_both_ways_and_lifts_what_is_not_asked() {
        let both = script(
            "bi01",
            Caps {
                egress: Some(8_000_000),
                ingress: Some(16_000_000),
            },
        );
        assert!(
            both.contains(
                "tc qdisc replace dev \"$1\" root tbf rate 16000000bit burst 20000 latency 20ms\n"
            ),
            "{both}"
        );
        assert!(
            both.contains(
                "tc qdisc replace dev bi01 root tbf rate 8000000bit burst 16384 latency 20ms\n"
            ),
            "{both}"
        );
        // The redirect comes after the IFB device shapes.
        let shaped = both.find("dev bi01 root tbf").unwrap();
        let redirect = both.find("redirect dev bi01").unwrap();
        assert!(shaped < redirect, "{both}");
        assert!(!both.contains("del dev bi01"), "{both}");
        // Changed in place: the redirect is replaced, never deleted and added again.
        assert!(
            !both.contains("ingress 2>/dev/null || true\ntc qdisc del"),
            "{both}"
        );
        assert!(!both.contains("qdisc del dev \"$1\" ingress"), "{both}");
        assert!(
            both.contains("tc filter replace dev \"$1\" parent ffff:"),
            "{both}"
        );
        assert!(both.starts_with("PATH=$PATH:/usr/sbin"), "{both}");
        let none = script("bi01", Caps::default());
        assert!(none.contains("tc qdisc del dev \"$1\" root"), "{none}");
        assert!(none.contains("ip link del dev bi01"), "{none}");
        assert!(!none.contains("tbf"), "{none}");
        assert!(!Caps::default().any());
        assert!(Caps {
            egress: None,
            ingress: Some(1)
        }
        .any());
    }

    fn line(rate: u64, asked: u64) -> Line {
        Line {
            uplink: "wan0".into(),
            rate,
            asked,
        }
    }

    #[test]
    fn the_line_is_shaped_below_its_rate_and_the_host_keeps_a_share() {
        let l = line(20_000_000, 10_000_000);
        assert_eq!(l.shaped(), 18_000_000);
        assert_eq!(l.containers(), 10_000_000);
        // 18 - 10 - 0.9 (the interactive twentieth)
        assert_eq!(l.host(), 7_100_000);
        // All of it asked: the containers get 85 % of the shaped line, never more.
        let all = line(20_000_000, 20_000_000);
        assert_eq!(all.containers(), 15_300_000);
        assert_eq!(all.host(), 18_000_000 - 15_300_000 - 900_000);
        // The smallest line: the interactive class keeps its 64 kbit floor.
        let small = line(MIN_LINE, MIN_LINE);
        assert_eq!(small.interactive(), MIN_RATE);
        assert!(small.host() > 0 && small.host() + small.containers() + MIN_RATE == 900_000);
    }

    #[test]
    fn the_line_script_makes_three_classes_with_short_leaves_and_keeps_the_qdisc() {
        let s = line_script(&line(20_000_000, 10_000_000));
        assert!(s.starts_with(PATH), "{s}");
        // The qdisc only where it is not berth's already (HTB cannot be changed in place).
        assert!(s.contains("root=\"qdisc replace dev $1 root handle b3: htb default 10\"\n! tc qdisc show dev \"$1\" root | grep -q '^qdisc htb b3: ' || root=\nexec tc -batch - <<EOF\n$root\n"), "{s}");
        assert!(s.ends_with("EOF\n"), "{s}");
        for want in [
            "classid b3:1 htb rate 18000000bit ceil 18000000bit burst 3028 cburst 3028 quantum 2250\n",
            "classid b3:5 htb rate 900000bit ceil 6000000bit burst 3028 cburst 3028 quantum 1514 prio 0\n",
            "classid b3:10 htb rate 7100000bit ceil 18000000bit burst 3028 cburst 3028 quantum 1514 prio 1\n",
            "classid b3:20 htb rate 10000000bit ceil 10000000bit burst 3028 cburst 3028 quantum 1514 prio 2\n",
            // 50 ms at 10 Mbit/s, the containers' queue
            "parent b3:20 handle b320: tbf rate 100000000bit burst 6056 limit 62500\n",
            "parent b3:10 handle b310: tbf rate 180000000bit burst 6056 limit 22175\n",
            "parent b3:5 handle b305: tbf rate 60000000bit burst 6056 limit 6056\n",
        ] {
            assert!(s.contains(want), "{want}: {s}");
        }
        // Everything is replaced in place: nothing deleted, no instant ungoverned.
        assert!(!s.contains(" del "), "{s}");
        // The default class exists: no packet takes HTB's unshaped direct queue.
        assert!(s.contains("classid b3:10 "), "{s}");
        assert!(line_off_script()
            .contains("grep -q '^qdisc htb b3: '; then tc qdisc del dev \"$1\" root"));
    }

    #[test]
    fn the_uplinks_root_qdisc_is_free_ours_or_another_shapers() {
        assert_eq!(
            root_of("qdisc pfifo_fast 0: root refcnt 2 bands 3 priomap 1 2 2 2\n"),
            Root::Free
        );
        assert_eq!(root_of("qdisc noqueue 0: root refcnt 2\n"), Root::Free);
        assert_eq!(root_of(""), Root::Free);
        assert_eq!(
            root_of("qdisc htb b3: root refcnt 2 r2q 10 default 0x10 direct_packets_stat 0\n"),
            Root::Ours
        );
        assert_eq!(
            root_of("qdisc cake 8001: root refcnt 2 bandwidth 20Mbit\n"),
            Root::Foreign("cake 8001:".into())
        );
        assert_eq!(
            root_of("qdisc htb 1: root refcnt 2 r2q 10 default 0x12\n"),
            Root::Foreign("htb 1:".into())
        );
    }

    #[test]
    fn containers_packets_are_marked_for_their_class_and_the_hosts_filed() {
        let l = line(20_000_000, 10_000_000);
        assert_eq!(
            line_mark(&l),
            "    oifname \"wan0\" meta priority set b3:20\n"
        );
        let c = line_chain(&l);
        assert!(c.contains("type filter hook postrouting priority 0; policy accept;\n    oifname != \"wan0\" accept\n    meta priority b3:20 accept\n"), "{c}");
        // The last rule files whatever priority a socket chose into the host's class.
        assert!(c.ends_with("    meta priority set b3:10\n  }\n"), "{c}");
    }
}
