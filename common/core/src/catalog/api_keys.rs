//! API keys: who a caller is, and who may make keys for whom.
//!
//! A key is stored only as the SHA-256 of its secret and names one tenant. An admin key
//! manages the keys *of its own tenant* (create, list, revoke); keys for any tenant are
//! made by an operator, who holds the state store itself (`tessera aws create-key`, the
//! first start of `tessera serve --auth api_key`). A tenant's last active admin key
//! cannot be revoked, so an admin cannot lock the tenant out of key management.

use super::CatalogError;
use crate::Millis;
use crate::ids::TenantId;
use crate::ports::StateStore;
use crate::ports::state_store::{Condition, Index, Item, ItemKey, Query, Write};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A stored API key (the secret itself is never stored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKey {
    /// Public id, for listing and revoking.
    pub key_id: String,
    /// Its tenant.
    pub tenant: TenantId,
    /// May manage its tenant's keys.
    pub admin: bool,
    /// Created.
    pub created_at: Millis,
    /// Revoked, if it was.
    pub revoked_at: Option<Millis>,
}

/// Longest secret looked up (ours are 68 characters); longer ones are refused unread.
const MAX_SECRET: usize = 256;

fn secret_key(secret: &str) -> ItemKey {
    ItemKey::new(
        format!("APIKEY#{}", hex::encode(Sha256::digest(secret.as_bytes()))),
        "KEY",
    )
}

/// The by-parent partition listing a tenant's keys by id.
fn tenant_keys(tenant: &TenantId) -> String {
    format!("TENANT#{tenant}#APIKEYS")
}

/// Where keys made before keys were listed per tenant are listed (all tenants together).
const LEGACY_KEYS: &str = "APIKEYS";

/// Make a key for `tenant`; the secret is returned once and never stored.
pub async fn create(
    store: &dyn StateStore,
    tenant: &TenantId,
    admin: bool,
) -> Result<(ApiKey, String), CatalogError> {
    let mut random = [0u8; 32];
    getrandom(&mut random)?;
    let secret = format!("tsk_{}", hex::encode(random));
    let key = ApiKey {
        key_id: ulid::Ulid::new().to_string(),
        tenant: tenant.clone(),
        admin,
        created_at: Millis::now(),
        revoked_at: None,
    };
    let mut item = Item::new(
        secret_key(&secret),
        serde_json::to_value(&key).expect("serializable"),
    );
    item.by_parent = Some(ItemKey::new(tenant_keys(tenant), key.key_id.clone()));
    store
        .transact(vec![Write::Put {
            item,
            condition: Condition::Absent,
        }])
        .await?;
    Ok((key, secret))
}

/// Fill `buf` from the kernel's CSPRNG.
pub(crate) fn getrandom(buf: &mut [u8]) -> Result<(), CatalogError> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(buf))
        .map_err(|e| CatalogError::io(std::path::Path::new("/dev/urandom"), e))
}

async fn items_of(store: &dyn StateStore, tenant: &TenantId) -> Result<Vec<Item>, CatalogError> {
    let mut out = Vec::new();
    for pk in [tenant_keys(tenant), LEGACY_KEYS.to_string()] {
        let mut q = Query::partition(Index::ByParent, pk, 500);
        loop {
            let page = store.query(&q).await?;
            out.extend(
                page.items
                    .into_iter()
                    .filter(|i| i.body["tenant"].as_str() == Some(tenant.as_str())),
            );
            match page.next {
                Some(n) => q.after = Some(n),
                None => break,
            }
        }
    }
    Ok(out)
}

/// A tenant's keys, oldest first.
pub async fn list(store: &dyn StateStore, tenant: &TenantId) -> Result<Vec<ApiKey>, CatalogError> {
    let mut keys = items_of(store, tenant)
        .await?
        .iter()
        .map(crate::records::decode)
        .collect::<Result<Vec<ApiKey>, _>>()?;
    keys.sort_by(|a, b| a.key_id.cmp(&b.key_id));
    Ok(keys)
}

/// Revoke one of `tenant`'s keys by id (revoking twice is harmless). Another tenant's
/// key does not exist; the tenant's last active admin key is refused.
pub async fn revoke(
    store: &dyn StateStore,
    tenant: &TenantId,
    key_id: &str,
) -> Result<ApiKey, CatalogError> {
    let items = items_of(store, tenant).await?;
    let (item, mut key) = items
        .iter()
        .filter_map(|i| {
            crate::records::decode::<ApiKey>(i)
                .ok()
                .map(|k| (i.clone(), k))
        })
        .find(|(_, k)| k.key_id == key_id)
        .ok_or_else(|| {
            CatalogError::NotFound(format!(
                "API key {} does not exist",
                key_id.chars().take(80).collect::<String>()
            ))
        })?;
    if key.revoked_at.is_some() {
        return Ok(key);
    }
    let mut writes = Vec::with_capacity(2);
    if key.admin {
        // The last-admin rule holds inside the revoking transaction: it also checks that
        // one other active admin key is unchanged since it was read. Two admins revoking
        // each other at once then cannot both succeed — whichever commits second finds
        // the key it relied on changed. (Whatever the interleaving, the key the last
        // committed revocation checked is still active.)
        let other = items
            .iter()
            .filter_map(|i| crate::records::decode::<ApiKey>(i).ok().map(|k| (i, k)))
            .find(|(_, k)| k.admin && k.revoked_at.is_none() && k.key_id != key.key_id);
        let Some((other, _)) = other else {
            return Err(CatalogError::Conflict(format!(
                "key {key_id} is tenant {tenant}'s last active admin key; create another admin key before revoking it"
            )));
        };
        writes.push(Write::Check {
            key: other.key.clone(),
            condition: Condition::Rev(other.rev),
        });
    }
    key.revoked_at = Some(Millis::now());
    writes.push(Write::Set {
        key: item.key.clone(),
        fields: vec![(
            "revoked_at".into(),
            serde_json::to_value(key.revoked_at).expect("serializable"),
        )],
        condition: Condition::Rev(item.rev),
    });
    let checked_another = writes.len() == 2;
    store.transact(writes).await.map_err(|e| match e {
        crate::ports::state_store::StoreError::Conflict { index: 0, .. } if checked_another => {
            CatalogError::Conflict(format!(
                "another admin key of tenant {tenant} changed meanwhile (revoked at the same moment?); key {key_id} may now be its last active admin key; look at the keys and retry"
            ))
        }
        e if e.is_conflict() => CatalogError::Conflict("the key changed meanwhile; retry".into()),
        e => e.into(),
    })?;
    Ok(key)
}

/// The key an `Authorization` header carries (`Bearer <secret>`, the scheme in any
/// case), if it is valid and not revoked.
pub async fn authenticate(
    store: &dyn StateStore,
    authorization: Option<&str>,
) -> Result<ApiKey, CatalogError> {
    let header =
        authorization.ok_or_else(|| unauthorized("send `Authorization: Bearer <api key>`"))?;
    let (scheme, secret) = header
        .trim()
        .split_once(' ')
        .ok_or_else(|| unauthorized("the Authorization header must be `Bearer <api key>`"))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(unauthorized(
            "the Authorization header must be `Bearer <api key>`",
        ));
    }
    let secret = secret.trim();
    if secret.is_empty() || secret.len() > MAX_SECRET {
        return Err(unauthorized("unknown API key"));
    }
    let item = store
        .get(&secret_key(secret))
        .await?
        .ok_or_else(|| unauthorized("unknown API key"))?;
    let key: ApiKey = crate::records::decode(&item)?;
    if key.revoked_at.is_some() {
        return Err(unauthorized("this API key was revoked"));
    }
    Ok(key)
}

/// Whether the key with this id is still valid (streams re-check it while open).
pub async fn still_valid(
    store: &dyn StateStore,
    tenant: &TenantId,
    key_id: &str,
) -> Result<bool, CatalogError> {
    Ok(list(store, tenant)
        .await?
        .iter()
        .any(|k| k.key_id == key_id && k.revoked_at.is_none()))
}

fn unauthorized(why: &str) -> CatalogError {
    CatalogError::Unauthorized(why.to_string())
}
