//! Data caps (`[resources] data_cap`, `[policy] data_reset_day`, `metered`): how many bytes an
//! isolated container may move over the WAN in a period, counted and enforced by the kernel
//! with one nft named quota per container, which both directions pass through:
//! - **upload**: the `outbound` chain, packets from the container out of the WAN interfaces;
//! - **download**: the `forward` chain, packets from the WAN interfaces to the container,
//!   before the rule that accepts established connections.
//!
//! A quota counts every packet that reaches its rule (its IP length) and matches only once
//! over its size: below the cap the rule passes the packet on, at the cap it drops it (or,
//! with `over_cap` a rate, lets it through at that rate only). The ruleset is loaded whole at
//! each change, which would start every quota at zero: what each has counted is read back
//! first and written into the new one (`used`), and kept on flash (`<state>/usage/NAME`) so
//! that a daemon restart or a reboot keeps the period's count.

use std::fmt::Write as _;

/// The least cap: 1 MiB (below that a DNS lookup and a TLS handshake are most of it).
pub const MIN_CAP: u64 = 1 << 20;

/// A cap's period: a UTC day, an ISO week (from Monday), or a month from the policy's reset
/// day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    Day,
    Week,
    Month,
}

/// So many bytes a period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataCap {
    pub bytes: u64,
    pub period: Period,
}

/// What happens at the cap: WAN traffic dropped, or let through at so many bytes a second
/// each way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Over {
    #[default]
    Drop,
    Throttle(u64),
}

/// Parses `SIZE/PERIOD`: a size with `K`, `M` or `G` (also `KiB`, `MiB`, `GiB`), 1024-based,
/// at least [`MIN_CAP`]; a period of `day`, `week` or `month`. E.g. `"2GiB/month"`.
pub fn parse_cap(s: &str) -> Result<DataCap, String> {
    let want = "expected a size and a period, such as \"2G/month\" (day, week or month)";
    let Some((size, period)) = s.split_once('/') else {
        return Err(format!("{s:?}: {want}"));
    };
    let period = match period {
        "day" => Period::Day,
        "week" => Period::Week,
        "month" => Period::Month,
        _ => return Err(format!("{s:?}: unknown period {period:?}: {want}")),
    };
    let digits = size.strip_suffix("iB").unwrap_or(size);
    let (digits, shift) = match digits.as_bytes().last() {
        Some(b'K' | b'k') => (&digits[..digits.len() - 1], 10),
        Some(b'M' | b'm') => (&digits[..digits.len() - 1], 20),
        Some(b'G' | b'g') => (&digits[..digits.len() - 1], 30),
        _ => (digits, 0),
    };
    let bytes = Some(digits)
        .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|d| d.parse::<u64>().ok())
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("{s:?}: invalid size {size:?}: {want}"))?;
    if bytes < MIN_CAP {
        return Err(format!("{s:?}: at least 1M a period"));
    }
    Ok(DataCap { bytes, period })
}

/// The cap as it is written: `2G/month`.
pub fn fmt_cap(c: DataCap) -> String {
    let b = c.bytes;
    let size = match b {
        _ if b.is_multiple_of(1 << 30) => format!("{}G", b >> 30),
        _ if b.is_multiple_of(1 << 20) => format!("{}M", b >> 20),
        _ if b.is_multiple_of(1 << 10) => format!("{}K", b >> 10),
        _ => b.to_string(),
    };
    let p = match c.period {
        Period::Day => "day",
        Period::Week => "week",
        Period::Month => "month",
    };
    format!("{size}/{p}")
}

/// The device's rules for data caps (`[policy] data_reset_day`, `metered`, `metered_data_cap`,
/// `over_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataPolicy {
    /// The day of the month a monthly period begins (1..=28).
    pub reset_day: u8,
    /// Whether the line is metered at the daemon's start (`berth net metered` changes it).
    pub metered: bool,
    /// While metered: each isolated container's cap, unless its own is smaller.
    pub metered_cap: Option<DataCap>,
    pub over: Over,
}

impl Default for DataPolicy {
    fn default() -> Self {
        DataPolicy {
            reset_day: 1,
            metered: false,
            metered_cap: None,
            over: Over::Drop,
        }
    }
}

impl DataPolicy {
    /// The cap in force for a container whose package asks `own`: while metered, the smaller
    /// of its own and the policy's metered cap (in bytes, whatever their periods: one quota
    /// counts one period).
    pub fn cap(&self, own: Option<DataCap>, metered: bool) -> Option<DataCap> {
        match (own, self.metered_cap.filter(|_| metered)) {
            (Some(o), Some(m)) if o.bytes <= m.bytes => Some(o),
            (_, Some(m)) => Some(m),
            (o, None) => o,
        }
    }
}

/// `over_cap`: `drop`, or a rate (as tc writes one: `64kbit`) WAN traffic keeps each way.
pub fn parse_over(s: &str) -> Result<Over, String> {
    if s == "drop" {
        return Ok(Over::Drop);
    }
    crate::shape::parse_rate(s)
        .map(|bits| Over::Throttle(bits / 8))
        .map_err(|e| format!("{e}; or \"drop\""))
}

/// A cap in the state as it is written (`"2G/month"`): the strings' code serves it, no
/// code of its own for its parts (`#[serde(with = "crate::datacap::as_text")]`).
pub mod as_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(c: &Option<super::DataCap>, s: S) -> Result<S::Ok, S::Error> {
        match c {
            Some(c) => s.serialize_some(&super::fmt_cap(*c)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<super::DataCap>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|t| super::parse_cap(&t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// Days since 1970-01-01 of a civil date (the inverse of [`crate::date::civil`]).
fn days_of(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The period holding `now` (UNIX seconds, UTC): its first and its next period's first day,
/// as days since 1970. A month runs from its `reset_day` (1..=28) to the next month's.
pub fn period_of(p: Period, reset_day: u8, now: u64) -> (i64, i64) {
    let today = (now / 86_400) as i64;
    match p {
        Period::Day => (today, today + 1),
        // 1970-01-01 was a Thursday: Monday is three days on from it.
        Period::Week => {
            let monday = today - (today + 3).rem_euclid(7);
            (monday, monday + 7)
        }
        Period::Month => {
            let (y, m, d) = crate::date::civil(today);
            let r = i64::from(reset_day.clamp(1, 28));
            let (y0, m0) = match (d >= r, m) {
                (true, _) => (y, m),
                (false, 1) => (y - 1, 12),
                (false, _) => (y, m - 1),
            };
            let (y1, m1) = if m0 == 12 { (y0 + 1, 1) } else { (y0, m0 + 1) };
            (days_of(y0, m0, r), days_of(y1, m1, r))
        }
    }
}

/// A container's count, as kept on flash: the period it is of (its first day and the first
/// day after it, days since 1970) and the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub period: i64,
    pub ends: i64,
    pub used: u64,
}

impl Usage {
    pub fn parse(text: &str) -> Option<Usage> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        let period = v["period"].as_i64()?;
        Some(Usage {
            period,
            ends: v["ends"].as_i64().unwrap_or(period + 1),
            used: v["used"].as_u64()?,
        })
    }

    pub fn to_text(self) -> String {
        format!(
            "{{\"period\":{},\"ends\":{},\"used\":{}}}\n",
            self.period, self.ends, self.used
        )
    }
}

/// Whether a count moved enough since it was written to be written again: a hundredth of the
/// cap, or a MiB, or it reached the cap (which a power cut must not forget). Flash is written
/// at most once a look per container, and only then.
pub fn worth_writing(saved: Usage, now: Usage, cap: u64) -> bool {
    if saved.period != now.period || saved.ends != now.ends {
        return true;
    }
    let moved = now.used.abs_diff(saved.used);
    moved >= (cap / 100).max(1 << 20) || (now.used >= cap && saved.used < cap)
}

/// What the daemon last knew of a capped container (its `usage` list): for the views and
/// `GET /v1/self`, which ask nothing of nft (a container must not make the daemon run it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    pub cap: DataCap,
    pub usage: Usage,
    /// The first day of the next period (days since 1970).
    pub resets: i64,
    /// What its flash file holds.
    pub saved: Usage,
    /// The count its quota was loaded with (it may be above a cap lowered since).
    pub loaded: u64,
    /// Its quota's name's number.
    pub index: u32,
}

/// The daemon's records of the capped containers: those the ruleset in force counts, and
/// those prepared for a load not yet in (or that failed: then the next look asks for it
/// again).
#[derive(Debug, Default)]
pub struct Counts {
    pub known: Vec<(String, Known)>,
    pub pending: Option<Vec<(String, Known)>>,
}

/// One container's quota in the ruleset: its index (the name's number), its cap, what it has
/// counted in this period, and what happens beyond.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub index: u32,
    pub cap: u64,
    pub used: u64,
    pub over: Over,
}

/// The quota objects of berth's inet table. A count beyond the cap (what was refused counts
/// too) is written as the cap: the kernel takes no more.
pub fn objects(w: &mut String, quotas: &[Quota]) {
    for q in quotas {
        let _ = writeln!(
            w,
            "  quota q_{} {{ over {} bytes used {} bytes }}",
            q.index,
            q.cap,
            q.used.min(q.cap)
        );
    }
}

/// The ruleset's text, its quotas written with count 0 (as the hash saw it), with `quotas`'
/// counts in their place.
pub fn with_counts(mut text: String, quotas: &[Quota]) -> String {
    for q in quotas.iter().filter(|q| q.used > 0) {
        let zero = format!(
            "quota q_{} {{ over {} bytes used 0 bytes }}",
            q.index, q.cap
        );
        let counted = format!(
            "quota q_{} {{ over {} bytes used {} bytes }}",
            q.index,
            q.cap,
            q.used.min(q.cap)
        );
        text = text.replacen(&zero, &counted, 1);
    }
    text
}

/// What follows `quota name q_I` in a rule: the verdict beyond the cap.
fn verdict(o: Over) -> String {
    match o {
        Over::Drop => "drop".into(),
        Over::Throttle(b) => format!("limit rate over {b} bytes/second drop"),
    }
}

/// The upload rule: `from` is the container's address match, `wan` the WAN interfaces'.
pub fn upload_rule(q: &Quota, from: &str, wan: &str) -> String {
    format!(
        "    {from} {wan} quota name q_{} {}\n",
        q.index,
        verdict(q.over)
    )
}

/// The download rule (in `forward`, before established connections are accepted): what the
/// container's connections bring, not what strangers send it (which the chain drops, and
/// which must not use its cap up).
pub fn download_rule(q: &Quota, to: &str, wan_in: &str, bridge: &str) -> String {
    format!(
        "    {wan_in} oifname \"{bridge}\" {to} ct state established,related quota name q_{} {}\n",
        q.index,
        verdict(q.over)
    )
}

/// The quotas in `nft -j list quotas …` output: (index, bytes used, its cap).
pub fn parse_quotas(v: &serde_json::Value) -> Vec<(u32, u64, u64)> {
    let mut out = Vec::new();
    for item in v["nftables"].as_array().into_iter().flatten() {
        let q = &item["quota"];
        let (Some(name), Some(used)) = (q["name"].as_str(), q["used"].as_u64()) else {
            continue;
        };
        if let Some(i) = name.strip_prefix("q_").and_then(|i| i.parse().ok()) {
            out.push((i, used, q["bytes"].as_u64().unwrap_or(u64::MAX)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_parse_and_print_and_refuse_by_name() {
        let c = parse_cap("2GiB/month").unwrap();
        assert_eq!(
            c,
            DataCap {
                bytes: 2 << 30,
                period: Period::Month
            }
        );
        assert_eq!(fmt_cap(c), "2G/month");
        assert_eq!(parse_cap("500M/day").unwrap().bytes, 500 << 20);
        assert_eq!(fmt_cap(parse_cap("1536K/week").unwrap()), "1536K/week");
        for (bad, why) in [
            ("2G", "expected a size and a period"),
            ("2G/year", "unknown period \"year\""),
            ("512K/day", "at least 1M"),
            ("lots/day", "invalid size"),
        ] {
            let e = parse_cap(bad).unwrap_err();
            assert!(e.contains(why) && e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn periods_begin_on_their_day() {
        let day = |y, m, d| days_of(y, m, d);
        // The inverse of `civil` across leap days and years.
        for n in [-1, 0, 59, 10_956, 11_016, 20_429, 47_482] {
            let (y, m, d) = crate::date::civil(n);
            assert_eq!(days_of(y, m, d), n);
        }
        let at = |y, m, d| day(y, m, d) as u64 * 86_400 + 3_600;
        // 2026-12-07 is a Monday.
        assert_eq!(
            period_of(Period::Week, 1, at(2026, 12, 7)),
            (day(2026, 12, 7), day(2026, 12, 14))
        );
        assert_eq!(
            period_of(Period::Week, 1, at(2026, 12, 13)),
            (day(2026, 12, 7), day(2026, 12, 14))
        );
        assert_eq!(
            period_of(Period::Day, 1, at(2026, 12, 7)),
            (day(2026, 12, 7), day(2026, 12, 8))
        );
        // A month from the 15th: before it, the month before's.
        assert_eq!(
            period_of(Period::Month, 15, at(2026, 12, 7)),
            (day(2026, 11, 15), day(2026, 12, 15))
        );
        assert_eq!(
            period_of(Period::Month, 15, at(2026, 12, 15)),
            (day(2026, 12, 15), day(2027, 1, 15))
        );
        assert_eq!(
            period_of(Period::Month, 20, at(2027, 1, 3)),
            (day(2026, 12, 20), day(2027, 1, 20))
        );
        assert_eq!(
            period_of(Period::Month, 1, at(2028, 2, 29)),
            (day(2028, 2, 1), day(2028, 3, 1))
        );
    }

    #[test]
    fn a_count_is_written_when_it_moved_or_reached_the_cap() {
        let u = |period, used| Usage {
            period,
            ends: period + 1,
            used,
        };
        let cap = 4 << 20;
        assert!(!worth_writing(u(9, 0), u(9, 1000), cap));
        assert!(worth_writing(u(9, 0), u(9, 1 << 20), cap));
        assert!(worth_writing(u(9, 3 << 20), u(9, cap), cap));
        assert!(!worth_writing(u(9, cap), u(9, cap + 10), cap));
        assert!(worth_writing(u(8, 5), u(9, 0), cap));
        // A large cap: a hundredth of it.
        assert!(!worth_writing(u(9, 0), u(9, 2 << 20), 1 << 30));
        assert_eq!(Usage::parse(&u(9, 77).to_text()), Some(u(9, 77)));
        assert_eq!(Usage::parse("{\"period\":9}"), None);
        // Written without its end: a day.
        assert_eq!(Usage::parse("{\"period\":9,\"used\":77}"), Some(u(9, 77)));
    }

    #[test]
    fn a_cap_is_kept_in_the_state_as_it_is_written() {
        let r = crate::manifest::Resources {
            data_cap: Some(parse_cap("2GiB/month").unwrap()),
            ..Default::default()
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["data_cap"], "2G/month");
        let back: crate::manifest::Resources = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(back, r);
        // A state written before data caps: none.
        let mut old = v.clone();
        old.as_object_mut().unwrap().remove("data_cap");
        let back: crate::manifest::Resources = serde_json::from_value(old).unwrap();
        assert_eq!(back.data_cap, None);
        let mut bad = v;
        bad["data_cap"] = "2G/year".into();
        let e = serde_json::from_value::<crate::manifest::Resources>(bad).unwrap_err();
        assert!(e.to_string().contains("unknown period"), "{e}");
    }

    #[test]
    fn rules_and_read_back() {
        let q = Quota {
            index: 2,
            cap: 4 << 20,
            used: 100,
            over: Over::Drop,
        };
        let mut o = String::new();
        objects(
            &mut o,
            &[
                q,
                Quota {
                    index: 3,
                    used: 5 << 20,
                    ..q
                },
            ],
        );
        assert_eq!(
            o,
            "  quota q_2 { over 4194304 bytes used 100 bytes }\n  quota q_3 { over 4194304 bytes used 4194304 bytes }\n"
        );
        assert_eq!(
            upload_rule(&q, "ip saddr 10.0.0.2", "oifname \"wan\""),
            "    ip saddr 10.0.0.2 oifname \"wan\" quota name q_2 drop\n"
        );
        let t = Quota {
            over: Over::Throttle(8000),
            ..q
        };
        assert_eq!(
            download_rule(&t, "ip daddr 10.0.0.2", "iifname \"wan\"", "br0"),
            "    iifname \"wan\" oifname \"br0\" ip daddr 10.0.0.2 ct state established,related quota name q_2 limit rate over 8000 bytes/second drop\n"
        );
        let v = serde_json::json!({"nftables": [{"metainfo": {}},
            {"quota": {"family": "inet", "name": "q_2", "bytes": 4194304, "used": 1000, "inv": true}},
            {"quota": {"name": "other", "used": 5}}]});
        assert_eq!(parse_quotas(&v), vec![(2, 1000, 4194304)]);
    }
}
