//! The map stage of a split run: the clusters' models joined through the photos they
//! share (`tessera_sfm::merge`), their points triangulated again from the database with
//! the joined poses held, the photos standing far from their GPS placed again
//! (`merge_placement`), and sealed as the run's model, so bundle adjustment,
//! georeferencing and the exports run on it as on a model from one mapper run. A cluster
//! that cannot be joined is kept as a sub-model and reported, never dropped.

use super::*;
use tessera_sfm::merge;

impl Run<'_> {
    pub(super) async fn merge_clusters(&self, count: usize) -> Result<Value, TaskError> {
        let backend = backend_for(&self.spec.backend)?;
        let (images, photos) = self.ensure_images().await?;
        let matched = self.upstream(Stage::Match).await?;
        let dir = self.scratch.join("map");
        fresh_dir(&dir)?;
        let db = self.database_from(&matched, &dir).await?;
        let started = self.ctx.phase_started(Phase::HierarchicalMerge).await?;
        let settings = self.spec.split.ok_or_else(|| {
            TaskError::permanent("the map task merges clusters of a run whose spec has no split")
        })?;
        // The rule every cluster task cut by: clusters beyond the photos that passed
        // ingest mapped nothing and are not reported.
        let count = crate::reconstruct::split::clusters_used(count, settings, photos.len());
        let mut parts = Vec::new();
        let mut clusters = Vec::new();
        for i in 0..count {
            let cp = self.upstream_task(&Stage::cluster_task(i)).await?;
            let mut report = json!({
                "cluster": i,
                "photos": cp.result["core"].as_array().map_or(0, Vec::len)
                    + cp.result["shared"].as_array().map_or(0, Vec::len),
                "registered": cp.result["model"]["registered_images"],
                "cut_by": cp.result["cut_by"],
            });
            if cp.files.iter().any(|f| f.name == "model/images.bin") {
                let to = dir.join(format!("clusters/{i}"));
                fresh_dir(&to)?;
                for f in MODEL_FILES {
                    checkpoint::materialize(
                        self.ctx.ports().objects.as_ref(),
                        self.job,
                        &cp,
                        &format!("model/{f}"),
                        &to,
                    )
                    .await?;
                }
                parts.push((
                    i,
                    model_bin::read(&to.join("model")).map_err(TaskError::from_classified)?,
                ));
            } else {
                report["joined"] = json!(false);
                report["why"] = json!("it built no model");
            }
            clusters.push(report);
        }
        let Some(mut merged) = merge::merge(parts) else {
            return Err(TaskError::permanent(format!(
                "none of the {count} clusters registered any of the {} photos: no initial pair with enough overlap was found in any",
                photos.len()
            )));
        };
        for j in &merged.joined {
            clusters[j.cluster]["joined"] = json!(true);
            clusters[j.cluster]["join"] = json!(j);
        }
        clusters[merged.base]["joined"] = json!(true);
        clusters[merged.base]["base"] = json!(true);
        for a in &merged.apart {
            clusters[a.cluster]["joined"] = json!(false);
            clusters[a.cluster]["why"] = json!(a.why);
            self.ctx
                .emit(EventKind::Warning {
                    message: format!(
                        "cluster {} ({} photos registered) is not joined: {}",
                        a.cluster,
                        a.model.images.len(),
                        a.why
                    ),
                })
                .await?;
        }
        self.ctx
            .emit(EventKind::LogLine {
                line: format!(
                    "map: joined {} of {count} clusters into {} photos; triangulating again with the joined poses",
                    merged.joined.len() + 1,
                    merged.model.images.len()
                ),
            })
            .await?;
        if crate::photos::fault::injected(crate::photos::fault::MISPLACE_AFTER_JOIN) {
            super::merge_placement::misplace_first(&mut merged.model);
        }
        let posed = dir.join("posed");
        fresh_dir(&posed)?;
        model_bin::write(&merged.model, &posed).map_err(TaskError::from_classified)?;
        let triangulated = dir.join("triangulated");
        fresh_dir(&triangulated)?;
        let report = self
            .exec(
                backend.triangulate(&db, &images, &posed, &triangulated),
                Phase::Triangulate,
                None,
            )
            .await?
            .remove(0);
        let mut model = model_bin::read(&triangulated).map_err(TaskError::from_classified)?;
        let mut registered_after_join = None;
        if model.images.len() < photos.len() {
            // Photos of clusters kept apart, or that their cluster did not register:
            // the registrator places them against the joined model, its poses held.
            // Kept only when it registers more.
            let before = model.images.len();
            let grown = dir.join("registered");
            fresh_dir(&grown)?;
            if let Some(r) = self
                .register_optionally(
                    backend.register_images(&db, &triangulated, &grown),
                    &grown,
                    photos.len(),
                    "registering the photos the joined clusters lack",
                )
                .await?
                && r.images.len() > before
            {
                registered_after_join = Some(r.images.len() - before);
                model = r;
            }
        }
        let (model, placement) = self.place_again_by_gps(&db, &dir, &photos, model).await?;
        let primary = metrics::compute(&model);
        self.ctx
            .phase_completed(Phase::HierarchicalMerge, started)
            .await?;
        let model_dir = dir.join("model");
        fresh_dir(&model_dir)?;
        model_bin::write(&model, &model_dir).map_err(TaskError::from_classified)?;
        let mut files: Vec<String> = MODEL_FILES.iter().map(|f| format!("model/{f}")).collect();
        let mut submodels = vec![json!({ "idx": 0, "model": primary })];
        // A cluster whose photos the model now holds (registered after the join) is
        // part of it; the others stay sub-models.
        let held: BTreeSet<&str> = model.images.values().map(|i| i.name.as_str()).collect();
        let apart: Vec<&merge::Apart> = merged
            .apart
            .iter()
            .filter(|a| {
                !a.model
                    .images
                    .values()
                    .all(|i| held.contains(i.name.as_str()))
            })
            .collect();
        for (n, a) in apart.iter().enumerate() {
            let idx = n + 1;
            let to = dir.join(format!("submodels/{idx}"));
            fresh_dir(&to)?;
            model_bin::write(&a.model, &to).map_err(TaskError::from_classified)?;
            files.extend(MODEL_FILES.iter().map(|f| format!("submodels/{idx}/{f}")));
            submodels.push(
                json!({ "idx": idx, "cluster": a.cluster, "model": metrics::compute(&a.model) }),
            );
            clusters[a.cluster]["submodel"] = json!(idx);
            self.ctx
                .emit(EventKind::Warning {
                    message: format!(
                        "cluster {} is kept as sub-model {idx}: its photos could not be joined to the model",
                        a.cluster
                    ),
                })
                .await?;
        }
        let left_out = left_out(
            &photos,
            &model.images.values().map(|i| i.name.clone()).collect(),
        );
        if !left_out.is_empty() {
            self.ctx
                .emit(EventKind::Warning {
                    message: format!(
                        "partial result: the merged model registers {} of {} photos ({} clusters kept apart); not in it: {}",
                        primary.registered_images,
                        photos.len(),
                        apart.len(),
                        names_in_brief(&left_out, 20)
                    ),
                })
                .await?;
        }
        self.map_metrics(&primary, submodels.len()).await?;
        let result = json!({
            "model": primary,
            "submodels": submodels,
            "merged": null,
            "split": {
                "clusters": clusters,
                "base": merged.base,
                "joined": merged.joined.len() + 1,
                "registered_after_join": registered_after_join,
                "placement": placement,
            },
            "total_images": photos.len(),
            "left_out": left_out,
            "process": Self::report_json(&report),
        });
        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
        self.publish(Stage::Map, &dir, &refs, result).await
    }
}
