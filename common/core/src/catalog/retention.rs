//! Keeping originals only as long as a project says (`upload_retention_days`).
//!
//! Ingest records, with the photo's row, a marker due when the original's time is up;
//! the reaper's collector ([`super::collect::collect_expired`]) hands due markers to
//! [`expire_original`], which deletes the upload and its unblurred
//! thumbnail and marks the row. The published (blurred) files stay. A photo whose
//! original is gone cannot be decided again: when a subject change or an edit would
//! need that, processing fails permanently and the photo is unpublished (fail closed).

use super::CatalogError;
use crate::photo::Photo;
use crate::ports::state_store::{Condition, Item, ItemKey, Write};
use crate::ports::{ObjectStore, StateStore};
use crate::{Millis, PhotoId, records};

/// How a retention marker's key begins (the collector tells its items by it).
pub(super) const KEY_PREFIX: &str = "RETAIN#";

pub(super) fn marker_key(photo: PhotoId) -> ItemKey {
    ItemKey::new(format!("{KEY_PREFIX}{photo}"), "RETAIN")
}

/// The marker for `row`, due `days` after now.
pub fn marker(row: &Photo, days: u32) -> Write {
    super::due_item(
        marker_key(row.id),
        serde_json::json!({ "photo": row.id }),
        Millis::now().plus(std::time::Duration::from_secs(u64::from(days) * 86_400)),
    )
}

/// Delete the original of the photo a due marker names (idempotent), then the marker.
pub async fn expire_original(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    marker: &Item,
) -> Result<(), CatalogError> {
    let photo: PhotoId = marker.body["photo"]
        .as_str()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| CatalogError::Invalid("retention marker names no photo".into()))?;
    if let Some(item) = store.get(&records::photo_key(photo)).await? {
        let row: Photo = records::decode(&item)?;
        // The row first: from now on nothing tries to read the original.
        store
            .transact(vec![Write::Set {
                key: records::photo_key(photo),
                fields: vec![
                    (
                        "original_deleted_at".into(),
                        serde_json::to_value(Millis::now()).expect("serializable"),
                    ),
                    ("upload_thumb_key".into(), serde_json::Value::Null),
                ],
                condition: Condition::Exists,
            }])
            .await?;
        for key in std::iter::once(&row.upload_key).chain(row.upload_thumb_key.as_ref()) {
            objects.delete(key).await?;
        }
        // A finalized upload it was added from holds the same bytes.
        if let Some(p) = store.get(&records::project_key(row.project)).await? {
            let project: crate::domain::Project = records::decode(&p)?;
            super::uploads::erase_blob(store, objects, &project.tenant, &row.sha256).await?;
        }
    }
    super::drop_if_unchanged(store, marker).await
}
