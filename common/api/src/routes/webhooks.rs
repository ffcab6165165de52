//! `/v1/x-tessera/webhooks`: a tenant's webhooks and their deliveries
//! (`tessera_core::catalog::webhooks` decides; the engine raises and delivers).

use super::Paging;
use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use tessera_core::WebhookId;
use tessera_core::catalog::webhooks::{self, NewWebhook};
use tessera_core::notify::{self, NoticeType, Subscription};

/// The body of a create request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhook {
    /// Where deliveries are POSTed.
    pub url: String,
    /// Notice types (`job.succeeded`, …); absent or empty: every type.
    #[serde(default)]
    pub events: Vec<String>,
    /// Only this project's notices; absent: every project of the tenant.
    #[serde(default)]
    pub project_id: Option<String>,
}

fn view(s: &Subscription) -> Value {
    json!({
        "id": s.id, "url": s.url, "project_id": s.project, "events": s.events,
        "created_at": s.created_at.to_rfc3339(),
    })
}

fn webhook_id(id: &str) -> Result<WebhookId, Problem> {
    id.parse()
        .map_err(|_| Problem::not_found(format!("no webhook `{id}`")))
}

/// `POST /v1/x-tessera/webhooks`: the signing secret is in this answer only.
pub async fn create(
    State(s): State<ApiState>,
    caller: Caller,
    body: Result<Json<CreateWebhook>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<Value>), Problem> {
    // A webhook sends the tenant's notices (photo and file names included) wherever it
    // points, and outlives the key that made it: admin keys only, as for keys.
    caller.require_admin("making a webhook")?;
    let Json(body) = body.map_err(|e| {
        Problem::bad_request(format!(
            "the body must be JSON {{\"url\": \"https://…\", \"events\"?: [\"job.succeeded\", …], \"project_id\"?: \"…\"}}: {e}"
        ))
    })?;
    let mut events = Vec::new();
    for name in &body.events {
        events.push(NoticeType::parse(name).ok_or_else(|| {
            let known: Vec<_> = NoticeType::ALL.iter().map(|t| t.as_str()).collect();
            Problem::validation(format!(
                "events: unknown notice type `{name}`; known: {}",
                known.join(", ")
            ))
        })?);
    }
    let project = match &body.project_id {
        Some(pid) => Some(super::projects::owned(&s, &caller, pid).await?.id),
        None => None,
    };
    let sub = webhooks::create(
        s.engine.ports().store.as_ref(),
        &caller.actor(),
        NewWebhook {
            project,
            url: body.url,
            events,
        },
        notify::private_targets_allowed(),
    )
    .await?;
    s.engine.forget_webhooks(&caller.tenant);
    tracing::info!(tenant = %caller.tenant, webhook = %sub.id, "webhook created");
    let mut v = view(&sub);
    v["secret"] = json!(sub.secret);
    Ok((StatusCode::CREATED, Json(v)))
}

/// `GET /v1/x-tessera/webhooks`: the caller's tenant's webhooks (no secrets).
pub async fn list(State(s): State<ApiState>, caller: Caller) -> Result<Json<Value>, Problem> {
    let subs = webhooks::list(s.engine.ports().store.as_ref(), &caller.tenant).await?;
    let items: Vec<Value> = subs.iter().map(view).collect();
    Ok(Json(
        json!({ "items": items, "next_page_token": null, "total": subs.len() }),
    ))
}

/// `GET /v1/x-tessera/webhooks/{webhook_id}`.
pub async fn get(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, Problem> {
    let sub = webhooks::get(
        s.engine.ports().store.as_ref(),
        &caller.tenant,
        webhook_id(&id)?,
    )
    .await?;
    Ok(Json(view(&sub)))
}

/// `DELETE /v1/x-tessera/webhooks/{webhook_id}`: deliveries still queued are dropped.
pub async fn delete(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, Problem> {
    let id = webhook_id(&id)?;
    let store = s.engine.ports().store.as_ref();
    // Ownership first: another tenant's id is a 404 whatever the key.
    let sub = webhooks::get(store, &caller.tenant, id).await?;
    caller.require_admin("deleting a webhook")?;
    webhooks::delete(store, &caller.actor(), &sub).await?;
    s.engine.forget_webhooks(&caller.tenant);
    tracing::info!(tenant = %caller.tenant, webhook = %id, "webhook deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/x-tessera/webhooks/{webhook_id}/deliveries`: newest first, each with its
/// state, tries so far and the last answer.
pub async fn deliveries(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(paging): Query<Paging>,
) -> Result<Json<Value>, Problem> {
    let (list, next) = webhooks::deliveries(
        s.engine.ports().store.as_ref(),
        &caller.tenant,
        webhook_id(&id)?,
        paging.page_token.clone(),
        paging.page_size.unwrap_or(50),
    )
    .await?;
    let mut items = Vec::new();
    for d in list {
        let task = match s
            .engine
            .task(tessera_engine::notify::delivery_task(d.job_id))
            .await
        {
            Ok(t) => Some(t),
            Err(tessera_engine::EngineError::NoSuchTask(_)) => None,
            Err(e) => return Err(e.into()),
        };
        items.push(json!({
            "notice_id": d.notice,
            "type": d.kind,
            "job_id": d.job_id,
            "created_at": d.created_at.to_rfc3339(),
            "state": task.as_ref().map(|t| t.state),
            "attempts": task.as_ref().map(|t| t.attempts),
            "max_attempts": task.as_ref().map(|t| t.max_attempts),
            "next_attempt_at": task.as_ref().filter(|t| t.state == tessera_core::task::TaskState::Queued).map(|t| t.not_before.to_rfc3339()),
            "last_error": task.as_ref().and_then(|t| t.last_error.as_ref()).map(|e| &e.message),
            "result": task.as_ref().and_then(|t| t.result.clone()),
        }));
    }
    Ok(Json(json!({ "items": items, "next_page_token": next })))
}
