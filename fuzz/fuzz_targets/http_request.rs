//! The admin socket (and later the container API) reads HTTP requests from local clients,
//! including code running inside containers.
#![no_main]

use berth_core::http::{head_end, parse_head, MAX_BODY};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // As the server does: find the end of the head in what has been read so far, then parse it.
    let head = match head_end(data) {
        Some(end) => {
            assert!(end >= 4 && end <= data.len());
            assert_eq!(&data[end - 4..end], b"\r\n\r\n");
            &data[..end]
        }
        None => data,
    };
    if let Ok((req, len)) = parse_head(head) {
        assert!(len <= MAX_BODY);
        assert!(req.path.starts_with('/'));
        assert!(!req.method.is_empty());
        let _ = req.query_flag("force");
    }
});
