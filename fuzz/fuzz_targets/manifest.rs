//! `.berth/manifest.toml` comes from inside a third-party package image.
#![no_main]

use berth_core::manifest::Manifest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(m) = Manifest::parse(&text) {
        // The index builder and policy checks rely on a parsed manifest having an entrypoint.
        let s = m.summary();
        assert_eq!(s.argv0, m.entrypoint.argv[0]);
    }
});
