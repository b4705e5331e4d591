//! Disk space in use, as `du` counts it (allocated blocks), for the metrics and the TR-181
//! view: a container's /data and the store.

use std::path::Path;

use crate::daemon::context::Daemon;

/// Disk used by a container's /data: its image with `containers.data_size`, else its tree.
pub(crate) fn data_bytes(d: &Daemon, name: &str) -> u64 {
    let img = d.cfg.paths.data_image(name);
    if img.exists() {
        file_bytes(&img)
    } else {
        dir_bytes(&d.cfg.paths.data(name), 64)
    }
}

/// Allocated bytes (st_blocks) of a file.
pub(crate) fn file_bytes(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p)
        .map(|m| m.blocks() * 512)
        .unwrap_or(0)
}

/// Allocated bytes under a directory, `depth` levels deep at most, symlinks not followed
/// and other file systems not entered.
pub(crate) fn dir_bytes(p: &Path, depth: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(top) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    let dev = top.dev();
    let mut total = 0;
    let mut stack = vec![(p.to_path_buf(), 0)];
    while let Some((dir, level)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in rd.flatten() {
            let Ok(m) = entry.metadata() else { continue };
            total += m.blocks() * 512;
            if m.is_dir() && m.dev() == dev && level + 1 < depth {
                stack.push((entry.path(), level + 1));
            }
        }
    }
    total
}
