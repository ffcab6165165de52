//! The orchestrator's launcher: heavy tasks as AWS Batch jobs.

use async_trait::async_trait;
use tessera_aws::BatchLauncher;
use tessera_core::task::Task;
use tessera_engine::TaskError;
use tessera_engine::remote::Launcher;

/// [`BatchLauncher`] behind the engine's launcher port.
pub struct BatchLaunch(pub BatchLauncher);

#[async_trait]
impl Launcher for BatchLaunch {
    async fn launch(&self, task: &Task) -> Result<String, TaskError> {
        self.0
            .submit(task)
            .await
            .map_err(TaskError::from_classified)
    }
}
