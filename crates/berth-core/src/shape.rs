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
}
