//! Summary statistics of repeated measurements.

use serde::Serialize;

#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    pub mean: f64,
    /// Half-width of the 95 % confidence interval of the mean (Student's t).
    pub ci95: f64,
    pub stddev: f64,
    pub min: f64,
    pub max: f64,
}

/// Percentile with linear interpolation between closest ranks (R's type 7); `sorted` ascending.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let h = (n - 1) as f64 * p.clamp(0.0, 1.0);
            let lo = h.floor() as usize;
            let hi = (lo + 1).min(n - 1);
            sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
        }
    }
}

/// Two-sided 97.5 % quantile of Student's t with `df` degrees of freedom.
pub fn t975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::NAN,
        1..=30 => T[df - 1],
        // Within 0.002 of the exact value from 31 on.
        _ => 1.96 + 2.5 / df as f64,
    }
}

pub fn summarize(samples: &[f64]) -> Option<Summary> {
    let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    let mean = s.iter().sum::<f64>() / n as f64;
    let var = if n > 1 {
        s.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64
    } else {
        0.0
    };
    let stddev = var.sqrt();
    let ci95 = if n > 1 {
        t975(n - 1) * stddev / (n as f64).sqrt()
    } else {
        f64::NAN
    };
    Some(Summary {
        n,
        median: percentile(&s, 0.5),
        p10: percentile(&s, 0.1),
        p90: percentile(&s, 0.9),
        mean,
        ci95,
        stddev,
        min: s[0],
        max: s[n - 1],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate() {
        let s = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&s, 0.5), 3.0);
        assert_eq!(percentile(&s, 0.1), 1.4);
        assert!((percentile(&s, 0.9) - 4.6).abs() < 1e-12);
        assert_eq!(percentile(&[7.0], 0.9), 7.0);
    }

    #[test]
    fn summary_of_known_samples() {
        let s = summarize(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(s.n, 8);
        assert_eq!(s.mean, 5.0);
        assert_eq!(s.median, 4.5);
        assert!((s.stddev - 2.138).abs() < 1e-3);
        assert!((s.ci95 - 2.365 * 2.138 / 8f64.sqrt()).abs() < 1e-2);
        assert!(summarize(&[]).is_none());
        assert!(summarize(&[1.0]).unwrap().ci95.is_nan());
    }

    #[test]
    fn t_quantiles() {
        assert_eq!(t975(1), 12.706);
        assert_eq!(t975(29), 2.045);
        assert!((t975(60) - 2.000).abs() < 0.003);
        assert!((t975(120) - 1.980).abs() < 0.003);
    }
}
