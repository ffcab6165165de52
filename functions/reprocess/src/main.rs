//! The `reprocess` function: consumes the `reprocess` queue
//! and runs each task through the engine. The face models load at init with
//! `TESSERA_PRELOAD_FACES=1`, else on the first photo.

use tessera_lambda::{Function, Role, face_service, routes};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    tessera_lambda::logging::init();
    let faces = face_service()?;
    let function = Function::from_env(
        routes::REPROCESS,
        tessera_jobs::registry_with(faces),
        Role::Run,
    )
    .await?;
    tessera_lambda::serve_sqs(function).await
}
