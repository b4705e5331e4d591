//! Unique names and fresh directories below the temp dir.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// `TAG-PID-N`: unique among the processes running and within this one.
pub fn unique_id(tag: &str) -> String {
    format!(
        "{tag}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

/// A fresh directory `$TMPDIR/berth-tmp-<unique id>`, removed on drop (also when a test
/// fails).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn create(name: &str) -> std::io::Result<TempDir> {
        let dir = std::env::temp_dir().join(format!("berth-tmp-{}", unique_id(name)));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir)?;
        Ok(TempDir(dir))
    }

    /// [`TempDir::create`] for tests: a temp dir that cannot be made is a broken machine.
    pub fn new(name: &str) -> TempDir {
        TempDir::create(name).unwrap_or_else(|e| panic!("cannot create a temp dir for {name}: {e}"))
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_differ_and_dirs_go() {
        assert_ne!(unique_id("a"), unique_id("a"));
        let p = {
            let t = TempDir::new("kit");
            std::fs::write(t.path("f"), "x").unwrap();
            t.0.clone()
        };
        assert!(!p.exists());
    }
}
