//! The `ingest` function: consumes the `uploads` queue (S3 object-created
//! notifications, which become ingest jobs) and the `ingest` queue (ingest and cleanup
//! tasks, run through the engine).

use tessera_lambda::{Function, Role, routes};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    tessera_lambda::logging::init();
    let function = Function::from_env(routes::INGEST, tessera_jobs::registry(), Role::Run).await?;
    tessera_lambda::serve_sqs(function).await
}
