//! sfmapi's OPTIONAL endpoints this server does not offer (§6.9.1–6.9.6), answered 501
//! with the capability a client should look for in `/v1/capabilities`.
//!
//! Two orders, each the spec's. An action or a build this server never offers (an
//! index, a pose prior, a georegistration, a merge, a localization, a projection) is
//! answered 501 before anything is looked up: the answer is the same whoever asks and
//! whatever the path names, so it reveals nothing of any tenant (sfmapi's suite probes
//! `similarity:build?strategy=vlad` on a dataset that does not exist). A read of a
//! snapshot's sidecar (tiles, observations) looks the reconstruction up first, since the
//! spec makes a missing one a 404.

use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::extract::{Path, RawQuery, State};

/// The capability a similarity request needs: `vlad` when its `strategy` says so,
/// `dhash` (the spec's default) otherwise.
pub fn similarity_capability(query: Option<&str>) -> &'static str {
    let vlad = query
        .unwrap_or_default()
        .split('&')
        .any(|kv| kv.eq_ignore_ascii_case("strategy=vlad"));
    if vlad {
        "similarity.vlad"
    } else {
        "similarity.dhash"
    }
}

/// `GET /v1/datasets/{did}/similarity` (`POST …/similarity:build` is routed through the
/// dataset actions and answered with the same capability).
pub async fn similarity(_caller: Caller, RawQuery(query): RawQuery) -> Result<(), Problem> {
    Err(Problem::capability_unavailable(similarity_capability(
        query.as_deref(),
    )))
}

/// `GET|PUT|DELETE /v1/images/{image_id}/pose_prior`.
pub async fn pose_prior(_caller: Caller) -> Result<(), Problem> {
    Err(Problem::capability_unavailable("pose_priors.read_write"))
}

/// `GET|PUT /v1/datasets/{did}/pose_priors`.
pub async fn pose_priors(_caller: Caller) -> Result<(), Problem> {
    Err(Problem::capability_unavailable("pose_priors.read_write"))
}

/// `POST /v1/reconstructions/{rid}/georegister`.
pub async fn georegister(_caller: Caller) -> Result<(), Problem> {
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
    if let Some(c) = recon_action_capability(action) {
        return Err(Problem::capability_unavailable(c));
    }
    super::reconstructions::owned(&s, &caller, rid).await?;
    Err(Problem::not_found(format!(
        "reconstructions have no action `:{action}`"
    )))
}

/// `POST /v1/datasets/{did}:<action>`.
pub async fn dataset_action(
    State(s): State<ApiState>,
    caller: Caller,
    Path(did_action): Path<String>,
) -> Result<(), Problem> {
    let (did, action) = did_action.split_once(':').unwrap_or((&did_action, ""));
    if let Some(c) = dataset_action_capability(action) {
        return Err(Problem::capability_unavailable(c));
    }
    super::datasets::owned(&s, &caller, did).await?;
    Err(Problem::not_found(format!(
        "datasets have no action `:{action}`"
    )))
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

/// `POST /v1/reconstructions/{rid}/dense`: Tessera makes sparse models; dense
/// stereo is not offered.
pub async fn dense(_caller: Caller) -> Result<(), Problem> {
    Err(Problem::capability_unavailable("dense.patch_match_stereo"))
}

/// `POST /v1/reconstructions:merge`.
pub async fn merge(_caller: Caller) -> Result<(), Problem> {
    Err(Problem::capability_unavailable("recon.merge"))
}

/// `POST /v1/reconstructions/{rid}/localize`.
pub async fn localize(_caller: Caller) -> Result<(), Problem> {
    Err(Problem::capability_unavailable("localize.from_memory"))
}

/// `POST /v1/oneshot/localize`.
pub async fn oneshot_localize(_caller: Caller) -> Result<(), Problem> {
    Err(Problem::capability_unavailable("localize.from_memory"))
}
