//! Fault injection for the crash tests: `BERTH_FAULT=install.fetched` (or `install.fetched:2`
//! for the second time that point is reached) makes the daemon kill itself with SIGKILL right
//! there, as a power cut or the OOM killer would. Costs one environment lookup per process.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

static SPEC: OnceLock<Option<(String, usize)>> = OnceLock::new();
static HITS: AtomicUsize = AtomicUsize::new(0);

fn spec() -> &'static Option<(String, usize)> {
    SPEC.get_or_init(|| {
        let v = std::env::var("BERTH_FAULT").ok()?;
        match v.rsplit_once(':') {
            Some((p, n)) => Some((p.to_string(), n.parse().unwrap_or(1))),
            None => Some((v, 1)),
        }
    })
}

/// A named point in a multi-step operation where a crash must leave consistent state.
pub fn point(name: &str) {
    if let Some((p, nth)) = spec() {
        if p == name && HITS.fetch_add(1, Ordering::SeqCst) + 1 == *nth {
            log::warn!("fault injection: SIGKILL at {name}");
            let _ = berth_sys::process::kill(berth_sys::process::getpid(), libc::SIGKILL);
        }
    }
}

/// Whether `BERTH_FAULT` names this condition: a kernel feature the tests make absent
/// (`landlock.absent`: behave as on a kernel without Landlock's abstract-socket scope).
pub fn active(name: &str) -> bool {
    spec().as_ref().is_some_and(|(p, _)| p == name)
}
