//! The repository fetcher reads responses from whatever HTTP server the device is pointed at,
//! or from whoever sits on the path to it: there is no TLS, integrity comes from the signed
//! index, so the response head and the chunked framing are parsed from untrusted bytes.
#![no_main]

use berth_core::http::{parse_response_head, Dechunker, Framing, ResponseError, MAX_RESPONSE_HEAD};
use libfuzzer_sys::fuzz_target;

/// Decodes `input` as a chunked body in pieces of `step` bytes, as reads would hand it over.
fn dechunk(input: &[u8], step: usize) -> Result<(Vec<u8>, bool), ResponseError> {
    let mut d = Dechunker::default();
    let mut body = Vec::new();
    let mut rest = input;
    while !rest.is_empty() && !d.done() {
        let piece = &rest[..step.min(rest.len())];
        let (used, data) = d.decode(piece)?;
        // Progress on every call until the end, never past what was given; data is a prefix.
        assert!(used > 0 && used <= piece.len());
        assert!(data.len() <= used);
        body.extend_from_slice(data);
        assert!(body.len() as u64 <= d.announced());
        rest = &rest[used..];
    }
    assert!(!d.done() || d.body_complete());
    Ok((body, d.done()))
}

fuzz_target!(|data: &[u8]| {
    match parse_response_head(data) {
        Ok(Some((head, len))) => {
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
            if head.framing == Framing::Chunked {
                let body = &data[len..];
                assert_eq!(dechunk(body, body.len().max(1)), dechunk(body, 1));
            }
        }
        Ok(None) => assert!(data.len() <= MAX_RESPONSE_HEAD),
        Err(_) => {}
    }
    // The body decoder on its own: where the reads split the bytes must not matter.
    let step = data.first().map_or(1, |&b| usize::from(b % 16) + 1);
    assert_eq!(dechunk(data, data.len().max(1)), dechunk(data, step));
});
