//! sfmapi's OPTIONAL endpoints this server does not offer (§6.9.1–6.9.6): each looks up
//! the resource it names first (so a missing one is still a 404), then answers 501 with
//! the capability a client should look for in `/v1/capabilities`.

use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::extract::{Path, State};

/// `GET /v1/datasets/{did}/similarity` and `POST …/similarity:build`.
pub async fn similarity(
    State(s): State<ApiState>,
    caller: Caller,
    Path(did): Path<String>,
) -> Result<(), Problem> {
    super::datasets::owned(&s, &caller, &did).await?;
    Err(Problem::capability_unavailable("similarity.dhash"))
}

/// The dataset-level answer for `similarity:build` (routed through the dataset actions).
pub async fn similarity_build(s: &ApiState, caller: &Caller, did: &str) -> Problem {
    match super::datasets::owned(s, caller, did).await {
        Ok(_) => Problem::capability_unavailable("similarity.dhash"),
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
    Err(Problem::capability_unavailable("pose_priors.read_write"))
}

/// `GET|PUT /v1/datasets/{did}/pose_priors`.
pub async fn pose_priors(
    State(s): State<ApiState>,
    caller: Caller,
    Path(did): Path<String>,
) -> Result<(), Problem> {
    super::datasets::owned(&s, &caller, &did).await?;
    Err(Problem::capability_unavailable("pose_priors.read_write"))
}

/// `POST /v1/reconstructions/{rid}/georegister`.
pub async fn georegister(
    State(s): State<ApiState>,
    caller: Caller,
    Path(rid): Path<String>,
) -> Result<(), Problem> {
    super::reconstructions::owned(&s, &caller, &rid).await?;
    Err(Problem::capability_unavailable("georegister.sim3"))
}

/// The capability a reconstruction action needs (sfmapi §6.9, §10); `None` for an
/// action the spec does not define. Tessera runs bundle adjustment, re-triangulation,
/// relocalization and exports inside its own stages and CLI, not as actions on a
/// finished reconstruction.
pub fn recon_action_capability(action: &str) -> Option<&'static str> {
    Some(match action {
        "toCubemap" | "to_cubemap" => "projection.equirectangular_to_cubemap",
        "bundleAdjust" => "ba.standard",
        "triangulate" => "triangulate.retri",
        "relocalize" => "relocalize.images",
        "poseGraphOptimize" => "pgo.optimize",
        "export" => "export.colmap_bin",
        "undistort" => "image.undistort",
        _ => return None,
    })
}

/// The capability a dataset action needs; `None` for one the spec does not define.
pub fn dataset_action_capability(action: &str) -> Option<&'static str> {
    Some(match action {
        "renderCubemap" | "render_cubemap" => "projection.equirectangular_to_cubemap",
        "projectImages" => "projection.cubemap_rig",
        "renderEquirectangular" => "projection.cubemap_to_equirectangular",
        "renderPerspective" => "projection.equirectangular_to_perspective",
        _ => return None,
    })
}

/// `POST /v1/reconstructions/{rid}:<action>`.
pub async fn recon_action(
    State(s): State<ApiState>,
    caller: Caller,
    Path(rid_action): Path<String>,
) -> Result<(), Problem> {
    let (rid, action) = rid_action.split_once(':').unwrap_or((&rid_action, ""));
    super::reconstructions::owned(&s, &caller, rid).await?;
    match recon_action_capability(action) {
        Some(c) => Err(Problem::capability_unavailable(c)),
        None => Err(Problem::not_found(format!(
            "reconstructions have no action `:{action}`"
        ))),
    }
}

/// `POST /v1/datasets/{did}:<action>`.
pub async fn dataset_action(
    State(s): State<ApiState>,
    caller: Caller,
    Path(did_action): Path<String>,
) -> Result<(), Problem> {
    let (did, action) = did_action.split_once(':').unwrap_or((&did_action, ""));
    super::datasets::owned(&s, &caller, did).await?;
    match dataset_action_capability(action) {
        Some(c) => Err(Problem::capability_unavailable(c)),
        None => Err(Problem::not_found(format!(
            "datasets have no action `:{action}`"
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
    Err(Problem::capability_unavailable(capability))
}

/// `POST /v1/reconstructions:merge`: the reconstructions the body names are looked up
/// first (another tenant's or a missing one is a 404), then 501 `recon.merge`, whatever
/// else is wrong with the body.
pub async fn merge(
    State(s): State<ApiState>,
    caller: Caller,
    body: axum::body::Bytes,
) -> Result<(), Problem> {
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let sources = body["source_recon_ids"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // At most 101 lookups whatever the body holds: the answer is 501 either way.
    for rid in std::iter::once(&body["target_recon_id"])
        .chain(sources.iter().take(100))
        .filter_map(serde_json::Value::as_str)
    {
        super::reconstructions::owned(&s, &caller, rid).await?;
    }
    Err(Problem::capability_unavailable("recon.merge"))
}

/// `POST /v1/reconstructions/{rid}/localize`.
pub async fn localize(
    State(s): State<ApiState>,
    caller: Caller,
    Path(rid): Path<String>,
) -> Result<(), Problem> {
    super::reconstructions::owned(&s, &caller, &rid).await?;
    Err(Problem::capability_unavailable("localize.from_memory"))
}

/// `POST /v1/oneshot/localize`.
pub async fn oneshot_localize(_caller: Caller) -> Result<(), Problem> {
    Err(Problem::capability_unavailable("localize.from_memory"))
}
