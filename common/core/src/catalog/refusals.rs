//! Uploads that ingest refused for good (not an image, truncated, too large, …).
//!
//! A refused upload never gets a photo row, yet its bytes are an unblurred photo of
//! somebody. So its refusal is a record of its own: listed with the project's photos
//! (failed, with the reason), erasable by its photo id like any photo, counted in the
//! tenant's photo quota, and collected with its bytes [`REFUSAL_LIFETIME`] after the
//! refusal, as an unfinished upload is: long enough to read why and upload again,
//! short enough that nothing unusable and unblurred is kept.

use super::CatalogError;
use crate::ports::state_store::{Condition, Index, Item, ItemKey, Query, Write};
use crate::ports::{ObjectStore, StateStore};
use crate::{Millis, PhotoId, ProjectId, records};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How long a refused upload's bytes and record are kept.
pub const REFUSAL_LIFETIME: Duration = super::uploads::UPLOAD_LIFETIME;

/// An upload that ingest refused for good: the only trace of a photo that never got a
/// row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefusedUpload {
    /// The photo id the upload was given.
    pub photo_id: PhotoId,
    /// Its project.
    pub project: ProjectId,
    /// Its file name.
    pub name: String,
    /// Why, naming the file.
    pub reason: String,
    /// When.
    pub at: Millis,
}

impl RefusedUpload {
    /// Where its bytes are (everything uploaded under its photo id).
    pub fn objects_prefix(&self) -> String {
        format!("uploads/{}/{}/", self.project, self.photo_id)
    }
}

/// The by-parent partition of a project's refused uploads, sorted by photo id as its
/// photos' partition is (so the two page together).
pub fn refused_partition(project: ProjectId) -> String {
    format!("PROJECT#{project}#REFUSED")
}

/// How a refusal record's key begins (the collector tells its items by it).
pub(super) const KEY_PREFIX: &str = "REFUSED#";

/// The key of `photo`'s refusal record.
pub fn refusal_key(photo: PhotoId) -> ItemKey {
    ItemKey::new(format!("{KEY_PREFIX}{photo}"), "REFUSED")
}

/// The write that records a refusal (replacing an earlier one for the same photo),
/// due for collection [`REFUSAL_LIFETIME`] from its time.
pub fn record_refusal(r: &RefusedUpload) -> Write {
    let key = refusal_key(r.photo_id);
    let mut item = Item::new(key.clone(), serde_json::to_value(r).expect("serializable"));
    item.by_parent = Some(ItemKey::new(
        refused_partition(r.project),
        r.photo_id.to_string(),
    ));
    item.by_due = Some(super::expiry_index_key(
        r.at.plus(REFUSAL_LIFETIME),
        &key.pk,
    ));
    Write::Put {
        item,
        condition: Condition::None,
    }
}

/// The write that forgets a refusal.
pub fn forget_refusal(photo: PhotoId) -> Write {
    Write::Delete {
        key: refusal_key(photo),
        condition: Condition::None,
    }
}

/// The refusal of `photo`, if it was refused and not collected.
pub async fn refusal(
    store: &dyn StateStore,
    photo: PhotoId,
) -> Result<Option<RefusedUpload>, CatalogError> {
    Ok(match store.get(&refusal_key(photo)).await? {
        Some(item) => Some(records::decode(&item)?),
        None => None,
    })
}

/// The project's refused uploads.
pub async fn refusals(
    store: &dyn StateStore,
    project: ProjectId,
) -> Result<Vec<RefusedUpload>, crate::ports::state_store::StoreError> {
    crate::projects::query_all(
        store,
        Query::partition(Index::ByParent, refused_partition(project), 500),
    )
    .await
}

/// Collect a due refusal: its bytes, its record, and its place in the tenant's photo
/// quota. A later upload of the same photo id that was ingested owns those bytes now:
/// then only the record goes.
pub(crate) async fn collect(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    item: &Item,
) -> Result<(), CatalogError> {
    let r: RefusedUpload = records::decode(item)?;
    if store.get(&records::photo_key(r.photo_id)).await?.is_some() {
        return super::drop_if_unchanged(store, item).await;
    }
    super::delete_prefix(objects, &r.objects_prefix()).await?;
    let mut writes = vec![Write::Delete {
        key: item.key.clone(),
        condition: Condition::Rev(item.rev),
    }];
    if let Some(p) = store.get(&records::project_key(r.project)).await? {
        let project: crate::domain::Project = records::decode(&p)?;
        super::quotas::ensure_usage(store, &project.tenant).await?;
        writes.push(super::quotas::add(
            &project.tenant,
            super::quotas::counters::PHOTOS,
            -1,
        ));
    }
    match store.transact(writes).await {
        // Refused again meanwhile: the newer refusal is collected in its time.
        Err(e) if e.is_conflict() => Ok(()),
        other => Ok(other?),
    }
}
