//! Finding the photos in a folder the user names.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

const IMAGE_EXTENSIONS: &[&str] = &[
    "jpg", "jpeg", "png", "tif", "tiff", "webp", "bmp", "gif", "heic", "heif",
];

/// Image files directly in `dir`, sorted by name.
pub fn list_images(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if !dir.exists() {
        bail!(
            "folder {} does not exist; give a folder of photos (the sample is sample/images)",
            dir.display()
        );
    }
    if !dir.is_dir() {
        bail!("{} is not a folder; give a folder of photos", dir.display());
    }
    let mut out = Vec::new();
    for entry in
        std::fs::read_dir(dir).with_context(|| format!("cannot read folder {}", dir.display()))?
    {
        let path = entry?.path();
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        if path.is_file() && ext.is_some_and(|e| IMAGE_EXTENSIONS.contains(&e.as_str())) {
            out.push(path);
        }
    }
    out.sort();
    if out.is_empty() {
        bail!(
            "folder {} holds no photos (looked for {}); add some or pick another folder",
            dir.display(),
            IMAGE_EXTENSIONS.join(", ")
        );
    }
    Ok(out)
}
