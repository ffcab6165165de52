//! The object store as a folder.
//!
//! Writes go to a temporary file on the same file system, are fsynced, then renamed into
//! place (and the directory fsynced), so a reader or a crash sees the old object or the
//! new one, never part of one. `put_if_absent` links the temporary file into place,
//! which fails atomically if the name exists.

use async_trait::async_trait;
use bytes::Bytes;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use tessera_core::ports::object_store::{
    ObjectMeta, ObjectStore, ObjectStoreError, ObjectStream, validate_key,
};

/// Bytes a streamed read takes from the file at a time.
const STREAM_CHUNK: u64 = 256 << 10;

/// A folder as an object store.
#[derive(Debug, Clone)]
pub struct FolderObjectStore {
    root: PathBuf,
    tmp: PathBuf,
}

impl FolderObjectStore {
    /// Objects live under `root`; `tmp` must be on the same file system.
    pub fn new(root: impl Into<PathBuf>, tmp: impl Into<PathBuf>) -> std::io::Result<Self> {
        let (root, tmp) = (root.into(), tmp.into());
        fs::create_dir_all(&root)?;
        fs::create_dir_all(&tmp)?;
        Ok(FolderObjectStore { root, tmp })
    }

    /// The file that holds `key` (after validating it).
    pub fn path_of(&self, key: &str) -> Result<PathBuf, ObjectStoreError> {
        validate_key(key)?;
        Ok(self.root.join(key))
    }

    fn io(key: &str) -> impl FnOnce(std::io::Error) -> ObjectStoreError + '_ {
        move |source| {
            // A key under what is a file here (`a.jpg/x`) names nothing, as on S3.
            if matches!(
                source.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) {
                ObjectStoreError::NotFound(key.to_string())
            } else {
                ObjectStoreError::Io {
                    key: key.to_string(),
                    source,
                }
            }
        }
    }

    fn meta(key: &str, path: &Path) -> Result<ObjectMeta, ObjectStoreError> {
        let m = fs::metadata(path).map_err(Self::io(key))?;
        if !m.is_file() {
            return Err(ObjectStoreError::NotFound(key.to_string()));
        }
        // A rename gives the object a new inode, so inode + mtime + size changes with
        // every write.
        let etag = format!(
            "\"{:x}-{:x}-{:x}\"",
            m.ino(),
            m.mtime_nsec() as u64 ^ (m.mtime() as u64) << 30,
            m.size()
        );
        Ok(ObjectMeta {
            key: key.to_string(),
            size: m.size(),
            etag,
        })
    }

    /// Write `fill` into a fresh temporary file and fsync it.
    fn stage(
        &self,
        key: &str,
        fill: impl FnOnce(&mut File) -> std::io::Result<()>,
    ) -> Result<PathBuf, ObjectStoreError> {
        let tmp = self.tmp.join(format!("{}.part", ulid::Ulid::new()));
        let result = (|| {
            let mut f = File::create(&tmp)?;
            fill(&mut f)?;
            f.sync_all()
        })();
        if let Err(e) = result {
            let _ = fs::remove_file(&tmp);
            return Err(ObjectStoreError::Io {
                key: key.to_string(),
                source: e,
            });
        }
        Ok(tmp)
    }

    fn publish(
        &self,
        key: &str,
        tmp: &Path,
        exclusive: bool,
    ) -> Result<ObjectMeta, ObjectStoreError> {
        let dest = self.path_of(key)?;
        let parent = dest
            .parent()
            .expect("keys are relative to the root")
            .to_path_buf();
        let result = (|| {
            fs::create_dir_all(&parent)?;
            if exclusive {
                fs::hard_link(tmp, &dest)?;
                fs::remove_file(tmp)?;
            } else {
                fs::rename(tmp, &dest)?;
            }
            File::open(&parent)?.sync_all()
        })();
        match result {
            Ok(()) => Self::meta(key, &dest),
            Err(e) => {
                let _ = fs::remove_file(tmp);
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    Err(ObjectStoreError::AlreadyExists(key.to_string()))
                } else {
                    Err(ObjectStoreError::Io {
                        key: key.to_string(),
                        source: e,
                    })
                }
            }
        }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(FolderObjectStore) -> Result<T, ObjectStoreError> + Send + 'static,
    ) -> Result<T, ObjectStoreError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || f(this))
            .await
            .map_err(|e| ObjectStoreError::Io {
                key: String::new(),
                source: std::io::Error::other(e.to_string()),
            })?
    }
}

#[async_trait]
impl ObjectStore for FolderObjectStore {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<ObjectMeta, ObjectStoreError> {
        validate_key(key)?;
        let key = key.to_string();
        self.blocking(move |s| {
            let tmp = s.stage(&key, |f| f.write_all(&bytes))?;
            s.publish(&key, &tmp, false)
        })
        .await
    }

    async fn put_if_absent(&self, key: &str, bytes: Bytes) -> Result<ObjectMeta, ObjectStoreError> {
        validate_key(key)?;
        let key = key.to_string();
        self.blocking(move |s| {
            let tmp = s.stage(&key, |f| f.write_all(&bytes))?;
            s.publish(&key, &tmp, true)
        })
        .await
    }

    async fn put_file(&self, key: &str, path: &Path) -> Result<ObjectMeta, ObjectStoreError> {
        validate_key(key)?;
        let (key, path) = (key.to_string(), path.to_path_buf());
        self.blocking(move |s| {
            let tmp = s.stage(&key, |f| {
                let mut src = File::open(&path)?;
                std::io::copy(&mut src, f).map(|_| ())
            })?;
            s.publish(&key, &tmp, false)
        })
        .await
    }

    async fn get(&self, key: &str) -> Result<Bytes, ObjectStoreError> {
        let path = self.path_of(key)?;
        let key = key.to_string();
        self.blocking(move |_| {
            Self::meta(&key, &path)?;
            fs::read(&path).map(Bytes::from).map_err(Self::io(&key))
        })
        .await
    }

    async fn get_at_most(&self, key: &str, max: u64) -> Result<Bytes, ObjectStoreError> {
        let path = self.path_of(key)?;
        let key = key.to_string();
        self.blocking(move |_| {
            // The size of the file this handle opened: a put renames a new file into
            // place and never rewrites this one, so what is read is what was measured.
            let f = File::open(&path).map_err(Self::io(&key))?;
            let m = f.metadata().map_err(Self::io(&key))?;
            if !m.is_file() {
                return Err(ObjectStoreError::NotFound(key));
            }
            if m.len() > max {
                return Err(ObjectStoreError::TooLarge {
                    key,
                    size: m.len(),
                    max,
                });
            }
            let mut buf = Vec::with_capacity(m.len() as usize);
            f.take(max.saturating_add(1))
                .read_to_end(&mut buf)
                .map_err(Self::io(&key))?;
            if buf.len() as u64 > max {
                return Err(ObjectStoreError::TooLarge {
                    key,
                    size: buf.len() as u64,
                    max,
                });
            }
            Ok(Bytes::from(buf))
        })
        .await
    }

    async fn get_stream(
        &self,
        key: &str,
        range: Option<Range<u64>>,
    ) -> Result<ObjectStream, ObjectStoreError> {
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
        let path = self.path_of(key)?;
        let key = key.to_string();
        // The file this handle opened is the object read to the end: a put renames a new
        // file into place and never rewrites this one.
        let mut f = tokio::fs::File::open(&path).await.map_err(Self::io(&key))?;
        let m = f.metadata().await.map_err(Self::io(&key))?;
        if !m.is_file() {
            return Err(ObjectStoreError::NotFound(key));
        }
        let size = m.len();
        let range = range.unwrap_or(0..size);
        if range.start > range.end || range.end > size {
            return Err(ObjectStoreError::BadRange {
                key,
                start: range.start,
                end: range.end,
                size,
            });
        }
        f.seek(SeekFrom::Start(range.start))
            .await
            .map_err(Self::io(&key))?;
        let remaining = range.end - range.start;
        let body = futures_util::stream::unfold(
            (f, remaining, key),
            |(mut f, remaining, key)| async move {
                if remaining == 0 {
                    return None;
                }
                let mut buf = vec![0; remaining.min(STREAM_CHUNK) as usize];
                match f.read(&mut buf).await {
                    Ok(0) => Some((
                        Err(ObjectStoreError::Io {
                            key: key.clone(),
                            source: std::io::ErrorKind::UnexpectedEof.into(),
                        }),
                        (f, 0, key),
                    )),
                    Ok(n) => {
                        buf.truncate(n);
                        Some((Ok(Bytes::from(buf)), (f, remaining - n as u64, key)))
                    }
                    Err(source) => Some((
                        Err(ObjectStoreError::Io {
                            key: key.clone(),
                            source,
                        }),
                        (f, 0, key),
                    )),
                }
            },
        );
        Ok(ObjectStream {
            size,
            body: Box::pin(body),
        })
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, ObjectStoreError> {
        let path = self.path_of(key)?;
        let key = key.to_string();
        self.blocking(move |_| {
            let meta = Self::meta(&key, &path)?;
            if range.start > range.end || range.end > meta.size {
                return Err(ObjectStoreError::BadRange {
                    key,
                    start: range.start,
                    end: range.end,
                    size: meta.size,
                });
            }
            let mut f = File::open(&path).map_err(Self::io(&key))?;
            f.seek(SeekFrom::Start(range.start))
                .map_err(Self::io(&key))?;
            let mut buf = vec![0; (range.end - range.start) as usize];
            f.read_exact(&mut buf).map_err(Self::io(&key))?;
            Ok(Bytes::from(buf))
        })
        .await
    }

    async fn get_to_file(&self, key: &str, path: &Path) -> Result<ObjectMeta, ObjectStoreError> {
        let src = self.path_of(key)?;
        let (key, dest) = (key.to_string(), path.to_path_buf());
        self.blocking(move |_| {
            let meta = Self::meta(&key, &src)?;
            let part = dest.with_extension(format!("part-{}", ulid::Ulid::new()));
            let r = (|| {
                fs::copy(&src, &part)?;
                File::open(&part)?.sync_all()?;
                fs::rename(&part, &dest)
            })();
            if let Err(e) = r {
                let _ = fs::remove_file(&part);
                return Err(Self::io(&key)(e));
            }
            Ok(meta)
        })
        .await
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>, ObjectStoreError> {
        let path = self.path_of(key)?;
        match Self::meta(key, &path) {
            Ok(m) => Ok(Some(m)),
            Err(ObjectStoreError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn delete(&self, key: &str) -> Result<(), ObjectStoreError> {
        let path = self.path_of(key)?;
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ObjectStoreError::Io {
                key: key.to_string(),
                source: e,
            }),
        }
    }

    async fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<ObjectMeta>, Option<String>), ObjectStoreError> {
        let (prefix, after) = (prefix.to_string(), after.map(str::to_string));
        self.blocking(move |s| {
            let mut keys = Vec::new();
            walk(&s.root, &s.root, &mut keys).map_err(|e| ObjectStoreError::Io {
                key: prefix.clone(),
                source: e,
            })?;
            keys.retain(|k| k.starts_with(&prefix) && after.as_ref().is_none_or(|a| k > a));
            keys.sort();
            let limit = limit.max(1);
            let next = (keys.len() > limit).then(|| keys[limit - 1].clone());
            let mut out = Vec::new();
            for k in keys.into_iter().take(limit) {
                let path = s.root.join(&k);
                out.push(Self::meta(&k, &path)?);
            }
            Ok((out, next))
        })
        .await
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let ft = entry.file_type()?;
        if ft.is_dir() {
            walk(root, &entry.path(), out)?;
        } else if ft.is_file()
            && let Ok(rel) = entry.path().strip_prefix(root)
            && let Some(s) = rel.to_str()
        {
            out.push(s.to_string());
        }
    }
    Ok(())
}
