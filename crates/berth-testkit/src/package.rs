//! Test packages: what goes into one ([`Pkg`]), its manifest, and the package tree that
//! `berth pack` turns into a squashfs image.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Errors of building a package tree. The I/O error is part of the message, never a source.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("{op} {path}: {error}")]
    Io {
        op: &'static str,
        path: PathBuf,
        error: io::Error,
    },
    #[error("busybox is missing: install busybox-static")]
    NoBusybox,
    #[error("{0} is dynamically linked: install busybox-static")]
    DynamicBusybox(PathBuf),
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> PackageError {
    let path = path.to_path_buf();
    move |error| PackageError::Io { op, path, error }
}

/// The first `tool` on PATH.
pub fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file())
}

/// A static busybox to build packages from (a dynamic one would not run in a package without
/// the host's libraries).
pub fn busybox() -> Result<PathBuf, PackageError> {
    let p = which("busybox").ok_or(PackageError::NoBusybox)?;
    if let Ok(o) = Command::new("file").arg(&p).output() {
        if String::from_utf8_lossy(&o.stdout).contains("dynamically") {
            return Err(PackageError::DynamicBusybox(p));
        }
    }
    Ok(p)
}

/// The busybox applets a test package links in /bin.
pub const APPLETS: &[&str] = &["sh", "cat", "echo", "sleep", "ls", "id"];

/// What goes into a package.
pub struct Pkg {
    pub name: String,
    pub version: String,
    pub description: String,
    /// More keys of the [package] table (`base = "host"`, `depends = [...]`).
    pub package_keys: String,
    /// More tables of the manifest (`[network]`, `[entrypoint]` keys go in `entrypoint_keys`).
    pub tables: String,
    /// More keys of [entrypoint] (`user = 1000`, `env = {...}`).
    pub entrypoint_keys: String,
    pub argv: Vec<String>,
    /// Extra files: path relative to the package root → contents.
    pub files: Vec<(String, Vec<u8>)>,
    /// Modes of files (path → mode) where the default does not fit: 0755 for `*.sh` and
    /// `bin/*`, what the umask leaves for the others.
    pub modes: Vec<(String, u32)>,
    /// Puts a static busybox at /bin/busybox.
    pub with_busybox: bool,
    /// Links to busybox in /bin (with `with_busybox`).
    pub applets: &'static [&'static str],
}

impl Pkg {
    pub fn new(name: &str, version: &str, argv: &[&str]) -> Pkg {
        Pkg {
            name: name.into(),
            version: version.into(),
            description: format!("test package {name}"),
            package_keys: String::new(),
            tables: String::new(),
            entrypoint_keys: String::new(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            files: Vec::new(),
            modes: Vec::new(),
            with_busybox: true,
            applets: APPLETS,
        }
    }
    /// A package whose payload is a shell script run by busybox sh.
    pub fn script(name: &str, version: &str, script: &str) -> Pkg {
        Pkg::new(name, version, &["/bin/busybox", "sh", "/run.sh"])
            .file("run.sh", script.as_bytes())
    }
    pub fn package_key(mut self, toml: &str) -> Pkg {
        self.package_keys.push_str(toml);
        self.package_keys.push('\n');
        self
    }
    pub fn entrypoint_key(mut self, toml: &str) -> Pkg {
        self.entrypoint_keys.push_str(toml);
        self.entrypoint_keys.push('\n');
        self
    }
    pub fn table(mut self, toml: &str) -> Pkg {
        self.tables.push_str(toml);
        self.tables.push('\n');
        self
    }
    pub fn file(mut self, path: &str, data: &[u8]) -> Pkg {
        self.files.push((path.into(), data.to_vec()));
        self
    }

    /// `.berth/manifest.toml`.
    pub fn manifest(&self) -> String {
        let argv: Vec<String> = self.argv.iter().map(|a| format!("{a:?}")).collect();
        format!(
            "[package]\nname = \"{}\"\nversion = \"{}\"\ndescription = \"{}\"\n{}\n[entrypoint]\nargv = [{}]\n{}\n{}\n",
            self.name,
            self.version,
            self.description,
            self.package_keys,
            argv.join(", "),
            self.entrypoint_keys,
            self.tables
        )
    }

    /// The mode `path` gets, if not the umask's.
    pub fn mode_of(&self, path: &str) -> Option<u32> {
        match self.modes.iter().find(|(p, _)| p == path) {
            Some((_, m)) => Some(*m),
            None if path.ends_with(".sh") || path.starts_with("bin/") => Some(0o755),
            None => None,
        }
    }

    /// Writes the package tree (busybox, files, manifest) into `dir`, which is emptied first.
    pub fn write_tree(&self, dir: &Path) -> Result<(), PackageError> {
        let _ = std::fs::remove_dir_all(dir);
        let meta = dir.join(".berth");
        std::fs::create_dir_all(&meta).map_err(io_err("create", &meta))?;
        if self.with_busybox {
            let bin = dir.join("bin");
            std::fs::create_dir_all(&bin).map_err(io_err("create", &bin))?;
            let bb = busybox()?;
            std::fs::copy(&bb, bin.join("busybox")).map_err(io_err("copy", &bb))?;
            for l in self.applets {
                let _ = std::os::unix::fs::symlink("busybox", bin.join(l));
            }
        }
        for (path, data) in &self.files {
            let f = dir.join(path);
            if let Some(d) = f.parent() {
                std::fs::create_dir_all(d).map_err(io_err("create", d))?;
            }
            std::fs::write(&f, data).map_err(io_err("write", &f))?;
            if let Some(mode) = self.mode_of(path) {
                std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(mode))
                    .map_err(io_err("chmod", &f))?;
            }
        }
        let m = meta.join("manifest.toml");
        std::fs::write(&m, self.manifest()).map_err(io_err("write", &m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_and_modes() {
        let mut p = Pkg::script("web", "1.0", "echo up\n")
            .package_key("base = \"host\"")
            .entrypoint_key("user = 1000")
            .table("[network]\nmode = \"shared\"")
            .file("bin/tool", b"x")
            .file("etc/conf", b"y");
        p.modes.push(("etc/conf".into(), 0o600));
        let m = p.manifest();
        assert!(m.starts_with("[package]\nname = \"web\"\nversion = \"1.0\"\n"));
        assert!(m.contains("description = \"test package web\"\nbase = \"host\"\n"));
        assert!(m.contains("argv = [\"/bin/busybox\", \"sh\", \"/run.sh\"]\nuser = 1000\n"));
        assert!(m.contains("[network]\nmode = \"shared\"\n"));
        assert_eq!(p.mode_of("run.sh"), Some(0o755));
        assert_eq!(p.mode_of("bin/tool"), Some(0o755));
        assert_eq!(p.mode_of("etc/conf"), Some(0o600));
        assert_eq!(p.mode_of("share/x"), None);
    }

    #[test]
    fn tree_without_busybox() {
        let t = crate::TempDir::new("pkg");
        let mut p = Pkg::new("probe", "2", &["/probe"]).file("probe", b"\x7fELF");
        p.with_busybox = false;
        p.modes.push(("probe".into(), 0o755));
        let dir = t.path("src");
        p.write_tree(&dir).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.join("probe")).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o755);
        let m = std::fs::read_to_string(dir.join(".berth/manifest.toml")).unwrap();
        assert_eq!(m, p.manifest());
        assert!(!dir.join("bin").exists());
    }
}
