//! Health, readiness, version and capabilities.

use crate::ApiState;
use crate::problem::Problem;
use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use tessera_core::ports::state_store::{Index, Query};

/// The process is up and, where it runs workers, its worker loop runs: 503 until the loop
/// is entered and once it has left (`tessera serve` then exits, for its supervisor to
/// restart it), so a process that answers HTTP while no job runs is not called healthy.
pub async fn healthz(State(s): State<ApiState>) -> Result<Json<Value>, Problem> {
    workers_running(&s)?;
    Ok(Json(json!({ "status": "ok" })))
}

/// 503 naming why when this process runs workers and their loop does not run.
fn workers_running(s: &ApiState) -> Result<(), Problem> {
    use tessera_engine::LoopState;
    match s.workers.as_ref().map(|w| w.state()) {
        None | Some(LoopState::Running) => Ok(()),
        Some(LoopState::Starting) => {
            Err(Problem::unavailable("the worker loop has not started yet"))
        }
        Some(LoopState::Stopped) => Err(Problem::unavailable(
            "the worker loop has stopped: no job runs in this process",
        )),
    }
}

/// Ready to take work: the state store and the task queue answer, and the workers this
/// process runs are running.
pub async fn readyz(State(s): State<ApiState>) -> Result<Json<Value>, Problem> {
    s.engine
        .ports()
        .store
        .query(&Query::partition(Index::Table, "READYZ", 1))
        .await
        .map_err(|e| Problem::unavailable(format!("state store: {e}")))?;
    let queue = s.engine.config().queue.clone();
    s.engine
        .ports()
        .queue
        .depth(&queue)
        .await
        .map_err(|e| Problem::unavailable(format!("task queue `{queue}`: {e}")))?;
    workers_running(&s)?;
    Ok(Json(json!({ "status": "ready" })))
}

/// Server and API version.
pub async fn version() -> Json<Value> {
    Json(json!({ "server": "tessera", "version": env!("CARGO_PKG_VERSION"), "api": "v1" }))
}

/// `GET /spec`: which specification this server implements (sfmapi §6.1, `spec.read`).
pub async fn spec() -> Json<Value> {
    Json(json!({
        "spec": "sfmapi",
        "spec_version": SPEC_VERSION,
        "spec_url": "https://github.com/SFMAPI/sfmapi/blob/main/SFMAPI-SPEC.md",
        "openapi_url": "/openapi.json",
        "server": { "name": "tessera", "version": env!("CARGO_PKG_VERSION") },
    }))
}

/// The sfmapi version this server implements.
pub const SPEC_VERSION: &str = "v1";

/// sfmapi §3.11's CORE capabilities: every one is served here.
pub const CORE: [&str; 7] = [
    "projects.crud",
    "datasets.crud",
    "images.crud",
    "uploads.chunked",
    "jobs.read",
    "events.sse",
    "spec.read",
];

/// The engine capabilities this API has an endpoint for. A flag is advertised only
/// where a request can use it (§2.1); what the engine offers beyond these (bundle
/// adjustment modes, exports, georegistration, …) runs inside Tessera's own stages and
/// the CLI, not behind an sfmapi endpoint, and is listed under `x-tessera`.
pub const SERVED: [&str; 8] = [
    "features.extract.sift",
    "pairs.exhaustive",
    "pairs.sequential",
    "pairs.spatial",
    "pairs.vocabtree",
    "map.incremental",
    "map.global",
    "map.hierarchical",
];

/// The CORE features, the engine's capabilities this API serves, and (under
/// `x-tessera`) the engine's others and the dataset sources.
pub async fn capabilities(State(s): State<ApiState>) -> Json<Value> {
    let mut features = serde_json::Map::new();
    for core in CORE {
        features.insert(core.into(), true.into());
    }
    let mut engine_only = Vec::new();
    for c in &s.capabilities {
        if SERVED.contains(&c.as_str()) {
            features.insert(c.clone(), true.into());
        } else {
            engine_only.push(c.clone());
        }
    }
    Json(json!({
        "backend": { "name": s.backend.0, "version": s.backend.1, "vendor": "tessera" },
        "features": features,
        "x-tessera": {
            "engine_capabilities": engine_only,
            "sources": s.sources.0.iter().map(|src| src.kind()).collect::<Vec<_>>(),
        },
    }))
}

/// `GET /v1/camera-models`: `Page<CameraModel>`, COLMAP's models in id order.
pub async fn camera_models() -> Json<Value> {
    let items: Vec<Value> = tessera_core::camera::ALL
        .iter()
        .map(|m| {
            json!({
                "name": m.name(), "model_id": m.id(), "num_params": m.num_params(),
                "params": m.param_names(), "fisheye": m.is_fisheye(),
            })
        })
        .collect();
    let total = items.len();
    Json(json!({ "items": items, "next_page_token": null, "total": total }))
}

/// `GET /metrics` (Prometheus text format). It needs an admin key of the operator's
/// tenant, `local` (embedded mode's only tenant; on AWS the default of `tessera aws
/// create-key`): the figures span every tenant of the process (its queues' depths, the
/// traffic of every route), so no other tenant's key, admin or not, may read how busy
/// the others are.
pub async fn metrics(
    State(s): State<ApiState>,
    caller: crate::auth::Caller,
) -> Result<axum::response::Response, Problem> {
    use axum::response::IntoResponse;
    if !caller.admin || caller.tenant != tessera_core::TenantId::local() {
        return Err(Problem::forbidden(
            "/metrics spans every tenant and needs an admin key of the operator's tenant `local`",
        ));
    }
    let engine = &s.engine;
    let mut names: Vec<String> = engine
        .config()
        .routes
        .queues()
        .into_iter()
        .map(String::from)
        .collect();
    names.push(engine.config().queue.clone());
    names.sort();
    names.dedup();
    let mut queues = Vec::new();
    for q in names {
        // A queue that cannot be read right now is left out of this scrape.
        if let Ok(d) = engine.ports().queue.depth(&q).await {
            queues.push((q, d.visible, d.hidden, d.dead));
        }
    }
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        crate::metrics::render(&queues, &tessera_engine::outcomes::snapshot()),
    )
        .into_response())
}
