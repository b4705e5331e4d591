//! The signify (OpenBSD) / usign (OpenWrt) ed25519 key and signature files.
//!
//! Every file is two lines: `untrusted comment: <text>` and the base64 of a binary blob:
//!
//! | file       | blob                                                                     |
//! |------------|--------------------------------------------------------------------------|
//! | public key | `Ed` keynum(8) pubkey(32)                                                |
//! | secret key | `Ed` `BK` kdfrounds(u32 BE) salt(16) checksum(8) keynum(8) seckey(64)    |
//! | signature  | `Ed` keynum(8) sig(64)                                                   |
//!
//! The checksum is the first 8 bytes of SHA-512 over the 64-byte secret key (seed ‖ public
//! key); kdfrounds 0 means the key is stored in the clear. usign writes the same blobs with
//! other comments, so the comment is never interpreted. Signatures are plain ed25519 over the
//! whole message (no prehash), so they are deterministic: the same key and message give the
//! same signature in signify, usign and here.
//!
//! Decoding is strict (exact lengths, algorithm tags, the secret key checksum, canonical
//! base64) because these files are the root of the device's trust; it tolerates only a
//! missing or extra trailing newline and CRLF line ends.

use std::fmt;

use ed25519_compact::sha512::Hash as Sha512;

use crate::base64::{self, Base64Error};

const COMMENT_HEADER: &str = "untrusted comment:";
const PKALG: &[u8; 2] = b"Ed";
const KDFALG: &[u8; 2] = b"BK";
const PUBLIC_LEN: usize = 2 + 8 + 32;
const SIGNATURE_LEN: usize = 2 + 8 + 64;
const SECRET_LEN: usize = 2 + 2 + 4 + 16 + 8 + 8 + 64;
/// signify refuses comments of 1024 bytes or more (COMMENTMAXLEN, NUL included).
const COMMENT_MAX: usize = 1023;

/// Which of the three files a parse error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    PublicKey,
    SecretKey,
    Signature,
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKind::PublicKey => "public key",
            FileKind::SecretKey => "secret key",
            FileKind::Signature => "signature",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SignifyError {
    #[error("not a signify {0}: missing 'untrusted comment:' line")]
    MissingComment(FileKind),
    #[error("not a signify {0}: missing the base64 line after the comment")]
    MissingBase64(FileKind),
    #[error("not a signify {kind}: the second line is not valid base64")]
    Base64 {
        kind: FileKind,
        #[source]
        source: Base64Error,
    },
    #[error("not a signify {kind}: {found} bytes after base64 decoding, expected {expected}")]
    Length {
        kind: FileKind,
        found: usize,
        expected: usize,
    },
    #[error("not a signify {0}: unexpected text after the base64 line")]
    TrailingData(FileKind),
    #[error(
        "unsupported algorithm {found:?} in signify {kind}: only ed25519 (\"Ed\") is supported"
    )]
    Algorithm { kind: FileKind, found: String },
    #[error("unsupported key derivation {0:?} in signify secret key: only \"BK\" is known")]
    KdfAlgorithm(String),
    #[error(
        "encrypted secret keys are not supported: generate keys with `berth key generate` or \
         `signify -G -n`"
    )]
    Encrypted { kdf_rounds: u32 },
    #[error("secret key {0} is corrupt: its checksum does not match")]
    Checksum(String),
    #[error("secret key {0} is corrupt: its public half does not match its seed")]
    Inconsistent(String),
    #[error("signature was made by key {signature}, not by this public key (keynum {key})")]
    KeyMismatch { signature: String, key: String },
    #[error("signature does not match the message")]
    BadSignature,
    #[error("public key {0} is not a usable ed25519 key")]
    InvalidPublicKey(String),
    #[error("signed by unknown key {0}: not in /etc/berth/keys")]
    UnknownKey(String),
}

/// An ed25519 public key with its signify key number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey {
    pub keynum: [u8; 8],
    pub key: [u8; 32],
}

/// An unencrypted signify secret key. `Debug` shows only the key number.
#[derive(Clone)]
pub struct SecretKey {
    keynum: [u8; 8],
    // ed25519-compact wipes its secret key on drop.
    key: ed25519_compact::SecretKey,
    // Kept only so that parse → to_file_string gives back the same file; unused at 0 rounds.
    salt: [u8; 16],
}

/// A detached ed25519 signature with the key number of the key that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signature {
    pub keynum: [u8; 8],
    pub sig: [u8; 64],
}

/// Lowercase hex of a key number, as berth shows and names keys.
pub fn keynum_hex(keynum: &[u8; 8]) -> String {
    keynum.iter().map(|b| format!("{b:02x}")).collect()
}

/// Splits a signify file into its comment and the decoded blob.
fn decode_file(text: &str, kind: FileKind) -> Result<Vec<u8>, SignifyError> {
    let (comment, rest) = match text.split_once('\n') {
        Some(split) => split,
        None => (text, ""),
    };
    if !comment.starts_with(COMMENT_HEADER) {
        return Err(SignifyError::MissingComment(kind));
    }
    let (line, tail) = match rest.split_once('\n') {
        Some(split) => split,
        None => (rest, ""),
    };
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.is_empty() {
        return Err(SignifyError::MissingBase64(kind));
    }
    // signify itself would verify only the first two lines; refusing the rest keeps a file
    // from carrying text that a reader might take as part of what was checked.
    if !tail.trim_end_matches(['\n', '\r']).is_empty() {
        return Err(SignifyError::TrailingData(kind));
    }
    let blob = base64::decode(line).map_err(|source| SignifyError::Base64 { kind, source })?;
    let expected = match kind {
        FileKind::PublicKey => PUBLIC_LEN,
        FileKind::SecretKey => SECRET_LEN,
        FileKind::Signature => SIGNATURE_LEN,
    };
    if blob.len() != expected {
        return Err(SignifyError::Length {
            kind,
            found: blob.len(),
            expected,
        });
    }
    if &blob[..2] != PKALG {
        return Err(SignifyError::Algorithm {
            kind,
            found: String::from_utf8_lossy(&blob[..2]).into_owned(),
        });
    }
    Ok(blob)
}

fn encode_file(comment: &str, default_comment: &str, blob: &[u8]) -> String {
    // A comment is one line; signify also refuses an empty or overlong one.
    let mut comment: String = comment
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    if comment.trim().is_empty() {
        comment = default_comment.to_owned();
    }
    if comment.len() > COMMENT_MAX {
        let mut end = COMMENT_MAX;
        while !comment.is_char_boundary(end) {
            end -= 1;
        }
        comment.truncate(end);
    }
    format!("{COMMENT_HEADER} {comment}\n{}\n", base64::encode(blob))
}

fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(bytes);
    out
}

fn checksum(secret: &[u8]) -> [u8; 8] {
    array(&Sha512::hash(secret)[..8])
}

impl PublicKey {
    /// Parses a `.pub` file (signify or usign).
    pub fn parse(text: &str) -> Result<Self, SignifyError> {
        let blob = decode_file(text, FileKind::PublicKey)?;
        Ok(PublicKey {
            keynum: array(&blob[2..10]),
            key: array(&blob[10..]),
        })
    }

    /// The file text; `comment` goes after `untrusted comment: ` (signify writes
    /// "signify public key").
    pub fn to_file_string(&self, comment: &str) -> String {
        let mut blob = Vec::with_capacity(PUBLIC_LEN);
        blob.extend_from_slice(PKALG);
        blob.extend_from_slice(&self.keynum);
        blob.extend_from_slice(&self.key);
        encode_file(comment, "signify public key", &blob)
    }

    pub fn keynum_hex(&self) -> String {
        keynum_hex(&self.keynum)
    }
}

impl SecretKey {
    /// Parses an unencrypted `.sec` file, checking its checksum and that its public half
    /// belongs to its seed.
    pub fn parse(text: &str) -> Result<Self, SignifyError> {
        let blob = decode_file(text, FileKind::SecretKey)?;
        if &blob[2..4] != KDFALG {
            return Err(SignifyError::KdfAlgorithm(
                String::from_utf8_lossy(&blob[2..4]).into_owned(),
            ));
        }
        let kdf_rounds = u32::from_be_bytes(array(&blob[4..8]));
        if kdf_rounds != 0 {
            return Err(SignifyError::Encrypted { kdf_rounds });
        }
        let salt = array(&blob[8..24]);
        let sum: [u8; 8] = array(&blob[24..32]);
        let keynum = array(&blob[32..40]);
        let secret = &blob[40..];
        if checksum(secret) != sum {
            return Err(SignifyError::Checksum(keynum_hex(&keynum)));
        }
        let key = ed25519_compact::SecretKey::new(array(secret));
        key.validate_public_key(&key.public_key())
            .map_err(|_| SignifyError::Inconsistent(keynum_hex(&keynum)))?;
        Ok(SecretKey { keynum, key, salt })
    }

    /// The file text, unencrypted (kdfrounds 0); signify writes "signify secret key".
    pub fn to_file_string(&self, comment: &str) -> String {
        let mut blob = Vec::with_capacity(SECRET_LEN);
        blob.extend_from_slice(PKALG);
        blob.extend_from_slice(KDFALG);
        blob.extend_from_slice(&0u32.to_be_bytes());
        blob.extend_from_slice(&self.salt);
        blob.extend_from_slice(&checksum(&self.key[..]));
        blob.extend_from_slice(&self.keynum);
        blob.extend_from_slice(&self.key[..]);
        let text = encode_file(comment, "signify secret key", &blob);
        // The blob held the secret; wipe our copy rather than leave it to the allocator.
        blob.fill(0);
        text
    }

    pub fn public_key(&self) -> PublicKey {
        PublicKey {
            keynum: self.keynum,
            key: *self.key.public_key(),
        }
    }

    pub fn keynum(&self) -> [u8; 8] {
        self.keynum
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretKey")
            .field("keynum", &keynum_hex(&self.keynum))
            .finish_non_exhaustive()
    }
}

impl Signature {
    /// Parses a detached `.sig` file (signify or usign).
    pub fn parse(text: &str) -> Result<Self, SignifyError> {
        let blob = decode_file(text, FileKind::Signature)?;
        Ok(Signature {
            keynum: array(&blob[2..10]),
            sig: array(&blob[10..]),
        })
    }

    /// The file text; signify writes "verify with NAME.pub".
    pub fn to_file_string(&self, comment: &str) -> String {
        let mut blob = Vec::with_capacity(SIGNATURE_LEN);
        blob.extend_from_slice(PKALG);
        blob.extend_from_slice(&self.keynum);
        blob.extend_from_slice(&self.sig);
        encode_file(comment, "signature from berth", &blob)
    }

    pub fn keynum_hex(&self) -> String {
        keynum_hex(&self.keynum)
    }
}

/// Derives a key pair from 32 random bytes and a random key number.
///
/// Panics if `seed` is all zeros: only a broken random source gives that.
pub fn generate(seed: [u8; 32], keynum: [u8; 8]) -> (PublicKey, SecretKey) {
    let pair = ed25519_compact::KeyPair::from_seed(ed25519_compact::Seed::new(seed));
    let secret = SecretKey {
        keynum,
        key: pair.sk,
        salt: [0; 16],
    };
    (secret.public_key(), secret)
}

/// Signs `message` deterministically (as signify does: same key and message, same bytes).
pub fn sign(key: &SecretKey, message: &[u8]) -> Signature {
    Signature {
        keynum: key.keynum,
        sig: *key.key.sign(message, None),
    }
}

/// Checks that `sig` was made by `key` over exactly `message`.
pub fn verify(key: &PublicKey, message: &[u8], sig: &Signature) -> Result<(), SignifyError> {
    if key.keynum != sig.keynum {
        return Err(SignifyError::KeyMismatch {
            signature: sig.keynum_hex(),
            key: key.keynum_hex(),
        });
    }
    let pk = ed25519_compact::PublicKey::new(key.key);
    let signature = ed25519_compact::Signature::new(sig.sig);
    pk.verify(message, &signature).map_err(|e| match e {
        ed25519_compact::Error::InvalidPublicKey | ed25519_compact::Error::WeakPublicKey => {
            SignifyError::InvalidPublicKey(key.keynum_hex())
        }
        _ => SignifyError::BadSignature,
    })
}

/// Verify against a set of trusted keys: picks the key by keynum; error UnknownKey(keynum hex)
/// if none matches ("signed by unknown key XXXX: not in /etc/berth/keys").
///
/// Two trusted keys may share a key number (it is only 64 random bits, and anyone can pick
/// one), so every key with the signature's number is tried before giving up.
pub fn verify_with_any<'a>(
    keys: &'a [PublicKey],
    message: &[u8],
    sig: &Signature,
) -> Result<&'a PublicKey, SignifyError> {
    let mut last_error = None;
    for key in keys.iter().filter(|k| k.keynum == sig.keynum) {
        match verify(key, message, sig) {
            Ok(()) => return Ok(key),
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| SignifyError::UnknownKey(sig.keynum_hex())))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Made with `signify-openbsd -G -n -c hello` and `signify-openbsd -S -m m` on "hi\n".
    const PUB: &str = "untrusted comment: hello public key\n\
        RWRSV/+7dpwMX40nvvY46rp1r+mFOoUBi4HM9G/pehXcIoQ4Qk1KnGL0\n";
    const SEC: &str = "untrusted comment: hello secret key\n\
        RWRCSwAAAAAXVqB/5tMTGPxAZyvqtewEdG05kjSdDMhSV/+7dpwMXz0Udr3RGV5JHWfbf9VcnE8mUgn4oXZvQvxTH01V\
        +RKljSe+9jjqunWv6YU6hQGLgcz0b+l6FdwihDhCTUqcYvQ=\n";
    const SIG: &str = "untrusted comment: verify with k.pub\n\
        RWRSV/+7dpwMX1OfhV2hMj5r6cWW5vDKBaqZdD2r04wA5WdqjJkdVMZ9fOGDzYjIwlDRv/MMQwgdU772dGVRmJv4xuH2\
        NqafcAk=\n";
    const MSG: &[u8] = b"hi\n";

    fn pair(n: u8) -> (PublicKey, SecretKey) {
        generate([n; 32], [n; 8])
    }

    #[test]
    fn parses_signify_files_and_verifies() {
        let public = PublicKey::parse(PUB).unwrap();
        let secret = SecretKey::parse(SEC).unwrap();
        let sig = Signature::parse(SIG).unwrap();
        assert_eq!(public.keynum_hex(), "5257ffbb769c0c5f");
        assert_eq!(secret.public_key(), public);
        assert_eq!(sig.keynum, public.keynum);
        verify(&public, MSG, &sig).unwrap();
        // Deterministic ed25519: our signature is byte for byte signify's.
        assert_eq!(sign(&secret, MSG), sig);
    }

    #[test]
    fn round_trips_byte_exact() {
        let public = PublicKey::parse(PUB).unwrap();
        assert_eq!(public.to_file_string("hello public key"), PUB);
        let secret = SecretKey::parse(SEC).unwrap();
        assert_eq!(secret.to_file_string("hello secret key"), SEC);
        let sig = Signature::parse(SIG).unwrap();
        assert_eq!(sig.to_file_string("verify with k.pub"), SIG);
    }

    #[test]
    fn tolerates_missing_trailing_newline_and_crlf() {
        PublicKey::parse(PUB.trim_end()).unwrap();
        Signature::parse(&format!("{SIG}\n\n")).unwrap();
        Signature::parse(&SIG.replace('\n', "\r\n")).unwrap();
    }

    #[test]
    fn generated_keys_sign_and_verify() {
        let (public, secret) = pair(7);
        let text = secret.to_file_string("");
        assert!(text.starts_with("untrusted comment: signify secret key\n"));
        let secret = SecretKey::parse(&text).unwrap();
        let public = PublicKey::parse(&public.to_file_string("k")).unwrap();
        let sig = Signature::parse(&sign(&secret, b"index").to_file_string("x")).unwrap();
        verify(&public, b"index", &sig).unwrap();
        assert!(matches!(
            verify(&public, b"indeX", &sig),
            Err(SignifyError::BadSignature)
        ));
    }

    #[test]
    fn wrong_key_is_named() {
        let (_, secret) = pair(1);
        let (other, _) = pair(2);
        let err = verify(&other, b"m", &sign(&secret, b"m")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "signature was made by key 0101010101010101, not by this public key \
             (keynum 0202020202020202)"
        );
    }

    #[test]
    fn same_keynum_other_key_is_a_bad_signature() {
        let (_, secret) = pair(1);
        let (mut other, _) = pair(2);
        other.keynum = secret.keynum();
        assert!(matches!(
            verify(&other, b"m", &sign(&secret, b"m")),
            Err(SignifyError::BadSignature)
        ));
    }

    #[test]
    fn verify_with_any_picks_by_keynum() {
        let (p1, s1) = pair(1);
        let (p2, _) = pair(2);
        let (p3, s3) = pair(3);
        let mut impostor = p2;
        impostor.keynum = p1.keynum;
        let keys = [impostor, p2, p1];
        assert_eq!(verify_with_any(&keys, b"m", &sign(&s1, b"m")).unwrap(), &p1);
        let err = verify_with_any(&keys, b"m", &sign(&s3, b"m")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "signed by unknown key 0303030303030303: not in /etc/berth/keys"
        );
        assert!(matches!(
            verify_with_any(&[impostor, p3], b"m", &sign(&s1, b"n")),
            Err(SignifyError::BadSignature)
        ));
    }

    #[test]
    fn rejects_missing_comment() {
        let body = PUB.split_once('\n').unwrap().1;
        let err = PublicKey::parse(body).unwrap_err();
        assert_eq!(
            err.to_string(),
            "not a signify public key: missing 'untrusted comment:' line"
        );
        assert!(matches!(
            PublicKey::parse("untrusted comment: x\n"),
            Err(SignifyError::MissingBase64(FileKind::PublicKey))
        ));
        assert!(matches!(
            Signature::parse(""),
            Err(SignifyError::MissingComment(FileKind::Signature))
        ));
    }

    #[test]
    fn rejects_wrong_file_kind() {
        // A public key handed in as a signature: the lengths tell them apart.
        assert!(matches!(
            Signature::parse(PUB),
            Err(SignifyError::Length {
                kind: FileKind::Signature,
                found: 42,
                expected: 74
            })
        ));
        assert!(matches!(
            PublicKey::parse(SEC),
            Err(SignifyError::Length { found: 104, .. })
        ));
    }

    #[test]
    fn rejects_bad_base64_and_trailing_text() {
        let bad = SIG.replace("RWRSV/", "RWRSV-");
        let err = Signature::parse(&bad).unwrap_err();
        assert!(matches!(err, SignifyError::Base64 { .. }), "{err:?}");
        let embedded = format!("{SIG}hi\n");
        assert!(matches!(
            Signature::parse(&embedded),
            Err(SignifyError::TrailingData(FileKind::Signature))
        ));
    }

    #[test]
    fn rejects_other_algorithms() {
        let mut blob = base64::decode(PUB.lines().nth(1).unwrap()).unwrap();
        blob[..2].copy_from_slice(b"Xy");
        let text = format!("untrusted comment: x\n{}\n", base64::encode(&blob));
        let err = PublicKey::parse(&text).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported algorithm \"Xy\" in signify public key: only ed25519 (\"Ed\") is supported"
        );
    }

    fn secret_blob() -> Vec<u8> {
        base64::decode(SEC.lines().nth(1).unwrap()).unwrap()
    }

    fn secret_text(blob: &[u8]) -> String {
        format!("untrusted comment: x\n{}\n", base64::encode(blob))
    }

    #[test]
    fn rejects_encrypted_secret_key() {
        let mut blob = secret_blob();
        blob[4..8].copy_from_slice(&42u32.to_be_bytes());
        let err = SecretKey::parse(&secret_text(&blob)).unwrap_err();
        assert!(matches!(err, SignifyError::Encrypted { kdf_rounds: 42 }));
        assert!(err
            .to_string()
            .starts_with("encrypted secret keys are not supported"));
    }

    #[test]
    fn rejects_corrupt_secret_key() {
        let mut blob = secret_blob();
        blob[50] ^= 1;
        let err = SecretKey::parse(&secret_text(&blob)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "secret key 5257ffbb769c0c5f is corrupt: its checksum does not match"
        );

        // A consistent checksum over a public half that does not belong to the seed.
        let mut blob = secret_blob();
        blob[100] ^= 1;
        let sum = checksum(&blob[40..]);
        blob[24..32].copy_from_slice(&sum);
        assert!(matches!(
            SecretKey::parse(&secret_text(&blob)),
            Err(SignifyError::Inconsistent(_))
        ));

        let mut blob = secret_blob();
        blob[2..4].copy_from_slice(b"XX");
        assert!(matches!(
            SecretKey::parse(&secret_text(&blob)),
            Err(SignifyError::KdfAlgorithm(_))
        ));
    }

    #[test]
    fn comments_stay_on_one_line() {
        let (public, secret) = pair(9);
        let text = public.to_file_string("a\nb");
        assert!(text.starts_with("untrusted comment: a b\n"));
        assert_eq!(PublicKey::parse(&text).unwrap(), public);
        let long = "é".repeat(2000);
        let text = sign(&secret, b"").to_file_string(&long);
        assert!(text.lines().next().unwrap().len() <= COMMENT_HEADER.len() + 1 + COMMENT_MAX);
        Signature::parse(&text).unwrap();
    }

    #[test]
    fn debug_hides_the_secret() {
        let (_, secret) = pair(5);
        assert_eq!(
            format!("{secret:?}"),
            "SecretKey { keynum: \"0505050505050505\", .. }"
        );
    }
}
