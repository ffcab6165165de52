//! `GET /v1/jobs/{id}/artifacts` and `GET /v1/reconstructions/{rid}/artifacts`: sfmapi's
//! `Page<StageArtifact>`, one per sealed stage checkpoint of a reconstruction-family job
//! (its files with sizes and SHA-256, as the manifest records them). Jobs of other kinds
//! have none.

use super::Paging;
use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, Query as QueryParams, State};
use serde::Deserialize;
use serde_json::{Value, json};
use tessera_core::job::Job;
use tessera_core::task::TaskState;
use tessera_jobs::reconstruct::{Stage, checkpoint, spec_dag};

/// `?kind=` and paging.
#[derive(Debug, Deserialize, Default)]
pub struct ArtifactQuery {
    /// Only artifacts of this kind.
    pub kind: Option<String>,
    /// Items per page.
    pub page_size: Option<usize>,
    /// Where the previous page stopped.
    pub page_token: Option<String>,
}

/// The artifact kind a stage's checkpoint is.
pub fn kind_of(stage: Stage) -> &'static str {
    match stage {
        Stage::Ingest => "image_set",
        Stage::Extract => "features",
        Stage::Match => "matches",
        Stage::Verify => "two_view_geometries",
        Stage::MapCluster | Stage::Map | Stage::BundleAdjust | Stage::Georeference => {
            "sparse_model"
        }
        Stage::Export => "export",
    }
}

async fn list(s: &ApiState, job: &Job, q: &ArtifactQuery) -> Result<Json<Value>, Problem> {
    let tasks = s.engine.job_tasks(job.id).await?;
    let objects = s.engine.ports().objects.as_ref();
    let recon = (job.kind == tessera_jobs::reconstruct::KIND).then_some(job.id);
    let mut items = Vec::new();
    for t in tasks.iter().filter(|t| t.state == TaskState::Succeeded) {
        let Some(stage) = spec_dag::stage_named(&t.name) else {
            continue;
        };
        let kind = kind_of(stage);
        if q.kind.as_deref().is_some_and(|k| k != kind) {
            continue;
        }
        // Named by its task: a stage's, or a split run's `map_cluster_<i>`.
        let Some(cp) = checkpoint::manifest(objects, job.id, &t.name)
            .await
            .map_err(|e| Problem::internal(e.message))?
        else {
            continue;
        };
        let prefix = checkpoint::prefix(job.id, &t.name);
        let id = format!("{}-{}", job.id, t.name);
        items.push(json!({
            "artifact_id": id, "job_id": job.id, "task_id": t.id, "recon_id": recon,
            "kind": kind, "name": t.name, "uri": format!("{prefix}/"),
            "files": cp.files.iter().map(|f| json!({
                "name": f.name, "uri": format!("{prefix}/{}", f.name),
                "sha256": f.sha256, "byte_size": f.size,
                "download_url": super::downloads::file_url(job, &t.name, &f.name),
            })).collect::<Vec<_>>(),
            "byte_size": cp.files.iter().map(|f| f.size).sum::<u64>(),
            "producer": { "stage": t.name, "spec_kind": spec_dag::kind_of(stage).name() },
            "created_at": t.finished_at.map(|m| m.to_rfc3339()),
            "_links": super::links(&format!("/v1/jobs/{}/artifacts", job.id), &[]),
        }));
    }
    let paging = Paging {
        page_size: q.page_size,
        page_token: q.page_token.clone(),
    };
    let start: usize = paging
        .page_token
        .as_deref()
        .map(|t| {
            t.parse()
                .map_err(|_| Problem::validation("page_token is not one this server gave"))
        })
        .transpose()?
        .unwrap_or(0);
    let total = items.len();
    let page: Vec<Value> = items.into_iter().skip(start).take(paging.size()).collect();
    let next = (start + page.len() < total).then(|| (start + page.len()).to_string());
    Ok(Json(
        json!({ "items": page, "next_page_token": next, "total": total }),
    ))
}

/// `GET /v1/jobs/{id}/artifacts`.
pub async fn of_job(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    QueryParams(q): QueryParams<ArtifactQuery>,
) -> Result<Json<Value>, Problem> {
    let job = super::jobs::owned(&s, &caller, &id).await?;
    list(&s, &job, &q).await
}

/// `GET /v1/reconstructions/{rid}/artifacts`.
pub async fn of_reconstruction(
    State(s): State<ApiState>,
    caller: Caller,
    Path(rid): Path<String>,
    QueryParams(q): QueryParams<ArtifactQuery>,
) -> Result<Json<Value>, Problem> {
    let job = super::reconstructions::owned(&s, &caller, &rid).await?;
    list(&s, &job, &q).await
}
