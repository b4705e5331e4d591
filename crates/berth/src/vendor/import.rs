//! `berth import oci:LAYOUT[:TAG]` and `berth import docker-archive:FILE.tar`: a container
//! image the vendor already builds becomes a berth package (docs/package-format.md,
//! "Importing a container image").
//!
//! The image's layers are applied in order into a private staging tree (whiteouts and opaque
//! directories honoured as the OCI image specification defines them: a whiteout hides what
//! the layers below put there, never what its own layer adds), every blob's sha256 checked
//! against its digest first. What a package must not hold is left out with a warning, as
//! `pack` warns about it: device nodes and fifos are not written, setuid and setgid bits and
//! extended attributes (file capabilities among them) are dropped. The image's configuration
//! becomes the manifest (entrypoint + cmd as argv, env, working directory, user), and the tree
//! is packed by `pack` itself, with all its checks.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::pack::{self, PackReport};

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
    pub fn parse(s: &str) -> Result<Source, String> {
        if let Some(rest) = s.strip_prefix("oci:") {
            // The tag is after the last ':' that is not part of the path ("oci:dir:tag").
            let (layout, tag) = match rest.rsplit_once(':') {
                Some((l, t)) if !t.contains('/') && !l.is_empty() => (l, Some(t.to_string())),
                _ => (rest, None),
            };
            if layout.is_empty() {
                return Err(format!("{s}: oci: needs a layout directory"));
            }
            return Ok(Source::Oci {
                layout: layout.into(),
                tag: tag.filter(|t| !t.is_empty()),
            });
        }
        if let Some(file) = s.strip_prefix("docker-archive:") {
            if file.is_empty() {
                return Err(format!("{s}: docker-archive: needs a file"));
            }
            return Ok(Source::DockerArchive { file: file.into() });
        }
        Err(format!(
            "{s}: expected oci:LAYOUT[:TAG] or docker-archive:FILE.tar"
        ))
    }
}

#[derive(Debug, Serialize)]
pub struct ImportReport {
    /// The image, as named on the command line.
    pub image: String,
    pub layers: usize,
    /// What the import left out or changed.
    pub import_warnings: Vec<String>,
    #[serde(flatten)]
    pub pack: PackReport,
}

/// The image's parts once found: its configuration and its layers as files, in order.
struct Image {
    config: Value,
    layers: Vec<PathBuf>,
    /// The tag it was found by, if any (a default version).
    tag: Option<String>,
}

pub fn import(
    source: &str,
    out: &Path,
    name: Option<&str>,
    version: Option<&str>,
) -> Result<ImportReport> {
    let src = Source::parse(source).map_err(|m| anyhow!(m))?;
    // Staging next to the output (same file system as the image will be written to, and
    // cleaned however this ends).
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let scratch = Scratch::new(&parent)?;
    let image = match &src {
        Source::Oci { layout, tag } => oci_image(layout, tag.as_deref())?,
        Source::DockerArchive { file } => docker_image(file, &scratch.0.join("archive"))?,
    };
    let root = scratch.0.join("rootfs");
    fs::create_dir(&root).with_context(|| format!("cannot create {}", root.display()))?;
    let mut warnings = Vec::new();
    for (i, layer) in image.layers.iter().enumerate() {
        apply_layer(
            &root,
            layer,
            &scratch.0.join(format!("layer{i}")),
            &mut warnings,
        )
        .with_context(|| format!("{source}: layer {} of {}", i + 1, image.layers.len()))?;
    }
    let manifest = manifest_text(&image, &root, name, version, &mut warnings)
        .with_context(|| format!("{source}: the image's configuration"))?;
    let dot = root.join(".berth");
    if dot.exists() {
        warnings.push("the image has its own /.berth: replaced by the imported manifest".into());
        remove_any(&dot)?;
    }
    fs::create_dir(&dot)?;
    fs::write(dot.join("manifest.toml"), manifest)?;
    let report = pack::pack(&root, out)?;
    Ok(ImportReport {
        image: source.to_string(),
        layers: image.layers.len(),
        import_warnings: warnings,
        pack: report,
    })
}

/// A private directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(parent: &Path) -> Result<Scratch> {
        for n in 0..1000u32 {
            let p = parent.join(format!(".berth-import-{}-{n}", std::process::id()));
            match fs::create_dir(&p) {
                Ok(()) => {
                    fs::set_permissions(&p, fs::Permissions::from_mode(0o700))?;
                    return Ok(Scratch(p));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("cannot create a staging directory in {}", parent.display())
                    })
                }
            }
        }
        bail!("cannot create a staging directory in {}", parent.display())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = remove_any(&self.0);
    }
}

fn read_json(p: &Path) -> Result<Value> {
    let b = fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
    serde_json::from_slice(&b).with_context(|| format!("{}: not valid JSON", p.display()))
}

/// A blob of an OCI layout, its content checked against its digest.
fn blob(layout: &Path, digest: &str) -> Result<PathBuf> {
    let (alg, hex) = digest
        .split_once(':')
        .ok_or_else(|| anyhow!("digest {digest:?}: expected ALGORITHM:HEX"))?;
    if alg != "sha256" {
        bail!("digest {digest}: only sha256 blobs are supported");
    }
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("digest {digest}: not a sha256");
    }
    let p = layout.join("blobs/sha256").join(hex);
    check_sha256(&p, hex)?;
    Ok(p)
}

fn check_sha256(p: &Path, hex: &str) -> Result<()> {
    let mut f = File::open(p).with_context(|| format!("cannot open blob {}", p.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    let got = berth_core::index::hex(&h.finalize());
    if !got.eq_ignore_ascii_case(hex) {
        bail!(
            "blob {}: its sha256 is {got}, its digest says {hex}: the image is damaged",
            p.display()
        );
    }
    Ok(())
}

/// The host's architecture as OCI names it, to pick from a multi-platform index.
fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "mips" => "mips",
        "mips64" => "mips64",
        "powerpc64" => "ppc64le",
        "riscv64" => "riscv64",
        "x86" => "386",
        other => other,
    }
}

fn oci_image(layout: &Path, tag: Option<&str>) -> Result<Image> {
    let layout_file = layout.join("oci-layout");
    let v = read_json(&layout_file)
        .with_context(|| format!("{}: not an OCI image layout", layout.display()))?;
    if v["imageLayoutVersion"].as_str().is_none() {
        bail!("{}: no imageLayoutVersion", layout_file.display());
    }
    let index = read_json(&layout.join("index.json"))?;
    let manifests = index["manifests"].as_array().cloned().unwrap_or_default();
    let tag_of = |m: &Value| {
        m["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .map(String::from)
    };
    let chosen = match tag {
        Some(t) => manifests
            .iter()
            .find(|m| tag_of(m).as_deref() == Some(t))
            .ok_or_else(|| {
                let tags: Vec<String> = manifests.iter().filter_map(tag_of).collect();
                anyhow!(
                    "{}: no image tagged {t:?} (tags: {})",
                    layout.display(),
                    if tags.is_empty() {
                        "none".into()
                    } else {
                        tags.join(", ")
                    }
                )
            })?
            .clone(),
        None if manifests.len() == 1 => manifests[0].clone(),
        None => {
            let tags: Vec<String> = manifests.iter().filter_map(tag_of).collect();
            bail!(
                "{}: {} images; name one with oci:{}:TAG (tags: {})",
                layout.display(),
                manifests.len(),
                layout.display(),
                tags.join(", ")
            )
        }
    };
    let mut desc = chosen.clone();
    // An index (multi-platform image): the manifest for this machine's architecture.
    for _ in 0..4 {
        let media = desc["mediaType"].as_str().unwrap_or("");
        if !media.contains("index") && !media.contains("manifest.list") {
            break;
        }
        let sub = read_json(&blob(layout, desc["digest"].as_str().unwrap_or(""))?)?;
        desc = sub["manifests"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["platform"]["os"] == "linux" && m["platform"]["architecture"] == oci_arch())
            .cloned()
            .ok_or_else(|| {
                anyhow!(
                    "{}: the image has no linux/{} variant",
                    layout.display(),
                    oci_arch()
                )
            })?;
    }
    let manifest = read_json(&blob(layout, desc["digest"].as_str().unwrap_or(""))?)?;
    let config = read_json(&blob(
        layout,
        manifest["config"]["digest"].as_str().unwrap_or(""),
    )?)?;
    let mut layers = Vec::new();
    for l in manifest["layers"].as_array().into_iter().flatten() {
        let media = l["mediaType"].as_str().unwrap_or("");
        if media.contains("nondistributable") && !media.contains("tar") {
            bail!("layer {media}: not a file-system layer");
        }
        layers.push(blob(layout, l["digest"].as_str().unwrap_or(""))?);
    }
    Ok(Image {
        config,
        layers,
        tag: tag_of(&chosen),
    })
}

fn docker_image(file: &Path, dir: &Path) -> Result<Image> {
    fs::create_dir(dir)?;
    let f = File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
    let mut ar = tar::Archive::new(f);
    ar.set_preserve_permissions(false);
    ar.set_unpack_xattrs(false);
    for e in ar
        .entries()
        .with_context(|| format!("{}: not a tar archive", file.display()))?
    {
        let mut e = e.with_context(|| format!("{}: damaged tar archive", file.display()))?;
        let kind = e.header().entry_type();
        if !(kind.is_file() || kind.is_dir()) {
            continue;
        }
        // unpack_in refuses paths that would leave the directory.
        e.unpack_in(dir)
            .with_context(|| format!("{}: cannot unpack", file.display()))?;
    }
    let m = read_json(&dir.join("manifest.json")).with_context(|| {
        format!(
            "{}: not a docker-archive (no manifest.json)",
            file.display()
        )
    })?;
    let entries = m.as_array().cloned().unwrap_or_default();
    let first = match entries.as_slice() {
        [one] => one.clone(),
        [] => bail!("{}: manifest.json lists no image", file.display()),
        _ => bail!(
            "{}: {} images in one archive; import an archive of one image",
            file.display(),
            entries.len()
        ),
    };
    let inside = |rel: &str| -> Result<PathBuf> {
        let p = clean(Path::new(rel))
            .ok_or_else(|| anyhow!("{}: {rel:?} leaves the archive", file.display()))?;
        let full = dir.join(p);
        // A blobs/sha256/HEX file is checked against its name.
        if let Some(hex) = rel.strip_prefix("blobs/sha256/") {
            check_sha256(&full, hex)?;
        }
        Ok(full)
    };
    let config = read_json(&inside(first["Config"].as_str().unwrap_or(""))?)?;
    let mut layers = Vec::new();
    for l in first["Layers"].as_array().into_iter().flatten() {
        layers.push(inside(l.as_str().unwrap_or(""))?);
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

/// A path inside the image: relative, without `..`, `./` and leading `/` dropped. None for a
/// path that would leave it.
fn clean(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(x) => out.push(x),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// A layer's tar stream: gzip and plain tar read here, zstd through the `zstd` tool.
fn layer_reader(p: &Path) -> Result<Box<dyn Read>> {
    let mut f = File::open(p).with_context(|| format!("cannot open {}", p.display()))?;
    let mut magic = [0u8; 4];
    let n = f.read(&mut magic)?;
    drop(f);
    let f = File::open(p)?;
    Ok(match &magic[..n] {
        [0x1f, 0x8b, ..] => Box::new(flate2::read::MultiGzDecoder::new(io::BufReader::new(f))),
        [0x28, 0xb5, 0x2f, 0xfd] => {
            let child = Command::new("zstd")
                .args(["-dc", "--"])
                .arg(p)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| {
                    anyhow!(
                        "{}: a zstd layer needs the zstd tool (Debian package zstd): {e}",
                        p.display()
                    )
                })?;
            Box::new(ChildOut(child))
        }
        _ => Box::new(io::BufReader::new(f)),
    })
}

/// A child's stdout, read to the end; the child is reaped (and its failure reported) at EOF.
struct ChildOut(std::process::Child);

impl Read for ChildOut {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = match self.0.stdout.as_mut() {
            Some(o) => o.read(buf)?,
            None => 0,
        };
        if n == 0 && !buf.is_empty() {
            let st = self.0.wait()?;
            if !st.success() {
                return Err(io::Error::other(format!("zstd -d failed ({st})")));
            }
        }
        Ok(n)
    }
}

impl Drop for ChildOut {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const WHITEOUT: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";

/// One layer onto `root`: unpacked into `scratch` first, its whiteouts then remove what the
/// layers below put in `root`, and its entries replace theirs.
fn apply_layer(
    root: &Path,
    layer: &Path,
    scratch: &Path,
    warnings: &mut Vec<String>,
) -> Result<()> {
    fs::create_dir(scratch)?;
    let mut ar = tar::Archive::new(layer_reader(layer)?);
    ar.set_preserve_permissions(true);
    ar.set_preserve_ownerships(true);
    ar.set_unpack_xattrs(false);
    ar.set_overwrite(true);
    ar.set_preserve_mtime(true);
    let mut whiteouts = Vec::new();
    for e in ar.entries().context("not a tar stream")? {
        let mut e = e.context("damaged tar stream")?;
        let raw = e.path()?.into_owned();
        let rel = clean(&raw).ok_or_else(|| anyhow!("{}: leaves the image", raw.display()))?;
        if rel.as_os_str().is_empty() {
            continue;
        }
        let base = rel
            .file_name()
            .map(|b| b.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(hidden) = base.strip_prefix(WHITEOUT) {
            let dir = rel.parent().map(Path::to_path_buf).unwrap_or_default();
            whiteouts.push(if base == OPAQUE {
                (dir, None)
            } else {
                (dir, Some(hidden.to_string()))
            });
            continue;
        }
        let shown = format!("/{}", rel.display());
        let kind = e.header().entry_type();
        match kind {
            tar::EntryType::Block | tar::EntryType::Char => {
                warnings.push(format!(
                    "{shown}: a device node, left out (packages are mounted nodev)"
                ));
                continue;
            }
            tar::EntryType::Fifo => {
                warnings.push(format!(
                    "{shown}: a fifo, left out (create it at run time under /run)"
                ));
                continue;
            }
            _ => {}
        }
        let dest = scratch.join(&rel);
        if let Some(p) = dest.parent() {
            fs::create_dir_all(p)?;
        }
        if kind == tar::EntryType::Link {
            // A hard link: to an entry of this layer, or of the layers below.
            let target = e
                .link_name()?
                .and_then(|l| clean(&l))
                .ok_or_else(|| anyhow!("{shown}: a hard link that leaves the image"))?;
            let from = if scratch.join(&target).exists() {
                scratch.join(&target)
            } else {
                root.join(&target)
            };
            let _ = fs::remove_file(&dest);
            fs::hard_link(&from, &dest)
                .with_context(|| format!("{shown}: hard link to /{}", target.display()))?;
            continue;
        }
        let mode = e.header().mode().unwrap_or(0o644);
        e.unpack_in(scratch)
            .with_context(|| format!("cannot unpack {shown}"))?;
        if kind != tar::EntryType::Symlink && mode & 0o6000 != 0 {
            let dir = kind == tar::EntryType::Directory;
            // setgid on a directory only sets the group of new files: kept.
            let cleared = if dir { mode & 0o4000 } else { mode & 0o6000 };
            if cleared != 0 {
                warnings.push(format!(
                    "{shown}: setuid/setgid bit removed (packages are mounted nosuid)"
                ));
                fs::set_permissions(&dest, fs::Permissions::from_mode(mode & 0o7777 & !cleared))?;
            }
        }
    }
    // Whiteouts act on the layers below only: on root, before this layer's entries move in.
    for (dir, name) in whiteouts {
        let target_dir = root.join(&dir);
        match name {
            None => {
                if target_dir.is_dir() && !fs::symlink_metadata(&target_dir)?.is_symlink() {
                    for e in fs::read_dir(&target_dir)? {
                        remove_any(&e?.path())?;
                    }
                }
            }
            Some(n) => {
                let t = target_dir.join(n);
                if fs::symlink_metadata(&t).is_ok() {
                    remove_any(&t)?;
                }
            }
        }
    }
    merge(scratch, root)?;
    let _ = remove_any(scratch);
    Ok(())
}

/// Moves every entry of `from` into `to`: a directory onto a directory merges (taking the new
/// one's owner, mode and times), anything else replaces what was there.
fn merge(from: &Path, to: &Path) -> Result<()> {
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let src_dir = from.join(&rel);
        for e in fs::read_dir(&src_dir)? {
            let e = e?;
            let r = rel.join(e.file_name());
            let (src, dst) = (from.join(&r), to.join(&r));
            let sm = fs::symlink_metadata(&src)?;
            match fs::symlink_metadata(&dst) {
                Ok(dm) if sm.is_dir() && dm.is_dir() => {
                    fs::set_permissions(&dst, sm.permissions())?;
                    std::os::unix::fs::lchown(&dst, Some(sm.uid()), Some(sm.gid()))?;
                    todo.push(r);
                }
                Ok(_) => {
                    remove_any(&dst)?;
                    fs::rename(&src, &dst)?;
                }
                Err(_) => fs::rename(&src, &dst)?,
            }
        }
    }
    Ok(())
}

/// Removes a file, a symlink or a whole directory tree (without following symlinks).
fn remove_any(p: &Path) -> io::Result<()> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(p),
        Ok(_) => fs::remove_file(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\t' => o.push_str("\\t"),
            '\r' => o.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                o.push_str(&format!("\\u{:04X}", c as u32))
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A user or group of the image's `User` ("name", "uid", "name:group", "uid:gid"), looked up
/// in the image's own /etc/passwd or /etc/group.
fn id_of(root: &Path, file: &str, who: &str) -> Result<(u32, Option<u32>)> {
    if let Ok(n) = who.parse::<u32>() {
        return Ok((n, None));
    }
    let text = fs::read_to_string(root.join("etc").join(file)).unwrap_or_default();
    for l in text.lines() {
        let f: Vec<&str> = l.split(':').collect();
        if f.len() >= 3 && f[0] == who {
            let id = f[2]
                .parse()
                .map_err(|_| anyhow!("/etc/{file}: bad id for {who}"))?;
            let gid = f.get(3).and_then(|g| g.parse().ok());
            return Ok((id, gid));
        }
    }
    bail!("user {who:?} is not in the image's /etc/{file}")
}

/// The manifest from the image's configuration (and the options).
fn manifest_text(
    image: &Image,
    root: &Path,
    name: Option<&str>,
    version: Option<&str>,
    warnings: &mut Vec<String>,
) -> Result<String> {
    let cfg = &image.config["config"];
    let labels = &cfg["Labels"];
    let label = |k: &str| {
        labels[k]
            .as_str()
            .map(String::from)
            .filter(|s| !s.is_empty())
    };
    let name = name
        .map(String::from)
        .or_else(|| label("org.opencontainers.image.title"))
        .ok_or_else(|| {
            anyhow!(
                "no package name: give --name, or label the image org.opencontainers.image.title"
            )
        })?;
    berth_core::name::Name::parse(&name)
        .map_err(|e| anyhow!("package name {name:?}: {e} (give --name)"))?;
    let version = version
        .map(String::from)
        .or_else(|| label("org.opencontainers.image.version"))
        .or_else(|| image.tag.clone().filter(|t| t != "latest"))
        .ok_or_else(|| {
            anyhow!("no version: give --version, label the image org.opencontainers.image.version, or tag it with one")
        })?;
    berth_core::name::Version::parse(&version)
        .map_err(|e| anyhow!("version {version:?}: {e} (give --version)"))?;
    let strings = |k: &str| -> Vec<String> {
        cfg[k]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str().map(String::from))
            .collect()
    };
    let mut argv = strings("Entrypoint");
    argv.extend(strings("Cmd"));
    if argv.is_empty() {
        bail!("the image has neither Entrypoint nor Cmd: nothing to run");
    }
    let mut env = BTreeMap::new();
    for kv in strings("Env") {
        match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                env.insert(k.to_string(), v.to_string());
            }
            _ => warnings.push(format!("Env entry {kv:?} is not KEY=VALUE: left out")),
        }
    }
    let workdir = cfg["WorkingDir"]
        .as_str()
        .filter(|w| !w.is_empty())
        .unwrap_or("/");
    let (user, group) = match cfg["User"].as_str().filter(|u| !u.is_empty()) {
        None => (0, 0),
        Some(u) => {
            let (who, grp) = match u.split_once(':') {
                Some((a, b)) => (a, Some(b)),
                None => (u, None),
            };
            let (uid, primary) = id_of(root, "passwd", who)?;
            let gid = match grp {
                Some(g) => id_of(root, "group", g)?.0,
                None => primary.unwrap_or(0),
            };
            (uid, gid)
        }
    };
    if cfg["ExposedPorts"]
        .as_object()
        .is_some_and(|p| !p.is_empty())
    {
        let ports: Vec<&String> = cfg["ExposedPorts"].as_object().unwrap().keys().collect();
        warnings.push(format!(
            "the image exposes {}: the package's network mode is \"none\" until its manifest's [network] says otherwise (docs/network.md)",
            ports.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    let description = label("org.opencontainers.image.description").unwrap_or_default();
    let mut t = String::new();
    t.push_str("# Imported from a container image by berth import.\n[package]\n");
    t.push_str(&format!(
        "name = {}\nversion = {}\n",
        toml_str(&name),
        toml_str(&version)
    ));
    t.push_str(&format!(
        "description = {}\nbase = \"none\"\n\n",
        toml_str(&description)
    ));
    t.push_str("[entrypoint]\nargv = [");
    t.push_str(
        &argv
            .iter()
            .map(|a| toml_str(a))
            .collect::<Vec<_>>()
            .join(", "),
    );
    t.push_str("]\n");
    if !env.is_empty() {
        t.push_str("env = { ");
        t.push_str(
            &env.iter()
                .map(|(k, v)| format!("{} = {}", toml_str(k), toml_str(v)))
                .collect::<Vec<_>>()
                .join(", "),
        );
        t.push_str(" }\n");
    }
    t.push_str(&format!(
        "workdir = {}\nuser = {user}\ngroup = {group}\n\n[network]\nmode = \"none\"\n",
        toml_str(workdir)
    ));
    Ok(t)
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
        assert!(Source::parse("docker://busybox")
            .unwrap_err()
            .contains("oci:LAYOUT"));
        assert!(Source::parse("oci:").is_err());
    }

    #[test]
    fn paths_that_leave_the_image_are_refused() {
        assert_eq!(clean(Path::new("./a/b")), Some(PathBuf::from("a/b")));
        assert_eq!(clean(Path::new("/etc/x")), Some(PathBuf::from("etc/x")));
        assert_eq!(clean(Path::new("a/../../b")), None);
    }

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_str("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
    }
}
