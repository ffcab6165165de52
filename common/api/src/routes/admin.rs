//! `/v1/admin/api-keys`: an admin key creates, lists and revokes the keys of its own
//! tenant (`tessera_core::catalog::api_keys` decides; keys for other tenants are an
//! operator's, made with the store itself).

use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use tessera_core::TenantId;
use tessera_core::catalog::api_keys;

/// The body of a create request.
#[derive(Debug, Deserialize)]
pub struct CreateKey {
    /// The tenant the key acts for: the caller's own (default).
    #[serde(default)]
    pub tenant: Option<String>,
    /// Whether it may manage keys.
    #[serde(default)]
    pub admin: bool,
}

/// `POST /v1/admin/api-keys`: the secret is in this answer only.
pub async fn create(
    State(s): State<ApiState>,
    caller: Caller,
    body: Result<Json<CreateKey>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<Value>), Problem> {
    caller.require_admin("managing API keys")?;
    let Json(body) = body.map_err(|e| {
        Problem::bad_request(format!(
            "the body must be JSON {{\"admin\"?: bool, \"tenant\"?: …}}: {e}"
        ))
    })?;
    if let Some(t) = &body.tenant {
        let tenant: TenantId = t
            .parse()
            .map_err(|e| Problem::validation(format!("tenant: {e}")))?;
        if tenant != caller.tenant {
            return Err(Problem::forbidden(format!(
                "an admin key of tenant {} makes keys for {} only; keys for tenant {tenant} are made by an operator (`tessera aws create-key --tenant {tenant}`)",
                caller.tenant, caller.tenant
            )));
        }
    }
    let (key, secret) =
        api_keys::create(s.engine.ports().store.as_ref(), &caller.tenant, body.admin).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "key": key, "api_key": secret })),
    ))
}

/// `GET /v1/admin/api-keys`: the caller's tenant's keys.
pub async fn list(State(s): State<ApiState>, caller: Caller) -> Result<Json<Value>, Problem> {
    caller.require_admin("managing API keys")?;
    let keys = api_keys::list(s.engine.ports().store.as_ref(), &caller.tenant).await?;
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
    caller.require_admin("managing API keys")?;
    let key = api_keys::revoke(s.engine.ports().store.as_ref(), &caller.tenant, &key_id).await?;
    Ok(Json(json!({ "key": key })))
}
