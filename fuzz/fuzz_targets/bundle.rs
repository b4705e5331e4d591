//! A fleet bundle comes from the fleet server, a server berth does not trust: its cpio
//! members are read by `berth_core::bundle::Members` before anything in it is checked.
#![no_main]

use std::io::Read;

use berth_core::bundle::{Descriptor, Members, DESCRIPTOR, MAX_MEMBERS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut m = Members::new(data);
    let mut count = 0usize;
    // Bytes of the members read whole: never more than the archive holds.
    let mut taken = 0u64;
    loop {
        let (name, size) = match m.next_member() {
            Ok(Some(x)) => x,
            Ok(None) | Err(_) => break,
        };
        count += 1;
        assert!(count <= MAX_MEMBERS, "more members than the cap");
        assert!(!name.is_empty() && !name.contains('\0'), "{name:?}");
        if name == DESCRIPTOR {
            if let Ok(b) = m.small(&name, 64 * 1024) {
                assert_eq!(b.len() as u64, size);
                taken += size;
                let _ = Descriptor::parse(&b);
            }
        } else {
            // Never more than the member's size, whatever is asked.
            let mut b = Vec::new();
            if m.data().take(size + 16).read_to_end(&mut b).is_ok() {
                assert_eq!(b.len() as u64, size);
                taken += size;
            }
        }
        assert!(taken <= data.len() as u64, "a member larger than the archive");
    }
});
