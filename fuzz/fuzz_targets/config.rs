//! `/etc/berth/berth.toml` is written by the operator, often by hand or by a web UI.
#![no_main]

use berth_core::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(c) = Config::parse(&text, "/etc/berth/berth.toml") {
        // Resolved paths are promised absolute.
        assert!(c.paths.state.is_absolute());
    }
});
