//! The export stage: the final model in every format the spec asks for, the mapper's
//! other sub-models, and a zip of the model.

use super::*;
use tessera_core::crs::EarthPlacement;
use tessera_core::spec::ExportFormat;

/// Write `rec` into `dir` as `sparse/0` (COLMAP binary, always) and each requested
/// format, the survey formats placed by `placement`; returns the files written,
/// relative to `dir`.
pub fn write_exports(
    rec: &tessera_sfm::Reconstruction,
    dir: &Path,
    formats: &[tessera_core::spec::ExportFormat],
    placement: &EarthPlacement,
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
            F::Las | F::Laz => {
                let name = if *format == F::Laz {
                    "model.laz"
                } else {
                    "model.las"
                };
                tessera_sfm::export::write_las(rec, placement, *format == F::Laz, &dir.join(name))
                    .map_err(TaskError::from_classified)?;
                files.push(name.into());
            }
            F::CamerasGeojson => {
                tessera_sfm::export::write_cameras_geojson(
                    rec,
                    placement,
                    &dir.join("cameras.geojson"),
                )
                .map_err(TaskError::from_classified)?;
                files.push("cameras.geojson".into());
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
    /// Where the survey exports place the model, and the formats to write: a model that
    /// was to be georeferenced only if its GPS allowed and stayed in its own frame gets
    /// its LAS without a coordinate system and no camera GeoJSON, each said in a warning.
    async fn survey_placement(&self) -> Result<(EarthPlacement, Vec<ExportFormat>), TaskError> {
        use tessera_core::spec::ExportFormat as F;
        let formats = self.spec.exports.clone();
        if !formats.iter().any(|f| f.is_survey()) {
            // Nothing is written in a CRS: the model's own frame is all the formats need.
            let own = EarthPlacement::new(tessera_core::crs::ModelFrame::Local, None)
                .map_err(|e| TaskError::permanent(e.to_string()))?;
            return Ok((own, formats));
        }
        let (frame, default_crs) = self.model_frame().await?;
        let placement = EarthPlacement::new(frame, self.spec.crs.or(default_crs))
            .map_err(|e| TaskError::permanent(format!("crs: {e}")))?;
        let mut formats = formats;
        if placement.crs.is_none() {
            formats.retain(|f| *f != F::CamerasGeojson);
            let dropped = self.spec.exports.len() - formats.len();
            self.ctx
                .emit(EventKind::Warning {
                    message: format!(
                        "the model is in its own frame: its LAS/LAZ points carry no coordinate system{}",
                        if dropped > 0 { ", and no camera GeoJSON is written" } else { "" }
                    ),
                })
                .await?;
        }
        Ok((placement, formats))
    }

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
        let (placement, formats) = self.survey_placement().await?;
        let mut files = write_exports(&rec, &dir, &formats, &placement)?;
        files.extend(self.export_submodels(&dir).await?);
        files.extend(crate::reconstruct::model_zip::write(&dir, &files)?);
        let m = metrics::compute(&rec);
        self.ctx.phase_completed(Phase::Export, started).await?;
        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
        let crs = placement
            .crs
            .as_ref()
            .map(|c| json!({ "code": format!("EPSG:{}", c.code), "name": c.name }));
        let result = json!({ "files": files, "model": m, "from": from.name(), "crs": crs, "memory_model": memory::MEASURED_WITH });
        self.publish(Stage::Export, &dir, &refs, result).await
    }
}
