//! One cluster of a split run: its share of the photos, cut by every cluster task the
//! same way from the ingest's photos and the verified matches ([`crate::reconstruct::split`]),
//! mapped on its own. A cluster that maps nothing seals a checkpoint that says so; the
//! merge reports it, and its photos are named among those left out.

use super::*;
use crate::reconstruct::split::{self, Member};

impl Run<'_> {
    pub(super) async fn map_cluster(&self) -> Result<Value, TaskError> {
        let task = self.ctx.task().name.clone();
        let payload = &self.ctx.task().payload;
        let (Some(index), Some(count)) =
            (payload["cluster"].as_u64(), payload["clusters"].as_u64())
        else {
            return Err(TaskError::permanent(format!(
                "task `{task}` names no cluster; submit the reconstruction again"
            )));
        };
        let (index, count) = (index as usize, count as usize);
        let Some(settings) = self.spec.split else {
            return Err(TaskError::permanent(format!(
                "task `{task}` maps a cluster of a run whose spec has no split"
            )));
        };
        let backend = backend_for(&self.spec.backend)?;
        let photos = Self::photos(&self.upstream(Stage::Ingest).await?)?;
        let dir = self.scratch.join(&task);
        std::fs::create_dir_all(&dir).map_err(io("creating the cluster's folder"))?;
        // Fewer photos passed ingest than were planned for: the clusters are cut for the
        // photos there are, and a cluster beyond them has nothing to map.
        let count = split::clusters_used(count, settings, photos.len());
        let mut result = json!({
            "cluster": index,
            "clusters": count,
            "core": [],
            "shared": [],
            "model": null,
        });
        if index >= count {
            result["unused"] = json!(true);
            return self.seal_cluster(&task, &dir, &[], result).await;
        }
        let matched = self.upstream(Stage::Match).await?;
        let db = self.database_from(&matched, &dir).await?;
        let graph = tessera_sfm::colmap::database::verified_pairs(&db)
            .map_err(TaskError::from_classified)?;
        let (clusters, cut_by) =
            split::partition(&members(&photos), &graph, count, settings.overlap as usize);
        result["cut_by"] = json!(cut_by);
        let Some(cluster) = clusters.get(index) else {
            result["unused"] = json!(true);
            return self.seal_cluster(&task, &dir, &[], result).await;
        };
        result["core"] = json!(cluster.core);
        result["shared"] = json!(cluster.shared);
        let names = cluster.photos();
        // Its own photos only, in a folder of its own: clusters map side by side.
        let images = dir.join("images");
        let own: BTreeSet<String> = names.iter().cloned().collect();
        self.ensure_images_in(&images, &photos, Some(&own)).await?;
        let list = dir.join("image_list.txt");
        std::fs::write(&list, names.join("\n")).map_err(io("writing the cluster's photo list"))?;
        let sparse = dir.join("sparse");
        fresh_dir(&sparse)?;
        self.ctx
            .emit(EventKind::LogLine {
                line: format!(
                    "{task}: mapping {} photos ({} its own, {} shared with its neighbours; cut by {})",
                    names.len(),
                    cluster.core.len(),
                    cluster.shared.len(),
                    serde_json::to_value(cut_by).expect("serializable").as_str().unwrap_or("")
                ),
            })
            .await?;
        let run = self
            .exec(
                backend.map_subset(&db, &images, &sparse, &list),
                Phase::IncrementalRegister,
                Some(names.len() as u64),
            )
            .await;
        let report = match run {
            Ok(mut r) => Some(r.remove(0)),
            // The mapper exits 1 when it builds no model: the merge reports the cluster.
            Err(e)
                if e.class == tessera_core::ErrorClass::Permanent
                    && read_models(&sparse)?.is_empty() =>
            {
                self.ctx
                    .emit(EventKind::Warning {
                        message: format!("{task} built no model: {}", e.message),
                    })
                    .await?;
                None
            }
            Err(e) => return Err(e),
        };
        result["process"] = json!(report.as_ref().map(Self::report_json));
        let mut models = read_models(&sparse)?;
        sort_models(&mut models);
        let Some((best, metrics)) = models.into_iter().next() else {
            return self.seal_cluster(&task, &dir, &[], result).await;
        };
        let model_dir = dir.join("model");
        fresh_dir(&model_dir)?;
        for f in MODEL_FILES {
            std::fs::copy(best.join(f), model_dir.join(f)).map_err(io(format!("copying {f}")))?;
        }
        result["model"] = json!(metrics);
        let files: Vec<String> = MODEL_FILES.iter().map(|f| format!("model/{f}")).collect();
        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
        self.seal_cluster(&task, &dir, &refs, result).await
    }

    /// Seal the cluster's checkpoint, then drop its folder: the cluster's copy of the
    /// database and its photos would otherwise stay on the disk once per cluster until
    /// the job ends.
    async fn seal_cluster(
        &self,
        task: &str,
        dir: &Path,
        files: &[&str],
        result: Value,
    ) -> Result<Value, TaskError> {
        let sealed = self.publish_task(task, dir, files, result).await?;
        if let Err(e) = std::fs::remove_dir_all(dir) {
            tracing::debug!(task = %task, error = %e, "the cluster's scratch folder stays");
        }
        Ok(sealed)
    }
}

/// The photos as the cut sees them.
fn members(photos: &[PhotoFacts]) -> Vec<Member> {
    crate::reconstruct::geo::east_north(photos)
        .into_iter()
        .map(|(name, position)| Member { name, position })
        .collect()
}
