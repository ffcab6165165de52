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
use tessera_core::catalog::tenancy;
use tessera_core::event::EventKind;
use tessera_core::job::{CancelMode, Job, JobStatus};
use tessera_core::spec::ReconstructionSpec;
use tessera_core::task::{Task, TaskState};
use tessera_core::{ErrorClass, Millis};
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

pub(crate) fn task_status(t: &Task) -> &'static str {
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
    v["x-tessera"] = json!({
        // From counters on the job row, so a list shows progress without reading tasks.
        "tasks_done": job.counters.succeeded.clamp(0, job.tasks_total),
        "tasks_total": job.tasks_total,
        "options": options(job),
    });
    v
}

/// What a reconstruction was asked to do, in the spec's own words: enough to tell two
/// runs over one dataset apart (`null` for other kinds).
fn options(job: &Job) -> Value {
    if job.kind != tessera_jobs::reconstruct::KIND {
        return Value::Null;
    }
    let pick = [
        "image_set",
        "mapper",
        "pairs",
        "ba",
        "georef",
        "georef_if_possible",
        "exports",
        "camera_model",
        "max_image_size",
        "max_features",
    ];
    Value::Object(
        pick.iter()
            .filter_map(|k| Some((k.to_string(), job.spec.get(*k)?.clone())))
            .collect(),
    )
}

/// The tasks a client sees: for a reconstruction, one per spec node, with Tessera's
/// stages inside under `x-tessera`.
pub fn task_views(job: &Job, tasks: &[Task]) -> Vec<Value> {
    let stage_view = |t: &Task| {
        json!({
            "task_id": t.id, "job_id": t.job_id, "name": t.name, "kind": t.kind,
            "status": task_status(t), "attempts": t.attempts, "cache_key": t.cache_key,
            "outputs_ref": t.result,
        })
    };
    units(job, tasks)
        .iter()
        .map(|u| match &u.node {
            Some(n) => {
                let h = n.hashes.as_ref();
                json!({
                    "task_id": u.task_id, "job_id": job.id, "kind": u.kind, "status": u.status,
                    "cache_key": h.map(|h| &h.cache_key),
                    "inputs_hash": h.map(|h| &h.inputs_hash),
                    "params_hash": h.map(|h| &h.params_hash),
                    "outputs_ref": (u.status == "succeeded").then(|| json!({
                        "checkpoints": u.members.iter()
                            .map(|t| format!("recon/{}/{}/", t.job_id, t.name))
                            .collect::<Vec<_>>(),
                    })),
                    "x-tessera": { "stages": u.members.iter().map(|t| stage_view(t)).collect::<Vec<_>>() },
                })
            }
            None => stage_view(u.members[0]),
        })
        .collect()
}

/// A job of the caller's tenant, or 404.
pub async fn owned(s: &ApiState, caller: &Caller, id: &str) -> Result<Job, Problem> {
    Ok(tenancy::job(s.engine.ports().store.as_ref(), &caller.tenant, id).await?)
}

/// `GET /v1/jobs` query: sfmapi's filters and paging.
#[derive(Debug, Deserialize, Default)]
pub struct ListQuery {
    /// Only this project's jobs.
    pub project_id: Option<String>,
    /// Only jobs in this status (`pending`, `running`, `succeeded`, …).
    pub status: Option<String>,
    /// Items per page.
    pub page_size: Option<usize>,
    /// Where the previous page stopped.
    pub page_token: Option<String>,
}

/// `GET /v1/jobs[?project_id=&status=]`. The filters apply within each page, so a page
/// may hold fewer items than asked; follow `next_page_token` to the end.
pub async fn list(
    State(s): State<ApiState>,
    caller: Caller,
    QueryParams(q): QueryParams<ListQuery>,
) -> Result<Json<Value>, Problem> {
    let paging = Paging {
        page_size: q.page_size,
        page_token: q.page_token.clone(),
    };
    let (jobs, next) = s
        .engine
        .list_jobs(&caller.tenant, paging.page_token.clone(), paging.size())
        .await?;
    let items: Vec<Value> = jobs
        .iter()
        .filter(|j| {
            q.project_id
                .as_deref()
                .is_none_or(|p| j.project.is_some_and(|jp| jp.to_string() == p))
                && q.status.as_deref().is_none_or(|st| status(j) == st)
        })
        .map(|j| view(j, None, (None, None)))
        .collect();
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

/// `PATCH /v1/jobs/{id}` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobPatch {
    /// What people call the run.
    pub label: String,
}

/// `PATCH /v1/jobs/{id}` `{"label": "…"}`: rename a run; the job as it is now.
pub async fn patch(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    body: Result<Json<JobPatch>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, Problem> {
    let job = owned(&s, &caller, &id).await?;
    let Json(b) = body.map_err(|e| {
        Problem::validation(format!("the body must be JSON {{\"label\": \"…\"}}: {e}"))
    })?;
    let job = s
        .engine
        .relabel(job.id, &b.label)
        .await
        .map_err(|e| match e {
            EngineError::Refused(m) => Problem::validation(m),
            other => other.into(),
        })?;
    let tasks = s.engine.job_tasks(job.id).await?;
    let times = times(&s, &job, &tasks).await?;
    Ok(Json(view(&job, Some(&tasks), times)))
}

/// `DELETE /v1/jobs/{id}`: erase a job that has ended, with everything it made (its
/// files, tasks and events); 409 while it runs.
pub async fn delete(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, Problem> {
    let job = owned(&s, &caller, &id).await?;
    tessera_jobs::erase_job::erase_job(&s.engine, job.id, &caller.actor()).await?;
    Ok(StatusCode::NO_CONTENT)
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

/// One node of the client's DAG (or one task of another job kind) and the tasks in it.
struct Unit<'a> {
    task_id: String,
    kind: String,
    status: &'static str,
    members: Vec<&'a Task>,
    /// The spec node, for a reconstruction.
    node: Option<spec_dag::SpecNode<'a>>,
}

fn units<'a>(job: &Job, tasks: &'a [Task]) -> Vec<Unit<'a>> {
    let spec = serde_json::from_value::<ReconstructionSpec>(job.spec.clone()).ok();
    match spec_dag::nodes(spec.as_ref(), tasks) {
        Some(nodes) => nodes
            .into_iter()
            .map(|n| Unit {
                task_id: n.task.id.to_string(),
                kind: n.kind.name().into(),
                status: n.status(),
                members: n.stages.clone(),
                node: Some(n),
            })
            .collect(),
        None => tasks
            .iter()
            .map(|t| Unit {
                task_id: t.id.to_string(),
                kind: t.kind.clone(),
                status: task_status(t),
                members: vec![t],
                node: None,
            })
            .collect(),
    }
}

/// `GET /v1/jobs/{id}/progress`: sfmapi's `JobProgress`, for clients that poll instead
/// of holding an event stream open. A task's progress is 1 once it ended, the fraction
/// of its latest `phase_progress` while it runs, and 0 before.
pub async fn progress(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, Problem> {
    let job = owned(&s, &caller, &id).await?;
    let tasks = s.engine.job_tasks(job.id).await?;
    let events = s.engine.ports().events.as_ref();
    let last = events.last_seq(job.id).await.map_err(Problem::internal)?;
    let recent = events
        .read_after(job.id, last.saturating_sub(500), 500)
        .await
        .map_err(Problem::internal)?;
    let units = units(&job, &tasks);
    let mut counts = serde_json::Map::new();
    let mut views = Vec::new();
    let mut sum = 0.0;
    for u in &units {
        let ids: Vec<_> = u.members.iter().map(|t| t.id).collect();
        let mine = || {
            recent
                .iter()
                .rev()
                .filter(|e| e.task_id.is_some_and(|t| ids.contains(&t)))
        };
        let latest = mine().next();
        let moving = mine().find_map(|e| match &e.kind {
            EventKind::PhaseProgress {
                phase,
                current,
                total,
                ..
            } => Some((*phase, *current, *total)),
            _ => None,
        });
        let fraction = match u.status {
            "succeeded" | "failed" | "cancelled" => 1.0,
            "running" => moving
                .and_then(|(_, c, t)| t.filter(|t| *t > 0).map(|t| (c as f64 / t as f64).min(1.0)))
                .unwrap_or(0.0),
            _ => 0.0,
        };
        sum += fraction;
        let n = counts.entry(u.status.to_string()).or_insert(json!(0));
        *n = json!(n.as_u64().unwrap_or(0) + 1);
        let finished = u.members.iter().filter_map(|t| t.finished_at).max();
        views.push(json!({
            "task_id": u.task_id, "kind": u.kind, "status": u.status, "progress": fraction,
            "phase": moving.map(|(p, _, _)| p.as_str()),
            "current": moving.map(|(_, c, _)| c), "total": moving.and_then(|(_, _, t)| t),
            "latest_event_id": latest.map(|e| e.seq),
            "latest_event_kind": latest.map(|e| tessera_core::event::sfmapi::kind(&e.kind)),
            "started_at": null,
            "finished_at": finished.filter(|_| matches!(u.status, "succeeded" | "failed" | "cancelled")).map(Millis::to_rfc3339),
            "elapsed_seconds": null,
        }));
    }
    let current = units.iter().find(|u| u.status == "running");
    let completed = units.iter().filter(|u| u.status == "succeeded").count();
    let latest = recent.last();
    Ok(Json(json!({
        "job_id": job.id,
        "recipe": recipe(&job),
        "status": status(&job),
        "progress": if units.is_empty() { 0.0 } else { sum / units.len() as f64 },
        "total_tasks": units.len(),
        "completed_tasks": completed,
        "task_counts": counts,
        "current_task_id": current.map(|u| u.task_id.clone()),
        "current_task_kind": current.map(|u| u.kind.clone()),
        "current_phase": current.and_then(|u| views.iter().find(|v| v["task_id"] == u.task_id.as_str())).map(|v| v["phase"].clone()),
        "latest_event_id": latest.map(|e| e.seq),
        "latest_event": latest.map(tessera_core::event::sfmapi::event),
        "tasks": views,
    })))
}
