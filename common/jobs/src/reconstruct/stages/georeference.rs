//! The georeference stage: the model aligned to the photos' GPS (east-north-up or ECEF),
//! or, where GPS was chosen rather than asked for and cannot place it, left in its own
//! frame with a warning.

use super::*;

impl Run<'_> {
    pub(super) async fn georeference(&self) -> Result<Value, TaskError> {
        let dir = self.scratch.join("georeference");
        fresh_dir(&dir)?;
        let input = self.model_from(Stage::BundleAdjust, &dir).await?;
        let matched = self.upstream(Stage::Match).await?;
        let db = self.database_from(&matched, &dir).await?;
        let out = dir.join("aligned");
        fresh_dir(&out)?;
        let ecef = matches!(
            self.spec.georef,
            Georef::Gps {
                target_epsg: Some(4978)
            }
        );
        let backend = backend_for(&self.spec.backend)?;
        let run = self
            .exec(
                backend.georegister_gps(&input, &out, &db, ecef),
                Phase::Georeference,
                None,
            )
            .await;
        let unplaced =
            |why: String| format!("COLMAP could not align the model to the photos' GPS ({why})");
        let placed = match run {
            Ok(mut r) if out.join("cameras.bin").is_file() => Ok(r.remove(0)),
            Ok(_) => Err(unplaced(
                "too few registered photos with GPS, or GPS too noisy".into(),
            )),
            // A run that cannot be placed, not one that may go better on a retry.
            Err(e) if e.class == tessera_core::ErrorClass::Permanent => Err(unplaced(e.message)),
            Err(e) => return Err(e),
        };
        let report = match placed {
            Ok(report) => report,
            Err(why) if self.spec.georef_if_possible => {
                // Chosen because the photos carry GPS, not asked for: the model stays
                // in its own frame and the run goes on.
                self.ctx
                    .emit(EventKind::Warning {
                        message: format!("{why}; the model stays in its own frame"),
                    })
                    .await?;
                let result = json!({ "frame": "none", "placed": false, "why": why });
                return self
                    .seal_model(Stage::Georeference, &dir, &input, result)
                    .await;
            }
            Err(why) => return Err(TaskError::permanent(why)),
        };
        let before = model_bin::read(&input).map_err(TaskError::from_classified)?;
        let after = model_bin::read(&out).map_err(TaskError::from_classified)?;
        let residual =
            crate::reconstruct::geo::gps_residual(&after, &self.photos_gps().await?, ecef);
        if let Some(r) = residual {
            self.ctx
                .metric("alignment_residual_m", r, Some("m"))
                .await?;
        }
        let frame = if ecef { "ecef" } else { "enu" };
        let result = json!({ "frame": frame, "alignment_residual_m": residual, "registered_before": before.images.len(), "process": Self::report_json(&report) });
        self.seal_model(Stage::Georeference, &dir, &out, result)
            .await
    }

    pub(super) async fn photos_gps(&self) -> Result<Vec<(String, images::Gps)>, TaskError> {
        let photos = Self::photos(&self.upstream(Stage::Ingest).await?)?;
        Ok(photos
            .into_iter()
            .filter_map(|p| Some((p.name, p.gps?)))
            .collect())
    }
}
