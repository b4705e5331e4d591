//! The adaptive CPU governor's decisions (DESIGN.md decision 4). Pure: the daemon probes the
//! main service, reads the group's CPU usage, hands both in once per tick and writes the cap
//! this returns onto the parent cgroup.
//!
//! - **Response rate** R: the inverse of one probe's latency, in responses per second
//!   (a probe answered in 20 ms is R = 50/s), i.e. how many such requests the main service
//!   would answer per second back to back. One probe per tick.
//! - **Share** `s = min(T_l + (R_c / R_n)·(T_u − T_l), T_u)`, never below T_l; T_l and T_u
//!   in percent of ALL CPUs (the unit of `policy.cpu_max`).
//! - **R_c** is 1 / an exponentially weighted moving average (weight [`ALPHA`]) of the median
//!   of the last 3 latencies: the median drops a lone spike (a probe that met a compile job
//!   or a page fault), the average smooths what is left. Latencies are averaged, not rates:
//!   under a CPU quota the containers run for part of each 100 ms period and are throttled
//!   for the rest, so probes come back either slow or at once; an average of rates is
//!   carried by the quick ones and overstated the service's throughput 2.7× in
//!   tests/governor.rs, the average latency follows it. It starts from R_n.
//! - **R_n** is configured, or learned: the median of the last `learn` samples taken while
//!   the containers were idle (group CPU below `idle_cpu`), updated as long as they stay so.
//! - **Damping.** The written cap moves towards the target by at most [`STEP_DOWN`] of
//!   (T_u − T_l) per tick downwards and [`STEP_UP`] upwards, and not at all while the target
//!   is within [`DEAD_BAND`] of it; a target within the dead band of T_l or T_u snaps to it.
//! - **Fallback.** A failed probe (refused, error, bad answer) holds the cap; a timed-out
//!   one counts as a sample of rate 1/timeout (a starved service is slow, not gone). After
//!   `fail_limit` consecutive failures of either kind the cap returns to the static T_u and
//!   stays there until a probe answers again: the governor never starves the containers on
//!   account of a service it cannot measure, and never does worse than the static cap.

/// Weight of a new sample in R_c. At the default 1 s interval a step change of the rate is
/// 83 % through after 5 ticks (1 − 0.7⁵), while a single outlier moves R_c by only 30 % of
/// its size; with the dead band that keeps ±20 % probe noise from moving the cap.
pub const ALPHA: f64 = 0.3;
/// Fraction of (T_u − T_l) within which the cap is not moved (hysteresis): 4.5 points with
/// the defaults, i.e. R_c moving by 10 % of R_n. Measured here, single probes of an idle
/// service scatter by ±30 %; after the median of 3 and the EWMA (standard deviation × ~0.4)
/// about ±5 % is left, so 10 % keeps an idle service's cap still at T_u while any real
/// contention (the hog of tests/governor.rs costs the service 90 %) is far outside it.
pub const DEAD_BAND: f64 = 0.10;
/// Largest move per tick, as a fraction of (T_u − T_l): down fast (T_u to T_l in 4 ticks)
/// to protect the main service, up slowly (10 ticks) because raising the cap is what can
/// hurt it again: a rise that overshoots is what makes a proportional loop ring.
pub const STEP_DOWN: f64 = 0.25;
pub const STEP_UP: f64 = 0.10;
/// Consecutive failed probes before the fallback to the static cap.
pub const FAIL_LIMIT: u32 = 3;

#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// T_l, percent of all CPUs.
    pub t_lower: f64,
    /// T_u, percent of all CPUs: the group budget's CPU cap unless configured lower.
    pub t_upper: f64,
    /// R_n as configured (responses per second); None: learned.
    pub r_normal: Option<f64>,
    /// How many idle samples the learned R_n is the median of.
    pub learn: usize,
    /// Group CPU use, percent of one CPU, below which the containers count as idle.
    pub idle_cpu: f64,
    pub fail_limit: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No probe configured: the cap is the static T_u.
    Static,
    /// Learning R_n; the cap is T_u meanwhile.
    Learning,
    Active,
    /// The probe keeps failing: the cap is T_u until it answers again.
    Fallback,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Static => "static",
            Mode::Learning => "learning",
            Mode::Active => "active",
            Mode::Fallback => "fallback",
        }
    }
}

/// What one probe gave.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Probe {
    /// Answered: responses per second (1 / latency).
    Answered(f64),
    /// No answer within the timeout: the rate is at most this (1 / timeout).
    TimedOut(f64),
    /// Refused, an error, a wrong answer.
    Failed,
}

/// The share formula: percent of all CPUs, between T_l and T_u.
pub fn share(t_lower: f64, t_upper: f64, r_c: f64, r_n: f64) -> f64 {
    if r_n <= 0.0 || !r_c.is_finite() {
        return t_upper;
    }
    (t_lower + (r_c / r_n) * (t_upper - t_lower))
        .min(t_upper)
        .max(t_lower)
}

fn median(v: &[f64]) -> f64 {
    // Insertion sort: a handful of values, and no generic sort code for the device build.
    let mut s: Vec<f64> = Vec::with_capacity(v.len());
    for &x in v {
        let i = s.iter().position(|&y| y > x).unwrap_or(s.len());
        s.insert(i, x);
    }
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

#[derive(Debug, Clone)]
pub struct Governor {
    pub p: Params,
    pub mode: Mode,
    pub r_n: Option<f64>,
    /// Smoothed current rate.
    pub r_c: Option<f64>,
    /// The last probe's rate (None after a failure).
    pub last: Option<f64>,
    /// The cap in force, percent of all CPUs.
    pub cap: f64,
    /// The unsmoothed, undamped share of the last tick.
    pub target: f64,
    pub failures: u32,
    idle: Vec<f64>,
    recent: Vec<f64>,
}

/// What a tick decided: the cap, whether it changed, and a sentence when the mode changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Tick {
    pub cap: f64,
    pub changed: bool,
    pub note: Option<String>,
}

impl Governor {
    pub fn new(p: Params) -> Governor {
        let r_c = p.r_normal;
        let mode = if p.r_normal.is_some() {
            Mode::Active
        } else {
            Mode::Learning
        };
        Governor {
            mode,
            r_n: p.r_normal,
            r_c,
            last: None,
            cap: p.t_upper,
            target: p.t_upper,
            failures: 0,
            idle: Vec::new(),
            recent: Vec::new(),
            p,
        }
    }

    /// One tick: the probe's result, and the group's CPU use over the last interval (percent
    /// of one CPU; None if unknown, which never counts as idle).
    pub fn tick(&mut self, probe: Probe, group_cpu: Option<f64>) -> Tick {
        let before = (self.cap, self.mode);
        let mut note = None;
        match probe {
            Probe::Answered(rate) => {
                if self.mode == Mode::Fallback {
                    self.r_c = None;
                    self.mode = if self.r_n.is_some() {
                        Mode::Active
                    } else {
                        Mode::Learning
                    };
                    note = Some(format!(
                        "the probe answers again ({}/s): governing from the static cap",
                        fmt1(rate)
                    ));
                }
                self.failures = 0;
                self.last = Some(rate);
                self.learn(rate, group_cpu);
                self.smooth(rate);
            }
            Probe::TimedOut(bound) => {
                self.failures += 1;
                self.last = None;
                if self.mode == Mode::Active && self.failures < self.p.fail_limit {
                    self.smooth(bound);
                }
            }
            Probe::Failed => {
                self.failures += 1;
                self.last = None;
            }
        }
        if self.failures >= self.p.fail_limit && self.mode != Mode::Fallback {
            self.mode = Mode::Fallback;
            self.r_c = None;
            self.recent.clear();
            note = Some(format!(
                "{} consecutive probes failed: back to the static cap {}%",
                self.failures,
                fmt1(self.p.t_upper)
            ));
        }
        match (self.mode, self.r_c, self.r_n) {
            (Mode::Active, Some(r_c), Some(r_n)) if probe != Probe::Failed => {
                self.target = share(self.p.t_lower, self.p.t_upper, r_c, r_n);
                self.cap = self.next_cap(self.target);
            }
            (Mode::Active, _, _) => {} // a failed probe: hold
            _ => {
                self.target = self.p.t_upper;
                self.cap = self.p.t_upper;
            }
        }
        if note.is_none() && before.1 == Mode::Learning && self.mode == Mode::Active {
            note = Some(format!(
                "learned R_n = {}/s (median of {} idle samples)",
                fmt1(self.r_n.unwrap_or(0.0)),
                self.p.learn
            ));
        }
        Tick {
            cap: self.cap,
            changed: self.cap != before.0,
            note,
        }
    }

    fn learn(&mut self, rate: f64, group_cpu: Option<f64>) {
        if self.p.r_normal.is_some() || !group_cpu.is_some_and(|c| c < self.p.idle_cpu) {
            return;
        }
        self.idle.push(rate);
        if self.idle.len() > self.p.learn {
            self.idle.remove(0);
        }
        if self.idle.len() == self.p.learn {
            self.r_n = Some(median(&self.idle));
            if self.mode == Mode::Learning {
                self.mode = Mode::Active;
                // Start smoothing from the service's own normal, not from the learning phase.
                self.r_c = self.r_n;
            }
        }
    }

    fn smooth(&mut self, rate: f64) {
        let latency = 1.0 / rate.max(1e-9);
        self.recent.push(latency);
        if self.recent.len() > 3 {
            self.recent.remove(0);
        }
        let m = median(&self.recent);
        self.r_c = Some(
            1.0 / match self.r_c {
                None => m,
                Some(r) => ALPHA * m + (1.0 - ALPHA) / r,
            },
        );
    }

    /// The dead band, the snap to the ends and the step limits.
    fn next_cap(&self, target: f64) -> f64 {
        let (lo, hi) = (self.p.t_lower, self.p.t_upper);
        let range = hi - lo;
        let band = DEAD_BAND * range;
        let want = if target >= hi - band {
            hi
        } else if target <= lo + band {
            lo
        } else if (target - self.cap).abs() < band {
            return self.cap;
        } else {
            target
        };
        // max/min, not f64::clamp: its panic message formats floats (~6 KiB on the device).
        let next = want
            .max(self.cap - STEP_DOWN * range)
            .min(self.cap + STEP_UP * range);
        // One decimal: the cgroup file holds whole microseconds anyway.
        ((next * 10.0).round() / 10.0).max(lo).min(hi)
    }
}

/// A number with at most one decimal, for messages. Integer arithmetic: float formatting
/// would cost the device build ~20 KiB.
pub fn fmt1(x: f64) -> String {
    let t = (x.abs() * 10.0).round() as u64;
    let sign = if x < 0.0 && t > 0 { "-" } else { "" };
    if t.is_multiple_of(10) {
        format!("{sign}{}", t / 10)
    } else {
        format!("{sign}{}.{}", t / 10, t % 10)
    }
}

/// The group's CPU quota in microseconds per `period_us` for a cap in percent of all of
/// `cpus` CPUs (at least 1 ms, the kernel's minimum).
pub fn quota_us(cap: f64, cpus: u32, period_us: u64) -> u64 {
    ((cap / 100.0 * cpus.max(1) as f64 * period_us as f64).round() as u64).max(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(r_normal: Option<f64>) -> Params {
        Params {
            t_lower: 5.0,
            t_upper: 50.0,
            r_normal,
            learn: 5,
            idle_cpu: 2.0,
            fail_limit: FAIL_LIMIT,
        }
    }

    /// A deterministic noise source in [-1, 1).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        }
    }

    #[test]
    fn the_formula() {
        assert_eq!(share(5.0, 50.0, 100.0, 100.0), 50.0);
        assert_eq!(share(5.0, 50.0, 150.0, 100.0), 50.0);
        assert_eq!(share(5.0, 50.0, 0.0, 100.0), 5.0);
        assert!((share(5.0, 50.0, 50.0, 100.0) - 27.5).abs() < 1e-9);
        assert!((share(5.0, 50.0, 20.0, 100.0) - 14.0).abs() < 1e-9);
        assert_eq!(share(5.0, 50.0, 10.0, 0.0), 50.0);
        assert_eq!(share(5.0, 50.0, f64::NAN, 100.0), 50.0);
        // Monotonic in R_c, always within [T_l, T_u].
        let mut last = 0.0;
        for i in 0..300 {
            let s = share(5.0, 50.0, i as f64, 100.0);
            assert!(s >= last && (5.0..=50.0).contains(&s));
            last = s;
        }
    }

    #[test]
    fn quota_of_a_cap() {
        assert_eq!(quota_us(50.0, 2, 100_000), 100_000);
        assert_eq!(quota_us(5.0, 2, 100_000), 10_000);
        assert_eq!(quota_us(27.5, 4, 100_000), 110_000);
        assert_eq!(quota_us(0.1, 1, 100_000), 1000);
        assert_eq!(fmt1(27.5), "27.5");
        assert_eq!(fmt1(50.0), "50");
        assert_eq!(fmt1(130.94), "130.9");
        assert_eq!(fmt1(-3.5), "-3.5");
        assert_eq!(fmt1(-0.01), "0");
    }

    #[test]
    fn learns_the_median_of_idle_samples_only() {
        let mut g = Governor::new(params(None));
        assert_eq!(g.mode, Mode::Learning);
        // Busy samples (the containers use CPU) and unknown usage teach nothing.
        for _ in 0..10 {
            let t = g.tick(Probe::Answered(10.0), Some(80.0));
            assert_eq!(t.cap, 50.0);
            g.tick(Probe::Answered(10.0), None);
        }
        assert_eq!(g.mode, Mode::Learning);
        for (i, r) in [100.0, 90.0, 500.0, 110.0].into_iter().enumerate() {
            let t = g.tick(Probe::Answered(r), Some(0.5));
            assert_eq!(
                (g.mode, t.cap, t.note.is_none()),
                (Mode::Learning, 50.0, true),
                "{i}"
            );
        }
        let t = g.tick(Probe::Answered(95.0), Some(0.5));
        assert_eq!(g.mode, Mode::Active);
        assert_eq!(
            g.r_n,
            Some(100.0),
            "median of 100 90 500 110 95, the outlier ignored"
        );
        assert!(t.note.unwrap().contains("learned R_n = 100/s"));
        // Later idle samples keep R_n current (a rolling window).
        for _ in 0..5 {
            g.tick(Probe::Answered(80.0), Some(0.0));
        }
        assert_eq!(g.r_n, Some(80.0));
    }

    #[test]
    fn a_configured_rate_is_used_at_once_and_never_relearned() {
        let mut g = Governor::new(params(Some(100.0)));
        assert_eq!(g.mode, Mode::Active);
        // R_c starts from R_n and follows the samples; the cap falls at most 25 % of the
        // range (11.25 points) per tick, to the share of R_c = 20: 14 %.
        let mut last = 50.0;
        for i in 0..20 {
            let t = g.tick(Probe::Answered(20.0), Some(0.0));
            assert!(
                t.cap <= last && last - t.cap <= 11.3,
                "{i}: {last} -> {t:?}"
            );
            last = t.cap;
        }
        assert!((last - 14.0).abs() < DEAD_BAND * 45.0, "{last}");
        assert_eq!(g.r_n, Some(100.0));
        // Recovery: up at most 10 % of the range (4.5 points) per tick, then snapped to T_u.
        let mut caps = Vec::new();
        for _ in 0..30 {
            caps.push(g.tick(Probe::Answered(100.0), Some(50.0)).cap);
        }
        for w in caps.windows(2) {
            assert!(w[1] >= w[0] && w[1] - w[0] <= 4.5 + 1e-9, "{caps:?}");
        }
        assert_eq!(*caps.last().unwrap(), 50.0, "{caps:?}");
    }

    #[test]
    fn ends_snap_and_small_moves_are_held() {
        let mut g = Governor::new(params(Some(100.0)));
        // 97 % of R_n: target 48.65, within the dead band of T_u: stays at T_u.
        for _ in 0..10 {
            assert!(!g.tick(Probe::Answered(97.0), Some(0.0)).changed);
        }
        assert_eq!(g.cap, 50.0);
        // Near zero: all the way to T_l, not to T_l + something.
        for _ in 0..20 {
            g.tick(Probe::Answered(2.0), Some(0.0));
        }
        assert_eq!(g.cap, 5.0);
    }

    #[test]
    fn failures_hold_then_fall_back_to_the_static_cap_and_resume() {
        let mut g = Governor::new(params(Some(100.0)));
        for _ in 0..15 {
            g.tick(Probe::Answered(20.0), Some(10.0));
        }
        let low = g.cap;
        assert!(low < 20.0);
        // One or two failures hold the cap.
        assert_eq!(g.tick(Probe::Failed, None).cap, low);
        assert_eq!(g.tick(Probe::Failed, None).cap, low);
        assert_eq!(g.mode, Mode::Active);
        let t = g.tick(Probe::Failed, None);
        assert_eq!((g.mode, t.cap, t.changed), (Mode::Fallback, 50.0, true));
        assert!(t.note.unwrap().contains("3 consecutive probes failed"));
        // Stays there, whatever fails next: never starved for good.
        for _ in 0..100 {
            g.tick(Probe::Failed, None);
            g.tick(Probe::TimedOut(2.0), None);
        }
        assert_eq!((g.mode, g.cap), (Mode::Fallback, 50.0));
        // An answer resumes governing, from a fresh average.
        let t = g.tick(Probe::Answered(20.0), Some(10.0));
        assert_eq!(g.mode, Mode::Active);
        assert!(t.note.unwrap().contains("answers again"));
        assert_eq!(g.r_c, Some(20.0));
        assert!(t.cap < 50.0);
    }

    #[test]
    fn timeouts_count_as_slow_before_the_fallback() {
        let mut g = Governor::new(params(Some(100.0)));
        let t = g.tick(Probe::TimedOut(2.0), Some(60.0));
        assert!(t.changed && t.cap < 50.0, "{t:?}");
        g.tick(Probe::TimedOut(2.0), Some(60.0));
        g.tick(Probe::TimedOut(2.0), Some(60.0));
        assert_eq!((g.mode, g.cap), (Mode::Fallback, 50.0));
        // While learning a timeout teaches nothing and falls back the same way.
        let mut g = Governor::new(params(None));
        for _ in 0..3 {
            assert_eq!(g.tick(Probe::TimedOut(2.0), Some(0.0)).cap, 50.0);
        }
        assert_eq!(g.mode, Mode::Fallback);
        g.tick(Probe::Answered(50.0), Some(0.0));
        assert_eq!(g.mode, Mode::Learning);
    }

    #[test]
    fn noise_does_not_make_the_cap_oscillate() {
        // ±20 % uniform noise around a constant 60 % of R_n: the bare formula would write a
        // new cap on almost every tick; the governor settles and then holds.
        let mut noise = Lcg(7);
        let mut g = Governor::new(params(Some(100.0)));
        let mut raw_changes = 0;
        let mut last_raw = 50.0;
        let mut caps = Vec::new();
        for _ in 0..300 {
            let r = 60.0 * (1.0 + 0.2 * noise.next());
            let raw = ((share(5.0, 50.0, r, 100.0) * 10.0).round()) / 10.0;
            if raw != last_raw {
                raw_changes += 1;
            }
            last_raw = raw;
            caps.push(g.tick(Probe::Answered(r), Some(30.0)).cap);
        }
        let changes = caps.windows(2).filter(|w| w[0] != w[1]).count();
        let settled = &caps[20..];
        let (lo, hi) = settled
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &c| (a.min(c), b.max(c)));
        assert!(raw_changes > 250, "{raw_changes}");
        assert!(changes <= 30, "{changes} changes: {caps:?}");
        // The expected share is 32; it stays within a few points of it.
        assert!(lo > 26.0 && hi < 38.0, "{lo}..{hi}");
    }

    #[test]
    fn a_closed_loop_settles_without_ringing_and_returns_to_t_u() {
        // A main service sharing a CPU with the containers: its rate falls with the cap
        // (twice the cap, as both sit on one of two CPUs), plus ±15 % noise.
        let mut noise = Lcg(42);
        let mut g = Governor::new(params(None));
        let rate = |cap: f64, hog: bool, n: f64| {
            let stolen = if hog {
                (2.0 * cap / 100.0).min(0.9)
            } else {
                0.0
            };
            100.0 * (1.0 - stolen) * (1.0 + 0.15 * n)
        };
        for _ in 0..10 {
            let r = rate(g.cap, false, noise.next());
            g.tick(Probe::Answered(r), Some(0.3));
        }
        assert_eq!(g.mode, Mode::Active);
        let mut caps = Vec::new();
        for _ in 0..120 {
            let r = rate(g.cap, true, noise.next());
            caps.push(g.tick(Probe::Answered(r), Some(90.0)).cap);
        }
        // Fixed point: r = 1 − 2s, s = 5 + 45 r → s ≈ 25.
        let tail = &caps[40..];
        let mean = tail.iter().sum::<f64>() / tail.len() as f64;
        assert!((mean - 25.0).abs() < 4.0, "mean {mean}: {caps:?}");
        // Direction reversals of the written cap: few, not a limit cycle.
        let moves: Vec<f64> = caps
            .windows(2)
            .map(|w| w[1] - w[0])
            .filter(|d| *d != 0.0)
            .collect();
        let reversals = moves.windows(2).filter(|m| m[0] * m[1] < 0.0).count();
        assert!(reversals <= 12, "{reversals} reversals: {caps:?}");
        // The hog stops: back to T_u, within STEP_UP's pace plus the EWMA's lag.
        let mut n = 0;
        while g.cap < 50.0 {
            let r = rate(g.cap, false, noise.next());
            g.tick(Probe::Answered(r), Some(0.3));
            n += 1;
            assert!(n < 30, "cap {} after {n} ticks", g.cap);
        }
    }
}
