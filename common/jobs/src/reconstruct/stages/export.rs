//! The export stage: the final model in every format the spec asks for, the mapper's
//! other sub-models, and a zip of the model.

use super::*;

/// Write `rec` into `dir` as `sparse/0` (COLMAP binary, always) and each requested
/// format; returns the files written, relative to `dir`.
pub fn write_exports(
    rec: &tessera_sfm::Reconstruction,
    dir: &Path,
    formats: &[tessera_core::spec::ExportFormat],
) -> Result<Vec<String>, TaskError> {
    let mut files: Vec<String> = Vec::new();
    model_bin::write(rec, &dir.join("sparse/0")).map_err(TaskError::from_classified)?;
    files.extend(
        [
            "sparse/0/cameras.bin",
            "sparse/0/images.bin",
            "sparse/0/points3D.bin",
        ]
        .map(String::from),
    );
    use tessera_core::spec::ExportFormat as F;
    for format in formats {
        match format {
            F::ColmapBin => {}
            F::ColmapText => {
                model_text::write(rec, &dir.join("sparse_text/0"))
                    .map_err(TaskError::from_classified)?;
                files.extend(
                    [
                        "sparse_text/0/cameras.txt",
                        "sparse_text/0/images.txt",
                        "sparse_text/0/points3D.txt",
                    ]
                    .map(String::from),
                );
            }
            F::Ply => {
                tessera_sfm::export::write_ply(rec, &dir.join("model.ply"))
                    .map_err(TaskError::from_classified)?;
                files.push("model.ply".into());
            }
            F::Nvm => {
                tessera_sfm::export::write_nvm(rec, &dir.join("model.nvm"))
                    .map_err(TaskError::from_classified)?;
                files.push("model.nvm".into());
            }
            F::PointsBin => {
                tessera_sfm::export::write_points_bin(rec, &dir.join("points.bin"))
                    .map_err(TaskError::from_classified)?;
                files.push("points.bin".into());
            }
        }
    }
    Ok(files)
}

impl Run<'_> {
    /// The mapper's other sub-models (1, 2, …; 0 is the primary in `sparse/0`), as COLMAP
    /// binary models in `sparse/<idx>/`, exactly as the map stage sealed them.
    pub(super) async fn export_submodels(&self, dir: &Path) -> Result<Vec<String>, TaskError> {
        let cp = self.upstream(Stage::Map).await?;
        let mut files = Vec::new();
        let count = cp.result["submodels"].as_array().map_or(0, Vec::len);
        for idx in 1..count {
            let to = dir.join(format!("sparse/{idx}"));
            fresh_dir(&to)?;
            for f in ["cameras.bin", "images.bin", "points3D.bin"] {
                let name = format!("submodels/{idx}/{f}");
                checkpoint::materialize(
                    self.ctx.ports().objects.as_ref(),
                    self.job,
                    &cp,
                    &name,
                    dir,
                )
                .await?;
                std::fs::rename(dir.join(&name), to.join(f))
                    .map_err(io(format!("moving sub-model {idx}'s {f}")))?;
                files.push(format!("sparse/{idx}/{f}"));
            }
        }
        Ok(files)
    }

    pub(super) async fn export(&self) -> Result<Value, TaskError> {
        let dir = self.scratch.join("export");
        fresh_dir(&dir)?;
        let from = if self.spec.georef != Georef::None {
            Stage::Georeference
        } else {
            Stage::BundleAdjust
        };
        let input = self.model_from(from, &dir).await?;
        let started = self.ctx.phase_started(Phase::Export).await?;
        let rec = model_bin::read(&input).map_err(TaskError::from_classified)?;
        let mut files = write_exports(&rec, &dir, &self.spec.exports)?;
        files.extend(self.export_submodels(&dir).await?);
        files.extend(crate::reconstruct::model_zip::write(&dir, &files)?);
        let m = metrics::compute(&rec);
        self.ctx.phase_completed(Phase::Export, started).await?;
        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
        let result = json!({ "files": files, "model": m, "from": from.name(), "memory_model": memory::MEASURED_WITH });
        self.publish(Stage::Export, &dir, &refs, result).await
    }
}
