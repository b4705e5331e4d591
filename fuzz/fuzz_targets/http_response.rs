//! The device's downloads hand every response head libcurl receives (from whatever server the
//! device is pointed at, or whoever sits on the path to a plain http:// one) to berth's own
//! parser: the head is parsed from untrusted bytes.
#![no_main]

use berth_core::http::{parse_response_head, MAX_RESPONSE_HEAD};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse_response_head(data) {
        Ok(Some((_, len))) => {
            assert!(len <= data.len() && len <= MAX_RESPONSE_HEAD);
            assert_eq!(data[len - 1], b'\n');
            // The fetcher parses again at each line end: every earlier line end is "not yet".
            for (i, _) in data[..len - 1]
                .iter()
                .enumerate()
                .filter(|(_, &b)| b == b'\n')
            {
                assert_eq!(parse_response_head(&data[..=i]), Ok(None));
            }
        }
        Ok(None) => assert!(data.len() <= MAX_RESPONSE_HEAD),
        Err(_) => {}
    }
});
