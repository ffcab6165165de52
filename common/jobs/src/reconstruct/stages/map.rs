//! The mapping stage: the mapper the spec names, its snapshots sealed as it goes, and
//! its sub-models kept.

use super::*;

/// The phase a mapper's run reports as: a global mapper's timeline must not say
/// "incremental".
fn map_phase(mapper: tessera_core::spec::MapperKind) -> Phase {
    use tessera_core::spec::MapperKind as M;
    match mapper {
        M::Incremental => Phase::IncrementalRegister,
        M::Global => Phase::GlobalPositioning,
        M::Hierarchical => Phase::HierarchicalCluster,
    }
}

impl Run<'_> {
    pub(super) async fn map(&self) -> Result<Value, TaskError> {
        // A split run's map task merges its clusters' models.
        if let Some(count) = self.ctx.task().payload["clusters"]
            .as_u64()
            .filter(|c| *c > 1)
        {
            return self.merge_clusters(count as usize).await;
        }
        let backend = backend_for(&self.spec.backend)?;
        let (images, photos) = self.ensure_images().await?;
        let matched = self.upstream(Stage::Match).await?;
        let dir = self.scratch.join("map");
        std::fs::create_dir_all(&dir).map_err(io("creating map folder"))?;
        let db = self.database_from(&matched, &dir).await?;
        let sparse = dir.join("sparse");
        fresh_dir(&sparse)?;
        let live = dir.join("snapshots_live");
        fresh_dir(&live)?;
        let resume_from = self.latest_snapshot(&dir).await?;
        if let Some((seq, _)) = &resume_from {
            self.ctx
                .emit(EventKind::LogLine {
                    line: format!("map: continuing from sealed snapshot {seq}"),
                })
                .await?;
        }
        let every = (photos.len() as u32 / 4).clamp(2, 50);
        let resume_path = resume_from.as_ref().map(|(_, p)| p.as_path());
        let invocations = backend.map(
            self.spec.mapper,
            &db,
            &images,
            &sparse,
            &live,
            every,
            resume_path,
            self.spec.split,
        );
        let sealer = self.seal_snapshots(&live, &dir, resume_from.as_ref().map_or(0, |(s, _)| *s));
        let (report, sealed) = {
            let stop = tokio_util::sync::CancellationToken::new();
            let run = async {
                let r = self
                    .exec(
                        invocations,
                        map_phase(self.spec.mapper),
                        Some(photos.len() as u64),
                    )
                    .await
                    .map(|mut r| r.remove(0));
                stop.cancel();
                r
            };
            tokio::join!(run, sealer(stop.clone()))
        };
        let report = match report {
            Ok(r) => Some(r),
            // COLMAP's mapper exits 1 when it builds no model; let the relaxed pass try,
            // and if nothing is built, say so plainly below.
            Err(e)
                if e.class == tessera_core::ErrorClass::Permanent
                    && read_models(&sparse)?.is_empty() =>
            {
                self.ctx
                    .emit(EventKind::Warning { message: e.message })
                    .await?;
                None
            }
            Err(e) => return Err(e),
        };
        let mut models = read_models(&sparse)?;
        let mut relaxed_tried = false;
        if self.spec.mapper == tessera_core::spec::MapperKind::Incremental
            && models
                .first()
                .is_none_or(|(_, m)| m.registered_images < photos.len())
        {
            // COLMAP's default initialisation splits some scenes; one more pass with
            // relaxed thresholds often registers them whole. The better model wins.
            relaxed_tried = true;
            let registered = models.first().map_or(0, |(_, m)| m.registered_images);
            self.ctx
                .emit(EventKind::Warning {
                    message: format!("the mapper registered {registered} of {} photos; trying again with relaxed initialisation", photos.len()),
                })
                .await?;
            let relaxed = dir.join("sparse_relaxed");
            fresh_dir(&relaxed)?;
            let relaxed_run = self
                .exec(
                    backend.map_relaxed(&db, &images, &relaxed),
                    Phase::IncrementalRegister,
                    Some(photos.len() as u64),
                )
                .await;
            match relaxed_run {
                Ok(_) => models.extend(read_models(&relaxed)?),
                // COLMAP's mapper exits 1 when it builds no model at all; the first
                // result stands.
                Err(e) if e.class == tessera_core::ErrorClass::Permanent => {
                    self.ctx
                        .emit(EventKind::Warning {
                            message: format!(
                                "the relaxed pass built nothing better: {}",
                                e.message
                            ),
                        })
                        .await?;
                }
                Err(e) => return Err(e),
            }
        }
        sort_models(&mut models);
        let Some((best, best_metrics)) = models.first().cloned() else {
            return Err(TaskError::permanent(format!(
                "the mapper registered none of the {} photos: no initial pair with enough overlap was found",
                photos.len()
            )));
        };
        // The sub-models are the models of the run that built the largest (a relaxed
        // pass re-maps the same photos: its models are alternatives, not parts).
        let mut submodels: Vec<(PathBuf, metrics::ModelMetrics)> = models
            .iter()
            .filter(|(p, _)| p.parent() == best.parent())
            .cloned()
            .collect();
        let (mut primary, mut primary_metrics) = (best, best_metrics);
        let mut merged = None;
        if submodels.len() > 1 && primary_metrics.registered_images < photos.len() {
            // Try joining the other sub-models' photos to the largest: the registrator
            // places them against its points with its poses held. Kept only when it
            // registers more.
            let joined = dir.join("merged");
            fresh_dir(&joined)?;
            let outcome = self
                .register_optionally(
                    backend.register_images(&db, &primary, &joined),
                    &joined,
                    photos.len(),
                    "joining the sub-models",
                )
                .await?
                .map(|r| (joined.clone(), metrics::compute(&r)));
            let gained = outcome
                .as_ref()
                .is_some_and(|(_, m)| joined_is_better(&primary_metrics, m));
            self.ctx
                .emit(EventKind::LogLine {
                    line: format!(
                        "map: joining the {} sub-models {}",
                        submodels.len(),
                        match &outcome {
                            Some((_, m)) if gained => format!(
                                "registered {} photos instead of {}: the joined model is primary",
                                m.registered_images, primary_metrics.registered_images
                            ),
                            Some((_, m)) => format!(
                                "gave {} photos, {} points, {:.2} px: the largest stays primary",
                                m.registered_images, m.points, m.mean_reprojection_error
                            ),
                            None => "built nothing: the largest stays primary".into(),
                        }
                    ),
                })
                .await?;
            if gained && let Some((p, m)) = outcome {
                merged = Some(json!({
                    "from": submodels.len(),
                    "registered_before": primary_metrics.registered_images,
                    "registered_after": m.registered_images,
                }));
                // A sub-model whose photos the joined model now holds is part of it.
                let held = model_names(&p)?;
                let mut kept = vec![(p.clone(), m.clone())];
                for (path, metrics) in submodels.into_iter().skip(1) {
                    if !model_names(&path)?.is_subset(&held) {
                        kept.push((path, metrics));
                    }
                }
                submodels = kept;
                (primary, primary_metrics) = (p, m);
            }
        }
        let last_look = self
            .last_look(backend, &db, &dir, &photos, &submodels, &primary_metrics)
            .await?;
        if let Some(look) = &last_look
            && let Some((p, m)) = &look.joined
        {
            submodels[0] = (p.clone(), m.clone());
            (primary, primary_metrics) = (p.clone(), m.clone());
        }
        // Named, so a person can see which photo did not fit (a portrait in a drone set)
        // instead of a count that could be any of them.
        let left_out = left_out(&photos, &model_names(&primary)?);
        if primary_metrics.registered_images < photos.len() {
            self.ctx
                .emit(EventKind::Warning {
                    message: format!(
                        "partial result: the largest model registers {} of {} photos ({} sub-models kept, {} models tried in all); not in it: {}",
                        primary_metrics.registered_images,
                        photos.len(),
                        submodels.len(),
                        models.len(),
                        names_in_brief(&left_out, 20)
                    ),
                })
                .await?;
        }
        let model_dir = dir.join("model");
        fresh_dir(&model_dir)?;
        for f in MODEL_FILES {
            std::fs::copy(primary.join(f), model_dir.join(f))
                .map_err(io(format!("copying {f}")))?;
        }
        // Sub-model 0 is the primary (in `model/`); the others are kept beside it.
        let mut files: Vec<String> = MODEL_FILES.iter().map(|f| format!("model/{f}")).collect();
        for (idx, (path, _)) in submodels.iter().enumerate().skip(1) {
            let to = dir.join(format!("submodels/{idx}"));
            fresh_dir(&to)?;
            for f in MODEL_FILES {
                std::fs::copy(path.join(f), to.join(f)).map_err(io(format!("copying {f}")))?;
                files.push(format!("submodels/{idx}/{f}"));
            }
        }
        self.map_metrics(&primary_metrics, submodels.len()).await?;
        let result = json!({
            "model": primary_metrics,
            "submodels": submodels
                .iter()
                .enumerate()
                .map(|(idx, (_, m))| json!({ "idx": idx, "model": m }))
                .collect::<Vec<_>>(),
            "merged": merged,
            "last_look": last_look.as_ref().map(|l| &l.report),
            "models": models.iter().map(|(_, m)| m).collect::<Vec<_>>(),
            "total_images": photos.len(),
            "left_out": left_out,
            "snapshots_sealed": sealed,
            "relaxed_retry": relaxed_tried,
            "resumed_from_snapshot": resume_from.map(|(s, _)| s),
            "process": report.as_ref().map(Self::report_json),
        });
        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
        self.publish(Stage::Map, &dir, &refs, result).await
    }
}
