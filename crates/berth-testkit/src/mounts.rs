//! The mounts below a sandbox, and which of them should not be there.

use std::path::{Path, PathBuf};

use berth_sys::mount::SysError;

/// Mount points at or below `dir` (component-wise), in mount order.
pub fn mounts_under(dir: &Path) -> Result<Vec<PathBuf>, SysError> {
    Ok(berth_sys::mount::mounts_under(Path::new("/proc"), dir)?
        .into_iter()
        .map(|m| m.mount_point)
        .collect())
}

/// The image digests (sha256) of the packages `state.json` in `state_dir` lists as installed.
pub fn installed_images(state_dir: &Path) -> Vec<String> {
    std::fs::read(state_dir.join("state.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| {
            v["packages"].as_object().map(|o| {
                o.values()
                    .filter_map(|p| p["sha256"].as_str().map(String::from))
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// The mounts that should not be there while no container runs: all but the image mounts of
/// installed packages (`<mnt>/<sha256>`: berth keeps those, so a restart finds the image's
/// pages still cached).
pub fn stray(mounts: Vec<PathBuf>, mnt: &Path, installed: &[String]) -> Vec<PathBuf> {
    mounts
        .into_iter()
        .filter(|m| {
            !(m.parent() == Some(mnt)
                && m.file_name()
                    .and_then(|f| f.to_str())
                    .is_some_and(|f| installed.iter().any(|i| i == f)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installed_images_are_not_stray() {
        let mnt = Path::new("/s/run/mnt");
        let m = |s: &str| PathBuf::from(s);
        let found = vec![
            m("/s/run/mnt/aaa"),
            m("/s/run/mnt/bbb"),
            m("/s/run/rootfs/web"),
            m("/s/run/mnt/aaa/inner"),
        ];
        assert_eq!(
            stray(found, mnt, &["aaa".to_string()]),
            vec![
                m("/s/run/mnt/bbb"),
                m("/s/run/rootfs/web"),
                m("/s/run/mnt/aaa/inner")
            ]
        );
    }

    #[test]
    fn installed_from_state() {
        let t = crate::TempDir::new("state");
        assert!(installed_images(&t.0).is_empty());
        std::fs::write(
            t.path("state.json"),
            r#"{"packages": {"web": {"sha256": "aaa"}, "db": {"sha256": "bbb"}}}"#,
        )
        .unwrap();
        let mut i = installed_images(&t.0);
        i.sort();
        assert_eq!(i, ["aaa", "bbb"]);
    }
}
