//! The bundle adjustment stage.

use super::*;

impl Run<'_> {
    pub(super) async fn bundle_adjust(&self) -> Result<Value, TaskError> {
        let dir = self.scratch.join("bundle_adjust");
        fresh_dir(&dir)?;
        let input = self.model_from(Stage::Map, &dir).await?;
        let (mid, out) = (dir.join("pass1"), dir.join("adjusted"));
        fresh_dir(&mid)?;
        fresh_dir(&out)?;
        let backend = backend_for(&self.spec.backend)?;
        let reports: Vec<Value> = self
            .exec(
                backend.bundle_adjust(self.spec.ba, &input, &mid, &out),
                Phase::BundleAdjust,
                None,
            )
            .await?
            .iter()
            .map(Self::report_json)
            .collect();
        let mode = if self.spec.ba == BaMode::TwoStage {
            "two_stage"
        } else {
            "standard"
        };
        self.seal_model(
            Stage::BundleAdjust,
            &dir,
            &out,
            json!({ "mode": mode, "passes": reports }),
        )
        .await
    }
}
