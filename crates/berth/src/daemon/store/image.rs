//! Reading and checking the manifest inside an image (a private mount, bounded, no links).

use std::fs::File;
use std::io::Read;
use std::path::Path;

use berth_core::index::IndexEntry;
use berth_core::manifest::{Manifest, MANIFEST_PATH};
use berth_core::plan::SKELETON_DIRS;

use crate::daemon::base::context::Daemon;
use crate::daemon::base::error::{Error, Kind, Result};
use crate::daemon::prepare::security;

/// Mounts an image on a private mount point to read and check the manifest it carries.
pub(crate) fn read_manifest(d: &Daemon, image: &Path, e: &IndexEntry) -> Result<Manifest> {
    let label = format!("{}@{}", e.name, e.version);
    let mnt = d
        .cfg
        .paths
        .run
        .join("mnt")
        .join(format!(".verify-{}", e.sha256));
    let _ = d.host.mounts.umount(&mnt, true);
    std::fs::create_dir_all(&mnt).map_err(Error::internal)?;
    let result = (|| {
        d.host.mounts.mount_squashfs(image, &mnt).map_err(|err| {
            Error::new(
                Kind::BadImage,
                format!("{label}: not a usable squashfs image: {err}"),
            )
        })?;
        let text = read_image_manifest(&mnt)
            .map_err(|why| Error::new(Kind::BadImage, format!("{label}: {why}")))?;
        let m = Manifest::parse(&text)
            .map_err(|err| Error::new(Kind::BadManifest, format!("{label}: {err}")))?;
        security::check(&d.cfg, e.name.as_str(), &m.permissions, e.trusted)?;
        if m.package.name != e.name || m.package.version != e.version {
            return Err(Error::new(
                Kind::BadImage,
                format!(
                    "{label}: the image holds {}@{}, not what the index lists",
                    m.package.name, m.package.version
                ),
            ));
        }
        for dir in SKELETON_DIRS {
            // Not followed: a link would make the container's mount land where it points.
            let why = match std::fs::symlink_metadata(mnt.join(dir)) {
                Ok(md) if md.is_dir() => continue,
                Ok(md) => format!(
                    "image's mount point /{dir} is a {}, not a directory",
                    file_kind(&md.file_type())
                ),
                Err(_) => format!("image lacks the mount point /{dir}"),
            };
            return Err(Error::new(
                Kind::BadImage,
                format!("{label}: {why}; build it with berth pack"),
            ));
        }
        Ok(m)
    })();
    let _ = d.host.mounts.umount(&mnt, true);
    let _ = std::fs::remove_dir(&mnt);
    result
}

/// Real manifests are a few hundred bytes; the daemon's memory budget is a few MiB.
pub(crate) const MANIFEST_LIMIT: u64 = 64 * 1024;

/// Reads the manifest of an image mounted at `root`: only from the image itself (a symlink
/// would lead into the host, a FIFO would block the daemon) and only a bounded amount.
pub(crate) fn read_image_manifest(root: &Path) -> Result<String, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = root.join(MANIFEST_PATH);
    let dir = file.parent().unwrap_or(root).to_path_buf();
    for (path, want_dir) in [(&dir, true), (&file, false)] {
        let rel = path.strip_prefix(root).unwrap_or(path).display();
        let md = std::fs::symlink_metadata(path)
            .map_err(|e| format!("image has no readable /{MANIFEST_PATH}: {e}"))?;
        if (want_dir && !md.is_dir()) || (!want_dir && !md.is_file()) {
            return Err(format!(
                "/{rel} in the image is a {}, not a {}; build it with berth pack",
                file_kind(&md.file_type()),
                if want_dir {
                    "directory"
                } else {
                    "regular file"
                }
            ));
        }
    }
    let f = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&file)
        .map_err(|e| format!("image has no readable /{MANIFEST_PATH}: {e}"))?;
    let mut bytes = Vec::new();
    f.take(MANIFEST_LIMIT + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("image has no readable /{MANIFEST_PATH}: {e}"))?;
    if bytes.len() as u64 > MANIFEST_LIMIT {
        return Err(format!(
            "/{MANIFEST_PATH} is larger than {MANIFEST_LIMIT} bytes; refusing to read it"
        ));
    }
    String::from_utf8(bytes).map_err(|_| format!("/{MANIFEST_PATH} is not UTF-8"))
}

pub(crate) fn file_kind(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_symlink() {
        "symlink"
    } else if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_block_device() || t.is_char_device() {
        "device"
    } else {
        "regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::base::testing::{entry, fake_daemon, image_tree};

    const MANIFEST: &str = crate::daemon::base::testing::MANIFEST;

    /// The verification mount: the manifest is read from the image, and the image is
    /// unmounted and its mount point removed, whatever the verdict.
    #[test]
    fn an_images_manifest_is_read_on_a_private_mount_that_goes_again() {
        let (dir, d, m) = fake_daemon("image-ok", "");
        let tree = dir.path("tree");
        image_tree(&tree, MANIFEST);
        let image = dir.path("web.sqfs");
        m.image_tree(&image, &tree);
        let got = read_manifest(&d, &image, &entry(MANIFEST)).unwrap();
        assert_eq!(got.package.name.as_str(), "web");
        assert!(m.mounted().is_empty(), "still mounted: {:?}", m.mounted());
        let mnt = d
            .cfg
            .paths
            .run
            .join("mnt")
            .join(format!(".verify-{}", "ab".repeat(32)));
        assert!(!mnt.exists(), "{} left behind", mnt.display());
        let ops: Vec<String> = m
            .calls()
            .iter()
            .map(|c| c.split(' ').next().unwrap().into())
            .collect();
        // A leftover of a killed install is unmounted first; then mount, read, unmount.
        assert_eq!(ops, ["umount", "mount_squashfs", "umount"]);
    }

    /// A mount the kernel refuses (a corrupt squashfs: EINVAL) is a bad image, named, and
    /// leaves no mount point.
    #[test]
    fn a_refused_mount_is_a_bad_image_and_leaves_nothing() {
        let (dir, d, m) = fake_daemon("image-refused", "");
        m.fail_next("mount_squashfs", libc::EINVAL);
        let e = read_manifest(&d, &dir.path("web.sqfs"), &entry(MANIFEST)).unwrap_err();
        assert_eq!(e.kind, Kind::BadImage);
        assert!(
            e.message
                .starts_with("web@1.0: not a usable squashfs image"),
            "{}",
            e.message
        );
        assert!(m.mounted().is_empty());
        assert!(!d
            .cfg
            .paths
            .run
            .join("mnt")
            .join(format!(".verify-{}", "ab".repeat(32)))
            .exists());
    }

    /// What the image holds must be what the index lists, and its mount points must be
    /// directories (a link would land the container's mount where it points); either way
    /// the image is unmounted again.
    #[test]
    fn an_image_unlike_its_index_entry_or_without_its_mount_points_is_refused() {
        let (dir, d, m) = fake_daemon("image-bad", "");
        let other = MANIFEST.replace("1.0", "2.0");
        let tree = dir.path("tree");
        image_tree(&tree, &other);
        let image = dir.path("web.sqfs");
        m.image_tree(&image, &tree);
        let e = read_manifest(&d, &image, &entry(MANIFEST)).unwrap_err();
        assert_eq!(e.kind, Kind::BadImage);
        assert!(
            e.message
                .contains("holds web@2.0, not what the index lists"),
            "{}",
            e.message
        );
        assert!(m.mounted().is_empty());

        std::fs::write(tree.join(berth_core::manifest::MANIFEST_PATH), MANIFEST).unwrap();
        std::fs::remove_dir(tree.join("data")).unwrap();
        std::os::unix::fs::symlink("/etc", tree.join("data")).unwrap();
        let e = read_manifest(&d, &image, &entry(MANIFEST)).unwrap_err();
        assert!(
            e.message
                .contains("mount point /data is a symlink, not a directory"),
            "{}",
            e.message
        );
        assert!(m.mounted().is_empty());
    }
}
