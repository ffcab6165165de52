//! The HTTP API: one axum router over the engine and its ports, so `tessera serve` (and,
//! later, the api Lambda) answer the same requests the same way.
//!
//! It follows the sfmapi v1 wire conventions: `application/problem+json` errors, AIP-158
//! pagination, `_links`, `202 + Location` for submissions, SSE progress resumable from
//! `Last-Event-ID`, and tenancy on every read and write (another tenant's resource is a
//! 404). This is the core subset: meta, capabilities, projects, jobs, events and API keys.
#![deny(missing_docs)]

pub mod auth;
pub mod browser;
pub mod bytes;
pub mod console;
pub mod metrics;
pub mod problem;
pub mod routes;
pub mod server;
pub mod sources;

use axum::Router;
use tessera_engine::Engine;

pub use auth::AuthMode;
pub use problem::Problem;

/// What every handler can reach.
#[derive(Clone)]
pub struct ApiState {
    /// The engine (and through it the ports).
    pub engine: Engine,
    /// How callers are identified.
    pub auth: AuthMode,
    /// Capabilities the reconstruction backend declares (sfmapi names).
    pub capabilities: Vec<String>,
    /// The backend's name and version, for `/v1/capabilities`.
    pub backend: (String, String),
    /// Face models for enrolling opted-out people (loaded on first use).
    pub faces: Option<std::sync::Arc<tessera_jobs::photos::FaceService>>,
    /// Dataset sources besides uploads that this server offers (`local`, `s3`).
    pub sources: sources::Sources,
    /// Which web pages and host names may call this server.
    pub browser: browser::BrowserPolicy,
    /// The worker loop this process runs beside the API (`tessera serve` without
    /// `--no-workers`), which `/healthz` and `/readyz` report; `None` where workers run
    /// elsewhere (the `api` function, `--no-workers`).
    pub workers: Option<tessera_engine::LoopHealth>,
    /// The most bytes one answer carries from the object store; a larger file is a
    /// redirect to a presigned URL ([`bytes::serve_object`]). `None` on `tessera serve`;
    /// the `api` function's is [`LAMBDA_RESPONSE_LIMIT`].
    pub response_limit: Option<u64>,
}

/// The `api` function's answers carry at most this many bytes of a stored file; larger
/// ones are redirected to S3. Lambda streams a function URL's answer at full speed for
/// its first 6 MB only, then at a capped bandwidth (and up to 200 MB), billing the
/// function for every second of it; S3 serves the rest faster and for nothing.
pub const LAMBDA_RESPONSE_LIMIT: u64 = 6_000_000;

/// The engine this machine's server plans reconstructions for, as `(name, version)` and
/// its capabilities: pycolmap (COLMAP 4) where installed, else the COLMAP command line
/// (`TESSERA_ENGINE` chooses); `("none", "")` and no capabilities when neither runs.
pub fn detected_engine() -> ((String, String), Vec<String>) {
    match tessera_jobs::reconstruct::stages::backend() {
        Ok(b) => {
            let info = b.info().clone();
            (
                (info.name, info.version),
                info.capabilities.into_iter().collect(),
            )
        }
        Err(e) => {
            tracing::warn!(error = %e.message, "no engine: reconstruction capabilities are off");
            (("none".to_string(), String::new()), Vec::new())
        }
    }
}

/// The router.
pub fn router(state: ApiState) -> Router {
    routes::router(state)
}
