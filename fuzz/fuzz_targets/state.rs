//! `/var/lib/berth/state.json` survives power loss and flash corruption; a damaged file must
//! give an error, never a panic that keeps the daemon from starting.
#![no_main]

use berth_core::state::State;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(state) = State::parse(data) {
        let _ = state.referenced_images();
        for name in state.packages.keys() {
            let _ = state.dependents(name);
        }
        // What the daemon writes back must read back.
        let back = State::parse(&state.to_json()).expect("to_json output parses");
        assert_eq!(back, state);
    }
});
