//! Kernel modules: whether the kernel takes them, loading one from a file (finit_module, as
//! insmod does: no modprobe, no dependencies), and a loaded module's parameters.

use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind};

/// `<sys>/module/NAME`: present while the module is loaded (or built in).
pub fn dir(sys: &Path, name: &str) -> PathBuf {
    sys.join("module").join(name)
}

pub fn loaded(sys: &Path, name: &str) -> bool {
    dir(sys, name).join("parameters").is_dir()
}

/// Why this kernel will not load a module, or None when it may: no module support at all
/// (no /proc/modules), or loading switched off (kernel.modules_disabled).
pub fn refusal(proc: &Path) -> Option<String> {
    if !proc.join("modules").exists() {
        return Some("the kernel has no module support (no /proc/modules)".into());
    }
    match std::fs::read_to_string(proc.join("sys/kernel/modules_disabled")) {
        Ok(s) if s.trim() == "1" => {
            Some("module loading is switched off (kernel.modules_disabled = 1)".into())
        }
        _ => None,
    }
}

/// Loads the module in `file` with `params` ("key=value key=value"). The errors name what
/// the kernel refused in words an operator can act on.
pub fn load(file: &Path, params: &str) -> Result<(), Error> {
    let f = std::fs::File::open(file).map_err(|e| {
        let kind = match e.kind() {
            io::ErrorKind::NotFound => ErrorKind::NotFound,
            _ => ErrorKind::Refused,
        };
        Error::new(kind, format!("{}: {e}", file.display()))
    })?;
    let p = std::ffi::CString::new(params)
        .map_err(|_| Error::new(ErrorKind::Invalid, "a NUL in the parameters"))?;
    // SAFETY: finit_module reads the open descriptor and the NUL-terminated parameters, both
    // alive across the call; it writes nothing of ours.
    let rc = unsafe { libc::syscall(libc::SYS_finit_module, f.as_raw_fd(), p.as_ptr(), 0) };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    let why = match e.raw_os_error() {
        Some(libc::EEXIST) => return Ok(()),
        Some(libc::ENOEXEC) => "not a module for this kernel (built against other headers?)",
        Some(libc::EKEYREJECTED | libc::ENOKEY) => {
            "the kernel wants signed modules (module.sig_enforce) and this one's signature is not trusted"
        }
        Some(libc::EPERM) => "refused (modules disabled, lockdown, or no CAP_SYS_MODULE)",
        // The module's init gives its own errors; berth_slab's ENOSYS: no kprobes, or the
        // cache list not in kallsyms (a data symbol: CONFIG_KALLSYMS_ALL).
        Some(libc::ENOSYS) => "its init found what it needs missing (kprobes, or kallsyms with CONFIG_KALLSYMS_ALL: see the kernel log)",
        _ => "",
    };
    let message = if why.is_empty() {
        format!("loading {}: {e}", file.display())
    } else {
        format!("loading {}: {why} ({e})", file.display())
    };
    Err(Error::new(ErrorKind::Refused, message))
}

/// Sets a loaded module's parameter (its `set` callback runs in this write).
pub fn set_param(sys: &Path, module: &str, param: &str, value: &str) -> io::Result<()> {
    std::fs::write(dir(sys, module).join("parameters").join(param), value)
}

pub fn param(sys: &Path, module: &str, param: &str) -> io::Result<String> {
    std::fs::read_to_string(dir(sys, module).join("parameters").join(param))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_without_modules_or_with_loading_off_says_so() {
        let t = std::env::temp_dir().join(format!("berth-kmod-{}", std::process::id()));
        std::fs::create_dir_all(t.join("sys/kernel")).unwrap();
        assert_eq!(
            refusal(&t).as_deref(),
            Some("the kernel has no module support (no /proc/modules)")
        );
        std::fs::write(t.join("modules"), "").unwrap();
        assert_eq!(refusal(&t), None);
        std::fs::write(t.join("sys/kernel/modules_disabled"), "1\n").unwrap();
        assert!(refusal(&t).unwrap().contains("kernel.modules_disabled = 1"));
        std::fs::write(t.join("sys/kernel/modules_disabled"), "0\n").unwrap();
        assert_eq!(refusal(&t), None);
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn loading_names_the_file_and_the_refusal() {
        let e = load(Path::new("/nonexistent/berth_slab.ko"), "").unwrap_err();
        assert!(e.message.starts_with("/nonexistent/berth_slab.ko: "), "{e}");
        assert_eq!(e.kind, ErrorKind::NotFound);
        // Not a module: this kernel says ENOEXEC, or refuses outright without module support
        // (ENOSYS) or the right (EPERM); the message names the file either way.
        let f = std::env::temp_dir().join(format!("berth-kmod-{}.ko", std::process::id()));
        std::fs::write(&f, b"not an ELF file").unwrap();
        let e = load(&f, "x=1").unwrap_err();
        std::fs::remove_file(&f).unwrap();
        assert!(
            e.message.starts_with(&format!("loading {}: ", f.display())),
            "{e}"
        );
        assert_eq!(e.kind, ErrorKind::Refused);
        assert!(!loaded(Path::new("/sys"), "berth_no_such_module"));
    }
}
