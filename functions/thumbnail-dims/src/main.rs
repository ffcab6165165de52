//! The `thumbnail-dims` function: consumes the `thumbnail-dims` queue
//! and runs each task through the engine.

use tessera_lambda::{Function, Role, routes};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    tessera_lambda::logging::init();
    let function =
        Function::from_env(routes::THUMBNAIL_DIMS, tessera_jobs::registry(), Role::Run).await?;
    tessera_lambda::serve_sqs(function).await
}
