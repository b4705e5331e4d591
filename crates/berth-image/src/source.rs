//! Where an image comes from, and its parts once found: its configuration and its layers,
//! each checked against its digest before it is used.
//!
//! An OCI image layout is a directory someone else made: each file of it (`oci-layout`,
//! `index.json`, `blobs/sha256/HEX`) is opened beneath the layout without following a link.
//! A docker-archive is never unpacked: its members are found by name in one pass over the
//! tar, and read in place (a member that is a link, as `docker save` writes for a layer two
//! images share, is followed inside the archive only).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::rc::Rc;

use berth_sys::tree::Dir;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::layer::clean;
use crate::{hex, refused, ImageError, Result, MAX_JSON};

/// Where the image comes from.
#[derive(Debug, PartialEq, Eq)]
pub enum Source {
    /// An OCI image layout directory, and the tag (`org.opencontainers.image.ref.name`).
    Oci {
        layout: PathBuf,
        tag: Option<String>,
    },
    /// `docker save` / `skopeo copy … docker-archive:` output.
    DockerArchive { file: PathBuf },
}

impl Source {
    pub fn parse(s: &str) -> Result<Source> {
        if let Some(rest) = s.strip_prefix("oci:") {
            // The tag is after the last ':' that is not part of the path ("oci:dir:tag").
            let (layout, tag) = match rest.rsplit_once(':') {
                Some((l, t)) if !t.contains('/') && !l.is_empty() => (l, Some(t.to_string())),
                _ => (rest, None),
            };
            if layout.is_empty() {
                return Err(ImageError::Invalid(format!(
                    "{s}: oci: needs a layout directory"
                )));
            }
            return Ok(Source::Oci {
                layout: layout.into(),
                tag: tag.filter(|t| !t.is_empty()),
            });
        }
        if let Some(file) = s.strip_prefix("docker-archive:") {
            if file.is_empty() {
                return Err(ImageError::Invalid(format!(
                    "{s}: docker-archive: needs a file"
                )));
            }
            return Ok(Source::DockerArchive { file: file.into() });
        }
        Err(ImageError::Invalid(format!(
            "{s}: expected oci:LAYOUT[:TAG], docker-archive:FILE.tar or registry://HOST/REPO[:TAG]"
        )))
    }
}

/// Bytes of a file: all of it, or a member of an archive.
#[derive(Clone)]
pub struct Blob {
    file: Rc<File>,
    start: u64,
    len: u64,
    /// What it is called in messages.
    pub name: String,
}

impl Blob {
    fn whole(file: File, name: String) -> Result<Blob> {
        let len = file.metadata().map_err(|e| ImageError::io(&name, e))?.len();
        Ok(Blob {
            file: Rc::new(file),
            start: 0,
            len,
            name,
        })
    }

    /// Its bytes, as they are.
    pub fn raw(&self) -> Region {
        Region {
            file: self.file.clone(),
            pos: self.start,
            end: self.start + self.len,
        }
    }

    fn sha256(&self) -> Result<String> {
        let mut h = Sha256::new();
        let mut r = self.raw();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = r
                .read(&mut buf)
                .map_err(|e| ImageError::io(&self.name, e))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        Ok(hex(&h.finalize()))
    }

    /// Refused unless its sha256 is `want`.
    fn check(&self, want: &str) -> Result<()> {
        let got = self.sha256()?;
        if !got.eq_ignore_ascii_case(want) {
            return refused(format!(
                "{}: its sha256 is {got}, its digest says {want}: the image is damaged",
                self.name
            ));
        }
        Ok(())
    }

    fn json(&self) -> Result<Value> {
        if self.len > MAX_JSON {
            return refused(format!(
                "{}: {} bytes of JSON, more than {MAX_JSON}",
                self.name, self.len
            ));
        }
        let mut b = Vec::with_capacity(self.len as usize);
        self.raw()
            .read_to_end(&mut b)
            .map_err(|e| ImageError::io(&self.name, e))?;
        serde_json::from_slice(&b)
            .map_err(|e| ImageError::Refused(format!("{}: not valid JSON: {e}", self.name)))
    }

    /// The layer's tar stream: gzip and plain tar read here, zstd through the `zstd` tool.
    pub fn layer_stream(&self) -> Result<Box<dyn Read>> {
        let mut magic = [0u8; 4];
        let n = self
            .file
            .read_at(&mut magic, self.start)
            .map_err(|e| ImageError::io(&self.name, e))?
            .min(self.len as usize);
        Ok(match &magic[..n] {
            [0x1f, 0x8b, ..] => Box::new(flate2::read::MultiGzDecoder::new(io::BufReader::new(
                self.raw(),
            ))),
            [0x28, 0xb5, 0x2f, 0xfd] => Box::new(Zstd::start(self)?),
            _ => Box::new(io::BufReader::new(self.raw())),
        })
    }
}

/// A range of a file, read with `pread` (members of one archive share its descriptor).
pub struct Region {
    file: Rc<File>,
    pos: u64,
    end: u64,
}

impl Read for Region {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf
            .len()
            .min((self.end - self.pos).min(usize::MAX as u64) as usize);
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file ends before the member does",
            ));
        }
        self.pos += n as u64;
        Ok(n)
    }
}

/// `zstd -dc` fed the blob by a thread of its own; its output read to the end (its failure
/// reported there), the child killed and reaped when dropped.
struct Zstd {
    child: std::process::Child,
    feeder: Option<std::thread::JoinHandle<()>>,
}

impl Zstd {
    fn start(blob: &Blob) -> Result<Zstd> {
        let mut child = Command::new("zstd")
            .args(["-dc"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                ImageError::Refused(format!(
                    "{}: a zstd layer needs the zstd tool (Debian package zstd): {e}",
                    blob.name
                ))
            })?;
        let mut input = child.stdin.take().expect("stdin is piped");
        // A Region is not Send (its Rc): the thread reads through its own descriptor.
        let file = blob
            .file
            .try_clone()
            .map_err(|e| ImageError::io(&blob.name, e))?;
        let (start, len) = (blob.start, blob.len);
        let feeder = std::thread::spawn(move || {
            let mut r = Region {
                file: Rc::new(file),
                pos: start,
                end: start + len,
            };
            // A consumer that stopped reading ends this with EPIPE: nothing to report.
            let _ = io::copy(&mut r, &mut input);
        });
        Ok(Zstd {
            child,
            feeder: Some(feeder),
        })
    }
}

impl Read for Zstd {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = match self.child.stdout.as_mut() {
            Some(o) => o.read(buf)?,
            None => 0,
        };
        if n == 0 && !buf.is_empty() {
            let st = self.child.wait()?;
            if !st.success() {
                return Err(io::Error::other(format!("zstd -d failed ({st})")));
            }
        }
        Ok(n)
    }
}

impl Drop for Zstd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        drop(self.child.stdout.take());
        if let Some(f) = self.feeder.take() {
            let _ = f.join();
        }
    }
}

/// The image's parts once found: its configuration and its layers, in order.
pub struct Image {
    pub config: Value,
    pub layers: Vec<Blob>,
    /// The tag it was found by, if any (a default version).
    pub tag: Option<String>,
}

pub fn open(src: &Source) -> Result<Image> {
    match src {
        Source::Oci { layout, tag } => oci_image(layout, tag.as_deref()),
        Source::DockerArchive { file } => {
            let f = File::open(file).map_err(|e| ImageError::io(file.display().to_string(), e))?;
            docker_image(f, &file.display().to_string())
        }
    }
}

/// The host's architecture as OCI names it, to pick from a multi-platform index (also the
/// registry pull's default).
pub fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "mips" if cfg!(target_endian = "little") => "mipsle",
        "mips" => "mips",
        "mips64" => "mips64",
        "powerpc64" => "ppc64le",
        "riscv64" => "riscv64",
        "x86" => "386",
        other => other,
    }
}

/// A file of the layout, opened beneath it.
fn layout_file(dir: &Dir, layout: &Path, rel: &str) -> Result<Blob> {
    let name = format!("{}/{rel}", layout.display());
    let f = dir
        .open_file(Path::new(rel))
        .map_err(|e| ImageError::io(&name, e))?;
    Blob::whole(f, name)
}

/// A blob of the layout by digest, its content checked against it.
fn blob(dir: &Dir, layout: &Path, digest: &Value) -> Result<Blob> {
    let digest = digest.as_str().unwrap_or("");
    let (alg, h) = digest
        .split_once(':')
        .ok_or_else(|| ImageError::Refused(format!("digest {digest:?}: expected ALGORITHM:HEX")))?;
    if alg != "sha256" {
        return refused(format!("digest {digest}: only sha256 blobs are supported"));
    }
    if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
        return refused(format!("digest {digest}: not a sha256"));
    }
    let b = layout_file(dir, layout, &format!("blobs/sha256/{h}"))?;
    b.check(h)?;
    Ok(b)
}

fn oci_image(layout: &Path, tag: Option<&str>) -> Result<Image> {
    // The layout's own path is the vendor's to name; what is inside it is the image's.
    let dir =
        Dir::open_given(layout).map_err(|e| ImageError::io(layout.display().to_string(), e))?;
    let v = layout_file(&dir, layout, "oci-layout")
        .and_then(|b| b.json())
        .map_err(|e| {
            ImageError::Refused(format!(
                "{}: not an OCI image layout ({e})",
                layout.display()
            ))
        })?;
    if v["imageLayoutVersion"].as_str().is_none() {
        return refused(format!(
            "{}/oci-layout: no imageLayoutVersion",
            layout.display()
        ));
    }
    let index = layout_file(&dir, layout, "index.json")?.json()?;
    let manifests = index["manifests"].as_array().cloned().unwrap_or_default();
    let tag_of = |m: &Value| {
        m["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .map(String::from)
    };
    let tags = || {
        let t: Vec<String> = manifests.iter().filter_map(tag_of).collect();
        if t.is_empty() {
            "none".into()
        } else {
            t.join(", ")
        }
    };
    let chosen = match tag {
        Some(t) => match manifests.iter().find(|m| tag_of(m).as_deref() == Some(t)) {
            Some(m) => m.clone(),
            None => {
                return refused(format!(
                    "{}: no image tagged {t:?} (tags: {})",
                    layout.display(),
                    tags()
                ))
            }
        },
        None if manifests.len() == 1 => manifests[0].clone(),
        None => {
            return refused(format!(
                "{}: {} images; name one with oci:{}:TAG (tags: {})",
                layout.display(),
                manifests.len(),
                layout.display(),
                tags()
            ))
        }
    };
    let mut desc = chosen.clone();
    // An index (multi-platform image): the manifest for this machine's architecture.
    for _ in 0..4 {
        let media = desc["mediaType"].as_str().unwrap_or("");
        if !media.contains("index") && !media.contains("manifest.list") {
            break;
        }
        let sub = blob(&dir, layout, &desc["digest"])?.json()?;
        desc =
            match sub["manifests"].as_array().into_iter().flatten().find(|m| {
                m["platform"]["os"] == "linux" && m["platform"]["architecture"] == oci_arch()
            }) {
                Some(m) => m.clone(),
                None => {
                    return refused(format!(
                        "{}: the image has no linux/{} variant",
                        layout.display(),
                        oci_arch()
                    ))
                }
            };
    }
    let manifest = blob(&dir, layout, &desc["digest"])?.json()?;
    let config = blob(&dir, layout, &manifest["config"]["digest"])?.json()?;
    let mut layers = Vec::new();
    for l in manifest["layers"].as_array().into_iter().flatten() {
        let media = l["mediaType"].as_str().unwrap_or("");
        if media.contains("nondistributable") && !media.contains("tar") {
            return refused(format!("layer {media}: not a file-system layer"));
        }
        layers.push(blob(&dir, layout, &l["digest"])?);
    }
    Ok(Image {
        config,
        layers,
        tag: tag_of(&chosen),
    })
}

/// How many members a docker-archive may have (one image: a few per layer).
const MAX_MEMBERS: usize = 65_536;

/// A member of an archive: its bytes, or the link it is.
enum Member {
    File { start: u64, len: u64 },
    Link(PathBuf),
}

/// The members of a docker-archive by their clean names, in one pass over its headers.
fn members(file: &File, shown: &str) -> Result<HashMap<PathBuf, Member>> {
    // Read through once (the guard bounds what the tar reader holds of a header).
    let mut ar = tar::Archive::new(crate::layer::TarGuard::new(io::BufReader::new(file)));
    let mut out = HashMap::new();
    let bad = |e: io::Error| ImageError::Refused(format!("{shown}: not a tar archive ({e})"));
    for e in ar.entries().map_err(bad)? {
        let e = e.map_err(bad)?;
        if out.len() >= MAX_MEMBERS {
            return refused(format!("{shown}: more than {MAX_MEMBERS} members"));
        }
        let raw = e.path_bytes();
        let Some(name) = clean(Path::new(OsStr::from_bytes(&raw))) else {
            continue;
        };
        let kind = e.header().entry_type();
        let member = if kind.is_file() {
            Member::File {
                start: e.raw_file_position(),
                len: e.size(),
            }
        } else if kind.is_symlink() {
            match e.link_name_bytes() {
                Some(t) => Member::Link(PathBuf::from(OsStr::from_bytes(&t))),
                None => continue,
            }
        } else {
            continue;
        };
        out.insert(name, member);
    }
    Ok(out)
}

/// A docker-archive read in place: `manifest.json`, the image's configuration and layers.
pub fn docker_image(f: File, shown: &str) -> Result<Image> {
    let index = members(&f, shown)?;
    let file = Rc::new(f);
    // A member by the name manifest.json gives, a link in the archive followed inside it.
    let member = |rel: &str| -> Result<Blob> {
        let mut name = clean(Path::new(rel))
            .filter(|p| !p.as_os_str().is_empty())
            .ok_or_else(|| ImageError::Refused(format!("{shown}: {rel:?} leaves the archive")))?;
        for _ in 0..8 {
            match index.get(&name) {
                Some(Member::File { start, len }) => {
                    return Ok(Blob {
                        file: file.clone(),
                        start: *start,
                        len: *len,
                        name: format!("{shown}: {rel}"),
                    })
                }
                Some(Member::Link(t)) => {
                    let base = name.parent().map(Path::to_path_buf).unwrap_or_default();
                    name = if t.is_absolute() {
                        clean(t)
                    } else {
                        lexical(&base.join(t))
                    }
                    .ok_or_else(|| {
                        ImageError::Refused(format!(
                            "{shown}: {rel} links to {}, outside the archive",
                            t.display()
                        ))
                    })?;
                }
                None => return refused(format!("{shown}: no member {rel:?}")),
            }
        }
        refused(format!("{shown}: {rel}: too many links"))
    };
    let m = member("manifest.json")
        .and_then(|b| b.json())
        .map_err(|e| {
            ImageError::Refused(format!(
                "{shown}: not a docker-archive (manifest.json: {e})"
            ))
        })?;
    let entries = m.as_array().cloned().unwrap_or_default();
    let first = match entries.as_slice() {
        [one] => one.clone(),
        [] => return refused(format!("{shown}: manifest.json lists no image")),
        _ => {
            return refused(format!(
                "{shown}: {} images in one archive; import an archive of one image",
                entries.len()
            ))
        }
    };
    // A member named by its digest (the OCI-style archive) is checked against the name.
    let checked = |rel: &str| -> Result<Blob> {
        let b = member(rel)?;
        if let Some(h) = rel.strip_prefix("blobs/sha256/") {
            b.check(h)?;
        }
        Ok(b)
    };
    let config = checked(first["Config"].as_str().unwrap_or(""))?.json()?;
    let mut layers = Vec::new();
    for l in first["Layers"].as_array().into_iter().flatten() {
        layers.push(checked(l.as_str().unwrap_or(""))?);
    }
    let tag = first["RepoTags"][0]
        .as_str()
        .and_then(|t| t.rsplit_once(':'))
        .map(|(_, t)| t.to_string());
    Ok(Image {
        config,
        layers,
        tag,
    })
}

/// `..` taken lexically; None when it climbs above the top.
fn lexical(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::Normal(x) => out.push(x),
            std::path::Component::ParentDir => out.pop().then_some(())?,
            _ => {}
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_read_with_their_tags() {
        assert_eq!(
            Source::parse("oci:/tmp/img:v2").unwrap(),
            Source::Oci {
                layout: "/tmp/img".into(),
                tag: Some("v2".into())
            }
        );
        assert_eq!(
            Source::parse("oci:img").unwrap(),
            Source::Oci {
                layout: "img".into(),
                tag: None
            }
        );
        assert_eq!(
            Source::parse("docker-archive:/x/a.tar").unwrap(),
            Source::DockerArchive {
                file: "/x/a.tar".into()
            }
        );
        let e = Source::parse("docker://busybox").unwrap_err();
        assert!(e.to_string().contains("oci:LAYOUT"), "{e}");
        assert_eq!(e.kind(), berth_sys::ErrorKind::Invalid);
        assert!(Source::parse("oci:").is_err());
    }

    #[test]
    fn links_between_members_stay_inside_the_archive() {
        assert_eq!(lexical(Path::new("a/../b/c")), Some(PathBuf::from("b/c")));
        assert_eq!(lexical(Path::new("a/../../b")), None);
    }
}
