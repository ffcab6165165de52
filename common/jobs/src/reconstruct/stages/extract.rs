//! The feature extraction stage.

use super::*;

impl Run<'_> {
    pub(super) async fn extract(&self) -> Result<Value, TaskError> {
        let backend = backend_for(&self.spec.backend)?;
        backend
            .info()
            .check_spec(&self.spec)
            .map_err(TaskError::from_classified)?;
        let (images, photos) = self.ensure_images().await?;
        let dir = self.scratch.join("extract");
        fresh_dir(&dir)?;
        let db = dir.join("database.db");
        let sizes: BTreeSet<(u64, u64)> = photos.iter().map(|p| (p.width, p.height)).collect();
        let cameras = tessera_sfm::backend::CameraSharing::of(&self.spec, sizes.len());
        if cameras == tessera_sfm::backend::CameraSharing::Auto {
            self.ctx
                .emit(EventKind::Warning {
                    message: format!(
                        "the photos come in {} sizes, so each photo gets its own intrinsics instead of one shared camera",
                        sizes.len()
                    ),
                })
                .await?;
        }
        let invocations = backend.extract(&self.spec, &db, &images, cameras, None, None);
        let report = self
            .exec(
                invocations,
                Phase::FeatureExtraction,
                Some(photos.len() as u64),
            )
            .await?
            .remove(0);
        let stats = backend
            .database_stats(&db)
            .map_err(TaskError::from_classified)?;
        if (stats.images as usize) < photos.len() {
            self.ctx
                .emit(EventKind::Warning {
                    message: format!(
                        "COLMAP read only {} of the {} photos",
                        stats.images,
                        photos.len()
                    ),
                })
                .await?;
        }
        if stats.images == 0 {
            return Err(TaskError::permanent(format!(
                "COLMAP read none of the {} photos (it exited {:?}); are they decodable images?",
                photos.len(),
                report.exit_code
            )));
        }
        if stats.images_with_keypoints < 2 {
            return Err(TaskError::permanent(format!(
                "COLMAP found features in only {} of {} photos; they may be blank or too small",
                stats.images_with_keypoints, stats.images
            )));
        }
        if !stats.images_without_keypoints.is_empty() {
            self.ctx
                .emit(EventKind::Warning {
                    message: format!(
                        "no features in: {}",
                        stats.images_without_keypoints.join(", ")
                    ),
                })
                .await?;
        }
        self.ctx
            .metric("keypoints", stats.keypoints as f64, None)
            .await?;
        // A correction that cannot be made leaves the engine's prior, which the mapper
        // refines: a warning, not a failed run.
        let corrected = match crate::reconstruct::focal_prior::correct_in(&db, &photos) {
            Ok(c) => c,
            Err(e) => {
                self.ctx
                    .emit(EventKind::Warning {
                        message: format!("the photos' focal prior was left as COLMAP read it: {e}"),
                    })
                    .await?;
                Vec::new()
            }
        };
        for c in &corrected {
            self.ctx
                .emit(EventKind::LogLine {
                    line: format!(
                        "extract: camera {} ({} photos): focal prior {:.0} px is the photos' size as taken; {:.0} px at their size now",
                        c.camera_id, c.photos, c.from_px, c.to_px
                    ),
                })
                .await?;
        }
        let result = json!({ "database": stats, "process": Self::report_json(&report), "colmap_version": backend.info().version, "focal_priors_corrected": corrected });
        self.publish(Stage::Extract, &dir, &["database.db"], result)
            .await
    }
}
