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

/// Items every counter's writes are spread over. Every admitted photo, opened or
/// finalized upload and registered image adds to a counter, and with one usage record
/// per tenant a burst sent all of them to one partition: the load rehearsal counted
/// 65–84 % of a partition's write limit there at its extrapolated peak. Each write goes
/// to a shard picked at random (each its own partition); a count is the record's (what
/// it held before sharding) plus every shard's.
pub const USAGE_SHARDS: u32 = 16;

/// Set on a usage record once its shards exist.
const SHARDED: &str = "sharded";

fn usage_key(tenant: &TenantId) -> ItemKey {
    ItemKey::new(format!("TENANT#{tenant}"), "USAGE")
}

fn usage_shard_key(tenant: &TenantId, shard: u32) -> ItemKey {
    ItemKey::new(format!("TENANT#{tenant}#USAGE#{shard:02}"), "USAGE")
}

fn field_of(item: Option<&Item>, field: &str) -> i64 {
    item.and_then(|i| i.body[field].as_i64()).unwrap_or(0)
}

/// `field` summed over the usage record (`record`, as read) and its shards (0 where
/// never counted).
async fn sum_with(
    store: &dyn StateStore,
    tenant: &TenantId,
    record: Option<&Item>,
    field: &str,
) -> Result<u64, CatalogError> {
    let keys: Vec<ItemKey> = (0..USAGE_SHARDS)
        .map(|s| usage_shard_key(tenant, s))
        .collect();
    let shards = futures_util::future::try_join_all(keys.iter().map(|k| store.get(k))).await?;
    let total: i64 = field_of(record, field)
        + shards
            .iter()
            .map(|i| field_of(i.as_ref(), field))
            .sum::<i64>();
    Ok(total.max(0) as u64)
}

/// Bytes of dataset images the tenant stores.
pub async fn stored_bytes(store: &dyn StateStore, tenant: &TenantId) -> Result<u64, CatalogError> {
    let record = store.get(&usage_key(tenant)).await?;
    sum_with(store, tenant, record.as_ref(), "stored_bytes").await
}

/// Refuse `adding` more bytes if they would take the tenant past its quota; make sure
/// the usage record exists for the counter writes that follow.
pub async fn check_stored(
    store: &dyn StateStore,
    tenant: &TenantId,
    adding: u64,
) -> Result<(), CatalogError> {
    let record = ensure(store, tenant).await?;
    let used = sum_with(store, tenant, Some(&record), "stored_bytes").await?;
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

/// Make sure the tenant's usage record and its shards exist (counter writes need them;
/// a tenant counted before quotas, or before sharding, gets them now).
pub async fn ensure_usage(store: &dyn StateStore, tenant: &TenantId) -> Result<(), CatalogError> {
    ensure(store, tenant).await.map(|_| ())
}

/// [`ensure_usage`], answering the usage record as read (one read when it is ready,
/// which is every time but the tenant's first).
async fn ensure(store: &dyn StateStore, tenant: &TenantId) -> Result<Item, CatalogError> {
    let record = store.get(&usage_key(tenant)).await?;
    if let Some(r) = record
        .as_ref()
        .filter(|i| i.body[SHARDED].as_bool() == Some(true))
    {
        return Ok(r.clone());
    }
    // Each item made if absent, one at a time: makers racing each other each find
    // what the other made (a conflict here is "already there").
    let mut made = Vec::new();
    if record.is_none() {
        made.push(Item::new(
            usage_key(tenant),
            serde_json::json!({ "stored_bytes": 0 }),
        ));
    }
    made.extend(
        (0..USAGE_SHARDS).map(|s| Item::new(usage_shard_key(tenant, s), serde_json::json!({}))),
    );
    for item in made {
        match store
            .transact(vec![Write::Put {
                item,
                condition: Condition::Absent,
            }])
            .await
        {
            Err(e) if e.is_conflict() => {}
            other => other?,
        }
    }
    match store
        .transact(vec![Write::Set {
            key: usage_key(tenant),
            fields: vec![(SHARDED.into(), serde_json::Value::Bool(true))],
            condition: Condition::Exists,
        }])
        .await
    {
        Err(e) if e.is_conflict() => {}
        other => other?,
    }
    store.get(&usage_key(tenant)).await?.ok_or_else(|| {
        CatalogError::Unavailable(format!("the usage record of tenant {tenant} was not made"))
    })
}

/// The counter write for `delta` bytes of images (negative when images go).
pub fn add_stored(tenant: &TenantId, delta: i64) -> Write {
    add(tenant, "stored_bytes", delta)
}

/// One counter of the tenant's usage (0 where never counted).
pub async fn counter(
    store: &dyn StateStore,
    tenant: &TenantId,
    field: &str,
) -> Result<u64, CatalogError> {
    let record = ensure(store, tenant).await?;
    sum_with(store, tenant, Some(&record), field).await
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

/// The counter write for `delta` on `field`, on a shard picked at random (the shards
/// must exist: call [`ensure_usage`] first).
pub fn add(tenant: &TenantId, field: &str, delta: i64) -> Write {
    let shard = crate::records::due_shard(&JobId::new().to_string()) % USAGE_SHARDS;
    Write::Add {
        key: usage_shard_key(tenant, shard),
        deltas: vec![(field.into(), delta)],
    }
}

/// Admit one more photo for the tenant, or refuse it at [`MAX_PHOTOS`].
pub async fn admit_photo(store: &dyn StateStore, tenant: &TenantId) -> Result<(), CatalogError> {
    check(store, tenant, counters::PHOTOS, 1, MAX_PHOTOS, "photos").await?;
    store
        .transact(vec![add(tenant, counters::PHOTOS, 1)])
        .await?;
    Ok(())
}

fn reconstructions_partition(tenant: &TenantId) -> String {
    format!("TENANT#{tenant}#RECONS")
}

/// Sort-key prefix of a tenant's reconstruction slots (entries written before slots,
/// keyed by their job id, share the partition and are counted until they finish).
const SLOT: &str = "SLOT#";

/// How long a slot reserved for a submission that never recorded its job (its process
/// died in between) holds its place.
pub const RESERVATION_TTL_MS: i64 = 10 * 60 * 1000;

/// Attempts at taking a free slot while other submissions take them too.
const RESERVE_ATTEMPTS: usize = 2 * MAX_ACTIVE_RECONSTRUCTIONS;

/// One of a tenant's [`MAX_ACTIVE_RECONSTRUCTIONS`] places, taken by a conditional write
/// before its job is submitted: two submissions racing for the last place cannot both
/// take it (a check of the count followed by a write let each of them pass).
#[derive(Debug, Clone)]
pub struct ReconstructionSlot {
    key: ItemKey,
    token: String,
}

impl ReconstructionSlot {
    /// The write that records `job` in the slot (once it is submitted); it fails only if
    /// the reservation outlived [`RESERVATION_TTL_MS`] and another submission took it.
    pub fn commit(&self, job: JobId) -> Write {
        Write::Put {
            item: Item::new(
                self.key.clone(),
                serde_json::json!({ "token": self.token, "job": job }),
            ),
            condition: Condition::field_eq("token", self.token.clone()),
        }
    }

    /// The write that gives the slot back (the submission failed).
    pub fn release(&self) -> Write {
        Write::Delete {
            key: self.key.clone(),
            condition: Condition::field_eq("token", self.token.clone()),
        }
    }
}

/// Take one of the tenant's reconstruction slots, or refuse with [`CatalogError::Quota`]
/// while [`MAX_ACTIVE_RECONSTRUCTIONS`] are queued or running. A slot is free when it
/// was never taken, when its job has finished, or when its reservation expired with no
/// job. Reconstructions are listed apart from the tenant's other jobs (a thousand photo
/// ingests cannot hide them).
pub async fn reserve_reconstruction(
    store: &dyn StateStore,
    tenant: &TenantId,
) -> Result<ReconstructionSlot, CatalogError> {
    let mut known: std::collections::HashMap<JobId, bool> = std::collections::HashMap::new();
    for _ in 0..RESERVE_ATTEMPTS {
        let page = store
            .query(&Query::partition(
                Index::Table,
                reconstructions_partition(tenant),
                MAX_ACTIVE_RECONSTRUCTIONS * 4,
            ))
            .await?;
        let now = crate::clock::Millis::now().0;
        let mut held: [Option<&Item>; MAX_ACTIVE_RECONSTRUCTIONS] =
            [None; MAX_ACTIVE_RECONSTRUCTIONS];
        let mut live_slots = [false; MAX_ACTIVE_RECONSTRUCTIONS];
        let mut legacy_live = 0;
        // A job is counted once, in the first slot naming it; another slot naming it
        // is free to take (a resubmission records the job it found).
        let mut counted: std::collections::HashSet<JobId> = std::collections::HashSet::new();
        for entry in &page.items {
            let job: Option<JobId> = entry.body["job"].as_str().and_then(|j| j.parse().ok());
            let live = match job {
                Some(id) if counted.contains(&id) => false,
                Some(id) => match known.get(&id) {
                    Some(l) => *l,
                    None => {
                        let l = store
                            .get(&crate::records::job_key(id))
                            .await?
                            .and_then(|i| crate::records::job_from(&i).ok())
                            .is_some_and(|j| !j.is_over());
                        known.insert(id, l);
                        l
                    }
                },
                None => entry.body["reserved_at"]
                    .as_i64()
                    .is_some_and(|at| now - at < RESERVATION_TTL_MS),
            };
            if let (true, Some(id)) = (live, job) {
                counted.insert(id);
            }
            match entry
                .key
                .sk
                .strip_prefix(SLOT)
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n < MAX_ACTIVE_RECONSTRUCTIONS)
            {
                Some(n) => {
                    held[n] = Some(entry);
                    live_slots[n] = live;
                }
                None if live => legacy_live += 1,
                None => super::drop_if_unchanged(store, entry).await?,
            }
        }
        let active = legacy_live + live_slots.iter().filter(|l| **l).count();
        if active >= MAX_ACTIVE_RECONSTRUCTIONS {
            return Err(CatalogError::Quota(format!(
                "tenant {tenant} has {active} reconstructions queued or running, its quota; wait for one to finish or cancel one"
            )));
        }
        // Slots past what entries from before slots leave free are not offered; the free
        // one is picked from a random start, so racing submissions rarely pick the same.
        let usable = MAX_ACTIVE_RECONSTRUCTIONS - legacy_live;
        let token = JobId::new().to_string();
        let start = token.bytes().fold(0x811c_9dc5_u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        }) as usize
            % usable;
        let Some(n) = (0..usable)
            .map(|i| (start + i) % usable)
            .find(|n| !live_slots[*n])
        else {
            continue;
        };
        let write = Write::Put {
            item: Item::new(
                ItemKey::new(reconstructions_partition(tenant), format!("{SLOT}{n:02}")),
                serde_json::json!({ "token": token, "reserved_at": now }),
            ),
            condition: match held[n] {
                Some(stale) => Condition::Rev(stale.rev),
                None => Condition::Absent,
            },
        };
        match store.transact(vec![write]).await {
            Ok(_) => {
                return Ok(ReconstructionSlot {
                    key: ItemKey::new(reconstructions_partition(tenant), format!("{SLOT}{n:02}")),
                    token,
                });
            }
            // Another submission took it first: look again.
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(CatalogError::Unavailable(format!(
        "tenant {tenant}'s reconstructions are being submitted faster than their places can be taken; retry"
    )))
}
