//! The test hooks: fault injection, stalls, a faster clock and forced fallbacks. They exist
//! only in a build with the `test-hooks` feature, which scripts/test.sh gives the tests'
//! berth (`cargo test --features berth/test-hooks`); in any other build every function here
//! is a constant that the optimizer folds away, and the device build carries none of the
//! switches' names (scripts/test.sh checks it with `strings`).
//!
//! With the feature, the daemon reads them from its environment:
//! - `BERTH_FAULT=install.fetched` (or `install.fetched:2`, the second time that point is
//!   reached) makes the daemon kill itself with SIGKILL right there, as a power cut or the OOM
//!   killer would; `BERTH_FAULT=landlock.absent` (and `netlink.absent`) makes a kernel
//!   feature look absent; `BERTH_FAULT=thread.health` makes every health probe's thread
//!   fail to start, as when memory is short;
//! - `BERTH_FORCE_MOUNT_FALLBACK=1`: hot-binding by mount propagation, as on Linux < 5.2;
//! - `BERTH_TEST_HOOKS=1` enables the rest: `POST /v1/test/stall`, `BERTH_TEST_API_DELAY_MS`
//!   (each container API request waits that long before it is served),
//!   `BERTH_TEST_CRON_SECOND=1` (a cron minute lasts a second), `BERTH_TEST_CLOCK_OFFSET=S`
//!   and `BERTH_TEST_BOOT_ID` (docs/schedules.md, "Testing").

use std::time::Duration;

use berth_core::schedule::Clock;

/// Whether this build has the hooks: `berth version` says so, and the tests' harness refuses
/// to hand a hook's switch to a berth built without them.
pub const BUILT: bool = cfg!(feature = "test-hooks");

#[cfg(feature = "test-hooks")]
mod imp {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::OnceLock;
    use std::time::Duration;

    use berth_core::schedule::Clock;

    /// The switches, read once from the environment.
    struct Switches {
        fault: Option<(String, usize)>,
        enabled: bool,
        api_delay: Option<Duration>,
        clock: Clock,
        mount_fallback: bool,
        boot_id: Option<String>,
    }

    static SWITCHES: OnceLock<Switches> = OnceLock::new();
    static HITS: AtomicUsize = AtomicUsize::new(0);

    fn switches() -> &'static Switches {
        SWITCHES.get_or_init(|| {
            let var = |k: &str| std::env::var(k).ok();
            let num = |k: &str| var(k).and_then(|v| v.parse::<i64>().ok());
            let enabled = var("BERTH_TEST_HOOKS").as_deref() == Some("1");
            Switches {
                fault: var("BERTH_FAULT").map(|v| match v.rsplit_once(':') {
                    Some((p, n)) => (p.to_string(), n.parse().unwrap_or(1)),
                    None => (v, 1),
                }),
                enabled,
                api_delay: num("BERTH_TEST_API_DELAY_MS")
                    .filter(|_| enabled)
                    .map(|ms| Duration::from_millis(ms.max(0) as u64)),
                clock: if enabled {
                    Clock {
                        speed: if num("BERTH_TEST_CRON_SECOND") == Some(1) {
                            60
                        } else {
                            1
                        },
                        offset: num("BERTH_TEST_CLOCK_OFFSET").unwrap_or(0),
                    }
                } else {
                    Clock::REAL
                },
                mount_fallback: var("BERTH_FORCE_MOUNT_FALLBACK").as_deref() == Some("1"),
                boot_id: var("BERTH_TEST_BOOT_ID").filter(|_| enabled),
            }
        })
    }

    pub fn point(name: &str) {
        if let Some((p, nth)) = &switches().fault {
            if p == name && HITS.fetch_add(1, Ordering::SeqCst) + 1 == *nth {
                log::warn!("fault injection: SIGKILL at {name}");
                let _ = berth_sys::process::kill(berth_sys::process::getpid(), libc::SIGKILL);
            }
        }
    }

    pub fn active(name: &str) -> bool {
        switches().fault.as_ref().is_some_and(|(p, _)| p == name)
    }

    pub fn enabled() -> bool {
        switches().enabled
    }

    pub fn api_delay() -> Option<Duration> {
        switches().api_delay
    }

    pub fn clock() -> Clock {
        switches().clock
    }

    pub fn force_mount_fallback() -> bool {
        switches().mount_fallback
    }

    pub fn boot_id() -> Option<String> {
        switches().boot_id.clone()
    }
}

#[cfg(not(feature = "test-hooks"))]
mod imp {
    use std::time::Duration;

    use berth_core::schedule::Clock;

    #[inline(always)]
    pub fn point(_: &str) {}
    #[inline(always)]
    pub fn active(_: &str) -> bool {
        false
    }
    #[inline(always)]
    pub fn api_delay() -> Option<Duration> {
        None
    }
    #[inline(always)]
    pub fn clock() -> Clock {
        Clock::REAL
    }
    #[inline(always)]
    pub fn force_mount_fallback() -> bool {
        false
    }
    #[inline(always)]
    pub fn boot_id() -> Option<String> {
        None
    }
}

/// A named point in a multi-step operation where a crash must leave consistent state: the
/// daemon dies there when `BERTH_FAULT` names it.
#[inline(always)]
pub fn point(name: &str) {
    imp::point(name)
}

/// Whether `BERTH_FAULT` names this condition: a kernel feature the tests make absent
/// (`landlock.absent`: behave as on a kernel without Landlock's abstract-socket scope).
#[inline(always)]
pub fn active(name: &str) -> bool {
    imp::active(name)
}

/// `BERTH_TEST_HOOKS=1`: `POST /v1/test/stall` is honoured, and the other test switches read.
#[cfg(feature = "test-hooks")]
pub fn enabled() -> bool {
    imp::enabled()
}

/// How long each container API request (not a report, not a followed log) waits before it is
/// served, so that tests can hold the workers' pool with slow requests.
#[inline(always)]
pub fn api_delay() -> Option<Duration> {
    imp::api_delay()
}

/// The scheduler's clock: real, or sped up and moved by the tests.
#[inline(always)]
pub fn clock() -> Clock {
    imp::clock()
}

/// Hot-binding by mount propagation even where the mount API works (the fallback's tests).
#[inline(always)]
pub fn force_mount_fallback() -> bool {
    imp::force_mount_fallback()
}

/// The boot id the tests give, for `@reboot` jobs.
#[inline(always)]
pub fn boot_id() -> Option<String> {
    imp::boot_id()
}
