//! Per-tenant quotas: what one tenant may hold and run, so that one careless or hostile
//! client cannot fill the store or the workers for everyone. A refusal says which quota,
//! what is used and what to do (HTTP 429 or 413 at the API).
//!
//! Counted here: bytes of dataset images stored, reconstructions not yet finished,
//! photos (rows and refused uploads alike: both hold an unblurred upload), bytes of
//! finalized uploads (blobs) and unfinished uploads.
//! Images per dataset and datasets per project are counted where they are reserved
//! (`datasets`). The byte counter is updated in the same transaction as the image
//! records, with additions that never conflict; two registrations racing at the limit
//! may pass it by as many images as are being registered at that moment, never more.

use super::CatalogError;
use crate::ids::{JobId, TenantId};
use crate::ports::StateStore;
use crate::ports::state_store::{Condition, Index, Item, ItemKey, Query, Write};

/// Bytes of dataset images one tenant may store.
pub const MAX_STORED_BYTES: u64 = 200 << 30;
/// Reconstructions of one tenant queued or running at once.
pub const MAX_ACTIVE_RECONSTRUCTIONS: usize = 20;
/// Photos one tenant may hold: counted when a photo is admitted (added from a blob or
/// an object, or given an upload URL), released when it is erased or its refusal is
/// collected. A presigned URL never used keeps its count (the tenant's own loss, and
/// bounded by how often it asks).
pub const MAX_PHOTOS: u64 = 1_000_000;
/// Bytes of finalized uploads (blobs) one tenant may keep at once.
pub const MAX_BLOB_BYTES: u64 = 50 << 30;
/// Unfinished uploads one tenant may have open at once (each up to 1 GiB of chunks).
pub const MAX_OPEN_UPLOADS: u64 = 100;

/// The counter fields of a tenant's usage record.
pub mod counters {
    /// Photos admitted and not yet erased.
    pub const PHOTOS: &str = "photos";
    /// Bytes of live blobs.
    pub const BLOB_BYTES: &str = "blob_bytes";
    /// Uploads opened and neither finalized nor collected.
    pub const OPEN_UPLOADS: &str = "open_uploads";
}

fn usage_key(tenant: &TenantId) -> ItemKey {
    ItemKey::new(format!("TENANT#{tenant}"), "USAGE")
}

fn bytes_of(item: Option<&Item>) -> u64 {
    item.and_then(|i| i.body["stored_bytes"].as_i64())
        .unwrap_or(0)
        .max(0) as u64
}

/// Bytes of dataset images the tenant stores.
pub async fn stored_bytes(store: &dyn StateStore, tenant: &TenantId) -> Result<u64, CatalogError> {
    Ok(bytes_of(store.get(&usage_key(tenant)).await?.as_ref()))
}

/// Refuse `adding` more bytes if they would take the tenant past its quota; make sure
/// the usage record exists for the counter writes that follow.
pub async fn check_stored(
    store: &dyn StateStore,
    tenant: &TenantId,
    adding: u64,
) -> Result<(), CatalogError> {
    let used = ensure_usage(store, tenant).await?;
    if used.saturating_add(adding) > MAX_STORED_BYTES {
        return Err(CatalogError::TooLarge(format!(
            "tenant {tenant} stores {} MiB of images; {} MiB more would pass its quota of {} GiB; delete datasets or images first",
            used >> 20,
            adding >> 20,
            MAX_STORED_BYTES >> 30
        )));
    }
    Ok(())
}

/// Create the tenant's usage record if it has none (counter writes need it; images
/// stored before quotas were counted start it at 0); the bytes it counts.
pub async fn ensure_usage(store: &dyn StateStore, tenant: &TenantId) -> Result<u64, CatalogError> {
    if let Some(item) = store.get(&usage_key(tenant)).await? {
        return Ok(bytes_of(Some(&item)));
    }
    match store
        .transact(vec![Write::Put {
            item: Item::new(usage_key(tenant), serde_json::json!({ "stored_bytes": 0 })),
            condition: Condition::Absent,
        }])
        .await
    {
        // Created meanwhile by a racing request: read what it holds.
        Err(e) if e.is_conflict() => stored_bytes(store, tenant).await,
        other => other.map(|_| 0).map_err(Into::into),
    }
}

/// The counter write for `delta` bytes (negative when images go).
pub fn add_stored(tenant: &TenantId, delta: i64) -> Write {
    Write::Add {
        key: usage_key(tenant),
        deltas: vec![("stored_bytes".into(), delta)],
    }
}

/// Items the photos counter's admissions are spread over. Every photo admitted adds one,
/// and a burst into one tenant sent all of them to its one usage record: the load
/// rehearsal counted 70 % of a partition's write limit there at 116 photos a second.
/// Admissions add to a shard picked at random (each its own partition); releases, far
/// rarer, subtract on the usage record; the count is the record's plus every shard's.
pub const PHOTO_COUNT_SHARDS: u32 = 16;

fn photo_shard_key(tenant: &TenantId, shard: u32) -> ItemKey {
    ItemKey::new(format!("TENANT#{tenant}#PHOTOS#{shard:02}"), "COUNT")
}

fn field_of(item: Option<&Item>, field: &str) -> i64 {
    item.and_then(|i| i.body[field].as_i64()).unwrap_or(0)
}

/// One counter of the tenant's usage (0 where never counted); the photos counter
/// includes its shards.
pub async fn counter(
    store: &dyn StateStore,
    tenant: &TenantId,
    field: &str,
) -> Result<u64, CatalogError> {
    ensure_usage(store, tenant).await?;
    let mut total = field_of(store.get(&usage_key(tenant)).await?.as_ref(), field);
    if field == counters::PHOTOS {
        let shards = futures_util::future::try_join_all(
            (0..PHOTO_COUNT_SHARDS)
                .map(|s| async move { store.get(&photo_shard_key(tenant, s)).await }),
        )
        .await?;
        total += shards
            .iter()
            .map(|i| field_of(i.as_ref(), field))
            .sum::<i64>();
    }
    Ok(total.max(0) as u64)
}

/// Refuse `adding` to `field` if it would pass `max`; `what` names the quota for people.
/// Makes sure the usage record exists for the counter writes that follow.
pub async fn check(
    store: &dyn StateStore,
    tenant: &TenantId,
    field: &str,
    adding: u64,
    max: u64,
    what: &str,
) -> Result<(), CatalogError> {
    let used = counter(store, tenant, field).await?;
    if used.saturating_add(adding) > max {
        return Err(CatalogError::Quota(format!(
            "tenant {tenant} holds {used} {what}, and its quota is {max}; erase some first"
        )));
    }
    Ok(())
}

/// The counter write for `delta` on `field` (the usage record must exist: call
/// [`ensure_usage`] first).
pub fn add(tenant: &TenantId, field: &str, delta: i64) -> Write {
    Write::Add {
        key: usage_key(tenant),
        deltas: vec![(field.into(), delta)],
    }
}

/// Admit one more photo for the tenant, or refuse it at [`MAX_PHOTOS`]. The count goes
/// to one of [`PHOTO_COUNT_SHARDS`] items, made on its first admission.
pub async fn admit_photo(store: &dyn StateStore, tenant: &TenantId) -> Result<(), CatalogError> {
    check(store, tenant, counters::PHOTOS, 1, MAX_PHOTOS, "photos").await?;
    let shard = crate::records::due_shard(&JobId::new().to_string()) % PHOTO_COUNT_SHARDS;
    let key = photo_shard_key(tenant, shard);
    for _ in 0..3 {
        let added = store
            .transact(vec![Write::Add {
                key: key.clone(),
                deltas: vec![(counters::PHOTOS.into(), 1)],
            }])
            .await;
        match added {
            Err(e) if e.is_conflict() => {}
            other => return Ok(other?),
        }
        // No such shard yet: make it with this admission (a racing first admission
        // makes it instead, and this one adds to it on the next round).
        let made = store
            .transact(vec![Write::Put {
                item: Item::new(key.clone(), serde_json::json!({ counters::PHOTOS: 1 })),
                condition: Condition::Absent,
            }])
            .await;
        match made {
            Err(e) if e.is_conflict() => continue,
            other => return Ok(other?),
        }
    }
    Err(CatalogError::Unavailable(format!(
        "the photo count of tenant {tenant} could not be written (shard {shard} kept changing)"
    )))
}

fn reconstructions_partition(tenant: &TenantId) -> String {
    format!("TENANT#{tenant}#RECONS")
}

/// The write that counts `job` among the tenant's reconstructions (committed right
/// after the job is submitted; finished ones are dropped by the next check).
pub fn record_reconstruction(tenant: &TenantId, job: JobId) -> Write {
    Write::Put {
        item: Item::new(
            ItemKey::new(reconstructions_partition(tenant), job.to_string()),
            serde_json::json!({ "job": job }),
        ),
        condition: Condition::None,
    }
}

/// Refuse a new reconstruction while the tenant has [`MAX_ACTIVE_RECONSTRUCTIONS`]
/// unfinished ones. Reconstructions are listed apart from the tenant's other jobs (a
/// thousand photo ingests cannot hide them), and entries of finished jobs are dropped
/// as they are seen. Submissions racing each other at the limit may each pass.
pub async fn check_active_reconstructions(
    store: &dyn StateStore,
    tenant: &TenantId,
) -> Result<(), CatalogError> {
    let page = store
        .query(&Query::partition(
            Index::Table,
            reconstructions_partition(tenant),
            MAX_ACTIVE_RECONSTRUCTIONS * 4,
        ))
        .await?;
    let mut active = 0;
    for entry in &page.items {
        let job: Option<JobId> = entry.body["job"].as_str().and_then(|j| j.parse().ok());
        let live = match job {
            Some(id) => store
                .get(&crate::records::job_key(id))
                .await?
                .and_then(|i| crate::records::job_from(&i).ok())
                .is_some_and(|j| !(j.sealed && j.finished() >= j.tasks_total)),
            None => false,
        };
        if live {
            active += 1;
        } else {
            super::drop_if_unchanged(store, entry).await?;
        }
    }
    if active >= MAX_ACTIVE_RECONSTRUCTIONS {
        return Err(CatalogError::Quota(format!(
            "tenant {tenant} has {active} reconstructions queued or running, its quota; wait for one to finish or cancel one"
        )));
    }
    Ok(())
}
