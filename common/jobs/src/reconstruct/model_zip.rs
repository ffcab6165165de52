//! A run's COLMAP model as one download: every file under `sparse/` (the model and the
//! sub-models the mapper could not join) and `sparse_text/`, in the folders COLMAP
//! reads, in one zip. Files are deflated and dated 1980-01-01, so the same model makes
//! the same bytes (and the same checksum) every time.

use super::stages::io;
use std::io::Write;
use std::path::Path;
use tessera_engine::TaskError;

/// The zip's name among a stage's files.
pub const NAME: &str = "colmap-model.zip";

/// Zip the model files among `files` (relative to `dir`) into `dir/NAME`; answers its
/// name, or `None` when there is no model file to zip.
pub fn write(dir: &Path, files: &[String]) -> Result<Option<String>, TaskError> {
    let members: Vec<&String> = files
        .iter()
        .filter(|f| f.starts_with("sparse/") || f.starts_with("sparse_text/"))
        .collect();
    if members.is_empty() {
        return Ok(None);
    }
    let path = dir.join(NAME);
    let out = std::fs::File::create(&path).map_err(io(format!("creating {}", path.display())))?;
    let mut zip = zip::ZipWriter::new(std::io::BufWriter::new(out));
    let failed = |e: zip::result::ZipError| TaskError::transient(format!("writing {NAME}: {e}"));
    for name in members {
        let file = dir.join(name);
        let size = std::fs::metadata(&file)
            .map_err(io(format!("reading {}", file.display())))?
            .len();
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .last_modified_time(zip::DateTime::default())
            // A survey's images.bin can pass 4 GiB: the zip64 fields then.
            .large_file(size >= u64::from(u32::MAX));
        zip.start_file(name.as_str(), options).map_err(failed)?;
        let mut from =
            std::fs::File::open(&file).map_err(io(format!("reading {}", file.display())))?;
        std::io::copy(&mut from, &mut zip).map_err(io(format!("zipping {name}")))?;
    }
    zip.finish()
        .map_err(failed)?
        .flush()
        .map_err(io(format!("writing {NAME}")))?;
    Ok(Some(NAME.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_files_and_only_they_are_zipped_the_same_each_time() {
        let dir = tempfile::tempdir().unwrap();
        let names = [
            "sparse/0/cameras.bin",
            "sparse/1/images.bin",
            "sparse_text/0/cameras.txt",
            "model.ply",
        ];
        for (i, n) in names.iter().enumerate() {
            let p = dir.path().join(n);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, vec![i as u8; 1000 + i]).unwrap();
        }
        let files: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        assert_eq!(write(dir.path(), &files).unwrap().as_deref(), Some(NAME));
        let first = std::fs::read(dir.path().join(NAME)).unwrap();
        let mut archive = zip::ZipArchive::new(std::io::Cursor::new(first.clone())).unwrap();
        let inside: Vec<String> = archive
            .file_names()
            .map(|n| n.unwrap().into_owned())
            .collect();
        assert_eq!(inside, names[..3]);
        let mut cams = Vec::new();
        std::io::Read::read_to_end(
            &mut archive.by_name("sparse/0/cameras.bin").unwrap(),
            &mut cams,
        )
        .unwrap();
        assert_eq!(cams, vec![0u8; 1000]);
        write(dir.path(), &files).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join(NAME)).unwrap(),
            first,
            "deterministic bytes"
        );
        assert_eq!(write(dir.path(), &["model.ply".into()]).unwrap(), None);
    }
}
