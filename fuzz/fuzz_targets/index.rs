//! `index.json` comes from the network (its signature is checked, but parsing must be safe
//! for any bytes, and a signed index is only as good as the tool that built it).
#![no_main]

use berth_core::index::Index;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(index) = Index::parse(data) else {
        return;
    };
    // What `berth repo` writes must read back as the same set of packages.
    let json = index.to_json();
    let back = Index::parse(json.as_bytes()).expect("to_json output parses");
    let mut sorted = index.clone();
    sorted.packages.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(back, sorted, "round trip changed the index");
    assert_eq!(back.to_json(), json, "to_json is not deterministic");

    // Validation promised acyclic, complete dependencies: every closure must succeed.
    let names: Vec<&str> = index.packages.iter().map(|p| p.name.as_str()).collect();
    for name in &names {
        let closure = index.closure(&[name]).expect("closure of a listed package");
        assert_eq!(closure.last().map(|e| e.name.as_str()), Some(*name));
    }
    let all = index.closure(&names).expect("closure of all packages");
    assert_eq!(all.len(), names.len());
});
