//! `berth pack DIR -o FILE`: turns a vendor's package tree into a squashfs image.
//!
//! The tree must hold `.berth/manifest.toml`. Before packing we check what would break or be
//! silently ignored on the device (setuid bits, device nodes, symlinks leaving the package) and
//! add the empty directories the device mounts over (`/proc`, `/data`, …), because the image is
//! read-only there and nothing can create them later.
//!
//! The tree may come from anywhere (a build of third-party sources): it is read beneath its
//! root without following a link (`berth_sys::tree`, docs/security.md, "Untrusted trees").
//! Links inside it are the package's own business: resolved as the container will see them
//! (the entrypoint) or named in warnings, never followed out of the tree.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use berth_core::index::ImageHasher;
use berth_core::manifest::{Base, Manifest, MANIFEST_PATH};
use berth_core::name::{Name, Version};
use berth_sys::tree::{Dir, Kind};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct PackReport {
    pub name: Name,
    pub version: Version,
    pub file: PathBuf,
    pub size: u64,
    pub sha256: String,
    /// Human-readable findings that do not stop packing, without a "warning: " prefix.
    pub warnings: Vec<String>,
}

/// Mount points every container needs (see DESIGN.md, file system).
const SKELETON: &[&str] = &["proc", "sys", "dev", "tmp", "run", "data"];
/// Where the device makes hot-binding mount points (docs/hot-binding.md): added when the
/// tree has no `opt`, left as the vendor made it otherwise (the device then uses only the
/// image's own directories there).
const BIND_ANCHOR: &str = "opt";
/// Extra mount points for `base = "host"`: the host's library directories are bound there.
const HOST_SKELETON: &[&str] = &["lib", "lib64", "usr", "usr/lib"];

/// How many symlinks to follow when resolving the entrypoint, as the kernel's MAXSYMLINKS.
const MAX_SYMLINKS: usize = 40;

/// How `pack` treats what it warns about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strictness {
    /// Warn and pack.
    Warn,
    /// Refuse to pack (`berth pack --strict`): every warning is an error.
    Strict,
}

pub fn pack(dir: &Path, out: &Path) -> anyhow::Result<PackReport> {
    pack_with(dir, out, Strictness::Warn)
}

pub fn pack_with(dir: &Path, out: &Path, strict: Strictness) -> anyhow::Result<PackReport> {
    let tree = Dir::open_given(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    let manifest = read_manifest(&tree, dir)?;
    let mut warnings = Vec::new();
    scan_tree(&tree, dir, &mut warnings)?;
    if manifest.package.base == Base::Host {
        hidden_by_host(&tree, dir, &mut warnings)?;
    }
    if strict == Strictness::Strict && !warnings.is_empty() {
        bail!(
            "{} not packed (--strict): {}",
            dir.display(),
            warnings.join("; ")
        );
    }
    check_entrypoint(&tree, dir, &manifest.entrypoint.argv[0])?;
    let pseudo = skeleton(&tree, dir, manifest.package.base)?;
    check_out_not_inside(dir, out)?;

    let mut tmp = OsString::from(out.as_os_str());
    tmp.push(".tmp");
    let tmp = TempFile(PathBuf::from(tmp));
    // Vendors normally build the tree as root, with the owners the package needs (e.g. a
    // service user's files). A tree owned by an ordinary user was built unprivileged: its
    // owners mean nothing on the device, so everything becomes root's as in any rootfs.
    let all_root = fs::metadata(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .uid()
        != 0;
    run_mksquashfs(dir, &tmp.0, &pseudo, all_root)?;

    File::open(&tmp.0)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("cannot sync {}", tmp.0.display()))?;
    fs::rename(&tmp.0, out)
        .with_context(|| format!("cannot rename {} to {}", tmp.0.display(), out.display()))?;
    tmp.disarm();
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    berth_sys::fsutil::fsync_dir(parent)
        .with_context(|| format!("cannot sync directory {}", parent.display()))?;

    let (sha256, size) = hash_file(out)?;
    Ok(PackReport {
        name: manifest.package.name,
        version: manifest.package.version,
        file: out.to_path_buf(),
        size,
        sha256,
        warnings,
    })
}

/// sha256 (lowercase hex) and size of a file, read in chunks: images can be large.
pub fn hash_file(path: &Path) -> anyhow::Result<(String, u64)> {
    let mut f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut h = ImageHasher::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        h.update(&buf[..n]);
        size += n as u64;
    }
    Ok((h.finish_hex(), size))
}

/// Removes the temporary image unless packing got to the rename.
struct TempFile(PathBuf);

impl TempFile {
    fn disarm(mut self) {
        self.0 = PathBuf::new();
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.0);
        }
    }
}

fn read_manifest(tree: &Dir, dir: &Path) -> anyhow::Result<Manifest> {
    let path = dir.join(MANIFEST_PATH);
    // The device reads the manifest from inside the image: a link would point elsewhere.
    let f = match tree.open_file(Path::new(MANIFEST_PATH)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => bail!(
            "{} not found: every package needs a manifest at {MANIFEST_PATH}",
            path.display()
        ),
        Err(e) if berth_sys::tree::is_refusal(&e) => {
            bail!("{} must be a regular file: {e}", path.display())
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let mut text = String::new();
    f.take(1 << 20)
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read {}", path.display()))?;
    Manifest::parse(&text).with_context(|| format!("invalid {}", path.display()))
}

/// Walks the tree without following links and collects warnings, in path order.
fn scan_tree(tree: &Dir, dir: &Path, warnings: &mut Vec<String>) -> anyhow::Result<()> {
    let mut found: Vec<(PathBuf, String)> = Vec::new();
    berth_sys::tree::for_each(tree, &mut |v| {
        let rel = v.path();
        let shown = rel.display();
        let (kind, mode) = (v.stat.kind, v.stat.mode);
        let mut say = |w: String| found.push((rel.clone(), w));
        match kind {
            Kind::Symlink => {
                let target = v.dir.read_link(v.name)?;
                if target.is_absolute() {
                    say(format!(
                        "{shown} -> {} is an absolute symlink: it resolves against the \
                         container's root, not the package",
                        target.display()
                    ));
                } else if escapes(&rel, &target) {
                    say(format!(
                        "{shown} -> {} points outside the package",
                        target.display()
                    ));
                }
            }
            Kind::Special => say(special(&shown.to_string(), v.stat.fmt)),
            Kind::Dir | Kind::File => {}
        }
        if kind != Kind::Symlink {
            if mode & 0o4000 != 0 {
                say(format!(
                    "{shown} is setuid: ignored on the device (packages are mounted nosuid)"
                ));
            }
            // setgid on a directory only sets the group of new files: harmless.
            if mode & 0o2000 != 0 && kind != Kind::Dir {
                say(format!(
                    "{shown} is setgid: ignored on the device (packages are mounted nosuid)"
                ));
            }
        }
        Ok(())
    })
    .with_context(|| format!("cannot read the tree {}", dir.display()))?;
    found.sort_by(|a, b| a.0.cmp(&b.0));
    warnings.extend(found.into_iter().map(|(_, w)| w));
    Ok(())
}

/// How many hidden entries a warning names before it counts the rest.
const HIDDEN_NAMED: usize = 5;

/// With `base = "host"` the device binds the host's library directories over the image's
/// (`berth_core::plan::HOST_BASE_DIRS`): whatever the package ships below them is hidden at
/// run time (a Debian-built program's modules in `/usr/lib/PROGRAM/`, say). One warning per
/// directory, naming the first entries and counting the rest.
fn hidden_by_host(tree: &Dir, dir: &Path, warnings: &mut Vec<String>) -> anyhow::Result<()> {
    for host in berth_core::plan::HOST_BASE_DIRS {
        let rel = Path::new(&host[1..]);
        let sub = match tree.stat_beneath(rel) {
            Ok(Some(st)) if st.kind == Kind::Dir => tree.open_dir(rel)?,
            // Absent, or not a directory (the skeleton check says so): nothing bound there.
            Ok(_) => continue,
            // A link on the way (`usr` for `usr/lib`): the skeleton check refuses it.
            Err(e) if berth_sys::tree::is_refusal(&e) => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", dir.display())),
        };
        let mut files = Vec::new();
        berth_sys::tree::for_each(&sub, &mut |v| {
            if v.stat.kind != Kind::Dir {
                files.push(v.path());
            }
            Ok(())
        })
        .with_context(|| format!("cannot read {}", dir.join(rel).display()))?;
        if files.is_empty() {
            continue;
        }
        // The first ones in path order: the same warning for the same tree.
        files.sort();
        let count = files.len();
        let files: Vec<String> = files
            .iter()
            .take(HIDDEN_NAMED)
            .map(|p| format!("{host}/{}", p.display()))
            .collect();
        let more = match count - files.len() {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        warnings.push(format!(
            "{}{more} will be hidden on the device: base = \"host\" binds the host's {host} \
             over the package's; put the package's own files elsewhere (/opt/NAME/lib, with \
             the program's module path or LD_LIBRARY_PATH: docs/package-format.md, \
             \"Packages on the host's libraries\")",
            files.join(", ")
        ));
    }
    Ok(())
}

/// The warning for a device node, fifo or socket (`fmt`: its `S_IFMT` bits).
fn special(shown: &str, fmt: u32) -> String {
    match fmt {
        libc::S_IFIFO => format!(
            "{shown} is a fifo: the package is shared read-only; create it at run time under \
             /run instead"
        ),
        libc::S_IFSOCK => {
            format!("{shown} is a socket: useless in an image; create it at run time under /run")
        }
        _ => {
            format!("{shown} is a device node: unusable on the device (packages are mounted nodev)")
        }
    }
}

/// Whether a relative symlink at `link` (relative to the tree root) with `target` climbs
/// above the root, judged lexically as the kernel would resolve `..` inside the package.
fn escapes(link: &Path, target: &Path) -> bool {
    let mut depth = link.components().count().saturating_sub(1) as isize;
    for c in target.components() {
        match c {
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            Component::Normal(_) => depth += 1,
            _ => {}
        }
    }
    false
}

/// Resolves an absolute in-package path inside the tree, following its links as the
/// container would see them (absolute targets restart at the package root), each component
/// looked at beneath the tree without following anything. Its `stat`, or None if a
/// component is missing or the links loop.
fn resolve_in_tree(tree: &Dir, path: &str) -> Option<berth_sys::tree::Stat> {
    let mut todo: Vec<OsString> = Vec::new();
    push_components(&mut todo, Path::new(path));
    let mut cur = PathBuf::new();
    let mut links = 0;
    let mut last = tree.stat_self().ok()?;
    while let Some(c) = todo.pop() {
        if c == ".." {
            cur.pop();
            continue;
        }
        cur.push(&c);
        last = tree.stat_beneath(&cur).ok()??;
        if last.kind == Kind::Symlink {
            links += 1;
            if links > MAX_SYMLINKS {
                return None;
            }
            let (parent, name) = berth_sys::tree::split(&cur).ok()?;
            let target = tree.open_dir(&parent).ok()?.read_link(&name).ok()?;
            cur.pop();
            if target.is_absolute() {
                cur = PathBuf::new();
            }
            push_components(&mut todo, &target);
        }
    }
    Some(last)
}

/// Pushes `p`'s components onto a stack so that the first component is popped first;
/// `.` and the root are dropped, `..` is kept.
fn push_components(stack: &mut Vec<OsString>, p: &Path) {
    let comps: Vec<OsString> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect();
    stack.extend(comps.into_iter().rev());
}

/// The entrypoint must be in the package whatever `base` says: host binds only bring
/// libraries, and a missing program is the most common packaging mistake.
fn check_entrypoint(tree: &Dir, dir: &Path, argv0: &str) -> anyhow::Result<()> {
    let Some(st) = resolve_in_tree(tree, argv0) else {
        bail!("entrypoint {argv0} not found in {}", dir.display());
    };
    if st.kind != Kind::File {
        bail!(
            "entrypoint {argv0} in {} is not a regular file",
            dir.display()
        );
    }
    if st.mode & 0o111 == 0 {
        bail!(
            "entrypoint {argv0} in {} is not executable (chmod +x it)",
            dir.display()
        );
    }
    Ok(())
}

/// mksquashfs pseudo definitions for the mount points missing from the tree.
fn skeleton(tree: &Dir, dir: &Path, base: Base) -> anyhow::Result<Vec<String>> {
    let host: &[&str] = match base {
        Base::Host => HOST_SKELETON,
        Base::None => &[],
    };
    let mut pseudo = Vec::new();
    // Parents come before children in the lists, so "usr" is defined before "usr/lib".
    for p in SKELETON.iter().chain(host) {
        let must = |kind: &str| {
            anyhow::anyhow!(
                "{p} in {} is {kind}: the device mounts /{p} there, so it must be a \
                 directory or absent",
                dir.display()
            )
        };
        match tree.stat_beneath(Path::new(p)) {
            Ok(Some(st)) if st.kind == Kind::Dir => {}
            Ok(Some(st)) if st.kind == Kind::Symlink => return Err(must("a symlink")),
            Ok(Some(_)) => return Err(must("not a directory")),
            Ok(None) => pseudo.push(format!("{p} d 755 0 0")),
            // A link on the way ("usr" for "usr/lib"): the mount would go through it.
            Err(e) if berth_sys::tree::is_refusal(&e) => return Err(must(&e.to_string())),
            Err(e) => {
                return Err(e).with_context(|| format!("cannot read {}", dir.join(p).display()))
            }
        }
    }
    if tree.stat_beneath(Path::new(BIND_ANCHOR))?.is_none() {
        pseudo.push(format!("{BIND_ANCHOR} d 755 0 0"));
    }
    Ok(pseudo)
}

/// mksquashfs would pack the output into itself if it were written inside the tree.
fn check_out_not_inside(dir: &Path, out: &Path) -> anyhow::Result<()> {
    let dir_abs =
        fs::canonicalize(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let parent_abs = fs::canonicalize(parent)
        .with_context(|| format!("output directory {} does not exist", parent.display()))?;
    if parent_abs.starts_with(&dir_abs) {
        bail!(
            "output {} is inside the package directory {}: write it elsewhere",
            out.display(),
            dir.display()
        );
    }
    Ok(())
}

fn run_mksquashfs(dir: &Path, tmp: &Path, pseudo: &[String], all_root: bool) -> anyhow::Result<()> {
    // xz gives the smallest images (flash is precious); gzip is the fallback every
    // mksquashfs and every kernel has.
    let mut last_err = String::new();
    for comp in ["xz", "gzip"] {
        let mut cmd = Command::new("mksquashfs");
        cmd.arg(dir).arg(tmp);
        cmd.args([
            "-noappend",
            "-comp",
            comp,
            "-no-xattrs",
            "-quiet",
            "-no-progress",
        ]);
        // Fixed timestamps: the same tree always gives the same bytes, hence the same sha256.
        cmd.args(["-mkfs-time", "0", "-all-time", "0"]);
        if all_root {
            cmd.arg("-all-root");
        }
        for p in pseudo {
            cmd.arg("-p").arg(p);
        }
        let output = cmd.output().map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                anyhow::anyhow!("cannot run mksquashfs: not found (install squashfs-tools)")
            } else {
                anyhow::anyhow!("cannot run mksquashfs: {e}")
            }
        })?;
        if output.status.success() {
            return Ok(());
        }
        last_err = String::from_utf8_lossy(&output.stderr).trim().to_string();
        if !last_err.contains("not supported") {
            break;
        }
    }
    bail!("mksquashfs failed on {}: {last_err}", dir.display())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A fresh, empty directory under the system temp dir, removed on drop.
    pub(crate) struct TempDir(pub PathBuf);

    impl TempDir {
        pub(crate) fn new(tag: &str) -> TempDir {
            static SEQ: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "berth-test-{tag}-{}-{}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// Writes a minimal package tree named `name` with an executable entrypoint /bin/<name>.
    pub(crate) fn package_tree(root: &Path, name: &str, extra: &str) {
        fs::create_dir_all(root.join(".berth")).unwrap();
        fs::create_dir_all(root.join("bin")).unwrap();
        fs::write(
            root.join(MANIFEST_PATH),
            format!(
                "[package]\nname = \"{name}\"\nversion = \"1.0\"\n{extra}\n\
                 [entrypoint]\nargv = [\"/bin/{name}\"]\n"
            ),
        )
        .unwrap();
        let bin = root.join("bin").join(name);
        fs::write(&bin, "#!/bin/sh\necho hello\n").unwrap();
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn list(image: &Path) -> String {
        let out = Command::new("unsquashfs")
            .arg("-lls")
            .arg(image)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn packs_reproducibly_with_skeleton() {
        let t = TempDir::new("pack");
        let src = t.0.join("src");
        package_tree(&src, "hello", "");
        fs::create_dir(src.join("tmp")).unwrap();
        let a = t.0.join("a.sqfs");
        let r = pack(&src, &a).unwrap();
        assert_eq!(r.name.as_str(), "hello");
        assert_eq!(r.version.to_string(), "1.0");
        assert_eq!(r.size, fs::metadata(&a).unwrap().len());
        assert_eq!(r.sha256.len(), 64);
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        assert!(!t.0.join("a.sqfs.tmp").exists());

        let listing = list(&a);
        for d in SKELETON.iter().chain([&BIND_ANCHOR]) {
            assert!(
                listing.contains(&format!("squashfs-root/{d}\n")),
                "{d}: {listing}"
            );
        }
        assert!(!listing.contains("squashfs-root/usr"), "{listing}");
        assert!(listing.contains("squashfs-root/.berth/manifest.toml"));

        // Same tree, later mtimes: same bytes.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        fs::write(src.join("bin/hello"), "#!/bin/sh\necho hello\n").unwrap();
        let b = t.0.join("b.sqfs");
        let r2 = pack(&src, &b).unwrap();
        assert_eq!(r.sha256, r2.sha256);
        assert_eq!(fs::read(&a).unwrap(), fs::read(&b).unwrap());

        // Content change: different hash.
        fs::write(src.join("bin/other"), "x").unwrap();
        let r3 = pack(&src, &b).unwrap();
        assert_ne!(r.sha256, r3.sha256);
    }

    #[test]
    fn host_base_gets_library_mount_points() {
        let t = TempDir::new("pack-host");
        let src = t.0.join("src");
        package_tree(&src, "hosty", "base = \"host\"");
        fs::create_dir(src.join("usr")).unwrap();
        let out = t.0.join("h.sqfs");
        pack(&src, &out).unwrap();
        let listing = list(&out);
        for d in ["lib", "lib64", "usr", "usr/lib", "data"] {
            assert!(
                listing.contains(&format!("squashfs-root/{d}\n")),
                "{d}: {listing}"
            );
        }

        // A merged-usr style `lib -> usr/lib` cannot be mounted over.
        symlink("usr/lib", src.join("lib")).unwrap();
        let e = pack(&src, &out).unwrap_err().to_string();
        assert!(e.contains("lib in") && e.contains("is a symlink"), "{e}");
    }

    #[test]
    fn files_the_hosts_libraries_will_hide_are_named_and_strict_refuses() {
        let t = TempDir::new("pack-hidden");
        let src = t.0.join("src");
        package_tree(&src, "lighttpd", "base = \"host\"");
        fs::create_dir_all(src.join("usr/lib/lighttpd")).unwrap();
        for i in 0..8 {
            fs::write(src.join(format!("usr/lib/lighttpd/mod_{i}.so")), "x").unwrap();
        }
        fs::create_dir_all(src.join("lib")).unwrap();
        fs::write(src.join("lib/libown.so.1"), "x").unwrap();
        // an empty directory below is no loss
        fs::create_dir_all(src.join("lib64/empty")).unwrap();
        let out = t.0.join("l.sqfs");
        let r = pack(&src, &out).unwrap();
        let all = r.warnings.join("\n");
        assert!(
            all.contains("/usr/lib/lighttpd/mod_0.so, /usr/lib/lighttpd/mod_1.so, /usr/lib/lighttpd/mod_2.so, /usr/lib/lighttpd/mod_3.so, /usr/lib/lighttpd/mod_4.so and 3 more will be hidden on the device: base = \"host\" binds the host's /usr/lib over the package's"),
            "{all}"
        );
        assert!(
            all.contains("/lib/libown.so.1 will be hidden on the device"),
            "{all}"
        );
        assert!(!all.contains("lib64"), "{all}");
        assert_eq!(r.warnings.len(), 2, "{all}");
        // --strict: refused, the files named, nothing written
        fs::remove_file(&out).unwrap();
        let e = format!(
            "{:#}",
            pack_with(&src, &out, Strictness::Strict).unwrap_err()
        );
        assert!(
            e.contains("not packed (--strict)") && e.contains("mod_0.so"),
            "{e}"
        );
        assert!(!out.exists());
        // without base = "host" nothing is hidden
        package_tree(&src, "lighttpd", "");
        assert!(pack(&src, &out).unwrap().warnings.is_empty());
    }

    #[test]
    fn skeleton_path_that_is_a_file_is_an_error() {
        let t = TempDir::new("pack-file");
        let src = t.0.join("src");
        package_tree(&src, "p", "");
        fs::write(src.join("data"), "x").unwrap();
        let e = pack(&src, &t.0.join("p.sqfs")).unwrap_err().to_string();
        assert!(
            e.contains("data in") && e.contains("not a directory"),
            "{e}"
        );
        assert!(!t.0.join("p.sqfs.tmp").exists());
        // The bind anchor is only offered: an opt of the vendor's own stays as it is.
        fs::remove_file(src.join("data")).unwrap();
        symlink("usr", src.join("opt")).unwrap();
        let out = t.0.join("p.sqfs");
        pack(&src, &out).unwrap();
        assert!(list(&out).contains("squashfs-root/opt -> usr\n"));
    }

    #[test]
    fn warnings_for_special_files() {
        let t = TempDir::new("pack-warn");
        let src = t.0.join("src");
        package_tree(&src, "w", "");
        fs::create_dir_all(src.join("usr/bin")).unwrap();
        let su = src.join("usr/bin/su");
        fs::write(&su, "x").unwrap();
        fs::set_permissions(&su, fs::Permissions::from_mode(0o4755)).unwrap();
        let sg = src.join("usr/bin/sg");
        fs::write(&sg, "x").unwrap();
        fs::set_permissions(&sg, fs::Permissions::from_mode(0o2755)).unwrap();
        symlink("/bin/w", src.join("usr/bin/abs")).unwrap();
        symlink("../../../etc/passwd", src.join("usr/bin/esc")).unwrap();
        symlink("../../bin/w", src.join("usr/bin/ok")).unwrap();
        // Commands rather than libc calls: unsafe code lives in berth-sys only.
        let run = |args: &[&str]| {
            let ok = Command::new(args[0])
                .args(&args[1..])
                .status()
                .unwrap()
                .success();
            assert!(ok, "{args:?}");
        };
        run(&["mkfifo", src.join("fifo").to_str().unwrap()]);
        let _sock = std::os::unix::net::UnixListener::bind(src.join("sock")).unwrap();
        let is_root = fs::metadata("/proc/self")
            .map(|m| m.uid() == 0)
            .unwrap_or(false);
        if is_root {
            fs::create_dir(src.join("dev")).unwrap();
            run(&[
                "mknod",
                src.join("dev/sda").to_str().unwrap(),
                "b",
                "8",
                "0",
            ]);
        } else {
            eprintln!("warnings_for_special_files: not root, device node case skipped");
        }

        let r = pack(&src, &t.0.join("w.sqfs")).unwrap();
        let all = r.warnings.join("\n");
        assert!(
            all.contains(
                "usr/bin/su is setuid: ignored on the device (packages are mounted nosuid)"
            ),
            "{all}"
        );
        assert!(all.contains("usr/bin/sg is setgid"), "{all}");
        assert!(
            all.contains("usr/bin/abs -> /bin/w is an absolute symlink"),
            "{all}"
        );
        assert!(
            all.contains("usr/bin/esc -> ../../../etc/passwd points outside the package"),
            "{all}"
        );
        assert!(!all.contains("usr/bin/ok"), "{all}");
        assert!(all.contains("fifo is a fifo"), "{all}");
        assert!(all.contains("sock is a socket"), "{all}");
        if is_root {
            assert!(
                all.contains(
                    "dev/sda is a device node: unusable on the device (packages are mounted nodev)"
                ),
                "{all}"
            );
        }
    }

    #[test]
    fn entrypoint_checks() {
        let t = TempDir::new("pack-entry");
        let src = t.0.join("src");
        package_tree(&src, "e", "");
        let out = t.0.join("e.sqfs");

        // In-tree symlink chain: /bin/e -> /usr/bin/real -> ../lib/e/run
        fs::remove_file(src.join("bin/e")).unwrap();
        fs::create_dir_all(src.join("usr/bin")).unwrap();
        fs::create_dir_all(src.join("usr/lib/e")).unwrap();
        let real = src.join("usr/lib/e/run");
        fs::write(&real, "x").unwrap();
        fs::set_permissions(&real, fs::Permissions::from_mode(0o755)).unwrap();
        symlink("/usr/bin/real", src.join("bin/e")).unwrap();
        symlink("../lib/e/run", src.join("usr/bin/real")).unwrap();
        pack(&src, &out).unwrap();

        fs::set_permissions(&real, fs::Permissions::from_mode(0o644)).unwrap();
        let e = pack(&src, &out).unwrap_err().to_string();
        assert!(e.contains("not executable"), "{e}");

        fs::remove_file(&real).unwrap();
        let e = pack(&src, &out).unwrap_err().to_string();
        assert!(e.contains("entrypoint /bin/e not found in"), "{e}");

        // A loop is "not found", not a hang.
        fs::remove_file(src.join("usr/bin/real")).unwrap();
        symlink("/bin/e", src.join("usr/bin/real")).unwrap();
        let e = pack(&src, &out).unwrap_err().to_string();
        assert!(e.contains("not found"), "{e}");

        // A symlink pointing to the host's file system is not followed outside the tree.
        fs::remove_file(src.join("bin/e")).unwrap();
        symlink("../../../../../../bin/sh", src.join("bin/e")).unwrap();
        let e = pack(&src, &out).unwrap_err().to_string();
        assert!(e.contains("not found"), "{e}");
    }

    #[test]
    fn manifest_errors_name_the_file() {
        let t = TempDir::new("pack-man");
        let src = t.0.join("src");
        fs::create_dir_all(&src).unwrap();
        let e = format!("{:#}", pack(&src, &t.0.join("x.sqfs")).unwrap_err());
        assert!(e.contains(".berth/manifest.toml not found"), "{e}");

        package_tree(&src, "m", "");
        fs::write(src.join(MANIFEST_PATH), "[package]\nname = \"M\"\n").unwrap();
        let e = format!("{:#}", pack(&src, &t.0.join("x.sqfs")).unwrap_err());
        assert!(
            e.contains("invalid ") && e.contains("manifest.toml: manifest line 2: package.name"),
            "{e}"
        );
    }

    #[test]
    fn output_inside_tree_is_refused() {
        let t = TempDir::new("pack-inside");
        let src = t.0.join("src");
        package_tree(&src, "i", "");
        let e = pack(&src, &src.join("i.sqfs")).unwrap_err().to_string();
        assert!(e.contains("inside the package directory"), "{e}");
    }

    /// A tree whose links lead out of it: nothing of what they point at is read as the
    /// package's, and the canary beside it is untouched.
    #[test]
    fn links_out_of_the_tree_are_never_followed() {
        let t = TempDir::new("pack-links");
        let canary = t.0.join("canary");
        fs::create_dir_all(canary.join(".berth")).unwrap();
        fs::create_dir_all(canary.join("lib")).unwrap();
        fs::write(
            canary.join(".berth/manifest.toml"),
            "[package]\nname = \"evil\"\nversion = \"1.0\"\n[entrypoint]\nargv = [\"/bin/sh\"]\n",
        )
        .unwrap();
        fs::write(canary.join("run"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(canary.join("run"), fs::Permissions::from_mode(0o755)).unwrap();
        let before = list_tree(&canary);
        let src = t.0.join("src");
        let out = t.0.join("o.sqfs");

        // the manifest directory, or the manifest, a link out
        fs::create_dir_all(&src).unwrap();
        symlink(canary.join(".berth"), src.join(".berth")).unwrap();
        let e = format!("{:#}", pack(&src, &out).unwrap_err());
        assert!(
            e.contains("must be a regular file") && e.contains("/.berth is a symbolic link"),
            "{e}"
        );
        fs::remove_file(src.join(".berth")).unwrap();
        fs::create_dir(src.join(".berth")).unwrap();
        symlink(canary.join(".berth/manifest.toml"), src.join(MANIFEST_PATH)).unwrap();
        let e = format!("{:#}", pack(&src, &out).unwrap_err());
        assert!(e.contains("must be a regular file"), "{e}");
        let _ = fs::remove_dir_all(&src);

        // usr a link out, where base = "host" mounts /usr/lib
        package_tree(&src, "hosty", "base = \"host\"");
        symlink(&canary, src.join("usr")).unwrap();
        let e = format!("{:#}", pack(&src, &out).unwrap_err());
        assert!(e.contains("usr in") && e.contains("is a symlink"), "{e}");
        fs::remove_file(src.join("usr")).unwrap();
        fs::create_dir(src.join("usr")).unwrap();
        symlink(canary.join("lib"), src.join("usr/lib")).unwrap();
        let e = format!("{:#}", pack(&src, &out).unwrap_err());
        assert!(
            e.contains("usr/lib in") && e.contains("is a symlink"),
            "{e}"
        );
        let _ = fs::remove_dir_all(&src);

        // the entrypoint through a directory link out: resolved in the tree, not found
        package_tree(&src, "e", "");
        fs::remove_file(src.join("bin/e")).unwrap();
        symlink(&canary, src.join("outside")).unwrap();
        symlink("../outside/run", src.join("bin/e")).unwrap();
        let e = format!("{:#}", pack(&src, &out).unwrap_err());
        assert!(e.contains("entrypoint /bin/e not found"), "{e}");
        assert!(!out.exists());
        assert_eq!(list_tree(&canary), before);
    }

    fn list_tree(p: &Path) -> Vec<String> {
        let mut v: Vec<String> = Command::new("find")
            .arg(p)
            .args(["-printf", "%p %m %s %l\n"])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .map(String::from)
                    .collect()
            })
            .unwrap();
        v.sort();
        v
    }

    #[test]
    fn escape_logic() {
        assert!(!escapes(Path::new("a/b/l"), Path::new("../x")));
        assert!(!escapes(Path::new("a/b/l"), Path::new("../../x")));
        assert!(escapes(Path::new("a/b/l"), Path::new("../../../x")));
        assert!(escapes(Path::new("l"), Path::new("..")));
        assert!(!escapes(Path::new("l"), Path::new("a/../b")));
        assert!(escapes(Path::new("l"), Path::new("a/../../b")));
    }
}
