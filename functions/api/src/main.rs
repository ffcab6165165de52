//! The `api` function: the HTTP API (sfmapi v1 and the x-tessera privacy extension),
//! the same router `tessera serve` runs, on the AWS adapters. Submissions become jobs
//! whose tasks go to the other functions' queues; events stream back as SSE through
//! Lambda response streaming.

use tessera_lambda::{Function, Role, routes};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    tessera_lambda::logging::init();
    let faces = tessera_lambda::face_service()?;
    let function = Function::from_env(
        routes::STAGE_RUNNER,
        tessera_jobs::registry_with(faces.clone()),
        Role::Run,
    )
    .await?;
    let state =
        tessera_lambda::api::state(&function, faces, tessera_lambda::api::backend_from_env());
    tessera_lambda::on_shutdown().await;
    lambda_http::run_with_streaming_response(tessera_api::router(state)).await
}
