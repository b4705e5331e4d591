//! Decimal floating-point numbers as configuration files write them (`12.5`, `-3e-2`, `1E6`,
//! `inf`, `nan`), read without core's correctly rounding parser: that one carries a table of
//! 10 KiB and its big-number fallback into the device build, for the few floats a manifest
//! or berth.toml holds (a restart back-off's multiplier, the governor's rate).
//!
//! The result is correctly rounded whenever the significant digits (trailing zeros aside)
//! make an integer below 2^53 and the decimal exponent is within ±22 (every value those
//! files hold: Clinger's exact case, one rounding). Beyond, it is within a few units in the
//! last place: a value within a few units of the largest f64 may read as infinite (which
//! `tree.rs` refuses as an overflow).

/// The powers of ten that an f64 holds exactly.
const EXACT: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// `s` as a number: an optional sign, then digits with at most one `.` (at least one digit),
/// then an optional exponent (`e` or `E`, an optional sign, digits); or `inf`, `infinity`,
/// `nan` (any case). The same text as `str::parse::<f64>` takes; None for anything else.
pub fn parse(s: &str) -> Option<f64> {
    let (negative, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let magnitude = if rest.eq_ignore_ascii_case("inf") || rest.eq_ignore_ascii_case("infinity") {
        f64::INFINITY
    } else if rest.eq_ignore_ascii_case("nan") {
        f64::NAN
    } else {
        finite(rest.as_bytes())?
    };
    Some(if negative { -magnitude } else { magnitude })
}

/// Digits, a point, an exponent: the magnitude.
fn finite(b: &[u8]) -> Option<f64> {
    // The first 19 significant digits (a u64 holds them), and the power of ten they stand
    // at; later digits only move the point.
    let (mut digits, mut exp, mut seen, mut point) = (0u64, 0i64, false, false);
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        match c {
            b'0'..=b'9' => {
                seen = true;
                if digits < 1_000_000_000_000_000_000 {
                    digits = digits * 10 + u64::from(c - b'0');
                    exp -= i64::from(point);
                } else {
                    exp += i64::from(!point);
                }
            }
            b'.' if !point => point = true,
            _ => break,
        }
        i += 1;
    }
    if !seen {
        return None;
    }
    if let Some(&c) = b.get(i) {
        if c != b'e' && c != b'E' {
            return None;
        }
        let (sign, from) = match b.get(i + 1) {
            Some(b'-') => (-1, i + 2),
            Some(b'+') => (1, i + 2),
            _ => (1, i + 1),
        };
        let written = b.get(from..).filter(|d| !d.is_empty())?;
        let mut e = 0i64;
        for &d in written {
            if !d.is_ascii_digit() {
                return None;
            }
            // Far beyond any f64 either way (for fewer than 90 000 digits before it).
            e = (e * 10 + i64::from(d - b'0')).min(100_000);
        }
        exp += sign * e;
    }
    Some(scale(digits, exp))
}

/// `digits` × 10^`exp`.
fn scale(mut digits: u64, mut exp: i64) -> f64 {
    if digits == 0 {
        return 0.0;
    }
    // `2.50000` is 25e-1: fewer digits, more often the exact case.
    while digits.is_multiple_of(10) {
        digits /= 10;
        exp += 1;
    }
    let mut x = digits as f64;
    // In Clinger's exact case (digits below 2^53, the exponent within ±22) the loops do
    // nothing and the one operation at the end, of two exact operands, rounds once: the
    // correct result. Beyond, steps of 10^22 come first.
    while exp > 22 && x.is_finite() {
        x *= 1e22;
        exp -= 22;
    }
    while exp < -22 && x != 0.0 {
        x /= 1e22;
        exp += 22;
    }
    if x.is_infinite() || x == 0.0 {
        return x;
    }
    let p = EXACT[exp.unsigned_abs() as usize];
    if exp < 0 {
        x / p
    } else {
        x * p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything the files hold: exactly what core's parser reads.
    #[test]
    fn reads_what_config_files_write_exactly() {
        for s in [
            "0",
            "0.0",
            "-0.0",
            "1",
            "12.5",
            "0.1",
            "0.2",
            "0.3",
            "3.14159",
            "-2E-2",
            "1e06",
            "5e+22",
            "6.626e-22",
            "100.",
            ".5",
            "+1.5",
            "0.000001",
            "123456789012345",
            "9007199254740991",
            "1e22",
            "1e-22",
            "40",
            "99.99",
            "2.5e3",
            "1e23",
            "0.8347229905775811000",
            "2.50000",
            "1500e-3",
            "12.500000000000000000",
        ] {
            let want = s.parse::<f64>().ok();
            let got = parse(s);
            assert_eq!(
                got.map(f64::to_bits),
                want.map(f64::to_bits),
                "{s}: {got:?} against {want:?}"
            );
        }
    }

    /// Infinities and NaN, written so; overflow and underflow as core's parser gives them.
    #[test]
    fn infinities_nan_overflow_and_underflow() {
        assert_eq!(parse("inf"), Some(f64::INFINITY));
        assert_eq!(parse("-Infinity"), Some(f64::NEG_INFINITY));
        assert!(parse("+nan").unwrap().is_nan());
        assert_eq!(parse("1e999"), Some(f64::INFINITY));
        assert_eq!(parse("-1e400"), Some(f64::NEG_INFINITY));
        assert_eq!(parse("1e-999"), Some(0.0));
        assert_eq!(parse("1e99999999999999999999"), Some(f64::INFINITY));
    }

    /// What is not a number is None, as with core's parser.
    #[test]
    fn refuses_what_is_not_a_number() {
        for s in [
            "", "-", "+", ".", "e5", "1e", "1e+", "1.2.3", "1x", "0x10", "1 ", " 1", "--1", "in",
            "nana", "1e5.0", "1_0",
        ] {
            assert_eq!(parse(s), None, "{s:?}");
            assert!(s.parse::<f64>().is_err(), "{s:?}: core's parser takes it");
        }
    }

    /// Beyond the exact case (many digits, large exponents): within a few units in the last
    /// place of core's correctly rounded result, over a spread of inputs.
    #[test]
    fn close_to_the_correctly_rounded_value_beyond() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let mantissa = next() % 10_000_000_000_000_000_000;
            let exp = (next() % 600) as i64 - 300;
            let s = format!("{mantissa}.{}e{exp}", next() % 1000);
            let want = s.parse::<f64>().unwrap();
            let got = parse(&s).unwrap();
            if want == 0.0 || want.is_infinite() || want.abs() < f64::MIN_POSITIVE {
                continue;
            }
            // Finite as core reads it: finite here too, but within a few units of the
            // largest f64 (said in the module's documentation).
            if got.is_infinite() {
                assert!(
                    want > f64::MAX * (1.0 - 1e-14),
                    "{s}: infinite, core reads {want:e}"
                );
                continue;
            }
            let ulps = (got.to_bits() as i64 - want.to_bits() as i64).unsigned_abs();
            assert!(ulps <= 16, "{s}: {got:e} is {ulps} units off {want:e}");
        }
    }
}
