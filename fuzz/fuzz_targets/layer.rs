//! Image layers are untrusted input: `berth_image::layer::Unpacker` applies them beneath a
//! staging root. The fuzzer builds layers of hostile entries (whiteouts, links out of the
//! tree, `..`, absolute names, hard links, device nodes, sparse headers) from its bytes and
//! applies them; whatever they hold, a canary beside the root, which their links point at,
//! must stay exactly as it was (its files' link counts too: no hard link to it).
#![no_main]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use berth_image::layer::Unpacker;
use berth_image::Limits;
use berth_sys::tree::Dir;
use berth_testkit::image::{self as img, Entry};
use libfuzzer_sys::fuzz_target;

const NAMES: &[&str] = &[
    "a", "b", "evil", "c", ".wh.a", ".wh.b", ".wh..wh..opq", "..", ".", "etc", "x", ".wh.evil",
];

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(*b)
    }
}

fn canary_state(c: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![c.to_path_buf()];
    while let Some(p) = todo.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        if m.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                todo.push(e.unwrap().path());
            }
        }
        let body = if m.is_file() { std::fs::read(&p).unwrap() } else { Vec::new() };
        out.push(format!("{} {:o} {} {:?}", p.display(), m.mode(), m.nlink(), body));
    }
    out.sort();
    out
}

fn setup() -> (PathBuf, Vec<String>) {
    let base = std::env::temp_dir().join(format!("berth-fuzz-layer-{}", std::process::id()));
    let canary = base.join("canary");
    if !canary.exists() {
        std::fs::create_dir_all(canary.join("sub")).unwrap();
        std::fs::write(canary.join("precious"), "precious").unwrap();
        std::fs::write(canary.join("sub/file"), "file").unwrap();
    }
    let state = canary_state(&canary);
    (base, state)
}

fn entry(b: &mut Bytes, canary: &str) -> Option<Entry> {
    let kind = b.byte()?;
    let mut name = Vec::new();
    if kind & 0x80 != 0 {
        name.push(b'/');
    }
    if kind & 0x40 != 0 {
        // Raw bytes: not UTF-8, slashes and NULs where they fall.
        let n = b.byte()? % 48;
        for _ in 0..n {
            name.push(b.byte()?);
        }
    } else if kind & 0x20 != 0 {
        // Long, of two-byte characters: past the path cap, cut anywhere.
        let n = usize::from(b.byte()?) * 24;
        // an ASCII byte first, or not: a cut at an even byte lands inside a character
        if n % 48 == 24 {
            name.push(b'a');
        }
        name.extend("é".repeat(n).bytes());
    } else {
        for i in 0..=(b.byte()? % 3) {
            if i > 0 {
                name.push(b'/');
            }
            name.extend_from_slice(NAMES[b.byte()? as usize % NAMES.len()].as_bytes());
        }
    }
    let raw = name;
    let name = String::from("x");
    let target = match b.byte()? % 6 {
        0 => canary.to_string(),
        1 => format!("{canary}/precious"),
        2 => "../../../canary".to_string(),
        3 => "../..".to_string(),
        4 => NAMES[b.byte()? as usize % NAMES.len()].to_string(),
        _ => "/".to_string(),
    };
    let mode = u32::from(b.byte()?) << 4 | 0o644;
    let mut e = match kind & 0x0f {
        0 | 1 => Entry::file(&name, &[b.byte()?; 3]).mode(mode),
        2 | 3 => Entry::dir(&name).mode(mode),
        4 | 5 => Entry::symlink(&name, &target),
        6 | 7 => Entry::hard_link(&name, &target),
        8 => Entry::hard_link(&name, NAMES[b.byte()? as usize % NAMES.len()]),
        9 => Entry::raw(b'6', name.as_bytes(), 0o644),
        10 => Entry::raw(b'3', name.as_bytes(), 0o644),
        11 => Entry::raw(b'S', name.as_bytes(), 0o644).stated_size(u64::from(b.byte()?) << 20),
        _ => Entry::file(&name, b"").stated_size(u64::from(b.byte()?) << 24),
    };
    e.name = raw;
    Some(e)
}

fuzz_target!(|data: &[u8]| {
    let (base, before) = setup();
    let canary = base.join("canary");
    let work = base.join("work");
    let _ = berth_sys::tree::remove_path(&work);
    std::fs::create_dir_all(work.join("root")).unwrap();
    let mut b = Bytes(data);
    let mut layers: Vec<Vec<Entry>> = vec![Vec::new()];
    while let Some(sel) = b.byte() {
        if sel == 0xff && layers.len() < 3 {
            layers.push(Vec::new());
            continue;
        }
        match entry(&mut b, canary.to_str().unwrap()) {
            Some(e) => layers.last_mut().unwrap().push(e),
            None => break,
        }
    }
    {
        let w = Dir::open(&work).unwrap();
        let root = w.subdir(std::ffi::OsStr::new("root")).unwrap();
        let mut u = Unpacker::new(
            &root,
            &w,
            Limits {
                max_bytes: 64 << 20,
                max_entries: 1000,
            },
        );
        for l in &layers {
            if u.apply(&img::tar(l)[..]).is_err() {
                break;
            }
        }
    }
    assert_eq!(canary_state(&canary), before, "a layer reached the canary: {layers:?}");
    berth_sys::tree::remove_path(&work).unwrap();
});
