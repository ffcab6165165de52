//! The matching stage: the pairs the spec's strategy chooses, matched.

use super::*;
use tessera_sfm::vocab_tree::TreeTraining;

impl Run<'_> {
    pub(super) async fn match_pairs(&self) -> Result<Value, TaskError> {
        let backend = backend_for(&self.spec.backend)?;
        let (_images, photos) = self.ensure_images().await?;
        let extract = self.upstream(Stage::Extract).await?;
        let dir = self.scratch.join("match");
        fresh_dir(&dir)?;
        let db = self.database_from(&extract, &dir).await?;
        let mut training = None;
        let tree = match &self.spec.pairs {
            PairStrategy::VocabTree { tree, .. } => {
                let local = dir.join("vocab_tree.bin");
                match tree {
                    // Only ever an object key (the spec's check): a stage reads no
                    // server path a client could name.
                    Some(key) => {
                        self.ctx.ports().objects.get_to_file(key, &local).await?;
                    }
                    None => {
                        training = Some(TreeTraining::for_set(
                            photos.len() as u64,
                            self.spec.max_features,
                        ));
                    }
                }
                Some(local)
            }
            _ => None,
        };
        let invocations = (|| {
            let mut all = Vec::new();
            if let (Some(t), Some(tree)) = (training, &tree) {
                all.extend(backend.train_vocab_tree(&db, tree, t)?);
            }
            all.extend(backend.match_pairs(&self.spec.pairs, &db, tree.as_deref())?);
            Ok(all)
        })();
        let mut reports = self
            .exec(invocations, Phase::Matching, Some(photos.len() as u64))
            .await?;
        let report = reports
            .pop()
            .ok_or_else(|| TaskError::permanent("the engine gave no matcher to run"))?;
        let stats = backend
            .database_stats(&db)
            .map_err(TaskError::from_classified)?;
        if stats.matched_pairs == 0 {
            return Err(TaskError::permanent(
                "no pair of photos matched: they do not overlap, or the pair strategy chose no pairs (try `--pairs exhaustive`)",
            ));
        }
        self.ctx
            .metric("matched_pairs", stats.matched_pairs as f64, None)
            .await?;
        let mut result = json!({ "database": stats, "process": Self::report_json(&report) });
        if let (Some(t), Some(trained)) = (training, reports.first()) {
            result["vocab_tree"] = json!({
                "trained": t.describe(),
                "words": t.words,
                "descriptors": t.descriptors,
                "process": Self::report_json(trained),
            });
        }
        self.publish(Stage::Match, &dir, &["database.db"], result)
            .await
    }
}
