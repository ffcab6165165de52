//! The matching stage: the pairs the spec's strategy chooses, matched.

use super::*;

impl Run<'_> {
    pub(super) async fn match_pairs(&self) -> Result<Value, TaskError> {
        let backend = backend_for(&self.spec.backend)?;
        let (_images, photos) = self.ensure_images().await?;
        let extract = self.upstream(Stage::Extract).await?;
        let dir = self.scratch.join("match");
        fresh_dir(&dir)?;
        let db = self.database_from(&extract, &dir).await?;
        let tree = match &self.spec.pairs {
            PairStrategy::VocabTree { tree, .. } => {
                let local = dir.join("vocab_tree.bin");
                if Path::new(tree).is_file() {
                    std::fs::copy(tree, &local)
                        .map_err(io(format!("copying vocabulary tree {tree}")))?;
                } else {
                    self.ctx.ports().objects.get_to_file(tree, &local).await?;
                }
                Some(local)
            }
            _ => None,
        };
        let invocations = backend.match_pairs(&self.spec.pairs, &db, tree.as_deref());
        let report = self
            .exec(invocations, Phase::Matching, Some(photos.len() as u64))
            .await?
            .remove(0);
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
        let result = json!({ "database": stats, "process": Self::report_json(&report) });
        self.publish(Stage::Match, &dir, &["database.db"], result)
            .await
    }
}
