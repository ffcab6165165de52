//! The `orchestrator` function: heavy tasks arrive on the `orchestrator` queue and are
//! launched as AWS Batch jobs (queue and definition per resource class); Batch job
//! state changes arrive on the same queue through EventBridge and close what a failed
//! job left open. Light tasks never come here: they are routed to their functions.

use std::sync::Arc;
use tessera_lambda::launch::BatchLaunch;
use tessera_lambda::{Function, Role, routes};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    tessera_lambda::logging::init();
    let settings = tessera_aws::AwsSettings::from_env()?;
    let sdk = settings.sdk_config().await;
    let launcher = tessera_aws::BatchLauncher::new(
        tessera_aws::batch::client(&sdk),
        tessera_aws::BatchLauncher::targets_from_env(),
    );
    let function = Function::connect(
        &settings,
        routes::ORCHESTRATOR,
        tessera_jobs::registry(),
        Role::Launch(Arc::new(BatchLaunch(launcher))),
    )
    .await;
    tessera_lambda::serve_sqs(function).await
}
