//! `berth import oci:LAYOUT[:TAG]`, `berth import docker-archive:FILE.tar` and `berth import
//! registry://HOST/REPO:TAG` (pulled into a private layout first, `registry.rs`): a container
//! image the vendor already builds becomes a berth package (docs/package-format.md,
//! "Importing a container image").
//!
//! The image is untrusted input (docs/security.md, "Untrusted trees"): `berth_image` finds it
//! and checks every blob against its digest, then applies its layers in order into a private
//! staging tree, never following a link the image made, its sizes and entry counts capped.
//! What a package must not hold is left out with a warning, as `pack` warns about it: device
//! nodes and fifos are not written, setuid and setgid bits and extended attributes (file
//! capabilities among them) are dropped. The image's configuration becomes the manifest
//! (entrypoint + cmd as argv, env, working directory, user), and the tree is packed by `pack`
//! itself, with all its checks.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use berth_image::layer::Unpacker;
use berth_image::source::{self, Image, Source};
pub use berth_image::Limits;
use berth_sys::tree::Dir;
use serde::Serialize;

use super::pack::{self, PackReport};

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

pub fn import(
    src_text: &str,
    out: &Path,
    name: Option<&str>,
    version: Option<&str>,
    limits: Limits,
    registry: &super::registry::Options,
) -> Result<ImportReport> {
    // Staging next to the output (same file system as the image will be written to, and
    // cleaned however this ends).
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let scratch = Scratch::new(&parent)?;
    let src = match super::registry::Reference::parse(src_text) {
        // Pulled into a layout of the staging directory, then read as any layout is.
        Some(r) => {
            let r = r?;
            let layout = scratch.0.join("pulled");
            let mut opts = registry.clone();
            opts.max_bytes.get_or_insert(limits.max_bytes);
            super::registry::pull(&r, &opts, &layout)
                .with_context(|| format!("{src_text}: pulling the image"))?;
            Source::Oci {
                layout,
                tag: Some(r.tag()),
            }
        }
        None => Source::parse(src_text).map_err(|m| anyhow!(m))?,
    };
    let image = source::open(&src)?;
    let work = Dir::open(&scratch.0).with_context(|| format!("{}", scratch.0.display()))?;
    work.mkdir(OsStr::new("rootfs"), 0o755)
        .with_context(|| format!("cannot create {}/rootfs", scratch.0.display()))?;
    let root = work.subdir(OsStr::new("rootfs"))?;
    let mut unpacker = Unpacker::new(&root, &work, limits);
    for (i, layer) in image.layers.iter().enumerate() {
        layer
            .layer_stream()
            .and_then(|s| unpacker.apply(s))
            .with_context(|| format!("{src_text}: layer {} of {}", i + 1, image.layers.len()))?;
    }
    let mut warnings = std::mem::take(&mut unpacker.warnings);
    let manifest = manifest_text(&image, &root, name, version, &mut warnings)
        .with_context(|| format!("{src_text}: the image's configuration"))?;
    let dot = OsStr::new(".berth");
    if root.stat(dot)?.is_some() {
        warnings.push("the image has its own /.berth: replaced by the imported manifest".into());
        root.remove_all(dot)?;
    }
    root.mkdir(dot, 0o755)?;
    let mut f = root
        .subdir(dot)?
        .create_file(OsStr::new("manifest.toml"), 0o644)?;
    f.write_all(manifest.as_bytes())?;
    drop(f);
    let report = pack::pack(&scratch.0.join("rootfs"), out)?;
    Ok(ImportReport {
        image: src_text.to_string(),
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
            // Private from its first moment (the umask can only take bits away).
            match std::fs::DirBuilder::new().mode(0o700).create(&p) {
                Ok(()) => return Ok(Scratch(p)),
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
        let _ = berth_sys::tree::remove_path(&self.0);
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
/// in the image's own /etc/passwd or /etc/group (not through a link).
fn id_of(root: &Dir, file: &str, who: &str) -> Result<(u32, Option<u32>)> {
    if let Ok(n) = who.parse::<u32>() {
        return Ok((n, None));
    }
    let mut text = String::new();
    if let Ok(f) = root.open_file(&Path::new("etc").join(file)) {
        // A few hundred lines at most: more is not a passwd file.
        f.take(1 << 20).read_to_string(&mut text).ok();
    }
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
    root: &Dir,
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
    fn toml_strings_are_escaped() {
        assert_eq!(toml_str("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
    }
}
