//! The mapping stage's last look at photos in no model: registered into the largest
//! with its poses held, at fewer pose inliers than the mapper asks
//! (`tessera_sfm::backend::LAST_LOOK_ABS_POSE_MIN_INLIERS`). Photos of the other
//! sub-models are not offered it: one weak pose could pull another scene in.

use super::*;

/// What the last look did.
pub(super) struct LastLook {
    /// The model with the photos it placed, when it is better than the largest.
    pub joined: Option<(PathBuf, metrics::ModelMetrics)>,
    /// For the stage's result: how many photos were looked at, and what came of it.
    pub report: Value,
}

impl Run<'_> {
    /// `None` where every photo is in some model, or the engine offers no last look.
    pub(super) async fn last_look(
        &self,
        backend: &dyn EngineBackend,
        db: &Path,
        dir: &Path,
        photos: &[PhotoFacts],
        submodels: &[(PathBuf, metrics::ModelMetrics)],
        largest: &metrics::ModelMetrics,
    ) -> Result<Option<LastLook>, TaskError> {
        let Some((primary, _)) = submodels.first() else {
            return Ok(None);
        };
        if !backend.info().capabilities.contains("relocalize.last_look") {
            return Ok(None);
        }
        // Each model's photos read once: the primary's are also the list's first part.
        let primary_names = model_names(primary)?;
        let mut in_a_model = primary_names.clone();
        for (path, _) in &submodels[1..] {
            in_a_model.extend(model_names(path)?);
        }
        let orphans: Vec<String> = left_out(photos, &in_a_model);
        if orphans.is_empty() {
            return Ok(None);
        }
        let list = dir.join("last_look.txt");
        let names: Vec<String> = primary_names
            .into_iter()
            .chain(orphans.iter().cloned())
            .collect();
        std::fs::write(&list, names.join("\n") + "\n")
            .map_err(io("writing the last look's photo list"))?;
        let out = dir.join("last_look");
        fresh_dir(&out)?;
        // Optional like the join: any failure but a cancel leaves the largest model.
        let outcome = self
            .register_optionally(
                backend.register_left_out(db, primary, &out, &list),
                &out,
                photos.len(),
                "the last look at the photos in no model",
            )
            .await?
            .map(|r| (out.clone(), metrics::compute(&r)));
        let gained = outcome
            .as_ref()
            .is_some_and(|(_, m)| joined_is_better(largest, m));
        let placed = match &outcome {
            Some((_, m)) if gained => m.registered_images - largest.registered_images,
            _ => 0,
        };
        self.ctx
            .emit(EventKind::LogLine {
                line: format!(
                    "map: a last look at the {} photos in no model ({}) placed {placed}",
                    orphans.len(),
                    names_in_brief(&orphans, 10)
                ),
            })
            .await?;
        Ok(Some(LastLook {
            report: json!({
                "photos": orphans.len(),
                "placed": placed,
                "min_pose_inliers": tessera_sfm::backend::LAST_LOOK_ABS_POSE_MIN_INLIERS,
            }),
            joined: outcome.filter(|_| gained),
        }))
    }
}
