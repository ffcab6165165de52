//! Health, readiness, version and capabilities.

use crate::ApiState;
use crate::problem::Problem;
use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use tessera_core::ports::state_store::{Index, Query};

/// The process is up.
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// The state store answers.
pub async fn readyz(State(s): State<ApiState>) -> Result<Json<Value>, Problem> {
    s.engine
        .ports()
        .store
        .query(&Query::partition(Index::Table, "READYZ", 1))
        .await
        .map_err(|e| Problem::unavailable(format!("state store: {e}")))?;
    Ok(Json(json!({ "status": "ready" })))
}

/// Server and API version.
pub async fn version() -> Json<Value> {
    Json(json!({ "server": "tessera", "version": env!("CARGO_PKG_VERSION"), "api": "v1" }))
}

/// The CORE features every server has, and the backend's optional ones.
pub async fn capabilities(State(s): State<ApiState>) -> Json<Value> {
    let mut features = serde_json::Map::new();
    for core in ["projects.crud", "jobs.read", "events.sse"] {
        features.insert(core.into(), true.into());
    }
    for src in &s.sources.0 {
        features.insert(format!("sources.{}", src.kind()), true.into());
    }
    for c in &s.capabilities {
        features.insert(c.replace("two-stage", "two_stage"), true.into());
    }
    Json(json!({
        "backend": { "name": s.backend.0, "version": s.backend.1, "vendor": "tessera" },
        "features": features,
    }))
}

/// `GET /metrics` (Prometheus text format).
pub async fn metrics(State(s): State<ApiState>) -> axum::response::Response {
    use axum::response::IntoResponse;
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
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        crate::metrics::render(&queues),
    )
        .into_response()
}
