//! The collector: what the expiry index says is due is removed, by the reaper's pass —
//! unfinished uploads with their chunks, finalized uploads' records, blobs, dataset
//! image contents whose deleter died ([`super::image_bytes`]), photo
//! originals past their project's retention ([`super::retention`]), refused uploads
//! ([`super::refusals`]) and the second sweep of every erasure ([`super::erasure`]).

use super::CatalogError;
use super::uploads::{Upload, UploadState, chunks_prefix};
use crate::Millis;

use crate::ports::state_store::{Condition, Index, Item, ItemKey, Query, Write};
use crate::ports::{ObjectStore, StateStore};
use serde::Serialize;
use std::time::{Duration, Instant};

/// What one collection pass removed.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Collected {
    /// Unfinished uploads removed with their chunks.
    pub uploads: usize,
    /// Finalized uploads' records removed.
    pub records: usize,
    /// Blobs removed.
    pub blobs: usize,
    /// Dataset image contents no image names, whose deleter did not finish.
    pub image_contents: usize,
    /// Erasures given their second sweep.
    pub erasures: usize,
    /// Photo originals deleted under their project's retention.
    pub originals: usize,
    /// Refused uploads removed with their bytes.
    pub refusals: usize,
    /// Items that could not be collected now (tried again in an hour).
    pub failed: usize,
    /// What the last of those said.
    pub last_error: Option<String>,
    /// The pass stopped at its time limit with items still due.
    pub cut_short: bool,
}

/// Remove what expired by `now`: up to `limit` items of the expiry index (its shards
/// in turn). Safe to run concurrently and to repeat after a crash (every step is
/// conditional or idempotent).
pub async fn collect_expired(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    now: Millis,
    limit: usize,
) -> Result<Collected, CatalogError> {
    let unbounded = Instant::now() + Duration::from_secs(86_400);
    collect_expired_until(store, objects, now, limit, unbounded).await
}

/// [`collect_expired`], starting no new item after `until` once one was collected: the
/// reaper's pass must end inside its function's timeout, and what is left is due again
/// at the next pass; one item a pass at least, so a pass that starts late still makes
/// progress.
pub async fn collect_expired_until(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    now: Millis,
    limit: usize,
    until: Instant,
) -> Result<Collected, CatalogError> {
    let mut done = Collected::default();
    let mut left = limit.max(1);
    let mut time = crate::clock::ShareOfPass::until(until);
    for partition in crate::records::due_partitions_turned(super::EXPIRY, now) {
        if left == 0 {
            break;
        }
        if time.is_up() {
            done.cut_short = true;
            break;
        }
        let mut q = Query::partition(Index::ByDue, partition, left);
        q.sk_max = Some(format!("{}#~", now.sort_key()));
        let page = store.query(&q).await?;
        left = left.saturating_sub(page.items.len());
        for item in page.items {
            if time.is_up() {
                done.cut_short = true;
                return Ok(done);
            }
            time.act();
            // One item that cannot be collected now (a store error, a damaged record)
            // must not hold up the deletions due behind it: it is tried again in an hour.
            if let Err(e) = collect_one(store, objects, &item, &mut done).await {
                done.failed += 1;
                done.last_error = Some(format!("{} / {}: {e}", item.key.pk, item.key.sk));
                let mut later = item.clone();
                later.by_due = Some(super::expiry_index_key(now.plus(RETRY_AFTER), &item.key.pk));
                let _ = store
                    .transact(vec![Write::Put {
                        item: later,
                        condition: Condition::Rev(item.rev),
                    }])
                    .await;
            }
        }
    }
    Ok(done)
}

/// The kinds of record the expiry index holds, each told by the key prefix its own
/// module gives it: renaming a prefix there renames it here, and an item of no kind is
/// an error the collector reports (counted in `failed`), never one it skips in silence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expiring {
    Upload,
    Blob,
    ImageBytes,
    Refusal,
    Original,
    Erasure,
}

impl Expiring {
    fn of(key: &ItemKey) -> Option<Self> {
        [
            (super::uploads::UPLOAD_PREFIX, Expiring::Upload),
            (super::uploads::BLOB_PREFIX, Expiring::Blob),
            (super::image_bytes::KEY_PREFIX, Expiring::ImageBytes),
            (super::refusals::KEY_PREFIX, Expiring::Refusal),
            (super::retention::KEY_PREFIX, Expiring::Original),
            (super::erasure::KEY_PREFIX, Expiring::Erasure),
        ]
        .into_iter()
        .find(|(prefix, _)| key.pk.starts_with(prefix))
        .map(|(_, kind)| kind)
    }
}

/// How long an item that could not be collected waits before the next try.
const RETRY_AFTER: Duration = Duration::from_secs(3600);

async fn collect_one(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    item: &Item,
    done: &mut Collected,
) -> Result<(), CatalogError> {
    let Some(kind) = Expiring::of(&item.key) else {
        return Err(CatalogError::Invalid(format!(
            "no collector knows items like {} / {}; it stays in the expiry index",
            item.key.pk, item.key.sk
        )));
    };
    match kind {
        Expiring::Upload => {
            let u: Upload = crate::records::decode(item)?;
            if u.state != UploadState::Finalized {
                super::delete_prefix(objects, &chunks_prefix(&u.upload_id)).await?;
                done.uploads += 1;
                // Still open when it expired: no longer counted against the quota.
                super::quotas::ensure_usage(store, &u.tenant).await?;
                match store
                    .transact(vec![
                        Write::Delete {
                            key: item.key.clone(),
                            condition: Condition::Rev(item.rev),
                        },
                        super::quotas::add(&u.tenant, super::quotas::counters::OPEN_UPLOADS, -1),
                    ])
                    .await
                {
                    Err(e) if e.is_conflict() => {}
                    other => other?,
                }
            } else {
                done.records += 1;
                super::drop_if_unchanged(store, item).await?;
            }
        }
        Expiring::ImageBytes => {
            if super::image_bytes::collect_orphan(store, objects, item).await? {
                done.image_contents += 1;
            }
        }
        Expiring::Refusal => {
            super::refusals::collect(store, objects, item).await?;
            done.refusals += 1;
        }
        Expiring::Original => {
            super::retention::expire_original(store, objects, item).await?;
            done.originals += 1;
        }
        Expiring::Erasure => {
            super::erasure::final_sweep(store, objects, item).await?;
            done.erasures += 1;
        }
        Expiring::Blob => {
            if !super::uploads::collect_blob(store, objects, item).await? {
                return Ok(());
            }
            done.blobs += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PhotoId, ProjectId, TenantId};

    /// Every kind is told from the key its own module writes, so a prefix renamed there
    /// cannot stop its collection here.
    #[test]
    fn each_expiring_record_is_told_by_the_key_its_module_writes() {
        let tenant = TenantId::local();
        let photo = PhotoId::new();
        for (key, kind) in [
            (
                super::super::uploads::upload_key(&tenant, "u1"),
                Expiring::Upload,
            ),
            (
                super::super::uploads::blob_record_key(&tenant, &"ab".repeat(32)),
                Expiring::Blob,
            ),
            (
                super::super::image_bytes::record_key(crate::DatasetId::new(), &"cd".repeat(32)),
                Expiring::ImageBytes,
            ),
            (
                super::super::refusals::refusal_key(photo),
                Expiring::Refusal,
            ),
            (
                super::super::retention::marker_key(photo),
                Expiring::Original,
            ),
            (
                super::super::erasure::marker_key(&format!("project/{}", ProjectId::new())),
                Expiring::Erasure,
            ),
        ] {
            assert_eq!(Expiring::of(&key), Some(kind), "{key:?}");
        }
        assert_eq!(
            Expiring::of(&ItemKey::new(format!("PHOTO#{photo}"), "PHOTO")),
            None
        );
    }
}
