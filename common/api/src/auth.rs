//! Who is calling: the tenant every read and write is scoped to.
//!
//! `none`: every request is the local tenant (answers carry a warning header).
//! `api_key`: `Authorization: Bearer <key>`; keys are stored only as their SHA-256, each
//! names its tenant, and admin keys may create, list and revoke keys.

use crate::ApiState;
use crate::problem::Problem;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Read;
use tessera_core::ports::state_store::{Condition, Index, Item, ItemKey, Query, StateStore, Write};
use tessera_core::{Millis, TenantId, records};

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
    /// May manage API keys.
    pub admin: bool,
}

/// A stored API key (the secret itself is never stored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKey {
    /// Public id, for listing and revoking.
    pub key_id: String,
    /// Its tenant.
    pub tenant: TenantId,
    /// May manage keys.
    pub admin: bool,
    /// Created.
    pub created_at: Millis,
    /// Revoked, if it was.
    pub revoked_at: Option<Millis>,
}

fn key_item_key(secret: &str) -> ItemKey {
    ItemKey::new(
        format!("APIKEY#{}", hex::encode(Sha256::digest(secret.as_bytes()))),
        "KEY",
    )
}

/// Partition listing every key by id.
const KEYS_PARTITION: &str = "APIKEYS";

/// Create a key for `tenant`; returns the record and the secret (shown once).
pub async fn create_key(
    store: &dyn StateStore,
    tenant: TenantId,
    admin: bool,
) -> Result<(ApiKey, String), Problem> {
    let mut random = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut random))
        .map_err(Problem::internal)?;
    let secret = format!("tsk_{}", hex::encode(random));
    let key = ApiKey {
        key_id: ulid::Ulid::new().to_string(),
        tenant,
        admin,
        created_at: Millis::now(),
        revoked_at: None,
    };
    let mut item = Item::new(
        key_item_key(&secret),
        serde_json::to_value(&key).expect("serializable"),
    );
    item.by_parent = Some(ItemKey::new(KEYS_PARTITION, key.key_id.clone()));
    store
        .transact(vec![Write::Put {
            item,
            condition: Condition::Absent,
        }])
        .await?;
    Ok((key, secret))
}

/// Every key (admin view).
pub async fn list_keys(store: &dyn StateStore) -> Result<Vec<ApiKey>, Problem> {
    Ok(tessera_core::projects::query_all(
        store,
        Query::partition(Index::ByParent, KEYS_PARTITION, 500),
    )
    .await?)
}

/// Revoke a key by id; revoking twice is harmless.
pub async fn revoke_key(store: &dyn StateStore, key_id: &str) -> Result<ApiKey, Problem> {
    let mut q = Query::partition(Index::ByParent, KEYS_PARTITION, 1);
    q.sk_prefix = Some(key_id.to_string());
    let page = store.query(&q).await?;
    let item = page
        .items
        .into_iter()
        .find(|i| i.by_parent.as_ref().is_some_and(|b| b.sk == key_id))
        .ok_or_else(|| Problem::not_found(format!("API key {key_id} does not exist")))?;
    let mut key: ApiKey = records::decode(&item)?;
    if key.revoked_at.is_none() {
        key.revoked_at = Some(Millis::now());
        store
            .transact(vec![Write::Set {
                key: item.key.clone(),
                fields: vec![(
                    "revoked_at".into(),
                    serde_json::to_value(key.revoked_at).expect("serializable"),
                )],
                condition: Condition::Exists,
            }])
            .await?;
    }
    Ok(key)
}

impl FromRequestParts<ApiState> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Problem> {
        match state.auth {
            AuthMode::None => Ok(Caller {
                tenant: TenantId::local(),
                admin: true,
            }),
            AuthMode::ApiKey => {
                let header = parts
                    .headers
                    .get(axum::http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| {
                        Problem::unauthorized("send `Authorization: Bearer <api key>`")
                    })?;
                let secret = header
                    .strip_prefix("Bearer ")
                    .ok_or_else(|| {
                        Problem::unauthorized("the Authorization header must be `Bearer <api key>`")
                    })?
                    .trim();
                let item = state
                    .engine
                    .ports()
                    .store
                    .get(&key_item_key(secret))
                    .await?
                    .ok_or_else(|| Problem::unauthorized("unknown API key"))?;
                let key: ApiKey = records::decode(&item)?;
                if key.revoked_at.is_some() {
                    return Err(Problem::unauthorized("this API key was revoked"));
                }
                Ok(Caller {
                    tenant: key.tenant,
                    admin: key.admin,
                })
            }
        }
    }
}
