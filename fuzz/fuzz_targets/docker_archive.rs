//! A docker-archive is a vendor's or an upstream's file, read in place by `berth import`:
//! its members found by name in one pass, links between members followed inside it only,
//! every layer's stream bounded by its member.
#![no_main]

use std::io::{Read, Write};

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    thread_local! {
        static FILE: std::path::PathBuf = std::env::temp_dir().join(format!("berth-fuzz-docker-{}", std::process::id()));
    }
    FILE.with(|p| {
        let mut f = std::fs::File::create(p).unwrap();
        f.write_all(data).unwrap();
        drop(f);
        let f = std::fs::File::open(p).unwrap();
        let Ok(image) = berth_image::source::docker_image(f, "fuzz") else {
            return;
        };
        for l in &image.layers {
            // A member never reads past the file's end.
            let mut b = Vec::new();
            if l.raw().read_to_end(&mut b).is_ok() {
                assert!(b.len() <= data.len(), "{}", l.name);
            }
            // Its stream, decompressed, is read (bounded: the import caps it).
            if let Ok(s) = l.layer_stream() {
                let _ = s.take(1 << 20).read_to_end(&mut Vec::new());
            }
        }
    });
});
