//! Signature and key files: `.sig` files come from the repository, `.pub` files from the
//! operator, `.sec` files from disk.
#![no_main]

use std::sync::OnceLock;

use berth_core::signify::{self, PublicKey, SecretKey, Signature};
use libfuzzer_sys::fuzz_target;

fn fixed_key() -> PublicKey {
    static KEY: OnceLock<PublicKey> = OnceLock::new();
    *KEY.get_or_init(|| signify::generate([7; 32], [7; 8]).0)
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let message = b"index.json contents";

    if let Ok(sig) = Signature::parse(&text) {
        // Give the fixed key the signature's number, or verify stops at the keynum check and
        // the fuzzed signature bytes never reach ed25519.
        let key = PublicKey {
            keynum: sig.keynum,
            ..fixed_key()
        };
        let _ = signify::verify(&key, message, &sig);
        let _ = signify::verify_with_any(&[fixed_key(), key], message, &sig);
        // Decoding is canonical: what we write back is the same signature.
        let again = Signature::parse(&sig.to_file_string("c")).expect("round trip");
        assert_eq!(again, sig);
    }
    if let Ok(key) = PublicKey::parse(&text) {
        // A fuzzed key (maybe not even a curve point) must fail cleanly, not panic.
        let fixed_sig = Signature {
            keynum: key.keynum,
            sig: [0x55; 64],
        };
        let _ = signify::verify(&key, message, &fixed_sig);
        let again = PublicKey::parse(&key.to_file_string("c")).expect("round trip");
        assert_eq!(again, key);
    }
    if let Ok(sk) = SecretKey::parse(&text) {
        let sig = signify::sign(&sk, message);
        signify::verify(&sk.public_key(), message, &sig).expect("own signature verifies");
    }
});
