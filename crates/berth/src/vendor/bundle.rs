//! `berth repo bundle DIR -o FILE`: a bundle for a fleet server (`berth_core::bundle`,
//! docs/fleet.md): the repository's signed index and the images of the packages named (and
//! their dependencies), or the index alone (`--index-only`: the devices fetch the images
//! from their repository), in the cpio layout of SWUpdate's `.swu` files.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use anyhow::{bail, Context};
use berth_core::bundle::{self as b, Descriptor};
use berth_core::index::Index;
use berth_core::name::Name;
use serde::Serialize;

use super::repo::{INDEX_FILE, SIGNATURE_FILE};

#[derive(Debug, Clone, Serialize)]
pub struct BundleReport {
    pub file: String,
    pub version: String,
    pub serial: u64,
    pub size: u64,
    pub install: Vec<String>,
    /// The images carried (index paths).
    pub images: Vec<String>,
}

pub struct Options<'a> {
    pub out: &'a Path,
    pub version: Option<String>,
    pub install: Vec<String>,
    /// (board, revisions) the bundle fits; none: every board.
    pub boards: Vec<(String, Vec<String>)>,
    pub index_only: bool,
}

pub fn build(dir: &Path, o: &Options) -> anyhow::Result<BundleReport> {
    let index_bytes = std::fs::read(dir.join(INDEX_FILE)).with_context(|| {
        format!(
            "{}: run berth repo build first",
            dir.join(INDEX_FILE).display()
        )
    })?;
    let sig = std::fs::read(dir.join(SIGNATURE_FILE))
        .with_context(|| format!("read {}", dir.join(SIGNATURE_FILE).display()))?;
    let index = Index::parse(&index_bytes)
        .with_context(|| format!("{}", dir.join(INDEX_FILE).display()))?;
    let mut install = Vec::new();
    for n in &o.install {
        let name = Name::parse(n).with_context(|| format!("--install {n}"))?;
        if !index.packages.iter().any(|e| e.name == name) {
            bail!("--install {n}: the repository's index has no such package");
        }
        install.push(name);
    }
    let version = o
        .version
        .clone()
        .unwrap_or_else(|| index.serial.to_string());
    if !b::valid_version(&version) {
        bail!("--version {version:?}: use digits, letters, '.', '-' and '+' (at most 64)");
    }
    for (board, _) in &o.boards {
        if !b::valid_board(board) {
            bail!("--board {board:?}: a letter, then letters, digits, '-' or '_'");
        }
    }
    // The images: every package's (the whole repository) unless --install narrows it to
    // those packages and their dependencies.
    let images: Vec<&berth_core::index::IndexEntry> = if o.index_only {
        Vec::new()
    } else if install.is_empty() {
        index.packages.iter().collect()
    } else {
        let refs: Vec<&str> = install.iter().map(Name::as_str).collect();
        index.closure(&refs).context("the packages to install")?
    };
    let descriptor = Descriptor {
        version: version.clone(),
        serial: index.serial,
        install,
    };
    let about = format!(
        "berth bundle: repository serial {}, {} of {} images",
        index.serial,
        images.len(),
        index.packages.len()
    );
    let tmp = o.out.with_extension("tmp");
    let written = (|| -> anyhow::Result<u64> {
        let f = File::create(&tmp).with_context(|| format!("create {}", tmp.display()))?;
        let mut w = Writer {
            out: BufWriter::new(f),
            ino: 0,
            at: 0,
        };
        w.member(
            b::SW_DESCRIPTION,
            b::sw_description(&version, &o.boards, &about).as_bytes(),
        )?;
        w.member(b::DESCRIPTOR, descriptor.to_json().as_bytes())?;
        w.member(b::INDEX, &index_bytes)?;
        w.member(b::SIGNATURE, &sig)?;
        for e in &images {
            let p = dir.join(&e.file);
            let mut f = File::open(&p).with_context(|| format!("open {}", p.display()))?;
            let len = f.metadata()?.len();
            if len != e.size {
                bail!(
                    "{}: {len} bytes, the index says {}: run berth repo build again",
                    p.display(),
                    e.size
                );
            }
            w.stream(&e.file, len, &mut f)?;
        }
        w.member(b::TRAILER, b"")?;
        let mut out = w.out.into_inner().map_err(|e| e.into_error())?;
        out.flush()?;
        out.sync_all()?;
        Ok(w.at)
    })();
    let size = match written {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    std::fs::rename(&tmp, o.out).with_context(|| format!("rename to {}", o.out.display()))?;
    Ok(BundleReport {
        file: o.out.display().to_string(),
        version,
        serial: index.serial,
        size,
        install: descriptor.install.iter().map(|n| n.to_string()).collect(),
        images: images.iter().map(|e| e.file.clone()).collect(),
    })
}

struct Writer {
    out: BufWriter<File>,
    ino: u32,
    at: u64,
}

impl Writer {
    fn member(&mut self, name: &str, data: &[u8]) -> anyhow::Result<()> {
        self.stream(name, data.len() as u64, &mut &data[..])
    }

    fn stream(&mut self, name: &str, size: u64, r: &mut dyn io::Read) -> anyhow::Result<()> {
        if size > u64::from(u32::MAX) {
            bail!("{name}: {size} bytes, more than a cpio member holds (4 GiB)");
        }
        self.ino += 1;
        let h = b::header(name, size, if name == b::TRAILER { 0 } else { self.ino }, 0);
        self.out.write_all(&h)?;
        let copied = io::copy(&mut io::Read::take(r, size), &mut self.out)?;
        if copied != size {
            bail!("{name}: read {copied} of {size} bytes");
        }
        let pad = b::pad4(size) as usize;
        self.out.write_all(&[0u8; 3][..pad])?;
        self.at += h.len() as u64 + size + pad as u64;
        Ok(())
    }
}
