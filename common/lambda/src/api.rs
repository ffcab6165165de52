//! The `api` function: the same axum router as `tessera serve`, on the AWS adapters,
//! behind a Lambda function URL with response streaming (so SSE progress streams).

use crate::Function;
use std::sync::Arc;
use tessera_api::{ApiState, AuthMode};
use tessera_jobs::photos::FaceService;

/// The COLMAP the Batch worker image carries, which decides the reconstruction
/// capabilities the API declares: `TESSERA_BACKEND_VERSION` (default `3.8`) and
/// `TESSERA_BACKEND_CUDA` (`1` for the GPU image, the default).
pub fn backend_from_env() -> (String, bool) {
    let version = std::env::var("TESSERA_BACKEND_VERSION").unwrap_or_else(|_| "3.8".into());
    let cuda = std::env::var("TESSERA_BACKEND_CUDA").map_or(true, |v| v == "1");
    (version, cuda)
}

/// The router's state on `function`'s engine. On AWS every caller needs an API key
/// (`tessera aws create-key` makes the first admin key).
pub fn state(function: &Function, faces: Arc<FaceService>, backend: (String, bool)) -> ApiState {
    let (version, cuda) = backend;
    ApiState {
        engine: function.engine.clone(),
        auth: AuthMode::ApiKey,
        capabilities: tessera_sfm::colmap::capabilities(&version, cuda)
            .into_iter()
            .collect(),
        backend: ("colmap".into(), version),
        faces: Some(faces),
        workers: None,
        sources: tessera_api::sources::Sources(vec![Arc::new(crate::s3_source::S3Source::new(
            function.adapters.objects.client().clone(),
            function.adapters.objects.bucket(),
            function.engine.ports().store.clone(),
        ))]),
        browser: tessera_api::browser::BrowserPolicy::from_env(),
        response_limit: Some(tessera_api::LAMBDA_RESPONSE_LIMIT),
    }
}
