//! Who is calling: the tenant every read and write is scoped to.
//!
//! `none`: every request is the local tenant (answers carry a warning header).
//! `api_key`: `Authorization: Bearer <key>`, checked by `tessera_core::catalog::api_keys`
//! (where keys, their tenants and who may manage them are decided).

use crate::ApiState;
use crate::problem::Problem;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use tessera_core::TenantId;
use tessera_core::catalog::api_keys;
pub use tessera_core::catalog::api_keys::ApiKey;
use tessera_core::ports::StateStore;

/// How callers are identified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// Everyone is the local tenant, with admin rights. Local development only.
    None,
    /// Bearer API keys.
    ApiKey,
}

impl std::str::FromStr for AuthMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(AuthMode::None),
            "api_key" => Ok(AuthMode::ApiKey),
            o => Err(format!("unknown auth mode `{o}`; use `none` or `api_key`")),
        }
    }
}

/// The authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Everything the caller reads or writes belongs to this tenant.
    pub tenant: TenantId,
    /// May manage its tenant's API keys and weaken a project's privacy
    /// (`tessera_core::weakening`).
    pub admin: bool,
    /// The key it called with (`None` in `none` mode), so long-lived streams can check
    /// that it was not revoked meanwhile.
    pub key_id: Option<String>,
}

impl Caller {
    /// Refused with 403 unless an admin key: `doing` names what needs one ("managing
    /// API keys").
    pub fn require_admin(&self, doing: &str) -> Result<(), crate::problem::Problem> {
        if self.admin {
            Ok(())
        } else {
            Err(crate::problem::Problem::forbidden(format!(
                "{doing} needs an admin key"
            )))
        }
    }

    /// Who this caller is in the audit trail.
    pub fn actor(&self) -> tessera_core::audit::Actor {
        tessera_core::audit::Actor {
            who: self
                .key_id
                .as_ref()
                .map_or_else(|| "local".to_string(), |k| format!("api_key:{k}")),
            tenant: self.tenant.clone(),
            admin: self.admin,
        }
    }

    /// Whether the caller may still act: its key was not revoked since the request began.
    pub async fn still_valid(&self, store: &dyn StateStore) -> bool {
        match &self.key_id {
            None => true,
            // Fail closed: a stream whose key cannot be checked ends (the client resumes).
            Some(id) => api_keys::still_valid(store, &self.tenant, id)
                .await
                .unwrap_or(false),
        }
    }
}

/// Make a key for `tenant` (the operator's path: the store itself); the secret is shown
/// once.
pub async fn create_key(
    store: &dyn StateStore,
    tenant: TenantId,
    admin: bool,
) -> Result<(ApiKey, String), Problem> {
    Ok(api_keys::create(store, &tenant, admin).await?)
}

impl FromRequestParts<ApiState> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Problem> {
        match state.auth {
            AuthMode::None => Ok(Caller {
                tenant: TenantId::local(),
                admin: true,
                key_id: None,
            }),
            AuthMode::ApiKey => {
                let header = parts
                    .headers
                    .get(axum::http::header::AUTHORIZATION)
                    .map(|v| {
                        v.to_str().map_err(|_| {
                            Problem::unauthorized("the Authorization header must be ASCII")
                        })
                    })
                    .transpose()?;
                let key =
                    api_keys::authenticate(state.engine.ports().store.as_ref(), header).await?;
                Ok(Caller {
                    tenant: key.tenant,
                    admin: key.admin,
                    key_id: Some(key.key_id),
                })
            }
        }
    }
}
