//! Cron expressions (docs/schedules.md): the five fields `minute hour day-of-month month
//! day-of-week` of crontab(5) and the nicknames, parsed once, and the next time one matches.
//!
//! Semantics follow Vixie cron (cronie, busybox crond read the same): `*`, lists `a,b`,
//! ranges `a-b`, steps `*/n`, `a-b/n` and `a/n` (from a to the field's end); month and
//! weekday names (`jan`, `MON`, three letters, any case); 0 and 7 both Sunday. When both
//! day fields are restricted (neither starts with `*`), a day matches if EITHER matches
//! (`0 0 1 * mon`: the 1st and every Monday); otherwise both must.
//!
//! Times are civil UTC: UNIX seconds, read with `date::civil`. A device has no time-zone
//! database, and its local offset changes with daylight saving; an operator writes hours in
//! UTC.

use crate::date::civil;

/// (name, lowest, highest) of each field, in order.
const FIELDS: [(&str, u32, u32); 5] = [
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
];

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// The most days of each month (February in a leap year).
const MONTH_DAYS: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// Longest expression accepted (an API caller's input).
pub const MAX_LEN: usize = 128;

/// Why an expression is refused: the field (None: the whole expression) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronError {
    pub field: Option<&'static str>,
    pub what: String,
}

impl std::fmt::Display for CronError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.field {
            Some(field) => write!(f, "{field}: {}", self.what),
            None => f.write_str(&self.what),
        }
    }
}

impl std::error::Error for CronError {}

/// A parsed expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cron {
    /// `@reboot`: once per boot of the device.
    Reboot,
    At(Times),
}

/// The five fields as bit sets (bit n: value n matches); day-of-week 7 is folded into 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Times {
    bits: [u64; 5],
    /// The day field starts with `*` (crontab(5): not "restricted").
    dom_star: bool,
    dow_star: bool,
}

fn err(field: Option<&'static str>, what: String) -> CronError {
    CronError { field, what }
}

/// Parses an expression: five fields separated by blanks, or a nickname.
pub fn parse(s: &str) -> Result<Cron, CronError> {
    if s.len() > MAX_LEN {
        return Err(err(None, format!("longer than {MAX_LEN} bytes")));
    }
    let s = s.trim();
    let five = match s {
        "@reboot" => return Ok(Cron::Reboot),
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        _ if s.starts_with('@') => {
            return Err(err(
                None,
                format!("unknown nickname {s:?} (@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly, @reboot)"),
            ))
        }
        _ => s,
    };
    let fields: Vec<&str> = five.split_ascii_whitespace().collect();
    if fields.len() != 5 {
        return Err(err(
            None,
            format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), found {}",
                fields.len()
            ),
        ));
    }
    let mut bits = [0u64; 5];
    for (i, f) in fields.iter().enumerate() {
        bits[i] = field(f, i)?;
    }
    let t = Times {
        bits,
        dom_star: fields[2].starts_with('*'),
        dow_star: fields[4].starts_with('*'),
    };
    // Only the day of the month decides (the weekday is `*`): some month must have it.
    if !t.dom_star
        && t.dow_star
        && !(1..=12)
            .any(|m| t.bits[3] & 1 << m != 0 && t.bits[2] & ((2u64 << MONTH_DAYS[m - 1]) - 2) != 0)
    {
        return Err(err(
            Some("day-of-month"),
            format!("{} never comes in month {}", fields[2], fields[3]),
        ));
    }
    Ok(Cron::At(t))
}

/// One field as a bit set.
fn field(text: &str, i: usize) -> Result<u64, CronError> {
    let (name, lo, hi) = FIELDS[i];
    let bad = |what: String| err(Some(name), what);
    let mut bits = 0u64;
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => match number(s) {
                Some(n) if (1..=hi).contains(&n) => (r, Some(n)),
                _ => return Err(bad(format!("step {s:?}: expected a number 1-{hi}"))),
            },
            None => (item, None),
        };
        let value = |v: &str| -> Result<u32, CronError> {
            let names: &[&str] = match i {
                3 => &MONTHS,
                4 => &DAYS,
                _ => &[],
            };
            let n = match names.iter().position(|n| n.eq_ignore_ascii_case(v)) {
                Some(p) => p as u32 + u32::from(i == 3),
                None if v.is_empty() => return Err(bad(format!("empty value in {text:?}"))),
                None => number(v).ok_or_else(|| bad(format!("{v:?} is not a number")))?,
            };
            match n {
                n if n < lo || n > hi => Err(bad(format!("{n} is out of range {lo}-{hi}"))),
                n => Ok(n),
            }
        };
        let (a, b) = match range.split_once('-') {
            _ if range == "*" => (lo, hi),
            Some((a, b)) => (value(a)?, value(b)?),
            // `a/n`: from a to the end of the field.
            None if step.is_some() => (value(range)?, hi),
            None => {
                let a = value(range)?;
                (a, a)
            }
        };
        if a > b {
            return Err(bad(format!("range {a}-{b} goes backwards")));
        }
        for v in (a..=b).step_by(step.unwrap_or(1) as usize) {
            bits |= 1 << v;
        }
    }
    if i == 4 && bits & 1 << 7 != 0 {
        bits = (bits | 1) & !(1 << 7);
    }
    Ok(bits)
}

/// A small decimal number (no sign, at most 3 digits).
fn number(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 3 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// How far `next_after` looks: 400 years, a whole cycle of the Gregorian calendar, so any
/// day that ever comes is found.
const SEARCH_DAYS: i64 = 146_097;

impl Times {
    /// Whether this day (month 1-12, day 1-31, weekday 0-6 from Sunday) matches.
    pub fn day_matches(&self, month: u32, day: u32, weekday: u32) -> bool {
        if self.bits[3] & 1 << month == 0 {
            return false;
        }
        let d = self.bits[2] & 1 << day != 0;
        let w = self.bits[4] & 1 << weekday != 0;
        if self.dom_star || self.dow_star {
            d && w
        } else {
            d || w
        }
    }

    /// Whether this minute of the day (hour 0-23, minute 0-59) matches.
    pub fn time_matches(&self, hour: u32, minute: u32) -> bool {
        self.bits[1] & 1 << hour != 0 && self.bits[0] & 1 << minute != 0
    }

    /// The first minute of the day at or after minute `from` (0-1439) that matches.
    fn first_minute(&self, from: u32) -> Option<u32> {
        (from / 60..24)
            .filter(|h| self.bits[1] & 1 << h != 0)
            .find_map(|h| {
                let start = if h == from / 60 { from % 60 } else { 0 };
                let m = self.bits[0] >> start;
                (m != 0).then(|| h * 60 + start + m.trailing_zeros())
            })
    }

    /// The first whole minute after `t` (UNIX seconds, UTC) that matches; None if none
    /// comes within 400 years.
    pub fn next_after(&self, t: i64) -> Option<i64> {
        let start = t.div_euclid(60) * 60 + 60;
        let mut day = start.div_euclid(86_400);
        let mut from = (start.rem_euclid(86_400) / 60) as u32;
        let end = day + SEARCH_DAYS;
        while day < end {
            let (_, m, d) = civil(day);
            let (m, d) = (m as u32, d as u32);
            if self.bits[3] & 1 << m == 0 {
                // Not this month: on to the first of the next.
                day += i64::from(MONTH_DAYS[m as usize - 1]) - i64::from(d) + 1;
                if civil(day).2 != 1 {
                    // A February of 28 days ended a day earlier.
                    day -= 1;
                }
                from = 0;
                continue;
            }
            let weekday = (day + 4).rem_euclid(7) as u32;
            if self.day_matches(m, d, weekday) {
                if let Some(minute) = self.first_minute(from) {
                    return Some(day * 86_400 + i64::from(minute) * 60);
                }
            }
            day += 1;
            from = 0;
        }
        None
    }
}

impl Cron {
    /// The next run after `t`; None for `@reboot` (it has no times).
    pub fn next_after(&self, t: i64) -> Option<i64> {
        match self {
            Cron::Reboot => None,
            Cron::At(times) => times.next_after(t),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// UNIX seconds of a UTC civil time (the inverse of `civil`, for the tests).
    fn at(y: i64, mo: i64, d: i64, h: i64, mi: i64) -> i64 {
        let (y2, m2) = if mo <= 2 {
            (y - 1, mo + 9)
        } else {
            (y, mo - 3)
        };
        let era = y2.div_euclid(400);
        let yoe = y2 - era * 400;
        let doy = (153 * m2 + 2) / 5 + d - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        days * 86_400 + h * 3600 + mi * 60
    }

    fn times(s: &str) -> Times {
        match parse(s) {
            Ok(Cron::At(t)) => t,
            other => panic!("{s}: {other:?}"),
        }
    }

    /// The definition, minute by minute: does `t` (a whole minute) match?
    fn matches(t: &Times, secs: i64) -> bool {
        let day = secs.div_euclid(86_400);
        let (_, m, d) = civil(day);
        let rem = secs.rem_euclid(86_400);
        t.day_matches(m as u32, d as u32, (day + 4).rem_euclid(7) as u32)
            && t.time_matches((rem / 3600) as u32, (rem % 3600 / 60) as u32)
    }

    #[test]
    fn next_times() {
        let t0 = at(2026, 1, 1, 0, 7); // a Thursday
        for (expr, from, want) in [
            ("*/15 * * * *", t0, at(2026, 1, 1, 0, 15)),
            ("* * * * *", t0, at(2026, 1, 1, 0, 8)),
            ("* * * * *", t0 + 59, at(2026, 1, 1, 0, 8)),
            ("7 0 * * *", t0, at(2026, 1, 2, 0, 7)),
            ("5 4 * * *", t0, at(2026, 1, 1, 4, 5)),
            ("0 0 * * 0", t0, at(2026, 1, 4, 0, 0)),
            ("0 0 * * 7", t0, at(2026, 1, 4, 0, 0)),
            ("0 0 * * sun", t0, at(2026, 1, 4, 0, 0)),
            (
                "0 9 * * MON-FRI",
                at(2026, 1, 2, 10, 0),
                at(2026, 1, 5, 9, 0),
            ),
            ("0 0 * * 5-7", at(2026, 1, 3, 1, 0), at(2026, 1, 4, 0, 0)),
            ("0 0 29 2 *", at(2025, 3, 1, 0, 0), at(2028, 2, 29, 0, 0)),
            ("0 0 29 2 *", at(2096, 3, 1, 0, 0), at(2104, 2, 29, 0, 0)),
            ("0 0 31 * *", at(2026, 2, 1, 0, 0), at(2026, 3, 31, 0, 0)),
            (
                "0 0 1 jan-mar/2 *",
                at(2026, 1, 1, 0, 0),
                at(2026, 3, 1, 0, 0),
            ),
            ("0 0 1 dec *", at(2026, 12, 1, 0, 0), at(2027, 12, 1, 0, 0)),
            // crontab(5): 4:30 on the 1st and 15th of each month, plus every Friday.
            ("30 4 1,15 * 5", at(2026, 1, 1, 5, 0), at(2026, 1, 2, 4, 30)),
            ("30 4 1,15 * 5", at(2026, 1, 2, 5, 0), at(2026, 1, 9, 4, 30)),
            (
                "30 4 1,15 * 5",
                at(2026, 1, 10, 5, 0),
                at(2026, 1, 15, 4, 30),
            ),
            // A `*/n` day field is not "restricted": both must match.
            ("0 0 */2 * 1", at(2026, 1, 1, 0, 0), at(2026, 1, 5, 0, 0)),
            ("0 0 */2 * 1", at(2026, 1, 5, 0, 0), at(2026, 1, 19, 0, 0)),
            ("0 0 1 * *", at(2026, 12, 31, 23, 59), at(2027, 1, 1, 0, 0)),
            (
                "10-20/5 1 * * *",
                at(2026, 1, 1, 1, 15),
                at(2026, 1, 1, 1, 20),
            ),
            ("50/5 * * * *", at(2026, 1, 1, 1, 56), at(2026, 1, 1, 2, 50)),
            (
                "0 22-23,1 * * *",
                at(2026, 1, 1, 23, 0),
                at(2026, 1, 2, 1, 0),
            ),
            ("@hourly", t0, at(2026, 1, 1, 1, 0)),
            ("@daily", t0, at(2026, 1, 2, 0, 0)),
            ("@midnight", t0, at(2026, 1, 2, 0, 0)),
            ("@weekly", t0, at(2026, 1, 4, 0, 0)),
            ("@monthly", t0, at(2026, 2, 1, 0, 0)),
            ("@yearly", t0, at(2027, 1, 1, 0, 0)),
            ("@annually", t0, at(2027, 1, 1, 0, 0)),
            // Before 1970 and far ahead: the same arithmetic.
            ("0 12 * * *", at(1969, 12, 31, 13, 0), at(1970, 1, 1, 12, 0)),
            ("0 0 1 1 *", at(5000, 6, 1, 0, 0), at(5001, 1, 1, 0, 0)),
        ] {
            assert_eq!(times(expr).next_after(from), Some(want), "{expr}");
        }
        assert_eq!(parse("@reboot"), Ok(Cron::Reboot));
        assert_eq!(Cron::Reboot.next_after(t0), None);
        // Feb 29 on a Sunday, with the weekday restricted by a star step: found years on.
        let t = times("0 0 29 2 */7")
            .next_after(at(2026, 1, 1, 0, 0))
            .unwrap();
        assert_eq!(t, at(2032, 2, 29, 0, 0));
    }

    #[test]
    fn bad_expressions_name_the_field() {
        for (expr, want) in [
            ("", "expected 5 fields"),
            ("* * * *", "found 4"),
            ("* * * * * *", "found 6"),
            ("61 * * * *", "minute: 61 is out of range 0-59"),
            ("* 24 * * *", "hour: 24 is out of range 0-23"),
            ("* * 0 * *", "day-of-month: 0 is out of range 1-31"),
            ("* * * 13 *", "month: 13 is out of range 1-12"),
            ("* * * * 8", "day-of-week: 8 is out of range 0-7"),
            ("a * * * *", "minute: \"a\" is not a number"),
            ("* * * * mon-", "day-of-week: empty value"),
            ("1,,2 * * * *", "minute: empty value"),
            ("*/0 * * * *", "minute: step \"0\""),
            ("*/x * * * *", "minute: step \"x\""),
            ("* */25 * * *", "hour: step \"25\""),
            ("5-1 * * * *", "minute: range 5-1 goes backwards"),
            ("* * * jan-feb-mar *", "month: \"feb-mar\" is not a number"),
            ("* * * * fri-mon", "day-of-week: range 5-1 goes backwards"),
            ("* * * mon *", "month: \"mon\" is not a number"),
            ("* * * * jan", "day-of-week: \"jan\" is not a number"),
            ("-1 * * * *", "minute: empty value"),
            ("1000 * * * *", "minute: \"1000\" is not a number"),
            ("0 0 30 2 *", "day-of-month: 30 never comes in month 2"),
            ("0 0 31 4,6 *", "day-of-month: 31 never comes in month 4,6"),
            ("@every", "unknown nickname \"@every\""),
            ("@reboot now", "unknown nickname"),
        ] {
            let e = parse(expr).unwrap_err().to_string();
            assert!(e.contains(want), "{expr:?}: {e}");
        }
        assert!(parse(&"1,".repeat(100))
            .unwrap_err()
            .to_string()
            .contains("longer than"));
        // Restricted weekdays make such a day possible again (either matches).
        assert!(parse("0 0 30 2 mon").is_ok());
    }

    #[test]
    fn fields_as_sets() {
        assert_eq!(times("*/20 * * * *").bits[0], 1 | 1 << 20 | 1 << 40);
        assert_eq!(
            times("1-10/3 * * * *").bits[0],
            1 << 1 | 1 << 4 | 1 << 7 | 1 << 10
        );
        assert_eq!(times("* * * * 0,7").bits[4], 1);
        assert_eq!(times("* * * * *").bits[4], 0x7f);
        assert_eq!(times("* * * * 6-7").bits[4], 1 | 1 << 6);
        assert_eq!(times("* * * Jan,DEC *").bits[3], 1 << 1 | 1 << 12);
        assert_eq!(times("  0   0  *  * * ").bits[1], 1);
        assert_eq!(times("\t5\t*\t*\t*\t*"), times("5 * * * *"));
    }

    /// A small deterministic generator (xorshift), so a failure reproduces.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// A random field of `lo..=hi`: `*`, a value, a range, a step or a list of them.
    fn random_field(r: &mut Rng, lo: u64, hi: u64) -> String {
        let one = |r: &mut Rng| -> String {
            let a = lo + r.next(hi - lo + 1);
            let b = a + r.next(hi - a + 1);
            match r.next(6) {
                0 => "*".into(),
                1 => format!("*/{}", 1 + r.next(hi.max(2) - 1)),
                2 => format!("{a}-{b}"),
                3 => format!("{a}-{b}/{}", 1 + r.next(4)),
                _ => a.to_string(),
            }
        };
        let n = 1 + r.next(3) as usize;
        (0..n).map(|_| one(r)).collect::<Vec<_>>().join(",")
    }

    /// Property: `next_after(t)` is after `t`, a whole minute, matches, and no minute between
    /// matches (checked minute by minute against the definition when the gap is short).
    #[test]
    fn next_after_is_the_first_matching_minute() {
        let mut r = Rng(0x2545_f491_4f6c_dd1d);
        let (mut checked, mut n) = (0, 0);
        while n < 400 {
            let expr = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]
                .iter()
                .enumerate()
                .map(|(i, &(lo, hi))| match (i, r.next(3)) {
                    // Mostly `*` for the day fields, so that the gaps stay checkable.
                    (2..=4, 0 | 1) => "*".to_string(),
                    _ => random_field(&mut r, lo, hi),
                })
                .collect::<Vec<_>>()
                .join(" ");
            let Ok(Cron::At(t)) = parse(&expr) else {
                continue;
            };
            n += 1;
            let from = at(2020, 1, 1, 0, 0) + r.next(40 * 365 * 86_400) as i64;
            let next = t.next_after(from).unwrap_or_else(|| panic!("{expr}: none"));
            assert!(next > from && next % 60 == 0, "{expr} after {from}: {next}");
            assert!(matches(&t, next), "{expr}: {next} does not match");
            if next - from <= 20 * 86_400 {
                checked += 1;
                let mut m = (from.div_euclid(60) + 1) * 60;
                while m < next {
                    assert!(
                        !matches(&t, m),
                        "{expr} after {from}: {m} matches before {next}"
                    );
                    m += 60;
                }
            }
        }
        assert!(checked > 200, "only {checked} gaps checked");
    }
}
