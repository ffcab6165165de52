//! `/v1/jobs`: list, `JobDetail`, `:cancel` (`?force=true`) and `:resume`, scoped to
//! the caller's tenant.

use super::{Paging, links};
use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, Query as QueryParams, State};
use serde::Deserialize;
use serde_json::{Value, json};
use tessera_core::job::{CancelMode, Job, JobStatus};
use tessera_core::task::{Task, TaskState};
use tessera_core::{ErrorClass, JobId};
use tessera_engine::EngineError;

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

/// The wire shape of a job; with `tasks`, a `JobDetail`.
pub fn view(job: &Job, tasks: Option<&[Task]>) -> Value {
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
        "recipe": job.kind,
        "label": job.label,
        "status": status(job),
        "cancel_requested": job.cancel.is_some(),
        "cancel_force": job.cancel.as_ref().is_some_and(|c| c.mode == CancelMode::Force),
        "created_at": job.created_at.to_rfc3339(),
        "started_at": null,
        "finished_at": null,
        "error_class": failure.as_ref().map(|f| match f.class {
            ErrorClass::Resource => "ResourceError",
            ErrorClass::Transient => "TransientError",
            ErrorClass::Permanent => "PermanentError",
            ErrorClass::Poison => "PoisonError",
            ErrorClass::Cancelled => "Cancelled",
        }),
        "error_message": failure.as_ref().map(|f| f.message.clone()),
        "_links": links(&href, &[("events", format!("{href}/events"))]),
    });
    if let Some(ts) = tasks {
        v["tasks"] = ts
            .iter()
            .map(|t| {
                json!({
                    "task_id": t.id, "job_id": t.job_id, "kind": t.kind, "name": t.name,
                    "status": task_status(t), "attempts": t.attempts, "cache_key": t.cache_key,
                    "outputs_ref": t.result,
                })
            })
            .collect();
    }
    v
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
    let items: Vec<Value> = jobs.iter().map(|j| view(j, None)).collect();
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
    Ok(Json(view(&job, Some(&tasks))))
}

/// `?force=true` on `:cancel`.
#[derive(Debug, Deserialize, Default)]
pub struct ActionParams {
    /// Revoke leases and kill subprocesses now.
    #[serde(default)]
    pub force: bool,
}

/// `POST /v1/jobs/{id}:cancel` and `POST /v1/jobs/{id}:resume`.
pub async fn action(
    State(s): State<ApiState>,
    caller: Caller,
    Path(job_action): Path<String>,
    QueryParams(params): QueryParams<ActionParams>,
) -> Result<Json<Value>, Problem> {
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
    Ok(Json(view(&job, Some(&tasks))))
}
