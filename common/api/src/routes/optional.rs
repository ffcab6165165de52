//! sfmapi's OPTIONAL endpoints this server does not offer (§6.9.1–6.9.6): each looks up
//! the resource it names first (so a missing one is still a 404), then answers 501 with
//! the capability a client should look for in `/v1/capabilities`.

use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::extract::{Path, State};
use axum::http::StatusCode;

fn unavailable(capability: &str) -> Problem {
    let mut p = Problem::new(
        StatusCode::NOT_IMPLEMENTED,
        "capability_unavailable",
        format!("capability '{capability}' is not offered by this server; see /v1/capabilities"),
    );
    p.extra.insert("capability".into(), capability.into());
    p
}

/// `GET /v1/datasets/{did}/similarity` and `POST …/similarity:build`.
pub async fn similarity(
    State(s): State<ApiState>,
    caller: Caller,
    Path(did): Path<String>,
) -> Result<(), Problem> {
    super::datasets::owned(&s, &caller, &did).await?;
    Err(unavailable("similarity.dhash"))
}

/// The dataset-level answer for `similarity:build` (routed through the dataset actions).
pub async fn similarity_build(s: &ApiState, caller: &Caller, did: &str) -> Problem {
    match super::datasets::owned(s, caller, did).await {
        Ok(_) => unavailable("similarity.dhash"),
        Err(p) => p,
    }
}

/// `GET|PUT|DELETE /v1/images/{image_id}/pose_prior`.
pub async fn pose_prior(
    State(s): State<ApiState>,
    caller: Caller,
    Path(image_id): Path<String>,
) -> Result<(), Problem> {
    super::datasets::owned_image(&s, &caller, &image_id).await?;
    Err(unavailable("pose_priors.read_write"))
}

/// `GET|PUT /v1/datasets/{did}/pose_priors`.
pub async fn pose_priors(
    State(s): State<ApiState>,
    caller: Caller,
    Path(did): Path<String>,
) -> Result<(), Problem> {
    super::datasets::owned(&s, &caller, &did).await?;
    Err(unavailable("pose_priors.read_write"))
}

/// `POST /v1/reconstructions/{rid}/georegister`.
pub async fn georegister(
    State(s): State<ApiState>,
    caller: Caller,
    Path(rid): Path<String>,
) -> Result<(), Problem> {
    super::reconstructions::owned(&s, &caller, &rid).await?;
    Err(unavailable("georegister.sim3"))
}

/// `POST /v1/reconstructions/{rid}:to_cubemap`.
pub async fn recon_action(
    State(s): State<ApiState>,
    caller: Caller,
    Path(rid_action): Path<String>,
) -> Result<(), Problem> {
    let (rid, action) = rid_action.split_once(':').unwrap_or((&rid_action, ""));
    super::reconstructions::owned(&s, &caller, rid).await?;
    match action {
        "to_cubemap" => Err(unavailable("spherical.to_cubemap")),
        other => Err(Problem::not_found(format!(
            "reconstructions have no action `:{other}`"
        ))),
    }
}

/// `POST /v1/datasets/{did}:render_cubemap`.
pub async fn dataset_action(
    State(s): State<ApiState>,
    caller: Caller,
    Path(did_action): Path<String>,
) -> Result<(), Problem> {
    let (did, action) = did_action.split_once(':').unwrap_or((&did_action, ""));
    super::datasets::owned(&s, &caller, did).await?;
    match action {
        "render_cubemap" => Err(unavailable("spherical.render_cubemap")),
        other => Err(Problem::not_found(format!(
            "datasets have no action `:{other}`"
        ))),
    }
}

/// Octree tiles of a snapshot (`tiles/index.json`, `tiles/{level}/{x}/{y}/{z}.bin`).
pub async fn tiles(
    State(s): State<ApiState>,
    caller: Caller,
    Path(params): Path<Vec<(String, String)>>,
) -> Result<(), Problem> {
    snapshot_capability(&s, &caller, &params, "snapshots.tiles").await
}

/// Per-image observations and per-point visibility of a snapshot.
pub async fn observations(
    State(s): State<ApiState>,
    caller: Caller,
    Path(params): Path<Vec<(String, String)>>,
) -> Result<(), Problem> {
    snapshot_capability(&s, &caller, &params, "snapshots.observations").await
}

async fn snapshot_capability(
    s: &ApiState,
    caller: &Caller,
    params: &[(String, String)],
    capability: &str,
) -> Result<(), Problem> {
    let rid = params
        .iter()
        .find(|(k, _)| k == "recon_id")
        .map(|(_, v)| v.as_str())
        .unwrap_or_default();
    super::reconstructions::owned(s, caller, rid).await?;
    Err(unavailable(capability))
}
