//! `POST /v1/projects/{pid}/pipelines/{recipe}`: a whole reconstruction of a dataset
//! (features → matches → verify → map → bundle adjustment → export) as one job.

use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tessera_core::spec::{
    BaMode, BackendSpec, ExportFormat, Georef, MapperKind, PairStrategy, ReconstructionSpec,
};

/// The body of a pipeline request.
#[derive(Debug, Deserialize)]
pub struct PipelineRequest {
    /// The dataset to reconstruct.
    pub dataset_id: String,
    /// `{"kind": "<recipe>", …}`.
    pub spec: Value,
    /// FeaturesSpec (`sift_max_num_features` / `max_num_features`).
    #[serde(default)]
    pub features: Option<Value>,
    /// `{pairs: PairsSpec}` (strategy `exhaustive` or `sequential` with `overlap`).
    #[serde(default)]
    pub matches: Option<Value>,
}

fn capability_missing(name: &str) -> Problem {
    let mut p = Problem::new(
        StatusCode::NOT_IMPLEMENTED,
        "capability_unavailable",
        format!("capability '{name}' not supported by the current backend"),
    );
    p.extra.insert("capability".into(), name.into());
    p
}

/// Submit a recipe.
pub async fn submit(
    State(s): State<ApiState>,
    caller: Caller,
    Path((pid, recipe)): Path<(String, String)>,
    body: Result<Json<PipelineRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Problem> {
    let project = super::projects::owned(&s, &caller, &pid).await?;
    let Json(req) = body.map_err(|e| {
        Problem::bad_request(format!(
            "the body must be JSON {{\"dataset_id\": …, \"spec\": {{\"kind\": …}}}}: {e}"
        ))
    })?;
    let mapper = match recipe.as_str() {
        "incremental" => MapperKind::Incremental,
        "hierarchical" => MapperKind::Hierarchical,
        "global" => MapperKind::Global,
        "spherical" => return Err(capability_missing("map.spherical")),
        other => {
            return Err(Problem::not_found(format!(
                "unknown recipe `{other}`; use incremental, hierarchical or global"
            )));
        }
    };
    let capability = format!("map.{recipe}");
    if !s.capabilities.iter().any(|c| c == &capability) {
        return Err(capability_missing(&capability));
    }
    if req.spec["kind"].as_str() != Some(recipe.as_str()) {
        return Err(Problem::validation(format!(
            "spec.kind must be `{recipe}` for this recipe"
        )));
    }
    let d = super::datasets::owned(&s, &caller, &req.dataset_id).await?;
    if d.project_id != project.id.to_string() {
        return Err(Problem::validation(format!(
            "dataset {} is not in project {pid}",
            d.dataset_id
        )));
    }
    let images = super::datasets::all_images(&s, &d.dataset_id).await?;
    if images.is_empty() {
        return Err(Problem::validation(format!(
            "dataset {} has no images; add images before reconstructing",
            d.dataset_id
        )));
    }
    let max_features = req
        .features
        .as_ref()
        .and_then(|f| {
            f["sift_max_num_features"]
                .as_u64()
                .or(f["max_num_features"].as_u64())
        })
        .unwrap_or(4096) as u32;
    let pairs_spec = req
        .matches
        .as_ref()
        .map(|m| m["pairs"].clone())
        .unwrap_or(Value::Null);
    let pairs = match pairs_spec["strategy"].as_str() {
        None if images.len() <= 60 => PairStrategy::Exhaustive,
        None => PairStrategy::Sequential { overlap: 10 },
        Some("exhaustive") => PairStrategy::Exhaustive,
        Some("sequential") => PairStrategy::Sequential {
            overlap: pairs_spec["overlap"].as_u64().unwrap_or(10) as u32,
        },
        Some(other) => return Err(capability_missing(&format!("pairs.{other}"))),
    };
    let spec = ReconstructionSpec {
        project: project.id.to_string(),
        image_set: super::datasets::images_prefix(&d.dataset_id),
        backend: BackendSpec {
            name: "colmap".into(),
            version: None,
        },
        camera_model: serde_json::from_value(json!(d.camera_model))
            .map_err(|_| Problem::validation(format!("camera model `{}`", d.camera_model)))?,
        max_features,
        max_image_size: 1600,
        pairs,
        mapper,
        ba: BaMode::Standard,
        georef: Georef::None,
        exports: vec![ExportFormat::PointsBin],
        priority: 0,
    };
    let megapixels = images
        .iter()
        .map(|i| (i.width.unwrap_or(0) * i.height.unwrap_or(0)) as f64 / 1e6)
        .fold(0.0, f64::max);
    let plan = tessera_jobs::reconstruct::plan(
        &spec,
        caller.tenant.clone(),
        Some(project.id),
        &format!("{recipe} {}", d.name),
        images.len(),
        megapixels,
    )
    .map_err(|e| Problem::validation(e.to_string()))?;
    let submitted = s.engine.submit(plan).await?;
    let tasks = s.engine.job_tasks(submitted.job_id).await?;
    let mut r = (
        StatusCode::ACCEPTED,
        Json(json!({
            "job_id": submitted.job_id,
            "task_ids": tasks.iter().map(|t| t.id).collect::<Vec<_>>(),
            "recon_id": submitted.job_id,
            "existing": submitted.existing,
        })),
    )
        .into_response();
    r.headers_mut().insert(
        header::LOCATION,
        HeaderValue::from_str(&format!("/v1/jobs/{}", submitted.job_id)).expect("ascii"),
    );
    Ok(r)
}
