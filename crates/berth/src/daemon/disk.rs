//! Disk space in use, as `du` counts it (allocated blocks), for the metrics and the TR-181
//! view: a container's /data and the store.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::daemon::context::Daemon;

/// What the store and each installed package's /data use, in bytes.
#[derive(Clone, Default)]
pub(crate) struct Usage {
    pub store: u64,
    pub data: Vec<(String, u64)>,
}

impl Usage {
    pub(crate) fn data_of(&self, name: &str) -> Option<u64> {
        self.data.iter().find(|(n, _)| n == name).map(|(_, b)| *b)
    }
}

/// The usage, walked at most once a minute whoever asks (a scraper every few seconds, a
/// management agent's polls): every container's /data is not walked at each request.
pub(crate) fn usage(d: &Daemon) -> Usage {
    static CACHE: Mutex<Option<(Instant, Usage)>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((t, u)) = cache.as_ref() {
        if t.elapsed() < Duration::from_secs(60) {
            return u.clone();
        }
    }
    let u = Usage {
        store: dir_bytes(&d.cfg.paths.store(), 1),
        data: crate::daemon::state::state(d)
            .packages
            .keys()
            .map(|p| (p.to_string(), data_bytes(d, p)))
            .collect(),
    };
    *cache = Some((Instant::now(), u.clone()));
    u
}

/// Disk used by a container's /data: its image with `containers.data_size`, else its tree.
pub(crate) fn data_bytes(d: &Daemon, name: &str) -> u64 {
    let img = d.cfg.paths.data_image(name);
    if img.exists() {
        file_bytes(&img)
    } else {
        // The container's own tree: walked beneath its top, never through a link.
        berth_sys::tree::path_usage(&d.cfg.paths.data(name))
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
