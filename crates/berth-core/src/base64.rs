//! Standard base64 (RFC 4648 §4, `+/`, `=` padding), as signify and usign write it.
//!
//! Decoding is strict: no whitespace, padding required, unused trailing bits must be zero. A
//! signature file that decodes two different ways would let two texts stand for one key, so
//! anything but the canonical encoding is rejected.
//!
//! Why not the `base64` crate (no default features, `alloc`), which is as strict: measured on the
//! device build it costs 4.2 KiB more (0.22.1; 0.23.1 5.1 KiB), for two functions this small.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Base64Error {
    #[error("invalid base64: length {0} is not a multiple of 4")]
    Length(usize),
    #[error("invalid base64: unexpected character {ch:?} at offset {offset}")]
    Character { ch: char, offset: usize },
    #[error("invalid base64: misplaced '=' padding at offset {0}")]
    Padding(usize),
    #[error("invalid base64: non-canonical encoding (unused bits set in the last group)")]
    NonCanonical,
}

/// Encodes `data` with `=` padding.
pub fn encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        let sextet = |shift: u32| char::from(ALPHABET[(n >> shift & 0x3f) as usize]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { '=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { '=' });
    }
    out
}

fn value(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// Decodes padded standard base64; see the module comment for what is refused.
pub fn decode(text: &str) -> Result<Vec<u8>, Base64Error> {
    let bytes = text.as_bytes();
    let chunks = bytes.chunks_exact(4);
    if !chunks.remainder().is_empty() {
        return Err(Base64Error::Length(bytes.len()));
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let groups = bytes.len() / 4;
    for (g, group) in chunks.enumerate() {
        let base = g * 4;
        let last = g + 1 == groups;
        // Padding may only end the last group: "xx==" or "xxx=".
        let pad = group.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return Err(Base64Error::Padding(base + 4 - pad));
        }
        let mut n = 0u32;
        for (i, &c) in group[..4 - pad].iter().enumerate() {
            let v = match value(c) {
                Some(v) => v,
                None if c == b'=' => return Err(Base64Error::Padding(base + i)),
                None => {
                    // Report the real character, even when it is part of a UTF-8 sequence.
                    let ch = text[base + i..].chars().next().unwrap_or('?');
                    return Err(Base64Error::Character {
                        ch,
                        offset: base + i,
                    });
                }
            };
            n |= u32::from(v) << (18 - 6 * i);
        }
        let decoded = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        let keep = 3 - pad;
        // Canonical form: the bits the padding hides must be zero.
        if decoded[keep..].iter().any(|&b| b != 0) {
            return Err(Base64Error::NonCanonical);
        }
        out.extend_from_slice(&decoded[..keep]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 4648 §10 test vectors.
    const VECTORS: &[(&str, &str)] = &[
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ];

    #[test]
    fn rfc4648_vectors() {
        for (plain, enc) in VECTORS {
            assert_eq!(encode(plain.as_bytes()), *enc);
            assert_eq!(decode(enc).unwrap(), plain.as_bytes());
        }
    }

    #[test]
    fn round_trip_all_lengths_and_bytes() {
        let data: Vec<u8> = (0..=255u8).collect();
        for len in 0..data.len() {
            assert_eq!(decode(&encode(&data[..len])).unwrap(), &data[..len]);
        }
        assert_eq!(encode(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn rejects_bad_length() {
        assert_eq!(decode("Zm9"), Err(Base64Error::Length(3)));
        assert_eq!(decode("Zm9vY"), Err(Base64Error::Length(5)));
    }

    #[test]
    fn rejects_bad_characters() {
        assert_eq!(
            decode("Zm-v"),
            Err(Base64Error::Character { ch: '-', offset: 2 })
        );
        assert_eq!(
            decode("Zm9v\nZm9"),
            Err(Base64Error::Character {
                ch: '\n',
                offset: 4
            })
        );
        assert_eq!(
            decode("Zmé"),
            Err(Base64Error::Character {
                ch: 'é', offset: 2
            })
        );
    }

    #[test]
    fn rejects_misplaced_padding() {
        assert_eq!(decode("Zg==Zm9v"), Err(Base64Error::Padding(2)));
        assert_eq!(decode("Z==="), Err(Base64Error::Padding(1)));
        assert_eq!(decode("Z=9v"), Err(Base64Error::Padding(1)));
        assert_eq!(decode("===="), Err(Base64Error::Padding(0)));
    }

    #[test]
    fn rejects_non_canonical() {
        // "Zh==" decodes to 'f' too, but with stray low bits.
        assert_eq!(decode("Zh=="), Err(Base64Error::NonCanonical));
        assert_eq!(decode("Zm9="), Err(Base64Error::NonCanonical));
    }

    #[test]
    fn messages_are_lowercase() {
        let msg = Base64Error::Length(3).to_string();
        assert!(msg.starts_with("invalid base64"), "{msg}");
    }
}
