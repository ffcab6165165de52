//! Datasets over HTTP, translated to and from `tessera_core::catalog::datasets`
//! (records, keys, quotas); their images are [`super::images`]. A dataset made from a
//! source (`local`, `s3`) registers the source's images as it is created.

use super::{Paging, links};
use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, Query as QueryParams, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tessera_core::catalog::datasets::{self as catalog, NewDataset};
pub use tessera_core::catalog::datasets::{Dataset, Image, images_prefix};

/// sfmapi's Dataset (§4.3), its `manifest_hash` filled in by [`with_manifest`].
fn dataset_view(d: &Dataset) -> Value {
    let href = format!("/v1/projects/{}/datasets/{}", d.project_id, d.dataset_id);
    json!({
        "dataset_id": d.dataset_id, "tenant_id": d.tenant, "project_id": d.project_id, "name": d.name,
        "source": d.source, "source_id": source_id(&d.source), "camera_model": d.camera_model,
        "intrinsics_mode": d.intrinsics_mode, "is_spherical": false, "rig_config_json": null,
        "active_maskset_id": null, "manifest_hash": null,
        "respect_exif_orientation": d.respect_exif_orientation, "created_at": d.created_at,
        "_links": links(&href, &[
            ("project", format!("/v1/projects/{}", d.project_id)),
            ("images", format!("/v1/datasets/{}/images", d.dataset_id)),
        ]),
    })
}

/// The id of a dataset's image source. Sources are immutable and not resources of
/// their own here, so the id is a digest of the source as created: equal sources have
/// equal ids.
fn source_id(source: &Value) -> String {
    let digest = Sha256::digest(source.to_string().as_bytes());
    format!("src_{}", &hex::encode(digest)[..26])
}

/// Fill a dataset view's `manifest_hash`: SHA-256 over its images' sorted (name,
/// content hash), so datasets with equal hashes are interchangeable inputs. Computed
/// when read, so it can never lag the images.
async fn with_manifest(s: &ApiState, view: &mut Value, d: &Dataset) -> Result<(), Problem> {
    let images = super::images::all_images(s, d).await?;
    view["manifest_hash"] = json!(catalog::image_set_digest(&images));
    Ok(())
}

/// A dataset's view with its manifest.
async fn full_view(s: &ApiState, d: &Dataset) -> Result<Value, Problem> {
    let mut view = dataset_view(d);
    with_manifest(s, &mut view, d).await?;
    Ok(view)
}

/// 501 for dataset shapes this server does not model: spherical photos and camera
/// rigs; 422 for a maskset, since none exist here. Checked before validation.
fn require_shape(
    is_spherical: Option<bool>,
    rig_config: Option<&Value>,
    active_maskset_id: Option<&Value>,
) -> Result<(), Problem> {
    if is_spherical == Some(true) {
        return Err(Problem::capability_unavailable("map.spherical"));
    }
    if rig_config.is_some_and(|r| !r.is_null()) {
        return Err(Problem::validation(
            "rig_config: this server does not model camera rigs; leave it out or null",
        ));
    }
    if let Some(m) = active_maskset_id.filter(|m| !m.is_null()) {
        return Err(Problem::validation(format!(
            "active_maskset_id: no maskset {m} exists; this server keeps no masksets"
        )));
    }
    Ok(())
}

/// The body of a dataset create request.
#[derive(Debug, Deserialize)]
pub struct CreateDataset {
    /// Name.
    pub name: String,
    /// Source; only `{"kind": "upload"}` here.
    #[serde(default)]
    pub source: Option<Value>,
    /// Camera model (default `SIMPLE_RADIAL`).
    #[serde(default)]
    pub camera_model: Option<String>,
    /// Turn photos as their EXIF orientation says before reconstruction (default true:
    /// what every viewer shows, and what phones need).
    #[serde(default)]
    pub respect_exif_orientation: Option<bool>,
    /// How photos share intrinsics (default `single_camera`).
    #[serde(default)]
    pub intrinsics_mode: Option<catalog::IntrinsicsMode>,
    /// Spherical (360°) photos; only `false` here.
    #[serde(default)]
    pub is_spherical: Option<bool>,
    /// A camera rig; only `null` here.
    #[serde(default)]
    pub rig_config: Option<Value>,
}

/// A dataset of the caller's tenant, or 404.
pub async fn owned(s: &ApiState, caller: &Caller, id: &str) -> Result<Dataset, Problem> {
    Ok(
        tessera_core::catalog::tenancy::dataset(
            s.engine.ports().store.as_ref(),
            &caller.tenant,
            id,
        )
        .await?,
    )
}

/// `POST /v1/projects/{pid}/datasets`.
pub async fn create(
    State(s): State<ApiState>,
    caller: Caller,
    Path(pid): Path<String>,
    body: Result<Json<CreateDataset>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Problem> {
    let project = super::projects::owned(&s, &caller, &pid).await?;
    let Json(body) = body.map_err(|e| {
        Problem::bad_request(format!(
            "the body must be JSON {{\"name\": …, \"source\": {{\"kind\": \"upload\"}}}}: {e}"
        ))
    })?;
    require_shape(body.is_spherical, body.rig_config.as_ref(), None)?;
    let source = body.source.unwrap_or_else(|| json!({ "kind": "upload" }));
    let import = match source["kind"].as_str() {
        Some("upload") => None,
        Some(k @ ("local" | "s3")) => {
            let Some(src) = s.sources.get(k).cloned() else {
                let mut p = Problem::new(
                    StatusCode::NOT_IMPLEMENTED,
                    "capability_unavailable",
                    format!("`{k}` dataset sources are not offered by this server; use `upload`"),
                );
                p.extra
                    .insert("capability".into(), format!("sources.{k}").into());
                return Err(p);
            };
            // Listed before the dataset exists, so a bad source creates nothing.
            let files = src.list(&caller.tenant, &source).await?;
            if files.is_empty() {
                return Err(Problem::validation(format!(
                    "the `{k}` source holds no images (.jpg, .jpeg, .png, .tif, .tiff, .webp)"
                )));
            }
            if files.len() > crate::sources::MAX_SOURCE_FILES {
                return Err(Problem::validation(format!(
                    "the `{k}` source holds more than {} images; split it into several datasets",
                    crate::sources::MAX_SOURCE_FILES
                )));
            }
            Some((src, files))
        }
        _ => {
            return Err(Problem::validation(
                "source.kind must be `upload`, `local` or `s3`",
            ));
        }
    };
    let camera_model = body.camera_model.unwrap_or_else(|| "SIMPLE_RADIAL".into());
    if serde_json::from_value::<tessera_core::camera::CameraModel>(json!(camera_model)).is_err() {
        return Err(Problem::validation(format!(
            "camera_model `{camera_model}` is not a COLMAP camera model"
        )));
    }
    let d = catalog::create(
        s.engine.ports().store.as_ref(),
        &caller.tenant,
        project.id,
        NewDataset {
            name: body.name,
            source,
            camera_model,
            respect_exif_orientation: body.respect_exif_orientation.unwrap_or(true),
            intrinsics_mode: body.intrinsics_mode.unwrap_or_default(),
        },
    )
    .await?;
    let mut view = dataset_view(&d);
    if let Some((src, files)) = import {
        view["x-import"] =
            super::images::import_source(&s, &caller, &d, src.as_ref(), &files).await?;
    }
    with_manifest(&s, &mut view, &d).await?;
    let mut r = (StatusCode::CREATED, Json(view)).into_response();
    r.headers_mut().insert(
        header::LOCATION,
        HeaderValue::from_str(&format!(
            "/v1/projects/{}/datasets/{}",
            d.project_id, d.dataset_id
        ))
        .expect("ascii"),
    );
    Ok(r)
}

/// `GET /v1/projects/{pid}/datasets`.
pub async fn list(
    State(s): State<ApiState>,
    caller: Caller,
    Path(pid): Path<String>,
    QueryParams(paging): QueryParams<Paging>,
) -> Result<Json<Value>, Problem> {
    let project = super::projects::owned(&s, &caller, &pid).await?;
    let (datasets, next) =
        super::page_records::<Dataset>(&s, catalog::datasets_partition(project.id), &paging)
            .await?;
    let mut items = Vec::with_capacity(datasets.len());
    for d in &datasets {
        items.push(full_view(&s, d).await?);
    }
    Ok(super::page_json(items, next))
}

/// `GET /v1/projects/{pid}/datasets/{did}`.
pub async fn get(
    State(s): State<ApiState>,
    caller: Caller,
    Path((pid, did)): Path<(String, String)>,
) -> Result<Json<Value>, Problem> {
    let d = owned(&s, &caller, &did).await?;
    if d.project_id.to_string() != pid {
        return Err(Problem::not_found(format!(
            "dataset {did} is not in project {pid}"
        )));
    }
    Ok(Json(full_view(&s, &d).await?))
}

/// `DELETE /v1/projects/{pid}/datasets/{did}`: erase the dataset, its images and their
/// thumbnails (audited). Reconstructions already made from it stay.
pub async fn erase(
    State(s): State<ApiState>,
    caller: Caller,
    Path((pid, did)): Path<(String, String)>,
) -> Result<StatusCode, Problem> {
    let d = owned(&s, &caller, &did).await?;
    if d.project_id.to_string() != pid {
        return Err(Problem::not_found(format!(
            "dataset {did} is not in project {pid}"
        )));
    }
    catalog::erase(
        s.engine.ports().store.as_ref(),
        s.engine.ports().objects.as_ref(),
        &d,
        &caller.actor(),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The body of a dataset PATCH.
#[derive(Debug, Deserialize)]
pub struct PatchDataset {
    /// New name.
    #[serde(default)]
    pub name: Option<String>,
    /// New camera model (for stages run after the change).
    #[serde(default)]
    pub camera_model: Option<String>,
    /// Whether later reconstructions apply EXIF orientation.
    #[serde(default)]
    pub respect_exif_orientation: Option<bool>,
    /// How photos share intrinsics (for stages run after the change).
    #[serde(default)]
    pub intrinsics_mode: Option<catalog::IntrinsicsMode>,
    /// Only `false` here.
    #[serde(default)]
    pub is_spherical: Option<bool>,
    /// Only `null` here.
    #[serde(default)]
    pub rig_config: Option<Value>,
    /// Only `null` here.
    #[serde(default)]
    pub active_maskset_id: Option<Value>,
}

/// The paths a dataset PATCH's `update_mask` may name.
const DATASET_MASK: &[&str] = &[
    "name",
    "camera_model",
    "intrinsics_mode",
    "is_spherical",
    "rig_config",
    "respect_exif_orientation",
    "active_maskset_id",
];

/// `PATCH /v1/projects/{pid}/datasets/{did}[?update_mask=a,b]`: what the body (or the
/// mask) names; the source is immutable (make a new dataset to read bytes from
/// elsewhere).
pub async fn patch(
    State(s): State<ApiState>,
    caller: Caller,
    Path((pid, did)): Path<(String, String)>,
    QueryParams(mask): QueryParams<super::UpdateMask>,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, Problem> {
    let mut d = owned(&s, &caller, &did).await?;
    if d.project_id.to_string() != pid {
        return Err(Problem::not_found(format!(
            "dataset {did} is not in project {pid}"
        )));
    }
    let Json(body) = body.map_err(|e| {
        Problem::bad_request(format!(
            "the body must be JSON {{\"name\"?, \"camera_model\"?, \"intrinsics_mode\"?, …}}: {e}"
        ))
    })?;
    let body = mask.apply(body, DATASET_MASK)?;
    let b: PatchDataset = serde_json::from_value(body)
        .map_err(|e| Problem::validation(format!("the dataset PATCH body: {e}")))?;
    require_shape(
        b.is_spherical,
        b.rig_config.as_ref(),
        b.active_maskset_id.as_ref(),
    )?;
    if let Some(m) = b.intrinsics_mode {
        d.intrinsics_mode = m;
    }
    if let Some(n) = b.name {
        if n.trim().is_empty() {
            return Err(Problem::validation("name must not be empty"));
        }
        d.name = n;
    }
    if let Some(m) = b.camera_model {
        if serde_json::from_value::<tessera_core::camera::CameraModel>(json!(m)).is_err() {
            return Err(Problem::validation(format!(
                "camera_model `{m}` is not a COLMAP camera model"
            )));
        }
        d.camera_model = m;
    }
    if let Some(r) = b.respect_exif_orientation {
        d.respect_exif_orientation = r;
    }
    catalog::update(s.engine.ports().store.as_ref(), &d).await?;
    Ok(Json(full_view(&s, &d).await?))
}

/// `POST /v1/datasets/{did}/{action}`: `images:batchCreate`, or a stage
/// (`features`, `matches`, `verify`), which share the routed path.
pub async fn post_action(
    State(s): State<ApiState>,
    caller: Caller,
    Path((did, action)): Path<(String, String)>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Problem> {
    if action == "similarity:build" {
        // Never offered: the same 501 whatever the path names (`super::optional`).
        return Err(Problem::capability_unavailable(
            super::optional::similarity_capability(query.as_deref()),
        ));
    }
    // Ownership before the body: another tenant's dataset is a 404 whatever was sent.
    owned(&s, &caller, &did).await?;
    let Json(body) =
        body.map_err(|e| Problem::bad_request(format!("the body must be JSON: {e}")))?;
    match action.as_str() {
        "images:batchCreate" => {
            let req: super::images::BatchCreate = serde_json::from_value(body).map_err(|e| {
                Problem::bad_request(format!("the body must be {{\"requests\": [...]}}: {e}"))
            })?;
            super::images::batch_create(&s, &caller, &did, req).await
        }
        "features" | "matches" | "verify" => {
            let req = serde_json::from_value(body)
                .map_err(|e| Problem::bad_request(format!("stage request: {e}")))?;
            super::pipelines::stage(&s, &caller, &did, &action, req).await
        }
        other => Err(Problem::not_found(format!(
            "no route POST /v1/datasets/{did}/{other}"
        ))),
    }
}
