//! Dates for people: UNIX seconds as a UTC calendar date (no time-zone database on a device).

/// The earliest wall-clock time berth believes: 2026-01-01 00:00 UTC, before this release was
/// made. A clock behind it is not set yet: a device without a real-time clock boots in 1970
/// (or at its firmware's build date) until NTP answers. A date berth records while the clock
/// is behind it is kept, but never used to measure an age (docs/time.md).
pub const CLOCK_FLOOR: u64 = 1_767_225_600;

/// Whether the wall clock at `now` (UNIX seconds) can be a real date: at or after
/// [`CLOCK_FLOOR`].
pub fn clock_set(now: u64) -> bool {
    now >= CLOCK_FLOOR
}

/// The age at `now` of a date `then`, both UNIX seconds, when the clock can tell it: None
/// when `then` was recorded before the clock was set and read after (behind
/// [`CLOCK_FLOOR`] then, not now: its age is unknown, not 56 years), or lies ahead of `now`
/// (written before the clock was set back). Both behind the floor (a device whose clock is
/// never set) count on that clock.
pub fn age(then: u64, now: u64) -> Option<u64> {
    (then <= now && clock_set(then) == clock_set(now)).then(|| now - then)
}

/// UNIX seconds as `YYYY-MM-DD HH:MM UTC` (the civil calendar from days since 1970).
pub fn utc(secs: u64) -> String {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let (y, m, d) = civil(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

/// Days since 1970-01-01 as (year, month, day) of the proleptic Gregorian calendar.
pub fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(utc(1_795_579_551), "2026-11-25 04:05 UTC");
        assert_eq!(utc(4_102_444_799), "2099-12-31 23:59 UTC");
    }

    #[test]
    fn a_clock_before_the_floor_is_not_set_and_its_dates_have_no_age() {
        assert_eq!(utc(CLOCK_FLOOR), "2026-01-01 00:00 UTC");
        assert!(!clock_set(5) && !clock_set(CLOCK_FLOOR - 1) && clock_set(CLOCK_FLOOR));
        let t = CLOCK_FLOOR + 1000;
        assert_eq!(age(t, t + 60), Some(60));
        assert_eq!(age(t, t), Some(0));
        // recorded in 1970, read once NTP has answered: unknown, not 56 years
        assert_eq!(age(300, t), None);
        // recorded before the clock was set back
        assert_eq!(age(t, t - 1), None);
        // a clock never set: ages on it
        assert_eq!(age(300, 900), Some(600));
    }
}
