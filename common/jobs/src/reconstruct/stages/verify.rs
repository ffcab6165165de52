//! The geometric verification stage.

use super::*;

impl Run<'_> {
    pub(super) async fn verify(&self) -> Result<Value, TaskError> {
        let matched = self.upstream(Stage::Match).await?;
        let dir = self.scratch.join("verify");
        fresh_dir(&dir)?;
        let started = self.ctx.phase_started(Phase::GeometricVerification).await?;
        let db = self.database_from(&matched, &dir).await?;
        let stats = backend_for(&self.spec.backend)?
            .database_stats(&db)
            .map_err(TaskError::from_classified)?;
        if stats.verified_pairs == 0 {
            return Err(TaskError::permanent(format!(
                "none of the {} matched pairs passed geometric verification: the photos do not overlap enough",
                stats.matched_pairs
            )));
        }
        self.ctx
            .metric("verified_pairs", stats.verified_pairs as f64, None)
            .await?;
        self.ctx
            .metric("inlier_matches", stats.inlier_matches as f64, None)
            .await?;
        self.ctx
            .phase_completed(Phase::GeometricVerification, started)
            .await?;
        let result = json!({ "verified_pairs": stats.verified_pairs, "matched_pairs": stats.matched_pairs, "inlier_matches": stats.inlier_matches });
        self.publish(Stage::Verify, &dir, &[], result).await
    }
}
