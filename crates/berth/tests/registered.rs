//! The end-to-end tests live in the repository's tests/ folder, outside this crate, so cargo
//! finds them only through the `[[test]]` entries of crates/berth/Cargo.toml. This test (in the
//! crate's own tests/ folder, which cargo finds by itself) fails on a file there that no entry
//! names, which would otherwise never run, and on an entry whose file has gone.

use std::collections::BTreeSet;
use std::path::Path;

#[test]
fn every_end_to_end_test_file_is_registered() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    let registered: BTreeSet<String> = manifest
        .lines()
        .filter_map(|l| l.trim().strip_prefix("path = \"../../tests/"))
        .filter_map(|l| l.strip_suffix('"'))
        .map(str::to_string)
        .collect();
    let dir = crate_dir.join("../../tests");
    let files: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".rs"))
        .collect();
    assert!(
        files.len() > 20,
        "{}: too few test files: {files:?}",
        dir.display()
    );
    let unlisted: Vec<_> = files.difference(&registered).collect();
    assert!(
        unlisted.is_empty(),
        "tests/ files that no [[test]] of crates/berth/Cargo.toml names, so they never run: {unlisted:?}"
    );
    let gone: Vec<_> = registered.difference(&files).collect();
    assert!(
        gone.is_empty(),
        "[[test]] entries without their file: {gone:?}"
    );
}

/// A test waits for a condition (`common::wait_until`), or names the window it holds:
/// nothing may happen in it (`quiet_for`), a rate is measured over it (`measure_over`), or
/// time must pass (`let_pass`). A bare sleep as a step of a test is neither: refused here
/// (polling loops inside a wait keep theirs).
#[test]
fn end_to_end_tests_wait_for_conditions_or_name_their_windows() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests");
    let mut bare = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, line) in text.lines().enumerate() {
            if line.starts_with("    std::thread::sleep(") || line.starts_with("    thread::sleep(")
            {
                bare.push(format!("{}:{}", path.display(), i + 1));
            }
        }
    }
    assert!(bare.is_empty(), "bare sleeps as steps of tests: {bare:?}");
}
