//! Container images as an attacker would make them, for the tests of `berth import` and its
//! fuzz target: a tar writer that puts any bytes in a name (`..`, absolute paths, names that
//! are not UTF-8, hundreds of levels), any type and any size in a header, GNU sparse maps;
//! and the two containers berth reads, an OCI image layout and a docker-archive, around
//! such layers.

use std::io::{self, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

/// One tar entry.
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: Vec<u8>,
    /// The tar type flag: b'0' file, b'5' directory, b'2' symlink, b'1' hard link, b'3'/b'4'
    /// device, b'6' fifo, b'S' GNU sparse.
    pub kind: u8,
    pub mode: u32,
    pub link: Vec<u8>,
    pub data: Vec<u8>,
    /// The size the header states (GNU sparse: the real size), when not the data's.
    pub size: Option<u64>,
}

impl Entry {
    fn new(kind: u8, name: &[u8], mode: u32) -> Entry {
        Entry {
            name: name.to_vec(),
            kind,
            mode,
            link: Vec::new(),
            data: Vec::new(),
            size: None,
        }
    }

    pub fn file(name: &str, data: &[u8]) -> Entry {
        let mut e = Entry::new(b'0', name.as_bytes(), 0o644);
        e.data = data.to_vec();
        e
    }

    pub fn dir(name: &str) -> Entry {
        Entry::new(b'5', name.as_bytes(), 0o755)
    }

    pub fn symlink(name: &str, target: &str) -> Entry {
        let mut e = Entry::new(b'2', name.as_bytes(), 0o777);
        e.link = target.as_bytes().to_vec();
        e
    }

    pub fn hard_link(name: &str, target: &str) -> Entry {
        let mut e = Entry::new(b'1', name.as_bytes(), 0o644);
        e.link = target.as_bytes().to_vec();
        e
    }

    pub fn raw(kind: u8, name: &[u8], mode: u32) -> Entry {
        Entry::new(kind, name, mode)
    }

    pub fn mode(mut self, mode: u32) -> Entry {
        self.mode = mode;
        self
    }

    /// A header that states `size` bytes whatever data follows.
    pub fn stated_size(mut self, size: u64) -> Entry {
        self.size = Some(size);
        self
    }
}

fn octal(field: &mut [u8], v: u64) {
    let s = format!("{:0w$o}", v, w = field.len() - 1);
    let b = s.as_bytes();
    if b.len() < field.len() {
        field[..b.len()].copy_from_slice(b);
    } else {
        // Too large for octal: GNU's base-256 form.
        field.fill(0);
        field[0] = 0x80;
        let be = v.to_be_bytes();
        let n = field.len();
        field[n - 8..].copy_from_slice(&be);
    }
}

fn header(name: &[u8], kind: u8, mode: u32, size: u64, link: &[u8]) -> [u8; 512] {
    let mut h = [0u8; 512];
    let n = name.len().min(100);
    h[..n].copy_from_slice(&name[..n]);
    octal(&mut h[100..108], mode as u64);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], 0);
    h[156] = kind;
    let l = link.len().min(100);
    h[157..157 + l].copy_from_slice(&link[..l]);
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    checksum(&mut h);
    h
}

fn checksum(h: &mut [u8; 512]) {
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|b| *b as u32).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
}

fn pad(w: &mut dyn Write, len: u64) -> io::Result<()> {
    let rem = (512 - len % 512) % 512;
    w.write_all(&vec![0u8; rem as usize])
}

/// A PAX extended header carrying `path` and `linkpath` as they are (any length, any bytes).
fn pax(w: &mut dyn Write, e: &Entry) -> io::Result<()> {
    let mut body = Vec::new();
    for (key, v) in [(&b"path"[..], &e.name), (&b"linkpath"[..], &e.link)] {
        if v.is_empty() {
            continue;
        }
        // "LEN key=value\n", LEN counting itself.
        let rest = key.len() + v.len() + 3;
        let mut len = rest + 1;
        while len.to_string().len() + rest != len {
            len += 1;
        }
        body.extend_from_slice(len.to_string().as_bytes());
        body.push(b' ');
        body.extend_from_slice(key);
        body.push(b'=');
        body.extend_from_slice(v);
        body.push(b'\n');
    }
    w.write_all(&header(
        b"././@PaxHeader",
        b'x',
        0o644,
        body.len() as u64,
        b"",
    ))?;
    w.write_all(&body)?;
    pad(w, body.len() as u64)
}

/// Writes `entries` as one tar stream (with its two zero blocks at the end).
pub fn write_tar(w: &mut dyn Write, entries: &[Entry]) -> io::Result<()> {
    for e in entries {
        write_entry(w, e)?;
    }
    w.write_all(&[0u8; 1024])
}

/// Writes one entry (a PAX header first for a name or link past 100 bytes).
pub fn write_entry(w: &mut dyn Write, e: &Entry) -> io::Result<()> {
    if e.name.len() > 100 || e.link.len() > 100 {
        pax(w, e)?;
    }
    if e.kind == b'S' {
        // Old GNU sparse: one data block of the data at offset 0, then a hole to the real
        // size the header states.
        let real = e.size.unwrap_or(e.data.len() as u64);
        let mut h = header(&e.name, b'S', e.mode, e.data.len() as u64, b"");
        h[257..265].copy_from_slice(b"ustar  \0");
        octal(&mut h[386..398], 0);
        octal(&mut h[398..410], e.data.len() as u64);
        // and the hole up to the end, as GNU tar writes it: an empty block at the real size
        octal(&mut h[410..422], real);
        octal(&mut h[422..434], 0);
        octal(&mut h[483..495], real);
        checksum(&mut h);
        w.write_all(&h)?;
        w.write_all(&e.data)?;
        return pad(w, e.data.len() as u64);
    }
    let size = e.size.unwrap_or(e.data.len() as u64);
    w.write_all(&header(&e.name, e.kind, e.mode, size, &e.link))?;
    w.write_all(&e.data)?;
    pad(w, e.data.len() as u64)
}

pub fn tar(entries: &[Entry]) -> Vec<u8> {
    let mut v = Vec::new();
    write_tar(&mut v, entries).expect("writing to a Vec");
    v
}

fn sha(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// The image's configuration: an entrypoint, a title and a version.
pub fn config(title: &str, version: &str, entrypoint: &[&str], diff_ids: &[String]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "architecture": oci_arch(),
        "os": "linux",
        "config": {
            "Entrypoint": entrypoint,
            "Labels": {
                "org.opencontainers.image.title": title,
                "org.opencontainers.image.version": version,
            },
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids.iter().map(|d| format!("sha256:{d}")).collect::<Vec<_>>()},
    }))
    .expect("JSON")
}

fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

/// An OCI image layout at `dir` (made), one image tagged `tag`, its layers the tar streams
/// given (stored uncompressed).
pub fn oci_layout(dir: &Path, tag: &str, config: &[u8], layers: &[Vec<u8>]) -> io::Result<()> {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs)?;
    let put = |b: &[u8]| -> io::Result<String> {
        let h = sha(b);
        std::fs::write(blobs.join(&h), b)?;
        Ok(h)
    };
    let cfg = put(config)?;
    let mut descs = Vec::new();
    for l in layers {
        descs.push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": format!("sha256:{}", put(l)?),
            "size": l.len(),
        }));
    }
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": format!("sha256:{cfg}"), "size": config.len()},
        "layers": descs,
    }))
    .expect("JSON");
    let m = put(&manifest)?;
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    std::fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": format!("sha256:{m}"),
                "size": manifest.len(),
                "annotations": {"org.opencontainers.image.ref.name": tag},
            }],
        }))
        .expect("JSON"),
    )
}

/// A docker-archive (as `docker save` writes it) of one image: its members are the given
/// extra ones first (hostile members), then `manifest.json` naming `config.json` and
/// `layerN/layer.tar` unless `manifest` replaces it.
pub fn docker_archive(
    config: &[u8],
    layers: &[Vec<u8>],
    manifest: Option<&str>,
    extra: &[Entry],
) -> Vec<u8> {
    let mut entries: Vec<Entry> = extra.to_vec();
    let mut names = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        let n = format!("layer{i}/layer.tar");
        entries.push(Entry::file(&n, l));
        names.push(n);
    }
    entries.push(Entry::file("config.json", config));
    let m = match manifest {
        Some(m) => m.to_string(),
        None => serde_json::json!([{
            "Config": "config.json",
            "RepoTags": ["hostile:1.0"],
            "Layers": names,
        }])
        .to_string(),
    };
    entries.push(Entry::file("manifest.json", m.as_bytes()));
    tar(&entries)
}

/// The sha256 of a layer (a docker-archive config's `diff_ids`).
pub fn diff_id(layer: &[u8]) -> String {
    sha(layer)
}
