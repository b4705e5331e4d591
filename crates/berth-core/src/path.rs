//! Paths written in manifests and requests: one check of their form, for every module that
//! takes one (it needs nothing else of berth-core but its error).

use crate::error::Error;

/// Checks an absolute path is in normal form, so that later prefix checks (is it under /dev?)
/// and bind-mount targets cannot be fooled by `..`, `.` or doubled slashes.
pub fn check_abs_path(p: &str) -> Result<(), Error> {
    if p.contains('\0') || p.contains('\n') {
        return Err(Error::invalid(format!(
            "{p:?} must not contain NUL or newline"
        )));
    }
    if !p.starts_with('/') {
        return Err(Error::invalid(format!("{p:?} must be an absolute path")));
    }
    if p == "/" {
        return Ok(());
    }
    if p.ends_with('/') {
        return Err(Error::invalid(format!("{p:?} must not end with '/'")));
    }
    for c in p[1..].split('/') {
        match c {
            "" => return Err(Error::invalid(format!("{p:?} must not contain \"//\""))),
            "." => return Err(Error::invalid(format!("{p:?} must not contain \"/./\""))),
            ".." => return Err(Error::invalid(format!("{p:?} must not contain \"..\""))),
            _ => {}
        }
    }
    Ok(())
}
