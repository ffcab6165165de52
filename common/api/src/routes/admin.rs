//! `/v1/admin/api-keys`: create, list, revoke (admin keys only).

use crate::ApiState;
use crate::auth::{self, Caller};
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use tessera_core::TenantId;

/// The body of a create request.
#[derive(Debug, Deserialize)]
pub struct CreateKey {
    /// The tenant the key acts for.
    pub tenant: String,
    /// Whether it may manage keys.
    #[serde(default)]
    pub admin: bool,
}

fn admin_only(c: &Caller) -> Result<(), Problem> {
    if c.admin {
        Ok(())
    } else {
        Err(Problem::forbidden("managing API keys needs an admin key"))
    }
}

/// `POST /v1/admin/api-keys`: the secret is in this answer only.
pub async fn create(
    State(s): State<ApiState>,
    caller: Caller,
    body: Result<Json<CreateKey>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<Value>), Problem> {
    admin_only(&caller)?;
    let Json(body) = body.map_err(|e| {
        Problem::bad_request(format!("the body must be JSON {{\"tenant\": …}}: {e}"))
    })?;
    let tenant: TenantId = body
        .tenant
        .parse()
        .map_err(|e| Problem::validation(format!("tenant: {e}")))?;
    let (key, secret) =
        auth::create_key(s.engine.ports().store.as_ref(), tenant, body.admin).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "key": key, "api_key": secret })),
    ))
}

/// `GET /v1/admin/api-keys`.
pub async fn list(State(s): State<ApiState>, caller: Caller) -> Result<Json<Value>, Problem> {
    admin_only(&caller)?;
    let keys = auth::list_keys(s.engine.ports().store.as_ref()).await?;
    Ok(Json(
        json!({ "items": keys, "next_page_token": null, "total": keys.len() }),
    ))
}

/// `DELETE /v1/admin/api-keys/{key_id}`.
pub async fn revoke(
    State(s): State<ApiState>,
    caller: Caller,
    Path(key_id): Path<String>,
) -> Result<Json<Value>, Problem> {
    admin_only(&caller)?;
    Ok(Json(
        json!({ "key": auth::revoke_key(s.engine.ports().store.as_ref(), &key_id).await? }),
    ))
}
