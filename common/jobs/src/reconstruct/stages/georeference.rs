//! The georeference stage: the model aligned to the photos' GPS (east-north-up or ECEF),
//! or, where GPS was chosen rather than asked for and cannot place it, left in its own
//! frame with a warning.

use super::*;
use tessera_core::Classify;
use tessera_core::crs::ModelFrame;
use tessera_core::geodesy::Geodetic;

impl Run<'_> {
    pub(super) async fn georeference(&self) -> Result<Value, TaskError> {
        let dir = self.scratch.join("georeference");
        fresh_dir(&dir)?;
        let input = self.model_from(Stage::BundleAdjust, &dir).await?;
        if let Georef::Gcp { file, target_epsg } = &self.spec.georef {
            return self
                .georeference_by_control(&dir, &input, file, *target_epsg == Some(4978))
                .await;
        }
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
        let gps = self.photos_gps().await?;
        let fit = crate::reconstruct::geo::gps_fit(&after, &gps, ecef);
        if let Some(f) = fit {
            self.ctx
                .metric("alignment_residual_m", f.mean_m, Some("m"))
                .await?;
            self.ctx
                .metric("alignment_residual_median_m", f.median_m, Some("m"))
                .await?;
            if let Some(e) = f.scale_error {
                self.ctx.metric("gps_scale_error", e, None).await?;
            }
        }
        let residual = fit.map(|f| f.mean_m);
        let frame = if ecef { "ecef" } else { "enu" };
        // Where the frame is on the earth: what the survey exports place it by.
        let origin = crate::reconstruct::geo::enu_origin(&gps);
        let result = json!({ "frame": frame, "origin": origin, "alignment_residual_m": residual, "gps_fit": fit, "registered_before": before.images.len(), "process": Self::report_json(&report) });
        self.seal_model(Stage::Georeference, &dir, &out, result)
            .await
    }

    /// The model placed by the ground control file at `key`: in east-north-up metres
    /// around the control points (ECEF if `ecef`), each point's residual in the result.
    async fn georeference_by_control(
        &self,
        dir: &Path,
        input: &Path,
        key: &str,
        ecef: bool,
    ) -> Result<Value, TaskError> {
        let started = self.ctx.phase_started(Phase::Georeference).await?;
        let max = tessera_core::gcp::MAX_BYTES;
        let bytes = match self.ctx.ports().objects.get_at_most(key, max).await {
            Ok(b) => b,
            Err(e) if e.class() != tessera_core::ErrorClass::Transient => {
                return Err(TaskError::permanent(format!(
                    "the ground control file `{key}` cannot be read ({e}); submit the run again with the file"
                )));
            }
            Err(e) => return Err(e.into()),
        };
        let text = std::str::from_utf8(&bytes).map_err(|_| {
            TaskError::permanent(format!(
                "the ground control file `{key}` is not text; give a gcp_list.txt"
            ))
        })?;
        let control = tessera_core::gcp::parse(text)
            .map_err(|e| TaskError::permanent(format!("{key}: {e}")))?;
        let mut rec = model_bin::read(input).map_err(TaskError::from_classified)?;
        let registered = rec.images.len();
        let placed =
            crate::reconstruct::control::place(&mut rec, &control, ecef).map_err(|why| {
                TaskError::permanent(format!("ground control cannot place the model: {why}"))
            })?;
        let out = dir.join("aligned");
        fresh_dir(&out)?;
        model_bin::write(&rec, &out).map_err(TaskError::from_classified)?;
        self.ctx
            .metric("alignment_residual_m", placed.rms_m, Some("m"))
            .await?;
        for p in placed.points.iter().filter(|p| !p.used) {
            self.ctx
                .emit(EventKind::Warning {
                    message: format!(
                        "ground control point `{}` is not used: {}",
                        p.name,
                        p.why.as_deref().unwrap_or("")
                    ),
                })
                .await?;
        }
        self.ctx
            .phase_completed(Phase::Georeference, started)
            .await?;
        let origin = match placed.frame {
            ModelFrame::Enu { origin } | ModelFrame::Ecef { origin } => Some(origin),
            ModelFrame::Local => None,
        };
        let result = json!({
            "frame": if ecef { "ecef" } else { "enu" },
            "origin": origin,
            "by": "ground_control",
            "control_crs": format!("EPSG:{}", control.crs.code),
            "control": placed.points,
            "scale": placed.sim3.scale,
            "alignment_residual_m": placed.rms_m,
            "registered_before": registered,
        });
        self.seal_model(Stage::Georeference, dir, &out, result)
            .await
    }

    /// The frame the georeference stage left the model in, and where it is on the
    /// earth: its `origin` as the stage recorded it, or (a checkpoint from before the
    /// stage recorded one) by the same rule from the photos. With it, the coordinate
    /// system the survey exports default to: a control file's own.
    pub(super) async fn model_frame(
        &self,
    ) -> Result<(ModelFrame, Option<tessera_core::crs::OutputCrs>), TaskError> {
        if self.spec.georef == Georef::None {
            return Ok((ModelFrame::Local, None));
        }
        let cp = self.upstream(Stage::Georeference).await?;
        let default_crs = cp.result["control_crs"]
            .as_str()
            .and_then(|c| c.parse().ok());
        let origin = match serde_json::from_value::<Geodetic>(cp.result["origin"].clone()) {
            Ok(o) => Some(o),
            Err(_) => crate::reconstruct::geo::enu_origin(&self.photos_gps().await?),
        };
        let frame = match (cp.result["frame"].as_str(), origin) {
            (Some("enu"), Some(origin)) => ModelFrame::Enu { origin },
            (Some("ecef"), Some(origin)) => ModelFrame::Ecef { origin },
            _ => ModelFrame::Local,
        };
        Ok((frame, default_crs))
    }

    pub(super) async fn photos_gps(&self) -> Result<Vec<(String, images::Gps)>, TaskError> {
        let photos = Self::photos(&self.upstream(Stage::Ingest).await?)?;
        Ok(photos
            .into_iter()
            .filter_map(|p| Some((p.name, p.gps?)))
            .collect())
    }
}
