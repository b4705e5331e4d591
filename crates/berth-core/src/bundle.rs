//! The berth bundle (docs/fleet.md, "The bundle"): what a fleet server deploys. It is a
//! cpio archive in the "newc" format with `sw-description` first, the layout of SWUpdate's
//! `.swu` files, so that servers which read `.swu` metadata (gooseBit) take it as it is and
//! the others (Eclipse hawkBit) store it as an artifact. Its members:
//!
//! - `sw-description`: for the server only (libconfig: the bundle's version and the boards
//!   it fits); the device never reads it;
//! - `berth.json`: the descriptor (format, version, serial, the packages to install);
//! - `index.json`, `index.json.sig`: the repository's signed index;
//! - the images the index names, under the index's own paths (or none: an index-only bundle,
//!   whose images come from the repository).
//!
//! Nothing in it is trusted because the server sent it: the device checks the index's
//! signature against its own keys, its serial against the newest accepted, and each image's
//! sha256 against the index. The descriptor only chooses among signed packages.

use serde_json::{json, Value};

use crate::name::Name;

/// The newc magic.
pub const MAGIC: &[u8; 6] = b"070701";
/// A newc header's length.
pub const HEADER: usize = 110;
/// The member that ends a cpio archive.
pub const TRAILER: &str = "TRAILER!!!";
pub const SW_DESCRIPTION: &str = "sw-description";
pub const DESCRIPTOR: &str = "berth.json";
pub const INDEX: &str = "index.json";
pub const SIGNATURE: &str = "index.json.sig";
/// The descriptor's format number.
pub const FORMAT: u64 = 1;
/// The longest member name read.
pub const MAX_NAME: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bundle: {0}")]
pub struct BundleError(pub String);

fn err(m: impl Into<String>) -> BundleError {
    BundleError(m.into())
}

/// What a member header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub mode: u32,
    /// Bytes of the name, its NUL included.
    pub name_size: usize,
    pub file_size: u64,
}

/// Bytes of padding after `n` bytes to reach a multiple of four.
pub fn pad4(n: u64) -> u64 {
    (4 - n % 4) % 4
}

/// Reads a newc header (the 110 bytes before the name).
pub fn parse_header(h: &[u8]) -> Result<Header, BundleError> {
    if h.len() < HEADER {
        return Err(err("the archive ends inside a member header"));
    }
    if &h[..6] != MAGIC {
        return Err(err(format!(
            "not a newc cpio archive (magic {:?}, expected \"070701\")",
            String::from_utf8_lossy(&h[..6])
        )));
    }
    let field = |i: usize| -> Result<u64, BundleError> {
        let s = std::str::from_utf8(&h[6 + i * 8..14 + i * 8])
            .map_err(|_| err("a header field is not hex"))?;
        u64::from_str_radix(s, 16).map_err(|_| err(format!("header field {s:?} is not hex")))
    };
    let name_size = field(11)? as usize;
    if !(2..=MAX_NAME).contains(&name_size) {
        return Err(err(format!("a member name of {name_size} bytes")));
    }
    Ok(Header {
        mode: field(1)? as u32,
        name_size,
        file_size: field(6)?,
    })
}

/// A member's name from the bytes after its header (`name_size` of them, NUL last).
pub fn parse_name(b: &[u8]) -> Result<String, BundleError> {
    match b.split_last() {
        Some((0, name)) if !name.contains(&0) => {
            String::from_utf8(name.to_vec()).map_err(|_| err("a member name is not UTF-8"))
        }
        _ => Err(err("a member name is not NUL-terminated")),
    }
}

/// The most members a bundle may have: its four files and the images of one index.
pub const MAX_MEMBERS: usize = 4096;

/// A bundle read member by member from a stream (the server's download is untrusted input,
/// docs/security.md): each member's name and size, then as much of its data as the caller
/// wants through [`Members::data`] or [`Members::small`]; what is left unread is skipped. The
/// names never become paths: the caller matches them against the few it knows and the
/// signed index's. Refused: a first member other than `sw-description`, a name twice, more
/// than [`MAX_MEMBERS`] members, a name that is not UTF-8, an archive without its trailer.
pub struct Members<R> {
    r: R,
    /// Bytes of the current member not read yet, and its padding after them.
    left: u64,
    pad: u64,
    /// The names seen, hashed: a server's 4,096 names of a KiB would be 4 MiB of the daemon's
    /// memory; their hashes are 32 KiB (two names that collide are refused as the same one).
    seen: std::collections::BTreeSet<u64>,
    ended: bool,
}

impl<R: std::io::Read> Members<R> {
    pub fn new(r: R) -> Members<R> {
        Members {
            r,
            left: 0,
            pad: 0,
            seen: std::collections::BTreeSet::new(),
            ended: false,
        }
    }

    fn skip(&mut self, n: u64) -> Result<(), BundleError> {
        let got = std::io::copy(
            &mut std::io::Read::take(&mut self.r, n),
            &mut std::io::sink(),
        )
        .map_err(|e| err(format!("the archive cannot be read: {e}")))?;
        if got != n {
            return Err(err("the archive ends inside a member (a cut download?)"));
        }
        Ok(())
    }

    fn exact(&mut self, buf: &mut [u8], what: &str) -> Result<(), BundleError> {
        self.r
            .read_exact(buf)
            .map_err(|_| err(format!("the archive ends {what} (a cut download?)")))
    }

    /// The next member's name and size; None after the trailer.
    pub fn next_member(&mut self) -> Result<Option<(String, u64)>, BundleError> {
        if self.ended {
            return Ok(None);
        }
        let rest = self.left + self.pad;
        self.skip(rest)?;
        (self.left, self.pad) = (0, 0);
        let mut h = [0u8; HEADER];
        self.exact(&mut h, "without its trailer")?;
        let head = parse_header(&h)?;
        let mut name = vec![0; head.name_size];
        self.exact(&mut name, "inside a member name")?;
        let name = parse_name(&name)?;
        self.skip(pad4((HEADER + head.name_size) as u64))?;
        if name == TRAILER {
            self.ended = true;
            return Ok(None);
        }
        if self.seen.is_empty() && name != SW_DESCRIPTION {
            return Err(err(format!(
                "the first member is {name:?}, not {SW_DESCRIPTION}: not a bundle"
            )));
        }
        if self.seen.len() >= MAX_MEMBERS {
            return Err(err(format!("more than {MAX_MEMBERS} members")));
        }
        let key = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            name.hash(&mut h);
            h.finish()
        };
        if !self.seen.insert(key) {
            return Err(err(format!("{name:?} is in the archive twice")));
        }
        (self.left, self.pad) = (head.file_size, pad4(head.file_size));
        Ok(Some((name, head.file_size)))
    }

    /// The current member whole, refused past `limit` bytes.
    pub fn small(&mut self, name: &str, limit: u64) -> Result<Vec<u8>, BundleError> {
        if self.left > limit {
            return Err(err(format!(
                "{name} is {} bytes, more than {limit}",
                self.left
            )));
        }
        let mut v = vec![0; self.left as usize];
        self.exact(&mut v, &format!("inside {name}"))?;
        self.left = 0;
        Ok(v)
    }

    /// The current member's data, to read (at most its size).
    pub fn data(&mut self) -> MemberData<'_, R> {
        MemberData { m: self }
    }
}

/// What is left of a member's data.
pub struct MemberData<'a, R> {
    m: &'a mut Members<R>,
}

impl<R: std::io::Read> std::io::Read for MemberData<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = buf.len().min(self.m.left.min(usize::MAX as u64) as usize);
        if want == 0 {
            return Ok(0);
        }
        let n = self.m.r.read(&mut buf[..want])?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the archive ends inside a member (a cut download?)",
            ));
        }
        self.m.left -= n as u64;
        Ok(n)
    }
}

/// A header and name for a regular file of `size` bytes, padded for its data to follow.
pub fn header(name: &str, size: u64, ino: u32, mtime: u64) -> Vec<u8> {
    let mode = if name == TRAILER { 0 } else { 0o100644 };
    let nlink = u32::from(name != TRAILER);
    let fields = [
        ino as u64,
        mode as u64,
        0,
        0,
        nlink as u64,
        mtime,
        size,
        0,
        0,
        0,
        0,
        name.len() as u64 + 1,
        0,
    ];
    let mut out = MAGIC.to_vec();
    for f in fields {
        out.extend_from_slice(format!("{:08x}", f as u32).as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    out.resize(out.len() + pad4(out.len() as u64) as usize, 0);
    out
}

/// `berth.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    pub version: String,
    /// The serial of the index inside (checked against it).
    pub serial: u64,
    /// Packages to install when missing; installed ones are upgraded to the index's versions.
    pub install: Vec<Name>,
}

impl Descriptor {
    pub fn to_json(&self) -> String {
        let names: Vec<&str> = self.install.iter().map(Name::as_str).collect();
        json!({"format": FORMAT, "version": self.version, "serial": self.serial, "install": names})
            .to_string()
    }

    pub fn parse(b: &[u8]) -> Result<Descriptor, BundleError> {
        let v: Value =
            serde_json::from_slice(b).map_err(|e| err(format!("{DESCRIPTOR} is not JSON: {e}")))?;
        match v.get("format").and_then(Value::as_u64) {
            Some(FORMAT) => {}
            other => {
                return Err(err(format!(
                    "{DESCRIPTOR}: format {other:?}; this berth reads format {FORMAT}"
                )))
            }
        }
        let version = v
            .get("version")
            .and_then(Value::as_str)
            .filter(|s| valid_version(s))
            .ok_or_else(|| err(format!("{DESCRIPTOR}: no valid version")))?
            .to_string();
        let serial = v
            .get("serial")
            .and_then(Value::as_u64)
            .ok_or_else(|| err(format!("{DESCRIPTOR}: no serial")))?;
        let mut install = Vec::new();
        for n in v
            .get("install")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let s = n
                .as_str()
                .ok_or_else(|| err(format!("{DESCRIPTOR}: install lists a non-string")))?;
            install.push(
                Name::parse(s).map_err(|e| err(format!("{DESCRIPTOR}: install {s:?}: {e}")))?,
            );
        }
        Ok(Descriptor {
            version,
            serial,
            install,
        })
    }
}

/// A bundle version: what servers compare (SWUpdate's and semver forms): digits, letters,
/// `.`, `-`, `+`, at most 64 bytes.
pub fn valid_version(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+'))
}

/// `sw-description` in libconfig, as SWUpdate spells it: the version, and the boards (with
/// their revisions) the bundle fits; none: every board.
pub fn sw_description(version: &str, boards: &[(String, Vec<String>)], about: &str) -> String {
    let q = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let mut out = format!(
        "software =\n{{\n\tversion = \"{}\";\n\tdescription = \"{}\";\n",
        q(version),
        q(about)
    );
    for (board, revisions) in boards {
        let revs: Vec<String> = revisions.iter().map(|r| format!("\"{}\"", q(r))).collect();
        out.push_str(&format!(
            "\t{board} = {{\n\t\thardware-compatibility = [ {} ];\n\t}};\n",
            revs.join(", ")
        ));
    }
    out.push_str("};\n");
    out
}

/// A board name usable as a libconfig setting name.
pub fn valid_board(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_pad() {
        let h = header(SW_DESCRIPTION, 300, 1, 0);
        // 110 + "sw-description\0" = 125, padded to 128 (what gooseBit's reader assumes).
        assert_eq!(h.len(), 128);
        let p = parse_header(&h).unwrap();
        assert_eq!((p.name_size, p.file_size, p.mode), (15, 300, 0o100644));
        assert_eq!(
            parse_name(&h[HEADER..HEADER + p.name_size]).unwrap(),
            SW_DESCRIPTION
        );
        assert_eq!(&h[54..62], b"0000012c");
        let t = header(TRAILER, 0, 0, 0);
        assert_eq!(t.len() % 4, 0);
        assert_eq!(parse_header(&t).unwrap().mode, 0);
        assert_eq!((pad4(0), pad4(1), pad4(3), pad4(4)), (0, 3, 1, 0));
    }

    #[test]
    fn bad_headers_are_named() {
        let mut h = header("a", 1, 1, 0);
        h[5] = b'7';
        assert!(parse_header(&h).unwrap_err().to_string().contains("newc"));
        let mut h = header("a", 1, 1, 0);
        h[54] = b'z';
        assert!(parse_header(&h).unwrap_err().to_string().contains("hex"));
        assert!(parse_header(&h[..50]).is_err());
        assert!(parse_name(b"abc").is_err());
        assert!(parse_name(b"a\0b\0").is_err());
    }

    fn archive(members: &[(&str, &[u8])], trailer: bool) -> Vec<u8> {
        let mut v = Vec::new();
        for (n, d) in members {
            v.extend(header(n, d.len() as u64, 1, 0));
            v.extend_from_slice(d);
            v.resize(v.len() + pad4(d.len() as u64) as usize, 0);
        }
        if trailer {
            v.extend(header(TRAILER, 0, 0, 0));
        }
        v
    }

    fn read_all(b: &[u8]) -> Result<Vec<(String, Vec<u8>)>, BundleError> {
        let mut m = Members::new(b);
        let mut out = Vec::new();
        while let Some((name, _)) = m.next_member()? {
            let mut d = Vec::new();
            // the second byte on: what is left unread is skipped
            std::io::Read::read_to_end(&mut std::io::Read::take(m.data(), 1), &mut d)
                .map_err(|e| BundleError(e.to_string()))?;
            out.push((name, d));
        }
        Ok(out)
    }

    #[test]
    fn members_are_read_in_order_and_hostile_archives_refused() {
        let ok = archive(
            &[
                (SW_DESCRIPTION, b"sw"),
                (DESCRIPTOR, b"{}"),
                ("a.sqfs", b"xyz"),
            ],
            true,
        );
        let got = read_all(&ok).unwrap();
        assert_eq!(
            got.iter()
                .map(|(n, d)| (n.as_str(), d.as_slice()))
                .collect::<Vec<_>>(),
            [
                (SW_DESCRIPTION, &b"s"[..]),
                (DESCRIPTOR, b"{"),
                ("a.sqfs", b"x")
            ]
        );
        let mut m = Members::new(&ok[..]);
        m.next_member().unwrap();
        assert!(m
            .small(SW_DESCRIPTION, 1)
            .unwrap_err()
            .to_string()
            .contains("more than 1"));
        for (bytes, says) in [
            (archive(&[(DESCRIPTOR, b"{}")], true), "not a bundle"),
            (
                archive(&[(SW_DESCRIPTION, b""), ("x", b""), ("x", b"")], true),
                "twice",
            ),
            (
                archive(&[(SW_DESCRIPTION, b"sw")], false),
                "without its trailer",
            ),
            (ok[..ok.len() - 126].to_vec(), "ends inside a member"),
        ] {
            let e = read_all(&bytes).unwrap_err().to_string();
            assert!(e.contains(says), "{says}: {e}");
        }
        let many: Vec<(String, Vec<u8>)> = (0..=MAX_MEMBERS)
            .map(|i| {
                (
                    if i == 0 {
                        SW_DESCRIPTION.to_string()
                    } else {
                        format!("m{i}")
                    },
                    vec![],
                )
            })
            .collect();
        let refs: Vec<(&str, &[u8])> = many
            .iter()
            .map(|(n, d)| (n.as_str(), d.as_slice()))
            .collect();
        let e = read_all(&archive(&refs, true)).unwrap_err().to_string();
        assert!(e.contains("more than 4096 members"), "{e}");
    }

    #[test]
    fn descriptors() {
        let d = Descriptor {
            version: "2026.11.28-1".into(),
            serial: 7,
            install: vec![Name::parse("web").unwrap()],
        };
        assert_eq!(Descriptor::parse(d.to_json().as_bytes()).unwrap(), d);
        for (body, says) in [
            (&br#"{"format":2,"version":"1","serial":1}"#[..], "format"),
            (br#"{"format":1,"version":"../x","serial":1}"#, "version"),
            (br#"{"format":1,"version":"1"}"#, "serial"),
            (
                br#"{"format":1,"version":"1","serial":1,"install":["Bad Name"]}"#,
                "install",
            ),
            (b"nope", "not JSON"),
        ] {
            let e = Descriptor::parse(body).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn sw_description_text() {
        let t = sw_description(
            "3",
            &[("rt-ax58".into(), vec!["1.0".into(), "2".into()])],
            "a \"b\"",
        );
        assert!(t.starts_with("software =\n{\n\tversion = \"3\";"), "{t}");
        assert!(
            t.contains("rt-ax58 = {\n\t\thardware-compatibility = [ \"1.0\", \"2\" ];"),
            "{t}"
        );
        assert!(t.contains("a \\\"b\\\""));
        assert!(valid_board("rt-ax58") && !valid_board("9x") && !valid_board("a b"));
        assert!(valid_version("1.2.3+b4") && !valid_version("-1") && !valid_version(""));
    }
}
