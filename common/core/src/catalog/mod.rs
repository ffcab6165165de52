//! The catalog: what a tenant may read into Tessera and from where. The rules here are the
//! tenancy boundary for bytes that do not arrive through an upload: an `s3_key` photo and
//! an `s3` dataset source read objects Tessera did not write, so who may name which
//! object is decided once, here, and every entry point (HTTP, CLI, Lambda) asks.

pub mod api_keys;
pub mod collect;
pub mod datasets;
pub mod erasure;
pub mod idempotency;
pub mod image_bytes;
pub mod incoming;
pub mod quotas;
pub mod refusals;
pub mod retention;
pub mod source_grants;
pub mod tenancy;
pub mod uploads;
pub mod webhooks;

use crate::error::{Classify, ErrorClass};
use crate::ports::object_store::ObjectStoreError;
use crate::ports::state_store::{Condition, Item, ItemKey, StoreError, Write};

/// Why a catalog request was refused. Each variant is one answer a client can act on.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// Nothing of the caller's tenant by that id (another tenant's things included).
    #[error("{0}")]
    NotFound(String),
    /// The caller is not identified (no key, an unknown or a revoked one).
    #[error("{0}")]
    Unauthorized(String),
    /// The caller's tenant may not read what it named.
    #[error("{0}")]
    Forbidden(String),
    /// The request names something malformed.
    #[error("{0}")]
    Invalid(String),
    /// The request conflicts with the current state (a name taken, a finalized upload).
    #[error("{0}")]
    Conflict(String),
    /// It existed and has expired.
    #[error("{0}")]
    Gone(String),
    /// Larger than accepted.
    #[error("{0}")]
    TooLarge(String),
    /// A chunk's range does not fit the upload.
    #[error("{0}")]
    RangeNotSatisfiable(String),
    /// A tenant's quota would be exceeded.
    #[error("{0}")]
    Quota(String),
    /// Busy with something that ends soon; retry.
    #[error("{0}")]
    Unavailable(String),
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The object store failed.
    #[error(transparent)]
    Objects(#[from] ObjectStoreError),
}

/// The write that stores `body` under `key`, due for the collector at `due` (the expiry
/// index `DUE#expiry#<shard>`, which [`collect::collect_expired`] walks).
pub(crate) fn due_item(key: ItemKey, body: serde_json::Value, due: crate::Millis) -> Write {
    let mut item = Item::new(key.clone(), body);
    item.by_due = Some(expiry_index_key(due, &key.pk));
    Write::Put {
        item,
        condition: Condition::None,
    }
}

/// The expiry-index entry of the item whose partition key is `pk`, due at `due`.
pub(crate) fn expiry_index_key(due: crate::Millis, pk: &str) -> ItemKey {
    ItemKey::new(
        crate::records::due_shard_partition(EXPIRY, crate::records::due_shard(pk)),
        format!("{}#{pk}", due.sort_key()),
    )
}

/// The kind of due entry the collector walks.
pub const EXPIRY: &str = "expiry";

/// Delete a collected item unless it changed since it was read (a later writer wins).
pub(crate) async fn drop_if_unchanged(
    store: &dyn crate::ports::StateStore,
    item: &Item,
) -> Result<(), CatalogError> {
    match store
        .transact(vec![Write::Delete {
            key: item.key.clone(),
            condition: Condition::Rev(item.rev),
        }])
        .await
    {
        Err(e) if e.is_conflict() => Ok(()),
        other => Ok(other?),
    }
}

/// Delete every object under `prefix`.
pub(crate) async fn delete_prefix(
    objects: &dyn crate::ports::ObjectStore,
    prefix: &str,
) -> Result<usize, CatalogError> {
    let mut after = None;
    let mut n = 0;
    loop {
        let (page, next) = objects.list(prefix, after.as_deref(), 500).await?;
        for o in &page {
            objects.delete(&o.key).await?;
            n += 1;
        }
        match next {
            Some(k) => after = Some(k),
            None => return Ok(n),
        }
    }
}

impl CatalogError {
    /// A local file (scratch space) could not be written.
    pub fn io(path: &std::path::Path, e: std::io::Error) -> Self {
        CatalogError::Objects(ObjectStoreError::Io {
            key: path.display().to_string(),
            source: e,
        })
    }
}

impl Classify for CatalogError {
    fn class(&self) -> ErrorClass {
        match self {
            CatalogError::NotFound(_)
            | CatalogError::Unauthorized(_)
            | CatalogError::Forbidden(_)
            | CatalogError::Invalid(_)
            | CatalogError::Conflict(_)
            | CatalogError::Gone(_)
            | CatalogError::TooLarge(_)
            | CatalogError::RangeNotSatisfiable(_)
            | CatalogError::Quota(_) => ErrorClass::Permanent,
            CatalogError::Unavailable(_) => ErrorClass::Transient,
            CatalogError::Store(e) => e.class(),
            CatalogError::Objects(e) => e.class(),
        }
    }
}
