//! Paths written in manifests and requests: one check of their form, for every module that
//! takes one (a leaf: it needs nothing else of berth-core).

/// Checks an absolute path is in normal form, so that later prefix checks (is it under /dev?)
/// and bind-mount targets cannot be fooled by `..`, `.` or doubled slashes.
pub fn check_abs_path(p: &str) -> Result<(), String> {
    if p.contains('\0') || p.contains('\n') {
        return Err(format!("{p:?} must not contain NUL or newline"));
    }
    if !p.starts_with('/') {
        return Err(format!("{p:?} must be an absolute path"));
    }
    if p == "/" {
        return Ok(());
    }
    if p.ends_with('/') {
        return Err(format!("{p:?} must not end with '/'"));
    }
    for c in p[1..].split('/') {
        match c {
            "" => return Err(format!("{p:?} must not contain \"//\"")),
            "." => return Err(format!("{p:?} must not contain \"/./\"")),
            ".." => return Err(format!("{p:?} must not contain \"..\"")),
            _ => {}
        }
    }
    Ok(())
}
