//! The layout of a state directory (`--state DIR`, default `./.tessera`).

use std::path::{Path, PathBuf};

/// A state directory and the paths inside it.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// Use `root`, creating it and its sub-folders if needed.
    pub fn open(root: impl AsRef<Path>) -> std::io::Result<Self> {
        let root = root.as_ref().to_path_buf();
        std::fs::create_dir_all(root.join("objects"))?;
        std::fs::create_dir_all(root.join("tmp"))?;
        std::fs::create_dir_all(root.join("work"))?;
        // Absolute, so subprocesses running in other working directories see the same paths.
        let root = root.canonicalize()?;
        Ok(StateDir { root })
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// SQLite file for state and events.
    pub fn state_db(&self) -> PathBuf {
        self.root.join("state.db")
    }

    /// SQLite file for the memory reservations every process on the directory shares.
    pub fn memory_db(&self) -> PathBuf {
        self.root.join("memory.db")
    }

    /// SQLite file for the queue.
    pub fn queue_db(&self) -> PathBuf {
        self.root.join("queue.db")
    }

    /// Root of the object store.
    pub fn objects(&self) -> PathBuf {
        self.root.join("objects")
    }

    /// Scratch space on the same file system as `objects/`, so renames are atomic.
    pub fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// Per-task working directories.
    pub fn work(&self) -> PathBuf {
        self.root.join("work")
    }
}
