//! Disk space in use, as `du` counts it (allocated blocks), for the metrics and the TR-181
//! view (a container's /data and the store), and for the words of a full disk (who fills
//! the state partition).

use std::path::Path;
#[cfg(any(feature = "metrics", feature = "tr181"))]
use std::sync::Mutex;
#[cfg(any(feature = "metrics", feature = "tr181"))]
use std::time::{Duration, Instant};

use berth_core::config::Paths;

use crate::daemon::base::context::Daemon;

/// What the store and each installed package's /data use, in bytes.
#[cfg(any(feature = "metrics", feature = "tr181"))]
#[derive(Clone, Default)]
pub(crate) struct Usage {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub store: u64,
    pub data: Vec<(String, u64)>,
}

#[cfg(any(feature = "metrics", feature = "tr181"))]
impl Usage {
    #[cfg_attr(not(feature = "tr181"), allow(dead_code))]
    pub(crate) fn data_of(&self, name: &str) -> Option<u64> {
        self.data.iter().find(|(n, _)| n == name).map(|(_, b)| *b)
    }
}

/// The usage, walked at most once a minute whoever asks (a scraper every few seconds, a
/// management agent's polls): every container's /data is not walked at each request. The
/// cache is the daemon's store's: another daemon of the same process (the unit tests' fakes,
/// each with its own root) never reads it.
#[cfg(any(feature = "metrics", feature = "tr181"))]
pub(crate) fn usage(d: &Daemon) -> Usage {
    type Cached = (std::path::PathBuf, Instant, Usage);
    static CACHE: Mutex<Option<Cached>> = Mutex::new(None);
    let store = d.cfg.paths.store();
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((s, t, u)) = cache.as_ref() {
        if *s == store && t.elapsed() < Duration::from_secs(60) {
            return u.clone();
        }
    }
    let u = Usage {
        store: dir_bytes(&store, 1),
        // (the names under the state's lock, the walks after it)
        data: {
            let names: Vec<String> = d
                .state
                .lock()
                .unwrap()
                .packages
                .keys()
                .map(|p| p.to_string())
                .collect();
            names
                .into_iter()
                .map(|p| {
                    let b = data_bytes(d, &p);
                    (p, b)
                })
                .collect()
        },
    };
    *cache = Some((store, Instant::now(), u.clone()));
    u
}

/// Who holds the state partition, for a message about a full one: the three biggest of each
/// container's /data (every entry of `data/`: a directory or an image, a package removed
/// without `--purge` too), the store and the crash reports, walked now (the moment a write
/// fails is the moment it matters; beneath each top, never through a link), e.g. `the
/// biggest: /data of hog 21.3 MiB (22334464 B), the store 1.1 MiB (1155072 B)`.
pub(crate) fn holders(p: &Paths) -> String {
    let mut all: Vec<(String, u64)> = Vec::new();
    for e in std::fs::read_dir(p.state.join("data"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let path = e.path();
        // (the entry itself: a directory walked beneath it, an image file, nothing else)
        let bytes = match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => berth_sys::tree::path_usage(&path),
            Ok(m) if m.is_file() => file_bytes(&path),
            _ => 0,
        };
        let name = e.file_name().to_string_lossy().into_owned();
        let name = name.strip_suffix(".img").unwrap_or(&name);
        all.push((format!("/data of {name}"), bytes));
    }
    for (who, dir) in [
        ("the store", p.store()),
        ("crash reports", p.reports()),
        ("the fleet's download", p.state.join("fleet")),
    ] {
        all.push((who.into(), berth_sys::tree::path_usage(&dir)));
    }
    // The three biggest, by hand: a sort would cost the device binary another instance.
    let mut top = String::from("the biggest:");
    for n in 0..3 {
        let Some(i) = (0..all.len())
            .filter(|i| all[*i].1 > 0)
            .max_by_key(|i| all[*i].1)
        else {
            if n == 0 {
                return "none of it in berth's /data, store or crash reports".into();
            }
            break;
        };
        let (who, b) = all.swap_remove(i);
        for part in [if n == 0 { " " } else { ", " }, &who, " "] {
            top.push_str(part);
        }
        top.push_str(&mib(b));
    }
    top
}

/// [`holders`] walked at most every 30 s, for `berth status` (a page polling it every few
/// seconds must not walk every /data each time while the partition is full); a failed
/// write's message walks afresh.
pub(crate) fn holders_recent(p: &Paths) -> String {
    type Cached = (std::path::PathBuf, std::time::Instant, String);
    static LAST: std::sync::Mutex<Option<Cached>> = std::sync::Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    match last.as_ref() {
        Some((s, t, h)) if *s == p.state && t.elapsed().as_secs() < 30 => h.clone(),
        _ => {
            let h = holders(p);
            *last = Some((p.state.clone(), std::time::Instant::now(), h.clone()));
            h
        }
    }
}

/// Admission for `what` (an install's images, a fleet bundle): `need` more bytes on the file
/// system of `on`, with `reserve` ([upgrade] reserve) left for berth's own state. None when
/// it fits; else the refusal's words: `no room for WHAT: space required X (and Y kept for
/// berth's own state, [upgrade] reserve), available Z in ON (the biggest: …)`.
pub(crate) fn no_room(
    p: &Paths,
    what: &str,
    need: u64,
    reserve: u64,
    on: &Path,
) -> std::io::Result<Option<String>> {
    let free = berth_sys::fsutil::free_bytes(on)?;
    Ok((need.saturating_add(reserve) > free).then(|| {
        format!(
            "no room for {what}: space required {} (and {} kept for berth's own state, [upgrade] reserve), available {} in {} ({})",
            mib(need),
            mib(reserve),
            mib(free),
            on.display(),
            holders(p)
        )
    }))
}

/// Bytes as people read them in a message: `4.1 MiB (4299161 B)` (integers only).
pub(crate) fn mib(b: u64) -> String {
    let tenths = (u128::from(b) * 10 + (1 << 19)) >> 20;
    format!("{}.{} MiB ({b} B)", tenths / 10, tenths % 10)
}

/// Disk used by a container's /data: its image with `containers.data_size`, else its tree.
#[cfg(any(feature = "metrics", feature = "tr181"))]
pub(crate) fn data_bytes(d: &Daemon, name: &str) -> u64 {
    let img = d.cfg.paths.data_image(name);
    if img.exists() {
        file_bytes(&img)
    } else {
        // The container's own tree: walked beneath its top, never through a link.
        berth_sys::tree::path_usage(&d.cfg.paths.data(name))
    }
}

/// The bytes a copy of `name`'s /data (its tree or its image) takes, for an upgrade's
/// snapshot, as the copy counts it (`berth_sys::tree::tree_size`: each file in whole 4 KiB
/// blocks of what it holds, a file linked under several names once); None when
/// there is none, or past the walk's caps (a hostile tree: no copy).
pub(crate) fn snapshot_size(d: &Daemon, name: &str) -> Option<u64> {
    let image = d.cfg.paths.data_image(name);
    if image.is_file() {
        Some(file_bytes(&image))
    } else {
        berth_sys::tree::path_size(&d.cfg.paths.data(name))
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
#[cfg(any(feature = "metrics", feature = "tr181"))]
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::testing::{fake_daemon, install, MANIFEST};

    /// `n` bytes that no file system compresses away.
    fn noise(n: usize) -> Vec<u8> {
        crate::daemon::base::testing::noise(n, 1)
    }

    /// Who fills the partition: the three biggest of each /data, the store and the crash
    /// reports, biggest first, whichever it is; nothing of berth's, said so.
    #[test]
    fn the_biggest_holders_come_first_whichever_they_are() {
        let (_dir, d, _) = fake_daemon("disk-holders", "");
        assert_eq!(
            holders(&d.cfg.paths),
            "none of it in berth's /data, store or crash reports"
        );
        install(&d, MANIFEST);
        let p = &d.cfg.paths;
        for (dir, file, mib) in [
            (p.data("web"), "a", 1),
            (p.store(), "x.sqfs", 3),
            (p.reports().join("web"), "r.tar", 2),
        ] {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(file), noise(mib << 20)).unwrap();
        }
        let h = holders(&d.cfg.paths);
        let order: Vec<usize> = ["the store 3.", "crash reports 2.", "/data of web 1."]
            .iter()
            .map(|w| h.find(w).unwrap_or_else(|| panic!("{w} in {h}")))
            .collect();
        assert!(h.starts_with("the biggest: the store 3.0 MiB ("), "{h}");
        assert!(order[0] < order[1] && order[1] < order[2], "{h}");
    }

    /// A file counts what it has allocated, not its length: a sparse file of 64 MiB with
    /// 256 KiB written counts about 256 KiB; a file that is not there counts 0.
    #[test]
    fn a_file_counts_its_allocated_blocks_not_its_length() {
        let (dir, _d, _) = fake_daemon("disk-file", "");
        let f = dir.path("sparse");
        std::fs::write(&f, noise(256 << 10)).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&f)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        let b = file_bytes(&f);
        assert!((256 << 10..8 << 20).contains(&b), "{b} bytes");
        assert_eq!(file_bytes(&dir.path("absent")), 0);
    }

    /// A directory counts its entries down to `depth` levels, never through a link.
    #[test]
    fn a_directory_counts_down_to_its_depth_and_not_through_links() {
        let (dir, _d, _) = fake_daemon("disk-dir", "");
        let top = dir.path("top");
        std::fs::create_dir_all(top.join("sub")).unwrap();
        std::fs::write(top.join("a"), noise(128 << 10)).unwrap();
        std::fs::write(top.join("sub/b"), noise(1 << 20)).unwrap();
        std::fs::write(dir.path("outside"), noise(4 << 20)).unwrap();
        std::os::unix::fs::symlink(dir.path("outside"), top.join("link")).unwrap();
        std::os::unix::fs::symlink(dir.path("."), top.join("loop")).unwrap();

        let shallow = dir_bytes(&top, 1);
        let deep = dir_bytes(&top, 2);
        let (a, b, sub) = (
            file_bytes(&top.join("a")),
            file_bytes(&top.join("sub/b")),
            file_bytes(&top.join("sub")),
        );
        let links = file_bytes(&top.join("link")) + file_bytes(&top.join("loop"));
        assert_eq!(shallow, a + sub + links);
        assert_eq!(deep, shallow + b);
        assert!(deep < 3 << 20, "the link's target was counted: {deep}");
        assert_eq!(dir_bytes(&dir.path("absent"), 3), 0);
    }

    /// A container's /data counts its image when it has one (containers.data_size), else its
    /// tree; nothing at all counts 0.
    #[test]
    fn data_counts_the_image_when_there_is_one_else_the_tree() {
        let (_dir, d, _) = fake_daemon("disk-data", "");
        assert_eq!(data_bytes(&d, "web"), 0);
        let data = d.cfg.paths.data("web");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("db"), noise(512 << 10)).unwrap();
        let tree = data_bytes(&d, "web");
        assert!(tree >= file_bytes(&data.join("db")), "{tree}");
        assert!(tree < 2 << 20, "{tree}");

        let img = d.cfg.paths.data_image("web");
        std::fs::write(&img, noise(2 << 20)).unwrap();
        assert_eq!(data_bytes(&d, "web"), file_bytes(&img));
        assert!(file_bytes(&img) >= 2 << 20);
    }

    /// Each installed package's /data is found by name; another is not there.
    #[test]
    fn usage_finds_each_containers_data_by_name() {
        let u = Usage {
            store: 10,
            data: vec![("web".into(), 4096), ("db".into(), 0)],
        };
        assert_eq!(u.data_of("web"), Some(4096));
        assert_eq!(u.data_of("db"), Some(0));
        assert_eq!(u.data_of("cache"), None);
    }

    /// The walk is made at most once a minute: what a second call within the minute
    /// answers is the first call's answer, however the disk changed meanwhile.
    #[test]
    fn usage_is_walked_at_most_once_a_minute() {
        let (_dir, d, _) = fake_daemon("disk-usage", "");
        install(&d, MANIFEST);
        std::fs::create_dir_all(d.cfg.paths.store()).unwrap();
        let first = usage(&d);
        std::fs::write(d.cfg.paths.store().join("big.sqfs"), noise(1 << 20)).unwrap();
        std::fs::create_dir_all(d.cfg.paths.data("web")).unwrap();
        std::fs::write(d.cfg.paths.data("web").join("f"), noise(1 << 20)).unwrap();
        let second = usage(&d);
        assert_eq!(second.store, first.store);
        assert_eq!(second.data, first.data);
        // Walked now, the same disk says otherwise: the cache answered.
        assert!(dir_bytes(&d.cfg.paths.store(), 1) >= 1 << 20);
        assert!(data_bytes(&d, "web") >= 1 << 20);
        // Another daemon's store is walked for it, never answered from this one's cache.
        let (_dir2, d2, _) = fake_daemon("disk-usage-other", "");
        std::fs::create_dir_all(d2.cfg.paths.store()).unwrap();
        assert_eq!(usage(&d2).data, Vec::new());
    }
}
