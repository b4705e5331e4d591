//! `berth key generate`: a signify-compatible ed25519 key pair for signing a repository.
//!
//! The files are exactly what `signify -G -n` writes, so a vendor can sign with signify or
//! usign and a device verifies with berth, or the other way round.

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use berth_core::signify;
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct KeyReport {
    pub public: PathBuf,
    pub secret: PathBuf,
    pub keynum_hex: String,
}

/// Writes `PREFIX.pub` (0644) and `PREFIX.sec` (0600). Like signify, refuses to replace either
/// file: overwriting a secret key by mistake would orphan every device that trusts it.
pub fn generate(prefix: &Path, comment: Option<&str>) -> anyhow::Result<KeyReport> {
    let public_path = with_suffix(prefix, ".pub");
    let secret_path = with_suffix(prefix, ".sec");
    for path in [&public_path, &secret_path] {
        if path.symlink_metadata().is_ok() {
            bail!(
                "refusing to overwrite existing key file {}: remove it or choose another prefix",
                path.display()
            );
        }
    }

    let mut seed = [0u8; 32];
    let mut keynum = [0u8; 8];
    berth_sys::fsutil::fill_random(&mut seed).context("cannot read random bytes for the key")?;
    berth_sys::fsutil::fill_random(&mut keynum)
        .context("cannot read random bytes for the key number")?;
    let (public, secret) = signify::generate(seed, keynum);
    seed.fill(0);

    // Same comments as `signify -G -c NAME`: "NAME public key" / "NAME secret key".
    let name = comment.unwrap_or("berth");
    let secret_text = secret.to_file_string(&format!("{name} secret key"));
    let public_text = public.to_file_string(&format!("{name} public key"));

    write_new(&secret_path, secret_text.as_bytes(), 0o600)?;
    if let Err(e) = write_new(&public_path, public_text.as_bytes(), 0o644) {
        // A secret key whose public half was never written is useless: do not leave it behind.
        let _ = fs::remove_file(&secret_path);
        return Err(e);
    }
    Ok(KeyReport {
        public: public_path,
        secret: secret_path,
        keynum_hex: public.keynum_hex(),
    })
}

fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(prefix.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}

/// Creates `path` with O_EXCL (which also refuses a dangling symlink) and syncs it, so a key
/// reported as written survives a power cut.
fn write_new(path: &Path, data: &[u8], mode: u32) -> anyhow::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                anyhow::anyhow!(
                    "refusing to overwrite existing key file {}: remove it or choose another prefix",
                    path.display()
                )
            } else {
                anyhow::Error::new(e).context(format!("cannot create {}", path.display()))
            }
        })?;
    let written = (|| -> io::Result<()> {
        // The umask may have taken bits away from a public key that must stay readable.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.write_all(data)?;
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(path);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("berth-key-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn writes_a_usable_pair_with_modes() {
        let dir = temp_dir("pair");
        let report = generate(&dir.join("vendor"), Some("acme")).unwrap();
        let public_text = fs::read_to_string(&report.public).unwrap();
        let secret_text = fs::read_to_string(&report.secret).unwrap();
        assert!(public_text.starts_with("untrusted comment: acme public key\n"));
        assert!(secret_text.starts_with("untrusted comment: acme secret key\n"));
        let public = signify::PublicKey::parse(&public_text).unwrap();
        let secret = signify::SecretKey::parse(&secret_text).unwrap();
        assert_eq!(secret.public_key(), public);
        assert_eq!(report.keynum_hex, public.keynum_hex());
        let sig = signify::sign(&secret, b"index");
        signify::verify(&public, b"index", &sig).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&report.secret), 0o600);
        assert_eq!(mode(&report.public), 0o644);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refuses_to_overwrite() {
        let dir = temp_dir("exists");
        let prefix = dir.join("k");
        generate(&prefix, None).unwrap();
        let before = fs::read(dir.join("k.sec")).unwrap();
        let err = generate(&prefix, None).unwrap_err().to_string();
        assert!(err.contains("refusing to overwrite"), "{err}");
        assert_eq!(fs::read(dir.join("k.sec")).unwrap(), before);

        // Only the public half exists: still refused, and no secret key is left behind.
        fs::remove_file(dir.join("k.sec")).unwrap();
        assert!(generate(&prefix, None).is_err());
        assert!(!dir.join("k.sec").exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn two_keys_differ() {
        let dir = temp_dir("differ");
        let a = generate(&dir.join("a"), None).unwrap();
        let b = generate(&dir.join("b"), None).unwrap();
        assert_ne!(a.keynum_hex, b.keynum_hex);
        fs::remove_dir_all(&dir).unwrap();
    }
}
