//! Where a dataset's bytes come from besides uploads (sfmapi ImageSource): a folder on
//! the server's disk (`{"kind": "local", "root": …, "recursive": …}`) or an S3 prefix
//! (`{"kind": "s3", "bucket": …, "prefix": …}`). A source is read once, when the
//! dataset is created: every image under it is registered like an upload (content
//! hash, header size, bytes in the object store), so everything after that — stages,
//! snapshots, thumbnails — is the same for every kind of source.
//!
//! A server offers a kind only when it was given an implementation: `tessera serve
//! --local-root DIR` for folders (only under those roots, which the operator chose), the
//! `api` Lambda for S3 (never the stack's own bucket, and only the bucket folders an
//! operator granted to the calling tenant: `tessera_core::catalog::source_grants`).
//! Otherwise the kind answers 501 with its capability.

use crate::problem::Problem;
use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use tessera_core::TenantId;

/// Files larger than this are not images a reconstruction can use.
pub const MAX_SOURCE_FILE: u64 = 200 * 1024 * 1024;
/// Most files one source may register.
pub const MAX_SOURCE_FILES: usize = 10_000;

/// One file of a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// Path below the root or prefix, `/`-separated.
    pub rel_path: String,
    /// Size in bytes.
    pub size: u64,
}

/// A kind of image source.
#[async_trait]
pub trait ImageSource: Send + Sync {
    /// `local` or `s3`.
    fn kind(&self) -> &'static str;
    /// The image files (by extension) of the source described by `spec`, sorted, if
    /// `tenant` may read it.
    async fn list(&self, tenant: &TenantId, spec: &Value) -> Result<Vec<SourceFile>, Problem>;
    /// One file's bytes, if `tenant` may read it.
    async fn read(&self, tenant: &TenantId, spec: &Value, rel_path: &str)
    -> Result<Bytes, Problem>;
}

/// The sources a server offers.
#[derive(Clone, Default)]
pub struct Sources(pub Vec<Arc<dyn ImageSource>>);

impl Sources {
    /// The implementation for `kind`, if offered.
    pub fn get(&self, kind: &str) -> Option<&Arc<dyn ImageSource>> {
        self.0.iter().find(|s| s.kind() == kind)
    }
}

/// Whether a file name looks like an image a reconstruction reads.
pub fn is_image_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    [".jpg", ".jpeg", ".png", ".tif", ".tiff", ".webp"]
        .iter()
        .any(|e| lower.ends_with(e))
}

fn field<'a>(spec: &'a Value, name: &str, kind: &str) -> Result<&'a str, Problem> {
    spec.get(name)
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            Problem::validation(format!("source.{name} is required for a `{kind}` source"))
        })
}

/// Folders on the server's own disk, below the roots it was started with, never inside
/// the folders it withholds.
pub struct LocalFolders {
    roots: Vec<PathBuf>,
    withheld: Vec<PathBuf>,
}

impl LocalFolders {
    /// Allow folders below these roots (each must exist), except the `withheld` folders
    /// and everything below them (each must exist). `tessera serve` withholds its state
    /// folder: its objects are every original unblurred, every subject's reference
    /// photos and variants, and a root over the working folder (where the state is by
    /// default) would otherwise let any key import them as dataset images and read them
    /// back.
    pub fn new(roots: &[PathBuf], withheld: &[PathBuf]) -> std::io::Result<Self> {
        let canonical = |paths: &[PathBuf]| {
            paths
                .iter()
                .map(|r| r.canonicalize())
                .collect::<std::io::Result<Vec<_>>>()
        };
        Ok(LocalFolders {
            roots: canonical(roots)?,
            withheld: canonical(withheld)?,
        })
    }

    fn is_withheld(&self, resolved: &Path) -> bool {
        self.withheld.iter().any(|w| resolved.starts_with(w))
    }

    /// The source's root, resolved, if it lies below an allowed root.
    fn root(&self, spec: &Value) -> Result<PathBuf, Problem> {
        let root = PathBuf::from(field(spec, "root", "local")?);
        if !root.is_absolute() {
            return Err(Problem::validation(format!(
                "source.root `{}` must be an absolute path",
                root.display()
            )));
        }
        let resolved = root.canonicalize().map_err(|e| {
            Problem::validation(format!(
                "source.root `{}` cannot be read: {e}",
                root.display()
            ))
        })?;
        if !self.roots.iter().any(|r| resolved.starts_with(r)) {
            return Err(Problem::validation(format!(
                "source.root `{}` is outside the folders this server may read ({}); start it with --local-root",
                root.display(),
                self.roots
                    .iter()
                    .map(|r| r.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if self.is_withheld(&resolved) {
            return Err(Problem::validation(format!(
                "source.root `{}` is inside this server's own state folder, which no source may read; name a folder of photos",
                root.display()
            )));
        }
        if !resolved.is_dir() {
            return Err(Problem::validation(format!(
                "source.root `{}` is not a folder",
                root.display()
            )));
        }
        Ok(resolved)
    }
}

/// Files under `dir` (recursively or not), as paths relative to `base`, leaving out the
/// `withheld` folders; symbolic links are never followed, so a source cannot reach
/// outside its root (and `base` is canonical, so each folder's path is too).
fn walk(
    base: &Path,
    dir: &Path,
    recursive: bool,
    withheld: &[PathBuf],
    out: &mut Vec<SourceFile>,
) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let path = entry.path();
        if kind.is_dir() && recursive {
            if withheld.iter().any(|w| path.starts_with(w)) {
                continue;
            }
            walk(base, &path, recursive, withheld, out)?;
        } else if kind.is_file() {
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if !is_image_name(name) {
                continue;
            }
            let rel = path
                .strip_prefix(base)
                .expect("below the base")
                .components()
                .filter_map(|c| match c {
                    Component::Normal(s) => s.to_str(),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("/");
            out.push(SourceFile {
                rel_path: rel,
                size: entry.metadata()?.len(),
            });
        }
        if out.len() > MAX_SOURCE_FILES {
            return Ok(());
        }
    }
    Ok(())
}

#[async_trait]
impl ImageSource for LocalFolders {
    fn kind(&self) -> &'static str {
        "local"
    }

    async fn list(&self, _tenant: &TenantId, spec: &Value) -> Result<Vec<SourceFile>, Problem> {
        let root = self.root(spec)?;
        let recursive = spec
            .get("recursive")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        let withheld = self.withheld.clone();
        let files = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            walk(&root, &root, recursive, &withheld, &mut out).map(|()| out)
        })
        .await
        .map_err(Problem::internal)?
        .map_err(|e| Problem::validation(format!("source.root cannot be listed: {e}")))?;
        let mut files = files;
        files.sort_by(|a, b| a.rel_path.cmp(&b.rel_path));
        Ok(files)
    }

    async fn read(
        &self,
        _tenant: &TenantId,
        spec: &Value,
        rel_path: &str,
    ) -> Result<Bytes, Problem> {
        let root = self.root(spec)?;
        let path = root.join(rel_path);
        // No symlink in the way: the file must resolve below the root.
        let resolved = path
            .canonicalize()
            .map_err(|e| Problem::validation(format!("`{rel_path}` cannot be read: {e}")))?;
        if !resolved.starts_with(&root) || self.is_withheld(&resolved) {
            return Err(Problem::validation(format!(
                "`{rel_path}` resolves outside source.root, or into this server's state folder"
            )));
        }
        tokio::fs::read(&resolved)
            .await
            .map(Bytes::from)
            .map_err(|e| Problem::validation(format!("`{rel_path}` cannot be read: {e}")))
    }
}

/// The bucket and folder prefix (empty, or ending in `/`) of an `s3` source.
pub fn s3_location(spec: &Value) -> Result<(String, String), Problem> {
    use tessera_core::catalog::source_grants::{check_bucket_name, normalize_prefix};
    let bucket = field(spec, "bucket", "s3")?.to_string();
    check_bucket_name(&bucket)?;
    // A prefix names a folder: `scenes/a` and `scenes/a/` are the same source.
    let prefix = normalize_prefix(spec.get("prefix").and_then(|v| v.as_str()).unwrap_or(""))?;
    Ok((bucket, prefix))
}
