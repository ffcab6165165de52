//! `/v1/jobs`: list, `JobDetail`, `:cancel` (`?force=true`) and `:resume`, scoped to
//! the caller's tenant.

use super::{Paging, links};
use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, Query as QueryParams, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tessera_core::job::{CancelMode, Job, JobStatus};
use tessera_core::spec::ReconstructionSpec;
use tessera_core::task::{Task, TaskState};
use tessera_core::{ErrorClass, JobId, Millis};
use tessera_engine::EngineError;
use tessera_jobs::reconstruct::spec_dag;

/// sfmapi's job status: `cancelled_dirty` when a forced cancel may have left partial work.
pub fn status(job: &Job) -> &'static str {
    match job.status() {
        JobStatus::Queued => "pending",
        JobStatus::Running => "running",
        JobStatus::Succeeded => "succeeded",
        JobStatus::Failed => "failed",
        JobStatus::Cancelled => match &job.cancel {
            Some(c) if c.mode == CancelMode::Force => "cancelled_dirty",
            _ => "cancelled",
        },
    }
}

fn task_status(t: &Task) -> &'static str {
    match t.state {
        TaskState::Succeeded => "succeeded",
        TaskState::Running => "running",
        TaskState::Cancelled => "cancelled",
        TaskState::Failed | TaskState::Dead => "failed",
        _ => "pending",
    }
}

/// When the job started (its first event written by a task) and finished (its last
/// task's end, once the job is terminal); sfmapi's `started_at` / `finished_at`.
pub async fn times(
    s: &ApiState,
    job: &Job,
    tasks: &[Task],
) -> Result<(Option<Millis>, Option<Millis>), Problem> {
    let first = s
        .engine
        .ports()
        .events
        .read_after(job.id, 0, 64)
        .await
        .map_err(Problem::internal)?
        .into_iter()
        .find(|e| e.task_id.is_some())
        .map(|e| e.at);
    let terminal = !matches!(job.status(), JobStatus::Queued | JobStatus::Running);
    let last = tasks.iter().filter_map(|t| t.finished_at).max();
    Ok((first, last.filter(|_| terminal)))
}

/// sfmapi's recipe: a reconstruction's mapper (`incremental`, `global`, …); the job kind
/// otherwise (`features`, `matches`, `verify`, or Tessera's own kinds).
fn recipe(job: &Job) -> String {
    if job.kind == tessera_jobs::reconstruct::KIND
        && let Some(m) = job.spec.get("mapper").and_then(Value::as_str)
    {
        return m.to_string();
    }
    job.kind.clone()
}

/// The wire shape of a job; with `tasks`, a `JobDetail` whose tasks are the client's
/// DAG (`tessera_jobs::reconstruct::spec_dag`) for a reconstruction, and the tasks as
/// they are for other job kinds.
pub fn view(job: &Job, tasks: Option<&[Task]>, times: (Option<Millis>, Option<Millis>)) -> Value {
    let href = format!("/v1/jobs/{}", job.id);
    let failure = tasks.and_then(|ts| {
        ts.iter().find_map(|t| {
            t.last_error
                .clone()
                .filter(|_| matches!(t.state, TaskState::Failed | TaskState::Dead))
        })
    });
    let mut v = json!({
        "job_id": job.id,
        "tenant_id": job.tenant,
        "project_id": job.project,
        "recipe": recipe(job),
        "label": job.label,
        "status": status(job),
        "cancel_requested": job.cancel.is_some(),
        "cancel_force": job.cancel.as_ref().is_some_and(|c| c.mode == CancelMode::Force),
        "created_at": job.created_at.to_rfc3339(),
        "started_at": times.0.map(Millis::to_rfc3339),
        "finished_at": times.1.map(Millis::to_rfc3339),
        "error_class": failure.as_ref().map(|f| match f.class {
            ErrorClass::Resource => "ResourceError",
            ErrorClass::Transient => "TransientError",
            ErrorClass::Permanent => "PermanentError",
            ErrorClass::Poison => "PoisonError",
            ErrorClass::Cancelled => "Cancelled",
        }),
        "error_message": failure.as_ref().map(|f| f.message.clone()),
        "_links": links(&href, &[
            ("events", format!("{href}/events")),
            ("ws", format!("/ws/v1/jobs/{}", job.id)),
        ]),
    });
    if let Some(ts) = tasks {
        v["tasks"] = task_views(job, ts).into();
    }
    v
}

/// The tasks a client sees: for a reconstruction, one per spec node, with Tessera's
/// stages inside under `x-tessera`.
pub fn task_views(job: &Job, tasks: &[Task]) -> Vec<Value> {
    let spec = serde_json::from_value::<ReconstructionSpec>(job.spec.clone()).ok();
    let stage_view = |t: &Task| {
        json!({
            "task_id": t.id, "name": t.name, "kind": t.kind, "status": task_status(t),
            "attempts": t.attempts, "cache_key": t.cache_key, "outputs_ref": t.result,
        })
    };
    match spec_dag::nodes(spec.as_ref(), tasks) {
        Some(nodes) => nodes
            .iter()
            .map(|n| {
                let h = n.hashes.as_ref();
                let status = n.status();
                json!({
                    "task_id": n.task.id, "job_id": n.task.job_id, "kind": n.kind.name(),
                    "status": status,
                    "cache_key": h.map(|h| &h.cache_key),
                    "inputs_hash": h.map(|h| &h.inputs_hash),
                    "params_hash": h.map(|h| &h.params_hash),
                    "outputs_ref": (status == "succeeded").then(|| json!({
                        "checkpoints": n.stages.iter()
                            .map(|t| format!("recon/{}/{}/", t.job_id, t.name))
                            .collect::<Vec<_>>(),
                    })),
                    "x-tessera": { "stages": n.stages.iter().map(|t| stage_view(t)).collect::<Vec<_>>() },
                })
            })
            .collect(),
        None => tasks
            .iter()
            .map(|t| {
                let mut v = stage_view(t);
                v["job_id"] = json!(t.job_id);
                v
            })
            .collect(),
    }
}

/// A job of the caller's tenant, or 404.
pub async fn owned(s: &ApiState, caller: &Caller, id: &str) -> Result<Job, Problem> {
    let missing = || Problem::not_found(format!("job {id} does not exist"));
    let id: JobId = id.parse().map_err(|_| missing())?;
    let job = s.engine.job(id).await.map_err(|e| match e {
        EngineError::NoSuchJob(_) => missing(),
        other => other.into(),
    })?;
    if job.tenant != caller.tenant {
        return Err(missing());
    }
    Ok(job)
}

/// `GET /v1/jobs`.
pub async fn list(
    State(s): State<ApiState>,
    caller: Caller,
    QueryParams(paging): QueryParams<Paging>,
) -> Result<Json<Value>, Problem> {
    let (jobs, next) = s
        .engine
        .list_jobs(&caller.tenant, paging.page_token.clone(), paging.size())
        .await?;
    let items: Vec<Value> = jobs.iter().map(|j| view(j, None, (None, None))).collect();
    Ok(Json(
        json!({ "items": items, "next_page_token": next, "total": null }),
    ))
}

/// `GET /v1/jobs/{id}`: the `JobDetail`.
pub async fn get(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, Problem> {
    let job = owned(&s, &caller, &id).await?;
    let tasks = s.engine.job_tasks(job.id).await?;
    let times = times(&s, &job, &tasks).await?;
    Ok(Json(view(&job, Some(&tasks), times)))
}

/// `?force=true` on `:cancel`.
#[derive(Debug, Deserialize, Default)]
pub struct ActionParams {
    /// Revoke leases and kill subprocesses now.
    #[serde(default)]
    pub force: bool,
}

/// `POST /v1/jobs/{id}:cancel` (200 and the job) and `POST /v1/jobs/{id}:resume` (202
/// and the job, as sfmapi §6.7 says: the work restarts asynchronously).
pub async fn action(
    State(s): State<ApiState>,
    caller: Caller,
    Path(job_action): Path<String>,
    QueryParams(params): QueryParams<ActionParams>,
) -> Result<Response, Problem> {
    let (id, verb) = job_action
        .split_once(':')
        .ok_or_else(|| Problem::not_found("POST /v1/jobs/{id}:cancel or /v1/jobs/{id}:resume"))?;
    let job = owned(&s, &caller, id).await?;
    match verb {
        "cancel" => {
            let mode = if params.force {
                CancelMode::Force
            } else {
                CancelMode::Cooperative
            };
            s.engine.cancel(job.id, mode).await?;
        }
        "resume" => {
            s.engine.resume(job.id).await?;
        }
        other => {
            return Err(Problem::not_found(format!(
                "unknown job action `{other}`; use :cancel or :resume"
            )));
        }
    }
    let job = s.engine.job(job.id).await?;
    let tasks = s.engine.job_tasks(job.id).await?;
    let times = times(&s, &job, &tasks).await?;
    let status = if verb == "resume" {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(view(&job, Some(&tasks), times))).into_response())
}
