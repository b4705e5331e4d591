//! A tiny logger: `LEVEL name: message` lines on stderr (the init system adds time stamps,
//! or syslog does). `BERTH_LOG=debug|info|warn|error` sets the level (default info). Also
//! where `warnln!`'s plain lines go.

use std::io::Write;

struct Logger {
    name: &'static str,
}

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            let _ = writeln!(
                std::io::stderr().lock(),
                "{} {}: {}",
                r.level().as_str().to_lowercase(),
                self.name,
                r.args()
            );
        }
    }
    fn flush(&self) {}
}

pub fn init(name: &'static str) {
    let level = match std::env::var("BERTH_LOG").as_deref() {
        Ok("debug") => log::LevelFilter::Debug,
        Ok("warn") => log::LevelFilter::Warn,
        Ok("error") => log::LevelFilter::Error,
        Ok("off") => log::LevelFilter::Off,
        _ => log::LevelFilter::Info,
    };
    if log::set_boxed_logger(Box::new(Logger { name })).is_ok() {
        log::set_max_level(level);
    }
}

/// Logs a warning once per daemon run (`said` is the caller's flag): for failures that
/// containers can make the daemon meet at any rate (the LAN's host listing).
pub(crate) fn warn_once(said: &std::sync::atomic::AtomicBool, what: std::fmt::Arguments) {
    if !said.swap(true, std::sync::atomic::Ordering::Relaxed) {
        log::warn!("{what} (said once)");
    }
}

/// Where `warnln!` writes: what cannot be written is dropped.
pub fn warn_line(text: std::fmt::Arguments) {
    let _ = std::io::stderr().lock().write_fmt(text);
}
