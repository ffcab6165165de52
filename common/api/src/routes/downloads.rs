//! Taking results away: one file of a job's sealed stage checkpoint (the exports, the
//! COLMAP model, the feature database), and a reconstruction's report.
//!
//! A file is found by the name its checkpoint's manifest records, never by joining what
//! the caller sent into a key, so no name can reach another object; its ETag is the
//! SHA-256 the manifest recorded, revalidated on each read (a damaged checkpoint is run
//! again and republished under the same names).

use crate::ApiState;
use crate::auth::Caller;
use crate::bytes as served;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use serde_json::{Value, json};
use tessera_core::job::Job;
use tessera_core::task::TaskState;
use tessera_jobs::reconstruct::{Stage, checkpoint, spec_dag};

/// Where a checkpoint file is downloaded from (the artifact list gives it per file);
/// `task` names the checkpoint (a stage, or a split run's `map_cluster_<i>`).
pub fn file_url(job: &Job, task: &str, name: &str) -> String {
    format!(
        "/v1/jobs/{}/artifacts/{}-{task}/files/{name}",
        job.id, job.id
    )
}

/// The checkpoint an artifact id (`<job id>-<task>`, or the task's name alone) names:
/// a stage's, or one cluster's of a split run.
fn checkpoint_of<'a>(job: &Job, artifact: &'a str) -> Option<&'a str> {
    let name = artifact
        .strip_prefix(&format!("{}-", job.id))
        .unwrap_or(artifact);
    spec_dag::stage_named(name).map(|_| name)
}

fn content_type(name: &str) -> &'static str {
    match name
        .rsplit('.')
        .next()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("json") => "application/json",
        Some("txt" | "nvm") => "text/plain; charset=utf-8",
        Some("ply") => "application/x-ply",
        // RFC 7946's media type; LAS and LAZ have none registered, their readers go by
        // the extension.
        Some("geojson") => "application/geo+json",
        Some("las") => "application/vnd.las",
        Some("laz") => "application/vnd.laszip",
        _ => "application/octet-stream",
    }
}

/// `GET /v1/jobs/{job_id}/artifacts/{artifact_id}/files/{*name}` (ETag, 304, Range): one
/// file of a sealed checkpoint, as an attachment named after it.
pub async fn artifact_file(
    State(s): State<ApiState>,
    caller: Caller,
    Path((job_id, artifact, name)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let job = super::jobs::owned(&s, &caller, &job_id).await?;
    let missing = || {
        Problem::not_found(format!(
            "job {job_id} has no artifact file {artifact}/{name}"
        ))
    };
    let stage = checkpoint_of(&job, &artifact).ok_or_else(missing)?;
    let objects = s.engine.ports().objects.as_ref();
    let cp = checkpoint::manifest(objects, job.id, stage)
        .await
        .map_err(|e| Problem::internal(e.message))?
        .ok_or_else(missing)?;
    let file = cp
        .files
        .iter()
        .find(|f| f.name == name)
        .ok_or_else(missing)?;
    let key = format!("{}/{}", checkpoint::prefix(job.id, stage), file.name);
    let mut res = served::serve_object(
        &headers,
        objects,
        &key,
        content_type(&file.name),
        &file.sha256,
        // Revalidated: a damaged checkpoint is re-run and published again at the same
        // names, so a URL's bytes may change (the ETag says when).
        served::Freshness::Revalidate,
        s.response_limit,
    )
    .await
    .map_err(Problem::internal)?;
    // The stage and the folder go into the saved name, so a model's three files (and two
    // models' `cameras.bin`) do not overwrite each other in a downloads folder.
    let saved: String = format!("{stage}-{}", file.name.replace('/', "-"))
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{saved}\"")) {
        res.headers_mut().insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(res)
}

/// `GET /v1/reconstructions/{recon_id}/report`: what a run was asked, what each stage
/// did and how long it took, how many photos the model holds and which it left out, and
/// every file there is to download.
pub async fn report(
    State(s): State<ApiState>,
    caller: Caller,
    Path(rid): Path<String>,
) -> Result<Json<Value>, Problem> {
    let job = super::reconstructions::owned(&s, &caller, &rid).await?;
    let tasks = s.engine.job_tasks(job.id).await?;
    let objects = s.engine.ports().objects.as_ref();
    let times = super::jobs::times(&s, &job, &tasks).await?;
    let mut stages = Vec::new();
    let mut files = Vec::new();
    let mut photos = Value::Null;
    let mut model = Value::Null;
    for t in &tasks {
        let Some(stage) = spec_dag::stage_named(&t.name) else {
            continue;
        };
        // Checkpoints are named by their task (a cluster's is `map_cluster_<i>`).
        let cp = if t.state == TaskState::Succeeded {
            checkpoint::manifest(objects, job.id, &t.name)
                .await
                .map_err(|e| Problem::internal(e.message))?
        } else {
            None
        };
        if let Some(cp) = &cp {
            if stage == Stage::Map {
                photos = json!({
                    "total": cp.result["total_images"],
                    "registered": cp.result["model"]["registered_images"],
                    "left_out": cp.result.get("left_out").cloned().unwrap_or(Value::Null),
                });
            }
            // Stages run in order: the last stage with a model has the final one (a
            // cluster's is a part of the map stage's).
            if let Some(m) = cp.result.get("model").filter(|m| m.is_object())
                && stage != Stage::MapCluster
            {
                model = m.clone();
            }
            files.extend(cp.files.iter().map(|f| {
                json!({
                    "stage": t.name, "name": f.name, "byte_size": f.size,
                    "sha256": f.sha256, "url": file_url(&job, &t.name, &f.name),
                })
            }));
        }
        stages.push(json!({
            "stage": t.name,
            "status": super::jobs::task_status(t),
            "finished_at": t.finished_at.map(|m| m.to_rfc3339()),
            "attempts": t.attempts,
            "error": t.last_error.as_ref().filter(|_| t.state != TaskState::Succeeded).map(|e| e.message.clone()),
            "result": cp.map(|c| c.result),
        }));
    }
    let seconds = match times {
        (Some(a), Some(b)) => Some((b.0 - a.0) as f64 / 1000.0),
        _ => None,
    };
    Ok(Json(json!({
        "recon_id": job.id, "label": job.label, "status": super::jobs::status(&job),
        "spec": job.spec, "created_at": job.created_at.to_rfc3339(),
        "started_at": times.0.map(|m| m.to_rfc3339()),
        "finished_at": times.1.map(|m| m.to_rfc3339()),
        "seconds": seconds,
        "photos": photos, "model": model, "stages": stages, "files": files,
    })))
}
